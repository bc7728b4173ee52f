// Device emulation, the cuBLASLt subset the project uses, written from NVIDIA's documentation of
// cuBLASLt as shipped in the toolkit's cublasLt.h (the comment above each attribute, epilogue and
// function) and the cuBLAS library guide (chapter "Using the cuBLASLt API": cublasLtMatmul(), its
// datatypes table, cublasLtEpilogue_t, cublasLtMatmulDescAttributes_t,
// cublasLtMatmulPreferenceAttributes_t), and defined against that header's declarations, so an
// emulated binary links this instead of libcublasLt. Its own tests are dev/emu/tests/cublaslt_cases.cu
// with test/test_emulation_cublaslt.py (numpy reference), written from the same documentation, not
// from llmc/cuda/matmul.cuh's calls.
//
// Semantics (column-major, as cuBLASLt defines them):
//   D = epilogue(alpha * op(A) @ op(B) + beta * C + bias),  op(A) m x k, op(B) k x n, C and D m x n
//   A stored rows x cols = (m, k) for CUBLAS_OP_N and (k, m) for CUBLAS_OP_T/C, element (r, c) at r + c*ld;
//   every ld >= rows, except that C's may be 0 out of place (C's first column broadcast to all columns)
//   beta = 0: C is not read (the BLAS convention); C == D (in place) needs Cdesc to describe D
//   epilogue BIAS: + bias[r] (length = D's rows, packed, broadcast over columns, D's type), after
//     beta * C and before GELU (the guide's Aux_temp formula)
//   epilogue GELU: D = GELU(x) with the guide's formula 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
//     GELU_AUX also writes x (the GELU input) to the aux matrix (ld from
//     CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, "divisible by 8 and no less than the number of rows"),
//     in D's type (EPILOGUE_AUX_DATA_TYPE unset or -1; any other value is INVALID_VALUE, as documented
//     for a non-fp8 matmul)
// Where the documentation is silent, this emulation's choice (docs/emulation.md):
//   - accumulation: every product and beta*C summed in double, rounded once to fp32 (the scale type)
//     and then to D's type (a GPU accumulates in fp32 in an undocumented order).
//   - an algorithm needs, for each of A, B, C, D, the alignment its preference allowed
//     (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*, default 256 bytes), and for the bias and aux pointers the
//     alignment of the pointers the heuristic saw, if set ("routines that don't dereference this
//     pointer ... depend on its value to determine expected pointer alignment"); cublasLtMatmul with a
//     less aligned pointer returns INVALID_VALUE. Leading dimensions are known to the heuristic and
//     need nothing more.
//   - a refused call writes nothing; a matrix, the bias or aux that is not device memory or runs past
//     its allocation is EXECUTION_FAILED (on a GPU: a fault, or silent corruption).
// Supported: computeType CUBLAS_COMPUTE_32F or _32F_PEDANTIC with scale type CUDA_R_32F; A = B type
// CUDA_R_16BF with C = D CUDA_R_16BF or CUDA_R_32F, or all CUDA_R_32F (rows of the guide's table);
// epilogues DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS; batch count 1, column order,
// host pointer mode. Anything else returns CUBLAS_STATUS_NOT_SUPPORTED, as the library does for a
// combination it has no kernel for. Every attribute cublasLt.h lists can be set with its documented
// size (another size is INVALID_VALUE); one outside the subset refuses the problem only when set to a
// value other than its default (kOtherAttrs). cublasLtMatmul with algo = NULL runs the heuristic
// with default preferences itself, as the guide describes; the workspace must be 256-byte aligned.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>

#include "dev/emu/device_state.h"

namespace {

constexpr uint32_t kHandleMagic = 0x4C544831;  // "LTH1"

struct Handle {
    uint32_t magic = kHandleMagic;
};
struct Desc {
    int32_t compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    int32_t bias_type = -1;
    void* aux = nullptr;
    int64_t aux_ld = 0;
    int32_t aux_type = -1;
    // documented attributes outside the subset, as set (bytes); see kOtherAttrs
    std::map<int, std::vector<unsigned char>> other;
};
struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct Pref {
    uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
    uint64_t max_workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};
// What the emulated "algorithm" carries in cublasLtMatmulAlgo_t::data.
struct AlgoInfo {
    uint64_t magic;
    uint32_t align[4];               // A, B, C, D: from the preference
    uint32_t bias_align, aux_align;  // from the pointers in the descriptor at heuristic time
};
constexpr uint64_t kAlgoMagic = 0x414C474F454D5532ULL;  // "ALGOEMU2"
static_assert(sizeof(AlgoInfo) <= sizeof(cublasLtMatmulAlgo_t::data), "algo data too small");

cublasStatus_t say(cublasStatus_t s, const std::string& why) {
    if (s != CUBLAS_STATUS_SUCCESS) std::fprintf(stderr, "emulated cuBLASLt: %s\n", why.c_str());
    return s;
}

size_t elem_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 0; }

uint32_t alignment_of(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a == 0) return 256;
    const uintptr_t low = a & (~a + 1);
    return (uint32_t)(low > 256 ? 256 : low);
}

bool has_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_gelu(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

// Documented cublasLtMatmulDescAttributes_t outside the subset: the size cublasLt.h gives each (a
// wrong size is INVALID_VALUE, as for every attribute), and what a value other than the default does
// here: IGNORE (no effect on this subset's problems: heuristic hints, batch strides with batch count 1,
// fp8-only flags), INVALID (documented: "if set for an unsupported matrix data, scale, and compute type
// combination, calling cublasLtMatmul() will return CUBLAS_INVALID_VALUE"), UNSUPPORTED (not in this
// subset: NOT_SUPPORTED).
enum class Other { IGNORE, INVALID, UNSUPPORTED };
struct OtherAttr {
    int attr;
    size_t size;
    int64_t dflt;
    Other what;
};
const OtherAttr kOtherAttrs[] = {
    {CUBLASLT_MATMUL_DESC_POINTER_MODE, sizeof(int32_t), CUBLASLT_POINTER_MODE_HOST, Other::UNSUPPORTED},
    {CUBLASLT_MATMUL_DESC_FILL_MODE, sizeof(int32_t), CUBLAS_FILL_MODE_FULL, Other::UNSUPPORTED},
    {CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, sizeof(int64_t), 0, Other::IGNORE},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, sizeof(int64_t), 0, Other::IGNORE},
    {CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, sizeof(int64_t), 0, Other::IGNORE},
    {CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sizeof(int32_t), 0, Other::IGNORE},
    {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sizeof(void*), 0, Other::INVALID},
    {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sizeof(void*), 0, Other::INVALID},
    {CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, sizeof(void*), 0, Other::UNSUPPORTED},  // allowed for non-fp8 C
    {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, sizeof(void*), 0, Other::INVALID},
    {CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, sizeof(void*), 0, Other::INVALID},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, sizeof(void*), 0, Other::INVALID},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, sizeof(void*), 0, Other::INVALID},
    {CUBLASLT_MATMUL_DESC_FAST_ACCUM, sizeof(int8_t), 0, Other::IGNORE},
    {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, sizeof(int32_t), 0, Other::UNSUPPORTED},
    {CUBLASLT_MATMUL_DESC_B_SCALE_MODE, sizeof(int32_t), 0, Other::UNSUPPORTED},
    {CUBLASLT_MATMUL_DESC_C_SCALE_MODE, sizeof(int32_t), 0, Other::UNSUPPORTED},
    {CUBLASLT_MATMUL_DESC_D_SCALE_MODE, sizeof(int32_t), 0, Other::UNSUPPORTED},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, sizeof(int32_t), 0, Other::UNSUPPORTED},
    {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, sizeof(void*), 0, Other::INVALID},
    {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, sizeof(int32_t), 0, Other::UNSUPPORTED},
    {CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, sizeof(cublasLtEmulationDesc_t), 0, Other::UNSUPPORTED},
};
const OtherAttr* other_attr(int attr) {
    for (const OtherAttr& o : kOtherAttrs)
        if (o.attr == attr) return &o;
    return nullptr;
}
int64_t as_int(const std::vector<unsigned char>& b) {
    if (b.size() == 1) return (int8_t)b[0];
    if (b.size() == 4) {
        int32_t v;
        std::memcpy(&v, b.data(), 4);
        return v;
    }
    int64_t v;
    std::memcpy(&v, b.data(), 8);
    return v;
}

bool valid_op(int32_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C || op == CUBLAS_OP_CONJG;
}

// The checks cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul share: the problem's shape and types.
// C == D tells cublasLtMatmul's in-place case apart (the heuristic does not see pointers: same = false).
cublasStatus_t check_problem(const Desc& d, const Layout& A, const Layout& B, const Layout& C, const Layout& D,
                             bool same_cd) {
    for (const auto& kv : d.other) {
        const OtherAttr* o = other_attr(kv.first);
        if (!o || o->what == Other::IGNORE || as_int(kv.second) == o->dflt) continue;
        return say(o->what == Other::INVALID ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_SUPPORTED,
                   "matmul descriptor attribute " + std::to_string(kv.first) + " set to a value this subset " +
                       (o->what == Other::INVALID ? "(no fp8) cannot take" : "does not support"));
    }
    if ((d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_PEDANTIC) || d.scale != CUDA_R_32F)
        return say(CUBLAS_STATUS_NOT_SUPPORTED,
                   "compute/scale type other than CUBLAS_COMPUTE_32F(_PEDANTIC)/CUDA_R_32F");
    const bool bf16 = A.type == CUDA_R_16BF && B.type == CUDA_R_16BF && C.type == D.type &&
                      (D.type == CUDA_R_16BF || D.type == CUDA_R_32F);
    const bool fp32 = A.type == CUDA_R_32F && B.type == CUDA_R_32F && C.type == CUDA_R_32F && D.type == CUDA_R_32F;
    if (!bf16 && !fp32) return say(CUBLAS_STATUS_NOT_SUPPORTED, "type combination not in this subset");
    if (!valid_op(d.transa) || !valid_op(d.transb) || !valid_op(d.transc))
        return say(CUBLAS_STATUS_INVALID_VALUE, "TRANSA/TRANSB/TRANSC is not a cublasOperation_t");
    if (d.transa == CUBLAS_OP_CONJG || d.transb == CUBLAS_OP_CONJG)
        return say(CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_OP_CONJG (a placeholder, not supported)");
    if (d.transc != CUBLAS_OP_N)
        return say(CUBLAS_STATUS_NOT_SUPPORTED, "CUBLASLT_MATMUL_DESC_TRANSC must be CUBLAS_OP_N");
    const uint32_t e = d.epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(e) && !has_gelu(e))
        return say(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue " + std::to_string(e) + " not in this subset");
    const uint64_t m = D.rows, n = D.cols;
    const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
    const uint64_t k = ta ? A.rows : A.cols, am = ta ? A.cols : A.rows;
    const uint64_t bk = tb ? B.cols : B.rows, bn = tb ? B.rows : B.cols;
    if (am != m || bk != k || bn != n || C.rows != m || C.cols != n)
        return say(CUBLAS_STATUS_INVALID_VALUE, "shapes of op(A), op(B), C and D do not agree");
    const Layout* lays[4] = {&A, &B, &C, &D};
    for (int i = 0; i < 4; i++) {
        if (i == 2 && !same_cd && C.ld == 0) continue;  // out of place, C's ld may be 0: broadcast
        if (lays[i]->ld < (int64_t)std::max<uint64_t>(1, lays[i]->rows))
            return say(CUBLAS_STATUS_INVALID_VALUE, std::string("the leading dimension of ") + "ABCD"[i] + " (" +
                                                        std::to_string(lays[i]->ld) + ") is smaller than its rows (" +
                                                        std::to_string(lays[i]->rows) + ")");
    }
    if (same_cd && (C.type != D.type || C.rows != D.rows || C.cols != D.cols || C.ld != D.ld))
        return say(CUBLAS_STATUS_INVALID_VALUE, "C == D (in place) needs Cdesc equal to Ddesc (same ld)");
    if (has_bias(e) && d.bias_type != -1 && d.bias_type != (int32_t)D.type)
        return say(CUBLAS_STATUS_NOT_SUPPORTED, "bias type other than D's type");
    if (has_aux(e)) {
        if (d.aux_type != -1)
            return say(CUBLAS_STATUS_INVALID_VALUE,
                       "EPILOGUE_AUX_DATA_TYPE set (only fp8 kernels take one; leave it -1)");
        if (d.aux_ld % 8 != 0 || d.aux_ld < (int64_t)m)
            return say(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD " + std::to_string(d.aux_ld) +
                                                        " must be divisible by 8 and no less than D's rows " +
                                                        std::to_string(m));
    }
    return CUBLAS_STATUS_SUCCESS;
}

// sum_p a[p] * b[p] in double, in four interleaved partial sums (the summation order is
// undocumented; four sums only hide the latency of the additions). a and b are the emulation's own
// fp32 copies of op(A) and op(B), read from device memory with checks: not instrumented.
__attribute__((no_sanitize("address", "undefined"))) double dot_in_double(const float* a, const float* b, int64_t k) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
        s0 += (double)a[p] * (double)b[p];
        s1 += (double)a[p + 1] * (double)b[p + 1];
        s2 += (double)a[p + 2] * (double)b[p + 2];
        s3 += (double)a[p + 3] * (double)b[p + 3];
    }
    for (; p < k; p++) s0 += (double)a[p] * (double)b[p];
    return (s0 + s1) + (s2 + s3);
}

float load(const void* p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
void store(void* p, cudaDataType t, size_t i, double v) {
    if (t == CUDA_R_32F) static_cast<float*>(p)[i] = (float)v;
    else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16((float)v);  // via the scale type; nearest even
}

// The bytes a matrix occupies (last column: rows elements), for the bounds check.
size_t span_bytes(const Layout& l) {
    if (l.rows == 0 || l.cols == 0) return 0;
    return ((l.cols - 1) * (size_t)l.ld + l.rows) * elem_size(l.type);
}

const Desc& desc_of(cublasLtMatmulDesc_t d) { return *reinterpret_cast<const Desc*>(d); }
const Layout& layout_of(cublasLtMatrixLayout_t l) { return *reinterpret_cast<const Layout*>(l); }

cublasStatus_t heuristic(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl,
                         const Pref& p, cublasLtMatmulHeuristicResult_t* result) {
    const cublasStatus_t s = check_problem(d, a, b, c, dl, false);
    if (s != CUBLAS_STATUS_SUCCESS) return s == CUBLAS_STATUS_INVALID_VALUE ? s : CUBLAS_STATUS_NOT_SUPPORTED;
    if (p.search_mode != CUBLASLT_SEARCH_BEST_FIT)
        return say(CUBLAS_STATUS_NOT_SUPPORTED, "CUBLASLT_MATMUL_PREF_SEARCH_MODE other than BEST_FIT");
    std::memset(result, 0, sizeof *result);
    // a pointer not yet set (NULL) when the heuristic runs sets no expectation
    AlgoInfo info{kAlgoMagic,
                  {p.align[0], p.align[1], p.align[2], p.align[3]},
                  d.bias ? alignment_of(d.bias) : 1u,
                  d.aux ? alignment_of(d.aux) : 1u};
    std::memcpy(result->algo.data, &info, sizeof info);
    result->workspaceSize = 0;
    result->state = CUBLAS_STATUS_SUCCESS;
    result->wavesCount = 1.0f;
    return CUBLAS_STATUS_SUCCESS;
}

// Runs a validated matmul (cublasLtMatmul's checks passed): the bounds of the matrices, bias and
// aux in device memory (EXECUTION_FAILED: a GPU faults), then D = epilogue(al op(A) op(B) + be C + bias).
cublasStatus_t run_matmul(const Desc& d, const Layout& la, const Layout& lb, const Layout& lc, const Layout& ld,
                          float al, float be, const void* A, const void* B, const void* C, void* D) {
    const int64_t m = (int64_t)ld.rows, n = (int64_t)ld.cols;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    llmc::emu::DeviceState& dev = llmc::emu::device();
    {
        std::lock_guard<std::mutex> lock(dev.mu);
        const std::pair<const void*, size_t> spans[4] = {
            {A, span_bytes(la)}, {B, span_bytes(lb)}, {C, be != 0.0f ? span_bytes(lc) : 0}, {D, span_bytes(ld)}};
        for (int i = 0; i < 4; i++)
            if (spans[i].second && !dev.device_range(spans[i].first, spans[i].second))
                return say(CUBLAS_STATUS_EXECUTION_FAILED,
                           std::string("matrix ") + "ABCD"[i] + " is not device memory or runs past its allocation");
        if (has_bias(d.epilogue) && !dev.device_range(d.bias, ld.rows * elem_size(ld.type)))
            return say(CUBLAS_STATUS_EXECUTION_FAILED, "bias is not device memory of D's rows");
        if (has_aux(d.epilogue) &&
            !dev.device_range(d.aux, ((ld.cols - 1) * (size_t)d.aux_ld + ld.rows) * elem_size(ld.type)))
            return say(CUBLAS_STATUS_EXECUTION_FAILED, "aux is not device memory of (aux_ld, D's columns)");
    }
    const int64_t k = d.transa == CUBLAS_OP_N ? (int64_t)la.cols : (int64_t)la.rows;
    dev.counters.matmul((uint64_t)m, (uint64_t)n, (uint64_t)k);  // for the per-step report (step_counters.h)
    const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
    // op(A) as m rows of k and op(B) as n columns of k, in fp32, each element read once from device
    // memory (a speed-up only)
    std::vector<float> a_op((size_t)m * (size_t)k), b_op((size_t)n * (size_t)k);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++)
            a_op[(size_t)(i * k + p)] = load(A, la.type, ta ? (size_t)(p + i * la.ld) : (size_t)(i + p * la.ld));
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < k; p++)
            b_op[(size_t)(j * k + p)] = load(B, lb.type, tb ? (size_t)(j + p * lb.ld) : (size_t)(p + j * lb.ld));
            // C == D is element-wise safe: each element of C is read before the same element of D is written.
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++) {
        const float* bcol = b_op.data() + (size_t)(j * k);
        for (int64_t i = 0; i < m; i++) {
            const float* arow = a_op.data() + (size_t)(i * k);
            double x = (double)al * dot_in_double(arow, bcol, k);
            if (be != 0.0f) x += (double)be * load(C, lc.type, (size_t)(i + j * lc.ld));  // beta = 0: C is not read
            if (has_bias(d.epilogue)) x += load(d.bias, ld.type, (size_t)i);
            if (has_aux(d.epilogue)) store(d.aux, ld.type, (size_t)(i + j * d.aux_ld), x);
            if (has_gelu(d.epilogue)) {
                const double c = std::sqrt(2.0 / M_PI);
                x = 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
            }
            store(D, ld.type, (size_t)(i + j * ld.ld), x);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = reinterpret_cast<cublasLtHandle_t>(new Handle());
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete reinterpret_cast<Handle*>(h);
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        default: return "CUBLAS_STATUS_(other)";
    }
}
const char* cublasLtGetStatusString(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "success";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
        default: return "emulated cuBLASLt status";
    }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    Desc* x = new Desc();
    x->compute = compute;
    x->scale = scale;
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(x);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete reinterpret_cast<Desc*>(d);
    return CUBLAS_STATUS_SUCCESS;
}

// Each attribute has the size cublasLt.h states; another size (or a null buffer) is INVALID_VALUE.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    Desc* d = reinterpret_cast<Desc*>(desc);
    if (!d || !buf) return say(CUBLAS_STATUS_INVALID_VALUE, "MatmulDescSetAttribute: null descriptor or buffer");
    auto wrong_size = [&](size_t want) {
        return say(CUBLAS_STATUS_INVALID_VALUE, "MatmulDescSetAttribute: attribute " + std::to_string((int)attr) +
                                                    " has size " + std::to_string(want) + ", got " +
                                                    std::to_string(size));
    };
    auto get = [&](auto& field) {
        if (size != sizeof(field)) return wrong_size(sizeof(field));
        std::memcpy(&field, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    };
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return get(d->compute);
        case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return get(d->scale);
        case CUBLASLT_MATMUL_DESC_TRANSA: return get(d->transa);
        case CUBLASLT_MATMUL_DESC_TRANSB: return get(d->transb);
        case CUBLASLT_MATMUL_DESC_TRANSC: return get(d->transc);
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return get(d->epilogue);
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return get(d->bias);
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return get(d->bias_type);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return get(d->aux);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return get(d->aux_ld);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return get(d->aux_type);
        default: {
            const OtherAttr* o = other_attr((int)attr);
            if (!o)
                return say(CUBLAS_STATUS_INVALID_VALUE,
                           "MatmulDescSetAttribute: attribute " + std::to_string((int)attr) + " is not in cublasLt.h");
            if (size != o->size) return wrong_size(o->size);
            const unsigned char* b = static_cast<const unsigned char*>(buf);
            d->other[(int)attr].assign(b, b + size);
            return CUBLAS_STATUS_SUCCESS;
        }
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    *l = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete reinterpret_cast<Layout*>(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    *p = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref());
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete reinterpret_cast<Pref*>(p);
    return CUBLAS_STATUS_SUCCESS;
}
// Sizes from cublasLt.h; REDUCTION_SCHEME_MASK, MAX_WAVES_COUNT and IMPL_MASK only filter algorithms,
// and the emulated one (no split-K, no waves to speak of) is kept whatever they say.
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
    Pref* p = reinterpret_cast<Pref*>(pref);
    if (!p || !buf) return say(CUBLAS_STATUS_INVALID_VALUE, "PreferenceSetAttribute: null preference or buffer");
    auto check = [&](size_t want) {
        if (size == want) return CUBLAS_STATUS_SUCCESS;
        return say(CUBLAS_STATUS_INVALID_VALUE, "PreferenceSetAttribute: attribute " + std::to_string((int)attr) +
                                                    " has size " + std::to_string(want) + ", got " +
                                                    std::to_string(size));
    };
    auto get = [&](auto& field) {
        const cublasStatus_t s = check(sizeof(field));
        if (s == CUBLAS_STATUS_SUCCESS) std::memcpy(&field, buf, size);
        return s;
    };
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return get(p->search_mode);
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return get(p->max_workspace);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return get(p->align[0]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return get(p->align[1]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return get(p->align[2]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return get(p->align[3]);
        case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return check(sizeof(uint32_t));
        case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return check(sizeof(float));
        case CUBLASLT_MATMUL_PREF_IMPL_MASK: return check(sizeof(uint64_t));
        default:
            return say(CUBLAS_STATUS_INVALID_VALUE,
                       "PreferenceSetAttribute: attribute " + std::to_string((int)attr) + " is not in cublasLt.h");
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* count) {
    if (!h || reinterpret_cast<Handle*>(h)->magic != kHandleMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || !count || !results)
        return say(CUBLAS_STATUS_INVALID_VALUE, "requestedAlgoCount <= 0 or no result array");
    if (!desc || !a || !b || !c || !dl || !pref) return say(CUBLAS_STATUS_INVALID_VALUE, "a null descriptor");
    *count = 0;
    const cublasStatus_t s = heuristic(desc_of(desc), layout_of(a), layout_of(b), layout_of(c), layout_of(dl),
                                       *reinterpret_cast<const Pref*>(pref), &results[0]);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// cublasLt.h: with sizeInBytes 0, sizeWritten gets the bytes the attribute needs (INVALID_VALUE without
// sizeWritten); otherwise INVALID_VALUE for a NULL buf or a size other than the attribute's storage,
// else the value is written and sizeWritten (when given) gets the bytes written. The emulated heuristic's
// one algorithm reports the documented defaults: algorithm 0, no tile or stages named (UNDEFINED), one K
// split, no reduction, no swizzling, no custom option, inner and cluster shapes 0 (undefined / auto).
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf, size_t size,
                                                    size_t* written) {
    if (!algo) return say(CUBLAS_STATUS_INVALID_VALUE, "AlgoConfigGetAttribute: null algorithm");
    AlgoInfo info;
    std::memcpy(&info, algo->data, sizeof info);
    if (info.magic != kAlgoMagic)
        return say(CUBLAS_STATUS_INVALID_VALUE,
                   "AlgoConfigGetAttribute: algorithm not from cublasLtMatmulAlgoGetHeuristic");
    auto give = [&](auto value) {
        if (size == 0) {
            if (!written) return say(CUBLAS_STATUS_INVALID_VALUE, "AlgoConfigGetAttribute: size 0 and no sizeWritten");
            *written = sizeof value;
            return CUBLAS_STATUS_SUCCESS;
        }
        if (!buf || size != sizeof value)
            return say(CUBLAS_STATUS_INVALID_VALUE, "AlgoConfigGetAttribute: attribute " + std::to_string((int)attr) +
                                                        " has size " + std::to_string(sizeof value) + ", got " +
                                                        std::to_string(size) + (buf ? "" : " and a null buffer"));
        std::memcpy(buf, &value, sizeof value);
        if (written) *written = sizeof value;
        return CUBLAS_STATUS_SUCCESS;
    };
    switch (attr) {
        case CUBLASLT_ALGO_CONFIG_ID: return give(int32_t{0});
        case CUBLASLT_ALGO_CONFIG_TILE_ID: return give(uint32_t{CUBLASLT_MATMUL_TILE_UNDEFINED});
        case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: return give(int32_t{1});
        case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME: return give(uint32_t{CUBLASLT_REDUCTION_SCHEME_NONE});
        case CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING: return give(uint32_t{0});
        case CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION: return give(uint32_t{0});
        case CUBLASLT_ALGO_CONFIG_STAGES_ID: return give(uint32_t{CUBLASLT_MATMUL_STAGES_UNDEFINED});
        case CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID: return give(uint16_t{0});
        case CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID: return give(uint16_t{0});
        default:
            return say(CUBLAS_STATUS_INVALID_VALUE,
                       "AlgoConfigGetAttribute: attribute " + std::to_string((int)attr) + " is not in cublasLt.h");
    }
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t adesc, const void* B, cublasLtMatrixLayout_t bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t cdesc, void* D,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    if (!h || reinterpret_cast<Handle*>(h)->magic != kHandleMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !adesc || !bdesc || !cdesc || !ddesc) return say(CUBLAS_STATUS_INVALID_VALUE, "a null descriptor");
    const Desc& d = desc_of(desc);
    const Layout &la = layout_of(adesc), &lb = layout_of(bdesc), &lc = layout_of(cdesc), &ld = layout_of(ddesc);
    if (cublasStatus_t s = check_problem(d, la, lb, lc, ld, C == D)) return s;
    if (!alpha || !beta) return say(CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is null");
    if (has_bias(d.epilogue) && !d.bias)
        return say(CUBLAS_STATUS_INVALID_VALUE, "a BIAS epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    if (has_aux(d.epilogue) && !d.aux)
        return say(CUBLAS_STATUS_INVALID_VALUE, "a GELU_AUX epilogue without EPILOGUE_AUX_POINTER");
    if (workspace && workspace_bytes && alignment_of(workspace) < 256)
        return say(CUBLAS_STATUS_INVALID_VALUE, "the workspace pointer must be 256-byte aligned");
    // no algorithm: "an implicit heuristics query with default search preferences"
    cublasLtMatmulHeuristicResult_t implicit;
    if (!algo) {
        if (cublasStatus_t s = heuristic(d, la, lb, lc, ld, Pref(), &implicit)) return s;
        algo = &implicit.algo;
    }
    AlgoInfo info;
    std::memcpy(&info, algo->data, sizeof info);
    if (info.magic != kAlgoMagic)
        return say(CUBLAS_STATUS_INVALID_VALUE, "algorithm not from cublasLtMatmulAlgoGetHeuristic");
    // the algorithm's alignment requirement (the preference it was chosen under) on the four matrices
    const void* ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++) {
        const uint32_t have = alignment_of(ptrs[i]), need = std::max<uint32_t>(1, info.align[i]);
        if (have < need)
            return say(CUBLAS_STATUS_INVALID_VALUE, std::string("matrix ") + "ABCD"[i] + " is " + std::to_string(have) +
                                                        "-byte aligned, the algorithm was chosen for " +
                                                        std::to_string(need) +
                                                        " (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*)");
    }
    if (has_bias(d.epilogue) && alignment_of(d.bias) < info.bias_align)
        return say(CUBLAS_STATUS_INVALID_VALUE, "the bias pointer is " + std::to_string(alignment_of(d.bias)) +
                                                    "-byte aligned, the algorithm was chosen for one " +
                                                    std::to_string(info.bias_align) + "-byte aligned");
    if (has_aux(d.epilogue) && alignment_of(d.aux) < info.aux_align)
        return say(CUBLAS_STATUS_INVALID_VALUE, "the aux pointer is " + std::to_string(alignment_of(d.aux)) +
                                                    "-byte aligned, the algorithm was chosen for one " +
                                                    std::to_string(info.aux_align) + "-byte aligned");
    // host pointer mode: alpha and beta are read now (a captured matmul keeps these values)
    const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    if (llmc::emu::Capture* cap = llmc::emu::device().capture_of(stream)) {  // runs when the graph runs
        cap->work.push_back([d, la, lb, lc, ld, al, be, A, B, C, D] {
            if (run_matmul(d, la, lb, lc, ld, al, be, A, B, C, D) != CUBLAS_STATUS_SUCCESS)
                llmc::emu::device_fault("a captured cublasLtMatmul failed when its graph ran");
        });
        return CUBLAS_STATUS_SUCCESS;
    }
    return run_matmul(d, la, lb, lc, ld, al, be, A, B, C, D);
}

}  // extern "C"
