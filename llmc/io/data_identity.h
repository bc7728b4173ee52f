// Which tokenizer a data set was made with, from the files next to its shards, and the rule that
// two data sets used together (training -i and validation -j, or a run's training data and the
// data --eval-only evaluates it on) were tokenized alike (docs/training.md, "Data sets"):
//   - the same directory is the same data set;
//   - otherwise, each fact both sides know must agree: meta.json's "tokenizer" (gpt2, sp,
//     synthetic), the vocabulary (llmc/io/data_vocab.h), the bytes of tokenizer.bin, and
//     meta.json's "sha256_tokenizer_model" (SentencePiece);
//   - a data set with neither meta.json nor tokenizer.bin (e.g. shards from llm.c's scripts) has no
//     known identity: nothing can be compared, and the caller prints a note saying so.
#pragma once
#include <cstdint>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/core/error.h"
#include "llmc/io/data_vocab.h"
#include "llmc/io/checkpoint.h"  // fnv1a64
#include "llmc/io/dataloader.h"

namespace llmc {

struct DataIdentity {
    std::string dir;                           // the directory of the shard glob
    bool has_meta = false;                     // dir/meta.json exists
    std::string tokenizer;                     // meta.json's "tokenizer"; "" unknown
    std::string sp_model_sha256;               // meta.json's "sha256_tokenizer_model"; "" unknown
    std::optional<std::string> tokenizer_bin;  // the bytes of dir/tokenizer.bin, when there is one
    int vocab = -1;                            // data_vocab_size(); -1 unknown
    std::string vocab_source;                  // the file vocab came from

    bool known() const { return has_meta || tokenizer_bin.has_value(); }

    // FNV-1a 64 of tokenizer.bin's bytes as 16 hex digits ("" without one)
    std::string tokenizer_bin_hash() const {
        if (!tokenizer_bin) return "";
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx",
                      (unsigned long long)fnv1a64(tokenizer_bin->data(), tokenizer_bin->size()));
        return hex;
    }

    // "sp, vocabulary 300 (data/x/meta.json)" / "no meta.json or tokenizer.bin"
    std::string describe() const {
        if (!known()) return "no meta.json or tokenizer.bin";
        std::string s = tokenizer.empty() ? "tokenizer unnamed" : "tokenizer " + tokenizer;
        if (vocab > 0) s += ", vocabulary " + std::to_string(vocab);
        return s + " (" + (has_meta ? dir + "/meta.json" : dir + "/tokenizer.bin") + ")";
    }
};

// The identity of the data set whose shards `pattern` matches. A meta.json that is not a JSON
// object is refused (data_vocab_size) with InputError naming it, and so is a pattern that matches a
// directory (refuse_directory_match: its identity would be the parent directory's).
inline DataIdentity read_data_identity(const std::string& pattern) {
    refuse_directory_match(pattern);
    DataIdentity id;
    id.dir = glob_dir(pattern);
    id.vocab = data_vocab_size(pattern, &id.vocab_source);
    std::ifstream meta(id.dir + "/meta.json");
    if (meta) {
        id.has_meta = true;
        const auto j = nlohmann::ordered_json::parse(meta, nullptr, false);  // an object: data_vocab_size checked
        const auto t = j.find("tokenizer");
        if (t != j.end() && t->is_string()) id.tokenizer = t->get<std::string>();
        const auto sha = j.find("sha256_tokenizer_model");
        if (sha != j.end() && sha->is_string()) id.sp_model_sha256 = sha->get<std::string>();
    }
    std::ifstream tok(id.dir + "/tokenizer.bin", std::ios::binary);
    if (tok) id.tokenizer_bin = std::string(std::istreambuf_iterator<char>(tok), std::istreambuf_iterator<char>());
    return id;
}

// The identity of the tokenizer file `path` (generate_gpt2_ls --tokenizer): a DIR/tokenizer.bin is that
// of its data set (read_data_identity of DIR: meta.json's facts too); any other file has only its own
// bytes and the vocabulary in its header.
inline DataIdentity read_tokenizer_identity(const std::string& path) {
    const std::filesystem::path p(path);
    const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
    if (p.filename() == "tokenizer.bin") return read_data_identity(dir + "/tokenizer.bin");
    DataIdentity id;
    id.dir = dir;
    std::ifstream tok(path, std::ios::binary);
    if (!tok) return id;
    id.tokenizer_bin = std::string(std::istreambuf_iterator<char>(tok), std::istreambuf_iterator<char>());
    uint32_t header[3] = {0, 0, 0};  // magic, version, vocabulary (llmc/text/tokenizer.h)
    if (id.tokenizer_bin->size() >= sizeof header) std::memcpy(header, id.tokenizer_bin->data(), sizeof header);
    if (header[0] == kTokenizerMagic && header[2] > 0 && header[2] <= (uint32_t)INT32_MAX) {
        id.vocab = (int)header[2];
        id.vocab_source = path;
    }
    return id;
}

// The one line of a reader that cannot check `what` (e.g. "-j 'X' and -i 'Y' were tokenized alike")
// because `why` (e.g. "DIR has no meta.json or tokenizer.bin").
inline std::string cannot_check_note(const std::string& what, const std::string& why) {
    return "note: cannot check that " + what + ": " + why + " (only token ids beyond the vocabulary are caught)";
}

inline bool same_directory(const std::string& a, const std::string& b) {
    std::error_code ea, eb;
    const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
    return ea || eb ? a == b : ca == cb;
}

// The first fact on which a and b disagree ("" when none does, or when they are one directory).
inline std::string tokenizer_difference(const DataIdentity& a, const DataIdentity& b) {
    if (same_directory(a.dir, b.dir)) return "";
    if (!a.tokenizer.empty() && !b.tokenizer.empty() && a.tokenizer != b.tokenizer) return "the tokenizer";
    if (a.vocab > 0 && b.vocab > 0 && a.vocab != b.vocab) return "the vocabulary";
    if (a.tokenizer_bin && b.tokenizer_bin && *a.tokenizer_bin != *b.tokenizer_bin) return "tokenizer.bin";
    if (!a.sp_model_sha256.empty() && !b.sp_model_sha256.empty() && a.sp_model_sha256 != b.sp_model_sha256)
        return "the SentencePiece model (sha256_tokenizer_model)";
    return "";
}

// The content of a glob's shards `paths` (the data loader's, in its order; one directory) as
// data/prepare.py recorded it: FNV-1a 64, as 16 hex digits, over each shard's file name and its sha256
// in the directory's meta.json "sha256_shards"; "" when that does not give every shard's (shards of
// other tools, data prepared before "sha256_shards"). Reads meta.json only, never the shards: free at
// run start whatever the data's size.
inline std::string shards_content_hash(const std::vector<std::string>& paths) {
    if (paths.empty()) return "";
    const std::filesystem::path first(paths[0]);
    std::ifstream in((first.has_parent_path() ? first.parent_path() : std::filesystem::path(".")) / "meta.json");
    if (!in) return "";
    const auto j = nlohmann::ordered_json::parse(in, nullptr, false);
    const auto sums = j.is_object() ? j.find("sha256_shards") : j.end();
    if (sums == j.end() || !sums->is_object()) return "";
    std::string listed;  // "name sha256\n" per shard
    for (const std::string& path : paths) {
        const std::string name = std::filesystem::path(path).filename().string();
        const auto sum = sums->find(name);
        if (sum == sums->end() || !sum->is_string()) return "";
        listed += name + " " + sum->get<std::string>() + "\n";
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(listed.data(), listed.size()));
    return hex;
}

// The identity as config.json's "data" records it for the shards of `pattern` (shards, tokens: what
// the data loader found; content: shards_content_hash); unknown facts are null.
inline nlohmann::ordered_json data_identity_json(const DataIdentity& id, const std::string& pattern, size_t shards,
                                                 int64_t tokens, const std::string& content) {
    const auto text_or_null = [](const std::string& s) {
        return s.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s);
    };
    return {{"glob", pattern},
            {"tokenizer", text_or_null(id.tokenizer)},
            {"vocab_size", id.vocab > 0 ? nlohmann::ordered_json(id.vocab) : nlohmann::ordered_json()},
            {"tokenizer_bin_fnv1a64", text_or_null(id.tokenizer_bin_hash())},
            {"sha256_tokenizer_model", text_or_null(id.sp_model_sha256)},
            {"shards", shards},
            {"tokens", tokens},
            {"shards_sha256_fnv1a64", text_or_null(content)}};
}

// A SentencePiece model's sha256 as a description names it: its first 12 hex digits (all when shorter).
inline std::string sp_model_text(const std::string& sha256) {
    return ", SentencePiece model sha256 " + (sha256.size() > 12 ? sha256.substr(0, 12) + "..." : sha256);
}

// "tokenizer sp, vocabulary 400, tokenizer.bin fnv1a64 0123456789abcdef, SentencePiece model sha256
// 0b9c...": a recorded identity.
inline std::string describe_recorded(const nlohmann::ordered_json& rec) {
    const auto text = [&](const char* key) {
        const auto it = rec.find(key);
        return it != rec.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    std::string s = text("tokenizer").empty() ? "tokenizer unnamed" : "tokenizer " + text("tokenizer");
    const auto v = rec.find("vocab_size");
    if (v != rec.end() && v->is_number_integer()) s += ", vocabulary " + std::to_string(v->get<int64_t>());
    if (!text("tokenizer_bin_fnv1a64").empty()) s += ", tokenizer.bin fnv1a64 " + text("tokenizer_bin_fnv1a64");
    if (!text("sha256_tokenizer_model").empty()) s += sp_model_text(text("sha256_tokenizer_model"));
    return s;
}

// The current identity described with the same facts as describe_recorded, naming where it was read.
inline std::string describe_now(const DataIdentity& id) {
    if (!id.known()) return "no meta.json or tokenizer.bin in " + id.dir;
    std::string s = id.tokenizer.empty() ? "tokenizer unnamed" : "tokenizer " + id.tokenizer;
    if (id.vocab > 0) s += ", vocabulary " + std::to_string(id.vocab);
    if (id.tokenizer_bin) s += ", tokenizer.bin fnv1a64 " + id.tokenizer_bin_hash();
    if (!id.sp_model_sha256.empty()) s += sp_model_text(id.sp_model_sha256);
    return s + " (" + id.dir + ")";
}

// The first tokenizer fact on which a recorded identity (data_identity_json) and the data found now
// disagree ("" when none does); as tokenizer_difference, only facts both sides know are compared.
inline std::string recorded_tokenizer_difference(const nlohmann::ordered_json& rec, const DataIdentity& now) {
    const auto text = [&](const char* key) {
        const auto it = rec.find(key);
        return it != rec.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    if (!text("tokenizer").empty() && !now.tokenizer.empty() && text("tokenizer") != now.tokenizer)
        return "the tokenizer";
    const auto v = rec.find("vocab_size");
    if (v != rec.end() && v->is_number_integer() && now.vocab > 0 && v->get<int64_t>() != now.vocab)
        return "the vocabulary";
    if (!text("tokenizer_bin_fnv1a64").empty() && now.tokenizer_bin &&
        text("tokenizer_bin_fnv1a64") != now.tokenizer_bin_hash())
        return "tokenizer.bin";
    if (!text("sha256_tokenizer_model").empty() && !now.sp_model_sha256.empty() &&
        text("sha256_tokenizer_model") != now.sp_model_sha256)
        return "the SentencePiece model (sha256_tokenizer_model)";
    return "";
}

// Refuses data `other` (named by other_what, e.g. "-j 'data/sp/val_*.bin'") that was tokenized
// differently from `base` (base_what) with one line naming both and their tokenizers. When
// either has no known identity (its directory exists but holds neither meta.json nor tokenizer.bin)
// and print_note, says on stderr that the check could not be made.
inline void check_same_tokenizer(const std::string& base_pattern, const std::string& base_what,
                                 const std::string& other_pattern, const std::string& other_what, bool print_note) {
    const DataIdentity base = read_data_identity(base_pattern), other = read_data_identity(other_pattern);
    const std::string diff = tokenizer_difference(base, other);
    if (!diff.empty())
        throw InputError(other_what + " and " + base_what + " were tokenized differently (" + diff + " differs): " +
                         other_what + " has " + other.describe() + ", " + base_what + " has " + base.describe() +
                         "; a loss on other tokens means nothing: give data prepared with the same tokenizer "
                         "(data/prepare.py)");
    const DataIdentity& unknown = base.known() ? other : base;
    std::error_code ec;
    if (print_note && !unknown.known() && !same_directory(base.dir, other.dir) &&
        std::filesystem::is_directory(unknown.dir, ec)) {  // a missing directory: the data loader names it
        const std::string note = cannot_check_note(other_what + " and " + base_what + " were tokenized alike",
                                                   unknown.dir + " has no meta.json or tokenizer.bin");
        std::fprintf(stderr, "%s\n", note.c_str());
    }
}

}  // namespace llmc
