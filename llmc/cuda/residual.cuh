// Residual connection on the GPU: out = a + b, and acc += x (the residual backward is two adds).
// CPU reference: llmc/cpu/residual.h.
//
// This file also holds the 16-byte packed access every element-wise kernel of the backend uses
// (PackX: 8 bf16 or 4 fp32 per load/store); gelu.cuh, encoder.cuh and layernorm.cuh include it.
// A kernel uses packs only when every pointer it touches is 16-byte aligned (host check); the
// remaining n % kPack elements, or all of them when a pointer is not aligned, go one at a time.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin

namespace llmc::cuda {

// ---- 16-byte packed access ----------------------------------------------------------------------
constexpr int kPack = 16 / (int)sizeof(floatX);  // elements of floatX per 16-byte access
struct alignas(16) PackX {
    floatX v[kPack];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// V consecutive elements p[0..V) as floats; V == kPack uses one 16-byte access (p aligned), V == 1 scalar.
template <int V>
__device__ inline void load_vec(float (&dst)[V], const floatX* p) {
    if constexpr (V == kPack && V > 1) {
        const PackX pk = *reinterpret_cast<const PackX*>(p);
#pragma unroll
        for (int k = 0; k < V; k++) dst[k] = to_float(pk.v[k]);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) dst[k] = to_float(p[k]);
    }
}
template <int V>
__device__ inline void store_vec(floatX* p, const float (&src)[V]) {
    if constexpr (V == kPack && V > 1) {
        PackX pk;
#pragma unroll
        for (int k = 0; k < V; k++) pk.v[k] = from_float<floatX>(src[k]);
        *reinterpret_cast<PackX*>(p) = pk;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) p[k] = from_float<floatX>(src[k]);
    }
}

// Grid for a grid-stride loop over `work` items with 256-thread blocks (capped: the loop covers the rest).
constexpr int kElementwiseBlock = 256;
inline int elementwise_grid(size_t work) {
    return (int)std::max<long>(1, std::min<long>(ceil_div((long)work, kElementwiseBlock), 8192));
}

// ---- kernels --------------------------------------------------------------------------------------
// The first n_packs * kPack elements in packs (n_packs = 0 when a pointer is unaligned), the rest scalar.
// out may alias a or b (each element is read and written by the same thread).
__global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t n_packs, size_t n) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t p = tid; p < n_packs; p += stride) {
        float x[kPack], y[kPack];
        load_vec<kPack>(x, a + p * kPack);
        load_vec<kPack>(y, b + p * kPack);
#pragma unroll
        for (int k = 0; k < kPack; k++) x[k] += y[k];
        store_vec<kPack>(out + p * kPack, x);
    }
    for (size_t i = n_packs * kPack + tid; i < n; i += stride)
        out[i] = from_float<floatX>(to_float(a[i]) + to_float(b[i]));
}

// ---- host API -------------------------------------------------------------------------------------
// out (n) = a (n) + b (n), OVERWRITTEN. out may alias a or b.
inline void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n, LaunchStream st) {
    if (n == 0) return;
    const bool vec = aligned16(out) && aligned16(a) && aligned16(b);
    const size_t n_packs = vec ? n / kPack : 0;
    const size_t work = std::max(n_packs, n - n_packs * kPack);
    launch_kernel(residual_forward_kernel, elementwise_grid(work), kElementwiseBlock, 0, st, out, a, b, n_packs, n);
    CUDA_CHECK_LAUNCH();
}

// acc (n) += x (n), ADDED.
inline void add_inplace(floatX* acc, const floatX* x, size_t n, LaunchStream st) {
    residual_forward(acc, acc, x, n, st);
}

}  // namespace llmc::cuda
