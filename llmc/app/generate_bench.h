// generate_gpt2_ls --bench: times the backend's KV cache with random tokens and prints one JSON
// object on stdout (dev/bench/generate_latency.py drives it; docs/generation.md). For each prompt
// length T of --bench-prompt, in the order given: the prefill of B prompts of length T
// (kv_prefill_device: the cache filled and the logits of each prompt's last position, as generation
// asks for them; median of --bench-repeats, after one warm-up); then for each context c: a fresh
// cache, a prefill of c - steps tokens (untimed), then `steps` decode steps of one token per
// sequence, each timed to the logits on the host (what sampling needs). --bench-profile: then the
// per-kernel profile (llmc/core/kernel_profile.h) of one more prefill of the last prompt length and
// of --bench-steps decode steps at the last context after two unprofiled ones (a decode step graph is
// captured at the second), outside the timings: the tables on stderr, their JSON in the object's
// "profile".
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "llmc/app/backends.h"
#include "llmc/app/generate_cli.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/kernel_profile.h"
#include "llmc/core/model_config.h"
#include "llmc/core/rng.h"

namespace llmc {
namespace bench {

using BenchClock = std::chrono::steady_clock;

inline double ms_since(BenchClock::time_point t0) {
    return std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count();
}

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

inline std::string json_list(const std::vector<double>& v) {
    std::string s = "[";
    char buf[32];
    for (size_t i = 0; i < v.size(); i++) {
        std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", v[i]);
        s += buf;
    }
    return s + "]";
}

}  // namespace bench

// The default --bench-prompt and --bench-contexts (not given) fitted to a model of a smaller max_seq_len:
// the prompt at most max_seq_len, the contexts those defaults that fit (above --bench-steps), else
// max_seq_len alone. Returns the note saying what was changed ("" when nothing was).
inline std::string fit_bench_defaults(GenerateConfig& g, const ModelConfig& mc) {
    std::string changed;
    if (!g.bench_prompt_given) {
        const std::vector<int> all = parse_length_list(g.bench_prompts, "--bench-prompt");
        if (*std::max_element(all.begin(), all.end()) > mc.max_seq_len) {
            changed += "--bench-prompt " + std::to_string(mc.max_seq_len) + " (default " + g.bench_prompts + ")";
            g.bench_prompts = std::to_string(mc.max_seq_len);
        }
    }
    if (!g.bench_contexts_given) {
        const std::vector<int> all = parse_length_list(g.bench_contexts, "--bench-contexts");
        std::string fit;
        for (int c : all)
            if (c <= mc.max_seq_len && c > g.bench_steps) fit += (fit.empty() ? "" : ",") + std::to_string(c);
        if (fit.empty()) fit = std::to_string(mc.max_seq_len);
        if (fit != g.bench_contexts) {
            changed += (changed.empty() ? "" : ", ") + std::string("--bench-contexts ") + fit + " (default " +
                       g.bench_contexts + ")";
            g.bench_contexts = fit;
        }
    }
    if (changed.empty()) return "";
    return "note: --bench: " + changed + ": the defaults exceed the model's max_seq_len " +
           std::to_string(mc.max_seq_len) + " (give the flags to choose)";
}

// The --bench-* flags against the model, before any model is built.
inline void check_bench_flags(const GenerateConfig& g, const ModelConfig& mc) {
    const std::vector<int> contexts = parse_length_list(g.bench_contexts, "--bench-contexts");
    for (int T : parse_length_list(g.bench_prompts, "--bench-prompt"))
        if (T > mc.max_seq_len)
            throw InputError("--bench-prompt " + std::to_string(T) + " exceeds the model's max_seq_len " +
                             std::to_string(mc.max_seq_len));
    for (int c : contexts)
        if (c > mc.max_seq_len || c <= g.bench_steps)
            throw InputError("--bench-contexts: " + std::to_string(c) + " must be in (--bench-steps=" +
                             std::to_string(g.bench_steps) + ", max_seq_len=" + std::to_string(mc.max_seq_len) + "]");
}

// The benchmark on `model` (its weights set; check_bench_flags passed); device: what device_facts
// measured before the model was built.
inline int run_bench(const GenerateConfig& g, Backend& model, const DeviceFacts& device) {
    using bench::BenchClock, bench::median, bench::ms_since;
    const ModelConfig& mc = model.config();
    // a profiler the backend cannot have (the CPU's, a build or machine without CUPTI) refused before the timings
    if (g.bench_profile) make_profiler(model, "--bench-profile")->finish();
    const std::vector<int> contexts = parse_length_list(g.bench_contexts, "--bench-contexts");
    const std::vector<int> prompts = parse_length_list(g.bench_prompts, "--bench-prompt");
    const int B = g.bench_batch, steps = g.bench_steps;
    Rng rng(g.seed);
    auto random_tokens = [&](size_t n) {
        std::vector<int> v(n);
        for (int& x : v) x = (int)(rng.next_u64() % (uint64_t)mc.vocab_size);
        return v;
    };

    // prefill (B, T) for each prompt length; each length's own warm-up (its allocation, its GEMMs' heuristics)
    std::string prefill_json;
    std::vector<int> prompt;
    for (const int T : prompts) {
        prompt = random_tokens((size_t)B * T);
        std::vector<double> ms;
        for (int r = 0; r <= g.bench_repeats; r++) {  // r = 0: warm-up
            model.kv_begin(B, T);
            const auto t0 = BenchClock::now();
            model.kv_prefill_device(prompt.data(), T);
            if (r > 0) ms.push_back(ms_since(t0));
        }
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "%s    {\"T\": %d, \"ms_median\": %.4f, \"ms\": ", prefill_json.empty() ? "" : ",\n", T,
                      median(ms));
        prefill_json += buf + bench::json_list(ms) +
                        ", \"device_memory_bytes\": " + std::to_string(model.device_memory_used()) + "}";
    }
    const int T = prompts.back();  // the profiled prefill's length (`prompt` holds its tokens)

    // decode at each context; one untimed warm-up round at the first context
    std::string decode_json;
    for (int ci = -1; ci < (int)contexts.size(); ci++) {
        const int c = contexts[ci < 0 ? 0 : ci];
        const int pre = c - steps;
        const std::vector<int> ctx = random_tokens((size_t)B * pre);
        model.kv_begin(B, c);
        model.kv_prefill_device(ctx.data(), pre);  // pre >= 1 (checked); a 1-token "prefill" is a decode step
        std::vector<double> ms;
        std::vector<int> tok(B);
        for (int s = 0; s < steps; s++) {
            for (int& x : tok) x = (int)(rng.next_u64() % (uint64_t)mc.vocab_size);
            const auto t0 = BenchClock::now();
            model.kv_forward(tok.data(), 1, KvLogits::Last);  // the (B, Vp) logits on the host: synchronized
            ms.push_back(ms_since(t0));
        }
        if (ci < 0) continue;
        double mean = 0.0;
        for (double x : ms) mean += x / ms.size();
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "%s    {\"context\": %d, \"ms_per_token_median\": %.4f, \"ms_per_token_mean\": %.4f, "
                      "\"kv_cache_bytes\": %zu, \"device_memory_bytes\": %zu}",
                      decode_json.empty() ? "" : ",\n", c, median(ms), mean, model.kv_cache_bytes(),
                      model.device_memory_used());
        decode_json += buf;
    }

    std::string profile_json;
    if (g.bench_profile) {
        auto profiled = [&](const char* unit, int n, auto&& before, auto&& work) {
            before();
            const std::unique_ptr<StepProfiler> prof = make_profiler(model, "--bench-profile");
            for (int i = 0; i < n; i++) {
                prof->step_begin();
                work();
                prof->step_end();
            }
            ProfileCapture cap = prof->finish();
            cap.unit = unit;
            const ProfileTable t = profile_table(cap);
            std::fputs(profile_table_text(t).c_str(), stderr);
            return profile_table_json(t).dump();
        };
        const std::string prefill = profiled(
            "prefills", 1, [&] { model.kv_begin(B, T); }, [&] { model.kv_prefill_device(prompt.data(), T); });
        const int c = contexts.back(), warm = std::min(2, c - steps - 1);
        std::vector<int> tok(B);
        auto decode_one = [&] {
            for (int& x : tok) x = (int)(rng.next_u64() % (uint64_t)mc.vocab_size);
            model.kv_forward(tok.data(), 1, KvLogits::Last);
        };
        const std::string decode = profiled(
            "decode steps", steps,
            [&] {
                const std::vector<int> ctx = random_tokens((size_t)B * (c - steps - warm));
                model.kv_begin(B, c);
                model.kv_prefill_device(ctx.data(), c - steps - warm);
                for (int i = 0; i < warm; i++) decode_one();
            },
            decode_one);
        profile_json = ",\n  \"profile\": {\"prefill\": " + prefill +
                       ",\n    \"decode_context\": " + std::to_string(c) + ", \"decode\": " + decode + "}";
    }
    std::printf("{\n  \"backend\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\",\n", model.name(),
                device.name.c_str(), device.precision.c_str());
    std::printf(
        "  \"config\": {\"L\": %d, \"NH\": %d, \"C\": %d, \"G\": %d, \"P\": %d, \"max_seq_len\": %d, "
        "\"vocab_size\": %d, \"qk_norm\": %d, \"attn_softcap\": %g, \"bias\": %d, \"gelu\": \"%s\"},\n",
        mc.num_layers, mc.num_heads, mc.channels, mc.global_heads, mc.window, mc.max_seq_len, mc.vocab_size,
        mc.qk_norm ? 1 : 0, mc.attn_softcap, mc.bias ? 1 : 0, gelu_name(mc.gelu));
    std::printf(
        "  \"batch\": %d, \"decode_steps\": %d, \"cuda_graph\": %d, \"pdl\": %d, \"fused_decode\": %d, "
        "\"seed\": %llu, \"device_memory_baseline_bytes\": %zu,\n",
        B, steps, g.cuda_graph, g.pdl, model.fused_decode_on() ? 1 : 0, (unsigned long long)g.seed,
        device.memory_baseline);
    std::printf("  \"prefill\": [\n%s\n  ],\n", prefill_json.c_str());
    std::printf("  \"decode\": [\n%s\n  ]%s\n}\n", decode_json.c_str(), profile_json.c_str());
    return 0;
}

}  // namespace llmc
