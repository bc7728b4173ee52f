// Shared pieces of the CUDA backend: the activation dtype (floatX), error checks, ceil_div,
// warp reductions, dtype conversions and an owning device buffer. Every llmc/cuda/*.cuh includes it.
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

#include "llmc/cuda/launch.cuh"  // launch_kernel, LLMC_DYNAMIC_SHARED: the seams of the emulated build

namespace llmc::cuda {

#if defined(ENABLE_FP32)
using floatX = float;
constexpr const char* kPrecisionName = "fp32";
#else
using floatX = __nv_bfloat16;
constexpr const char* kPrecisionName = "bf16";
#endif

// A CUDA failure is not a user error: it throws std::runtime_error naming the call and place.
inline void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(e) + " in " + what + " at " + file +
                                 ":" + std::to_string(line));
}
#define CUDA_CHECK(call) ::llmc::cuda::cuda_check((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches launch-configuration errors (not asynchronous faults).
#define CUDA_CHECK_LAUNCH() ::llmc::cuda::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

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

// Owning device allocation of n elements of T (move-only). Zero-initialized on request.
template <typename T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t n, bool zero = false) { resize(n, zero); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) {
        o.ptr_ = nullptr;
        o.n_ = 0;
    }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = o.ptr_;
            n_ = o.n_;
            o.ptr_ = nullptr;
            o.n_ = 0;
        }
        return *this;
    }
    void resize(size_t n, bool zero = false) {
        release();
        if (n > 0) CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
        n_ = n;
        if (zero && n > 0) CUDA_CHECK(cudaMemset(ptr_, 0, n * sizeof(T)));
    }
    T* get() const { return ptr_; }
    T* data() const { return ptr_; }  // as std::vector names it (llmc/core/layer_acts.h reads both)
    size_t size() const { return n_; }
    size_t bytes() const { return n_ * sizeof(T); }

private:
    void release() {
        if (ptr_) cudaFree(ptr_);
        ptr_ = nullptr;
        n_ = 0;
    }
    T* ptr_ = nullptr;
    size_t n_ = 0;
};

// Owning page-locked host allocation of n elements of T (move-free): what an asynchronous device-to-host
// copy may target without blocking the host. resize() discards the contents; the caller makes sure no
// queued copy still targets the old allocation (cudaFreeHost would wait for it).
template <typename T>
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    ~PinnedBuffer() { release(); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    void resize(size_t n) {
        release();
        if (n > 0) CUDA_CHECK(cudaMallocHost(&ptr_, n * sizeof(T)));
        n_ = n;
    }
    T* get() const { return ptr_; }
    size_t size() const { return n_; }

private:
    void release() {
        if (ptr_) cudaFreeHost(ptr_);
        ptr_ = nullptr;
        n_ = 0;
    }
    T* ptr_ = nullptr;
    size_t n_ = 0;
};

}  // namespace llmc::cuda
