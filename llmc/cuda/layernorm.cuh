// LayerNorm over the last dimension on the GPU (eps 1e-5, biased variance, as GPT-2), plus the fused
// residual-add + LayerNorm of the transformer block. CPU reference: llmc/cpu/layernorm.h.
//   out = (x - mean) * rstd * w + b,   rstd = 1 / sqrt(var + eps)   (b nullptr: no bias, no + b)
//   backward, with xhat = (x - mean) * rstd and g = dout * w:
//   dinp += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)),  dw += sum_n dout * xhat,  db += sum_n dout
//   (db nullptr: a LayerNorm without bias; its partials are still computed, and not added anywhere)
//
// Forward: one warp per row (two-pass mean/variance in fp32; the row is re-read from L1/L2).
// Backward, deterministic: a fixed number of "workers" (one warp each, layernorm_backward_workers(C))
// take rows worker, worker + workers, ... in order; each computes dinp for its rows and accumulates its own
// dw/db partials in shared memory (every lane owns fixed channels, so no atomics and no races); each
// block adds its warps' in warp order and writes them to scratch (blocks, 2, C);
// reduce_partials_add_kernel sums the blocks in a fixed order (or reduce_layernorm_partials_kernel,
// all of a backward's LayerNorms in one launch). Rows up to 32 * kPack * kLayerNormCachedChunks
// channels are held in registers between the two passes (layernorm_backward_cached_kernel).
// Both use 16-byte packed accesses when C % kPack == 0 and the pointers are aligned.
//
// reduce_partials_add_kernel is shared with qknorm.cuh (same deterministic pattern).
#pragma once
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin
#include "llmc/cuda/residual.cuh"
#include "llmc/core/error.h"

namespace llmc::cuda {

constexpr float kLayerNormEps = 1e-5f;

// ---- deterministic sum of per-worker partials ----------------------------------------------------
// partials (R, count * len): column j = (target j / len, channel j % len). Each target gets
// out[target][channel] += sum over r = 0..R-1 of partials[r][j], always in the same order; a nullptr
// target (a bias gradient of a model without biases) is skipped.
struct PartialTargets {
    float* out[4];
    int count;  // targets used (<= 4)
    int len;    // channels per target
};
// block (32, 32): threadIdx.x = column, threadIdx.y strides the rows; then row 0 sums the 32 column
// sums in order.
__global__ void reduce_partials_add_kernel(PartialTargets t, const float* partials, int R) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    __shared__ float sums[32][33];
    const int M = t.count * t.len;
    const int j = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (j < M)
        for (int r = threadIdx.y; r < R; r += 32) s += partials[(size_t)r * M + j];
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < M) {
        float total = 0.0f;
        for (int y = 0; y < 32; y++) total += sums[y][threadIdx.x];
        const int target = j / t.len;  // select without indexing the parameter array (keeps it out of local memory)
        float* dst = target == 0 ? t.out[0] : target == 1 ? t.out[1] : target == 2 ? t.out[2] : t.out[3];
        if (dst) dst[j % t.len] += total;
    }
}
inline void reduce_partials_add(const PartialTargets& t, const float* partials, int R, LaunchStream st) {
    const int M = t.count * t.len;
    launch_kernel(reduce_partials_add_kernel, (unsigned)ceil_div(M, 32), dim3(32, 32), 0, st, t, partials, R);
    CUDA_CHECK_LAUNCH();
}

// ---- forward ------------------------------------------------------------------------------------
// One row (C) normalized by one warp (every lane calls it; lane owns channels lane*V + k*32*V + [0, V)).
// FUSED: residual = a + b is written (rounded to floatX) and normalized; otherwise a is normalized
// (residual and b unused). out = the LayerNorm, rounded to floatX; m, s: the row's mean and rstd. Every
// pointer is the row's own, in global or shared memory; bias may be nullptr (out = (x - mean) * rstd * w).
template <int V, bool FUSED>
__device__ inline void layernorm_row(floatX* residual, floatX* out, const floatX* a, const floatX* b, const floatX* w,
                                     const floatX* bias, int C, int lane, float& m, float& s) {
    const floatX* x = FUSED ? residual : a;  // (C)

    float sum = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        float v[V];
        if constexpr (FUSED) {
            float u[V];
            load_vec<V>(v, a + c);
            load_vec<V>(u, b + c);
#pragma unroll
            for (int k = 0; k < V; k++) v[k] = to_float(from_float<floatX>(v[k] + u[k]));  // as stored
            store_vec<V>(residual + c, v);
        } else {
            load_vec<V>(v, x + c);
        }
#pragma unroll
        for (int k = 0; k < V; k++) sum += v[k];
    }
    m = warp_sum(sum) / C;

    float var = 0.0f;  // second pass: this lane re-reads its own elements (written above when FUSED)
    for (int c = lane * V; c < C; c += 32 * V) {
        float v[V];
        load_vec<V>(v, x + c);
#pragma unroll
        for (int k = 0; k < V; k++) var += (v[k] - m) * (v[k] - m);
    }
    s = rsqrtf(warp_sum(var) / C + kLayerNormEps);

    for (int c = lane * V; c < C; c += 32 * V) {
        float v[V], wv[V];
        load_vec<V>(v, x + c);
        load_vec<V>(wv, w + c);
        if (bias) {
            float bv[V];
            load_vec<V>(bv, bias + c);
#pragma unroll
            for (int k = 0; k < V; k++) v[k] = (v[k] - m) * s * wv[k] + bv[k];
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) v[k] = (v[k] - m) * s * wv[k];
        }
        store_vec<V>(out + c, v);
    }
}

// One warp per row n: layernorm_row of row n (residual[n] = a[n] + b[n] when FUSED). mean, rstd may be
// nullptr (inference); bias may be nullptr.
template <int V, bool FUSED>
__global__ void layernorm_forward_kernel(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* a,
                                         const floatX* b, const floatX* w, const floatX* bias, int N, int C) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // whole warp leaves together
    const size_t off = (size_t)row * C;
    float m = 0.0f, s = 0.0f;
    layernorm_row<V, FUSED>(FUSED ? residual + off : nullptr, out + off, a + off, FUSED ? b + off : nullptr, w, bias, C,
                            lane, m, s);
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

constexpr int kLayerNormForwardBlock = 256;  // 8 rows per block

template <bool FUSED>
inline void layernorm_forward_launch(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* a,
                                     const floatX* b, const floatX* w, const floatX* bias, int N, int C,
                                     LaunchStream st) {
    if (N <= 0 || C <= 0) return;
    bool vec = C % kPack == 0 && aligned16(out) && aligned16(a) && aligned16(w) && aligned16(bias);
    if (FUSED) vec = vec && aligned16(residual) && aligned16(b);
    const unsigned grid = (unsigned)ceil_div(N, kLayerNormForwardBlock / 32);
    if (vec)
        launch_kernel(layernorm_forward_kernel<kPack, FUSED>, grid, kLayerNormForwardBlock, 0, st, residual, out, mean,
                      rstd, a, b, w, bias, N, C);
    else
        launch_kernel(layernorm_forward_kernel<1, FUSED>, grid, kLayerNormForwardBlock, 0, st, residual, out, mean,
                      rstd, a, b, w, bias, N, C);
    CUDA_CHECK_LAUNCH();
}

// out (N,C) OVERWRITTEN = layernorm(inp (N,C)); mean, rstd (N) fp32 written (nullable); w (C), b (C, nullable).
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                              const floatX* b, int N, int C, LaunchStream st) {
    layernorm_forward_launch<false>(nullptr, out, mean, rstd, inp, nullptr, w, b, N, C, st);
}

// residual (N,C) = a + b, then out (N,C) = layernorm(residual); both OVERWRITTEN. residual may alias a or b.
inline void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* a,
                                             const floatX* b, const floatX* w, const floatX* bias, int N, int C,
                                             LaunchStream st) {
    layernorm_forward_launch<true>(residual, out, mean, rstd, a, b, w, bias, N, C, st);
}

// ---- backward -----------------------------------------------------------------------------------
// Worker = warp (blockIdx.x * warps + warp); workers = gridDim.x * warps. Shared memory (warps, 2, C):
// the warp's dw and db partials. partials (gridDim.x, 2, C) written: each block's warps added in warp
// order (every block writes, zeros if it has no row).
template <int V>
__global__ void layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                          const floatX* w, const float* mean, const float* rstd, int N, int C) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    LLMC_DYNAMIC_SHARED(float, smem);
    const int warps = blockDim.x / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int workers = gridDim.x * warps;
    const int worker = blockIdx.x * warps + warp;
    float* dw_acc = smem + (size_t)warp * 2 * C;  // (C)
    float* db_acc = dw_acc + C;                   // (C)
    for (int c = lane * V; c < C; c += 32 * V)
#pragma unroll
        for (int k = 0; k < V; k++) dw_acc[c + k] = db_acc[c + k] = 0.0f;

    for (int row = worker; row < N; row += workers) {
        const size_t off = (size_t)row * C;
        const float m = mean[row], s = rstd[row];
        float g_sum = 0.0f, gx_sum = 0.0f;
        for (int c = lane * V; c < C; c += 32 * V) {
            float xv[V], dv[V], wv[V];
            load_vec<V>(xv, inp + off + c);
            load_vec<V>(dv, dout + off + c);
            load_vec<V>(wv, w + c);
#pragma unroll
            for (int k = 0; k < V; k++) {
                const float xhat = (xv[k] - m) * s;
                const float g = dv[k] * wv[k];
                g_sum += g;
                gx_sum += g * xhat;
                dw_acc[c + k] += dv[k] * xhat;
                db_acc[c + k] += dv[k];
            }
        }
        const float g_mean = warp_sum(g_sum) / C;
        const float gx_mean = warp_sum(gx_sum) / C;
        for (int c = lane * V; c < C; c += 32 * V) {
            float xv[V], dv[V], wv[V], acc[V];
            load_vec<V>(xv, inp + off + c);
            load_vec<V>(dv, dout + off + c);
            load_vec<V>(wv, w + c);
            load_vec<V>(acc, dinp + off + c);
#pragma unroll
            for (int k = 0; k < V; k++) {
                const float xhat = (xv[k] - m) * s;
                acc[k] += s * (dv[k] * wv[k] - g_mean - xhat * gx_mean);
            }
            store_vec<V>(dinp + off + c, acc);
        }
    }

    // the block's partial: its warps' sums added in warp order
    __syncthreads();
    float* out = partials + (size_t)blockIdx.x * 2 * C;  // (2, C): dw, db
    for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) {
        float s = 0.0f;
        for (int w2 = 0; w2 < warps; w2++) s += smem[(size_t)w2 * 2 * C + j];
        out[j] = s;
    }
}

// The same with the row held in registers (C <= CH * 32 * kPack, 16-byte packed accesses): a
// lane's chunks of x, dout and dinp are loaded together once per row (the warp's whole row in
// flight: one memory round trip per row), w once per worker. The per-channel arithmetic and the
// order of every sum are layernorm_backward_kernel<kPack>'s.
// Registers: at one chunk (C <= 256 in bf16: 4096 workers, 512 blocks of 8 warps) at most 64, so
// that 4 blocks per SM hold the whole grid on an H100 in one wave; at two or three chunks at most
// 128 (2 blocks of 8 warps per SM hold the 256 blocks of C <= 768). Wider rows take the looping
// kernel (a row of four chunks does not fit in 128 registers). Figures: docs/results/kernel_journal.md.
// A warp's dw, db accumulators (each CH * 32 * kPack floats) are laid out [ch][k / 4][lane][k % 4]
// for channel (ch * 32 + lane) * kPack + k (layernorm_cached_slot): a lane's 4-channel float4 at
// 16-byte lane stride, so a warp's access covers 512 contiguous bytes without bank conflicts (the
// channel-order layout puts the lanes 32 bytes apart: 8-way conflicts on scalar accesses).
__host__ __device__ constexpr int layernorm_cached_width(int C) {
    return (C + 32 * kPack - 1) / (32 * kPack) * 32 * kPack;
}
__device__ __forceinline__ int layernorm_cached_slot(int channel) {
    constexpr int V = kPack;
    const int ch = channel / (32 * V), lane = channel / V % 32, k = channel % V;
    return ch * 32 * V + k / 4 * 128 + lane * 4 + k % 4;
}
template <int CH>
__global__ void __launch_bounds__(256, CH == 1 ? 4 : 2)
    layernorm_backward_cached_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                     const floatX* w, const float* mean, const float* rstd, int N, int C) {
    griddep_begin();                     // first: wait for the previous kernel (programmatic launch)
    constexpr int V = kPack, Q = V / 4;  // Q float4 per lane per chunk and accumulator
    static_assert(V % 4 == 0, "whole float4 accumulators per lane");
    constexpr int CW = CH * 32 * V;  // accumulator width (layernorm_cached_width(C))
    LLMC_DYNAMIC_SHARED(float, smem);
    const int warps = blockDim.x / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int workers = gridDim.x * warps;
    const int worker = blockIdx.x * warps + warp;
    float4* dw_acc = reinterpret_cast<float4*>(smem + (size_t)warp * 2 * CW);  // (CW / 4)
    float4* db_acc = dw_acc + CW / 4;                                          // (CW / 4)
    for (int i = lane; i < CW / 2; i += 32) dw_acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    // chunk ch of this lane: channels (ch * 32 + lane) * V .. + V (present when below C)
    PackX wp[CH];
#pragma unroll
    for (int ch = 0; ch < CH; ch++)
        if ((ch * 32 + lane) * V < C) wp[ch] = *reinterpret_cast<const PackX*>(w + (ch * 32 + lane) * V);

    for (int row = worker; row < N; row += workers) {
        const size_t off = (size_t)row * C;
        PackX xp[CH], dp[CH], ap[CH];
#pragma unroll
        for (int ch = 0; ch < CH; ch++) {
            const int c = (ch * 32 + lane) * V;
            if (c < C) {
                xp[ch] = *reinterpret_cast<const PackX*>(inp + off + c);
                dp[ch] = *reinterpret_cast<const PackX*>(dout + off + c);
                ap[ch] = *reinterpret_cast<const PackX*>(dinp + off + c);
            }
        }
        const float m = mean[row], s = rstd[row];
        float g_sum = 0.0f, gx_sum = 0.0f;
#pragma unroll
        for (int ch = 0; ch < CH; ch++) {
            if ((ch * 32 + lane) * V >= C) continue;
#pragma unroll
            for (int q = 0; q < Q; q++) {
                float4& dw4 = dw_acc[ch * 8 * V + q * 32 + lane];  // channels (ch*32 + lane)*V + 4q .. +3
                float4& db4 = db_acc[ch * 8 * V + q * 32 + lane];
                float4 dw = dw4, db = db4;
                float* dwv = &dw.x;
                float* dbv = &db.x;
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int k = 4 * q + r;
                    const float dv = to_float(dp[ch].v[k]);
                    const float xhat = (to_float(xp[ch].v[k]) - m) * s;
                    const float g = dv * to_float(wp[ch].v[k]);
                    g_sum += g;
                    gx_sum += g * xhat;
                    dwv[r] += dv * xhat;
                    dbv[r] += dv;
                }
                dw4 = dw;
                db4 = db;
            }
        }
        const float g_mean = warp_sum(g_sum) / C;
        const float gx_mean = warp_sum(gx_sum) / C;
#pragma unroll
        for (int ch = 0; ch < CH; ch++) {
            const int c = (ch * 32 + lane) * V;
            if (c >= C) continue;
            PackX out;
#pragma unroll
            for (int k = 0; k < V; k++) {
                const float xhat = (to_float(xp[ch].v[k]) - m) * s;
                const float g = to_float(dp[ch].v[k]) * to_float(wp[ch].v[k]);
                out.v[k] = from_float<floatX>(to_float(ap[ch].v[k]) + s * (g - g_mean - xhat * gx_mean));
            }
            *reinterpret_cast<PackX*>(dinp + off + c) = out;
        }
    }

    // the block's partial: its warps' sums added in warp order, written in channel order
    __syncthreads();
    float* out = partials + (size_t)blockIdx.x * 2 * C;  // (2, C): dw, db
    for (int j = threadIdx.x; j < 2 * C; j += blockDim.x) {
        const int slot = (j < C ? 0 : CW) + layernorm_cached_slot(j < C ? j : j - C);
        float s = 0.0f;
        for (int w2 = 0; w2 < warps; w2++) s += smem[(size_t)w2 * 2 * CW + slot];
        out[j] = s;
    }
}

// Workers of the backward: one warp per row at a time, rows worker, worker + workers, ... A number
// fixed by C, so the dw, db partials are summed in the same order every run; enough warps that
// each SM has its share of HBM's bytes in flight (~20 KB at ~3.35 TB/s and ~0.8 us latency; 1024
// workers, ~8 warps per SM, are too few: docs/results/kernel_journal.md): a cached row of C 768
// puts 4.5 KB per warp in flight, of C 192 1.1 KB, hence more workers there.
inline int layernorm_backward_workers(int C) { return C <= 256 ? 4096 : 2048; }
constexpr size_t kSharedDefault = 48 * 1024;
// Widest row the cached backward takes, in chunks of 32 lanes x kPack channels (bf16: C <= 768).
constexpr int kLayerNormCachedChunks = 3;

// Warps per block of the backward: as many as fit 48 KiB of partials (at most 8), at least 1.
inline int layernorm_backward_warps(int C) {
    return (int)std::max<size_t>(1, std::min<size_t>(8, kSharedDefault / (2 * sizeof(float) * (size_t)C)));
}
inline int layernorm_backward_blocks(int N, int C) {
    return (int)ceil_div(std::min(N, layernorm_backward_workers(C)), layernorm_backward_warps(C));
}
// Scratch (blocks, 2, C) fp32 for layernorm_backward: one partial (dw, db) per block.
inline size_t layernorm_backward_scratch_floats(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    return (size_t)layernorm_backward_blocks(N, C) * 2 * C;
}

// Raises the dynamic shared-memory limit of `kernel` when `bytes` exceeds the default 48 KiB. Static
// and dynamic bytes share that default, so this threshold holds only for kernels without static
// shared memory (the ones given here: dev/emu/static_smem_table.inc; the emulator checks the sum).
template <typename Kernel>
inline void allow_shared_bytes(Kernel kernel, size_t bytes, const char* who) {
    if (bytes <= kSharedDefault) return;
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (bytes > (size_t)optin)
        throw InputError(std::string(who) + ": needs " + std::to_string(bytes) + " bytes of shared memory per block, " +
                         "the device allows " + std::to_string(optin) + "; use fewer channels");
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// dinp (N,C) floatX ADDED; partials (layernorm_backward_blocks(N, C), 2, C) fp32 OVERWRITTEN with
// the blocks' dw, db sums (reduce them with layernorm_backward or reduce_layernorm_partials).
// dout, inp (N,C); w (C); mean, rstd (N) from the forward. dinp must not alias dout or inp.
inline void layernorm_backward_partials(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                        const floatX* w, const float* mean, const float* rstd, int N, int C,
                                        LaunchStream st) {
    if (N <= 0 || C <= 0) return;
    const int warps = layernorm_backward_warps(C);
    const int blocks = layernorm_backward_blocks(N, C);
    const size_t smem = (size_t)warps * 2 * C * sizeof(float);
    const bool vec = C % kPack == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(w);
    const int chunks = (int)ceil_div(C, 32 * kPack);
    auto cached = [&](auto kernel) {  // accumulators padded to whole chunks (layernorm_cached_width)
        const size_t bytes = (size_t)warps * 2 * layernorm_cached_width(C) * sizeof(float);
        allow_shared_bytes(kernel, bytes, "layernorm_backward");
        launch_kernel(kernel, blocks, warps * 32, bytes, st, dinp, partials, dout, inp, w, mean, rstd, N, C);
    };
    static_assert(kLayerNormCachedChunks == 3, "one launch per cached width below");
    if (vec && chunks == 1) cached(layernorm_backward_cached_kernel<1>);
    else if (vec && chunks == 2) cached(layernorm_backward_cached_kernel<2>);
    else if (vec && chunks == 3) cached(layernorm_backward_cached_kernel<3>);
    else if (vec) {
        allow_shared_bytes(layernorm_backward_kernel<kPack>, smem, "layernorm_backward");
        launch_kernel(layernorm_backward_kernel<kPack>, blocks, warps * 32, smem, st, dinp, partials, dout, inp, w,
                      mean, rstd, N, C);
    } else {
        allow_shared_bytes(layernorm_backward_kernel<1>, smem, "layernorm_backward");
        launch_kernel(layernorm_backward_kernel<1>, blocks, warps * 32, smem, st, dinp, partials, dout, inp, w, mean,
                      rstd, N, C);
    }
    CUDA_CHECK_LAUNCH();
}

// dinp (N,C) floatX ADDED; dw, db (C) fp32 ADDED (db nullable: no bias); scratch:
// layernorm_backward_scratch_floats(N, C) floats.
// dout, inp (N,C); w (C); mean, rstd (N) from the forward. dinp must not alias dout or inp.
inline void layernorm_backward(floatX* dinp, float* dw, float* db, float* scratch, const floatX* dout,
                               const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N, int C,
                               LaunchStream st) {
    if (N <= 0 || C <= 0) return;
    layernorm_backward_partials(dinp, scratch, dout, inp, w, mean, rstd, N, C, st);
    PartialTargets t{{dw, db, nullptr, nullptr}, 2, C};
    reduce_partials_add(t, scratch, layernorm_backward_blocks(N, C), st);
}

// ---- several LayerNorms' partials reduced in one launch ------------------------------------------
// Up to 3 groups of LayerNorms (e.g. every layer's ln1, every layer's ln2, lnf); group g holds
// count[g] of them: LayerNorm k of group g left its partials (R, 2, C) at part[g] + k * R * 2C and
// adds them into dw[g] + k * C and db[g] + k * C (each (C) fp32), summed over the R rows in a fixed
// order (reduce_partials_add_kernel's). One launch for all of a backward's LayerNorms. db[g] nullptr
// (a model without biases): group g's db sums are not formed nor added (every group's db must then be
// nullptr: the grid covers only the dw columns).
struct LayerNormPartialGroups {
    const float* part[3];
    float* dw[3];
    float* db[3];
    int count[3];
};
// block (32, 32), grid (ceil(2C/32), total count): blockIdx.y picks the LayerNorm.
__global__ void reduce_layernorm_partials_kernel(LayerNormPartialGroups g, int R, int C) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    int k = blockIdx.y, grp = 0;
    while (grp < 2 && k >= g.count[grp]) k -= g.count[grp++];
    const float* part = (grp == 0 ? g.part[0] : grp == 1 ? g.part[1] : g.part[2]) + (size_t)k * R * 2 * C;
    float* dw = (grp == 0 ? g.dw[0] : grp == 1 ? g.dw[1] : g.dw[2]) + (size_t)k * C;
    float* db = grp == 0 ? g.db[0] : grp == 1 ? g.db[1] : g.db[2];
    if (db) db += (size_t)k * C;
    __shared__ float sums[32][33];
    const int j = blockIdx.x * 32 + threadIdx.x;  // column of (2, C)
    float s = 0.0f;
    if (j < 2 * C)
        for (int r = threadIdx.y; r < R; r += 32) s += part[(size_t)r * 2 * C + j];
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < 2 * C) {
        float total = 0.0f;
        for (int y = 0; y < 32; y++) total += sums[y][threadIdx.x];
        if (j < C) dw[j] += total;
        else if (db) db[j - C] += total;
    }
}
// Every LayerNorm of g had N rows of C channels (so R = layernorm_backward_blocks(N, C) partials each).
inline void reduce_layernorm_partials(const LayerNormPartialGroups& g, int N, int C, LaunchStream st) {
    const int total = g.count[0] + g.count[1] + g.count[2];
    if (N <= 0 || C <= 0 || total == 0) return;
    const bool with_db = g.db[0] || g.db[1] || g.db[2];
    for (int i = 0; i < 3; i++)
        if (g.count[i] > 0 && (g.db[i] != nullptr) != with_db)
            throw std::invalid_argument("reduce_layernorm_partials: every group's db or none must be given");
    launch_kernel(reduce_layernorm_partials_kernel,
                  dim3((unsigned)ceil_div((with_db ? 2 : 1) * C, 32), (unsigned)total), dim3(32, 32), 0, st, g,
                  layernorm_backward_blocks(N, C), C);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
