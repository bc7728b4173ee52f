// The emulated build's <cuda_runtime.h> (make emu puts dev/emu/include first on the include
// path): NVIDIA's own host headers for the types and the runtime API declarations
// (cuda_runtime_api.h, driver_types.h, vector_types.h; compiled by the host compiler), the CUDA
// C++ keywords mapped for a host compiler, the device-side names (dev/emu/device_api.h), and
// the C++ conveniences that nvcc's cuda_runtime.h adds over the C API. The C API itself is defined
// by dev/emu/runtime.cpp, linked into every emulated binary instead of libcudart.
#pragma once
#ifndef LLMC_EMULATE
#error "dev/emu/include is for the emulated build only (make emu defines LLMC_EMULATE)"
#endif

// CUDA C++ execution-space and memory-space keywords for the host compiler. A block's threads run
// one block at a time on the host thread, so a function-local static is exactly one block's
// shared variable. Every such variable is placed in one linker section, which the emulation
// poisons (0xFF bytes) before each block, as a GPU gives a block uninitialized shared memory;
// otherwise a block reading what it never wrote would see the previous block's values and a
// missing barrier could hide (docs/emulation.md).
#define __global__ inline
#define __device__
#define __host__
#define __shared__ static __attribute__((section("llmc_emu_shared")))
#define __constant__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <vector_types.h>

#include "dev/emu/device_api.h"

template <typename T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) {
    return ::cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <typename T>
inline cudaError_t cudaMallocHost(T** p, size_t bytes) {
    return ::cudaMallocHost(reinterpret_cast<void**>(p), bytes);
}
template <typename T>
inline cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e, unsigned int flags) { return ::cudaEventCreateWithFlags(e, flags); }
