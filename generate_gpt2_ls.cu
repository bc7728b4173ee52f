// generate_gpt2_ls: loads a checkpoint and prints sampled text, token by token as it is chosen,
// using the backend's KV cache (llmc/sampler.h generate(); docs/generation.md). Thin on purpose:
// flags (llmc/generate_cli.h) -> checkpoint (llmc/checkpoint.h) -> backend -> generate().
// Stdout carries only the generated text (or ids with --print-ids); a summary goes to stderr.
// Any user error ends as one line "error: <message>" and exit code 1.
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <omp.h>

#include "llmc/checkpoint.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/error.h"
#include "llmc/generate_cli.h"
#include "llmc/rng.h"
#include "llmc/sampler.h"
#include "llmc/tokenizer.h"

static int run(const llmc::GenerateConfig& g) {
    if (g.device == "cuda")
        throw llmc::InputError("--device cuda: the CUDA backend has no KV-cached generation yet (issue 8); use --device cpu");
    if (g.threads > 0) omp_set_num_threads(g.threads);

    llmc::ModelCheckpoint ck = llmc::load_model_checkpoint(g.model);
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
    if (!g.prompt_ids.empty()) {
        prompt = llmc::parse_token_ids(g.prompt_ids);
    } else if (tok.present()) {
        prompt = {tok.eot_token()};
    } else {
        throw llmc::InputError("no prompt: pass --prompt-ids '1,2,3' or --tokenizer tokenizer.bin (then the prompt is its EOT token)");
    }
    for (int id : prompt)
        if (id >= mc.vocab_size)
            throw llmc::InputError("--prompt-ids: token " + std::to_string(id) + " is outside the model's vocabulary [0, " +
                                   std::to_string(mc.vocab_size) + ")");
    const int max_len = g.max_len > 0 ? g.max_len : mc.max_seq_len;
    if (max_len > mc.max_seq_len)
        throw llmc::InputError("--max-len " + std::to_string(max_len) + " exceeds the model's max_seq_len " +
                               std::to_string(mc.max_seq_len) + "; use --max-len <= " + std::to_string(mc.max_seq_len));

    llmc::CpuBackend model(mc, 0);
    model.set_params(ck.params.data());
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
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int> out = llmc::generate(model, prompt, g.tokens, max_len, g.greedy ? 0.0f : g.temperature,
                                                rng, opt);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!g.print_ids) std::printf("\n");
    std::fprintf(stderr, "generated %zu tokens in %.3f s (%.1f tok/s), %s, KV cache %.1f KiB\n", out.size(), s,
                 out.size() / (s > 0 ? s : 1e-9), g.no_cache ? "no cache" : "cached",
                 g.no_cache ? 0.0 : model.kv_cache_bytes() / 1024.0);
    return 0;
}

int main(int argc, char** argv) {
    llmc::GenerateCli cli;
    const int rc = cli.parse(argc, argv);
    if (rc >= 0) return rc;
    try {
        return run(cli.config());
    } catch (const llmc::InputError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
