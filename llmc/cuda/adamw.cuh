// AdamW on the GPU with fp32 master weights: exactly llmc/core/adamw.h's formula,
//   g = grads * grad_multiplier
//   m = beta1 m + (1 - beta1) g;       v = beta2 v + (1 - beta2) g^2
//   mhat = m / (1 - beta1^t);          vhat = v / (1 - beta2^t)
//   master -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * master)
// t is the 1-based step. The bias corrections are computed on the host with the CPU's expression,
// and the kernel uses explicitly rounded operations (__fmul_rn, __fadd_rn, ...: no FMA contraction)
// with IEEE division and sqrt, so it reproduces an fp32 CPU build that does not contract either
// (g++ for x86-64 without -mfma); elsewhere the two differ by a few ulp.
//
// The working copy params (floatX) is written from the new master:
//   BF16 build: stochastic rounding. bf16 is the top 16 bits of fp32; we add a random 16-bit
//   integer r to the bit pattern and truncate to the top 16 bits, so the magnitude rounds up with
//   probability (low 16 bits of x) / 2^16 and down otherwise: E[round(x)] = x (unbiased).
//   r = low 16 bits of sr_hash(seed, i), a counter-based hash (Chris Wellons' "lowbias32" integer
//   mixer applied to the seed, the high and the low 32 bits of the element index i), so the
//   result is a pure function of (x, seed, i): deterministic for a given seed and independent of
//   the launch shape. Non-finite x is converted with round-to-nearest. The caller passes a
//   different seed per step and per tensor (e.g. a hash of both).
//   FP32 build: an exact copy (params may alias master).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "llmc/cuda/common.cuh"

namespace llmc::cuda {

namespace detail {

// "lowbias32" integer hash (bijective 32-bit mixer).
__device__ __host__ inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
__device__ __host__ inline uint32_t sr_hash(uint32_t seed, size_t i) {
    return mix32((uint32_t)i ^ mix32(seed ^ mix32((uint32_t)((uint64_t)i >> 32) + 0x9e3779b9u)));
}

// fp32 -> bf16 with stochastic rounding, random bits from sr_hash(seed, i). Host and device.
__device__ __host__ inline __nv_bfloat16 stochastic_round_bf16(float x, uint32_t seed, size_t i) {
    if (!(x - x == 0.0f)) return __float2bfloat16_rn(x);  // inf or NaN: round to nearest
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    bits += sr_hash(seed, i) & 0xFFFFu;  // carries into the kept bits with probability low16 / 2^16
    __nv_bfloat16_raw r;
    r.x = (unsigned short)(bits >> 16);
    return __nv_bfloat16(r);
}

inline __device__ void store_param(float* p, float x, uint32_t, size_t i) { p[i] = x; }
inline __device__ void store_param(__nv_bfloat16* p, float x, uint32_t seed, size_t i) {
    p[i] = stochastic_round_bf16(x, seed, i);
}

__global__ void adamw_kernel(floatX* params, float* master, const float* grads, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
                             float grad_multiplier, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = __fmul_rn(grads[i], grad_multiplier);
        const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(1.0f - beta1, g));
        const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
        m[i] = mi;
        v[i] = vi;
        const float mhat = __fdiv_rn(mi, bc1);
        const float vhat = __fdiv_rn(vi, bc2);
        const float p = master[i];
        const float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)), __fmul_rn(weight_decay, p));
        const float np = __fsub_rn(p, __fmul_rn(lr, step));
        master[i] = np;
        if (params) store_param(params, np, seed, i);
    }
}

__global__ void copy_master_kernel(floatX* params, const float* master, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        params[i] = from_float<floatX>(master[i]);  // round to nearest even
}

inline unsigned adamw_grid(size_t n, int block) {
    const long blocks = ceil_div((long)n, block);
    return (unsigned)(blocks < 8192 ? (blocks > 0 ? blocks : 1) : 8192);  // grid-stride beyond
}

}  // namespace detail

// master, m, v (n) fp32 updated in place; grads (n) fp32 read (times grad_multiplier);
// params (n) floatX written from the new master (nullable). FP32 build: params may alias master.
inline void adamw_update(floatX* params, float* master, const float* grads, float* m, float* v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int t, float grad_multiplier,
                         uint32_t seed, cudaStream_t st) {
    if (n == 0) return;
    // the CPU's bias corrections, bit for bit
    const float bc1 = 1.0f - std::pow(beta1, (float)t);
    const float bc2 = 1.0f - std::pow(beta2, (float)t);
    constexpr int block = 256;
    launch_kernel(detail::adamw_kernel, detail::adamw_grid(n, block), block, 0, st, params, master, grads, m, v, n, lr,
                  beta1, beta2, eps, weight_decay, bc1, bc2, grad_multiplier, seed);
    CUDA_CHECK_LAUNCH();
}

// params (n) floatX = master (n) fp32, rounded to nearest (deterministic); for set_params.
inline void copy_master_to_params(floatX* params, const float* master, size_t n, cudaStream_t st) {
    if (n == 0) return;
    constexpr int block = 256;
    launch_kernel(detail::copy_master_kernel, detail::adamw_grid(n, block), block, 0, st, params, master, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
