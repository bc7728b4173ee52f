// The command line: one CLI11 definition per flag, bound straight into TrainConfig, so --help,
// the parser and the --config file format can never disagree. docs/training.md lists them.
#pragma once
#include <cctype>
#include <cstdio>
#include <cstring>
#include <istream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "llmc/app/cli_checks.h"
#include "llmc/app/train_config.h"

namespace llmc {

// The --config reader: CLI11 2.1's TOML reader with two of its bugs worked around (both found by
// test/fuzz/fuzz_config.cpp; CLI11 2.1.2 is Debian's):
//   - it cuts a value at its first '#' even inside quotes, so output-dir="runs/#3" read back as
//     "runs/ : here the '#' of a quoted value is hidden from it behind a marker and restored after;
//   - a quoted value with a ',' or a space goes through its list splitter, which reads backslash-quote
//     as an escaped quote (a value ending in a backslash, written "a,b\", read back as a,b\") and then
//     strips a second pair of quotes (the value 'a b', written "'a b'", read back as a b): a backslash
//     and the other kind of quote inside quotes are hidden the same way, so what is inside a quoted
//     value is always literal (as CLI11 writes it);
//   - it reads "seed=[]", or a '[' list still open at the end of the file, as an item with no value
//     and then indexes its empty value list (undefined behaviour): such items are refused.
class CheckedConfigFile : public CLI::ConfigTOML {
public:
    std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
        std::string text, line;
        while (std::getline(input, line)) text += hide_inside_quotes(line) + "\n";
        std::istringstream hidden(text);
        std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(hidden);
        for (CLI::ConfigItem& it : items) {
            if (it.inputs.empty() && it.name != "++" && it.name != "--")  // "++"/"--": a [section] starts/ends
                throw CLI::ConfigError("config file: '" + restore(it.fullname()) +
                                       "' has no value (an empty or unclosed [ list); give it one value");
            it.name = restore(it.name);
            for (std::string& v : it.inputs) v = restore(v);
        }
        return items;
    }

private:
    // kMark '1' stands for kMark itself; inside quotes kMark '2' for '#', kMark '3' for a backslash,
    // kMark '4' for a single quote, kMark '5' for a double quote (the kind that did not open the value)
    static constexpr char kMark = '\x01';
    static constexpr char kHidden[] = "#\\'\"";  // the characters kMark '2'..'5' stand for
    static std::string hide_inside_quotes(const std::string& line) {
        std::string out;
        char quote = 0;      // the open quote of a value, or 0
        bool value = false;  // past the first '='
        for (char c : line) {
            if (c == kMark) { out += kMark; out += '1'; continue; }
            const char* hidden = quote != 0 && c != quote && c != 0 ? std::strchr(kHidden, c) : nullptr;
            if (hidden != nullptr) { out += kMark; out += (char)('2' + (hidden - kHidden)); continue; }
            if (quote != 0 && c == quote) quote = 0;
            else if (quote == 0 && value && (c == '"' || c == '\'')) quote = c;
            else if (c == '=') value = true;
            out += c;
        }
        return out;
    }
    static std::string restore(const std::string& s) {
        std::string out;
        for (size_t i = 0; i < s.size(); i++) {
            if (s[i] == kMark && i + 1 < s.size()) {
                const char code = s[++i];
                out += code >= '2' && code <= '5' ? kHidden[code - '2'] : kMark;
            } else {
                out += s[i];
            }
        }
        return out;
    }
};

class TrainCli {
public:
    TrainCli() : app_("train_gpt2_ls: train a GPT-2 with LS-attention (local sliding-window + global heads)") {
        CLI::App& a = app_;
        TrainConfig& c = cfg_;
        a.set_config("--config", "", "read flags from a TOML/INI file (as written to <out>/config.toml)");
        a.config_formatter(std::make_shared<CheckedConfigFile>());
        a.get_formatter()->column_width(34);
        a.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
        // data and output
        a.add_option("-i,--train-data", c.train_data, "glob of training shards, e.g. 'data/shards/x/train_*.bin'");
        a.add_option("-j,--val-data", c.val_data, "glob of validation shards ('' = no validation)");
        a.add_option("-o,--output-dir", c.output_dir, "directory for metrics, logit stats, checkpoints ('' = write nothing)");
        a.add_option("-e,--model", c.model, "preset (ls-small, d6, d12, ...) or a checkpoint file (ours or llm.c's GPT-2)")
            ->capture_default_str();
        // batch
        a.add_option("-b,--batch-size", c.batch_size, "B: sequences per micro-batch")->capture_default_str();
        a.add_option("-t,--seq-len", c.seq_len, "T: tokens per sequence")->capture_default_str();
        a.add_option("-d,--total-batch-size", c.total_batch_size,
                     "tokens per optimizer step; gradient accumulation = d/(B*T*processes); -1 = B*T*processes")
            ->capture_default_str();
        // optimization
        a.add_option("-x,--max-steps", c.max_steps, "optimizer steps; -1 = one epoch of the training data")->capture_default_str();
        a.add_option("-l,--learning-rate", c.learning_rate, "peak learning rate")->capture_default_str();
        a.add_option("-u,--warmup-steps", c.warmup_steps, "linear warmup steps")->capture_default_str();
        a.add_option("-q,--final-lr-frac", c.final_lr_frac, "final learning rate as a fraction of the peak")->capture_default_str();
        a.add_option("-k,--lr-schedule", c.lr_schedule, "cosine | linear | constant | wsd")->capture_default_str();
        a.add_option("--wsd-decay-frac", c.wsd_decay_frac, "wsd: fraction of the post-warmup steps spent decaying")->capture_default_str();
        a.add_option("-c,--weight-decay", c.weight_decay, "AdamW decoupled weight decay (matrices, embeddings)")->capture_default_str();
        a.add_option("--beta1", c.beta1, "AdamW beta1")->capture_default_str();
        a.add_option("--beta2", c.beta2, "AdamW beta2")->capture_default_str();
        a.add_option("--eps", c.eps, "AdamW epsilon")->capture_default_str();
        a.add_option("--grad-clip", c.grad_clip, "clip the global gradient norm to this (0 = off)")->capture_default_str();
        a.add_option("--z-loss", c.z_loss, "weight of the z-loss W * logsumexp(logits)^2 (0 = off; PaLM uses 1e-4)")->capture_default_str();
        a.add_option("--seed", c.seed, "seed of weight init, data shuffling and sampling")->capture_default_str();
        a.add_option("--shuffle", c.shuffle, "1 = shuffle the training data (seeded), 0 = read it in order")->capture_default_str();
        // model (each overrides the preset of -e)
        o_layers_ = a.add_option("--layers", layers_, "L: transformer blocks");
        o_channels_ = a.add_option("--channels", channels_, "C: model width");
        o_heads_ = a.add_option("--heads", heads_, "NH: attention heads per layer");
        o_global_ = a.add_option("--global-heads", global_heads_, "G: global heads (the last G); G = NH is plain MHSA");
        o_window_ = a.add_option("--window", window_, "P: a local head's window (query i sees keys i-P < j <= i)");
        o_vocab_ = a.add_option("--vocab", vocab_, "V: vocabulary (default: from the data's meta.json / tokenizer.bin, else 50257)");
        o_maxT_ = a.add_option("--max-seq-len", max_seq_len_, "maxT: rows of the position embedding");
        o_softcap_ = a.add_option("--attn-softcap", softcap_, "soft-cap attention logits s -> c*tanh(s/c) (0 = off)");
        // bound to bools: in a config file "qk-norm=false" (config.toml writes every flag) must mean off
        a.add_flag("--qk-norm", qknorm_, "LayerNorm over the head dimension on q and k");
        a.add_flag("--untie-embeddings", untie_, "separate LM head instead of sharing the token embedding");
        // evaluation, samples
        a.add_option("-v,--val-every", c.val_every, "validation loss every N steps (0 = never) and at the end")->capture_default_str();
        o_val_batches_ = a.add_option("-m,--val-batches", c.val_batches,
                                      "validation batches (-1 = all; --eval-only defaults to all)")->capture_default_str();
        a.add_option("-s,--sample-every", c.sample_every, "print a sample every N steps (0 = never)")->capture_default_str();
        a.add_option("-g,--gen-tokens", c.gen_tokens, "tokens per sample")->capture_default_str();
        a.add_option("--temperature", c.temperature, "sampling temperature")->capture_default_str();
        // checkpoints
        a.add_option("-n,--checkpoint-every", c.checkpoint_every, "checkpoint every N steps (0 = only at the end; needs -o)")->capture_default_str();
        a.add_option("-y,--resume", c.resume, "1 = resume from the newest complete checkpoint in -o")->capture_default_str();
        a.add_option("--keep-checkpoints", c.keep_checkpoints, "keep the newest K checkpoints (0 = all)")->capture_default_str();
        // statistics, spikes
        a.add_option("--logit-stats-every", c.logit_stats_every, "write attention-logit statistics every N steps (0 = never)")->capture_default_str();
        o_near_ = a.add_option("--near", near_,
                               "N: logit statistics split keys at distance i-j < N (near) vs >= N (far), for every head "
                               "(default: the model's --window P; CPU backend only)");
        a.add_option("--skip-spikes", c.skip_spikes, "skip updates whose loss or grad-norm z-score exceeds Z (0 = never)")->capture_default_str();
        a.add_option("--spike-window", c.spike_window, "W: steps in the spike detector's moving window")->capture_default_str();
        a.add_option("--spike-z", c.spike_z, "z-score above which a step is logged as a spike")->capture_default_str();
        a.add_option("--qk-clip", c.qk_clip, "QK-Clip: after each step, scale the q and k projections of every head whose max logit S exceeded TAU by sqrt(TAU/S) (0 = off)")->capture_default_str();
        a.add_option("--logit-alarm", c.logit_alarm, "flag a step whose max attention logit has z-score > Z over the last --spike-window steps; checkpoint it (0 = off)")->capture_default_str();
        a.add_option("--logit-alarm-above", c.logit_alarm_above, "flag a step whose max attention logit exceeds X; checkpoint it (0 = off)")->capture_default_str();
        a.add_option("--logit-alarm-cooldown", c.logit_alarm_cooldown, "at most one logit-alarm checkpoint per N steps")->capture_default_str();
        // modes, machine
        a.add_flag("--eval-only", c.eval_only, "load -e, report the mean loss over -j, and exit");
        a.add_option("--dump-logits", c.dump_logits, "--eval-only: write the first batch's logits, raw float32 (B, T, V)");
        a.add_option("--dump-attention", c.dump_attention,
                     "--eval-only: write the attention probabilities of heads L:H[,L:H...] for the first sequence "
                     "to -o DIR/attn_L<l>_H<h>.npy, float32 (T, T) (CPU backend)");
        a.add_option("--device", c.device, "auto | cpu | cuda")->capture_default_str();
        a.add_option("--threads", c.threads, "OpenMP threads (0 = OpenMP's default)")->capture_default_str();
        // data parallelism (docs/multigpu.md); the launch flags are per process, so not in config files
        a.add_option("-z,--zero-stage", c.zero_stage, "0 = every rank keeps all AdamW state, 1 = ZeRO-1 (sharded)")
            ->capture_default_str();
        a.add_option("--rank", c.flag_rank, "this process's rank (default: from mpirun or Slurm)")->configurable(false);
        a.add_option("--world-size", c.flag_world_size, "number of processes (default: from mpirun or Slurm)")
            ->configurable(false);
        a.add_option("--local-rank", c.flag_local_rank, "rank within the node = GPU index (default: from mpirun or Slurm)")
            ->configurable(false);
        a.add_option("--rendezvous", c.rendezvous, "CUDA without MPI: shared directory for the NCCL bootstrap")
            ->configurable(false);
        a.add_option("--debug-fail-rank", c.debug_fail_rank, "test hook: this rank fails in step 1")
            ->configurable(false)->group("");
        // Numbers: white space around them is removed, an empty value refused (llmc/app/cli_checks.h). Text: values config.toml cannot hold
        // are refused: a line break or NUL byte (one line per flag), a double quote (CLI11 writes and
        // reads quotes without escapes), a space at either end (CLI11 writes " 64" unquoted, as a
        // number, and reads back "64")
        const CLI::Validator one_line(
            [](std::string& v) {
                if (v.find_first_of(std::string("\n\r\0\"", 4)) != std::string::npos)
                    return std::string("contains a line break, NUL byte or double quote; give a value without one");
                if (!v.empty() && (std::isspace((unsigned char)v.front()) || std::isspace((unsigned char)v.back())))
                    return std::string("starts or ends with a space; remove it");
                return std::string();
            },
            "");
        check_flag_values(a);
        for (CLI::Option* opt : a.get_options())
            if (opt->get_type_size() > 0 && opt->get_type_name() == "TEXT") opt->check(one_line);
    }

    // Parses argv. Returns -1 to go on, else the process exit code (0 after --help; 1 after a
    // parse error, printed as one line "error: ...").
    int parse(int argc, const char* const* argv) {
        try {
            app_.parse(argc, argv);
        } catch (const CLI::CallForHelp& e) {
            return app_.exit(e);
        } catch (const CLI::CallForAllHelp& e) {
            return app_.exit(e);
        } catch (const CLI::ParseError& e) {
            std::fprintf(stderr, "error: %s; run with --help for the flags\n", e.what());
            return 1;
        }
        ModelOverrides& o = cfg_.overrides;
        if (o_layers_->count()) o.layers = layers_;
        if (o_channels_->count()) o.channels = channels_;
        if (o_heads_->count()) o.heads = heads_;
        if (o_global_->count()) o.global_heads = global_heads_;
        if (o_window_->count()) o.window = window_;
        if (o_vocab_->count()) o.vocab = vocab_;
        if (o_maxT_->count()) o.max_seq_len = max_seq_len_;
        if (o_softcap_->count()) o.attn_softcap = softcap_;
        o.qk_norm = qknorm_;
        o.untie_embeddings = untie_;
        cfg_.val_batches_given = o_val_batches_->count() > 0;
        if (o_near_->count()) cfg_.near = near_;
        return -1;
    }

    const TrainConfig& config() const { return cfg_; }
    // The flags as a TOML file that --config reads back: every flag with its value or default;
    // unset flags without a default (the model overrides, empty strings) are left out.
    std::string config_file_text() const {
        std::string all = app_.config_to_str(true, false), out;
        size_t pos = 0;
        while (pos < all.size()) {
            size_t end = all.find('\n', pos);
            if (end == std::string::npos) end = all.size();
            std::string line = all.substr(pos, end - pos);
            const bool unset = line.size() >= 3 && line.compare(line.size() - 3, 3, "=\"\"") == 0;
            if (!line.empty() && !unset) out += line + "\n";
            pos = end + 1;
        }
        return out;
    }
    std::string help() const { return app_.help(); }

private:
    CLI::App app_;
    TrainConfig cfg_;
    int layers_ = 0, channels_ = 0, heads_ = 0, global_heads_ = 0, window_ = 0, vocab_ = 0, max_seq_len_ = 0;
    float softcap_ = 0.0f;
    bool qknorm_ = false, untie_ = false;
    int near_ = 0;                     // --near, copied into cfg_.near when given
    CLI::Option* o_near_ = nullptr;
    CLI::Option *o_layers_, *o_channels_, *o_heads_, *o_global_, *o_window_, *o_vocab_, *o_maxT_,
        *o_softcap_, *o_val_batches_;
};

}  // namespace llmc
