// Kernel lab: AdamW with fp32 master weights (llmc/cuda/adamw.cuh) against the fp32 CPU reference
// (llmc/core/adamw.h).
//   ./adamw            validate, then a timing table (ms, GB/s): adamw_update (per tensor, stochastic
//                      rounding), adamw_update_all (the backend's one launch), copy_master_to_params
//   ./adamw --check    validation only; exit status 1 on any failure
// Checks: master, m, v after several steps (fp32 math, tolerance 1e-6; the kernel is written to be
// bit-identical to a non-FMA CPU build, the count of bit-identical elements is printed; adamw_update_all's
// checks are exact: this lab's host code is built without FMA contraction, -ffp-contract=off); params =
// a bf16 neighbour of master (BF16 build) or exactly master (FP32 build, also aliased);
// stochastic rounding deterministic for a seed, different across seeds, and unbiased: the mean of
// many rounded copies (over seeds, and over indices with one seed) lands on the fp32 value far
// closer than round-to-nearest could; copy_master_to_params rounds to nearest; adamw_update_all (one
// launch over several tensors, the gradient multiplier from the host or decided on the device, a
// skipped update that writes nothing) against the CPU reference per tensor.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/core/adamw.h"
#include "llmc/cuda/adamw.cuh"

using llmc::cuda::DeviceBuffer;
using llmc::cuda::floatX;

namespace {

constexpr bool kBF16 = sizeof(floatX) == 2;

// The two bf16 values around x (truncation and the next one up in magnitude), as floats.
void bf16_neighbours(float x, float* lo, float* hi) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    uint32_t t = b & 0xFFFF0000u, u = t + 0x10000u;
    std::memcpy(lo, &t, 4);
    std::memcpy(hi, &u, 4);
}

size_t count_identical(const std::vector<float>& a, const std::vector<float>& b) {
    size_t c = 0;
    for (size_t i = 0; i < a.size(); i++) c += std::memcmp(&a[i], &b[i], 4) == 0;
    return c;
}

bool check_steps(llmc::Rng& rng, size_t n, bool alias) {
    std::printf("adamw n=%zu, 5 steps%s\n", n, alias ? ", params aliasing master (FP32 build)" : "");
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gm = 0.7f;
    std::vector<float> master = lab::random_normal(rng, n, 0.f, 0.5f);
    std::vector<float> m(n, 0.f), v(n, 0.f);
    auto d_master = lab::upload_as<float>(master);
    auto d_m = lab::upload_as<float>(m);
    auto d_v = lab::upload_as<float>(v);
    DeviceBuffer<floatX> d_params(n);
    DeviceBuffer<float> d_grads(n);
    bool ok = true;
    for (int t = 1; t <= 5; t++) {
        std::vector<float> g = lab::random_normal(rng, n, 0.f, t == 3 ? 1e-6f : 1.f);  // one step of tiny grads
        CUDA_CHECK(cudaMemcpy(d_grads.get(), g.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        llmc::adamw_update(master.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t, gm);
        lab::poison(d_params.get(), n);
        floatX* params = alias ? reinterpret_cast<floatX*>(d_master.get()) : d_params.get();
        llmc::cuda::adamw_update(params, d_master.get(), d_grads.get(), d_m.get(), d_v.get(), n, lr, b1, b2, eps, wd, t,
                                 gm, 1234u + t, 0);
    }
    ok &= lab::check("master", d_master.get(), master, 1e-6);
    ok &= lab::check("m", d_m.get(), m, 1e-6);
    ok &= lab::check("v", d_v.get(), v, 1e-6);
    const std::vector<float> gm_ = lab::download(d_master.get(), n), gmm = lab::download(d_m.get(), n),
                             gv = lab::download(d_v.get(), n);
    std::printf("  bit-identical to the CPU: master %zu/%zu, m %zu/%zu, v %zu/%zu\n", count_identical(gm_, master), n,
                count_identical(gmm, m), n, count_identical(gv, v), n);
    if (alias) return ok;
    // params from the final master: a bf16 neighbour (BF16) or exact (FP32)
    const std::vector<float> p = lab::download(d_params.get(), n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (kBF16) {
            float lo, hi;
            bf16_neighbours(gm_[i], &lo, &hi);
            bad += !(p[i] == lo || p[i] == hi);
        } else {
            bad += std::memcmp(&p[i], &gm_[i], 4) != 0;
        }
    }
    std::printf("  %-14s %s of master: %zu of %zu wrong  %s\n", "params", kBF16 ? "a bf16 neighbour" : "exact copy",
                bad, n, bad ? "FAIL" : "OK");
    ok &= bad == 0;
    ok &= lab::check("params", d_params.get(), gm_);
    return ok;
}

// params == nullptr: master, m, v as with params.
bool check_null_params(llmc::Rng& rng, size_t n) {
    std::printf("adamw n=%zu, params = nullptr\n", n);
    std::vector<float> master = lab::random_normal(rng, n, 0.f, 0.5f), g = lab::random_normal(rng, n, 0.f, 1.f);
    std::vector<float> m = lab::random_normal(rng, n, 0.f, 0.1f), v = lab::random_uniform(rng, n, 0.f, 0.1f);
    auto d_master = lab::upload_as<float>(master);
    auto d_g = lab::upload_as<float>(g);
    auto d_m = lab::upload_as<float>(m);
    auto d_v = lab::upload_as<float>(v);
    llmc::adamw_update(master.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 7, 1.f);
    llmc::cuda::adamw_update(nullptr, d_master.get(), d_g.get(), d_m.get(), d_v.get(), n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                             0.f, 7, 1.f, 99u, 0);
    bool ok = lab::check("master", d_master.get(), master, 1e-6);
    ok &= lab::check("m", d_m.get(), m, 1e-6);
    ok &= lab::check("v", d_v.get(), v, 1e-6);
    return ok;
}

// lr = 0 leaves master unchanged, so params = round(master) with the given seed.
void round_with_seed(floatX* d_params, float* d_master, const float* d_zero, float* d_m, float* d_v, size_t n,
                     uint32_t seed) {
    llmc::cuda::adamw_update(d_params, d_master, d_zero, d_m, d_v, n, 0.f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1.f, seed, 0);
}

bool check_stochastic_rounding(llmc::Rng& rng) {
    if (!kBF16) return true;
    std::printf("stochastic rounding (bf16)\n");
    const size_t n = 4096;
    // values off the bf16 grid, many magnitudes and both signs
    std::vector<float> x(n);
    for (auto& e : x) e = (rng.uniform() < 0.5f ? -1.f : 1.f) * std::exp(-8.f + 12.f * rng.uniform());
    auto d_master = lab::upload_as<float>(x);
    DeviceBuffer<float> d_zero(n, true), d_m(n, true), d_v(n, true);
    DeviceBuffer<floatX> d_p(n), d_p2(n);
    bool ok = true;
    // deterministic for a seed, different across seeds
    round_with_seed(d_p.get(), d_master.get(), d_zero.get(), d_m.get(), d_v.get(), n, 42u);
    round_with_seed(d_p2.get(), d_master.get(), d_zero.get(), d_m.get(), d_v.get(), n, 42u);
    ok &= lab::check_identical("same seed", d_p.get(), d_p2.get(), n);
    round_with_seed(d_p2.get(), d_master.get(), d_zero.get(), d_m.get(), d_v.get(), n, 43u);
    const std::vector<float> a = lab::download(d_p.get(), n), b = lab::download(d_p2.get(), n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += a[i] != b[i];
    std::printf("  %-14s seeds 42 and 43 differ in %zu of %zu elements  %s\n", "other seed", differ, n,
                differ > n / 10 ? "OK" : "FAIL");
    ok &= differ > n / 10;
    // unbiased over seeds: mean of K roundings vs x, in units of the local bf16 spacing
    const int K = 2048;
    std::vector<double> sum(n, 0.0);
    for (int k = 0; k < K; k++) {
        round_with_seed(d_p.get(), d_master.get(), d_zero.get(), d_m.get(), d_v.get(), n, 1000u + k);
        const std::vector<float> r = lab::download(d_p.get(), n);
        for (size_t i = 0; i < n; i++) sum[i] += r[i];
    }
    double worst = 0.0, mean_abs = 0.0, rn_mean_abs = 0.0;
    for (size_t i = 0; i < n; i++) {
        float lo, hi;
        bf16_neighbours(x[i], &lo, &hi);
        const double ulp = std::fabs((double)hi - (double)lo);
        const double e = std::fabs(sum[i] / K - x[i]) / ulp;
        worst = std::max(worst, e);
        mean_abs += e / n;
        const double rn = std::min(std::fabs((double)x[i] - lo), std::fabs((double)hi - x[i])) / ulp;
        rn_mean_abs += rn / n;
    }
    // one element's mean has sd <= 0.5/sqrt(K) = 0.011 ulp; round-to-nearest averages ~0.25 ulp
    const bool seeds_ok = worst < 0.07 && mean_abs < 0.02;
    std::printf("  %-14s |mean of %d seeds - x|: mean %.4f ulp, worst %.4f ulp (round-to-nearest: %.3f ulp)  %s\n",
                "unbiased", K, mean_abs, worst, rn_mean_abs, seeds_ok ? "OK" : "FAIL");
    ok &= seeds_ok;
    // unbiased over indices with one seed: many copies of a few values
    const size_t copies = 1 << 20;
    const float vals[] = {1.0f + 1.0f / 3.0f * 0.0078125f, -0.0123456f, 3.14159265f, 1e-5f * 1.2345f};
    for (float val : vals) {
        std::vector<float> xs(copies, val);
        auto d_xs = lab::upload_as<float>(xs);
        DeviceBuffer<float> z(copies, true), mm(copies, true), vv(copies, true);
        DeviceBuffer<floatX> p(copies);
        round_with_seed(p.get(), d_xs.get(), z.get(), mm.get(), vv.get(), copies, 7u);
        const std::vector<float> r = lab::download(p.get(), copies);
        double s = 0.0;
        for (float e : r) s += e;
        float lo, hi;
        bf16_neighbours(val, &lo, &hi);
        const double ulp = std::fabs((double)hi - (double)lo);
        const double e = std::fabs(s / copies - val) / ulp;  // sd <= 0.5/1024 ulp
        std::printf("  %-14s x=%-12.7g mean of 2^20 indices off by %.5f ulp  %s\n", "unbiased", val, e,
                    e < 0.003 ? "OK" : "FAIL");
        ok &= e < 0.003;
    }
    return ok;
}

bool check_copy(llmc::Rng& rng, size_t n) {
    std::printf("copy_master_to_params n=%zu\n", n);
    std::vector<float> master = lab::random_normal(rng, n, 0.f, 1.f);
    auto d_master = lab::upload_as<float>(master);
    DeviceBuffer<floatX> d_p(n);
    lab::poison(d_p.get(), n);
    llmc::cuda::copy_master_to_params(d_p.get(), d_master.get(), n, 0);
    lab::round_to_floatX(master);  // host round to nearest even
    return lab::check("params", d_p.get(), master, 0.0);
}

// Where check_all's device buffers start: each `off` elements into its own allocation; params
// nullptr when null_params (the FP32 backend's call); `cases` of check_all's eight (the first ones).
struct Layout {
    const char* name;
    size_t master = 0, m = 0, v = 0, grads = 0, params = 0;
    bool null_params = false;
    int cases = 8;
};

// adamw_update_all: tensors of several sizes (one empty; ends off the four-element grid) with their
// own weight decay in one launch, against the CPU reference per tensor (master, m and v bit-identical),
// with the buffers where `lay` puts them: four elements at a time exactly when every buffer is aligned
// to its vector (asserted), the last n % 4 alone; the gradient multiplier from the host, then decided
// on the device from a squared norm (clipped, not clipped), and the whole update skipped on the device
// when the norm or the loss check is not finite (master, m, v, params untouched); and lr and the bias
// corrections read from device memory (gate.step) while the arguments hold values that must not be used.
bool check_all(llmc::Rng& rng, const Layout& lay) {
    const std::vector<size_t> sizes = {1000, 0, 1, 77777, 4099};
    const std::vector<float> decay = {0.1f, 0.1f, 0.0f, 0.05f, 0.0f};
    llmc::cuda::detail::AdamWSegments seg;
    size_t n = 0;
    for (size_t j = 0; j < sizes.size(); j++) {
        n += sizes[j];
        seg.end[j] = n;
        seg.weight_decay[j] = decay[j];
    }
    seg.count = (int)sizes.size();
    const float lr = 2e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    const float inf = INFINITY, nan = NAN;
    struct Case {
        const char* name;
        bool device_gate;
        float norm_sq, clip;
        double loss;
        bool applied;
        bool device_step = false;  // lr and the bias corrections from gate.step
    };
    const Case cases[] = {
        {"host multiplier 0.7", false, 0.f, 0.f, 0.0, true},
        {"device: norm 5 > clip 1", true, 25.f, 1.f, 3.0, true},
        {"device: norm 0.5 < clip 1", true, 0.25f, 1.f, 3.0, true},
        {"device: no clipping (clip 0)", true, 25.f, 0.f, 3.0, true},
        {"device: norm inf, skipped", true, inf, 1.f, 3.0, false},
        {"device: norm NaN, skipped", true, nan, 1.f, 3.0, false},
        {"device: loss NaN, skipped", true, 25.f, 1.f, (double)nan, false},
        {"device: norm 5 > clip 1, lr and t from device memory", true, 25.f, 1.f, 3.0, true, true},
    };
    std::vector<float> master = lab::random_normal(rng, n, 0.f, 0.5f);
    std::vector<float> m(n, 0.f), v(n, 0.f);
    DeviceBuffer<float> a_master(n + lay.master), a_m(n + lay.m), a_v(n + lay.v), a_grads(n + lay.grads);
    DeviceBuffer<floatX> a_params(n + lay.params);
    float *const d_master = a_master.get() + lay.master, *const d_m = a_m.get() + lay.m, *const d_v = a_v.get() + lay.v,
                 *const d_grads = a_grads.get() + lay.grads;
    floatX* const d_params = lay.null_params ? nullptr : a_params.get() + lay.params;
    CUDA_CHECK(cudaMemcpy(d_master, master.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_m, m.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_v, v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    // the vector path needs every fp32 buffer 16-byte aligned and params at a multiple of 4 elements
    const bool want_vec = lay.master % 4 == 0 && lay.m % 4 == 0 && lay.v % 4 == 0 && lay.grads % 4 == 0 &&
                          (lay.null_params || lay.params % 4 == 0);
    const bool vec = llmc::cuda::detail::adamw_vec_aligned(d_params, d_master, d_grads, d_m, d_v);
    std::printf("adamw_update_all, %s: %s\n", lay.name, vec ? "four elements at a time" : "one element at a time");
    if (vec != want_vec) {
        std::printf("  expected %s  FAIL\n", want_vec ? "four at a time" : "one at a time");
        return false;
    }
    DeviceBuffer<float> d_norm(1);
    DeviceBuffer<double> d_loss(1);
    DeviceBuffer<int> d_applied(1);
    DeviceBuffer<llmc::cuda::detail::AdamWStepScalars> d_step(1);
    bool ok = true;
    int t = 0;
    for (const Case& c : cases) {
        if (t == lay.cases) break;
        t++;
        std::printf("adamw_update_all n=%zu in %d tensors, step %d, %s\n", n, seg.count, t, c.name);
        std::vector<float> g = lab::random_normal(rng, n, 0.f, 1.f);
        CUDA_CHECK(cudaMemcpy(d_grads, g.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_norm.get(), &c.norm_sq, sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_loss.get(), &c.loss, sizeof(double), cudaMemcpyHostToDevice));
        // the loop's rule (llmc/train/train_step.h), on the host
        const float norm = (float)std::sqrt((double)c.norm_sq);
        const float mult = !c.device_gate ? 0.7f : c.clip > 0 && norm > c.clip ? c.clip / norm : 1.0f;
        const std::vector<float> before = lab::download(d_master, n);
        if (c.applied) {
            size_t off = 0;
            for (size_t j = 0; j < sizes.size(); j++) {
                llmc::adamw_update(master.data() + off, g.data() + off, m.data() + off, v.data() + off, sizes[j], lr,
                                   b1, b2, eps, decay[j], t, mult);
                off += sizes[j];
            }
        }
        if (d_params) lab::poison(d_params, n);
        llmc::cuda::detail::AdamWGate gate;
        if (c.device_gate) {
            gate.norm_sq = d_norm.get();
            gate.loss_check = d_loss.get();
            gate.grad_clip = c.clip;
            gate.applied = d_applied.get();
            const int unset = -1;
            CUDA_CHECK(cudaMemcpy(d_applied.get(), &unset, sizeof(int), cudaMemcpyHostToDevice));
        } else {
            gate.multiplier = mult;
        }
        float lr_arg = lr;
        int t_arg = t;
        if (c.device_step) {
            const llmc::cuda::detail::AdamWStepScalars sc = llmc::cuda::detail::adamw_step_scalars(lr, b1, b2, t);
            CUDA_CHECK(cudaMemcpy(d_step.get(), &sc, sizeof sc, cudaMemcpyHostToDevice));
            gate.step = d_step.get();
            lr_arg = 123.0f;  // must not be used
            t_arg = 999;
        }
        llmc::cuda::adamw_update_all(d_params, d_master, d_grads, d_m, d_v, seg, lr_arg, b1, b2, eps, t_arg, gate, 0);
        if (c.device_gate) {
            int applied = -1;
            CUDA_CHECK(cudaMemcpy(&applied, d_applied.get(), sizeof(int), cudaMemcpyDeviceToHost));
            std::printf("  %-14s %d, expected %d  %s\n", "verdict", applied, (int)c.applied,
                        applied == (int)c.applied ? "OK" : "FAIL");
            ok &= applied == (int)c.applied;
        }
        // exact: the kernel's operations are the CPU's, rounded as written (bit-identical on an H200 at fa663e0)
        ok &= lab::check("master", d_master, master, 0.0);
        ok &= lab::check("m", d_m, m, 0.0);
        ok &= lab::check("v", d_v, v, 0.0);
        const std::vector<float> got = lab::download(d_master, n);
        if (d_params && c.applied) {
            std::vector<float> rounded = got;
            lab::round_to_floatX(rounded);  // round to nearest even
            ok &= lab::check("params", d_params, rounded, 0.0);
        } else if (d_params) {  // (master, m and v were compared with the untouched reference above)
            const bool same = std::memcmp(got.data(), before.data(), n * sizeof(float)) == 0;
            const std::vector<float> p = lab::download(d_params, n);
            size_t written = 0;  // params poisoned before the call: a skipped update leaves them so
            for (size_t i = 0; i < n; i++) written += p[i] == p[i];
            std::printf("  %-14s master bits unchanged: %s, params written: %zu  %s\n", "skipped", same ? "yes" : "no",
                        written, same && written == 0 ? "OK" : "FAIL");
            ok &= same && written == 0;
        }
    }
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "adamw");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);
    try {
        bool ok = true;
        for (size_t n : {size_t(1), size_t(1000), size_t(123457), size_t(3) << 20}) ok &= check_steps(rng, n, false);
        if (!kBF16) ok &= check_steps(rng, 77777, true);
        ok &= check_null_params(rng, 50001);
        ok &= check_stochastic_rounding(rng);
        ok &= check_copy(rng, 100003);
        // every buffer aligned or not, one misaligned at a time, params off by 4 elements (8 bytes in
        // bf16: its vector's alignment) and no params (the FP32 backend's call)
        ok &= check_all(rng, {"every buffer aligned"});
        ok &= check_all(rng, {"every buffer one element in", 1, 1, 1, 1, 1});
        ok &= check_all(rng, {"master one element in", 1, 0, 0, 0, 0, false, 1});
        ok &= check_all(rng, {"m one element in", 0, 1, 0, 0, 0, false, 1});
        ok &= check_all(rng, {"v one element in", 0, 0, 1, 0, 0, false, 1});
        ok &= check_all(rng, {"grads one element in", 0, 0, 0, 1, 0, false, 1});
        ok &= check_all(rng, {"params one element in", 0, 0, 0, 0, 1, false, 1});
        ok &= check_all(rng, {"params four elements in", 0, 0, 0, 0, 4, false, 2});
        ok &= check_all(rng, {"params nullptr", 0, 0, 0, 0, 0, true});
        std::printf("%s\n", ok ? "adamw: all checks passed" : "adamw: FAILED");
        if (args.check || !ok) return ok ? 0 : 1;

        lab::Table table(prop);
        for (size_t n : {size_t(124) << 20, size_t(3) << 20}) {
            DeviceBuffer<float> master(n, true), grads(n, true), m(n, true), v(n, true);
            DeviceBuffer<floatX> params(n);
            const std::string shape = "n=" + std::to_string(n);
            // read grads, master, m, v; write master, m, v, params
            table.add("adamw_update", shape,
                      lab::time_ms(
                          [&] {
                              llmc::cuda::adamw_update(params.get(), master.get(), grads.get(), m.get(), v.get(), n,
                                                       1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 10, 1.f, 5u, 0);
                          },
                          args.reps),
                      (double)n * (7 * sizeof(float) + sizeof(floatX)));
            llmc::cuda::detail::AdamWSegments seg;  // the backend's launch: one tensor here, multiplier from the host
            seg.end[0] = n;
            seg.weight_decay[0] = 0.1f;
            seg.count = 1;
            const llmc::cuda::detail::AdamWGate gate;
            table.add("adamw_update_all", shape,
                      lab::time_ms(
                          [&] {
                              llmc::cuda::adamw_update_all(params.get(), master.get(), grads.get(), m.get(), v.get(),
                                                           seg, 1e-3f, 0.9f, 0.95f, 1e-8f, 10, gate, 0);
                          },
                          args.reps),
                      (double)n * (7 * sizeof(float) + sizeof(floatX)));
            table.add(
                "copy_master_to_params", shape,
                lab::time_ms([&] { llmc::cuda::copy_master_to_params(params.get(), master.get(), n, 0); }, args.reps),
                (double)n * (sizeof(float) + sizeof(floatX)));
        }
        table.print();
        table.write_json(args.json);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "adamw: error: %s\n", e.what());
        return 1;
    }
}
