// Row gather on the GPU: one row of each of B blocks of rows, e.g. the last position of each
// sequence of a (B, T, C) activation. A copy: the rows keep their bits.
#pragma once
#include <cstddef>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin

namespace llmc::cuda {

__global__ void gather_rows_kernel(floatX* out, const floatX* in, int B, int rows, int row, int C) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // over (B, C)
    if (idx >= (size_t)B * C) return;
    const size_t b = idx / C, c = idx % C;
    out[idx] = in[(b * rows + row) * C + c];
}

// out (B, C), OVERWRITTEN: out[b] = in[b, row] for in (B, rows, C), 0 <= row < rows.
inline void gather_rows(floatX* out, const floatX* in, int B, int rows, int row, int C, LaunchStream st) {
    const size_t work = (size_t)B * C;
    if (work == 0) return;
    constexpr int kBlock = 256;
    launch_kernel(gather_rows_kernel, (unsigned)ceil_div((long)work, kBlock), kBlock, 0, st, out, in, B, rows, row, C);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
