// Kernel lab: the whole-K GEMM candidate with the GELU in its epilogue
// (dev/cuda/matmul_candidates/small_k_gemm.cuh; not used by the trainer) against a double CPU product,
// and its fused epilogues bit for bit against its plain product followed by the production GELU
// kernels (llmc/cuda/gelu.cuh). The candidate is bf16 in either build; the fused epilogues' bit
// comparison and the timing need the BF16 build's production kernels (bf16 activations), so the
// FP32 build checks the products alone and says so.
//   ./matmul_small_k          validate + timing table at the paper model's MLP (M = B*T = 32768, K = C =
//                             192, N = 4C = 768): each form against cuBLASLt + the production GELU kernel
//   ./matmul_small_k --check  validate several shapes (ragged M and N, both B layouts, both GELU kinds), no timing
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "dev/cuda/matmul_candidates/small_k_gemm.cuh"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/matmul.cuh"

namespace cand = llmc::cuda::lab_candidates;
using cand::SmallKB;
using cand::SmallKEpi;
using bf16 = __nv_bfloat16;

// v rounded to bf16 (the values the kernel reads, in either build).
static void round_bf16(std::vector<float>& v) {
    for (float& x : v) x = llmc::cuda::to_float(llmc::cuda::from_float<bf16>(x));
}

static const char* layout_name(SmallKB l) {
    return l == SmallKB::Rows ? "Rows (weight (N, K))" : "Cols (weight (K, N))";
}

// D = A (M, K) @ B in double, B = w^T (w (N, K)) for Rows, B = w (w (K, N)) for Cols.
static std::vector<double> reference(const std::vector<float>& a, const std::vector<float>& w, int M, int N, int K,
                                     SmallKB layout) {
    std::vector<double> d((size_t)M * N, 0.0);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
                const double b = layout == SmallKB::Rows ? w[(size_t)n * K + k] : w[(size_t)k * N + n];
                s += (double)a[(size_t)m * K + k] * b;
            }
            d[(size_t)m * N + n] = s;
        }
    return d;
}

// Every element of out within a bf16 rounding of the exact product, plus what fp32 sums over K terms
// can add: |out - ref| <= 2^-8 |ref| + K * 2^-22 * sum_k |a b|. One line; true = pass.
static bool check_product(const char* what, const std::vector<float>& out, const std::vector<double>& ref,
                          const std::vector<double>& abs_sum, int K) {
    size_t bad = 0, worst = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double bound = 0x1p-8 * std::fabs(ref[i]) + K * 0x1p-22 * abs_sum[i];
        const double err = std::fabs((double)out[i] - ref[i]);
        const double ratio = std::isfinite(out[i]) ? err / std::max(bound, 1e-30) : INFINITY;
        if (!(ratio <= 1.0)) bad++;
        if (!(ratio <= worst_ratio)) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    std::printf("  %-14s worst |out - ref| / bound %.3f at %zu (out %.6g, ref %.6g), %zu of %zu outside  %s\n", what,
                worst_ratio, worst, ref.empty() ? 0.0 : out[worst], ref.empty() ? 0.0 : ref[worst], bad, ref.size(),
                bad ? "FAIL" : "OK");
    return bad == 0;
}

static bool check_bits(const char* what, const bf16* d_a, const bf16* d_b, size_t n) {
    const std::vector<float> a = lab::download(d_a, n), b = lab::download(d_b, n);
    size_t diff = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (!diff) first = i;
            diff++;
        }
    std::printf("  %-14s %zu of %zu elements differ from the unfused pair%s  %s\n", what, diff, n,
                diff ? (" (first at " + std::to_string(first) + ")").c_str() : "", diff ? "FAIL" : "OK");
    return diff == 0;
}

// One shape, one B layout, one GELU kind: the plain product against the double reference, then both
// fused epilogues bit for bit against the plain product + the production GELU kernels.
static bool validate(llmc::Rng& rng, int M, int N, SmallKB layout, llmc::Gelu kind) {
    const int K = cand::kSmallK;
    std::printf("small_k_gemm M=%d N=%d K=%d B %s, gelu %s\n", M, N, K, layout_name(layout), llmc::gelu_name(kind));
    std::vector<float> a = lab::random_normal(rng, (size_t)M * K, 0.0f, 1.0f);
    std::vector<float> w = lab::random_normal(rng, (size_t)N * K, 0.0f, 2.0f / std::sqrt((float)K));
    std::vector<float> dy = lab::random_normal(rng, (size_t)M * N, 0.0f, 1.0f);  // the GELU output's gradient
    round_bf16(a);
    round_bf16(w);
    round_bf16(dy);
    const std::vector<double> ref = reference(a, w, M, N, K, layout);
    std::vector<float> abs_a(a.size()), abs_w(w.size());
    for (size_t i = 0; i < a.size(); i++) abs_a[i] = std::fabs(a[i]);
    for (size_t i = 0; i < w.size(); i++) abs_w[i] = std::fabs(w[i]);
    const std::vector<double> abs_sum = reference(abs_a, abs_w, M, N, K, layout);

    const size_t MN = (size_t)M * N;
    auto d_a = lab::upload_as<bf16>(a);
    auto d_w = lab::upload_as<bf16>(w);
    llmc::cuda::DeviceBuffer<bf16> d_plain(MN), d_pre(MN), d_out(MN), d_unfused(MN), d_bwd(MN);
    for (bf16* p : {d_plain.get(), d_pre.get(), d_out.get(), d_unfused.get(), d_bwd.get()}) lab::poison(p, MN);

    cand::small_k_gemm(d_plain.get(), nullptr, d_a.get(), d_w.get(), M, N, K, layout, SmallKEpi::Plain, kind, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = check_product("plain", lab::download(d_plain.get(), MN), ref, abs_sum, K);

#if defined(ENABLE_FP32)
    std::printf(
        "  %-14s SKIPPED: the FP32 build's production GELU kernels take fp32 activations; the BF16 "
        "build compares the fused epilogues with them\n",
        "gelu epilogues");
    return ok;
#else
    // forward: pre == plain, out == gelu_forward(plain)
    cand::small_k_gemm(d_out.get(), d_pre.get(), d_a.get(), d_w.get(), M, N, K, layout, SmallKEpi::GeluForward, kind,
                       0);
    llmc::cuda::gelu_forward(d_unfused.get(), d_plain.get(), MN, kind, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    ok = check_bits("gelu fwd pre", d_pre.get(), d_plain.get(), MN) && ok;
    ok = check_bits("gelu fwd out", d_out.get(), d_unfused.get(), MN) && ok;

    // backward: out = gelu'(pre) * plain, pre = the GELU's input (here dy plays it: any bf16 values)
    auto d_x = lab::upload_as<bf16>(dy);
    cand::small_k_gemm(d_bwd.get(), d_x.get(), d_a.get(), d_w.get(), M, N, K, layout, SmallKEpi::GeluBackward, kind, 0);
    llmc::cuda::gelu_backward(d_unfused.get(), d_x.get(), d_plain.get(), MN, kind, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    ok = check_bits("gelu bwd", d_bwd.get(), d_unfused.get(), MN) && ok;
    return ok;
#endif
}

// Misuse is refused with one line, before any launch.
static bool check_rejects() {
    llmc::cuda::DeviceBuffer<bf16> buf(4096);
    auto refused = [&](const char* what, auto call) {
        try {
            call();
        } catch (const std::invalid_argument& e) {
            std::printf("  refuses %-22s %s  OK\n", what, e.what());
            return true;
        }
        std::printf("  refuses %-22s not refused  FAIL\n", what);
        return false;
    };
    bf16* p = buf.get();
    bool ok = refused("K != 192", [&] {
        cand::small_k_gemm(p, nullptr, p, p, 8, 8, 128, SmallKB::Rows, SmallKEpi::Plain, llmc::Gelu::Erf, 0);
    });
    ok = refused("N not a multiple of 8",
                 [&] {
                     cand::small_k_gemm(p, nullptr, p, p, 8, 12, 192, SmallKB::Rows, SmallKEpi::Plain, llmc::Gelu::Erf,
                                        0);
                 }) &&
         ok;
    ok = refused("a misaligned pointer",
                 [&] {
                     cand::small_k_gemm(p + 1, nullptr, p, p, 8, 8, 192, SmallKB::Cols, SmallKEpi::Plain,
                                        llmc::Gelu::Erf, 0);
                 }) &&
         ok;
    ok = refused("GELU without pre",
                 [&] {
                     cand::small_k_gemm(p, nullptr, p, p, 8, 8, 192, SmallKB::Rows, SmallKEpi::GeluForward,
                                        llmc::Gelu::Erf, 0);
                 }) &&
         ok;
    return ok;
}

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "matmul_small_k");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);

    bool ok = check_rejects();
    // ragged M (one row, a partial row tile) and N (one n8 block, a partial column tile), the paper's N
    ok = validate(rng, 1, 8, SmallKB::Rows, llmc::Gelu::Erf) && ok;
    ok = validate(rng, 131, 136, SmallKB::Rows, llmc::Gelu::Erf) && ok;
    ok = validate(rng, 131, 136, SmallKB::Cols, llmc::Gelu::Erf) && ok;
    ok = validate(rng, 200, 768, SmallKB::Rows, llmc::Gelu::Tanh) && ok;
    ok = validate(rng, 200, 768, SmallKB::Cols, llmc::Gelu::Tanh) && ok;
    ok = validate(rng, 256, 192, SmallKB::Cols, llmc::Gelu::Erf) && ok;
    std::printf("validation: %s\n", ok ? "all OK" : "FAILED");
    if (!ok) return 1;
    if (args.check) return 0;
#if defined(ENABLE_FP32)
    (void)prop;
    std::printf("timing: the BF16 build's (the production pair it is timed against runs on bf16 activations)\n");
    return 0;
#else

    // timing: the paper model's MLP at B16 x T2048 (M 32768, C 192, 4C 768), erf GELU (the paper code's)
    const int M = 16 * 2048, K = cand::kSmallK, N = 4 * K;
    const llmc::Gelu kind = llmc::Gelu::Erf;
    const size_t MN = (size_t)M * N, MK = (size_t)M * K;
    auto d_a = lab::upload_as<bf16>(lab::random_normal(rng, MK, 0.0f, 1.0f));             // ln2 (fc), dout (fcproj)
    auto d_w = lab::upload_as<bf16>(lab::random_normal(rng, (size_t)N * K, 0.0f, 0.1f));  // fcw (N, K), fcprojw (K, N)
    auto d_pre = lab::upload_as<bf16>(lab::random_normal(rng, MN, 0.0f, 1.0f));
    llmc::cuda::DeviceBuffer<bf16> d_out(MN), d_tmp(MN);
    llmc::cuda::MatmulContext ctx;
    const cudaDataType_t t = CUDA_R_16BF;
    const double e = sizeof(bf16);
    const std::string shape = "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
    lab::Table table(prop);
    // one timed row: its name (roofline.small_k_rows and lease_digest read these), bytes moved, the launches
    auto row = [&](const char* name, double bytes, const std::function<void()>& launches) {
        table.add(name, shape, lab::time_ms(launches, args.reps), e * bytes);
    };
    // forward: cuBLASLt writes pre, gelu_forward reads it and writes out (the production pair)
    row("cuBLASLt + gelu_forward (prod)", MK + 3.0 * MN, [&] {
        llmc::cuda::matmul_forward(ctx, d_out.get(), d_a.get(), d_w.get(), nullptr, M, K, N, 0, d_tmp.get(), kind);
    });
    row("small_k GeluForward (Rows)", MK + 2.0 * MN, [&] {
        cand::small_k_gemm(d_out.get(), d_tmp.get(), d_a.get(), d_w.get(), M, N, K, SmallKB::Rows,
                           SmallKEpi::GeluForward, kind, 0);
    });
    // the products alone
    row("cuBLASLt forward alone", MK + MN,
        [&] { llmc::cuda::matmul_forward(ctx, d_out.get(), d_a.get(), d_w.get(), nullptr, M, K, N, 0); });
    row("small_k Plain (Rows)", MK + MN, [&] {
        cand::small_k_gemm(d_out.get(), nullptr, d_a.get(), d_w.get(), M, N, K, SmallKB::Rows, SmallKEpi::Plain, kind,
                           0);
    });
    // backward of fcproj (weight (K = C, N = 4C), as (OC, IC)): cuBLASLt's dinp as
    // matmul_backward_products issues it, then gelu_backward in place (the production pair of a layer
    // without bias: matmul_gelu_backward runs the GELU pass first, on fcproj's own dout: the same bytes)
    auto lt_dinp = [&] {
        llmc::cuda::detail::lt_matmul(ctx, d_out.get(), t, d_w.get(), false, N, d_a.get(), false, K, t, N, M, K, N,
                                      0.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0);
    };
    row("cuBLASLt dinp + gelu_backward", MK + 4.0 * MN, [&] {
        lt_dinp();
        llmc::cuda::gelu_backward(d_out.get(), d_pre.get(), d_out.get(), MN, kind, 0);
    });
    row("small_k GeluBackward (Cols)", MK + 2.0 * MN, [&] {
        cand::small_k_gemm(d_out.get(), d_pre.get(), d_a.get(), d_w.get(), M, N, K, SmallKB::Cols,
                           SmallKEpi::GeluBackward, kind, 0);
    });
    row("cuBLASLt dinp alone", MK + MN, lt_dinp);
    row("small_k Plain (Cols)", MK + MN, [&] {
        cand::small_k_gemm(d_out.get(), nullptr, d_a.get(), d_w.get(), M, N, K, SmallKB::Cols, SmallKEpi::Plain, kind,
                           0);
    });
    table.print();
    table.write_json(args.json);
    return 0;
#endif
}
