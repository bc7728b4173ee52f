// LS-attention, tensor-core kernel family (AttnKernel::Mma): bf16 mma.sync m16n8k16 with fp32
// accumulation, sm_80+, bf16 build only. Forward (64 x 64 tiles), backward dK/dV kernel over key
// tiles and dQ kernel over query tiles. Launched by llmc/cuda/attention_ls.cuh; grid layout, tile
// sizes and statistics helpers in llmc/cuda/attention_ls_common.cuh; docs/attention_kernel.md.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// g = lane/4, c = lane%4; a register holds two bf16, the lower column (or k) index in the low half:
//   A (16x16, row-major), 4 regs: a0 = A[g][2c..2c+1], a1 = A[g+8][2c..], a2 = A[g][2c+8..], a3 = A[g+8][2c+8..]
//   B (16x8, "col": element (k, n)), 2 regs: b0 = B[2c..2c+1][g], b1 = B[2c+8..2c+9][g]
//   C/D (16x8 fp32), 4 floats: c0,c1 = C[g][2c, 2c+1], c2,c3 = C[g+8][2c, 2c+1]
// Every B operand here is stored n-major in shared memory (row n holds the k values contiguously),
// so b0/b1 are single 4-byte loads; operands needed with the other index as k are kept transposed
// in shared memory. An accumulator pair of n-blocks (16 columns) is repacked as an A fragment
// without shuffles (mma_acc_to_a), the FlashAttention-2 trick for P and dS.
// Qkv, out, dout, dqkv are read / written with 16-byte (int4) and 4-byte accesses: 16-byte aligned
// base pointers required (checked by the launcher).
#pragma once
#include <cstring>

#include "llmc/cuda/attention_ls_common.cuh"
#include "llmc/cuda/ptx.cuh"  // mma_bf16_16816

namespace llmc::cuda {

// Two consecutive bf16 in shared memory (4-byte aligned) as one register.
__device__ __forceinline__ uint32_t ld_bf16x2(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Pack two floats to a bf16 pair register: lo in the low half (lower index), hi in the high half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo = low 16 bits
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);  // no type pun (strict aliasing); one register move
    return bits;
}

// A fragment of a row-major 16x16 block in smem; p points at element [g][2c] of the block.
__device__ __forceinline__ void mma_load_a(uint32_t a[4], const __nv_bfloat16* p, int ld) {
    a[0] = ld_bf16x2(p);
    a[1] = ld_bf16x2(p + 8 * ld);
    a[2] = ld_bf16x2(p + 8);
    a[3] = ld_bf16x2(p + 8 * ld + 8);
}

// c += A * B with B stored n-major in smem: p points at element (k = 2c, n = g), i.e. row g, column
// 2c of the n-major storage.
__device__ __forceinline__ void mma_smem_b(float c[4], const uint32_t a[4], const __nv_bfloat16* p) {
    mma_bf16_16816(c, a, ld_bf16x2(p), ld_bf16x2(p + 8));
}

// The accumulators of two adjacent n-blocks (columns 0..7 in lo, 8..15 in hi) as the A fragment of
// the 16x16 block they form (rounded to bf16).
__device__ __forceinline__ void mma_acc_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
    a[0] = pack_bf16x2(lo[0], lo[1]);  // row g,   cols 2c, 2c+1
    a[1] = pack_bf16x2(lo[2], lo[3]);  // row g+8, cols 2c, 2c+1
    a[2] = pack_bf16x2(hi[0], hi[1]);  // row g,   cols 8+2c, 8+2c+1
    a[3] = pack_bf16x2(hi[2], hi[3]);  // row g+8
}

// acc (16 x 8*DB) += X (16 x 16*KB, fp32 accumulators x[2*KB][4], rounded to bf16) * Y, where Y
// (16*KB x 8*DB) is stored transposed in smem: yt[n][k], row stride ldt.
template <int KB, int DB>
__device__ __forceinline__ void mma_acc_times(float (&acc)[DB][4], const float (&x)[2 * KB][4], const __nv_bfloat16* yt,
                                              int ldt) {
    const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
    for (int kk = 0; kk < KB; kk++) {
        uint32_t a[4];
        mma_acc_to_a(a, x[2 * kk], x[2 * kk + 1]);
#pragma unroll
        for (int db = 0; db < DB; db++) mma_smem_b(acc[db], a, yt + (db * 8 + g) * ldt + kk * 16 + 2 * c);
    }
}

// The backward's two products of one warp: s = A1 B1^T and dp = A2 B2^T, (16 x 8*NB) each, where
// A1, A2 are the warp's 16 rows (x HD) at a1, a2 (stride lda) and B1, B2 the tile's 8*NB rows
// (x HD) at b1, b2 (stride ldb), all row-major in smem. Overwrites s and dp.
template <int HD, int NB>
__device__ __forceinline__ void mma_two_products(float (&s)[NB][4], float (&dp)[NB][4], const __nv_bfloat16* a1,
                                                 const __nv_bfloat16* a2, int lda, const __nv_bfloat16* b1,
                                                 const __nv_bfloat16* b2, int ldb) {
    const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        uint32_t x1[4], x2[4];
        mma_load_a(x1, a1 + g * lda + ks * 16 + 2 * c, lda);
        mma_load_a(x2, a2 + g * lda + ks * 16 + 2 * c, lda);
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            const int off = (nb * 8 + g) * ldb + ks * 16 + 2 * c;
            mma_smem_b(s[nb], x1, b1 + off);
            mma_smem_b(dp[nb], x2, b2 + off);
        }
    }
}

// Rows [r0, r0+R) of one part of a (rows, stride) bf16 tensor (HD channels at base) into smem
// dst (R, ld), zero past T, with 16-byte loads; if dstT != nullptr also transposed into
// dstT (HD, ldT) (dstT[d][r] = row r, dim d).
template <int HD, int R>
__device__ inline void mma_load_rows(__nv_bfloat16* dst, int ld, __nv_bfloat16* dstT, int ldT,
                                     const __nv_bfloat16* base, int r0, int T, int stride) {
    constexpr int CHUNKS = HD / 8;
    for (int idx = threadIdx.x; idx < R * CHUNKS; idx += blockDim.x) {
        const int r = idx / CHUNKS, d = (idx % CHUNKS) * 8, i = r0 + r;
        int4 v = make_int4(0, 0, 0, 0);
        if (i < T) v = *reinterpret_cast<const int4*>(base + (size_t)i * stride + d);
        if (dst) *reinterpret_cast<int4*>(dst + r * ld + d) = v;  // ld*2 bytes is a multiple of 16
        if (dstT) {
            const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
            for (int u = 0; u < 8; u++) dstT[(d + u) * ldT + r] = e[u];
        }
    }
}

// Writes one of this thread's two rows (hf) of a (16 x 8*DB) accumulator, times mul, as bf16 pairs;
// row points at column 2c of that row in global memory.
template <int DB>
__device__ __forceinline__ void mma_store_row(__nv_bfloat16* row, const float (&acc)[DB][4], int hf, float mul) {
#pragma unroll
    for (int db = 0; db < DB; db++)
        *reinterpret_cast<uint32_t*>(row + db * 8) = pack_bf16x2(acc[db][2 * hf] * mul, acc[db][2 * hf + 1] * mul);
}

// Shared-memory row strides (bf16 elements) are padded by 8 so that the fragment loads of the 32
// lanes (rows g = 0..7, word offset c = 0..3) hit 32 different banks.
template <int HD>
struct MmaFwdSmem {
    static constexpr int LDQ = HD + 8;          // sQ (BQ, HD)
    static constexpr int LDK = HD + 8;          // sK (BK, HD)
    static constexpr int LDV = kAttnMmaBK + 8;  // sVt (HD, BK): V transposed, dims x keys
    static constexpr size_t bytes = sizeof(__nv_bfloat16) * (size_t)(kAttnMmaBQ * LDQ + kAttnMmaBK * LDK + HD * LDV);
};

// Forward: grid (B*NH, query tiles of 64), 128 threads; warp w owns rows q0 + 16w .. +15.
template <int HD, bool STATS>
__global__ void __launch_bounds__(kAttnMmaThreads)
    attn_fwd_mma_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int T, int C, int NH, int G, int P,
                        float softcap, float* stats_part) {
    constexpr int BQ = kAttnMmaBQ, BK = kAttnMmaBK, KS = HD / 16, NB = BK / 8, DB = HD / 8;
    using L = MmaFwdSmem<HD>;
    LLMC_DYNAMIC_SHARED(unsigned char, smem_raw);
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BQ, LDQ)
    __nv_bfloat16* sK = sQ + BQ * L::LDQ;                            // (BK, LDK)
    __nv_bfloat16* sVt = sK + BK * L::LDK;                           // (HD, LDV)

    const int nqt = gridDim.y;
    const int qt = nqt - 1 - blockIdx.y;  // longest (causal) tiles first
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const float scale = attn_scale(HD);
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;

    // Q tile -> smem -> this warp's A fragments (rows warp*16 + g, +8), kept in registers.
    mma_load_rows<HD, BQ>(sQ, L::LDQ, nullptr, 0, base, q0, T, C3);
    __syncthreads();
    uint32_t qa[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++) mma_load_a(qa[ks], sQ + (warp * 16 + g) * L::LDQ + ks * 16 + 2 * c, L::LDQ);
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
        mma_load_rows<HD, BK>(sK, L::LDK, nullptr, 0, base + C, k0, T, C3);
        mma_load_rows<HD, BK>(nullptr, 0, sVt, L::LDV, base + 2 * C, k0, T, C3);  // V transposed: sVt[d][key]
        __syncthreads();

        // S = Q K^T: (16 rows, 64 keys) per warp; s[nb] covers keys nb*8 + 2c + {0,1}
        float s[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) mma_smem_b(s[nb], qa[ks], sK + (nb * 8 + g) * L::LDK + ks * 16 + 2 * c);
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
            alpha[hf] = attn_online_rescale(m[hf], mx[hf], m_use[hf]);  // no NaN while nothing is visible
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
                if (STATS && p > 0.0f) es[hf] += p * sc;  // p > 0: never 0 * -inf
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
        // O += P V: P (16 x 64 keys) as A fragments straight from the S accumulators, V^T in smem
        mma_acc_times<BK / 16, DB>(o, s, sVt, L::LDV);
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
            const float inv = 1.0f / l[hf];  // l > 0: key i is always visible
            mma_store_row<DB>(out + ((size_t)b * T + i) * C + h * HD + 2 * c, o, hf, inv);
            const float row_lse = m[hf] + logf(l[hf]);
            if (c == 0) {
                lse[((size_t)b * NH + h) * T + i] = row_lse;
                if (STATS) ent += row_lse - es[hf] * inv;
            }
        }
    }
    if (STATS) {
        const float v[kAttnStatsBasic] = {smax, smin, ent};
        attn_block_stats<kAttnMmaThreads / 32>(v, stats_part + ((size_t)bh * nqt + qt) * kAttnStatsBasic);
    }
}

// ------------------------------------------------------------------------------------------------
// Backward. D_i = dO_i . O_i (attn_bwd_dot_kernel), then a dK/dV kernel per key tile and a dQ kernel
// per query tile; every output element is accumulated by one thread in a fixed order and written
// once (no atomics). P is recomputed from lse (attn_prob_grad). P and dS are rounded to bf16 for the
// second product (as FlashAttention-2 does); accumulation is fp32.
// ------------------------------------------------------------------------------------------------

// Shared memory of the dK/dV kernel. 64 keys per block (16 per warp); the inner query tile is
// 64 rows (32 for HD = 128, to keep dK + dV + S + dP accumulators in registers without spills).
template <int HD>
struct MmaBwdKvSmem {
    static constexpr int BK = kAttnMmaBK;
    static constexpr int BQ = HD == 128 ? 32 : 64;
    static constexpr int LD = HD + 8;   // sK, sV (BK, LD); sQ, sdO (BQ, LD)
    static constexpr int LDT = BQ + 8;  // sQt, sdOt (HD, LDT): transposed
    static constexpr size_t bytes =
        sizeof(__nv_bfloat16) * ((size_t)(2 * BK + 2 * BQ) * LD + 2 * (size_t)HD * LDT) + sizeof(float) * 2 * BQ;
};

// dK, dV: grid (B*NH, key tiles of 64), 128 threads. Warp w owns keys k0 + 16w .. +15 and walks the
// query tiles that see the key tile (attn_q_tile_begin/end: only the window for a local head).
// Per query tile, per warp (16 keys x BQ queries): S^T = K Q^T, dP^T = V dO^T, then P^T, dS^T, and
// dV += P^T dO, dK += dS^T Q.
template <int HD>
__global__ void __launch_bounds__(kAttnMmaThreads)
    attn_bwd_kv_mma_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                           const float* D, int T, int C, int NH, int G, int P, float softcap) {
    using L = MmaBwdKvSmem<HD>;
    constexpr int BK = L::BK, BQ = L::BQ, NB = BQ / 8, DB = HD / 8, LD = L::LD, LDT = L::LDT;
    LLMC_DYNAMIC_SHARED(unsigned char, smem_raw);
    __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BK, LD)
    __nv_bfloat16* sV = sK + BK * LD;                                // (BK, LD)
    __nv_bfloat16* sQ = sV + BK * LD;                                // (BQ, LD)
    __nv_bfloat16* sdO = sQ + BQ * LD;                               // (BQ, LD)
    __nv_bfloat16* sQt = sdO + BQ * LD;                              // (HD, LDT)
    __nv_bfloat16* sdOt = sQt + HD * LDT;                            // (HD, LDT)
    float* sL = reinterpret_cast<float*>(sdOt + HD * LDT);           // (BQ) lse of the tile's rows
    float* sD = sL + BQ;                                             // (BQ) D of the tile's rows

    const int kt = blockIdx.y;  // early key tiles see the most queries (global heads): launched first
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, k0 = kt * BK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const float scale = attn_scale(HD);
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;
    const __nv_bfloat16* gbase = dout + (size_t)b * T * C + h * HD;
    const float* lse_bh = lse + (size_t)bh * T;
    const float* D_bh = D + (size_t)bh * T;

    mma_load_rows<HD, BK>(sK, LD, nullptr, 0, base + C, k0, T, C3);
    mma_load_rows<HD, BK>(sV, LD, nullptr, 0, base + 2 * C, k0, T, C3);
    // this thread's two keys (hf = 0: key g, hf = 1: key g+8 of the warp's 16)
    const int j_row[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    float dk[DB][4], dv[DB][4];
#pragma unroll
    for (int db = 0; db < DB; db++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[db][e] = dv[db][e] = 0.0f;

    const int qb = attn_q_tile_begin(kt, BQ, BK), qe = attn_q_tile_end(kt, BQ, BK, T, local, P);
    for (int qt = qb; qt < qe; qt++) {
        const int q0 = qt * BQ;
        __syncthreads();  // every warp is done with the previous query tile (and K, V are written)
        mma_load_rows<HD, BQ>(sQ, LD, sQt, LDT, base, q0, T, C3);
        mma_load_rows<HD, BQ>(sdO, LD, sdOt, LDT, gbase, q0, T, C);
        if (threadIdx.x < BQ) {
            const int i = q0 + threadIdx.x;
            sL[threadIdx.x] = i < T ? lse_bh[i] : 0.0f;
            sD[threadIdx.x] = i < T ? D_bh[i] : 0.0f;
        }
        __syncthreads();

        // S^T = K Q^T and dP^T = V dO^T: (16 keys, BQ queries) per warp; [nb] holds queries nb*8 + 2c + {0,1}
        float s[NB][4], dp[NB][4];
        mma_two_products<HD, NB>(s, dp, sK + warp * 16 * LD, sV + warp * 16 * LD, LD, sQ, sdO, LD);

        // P^T and dS^T in place (s <- p, dp <- ds)
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qi = nb * 8 + 2 * c + (e & 1), i = q0 + qi, j = j_row[e / 2];
                const bool vis = !need_mask || (i < T && attn_visible(i, j, local, P));  // j >= T implies j > i
                float ds;
                s[nb][e] = attn_prob_grad(s[nb][e] * scale, dp[nb][e], sL[qi], sD[qi], softcap, scale, vis, ds);
                dp[nb][e] = ds;
            }
        }

        // dV += P^T dO, dK += dS^T Q: A = (16 keys, 16 queries) from the accumulators,
        // B[k = query][n = dim] from the transposed tiles.
        mma_acc_times<BQ / 16, DB>(dv, s, sdOt, LDT);
        mma_acc_times<BQ / 16, DB>(dk, dp, sQt, LDT);
    }

    // dk[db], dv[db]: key j_row[e/2], dims db*8 + 2c + (e&1)
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int j = j_row[hf];
        if (j >= T) continue;
        __nv_bfloat16* drow = dqkv + ((size_t)b * T + j) * C3 + h * HD + 2 * c;
        mma_store_row<DB>(drow + C, dk, hf, 1.0f);
        mma_store_row<DB>(drow + 2 * C, dv, hf, 1.0f);
    }
}

// Shared memory of the dQ kernel: 64 query rows (16 per warp) x 64 keys per tile.
template <int HD>
struct MmaBwdQSmem {
    static constexpr int BQ = kAttnMmaBQ, BK = kAttnMmaBK;
    static constexpr int LD = HD + 8;   // sQ, sdO (BQ, LD); sK, sV (BK, LD)
    static constexpr int LDT = BK + 8;  // sKt (HD, LDT): K transposed
    static constexpr size_t bytes = sizeof(__nv_bfloat16) * ((size_t)(2 * BQ + 2 * BK) * LD + (size_t)HD * LDT);
};

// dQ: grid (B*NH, query tiles of 64), 128 threads. Warp w owns rows q0 + 16w .. +15 and walks the
// key tiles of the forward (attn_kv_tile_begin/end). Per key tile: S = Q K^T, dP = dO V^T, P, dS,
// dQ += dS K.
template <int HD>
__global__ void __launch_bounds__(kAttnMmaThreads)
    attn_bwd_q_mma_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                          const float* D, int T, int C, int NH, int G, int P, float softcap) {
    using L = MmaBwdQSmem<HD>;
    constexpr int BQ = L::BQ, BK = L::BK, NB = BK / 8, DB = HD / 8, LD = L::LD, LDT = L::LDT;
    LLMC_DYNAMIC_SHARED(unsigned char, smem_raw);
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BQ, LD)
    __nv_bfloat16* sdO = sQ + BQ * LD;                               // (BQ, LD)
    __nv_bfloat16* sK = sdO + BQ * LD;                               // (BK, LD)
    __nv_bfloat16* sV = sK + BK * LD;                                // (BK, LD)
    __nv_bfloat16* sKt = sV + BK * LD;                               // (HD, LDT)

    const int qt = gridDim.y - 1 - blockIdx.y;  // longest (causal) tiles first
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const float scale = attn_scale(HD);
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;
    const __nv_bfloat16* gbase = dout + (size_t)b * T * C + h * HD;

    mma_load_rows<HD, BQ>(sQ, LD, nullptr, 0, base, q0, T, C3);
    mma_load_rows<HD, BQ>(sdO, LD, nullptr, 0, gbase, q0, T, C);
    const int i_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float row_lse[2], row_D[2];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i_row[hf];
        row_lse[hf] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
        row_D[hf] = i < T ? D[(size_t)bh * T + i] : 0.0f;
    }
    float dq[DB][4];
#pragma unroll
    for (int db = 0; db < DB; db++) dq[db][0] = dq[db][1] = dq[db][2] = dq[db][3] = 0.0f;

    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;
        __syncthreads();  // every warp is done with the previous K / V tile (and Q, dO are written)
        mma_load_rows<HD, BK>(sK, LD, sKt, LDT, base + C, k0, T, C3);
        mma_load_rows<HD, BK>(sV, LD, nullptr, 0, base + 2 * C, k0, T, C3);
        __syncthreads();

        // S = Q K^T, dP = dO V^T: (16 rows, 64 keys) per warp; [nb] holds keys nb*8 + 2c + {0,1}
        float s[NB][4], dp[NB][4];
        mma_two_products<HD, NB>(s, dp, sQ + warp * 16 * LD, sdO + warp * 16 * LD, LD, sK, sV, LD);

        // dS in place of dP
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hf = e / 2, i = i_row[hf], j = k0 + nb * 8 + 2 * c + (e & 1);
                const bool vis = !need_mask || (i < T && attn_visible(i, j, local, P));  // j >= T implies j > i
                float ds;
                attn_prob_grad(s[nb][e] * scale, dp[nb][e], row_lse[hf], row_D[hf], softcap, scale, vis, ds);
                dp[nb][e] = ds;
            }
        }

        // dQ += dS K: A = dS (16 rows, 16 keys) from the accumulators, B[k = key][n = dim] = Kt[dim][key]
        mma_acc_times<BK / 16, DB>(dq, dp, sKt, LDT);
    }

    // dq[db]: row i_row[e/2], dims db*8 + 2c + (e&1)
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i_row[hf];
        if (i >= T) continue;
        mma_store_row<DB>(dqkv + ((size_t)b * T + i) * C3 + h * HD + 2 * c, dq, hf, 1.0f);
    }
}

}  // namespace llmc::cuda
