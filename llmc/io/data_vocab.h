// The vocabulary of the training or validation data, read from the files next to its shards:
// meta.json's "vocab_size" (data/prepare.py writes it), else the vocabulary size in
// tokenizer.bin's header. The trainer takes it as V for a preset model and checks a model's V
// against it (llmc/train/train_loop.h).
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "llmc/core/error.h"
#include "llmc/io/dataloader.h"
#include "llmc/io/json_text.h"
#include "llmc/text/tokenizer.h"

namespace llmc {

// Vocabulary of the data next to the shards: meta.json's "vocab_size", else tokenizer.bin's
// header. Returns -1 when neither is there (or meta.json has no "vocab_size"); *source names where it
// came from. A meta.json that is not a JSON object or whose vocab_size is not an integer in
// [1, 2^31 - 1], and a tokenizer.bin header with V = 0 or V >= 2^31, are refused with InputError
// naming the file (docs/reliability.md); so is a pattern that matches a directory, first
// (refuse_directory_match: the files read would be the parent directory's).
inline int data_vocab_size(const std::string& pattern, std::string* source) {
    refuse_directory_match(pattern);
    const std::string dir = glob_dir(pattern);
    const std::string meta = dir + "/meta.json";
    std::ifstream in(meta);
    if (in) {
        const auto j = nlohmann::ordered_json::parse(in, nullptr, false);
        if (!j.is_object())
            throw InputError(meta +
                             " is not a JSON object; regenerate the data with data/prepare.py or remove the file");
        const auto v = j.find("vocab_size");
        if (v != j.end()) {
            if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > INT32_MAX)
                throw InputError(meta + ": \"vocab_size\" " + json_value_brief(*v) +
                                 " is not an integer from 1 to 2147483647; regenerate the data with data/prepare.py "
                                 "or remove the file");
            *source = meta;
            return (int)v->get<int64_t>();
        }
    }
    const std::string tok = dir + "/tokenizer.bin";
    std::FILE* f = std::fopen(tok.c_str(), "rb");
    if (f) {
        uint32_t header[4] = {0, 0, 0, 0};
        const bool ok = std::fread(header, 4, 4, f) == 4;
        std::fclose(f);
        if (ok && header[0] == kTokenizerMagic) {
            if (header[2] == 0 || header[2] > (uint32_t)INT32_MAX)
                throw InputError(tok + ": vocabulary size " + std::to_string(header[2]) +
                                 " in the header is not from 1 to 2147483647; regenerate it with data/prepare.py");
            *source = tok;
            return (int)header[2];
        }
    }
    return -1;
}

}  // namespace llmc
