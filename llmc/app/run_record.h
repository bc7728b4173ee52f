// A run's record, <out>/config.json (docs/formats.md), read back. The one reader of the file:
// parse_run_record / read_run_record parse it, and the functions below are the only code that knows
// its fields; --config FILE.json, -y 1, --fork-from, --eval-only and generate_gpt2_ls of a checkpoint
// (llmc/app/checkpoint_run.h), the data checks (llmc/app/run_data.h) and the history of a continued
// run (llmc/app/run_history.h) all read through them:
//   effective_train      "train" with the "history" entries up to a step applied: the settings then
//   recorded_settings    a "train" object as a TrainConfig, each value checked by its flag's rule
//   recorded_data        "data": the identity of the run's training and validation data
//   recorded_fork        "forked_from": the checkpoint a fork started from, its step and tokens
//   record_flag_values   those settings as flag values, then "model" as the model flags that recreate
//                        that model: the base of -y 1 (the run's own record, every entry applied),
//                        --fork-from (the record beside the checkpoint, up to the checkpoint's step)
//                        and --config FILE.json (every entry applied)
//   fork_source          the run directory and step of a --fork-from checkpoint, checked complete
//   trained_settings_fingerprint   what the record says trained steps 1..N, as 16 hex digits: each
//                        checkpoint's DONE_ marker holds it (llmc/io/checkpoint_dir.h), and
//                        check_record_of_checkpoint refuses a record edited after the checkpoint
//   refork_checkpoint    the checkpoint a fork without a checkpoint of its own forks again from (-y 1)
// What a continued run changes, and how that is recorded: llmc/app/run_history.h.
// Taken from a record: the rows Both except -o and -y (they name the run); never the Machine rows
// (--device, --threads: the machine, not the experiment) nor the Launch/Hidden ones.
// docs/training.md "Resuming and forking".
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/config_json.h"
#include "llmc/app/flag_suggest.h"
#include "llmc/app/flags.h"
#include "llmc/app/train_config.h"
#include "llmc/app/validate.h"
#include "llmc/core/error.h"
#include "llmc/io/atomic_file.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/json_text.h"

namespace llmc {

// One flag's value as the command line would give it; name: the long name without dashes.
struct FlagValue {
    std::string name, value;
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

// Whether a record gives a run this setting: a row Both but -o and -y, which name the run.
inline bool inherited_setting(const std::string& field, FlagRecord record) {
    return record == FlagRecord::Both && field != "output_dir" && field != "resume";
}

// The fix an unreadable record's error names, unless its reader names another.
inline const std::string kRecordFix = "give a run's config.json or a TOML file (as config.toml)";

// A parse callback that sets `repeated` to the first key an object holds twice, as its path
// ("train.learning_rate"); a JSON parser alone keeps the last value.
inline nlohmann::ordered_json::parser_callback_t repeated_key_finder(std::string& repeated) {
    struct Open {  // an object or array being parsed
        bool object = false;
        std::vector<std::string> keys;  // an object's keys so far, the last one the value being parsed
    };
    auto open = std::make_shared<std::vector<Open>>();  // outermost first
    using Event = nlohmann::ordered_json::parse_event_t;
    return [open, &repeated](int, Event e, nlohmann::ordered_json& v) {
        if (e == Event::object_start || e == Event::array_start) open->push_back({e == Event::object_start, {}});
        if ((e == Event::object_end || e == Event::array_end) && !open->empty()) open->pop_back();
        if (e == Event::key && !open->empty()) {
            const std::string k = v.get<std::string>();
            std::vector<std::string>& keys = open->back().keys;
            if (repeated.empty() && std::find(keys.begin(), keys.end(), k) != keys.end()) {
                for (size_t i = 0; i + 1 < open->size(); i++)
                    if ((*open)[i].object && !(*open)[i].keys.empty()) repeated += (*open)[i].keys.back() + ".";
                repeated += k;
            }
            keys.push_back(k);
        }
        return true;
    };
}

// The parsed config.json `text` of the file `file`; InputError naming the file when it is not JSON, holds
// a key twice in one object (a hand edit: a parser would keep the last value) or has no "train" object,
// ending with `fix` (what to do about it).
inline nlohmann::ordered_json parse_run_record(const std::string& text, const std::string& file,
                                               const std::string& fix = kRecordFix) {
    std::string repeated;
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, repeated_key_finder(repeated), false);
    if (j.is_discarded()) throw InputError("config file " + file + ": not valid JSON; " + fix);
    if (!repeated.empty())
        throw InputError("config file " + file + ": the key '" + repeated +
                         "' is given twice (a JSON reader would keep the last value): keep one");
    if (!j.is_object() || !j.contains("train") || !j["train"].is_object())
        throw InputError("config file " + file + ": has no \"train\" object; " + fix);
    return j;
}

// The config.json at `path`, parsed (parse_run_record); InputError naming it when it cannot be read.
inline nlohmann::ordered_json read_run_record(const std::string& path, const std::string& fix = kRecordFix) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("config file " + path + ": cannot be read; check the path");
    std::stringstream text;
    text << in.rdbuf();
    return parse_run_record(text.str(), path, fix);
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

// Whether a "history" entry is a step total of -x -1 (one epoch) rather than a flag's change: {"step",
// "flag": "--max-steps", "old", "new", "epoch": true}, the totals before and after that step
// (llmc/app/epoch_steps.h). -x stays -1, so the settings (effective_train) skip it.
inline bool epoch_total_entry(const nlohmann::ordered_json& e) {
    return e.is_object() && e.contains("epoch") && e["epoch"] == true;
}

// The record's "history" list, each entry checked to be {step, flag, old, new} with a known flag (its
// row returned in `rows`, in order); empty when there is none. The entries of -x -1's step total
// (epoch_total_entry) only with `epoch_totals`.
inline std::vector<nlohmann::ordered_json> history_entries(const nlohmann::ordered_json& record,
                                                           const std::string& file,
                                                           std::vector<const SettingRow*>* rows = nullptr,
                                                           bool epoch_totals = false) {
    std::vector<nlohmann::ordered_json> out;
    if (!record.contains("history")) return out;
    const nlohmann::ordered_json& h = record["history"];
    if (!h.is_array()) throw InputError("config file " + file + ": \"history\" is not a list; restore the file");
    for (const nlohmann::ordered_json& e : h) {
        const bool shape = e.is_object() && e.contains("step") && e["step"].is_number_integer() && e.contains("flag") &&
                           e["flag"].is_string() && e.contains("old") && e.contains("new");
        const SettingRow* row =
            shape ? setting_row_of_flag(normalized_flag_name(e["flag"].get<std::string>())) : nullptr;
        if (row == nullptr)
            throw InputError(
                "config file " + file + ": a \"history\" entry is not {step, flag, old, new} with a known flag (" +
                json_value_brief(e.is_object() && e.contains("flag") ? e["flag"] : e) + "); restore the file");
        if (epoch_total_entry(e) && !epoch_totals) continue;
        out.push_back(e);
        if (rows) rows->push_back(row);
    }
    return out;
}

// The record's "train" object with the "new" value of every "history" entry up to step `through_step`
// applied in order (an entry at step s: the settings from step s+1 on): the settings of step through_step + 1.
inline nlohmann::ordered_json effective_train(const nlohmann::ordered_json& record, const std::string& file,
                                              int through_step = INT_MAX) {
    nlohmann::ordered_json train = record.at("train");
    std::vector<const SettingRow*> rows;
    const std::vector<nlohmann::ordered_json> entries = history_entries(record, file, &rows);
    for (size_t i = 0; i < entries.size(); i++)
        if (entries[i]["step"].get<int64_t>() <= through_step) train[rows[i]->field] = entries[i]["new"];
    return train;
}

// A recorded JSON value as the setting's type T (null: an optional setting not given).
template <class T>
T setting_of_json(const nlohmann::ordered_json& v, T*) {
    return v.get<T>();
}
template <class T>
std::optional<T> setting_of_json(const nlohmann::ordered_json& v, std::optional<T>*) {
    return v.is_null() ? std::nullopt : std::optional<T>(v.get<T>());
}

// train[key] as the setting's type T, `def` when absent; InputError naming the file and key when the
// value is of another type.
template <class T>
T recorded_setting(const nlohmann::ordered_json& train, const char* key, const T& def, const std::string& file) {
    if (!train.contains(key)) return def;
    try {
        return setting_of_json(train[key], (T*)nullptr);
    } catch (const nlohmann::json::exception&) {
        throw InputError("config file " + file + ": 'train." + key + "' is " + json_value_brief(train[key]) +
                         ", not a value of that setting; restore the file");
    }
}

// The settings a "train" object records (effective_train), as a TrainConfig: each SETTING row's field
// from its key, the flag's default when the key is absent; `given` lists the long names of the keys
// present (TrainConfig::was_given then says what the record gives). Each recorded value is checked by
// its flag's own rule (llmc/app/flags.h "ok"); InputError naming the file and key otherwise. Keys of no
// row are ignored here (train_flag_values refuses them where a record sets a run).
inline TrainConfig recorded_settings(const nlohmann::ordered_json& recorded, const std::string& file) {
    TrainConfig c;
    // records written before --cuda-graph and --pdl took auto hold them as the integer 0 or 1: read as
    // "0" / "1"
    nlohmann::ordered_json upgraded;
    bool old_integers = false;
    for (const char* key : {"cuda_graph", "pdl"}) {
        if (!recorded.contains(key) || !recorded[key].is_number_integer()) continue;
        if (!old_integers) upgraded = recorded;
        old_integers = true;
        upgraded[key] = std::to_string(recorded[key].get<long long>());
    }
    const nlohmann::ordered_json& train = old_integers ? upgraded : recorded;
#define LLMC_RECORDED_SETTING(record, type, field, def, names, ok, rule, help)                                    \
    if (train.contains(#field)) {                                                                                 \
        c.field = recorded_setting(train, #field, c.field, file);                                                 \
        try {                                                                                                     \
            check_flag_ranges(c, #field);                                                                         \
        } catch (const InputError& e) {                                                                           \
            throw InputError("config file " + file + ": 'train." #field "': " + e.what() + "; restore the file"); \
        }                                                                                                         \
        if (*names) c.given.push_back(long_flag_name(names));                                                     \
    }
    LLMC_TRAIN_FLAGS(LLMC_RECORDED_SETTING, LLMC_NO_MODEL)
#undef LLMC_RECORDED_SETTING
    return c;
}

// config.json's "data" (llmc/io/data_identity.h data_identity_json): the identity of the run's data.
struct RecordedData {
    std::string config_path;       // RUN/config.json
    nlohmann::ordered_json train;  // "data"."train" (null when the record has none)
    nlohmann::ordered_json val;    // "data"."val" (null when the record or the run has none)

    bool known() const { return train.is_object(); }
    // whether the training data had an identity when recorded: a tokenizer fact (name, vocabulary,
    // tokenizer.bin, SentencePiece model); a data set with neither meta.json nor tokenizer.bin has none
    bool identity_known() const {
        for (const char* key : {"tokenizer", "vocab_size", "tokenizer_bin_fnv1a64", "sha256_tokenizer_model"})
            if (known() && train.contains(key) && !train[key].is_null()) return true;
        return false;
    }
    std::string glob() const { return text(train, "glob"); }
    std::string tokenizer_bin_hash() const { return text(train, "tokenizer_bin_fnv1a64"); }
    // "data"."train"'s "shards" and "tokens" (-1 when not recorded as integers)
    int64_t train_count(const char* key) const {
        const auto v = train.is_object() ? train.find(key) : train.end();
        return v != train.end() && v->is_number_integer() ? v->get<int64_t>() : -1;
    }

private:
    static std::string text(const nlohmann::ordered_json& o, const char* key) {
        const auto v = o.is_object() ? o.find(key) : o.end();
        return v != o.end() && v->is_string() ? v->get<std::string>() : std::string();
    }
};

inline RecordedData recorded_data(const nlohmann::ordered_json& record, const std::string& config_path) {
    RecordedData d;
    d.config_path = config_path;
    const auto data = record.find("data");
    if (data != record.end() && data->is_object()) {
        const auto t = data->find("train");
        if (t != data->end() && t->is_object()) d.train = *t;
        const auto v = data->find("val");
        if (v != data->end() && v->is_object()) d.val = *v;
    }
    return d;
}

// config.json's "forked_from" (a forked run's record): the source checkpoint's step, and the tokens
// trained up to it when recorded.
struct RecordedFork {
    int step = 0;
    std::optional<int64_t> tokens;
};

inline std::optional<RecordedFork> recorded_fork(const nlohmann::ordered_json& record) {
    const auto f = record.find("forked_from");
    if (f == record.end() || !f->is_object()) return std::nullopt;
    RecordedFork fork;
    const auto step = f->find("step"), tokens = f->find("tokens");
    if (step != f->end() && step->is_number_integer()) fork.step = step->get<int>();
    if (tokens != f->end() && tokens->is_number_integer()) fork.tokens = tokens->get<int64_t>();
    return fork;
}

// The inherited settings (inherited_setting) of a "train" object as flag values, in its order. Unknown
// keys are refused, naming the key and the nearest flag; null values (optional settings not given) are
// left out, and so are the keys of rows a record never sets (Json, Machine, -o, -y).
inline std::vector<FlagValue> train_flag_values(const nlohmann::ordered_json& train, const std::string& file) {
    std::vector<FlagValue> out;
    for (const auto& kv : train.items()) {
        const SettingRow* row = setting_row(kv.key());
        if (row == nullptr || row->record == FlagRecord::Launch || row->record == FlagRecord::Hidden)
            throw InputError("config file " + file + ": unknown key 'train." + kv.key() + "'" +
                             did_you_mean(kv.key(), table_flag_names()));
        if (!inherited_setting(row->field, row->record)) continue;
        bool ok = false;
        const std::string v = flag_value_text(kv.value(), file, "train." + kv.key(), ok);
        if (ok) out.push_back({long_flag_name(row->names), v});
    }
    return out;
}

// The record's "model" object as the model flags that recreate it, appended to `out`.
inline void model_flag_values(const nlohmann::ordered_json& record, const std::string& file,
                              std::vector<FlagValue>& out) {
    if (!record.contains("model")) return;
    if (!record["model"].is_object()) throw InputError("config file " + file + ": \"model\" is not an object");
    // config.json's model fields (llmc/app/config_json.h model_config_json) -> the flags that set them
    static const char* const kModelFlags[][2] = {{"max_seq_len", "max-seq-len"},
                                                 {"vocab_size", "vocab"},
                                                 {"num_layers", "layers"},
                                                 {"num_heads", "heads"},
                                                 {"channels", "channels"},
                                                 {"global_heads", "global-heads"},
                                                 {"window", "window"},
                                                 {"qk_norm", "qk-norm"},
                                                 {"attn_softcap", "attn-softcap"},
                                                 {"gelu", "gelu"}};
    for (const auto& kv : record["model"].items()) {
        const std::string key = "model." + kv.key();
        if (kv.key() == "padded_vocab_size") continue;  // follows from vocab_size
        bool ok = false;
        if (kv.key() == "tied_embeddings") {
            if (!kv.value().is_boolean()) throw InputError("config file " + file + ": '" + key + "' is not true/false");
            out.push_back({"untie-embeddings", kv.value().get<bool>() ? "false" : "true"});
            continue;
        }
        if (kv.key() == "bias") {
            if (!kv.value().is_boolean()) throw InputError("config file " + file + ": '" + key + "' is not true/false");
            out.push_back({"bias", kv.value().get<bool>() ? "1" : "0"});
            continue;
        }
        const char* flag = nullptr;
        for (const auto& m : kModelFlags)
            if (kv.key() == m[0]) flag = m[1];
        if (flag == nullptr)
            throw InputError("config file " + file + ": unknown key '" + key + "'" +
                             did_you_mean(kv.key(), table_flag_names()));
        const std::string v = flag_value_text(kv.value(), file, key, ok);
        if (ok) out.push_back({flag, v});
    }
}

// What a record gives a run: the settings of step through_step + 1 (effective_train) as flag values
// (train_flag_values), then the model flags (model_flag_values).
inline std::vector<FlagValue> record_flag_values(const nlohmann::ordered_json& record, const std::string& file,
                                                 int through_step = INT_MAX) {
    std::vector<FlagValue> out = train_flag_values(effective_train(record, file, through_step), file);
    model_flag_values(record, file, out);
    return out;
}

// What the record says trained steps 1..step, as one text: the inherited settings (inherited_setting) of
// step 1 and of the steps after each "history" entry before `step` (effective_train), each as its flag's
// value in config.json's form (setting_json of the typed value: an absent key is its default, and a float
// an earlier version wrote widened from float32 is the same value), then the "model" object (keys in
// order, floats alike, an absent "bias"/"gelu" as true/"tanh"), then the process count and a fork's source
// step and tokens (the tokens trained rest on them). The entries at `step` or later apply from
// step + 1 on and are not in it, so a -y 1 at `step` that records a change leaves the text of `step` as it was.
inline std::string trained_settings_text(const nlohmann::ordered_json& record, const std::string& file, int step) {
    std::vector<int64_t> cuts = {-1};  // the steps after which the settings change (-1: from step 1)
    for (const nlohmann::ordered_json& e : history_entries(record, file))
        if (e["step"].get<int64_t>() < step) cuts.push_back(e["step"].get<int64_t>());
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    const auto dump = [](const nlohmann::ordered_json& v) {
        return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    };
    std::string text;
    for (const int64_t cut : cuts) {
        const TrainConfig t = recorded_settings(effective_train(record, file, (int)cut), file);
        text += "after step " + std::to_string(cut) + ":";
#define LLMC_SETTING_TEXT(record, type, field, def, names, ok, rule, help) \
    if (inherited_setting(#field, FlagRecord::record)) text += " " #field "=" + dump(setting_json(t.field));
        LLMC_TRAIN_FLAGS(LLMC_SETTING_TEXT, LLMC_NO_MODEL)
#undef LLMC_SETTING_TEXT
        text += "\n";
    }
    std::map<std::string, nlohmann::ordered_json> model = {{"bias", true}, {"gelu", "tanh"}};
    const auto m = record.find("model");
    if (m != record.end() && m->is_object())
        for (const auto& kv : m->items())
            model[kv.key()] = kv.value().is_number_float() ? float_json(kv.value().get<float>()) : kv.value();
    text += "model:";
    for (const auto& kv : model) text += " " + kv.first + "=" + dump(kv.second);
    text += "\n";
    // the counts the tokens trained (and so -x -1's step total) rest on: the process count (absent: 1)
    // and, in a fork, the source's step and tokens
    const auto field = [&](const char* object, const char* key) {
        const auto o = record.find(object);
        if (o == record.end() || !o->is_object()) return nlohmann::ordered_json();
        const auto v = o->find(key);
        return v == o->end() ? nlohmann::ordered_json() : *v;
    };
    const nlohmann::ordered_json ws = field("train", "world_size");
    text += "world_size=" + dump(ws.is_null() ? nlohmann::ordered_json(1) : ws) + "\n";
    if (record.contains("forked_from"))
        text += "forked_from: step=" + dump(field("forked_from", "step")) +
                " tokens=" + dump(field("forked_from", "tokens")) + "\n";
    return text;
}

// trained_settings_text's 64-bit FNV-1a, 16 hex digits: the fingerprint a checkpoint's DONE_ marker holds.
inline std::string trained_settings_fingerprint(const nlohmann::ordered_json& record, const std::string& file,
                                                int step) {
    const std::string text = trained_settings_text(record, file, step);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(text.data(), text.size()));
    return hex;
}

// Refuses a record (`file`, parsed) that no longer says what trained the checkpoint of `step` in `dir`:
// the fingerprint the step's DONE_ marker holds (made from the record as it was at the save) is not the
// record's now, i.e. the file was edited since. A marker without one (earlier versions) is not checked.
// fix: what to do, ending the error line.
inline void check_record_of_checkpoint(const nlohmann::ordered_json& record, const std::string& file,
                                       const std::string& dir, int step, const std::string& fix) {
    const std::string saved = marker_settings_fingerprint(dir, step);
    if (saved.empty()) return;
    const std::string now = trained_settings_fingerprint(record, file, step);
    if (now == saved) return;
    const std::string n = std::to_string(step);
    throw InputError(file + " was edited after its checkpoint of step " + n + " was written: the settings it " +
                     "records for steps 1-" + n + " (\"train\", the \"history\" before step " + n +
                     ", \"model\", the process count, a fork's source) are not those that trained them "
                     "(settings_fnv1a64 " +
                     saved + " in " + done_path(dir, step) + ", " + now + " from the file now); " + fix +
                     " (to take the file as it now stands, delete the second line "
                     "of " +
                     done_path(dir, step) + ")");
}

// The checkpoint --fork-from names: its run directory and step.
struct ForkSource {
    std::string dir;
    int step = 0;
};

// The complete checkpoints of run directory `dir`, as an error about a missing model file names them:
// "DIR holds the complete checkpoints of steps 1, 2, ..., 8, 9, 10 (12; the newest: FLAG
// DIR/model_00000010.bin)" (at most 6 steps: the first 2, then the newest 3); one is "DIR holds the
// complete checkpoint of step 2 (FLAG DIR/model_00000002.bin)"; "" when it holds none.
inline std::string complete_steps_text(const std::string& dir, const std::string& flag) {
    std::error_code ec;
    const std::vector<int> steps = std::filesystem::is_directory(dir, ec) ? complete_steps(dir) : std::vector<int>{};
    if (steps.empty()) return "";
    if (steps.size() == 1)
        return dir + " holds the complete checkpoint of step " + std::to_string(steps[0]) + " (" + flag + " " +
               model_path(dir, steps[0]) + ")";
    std::string list;
    for (size_t i = 0; i < steps.size(); i++) {
        if (steps.size() > 6 && i == 2) list += ", ...";
        if (steps.size() > 6 && i >= 2 && i + 3 < steps.size()) continue;
        list += (list.empty() ? "" : ", ") + std::to_string(steps[i]);
    }
    return dir + " holds the complete checkpoints of steps " + list + " (" + std::to_string(steps.size()) +
           "; the newest: " + flag + " " + model_path(dir, steps.back()) + ")";
}

// Checks that `path` is a model file DIR/model_NNNNNNNN.bin of a complete checkpoint (its DONE marker
// exists) with a config.json beside it; InputError naming the problem otherwise.
inline ForkSource fork_source(const std::string& path) {
    const std::filesystem::path p(path);
    ForkSource src;
    src.dir = p.has_parent_path() ? p.parent_path().string() : ".";
    const std::string name = p.filename().string();
    if (parse_checkpoint_name(name, src.step) != CkptFileKind::Model || name.find(".tmp.") != std::string::npos)
        throw InputError("--fork-from " + path + ": not a checkpoint's model file; give RUN_DIR/model_NNNNNNNN.bin");
    if (!file_exists(path)) {
        const std::string held = complete_steps_text(src.dir, "--fork-from");  // a pruned step, a typo
        throw InputError(
            "--fork-from " + path + ": no such file" +
            (held.empty() ? (path.empty() || path[0] == '/' ? std::string()
                                                            : " (relative to the directory the trainer started in, " +
                                                                  std::filesystem::current_path().string() + ")") +
                                "; check the path (ls RUN_DIR/model_*.bin)"
                          : "; " + held));
    }
    if (!file_exists(done_path(src.dir, src.step)))
        throw InputError(
            "--fork-from " + path + ": step " + std::to_string(src.step) + " is not a complete checkpoint (no " +
            done_path(src.dir, src.step) +
            (file_exists(damaged_marker_path(src.dir, src.step))
                 ? "; " + damaged_marker_path(src.dir, src.step) + " says -y 1 found it damaged and left it behind"
                 : "") +
            "); fork from a step that has a DONE_ marker");
    if (!file_exists(join_path(src.dir, "config.json")))
        throw InputError("--fork-from " + path +
                         ": no config.json beside it to take the run's settings from; copy the "
                         "run's config.json into " +
                         src.dir);
    return src;
}

// -y 1 of `out`, a run without a complete checkpoint whose `record` is a fork's ("forked_from"): the
// checkpoint it forks again from, the one recorded; "" for a run that is not a fork. Refused, naming
// the --fork-from command, when that checkpoint is gone or incomplete, or was written again after the
// fork started (its DONE_ marker is newer than the fork's config.json: another run's step now).
inline std::string refork_checkpoint(const std::string& out, const nlohmann::ordered_json& record) {
    const auto f = record.find("forked_from");
    if (f == record.end() || !f->is_object()) return "";
    const auto c = f->find("checkpoint");
    if (c == f->end() || !c->is_string() || c->get<std::string>().empty())
        throw InputError("-y 1: " + out + "/config.json records a fork without its checkpoint (\"forked_from\"); " +
                         "fork again with --fork-from RUN/model_NNNNNNNN.bin into a new -o");
    const std::string checkpoint = c->get<std::string>();
    const std::string again = "; to fork again deliberately, --fork-from a complete checkpoint into a new -o";
    ForkSource src;
    try {
        src = fork_source(checkpoint);
    } catch (const InputError& e) {
        throw InputError("-y 1: " + out + " is a fork without a checkpoint of its own, and its source cannot be " +
                         "forked again: " + e.what() + again);
    }
    std::error_code ec1, ec2;
    const auto done = std::filesystem::last_write_time(done_path(src.dir, src.step), ec1);
    const auto started = std::filesystem::last_write_time(join_path(out, "config.json"), ec2);
    if (!ec1 && !ec2 && done > started)
        throw InputError("-y 1: " + out + " is a fork of --fork-from " + checkpoint + " without a checkpoint of " +
                         "its own, and that checkpoint was written again after the fork started (another run's " +
                         "step now)" + again);
    return checkpoint;
}

}  // namespace llmc
