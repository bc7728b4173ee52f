// Device emulation, the special-function base-2 exponential:
//   ex2.approx.ftz.f32 d, a;
// from NVIDIA's PTX ISA ("Floating Point Instructions: ex2"): d approximates 2^a; .ftz flushes a
// subnormal input to a sign-preserving zero (so d = 2^0 = 1) and a subnormal result to +0;
// special values: ex2(-Inf) = +0, ex2(+Inf) = +Inf, ex2(NaN) = NaN, ex2(+-0) = 1.
// The emulation returns the correctly rounded 2^a (within any approximation bound the hardware
// meets), then applies the flushes. test/gpu/test_ex2_approx.cu checks this reading of the ISA, on
// emulation and on a GPU.
#pragma once
#include <cmath>

namespace llmc::emu {

inline float ex2_approx_ftz_f32(float a) {
    if (std::isnan(a)) return a;
    if (std::fpclassify(a) == FP_SUBNORMAL) a = std::copysign(0.0f, a);  // .ftz input
    const float d = (float)std::exp2((double)a);
    if (std::fpclassify(d) == FP_SUBNORMAL) return 0.0f;  // .ftz result
    return d;
}

}  // namespace llmc::emu
