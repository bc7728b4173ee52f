// The model a run trains or evaluates: -e (a checkpoint file, ours or llm.c's, or a preset), the
// model flags on top of a preset, the data's vocabulary; its one-line description, and the run's
// stabilizers for the run header.
#pragma once
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "llmc/app/checkpoint_run.h"  // check_model_file
#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/io/checkpoint.h"

namespace llmc {

struct ModelSetup {
    ModelConfig config;
    std::string source;                   // "preset ls-small" or the checkpoint path
    std::optional<ModelCheckpoint> init;  // weights when -e is a checkpoint
};

// What fixes a model flag that contradicts a checkpoint (check_overrides_match, check_off_flags_match), by
// where the flag came from (`from`: TrainConfig::origin_of's text): the record of a continued run; a
// --config file (a .json one is a run's record, not to be edited: drop one of the two); the
// command line.
inline std::string checkpoint_contradiction_fix(const std::string& from) {
    if (from.rfind(" (from the record", 0) == 0)
        return "a continued run trains its recorded model: drop -e to continue it, or start a new run (another -o) "
               "from the checkpoint";
    if (from.rfind(" (from --config", 0) == 0) {
        const bool record = from.size() > 6 && from.compare(from.size() - 6, 6, ".json)") == 0;
        return record ? "drop -e or drop --config, a checkpoint fixes the model"
                      : "drop it from the file or drop -e, a checkpoint fixes the model";
    }
    return "drop the flag, a checkpoint fixes the model";
}

// Model flags given together with a checkpoint must agree with it (they cannot change it). origin(long
// name) says where a flag's value came from, as TrainConfig::origin_of words it: "" (the command line),
// " (from --config FILE)" or " (from the record RUN/config.json)" (-y 1 and --fork-from fill the model
// flags not given from the run's record); the error names it and the fix that fits it.
template <typename Origin>
inline void check_overrides_match(const ModelConfig& ck, const ModelOverrides& o, const std::string& path,
                                  Origin origin) {
    auto text = [](double v) {  // integers as integers (3, 50257), a float in its shortest form (0.05)
        char buf[32];
        if (v == (double)(long long)v) {
            std::snprintf(buf, sizeof(buf), "%lld", (long long)v);
            return std::string(buf);
        }
        const bool is_float = (double)(float)v == v;
        for (int digits = 1; digits <= 17; digits++) {
            std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
            if (is_float ? std::strtof(buf, nullptr) == (float)v : std::strtod(buf, nullptr) == v) break;
        }
        return std::string(buf);
    };
    auto fail = [&](const char* flag, const std::string& given, const std::string& have) {
        const std::string from = origin(std::string(flag).substr(2));
        throw InputError(std::string(flag) + " " + given + from + " contradicts the checkpoint " + path +
                         " (which has " + have + "); " + checkpoint_contradiction_fix(from));
    };
    auto mismatch = [&](const char* flag, double given, double have) {
        if (given != have) fail(flag, text(given), text(have));
    };
    if (o.layers) mismatch("--layers", *o.layers, ck.num_layers);
    if (o.channels) mismatch("--channels", *o.channels, ck.channels);
    if (o.heads) mismatch("--heads", *o.heads, ck.num_heads);
    if (o.global_heads) mismatch("--global-heads", *o.global_heads, ck.global_heads);
    if (o.window) mismatch("--window", *o.window, ck.window);
    if (o.vocab) mismatch("--vocab", *o.vocab, ck.vocab_size);
    if (o.max_seq_len) mismatch("--max-seq-len", *o.max_seq_len, ck.max_seq_len);
    if (o.attn_softcap) mismatch("--attn-softcap", *o.attn_softcap, ck.attn_softcap);
    if (o.qk_norm && !ck.qk_norm) mismatch("--qk-norm", 1, 0);
    if (o.untie_embeddings && ck.tied_embeddings) mismatch("--untie-embeddings", 1, 0);
    if (o.bias) mismatch("--bias", parse_bias(*o.bias) ? 1 : 0, ck.bias ? 1 : 0);
    if (o.gelu && parse_gelu(*o.gelu) != ck.gelu) fail("--gelu", *o.gelu, gelu_name(ck.gelu));
}
inline void check_overrides_match(const ModelConfig& ck, const ModelOverrides& o, const std::string& path) {
    check_overrides_match(ck, o, path, [](const std::string&) { return std::string(); });
}

// The on/off model flags given off (--qk-norm=false, untie-embeddings=false in a --config file) with a
// checkpoint that has them on: ModelOverrides holds only "on" (off is the preset's default), so
// check_overrides_match cannot see them; refused here as it refuses every other contradicting flag.
inline void check_off_flags_match(const TrainConfig& cfg, const ModelConfig& ck) {
    const struct {
        const char* flag;
        bool given_on, checkpoint_on;
    } flags[] = {{"qk-norm", cfg.overrides.qk_norm, ck.qk_norm},
                 {"untie-embeddings", cfg.overrides.untie_embeddings, !ck.tied_embeddings}};
    for (const auto& f : flags) {
        if (!cfg.was_given(f.flag) || f.given_on || !f.checkpoint_on) continue;
        const std::string from = cfg.origin_of(f.flag);
        throw InputError("--" + std::string(f.flag) + " false" + from + " contradicts the checkpoint " + cfg.model +
                         " (which has true); " + checkpoint_contradiction_fix(from));
    }
}

// validate_model_config's line `err` with where each model flag it names first came from (origin_of:
// " (from --config FILE)", "" when typed), after the flag and its value (a number, or a text in quotes):
// "--heads (from --config a.toml) must be >= 1 (got 0)", "--channels 100 (from --config a.toml) is not
// divisible by --heads 6", "--gelu 'x' (from --config a.toml) is not an activation". A flag inside a word
// ("0..--heads") or named again (the fix) is left as it is.
template <class OriginOf>
std::string with_flag_origins(const std::string& err, OriginOf origin_of) {
    std::string out = err;
    std::vector<std::string> seen;
    for (size_t at = out.find("--"); at != std::string::npos; at = out.find("--", at + 2)) {
        if (at > 0 && out[at - 1] != ' ' && out[at - 1] != '(') continue;
        size_t end = at + 2;
        while (end < out.size() && (std::isalnum((unsigned char)out[end]) || out[end] == '-')) end++;
        const std::string name = out.substr(at + 2, end - at - 2);
        if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
        seen.push_back(name);
        const std::string from = origin_of(name);
        if (from.empty()) continue;
        size_t value = end;  // past " 100" when the flag is followed by a number, past " 'x'" by a quoted text
        if (value + 1 < out.size() && out[value] == ' ' &&
            (std::isdigit((unsigned char)out[value + 1]) || out[value + 1] == '-')) {
            value += 2;
            while (value < out.size() && (std::isdigit((unsigned char)out[value]) || out[value] == '.')) value++;
        } else if (value + 1 < out.size() && out[value] == ' ' && out[value + 1] == '\'') {
            const size_t close = out.find('\'', value + 2);
            if (close != std::string::npos) value = close + 1;
        }
        out.insert(value, from);
        at = value + from.size() - 2;
    }
    return out;
}

// -e: a checkpoint file (ours or llm.c's) or a preset, then the model flags on top of a preset.
// data_vocab (-1 = unknown) becomes V when --vocab is not given.
inline ModelSetup resolve_model(const TrainConfig& cfg, int data_vocab) {
    ModelSetup m;
    const auto origin_of = [&](const std::string& name) { return cfg.origin_of(name); };
    try {  // --bias's and --gelu's own values (apply_overrides refuses others), named with their origin
        ModelConfig any;
        apply_overrides(any, cfg.overrides);
    } catch (const InputError& e) { throw InputError(with_flag_origins(e.what(), origin_of)); }
    std::error_code ec;
    if (std::filesystem::is_regular_file(cfg.model, ec)) {
        m.init = load_model_checkpoint(cfg.model);
        m.config = m.init->config;
        m.source = cfg.model + (m.init->from_llmc ? " (llm.c GPT-2 checkpoint, all heads global)" : "");
        check_overrides_match(m.config, cfg.overrides, cfg.model, origin_of);
        check_off_flags_match(cfg, m.config);
    } else {
        if (!is_model_preset(cfg.model)) {
            const std::string head = "-e '" + cfg.model + "' ";
            check_model_file(cfg.model, head);  // a run directory or a pruned step: named with what it holds
            throw InputError(head +
                             "is neither an existing checkpoint file nor a preset (ls-small, d6, d12, ...); "
                             "check the path");
        }
        m.config = model_preset(cfg.model);
        if (!cfg.overrides.vocab && data_vocab > 0) {
            m.config.vocab_size = data_vocab;
            m.config.padded_vocab_size = pad_vocab(data_vocab);
        }
        apply_overrides(m.config, cfg.overrides);
        m.source = "preset " + cfg.model;
    }
    const std::string err = validate_model_config(m.config);
    if (!err.empty()) throw InputError(with_flag_origins(err, origin_of));
    return m;
}

// The run header's account of the model's source: "model preset ls-small" or "model CHECKPOINT"; with
// --config FILE, "config FILE (model base ls-small)" when model flags changed the preset (the file's or
// the command line's), else "config FILE (model preset ls-small)" / "config FILE (model CHECKPOINT)".
inline std::string describe_model_origin(const TrainConfig& cfg, const std::string& model_source) {
    if (cfg.config_file.empty()) return "model " + model_source;
    const bool based = is_model_preset(cfg.model) && cfg.overrides.any() && model_source.rfind("preset ", 0) == 0;
    return "config " + cfg.config_file + " (model " + (based ? "base " + cfg.model : model_source) + ")";
}

// A float as printf's %g writes it (5, not std::to_string's 5.000000).
inline std::string fmt_g(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

inline std::string describe_model(const ModelConfig& m, size_t num_params) {
    char buf[320];
    std::snprintf(
        buf, sizeof buf,
        "L %d, C %d, NH %d (hd %d; %d global, %d local with window %d), maxT %d, V %d (Vp %d)%s%s%s%s%s, %.2fM params",
        m.num_layers, m.channels, m.num_heads, m.head_size(), m.global_heads, m.local_heads(), m.window, m.max_seq_len,
        m.vocab_size, m.padded_vocab_size, m.qk_norm ? ", qk-norm" : "",
        m.attn_softcap > 0 ? (", softcap " + fmt_g(m.attn_softcap)).c_str() : "", m.tied_embeddings ? "" : ", untied",
        m.bias ? "" : ", no biases", m.gelu == Gelu::Erf ? ", erf GELU" : "", num_params / 1e6);
    return buf;
}

// Every stabilizer that is on, model and training ("qk-norm, attn-softcap 30, z-loss 0.0001, qk-clip
// 100, skip-spikes 6"), for the run header; "" when none is.
inline std::string describe_stabilizers(const ModelConfig& m, const TrainConfig& c) {
    std::string out;
    const auto add = [&out](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
    if (m.qk_norm) add("qk-norm");
    if (m.attn_softcap > 0) add("attn-softcap " + fmt_g(m.attn_softcap));
    if (c.z_loss > 0) add("z-loss " + fmt_g(c.z_loss));
    if (c.qk_clip > 0) add("qk-clip " + fmt_g(c.qk_clip));
    if (c.skip_spikes > 0) add("skip-spikes " + fmt_g(c.skip_spikes));
    return out;
}

}  // namespace llmc
