// Output softmax, cross-entropy and z-loss over the real vocabulary [0, V) of (N, Vp) logits.
// Columns [V, Vp) are vocabulary padding: they are never read and get no gradient.
// Per position n with lse = logsumexp(logits[n, 0:V]):
//   loss = lse - logits[n, target],   zloss = z_weight * lse^2
// The objective differentiated by the backward is sum_n dloss * (loss_n + zloss_n).
// float rows run on the ISA twins of llmc/cpu/simd.h with the vector exp (llmc/cpu/vec_exp.h):
// max, then the sum of exp(l - max) in float vectors over blocks of 8 vectors added into double
// partial sums (a fixed order per row); double rows (the finite-difference tests) use std::exp.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/cpu/simd.h"
#include "llmc/cpu/vec_exp.h"

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

// lo, hi (L/2 doubles each) += the lower and upper halves of the float vector x (L floats).
template <int VB>
LLMC_SIMD_INLINE void add_to_double(typename simd::Vec<double, VB>::type& lo, typename simd::Vec<double, VB>::type& hi,
                                    const typename simd::Vec<float, VB>::type& x) {
    typedef typename simd::Vec<float, VB / 2>::type Vh;
    typedef typename simd::Vec<double, VB>::type Vd;
    Vh a, b;
    std::memcpy(&a, &x, sizeof(Vh));
    std::memcpy(&b, reinterpret_cast<const char*>(&x) + sizeof(Vh), sizeof(Vh));
    lo += __builtin_convertvector(a, Vd);
    hi += __builtin_convertvector(b, Vd);
}

// The row's max m and sum_v exp(l_v - m) over l (V) in vectors of VB bytes: exps summed in float
// over blocks of 8 vectors, each block added into L/2-lane double partial sums; the ragged tail is
// one vector padded with -inf (exp gives 0).
template <int VB>
LLMC_SIMD_INLINE void row_max_sumexp_body(const float* l, int V, float* max_out, double* sum_out) {
    typedef typename simd::Vec<float, VB>::type Vf;
    typedef typename simd::Vec<double, VB>::type Vd;
    constexpr int L = simd::Vec<float, VB>::lanes, K = 8;
    const float ninf = -std::numeric_limits<float>::infinity();
    Vf mv = simd::splat<Vf>(ninf);
    int v = 0;
    for (; v + L <= V; v += L) {
        const Vf x = simd::load<Vf>(l + v);
        mv = x > mv ? x : mv;
    }
    float m = simd::hmax(mv);
    for (; v < V; v++) m = l[v] > m ? l[v] : m;

    const Vf m_v = simd::splat<Vf>(m);
    Vd acc_lo = simd::splat<Vd>(0.0), acc_hi = acc_lo;
    v = 0;
    for (; v + K * L <= V; v += K * L) {
        Vf blk = simd::vexp(simd::load<Vf>(l + v) - m_v);
        for (int k = 1; k < K; k++) blk += simd::vexp(simd::load<Vf>(l + v + k * L) - m_v);
        add_to_double<VB>(acc_lo, acc_hi, blk);
    }
    for (; v + L <= V; v += L) add_to_double<VB>(acc_lo, acc_hi, simd::vexp(simd::load<Vf>(l + v) - m_v));
    if (v < V) {
        float buf[L];
        for (int k = 0; k < L; k++) buf[k] = v + k < V ? l[v + k] : ninf;
        add_to_double<VB>(acc_lo, acc_hi, simd::vexp(simd::load<Vf>(buf) - m_v));
    }
    *max_out = m;
    *sum_out = simd::hsum(acc_lo + acc_hi);
}

// dl (V) = pscale * exp(l (V) - s) in vectors of VB bytes.
template <int VB>
LLMC_SIMD_INLINE void row_scaled_exp_body(float* dl, const float* l, int V, float s, float pscale) {
    typedef typename simd::Vec<float, VB>::type Vf;
    constexpr int L = simd::Vec<float, VB>::lanes;
    const Vf s_v = simd::splat<Vf>(s);
    int v = 0;
    for (; v + L <= V; v += L) simd::store(dl + v, simd::vexp(simd::load<Vf>(l + v) - s_v) * pscale);
    if (v < V) {
        float buf[L] = {};
        std::memcpy(buf, l + v, (size_t)(V - v) * sizeof(float));
        simd::store(buf, simd::vexp(simd::load<Vf>(buf) - s_v) * pscale);
        std::memcpy(dl + v, buf, (size_t)(V - v) * sizeof(float));
    }
}

inline void row_max_sumexp_base(const float* l, int V, float* m, double* sum) { row_max_sumexp_body<16>(l, V, m, sum); }
inline void row_scaled_exp_base(float* dl, const float* l, int V, float s, float pscale) {
    row_scaled_exp_body<16>(dl, l, V, s, pscale);
}
#ifdef LLMC_SIMD_X86
LLMC_TARGET_AVX2 inline void row_max_sumexp_avx2(const float* l, int V, float* m, double* sum) {
    row_max_sumexp_body<32>(l, V, m, sum);
}
LLMC_TARGET_AVX2 inline void row_scaled_exp_avx2(float* dl, const float* l, int V, float s, float pscale) {
    row_scaled_exp_body<32>(dl, l, V, s, pscale);
}
LLMC_TARGET_AVX512 inline void row_max_sumexp_avx512(const float* l, int V, float* m, double* sum) {
    row_max_sumexp_body<64>(l, V, m, sum);
}
LLMC_TARGET_AVX512 inline void row_scaled_exp_avx512(float* dl, const float* l, int V, float s, float pscale) {
    row_scaled_exp_body<64>(dl, l, V, s, pscale);
}
#endif

// max and sum of exp(l - max) of one row, on the twin of isa.
inline void row_max_sumexp(const float* l, int V, float* m, double* sum, Isa isa) {
#ifdef LLMC_SIMD_X86
    if (isa == Isa::Avx512) return row_max_sumexp_avx512(l, V, m, sum);
    if (isa == Isa::Avx2) return row_max_sumexp_avx2(l, V, m, sum);
#endif
    row_max_sumexp_base(l, V, m, sum);
}
// The double rows of the finite-difference tests: std::exp, sums in double.
inline void row_max_sumexp(const double* l, int V, double* m, double* sum, Isa) {
    double mx = l[0];
    for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    double s = 0.0;
    for (int v = 0; v < V; v++) s += std::exp(l[v] - mx);
    *m = mx;
    *sum = s;
}
inline void row_scaled_exp(float* dl, const float* l, int V, float s, float pscale, Isa isa) {
#ifdef LLMC_SIMD_X86
    if (isa == Isa::Avx512) return row_scaled_exp_avx512(dl, l, V, s, pscale);
    if (isa == Isa::Avx2) return row_scaled_exp_avx2(dl, l, V, s, pscale);
#endif
    row_scaled_exp_base(dl, l, V, s, pscale);
}
inline void row_scaled_exp(double* dl, const double* l, int V, double s, double pscale, Isa) {
    for (int v = 0; v < V; v++) dl[v] = pscale * std::exp(l[v] - s);
}
}  // namespace detail

// losses (N) CE, zlosses (N) z_weight * lse^2, lse (N) (saved for the backward);
// logits (N, Vp), targets (N) in [0, V). stats (nullable) is overwritten with this call's values.
template <typename F>
void classifier_forward(F* losses, F* zlosses, F* lse, const F* logits, const int* targets, float z_weight, int N,
                        int V, int Vp, OutputStats* stats, Isa isa = isa_best()) {
    detail::check_targets(targets, N, V);
    std::vector<F> row_max(N);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const F* l = logits + (size_t)n * Vp;
        F m;
        double total;
        detail::row_max_sumexp(l, V, &m, &total, isa);
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
                         int V, int Vp, Isa isa = isa_best()) {
    detail::check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const F* l = logits + (size_t)n * Vp;
        F* dl = dlogits + (size_t)n * Vp;
        const F s = lse[n];
        const F pscale = dloss * (F(1) + F(2) * F(z_weight) * s);  // d/dl_v of both terms, per p_v
        detail::row_scaled_exp(dl, l, V, s, pscale, isa);
        for (int v = V; v < Vp; v++) dl[v] = F(0);
        dl[targets[n]] -= dloss;
    }
}

}  // namespace cpu
}  // namespace llmc
