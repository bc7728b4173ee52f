// generate_gpt2_ls: loads a checkpoint and prints sampled text, token by token as it is chosen,
// using the backend's KV cache (llmc/text/sampler.h generate(); docs/generation.md). Thin on purpose:
// flags (llmc/app/generate_cli.h) -> checkpoint (llmc/io/checkpoint.h) -> tokenizer and prompt
// (llmc/app/generate_input.h) -> backend for --device (llmc/app/backends.h) -> generate().
// Stdout carries only the generated text (or ids with --print-ids); a summary goes to stderr.
// --bench instead times the KV cache and prints one JSON object (llmc/app/generate_bench.h).
// Any user error ends as one line "error: <message>" and exit code 1.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "llmc/app/backends.h"
#include "llmc/app/checkpoint_run.h"
#include "llmc/app/generate_bench.h"
#include "llmc/app/generate_cli.h"
#include "llmc/app/generate_input.h"
#include "llmc/app/model_tokenizer.h"
#include "llmc/app/threads.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/rng.h"
#include "llmc/io/checkpoint.h"
#include "llmc/text/sampler.h"
#include "llmc/text/tokenizer.h"

namespace {

// --encode-only: the prompt's ids, one per line; no model is loaded. With -e of a run's checkpoint and
// no --tokenizer, the run's tokenizer, as generation takes it (generate_settings_from_run).
int run_encode_only(llmc::GenerateConfig g) {
    const std::string taken = llmc::generate_settings_from_run(g);
    const llmc::Tokenizer tok = g.tokenizer.empty() ? llmc::Tokenizer() : llmc::Tokenizer(g.tokenizer);
    std::string out;
    for (int id : llmc::text_prompt(g, tok)) out += std::to_string(id) + "\n";
    if (!taken.empty()) std::fprintf(stderr, "%s\n", taken.c_str());
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

// Whether the decode steps run as CUDA graphs: --cuda-graph 1, or auto (-1) where the backend has
// them and the KV cache runs (--no-cache has no decode steps)
bool decode_as_graphs(const llmc::GenerateConfig& g, const llmc::Backend& backend) {
    return g.cuda_graph == 1 || (g.cuda_graph < 0 && !g.no_cache && backend.has_step_graph());
}

// Whether the kernels launch with programmatic dependent launch: --pdl 1, or auto (-1) where the backend
// and its device have it, except with --bench-profile (a kernel's span would include its wait)
bool programmatic(const llmc::GenerateConfig& g, const llmc::Backend& backend) {
    return g.pdl == 1 || (g.pdl < 0 && !g.bench_profile && backend.programmatic_launch_supported());
}

// The checkpoint's model on the device --device picks (llmc/app/device.h); *facts (when given): what
// --bench reports about that device, measured before the model is built.
std::unique_ptr<llmc::Backend> load_backend(const llmc::GenerateConfig& g, const llmc::ModelCheckpoint& ck,
                                            llmc::DeviceFacts* facts) {
    const llmc::Device device = llmc::device_for_model(g.device, ck.config, /*print_note=*/true);
    if (facts) *facts = llmc::device_facts(device);
    std::unique_ptr<llmc::Backend> backend = llmc::make_backend(device, ck.config, 0, /*local_rank=*/0);
    backend->set_params(ck.params.data());
    if (g.cuda_graph == 1 && !backend->has_step_graph())
        throw llmc::InputError("--cuda-graph 1 needs the CUDA backend; this run uses the " +
                               std::string(backend->name()) + " backend (give --device cuda, or drop --cuda-graph)");
    if (decode_as_graphs(g, *backend)) backend->use_step_graph(true);
    if (g.pdl == 1 && !backend->has_programmatic_launch())
        throw llmc::InputError("--pdl 1 needs the CUDA backend; this run uses the " + std::string(backend->name()) +
                               " backend (give --device cuda, or drop --pdl)");
    if (programmatic(g, *backend)) backend->use_programmatic_launch(true);
    if (g.fused_decode == 1) {
        if (!backend->has_fused_decode())
            throw llmc::InputError("--fused-decode 1 needs the CUDA backend; this run uses the " +
                                   std::string(backend->name()) +
                                   " backend (give --device cuda, or drop --fused-decode)");
        backend->use_fused_decode(true);
    }
    return backend;
}

// Prints the prompt (prompt_echo; not with --print-ids, which prints the new tokens' ids only), then
// samples g.tokens tokens after it, streaming each to stdout as it is chosen. Once every input
// is checked, says on stderr what came from the checkpoint's run (`taken`) and whether the context
// goes past the length the model was trained at.
int run_generation(const llmc::GenerateConfig& g, const llmc::ModelCheckpoint& ck, const std::string& taken) {
    llmc::check_lone_gpt2_checkpoint_tokenizer(g.model, ck.config, ck.from_llmc, g.tokenizer);
    // before the prompt is encoded with it (anything but a tokenizer.bin: generation_input names the problem)
    const llmc::DataIdentity tokenizer_identity = llmc::tokenizer_bin_identity(g.tokenizer);
    llmc::check_model_tokenizer(g.model, ck.tokenizer_id, tokenizer_identity, "--tokenizer " + g.tokenizer,
                                "pass the tokenizer.bin of the data the model was trained on");
    const llmc::GenerationInput in = llmc::generation_input(g, ck.config);
    const std::string echo = g.print_ids ? "" : llmc::prompt_echo(in);  // decoded now: a bad id is refused first
    const std::unique_ptr<llmc::Backend> model = load_backend(g, ck, nullptr);
    const int positions = (int)std::min<int64_t>((int64_t)in.prompt.size() + g.tokens, in.max_len);
    const std::string length_note = llmc::past_trained_length_note(ck, g.model, positions, "generation");
    const std::string vocab_note =
        llmc::model_tokenizer_matches(ck.tokenizer_id, tokenizer_identity)
            ? ""
            : llmc::generate_vocab_note(g.model, g.tokenizer, in.tokenizer.present() ? in.tokenizer.vocab_size() : 0,
                                        ck.config.vocab_size);
    const std::string cut_note = llmc::prompt_cut_note(in, g, ck.config);
    const std::string retired_note = llmc::retired_checkpoint_note(g.model);
    for (const std::string& line : {taken, retired_note, cut_note, length_note, vocab_note})
        if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
    llmc::Rng rng(g.seed);
    llmc::GenerateOptions opt;
    opt.top_k = g.top_k;
    opt.sample_vocab = in.tokenizer.present() ? in.tokenizer.vocab_size() : 0;  // ids the tokenizer can print
    opt.use_cache = !g.no_cache;
    opt.on_token = [&](int id) {  // stream each token as soon as it is chosen
        if (g.print_ids) {
            std::printf("%d\n", id);
        } else {
            const std::string bytes = in.tokenizer.decode(id);  // raw token bytes (may split a UTF-8 sequence)
            std::fwrite(bytes.data(), 1, bytes.size(), stdout);
        }
        std::fflush(stdout);
    };
    std::fwrite(echo.data(), 1, echo.size(), stdout);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int> out =
        llmc::generate(*model, in.prompt, g.tokens, in.max_len, g.greedy ? 0.0f : g.temperature, rng, opt);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!g.print_ids) std::printf("\n");
    std::fflush(stdout);  // the text and its newline before the summary, also when both go to one file
    std::fprintf(stderr, "generated %zu tokens in %.3f s (%.1f tok/s), %s, %s, KV cache %.1f KiB\n", out.size(), s,
                 out.size() / (s > 0 ? s : 1e-9), model->device_description().c_str(),
                 (std::string(g.no_cache                    ? "no cache"
                              : decode_as_graphs(g, *model) ? "cached, decode steps as CUDA graphs"
                                                            : "cached") +
                  (programmatic(g, *model) ? ", programmatic dependent launch" : "") +
                  (model->fused_decode_on() ? ", fused decode kernels" : ""))
                     .c_str(),
                 g.no_cache ? 0.0 : model->kv_cache_bytes() / 1024.0);
    return 0;
}

int run(llmc::GenerateConfig g) {
    llmc::set_thread_count(g.threads);
    llmc::check_model_file(g.model, "generate_gpt2_ls -e needs a model file; '" + g.model + "' ");
    if (g.encode_only) return run_encode_only(g);
    const llmc::ModelCheckpoint ck = llmc::load_model_checkpoint(g.model);
    if (!g.bench) {
        const std::string taken = llmc::generate_settings_from_run(g);  // --tokenizer from the checkpoint's run
        return run_generation(g, ck, taken);
    }
    const std::string fitted = llmc::fit_bench_defaults(g, ck.config);
    if (!fitted.empty()) std::fprintf(stderr, "%s\n", fitted.c_str());  // before an error that names them
    llmc::check_bench_flags(g, ck.config);
    llmc::DeviceFacts facts;
    const std::unique_ptr<llmc::Backend> model = load_backend(g, ck, &facts);
    g.cuda_graph = decode_as_graphs(g, *model) ? 1 : 0;  // the JSON records what ran
    g.pdl = programmatic(g, *model) ? 1 : 0;
    return llmc::run_bench(g, *model, facts);
}

}  // namespace

int main(int argc, char** argv) {
    if (!llmc::use_passive_wait_policy(argv)) return 1;  // may re-execute this program (llmc/app/threads.h)
    llmc::GenerateCli cli;
    const int rc = cli.parse(argc, argv);
    if (rc >= 0) return rc;
    try {
        return run(cli.config());
    } catch (const std::exception&) {
        const std::string message =
            llmc::current_error_message("use a smaller --max-len or --bench-batch, or a machine with more memory");
        std::fflush(stdout);  // what was generated before the error line
        std::fprintf(stderr, "error: %s\n", message.c_str());
        return 1;
    }
}
