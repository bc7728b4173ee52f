// The data a run recorded in config.json's "data" (recorded_data, llmc/app/run_record.h) and the
// check every reader of the run makes with it (docs/training.md "A run's data identity"):
//   --eval-only          -j (given, or the run's own) against the run's training tokenizer
//   generate_gpt2_ls     --tokenizer (given, or the run's) against the run's training tokenizer: the
//                        facts of the data set it belongs to (read_tokenizer_identity)
//   -y 1, --fork-from    -i and -j now against the run's training tokenizer
//   scripts/export_hf.py the run's tokenizer.bin (its own copy of the rule, in Python)
// A mismatch is one InputError naming what the record says, what the data has now, and the fix. A run
// recorded before "data" existed has no identity: its readers go on with one note saying so; data
// without identity gets the note of a check that cannot be made (cannot_check_note). The same
// tokenizer on other text (other counts, or other content by data/prepare.py's shard hashes:
// recorded_shards_change) is read, with a note.
#pragma once
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/config_json.h"
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

// The note of a reader comparing data `pattern` (named `what`) with a recorded identity
// (check_data_against_record) when the data has none to compare (neither meta.json nor tokenizer.bin),
// as training notes it; "" when it has one, or is the run's training data set itself.
inline std::string unknown_data_now_note(const RecordedData& rec, const std::string& pattern, const std::string& what) {
    const DataIdentity now = read_data_identity(pattern);
    std::error_code ec;
    if (now.known() || same_directory(glob_dir(rec.glob()), now.dir) || !std::filesystem::is_directory(now.dir, ec))
        return "";
    return cannot_check_note(
        what + " and the training data of " + rec.config_path + " '" + rec.glob() + "' were tokenized alike",
        now.dir + " has no meta.json or tokenizer.bin");
}

// How the shards of `pattern` (their count, tokens and shards_content_hash as the data loader finds them
// now) differ from a role of the record's "data" (`role`, written by the record `config_path`) naming
// the same glob: "holds 70339 tokens in 1 shard(s) now, 36060 in 1 when RUN/config.json recorded it",
// or with the same counts "holds other tokens now than when RUN/config.json recorded it (the same 36060
// tokens in 1 shard(s), but their sha256 in DIR/meta.json differ)"; "" when they do not differ, when
// the record names another glob, or when it lacks the counts (or either side the hash, for content).
// content_only: counts are not compared (a reader whose data loader refuses other counts itself).
inline std::string recorded_shards_change(const nlohmann::ordered_json& role, const std::string& config_path,
                                          const std::string& pattern, size_t shards, int64_t tokens,
                                          const std::string& content, bool content_only = false) {
    if (!role.is_object()) return "";
    const auto glob = role.find("glob"), n_shards = role.find("shards"), n_tokens = role.find("tokens"),
               hash = role.find("shards_sha256_fnv1a64");
    if (glob == role.end() || !glob->is_string() ||
        (glob->get<std::string>() != pattern && glob->get<std::string>() != recorded_form("train_data", pattern)))
        return "";
    if (n_shards == role.end() || n_tokens == role.end() || !n_shards->is_number_integer() ||
        !n_tokens->is_number_integer())
        return "";
    const int64_t rec_shards = n_shards->get<int64_t>(), rec_tokens = n_tokens->get<int64_t>();
    if (rec_shards != (int64_t)shards || rec_tokens != tokens)
        return content_only ? ""
                            : "holds " + std::to_string(tokens) + " tokens in " + std::to_string(shards) +
                                  " shard(s) now, " + std::to_string(rec_tokens) + " in " + std::to_string(rec_shards) +
                                  " when " + config_path + " recorded it";
    if (hash == role.end() || !hash->is_string() || content.empty() || hash->get<std::string>() == content) return "";
    return "holds other tokens now than when " + config_path + " recorded it (the same " + std::to_string(tokens) +
           " tokens in " + std::to_string(shards) + " shard(s), but their sha256 in " + glob_dir(pattern) +
           "/meta.json differ)";
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
                                           int64_t tokens, const std::string& content) {
    if (!rec.known()) return "";
    const std::string prepared_again =
        recorded_shards_change(rec.train, rec.config_path, pattern, shards, tokens, content, /*content_only=*/true);
    if (!prepared_again.empty())
        return "note: --config " + rec.config_path + ": -i '" + pattern + "' " + prepared_again +
               ", tokenized alike: a new run on other data";
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
    uint64_t h = FNV1A64_OFFSET;
    std::vector<char> chunk(1 << 20);  // streamed: a model file may be hundreds of MB
    while (in) {
        in.read(chunk.data(), (std::streamsize)chunk.size());
        h = fnv1a64(chunk.data(), (size_t)in.gcount(), h);
    }
    if (in.bad()) return "";
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    return hex;
}

}  // namespace llmc
