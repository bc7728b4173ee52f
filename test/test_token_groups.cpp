// Tests of the host grouping of positions by token (llmc/core/token_groups.h), which the CUDA encoder
// backward sums from: the layout against a brute-force reference (runs longest first, ties by token,
// positions increasing inside a run, empty runs padded), the shapes the backend meets (few distinct
// tokens, more rows than positions, more positions than rows), scratch reuse, and bad token ids.
#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "llmc/core/rng.h"
#include "llmc/core/token_groups.h"

namespace {

// The layout token_groups.h specifies, built the obvious way: a map token -> positions, sorted.
std::vector<int> reference_groups(const std::vector<int>& inp, int vocab_rows) {
    const int n = (int)inp.size(), G = std::min(n, vocab_rows);
    std::map<int, std::vector<int>> pos;  // token -> positions, increasing
    for (int i = 0; i < n; i++) pos[inp[i]].push_back(i);
    std::vector<std::pair<int, int>> order;  // (-length, token)
    for (const auto& [tok, p] : pos) order.push_back({-(int)p.size(), tok});
    std::sort(order.begin(), order.end());
    std::vector<int> run_begin, sorted;
    for (const auto& [neg_len, tok] : order) {
        run_begin.push_back((int)sorted.size());
        sorted.insert(sorted.end(), pos[tok].begin(), pos[tok].end());
    }
    run_begin.resize((size_t)G + 1, n);
    run_begin.insert(run_begin.end(), sorted.begin(), sorted.end());
    return run_begin;
}

std::vector<int> grouped(const std::vector<int>& inp, int vocab_rows, llmc::TokenGroupScratch& scratch) {
    std::vector<int> out(llmc::token_groups_ints((int)inp.size(), vocab_rows), -7);
    llmc::group_tokens(out.data(), inp.data(), (int)inp.size(), vocab_rows, scratch);
    return out;
}

std::vector<int> random_tokens(llmc::Rng& rng, int n, int distinct) {
    std::vector<int> t((size_t)n);
    for (int& x : t) x = (int)rng.below((uint64_t)distinct);
    return t;
}

}  // namespace

TEST_CASE("group_tokens: a small batch by hand", "[token_groups]") {
    // tokens 2 (x3), 0 (x2), 5 (x2), 1 (x1): runs longest first, ties by token, positions increasing
    const std::vector<int> inp = {5, 2, 0, 2, 1, 0, 2, 5};
    llmc::TokenGroupScratch scratch;
    const std::vector<int> got = grouped(inp, 6, scratch);
    // G = min(8, 6) = 6 runs: 4 used, 2 empty (begin = n = 8), then run_begin[6] = 8
    const std::vector<int> want = {0, 3, 5, 7, 8, 8, 8, /* sorted_pos */ 1, 3, 6, 2, 5, 0, 7, 4};
    CHECK(got == want);
    CHECK(got == reference_groups(inp, 6));
}

TEST_CASE("group_tokens equals the reference layout on random batches", "[token_groups]") {
    llmc::Rng rng(11);
    llmc::TokenGroupScratch scratch;  // shared: grown and shrunk across the shapes
    struct Shape {
        int n, distinct, vocab_rows;
    };
    // few distinct tokens (long runs); more rows than positions; more positions than rows; a GPT-2
    // vocabulary; one position; every position the same token
    for (const Shape sh : {Shape{256, 5, 128}, Shape{64, 1000, 1024}, Shape{2100, 3, 8}, Shape{4096, 50257, 50304},
                           Shape{1, 1, 1}, Shape{300, 1, 10}, Shape{777, 100, 100}}) {
        const std::vector<int> inp = random_tokens(rng, sh.n, sh.distinct);
        const std::vector<int> got = grouped(inp, sh.vocab_rows, scratch);
        INFO("n " << sh.n << " distinct " << sh.distinct << " rows " << sh.vocab_rows);
        CHECK(got.size() == (size_t)std::min(sh.n, sh.vocab_rows) + 1 + (size_t)sh.n);
        CHECK(got == reference_groups(inp, sh.vocab_rows));
        llmc::TokenGroupScratch fresh;
        CHECK(grouped(inp, sh.vocab_rows, fresh) == got);  // the scratch's history does not matter
    }
}

TEST_CASE("group_tokens refuses a token outside the rows", "[token_groups]") {
    llmc::TokenGroupScratch scratch;
    for (const int bad : {-1, 16}) {
        const std::vector<int> inp = {0, 3, bad, 1};
        std::vector<int> out(llmc::token_groups_ints(4, 16));
        CHECK_THROWS_AS(llmc::group_tokens(out.data(), inp.data(), 4, 16, scratch), std::invalid_argument);
    }
}
