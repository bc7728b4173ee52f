// Output softmax, cross-entropy and z-loss over the real vocabulary [0, V) of (N, Vp) logits.
// Columns [V, Vp) are vocabulary padding: they are never read and get no gradient.
// Per position n with lse = logsumexp(logits[n, 0:V]):
//   loss = lse - logits[n, target],   zloss = z_weight * lse^2
// The objective differentiated by the backward is sum_n dloss * (loss_n + zloss_n).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/cpu/vecmath.h"

namespace llmc {
namespace cpu {

// Output-softmax statistics of a forward pass; the caller merges calls (max of max_logit, sums
// of lse_sum and count) and reports lse_sum / count as the mean log-sum-exp.
struct OutputStats {
    float max_logit;  // max over every real-vocabulary logit
    double lse_sum;   // sum over positions of lse
    int64_t count;    // number of positions
};

namespace detail {
// Targets outside [0, V) would index past the real vocabulary; refuse them before any work.
inline void check_targets(const int* targets, int N, int V) {
    for (int n = 0; n < N; n++) {
        if (targets[n] < 0 || targets[n] >= V)
            throw InputError("target token id " + std::to_string(targets[n]) + " at position " + std::to_string(n) +
                             " is outside the vocabulary [0, " + std::to_string(V) +
                             "); re-tokenize the data or raise --vocab");
    }
}
}  // namespace detail

// losses (N) CE, zlosses (N) z_weight * lse^2, lse (N) (saved for the backward);
// logits (N, Vp), targets (N) in [0, V). stats (nullable) is overwritten with this call's values.
template <typename F>
void classifier_forward(F* losses, F* zlosses, F* lse, const F* logits, const int* targets, float z_weight, int N,
                        int V, int Vp, OutputStats* stats) {
    detail::check_targets(targets, N, V);
    std::vector<F> row_max(N);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const F* l = logits + (size_t)n * Vp;
        // max and sum of exp over [0, V) in 8 interleaved lanes (vectorizable, fixed order);
        // the sum of ~50k terms in double
        constexpr int L = 8;
        F mx[L];
        for (int j = 0; j < L; j++) mx[j] = l[0];
        int v = 0;
        for (; v + L <= V; v += L)
#pragma omp simd
            for (int j = 0; j < L; j++) mx[j] = l[v + j] > mx[j] ? l[v + j] : mx[j];
        for (; v < V; v++) mx[0] = l[v] > mx[0] ? l[v] : mx[0];
        F m = mx[0];
        for (int j = 1; j < L; j++) m = mx[j] > m ? mx[j] : m;
        double sum[L] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (v = 0; v + L <= V; v += L)
#pragma omp simd
            for (int j = 0; j < L; j++) sum[j] += (double)exp_fast(l[v + j] - m);
        for (; v < V; v++) sum[0] += (double)exp_fast(l[v] - m);
        double total = 0.0;
        for (int j = 0; j < L; j++) total += sum[j];
        const F s = m + F(std::log(total));
        lse[n] = s;
        losses[n] = s - l[targets[n]];
        zlosses[n] = F(z_weight) * s * s;
        row_max[n] = m;
    }
    if (stats) {  // merged in position order: deterministic
        float mx = N > 0 ? float(row_max[0]) : 0.0f;
        double lsum = 0.0;
        for (int n = 0; n < N; n++) {
            mx = float(row_max[n]) > mx ? float(row_max[n]) : mx;
            lsum += double(lse[n]);
        }
        stats->max_logit = mx;
        stats->lse_sum = lsum;
        stats->count = N;
    }
}

// Overwrites dlogits (N, Vp):
//   dlogits[n, v] = dloss * (p_v - [v == target] + 2 * z_weight * lse * p_v),  p_v = exp(l_v - lse)
// for v < V, and 0 in the padding columns [V, Vp).
// dloss = d objective / d (per-position CE + z-loss), e.g. grad_scale / N.
template <typename F>
void classifier_backward(F* dlogits, const F* logits, const F* lse, const int* targets, F dloss, float z_weight, int N,
                         int V, int Vp) {
    detail::check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const F* l = logits + (size_t)n * Vp;
        F* dl = dlogits + (size_t)n * Vp;
        const F s = lse[n];
        const F pscale = dloss * (F(1) + F(2) * F(z_weight) * s);  // d/dl_v of both terms, per p_v
#pragma omp simd
        for (int v = 0; v < V; v++) dl[v] = pscale * exp_fast(l[v] - s);
        for (int v = V; v < Vp; v++) dl[v] = F(0);
        dl[targets[n]] -= dloss;
    }
}

}  // namespace cpu
}  // namespace llmc
