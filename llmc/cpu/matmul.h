// Matrix multiply of a linear layer on the CPU: out = inp @ weight^T + bias.
//   inp (N, IC), weight (OC, IC) (PyTorch / llm.c layout), bias (OC) or nullptr, out (N, OC).
// Speed: the result is split into register tiles of R rows x W columns that stay in vector
// registers while the shared dimension K is walked once. The B operand of each tile is a (K, W)
// panel with contiguous rows: for the forward the weight rows are first packed (transposed) into
// per-thread scratch; in the backward passes weight and inp already have that layout. On x86-64
// the tiles also exist compiled for AVX2+FMA, chosen at run time. Tiles at the ragged edges (N or
// the column count not a multiple of the tile) take a one-row kernel or plain loops.
// Determinism: every result element is summed by one thread in a fixed order, so results do
// not depend on the number of OpenMP threads.
#pragma once
#include <cstddef>
#include <cstring>
#include <vector>

// nvcc's front end does not know `#pragma GCC unroll` but passes it on to the host compiler.
#ifdef __NVCC__
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1675
#endif

namespace llmc {
namespace cpu {

namespace detail {

// C(R, W) += sum_k A(r, k) * B(k, j), C(r, j) = c[r*ldc + j], A(r, k) = a[r*ars + k*aks],
// B(k, j) = b[k*ldb + j]; with overwrite, C = the sum (the tile starts from 0 instead of C's
// values: the same sums as adding onto a zeroed C). The tile of C is held in R x W/VL explicit vectors of VB bytes (GCC
// vector extension: 16 for SSE, 32 for AVX), so it stays in registers and the compiler cannot
// re-vectorize the k loop its own way (-O3 did, badly, with plain arrays).
template <typename F, int R, int W, int VB>
__attribute__((always_inline)) inline void mm_tile(F* c, size_t ldc, const F* a, size_t ars, size_t aks, const F* b,
                                                   size_t ldb, int K, bool overwrite) {
    typedef F vec __attribute__((vector_size(VB)));
    constexpr int VL = VB / sizeof(F), NV = W / VL;  // lanes per vector, vectors per tile row
    static_assert(W % VL == 0, "the tile width must be a multiple of the vector length");
    vec acc[R][NV];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            if (overwrite) acc[r][v] = vec{};
            else std::memcpy(&acc[r][v], c + r * ldc + v * VL, sizeof(vec));
        }
    for (int k = 0; k < K; k++) {
        vec bk[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) std::memcpy(&bk[v], b + (size_t)k * ldb + v * VL, sizeof(vec));
        const F* ak = a + (size_t)k * aks;
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            const F ar = ak[(size_t)r * ars];
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++) acc[r][v] += bk[v] * ar;
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) std::memcpy(c + r * ldc + v * VL, &acc[r][v], sizeof(vec));
}

// The same for a ragged tile of rows x cols (< R x W) at an edge of C: plain loops, same k order.
template <typename F>
inline void mm_tile_edge(F* c, size_t ldc, int rows, int cols, const F* a, size_t ars, size_t aks, const F* b,
                         size_t ldb, int K, bool overwrite) {
    for (int r = 0; r < rows; r++) {
        for (int j = 0; j < cols; j++) {
            F acc = overwrite ? F(0) : c[r * ldc + j];
            for (int k = 0; k < K; k++) acc += a[r * ars + (size_t)k * aks] * b[(size_t)k * ldb + j];
            c[r * ldc + j] = acc;
        }
    }
}

// One tile of C (rows x cols <= R x W, row stride ldc) += A B over K (= A B with overwrite).
template <typename F, int R, int W, int VB>
__attribute__((always_inline)) inline void gemm_tile(F* c, size_t ldc, int rows, int cols, const F* a, size_t ars,
                                                     size_t aks, const F* b, size_t ldb, int K, bool overwrite) {
    if (rows == R && cols == W) {
        mm_tile<F, R, W, VB>(c, ldc, a, ars, aks, b, ldb, K, overwrite);
    } else if (cols == W) {  // the last rows of C: one row at a time, still vectorized
        for (int r = 0; r < rows; r++)
            mm_tile<F, 1, W, VB>(c + r * ldc, ldc, a + r * ars, ars, aks, b, ldb, K, overwrite);
    } else {
        mm_tile_edge<F>(c, ldc, rows, cols, a, ars, aks, b, ldb, K, overwrite);
    }
}

// x86-64 builds without -mavx2 (the default) compile the tile twice, once for the baseline ISA
// and once for AVX2+FMA, and pick one at run time (__builtin_cpu_supports).
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__AVX2__)
#define LLMC_MATMUL_AVX2_DISPATCH 1
template <typename F, int R, int W>
__attribute__((target("avx2,fma"))) void gemm_tile_avx2(F* c, size_t ldc, int rows, int cols, const F* a, size_t ars,
                                                        size_t aks, const F* b, size_t ldb, int K, bool overwrite) {
    gemm_tile<F, R, W, 32>(c, ldc, rows, cols, a, ars, aks, b, ldb, K, overwrite);
}
#endif

// Whether the AVX2+FMA tile shapes and code run on this machine: always in a build for AVX2,
// else when the CPU has AVX2 and FMA (dispatch builds); never on other targets.
inline bool use_avx2_tiles() {
#if defined(__AVX2__) && defined(__FMA__)
    return true;
#elif defined(LLMC_MATMUL_AVX2_DISPATCH)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

// Tile shapes R rows x W columns: R*W accumulators fit the 16 vector registers (SSE: 4 floats,
// AVX: 8) with room for a row of B and a broadcast of A. Picked by measurement on Zen 3 for the
// LM head (N=1024, IC=192, OC=50304); the forward and the backward prefer different shapes.
template <bool Avx2, bool Backward>
struct TileShape;
template <>
struct TileShape<false, false> {
    static constexpr int R = 2, W = 32;
};
template <>
struct TileShape<false, true> {
    static constexpr int R = 3, W = 16;
};
template <>
struct TileShape<true, false> {
    static constexpr int R = 3, W = 32;
};
template <>
struct TileShape<true, true> {
    static constexpr int R = 6, W = 16;
};

template <typename F, int R, int W, bool Avx2>
inline void tile(F* c, size_t ldc, int rows, int cols, const F* a, size_t ars, size_t aks, const F* b, size_t ldb,
                 int K, bool overwrite) {
#ifdef LLMC_MATMUL_AVX2_DISPATCH
    if (Avx2) {
        gemm_tile_avx2<F, R, W>(c, ldc, rows, cols, a, ars, aks, b, ldb, K, overwrite);
        return;
    }
#endif
    gemm_tile<F, R, W, Avx2 ? 32 : 16>(c, ldc, rows, cols, a, ars, aks, b, ldb, K, overwrite);
}

// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T + bias; tiles of R rows x W outputs, parallel
// over panels of W outputs whose weight rows are packed into a (IC, W) panel first.
template <typename F, bool Avx2>
void matmul_forward_impl(F* out, const F* inp, const F* weight, const F* bias, int N, int IC, int OC) {
    constexpr int R = TileShape<Avx2, false>::R, W = TileShape<Avx2, false>::W;
    const int num_panels = (OC + W - 1) / W;
#pragma omp parallel
    {
        std::vector<F> panel((size_t)IC * W);  // (IC, W): weight rows o0..o0+W-1 transposed
#pragma omp for schedule(static)
        for (int p = 0; p < num_panels; p++) {
            const int o0 = p * W;
            const int cols = OC - o0 < W ? OC - o0 : W;
            for (int j = 0; j < cols; j++) {  // pack (a ragged last panel uses only cols)
                const F* wrow = weight + (size_t)(o0 + j) * IC;
                for (int k = 0; k < IC; k++) panel[(size_t)k * W + j] = wrow[k];
            }
            for (int n0 = 0; n0 < N; n0 += R) {
                const int rows = N - n0 < R ? N - n0 : R;
                F* c = out + (size_t)n0 * OC + o0;
                for (int r = 0; r < rows; r++)
                    for (int j = 0; j < cols; j++) c[(size_t)r * OC + j] = bias ? bias[o0 + j] : F(0);
                tile<F, R, W, Avx2>(c, OC, rows, cols, inp + (size_t)n0 * IC, IC, 1, panel.data(), W, IC,
                                    /*overwrite=*/false);  // adds onto the bias
            }
        }
    }
}

// Backward of matmul_forward; overwrites dinp, ADDS into dweight and dbias (nullable).
//   dinp (N, IC) = dout (N, OC) @ weight (OC, IC)      K = OC, walked in blocks of KB; in each
//                                                      block the tiles of dinp are split over threads
//                                                      (the first block overwrites, the next ones add)
//   dweight (OC, IC) += dout^T (OC, N) @ inp (N, IC)   K = N, in blocks of KB; in each block the
//                                                      tiles of dweight are split over threads
//   dbias (OC) += sum_n dout[n, :]                     parallel over OC, n summed in order
// A K block keeps KB rows of weight (resp. inp) in L2 while every tile that needs them runs.
// Every element still sums its K terms in increasing order, all by one thread.
constexpr int MM_KB = 256;

template <typename F, bool Avx2>
void matmul_backward_impl(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int IC,
                          int OC) {
    constexpr int R = TileShape<Avx2, true>::R, W = TileShape<Avx2, true>::W, KB = MM_KB;
    const int col_tiles = (IC + W - 1) / W;
    const int n_tiles = (N + R - 1) / R;   // row tiles of dinp
    const int o_tiles = (OC + R - 1) / R;  // row tiles of dweight
#pragma omp parallel
    {
        for (int k0 = 0; k0 < OC; k0 += KB) {
            const int kb = OC - k0 < KB ? OC - k0 : KB;
#pragma omp for schedule(static)
            for (int t = 0; t < n_tiles; t++) {
                const int n0 = t * R, rows = N - n0 < R ? N - n0 : R;
                for (int ct = 0; ct < col_tiles; ct++) {
                    const int i0 = ct * W, cols = IC - i0 < W ? IC - i0 : W;
                    // A(r, k) = dout[n0 + r, k0 + k], B(k, j) = weight[k0 + k, i0 + j]
                    tile<F, R, W, Avx2>(dinp + (size_t)n0 * IC + i0, IC, rows, cols, dout + (size_t)n0 * OC + k0, OC, 1,
                                        weight + (size_t)k0 * IC + i0, IC, kb, /*overwrite=*/k0 == 0);
                }
            }  // implicit barrier: the next K block adds into the same tiles
        }
        for (int k0 = 0; k0 < N; k0 += KB) {
            const int kb = N - k0 < KB ? N - k0 : KB;
#pragma omp for schedule(static)
            for (int t = 0; t < o_tiles; t++) {
                const int o0 = t * R, rows = OC - o0 < R ? OC - o0 : R;
                for (int ct = 0; ct < col_tiles; ct++) {
                    const int i0 = ct * W, cols = IC - i0 < W ? IC - i0 : W;
                    // A(r, k) = dout[k0 + k, o0 + r], B(k, j) = inp[k0 + k, i0 + j]
                    tile<F, R, W, Avx2>(dweight + (size_t)o0 * IC + i0, IC, rows, cols, dout + (size_t)k0 * OC + o0, 1,
                                        OC, inp + (size_t)k0 * IC + i0, IC, kb, /*overwrite=*/false);
                }
            }
        }
        if (dbias) {
            constexpr int OB = 64;  // outputs per block, each summed over n in order
            const int o_blocks = (OC + OB - 1) / OB;
#pragma omp for schedule(static)
            for (int ob = 0; ob < o_blocks; ob++) {
                const int o0 = ob * OB, cols = OC - o0 < OB ? OC - o0 : OB;
                F acc[OB];
                for (int j = 0; j < cols; j++) acc[j] = dbias[o0 + j];
                for (int n = 0; n < N; n++) {
                    const F* drow = dout + (size_t)n * OC + o0;
                    for (int j = 0; j < cols; j++) acc[j] += drow[j];
                }
                for (int j = 0; j < cols; j++) dbias[o0 + j] = acc[j];
            }
        }
    }
}

}  // namespace detail

// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T + bias (OC); bias may be nullptr.
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int IC, int OC) {
    if (detail::use_avx2_tiles()) detail::matmul_forward_impl<F, true>(out, inp, weight, bias, N, IC, OC);
    else detail::matmul_forward_impl<F, false>(out, inp, weight, bias, N, IC, OC);
}

// Backward of matmul_forward: dinp (N, IC) = dout @ weight (overwritten: an activation gradient);
// dweight (OC, IC) += dout^T @ inp and dbias (OC) += column sums of dout (skipped when nullptr)
// accumulate (parameter gradients). dout is (N, OC).
template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int IC,
                     int OC) {
    if (detail::use_avx2_tiles())
        detail::matmul_backward_impl<F, true>(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
    else detail::matmul_backward_impl<F, false>(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

}  // namespace cpu
}  // namespace llmc

#ifdef __NVCC__
#pragma nv_diagnostic pop
#endif
