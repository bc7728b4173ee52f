// XOR swizzle of row-major shared-memory tiles of 16-bit elements, host and device (unit-tested on
// the CPU by test/test_smem_swizzle.cpp).
//
// A tile row of HD elements is CH = HD/8 chunks of 16 bytes. Shared memory has 32 banks of 4 bytes,
// so 8 chunks (128 bytes) form one bank line; an access of 8 chunks (one ldmatrix 8x8 matrix, or a
// phase of 8 lanes' 16-byte cp.async stores) is conflict-free when the 8 chunks fall into the 8
// different 16-byte bank groups (group = physical chunk index mod 8 of the flat tile).
// Rule: logical chunk c of row r is stored at physical chunk
//   CH >= 8: c ^ (r & 7)                 (low 3 bits flipped: stays inside its aligned group of 8)
//   CH <  8: c ^ ((r / (8/CH)) % CH)     (8/CH rows share a bank line; the line index picks the XOR)
// Then 8 consecutive rows at the same logical chunk (an ldmatrix matrix: rows 8k .. 8k+7, any
// chunk), and 8 consecutive flat chunks (the cp.async store of 8 lanes), both hit 8 bank groups.
#pragma once

#if defined(__CUDACC__)
#define LLMC_SWZ_HD __host__ __device__
#else
#define LLMC_SWZ_HD
#endif

namespace llmc {

// Physical 16-byte chunk of logical chunk `chunk` of row `row`, CH chunks per row (CH a power of
// two, 2..64).
LLMC_SWZ_HD constexpr int smem_swizzle_chunk(int row, int chunk, int CH) {
    return CH >= 8 ? (chunk ^ (row & 7)) : (chunk ^ ((row / (8 / CH)) & (CH - 1)));
}

// Element offset of (row, logical chunk) in a swizzled row-major tile of CH chunks per row.
LLMC_SWZ_HD constexpr int smem_swizzle_offset(int row, int chunk, int CH) {
    return row * CH * 8 + smem_swizzle_chunk(row, chunk, CH) * 8;
}

}  // namespace llmc
