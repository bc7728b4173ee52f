// exp on a SIMD vector (llmc/cpu/simd.h), for every softmax-shaped loop of the CPU backend.
//
// float lanes: max error 0.99 ulp (baseline twin) / 1.014 ulp (FMA twins) against exp in double over
// every float input (docs/cpu_backend.md; test/test_vec_exp.cpp sweeps each ISA twin), with
//   exp(-inf) = 0 and exp(x) = 0 for x <= -104 (the true value is below half the smallest subnormal),
//   exp(+inf) = +inf and exp(x) = +inf for x > 88.7228 (above FLT_MAX), exp(NaN) = NaN,
//   subnormal results rounded once (no flush to zero), exp(0) = 1 exactly.
// double lanes: std::exp per lane, so the double instantiations used by the finite-difference
// tests keep the library's accuracy.
//
// Method (float): x is clamped to [-104, 89] (NaN passes through: it compares false), then
//   x = n ln2 + r, n = round(x / ln2) in [-150, 128], |r| <= ln2/2 (+ rounding),
// with ln2 split as C1 + C2, C1 = 355/512 exactly (9 significant bits, so n * C1 is exact for every
// n here) and C2 = ln2 - C1 rounded to float (Cody-Waite reduction). Then
//   e^r = 1 + r + r^2 P(r),  P of degree 4,
// with P's coefficients a minimax fit of the relative error on |r| <= ln2/2 (Lawson's iteratively
// reweighted least squares in double; the fit's own error is 3.1e-9 relative, 0.05 of a float ulp,
// so the rounding of the float evaluation dominates). Finally e^x = e^r * 2^n1 * 2^n2 with
// n1 = floor(n/2), n2 = n - n1, both in [-75, 64] so each power of two is a normal float built in
// the exponent bits: the first product is exact, the second rounds once (into the subnormals or to
// +inf when the result is there). n comes out of the rounding trick t = x/ln2 + 1.5*2^23, whose
// low mantissa bits hold n.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "llmc/cpu/simd.h"

namespace llmc {
namespace cpu {
namespace simd {

// exp of every lane (see the file comment for accuracy and special values).
template <typename V>
LLMC_SIMD_INLINE V vexp(const V& x_in) {
    using F = lane_t<V>;
    V x = x_in;
    if constexpr (std::is_same<F, double>::value) {
        for (int i = 0; i < lanes_of<V>(); i++) x[i] = std::exp(x[i]);
        return x;
    } else {
        static_assert(std::is_same<F, float>::value, "vexp: float or double lanes");
        typedef int32_t I __attribute__((vector_size(sizeof(V))));
        typedef uint32_t U __attribute__((vector_size(sizeof(V))));
        const V lo = splat<V>(-104.0f), hi = splat<V>(89.0f);
        x = x < lo ? lo : x;
        x = x > hi ? hi : x;
        const float shifter = 12582912.0f;  // 1.5 * 2^23: t's mantissa ends in n + 2^22
        const V t = x * 1.44269504088896341f + shifter;
        const V n = t - shifter;
        V r = x - n * 0.693359375f;   // C1 = 355/512: exact product
        r = r - n * -2.12194442e-4f;  // C2 = ln2 - C1
        V p = splat<V>(1.38146127e-3f);
        p = p * r + 8.36871006e-3f;
        p = p * r + 4.16683890e-2f;
        p = p * r + 1.66665211e-1f;
        p = p * r + 4.99999940e-1f;
        const V r2 = r * r;
        V y = p * r2 + r;
        y = y + 1.0f;
        U tb;
        std::memcpy(&tb, &t, sizeof(V));
        const I ni = (I)(tb - 0x4B400000u);  // n (0x4B400000: the bits of the shifter)
        const I n1 = ni >> 1;                // floor(n / 2) (arithmetic shift)
        const I n2 = ni - n1;
        const U e1 = (U)(n1 + 127) << 23, e2 = (U)(n2 + 127) << 23;
        V s1, s2;
        std::memcpy(&s1, &e1, sizeof(V));
        std::memcpy(&s2, &e2, sizeof(V));
        return (y * s1) * s2;
    }
}

namespace detail {
// y[i] = exp(x[i]) for i < n with vectors of VB bytes; the ragged tail goes through one padded vector.
template <int VB>
LLMC_SIMD_INLINE void exp_array_impl(float* y, const float* x, size_t n) {
    typedef typename Vec<float, VB>::type V;
    constexpr int L = Vec<float, VB>::lanes;
    size_t i = 0;
    for (; i + L <= n; i += L) store(y + i, vexp(load<V>(x + i)));
    if (i < n) {
        float buf[L] = {};
        std::memcpy(buf, x + i, (n - i) * sizeof(float));
        store(buf, vexp(load<V>(buf)));
        std::memcpy(y + i, buf, (n - i) * sizeof(float));
    }
}
inline void exp_array_base(float* y, const float* x, size_t n) { exp_array_impl<16>(y, x, n); }
#ifdef LLMC_SIMD_X86
LLMC_TARGET_AVX2 inline void exp_array_avx2(float* y, const float* x, size_t n) { exp_array_impl<32>(y, x, n); }
LLMC_TARGET_AVX512 inline void exp_array_avx512(float* y, const float* x, size_t n) { exp_array_impl<64>(y, x, n); }
#endif
}  // namespace detail

// y (n) = exp(x (n)) with the twin of `isa` (which must be isa_supported); y may equal x.
inline void exp_array(float* y, const float* x, size_t n, Isa isa = isa_best()) {
#ifdef LLMC_SIMD_X86
    if (isa == Isa::Avx512) return detail::exp_array_avx512(y, x, n);
    if (isa == Isa::Avx2) return detail::exp_array_avx2(y, x, n);
#endif
    detail::exp_array_base(y, x, n);
}

}  // namespace simd
}  // namespace cpu
}  // namespace llmc
