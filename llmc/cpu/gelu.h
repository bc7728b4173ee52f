// GELU in two kinds (llmc/core/model_config.h, Gelu):
//   Tanh (GPT-2):  gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi)
//   Erf (exact):   gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))),  gelu'(x) = Phi(x) + x phi(x),
//                  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// Tanh, float: explicit vectors on the ISA twins of llmc/cpu/simd.h with the vector tanh
// (llmc/cpu/vec_tanh.h), in chunks of 4096 elements over the OpenMP threads (elementwise, so the
// result does not depend on the thread count). Erf, float: the C library's erff and expf per element
// in the same chunks (exact to the library's accuracy, no vector twin: only the paper preset uses it,
// and the MLP's GEMMs dominate its step). double (the finite-difference tests): std::tanh / std::erf.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "llmc/core/model_config.h"
#include "llmc/cpu/simd.h"
#include "llmc/cpu/vec_tanh.h"

namespace llmc {
namespace cpu {

namespace detail {
constexpr size_t kGeluChunk = 4096;

// gelu(x) (backward: g * gelu'(x)) of a vector of VB bytes.
template <int VB, bool Backward>
LLMC_SIMD_INLINE typename simd::Vec<float, VB>::type gelu_vec(const typename simd::Vec<float, VB>::type& x,
                                                              const typename simd::Vec<float, VB>::type& g) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    const typename simd::Vec<float, VB>::type th = simd::vtanh(k * (x + 0.044715f * x * x * x));
    if constexpr (!Backward) return 0.5f * x * (1.0f + th);
    // gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 * 0.044715 x^2)
    else return g * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * k * (1.0f + 3 * 0.044715f * x * x));
}

// out = gelu(inp) (forward) or dinp = dout * gelu'(inp) (backward), n elements, vectors of VB
// bytes; the ragged tail goes through one padded vector. (No lambdas here: a lambda is compiled
// for the baseline ISA, and a 32/64-byte vector crossing its call has a different ABI there.)
template <int VB, bool Backward>
LLMC_SIMD_INLINE void gelu_body(float* out, const float* inp, const float* dout, size_t n) {
    typedef typename simd::Vec<float, VB>::type V;
    constexpr int L = simd::Vec<float, VB>::lanes;
    size_t i = 0;
    for (; i + L <= n; i += L) {
        const V g = Backward ? simd::load<V>(dout + i) : simd::splat<V>(0.0f);
        simd::store(out + i, gelu_vec<VB, Backward>(simd::load<V>(inp + i), g));
    }
    if (i < n) {
        float x[L] = {}, g[L] = {};
        std::memcpy(x, inp + i, (n - i) * sizeof(float));
        if (Backward) std::memcpy(g, dout + i, (n - i) * sizeof(float));
        simd::store(x, gelu_vec<VB, Backward>(simd::load<V>(x), simd::load<V>(g)));
        std::memcpy(out + i, x, (n - i) * sizeof(float));
    }
}
template <bool Backward>
void gelu_base(float* out, const float* inp, const float* dout, size_t n) {
    gelu_body<16, Backward>(out, inp, dout, n);
}
#ifdef LLMC_SIMD_X86
template <bool Backward>
LLMC_TARGET_AVX2 void gelu_avx2(float* out, const float* inp, const float* dout, size_t n) {
    gelu_body<32, Backward>(out, inp, dout, n);
}
template <bool Backward>
LLMC_TARGET_AVX512 void gelu_avx512(float* out, const float* inp, const float* dout, size_t n) {
    gelu_body<64, Backward>(out, inp, dout, n);
}
#endif

// Exact GELU and its derivative (g * gelu'(x)) in F.
template <typename F>
inline F gelu_erf_value(F x) {
    return F(0.5) * x * (F(1) + std::erf(x * F(0.70710678118654752440)));  // 1 / sqrt(2)
}
template <typename F>
inline F gelu_erf_grad(F x) {
    const F cdf = F(0.5) * (F(1) + std::erf(x * F(0.70710678118654752440)));
    const F pdf = F(0.39894228040143267794) * std::exp(F(-0.5) * x * x);  // 1 / sqrt(2 pi)
    return cdf + x * pdf;
}

// The float path: chunks over the threads, each on the twin of isa (tanh) or per element (erf).
template <bool Backward>
void gelu_float(float* out, const float* inp, const float* dout, size_t n, Gelu kind, Isa isa) {
    const size_t nchunks = (n + kGeluChunk - 1) / kGeluChunk;
    if (kind == Gelu::Erf) {
#pragma omp parallel for schedule(static)
        for (size_t c = 0; c < nchunks; c++) {
            const size_t i1 = std::min(n, (c + 1) * kGeluChunk);
            for (size_t i = c * kGeluChunk; i < i1; i++)
                out[i] = Backward ? dout[i] * gelu_erf_grad(inp[i]) : gelu_erf_value(inp[i]);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        const size_t i0 = c * kGeluChunk, m = std::min(kGeluChunk, n - i0);
        const float* g = Backward ? dout + i0 : nullptr;
#ifdef LLMC_SIMD_X86
        if (isa == Isa::Avx512) {
            gelu_avx512<Backward>(out + i0, inp + i0, g, m);
            continue;
        }
        if (isa == Isa::Avx2) {
            gelu_avx2<Backward>(out + i0, inp + i0, g, m);
            continue;
        }
#endif
        gelu_base<Backward>(out + i0, inp + i0, g, m);
    }
}
}  // namespace detail

// out (n) = gelu(inp (n)), elementwise, of the given kind.
inline void gelu_forward(float* out, const float* inp, size_t n, Gelu kind = Gelu::Tanh, Isa isa = isa_best()) {
    detail::gelu_float<false>(out, inp, nullptr, n, kind, isa);
}
inline void gelu_forward(double* out, const double* inp, size_t n, Gelu kind = Gelu::Tanh) {
    const double k = 0.7978845608028654;  // sqrt(2 / pi)
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const double x = inp[i];
        out[i] =
            kind == Gelu::Erf ? detail::gelu_erf_value(x) : 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
}

// dinp = dout * gelu'(inp) (all (n); overwritten).
//   gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 * 0.044715 x^2),  th = tanh(k (x + 0.044715 x^3))
//   (Erf: gelu'(x) = Phi(x) + x phi(x), above.)
inline void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, Gelu kind = Gelu::Tanh,
                          Isa isa = isa_best()) {
    detail::gelu_float<true>(dinp, inp, dout, n, kind, isa);
}
inline void gelu_backward(double* dinp, const double* inp, const double* dout, size_t n, Gelu kind = Gelu::Tanh) {
    const double k = 0.7978845608028654;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const double x = inp[i];
        if (kind == Gelu::Erf) {
            dinp[i] = dout[i] * detail::gelu_erf_grad(x);
            continue;
        }
        const double th = std::tanh(k * (x + 0.044715 * x * x * x));
        const double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3 * 0.044715 * x * x);
        dinp[i] = dout[i] * grad;
    }
}

}  // namespace cpu
}  // namespace llmc
