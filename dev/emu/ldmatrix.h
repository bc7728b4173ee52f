// Device emulation, the warp-level matrix load from shared memory:
//   ldmatrix.sync.aligned.m8n8.{.x1,.x2,.x4}{.trans}.shared.b16 r, [p];
// as a warp collective, from NVIDIA's PTX ISA ("Warp-level matrix load instruction: ldmatrix" and
// its figure "ldmatrix fragment layout for one 8x8 Matrix with 16-bit elements"):
//   - .x1/.x2/.x4 load 1/2/4 matrices of 8x8 16-bit elements; register r[m] holds this lane's
//     fragment of matrix m;
//   - each row of a matrix is 16 contiguous bytes at an address one lane supplies: lanes 0-7 the
//     rows 0-7 of matrix 0, lanes 8-15 those of matrix 1, 16-23 matrix 2, 24-31 matrix 3; the rows
//     need not be contiguous; only the lanes .num needs supply one (sm_90: the others are ignored);
//     each row address must be 16-byte aligned ("naturally aligned") and in .shared space;
//   - lane t receives the elements (row t/4, columns 2*(t%4) and 2*(t%4)+1) of each matrix, the
//     lower column in the lower 16 bits of the .b32 register;
//   - .trans loads the matrix "in column-major format": lane t receives the same positions of the
//     transposed matrix, i.e. stored elements (row 2*(t%4), column t/4) and (row 2*(t%4)+1, column t/4).
// .sync.aligned: all 32 lanes execute it with the same qualifiers (checked: a lane with another
// .num or .trans, or a partial warp, is an error). Each supplying lane reads its row when it
// reaches the instruction, so a row that another lane of the warp stores just before it, without a
// __syncwarp in between, may be read before or after that store depending on the schedule (the
// memory model orders neither way); the two-schedule comparison then differs.
// A misaligned or non-shared row address ends the run with "emulated device error: ldmatrix ..."
// naming the kernel, block and the lane that supplied it.
// test/gpu/test_ldmatrix_cp_async.cu checks this reading of the ISA, on emulation and on a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "dev/emu/block.h"
#include "dev/emu/shared_space.h"

namespace llmc::emu {

constexpr size_t kLdmatrixRowBytes = 16;  // one row: 8 elements of 16 bits

// The lane that supplies row `row` of matrix m (the ISA's table: threads 0-7 address matrix 0, ...).
inline int ldmatrix_row_supplier(int m, int row) { return 8 * m + row; }

// The faults, out of line and cold (block.h says why).
[[noreturn, gnu::noinline, gnu::cold]] inline void ldmatrix_num_fault(int num) {
    device_fault("ldmatrix.sync.aligned.m8n8: .x" + std::to_string(num) + " is not .x1, .x2 or .x4");
}
[[noreturn, gnu::noinline, gnu::cold]] inline void ldmatrix_row_fault(const char* op, const BlockCtx& b,
                                                                      const ThreadCtx& t, const void* row,
                                                                      const char* why) {
    device_fault(std::string(op) + " in " + b.where() + ": " + b.who(t) + " supplies the row address " +
                 address_text(row) + why);
}
[[noreturn, gnu::noinline, gnu::cold]] inline void ldmatrix_qualifier_fault(const char* op, const BlockCtx& b,
                                                                            const ThreadCtx& t, int lane, int num,
                                                                            bool trans) {
    device_fault(std::string(op) + " in " + b.where() + ": " + b.who(t) + " executes it while lane " +
                 std::to_string(lane) + " of its warp executes ldmatrix .x" + std::to_string(num) +
                 (trans ? ".trans" : "") + " (every lane must use the same qualifiers)");
}

// r[0 .. num-1] = this lane's fragments of `num` (1, 2, 4) matrices, transposed when `trans`;
// `row` is the row address this lane supplies.
inline void ldmatrix_m8n8_b16(uint32_t* r, int num, bool trans, const void* row) {
    static const char* const kNames[2][3] = {
        {"ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16"},
        {"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"}};
    if (num != 1 && num != 2 && num != 4) ldmatrix_num_fault(num);
    const char* op = kNames[trans ? 1 : 0][num == 4 ? 2 : num - 1];
    struct Supplied {
        const void* address;
        unsigned char bytes[kLdmatrixRowBytes];  // the row at `address`, read when this lane arrived
        int32_t num, trans;                      // the qualifiers this lane executes
    } mine{};
    static_assert(sizeof(Supplied) <= kWarpSlotBytes, "warp slot too small for an ldmatrix row");
    static_assert(offsetof(Supplied, trans) == offsetof(Supplied, num) + sizeof(int32_t), "read as one pair");
    BlockCtx& b = cur_block();
    ThreadCtx& t = cur_thread();
    const int lane = t.linear % kWarpSize;
    mine.address = row;
    mine.num = num;
    mine.trans = trans;
    if (lane < 8 * num) {
        if (reinterpret_cast<uintptr_t>(row) % kLdmatrixRowBytes != 0)
            ldmatrix_row_fault(op, b, t, row, ", which is not 16-byte aligned");
        if (!in_shared_memory(b, row, kLdmatrixRowBytes))
            ldmatrix_row_fault(op, b, t, row, ", which is not 16 bytes of shared memory (ldmatrix reads .shared)");
        std::memcpy(mine.bytes, row, kLdmatrixRowBytes);
    }
    WarpExchange x(0xffffffffu, &mine, sizeof mine, op);  // .sync.aligned: all 32 lanes
    // the lanes' payloads, read in place (byte buffers: fields are copied out, never dereferenced)
    const unsigned char(*from)[kWarpSlotBytes] = x.all_payloads(op);
    for (int l = 0; l < kWarpSize; l++) {
        int32_t q[2];
        std::memcpy(q, from[l] + offsetof(Supplied, num), sizeof q);
        if (q[0] != num || q[1] != (int32_t)trans) ldmatrix_qualifier_fault(op, b, t, l, q[0], q[1] != 0);
    }
    // element (row, col) of matrix m as it lies in shared memory
    auto stored = [&](int m, int r_, int c_) {
        const unsigned char* p = from[ldmatrix_row_supplier(m, r_)] + offsetof(Supplied, bytes) + 2 * c_;
        return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
    };
    const int frag_row = lane / 4, frag_col = 2 * (lane % 4);  // this lane's two elements of each matrix
    for (int m = 0; m < num; m++) {
        uint32_t v[2];
        for (int i = 0; i < 2; i++) {
            // .trans delivers the transpose: received element (r, c) = stored element (c, r)
            const int src_row = trans ? frag_col + i : frag_row;
            const int src_col = trans ? frag_row : frag_col + i;
            v[i] = stored(m, src_row, src_col);
        }
        r[m] = v[0] | (v[1] << 16);
    }
}

}  // namespace llmc::emu
