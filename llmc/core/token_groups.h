// The positions of a batch grouped by token, on the host: what the CUDA encoder backward
// (llmc/cuda/encoder.cuh) sums one token's gradient rows from. A pure function of the token ids.
//
// Layout of the groups (ints, token_groups_ints(n, vocab_rows) of them; G = min(n, vocab_rows), the
// most distinct tokens a batch of n positions can hold):
//   run_begin  (G + 1)  run r holds sorted_pos[run_begin[r], run_begin[r + 1]); runs r >= (the batch's
//                       distinct tokens) are empty (run_begin[r] = n), and run_begin[G] = n
//   sorted_pos (n)      every position 0..n-1 exactly once: one run per distinct token, the token's
//                       positions in increasing order inside it
// Runs are ordered longest first (ties: smaller token first), so that on the device the longest sums
// start first (llm.c sorts its buckets by size for the same reason).
//
// Cost: a counting sort, O(n + vocab_rows) time, no allocation once the scratch has grown
// (docs/cuda_kernels.md, "Encoder": measured per micro-batch).
#pragma once
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc {

inline size_t token_groups_runs(int n, int vocab_rows) { return (size_t)std::min(n, vocab_rows); }
inline size_t token_groups_ints(int n, int vocab_rows) { return token_groups_runs(n, vocab_rows) + 1 + (size_t)n; }

// Host scratch of group_tokens, grown on demand: occurrences per token, and two cursors per run length.
struct TokenGroupScratch {
    std::vector<int> count;                 // (vocab_rows)
    std::vector<int> first_run, first_pos;  // (longest run + 1)
};

// groups (token_groups_ints(n, vocab_rows)) written; inp (n) token ids in [0, vocab_rows) (an id outside
// throws std::invalid_argument: the caller checks the batch first, llmc/core/batch_check.h).
inline void group_tokens(int* groups, const int* inp, int n, int vocab_rows, TokenGroupScratch& s) {
    if (n < 0 || vocab_rows < 1) throw std::invalid_argument("group_tokens: n >= 0 and vocab_rows >= 1 needed");
    const int G = (int)token_groups_runs(n, vocab_rows);
    int* run_begin = groups;
    int* sorted_pos = groups + G + 1;
    s.count.assign((size_t)vocab_rows, 0);
    int* count = s.count.data();
    // 1. occurrences per token, and the longest run
    int longest = 0;
    for (int i = 0; i < n; i++) {
        const int tok = inp[i];
        if (tok < 0 || tok >= vocab_rows)
            throw std::invalid_argument("group_tokens: token " + std::to_string(tok) + " at position " +
                                        std::to_string(i) + " outside [0, " + std::to_string(vocab_rows) + ")");
        longest = std::max(longest, ++count[tok]);
    }
    // 2. runs ordered by (length descending, token ascending). Per length len: first_run[len] = the
    // index of its first run, first_pos[len] = where that run starts in sorted_pos
    s.first_run.assign((size_t)longest + 1, 0);
    s.first_pos.assign((size_t)longest + 1, 0);
    int* first_run = s.first_run.data();
    int* first_pos = s.first_pos.data();
    for (int tok = 0; tok < vocab_rows; tok++)
        if (count[tok] > 0) first_run[count[tok]]++;
    int runs = 0, pos = 0;
    for (int len = longest; len >= 1; len--) {
        const int k = first_run[len];
        first_run[len] = runs;
        first_pos[len] = pos;
        runs += k;
        pos += k * len;
    }
    // tokens in increasing order take the next run of their length; count[tok] becomes the start of
    // tok's run (tokens absent from the batch keep 0, never read)
    for (int tok = 0; tok < vocab_rows; tok++) {
        const int len = count[tok];
        if (len == 0) continue;
        run_begin[first_run[len]++] = first_pos[len];
        count[tok] = first_pos[len];
        first_pos[len] += len;
    }
    for (int r = runs; r <= G; r++) run_begin[r] = n;
    // 3. scatter: the positions in increasing order, each to its token's next slot
    for (int i = 0; i < n; i++) sorted_pos[count[inp[i]]++] = i;
}

}  // namespace llmc
