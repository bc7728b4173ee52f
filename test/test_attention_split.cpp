// Tests of the split tile loops of the FA2-class kernels (llmc/core/attention_split.h), against a
// brute-force enumeration: for every T up to a few tiles, every window P from 1 to past T, both head
// kinds, both loop directions (a query tile over key tiles; a key tile over query tiles) and every
// forced chunk size S, the items of a head are exactly the (outer tile, chunk) pairs whose inner
// tiles meet the outer tile's (a visible pair in the tile pair), each once; an outer tile's chunks
// cut its inner range into disjoint aligned pieces; the item index round-trips; the chosen S splits
// only a kind whose longest inner range exceeds it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/attention_split.h"

namespace {

// The inner tiles outer tile o visits, by brute force over the pairs: the tiles with a visible pair
// (test_attention_tiles.cpp checks that attention_tiles.h's ranges are exactly these).
bool tiles_meet(int qt, int kt, int BQ, int BK, int T, bool local, int P) {
    for (int i = qt * BQ; i < std::min(T, qt * BQ + BQ); i++)
        for (int j = kt * BK; j < std::min(T, kt * BK + BK); j++)
            if (j <= i && (!local || i - j < P)) return true;
    return false;
}

// The enumerations make millions of checks. Each is a plain test first: only a failing one goes
// through Catch2, which evaluates it again (the conditions have no side effects) and reports its
// operands with `where` as the INFO context; a passing one costs no assertion machinery (a REQUIRE and
// an INFO per check were two thirds of the first case's 10 s under ASan + UBSan).
#define REQUIRE_AT(where, ...)    \
    do {                          \
        if (!(__VA_ARGS__)) {     \
            INFO(where);          \
            REQUIRE(__VA_ARGS__); \
        }                         \
    } while (0)

// A geometry and its chunk size S or run length R, as the failure reports name it.
#define GEOM(g, what, n)                                                                                          \
    "T=" << (g).T << " P=" << (g).P << " BQ=" << (g).BQ << " BK=" << (g).BK << ((g).local ? " local" : " global") \
         << ((g).by_key ? " by key" : " by query") << " " what "=" << (n)

void check_split(const llmc::AttnSplitGeom& g, int S) {
#define AT_GEOM GEOM(g, "S", S)
#define AT_ITEM AT_GEOM << " item " << y << " -> outer " << it.outer << " chunk " << it.j
    const int n_outer = g.n_outer(), n_inner = g.n_inner();
    // chunk boundaries: multiples of S from inner tile 0 for a query tile's loop, from the end for a key tile's
    const int z = g.by_key ? (S - n_inner % S) % S : 0;
    std::vector<std::vector<int>> meets(n_outer);
    std::set<std::pair<int, int>> expected;
    for (int o = 0; o < n_outer; o++)
        for (int i = 0; i < n_inner; i++)
            if (g.by_key ? tiles_meet(i, o, g.BQ, g.BK, g.T, g.local, g.P)
                         : tiles_meet(o, i, g.BQ, g.BK, g.T, g.local, g.P)) {
                meets[o].push_back(i);
                expected.insert({o, (i + z) / S});
            }
    const llmc::AttnSplitKind kind = llmc::attn_split_kind(g, S, 1, 1, g.local ? 0 : 1);
    REQUIRE_AT(AT_GEOM, kind.chunk == S);
    REQUIRE_AT(AT_GEOM, kind.items == (int)expected.size());

    std::set<std::pair<int, int>> seen;
    std::set<int> slots;
    std::vector<std::vector<int>> covered(n_outer, std::vector<int>(n_inner, 0));
    int prev_o = -1, prev_j = -1;
    for (int y = 0; y < kind.items; y++) {
        const llmc::AttnSplitItem it = llmc::attn_split_decode(g, y, S);
        REQUIRE_AT(AT_ITEM, expected.count({it.outer, it.j}) == 1);
        const bool first_time = seen.insert({it.outer, it.j}).second;
        REQUIRE_AT(AT_ITEM, first_time);
        REQUIRE_AT(AT_ITEM, llmc::attn_split_item(g, it.outer, it.j, S) == y);
        // chunk-major order; within a chunk query tiles descending, key tiles ascending
        if (it.j == prev_j) {
            REQUIRE_AT(AT_ITEM, (g.by_key ? it.outer == prev_o + 1 : it.outer == prev_o - 1));
        } else {
            REQUIRE_AT(AT_ITEM, it.j > prev_j);
        }
        prev_o = it.outer;
        prev_j = it.j;
        const int ib = meets[it.outer].front(), ie = meets[it.outer].back() + 1;
        REQUIRE_AT(AT_ITEM, it.inner_begin < it.inner_end);
        REQUIRE_AT(AT_ITEM, it.inner_begin >= ib);
        REQUIRE_AT(AT_ITEM, it.inner_end <= ie);
        REQUIRE_AT(AT_ITEM, it.inner_begin >= it.j * S - z);
        REQUIRE_AT(AT_ITEM, it.inner_end <= (it.j + 1) * S - z);
        REQUIRE_AT(AT_ITEM, it.j_first == (ib + z) / S);
        REQUIRE_AT(AT_ITEM, it.chunks == (ie - 1 + z) / S - (ib + z) / S + 1);
        // a split outer tile's chunks each own one partial slot of the head, [0, slots)
        if (it.chunks > 1) {
            const int slot = llmc::attn_split_slot(g, it.outer, it.j, S);
            REQUIRE_AT(AT_ITEM, slot >= 0);
            REQUIRE_AT(AT_ITEM, slot < kind.slots);
            const bool slot_unused = slots.insert(slot).second;
            REQUIRE_AT(AT_ITEM, slot_unused);
        }
        // a global head's loops start (query tile) or end (key tile) at the same tile, so only loops
        // longer than S are cut
        if (!g.local && ie - ib <= S) REQUIRE_AT(AT_ITEM, it.chunks == 1);
        REQUIRE_AT(AT_ITEM, it.j >= it.j_first);
        REQUIRE_AT(AT_ITEM, it.j < it.j_first + it.chunks);
        for (int i = it.inner_begin; i < it.inner_end; i++) covered[it.outer][i]++;
    }
    REQUIRE_AT(AT_GEOM, (int)slots.size() == kind.slots);  // every slot used
    // every outer tile's inner tiles covered exactly once, nothing else
    for (int o = 0; o < n_outer; o++)
        for (int i = 0; i < n_inner; i++) {
            const bool in = std::find(meets[o].begin(), meets[o].end(), i) != meets[o].end();
            REQUIRE_AT(AT_GEOM << " outer " << o << " inner " << i, covered[o][i] == (in ? 1 : 0));
        }
#undef AT_ITEM
#undef AT_GEOM
}

}  // namespace

TEST_CASE("split items cover every outer tile's inner range once, in chunk order", "[attention][split]") {
    for (int BQ : {4, 8})
        for (int BK : {4, 8}) {
            if (BQ != BK && BQ != 8) continue;  // BQ 8 / BK 4 too (the arithmetic allows unequal tiles)
            for (int T = 1; T <= 7 * BK + 1; T++)
                for (int P = 1; P <= T + BK + 1; P += (P < 2 * BK + 2 ? 1 : 3))
                    for (bool local : {true, false})
                        for (bool by_key : {false, true}) {
                            const llmc::AttnSplitGeom g{T, BQ, BK, P, local, by_key};
                            for (int S = 1; S <= g.n_inner() + 1; S++) check_split(g, S);
                        }
        }
}

TEST_CASE("the kernels' tile sizes: ragged T, windows ending on a tile boundary", "[attention][split]") {
    for (int BQ : {64, 32})  // the dK/dV kernel's query tiles are 32 rows at hd 128
        for (int T : {1, 63, 64, 65, 127, 128, 129, 320, 321, 640, 700})
            for (int P : {1, 2, 63, 64, 65, 128, 129, 191, 192, 700})
                for (bool local : {true, false})
                    for (bool by_key : {false, true})
                        for (int S : {1, 2, 3, 4, 5, 11})
                            check_split(llmc::AttnSplitGeom{T, BQ, 64, P, local, by_key}, S);
}

TEST_CASE("the chosen chunk splits only a kind whose longest inner range exceeds it", "[attention][split]") {
    struct Shape {
        int B, T, NH, G, P;
    };
    const Shape shapes[] = {{8, 2048, 6, 1, 50},  {16, 2048, 6, 1, 50}, {16, 1024, 12, 12, 1024},
                            {1, 256, 4, 2, 32},   {1, 4096, 4, 4, 64},  {2, 640, 2, 1, 300},
                            {64, 2048, 6, 1, 50}, {1, 64, 1, 1, 1},     {4, 8192, 8, 0, 2000}};
    for (const Shape& s : shapes)
        for (bool local : {true, false})
            for (bool by_key : {false, true}) {
                INFO("B=" << s.B << " T=" << s.T << " NH=" << s.NH << " G=" << s.G << " P=" << s.P
                          << (local ? " local" : " global") << (by_key ? " by key" : " by query"));
                const llmc::AttnSplitGeom g{s.T, 64, 64, s.P, local, by_key};
                const llmc::AttnSplitKind k = llmc::attn_split_kind(g, 0, s.B, s.NH, s.G);
                const int heads = local ? s.NH - s.G : s.G;
                if (heads == 0) {
                    REQUIRE(k.items == 0);
                    continue;
                }
                int longest = 0;
                for (int o = 0; o < g.n_outer(); o++) longest = std::max(longest, g.inner_end(o) - g.inner_begin(o));
                if (k.chunk >= g.n_inner()) {  // not split: one item per outer tile
                    REQUIRE(k.items == g.n_outer());
                } else {
                    REQUIRE(k.chunk >= llmc::kAttnSplitMinTiles);
                    REQUIRE(longest > k.chunk);
                    REQUIRE(k.items > g.n_outer());
                }
                check_split(g, k.chunk);
            }
    // the paper model at B 8: the global head's 32-tile loops are cut, the local heads' (2 tiles) not
    const llmc::AttnSplitKind g8 =
        llmc::attn_split_kind(llmc::AttnSplitGeom{2048, 64, 64, 50, false, false}, 0, 8, 6, 1);
    const llmc::AttnSplitKind l8 =
        llmc::attn_split_kind(llmc::AttnSplitGeom{2048, 64, 64, 50, true, false}, 0, 8, 6, 1);
    REQUIRE(g8.chunk == 4);    // 6744 tiles / (528 x 4) -> 4 (the minimum)
    REQUIRE(g8.items == 144);  // chunks of 32, 28, ..., 4 query tiles
    REQUIRE(l8.chunk == 32);
    REQUIRE(l8.items == 32);
}

namespace {

// Runs of outer tiles (attn_split_kind's run, attn_run_decode / attn_run_hi) for one geometry and a
// forced run length R, against the brute-force inner ranges: runs only where no outer tile's range
// starts before the previous one's last tile (the kernels keep two inner tiles), and then the runs
// cover every outer tile once, consecutive and ascending within a run, query tiles' runs from the end.
void check_runs(const llmc::AttnSplitGeom& g, int R) {
#define AT_GEOM GEOM(g, "R", R)
#define AT_RUN AT_GEOM << " run " << y << ": outer tiles [" << it.outer << ", " << end << ")"
    const int n_outer = g.n_outer(), n_inner = g.n_inner();
    std::vector<int> lo(n_outer, n_inner), hi(n_outer, -1);  // brute-force inner range [lo, hi]
    for (int o = 0; o < n_outer; o++)
        for (int i = 0; i < n_inner; i++)
            if (g.by_key ? tiles_meet(i, o, g.BQ, g.BK, g.T, g.local, g.P)
                         : tiles_meet(o, i, g.BQ, g.BK, g.T, g.local, g.P)) {
                lo[o] = std::min(lo[o], i);
                hi[o] = std::max(hi[o], i);
            }
    bool walkable = true;  // along the walk the inner tiles never decrease, two outer tiles share <= 1
    for (int o = 0; o + 1 < n_outer; o++) walkable &= lo[o + 1] >= hi[o] && lo[o + 1] >= lo[o];
    REQUIRE_AT(AT_GEOM, llmc::attn_run_allowed(g) == walkable);

    // not split (one chunk of all inner tiles), runs forced to R
    const llmc::AttnSplitKind k = llmc::attn_split_kind(g, n_inner, 1, 1, g.local ? 0 : 1, R);
    REQUIRE_AT(AT_GEOM, k.slots == 0);
    if (!walkable || R == 1) {
        REQUIRE_AT(AT_GEOM, k.run == 1);
        REQUIRE_AT(AT_GEOM, k.items == n_outer);
        return;
    }
    REQUIRE_AT(AT_GEOM, k.run == R);
    REQUIRE_AT(AT_GEOM, k.items == (n_outer + R - 1) / R);
    std::vector<int> seen(n_outer, 0);
    for (int y = 0; y < k.items; y++) {
        const llmc::AttnSplitItem it = llmc::attn_run_decode(g, y, R);
        const int end = llmc::attn_run_hi(g, y, R);
        REQUIRE_AT(AT_RUN, it.outer == llmc::attn_run_lo(g, y, R));
        REQUIRE_AT(AT_RUN, it.outer < end);
        REQUIRE_AT(AT_RUN, end - it.outer <= R);
        // full runs, the short one at the end of the walk order (the first query tiles, the last key tiles)
        if (g.by_key ? end < n_outer : it.outer > 0) REQUIRE_AT(AT_RUN, end - it.outer == R);
        REQUIRE_AT(AT_RUN, it.inner_begin == lo[it.outer]);
        REQUIRE_AT(AT_RUN, it.inner_end == hi[it.outer] + 1);
        REQUIRE_AT(AT_RUN, it.chunks == 1);
        REQUIRE_AT(AT_RUN, it.j == 0);
        REQUIRE_AT(AT_RUN, it.j_first == 0);
        for (int o = it.outer; o < end; o++) {
            seen[o]++;
            REQUIRE_AT(AT_RUN, g.inner_begin(o) == lo[o]);
            REQUIRE_AT(AT_RUN, g.inner_end(o) == hi[o] + 1);
        }
        // query tiles' runs from the end (the unsplit grid's longest-first order), key tiles' from the start
        if (y > 0) {
            const llmc::AttnSplitItem prev = llmc::attn_run_decode(g, y - 1, R);
            REQUIRE_AT(AT_RUN, (g.by_key ? it.outer == llmc::attn_run_hi(g, y - 1, R) : end == prev.outer));
        }
    }
    for (int o = 0; o < n_outer; o++) REQUIRE_AT(AT_GEOM << " outer " << o, seen[o] == 1);
#undef AT_RUN
#undef AT_GEOM
}

}  // namespace

TEST_CASE("runs of outer tiles cover every outer tile once, only where the walk keeps two inner tiles",
          "[attention][split]") {
    for (int BQ : {4, 8})
        for (int BK : {4, 8}) {
            if (BQ != BK && BQ != 8) continue;
            for (int T = 1; T <= 7 * BK + 1; T++)
                for (int P = 1; P <= T + BK + 1; P += (P < 2 * BK + 2 ? 1 : 3))
                    for (bool local : {true, false})
                        for (bool by_key : {false, true}) {
                            const llmc::AttnSplitGeom g{T, BQ, BK, P, local, by_key};
                            for (int R = 1; R <= g.n_outer() + 1; R++) check_runs(g, R);
                        }
        }
    // the kernels' tiles: a local head takes runs up to P = 65 (two 64-key tiles), never beyond
    for (int T : {64, 65, 200, 640, 2048})
        for (int P : {1, 50, 64, 65, 66, 128})
            for (bool by_key : {false, true}) {
                check_runs(llmc::AttnSplitGeom{T, 64, 64, P, true, by_key}, 4);
                check_runs(llmc::AttnSplitGeom{T, 64, 64, P, false, by_key}, 4);
                if (T >= 200)  // (a shorter sequence's ranges have too few tiles to overlap by two)
                    REQUIRE(llmc::attn_run_allowed(llmc::AttnSplitGeom{T, 64, 64, P, true, by_key}) == (P <= 65));
            }
}

TEST_CASE("the chosen runs: kAttnRunTiles at most, a wave of blocks at least, none when split", "[attention][split]") {
    auto run_of = [](int B, bool local, bool by_key, int S = 0) {
        return llmc::attn_split_kind(llmc::AttnSplitGeom{2048, 64, 64, 50, local, by_key}, S, B, 6, 1, 0);
    };
    for (bool by_key : {false, true}) {
        INFO((by_key ? "by key" : "by query"));
        // the paper model's local heads: 5 x 32 outer tiles a batch row; 528 resident blocks a wave
        REQUIRE(run_of(16, true, by_key).run == 4);  // 2560 blocks -> 640
        REQUIRE(run_of(16, true, by_key).items == 8);
        REQUIRE(run_of(8, true, by_key).run == 2);  // 1280 -> 640
        REQUIRE(run_of(8, true, by_key).items == 16);
        REQUIRE(run_of(4, true, by_key).run == 1);  // 640: runs of 2 would leave 320
        REQUIRE(run_of(64, true, by_key).run == 4);
        // the global head: split (B 8), or not split but its ranges grow with the outer tile
        REQUIRE(run_of(8, false, by_key).run == 1);
        REQUIRE(run_of(64, false, by_key).run == 1);
        // a forced split of the local heads' loops (chunks of 1 tile) takes no runs
        REQUIRE(run_of(16, true, by_key, 1).run == 1);
    }
    // run = 1 (the default): none
    REQUIRE(llmc::attn_split_kind(llmc::AttnSplitGeom{2048, 64, 64, 50, true, true}, 0, 16, 6, 1).run == 1);
}

#undef GEOM
#undef REQUIRE_AT
