// GELU, tanh approximation (GPT-2):  gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi)
// tanh is vecmath.h's branch-free one, so the loops vectorize.
#pragma once
#include <cmath>
#include <cstddef>

#include "llmc/cpu/vecmath.h"

namespace llmc {
namespace cpu {

// out (n) = gelu(inp (n)), elementwise.
template <typename F>
void gelu_forward(F* out, const F* inp, size_t n) {
    const F k = F(0.7978845608028654);  // sqrt(2 / pi)
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const F x = inp[i];
        out[i] = F(0.5) * x * (F(1) + tanh_fast(k * (x + F(0.044715) * x * x * x)));
    }
}

// dinp = dout * gelu'(inp) (all (n); overwritten).
//   gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 * 0.044715 x^2),  th = tanh(k (x + 0.044715 x^3))
template <typename F>
void gelu_backward(F* dinp, const F* inp, const F* dout, size_t n) {
    const F k = F(0.7978845608028654);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const F x = inp[i];
        const F th = tanh_fast(k * (x + F(0.044715) * x * x * x));
        const F grad = F(0.5) * (F(1) + th) + F(0.5) * x * (F(1) - th * th) * k * (F(1) + F(3 * 0.044715) * x * x);
        dinp[i] = dout[i] * grad;
    }
}

}  // namespace cpu
}  // namespace llmc
