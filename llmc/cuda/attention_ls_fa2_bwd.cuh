// LS-attention backward, FlashAttention-2 class: bf16 mma.sync m16n8k16 with fp32 accumulation,
// sm_80+, the bf16 build's backward. Launched by llmc/cuda/attention_ls.cuh after attn_bwd_dot_kernel has written
// D_i = dO_i . O_i. Design: docs/attention_kernel.md.
//
// Two kernels, each output element summed by one thread in a fixed order, or by the blocks of a
// split tile loop (llmc/core/attention_split.h) and their partials added in chunk order
// (deterministic, no float atomics):
//   dK/dV: key tiles of 64, 4 warps, warp w owns keys k0 + 16w .. +15; K and V stay
//          resident, the query tiles that see the key tile (attn_q_tile_begin/end: for a local head
//          only the window) stream through a cp.async double buffer (Q, dO, -lse*log2(e), D).
//          Per query tile and warp (16 keys x BQ queries): S^T = K Q^T, dP^T = V dO^T,
//          P^T = exp2(S^T * mul - lse * log2(e)), dS^T = P^T (dP^T - D) [(1 - tanh^2)],
//          dV += P^T dO, dK += dS^T Q. One block body (fa2_bwd_kv_block) with hooks for what a
//          candidate adds (its Extra; the lab's one-pass backward forms dQ parts there).
//   dQ:    query tiles of 64, 4 warps, warp w owns rows q0 + 16w .. +15; Q and dO stay
//          resident, the forward's key tiles stream through a cp.async double buffer (K, V).
//          Per key tile: S = Q K^T, dP = dO V^T, dS, dQ += dS K.
//   (dQ is a pass of its own, which recomputes S and dP, where FlashAttention-2 hands each tile's dS K
//   over in fp32 through global memory; docs/attention_kernel.md, "Why dQ has a pass of its own".)
// At hd 32 / 64 a tile is taken one 16-wide pair (16 queries for dK/dV, 16 keys for dQ) at a time
// through all its products, and a masked tile skips the pairs its warp cannot see (the OR of its
// threads' score bits); at hd 128 every pair, the products one after the other.
// Every tile is row-major (row = token) and XOR-swizzled (llmc/core/smem_swizzle.h), as in the
// forward (llmc/cuda/attention_ls_fa2.cuh, whose tile loader and lane offsets this file reuses).
// Fragments (PTX ISA "Matrix Fragments for mma.m16n8k16", g = lane/4, c = lane%4):
//   A of S^T / dP^T (dK/dV) and of S / dP (dQ): the warp's 16 rows of K, V (or Q, dO) with
//     ldmatrix.x4, kept in registers at hd 32 / 64 (kFa2BwdARegs), reloaded per tile at hd 128;
//   B of S^T / dP^T: B(k = dim, n = query) = Q[query][dim], and of S / dP: K, V[key][dim]: the
//     row-major tiles are n-major, plain ldmatrix.x4;
//   B of dV += P^T dO, dK += dS^T Q (k = query, n = dim) and of dQ += dS K (k = key): the row-major
//     tiles are k-major, ldmatrix.x4.trans (no transposed shared copies);
//   A of those products: P^T, dS^T (or dS) accumulators repacked as bf16 A fragments (mma_acc_to_a).
// P is recomputed in base 2 from the forward's lse (natural log): x = the raw accumulator q.k
// (mul = log2(e)/sqrt(hd)) or t = tanh(q.k/(sqrt(hd) c)) (one tanh.approx; mul = c log2(e), the
// capped score being c*t); one FFMA and one ex2.approx.ftz per pair. dS is kept without the
// 1/sqrt(hd) factor, applied once to dK and dQ at the store. Soft-cap and the per-element mask are compile-time (masked tiles:
// attn_tile_needs_mask); P and dS are rounded to bf16 for the second products, as in FA2.
#pragma once
#include "llmc/core/smem_swizzle.h"
#include "llmc/cuda/attention_ls_common.cuh"
#include "llmc/cuda/attention_ls_fa2.cuh"  // Fa2TileCopy, fa2_lane_offset (and mma_fragments.cuh)
#include "llmc/cuda/ptx.cuh"  // mma_bf16_16816, ldmatrix_x4(_trans), cp_async_*, ex2_approx_ftz, redux_sync_or_b32

namespace llmc::cuda {

// The warp's A fragments (16 rows x HD) stay in registers for the whole block at hd 32 / 64.
template <int HD>
constexpr bool kFa2BwdARegs = HD <= 64;
template <int HD>
constexpr int kFa2BwdAFrags = kFa2BwdARegs<HD> ? HD / 16 : 1;

// The A fragments of 16 rows of a swizzled (rows, HD) tile; rows: bytes of the first of them.
// Matrices: (rows 0..7 | 8..15) x (cols ks*16 + 0..7 | 8..15).
template <int HD>
__device__ __forceinline__ void fa2_load_a(uint32_t (&a)[4], const char* rows, int ks) {
    const int lane = threadIdx.x % 32, mi = lane / 8, j8 = lane % 8;
    ldmatrix_x4(a, rows + (fa2_lane_offset<HD>((mi & 1) * 8 + j8, mi >> 1) ^ (32u * ks)));
}

// One 16-column pair np of s = A1 B1^T, dp = A2 B2^T, dims ks*16 .. +15: x1, x2 the A fragments of
// the warp's 16 rows, B1, B2 rows np*16 .. +15 of the swizzled tiles b1, b2 (n-major: plain
// ldmatrix; matrices (rows np*16 + 0..7 | 8..15) x (dims ks*16 + 0..7 | 8..15)), accumulated into
// s[sb], s[sb + 1], dp[sb], dp[sb + 1] (the pair's two 8-column blocks: columns 2c + {0,1} of each).
template <int HD, int NB>
__device__ __forceinline__ void fa2_pair_step(float (&s)[NB][4], float (&dp)[NB][4], const uint32_t (&x1)[4],
                                              const uint32_t (&x2)[4], const char* b1, const char* b2, int ks, int np,
                                              int sb) {
    constexpr uint32_t ROW16 = 16u * HD * 2u;  // bytes of 16 tile rows
    const int lane = threadIdx.x % 32, mi = lane / 8, j8 = lane % 8;
    const uint32_t off = np * ROW16 + (fa2_lane_offset<HD>((mi >> 1) * 8 + j8, mi & 1) ^ (32u * ks));
    uint32_t y1[4], y2[4];
    ldmatrix_x4(y1, b1 + off);
    ldmatrix_x4(y2, b2 + off);
    mma_bf16_16816(s[sb], x1, y1[0], y1[1]);
    mma_bf16_16816(s[sb + 1], x1, y1[2], y1[3]);
    mma_bf16_16816(dp[sb], x2, y2[0], y2[1]);
    mma_bf16_16816(dp[sb + 1], x2, y2[2], y2[3]);
}

// s = A1 B1^T, dp = A2 B2^T (16 x 8*NB each): A1, A2 the warp's 16 rows (from registers a1r / a2r
// when kFa2BwdARegs, else from the swizzled tiles at a1 / a2), B1, B2 the 8*NB rows of the
// swizzled tiles b1, b2. s[nb], dp[nb]: columns nb*8 + 2c + {0,1}.
template <int HD, int NB>
__device__ __forceinline__ void fa2_two_products(float (&s)[NB][4], float (&dp)[NB][4],
                                                 const uint32_t (&a1r)[kFa2BwdAFrags<HD>][4],
                                                 const uint32_t (&a2r)[kFa2BwdAFrags<HD>][4], const char* a1,
                                                 const char* a2, const char* b1, const char* b2) {
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        uint32_t x1[4], x2[4];
        if constexpr (kFa2BwdARegs<HD>) {
#pragma unroll
            for (int e = 0; e < 4; e++) x1[e] = a1r[ks][e], x2[e] = a2r[ks][e];
        } else {
            fa2_load_a<HD>(x1, a1, ks);
            fa2_load_a<HD>(x2, a2, ks);
        }
#pragma unroll
        for (int np = 0; np < NB / 2; np++) fa2_pair_step<HD, NB>(s, dp, x1, x2, b1, b2, ks, np, 2 * np);
    }
}

// acc (16 x HD) += X Y for one 16-row block kk of k: X (16 x 16) the bf16 A fragment xa
// (fa2_a_times_block) or the fp32 accumulators x0, x1 (its columns 0..7, 8..15; rounded to bf16:
// fa2_acc_times_block), Y rows kk*16 .. +15 of the swizzled row-major (rows, HD) tile y (k-major:
// ldmatrix.trans).
template <int HD>
__device__ __forceinline__ void fa2_a_times_block(float (&acc)[HD / 8][4], const uint32_t (&xa)[4], const char* y,
                                                  int kk) {
    constexpr uint32_t ROW16 = 16u * HD * 2u;
    const int lane = threadIdx.x % 32, mi = lane / 8, j8 = lane % 8;
    const uint32_t y_off = fa2_lane_offset<HD>((mi & 1) * 8 + j8, mi >> 1);
#pragma unroll
    for (int dp = 0; dp < HD / 16; dp++) {
        // matrices: (k rows kk*16 + 0..7 | 8..15) x (dims dp*16 + 0..7 | 8..15), transposed
        uint32_t yb[4];
        ldmatrix_x4_trans(yb, y + kk * ROW16 + (y_off ^ (32u * dp)));
        mma_bf16_16816(acc[2 * dp], xa, yb[0], yb[1]);
        mma_bf16_16816(acc[2 * dp + 1], xa, yb[2], yb[3]);
    }
}
template <int HD>
__device__ __forceinline__ void fa2_acc_times_block(float (&acc)[HD / 8][4], const float (&x0)[4], const float (&x1)[4],
                                                    const char* y, int kk) {
    uint32_t xa[4];
    mma_acc_to_a(xa, x0, x1);
    fa2_a_times_block<HD>(acc, xa, y, kk);
}

// A tile's products for one warp, by 16-wide pairs of columns: S = A1 B1^T, dP = A2 B2^T
// (fa2_pair_step), then finish(s0, s1, d0, d1, np) turns pair np's two 8-column blocks of S and dP
// into the A operands of the second products, and accumulate(s0, s1, d0, d1, np) adds their terms
// (the second products' k block np). With A in registers (hd 32 / 64) one pair at a time through
// all of it, skipping pair np when pairs, the OR of the warp's score words (bit 2nb + e + 16hf per
// thread), has none of its bits attn_pair_bits(np) (its 16 x 16 scores: warp-uniform; a skipped
// pair's blocks are never read, so never zeroed); at hd 128 (A reloaded from the tiles a1, a2 per 16
// dims, dims outer) every pair's products first, then every finish, then every accumulate.
template <int HD, int NB, typename Finish, typename Accumulate>
__device__ __forceinline__ void fa2_tile_pairs(const uint32_t (&a1r)[kFa2BwdAFrags<HD>][4],
                                               const uint32_t (&a2r)[kFa2BwdAFrags<HD>][4], const char* a1,
                                               const char* a2, const char* b1, const char* b2, unsigned pairs,
                                               Finish finish, Accumulate accumulate) {
    if constexpr (kFa2BwdARegs<HD>) {
#pragma unroll
        for (int np = 0; np < NB / 2; np++) {
            if (!(pairs & attn_pair_bits(np))) continue;
            float s[2][4] = {}, dp[2][4] = {};  // columns np*16 + nb*8 + 2c + {0,1}
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) fa2_pair_step<HD, 2>(s, dp, a1r[ks], a2r[ks], b1, b2, ks, np, 0);
            finish(s[0], s[1], dp[0], dp[1], np);
            accumulate(s[0], s[1], dp[0], dp[1], np);
        }
    } else {
        float s[NB][4], dp[NB][4];  // [nb]: columns nb*8 + 2c + {0,1}
        fa2_two_products<HD, NB>(s, dp, a1r, a2r, a1, a2, b1, b2);
#pragma unroll
        for (int np = 0; np < NB / 2; np++) finish(s[2 * np], s[2 * np + 1], dp[2 * np], dp[2 * np + 1], np);
#pragma unroll
        for (int np = 0; np < NB / 2; np++) accumulate(s[2 * np], s[2 * np + 1], dp[2 * np], dp[2 * np + 1], np);
    }
}

// One pair: a = the raw accumulator q_i.k_j, dp = dO_i.v_j, neg_lse2 = -lse_i*log2(e), Di = D_i,
// mul = log2(e)/sqrt(hd), or c*log2(e) with soft-cap (x units: a, or t = tanh(s/c)).
// Returns p = exp(s' - lse_i) and replaces dp by dS' = p (dp - D_i) [(1 - t^2)], the gradient of
// q_i.k_j up to the factor 1/sqrt(hd). (The reference: attn_prob_grad.)
template <bool SOFTCAP>
__device__ __forceinline__ float fa2_bwd_pair(float a, float& dp, float neg_lse2, float Di, float mul,
                                              float scale_over_cap) {
    const float t = SOFTCAP ? tanh_approx(a * scale_over_cap) : 0.0f;
    const float x = SOFTCAP ? t : a;
    const float p = ex2_approx_ftz(fmaf(x, mul, neg_lse2));
    float d = p * (dp - Di);
    if (SOFTCAP) d *= 1.0f - t * t;
    dp = d;
    return p;
}

template <int HD>
struct Fa2BwdKvSmem {
    static constexpr int BK = kAttnFa2BK;
    static constexpr int BQ = HD == 128 ? 32 : 64;  // hd 128: dK + dV + S + dP accumulators without spills
    static constexpr int KV_TILE = BK * HD, Q_TILE = BQ * HD;
    // sK, sV (BK, HD) | sQ[2], sdO[2] (BQ, HD) | sNL[2], sD[2] (BQ) fp32
    static constexpr size_t bytes =
        sizeof(__nv_bfloat16) * (2 * (size_t)KV_TILE + 4 * (size_t)Q_TILE) + sizeof(float) * 4 * BQ;
};

// What a dK/dV block does besides dK and dV (fa2_bwd_kv_block): the production kernel's Fa2KvOnly
// does nothing; the lab's one-pass candidate (dev/cuda/attention_candidates/attention_ls_onepass.cuh)
// also forms dQ parts. Its calls, in the block's order:
//   begin(extra_smem, work, T, NH, G, P)  before the query-tile loop; extra_smem: the dynamic shared
//                                         memory past Fa2BwdKvSmem<HD>::bytes
//   after_accumulate(d0, d1, np)          per warp, after pair np's dV and dK terms: d0, d1 its two
//                                         8-query blocks of dS^T (fa2_bwd_kv_tile)
//   after_tile(qt, pairs, sK)             after query tile qt, every thread; pairs: the warp's
//                                         computed 16-query pairs (bits attn_pair_bits(np))
struct Fa2KvOnly {
    __device__ __forceinline__ void begin(char*, const Fa2BlockWork&, int, int, int, int) {}
    __device__ __forceinline__ void after_accumulate(const float (&)[4], const float (&)[4], int) {}
    __device__ __forceinline__ void after_tile(int, unsigned, const __nv_bfloat16*) {}
};

// One query tile of the dK/dV kernel for one warp: keys j_row (this thread's two), queries
// q0 .. q0+BQ-1 in the swizzled tiles sQ, sdO, their -lse*log2(e) and D in sNL, sD. Returns the
// 16-query pairs it computed (bits attn_pair_bits(np); all of them on an unmasked tile).
template <int HD, int BQ, bool SOFTCAP, bool MASK, typename Extra>
__device__ __forceinline__ unsigned fa2_bwd_kv_tile(float (&dk)[HD / 8][4], float (&dv)[HD / 8][4],
                                                    const uint32_t (&ka)[kFa2BwdAFrags<HD>][4],
                                                    const uint32_t (&va)[kFa2BwdAFrags<HD>][4], const char* k_rows,
                                                    const char* v_rows, const __nv_bfloat16* sQ,
                                                    const __nv_bfloat16* sdO, const float* sNL, const float* sD,
                                                    const int (&j_row)[2], int q0, int T, bool local, int P, float mul,
                                                    float scale_over_cap, Extra& extra) {
    constexpr int NB = BQ / 8;
    const int c = threadIdx.x % 4;
    // masked: key j is seen by the queries [j, min(T-1, j+P-1)] ([j, T-1] for a global head): bit
    // 2nb + e + 16hf of vis_bits is pair (query q0 + 2c + 8nb + e, key j_row[hf])'s
    unsigned vis_bits = 0u;
    const unsigned one = opaque_u32(1u);  // the tests below stay LOP3 / R2P (opaque_u32)
    if (MASK) {
        const int qc = q0 + 2 * c;  // this thread's first query
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int j = j_row[hf], last = local ? attn_imin(T - 1, j + P - 1) : T - 1;
            vis_bits |= attn_thread_score_bits(j - qc, last - qc) << (16 * hf);
        }
    }
    // block nb of S^T, dP^T (queries nb*8 + 2c + {0,1}) -> P^T, dS^T, 0 on invisible pairs
    auto finish_block = [&](float(&sb)[4], float(&db)[4], int nb) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int qi = nb * 8 + 2 * c + (e & 1);
            const float p = fa2_bwd_pair<SOFTCAP>(sb[e], db[e], sNL[qi], sD[qi], mul, scale_over_cap);
            const bool vis = !MASK || (vis_bits & (one << (2 * nb + (e & 1) + 16 * (e / 2)))) != 0;
            sb[e] = vis ? p : 0.0f;  // an invisible pair's p and dS may be inf or NaN: dropped here
            if (MASK) db[e] = vis ? db[e] : 0.0f;
        }
    };
    const char* q_bytes = reinterpret_cast<const char*>(sQ);
    const char* do_bytes = reinterpret_cast<const char*>(sdO);
    // masked: the OR of vis_bits over the warp (one REDUX, a uniform register): the 16-query pairs in
    // which a query sees one of the warp's keys have a bit set (fa2_tile_pairs; hd 128 skips none)
    const unsigned pairs = MASK && kFa2BwdARegs<HD> ? redux_sync_or_b32(vis_bits, 0xffffffffu) : ~0u;
    // S^T = K Q^T, dP^T = V dO^T (16 keys, BQ queries); dV += P^T dO, dK += dS^T Q (B: k = query,
    // n = dim, from the row-major tiles, transposed)
    fa2_tile_pairs<HD, NB>(
        ka, va, k_rows, v_rows, q_bytes, do_bytes, pairs,
        [&](float(&s0)[4], float(&s1)[4], float(&d0)[4], float(&d1)[4], int np) {
            finish_block(s0, d0, 2 * np);
            finish_block(s1, d1, 2 * np + 1);
        },
        [&](float(&s0)[4], float(&s1)[4], float(&d0)[4], float(&d1)[4], int np) {
            fa2_acc_times_block<HD>(dv, s0, s1, do_bytes, np);
            fa2_acc_times_block<HD>(dk, d0, d1, q_bytes, np);
            extra.after_accumulate(d0, d1, np);
        });
    return pairs;
}

// dk[db], dv[db]: key j_row[e/2], dims db*8 + 2c + (e&1), into dqkv's k and v parts of head h of
// batch row b; dK takes the 1/sqrt(hd) of dS here (scale).
template <int HD>
__device__ __forceinline__ void fa2_store_dkv(__nv_bfloat16* dqkv, const float (&dk)[HD / 8][4],
                                              const float (&dv)[HD / 8][4], const int (&j_row)[2], int b, int h, int T,
                                              int C, float scale) {
    const int c = threadIdx.x % 4;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int j = j_row[hf];
        if (j >= T) continue;
        __nv_bfloat16* drow = dqkv + ((size_t)b * T + j) * (3 * C) + h * HD + 2 * c;
        mma_store_row<HD / 8>(drow + C, dk, hf, scale);
        mma_store_row<HD / 8>(drow + 2 * C, dv, hf, 1.0f);
    }
}

// A dK/dV block: one of the split's blocks (fa2_block_work over key tiles of 64 looping over query
// tiles: one per (b, h, key tile, chunk of its query tiles)), 128 threads; writes dqkv's k and v
// parts. The blocks of a split key tile leave their dK, dV sums and the last to arrive adds them in
// chunk order (fa2_sum_acc) and writes them. extra: what the block does besides (Fa2KvOnly).
template <int HD, bool SOFTCAP, typename Extra>
__device__ __forceinline__ void fa2_bwd_kv_block(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                                 const __nv_bfloat16* qkv, const float* lse, const float* D, int T,
                                                 int C, int NH, int G, int P, float softcap, Fa2Split split,
                                                 Extra& extra) {
    using L = Fa2BwdKvSmem<HD>;
    constexpr int BK = L::BK, BQ = L::BQ, KS = HD / 16, DB = HD / 8;
    constexpr float kLog2e = 1.4426950408889634f;
    LLMC_DYNAMIC_SHARED(unsigned char, smem_raw);
    __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BK, HD) swizzled
    __nv_bfloat16* sV = sK + L::KV_TILE;                             // (BK, HD) swizzled
    __nv_bfloat16* sQ = sV + L::KV_TILE;                             // [2] (BQ, HD) swizzled
    __nv_bfloat16* sdO = sQ + 2 * L::Q_TILE;                         // [2] (BQ, HD) swizzled
    float* sNL = reinterpret_cast<float*>(sdO + 2 * L::Q_TILE);      // [2] (BQ): -lse * log2(e)
    float* sD = sNL + 2 * BQ;                                        // [2] (BQ): D
    char* extra_smem = reinterpret_cast<char*>(sD + 2 * BQ);         // Extra's

    AttnSplitGeom geom{T, BQ, BK, P, false, true};
    const Fa2BlockWork work = fa2_block_work<true>(split, geom, blockIdx.x, NH, G);
    const int b = work.b, h = work.h, bh = b * NH + h;
    const bool local = work.local;
    const int C3 = 3 * C;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const float scale = attn_scale(HD);
    const float mul = (SOFTCAP ? softcap : scale) * kLog2e;  // x units: raw accumulator or tanh
    const float scale_over_cap = SOFTCAP ? scale / softcap : 0.0f;
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;
    const __nv_bfloat16* gbase = dout + (size_t)b * T * C + h * HD;
    const float* lse_bh = lse + (size_t)bh * T;
    const float* D_bh = D + (size_t)bh * T;
    // this tile's rows of lse / D into buffer buf (plain loads: lse rows are not 16-byte aligned)
    auto load_rows = [&](int qt, int buf) {
        if ((int)threadIdx.x < BQ) {
            const int i = qt * BQ + (int)threadIdx.x;
            sNL[buf * BQ + threadIdx.x] = i < T ? -lse_bh[i] * kLog2e : 0.0f;
            sD[buf * BQ + threadIdx.x] = i < T ? D_bh[i] : 0.0f;
        }
    };

    // The walk: key tile kt over its query tiles [qb, qe) (the block's chunk of them for its first key
    // tile, unless split all of them), then with a run (llmc/core/attention_split.h) key tile kt + 1
    // over all of its own, up to kt_end. Along the walk the query tiles never decrease and two key
    // tiles share at most one (attn_run_allowed): a key tile's first query tile is the last one's
    // (kept in its buffer) or a new one, loaded with the key tile's K and V during the last one's last
    // step. The tile loop is the unsplit kernel's; the next key tile's set-up is outside it.
    int kt = work.outer, qb = work.inner_begin, qe = work.inner_end;
    const int kt_end = work.outer_end;
    // prologue: K, V and the first query tile in one group
    const Fa2TileCopy<HD, BQ> q_copy(base, C3), do_copy(gbase, C);
    const Fa2TileCopy<HD, BK> kv_copy(base + C, C3);  // K; V is C elements further
    const uint32_t v_extra = 2u * (uint32_t)C;
    kv_copy.copy_pair(sK, sV, kt * BK, T, v_extra);
    q_copy.copy(sQ, qb * BQ, T);
    do_copy.copy(sdO, qb * BQ, T);
    cp_async_commit_group();
    load_rows(qb, 0);
    cp_async_wait_group<0>();
    __syncthreads();
    constexpr uint32_t ROW16 = 16u * HD * 2u;
    const char* k_rows = reinterpret_cast<const char*>(sK) + (uint32_t)warp * ROW16;
    const char* v_rows = reinterpret_cast<const char*>(sV) + (uint32_t)warp * ROW16;
    uint32_t ka[kFa2BwdAFrags<HD>][4], va[kFa2BwdAFrags<HD>][4];
    // the warps' K, V fragments of key tile kt; with a run's later key tile to come, a barrier after
    // them: every warp has read sK, sV before they are refilled
    auto load_kv_fragments = [&] {
        if constexpr (kFa2BwdARegs<HD>) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                fa2_load_a<HD>(ka[ks], k_rows, ks);
                fa2_load_a<HD>(va[ks], v_rows, ks);
            }
        }
        if (kt + 1 < kt_end) __syncthreads();
    };
    load_kv_fragments();

    // this thread's two keys (hf = 0: key g, hf = 1: key g+8 of the warp's 16)
    int j_row[2] = {kt * BK + warp * 16 + g, kt * BK + warp * 16 + g + 8};
    float dk[DB][4], dv[DB][4];
#pragma unroll
    for (int db = 0; db < DB; db++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[db][e] = dv[db][e] = 0.0f;

    extra.begin(extra_smem, work, T, NH, G, P);
    int buf = 0;  // the buffer of query tile qt
    for (;;) {
        for (int qt = qb; qt < qe; qt++) {
            if (qt != qb) {
                cp_async_wait_group<0>();  // this thread's copies of tile qt (the only group in flight)
                __syncthreads();           // everyone's copies and row loads landed; tile qt-1 is done
            }
            if (qt + 1 < qe) {  // prefetch tile qt+1 into the buffer tile qt-1 used
                q_copy.copy(sQ + (buf ^ 1) * L::Q_TILE, (qt + 1) * BQ, T);
                do_copy.copy(sdO + (buf ^ 1) * L::Q_TILE, (qt + 1) * BQ, T);
                cp_async_commit_group();
                load_rows(qt + 1, buf ^ 1);
            } else if (kt + 1 < kt_end) {  // a run's next key tile: K, V and its first query tile, if new
                const int nq = geom.inner_begin(kt + 1);
                kv_copy.copy_pair(sK, sV, (kt + 1) * BK, T, v_extra);
                if (nq != qt) {
                    q_copy.copy(sQ + (buf ^ 1) * L::Q_TILE, nq * BQ, T);
                    do_copy.copy(sdO + (buf ^ 1) * L::Q_TILE, nq * BQ, T);
                }
                cp_async_commit_group();
                if (nq != qt) load_rows(nq, buf ^ 1);
            }
            const __nv_bfloat16* q_tile = sQ + buf * L::Q_TILE;
            const __nv_bfloat16* do_tile = sdO + buf * L::Q_TILE;
            const float* nl = sNL + buf * BQ;
            const float* dd = sD + buf * BQ;
            unsigned pairs;
            if (attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P))
                pairs = fa2_bwd_kv_tile<HD, BQ, SOFTCAP, true>(dk, dv, ka, va, k_rows, v_rows, q_tile, do_tile, nl, dd,
                                                               j_row, qt * BQ, T, local, P, mul, scale_over_cap, extra);
            else
                pairs =
                    fa2_bwd_kv_tile<HD, BQ, SOFTCAP, false>(dk, dv, ka, va, k_rows, v_rows, q_tile, do_tile, nl, dd,
                                                            j_row, qt * BQ, T, local, P, mul, scale_over_cap, extra);
            extra.after_tile(qt, pairs, sK);
            if (qt + 1 < qe) buf ^= 1;
        }
        if (kt + 1 >= kt_end) break;
        // a run's next key tile (a run's key tiles are never split): kt's dK, dV out; kt + 1's K, V
        // and first query tile landed: its fragments
        fa2_store_dkv<HD>(dqkv, dk, dv, j_row, b, h, T, C, scale);
#pragma unroll
        for (int db = 0; db < DB; db++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[db][e] = dv[db][e] = 0.0f;
        const int nq = geom.inner_begin(kt + 1);
        if (nq != qe - 1) buf ^= 1;  // a new first query tile went to the other buffer
        kt++;
        qb = nq;
        qe = geom.inner_end(kt);
        j_row[0] = kt * BK + warp * 16 + g;
        j_row[1] = j_row[0] + 8;
        cp_async_wait_group<0>();
        __syncthreads();
        load_kv_fragments();
    }

    // decoded again from an opaque block index: the split's fields are not kept live across the loop
    const Fa2BlockWork again = fa2_block_work<true>(split, geom, opaque_u32(blockIdx.x), NH, G);
    if (again.chunks > 1) {  // a split key tile: leave this chunk's sums; the last block adds them
        const long long s0 = again.first_slot(geom) - again.j_first;
        const auto slot = [&](int j) { return split.part + (size_t)(s0 + j) * (2 * 4 * DB * kAttnFa2Threads); };
        float* mine = slot(again.j);
        fa2_store_acc<DB>(dk, mine);
        fa2_store_acc<DB>(dv, mine + 4 * DB * kAttnFa2Threads);
        if (!arrive_last(split.arrivals + (size_t)bh * geom.n_key_tiles() + kt, (uint32_t)again.chunks)) return;
        fa2_sum_acc<DB>(dk, again.j_first, again.chunks, slot);
        fa2_sum_acc<DB>(dv, again.j_first, again.chunks, [&](int j) { return slot(j) + 4 * DB * kAttnFa2Threads; });
    }

    fa2_store_dkv<HD>(dqkv, dk, dv, j_row, b, h, T, C, scale);
}

// dK, dV (fa2_bwd_kv_block, nothing besides). Registers: hd 64 asks for 3 blocks/SM (at most 168
// registers; with the runs' walk ptxas's own choice took 239, 2 blocks); the others keep ptxas's
// choice (figures: docs/results/attention_journal.md).
template <int HD, bool SOFTCAP>
__global__ void __launch_bounds__(kAttnFa2Threads, HD == 64 ? 3 : 0)
    attn_bwd_kv_fa2_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                           const float* D, int T, int C, int NH, int G, int P, float softcap, Fa2Split split) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    Fa2KvOnly only;
    fa2_bwd_kv_block<HD, SOFTCAP>(dqkv, dout, qkv, lse, D, T, C, NH, G, P, softcap, split, only);
}

template <int HD>
struct Fa2BwdQSmem {
    static constexpr int BQ = kAttnFa2BQ, BK = kAttnFa2BK;
    static constexpr int TILE = BQ * HD;  // = BK * HD
    // sQ, sdO (BQ, HD) | sK[2], sV[2] (BK, HD)
    static constexpr size_t bytes = sizeof(__nv_bfloat16) * 6 * (size_t)TILE;
};

// One key tile of the dQ kernel for one warp: rows i_row (this thread's two) with their
// -lse*log2(e) and D, keys k0 .. k0+63 in the swizzled tiles sK, sV.
template <int HD, bool SOFTCAP, bool MASK>
__device__ __forceinline__ void fa2_bwd_q_tile(float (&dq)[HD / 8][4], const uint32_t (&qa)[kFa2BwdAFrags<HD>][4],
                                               const uint32_t (&da)[kFa2BwdAFrags<HD>][4], const char* q_rows,
                                               const char* do_rows, const __nv_bfloat16* sK, const __nv_bfloat16* sV,
                                               const int (&i_row)[2], const float (&neg_lse2)[2],
                                               const float (&row_D)[2], int k0, int T, bool local, int P, float mul,
                                               float scale_over_cap) {
    constexpr int NB = kAttnFa2BK / 8;
    const int c = threadIdx.x % 4;
    // masked: row i sees the keys [key_lo(i), i] (none past T): bit 2nb + e + 16hf of vis_bits is
    // pair (row i_row[hf], key k0 + 2c + 8nb + e)'s
    const unsigned vis_bits = MASK ? fa2_query_rows_bits(i_row, k0 + 2 * c, T, local, P) : 0u;
    const unsigned one = opaque_u32(1u);  // the tests below stay LOP3 / R2P (opaque_u32)
    // block nb of S, dP (keys nb*8 + 2c + {0,1}) -> dS, 0 on invisible pairs
    auto finish_block = [&](float(&sb)[4], float(&db)[4], int nb) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int hf = e / 2;
            fa2_bwd_pair<SOFTCAP>(sb[e], db[e], neg_lse2[hf], row_D[hf], mul, scale_over_cap);
            // an invisible pair's dS may be inf or NaN: dropped here
            if (MASK) db[e] = (vis_bits & (one << (2 * nb + (e & 1) + 16 * hf))) != 0 ? db[e] : 0.0f;
        }
    };
    const char* k_bytes = reinterpret_cast<const char*>(sK);
    // masked: the OR of vis_bits over the warp (one REDUX, a uniform register): the 16-key pairs in
    // which one of the warp's rows sees a key have a bit set (fa2_tile_pairs; hd 128 skips none)
    const unsigned pairs = MASK && kFa2BwdARegs<HD> ? redux_sync_or_b32(vis_bits, 0xffffffffu) : ~0u;
    // S = Q K^T, dP = dO V^T (16 rows, 64 keys); dQ += dS K (B: k = key, n = dim, from the row-major
    // K tile, transposed)
    fa2_tile_pairs<HD, NB>(
        qa, da, q_rows, do_rows, k_bytes, reinterpret_cast<const char*>(sV), pairs,
        [&](float(&s0)[4], float(&s1)[4], float(&d0)[4], float(&d1)[4], int np) {
            finish_block(s0, d0, 2 * np);
            finish_block(s1, d1, 2 * np + 1);
        },
        [&](float(&)[4], float(&)[4], float(&d0)[4], float(&d1)[4], int np) {
            fa2_acc_times_block<HD>(dq, d0, d1, k_bytes, np);
        });
}

// dq[db]: row i_row[e/2], dims db*8 + 2c + (e&1), into dqkv's q part of head h of batch row b;
// the 1/sqrt(hd) of dS here (scale).
template <int HD>
__device__ __forceinline__ void fa2_store_dq(__nv_bfloat16* dqkv, const float (&dq)[HD / 8][4], const int (&i_row)[2],
                                             int b, int h, int T, int C, float scale) {
    const int c = threadIdx.x % 4;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i_row[hf];
        if (i >= T) continue;
        mma_store_row<HD / 8>(dqkv + ((size_t)b * T + i) * (3 * C) + h * HD + 2 * c, dq, hf, scale);
    }
}

// dQ: a 1-D grid of the split's blocks (fa2_block_work, as the forward's), 128 threads; writes dqkv's q
// part. The blocks of a split query tile leave their dQ sums and the last to arrive adds them in
// chunk order (fa2_sum_acc) and writes them.
// Registers: hd 32 without soft-cap asks for 4 blocks/SM (at most 128 registers) and hd 64 for 3
// (ptxas's own choices hold a block per SM fewer); the others keep ptxas's choice (figures:
// docs/results/attention_journal.md).
template <int HD, bool SOFTCAP>
__global__ void __launch_bounds__(kAttnFa2Threads, HD == 32 && !SOFTCAP ? 4
                                                   : HD == 64           ? 3
                                                                        : 0)
    attn_bwd_q_fa2_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                          const float* D, int T, int C, int NH, int G, int P, float softcap, Fa2Split split) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    using L = Fa2BwdQSmem<HD>;
    constexpr int BQ = L::BQ, BK = L::BK, KS = HD / 16, DB = HD / 8;
    constexpr float kLog2e = 1.4426950408889634f;
    LLMC_DYNAMIC_SHARED(unsigned char, smem_raw);
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BQ, HD) swizzled
    __nv_bfloat16* sdO = sQ + L::TILE;                               // (BQ, HD) swizzled
    __nv_bfloat16* sK = sdO + L::TILE;                               // [2] (BK, HD) swizzled
    __nv_bfloat16* sV = sK + 2 * L::TILE;                            // [2] (BK, HD) swizzled

    AttnSplitGeom geom{T, BQ, BK, P, false, false};
    const Fa2BlockWork work = fa2_block_work<true>(split, geom, blockIdx.x, NH, G);
    const int b = work.b, h = work.h, bh = b * NH + h;
    const bool local = work.local;
    const int C3 = 3 * C;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const float scale = attn_scale(HD);
    const float mul = (SOFTCAP ? softcap : scale) * kLog2e;  // x units: raw accumulator or tanh
    const float scale_over_cap = SOFTCAP ? scale / softcap : 0.0f;
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;
    const __nv_bfloat16* gbase = dout + (size_t)b * T * C + h * HD;

    // The walk: query tile qt over its key tiles [kb, ke) (the block's chunk of them for its first
    // query tile, unless split all of them), then with a run (llmc/core/attention_split.h) query tile
    // qt + 1 over all of its own, up to qt_end. Along the walk the key tiles never decrease and two
    // query tiles share at most one (attn_run_allowed): a query tile's first key tile is the last
    // one's (kept in its buffer) or a new one, loaded with the query tile's Q and dO during the last
    // one's last step. The tile loop is the unsplit kernel's; the next query tile's set-up is outside it.
    int qt = work.outer, kb = work.inner_begin, ke = work.inner_end;
    const int qt_end = work.outer_end;
    // masked key tiles of query tile qt: [kb, ub) (the window's edge) and [ue, ke) (the diagonal, a ragged end)
    int ub = attn_kv_tile_unmasked_begin(qt, BQ, BK, local, P);
    int ue = attn_kv_tile_unmasked_end(qt, BQ, BK, T, local, P);
    const Fa2TileCopy<HD, BK> kv_copy(base + C, C3);  // K; V is C elements further
    const Fa2TileCopy<HD, BQ> q_copy(base, C3), do_copy(gbase, C);
    const uint32_t v_extra = 2u * (uint32_t)C;
    // prologue: Q, dO and the first K / V tile in one group
    q_copy.copy(sQ, qt * BQ, T);
    do_copy.copy(sdO, qt * BQ, T);
    kv_copy.copy_pair(sK, sV, kb * BK, T, v_extra);
    cp_async_commit_group();
    int i_row[2];
    float neg_lse2[2], row_D[2];
    // query tile qt's rows of this thread, their -lse*log2(e) and D (plain loads)
    auto load_rows = [&] {
        i_row[0] = qt * BQ + warp * 16 + g;
        i_row[1] = i_row[0] + 8;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int i = i_row[hf];
            neg_lse2[hf] = i < T ? -lse[(size_t)bh * T + i] * kLog2e : 0.0f;
            row_D[hf] = i < T ? D[(size_t)bh * T + i] : 0.0f;
        }
    };
    load_rows();
    cp_async_wait_group<0>();
    __syncthreads();
    constexpr uint32_t ROW16 = 16u * HD * 2u;
    const char* q_rows = reinterpret_cast<const char*>(sQ) + (uint32_t)warp * ROW16;
    const char* do_rows = reinterpret_cast<const char*>(sdO) + (uint32_t)warp * ROW16;
    uint32_t qa[kFa2BwdAFrags<HD>][4], da[kFa2BwdAFrags<HD>][4];
    // the warps' Q, dO fragments of query tile qt; with a run's later query tile to come, a barrier
    // after them: every warp has read sQ, sdO before they are refilled
    auto load_q_fragments = [&] {
        if constexpr (kFa2BwdARegs<HD>) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                fa2_load_a<HD>(qa[ks], q_rows, ks);
                fa2_load_a<HD>(da[ks], do_rows, ks);
            }
        }
        if (qt + 1 < qt_end) __syncthreads();
    };
    load_q_fragments();
    float dq[DB][4];
#pragma unroll
    for (int db = 0; db < DB; db++) dq[db][0] = dq[db][1] = dq[db][2] = dq[db][3] = 0.0f;

    int buf = 0;  // the buffer of key tile kt
    for (;;) {
        for (int kt = kb; kt < ke; kt++) {
            if (kt != kb) {
                cp_async_wait_group<0>();  // this thread's copies of tile kt (the only group in flight)
                __syncthreads();           // everyone's copies landed; every warp is done with tile kt-1
            }
            if (kt + 1 < ke) {  // prefetch tile kt+1 into the buffer tile kt-1 used
                kv_copy.copy_pair(sK + (buf ^ 1) * L::TILE, sV + (buf ^ 1) * L::TILE, (kt + 1) * BK, T, v_extra);
                cp_async_commit_group();
            } else if (qt + 1 < qt_end) {  // a run's next query tile: Q, dO and its first key tile, if new
                const int nk = geom.inner_begin(qt + 1);
                q_copy.copy(sQ, (qt + 1) * BQ, T);
                do_copy.copy(sdO, (qt + 1) * BQ, T);
                if (nk != kt)
                    kv_copy.copy_pair(sK + (buf ^ 1) * L::TILE, sV + (buf ^ 1) * L::TILE, nk * BK, T, v_extra);
                cp_async_commit_group();
            }
            const __nv_bfloat16* k_tile = sK + buf * L::TILE;
            const __nv_bfloat16* v_tile = sV + buf * L::TILE;
            if (kt < ub || kt >= ue)  // attn_tile_needs_mask(qt, kt, ...)
                fa2_bwd_q_tile<HD, SOFTCAP, true>(dq, qa, da, q_rows, do_rows, k_tile, v_tile, i_row, neg_lse2, row_D,
                                                  kt * BK, T, local, P, mul, scale_over_cap);
            else
                fa2_bwd_q_tile<HD, SOFTCAP, false>(dq, qa, da, q_rows, do_rows, k_tile, v_tile, i_row, neg_lse2, row_D,
                                                   kt * BK, T, local, P, mul, scale_over_cap);
            if (kt + 1 < ke) buf ^= 1;
        }
        if (qt + 1 >= qt_end) break;
        // a run's next query tile (a run's query tiles are never split): qt's dQ out; qt + 1's Q, dO
        // and first key tile landed: its fragments
        fa2_store_dq<HD>(dqkv, dq, i_row, b, h, T, C, scale);
#pragma unroll
        for (int db = 0; db < DB; db++) dq[db][0] = dq[db][1] = dq[db][2] = dq[db][3] = 0.0f;
        const int nk = geom.inner_begin(qt + 1);
        if (nk != ke - 1) buf ^= 1;  // a new first key tile went to the other buffer
        qt++;
        kb = nk;
        ke = geom.inner_end(qt);
        ub = attn_kv_tile_unmasked_begin(qt, BQ, BK, local, P);
        ue = attn_kv_tile_unmasked_end(qt, BQ, BK, T, local, P);
        load_rows();
        cp_async_wait_group<0>();
        __syncthreads();
        load_q_fragments();
    }

    // decoded again from an opaque block index: the split's fields are not kept live across the loop
    const Fa2BlockWork again = fa2_block_work<true>(split, geom, opaque_u32(blockIdx.x), NH, G);
    if (again.chunks > 1) {  // a split query tile: leave this chunk's sum; the last block adds them
        const long long s0 = again.first_slot(geom) - again.j_first;
        const auto slot = [&](int j) { return split.part + (size_t)(s0 + j) * (4 * DB * kAttnFa2Threads); };
        fa2_store_acc<DB>(dq, slot(again.j));
        if (!arrive_last(split.arrivals + (size_t)bh * geom.n_query_tiles() + qt, (uint32_t)again.chunks)) return;
        fa2_sum_acc<DB>(dq, again.j_first, again.chunks, slot);
    }

    fa2_store_dq<HD>(dqkv, dq, i_row, b, h, T, C, scale);
}

}  // namespace llmc::cuda
