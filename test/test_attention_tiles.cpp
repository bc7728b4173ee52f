// Tests of the LS-attention tile-range arithmetic (llmc/core/attention_tiles.h) that the CUDA kernels
// use to skip key tiles outside a local head's window. For many T, P and tile sizes, brute force
// over every (i, j) pair checks that
//   forward / dQ: the key tiles visited by each query tile cover every visible pair exactly once,
//                 and none of them is wholly invisible;
//   dK / dV:      the query tiles visited by each key tile cover every visible pair exactly once,
//                 and none is wholly invisible;
//   tile_needs_mask is false only for tiles whose pairs are all visible and inside [0, T);
//   the FA2 kernels' masked-tile bits: a warp's visible 16-key pairs, a thread's visible scores
//   (forward and dQ: rows are queries; dK/dV: rows are keys).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "llmc/core/attention_tiles.h"

namespace {

bool visible_brute(int i, int j, bool local, int P) {
    if (j > i) return false;
    if (local && i - j >= P) return false;
    return true;
}

// Number of visible pairs (i < T, j < T) inside the tile pair.
int visible_in_tiles(int qt, int kt, int BQ, int BK, int T, bool local, int P) {
    int n = 0;
    for (int i = qt * BQ; i < std::min(T, qt * BQ + BQ); i++)
        for (int j = kt * BK; j < std::min(T, kt * BK + BK); j++) n += visible_brute(i, j, local, P);
    return n;
}

void check_shape(int T, int P, int BQ, int BK, bool local) {
    const std::string what = "T=" + std::to_string(T) + " P=" + std::to_string(P) + " BQ=" + std::to_string(BQ) +
                             " BK=" + std::to_string(BK) + (local ? " local" : " global");
    INFO(what);
    const int nqt = (T + BQ - 1) / BQ, nkt = (T + BK - 1) / BK;
    // predicate
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            if (llmc::attn_visible(i, j, local, P) != visible_brute(i, j, local, P))
                FAIL("attn_visible " << i << "," << j);
    for (int i = 0; i < T; i++) {
        int lo = 0;
        while (lo <= i && !visible_brute(i, lo, local, P)) lo++;
        REQUIRE(llmc::attn_key_lo(i, local, P) == lo);
    }

    // forward / dQ: query tiles -> key tiles
    std::vector<int> cover((size_t)T * T, 0);
    for (int qt = 0; qt < nqt; qt++) {
        const int kb = llmc::attn_kv_tile_begin(qt, BQ, BK, local, P);
        const int ke = llmc::attn_kv_tile_end(qt, BQ, BK, T);
        REQUIRE(kb >= 0);
        REQUIRE(ke <= nkt);
        REQUIRE(kb < ke);
        for (int kt = kb; kt < ke; kt++) {
            const int nvis = visible_in_tiles(qt, kt, BQ, BK, T, local, P);
            if (nvis == 0) FAIL("forward visits a wholly invisible tile qt=" << qt << " kt=" << kt);
            const bool mask = llmc::attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
            const int ub = llmc::attn_kv_tile_unmasked_begin(qt, BQ, BK, local, P);
            const int ue = llmc::attn_kv_tile_unmasked_end(qt, BQ, BK, T, local, P);
            if (mask != !(ub <= kt && kt < ue))
                FAIL("unmasked range [" << ub << ", " << ue << ") disagrees with tile_needs_mask qt=" << qt
                                        << " kt=" << kt << " mask=" << mask);
            const int full = BQ * BK;
            if (!mask && nvis != full) FAIL("unmasked tile with invisible pairs qt=" << qt << " kt=" << kt);
            for (int i = qt * BQ; i < std::min(T, qt * BQ + BQ); i++)
                for (int j = kt * BK; j < std::min(T, kt * BK + BK); j++) cover[(size_t)i * T + j]++;
        }
    }
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            if (visible_brute(i, j, local, P) && cover[(size_t)i * T + j] != 1)
                FAIL("forward covers visible pair (" << i << "," << j << ") " << cover[(size_t)i * T + j] << " times");

    // dK / dV: key tiles -> query tiles
    std::fill(cover.begin(), cover.end(), 0);
    for (int kt = 0; kt < nkt; kt++) {
        const int qb = llmc::attn_q_tile_begin(kt, BQ, BK);
        const int qe = llmc::attn_q_tile_end(kt, BQ, BK, T, local, P);
        REQUIRE(qb >= 0);
        REQUIRE(qe <= nqt);
        REQUIRE(qb < qe);
        for (int qt = qb; qt < qe; qt++) {
            if (visible_in_tiles(qt, kt, BQ, BK, T, local, P) == 0)
                FAIL("backward visits a wholly invisible tile kt=" << kt << " qt=" << qt);
            for (int i = qt * BQ; i < std::min(T, qt * BQ + BQ); i++)
                for (int j = kt * BK; j < std::min(T, kt * BK + BK); j++) cover[(size_t)i * T + j]++;
        }
    }
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            if (visible_brute(i, j, local, P) && cover[(size_t)i * T + j] != 1)
                FAIL("backward covers visible pair (" << i << "," << j << ") " << cover[(size_t)i * T + j] << " times");
}

}  // namespace

TEST_CASE("attention tiles: visited tiles cover exactly the visible pairs", "[attention][tiles]") {
    const int Ts[] = {1, 2, 15, 16, 17, 63, 64, 65, 100, 128, 200, 257};
    const int Ps[] = {1, 2, 7, 16, 17, 50, 64, 65, 130, 1000};
    const int tiles[][2] = {{16, 16}, {32, 32}, {64, 64}, {64, 32}, {32, 64}, {128, 64}, {16, 64}};
    for (int T : Ts)
        for (int P : Ps)
            for (auto& bt : tiles) {
                check_shape(T, P, bt[0], bt[1], true);
                if (P == 1) check_shape(T, P, bt[0], bt[1], false);  // global ignores P
            }
}

TEST_CASE("attention tiles: a local head skips the key tiles outside its window", "[attention][tiles]") {
    // T=2048, P=50, 64x64 tiles: each query tile visits at most 2 key tiles (3 when the window
    // straddles), a global head up to 32.
    const int T = 2048, P = 50, BQ = 64, BK = 64;
    int local_tiles = 0, global_tiles = 0;
    for (int qt = 0; qt < T / BQ; qt++) {
        const int nl = llmc::attn_kv_tile_end(qt, BQ, BK, T) - llmc::attn_kv_tile_begin(qt, BQ, BK, true, P);
        const int ng = llmc::attn_kv_tile_end(qt, BQ, BK, T) - llmc::attn_kv_tile_begin(qt, BQ, BK, false, P);
        REQUIRE(nl <= 3);
        REQUIRE(ng == qt + 1);
        local_tiles += nl;
        global_tiles += ng;
    }
    REQUIRE(local_tiles == 1 + 2 * 31);
    REQUIRE(global_tiles == 32 * 33 / 2);
    // P >= T: a local head visits exactly the global head's tiles
    for (int qt = 0; qt < T / BQ; qt++)
        REQUIRE(llmc::attn_kv_tile_begin(qt, BQ, BK, true, T) == llmc::attn_kv_tile_begin(qt, BQ, BK, false, T));
}

TEST_CASE("attention tiles: the unmasked key tiles of a query tile, every T and P, by enumeration",
          "[attention][tiles]") {
    // A visited tile runs unmasked exactly when every pair in it is visible and inside [0, T) (from
    // visible_brute row by row, not from attn_tile_needs_mask), for every window P from 1 to past three tiles,
    // every T up to four tiles, the tile shapes the kernels use, and windows ending on tile edges.
    const int tiles[][2] = {{64, 64}, {64, 32}, {32, 64}, {16, 64}};
    for (auto& bt : tiles) {
        const int BQ = bt[0], BK = bt[1];
        for (bool local : {true, false})
            for (int P = 1; P <= (local ? 3 * BK + 5 : 1); P++)
                for (int T = 1; T <= 4 * std::max(BQ, BK) + 3; T++)
                    for (int qt = 0; qt * BQ < T; qt++) {
                        const int kb = llmc::attn_kv_tile_begin(qt, BQ, BK, local, P);
                        const int ke = llmc::attn_kv_tile_end(qt, BQ, BK, T);
                        const int ub = llmc::attn_kv_tile_unmasked_begin(qt, BQ, BK, local, P);
                        const int ue = llmc::attn_kv_tile_unmasked_end(qt, BQ, BK, T, local, P);
                        for (int kt = kb; kt < ke; kt++) {
                            // a row's visible keys are one interval (visible_brute), so its two
                            // end keys in the tile decide the row
                            bool all = qt * BQ + BQ <= T && kt * BK + BK <= T;
                            for (int i = qt * BQ; all && i < qt * BQ + BQ; i++)
                                all =
                                    visible_brute(i, kt * BK, local, P) && visible_brute(i, kt * BK + BK - 1, local, P);
                            if (all != (ub <= kt && kt < ue))
                                FAIL("BQ " << BQ << " BK " << BK << (local ? " local" : " global") << " P " << P
                                           << " T " << T << " qt " << qt << " kt " << kt << ": all visible " << all
                                           << ", unmasked range [" << ub << ", " << ue << ")");
                        }
                    }
    }
}

TEST_CASE("attention tiles: the near/far split of a row and of a tile, by enumeration", "[attention][tiles]") {
    // near: i - j < N. A row has a far key when one of its visible keys is at distance >= N; a tile
    // (rows r0..r1, keys k0..k1, every pair) is all near (1), all far (-1) or mixed (0).
    for (int N : {1, 2, 7, 16, 64, 65, 200})
        for (int P : {1, 5, 64, 300})
            for (bool local : {true, false})
                for (int i = 0; i < 150; i++) {
                    bool far = false;
                    for (int j = 0; j <= i; j++) far |= llmc::attn_visible(i, j, local, P) && i - j >= N;
                    INFO("N " << N << " P " << P << " local " << local << " i " << i);
                    REQUIRE(llmc::attn_row_has_far(i, local, P, N) == far);
                }
    for (int N : {1, 3, 16, 50, 64, 79, 80, 130})
        for (int r0 = 0; r0 < 200; r0 += 16)
            for (int k0 = 0; k0 < 200; k0 += 64) {
                bool any_near = false, any_far = false;
                for (int i = r0; i <= r0 + 15; i++)
                    for (int j = k0; j <= k0 + 63; j++) (i - j < N ? any_near : any_far) = true;
                const int want = any_near && any_far ? 0 : any_near ? 1 : -1;
                INFO("N " << N << " r0 " << r0 << " k0 " << k0);
                REQUIRE(llmc::attn_tile_near_kind(r0, r0 + 15, k0, k0 + 63, N) == want);
            }
}

TEST_CASE("attention tiles: a warp's visible 16-key pairs and a thread's score bits, by enumeration",
          "[attention][tiles]") {
    // The FA2-class forward's masked tiles (llmc/cuda/attention_ls_fa2.cuh): a warp owns rows r0 ..
    // r0+15 of a 64-key tile at k0, a thread (c = 0..3) the keys k0 + 2c + 8nb + e of its rows. Every
    // window P from 1 to past two tiles, T up to three tiles and a few rows past, r0 on every 16-row
    // step and k0 on every key tile a query tile visits, plus offsets that no query tile visits.
    for (bool local : {true, false})
        for (int P = 1; P <= (local ? 140 : 1); P++)
            for (int T : {1, 15, 16, 17, 63, 64, 65, 100, 128, 129, 191, 192, 193})
                for (int r0 = 0; r0 < T + 16; r0 += 16)
                    for (int k0 = -64; k0 <= r0 + 16; k0 += 64) {
                        unsigned want = 0;
                        for (int np = 0; np < 4; np++)
                            for (int i = r0; i < std::min(r0 + 16, T); i++)
                                for (int j = k0 + 16 * np; j < k0 + 16 * np + 16; j++)
                                    if (j >= 0 && visible_brute(i, j, local, P)) want |= 1u << np;
                        INFO("local " << local << " P " << P << " T " << T << " r0 " << r0 << " k0 " << k0);
                        // the forward's derivation: pair np is visible when some lane of the warp has
                        // one of its bits 4np .. 4np+3 (either row) set; checked against `want` below
                        unsigned from_bits = 0;
                        for (int i = r0; i < r0 + 16; i++)
                            for (int c = 0; c < 4; c++) {
                                const int kc = k0 + 2 * c;
                                const int lo =
                                    local ? llmc::attn_key_lo(i, true, P) : llmc::attn_key_lo(i, true, T + 64);
                                const unsigned bits = llmc::attn_thread_score_bits(lo - kc, (i < T ? i : -1) - kc);
                                for (int np = 0; np < 4; np++)
                                    if (bits & llmc::attn_pair_bits(np)) from_bits |= 1u << np;
                                for (int q = 0; q < 16; q++) {
                                    const int j = kc + 8 * (q / 2) + q % 2;
                                    const bool vis = i < T && j >= 0 && visible_brute(i, j, local, P);
                                    if (((bits >> q) & 1u) != (vis ? 1u : 0u))
                                        FAIL("score bit " << q << " of row " << i << " c " << c << ": key " << j);
                                }
                            }
                        REQUIRE(from_bits == want);
                    }
    // the dK/dV backward's side (llmc/cuda/attention_ls_fa2_bwd.cuh): a thread holds keys j (its rows)
    // and the queries q0 + 2c + 8nb + e of a query tile of 64 (32 at hd 128); key j is seen by the
    // queries [j, min(T-1, j+P-1)] ([j, T-1] for a global head)
    for (bool local : {true, false})
        for (int P = 1; P <= (local ? 140 : 1); P++)
            for (int T : {1, 17, 63, 64, 65, 128, 129, 193})
                for (int BQ : {32, 64})
                    for (int q0 = 0; q0 < T; q0 += BQ)
                        for (int j = std::max(0, q0 - P - 2); j < std::min(T + 2, q0 + BQ + 2); j++)
                            for (int c = 0; c < 4; c++) {
                                const int qc = q0 + 2 * c, last = local ? std::min(T - 1, j + P - 1) : T - 1;
                                const unsigned bits = llmc::attn_thread_score_bits(j - qc, last - qc);
                                for (int q = 0; q < 2 * (BQ / 8); q++) {
                                    const int i = qc + 8 * (q / 2) + q % 2;
                                    const bool vis = i < T && j < T && visible_brute(i, j, local, P);
                                    if (((bits >> q) & 1u) != (vis ? 1u : 0u))
                                        FAIL("dK/dV bit " << q << ": key " << j << " query " << i << " local " << local
                                                          << " P " << P << " T " << T);
                                }
                            }
    // any range, including ones far outside the 16 offsets 0, 1, 8, 9, ..., 56, 57
    for (int lo = -80; lo <= 80; lo++)
        for (int hi = -80; hi <= 80; hi++) {
            unsigned want = 0;
            for (int q = 0; q < 16; q++) {
                const int off = 8 * (q / 2) + q % 2;
                if (off >= lo && off <= hi) want |= 1u << q;
            }
            INFO("lo " << lo << " hi " << hi);
            REQUIRE(llmc::attn_thread_score_bits(lo, hi) == want);
            // the kernels' tables: the same bits from two clamped indices
            const int li = llmc::attn_score_bits_lo_index(lo), hi_i = llmc::attn_score_bits_hi_index(hi);
            REQUIRE(li >= 0);
            REQUIRE(li < llmc::kAttnScoreBitsN);
            REQUIRE(hi_i >= 0);
            REQUIRE(hi_i < llmc::kAttnScoreBitsN);
            REQUIRE((llmc::attn_score_bits_at_least(li) & llmc::attn_score_bits_at_most(hi_i)) == want);
        }
}

TEST_CASE("attention tiles: the dK/dV warp's 16-query pairs from its score bits, by enumeration",
          "[attention][tiles]") {
    // The FA2-class dK/dV backward (llmc/cuda/attention_ls_fa2_bwd.cuh) skips a masked tile's
    // 16-query pair np when no thread of the warp (keys kw .. kw+15; thread c: queries q0 + 2c + 8nb
    // + e) has a score bit of that pair set (bits 4np .. 4np+3 of either key's half: the OR over the
    // warp). That must be exactly the pairs in which a query < T sees a key < T. (The forward and
    // dQ side, rows over keys, is the first case above.) Every window P from 1 to past two tiles, T
    // up to three tiles and a few keys past, warps on every 16-key step, query tiles at every 32
    // offset (hd 128's are 32 queries: pairs 0 and 1), and some no loop visits.
    for (bool local : {true, false})
        for (int P = 1; P <= (local ? 140 : 1); P++)
            for (int T : {1, 15, 16, 17, 63, 64, 65, 100, 128, 129, 191, 192, 193})
                for (int kw = 0; kw < T + 16; kw += 16)
                    for (int q0 = -64; q0 <= T + 64; q0 += 32) {
                        unsigned want = 0, from_bits = 0;
                        for (int np = 0; np < 4; np++)
                            for (int j = kw; j < std::min(kw + 16, T); j++)
                                for (int i = std::max(0, q0 + 16 * np); i < std::min(q0 + 16 * np + 16, T); i++)
                                    if (visible_brute(i, j, local, P)) want |= 1u << np;
                        for (int j = kw; j < kw + 16; j++)
                            for (int c = 0; c < 4; c++) {
                                const int qc = q0 + 2 * c, last = local ? std::min(T - 1, j + P - 1) : T - 1;
                                const unsigned bits = llmc::attn_thread_score_bits(j - qc, last - qc);
                                for (int np = 0; np < 4; np++)
                                    if (bits & llmc::attn_pair_bits(np)) from_bits |= 1u << np;
                            }
                        INFO("local " << local << " P " << P << " T " << T << " keys " << kw << " tile " << q0);
                        REQUIRE(from_bits == want);
                    }
}

// ------------------------------------------------------------------------------------------------
// Per-element math shared by the kernels (llmc/core/attention_tiles.h), checked on the CPU.
// ------------------------------------------------------------------------------------------------
#include <cmath>
#include <limits>
#include <random>

TEST_CASE("attention math: soft-cap value and derivative", "[attention][math]") {
    float t = 7.0f;
    REQUIRE(llmc::attn_softcap(3.5f, 0.0f, t) == 3.5f);  // off: identity, t = 0
    REQUIRE(t == 0.0f);
    for (float cap : {0.5f, 2.0f, 30.0f})
        for (float s : {-40.0f, -3.0f, -0.1f, 0.0f, 0.7f, 5.0f, 100.0f}) {
            const float sc = llmc::attn_softcap(s, cap, t);
            REQUIRE(sc == Approx(cap * std::tanh(s / cap)).margin(1e-6));
            REQUIRE(std::fabs(sc) <= cap);
            // d s'/d s = 1 - t^2 against a central difference in double
            const double h = 1e-4, fd = (cap * std::tanh((s + h) / cap) - cap * std::tanh((s - h) / cap)) / (2 * h);
            REQUIRE(1.0 - (double)t * t == Approx(fd).margin(1e-5));
        }
}

// Online softmax over tiles (the kernels' m, l, acc recurrence) against a direct computation,
// including leading tiles with nothing visible (a local head's first key tile) and ragged masks.
TEST_CASE("attention math: online rescale matches the direct softmax, no NaN", "[attention][math]") {
    std::mt19937 gen(7);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    const float NEG = -std::numeric_limits<float>::infinity();
    for (int trial = 0; trial < 200; trial++) {
        const int ntiles = 1 + trial % 5, tile = 1 + trial % 7;
        std::vector<float> sc((size_t)ntiles * tile), v(sc.size());
        const int first_vis = (trial % 3) * tile / 2;  // leading invisible keys (may cover whole tiles)
        for (size_t j = 0; j < sc.size(); j++) {
            sc[j] = (int)j < first_vis || (trial % 4 == 0 && j % 3 == 1) ? NEG : nd(gen);
            v[j] = nd(gen);
        }
        bool any = false;
        for (float x : sc) any |= x != NEG;
        if (!any) sc.back() = nd(gen);  // a real row always sees its own key
        // direct
        double mx = -INFINITY;
        for (float x : sc) mx = std::max(mx, (double)x);
        double sum = 0, acc = 0;
        for (size_t j = 0; j < sc.size(); j++)
            if (sc[j] != NEG) {
                sum += std::exp(sc[j] - mx);
                acc += std::exp(sc[j] - mx) * v[j];
            }
        // online, one tile at a time
        float m = NEG, l = 0.0f, o = 0.0f;
        for (int t = 0; t < ntiles; t++) {
            float tmax = NEG;
            for (int k = 0; k < tile; k++) tmax = std::max(tmax, sc[(size_t)t * tile + k]);
            float m_use;
            const float alpha = llmc::attn_online_rescale(m, tmax, m_use);
            REQUIRE(std::isfinite(alpha));
            REQUIRE(std::isfinite(m_use));
            l *= alpha;
            o *= alpha;
            for (int k = 0; k < tile; k++) {
                const float p = std::exp(sc[(size_t)t * tile + k] - m_use);  // 0 for -inf
                REQUIRE(std::isfinite(p));
                l += p;
                o += p * v[(size_t)t * tile + k];
            }
            REQUIRE(std::isfinite(l));
            REQUIRE(std::isfinite(o));
        }
        REQUIRE(m + std::log(l) == Approx(mx + std::log(sum)).epsilon(1e-5).margin(1e-5));
        REQUIRE(o / l == Approx(acc / sum).epsilon(1e-4).margin(1e-5));
    }
    // nothing visible yet: m stays -inf, alpha = 0, m_use = 0 (exp(-inf - 0) = 0, never -inf + inf)
    float m = NEG, m_use = 1.0f;
    REQUIRE(llmc::attn_online_rescale(m, NEG, m_use) == 0.0f);
    REQUIRE(m == NEG);
    REQUIRE(m_use == 0.0f);
    // first visible tile: alpha = 0 (the empty state is discarded), m = tile max
    REQUIRE(llmc::attn_online_rescale(m, 2.5f, m_use) == 0.0f);
    REQUIRE(m == 2.5f);
    REQUIRE(m_use == 2.5f);
    // a later tile with nothing visible keeps the state: alpha = 1
    REQUIRE(llmc::attn_online_rescale(m, NEG, m_use) == 1.0f);
    REQUIRE(m == 2.5f);
}

// attn_prob_grad's ds is dL/d(q.k) for L = dO . sum_j p_j v_j (one row, scalar v, hd = 1): checked
// against central differences of the whole forward in double, with and without the soft-cap.
TEST_CASE("attention math: backward p and ds against finite differences", "[attention][math]") {
    std::mt19937 gen(11);
    std::normal_distribution<double> nd(0.0, 1.5);
    for (float cap : {0.0f, 2.0f})
        for (int trial = 0; trial < 20; trial++) {
            const int n = 1 + trial % 9;
            const float scale = 0.3f;
            std::vector<double> qk(n), v(n);  // qk_j = q.k_j (before the scale)
            for (int j = 0; j < n; j++) {
                qk[j] = (double)(float)nd(gen) * 3.0;
                v[j] = (double)(float)nd(gen);
            }
            const double dO = (double)(float)nd(gen);
            auto forward = [&](const std::vector<double>& x, double* lse_out, double* o_out) {
                std::vector<double> s(n);
                double mx = -INFINITY;
                for (int j = 0; j < n; j++) {
                    const double raw = x[j] * scale;
                    s[j] = cap > 0 ? cap * std::tanh(raw / cap) : raw;
                    mx = std::max(mx, s[j]);
                }
                double sum = 0, o = 0;
                for (int j = 0; j < n; j++) sum += std::exp(s[j] - mx);
                for (int j = 0; j < n; j++) o += std::exp(s[j] - mx) / sum * v[j];
                *lse_out = mx + std::log(sum);
                *o_out = o;
                return dO * o;  // the loss
            };
            double lse, o;
            forward(qk, &lse, &o);
            const float D = (float)(dO * o);
            double psum = 0;
            for (int j = 0; j < n; j++) {
                float ds;
                const float p = llmc::attn_prob_grad((float)(qk[j] * scale), (float)(dO * v[j]), (float)lse, D, cap,
                                                     scale, true, ds);
                psum += p;
                std::vector<double> xp = qk, xm = qk;
                const double h = 1e-4;
                xp[j] += h;
                xm[j] -= h;
                double tmp;
                const double fd = (forward(xp, &tmp, &tmp) - forward(xm, &tmp, &tmp)) / (2 * h);
                INFO("cap " << cap << " n " << n << " j " << j);
                REQUIRE(ds == Approx(fd).epsilon(1e-3).margin(2e-5));
                float ds_inv = 5.0f;
                REQUIRE(llmc::attn_prob_grad((float)(qk[j] * scale), 1.0f, (float)lse, D, cap, scale, false, ds_inv) ==
                        0.0f);
                REQUIRE(ds_inv == 0.0f);
            }
            REQUIRE(psum == Approx(1.0).epsilon(1e-5));  // p recomputed from lse is the softmax
        }
}
