// The special-function exponential of the attention forward, alone (llmc/cuda/ptx.cuh):
//   ex2.approx.ftz.f32 d, a   (ex2_approx_ftz)
// What it must do is transcribed from NVIDIA's PTX ISA ("Floating Point Instructions: ex2"), not
// from the kernels or from the emulation:
//   - special values: ex2(-Inf) = +0, ex2(+Inf) = +Inf, ex2(NaN) = NaN, ex2(+0) = ex2(-0) = 1;
//   - .ftz: a subnormal input is a sign-preserving zero (d = 1), a subnormal result is +0, so every
//     a in (-150, -126) (2^a below the smallest normal float) gives exactly +0;
//   - approximation: on random a over the normal result range [-126, 128) the relative error
//     against 2^a (in double) is at most 2^-22 (our reading of the ISA's accuracy note for .f32:
//     about 2 ulp; the GPU run of this test is the arbiter);
//   - results past the largest float (a >= 128) are +Inf.
// Runs on a GPU and under emulation (where it checks dev/emu/ex2.h). Exit 0 = pass, 1 = fail.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"
#include "test/gpu/elementwise_run.cuh"
#include "test/gpu/gpu_test_util.cuh"

namespace ex2_approx {

__global__ void ex2_kernel(float* d, const float* a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = llmc::cuda::ex2_approx_ftz(a[i]);
}

bool same_bits(float x, float y) { return std::memcmp(&x, &y, 4) == 0; }

}  // namespace ex2_approx

int main() {
    using namespace ex2_approx;
    if (!gpu_test::have_gpu("test_ex2_approx")) return 1;
    std::printf("test_ex2_approx: ex2.approx.ftz.f32 per the PTX ISA\n");
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float sub = std::numeric_limits<float>::denorm_min() * 12345.0f;  // a subnormal input
    int bad = 0;
    // exact cases: (input, expected bits)
    const std::vector<std::pair<float, float>> exact = {
        {-inf, 0.0f},    {inf, inf},      {0.0f, 1.0f},    {-0.0f, 1.0f},   {sub, 1.0f},
        {-sub, 1.0f},    {-126.5f, 0.0f}, {-130.0f, 0.0f}, {-149.0f, 0.0f}, {-149.9f, 0.0f},
        {-200.0f, 0.0f}, {128.0f, inf},   {200.0f, inf}};
    std::vector<float> a;
    for (const auto& e : exact) a.push_back(e.first);
    a.push_back(nan);
    std::mt19937 gen(std::random_device{}());
    std::uniform_real_distribution<float> over_normal(-126.0f, 128.0f), near_zero(-1.0f, 1.0f);
    std::uniform_real_distribution<float> below_normal(-149.99f, -126.01f);
    const size_t first_random = a.size();
    for (int k = 0; k < 4000; k++) a.push_back(over_normal(gen));
    for (int k = 0; k < 1000; k++) a.push_back(near_zero(gen));
    const size_t first_flushed = a.size();
    for (int k = 0; k < 500; k++) a.push_back(below_normal(gen));
    const std::vector<float> d = gpu_test::run_elementwise(ex2_kernel, a);

    for (size_t i = 0; i < exact.size(); i++)
        if (!same_bits(d[i], exact[i].second)) {
            std::printf("FAIL ex2(%a) = %a, want %a\n", a[i], d[i], exact[i].second);
            bad++;
        }
    if (!std::isnan(d[exact.size()])) {
        std::printf("FAIL ex2(NaN) = %a, want NaN\n", d[exact.size()]);
        bad++;
    }
    double worst = 0.0;
    for (size_t i = first_random; i < first_flushed; i++) {
        const double want = std::exp2((double)a[i]);
        if (want >= (double)std::numeric_limits<float>::max()) continue;  // rounds to +Inf or max: not an accuracy case
        const double rel = std::fabs((double)d[i] - want) / want;
        worst = std::max(worst, rel);
        if (!(rel <= std::ldexp(1.0, -22))) {
            if (bad < 20) std::printf("FAIL ex2(%a) = %a, want %a (relative error %.3g)\n", a[i], d[i], want, rel);
            bad++;
        }
    }
    for (size_t i = first_flushed; i < a.size(); i++)
        if (!same_bits(d[i], 0.0f)) {
            if (bad < 20) std::printf("FAIL ex2(%a) = %a, want +0 (.ftz: subnormal result)\n", a[i], d[i]);
            bad++;
        }
    std::printf("  worst relative error over the normal range: %.3g (bound 2^-22 = %.3g)\n", worst,
                std::ldexp(1.0, -22));
    std::printf("test_ex2_approx: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
