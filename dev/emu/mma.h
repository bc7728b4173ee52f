// Device emulation, the tensor-core instruction the kernels use:
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c;   (D = A * B + C)
// as a warp collective, from NVIDIA's PTX ISA ("Warp-level Matrix Fragments for mma.m16n8k16 with
// floating point type"): every lane contributes its fragments of A (16x16, four .b32 registers of
// two bf16), B (16x8, two .b32 registers) and C (16x8, four .f32), and receives its fragment of D.
// Within a .b32 register the element with the lower index is in the lower 16 bits.
//
// The ISA's mapping, with groupID = laneid >> 2 and threadID_in_group = laneid % 4:
//   A element a_i (i = 0..7):  row = groupID       for i in {0,1,4,5}, groupID + 8 otherwise
//                              col = threadID_in_group*2 + (i & 1)     (+ 8 for i >= 4)
//   B element b_i (i = 0..3):  row = threadID_in_group*2 + (i & 1)     (+ 8 for i >= 2)
//                              col = groupID
//   C/D element c_i (i = 0..3): row = groupID (+ 8 for i >= 2),  col = threadID_in_group*2 + (i & 1)
// The mapping is kept in three small tables below (a_row/a_col, ...), filled from those formulas;
// test/gpu/test_mma_fragments.cu checks them against a direct reading of the ISA, on emulation and
// on a GPU.
//
// Numerics: the bf16 products are exact in fp32; they and C are summed in double and rounded to
// fp32 once. A tensor core's internal accumulation order and precision are not documented, so a
// GPU may differ from this in the last bits of fp32 (docs/emulation.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dev/emu/block.h"

namespace llmc::emu {

struct MmaLayout16816 {
    int a_row[kWarpSize][8], a_col[kWarpSize][8];
    int b_row[kWarpSize][4], b_col[kWarpSize][4];
    int c_row[kWarpSize][4], c_col[kWarpSize][4];
    // The same mapping read the other way: which lane's fragment element i holds A[r][c] (a_lane,
    // a_elem) and B[r][c] (b_lane, b_elem). The constructor checks that the formulas above give every
    // element of A and B exactly once (a table that names one twice or misses one aborts).
    int a_lane[16][16], a_elem[16][16];
    int b_lane[16][8], b_elem[16][8];
    MmaLayout16816() {
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) a_lane[r][c] = a_elem[r][c] = -1;
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8; c++) b_lane[r][c] = b_elem[r][c] = -1;
        bool one_to_one = true;
        for (int lane = 0; lane < kWarpSize; lane++) {
            const int group = lane >> 2, tig = lane % 4;
            for (int i = 0; i < 8; i++) {
                a_row[lane][i] = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
                a_col[lane][i] = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
                int& owner = a_lane[a_row[lane][i]][a_col[lane][i]];
                one_to_one = one_to_one && owner < 0;
                owner = lane;
                a_elem[a_row[lane][i]][a_col[lane][i]] = i;
            }
            for (int i = 0; i < 4; i++) {
                b_row[lane][i] = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
                b_col[lane][i] = group;
                c_row[lane][i] = group + (i >= 2 ? 8 : 0);
                c_col[lane][i] = tig * 2 + (i & 1);
                int& owner = b_lane[b_row[lane][i]][b_col[lane][i]];
                one_to_one = one_to_one && owner < 0;
                owner = lane;
                b_elem[b_row[lane][i]][b_col[lane][i]] = i;
            }
        }
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) one_to_one = one_to_one && a_lane[r][c] >= 0 && (c >= 8 || b_lane[r][c] >= 0);
        if (!one_to_one) {
            std::fprintf(stderr, "dev/emu/mma.h: the m16n8k16 fragment tables do not cover A and B one to one\n");
            std::abort();
        }
    }
};

inline float bf16_bits_to_float(uint32_t bits16) {
    const uint32_t u = bits16 << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

struct MmaFragments16816 {
    uint32_t a[4], b[2];
    float c[4];
};
static_assert(sizeof(MmaFragments16816) <= kWarpSlotBytes, "warp slot too small for mma fragments");

// Lane `me`'s four elements of D from the 32 lanes' fragments (slot l holds lane l's, as bytes:
// registers are copied out, never dereferenced): D[r][col] = C[r][col] + sum_k A[r][k] * B[k][col]
// at this lane's (c_row, c_col), C being this lane's own c[i]. Each row of A and column of B the lane
// needs is gathered once. It reads the emulation's own memory only (the warp's slots, the tables),
// so the sanitizers, which are there for the kernels' accesses, do not instrument it (the
// fragments were copied in with checks).
__attribute__((no_sanitize("address", "undefined"))) inline void mma_16816_lane_d(
    const MmaLayout16816& L, const unsigned char (*from)[kWarpSlotBytes], int me, float d[4]) {
    // (always_inline: the emulated build's -O1 would otherwise call these lambdas per element, the
    // hottest code of an emulated attention kernel)
    auto reg = [&](int lane, size_t field, int index) __attribute__((always_inline)) {
        uint32_t v;
        std::memcpy(&v, from[lane] + field + 4 * index, 4);
        return v;
    };
    // element i of a fragment register array: two bf16 per .b32, the lower index in the lower 16 bits
    auto a_at = [&](int r, int c) __attribute__((always_inline)) {
        const uint32_t v = reg(L.a_lane[r][c], offsetof(MmaFragments16816, a), L.a_elem[r][c] / 2);
        return bf16_bits_to_float((L.a_elem[r][c] & 1) ? v >> 16 : v & 0xFFFFu);
    };
    auto b_at = [&](int r, int c) __attribute__((always_inline)) {
        const uint32_t v = reg(L.b_lane[r][c], offsetof(MmaFragments16816, b), L.b_elem[r][c] / 2);
        return bf16_bits_to_float((L.b_elem[r][c] & 1) ? v >> 16 : v & 0xFFFFu);
    };
    float c_own[4];
    std::memcpy(c_own, from[me] + offsetof(MmaFragments16816, c), sizeof c_own);
    double a_rows[4][16], b_cols[4][16];
    int row_of[4], col_of[4], rows = 0, cols = 0;
    for (int i = 0; i < 4; i++) {
        const int r = L.c_row[me][i], col = L.c_col[me][i];
        int ri = 0, ci = 0;
        while (ri < rows && row_of[ri] != r) ri++;
        if (ri == rows) {
            row_of[rows++] = r;
            for (int k = 0; k < 16; k++) a_rows[ri][k] = a_at(r, k);
        }
        while (ci < cols && col_of[ci] != col) ci++;
        if (ci == cols) {
            col_of[cols++] = col;
            for (int k = 0; k < 16; k++) b_cols[ci][k] = b_at(k, col);
        }
        double acc = c_own[i];
        for (int k = 0; k < 16; k++) acc += a_rows[ri][k] * b_cols[ci][k];
        d[i] = (float)acc;
    }
}

// d may alias c (the kernels accumulate in place).
inline void mma_m16n8k16_row_col_f32_bf16_bf16_f32(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                   const float c[4]) {
    static const MmaLayout16816 L;
    MmaFragments16816 mine;
    std::memcpy(mine.a, a, sizeof mine.a);
    std::memcpy(mine.b, b, sizeof mine.b);
    std::memcpy(mine.c, c, sizeof mine.c);
    const char* op = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
    WarpExchange x(0xffffffffu, &mine, sizeof mine, op);  // .sync.aligned: all 32 lanes
    float out[4];
    mma_16816_lane_d(L, x.all_payloads(op), x.lane(), out);
    std::memcpy(d, out, sizeof out);
}

}  // namespace llmc::emu
