// The training loop and --eval-only, written once against llmc/core/backend.h so the CPU and CUDA
// backends run the same code. train_gpt2_ls.cu parses the flags (llmc/app/cli.h), picks the device
// and calls run_training() or run_eval() with a factory that builds the backend.
//
// run_training's phases (nothing is written before every check has passed, so bad flags or a bad
// checkpoint leave the output directory untouched):
//   plan_run        the model (preset + flags, or a checkpoint given with -e), the vocabulary of
//                   the data, accumulation, the loaders (shard headers are validated), the
//                   checkpoint to resume from; refuses impossible combinations with one line.
//                   Reads files only.
//   LoopState       the loop's resumable state (llmc/train/loop_state.h), restored from the checkpoint
//   build_model     the backend with the starting weights and AdamW state (ZeRO-1 shard with -z 1)
//   open_outputs    <out>/.lock (llmc/io/output_lock.h; rank 0), config.json + config.toml,
//                   metrics.jsonl and logit_stats.jsonl
//   then per step s = 1..max_steps: train_step (zero grads; accum x (next batch, forward,
//   backward(1/accum)); grad norm; skip the update when loss or norm is non-finite or
//   (--skip-spikes) a spike; clip; AdamW with lr(s-1); QK-Clip; spike windows; logit alarm), then
//   validation, report_step (console line, metrics record, logit stats), a sample and
//   save_checkpoint, each when due. A checkpoint of step s therefore holds everything after step
//   s's records, and a resumed run continues at step s+1 exactly as an uninterrupted one.
// A second run on the same -o is refused in plan_run (before it reads checkpoints) or open_outputs (a race).
//
// Several processes (docs/multigpu.md; rank and world size come from the Collective): each rank
// reads rows r*B .. r*B+B-1 of every global batch (RankSplit::Rows); the gradients are averaged
// over the ranks (Backend::all_reduce_grads), or with -z 1 reduce-scattered into ZeRO-1 shards
// (llmc/dist/zero.h); loss, norm, validation loss and logit statistics are reduced over the ranks so
// every rank takes the same decisions. Console, metrics, statistics, samples, config files, model
// files and DONE markers come from rank 0; every rank writes its own training-state file, and a
// barrier precedes the marker. On resume the ranks agree on the newest step all of them can load.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/train_config.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/flops.h"
#include "llmc/core/logit_stats.h"
#include "llmc/core/model_config.h"
#include "llmc/dist/collective.h"
#include "llmc/dist/zero.h"
#include "llmc/io/atomic_file.h"
#include "llmc/io/attention_dump.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/data_vocab.h"
#include "llmc/io/dataloader.h"
#include "llmc/io/metrics.h"
#include "llmc/io/output_lock.h"
#include "llmc/io/train_state.h"
#include "llmc/text/sampler.h"
#include "llmc/text/tokenizer.h"
#include "llmc/train/logit_alarm.h"
#include "llmc/train/loop_state.h"
#include "llmc/train/qk_clip.h"
#include "llmc/train/run_plan.h"
#include "llmc/train/schedule.h"
#include "llmc/train/spikes.h"
#include "llmc/train/step_report.h"
#include "llmc/train/train_step.h"
#include "llmc/train/training_model.h"

namespace llmc {

// ---------------------------------------------------------------------------------------------
// setup: model, validation

// A JSON value for an error line: a number, string, bool or null as written (ASCII, at most 40
// characters), else its type ("array", "object"; dumping a deeply nested one would recurse per level).
inline std::string json_value_brief(const nlohmann::ordered_json& v) {
    if (!v.is_primitive()) return v.type_name();
    return v.dump(-1, ' ', true, nlohmann::ordered_json::error_handler_t::replace).substr(0, 40);
}

inline bool is_regular_file(const std::string& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
}

struct ModelSetup {
    ModelConfig config;
    std::string source;                 // "preset ls-small" or the checkpoint path
    std::optional<ModelCheckpoint> init;  // weights when -e is a checkpoint
};

// Model flags given together with a checkpoint must agree with it (they cannot change it).
inline void check_overrides_match(const ModelConfig& ck, const ModelOverrides& o, const std::string& path) {
    auto mismatch = [&](const char* flag, double given, double have) {
        if (given != have)
            throw InputError(std::string(flag) + " " + std::to_string(given) + " contradicts the checkpoint " + path +
                             " (which has " + std::to_string(have) + "); drop the flag, a checkpoint fixes the model");
    };
    if (o.layers) mismatch("--layers", *o.layers, ck.num_layers);
    if (o.channels) mismatch("--channels", *o.channels, ck.channels);
    if (o.heads) mismatch("--heads", *o.heads, ck.num_heads);
    if (o.global_heads) mismatch("--global-heads", *o.global_heads, ck.global_heads);
    if (o.window) mismatch("--window", *o.window, ck.window);
    if (o.vocab) mismatch("--vocab", *o.vocab, ck.vocab_size);
    if (o.max_seq_len) mismatch("--max-seq-len", *o.max_seq_len, ck.max_seq_len);
    if (o.attn_softcap) mismatch("--attn-softcap", *o.attn_softcap, ck.attn_softcap);
    if (o.qk_norm && !ck.qk_norm) mismatch("--qk-norm", 1, 0);
    if (o.untie_embeddings && ck.tied_embeddings) mismatch("--untie-embeddings", 1, 0);
}

// -e: a checkpoint file (ours or llm.c's) or a preset, then the model flags on top of a preset.
// data_vocab (-1 = unknown) becomes V when --vocab is not given.
inline ModelSetup resolve_model(const TrainConfig& cfg, int data_vocab) {
    ModelSetup m;
    if (is_regular_file(cfg.model)) {
        m.init = load_model_checkpoint(cfg.model);
        m.config = m.init->config;
        m.source = cfg.model + (m.init->from_llmc ? " (llm.c GPT-2 checkpoint, all heads global)" : "");
        check_overrides_match(m.config, cfg.overrides, cfg.model);
    } else {
        if (!is_model_preset(cfg.model))
            throw InputError("-e '" + cfg.model + "' is neither an existing checkpoint file nor a preset "
                             "(ls-small, d6, d12, ...); check the path");
        m.config = model_preset(cfg.model);
        if (!cfg.overrides.vocab && data_vocab > 0) {
            m.config.vocab_size = data_vocab;
            m.config.padded_vocab_size = pad_vocab(data_vocab);
        }
        apply_overrides(m.config, cfg.overrides);
        m.source = "preset " + cfg.model;
    }
    const std::string err = validate_model_config(m.config);
    if (!err.empty()) throw InputError(err);
    return m;
}

// Flags that do not depend on the model. Throws InputError naming the flag and the fix.
inline void validate_train_flags(const TrainConfig& c) {
    auto fail = [](const std::string& msg) { throw InputError(msg); };
    auto s = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return std::string(buf);
    };
    check_dump_attention_flags(c);  // --dump-attention: --eval-only, -o, not --device cuda, its syntax
    if (c.eval_only) {
        if (c.val_data.empty()) fail("--eval-only needs -j VAL_GLOB, the shards to evaluate on");
    } else {
        if (c.train_data.empty()) fail("no training data: give -i 'DIR/train_*.bin' (make shards with data/prepare.py)");
        if (!c.dump_logits.empty()) fail("--dump-logits works with --eval-only only; add --eval-only");
    }
    if (c.batch_size < 1) fail("-b/--batch-size must be >= 1 (got " + s(c.batch_size) + ")");
    if (c.seq_len < 1) fail("-t/--seq-len must be >= 1 (got " + s(c.seq_len) + ")");
    if (c.total_batch_size != -1 && c.total_batch_size < 1)
        fail("-d/--total-batch-size must be -1 (= B*T*processes) or a positive number of tokens");
    if (c.max_steps < -1) fail("-x/--max-steps must be -1 (one epoch) or >= 0 (got " + s(c.max_steps) + ")");
    if (!(c.learning_rate >= 0)) fail("-l/--learning-rate must be >= 0");
    if (c.warmup_steps < 0) fail("-u/--warmup-steps must be >= 0");
    if (!(c.final_lr_frac >= 0 && c.final_lr_frac <= 1)) fail("-q/--final-lr-frac must be in [0, 1] (got " + s(c.final_lr_frac) + ")");
    parse_lr_schedule(c.lr_schedule);
    if (!(c.wsd_decay_frac >= 0 && c.wsd_decay_frac <= 1)) fail("--wsd-decay-frac must be in [0, 1]");
    if (!(c.weight_decay >= 0)) fail("-c/--weight-decay must be >= 0");
    if (!(c.beta1 >= 0 && c.beta1 < 1)) fail("--beta1 must be in [0, 1) (got " + s(c.beta1) + ")");
    if (!(c.beta2 >= 0 && c.beta2 < 1)) fail("--beta2 must be in [0, 1) (got " + s(c.beta2) + ")");
    if (!(c.eps > 0)) fail("--eps must be > 0");
    if (!(c.grad_clip >= 0)) fail("--grad-clip must be >= 0 (0 = off)");
    if (!(c.z_loss >= 0)) fail("--z-loss must be >= 0 (0 = off)");
    if (c.val_every < 0) fail("-v/--val-every must be >= 0 (0 = never)");
    if (c.val_batches == 0 || c.val_batches < -1) fail("-m/--val-batches must be -1 (all) or >= 1");
    if (c.sample_every < 0) fail("-s/--sample-every must be >= 0 (0 = never)");
    if (c.gen_tokens < 0) fail("-g/--gen-tokens must be >= 0");
    if (!(c.temperature > 0)) fail("--temperature must be > 0");
    if (c.checkpoint_every < 0) fail("-n/--checkpoint-every must be >= 0 (0 = only at the end)");
    if (c.resume != 0 && c.resume != 1) fail("-y/--resume must be 0 or 1");
    if (c.resume && c.output_dir.empty()) fail("-y 1 resumes from the checkpoints in -o; give -o DIR");
    if (c.checkpoint_every > 0 && c.output_dir.empty()) fail("-n needs -o DIR to write checkpoints into");
    if (c.keep_checkpoints < 0) fail("--keep-checkpoints must be >= 0 (0 = keep all)");
    if (c.logit_stats_every < 0) fail("--logit-stats-every must be >= 0 (0 = never)");
    if (c.near && *c.near < 1) fail("--near must be >= 1 (got " + s(*c.near) + "); drop it to split at the model's --window");
    if (!(c.skip_spikes >= 0)) fail("--skip-spikes must be >= 0 (0 = never skip)");
    if (c.spike_window < 2) fail("--spike-window must be >= 2 (got " + s(c.spike_window) + ")");
    if (!(c.spike_z > 0)) fail("--spike-z must be > 0");
    if (!(c.qk_clip >= 0)) fail("--qk-clip must be >= 0 (0 = off; e.g. 100, Kimi K2's threshold)");
    if (!(c.logit_alarm >= 0)) fail("--logit-alarm must be >= 0 (0 = off; e.g. 6, a z-score)");
    if (!(c.logit_alarm_above >= 0)) fail("--logit-alarm-above must be >= 0 (0 = off)");
    if (c.logit_alarm_cooldown < 1) fail("--logit-alarm-cooldown must be >= 1 (steps between alarm checkpoints)");
    if (c.threads < 0) fail("--threads must be >= 0 (0 = OpenMP's default)");
    if (c.shuffle != 0 && c.shuffle != 1) fail("--shuffle must be 0 or 1");
    if (c.zero_stage != 0 && c.zero_stage != 1) fail("-z/--zero-stage must be 0 or 1 (got " + s(c.zero_stage) + ")");
}

// Checks that need the model: sequence length, batch divisibility, vocabulary vs the data.
// Returns the gradient-accumulation steps.
inline int validate_run(const TrainConfig& c, const ModelConfig& m, int data_vocab, const std::string& vocab_source) {
    if (c.seq_len > m.max_seq_len)
        throw InputError("-t " + std::to_string(c.seq_len) + " exceeds the model's --max-seq-len " +
                         std::to_string(m.max_seq_len) + "; use -t <= " + std::to_string(m.max_seq_len) +
                         " or a larger --max-seq-len");
    if (data_vocab > m.vocab_size)
        throw InputError("the model's vocabulary " + std::to_string(m.vocab_size) + " is smaller than the data's " +
                         std::to_string(data_vocab) + " (from " + vocab_source + "); use --vocab >= " +
                         std::to_string(data_vocab) + " or drop --vocab");
    if (c.qk_clip > 0 && m.qk_norm)
        throw InputError("--qk-clip with --qk-norm: QK-norm normalizes q and k, so scaling their projections changes "
                         "no logit; use one of the two");
    const long per_micro = (long)c.batch_size * c.seq_len * c.world_size;
    if (c.total_batch_size == -1) return 1;
    if (c.total_batch_size % per_micro != 0)
        throw InputError("-d " + std::to_string(c.total_batch_size) + " is not a multiple of B*T*processes = " +
                         std::to_string(c.batch_size) + "*" + std::to_string(c.seq_len) + "*" +
                         std::to_string(c.world_size) + " = " + std::to_string(per_micro) + "; use -d " +
                         std::to_string(per_micro) + " times the gradient-accumulation steps");
    return (int)(c.total_batch_size / per_micro);
}

inline std::string describe_model(const ModelConfig& m, size_t num_params) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "L %d, C %d, NH %d (hd %d; %d global, %d local with window %d), maxT %d, V %d (Vp %d)%s%s%s, %.2fM params",
                  m.num_layers, m.channels, m.num_heads, m.head_size(), m.global_heads, m.local_heads(), m.window,
                  m.max_seq_len, m.vocab_size, m.padded_vocab_size, m.qk_norm ? ", qk-norm" : "",
                  m.attn_softcap > 0 ? (", softcap " + std::to_string(m.attn_softcap)).c_str() : "",
                  m.tied_embeddings ? "" : ", untied", num_params / 1e6);
    return buf;
}

// config.json / eval.json text. Paths and names are bytes that need not be UTF-8 (an -o directory
// with a Latin-1 name): each invalid byte is written as U+FFFD instead of nlohmann throwing
// type_error 316 (found by test/fuzz/fuzz_config.cpp).
inline std::string json_file_text(const nlohmann::ordered_json& j) {
    return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

inline nlohmann::ordered_json model_config_json(const ModelConfig& m) {
    return {{"max_seq_len", m.max_seq_len}, {"vocab_size", m.vocab_size}, {"padded_vocab_size", m.padded_vocab_size},
            {"num_layers", m.num_layers},   {"num_heads", m.num_heads},   {"channels", m.channels},
            {"global_heads", m.global_heads}, {"window", m.window},       {"qk_norm", m.qk_norm},
            {"attn_softcap", m.attn_softcap}, {"tied_embeddings", m.tied_embeddings}};
}

inline nlohmann::ordered_json train_config_json(const TrainConfig& c) {
    return {{"train_data", c.train_data}, {"val_data", c.val_data}, {"output_dir", c.output_dir},
            {"model", c.model}, {"batch_size", c.batch_size}, {"seq_len", c.seq_len},
            {"total_batch_size", c.total_batch_size}, {"max_steps", c.max_steps},
            {"learning_rate", c.learning_rate}, {"warmup_steps", c.warmup_steps},
            {"final_lr_frac", c.final_lr_frac}, {"lr_schedule", c.lr_schedule},
            {"wsd_decay_frac", c.wsd_decay_frac}, {"weight_decay", c.weight_decay}, {"beta1", c.beta1},
            {"beta2", c.beta2}, {"eps", c.eps}, {"grad_clip", c.grad_clip}, {"z_loss", c.z_loss},
            {"seed", c.seed}, {"shuffle", c.shuffle}, {"val_every", c.val_every}, {"val_batches", c.val_batches},
            {"sample_every", c.sample_every}, {"gen_tokens", c.gen_tokens}, {"temperature", c.temperature},
            {"checkpoint_every", c.checkpoint_every}, {"resume", c.resume},
            {"keep_checkpoints", c.keep_checkpoints}, {"logit_stats_every", c.logit_stats_every},
            {"near", c.near ? nlohmann::ordered_json(*c.near) : nlohmann::ordered_json(nullptr)},
            {"skip_spikes", c.skip_spikes}, {"spike_window", c.spike_window}, {"spike_z", c.spike_z},
            {"qk_clip", c.qk_clip}, {"logit_alarm", c.logit_alarm}, {"logit_alarm_above", c.logit_alarm_above},
            {"logit_alarm_cooldown", c.logit_alarm_cooldown},
            {"device", c.device}, {"threads", c.threads}, {"world_size", c.world_size},
            {"zero_stage", c.zero_stage}};
}

// ---------------------------------------------------------------------------------------------
// pieces shared by training and --eval-only

// Mean cross-entropy over `batches` validation batches (from the loader's start).
// Each rank evaluates its rows of every batch; the result is the mean over the ranks.
inline double evaluate(Backend& model, DataLoader& loader, int B, int T, int64_t batches, std::vector<int>& inputs,
                       std::vector<int>& targets, Collective& comm) {
    loader.reset();
    double sum = 0.0;
    for (int64_t i = 0; i < batches; i++) {
        loader.next_batch(inputs.data(), targets.data());
        sum += model.forward(inputs.data(), targets.data(), B, T, 0.0f, nullptr).loss;
    }
    return comm.all_reduce_double(sum / (double)batches, ReduceOp::Avg);
}

// ---------------------------------------------------------------------------------------------
// plan_run: what the run will do, from the flags and the files (reads only; no backend)

// The model and the vocabulary of the data in data_glob, checked against the flags (the first part
// of a plan; all that --eval-only needs).
inline void plan_model(const TrainConfig& cfg, const std::string& data_glob, RunPlan& p) {
    p.data_vocab = data_vocab_size(data_glob, &p.vocab_source);
    ModelSetup ms = resolve_model(cfg, p.data_vocab);
    p.model = ms.config;
    p.model_source = ms.source;
    p.init = std::move(ms.init);
    p.accum = validate_run(cfg, p.model, p.data_vocab, p.vocab_source);
}

// Every check that needs no backend, in the order a user meets them: flags, model and vocabulary,
// data (shard headers), output directory and checkpoint. Reads files, writes none.
inline RunPlan plan_run(const TrainConfig& cfg, Collective& comm) {
    RunPlan p;
    validate_train_flags(cfg);
    plan_model(cfg, cfg.train_data, p);
    const int V = p.model.vocab_size;
    p.train = open_loader(cfg, cfg.train_data, cfg.shuffle == 1, V);
    if (!cfg.val_data.empty()) p.val = open_loader(cfg, cfg.val_data, false, V);
    p.max_steps = cfg.max_steps >= 0 ? cfg.max_steps : (int)std::max<int64_t>(1, p.train->batches_per_epoch() / p.accum);
    p.val_batches = p.val ? val_batch_count(cfg, *p.val, false) : 0;
    p.resume = choose_resume(cfg, p.model, comm);
    p.schedule = schedule_config(cfg, p.max_steps);
    p.adamw = adamw_hyper(cfg);
    return p;
}

// ---------------------------------------------------------------------------------------------
// open_outputs: what the run writes besides checkpoints, and its console header

// Held until run_training returns: the lock of -o and the open record files (rank 0; elsewhere
// closed, and writing to them does nothing).
struct RunOutputs {
    Tokenizer tokenizer;        // decodes the samples (absent: they print as token ids)
    std::string tokenizer_note;
    JsonlWriter metrics, logit_log;
    OutputLock lock;
};

// config.json: the flags, the model and what the run derived from them.
inline nlohmann::ordered_json run_config_json(const TrainConfig& cfg, const RunPlan& plan, const TrainingModel& model) {
    const ModelConfig& m = plan.model;
    return {{"train", train_config_json(cfg)},
            {"model", model_config_json(m)},
            {"derived", {{"model_source", plan.model_source},
                         {"vocab_source", plan.data_vocab > 0 ? plan.vocab_source : "default"},
                         {"grad_accum_steps", plan.accum},
                         {"tokens_per_step", (long)cfg.batch_size * cfg.seq_len * plan.accum * cfg.world_size},
                         {"max_steps", plan.max_steps},
                         {"num_params", model.backend->num_params()},
                         {"device", model.device},
                         {"world_size", cfg.world_size},
                         {"zero_stage", cfg.zero_stage},
                         {"flops_per_token", flops_per_token(m, cfg.seq_len)},
                         {"resumed_from_step", plan.start_step()}}}};
}

// The samples' tokenizer; with -o the directory, its lock (rank 0), config.json + config.toml and
// the record files (after a resume: cut back to the checkpoint's step, then appended to).
inline void open_outputs(RunOutputs& o, const TrainConfig& cfg, const RunPlan& plan, const TrainingModel& model,
                         const std::string& config_toml) {
    o.tokenizer = Tokenizer::load_or_absent(glob_dir(cfg.train_data) + "/tokenizer.bin", &o.tokenizer_note);
    const std::string& out = cfg.output_dir;
    if (out.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    if (ec) throw InputError("cannot create output directory " + out + " (" + ec.message() + "); choose another -o");
    if (cfg.rank != 0) return;
    o.lock.acquire(out);
    write_text_file(out + "/config.json", json_file_text(run_config_json(cfg, plan, model)));
    write_text_file(out + "/config.toml", config_toml);
    if (plan.resume) {  // drop records the interrupted run wrote after its checkpoint
        truncate_jsonl_after_step(out + "/metrics.jsonl", plan.start_step());
        truncate_jsonl_after_step(out + "/logit_stats.jsonl", plan.start_step());
    }
    o.metrics.open(out + "/metrics.jsonl", plan.resume.has_value());
    o.logit_log.open(out + "/logit_stats.jsonl", plan.resume.has_value());
}

// The console header (rank 0): device, model, data, batch, and notes on what will not happen.
inline void print_run_header(const TrainConfig& cfg, const RunPlan& plan, const TrainingModel& model,
                             const RunOutputs& o, const Collective& comm) {
    const int B = cfg.batch_size, T = cfg.seq_len, start = plan.start_step(), max_steps = plan.max_steps;
    const DataLoader& train = *plan.train;
    std::printf("train_gpt2_ls | device %s | model %s\n  %s\n", model.device.c_str(), plan.model_source.c_str(),
                describe_model(plan.model, model.backend->num_params()).c_str());
    std::printf("  train: %lld tokens in %zu shard(s), %lld batches/epoch | val: %s\n", (long long)train.total_tokens(),
                train.num_shards(), (long long)train.batches_per_epoch(),
                plan.val ? (std::to_string(plan.val->total_tokens()) + " tokens").c_str() : "none");
    std::printf("  batch: B %d x T %d x accum %d x %d process(es) = %ld tokens/step | %d steps | lr %.2e %s\n", B, T,
                plan.accum, cfg.world_size, (long)B * T * plan.accum * cfg.world_size, max_steps, cfg.learning_rate,
                cfg.lr_schedule.c_str());
    if (cfg.world_size > 1)
        std::printf("  data parallel: %d processes (%s)%s\n", cfg.world_size, comm.name(),
                    cfg.zero_stage == 1 ? ", ZeRO-1: AdamW state sharded" : "");
    if (plan.resume) std::printf("  resumed from %s at step %d\n", model_path(cfg.output_dir, start).c_str(), start);
    if (start >= max_steps && plan.resume)
        std::printf("  note: the checkpoint's step %d is not below -x %d; nothing to train (raise -x to continue)\n",
                    start, max_steps);
    if (!o.tokenizer_note.empty() && cfg.sample_every > 0) std::printf("  note: %s\n", o.tokenizer_note.c_str());
    if (cfg.output_dir.empty()) std::printf("  note: no -o given; nothing is written (metrics, checkpoints)\n");
    std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// after a step: validation, report_step, sample, save_checkpoint

// The validation loss when one is due after `step` (every -v steps and after the last).
inline std::optional<double> validation_loss(const TrainConfig& cfg, const RunPlan& plan, Backend& model,
                                             StepBuffers& buf, Collective& comm, int step) {
    if (!plan.val || cfg.val_every <= 0 || (step % cfg.val_every != 0 && step != plan.max_steps)) return std::nullopt;
    return evaluate(model, *plan.val, cfg.batch_size, cfg.seq_len, plan.val_batches, buf.inputs, buf.targets, comm);
}

// The untrained model's validation loss, as step 0 (a fresh run with -j and -v).
inline void report_step0_validation(const TrainConfig& cfg, const RunPlan& plan, Backend& model, StepBuffers& buf,
                                    RunOutputs& o, Collective& comm) {
    const double vl = evaluate(model, *plan.val, cfg.batch_size, cfg.seq_len, plan.val_batches, buf.inputs, buf.targets, comm);
    if (cfg.rank == 0)
        std::printf("step %*d/%d | val loss %.4f\n", (int)std::to_string(plan.max_steps).size(), 0, plan.max_steps, vl);
    o.metrics.write({{"step", 0}, {"val_loss", json_float(vl)}});
}

// The console line (rank 0), the metrics record and, every --logit-stats-every steps, the logit
// statistics record.
inline void report_step(const TrainConfig& cfg, const RunPlan& plan, const StepResult& r, const LogitStats& stats,
                        std::optional<double> val_loss, Backend& model, RunOutputs& o) {
    // model FLOPs utilization per device and device memory, when the backend knows its peak
    const double peak = model.peak_flops();
    const double mfu =
        peak > 0 ? flops_per_token(plan.model, cfg.seq_len) * r.tokens_per_s / cfg.world_size / peak : -1.0;
    const double mem_gib = (double)model.device_memory_used() / (1024.0 * 1024.0 * 1024.0);
    const std::string alarm_ckpt = r.alarm_checkpoint ? model_path(cfg.output_dir, r.step) : "";
    if (cfg.rank == 0) {
        const std::string line = step_line(r, plan.max_steps, stats, val_loss, mfu, mem_gib, alarm_ckpt, cfg.spike_window);
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
    }
    nlohmann::ordered_json rec = step_record(r, stats, val_loss, cfg.qk_clip > 0);
    if (mfu >= 0) {
        rec["mfu"] = mfu;
        rec["device_memory_bytes"] = model.device_memory_used();
    }
    o.metrics.write(rec);
    if (cfg.logit_stats_every > 0 && r.step % cfg.logit_stats_every == 0)
        o.logit_log.write(logit_stats_record(r.step, stats, plan.model));
}

// --gen-tokens tokens sampled after <|endoftext|> (the last token id without a tokenizer).
inline void print_sample(const TrainConfig& cfg, const ModelConfig& m, Backend& model, const Tokenizer& tok, Rng& rng,
                         int step) {
    const int eot = tok.present() && tok.eot_token() >= 0 ? tok.eot_token() : m.vocab_size - 1;
    std::vector<int> gen = generate(model, {eot}, cfg.gen_tokens, m.max_seq_len, cfg.temperature, rng);
    std::printf("--- sample at step %d ---\n%s\n---\n", step, safe_printable(tok.decode(gen.data(), gen.size())).c_str());
    std::fflush(stdout);
}

// A checkpoint after `step`: every -n steps, after the last step, and when the logit alarm asks.
inline bool checkpoint_due(const TrainConfig& cfg, const RunPlan& plan, const StepResult& r) {
    return !cfg.output_dir.empty() && ((cfg.checkpoint_every > 0 && r.step % cfg.checkpoint_every == 0) ||
                                       r.step == plan.max_steps || r.alarm_checkpoint);
}

// ---------------------------------------------------------------------------------------------
// training

inline int run_training(const TrainConfig& cfg, const BackendFactory& make_backend,
                        const std::string& config_toml, Collective& comm) {
    if (cfg.rank != comm.rank() || cfg.world_size != comm.world_size())
        throw std::logic_error("run_training: cfg.rank/world_size must be the collective's");
    const bool main_rank = cfg.rank == 0;  // console, metrics, samples, model files, markers
    const RunPlan plan = plan_run(cfg, comm);
    if (cfg.resume && !plan.resume && main_rank)
        std::printf("note: -y 1 but %s has no complete checkpoint; starting from step 0\n", cfg.output_dir.c_str());
    LoopState loop(cfg, *plan.train);
    if (plan.resume) loop.from_train_state(plan.resume->state, state_path(cfg.output_dir, plan.resume->step, cfg.rank));
    TrainingModel model = build_model(cfg, plan, make_backend, comm);
    Backend& backend = *model.backend;
    RunOutputs outputs;
    open_outputs(outputs, cfg, plan, model, config_toml);
    if (main_rank) print_run_header(cfg, plan, model, outputs, comm);
    StepBuffers buf(cfg);
    if (!plan.resume && plan.val && cfg.val_every > 0) report_step0_validation(cfg, plan, backend, buf, outputs, comm);

    for (int step = plan.start_step(); step < plan.max_steps;) {
        const StepResult r = train_step(cfg, plan, model, loop, buf, comm, step);
        step = r.step;
        const std::optional<double> val_loss = validation_loss(cfg, plan, backend, buf, comm, step);
        report_step(cfg, plan, r, buf.step, val_loss, backend, outputs);
        if (main_rank && cfg.sample_every > 0 && cfg.gen_tokens > 0 && step % cfg.sample_every == 0)
            print_sample(cfg, plan.model, backend, outputs.tokenizer, loop.sample_rng, step);
        if (checkpoint_due(cfg, plan, r)) save_checkpoint(cfg, plan.model, step, model, loop, comm);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// --eval-only

// --dump-logits: the last forward's logits, (B, T, V) fp32 (the real vocabulary of each row).
inline void write_logits_dump(const std::string& path, Backend& model, int B, int T) {
    const int V = model.config().vocab_size, Vp = model.config().padded_vocab_size;
    std::string bytes;
    bytes.reserve((size_t)B * T * V * sizeof(float));
    const float* lg = model.logits();
    for (size_t r = 0; r < (size_t)B * T; r++)
        bytes.append(reinterpret_cast<const char*>(lg + r * Vp), (size_t)V * sizeof(float));
    write_file_atomic(path, bytes.data(), bytes.size());
}

// The summed loss of `batches` batches of val. From the first one, on rank 0, the --dump-logits
// file and the --dump-attention maps (their paths into *dump_paths).
inline double eval_loss_sum(const TrainConfig& cfg, Backend& model, DataLoader& val, int64_t batches, bool main_rank,
                            const std::vector<DumpHead>& dump_heads, std::vector<std::string>* dump_paths) {
    const int B = cfg.batch_size, T = cfg.seq_len;
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    double sum = 0.0;
    for (int64_t i = 0; i < batches; i++) {
        val.next_batch(inputs.data(), targets.data());
        sum += model.forward(inputs.data(), targets.data(), B, T, 0.0f, nullptr).loss;
        if (i == 0 && main_rank && !cfg.dump_logits.empty()) write_logits_dump(cfg.dump_logits, model, B, T);
        if (i == 0 && main_rank && !dump_heads.empty())  // sequence 0's (T, T) attention probabilities per head
            *dump_paths = write_attention_dumps(model, dump_heads, T, cfg.output_dir);
    }
    return sum;
}

// The console summary of --eval-only and, with -o, <out>/eval.json (rank 0).
inline void report_eval(const TrainConfig& cfg, const RunPlan& plan, const std::string& device, size_t num_params,
                        int64_t batches, double loss, const std::vector<std::string>& dump_paths) {
    const int B = cfg.batch_size, T = cfg.seq_len, V = plan.model.vocab_size;
    const long long tokens = (long long)batches * B * T * cfg.world_size;
    std::printf("eval | device %s | model %s | %s\n", device.c_str(), plan.model_source.c_str(),
                describe_model(plan.model, num_params).c_str());
    std::printf("eval loss %.6f over %lld batches of B %d x T %d%s (%lld tokens) from '%s'\n", loss, (long long)batches,
                B, T, cfg.world_size > 1 ? (" x " + std::to_string(cfg.world_size) + " processes").c_str() : "", tokens,
                cfg.val_data.c_str());
    if (!cfg.dump_logits.empty())
        std::printf("wrote the first batch's logits (%d, %d, %d) float32 to %s\n", B, T, V, cfg.dump_logits.c_str());
    for (const std::string& p : dump_paths)
        std::printf("wrote the attention probabilities (%d, %d) float32 of the first sequence to %s\n", T, T, p.c_str());
    if (cfg.output_dir.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(cfg.output_dir, ec);
    if (ec) throw InputError("cannot create output directory " + cfg.output_dir + " (" + ec.message() + ")");
    nlohmann::ordered_json rec = {{"model", cfg.model}, {"val_data", cfg.val_data}, {"batch_size", B}, {"seq_len", T},
                                  {"batches", batches}, {"tokens", tokens}, {"loss", json_float(loss)}};
    write_text_file(cfg.output_dir + "/eval.json", json_file_text(rec));
}

inline int run_eval(const TrainConfig& cfg, const BackendFactory& make_backend, Collective& comm) {
    validate_train_flags(cfg);
    if (!is_regular_file(cfg.model))
        throw InputError("--eval-only needs -e CHECKPOINT (a model file); '" + cfg.model + "' is not a file");
    RunPlan plan;
    plan_model(cfg, cfg.val_data, plan);
    std::vector<DumpHead> dump_heads;  // --dump-attention
    if (!cfg.dump_attention.empty()) dump_heads = parse_dump_attention(cfg.dump_attention);
    check_dump_attention_heads(dump_heads, plan.model);
    plan.val = open_loader(cfg, cfg.val_data, false, plan.model.vocab_size);
    const int64_t batches = val_batch_count(cfg, *plan.val, true);

    std::unique_ptr<Backend> model = make_backend(plan.model);
    const std::string device = model->device_description();
    if (!dump_heads.empty()) check_dump_attention_backend(*model);
    model->set_params(plan.init->params.data());
    std::vector<std::string> dump_paths;
    const double sum = eval_loss_sum(cfg, *model, *plan.val, batches, comm.rank() == 0, dump_heads, &dump_paths);
    const double loss = comm.all_reduce_double(sum / (double)batches, ReduceOp::Avg);  // the ranks' rows
    if (comm.rank() == 0) report_eval(cfg, plan, device, model->num_params(), batches, loss, dump_paths);
    return 0;
}

}  // namespace llmc
