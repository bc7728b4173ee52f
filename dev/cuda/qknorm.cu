// Kernel lab: QK-norm forward/backward (production kernels from llmc/cuda/qknorm.cuh) against the fp32 CPU
// reference llmc/cpu/qknorm.h.
//   ./qknorm           validate + timing table (ms, GB/s vs the memory-bandwidth ceiling)
//   ./qknorm --check   validate several shapes (hd below, at and above 32, ragged), no timing; exit 1 on failure
// The contract is checked too: dqkv is OVERWRITTEN (poisoned first), dqw/dqb/dkw/dkb are ADDED into
// random initial values, and two runs give the same bits.
#include <cstdio>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/cpu/qknorm.h"
#include "llmc/cuda/qknorm.cuh"

using llmc::cuda::DeviceBuffer;
using llmc::cuda::floatX;

// with_bias false: QK-norm without biases (--bias 0): qb, kb, dqb, dkb nullptr on both sides.
static bool validate(llmc::Rng& rng, int N, int C, int NH, bool with_bias = true) {
    const int hd = C / NH;
    std::printf("qknorm N=%d C=%d NH=%d (hd=%d)%s\n", N, C, NH, hd, with_bias ? "" : " no bias");
    const size_t n3 = (size_t)N * 3 * C;
    const size_t nstat = (size_t)N * 2 * NH;
    std::vector<float> qkv = lab::random_normal(rng, n3, 0.2f, 1.5f);
    std::vector<float> dy = lab::random_normal(rng, n3, 0.0f, 1.0f);
    std::vector<float> qw = lab::random_normal(rng, hd, 1.0f, 0.2f), qb = lab::random_normal(rng, hd, 0.0f, 0.2f);
    std::vector<float> kw = lab::random_normal(rng, hd, 1.0f, 0.2f), kb = lab::random_normal(rng, hd, 0.0f, 0.2f);
    std::vector<float> g0[4];
    for (auto& g : g0) g = lab::random_normal(rng, hd, 0.0f, 1.0f);  // dqw, dqb, dkw, dkb initial values
    for (auto* v : {&qkv, &dy, &qw, &qb, &kw, &kb}) lab::round_to_floatX(*v);

    std::vector<float> out_ref(n3), mean_ref(nstat), rstd_ref(nstat);
    llmc::cpu::qknorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), qkv.data(), qw.data(),
                              with_bias ? qb.data() : nullptr, kw.data(), with_bias ? kb.data() : nullptr, 1, N, C, NH);
    std::vector<float> dx_ref(n3);  // overwritten, as on the GPU
    std::vector<float> g_ref[4] = {g0[0], g0[1], g0[2], g0[3]};
    llmc::cpu::qknorm_backward(dx_ref.data(), g_ref[0].data(), with_bias ? g_ref[1].data() : nullptr, g_ref[2].data(),
                               with_bias ? g_ref[3].data() : nullptr, dy.data(), qkv.data(), mean_ref.data(),
                               rstd_ref.data(), qw.data(), kw.data(), 1, N, C, NH);

    auto d_qkv = lab::upload_as<floatX>(qkv);
    auto d_dy = lab::upload_as<floatX>(dy);
    auto d_qw = lab::upload_as<floatX>(qw), d_qb = lab::upload_as<floatX>(qb);
    auto d_kw = lab::upload_as<floatX>(kw), d_kb = lab::upload_as<floatX>(kb);
    DeviceBuffer<floatX> d_out(n3);
    DeviceBuffer<float> d_mean(nstat), d_rstd(nstat);
    lab::poison(d_out.get(), n3);
    lab::poison(d_mean.get(), nstat);
    lab::poison(d_rstd.get(), nstat);
    llmc::cuda::qknorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_qkv.get(), d_qw.get(),
                               with_bias ? d_qb.get() : nullptr, d_kw.get(), with_bias ? d_kb.get() : nullptr, N, C, NH,
                               0);
    bool ok = lab::check("qkvn", d_out.get(), out_ref);
    ok = lab::check("mean", d_mean.get(), mean_ref) && ok;
    ok = lab::check("rstd", d_rstd.get(), rstd_ref) && ok;

    // backward twice (with the CPU mean/rstd, so it tests the backward alone)
    auto d_mean_ref = lab::upload_as<float>(mean_ref);
    auto d_rstd_ref = lab::upload_as<float>(rstd_ref);
    DeviceBuffer<float> scratch(llmc::cuda::qknorm_backward_scratch_floats(N, C, NH));
    DeviceBuffer<floatX> dx_run[2];
    DeviceBuffer<float> g_run[2][4];
    for (int run = 0; run < 2; run++) {
        dx_run[run] = DeviceBuffer<floatX>(n3);
        lab::poison(dx_run[run].get(), n3);
        lab::poison(scratch.get(), scratch.size());
        for (int j = 0; j < 4; j++) g_run[run][j] = lab::upload_as<float>(g0[j]);
        llmc::cuda::qknorm_backward(dx_run[run].get(), g_run[run][0].get(), with_bias ? g_run[run][1].get() : nullptr,
                                    g_run[run][2].get(), with_bias ? g_run[run][3].get() : nullptr, scratch.get(),
                                    d_dy.get(), d_qkv.get(), d_qw.get(), d_kw.get(), d_mean_ref.get(), d_rstd_ref.get(),
                                    N, C, NH, 0);
    }
    ok = lab::check("dqkv", dx_run[0].get(), dx_ref) && ok;
    const char* names[4] = {"dqw", "dqb", "dkw", "dkb"};
    for (int j = 0; j < 4; j++) ok = lab::check(names[j], g_run[0][j].get(), g_ref[j]) && ok;  // no bias: dqb, dkb g0
    ok = lab::check_identical("dqkv", dx_run[0].get(), dx_run[1].get(), n3) && ok;
    for (int j = 0; j < 4; j++) ok = lab::check_identical(names[j], g_run[0][j].get(), g_run[1][j].get(), hd) && ok;
    return ok;
}

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "qknorm");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);

    bool ok = true;
    ok = validate(rng, 1, 1, 1) && ok;
    // the packed path (one thread per 16-byte pack, L = hd / kPack lanes per head: a power of two
    // up to 32) and the scalar one (warp per head) for the other head sizes
    ok = validate(rng, 64, 192, 6) && ok;    // paper model: hd = 32 (packed)
    ok = validate(rng, 37, 60, 3) && ok;     // hd = 20 < 32 (scalar)
    ok = validate(rng, 5, 200, 2) && ok;     // hd = 100: lanes loop (scalar)
    ok = validate(rng, 3001, 256, 4) && ok;  // hd = 64, more rows than backward workers (packed)
    ok = validate(rng, 33, 48, 6) && ok;     // hd = 8: one lane per head in bf16 (packed)
    ok = validate(rng, 21, 64, 4) && ok;     // hd = 16, a chunk's 32 packs straddle q and k (packed)
    ok = validate(rng, 17, 512, 4) && ok;    // hd = 128 (packed)
    ok = validate(rng, 9, 512, 2) && ok;     // hd = 256: 32 lanes per head in bf16 (packed)
    // without biases (--bias 0): both forward kernels and both backwards
    ok = validate(rng, 64, 192, 6, false) && ok;    // packed
    ok = validate(rng, 37, 60, 3, false) && ok;     // scalar
    ok = validate(rng, 3001, 256, 4, false) && ok;  // packed, more rows than workers
    std::printf("validation: %s\n", ok ? "all OK" : "FAILED");
    if (!ok) return 1;
    if (args.check) return 0;

    lab::Table table(prop);
    const double X = sizeof(floatX);
    for (int cfg = 0; cfg < 2; cfg++) {
        // the paper model at B*T = 8*2048, and a GPT-2 124M-sized model at B*T = 16*1024
        const int N = 16384, C = cfg == 0 ? 192 : 768, NH = cfg == 0 ? 6 : 12;
        const size_t n3 = (size_t)N * 3 * C;
        const size_t nstat = (size_t)N * 2 * NH;
        auto d_qkv = lab::upload_as<floatX>(lab::random_normal(rng, n3, 0.0f, 1.0f));
        auto d_dy = lab::upload_as<floatX>(lab::random_normal(rng, n3, 0.0f, 1.0f));
        const int hd = C / NH;
        auto d_w = lab::upload_as<floatX>(lab::random_normal(rng, hd, 1.0f, 0.1f));
        auto d_b = lab::upload_as<floatX>(lab::random_normal(rng, hd, 0.0f, 0.1f));
        DeviceBuffer<floatX> d_out(n3), d_dx(n3);
        DeviceBuffer<float> d_mean(nstat), d_rstd(nstat), d_g(4 * hd, true);
        DeviceBuffer<float> scratch(llmc::cuda::qknorm_backward_scratch_floats(N, C, NH));
        const std::string shape = "N=" + std::to_string(N) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH);
        float ms = lab::time_ms(
            [&] {
                llmc::cuda::qknorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_qkv.get(), d_w.get(), d_b.get(),
                                           d_w.get(), d_b.get(), N, C, NH, 0);
            },
            args.reps);
        table.add("qknorm_forward", shape, ms, 2.0 * n3 * X + 8.0 * nstat);
        float* g = d_g.get();
        ms = lab::time_ms(
            [&] {
                llmc::cuda::qknorm_backward(d_dx.get(), g, g + hd, g + 2 * hd, g + 3 * hd, scratch.get(), d_dy.get(),
                                            d_qkv.get(), d_w.get(), d_w.get(), d_mean.get(), d_rstd.get(), N, C, NH, 0);
            },
            args.reps);
        // dqkvn read, qkv's q and k read, dqkv written, mean/rstd read, partials written and read
        table.add("qknorm_backward", shape, ms, (3.0 + 2.0 + 3.0) * N * C * X + 8.0 * nstat + 2.0 * scratch.bytes());
    }
    table.print();
    table.write_json(args.json);
    return 0;
}
