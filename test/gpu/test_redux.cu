// The warp-wide OR of the attention forward's masked tiles, alone (llmc/cuda/ptx.cuh):
//   redux.sync.or.b32 d, a, membermask   (redux_sync_or_b32)
// What it must do is transcribed from NVIDIA's PTX ISA ("Parallel Synchronization and
// Communication Instructions: redux.sync"), not from the kernels or from the emulation: each thread
// named in membermask, all executing it with the same membermask, receives the bitwise OR of a over
// exactly those threads; threads outside the mask do not take part (here they skip the call).
// Masks: the full warp, every other lane, the two end lanes, one lane, each half, and random
// ones; values: one distinct bit per lane (a lane left out or counted twice shows as a wrong bit)
// and fresh random sparse words. Runs on a GPU and under emulation (where it checks
// dev/emu/redux.h). Exit 0 = pass, 1 = fail.
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"
#include "test/gpu/gpu_test_util.cuh"

namespace redux_test {

constexpr uint32_t kAbsent = 0xdead0000u;  // what a lane outside the mask writes

// Block b, lane l: d[32 b + l] = redux.sync.or.b32(a[32 b + l], masks[b]) for l in masks[b], else kAbsent.
__global__ void redux_or_kernel(uint32_t* d, const uint32_t* a, const uint32_t* masks) {
    const uint32_t mask = masks[blockIdx.x];
    const int i = blockIdx.x * 32 + threadIdx.x;
    d[i] = (mask >> threadIdx.x) & 1u ? llmc::cuda::redux_sync_or_b32(a[i], mask) : kAbsent;
}

}  // namespace redux_test

int main() {
    using namespace redux_test;
    if (!gpu_test::have_gpu("test_redux")) return 1;
    std::printf("test_redux: redux.sync.or.b32 per the PTX ISA\n");
    const unsigned seed = std::random_device{}();
    std::printf("  seed %u\n", seed);
    std::mt19937 gen(seed);
    std::vector<uint32_t> masks = {0xffffffffu, 0x55555555u, 0x80000001u, 0x00000400u, 0x0000ffffu, 0xffff0000u};
    for (int k = 0; k < 10; k++) masks.push_back((uint32_t)gen() | 1u << (gen() % 32));  // never empty
    const int cases = 2 * (int)masks.size();  // each mask with distinct bits, then with random words
    std::vector<uint32_t> m(cases), a(32 * cases);
    for (int c = 0; c < cases; c++) {
        m[c] = masks[c % masks.size()];
        for (int l = 0; l < 32; l++)
            a[32 * c + l] = c < (int)masks.size() ? 1u << ((7 * l + 3) % 32)            // a permutation of the bits
                                                  : (uint32_t)(gen() & gen() & gen());  // ~4 bits set
    }
    uint32_t *d_d, *d_a, *d_m;
    CUDA_CHECK(cudaMalloc(&d_d, a.size() * 4));
    CUDA_CHECK(cudaMalloc(&d_a, a.size() * 4));
    CUDA_CHECK(cudaMalloc(&d_m, m.size() * 4));
    CUDA_CHECK(cudaMemcpy(d_a, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_m, m.data(), m.size() * 4, cudaMemcpyHostToDevice));
    llmc::cuda::launch_kernel(redux_or_kernel, cases, 32, 0, 0, d_d, d_a, d_m);
    CUDA_CHECK(cudaGetLastError());
    std::vector<uint32_t> d(a.size());
    CUDA_CHECK(cudaMemcpy(d.data(), d_d, d.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int c = 0; c < cases; c++) {
        uint32_t want = 0u;
        for (int l = 0; l < 32; l++)
            if ((m[c] >> l) & 1u) want |= a[32 * c + l];
        for (int l = 0; l < 32; l++) {
            const uint32_t w = (m[c] >> l) & 1u ? want : kAbsent;
            if (d[32 * c + l] != w && bad++ < 20)
                std::printf("FAIL redux.sync.or.b32 mask 0x%08x lane %d: got 0x%08x, want 0x%08x\n", m[c], l,
                            d[32 * c + l], w);
        }
    }
    CUDA_CHECK(cudaFree(d_d));
    CUDA_CHECK(cudaFree(d_a));
    CUDA_CHECK(cudaFree(d_m));
    std::printf("  %d masks x 2 value patterns, 32 lanes each\n", (int)masks.size());
    std::printf("test_redux: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
