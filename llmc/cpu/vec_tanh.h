// tanh on a SIMD vector (llmc/cpu/simd.h), for the attention soft-cap and GELU.
//
// float lanes: max error 1.073 ulp (baseline twin) / 0.993 ulp (FMA twins) against tanh in double over
// every float input (docs/cpu_backend.md; test/test_vec_tanh.cpp sweeps each ISA twin), odd (tanh(-y) = -tanh(y) bit for bit), tanh(+-0) =
// +-0, tanh(+-inf) = +-1, tanh(NaN) = NaN, and |tanh(y)| <= 1.
// double lanes: std::tanh per lane (the finite-difference tests keep the library's accuracy).
//
// Method (float), on a = |y|:
//   a <= 0.9:  tanh(a) = a + a^3 P(a^2), P of degree 6, coefficients a minimax fit of the relative
//              error on (0, 0.9] (Lawson's iteratively reweighted least squares in double; the fit's
//              own error is 1.1e-9 relative, 0.02 ulp);
//   a > 0.9:   tanh(a) = 1 - 2 / (e^(2a) + 1) with the vector exp (llmc/cpu/vec_exp.h); e^(2a)
//              overflows to +inf for a > 44, which gives exactly 1. There 2 / (e^(2a) + 1) < 0.29, so
//              its relative error (about 2 ulp) costs under 1 ulp of the result.
// Both branches are computed and one is selected per lane; the sign of y is copied onto the result.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "llmc/cpu/simd.h"
#include "llmc/cpu/vec_exp.h"

namespace llmc {
namespace cpu {
namespace simd {

// tanh of every lane (see the file comment for accuracy and special values).
template <typename V>
LLMC_SIMD_INLINE V vtanh(const V& y) {
    using F = lane_t<V>;
    if constexpr (std::is_same<F, double>::value) {
        V r = y;
        for (int i = 0; i < lanes_of<V>(); i++) r[i] = std::tanh(y[i]);
        return r;
    } else {
        static_assert(std::is_same<F, float>::value, "vtanh: float or double lanes");
        typedef typename Vec<uint32_t, (int)sizeof(V)>::type U;
        U yb, sign, ab;
        std::memcpy(&yb, &y, sizeof(V));
        sign = yb & 0x80000000u;
        ab = yb ^ sign;
        V a;
        std::memcpy(&a, &ab, sizeof(V));  // |y| (NaN stays NaN)
        // small: a + a^3 P(a^2)
        const V a2 = a * a;
        V p = splat<V>(-4.55460104e-4f);
        p = p * a2 + 2.58266833e-3f;
        p = p * a2 + -8.26454442e-3f;
        p = p * a2 + 2.16635428e-2f;
        p = p * a2 + -5.39293028e-2f;
        p = p * a2 + 1.33329779e-1f;
        p = p * a2 + -3.33333224e-1f;
        const V small = (p * a2) * a + a;
        // large: 1 - 2 / (e^(2a) + 1)
        const V e = vexp(a + a);
        const V large = 1.0f - 2.0f / (e + 1.0f);
        const V t = a > 0.9f ? large : small;  // NaN compares false: the small branch keeps it
        U tb;
        std::memcpy(&tb, &t, sizeof(V));
        tb = tb | sign;
        V r;
        std::memcpy(&r, &tb, sizeof(V));
        return r;
    }
}

namespace detail {
// y[i] = tanh(x[i]) for i < n with vectors of VB bytes; the ragged tail goes through one padded vector.
template <int VB>
LLMC_SIMD_INLINE void tanh_array_impl(float* y, const float* x, size_t n) {
    typedef typename Vec<float, VB>::type V;
    constexpr int L = Vec<float, VB>::lanes;
    size_t i = 0;
    for (; i + L <= n; i += L) store(y + i, vtanh(load<V>(x + i)));
    if (i < n) {
        float buf[L] = {};
        std::memcpy(buf, x + i, (n - i) * sizeof(float));
        store(buf, vtanh(load<V>(buf)));
        std::memcpy(y + i, buf, (n - i) * sizeof(float));
    }
}
inline void tanh_array_base(float* y, const float* x, size_t n) { tanh_array_impl<16>(y, x, n); }
#ifdef LLMC_SIMD_X86
LLMC_TARGET_AVX2 inline void tanh_array_avx2(float* y, const float* x, size_t n) { tanh_array_impl<32>(y, x, n); }
LLMC_TARGET_AVX512 inline void tanh_array_avx512(float* y, const float* x, size_t n) { tanh_array_impl<64>(y, x, n); }
#endif
}  // namespace detail

// y (n) = tanh(x (n)) with the twin of `isa` (which must be isa_supported); y may equal x.
inline void tanh_array(float* y, const float* x, size_t n, Isa isa = isa_best()) {
#ifdef LLMC_SIMD_X86
    if (isa == Isa::Avx512) return detail::tanh_array_avx512(y, x, n);
    if (isa == Isa::Avx2) return detail::tanh_array_avx2(y, x, n);
#endif
    detail::tanh_array_base(y, x, n);
}

}  // namespace simd
}  // namespace cpu
}  // namespace llmc
