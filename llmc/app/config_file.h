// The --config file reader (CheckedConfigFile): TOML as config.toml writes it, or a run's config.json
// (through llmc/app/run_record.h, the one config.json reader), both checked strictly. llmc/app/cli.h
// installs it as CLI11's config formatter; docs/training.md (--config) states the rules.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "llmc/app/flag_suggest.h"
#include "llmc/app/run_history.h"
#include "llmc/app/run_record.h"
#include "llmc/core/error.h"

namespace llmc {

// A --config file that cannot be read as settings: its message is the whole error line.
struct ConfigFileError : CLI::ConfigError {
    explicit ConfigFileError(const std::string& msg) : CLI::ConfigError(msg) {}
};

// The --config reader: CLI11 2.1's TOML reader with two of its bugs worked around (both found by
// test/fuzz/fuzz_config.cpp; CLI11 2.1.2 is Debian's):
//   - it cuts a value at its first '#' even inside quotes, so output-dir="runs/#3" read back as
//     "runs/ : here the '#' of a quoted value is hidden from it behind a marker and restored after;
//   - a quoted value with a ',' or a space goes through its list splitter, which reads backslash-quote
//     as an escaped quote (a value ending in a backslash, written "a,b\", read back as a,b\") and then
//     strips a second pair of quotes (the value 'a b', written "'a b'", read back as a b): a backslash
//     and the other kind of quote inside quotes are hidden the same way, so what is inside a quoted
//     value is always literal (as CLI11 writes it);
//   - it reads "seed=[]", or a '[' list still open at the end of the file, as an item with no value
//     and then indexes its empty value list (undefined behaviour): such items are refused.
//
// The format of a --config file, decided by its name and content: a name ending in ".json", or a
// first non-blank character '{', is a run's config.json, which gives what -y 1 would take from it
// (record_flag_values, llmc/app/run_record.h); anything else is TOML as config.toml writes it, and must
// be text (no NUL byte). In TOML, a key that is no flag and any [section] are refused, naming the key
// and the nearest flag, and so is a key with more than one value (a list, or the key twice), which
// CLI11 would reduce to its last, and one flag under both its names (x and max-steps), of which CLI11
// would keep the first; a Machine key (device, threads, cuda-graph; older versions wrote the
// first two) is left out with a note, as a record never sets the machine.
class CheckedConfigFile : public CLI::ConfigTOML {
public:
    std::string file;                        // the --config path, named in errors (set before parsing)
    std::vector<std::string> known_names;    // every option's names without dashes (CLI11 checks the rest)
    std::vector<std::string> suggestions;    // the configurable flags' long names, for "did you mean"
    std::vector<std::string> machine_names;  // the Machine rows' long names (--device, --pdl, ...): skipped
    const CLI::App* app = nullptr;           // the parser: which flags the command line gave (set before parsing)
    mutable std::string record_path;         // `file` once it was read as a run's config.json; "" otherwise
    mutable std::vector<std::string> taken;  // long names of the flags the file sets and the command line does not
    mutable std::string model;  // the file's -e/--model value, given on the command line or not; "" if none
    mutable std::optional<nlohmann::ordered_json> toml_record;  // a run's config.toml: the config.json beside it

    std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
        std::stringstream whole;
        whole << input.rdbuf();
        const std::string content = whole.str();
        if (is_json(content)) return json_items(content);
        if (content.find('\0') != std::string::npos)
            throw ConfigFileError("config file " + file +
                                  ": not a text file (a NUL byte); give a TOML file (as "
                                  "config.toml) or a run's config.json");
        const bool run_toml = note_record_beside_toml();
        std::istringstream lines(content);
        std::string text, line;
        while (std::getline(lines, line)) text += hide_inside_quotes(line) + "\n";
        std::istringstream hidden(text);
        std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(hidden), kept;
        std::map<const CLI::Option*, std::string> named_as;  // a flag's key in the file (x, or max-steps)
        std::string run_names;  // a run's config.toml: its -o and -y keys, not taken ("output-dir=r and resume=1")
        for (CLI::ConfigItem& it : items) {
            if (!it.parents.empty() || it.name == "++" || it.name == "--")  // "++"/"--": a [section] starts/ends
                throw ConfigFileError("config file " + file + ": unknown section [" +
                                      restore(it.parents.empty() ? it.name : it.parents.front()) +
                                      "]; the flags are top-level keys (key=value lines, as in config.toml)");
            if (it.inputs.empty())
                throw CLI::ConfigError("config file: '" + restore(it.fullname()) +
                                       "' has no value (an empty or unclosed [ list); give it one value");
            it.name = restore(it.name);
            for (std::string& v : it.inputs) v = restore(v);
            if (std::find(known_names.begin(), known_names.end(), it.name) == known_names.end())
                throw ConfigFileError("config file " + file + ": unknown key '" + it.name + "'" +
                                      did_you_mean(it.name, suggestions));
            if (it.inputs.size() > 1)  // "a,b", "[a, b]", "a b" or the key on two lines: CLI11 would take the last
                throw ConfigFileError("config file " + file + ": '" + it.name + "' has " +
                                      std::to_string(it.inputs.size()) +
                                      " values (a list, or the key given twice); every flag takes one value: keep one");
            const CLI::Option* opt =
                app == nullptr ? nullptr : app->get_option_no_throw((it.name.size() == 1 ? "-" : "--") + it.name);
            if (opt != nullptr && !named_as.emplace(opt, it.name).second)  // the key again, or under its other name
                throw ConfigFileError("config file " + file + ": " +
                                      (named_as[opt] == it.name
                                           ? "the key '" + it.name + "' is given twice"
                                           : "'" + named_as[opt] + "' and '" + it.name + "' are one flag (" +
                                                 opt->get_name() + ") given 2 values") +
                                      "; every flag takes one value: keep one");
            if (opt != nullptr && !opt->get_configurable() &&
                std::find(machine_names.begin(), machine_names.end(), it.name) == machine_names.end())
                throw ConfigFileError("config file " + file + ": '" + it.name + "' cannot be set in a file (" +
                                      opt->get_name() + " is a command-line flag only); give it on the command line");
            if (opt != nullptr && opt->check_lname("model")) model = it.inputs.front();
            if (run_toml && opt != nullptr && opt->count() == 0) check_relative_path(*opt, it.name, it.inputs.front());
            if (run_toml && opt != nullptr && (opt->check_lname("output-dir") || opt->check_lname("resume"))) {
                if (opt->count() == 0 && it.inputs.front() != "" && it.inputs.front() != "0")
                    run_names += (run_names.empty() ? "" : " and ") + it.name + "=" + it.inputs.front();
                continue;
            }
            if (std::find(machine_names.begin(), machine_names.end(), it.name) == machine_names.end()) {
                kept.push_back(it);
                note_taken(opt);
            } else
                std::fprintf(stderr,
                             "note: config file %s: %s=%s is not taken: --%s describes the machine, not the run; "
                             "give it on the command line\n",
                             file.c_str(), it.name.c_str(), it.inputs.front().c_str(), it.name.c_str());
        }
        if (!run_names.empty())
            std::fprintf(stderr,
                         "note: config file %s: %s not taken: -o and -y name a run, and this file is a run's "
                         "config.toml (config.json beside it): its settings only; give -o (and -y 1 to continue "
                         "that run) on the command line\n",
                         file.c_str(),
                         (run_names + (run_names.find(" and ") == std::string::npos ? " is" : " are")).c_str());
        return kept;
    }

private:
    // Adds the flag of `opt` to `taken` unless the command line gave it (CLI11 reads the command line
    // first, and a flag it gave keeps that value).
    void note_taken(const CLI::Option* opt) const {
        if (opt != nullptr && opt->count() == 0 && !opt->get_lnames().empty())
            taken.push_back(opt->get_lnames().front());
    }
    bool is_json(const std::string& content) const {
        const size_t first = content.find_first_not_of(" \t\r\n");
        const bool json_name = file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0;
        return json_name || (first != std::string::npos && content[first] == '{');
    }
    // A run's config.json: what -y 1 would take from it (record_flag_values). A new run applies one
    // value per setting from its first step, so a setting the record's "history" changed during the
    // run must be given on the command line (its start or its end value): refused otherwise, naming them.
    std::vector<CLI::ConfigItem> json_items(const std::string& content) const {
        std::vector<CLI::ConfigItem> items;
        try {
            const nlohmann::ordered_json record = parse_run_record(content, file);
            record_path = file;
            const std::string list = changes_not_given(record, file);
            if (!list.empty() && resume_given()) {
                if (is_own_record())
                    throw InputError("--config " + file + " is the record of the run in -o, which -y 1 continues " +
                                     "with its recorded settings and history (" + list + "): drop --config");
                throw InputError("config file " + file + ": that run changed settings while it trained: " + list +
                                 "; -y 1 continues the run in -o from its checkpoint: give each of these flags with " +
                                 "the value it should continue with, or drop --config");
            }
            if (!list.empty()) {
                throw InputError("config file " + file + ": the run changed settings while it trained: " + list +
                                 "; a new run takes one value from its first step: give each of these flags " +
                                 "with the value you want (or --fork-from a checkpoint to continue the run)");
            }
            std::fprintf(stderr,
                         "note: --config %s: that run's recorded settings and model, under the flags given "
                         "here\n",
                         file.c_str());
            const std::string fork = fork_settings_note(record);
            if (!fork.empty()) std::fprintf(stderr, "%s\n", fork.c_str());
            for (const FlagValue& fv : record_flag_values(record, file)) {
                if (fv.name == "model") model = fv.value;
                items.emplace_back();
                items.back().name = fv.name;
                items.back().inputs = {fv.value};
                note_taken(app == nullptr ? nullptr : app->get_option_no_throw("--" + fv.name));
            }
        } catch (const InputError& e) { throw ConfigFileError(e.what()); }
        return items;
    }
    // Whether the command line gave -y 1 (a resume of the run in -o, not a new run).
    bool resume_given() const {
        const CLI::Option* op = app ? app->get_option_no_throw("--resume") : nullptr;
        return op != nullptr && op->count() > 0 && !op->results().empty() && op->results().back() == "1";
    }
    // Whether `file` is the config.json of the command line's -o (the run -y 1 continues).
    bool is_own_record() const {
        const CLI::Option* op = app ? app->get_option_no_throw("--output-dir") : nullptr;
        if (op == nullptr || op->count() == 0 || op->results().empty()) return false;
        std::error_code ec;
        const std::filesystem::path own = std::filesystem::path(op->results().back()) / "config.json";
        return std::filesystem::exists(own, ec) && std::filesystem::equivalent(own, file, ec);
    }
    // The settings the record's "history" changed while the run trained and the command line does not
    // give, each with its values in order: "--z-loss (0 at the start, 0.0001 at the end)" for one
    // change, "--learning-rate (0.0006 at the start, 0.001 from step 7, 0.0006 from step 9 to the end)"
    // for more (a history entry at step s changes steps s+1 on); "" when none.
    std::string changes_not_given(const nlohmann::ordered_json& record, const std::string& path) const {
        std::vector<std::string> flags;                 // in the order of their first change
        std::map<std::string, std::vector<int>> steps;  // flag -> the steps of its history entries
        for (const nlohmann::ordered_json& e : history_entries(record, path)) {
            const std::string flag = "--" + normalized_flag_name(e["flag"].get<std::string>());
            const CLI::Option* op = app ? app->get_option_no_throw(flag) : nullptr;
            if (op != nullptr && op->count() > 0) continue;  // given on the command line
            if (!steps.count(flag)) flags.push_back(flag);
            steps[flag].push_back((int)e["step"].get<int64_t>());
        }
        std::string list;
        for (const std::string& flag : flags) {
            std::vector<int>& at = steps[flag];
            std::sort(at.begin(), at.end());
            // the value from the start, then each value that differs from the one before and its first step
            std::vector<std::pair<int, std::string>> values = {
                {0, change_text(effective_train(record, path, -1), flag, unset_text(record))}};
            for (const int step : at) {
                const std::string v = change_text(effective_train(record, path, step), flag, unset_text(record));
                if (v != values.back().second) values.push_back({step + 1, v});
            }
            std::string text = flag + " (" + values[0].second + " at the start";
            if (values.size() <= 2) {
                text += ", " + values.back().second + " at the end)";
            } else {
                for (size_t i = 1; i < values.size(); i++)
                    text += ", " + values[i].second + " from step " + std::to_string(values[i].first) +
                            (i + 1 == values.size() ? " to the end)" : "");
            }
            list += (list.empty() ? "" : ", ") + text;
        }
        return list;
    }
    // A fork's record ("forked_from") holds its settings from the fork on, but its steps up to the fork
    // were its source's, trained with the source's settings then: its "train" with its "history" up to
    // each step. A note naming each setting not given on the command line that differed in those steps,
    // "" when none did; when the source's record cannot be read, a note that this cannot be checked.
    std::string fork_settings_note(const nlohmann::ordered_json& record) const {
        const std::optional<RecordedFork> fork = recorded_fork(record);
        if (!fork || fork->step <= 0) return "";
        const nlohmann::ordered_json& from = record["forked_from"];
        const std::string checkpoint =
            from.contains("checkpoint") && from["checkpoint"].is_string() ? from["checkpoint"].get<std::string>() : "";
        const std::string head = "note: --config " + file + ": that run is a fork at step " +
                                 std::to_string(fork->step) + " of " + checkpoint + ", ";
        const std::string source_path = config_json_beside(checkpoint);
        nlohmann::ordered_json source;
        try {
            source = read_run_record(source_path);
        } catch (const InputError&) {
            return head + "whose record " + source_path + " cannot be read here: cannot check that its steps 1-" +
                   std::to_string(fork->step) + " trained with the settings this run takes from step 1";
        }
        // the source's settings for steps from+1..to: its start, then from each history entry before the fork
        std::vector<std::pair<int, int>> spans = {{0, fork->step}};
        for (const nlohmann::ordered_json& e : history_entries(source, source_path)) {
            const int at = (int)e["step"].get<int64_t>();
            if (at <= 0 || at >= fork->step || at == spans.back().first) continue;
            spans.back().second = at;
            spans.push_back({at, fork->step});
        }
        const nlohmann::ordered_json& train = record["train"];
        std::string list;
        for (const SettingRow& row : setting_rows()) {
            const std::string flag = "--" + long_flag_name(row.names);
            if (!inherited_setting(row.field, row.record) || !train.contains(row.field) || flag == "--") continue;
            const CLI::Option* op = app ? app->get_option_no_throw(flag) : nullptr;
            if (op != nullptr && op->count() > 0) continue;  // given on the command line
            std::string before;
            for (const auto& [from_step, to_step] : spans) {
                const nlohmann::ordered_json then = effective_train(source, source_path, from_step);
                if (then.contains(row.field) && same_setting(then[row.field], train[row.field])) continue;
                before += std::string(before.empty() ? "" : " and ") + change_text(then, flag, unset_text(record)) +
                          " in steps " + std::to_string(from_step + 1) + "-" + std::to_string(to_step);
            }
            if (!before.empty())
                list += (list.empty() ? "" : ", ") + flag + " " + before + " (" +
                        change_text(train, flag, unset_text(record)) + " here)";
        }
        if (list.empty()) return "";
        return head + "whose steps 1-" + std::to_string(fork->step) + " trained with other settings (" + source_path +
               "): " + list + "; this run takes the values here from step 1 (give a flag to choose)";
    }
    // Whether two recorded values are one setting: numbers as the float or integer a setting holds (a
    // history entry records 0.0001 where "train" records the float's 9.9999997e-05), the rest as JSON.
    static bool same_setting(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
        if (a.is_number_integer() && b.is_number_integer()) return a == b;
        if (a.is_number() && b.is_number()) return (float)a.get<double>() == (float)b.get<double>();
        return a == b;
    }
    // The config.json in the directory of `path` (a run's config.toml or checkpoint), as `path` spells it.
    static std::string config_json_beside(const std::string& path) {
        const size_t slash = path.find_last_of('/');
        return (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "config.json";
    }
    // A run's config.toml (named so, with a config.json beside it) holds the flags of its first start:
    // its -o and -y name that run and are not taken (from_config). When the config.json records settings
    // the run changed while it trained (and the command line does not give them), a note names them:
    // this run takes the start values; when the run is a fork, the note of fork_settings_note. A
    // config.json that cannot be read adds no note. Returns whether `file` is a run's config.toml.
    bool note_record_beside_toml() const {
        toml_record.reset();  // this file's, or none
        const size_t slash = file.find_last_of('/');
        if ((slash == std::string::npos ? file : file.substr(slash + 1)) != "config.toml") return false;
        const std::string json_path = config_json_beside(file);
        std::ifstream in(json_path, std::ios::binary);
        if (!in) return false;
        std::stringstream whole;
        whole << in.rdbuf();
        std::string list, fork;
        try {
            const nlohmann::ordered_json record = parse_run_record(whole.str(), json_path);
            list = changes_not_given(record, json_path);
            fork = fork_settings_note(record);
            toml_record = record;
        } catch (const InputError&) { return true; }
        if (!list.empty())
            std::fprintf(stderr,
                         "note: --config %s holds the flags of that run's first start, but the run changed settings "
                         "while it trained (%s): %s; this run takes the start values (give a flag to choose)\n",
                         file.c_str(), json_path.c_str(), list.c_str());
        if (!fork.empty()) std::fprintf(stderr, "%s\n", fork.c_str());
        return true;
    }
    // A run's config.toml holds its data paths (and a checkpoint -e) as typed: a relative one names a file
    // from the directory the trainer starts in, and its config.json records what it named (absolute). From
    // another directory it names other files, which the run would train on without a word (other data of
    // the same vocabulary passes every check): refused, naming both paths and the fixes. Compared with the
    // value of the run's first start (a change recorded in "history" gives it as "old"), as the file holds,
    // both lexically normalized; a relative recorded value (records of older versions) cannot be compared:
    // a note names what the path names from here.
    void check_relative_path(const CLI::Option& opt, const std::string& key, const std::string& value) const {
        const char* field = opt.check_lname("train-data") ? "train_data"
                            : opt.check_lname("val-data") ? "val_data"
                            : opt.check_lname("model")    ? "model"
                                                          : nullptr;
        if (field == nullptr || !toml_record || value.empty() || value[0] == '/') return;
        const std::string here = recorded_form(field, value);
        if (here == value) return;  // a preset (-e ls-small)
        const nlohmann::ordered_json& record = *toml_record;
        const auto train = record.find("train");
        if (train == record.end() || !train->is_object() || !train->contains(field) || !(*train)[field].is_string())
            return;
        std::string then = (*train)[field].get<std::string>();
        if (record.contains("history") && record["history"].is_array())
            for (const auto& h : record["history"])  // the earliest change's "old" is the first start's value
                if (h.is_object() && h.value("flag", "") == opt.get_name() && h.contains("old") &&
                    h["old"].is_string()) {
                    then = h["old"].get<std::string>();
                    break;
                }
        // a record of an older version holds the path as typed (relative): nothing to compare it with, so
        // a note names what it names from here; `..` and `.` are spelling (the same files from a sibling
        // directory)
        if (then.empty()) return;
        if (then[0] != '/') {
            std::fprintf(stderr,
                         "note: config file %s: %s=\"%s\" is relative, and the run's record (of an older version) "
                         "holds it as typed, so whether it named these files cannot be checked: from this directory "
                         "it names %s\n",
                         file.c_str(), key.c_str(), value.c_str(), here.c_str());
            return;
        }
        if (std::filesystem::path(here).lexically_normal() == std::filesystem::path(then).lexically_normal()) return;
        const std::string json_path = config_json_beside(file);
        throw ConfigFileError("config file " + file + ": " + key + "=\"" + value +
                              "\" is relative, and from this directory it names " + here + " where the run's was " +
                              then + " (" + json_path + "); start in the directory the run started in, give " +
                              opt.get_name() + " on the command line, or --config " + json_path);
    }
    // A setting not given (null), as the notes below write it for `record`'s model (near_unset_text: the
    // backend is not known yet).
    static std::string unset_text(const nlohmann::ordered_json& record) {
        const bool has_window = record.is_object() && record.contains("model") && record["model"].is_object() &&
                                record["model"].contains("window") && record["model"]["window"].is_number_integer();
        return has_window ? near_unset_text(record["model"]["window"].get<int>(), "") : "not given";
    }
    // The value of the setting of `flag` ("--z-loss") in a "train" object, as a note writes it (`unset`:
    // a null one, unset_text).
    static std::string change_text(const nlohmann::ordered_json& train, const std::string& flag,
                                   const std::string& unset) {
        const SettingRow* row = setting_row_of_flag(flag.substr(2));
        if (row == nullptr || !train.contains(row->field)) return "the default";
        const nlohmann::ordered_json& v = train[row->field];
        if (v.is_null()) return unset;
        if (v.is_string()) return v.get<std::string>();
        // settings are floats recorded as doubles (0.003000000026): written as the float's shortest form
        return change_value_text(v.is_number_float() ? history_value((float)v.get<double>()) : v);
    }
    // kMark '1' stands for kMark itself; inside quotes kMark '2' for '#', kMark '3' for a backslash,
    // kMark '4' for a single quote, kMark '5' for a double quote (the kind that did not open the value)
    static constexpr char kMark = '\x01';
    static constexpr char kHidden[] = "#\\'\"";  // the characters kMark '2'..'5' stand for
    static std::string hide_inside_quotes(const std::string& line) {
        std::string out;
        char quote = 0;      // the open quote of a value, or 0
        bool value = false;  // past the first '='
        for (char c : line) {
            if (c == kMark) {
                out += kMark;
                out += '1';
                continue;
            }
            const char* hidden = quote != 0 && c != quote && c != 0 ? std::strchr(kHidden, c) : nullptr;
            if (hidden != nullptr) {
                out += kMark;
                out += (char)('2' + (hidden - kHidden));
                continue;
            }
            if (quote != 0 && c == quote) quote = 0;
            else if (quote == 0 && value && (c == '"' || c == '\'')) quote = c;
            else if (c == '=') value = true;
            out += c;
        }
        return out;
    }
    static std::string restore(const std::string& s) {
        std::string out;
        for (size_t i = 0; i < s.size(); i++) {
            if (s[i] == kMark && i + 1 < s.size()) {
                const char code = s[++i];
                out += code >= '2' && code <= '5' ? kHidden[code - '2'] : kMark;
            } else {
                out += s[i];
            }
        }
        return out;
    }
};

}  // namespace llmc
