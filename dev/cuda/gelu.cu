// Kernel lab: GELU forward/backward (production kernels from llmc/cuda/gelu.cuh) against the fp32 CPU
// reference llmc/cpu/gelu.h.
//   ./gelu            validate + timing table (ms, GB/s vs the memory-bandwidth ceiling)
//   ./gelu --check    validate several sizes (ragged, unaligned, in-place), no timing; exit 1 on failure
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -DENABLE_BF16 -I. dev/cuda/gelu.cu -o gelu
#include <cstdio>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/cpu/gelu.h"
#include "llmc/cuda/gelu.cuh"

using llmc::cuda::floatX;

// n elements; `offset` shifts every device pointer by that many elements (offset 1 = the unaligned path);
// in_place: the backward writes dinp over dout.
static bool validate(llmc::Rng& rng, size_t n, int offset, bool in_place) {
    std::printf("gelu n=%zu offset=%d%s\n", n, offset, in_place ? " in-place backward" : "");
    std::vector<float> x = lab::random_normal(rng, n, 0.0f, 2.0f);
    std::vector<float> dout = lab::random_normal(rng, n, 0.0f, 1.0f);
    lab::round_to_floatX(x);
    lab::round_to_floatX(dout);

    std::vector<float> ref_out(n), ref_dinp(n);  // both backwards overwrite dinp
    llmc::cpu::gelu_forward(ref_out.data(), x.data(), n);
    llmc::cpu::gelu_backward(ref_dinp.data(), x.data(), dout.data(), n);

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

    llmc::cuda::gelu_forward(d_out.get() + offset, d_x.get() + offset, n, 0);
    floatX* dinp = in_place ? d_dout.get() + offset : d_dinp.get() + offset;
    llmc::cuda::gelu_backward(dinp, d_x.get() + offset, d_dout.get() + offset, n, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = lab::check("out", d_out.get() + offset, ref_out);
    ok = lab::check("dinp", dinp, ref_dinp) && ok;
    return ok;
}

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "gelu");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);

    bool ok = true;
    ok = validate(rng, 1, 0, false) && ok;
    ok = validate(rng, 7, 0, false) && ok;
    ok = validate(rng, 4096 + 3, 0, false) && ok;
    ok = validate(rng, 4096 + 3, 1, false) && ok;  // unaligned: scalar path
    ok = validate(rng, (1 << 20) + 5, 0, true) && ok;
    ok = validate(rng, 3 * 768 * 4, 0, true) && ok;
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
    float ms = lab::time_ms([&] { llmc::cuda::gelu_forward(d_out.get(), d_x.get(), n, 0); }, args.reps);
    table.add("gelu_forward", shape, ms, 2.0 * n * sizeof(floatX));
    ms = lab::time_ms([&] { llmc::cuda::gelu_backward(d_out.get(), d_x.get(), d_dout.get(), n, 0); }, args.reps);
    table.add("gelu_backward", shape, ms, 3.0 * n * sizeof(floatX));
    table.print();
    table.write_json(args.json);
    return 0;
}
