// The training loop, written once against llmc/core/backend.h so the CPU and CUDA backends run the
// same code. train_gpt2_ls.cu parses the flags (llmc/app/cli.h), picks the device and calls
// run_training() or run_eval() (--eval-only, llmc/train/eval_run.h) with a factory that builds the backend.
//
// run_training's phases (nothing is written before every check has passed, so bad flags or a bad
// checkpoint leave the output directory untouched):
//   plan_run        the model (preset + flags, or a checkpoint given with -e), the data against what
//                   the run expects of it (its record, --expect-*: llmc/app/data_expect.h), the
//                   vocabulary of the data, accumulation, the loaders (shard headers are validated),
//                   the checkpoint to resume from; refuses impossible combinations with one line.
//                   Reads files only.
//   LoopState       the loop's resumable state (llmc/train/loop_state.h), restored from the checkpoint;
//                   then a fork with nothing to train is refused (check_fork_trains)
//   build_model     the backend with the starting weights and AdamW state (ZeRO-1 shard with -z 1)
//   open_outputs    <out>/.lock (llmc/io/output_lock.h; rank 0), config.json + config.toml,
//                   metrics.jsonl and logit_stats.jsonl, console.log and samples.txt (llmc/train/run_log.h)
//   then per step s = 1..max_steps: train_step (zero grads; accum x (next batch, forward,
//   backward(1/accum)); grad norm; skip the update when loss or norm is non-finite or
//   (--skip-spikes) a spike; clip; AdamW with lr(s-1); QK-Clip; spike windows; logit alarm), then
//   validation, report_step (console line, metrics record, logit stats), a sample and
//   save_checkpoint (and its console line), each when due; at the end the summary line. A
//   checkpoint of step s therefore holds everything after step s's records, and a resumed run
//   continues at step s+1 exactly as an uninterrupted one.
//   Then, before the last step, the ranks agree whether a signal asks them to stop (llmc/train/interrupt.h:
//   their votes ride on the step's reduction of the logit statistics): if so, a checkpoint of step s (when
//   none was due) and the exit code. A stdout closed before the first step (the header, step 0's
//   validation) stops the run there with exit status 141: a run this start began leaves no run files, one
//   it continues (-y 1) its config.json as it was (settle_unstarted_run; llmc/train/interrupt.h).
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
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/checkpoint_run.h"
#include "llmc/app/rank_agreement.h"
#include "llmc/app/config_json.h"
#include "llmc/app/config_origin.h"
#include "llmc/app/data_expect.h"
#include "llmc/app/model_setup.h"
#include "llmc/app/model_tokenizer.h"
#include "llmc/app/run_data.h"
#include "llmc/app/run_history.h"
#include "llmc/app/run_record.h"
#include "llmc/app/train_config.h"
#include "llmc/app/validate.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/flops.h"
#include "llmc/core/kernel_profile.h"
#include "llmc/core/logit_stats.h"
#include "llmc/core/model_config.h"
#include "llmc/dist/collective.h"
#include "llmc/dist/zero.h"
#include "llmc/io/atomic_file.h"
#include "llmc/io/attention_dump.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/data_identity.h"
#include "llmc/io/data_roles.h"
#include "llmc/io/data_vocab.h"
#include "llmc/io/dataloader.h"
#include "llmc/io/json_text.h"
#include "llmc/io/metrics.h"
#include "llmc/io/output_lock.h"
#include "llmc/io/train_state.h"
#include "llmc/text/sampler.h"
#include "llmc/text/tokenizer.h"
#include "llmc/train/interrupt.h"
#include "llmc/train/logit_alarm.h"
#include "llmc/train/loop_state.h"
#include "llmc/train/qk_clip.h"
#include "llmc/train/run_data_checks.h"
#include "llmc/train/run_log.h"
#include "llmc/train/run_plan.h"
#include "llmc/train/schedule.h"
#include "llmc/train/spikes.h"
#include "llmc/train/step_report.h"
#include "llmc/train/train_step.h"
#include "llmc/train/training_model.h"

namespace llmc {

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
    check_config_shard_patterns(cfg);
    check_config_near_of_window(cfg);
    // before the model's checks: a vocabulary that changed with the data is the data's fault, not --vocab's
    const bool continued = !cfg.fork_from.empty() || (cfg.resume && newest_complete_step(cfg.output_dir) >= 0);
    if (continued) check_loader_settings_of_config(cfg);
    if (continued) check_data_of_continued_run(cfg);
    else if (!is_model_preset(cfg.model)) check_data_of_init_checkpoint(cfg);
    std::optional<RecordedData> config_record;  // --config RUN/config.json: the data that run recorded
    if (!cfg.config_record.empty()) {
        config_record = recorded_data(read_run_record(cfg.config_record), cfg.config_record);
        if (!config_record->known() && cfg.rank == 0)
            std::fprintf(stderr, "%s\n", unknown_data_note(*config_record).c_str());
        check_data_for_config_record(*config_record, cfg.train_data);  // before the model's vocabulary checks
    }
    check_expected_data(cfg, cfg.train_data, "-i");
    if (!cfg.val_data.empty()) check_expected_data(cfg, cfg.val_data, "-j");
    plan_model(cfg, cfg.train_data, p);
    if (cfg.rank == 0) {
        const std::string notes[] = {larger_vocab_note(cfg, p.model, p.data_vocab, p.vocab_source),
                                     config_total_batch_note(cfg, p.accum)};
        for (const std::string& note : notes)
            if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
    }
    const DataIdentity train_identity = read_data_identity(cfg.train_data);
    p.tokenizer_id = tokenizer_file_id(train_identity);
    if (!continued && !is_model_preset(cfg.model)) {  // a new run from -e FILE: its bytes, recorded and checked
        p.init_identity = file_fnv1a64(cfg.model);
        check_init_weights_of_record(cfg, p.init_identity);
        check_lone_gpt2_checkpoint_data(cfg.model, p.model, p.init && p.init->from_llmc, "-i", cfg.train_data);
        const uint64_t init_tokenizer = p.init ? p.init->tokenizer_id : 0;
        check_model_tokenizer(cfg.model, init_tokenizer, train_identity, "-i '" + cfg.train_data + "'",
                              "give -i data prepared with that tokenizer (data/prepare.py), or -e a model trained on "
                              "this data");
        const std::string notes[] = {
            // a checkpoint with no run beside it: its vocabulary vs the data's, unless its file names the tokenizer
            model_tokenizer_matches(init_tokenizer, train_identity)
                ? ""
                : lone_checkpoint_vocab_note(cfg.model, p.model, p.data_vocab, p.vocab_source, "-i", cfg.train_data),
            retired_checkpoint_note(cfg.model)};
        for (const std::string& note : notes)
            if (!note.empty() && cfg.rank == 0) std::fprintf(stderr, "%s\n", note.c_str());
    } else if (!cfg.fork_from.empty() && !is_model_preset(cfg.model)) {  // a fork records its source's
        p.init_identity = recorded_init_identity(join_path(fork_source(cfg.fork_from).dir, "config.json"));
    }
    if (!cfg.val_data.empty())
        check_same_tokenizer(cfg.train_data, "the training data -i '" + cfg.train_data + "'", cfg.val_data,
                             "the validation data -j '" + cfg.val_data + "'", cfg.rank == 0);
    const int V = p.model.vocab_size;
    p.train = open_loader(cfg, cfg.train_data, cfg.shuffle == 1, V, cfg.sampler == "random");
    check_ranks_share_data(comm, "training data -i '" + cfg.train_data + "'", shards_identity(p.train->shard_paths()));
    if (!cfg.val_data.empty()) {
        p.val = open_loader(cfg, cfg.val_data, false, V);
        check_ranks_share_data(comm, "validation data -j '" + cfg.val_data + "'",
                               shards_identity(p.val->shard_paths()));
    }
    p.data_note = check_data_roles(cfg, p);
    const std::string other_data =
        config_record ? config_record_data_note(*config_record, cfg.train_data, p.train->num_shards(),
                                                p.train->total_tokens(), shards_content_hash(p.train->shard_paths()))
                      : "";
    if (!other_data.empty() && cfg.rank == 0) std::fprintf(stderr, "%s\n", other_data.c_str());
    p.val_batches = p.val ? val_batch_count(cfg, *p.val, false) : 0;
    p.resume = choose_resume(cfg, p.model, comm);
    if (p.resume) check_record_of_continued_run(cfg, *p.resume);
    if (continued) note_data_prepared_again(cfg, p);
    if (p.resume) check_weights_unchanged(cfg.record_changes, !cfg.fork_from.empty(), cfg.origin_of("model"));
    plan_max_steps(cfg, p);
    p.schedule = schedule_config(cfg, p.max_steps);
    p.adamw = adamw_hyper(cfg);
    return p;
}

// ---------------------------------------------------------------------------------------------
// open_outputs: what the run writes besides checkpoints, and its console header

// Held until run_training returns: the lock of -o and the open record files (rank 0; elsewhere
// closed, and writing to them does nothing).
struct RunOutputs {
    Tokenizer tokenizer;  // decodes the samples (absent: they print as token ids)
    std::string tokenizer_note;
    JsonlWriter metrics, logit_log;
    RunLog log;                                     // stdout, and with -o console.log and samples.txt
    RunSummary summary;                             // the end-of-run line
    nlohmann::ordered_json record;                  // config.json as written (rank 0 with -o; else null)
    std::chrono::steady_clock::time_point started;  // when this process's first step began
    OutputLock lock;
};

// config.json: the flags, the model and what the run derived from them.
inline nlohmann::ordered_json run_config_json(const TrainConfig& cfg, const RunPlan& plan, const TrainingModel& model) {
    const ModelConfig& m = plan.model;
    // "data": the globs as "train" records -i and -j (absolute), which the readers compare them with
    const std::string train_glob = recorded_form("train_data", cfg.train_data);
    const std::string val_glob = recorded_form("val_data", cfg.val_data);
    nlohmann::ordered_json record = {
        {"train", train_config_json(cfg)},
        {"model", model_config_json(m)},
        {"data",
         {{"train", data_identity_json(read_data_identity(cfg.train_data), train_glob, plan.train->num_shards(),
                                       plan.train->total_tokens(), shards_content_hash(plan.train->shard_paths()))},
          {"val", plan.val ? data_identity_json(read_data_identity(cfg.val_data), val_glob, plan.val->num_shards(),
                                                plan.val->total_tokens(), shards_content_hash(plan.val->shard_paths()))
                           : nlohmann::ordered_json()}}},
        {"derived",
         {{"model_source", plan.model_source},
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
    // -e FILE: the identity of the weights the run started from (check_init_weights_of_record)
    if (!plan.init_identity.empty()) record["derived"]["model_file_fnv1a64"] = plan.init_identity;
    return record;
}

// The samples' tokenizer; with -o the directory, its lock (rank 0), config.json + config.toml
// (llmc/app/run_record.h: a resumed run only appends its changed flags to config.json's "history") and
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
    remove_stale_temporaries(out);
    if (plan.resume && cfg.resume == 1)  // the steps -y 1 fell back past, found damaged here: retired
        for (const int s : retire_checkpoints(out, plan.resume->damaged_newer))
            std::fprintf(stderr,
                         "note: -y 1: the damaged checkpoint of step %d is left behind (this run continues from step "
                         "%d): its marker is now %s, and its files stay for inspection\n",
                         s, plan.start_step(), damaged_marker_path(out, s).c_str());
    o.record =
        write_run_record(out, run_config_json(cfg, plan, model), config_toml, cfg, plan.resume ? plan.start_step() : -1,
                         plan.start_step() < plan.max_steps, plan.epoch.value_or(EpochSteps{}),
                         near_unset_text(plan.model.window, model.backend->name()));
    const std::string lr_note = lr_total_change_note(cfg, plan);
    if (!lr_note.empty()) std::fprintf(stderr, "%s\n", lr_note.c_str());
    if (plan.resume) {  // drop records the interrupted run wrote after its checkpoint (a fork forked again: all)
        const int keep_through = cfg.refork ? -1 : plan.start_step();
        truncate_jsonl_after_step(out + "/metrics.jsonl", keep_through);
        truncate_jsonl_after_step(out + "/logit_stats.jsonl", keep_through);
    }
    o.metrics.open(out + "/metrics.jsonl", plan.resume.has_value());
    o.logit_log.open(out + "/logit_stats.jsonl", plan.resume.has_value());
    o.log.open(out);
    if (plan.resume) {
        const std::string record = join_path(out, "config.json");
        const nlohmann::ordered_json recorded = read_run_record(record);
        const ValSetChange val_change = last_val_set_change(recorded, record);
        o.summary.val_set_since = val_change.step;
        o.summary.val_set_flags = val_change.flags;
        o.summary.note_metrics_records(out + "/metrics.jsonl");
        o.summary.weights = model_path(out, plan.start_step());
        o.summary.tokens_before = tokens_trained(recorded, plan.start_step(), record);
    }
}

// The console header (rank 0): device, model, data, batch, and notes on what will not happen.
inline void print_run_header(const TrainConfig& cfg, const RunPlan& plan, const TrainingModel& model, RunOutputs& o,
                             const Collective& comm) {
    const int B = cfg.batch_size, T = cfg.seq_len, start = plan.start_step(), max_steps = plan.max_steps;
    const DataLoader& train = *plan.train;
    o.log.printf("train_gpt2_ls | device %s | %s\n  %s\n", model.device.c_str(),
                 describe_model_origin(cfg, plan.model_source).c_str(),
                 describe_model(plan.model, model.backend->num_params()).c_str());
    o.log.printf(
        "  train: %lld tokens in %zu shard(s), %lld batches/epoch | val: %s\n", (long long)train.total_tokens(),
        train.num_shards(), (long long)train.batches_per_epoch(),
        !plan.val ? "none"
        : cfg.val_every <= 0
            ? (std::to_string(plan.val->total_tokens()) + " tokens, never read (-v 0)").c_str()
            : (std::to_string(plan.val->total_tokens()) + " tokens, " + std::to_string(plan.val_batches) + " of its " +
               std::to_string(plan.val->batches_per_epoch()) + " batches per validation (-m; --eval-only reads all)")
                  .c_str());
    o.log.printf("  batch: B %d x T %d x accum %d x %d process(es) = %ld tokens/step | %d steps\n", B, T, plan.accum,
                 cfg.world_size, (long)B * T * plan.accum * cfg.world_size, max_steps);
    o.log.printf("  lr: %s\n", describe_schedule(plan.schedule).c_str());
    if (!model.step_graph.empty()) o.log.printf("  steps: %s\n", model.step_graph.c_str());
    const std::string stabilizers = describe_stabilizers(plan.model, cfg);
    if (!stabilizers.empty()) o.log.printf("  stabilizers: %s\n", stabilizers.c_str());
    if (cfg.world_size > 1)
        o.log.printf("  data parallel: %d processes (%s)%s\n", cfg.world_size, comm.name(),
                     cfg.zero_stage == 1 ? ", ZeRO-1: AdamW state sharded" : "");
    if (plan.resume)
        o.log.printf("  %s from %s at step %d\n", cfg.fork_from.empty() ? "resumed" : "forked",
                     model_path(plan.resume->dir, start).c_str(), start);
    if (plan.model.local_heads() > 0 && plan.model.window >= T)
        std::fprintf(stderr,
                     "note: --window %d is not below -t %d: a local head sees the whole context, so its %d local "
                     "head(s) compute as global ones (MHSA); lower --window for LS-attention\n",
                     plan.model.window, T, plan.model.local_heads());
    const std::string near_note = near_of_seq_len_note(cfg, plan.model.window, model.backend->name());
    if (!near_note.empty()) std::fprintf(stderr, "%s\n", near_note.c_str());
    if (plan.init && !plan.init->from_llmc && !plan.resume)
        std::fprintf(stderr,
                     "note: -e %s: a new run from its weights only (step 0, new AdamW moments and data order); "
                     "to continue its run's training, --fork-from a checkpoint of it\n",
                     cfg.model.c_str());
    if (start >= max_steps && plan.resume && plan.epoch)
        std::fprintf(stderr, "note: %s (give -x above %d to train past the epoch)\n",
                     plan.epoch->nothing_left().c_str(), start);
    else if (start >= max_steps && plan.resume)
        std::fprintf(stderr,
                     "note: the checkpoint's step %d is not below -x %d; nothing to train (raise -x to continue)\n",
                     start, max_steps);
    for (const std::string& n : unused_flag_notes(cfg, plan.val != nullptr)) std::fprintf(stderr, "%s\n", n.c_str());
    // the run draws a sample after each step that is a multiple of -s (the loop below): one at least when a
    // multiple lies in (start, -x]; the notes about samples only then
    const bool draws_samples = cfg.sample_every > 0 && cfg.gen_tokens > 0 &&
                               (int64_t)(start / cfg.sample_every + 1) * cfg.sample_every <= (int64_t)max_steps;
    if (!o.tokenizer_note.empty() && draws_samples) std::fprintf(stderr, "note: %s\n", o.tokenizer_note.c_str());
    // a sample starts at <|endoftext|> and draws -g tokens in a window of maxT (print_sample): past -t it
    // reads positions the run never trains
    const int sample_positions = std::min(1 + cfg.gen_tokens, plan.model.max_seq_len);
    if (draws_samples && sample_positions > T)
        std::fprintf(stderr,
                     "note: -g %d: the run's samples use %d positions, more than the -t %d it trains at; positions "
                     "beyond %d are never trained (-g %d keeps the samples within them)\n",
                     cfg.gen_tokens, sample_positions, T, T, T - 1);
    if (cfg.output_dir.empty())
        std::fprintf(stderr,
                     "note: no -o given; nothing is written (metrics, checkpoints): give -o DIR to keep them\n");
    // the warmup ramps lr * (s + 1) / W over steps s < W (step W - 1 at the full rate): a run of fewer
    // than W steps never reaches -l
    if (cfg.warmup_steps > max_steps && start < max_steps && cfg.learning_rate > 0.0f)
        std::fprintf(stderr,
                     "note: --warmup-steps %d is longer than the run's %d steps: the learning rate rises to "
                     "%.2e at most, never to -l %.2e; lower -u or raise -x if that is not the intent\n",
                     cfg.warmup_steps, max_steps, cfg.learning_rate * (double)max_steps / cfg.warmup_steps,
                     cfg.learning_rate);
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
    const double vl =
        evaluate(model, *plan.val, cfg.batch_size, cfg.seq_len, plan.val_batches, buf.inputs, buf.targets, comm);
    if (cfg.rank == 0)
        o.log.printf("step %*d/%d | val loss %.4f\n", (int)std::to_string(plan.max_steps).size(), 0, plan.max_steps,
                     vl);
    o.metrics.write({{"step", 0}, {"time", unix_time_now()}, {"val_loss", json_float(vl)}});
    o.summary.note_val(0, vl);
}

// The console line (rank 0), the metrics record and, every --logit-stats-every steps, the logit
// statistics record.
inline void report_step(const TrainConfig& cfg, const RunPlan& plan, const StepResult& r, const LogitStats& stats,
                        std::optional<double> val_loss, Backend& model, RunOutputs& o) {
    // model FLOPs utilization per device and device memory, when the backend knows its peak
    const double peak = model.peak_flops();
    const double mfu =
        peak > 0 ? flops_per_token(plan.model, cfg.seq_len) * r.tokens_per_s / cfg.world_size / peak : -1.0;
    const size_t mem_bytes = model.device_memory_used();  // once a step (the CUDA backend: cudaMemGetInfo)
    const double mem_gib = (double)mem_bytes / (1024.0 * 1024.0 * 1024.0);
    const std::string alarm_ckpt = r.alarm_checkpoint ? model_path(cfg.output_dir, r.step) : "";
    StepProgress progress;  // this process's steps so far, validation and reports included
    progress.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - o.started).count();
    progress.eta_s = eta_seconds(progress.elapsed_s, r.step - plan.start_step(), plan.max_steps - r.step);
    if (cfg.rank == 0)
        o.log.print(
            step_line(r, plan.max_steps, stats, val_loss, mfu, mem_gib, alarm_ckpt, cfg.spike_window, progress) + "\n");
    if (val_loss) o.summary.note_val(r.step, *val_loss);
    o.summary.note_skipped(r.nonfinite, r.skip_spike);
    nlohmann::ordered_json rec = step_record(r, stats, val_loss, cfg.qk_clip > 0, unix_time_now());
    if (mfu >= 0) {
        rec["mfu"] = mfu;
        rec["device_memory_bytes"] = mem_bytes;
    }
    o.metrics.write(rec);
    if (cfg.logit_stats_every > 0 && r.step % cfg.logit_stats_every == 0)
        o.logit_log.write_line(logit_stats_line(r.step, stats, plan.model));
}

// --gen-tokens tokens sampled after <|endoftext|> (the last token id without a tokenizer).
inline void print_sample(const TrainConfig& cfg, const ModelConfig& m, Backend& model, const Tokenizer& tok, Rng& rng,
                         int step, RunLog& log) {
    const int eot = tok.present() && tok.eot_token() >= 0 ? tok.eot_token() : m.vocab_size - 1;
    GenerateOptions opt;
    opt.sample_vocab = tok.present() ? tok.vocab_size() : 0;  // ids the tokenizer can print (--vocab may be above)
    std::vector<int> gen = generate(model, {eot}, cfg.gen_tokens, m.max_seq_len, cfg.temperature, rng, opt);
    log.sample(step, safe_printable(tok.decode(gen.data(), gen.size())));
}

// The summary of a run that ended now (after its last step).
inline const RunSummary& finish_summary(const TrainConfig& cfg, const RunPlan& plan, RunOutputs& o) {
    RunSummary& s = o.summary;
    s.start_step = plan.start_step();
    s.last_step = std::max(plan.start_step(), plan.max_steps);
    s.tokens_per_step = (int64_t)cfg.batch_size * cfg.seq_len * plan.accum * cfg.world_size;
    s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - o.started).count();
    s.output = !cfg.output_dir.empty();
    return s;
}

// The fingerprint of the settings that trained steps 1..step, for its checkpoint's DONE_ marker: from the
// record this run wrote (rank 0; "" elsewhere, where no marker is written).
inline std::string checkpoint_settings(const TrainConfig& cfg, const RunOutputs& o, int step) {
    if (!o.record.is_object()) return "";
    return trained_settings_fingerprint(o.record, join_path(cfg.output_dir, "config.json"), step);
}

// A checkpoint after `step`: every -n steps, after the last step, and when the logit alarm asks.
inline bool checkpoint_due(const TrainConfig& cfg, const RunPlan& plan, const StepResult& r) {
    return !cfg.output_dir.empty() && ((cfg.checkpoint_every > 0 && r.step % cfg.checkpoint_every == 0) ||
                                       r.step == plan.max_steps || r.alarm_checkpoint);
}

// ---------------------------------------------------------------------------------------------
// training

// --profile-steps N: steps start + kProfileWarmupSteps + 1 .. + N are profiled (the first steps of a
// process allocate, choose cuBLASLt algorithms and fill caches), on rank 0 only.
constexpr int kProfileWarmupSteps = 2;

// The profile's table on the console (and console.log) and profile.json in the output directory.
inline void report_profile(const TrainConfig& cfg, StepProfiler& profiler, RunOutputs& o) {
    const ProfileTable t = profile_table(profiler.finish());
    o.log.print(profile_table_text(t));
    if (cfg.output_dir.empty()) return;
    const std::string text = json_file_text(profile_table_json(t));
    AtomicFile f(join_path(cfg.output_dir, "profile.json"));
    f.write(text.data(), text.size());
    f.commit();
}

// What -o held before this start wrote into it (rank 0 with -o): its run files with their sizes (empty ones
// too: a new run may start where they are) and the bytes of its config.json ("" when it held none, or an
// empty one: then this start begins the run).
struct RunFilesBefore {
    std::vector<std::pair<std::string, uintmax_t>> held;  // (run file name, its size)
    std::string record;
    const uintmax_t* size_of(const std::string& name) const {
        for (const auto& [n, size] : held)
            if (n == name) return &size;
        return nullptr;
    }
};

inline RunFilesBefore run_files_before(const std::string& out) {
    RunFilesBefore b;
    if (out.empty()) return b;
    for (const std::string& name : run_files_present(out)) {
        std::error_code ec;
        const uintmax_t size = std::filesystem::file_size(join_path(out, name), ec);
        b.held.push_back({name, ec ? 0 : size});
    }
    if (b.size_of("config.json") != nullptr) {
        std::ifstream in(join_path(out, "config.json"), std::ios::binary);
        b.record.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return b;
}

// A run that stops before its first step (stdout closed: llmc/train/interrupt.h): when this start began the
// run (-o held no config.json with a record: a new run or fork), the run files it wrote are removed and
// those -o held before (empty ones) cut back to their size, so that -o holds no run without a checkpoint,
// for which a new run there would be refused; when it continues one (-y 1), config.json gets back the bytes
// it had (open_outputs recorded the flags given in its history, which no step trained with; the other
// files are as a -y 1 leaves them). Returns whether this start began the run (its files removed).
inline bool settle_unstarted_run(const std::string& out, const RunFilesBefore& before, RunOutputs& o) {
    if (out.empty()) return false;
    o.log.close();
    o.metrics.close();
    o.logit_log.close();
    const uintmax_t* record_size = before.size_of("config.json");
    if (record_size != nullptr && *record_size > 0) {  // a run it continues (a record it could not read: kept)
        if (before.record.size() == *record_size) write_text_file(join_path(out, "config.json"), before.record);
        return false;
    }
    for (const std::string& name : run_file_names()) {
        std::error_code ec;  // (a file that cannot be removed stays: the run is then one without a checkpoint)
        const uintmax_t* size = before.size_of(name);
        if (size != nullptr) std::filesystem::resize_file(join_path(out, name), *size, ec);
        else std::filesystem::remove(join_path(out, name), ec);
    }
    return true;
}

inline int run_training(const TrainConfig& cfg, const BackendFactory& make_backend, const std::string& config_toml,
                        Collective& comm, const ProfilerFactory& make_profiler = {}) {
    if (cfg.rank != comm.rank() || cfg.world_size != comm.world_size())
        throw std::logic_error("run_training: cfg.rank/world_size must be the collective's");
    const bool main_rank = cfg.rank == 0;  // console, metrics, samples, model files, markers
    const SigpipeIgnored sigpipe_ignored;  // a closed stdout stops the run, not the process (interrupt.h)
    const RunPlan plan = plan_run(cfg, comm);
    LoopState loop(cfg, *plan.train);
    if (plan.resume)
        loop.from_train_state(plan.resume->state, state_path(plan.resume->dir, plan.resume->step, cfg.rank),
                              !cfg.fork_from.empty());
    check_fork_trains(cfg, plan);  // after the checkpoint's state is found loadable: that error is the first
    if (!plan.data_note.empty()) std::fprintf(stderr, "%s\n", plan.data_note.c_str());  // a run that starts
    TrainingModel model = build_model(cfg, plan, make_backend, comm);
    Backend& backend = *model.backend;
    const int profile_first = plan.start_step() + kProfileWarmupSteps + 1;  // 1-based
    std::unique_ptr<StepProfiler> profiler;
    if (cfg.profile_steps > 0) {
        if (plan.max_steps < profile_first + cfg.profile_steps - 1)
            throw InputError("--profile-steps " + std::to_string(cfg.profile_steps) + " needs " +
                             std::to_string(kProfileWarmupSteps + cfg.profile_steps) + " steps to train (" +
                             std::to_string(kProfileWarmupSteps) + " warm-up steps first) but this run trains " +
                             std::to_string(std::max(0, plan.max_steps - plan.start_step())) +
                             "; raise -x or lower --profile-steps");
        if (!make_profiler) throw InputError("--profile-steps: this program has no profiler");
        if (main_rank) profiler = make_profiler(backend);
    }
    RunOutputs outputs;
    // what -o held before this start: a stop before the first step leaves it so (settle_unstarted_run)
    const RunFilesBefore before = main_rank ? run_files_before(cfg.output_dir) : RunFilesBefore();
    open_outputs(outputs, cfg, plan, model, config_toml);
    if (main_rank) print_run_header(cfg, plan, model, outputs, comm);
    if (main_rank) {  // rank 0 prunes (save_checkpoint)
        const std::string note = keep_checkpoints_note(cfg, plan, loop);
        if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
    }
    StepBuffers buf(cfg);
    if (!plan.resume && plan.val && cfg.val_every > 0) report_step0_validation(cfg, plan, backend, buf, outputs, comm);
    outputs.started = std::chrono::steady_clock::now();
    // a stdout closed before the first step (rank 0's): every rank stops here, nothing to checkpoint
    const bool closed = main_rank && outputs.log.stdout_closed();
    if (cfg.world_size > 1 ? comm.all_reduce_int(closed ? 1 : 0, ReduceOp::Max) > 0 : closed) {
        if (main_rank) {
            const bool removed = settle_unstarted_run(cfg.output_dir, before, outputs);
            std::fprintf(stderr, "%s\n", unstarted_line(cfg.output_dir, plan.start_step(), removed).c_str());
        }
        return interrupt_exit_code(SIGPIPE);
    }

    InterruptHandlers interrupts;  // SIGINT/SIGTERM/SIGUSR1: stop after the step, checkpointed (interrupt.h)
    for (int step = plan.start_step(); step < plan.max_steps;) {
        const bool profiled = profiler && step + 1 >= profile_first && step + 1 < profile_first + cfg.profile_steps;
        if (profiled) profiler->step_begin();
        const StepResult r = train_step(cfg, plan, model, loop, buf, comm, step, interrupts);
        if (profiled) profiler->step_end();
        step = r.step;
        if (profiled && step == profile_first + cfg.profile_steps - 1) {
            report_profile(cfg, *profiler, outputs);
            profiler.reset();
        }
        const std::optional<double> val_loss = validation_loss(cfg, plan, backend, buf, comm, step);
        report_step(cfg, plan, r, buf.step, val_loss, backend, outputs);
        if (main_rank && cfg.sample_every > 0 && cfg.gen_tokens > 0 && step % cfg.sample_every == 0)
            print_sample(cfg, plan.model, backend, outputs.tokenizer, loop.sample_rng, step, outputs.log);
        if (main_rank && outputs.log.stdout_closed()) interrupts.stop_for(SIGPIPE);  // (interrupt.h)
        const int agreed = interrupts.agreed_signal(comm);  // the votes of this step (interrupt.h)
        const int sig = step < plan.max_steps ? agreed : 0;
        if (checkpoint_due(cfg, plan, r) || (sig != 0 && !cfg.output_dir.empty())) {
            const std::vector<int> pruned = save_checkpoint(cfg, plan.model, plan.tokenizer_id, step, model, loop, comm,
                                                            checkpoint_settings(cfg, outputs, step));
            outputs.summary.weights = model_path(cfg.output_dir, step);
            if (main_rank) {  // the checkpoint, then the older ones its save deleted
                outputs.log.print(checkpoint_line(step, outputs.summary.weights, r.alarm_checkpoint) + "\n");
                std::fputs(pruned_checkpoint_lines(pruned, cfg.keep_checkpoints).c_str(), stderr);
            }
        }
        if (sig != 0) {
            if (main_rank) std::fprintf(stderr, "%s\n", interrupt_line(sig, step, cfg.output_dir).c_str());
            comm.barrier();  // no rank exits (non-zero) before rank 0's marker: srun/mpirun then end the rest
            return interrupt_exit_code(sig);
        }
    }
    if (main_rank) outputs.log.print(summary_line(finish_summary(cfg, plan, outputs)) + "\n");
    return 0;
}

}  // namespace llmc
