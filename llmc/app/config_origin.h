// Errors about values a --config file set (TrainConfig::from_config), which name that file as their
// source: the error a user meets reads as if the value had been typed, while it came from a preset.
//   check_config_shard_patterns   -i/-j from the file that match no file (a relative pattern is read from
//                                 the directory the trainer starts in, not the file's)
//   check_loader_settings_of_config  -y 1 / --fork-from continue a checkpoint's data loader: -b, -t,
//                                 --seed, --shuffle, --sampler or -i that the file sets to other values
//                                 than the run's record
//   check_config_near_of_window   --near from the file (the paper preset's: its window's distance) with
//                                 another --window typed: the statistics would split at the file's
//                                 distance, not the new window's
//   config_total_batch_note       -d from the file with -b or -t typed: a note of the micro-batches a step
//                                 sums
// docs/training.md "--config" and "Resuming and forking".
#pragma once
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "llmc/app/run_history.h"
#include "llmc/app/run_record.h"
#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/io/dataloader.h"

namespace llmc {

// Whether the flag (long name) took its value from the --config file.
inline bool set_by_config(const TrainConfig& c, const std::string& long_name) {
    for (const std::string& f : c.from_config)
        if (f == long_name) return true;
    return false;
}

// A shard pattern the --config file gave that matches no file: refused naming the file and how to make
// the shards; for a relative pattern also the directory it was read from, and, when the trainer runs
// outside the directory that holds the file (a preset's paths are the repository root's), where to start.
// (A pattern given on the command line gets the data loader's error.)
inline void check_config_shard_patterns(const TrainConfig& c) {
    const struct {
        const char *key, *flag;
        const std::string& pattern;
    } data[] = {{"train-data", "-i", c.train_data}, {"val-data", "-j", c.val_data}};
    for (const auto& d : data) {
        if (d.pattern.empty() || !set_by_config(c, d.key) || shard_pattern_matches(d.pattern)) continue;
        const std::string head =
            "no files match the shard pattern '" + d.pattern + "' (" + d.key + " from --config " + c.config_file + ")";
        const std::string make = d.pattern.find("pg19") != std::string::npos
                                     ? "create the shards (scripts/pack_pg19.sh makes the paper's PG-19 data)"
                                     : "create the shards (data/prepare.py)";
        if (d.pattern[0] == '/') throw InputError(head + "; " + make + ", or give " + d.flag + " to override it");
        namespace fs = std::filesystem;
        std::error_code ec;
        const fs::path cwd = fs::current_path(ec);
        const fs::path file = fs::weakly_canonical(fs::absolute(c.config_file, ec), ec);
        const auto rel = file.lexically_relative(cwd);
        const bool file_below_cwd = !ec && !rel.empty() && *rel.begin() != "..";
        throw InputError(head + ", read relative to the current directory " + cwd.string() + "; " + make +
                         (file_below_cwd ? ""
                                         : ", or start the trainer from the directory the file's paths are "
                                           "relative to (a config file's relative paths are read from the "
                                           "directory the trainer starts in, not the file's; the repository "
                                           "root for configs/*.toml)") +
                         ", or give -i/-j");
    }
}

// -y 1 (of a run with a checkpoint) or --fork-from, with a --config file that sets a setting of the
// checkpoint's data loader to another value than the run's record: the loader could not continue
// (its state names only the numbers), so refused here naming the file, the values and the fixes.
inline void check_loader_settings_of_config(const TrainConfig& c) {
    static const char* const kLoaderFlags[] = {"batch-size", "seq-len", "seed", "shuffle", "sampler", "train-data"};
    std::string sets, recorded;  // "-b 64, -t 2048"; "-b 2, -t 256"
    for (const SettingChange& ch : c.record_changes) {
        const std::string name = ch.flag.substr(2);
        bool loader = false;
        for (const char* f : kLoaderFlags) loader = loader || name == f;
        if (!loader || !set_by_config(c, name)) continue;
        const SettingRow* row = setting_row_of_flag(name);
        const std::string names = row ? row->names : ch.flag;
        const std::string shown = names.substr(0, names.find(','));  // -b, or --seed
        sets += (sets.empty() ? "" : ", ") + shown + " " + change_value_text(ch.new_value);
        recorded += (recorded.empty() ? "" : " ") + shown + " " + change_value_text(ch.old_value);
    }
    if (sets.empty()) return;
    const std::string run = c.fork_from.empty() ? "-y 1 continues the run in " + c.output_dir + " from its checkpoint"
                                                : "--fork-from continues the checkpoint " + c.fork_from;
    throw InputError("--config " + c.config_file + " sets " + sets + ", but " + run + ", whose data loader ran with " +
                     recorded + " (its record " + c.settings_record +
                     "); drop --config (the record gives the run's settings), or give " + recorded +
                     " after it to keep the preset's other settings");
}

// --near N from the --config file while --window P (another value) is typed: the file's N is its own
// window's distance (configs/paper_pg19.toml: "near/far at the window's distance"), and the near/far
// statistics and plots would silently split at it, not at the new window. Refused with both fixes.
inline void check_config_near_of_window(const TrainConfig& c) {
    if (!c.near || !set_by_config(c, "near") || !c.overrides.window || set_by_config(c, "window")) return;
    const int near = *c.near, window = *c.overrides.window;
    if (near == window) return;
    throw InputError("--near " + std::to_string(near) + " (from --config " + c.config_file +
                     ") splits the logit statistics at distance " + std::to_string(near) + ", but --window " +
                     std::to_string(window) + " on the command line changed the window; give --near " +
                     std::to_string(window) + " to split at the new window, or --near " + std::to_string(near) +
                     " to keep the file's distance");
}

// -d from the --config file while -b or -t is typed: the file's tokens per step stay, and the typed sizes
// change only how many micro-batches one step sums (the paper preset's 524,288 tokens with -b 4 -t 64:
// 2048). A note saying so and how to change it ("" when not so).
inline std::string config_total_batch_note(const TrainConfig& c, int accum) {
    const auto typed = [&](const char* name) { return c.was_given(name) && !set_by_config(c, name); };
    // (-d -1 follows the typed sizes; one micro-batch per step sums nothing)
    if (!set_by_config(c, "total-batch-size") || c.total_batch_size <= 0 || accum <= 1 ||
        !(typed("batch-size") || typed("seq-len")))
        return "";
    const std::string given = std::string(typed("batch-size") ? "-b " + std::to_string(c.batch_size) : "") +
                              (typed("batch-size") && typed("seq-len") ? " " : "") +
                              (typed("seq-len") ? "-t " + std::to_string(c.seq_len) : "");
    return "note: -d " + std::to_string(c.total_batch_size) + " (from --config " + c.config_file + ") stays with " +
           given + " given here: each step sums " + std::to_string(accum) + " micro-batches" + " of " +
           std::to_string(c.batch_size) + " x " + std::to_string(c.seq_len) + " tokens" +
           (c.world_size > 1 ? " per process" : "") +
           "; give -d to change the tokens per step (-d -1: one micro-batch per step)";
}

}  // namespace llmc
