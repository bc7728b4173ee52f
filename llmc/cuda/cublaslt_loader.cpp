// cuBLASLt loaded on first use: the cuBLASLt functions the programs call (llmc/cuda/matmul.cuh),
// defined here with cublasLt.h's own declarations, each forwarding to the library's function of the
// same name, which dlopen/dlsym find on the first call. Linked into train_gpt2_ls and
// generate_gpt2_ls (and the trainer's build matrix) instead of -lcublasLt (Makefile, cuda_program;
// `make CUBLASLT_LAZY=0` links the library instead, as the kernel labs and GPU tests do).
//
// Why: a program linked with libcublasLt.so runs the library's initializers at every start, ~0.1 s
// of CPU and ~200 MB of touched memory on the CI machine, also for a --help, a refused flag or a
// CPU run, which never call cuBLASLt (docs/design.md, "What `make test` spends its time on").
//
// Rules:
//   - A definition here must match cublasLt.h's declaration (extern "C"): a differing parameter list
//     is a compile error (conflicting declaration of a C function), so the forwarding is type-checked.
//   - The library is the header's major version, libcublasLt.so.<CUBLAS_VER_MAJOR>, found as the
//     dynamic linker finds a linked library (LD_LIBRARY_PATH, ld.so.cache), else in
//     LLMC_CUBLASLT_DIR (the toolkit's lib64 at build time). Its cublasLtGetVersion() must have that
//     major version too.
//   - A library or function that cannot be found throws llmc::InputError (a problem of the machine,
//     not of the program) naming it and the fix, which the programs print as their one error line; it
//     is never reported as a cuBLAS status. The library loads at the first call, cublasLtCreate when
//     the CUDA backend is created.
#include <dlfcn.h>

#include <cublasLt.h>

#include <string>

#include "llmc/core/error.h"

#ifndef LLMC_CUBLASLT_DIR
#define LLMC_CUBLASLT_DIR "/usr/local/cuda/lib64"
#endif

namespace {

#define LLMC_STR2(x) #x
#define LLMC_STR(x) LLMC_STR2(x)
// LLMC_CUBLASLT_SONAME: another name, for the test of a library that cannot be found
#ifndef LLMC_CUBLASLT_SONAME
#define LLMC_CUBLASLT_SONAME "libcublasLt.so." LLMC_STR(CUBLAS_VER_MAJOR)
#endif
constexpr const char* kSoname = LLMC_CUBLASLT_SONAME;

void* open_library() {
    void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
    std::string why = h ? "" : dlerror();
    if (!h) h = dlopen((std::string(LLMC_CUBLASLT_DIR "/") + kSoname).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) why += std::string("; ") + dlerror();
    if (!h)
        throw llmc::InputError(std::string("cannot load ") + kSoname + " (" + why +
                               "), which the CUDA backend needs: install the CUDA toolkit's cuBLAS " +
                               LLMC_STR(CUBLAS_VER_MAJOR) + ".x or add its lib directory to LD_LIBRARY_PATH");
    using VersionFn = size_t (*)();
    auto version = reinterpret_cast<VersionFn>(dlsym(h, "cublasLtGetVersion"));
    if (!version)
        throw llmc::InputError(std::string(kSoname) +
                               " has no function cublasLtGetVersion: install the CUDA toolkit's cuBLAS " +
                               LLMC_STR(CUBLAS_VER_MAJOR) + ".x");
    const size_t v = version();
    if (v / 10000 != CUBLAS_VER_MAJOR)
        throw llmc::InputError(std::string(kSoname) + " reports version " + std::to_string(v) +
                               ", but the programs were built with cuBLAS " + LLMC_STR(CUBLAS_VER_MAJOR) +
                               ".x headers: rebuild (make clean && make) against the installed toolkit");
    return h;
}

void* library() {
    static void* const handle = open_library();  // once; a failed load throws again at the next call
    return handle;
}

// The library's function `name`, of the type F of our definition of it.
template <typename F>
F* resolve(const char* name) {
    void* sym = dlsym(library(), name);
    if (!sym)
        throw llmc::InputError(std::string(kSoname) + " has no function " + name +
                               ": install the cuBLAS the programs were built with, or rebuild");
    return reinterpret_cast<F*>(sym);
}

}  // namespace

// The function's forward: resolved on its first call (thread-safe: a function-local static).
#define LLMC_CUBLASLT_REAL(name) static decltype(name)* const real = resolve<decltype(name)>(#name)

extern "C" {

size_t cublasLtGetVersion(void) {
    LLMC_CUBLASLT_REAL(cublasLtGetVersion);
    return real();
}
const char* cublasLtGetStatusName(cublasStatus_t status) {
    LLMC_CUBLASLT_REAL(cublasLtGetStatusName);
    return real(status);
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
    LLMC_CUBLASLT_REAL(cublasLtGetStatusString);
    return real(status);
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
    LLMC_CUBLASLT_REAL(cublasLtCreate);
    return real(lightHandle);
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
    LLMC_CUBLASLT_REAL(cublasLtDestroy);
    return real(lightHandle);
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    LLMC_CUBLASLT_REAL(cublasLtMatmulDescCreate);
    return real(matmulDesc, computeType, scaleType);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    LLMC_CUBLASLT_REAL(cublasLtMatmulDescDestroy);
    return real(matmulDesc);
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
    LLMC_CUBLASLT_REAL(cublasLtMatmulDescSetAttribute);
    return real(matmulDesc, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    LLMC_CUBLASLT_REAL(cublasLtMatrixLayoutCreate);
    return real(matLayout, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    LLMC_CUBLASLT_REAL(cublasLtMatrixLayoutDestroy);
    return real(matLayout);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    LLMC_CUBLASLT_REAL(cublasLtMatmulPreferenceCreate);
    return real(pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    LLMC_CUBLASLT_REAL(cublasLtMatmulPreferenceDestroy);
    return real(pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
    LLMC_CUBLASLT_REAL(cublasLtMatmulPreferenceSetAttribute);
    return real(pref, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
    LLMC_CUBLASLT_REAL(cublasLtMatmulAlgoGetHeuristic);
    return real(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
                heuristicResultsArray, returnAlgoCount);
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
    LLMC_CUBLASLT_REAL(cublasLtMatmulAlgoConfigGetAttribute);
    return real(algo, attr, buf, sizeInBytes, sizeWritten);
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    LLMC_CUBLASLT_REAL(cublasLtMatmul);
    return real(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                workspaceSizeInBytes, stream);
}

}  // extern "C"
