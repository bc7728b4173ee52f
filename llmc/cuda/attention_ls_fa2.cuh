// LS-attention forward, FlashAttention-2 class: bf16 mma.sync m16n8k16 with fp32 accumulation,
// sm_80+, the bf16 build's forward. Launched by llmc/cuda/attention_ls.cuh, paired with the
// FA2-class backward (llmc/cuda/attention_ls_fa2_bwd.cuh). Design: docs/attention_kernel.md.
//
// Block: 64 query rows (4 warps x 16 rows) of one (b, h); key / value tiles of 64 keys; a long key
// range is cut into chunks over several blocks whose partials the last to arrive merges
// (llmc/core/attention_split.h: Fa2Split, fa2_block_work; docs/attention_kernel.md "Split tile loops").
// Shared memory, every tile row-major (row = token, HD bf16 per row) and XOR-swizzled in 16-byte
// chunks (llmc/core/smem_swizzle.h), so every ldmatrix phase and every cp.async store phase hits
// 8 different bank groups:   sQ (64, HD) | sK[2] (64, HD) | sV[2] (64, HD)   (double buffer),
// then the score-bit tables (Fa2ScoreBitTables).
// Copies: cp.async 16 bytes per thread (Fa2TileCopy, addresses set up once per block), zero-filled
// past T (ragged last tile only). Tile kt+1 is prefetched into the other buffer while tile kt
// computes; one barrier per tile.
// Fragments (PTX ISA "Matrix Fragments for mma.m16n8k16", g = lane/4, c = lane%4):
//   Q: A fragments with ldmatrix.x4 (matrices: rows 0-7 / 8-15 x cols 0-7 / 8-15), loaded once per
//      block into registers at hd 32 / 64; at hd 128 (64 more registers would spill) once per tile
//      from sQ, which stays resident;
//   K: B operand of S = Q K^T, B(k = dim, n = key) = K[key][dim]: the row-major K tile is already
//      "n-major", so plain ldmatrix.x4 gives the b0, b1 pairs of two 8-key blocks;
//   V: B operand of O = P V, B(k = key, n = dim) = V[key][dim]: ldmatrix.x4.trans of the row-major
//      V tile gives the b0, b1 pairs of two 8-dim blocks (no transposed shared stores);
//   P: the S accumulators of two 8-key blocks repacked as an A fragment (mma_acc_to_a).
// Softmax in base 2: x = the score in "x units" (the raw accumulator q.k without soft-cap; with it
// t = tanh(q.k/(sqrt(hd) c)), one tanh.approx (MUFU.TANH), the capped score being c*t),
// mul = log2(e) * (1/sqrt(hd) without soft-cap, c with it), p = exp2(x*mul - m*mul): one FFMA and one
// ex2.approx.ftz (MUFU.EX2) per score; m is the running row max in x units.
// Compile-time: HD, STATS (logit statistics), NEAR (the near/far statistics too), SOFTCAP (c*tanh(s/c)),
// MASK (per tile: a tile that attn_tile_needs_mask clears runs the unmasked body, without the
// per-element visibility test; decided against the query tile's unmasked key-tile range). Near/far per warp and tile: the unmasked body only sees tiles whose
// pairs (for the warp's 16 rows) are all near or all far, so the tile's max goes to one side and its
// whole sum of p is near or not - a few instructions per tile; the kernel sends the tiles the
// distance N cuts through to the masked body, which tests each score.
// Masked tiles test each score against one word of bits per thread (attn_thread_score_bits, looked
// up in the tables) and skip the 16-key pairs of MMA blocks no bit of the warp's words reaches
// (test/test_attention_tiles.cpp: exactly its visible pairs); masked scores are kFa2Masked (-FLT_MAX), not -inf.
// qkv and out are accessed with 16- and 4-byte accesses: 16-byte aligned base pointers (the
// launcher checks).
#pragma once
#include <cstring>

#include "llmc/core/attention_split.h"
#include "llmc/core/smem_swizzle.h"
#include "llmc/cuda/attention_ls_common.cuh"
#include "llmc/cuda/grid_arrival.cuh"   // arrive_last
#include "llmc/cuda/mma_fragments.cuh"  // pack_bf16x2, mma_acc_to_a, mma_store_row
#include "llmc/cuda/ptx.cuh"  // mma_bf16_16816, ldmatrix_x4(_trans), cp_async_*, ex2_approx_ftz, redux_sync_or_b32

namespace llmc::cuda {

// Q's A fragments stay in registers for the whole block (else they are reloaded per key tile).
template <int HD>
constexpr bool kFa2QInRegs = HD <= 64;

// attn_thread_score_bits(lo, hi) << 16 hf from shared tables of its two halves
// (attn_score_bits_at_least / _at_most, llmc/core/attention_tiles.h): two clamps, two loads and an
// AND per row instead of ~25 instructions of arithmetic. The forward keeps one at the end of its
// dynamic shared memory (an address the tiles' base plus a constant) and fills it before its
// prologue's barrier.
struct Fa2ScoreBitTables {
    unsigned at_least[2][kAttnScoreBitsN], at_most[2][kAttnScoreBitsN];  // [hf]: shifted by 16 hf

    __device__ __forceinline__ void fill() {
        for (int x = (int)threadIdx.x; x < kAttnScoreBitsN; x += (int)blockDim.x) {
            const unsigned lo = attn_score_bits_at_least(x), hi = attn_score_bits_at_most(x);
            at_least[0][x] = lo;
            at_least[1][x] = lo << 16;
            at_most[0][x] = hi;
            at_most[1][x] = hi << 16;
        }
    }
    __device__ __forceinline__ unsigned bits(int lo, int hi, int hf) const {
        return at_least[hf][attn_score_bits_lo_index(lo)] & at_most[hf][attn_score_bits_hi_index(hi)];
    }
};

template <int HD>
struct Fa2FwdSmem {
    static constexpr int TILE = kAttnFa2BK * HD;  // elements of one 64-row tile (Q, K or V)
    // sQ, sK[2], sV[2] | the score-bit tables
    static constexpr size_t tables = sizeof(__nv_bfloat16) * 5 * (size_t)TILE;
    static constexpr size_t bytes = tables + sizeof(Fa2ScoreBitTables);
};

// cp.async copies of one thread into swizzled (ROWS, HD) tiles of one part (HD channels at `part`,
// row stride `stride` elements), the thread's addresses set up once per block. copy() fills a tile
// with rows [r0, r0+ROWS), zeros for rows >= T; uncommitted: the caller commits. Thread t copies
// chunk t % CH of rows t / CH + RSTEP * it: RSTEP = 128 / CH rows apart, a multiple of 8, so every
// row it copies has the same swizzled chunk (only the row offset changes). A tile whose rows are all
// < T (every tile but a ragged last one) takes no per-row test and no zero-fill select.
template <int HD, int ROWS = kAttnFa2BK>
struct Fa2TileCopy {
    static constexpr int CH = HD / 8, RSTEP = kAttnFa2Threads / CH, ITER = ROWS / RSTEP;
    static_assert(kAttnFa2Threads % CH == 0 && RSTEP % 8 == 0 && ROWS % RSTEP == 0, "rows 8k apart");
    const char* src;     // chunk ch of row 0 of the part; row r0 + r is (r0 + r) * row_bytes further
    uint32_t row_bytes;  // stride * 2
    uint32_t dst;        // byte offset of (row r, chunk ch) in a swizzled tile
    int r;               // this thread's first row of a tile

    __device__ __forceinline__ Fa2TileCopy(const __nv_bfloat16* part, int stride)
        : src(reinterpret_cast<const char*>(part + ((int)threadIdx.x % CH) * 8)),
          row_bytes(2u * (uint32_t)stride),
          dst(2u * (uint32_t)smem_swizzle_offset((int)threadIdx.x / CH, (int)threadIdx.x % CH, CH)),
          r((int)threadIdx.x / CH) {}

    // Rows [r0, r0+ROWS) into `tile`.
    __device__ __forceinline__ void copy(__nv_bfloat16* tile, int r0, int T) const {
        copy_parts<1>(tile, nullptr, r0, T, 0u);
    }
    // The same rows into `tile` and, of the part `extra` bytes further (V = K + C elements), into
    // tile2: one decision "ragged or not" for both.
    __device__ __forceinline__ void copy_pair(__nv_bfloat16* tile, __nv_bfloat16* tile2, int r0, int T,
                                              uint32_t extra) const {
        copy_parts<2>(tile, tile2, r0, T, extra);
    }

private:
    template <int NP>
    __device__ __forceinline__ void copy_parts(__nv_bfloat16* tile, __nv_bfloat16* tile2, int r0, int T,
                                               uint32_t extra) const {
        const char* g = src + (size_t)(uint32_t)(r0 + r) * row_bytes;
        constexpr uint32_t kDstStep = (uint32_t)RSTEP * HD * 2u;
        if (r0 + ROWS <= T) {
#pragma unroll
            for (int part = 0; part < NP; part++)
#pragma unroll
                for (int it = 0; it < ITER; it++)
                    cp_async_16(reinterpret_cast<char*>(part == 0 ? tile : tile2) + dst + it * kDstStep,
                                g + part * extra + (size_t)it * RSTEP * row_bytes);
        } else {
#pragma unroll
            for (int part = 0; part < NP; part++)
#pragma unroll
                for (int it = 0; it < ITER; it++) {
                    const bool in = r0 + r + it * RSTEP < T;  // past T: nothing read, 16 zero bytes written
                    cp_async_16_zfill(reinterpret_cast<char*>(part == 0 ? tile : tile2) + dst + it * kDstStep,
                                      in ? g + part * extra + (size_t)it * RSTEP * row_bytes : src, in ? 16u : 0u);
                }
        }
    }
};

// Byte offset of (row, chunk0) in a swizzled (rows, HD) tile (any chunk; the loops pass chunk0 in
// {0, 1}): the address a lane supplies to ldmatrix for the first pair of chunks. Chunk 2k + chunk0 is at this offset ^ 32k (the
// swizzle XORs the chunk index, whose bits lie below the row stride, and 2k shares no bit with
// chunk0); row + 16n is 16n * HD * 2 bytes further (16n is a multiple of 8: the same swizzle).
template <int HD>
__device__ __forceinline__ uint32_t fa2_lane_offset(int row, int chunk0) {
    return 2u * (uint32_t)smem_swizzle_offset(row, chunk0, HD / 8);
}

// A lane's two ldmatrix offsets in the forward's tiles, computed once per block and kept in
// registers across the key-tile loop (opaque_u32: ptxas may not re-derive them from the thread
// index on every trip). Of a 16 x 16 block, lane 8mi + j8 addresses row
// j8 of matrix mi: a orders the matrices (rows 0..7, cols 0..7), (8..15, 0..7), (0..7, 8..15),
// (8..15, 8..15) - Q as the A operand, V as the B operand through .trans; b orders them (0..7,
// 0..7), (0..7, 8..15), (8..15, 0..7), (8..15, 8..15) - K as the B operand of two n8 blocks.
// b1 serves every head size; col2 is computed and used at hd 32 only (where it fits under the
// register bound; at hd 64 it would spill into the loop).
template <int HD>
struct Fa2LaneOffsets {
    uint32_t a, b, b1;  // b1 = b ^ 32: K's dims 16..31
    int col2;           // 2 (lane % 4): the thread's first column of an accumulator block
    __device__ __forceinline__ Fa2LaneOffsets() {
        const int lane = threadIdx.x % 32, mi = lane / 8, j8 = lane % 8;
        a = opaque_u32(fa2_lane_offset<HD>((mi & 1) * 8 + j8, mi >> 1));
        b = opaque_u32(fa2_lane_offset<HD>((mi >> 1) * 8 + j8, mi & 1));
        b1 = opaque_u32(b ^ 32u);
        col2 = HD == 32 ? (int)opaque_u32(2u * (uint32_t)(lane % 4)) : 0;
    }
};

// A masked score's x on a masked tile: finite, so that p * x = 0 for its p = ex2(x*mul - m*mul) = 0
// (no select before the entropy's FFMA), and below every visible score; a row max that is still
// <= kFa2Masked means nothing visible yet, like -inf (the state's initial max).
constexpr float kFa2Masked = -3.40282347e38f;  // -FLT_MAX

// The visibility bits of a thread's two query rows i_row over the keys kc + 8nb + e (kc: its first
// key): bit 2nb + e + 16hf set when row i_row[hf] (< T) sees that key, i.e. key_lo(i) <= key <= i
// (attn_thread_score_bits). The forward looks them up (tab); the dQ backward
// (llmc/cuda/attention_ls_fa2_bwd.cuh) computes them (the tables would lengthen its interior trips
// by as much as they shorten its masked ones).
__device__ __forceinline__ unsigned fa2_query_rows_bits(const Fa2ScoreBitTables& tab, const int (&i_row)[2], int kc,
                                                        int T, bool local, int P) {
    unsigned bits = 0u;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i_row[hf];
        bits |= tab.bits(attn_key_lo(i, local, P) - kc, (i < T ? i : -1) - kc, hf);
    }
    return bits;
}
__device__ __forceinline__ unsigned fa2_query_rows_bits(const int (&i_row)[2], int kc, int T, bool local, int P) {
    unsigned bits = 0u;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = i_row[hf];
        bits |= attn_thread_score_bits(attn_key_lo(i, local, P) - kc, (i < T ? i : -1) - kc) << (16 * hf);
    }
    return bits;
}

// Running state of one warp (this thread: rows hf = 0 (g) and hf = 1 (g+8) of the warp's 16).
template <int HD>
struct Fa2Rows {
    float m[2], l[2], es[2];  // running max (x units), sum of p, sum of p*x (STATS)
    float nl[2];              // as l over the near keys (NEAR)
    float o[HD / 8][4];       // O accumulators: dims db*8 + 2c + {0,1}
    float smax, smin;         // max / min raw accumulator over visible pairs (STATS)
    float nmax, fmax;         // max raw accumulator over visible near / far pairs (NEAR)
};

// A launch's split tile loops (llmc/core/attention_split.h), passed by value: each kind's chunk
// size and items per head, the partials of the blocks of split outer tiles and one arrival counter
// per (b, h, outer tile) (both unused when no kind splits). The forward, dQ and dK/dV kernels.
struct Fa2Split {
    AttnSplitKind global, local;
    int B = 0;
    float* part = nullptr;         // per block of a split outer tile: the kernel's partial
    uint32_t* arrivals = nullptr;  // (B, NH, outer tiles), 0 between launches
};

// What one block computes: head (b, h) and its item (AttnSplitItem: outer tile, inner tiles
// [inner_begin, inner_end), this block's chunk j, the outer tile's first chunk j_first and its
// chunks, 1 when not split), and for a split outer tile where its chunks' partials are
// (attn_split_slot: only split outer tiles have slots, the global heads' first). Blocks: the
// global heads' items, then the local heads' (llmc/core/attention_split.h), item y of every
// (b, head) of a kind before y + 1. A kind with runs (the backward's; AttnSplitKind::run > 1):
// the item's outer tiles are [outer, outer_end), each over its whole inner range (the item's
// fields describe the first); otherwise outer_end = outer + 1.
struct Fa2BlockWork : AttnSplitItem {
    int outer_end;
    int b, h;
    int S, r;             // chunk size; (b, head) index in the kind
    long long slot_base;  // the head's first partial slot (the global heads' slots first)
    bool local;
    // the partial slot of this (split) outer tile's first chunk; chunk j's is j - j_first further
    __device__ __forceinline__ long long first_slot(const AttnSplitGeom& g) const {
        return slot_base + attn_split_slot(g, outer, j_first, S);
    }
};
// geom: the kernel's tile loop; its local field is set here (the block's kind). RUNS: the kernel walks
// runs (the backward's; the forward's plans have none, and its decode stays without the branch).
template <bool RUNS = false>
__device__ __forceinline__ Fa2BlockWork fa2_block_work(const Fa2Split& split, AttnSplitGeom& geom, unsigned block,
                                                       int NH, int G) {
    Fa2BlockWork w;
    long long L = block;
    const long long n_global = (long long)split.B * G * split.global.items;
    w.local = L >= n_global;
    geom.local = w.local;
    const int heads = w.local ? NH - G : G;
    if (w.local) L -= n_global;
    const int y_stride = split.B * heads;  // blocks per item
    const int y = (int)(L / y_stride);
    w.r = (int)(L % y_stride);
    w.b = w.r / heads;
    w.h = (w.local ? 0 : NH - G) + w.r % heads;
    const AttnSplitKind& kind = w.local ? split.local : split.global;
    w.S = kind.chunk;
    w.slot_base = (w.local ? (long long)split.B * G * split.global.slots : 0) + (long long)w.r * kind.slots;
    if (RUNS && kind.run > 1) {
        static_cast<AttnSplitItem&>(w) = attn_run_decode(geom, y, kind.run);
        w.outer_end = attn_run_hi(geom, y, kind.run);
    } else {
        static_cast<AttnSplitItem&>(w) = attn_split_decode(geom, y, w.S);
        w.outer_end = w.outer + 1;
    }
    return w;
}

// The accumulators acc[n][e] of every thread of a block as a partial, field-major ([4n + e][thread]:
// a warp's stores and loads are 128 contiguous bytes), and their sum over the partials of chunks
// [j_first, j_first + chunks) in chunk order (slot(j): chunk j's partial). The backward's dK, dV, dQ.
template <int N>
__device__ __forceinline__ void fa2_store_acc(const float (&acc)[N][4], float* slot) {
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) slot[(4 * n + e) * kAttnFa2Threads + threadIdx.x] = acc[n][e];
}
template <int N, typename SlotOf>
__device__ __forceinline__ void fa2_sum_acc(float (&acc)[N][4], int j_first, int chunks, SlotOf slot) {
#pragma unroll
    for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int j = j_first; j < j_first + chunks; j++) {
        const float* p = slot(j) + threadIdx.x;
#pragma unroll
        for (int n = 0; n < N; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[n][e] += p[(4 * n + e) * kAttnFa2Threads];
    }
}

// One block's partial result of a split query tile: each thread's Fa2Rows fields, field-major
// ([field][thread]: a warp's stores and loads are 128 contiguous bytes).
template <int HD>
struct Fa2Partial {
    static constexpr int kO = 4 * (HD / 8);  // o[db][e] at field 4 db + e
    // then m[2], l[2], es[2], nl[2], smax, smin, nmax, fmax
    static constexpr int kFields = kO + 12;
    static constexpr size_t floats = (size_t)kFields * kAttnFa2Threads;
};

template <int HD, bool STATS, bool NEAR>
__device__ __forceinline__ void fa2_store_partial(const Fa2Rows<HD>& st, float* slot) {
    constexpr int O = Fa2Partial<HD>::kO, NT = kAttnFa2Threads;
    float* p = slot + threadIdx.x;
#pragma unroll
    for (int db = 0; db < HD / 8; db++)
#pragma unroll
        for (int e = 0; e < 4; e++) p[(4 * db + e) * NT] = st.o[db][e];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        p[(O + hf) * NT] = st.m[hf];
        p[(O + 2 + hf) * NT] = st.l[hf];
        if (STATS) p[(O + 4 + hf) * NT] = st.es[hf];
        if (NEAR) p[(O + 6 + hf) * NT] = st.nl[hf];
    }
    if (STATS) p[(O + 8) * NT] = st.smax, p[(O + 9) * NT] = st.smin;
    if (NEAR) p[(O + 10) * NT] = st.nmax, p[(O + 11) * NT] = st.fmax;
}

// st = the merge of the query tile's chunks' partials, in chunk order (whichever block merges: the
// same bits): the row max over the chunks, each chunk's sums rescaled to it (exp2 in x units, as the
// tile loop's alpha) and added chunk by chunk; the statistics' max / min over the chunks. slot(j):
// chunk j's partial. A row past T or with nothing visible keeps m <= kFa2Masked and l = 0 (not
// written).
template <int HD, bool STATS, bool NEAR, typename SlotOf>
__device__ __forceinline__ void fa2_merge_partials(Fa2Rows<HD>& st, int j_first, int chunks, float mul, SlotOf slot) {
    constexpr int O = Fa2Partial<HD>::kO, NT = kAttnFa2Threads;
    float m_use[2];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float m = -INFINITY;
#pragma unroll 1
        for (int j = j_first; j < j_first + chunks; j++) m = fmaxf(m, slot(j)[(O + hf) * NT + threadIdx.x]);
        st.m[hf] = m;
        m_use[hf] = m <= kFa2Masked ? 0.0f : m;
        st.l[hf] = st.es[hf] = st.nl[hf] = 0.0f;
    }
#pragma unroll
    for (int db = 0; db < HD / 8; db++) st.o[db][0] = st.o[db][1] = st.o[db][2] = st.o[db][3] = 0.0f;
    st.smax = st.nmax = st.fmax = -INFINITY;
    st.smin = INFINITY;
#pragma unroll 1  // one chunk's fields in flight at a time: unrolled, the loads took registers past the tile loop's
    for (int j = j_first; j < j_first + chunks; j++) {
        const float* p = slot(j) + threadIdx.x;
        float alpha[2];
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            alpha[hf] = ex2_approx_ftz((p[(O + hf) * NT] - m_use[hf]) * mul);
            st.l[hf] += alpha[hf] * p[(O + 2 + hf) * NT];
            if (STATS) st.es[hf] += alpha[hf] * p[(O + 4 + hf) * NT];
            if (NEAR) st.nl[hf] += alpha[hf] * p[(O + 6 + hf) * NT];
        }
#pragma unroll
        for (int db = 0; db < HD / 8; db++)
#pragma unroll
            for (int e = 0; e < 4; e++) st.o[db][e] += alpha[e / 2] * p[(4 * db + e) * NT];
        if (STATS) st.smax = fmaxf(st.smax, p[(O + 8) * NT]), st.smin = fminf(st.smin, p[(O + 9) * NT]);
        if (NEAR) st.nmax = fmaxf(st.nmax, p[(O + 10) * NT]), st.fmax = fmaxf(st.fmax, p[(O + 11) * NT]);
    }
}

// One key tile for one warp: S = Q K^T, online softmax, O += P V. qa: Q's fragments when
// kFa2QInRegs, else read here from sQ (the swizzled Q tile); sK, sV: the tile's swizzled buffers;
// i_row: this thread's two rows; r0: the warp's first row; k0: the tile's first key; near_n: the
// near/far distance N (NEAR).
template <int HD, bool STATS, bool NEAR, bool SOFTCAP, bool MASK>
__device__ __forceinline__ void fa2_tile(Fa2Rows<HD>& st, const Fa2ScoreBitTables& tab, Fa2LaneOffsets<HD> off,
                                         const uint32_t (&qa)[kFa2QInRegs<HD> ? HD / 16 : 1][4],
                                         const __nv_bfloat16* sQ, const __nv_bfloat16* sK, const __nv_bfloat16* sV,
                                         const int (&i_row)[2], int k0, int r0, int T, bool local, int P, float mul,
                                         float scale_over_cap, int near_n) {
    constexpr int KS = HD / 16, NB = kAttnFa2BK / 8, DB = HD / 8;
    // a global head as a local one with a window past every row (key_lo = 0 for rows < T + 64): one
    // code path for both kinds
    const int window = local ? P : T + kAttnFa2BQ;
    // masked: row hf sees keys [key_lo, i] (none past T): bit 2nb + e + 16hf of vis_bits is score
    // s[nb][2hf + e]'s. vis_any: the OR of vis_bits over the warp (one REDUX, its result in a
    // uniform register); the warp sees 16-key pair np when any of its bits 4np .. 4np+3 (either row)
    // is set, the same test in every lane, so the pair skips below are uniform (no WARPSYNC per pair,
    // no divergence fallback at the row-max shuffles). test/test_attention_tiles.cpp checks the pair
    // rule against brute-force visibility.
    const int kc = k0 + (HD == 32 ? off.col2 : 2 * (threadIdx.x % 4));  // this thread's first key
    const unsigned vis_bits = MASK ? fa2_query_rows_bits(tab, i_row, kc, T, true, window) : 0u;
    const unsigned vis_any = MASK ? redux_sync_or_b32(vis_bits, 0xffffffffu) : ~0u;
    auto pair_seen = [&](int np) { return (vis_any & attn_pair_bits(np)) != 0u; };

    // S = Q K^T: s[nb] covers keys k0 + nb*8 + 2c + {0,1} of rows g, g+8
    float s[NB][4];
#pragma unroll
    for (int nb = 0; nb < NB; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
    const int warp = threadIdx.x / 32;
    constexpr uint32_t ROW16 = 16u * HD * 2u;  // bytes of 16 tile rows
    const char* q_bytes = reinterpret_cast<const char*>(sQ) + (uint32_t)warp * ROW16;
    const char* k_bytes = reinterpret_cast<const char*>(sK);
    const uint32_t q_off = off.a, k_off = off.b;
    // K's fragments for keys np*16 + 0..15, dims ks*16 + 0..15 (matrices: (keys 0..7 | 8..15) x
    // (dims 0..7 | 8..15)), multiplied into s[2np], s[2np + 1]; each s block adds its ks in order
    auto qk_pair = [&](const uint32_t(&qk)[4], int ks, int np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, k_bytes + (ks == 1 ? off.b1 : k_off ^ (32u * ks)) + np * ROW16);
        mma_bf16_16816(s[2 * np], qk, kb[0], kb[1]);
        mma_bf16_16816(s[2 * np + 1], qk, kb[2], kb[3]);
    };
    if constexpr (HD == 32) {  // pairs outer: one warp-uniform skip test per pair (at hd 64 the
                               // pair's 4 dependent HMMAs took NOPs: ks outer there)
#pragma unroll
        for (int np = 0; np < NB / 2; np++) {
            if (MASK && !pair_seen(np)) continue;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) qk_pair(qa[ks], ks, np);
        }
    } else {
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t qk[4];
            if constexpr (kFa2QInRegs<HD>) {
#pragma unroll
                for (int e = 0; e < 4; e++) qk[e] = qa[ks][e];
            } else {  // matrices: (rows 0..7 | 8..15) x (cols ks*16 + 0..7 | 8..15)
                ldmatrix_x4(qk, q_bytes + (q_off ^ (32u * ks)));
            }
#pragma unroll
            for (int np = 0; np < NB / 2; np++)
                if (!MASK || pair_seen(np)) qk_pair(qk, ks, np);  // warp-uniform
        }
    }

    // soft-cap, mask, statistics; row max (x units). near_bits: the key is near (NEAR), bits as vis_bits
    unsigned near_bits = 0u;
    const unsigned one = opaque_u32(1u);  // the tests below stay LOP3 / R2P (opaque_u32)
    if (MASK) {
        if (NEAR)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) near_bits |= tab.bits(i_row[hf] - near_n + 1 - kc, 63, hf);
    }
    const unsigned near_vis = near_bits & vis_bits, far_vis = ~near_bits & vis_bits;
    // near/far: the masked body tests each score; the unmasked one gets only tiles whose pairs are
    // all near (near_kind 1) or all far (-1) for this warp's rows
    const bool all_near = NEAR && !MASK && attn_tile_near_kind(r0, r0 + 15, k0, k0 + kAttnFa2BK - 1, near_n) > 0;
    float mx[2] = {-INFINITY, -INFINITY};
    float rmax = -INFINITY;  // soft-cap: max raw accumulator over the tile's visible pairs (STATS)
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int hf = e / 2;
            const unsigned bit = one << (2 * nb + (e & 1) + 16 * hf);
            const float a = s[nb][e];
            const bool vis = !MASK || (vis_bits & bit) != 0;
            float x = SOFTCAP ? tanh_approx(a * scale_over_cap) : a;
            if (MASK) x = vis ? x : kFa2Masked;
            // statistics over the visible scores: a predicated FMNMX each (not a select, then FMNMX)
            if (STATS && vis) {  // without soft-cap x = a: the max comes from the row max below
                if (SOFTCAP) rmax = fmaxf(rmax, a);
                st.smin = fminf(st.smin, a);
            }
            if (NEAR && MASK) {  // visible near / visible far keys (bit words made before the loop)
                if ((near_vis & bit) != 0) st.nmax = fmaxf(st.nmax, a);
                if ((far_vis & bit) != 0) st.fmax = fmaxf(st.fmax, a);
            }
            s[nb][e] = x;
            mx[hf] = fmaxf(mx[hf], x);
        }
    }
    if (STATS) {
        const float tile_max = SOFTCAP ? rmax : fmaxf(mx[0], mx[1]);  // raw accumulator units
        st.smax = fmaxf(st.smax, tile_max);
        if (NEAR && !MASK && all_near) st.nmax = fmaxf(st.nmax, tile_max);
        if (NEAR && !MASK && !all_near) st.fmax = fmaxf(st.fmax, tile_max);
    }
    float neg_m[2];  // -m_use * mul: the FFMA's addend
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        // the 4 lanes of a quad (same g) hold the same row
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
        const float m_new = fmaxf(st.m[hf], mx[hf]);
        // nothing visible yet (-inf, or kFa2Masked from a masked tile): shift 0, so p = 0 and alpha = 0
        // (an interior tile has every score visible: its m_new is one of them; finite scores assumed,
        // a row of -inf scores gives NaN here, as inf does everywhere - the step's check skips it)
        const float m_use = MASK && m_new <= kFa2Masked ? 0.0f : m_new;
        const float alpha = ex2_approx_ftz((st.m[hf] - m_use) * mul);
        st.m[hf] = m_new;
        neg_m[hf] = -m_use * mul;
        st.l[hf] *= alpha;
        if (STATS) st.es[hf] *= alpha;
        if (NEAR) st.nl[hf] *= alpha;
#pragma unroll
        for (int db = 0; db < DB; db++) {
            st.o[db][2 * hf] *= alpha;
            st.o[db][2 * hf + 1] *= alpha;
        }
    }
    // P = exp2(x*mul - m*mul) (thread-partial row sums; the quad is summed at the end)
    const float l_before[2] = {st.l[0], st.l[1]};
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int hf = e / 2;
            const float x = s[nb][e];
            const float p = ex2_approx_ftz(fmaf(x, mul, neg_m[hf]));  // masked: ex2(about -FLT_MAX * mul) = 0
            st.l[hf] += p;
            if (STATS) st.es[hf] += p * x;  // masked: p = 0, x = kFa2Masked: adds -0
            if (NEAR && MASK && (near_bits & (one << (2 * nb + (e & 1) + 16 * hf))) != 0) st.nl[hf] += p;
            s[nb][e] = p;
        }
    }
    // an all-near tile: its sum of p is the growth of l (l's own order of additions stays as without
    // NEAR, so the statistics never change the output's bits)
    if (NEAR && !MASK && all_near) {
        st.nl[0] += st.l[0] - l_before[0];
        st.nl[1] += st.l[1] - l_before[1];
    }

    // O += P V: A = P (16 rows x 16 keys) from two accumulator blocks; B from V via ldmatrix.trans
    const char* v_bytes = reinterpret_cast<const char*>(sV);
    const uint32_t v_off = off.a;
#pragma unroll
    for (int kk = 0; kk < NB / 2; kk++) {
        if (MASK && !pair_seen(kk)) continue;  // p = 0 on both blocks
        uint32_t pa[4];
        mma_acc_to_a(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < DB / 2; dp++) {
            // matrices: (keys kk*16 + 0..7 | 8..15) x (dims dp*16 + 0..7 | 8..15), transposed
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, v_bytes + kk * ROW16 + (v_off ^ (32u * dp)));
            mma_bf16_16816(st.o[2 * dp], pa, vb[0], vb[1]);
            mma_bf16_16816(st.o[2 * dp + 1], pa, vb[2], vb[3]);
        }
    }
}

// Forward: a 1-D grid of the split's blocks (fa2_block_work: one per (b, h, query tile of 64,
// chunk of its key tiles); without a split one per (b, h, query tile), longest first), 128
// threads; warp w owns rows q0 + 16w .. +15. The blocks of a split query tile leave partials and
// the last to arrive merges them (fa2_merge_partials) and writes the tile's outputs.
// Outputs: out (B, T, C) bf16, lse (B, NH, T) natural log, and with STATS
// the block's statistics partial (kAttnStatsBasic floats, llmc/cuda/attention_ls_common.cuh) in
// stats_part; with NEAR (implies STATS) the near/far ones too (kAttnStatsNear floats), split at
// distance near_n >= 1.
// Registers: bounded where ptxas, left alone, takes more than the tile loop needs (the split's merge
// raises its choice by a block per SM): 4 blocks at hd 32 without near/far statistics, 3 for the
// hd-32 near/far one without soft-cap, 3 at hd 64; ptxas's own choice otherwise. A bound is checked
// with make sass-report: the spills it causes belong in the prologue and the merge, not the tile
// loop (one exception, <64, true, true, true>; figures: docs/results/attention_journal.md).
template <int HD, bool STATS, bool NEAR, bool SOFTCAP>
__global__ void __launch_bounds__(kAttnFa2Threads, HD == 64   ? 3
                                                   : HD != 32 ? 0
                                                   : !NEAR    ? 4
                                                   : SOFTCAP  ? 0
                                                              : 3)
    attn_fwd_fa2_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int T, int C, int NH, int G, int P,
                        float softcap, float* stats_part, int near_n, Fa2Split split) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    static_assert(STATS || !NEAR, "the near/far statistics extend the basic ones");
    constexpr int NF = NEAR ? kAttnStatsNear : kAttnStatsBasic;
    constexpr int BQ = kAttnFa2BQ, BK = kAttnFa2BK, CH = HD / 8, KS = HD / 16, DB = HD / 8;
    static_assert(BQ == 64 && BK == 64, "4 warps x 16 rows, 8 key blocks of 8");
    constexpr int TILE = Fa2FwdSmem<HD>::TILE;
    LLMC_DYNAMIC_SHARED(unsigned char, smem_raw);
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // (BQ, HD) swizzled
    __nv_bfloat16* sK = sQ + TILE;                                   // [2] (BK, HD) swizzled
    __nv_bfloat16* sV = sK + 2 * TILE;                               // [2] (BK, HD) swizzled

    const int nqt = (T + BQ - 1) / BQ;
    AttnSplitGeom geom{T, BQ, BK, P, false, false};
    const Fa2BlockWork work = fa2_block_work(split, geom, blockIdx.x, NH, G);
    const int qt = work.outer, b = work.b, h = work.h, bh = b * NH + h;
    const bool local = work.local;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int mi = lane / 8, j8 = lane % 8;
    const float scale = attn_scale(HD);
    constexpr float kLog2e = 1.4426950408889634f;
    // x units -> natural units: scale (x = raw accumulator) or c (x = tanh of the scaled score)
    const float nat = SOFTCAP ? softcap : scale;
    const float mul = nat * kLog2e;
    const float scale_over_cap = SOFTCAP ? scale / softcap : 0.0f;
    const __nv_bfloat16* base = qkv + (size_t)b * T * C3 + h * HD;

    const int kb = work.inner_begin, ke = work.inner_end;  // this block's key tiles (all of them unless split)
    // masked tiles: [kb, ub) (the window's edge) and [ue, ke) (the diagonal, a ragged end)
    const int ub = attn_kv_tile_unmasked_begin(qt, BQ, BK, local, P);
    const int ue = attn_kv_tile_unmasked_end(qt, BQ, BK, T, local, P);
    const Fa2TileCopy<HD> kv_copy(base + C, C3);  // K; V is C elements further
    const uint32_t v_extra = 2u * (uint32_t)C;
    Fa2ScoreBitTables& score_bits = *reinterpret_cast<Fa2ScoreBitTables*>(smem_raw + Fa2FwdSmem<HD>::tables);
    score_bits.fill();  // read after the prologue's barrier
    // prologue: Q and the first K / V tile in one group; Q's fragments once
    Fa2TileCopy<HD>(base, C3).copy(sQ, q0, T);
    kv_copy.copy_pair(sK, sV, kb * BK, T, v_extra);
    cp_async_commit_group();
    cp_async_wait_group<0>();
    __syncthreads();
    uint32_t qa[kFa2QInRegs<HD> ? KS : 1][4];
    if constexpr (kFa2QInRegs<HD>) {
#pragma unroll
        for (int ks = 0; ks < KS; ks++)  // matrices: (rows 0..7 | 8..15) x (cols ks*16 + 0..7 | 8..15)
            ldmatrix_x4(qa[ks], sQ + smem_swizzle_offset(warp * 16 + (mi & 1) * 8 + j8, ks * 2 + (mi >> 1), CH));
    }

    const int r0 = q0 + warp * 16;
    const int i_row[2] = {r0 + g, r0 + g + 8};
    const Fa2LaneOffsets<HD> lane_off;
    Fa2Rows<HD> st;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) st.m[hf] = -INFINITY, st.l[hf] = 0.0f, st.es[hf] = 0.0f, st.nl[hf] = 0.0f;
#pragma unroll
    for (int db = 0; db < DB; db++) st.o[db][0] = st.o[db][1] = st.o[db][2] = st.o[db][3] = 0.0f;
    st.smax = st.nmax = st.fmax = -INFINITY;
    st.smin = INFINITY;

    for (int kt = kb; kt < ke; kt++) {
        const int buf = (kt - kb) & 1;
        if (kt != kb) {
            cp_async_wait_group<0>();  // this thread's copies of tile kt (the only group in flight)
            __syncthreads();           // everyone's copies landed; every warp is done with tile kt-1
        }
        if (kt + 1 < ke) {  // prefetch tile kt+1 into the buffer tile kt-1 used
            kv_copy.copy_pair(sK + (buf ^ 1) * TILE, sV + (buf ^ 1) * TILE, (kt + 1) * BK, T, v_extra);
            cp_async_commit_group();
        }
        const __nv_bfloat16* k_tile = sK + buf * TILE;
        const __nv_bfloat16* v_tile = sV + buf * TILE;
        // the masked body also takes a tile the near/far distance cuts through (NEAR; per warp)
        if (kt < ub || kt >= ue ||  // attn_tile_needs_mask(qt, kt, ...)
            (NEAR && attn_tile_near_kind(r0, r0 + 15, kt * BK, kt * BK + BK - 1, near_n) == 0))
            fa2_tile<HD, STATS, NEAR, SOFTCAP, true>(st, score_bits, lane_off, qa, sQ, k_tile, v_tile, i_row, kt * BK,
                                                     r0, T, local, P, mul, scale_over_cap, near_n);
        else
            fa2_tile<HD, STATS, NEAR, SOFTCAP, false>(st, score_bits, lane_off, qa, sQ, k_tile, v_tile, i_row, kt * BK,
                                                      r0, T, local, P, mul, scale_over_cap, near_n);
    }

    // decoded again from an opaque block index: the split's fields are not kept live across the loop
    const Fa2BlockWork again = fa2_block_work(split, geom, opaque_u32(blockIdx.x), NH, G);
    if (again.chunks > 1) {  // a split query tile: leave this chunk's partial; the last block merges
        const long long s0 = again.first_slot(geom) - again.j_first;
        const auto slot = [&](int j) { return split.part + (size_t)(s0 + j) * Fa2Partial<HD>::floats; };
        fa2_store_partial<HD, STATS, NEAR>(st, slot(again.j));
        if (!arrive_last(split.arrivals + (size_t)bh * nqt + qt, (uint32_t)again.chunks)) return;
        fa2_merge_partials<HD, STATS, NEAR>(st, again.j_first, again.chunks, mul, slot);
    }

    // finish: quad sums, normalize, write out (bf16 pairs), lse (natural log), entropy, near mass
    float ent = 0.0f, near_sum = 0.0f;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float l = st.l[hf], es = st.es[hf], nl = st.nl[hf];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (STATS) {
            es += __shfl_xor_sync(0xffffffffu, es, 1);
            es += __shfl_xor_sync(0xffffffffu, es, 2);
        }
        if (NEAR) {
            nl += __shfl_xor_sync(0xffffffffu, nl, 1);
            nl += __shfl_xor_sync(0xffffffffu, nl, 2);
        }
        const int i = i_row[hf];
        if (i < T) {
            const float inv = 1.0f / l;  // l > 0: key i is always visible
            mma_store_row<DB>(out + ((size_t)b * T + i) * C + h * HD + 2 * c, st.o, hf, inv);
            const float row_lse = st.m[hf] * nat + logf(l);
            if (c == 0) {
                lse[((size_t)b * NH + h) * T + i] = row_lse;
                if (STATS) ent += row_lse - es * nat * inv;
                if (NEAR) near_sum += attn_row_has_far(i, local, P, near_n) ? nl * inv : 1.0f;
            }
        }
    }
    if (STATS) {  // raw logit = accumulator * scale; scaling by scale > 0 commutes with max / min
        float v[NF];
        v[kAttnMax] = st.smax * scale;
        v[kAttnMin] = st.smin * scale;
        v[kAttnEntropySum] = ent;
        if constexpr (NEAR) {
            v[kAttnNearMassSum] = near_sum;
            v[kAttnNearMax] = st.nmax * scale;
            v[kAttnFarMax] = st.fmax * scale;
        }
        attn_block_stats<kAttnFa2Threads / 32>(v, stats_part + ((size_t)bh * nqt + qt) * NF);
    }
}

}  // namespace llmc::cuda
