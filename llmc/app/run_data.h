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
