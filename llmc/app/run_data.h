// The data a run recorded in config.json's "data" (recorded_data, llmc/app/run_record.h) and the
// check every reader of the run makes with it (docs/training.md "A run's data identity"):
//   --eval-only          -j (given, or the run's own) against the run's training tokenizer
//   generate_gpt2_ls     --tokenizer (given, or the run's) against the run's tokenizer.bin
//   -y 1, --fork-from    -i and -j now against the run's training tokenizer
//   scripts/export_hf.py the run's tokenizer.bin (its own copy of the rule, in Python)
// A mismatch is one InputError naming what the record says, what the data has now, and the fix. A run
// recorded before "data" existed has no identity: its readers go on with one note saying so.
#pragma once
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "llmc/app/run_record.h"
#include "llmc/core/error.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/data_identity.h"

namespace llmc {

// The note of a reader of a run recorded without "data".
inline std::string unknown_data_note(const RecordedData& rec) {
    return "note: " + rec.config_path +
           " records no data identity (a run from before config.json's \"data\"): cannot check that its data "
           "and tokenizer are still those it trained on";
}

// Refuses the data `pattern` (named `what`, e.g. "-j 'data/x/val_*.bin'") when it is not tokenized as the
// run's training data was when the run recorded it; `fix` ends the message. Nothing when the record has
// no identity (the caller notes that).
inline void check_data_against_record(const RecordedData& rec, const std::string& pattern, const std::string& what,
                                      const std::string& fix) {
    if (!rec.known()) return;
    const DataIdentity now = read_data_identity(pattern);
    const std::string diff = recorded_tokenizer_difference(rec.train, now);
    if (diff.empty()) return;
    throw InputError(what + " is not tokenized as the run's training data was (" + diff +
                     " differs): " + rec.config_path + " records " + describe_recorded(rec.train) + " for '" +
                     rec.glob() + "', and the data has " + describe_now(now) + " now; " + fix);
}

// --config RUN/config.json starts a new run with that run's settings and model (docs/training.md
// "Starting from a run's settings"): its model (vocabulary, shape) was made for the tokenizer of the
// data it recorded, so training data `pattern` tokenized otherwise is refused, naming --config
// RUN/config.toml (the run's flags, with this data's vocabulary) as the way to a run on it on purpose.
inline void check_data_for_config_record(const RecordedData& rec, const std::string& pattern) {
    std::string toml = rec.config_path;
    if (toml.size() >= 5 && toml.compare(toml.size() - 5, 5, ".json") == 0) toml.replace(toml.size() - 5, 5, ".toml");
    check_data_against_record(rec, pattern, "-i '" + pattern + "'",
                              "--config " + rec.config_path + " gives this run that run's model, made for its " +
                                  "tokenizer: give -i data prepared with that tokenizer (data/prepare.py), or take " +
                                  "the run's flags without its vocabulary with --config " + toml + " and another -o");
}

// --config RUN/config.json with training data `pattern` tokenized as the recorded run's (checked by
// check_data_for_config_record): a note when it is other data than the run recorded (another
// directory, or other shard or token counts), "" when it is the same. A new run on other data is a
// legitimate experiment; the note says it is one.
inline std::string config_record_data_note(const RecordedData& rec, const std::string& pattern, size_t shards,
                                           int64_t tokens) {
    if (!rec.known()) return "";
    const int64_t rec_shards = rec.train_count("shards"), rec_tokens = rec.train_count("tokens");
    const bool same = same_directory(glob_dir(rec.glob()), glob_dir(pattern)) && rec_shards == (int64_t)shards &&
                      rec_tokens == tokens;
    if (same) return "";
    return "note: --config " + rec.config_path + ": -i '" + pattern + "' (" + std::to_string(tokens) + " tokens in " +
           std::to_string(shards) + " shard(s)) is other data than that run trained on ('" + rec.glob() + "', " +
           std::to_string(rec_tokens) + " tokens in " + std::to_string(rec_shards) +
           " shard(s)), tokenized alike: a new run on other data";
}

// FNV-1a 64 of a file's bytes as 16 hex digits ("" when it cannot be read).
inline std::string file_fnv1a64(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return "";
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(bytes.data(), bytes.size()));
    return hex;
}

}  // namespace llmc
