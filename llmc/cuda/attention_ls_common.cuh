// Pieces shared by the LS-attention kernel families (llmc/cuda/attention_ls_scalar.cuh,
// llmc/cuda/attention_ls_mma.cuh) and the launchers (llmc/cuda/attention_ls.cuh): tile sizes, the
// grid layout, the block-level statistics merge, the statistics reduce and the backward's D kernel.
//
// Grid layout of every tiled kernel: blockIdx.x = b*NH + h (up to 2^31-1, so any B*NH), blockIdx.y
// = tile slot (<= 65535: T <= 65535 * 32, checked by attention_ls_check_args). Blocks are issued
// x-fastest, so all heads' slot-0 tiles (the longest ones) go first.
#pragma once
#include <cmath>

#include "llmc/core/attention_tiles.h"
#include "llmc/cuda/common.cuh"

namespace llmc::cuda {

// Scalar kernels: 32 query rows x 32 keys per tile, 4 warps, each warp owns 8 rows (or keys).
constexpr int kAttnScalarBQ = 32;
constexpr int kAttnScalarBK = 32;
constexpr int kAttnScalarThreads = 128;
// Mma kernels: 64 query rows (16 per warp) x 64 keys per tile.
constexpr int kAttnMmaBQ = 64;
constexpr int kAttnMmaBK = 64;
constexpr int kAttnMmaThreads = 128;

// 1/sqrt(hd) exactly as the CPU reference computes it (IEEE sqrt and division).
__device__ inline float attn_scale(int hd) { return 1.0f / sqrtf((float)hd); }

// Block-wide merge of the statistics partials in a fixed order (warp 0..NWARPS-1), written by
// thread 0 to part[0..2] = {max, min, entropy_sum}. All threads of the block must call it
// (it holds a __syncthreads).
template <int NWARPS>
__device__ inline void attn_block_stats(float smax, float smin, float ent, float* part) {
    __shared__ float red[NWARPS][3];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    smax = warp_max(smax);
    smin = warp_min(smin);
    ent = warp_sum(ent);
    if (lane == 0) {
        red[warp][0] = smax;
        red[warp][1] = smin;
        red[warp][2] = ent;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = red[0][0], b = red[0][1], c = red[0][2];
        for (int w = 1; w < NWARPS; w++) {
            a = fmaxf(a, red[w][0]);
            b = fminf(b, red[w][1]);
            c += red[w][2];
        }
        part[0] = a;
        part[1] = b;
        part[2] = c;
    }
}

// Merge the partials of head h = blockIdx.x, part index ((b*NH + h)*nqt + qt)*3, into
// stats = {max[NH], min[NH], entropy_sum[NH]} (max, min, +=). Fixed strided order + fixed tree:
// deterministic.
__global__ void attn_stats_reduce_kernel(float* stats, const float* part, int B, int NH, int nqt) {
    constexpr int NT = 256;
    __shared__ float smax[NT], smin[NT], sent[NT];
    const int h = blockIdx.x;
    float a = -INFINITY, b = INFINITY, c = 0.0f;
    for (int e = threadIdx.x; e < B * nqt; e += NT) {
        const int bb = e / nqt, qt = e % nqt;
        const float* p = part + (((size_t)bb * NH + h) * nqt + qt) * 3;
        a = fmaxf(a, p[0]);
        b = fminf(b, p[1]);
        c += p[2];
    }
    smax[threadIdx.x] = a;
    smin[threadIdx.x] = b;
    sent[threadIdx.x] = c;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            smax[threadIdx.x] = fmaxf(smax[threadIdx.x], smax[threadIdx.x + s]);
            smin[threadIdx.x] = fminf(smin[threadIdx.x], smin[threadIdx.x + s]);
            sent[threadIdx.x] += sent[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        stats[h] = fmaxf(stats[h], smax[0]);
        stats[NH + h] = fminf(stats[NH + h], smin[0]);
        stats[2 * NH + h] += sent[0];
    }
}

// D[b,h,i] = dout_i . out_i over the head's hd channels: one warp per row. D (B, NH, T).
__global__ void attn_bwd_dot_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH) {
    const int hd = C / NH;
    const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (b*NH + h)*T + i
    const int lane = threadIdx.x % 32;
    if (row >= (long)B * NH * T) return;  // warp-uniform
    const int i = (int)(row % T), h = (int)((row / T) % NH), b = (int)(row / ((long)T * NH));
    const size_t off = ((size_t)b * T + i) * C + h * hd;
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32) acc += to_float(dout[off + d]) * to_float(out[off + d]);
    acc = warp_sum(acc);
    if (lane == 0) D[row] = acc;
}

}  // namespace llmc::cuda
