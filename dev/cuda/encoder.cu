// Kernel lab: token + position embedding forward/backward (production kernels from llmc/cuda/encoder.cuh)
// against the fp32 CPU reference llmc/cpu/encoder.h.
//   ./encoder           validate + timing table (ms, GB/s vs the memory-bandwidth ceiling)
//   ./encoder --check   validate several shapes (ragged C, few and many distinct tokens), no timing; exit 1 on failure
// The backward's contract is checked too: dwte, dwpe are ADDED into random initial values (rows no token
// touches must keep them), and two runs give the same bits. The backward's token groups are computed
// on the host (llmc/core/token_groups.h) and uploaded, as the CUDA backend does; the timing table has
// the host grouping's time on this machine's CPU beside the kernels'.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/cpu/encoder.h"
#include "llmc/cuda/encoder.cuh"

using llmc::cuda::DeviceBuffer;
using llmc::cuda::floatX;

// group_tokens(inp) on the host, uploaded (token_groups_ints(n, Vp) ints on the device).
static DeviceBuffer<int> upload_groups(const std::vector<int>& inp, int Vp) {
    const int n = (int)inp.size();
    std::vector<int> groups(llmc::token_groups_ints(n, Vp));
    llmc::TokenGroupScratch scratch;
    llmc::group_tokens(groups.data(), inp.data(), n, Vp, scratch);
    return lab::upload(groups);
}

static std::vector<int> random_tokens(llmc::Rng& rng, size_t n, int V) {
    std::vector<int> t(n);
    for (auto& x : t) x = (int)rng.below((uint64_t)V);
    return t;
}

// V: token ids drawn from [0, V) (small V = many repeats); Vp >= V rows in wte; maxT >= T rows in wpe.
static bool validate(llmc::Rng& rng, int B, int T, int C, int V, int Vp, int maxT) {
    std::printf("encoder B=%d T=%d C=%d V=%d Vp=%d maxT=%d\n", B, T, C, V, Vp, maxT);
    const size_t NC = (size_t)B * T * C;
    std::vector<int> inp = random_tokens(rng, (size_t)B * T, V);
    std::vector<float> wte = lab::random_normal(rng, (size_t)Vp * C, 0.0f, 0.5f);
    std::vector<float> wpe = lab::random_normal(rng, (size_t)maxT * C, 0.0f, 0.5f);
    std::vector<float> dout = lab::random_normal(rng, NC, 0.0f, 1.0f);
    std::vector<float> dwte0 = lab::random_normal(rng, (size_t)Vp * C, 0.0f, 1.0f);
    std::vector<float> dwpe0 = lab::random_normal(rng, (size_t)maxT * C, 0.0f, 1.0f);
    for (auto* v : {&wte, &wpe, &dout}) lab::round_to_floatX(*v);

    std::vector<float> out_ref(NC), dwte_ref = dwte0, dwpe_ref = dwpe0;
    llmc::cpu::encoder_forward(out_ref.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    llmc::cpu::encoder_backward(dwte_ref.data(), dwpe_ref.data(), dout.data(), inp.data(), B, T, C);

    auto d_inp = lab::upload(inp);
    auto d_wte = lab::upload_as<floatX>(wte);
    auto d_wpe = lab::upload_as<floatX>(wpe);
    auto d_dout = lab::upload_as<floatX>(dout);
    DeviceBuffer<floatX> d_out(NC);
    lab::poison(d_out.get(), NC);
    llmc::cuda::encoder_forward(d_out.get(), d_inp.get(), d_wte.get(), d_wpe.get(), B, T, C, 0);
    bool ok = lab::check("out", d_out.get(), out_ref);

    DeviceBuffer<float> dwte_run[2], dwpe_run[2];
    for (int run = 0; run < 2; run++) {  // the groups computed afresh for each run
        const DeviceBuffer<int> d_groups = upload_groups(inp, Vp);
        dwte_run[run] = lab::upload_as<float>(dwte0);
        dwpe_run[run] = lab::upload_as<float>(dwpe0);
        llmc::cuda::encoder_backward(dwte_run[run].get(), dwpe_run[run].get(), d_dout.get(), d_inp.get(),
                                     d_groups.get(), B, T, C, Vp, 0);
    }
    ok = lab::check_added("dwte", dwte_run[0].get(), dwte0, dwte_ref) && ok;
    ok = lab::check_added("dwpe", dwpe_run[0].get(), dwpe0, dwpe_ref) && ok;
    ok = lab::check_identical("dwte", dwte_run[0].get(), dwte_run[1].get(), (size_t)Vp * C) && ok;
    ok = lab::check_identical("dwpe", dwpe_run[0].get(), dwpe_run[1].get(), (size_t)maxT * C) && ok;
    return ok;
}

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "encoder");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);

    bool ok = true;
    ok = validate(rng, 1, 1, 1, 1, 1, 1) && ok;
    ok = validate(rng, 4, 64, 192, 5, 128, 128) && ok;     // few distinct tokens: long buckets
    ok = validate(rng, 3, 37, 100, 1000, 1024, 50) && ok;  // ragged C (scalar path), T < maxT
    ok = validate(rng, 3, 700, 40, 3, 8, 700) && ok;       // runs of hundreds of positions, more positions than rows
    ok = validate(rng, 8, 256, 768, 50257, 50304, 1024) && ok;  // GPT-2 vocabulary, mostly distinct tokens
    std::printf("validation: %s\n", ok ? "all OK" : "FAILED");
    if (!ok) return 1;
    if (args.check) return 0;

    // timing: GPT-2 124M at B=16, T=1024
    const int B = 16, T = 1024, C = 768, V = 50257, Vp = 50304;
    const size_t NC = (size_t)B * T * C;
    const double X = sizeof(floatX);
    std::vector<int> inp = random_tokens(rng, (size_t)B * T, V);
    auto d_inp = lab::upload(inp);
    auto d_wte = lab::upload_as<floatX>(lab::random_normal(rng, (size_t)Vp * C, 0.0f, 0.02f));
    auto d_wpe = lab::upload_as<floatX>(lab::random_normal(rng, (size_t)T * C, 0.0f, 0.02f));
    auto d_dout = lab::upload_as<floatX>(lab::random_normal(rng, NC, 0.0f, 1.0f));
    DeviceBuffer<floatX> d_out(NC);
    DeviceBuffer<float> d_dwte((size_t)Vp * C, true), d_dwpe((size_t)T * C, true);
    const DeviceBuffer<int> d_groups = upload_groups(inp, Vp);
    const std::string shape = "B=16 T=1024 C=768";
    lab::Table table(prop);
    float ms = lab::time_ms(
        [&] { llmc::cuda::encoder_forward(d_out.get(), d_inp.get(), d_wte.get(), d_wpe.get(), B, T, C, 0); },
        args.reps);
    table.add("encoder_forward", shape, ms, 3.0 * NC * X);  // out written, wte rows and wpe rows read
    ms = lab::time_ms(
        [&] {
            llmc::cuda::encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), d_groups.get(), B, T, C,
                                         Vp, 0);
        },
        args.reps);
    // dout read twice; touched dwte rows (at most B*T) and dwpe rows read and written in fp32
    table.add("encoder_backward (groups uploaded)", shape, ms, 2.0 * NC * X + 2.0 * NC * 4 + 2.0 * T * C * 4);
    table.print();
    // the host side: group_tokens per micro-batch (the backend's cost on the host, off the device)
    std::vector<int> groups(llmc::token_groups_ints(B * T, Vp));
    llmc::TokenGroupScratch host_scratch;
    llmc::group_tokens(groups.data(), inp.data(), B * T, Vp, host_scratch);  // grows the scratch
    const int host_reps = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < host_reps; r++) llmc::group_tokens(groups.data(), inp.data(), B * T, Vp, host_scratch);
    const double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::printf("group_tokens (host CPU) %s V=%d: %.1f us per micro-batch (mean of %d)\n", shape.c_str(), Vp,
                host_us / host_reps, host_reps);
    table.write_json(args.json);
    return 0;
}
