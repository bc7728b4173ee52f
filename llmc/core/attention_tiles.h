// Tile-range arithmetic of the LS-attention kernels (llmc/cuda/attention_ls.cuh), host and device.
// Kept apart from the kernels so it can be unit-tested on the CPU (test/test_attention_tiles.cpp).
//
// Visibility (docs/design.md): query i of a LOCAL head sees keys j with max(0, i-P+1) <= j <= i;
// a GLOBAL head sees 0 <= j <= i. Queries and keys are cut into tiles of BQ rows / BK keys;
// tile t covers [t*B, min((t+1)*B, T)), the last one may be ragged.
//
// Forward / dQ (loop over key tiles for one query tile [q0, q1)): the union of the rows' windows
// is the contiguous range [key_lo(q0), q1-1], so the key tiles visited are
// [kv_tile_begin, kv_tile_end) and every one of them holds at least one visible pair.
// dK / dV (loop over query tiles for one key tile [k0, k1)): the rows that see some key of the
// tile are [k0, min(T, k1-1+P)) for a local head (i - P < j  <=>  i <= j + P - 1) and [k0, T)
// for a global one: query tiles [q_tile_begin, q_tile_end).
// A tile pair needs the element mask only when some pair in it is not visible (tile_needs_mask);
// interior tiles skip the per-element test.
// The per-element math shared by every kernel (soft-cap, the online-softmax rescale, the backward's
// p and dS) is here too, host + device, so test/test_attention_tiles.cpp checks it on the CPU.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define LLMC_HD __host__ __device__
#else
#define LLMC_HD
#endif

namespace llmc {

// The head sizes the CUDA LS-attention kernels are instantiated for (llmc/cuda/attention_ls.cuh).
inline bool cuda_head_size_supported(int hd) { return hd == 32 || hd == 64 || hd == 128; }
// The longest sequence the CUDA LS-attention kernels take: the scalar kernels' grid holds one
// 32-row query tile per gridDim.y slot, at most 65535 (llmc/cuda/attention_ls.cuh checks it).
constexpr long kCudaAttnMaxSeqLen = 65535L * 32;

LLMC_HD inline int attn_imin(int a, int b) { return a < b ? a : b; }
LLMC_HD inline int attn_imax(int a, int b) { return a > b ? a : b; }

// First key query i may see.
LLMC_HD inline int attn_key_lo(int i, bool local, int P) { return local ? attn_imax(0, i - P + 1) : 0; }

// Is the pair (query i, key j) visible? (i, j in [0, T))
LLMC_HD inline bool attn_visible(int i, int j, bool local, int P) { return j <= i && (!local || j > i - P); }

// Near/far split of the logit statistics (docs/training.md): key j of query i is near when
// i - j < N (N >= 1), far otherwise. Row i has a far key it can see when its first key is at
// distance >= N; a row without one has near mass exactly 1.
LLMC_HD inline bool attn_row_has_far(int i, bool local, int P, int N) { return attn_key_lo(i, local, P) <= i - N; }
// Over the rows [r0, r1] and keys [k0, k1] of a tile (every pair, visible or not): 1 = every pair
// is near, -1 = every pair is far, 0 = mixed.
LLMC_HD inline int attn_tile_near_kind(int r0, int r1, int k0, int k1, int N) {
    if (r1 - k0 < N) return 1;    // the largest distance is below N
    if (r0 - k1 >= N) return -1;  // the smallest distance is N or more
    return 0;
}

// Key tiles [begin, end) a query tile qt (rows [qt*BQ, min(qt*BQ+BQ, T))) must visit.
LLMC_HD inline int attn_kv_tile_begin(int qt, int BQ, int BK, bool local, int P) {
    return attn_key_lo(qt * BQ, local, P) / BK;
}
LLMC_HD inline int attn_kv_tile_end(int qt, int BQ, int BK, int T) {
    const int q1 = attn_imin(qt * BQ + BQ, T);  // one past the last row
    return (q1 + BK - 1) / BK;                  // tiles up to the one holding key q1-1
}

// Query tiles [begin, end) that see some key of key tile kt (keys [kt*BK, min(kt*BK+BK, T))).
LLMC_HD inline int attn_q_tile_begin(int kt, int BQ, int BK) { return (kt * BK) / BQ; }
LLMC_HD inline int attn_q_tile_end(int kt, int BQ, int BK, int T, bool local, int P) {
    const int k1 = attn_imin(kt * BK + BK, T);  // one past the last key
    // last row that sees key k1-1: T-1 for a global head, k1-1+P-1 for a local one
    const int i_end = local ? attn_imin(T, k1 - 1 + P) : T;  // P >= 1 so i_end >= k1
    return (i_end + BQ - 1) / BQ;
}

// Does the (query tile qt, key tile kt) pair hold a pair that is NOT visible (so the kernel must
// test each element)? Rows/keys past T count as invisible (ragged last tiles are masked).
LLMC_HD inline bool attn_tile_needs_mask(int qt, int kt, int BQ, int BK, int T, bool local, int P) {
    const int q0 = qt * BQ, q1 = q0 + BQ;  // full tile extents: a ragged tile always masks
    const int k0 = kt * BK, k1 = k0 + BK;
    if (q1 > T || k1 > T) return true;
    if (k1 - 1 > q0) return true;                  // causal: the last key must be <= the first row
    if (local && k0 <= (q1 - 1) - P) return true;  // window: the first key must be > last row - P
    return false;
}

// The key tiles of query tile qt that need no mask: [unmasked_begin, unmasked_end), clamped into
// [kv_tile_begin, kv_tile_end) (empty: begin == end). Within the visited tiles the masked ones are a
// prefix (the window's edge) and a suffix (the diagonal, keys past T), so for kv_tile_begin <= kt <
// kv_tile_end, attn_tile_needs_mask(qt, kt, ...) == !(unmasked_begin <= kt < unmasked_end): the
// kernels decide it per tile with two compares (test/test_attention_tiles.cpp checks the identity).
// From attn_tile_needs_mask: no mask when q1 <= T, k1 <= T (kt < T / BK), k1 - 1 <= q0
// (kt < (q0 + 1) / BK) and, local, k0 >= q1 - P (kt >= ceil((q1 - P) / BK)).
LLMC_HD inline int attn_kv_tile_unmasked_begin(int qt, int BQ, int BK, bool local, int P) {
    const int q1 = qt * BQ + BQ, lo = local ? attn_imax(q1 - P, 0) : 0;
    return attn_imax(attn_kv_tile_begin(qt, BQ, BK, local, P), (lo + BK - 1) / BK);
}
LLMC_HD inline int attn_kv_tile_unmasked_end(int qt, int BQ, int BK, int T, bool local, int P) {
    const int q0 = qt * BQ, begin = attn_kv_tile_unmasked_begin(qt, BQ, BK, local, P);
    if (q0 + BQ > T) return begin;  // a ragged query tile masks every key tile
    const int end = attn_imin(attn_kv_tile_end(qt, BQ, BK, T), attn_imin(T / BK, (q0 + 1) / BK));
    return attn_imax(end, begin);
}

// Score bits of the FA2-class kernels (llmc/cuda/attention_ls_fa2.cuh: a warp owns the 16 rows
// r0 .. r0+15 of a 64-key tile at k0, a thread the keys k0 + 8nb + 2c + {0, 1} of its two rows).
// A thread's 16 scores of one row sit at the key offsets 8nb + e (nb = 0..7, e = 0, 1) from its first
// key; bit 2nb + e of the result is set when that offset lies in [lo, hi] (any ints; empty when
// hi < lo). The offsets grow with 2nb + e, so the bits are one run: first bit q_lo = the first
// index whose offset is >= lo, last bit q_hi = the last whose offset is <= hi.
LLMC_HD inline unsigned attn_thread_score_bits(int lo, int hi) {
    const int q_lo = attn_imax(2 * (lo >> 3) + attn_imin(lo & 7, 2), 0);  // >> 3, & 7: floor, mod 8
    const int q_hi = attn_imin(2 * (hi >> 3) + attn_imin(hi & 7, 1), 15);
    return q_hi < q_lo ? 0u : (0xFFFFu >> (15 - q_hi)) & (0xFFFFu << q_lo);
}

// attn_thread_score_bits(lo, hi) as the AND of two halves, each a function of one clamped index
// in [0, kAttnScoreBitsN): the offsets >= lo (index clamp(lo, 0, 58): every offset is >= 0 and none
// is >= 58) and the offsets <= hi (index clamp(hi + 1, 0, 58)). Kernels tabulate the halves once
// per block and look a thread's bits up (two clamps and two loads per row instead of the
// arithmetic); test/test_attention_tiles.cpp checks the identity for every lo, hi.
constexpr int kAttnScoreBitsN = 59;
LLMC_HD inline int attn_score_bits_lo_index(int lo) { return attn_imin(attn_imax(lo, 0), kAttnScoreBitsN - 1); }
LLMC_HD inline int attn_score_bits_hi_index(int hi) { return attn_imin(attn_imax(hi + 1, 0), kAttnScoreBitsN - 1); }
LLMC_HD inline unsigned attn_score_bits_at_least(int lo_index) { return attn_thread_score_bits(lo_index, 57); }
LLMC_HD inline unsigned attn_score_bits_at_most(int hi_index) { return attn_thread_score_bits(0, hi_index - 1); }

// The bits of a thread's score word (row hf's at bit 16hf, attn_thread_score_bits) that fall in the
// 16-wide pair np (np = 0..3) of a 64-wide tile: the FA2-class kernels skip pair np of a masked
// tile when the OR of their warp's words has none of them (a pair's 16 x 16 scores are spread over
// the warp's lanes, so that is exactly "no visible score in the pair").
LLMC_HD inline unsigned attn_pair_bits(int np) { return 0x000f000fu << (4 * np); }

// Soft-cap: returns s' = c*tanh(s/c) (s itself when c <= 0) and t = tanh(s/c) (0 when off) for
// the backward's derivative ds'/ds = 1 - t^2.
LLMC_HD inline float attn_softcap(float s, float cap, float& t) {
    if (cap > 0.0f) {
        t = tanhf(s / cap);
        return cap * t;
    }
    t = 0.0f;
    return s;
}

// One online-softmax step of a row: m is the running max (-inf before the first visible key),
// tile_max the max of this tile's visible capped scores (-inf when none is visible). Updates m and
// returns the factor alpha = exp(m_old - m_new) that rescales the running sum and accumulator;
// m_use is what the tile's scores are shifted by (p = exp(s' - m_use)). While nothing has been
// visible (m_new = -inf) m_use is 0, so p = exp(-inf - 0) = 0 and alpha = 0: never exp(-inf + inf).
LLMC_HD inline float attn_online_rescale(float& m, float tile_max, float& m_use) {
    const float m_new = m > tile_max ? m : tile_max;
    m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = expf(m - m_use);  // 0 when m = -inf
    m = m_new;
    return alpha;
}

// Backward of one visible-or-not pair: raw = q.k/sqrt(hd), dp = dO_i . v_j, lse and D = dO_i . O_i of
// row i. Returns p = exp(s' - lse) (0 when invisible) and sets ds = dL/d(q.k) =
// p (dp - D) (1 - tanh^2(raw/c)) / sqrt(hd) (0 when invisible), so dq_i += ds k_j, dk_j += ds q_i.
LLMC_HD inline float attn_prob_grad(float raw, float dp, float lse, float D, float cap, float scale, bool vis,
                                    float& ds) {
    if (!vis) {
        ds = 0.0f;
        return 0.0f;
    }
    float t;
    const float sc = attn_softcap(raw, cap, t);
    const float p = expf(sc - lse);
    float d = p * (dp - D);
    if (cap > 0.0f) d *= 1.0f - t * t;
    ds = d * scale;
    return p;
}

}  // namespace llmc
