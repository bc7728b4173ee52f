// GPU test: CudaBackend::scale_params (llmc/cuda/param_scale.cuh, the device side of QK-Clip)
// against the CPU backend's (llmc/cpu/gpt2_cpu.h: p *= factor on its fp32 parameters) on the same
// fresh random parameters. Exit status 0 = every check passed; without a GPU it prints one line
// and exits 1.
//
// What is compared (bit for bit: both sides do one fp32 multiplication per element, and the
// working copy is round-to-nearest of the master on both paths):
//   - the fp32 parameters (get_params) after scaling: random disjoint runs (lengths from 0 to
//     beyond one launch's grid stride, the first and the last element included, factors 0.25-1.75)
//     and QK-Clip's own runs (apply_qk_clip with chosen heads);
//   - the working copy the kernels read (bf16 in the BF16 build): a forward after scale_params gives
//     logits bit-identical to a second CudaBackend that received the CPU-scaled parameters through
//     set_params (which rebuilds the whole working copy from the master); a run whose working copy
//     was not refreshed would change the logits;
//   - gradients and AdamW moments are untouched; bad runs (outside the parameters, overlapping) are
//     refused with std::invalid_argument and change nothing.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/core/params.h"
#include "llmc/core/rng.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/cuda/backend_entry.h"
#include "llmc/train/qk_clip.h"
#include "test/gpu/gpu_test_util.cuh"

namespace {

using gpu_test::Checks;
using llmc::ParamScale;

std::vector<float> random_vector(llmc::Rng& r, size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (float& x : v) x = lo + (hi - lo) * r.uniform();
    return v;
}

// Random disjoint runs over [0, n): the first element, a run longer than one launch's grid stride
// (64 blocks x 256 threads), short and empty runs, and the last element.
std::vector<ParamScale> random_runs(llmc::Rng& r, size_t n) {
    std::vector<ParamScale> runs;
    runs.push_back({0, 1 + (size_t)(r.uniform() * 10), 0.25f + 1.5f * r.uniform()});
    size_t at = runs.back().count + (size_t)(r.uniform() * 100);
    runs.push_back({at, 40000, 0.25f + 1.5f * r.uniform()});
    at += 40000;
    while (at + 3000 < n - 100) {
        at += 1 + (size_t)(r.uniform() * 2000);
        const size_t count = (size_t)(r.uniform() * 900);
        runs.push_back({at, count, 0.25f + 1.5f * r.uniform()});
        at += count;
    }
    runs.push_back({n - 50, 0, 3.0f});
    runs.push_back({n - 37, 37, 0.25f + 1.5f * r.uniform()});
    std::shuffle(runs.begin(), runs.end(), std::mt19937_64(r.next_u64()));
    return runs;
}

size_t count_differences(const std::vector<float>& a, const std::vector<float>& b) {
    size_t d = 0;
    for (size_t i = 0; i < a.size(); i++) d += a[i] != b[i];  // NaN counts as different
    return d;
}

// Logits (B, T, Vp) of a forward on the given tokens.
std::vector<float> forward_logits(llmc::Backend& be, const std::vector<int>& tokens, int B, int T) {
    be.forward(tokens.data(), nullptr, B, T, 0.0f, nullptr);
    const float* l = be.logits();
    return std::vector<float>(l, l + (size_t)B * T * be.config().padded_vocab_size);
}

// One comparison: CPU and CUDA backends on the same random parameters (and, on the CUDA side, random
// gradients and moments), scaled by `runs`.
void check_runs(Checks& ck, const char* what, const llmc::ModelConfig& cfg, const std::vector<ParamScale>& runs,
                uint64_t seed) {
    llmc::Rng r(seed);
    llmc::cpu::CpuBackend cpu(cfg, seed);
    const std::unique_ptr<llmc::Backend> gpu_owner = llmc::cuda_backend::create(cfg, seed);
    llmc::Backend& gpu = *gpu_owner;
    const size_t n = gpu.num_params();
    const std::vector<float> p0 = random_vector(r, n, -1.0f, 1.0f);  // no zeros: a missed element shows
    const std::vector<float> g0 = random_vector(r, n, -1.0f, 1.0f), m0 = random_vector(r, n, -1.0f, 1.0f),
                             v0 = random_vector(r, n, 0.0f, 1.0f);
    cpu.set_params(p0.data());
    gpu.set_params(p0.data());
    gpu.set_grads(g0.data());
    gpu.set_optimizer_state(m0.data(), v0.data());

    cpu.scale_params(runs);
    gpu.scale_params(runs);
    std::vector<float> want(n), got(n), g1(n), m1(n), v1(n);
    cpu.get_params(want.data());
    gpu.get_params(got.data());
    size_t scaled = 0;
    for (const ParamScale& s : runs) scaled += s.count;
    const size_t changed = count_differences(want, p0);
    ck.expect(changed > 0 && changed <= scaled, "%s: the CPU scaled %zu of the %zu elements in %zu runs", what, changed,
              scaled, runs.size());
    const size_t diff = count_differences(got, want);
    ck.expect(diff == 0, "%s: fp32 parameters after scale_params, CUDA == CPU bit for bit (%zu of %zu differ)", what,
              diff, n);
    gpu.get_grads(g1.data());
    gpu.get_optimizer_state(m1.data(), v1.data());
    ck.expect(g1 == g0 && m1 == m0 && v1 == v0, "%s: gradients and AdamW moments untouched", what);

    // the working copy: logits after scale_params == logits of a backend given the scaled master
    const std::unique_ptr<llmc::Backend> fresh_owner = llmc::cuda_backend::create(cfg, seed + 1);
    llmc::Backend& fresh = *fresh_owner;
    fresh.set_params(want.data());
    const int B = 2, T = cfg.max_seq_len;
    std::vector<int> tokens((size_t)B * T);
    for (int& t : tokens) t = (int)(r.uniform() * cfg.vocab_size) % cfg.vocab_size;
    const std::vector<float> a = forward_logits(gpu, tokens, B, T), b = forward_logits(fresh, tokens, B, T);
    const size_t ldiff = count_differences(a, b);
    ck.expect(ldiff == 0,
              "%s: working copy (%s) = round-to-nearest of the scaled master: logits equal bit for bit "
              "(%zu of %zu differ)",
              what, llmc::cuda_backend::precision_name(), ldiff, a.size());
}

}  // namespace

int main() {
    if (!gpu_test::have_gpu("test_cuda_param_scale")) return 1;
    Checks ck;
    std::printf("test_cuda_param_scale: %s, build %s\n", llmc::cuda_backend::device_description().c_str(),
                llmc::cuda_backend::precision_name());
    const uint64_t seed = std::random_device{}() | 1u;
    std::printf("seed %llu\n", (unsigned long long)seed);
    // L 2, C 128, 4 heads of 32 (one global), window 4, V 200, T 16
    const llmc::ModelConfig cfg = gpu_test::model_config(2, 128, 4, 1, 4, 200, 16, false, 0.0f, false);
    try {
        llmc::Rng r(seed ^ 0x5a5a);
        check_runs(ck, "random runs", cfg, random_runs(r, llmc::param_layout(cfg).total), seed);

        // QK-Clip's runs: three of the eight heads over threshold, as apply_qk_clip picks them
        llmc::LogitStats s;
        s.resize(cfg.num_layers, cfg.num_heads);
        s.max_logit = {1.0f, 9.0f, 2.0f, 3.0f, 4.0f, 5.0f, 20.0f, 7.5f};  // (L=2, NH=4)
        const std::vector<llmc::ClippedHead> heads = llmc::qk_clip_heads(s, 6.0f);
        ck.expect(heads.size() == 3, "qk-clip: %zu heads over tau 6 (3 expected)", heads.size());
        check_runs(ck, "qk-clip runs", cfg, llmc::qk_clip_scales(cfg, heads), seed + 7);

        // bad runs: refused, nothing changed
        const std::unique_ptr<llmc::Backend> gpu_owner = llmc::cuda_backend::create(cfg, seed);
        llmc::Backend& gpu = *gpu_owner;
        const size_t n = gpu.num_params();
        std::vector<float> before(n), after(n);
        gpu.get_params(before.data());
        int refused = 0;
        const std::vector<std::vector<ParamScale>> bad = {{{n - 10, 11, 2.0f}},
                                                          {{n + 1, 0, 2.0f}},
                                                          {{100, 50, 2.0f}, {149, 5, 3.0f}},
                                                          {{100, 50, 2.0f}, {120, 0, 3.0f}, {130, 5, 3.0f}}};
        for (const std::vector<ParamScale>& runs : bad) {
            try {
                gpu.scale_params(runs);
            } catch (const std::invalid_argument&) { refused++; }
        }
        gpu.get_params(after.data());
        ck.expect(refused == (int)bad.size() && after == before, "bad runs: %d of %zu refused, parameters unchanged",
                  refused, bad.size());
    } catch (const std::exception& e) {
        ck.failures++;
        std::printf("  FAIL threw: %s\n", e.what());
    }
    if (ck.failures) {
        std::printf("test_cuda_param_scale: %d check(s) FAILED\n", ck.failures);
        return 1;
    }
    std::printf("test_cuda_param_scale: all checks passed\n");
    return 0;
}
