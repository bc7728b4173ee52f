// LS-attention on the GPU: local sliding-window heads + global causal heads of one layer in ONE
// launch per pass, FlashAttention-2 style (query tiles x (batch, head) grid, online softmax, no
// T x T buffer). CPU reference: llmc/cpu/attention_ls.h (same layout, lse, soft-cap, statistics).
// Algorithm, tile ranges, determinism and verification status: docs/attention_kernel.md.
//
// Layout: qkv (B, T, 3C): q in channels [0, C), k in [C, 2C), v in [2C, 3C); head h uses channels
// h*hd .. h*hd+hd-1 of each part. out (B, T, C). lse (B, NH, T) fp32. Heads 0 .. NH-G-1 local
// (query i sees keys max(0, i-P+1) .. i), heads NH-G .. NH-1 global (keys 0 .. i).
// Score s = q.k / sqrt(hd); the softmax sees c*tanh(s/c) when softcap c > 0.
//
// Two kernel families, both tiled with the same tile-range math (llmc/attention_tiles.h):
//   AttnKernel::Scalar  fp32 FMA math on 32x32 tiles, any floatX. The FP32 build's path (tight
//                       comparison with the CPU) and the fallback if the tensor-core path misbehaves.
//   AttnKernel::Mma     bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation), 64x64 tiles, sm_80+;
//                       forward and backward (dK/dV kernel over key tiles, dQ kernel over query tiles).
// attention_ls_forward/backward (the contract's functions) use attention_default_kernel():
// Mma in the bf16 build, Scalar in the FP32 build. The *_with variants let the lab pick.
//
// Head sizes 32, 64, 128 (templates); any T, any P >= 1, any G in 0..NH. The Mma kernels read
// qkv and dout with 16-byte loads: qkv, out, dout, dqkv must be 16-byte aligned (cudaMalloc pointers are).
// Backward: D_i = rowsum(dO*O) (pre-kernel), then one kernel over key tiles writes dK, dV and one
// over query tiles writes dQ; each output element is summed by one thread in a fixed order, so
// the result is deterministic (bit-identical across runs) without atomics.
// Statistics (stats != nullptr; a template bool, so the off path costs nothing): each block writes
// {max raw logit, min raw logit, entropy sum} of its (query tile, b, h) to stats_scratch, then a
// small kernel merges them per head in a fixed order into stats (max, min, +=).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "llmc/attention_tiles.h"
#include "llmc/cuda/common.cuh"
#include "llmc/error.h"

namespace llmc::cuda {

enum class AttnKernel { Scalar, Mma };

inline AttnKernel attention_default_kernel() {
#if defined(ENABLE_FP32)
    return AttnKernel::Scalar;
#else
    return AttnKernel::Mma;
#endif
}

// Scalar kernels: 32 query rows x 32 keys per tile, 4 warps, each warp owns 8 rows (or keys).
constexpr int kAttnScalarBQ = 32;
constexpr int kAttnScalarBK = 32;
constexpr int kAttnScalarThreads = 128;
// Mma forward: 64 query rows (16 per warp) x 64 keys per tile.
constexpr int kAttnMmaBQ = 64;
constexpr int kAttnMmaBK = 64;
constexpr int kAttnMmaThreads = 128;

// Per-block statistics partials: 3 floats per (b, h, query tile) of the smallest query tile.
inline size_t attention_stats_scratch_floats(int B, int T, int NH) {
    return 3 * (size_t)B * NH * (size_t)ceil_div(T, kAttnScalarBQ);
}
// Backward scratch: D (B, NH, T).
inline size_t attention_ls_backward_scratch_floats(int B, int T, int C, int NH) {
    (void)C;
    return (size_t)B * NH * T;
}

inline void attention_ls_check_args(int B, int T, int C, int NH, int G, int P) {
    if (B < 1 || T < 1)
        throw InputError("attention: B and T must be >= 1 (got B=" + std::to_string(B) + ", T=" + std::to_string(T) +
                         "); pass a non-empty batch");
    if (NH < 1 || C < 1 || C % NH != 0)
        throw InputError("attention: channels C=" + std::to_string(C) + " must be a positive multiple of heads NH=" +
                         std::to_string(NH) + "; change --channels or --heads");
    const int hd = C / NH;
    if (hd != 32 && hd != 64 && hd != 128)
        throw InputError("attention: the CUDA kernel supports head size 32, 64 or 128, got C/NH=" + std::to_string(hd) +
                         "; change --channels or --heads");
    if (G < 0 || G > NH)
        throw InputError("attention: global heads G=" + std::to_string(G) + " must be in [0, NH=" +
                         std::to_string(NH) + "]; change --global-heads");
    if (P < 1) throw InputError("attention: window P=" + std::to_string(P) + " must be >= 1; change --window");
}

// ------------------------------------------------------------------------------------------------
// Device helpers shared by the kernels
// ------------------------------------------------------------------------------------------------

// Soft-cap: returns c*tanh(s/c) (or s when c <= 0) and t = tanh(s/c) for the backward.
__device__ inline float attn_softcap(float s, float cap, float& t) {
    if (cap > 0.0f) {
        t = tanhf(s / cap);
        return cap * t;
    }
    t = 0.0f;
    return s;
}

// Block-wide merge of the statistics partials in a fixed order (warp 0..3), written by thread 0
// to part[0..2] = {max, min, entropy_sum}. All threads of the block must call it.
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

// Merge the partials of head h = blockIdx.x: part ((B*NH + ...) layout: index ((b*NH + h)*nqt + qt)*3)
// into stats = {max[NH], min[NH], entropy_sum[NH]}. Fixed strided order + fixed tree: deterministic.
static __global__ void attn_stats_reduce_kernel(float* stats, const float* part, int B, int NH, int nqt) {
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
        if (threadIdx.x < s) {
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

// ------------------------------------------------------------------------------------------------
// Scalar forward: grid (query tiles, B*NH), 128 threads. Each warp owns 8 query rows; within a
// key tile lane l handles key k0+l (score, probability), and for the output lane l owns dims
// l, l+32, ... (HD/32 of them). Dynamic smem: Q (32, HD), K (32, HD+1) padded, V (32, HD), fp32.
// ------------------------------------------------------------------------------------------------
template <int HD>
constexpr size_t attn_fwd_scalar_smem() {
    return sizeof(float) * (kAttnScalarBQ * HD + kAttnScalarBK * (HD + 1) + kAttnScalarBK * HD);
}

template <int HD, bool STATS>
__global__ void __launch_bounds__(kAttnScalarThreads)
    attn_fwd_scalar_kernel(floatX* out, float* lse, const floatX* qkv, int T, int C, int NH, int G, int P,
                           float softcap, float* stats_part) {
    constexpr int BQ = kAttnScalarBQ, BK = kAttnScalarBK, RPW = BQ / 4, DPL = HD / 32, LDK = HD + 1;
    extern __shared__ float smem[];
    float* sQ = smem;              // (BQ, HD)
    float* sK = sQ + BQ * HD;      // (BK, HD+1)
    float* sV = sK + BK * LDK;     // (BK, HD)
    const int nqt = gridDim.x;
    const int qt = nqt - 1 - blockIdx.x;  // longest (causal) tiles first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float scale = rsqrtf((float)HD);
    const floatX* base = qkv + (size_t)b * T * C3 + h * HD;

    for (int idx = threadIdx.x; idx < BQ * HD; idx += blockDim.x) {
        const int r = idx / HD, d = idx % HD, i = q0 + r;
        sQ[idx] = i < T ? to_float(base[(size_t)i * C3 + d]) : 0.0f;
    }

    float m[RPW], l[RPW], es[RPW], o[RPW][DPL];
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        es[r] = 0.0f;
#pragma unroll
        for (int t = 0; t < DPL; t++) o[r][t] = 0.0f;
    }
    float smax = -INFINITY, smin = INFINITY;

    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;
        __syncthreads();  // the previous tile is no longer read (and the Q tile is written)
        for (int idx = threadIdx.x; idx < BK * HD; idx += blockDim.x) {
            const int r = idx / HD, d = idx % HD, j = k0 + r;
            const bool in = j < T;
            sK[r * LDK + d] = in ? to_float(base[(size_t)j * C3 + C + d]) : 0.0f;
            sV[r * HD + d] = in ? to_float(base[(size_t)j * C3 + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
        const int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < RPW; r++) {
            const int rr = warp * RPW + r, i = q0 + rr;
            if (i >= T) continue;  // warp-uniform
            float s = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++) s += sQ[rr * HD + d] * sK[lane * LDK + d];
            s *= scale;
            const bool vis = !need_mask || attn_visible(i, j, local, P);  // j >= T implies j > i
            float t;
            const float sc = attn_softcap(s, softcap, t);
            if (STATS && vis) {
                smax = fmaxf(smax, s);
                smin = fminf(smin, s);
            }
            const float tmax = warp_max(vis ? sc : -INFINITY);
            if (tmax == -INFINITY) continue;  // nothing visible for this row in this tile (uniform)
            const float m_new = fmaxf(m[r], tmax);
            const float alpha = expf(m[r] - m_new);  // 0 on the first visible tile (m = -inf)
            const float p = vis ? expf(sc - m_new) : 0.0f;
            l[r] = l[r] * alpha + warp_sum(p);
            if (STATS) es[r] = es[r] * alpha + warp_sum(p * sc);
            m[r] = m_new;
#pragma unroll
            for (int t2 = 0; t2 < DPL; t2++) o[r][t2] *= alpha;
            for (int kk = 0; kk < BK; kk++) {
                const float pk = __shfl_sync(0xffffffffu, p, kk);
#pragma unroll
                for (int t2 = 0; t2 < DPL; t2++) o[r][t2] += pk * sV[kk * HD + lane + 32 * t2];
            }
        }
    }

    float ent = 0.0f;
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int i = q0 + warp * RPW + r;
        if (i >= T) continue;
        const float inv = 1.0f / l[r];  // l > 0: key i is always visible
        floatX* orow = out + ((size_t)b * T + i) * C + h * HD;
#pragma unroll
        for (int t2 = 0; t2 < DPL; t2++) orow[lane + 32 * t2] = from_float<floatX>(o[r][t2] * inv);
        const float row_lse = m[r] + logf(l[r]);
        if (lane == 0) {
            lse[((size_t)b * NH + h) * T + i] = row_lse;
            if (STATS) ent += row_lse - es[r] * inv;  // entropy = lse - sum_j p_j s'_j
        }
    }
    if (STATS) attn_block_stats<kAttnScalarThreads / 32>(smax, smin, ent, stats_part + ((size_t)bh * nqt + qt) * 3);
}

// ------------------------------------------------------------------------------------------------
// Tensor-core (mma.sync m16n8k16, bf16 -> fp32) forward, sm_80+. Fragment layouts (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"), g = lane/4, c = lane%4:
//   A (16x16, row-major), 4 regs of 2 bf16: a0 = A[g][2c..2c+1], a1 = A[g+8][2c..], a2 = A[g][2c+8..],
//                                             a3 = A[g+8][2c+8..]
//   B (16x8, "col": element (k, n)), 2 regs: b0 = B[2c..2c+1][g], b1 = B[2c+8..2c+9][g]
//   C/D (16x8 fp32), 4 floats: c0,c1 = C[g][2c, 2c+1], c2,c3 = C[g+8][2c, 2c+1]
// The lower-indexed element sits in the low 16 bits of a register (little-endian bf16 pairs).
// ------------------------------------------------------------------------------------------------
__device__ inline void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();  // the host launcher only runs this path on sm_80+
#endif
}

// Two consecutive bf16 in shared memory (4-byte aligned) as one register.
__device__ inline uint32_t ld_bf16x2(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Pack two floats to a bf16 pair register: lo in the low half (lower index), hi in the high half.
__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// Shared-memory row strides (bf16 elements), padded by 8 so that the fragment loads of the 32
// lanes (rows g = 0..7, word offset c = 0..3) hit 32 different banks.
template <int HD> struct MmaFwdSmem {
    static constexpr int LDQ = HD + 8;              // sQ (BQ, HD)
    static constexpr int LDK = HD + 8;              // sK (BK, HD)
    static constexpr int LDV = kAttnMmaBK + 8;      // sVt (HD, BK): V transposed, dims x keys
    static constexpr size_t bytes =
        sizeof(__nv_bfloat16) * (size_t)(kAttnMmaBQ * LDQ + kAttnMmaBK * LDK + HD * LDV);
};

// Load rows [r0, r0+R) of one (B, T, 3C) part (channel offset ch) into smem (R, ld), zero past T.
// 16-byte global loads of 8 bf16.
template <int HD, int R>
__device__ inline void mma_load_rows(__nv_bfloat16* dst, int ld, const __nv_bfloat16* base, int r0, int T, int C3) {
    constexpr int CHUNKS = HD / 8;
    for (int idx = threadIdx.x; idx < R * CHUNKS; idx += blockDim.x) {
        const int r = idx / CHUNKS, d = (idx % CHUNKS) * 8, i = r0 + r;
        int4 v = make_int4(0, 0, 0, 0);
        if (i < T) v = *reinterpret_cast<const int4*>(base + (size_t)i * C3 + d);
        *reinterpret_cast<int4*>(dst + r * ld + d) = v;  // ld*2 bytes is a multiple of 16
    }
}

template <int HD, bool STATS>
__global__ void __launch_bounds__(kAttnMmaThreads)
    attn_fwd_mma_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int T, int C, int NH, int G,
                        int P, float softcap, float* stats_part) {
    constexpr int BQ = kAttnMmaBQ, BK = kAttnMmaBK, KS = HD / 16, NB = BK / 8, DB = HD / 8;
    using L = MmaFwdSmem<HD>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BQ, LDQ)
    __nv_bfloat16* sK = sQ + BQ * L::LDQ;                               // (BK, LDK)
    __nv_bfloat16* sVt = sK + BK * L::LDK;                              // (HD, LDV)

    const int nqt = gridDim.x;
    const int qt = nqt - 1 - blockIdx.x;  // longest (causal) tiles first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const float scale = rsqrtf((float)HD);
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;

    // Q tile -> smem -> this warp's A fragments (rows warp*16 + g, +8), kept in registers.
    mma_load_rows<HD, BQ>(sQ, L::LDQ, base, q0, T, C3);
    __syncthreads();
    uint32_t qa[KS][4];
    {
        const __nv_bfloat16* q_lo = sQ + (warp * 16 + g) * L::LDQ + 2 * c;
        const __nv_bfloat16* q_hi = q_lo + 8 * L::LDQ;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            qa[ks][0] = ld_bf16x2(q_lo + ks * 16);
            qa[ks][1] = ld_bf16x2(q_hi + ks * 16);
            qa[ks][2] = ld_bf16x2(q_lo + ks * 16 + 8);
            qa[ks][3] = ld_bf16x2(q_hi + ks * 16 + 8);
        }
    }
    // this thread's two rows (hf = 0: row g, hf = 1: row g+8 of the warp's 16)
    const int i_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, es[2] = {0.0f, 0.0f};
    float o[DB][4];
#pragma unroll
    for (int db = 0; db < DB; db++) o[db][0] = o[db][1] = o[db][2] = o[db][3] = 0.0f;
    float smax = -INFINITY, smin = INFINITY;

    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;
        __syncthreads();  // every warp is done with the previous K / V tile
        mma_load_rows<HD, BK>(sK, L::LDK, base + C, k0, T, C3);
        // V transposed into sVt[d][key]
        for (int idx = threadIdx.x; idx < BK * (HD / 8); idx += blockDim.x) {
            const int r = idx / (HD / 8), d = (idx % (HD / 8)) * 8, j = k0 + r;
            int4 v = make_int4(0, 0, 0, 0);
            if (j < T) v = *reinterpret_cast<const int4*>(base + 2 * C + (size_t)j * C3 + d);
            const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
            for (int u = 0; u < 8; u++) sVt[(d + u) * L::LDV + r] = e[u];
        }
        __syncthreads();

        // S = Q K^T: (16 rows, 64 keys) per warp; s[nb] covers keys nb*8 + 2c + {0,1}
        float s[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
            const __nv_bfloat16* krow = sK + (nb * 8 + g) * L::LDK + 2 * c;  // B[k][n] = K[n][k]
#pragma unroll
            for (int ks = 0; ks < KS; ks++) mma_bf16_16816(s[nb], qa[ks], ld_bf16x2(krow + ks * 16), ld_bf16x2(krow + ks * 16 + 8));
        }

        // scale, statistics, soft-cap, mask; row max per half
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hf = e / 2, i = i_row[hf], j = k0 + nb * 8 + 2 * c + (e & 1);
                const float raw = s[nb][e] * scale;
                const bool vis = !need_mask || (i < T && attn_visible(i, j, local, P));
                float t;
                const float sc = attn_softcap(raw, softcap, t);
                if (STATS && vis) {
                    smax = fmaxf(smax, raw);
                    smin = fminf(smin, raw);
                }
                s[nb][e] = vis ? sc : -INFINITY;
                mx[hf] = fmaxf(mx[hf], s[nb][e]);
            }
        }
        float alpha[2], m_use[2];
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            // the 4 lanes of a quad (same g) hold the same row
            mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
            mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
            const float m_new = fmaxf(m[hf], mx[hf]);
            m_use[hf] = m_new == -INFINITY ? 0.0f : m_new;  // row with nothing visible yet: p = 0, no NaN
            alpha[hf] = expf(m[hf] - m_use[hf]);             // 0 when m = -inf
            m[hf] = m_new;
            l[hf] *= alpha[hf];
            if (STATS) es[hf] *= alpha[hf];
        }
        // P = exp(S - m) (thread-partial row sums; the quad is summed at the end)
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hf = e / 2;
                const float sc = s[nb][e];
                const float p = expf(sc - m_use[hf]);  // exp(-inf) = 0 for masked
                l[hf] += p;
                if (STATS && p > 0.0f) es[hf] += p * sc;
                s[nb][e] = p;
            }
        }
#pragma unroll
        for (int db = 0; db < DB; db++) {
            o[db][0] *= alpha[0];
            o[db][1] *= alpha[0];
            o[db][2] *= alpha[1];
            o[db][3] *= alpha[1];
        }
        // O += P V: P (16 x 64 keys) as A fragments straight from the S accumulators
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t pa[4];
            pa[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int db = 0; db < DB; db++) {
                const __nv_bfloat16* vrow = sVt + (db * 8 + g) * L::LDV + kk * 16 + 2 * c;  // B[k][n] = V[k][n]
                mma_bf16_16816(o[db], pa, ld_bf16x2(vrow), ld_bf16x2(vrow + 8));
            }
        }
    }

    // finish: quad sums, normalize, write out (bf16 pairs), lse, entropy
    float ent = 0.0f;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
        if (STATS) {
            es[hf] += __shfl_xor_sync(0xffffffffu, es[hf], 1);
            es[hf] += __shfl_xor_sync(0xffffffffu, es[hf], 2);
        }
        const int i = i_row[hf];
        if (i < T) {
            const float inv = 1.0f / l[hf];
            __nv_bfloat16* orow = out + ((size_t)b * T + i) * C + h * HD + 2 * c;
#pragma unroll
            for (int db = 0; db < DB; db++)
                *reinterpret_cast<uint32_t*>(orow + db * 8) = pack_bf16x2(o[db][2 * hf] * inv, o[db][2 * hf + 1] * inv);
            const float row_lse = m[hf] + logf(l[hf]);
            if (c == 0) {
                lse[((size_t)b * NH + h) * T + i] = row_lse;
                if (STATS) ent += row_lse - es[hf] * inv;
            }
        }
    }
    if (STATS) attn_block_stats<kAttnMmaThreads / 32>(smax, smin, ent, stats_part + ((size_t)bh * nqt + qt) * 3);
}

// ------------------------------------------------------------------------------------------------
// Scalar backward
// ------------------------------------------------------------------------------------------------

// D[b,h,i] = dout_i . out_i over the head's hd channels: one warp per row. D (B, NH, T).
static __global__ void attn_bwd_dot_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH) {
    const int hd = C / NH;
    const long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (b*NH + h)*T + i
    const int lane = threadIdx.x % 32;
    if (row >= (long)B * NH * T) return;
    const int i = (int)(row % T), h = (int)((row / T) % NH), b = (int)(row / ((long)T * NH));
    const size_t off = ((size_t)b * T + i) * C + h * hd;
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32) acc += to_float(dout[off + d]) * to_float(out[off + d]);
    acc = warp_sum(acc);
    if (lane == 0) D[row] = acc;
}

// dK, dV: grid (key tiles, B*NH), 128 threads; each warp owns 8 keys, lane l handles query row
// q0+l of the current query tile and, for the accumulation, dims l, l+32, ...
// Dynamic smem: K (32, HD), V (32, HD), Q (32, HD+1), dO (32, HD+1), lse (32), D (32), fp32.
template <int HD>
constexpr size_t attn_bwd_kv_smem() {
    return sizeof(float) * (2 * kAttnScalarBK * HD + 2 * kAttnScalarBQ * (HD + 1) + 2 * kAttnScalarBQ);
}

template <int HD>
__global__ void __launch_bounds__(kAttnScalarThreads)
    attn_bwd_kv_scalar_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                              int T, int C, int NH, int G, int P, float softcap) {
    constexpr int BQ = kAttnScalarBQ, BK = kAttnScalarBK, KPW = BK / 4, DPL = HD / 32, LDQ = HD + 1;
    extern __shared__ float smem[];
    float* sK = smem;              // (BK, HD)
    float* sV = sK + BK * HD;      // (BK, HD)
    float* sQ = sV + BK * HD;      // (BQ, HD+1)
    float* sdO = sQ + BQ * LDQ;    // (BQ, HD+1)
    float* sL = sdO + BQ * LDQ;    // (BQ)
    float* sD = sL + BQ;           // (BQ)
    const int kt = blockIdx.x;  // early key tiles see the most queries (global heads): launched first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, k0 = kt * BK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float scale = rsqrtf((float)HD);
    const floatX* base = qkv + (size_t)b * T * C3 + h * HD;
    const floatX* gbase = dout + (size_t)b * T * C + h * HD;
    const float* lse_bh = lse + (size_t)bh * T;
    const float* D_bh = D + (size_t)bh * T;

    for (int idx = threadIdx.x; idx < BK * HD; idx += blockDim.x) {
        const int r = idx / HD, d = idx % HD, j = k0 + r;
        const bool in = j < T;
        sK[idx] = in ? to_float(base[(size_t)j * C3 + C + d]) : 0.0f;
        sV[idx] = in ? to_float(base[(size_t)j * C3 + 2 * C + d]) : 0.0f;
    }
    float dk[KPW][DPL], dv[KPW][DPL];
#pragma unroll
    for (int r = 0; r < KPW; r++)
#pragma unroll
        for (int t = 0; t < DPL; t++) dk[r][t] = dv[r][t] = 0.0f;

    const int qb = attn_q_tile_begin(kt, BQ, BK), qe = attn_q_tile_end(kt, BQ, BK, T, local, P);
    for (int qt = qb; qt < qe; qt++) {
        const int q0 = qt * BQ;
        __syncthreads();
        for (int idx = threadIdx.x; idx < BQ * HD; idx += blockDim.x) {
            const int r = idx / HD, d = idx % HD, i = q0 + r;
            const bool in = i < T;
            sQ[r * LDQ + d] = in ? to_float(base[(size_t)i * C3 + d]) : 0.0f;
            sdO[r * LDQ + d] = in ? to_float(gbase[(size_t)i * C + d]) : 0.0f;
        }
        if (threadIdx.x < BQ) {
            const int i = q0 + threadIdx.x;
            sL[threadIdx.x] = i < T ? lse_bh[i] : 0.0f;
            sD[threadIdx.x] = i < T ? D_bh[i] : 0.0f;
        }
        __syncthreads();
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
        const int i = q0 + lane;
#pragma unroll
        for (int r = 0; r < KPW; r++) {
            const int kk = warp * KPW + r, j = k0 + kk;
            if (j >= T) continue;  // warp-uniform
            float s = 0.0f, dp = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++) {
                s += sQ[lane * LDQ + d] * sK[kk * HD + d];
                dp += sdO[lane * LDQ + d] * sV[kk * HD + d];
            }
            s *= scale;
            const bool vis = !need_mask || (i < T && attn_visible(i, j, local, P));
            float t;
            const float sc = attn_softcap(s, softcap, t);
            const float p = vis ? expf(sc - sL[lane]) : 0.0f;
            float ds = vis ? p * (dp - sD[lane]) : 0.0f;
            if (softcap > 0.0f) ds *= 1.0f - t * t;
            ds *= scale;
            for (int q = 0; q < BQ; q++) {
                const float pq = __shfl_sync(0xffffffffu, p, q);
                const float dsq = __shfl_sync(0xffffffffu, ds, q);
#pragma unroll
                for (int t2 = 0; t2 < DPL; t2++) {
                    dv[r][t2] += pq * sdO[q * LDQ + lane + 32 * t2];
                    dk[r][t2] += dsq * sQ[q * LDQ + lane + 32 * t2];
                }
            }
        }
    }
    floatX* dbase = dqkv + (size_t)b * T * C3 + h * HD;
#pragma unroll
    for (int r = 0; r < KPW; r++) {
        const int j = k0 + warp * KPW + r;
        if (j >= T) continue;
#pragma unroll
        for (int t2 = 0; t2 < DPL; t2++) {
            dbase[(size_t)j * C3 + C + lane + 32 * t2] = from_float<floatX>(dk[r][t2]);
            dbase[(size_t)j * C3 + 2 * C + lane + 32 * t2] = from_float<floatX>(dv[r][t2]);
        }
    }
}

// dQ: grid (query tiles, B*NH), 128 threads; each warp owns 8 query rows, lane l handles key k0+l
// of the current key tile and, for the accumulation, dims l, l+32, ...
// Dynamic smem: Q (32, HD), dO (32, HD), K (32, HD+1), V (32, HD+1), fp32.
template <int HD>
constexpr size_t attn_bwd_q_smem() {
    return sizeof(float) * (2 * kAttnScalarBQ * HD + 2 * kAttnScalarBK * (HD + 1));
}

template <int HD>
__global__ void __launch_bounds__(kAttnScalarThreads)
    attn_bwd_q_scalar_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                             int T, int C, int NH, int G, int P, float softcap) {
    constexpr int BQ = kAttnScalarBQ, BK = kAttnScalarBK, RPW = BQ / 4, DPL = HD / 32, LDK = HD + 1;
    extern __shared__ float smem[];
    float* sQ = smem;              // (BQ, HD)
    float* sdO = sQ + BQ * HD;     // (BQ, HD)
    float* sK = sdO + BQ * HD;     // (BK, HD+1)
    float* sV = sK + BK * LDK;     // (BK, HD+1)
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float scale = rsqrtf((float)HD);
    const floatX* base = qkv + (size_t)b * T * C3 + h * HD;
    const floatX* gbase = dout + (size_t)b * T * C + h * HD;

    for (int idx = threadIdx.x; idx < BQ * HD; idx += blockDim.x) {
        const int r = idx / HD, d = idx % HD, i = q0 + r;
        const bool in = i < T;
        sQ[idx] = in ? to_float(base[(size_t)i * C3 + d]) : 0.0f;
        sdO[idx] = in ? to_float(gbase[(size_t)i * C + d]) : 0.0f;
    }
    float row_lse[RPW], row_D[RPW], dq[RPW][DPL];
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int i = q0 + warp * RPW + r;
        row_lse[r] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
        row_D[r] = i < T ? D[(size_t)bh * T + i] : 0.0f;
#pragma unroll
        for (int t = 0; t < DPL; t++) dq[r][t] = 0.0f;
    }

    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;
        __syncthreads();
        for (int idx = threadIdx.x; idx < BK * HD; idx += blockDim.x) {
            const int r = idx / HD, d = idx % HD, j = k0 + r;
            const bool in = j < T;
            sK[r * LDK + d] = in ? to_float(base[(size_t)j * C3 + C + d]) : 0.0f;
            sV[r * LDK + d] = in ? to_float(base[(size_t)j * C3 + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
        const int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < RPW; r++) {
            const int rr = warp * RPW + r, i = q0 + rr;
            if (i >= T) continue;  // warp-uniform
            float s = 0.0f, dp = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++) {
                s += sQ[rr * HD + d] * sK[lane * LDK + d];
                dp += sdO[rr * HD + d] * sV[lane * LDK + d];
            }
            s *= scale;
            const bool vis = !need_mask || attn_visible(i, j, local, P);  // j >= T implies j > i
            float t;
            const float sc = attn_softcap(s, softcap, t);
            const float p = vis ? expf(sc - row_lse[r]) : 0.0f;
            float ds = vis ? p * (dp - row_D[r]) : 0.0f;
            if (softcap > 0.0f) ds *= 1.0f - t * t;
            ds *= scale;
            for (int kk = 0; kk < BK; kk++) {
                const float dsk = __shfl_sync(0xffffffffu, ds, kk);
#pragma unroll
                for (int t2 = 0; t2 < DPL; t2++) dq[r][t2] += dsk * sK[kk * LDK + lane + 32 * t2];
            }
        }
    }
    floatX* dbase = dqkv + (size_t)b * T * C3 + h * HD;
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int i = q0 + warp * RPW + r;
        if (i >= T) continue;
#pragma unroll
        for (int t2 = 0; t2 < DPL; t2++) dbase[(size_t)i * C3 + lane + 32 * t2] = from_float<floatX>(dq[r][t2]);
    }
}

// ------------------------------------------------------------------------------------------------
// Tensor-core backward (mma.sync m16n8k16, bf16 in, fp32 accumulate), sm_80+, bf16 build.
// Same deterministic structure as the scalar backward: D_i = dO_i . O_i (attn_bwd_dot_kernel),
// then a dK/dV kernel per key tile and a dQ kernel per query tile; every output element is
// accumulated by one thread in a fixed order and written once (no atomics).
// P is recomputed from lse: p = exp(s' - lse), dS = p (dP - D) * (1 - tanh^2(s/c) when capped) / sqrt(hd).
// Operands that the mma needs with the QUERY (or key) index as its k dimension are kept transposed
// in shared memory (dims x rows), as V is in the forward; P^T / dS^T (and dS) are reused straight
// from the accumulators as A fragments (the forward's P trick). Fragment layouts: see mma_bf16_16816.
// ------------------------------------------------------------------------------------------------

// Load rows [r0, r0+R) of a (rows, stride) bf16 tensor (HD channels at base) into smem row-major
// dst (R, ld) and transposed dstT (HD, ldT) (dstT[d][r] = row r, dim d); zero past T.
template <int HD, int R>
__device__ inline void mma_load_rows_both(__nv_bfloat16* dst, int ld, __nv_bfloat16* dstT, int ldT,
                                          const __nv_bfloat16* base, int r0, int T, int stride) {
    constexpr int CHUNKS = HD / 8;
    for (int idx = threadIdx.x; idx < R * CHUNKS; idx += blockDim.x) {
        const int r = idx / CHUNKS, d = (idx % CHUNKS) * 8, i = r0 + r;
        int4 v = make_int4(0, 0, 0, 0);
        if (i < T) v = *reinterpret_cast<const int4*>(base + (size_t)i * stride + d);
        *reinterpret_cast<int4*>(dst + r * ld + d) = v;
        const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
        for (int u = 0; u < 8; u++) dstT[(d + u) * ldT + r] = e[u];
    }
}

// Shared memory of the dK/dV kernel. 64 keys per block (16 per warp); the inner query tile is
// 64 rows (32 for HD = 128, to keep dK + dV + S + dP accumulators in registers without spills).
template <int HD> struct MmaBwdKvSmem {
    static constexpr int BK = kAttnMmaBK;
    static constexpr int BQ = HD == 128 ? 32 : 64;
    static constexpr int LD = HD + 8;   // sK, sV (BK, LD); sQ, sdO (BQ, LD)
    static constexpr int LDT = BQ + 8;  // sQt, sdOt (HD, LDT): transposed
    static constexpr size_t bytes =
        sizeof(__nv_bfloat16) * ((size_t)(2 * BK + 2 * BQ) * LD + 2 * (size_t)HD * LDT) + sizeof(float) * 2 * BQ;
};

// dK, dV: grid (key tiles of 64, B*NH), 128 threads. Warp w owns keys k0 + 16w .. +15 and walks the
// query tiles that see the key tile (attn_q_tile_begin/end: only the window for a local head).
// Per query tile, per warp (16 keys x BQ queries): S^T = K Q^T, dP^T = V dO^T, then P^T, dS^T, and
// dV += P^T dO, dK += dS^T Q.
template <int HD>
__global__ void __launch_bounds__(kAttnMmaThreads)
    attn_bwd_kv_mma_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                           const float* lse, const float* D, int T, int C, int NH, int G, int P, float softcap) {
    using L = MmaBwdKvSmem<HD>;
    constexpr int BK = L::BK, BQ = L::BQ, KS = HD / 16, NB = BQ / 8, DB = HD / 8, LD = L::LD, LDT = L::LDT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BK, LD)
    __nv_bfloat16* sV = sK + BK * LD;                                   // (BK, LD)
    __nv_bfloat16* sQ = sV + BK * LD;                                   // (BQ, LD)
    __nv_bfloat16* sdO = sQ + BQ * LD;                                  // (BQ, LD)
    __nv_bfloat16* sQt = sdO + BQ * LD;                                 // (HD, LDT)
    __nv_bfloat16* sdOt = sQt + HD * LDT;                               // (HD, LDT)
    float* sL = reinterpret_cast<float*>(sdOt + HD * LDT);              // (BQ) lse of the tile's rows
    float* sD = sL + BQ;                                                // (BQ) D of the tile's rows

    const int kt = blockIdx.x;  // early key tiles see the most queries (global heads): launched first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, k0 = kt * BK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const float scale = rsqrtf((float)HD);
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;
    const __nv_bfloat16* gbase = dout + (size_t)b * T * C + h * HD;
    const float* lse_bh = lse + (size_t)bh * T;
    const float* D_bh = D + (size_t)bh * T;

    mma_load_rows<HD, BK>(sK, LD, base + C, k0, T, C3);
    mma_load_rows<HD, BK>(sV, LD, base + 2 * C, k0, T, C3);
    // this thread's two keys (hf = 0: key g, hf = 1: key g+8 of the warp's 16)
    const int j_row[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    const __nv_bfloat16* k_lo = sK + (warp * 16 + g) * LD + 2 * c;
    const __nv_bfloat16* v_lo = sV + (warp * 16 + g) * LD + 2 * c;
    float dk[DB][4], dv[DB][4];
#pragma unroll
    for (int db = 0; db < DB; db++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[db][e] = dv[db][e] = 0.0f;

    const int qb = attn_q_tile_begin(kt, BQ, BK), qe = attn_q_tile_end(kt, BQ, BK, T, local, P);
    for (int qt = qb; qt < qe; qt++) {
        const int q0 = qt * BQ;
        __syncthreads();  // every warp is done with the previous query tile (and K, V are written)
        mma_load_rows_both<HD, BQ>(sQ, LD, sQt, LDT, base, q0, T, C3);
        mma_load_rows_both<HD, BQ>(sdO, LD, sdOt, LDT, gbase, q0, T, C);
        if (threadIdx.x < BQ) {
            const int i = q0 + threadIdx.x;
            sL[threadIdx.x] = i < T ? lse_bh[i] : 0.0f;
            sD[threadIdx.x] = i < T ? D_bh[i] : 0.0f;
        }
        __syncthreads();

        // S^T = K Q^T and dP^T = V dO^T: (16 keys, BQ queries) per warp; [nb] holds queries nb*8 + 2c + {0,1}
        float s[NB][4], dp[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t ka[4], va[4];
            ka[0] = ld_bf16x2(k_lo + ks * 16);
            ka[1] = ld_bf16x2(k_lo + 8 * LD + ks * 16);
            ka[2] = ld_bf16x2(k_lo + ks * 16 + 8);
            ka[3] = ld_bf16x2(k_lo + 8 * LD + ks * 16 + 8);
            va[0] = ld_bf16x2(v_lo + ks * 16);
            va[1] = ld_bf16x2(v_lo + 8 * LD + ks * 16);
            va[2] = ld_bf16x2(v_lo + ks * 16 + 8);
            va[3] = ld_bf16x2(v_lo + 8 * LD + ks * 16 + 8);
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                // B[k = dim][n = query] = Q[query][dim] (row-major tiles)
                const __nv_bfloat16* qrow = sQ + (nb * 8 + g) * LD + ks * 16 + 2 * c;
                const __nv_bfloat16* grow = sdO + (nb * 8 + g) * LD + ks * 16 + 2 * c;
                mma_bf16_16816(s[nb], ka, ld_bf16x2(qrow), ld_bf16x2(qrow + 8));
                mma_bf16_16816(dp[nb], va, ld_bf16x2(grow), ld_bf16x2(grow + 8));
            }
        }

        // P^T and dS^T in place (s <- p, dp <- ds)
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qi = nb * 8 + 2 * c + (e & 1), i = q0 + qi, j = j_row[e / 2];
                const bool vis = !need_mask || (i < T && attn_visible(i, j, local, P));  // j >= T implies j > i
                float t;
                const float sc = attn_softcap(s[nb][e] * scale, softcap, t);
                const float p = vis ? expf(sc - sL[qi]) : 0.0f;
                float ds = p * (dp[nb][e] - sD[qi]);
                if (softcap > 0.0f) ds *= 1.0f - t * t;
                s[nb][e] = p;
                dp[nb][e] = ds * scale;
            }
        }

        // dV += P^T dO, dK += dS^T Q: A = (16 keys, 16 queries) from the accumulators,
        // B[k = query][n = dim] from the transposed tiles.
#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            uint32_t pa[4], da[4];
            pa[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            da[0] = pack_bf16x2(dp[2 * kk][0], dp[2 * kk][1]);
            da[1] = pack_bf16x2(dp[2 * kk][2], dp[2 * kk][3]);
            da[2] = pack_bf16x2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
            da[3] = pack_bf16x2(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
            for (int db = 0; db < DB; db++) {
                const __nv_bfloat16* gcol = sdOt + (db * 8 + g) * LDT + kk * 16 + 2 * c;
                const __nv_bfloat16* qcol = sQt + (db * 8 + g) * LDT + kk * 16 + 2 * c;
                mma_bf16_16816(dv[db], pa, ld_bf16x2(gcol), ld_bf16x2(gcol + 8));
                mma_bf16_16816(dk[db], da, ld_bf16x2(qcol), ld_bf16x2(qcol + 8));
            }
        }
    }

    // dk[db], dv[db]: key j_row[e/2], dims db*8 + 2c + (e&1)
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int j = j_row[hf];
        if (j >= T) continue;
        __nv_bfloat16* drow = dqkv + ((size_t)b * T + j) * C3 + h * HD + 2 * c;
#pragma unroll
        for (int db = 0; db < DB; db++) {
            *reinterpret_cast<uint32_t*>(drow + C + db * 8) = pack_bf16x2(dk[db][2 * hf], dk[db][2 * hf + 1]);
            *reinterpret_cast<uint32_t*>(drow + 2 * C + db * 8) = pack_bf16x2(dv[db][2 * hf], dv[db][2 * hf + 1]);
        }
    }
}

// Shared memory of the dQ kernel: 64 query rows (16 per warp) x 64 keys per tile.
template <int HD> struct MmaBwdQSmem {
    static constexpr int BQ = kAttnMmaBQ, BK = kAttnMmaBK;
    static constexpr int LD = HD + 8;   // sQ, sdO (BQ, LD); sK, sV (BK, LD)
    static constexpr int LDT = BK + 8;  // sKt (HD, LDT): K transposed
    static constexpr size_t bytes = sizeof(__nv_bfloat16) * ((size_t)(2 * BQ + 2 * BK) * LD + (size_t)HD * LDT);
};

// dQ: grid (query tiles of 64, B*NH), 128 threads. Warp w owns rows q0 + 16w .. +15 and walks the
// key tiles of the forward (attn_kv_tile_begin/end). Per key tile: S = Q K^T, dP = dO V^T, P, dS,
// dQ += dS K.
template <int HD>
__global__ void __launch_bounds__(kAttnMmaThreads)
    attn_bwd_q_mma_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                          const float* lse, const float* D, int T, int C, int NH, int G, int P, float softcap) {
    using L = MmaBwdQSmem<HD>;
    constexpr int BQ = L::BQ, BK = L::BK, KS = HD / 16, NB = BK / 8, DB = HD / 8, LD = L::LD, LDT = L::LDT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BQ, LD)
    __nv_bfloat16* sdO = sQ + BQ * LD;                                  // (BQ, LD)
    __nv_bfloat16* sK = sdO + BQ * LD;                                  // (BK, LD)
    __nv_bfloat16* sV = sK + BK * LD;                                   // (BK, LD)
    __nv_bfloat16* sKt = sV + BK * LD;                                  // (HD, LDT)

    const int qt = gridDim.x - 1 - blockIdx.x;  // longest (causal) tiles first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const float scale = rsqrtf((float)HD);
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;
    const __nv_bfloat16* gbase = dout + (size_t)b * T * C + h * HD;

    mma_load_rows<HD, BQ>(sQ, LD, base, q0, T, C3);
    mma_load_rows<HD, BQ>(sdO, LD, gbase, q0, T, C);
    const int i_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float row_lse[2], row_D[2];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i_row[hf];
        row_lse[hf] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
        row_D[hf] = i < T ? D[(size_t)bh * T + i] : 0.0f;
    }
    const __nv_bfloat16* q_lo = sQ + (warp * 16 + g) * LD + 2 * c;
    const __nv_bfloat16* g_lo = sdO + (warp * 16 + g) * LD + 2 * c;
    float dq[DB][4];
#pragma unroll
    for (int db = 0; db < DB; db++) dq[db][0] = dq[db][1] = dq[db][2] = dq[db][3] = 0.0f;

    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;
        __syncthreads();  // every warp is done with the previous K / V tile (and Q, dO are written)
        mma_load_rows_both<HD, BK>(sK, LD, sKt, LDT, base + C, k0, T, C3);
        mma_load_rows<HD, BK>(sV, LD, base + 2 * C, k0, T, C3);
        __syncthreads();

        // S = Q K^T, dP = dO V^T: (16 rows, 64 keys) per warp; [nb] holds keys nb*8 + 2c + {0,1}
        float s[NB][4], dp[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t qa[4], ga[4];
            qa[0] = ld_bf16x2(q_lo + ks * 16);
            qa[1] = ld_bf16x2(q_lo + 8 * LD + ks * 16);
            qa[2] = ld_bf16x2(q_lo + ks * 16 + 8);
            qa[3] = ld_bf16x2(q_lo + 8 * LD + ks * 16 + 8);
            ga[0] = ld_bf16x2(g_lo + ks * 16);
            ga[1] = ld_bf16x2(g_lo + 8 * LD + ks * 16);
            ga[2] = ld_bf16x2(g_lo + ks * 16 + 8);
            ga[3] = ld_bf16x2(g_lo + 8 * LD + ks * 16 + 8);
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                // B[k = dim][n = key] = K[key][dim] (row-major tiles)
                const __nv_bfloat16* krow = sK + (nb * 8 + g) * LD + ks * 16 + 2 * c;
                const __nv_bfloat16* vrow = sV + (nb * 8 + g) * LD + ks * 16 + 2 * c;
                mma_bf16_16816(s[nb], qa, ld_bf16x2(krow), ld_bf16x2(krow + 8));
                mma_bf16_16816(dp[nb], ga, ld_bf16x2(vrow), ld_bf16x2(vrow + 8));
            }
        }

        // dS in place of dP
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hf = e / 2, i = i_row[hf], j = k0 + nb * 8 + 2 * c + (e & 1);
                const bool vis = !need_mask || (i < T && attn_visible(i, j, local, P));  // j >= T implies j > i
                float t;
                const float sc = attn_softcap(s[nb][e] * scale, softcap, t);
                const float p = vis ? expf(sc - row_lse[hf]) : 0.0f;
                float ds = p * (dp[nb][e] - row_D[hf]);
                if (softcap > 0.0f) ds *= 1.0f - t * t;
                dp[nb][e] = ds * scale;
            }
        }

        // dQ += dS K: A = dS (16 rows, 16 keys) from the accumulators, B[k = key][n = dim] = Kt[dim][key]
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t da[4];
            da[0] = pack_bf16x2(dp[2 * kk][0], dp[2 * kk][1]);
            da[1] = pack_bf16x2(dp[2 * kk][2], dp[2 * kk][3]);
            da[2] = pack_bf16x2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
            da[3] = pack_bf16x2(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
            for (int db = 0; db < DB; db++) {
                const __nv_bfloat16* kcol = sKt + (db * 8 + g) * LDT + kk * 16 + 2 * c;
                mma_bf16_16816(dq[db], da, ld_bf16x2(kcol), ld_bf16x2(kcol + 8));
            }
        }
    }

    // dq[db]: row i_row[e/2], dims db*8 + 2c + (e&1)
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i_row[hf];
        if (i >= T) continue;
        __nv_bfloat16* drow = dqkv + ((size_t)b * T + i) * C3 + h * HD + 2 * c;
#pragma unroll
        for (int db = 0; db < DB; db++)
            *reinterpret_cast<uint32_t*>(drow + db * 8) = pack_bf16x2(dq[db][2 * hf], dq[db][2 * hf + 1]);
    }
}

// ------------------------------------------------------------------------------------------------
// Host launchers
// ------------------------------------------------------------------------------------------------

template <typename KernelT>
inline void attn_set_smem(KernelT kernel, size_t bytes) {
    if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int HD, bool STATS>
inline void attn_forward_launch(AttnKernel kind, floatX* out, float* lse, const floatX* qkv, int B, int T, int C,
                                int NH, int G, int P, float softcap, float* part, int& nqt, cudaStream_t st) {
#if !defined(ENABLE_FP32)
    if (kind == AttnKernel::Mma) {
        nqt = (int)ceil_div(T, kAttnMmaBQ);
        const dim3 grid(nqt, B * NH);
        const size_t bytes = MmaFwdSmem<HD>::bytes;
        attn_set_smem(attn_fwd_mma_kernel<HD, STATS>, bytes);
        attn_fwd_mma_kernel<HD, STATS><<<grid, kAttnMmaThreads, bytes, st>>>(out, lse, qkv, T, C, NH, G, P, softcap, part);
        CUDA_CHECK_LAUNCH();
        return;
    }
#endif
    (void)kind;
    nqt = (int)ceil_div(T, kAttnScalarBQ);
    const dim3 grid(nqt, B * NH);
    const size_t bytes = attn_fwd_scalar_smem<HD>();
    attn_set_smem(attn_fwd_scalar_kernel<HD, STATS>, bytes);
    attn_fwd_scalar_kernel<HD, STATS><<<grid, kAttnScalarThreads, bytes, st>>>(out, lse, qkv, T, C, NH, G, P, softcap, part);
    CUDA_CHECK_LAUNCH();
}

// The forward with an explicit kernel family (the lab's versions 2 and 3). In the FP32 build Mma
// falls back to Scalar (no fp32 tensor-core path). The Mma path needs sm_80+.
inline void attention_ls_forward_with(AttnKernel kind, floatX* out, float* lse, const floatX* qkv, int B, int T, int C,
                                      int NH, int G, int P, float softcap, float* stats, float* stats_scratch,
                                      cudaStream_t st) {
    attention_ls_check_args(B, T, C, NH, G, P);
    if (stats && !stats_scratch)
        throw InputError("attention: stats requested without stats_scratch; pass attention_stats_scratch_floats(B,T,NH) floats");
    const int hd = C / NH;
    int nqt = 0;
    auto go = [&](auto hd_tag, auto stats_tag) {
        constexpr int HD = decltype(hd_tag)::value;
        constexpr bool S = decltype(stats_tag)::value;
        attn_forward_launch<HD, S>(kind, out, lse, qkv, B, T, C, NH, G, P, softcap, stats_scratch, nqt, st);
    };
    using I32 = std::integral_constant<int, 32>;
    using I64 = std::integral_constant<int, 64>;
    using I128 = std::integral_constant<int, 128>;
    if (stats) {
        if (hd == 32) go(I32{}, std::true_type{});
        else if (hd == 64) go(I64{}, std::true_type{});
        else go(I128{}, std::true_type{});
        attn_stats_reduce_kernel<<<NH, 256, 0, st>>>(stats, stats_scratch, B, NH, nqt);
        CUDA_CHECK_LAUNCH();
    } else {
        if (hd == 32) go(I32{}, std::false_type{});
        else if (hd == 64) go(I64{}, std::false_type{});
        else go(I128{}, std::false_type{});
    }
}

// Contract function (cuda_contract.md): out, lse OVERWRITTEN; stats merged (max, min, +=).
inline void attention_ls_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, int G, int P,
                                 float softcap, float* stats, float* stats_scratch, cudaStream_t st) {
    attention_ls_forward_with(attention_default_kernel(), out, lse, qkv, B, T, C, NH, G, P, softcap, stats,
                              stats_scratch, st);
}

template <int HD>
inline void attn_backward_launch(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                                 int B, int T, int C, int NH, int G, int P, float softcap, cudaStream_t st) {
    const size_t kv_bytes = attn_bwd_kv_smem<HD>(), q_bytes = attn_bwd_q_smem<HD>();
    attn_set_smem(attn_bwd_kv_scalar_kernel<HD>, kv_bytes);
    attn_set_smem(attn_bwd_q_scalar_kernel<HD>, q_bytes);
    const dim3 grid_kv((unsigned)ceil_div(T, kAttnScalarBK), B * NH);
    attn_bwd_kv_scalar_kernel<HD><<<grid_kv, kAttnScalarThreads, kv_bytes, st>>>(dqkv, dout, qkv, lse, D, T, C, NH, G, P, softcap);
    CUDA_CHECK_LAUNCH();
    const dim3 grid_q((unsigned)ceil_div(T, kAttnScalarBQ), B * NH);
    attn_bwd_q_scalar_kernel<HD><<<grid_q, kAttnScalarThreads, q_bytes, st>>>(dqkv, dout, qkv, lse, D, T, C, NH, G, P, softcap);
    CUDA_CHECK_LAUNCH();
}

#if !defined(ENABLE_FP32)
template <int HD>
inline void attn_backward_mma_launch(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                     const float* D, int B, int T, int C, int NH, int G, int P, float softcap,
                                     cudaStream_t st) {
    const size_t kv_bytes = MmaBwdKvSmem<HD>::bytes, q_bytes = MmaBwdQSmem<HD>::bytes;
    attn_set_smem(attn_bwd_kv_mma_kernel<HD>, kv_bytes);
    attn_set_smem(attn_bwd_q_mma_kernel<HD>, q_bytes);
    const dim3 grid_kv((unsigned)ceil_div(T, MmaBwdKvSmem<HD>::BK), B * NH);
    attn_bwd_kv_mma_kernel<HD><<<grid_kv, kAttnMmaThreads, kv_bytes, st>>>(dqkv, dout, qkv, lse, D, T, C, NH, G, P, softcap);
    CUDA_CHECK_LAUNCH();
    const dim3 grid_q((unsigned)ceil_div(T, MmaBwdQSmem<HD>::BQ), B * NH);
    attn_bwd_q_mma_kernel<HD><<<grid_q, kAttnMmaThreads, q_bytes, st>>>(dqkv, dout, qkv, lse, D, T, C, NH, G, P, softcap);
    CUDA_CHECK_LAUNCH();
}
#endif

// The backward with an explicit kernel family: Mma = tensor-core dK/dV and dQ kernels (bf16 build,
// sm_80+), Scalar = the fp32-FMA kernels (the FP32 build always runs these; Mma falls back to them).
inline void attention_ls_backward_with(AttnKernel kind, floatX* dqkv, const floatX* dout, const floatX* qkv,
                                       const floatX* out, const float* lse, int B, int T, int C, int NH, int G, int P,
                                       float softcap, float* scratch, cudaStream_t st) {
    attention_ls_check_args(B, T, C, NH, G, P);
    const int hd = C / NH;
    float* D = scratch;  // (B, NH, T)
    const long rows = (long)B * NH * T;
    attn_bwd_dot_kernel<<<(unsigned)ceil_div(rows, 8), 256, 0, st>>>(D, dout, out, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
#if !defined(ENABLE_FP32)
    if (kind == AttnKernel::Mma) {
        if (hd == 32) attn_backward_mma_launch<32>(dqkv, dout, qkv, lse, D, B, T, C, NH, G, P, softcap, st);
        else if (hd == 64) attn_backward_mma_launch<64>(dqkv, dout, qkv, lse, D, B, T, C, NH, G, P, softcap, st);
        else attn_backward_mma_launch<128>(dqkv, dout, qkv, lse, D, B, T, C, NH, G, P, softcap, st);
        return;
    }
#endif
    (void)kind;
    if (hd == 32) attn_backward_launch<32>(dqkv, dout, qkv, lse, D, B, T, C, NH, G, P, softcap, st);
    else if (hd == 64) attn_backward_launch<64>(dqkv, dout, qkv, lse, D, B, T, C, NH, G, P, softcap, st);
    else attn_backward_launch<128>(dqkv, dout, qkv, lse, D, B, T, C, NH, G, P, softcap, st);
}

// Contract function: dqkv (B, T, 3C) OVERWRITTEN; scratch: attention_ls_backward_scratch_floats.
inline void attention_ls_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                  const float* lse, int B, int T, int C, int NH, int G, int P, float softcap,
                                  float* scratch, cudaStream_t st) {
    attention_ls_backward_with(attention_default_kernel(), dqkv, dout, qkv, out, lse, B, T, C, NH, G, P, softcap,
                               scratch, st);
}

}  // namespace llmc::cuda
