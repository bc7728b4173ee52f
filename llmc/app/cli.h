// The command line: a CLI11 option for each row of the flag table (llmc/app/flags.h), bound straight
// into TrainConfig, so --help, the parser and the --config file format can never disagree; the
// --config reader (TOML as config.toml, or a run's config.json); the run record that -y 1 and
// --fork-from continue (llmc/app/run_record.h) as the base of the flags. docs/training.md lists the flags.
#pragma once
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <istream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

#include "llmc/app/cli_checks.h"
#include "llmc/app/flag_suggest.h"
#include "llmc/app/flags.h"
#include "llmc/app/run_record.h"
#include "llmc/app/train_config.h"
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
// first non-blank character '{', is a run's config.json (read by record_flag_values,
// llmc/app/run_record.h); anything else is TOML as config.toml writes it, and must be text (no NUL byte).
// In TOML, a key that is no flag and any [section] are refused, naming the key and the nearest flag, and
// so is a key with more than one value (a list, or the key twice), which CLI11 would reduce to its last.
class CheckedConfigFile : public CLI::ConfigTOML {
public:
    std::string file;                      // the --config path, named in errors (set before parsing)
    std::vector<std::string> known_names;  // every option's names without dashes (CLI11 checks the rest)
    std::vector<std::string> suggestions;  // the configurable flags' long names, for "did you mean"

    std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
        std::stringstream whole;
        whole << input.rdbuf();
        const std::string content = whole.str();
        if (is_json(content)) return json_items(content);
        if (content.find('\0') != std::string::npos)
            throw ConfigFileError("config file " + file +
                                  ": not a text file (a NUL byte); give a TOML file (as "
                                  "config.toml) or a run's config.json");
        std::istringstream lines(content);
        std::string text, line;
        while (std::getline(lines, line)) text += hide_inside_quotes(line) + "\n";
        std::istringstream hidden(text);
        std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(hidden);
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
        }
        return items;
    }

private:
    bool is_json(const std::string& content) const {
        const size_t first = content.find_first_not_of(" \t\r\n");
        const bool json_name = file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0;
        return json_name || (first != std::string::npos && content[first] == '{');
    }
    std::vector<CLI::ConfigItem> json_items(const std::string& content) const {
        std::vector<CLI::ConfigItem> items;
        try {
            nlohmann::ordered_json j = nlohmann::ordered_json::parse(content, nullptr, false);
            if (j.is_discarded())
                throw InputError("config file " + file +
                                 ": not valid JSON; give a run's config.json or a TOML "
                                 "file (as config.toml)");
            if (!j.is_object() || !j.contains("train") || !j["train"].is_object())
                throw InputError("config file " + file + ": has no \"train\" object; give a run's config.json");
            for (const FlagValue& fv : record_flag_values(j, file)) {
                items.emplace_back();
                items.back().name = fv.name;
                items.back().inputs = {fv.value};
            }
        } catch (const InputError& e) { throw ConfigFileError(e.what()); }
        return items;
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

class TrainCli {
public:
    TrainCli() : app_("train_gpt2_ls: train a GPT-2 with LS-attention (local sliding-window + global heads)") {
        CLI::App& a = app_;
        TrainConfig& c = cfg_;
        a.set_config("--config", "",
                     "read flags from a TOML file (as written to <out>/config.toml) or a run's "
                     "config.json; flags given here override it");
        config_file_ = std::make_shared<CheckedConfigFile>();
        a.config_formatter(config_file_);
        a.get_formatter()->column_width(34);
        a.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
        // one option per row of the flag table, in its order
#define LLMC_ADD_SETTING(record, type, field, def, names, ok, rule, help) \
    add_setting(a, FlagRecord::record, names, c.field, help);
#define LLMC_ADD_MODEL_FLAG(type, field, names, help) add_setting(a, FlagRecord::Toml, names, c.overrides.field, help);
        LLMC_TRAIN_FLAGS(LLMC_ADD_SETTING, LLMC_ADD_MODEL_FLAG)
#undef LLMC_ADD_SETTING
#undef LLMC_ADD_MODEL_FLAG
        // Numbers: white space around them is removed, an empty value refused (llmc/app/cli_checks.h). Text: values config.toml cannot hold
        // are refused: a line break or NUL byte (one line per flag), a double quote (CLI11 writes and
        // reads quotes without escapes), a space at either end (CLI11 writes " 64" unquoted, as a
        // number, and reads back "64")
        const CLI::Validator one_line(
            [](std::string& v) {
                if (v.find_first_of(std::string("\n\r\0\"", 4)) != std::string::npos)
                    return std::string("contains a line break, NUL byte or double quote; give a value without one");
                if (!v.empty() && (std::isspace((unsigned char)v.front()) || std::isspace((unsigned char)v.back())))
                    return std::string("starts or ends with a space; remove it");
                return std::string();
            },
            "");
        check_flag_values(a);
        for (CLI::Option* opt : a.get_options()) {
            if (opt->get_type_size() > 0 && opt->get_type_name() == "TEXT") opt->check(one_line);
            for (const std::string& n : opt->get_lnames()) {
                config_file_->known_names.push_back(n);
                if (opt->get_configurable() && n != "config") config_file_->suggestions.push_back(n);
                flag_names_.push_back(n);
            }
            for (const std::string& n : opt->get_snames()) config_file_->known_names.push_back(n);
        }
    }

    // Parses argv. Returns -1 to go on, else the process exit code (0 after --help; 1 after a
    // parse error, printed as one line "error: ...").
    // With -y 1 (and a config.json in -o) or --fork-from, the settings not given (by a flag or --config)
    // are the run record's (continue_record).
    int parse(int argc, const char* const* argv) {
        config_file_->file = config_path(argc, argv);
        try {
            app_.parse(argc, argv);
        } catch (const CLI::CallForHelp& e) { return app_.exit(e); } catch (const CLI::CallForAllHelp& e) {
            return app_.exit(e);
        } catch (const ConfigFileError& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return 1;
        } catch (const CLI::ExtrasError& e) {
            const std::string hint = unknown_flag_hint();
            std::fprintf(stderr, "error: %s%s\n", e.what(),
                         hint.empty() ? "; run with --help for the flags" : hint.c_str());
            return 1;
        } catch (const CLI::ParseError& e) {
            std::fprintf(stderr, "error: %s; run with --help for the flags\n", e.what());
            return 1;
        }
        cfg_.val_batches_given = app_.count("--val-batches") > 0;
        try {
            continue_record();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return 1;
        }
        return -1;
    }

    const TrainConfig& config() const { return cfg_; }
    // The flags as a TOML file that --config reads back: every flag with its value or default;
    // unset flags without a default (the model overrides, empty strings) are left out.
    std::string config_file_text() const {
        std::string all = app_.config_to_str(true, false), out;
        size_t pos = 0;
        while (pos < all.size()) {
            size_t end = all.find('\n', pos);
            if (end == std::string::npos) end = all.size();
            std::string line = all.substr(pos, end - pos);
            const bool unset = line.size() >= 3 && line.compare(line.size() - 3, 3, "=\"\"") == 0;
            if (!line.empty() && !unset) out += line + "\n";
            pos = end + 1;
        }
        return out;
    }
    std::string help() const { return app_.help(); }

private:
    CLI::App app_;
    TrainConfig cfg_;
    std::shared_ptr<CheckedConfigFile> config_file_;
    std::vector<std::string> flag_names_;  // every option's long names, for "did you mean"

    // The --config path in argv ("--config F" or "--config=F"; the last one), "" without one.
    static std::string config_path(int argc, const char* const* argv) {
        std::string path;
        for (int i = 1; i < argc; i++) {
            const std::string a = argv[i];
            if (a == "--config" && i + 1 < argc) path = argv[i + 1];
            else if (a.rfind("--config=", 0) == 0) path = a.substr(9);
        }
        return path;
    }

    // "; did you mean --qk-norm?" for the first unexpected "--name" argument that is near a flag.
    std::string unknown_flag_hint() const {
        for (const std::string& arg : app_.remaining()) {
            if (arg.rfind("--", 0) != 0) continue;
            const std::string hint = did_you_mean(arg.substr(2, arg.find('=') - 2), flag_names_);
            if (!hint.empty()) return hint;
        }
        return "";
    }

    // Sets every option not given (on the command line or by --config) from `values`, as a config file
    // would; only the inherited ones (FlagValue::inherited). `file` is named in errors.
    void apply_unset(const std::vector<FlagValue>& values, const std::string& file) {
        for (const FlagValue& fv : values) {
            if (!fv.inherited) continue;
            CLI::Option* op = app_.get_option_no_throw("--" + fv.name);
            if (op == nullptr) throw InputError("config file " + file + ": unknown flag --" + fv.name);
            if (!op->empty()) continue;
            try {
                op->add_result(op->get_expected_min() == 0 ? op->get_flag_value(fv.name, fv.value) : fv.value);
                op->run_callback();
            } catch (const CLI::Error& e) {
                throw InputError("config file " + file + ": --" + fv.name + " " + fv.value + ": " + e.what() +
                                 "; restore the file");
            }
        }
    }

    // -y 1 with <-o>/config.json, or --fork-from (the config.json beside the checkpoint): the record's
    // settings (record_flag_values: "train" with its history, the model) fill every inherited flag not
    // given; cfg_.record_changes lists the given ones that differ from the record. -y 1 together with
    // --fork-from is refused later (check_flag_combinations).
    void continue_record() {
        const bool fork = !cfg_.fork_from.empty();
        if (fork == (cfg_.resume == 1)) return;  // neither, or both
        std::string path;
        if (fork) {
            path = join_path(fork_source(cfg_.fork_from).dir, "config.json");
        } else {
            if (cfg_.output_dir.empty()) return;
            path = join_path(cfg_.output_dir, "config.json");
            if (!file_exists(path)) return;
        }
        const std::vector<FlagValue> values = record_flag_values(read_run_record(path), path);
        TrainCli recorded;
        recorded.apply_unset(values, path);
        apply_unset(values, path);
        cfg_.record_changes = setting_changes(recorded.cfg_, cfg_);
    }

    // One row of llmc/app/flags.h as a CLI11 option bound to its field (none for a Json row).
    template <class T>
    static void add_setting(CLI::App& a, FlagRecord record, const std::string& names, T& field,
                            const std::string& help) {
        if (record == FlagRecord::Json) return;
        CLI::Option* opt = add_bound(a, names, field, help);
        const bool launch = record == FlagRecord::Launch || record == FlagRecord::Hidden;
        if (launch) opt->configurable(false);  // per process: never in config.toml, not read from --config
        if (record == FlagRecord::Hidden) opt->group("");
        if (!launch && !is_optional<T>::value && !std::is_same<T, bool>::value) opt->capture_default_str();
    }
    template <class T>
    static CLI::Option* add_bound(CLI::App& a, const std::string& names, T& field, const std::string& help) {
        return a.add_option(names, field, help);
    }
    // set only when given; CLI11 converts the value as a T
    template <class T>
    static CLI::Option* add_bound(CLI::App& a, const std::string& names, std::optional<T>& field,
                                  const std::string& help) {
        return a.add_option<std::optional<T>, T>(names, field, help);
    }
    // an on/off flag; bound to a bool, so "qk-norm=false" in a config file means off
    static CLI::Option* add_bound(CLI::App& a, const std::string& names, bool& field, const std::string& help) {
        return a.add_flag(names, field, help);
    }
    template <class T>
    struct is_optional : std::false_type {};
    template <class T>
    struct is_optional<std::optional<T>> : std::true_type {};
};

}  // namespace llmc
