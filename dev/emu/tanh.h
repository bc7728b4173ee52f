// Device emulation, the special-function hyperbolic tangent:
//   tanh.approx.f32 d, a;
// from NVIDIA's PTX ISA ("Floating Point Instructions: tanh"): d approximates tanh(a) with a
// relative error of at most 2^-11 over the whole float range; corner cases: tanh(-Inf) = -1.0,
// tanh(-0.0) = -0.0, tanh(+0.0) = +0.0, tanh(+Inf) = 1.0, tanh(NaN) = NaN; subnormal inputs are
// passed through to the output (tanh(a) ~ a). Requires sm_75.
// The emulation is pessimistic: it returns tanh(a) with a relative error just under the documented
// bound, its sign taken from the input's lowest mantissa bit (neighbouring inputs err in opposite
// directions rather than all scaling alike), kept within [-1, 1] (the function's range; the ISA
// states no more). The kernels' checks under emulation thus see errors as large as the ISA allows
// (one pattern of them, not every one). test/gpu/test_tanh_approx.cu checks this reading of the
// ISA, on emulation and on a GPU.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace llmc::emu {

// The ISA's bound on tanh.approx.f32's relative error.
constexpr double kTanhApproxMaxRelError = 0x1p-11;

inline float tanh_approx_f32(float a) {
    if (std::isnan(a)) return a;
    if (std::isinf(a)) return a > 0.0f ? 1.0f : -1.0f;
    if (a == 0.0f || std::fpclassify(a) == FP_SUBNORMAL) return a;  // signed zeros, subnormals: a itself
    uint32_t bits;
    std::memcpy(&bits, &a, 4);
    const double sign = (bits & 1u) ? 1.0 : -1.0;
    // 2^-11 less 2^-20: the error after rounding to float stays under the bound
    const double d = std::tanh((double)a) * (1.0 + sign * (kTanhApproxMaxRelError - 0x1p-20));
    return (float)std::fmax(-1.0, std::fmin(1.0, d));
}

}  // namespace llmc::emu
