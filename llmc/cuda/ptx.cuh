// Inline PTX, one device function per instruction: the only place the kernels touch PTX, so that
// the emulated build (make emu) swaps in a twin written from NVIDIA's PTX ISA document
// (dev/emu/mma.h) and nothing else changes.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#ifdef LLMC_EMULATE
#include "dev/emu/mma.h"
#endif

namespace llmc::cuda {

// c += A * B for one warp: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32. A (16x16 bf16,
// row-major) in a[4], B (16x8 bf16, column-major) in b0, b1, C/D (16x8 fp32) in c[4], each lane
// holding its fragment as the PTX ISA lays it out ("Matrix Fragments for mma.m16n8k16").
__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(LLMC_EMULATE)
    const uint32_t b[2] = {b0, b1};
    ::llmc::emu::mma_m16n8k16_row_col_f32_bf16_bf16_f32(c, a, b, c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();  // the host launcher only runs this path on sm_80+
#endif
}

}  // namespace llmc::cuda
