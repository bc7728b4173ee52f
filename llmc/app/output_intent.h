// What an output directory (-o) already holds of a run, read before a run writes anything there, so
// that the command's intent is checked against it (llmc/train/run_plan.h choose_resume):
//   run_files_in        the files of a run (config.json, metrics.jsonl, ...) that -o holds
//   nearest_run_dir     a sibling directory holding a run whose name is near -o's ("did you mean")
//   note_resume_without_checkpoint   the stderr note of -y 1 when -o has no complete checkpoint:
//                       its recorded run starts again at step 0, or -o holds no run at all
// docs/training.md "Checkpoints and resuming".
#pragma once
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "llmc/app/flag_suggest.h"

namespace llmc {

// The files a run writes into -o before its first checkpoint, in the order they are named in notes.
inline const std::vector<std::string>& run_file_names() {
    static const std::vector<std::string> names = {"config.json",       "config.toml", "metrics.jsonl",
                                                   "logit_stats.jsonl", "console.log", "samples.txt"};
    return names;
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

}  // namespace llmc
