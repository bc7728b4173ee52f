// The grid-wide ordering instructions of the PTX seam (llmc/cuda/ptx.cuh) and the "last block"
// protocol built on them (llmc/cuda/grid_arrival.cuh).
// What the instructions must do is transcribed from NVIDIA's PTX ISA, not from the kernels:
//   - atom.global.add.u32 d, [a], b: an atomic read-modify-write; d is the value at a before the
//     add, the new value is (old + b) mod 2^32 (.u32: integer addition, wrapping). So when n
//     threads each add b to a word that starts at s, the values they get back are exactly
//     s, s + b, ..., s + (n-1) b (mod 2^32), each once, and the word ends at s + n b;
//   - fence.acq_rel.gpu orders a thread's accesses before it against those after it for the whole
//     GPU: with it, the block that counts in last sees every other block's partial stores.
// The protocol's properties: exactly one block of each group is last, every one of its threads
// sees every block's partials (the sums it forms equal the host's in the same fixed order, bit for
// bit; each launch has fresh values, so a partial left from the previous launch shows), the
// counter is 0 again after the launch (so back-to-back launches reuse it), and the result does
// not depend on which block came last (under emulation the block order varies with the schedule:
// run with LLMC_EMU_SCHEDULES=greedy-forward,greedy-reverse; on a GPU, the launches repeat).
// Runs on a GPU and under emulation (dev/emu/atomic.h). Exit 0 = pass, 1 = fail.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/grid_arrival.cuh"
#include "llmc/cuda/ptx.cuh"
#include "test/gpu/gpu_test_util.cuh"

namespace grid_arrival {

// Every thread adds b to *word (which starts at s) once and marks the k with s + k b = the value it
// got back: hits[k] += 1 (k < n), or outside[0] += 1 (a value that is no s + k b, k < n). Which
// thread gets which value depends on the order the threads run in; the marks do not. (Plain adds:
// when the atomic is right, no two threads mark the same k, and none marks outside.)
__global__ void atom_add_kernel(uint32_t* hits, uint32_t* outside, uint32_t* word, uint32_t s, uint32_t b,
                                uint32_t b_inverse, uint32_t n) {
    const uint32_t k = (llmc::cuda::atom_add_global_u32(word, b) - s) * b_inverse;  // mod 2^32
    if (k < n) hits[k] += 1u;
    else outside[0] += 1u;
}

// Groups of blocks along x (group = blockIdx.y), launch `launch` of several (each with its own
// values). Every thread t of block x sums its slice of values (`per_thread` of them, in order: work
// before arriving, so the stores are still in flight when a fence is missing) and writes it as
// partial[(group, x, t)]; all threads count the block in; in the last block thread t adds the
// group's partials (group, 0..blocks-1, t) in block order into totals[(launch, group, t)], and
// thread 0 counts the last block with atom.global.add into lasts[group].
__global__ void last_block_kernel(float* totals, uint32_t* lasts, float* partials, uint32_t* counters,
                                  const float* values, int per_thread, int launch) {
    const unsigned group = blockIdx.y, blocks = gridDim.x, groups = gridDim.y, threads = blockDim.x;
    const size_t slot = ((size_t)group * blocks + blockIdx.x) * threads + threadIdx.x;
    const float* v = values + ((size_t)launch * groups * blocks * threads + slot) * per_thread;
    float s = 0.0f;
    for (int k = 0; k < per_thread; k++) s += v[k];
    partials[slot] = s;
    if (!llmc::cuda::arrive_last(counters + group, blocks)) return;
    float t = 0.0f;
    for (unsigned j = 0; j < blocks; j++) t += partials[((size_t)group * blocks + j) * threads + threadIdx.x];
    totals[((size_t)launch * groups + group) * threads + threadIdx.x] = t;
    if (threadIdx.x == 0) llmc::cuda::atom_add_global_u32(lasts + group, 1u);
}

template <typename T>
T* upload(const std::vector<T>& h) {
    T* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// n threads add b (odd: then s + k b, k < n <= 2^32, are distinct mod 2^32) to a word starting at s.
void check_atom_add(gpu_test::Checks& c, unsigned blocks, unsigned threads, uint32_t s, uint32_t b) {
    const uint32_t n = blocks * threads;
    uint32_t inv = b;
    for (int it = 0; it < 5; it++) inv *= 2u - b * inv;  // Newton's iteration: b * inv = 1 mod 2^32
    uint32_t* word = upload(std::vector<uint32_t>{s});
    uint32_t* hits = upload(std::vector<uint32_t>(n, 0u));
    uint32_t* outside = upload(std::vector<uint32_t>{0u});
    llmc::cuda::launch_kernel(atom_add_kernel, blocks, threads, 0, 0, hits, outside, word, s, b, inv, n);
    CUDA_CHECK_LAUNCH();
    const std::vector<uint32_t> h = download(hits, n);
    const uint32_t end = download(word, 1)[0], out = download(outside, 1)[0];
    size_t not_once = 0;
    for (uint32_t k = 0; k < n; k++) not_once += h[k] != 1u;
    c.expect(not_once == 0 && out == 0,
             "atom.global.add.u32: %u threads adding %u to %u got back s + k b once for every k < n (%zu k not "
             "once, %u values outside)",
             n, b, s, not_once, out);
    const uint32_t want = s + n * b;  // wraps mod 2^32
    c.expect(end == want, "atom.global.add.u32: the word ends at %u (want (s + n b) mod 2^32 = %u)", end, want);
    CUDA_CHECK(cudaFree(word));
    CUDA_CHECK(cudaFree(hits));
    CUDA_CHECK(cudaFree(outside));
}

void check_last_block(gpu_test::Checks& c, std::mt19937& gen, unsigned blocks, unsigned groups, unsigned threads,
                      int per_thread, int launches) {
    const size_t slots = (size_t)groups * blocks * threads;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> values((size_t)launches * slots * per_thread);  // fresh values for every launch
    for (float& x : values) x = u(gen);
    // the host's sums, in the kernel's order
    std::vector<float> want((size_t)launches * groups * threads);
    for (int l = 0; l < launches; l++)
        for (unsigned gr = 0; gr < groups; gr++)
            for (unsigned t = 0; t < threads; t++) {
                float total = 0.0f;
                for (unsigned j = 0; j < blocks; j++) {
                    const size_t slot = ((size_t)gr * blocks + j) * threads + t;
                    float s = 0.0f;
                    for (int k = 0; k < per_thread; k++) s += values[((size_t)l * slots + slot) * per_thread + k];
                    total += s;
                }
                want[((size_t)l * groups + gr) * threads + t] = total;
            }
    float* dvalues = upload(values);
    float* dpartials = upload(std::vector<float>(slots, std::nanf("")));
    float* dtotals = upload(std::vector<float>(want.size(), std::nanf("")));
    uint32_t* dcounters = upload(std::vector<uint32_t>(groups, 0u));
    uint32_t* dlasts = upload(std::vector<uint32_t>(groups, 0u));
    for (int l = 0; l < launches; l++) {
        llmc::cuda::launch_kernel(last_block_kernel, dim3(blocks, groups), threads, 0, 0, dtotals, dlasts, dpartials,
                                  dcounters, dvalues, per_thread, l);
        CUDA_CHECK_LAUNCH();
    }
    const std::vector<float> totals = download(dtotals, want.size());
    const std::vector<uint32_t> counters = download(dcounters, groups), lasts = download(dlasts, groups);
    size_t wrong = 0, bad_lasts = 0, bad_counters = 0;
    for (size_t k = 0; k < want.size(); k++) wrong += std::memcmp(&totals[k], &want[k], sizeof(float)) != 0;
    for (unsigned gr = 0; gr < groups; gr++) {
        bad_lasts += lasts[gr] != (uint32_t)launches;
        bad_counters += counters[gr] != 0u;
    }
    c.expect(wrong == 0,
             "last block (%u groups of %u blocks of %u threads, %d launches): every thread's total has "
             "the host's bits (%zu of %zu differ)",
             groups, blocks, threads, launches, wrong, want.size());
    c.expect(bad_lasts == 0, "exactly one last block per group and launch (%zu groups miscounted)", bad_lasts);
    c.expect(bad_counters == 0, "the counters are back at 0 after the launches (%zu not)", bad_counters);
    CUDA_CHECK(cudaFree(dvalues));
    CUDA_CHECK(cudaFree(dpartials));
    CUDA_CHECK(cudaFree(dtotals));
    CUDA_CHECK(cudaFree(dcounters));
    CUDA_CHECK(cudaFree(dlasts));
}

}  // namespace grid_arrival

int main() {
    using namespace grid_arrival;
    if (!gpu_test::have_gpu("test_grid_arrival")) return 1;
    std::printf(
        "test_grid_arrival: atom.global.add.u32 and fence.acq_rel.gpu per the PTX ISA, the last-block protocol\n");
    gpu_test::Checks c;
    check_atom_add(c, 3, 128, 0u, 1u);
    check_atom_add(c, 5, 96, 0xFFFFFF00u, 3u);  // wraps past 2^32
    check_atom_add(c, 2, 64, 12345u, 0x80000001u);
    std::mt19937 gen(std::random_device{}());
    check_last_block(c, gen, 1, 1, 32, 5, 2);   // a group of one block: it is the last
    check_last_block(c, gen, 7, 3, 64, 11, 3);  // groups along y, each with its counter
    check_last_block(c, gen, 40, 2, 128, 3, 4);
    check_last_block(c, gen, 600, 1, 64, 16, 3);  // on a GPU: several waves of blocks, so arrivals overlap
    std::printf("test_grid_arrival: %s\n", c.failures ? "FAIL" : "OK");
    return c.failures ? 1 : 0;
}
