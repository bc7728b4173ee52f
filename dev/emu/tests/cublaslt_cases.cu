// Cases for the emulated cuBLASLt (dev/emu/cublaslt.cpp), run through the public API the way
// NVIDIA documents it (cublasLt.h and the cuBLAS library guide, "Using the cuBLASLt API"), not the
// way this project calls it. This program only runs them and records what happened; the judgement
// is test/test_emulation_cublaslt.py's, which computes every expected value with numpy from the
// documented definition D = epilogue(alpha * op(A) op(B) + beta * C + bias).
//
//   cublaslt_cases OUTDIR [--seed N]
//
// Writes OUTDIR/cases.json (per case: its parameters, the status each API call returned, the files
// below) and, per case, raw little-endian buffers OUTDIR/<case>.<buffer>.bin: A, B and bias (inputs),
// C0 / C (C before / after), D0 / D (D before / after), aux0 / aux (aux before / after). Matrices are
// dumped whole, ld * cols elements, padding included: padding and D's elements are poisoned with
// NaN bit patterns first, so a missing write, a write into the padding, or a read of the padding
// shows. Fresh random inputs each run (the seed is printed; --seed repeats a run). Exit status 0 when
// every case ran (whatever the statuses), 1 when this program itself failed.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

enum Ty { F32, BF16, F16 };
cudaDataType cuda_type(Ty t) { return t == F32 ? CUDA_R_32F : t == BF16 ? CUDA_R_16BF : CUDA_R_16F; }
size_t bytes_of(Ty t) { return t == F32 ? 4 : 2; }
const char* ty_name(Ty t) { return t == F32 ? "f32" : t == BF16 ? "bf16" : "f16"; }

// Poison: quiet NaNs with a payload, recognisable bit for bit.
constexpr uint32_t kPoison32 = 0x7FC0DEADu;
constexpr uint16_t kPoison16 = 0x7FDDu;
constexpr uint32_t kNaN32 = 0x7FC00000u;  // C's contents in the beta = 0 cases
constexpr uint16_t kNaN16 = 0x7FC0u;

enum Fault {
    NONE,
    LD_A,
    LD_B,
    LD_C,
    LD_D,         // that matrix's layout with ld = rows - 1
    INPLACE_LD,   // C == D, but Cdesc's ld differs from Ddesc's
    AUX_LD,       // EPILOGUE_AUX_LD set to fault_value
    TYPES,        // the layouts' types replaced by fault_types
    COMPUTE_16F,  // a descriptor with CUBLAS_COMPUTE_16F / CUDA_R_16F
    MISALIGN_A,
    MISALIGN_D,            // the pointer moved by one element after the heuristic
    MISALIGN_BIAS,         // the bias pointer moved by one element after the heuristic
    NULL_BIAS,             // BIAS_POINTER set back to NULL
    AUX_TYPE,              // EPILOGUE_AUX_DATA_TYPE set to fault_value
    WORKSPACE_MISALIGNED,  // a workspace 16 bytes past a 256-byte boundary
    ALPHA_NULL,            // alpha = NULL
    TRANSC,                // TRANSC = CUBLAS_OP_T
    NULL_HANDLE,           // cublasLtMatmul with a NULL handle
};
const char* fault_name(Fault f) {
    static const char* names[] = {"none",       "ld_a",          "ld_b",       "ld_c",        "ld_d",
                                  "inplace_ld", "aux_ld",        "types",      "compute_16f", "misalign_a",
                                  "misalign_d", "misalign_bias", "null_bias",  "aux_type",    "workspace_misaligned",
                                  "alpha_null", "transc",        "null_handle"};
    return names[f];
}

struct Spec {
    std::string name;
    Ty a = BF16, b = BF16, c = BF16, d = BF16;
    int m = 37, n = 19, k = 45;
    cublasOperation_t opa = CUBLAS_OP_N, opb = CUBLAS_OP_N;
    int64_t pad_a = 3, pad_b = 5, pad_c = 2, pad_d = 7;  // ld = rows + pad
    float alpha = 1.0f, beta = 0.0f;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    int64_t aux_ld = 0;      // 0: the next multiple of 8 at or above m, plus 8 (so it differs from D's ld)
    bool inplace = false;    // C == D
    bool c_nan = false;      // C filled with NaN (the cases with beta = 0)
    bool c_ld0 = false;      // out of place, C's ld = 0 (broadcast of C's first column)
    bool algo_null = false;  // cublasLtMatmul with algo = NULL
    bool workspace = false;  // a 1 MiB workspace, allowed by the preference
    int32_t aux_type = -2;   // -2: EPILOGUE_AUX_DATA_TYPE not set; else set to this value
    uint32_t pref_align[4] = {0, 0, 0, 0};  // MIN_ALIGNMENT_{A,B,C,D}_BYTES, 0 = not set (default 256)
    size_t offset[4] = {0, 0, 0, 0};        // bytes past a 256-byte boundary for A, B, C, D
    Fault fault = NONE;
    int64_t fault_value = 0;
    Ty fault_types[4] = {F32, F32, F32, F32};
};

struct Matrix {
    Ty t;
    uint64_t rows, cols;
    int64_t ld;
    size_t elems() const { return ld == 0 ? rows : (size_t)ld * cols; }  // dumped region
    size_t bytes() const { return elems() * bytes_of(t); }
};

std::string out_dir;
std::mt19937_64 rng;
std::vector<std::string> json_cases;
cublasLtHandle_t handle;

void fail(const std::string& why) {
    std::fprintf(stderr, "cublaslt_cases: %s\n", why.c_str());
    std::exit(1);
}
void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(e));
}

void put(std::vector<unsigned char>& h, Ty t, size_t i, uint32_t bits) {
    if (t == F32) std::memcpy(&h[i * 4], &bits, 4);
    else {
        const uint16_t b = (uint16_t)bits;
        std::memcpy(&h[i * 2], &b, 2);
    }
}
uint32_t random_bits(Ty t) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const float v = u(rng);
    if (t == F32) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        return b;
    }
    if (t == BF16) {
        const __nv_bfloat16 h = __float2bfloat16(v);
        uint16_t b;
        std::memcpy(&b, &h, 2);
        return b;
    }
    return 0;  // f16: only in refused cases, never read
}
uint32_t poison(Ty t) { return t == F32 ? kPoison32 : kPoison16; }

// Host image of a matrix: random values (or NaN) in rows x cols, poison in the padding.
std::vector<unsigned char> host_matrix(const Matrix& m, bool nan_values, bool all_poison) {
    std::vector<unsigned char> h(m.bytes());
    const size_t n = m.elems();
    for (size_t i = 0; i < n; i++) {
        const uint64_t r = m.ld == 0 ? i : i % (uint64_t)m.ld;
        const bool inside = r < m.rows;
        put(h, m.t, i,
            all_poison || !inside ? poison(m.t)
            : nan_values          ? (m.t == F32 ? kNaN32 : kNaN16)
                                  : random_bits(m.t));
    }
    return h;
}

struct DevBuf {
    void* base = nullptr;
    char* ptr = nullptr;
    size_t bytes = 0;
};
DevBuf dev_alloc(size_t bytes, size_t offset) {
    DevBuf b;
    b.bytes = bytes;
    check_cuda(cudaMalloc(&b.base, bytes + offset + 256), "cudaMalloc");
    b.ptr = static_cast<char*>(b.base) + offset;
    return b;
}
void upload(const DevBuf& b, const std::vector<unsigned char>& h) {
    check_cuda(cudaMemcpy(b.ptr, h.data(), h.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}
std::string dump(const std::string& cs, const char* what, const void* dptr, size_t bytes, bool device = true) {
    std::vector<unsigned char> h(bytes);
    if (bytes) {
        if (device) check_cuda(cudaMemcpy(h.data(), dptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
        else std::memcpy(h.data(), dptr, bytes);
    }
    const std::string file = cs + "." + what + ".bin";
    FILE* f = std::fopen((out_dir + "/" + file).c_str(), "wb");
    if (!f) fail("cannot write " + out_dir + "/" + file);
    if (bytes && std::fwrite(h.data(), 1, bytes, f) != bytes) fail("short write " + file);
    std::fclose(f);
    return file;
}

struct Record {
    std::vector<std::pair<std::string, long long>> statuses;
    std::vector<std::pair<std::string, std::string>> files;  // buffer -> "file:type:elements"
    void status(const std::string& call, long long s) { statuses.emplace_back(call, s); }
};

std::string json_obj(const std::vector<std::pair<std::string, std::string>>& kv) {
    std::string s = "{";
    for (size_t i = 0; i < kv.size(); i++) s += (i ? ", " : "") + ("\"" + kv[i].first + "\": " + kv[i].second);
    return s + "}";
}
std::string q(const std::string& s) { return "\"" + s + "\""; }
std::string num(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", v);
    return b;
}

void emit(const Spec& s, const Matrix& A, const Matrix& B, const Matrix& C, const Matrix& D, int64_t aux_ld,
          const Record& r) {
    std::vector<std::pair<std::string, std::string>> st, files;
    for (const auto& kv : r.statuses) st.emplace_back(kv.first, std::to_string(kv.second));
    for (const auto& kv : r.files) files.emplace_back(kv.first, q(kv.second));
    std::string pa = "[", off = "[";
    for (int i = 0; i < 4; i++) {
        pa += (i ? ", " : "") + std::to_string(s.pref_align[i]);
        off += (i ? ", " : "") + std::to_string(s.offset[i]);
    }
    json_cases.push_back(json_obj({
        {"name", q(s.name)},
        {"a", q(ty_name(A.t))},
        {"b", q(ty_name(B.t))},
        {"c", q(ty_name(C.t))},
        {"d", q(ty_name(D.t))},
        {"m", std::to_string(s.m)},
        {"n", std::to_string(s.n)},
        {"k", std::to_string(s.k)},
        {"opa", q(s.opa == CUBLAS_OP_N ? "N" : "T")},
        {"opb", q(s.opb == CUBLAS_OP_N ? "N" : "T")},
        {"lda", std::to_string(A.ld)},
        {"ldb", std::to_string(B.ld)},
        {"ldc", std::to_string(C.ld)},
        {"ldd", std::to_string(D.ld)},
        {"alpha", num(s.alpha)},
        {"beta", num(s.beta)},
        {"epilogue", std::to_string((unsigned)s.epi)},
        {"aux_ld", std::to_string(aux_ld)},
        {"inplace", s.inplace ? "true" : "false"},
        {"c_nan", s.c_nan ? "true" : "false"},
        {"c_ld0", s.c_ld0 ? "true" : "false"},
        {"algo_null", s.algo_null ? "true" : "false"},
        {"workspace", s.workspace ? "true" : "false"},
        {"aux_type", std::to_string(s.aux_type)},
        {"pref_align", pa + "]"},
        {"offset", off + "]"},
        {"fault", q(fault_name(s.fault))},
        {"fault_value", std::to_string(s.fault_value)},
        {"statuses", json_obj(st)},
        {"files", json_obj(files)},
    }));
}

bool has_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

cublasLtMatrixLayout_t layout(Record& r, const std::string& tag, const Matrix& m) {
    cublasLtMatrixLayout_t l = nullptr;
    r.status("layout_" + tag, cublasLtMatrixLayoutCreate(&l, cuda_type(m.t), m.rows, m.cols, m.ld));
    return l;
}

void run_case(const Spec& s) {
    Record r;
    const bool ta = s.opa != CUBLAS_OP_N, tb = s.opb != CUBLAS_OP_N;
    const uint64_t m = s.m, n = s.n, k = s.k;
    Matrix A{s.a, ta ? k : m, ta ? m : k, 0}, B{s.b, tb ? n : k, tb ? k : n, 0}, C{s.c, m, n, 0}, D{s.d, m, n, 0};
    A.ld = (int64_t)A.rows + s.pad_a;
    B.ld = (int64_t)B.rows + s.pad_b;
    D.ld = (int64_t)D.rows + s.pad_d;
    C.ld = s.inplace ? D.ld : s.c_ld0 ? 0 : (int64_t)C.rows + s.pad_c;
    const int64_t aux_ld = s.aux_ld ? s.aux_ld : (int64_t)((m + 7) / 8 * 8 + 8);
    const Matrix Aux{s.d, m, n, aux_ld};
    const Matrix Bias{s.d, m, 1, (int64_t)m};

    // device buffers (each at its offset past a 256-byte boundary, with 256 spare bytes behind)
    const size_t slack = s.fault == INPLACE_LD ? (size_t)8 * n * 4 : 0;
    DevBuf dA = dev_alloc(A.bytes(), s.offset[0]), dB = dev_alloc(B.bytes(), s.offset[1]);
    DevBuf dD = dev_alloc(D.bytes() + slack, s.offset[3]);
    DevBuf dC = s.inplace ? dD : dev_alloc(C.bytes(), s.offset[2]);
    DevBuf dAux = dev_alloc(Aux.bytes(), 0), dBias = dev_alloc(Bias.bytes(), 0);
    DevBuf dWork = dev_alloc(1 << 20, s.fault == WORKSPACE_MISALIGNED ? 16 : 0);

    const auto hA = host_matrix(A, false, false), hB = host_matrix(B, false, false);
    const auto hBias = host_matrix(Bias, false, false), hAux = host_matrix(Aux, false, true);
    upload(dA, hA);
    upload(dB, hB);
    upload(dBias, hBias);
    upload(dAux, hAux);
    if (s.inplace) {
        upload(dD, host_matrix(D, false, false));  // C's values in D's place, poison in the padding
    } else {
        upload(dD, host_matrix(D, false, true));  // every element poison: a missing write shows
        upload(dC, host_matrix(C, s.c_nan, false));
    }
    r.files.emplace_back("A", dump(s.name, "A", dA.ptr, A.bytes()) + ":" + ty_name(A.t));
    r.files.emplace_back("B", dump(s.name, "B", dB.ptr, B.bytes()) + ":" + ty_name(B.t));
    r.files.emplace_back("bias", dump(s.name, "bias", dBias.ptr, Bias.bytes()) + ":" + ty_name(Bias.t));
    r.files.emplace_back("C0", dump(s.name, "C0", dC.ptr, C.bytes()) + ":" + ty_name(C.t));
    r.files.emplace_back("D0", dump(s.name, "D0", dD.ptr, D.bytes()) + ":" + ty_name(D.t));
    r.files.emplace_back("aux0", dump(s.name, "aux0", dAux.ptr, Aux.bytes()) + ":" + ty_name(Aux.t));

    // the operation descriptor
    cublasLtMatmulDesc_t desc = nullptr;
    r.status("desc_create", cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t opa = s.opa, opb = s.opb;
    const uint32_t epi = s.epi;
    r.status("set_transa", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    r.status("set_transb", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    r.status("set_epilogue", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (has_bias(s.epi)) {
        const void* p = dBias.ptr;
        r.status("set_bias", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p));
    }
    if (has_aux(s.epi)) {
        void* p = dAux.ptr;
        r.status("set_aux",
                 cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p));
        r.status("set_aux_ld",
                 cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
        if (s.aux_type != -2)
            r.status("set_aux_type", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                                    &s.aux_type, sizeof s.aux_type));
    }
    cublasLtMatrixLayout_t lA = layout(r, "A", A), lB = layout(r, "B", B), lC = layout(r, "C", C),
                           lD = layout(r, "D", D);

    // the preference and the heuristic, on the valid problem
    cublasLtMatmulPreference_t pref = nullptr;
    r.status("pref_create", cublasLtMatmulPreferenceCreate(&pref));
    if (s.workspace) {
        const uint64_t ws = 1 << 20;
        r.status("pref_workspace",
                 cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    }
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        if (s.pref_align[i])
            r.status(
                std::string("pref_align_") + "ABCD"[i],
                cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &s.pref_align[i], sizeof s.pref_align[i]));
    cublasLtMatmulHeuristicResult_t heur[4];
    std::memset(heur, 0, sizeof heur);
    int count = -1;
    r.status("heuristic", cublasLtMatmulAlgoGetHeuristic(handle, desc, lA, lB, lC, lD, pref, 4, heur, &count));
    r.status("heuristic_count", count);
    if (count > 0) r.status("heuristic_state", heur[0].state);

    // the fault, if any: what the matmul (and a second heuristic) is then called with
    cublasLtHandle_t h = handle;
    cublasLtMatmulDesc_t fdesc = desc;
    cublasLtMatrixLayout_t fA = lA, fB = lB, fC = lC, fD = lD, extra = nullptr;
    const void *pA = dA.ptr, *pB = dB.ptr, *pC = dC.ptr;
    void* pD = dD.ptr;
    const float* alpha = &s.alpha;
    void* work = s.workspace || s.fault == WORKSPACE_MISALIGNED ? dWork.ptr : nullptr;
    size_t work_bytes = work ? (1 << 20) : 0;
    bool second_heuristic = true;
    switch (s.fault) {
        case NONE: second_heuristic = false; break;
        case LD_A: {
            Matrix x = A;
            x.ld = (int64_t)A.rows - 1;
            fA = extra = layout(r, "A_fault", x);
            break;
        }
        case LD_B: {
            Matrix x = B;
            x.ld = (int64_t)B.rows - 1;
            fB = extra = layout(r, "B_fault", x);
            break;
        }
        case LD_C: {
            Matrix x = C;
            x.ld = (int64_t)C.rows - 1;
            fC = extra = layout(r, "C_fault", x);
            break;
        }
        case LD_D: {
            Matrix x = D;
            x.ld = (int64_t)D.rows - 1;
            fD = extra = layout(r, "D_fault", x);
            break;
        }
        case INPLACE_LD: {
            Matrix x = C;
            x.ld = D.ld + 8;
            fC = extra = layout(r, "C_fault", x);
            pC = dD.ptr;
            break;
        }
        case AUX_LD:
            r.status("set_aux_ld_fault", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                                        &s.fault_value, sizeof s.fault_value));
            break;
        case TYPES: {
            Matrix xa = A, xb = B, xc = C, xd = D;
            xa.t = s.fault_types[0], xb.t = s.fault_types[1], xc.t = s.fault_types[2], xd.t = s.fault_types[3];
            fA = layout(r, "A_fault", xa), fB = layout(r, "B_fault", xb), fC = layout(r, "C_fault", xc);
            fD = extra = layout(r, "D_fault", xd);
            break;
        }
        case COMPUTE_16F:
            r.status("desc16_create", cublasLtMatmulDescCreate(&fdesc, CUBLAS_COMPUTE_16F, CUDA_R_16F));
            r.status("desc16_transa",
                     cublasLtMatmulDescSetAttribute(fdesc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
            r.status("desc16_transb",
                     cublasLtMatmulDescSetAttribute(fdesc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
            break;
        case MISALIGN_A:
            pA = dA.ptr + bytes_of(A.t);
            second_heuristic = false;
            break;
        case MISALIGN_D:
            pD = dD.ptr + bytes_of(D.t);
            second_heuristic = false;
            break;
        case MISALIGN_BIAS: {
            const void* p = dBias.ptr + bytes_of(Bias.t);
            r.status("set_bias_fault",
                     cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p));
            second_heuristic = false;
            break;
        }
        case NULL_BIAS: {
            const void* p = nullptr;
            r.status("set_bias_fault",
                     cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p));
            second_heuristic = false;
            break;
        }
        case AUX_TYPE: {
            const int32_t t = (int32_t)s.fault_value;
            r.status("set_aux_type_fault",
                     cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t, sizeof t));
            break;
        }
        case WORKSPACE_MISALIGNED: second_heuristic = false; break;
        case ALPHA_NULL:
            alpha = nullptr;
            second_heuristic = false;
            break;
        case TRANSC: {
            const int32_t t = CUBLAS_OP_T;
            r.status("set_transc_fault",
                     cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSC, &t, sizeof t));
            break;
        }
        case NULL_HANDLE:
            h = nullptr;
            second_heuristic = false;
            break;
    }
    if (second_heuristic) {
        cublasLtMatmulHeuristicResult_t fh[4];
        std::memset(fh, 0, sizeof fh);
        int fcount = -1;
        r.status("fault_heuristic",
                 cublasLtMatmulAlgoGetHeuristic(handle, fdesc, fA, fB, fC, fD, pref, 4, fh, &fcount));
        r.status("fault_heuristic_count", fcount);
    }
    const cublasLtMatmulAlgo_t* algo = s.algo_null || count <= 0 ? nullptr : &heur[0].algo;
    r.status("matmul",
             cublasLtMatmul(h, fdesc, alpha, pA, fA, pB, fB, &s.beta, pC, fC, pD, fD, algo, work, work_bytes, 0));
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

    r.files.emplace_back("C", dump(s.name, "C", dC.ptr, C.bytes()) + ":" + ty_name(C.t));
    r.files.emplace_back("D", dump(s.name, "D", dD.ptr, D.bytes()) + ":" + ty_name(D.t));
    r.files.emplace_back("aux", dump(s.name, "aux", dAux.ptr, Aux.bytes()) + ":" + ty_name(Aux.t));
    emit(s, A, B, C, D, aux_ld, r);

    for (cublasLtMatrixLayout_t l : {lA, lB, lC, lD}) cublasLtMatrixLayoutDestroy(l);
    if (s.fault == TYPES) {
        cublasLtMatrixLayoutDestroy(fA);
        cublasLtMatrixLayoutDestroy(fB);
        cublasLtMatrixLayoutDestroy(fC);
    }
    if (extra) cublasLtMatrixLayoutDestroy(extra);
    if (fdesc != desc) cublasLtMatmulDescDestroy(fdesc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulPreferenceDestroy(pref);
    for (DevBuf* b : {&dA, &dB, &dD, &dAux, &dBias, &dWork}) cudaFree(b->base);
    if (!s.inplace) cudaFree(dC.base);
}

// cublasLt.h: SetAttribute returns INVALID_VALUE "if buf is NULL or sizeInBytes doesn't match size of
// internal storage for selected attribute"; AlgoGetHeuristic "if requestedAlgoCount is less or equal
// to zero". Each call with the documented size is there as the control.
void run_attribute_case() {
    Record r;
    cublasLtMatmulDesc_t desc = nullptr;
    r.status("desc_create", cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t op = CUBLAS_OP_T;
    const int64_t op64 = CUBLAS_OP_T, ld64 = 64;
    const int32_t ld32 = 64;
    const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    const uint64_t epi64 = CUBLASLT_EPILOGUE_BIAS;
    const void* ptr = nullptr;
    const int32_t ptr32 = 0;
    r.status("desc_transa_int32", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op));
    r.status("desc_transa_int64",
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op64, sizeof op64));
    r.status("desc_epilogue_uint32",
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    r.status("desc_epilogue_uint64",
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi64, sizeof epi64));
    r.status("desc_aux_ld_int64",
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld64, sizeof ld64));
    r.status("desc_aux_ld_int32",
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld32, sizeof ld32));
    r.status("desc_bias_pointer_ptr",
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr));
    r.status("desc_bias_pointer_4bytes",
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr32, sizeof ptr32));
    r.status("desc_transa_null_buf",
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, sizeof op));
    cublasLtMatmulPreference_t pref = nullptr;
    r.status("pref_create", cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws64 = 1 << 20, al64 = 16;
    const uint32_t ws32 = 1 << 20, al32 = 16;
    r.status("pref_workspace_uint64",
             cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws64, sizeof ws64));
    r.status("pref_workspace_uint32",
             cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws32, sizeof ws32));
    r.status("pref_align_a_uint32", cublasLtMatmulPreferenceSetAttribute(
                                        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al32, sizeof al32));
    r.status("pref_align_a_uint64", cublasLtMatmulPreferenceSetAttribute(
                                        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al64, sizeof al64));
    const uint32_t mask32 = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    const uint64_t mask64 = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    r.status(
        "pref_reduction_mask_uint32",
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask32, sizeof mask32));
    r.status(
        "pref_reduction_mask_uint64",
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask64, sizeof mask64));
    // the heuristic with requestedAlgoCount 0 and 1 on a valid all-fp32 problem
    cublasLtMatmulDesc_t d2 = nullptr;
    r.status("desc2_create", cublasLtMatmulDescCreate(&d2, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t l = nullptr;
    r.status("layout", cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 16, 16, 16));
    cublasLtMatmulHeuristicResult_t res[1];
    int count = -1;
    r.status("heuristic_requested_0", cublasLtMatmulAlgoGetHeuristic(handle, d2, l, l, l, l, pref, 0, res, &count));
    r.status("heuristic_requested_1", cublasLtMatmulAlgoGetHeuristic(handle, d2, l, l, l, l, pref, 1, res, &count));
    r.status("heuristic_requested_1_count", count);
    // AlgoConfigGetAttribute on the algorithm found: sizeInBytes 0 asks the size (INVALID_VALUE without
    // sizeWritten); a NULL buf or another size than the attribute's type (cublasLt.h: ID int32_t, TILE_ID
    // uint32_t, SPLITK_NUM int32_t, INNER_SHAPE_ID uint16_t) is INVALID_VALUE; sizeWritten gets the bytes
    const cublasLtMatmulAlgo_t* found = &res[0].algo;
    size_t need = 0, wrote = 0;
    int32_t id = -1, splitk = 0;
    int64_t id64 = 0;
    uint32_t tile = 0, inner32 = 0;
    uint16_t inner = 0;
    r.status("algo_id_size_query",
             cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_ID, nullptr, 0, &need));
    r.status("algo_id_size_needed", (int)need);
    r.status("algo_id_query_no_size_written",
             cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_ID, nullptr, 0, nullptr));
    r.status("algo_id_int32",
             cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &wrote));
    r.status("algo_id_int32_written", (int)wrote);
    r.status("algo_id_int64",
             cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_ID, &id64, sizeof id64, &wrote));
    r.status("algo_tile_uint32",
             cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, nullptr));
    r.status("algo_tile_null_buf",
             cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_TILE_ID, nullptr, sizeof tile, &wrote));
    r.status("algo_splitk_int32", cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                                                       sizeof splitk, &wrote));
    r.status("algo_inner_shape_uint16", cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
                                                                             &inner, sizeof inner, &wrote));
    r.status("algo_inner_shape_uint16_written", (int)wrote);
    r.status("algo_inner_shape_uint32", cublasLtMatmulAlgoConfigGetAttribute(found, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
                                                                             &inner32, sizeof inner32, &wrote));
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(d2);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulPreferenceDestroy(pref);
    std::vector<std::pair<std::string, std::string>> st;
    for (const auto& kv : r.statuses) st.emplace_back(kv.first, std::to_string(kv.second));
    json_cases.push_back(
        json_obj({{"name", q("attribute_sizes")}, {"fault", q("statuses")}, {"statuses", json_obj(st)}}));
}

std::vector<Spec> all_specs() {
    std::vector<Spec> v;
    auto add = [&](Spec s) { v.push_back(s); };
    const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    // the four transpose combinations, for each supported type combination, with ld > rows everywhere,
    // alpha != 1 and beta != 0, 1
    struct TypeCombo {
        const char* tag;
        Ty ab, cd;
    };
    for (TypeCombo tc : {TypeCombo{"f32", F32, F32}, TypeCombo{"bf16_f32", BF16, F32}, TypeCombo{"bf16", BF16, BF16}})
        for (cublasOperation_t oa : {N, T})
            for (cublasOperation_t ob : {N, T}) {
                Spec s;
                s.name = std::string("trans_") + (oa == N ? "N" : "T") + (ob == N ? "N" : "T") + "_" + tc.tag;
                s.a = s.b = tc.ab, s.c = s.d = tc.cd;
                s.opa = oa, s.opb = ob;
                s.alpha = 0.75f, s.beta = -0.5f;
                add(s);
            }
    // beta = 0: C is not read (filled with NaN)
    for (TypeCombo tc : {TypeCombo{"f32", F32, F32}, TypeCombo{"bf16", BF16, BF16}}) {
        Spec s;
        s.name = std::string("beta0_c_nan_") + tc.tag;
        s.a = s.b = tc.ab, s.c = s.d = tc.cd;
        s.opa = T, s.alpha = 1.25f, s.beta = 0.0f, s.c_nan = true;
        add(s);
    }
    // in place: C == D, Cdesc == Ddesc (accumulation)
    for (TypeCombo tc : {TypeCombo{"f32", F32, F32}, TypeCombo{"bf16_f32", BF16, F32}, TypeCombo{"bf16", BF16, BF16}}) {
        Spec s;
        s.name = std::string("inplace_accumulate_") + tc.tag;
        s.a = s.b = tc.ab, s.c = s.d = tc.cd;
        s.opb = T, s.alpha = 1.0f, s.beta = 1.0f, s.inplace = true;
        add(s);
    }
    {
        Spec s;
        s.name = "inplace_scaled_f32";
        s.a = s.b = s.c = s.d = F32;
        s.opa = T, s.opb = T, s.alpha = -1.5f, s.beta = 0.25f, s.inplace = true;
        add(s);
    }
    // epilogues, for each supported type combination; beta = 0 (NaN C) and alpha = 1 first
    struct Epi {
        const char* tag;
        cublasLtEpilogue_t e;
    };
    const Epi epis[] = {{"default", CUBLASLT_EPILOGUE_DEFAULT},   {"bias", CUBLASLT_EPILOGUE_BIAS},
                        {"gelu", CUBLASLT_EPILOGUE_GELU},         {"gelu_bias", CUBLASLT_EPILOGUE_GELU_BIAS},
                        {"gelu_aux", CUBLASLT_EPILOGUE_GELU_AUX}, {"gelu_aux_bias", CUBLASLT_EPILOGUE_GELU_AUX_BIAS}};
    for (TypeCombo tc : {TypeCombo{"f32", F32, F32}, TypeCombo{"bf16_f32", BF16, F32}, TypeCombo{"bf16", BF16, BF16}})
        for (const Epi& e : epis) {
            Spec s;
            s.name = std::string("epi_") + e.tag + "_" + tc.tag;
            s.a = s.b = tc.ab, s.c = s.d = tc.cd;
            s.opa = T, s.epi = e.e, s.beta = 0.0f, s.c_nan = true;
            add(s);
        }
    // ... then with alpha and beta: the bias comes after beta * C and before GELU
    for (TypeCombo tc : {TypeCombo{"f32", F32, F32}, TypeCombo{"bf16_f32", BF16, F32}, TypeCombo{"bf16", BF16, BF16}})
        for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS}) {
            Spec s;
            s.name =
                std::string(e == CUBLASLT_EPILOGUE_BIAS ? "epi_bias_scaled_" : "epi_gelu_aux_bias_scaled_") + tc.tag;
            s.a = s.b = tc.ab, s.c = s.d = tc.cd;
            s.opb = T, s.epi = e, s.alpha = 0.5f, s.beta = 0.75f;
            add(s);
        }
    {
        Spec s;  // in place with a bias: the GELU input includes the old D
        s.name = "epi_gelu_aux_bias_inplace_bf16";
        s.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, s.beta = 1.0f, s.inplace = true;
        add(s);
    }
    {
        Spec s;  // aux ld equal to the rows (m a multiple of 8), D without padding
        s.name = "epi_gelu_aux_ld_eq_rows_bf16";
        s.m = 40, s.pad_d = 0, s.aux_ld = 40, s.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        add(s);
    }
    // shapes: vectors, k = 1, a long k (the tolerance grows with k), alpha = 0
    {
        Spec s;
        s.name = "shape_m1_f32";
        s.a = s.b = s.c = s.d = F32;
        s.m = 1;
        s.alpha = 2.0f;
        s.beta = 0.5f;
        add(s);
        s.name = "shape_n1_bf16";
        s.a = s.b = s.c = s.d = BF16;
        s.m = 37;
        s.n = 1;
        s.opa = T;
        add(s);
        s.name = "shape_k1_bf16_f32";
        s.c = s.d = F32;
        s.n = 19;
        s.k = 1;
        s.opa = N;
        s.opb = T;
        add(s);
        s.name = "shape_k1024_bf16";
        s.c = s.d = BF16;
        s.m = 24;
        s.n = 16;
        s.k = 1024;
        s.opa = T;
        s.opb = N;
        s.epi = CUBLASLT_EPILOGUE_GELU_BIAS;
        s.alpha = 0.0625f;
        s.beta = 0.0f;
        s.c_nan = true;
        add(s);
    }
    {
        Spec s;
        s.name = "alpha0_f32";
        s.a = s.b = s.c = s.d = F32;
        s.alpha = 0.0f;
        s.beta = -2.0f;
        add(s);
    }
    // C's ld = 0 out of place: C's first column broadcast to every column (the guide, cublasLtMatmul)
    for (TypeCombo tc : {TypeCombo{"f32", F32, F32}, TypeCombo{"bf16", BF16, BF16}}) {
        Spec s;
        s.name = std::string("c_ld0_broadcast_") + tc.tag;
        s.a = s.b = tc.ab, s.c = s.d = tc.cd;
        s.c_ld0 = true, s.alpha = 1.0f, s.beta = 1.0f;
        add(s);
    }
    {
        Spec s;  // algo = NULL: an implicit heuristic with the default preferences
        s.name = "algo_null_bf16";
        s.opa = T, s.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, s.alpha = 0.5f, s.beta = 0.5f, s.algo_null = true;
        add(s);
    }
    {
        Spec s;  // a workspace allowed and passed
        s.name = "workspace_f32";
        s.a = s.b = s.c = s.d = F32, s.workspace = true, s.alpha = 1.0f, s.beta = 1.0f;
        add(s);
    }
    {
        Spec s;  // pointers aligned to one element only, with a preference that allows that
        s.name = "relaxed_alignment_bf16";
        s.offset[0] = 2, s.offset[1] = 6, s.offset[2] = 10, s.offset[3] = 2;
        for (int i = 0; i < 4; i++) s.pref_align[i] = 2;
        s.alpha = 1.0f, s.beta = 1.0f, s.epi = CUBLASLT_EPILOGUE_BIAS;
        add(s);
        s.name = "relaxed_alignment_f32";
        s.a = s.b = s.c = s.d = F32;
        s.offset[0] = 4, s.offset[1] = 12, s.offset[2] = 20, s.offset[3] = 4;
        for (int i = 0; i < 4; i++) s.pref_align[i] = 4;
        add(s);
    }
    {
        Spec s;  // EPILOGUE_AUX_DATA_TYPE set to its documented default, -1
        s.name = "aux_type_minus1_bf16";
        s.epi = CUBLASLT_EPILOGUE_GELU_AUX, s.aux_type = -1;
        add(s);
    }
    // refused calls: each fault applied after a valid heuristic (so the matmul has an algorithm)
    auto fault = [&](const char* name, Fault f, Spec s) {
        s.name = name;
        s.fault = f;
        add(s);
    };
    Spec base;
    base.alpha = 1.0f, base.beta = 1.0f;
    fault("err_ld_a_lt_rows", LD_A, base);
    {
        Spec s = base;
        s.opb = T;
        fault("err_ld_b_lt_rows", LD_B, s);
    }
    fault("err_ld_c_lt_rows", LD_C, base);
    fault("err_ld_d_lt_rows", LD_D, base);
    {
        Spec s = base;
        s.inplace = true;
        fault("err_inplace_ld_differs", INPLACE_LD, s);
    }
    Spec gelu = base;
    gelu.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;  // m = 37
    {
        Spec s = gelu;
        s.fault_value = 39;
        fault("err_aux_ld_not_multiple_of_8", AUX_LD, s);
    }
    {
        Spec s = gelu;
        s.fault_value = 32;
        fault("err_aux_ld_lt_rows", AUX_LD, s);
    }
    {
        Spec s = gelu;
        s.fault_value = CUDA_R_16BF;
        fault("err_aux_type_set_bf16", AUX_TYPE, s);
    }
    {
        Spec s = base;
        s.fault_types[0] = s.fault_types[1] = BF16, s.fault_types[2] = s.fault_types[3] = F16;
        fault("err_types_bf16_in_f16_out", TYPES, s);
    }
    {
        Spec s = base;
        s.fault_types[0] = BF16, s.fault_types[1] = F32, s.fault_types[2] = s.fault_types[3] = F32;
        fault("err_types_a_bf16_b_f32", TYPES, s);
    }
    {
        Spec s = base;
        s.fault_types[0] = s.fault_types[1] = F32, s.fault_types[2] = s.fault_types[3] = BF16;
        fault("err_types_f32_in_bf16_out", TYPES, s);
    }
    {
        Spec s = base;
        s.fault_types[0] = s.fault_types[1] = BF16, s.fault_types[2] = BF16, s.fault_types[3] = F32;
        fault("err_types_c_bf16_d_f32", TYPES, s);
    }
    fault("err_compute_16f", COMPUTE_16F, base);
    fault("err_misaligned_a", MISALIGN_A, base);
    {
        Spec s = base;
        s.a = s.b = s.c = s.d = F32;
        fault("err_misaligned_d", MISALIGN_D, s);
    }
    {
        Spec s = base;
        s.epi = CUBLASLT_EPILOGUE_BIAS;
        fault("err_misaligned_bias", MISALIGN_BIAS, s);
    }
    {
        Spec s = base;
        s.epi = CUBLASLT_EPILOGUE_GELU_BIAS;
        fault("err_null_bias", NULL_BIAS, s);
    }
    fault("err_workspace_misaligned", WORKSPACE_MISALIGNED, base);
    fault("err_alpha_null", ALPHA_NULL, base);
    fault("err_transc", TRANSC, base);
    fault("err_null_handle", NULL_HANDLE, base);
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::set<std::string> skipped;  // --skip: cases a real library is known to crash on (not run, not written)
    uint64_t seed = std::random_device{}();
    seed = (seed << 32) ^ std::random_device{}();
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 0);
        else if (a == "--skip" && i + 1 < argc) skipped.insert(argv[++i]);
        else if (out_dir.empty() && a[0] != '-') out_dir = a;
        else fail("usage: cublaslt_cases OUTDIR [--seed N] [--skip CASE]...");
    }
    if (out_dir.empty()) fail("usage: cublaslt_cases OUTDIR [--seed N] [--skip CASE]...");
    std::printf("cublaslt_cases: seed %" PRIu64 "\n", seed);
    std::fflush(stdout);
    rng.seed(seed);
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) fail("cublasLtCreate failed");
    const std::vector<Spec> specs = all_specs();
    for (const std::string& name : skipped)
        if (std::none_of(specs.begin(), specs.end(), [&](const Spec& s) { return s.name == name; }))
            fail("--skip " + name + ": no such case");
    // each case named on stderr before it runs: a library that crashes on a case names it
    for (const Spec& s : specs) {
        if (skipped.count(s.name)) continue;
        std::fprintf(stderr, "cublaslt_cases: case %s\n", s.name.c_str());
        run_case(s);
    }
    std::fprintf(stderr, "cublaslt_cases: case attributes\n");
    run_attribute_case();
    cublasLtDestroy(handle);
    std::string js = "{\"seed\": " + std::to_string(seed) + ", \"cases\": [\n";
    for (size_t i = 0; i < json_cases.size(); i++) js += (i ? ",\n" : "") + json_cases[i];
    js += "\n]}\n";
    FILE* f = std::fopen((out_dir + "/cases.json").c_str(), "w");
    if (!f || std::fwrite(js.data(), 1, js.size(), f) != js.size()) fail("cannot write cases.json");
    std::fclose(f);
    std::printf("cublaslt_cases: %zu cases written to %s\n", json_cases.size(), out_dir.c_str());
    return 0;
}
