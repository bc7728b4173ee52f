// mma.m16n8k16 fragment helpers of the FA2-class attention kernels (llmc/cuda/attention_ls_fa2.cuh,
// llmc/cuda/attention_ls_fa2_bwd.cuh): bf16 pair packing, accumulators repacked as an A fragment, an
// accumulator row stored as bf16.
#pragma once
#include <cstdint>
#include <cstring>

#include "llmc/cuda/common.cuh"

namespace llmc::cuda {

// mma.m16n8k16 fragment helpers (layouts: PTX ISA "Matrix Fragments for mma.m16n8k16 with floating
// point type"; g = lane/4, c = lane%4; C/D (16x8 fp32), 4 floats: c0,c1 = C[g][2c, 2c+1], c2,c3 =
// C[g+8][2c, 2c+1]).

// Pack two floats to a bf16 pair register: lo in the low half (lower index), hi in the high half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo = low 16 bits
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);  // no type pun (strict aliasing); one register move
    return bits;
}

// The accumulators of two adjacent n-blocks (columns 0..7 in lo, 8..15 in hi) as the A fragment of
// the 16x16 block they form (rounded to bf16).
__device__ __forceinline__ void mma_acc_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
    a[0] = pack_bf16x2(lo[0], lo[1]);  // row g,   cols 2c, 2c+1
    a[1] = pack_bf16x2(lo[2], lo[3]);  // row g+8, cols 2c, 2c+1
    a[2] = pack_bf16x2(hi[0], hi[1]);  // row g,   cols 8+2c, 8+2c+1
    a[3] = pack_bf16x2(hi[2], hi[3]);  // row g+8
}

// Writes one of this thread's two rows (hf) of a (16 x 8*DB) accumulator, times mul, as bf16 pairs;
// row points at column 2c of that row in global memory.
template <int DB>
__device__ __forceinline__ void mma_store_row(__nv_bfloat16* row, const float (&acc)[DB][4], int hf, float mul) {
#pragma unroll
    for (int db = 0; db < DB; db++)
        *reinterpret_cast<uint32_t*>(row + db * 8) = pack_bf16x2(acc[db][2 * hf] * mul, acc[db][2 * hf + 1] * mul);
}

}  // namespace llmc::cuda
