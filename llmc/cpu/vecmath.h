// exp and tanh for the CPU ops' inner loops, written so that those loops vectorize at plain -O2:
// no branches and no library calls (std::exp / std::tanh are scalar calls without -ffast-math,
// and the softmax over the vocabulary and GELU spend most of their time in them).
// The float versions are accurate to a few ulp (exp) or ~2e-7 absolute (tanh); the double
// overloads are the library functions, so the double instantiations used by the finite-
// difference tests stay exact references.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace llmc {
namespace cpu {

// exp(x) for float x <= 88 (callers pass x <= 0). x = n ln2 + r with |r| <= ln2/2 (ln2 split in
// two parts so that n * ln2_hi is exact); e^r by its Taylor polynomial to r^7 (truncation
// < 1e-8); 2^n built in the exponent bits. x < -87 (down to -inf) is raised to -87 by a bitwise
// select (a float select would stop the vectorizer), so it returns ~1.6e-38 instead of 0, which
// is harmless in sums and products with O(1) terms. NaN propagates.
inline float exp_fast(float x) {
    const float lo = -87.0f;
    const uint32_t below = 0u - (uint32_t)(x < lo);  // all ones when x < -87; never for NaN
    uint32_t xb, lob;
    std::memcpy(&xb, &x, 4);
    std::memcpy(&lob, &lo, 4);
    xb = (xb & ~below) | (lob & below);
    std::memcpy(&x, &xb, 4);
    const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    const float t = x * 1.44269504088896341f + shifter;
    const float n = t - shifter;  // round(x / ln2)
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    const float p =
        1.0f +
        r * (1.0f +
             r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
    uint32_t tb, sb;
    std::memcpy(&tb, &t, 4);
    std::memcpy(&sb, &shifter, 4);
    const uint32_t scale_bits = (tb - sb + 127u) << 23;  // n + 127 in the exponent field
    float scale;
    std::memcpy(&scale, &scale_bits, 4);
    return p * scale;
}
inline double exp_fast(double x) { return std::exp(x); }

// tanh(y) = sign(y) (1 - e^(-2|y|)) / (1 + e^(-2|y|)); e^(-2|y|) is in (0, 1], where exp_fast is
// accurate, so the error is ~1 ulp of 1 (absolute) for every y. NaN propagates.
inline float tanh_fast(float y) {
    const float t = exp_fast(-2.0f * std::fabs(y));
    return std::copysign((1.0f - t) / (1.0f + t), y);
}
inline double tanh_fast(double y) { return std::tanh(y); }

}  // namespace cpu
}  // namespace llmc
