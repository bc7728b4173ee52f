// What an output directory (-o) already holds of a run, read before a run writes anything there, so
// that the command's intent is checked against it (llmc/train/run_plan.h choose_resume):
//   run_files_in        the files of a run (config.json, metrics.jsonl, ...) that -o holds
//   data_files_in       the files of a data set (meta.json, tokenizer.bin, shards) that -o holds
//   nearest_run_dir     a sibling directory holding a run whose name is near -o's ("did you mean")
//   note_resume_without_checkpoint   the stderr note of -y 1 when -o has no complete checkpoint:
//                       its recorded run starts again at step 0, or -o holds no run at all
//   logged_checkpoint_step / check_checkpoints_not_deleted   -y 1 of an -o whose console.log
//                       records a checkpoint that is gone: refused (its records are not replaced)
// docs/training.md "Checkpoints and resuming".
#pragma once
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "llmc/app/flag_suggest.h"
#include "llmc/core/error.h"

namespace llmc {

// The files a run writes into -o before its first checkpoint, in the order they are named in notes.
inline const std::vector<std::string>& run_file_names() {
    static const std::vector<std::string> names = {"config.json",       "config.toml", "metrics.jsonl",
                                                   "logit_stats.jsonl", "console.log", "samples.txt"};
    return names;
}

// The run files (run_file_names) that exist in `dir`, empty ones too.
inline std::vector<std::string> run_files_present(const std::string& dir) {
    std::vector<std::string> out;
    for (const std::string& name : run_file_names()) {
        std::error_code ec;
        if (std::filesystem::exists(std::filesystem::path(dir) / name, ec)) out.push_back(name);
    }
    return out;
}

// The run files (run_file_names) that exist in `dir` and are not empty.
inline std::vector<std::string> run_files_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const std::string& name : run_file_names()) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(std::filesystem::path(dir) / name, ec);
        if (!ec && size > 0) out.push_back(name);
    }
    return out;
}

// The files of a data set (data/prepare.py's: meta.json, tokenizer.bin, train_*.bin and val_*.bin shards)
// that `dir` holds, sorted, at most `most` of them named (then "..."); empty when none.
inline std::vector<std::string> data_files_in(const std::string& dir, size_t most = 3) {
    std::vector<std::string> names;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string n = it->path().filename().string();
        const bool shard = (n.rfind("train_", 0) == 0 || n.rfind("val_", 0) == 0) && n.size() > 4 &&
                           n.compare(n.size() - 4, 4, ".bin") == 0;
        if (shard || n == "meta.json" || n == "tokenizer.bin") names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    if (names.size() > most) {
        names.resize(most);
        names.push_back("...");
    }
    return names;
}

// "a, b and c"
inline std::string name_list(const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size(); i++) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
    return out;
}

// A directory beside `dir` (same parent) that holds a run (a config.json) and whose name is a few
// edits from dir's (nearest_flag_name's rule), as its path; "" when there is none.
inline std::string nearest_run_dir(const std::string& dir) {
    const std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
    const std::filesystem::path name = p.has_filename() ? p.filename() : p.parent_path().filename();
    const std::filesystem::path parent = p.has_filename() ? p.parent_path() : p.parent_path().parent_path();
    std::vector<std::string> runs;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(parent.empty() ? "." : parent, ec)) {
        std::error_code ec2;
        if (e.is_directory(ec2) && std::filesystem::exists(e.path() / "config.json", ec2))
            runs.push_back(e.path().filename().string());
    }
    const std::string best = nearest_flag_name(name.string(), runs);
    return best.empty() || best == name.string() ? "" : (parent / best).string();
}

// -y 1 and `dir` has no complete checkpoint: one note on stderr saying what happens, from step 0.
inline void note_resume_without_checkpoint(const std::string& dir) {
    if (!run_files_in(dir).empty()) {
        std::fprintf(stderr,
                     "note: -y 1: %s has no complete checkpoint yet; its run starts again from step 0 with its "
                     "recorded settings and the flags given\n",
                     dir.c_str());
        return;
    }
    const std::string near = nearest_run_dir(dir);
    std::fprintf(stderr, "note: -y 1: %s holds no run (no config.json); a new run starts there from step 0%s\n",
                 dir.c_str(), near.empty() ? "" : ("; did you mean -o " + near + "?").c_str());
}

// The newest step of the checkpoint lines ("checkpoint of step N...", printed once a checkpoint is
// complete: llmc/train/step_report.h checkpoint_line) in dir/console.log; -1 when it has none.
inline int logged_checkpoint_step(const std::string& dir) {
    std::ifstream in(dir + "/console.log");
    static const std::string kPrefix = "checkpoint of step ";
    int newest = -1;
    std::string line;
    while (std::getline(in, line)) {
        if (line.compare(0, kPrefix.size(), kPrefix) != 0) continue;
        int step = 0;
        size_t i = kPrefix.size();
        if (i >= line.size() || !std::isdigit((unsigned char)line[i])) continue;
        for (; i < line.size() && std::isdigit((unsigned char)line[i]) && step < 100000000; i++)
            step = step * 10 + (line[i] - '0');
        newest = step > newest ? step : newest;
    }
    return newest;
}

// -y 1 and `dir` has no complete checkpoint: a run whose console.log records one had checkpoints that
// were deleted or damaged since (files or DONE_ markers), and starting it again from step 0 would replace the records of steps that no
// checkpoint can bring back; refused. A run stopped before its first checkpoint has no such line.
inline void check_checkpoints_not_deleted(const std::string& dir) {
    const int logged = logged_checkpoint_step(dir);
    if (logged < 0) return;
    throw InputError("-y 1: " + dir +
                     " has no complete checkpoint, but its console.log records the checkpoint of step " +
                     std::to_string(logged) +
                     ": its checkpoint files were deleted or damaged since, and a start from step 0 would replace "
                     "the run's records; restore the files to continue, or start over in a new -o");
}

}  // namespace llmc
