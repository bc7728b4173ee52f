// config.json's two objects: "train", the settings of llmc/app/flags.h recorded there (rows Both,
// Machine and Json, in table order; paths absolute: recorded_form; floats in their shortest form:
// float_json), and "model", the resolved ModelConfig. docs/formats.md describes the file.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "llmc/app/flags.h"
#include "llmc/app/train_config.h"
#include "llmc/core/model_config.h"
#include "llmc/io/json_text.h"

namespace llmc {

// A float as JSON: the shortest decimal that reads back as the same float (0.001, not the float
// widened to 0.0010000000474974513), so that a record compares with the value given.
inline nlohmann::ordered_json float_json(float v) {
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {
        std::snprintf(text, sizeof text, "%.*g", digits, (double)v);
        if (std::strtof(text, nullptr) == v) break;
    }
    return std::strtod(text, nullptr);
}

inline nlohmann::ordered_json model_config_json(const ModelConfig& m) {
    return {{"max_seq_len", m.max_seq_len},
            {"vocab_size", m.vocab_size},
            {"padded_vocab_size", m.padded_vocab_size},
            {"num_layers", m.num_layers},
            {"num_heads", m.num_heads},
            {"channels", m.channels},
            {"global_heads", m.global_heads},
            {"window", m.window},
            {"qk_norm", m.qk_norm},
            {"attn_softcap", float_json(m.attn_softcap)},
            {"tied_embeddings", m.tied_embeddings},
            {"bias", m.bias},
            {"gelu", gelu_name(m.gelu)}};
}

// A setting's JSON value (config.json's "train" and "history"): a float as float_json, an optional
// one null when not given.
template <class T>
nlohmann::ordered_json setting_json(const T& v) {
    return v;
}
inline nlohmann::ordered_json setting_json(float v) { return float_json(v); }
template <class T>
nlohmann::ordered_json setting_json(const std::optional<T>& v) {
    return v ? setting_json(*v) : nlohmann::ordered_json(nullptr);
}

// A setting as a record holds it: -i, -j, --fork-from and an -e that names a file (not a preset) as
// absolute paths (a relative one taken from the current directory), so that the record names the same
// files from any directory; the rest as given.
inline std::string recorded_form(const std::string& field, const std::string& v) {
    const bool path = field == "train_data" || field == "val_data" || field == "fork_from" ||
                      (field == "model" && !is_model_preset(v));
    if (!path || v.empty() || v[0] == '/') return v;
    std::string rel = v;
    while (rel.size() > 2 && rel.compare(0, 2, "./") == 0) rel.erase(0, 2);
    return (std::filesystem::current_path() / rel).string();
}
template <class T>
const T& recorded_form(const std::string&, const T& v) {
    return v;
}

// The settings config.json records (rows Both, Machine and Json) under their field names.
inline nlohmann::ordered_json train_config_json(const TrainConfig& c) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
#define LLMC_SETTING_JSON(record, type, field, def, names, ok, rule, help)                     \
    if (FlagRecord::record == FlagRecord::Both || FlagRecord::record == FlagRecord::Machine || \
        FlagRecord::record == FlagRecord::Json)                                                \
        j[#field] = setting_json(recorded_form(#field, c.field));
    LLMC_TRAIN_FLAGS(LLMC_SETTING_JSON, LLMC_NO_MODEL)
#undef LLMC_SETTING_JSON
    return j;
}

}  // namespace llmc
