// GELU on the GPU in the two kinds of llmc/core/model_config.h (Gelu), chosen by a runtime argument:
//   Tanh (GPT-2):  gelu(x)  = 0.5 x (1 + th),  th = tanh(k (x + 0.044715 x^3)),  k = sqrt(2/pi)
//                  gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 * 0.044715 x^2)
//   Erf (exact):   gelu(x)  = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
//                  gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// CPU reference: llmc/cpu/gelu.h (same math and gradient contract: dinp is overwritten; docs/design.md).
// Math in fp32 (tanhf; erff and expf), 16-byte packed loads/stores when the pointers allow (residual.cuh).
// The kind is a kernel argument, not a template parameter: one kernel per direction (the names the
// SASS report and the launch probe list); the kernel branches once, uniformly over the grid, into
// its body for that kind.
#pragma once
#include <cstddef>

#include "llmc/core/model_config.h"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin
#include "llmc/cuda/residual.cuh"

namespace llmc::cuda {

__device__ inline float gelu_tanh_value(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
__device__ inline float gelu_tanh_grad(float x) {
    const float k = 0.7978845608028654f;
    const float th = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * k * (1.0f + 3.0f * 0.044715f * x * x);
}
__device__ inline float gelu_erf_value(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));  // 1 / sqrt(2)
}
__device__ inline float gelu_erf_grad(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
    const float pdf = 0.39894228040143267794f * expf(-0.5f * x * x);  // 1 / sqrt(2 pi)
    return cdf + x * pdf;
}
__device__ inline float gelu_value(float x, Gelu kind) {
    return kind == Gelu::Erf ? gelu_erf_value(x) : gelu_tanh_value(x);
}
__device__ inline float gelu_grad(float x, Gelu kind) {
    return kind == Gelu::Erf ? gelu_erf_grad(x) : gelu_tanh_grad(x);
}

// The kernels' bodies for one kind (device functions: each kernel branches once on its kind argument,
// so each kind's loop is compiled on its own, registers as if the other did not exist).
template <Gelu K>
__device__ inline void gelu_forward_body(floatX* out, const floatX* inp, size_t n_packs, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t p = tid; p < n_packs; p += stride) {
        float x[kPack];
        load_vec<kPack>(x, inp + p * kPack);
#pragma unroll
        for (int k = 0; k < kPack; k++) x[k] = gelu_value(x[k], K);
        store_vec<kPack>(out + p * kPack, x);
    }
    for (size_t i = n_packs * kPack + tid; i < n; i += stride)
        out[i] = from_float<floatX>(gelu_value(to_float(inp[i]), K));
}
template <Gelu K>
__device__ inline void gelu_backward_body(floatX* dinp, const floatX* inp, const floatX* dout, size_t n_packs,
                                          size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t p = tid; p < n_packs; p += stride) {
        float x[kPack], d[kPack];
        load_vec<kPack>(x, inp + p * kPack);
        load_vec<kPack>(d, dout + p * kPack);
#pragma unroll
        for (int k = 0; k < kPack; k++) x[k] = d[k] * gelu_grad(x[k], K);
        store_vec<kPack>(dinp + p * kPack, x);
    }
    for (size_t i = n_packs * kPack + tid; i < n; i += stride)
        dinp[i] = from_float<floatX>(to_float(dout[i]) * gelu_grad(to_float(inp[i]), K));
}

// out (n) = gelu(inp (n)); first n_packs * kPack elements in packs, the rest scalar.
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n_packs, size_t n, Gelu kind) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    if (kind == Gelu::Erf) gelu_forward_body<Gelu::Erf>(out, inp, n_packs, n);
    else gelu_forward_body<Gelu::Tanh>(out, inp, n_packs, n);
}

// dinp (n) = dout (n) * gelu'(inp (n)); dinp may alias dout (same thread reads then writes an element).
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n_packs, size_t n,
                                     Gelu kind) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    if (kind == Gelu::Erf) gelu_backward_body<Gelu::Erf>(dinp, inp, dout, n_packs, n);
    else gelu_backward_body<Gelu::Tanh>(dinp, inp, dout, n_packs, n);
}

// out (n) = gelu(inp (n)) of the given kind, OVERWRITTEN. out may alias inp. One launch.
inline void gelu_forward(floatX* out, const floatX* inp, size_t n, Gelu kind, LaunchStream st) {
    if (n == 0) return;
    const size_t n_packs = aligned16(out) && aligned16(inp) ? n / kPack : 0;
    const size_t work = std::max(n_packs, n - n_packs * kPack);
    launch_kernel(gelu_forward_kernel, elementwise_grid(work), kElementwiseBlock, 0, st, out, inp, n_packs, n, kind);
    CUDA_CHECK_LAUNCH();
}

// dinp (n) = dout * gelu'(inp) of the given kind, OVERWRITTEN; dinp may alias dout. One launch.
inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, Gelu kind, LaunchStream st) {
    if (n == 0) return;
    const size_t n_packs = aligned16(dinp) && aligned16(inp) && aligned16(dout) ? n / kPack : 0;
    const size_t work = std::max(n_packs, n - n_packs * kPack);
    launch_kernel(gelu_backward_kernel, elementwise_grid(work), kElementwiseBlock, 0, st, dinp, inp, dout, n_packs, n,
                  kind);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
