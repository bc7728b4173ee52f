// TrainConfig: every setting of a training (or --eval-only) run that is not part of the model,
// the model-size overrides given on the command line (both declared by the table llmc/app/flags.h),
// and the model presets for -e. Filled by llmc/app/cli.h; docs/training.md is the reference.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/flags.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"

namespace llmc {

// The model flags given on the command line (MODEL rows of llmc/app/flags.h); each overrides the
// preset's value.
struct ModelOverrides {
#define LLMC_MODEL_FIELD(type, field, names, help) type field{};
    LLMC_TRAIN_FLAGS(LLMC_NO_SETTING, LLMC_MODEL_FIELD)
#undef LLMC_MODEL_FIELD
    bool any() const {
#define LLMC_MODEL_GIVEN(type, field, names, help) || static_cast<bool>(field)
        return false LLMC_TRAIN_FLAGS(LLMC_NO_SETTING, LLMC_MODEL_GIVEN);
#undef LLMC_MODEL_GIVEN
    }
};

// A setting a continued run (-y 1, --fork-from) gives another value than its run record
// (llmc/app/run_record.h): flag "--learning-rate", the values as config.json's "history" writes them.
struct SettingChange {
    std::string flag;
    nlohmann::ordered_json old_value, new_value;
};

// Every setting of a training (or --eval-only) run that is not part of the model: the SETTING rows of
// llmc/app/flags.h (their flags, defaults and meaning are there), then what main() and the parser derive.
struct TrainConfig {
#define LLMC_SETTING_FIELD(record, type, field, def, names, ok, rule, help) type field = def;
    LLMC_TRAIN_FLAGS(LLMC_SETTING_FIELD, LLMC_NO_MODEL)
#undef LLMC_SETTING_FIELD
    int rank = 0;        // this process's rank: set by main() from the collective
    int local_rank = 0;  // rank within the node (its GPU): set by main()
    ModelOverrides overrides;
    std::vector<std::string> given;             // long names of the flags given, typed or by --config (the parser's)
    std::vector<SettingChange> record_changes;  // vs the record -y 1 / --fork-from continues (set by the parser)
    std::string config_record;                  // --config RUN/config.json: that file (set by the parser); else ""
    std::string config_file;                    // --config FILE (TOML or a run's config.json); else "" (the parser)
    std::vector<std::string> from_config;       // long names of the flags whose value config_file gave (the parser)
    std::string config_model;     // config_file's -e/--model value, taken or overridden by a typed -e; "" if none
    std::string settings_record;  // the record whose settings fill the flags not given (-y 1, --fork-from; the parser)
    bool refork = false;  // -y 1 of a fork without a checkpoint of its own, turned into --fork-from (the parser)

    // Whether the flag (long name, "seq-len") was given on the command line or by --config; the
    // settings not given are the defaults or what a run record (-y 1, --fork-from) or a checkpoint's
    // run (--eval-only, llmc/app/checkpoint_run.h) gives.
    bool was_given(const std::string& long_name) const {
        for (const std::string& g : given)
            if (g == long_name) return true;
        return false;
    }
    // Where the value of the flag (long name) came from, as an error line names it after the flag and
    // its value: " (from --config FILE)"; " (from the record RUN/config.json)" for a flag not given in a
    // run that -y 1 or --fork-from continues (the record's value, or the default where it has none: a
    // caller names the origin of a value other than the default); "" for the command line or the default.
    std::string origin_of(const std::string& long_name) const {
        for (const std::string& f : from_config)
            if (f == long_name) return " (from --config " + config_file + ")";
        if (!was_given(long_name) && !settings_record.empty()) return " (from the record " + settings_record + ")";
        return "";
    }
};

// Presets for -e:
//   ls-small  the paper's small model's shape: L=6, C=192, NH=6 (hd 32), G=1, P=50, maxT=2048 (GPT-2's
//             biases, tanh GELU and tied embeddings: the paper code's model is configs/paper_pg19.toml)
//   dN        llm.c's depth-N GPT-2 family: L=N, C=64*N, NH=N (hd 64), maxT=1024, with LS-attention
//             G=1, P=50 (d12 is GPT-2 124M's shape; add --global-heads N for plain MHSA)
// Vocabulary 50257 (Vp 50304) unless --vocab or the data say otherwise.
inline bool is_model_preset(const std::string& name) {
    if (name == "ls-small") return true;
    if (name.size() < 2 || name[0] != 'd') return false;
    for (size_t i = 1; i < name.size(); i++)
        if (name[i] < '0' || name[i] > '9') return false;
    return name.size() <= 4;
}

inline ModelConfig model_preset(const std::string& name) {
    ModelConfig c;  // model_config.h defaults: V 50257
    c.vocab_size = 50257;
    c.padded_vocab_size = pad_vocab(c.vocab_size);
    c.global_heads = 1;
    c.window = 50;
    if (name == "ls-small") {
        c.num_layers = 6;
        c.channels = 192;
        c.num_heads = 6;
        c.max_seq_len = 2048;
        return c;
    }
    if (!is_model_preset(name))
        throw InputError("-e '" + name +
                         "' is neither a preset (ls-small, d6, d12, d24, ...) nor an existing checkpoint file");
    const int n = std::stoi(name.substr(1));
    if (n < 1) throw InputError("-e " + name + ": depth must be >= 1 (e.g. d6, d12)");
    c.num_layers = n;
    c.channels = 64 * n;
    c.num_heads = n;
    c.max_seq_len = 1024;
    return c;
}

// --gelu's value as the model's activation; InputError naming the choices otherwise.
inline Gelu parse_gelu(const std::string& v) {
    if (v == "tanh") return Gelu::Tanh;
    if (v == "erf") return Gelu::Erf;
    throw InputError("--gelu '" + v + "' is not an activation; use tanh (GPT-2's approximation) or erf (exact)");
}
// --bias's rule, as its refusals word it (parse_bias, and llmc/app/cli.h for a value that is not an integer).
constexpr const char* kBiasRule = "must be 0 (no biases, the paper's bias=False) or 1 (GPT-2's biases)";
// --bias's value; InputError unless 0 or 1.
inline bool parse_bias(int v) {
    if (v != 0 && v != 1) throw InputError(std::string("--bias ") + kBiasRule + " (got " + std::to_string(v) + ")");
    return v == 1;
}

// Applies the command-line model flags on top of a preset's configuration.
inline void apply_overrides(ModelConfig& c, const ModelOverrides& o) {
    if (o.layers) c.num_layers = *o.layers;
    if (o.channels) c.channels = *o.channels;
    if (o.heads) c.num_heads = *o.heads;
    if (o.global_heads) c.global_heads = *o.global_heads;
    if (o.window) c.window = *o.window;
    if (o.max_seq_len) c.max_seq_len = *o.max_seq_len;
    if (o.vocab) {
        c.vocab_size = *o.vocab;
        c.padded_vocab_size = pad_vocab(c.vocab_size);
    }
    if (o.attn_softcap) c.attn_softcap = *o.attn_softcap;
    if (o.qk_norm) c.qk_norm = true;
    if (o.untie_embeddings) c.tied_embeddings = false;
    if (o.bias) c.bias = parse_bias(*o.bias);
    if (o.gelu) c.gelu = parse_gelu(*o.gelu);
}

// Whether model flags' values are ones the flags themselves take (apply_overrides does not refuse them;
// the whole model is checked later): --bias takes 0 and 1 only.
inline bool model_override_accepted(const ModelOverrides& o) {
    ModelConfig m;
    try {
        apply_overrides(m, o);
    } catch (const InputError&) { return false; }
    return true;
}

}  // namespace llmc
