// The checkpoint directory (the output dir, llm.c-like names):
//   model_NNNNNNNN.bin          model file of step N (llmc/io/checkpoint.h), written by rank 0
//   state_NNNNNNNN_RRRRR.bin    training state of step N, rank R (llmc/io/train_state.h)
//   DONE_NNNNNNNN               completion marker: written last, only when all of the above exist; text
//                               "step N world_size W\n", then "settings_fnv1a64 H\n" (the fingerprint of
//                               the settings that trained steps 1..N, llmc/app/run_record.h) when given
// Only steps with a marker count as checkpoints. Every file is written atomically
// (llmc/io/atomic_file.h), so a crash mid-save leaves an unmarked step that is ignored.
//
// Saving step N (the loop does the barrier):
//   if (rank == 0) save_model_checkpoint(model_path(dir, N), config, params, N);
//   save_train_state(state_path(dir, N, rank), config, state);
//   barrier();
//   if (rank == 0) { write_done_marker(dir, N, world_size, settings); prune_checkpoints(dir, keep, N); }
// Resuming: load_agreed_checkpoint(dir, config, comm), which calls load_newest_checkpoint(dir,
// config, rank, world_size) on every rank. With several ranks, one rank's damaged state file
// makes only that rank fall back, so the ranks agree on a step: s = min over ranks of the step
// each found, and ranks that found a newer one reload with max_step = s (repeat until all agree); the
// newer steps any rank found damaged are then retired by rank 0 (retire_checkpoints).
// Host-only, POSIX (opendir/unlink), no GPU needed.
#pragma once
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "llmc/io/atomic_file.h"
#include "llmc/io/checkpoint.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/dist/collective.h"
#include "llmc/io/train_state.h"

namespace llmc {

// ----------------------------------------------------------------------------------------------
// names

inline std::string join_path(const std::string& dir, const std::string& name) {
    if (dir.empty()) return name;
    return dir.back() == '/' ? dir + name : dir + "/" + name;
}
inline std::string model_path(const std::string& dir, int step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "model_%08d.bin", step);
    return join_path(dir, buf);
}
inline std::string state_path(const std::string& dir, int step, int rank) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "state_%08d_%05d.bin", step, rank);
    return join_path(dir, buf);
}
inline std::string done_path(const std::string& dir, int step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "DONE_%08d", step);
    return join_path(dir, buf);
}

// The marker of a step -y 1 passed over as damaged (retire_checkpoints): not a checkpoint.
inline std::string damaged_marker_path(const std::string& dir, int step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "DAMAGED_%08d", step);
    return join_path(dir, buf);
}

enum class CkptFileKind { None, Model, State, Done, Damaged };

// Recognizes the names above, and their atomic-write temporaries ("<name>.tmp.XXXXXX").
// Returns the kind and sets step; None for any other name.
inline CkptFileKind parse_checkpoint_name(const std::string& name, int& step) {
    size_t pos = 0;
    auto digits = [&](long long& value) {  // >= 1 digit, no overflow past INT_MAX
        size_t start = pos;
        value = 0;
        while (pos < name.size() && name[pos] >= '0' && name[pos] <= '9') {
            value = value * 10 + (name[pos] - '0');
            if (value > INT_MAX) return false;
            pos++;
        }
        return pos > start;
    };
    auto literal = [&](const char* s) {
        size_t n = std::strlen(s);
        if (name.compare(pos, n, s) != 0) return false;
        pos += n;
        return true;
    };
    auto at_end = [&]() { return pos == name.size() || name.compare(pos, 5, ".tmp.") == 0; };
    long long a = 0, b = 0;
    CkptFileKind kind = CkptFileKind::None;
    if (literal("model_")) {
        if (digits(a) && literal(".bin") && at_end()) kind = CkptFileKind::Model;
    } else if (literal("state_")) {
        if (digits(a) && literal("_") && digits(b) && literal(".bin") && at_end()) kind = CkptFileKind::State;
    } else if (literal("DONE_")) {
        if (digits(a) && at_end()) kind = CkptFileKind::Done;
    } else if (literal("DAMAGED_")) {
        if (digits(a) && at_end()) kind = CkptFileKind::Damaged;
    }
    step = kind == CkptFileKind::None ? -1 : (int)a;
    return kind;
}

// Names in dir (an empty list when dir does not exist).
inline std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
        if (errno == ENOENT) return names;
        throw InputError("cannot list checkpoint directory " + dir + ": " + std::strerror(errno) +
                         "; check that it is a readable directory");
    }
    while (struct dirent* e = ::readdir(d)) names.push_back(e->d_name);
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

// ----------------------------------------------------------------------------------------------
// markers

// The key of a marker's settings-fingerprint line.
constexpr const char* kMarkerSettingsKey = "settings_fnv1a64";

inline bool file_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Marks step complete. Call after every rank's files of the step were written (atomic writes
// fsync before they rename, so existing files are durable); refuses if one is missing.
// settings_fingerprint: 16 hex digits, the second line of the marker ("" writes none).
inline void write_done_marker(const std::string& dir, int step, int world_size,
                              const std::string& settings_fingerprint = "") {
    std::vector<std::string> needed = {model_path(dir, step)};
    for (int r = 0; r < world_size; r++) needed.push_back(state_path(dir, step, r));
    for (const std::string& p : needed)
        if (!file_exists(p))
            throw InputError("cannot mark step " + std::to_string(step) + " complete: " + p +
                             " is missing; every rank must finish its save before rank 0 writes the marker");
    std::string text = "step " + std::to_string(step) + " world_size " + std::to_string(world_size) + "\n";
    if (!settings_fingerprint.empty()) text += std::string(kMarkerSettingsKey) + " " + settings_fingerprint + "\n";
    std::remove(damaged_marker_path(dir, step).c_str());  // the step's files are new: none is damaged now
    write_file_atomic(done_path(dir, step), text.data(), text.size());
}

// Steps that have a completion marker, ascending, each once (DONE_5 and DONE_00000005 are one step).
inline std::vector<int> complete_steps(const std::string& dir) {
    std::vector<int> steps;
    for (const std::string& name : list_dir(dir)) {
        int step;
        if (parse_checkpoint_name(name, step) == CkptFileKind::Done && name.find(".tmp.") == std::string::npos)
            steps.push_back(step);
    }
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    return steps;
}

// The world size a step's marker records ("step S world_size W"), or -1 when it cannot be read.
inline int marker_world_size(const std::string& dir, int step) {
    std::FILE* f = std::fopen(done_path(dir, step).c_str(), "r");
    if (!f) return -1;
    int s = -1, w = -1;
    const bool ok = std::fscanf(f, "step %d world_size %d", &s, &w) == 2 && s == step;
    std::fclose(f);
    return ok ? w : -1;
}

// The settings fingerprint a step's marker records (its line "settings_fnv1a64 H"), or "" when it has
// none (markers of earlier versions) or cannot be read, or its first line is not this step's.
inline std::string marker_settings_fingerprint(const std::string& dir, int step) {
    std::ifstream in(done_path(dir, step), std::ios::binary);
    std::string first, line;
    if (!std::getline(in, first) || first.rfind("step " + std::to_string(step) + " world_size ", 0) != 0) return "";
    const std::string key = std::string(kMarkerSettingsKey) + " ";
    while (std::getline(in, line))
        if (line.rfind(key, 0) == 0) return line.substr(key.size());
    return "";
}

// The newest step with a marker, or -1 when there is none.
inline int newest_complete_step(const std::string& dir) {
    std::vector<int> s = complete_steps(dir);
    return s.empty() ? -1 : s.back();
}

// ----------------------------------------------------------------------------------------------
// loading

struct LoadedCheckpoint {
    std::string dir;  // the run directory it was loaded from
    int step = 0;
    ModelCheckpoint model;
    TrainState state;
    // marked steps after `step` found damaged: by this rank (load_newest_checkpoint), by any rank
    // (load_agreed_checkpoint); -y 1 retires them (retire_checkpoints)
    std::vector<int> damaged_newer;
};

// The first field in which two models differ: its name (the model flag's where there is one, e.g.
// "layers") and both values as text (integers as integers, "2" and "3").
struct ModelDifference {
    std::string field, a, b;
};
inline std::optional<ModelDifference> first_model_difference(const ModelConfig& a, const ModelConfig& b) {
    auto text = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return std::string(buf);
    };
    const std::pair<const char*, std::pair<double, double>> fields[] = {
        {"max-seq-len", {a.max_seq_len, b.max_seq_len}},
        {"vocab", {a.vocab_size, b.vocab_size}},
        {"padded vocab", {a.padded_vocab_size, b.padded_vocab_size}},
        {"layers", {a.num_layers, b.num_layers}},
        {"heads", {a.num_heads, b.num_heads}},
        {"channels", {a.channels, b.channels}},
        {"global-heads", {a.global_heads, b.global_heads}},
        {"window", {a.window, b.window}},
        {"qk-norm", {a.qk_norm, b.qk_norm}},
        {"attn-softcap", {a.attn_softcap, b.attn_softcap}},
        {"tied embeddings", {a.tied_embeddings, b.tied_embeddings}},
        {"bias", {a.bias, b.bias}}};
    for (const auto& f : fields)
        if (f.second.first != f.second.second)
            return ModelDifference{f.first, text(f.second.first), text(f.second.second)};
    if (a.gelu != b.gelu) return ModelDifference{"gelu", gelu_name(a.gelu), gelu_name(b.gelu)};
    return std::nullopt;
}

// Returns "" when a and b are the same model, else the first differing field, e.g. "layers 6 vs 12".
inline std::string config_difference(const ModelConfig& a, const ModelConfig& b) {
    const std::optional<ModelDifference> d = first_model_difference(a, b);
    return d ? d->field + " " + d->a + " vs " + d->b : "";
}

// A checkpoint of another model than the one the run's flags make (load_checkpoint_at).
struct CheckpointModelMismatch : InputError {
    ModelDifference difference;  // a: the checkpoint's, b: the run's
    CheckpointModelMismatch(const std::string& msg, const ModelDifference& d) : InputError(msg), difference(d) {}
};

// Loads the model file and this rank's state of one complete step, checking that they belong
// to `expected` (InputError if not) and to each other (CheckpointDamaged if not).
inline LoadedCheckpoint load_checkpoint_at(const std::string& dir, int step, const ModelConfig& expected, int rank,
                                           int world_size) {
    LoadedCheckpoint ck;
    ck.dir = dir;
    ck.step = step;
    const std::string mpath = model_path(dir, step), spath = state_path(dir, step, rank);
    ck.model = load_model_checkpoint(mpath);
    // A header with its checksum (this build's files) that fails it is damaged in the loaders. Older
    // builds' headers carry none: the step's other file says whether a mismatch is the user's or a
    // damaged header's (CheckpointDamaged: the caller falls back). A model file of another model than
    // its own state file records is damaged; so is a state file naming another model than a matching
    // model file, another rank than its name, or another process count than the step's marker.
    const std::optional<TrainStateHeader> sh = peek_train_state_header(spath);
    const std::optional<ModelDifference> diff = first_model_difference(ck.model.config, expected);
    if (diff && sh && sh->config_hash == model_config_hash(expected))
        throw CheckpointDamaged(mpath + ": the header describes another model (" +
                                config_difference(ck.model.config, expected) + ") than its training state " + spath +
                                " records; the file is damaged, use another checkpoint");
    if (diff)
        throw CheckpointModelMismatch(mpath + ": checkpoint is for a different model (checkpoint vs this run: " +
                                          config_difference(ck.model.config, expected) +
                                          "); resume with the same model flags or use another output directory",
                                      *diff);
    if (ck.model.step != step)
        throw CheckpointDamaged(mpath + ": header says step " + std::to_string(ck.model.step) + " but the name says " +
                                std::to_string(step) + "; use another checkpoint");
    if (sh) {
        auto damaged = [&](const std::string& what) {
            return CheckpointDamaged(spath + ": the header " + what + "; the file is damaged, use another checkpoint");
        };
        if (sh->config_hash != model_config_hash(expected))
            throw damaged("describes another model than " + mpath + " (config hash mismatch)");
        if (sh->rank != rank)
            throw damaged("says rank " + std::to_string(sh->rank) + ", its name rank " + std::to_string(rank));
        if (sh->world_size != world_size && marker_world_size(dir, step) == world_size)
            throw damaged("says " + std::to_string(sh->world_size) + " processes, the step's marker " +
                          std::to_string(world_size));
    }
    // a rank the step never had (a resume on more processes than wrote it): the user's process count,
    // not a damaged checkpoint, as rank 0 finds in its own file's header
    const int written = marker_world_size(dir, step);
    if (written > 0 && written != world_size && rank >= written && !file_exists(spath)) {
        StateWorldSizeMismatch e(spath + ": checkpoint written by " + std::to_string(written) +
                                     " processes, this run has " + std::to_string(world_size),
                                 written);
        e.step = step;
        throw e;
    }
    try {
        ck.state = load_train_state(spath, expected, rank, world_size);
    } catch (StateWorldSizeMismatch& e) {  // the step whose files mismatch, not the newest one's
        e.step = step;
        throw;
    }
    if (ck.state.step != step)
        throw CheckpointDamaged(spath + ": header says step " + std::to_string(ck.state.step) + " but the name says " +
                                std::to_string(step) + "; use another checkpoint");
    return ck;
}

// A CheckpointDamaged message ("FILE: what is wrong; what to do") without its advice, which names
// another checkpoint: the "all damaged" error below gives its own.
inline std::string damage_without_advice(const std::string& msg) {
    const size_t cut = msg.rfind("; ");
    return cut == std::string::npos ? msg : msg.substr(0, cut);
}

// The newest complete checkpoint with step <= max_step. A damaged one (missing file, size,
// checksum) is reported on stderr and the previous complete one is tried. Returns nullopt when
// dir has no complete checkpoint; throws InputError when all of them are damaged, or on a
// mismatch that is the user's (model flags, process count), which no fallback would fix.
inline std::optional<LoadedCheckpoint> load_newest_checkpoint(const std::string& dir, const ModelConfig& expected,
                                                              int rank, int world_size, int max_step = INT_MAX) {
    std::vector<int> steps = complete_steps(dir), damaged;
    std::string first_error;
    int tried = 0;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
        if (*it > max_step) continue;
        tried++;
        try {
            LoadedCheckpoint ck = load_checkpoint_at(dir, *it, expected, rank, world_size);
            ck.damaged_newer = damaged;
            return ck;
        } catch (const CheckpointDamaged& e) {
            std::cerr << "warning: checkpoint step " << *it << " is damaged (" << e.what()
                      << "); falling back to the previous complete checkpoint\n";
            if (first_error.empty()) first_error = damage_without_advice(e.what());
            damaged.push_back(*it);
        }
    }
    // (a run without -y into dir is refused, as it holds checkpoints: the ways on are a copy of the files
    // or the run's settings in another directory)
    if (tried == 0) return std::nullopt;
    throw InputError("no usable checkpoint in " + dir + ": all " + std::to_string(tried) +
                     " complete checkpoints are damaged (newest: " + first_error +
                     "); restore them from a copy and resume again, or start the run over in a new directory with "
                     "its settings: --config " +
                     join_path(dir, "config.json") + " -o NEW_DIR (" + dir + " is left as it is)");
}

// After -y 1 fell back past marked steps found damaged (LoadedCheckpoint::damaged_newer): they belong
// to a trajectory the run leaves. Each one's DONE_ marker is renamed DAMAGED_ (the marker's text kept; its
// files stay, for inspection, until --keep-checkpoints prunes them with the marker), so that no reader
// (-y 1, --eval-only -e RUN, export_hf.py, the newest-checkpoint hints) takes it for the run's newest
// checkpoint; a save of that step again removes the DAMAGED_ marker. Only a step some rank found damaged
// is retired (one rank's state file included): a step a rank did not list (a listing that differs) is
// not damage. Rank 0, holding the directory's lock (llmc/io/output_lock.h), once the run goes ahead.
// Returns the steps retired.
inline std::vector<int> retire_checkpoints(const std::string& dir, const std::vector<int>& steps) {
    std::vector<int> retired;
    for (const std::string& name : list_dir(dir)) {
        int s;
        if (parse_checkpoint_name(name, s) != CkptFileKind::Done || name.find(".tmp.") != std::string::npos ||
            std::find(steps.begin(), steps.end(), s) == steps.end())
            continue;
        const std::string from = join_path(dir, name), to = damaged_marker_path(dir, s);
        if (std::rename(from.c_str(), to.c_str()) != 0)
            throw InputError("cannot rename " + from + " to " + to + " (" + std::strerror(errno) +
                             "), the marker of a damaged checkpoint this run leaves behind; check the permissions "
                             "of " +
                             dir);
        retired.push_back(s);
    }
    std::sort(retired.begin(), retired.end());
    retired.erase(std::unique(retired.begin(), retired.end()), retired.end());
    return retired;
}

// The union over the ranks of the steps after `step` each found damaged (`mine`: this rank's), ascending:
// each round takes, as the minimum over the ranks, the smallest of each rank's steps above the last one
// found, until no rank has one left. Every rank makes the same calls.
inline std::vector<int> damaged_on_any_rank(const std::vector<int>& mine, int step, Collective& comm) {
    std::vector<int> all;
    long long last = step;
    for (;;) {
        long long next = LLONG_MAX;
        for (const int s : mine)
            if (s > last && s < next) next = s;
        next = comm.all_reduce_int(next, ReduceOp::Min);
        if (next == LLONG_MAX) return all;
        all.push_back((int)next);
        last = next;
    }
}

// -y 1 with several ranks: each rank loads the newest complete checkpoint it can (a damaged
// state file makes only that rank fall back); they agree on the minimum step and ranks that found
// a newer one reload at most that step, until all hold the same step.
inline std::optional<LoadedCheckpoint> load_agreed_checkpoint(const std::string& out, const ModelConfig& m,
                                                              Collective& comm) {
    const int rank = comm.rank(), world = comm.world_size();
    std::optional<LoadedCheckpoint> ck = load_newest_checkpoint(out, m, rank, world);
    for (;;) {
        const long long mine = ck ? ck->step : -1;
        const long long lo = comm.all_reduce_int(mine, ReduceOp::Min), hi = comm.all_reduce_int(mine, ReduceOp::Max);
        if (lo == hi) {
            if (ck) ck->damaged_newer = damaged_on_any_rank(ck->damaged_newer, ck->step, comm);
            return ck;
        }
        if (lo < 0)
            throw InputError("rank " + std::to_string(rank) + (mine < 0 ? " found no" : " found a") +
                             " complete checkpoint in " + out + " but another rank did" + (mine < 0 ? "" : " not") +
                             "; every rank must see the same -o directory (a shared file system)");
        if (mine != lo) {
            std::vector<int> damaged = ck->damaged_newer;  // (mine > lo >= 0: ck holds a checkpoint)
            ck = load_newest_checkpoint(out, m, rank, world, (int)lo);
            if (ck) ck->damaged_newer.insert(ck->damaged_newer.end(), damaged.begin(), damaged.end());
        }
    }
}

// ----------------------------------------------------------------------------------------------
// pruning

// Keeps the newest `keep` complete checkpoints (keep <= 0 keeps all) and deletes the older
// complete ones, plus leftovers of unfinished saves older than the newest complete step (a
// crashed run's). Never touches protect_step (the one just written) nor anything newer than
// the newest complete step (a save in progress), nor the steps in `pinned` (the logit alarm's
// pinned checkpoints, alarm_pins in llmc/train/training_model.h; they do not count toward `keep`). A step's marker is removed
// before its files, so a crash mid-prune leaves an unmarked step, never a marked incomplete one.
// Whatever `keep` (0 included), the atomic-write temporaries ("<name>.tmp.XXXXXX") of steps up to the
// newest complete one are deleted: pruning runs after every rank finished its save, so they are a
// killed writer's; a kept step keeps only its own files. Returns the complete steps it deleted, oldest
// first (their caller names each: a checkpoint is a point to fork, evaluate or export from).
inline std::vector<int> prune_checkpoints(const std::string& dir, int keep, int protect_step = -1,
                                          const std::vector<int>& pinned = {}) {
    std::vector<int> complete = complete_steps(dir);
    if (complete.empty()) return {};
    const int newest = complete.back();
    auto is_pinned = [&](int step) { return std::find(pinned.begin(), pinned.end(), step) != pinned.end(); };
    complete.erase(std::remove_if(complete.begin(), complete.end(), is_pinned), complete.end());
    const size_t first_kept = complete.size() > (size_t)keep ? complete.size() - (size_t)keep : 0;
    auto kept = [&](int step) {
        if (step == protect_step || step >= newest || is_pinned(step)) return true;
        for (size_t i = first_kept; i < complete.size(); i++)
            if (complete[i] == step) return true;
        return false;
    };
    std::vector<std::string> markers, files;
    std::vector<int> pruned;
    for (const std::string& name : list_dir(dir)) {
        int step;
        CkptFileKind kind = parse_checkpoint_name(name, step);
        const bool temporary = name.find(".tmp.") != std::string::npos;
        if (kind == CkptFileKind::None || (temporary ? step > newest : keep <= 0 || kept(step))) continue;
        bool is_marker = kind == CkptFileKind::Done && !temporary;
        (is_marker ? markers : files).push_back(join_path(dir, name));
        if (is_marker || (kind == CkptFileKind::Damaged && !temporary)) pruned.push_back(step);  // each said
    }
    std::sort(pruned.begin(), pruned.end());
    pruned.erase(std::unique(pruned.begin(), pruned.end()), pruned.end());
    auto remove = [](const std::string& p) {
        if (::unlink(p.c_str()) != 0 && errno != ENOENT)
            std::cerr << "warning: could not delete old checkpoint file " << p << ": " << std::strerror(errno) << "\n";
    };
    for (const std::string& p : markers) remove(p);
    if (!markers.empty()) fsync_dir(dir);
    for (const std::string& p : files) remove(p);
    return pruned;
}

// The complete checkpoints in dir that the next save (of a newer step) would prune with `keep`, oldest
// first: the oldest of those not pinned, all but the newest keep - 1 (prune_checkpoints keeps the newest
// `keep`, the new one included). Empty for keep <= 0.
inline std::vector<int> steps_next_save_prunes(const std::string& dir, int keep, const std::vector<int>& pinned = {}) {
    if (keep <= 0) return {};
    std::vector<int> complete = complete_steps(dir);
    complete.erase(
        std::remove_if(complete.begin(), complete.end(),
                       [&](int step) { return std::find(pinned.begin(), pinned.end(), step) != pinned.end(); }),
        complete.end());
    const size_t stays = (size_t)keep - 1;
    if (complete.size() <= stays) return {};
    complete.resize(complete.size() - stays);
    return complete;
}

// Deletes the atomic-write temporaries ("<name>.tmp.XXXXXX") that a killed training run left in dir:
// those of checkpoint files and of the run's own files (config.json, config.toml, metrics.jsonl,
// logit_stats.jsonl). Call only while holding dir's lock (llmc/io/output_lock.h) before writing:
// then no other trainer writes there, and --eval-only's files (eval.json, attention maps) are left alone.
inline void remove_stale_temporaries(const std::string& dir) {
    static const char* const run_files[] = {"config.json", "config.toml", "metrics.jsonl", "logit_stats.jsonl"};
    for (const std::string& name : list_dir(dir)) {
        const size_t at = name.find(".tmp.");
        if (at == std::string::npos) continue;
        int step;
        bool ours = parse_checkpoint_name(name, step) != CkptFileKind::None;
        for (const char* f : run_files) ours = ours || name.compare(0, at, f) == 0;
        if (ours && ::unlink(join_path(dir, name).c_str()) != 0 && errno != ENOENT)
            std::cerr << "warning: could not delete a killed run's temporary file " << join_path(dir, name) << ": "
                      << std::strerror(errno) << "\n";
    }
}

}  // namespace llmc
