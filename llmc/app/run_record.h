// A run's record, <out>/config.json (docs/formats.md), read back as settings and continued:
//   record_flag_values   its settings as flag values: "train" with every "history" entry applied in
//                        order, then "model" as the model flags that recreate that model. --config
//                        FILE.json reads them (llmc/app/cli.h), and they are the base of -y 1 (the
//                        run's own record) and --fork-from (the record next to the checkpoint).
//   setting_changes      the inherited settings a continued run changes (a line and a "history"
//                        entry each); the record's "train" object itself is never rewritten
//   write_run_record     config.json + config.toml of a starting run (fresh or forked), or the
//                        history entries of a resumed one (config.toml untouched)
//   fork_source          the run directory and step of a --fork-from checkpoint, checked complete
// Inherited from a record (-y 1, --fork-from): the rows Both, except the per-launch settings -o,
// -y, --device and --threads; never the Launch/Hidden rows. docs/training.md "Resuming and forking".
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/flag_suggest.h"
#include "llmc/app/flags.h"
#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/io/atomic_file.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/json_text.h"

namespace llmc {

// One flag's value as the command line would give it; name: the long name without dashes.
struct FlagValue {
    std::string name, value;
    bool inherited = true;  // taken from the record by -y 1 / --fork-from (false: per launch)
};

// A SETTING row of llmc/app/flags.h: its TrainConfig field, CLI11 names and where it is recorded.
struct SettingRow {
    const char* field;
    const char* names;
    FlagRecord record;
};
inline const std::vector<SettingRow>& setting_rows() {
    static const std::vector<SettingRow> rows = {
#define LLMC_SETTING_ROW(record, type, field, def, names, ok, rule, help) {#field, names, FlagRecord::record},
        LLMC_TRAIN_FLAGS(LLMC_SETTING_ROW, LLMC_NO_MODEL)
#undef LLMC_SETTING_ROW
    };
    return rows;
}

// "-b,--batch-size" -> "batch-size" ("" for a row without a long name).
inline std::string long_flag_name(const std::string& names) {
    const size_t at = names.rfind("--");
    return at == std::string::npos ? "" : names.substr(at + 2);
}

// Every long flag name of the table (SETTING and MODEL rows), for "did you mean".
inline std::vector<std::string> table_flag_names() {
    std::vector<std::string> out;
#define LLMC_SETTING_NAME(record, type, field, def, names, ok, rule, help) out.push_back(long_flag_name(names));
#define LLMC_MODEL_NAME(type, field, names, help) out.push_back(long_flag_name(names));
    LLMC_TRAIN_FLAGS(LLMC_SETTING_NAME, LLMC_MODEL_NAME)
#undef LLMC_SETTING_NAME
#undef LLMC_MODEL_NAME
    return out;
}

// Whether -y 1 / --fork-from takes a setting from the record: a row Both, not one of a launch.
inline bool inherited_setting(const std::string& field, FlagRecord record) {
    return record == FlagRecord::Both && field != "output_dir" && field != "resume" && field != "device" &&
           field != "threads";
}

// The parsed config.json at `path`; InputError naming the file when it cannot be read, is not JSON,
// or has no "train" object.
inline nlohmann::ordered_json read_run_record(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("config file " + path + ": cannot be read; check the path");
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text.str(), nullptr, false);
    if (j.is_discarded())
        throw InputError("config file " + path +
                         ": not valid JSON; give a run's config.json or a TOML file "
                         "(as config.toml)");
    if (!j.is_object() || !j.contains("train") || !j["train"].is_object())
        throw InputError("config file " + path + ": has no \"train\" object; give a run's config.json");
    return j;
}

// A JSON value as a command-line value ("" with ok = false for null: an optional setting not given).
inline std::string flag_value_text(const nlohmann::ordered_json& v, const std::string& file, const std::string& key,
                                   bool& ok) {
    ok = true;
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_number()) return v.dump();
    if (v.is_null()) {
        ok = false;
        return "";
    }
    throw InputError("config file " + file + ": '" + key + "' is " + json_value_brief(v) +
                     "; give a number, string or true/false");
}

// The row of a "train" key (a field name), or nullptr.
inline const SettingRow* setting_row(const std::string& field) {
    for (const SettingRow& r : setting_rows())
        if (field == r.field) return &r;
    return nullptr;
}

// The row of a long flag name ("learning-rate"), or nullptr.
inline const SettingRow* setting_row_of_flag(const std::string& flag) {
    for (const SettingRow& r : setting_rows())
        if (long_flag_name(r.names) == flag) return &r;
    return nullptr;
}

// The record's "train" object with every "history" entry's "new" value applied in order: the settings
// the run trains with now.
inline nlohmann::ordered_json effective_train(const nlohmann::ordered_json& record, const std::string& file) {
    nlohmann::ordered_json train = record.at("train");
    if (!record.contains("history")) return train;
    const nlohmann::ordered_json& h = record["history"];
    if (!h.is_array()) throw InputError("config file " + file + ": \"history\" is not a list; restore the file");
    for (const nlohmann::ordered_json& e : h) {
        const SettingRow* row = e.is_object() && e.contains("flag") && e["flag"].is_string() && e.contains("new")
                                    ? setting_row_of_flag(normalized_flag_name(e["flag"].get<std::string>()))
                                    : nullptr;
        if (row == nullptr)
            throw InputError("config file " + file +
                             ": a \"history\" entry is not {step, flag, old, new} with a "
                             "known flag (" +
                             json_value_brief(e.is_object() && e.contains("flag") ? e["flag"] : e) +
                             "); restore the file");
        train[row->field] = e["new"];
    }
    return train;
}

// The settings of a config.json (read_run_record) as flag values, "train" (effective_train) first, then
// "model". Unknown keys are refused, naming the key and the nearest flag. Keys of the Json rows (derived
// by the run, e.g. world_size) and null values are left out.
inline std::vector<FlagValue> record_flag_values(const nlohmann::ordered_json& record, const std::string& file) {
    std::vector<FlagValue> out;
    auto unknown = [&](const std::string& object, const std::string& key) {
        return InputError("config file " + file + ": unknown key '" + object + "." + key + "'" +
                          did_you_mean(key, table_flag_names()));
    };
    const nlohmann::ordered_json train = effective_train(record, file);
    for (const auto& kv : train.items()) {
        const SettingRow* row = setting_row(kv.key());
        if (row == nullptr || row->record == FlagRecord::Launch || row->record == FlagRecord::Hidden)
            throw unknown("train", kv.key());
        if (row->record == FlagRecord::Json) continue;
        bool ok = false;
        const std::string v = flag_value_text(kv.value(), file, "train." + kv.key(), ok);
        if (ok) out.push_back({long_flag_name(row->names), v, inherited_setting(row->field, row->record)});
    }
    if (!record.contains("model")) return out;
    if (!record["model"].is_object()) throw InputError("config file " + file + ": \"model\" is not an object");
    // config.json's model fields (llmc/app/config_json.h model_config_json) -> the flags that set them
    static const char* const kModelFlags[][2] = {
        {"max_seq_len", "max-seq-len"}, {"vocab_size", "vocab"},  {"num_layers", "layers"},
        {"num_heads", "heads"},         {"channels", "channels"}, {"global_heads", "global-heads"},
        {"window", "window"},           {"qk_norm", "qk-norm"},   {"attn_softcap", "attn-softcap"}};
    for (const auto& kv : record["model"].items()) {
        const std::string key = "model." + kv.key();
        if (kv.key() == "padded_vocab_size") continue;  // follows from vocab_size
        bool ok = false;
        if (kv.key() == "tied_embeddings") {
            if (!kv.value().is_boolean()) throw InputError("config file " + file + ": '" + key + "' is not true/false");
            out.push_back({"untie-embeddings", kv.value().get<bool>() ? "false" : "true"});
            continue;
        }
        const char* flag = nullptr;
        for (const auto& m : kModelFlags)
            if (kv.key() == m[0]) flag = m[1];
        if (flag == nullptr) throw unknown("model", kv.key());
        const std::string v = flag_value_text(kv.value(), file, key, ok);
        if (ok) out.push_back({flag, v});
    }
    return out;
}

// A setting's value in a "history" entry: a float as its shortest decimal form (0.0001, not
// 0.00009999999747), an optional one null when not given.
template <class T>
nlohmann::ordered_json history_value(const T& v) {
    return v;
}
inline nlohmann::ordered_json history_value(float v) {
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {
        std::snprintf(text, sizeof text, "%.*g", digits, (double)v);
        if (std::strtof(text, nullptr) == v) break;
    }
    return std::strtod(text, nullptr);
}
template <class T>
nlohmann::ordered_json history_value(const std::optional<T>& v) {
    return v ? history_value(*v) : nlohmann::ordered_json(nullptr);
}

// The inherited settings (inherited_setting) in which `now` differs from `recorded`, in table order.
inline std::vector<SettingChange> setting_changes(const TrainConfig& recorded, const TrainConfig& now) {
    std::vector<SettingChange> out;
#define LLMC_SETTING_CHANGE(record, type, field, def, names, ok, rule, help)             \
    if (inherited_setting(#field, FlagRecord::record) && !(recorded.field == now.field)) \
        out.push_back({"--" + long_flag_name(names), history_value(recorded.field), history_value(now.field)});
    LLMC_TRAIN_FLAGS(LLMC_SETTING_CHANGE, LLMC_NO_MODEL)
#undef LLMC_SETTING_CHANGE
    return out;
}

// A value as a note writes it: as JSON, a whole float without its ".0" (50, 0.0001, 1e-05).
inline std::string change_value_text(const nlohmann::ordered_json& v) {
    std::string text = json_value_brief(v);
    if (v.is_number_float() && text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0)
        text.resize(text.size() - 2);
    return text;
}

// "--learning-rate 0.0001 (was 0.0003)"
inline std::string describe_change(const SettingChange& c) {
    return c.flag + " " + change_value_text(c.new_value) + " (was " + change_value_text(c.old_value) + ")";
}

// A resumed or forked run continues its checkpoint's weights, so an -e (weights or preset) other than
// the run's would only relabel it: refused, naming both.
inline void check_weights_unchanged(const std::vector<SettingChange>& changes, bool forked) {
    const auto text = [](const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    for (const SettingChange& c : changes)
        if (c.flag == "--model")
            throw InputError("-e " + text(c.new_value) + " differs from the run's -e " + text(c.old_value) +
                             ", but a " + (forked ? "forked" : "resumed") +
                             " run continues its checkpoint's weights; drop -e (to train other weights, start "
                             "a new run: another -o, without -y 1 or --fork-from)");
}

// `record` with one "history" entry {step, flag, old, new} per change appended (the list created when absent).
inline nlohmann::ordered_json record_with_history(nlohmann::ordered_json record,
                                                  const std::vector<SettingChange>& changes, int step) {
    if (changes.empty()) return record;
    if (!record.contains("history")) record["history"] = nlohmann::ordered_json::array();
    for (const SettingChange& c : changes)
        record["history"].push_back({{"step", step}, {"flag", c.flag}, {"old", c.old_value}, {"new", c.new_value}});
    return record;
}

// The checkpoint --fork-from names: its run directory and step.
struct ForkSource {
    std::string dir;
    int step = 0;
};

// Checks that `path` is a model file DIR/model_NNNNNNNN.bin of a complete checkpoint (its DONE marker
// exists) with a config.json beside it; InputError naming the problem otherwise.
inline ForkSource fork_source(const std::string& path) {
    const std::filesystem::path p(path);
    ForkSource src;
    src.dir = p.has_parent_path() ? p.parent_path().string() : ".";
    const std::string name = p.filename().string();
    if (parse_checkpoint_name(name, src.step) != CkptFileKind::Model || name.find(".tmp.") != std::string::npos)
        throw InputError("--fork-from " + path + ": not a checkpoint's model file; give RUN_DIR/model_NNNNNNNN.bin");
    if (!file_exists(path))
        throw InputError("--fork-from " + path + ": no such file; check the path (ls RUN_DIR/model_*.bin)");
    if (!file_exists(done_path(src.dir, src.step)))
        throw InputError("--fork-from " + path + ": step " + std::to_string(src.step) +
                         " is not a complete checkpoint (no " + done_path(src.dir, src.step) +
                         "); fork from a step that has a DONE_ marker");
    if (!file_exists(join_path(src.dir, "config.json")))
        throw InputError("--fork-from " + path +
                         ": no config.json beside it to take the run's settings from; copy the "
                         "run's config.json into " +
                         src.dir);
    return src;
}

// Rank 0 at the start of a run with -o: a run that starts (fresh, or forked: `fresh_record` plus
// "forked_from") writes config.json and config.toml; a resumed one (resumed_step >= 0, its config.json
// present) keeps both and only appends the changed settings to config.json's "history", printing a
// note per change on stderr.
inline void write_run_record(const std::string& out, nlohmann::ordered_json fresh_record,
                             const std::string& config_toml, const TrainConfig& cfg, int resumed_step) {
    const std::string json_path = join_path(out, "config.json");
    const bool forked = !cfg.fork_from.empty();
    const char* verb = forked ? "forking" : "resuming";
    for (const SettingChange& c : resumed_step >= 0 ? cfg.record_changes : std::vector<SettingChange>{})
        std::fprintf(stderr, "note: %s at step %d with %s\n", verb, resumed_step, describe_change(c).c_str());
    if (resumed_step >= 0 && !forked && file_exists(json_path)) {
        if (cfg.record_changes.empty()) return;
        write_text_file(json_path, json_file_text(record_with_history(read_run_record(json_path), cfg.record_changes,
                                                                      resumed_step)));
        return;
    }
    if (forked) fresh_record["forked_from"] = {{"checkpoint", cfg.fork_from}, {"step", resumed_step}};
    write_text_file(json_path, json_file_text(fresh_record));
    write_text_file(join_path(out, "config.toml"), config_toml);
}

}  // namespace llmc
