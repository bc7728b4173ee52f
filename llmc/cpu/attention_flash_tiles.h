// The building blocks of the tiled CPU attention kernel (llmc/cpu/attention_flash.h, which has the
// algorithm and the layout): the key-block grid, a call's shape and the compile-time vector plan,
// and the register-tile operations the forward, the backward and the decode share.
//   kBK, kBQ          keys per block (the fixed grid), query rows per task
//   Shape             the shape and options of one attention call; TaskStats: one forward task's statistics
//   Plan              per instantiation (F, vector bytes VB, head size HD): lanes, tile rows, head-dim vectors
//   pack_blocks       keys or values of every (b, h) transposed into (hd, BK) blocks
//   score_tile        S (R, BK) = R query rows . a packed key block, in registers
//   weighted_rows     acc (hd) = acc * scale + sum_j w_j rows(j), in U interleaved partial sums
//   outer_accumulate  a transposed (hd, BK) tile += the weights (rows, BK) times the rows (hd)
//   softcap_vec       c tanh(s / c) on a vector of scores
//
// Vectorization: the keys of a block are SIMD lanes: scores come from a register tile of R query
// rows x BK keys against the block's keys stored transposed (hd, BK) once per call; exp, tanh, masking,
// max and sums work on vectors of keys. Sums over keys of weighted head-dim rows (p_j v_j, and in the
// backward ds_ij k_j) run over the head dimension in vectors, in U interleaved partial sums (key
// a+u, a+u+U, ... into partial u, partials added as a tree) so that short head dimensions still keep
// several FMAs in flight. In the forward invisible keys never enter a sum or a product: their scores
// are replaced by -inf (exp gives 0) and the weighted sums run over the visible range only. The
// backward's dK, dV of a key block are a transposed (hd, BK) tile, keys in lanes, updated by a small
// GEMM over the rows that see the block, whose weights are 0 on the tile's invisible pairs.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "llmc/cpu/simd.h"
#include "llmc/cpu/vec_exp.h"
#include "llmc/cpu/vec_tanh.h"

namespace llmc {
namespace cpu {
namespace flash {

constexpr int kBK = 32;  // keys per block
constexpr int kBQ = 32;  // query rows per forward task and per backward query block

// The shape and options of one attention call.
template <typename F>
struct Shape {
    int B, T, C, NH, G, P, hd;
    int near_n;  // near/far split of the statistics: key j of query i is near when i - j < near_n
    F scale;     // 1 / sqrt(hd)
    F cap;       // soft-cap c; 0 = off
    bool local(int h) const { return h < NH - G; }
    int key_lo(int i, int h) const { return local(h) ? std::max(0, i - P + 1) : 0; }
    int key_blocks() const { return (T + kBK - 1) / kBK; }
};

// Statistics of one forward task (rows of one (b, h)); merged by the caller in a fixed order.
struct TaskStats {
    float max_logit, min_logit, near_max_logit, far_max_logit;
    double entropy_sum, near_mass_sum;
    int64_t rows;
};

// Compile-time plan of one instantiation: F lanes in VB-byte vectors across keys, and head-dim
// vectors for a head size HD known at compile time (HD = 0: any hd, scalar head-dim loops).
template <typename F, int VB, int HD>
struct Plan {
    typedef typename simd::Vec<F, VB>::type V;
    // key positions as integer lanes of F's width: visibility is the unsigned range test
    // (unsigned)(j - ja) <= jb - ja (one compare; float compares of lane positions are scalarized
    // by GCC 12 for AVX-512)
    typedef std::conditional_t<sizeof(F) == 4, int32_t, int64_t> IL;
    typedef std::make_unsigned_t<IL> UL;
    typedef typename simd::Vec<IL, VB>::type VI;
    typedef typename simd::Vec<UL, VB>::type VU;
    static constexpr int L = simd::Vec<F, VB>::lanes;
    static constexpr int NV = kBK / L;  // vectors per key block
    static_assert(kBK % L == 0, "a key block holds whole vectors");
    // rows of a score tile: R x NV accumulators fill half the vector registers (16 or 32)
    static constexpr int R = std::max(1, (VB == 64 ? 16 : 8) / NV);
    // head-dim entries per register chunk of a transposed (hd, BK) dK / dV tile: DC x NV accumulators
    static constexpr int DC = HD == 0 ? 1 : std::min(HD, std::max(1, (VB == 64 ? 16 : 8) / NV));
    // head-dim vectors: HB bytes, NC of them per head row, U interleaved partial sums
    static constexpr int HBYTES = HD * (int)sizeof(F);
    static constexpr int HB = HD == 0 ? 16 : (HBYTES % VB == 0 ? VB : HBYTES % 32 == 0 && VB >= 32 ? 32 : 16);
    static_assert(HD == 0 || HBYTES % HB == 0, "fast head sizes are multiples of 16 bytes");
    typedef typename simd::Vec<F, HB>::type VH;
    static constexpr int HL = HB / (int)sizeof(F);
    static constexpr int NC = HD / HL;
    static constexpr int U = HD == 0 ? 4 : (NC >= 4 ? 1 : 4 / NC);
};

// Keys (or values) of every (b, h) transposed into blocks: kt[((b*NH + h) * nkb + kb) * hd + d][jj]
// = x_{kb*BK + jj}[d] (part = 1 for k, 2 for v; keys past T are 0). (B * NH * nkb * hd * BK).
template <typename F>
void pack_blocks(F* kt, const F* qkv, const Shape<F>& sh, int part) {
    const int nkb = sh.key_blocks(), hd = sh.hd, C3 = 3 * sh.C;
    const int64_t nblocks = (int64_t)sh.B * sh.NH * nkb;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        const int kb = (int)(blk % nkb), h = (int)((blk / nkb) % sh.NH), b = (int)(blk / ((int64_t)nkb * sh.NH));
        F* dst = kt + blk * hd * kBK;  // (hd, BK)
        for (int jj = 0; jj < kBK; jj++) {
            const int j = kb * kBK + jj;
            const F* src = qkv + ((int64_t)b * sh.T + j) * C3 + part * sh.C + h * hd;
            for (int d = 0; d < hd; d++) dst[d * kBK + jj] = j < sh.T ? src[d] : F(0);
        }
    }
}

// S (R, BK) = A (R rows of hd, row stride as) . Kt (hd, BK): the R x NV accumulators stay in
// registers while d walks the head dimension; every element is the sum over d in order from 0, so
// it does not depend on R.
template <typename F, int VB, int HD, int R>
LLMC_SIMD_INLINE void score_tile(F* S, const F* a, size_t as, const F* kt, int hd_rt) {
    typedef Plan<F, VB, HD> Pl;
    typedef typename Pl::V V;
    const int hd = HD ? HD : hd_rt;
    V acc[R][Pl::NV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < Pl::NV; v++) acc[r][v] = simd::splat<V>(F(0));
    for (int d = 0; d < hd; d++) {
        V kv[Pl::NV];
        for (int v = 0; v < Pl::NV; v++) kv[v] = simd::load<V>(kt + d * kBK + v * Pl::L);
        for (int r = 0; r < R; r++) {
            const F ad = a[r * as + d];
            for (int v = 0; v < Pl::NV; v++) acc[r][v] += kv[v] * ad;
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < Pl::NV; v++) simd::store(S + r * kBK + v * Pl::L, acc[r][v]);
}

// acc (hd) = acc * scale + sum_{j = a..b} w[j * ws] * rows(j)[0:hd] (a <= b): the sum in U
// interleaved partial sums over j (partial u holds j = a+u, a+u+U, ...), added as a tree, then
// combined with acc once (a fixed order given a, b).
template <typename F, int VB, int HD, typename Rows>
LLMC_SIMD_INLINE void weighted_rows(F* acc, F scale, const F* w, int ws, int a, int b, Rows rows, int hd_rt) {
    typedef Plan<F, VB, HD> Pl;
    constexpr int U = Pl::U;
    if constexpr (HD == 0) {
        for (int d = 0; d < hd_rt; d++) {
            F part[U] = {};
            for (int j = a; j <= b; j++) part[(j - a) % U] += w[j * ws] * rows(j)[d];
            for (int s = U / 2; s >= 1; s /= 2)
                for (int u = 0; u < s; u++) part[u] += part[u + s];
            acc[d] = acc[d] * scale + part[0];
        }
    } else {
        typedef typename Pl::VH VH;
        constexpr int NC = Pl::NC, HL = Pl::HL;
        VH part[U][NC];
        for (int u = 0; u < U; u++)
            for (int c = 0; c < NC; c++) part[u][c] = simd::splat<VH>(F(0));
        int j = a;
        for (; j + U - 1 <= b; j += U) {
            for (int u = 0; u < U; u++) {
                const F wj = w[(j + u) * ws];
                const F* row = rows(j + u);
                for (int c = 0; c < NC; c++) part[u][c] += simd::load<VH>(row + c * HL) * wj;
            }
        }
        for (int u = 0; j <= b; j++, u++) {
            const F wj = w[j * ws];
            const F* row = rows(j);
            for (int c = 0; c < NC; c++) part[u][c] += simd::load<VH>(row + c * HL) * wj;
        }
        for (int s = U / 2; s >= 1; s /= 2)
            for (int u = 0; u < s; u++)
                for (int c = 0; c < NC; c++) part[u][c] += part[u + s][c];
        for (int c = 0; c < NC; c++) simd::store(acc + c * HL, simd::load<VH>(acc + c * HL) * scale + part[0][c]);
    }
}

// acc_t (hd, BK) += sum_{r = r0..r1} x(r)[d] * w[r * BK + jj] for every d, jj: the dK or dV update of
// one tile pair with the keys in SIMD lanes (the weights w, (BQ, BK), are 0 on invisible pairs).
// DC head-dim entries x NV key vectors stay in registers while r walks the rows in order.
template <typename F, int VB, int HD, typename Rows>
LLMC_SIMD_INLINE void outer_accumulate(F* acc_t, const F* w, int r0, int r1, Rows x, int hd_rt) {
    typedef Plan<F, VB, HD> Pl;
    typedef typename Pl::V V;
    constexpr int NV = Pl::NV, L = Pl::L, DC = Pl::DC;
    const int hd = HD ? HD : hd_rt;
    for (int d0 = 0; d0 < hd; d0 += DC) {
        V acc[DC][NV];
        for (int dd = 0; dd < DC; dd++)
            for (int v = 0; v < NV; v++) acc[dd][v] = simd::load<V>(acc_t + (d0 + dd) * kBK + v * L);
        for (int r = r0; r <= r1; r++) {
            const F* xr = x(r) + d0;
            V wv[NV];
            for (int v = 0; v < NV; v++) wv[v] = simd::load<V>(w + r * kBK + v * L);
            for (int dd = 0; dd < DC; dd++) {
                const F xd = xr[dd];
                for (int v = 0; v < NV; v++) acc[dd][v] += wv[v] * xd;
            }
        }
        for (int dd = 0; dd < DC; dd++)
            for (int v = 0; v < NV; v++) simd::store(acc_t + (d0 + dd) * kBK + v * L, acc[dd][v]);
    }
}

// Soft-cap of a vector of scores: c tanh(s / c), and t = tanh(s / c) for the backward.
template <typename V>
LLMC_SIMD_INLINE V softcap_vec(const V& s, simd::lane_t<V> cap, V& t) {
    t = simd::vtanh(s / cap);
    return t * cap;
}

}  // namespace flash
}  // namespace cpu
}  // namespace llmc
