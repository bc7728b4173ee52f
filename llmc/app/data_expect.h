// --expect-tokenizer / --expect-vocab: the data a run is meant for, as a preset states it
// (configs/paper_pg19.toml: SentencePiece, vocabulary 10000), checked against every data set the run
// reads (-i and -j of a new, resumed or forked run; -j of --eval-only) before the model is built:
//   - the tokenizer: meta.json's "tokenizer" (data/prepare.py writes gpt2, sp or synthetic);
//   - the vocabulary: the one the trainer takes from the data (llmc/io/data_vocab.h: meta.json's
//     "vocab_size", else tokenizer.bin's header).
// Data that does not state an expected fact (no meta.json, or one without the key) is refused: the
// expectation cannot be checked. A directory that does not exist is left to the data loader, which
// names the pattern. docs/training.md "Presets and the data they expect".
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/io/data_identity.h"
#include "llmc/io/dataloader.h"

namespace llmc {

// The data scripts/pack_pg19.sh makes (the paper's PG-19: SentencePiece, vocabulary 10000), which an
// error suggests when the expectation is that and the data is PG-19 of another vocabulary or tokenizer.
inline bool expects_packed_pg19(const TrainConfig& c) {
    return c.expect_vocab == 10000 && (c.expect_tokenizer.empty() || c.expect_tokenizer == "sp");
}

// meta.json's "dataset" in `dir` ("" when it has none).
inline std::string meta_dataset(const std::string& dir) {
    std::ifstream in(dir + "/meta.json");
    if (!in) return "";
    const auto j = nlohmann::ordered_json::parse(in, nullptr, false);
    const auto d = j.is_object() ? j.find("dataset") : j.end();
    return d != j.end() && d->is_string() ? d->get<std::string>() : "";
}

// Refuses the data of `pattern` (named by `flag`, "-i" or "-j") when it does not hold what
// --expect-tokenizer / --expect-vocab ask for, or does not say: one line naming the data, what it
// holds, the expectation and where it came from (TrainConfig::origin_of), and the fix.
inline void check_expected_data(const TrainConfig& c, const std::string& pattern, const std::string& flag) {
    if (c.expect_tokenizer.empty() && c.expect_vocab == 0) return;
    std::error_code ec;
    const DataIdentity id = read_data_identity(pattern);
    if (!std::filesystem::is_directory(id.dir, ec)) return;  // the data loader names the missing data
    const std::string what = flag + " '" + pattern + "'";
    const std::string tok_flag = "--expect-tokenizer " + c.expect_tokenizer + c.origin_of("expect-tokenizer");
    const std::string vocab_flag = "--expect-vocab " + std::to_string(c.expect_vocab) + c.origin_of("expect-vocab");
    const bool tok_unknown = !c.expect_tokenizer.empty() && id.tokenizer.empty();
    const bool vocab_unknown = c.expect_vocab > 0 && id.vocab <= 0;
    if (tok_unknown || vocab_unknown) {
        const std::string why = !id.known()   ? id.dir + " has no meta.json or tokenizer.bin"
                                : tok_unknown ? (id.has_meta ? id.dir + "/meta.json names no tokenizer"
                                                             : id.dir + " has no meta.json naming its tokenizer")
                                : id.has_meta ? id.dir + "/meta.json names no vocabulary (vocab_size)"
                                              : id.dir + " has no meta.json and its tokenizer.bin states no vocabulary";
        throw InputError(what + " cannot be checked against " + (tok_unknown ? tok_flag : vocab_flag) + ": " + why +
                         "; give data that data/prepare.py made (its meta.json names the tokenizer and vocabulary), "
                         "or " +
                         (tok_unknown ? "--expect-tokenizer ''" : "--expect-vocab 0") + " to run it unchecked");
    }
    const bool tok_differs = !c.expect_tokenizer.empty() && id.tokenizer != c.expect_tokenizer;
    const bool vocab_differs = c.expect_vocab > 0 && id.vocab != c.expect_vocab;
    if (!tok_differs && !vocab_differs) return;
    const auto facts = [](const std::string& tokenizer, int vocab) {  // "tokenizer sp, vocabulary 10000"
        const std::string v = vocab > 0 ? "vocabulary " + std::to_string(vocab) : "";
        return tokenizer.empty() ? v : "tokenizer " + tokenizer + (v.empty() ? "" : ", " + v);
    };
    // the flags whose expectation the data misses, each with its origin (once when they share it)
    std::string asked = tok_differs ? tok_flag : vocab_flag;
    if (tok_differs && vocab_differs)
        asked = c.origin_of("expect-tokenizer") == c.origin_of("expect-vocab")
                    ? "--expect-tokenizer " + c.expect_tokenizer + " and --expect-vocab " +
                          std::to_string(c.expect_vocab) + c.origin_of("expect-vocab")
                    : tok_flag + " and " + vocab_flag;
    const std::string expected = facts(c.expect_tokenizer, c.expect_vocab);
    const std::string fix = expects_packed_pg19(c) && meta_dataset(id.dir) == "pg19"
                                ? "make the paper's PG-19 data in a directory of its own (scripts/pack_pg19.sh --out "
                                  "NEW_DIR) and point " +
                                      flag + " at it, or point " + flag + " at other data of " + expected
                                : "prepare data of " + expected + " with data/prepare.py and point " + flag + " at it";
    const std::string accept = (tok_differs ? "--expect-tokenizer " + id.tokenizer : "") +
                               (tok_differs && vocab_differs ? " " : "") +
                               (vocab_differs ? "--expect-vocab " + std::to_string(id.vocab) : "");
    throw InputError(what + " holds " + id.describe() + ", but " + asked +
                     (tok_differs && vocab_differs ? " ask" : " asks") + " for " +
                     facts(tok_differs ? c.expect_tokenizer : "", vocab_differs ? c.expect_vocab : 0) + ": " + fix +
                     ", or give " + accept + " to run on this data deliberately");
}

}  // namespace llmc
