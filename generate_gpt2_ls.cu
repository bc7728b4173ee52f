// generate_gpt2_ls: loads a checkpoint and prints sampled text, token by token as it is chosen,
// using the backend's KV cache (llmc/text/sampler.h generate(); docs/generation.md). Thin on purpose:
// flags (llmc/app/generate_cli.h) -> checkpoint (llmc/io/checkpoint.h) -> backend -> generate().
// Stdout carries only the generated text (or ids with --print-ids); a summary goes to stderr.
// --bench instead times the KV cache (prefill, per-token decode at growing context) with random
// tokens and prints one JSON object (dev/bench/generate_latency.py drives it).
// Any user error ends as one line "error: <message>" and exit code 1.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <omp.h>

#include "llmc/core/backend.h"
#include "llmc/text/bpe_encoder.h"
#include "llmc/text/sp_encoder.h"
#include "llmc/io/checkpoint.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/app/device.h"  // LLMC_CUDA_BACKEND: nvcc, or the device emulation (docs/emulation.md)
#include "llmc/core/error.h"
#include "llmc/app/generate_cli.h"
#include "llmc/core/rng.h"
#include "llmc/text/sampler.h"
#include "llmc/text/tokenizer.h"
#ifdef LLMC_CUDA_BACKEND
#include "llmc/cuda/gpt2_cuda.cuh"
#endif

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

std::string json_list(const std::vector<double>& v) {
    std::string s = "[";
    char buf[32];
    for (size_t i = 0; i < v.size(); i++) {
        std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", v[i]);
        s += buf;
    }
    return s + "]";
}

// The model on the requested device, plus what the benchmark needs beyond the Backend interface.
struct Model {
    std::unique_ptr<llmc::Backend> backend;
    std::string device_name = "cpu";
    std::string precision = "fp32";
    size_t memory_baseline = 0;  // device memory in use before the model (CUDA context, other processes)
    // Prefill of B*T tokens into an empty cache; returns once the device work is done. The logits
    // stay where the backend computed them (CUDA: on the device; no host copy of (B, T, Vp)).
    void prefill(const int* tokens, int T) {
#ifdef LLMC_CUDA_BACKEND
        if (auto* c = dynamic_cast<llmc::cuda::CudaBackend*>(backend.get())) {
            c->kv_prefill_device(tokens, T);
            return;
        }
#endif
        backend->kv_forward(tokens, T);
    }
    size_t memory_used() const { return backend->device_memory_used(); }
};

Model make_model(const llmc::GenerateConfig& g, const llmc::ModelCheckpoint& ck) {
    Model m;
    if (g.device == "cuda") {
#ifdef LLMC_CUDA_BACKEND
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
            (void)cudaGetLastError();
            throw llmc::InputError("--device cuda: no CUDA device found; use --device cpu");
        }
        CUDA_CHECK(cudaFree(nullptr));  // create the context, so the baseline below includes it
        m.memory_baseline = llmc::cuda::device_memory_in_use();
        m.backend = llmc::cuda::make_cuda_backend(ck.config, 0);
        m.device_name = llmc::cuda::cuda_device_description();
        m.precision = llmc::cuda::kPrecisionName;
#else
        throw llmc::InputError("--device cuda: this binary was built without CUDA (host compiler); build it with nvcc");
#endif
    } else {
        m.backend = std::make_unique<llmc::CpuBackend>(ck.config, 0);
    }
    m.backend->set_params(ck.params.data());
    return m;
}

// --bench: prefill of B prompts of length T (median of --bench-repeats, after one warm-up), then
// for each context c: a fresh cache, a prefill of c - steps tokens (untimed), then `steps` decode
// steps of one token per sequence, each timed to the logits on the host (what sampling needs).
int run_bench(const llmc::GenerateConfig& g, const llmc::ModelCheckpoint& ck) {
    const llmc::ModelConfig& mc = ck.config;
    const std::vector<int> contexts = llmc::parse_context_list(g.bench_contexts);
    const int B = g.bench_batch, T = g.bench_prompt, steps = g.bench_steps;
    if (T > mc.max_seq_len)
        throw llmc::InputError("--bench-prompt " + std::to_string(T) + " exceeds the model's max_seq_len " +
                               std::to_string(mc.max_seq_len));
    for (int c : contexts)
        if (c > mc.max_seq_len || c <= steps)
            throw llmc::InputError("--bench-contexts: " + std::to_string(c) + " must be in (--bench-steps=" +
                                   std::to_string(steps) + ", max_seq_len=" + std::to_string(mc.max_seq_len) + "]");
    Model m = make_model(g, ck);
    llmc::Backend& model = *m.backend;
    llmc::Rng rng(g.seed);
    auto random_tokens = [&](size_t n) {
        std::vector<int> v(n);
        for (int& x : v) x = (int)(rng.next_u64() % (uint64_t)mc.vocab_size);
        return v;
    };

    // prefill (B, T)
    const std::vector<int> prompt = random_tokens((size_t)B * T);
    std::vector<double> prefill_ms;
    for (int r = 0; r <= g.bench_repeats; r++) {  // r = 0: warm-up (allocation, cuBLASLt heuristics)
        model.kv_begin(B, T);
        const auto t0 = Clock::now();
        m.prefill(prompt.data(), T);
        if (r > 0) prefill_ms.push_back(ms_since(t0));
    }
    const size_t prefill_mem = m.memory_used();

    // decode at each context; one untimed warm-up round at the first context
    std::string decode_json;
    for (int ci = -1; ci < (int)contexts.size(); ci++) {
        const int c = contexts[ci < 0 ? 0 : ci];
        const int pre = c - steps;
        const std::vector<int> ctx = random_tokens((size_t)B * pre);
        model.kv_begin(B, c);
        m.prefill(ctx.data(), pre);  // pre >= 1 (checked above); a 1-token "prefill" is a decode step
        std::vector<double> ms;
        std::vector<int> tok(B);
        for (int s = 0; s < steps; s++) {
            for (int& x : tok) x = (int)(rng.next_u64() % (uint64_t)mc.vocab_size);
            const auto t0 = Clock::now();
            model.kv_forward(tok.data(), 1);  // returns the (B, Vp) logits on the host: synchronized
            ms.push_back(ms_since(t0));
        }
        if (ci < 0) continue;
        double mean = 0.0;
        for (double x : ms) mean += x / ms.size();
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "%s    {\"context\": %d, \"ms_per_token_median\": %.4f, \"ms_per_token_mean\": %.4f, "
                      "\"kv_cache_bytes\": %zu, \"device_memory_bytes\": %zu}",
                      decode_json.empty() ? "" : ",\n", c, median(ms), mean, model.kv_cache_bytes(), m.memory_used());
        decode_json += buf;
    }
    std::printf("{\n  \"backend\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\",\n", model.name(),
                m.device_name.c_str(), m.precision.c_str());
    std::printf("  \"config\": {\"L\": %d, \"NH\": %d, \"C\": %d, \"G\": %d, \"P\": %d, \"max_seq_len\": %d, "
                "\"vocab_size\": %d, \"qk_norm\": %d, \"attn_softcap\": %g},\n",
                mc.num_layers, mc.num_heads, mc.channels, mc.global_heads, mc.window, mc.max_seq_len, mc.vocab_size,
                mc.qk_norm ? 1 : 0, mc.attn_softcap);
    std::printf("  \"batch\": %d, \"decode_steps\": %d, \"device_memory_baseline_bytes\": %zu,\n", B, steps,
                m.memory_baseline);
    std::printf("  \"prefill\": {\"T\": %d, \"ms_median\": %.4f, \"ms\": %s, \"device_memory_bytes\": %zu},\n", T,
                median(prefill_ms), json_list(prefill_ms).c_str(), prefill_mem);
    std::printf("  \"decode\": [\n%s\n  ]\n}\n", decode_json.c_str());
    return 0;
}

// The bytes of --prompt-file, unchanged (a trailing newline stays part of the prompt).
std::string read_prompt_file(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw llmc::InputError("--prompt-file '" + path + "' cannot be opened; pass an existing text file");
    std::string text;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) throw llmc::InputError("--prompt-file '" + path + "' could not be read; check the file");
    return text;
}

bool has_text_prompt(const llmc::GenerateConfig& g) { return g.has_prompt_text || !g.prompt_file.empty(); }

// --prompt / --prompt-file -> the tokenizer's EOT followed by the text's tokens: SentencePiece with
// --sp-model or the tokenizer.model next to --tokenizer (llmc/text/sp_encoder.h), else GPT-2 BPE or bytes.
std::vector<int> text_prompt(const llmc::GenerateConfig& g, const llmc::Tokenizer& tok) {
    const std::string text = g.has_prompt_text ? g.prompt_text : read_prompt_file(g.prompt_file);
    const std::string sp_model = llmc::sp_model_for(g.sp_model, g.tokenizer, tok);
    if (!sp_model.empty()) return llmc::encode_prompt_sp(tok, sp_model, text);
    return llmc::encode_prompt(tok, text);
}

// --encode-only: the prompt's ids, one per line; no model.
int run_encode_only(const llmc::GenerateConfig& g) {
    const llmc::Tokenizer tok = g.tokenizer.empty() ? llmc::Tokenizer() : llmc::Tokenizer(g.tokenizer);
    std::string out;
    for (int id : text_prompt(g, tok)) out += std::to_string(id) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

int run(const llmc::GenerateConfig& g) {
    if (g.threads > 0) omp_set_num_threads(g.threads);
    if (g.encode_only) return run_encode_only(g);

    llmc::ModelCheckpoint ck = llmc::load_model_checkpoint(g.model);
    if (g.bench) return run_bench(g, ck);
    const llmc::ModelConfig& mc = ck.config;
    llmc::Tokenizer tok;
    if (!g.tokenizer.empty()) {
        tok = llmc::Tokenizer(g.tokenizer);
        if (tok.vocab_size() > mc.vocab_size)
            throw llmc::InputError("tokenizer '" + g.tokenizer + "' has " + std::to_string(tok.vocab_size()) +
                                   " tokens but the model only " + std::to_string(mc.vocab_size) +
                                   "; pass the tokenizer.bin of the model's training data");
    }
    std::vector<int> prompt;
    if (has_text_prompt(g)) {
        prompt = text_prompt(g, tok);  // ids < the tokenizer's vocabulary <= the model's (checked above)
    } else if (!g.prompt_ids.empty()) {
        prompt = llmc::parse_token_ids(g.prompt_ids);
    } else if (tok.present()) {
        prompt = {tok.eot_token()};
    } else {
        throw llmc::InputError("no prompt: pass --prompt-ids '1,2,3', or --tokenizer tokenizer.bin (then the prompt is its "
                               "EOT token, or --prompt TEXT)");
    }
    for (int id : prompt)
        if (id >= mc.vocab_size)
            throw llmc::InputError("--prompt-ids: token " + std::to_string(id) + " is outside the model's vocabulary [0, " +
                                   std::to_string(mc.vocab_size) + ")");
    const int max_len = g.max_len > 0 ? g.max_len : mc.max_seq_len;
    if (max_len > mc.max_seq_len)
        throw llmc::InputError("--max-len " + std::to_string(max_len) + " exceeds the model's max_seq_len " +
                               std::to_string(mc.max_seq_len) + "; use --max-len <= " + std::to_string(mc.max_seq_len));

    Model m = make_model(g, ck);
    llmc::Backend& model = *m.backend;
    llmc::Rng rng(g.seed);
    llmc::GenerateOptions opt;
    opt.top_k = g.top_k;
    opt.use_cache = !g.no_cache;
    opt.on_token = [&](int id) {  // stream each token as soon as it is chosen
        if (g.print_ids) {
            std::printf("%d\n", id);
        } else {
            const std::string bytes = tok.decode(id);  // raw token bytes (may split a UTF-8 sequence)
            std::fwrite(bytes.data(), 1, bytes.size(), stdout);
        }
        std::fflush(stdout);
    };
    const auto t0 = Clock::now();
    const std::vector<int> out = llmc::generate(model, prompt, g.tokens, max_len, g.greedy ? 0.0f : g.temperature,
                                                rng, opt);
    const double s = ms_since(t0) / 1000.0;
    if (!g.print_ids) std::printf("\n");
    std::fprintf(stderr, "generated %zu tokens in %.3f s (%.1f tok/s), %s, %s, KV cache %.1f KiB\n", out.size(), s,
                 out.size() / (s > 0 ? s : 1e-9), model.name(), g.no_cache ? "no cache" : "cached",
                 g.no_cache ? 0.0 : model.kv_cache_bytes() / 1024.0);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    llmc::GenerateCli cli;
    const int rc = cli.parse(argc, argv);
    if (rc >= 0) return rc;
    try {
        return run(cli.config());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n",
                     llmc::error_message(e, "use a smaller --max-len or --bench-batch, or a machine with more memory").c_str());
        return 1;
    }
}
