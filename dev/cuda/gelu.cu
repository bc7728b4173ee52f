// Kernel lab: GELU forward/backward (production kernels from llmc/cuda/gelu.cuh) against the fp32 CPU
// reference llmc/cpu/gelu.h, both kinds (Gelu::Tanh, Gelu::Erf).
//   ./gelu            validate + timing table (ms, GB/s vs the memory-bandwidth ceiling)
//   ./gelu --check    validate several sizes (ragged, unaligned, in-place), no timing; exit 1 on failure
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -DENABLE_BF16 -I. dev/cuda/gelu.cu -o gelu
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/cpu/gelu.h"
#include "llmc/cuda/gelu.cuh"

using llmc::cuda::floatX;

// n elements; `offset` shifts every device pointer by that many elements (offset 1 = the unaligned path);
// in_place: the backward writes dinp over dout.
static bool validate(llmc::Rng& rng, size_t n, int offset, bool in_place, llmc::Gelu kind) {
    std::printf("gelu %s n=%zu offset=%d%s\n", llmc::gelu_name(kind), n, offset, in_place ? " in-place backward" : "");
    std::vector<float> x = lab::random_normal(rng, n, 0.0f, 2.0f);
    std::vector<float> dout = lab::random_normal(rng, n, 0.0f, 1.0f);
    lab::round_to_floatX(x);
    lab::round_to_floatX(dout);

    std::vector<float> ref_out(n), ref_dinp(n);  // both backwards overwrite dinp
    llmc::cpu::gelu_forward(ref_out.data(), x.data(), n, kind);
    llmc::cpu::gelu_backward(ref_dinp.data(), x.data(), dout.data(), n, kind);

    std::vector<float> pad(offset, 0.0f);
    auto with_pad = [&](const std::vector<float>& v) {
        std::vector<float> p = pad;
        p.insert(p.end(), v.begin(), v.end());
        return p;
    };
    auto d_x = lab::upload_as<floatX>(with_pad(x));
    auto d_dout = lab::upload_as<floatX>(with_pad(dout));
    llmc::cuda::DeviceBuffer<floatX> d_out(n + offset), d_dinp(n + offset);
    lab::poison(d_out.get(), n + offset);
    lab::poison(d_dinp.get(), n + offset);

    llmc::cuda::gelu_forward(d_out.get() + offset, d_x.get() + offset, n, kind, 0);
    floatX* dinp = in_place ? d_dout.get() + offset : d_dinp.get() + offset;
    llmc::cuda::gelu_backward(dinp, d_x.get() + offset, d_dout.get() + offset, n, kind, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = lab::check("out", d_out.get() + offset, ref_out);
    ok = lab::check("dinp", dinp, ref_dinp) && ok;
    return ok;
}

// Which formula does each kind compute? On x in [-6, 4] (where tanh and erf GELU differ by up to
// 4.7e-4 near x = -2.7, and their derivatives by up to ~1e-2), gelu(x) and gelu'(x) (dout = 1) from the
// kernels; over the outputs where the two formulas differ by more than 4 output ulps, the sum of squared
// distances to the kind's own formula must be smaller than to the other's. In the BF16 build the
// relative-error check above cannot tell the kinds apart (their gap is below its 1e-2); this can.
static bool check_formula(llmc::Gelu kind) {
    const int n = 2048;
    std::vector<float> x(n), ones(n, 1.0f);
    for (int i = 0; i < n; i++) x[i] = -6.f + 10.f * i / (n - 1);
    lab::round_to_floatX(x);
    auto d_x = lab::upload_as<floatX>(x);
    auto d_ones = lab::upload_as<floatX>(ones);
    llmc::cuda::DeviceBuffer<floatX> d_out(n), d_grad(n);
    lab::poison(d_out.get(), n);
    lab::poison(d_grad.get(), n);
    llmc::cuda::gelu_forward(d_out.get(), d_x.get(), n, kind, 0);
    llmc::cuda::gelu_backward(d_grad.get(), d_x.get(), d_ones.get(), n, kind, 0);
    const std::vector<float> out = lab::download(d_out.get(), n), grad = lab::download(d_grad.get(), n);
    bool ok = true;
    for (int part = 0; part < 2; part++) {
        const std::vector<float>& y = part == 0 ? out : grad;
        int decisive = 0, bad = 0;
        double sq_own = 0.0, sq_other = 0.0;
        for (int i = 0; i < n; i++) {
            const double xi = x[i];
            const double k = 0.7978845608028654, th = std::tanh(k * (xi + 0.044715 * xi * xi * xi));
            const double cdf = 0.5 * (1.0 + std::erf(xi / std::sqrt(2.0)));
            const double pdf = std::exp(-0.5 * xi * xi) / std::sqrt(2.0 * M_PI);
            const double t = part == 0
                                 ? 0.5 * xi * (1.0 + th)
                                 : 0.5 * (1.0 + th) + 0.5 * xi * (1.0 - th * th) * k * (1.0 + 3 * 0.044715 * xi * xi);
            const double e = part == 0 ? xi * cdf : cdf + xi * pdf;
            const double own = kind == llmc::Gelu::Erf ? e : t, other = kind == llmc::Gelu::Erf ? t : e;
            const double ulp = std::max(std::fabs(own) * (sizeof(floatX) == 2 ? 0x1p-7 : 0x1p-23), 1e-30);
            if (!std::isfinite(y[i])) {
                bad++;
                continue;
            }
            if (std::fabs(own - other) > 4 * ulp) {
                decisive++;
                sq_own += (y[i] - own) * (y[i] - own);
                sq_other += (y[i] - other) * (y[i] - other);
            }
        }
        const bool part_ok = bad == 0 && decisive >= 16 && sq_own < sq_other;
        std::printf(
            "gelu %s formula, %s: %d decisive outputs, rms distance to its own %.3g, to the other kind's %.3g, "
            "%d non-finite  %s\n",
            llmc::gelu_name(kind), part == 0 ? "gelu(x)" : "gelu'(x)", decisive,
            decisive ? std::sqrt(sq_own / decisive) : 0.0, decisive ? std::sqrt(sq_other / decisive) : 0.0, bad,
            part_ok ? "OK" : "FAIL");
        ok = ok && part_ok;
    }
    return ok;
}

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "gelu");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);

    bool ok = true;
    for (const llmc::Gelu kind : {llmc::Gelu::Tanh, llmc::Gelu::Erf}) {
        ok = validate(rng, 1, 0, false, kind) && ok;
        ok = validate(rng, 7, 0, false, kind) && ok;
        ok = validate(rng, 4096 + 3, 0, false, kind) && ok;
        ok = validate(rng, 4096 + 3, 1, false, kind) && ok;  // unaligned: scalar path
        ok = validate(rng, (1 << 20) + 5, 0, true, kind) && ok;
        ok = validate(rng, 3 * 768 * 4, 0, true, kind) && ok;
        ok = check_formula(kind) && ok;
    }
    std::printf("validation: %s\n", ok ? "all OK" : "FAILED");
    if (!ok) return 1;
    if (args.check) return 0;

    // timing: the MLP hidden activation of GPT-2 124M at B*T = 16384 (N * 4C = 50M elements)
    const size_t n = (size_t)16384 * 3072;
    auto d_x = lab::upload_as<floatX>(lab::random_normal(rng, n, 0.0f, 1.0f));
    auto d_dout = lab::upload_as<floatX>(lab::random_normal(rng, n, 0.0f, 1.0f));
    llmc::cuda::DeviceBuffer<floatX> d_out(n);
    const std::string shape = "n=" + std::to_string(n);
    lab::Table table(prop);
    for (const llmc::Gelu kind : {llmc::Gelu::Tanh, llmc::Gelu::Erf}) {
        const std::string k = llmc::gelu_name(kind);
        float ms = lab::time_ms([&] { llmc::cuda::gelu_forward(d_out.get(), d_x.get(), n, kind, 0); }, args.reps);
        table.add("gelu_forward " + k, shape, ms, 2.0 * n * sizeof(floatX));
        ms = lab::time_ms([&] { llmc::cuda::gelu_backward(d_out.get(), d_x.get(), d_dout.get(), n, kind, 0); },
                          args.reps);
        table.add("gelu_backward " + k, shape, ms, 3.0 * n * sizeof(floatX));
    }
    table.print();
    table.write_json(args.json);
    return 0;
}
