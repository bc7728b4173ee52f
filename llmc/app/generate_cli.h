// The command line of generate_gpt2_ls: one CLI11 definition per flag, bound straight into
// GenerateConfig, so --help and the parser cannot disagree. docs/generation.md lists them.
#pragma once
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "llmc/app/argv_mistakes.h"
#include "llmc/app/cli_checks.h"
#include "llmc/app/thread_limit.h"
#include "llmc/core/error.h"

namespace llmc {

struct GenerateConfig {
    std::string model;       // checkpoint (ours or llm.c's GPT-2)
    std::string prompt_ids;  // "1,2,3"; empty = the tokenizer's EOT
    std::string
        prompt_text;  // --prompt: text, encoded with --tokenizer (llmc/text/bpe_encoder.h, llmc/text/sp_encoder.h)
    std::string prompt_file;       // --prompt-file: a file whose bytes are the prompt text
    bool has_prompt_text = false;  // --prompt was given (it may be empty)
    bool encode_only = false;      // print the prompt's token ids and exit (no model needed)
    std::string tokenizer;         // tokenizer.bin for decoding the output ('' = print ids)
    std::string sp_model;          // SentencePiece tokenizer.model for --prompt ('' = the one next to --tokenizer)
    int tokens = 64;               // tokens to generate
    float temperature = 1.0f;
    int top_k = 0;  // 0 = whole vocabulary
    uint64_t seed = 1337;
    bool greedy = false;          // argmax instead of sampling
    int max_len = 0;              // context kept (0 = the model's max_seq_len)
    std::string device = "auto";  // auto | cpu | cuda (llmc/app/device.h, as the trainer's --device)
    bool no_cache = false;        // full forward per token (the reference path)
    int cuda_graph = -1;          // 1: each decode step as one CUDA graph (the CUDA backend); 0: eagerly;
                                  // -1 (auto, the default): 1 where the backend has them and the KV cache runs
    int pdl = -1;                 // 1: the CUDA backend's kernels with programmatic dependent launch; 0: without;
                                  // -1 (auto, the default): 1 where the backend and its device have it, except
                                  // with --bench-profile
    int fused_decode = 0;         // 1: the KV cache's decode steps with the CUDA backend's own fused linear kernels
    bool print_ids = false;       // print token ids, one per line, instead of text
    int threads = 0;              // OpenMP threads (0 = OpenMP's default)
    // --bench: time the KV cache instead of generating (dev/bench/generate_latency.py drives it)
    bool bench = false;
    int bench_batch = 1;                                       // sequences per batch
    std::string bench_prompts = "2048";                        // prefill lengths T, timed in this order
    std::string bench_contexts = "1024,2048,4096,8192,16384";  // decode timed at these context lengths
    int bench_steps = 32;                                      // decode steps timed per context
    int bench_repeats = 5;                                     // prefill repetitions (the median is reported)
    bool bench_profile = false;  // --bench: also a per-kernel profile of a prefill and of decode steps
    bool bench_contexts_given = false, bench_prompt_given = false;  // else the defaults, fitted to the model
};

class GenerateCli {
public:
    GenerateCli()
        : app_("generate_gpt2_ls: sample text from a train_gpt2_ls (or llm.c GPT-2) checkpoint with a KV cache") {
        CLI::App& a = app_;
        GenerateConfig& c = cfg_;
        a.get_formatter()->column_width(30);
        a.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        a.add_option("-e,--model", c.model, "checkpoint file: model_NNNNNNNN.bin or an llm.c gpt2_*.bin (required)");
        CLI::Option* ids =
            a.add_option("--prompt-ids", c.prompt_ids,
                         "prompt as comma-separated token ids, e.g. '50256,464' (default: the tokenizer's EOT)");
        CLI::Option* text = a.add_option(
            "--prompt", c.prompt_text,
            "prompt text, encoded with --tokenizer (GPT-2 BPE, byte-level or SentencePiece) after its EOT token");
        CLI::Option* file =
            a.add_option("--prompt-file", c.prompt_file, "like --prompt, the text being this file's bytes");
        ids->excludes(text)->excludes(file);
        text->excludes(file);
        a.add_flag("--encode-only", c.encode_only,
                   "print the token ids of --prompt/--prompt-file (EOT first), one per line, and exit; needs no model "
                   "(a generation flag beside it is refused)");
        a.add_option("--tokenizer", c.tokenizer,
                     "tokenizer.bin to print text (not given, or '': the tokenizer of the checkpoint's run, named "
                     "by the config.json beside it; without one, tokens print as <id>)");
        a.add_option("--sp-model", c.sp_model,
                     "SentencePiece tokenizer.model to encode --prompt with "
                     "(default: the tokenizer.model next to --tokenizer, if any)");
        add_integer("-n,--tokens", c.tokens, "tokens to generate")->capture_default_str()->check(at_least(1));
        a.add_option("--temperature", c.temperature, "sampling temperature (> 0)")->capture_default_str();
        add_integer("--top-k", c.top_k, "sample only among the k most likely tokens (0 = all)")
            ->capture_default_str()
            ->check(at_least(0));
        add_integer("--seed", c.seed, "seed of the sampler")->capture_default_str();
        a.add_flag("--greedy", c.greedy,
                   "always take the most likely token (--temperature or --top-k beside it is refused)");
        add_integer("--max-len", c.max_len, "context kept, newest tokens (0 = the model's max_seq_len)")
            ->capture_default_str()
            ->check(at_least(0));
        a.add_option("--device", c.device,
                     "auto | cpu | cuda (auto: CUDA when the binary has the CUDA backend, a GPU "
                     "is present and the backend runs the model; else the CPU)")
            ->capture_default_str()
            ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
        a.add_flag("--no-cache", c.no_cache, "no KV cache: a full forward pass per token (the reference path)");
        a.add_option("--cuda-graph", cuda_graph_flag_,
                     "auto | 0 | 1: 1 each decode step as one CUDA graph launch (the CUDA backend, KV cache), the "
                     "same bits as 0; auto: 1 on the CUDA backend with the KV cache, else 0")
            ->capture_default_str()
            ->check(auto_0_1());
        a.add_option("--pdl", pdl_flag_,
                     "auto | 0 | 1: 1 launches the CUDA backend's kernels with programmatic dependent launch (sm_90+: "
                     "each may be scheduled while the one before it ends, and waits for it on the device), the same "
                     "bits as 0; auto: 1 where the backend and its device have it, except with --bench-profile")
            ->capture_default_str()
            ->check(auto_0_1());
        a.add_option("--fused-decode", fused_decode_flag_,
                     "0 | 1: 1 runs the KV cache's decode steps (and a prefill's last position) through the CUDA "
                     "backend's own linear kernels, each LayerNorm inside the next layer's launch, no cuBLASLt call "
                     "(up to 8 sequences); the same math as 0, not the same bits (sums in another order)")
            ->capture_default_str()
            ->check(zero_one());
        a.add_flag("--print-ids", c.print_ids,
                   "print the generated token ids, one per line, instead of the prompt and the text");
        add_integer("--threads", c.threads,
                    "OpenMP threads, at most " + std::to_string(kMaxThreads) +
                        " (0 = OMP_NUM_THREADS, else the CPUs this process may use; as the trainer's)")
            ->capture_default_str()
            ->check(at_least(0))
            ->check(at_most(kMaxThreads));
        a.add_flag("--bench", c.bench,
                   "latency benchmark instead of text: prefill and per-token decode times with random tokens, "
                   "one JSON object on stdout (docs/generation.md; a text generation flag beside it is refused)");
        add_integer("--bench-batch", c.bench_batch, "--bench: sequences per batch")
            ->capture_default_str()
            ->check(at_least(1));
        a.add_option("--bench-prompt", c.bench_prompts,
                     "--bench: comma-separated prefill lengths T, each timed (each <= max_seq_len; not given: at "
                     "most the model's max_seq_len)")
            ->capture_default_str();
        a.add_option("--bench-contexts", c.bench_contexts,
                     "--bench: comma-separated context lengths at which decode is timed (each <= max_seq_len; not "
                     "given: the defaults that fit, else max_seq_len)")
            ->capture_default_str();
        add_integer("--bench-steps", c.bench_steps, "--bench: decode steps timed per context")
            ->capture_default_str()
            ->check(at_least(1));
        add_integer("--bench-repeats", c.bench_repeats, "--bench: prefill repetitions (median reported)")
            ->capture_default_str()
            ->check(at_least(1));
        a.add_flag("--bench-profile", c.bench_profile,
                   "--bench: after the timings, the per-kernel profile of one more prefill and of --bench-steps "
                   "decode steps at the last context (CUDA backend; tables on stderr, JSON in the object's "
                   "\"profile\"; docs/generation.md)");
        check_flag_values(a);  // "--tokens ''" is not 0, " 5" is 5, "--greedy=2x" is refused (llmc/app/cli_checks.h)
    }

    // Returns -1 to go on, else the exit code (0 after --help; 1 after a parse error, one line).
    int parse(int argc, const char* const* argv) {
        try {
            app_.parse(argc, argv);
        } catch (const CLI::CallForHelp& e) { return app_.exit(e); } catch (const CLI::ExtrasError& e) {
            std::fprintf(stderr, "error: %s\n", unknown_flag_error(app_, e.what(), false).c_str());
            return 1;
        } catch (const CLI::ConversionError& e) {
            std::fprintf(stderr, "error: %s\n", conversion_error(app_, int_ranges_, e.what()).c_str());
            return 1;
        } catch (const CLI::ParseError& e) {
            std::fprintf(stderr, "error: %s; run with --help for the flags\n", e.what());
            return 1;
        }
        cfg_.has_prompt_text = app_.count("--prompt") > 0;
        cfg_.cuda_graph = auto_0_1_value(cuda_graph_flag_);
        cfg_.pdl = auto_0_1_value(pdl_flag_);
        cfg_.fused_decode = fused_decode_flag_ == "1" ? 1 : 0;
        cfg_.bench_contexts_given = app_.count("--bench-contexts") > 0;
        cfg_.bench_prompt_given = app_.count("--bench-prompt") > 0;
        // A flag the other settings make do nothing is refused, not ignored. The benchmark's own flags
        // without it; with it, the flags of text generation (it makes its own random prompts and always
        // times the KV cache).
        const std::string bench_only = cfg_.bench
                                           ? ""
                                           : first_given({"--bench-batch", "--bench-prompt", "--bench-contexts",
                                                          "--bench-steps", "--bench-repeats", "--bench-profile"});
        if (!bench_only.empty())
            return refuse(bench_only + " sets up the latency benchmark, which runs only with --bench; add --bench, " +
                          "or drop " + bench_only);
        if (cfg_.bench_profile && cfg_.pdl == 1)
            return refuse(
                "--bench-profile times each kernel alone, and --pdl 1 lets a kernel start before the one "
                "ahead of it ends (its span would include that wait): profile with --pdl 0 or auto, or drop "
                "--bench-profile");
        const std::string text_only =
            !cfg_.bench ? ""
                        : first_given({"--prompt-ids", "--prompt", "--prompt-file", "--encode-only", "--tokenizer",
                                       "--sp-model", "--tokens", "--temperature", "--top-k", "--greedy", "--max-len",
                                       "--no-cache", "--print-ids"});
        if (!text_only.empty())
            return refuse(
                text_only + " is a flag of text generation, and --bench times the KV cache on random " +
                "tokens instead; drop " + text_only +
                " (--bench reads -e, --device, --cuda-graph, --pdl, --fused-decode, --threads, --seed and the --bench-* "
                "flags)");
        const std::string generation_only =
            !cfg_.encode_only
                ? ""
                : first_given({"--tokens", "--temperature", "--top-k", "--greedy", "--seed", "--max-len", "--no-cache",
                               "--cuda-graph", "--pdl", "--fused-decode", "--print-ids", "--bench"});
        if (!generation_only.empty())
            return refuse(generation_only + " is a flag of generation, and --encode-only prints the prompt's ids " +
                          "and exits; drop " + generation_only);
        if (app_.count("--sp-model") > 0 && app_.count("--prompt-ids") > 0)
            return refuse(
                "--sp-model encodes --prompt or --prompt-file text, and --prompt-ids gives the ids: drop "
                "--sp-model");
        if (app_.count("--prompt-ids") > 0 && cfg_.prompt_ids.empty())
            return refuse(
                "--prompt-ids '' gives no ids: pass ids (e.g. '50256,464'), or drop --prompt-ids for the "
                "tokenizer's EOT");
        if (cfg_.model.empty() && !cfg_.encode_only) {
            std::fprintf(stderr, "error: --model is required (a checkpoint file); run with --help for the flags\n");
            return 1;
        }
        if (cfg_.encode_only && !cfg_.has_prompt_text && cfg_.prompt_file.empty()) {
            std::fprintf(
                stderr,
                "error: --encode-only needs --prompt TEXT or --prompt-file F (and --tokenizer, or -e of a run's checkpoint)\n");
            return 1;
        }
        if (cfg_.fused_decode == 1 && cfg_.no_cache)
            return refuse("--fused-decode 1 runs the KV cache's decode steps; --no-cache has none: drop one of them");
        if (cfg_.cuda_graph == 1 && cfg_.no_cache) {
            std::fprintf(stderr,
                         "error: --cuda-graph 1 runs the KV cache's decode steps as graphs; --no-cache has none: drop "
                         "one of them\n");
            return 1;
        }
        // argmax draws nothing: a sampling flag beside it would be ignored
        const std::string sampling = cfg_.greedy ? first_given({"--temperature", "--top-k"}) : "";
        if (!sampling.empty())
            return refuse(sampling + " shapes sampling, and --greedy takes the argmax instead; drop " + sampling +
                          ", or --greedy to sample");
        if (!cfg_.greedy && !(cfg_.temperature > 0.0f)) {
            std::fprintf(stderr, "error: --temperature must be > 0 (or pass --greedy)\n");
            return 1;
        }
        return -1;
    }

    const GenerateConfig& config() const { return cfg_; }
    std::string help() const { return app_.help(); }

private:
    std::string cuda_graph_flag_ = "auto";  // --cuda-graph as given: auto | 0 | 1 (cfg_.cuda_graph -1 | 0 | 1)
    std::string pdl_flag_ = "auto";         // --pdl as given: auto | 0 | 1 (cfg_.pdl -1 | 0 | 1)
    std::string fused_decode_flag_ = "0";   // --fused-decode as given: 0 | 1 (cfg_.fused_decode)

    // A switch that is auto, 0 or 1 (auto: the program decides where it knows the backend)
    static CLI::Validator auto_0_1() {
        return CLI::Validator(
            [](std::string& v) {
                return v == "auto" || v == "0" || v == "1" ? std::string() : "must be auto, 0 or 1 (got " + v + ")";
            },
            "");
    }
    static int auto_0_1_value(const std::string& v) { return v == "auto" ? -1 : v == "1" ? 1 : 0; }
    static CLI::Validator zero_one() {
        return CLI::Validator(
            [](std::string& v) { return v == "0" || v == "1" ? std::string() : "must be 0 or 1 (got " + v + ")"; }, "");
    }
    CLI::App app_;
    GenerateConfig cfg_;
    std::vector<IntRange> int_ranges_;  // the integer flags, for conversion_error (llmc/app/cli_checks.h)

    // The first of `flags` given on the command line, else "": an on/off flag given off (--greedy=0, which
    // flag_text_check turned into "false") is not.
    std::string first_given(std::initializer_list<const char*> flags) const {
        for (const char* f : flags) {
            const CLI::Option* o = app_.get_option_no_throw(f);
            const bool off =
                o != nullptr && o->get_expected_max() == 0 && !o->results().empty() && o->results().back() == "false";
            if (o != nullptr && o->count() > 0 && !off) return f;
        }
        return "";
    }
    // parse()'s exit code for a refused command line: the one line on stderr.
    static int refuse(const std::string& why) {
        std::fprintf(stderr, "error: %s\n", why.c_str());
        return 1;
    }

    // An option bound to integer `field`, its range noted in int_ranges_.
    template <class T>
    CLI::Option* add_integer(const std::string& names, T& field, const std::string& help) {
        CLI::Option* opt = app_.add_option(names, field, help);
        int_ranges_.push_back(int_range<T>("--" + opt->get_lnames().front()));
        return opt;
    }
};

// "1, 2,3" -> {1, 2, 3}; throws InputError naming the bad entry.
inline std::vector<int> parse_token_ids(const std::string& s) {
    std::vector<int> ids;
    size_t pos = 0;
    while (pos <= s.size()) {
        size_t end = s.find(',', pos);
        if (end == std::string::npos) end = s.size();
        std::string item = s.substr(pos, end - pos);
        const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
        item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
        size_t used = 0;
        long v = -1;
        try {
            v = std::stol(item, &used);
        } catch (const std::exception&) { used = 0; }
        if (item.empty() || used != item.size() || v < 0 || v > 2147483647L)
            throw InputError("--prompt-ids: '" + item +
                             "' is not a token id; pass non-negative integers separated by commas, e.g. '50256,464'");
        ids.push_back((int)v);
        pos = end + 1;
    }
    return ids;
}

// "1024, 2048" -> {1024, 2048} for --bench-contexts and --bench-prompt (`flag`); each entry a positive integer.
inline std::vector<int> parse_length_list(const std::string& s, const char* flag) {
    std::vector<int> out;
    try {
        out = parse_token_ids(s);
    } catch (const InputError&) { out.clear(); }
    bool ok = !out.empty();
    for (int v : out) ok = ok && v > 0;
    if (!ok)
        throw InputError(std::string(flag) + ": '" + s +
                         "' is not a list of positive lengths; pass e.g. '1024,2048,4096'");
    return out;
}

}  // namespace llmc
