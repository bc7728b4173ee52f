// Kernel lab: fused classifier (llmc/cuda/classifier.cuh) against the fp32 CPU reference
// (llmc/cpu/classifier.h).
//   ./classifier            validate every shape below, then a timing table (ms, GB/s)
//   ./classifier --check    validation only; exit status 1 on any failure
// Per shape: the padding columns [V, Vp) hold NaN (they must never be read); forward only (lse,
// CE, z-loss, row max; logits unchanged), forward + dlogits (dlogits over all Vp columns, padding
// exactly 0), no targets (lse and row max only), and two runs bit-identical. Then the contract's
// edge rows (check_edges).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/cpu/classifier.h"
#include "llmc/cuda/classifier.cuh"

using llmc::cuda::DeviceBuffer;
using llmc::cuda::floatX;

namespace {

bool check_shape(llmc::Rng& rng, int N, int V, int Vp, float z_weight) {
    std::printf("classifier N=%d V=%d Vp=%d z_weight=%g\n", N, V, Vp, z_weight);
    // logits ~ N(0, 2) with one large logit per row (softmax far from uniform), padding NaN
    std::vector<float> logits = lab::random_normal(rng, (size_t)N * Vp, 0.f, 2.f);
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) {
        logits[(size_t)n * Vp + rng.next_u32() % V] = 12.f + 4.f * rng.uniform();
        targets[n] = (int)(rng.next_u32() % V);
    }
    targets[N - 1] = V - 1;  // the last real column: in the vector holding V's boundary when V % 8 != 0
    lab::round_to_floatX(logits);
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) logits[(size_t)n * Vp + v] = std::numeric_limits<float>::quiet_NaN();

    // CPU reference (reads only [0, V))
    std::vector<float> loss_ref(N), zloss_ref(N), lse_ref(N), max_ref(N);
    llmc::cpu::classifier_forward<float>(loss_ref.data(), zloss_ref.data(), lse_ref.data(), logits.data(),
                                         targets.data(), z_weight, N, V, Vp, nullptr);
    for (int n = 0; n < N; n++) {
        float m = logits[(size_t)n * Vp];
        for (int v = 1; v < V; v++) m = std::max(m, logits[(size_t)n * Vp + v]);
        max_ref[n] = m;
    }
    const float dscale = 1.7f / N;  // grad_scale / N
    std::vector<float> dlogits_ref((size_t)N * Vp, 0.f);
    llmc::cpu::classifier_backward<float>(dlogits_ref.data(), logits.data(), lse_ref.data(), targets.data(), dscale,
                                          z_weight, N, V, Vp);

    auto d_logits = lab::upload_as<floatX>(logits);
    auto d_targets = lab::upload(targets);
    DeviceBuffer<float> d_lse(N), d_loss(N), d_zloss(N), d_max(N);
    auto poison_all = [&] {
        lab::poison(d_lse.get(), N);
        lab::poison(d_loss.get(), N);
        lab::poison(d_zloss.get(), N);
        lab::poison(d_max.get(), N);
    };
    bool ok = true;

    // 1. forward only: statistics; logits untouched
    poison_all();
    llmc::cuda::classifier_forward_backward(d_logits.get(), d_lse.get(), d_loss.get(), d_zloss.get(), d_max.get(),
                                            d_targets.get(), z_weight, 0.0f, N, V, Vp, 0);
    ok &= lab::check("lse", d_lse.get(), lse_ref);
    ok &= lab::check("loss", d_loss.get(), loss_ref);
    if (z_weight != 0.f) ok &= lab::check("zloss", d_zloss.get(), zloss_ref);
    else ok &= lab::check("zloss (=0)", d_zloss.get(), zloss_ref, 0.0);
    ok &= lab::check("row_max", d_max.get(), max_ref, 0.0);  // exact: a max of exact values
    {
        auto d_orig = lab::upload_as<floatX>(logits);
        std::vector<floatX> a((size_t)N * Vp), b((size_t)N * Vp);
        CUDA_CHECK(cudaMemcpy(a.data(), d_logits.get(), a.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b.data(), d_orig.get(), b.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
        const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(floatX)) == 0;
        std::printf("  %-14s logits unchanged without dlogits: %s\n", "logits", same ? "OK" : "FAIL");
        ok &= same;
    }

    // 2. no targets: lse and row max only
    poison_all();
    llmc::cuda::classifier_forward_backward(d_logits.get(), d_lse.get(), nullptr, nullptr, d_max.get(), nullptr,
                                            z_weight, 0.0f, N, V, Vp, 0);
    ok &= lab::check("lse (no tgt)", d_lse.get(), lse_ref);
    ok &= lab::check("max (no tgt)", d_max.get(), max_ref, 0.0);

    // 3. forward + dlogits in place (every column, padding included)
    poison_all();
    llmc::cuda::classifier_forward_backward(d_logits.get(), d_lse.get(), d_loss.get(), d_zloss.get(), d_max.get(),
                                            d_targets.get(), z_weight, dscale, N, V, Vp, 0);
    ok &= lab::check("lse (bwd)", d_lse.get(), lse_ref);
    ok &= lab::check("loss (bwd)", d_loss.get(), loss_ref);
    ok &= lab::check("dlogits", d_logits.get(), dlogits_ref);
    {
        const std::vector<float> dl = lab::download(d_logits.get(), (size_t)N * Vp);
        size_t nonzero = 0;
        for (int n = 0; n < N; n++)
            for (int v = V; v < Vp; v++) nonzero += dl[(size_t)n * Vp + v] != 0.f;
        std::printf("  %-14s padding columns exactly 0: %zu non-zero  %s\n", "dlogits", nonzero,
                    nonzero ? "FAIL" : "OK");
        ok &= nonzero == 0;
    }

    // 4. determinism: the same call on a fresh copy of the logits
    auto d_logits2 = lab::upload_as<floatX>(logits);
    DeviceBuffer<float> d_lse2(N);
    llmc::cuda::classifier_forward_backward(d_logits2.get(), d_lse2.get(), nullptr, nullptr, nullptr, d_targets.get(),
                                            z_weight, dscale, N, V, Vp, 0);
    ok &= lab::check_identical("dlogits", d_logits.get(), d_logits2.get(), (size_t)N * Vp);
    ok &= lab::check_identical("lse", d_lse.get(), d_lse2.get(), N);
    return ok;
}

// The contract's edge rows against a double-precision reference computed here: targets out of range
// (-1, V, Vp - 1: loss NaN, no one-hot term), a NaN in a real column (lse NaN), logits of bf16's
// largest magnitudes (3e38 among normal ones; every column -3e38) and around 2e9 (where a fused
// fmaf(x, log2e, -M log2e) is off by more than 127 in the exponent), the target V - 1, and V = 1.
// Padding exactly 0 in every row's dlogits; lse and loss to 1e-5 of max(1, |lse|), NaN where the
// reference is NaN; dlogits to 1e-2 of the row's largest |dlogit| (bf16 rounding), only finite where |lse|
// is past 1e6 (there fp32 rounds lse - max itself).
bool check_edges(llmc::Rng& rng) {
    bool ok = true;
    for (const int V : {1001, 1}) {
        const int Vp = V == 1 ? 8 : 1024, N = V == 1 ? 2 : 8;
        const float z_weight = 1e-4f, dscale = 1.3f / N;
        std::printf("classifier edges V=%d Vp=%d\n", V, Vp);
        std::vector<float> logits = lab::random_normal(rng, (size_t)N * Vp, 0.f, 2.f);
        std::vector<int> targets(N);
        for (int n = 0; n < N; n++) targets[n] = (int)(rng.next_u32() % V);
        float* r = logits.data();
        if (V > 1) {
            targets[0] = -1;
            targets[1] = V;
            targets[2] = Vp - 1;
            r[3 * Vp + 500] = std::numeric_limits<float>::quiet_NaN();
            r[4 * Vp + 7] = 3e38f;
            for (int v = 0; v < V; v++) r[5 * Vp + v] = -3e38f;
            for (int v = 0; v < V; v++) r[6 * Vp + v] += 2e9f;
            targets[7] = V - 1;
        }
        lab::round_to_floatX(logits);
        for (int n = 0; n < N; n++)
            for (int v = V; v < Vp; v++) logits[(size_t)n * Vp + v] = std::numeric_limits<float>::quiet_NaN();
        auto d_logits = lab::upload_as<floatX>(logits);
        auto d_targets = lab::upload(targets);
        DeviceBuffer<float> d_lse(N), d_loss(N);
        llmc::cuda::classifier_forward_backward(d_logits.get(), d_lse.get(), d_loss.get(), nullptr, nullptr,
                                                d_targets.get(), z_weight, dscale, N, V, Vp, 0);
        const std::vector<float> lse = lab::download(d_lse.get(), N), loss = lab::download(d_loss.get(), N);
        const std::vector<float> dl = lab::download(d_logits.get(), (size_t)N * Vp);
        for (int n = 0; n < N; n++) {
            const float* x = logits.data() + (size_t)n * Vp;
            double mx = -INFINITY;
            bool nan = false;
            for (int v = 0; v < V; v++) {
                nan |= std::isnan(x[v]);
                mx = std::max(mx, (double)x[v]);
            }
            double sum = 0.0;
            for (int v = 0; v < V; v++) sum += std::exp((double)x[v] - mx);
            const double ref_lse = nan ? NAN : mx + std::log(sum);
            const int t = targets[n];
            const bool t_ok = t >= 0 && t < V;
            const double ref_loss = (t_ok && !nan) ? ref_lse - (double)x[t] : NAN;
            // to 1e-5 of max(1, |lse|): the loss is lse - x[target], as exact as lse is
            const double scale = std::isnan(ref_lse) ? 1.0 : std::max(1.0, std::fabs(ref_lse));
            auto close = [scale](double got, double ref) {
                return std::isnan(ref) ? std::isnan(got) : std::fabs(got - ref) <= 1e-5 * scale;
            };
            bool row_ok = close(lse[n], ref_lse) && close(loss[n], ref_loss);
            // dlogits: exactly 0 in the padding; over [0, V) the reference unless it is NaN
            std::vector<double> ref_d(V);
            double dmax = 0.0;
            for (int v = 0; v < V && !nan; v++) {
                const double p = std::exp((double)x[v] - ref_lse);
                ref_d[v] = dscale * (p * (1.0 + 2.0 * z_weight * ref_lse) - (v == t ? 1.0 : 0.0));
                dmax = std::max(dmax, std::fabs(ref_d[v]));
            }
            // |lse| past 1e6: fp32 cannot hold lse - max (log V is below lse's ulp), so p rounds (in any
            // fp32 implementation); those rows' dlogits must only be finite
            const bool precise = std::fabs(ref_lse) < 1e6;
            size_t bad = 0;
            for (int v = 0; v < Vp; v++) {
                const float g = dl[(size_t)n * Vp + v];
                if (v >= V) bad += g != 0.f;
                else if (!nan && precise) bad += !(std::fabs(g - ref_d[v]) <= 1e-2 * dmax);
                else if (!nan) bad += !std::isfinite(g);
            }
            row_ok &= bad == 0;
            std::printf("  row %d target %d: lse %.7g (ref %.7g) loss %.7g (ref %.7g), %zu dlogits off  %s\n", n, t,
                        lse[n], ref_lse, loss[n], ref_loss, bad, row_ok ? "OK" : "FAIL");
            ok &= row_ok;
        }
    }
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "classifier");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);
    try {
        bool ok = true;
        // (N, V, Vp): tiny, small V with wide padding, ragged V, one and two warps a row
        // (classifier_threads: at most kClassifierRowVecs vectors a thread), the paper's SentencePiece
        // vocabulary (256 threads, the row in registers), one segment of 512 threads, GPT-2's
        // vocabulary (three segments in bf16, five in fp32: pass 2 reads again), four segments in
        // bf16; every shape's last row targets column V - 1 (in the vector holding V's boundary when
        // V % 8 != 0)
        ok &= check_shape(rng, 4, 8, 8, 1e-4f);
        ok &= check_shape(rng, 3, 5, 128, 0.f);
        ok &= check_shape(rng, 37, 1001, 1024, 0.05f);
        ok &= check_shape(rng, 19, 1400, 1536, 1e-4f);
        ok &= check_shape(rng, 33, 8000, 8192, 1e-4f);
        ok &= check_shape(rng, 129, 10000, 10112, 1e-4f);
        ok &= check_shape(rng, 33, 20000, 20096, 1e-4f);
        ok &= check_shape(rng, 64, 50257, 50304, 1e-4f);
        ok &= check_shape(rng, 5, 70001, 70016, 1e-4f);
        ok &= check_edges(rng);
        bool threw = false;
        try {
            DeviceBuffer<floatX> l(64);
            llmc::cuda::classifier_forward_backward(l.get(), nullptr, nullptr, nullptr, nullptr, nullptr, 0.f, 0.f, 2,
                                                    30, 30, 0);
        } catch (const std::invalid_argument& e) {
            threw = true;
            std::printf("Vp = 30 refused: %s  OK\n", e.what());
        }
        if (!threw) std::printf("Vp = 30 (not a multiple of 8) was NOT refused  FAIL\n");
        ok &= threw;
        std::printf("%s\n", ok ? "classifier: all checks passed" : "classifier: FAILED");
        if (args.check || !ok) return ok ? 0 : 1;

        lab::Table table(prop);
        const int tshapes[][3] = {{8192, 50257, 50304}, {16384, 10000, 10112}};
        for (const auto& s : tshapes) {
            const int N = s[0], V = s[1], Vp = s[2];
            auto logits = lab::upload_as<floatX>(lab::random_normal(rng, (size_t)N * Vp, 0.f, 2.f));
            std::vector<int> t(N);
            for (auto& x : t) x = (int)(rng.next_u32() % V);
            auto targets = lab::upload(t);
            DeviceBuffer<float> lse(N), loss(N), zloss(N), mx(N);
            const std::string shape = "N=" + std::to_string(N) + " Vp=" + std::to_string(Vp);
            const double bytes = (double)N * Vp * sizeof(floatX);
            table.add("classifier forward", shape,
                      lab::time_ms(
                          [&] {
                              llmc::cuda::classifier_forward_backward(logits.get(), lse.get(), loss.get(), zloss.get(),
                                                                      mx.get(), targets.get(), 1e-4f, 0.f, N, V, Vp, 0);
                          },
                          args.reps),
                      bytes);
            // DRAM traffic: read once + write once (the second read of a row mostly hits L2)
            table.add("classifier forward+dlogits", shape,
                      lab::time_ms(
                          [&] {
                              llmc::cuda::classifier_forward_backward(logits.get(), lse.get(), loss.get(), zloss.get(),
                                                                      mx.get(), targets.get(), 1e-4f, 1.f / N, N, V, Vp,
                                                                      0);
                          },
                          args.reps),
                      2 * bytes);
        }
        table.print();
        table.write_json(args.json);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "classifier: error: %s\n", e.what());
        return 1;
    }
}
