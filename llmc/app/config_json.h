// config.json's two objects: "train", the settings of llmc/app/flags.h recorded there (rows Both and
// Json, in table order), and "model", the resolved ModelConfig. docs/formats.md describes the file.
#pragma once
#include <optional>

#include <nlohmann/json.hpp>

#include "llmc/app/flags.h"
#include "llmc/app/train_config.h"
#include "llmc/core/model_config.h"
#include "llmc/io/json_text.h"

namespace llmc {

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
            {"attn_softcap", m.attn_softcap},
            {"tied_embeddings", m.tied_embeddings}};
}

// A setting's JSON value: an optional one is null when not given.
template <class T>
nlohmann::ordered_json setting_json(const T& v) {
    return v;
}
template <class T>
nlohmann::ordered_json setting_json(const std::optional<T>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

// The settings under their field names.
inline nlohmann::ordered_json train_config_json(const TrainConfig& c) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
#define LLMC_SETTING_JSON(record, type, field, def, names, ok, rule, help)                \
    if (FlagRecord::record == FlagRecord::Both || FlagRecord::record == FlagRecord::Json) \
        j[#field] = setting_json(c.field);
    LLMC_TRAIN_FLAGS(LLMC_SETTING_JSON, LLMC_NO_MODEL)
#undef LLMC_SETTING_JSON
    return j;
}

}  // namespace llmc
