// Kernel lab: LayerNorm forward/backward, the fused residual + LayerNorm forward, and the residual ops
// (production kernels from llmc/cuda/layernorm.cuh and llmc/cuda/residual.cuh) against the fp32 CPU
// references llmc/cpu/layernorm.h and llmc/cpu/residual.h.
//   ./layernorm           validate + timing table (ms, GB/s vs the memory-bandwidth ceiling)
//   ./layernorm --check   validate several shapes (ragged C, unaligned), no timing; exit 1 on failure
// The backward's contract is checked too: dinp, dw, db are ADDED into random initial values, and two runs
// must give the same bits (deterministic reduction).
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/residual.h"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/residual.cuh"

using llmc::cuda::DeviceBuffer;
using llmc::cuda::floatX;

// offset: every floatX activation pointer is shifted by that many elements (1 = the scalar path).
// with_bias false: a LayerNorm without bias (--bias 0): bias and db nullptr on both sides.
static bool validate(llmc::Rng& rng, int N, int C, int offset, bool with_bias = true) {
    std::printf("layernorm N=%d C=%d offset=%d%s\n", N, C, offset, with_bias ? "" : " no bias");
    const size_t NC = (size_t)N * C;
    std::vector<float> a = lab::random_normal(rng, NC, 0.3f, 1.0f);
    std::vector<float> b = lab::random_normal(rng, NC, -0.1f, 0.5f);
    std::vector<float> w = lab::random_normal(rng, C, 1.0f, 0.2f);
    std::vector<float> bias = lab::random_normal(rng, C, 0.0f, 0.2f);
    std::vector<float> dout = lab::random_normal(rng, NC, 0.0f, 1.0f);
    std::vector<float> dinp0 = lab::random_normal(rng, NC, 0.0f, 0.5f);  // ADDED into
    std::vector<float> dw0 = lab::random_normal(rng, C, 0.0f, 1.0f);
    std::vector<float> db0 = lab::random_normal(rng, C, 0.0f, 1.0f);
    for (auto* v : {&a, &b, &w, &bias, &dout, &dinp0}) lab::round_to_floatX(*v);

    // CPU references
    std::vector<float> res(NC);
    llmc::cpu::residual_forward(res.data(), a.data(), b.data(), NC);
    std::vector<float> res_rounded = res;
    lab::round_to_floatX(res_rounded);  // the fused kernel normalizes the stored (floatX) residual
    std::vector<float> out_ref(NC), mean_ref(N), rstd_ref(N);
    const float* bias_ref = with_bias ? bias.data() : nullptr;
    llmc::cpu::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), a.data(), w.data(), bias_ref, N, C);
    std::vector<float> fout_ref(NC), fmean_ref(N), frstd_ref(N);
    llmc::cpu::layernorm_forward(fout_ref.data(), fmean_ref.data(), frstd_ref.data(), res_rounded.data(), w.data(),
                                 bias_ref, N, C);
    std::vector<float> dinp_ref = dinp0, dw_ref = dw0, db_ref = db0;
    llmc::cpu::layernorm_backward(dinp_ref.data(), dw_ref.data(), with_bias ? db_ref.data() : nullptr, dout.data(),
                                  a.data(), w.data(), mean_ref.data(), rstd_ref.data(), N, C);
    std::vector<float> acc_ref = a;  // add_inplace: a += b
    for (size_t i = 0; i < NC; i++) acc_ref[i] += b[i];

    auto pad = [&](const std::vector<float>& v) {
        std::vector<float> p(offset, 0.0f);
        p.insert(p.end(), v.begin(), v.end());
        return p;
    };
    auto d_a = lab::upload_as<floatX>(pad(a));
    auto d_b = lab::upload_as<floatX>(pad(b));
    auto d_w = lab::upload_as<floatX>(w);
    auto d_bias = lab::upload_as<floatX>(bias);
    auto d_dout = lab::upload_as<floatX>(pad(dout));
    DeviceBuffer<floatX> d_out(NC + offset), d_res(NC + offset), d_fout(NC + offset);
    DeviceBuffer<float> d_mean(N), d_rstd(N), d_fmean(N), d_frstd(N);
    for (auto* p : {&d_out, &d_res, &d_fout}) lab::poison(p->get(), NC + offset);
    for (auto* p : {&d_mean, &d_rstd, &d_fmean, &d_frstd}) lab::poison(p->get(), N);
    const int o = offset;
    const floatX* d_bias_p = with_bias ? d_bias.get() : nullptr;

    llmc::cuda::layernorm_forward(d_out.get() + o, d_mean.get(), d_rstd.get(), d_a.get() + o, d_w.get(), d_bias_p, N, C,
                                  0);
    llmc::cuda::fused_residual_layernorm_forward(d_res.get() + o, d_fout.get() + o, d_fmean.get(), d_frstd.get(),
                                                 d_a.get() + o, d_b.get() + o, d_w.get(), d_bias_p, N, C, 0);
    bool ok = lab::check("out", d_out.get() + o, out_ref);
    ok = lab::check("mean", d_mean.get(), mean_ref) && ok;
    ok = lab::check("rstd", d_rstd.get(), rstd_ref) && ok;
    ok = lab::check("fused resid", d_res.get() + o, res) && ok;
    ok = lab::check("fused out", d_fout.get() + o, fout_ref) && ok;
    ok = lab::check("fused mean", d_fmean.get(), fmean_ref) && ok;
    ok = lab::check("fused rstd", d_frstd.get(), frstd_ref) && ok;

    // residual_forward into a poisoned buffer; add_inplace into a copy of a
    DeviceBuffer<floatX> d_sum(NC + o);
    lab::poison(d_sum.get(), NC + o);
    llmc::cuda::residual_forward(d_sum.get() + o, d_a.get() + o, d_b.get() + o, NC, 0);
    ok = lab::check("residual", d_sum.get() + o, res) && ok;
    auto d_acc = lab::upload_as<floatX>(pad(a));
    llmc::cuda::add_inplace(d_acc.get() + o, d_b.get() + o, NC, 0);
    ok = lab::check("add_inplace", d_acc.get() + o, acc_ref) && ok;

    // backward twice from the same initial values (uses the CPU mean/rstd so it tests the backward alone)
    auto d_mean_ref = lab::upload_as<float>(mean_ref);
    auto d_rstd_ref = lab::upload_as<float>(rstd_ref);
    DeviceBuffer<float> scratch(llmc::cuda::layernorm_backward_scratch_floats(N, C));
    DeviceBuffer<floatX> dinp_run[2];
    DeviceBuffer<float> dw_run[2], db_run[2];
    for (int run = 0; run < 2; run++) {
        lab::poison(scratch.get(), scratch.size());
        dinp_run[run] = lab::upload_as<floatX>(pad(dinp0));
        dw_run[run] = lab::upload_as<float>(dw0);
        db_run[run] = lab::upload_as<float>(db0);
        llmc::cuda::layernorm_backward(dinp_run[run].get() + o, dw_run[run].get(),
                                       with_bias ? db_run[run].get() : nullptr, scratch.get(), d_dout.get() + o,
                                       d_a.get() + o, d_w.get(), d_mean_ref.get(), d_rstd_ref.get(), N, C, 0);
    }
    ok = lab::check("dinp", dinp_run[0].get() + o, dinp_ref) && ok;
    ok = lab::check("dw", dw_run[0].get(), dw_ref) && ok;
    ok = lab::check("db", db_run[0].get(), db_ref) && ok;  // without bias: db0, untouched
    ok = lab::check_identical("dinp", dinp_run[0].get(), dinp_run[1].get(), NC + o) && ok;
    ok = lab::check_identical("dw", dw_run[0].get(), dw_run[1].get(), C) && ok;
    ok = lab::check_identical("db", db_run[0].get(), db_run[1].get(), C) && ok;

    // the trainer's path: partials of three LayerNorms (the same inputs), two in group 0 (their
    // gradients side by side, as every layer's ln1 is) and one in group 2, reduced in one
    // reduce_layernorm_partials launch (group 1 empty): each the same bits as layernorm_backward's
    const size_t part = llmc::cuda::layernorm_backward_scratch_floats(N, C);
    DeviceBuffer<float> parts(3 * part);
    lab::poison(parts.get(), parts.size());
    std::vector<float> dw_pair(dw0), db_pair(db0);
    dw_pair.insert(dw_pair.end(), dw0.begin(), dw0.end());
    db_pair.insert(db_pair.end(), db0.begin(), db0.end());
    auto dw_g0 = lab::upload_as<float>(dw_pair), db_g0 = lab::upload_as<float>(db_pair);
    auto dw_g2 = lab::upload_as<float>(dw0), db_g2 = lab::upload_as<float>(db0);
    DeviceBuffer<floatX> dinp_g[3];
    for (int k = 0; k < 3; k++) {
        dinp_g[k] = lab::upload_as<floatX>(pad(dinp0));
        llmc::cuda::layernorm_backward_partials(dinp_g[k].get() + o, parts.get() + k * part, d_dout.get() + o,
                                                d_a.get() + o, d_w.get(), d_mean_ref.get(), d_rstd_ref.get(), N, C, 0);
    }
    const llmc::cuda::LayerNormPartialGroups groups{
        {parts.get(), nullptr, parts.get() + 2 * part},
        {dw_g0.get(), nullptr, dw_g2.get()},
        {with_bias ? db_g0.get() : nullptr, nullptr, with_bias ? db_g2.get() : nullptr},
        {2, 0, 1}};
    llmc::cuda::reduce_layernorm_partials(groups, N, C, 0);
    for (int k = 0; k < 3; k++)
        ok = lab::check_identical("grouped dinp", dinp_run[0].get(), dinp_g[k].get(), NC + o) && ok;
    const float* dw_out[3] = {dw_g0.get(), dw_g0.get() + C, dw_g2.get()};
    const float* db_out[3] = {db_g0.get(), db_g0.get() + C, db_g2.get()};
    for (int k = 0; k < 3; k++) {
        ok = lab::check_identical("grouped dw", dw_run[0].get(), dw_out[k], C) && ok;
        ok = lab::check_identical("grouped db", db_run[0].get(), db_out[k], C) && ok;  // without bias: db0
    }
    if (!with_bias) {  // db given for some groups and not others: refused
        const llmc::cuda::LayerNormPartialGroups mixed{{parts.get(), nullptr, parts.get() + 2 * part},
                                                       {dw_g0.get(), nullptr, dw_g2.get()},
                                                       {db_g0.get(), nullptr, nullptr},
                                                       {2, 0, 1}};
        bool threw = false;
        try {
            llmc::cuda::reduce_layernorm_partials(mixed, N, C, 0);
        } catch (const std::invalid_argument&) { threw = true; }
        std::printf("  reduce_layernorm_partials with db for one group only: %s\n", threw ? "refused  OK" : "FAIL");
        ok = threw && ok;
    }
    return ok;
}

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "layernorm");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);

    bool ok = true;
    ok = validate(rng, 1, 1, 0) && ok;
    // the backward's paths: rows held in registers (layernorm_backward_cached_kernel<CH>, CH chunks
    // of 32 lanes x kPack channels) up to 3 chunks, else the packed or the scalar loop. Chunk
    // counts below are the bf16 build's (kPack 8); fp32 (kPack 4): C 192 two chunks, C 320 three,
    // C 768 and above the packed loop
    ok = validate(rng, 37, 192, 0) && ok;    // paper model width (cached, 1 chunk, lanes 24..31 idle)
    ok = validate(rng, 50, 320, 0) && ok;    // cached, 2 chunks, the second ragged
    ok = validate(rng, 13, 100, 0) && ok;    // C not a multiple of the pack: scalar path
    ok = validate(rng, 64, 768, 1) && ok;    // unaligned pointers: scalar path
    ok = validate(rng, 2051, 768, 0) && ok;  // more rows than the 2048 backward workers (ragged); cached, 3 chunks
    ok = validate(rng, 40, 1024, 0) && ok;   // 4 chunks: the packed loop
    ok = validate(rng, 300, 1600, 0) && ok;  // GPT-2 XL width (packed loop)
    ok = validate(rng, 8, 7000, 0) && ok;    // partials over 48 KiB of shared memory per warp
    // without bias (--bias 0): the forward's packed and scalar kernels, the cached and packed backwards
    ok = validate(rng, 37, 192, 0, false) && ok;
    ok = validate(rng, 13, 100, 0, false) && ok;
    ok = validate(rng, 64, 768, 1, false) && ok;
    ok = validate(rng, 300, 1600, 0, false) && ok;
    std::printf("validation: %s\n", ok ? "all OK" : "FAILED");
    if (!ok) return 1;
    if (args.check) return 0;

    // timing: GPT-2 124M activations at B*T = 16384, and the paper model's (C 192) at B*T = 32768
    lab::Table table(prop);
    for (const std::pair<int, int>& nc : {std::pair<int, int>{16384, 768}, std::pair<int, int>{32768, 192}}) {
        const int N = nc.first, C = nc.second;
        const size_t NC = (size_t)N * C;
        const double X = sizeof(floatX);
        auto d_a = lab::upload_as<floatX>(lab::random_normal(rng, NC, 0.0f, 1.0f));
        auto d_b = lab::upload_as<floatX>(lab::random_normal(rng, NC, 0.0f, 1.0f));
        auto d_dout = lab::upload_as<floatX>(lab::random_normal(rng, NC, 0.0f, 1.0f));
        auto d_w = lab::upload_as<floatX>(lab::random_normal(rng, C, 1.0f, 0.1f));
        auto d_bias = lab::upload_as<floatX>(lab::random_normal(rng, C, 0.0f, 0.1f));
        DeviceBuffer<floatX> d_out(NC), d_res(NC), d_dinp(NC, true);
        DeviceBuffer<float> d_mean(N), d_rstd(N), d_dw(C, true), d_db(C, true);
        DeviceBuffer<float> scratch(llmc::cuda::layernorm_backward_scratch_floats(N, C));
        const std::string shape = "N=" + std::to_string(N) + " C=" + std::to_string(C);
        float ms = lab::time_ms(
            [&] {
                llmc::cuda::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_a.get(), d_w.get(),
                                              d_bias.get(), N, C, 0);
            },
            args.reps);
        table.add("layernorm_forward", shape, ms, 2.0 * NC * X + 8.0 * N);
        ms = lab::time_ms(
            [&] {
                llmc::cuda::fused_residual_layernorm_forward(d_res.get(), d_out.get(), d_mean.get(), d_rstd.get(),
                                                             d_a.get(), d_b.get(), d_w.get(), d_bias.get(), N, C, 0);
            },
            args.reps);
        table.add("fused_residual_layernorm_forward", shape, ms, 4.0 * NC * X + 8.0 * N);
        ms = lab::time_ms(
            [&] {
                llmc::cuda::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), scratch.get(), d_dout.get(),
                                               d_a.get(), d_w.get(), d_mean.get(), d_rstd.get(), N, C, 0);
            },
            args.reps);
        table.add("layernorm_backward", shape, ms, 4.0 * NC * X + 8.0 * N + 2.0 * scratch.bytes());
        ms = lab::time_ms([&] { llmc::cuda::residual_forward(d_res.get(), d_a.get(), d_b.get(), NC, 0); }, args.reps);
        table.add("residual_forward", shape, ms, 3.0 * NC * X);
        ms = lab::time_ms([&] { llmc::cuda::add_inplace(d_res.get(), d_b.get(), NC, 0); }, args.reps);
        table.add("add_inplace", shape, ms, 3.0 * NC * X);
    }
    table.print();
    table.write_json(args.json);
    return 0;
}
