// QK-norm on the GPU (Dehghani et al. 2023; docs/design.md): LayerNorm over the head dimension hd of
// every head's q and every head's k inside the qkv buffer (N, 3C); one gain/bias pair (hd) for q and
// one for k, shared by the heads; v copied through. eps 1e-5, biased variance. Without biases
// (ModelConfig::bias false) qb, kb and dqb, dkb are all nullptr: gains only (their partials are still
// computed and not added anywhere).
// CPU reference: llmc/cpu/qknorm.h (same math and gradient contract: dqkv overwritten, the gains and
// biases added into; docs/design.md). mean, rstd (N, 2, NH): index (n * 2 + part) * NH + h, part 0 = q, 1 = k.
//
// Packed path (hd / kPack lanes per head a power of two up to 32, 16-byte aligned pointers: hd 8 ..
// 256 in bf16): one thread per 16-byte pack, a head's sums by shuffles over its lanes; otherwise
// forward: one warp per (row, segment), segments 0..2NH-1 = (part, head), segment 2NH = the v copy.
// Backward, deterministic (as layernorm.cuh): a fixed number of worker warps take rows worker,
// worker + workers, ...; each writes dqkv for its rows and accumulates its own dqw/dqb/dkw/dkb partials
// (packed: in registers, lane owns channels (lane % L) * kPack + k; else in shared memory, lane owns
// channels d = lane + 32k), writes them to scratch (workers, 4, hd), and reduce_partials_add_kernel
// sums the workers in a fixed order.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/layernorm.cuh"  // kLayerNormEps, PartialTargets, reduce_partials_add, allow_shared_bytes
#include "llmc/cuda/ptx.cuh"        // griddep_begin
#include "llmc/cuda/residual.cuh"   // PackX, kPack, aligned16
#include "llmc/core/error.h"

namespace llmc::cuda {

inline void qknorm_check_args_cuda(int N, int C, int NH) {
    if (N < 0 || NH < 1 || C < 1 || C % NH != 0)
        throw InputError("qknorm: need channels C=" + std::to_string(C) +
                         " a positive multiple of heads NH=" + std::to_string(NH) + "; pick C and NH with C % NH == 0");
}

// qkvn (N,3C) written; mean, rstd (N,2,NH) written; qkv (N,3C); qw, qb, kw, kb (hd); qb, kb nullable.
__global__ void qknorm_forward_kernel(floatX* qkvn, float* mean, float* rstd, const floatX* qkv, const floatX* qw,
                                      const floatX* qb, const floatX* kw, const floatX* kb, int N, int C, int NH) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int hd = C / NH;
    const int segs = 2 * NH + 1;
    const int lane = threadIdx.x % 32;
    const long gw = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // global warp
    if (gw >= (long)N * segs) return;                                         // whole warp leaves together
    const long row = gw / segs;
    const int seg = (int)(gw % segs);
    const size_t row_off = (size_t)row * 3 * C;

    if (seg == 2 * NH) {  // v passes through
        for (int c = lane; c < C; c += 32) qkvn[row_off + 2 * C + c] = qkv[row_off + 2 * C + c];
        return;
    }
    const int part = seg / NH, h = seg % NH;
    const floatX* w = part == 0 ? qw : kw;
    const floatX* b = part == 0 ? qb : kb;
    const size_t off = row_off + (size_t)part * C + (size_t)h * hd;  // (hd) slice
    float sum = 0.0f;
    for (int d = lane; d < hd; d += 32) sum += to_float(qkv[off + d]);
    const float m = warp_sum(sum) / hd;
    float var = 0.0f;
    for (int d = lane; d < hd; d += 32) {
        const float v = to_float(qkv[off + d]) - m;
        var += v * v;
    }
    const float rs = rsqrtf(warp_sum(var) / hd + kLayerNormEps);
    for (int d = lane; d < hd; d += 32)
        qkvn[off + d] = from_float<floatX>(b ? (to_float(qkv[off + d]) - m) * rs * to_float(w[d]) + to_float(b[d])
                                             : (to_float(qkv[off + d]) - m) * rs * to_float(w[d]));
    if (lane == 0) {
        const size_t i = ((size_t)row * 2 + part) * NH + h;
        mean[i] = m;
        rstd[i] = rs;
    }
}

// ---- packed path: 16-byte accesses, one pack of kPack channels per thread --------------------------
// Taken when hd is a multiple of kPack with L = hd / kPack lanes per head a power of two up to 32,
// and every pointer 16-byte aligned (qknorm_packed_lanes). A head's L lanes are adjacent and
// L-aligned in their warp (C / kPack = NH * L packs per row part), so a head's sums are xor
// shuffles over its own lanes (qknorm_group_sum: a fixed tree, the same bits on every run).
inline int qknorm_packed_lanes(int hd, bool aligned) {
    if (!aligned || hd % kPack != 0) return 0;
    const int L = hd / kPack;
    return L <= 32 && (L & (L - 1)) == 0 ? L : 0;
}
// The mask of this lane's group of L lanes (L a power of two <= 32).
__device__ __forceinline__ unsigned qknorm_group_mask(int L) {
    return L == 32 ? 0xffffffffu : ((1u << L) - 1u) << ((threadIdx.x % 32) & ~(L - 1));
}
__device__ __forceinline__ float qknorm_group_sum(unsigned mask, int L, float v) {
    for (int o = 1; o < L; o *= 2) v += __shfl_xor_sync(mask, v, o);
    return v;
}

// Threads [0, N * 2 * CP) (CP = C / kPack packs per row part) normalize pack p of part `part` of
// row `row` (t = (row * 2 + part) * CP + p); from the next multiple of 32 on, threads copy v's packs.
__global__ void qknorm_forward_packed_kernel(floatX* qkvn, float* mean, float* rstd, const floatX* qkv,
                                             const floatX* qw, const floatX* qb, const floatX* kw, const floatX* kb,
                                             int N, int C, int NH, int L) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    constexpr int V = kPack;
    const int CP = C / V, hd = C / NH;
    const long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    const long norm_threads = (long)N * 2 * CP;
    if (t < norm_threads) {  // whole heads: norm_threads is a multiple of L
        const long rp = t / CP;
        const int p = (int)(t % CP), part = (int)(rp % 2), h = p / L, j = p % L;
        const size_t off = (size_t)(rp / 2) * 3 * C + (size_t)part * C + (size_t)p * V;
        const PackX x = *reinterpret_cast<const PackX*>(qkv + off);
        const unsigned mask = qknorm_group_mask(L);
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < V; k++) sum += to_float(x.v[k]);
        const float m = qknorm_group_sum(mask, L, sum) / hd;
        float var = 0.0f;
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float d = to_float(x.v[k]) - m;
            var += d * d;
        }
        const float rs = rsqrtf(qknorm_group_sum(mask, L, var) / hd + kLayerNormEps);
        const PackX w = *reinterpret_cast<const PackX*>((part == 0 ? qw : kw) + j * V);
        const floatX* bias = part == 0 ? qb : kb;
        PackX y;
        if (bias) {
            const PackX b = *reinterpret_cast<const PackX*>(bias + j * V);
#pragma unroll
            for (int k = 0; k < V; k++)
                y.v[k] = from_float<floatX>((to_float(x.v[k]) - m) * rs * to_float(w.v[k]) + to_float(b.v[k]));
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) y.v[k] = from_float<floatX>((to_float(x.v[k]) - m) * rs * to_float(w.v[k]));
        }
        *reinterpret_cast<PackX*>(qkvn + off) = y;
        if (j == 0) {
            mean[rp * NH + h] = m;
            rstd[rp * NH + h] = rs;
        }
        return;
    }
    const long u = t - (norm_threads + 31) / 32 * 32;  // v: pack u % CP of row u / CP
    if (u < 0 || u >= (long)N * CP) return;
    const size_t off = (size_t)(u / CP) * 3 * C + 2 * (size_t)C + (size_t)(u % CP) * V;
    *reinterpret_cast<PackX*>(qkvn + off) = *reinterpret_cast<const PackX*>(qkv + off);
}

// Worker = warp (as qknorm_backward_kernel, the same partials (workers, 4, hd)); a row's 2 * CP
// q and k packs in chunks of 32, lane -> pack c0 + lane. A lane's channels are the same in every
// chunk (j = lane % L: 32 is a multiple of L), so its dqw, dqb, dkw, dkb sums stay in registers;
// at the end the lanes of equal j are added by xor shuffles (a fixed tree) and lanes 0..L-1 write.
__global__ void qknorm_backward_packed_kernel(floatX* dqkv, float* partials, const floatX* dqkvn, const floatX* qkv,
                                              const floatX* qw, const floatX* kw, const float* mean, const float* rstd,
                                              int N, int C, int NH, int L) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    constexpr int V = kPack;
    const int CP = C / V, hd = C / NH;
    const int warps = blockDim.x / 32;
    const int lane = threadIdx.x % 32;
    const int workers = gridDim.x * warps;
    const int worker = blockIdx.x * warps + threadIdx.x / 32;
    const int j = lane % L;
    const unsigned mask = qknorm_group_mask(L);
    float acc[4][V];  // dqw, dqb, dkw, dkb of channels j * V + k
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
        for (int k = 0; k < V; k++) acc[q][k] = 0.0f;
    const PackX wq = *reinterpret_cast<const PackX*>(qw + j * V);
    const PackX wk = *reinterpret_cast<const PackX*>(kw + j * V);

    for (int row = worker; row < N; row += workers) {
        const size_t row_off = (size_t)row * 3 * C;
        for (int c0 = 0; c0 < 2 * CP; c0 += 32) {
            const int pp = c0 + lane;
            if (pp >= 2 * CP) continue;  // whole heads: 2 * CP is a multiple of L
            const int part = pp / CP, p = pp % CP;
            const size_t off = row_off + (size_t)part * C + (size_t)p * V;
            const PackX x = *reinterpret_cast<const PackX*>(qkv + off);
            const PackX dy = *reinterpret_cast<const PackX*>(dqkvn + off);
            const size_t mi = ((size_t)row * 2 + part) * NH + p / L;
            const float m = mean[mi], rs = rstd[mi];
            const PackX w = part == 0 ? wq : wk;  // by value: a reference to either put both on the stack
            float xhat[V], g[V], g_sum = 0.0f, gx_sum = 0.0f;
#pragma unroll
            for (int k = 0; k < V; k++) {
                xhat[k] = (to_float(x.v[k]) - m) * rs;
                g[k] = to_float(dy.v[k]) * to_float(w.v[k]);
                g_sum += g[k];
                gx_sum += g[k] * xhat[k];
            }
            auto add_grads = [&](float(&dw)[V], float(&db)[V]) {  // compile-time indices: registers
#pragma unroll
                for (int k = 0; k < V; k++) {
                    dw[k] += to_float(dy.v[k]) * xhat[k];
                    db[k] += to_float(dy.v[k]);
                }
            };
            if (part == 0) add_grads(acc[0], acc[1]);
            else add_grads(acc[2], acc[3]);
            const float g_mean = qknorm_group_sum(mask, L, g_sum) / hd;
            const float gx_mean = qknorm_group_sum(mask, L, gx_sum) / hd;
            PackX dx;
#pragma unroll
            for (int k = 0; k < V; k++) dx.v[k] = from_float<floatX>(rs * (g[k] - g_mean - xhat[k] * gx_mean));
            *reinterpret_cast<PackX*>(dqkv + off) = dx;
        }
        for (int p = lane; p < CP; p += 32)  // v
            *reinterpret_cast<PackX*>(dqkv + row_off + 2 * C + (size_t)p * V) =
                *reinterpret_cast<const PackX*>(dqkvn + row_off + 2 * C + (size_t)p * V);
    }

    for (int o = L; o < 32; o *= 2)
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int k = 0; k < V; k++) acc[q][k] += __shfl_xor_sync(0xffffffffu, acc[q][k], o);
    if (lane < L) {
        float* out = partials + (size_t)worker * 4 * hd;
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int k = 0; k < V; k++) out[q * hd + j * V + k] = acc[q][k];
    }
}

// Worker = warp; shared memory (warps, 4, hd) = the warp's [dqw | dqb | dkw | dkb] partials.
// partials (workers, 4, hd) written by every worker (zeros when it has no row).
__global__ void qknorm_backward_kernel(floatX* dqkv, float* partials, const floatX* dqkvn, const floatX* qkv,
                                       const floatX* qw, const floatX* kw, const float* mean, const float* rstd, int N,
                                       int C, int NH) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    LLMC_DYNAMIC_SHARED(float, smem);
    const int hd = C / NH;
    const int warps = blockDim.x / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int workers = gridDim.x * warps;
    const int worker = blockIdx.x * warps + warp;
    float* acc = smem + (size_t)warp * 4 * hd;  // (4, hd)
    for (int j = 0; j < 4; j++)
        for (int d = lane; d < hd; d += 32) acc[j * hd + d] = 0.0f;

    for (int row = worker; row < N; row += workers) {
        const size_t row_off = (size_t)row * 3 * C;
        for (int part = 0; part < 2; part++) {
            const floatX* w = part == 0 ? qw : kw;
            float* acc_w = acc + part * 2 * hd;  // (hd)
            float* acc_b = acc_w + hd;           // (hd)
            for (int h = 0; h < NH; h++) {
                const size_t off = row_off + (size_t)part * C + (size_t)h * hd;
                const size_t mi = ((size_t)row * 2 + part) * NH + h;
                const float m = mean[mi], rs = rstd[mi];
                float g_sum = 0.0f, gx_sum = 0.0f;
                for (int d = lane; d < hd; d += 32) {
                    const float xhat = (to_float(qkv[off + d]) - m) * rs;
                    const float dy = to_float(dqkvn[off + d]);
                    const float g = dy * to_float(w[d]);
                    g_sum += g;
                    gx_sum += g * xhat;
                    acc_w[d] += dy * xhat;
                    acc_b[d] += dy;
                }
                const float g_mean = warp_sum(g_sum) / hd;
                const float gx_mean = warp_sum(gx_sum) / hd;
                for (int d = lane; d < hd; d += 32) {
                    const float xhat = (to_float(qkv[off + d]) - m) * rs;
                    const float g = to_float(dqkvn[off + d]) * to_float(w[d]);
                    dqkv[off + d] = from_float<floatX>(rs * (g - g_mean - xhat * gx_mean));
                }
            }
        }
        for (int c = lane; c < C; c += 32) dqkv[row_off + 2 * C + c] = dqkvn[row_off + 2 * C + c];  // v
    }

    float* out = partials + (size_t)worker * 4 * hd;
    for (int j = 0; j < 4; j++)
        for (int d = lane; d < hd; d += 32) out[j * hd + d] = acc[j * hd + d];
}

constexpr int kQKNormMaxWorkers = 2048;

inline int qknorm_backward_warps(int hd) {
    return (int)std::max<size_t>(1, std::min<size_t>(4, kSharedDefault / (4 * sizeof(float) * (size_t)hd)));
}
inline int qknorm_backward_blocks(int N, int hd) {
    return (int)ceil_div(std::max(1, std::min(N, kQKNormMaxWorkers)), qknorm_backward_warps(hd));
}
// Scratch (workers, 4, hd) fp32 for qknorm_backward.
inline size_t qknorm_backward_scratch_floats(int N, int C, int NH) {
    qknorm_check_args_cuda(N, C, NH);
    if (N == 0) return 0;
    const int hd = C / NH;
    return (size_t)qknorm_backward_blocks(N, hd) * qknorm_backward_warps(hd) * 4 * hd;
}

// ---- host API -------------------------------------------------------------------------------------
// qkvn (N,3C) OVERWRITTEN; mean, rstd (N,2,NH) fp32 written; qkv (N,3C); qw, qb, kw, kb (hd), qb and kb
// both nullptr without biases. qkvn must not alias qkv.
inline void qknorm_forward(floatX* qkvn, float* mean, float* rstd, const floatX* qkv, const floatX* qw,
                           const floatX* qb, const floatX* kw, const floatX* kb, int N, int C, int NH,
                           LaunchStream st) {
    qknorm_check_args_cuda(N, C, NH);
    if (N == 0) return;
    const int block = 256;  // 8 warps
    const int L = qknorm_packed_lanes(
        C / NH, aligned16(qkvn) && aligned16(qkv) && aligned16(qw) && aligned16(qb) && aligned16(kw) && aligned16(kb));
    if (L > 0) {
        const long threads = ((long)N * 2 * (C / kPack) + 31) / 32 * 32 + (long)N * (C / kPack);
        launch_kernel(qknorm_forward_packed_kernel, (unsigned)ceil_div(threads, block), block, 0, st, qkvn, mean, rstd,
                      qkv, qw, qb, kw, kb, N, C, NH, L);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const long warps_total = (long)N * (2 * NH + 1);
    launch_kernel(qknorm_forward_kernel, (unsigned)ceil_div(warps_total, block / 32), block, 0, st, qkvn, mean, rstd,
                  qkv, qw, qb, kw, kb, N, C, NH);
    CUDA_CHECK_LAUNCH();
}

// dqkv (N,3C) OVERWRITTEN (q, k from the norm backward, v copied from dqkvn); dqw, dqb, dkw, dkb (hd) fp32
// ADDED (dqb, dkb both nullptr without biases).
// scratch: qknorm_backward_scratch_floats(N, C, NH) floats. dqkv must not alias dqkvn.
inline void qknorm_backward(floatX* dqkv, float* dqw, float* dqb, float* dkw, float* dkb, float* scratch,
                            const floatX* dqkvn, const floatX* qkv, const floatX* qw, const floatX* kw,
                            const float* mean, const float* rstd, int N, int C, int NH, LaunchStream st) {
    qknorm_check_args_cuda(N, C, NH);
    if (N == 0) return;
    const int hd = C / NH;
    const int warps = qknorm_backward_warps(hd);
    const int blocks = qknorm_backward_blocks(N, hd);
    const int L = qknorm_packed_lanes(
        hd, aligned16(dqkv) && aligned16(dqkvn) && aligned16(qkv) && aligned16(qw) && aligned16(kw));
    if (L > 0) {
        launch_kernel(qknorm_backward_packed_kernel, blocks, warps * 32, 0, st, dqkv, scratch, dqkvn, qkv, qw, kw, mean,
                      rstd, N, C, NH, L);
    } else {
        const size_t smem = (size_t)warps * 4 * hd * sizeof(float);
        allow_shared_bytes(qknorm_backward_kernel, smem, "qknorm_backward");
        launch_kernel(qknorm_backward_kernel, blocks, warps * 32, smem, st, dqkv, scratch, dqkvn, qkv, qw, kw, mean,
                      rstd, N, C, NH);
    }
    CUDA_CHECK_LAUNCH();
    PartialTargets t{{dqw, dqb, dkw, dkb}, 4, hd};
    reduce_partials_add(t, scratch, blocks * warps, st);
}

}  // namespace llmc::cuda
