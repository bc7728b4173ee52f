// The data checks of plan_run (llmc/train/train_loop.h) before a run starts: the role of every shard of
// -i and -j, and, for a run that continues a model (-y 1, --fork-from, -e RUN/model_N.bin), that the data is
// tokenized as the run's was and what changed in it since. Read files only; refusals are InputErrors, notes go
// to stderr on rank 0.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "llmc/app/checkpoint_run.h"
#include "llmc/app/run_data.h"
#include "llmc/app/run_record.h"
#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/data_identity.h"
#include "llmc/io/data_roles.h"
#include "llmc/train/run_plan.h"

namespace llmc {

// Validation shards `val_shards` (of `val_what`, "-j '...'") in another directory than the training
// directory `train_dir` (of `train_what`, "-i '...'"): the note when that directory is known to hold
// another data set (tokenized alike: check_same_tokenizer): both directories have a meta.json and they
// differ (the same one is a copy of the set), or the training directory has validation shards of its own
// (val_*.bin, then named as the fix), as `make train TRAIN_ARGS="-i ..."` keeps tiny Shakespeare's -j.
// One data set split in two directories without a meta.json (split/train, split/val), and -j shards that
// are byte copies of the training directory's own val_*.bin, get none ("").
inline std::string other_val_set_note(const std::string& train_what, const std::string& train_dir,
                                      const std::string& val_what, const std::vector<std::string>& val_shards) {
    if (val_shards.empty()) return "";
    const auto meta_of = [](const std::string& dir) {  // "" without one
        std::ifstream in(join_path(dir, "meta.json"), std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    const std::string val_dir = std::filesystem::path(val_shards.front()).parent_path().string();
    const std::string vdir = val_dir.empty() ? std::string(".") : val_dir;
    if (same_directory(train_dir, vdir)) return "";
    const std::string train_meta = meta_of(train_dir), val_meta = meta_of(vdir);
    const std::vector<std::string> own_val = val_shards_in(train_dir);
    const bool other_set = !train_meta.empty() && !val_meta.empty() && train_meta != val_meta;
    // a copy of the set: the same meta.json (the same shards by prepare.py's hashes), or -j's shards
    // hold the bytes of the training directory's own validation shards
    const bool copy =
        (!train_meta.empty() && train_meta == val_meta) || (!own_val.empty() && all_copies_of(val_shards, own_val));
    const bool own_split = !own_val.empty();
    if (copy || !(other_set || own_split)) return "";
    return "note: " + val_what + " is in another directory than " + train_what + " (" + vdir + ", not " + train_dir +
           "): the validation loss is that of another data set than the training data's" +
           (own_split ? "; for its own validation split give -j '" + train_dir + "/val_*.bin'" : "");
}

// The role of every shard (llmc/io/data_roles.h): -i reads training shards, -j validation shards, no
// file both, no validation shard a copy of a training shard; -j of another data set than -i's gets
// other_val_set_note's note. Returns the note (rank 0; "" for none): run_training prints it once the run
// is sure to start (a fork's loader state can still refuse the data).
inline std::string check_data_roles(const TrainConfig& cfg, const RunPlan& p) {
    const std::string train_what = "-i '" + cfg.train_data + "'", val_what = "-j '" + cfg.val_data + "'";
    if (p.val) check_no_shared_shard(p.train->shard_paths(), p.val->shard_paths(), train_what, val_what);
    check_shard_roles(p.train->shard_paths(), ShardRole::Train, train_what, true, cfg.rank == 0);
    if (p.val) check_shard_roles(p.val->shard_paths(), ShardRole::Val, val_what, true, cfg.rank == 0);
    if (p.val) check_no_copied_shard(p.train->shard_paths(), p.val->shard_paths(), train_what, val_what);
    if (!p.val || cfg.rank != 0 || p.train->shard_paths().empty()) return "";
    const std::string train_dir = std::filesystem::path(p.train->shard_paths().front()).parent_path().string();
    return other_val_set_note(train_what, train_dir.empty() ? "." : train_dir, val_what, p.val->shard_paths());
}

// -y 1 (of a run with a checkpoint) and --fork-from continue a model on -i and -j: both must be
// tokenized as the run's training data was when it recorded it (llmc/app/run_data.h); a run recorded
// without an identity gets a note.
inline void check_data_of_continued_run(const TrainConfig& cfg) {
    const std::string dir = cfg.fork_from.empty() ? cfg.output_dir : fork_source(cfg.fork_from).dir;
    const std::string path = join_path(dir, "config.json");
    if (!file_exists(path)) return;  // -y 1 of a run whose record is gone: nothing to compare
    const RecordedData rec = recorded_data(read_run_record(path, "restore the run's config.json"), path);
    if (!rec.known()) {
        if (cfg.rank == 0) std::fprintf(stderr, "%s\n", unknown_data_note(rec).c_str());
        return;
    }
    const std::string fix = std::string("the model was trained on other tokens: prepare the data with the run's ") +
                            "tokenizer (data/prepare.py), or start a new run on this data";
    check_data_against_record(rec, cfg.train_data, "-i '" + cfg.train_data + "'", fix);
    if (!cfg.val_data.empty()) check_data_against_record(rec, cfg.val_data, "-j '" + cfg.val_data + "'", fix);
}

// -y 1 and --fork-from take the run's settings from its config.json: refused when it was edited after the
// checkpoint they continue was written (check_record_of_checkpoint), since the edit would change the run
// and the record of the steps it trained without a word; a change belongs on the command line.
inline void check_record_of_continued_run(const TrainConfig& cfg, const LoadedCheckpoint& ck) {
    const std::string path = join_path(ck.dir, "config.json");
    if (!file_exists(path)) return;  // -y 1 of a run whose record is gone: nothing to compare
    const std::string fix =
        "restore it, and give a setting to change as its flag on the command line of " +
        std::string(cfg.fork_from.empty() ? "-y 1, which records it in the history"
                                          : "--fork-from, which records it in the fork's settings") +
        " from step " + std::to_string(ck.step + 1);
    check_record_of_checkpoint(read_run_record(path, "restore the run's config.json"), path, ck.dir, ck.step, fix);
}

// -y 1 and --fork-from on data of the same glob prepared again (the tokenizer checked by
// check_data_of_continued_run), as recorded_shards_change tells it: training shards of other counts are
// refused when a checkpoint is continued (its data loader's place cannot be restored in them: said here
// with the data's change, before the loader's own refusal), of other content noted; validation shards of
// other counts or content noted (the validation set read from its start each time: its losses change).
inline void note_data_prepared_again(const TrainConfig& cfg, const RunPlan& p) {
    const std::string dir = cfg.fork_from.empty() ? cfg.output_dir : fork_source(cfg.fork_from).dir;
    const std::string path = join_path(dir, "config.json");
    if (cfg.rank != 0 || !file_exists(path)) return;
    const RecordedData rec = recorded_data(read_run_record(path, "restore the run's config.json"), path);
    const std::string train_content = shards_content_hash(p.train->shard_paths());
    const std::string counts = recorded_shards_change(rec.train, path, cfg.train_data, p.train->num_shards(),
                                                      p.train->total_tokens(), train_content);
    const std::string train = recorded_shards_change(rec.train, path, cfg.train_data, p.train->num_shards(),
                                                     p.train->total_tokens(), train_content, /*content_only=*/true);
    if (p.resume && !counts.empty() && train.empty())  // other counts: the loader's place is lost
        throw InputError("-i '" + cfg.train_data + "' " + counts +
                         ": the data was prepared again since, and the checkpoint's place in it (its data loader's "
                         "state) does not exist in these shards; prepare the data as the run's was (its meta.json's "
                         "args), or start a new run from the checkpoint's weights (-e " +
                         model_path(p.resume->dir, p.resume->step) + ")");
    if (!train.empty())
        std::fprintf(stderr,
                     "note: -i '%s' %s: the model goes on training on other text than so far (same tokenizer)\n",
                     cfg.train_data.c_str(), train.c_str());
    const std::string val =
        p.val ? recorded_shards_change(rec.val, path, cfg.val_data, p.val->num_shards(), p.val->total_tokens(),
                                       shards_content_hash(p.val->shard_paths()))
              : "";
    if (!val.empty())
        std::fprintf(stderr,
                     "note: -j '%s' %s: validation losses from here are not comparable with the run's earlier ones\n",
                     cfg.val_data.c_str(), val.c_str());
}

// -e RUN/model_N.bin for a new run (its weights only): the weights' embeddings belong to the tokenizer
// of that run, so -i and -j must be tokenized as its training data was, the rule of a fork
// (check_data_of_continued_run). A checkpoint without config.json beside it (an llm.c file) has no
// record to compare with.
inline void check_data_of_init_checkpoint(const TrainConfig& cfg) {
    const std::optional<CheckpointRun> run = read_checkpoint_run(cfg.model);
    if (!run) return;
    check_run_records_checkpoint_model(cfg.model, run->config_path);  // the record is this model's
    const std::string train_what = "-i '" + cfg.train_data + "'", val_what = "-j '" + cfg.val_data + "'";
    if (!run->data.known()) {
        if (cfg.rank == 0) std::fprintf(stderr, "%s\n", unknown_data_note(run->data).c_str());
        if (!run->train_data.empty())
            check_same_tokenizer(run->train_data,
                                 "the training data of " + run->config_path + " '" + run->train_data + "'",
                                 cfg.train_data, train_what, cfg.rank == 0);
        return;
    }
    const std::string fix = "-e " + cfg.model + "'s weights were trained on other tokens: prepare the data with " +
                            "its run's tokenizer (data/prepare.py), or start from a preset model";
    check_data_against_record(run->data, cfg.train_data, train_what, fix);
    if (!cfg.val_data.empty()) check_data_against_record(run->data, cfg.val_data, val_what, fix);
}

}  // namespace llmc
