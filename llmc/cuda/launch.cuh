// The seams between the kernels and the machine that runs them, each in one place, so that the
// emulated build (make emu, docs/emulation.md) runs the very same kernels on the CPU:
//   launch_kernel(kernel, grid, block, smem, stream, args...)   instead of kernel<<<...>>>(args...)
//                                                               (cudaLaunchKernelEx for a programmatic launch)
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

// A stream and how kernels are launched on it. programmatic: with programmatic stream serialization
// (programmatic dependent launch, sm_90+; --pdl 1): the kernel may be scheduled before the previous
// kernel on the stream has completed, once that one has executed griddep_launch_dependents in every
// block, and waits for it in griddep_wait (llmc/cuda/ptx.cuh). Every kernel launched so must execute
// griddep_wait in every thread before it touches global memory, and before it ends: each kernel of
// the backend begins with griddep_begin(), and the emulation refuses a thread that ends without
// the wait (dev/emu/griddep.h). Converts from and to cudaStream_t: a plain cudaStream_t launches
// in stream order, and a function that takes a cudaStream_t gets the stream alone.
struct LaunchStream {
    cudaStream_t stream = nullptr;
    bool programmatic = false;
    LaunchStream(cudaStream_t s, bool prog = false) : stream(s), programmatic(prog) {}  // NOLINT: implicit
    operator cudaStream_t() const { return stream; }                                    // NOLINT: implicit
};

// Launches `kernel` on `grid` x `block` threads with `smem` bytes of dynamic shared memory on
// `stream`. The arguments convert to the kernel's parameter types as with <<<>>>. Launch errors
// are reported by cudaGetLastError (CUDA_CHECK_LAUNCH), as after <<<>>>.
template <typename... P>
inline void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, LaunchStream stream,
                          typename NoDeduce<P>::type... args) {
#ifdef LLMC_EMULATE
    // the emulation runs every stream in issue order; the body holds the arguments by value (a
    // capturing stream records it for a graph to run later)
    ::llmc::emu::run_grid(
        reinterpret_cast<const void*>(kernel), grid, block, smem, stream.stream, stream.programmatic,
        [kernel, args...] { kernel(args...); }, ::llmc::emu::launch_footprint(args...));
#else
    if (!stream.programmatic) {
        kernel<<<grid, block, smem, stream.stream>>>(args...);
        return;
    }
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream.stream;
    config.attrs = attr;
    config.numAttrs = 1;
    // an error is left for cudaGetLastError, as a refused <<<>>> leaves it
    (void)cudaLaunchKernelEx(&config, kernel, args...);
#endif
}

}  // namespace llmc::cuda

// The block's dynamic shared memory (the launch's `smem` bytes, 16-byte aligned) as `T* name`.
#ifdef LLMC_EMULATE
#define LLMC_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::llmc::emu::cur_block().dynamic_smem)
#else
#define LLMC_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif
