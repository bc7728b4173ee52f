// Matrix multiply of a linear layer on the GPU through cuBLASLt: out = inp @ weight^T + bias.
//   inp (N, IC), weight (OC, IC) (PyTorch / llm.c layout), bias (OC) or nullptr, out (N, OC).
// CPU reference: llmc/cpu/matmul.h (same math and gradient contract: dinp overwritten, dweight and
// dbias added into; docs/design.md).
//
// Types: A/B (inp, weight, dout) floatX; compute and scale fp32 (CUBLAS_COMPUTE_32F: in the FP32
// build this is true fp32, no TF32 fast mode); forward output and dinp floatX; dweight fp32
// (cuBLASLt accepts bf16 A/B with fp32 C/D under CUBLAS_COMPUTE_32F).
//
// Row-major <-> column-major. cuBLASLt is column-major: a row-major (R, S) matrix with row stride
// S is the same memory as a column-major (S, R) matrix with leading dimension S, i.e. its
// transpose. So every row-major product X = Y @ Z is computed as the column-major X^T = Z^T @ Y^T:
//   forward   out^T (OC, N)    = weight (OC, IC) [col-major (IC, OC) ld IC, op T]
//                                @ inp^T (IC, N)  [col-major (IC, N)  ld IC, op N]     m=OC n=N k=IC
//             bias (OC) is a vector over the rows of D (column-major), as CUBLASLT_EPILOGUE_BIAS wants.
//   dinp      dinp^T (IC, N)   = weight^T (IC, OC) [col-major (IC, OC) ld IC, op N]
//                                @ dout^T (OC, N)  [col-major (OC, N)  ld OC, op N]    m=IC n=N k=OC
//   dweight   dweight^T (IC, OC) += inp^T (IC, N)  [col-major (IC, N)  ld IC, op N]
//                                @ dout (N, OC)    [col-major (OC, N)  ld OC, op T]    m=IC n=OC k=N
//             (C = D = dweight, fp32, beta = 1: accumulates)
//   dbias     (OC) += column sums of dout: our own deterministic reduction in one launch (partial
//             sums, then the last block of each column group adds them in a fixed order; below), not
//             cuBLASLt's BGRAD epilogue (whose summation order is not documented).
//
// GELU. With pre_gelu, matmul_forward writes pre_gelu = inp @ weight^T + bias and
// out = gelu(pre_gelu) of the given kind (Gelu::Tanh or Gelu::Erf, llmc/cpu/gelu.h). Erf never takes
// the epilogue below (the tanh approximation): always the BIAS (or no) epilogue, then
// gelu_forward(pre_gelu, Erf), two launches. Tanh, BF16 build, by default
// (ctx.fuse_gelu): cuBLASLt's GELU_AUX(_BIAS) epilogue, D = gelu(x), aux = x, one launch. cuBLASLt's
// documentation only says "GELU" (llm.c relies on it for GPT-2's tanh GELU), not how it evaluates
// tanh (a hardware tanh approximation would be ~1e-4 off: invisible in bf16, not in an
// fp32 comparison). The lab (dev/cuda/matmul.cu) checks the epilogue against the CPU and decides
// tanh vs erf (they differ by up to 4.7e-4 near x = -2.7; what a GPU found: docs/cuda_kernels.md);
// if it fails on a GPU or toolkit, set fuse_gelu = false by default. FP32 build, by
// default: no epilogue (the FP32 build is the exact reference path). If the heuristic finds no
// algorithm for the fused epilogue, or ctx.fuse_gelu is false, the matmul writes pre_gelu with the
// BIAS epilogue and then out = gelu_forward(pre_gelu) (llmc/cuda/gelu.cuh, the CPU's formula).
//
// Supported shapes (else std::invalid_argument): N >= 1, IC >= 1 and OC >= 1, IC and OC multiples
// of 8 (16-byte rows for the tensor-core kernels, and the GELU aux leading dimension must be a
// multiple of 8), every pointer 16-byte aligned. N may be anything (ragged N is fine: it is never
// a leading dimension).
//
// Determinism: the algorithm comes from cuBLASLt's heuristic, a pure function of the shapes, types,
// epilogue, operand alignment and device, queried once per distinct problem and cached in the
// MatmulContext. Every cuBLASLt split-K reduction scheme is ordered
// (none, "in place" with counters that enforce the sequence, or a separate reduction pass), and
// cuBLAS documents bit-wise identical results across runs for the same toolkit version, GPU
// architecture and SM count. The bias gradient is our own fixed-order reduction.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>

#include <cublasLt.h>

#include "llmc/core/kernel_profile.h"  // GemmCount
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/grid_arrival.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin

namespace llmc::cuda {

inline void cublaslt_check(cublasStatus_t s, const char* what, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuBLASLt error: ") + cublasLtGetStatusName(s) + " (" +
                                 cublasLtGetStatusString(s) + ") in " + what + " at " + file + ":" +
                                 std::to_string(line));
}
#define CUBLASLT_CHECK(call) ::llmc::cuda::cublaslt_check((call), #call, __FILE__, __LINE__)

// Owns the cuBLASLt handle and a 32 MiB workspace. One per device; not copyable.
struct MatmulContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 32u << 20;
    // GELU through cuBLASLt's epilogue (else gelu_forward after the matmul); BF16 build only by default
    bool fuse_gelu = sizeof(floatX) == 2;
    bool last_gelu_fused = false;  // set by matmul_forward with pre_gelu: whether the epilogue ran
    // The heuristic's answer per problem (shapes, types, epilogue, alignments: detail::lt_matmul's key),
    // so each distinct matmul queries it once (the query costs tens of microseconds of host time).
    // found = false records "no algorithm". issued: what the problem's calls cost so far (monotone;
    // the calls issued on a stream plus those a replayed step graph ran: gemms_issued,
    // add_replayed_gemms), which --profile-steps reads.
    struct CachedAlgo {
        bool found;
        cublasLtMatmulAlgo_t algo;
        GemmCount issued;
        int rank;  // heuristic_rank when it was chosen
    };
    using Key = std::array<int64_t, 16>;
    std::map<Key, CachedAlgo> algo_cache;
    // Each distinct problem's algorithm, as the heuristic picks it, one line on stderr
    // (detail::algo_config_text): set by LLMC_CUBLASLT_ALGOS=1 in the environment at construction.
    bool log_algorithms = false;
    // Which of the heuristic's answers each problem takes, best first: 0 (its first) everywhere but the
    // lab that times the others (dev/cuda/matmul_algos.cu), which sets it before the context's first
    // matmul; a problem the heuristic offers fewer answers for has no algorithm (found = false).
    static constexpr int kMaxHeuristicRank = 15;
    int heuristic_rank = 0;

    MatmulContext() {
        const char* log = std::getenv("LLMC_CUBLASLT_ALGOS");
        log_algorithms = log && std::string(log) == "1";
        CUBLASLT_CHECK(cublasLtCreate(&handle));
        const cudaError_t e = cudaMalloc(&workspace, workspace_bytes);
        if (e != cudaSuccess) {
            cublasLtDestroy(handle);
            cuda_check(e, "cudaMalloc(matmul workspace)", __FILE__, __LINE__);
        }
    }
    ~MatmulContext() {
        if (workspace) cudaFree(workspace);
        if (handle) cublasLtDestroy(handle);
    }
    MatmulContext(const MatmulContext&) = delete;
    MatmulContext& operator=(const MatmulContext&) = delete;
};

namespace detail {

#if defined(ENABLE_FP32)
constexpr cudaDataType_t kFloatXType = CUDA_R_32F;
#else
constexpr cudaDataType_t kFloatXType = CUDA_R_16BF;
#endif

// RAII holders so that a throw mid-way frees the descriptors.
struct LtDesc {
    cublasLtMatmulDesc_t d = nullptr;
    ~LtDesc() {
        if (d) cublasLtMatmulDescDestroy(d);
    }
};
struct LtLayout {
    cublasLtMatrixLayout_t l = nullptr;
    ~LtLayout() {
        if (l) cublasLtMatrixLayoutDestroy(l);
    }
};
struct LtPref {
    cublasLtMatmulPreference_t p = nullptr;
    ~LtPref() {
        if (p) cublasLtMatmulPreferenceDestroy(p);
    }
};

// The heuristic's pick as text: its configuration attributes (cublasLt.h, cublasLtMatmulAlgoConfigAttributes_t;
// "?" for one the library does not give), the workspace it needs and its estimate of waves.
inline std::string algo_config_text(const cublasLtMatmulHeuristicResult_t& h) {
    auto attr = [&](const char* name, cublasLtMatmulAlgoConfigAttributes_t a, auto value) {
        const bool ok =
            cublasLtMatmulAlgoConfigGetAttribute(&h.algo, a, &value, sizeof value, nullptr) == CUBLAS_STATUS_SUCCESS;
        return std::string(name) + " " + (ok ? std::to_string((long long)value) : std::string("?"));
    };
    return attr("algo", CUBLASLT_ALGO_CONFIG_ID, int32_t{}) + " " +
           attr("tile", CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t{}) + " " +
           attr("stages", CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t{}) + " " +
           attr("splitk", CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t{}) + " " +
           attr("reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, uint32_t{}) + " " +
           attr("swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t{}) + " " +
           attr("custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, uint32_t{}) + " " +
           attr("inner", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, uint16_t{}) + " " +
           attr("cluster", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t{}) + " workspace " +
           std::to_string(h.workspaceSize) + " waves " + std::to_string(h.wavesCount);
}

// Key fields of MatmulContext::algo_cache (lt_matmul builds it).
enum LtKey {
    kM,
    kN,
    kK,
    kLda,
    kLdb,
    kLdd,
    kTransA,
    kTransB,
    kDType,
    kABType,
    kEpilogue,
    kAlignA,
    kAlignB,
    kAlignD,
    kAlignBias,
    kAlignAux
};

// A problem as the algorithm log and the profile name it: "m=192 n=32768 k=576 op=NN ab=bf16 d=bf16
// epilogue=1 ld=..,..,.. align=..,..,..,..,..".
inline std::string problem_text(const MatmulContext::Key& key) {
    auto type = [](int64_t t) { return t == CUDA_R_32F ? "f32" : "bf16"; };
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "m=%lld n=%lld k=%lld op=%c%c ab=%s d=%s epilogue=%lld ld=%lld,%lld,%lld "
                  "align=%lld,%lld,%lld,%lld,%lld",
                  (long long)key[kM], (long long)key[kN], (long long)key[kK], key[kTransA] ? 'T' : 'N',
                  key[kTransB] ? 'T' : 'N', type(key[kABType]), type(key[kDType]), (long long)key[kEpilogue],
                  (long long)key[kLda], (long long)key[kLdb], (long long)key[kLdd], (long long)key[kAlignA],
                  (long long)key[kAlignB], (long long)key[kAlignD], (long long)key[kAlignBias],
                  (long long)key[kAlignAux]);
    return buf;
}

// Largest power of two (at most 256) that divides the address.
inline uint32_t pointer_alignment(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t low = a & (~a + 1);  // lowest set bit
    return (uint32_t)(low == 0 || low > 256 ? 256 : low);
}

// One column-major GEMM  D (m, n) = alpha * op(A) @ op(B) + beta * C, with C = D (same pointer
// and layout), alpha = 1. A is stored (transa ? (k, m) : (m, k)) with leading dimension lda, B is
// stored (transb ? (n, k) : (k, n)) with ldb, D is (m, n) with ldd. `epilogue` may add `bias`
// (length m) and write `aux` (m, n, ld = ldd). Returns false (and runs nothing) only when
// `may_fail` is set and the heuristic finds no algorithm; otherwise throws on every failure.
inline bool lt_matmul(MatmulContext& ctx, void* d, cudaDataType_t dtype, const void* a, bool transa, int lda,
                      const void* b, bool transb, int ldb, cudaDataType_t abtype, int m, int n, int k, int ldd,
                      float beta, cublasLtEpilogue_t epilogue, const void* bias, void* aux, cudaStream_t st,
                      bool may_fail = false) {
    LtDesc desc;
    CUBLASLT_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) {
        const int32_t bias_type = dtype;  // bias has D's type (floatX) in every call we make
        CUBLASLT_CHECK(
            cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (aux) {
        // aux (the GELU input) has D's type by default. EPILOGUE_AUX_DATA_TYPE is left unset on purpose:
        // it is meant for fp8 kernels, and an unsupported setting makes cublasLtMatmul itself (not the
        // heuristic, whose failure we can fall back from) return CUBLAS_STATUS_INVALID_VALUE.
        const int64_t aux_ld = ldd;
        CUBLASLT_CHECK(
            cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        CUBLASLT_CHECK(
            cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    LtLayout la, lb, ld;
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&la.l, abtype, transa ? k : m, transa ? m : k, lda));
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&lb.l, abtype, transb ? n : k, transb ? k : n, ldb));
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&ld.l, dtype, m, n, ldd));

    LtPref pref;
    CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t ws = ctx.workspace_bytes;
    CUBLASLT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // Split-K only with its partial sums kept in fp32, the compute type. COMPUTE_TYPE (in the workspace,
    // reduced in a separate step) always. INPLACE adds the parts "using the output buffer (and output data
    // type) and counters (in workspace) to guarantee the sequentiality" (cublasLt.h): in order, and for an
    // fp32 D (the weight gradients, accumulated; in the FP32 build every D) in fp32, with no separate
    // reduction kernel; for a bf16 D
    // it would round every partial sum of long-k products (the LM head's dinp, k = Vp), so not there.
    // NONE (no split) is always allowed.
    const uint32_t reductions =
        CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | (dtype == CUDA_R_32F ? CUBLASLT_REDUCTION_SCHEME_INPLACE : 0u);
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                        sizeof(reductions)));
    // The heuristic assumes 256-byte aligned matrices unless told otherwise; our operands are often
    // offsets into one parameter buffer (16-byte aligned), so pass the true alignment of each. The
    // alignment an algorithm needs covers "the buffer pointer, leading dimension, and possibly other
    // strides" (cublasLt.h, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_*), so it is the smaller of the pointer's
    // and the column stride's (ld * element size: e.g. 128 bytes for ld = 64 in bf16).
    const size_t ab_size = abtype == CUDA_R_32F ? 4 : 2, d_size = dtype == CUDA_R_32F ? 4 : 2;
    auto aligned = [](const void* p, int ld, size_t elem) {
        return std::min(pointer_alignment(p), pointer_alignment(reinterpret_cast<const void*>((uintptr_t)ld * elem)));
    };
    const uint32_t align_a = aligned(a, lda, ab_size), align_b = aligned(b, ldb, ab_size),
                   align_d = aligned(d, ldd, d_size);
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                        sizeof(align_a)));
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                        sizeof(align_b)));
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                        sizeof(align_d)));
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                        sizeof(align_d)));
    const MatmulContext::Key key = {m,
                                    n,
                                    k,
                                    lda,
                                    ldb,
                                    ldd,
                                    transa,
                                    transb,
                                    dtype,
                                    abtype,
                                    (int64_t)epilogue,
                                    align_a,
                                    align_b,
                                    align_d,
                                    bias ? pointer_alignment(bias) : 0,
                                    aux ? pointer_alignment(aux) : 0};
    const int rank = ctx.heuristic_rank;
    if (rank < 0 || rank > MatmulContext::kMaxHeuristicRank)
        throw std::invalid_argument("MatmulContext::heuristic_rank " + std::to_string(rank) + " is outside 0.." +
                                    std::to_string(MatmulContext::kMaxHeuristicRank));
    auto it = ctx.algo_cache.find(key);
    if (it == ctx.algo_cache.end()) {
        // the heuristic's first rank + 1 answers, best first; this context takes the rank-th
        cublasLtMatmulHeuristicResult_t heur[MatmulContext::kMaxHeuristicRank + 1] = {};
        int found = 0;
        const cublasStatus_t hs =
            cublasLtMatmulAlgoGetHeuristic(ctx.handle, desc.d, la.l, lb.l, ld.l, ld.l, pref.p, rank + 1, heur, &found);
        const bool ok = hs == CUBLAS_STATUS_SUCCESS && found > rank;
        it = ctx.algo_cache.emplace(key, MatmulContext::CachedAlgo{ok, heur[ok ? rank : 0].algo, GemmCount{}, rank})
                 .first;
        if (ctx.log_algorithms)
            std::fprintf(stderr, "cuBLASLt algorithm: %s: %s\n", problem_text(key).c_str(),
                         ok ? algo_config_text(heur[rank]).c_str() : "none found");
    } else if (it->second.rank != rank) {
        throw std::logic_error("MatmulContext::heuristic_rank changed from " + std::to_string(it->second.rank) +
                               " to " + std::to_string(rank) +
                               " after the context's first matmul; use one context per rank");
    }
    if (!it->second.found) {
        if (may_fail) return false;
        throw std::runtime_error("cuBLASLt: cublasLtMatmulAlgoGetHeuristic found no algorithm" +
                                 (rank ? " at rank " + std::to_string(rank) : std::string()) +
                                 " for m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                 " epilogue=" + std::to_string((int)epilogue));
    }
    const float alpha = 1.0f;
    CUBLASLT_CHECK(cublasLtMatmul(ctx.handle, desc.d, &alpha, a, la.l, b, lb.l, &beta, d, ld.l, d, ld.l,
                                  &it->second.algo, ctx.workspace, ctx.workspace_bytes, st));
    // its cost: 2 m n k FLOPs; A, B and D once each, C (= D) when beta adds it, the bias, the aux written
    const double mn = (double)m * n;
    it->second.issued += GemmCount{1, 2.0 * mn * k,
                                   ((double)m * k + (double)k * n) * ab_size + mn * d_size * (beta != 0.0f ? 2 : 1) +
                                       (bias ? (double)m * d_size : 0.0) + (aux ? mn * d_size : 0.0)};
    return true;
}

}  // namespace detail

// What every problem's calls cost so far (MatmulContext::CachedAlgo::issued), by key.
using GemmCounts = std::map<MatmulContext::Key, GemmCount>;
inline GemmCounts gemms_issued(const MatmulContext& ctx) {
    GemmCounts c;
    for (const auto& [key, entry] : ctx.algo_cache)
        if (entry.issued.calls > 0) c[key] = entry.issued;
    return c;
}
// after - before, per problem (the calls issued in between).
inline GemmCounts gemms_between(const GemmCounts& before, const GemmCounts& after) {
    GemmCounts d;
    for (const auto& [key, count] : after) {
        const auto b = before.find(key);
        const GemmCount diff = b == before.end() ? count : count - b->second;
        if (diff.calls > 0) d[key] = diff;
    }
    return d;
}
// Counts the matmuls of a replayed step graph (what its capture issued) as issued again.
inline void add_replayed_gemms(MatmulContext& ctx, const GemmCounts& graph) {
    for (const auto& [key, count] : graph) {
        const auto it = ctx.algo_cache.find(key);
        if (it != ctx.algo_cache.end()) it->second.issued += count;
    }
}
// The counts by problem_text, as a profile lists them.
inline std::map<std::string, GemmCount> gemms_by_problem(const GemmCounts& c) {
    std::map<std::string, GemmCount> out;
    for (const auto& [key, count] : c) out[detail::problem_text(key)] += count;
    return out;
}

namespace detail {

inline void matmul_check_aligned(const void* p, const char* name) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
        throw std::invalid_argument(std::string("matmul: ") + name +
                                    " is not 16-byte aligned; cuBLASLt and the bias gradient's 16-byte accesses need "
                                    "aligned operands (allocate with cudaMalloc, offsets in multiples of 16 bytes)");
}
inline void matmul_check_shape(int N, int IC, int OC) {
    if (N < 1 || IC < 1 || OC < 1 || IC % 8 != 0 || OC % 8 != 0)
        throw std::invalid_argument("matmul: unsupported shape N=" + std::to_string(N) + " IC=" + std::to_string(IC) +
                                    " OC=" + std::to_string(OC) + "; need N, IC, OC >= 1 and IC, OC multiples of 8");
}

// dbias in one launch, 16-byte accesses. Column group gx = kBiasGroupPacks packs of kPack columns
// (64 bf16 / 32 fp32 columns: a 128-byte segment of a row); row chunk = kBiasRows rows. Grid
// (ceil(OC / group columns), Y = bias_row_blocks(N, OC)), block (kBiasGroupPacks, kBiasRowThreads): block
// row gy sums the row chunks gy, gy + Y, gy + 2Y, ... in that order; in chunk h, thread (x, y) reads pack x
// of the group on rows h*kBiasRows + y + kBiasRowThreads*k, k = 0..kBiasRowsPerThread-1 (a warp reads 4
// whole segments), summing them in k order; the block adds its kBiasRowThreads sums per column in y
// order (in four quarters of y, then the quarters in order) into partial[gy*OC + c] ((Y, OC) fp32).
// The blocks of a column group count in on arrivals[gx]; the last of them adds, per column, the
// row blocks' partials into dbias in a fixed order (quarter q sums row blocks q, q+4, ... in order,
// then the quarters in order): the same bits whichever block is last. Y depends on N and OC alone, so
// the bits do too.
// pre non-null: dout holds d gelu(pre) on entry; each element is first replaced by dout * gelu'(pre)
// of kind `gelu` (rounded to floatX, which is what is summed): the GELU backward in the same pass.
// dout and pre 16-byte aligned, OC a multiple of kPack (host checks).
// Speed rules: rows are held as 16-byte packs (4 registers each, converted as they are used); a thread
// has 4 rows' loads in flight in the plain sum, 2 rows' dout and pre in the GELU pass, so that the erf
// GELU fits 80 registers without spills (kBiasBlocksPerSM resident blocks: make sass-report); Y keeps
// the grid within one wave of those on a 132-SM GPU (unless OC has more column groups than that), so a
// block pays its reduction and arrival once for several chunks, and the last block of a group reads
// ceil(Y / 4) partials a thread.
// (Runtime switches, not templates: the emulation poisons only a non-template kernel's static shared
// memory.)
constexpr int kBiasGroupPacks = 8;
constexpr int kBiasGroupCols = kBiasGroupPacks * kPack;
constexpr int kBiasRowThreads = 32;
constexpr int kBiasThreads = kBiasGroupPacks * kBiasRowThreads;
constexpr int kBiasRowsPerThread = 4;
constexpr int kBiasRows = kBiasRowThreads * kBiasRowsPerThread;
constexpr int kBiasBlocksPerSM = 3;                   // __launch_bounds__: at most 80 registers a thread
constexpr int kBiasGridAim = 132 * kBiasBlocksPerSM;  // one wave on an H100 / H200 (132 SMs)

// Row blocks Y of bias_sum_kernel's grid for dout (N, OC): at most kBiasGridAim blocks in all (at least
// one row block per column group), the ceil(N / kBiasRows) chunks spread evenly (each row block sums
// ceil(chunks / Y) or one fewer).
inline int bias_row_blocks(int N, int OC) {
    const int chunks = ceil_div(N, kBiasRows), groups = ceil_div(OC, kBiasGroupCols);
    const int most = std::max(1, kBiasGridAim / groups);
    return ceil_div(chunks, ceil_div(chunks, most));
}

// acc (kPack) += the rows of pack column p of dout (N, OC) in the row chunks gy, gy + Y, ... (Y = gridDim.y),
// row y0 of each and every kBiasRowThreads-th after it, in chunk then row order; with GELU kind K (not
// None), each element first becomes dout * gelu'(pre), rounded, stored back.
enum class BiasGelu { None, Tanh, Erf };
template <BiasGelu K>
__device__ inline void bias_rows_sum(float (&acc)[kPack], floatX* dout, const floatX* pre, int p, int y0, int N,
                                     int OC) {
    // rows in flight a thread: the plain sum's loads, or the GELU pass's dout and pre loads of half as many rows
    constexpr int kBatch = K == BiasGelu::None ? kBiasRowsPerThread : kBiasRowsPerThread / 2;
    const int chunks = ceil_div(N, kBiasRows);
    for (int h = blockIdx.y; h < chunks; h += gridDim.y) {
#pragma unroll
        for (int k0 = 0; k0 < kBiasRowsPerThread; k0 += kBatch) {
            const int r0 = h * kBiasRows + y0 + kBiasRowThreads * k0;
            PackX d[kBatch];
#pragma unroll
            for (int k = 0; k < kBatch; k++) {
                const int r = r0 + kBiasRowThreads * k;
                if (r < N) d[k] = *reinterpret_cast<const PackX*>(dout + (size_t)r * OC + (size_t)p * kPack);
            }
            if constexpr (K != BiasGelu::None) {
                // every load before the first store (dout and pre may alias as far as the compiler knows)
                constexpr Gelu kind = K == BiasGelu::Erf ? Gelu::Erf : Gelu::Tanh;
                PackX x[kBatch];
#pragma unroll
                for (int k = 0; k < kBatch; k++) {
                    const int r = r0 + kBiasRowThreads * k;
                    if (r < N) x[k] = *reinterpret_cast<const PackX*>(pre + (size_t)r * OC + (size_t)p * kPack);
                }
#pragma unroll
                for (int k = 0; k < kBatch; k++) {
                    const int r = r0 + kBiasRowThreads * k;
                    if (r >= N) continue;
#pragma unroll
                    for (int j = 0; j < kPack; j++)
                        d[k].v[j] = from_float<floatX>(to_float(d[k].v[j]) * gelu_grad(to_float(x[k].v[j]), kind));
                    *reinterpret_cast<PackX*>(dout + (size_t)r * OC + (size_t)p * kPack) = d[k];
                }
            }
#pragma unroll
            for (int k = 0; k < kBatch; k++)
                if (r0 + kBiasRowThreads * k < N)
#pragma unroll
                    for (int j = 0; j < kPack; j++) acc[j] += to_float(d[k].v[j]);
        }
    }
}

__global__ void __launch_bounds__(kBiasThreads, kBiasBlocksPerSM)
    bias_sum_kernel(float* dbias, float* partial, uint32_t* arrivals, floatX* dout, const floatX* pre, Gelu gelu, int N,
                    int OC) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    constexpr int kQuarters = 4, kThreads = kBiasThreads;
    __shared__ float sm[kBiasRowThreads][kBiasGroupCols + 1];
    __shared__ float quarter[kQuarters][kBiasGroupCols];
    const int p = blockIdx.x * kBiasGroupPacks + threadIdx.x;  // pack column
    const bool live = p < OC / kPack;
    float acc[kPack] = {};
    if (live) {
        if (!pre) bias_rows_sum<BiasGelu::None>(acc, dout, pre, p, threadIdx.y, N, OC);
        else if (gelu == Gelu::Erf) bias_rows_sum<BiasGelu::Erf>(acc, dout, pre, p, threadIdx.y, N, OC);
        else bias_rows_sum<BiasGelu::Tanh>(acc, dout, pre, p, threadIdx.y, N, OC);
    }
#pragma unroll
    for (int j = 0; j < kPack; j++) sm[threadIdx.y][threadIdx.x * kPack + j] = acc[j];
    __syncthreads();
    // thread t: column col of the group, quarter q of the y's (then of the chunks)
    const int t = threadIdx.y * kBiasGroupPacks + threadIdx.x;
    const int col = t % kBiasGroupCols, q = t / kBiasGroupCols;
    const int c = blockIdx.x * kBiasGroupCols + col;
    static_assert(kThreads == kQuarters * kBiasGroupCols || kThreads == 2 * kQuarters * kBiasGroupCols,
                  "the quarters need kQuarters * kBiasGroupCols threads");
    constexpr int kYPerQuarter = kBiasRowThreads / kQuarters;
    if (q < kQuarters) {
        float s = 0.0f;
        for (int y = q * kYPerQuarter; y < (q + 1) * kYPerQuarter; y++) s += sm[y][col];
        quarter[q][col] = s;
    }
    __syncthreads();
    if (t < kBiasGroupCols && c < OC) {
        float s = 0.0f;
        for (int j = 0; j < kQuarters; j++) s += quarter[j][col];
        partial[(size_t)blockIdx.y * OC + c] = s;
    }
    if (!arrive_last(arrivals + blockIdx.x, gridDim.y)) return;
    if (q < kQuarters) {
        float s = 0.0f;
        if (c < OC)
#pragma unroll 4
            for (int j = q; j < (int)gridDim.y; j += kQuarters) s += partial[(size_t)j * OC + c];
        quarter[q][col] = s;  // every thread has passed the first read of quarter (the barriers in arrive_last)
    }
    __syncthreads();
    if (t < kBiasGroupCols && c < OC) {
        float total = 0.0f;
        for (int j = 0; j < kQuarters; j++) total += quarter[j][col];
        dbias[c] += total;
    }
}

}  // namespace detail

// out (N, OC) floatX OVERWRITTEN = inp (N, IC) @ weight (OC, IC)^T + bias (OC, nullable).
// pre_gelu (N, OC) non-null: pre_gelu = inp @ weight^T + bias and out = gelu(pre_gelu) of kind gelu.
// Launches: one (the cuBLASLt matmul; with pre_gelu, Tanh and the fused epilogue found), else two (the
// matmul, then gelu_forward).
inline void matmul_forward(MatmulContext& ctx, floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                           int N, int IC, int OC, LaunchStream st, floatX* pre_gelu = nullptr, Gelu gelu = Gelu::Tanh) {
    detail::matmul_check_shape(N, IC, OC);
    detail::matmul_check_aligned(out, "out");
    detail::matmul_check_aligned(inp, "inp");
    detail::matmul_check_aligned(weight, "weight");
    if (bias) detail::matmul_check_aligned(bias, "bias");
    if (pre_gelu) detail::matmul_check_aligned(pre_gelu, "pre_gelu");
    const cudaDataType_t t = detail::kFloatXType;
    if (pre_gelu && ctx.fuse_gelu && gelu == Gelu::Tanh) {
        const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        ctx.last_gelu_fused = detail::lt_matmul(ctx, out, t, weight, true, IC, inp, false, IC, t, OC, N, IC, OC, 0.0f,
                                                epi, bias, pre_gelu, st, /*may_fail=*/true);
        if (ctx.last_gelu_fused) return;
    }
    ctx.last_gelu_fused = false;
    floatX* d = pre_gelu ? pre_gelu : out;
    detail::lt_matmul(ctx, d, t, weight, true, IC, inp, false, IC, t, OC, N, IC, OC, 0.0f,
                      bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, nullptr, st);
    if (pre_gelu) gelu_forward(out, pre_gelu, (size_t)N * OC, gelu, st);
}

// Floats of scratch matmul_backward needs for the bias gradient: (detail::bias_row_blocks(N, OC), OC). Not
// monotone in N (a larger N may need fewer row blocks): size it for the N of the call.
inline size_t matmul_backward_scratch_floats(int N, int OC) {
    return (size_t)detail::bias_row_blocks(N, OC) * (size_t)OC;
}
// Arrival counters matmul_backward needs for the bias gradient: one per column group (64 bf16 or
// 32 fp32 columns).
inline size_t matmul_backward_arrivals(int OC) { return (size_t)ceil_div(OC, detail::kBiasGroupCols); }

namespace detail {
// dbias (OC) += column sums of dout (N, OC) in one launch (bias_sum_kernel); with pre, dout is first
// replaced by dout * gelu'(pre) (kind gelu) in the same pass.
// row_blocks: the grid's Y, 0 for bias_row_blocks(N, OC) (the backward's; another value, 1 to the chunk
// count, lets the lab check a block over several chunks on a small shape; scratch then holds
// row_blocks * OC floats).
inline void bias_sum(float* dbias, float* scratch, uint32_t* arrivals, floatX* dout, const floatX* pre, Gelu gelu,
                     int N, int OC, LaunchStream st, int row_blocks = 0) {
    if (!scratch || !arrivals)
        throw std::invalid_argument(
            "matmul_backward: dbias needs scratch of matmul_backward_scratch_floats(N, OC) floats and "
            "matmul_backward_arrivals(OC) zeroed arrival counters");
    if (row_blocks < 0 || row_blocks > ceil_div(N, kBiasRows))
        throw std::invalid_argument("bias_sum: row_blocks " + std::to_string(row_blocks) +
                                    " is not 0 (the rule) nor 1 to the " + std::to_string(ceil_div(N, kBiasRows)) +
                                    " row chunks of N=" + std::to_string(N));
    const int Y = row_blocks > 0 ? row_blocks : bias_row_blocks(N, OC);
    const dim3 grid((unsigned)ceil_div(OC, kBiasGroupCols), (unsigned)Y);
    launch_kernel(bias_sum_kernel, grid, dim3(kBiasGroupPacks, kBiasRowThreads), 0, st, dbias, scratch, arrivals, dout,
                  pre, gelu, N, OC);
    CUDA_CHECK_LAUNCH();
}
// dinp and dweight of matmul_backward (cuBLASLt).
inline void matmul_backward_products(MatmulContext& ctx, floatX* dinp, float* dweight, const floatX* dout,
                                     const floatX* inp, const floatX* weight, int N, int IC, int OC, LaunchStream st) {
    matmul_check_shape(N, IC, OC);
    matmul_check_aligned(dout, "dout");
    matmul_check_aligned(inp, "inp");
    matmul_check_aligned(weight, "weight");
    matmul_check_aligned(dweight, "dweight");
    const cudaDataType_t t = kFloatXType;
    if (dinp) {
        matmul_check_aligned(dinp, "dinp");
        lt_matmul(ctx, dinp, t, weight, false, IC, dout, false, OC, t, IC, N, OC, IC, 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
                  nullptr, nullptr, st);
    }
    lt_matmul(ctx, dweight, CUDA_R_32F, inp, false, IC, dout, true, OC, t, IC, OC, N, IC, 1.0f,
              CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, st);
}
}  // namespace detail

// dinp (N, IC) floatX OVERWRITTEN = dout @ weight (nullable: skipped);
// dweight (OC, IC) fp32 ADDED += dout^T @ inp; dbias (OC) fp32 ADDED += column sums of dout
// (nullable; then scratch and arrivals may be nullptr, else scratch holds
// matmul_backward_scratch_floats(N, OC) floats and arrivals matmul_backward_arrivals(OC) counters,
// zero before the call and left zero: llmc/cuda/grid_arrival.cuh).
// dout (N, OC), inp (N, IC), weight (OC, IC) floatX.
inline void matmul_backward(MatmulContext& ctx, floatX* dinp, float* dweight, float* dbias, float* scratch,
                            uint32_t* arrivals, const floatX* dout, const floatX* inp, const floatX* weight, int N,
                            int IC, int OC, LaunchStream st) {
    detail::matmul_backward_products(ctx, dinp, dweight, dout, inp, weight, N, IC, OC, st);
    // without pre the kernel only reads dout
    if (dbias) detail::bias_sum(dbias, scratch, arrivals, const_cast<floatX*>(dout), nullptr, Gelu::Tanh, N, OC, st);
}

// matmul_backward of a layer followed by GELU of kind gelu (out = gelu(pre), pre = inp @ weight^T
// [+ bias]): dout (N, OC) holds d out on entry and is OVERWRITTEN with d pre = dout * gelu'(pre)
// (rounded to floatX), then the products as matmul_backward's with d pre. Launches, with dbias: the
// bias gradient's (bias_sum_kernel, the GELU backward in the same pass) + the products; without
// dbias (a layer without bias): gelu_backward in place + the products. dbias, scratch and arrivals
// as matmul_backward's; pre (N, OC) floatX, required.
inline void matmul_gelu_backward(MatmulContext& ctx, floatX* dinp, float* dweight, float* dbias, float* scratch,
                                 uint32_t* arrivals, floatX* dout, const floatX* pre, const floatX* inp,
                                 const floatX* weight, int N, int IC, int OC, LaunchStream st, Gelu gelu = Gelu::Tanh) {
    detail::matmul_check_shape(N, IC, OC);
    if (!pre) throw std::invalid_argument("matmul_gelu_backward: needs pre");
    // every check before dout and dbias change (matmul_backward_products repeats them, harmlessly)
    detail::matmul_check_aligned(dout, "dout");
    detail::matmul_check_aligned(pre, "pre");
    detail::matmul_check_aligned(inp, "inp");
    detail::matmul_check_aligned(weight, "weight");
    detail::matmul_check_aligned(dweight, "dweight");
    if (dinp) detail::matmul_check_aligned(dinp, "dinp");
    if (dbias) detail::bias_sum(dbias, scratch, arrivals, dout, pre, gelu, N, OC, st);
    else gelu_backward(dout, pre, dout, (size_t)N * OC, gelu, st);
    detail::matmul_backward_products(ctx, dinp, dweight, dout, inp, weight, N, IC, OC, st);
}

}  // namespace llmc::cuda
