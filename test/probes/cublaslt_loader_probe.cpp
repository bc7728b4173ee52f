// Calls cuBLASLt's host-only functions through llmc/cuda/cublaslt_loader.cpp (linked instead of
// -lcublasLt; test/test_cublaslt_loader.py builds and runs this): each answer must be the library's
// documented one, which a forward to the wrong function or with its arguments out of order would not
// give. Needs the library, no GPU (the handle, the heuristic and the matmul itself need one: they run
// in every GPU matmul). Prints one line per check; exit 1 when one failed.
#include <cublasLt.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

static int failures = 0;

static void expect(bool ok, const char* what) {
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    if (!ok) failures++;
}

int main() {
    const size_t version = cublasLtGetVersion();
    std::printf("cublasLtGetVersion %zu, header %d\n", version, CUBLAS_VERSION);
    expect(version / 10000 == CUBLAS_VER_MAJOR, "cublasLtGetVersion: the header's major version");
    expect(std::strcmp(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") == 0,
           "cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE)");
    const char* text = cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS);
    expect(text != nullptr && std::strcmp(text, "CUBLAS_STATUS_SUCCESS") != 0 && std::strlen(text) > 0,
           "cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS): a description, not the name");

    cublasLtMatmulDesc_t desc = nullptr;
    expect(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS && desc,
           "cublasLtMatmulDescCreate");
    const cublasOperation_t op = CUBLAS_OP_T;
    expect(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op) == CUBLAS_STATUS_SUCCESS,
           "cublasLtMatmulDescSetAttribute(TRANSA)");
    // the buffer's size is checked against the attribute's: one byte is refused
    expect(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, 1) == CUBLAS_STATUS_INVALID_VALUE,
           "cublasLtMatmulDescSetAttribute with a 1-byte buffer: INVALID_VALUE");
    expect(cublasLtMatmulDescDestroy(desc) == CUBLAS_STATUS_SUCCESS, "cublasLtMatmulDescDestroy");

    cublasLtMatrixLayout_t layout = nullptr;
    expect(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 64, 32, 64) == CUBLAS_STATUS_SUCCESS && layout,
           "cublasLtMatrixLayoutCreate(64 x 32, ld 64)");
    expect(cublasLtMatrixLayoutDestroy(layout) == CUBLAS_STATUS_SUCCESS, "cublasLtMatrixLayoutDestroy");

    cublasLtMatmulPreference_t pref = nullptr;
    expect(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS && pref, "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace = 1 << 20;
    expect(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                sizeof workspace) == CUBLAS_STATUS_SUCCESS,
           "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    expect(cublasLtMatmulPreferenceDestroy(pref) == CUBLAS_STATUS_SUCCESS, "cublasLtMatmulPreferenceDestroy");
    std::printf("%s\n", failures ? "cublaslt_loader_probe: FAIL" : "cublaslt_loader_probe: all PASS");
    return failures ? 1 : 0;
}
