// The attention probabilities of one head of one sequence as a T x T matrix, for inspection
// (--eval-only --dump-attention, docs/training.md). Not used by training: the forward
// (llmc/cpu/attention_ls.h) never materializes T x T; this recomputes one head's rows on demand
// from what the forward stored: the attention input (qkv, after QK-norm when it is on) and each
// row's log-sum-exp lse_i of the capped scores (the forward's softmax normalizer):
//   s_ij = q_i . k_j / sqrt(hd),  s'_ij = c * tanh(s_ij / c) when softcap c > 0 else s_ij,
//   p_ij = exp(s'_ij - lse_i)   for visible keys j,
//   p_ij = 0 for masked keys: j > i, and for a local head (h < NH - G) also j <= i - P.
// Each p_ij is within a few float ulp of the weight the forward gave v_j (which it accumulated with
// an online softmax, block by block), and a row sums to 1 within float rounding.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "llmc/cpu/attention_ls.h"
#include "llmc/core/error.h"

namespace llmc {
namespace cpu {

// probs: (T, T) row-major, row = query i, column = key j; fully written (masked entries 0).
// qkv: (B, T, 3C) attention input of the layer; lse: (B, NH, T) the forward's log-sum-exp;
// b in [0, B), h in [0, NH).
template <typename F, typename Out>
void attention_probs(Out* probs, const F* qkv, const F* lse, int b, int h, int B, int T, int C, int NH, int G, int P,
                     float softcap) {
    attention_check_args(B, T, C, NH, G, P);
    if (b < 0 || b >= B || h < 0 || h >= NH)
        throw InputError("attention_probs: sequence " + std::to_string(b) + " / head " + std::to_string(h) +
                         " out of range (B=" + std::to_string(B) + ", NH=" + std::to_string(NH) + ")");
    const int hd = C / NH;
    const int C3 = 3 * C;
    const F scale = F(1) / std::sqrt(F(hd));
    const F cap = F(softcap);
    const bool capped = softcap > 0.0f;
#pragma omp parallel for schedule(dynamic, 16)
    for (int i = 0; i < T; i++) {
        Out* row = probs + (int64_t)i * T;  // (T)
        std::fill(row, row + T, Out(0));
        const int lo = attention_key_lo(i, h, NH, G, P);
        const F* q = qkv + ((int64_t)b * T + i) * C3 + h * hd;  // (hd)
        const F row_lse = lse[((int64_t)b * NH + h) * T + i];
        for (int j = lo; j <= i; j++) {
            const F* k = qkv + ((int64_t)b * T + j) * C3 + C + h * hd;  // (hd)
            F s = 0;
            for (int d = 0; d < hd; d++) s += q[d] * k[d];
            s *= scale;
            const F sc = capped ? cap * std::tanh(s / cap) : s;
            row[j] = (Out)std::exp(sc - row_lse);
        }
    }
}

}  // namespace cpu
}  // namespace llmc
