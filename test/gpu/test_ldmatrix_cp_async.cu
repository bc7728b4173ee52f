// The shared-memory instructions of the tensor-core kernels, alone (llmc/cuda/ptx.cuh):
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16   (ldmatrix_x1 .. ldmatrix_x4_trans)
//   cp.async.cg.shared.global 16 {, src-size}, cp.async.commit_group, cp.async.wait_group N,
//   cp.async.wait_all                                            (cp_async_16, cp_async_16_zfill, ...)
// What each must do is transcribed below from NVIDIA's PTX ISA ("Warp-level matrix load instruction:
// ldmatrix" with its fragment figure for 8x8 matrices of 16-bit elements; "cp.async",
// "cp.async.commit_group", "cp.async.wait_group / cp.async.wait_all"), not taken from the kernels
// or from the emulation:
//   - ldmatrix: every row of shared memory the lanes point at holds distinct random 16-bit values,
//     the rows lie at random 16-byte slots (the ISA: rows need not be contiguous), and every lane
//     supplies a distinct row address, so the lanes .x1/.x2 must ignore point at rows that would
//     show up if they were used. Every register of every lane must equal the ISA's element: a
//     misplaced element, a wrong matrix order or a wrong transpose changes a value;
//   - cp.async groups: three groups of 16-byte copies by 64 threads, the chunks read back by other
//     threads after cp.async.wait_group 1 (the oldest group), wait_group 0 (the second) and
//     wait_all (the third, still uncommitted before it);
//   - src-size: rows of every length 1..16 and ragged longer ones, each in an exact-size allocation,
//     copied in 16-byte chunks with the tail chunk zero-filled (and one chunk with src-size 0) into
//     shared memory prefilled with 0xA5: the row's bytes, then zeros.
// Runs on a GPU (the hardware is the arbiter of this reading of the ISA) and under emulation
// (where it checks dev/emu/ldmatrix.h and dev/emu/cp_async.h; there a read of a copy before its
// wait gets the emulation's poison, so a missing wait fails here). Exit 0 = pass, 1 = fail.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"

namespace ldmatrix_cp_async {

// ---- ldmatrix -----------------------------------------------------------------------------------
constexpr int kSlots = 64;  // 16-byte rows of the shared buffer the matrices' rows are placed in

template <int NUM, bool TRANS>
__device__ void ldmatrix(uint32_t (&r)[NUM], const void* row) {
    if constexpr (NUM == 1 && !TRANS) llmc::cuda::ldmatrix_x1(r, row);
    else if constexpr (NUM == 2 && !TRANS) llmc::cuda::ldmatrix_x2(r, row);
    else if constexpr (NUM == 4 && !TRANS) llmc::cuda::ldmatrix_x4(r, row);
    else if constexpr (NUM == 1) llmc::cuda::ldmatrix_x1_trans(r, row);
    else if constexpr (NUM == 2) llmc::cuda::ldmatrix_x2_trans(r, row);
    else llmc::cuda::ldmatrix_x4_trans(r, row);
}

// One warp: smem (kSlots rows of 8 elements) = image; lane l points at row lane_slot[l];
// out[l * 4 + m] = its register m.
template <int NUM, bool TRANS>
__device__ void ldmatrix_case(uint16_t* smem, uint32_t* out, const uint16_t* image, const int* lane_slot) {
    for (int i = threadIdx.x; i < kSlots * 8; i += 32) smem[i] = image[i];
    __syncthreads();
    uint32_t r[NUM];
    ldmatrix<NUM, TRANS>(r, smem + lane_slot[threadIdx.x] * 8);
    for (int m = 0; m < NUM; m++) out[threadIdx.x * 4 + m] = r[m];
}
template <int NUM, bool TRANS>
__global__ void ldmatrix_static_kernel(uint32_t* out, const uint16_t* image, const int* lane_slot) {
    __shared__ __align__(16) uint16_t smem[kSlots * 8];
    ldmatrix_case<NUM, TRANS>(smem, out, image, lane_slot);
}
template <int NUM, bool TRANS>
__global__ void ldmatrix_dynamic_kernel(uint32_t* out, const uint16_t* image, const int* lane_slot) {
    LLMC_DYNAMIC_SHARED(uint16_t, smem);
    ldmatrix_case<NUM, TRANS>(smem, out, image, lane_slot);
}

// ---- cp.async -----------------------------------------------------------------------------------
constexpr int kGroupChunks = 96;  // 16-byte chunks per group; 64 threads: threads 0-31 copy two, 32-63 one
constexpr int kGroupThreads = 64;

// Out chunk k of group g = the chunk src[g * kGroupChunks + k], copied by thread k % 64 and read
// back by thread (k + 37) % kGroupChunks % 64 (another thread: the barrier after the wait matters).
__global__ void cp_async_groups_kernel(uint4* out, const uint4* src) {
    __shared__ uint4 sbuf[3 * kGroupChunks];
    const int t = threadIdx.x;
    for (int g = 0; g < 2; g++) {
        for (int c = t; c < kGroupChunks; c += blockDim.x)
            llmc::cuda::cp_async_16(&sbuf[g * kGroupChunks + c], &src[g * kGroupChunks + c]);
        llmc::cuda::cp_async_commit_group();  // groups 0 and 1
    }
    for (int c = t; c < kGroupChunks; c += blockDim.x)  // not committed until the wait_all below
        llmc::cuda::cp_async_16(&sbuf[2 * kGroupChunks + c], &src[2 * kGroupChunks + c]);
    llmc::cuda::cp_async_wait_group<1>();  // group 0 complete (group 1 may still be pending)
    __syncthreads();
    for (int c = t; c < kGroupChunks; c += blockDim.x) {
        const int k = (c + 37) % kGroupChunks;
        out[k] = sbuf[k];
    }
    llmc::cuda::cp_async_wait_group<0>();  // group 1 complete
    __syncthreads();
    for (int c = t; c < kGroupChunks; c += blockDim.x) {
        const int k = kGroupChunks + (c + 37) % kGroupChunks;
        out[k] = sbuf[k];
    }
    llmc::cuda::cp_async_wait_all();  // the uncommitted copies: committed and complete
    __syncthreads();
    for (int c = t; c < kGroupChunks; c += blockDim.x) {
        const int k = 2 * kGroupChunks + (c + 37) % kGroupChunks;
        out[k] = sbuf[k];
    }
}

constexpr int kMaxRowBytes = 1024;
constexpr int kRaggedThreads = 48;  // a partial second warp: cp.async is per thread

// A row of `bytes` bytes in 16-byte chunks: whole chunks by cp_async_16, the tail chunk by the
// src-size form with the bytes left, and one more chunk with src-size 0 (nothing read). out gets
// the chunks + 1 chunks from shared memory prefilled with 0xA5.
__global__ void cp_async_ragged_kernel(uint4* out, const unsigned char* src, int bytes) {
    __shared__ uint4 sbuf[kMaxRowBytes / 16 + 1];
    const int chunks = (bytes + 15) / 16, t = threadIdx.x;
    for (int c = t; c <= chunks; c += blockDim.x) {
        unsigned char* d = reinterpret_cast<unsigned char*>(&sbuf[c]);
        for (int i = 0; i < 16; i++) d[i] = 0xA5;
        const int left = bytes - 16 * c;
        if (left >= 16) llmc::cuda::cp_async_16(&sbuf[c], src + 16 * c);
        else if (left > 0) llmc::cuda::cp_async_16_zfill(&sbuf[c], src + 16 * c, (uint32_t)left);
        else llmc::cuda::cp_async_16_zfill(&sbuf[c], src, 0);  // src-size 0: zeros, the source unread
    }
    llmc::cuda::cp_async_commit_group();
    llmc::cuda::cp_async_wait_group<0>();
    __syncthreads();
    for (int c = t; c <= chunks; c += blockDim.x) out[chunks - c] = sbuf[chunks - c];
}

}  // namespace ldmatrix_cp_async

namespace {
using namespace ldmatrix_cp_async;

#define CK(call) llmc::cuda::cuda_check((call), #call, __FILE__, __LINE__)

template <typename T>
T* to_device(const std::vector<T>& h) {
    T* d = nullptr;
    CK(cudaMalloc(&d, h.size() * sizeof(T)));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

// The PTX ISA's ldmatrix, on the host. Lane 8*m + j supplies the address of row j of matrix m
// (threads 0-7 matrix 0, 8-15 matrix 1, ...); lane t receives in register m the elements at row
// t/4, columns 2*(t%4) (bits 0-15) and 2*(t%4)+1 (bits 16-31) of matrix m, or with .trans of
// matrix m transposed: element (r, c) of the transpose is element (c, r) as stored.
uint32_t isa_ldmatrix_register(const std::vector<uint16_t>& image, const std::vector<int>& lane_slot, int lane, int m,
                               bool trans) {
    uint32_t reg = 0;
    for (int half = 0; half < 2; half++) {
        const int row = lane / 4, col = 2 * (lane % 4) + half;  // position in the delivered matrix
        const int stored_row = trans ? col : row, stored_col = trans ? row : col;
        const int supplier = 8 * m + stored_row;
        reg |= (uint32_t)image[lane_slot[supplier] * 8 + stored_col] << (16 * half);
    }
    return reg;
}

template <int NUM, bool TRANS>
int run_ldmatrix(bool dynamic, std::mt19937& gen) {
    const std::string name = std::string("ldmatrix.sync.aligned.m8n8.x") + std::to_string(NUM) +
                             (TRANS ? ".trans" : "") + ".shared.b16" +
                             (dynamic ? " (dynamic shared)" : " (static shared)");
    // distinct values (a misplaced element cannot match), never 0xFFFF (the output's poison half)
    std::vector<uint16_t> values(0xFFFF);
    std::iota(values.begin(), values.end(), 0);
    std::shuffle(values.begin(), values.end(), gen);
    std::vector<uint16_t> image(values.begin(), values.begin() + kSlots * 8);
    std::vector<int> slots(kSlots);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), gen);
    std::vector<int> lane_slot(slots.begin(), slots.begin() + 32);  // a distinct row per lane
    uint16_t* d_image = to_device(image);
    int* d_slot = to_device(lane_slot);
    uint32_t* d_out = nullptr;
    CK(cudaMalloc(&d_out, 32 * 4 * sizeof(uint32_t)));
    CK(cudaMemset(d_out, 0xFF, 32 * 4 * sizeof(uint32_t)));
    if (dynamic)
        llmc::cuda::launch_kernel(ldmatrix_dynamic_kernel<NUM, TRANS>, 1, 32, kSlots * 16, 0, d_out, d_image, d_slot);
    else llmc::cuda::launch_kernel(ldmatrix_static_kernel<NUM, TRANS>, 1, 32, 0, 0, d_out, d_image, d_slot);
    CK(cudaGetLastError());
    std::vector<uint32_t> out(32 * 4);
    CK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    CK(cudaFree(d_image));
    CK(cudaFree(d_slot));
    CK(cudaFree(d_out));
    int bad = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int m = 0; m < NUM; m++) {
            const uint32_t want = isa_ldmatrix_register(image, lane_slot, lane, m, TRANS);
            if (out[lane * 4 + m] != want && bad++ < 4)
                std::printf("    lane %2d register %d = 0x%08x, expected 0x%08x\n", lane, m, out[lane * 4 + m], want);
        }
    std::printf("  %s %s: %d of %d registers wrong\n", bad ? "FAIL" : "ok  ", name.c_str(), bad, 32 * NUM);
    return bad;
}

int check_bytes(const char* name, const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
    int bad = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (got[i] != want[i] && bad++ < 4)
            std::printf("    byte %zu (chunk %zu) = 0x%02x, expected 0x%02x\n", i, i / 16, got[i], want[i]);
    std::printf("  %s %s: %d of %zu bytes wrong\n", bad ? "FAIL" : "ok  ", name, bad, want.size());
    return bad;
}

// cp.async.wait_group 1 / 0 / wait_all over three groups of 16-byte copies.
int run_groups(std::mt19937& gen) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<unsigned char> src(3 * kGroupChunks * 16);
    for (auto& b : src) b = (unsigned char)byte(gen);
    unsigned char* d_src = to_device(src);
    uint4* d_out = nullptr;
    CK(cudaMalloc(&d_out, src.size()));
    CK(cudaMemset(d_out, 0xFF, src.size()));
    llmc::cuda::launch_kernel(cp_async_groups_kernel, 1, kGroupThreads, 0, 0, d_out,
                              reinterpret_cast<const uint4*>(d_src));
    CK(cudaGetLastError());
    std::vector<unsigned char> out(src.size());
    CK(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost));
    CK(cudaFree(d_src));
    CK(cudaFree(d_out));
    return check_bytes("cp.async groups (wait_group 1, wait_group 0, wait_all)", out, src);
}

// The src-size form on a row of `bytes` bytes held in an allocation of exactly that size.
int run_ragged(int bytes, std::mt19937& gen) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<unsigned char> row(bytes);
    for (auto& b : row) b = (unsigned char)byte(gen);
    const int chunks = (bytes + 15) / 16;
    std::vector<unsigned char> want((chunks + 1) * 16, 0);  // the ISA: bytes past src-size are zeros
    std::copy(row.begin(), row.end(), want.begin());
    unsigned char* d_row = to_device(row);
    uint4* d_out = nullptr;
    CK(cudaMalloc(&d_out, want.size()));
    CK(cudaMemset(d_out, 0xFF, want.size()));
    llmc::cuda::launch_kernel(cp_async_ragged_kernel, 1, kRaggedThreads, 0, 0, d_out, d_row, bytes);
    CK(cudaGetLastError());
    std::vector<unsigned char> out(want.size());
    CK(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost));
    CK(cudaFree(d_row));
    CK(cudaFree(d_out));
    const std::string name = "cp.async.cg 16, src-size: a row of " + std::to_string(bytes) + " bytes";
    return check_bytes(name.c_str(), out, want);
}

}  // namespace

int main() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        std::fprintf(stderr, "test_ldmatrix_cp_async: no CUDA device; run on a GPU machine or the emulated build\n");
        return 1;
    }
    std::mt19937 gen(std::random_device{}());
    std::printf("test_ldmatrix_cp_async: ldmatrix and cp.async per the PTX ISA\n");
    int bad = 0;
    for (int rep = 0; rep < 2; rep++) {
        bad += run_ldmatrix<1, false>(false, gen);
        bad += run_ldmatrix<2, false>(false, gen);
        bad += run_ldmatrix<4, false>(false, gen);
        bad += run_ldmatrix<1, true>(false, gen);
        bad += run_ldmatrix<2, true>(false, gen);
        bad += run_ldmatrix<4, true>(false, gen);
    }
    bad += run_ldmatrix<4, false>(true, gen);
    bad += run_ldmatrix<4, true>(true, gen);
    for (int rep = 0; rep < 2; rep++) bad += run_groups(gen);
    std::vector<int> sizes;
    for (int b = 1; b <= 16; b++) sizes.push_back(b);
    for (int b : {17, 31, 32, 33, 250, 1000, kMaxRowBytes}) sizes.push_back(b);
    std::uniform_int_distribution<int> any(1, kMaxRowBytes);
    for (int k = 0; k < 3; k++) sizes.push_back(any(gen));
    for (int b : sizes) bad += run_ragged(b, gen);
    std::printf("test_ldmatrix_cp_async: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
