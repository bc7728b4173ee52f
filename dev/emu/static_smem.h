// Device emulation, each kernel's static shared memory: the bytes of its __shared__ variables as
// nvcc compiles them for sm_90 (cudaFuncAttributes::sharedSizeBytes), which the emulated build
// cannot measure (its __shared__ variables are host statics in one section: shared_space.h).
// The sizes come from dev/emu/static_smem_table.inc, generated from cuobjdump -res-usage of the
// nvcc-compiled kernels by dev/emu/static_smem_table.py, keyed by the mangled symbol (the same in
// both builds: the emulated build compiles the same sources with the same Itanium mangling). A
// kernel nvcc compiles into several programs gets the largest of its sizes there (nvcc lays out a
// module's static shared variables together; they differ by a few bytes). A kernel without an
// entry ends the process: its launch limits cannot be checked.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

#include "dev/emu/kernel_symbol.h"

namespace llmc::emu {

struct StaticSmemEntry {
    const char* mangled;  // the kernel's symbol
    size_t bytes;         // its static shared memory, without the 1 KiB the system reserves per block
};

// Sorted by mangled name (the generator writes it so; static_smem_table_sorted() checks).
inline constexpr StaticSmemEntry kStaticSmemTable[] = {
#include "dev/emu/static_smem_table.inc"
};

inline bool static_smem_table_sorted() {
    return std::is_sorted(
        std::begin(kStaticSmemTable), std::end(kStaticSmemTable),
        [](const StaticSmemEntry& a, const StaticSmemEntry& b) { return std::strcmp(a.mangled, b.mangled) < 0; });
}

// The table's entry for the kernel at fn, nullptr when it has none.
inline const StaticSmemEntry* find_static_smem(const void* fn) {
    static const bool sorted = static_smem_table_sorted();
    const std::string sym = kernel_symbol(fn);
    if (!sorted || sym.empty()) return nullptr;
    const auto it = std::lower_bound(
        std::begin(kStaticSmemTable), std::end(kStaticSmemTable), sym,
        [](const StaticSmemEntry& e, const std::string& s) { return std::strcmp(e.mangled, s.c_str()) < 0; });
    return it != std::end(kStaticSmemTable) && sym == it->mangled ? &*it : nullptr;
}

// Ends the process for a kernel the table lacks, with a line naming it and the fix: without its
// size a launch could pass here and be refused on a GPU.
[[noreturn]] inline void no_static_smem_entry(const void* fn, const std::string& kernel) {
    const std::string sym = kernel_symbol(fn);
    std::fflush(stdout);
    std::fprintf(stderr,
                 "emulated device error: kernel %s (symbol %s) has no static shared-memory size in "
                 "dev/emu/static_smem_table.inc%s, so its launch limits cannot be checked; regenerate the "
                 "table: python3 dev/emu/static_smem_table.py\n",
                 kernel.c_str(), sym.empty() ? "none: give the kernel external linkage" : sym.c_str(),
                 static_smem_table_sorted() ? "" : " (the table is not sorted by symbol)");
    std::fflush(stderr);
    std::abort();
}

}  // namespace llmc::emu
