// Device emulation, a kernel launch (dev/emu/grid.h): the launch configuration's check, the grid's
// blocks in each schedule's order, and the schedules' comparison. Compiled once into libemu.a: these
// run once per launch or block, and every emulated unit that launches a kernel would otherwise
// compile them again (about 80% of the code of an emulated GPU test's own object).
#include "dev/emu/grid.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>

#include "dev/emu/kernel_symbol.h"
#include "dev/emu/shared_space.h"  // the static __shared__ section
#include "dev/emu/static_smem.h"   // each kernel's static shared-memory bytes (nvcc's)

namespace llmc::emu {

std::string launch_config_error(const void* fn, dim3 grid, dim3 block, size_t smem, cudaError_t* code) {
    DeviceState& d = device();
    *code = cudaErrorInvalidConfiguration;
    const unsigned long threads = (unsigned long)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0) return "an empty grid or block";
    if (threads > kMaxThreadsPerBlock || block.x > kMaxBlockDimXY || block.y > kMaxBlockDimXY ||
        block.z > kMaxBlockDimZ)
        return "block (" + std::to_string(block.x) + "," + std::to_string(block.y) + "," + std::to_string(block.z) +
               ") exceeds 1024 threads per block (x, y <= 1024, z <= 64)";
    if (grid.x > kMaxGridDimX || grid.y > kMaxGridDimYZ || grid.z > kMaxGridDimYZ)
        return "grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," + std::to_string(grid.z) +
               ") exceeds the limits x <= 2^31-1, y <= 65535, z <= 65535";
    // Shared memory (CUDA Runtime API, cudaFuncSetAttribute and cudaFuncAttributes): the kernel's
    // static bytes (sharedSizeBytes) and the launch's dynamic bytes together fit the default 48 KB;
    // after cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n) the dynamic
    // bytes fit n (static + n <= the opt-in maximum is checked when n is set: runtime.cpp).
    const StaticSmemEntry* entry = find_static_smem(fn);
    if (!entry) no_static_smem_entry(fn, kernel_name(fn));
    const size_t static_bytes = entry->bytes;
    auto it = d.max_dynamic_smem.find(fn);
    const bool opted_in = it != d.max_dynamic_smem.end();
    const size_t allowed = opted_in ? (size_t)it->second : kSharedDefault - std::min(static_bytes, kSharedDefault);
    if (smem > allowed) {
        *code = cudaErrorInvalidValue;
        return std::to_string(smem) + " bytes of dynamic shared memory, above " + std::to_string(allowed) +
               (opted_in ? " (the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize)"
                         : " (48 KB without cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                           "n), less the kernel's " +
                               std::to_string(static_bytes) +
                               " bytes of static shared memory: static + dynamic <= 49152; set the attribute to "
                               "the dynamic bytes before the launch)");
    }
    return "";
}

// Fills every static shared variable with 0xFF bytes (NaN), redzones between them included, so
// written without AddressSanitizer's checks.
__attribute__((no_sanitize("address"))) static void poison_static_shared() {
    char* p = __start_llmc_emu_shared;
    char* e = __stop_llmc_emu_shared;
    if (!p || !e) return;
    // eight bytes at a time where aligned (volatile: never turned into a memset call, which ASan
    // would check against the redzones between the section's variables)
    for (; p < e && reinterpret_cast<uintptr_t>(p) % 8 != 0; ++p) *(volatile char*)p = (char)0xFF;
    for (; p + 8 <= e; p += 8) *(volatile uint64_t*)p = ~uint64_t{0};
    for (; p < e; ++p) *(volatile char*)p = (char)0xFF;
}

// The linear index (x + y*Gx + z*Gx*Gy) of the seq-th block to run. A GPU runs a grid's blocks in
// no order it promises, so the order varies with the schedule: the forward schedules run them in
// linear order, the reverse ones in reverse, Shuffle in a seeded permutation. A kernel whose result
// depends on which block runs (or arrives) last then differs between schedules and fails the
// schedule comparison below.
static uint64_t block_in_schedule_order(const ScheduleSpec& sched, uint64_t seq, uint64_t nblocks,
                                        const std::vector<uint64_t>& shuffled) {
    switch (sched.kind) {
        case Schedule::Reverse:
        case Schedule::GreedyReverse: return nblocks - 1 - seq;
        case Schedule::Shuffle: return shuffled[seq];
        default: return seq;
    }
}

void run_grid_once(const std::string& name, dim3 grid, dim3 block, size_t smem, const std::function<void()>& body,
                   const ScheduleSpec& sched, bool programmatic) {
    DeviceState& d = device();
    BlockCtx b;
    b.kernel = name;
    b.programmatic = programmatic;
    b.grid_dim = grid;
    b.block_dim = block;
    const size_t threads = (size_t)block.x * block.y * block.z;
    b.threads.resize(threads);
    b.warps.resize((threads + kWarpSize - 1) / kWarpSize);
    // exact size, 16-byte aligned like the real allocation; poisoned per block (a GPU gives garbage)
    std::unique_ptr<unsigned char[]> dyn(smem ? new unsigned char[smem] : nullptr);
    b.dynamic_smem = dyn.get();
    b.dynamic_smem_bytes = smem;
    const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    std::vector<uint64_t> shuffled;  // Shuffle only: a seeded permutation of the blocks
    if (sched.kind == Schedule::Shuffle) {
        shuffled.resize(nblocks);
        for (uint64_t i = 0; i < nblocks; i++) shuffled[i] = i;
        std::mt19937_64 rng(sched.seed);
        std::shuffle(shuffled.begin(), shuffled.end(), rng);
    }
    for (uint64_t seq = 0; seq < nblocks; seq++) {
        const uint64_t lin = block_in_schedule_order(sched, seq, nblocks, shuffled);
        b.block_idx = uint3{(unsigned)(lin % grid.x), (unsigned)(lin / grid.x % grid.y),
                            (unsigned)(lin / ((uint64_t)grid.x * grid.y))};
        if (smem) std::memset(b.dynamic_smem, 0xFF, smem);
        poison_static_shared();
        run_block(b, body, sched, d.stacks, seq);
        d.blocks_run++;
    }
    end_block_threads(b);
}

std::vector<std::pair<uintptr_t, std::vector<unsigned char>>> snapshot_footprint(const LaunchFootprint& f) {
    DeviceState& d = device();
    std::lock_guard<std::mutex> lock(d.mu);
    std::vector<std::pair<uintptr_t, std::vector<unsigned char>>> out;
    auto take = [&](uintptr_t base, const Allocation& a) {
        for (const auto& o : out)
            if (o.first == base) return;
        auto* p = reinterpret_cast<unsigned char*>(base);
        out.emplace_back(base, std::vector<unsigned char>(p, p + a.bytes));
    };
    if (f.everything) {
        for (auto& [base, a] : d.allocs)
            if (!a.host_pinned) take(base, a);
    } else {
        for (const void* p : f.pointers)
            if (const auto* a = d.find(p); a && !a->second.host_pinned) take(a->first, a->second);
    }
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    return out;
}

void restore_footprint(const std::vector<std::pair<uintptr_t, std::vector<unsigned char>>>& s) {
    for (const auto& [base, bytes] : s) std::memcpy(reinterpret_cast<void*>(base), bytes.data(), bytes.size());
}

void run_grid_now(const void* fn, dim3 grid, dim3 block, size_t smem, const std::function<void()>& body,
                  const LaunchFootprint& footprint, bool programmatic) {
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
    d.counters.kernel(name, programmatic);
    if (d.verbose)
        std::fprintf(stderr, "emu: launch %s grid (%u,%u,%u) block (%u,%u,%u) smem %zu%s\n", name.c_str(), grid.x,
                     grid.y, grid.z, block.x, block.y, block.z, smem, programmatic ? " programmatic" : "");
    if (d.schedules.size() == 1) {
        run_grid_once(name, grid, block, smem, body, d.schedules[0], programmatic);
        return;
    }
    const auto before = snapshot_footprint(footprint);
    run_grid_once(name, grid, block, smem, body, d.schedules[0], programmatic);
    for (size_t s = 1; s < d.schedules.size(); s++) {
        const auto first = snapshot_footprint(footprint);
        restore_footprint(before);
        run_grid_once(name, grid, block, smem, body, d.schedules[s], programmatic);
        const auto again = snapshot_footprint(footprint);
        for (size_t i = 0; i < first.size(); i++) {
            const auto &x = first[i].second, &y = again[i].second;
            if (x == y) continue;
            size_t off = 0;
            while (x[off] == y[off]) off++;
            size_t ndiff = 0;
            for (size_t k = off; k < x.size(); k++) ndiff += x[k] != y[k];
            device_fault("race: kernel " + name + " leaves different memory under the schedules " +
                         d.schedules[0].name() + " and " + d.schedules[s].name() + ": the device allocation at " +
                         std::to_string(first[i].first) + " (" + std::to_string(x.size()) + " bytes) differs in " +
                         std::to_string(ndiff) + " bytes from byte " + std::to_string(off) +
                         " (a missing __syncthreads or a data race between threads)");
        }
    }
}

void run_grid(const void* fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool programmatic,
              std::function<void()> body, LaunchFootprint footprint) {
    DeviceState& d = device();
    if (d.legacy_work_in_capture(stream, "kernel launch")) {
        std::fprintf(stderr, "emulated launch error: kernel %s on the legacy default stream while a stream captures\n",
                     kernel_name(fn).c_str());
        d.last_error = cudaErrorStreamCaptureImplicit;
        return;
    }
    if (Capture* c = d.capture_of(stream)) {
        cudaError_t code = cudaSuccess;
        const std::string bad = launch_config_error(fn, grid, block, smem, &code);
        if (!bad.empty()) {
            std::fprintf(stderr, "emulated launch error: kernel %s: %s\n", kernel_name(fn).c_str(), bad.c_str());
            d.last_error = code;
            d.invalidate_captures("a launch with a bad configuration");
            return;
        }
        c->work.push_back([=] { run_grid_now(fn, grid, block, smem, body, footprint, programmatic); });
        return;
    }
    run_grid_now(fn, grid, block, smem, body, footprint, programmatic);
}

}  // namespace llmc::emu
