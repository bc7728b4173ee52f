// Squared L2 norm of an fp32 gradient buffer on the GPU, for clipping by the global gradient norm.
// CPU reference: llmc/core/global_norm.h (sum of squares, accumulated in double).
//
// Deterministic: a grid of kNormBlock-thread blocks whose size depends only on n (never on the
// device: global_norm_blocks) walks the buffer with a grid stride; each thread sums its squares in
// double in index order, each block reduces its threads in a fixed tree order and writes one
// partial (stored as float) to scratch; the last block to finish (llmc/cuda/grid_arrival.cuh) sums
// the partials in a fixed order (in double) and writes the result. One launch; the only atomic is
// the arrival count, so the same input gives the same bits on every run and every GPU.
// The result OVERWRITES out[0] (one device float).
#pragma once
#include <cstddef>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/grid_arrival.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin

namespace llmc::cuda {

namespace detail {

constexpr int kNormBlock = 512;
constexpr int kNormGridBlocks = 512;  // the most blocks (n >= 2^21: every model worth a GPU)
constexpr int kNormMinPerThread = 8;  // fewer blocks below: at least 8 elements per thread

// Blocks for n floats: ceil(n / (kNormBlock * kNormMinPerThread)) in [1, kNormGridBlocks]. A function
// of n alone, so the order of additions (and the result's bits) is the same on every GPU.
inline unsigned global_norm_blocks(size_t n) {
    const size_t per_block = (size_t)kNormBlock * kNormMinPerThread;
    const size_t blocks = (n + per_block - 1) / per_block;
    return (unsigned)(blocks < 1 ? 1 : blocks > (size_t)kNormGridBlocks ? kNormGridBlocks : blocks);
}

// Fixed-order block sum of one double per thread (kNormBlock threads); the result in thread 0.
__device__ inline double block_sum_double(double x) {
    __shared__ double sm[kNormBlock / 32];
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sm[warp] = x;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < kNormBlock / 32; w++) s += sm[w];
    return s;
}

// One launch: each block writes its partial (as float) to partial[blockIdx.x]; the last block to
// arrive sums the gridDim.x partials in a fixed order (in double) into out[0].
__global__ void __launch_bounds__(kNormBlock)
    global_norm_kernel(float* out, float* partial, uint32_t* arrival, const float* g, size_t n) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    // Each thread adds its squares in index order. Four loads are issued before their four additions
    // (the order of additions unchanged): with a stride known only at run time the compiler keeps one
    // load in flight per thread otherwise, too few to reach the bandwidth (docs/results/kernel_journal.md).
    const size_t stride = (size_t)gridDim.x * kNormBlock;
    size_t i = blockIdx.x * (size_t)kNormBlock + threadIdx.x;
    double acc = 0.0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const double x0 = g[i], x1 = g[i + stride], x2 = g[i + 2 * stride], x3 = g[i + 3 * stride];
        acc += x0 * x0;
        acc += x1 * x1;
        acc += x2 * x2;
        acc += x3 * x3;
    }
    for (; i < n; i += stride) {
        const double x = g[i];
        acc += x * x;
    }
    const double s = block_sum_double(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = (float)s;
    if (!arrive_last(arrival, gridDim.x)) return;  // (its barriers also end thread 0's reads of the shared sums)
    double total = 0.0;
    for (int j = threadIdx.x; j < (int)gridDim.x; j += kNormBlock) total += (double)partial[j];
    const double t = block_sum_double(total);
    if (threadIdx.x == 0) out[0] = (float)t;
}

}  // namespace detail

// Floats of scratch global_norm_squared needs (one partial per block, for any n).
inline size_t global_norm_scratch_floats() { return detail::kNormGridBlocks; }

// out[0] (device float) = sum_i grads[i]^2 over grads (n) fp32; scratch: global_norm_scratch_floats()
// floats; arrival: one counter, zero before the call and left zero (llmc/cuda/grid_arrival.cuh).
inline void global_norm_squared(float* out, const float* grads, size_t n, float* scratch, uint32_t* arrival,
                                LaunchStream st) {
    launch_kernel(detail::global_norm_kernel, detail::global_norm_blocks(n), detail::kNormBlock, 0, st, out, scratch,
                  arrival, grads, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
