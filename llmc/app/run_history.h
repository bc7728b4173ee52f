// What a continued run (-y 1, --fork-from) changes in a run record (llmc/app/run_record.h), and what
// the record says about the steps already trained:
//   setting_changes    the inherited settings in which a run differs from recorded ones
//   resumed_history    config.json's "history" for a run resumed at step s: the entries before s as they
//                      were, then one entry per setting that differs from what trained step s. So the
//                      history says only what trained: entries at one step collapse into one (old =
//                      what trained before it), a change back before any step leaves none, and entries
//                      past s (steps rolled back to the checkpoint) go
//   tokens_trained     the tokens of steps 1..s, each step at the -d then in effect
//   last_val_set_change  the last step at which the history changed the validation set
//   epoch_steps_of_record   -x -1's step total for a run continued at step s (llmc/app/epoch_steps.h)
//   batch_of_config_record   the -d that keeps a --config RUN/config.json run's batch on another
//                      number of processes
//   val_batches_of_config_record   the -m that keeps its validation set (the tokens of -m global batches)
//   check_init_weights_of_record   a record's -e FILE still the weights that run started from
//   write_run_record   config.json + config.toml of a starting run (fresh or forked), or the history
//                      of a resumed one
// docs/training.md "Resuming and forking", docs/formats.md "config.json".
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/config_json.h"
#include "llmc/app/epoch_steps.h"
#include "llmc/app/run_record.h"
#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/io/atomic_file.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/json_text.h"

namespace llmc {

// A setting's value in a "history" entry: as "train" records it (setting_json: a float in its shortest
// decimal form, 0.0001, not 0.00009999999747; an optional one null when not given).
template <class T>
nlohmann::ordered_json history_value(const T& v) {
    return setting_json(v);
}

// The inherited settings (inherited_setting) in which `now` differs from the "train" object
// `recorded` (a missing key: the flag's default), in table order, old and new as history_value.
inline std::vector<SettingChange> setting_changes(const nlohmann::ordered_json& recorded, const TrainConfig& now,
                                                  const std::string& file) {
    const TrainConfig then = recorded_settings(recorded, file);
    std::vector<SettingChange> out;
#define LLMC_SETTING_CHANGE(record, type, field, def, names, ok, rule, help)                             \
    if (inherited_setting(#field, FlagRecord::record)) {                                                 \
        const nlohmann::ordered_json old_value = history_value(recorded_form(#field, then.field));       \
        const nlohmann::ordered_json new_value = history_value(recorded_form(#field, now.field));        \
        if (old_value != new_value) out.push_back({"--" + long_flag_name(names), old_value, new_value}); \
    }
    LLMC_TRAIN_FLAGS(LLMC_SETTING_CHANGE, LLMC_NO_MODEL)
#undef LLMC_SETTING_CHANGE
    return out;
}

// A value as a note writes it: as JSON, whole (a long path too), a whole float without its ".0" (50,
// 0.0001, 1e-05).
inline std::string change_value_text(const nlohmann::ordered_json& v) {
    std::string text = v.dump(-1, ' ', true, nlohmann::ordered_json::error_handler_t::replace);
    if (v.is_number_float() && text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0)
        text.resize(text.size() - 2);
    return text;
}

// What an optional setting not given (null in the record) means, as notes write it. Only --near is
// optional: the statistics split at the model's window P on the CPU and not at all on CUDA
// (docs/training.md "Near/far attention statistics"). `backend`: the backend's name ("cpu", "cuda"),
// "" when not known yet. E.g. "not given: the window, 8".
inline std::string near_unset_text(int window, const std::string& backend) {
    const std::string p = std::to_string(window);
    if (backend == "cpu") return "not given: the window, " + p;
    if (backend == "cuda") return "not given: no near/far split on CUDA";
    return "not given: the window, " + p + ", on the CPU, no split on CUDA";
}

// "--learning-rate 0.0001 (was 0.0003)"; a null value (an optional setting not given) is written
// `unset` (near_unset_text), as in "--near 2 (was not given: the window, 8)".
inline std::string describe_change(const SettingChange& c, const std::string& unset = "not given") {
    const auto text = [&](const nlohmann::ordered_json& v) { return v.is_null() ? unset : change_value_text(v); };
    return c.flag + " " + text(c.new_value) + " (was " + text(c.old_value) + ")";
}

// A resumed or forked run continues its checkpoint's weights, so an -e (weights or preset) other than
// the run's would only relabel it: refused, naming both, and the --config file an -e came from
// (`origin`: TrainConfig::origin_of("model"), " (from --config FILE)" or "").
inline void check_weights_unchanged(const std::vector<SettingChange>& changes, bool forked, const std::string& origin) {
    const auto text = [](const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    const bool from_file = origin.rfind(" (from --config", 0) == 0;
    for (const SettingChange& c : changes)
        if (c.flag == "--model")
            throw InputError("-e " + text(c.new_value) + origin + " differs from the run's -e " + text(c.old_value) +
                             ", but a " + (forked ? "forked" : "resumed") +
                             " run continues its checkpoint's weights; " +
                             (from_file ? "drop model= from the file, or drop --config" : "drop -e") +
                             " (to train other weights, start a new run: another -o, without -y 1 or --fork-from)");
}

// The "history" of a run resumed at `step` with the settings `now` (resumed_history).
struct ResumedHistory {
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();  // the whole new list
    std::vector<SettingChange> changes;                                // its entries at `step`
    std::vector<std::string> dropped;  // notes on the entries that go with no change of their flag now
};

// The record's history for a run resumed at `step`: its entries before `step`, then one per setting
// in which `now` differs from what trained step `step` (the record up to step - 1), then -x -1's new
// step total when it changed (epoch.history_entry()). An entry at or after `step` goes: its setting
// never trained a step that is kept (an epoch total's, derived, without a note).
inline ResumedHistory resumed_history(const nlohmann::ordered_json& record, int step, const TrainConfig& now,
                                      const std::string& file, const EpochSteps& epoch = {},
                                      const std::string& unset = "not given") {
    ResumedHistory h;
    h.changes = setting_changes(effective_train(record, file, step - 1), now, file);
    std::vector<std::string> flags;  // of the changes and the entries noted as dropped
    for (const SettingChange& c : h.changes) flags.push_back(c.flag);
    for (const nlohmann::ordered_json& e : history_entries(record, file, nullptr, /*epoch_totals=*/true)) {
        if (e["step"].get<int64_t>() < step) {
            h.entries.push_back(e);
            continue;
        }
        if (epoch_total_entry(e)) continue;
        const std::string flag = e["flag"].get<std::string>();
        if (std::find(flags.begin(), flags.end(), flag) != flags.end()) continue;
        flags.push_back(flag);
        h.dropped.push_back("drops the history entry " + describe_change({flag, e["old"], e["new"]}, unset) +
                            " of step " + std::to_string(e["step"].get<int64_t>()) +
                            ": no step trained with it is kept");
    }
    for (const SettingChange& c : h.changes)
        h.entries.push_back({{"step", step}, {"flag", c.flag}, {"old", c.old_value}, {"new", c.new_value}});
    if (epoch.history_entry())
        h.entries.push_back(
            {{"step", step}, {"flag", "--max-steps"}, {"old", epoch.was_total}, {"new", epoch.total}, {"epoch", true}});
    return h;
}

// Tokens per optimizer step of recorded settings: -d, or B*T*processes when -d is -1.
inline int64_t recorded_tokens_per_step(const nlohmann::ordered_json& train, const std::string& file) {
    const TrainConfig t = recorded_settings(train, file);
    if (t.total_batch_size > 0) return t.total_batch_size;
    return (int64_t)t.batch_size * t.seq_len * t.world_size;
}

// --config RUN/config.json of a run that trained on another number of processes with -d -1 (B*T*processes
// tokens per step): -b is per process, so the recorded flags would train another batch here. The batch
// (tokens per optimizer step, llm.c's -d) is the experiment, so it is kept: the -d that keeps it, said
// in one note (print); 0 when nothing changes (the same process count, a -d set, the same tokens).
// A batch this run's B*T*processes cannot divide is refused, naming the -b that keeps it.
inline int64_t batch_of_config_record(const TrainConfig& cfg, bool print) {
    if (cfg.config_record.empty() || cfg.total_batch_size > 0) return 0;
    const nlohmann::ordered_json record = read_run_record(cfg.config_record);
    if (!record.contains("train") || !record["train"].is_object()) return 0;
    const TrainConfig t = recorded_settings(record["train"], cfg.config_record);
    const int64_t tokens = recorded_tokens_per_step(record["train"], cfg.config_record);
    const int64_t here = (int64_t)cfg.batch_size * cfg.seq_len * cfg.world_size;
    if (t.world_size == cfg.world_size || tokens == here || tokens <= 0) return 0;
    if (tokens % here != 0) {
        const int64_t per_row = (int64_t)cfg.seq_len * cfg.world_size;
        throw InputError("--config " + cfg.config_record + ": that run trained " + std::to_string(tokens) +
                         " tokens/step on " + std::to_string(t.world_size) + " process(es), which B " +
                         std::to_string(cfg.batch_size) + " x T " + std::to_string(cfg.seq_len) + " x " +
                         std::to_string(cfg.world_size) + " process(es) = " + std::to_string(here) +
                         " tokens per micro-step cannot divide; give -b" +
                         (tokens % per_row == 0 ? " " + std::to_string(tokens / per_row) + " (or a divisor)"
                                                : " so that B*T*processes divides it") +
                         " to keep that batch, or -d for another batch");
    }
    if (print)
        std::fprintf(stderr,
                     "note: --config %s: that run trained %lld tokens/step on %d process(es); this run keeps that "
                     "batch with -d %lld (B %d x T %d x %d process(es) = %lld tokens per micro-step here)\n",
                     cfg.config_record.c_str(), (long long)tokens, t.world_size, (long long)tokens, cfg.batch_size,
                     cfg.seq_len, cfg.world_size, (long long)here);
    return tokens;
}

// --config RUN/config.json of a run that validated on another number of processes: -m counts global
// batches (B*T*processes tokens each), so the recorded -m would validate another set here. The
// validation set is part of the experiment (its losses are what runs are compared by), so it is kept
// as the batch is: the -m that reads the recorded tokens (-m x B x T x processes there; the data
// loader's rows make them the same tokens), said in one note (print); 0 when nothing changes (the same
// process count or tokens, -m -1, -m given on the command line, another -t or -j). Tokens that B*T*processes
// here cannot divide keep the recorded -m, with a note naming the -m values around them.
inline int64_t val_batches_of_config_record(const TrainConfig& cfg, bool print) {
    if (cfg.config_record.empty() || cfg.val_batches < 0) return 0;
    const bool typed = cfg.was_given("val-batches") && std::find(cfg.from_config.begin(), cfg.from_config.end(),
                                                                 "val-batches") == cfg.from_config.end();
    if (typed) return 0;
    const nlohmann::ordered_json record = read_run_record(cfg.config_record);
    if (!record.contains("train") || !record["train"].is_object()) return 0;
    const TrainConfig t = recorded_settings(record["train"], cfg.config_record);
    // only for another process count (as the batch, batch_of_config_record) on the run's own -j: a -b typed
    // on the same process count, or other validation data, is the user's choice of another set
    if (t.val_batches < 0 || t.val_batches != cfg.val_batches || t.seq_len != cfg.seq_len ||
        t.world_size == cfg.world_size || t.val_data != cfg.val_data)
        return 0;
    const int64_t tokens = (int64_t)t.val_batches * t.batch_size * t.seq_len * t.world_size;
    const int64_t here = (int64_t)cfg.batch_size * cfg.seq_len * cfg.world_size;
    if (tokens == (int64_t)cfg.val_batches * here || here <= 0) return 0;
    const std::string there = "--config " + cfg.config_record + ": that run validated " + std::to_string(tokens) +
                              " tokens (-m " + std::to_string(t.val_batches) + " x B " + std::to_string(t.batch_size) +
                              " x T " + std::to_string(t.seq_len) + " x " + std::to_string(t.world_size) +
                              " process(es))";
    const std::string per_batch = "B " + std::to_string(cfg.batch_size) + " x T " + std::to_string(cfg.seq_len) +
                                  " x " + std::to_string(cfg.world_size) + " process(es) = " + std::to_string(here) +
                                  " tokens per batch";
    if (tokens % here != 0) {
        const int64_t below = tokens / here, above = below + 1;
        const std::string lower =
            below > 0 ? "-m " + std::to_string(below) + " for " + std::to_string(below * here) + " tokens or " : "";
        if (print)
            std::fprintf(
                stderr,
                "note: %s, which %s cannot divide: this run validates %lld (-m %d); give %s-m %lld for %lld tokens\n",
                there.c_str(), per_batch.c_str(), (long long)(cfg.val_batches * here), cfg.val_batches, lower.c_str(),
                (long long)above, (long long)(above * here));
        return 0;
    }
    if (print)
        std::fprintf(stderr, "note: %s; this run keeps that validation set with -m %lld (%s here)\n", there.c_str(),
                     (long long)(tokens / here), per_batch.c_str());
    return tokens / here;
}

// The FNV-1a 64 of the -e FILE a run started from, as its record (`path`) keeps it ("derived"
// "model_file_fnv1a64"; a fork's record carries its source's); "" when it holds none.
inline std::string recorded_init_identity(const std::string& path) {
    const nlohmann::ordered_json record = read_run_record(path);
    const auto derived = record.find("derived");
    if (derived == record.end() || !derived->is_object()) return "";
    const auto id = derived->find("model_file_fnv1a64");
    return id != derived->end() && id->is_string() ? id->get<std::string>() : "";
}

// A new run whose -e FILE comes from a run's record (not typed): --config RUN/config.json, or -y 1 of a
// run stopped before its first checkpoint (it starts again from step 0). The file must still hold the
// weights that run started from, whose FNV-1a 64 (of the whole file: an llm.c file has no payload
// checksum) the record keeps in "derived" "model_file_fnv1a64" (records of earlier versions hold none:
// not checked). `identity`: the file's now. Refused when they differ, since the run would start from
// other weights than the record says without a word.
inline void check_init_weights_of_record(const TrainConfig& cfg, const std::string& identity) {
    const bool from_config =
        std::find(cfg.from_config.begin(), cfg.from_config.end(), "model") != cfg.from_config.end();
    const std::string path = from_config && !cfg.config_record.empty()    ? cfg.config_record
                             : cfg.resume == 1 && !cfg.was_given("model") ? cfg.settings_record
                                                                          : "";
    if (path.empty() || is_model_preset(cfg.model)) return;
    const std::string recorded = recorded_init_identity(path);
    if (recorded.empty() || recorded == identity) return;
    throw InputError("-e " + cfg.model + cfg.origin_of("model") +
                     " is not the file that run started from: its fnv1a64 is " +
                     (identity.empty() ? "unreadable" : identity) + " now and " + path + " records " + recorded +
                     "; restore that file, or give -e the weights to start from");
}

// The tokens the record's run trained in steps 1..step: a fork's "forked_from" tokens, then each step
// k after it at the -d of the record up to step k - 1 (a fork recorded without "tokens": its own -d
// for its first steps).
inline int64_t tokens_trained(const nlohmann::ordered_json& record, int step, const std::string& file) {
    int at = 0;
    int64_t tokens = 0;
    if (const std::optional<RecordedFork> fork = recorded_fork(record)) {
        at = fork->step;
        tokens = fork->tokens ? *fork->tokens : at * recorded_tokens_per_step(effective_train(record, file, at), file);
    }
    std::vector<int64_t> cuts;  // the steps after which the settings change
    for (const nlohmann::ordered_json& e : history_entries(record, file))
        if (e["step"].get<int64_t>() > at && e["step"].get<int64_t>() < step) cuts.push_back(e["step"].get<int64_t>());
    std::sort(cuts.begin(), cuts.end());
    cuts.push_back(step);
    for (const int64_t next : cuts) {
        if (next <= at) continue;
        tokens += (next - at) * recorded_tokens_per_step(effective_train(record, file, at), file);
        at = (int)next;
    }
    return tokens;
}

// The last step at which the record's "history" changed the validation set: -j or -m. The set is the
// first -m x B x T x processes tokens of -j (-m -1: all of it), and of those only -j and -m can change
// within a run: -b, -t and the process count are refused on a resume (the data loader's state) and in a
// fork, and a restart from step 0 writes a new record. Validation losses up to and including that step
// were measured on another set, so a "best" over the run counts only those after it. `flags`: the
// flags changed at that step ("--val-batches", "--val-data and --val-batches").
struct ValSetChange {
    int step = -1;  // -1: the set never changed
    std::string flags;
};
inline ValSetChange last_val_set_change(const nlohmann::ordered_json& record, const std::string& file) {
    static const char* const kValFlags[] = {"--val-data", "--val-batches"};
    ValSetChange c;
    std::vector<std::string> flags;
    for (const nlohmann::ordered_json& e : history_entries(record, file)) {
        const std::string flag = e["flag"].get<std::string>();
        if (std::find(std::begin(kValFlags), std::end(kValFlags), flag) == std::end(kValFlags)) continue;
        const int step = (int)e["step"].get<int64_t>();
        if (step > c.step) {
            c.step = step;
            flags.clear();
        }
        if (step == c.step && std::find(flags.begin(), flags.end(), flag) == flags.end()) flags.push_back(flag);
    }
    for (size_t i = 0; i < flags.size(); i++) c.flags += (i == 0 ? "" : " and ") + flags[i];
    return c;
}

// -x -1's step total (llmc/app/epoch_steps.h) for a run with `tokens_per_step` continued at step
// `start` > 0 from the run recorded in `file` (its config.json; the source's for --fork-from): the
// tokens that record's run trained by then and the settings that trained step `start`. Without the
// file (-y 1 of a run whose record is gone): every step at this run's tokens per step.
inline EpochSteps epoch_steps_of_record(int64_t epoch_tokens, int64_t tokens_per_step, int start,
                                        const std::string& file) {
    EpochSteps e;
    e.epoch_tokens = epoch_tokens;
    e.tokens_per_step = tokens_per_step;
    e.start = start;
    e.done_tokens = (int64_t)start * tokens_per_step;
    e.was_tokens_per_step = tokens_per_step;
    e.was_epoch = true;
    if (file_exists(file)) {
        const nlohmann::ordered_json record = read_run_record(file, "restore the run's config.json");
        const nlohmann::ordered_json then = effective_train(record, file, start - 1);
        e.done_tokens = tokens_trained(record, start, file);
        e.was_tokens_per_step = recorded_tokens_per_step(then, file);
        const int was_max_steps = recorded_settings(then, file).max_steps;
        e.was_epoch = was_max_steps < 0;
        e.was_total = was_max_steps;
    }
    e.total = epoch_total_steps(epoch_tokens, e.done_tokens, tokens_per_step, start);
    if (e.was_epoch) e.was_total = epoch_total_steps(epoch_tokens, e.done_tokens, e.was_tokens_per_step, start);
    return e;
}

// Rank 0 at the start of a run with -o: a run that starts (fresh, or forked: `fresh_record` plus
// "forked_from" with the source's step and tokens) writes config.json and config.toml; a resumed one
// (resumed_step >= 0, its config.json present) keeps both but for config.json's "history"
// (resumed_history), rewritten only when it changes and only when the run trains a step (`trains`):
// a change that trained nothing is not history. Each change is a note on stderr, and so is a changed
// step total of -x -1 (`epoch`, of a continued run); a not-given value in a note is `unset`
// (near_unset_text). Returns config.json's record as it stands now: the
// run's checkpoints fingerprint their settings from it (trained_settings_fingerprint).
inline nlohmann::ordered_json write_run_record(const std::string& out, nlohmann::ordered_json fresh_record,
                                               const std::string& config_toml, const TrainConfig& cfg, int resumed_step,
                                               bool trains, const EpochSteps& epoch = {},
                                               const std::string& unset = "not given") {
    const std::string json_path = join_path(out, "config.json");
    const bool forked = !cfg.fork_from.empty();
    if (resumed_step >= 0 && !forked && file_exists(json_path)) {
        nlohmann::ordered_json record = read_run_record(json_path, "restore the run's config.json");
        const ResumedHistory h = resumed_history(record, resumed_step, cfg, json_path, epoch, unset);
        if (!trains) {
            for (const SettingChange& c : h.changes)
                std::fprintf(stderr, "note: %s is not recorded: no step is trained (config.json unchanged)\n",
                             describe_change(c, unset).c_str());
            return record;
        }
        for (const SettingChange& c : h.changes)
            std::fprintf(stderr, "note: resuming at step %d with %s\n", resumed_step,
                         describe_change(c, unset).c_str());
        for (const std::string& d : h.dropped)
            std::fprintf(stderr, "note: resuming at step %d %s\n", resumed_step, d.c_str());
        if (epoch.changed()) std::fprintf(stderr, "%s\n", epoch.change_note().c_str());
        if (h.entries == (record.contains("history") ? record["history"] : nlohmann::ordered_json::array()))
            return record;
        if (h.entries.empty()) record.erase("history");
        else record["history"] = h.entries;
        write_text_file(json_path, json_file_text(record));
        return record;
    }
    if (forked) {
        for (const SettingChange& c : resumed_step >= 0 ? cfg.record_changes : std::vector<SettingChange>{})
            std::fprintf(stderr, "note: forking at step %d with %s\n", resumed_step, describe_change(c, unset).c_str());
        if (epoch.changed()) std::fprintf(stderr, "%s\n", epoch.change_note().c_str());
        const std::string source = join_path(fork_source(cfg.fork_from).dir, "config.json");
        fresh_record["forked_from"] = {{"checkpoint", recorded_form("fork_from", cfg.fork_from)},
                                       {"step", resumed_step},
                                       {"tokens", tokens_trained(read_run_record(source), resumed_step, source)}};
    }
    write_text_file(json_path, json_file_text(fresh_record));
    write_text_file(join_path(out, "config.toml"), config_toml);
    return fresh_record;
}

}  // namespace llmc
