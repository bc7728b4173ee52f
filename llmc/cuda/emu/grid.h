// Device emulation, a kernel launch: the launch configuration checked against the real device's
// limits (what would make cudaLaunchKernel fail fails here, with the same error code from
// cudaGetLastError and a line naming the kernel), then every block of the grid run in order, once
// per schedule in device().schedules; when there are several, memory is restored between runs and
// the results must be bit-identical, else the kernel has a race or a missing barrier and the run
// ends naming it (the emulated counterpart of compute-sanitizer's racecheck).
#pragma once
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>

#include "llmc/cuda/emu/block.h"
#include "llmc/cuda/emu/device_state.h"

namespace llmc::emu {

// The kernel's name from the executable's symbol table (link with -rdynamic), demangled.
inline std::string kernel_name(const void* fn) {
    Dl_info info;
    if (dladdr(fn, &info) && info.dli_sname) {
        int status = 0;
        char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        std::string s = status == 0 && d ? d : info.dli_sname;
        std::free(d);
        return s;
    }
    char b[32];
    std::snprintf(b, sizeof b, "kernel@%p", fn);
    return b;
}

// Why the configuration cannot launch on the device ("" = it can), and the error it gets.
inline std::string launch_config_error(const void* fn, dim3 grid, dim3 block, size_t smem, cudaError_t* code) {
    DeviceState& d = device();
    *code = cudaErrorInvalidConfiguration;
    const unsigned long threads = (unsigned long)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0) return "an empty grid or block";
    if (threads > kMaxThreadsPerBlock || block.x > kMaxBlockDimXY || block.y > kMaxBlockDimXY || block.z > kMaxBlockDimZ)
        return "block (" + std::to_string(block.x) + "," + std::to_string(block.y) + "," + std::to_string(block.z) +
               ") exceeds 1024 threads per block (x, y <= 1024, z <= 64)";
    if (grid.x > kMaxGridDimX || grid.y > kMaxGridDimYZ || grid.z > kMaxGridDimYZ)
        return "grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," + std::to_string(grid.z) +
               ") exceeds the limits x <= 2^31-1, y <= 65535, z <= 65535";
    if (smem > kSharedDefault) {
        *code = cudaErrorInvalidValue;
        auto it = d.max_dynamic_smem.find(fn);
        const size_t allowed = it == d.max_dynamic_smem.end() ? kSharedDefault : (size_t)it->second;
        if (smem > allowed)
            return std::to_string(smem) + " bytes of dynamic shared memory, above " + std::to_string(allowed) +
                   (it == d.max_dynamic_smem.end()
                        ? " (48 KB without cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n))"
                        : " (the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize)");
    }
    return "";
}

// The static __shared__ variables of the whole program (the section the emulated __shared__ puts
// them in; the linker defines its bounds; weak: a program may have none).
extern "C" char __start_llmc_emu_shared[] __attribute__((weak));
extern "C" char __stop_llmc_emu_shared[] __attribute__((weak));

// Fills every static shared variable with 0xFF bytes (NaN), redzones between them included, so
// written byte by byte without AddressSanitizer's checks.
__attribute__((no_sanitize("address"))) inline void poison_static_shared() {
    volatile char* p = __start_llmc_emu_shared;
    volatile char* e = __stop_llmc_emu_shared;
    if (!p || !e) return;
    for (; p < e; ++p) *p = (char)0xFF;
}

// Runs every block of the grid once under `sched`; body() is the kernel with its arguments.
inline void run_grid_once(const std::string& name, dim3 grid, dim3 block, size_t smem,
                          const std::function<void()>& body, const ScheduleSpec& sched) {
    DeviceState& d = device();
    BlockCtx b;
    b.kernel = name;
    b.grid_dim = grid;
    b.block_dim = block;
    const size_t threads = (size_t)block.x * block.y * block.z;
    b.threads.resize(threads);
    b.warps.resize((threads + kWarpSize - 1) / kWarpSize);
    // exact size, 16-byte aligned like the real allocation; poisoned per block (a GPU gives garbage)
    std::unique_ptr<unsigned char[]> dyn(smem ? new unsigned char[smem] : nullptr);
    b.dynamic_smem = dyn.get();
    b.dynamic_smem_bytes = smem;
    uint64_t seq = 0;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                b.block_idx = uint3{x, y, z};
                if (smem) std::memset(b.dynamic_smem, 0xFF, smem);
                poison_static_shared();
                run_block(b, body, sched, d.stacks, seq++);
                d.blocks_run++;
            }
}

inline void run_grid(const void* fn, dim3 grid, dim3 block, size_t smem, const std::function<void()>& body) {
    DeviceState& d = device();
    d.launches++;
    cudaError_t code = cudaSuccess;
    const std::string bad = launch_config_error(fn, grid, block, smem, &code);
    if (!bad.empty()) {
        std::fprintf(stderr, "emulated launch error: kernel %s: %s\n", kernel_name(fn).c_str(), bad.c_str());
        d.last_error = code;
        return;
    }
    const std::string name = kernel_name(fn);
    if (d.verbose)
        std::fprintf(stderr, "emu: launch %s grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n", name.c_str(), grid.x, grid.y,
                     grid.z, block.x, block.y, block.z, smem);
    if (d.schedules.size() == 1) {
        run_grid_once(name, grid, block, smem, body, d.schedules[0]);
        return;
    }
    const auto before = d.snapshot();
    run_grid_once(name, grid, block, smem, body, d.schedules[0]);
    for (size_t s = 1; s < d.schedules.size(); s++) {
        const auto first = d.snapshot();
        d.restore(before);
        run_grid_once(name, grid, block, smem, body, d.schedules[s]);
        const auto again = d.snapshot();
        for (size_t i = 0; i < first.size(); i++) {
            if (first[i] == again[i]) continue;
            size_t off = 0;
            while (first[i][off] == again[i][off]) off++;
            size_t ndiff = 0;
            for (size_t k = off; k < first[i].size(); k++) ndiff += first[i][k] != again[i][k];
            device_fault("race: kernel " + name + " leaves different memory under the schedules " +
                         d.schedules[0].name() + " and " + d.schedules[s].name() + ": device allocation #" +
                         std::to_string(i) + " (" + std::to_string(first[i].size()) + " bytes) differs in " +
                         std::to_string(ndiff) + " bytes from byte " + std::to_string(off) +
                         " (a missing __syncthreads or a data race between threads)");
        }
    }
}

}  // namespace llmc::emu
