// The special-function hyperbolic tangent of the attention soft-cap, alone (llmc/cuda/ptx.cuh):
//   tanh.approx.f32 d, a   (tanh_approx)
// What it must do is transcribed from NVIDIA's PTX ISA ("Floating Point Instructions: tanh"), not
// from the kernels or from the emulation:
//   - corner cases: tanh(-Inf) = -1.0, tanh(-0.0) = -0.0, tanh(+0.0) = +0.0, tanh(+Inf) = 1.0,
//     tanh(NaN) = NaN;
//   - subnormal inputs are passed through to the output (bit for bit);
//   - approximation: the relative error against tanh(a) (in double) is at most 2^-11 over the whole
//     float range: random a of every magnitude (2^-126 .. 2^127, both signs) and a dense uniform
//     sample of [-10, 10], where soft-capped logits live.
// Runs on a GPU (sm_75+) and under emulation (where it checks dev/emu/tanh.h). Exit 0 = pass, 1 = fail.
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

namespace tanh_approx_test {

__global__ void tanh_kernel(float* d, const float* a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = llmc::cuda::tanh_approx(a[i]);
}

bool same_bits(float x, float y) { return std::memcmp(&x, &y, 4) == 0; }

}  // namespace tanh_approx_test

int main() {
    using namespace tanh_approx_test;
    if (!gpu_test::have_gpu("test_tanh_approx")) return 1;
    std::printf("test_tanh_approx: tanh.approx.f32 per the PTX ISA\n");
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float dmin = std::numeric_limits<float>::denorm_min();
    int bad = 0;
    // exact cases: (input, expected bits); subnormals pass through
    const std::vector<std::pair<float, float>> exact = {{-inf, -1.0f},
                                                        {-0.0f, -0.0f},
                                                        {0.0f, 0.0f},
                                                        {inf, 1.0f},
                                                        {dmin, dmin},
                                                        {-dmin, -dmin},
                                                        {dmin * 12345.0f, dmin * 12345.0f},
                                                        {-dmin * 777777.0f, -dmin * 777777.0f}};
    std::vector<float> a;
    for (const auto& e : exact) a.push_back(e.first);
    a.push_back(nan);
    const unsigned seed = std::random_device{}();
    std::printf("  seed %u\n", seed);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> logits(-10.0f, 10.0f), mantissa(1.0f, 2.0f);
    std::uniform_int_distribution<int> exponent(-126, 127), subnormal_bits(1, (1 << 23) - 1);
    const size_t first_random = a.size();
    for (int k = 0; k < 4000; k++) a.push_back(logits(gen));
    for (int k = 0; k < 4000; k++)
        a.push_back((k % 2 ? -1.0f : 1.0f) * std::ldexp(mantissa(gen), exponent(gen)));  // every magnitude
    const size_t first_subnormal = a.size();
    for (int k = 0; k < 200; k++) {
        uint32_t bits = (uint32_t)subnormal_bits(gen) | (k % 2 ? 0x80000000u : 0u);
        float x;
        std::memcpy(&x, &bits, 4);
        a.push_back(x);
    }
    const std::vector<float> d = gpu_test::run_elementwise(tanh_kernel, a);

    for (size_t i = 0; i < exact.size(); i++)
        if (!same_bits(d[i], exact[i].second)) {
            std::printf("FAIL tanh(%a) = %a, want %a\n", a[i], d[i], exact[i].second);
            bad++;
        }
    if (!std::isnan(d[exact.size()])) {
        std::printf("FAIL tanh(NaN) = %a, want NaN\n", d[exact.size()]);
        bad++;
    }
    const double bound = std::ldexp(1.0, -11);
    double worst = 0.0;
    for (size_t i = first_random; i < first_subnormal; i++) {
        const double want = std::tanh((double)a[i]);
        // a = +-0 (a draw can be exactly 0): d must be a itself (the exact cases above)
        const double rel =
            want == 0.0 ? (same_bits(d[i], a[i]) ? 0.0 : INFINITY) : std::fabs((double)d[i] - want) / std::fabs(want);
        worst = std::max(worst, rel);
        if (!(rel <= bound)) {
            if (bad < 20) std::printf("FAIL tanh(%a) = %a, want %a (relative error %.3g)\n", a[i], d[i], want, rel);
            bad++;
        }
    }
    for (size_t i = first_subnormal; i < a.size(); i++)
        if (!same_bits(d[i], a[i])) {
            if (bad < 20) std::printf("FAIL tanh(%a) = %a, want the subnormal input passed through\n", a[i], d[i]);
            bad++;
        }
    std::printf("  worst relative error: %.3g (bound 2^-11 = %.3g)\n", worst, bound);
    std::printf("test_tanh_approx: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
