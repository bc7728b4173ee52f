// Lab candidate: the one-pass FlashAttention-2-class backward (bf16 build, hd 32 / 64; hd 128 runs
// the production backward). The dK/dV kernel also forms each visited tile's dQ part dS K (dS^T
// through shared memory) into an fp32 block per (query tile, key tile), and attn_bwd_dq_reduce_kernel
// sums a query tile's blocks in key-tile order, instead of the production dQ kernel. Compiled only by
// the lab (dev/cuda/attention_ls.cu --kernel onepass), timed against the production pair
// (docs/attention_kernel.md, "The one-pass design"). Its dK/dV kernel is the production one
// (llmc/cuda/attention_ls_fa2_bwd.cuh) with the dQ parts added: a change to one belongs in the other.
#pragma once
#if defined(ENABLE_FP32)
#error "the one-pass backward is a bf16-build candidate (the FP32 build runs the scalar kernels)"
#endif
#include <algorithm>
#include <string>

#include "llmc/cuda/attention_ls.cuh"

namespace llmc::cuda {

// The one-pass dK/dV kernel's extra shared memory: sdS (64 keys, 64 queries) bf16 and sPairs[4].
constexpr size_t kOnePassDsBytes = sizeof(__nv_bfloat16) * kAttnFa2BK * kAttnFa2BQ;
constexpr size_t kOnePassExtraBytes = kOnePassDsBytes + 4 * sizeof(unsigned);

// One query tile of the one-pass dK/dV kernel for one warp: fa2_bwd_kv_tile (the production
// kernel's tile, llmc/cuda/attention_ls_fa2_bwd.cuh) that also stores the warp's dS^T (16 keys x BQ
// queries, bf16) at ds_rows, its 16 rows of the swizzled (64, BQ) tile sdS, for the pairs it
// computes; returns the pairs it computed (bits attn_pair_bits(np); all of them on an unmasked tile).
template <int HD, int BQ, bool SOFTCAP, bool MASK>
__device__ __forceinline__ unsigned onepass_kv_tile(float (&dk)[HD / 8][4], float (&dv)[HD / 8][4],
                                                    const uint32_t (&ka)[kFa2BwdAFrags<HD>][4],
                                                    const uint32_t (&va)[kFa2BwdAFrags<HD>][4], const char* k_rows,
                                                    const char* v_rows, const __nv_bfloat16* sQ,
                                                    const __nv_bfloat16* sdO, const float* sNL, const float* sD,
                                                    char* ds_rows, const int (&j_row)[2], int q0, int T, bool local,
                                                    int P, float mul, float scale_over_cap) {
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
        // dS^T rows g, g+8 (e / 2), queries np*16 + 2c + {0, 1} (d0), + 8 (d1)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int row = threadIdx.x % 32 / 4 + 8 * hf;
                *reinterpret_cast<uint32_t*>(ds_rows + fa2_lane_offset<BQ>(row, 2 * np) + 4 * c) =
                    pack_bf16x2(d0[2 * hf], d0[2 * hf + 1]);
                *reinterpret_cast<uint32_t*>(ds_rows + fa2_lane_offset<BQ>(row, 2 * np + 1) + 4 * c) =
                    pack_bf16x2(d1[2 * hf], d1[2 * hf + 1]);
            }
        });
    return pairs;
}

// The one-pass backward's dQ part of one (query tile, key tile) for warp w: dQ_part (queries
// 16w .. +15 of the tile, HD) = dS K over the tile's 64 keys, A = dS from the swizzled (64 keys, 64
// queries) tile sds (stored key-major as dS^T: ldmatrix.x4.trans), B = K from the swizzled tile sk
// (k = key: .trans, as dK's Q). Key block kk (warp kk's 16 keys) is skipped when that warp did not
// compute the 16-query pair w (pairs[kk]: its dS there is all zero, and sdS holds stale values).
template <int HD>
__device__ __forceinline__ void fa2_bwd_dq_part(float (&acc)[HD / 8][4], const char* sds, const char* sk,
                                                const unsigned* pairs, int w) {
    const int lane = threadIdx.x % 32, mi = lane / 8, j8 = lane % 8;
#pragma unroll
    for (int db = 0; db < HD / 8; db++) acc[db][0] = acc[db][1] = acc[db][2] = acc[db][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kAttnFa2BK / 16; kk++) {
        if (!(pairs[kk] & attn_pair_bits(w))) continue;
        // matrices (queries 0..7 | 8..15) x (keys 0..7 | 8..15), stored as rows = keys: transposed
        uint32_t xa[4];
        ldmatrix_x4_trans(xa, sds + fa2_lane_offset<kAttnFa2BQ>(kk * 16 + (mi >> 1) * 8 + j8, 2 * w + (mi & 1)));
        fa2_a_times_block<HD>(acc, xa, sk, kk);
    }
}

// The one-pass backward's dQ parts (fp32): per (b, h, query tile qt of 64, key tile kt of qt's range
// [attn_kv_tile_begin, attn_kv_tile_end)) one 64 x HD block, in the thread-major order of
// fa2_store_acc (the dQ-phase accumulators of the dK/dV kernel's 128 threads). Per batch row the
// local heads' blocks, then the global heads'; per head and query tile span_local / span_global blocks
// (the widest key-tile range of a query tile of that kind: attention_onepass_dq_span). The dK/dV kernel
// writes the blocks of the (qt, kt) it visits - the same tiles as that range
// (test/test_attention_tiles.cpp: both loops visit exactly the tiles holding a visible pair) - and
// attn_bwd_dq_reduce_kernel sums them.
struct Fa2DqParts {
    float* part = nullptr;
    int span_local = 0, span_global = 0;
};
// Head (b, h)'s blocks: block (qt, kt_rel) is head + (qt * span + kt_rel) * 64 * HD floats.
struct Fa2DqHeadParts {
    float* head;
    int span;
    template <int HD>
    __device__ __forceinline__ float* block(int qt, int kt_rel) const {
        return head + ((size_t)qt * span + kt_rel) * (size_t)(kAttnFa2BQ * HD);
    }
};
template <int HD>
__device__ __forceinline__ Fa2DqHeadParts fa2_dq_head_parts(const Fa2DqParts& dq, int b, int h, int NH, int G,
                                                            int nqt) {
    const int NL = NH - G;
    const size_t row = (size_t)nqt * ((size_t)NL * dq.span_local + (size_t)G * dq.span_global);  // blocks per b
    const size_t in_row = h < NL ? (size_t)h * nqt * dq.span_local
                                 : (size_t)nqt * ((size_t)NL * dq.span_local + (size_t)(h - NL) * dq.span_global);
    return {dq.part + ((size_t)b * row + in_row) * (size_t)(kAttnFa2BQ * HD), h < NL ? dq.span_local : dq.span_global};
}

// dK, dV and the dQ parts (hd 32 / 64): the production dK/dV kernel (attn_bwd_kv_fa2_kernel: a 1-D
// grid of the split's blocks, 128 threads; writes dqkv's k and v parts; the blocks of a split key tile
// leave their dK, dV sums and the last to arrive adds them in chunk order) where, per visited query
// tile, the warps also leave dS^T in shared memory (sdS) and form the tile's dQ part dS K
// (fa2_bwd_dq_part) into dq's block of (query tile, key tile), which attn_bwd_dq_reduce_kernel sums
// (no dQ kernel). Registers: at hd 64 it asks for 3 blocks/SM (ptxas's own choice takes every
// register: 2 blocks/SM).
template <int HD, bool SOFTCAP>
__global__ void __launch_bounds__(kAttnFa2Threads, HD == 64 ? 3 : 0)
    attn_bwd_kv_onepass_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                               const float* lse, const float* D, int T, int C, int NH, int G, int P, float softcap,
                               Fa2Split split, Fa2DqParts dq) {
    static_assert(kFa2BwdARegs<HD>, "the one-pass backward is built for hd 32 / 64");
    using L = Fa2BwdKvSmem<HD>;
    // the dQ parts' tiles (sdS, fa2_bwd_dq_part, the reduce kernel): 64 x 64, warp w = query pair w
    static_assert(L::BQ == kAttnFa2BQ && L::BK == kAttnFa2BK && kAttnFa2BK / 16 == kAttnFa2Threads / 32 &&
                      kAttnFa2BQ / 16 == kAttnFa2Threads / 32,
                  "the one-pass dQ part assumes 64 x 64 tiles and one 16-query pair per warp");
    constexpr int BK = L::BK, BQ = L::BQ, KS = HD / 16, DB = HD / 8;
    constexpr float kLog2e = 1.4426950408889634f;
    LLMC_DYNAMIC_SHARED(unsigned char, smem_raw);
    __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BK, HD) swizzled
    __nv_bfloat16* sV = sK + L::KV_TILE;                             // (BK, HD) swizzled
    __nv_bfloat16* sQ = sV + L::KV_TILE;                             // [2] (BQ, HD) swizzled
    __nv_bfloat16* sdO = sQ + 2 * L::Q_TILE;                         // [2] (BQ, HD) swizzled
    float* sNL = reinterpret_cast<float*>(sdO + 2 * L::Q_TILE);      // [2] (BQ): -lse * log2(e)
    float* sD = sNL + 2 * BQ;                                        // [2] (BQ): D
    // sdS (BK, BQ) bf16 swizzled (dS^T of the current query tile), sPairs[4] (each warp's pairs)
    char* sdS = reinterpret_cast<char*>(sD + 2 * BQ);
    unsigned* sPairs = reinterpret_cast<unsigned*>(sdS + kOnePassDsBytes);

    AttnSplitGeom geom{T, BQ, BK, P, false, true};
    const Fa2BlockWork work = fa2_block_work(split, geom, blockIdx.x, NH, G);
    const int kt = work.outer, b = work.b, h = work.h, bh = b * NH + h;
    const bool local = work.local;
    const int C3 = 3 * C, k0 = kt * BK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
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

    const int qb = work.inner_begin, qe = work.inner_end;  // this block's query tiles (all of them unless split)
    // prologue: K, V and the first query tile in one group
    const Fa2TileCopy<HD, BQ> q_copy(base, C3), do_copy(gbase, C);
    {
        const Fa2TileCopy<HD, BK> kv_copy(base + C, C3);  // K; V is C elements further
        kv_copy.copy_pair(sK, sV, k0, T, 2u * (uint32_t)C);
    }
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
    if constexpr (kFa2BwdARegs<HD>) {
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            fa2_load_a<HD>(ka[ks], k_rows, ks);
            fa2_load_a<HD>(va[ks], v_rows, ks);
        }
    }

    // this thread's two keys (hf = 0: key g, hf = 1: key g+8 of the warp's 16)
    const int j_row[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    float dk[DB][4], dv[DB][4];
#pragma unroll
    for (int db = 0; db < DB; db++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[db][e] = dv[db][e] = 0.0f;

    // this head's dQ parts
    const Fa2DqHeadParts dq_head = fa2_dq_head_parts<HD>(dq, b, h, NH, G, (int)ceil_div(T, BQ));
    for (int qt = qb; qt < qe; qt++) {
        const int buf = (qt - qb) & 1;
        if (qt != qb) {
            cp_async_wait_group<0>();  // this thread's copies of tile qt (the only group in flight)
            __syncthreads();           // everyone's copies and row loads landed; tile qt-1 is done
        }
        if (qt + 1 < qe) {  // prefetch tile qt+1 into the buffer tile qt-1 used
            q_copy.copy(sQ + (buf ^ 1) * L::Q_TILE, (qt + 1) * BQ, T);
            do_copy.copy(sdO + (buf ^ 1) * L::Q_TILE, (qt + 1) * BQ, T);
            cp_async_commit_group();
            load_rows(qt + 1, buf ^ 1);
        }
        const __nv_bfloat16* q_tile = sQ + buf * L::Q_TILE;
        const __nv_bfloat16* do_tile = sdO + buf * L::Q_TILE;
        const float* nl = sNL + buf * BQ;
        const float* dd = sD + buf * BQ;
        char* ds_rows = sdS + (uint32_t)warp * (16u * BQ * 2u);
        const unsigned pairs =
            attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P)
                ? onepass_kv_tile<HD, BQ, SOFTCAP, true>(dk, dv, ka, va, k_rows, v_rows, q_tile, do_tile, nl, dd,
                                                         ds_rows, j_row, qt * BQ, T, local, P, mul, scale_over_cap)
                : onepass_kv_tile<HD, BQ, SOFTCAP, false>(dk, dv, ka, va, k_rows, v_rows, q_tile, do_tile, nl, dd,
                                                          ds_rows, j_row, qt * BQ, T, local, P, mul, scale_over_cap);
        {  // dQ part of (qt, kt): warp w takes queries 16w .. +15 over the 64 keys
            if (lane == 0) sPairs[warp] = pairs;
            __syncthreads();  // every warp's dS^T and pairs in shared memory
            float dqp[DB][4];
            fa2_bwd_dq_part<HD>(dqp, sdS, reinterpret_cast<const char*>(sK), sPairs, warp);
            fa2_store_acc<DB>(dqp, dq_head.block<HD>(qt, kt - attn_kv_tile_begin(qt, BQ, BK, local, P)));
        }  // the next trip's barrier orders these reads of sdS before its writes
    }

    // decoded again from an opaque block index: the split's fields are not kept live across the loop
    const Fa2BlockWork again = fa2_block_work(split, geom, opaque_u32(blockIdx.x), NH, G);
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

    // dk[db], dv[db]: key j_row[e/2], dims db*8 + 2c + (e&1); dK takes the 1/sqrt(hd) of dS here
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int j = j_row[hf];
        if (j >= T) continue;
        __nv_bfloat16* drow = dqkv + ((size_t)b * T + j) * C3 + h * HD + 2 * c;
        mma_store_row<DB>(drow + C, dk, hf, scale);
        mma_store_row<DB>(drow + 2 * C, dv, hf, 1.0f);
    }
}

// The one-pass backward's dQ: one block of 128 threads per (b, h, query tile of 64) sums the dQ parts
// of the query tile's key tiles in key-tile order (the same bits whatever order the dK/dV kernel's
// blocks ran in) and writes dqkv's q part, with the 1/sqrt(hd) of dS. Thread t holds what thread t of
// the dK/dV kernel's dQ phase stored: rows q0 + 16 (t / 32) + g (+ 8), dims 8 db + 2c + {0, 1}.
template <int HD>
__global__ void __launch_bounds__(kAttnFa2Threads)
    attn_bwd_dq_reduce_kernel(__nv_bfloat16* dqkv, Fa2DqParts dq, int T, int C, int NH, int G, int P) {
    constexpr int BQ = kAttnFa2BQ, BK = kAttnFa2BK, DB = HD / 8;
    const int nqt = (int)ceil_div(T, BQ);
    const int bh = (int)(blockIdx.x / (unsigned)nqt), qt = (int)(blockIdx.x % (unsigned)nqt);
    const int b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    float acc[DB][4];
    const Fa2DqHeadParts dq_head = fa2_dq_head_parts<HD>(dq, b, h, NH, G, nqt);
    fa2_sum_acc<DB>(acc, 0, ke - kb, [&](int j) { return dq_head.block<HD>(qt, j); });
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = qt * BQ + warp * 16 + g + 8 * hf;
        if (i >= T) continue;
        mma_store_row<DB>(dqkv + ((size_t)b * T + i) * 3 * C + h * HD + 2 * c, acc, hf, attn_scale(HD));
    }
}

// The one-pass backward's dQ parts per query tile of 64 of a head kind (Fa2DqParts::span_local /
// span_global): the most key tiles of 64 such a query tile visits.
inline int attention_onepass_dq_span(int T, bool local, int P) {
    int span = 0;
    for (int qt = 0; qt < (int)ceil_div(T, kAttnFa2BQ); qt++)
        span = std::max(span, attn_kv_tile_end(qt, kAttnFa2BQ, kAttnFa2BK, T) -
                                  attn_kv_tile_begin(qt, kAttnFa2BQ, kAttnFa2BK, local, P));
    return span;
}
// The one-pass backward's dQ parts (hd 32 / 64; 0 at hd 128, which runs the production backward):
// per batch row, head and query tile of 64, span blocks of 64 x hd fp32 (Fa2DqHeadParts::block).
inline size_t attention_onepass_dq_floats(int B, int T, int C, int NH, int G, int P) {
    if (C / NH > 64) return 0;
    const size_t spans =
        (size_t)(NH - G) * attention_onepass_dq_span(T, true, P) + (size_t)G * attention_onepass_dq_span(T, false, P);
    return (size_t)B * ceil_div(T, kAttnFa2BQ) * spans * kAttnFa2BQ * (C / NH);
}

template <int HD>
inline void attn_backward_onepass_launch(const AttnCall& a, Fa2DqParts dq, floatX* dqkv, const floatX* dout,
                                         const floatX* qkv, const float* lse, const float* D, cudaStream_t st) {
    const int B = a.B, T = a.T, C = a.C, NH = a.NH, G = a.G, P = a.P;
    attention_ls_check_aligned(dqkv, "dqkv");
    attention_ls_check_aligned(dout, "dout");
    attention_ls_check_aligned(qkv, "qkv");
    const AttnSplitPlan kv_plan = attention_split_plan_for(attention_split_geom_kv(T, P, HD), B, NH, G, a.split);
    const Fa2Split kv_split = attention_split_args(kv_plan, B, a.split);
    constexpr size_t kv_bytes = Fa2BwdKvSmem<HD>::bytes + kOnePassExtraBytes;
    auto go = [&](auto kv_kernel) {  // soft-cap as a template parameter: one dispatch here
        attn_set_smem(kv_kernel, kv_bytes);
        launch_kernel(kv_kernel, dim3((unsigned)kv_plan.blocks), kAttnFa2Threads, kv_bytes, st, dqkv, dout, qkv, lse, D,
                      T, C, NH, G, P, a.softcap, kv_split, dq);
        CUDA_CHECK_LAUNCH();
    };
    if (a.softcap > 0.0f) go(attn_bwd_kv_onepass_kernel<HD, true>);
    else go(attn_bwd_kv_onepass_kernel<HD, false>);
    const long reduce_blocks = (long)B * NH * ceil_div(T, kAttnFa2BQ);
    if (reduce_blocks > 2147483647L)
        throw InputError("attention: B * NH * ceil(T/64) = " + std::to_string(reduce_blocks) +
                         " blocks exceed the grid's 2^31-1; use a smaller batch");
    launch_kernel(attn_bwd_dq_reduce_kernel<HD>, (unsigned)reduce_blocks, kAttnFa2Threads, 0, st, dqkv, dq, T, C, NH, G,
                  P);
    CUDA_CHECK_LAUNCH();
}

// The one-pass backward, as attention_backward (llmc/cuda/attention_ls.cuh) with dq_parts:
// attention_onepass_dq_floats floats of its own, any contents (null at hd 128, which runs
// attention_backward).
inline void attention_backward_onepass(const AttnCall& a, float* dq_parts, floatX* dqkv, const floatX* dout,
                                       const floatX* qkv, const floatX* out, const float* lse, cudaStream_t st) {
    if (a.hd() > 64) {
        attention_backward(a, dqkv, dout, qkv, out, lse, st);
        return;
    }
    attention_ls_check_args(a.B, a.T, a.C, a.NH, a.G, a.P);
    if (!dq_parts || !a.bwd_scratch)
        throw InputError(
            "attention: the one-pass backward needs bwd_scratch and dq_parts; pass attention_onepass_dq_floats(B, T, "
            "C, NH, G, P) floats of its own");
    float* D = a.bwd_scratch;  // (B, NH, T)
    attention_backward_row_dots(D, dout, out, a.B, a.T, a.C, a.NH, st);
    Fa2DqParts dq;
    dq.part = dq_parts;
    dq.span_local = attention_onepass_dq_span(a.T, true, a.P);
    dq.span_global = attention_onepass_dq_span(a.T, false, a.P);
    if (a.hd() == 32) attn_backward_onepass_launch<32>(a, dq, dqkv, dout, qkv, lse, D, st);
    else attn_backward_onepass_launch<64>(a, dq, dqkv, dout, qkv, lse, D, st);
}

}  // namespace llmc::cuda
