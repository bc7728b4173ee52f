// Device emulation, what counts as shared memory (the PTX ISA's .shared state space) for the
// instructions that take a shared address (ldmatrix, the destination of cp.async): the static
// __shared__ variables, which the emulated __shared__ keyword places in one linker section
// (dev/emu/include/cuda_runtime.h), and the running block's dynamic shared memory (grid.cpp).
//
// One exception: GCC ignores a section attribute on a function-local static of a function
// template (GCC bug 70435), so the __shared__ variables of templated kernels land in the
// program's .bss instead of the section (and are not poisoned before each block: docs/emulation.md).
// To accept them, the program's .bss counts as shared too. Global memory (device allocations)
// and local memory (fiber stacks) are heap memory, never there, so what the check exists for,
// a global or local pointer or a misaligned one, is still refused; a host global variable, which
// no kernel touches, is not.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "dev/emu/block.h"

// The bounds of that section, defined by the linker (weak: a program may have no static shared
// variable at all).
extern "C" char __start_llmc_emu_shared[] __attribute__((weak));
extern "C" char __stop_llmc_emu_shared[] __attribute__((weak));
// The bounds of the executable's zero-initialized static storage (GNU ld).
extern "C" char __bss_start[] __attribute__((weak));
extern "C" char _end[] __attribute__((weak));

namespace llmc::emu {

// True when the `bytes` bytes at p all lie in shared memory the running block can address: inside
// the static-shared section (every kernel's static variables share it; which variable is not
// checked), the .bss (templated kernels' static variables, above) or this launch's dynamic
// shared memory.
inline bool in_shared_memory(const BlockCtx& b, const void* p, size_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto inside = [&](const char* lo, const char* hi) {
        const uintptr_t l = reinterpret_cast<uintptr_t>(lo), h = reinterpret_cast<uintptr_t>(hi);
        return lo && hi && a >= l && a <= h && bytes <= h - a;
    };
    const char* dyn = reinterpret_cast<const char*>(b.dynamic_smem);
    return inside(__start_llmc_emu_shared, __stop_llmc_emu_shared) || inside(__bss_start, _end) ||
           inside(dyn, dyn ? dyn + b.dynamic_smem_bytes : nullptr);
}

// An address as the fault messages print it.
inline std::string address_text(const void* p) {
    char s[32];
    std::snprintf(s, sizeof s, "%p", p);
    return s;
}

}  // namespace llmc::emu
