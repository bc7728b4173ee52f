// LS-attention (local sliding-window heads + global heads) on the CPU: the reference the CUDA
// kernel is validated against. Works on llm.c's qkv layout: qkv (B, T, 3C) holds q in channels
// [0, C), k in [C, 2C), v in [2C, 3C); head h uses channels h*hd .. h*hd+hd-1 of each part.
//
// Heads 0 .. NH-G-1 are local: query i sees keys max(0, i-P+1) .. i. Heads NH-G .. NH-1 are
// global (causal): query i sees keys 0 .. i. Score s = q.k / sqrt(hd); the softmax sees
// s' = softcap * tanh(s / softcap) when softcap > 0, else s. lse = logsumexp(s') per row.
// A local head only ever touches the keys in its window (to the key block: 32 keys), so it costs
// O(T * P); there is no T x T buffer anywhere. The kernel is llmc/cpu/attention_flash.h: blocks of
// queries against blocks of keys with an online softmax, keys in SIMD lanes (docs/cpu_backend.md).
//
// Statistics (optional, per head): max / min of s, mean entropy of the softmax, and the near/far
// split: key j of query i is near when i - j < near (default: P, for global heads too), else far;
// the softmax mass on near keys and the max of s over near keys and over far keys.
//
// Determinism: results are bit-identical for any OpenMP thread count. A query row's result
// depends only on its visible keys and the fixed grid of key blocks, never on which task or
// thread computes it. The forward parallelizes over independent (b, h, query block) tasks and
// merges the statistics partials in a fixed order; the backward parallelizes over (b, h), whose
// gradients live in disjoint channel slices, and walks the query and key blocks in order inside.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/cpu/attention_flash.h"
#include "llmc/cpu/simd.h"

namespace llmc {
namespace cpu {

// Attention-logit statistics of one head. The caller initializes max_logit = -inf,
// min_logit = +inf, entropy_sum = 0, rows = 0 (the near/far fields start at their defaults);
// attention_forward merges into it, so one struct can collect several forward passes.
// Mean entropy = entropy_sum / rows; mean near mass = near_mass_sum / rows.
struct AttnHeadStats {
    float max_logit;             // max of s = q.k/sqrt(hd) (before soft-capping) over unmasked pairs
    float min_logit;             // min of the same
    double entropy_sum;          // sum over query rows of the entropy (nats) of the softmax over s'
    int64_t rows;                // number of query rows summed
    double near_mass_sum = 0.0;  // sum over query rows of the softmax probability on near keys
    float near_max_logit = -std::numeric_limits<float>::infinity();  // max of s over near keys
    float far_max_logit = -std::numeric_limits<float>::infinity();   // over far keys (-inf: none yet)
};

// Throws InputError when the attention shape is impossible.
inline void attention_check_args(int B, int T, int C, int NH, int G, int P) {
    if (B < 1 || T < 1) {
        throw InputError("attention: B and T must be >= 1 (got B=" + std::to_string(B) + ", T=" + std::to_string(T) +
                         "); pass a non-empty batch");
    }
    if (NH < 1 || C < 1 || C % NH != 0) {
        throw InputError("attention: channels C=" + std::to_string(C) + " must be a positive multiple of heads NH=" +
                         std::to_string(NH) + "; change --channels or --heads");
    }
    if (G < 0 || G > NH) {
        throw InputError("attention: global heads G=" + std::to_string(G) + " must be in [0, NH=" + std::to_string(NH) +
                         "]; change --global-heads");
    }
    if (P < 1) { throw InputError("attention: window P=" + std::to_string(P) + " must be >= 1; change --window"); }
}

// First key index query i of head h may see.
inline int attention_key_lo(int i, int h, int NH, int G, int P) {
    bool local = h < NH - G;
    return local ? std::max(0, i - P + 1) : 0;
}

// The call's shape for the kernel (llmc/cpu/attention_flash.h); near = 0 means P.
template <typename F>
flash::Shape<F> attention_shape(int B, int T, int C, int NH, int G, int P, float softcap, int near) {
    const int hd = C / NH;
    return flash::Shape<F>{B, T, C, NH, G, P, hd, near > 0 ? near : P, F(1) / std::sqrt(F(hd)), F(softcap)};
}

// out: (B, T, C) attention output, heads concatenated in head order.
// lse: (B, NH, T) logsumexp of each row's (capped) scores, kept for the backward.
// qkv: (B, T, 3C). stats: NH entries merged into, or nullptr.
// near: the near/far distance N of the statistics (keys with i - j < N are near); 0 = P.
// isa: the kernel twin (llmc/cpu/simd.h); the default is the widest this CPU runs.
template <typename F>
void attention_forward(F* out, F* lse, const F* qkv, int B, int T, int C, int NH, int G, int P, float softcap,
                       AttnHeadStats* stats, int near = 0, Isa isa = isa_best()) {
    attention_check_args(B, T, C, NH, G, P);
    if (near < 0)
        throw InputError("attention: near distance " + std::to_string(near) +
                         " must be >= 1 (0 = the window P); change --near");
    const flash::Shape<F> sh = attention_shape<F>(B, T, C, NH, G, P, softcap, near);
    // one partial per (b, h, query block), merged below in that order: independent of the threads
    const int nqb = (T + flash::kBQ - 1) / flash::kBQ;
    std::vector<flash::TaskStats> partial(stats ? (size_t)B * NH * nqb : 0);
    flash::forward(out, lse, qkv, sh, stats ? partial.data() : nullptr, isa);

    if (stats) {  // fixed-order merge: head, then batch, then query block
        for (int h = 0; h < NH; h++) {
            AttnHeadStats& st = stats[h];
            for (int b = 0; b < B; b++) {
                for (int c = 0; c < nqb; c++) {
                    const flash::TaskStats& p = partial[((size_t)b * NH + h) * nqb + c];
                    st.max_logit = std::max(st.max_logit, p.max_logit);
                    st.min_logit = std::min(st.min_logit, p.min_logit);
                    st.entropy_sum += p.entropy_sum;
                    st.rows += p.rows;
                    st.near_mass_sum += p.near_mass_sum;
                    st.near_max_logit = std::max(st.near_max_logit, p.near_max_logit);
                    st.far_max_logit = std::max(st.far_max_logit, p.far_max_logit);
                }
            }
        }
    }
}

// Backward, FlashAttention-2 style: p is recomputed from the saved lse (no stored probabilities).
// For each query row i: D_i = dout_i . out_i, and for each visible key j:
//   p_ij = exp(s'_ij - lse_i);  dp_ij = dout_i . v_j;  ds'_ij = p_ij (dp_ij - D_i);
//   ds_ij = ds'_ij * (1 - tanh^2(s_ij / c)) when capped;
//   dq_i += ds_ij k_j / sqrt(hd);  dk_j += ds_ij q_i / sqrt(hd);  dv_j += p_ij dout_i.
// dqkv: (B, T, 3C), overwritten. dout, out: (B, T, C). lse: (B, NH, T) from the forward.
template <typename F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const F* out, const F* lse, int B, int T, int C, int NH,
                        int G, int P, float softcap, Isa isa = isa_best()) {
    attention_check_args(B, T, C, NH, G, P);
    flash::backward(dqkv, dout, qkv, out, lse, attention_shape<F>(B, T, C, NH, G, P, softcap, 0), isa);
}

}  // namespace cpu
}  // namespace llmc
