// Kernel lab: squared global gradient norm (llmc/cuda/global_norm.cuh) against the CPU reference
// (llmc/core/global_norm.h, double accumulation).
//   ./global_norm            validate, then a timing table (ms, GB/s)
//   ./global_norm --check    validation only; exit status 1 on any failure
// Checks: several sizes (empty, smaller than one block, ragged, on and past each edge of the
// grid's growth with n, and past its largest grid), output and scratch poisoned first, relative
// error <= 1e-6 (fp32 input, double accumulation, in both builds), two runs bit-identical, and a
// NaN gradient gives a NaN norm (the trainer's non-finite-step check relies on it).
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/core/global_norm.h"
#include "llmc/cuda/global_norm.cuh"

using llmc::cuda::DeviceBuffer;

namespace {

bool check_size(llmc::Rng& rng, size_t n, bool with_nan) {
    std::printf("global_norm_squared n=%zu%s\n", n, with_nan ? " (one NaN)" : "");
    std::vector<float> g = lab::random_normal(rng, n, 0.f, 1.f);
    for (size_t i = 0; i < n; i += 997) g[i] *= 300.f;  // a few large entries
    if (with_nan) g[n / 2] = std::numeric_limits<float>::quiet_NaN();
    auto d_g = lab::upload_as<float>(g);
    DeviceBuffer<float> d_out(1), d_out2(1), d_scratch(llmc::cuda::global_norm_scratch_floats());
    lab::poison(d_out.get(), 1);
    lab::poison(d_out2.get(), 1);
    lab::poison(d_scratch.get(), d_scratch.size());
    DeviceBuffer<uint32_t> d_arrival(1, true);
    llmc::cuda::global_norm_squared(d_out.get(), d_g.get(), n, d_scratch.get(), d_arrival.get(), 0);
    if (with_nan) {
        const float r = lab::download(d_out.get(), 1)[0];
        std::printf("  %-14s %g  %s\n", "norm^2", r, std::isnan(r) ? "OK (NaN)" : "FAIL (expected NaN)");
        return std::isnan(r) && lab::check_arrivals_zero("norm^2", d_arrival.get(), 1);
    }
    const std::vector<float> ref = {(float)llmc::global_norm_squared(g.data(), n)};
    bool ok = lab::check("norm^2", d_out.get(), ref, 1e-6);
    ok &= lab::check_arrivals_zero("norm^2", d_arrival.get(), 1);
    llmc::cuda::global_norm_squared(d_out2.get(), d_g.get(), n, d_scratch.get(), d_arrival.get(), 0);
    ok &= lab::check_identical("norm^2", d_out.get(), d_out2.get(), 1);
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "global_norm");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);
    try {
        bool ok = true;
        for (size_t n : {size_t(0), size_t(1), size_t(511), size_t(4096), size_t(4097), size_t(100003), size_t(262144),
                         size_t(262145), size_t(2097152), size_t(2097153), size_t(5000011)})
            ok &= check_size(rng, n, false);
        ok &= check_size(rng, 300001, true);
        std::printf("%s\n", ok ? "global_norm: all checks passed" : "global_norm: FAILED");
        if (args.check || !ok) return ok ? 0 : 1;

        lab::Table table(prop);
        for (size_t n : {size_t(124) << 20, size_t(3) << 20}) {
            DeviceBuffer<float> g(n, true), out(1), scratch(llmc::cuda::global_norm_scratch_floats());
            DeviceBuffer<uint32_t> arrival(1, true);
            table.add(
                "global_norm_squared", "n=" + std::to_string(n),
                lab::time_ms(
                    [&] { llmc::cuda::global_norm_squared(out.get(), g.get(), n, scratch.get(), arrival.get(), 0); },
                    args.reps),
                (double)n * sizeof(float));
        }
        table.print();
        table.write_json(args.json);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "global_norm: error: %s\n", e.what());
        return 1;
    }
}
