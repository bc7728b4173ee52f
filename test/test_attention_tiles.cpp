// Tests of the LS-attention tile-range arithmetic (llmc/attention_tiles.h) that the CUDA kernels
// use to skip key tiles outside a local head's window. For many T, P and tile sizes, brute force
// over every (i, j) pair checks that
//   forward / dQ: the key tiles visited by each query tile cover every visible pair exactly once,
//                 and none of them is wholly invisible;
//   dK / dV:      the query tiles visited by each key tile cover every visible pair exactly once,
//                 and none is wholly invisible;
//   tile_needs_mask is false only for tiles whose pairs are all visible and inside [0, T).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "llmc/attention_tiles.h"

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
            if (llmc::attn_visible(i, j, local, P) != visible_brute(i, j, local, P)) FAIL("attn_visible " << i << "," << j);
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
