// Pieces shared by the LS-attention kernel families (llmc/cuda/attention_ls_scalar.cuh of the FP32
// build, llmc/cuda/attention_ls_fa2.cuh and llmc/cuda/attention_ls_fa2_bwd.cuh of the bf16 build)
// and the launchers
// (llmc/cuda/attention_ls.cuh): tile sizes, the grid layout, the statistics fields with their
// block-level merge and per-head reduce, and the backward's D kernel (16-byte packed loads).
//
// Grid layout of the scalar kernels: blockIdx.x = b*NH + h (up to 2^31-1, so any B*NH),
// blockIdx.y = tile slot (<= 65535: T <= 65535 * 32, checked by attention_ls_check_args). Blocks are
// issued x-fastest, so all heads' slot-0 tiles (the longest ones) go first. The FA2-class kernels
// take a 1-D grid of work items instead (llmc/core/attention_split.h).
#pragma once
#include <cmath>

#include "llmc/core/attention_tiles.h"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"       // griddep_begin
#include "llmc/cuda/residual.cuh"  // PackX, kPack, load_vec

namespace llmc::cuda {

// Scalar kernels: 32 query rows x 32 keys per tile, 4 warps, each warp owns 8 rows (or keys).
constexpr int kAttnScalarBQ = 32;
constexpr int kAttnScalarBK = 32;
constexpr int kAttnScalarThreads = 128;
// FA2-class kernels: 64 query rows (16 per warp) x 64 keys per tile.
constexpr int kAttnFa2BQ = 64;
constexpr int kAttnFa2BK = 64;
constexpr int kAttnFa2Threads = 128;

// 1/sqrt(hd) exactly as the CPU reference computes it (IEEE sqrt and division).
__device__ inline float attn_scale(int hd) { return 1.0f / sqrtf((float)hd); }

// Statistics fields, in this order, of a block partial (attention_stats_scratch) and of the per-head
// result stats (F, NH): the basic three always, the near/far three when the forward computes them
// (llmc/core/logit_stats.h has the definitions). Max and min of raw logits q.k/sqrt(hd); the sums run
// over query rows (entropy in nats, near mass in [0, 1]); the caller divides them by the rows.
enum AttnStat { kAttnMax, kAttnMin, kAttnEntropySum, kAttnNearMassSum, kAttnNearMax, kAttnFarMax };
constexpr int kAttnStatsBasic = 3;  // max, min, entropy sum
constexpr int kAttnStatsNear = 6;   // + near mass sum, near max, far max

// How field f merges: max, min or sum.
__host__ __device__ constexpr int attn_stat_op(int f) {
    return f == kAttnMin ? 1 : (f == kAttnEntropySum || f == kAttnNearMassSum) ? 2 : 0;  // 0 max, 1 min, 2 sum
}
__device__ inline float attn_stat_merge(int f, float a, float b) {
    const int op = attn_stat_op(f);
    return op == 0 ? fmaxf(a, b) : op == 1 ? fminf(a, b) : a + b;
}
// The value a field starts from before anything is merged into it.
__host__ __device__ constexpr float attn_stat_identity(int f) {
    return attn_stat_op(f) == 0 ? -INFINITY : attn_stat_op(f) == 1 ? INFINITY : 0.0f;
}

// Block-wide merge of the F statistics partials v (this thread's) in a fixed order (lanes by the
// warp reductions, then warp 0..NWARPS-1), written by thread 0 to part[0..F-1]. All threads of the
// block must call it (it holds a __syncthreads).
template <int NWARPS, int F>
__device__ inline void attn_block_stats(const float (&v)[F], float* part) {
    __shared__ float red[NWARPS][F];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int f = 0; f < F; f++) {
        const int op = attn_stat_op(f);
        const float r = op == 0 ? warp_max(v[f]) : op == 1 ? warp_min(v[f]) : warp_sum(v[f]);
        if (lane == 0) red[warp][f] = r;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
        for (int f = 0; f < F; f++) {
            float a = red[0][f];
            for (int w = 1; w < NWARPS; w++) a = attn_stat_merge(f, a, red[w][f]);
            part[f] = a;
        }
    }
}

// Merge the partials of head h = blockIdx.x of layer y = blockIdx.y, part index
// y * part_stride + ((b*NH + h)*nqt + qt)*F, into stats + y * stats_stride, (F, NH) (max, min, +=
// per field). Fixed strided order + fixed tree: deterministic. Grid (NH, layers), 256 threads.
template <int F>
__global__ void attn_stats_reduce_kernel(float* stats, const float* part, int B, int NH, int nqt, size_t stats_stride,
                                         size_t part_stride) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    constexpr int NT = 256;
    __shared__ float red[F][NT];
    const int h = blockIdx.x;
    stats += blockIdx.y * stats_stride;
    part += blockIdx.y * part_stride;
    float acc[F];
#pragma unroll
    for (int f = 0; f < F; f++) acc[f] = attn_stat_identity(f);
    for (int e = threadIdx.x; e < B * nqt; e += NT) {
        const int bb = e / nqt, qt = e % nqt;
        const float* p = part + (((size_t)bb * NH + h) * nqt + qt) * F;
#pragma unroll
        for (int f = 0; f < F; f++) acc[f] = attn_stat_merge(f, acc[f], p[f]);
    }
#pragma unroll
    for (int f = 0; f < F; f++) red[f][threadIdx.x] = acc[f];
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
#pragma unroll
            for (int f = 0; f < F; f++)
                red[f][threadIdx.x] = attn_stat_merge(f, red[f][threadIdx.x], red[f][threadIdx.x + s]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
#pragma unroll
        for (int f = 0; f < F; f++) stats[f * NH + h] = attn_stat_merge(f, stats[f * NH + h], red[f][0]);
    }
}

// The D kernel's block size; each thread owns one 16-byte pack (kPack channels) of dout and of out.
constexpr int kAttnDotThreads = 256;

// D[b,h,i] = dout_i . out_i over the head's hd channels. D (B, NH, T); dout, out (B, T, C), 16-byte
// aligned, C / kPack packs per (b, i) row. Thread g of the grid owns pack g of the flat tensors
// (channels g*kPack .. g*kPack+kPack-1: consecutive threads read consecutive 16 bytes, so every load is
// coalesced); the group = hd/kPack threads of one head (aligned lanes of one warp) sum their products in
// channel order, then across the group in a fixed xor butterfly (every lane ends with the same bits),
// and the group's first lane writes D. Every lane runs the shuffles; a lane past the end adds 0.
// The launcher (attention_backward_row_dots) guarantees: group is a power of two <= 32 (so a group never
// straddles a warp), B*T*C/kPack <= 2^31-1.
__global__ void attn_bwd_dot_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH) {
    griddep_begin();                                    // first: wait for the previous kernel (programmatic launch)
    const unsigned group = (unsigned)(C / NH / kPack);  // lanes per head
    const unsigned g = blockIdx.x * kAttnDotThreads + threadIdx.x;  // ((b*T + i)*NH + h)*group + lane in group
    const bool live = g < (unsigned)B * (unsigned)T * (unsigned)(C / kPack);
    float acc = 0.0f;
    if (live) {
        float d[kPack], o[kPack];
        load_vec<kPack>(d, dout + (size_t)g * kPack);
        load_vec<kPack>(o, out + (size_t)g * kPack);
#pragma unroll
        for (int k = 0; k < kPack; k++) acc += d[k] * o[k];
    }
    for (unsigned s = group / 2; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, (int)s);
    if (live && (g & (group - 1)) == 0) {
        const unsigned bih = g / group, bi = bih / (unsigned)NH, h = bih - bi * (unsigned)NH;  // b*T + i, head
        const unsigned b = bi / (unsigned)T, i = bi - b * (unsigned)T;
        D[((size_t)b * NH + h) * T + i] = acc;
    }
}

}  // namespace llmc::cuda
