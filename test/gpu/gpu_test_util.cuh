// Helpers shared by the GPU tests (test/gpu/*.cu): the no-GPU check, a pass/fail counter that
// prints one line per check, and comparisons in which NaN or Inf never passes.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>

#include <cuda_runtime.h>

#include "llmc/core/model_config.h"

namespace gpu_test {

// True when a CUDA device is present; otherwise prints "<test>: no CUDA device; run on a GPU
// machine" to stderr (the caller then exits 1: a GPU test that ran nothing has not passed).
inline bool have_gpu(const char* test) {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) return true;
    std::fprintf(stderr, "%s: no CUDA device; run on a GPU machine\n", test);
    return false;
}

// Exit status of a GPU test that could not run what it tests in this build (e.g. built without
// NCCL): automake's SKIP code. `make test-gpu` and scripts/gpu_check.sh report it as SKIPPED (not
// run), never as passed. skip() prints "<test>: SKIPPED: <why>" to stderr and returns the code.
constexpr int kSkipExitCode = 77;
inline int skip(const char* test, const char* why) {
    std::fprintf(stderr, "%s: SKIPPED: %s\n", test, why);
    return kSkipExitCode;
}

// Counts failed checks; every check prints one line "ok ..." or "FAIL ...".
struct Checks {
    int failures = 0;
    void expect(bool ok, const char* fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        char msg[512];
        std::vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (!ok) failures++;
        std::printf("  %s %s\n", ok ? "ok  " : "FAIL", msg);
    }
};

// ||a - ref|| / max(||ref||, floor) over every element; NaN or Inf in either gives +inf (never
// passes), and a zero reference with no floor gives +inf unless a is exactly zero too.
inline double rel_error(const float* a, const float* ref, size_t n, double floor = 0.0) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(a[i]) || !std::isfinite(ref[i])) return std::numeric_limits<double>::infinity();
        const double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    const double scale = std::max(std::sqrt(den), floor);
    if (scale == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    return std::sqrt(num) / scale;
}

// |a - b| <= tol * (1 + |b|); false for NaN.
inline bool close(double a, double b, double tol) { return std::fabs(a - b) <= tol * (1.0 + std::fabs(b)); }

inline bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// A model configuration for a test case (padded vocabulary as the trainer pads it).
inline llmc::ModelConfig model_config(int L, int C, int NH, int G, int P, int V, int maxT, bool qk_norm, float softcap,
                                      bool tied) {
    llmc::ModelConfig c;
    c.num_layers = L;
    c.channels = C;
    c.num_heads = NH;
    c.global_heads = G;
    c.window = P;
    c.vocab_size = V;
    c.padded_vocab_size = llmc::pad_vocab(V);
    c.max_seq_len = maxT;
    c.qk_norm = qk_norm;
    c.attn_softcap = softcap;
    c.tied_embeddings = tied;
    return c;
}
// c with the model options of issue 51: biases on or off, the MLP's GELU kind.
inline llmc::ModelConfig with_bias_gelu(llmc::ModelConfig c, bool bias, llmc::Gelu gelu) {
    c.bias = bias;
    c.gelu = gelu;
    return c;
}

}  // namespace gpu_test
