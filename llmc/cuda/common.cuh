// Shared pieces of the CUDA backend: the activation dtype (floatX), ceil_div, warp reductions and
// dtype conversions, and (from llmc/cuda/device_buffer.h) the error checks and an owning device
// buffer. Every llmc/cuda/*.cuh includes it.
//
// Precision (Makefile PRECISION=BF16|FP32 -> -DENABLE_BF16 / -DENABLE_FP32):
//   floatX   activations, activation gradients and the working copy of the parameters:
//            __nv_bfloat16 in the BF16 build, float in the FP32 build.
//   float    parameter gradients, fp32 master weights, AdamW moments, LayerNorm mean/rstd,
//            attention log-sum-exp, every accumulator.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "llmc/cuda/device_buffer.h"  // cuda_check, CUDA_CHECK, DeviceBuffer (host code)
#include "llmc/cuda/launch.cuh"       // launch_kernel, LLMC_DYNAMIC_SHARED: the seams of the emulated build

namespace llmc::cuda {

#if defined(ENABLE_FP32)
using floatX = float;
constexpr const char* kPrecisionName = "fp32";
#else
using floatX = __nv_bfloat16;
constexpr const char* kPrecisionName = "bf16";
#endif

__host__ __device__ constexpr inline long ceil_div(long a, long b) { return (a + b - 1) / b; }

// Conversions between floatX and float that work in both builds.
__device__ __host__ inline float to_float(float x) { return x; }
__device__ __host__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __host__ inline T from_float(float x);
template <>
__device__ __host__ inline float from_float<float>(float x) {
    return x;
}
template <>
__device__ __host__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}

// Warp-wide reductions (all 32 lanes active); every lane gets the result.
__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline float warp_min(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

}  // namespace llmc::cuda
