// Residual connection: out = a + b (elementwise, n elements).
#pragma once
#include <cstddef>

namespace llmc {
namespace cpu {

template <typename F>
void residual_forward(F* out, const F* a, const F* b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ADDS dout into both inputs' gradients (the residual stream: the exception of the gradient
// contract, docs/design.md) (da and db may be the same buffer only if the caller
// means to add dout twice).
template <typename F>
void residual_backward(F* da, F* db, const F* dout, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

}  // namespace cpu
}  // namespace llmc
