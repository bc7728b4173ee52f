// RunPlan: what a training run will do, resolved from the flags and the files before anything is
// built or written (llmc/train/train_loop.h plan_run fills it): the model, the data's vocabulary,
// the gradient accumulation, the loaders, the checkpoint to resume from, the learning-rate
// schedule and AdamW's settings. The pieces here read files only; none needs a backend.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmc/app/config_origin.h"
#include "llmc/app/epoch_steps.h"
#include "llmc/app/output_intent.h"
#include "llmc/app/run_history.h"
#include "llmc/app/run_record.h"
#include "llmc/app/train_config.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/dist/collective.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/dataloader.h"
#include "llmc/io/output_lock.h"
#include "llmc/train/schedule.h"

namespace llmc {

struct RunPlan {
    ModelConfig model;                       // the model trained
    std::string model_source;                // "preset ls-small" or the checkpoint path given with -e
    std::optional<ModelCheckpoint> init;     // -e's weights when it is a checkpoint
    std::string init_identity;               // ... and its file's FNV-1a 64 (config.json "derived")
    uint64_t tokenizer_id = 0;               // -i's tokenizer.bin FNV-1a 64, in every model file saved (0 unknown)
    int data_vocab = -1;                     // the data's vocabulary (-1: unknown) ...
    std::string vocab_source;                // ... and the file it came from
    int accum = 1;                           // gradient-accumulation steps per optimizer step
    int max_steps = 0;                       // -x, or one epoch of the train data (plan_max_steps)
    std::optional<EpochSteps> epoch;         // with -x -1: how one epoch became max_steps
    std::unique_ptr<DataLoader> train, val;  // val: null without -j
    int64_t val_batches = 0;                 // batches per validation
    std::optional<LoadedCheckpoint> resume;  // the checkpoint -y 1 continues from
    ScheduleConfig schedule;                 // learning rate per step
    AdamWHyper adamw;                        // lr: set per step from the schedule
    std::string data_note;                   // rank 0: -j's note (check_data_roles), printed once the
                                             // checkpoint's data-loader state has loaded ("" for none)
    int start_step() const { return resume ? resume->step : 0; }
};

// A loader of this rank's rows of the shards matching `pattern` (RankSplit::Rows).
// random_rows: each row from a random offset (--sampler random; the training data only).
inline std::unique_ptr<DataLoader> open_loader(const TrainConfig& c, const std::string& pattern, bool shuffle,
                                               int vocab_size, bool random_rows = false) {
    return std::make_unique<DataLoader>(pattern, c.batch_size, c.seq_len, c.rank, c.world_size, shuffle, c.seed,
                                        vocab_size, RankSplit::Rows, random_rows);
}

// Batches per validation: -m (at most an epoch of val), or the whole epoch for -m -1 and, when
// all_by_default (--eval-only), when -m is not given.
inline int64_t val_batch_count(const TrainConfig& c, const DataLoader& val, bool all_by_default) {
    const int64_t avail = val.batches_per_epoch();
    if (c.val_batches == -1 || (all_by_default && !c.was_given("val-batches"))) return avail;
    return std::min<int64_t>(c.val_batches, avail);
}

// A new run (fresh or forked) into an -o that holds a run's files but no checkpoint would overwrite
// them: refused, naming them and the choices.
inline void check_no_run_files(const std::string& out, bool fork) {
    const std::vector<std::string> files = run_files_in(out);
    if (files.empty()) return;
    throw InputError(std::string(fork ? "--fork-from starts a new run but " : "output directory ") + out +
                     " holds a run without a checkpoint (" + name_list(files) + "); continue it with -y 1 " +
                     "(from step 0, with its recorded settings), remove those files, or choose another -o");
}

// A new run (fresh or forked) into an -o that holds a data set: its files would go among the shards (and
// data/prepare.py would then refuse to remake the data there): refused, naming the data's files.
inline void check_not_data_dir(const std::string& out) {
    const std::vector<std::string> files = data_files_in(out);
    if (files.empty()) return;
    std::string list;
    for (const std::string& f : files) list += (list.empty() ? "" : ", ") + f;
    throw InputError("output directory " + out + " holds a data set (" + list +
                     "): a run's files would go among its shards; choose another -o (e.g. out/RUN_NAME)");
}

// After the refusal of a model flag in a continued run (`who`: "a fork", "-y 1"): when that flag is a
// stabilizer (--qk-norm, --attn-softcap), " (the stabilizers WHO can switch on are training flags:
// ...)", the flags that continuation accepts (--qk-clip not on a QK-norm model); else "".
// d: a = the checkpoint's model, b = the run's.
inline std::string switchable_stabilizers(const ModelDifference& d, const ModelConfig& run_model,
                                          const std::string& who) {
    if (d.field != "qk-norm" && d.field != "attn-softcap") return "";
    const bool checkpoint_qk_norm = d.field == "qk-norm" ? d.a != "0" : run_model.qk_norm;
    return " (the stabilizers " + who +
           " can switch on are training flags: " + (checkpoint_qk_norm ? "" : "--qk-clip, ") +
           "--z-loss, --grad-clip, --skip-spikes)";
}

// The long flag (without "--") that sets a model field of ModelDifference (llmc/io/checkpoint_dir.h):
// "window", "untie-embeddings" for tied embeddings, "vocab" for the padded vocabulary (which follows it).
inline std::string model_field_flag(const std::string& field) {
    return field == "tied embeddings" ? "untie-embeddings" : field == "padded vocab" ? "vocab" : field;
}

// Loads the checkpoint --fork-from names (`given`, checked by fork_source into src). Its run may prune
// that step between those checks and this read; pruning deletes the DONE_ marker before the files
// (prune_checkpoints), so a load that fails with the marker gone is said as pruned, not as damage.
inline LoadedCheckpoint load_fork_checkpoint(const std::string& given, const ForkSource& src, const ModelConfig& m,
                                             int rank, int world_size) {
    try {
        return load_checkpoint_at(src.dir, src.step, m, rank, world_size);
    } catch (const CheckpointDamaged& e) {
        if (!file_exists(done_path(src.dir, src.step)))
            throw InputError("--fork-from " + given + ": step " + std::to_string(src.step) +
                             " was deleted while this fork read it (its run keeps only its newest checkpoints, "
                             "--keep-checkpoints); fork from a step that run keeps, or copy the files first");
        throw InputError("--fork-from " + given + ": the checkpoint is damaged (" + e.what() +
                         "); fork from another step");
    } catch (const StateWorldSizeMismatch& e) {
        throw InputError("--fork-from " + given + ": the checkpoint's run trained on " + std::to_string(e.written) +
                         " processes and this fork has " + std::to_string(world_size) +
                         "; a fork continues its optimizer state and data order, so start it with mpirun -np " +
                         std::to_string(e.written) + " (or start a new run from its weights with -e " + given + ")");
    } catch (const CheckpointModelMismatch& e) {
        const ModelDifference& d = e.difference;
        const std::string flag = "--" + model_field_flag(d.field);
        throw InputError("--fork-from " + given + ": " + flag + " differs from the checkpoint's model (" + d.field +
                         " " + d.a + " there, " + d.b + " here); a fork continues the checkpoint's " +
                         "weights, so model flags cannot change in a fork: drop " + flag +
                         switchable_stabilizers(d, m, "a fork"));
    }
}

// A model field of ModelDifference (llmc/io/checkpoint_dir.h) at `value` as the command line gives it:
// "--window 8", an on/off flag with '=' ("--qk-norm=true"; tied embeddings 1: "--untie-embeddings=false");
// the padded vocabulary, which no flag sets, as "padded vocab N".
inline std::string model_flag_text(const std::string& field, const std::string& value) {
    if (field == "qk-norm") return std::string("--qk-norm=") + (value == "1" ? "true" : "false");
    if (field == "tied embeddings") return std::string("--untie-embeddings=") + (value == "1" ? "false" : "true");
    if (field == "padded vocab") return "padded vocab " + value;
    return "--" + field + " " + value;
}

// -y 1 of a run without a checkpoint, started again from step 0 on another number of processes than its
// record's: a step of B x T x processes tokens (no -d) and a validation set (-m counts global batches of
// B x T x processes tokens) are another size than the run's, which no flag's change says (a resume from
// a checkpoint refuses another process count). The note names both and the flag that keeps the run's,
// one these processes take: -d when B x T x processes here divides the run's step (a -d it does not
// divide is refused), else the -b that makes B x T x processes the run's step (which keeps the
// validation tokens too, when they were -m run's steps), else none; for the validation set the -m that
// reads the run's tokens at that batch, else none. "" when the step and the validation set are the
// run's (the same count, or a -b given that keeps them), or the record says no process count.
inline std::string restart_world_size_note(const TrainConfig& cfg) {
    const std::string path = join_path(cfg.output_dir, "config.json");
    if (!file_exists(path)) return "";
    const nlohmann::ordered_json record = read_run_record(path, "restore the run's config.json");
    const auto train = record.find("train");
    if (train == record.end() || !train->is_object() || !train->contains("world_size") ||
        !(*train)["world_size"].is_number_integer())
        return "";
    const int was = (*train)["world_size"].get<int>();
    if (was == cfg.world_size || was < 1) return "";
    const TrainConfig run = recorded_settings(*train, path);
    const std::string on_here = " on " + std::to_string(cfg.world_size) + " processes";
    const long long row = (long long)cfg.seq_len * cfg.world_size;  // tokens of one sequence per process
    const long long micro = cfg.batch_size * row;                   // B x T x processes here
    long long batch = cfg.batch_size;  // the -b the advice leaves: another one when it names -b
    std::vector<std::string> parts;
    if (cfg.total_batch_size <= 0) {  // (with -d the accumulation keeps the step's tokens)
        const long long run_step = recorded_tokens_per_step(*train, path);
        if (run_step > 0 && run_step != micro) {
            std::string keep;
            if (run_step % micro == 0) {
                keep = "-d " + std::to_string(run_step) + " keeps it";
            } else if (run_step % row == 0) {
                batch = run_step / row;
                keep = "-b " + std::to_string(batch) + " keeps it";
            } else {
                keep = "no -b or -d keeps it" + on_here + ": mpirun -np " + std::to_string(was) + " does";
            }
            parts.push_back("a step trains B x T x processes = " + std::to_string(micro) + " tokens (the run's " +
                            std::to_string(run_step) + "; " + keep + ")");
        }
    }
    if (cfg.val_batches > 0 && !cfg.val_data.empty() && cfg.val_every != 0 && run.val_batches > 0) {
        const long long run_val = (long long)run.val_batches * run.batch_size * run.seq_len * was;
        const long long val = (long long)cfg.val_batches * micro, per_batch = batch * row;
        if (run_val != val) {
            std::string keep;
            if ((long long)cfg.val_batches * per_batch == run_val)
                keep = "-b " + std::to_string(batch) + " keeps it too";
            else if (run_val % per_batch == 0)
                keep = "-m " + std::to_string(run_val / per_batch) + " keeps it" +
                       (batch != cfg.batch_size ? " with -b " + std::to_string(batch) : "");
            else
                keep =
                    "no -m keeps it" + on_here + (batch != cfg.batch_size ? " with -b " + std::to_string(batch) : "");
            parts.push_back("-m " + std::to_string(cfg.val_batches) + " validates " + std::to_string(val) +
                            " tokens (the run's " + std::to_string(run_val) + ": -m counts global batches; " + keep +
                            ")");
        }
    }
    if (parts.empty()) return "";
    return "note: -y 1: starting again from step 0 on " + std::to_string(cfg.world_size) +
           " processes where the run started on " + std::to_string(was) + ": " + parts[0] +
           (parts.size() > 1 ? ", and " + parts[1] : "");
}

// The checkpoint to resume from: with -y 1 the newest one every rank can load (none: a start from
// step 0, said on stderr); with --fork-from the checkpoint it names (llmc/app/run_record.h
// fork_source), into an -o without checkpoints; without either an -o that already holds checkpoints
// is refused. A new run (fresh or forked) into an -o holding another run's files, and any run into an
// -o another process holds, are refused too; a fork forked again by -y 1 (cfg.refork) replaces its own.
inline std::optional<LoadedCheckpoint> choose_resume(const TrainConfig& cfg, const ModelConfig& m, Collective& comm) {
    const std::string& out = cfg.output_dir;
    if (out.empty()) return std::nullopt;
    if (cfg.rank == 0) check_output_unlocked(out);
    if (cfg.resume) {
        std::optional<LoadedCheckpoint> from;
        try {
            from = load_agreed_checkpoint(out, m, comm);
        } catch (const CheckpointModelMismatch& e) {
            // a model flag the --config file set: named with the file, which the user did not type
            const std::string& field = e.difference.field;
            const std::string name = model_field_flag(field);
            const bool from_file = set_by_config(cfg, name);
            if (!from_file) throw InputError(e.what() + switchable_stabilizers(e.difference, m, "-y 1"));
            // no model flag was typed: the loader's advice ("resume with the same model flags") is replaced
            const std::string what = e.what();
            throw InputError(what.substr(0, what.rfind("; ")) + "; " + model_flag_text(field, e.difference.b) +
                             " is from --config " + cfg.config_file +
                             ": give the checkpoint's value on the command line (" +
                             model_flag_text(field, e.difference.a) + "), or drop --config" +
                             switchable_stabilizers(e.difference, m, "-y 1"));
        } catch (const StateWorldSizeMismatch& e) {  // a start without -y 1 is refused here: name what works
            const int step = e.step >= 0 ? e.step : newest_complete_step(out);
            throw InputError("-y 1: the checkpoint of step " + std::to_string(step) + " in " + out +
                             " was written by " + std::to_string(e.written) + " processes and this run has " +
                             std::to_string(cfg.world_size) + "; resume with the same -np (" +
                             std::to_string(e.written) + "), or start a new run from its weights in another -o: -e " +
                             model_path(out, step));
        }
        if (!from) check_restart_keeps_model(out, m, cfg);
        if (!from && cfg.rank == 0 && !file_exists(join_path(out, "config.json"))) check_not_data_dir(out);
        if (!from && cfg.rank == 0) {
            note_resume_without_checkpoint(out);
            for (const SettingChange& c : cfg.record_changes)  // flags given over the record: said, as a resume does
                std::fprintf(stderr, "note: -y 1: starting again from step 0 with %s\n",
                             describe_change(c, near_unset_text(m.window, "")).c_str());
            const std::string note = restart_world_size_note(cfg);
            if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
        }
        return from;
    }
    if (!cfg.fork_from.empty()) {
        if (newest_complete_step(out) >= 0)
            throw InputError("--fork-from starts a new run but " + out + " already holds checkpoints (newest step " +
                             std::to_string(newest_complete_step(out)) + "); choose a new -o for the fork");
        if (cfg.rank == 0 && !cfg.refork) check_no_run_files(out, true);
        if (cfg.rank == 0 && !cfg.refork) check_not_data_dir(out);
        if (cfg.rank == 0 && cfg.refork)  // (a relative source: the record of an earlier version, as typed)
            std::fprintf(stderr,
                         "note: -y 1: %s is a fork of %s (step %d) without a checkpoint of its own; it forks again "
                         "from that checkpoint%s\n",
                         out.c_str(), cfg.fork_from.c_str(), fork_source(cfg.fork_from).step,
                         cfg.fork_from[0] == '/' ? ""
                                                 : (", recorded relative to the directory the fork started in and "
                                                    "read from this one, " +
                                                    std::filesystem::current_path().string() +
                                                    ": if that is not the fork's, resume it from there")
                                                       .c_str());
        return load_fork_checkpoint(cfg.fork_from, fork_source(cfg.fork_from), m, cfg.rank, cfg.world_size);
    }
    if (newest_complete_step(out) >= 0)
        throw InputError("output directory " + out + cfg.origin_of("output-dir") +
                         " already holds checkpoints (newest step " + std::to_string(newest_complete_step(out)) +
                         "); resume with -y 1 or choose another -o");
    if (cfg.rank == 0) check_no_run_files(out, false);
    if (cfg.rank == 0) check_not_data_dir(out);
    return std::nullopt;
}

// The run's step total: -x, or with -x -1 one epoch of the training data in tokens (llmc/app/epoch_steps.h):
// a new run's from the data, a continued run's (after plan.resume is chosen) also from the tokens its
// record says were trained by its step (the run's config.json for -y 1, the source's for --fork-from).
inline void plan_max_steps(const TrainConfig& cfg, RunPlan& p) {
    if (cfg.max_steps >= 0) {
        p.max_steps = cfg.max_steps;
        return;
    }
    const int64_t rows = (int64_t)cfg.batch_size * cfg.seq_len * cfg.world_size;  // tokens per micro-step
    const int64_t epoch_tokens = p.train->batches_per_epoch() * rows, tokens_per_step = rows * p.accum;
    if (p.resume) {
        const std::string dir = cfg.fork_from.empty() ? cfg.output_dir : fork_source(cfg.fork_from).dir;
        p.epoch = epoch_steps_of_record(epoch_tokens, tokens_per_step, p.start_step(), join_path(dir, "config.json"));
    } else {
        p.epoch = EpochSteps{};
        p.epoch->epoch_tokens = epoch_tokens;
        p.epoch->tokens_per_step = tokens_per_step;
        p.epoch->total = epoch_total_steps(epoch_tokens, 0, tokens_per_step, 0);
    }
    p.max_steps = p.epoch->total;
}

// A fork that trains nothing (its checkpoint's step is not below the step total) would leave a run
// directory holding only its source's step: refused before anything is written, naming the -x it needs.
inline void check_fork_trains(const TrainConfig& cfg, const RunPlan& p) {
    if (cfg.fork_from.empty() || !p.resume || p.start_step() < p.max_steps) return;
    const std::string step = std::to_string(p.start_step());
    const std::string what = cfg.refork ? "-y 1: " + cfg.output_dir + " is a fork of " + cfg.fork_from +
                                              " without a checkpoint of its own, and "
                                        : "--fork-from " + cfg.fork_from + ": ";
    const std::string why = p.epoch ? p.epoch->nothing_left()
                                    : "the checkpoint's step " + step + " is not below -x " +
                                          std::to_string(p.max_steps) + "; nothing to train";
    throw InputError(what + why + ": a fork trains from step " + std::to_string(p.start_step() + 1) +
                     ", so give -x above " + step + " (nothing was written)");
}

inline ScheduleConfig schedule_config(const TrainConfig& cfg, int max_steps) {
    ScheduleConfig s;
    s.kind = parse_lr_schedule(cfg.lr_schedule);
    s.max_lr = cfg.learning_rate;
    s.warmup_steps = cfg.warmup_steps;
    s.final_lr_frac = cfg.final_lr_frac;
    s.total_steps = max_steps;
    s.wsd_decay_frac = cfg.wsd_decay_frac;
    return s;
}

// A continued run (-y 1, --fork-from) whose -x differs from its record's takes the learning rate of every
// later step from the new total (cosine, linear and wsd decay over the run): when that changes the
// next step's rate (as printed), the note that says so, with both rates under today's other schedule
// flags and the schedule now, e.g. "note: the learning rate follows -x 193: step 192's is 6.00e-05
// (2.26e-04 with -x 300); cosine: warmup 10 steps to 6.00e-04, decay over steps 11-193 to 6.00e-05
// (-q 0.1)"; "" otherwise, and where either total is -x -1's epoch (not compared here).
inline std::string lr_total_change_note(const TrainConfig& cfg, const RunPlan& p) {
    if (!p.resume || p.start_step() >= p.max_steps) return "";
    for (const SettingChange& c : cfg.record_changes) {
        if (c.flag != "--max-steps" || !c.old_value.is_number_integer() || cfg.max_steps <= 0) continue;
        const int was = c.old_value.get<int>(), next = p.start_step();  // next: the next update's index
        if (was <= 0) continue;
        char now_lr[32], was_lr[32];  // compared as printed: a change below the note's digits is not said
        std::snprintf(now_lr, sizeof now_lr, "%.2e", (double)learning_rate(p.schedule, next));
        std::snprintf(was_lr, sizeof was_lr, "%.2e", (double)learning_rate(schedule_config(cfg, was), next));
        if (std::string(now_lr) == was_lr) return "";
        return "note: the learning rate follows -x " + std::to_string(p.max_steps) + ": step " +
               std::to_string(next + 1) + "'s is " + now_lr + " (" + was_lr + " with -x " + std::to_string(was) +
               "); " + describe_schedule(p.schedule);
    }
    return "";
}

// The near/far split N not below -t T: a query sees keys at distances 0..T-1, all below N, so every key
// is near: each head's near_mass is 1 and far_max null, a split that says nothing. N is --near (given:
// typed, from a --config file or a run's record) or, on the CPU backend (`backend` "cpu") without it, the
// model's window (an MHSA model's is its maxT, so this is the note of every CPU MHSA run without --near).
// One note naming the fix ("" otherwise; none with --logit-stats-every 0, where unused_flag_notes says
// --near has no effect; none on CUDA without --near, which computes no split).
inline std::string near_of_seq_len_note(const TrainConfig& cfg, int window, const std::string& backend) {
    if (cfg.logit_stats_every == 0 || (!cfg.near && backend != "cpu")) return "";
    const int near = cfg.near ? *cfg.near : window;
    if (near < cfg.seq_len) return "";
    const std::string N = std::to_string(near), T = std::to_string(cfg.seq_len);
    const std::string what = cfg.near ? "--near " + N + cfg.origin_of("near")
                                      : "the near/far split (--near not given: the window, " + N + ", on the CPU)";
    return "note: " + what + " is not below -t " + T + ": every key a query sees is near (distance < " + N +
           "), so each head's near_mass is 1 and far_max null; give --near below " + T + " to split near from far";
}

// Flags given (on the command line or by a --config TOML preset) that the run's other settings make do
// nothing: one note each, not an error, as a preset may carry them for another run. -q and
// --wsd-decay-frac with a schedule that does not use them (llmc/train/schedule.h); --temperature when the
// run draws no samples (-s 0 or -g 0), -g with -s 0 and -s with -g 0; --keep-checkpoints without -o;
// --rendezvous with one process; --shuffle with --sampler random (each row a random offset);
// --logit-alarm-cooldown and --logit-alarm-keep with both logit alarms off in a new run; --near with
// --logit-stats-every 0; -v and -m without validation data (`has_val_data`: the run has -j's). A --config
// RUN/config.json gives every setting of its run, chosen or not: none of its values is noted; nor is a
// config file's value equal to the flag's default (a run's config.toml writes every flag).
inline std::vector<std::string> unused_flag_notes(const TrainConfig& cfg, bool has_val_data) {
    std::vector<std::string> out;
    const LrSchedule kind = parse_lr_schedule(cfg.lr_schedule);
    const TrainConfig defaults;
    const auto given = [&](const std::string& flag, double value, double default_value) {
        if (!cfg.was_given(flag)) return false;
        for (const std::string& f : cfg.from_config)
            if (f == flag)  // from a file, not typed: a run record's, or a file's default, is no choice
                return cfg.config_record.empty() && value != default_value;
        return true;
    };
    const auto note = [&](const std::string& flag, auto value, const std::string& with, const std::string& use) {
        out.push_back("note: --" + flag + " " + change_value_text(history_value(value)) + cfg.origin_of(flag) +
                      " has no effect with " + with + " (" + use + ")");
    };
    const std::string schedule = "--lr-schedule " + cfg.lr_schedule;
    if (kind == LrSchedule::Constant && given("final-lr-frac", cfg.final_lr_frac, defaults.final_lr_frac))
        note("final-lr-frac", cfg.final_lr_frac, schedule, "it sets the final lr of cosine, linear and wsd");
    if (kind != LrSchedule::Wsd && given("wsd-decay-frac", cfg.wsd_decay_frac, defaults.wsd_decay_frac))
        note("wsd-decay-frac", cfg.wsd_decay_frac, schedule, "it sets the share of the run wsd decays over");
    if ((cfg.sample_every == 0 || cfg.gen_tokens == 0) && given("temperature", cfg.temperature, defaults.temperature))
        note("temperature", cfg.temperature, cfg.sample_every == 0 ? "--sample-every 0" : "--gen-tokens 0",
             "it sets the temperature of the samples the run draws");
    if (cfg.sample_every == 0 && given("gen-tokens", cfg.gen_tokens, defaults.gen_tokens))
        note("gen-tokens", cfg.gen_tokens, "--sample-every 0", "it sets the length of the samples the run draws");
    if (cfg.sample_every > 0 && cfg.gen_tokens == 0 && given("sample-every", cfg.sample_every, defaults.sample_every))
        note("sample-every", cfg.sample_every, "--gen-tokens 0", "it sets how often the run draws samples");
    if (cfg.output_dir.empty() && given("keep-checkpoints", cfg.keep_checkpoints, defaults.keep_checkpoints))
        note("keep-checkpoints", cfg.keep_checkpoints, "no -o", "it prunes the checkpoints the run writes into -o");
    if (cfg.world_size == 1 && !cfg.rendezvous.empty())
        out.push_back("note: --rendezvous " + cfg.rendezvous +
                      " has no effect with one process (it is the directory the processes of a CUDA launch without "
                      "MPI meet in)");
    if (cfg.logit_stats_every == 0 && cfg.near && given("near", *cfg.near, 0))
        note("near", *cfg.near, "--logit-stats-every 0",
             "it splits the logit statistics the run writes into near and far");
    if (!has_val_data) {
        if (cfg.val_every != 0 && given("val-every", cfg.val_every, defaults.val_every))
            note("val-every", cfg.val_every, "no validation data (-j)", "it sets how often the run validates on -j");
        if (given("val-batches", cfg.val_batches, defaults.val_batches))
            note("val-batches", cfg.val_batches, "no validation data (-j)",
                 "it sets how much of -j a validation reads");
    }
    if (cfg.sampler == "random" && given("shuffle", cfg.shuffle, defaults.shuffle))
        note("shuffle", cfg.shuffle, "--sampler random", "it orders the windows of --sampler windows");
    // (a continued run's alarm checkpoints come back with its state, and --logit-alarm-keep still pins them)
    if (cfg.logit_alarm == 0.0f && cfg.logit_alarm_above == 0.0f && cfg.resume != 1 && cfg.fork_from.empty()) {
        const std::string off = "--logit-alarm 0 and --logit-alarm-above 0";
        if (given("logit-alarm-cooldown", cfg.logit_alarm_cooldown, defaults.logit_alarm_cooldown))
            note("logit-alarm-cooldown", cfg.logit_alarm_cooldown, off, "it spaces the alarms' checkpoints");
        if (given("logit-alarm-keep", cfg.logit_alarm_keep, defaults.logit_alarm_keep))
            note("logit-alarm-keep", cfg.logit_alarm_keep, off, "it keeps the newest alarms' checkpoints");
    }
    return out;
}

inline AdamWHyper adamw_hyper(const TrainConfig& cfg) {
    AdamWHyper h;
    h.beta1 = cfg.beta1;
    h.beta2 = cfg.beta2;
    h.eps = cfg.eps;
    h.weight_decay = cfg.weight_decay;
    return h;
}

}  // namespace llmc
