// A lab candidate (not used by the trainer): a GEMM whose whole reduction dimension K sits in shared
// memory, with the erf/tanh GELU forward or backward in its epilogue. Its purpose: at the paper
// model's C = 192, the MLP's two GEMMs whose K is C (fc forward, fcproj's dinp) are followed by a
// GELU pass over the (N, 4C) hidden activation (gelu_forward_kernel, gelu_backward_kernel: 475 us of
// the 5.13 ms paper-b16 step, GPU at c2b0f82). Fused, the hidden activation is written once and (in
// the backward) pre read once, in the GEMM's own pass. dev/cuda/matmul_small_k.cu checks it and
// times it against cuBLASLt + the production GELU kernels; it moves into llmc/cuda/ only if a GPU
// measures it faster.
//
//   D (M, N) = A (M, K) @ B,  A row-major bf16, K = kSmallK (192), fp32 sums, D bf16, where B is
//     SmallKB::Rows  weight (N, K) row-major, B = weight^T  (the forward: out = inp @ weight^T)
//     SmallKB::Cols  weight (K, N) row-major, B = weight    (dinp = dout @ weight of a layer
//                                                             whose weight is (OC = K, IC = N))
//   epilogue (SmallKEpi):
//     Plain         d = D
//     GeluForward   pre = D (rounded to bf16), out = gelu(pre) (kind gelu; the rounded pre, as
//                   gelu_forward_kernel reads it)
//     GeluBackward  out = gelu'(pre) * D (D rounded to bf16 first, as gelu_backward_kernel reads
//                   the dinp cuBLASLt stored); pre (M, N) read
//   So a fused launch gives the same bits as this kernel's Plain launch followed by the production
//   GELU kernel (the lab checks that bit for bit).
//
// Tiling: a block computes a 128 x 128 tile of D from A's 128 rows and B's 128 columns, both whole
// in K (2 x 48 KB of dynamic shared memory: 2 blocks an SM), loaded by cp.async in three groups of
// 64 along K, so the first group's mma start while the others arrive. 8 warps as 2 (rows) x 4
// (columns), each 64 x 32 of D: 4 x 4 mma.m16n8k16 (bf16 in, fp32 accumulate) a k-step, fragments
// by ldmatrix (.trans for Cols). Shared rows are 16-byte chunks swizzled by chunk ^ (row % 8), so
// ldmatrix's 8 rows hit 8 different bank groups. Rows of A past M and columns of B past N are
// zero-filled (cp.async src-size 0) and their results not stored. The grid walks the column tiles
// fastest, so the blocks that share A's rows run together and read them from L2.
//
// Requirements (else std::invalid_argument): K == kSmallK, N a multiple of 8, M >= 1, every pointer
// 16-byte aligned. Its types are bf16 in either build (the FP32 build's activations are fp32, so
// the trainer could use it in the BF16 build only).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "llmc/core/model_config.h"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/launch.cuh"
#include "llmc/cuda/mma_fragments.cuh"
#include "llmc/cuda/ptx.cuh"

namespace llmc::cuda::lab_candidates {

enum class SmallKB { Rows, Cols };
enum class SmallKEpi { Plain, GeluForward, GeluBackward };

constexpr int kSmallK = 192;
constexpr int kSmallKTileM = 128, kSmallKTileN = 128;
constexpr int kSmallKThreads = 256;  // 8 warps: 2 (rows) x 4 (columns)
constexpr int kSmallKWarpM = 64, kSmallKWarpN = 32;
constexpr int kSmallKStages = 3;                        // cp.async groups along K
constexpr int kSmallKStageK = kSmallK / kSmallKStages;  // 64
constexpr int kSmallKChunksN = kSmallKTileN / 8;        // 16-byte chunks of a Cols B row: 16
constexpr size_t kSmallKSmemBytes = 2 * (size_t)kSmallKTileM * kSmallK * sizeof(__nv_bfloat16);  // 96 KB

// The swizzle: chunk `chunk` of a shared row `row` sits at chunk ^ (row % 8) (within its group of 8).
// Every row a thread addresses below is its base row plus a multiple of 8, so each thread computes
// its XOR once and the rest of an address is a compile-time offset.

// Issues stage s's loads (K columns [64 s, 64 s + 64) of A and of B) and commits them as one group.
// A (and B Rows): 128 rows x 8 chunks, thread t loads chunk t % 8 of rows t / 8 + 32 j (j < 4);
// B Cols: 64 k-rows x 16 chunks, thread t loads chunk t % 16 of k-rows 64 s + t / 16 + 16 j.
template <SmallKB BL>
__device__ __forceinline__ void small_k_load_stage(char* sa, char* sb, const __nv_bfloat16* A, const __nv_bfloat16* Bw,
                                                   int M, int N, int m0, int n0, int s) {
    constexpr uint32_t kRowBytes = kSmallK * 2;  // 384: a K-row of A or of B Rows
    const int r0 = threadIdx.x / 8, c0 = threadIdx.x % 8;
    const uint32_t sw = (uint32_t)((c0 ^ (r0 & 7)) * 16) + (uint32_t)s * 128;  // chunk 8 s + c0, swizzled
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int r = r0 + 32 * j, m = m0 + r;
        cp_async_16_zfill(sa + r * kRowBytes + sw, A + (size_t)(m < M ? m : 0) * kSmallK + s * 64 + c0 * 8,
                          m < M ? 16u : 0u);
    }
    if constexpr (BL == SmallKB::Rows) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int r = r0 + 32 * j, n = n0 + r;
            cp_async_16_zfill(sb + r * kRowBytes + sw, Bw + (size_t)(n < N ? n : 0) * kSmallK + s * 64 + c0 * 8,
                              n < N ? 16u : 0u);
        }
    } else {
        constexpr uint32_t kColsRowBytes = kSmallKTileN * 2;  // 256
        const int k0 = s * kSmallKStageK + (int)threadIdx.x / kSmallKChunksN, c = (int)threadIdx.x % kSmallKChunksN;
        const int n = n0 + c * 8;
        const uint32_t csw = (uint32_t)((c ^ (k0 & 7)) * 16);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int k = k0 + 16 * j;
            cp_async_16_zfill(sb + k * kColsRowBytes + csw, Bw + (size_t)k * N + (n < N ? n : 0), n < N ? 16u : 0u);
        }
    }
    cp_async_commit_group();
}

// A warp's ldmatrix addresses: the base of its rows and, per k-step within a group of 4 (the
// swizzle repeats every 8 chunks = 4 k-steps), the swizzled chunk's byte offset.
struct SmallKFrag {
    // A: row wm * 64 + lane % 16
    const char* a;
    // B Rows: row wn * 32 + lane % 8 + 8 (lane / 16); B Cols: k-row lane % 8 + 8 ((lane / 8) % 2)
    const char* b;
    // A: chunk (2 q + lane / 16) ^ (lane % 8), q = ks % 4
    uint32_t a_sw[4];
    // B Rows: chunk (2 q + (lane / 8) % 2) ^ (lane % 8); B Cols: [nj] chunk (4 wn + 2 nj + lane / 16) ^ (lane % 8)
    uint32_t b_sw[4];
};

template <SmallKB BL>
__device__ __forceinline__ SmallKFrag small_k_frag(const char* sa, const char* sb, int wm, int wn, int lane) {
    SmallKFrag f;
    const int x7 = lane & 7;
    f.a = sa + (wm * kSmallKWarpM + lane % 16) * (kSmallK * 2);
#pragma unroll
    for (int q = 0; q < 4; q++) f.a_sw[q] = (uint32_t)(((2 * q + lane / 16) ^ x7) * 16);
    if constexpr (BL == SmallKB::Rows) {
        f.b = sb + (wn * kSmallKWarpN + lane % 8 + (lane / 16) * 8) * (kSmallK * 2);
#pragma unroll
        for (int q = 0; q < 4; q++) f.b_sw[q] = (uint32_t)(((2 * q + (lane / 8) % 2) ^ x7) * 16);
    } else {
        f.b = sb + (lane % 8 + ((lane / 8) % 2) * 8) * (kSmallKTileN * 2);
#pragma unroll
        for (int nj = 0; nj < 2; nj++) f.b_sw[nj] = (uint32_t)(((4 * wn + 2 * nj + lane / 16) ^ x7) * 16);
        f.b_sw[2] = f.b_sw[3] = 0;
    }
    return f;
}

// The mma of K columns [16 ks, 16 ks + 16) into acc (4 m16 x 4 n8 blocks of this warp); ks is a
// compile-time constant after unrolling, so every offset but the thread's swizzle is one.
template <SmallKB BL>
__device__ __forceinline__ void small_k_mma_step(float (&acc)[4][4][4], const SmallKFrag& f, int ks) {
    const uint32_t ka = (uint32_t)(ks / 4) * 128 + f.a_sw[ks % 4];  // 8 chunks = 128 bytes per 4 k-steps
    uint32_t a[4][4];
#pragma unroll
    for (int mi = 0; mi < 4; mi++)  // lanes 0-15: rows 0-15 at the k-step's first chunk; 16-31: its second
        ldmatrix_x4(a[mi], f.a + mi * 16 * (kSmallK * 2) + ka);
    uint32_t b[4][2];
#pragma unroll
    for (int nj = 0; nj < 2; nj++) {  // two n8 blocks a load
        uint32_t r[4];
        if constexpr (BL == SmallKB::Rows) {
            // matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
            ldmatrix_x4(r, f.b + nj * 16 * (kSmallK * 2) + (uint32_t)(ks / 4) * 128 + f.b_sw[ks % 4]);
        } else {
            // transposed: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
            ldmatrix_x4_trans(r, f.b + ks * 16 * (kSmallKTileN * 2) + f.b_sw[nj]);
        }
        b[2 * nj][0] = r[0];
        b[2 * nj][1] = r[1];
        b[2 * nj + 1][0] = r[2];
        b[2 * nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma_bf16_16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
}

// d, pre: (M, N) bf16; see the file comment for each epilogue's reads and writes. The GELU kind G is a
// template parameter (the Plain epilogue's instance takes Tanh and ignores it), so each kernel's
// epilogue holds one kind's code and no branch per element.
template <SmallKB BL, SmallKEpi EPI, Gelu G>
__global__ void __launch_bounds__(kSmallKThreads, 2)
    small_k_gemm_kernel(__nv_bfloat16* d, __nv_bfloat16* pre, const __nv_bfloat16* A, const __nv_bfloat16* Bw, int M,
                        int N) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    LLMC_DYNAMIC_SHARED(char, smem);
    char* sa = smem;
    char* sb = smem + (size_t)kSmallKTileM * kSmallK * sizeof(__nv_bfloat16);
    const int n_tiles = (N + kSmallKTileN - 1) / kSmallKTileN;
    const int m0 = (int)(blockIdx.x / n_tiles) * kSmallKTileM, n0 = (int)(blockIdx.x % n_tiles) * kSmallKTileN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 4, wn = warp % 4;

#pragma unroll
    for (int s = 0; s < kSmallKStages; s++) small_k_load_stage<BL>(sa, sb, A, Bw, M, N, m0, n0, s);

    const SmallKFrag frag = small_k_frag<BL>(sa, sb, wm, wn, lane);
    float acc[4][4][4] = {};
#pragma unroll
    for (int s = 0; s < kSmallKStages; s++) {
        if (s == 0) cp_async_wait_group<kSmallKStages - 1>();
        else if (s == 1) cp_async_wait_group<kSmallKStages - 2>();
        else cp_async_wait_all();
        __syncthreads();  // every thread's chunks of stage s are in shared memory
#pragma unroll
        for (int ks = s * (kSmallKStageK / 16); ks < (s + 1) * (kSmallKStageK / 16); ks++)
            small_k_mma_step<BL>(acc, frag, ks);
    }

    // epilogue: thread (g, c) holds rows g and g + 8 of each m16 block, columns 2c, 2c + 1 of each n8 block
    // (a whole tile inside D skips the bounds: one uniform branch a block)
    const int g = lane / 4, c = lane % 4;
    const bool whole = m0 + kSmallKTileM <= M && n0 + kSmallKTileN <= N;
    const int n_thread = n0 + wn * kSmallKWarpN + 2 * c;
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int m = m0 + wm * kSmallKWarpM + mi * 16 + g + 8 * hf;
            if (!whole && m >= M) continue;
            const size_t row = (size_t)m * N + n_thread;
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                if (!whole && n_thread + ni * 8 >= N) continue;  // N is a multiple of 8: a pair is in or out whole
                const size_t off = row + ni * 8;
                const __nv_bfloat162 v = __floats2bfloat162_rn(acc[mi][ni][2 * hf], acc[mi][ni][2 * hf + 1]);
                if constexpr (EPI == SmallKEpi::Plain) {
                    *reinterpret_cast<__nv_bfloat162*>(d + off) = v;
                } else if constexpr (EPI == SmallKEpi::GeluForward) {
                    *reinterpret_cast<__nv_bfloat162*>(pre + off) = v;
                    const float x0 = __low2float(v), x1 = __high2float(v);
                    *reinterpret_cast<__nv_bfloat162*>(d + off) =
                        __floats2bfloat162_rn(gelu_value(x0, G), gelu_value(x1, G));
                } else {
                    const __nv_bfloat162 p = *reinterpret_cast<const __nv_bfloat162*>(pre + off);
                    *reinterpret_cast<__nv_bfloat162*>(d + off) = __floats2bfloat162_rn(
                        __low2float(v) * gelu_grad(__low2float(p), G), __high2float(v) * gelu_grad(__high2float(p), G));
                }
            }
        }
}

// D (M, N) = A (M, kSmallK) @ B with the epilogue epi (the file comment); one launch.
//   Plain: d written, pre unused (nullable). GeluForward: pre and d written. GeluBackward: pre read, d written.
inline void small_k_gemm(__nv_bfloat16* d, __nv_bfloat16* pre, const __nv_bfloat16* A, const __nv_bfloat16* Bw, int M,
                         int N, int K, SmallKB layout, SmallKEpi epi, Gelu gelu, LaunchStream st) {
    if (K != kSmallK)
        throw std::invalid_argument("small_k_gemm: K=" + std::to_string(K) + " is not " + std::to_string(kSmallK) +
                                    "; the candidate keeps the whole K in shared memory");
    if (M < 1 || N < 8 || N % 8 != 0)
        throw std::invalid_argument("small_k_gemm: needs M >= 1 and N a positive multiple of 8 (got M=" +
                                    std::to_string(M) + ", N=" + std::to_string(N) + ")");
    if (!d || !A || !Bw || (epi != SmallKEpi::Plain && !pre))
        throw std::invalid_argument("small_k_gemm: d, A, B and (with a GELU epilogue) pre must not be null");
    if (!aligned16(d) || !aligned16(A) || !aligned16(Bw) || (epi != SmallKEpi::Plain && !aligned16(pre)))
        throw std::invalid_argument("small_k_gemm: every pointer must be 16-byte aligned");
    const size_t blocks = (size_t)((M + kSmallKTileM - 1) / kSmallKTileM) * ((N + kSmallKTileN - 1) / kSmallKTileN);
    if (blocks > 0x7fffffffu)
        throw std::invalid_argument("small_k_gemm: M=" + std::to_string(M) + ", N=" + std::to_string(N) +
                                    " needs more than 2^31 - 1 blocks");
    auto launch = [&](auto kernel) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmallKSmemBytes));
        launch_kernel(kernel, dim3((unsigned)blocks), dim3(kSmallKThreads), kSmallKSmemBytes, st, d, pre, A, Bw, M, N);
    };
    // the instance of (layout, epi, gelu); Plain ignores the kind
    auto with_layout = [&](auto rows) {
        constexpr SmallKB BL = decltype(rows)::value ? SmallKB::Rows : SmallKB::Cols;
        const bool erf = gelu == Gelu::Erf;
        if (epi == SmallKEpi::Plain) launch(small_k_gemm_kernel<BL, SmallKEpi::Plain, Gelu::Tanh>);
        else if (epi == SmallKEpi::GeluForward)
            launch(erf ? small_k_gemm_kernel<BL, SmallKEpi::GeluForward, Gelu::Erf>
                       : small_k_gemm_kernel<BL, SmallKEpi::GeluForward, Gelu::Tanh>);
        else
            launch(erf ? small_k_gemm_kernel<BL, SmallKEpi::GeluBackward, Gelu::Erf>
                       : small_k_gemm_kernel<BL, SmallKEpi::GeluBackward, Gelu::Tanh>);
    };
    if (layout == SmallKB::Rows) with_layout(std::true_type{});
    else with_layout(std::false_type{});
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda::lab_candidates
