// Tests of the shared-memory XOR swizzle (llmc/core/smem_swizzle.h) that the FA2-class attention
// forward (llmc/cuda/attention_ls_fa2.cuh) uses for its Q, K and V tiles. Counted directly on the
// bank model (32 banks x 4 bytes; a 16-byte access occupies the 4 banks of group (byte address /
// 16) mod 8): for every row width the kernels use (CH = 4, 8, 16 chunks: head size 32, 64, 128)
//   - the map is a permutation of each row's chunks (nothing overwritten, nothing lost);
//   - every ldmatrix phase (8 consecutive rows starting at a multiple of 8, the same logical chunk)
//     reads 8 different bank groups, for .trans as well (it reads the same 8 row addresses);
//   - every cp.async store phase (8 consecutive flat chunk indices, as lanes 8k .. 8k+7 issue them)
//     writes 8 different bank groups;
// and, so that the counting itself is shown to detect conflicts, the unswizzled layout fails the
// ldmatrix check (8-way conflicts for CH >= 8, 2- and 4-way for CH = 4).
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "llmc/core/smem_swizzle.h"

namespace {

// Bank group (0..7) of the 16-byte chunk at element offset off (bf16 elements) of a tile.
int bank_group(int elem_off) { return (elem_off * 2 / 16) % 8; }

// Largest number of chunks of one ldmatrix phase sharing a bank group (1 = conflict-free), over
// every phase of a 64-row tile. swizzled = false: the plain row-major layout.
int worst_ldmatrix_conflict(int CH, bool swizzled) {
    int worst = 0;
    for (int r0 = 0; r0 < 64; r0 += 8)
        for (int c = 0; c < CH; c++) {
            int count[8] = {0};
            for (int j = 0; j < 8; j++) {
                const int r = r0 + j;
                const int off = swizzled ? llmc::smem_swizzle_offset(r, c, CH) : r * CH * 8 + c * 8;
                const int g = bank_group(off);
                count[g]++;
                worst = std::max(worst, count[g]);
            }
        }
    return worst;
}

}  // namespace

TEST_CASE("smem swizzle: permutation of each row's chunks", "[swizzle]") {
    for (int CH : {4, 8, 16}) {
        INFO("CH=" + std::to_string(CH));
        for (int r = 0; r < 64; r++) {
            std::set<int> seen;
            for (int c = 0; c < CH; c++) {
                const int p = llmc::smem_swizzle_chunk(r, c, CH);
                REQUIRE(p >= 0);
                REQUIRE(p < CH);
                seen.insert(p);
            }
            REQUIRE((int)seen.size() == CH);
        }
    }
}

TEST_CASE("smem swizzle: ldmatrix phases are conflict-free", "[swizzle]") {
    for (int CH : {4, 8, 16}) {
        INFO("CH=" + std::to_string(CH));
        REQUIRE(worst_ldmatrix_conflict(CH, true) == 1);
    }
}

TEST_CASE("smem swizzle: the bank count detects the unswizzled layout's conflicts", "[swizzle]") {
    REQUIRE(worst_ldmatrix_conflict(4, false) == 4);   // rows of 64 bytes: 2 rows per line
    REQUIRE(worst_ldmatrix_conflict(8, false) == 8);   // rows of 128 bytes: all 8 rows in one group
    REQUIRE(worst_ldmatrix_conflict(16, false) == 8);  // rows of 256 bytes
}

TEST_CASE("smem swizzle: cp.async store phases are conflict-free", "[swizzle]") {
    for (int CH : {4, 8, 16}) {
        INFO("CH=" + std::to_string(CH));
        for (int idx0 = 0; idx0 < 64 * CH; idx0 += 8) {  // lanes 8k .. 8k+7 store flat chunks idx0 .. idx0+7
            std::set<int> groups;
            for (int t = 0; t < 8; t++) {
                const int idx = idx0 + t, r = idx / CH, c = idx % CH;
                groups.insert(bank_group(llmc::smem_swizzle_offset(r, c, CH)));
            }
            REQUIRE(groups.size() == 8);
        }
    }
}
