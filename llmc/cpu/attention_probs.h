// The attention probabilities of one head of one sequence as a T x T matrix, for inspection
// (--eval-only --dump-attention, docs/training.md). Not used by training: the forward
// (llmc/cpu/attention_ls.h) never materializes T x T; this recomputes one head's rows on demand
// from the attention input that the forward stored (qkv, after QK-norm when it is on).
//
// Row i is computed with the arithmetic of attention_forward's row i (same loops, same order, same
// scalar type), so it is the distribution the forward multiplied the values with:
//   s_ij = q_i . k_j / sqrt(hd),  s'_ij = c * tanh(s_ij / c) when softcap c > 0 else s_ij,
//   p_ij = exp(s'_ij - max_j s'_ij) / sum_j exp(s'_ij - max_j s'_ij)   for visible keys j,
//   p_ij = 0 for masked keys: j > i, and for a local head (h < NH - G) also j <= i - P.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "llmc/cpu/attention_ls.h"
#include "llmc/core/error.h"

namespace llmc {
namespace cpu {

// probs: (T, T) row-major, row = query i, column = key j; fully written (masked entries 0).
// qkv: (B, T, 3C) attention input of the layer; b in [0, B), h in [0, NH).
template <typename F, typename Out>
void attention_probs(Out* probs, const F* qkv, int b, int h, int B, int T, int C, int NH, int G, int P, float softcap) {
    attention_check_args(B, T, C, NH, G, P);
    if (b < 0 || b >= B || h < 0 || h >= NH)
        throw InputError("attention_probs: sequence " + std::to_string(b) + " / head " + std::to_string(h) +
                         " out of range (B=" + std::to_string(B) + ", NH=" + std::to_string(NH) + ")");
    const int hd = C / NH;
    const int C3 = 3 * C;
    const F scale = F(1) / std::sqrt(F(hd));
    const F cap = F(softcap);
    const bool capped = softcap > 0.0f;
#pragma omp parallel
    {
        std::vector<F> srow(T);  // capped scores, then probabilities, of the current row (only [0, n) used)
#pragma omp for schedule(dynamic, 16)
        for (int i = 0; i < T; i++) {
            Out* row = probs + (int64_t)i * T;  // (T)
            std::fill(row, row + T, Out(0));
            const int lo = attention_key_lo(i, h, NH, G, P);
            const int n = i - lo + 1;
            const F* q = qkv + ((int64_t)b * T + i) * C3 + h * hd;  // (hd)
            F row_max = -std::numeric_limits<F>::infinity();
            for (int jj = 0; jj < n; jj++) {
                const F* k = qkv + ((int64_t)b * T + lo + jj) * C3 + C + h * hd;  // (hd)
                F s = 0;
                for (int d = 0; d < hd; d++) s += q[d] * k[d];
                s *= scale;
                const F sc = capped ? cap * std::tanh(s / cap) : s;
                srow[jj] = sc;
                row_max = std::max(row_max, sc);
            }
            F sum = 0;
            for (int jj = 0; jj < n; jj++) {
                const F e = std::exp(srow[jj] - row_max);
                srow[jj] = e;
                sum += e;
            }
            const F inv_sum = F(1) / sum;
            for (int jj = 0; jj < n; jj++) row[lo + jj] = (Out)(srow[jj] * inv_sum);
        }
    }
}

}  // namespace cpu
}  // namespace llmc
