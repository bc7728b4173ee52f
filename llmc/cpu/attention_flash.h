// The tiled (flash-style) CPU kernel of LS-attention: forward with online softmax and logit
// statistics, backward recomputing the probabilities from the saved log-sum-exp (FlashAttention-2),
// and the one-query decode over a KV cache. The API, argument checks and statistics contract are in
// llmc/cpu/attention_ls.h; the algorithm and the determinism rule in docs/cpu_backend.md.
//
// Layout: qkv (B, T, 3C), head h of q / k / v at channels h*hd, C + h*hd, 2C + h*hd of a row.
// Keys are cut into blocks of BK = 32 at multiples of BK (block kb = keys [kb*BK, kb*BK + BK)),
// whatever the queries: a query row's result depends on its own visible keys and this fixed block
// grid only, so a row computes the same bits in the forward (any query block, any thread) and in
// the decode. Per (query row i, key block), with s = q_i.k_j / sqrt(hd) and s' = c tanh(s/c)
// (soft-cap c > 0, else s') for the visible keys j of the block (i - P < j <= i local, j <= i global):
//   m' = max(m, max_j s'),  alpha = exp(m - m'),  p_j = exp(s'_j - m'),
//   l' = alpha l + sum_j p_j,  O' = alpha O + sum_j p_j v_j
// and at the end lse_i = m + log l, out_i = O / l. Statistics add the entropy sum
// e = sum_j p_j (s'_j - m) (rescaled as e' = alpha (e + (m - m') l) + sum_j p_j (s'_j - m')), the
// near mass (the same sum as l over the near keys i - j < N) and the max / min of s.
//
// Vectorization and the shared tile operations: llmc/cpu/attention_flash_tiles.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "llmc/cpu/attention_flash_tiles.h"
#include "llmc/cpu/simd.h"
#include "llmc/cpu/vec_exp.h"
#include "llmc/cpu/vec_tanh.h"

namespace llmc {
namespace cpu {
namespace flash {

// Online-softmax state of one query row.
template <typename F>
struct RowState {
    F m;       // running max of s' (-inf before the first key)
    F l;       // running sum of exp(s' - m)
    F ent;     // running sum of exp(s' - m) (s' - m)     (statistics only)
    F near_l;  // running sum of exp(s' - m) over near keys (statistics only)
};

// Running per-task maxima / minima of s, one lane per key position (statistics only).
template <typename V>
struct LaneStats {
    V near_max, far_max, min;
};

// One query row against one key block. s: the block's raw scores q.k (BK); ja..jb (ja <= jb): the
// visible keys, block-relative; jnear: the first near key, block-relative (any int); vrow(jj): v of
// key jj (hd); pbuf: BK scratch; o: the row's output accumulator (hd).
template <typename F, int VB, int HD, bool Stats, typename VRow>
LLMC_SIMD_INLINE void row_block(RowState<F>& st, F* o, const F* s, int ja, int jb, int jnear, const Shape<F>& sh,
                                VRow vrow, F* pbuf, LaneStats<typename Plan<F, VB, HD>::V>& ls) {
    typedef Plan<F, VB, HD> Pl;
    typedef typename Pl::V V;
    typedef typename Pl::VI VI;
    typedef typename Pl::VU VU;
    typedef typename Pl::IL IL;
    typedef typename Pl::UL UL;
    constexpr int L = Pl::L;
    const F ninf = -std::numeric_limits<F>::infinity();
    const V ninf_v = simd::splat<V>(ninf), pinf_v = simd::splat<V>(-ninf);
    const VI lane = simd::lane_index<VI>();
    const UL span = (UL)(jb - ja);
    const int v0 = ja / L, v1 = jb / L;  // the vectors holding visible keys
    const bool capped = sh.cap > F(0);

    // Scaled scores, statistics, capped scores (invisible: -inf) and their max. Each select is fed
    // by one comparison of integer lanes: vis = (unsigned)(j - ja) <= jb - ja, near = j >= jnear.
    V bmax = ninf_v;
    for (int v = v0; v <= v1; v++) {
        const V sv = simd::load<V>(s + v * L) * sh.scale;
        const VI j = lane + (IL)(v * L);
        const VU jv = (VU)(j - (IL)ja);
        if constexpr (Stats) {
            const V hi = jv <= span ? sv : ninf_v;   // s where visible, -inf elsewhere (the maxima)
            const V lo_ = jv <= span ? sv : pinf_v;  // s where visible, +inf elsewhere (the minimum)
            const V near_c = j >= (IL)jnear ? hi : ninf_v, far_c = j >= (IL)jnear ? ninf_v : hi;
            ls.near_max = near_c > ls.near_max ? near_c : ls.near_max;
            ls.far_max = far_c > ls.far_max ? far_c : ls.far_max;
            ls.min = lo_ < ls.min ? lo_ : ls.min;
        }
        V sc = sv;
        if (capped) {
            V t;
            sc = softcap_vec(sv, sh.cap, t);
        }
        sc = jv <= span ? sc : ninf_v;
        simd::store(pbuf + v * L, sc);
        bmax = sc > bmax ? sc : bmax;
    }
    const F m_new = std::max(st.m, simd::hmax(bmax));
    const F alpha = st.m == ninf ? F(0) : std::exp(st.m - m_new);

    // p = exp(s' - m'), its sum, and the statistics' sums (p is 0 on invisible keys, so the near
    // sum needs only the near test, and the entropy term p (s' - m') is taken where s' > -inf)
    const V m_v = simd::splat<V>(m_new), zero = simd::splat<V>(F(0));
    V psum = zero, esum = zero, nsum = zero;
    for (int v = v0; v <= v1; v++) {
        const V z = simd::load<V>(pbuf + v * L) - m_v;  // -inf where invisible
        const V p = simd::vexp(z);                      // 0 there
        simd::store(pbuf + v * L, p);
        psum += p;
        if constexpr (Stats) {
            const VI j = lane + (IL)(v * L);
            esum += z > ninf_v ? p * z : zero;
            nsum += j >= (IL)jnear ? p : zero;
        }
    }
    if constexpr (Stats) {
        st.ent = (st.m == ninf ? F(0) : alpha * (st.ent + (st.m - m_new) * st.l)) + simd::hsum(esum);
        st.near_l = st.near_l * alpha + simd::hsum(nsum);
    }
    st.l = st.l * alpha + simd::hsum(psum);
    st.m = m_new;

    // O = alpha O + sum_j p_j v_j
    const int hd = HD ? HD : sh.hd;
    weighted_rows<F, VB, HD>(o, alpha, pbuf, 1, ja, jb, vrow, hd);
}

// Scratch of one thread: (BQ, hd) output accumulators, BQ row states, an (R, BK) score tile, a BK row
// buffer, an hd buffer.
template <typename F>
struct FwdScratch {
    std::vector<F> o, s, pbuf;
    std::vector<RowState<F>> st;
    void size(int hd) {
        o.resize((size_t)kBQ * hd);
        s.resize((size_t)16 * kBK);
        pbuf.resize(kBK);
        st.resize(kBQ);
    }
};

// One forward task: query rows [qb*BQ, min(T, qb*BQ + BQ)) of head h of sequence b, over the key
// blocks they see. kt: packed keys (pack_blocks). Writes out and lse of those rows; ts (Stats) the
// task's statistics.
template <typename F, int VB, int HD, bool Stats>
LLMC_SIMD_INLINE void forward_task_body(F* out, F* lse, const F* qkv, const F* kt_all, const Shape<F>& sh, int b, int h,
                                        int qb, FwdScratch<F>& scr, TaskStats* ts) {
    typedef Plan<F, VB, HD> Pl;
    typedef typename Pl::V V;
    constexpr int R = Pl::R;
    const F ninf = -std::numeric_limits<F>::infinity();
    const int hd = HD ? HD : sh.hd, C3 = 3 * sh.C, T = sh.T;
    const int i0 = qb * kBQ, i1 = std::min(T, i0 + kBQ);
    const int nkb = sh.key_blocks();
    const F* kt_bh = kt_all + ((int64_t)b * sh.NH + h) * nkb * hd * kBK;
    const F* q0 = qkv + ((int64_t)b * T) * C3 + h * hd;             // q of row i: q0 + i * C3
    const F* v0 = qkv + ((int64_t)b * T) * C3 + 2 * sh.C + h * hd;  // v of key j: v0 + j * C3
    auto vrow_at = [&](int k0) { return [=](int jj) { return v0 + (int64_t)(k0 + jj) * C3; }; };

    for (int r = 0; r < i1 - i0; r++) scr.st[r] = RowState<F>{ninf, F(0), F(0), F(0)};
    std::fill(scr.o.begin(), scr.o.begin() + (size_t)(i1 - i0) * hd, F(0));
    LaneStats<V> ls{simd::splat<V>(ninf), simd::splat<V>(ninf), simd::splat<V>(std::numeric_limits<F>::infinity())};

    const int kb_begin = sh.key_lo(i0, h) / kBK, kb_end = (i1 - 1) / kBK + 1;
    for (int kb = kb_begin; kb < kb_end; kb++) {
        const int k0 = kb * kBK, k_last = std::min(T, k0 + kBK) - 1;
        const F* kt = kt_bh + (int64_t)kb * hd * kBK;
        for (int r0 = i0; r0 < i1; r0 += R) {
            const int rows = std::min(R, i1 - r0);
            if (r0 + rows - 1 < k0 || sh.key_lo(r0, h) > k_last) continue;  // no row of the group sees the block
            if (rows == R) score_tile<F, VB, HD, R>(scr.s.data(), q0 + (int64_t)r0 * C3, C3, kt, hd);
            else
                for (int r = 0; r < rows; r++)
                    score_tile<F, VB, HD, 1>(scr.s.data() + r * kBK, q0 + (int64_t)(r0 + r) * C3, C3, kt, hd);
            for (int r = 0; r < rows; r++) {
                const int i = r0 + r;
                const int ja = std::max(k0, sh.key_lo(i, h)) - k0, jb = std::min(k_last, i) - k0;
                if (ja > jb) continue;
                row_block<F, VB, HD, Stats>(scr.st[i - i0], scr.o.data() + (size_t)(i - i0) * hd,
                                            scr.s.data() + r * kBK, ja, jb, i - sh.near_n + 1 - k0, sh, vrow_at(k0),
                                            scr.pbuf.data(), ls);
            }
        }
    }

    double ent_sum = 0.0, near_mass_sum = 0.0;
    for (int i = i0; i < i1; i++) {
        const RowState<F>& st = scr.st[i - i0];
        const F inv = F(1) / st.l;
        const F* o = scr.o.data() + (size_t)(i - i0) * hd;
        F* dst = out + ((int64_t)b * T + i) * sh.C + h * hd;
        for (int d = 0; d < hd; d++) dst[d] = o[d] * inv;
        const F log_l = std::log(st.l);
        lse[((int64_t)b * sh.NH + h) * T + i] = st.m + log_l;
        if constexpr (Stats) {
            // entropy = lse - sum_j p_j s'_j = log l - ent / l; the near mass is exactly 1 without far keys
            ent_sum += (double)log_l - (double)(st.ent * inv);
            const bool has_far = sh.key_lo(i, h) < i - sh.near_n + 1;
            near_mass_sum += has_far ? (double)(st.near_l * inv) : 1.0;
        }
    }
    if constexpr (Stats) {
        const float near_max = (float)simd::hmax(ls.near_max), far_max = (float)simd::hmax(ls.far_max);
        *ts =
            TaskStats{std::max(near_max, far_max), (float)simd::hmin(ls.min), near_max, far_max, ent_sum, near_mass_sum,
                      (int64_t)(i1 - i0)};
    }
}

// Decode: out (hd) = the attention of one query q (hd) at position t of head h, over keys lo..t
// whose k / v rows krow(j) / vrow(j) come from a KV cache; the same block grid and row arithmetic as
// forward_task_body's row t, so the result is bit-identical to the forward's row. scr: as the forward's.
template <typename F, int VB, int HD, typename KRow, typename VRow>
LLMC_SIMD_INLINE void decode_body(F* out, const F* q, int t, int h, const Shape<F>& sh, KRow krow, VRow vrow,
                                  FwdScratch<F>& scr, std::vector<F>& kt) {
    typedef Plan<F, VB, HD> Pl;
    typedef typename Pl::V V;
    const F ninf = -std::numeric_limits<F>::infinity();
    const int hd = HD ? HD : sh.hd;
    const int lo = sh.key_lo(t, h);
    RowState<F> st{ninf, F(0), F(0), F(0)};
    F* o = scr.o.data();
    std::fill(o, o + hd, F(0));
    LaneStats<V> ls{simd::splat<V>(ninf), simd::splat<V>(ninf), simd::splat<V>(std::numeric_limits<F>::infinity())};
    kt.resize((size_t)hd * kBK);
    for (int kb = lo / kBK; kb <= t / kBK; kb++) {
        const int k0 = kb * kBK;
        const int ja = std::max(k0, lo) - k0, jb = std::min(k0 + kBK - 1, t) - k0;
        for (int jj = 0; jj < kBK; jj++) {  // keys outside lo..t are not in the cache: zeros (masked)
            const F* k = jj >= ja && jj <= jb ? krow(k0 + jj) : nullptr;
            for (int d = 0; d < hd; d++) kt[(size_t)d * kBK + jj] = k ? k[d] : F(0);
        }
        score_tile<F, VB, HD, 1>(scr.s.data(), q, 0, kt.data(), hd);
        row_block<F, VB, HD, false>(
            st, o, scr.s.data(), ja, jb, 0, sh, [&](int jj) { return vrow(k0 + jj); }, scr.pbuf.data(), ls);
    }
    const F inv = F(1) / st.l;
    for (int d = 0; d < hd; d++) out[d] = o[d] * inv;
}

// Scratch of one backward task.
template <typename F>
struct BwdScratch {
    std::vector<F> p, ds, s, dp, dq, lse, D;
    std::vector<F> dkt, dvt;  // (nkb, hd, BK): dK, dV of the head, transposed per key block
    void size(int hd, int nkb) {
        dkt.resize((size_t)nkb * hd * kBK);
        dvt.resize((size_t)nkb * hd * kBK);
        p.resize((size_t)kBQ * kBK);
        ds.resize((size_t)kBQ * kBK);
        s.resize((size_t)16 * kBK);
        dp.resize((size_t)16 * kBK);
        dq.resize((size_t)kBQ * hd);
        lse.resize(kBQ);
        D.resize(kBQ);
    }
};

// Backward of one (b, h): dq, dk, dv of the head's channel slice of sequence b (overwritten).
// Query blocks in order; in each, the key blocks it sees in order. Per (row i, key j) visible:
//   p = exp(s' - lse_i), dp = dO_i . v_j, ds = p (dp - D_i) (1 - tanh^2(s/c) when capped) / sqrt(hd),
//   dq_i += ds k_j, dk_j += ds q_i, dv_j += p dO_i,  D_i = dO_i . O_i.
// dq_i sums over the row's visible keys (head dim in lanes); dK, dV of a key block are kept
// transposed (hd, BK) with the keys in lanes and get the tile's p and ds (0 on invisible pairs of
// the rows that see the block) times the rows q_i, dO_i in row order; they are written out at the end.
// kt, vt: packed keys and values (pack_blocks).
template <typename F, int VB, int HD>
LLMC_SIMD_INLINE void backward_task_body(F* dqkv, const F* dout, const F* qkv, const F* out, const F* lse,
                                         const F* kt_all, const F* vt_all, const Shape<F>& sh, int b, int h,
                                         BwdScratch<F>& scr) {
    typedef Plan<F, VB, HD> Pl;
    typedef typename Pl::V V;
    typedef typename Pl::VI VI;
    typedef typename Pl::VU VU;
    typedef typename Pl::IL IL;
    typedef typename Pl::UL UL;
    constexpr int R = Pl::R, L = Pl::L;
    const int hd = HD ? HD : sh.hd, C = sh.C, C3 = 3 * C, T = sh.T;
    const int nkb = sh.key_blocks();
    const int64_t bh = (int64_t)b * sh.NH + h;
    const F* kt_bh = kt_all + bh * nkb * hd * kBK;
    const F* vt_bh = vt_all + bh * nkb * hd * kBK;
    const int64_t row0 = (int64_t)b * T;
    const F* q_at = qkv + row0 * C3 + h * hd;      // + i * C3
    const F* k_at = qkv + row0 * C3 + C + h * hd;  // + j * C3
    const F* do_at = dout + row0 * C + h * hd;     // + i * C
    F* dq_at = dqkv + row0 * C3 + h * hd;          // + i * C3
    F* dk_at = dqkv + row0 * C3 + C + h * hd;      // + j * C3
    F* dv_at = dqkv + row0 * C3 + 2 * C + h * hd;  // + j * C3
    const bool capped = sh.cap > F(0);
    const VI lane = simd::lane_index<VI>();
    const V zero = simd::splat<V>(F(0));
    const V ninf_v = simd::splat<V>(-std::numeric_limits<F>::infinity());

    std::fill(scr.dkt.begin(), scr.dkt.end(), F(0));  // dk, dv sum over the query blocks below
    std::fill(scr.dvt.begin(), scr.dvt.end(), F(0));
    const int nqb = (T + kBQ - 1) / kBQ;
    for (int qb = 0; qb < nqb; qb++) {
        const int i0 = qb * kBQ, i1 = std::min(T, i0 + kBQ);
        for (int i = i0; i < i1; i++) {
            const F* go = do_at + (int64_t)i * C;
            const F* o = out + (row0 + i) * C + h * hd;
            F D = 0;
            for (int d = 0; d < hd; d++) D += go[d] * o[d];
            scr.D[i - i0] = D;
            scr.lse[i - i0] = lse[bh * T + i];
        }
        std::fill(scr.dq.begin(), scr.dq.begin() + (size_t)(i1 - i0) * hd, F(0));
        const int kb_begin = sh.key_lo(i0, h) / kBK, kb_end = (i1 - 1) / kBK + 1;
        for (int kb = kb_begin; kb < kb_end; kb++) {
            const int k0 = kb * kBK, k_last = std::min(T, k0 + kBK) - 1;
            const F* kt = kt_bh + (int64_t)kb * hd * kBK;
            const F* vt = vt_bh + (int64_t)kb * hd * kBK;
            // p and ds of every visible (row, key) of the tile pair; rows without a visible key skip
            for (int r0 = i0; r0 < i1; r0 += R) {
                const int rows = std::min(R, i1 - r0);
                if (r0 + rows - 1 < k0 || sh.key_lo(r0, h) > k_last) continue;
                if (rows == R) {
                    score_tile<F, VB, HD, R>(scr.s.data(), q_at + (int64_t)r0 * C3, C3, kt, hd);
                    score_tile<F, VB, HD, R>(scr.dp.data(), do_at + (int64_t)r0 * C, C, vt, hd);
                } else {
                    for (int r = 0; r < rows; r++) {
                        score_tile<F, VB, HD, 1>(scr.s.data() + r * kBK, q_at + (int64_t)(r0 + r) * C3, C3, kt, hd);
                        score_tile<F, VB, HD, 1>(scr.dp.data() + r * kBK, do_at + (int64_t)(r0 + r) * C, C, vt, hd);
                    }
                }
                for (int r = 0; r < rows; r++) {
                    const int i = r0 + r, ri = i - i0;
                    const int ja = std::max(k0, sh.key_lo(i, h)) - k0, jb = std::min(k_last, i) - k0;
                    if (ja > jb) continue;
                    const UL span = (UL)(jb - ja);
                    const V lse_v = simd::splat<V>(scr.lse[ri]), D_v = simd::splat<V>(scr.D[ri]);
                    for (int v = 0; v < Pl::NV; v++) {  // the vectors without a visible key: 0
                        if (v >= ja / L && v <= jb / L) continue;
                        simd::store(scr.p.data() + ri * kBK + v * L, zero);
                        simd::store(scr.ds.data() + ri * kBK + v * L, zero);
                    }
                    for (int v = ja / L; v <= jb / L; v++) {
                        const V sv = simd::load<V>(scr.s.data() + r * kBK + v * L) * sh.scale;
                        const VU jv = (VU)(lane + (IL)(v * L - ja));  // visible: jv <= span
                        V t = zero, sc = sv;
                        if (capped) sc = softcap_vec(sv, sh.cap, t);
                        const V p = simd::vexp(jv <= span ? sc - lse_v : ninf_v);  // 0 where invisible
                        V ds = p * (simd::load<V>(scr.dp.data() + r * kBK + v * L) - D_v);
                        if (capped) ds *= F(1) - t * t;
                        ds = jv <= span ? ds * sh.scale : zero;  // dp need not be finite where invisible
                        simd::store(scr.p.data() + ri * kBK + v * L, p);
                        simd::store(scr.ds.data() + ri * kBK + v * L, ds);
                    }
                    // dq_i += sum_j ds_ij k_j
                    weighted_rows<F, VB, HD>(
                        scr.dq.data() + (size_t)ri * hd, F(1), scr.ds.data() + ri * kBK, 1, ja, jb,
                        [&](int jj) { return k_at + (int64_t)(k0 + jj) * C3; }, hd);
                }
            }
            // dK, dV of the block += ds^T Q, p^T dO over the rows that see the block
            const int ra = std::max(i0, k0) - i0;
            const int rb = std::min(i1 - 1, sh.local(h) ? k_last + sh.P - 1 : T - 1) - i0;
            if (ra <= rb) {
                outer_accumulate<F, VB, HD>(
                    scr.dkt.data() + (size_t)kb * hd * kBK, scr.ds.data(), ra, rb,
                    [&](int ri) { return q_at + (int64_t)(i0 + ri) * C3; }, hd);
                outer_accumulate<F, VB, HD>(
                    scr.dvt.data() + (size_t)kb * hd * kBK, scr.p.data(), ra, rb,
                    [&](int ri) { return do_at + (int64_t)(i0 + ri) * C; }, hd);
            }
        }
        for (int i = i0; i < i1; i++)
            std::copy(scr.dq.begin() + (size_t)(i - i0) * hd, scr.dq.begin() + (size_t)(i - i0 + 1) * hd,
                      dq_at + (int64_t)i * C3);
    }
    for (int j = 0; j < T; j++) {  // dk, dv rows from their transposed blocks
        const F* kt_j = scr.dkt.data() + (size_t)(j / kBK) * hd * kBK + j % kBK;
        const F* vt_j = scr.dvt.data() + (size_t)(j / kBK) * hd * kBK + j % kBK;
        F* dk = dk_at + (int64_t)j * C3;
        F* dv = dv_at + (int64_t)j * C3;
        for (int d = 0; d < hd; d++) {
            dk[d] = kt_j[d * kBK];
            dv[d] = vt_j[d * kBK];
        }
    }
}

// ---- ISA twins: each body compiled for the baseline, AVX2+FMA and AVX-512 -----------------------

template <typename F, int HD, bool Stats>
void forward_task_base(F* out, F* lse, const F* qkv, const F* kt, const Shape<F>& sh, int b, int h, int qb,
                       FwdScratch<F>& scr, TaskStats* ts) {
    forward_task_body<F, 16, HD, Stats>(out, lse, qkv, kt, sh, b, h, qb, scr, ts);
}
template <typename F, int HD>
void backward_task_base(F* dqkv, const F* dout, const F* qkv, const F* out, const F* lse, const F* kt, const F* vt,
                        const Shape<F>& sh, int b, int h, BwdScratch<F>& scr) {
    backward_task_body<F, 16, HD>(dqkv, dout, qkv, out, lse, kt, vt, sh, b, h, scr);
}
template <typename F, int HD, typename KRow, typename VRow>
void decode_base(F* out, const F* q, int t, int h, const Shape<F>& sh, KRow krow, VRow vrow, FwdScratch<F>& scr,
                 std::vector<F>& kt) {
    decode_body<F, 16, HD>(out, q, t, h, sh, krow, vrow, scr, kt);
}
#ifdef LLMC_SIMD_X86
template <typename F, int HD, bool Stats>
LLMC_TARGET_AVX2 void forward_task_avx2(F* out, F* lse, const F* qkv, const F* kt, const Shape<F>& sh, int b, int h,
                                        int qb, FwdScratch<F>& scr, TaskStats* ts) {
    forward_task_body<F, 32, HD, Stats>(out, lse, qkv, kt, sh, b, h, qb, scr, ts);
}
template <typename F, int HD, bool Stats>
LLMC_TARGET_AVX512 void forward_task_avx512(F* out, F* lse, const F* qkv, const F* kt, const Shape<F>& sh, int b, int h,
                                            int qb, FwdScratch<F>& scr, TaskStats* ts) {
    forward_task_body<F, 64, HD, Stats>(out, lse, qkv, kt, sh, b, h, qb, scr, ts);
}
template <typename F, int HD>
LLMC_TARGET_AVX2 void backward_task_avx2(F* dqkv, const F* dout, const F* qkv, const F* out, const F* lse, const F* kt,
                                         const F* vt, const Shape<F>& sh, int b, int h, BwdScratch<F>& scr) {
    backward_task_body<F, 32, HD>(dqkv, dout, qkv, out, lse, kt, vt, sh, b, h, scr);
}
template <typename F, int HD>
LLMC_TARGET_AVX512 void backward_task_avx512(F* dqkv, const F* dout, const F* qkv, const F* out, const F* lse,
                                             const F* kt, const F* vt, const Shape<F>& sh, int b, int h,
                                             BwdScratch<F>& scr) {
    backward_task_body<F, 64, HD>(dqkv, dout, qkv, out, lse, kt, vt, sh, b, h, scr);
}
template <typename F, int HD, typename KRow, typename VRow>
LLMC_TARGET_AVX2 void decode_avx2(F* out, const F* q, int t, int h, const Shape<F>& sh, KRow krow, VRow vrow,
                                  FwdScratch<F>& scr, std::vector<F>& kt) {
    decode_body<F, 32, HD>(out, q, t, h, sh, krow, vrow, scr, kt);
}
template <typename F, int HD, typename KRow, typename VRow>
LLMC_TARGET_AVX512 void decode_avx512(F* out, const F* q, int t, int h, const Shape<F>& sh, KRow krow, VRow vrow,
                                      FwdScratch<F>& scr, std::vector<F>& kt) {
    decode_body<F, 64, HD>(out, q, t, h, sh, krow, vrow, scr, kt);
}
#endif

// ---- drivers: the parallel loops, one twin and head-size instantiation per call ---------------

// Head sizes with a compile-time instantiation (others take the HD = 0 path).
template <typename Fn>
void with_head_size(int hd, Fn fn) {
    switch (hd) {
        case 8: return fn(std::integral_constant<int, 8>{});
        case 16: return fn(std::integral_constant<int, 16>{});
        case 32: return fn(std::integral_constant<int, 32>{});
        case 64: return fn(std::integral_constant<int, 64>{});
        case 128: return fn(std::integral_constant<int, 128>{});
        default: return fn(std::integral_constant<int, 0>{});
    }
}

// Forward over all (b, h, query block) tasks; stats: (B * NH * nqb) task partials, or nullptr.
template <typename F>
void forward(F* out, F* lse, const F* qkv, const Shape<F>& sh, TaskStats* stats, Isa isa) {
    std::vector<F> kt((size_t)sh.B * sh.NH * sh.key_blocks() * sh.hd * kBK);
    pack_blocks(kt.data(), qkv, sh, 1);
    const int nqb = (sh.T + kBQ - 1) / kBQ;
    const int64_t ntasks = (int64_t)sh.B * sh.NH * nqb;
    with_head_size(sh.hd, [&](auto hd_const) {
        constexpr int HD = decltype(hd_const)::value;
#pragma omp parallel
        {
            FwdScratch<F> scr;
            scr.size(sh.hd);
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < ntasks; task++) {
                const int qb = (int)(task % nqb), h = (int)((task / nqb) % sh.NH);
                const int b = (int)(task / ((int64_t)nqb * sh.NH));
                TaskStats* ts = stats ? stats + task : nullptr;
#ifdef LLMC_SIMD_X86
                if (isa == Isa::Avx512) {
                    if (stats) forward_task_avx512<F, HD, true>(out, lse, qkv, kt.data(), sh, b, h, qb, scr, ts);
                    else forward_task_avx512<F, HD, false>(out, lse, qkv, kt.data(), sh, b, h, qb, scr, ts);
                    continue;
                }
                if (isa == Isa::Avx2) {
                    if (stats) forward_task_avx2<F, HD, true>(out, lse, qkv, kt.data(), sh, b, h, qb, scr, ts);
                    else forward_task_avx2<F, HD, false>(out, lse, qkv, kt.data(), sh, b, h, qb, scr, ts);
                    continue;
                }
#endif
                if (stats) forward_task_base<F, HD, true>(out, lse, qkv, kt.data(), sh, b, h, qb, scr, ts);
                else forward_task_base<F, HD, false>(out, lse, qkv, kt.data(), sh, b, h, qb, scr, ts);
            }
        }
    });
}

// Backward over all (b, h) tasks (each owns its gradient slice; dqkv overwritten).
template <typename F>
void backward(F* dqkv, const F* dout, const F* qkv, const F* out, const F* lse, const Shape<F>& sh, Isa isa) {
    const size_t nkt = (size_t)sh.B * sh.NH * sh.key_blocks() * sh.hd * kBK;
    std::vector<F> kt(nkt), vt(nkt);
    pack_blocks(kt.data(), qkv, sh, 1);
    pack_blocks(vt.data(), qkv, sh, 2);
    const int64_t ntasks = (int64_t)sh.B * sh.NH;
    with_head_size(sh.hd, [&](auto hd_const) {
        constexpr int HD = decltype(hd_const)::value;
#pragma omp parallel
        {
            BwdScratch<F> scr;
            scr.size(sh.hd, sh.key_blocks());
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < ntasks; task++) {
                const int h = (int)(task % sh.NH), b = (int)(task / sh.NH);
#ifdef LLMC_SIMD_X86
                if (isa == Isa::Avx512) {
                    backward_task_avx512<F, HD>(dqkv, dout, qkv, out, lse, kt.data(), vt.data(), sh, b, h, scr);
                    continue;
                }
                if (isa == Isa::Avx2) {
                    backward_task_avx2<F, HD>(dqkv, dout, qkv, out, lse, kt.data(), vt.data(), sh, b, h, scr);
                    continue;
                }
#endif
                backward_task_base<F, HD>(dqkv, dout, qkv, out, lse, kt.data(), vt.data(), sh, b, h, scr);
            }
        }
    });
}

// Decode of every (b, h): q_of(b, h) the query (hd), krow(b, h, j) / vrow(b, h, j) the cached rows,
// out_of(b, h) where the output (hd) goes.
template <typename F, typename QOf, typename KRow, typename VRow, typename OutOf>
void decode(const Shape<F>& sh, int t, QOf q_of, KRow krow, VRow vrow, OutOf out_of, Isa isa) {
    with_head_size(sh.hd, [&](auto hd_const) {
        constexpr int HD = decltype(hd_const)::value;
#pragma omp parallel
        {
            FwdScratch<F> scr;
            scr.size(sh.hd);
            std::vector<F> kt;
#pragma omp for schedule(static)
            for (int task = 0; task < sh.B * sh.NH; task++) {
                const int b = task / sh.NH, h = task % sh.NH;
                auto kr = [&](int j) { return krow(b, h, j); };
                auto vr = [&](int j) { return vrow(b, h, j); };
#ifdef LLMC_SIMD_X86
                if (isa == Isa::Avx512) {
                    decode_avx512<F, HD>(out_of(b, h), q_of(b, h), t, h, sh, kr, vr, scr, kt);
                    continue;
                }
                if (isa == Isa::Avx2) {
                    decode_avx2<F, HD>(out_of(b, h), q_of(b, h), t, h, sh, kr, vr, scr, kt);
                    continue;
                }
#endif
                decode_base<F, HD>(out_of(b, h), q_of(b, h), t, h, sh, kr, vr, scr, kt);
            }
        }
    });
}

}  // namespace flash
}  // namespace cpu
}  // namespace llmc
