// The seams between the kernels and the machine that runs them, each in one place, so that the
// emulated build (make emu, docs/emulation.md) runs the very same kernels on the CPU:
//   launch_kernel(kernel, grid, block, smem, stream, args...)   instead of kernel<<<...>>>(args...)
//   LLMC_DYNAMIC_SHARED(T, name);                               instead of extern __shared__ T name[]
// With nvcc they expand to exactly the CUDA constructs they replace. Inline-PTX instructions have
// their seam in llmc/cuda/ptx.cuh.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

#ifdef LLMC_EMULATE
#include "dev/emu/grid.h"
#endif

namespace llmc::cuda {

template <typename T>
struct NoDeduce {
    using type = T;
};

// Launches `kernel` on `grid` x `block` threads with `smem` bytes of dynamic shared memory on
// `stream`. The arguments convert to the kernel's parameter types as with <<<>>>. Launch errors
// are reported by cudaGetLastError (CUDA_CHECK_LAUNCH), as after <<<>>>.
template <typename... P>
inline void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          typename NoDeduce<P>::type... args) {
#ifdef LLMC_EMULATE
    // the emulation runs every stream in issue order; the body holds the arguments by value (a
    // capturing stream records it for a graph to run later)
    ::llmc::emu::run_grid(
        reinterpret_cast<const void*>(kernel), grid, block, smem, stream, [kernel, args...] { kernel(args...); },
        ::llmc::emu::launch_footprint(args...));
#else
    kernel<<<grid, block, smem, stream>>>(args...);
#endif
}

}  // namespace llmc::cuda

// The block's dynamic shared memory (the launch's `smem` bytes, 16-byte aligned) as `T* name`.
#ifdef LLMC_EMULATE
#define LLMC_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::llmc::emu::cur_block().dynamic_smem)
#else
#define LLMC_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif
