// Split of long tile loops over several blocks (the FA2-class forward and backward,
// llmc/cuda/attention_ls_fa2.cuh, attention_ls_fa2_bwd.cuh), host and device. Kept apart from the
// kernels so it can be unit-tested on the CPU (test/test_attention_split.cpp). Design:
// docs/attention_kernel.md "Split tile loops".
//
// Why: a block loops over the tiles one of its rows' tiles meets - a query tile over key tiles
// (forward, dQ) or a key tile over query tiles (dK/dV) - and a global head's last query tile (first
// key tile) walks all of them in sequence (T 2048: 32), so at a small batch the launch waits for a
// few long blocks after the rest of the grid has finished. The inner tiles are cut into aligned
// chunks of S tiles, chunk j = inner tiles [j S - z, (j+1) S - z) within [0, n_inner), z the shift
// (0 for a query tile's loop, whose ranges all start at key tile 0 for a global head; for a key
// tile's loop, whose ranges all end at the last query tile, z aligns the chunks to that end: only
// a global head's ranges of at most S tiles are never cut); an outer tile o visits the chunks of its inner range
// [ib, ie) (llmc/core/attention_tiles.h), one block per (outer tile, chunk): an item. An outer tile with one chunk runs as before; the blocks of an
// outer tile with several chunks leave fp32 partials and the last of them to arrive merges them in
// chunk order (llmc/cuda/grid_arrival.cuh), so the result does not depend on which block ran last.
//
// Items of one head, ordered chunk-major (j ascending), within a chunk query tiles descending and key
// tiles ascending (a global head's longest first): chunk j is visited by the outer tiles that meet
// one of its inner tiles. Heads of one kind (local / global) have the same items. A kind whose longest
// inner range fits in one chunk is not split (one chunk of all inner tiles: items = the outer
// tiles, longest first, as the unsplit grid).
// Blocks of a launch: the global heads' items first (item-major: item y of every (b, head) before
// item y + 1), then the local heads'.
#pragma once
#include "llmc/core/attention_tiles.h"

namespace llmc {

// The chunk size is chosen from the shape alone (the same bits on every GPU): a chunk holds at most
// 1 / kAttnSplitChainShare of the inner tiles an average resident block walks when the launch's
// tiles are spread over kAttnSplitResidentBlocks blocks (an H100 SXM: 132 SMs x 4 blocks of the
// hd-32 forward), and at least kAttnSplitMinTiles (the merge costs about one tile's traffic).
constexpr int kAttnSplitMinTiles = 4;
constexpr long long kAttnSplitResidentBlocks = 132 * 4;
constexpr long long kAttnSplitChainShare = 4;

// The tile loop of one kernel: query tiles of BQ rows, key tiles of BK; by_key: a block owns a key
// tile and loops over query tiles (dK/dV), else a query tile looping over key tiles (forward, dQ).
struct AttnSplitGeom {
    int T, BQ, BK, P;
    bool local, by_key;
    LLMC_HD int n_query_tiles() const { return (T + BQ - 1) / BQ; }
    LLMC_HD int n_key_tiles() const { return (T + BK - 1) / BK; }
    LLMC_HD int n_outer() const { return by_key ? n_key_tiles() : n_query_tiles(); }
    LLMC_HD int n_inner() const { return by_key ? n_query_tiles() : n_key_tiles(); }
    // inner tiles [inner_begin(o), inner_end(o)) of outer tile o
    LLMC_HD int inner_begin(int o) const {
        return by_key ? attn_q_tile_begin(o, BQ, BK) : attn_kv_tile_begin(o, BQ, BK, local, P);
    }
    LLMC_HD int inner_end(int o) const {
        return by_key ? attn_q_tile_end(o, BQ, BK, T, local, P) : attn_kv_tile_end(o, BQ, BK, T);
    }
    // outer tiles [outer_begin(i0), outer_end(i1)) that meet some inner tile of [i0, i1]
    LLMC_HD int outer_begin(int i0) const {
        return by_key ? attn_kv_tile_begin(i0, BQ, BK, local, P) : attn_q_tile_begin(i0, BQ, BK);
    }
    LLMC_HD int outer_end(int i1) const {
        return by_key ? attn_kv_tile_end(i1, BQ, BK, T) : attn_q_tile_end(i1, BQ, BK, T, local, P);
    }
};

// One kind of head (local or global): chunk size S in inner tiles (>= n_inner: not split), items per head.
struct AttnSplitKind {
    int chunk = 1, items = 0;
    int slots = 0;  // partials per head: the chunks of its split outer tiles
    int run = 1;    // outer tiles per item (> 1 only for a kind that is not split: attn_run_allowed)
};

// The shift z of the chunk boundaries (above): chunk of inner tile i = (i + z) / S.
LLMC_HD inline int attn_split_shift(const AttnSplitGeom& g, int S) { return g.by_key ? (S - g.n_inner() % S) % S : 0; }
// Chunk j's inner tiles [attn_split_inner_lo, attn_split_inner_hi).
LLMC_HD inline int attn_split_inner_lo(const AttnSplitGeom& g, int j, int S) {
    return attn_imax(0, j * S - attn_split_shift(g, S));
}
LLMC_HD inline int attn_split_inner_hi(const AttnSplitGeom& g, int j, int S) {
    return attn_imin(g.n_inner(), (j + 1) * S - attn_split_shift(g, S));
}
LLMC_HD inline int attn_split_chunk_of(const AttnSplitGeom& g, int i, int S) {
    return (i + attn_split_shift(g, S)) / S;
}
// The chunks outer tile o visits: [chunk of its first inner tile, that of its last].
LLMC_HD inline int attn_split_outer_chunks(const AttnSplitGeom& g, int o, int S) {
    return attn_split_chunk_of(g, g.inner_end(o) - 1, S) - attn_split_chunk_of(g, g.inner_begin(o), S) + 1;
}

// Outer tiles [begin, end) that visit chunk j.
LLMC_HD inline int attn_split_outer_begin(const AttnSplitGeom& g, int j, int S) {
    return g.outer_begin(attn_split_inner_lo(g, j, S));
}
LLMC_HD inline int attn_split_outer_end(const AttnSplitGeom& g, int j, int S) {
    return g.outer_end(attn_split_inner_hi(g, j, S) - 1);
}
LLMC_HD inline int attn_split_chunk_items(const AttnSplitGeom& g, int j, int S) {
    return attn_split_outer_end(g, j, S) - attn_split_outer_begin(g, j, S);
}
// Chunks of one head: ceil((n_inner + z) / S).
LLMC_HD inline int attn_split_chunks(const AttnSplitGeom& g, int S) {
    return (g.n_inner() + attn_split_shift(g, S) + S - 1) / S;
}

// Outer tile of the i-th item of chunk j (query tiles from the end, key tiles from the start), and back.
LLMC_HD inline int attn_split_outer_at(const AttnSplitGeom& g, int j, int S, int i) {
    return g.by_key ? attn_split_outer_begin(g, j, S) + i : attn_split_outer_end(g, j, S) - 1 - i;
}
LLMC_HD inline int attn_split_index_of(const AttnSplitGeom& g, int j, int S, int o) {
    return g.by_key ? o - attn_split_outer_begin(g, j, S) : attn_split_outer_end(g, j, S) - 1 - o;
}

// Item index (within its head) of (outer tile o, chunk j); o must visit chunk j.
LLMC_HD inline int attn_split_item(const AttnSplitGeom& g, int o, int j, int S) {
    int y = 0;
    for (int jj = 0; jj < j; jj++) y += attn_split_chunk_items(g, jj, S);
    return y + attn_split_index_of(g, j, S, o);
}

// What item y of a head computes: outer tile o, chunk j, its inner tiles [inner_begin, inner_end)
// and the outer tile's chunks [j_first, j_first + chunks). y in [0, items).
struct AttnSplitItem {
    int outer, j, inner_begin, inner_end, j_first, chunks;
};
LLMC_HD inline AttnSplitItem attn_split_decode(const AttnSplitGeom& g, int y, int S) {
    AttnSplitItem it{};
    for (int j = 0;; j++) {  // terminates for y < items
        const int n = attn_split_chunk_items(g, j, S);
        if (y < n) {
            it.outer = attn_split_outer_at(g, j, S, y);
            it.j = j;
            break;
        }
        y -= n;
    }
    const int ib = g.inner_begin(it.outer), ie = g.inner_end(it.outer);
    it.inner_begin = attn_imax(ib, attn_split_inner_lo(g, it.j, S));
    it.inner_end = attn_imin(ie, attn_split_inner_hi(g, it.j, S));
    it.j_first = attn_split_chunk_of(g, ib, S);
    it.chunks = attn_split_chunk_of(g, ie - 1, S) - it.j_first + 1;
    return it;
}

// Partial slot (within its head, [0, slots)) of chunk j of a split outer tile o: the split outer
// tiles' chunks one after another, outer tile by outer tile (o trips: only the blocks of a split
// outer tile ask, after their tile loop).
LLMC_HD inline int attn_split_slot(const AttnSplitGeom& g, int o, int j, int S) {
    int base = 0;
    for (int oo = 0; oo < o; oo++) {
        const int c = attn_split_outer_chunks(g, oo, S);
        base += c > 1 ? c : 0;
    }
    return base + j - attn_split_chunk_of(g, g.inner_begin(o), S);
}

// Runs of outer tiles (the backward's local heads; docs/attention_kernel.md "Runs of outer tiles"):
// a block of a kind that is not split may walk a run of R consecutive outer tiles, each over its
// whole inner range, outer tiles ascending, so that its set-up (the prologue's exposed loads, the
// fragments' first load) is paid once per run, and a tile two consecutive outer tiles share is loaded
// once. The kernels keep two inner tiles in shared memory, so a run needs every outer tile's inner
// range to start no earlier than the previous one's last tile (attn_run_allowed: the walk's inner
// tiles never decrease, and two consecutive outer tiles share at most one): a local head whose window
// spans at most two tiles (P <= BK + 1 at BQ = BK), and a global head only where the sequence has at
// most two tiles (beyond, its ranges grow with the outer tile).
// Item y's run: query tiles [attn_run_lo, attn_run_hi) from the end (a query tile's loop: the
// longest first, as the unsplit grid), key tiles from the start.
// R is chosen from the shape: kAttnRunTiles at most, and fewer where runs of kAttnRunTiles would
// leave the kind fewer blocks than kAttnSplitResidentBlocks (a wave of the launch).
constexpr int kAttnRunTiles = 4;
LLMC_HD inline int attn_run_lo(const AttnSplitGeom& g, int y, int R) {
    return g.by_key ? y * R : attn_imax(0, g.n_outer() - (y + 1) * R);
}
LLMC_HD inline int attn_run_hi(const AttnSplitGeom& g, int y, int R) {
    return g.by_key ? attn_imin(g.n_outer(), (y + 1) * R) : g.n_outer() - y * R;
}
// Item y of a kind with runs of R (not split): its first outer tile as an AttnSplitItem (the whole
// inner range, one chunk); its run's end is attn_run_hi.
LLMC_HD inline AttnSplitItem attn_run_decode(const AttnSplitGeom& g, int y, int R) {
    AttnSplitItem it{};
    it.outer = attn_run_lo(g, y, R);
    it.j = it.j_first = 0;
    it.chunks = 1;
    it.inner_begin = g.inner_begin(it.outer);
    it.inner_end = g.inner_end(it.outer);
    return it;
}
inline bool attn_run_allowed(const AttnSplitGeom& g) {
    for (int o = 0; o + 1 < g.n_outer(); o++)
        if (g.inner_begin(o + 1) < g.inner_end(o) - 1 || g.inner_begin(o + 1) < g.inner_begin(o)) return false;
    return true;
}

// Host: the split of one kind (g.local) for a launch of B batch rows, NH heads of which G global.
// S = 0 chooses it from the shape (above); S >= 1 forces it (tests). A kind without heads has no items.
// run: 1 no runs (the default); 0 runs chosen from the shape (above); R >= 2 forces runs of R (tests,
// the lab); a kind that is split or not attn_run_allowed takes none either way.
inline AttnSplitKind attn_split_kind(const AttnSplitGeom& g, int S, int B, int NH, int G, int run = 1) {
    AttnSplitKind k;
    const int heads = g.local ? NH - G : G;
    if (heads <= 0) return k;
    auto longest_and_work = [&](bool local, long long& work) {
        AttnSplitGeom gk = g;
        gk.local = local;
        int longest = 0;
        for (int o = 0; o < gk.n_outer(); o++) {
            const int n = gk.inner_end(o) - gk.inner_begin(o);
            longest = attn_imax(longest, n);
            work += n;
        }
        return longest;
    };
    if (S <= 0) {
        long long work_global = 0, work_local = 0;  // inner tiles visited by one head of each kind
        const int longest = longest_and_work(g.local, g.local ? work_local : work_global);
        longest_and_work(!g.local, g.local ? work_global : work_local);
        const long long work = (long long)B * ((long long)G * work_global + (long long)(NH - G) * work_local);
        const long long share = kAttnSplitResidentBlocks * kAttnSplitChainShare;
        const long long s = (work + share - 1) / share;
        // every inner range fits in one chunk: not split
        S = s >= longest ? g.n_inner() : attn_imax(kAttnSplitMinTiles, (int)s);
        if (S >= longest) S = g.n_inner();
    }
    k.chunk = S;
    for (int j = 0; j < attn_split_chunks(g, S); j++) k.items += attn_split_chunk_items(g, j, S);
    for (int o = 0; o < g.n_outer(); o++) {
        const int c = attn_split_outer_chunks(g, o, S);
        k.slots += c > 1 ? c : 0;
    }
    if (run != 1 && k.slots == 0 && attn_split_chunks(g, S) == 1 && attn_run_allowed(g)) {
        int R = run;
        if (R <= 0) {  // chosen: at most kAttnRunTiles, and at least a wave of blocks
            const long long blocks = (long long)B * heads * g.n_outer();
            const long long waves = blocks / kAttnSplitResidentBlocks;
            R = waves >= kAttnRunTiles ? kAttnRunTiles : (int)waves;
        }
        if (R > 1) {
            k.run = R;
            k.items = (g.n_outer() + R - 1) / R;
        }
    }
    return k;
}

}  // namespace llmc
