// The tokenizer a model file records (docs/formats.md, model file words 24-25: the FNV-1a 64 of the
// tokenizer.bin next to the data it was trained on) and the rule every reader applies with it, so that
// a model file copied away from its run still cannot be read with another tokenizer of the same
// vocabulary (docs/training.md "A run's data identity"):
//   a new run's -e FILE      against -i
//   --eval-only -e FILE      against -j
//   generate_gpt2_ls         against --tokenizer (given, or taken from the checkpoint's run)
// Both sides known and different: one InputError naming the two identities and the fix. Either side
// unknown (a model file of an older build, an llm.c file, data without a tokenizer.bin): nothing here;
// the run record's checks and the vocabulary notes (llmc/app/checkpoint_run.h) stand.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "llmc/core/error.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/data_identity.h"
#include "llmc/text/tokenizer.h"  // kTokenizerMagic

namespace llmc {

// The id a model file records for data or a tokenizer file with identity `id`: the FNV-1a 64 of its
// tokenizer.bin's bytes, 0 without one (unknown).
inline uint64_t tokenizer_file_id(const DataIdentity& id) {
    return id.tokenizer_bin ? fnv1a64(id.tokenizer_bin->data(), id.tokenizer_bin->size()) : 0;
}

// 16 hex digits, as config.json's "tokenizer_bin_fnv1a64" writes the same hash.
inline std::string tokenizer_id_hex(uint64_t id) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)id);
    return hex;
}

// Whether the tokenizer `now` is known to be the one model file `model_id` records (both known, equal).
inline bool model_tokenizer_matches(uint64_t model_id, const DataIdentity& now) {
    return model_id != 0 && tokenizer_file_id(now) == model_id;
}

// The identity of generate_gpt2_ls's --tokenizer `path` when it is a tokenizer.bin (a regular file that
// starts with its magic), for check_model_tokenizer; empty (unknown) otherwise, so that a directory, a
// SentencePiece tokenizer.model or a damaged file is named as what it is by the tokenizer's own reader.
inline DataIdentity tokenizer_bin_identity(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return {};
    uint32_t magic = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(&magic), sizeof magic) || magic != kTokenizerMagic) return {};
    return read_tokenizer_identity(path);
}

// Refuses the input `what` (e.g. "-j 'data/x/val_*.bin'", "--tokenizer t.bin") with identity `now` when
// the model file `checkpoint`, recording tokenizer `model_id`, was trained with another tokenizer;
// `fix` ends the message.
inline void check_model_tokenizer(const std::string& checkpoint, uint64_t model_id, const DataIdentity& now,
                                  const std::string& what, const std::string& fix) {
    const uint64_t given = tokenizer_file_id(now);
    if (model_id == 0 || given == 0 || given == model_id) return;
    throw InputError(what + ": another tokenizer than " + checkpoint + " was trained with (the model file records " +
                     "tokenizer.bin fnv1a64 " + tokenizer_id_hex(model_id) + "; this is " + describe_now(now) + "); " +
                     fix);
}

}  // namespace llmc
