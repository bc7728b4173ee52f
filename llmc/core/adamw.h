// AdamW update of one fp32 parameter tensor (decoupled weight decay, as llm.c and PyTorch):
//   g = grads * grad_multiplier
//   m = beta1 m + (1 - beta1) g;       v = beta2 v + (1 - beta2) g^2
//   mhat = m / (1 - beta1^t);          vhat = v / (1 - beta2^t)
//   params -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params)
// t is the 1-based step count. The caller passes weight_decay = 0 for tensors that are not decayed.
#pragma once
#include <cmath>
#include <cstddef>

namespace llmc {

// params, grads, m, v: (n) fp32; m and v are updated in place.
inline void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, int t, float grad_multiplier) {
    const float bc1 = 1.0f - std::pow(beta1, (float)t);
    const float bc2 = 1.0f - std::pow(beta2, (float)t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float g = grads[i] * grad_multiplier;
        const float mi = beta1 * m[i] + (1.0f - beta1) * g;
        const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi / bc1;
        const float vhat = vi / bc2;
        params[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * params[i]);
    }
}

}  // namespace llmc
