// GPU test of KV-cached generation on the CUDA backend (llmc/cuda/gpt2_cuda_decode.cuh kv_begin / kv_forward,
// llmc/cuda/attention_decode.cuh), reached as the programs reach it: through llmc/cuda/backend_entry.h
// and the programs' compiled kernels (the Makefile's BACKEND_ENTRY_TESTS). Fresh random weights (GPT-2
// init with every LayerNorm parameter and bias perturbed, perturb_norms_and_biases; final LayerNorm gain
// x5 so the output distribution has clear winners) and random prompts each
// run, on several configurations (LS, MHSA, all-local, QK-norm, soft-cap, untied head, P >= T, B =
// 1..3, a model without biases and with the erf GELU). Three models run in lockstep: the GPU with its cache, the GPU with full uncached forward
// passes (the reference the cache must reproduce) and the CPU fp32 Gpt2Cpu with its cache (itself
// bit-identical to the CPU full forward, test/test_kv_cache.cpp). Every step feeds all three the greedy
// token of the GPU uncached path (teacher forcing), so a disagreement at one step cannot derail the
// later ones.
//
// Checks (logits compared over the real vocabulary [0, V) only):
//   - prefill logits with KvLogits::All == forward() logits bit for bit (a prefill IS the ordinary
//     forward); with KvLogits::Last (B, Vp) vs forward()'s last row of each sequence and vs the CPU's
//     Last prefill, rel. error <= kTol (its LM head runs over B rows, as a decode step's), and
//     logits() refuses after it;
//   - emulated build only: the matmul FLOPs of a prefill (the emulated cuBLASLt counts 2 m n k per
//     call) are, with Last, the layers' over B*n rows but the last layer's attproj, fc and fcproj over
//     B rows, plus the LM head's over B rows; with All, every layer's and the LM head's over B*n rows;
//     and a Last prefill plans no (B, n, Vp) logits: the emulated device memory grows by at least
//     their bytes when an All prefill of the same shape follows;
//   - per decode step: rel. error ||cached - uncached|| / ||uncached|| <= kTol (GPU vs GPU) and
//     ||gpu cached - cpu cached|| / ||cpu|| <= kTol (the GPU decode path, incl. the decode attention,
//     against the CPU one);
//   - TOKEN RULE: in bf16 the cached and uncached paths do not run the same arithmetic per row
//     (cuBLASLt may pick another algorithm for B rows than for B*T; the decode attention sums keys in
//     another order than the training kernel), so logits agree only to bf16 noise. A row's greedy
//     token must be identical whenever the uncached row's top-2 margin exceeds 2 * max_v |cached_v -
//     uncached_v| (then no noise of that size can swap them); rows below that are "unclear" and only
//     counted. At least half the rows must be clear, so the rule cannot pass vacuously.
//   - the cache contents (k after QK-norm, v; global slots < pos, local ring slots) vs the CPU
//     cache, rel. error <= kTol, after the prefill and after the last step (rings wrapped);
//   - appending several positions at once after a prefill == one at a time (bit for bit: same ops),
//     every position (All) and the last one (Last);
//   - llmc::generate() greedy with the cache == without it (window sliding past max_len included)
//     up to the first differing token, which is allowed only where the uncached row's top-2 margin is
//     below 4 * kTol * rms(row) (an unclear step by the bf16 noise scale); kv_cache_bytes() follows
//     the formula of docs/generation.md with 2-byte (bf16) or 4-byte (fp32) elements;
//   - decode steps as CUDA graphs (use_step_graph), also of programmatic launches (use_programmatic_launch,
//     --pdl 1), == issued eagerly, bit for bit, over positions
//     crossing a split depth of the decode attention and several appended at once; emulated: a graph
//     launch per step but the first of each depth (eager), a capture per depth, back-to-back steps
//     waiting for each other's page-locked input;
//   - errors: kv_forward before kv_begin, past max_len, bad tokens, bad kv_begin arguments;
//   - with NCCL (USE_NCCL): all_reduce_grads through a one-rank NcclCollective leaves the device
//     gradients unchanged (the in-place device path; the multi-rank logic is tested on the CPU).
// kTol: bf16 2e-2 (as test_cuda_model.cu: ~10 chained bf16 ops per layer), fp32 build 1e-4.
// Needs a GPU: without one, one line and exit 1. Exit 0 = every check passed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/cuda/backend_entry.h"
#ifdef USE_NCCL
#include "llmc/cuda/collective_nccl.cuh"
#endif
#include "llmc/core/error.h"
#include "llmc/core/init.h"
#include "llmc/core/params.h"
#include "llmc/core/rng.h"
#include "llmc/text/sampler.h"
#include "test/gpu/gpu_test_util.cuh"
#ifdef LLMC_EMULATE
#include "dev/emu/device_state.h"
#endif

namespace {

// The build's precision is read at run time, so this unit reads no ENABLE_* macro (Makefile: one
// compile for both builds).
const double kTol = std::strcmp(llmc::cuda_backend::precision_name(), "fp32") == 0 ? 1e-4 : 2e-2;

using gpu_test::Checks;

struct Case {
    const char* name;
    int L, NH, C, G, P, maxT, V;
    bool qk_norm;
    float softcap;
    bool tied;
    int B, prompt, steps;
    bool bias = true;                    // ModelConfig::bias
    llmc::Gelu gelu = llmc::Gelu::Tanh;  // ModelConfig::gelu
    bool fused = false;                  // the cached GPU's decode steps with use_fused_decode (--fused-decode 1)
};
const Case kCases[] = {
    {"LS G=1 P=4 hd=32", 2, 4, 128, 1, 4, 64, 300, false, 0.0f, true, 2, 7, 20},
    {"MHSA G=NH hd=64", 2, 2, 128, 2, 8, 64, 256, false, 0.0f, true, 1, 5, 20},
    {"all-local G=0 P=3 qk-norm softcap untied", 2, 4, 128, 0, 3, 48, 300, true, 5.0f, false, 3, 4, 20},
    {"P>=T qk-norm B=2", 1, 4, 128, 1, 100, 40, 200, true, 0.0f, true, 2, 9, 16},
    {"no bias, erf GELU, LS G=1 P=4 qk-norm untied", 2, 4, 128, 1, 4, 64, 300, true, 0.0f, false, 2, 6, 16, false,
     llmc::Gelu::Erf},
    // the same checks with the fused decode kernels (llmc/cuda/decode_linear.cuh)
    {"fused decode: LS G=1 P=4 hd=32", 2, 4, 128, 1, 4, 64, 300, false, 0.0f, true, 2, 7, 20, true, llmc::Gelu::Tanh,
     true},
    {"fused decode: all-local G=0 P=3 qk-norm softcap untied", 2, 4, 128, 0, 3, 48, 300, true, 5.0f, false, 3, 4, 20,
     true, llmc::Gelu::Tanh, true},
    {"fused decode: no bias, erf GELU, LS G=1 P=4 qk-norm untied", 2, 4, 128, 1, 4, 64, 300, true, 0.0f, false, 2, 6,
     16, false, llmc::Gelu::Erf, true},
};

llmc::ModelConfig make_config(const Case& c) {
    return gpu_test::with_bias_gelu(
        gpu_test::model_config(c.L, c.C, c.NH, c.G, c.P, c.V, c.maxT, c.qk_norm, c.softcap, c.tied), c.bias, c.gelu);
}

// Rows (count, each V real entries) out of logits laid out with row stride Vp.
std::vector<float> real_rows(const float* logits, size_t count, int V, int Vp) {
    std::vector<float> out(count * V);
    for (size_t r = 0; r < count; r++) std::copy(logits + r * Vp, logits + r * Vp + V, out.begin() + r * V);
    return out;
}

struct Top2 {
    int arg;
    float margin;
};
Top2 top2(const float* row, int V) {  // first index of the max (as sample_token's greedy), max - second
    int best = 0;
    for (int i = 1; i < V; i++) best = row[i] > row[best] ? i : best;
    float second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != best) second = std::max(second, row[i]);
    return {best, row[best] - second};
}

template <typename E, typename F>
bool throws(F&& f) {
    try {
        f();
    } catch (const E&) { return true; } catch (...) {
        return false;
    }
    return false;
}

// The CUDA cache (floatX, copied to the host as fp32) vs the CPU cache (fp32), over the slots that
// hold positions < pos; infinite where a buffer's size differs from the CPU's.
double cache_rel_err(const llmc::Backend& gpu, const llmc::cpu::KvCache<float>& cpu) {
    const llmc::cuda_backend::KvCacheContents v = llmc::cuda_backend::kv_cache_contents(gpu);
    const int pos = v.position;
    double num = 0.0, den = 0.0;
    auto part = [&](const std::vector<float>& got, const std::vector<float>& ref, bool local) {
        if (got.size() != ref.size()) {
            num = INFINITY;
            return;
        }
        const int slots = local ? v.ring : v.max_len;
        const int valid = local ? std::min(pos, v.ring) : pos;  // a ring is filled from slot 0 in order
        for (size_t i = 0; i < ref.size(); i++) {
            const int slot = (int)((i / v.hd) % slots);
            if (slot >= valid) continue;
            const double g = got[i];
            if (!std::isfinite(g)) {
                num = INFINITY;
                continue;
            }
            num += (g - ref[i]) * (g - ref[i]);
            den += (double)ref[i] * ref[i];
        }
    };
    part(v.k_global, cpu.k_global, false);
    part(v.v_global, cpu.v_global, false);
    part(v.k_local, cpu.k_local, true);
    part(v.v_local, cpu.v_local, true);
    return std::sqrt(num / std::max(den, 1e-30));
}

// GPT-2's init sets every LayerNorm gain to 1 and every bias to 0, so a LayerNorm's or a bias's
// parameters used in another layer's place, or not at all, would pass unseen: every parameter at exactly
// 0 or 1 gets N(0, 0.1) noise added (the matmul weights, drawn from a normal, are never exactly either).
void perturb_norms_and_biases(std::vector<float>& params, uint64_t seed) {
    std::mt19937_64 gen(seed ^ 0x5eedULL);
    std::normal_distribution<float> nd(0.0f, 0.1f);
    for (float& p : params)
        if (p == 0.0f || p == 1.0f) p += nd(gen);
}

// A CUDA backend (llmc/cuda/backend_entry.h: the programs' compiled kernels) with weights from seed.
std::unique_ptr<llmc::Backend> make_gpu(const llmc::ModelConfig& cfg, uint64_t seed) {
    return llmc::cuda_backend::create(cfg, seed);
}

// The first case's model on a CUDA backend with weights from seed, for a section of checks whose
// heading it prints.
struct SectionModel {
    llmc::ModelConfig cfg;
    std::unique_ptr<llmc::Backend> backend;
};
SectionModel section_model(const char* heading, uint64_t seed) {
    std::printf("%s\n", heading);
    const llmc::ModelConfig cfg = make_config(kCases[0]);
    return {cfg, make_gpu(cfg, seed)};
}

void check_case(const Case& cs, uint64_t seed, Checks& ck) {
    std::printf("%s (seed %llu)\n", cs.name, (unsigned long long)seed);
    const llmc::ModelConfig cfg = make_config(cs);
    const llmc::ParamLayout layout = llmc::param_layout(cfg);
    std::vector<float> params = llmc::init_params(cfg, seed);
    perturb_norms_and_biases(params, seed);
    for (size_t i = 0; i < layout.size[llmc::P_LNFW]; i++) params[layout.offset[llmc::P_LNFW] + i] *= 5.0f;
    const int B = cs.B, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;

    const auto gpu_cached = make_gpu(cfg, 0);
    llmc::Backend& gpu = *gpu_cached;
    gpu.set_params(params.data());
    if (cs.fused) gpu.use_fused_decode(true);
    const auto gpu_uncached = make_gpu(cfg, 0);  // uncached full forwards
    llmc::Backend& gpu_ref = *gpu_uncached;
    gpu_ref.set_params(params.data());
    llmc::cpu::Gpt2Cpu<float> cpu(cfg);  // cached, fp32
    cpu.set_params(params.data());

    std::mt19937_64 gen(seed);
    std::vector<std::vector<int>> seqs(B);  // the context of each sequence
    for (auto& s : seqs)
        for (int t = 0; t < cs.prompt; t++) s.push_back((int)(gen() % (uint64_t)V));
    auto flat = [&](int from, int len) {  // (B, len) tokens [from, from+len) of every sequence
        std::vector<int> out;
        for (auto& s : seqs) out.insert(out.end(), s.begin() + from, s.begin() + from + len);
        return out;
    };

    // prefill of the last rows only: close to forward()'s last rows and to the CPU's
    const int maxlen = cfg.max_seq_len;
    std::vector<int> prompt = flat(0, cs.prompt);
    gpu_ref.forward(prompt.data(), nullptr, B, cs.prompt, 0.0f, nullptr);
    const std::vector<float> pre_ref = real_rows(gpu_ref.logits(), (size_t)B * cs.prompt, V, Vp);
    {
        gpu.kv_begin(B, maxlen);
        cpu.kv_begin(B, maxlen);
        const std::vector<float> last =
            real_rows(gpu.kv_forward(prompt.data(), cs.prompt, llmc::KvLogits::Last), B, V, Vp);
        const std::vector<float> last_cpu =
            real_rows(cpu.kv_forward(prompt.data(), cs.prompt, llmc::KvLogits::Last), B, V, Vp);
        std::vector<float> ref_last((size_t)B * V);
        for (int b = 0; b < B; b++)
            std::copy_n(pre_ref.begin() + ((size_t)b * cs.prompt + cs.prompt - 1) * V, V,
                        ref_last.begin() + (size_t)b * V);
        size_t same = 0;
        for (size_t i = 0; i < last.size(); i++) same += last[i] == ref_last[i];
        const double e_ref = gpu_test::rel_error(last.data(), ref_last.data(), last.size());
        const double e_cpu = gpu_test::rel_error(last.data(), last_cpu.data(), last.size());
        ck.expect(e_ref <= kTol,
                  "Last prefill (B, Vp) vs forward()'s last rows: rel err %.2e <= %.0e (%zu of %zu equal)", e_ref, kTol,
                  same, last.size());
        ck.expect(e_cpu <= kTol, "Last prefill vs the CPU's Last prefill: rel err %.2e <= %.0e", e_cpu, kTol);
        ck.expect(throws<std::logic_error>([&] { gpu.logits(); }), "logits() after a Last prefill: logic_error");
        const double e_cache = cache_rel_err(gpu, cpu.kv_cache());
        ck.expect(e_cache <= kTol, "cache after a Last prefill vs CPU cache: rel err %.2e <= %.0e", e_cache, kTol);
    }

    // prefill of every row: the cached path's logits are forward()'s, bit for bit
    gpu.kv_begin(B, maxlen);
    cpu.kv_begin(B, maxlen);
    const std::vector<float> pre =
        real_rows(gpu.kv_forward(prompt.data(), cs.prompt, llmc::KvLogits::All), (size_t)B * cs.prompt, V, Vp);
    const std::vector<float> pre_cpu =
        real_rows(cpu.kv_forward(prompt.data(), cs.prompt, llmc::KvLogits::All), (size_t)B * cs.prompt, V, Vp);
    size_t diff = 0;
    for (size_t i = 0; i < pre.size(); i++) diff += !(pre[i] == pre_ref[i]);  // NaN never equal
    ck.expect(diff == 0, "prefill logits == forward() bit for bit (%zu of %zu differ)", diff, pre.size());
    const double e_pre_cpu = gpu_test::rel_error(pre.data(), pre_cpu.data(), pre.size());
    ck.expect(e_pre_cpu <= kTol, "prefill logits vs CPU: rel err %.2e <= %.0e", e_pre_cpu, kTol);
    const double e_cache0 = cache_rel_err(gpu, cpu.kv_cache());
    ck.expect(e_cache0 <= kTol, "cache after prefill vs CPU cache: rel err %.2e <= %.0e", e_cache0, kTol);

    // decode steps, teacher-forced by the uncached path's greedy tokens
    std::vector<int> next(B);
    for (int b = 0; b < B; b++) next[b] = top2(pre_ref.data() + ((size_t)b * cs.prompt + cs.prompt - 1) * V, V).arg;
    double worst_gg = 0.0, worst_gc = 0.0;
    int clear = 0, unclear = 0, wrong = 0;
    for (int s = 0; s < cs.steps; s++) {
        for (int b = 0; b < B; b++) seqs[b].push_back(next[b]);
        const int len = (int)seqs[0].size();
        const std::vector<float> cached = real_rows(gpu.kv_forward(next.data(), 1, llmc::KvLogits::Last), B, V, Vp);
        const std::vector<float> cached_cpu = real_rows(cpu.kv_forward(next.data(), 1, llmc::KvLogits::Last), B, V, Vp);
        const std::vector<int> ctx = flat(0, len);
        gpu_ref.forward(ctx.data(), nullptr, B, len, 0.0f, nullptr);
        std::vector<float> ref(B * (size_t)V);
        for (int b = 0; b < B; b++) {
            const float* row = gpu_ref.logits() + ((size_t)b * len + len - 1) * Vp;
            std::copy(row, row + V, ref.begin() + (size_t)b * V);
        }
        worst_gg = std::max(worst_gg, gpu_test::rel_error(cached.data(), ref.data(), ref.size()));
        worst_gc = std::max(worst_gc, gpu_test::rel_error(cached.data(), cached_cpu.data(), ref.size()));
        for (int b = 0; b < B; b++) {
            const float* r = ref.data() + (size_t)b * V;
            const float* c = cached.data() + (size_t)b * V;
            float maxdiff = 0.0f;
            for (int v = 0; v < V; v++) maxdiff = std::max(maxdiff, std::fabs(c[v] - r[v]));
            const Top2 tr = top2(r, V), tc = top2(c, V);
            if (tr.margin > 2.0f * maxdiff) {
                clear++;
                wrong += tr.arg != tc.arg;
            } else {
                unclear++;
            }
            next[b] = tr.arg;
        }
    }
    ck.expect(worst_gg <= kTol, "decode: GPU cached vs GPU uncached logits, worst step rel err %.2e <= %.0e", worst_gg,
              kTol);
    ck.expect(worst_gc <= kTol, "decode: GPU cached vs CPU cached logits, worst step rel err %.2e <= %.0e", worst_gc,
              kTol);
    ck.expect(wrong == 0 && clear * 2 >= clear + unclear,
              "greedy tokens: %d clear rows, %d differ (must be 0); %d unclear rows (need clear >= half)", clear, wrong,
              unclear);
    const double e_cache1 = cache_rel_err(gpu, cpu.kv_cache());
    ck.expect(e_cache1 <= kTol, "cache after %d steps (rings wrapped) vs CPU cache: rel err %.2e <= %.0e", cs.steps,
              e_cache1, kTol);

    // several positions appended at once after a prefill == the same positions one at a time
    {
        const int k = 4;
        const std::vector<int> head = flat(0, cs.prompt), tail = flat(cs.prompt, k);
        gpu.kv_begin(B, maxlen);
        gpu.kv_forward(head.data(), cs.prompt, llmc::KvLogits::Last);
        const std::vector<float> many =
            real_rows(gpu.kv_forward(tail.data(), k, llmc::KvLogits::All), (size_t)B * k, V, Vp);
        gpu.kv_begin(B, maxlen);
        gpu.kv_forward(head.data(), cs.prompt, llmc::KvLogits::Last);
        const std::vector<float> many_last = real_rows(gpu.kv_forward(tail.data(), k, llmc::KvLogits::Last), B, V, Vp);
        gpu.kv_begin(B, maxlen);
        gpu.kv_forward(head.data(), cs.prompt, llmc::KvLogits::Last);
        std::vector<float> one((size_t)B * k * V);
        for (int i = 0; i < k; i++) {
            std::vector<int> col(B);
            for (int b = 0; b < B; b++) col[b] = tail[(size_t)b * k + i];
            const float* lg = gpu.kv_forward(col.data(), 1, llmc::KvLogits::Last);
            for (int b = 0; b < B; b++)
                std::copy(lg + (size_t)b * Vp, lg + (size_t)b * Vp + V, one.begin() + ((size_t)b * k + i) * V);
        }
        size_t d = 0, d_last = 0;
        for (size_t i = 0; i < one.size(); i++) d += !(one[i] == many[i]);
        for (int b = 0; b < B; b++)
            for (int v = 0; v < V; v++)
                d_last += !(one[((size_t)b * k + k - 1) * V + v] == many_last[(size_t)b * V + v]);
        ck.expect(d == 0, "kv_forward(n=%d, All) after a prefill == %d single steps bit for bit (%zu differ)", k, k, d);
        ck.expect(d_last == 0,
                  "kv_forward(n=%d, Last) after a prefill == the last single step bit for bit (%zu differ)", k, d_last);
    }

    // kv_cache_bytes: 2 * L * B * hd * (G * max_len + (NH-G) * min(P, max_len)) * element bytes (bf16 2, fp32 4)
    {
        const size_t elem = std::string(llmc::cuda_backend::precision_name()) == "bf16" ? 2 : 4;
        const int ml = std::max(1, maxlen / 2);
        gpu.kv_begin(B, ml);
        const size_t want =
            2ull * cfg.num_layers * B * cfg.head_size() *
            ((size_t)cfg.global_heads * ml + (size_t)(cfg.num_heads - cfg.global_heads) * std::min(cfg.window, ml)) *
            elem;
        ck.expect(gpu.kv_cache_bytes() == want, "kv_cache_bytes %zu == formula %zu (max_len %d)", gpu.kv_cache_bytes(),
                  want, ml);
    }
}

// llmc::generate() greedy, cached vs uncached on the same GPU backend, with the context window
// sliding (max_len < prompt + n). Tokens equal up to the first difference, which must be unclear.
void check_generate(Checks& ck, uint64_t seed) {
    const Case cs = kCases[0];
    std::printf("generate() greedy, cached vs --no-cache, window sliding (seed %llu)\n", (unsigned long long)seed);
    const llmc::ModelConfig cfg = make_config(cs);
    const llmc::ParamLayout layout = llmc::param_layout(cfg);
    std::vector<float> params = llmc::init_params(cfg, seed);
    perturb_norms_and_biases(params, seed);
    for (size_t i = 0; i < layout.size[llmc::P_LNFW]; i++) params[layout.offset[llmc::P_LNFW] + i] *= 5.0f;
    const auto gpu_backend = make_gpu(cfg, 0);
    llmc::Backend& gpu = *gpu_backend;
    gpu.set_params(params.data());
    std::mt19937_64 gen(seed);
    std::vector<int> prompt(5);
    for (int& t : prompt) t = (int)(gen() % (uint64_t)cfg.vocab_size);
    const int n = 30, max_len = 24;
    llmc::Rng r1(1), r2(1);
    llmc::GenerateOptions cached, uncached;
    uncached.use_cache = false;
    const std::vector<int> a = llmc::generate(gpu, prompt, n, max_len, 0.0f, r1, cached);
    const std::vector<int> b = llmc::generate(gpu, prompt, n, max_len, 0.0f, r2, uncached);
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if (a[i] != b[i]) first = i;
    if (first < 0) {
        ck.expect(true, "generate(): %d greedy tokens identical with and without the cache", n);
        return;
    }
    // the context both paths saw at step `first`: prompt + b[0..first), newest max_len tokens
    std::vector<int> ctx = prompt;
    ctx.insert(ctx.end(), b.begin(), b.begin() + first);
    if ((int)ctx.size() > max_len) ctx.erase(ctx.begin(), ctx.end() - max_len);
    gpu.forward(ctx.data(), nullptr, 1, (int)ctx.size(), 0.0f, nullptr);
    const float* row = gpu.logits() + (ctx.size() - 1) * cfg.padded_vocab_size;
    double ss = 0.0;
    for (int v = 0; v < cfg.vocab_size; v++) ss += (double)row[v] * row[v];
    const double rms = std::sqrt(ss / cfg.vocab_size);
    const Top2 t = top2(row, cfg.vocab_size);
    ck.expect(t.margin < 4.0 * kTol * rms,
              "generate(): tokens identical for %d steps; step %d differs with top-2 margin %.3g (allowed only if < "
              "4*kTol*rms = %.3g)",
              first, first, t.margin, 4.0 * kTol * rms);
}

void check_errors(Checks& ck) {
    const SectionModel m = section_model("errors", 1);
    const llmc::ModelConfig& cfg = m.cfg;
    llmc::Backend& gpu = *m.backend;
    int tok[4] = {1, 2, 3, 4};
    const llmc::KvLogits last = llmc::KvLogits::Last;
    ck.expect(throws<std::logic_error>([&] { gpu.kv_forward(tok, 1, last); }),
              "kv_forward before kv_begin: logic_error");
    ck.expect(throws<llmc::InputError>([&] { gpu.kv_begin(0, 8); }), "kv_begin(B=0): InputError");
    ck.expect(throws<llmc::InputError>([&] { gpu.kv_begin(1, cfg.max_seq_len + 1); }),
              "kv_begin(max_len > maxT): InputError");
    gpu.kv_begin(1, 3);
    ck.expect(throws<llmc::InputError>([&] { gpu.kv_forward(tok, 4, last); }),
              "4 positions into a cache of 3: InputError");
    int bad = cfg.vocab_size;
    ck.expect(throws<llmc::InputError>([&] { gpu.kv_forward(&bad, 1, last); }), "token >= V: InputError");
    ck.expect(throws<llmc::InputError>([&] { gpu.kv_forward(tok, 0, last); }), "n = 0: InputError");
    gpu.use_fused_decode(true);
    ck.expect(throws<llmc::InputError>([&] { gpu.kv_begin(9, 8); }),
              "--fused-decode 1 refuses a cache of 9 sequences: InputError");
    gpu.kv_begin(9 - 1, 4);
    gpu.use_fused_decode(false);
    gpu.kv_begin(9, 4);
    ck.expect(throws<llmc::InputError>([&] { gpu.use_fused_decode(true); }),
              "--fused-decode 1 after a cache of 9 sequences began: InputError");
    gpu.kv_begin(1, 3);
    gpu.kv_forward(tok, 3, last);
    ck.expect(llmc::cuda_backend::kv_cache_contents(gpu).position == 3 &&
                  throws<llmc::InputError>([&] { gpu.kv_forward(tok, 1, last); }),
              "a full cache refuses one more position: InputError");
}

#ifdef LLMC_EMULATE
// The matmul FLOPs of one prefill of (B, n) as the emulated cuBLASLt counts them (2 m n k per call,
// dev/emu/step_counters.h), against the model's GEMMs: per layer qkv (3C x C), attproj (C x C), fc
// (4C x C) and fcproj (C x 4C) over the B*n rows (with Last, the last layer's attproj, fc and fcproj
// over the B last rows only), then the LM head (Vp x C) over the rows asked for.
void check_prefill_flops(Checks& ck) {
    const SectionModel m = section_model("prefill matmul FLOPs (emulated cuBLASLt counts)", 4);
    const llmc::ModelConfig& cfg = m.cfg;
    llmc::Backend& gpu = *m.backend;
    const int B = 2, n = 24;
    const uint64_t L = cfg.num_layers, C = cfg.channels, Vp = cfg.padded_vocab_size, rows = (uint64_t)B * n;
    const uint64_t layers = 2 * rows * L * 12 * C * C;  // All: every layer over B*n rows
    // Last: the last layer's attproj, fc and fcproj (9 C^2 of its 12) over B rows
    const uint64_t layers_last = layers - 2 * (rows - B) * 9 * C * C;
    std::vector<int> tok((size_t)B * n);
    for (size_t i = 0; i < tok.size(); i++) tok[i] = (int)((i * 7919) % (size_t)cfg.vocab_size);
    auto flops = [] { return llmc::emu::device().counters.totals().matmul_flops; };
    struct Run {
        const char* what;
        uint64_t layers, head_rows;
        std::function<void()> prefill;
    };
    const Run runs[] = {
        {"kv_forward(Last)", layers_last, (uint64_t)B, [&] { gpu.kv_forward(tok.data(), n, llmc::KvLogits::Last); }},
        {"kv_prefill_device", layers_last, (uint64_t)B, [&] { gpu.kv_prefill_device(tok.data(), n); }},
        {"kv_forward(All)", layers, rows, [&] { gpu.kv_forward(tok.data(), n, llmc::KvLogits::All); }},
    };
    for (const Run& r : runs) {
        gpu.kv_begin(B, n);
        const uint64_t before = flops();
        r.prefill();
        const uint64_t got = flops() - before, want = r.layers + 2 * r.head_rows * C * Vp;
        ck.expect(got == want, "%s: %llu matmul FLOPs == layers %llu + LM head over %llu rows %llu", r.what,
                  (unsigned long long)got, (unsigned long long)r.layers, (unsigned long long)r.head_rows,
                  (unsigned long long)(want - r.layers));
    }
}

// A Last prefill plans no (B, n, Vp) logits: on a fresh backend, the emulated device memory in use
// after it grows by at least the logits' bytes when an All prefill of the same shape follows.
void check_prefill_memory(Checks& ck) {
    const SectionModel m = section_model("prefill device memory (emulated allocations)", 5);
    llmc::Backend& gpu = *m.backend;
    const int B = 2, n = 40;
    std::vector<int> tok((size_t)B * n);
    for (size_t i = 0; i < tok.size(); i++) tok[i] = (int)((i * 7919) % (size_t)m.cfg.vocab_size);
    gpu.kv_begin(B, n);
    gpu.kv_forward(tok.data(), n, llmc::KvLogits::Last);
    const size_t last = gpu.device_memory_used();
    gpu.kv_begin(B, n);
    gpu.kv_forward(tok.data(), n, llmc::KvLogits::All);
    const size_t all = gpu.device_memory_used();
    const size_t elem = std::string(llmc::cuda_backend::precision_name()) == "bf16" ? 2 : 4;
    const size_t logits = (size_t)B * n * m.cfg.padded_vocab_size * elem;
    ck.expect(all >= last + logits,
              "device memory after a Last prefill %zu B, after an All prefill %zu B: grown by %zd >= the (B, n, Vp) "
              "logits %zu B",
              last, all, (ptrdiff_t)(all - last), logits);
}
#endif

// The prefill's last rows and the decode steps as CUDA graphs (use_step_graph(true)), as graphs of
// programmatic launches (use_programmatic_launch(true), --pdl 1) and as programmatic launches issued
// eagerly == the same steps issued eagerly, bit for bit:
// positions 120..135 one at a time after a prefill of 120 (crossing the decode attention's split depth
// at 128 keys), then 136..143 appended in one kv_forward (steps issued back to back), on a model with a
// global head and on an all-local one whose window spans two splits. Emulated build: the first step of
// each depth runs eagerly and the second captures, so 22 of the 24 steps are graph launches and there
// are two captures (none eagerly); and the back-to-back steps wait for each other's page-locked input
// (at least 7 stream synchronisations in the 8-position call, with graphs as without).
void check_decode_graph(Checks& ck, uint64_t seed) {
    struct Model {
        const char* name;
        int G, P;
    };
    for (const Model& md : {Model{"LS G=1 P=4", 1, 4}, Model{"all-local G=0 P=130", 0, 130}}) {
        std::printf("decode steps as CUDA graphs vs eager, %s (seed %llu)\n", md.name, (unsigned long long)seed);
        const int B = 2, len = 144, prompt = 120, single = 16, together = len - prompt - single;
        const llmc::ModelConfig cfg = gpu_test::model_config(2, 64, 2, md.G, md.P, 97, len, false, 0.0f, true);
        const auto backend = make_gpu(cfg, seed);
        llmc::Backend& gpu = *backend;
        std::vector<float> params = llmc::init_params(cfg, seed);
        perturb_norms_and_biases(params, seed);
        gpu.set_params(params.data());
        const int V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
        std::mt19937_64 gen(seed);
        std::vector<int> tokens((size_t)B * len);  // the prompt (B, prompt), then each single step's (B)
        for (int& x : tokens) x = (int)(gen() % (uint64_t)V);
        std::vector<int> tail((size_t)B * together);  // (B, together) appended in one call
        for (int& x : tail) x = (int)(gen() % (uint64_t)V);
        struct Counts {
            uint64_t launches = 0, captures = 0, tail_syncs = 0, kernels = 0, programmatic = 0, matmuls = 0, fused = 0;
        };
        auto run = [&](bool graph, bool pdl, Counts& counts, bool fused = false) {
            gpu.use_programmatic_launch(pdl);
            gpu.use_step_graph(graph);
            gpu.use_fused_decode(fused);
            gpu.kv_begin(B, len);
            // the prefill's last rows first, then each decode step's
            std::vector<float> out = real_rows(gpu.kv_forward(tokens.data(), prompt, llmc::KvLogits::Last), B, V, Vp);
#ifdef LLMC_EMULATE
            auto totals = [] { return llmc::emu::device().counters.totals(); };
            const llmc::emu::IntervalCounts before = totals();
#endif
            for (int s = 0; s < single; s++) {
                const float* lg = gpu.kv_forward(tokens.data() + (size_t)B * (prompt + s), 1, llmc::KvLogits::Last);
                const std::vector<float> rows = real_rows(lg, B, V, Vp);
                out.insert(out.end(), rows.begin(), rows.end());
            }
#ifdef LLMC_EMULATE
            const uint64_t syncs_before = totals().syncs["cudaStreamSynchronize"];
#endif
            const std::vector<float> rows =
                real_rows(gpu.kv_forward(tail.data(), together, llmc::KvLogits::Last), B, V, Vp);
            out.insert(out.end(), rows.begin(), rows.end());
#ifdef LLMC_EMULATE
            llmc::emu::IntervalCounts after = totals();
            uint64_t kernels = 0, fused_kernels = 0;
            for (const auto& [name, n] : after.kernels) {
                const auto was = before.kernels.find(name);
                const uint64_t d = n - (was == before.kernels.end() ? 0 : was->second);
                kernels += d;
                if (name.find("decode_linear") != std::string::npos) fused_kernels += d;
            }
            counts = {after.graph_launches - before.graph_launches,
                      after.graph_instantiations - before.graph_instantiations,
                      after.syncs["cudaStreamSynchronize"] - syncs_before,
                      kernels,
                      after.programmatic_launches - before.programmatic_launches,
                      after.matmuls - before.matmuls,
                      fused_kernels};
#else
            (void)counts;
#endif
            return out;
        };
        Counts eager_counts, graph_counts, pdl_counts, pdl_eager_counts;
        const std::vector<float> eager = run(false, false, eager_counts);
        const std::vector<float> graphed = run(true, false, graph_counts);
        const std::vector<float> pdl = run(true, true, pdl_counts);               // graphs of programmatic launches
        const std::vector<float> pdl_eager = run(false, true, pdl_eager_counts);  // programmatic, issued eagerly
        Counts fused_eager_counts, fused_graph_counts, fused_pdl_counts, fused_pdl_eager_counts;
        const std::vector<float> fused_eager = run(false, false, fused_eager_counts, true);  // --fused-decode 1
        const std::vector<float> fused_graphed = run(true, false, fused_graph_counts, true);
        const std::vector<float> fused_pdl = run(true, true, fused_pdl_counts, true);
        const std::vector<float> fused_pdl_eager = run(false, true, fused_pdl_eager_counts, true);
        gpu.use_step_graph(false);
        gpu.use_programmatic_launch(false);
        gpu.use_fused_decode(false);
        for (const auto& [what, got] :
             {std::make_pair("graphs", &fused_graphed), std::make_pair("graphs with --pdl 1", &fused_pdl),
              std::make_pair("eager with --pdl 1", &fused_pdl_eager)}) {
            size_t differ = 0;
            for (size_t i = 0; i < fused_eager.size(); i++)
                differ += !(fused_eager[i] == (*got)[i]) || std::isnan(fused_eager[i]);
            ck.expect(differ == 0, "--fused-decode 1: decode steps as %s == eager bit for bit (%zu logits differ)",
                      what, differ);
        }
        const double e_fused = gpu_test::rel_error(fused_eager.data(), eager.data(), eager.size());
        ck.expect(e_fused <= kTol / 2, "--fused-decode 1 vs cuBLASLt's decode steps: rel err %.2e <= %.0e", e_fused,
                  kTol / 2);
        for (const auto& [what, got] : {std::make_pair("graphs", &graphed), std::make_pair("graphs with --pdl 1", &pdl),
                                        std::make_pair("eager with --pdl 1", &pdl_eager)}) {
            size_t differ = 0;
            int first = -1;
            for (size_t i = 0; i < eager.size(); i++)
                if (!(eager[i] == (*got)[i]) || std::isnan(eager[i])) {
                    differ++;
                    if (first < 0) first = prompt - 1 + (int)(i / ((size_t)B * V));  // the prefill's row: prompt - 1
                }
            ck.expect(differ == 0,
                      "decode steps as %s == eager bit for bit: positions %d..%d one at a time, then %d appended at "
                      "once (%zu logits differ, first at row of position %d)",
                      what, prompt, prompt + single - 1, together, differ, first);
        }
#ifdef LLMC_EMULATE
        const uint64_t steps = (uint64_t)(single + together);
        ck.expect(eager_counts.launches == 0 && eager_counts.captures == 0 && graph_counts.launches == steps - 2 &&
                      graph_counts.captures == 2,
                  "eager: %llu graph launches, %llu captures (0, 0); graphs: %llu launches (%llu steps less the first "
                  "of each depth), %llu captures (one per split depth, 2)",
                  (unsigned long long)eager_counts.launches, (unsigned long long)eager_counts.captures,
                  (unsigned long long)graph_counts.launches, (unsigned long long)steps,
                  (unsigned long long)graph_counts.captures);
        ck.expect(eager_counts.programmatic == 0 && graph_counts.programmatic == 0 && pdl_counts.kernels > 0 &&
                      pdl_counts.programmatic == pdl_counts.kernels && pdl_counts.launches == graph_counts.launches &&
                      pdl_eager_counts.kernels == eager_counts.kernels &&
                      pdl_eager_counts.programmatic == pdl_eager_counts.kernels && pdl_eager_counts.launches == 0,
                  "--pdl 1: every decode kernel launched programmatic (graphs %llu of %llu, eager %llu of %llu), none "
                  "without it (%llu, %llu); the same graph launches (%llu, %llu)",
                  (unsigned long long)pdl_counts.programmatic, (unsigned long long)pdl_counts.kernels,
                  (unsigned long long)pdl_eager_counts.programmatic, (unsigned long long)pdl_eager_counts.kernels,
                  (unsigned long long)eager_counts.programmatic, (unsigned long long)graph_counts.programmatic,
                  (unsigned long long)pdl_counts.launches, (unsigned long long)graph_counts.launches);
        // a fused step: the encoder, per layer qkv (storing k and v: no QK-norm here), the attention in one
        // launch, attproj, fc, fcproj (4 decode_linear), then the LM head (decode_linear); no cuBLASLt call
        const uint64_t L = cfg.num_layers, fused_per_step = 4 * L + 1, kernels_per_step = 2 + 5 * L;
        ck.expect(fused_pdl_counts.kernels > 0 && fused_pdl_counts.programmatic == fused_pdl_counts.kernels &&
                      fused_pdl_eager_counts.programmatic == fused_pdl_eager_counts.kernels &&
                      fused_pdl_eager_counts.kernels == fused_eager_counts.kernels && fused_graph_counts.captures == 2,
                  "--fused-decode 1 with --pdl 1: every kernel launched programmatic (graphs %llu of %llu, eager %llu "
                  "of %llu); fused graphs captured once a split depth (%llu, 2)",
                  (unsigned long long)fused_pdl_counts.programmatic, (unsigned long long)fused_pdl_counts.kernels,
                  (unsigned long long)fused_pdl_eager_counts.programmatic,
                  (unsigned long long)fused_pdl_eager_counts.kernels, (unsigned long long)fused_graph_counts.captures);
        ck.expect(fused_eager_counts.matmuls == 0 && fused_eager_counts.fused == steps * fused_per_step &&
                      fused_eager_counts.kernels == steps * kernels_per_step && eager_counts.matmuls > 0 &&
                      fused_graph_counts.launches == graph_counts.launches,
                  "--fused-decode 1: %llu cuBLASLt calls (0; cuBLASLt's path %llu), %llu decode_linear launches (%llu "
                  "a step), %llu kernels (%llu a step), %llu graph launches (%llu)",
                  (unsigned long long)fused_eager_counts.matmuls, (unsigned long long)eager_counts.matmuls,
                  (unsigned long long)fused_eager_counts.fused, (unsigned long long)fused_per_step,
                  (unsigned long long)fused_eager_counts.kernels, (unsigned long long)kernels_per_step,
                  (unsigned long long)fused_graph_counts.launches, (unsigned long long)graph_counts.launches);
        ck.expect(
            eager_counts.tail_syncs >= (uint64_t)together - 1 && graph_counts.tail_syncs >= (uint64_t)together - 1,
            "%d positions appended at once wait for each step's input copy: %llu (eager), %llu (graphs) stream "
            "synchronisations >= %d",
            together, (unsigned long long)eager_counts.tail_syncs, (unsigned long long)graph_counts.tail_syncs,
            together - 1);
#endif
    }
}

#ifdef USE_NCCL
void check_all_reduce_grads(Checks& ck) {
    const SectionModel m = section_model("all_reduce_grads through a one-rank NcclCollective", 3);
    const llmc::ModelConfig& cfg = m.cfg;
    llmc::Backend& gpu = *m.backend;
    std::vector<int> x(2 * 16), y(2 * 16);
    std::mt19937 gen(std::random_device{}());
    for (size_t i = 0; i < x.size(); i++) {
        x[i] = (int)(gen() % cfg.vocab_size);
        y[i] = (int)(gen() % cfg.vocab_size);
    }
    gpu.zero_grad();
    gpu.forward(x.data(), y.data(), 2, 16, 0.0f, nullptr);
    gpu.backward(1.0f);
    std::vector<float> before(gpu.num_params()), after(gpu.num_params());
    gpu.get_grads(before.data());
    ncclUniqueId id;
    NCCL_CHECK(ncclGetUniqueId(&id));
    llmc::NcclCollective comm(0, 1, 0, id);
    gpu.all_reduce_grads(comm);
    gpu.get_grads(after.data());
    size_t d = 0, nonzero = 0;
    for (size_t i = 0; i < before.size(); i++) {
        d += !(before[i] == after[i]);
        nonzero += before[i] != 0.0f;
    }
    ck.expect(d == 0 && nonzero > 0,
              "gradients unchanged by a 1-rank device all-reduce (%zu of %zu differ, %zu nonzero)", d, before.size(),
              nonzero);
}
#endif

}  // namespace

int main() {
    if (!gpu_test::have_gpu("test_cuda_generate")) return 1;
    std::printf("test_cuda_generate: %s, build %s\n", llmc::cuda_backend::device_description().c_str(),
                llmc::cuda_backend::precision_name());
    Checks ck;
    std::random_device rd;
    try {
        for (const Case& c : kCases) check_case(c, ((uint64_t)rd() << 32) | rd(), ck);
        check_generate(ck, ((uint64_t)rd() << 32) | rd());
        check_errors(ck);
        check_decode_graph(ck, ((uint64_t)rd() << 32) | rd());
#ifdef LLMC_EMULATE
        check_prefill_flops(ck);
        check_prefill_memory(ck);
#endif
#ifdef USE_NCCL
        check_all_reduce_grads(ck);
#else
        std::printf("all_reduce_grads: built without NCCL; device path not checked\n");
#endif
    } catch (const std::exception& e) {
        std::printf("  FAIL exception: %s\n", e.what());
        ck.failures++;
    }
    std::printf("test_cuda_generate: %s (%d failed checks)\n", ck.failures ? "FAIL" : "PASS", ck.failures);
    return ck.failures ? 1 : 0;
}
