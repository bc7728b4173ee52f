// The command line: a CLI11 option for each row of the flag table (llmc/app/flags.h), bound straight
// into TrainConfig, so --help, the parser and the --config file format can never disagree; the
// --config reader (llmc/app/config_file.h: TOML as config.toml, or a run's config.json); the mistakes
// CLI11 would misreport (llmc/app/argv_mistakes.h); the run record that -y 1 and --fork-from continue
// (llmc/app/run_record.h) as the base of the flags, which flags were given (TrainConfig::given) and
// which of them the --config file set (TrainConfig::from_config).
// docs/training.md lists the flags.
#pragma once
#include <algorithm>
#include <climits>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <istream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

#include "llmc/app/cli_checks.h"
#include "llmc/app/config_file.h"
#include "llmc/app/flag_suggest.h"
#include "llmc/app/flags.h"
#include "llmc/app/output_intent.h"
#include "llmc/app/argv_mistakes.h"
#include "llmc/app/run_history.h"
#include "llmc/app/run_record.h"
#include "llmc/app/train_config.h"
#include "llmc/app/validate.h"
#include "llmc/core/error.h"

namespace llmc {

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
#define LLMC_NOTE_RANGE(record, type, field, def, names, ok, rule, help) \
    note_range(names, rule, c.field, [](const auto& v) {                 \
        (void)v;                                                         \
        return ok;                                                       \
    });
// a 0/1 model flag's refusal (--bias is the one): what each value means, as its range check says it
#define LLMC_NOTE_MODEL_RANGE(type, field, names, help)                                                                \
    note_range(                                                                                                        \
        names,                                                                                                         \
        std::string(#field) == "bias" ? std::string(kBiasRule) + " (got {})" : std::string("must be 0 or 1 (got {})"), \
        c.overrides.field, [](const auto& v) {                                                                         \
            ModelOverrides o;                                                                                          \
            o.field = v;                                                                                               \
            return model_override_accepted(o);                                                                         \
        });
        LLMC_TRAIN_FLAGS(LLMC_NOTE_RANGE, LLMC_NOTE_MODEL_RANGE)
#undef LLMC_NOTE_RANGE
#undef LLMC_NOTE_MODEL_RANGE
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
        check_flag_values(a, zero_floats_);
        for (const IntRange& r : int_ranges_)  // 64-bit: CLI11 would clamp an overflow (cli_checks.h)
            if (r.hi == std::to_string(std::numeric_limits<long long>::max()))
                a.get_option(r.flag)->check(signed_text_check());
        for (CLI::Option* opt : a.get_options()) {
            if (opt->get_type_size() > 0 && opt->get_type_name() == "TEXT") opt->check(one_line);
            for (const std::string& n : opt->get_lnames()) {
                config_file_->known_names.push_back(n);
                if (opt->get_configurable() && n != "config") config_file_->suggestions.push_back(n);
            }
            for (const std::string& n : opt->get_snames()) config_file_->known_names.push_back(n);
        }
        for (const SettingRow& r : setting_rows())
            if (r.record == FlagRecord::Machine) config_file_->machine_names.push_back(long_flag_name(r.names));
    }

    // Parses argv. Returns -1 to go on, else the process exit code (0 after --help; 1 after a
    // parse error, printed as one line "error: ..." and kept as error()).
    // With -y 1 (and a config.json in -o) or --fork-from, the settings not given (by a flag or --config)
    // are the run record's (continue_record).
    int parse(int argc, const char* const* argv) {
        const std::vector<std::string> configs = config_paths(argc, argv);
        config_file_->file = configs.empty() ? "" : configs.back();
        config_file_->app = &app_;
        config_file_->taken.clear();
        const std::string mistake = argv_mistake(app_, argc, argv);
        if (!mistake.empty()) return fail(mistake, ErrorSource::Argv);
        if (configs.size() > 1)  // unlike a flag given twice, the last would not simply win: files are not merged
            return fail("--config given " + std::to_string(configs.size()) + " times (" + configs[0] + ", " +
                            configs[1] + (configs.size() > 2 ? ", ..." : "") +
                            "); one file sets a run: give one, and the other's settings as flags (flags typed "
                            "on the command line win over the file's values)",
                        ErrorSource::Argv);
        const std::string config_error = config_path_error(config_file_->file);
        if (!config_error.empty()) return fail(config_error, ErrorSource::Files);
        try {
            app_.parse(argc, argv);
        } catch (const CLI::CallForHelp& e) { return app_.exit(e); } catch (const CLI::CallForAllHelp& e) {
            return app_.exit(e);
        } catch (const ConfigFileError& e) {
            return fail(e.what(), ErrorSource::Files);
        } catch (const CLI::FileError&) {  // CLI11 could not open the --config file (config_path_error saw a file)
            return fail("--config " + config_file_->file + ": not readable; check its permissions", ErrorSource::Files);
        } catch (const CLI::ExtrasError& e) {
            return fail(unknown_flag_error(app_, e.what()), ErrorSource::Argv);
        } catch (const CLI::ConversionError& e) {
            const std::string from = config_origin(e.what());
            return fail(with_origin(conversion_error(app_, int_ranges_, e.what()), e.what(), from),
                        from.empty() ? ErrorSource::Argv : ErrorSource::Files);
        } catch (const CLI::ParseError& e) {
            const std::string from = config_origin(e.what());
            return fail(with_origin(e.what() + std::string("; run with --help for the flags"), e.what(), from),
                        from.empty() ? ErrorSource::Argv : ErrorSource::Files);
        }
        for (const CLI::Option* opt : app_.get_options())
            if (opt->count() > 0 && !opt->get_lnames().empty()) cfg_.given.push_back(opt->get_lnames().front());
        cfg_.config_record = config_file_->record_path;
        if (!config_file_->file.empty()) cfg_.config_file = config_file_->file;
        cfg_.from_config = config_file_->taken;
        cfg_.config_model = config_file_->model;
        try {
            continue_record();
        } catch (const std::exception& e) { return fail(e.what(), ErrorSource::Files); }
        return -1;
    }
    // The error line of the last parse that failed (without "error: "), "" otherwise.
    const std::string& error() const { return error_; }
    // Whether that error was found after reading files (it may be this process's alone in a launch).
    bool error_read_files() const { return error_source_ == ErrorSource::Files; }
    // This process's place in a multi-process launch (from the launcher's environment, llmc::launch_env):
    // an error found in argv alone is printed by rank 0 only (every rank reads the same flags: one line
    // says it once); one that read files (the --config file, a run record) is printed by every rank that
    // meets it, prefixed "rank R of W: " on ranks other than 0, since another rank may not meet it.
    void set_launch_rank(int rank, int world_size) {
        rank_ = rank;
        world_size_ = world_size;
    }

    const TrainConfig& config() const { return cfg_; }
    // Sets flag `name` (long name) to `value` after parse, as if given, so config_file_text() writes it
    // (main's -d that keeps a --config record's batch: llmc/app/run_history.h batch_of_config_record).
    void set_flag(const std::string& name, const std::string& value) {
        CLI::Option* op = app_.get_option("--" + name);
        op->clear();
        op->add_result(value);
        op->run_callback();
    }
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
    std::string error_;              // error()
    int rank_ = 0, world_size_ = 1;  // set_launch_rank()
    enum class ErrorSource { Argv, Files };
    ErrorSource error_source_ = ErrorSource::Argv;  // of error_
    std::vector<IntRange> int_ranges_;              // the integer flags, for conversion_error
    std::vector<std::string> zero_floats_;          // the float flags that take 0 ("--z-loss"), for float_text_check

    // Records, for a flag (its names "-x,--max-steps"; "" for a Json row) whose own rule `ok` is a predicate
    // on a value: of an integer field, its type's range and whether `ok` takes 0 and 1 only (such a flag's
    // conversion error is worded as its range check, llmc/app/validate.h check_setting, words `rule`); of
    // a float field, whether `ok` takes 0 (its refusal of a text no float holds then offers 0 too).
    template <class T, class Ok>
    void note_range(const std::string& names, const std::string& rule, const T&, Ok ok) {
        const size_t at = names.find("--");
        if (at == std::string::npos) return;
        const std::string flag = names.substr(at, names.find(',', at) - at);
        if constexpr (std::is_integral<T>::value && !std::is_same<T, bool>::value) {
            IntRange r = int_range<T>(flag);
            r.zero_or_one = ok(T(0)) && ok(T(1)) && !ok(T(2)) && !ok(T(-1));
            if (r.zero_or_one) r.zero_or_one_error = flag_names_text(names) + " " + rule;
            int_ranges_.push_back(r);
        } else if constexpr (std::is_floating_point<T>::value) {
            if (ok(T(0))) zero_floats_.push_back(flag);
        }
    }
    template <class T, class Ok>
    void note_range(const std::string& names, const std::string& rule, const std::optional<T>&, Ok ok) {
        note_range(names, rule, T{}, ok);
    }

    // (ErrorSource: where a parse error was found: in argv alone, alike on every rank, or after reading files)
    // Prints "error: <message>" (on ranks other than 0: nothing for an argv error, "error: rank R of W:
    // <message>" for one of files; set_launch_rank), keeps it as error_; returns the exit code 1.
    int fail(const std::string& message, ErrorSource source) {
        error_ = message;
        error_source_ = source;
        if (rank_ == 0) std::fprintf(stderr, "error: %s\n", message.c_str());
        else if (source == ErrorSource::Files)
            std::fprintf(stderr, "error: rank %d of %d: %s\n", rank_, world_size_, message.c_str());
        return 1;
    }

    // " (from --config FILE)" when the flag of CLI11's error `what` ("Could not convert: --seed = abc",
    // "--heads: must be >= 1 (got 0)") took its value from the --config file, else "".
    std::string config_origin(const std::string& what) const {
        const size_t at = what.find("--");
        if (at == std::string::npos || config_file_->file.empty()) return "";
        size_t end = at + 2;
        while (end < what.size() && (std::isalnum((unsigned char)what[end]) || what[end] == '-')) end++;
        const std::string name = what.substr(at + 2, end - at - 2);
        for (const std::string& t : config_file_->taken)
            if (t == name) return " (from --config " + config_file_->file + ")";
        return "";
    }
    // `line` (an error about the flag CLI11's `what` names) with `from` after the flag's first mention, and
    // after the value there when the line gives it next ("--seq-len 99999999999 (from --config F) is too
    // large"; the value: what follows " = " in `what`, "Could not convert: --seq-len = 99999999999").
    static std::string with_origin(std::string line, const std::string& what, const std::string& from) {
        if (from.empty()) return line;
        const size_t at = what.find("--");
        size_t end = at + 2;
        while (end < what.size() && (std::isalnum((unsigned char)what[end]) || what[end] == '-')) end++;
        const size_t in_line = line.find(what.substr(at, end - at));
        if (in_line == std::string::npos) return line + from;
        size_t after = in_line + (end - at);
        const size_t eq = what.find(" = ", end);
        const std::string value = eq == std::string::npos ? "" : " " + what.substr(eq + 3);
        if (!value.empty() && line.compare(after, value.size(), value) == 0) after += value.size();
        line.insert(after, from);
        return line;
    }

    // The --config paths of argv ("--config F" or "--config=F"), in order (more than one is refused in parse).
    static std::vector<std::string> config_paths(int argc, const char* const* argv) {
        std::vector<std::string> paths;
        for (int i = 1; i < argc; i++) {
            const std::string a = argv[i];
            if (a == "--") break;
            if (a == "--config" && i + 1 < argc) paths.push_back(argv[++i]);
            else if (a.rfind("--config=", 0) == 0) paths.push_back(a.substr(9));
        }
        return paths;
    }

    // Sets every option not given (on the command line or by --config) from `values`, as a config file
    // would. `file` is named in errors.
    void apply_unset(const std::vector<FlagValue>& values, const std::string& file) {
        for (const FlagValue& fv : values) {
            CLI::Option* op = app_.get_option_no_throw("--" + fv.name);
            if (op == nullptr) throw InputError("config file " + file + ": unknown flag --" + fv.name);
            if (cfg_.was_given(fv.name)) continue;
            try {
                op->add_result(op->get_expected_min() == 0 ? op->get_flag_value(fv.name, fv.value) : fv.value);
                op->run_callback();
            } catch (const CLI::Error& e) {
                throw InputError("config file " + file + ": --" + fv.name + " " + fv.value + ": " + e.what() +
                                 "; restore the file");
            }
        }
    }

    // -y 1 with <-o>/config.json, or --fork-from (the config.json beside the checkpoint, up to its step):
    // the record's settings (record_flag_values: "train" with its history, the model) fill every
    // inherited flag not given; cfg_.record_changes lists the given ones that differ from the record.
    // -y 1 together with --fork-from is refused later (check_flag_combinations). -y 1 of an -o without
    // a complete checkpoint: refused when console.log says it had one (check_checkpoints_not_deleted);
    // a fork's record (config.json "forked_from") makes it --fork-from that checkpoint again, with the
    // fork's recorded settings (refork_checkpoint), cfg_.refork set.
    void continue_record() {
        const bool fork = !cfg_.fork_from.empty();
        if (fork == (cfg_.resume == 1)) return;  // neither, or both
        if (cfg_.eval_only) return;              // refused before anything is read (check_eval_only_continues_no_run)
        std::string path;
        int through_step = INT_MAX;  // the history entries that apply: a fork's up to its checkpoint
        if (fork) {
            const ForkSource src = fork_source(cfg_.fork_from);
            path = join_path(src.dir, "config.json");
            through_step = src.step;
        } else {
            if (cfg_.output_dir.empty()) return;
            if (newest_complete_step(cfg_.output_dir) < 0) check_checkpoints_not_deleted(cfg_.output_dir);
            path = join_path(cfg_.output_dir, "config.json");
            if (!file_exists(path)) return;
        }
        const nlohmann::ordered_json record = read_run_record(path, "restore the run's config.json");
        apply_unset(record_flag_values(record, path, through_step), path);
        cfg_.settings_record = path;
        cfg_.record_changes = setting_changes(effective_train(record, path, through_step), cfg_, path);
        if (fork || newest_complete_step(cfg_.output_dir) >= 0) return;
        // a fork stopped before its first checkpoint: forked again, with its own record's settings
        const std::string source = refork_checkpoint(cfg_.output_dir, record);
        if (source.empty()) return;
        cfg_.fork_from = source;
        cfg_.resume = 0;
        cfg_.refork = true;
    }

    // One row of llmc/app/flags.h as a CLI11 option bound to its field (none for a Json row).
    template <class T>
    static void add_setting(CLI::App& a, FlagRecord record, const std::string& names, T& field,
                            const std::string& help) {
        if (record == FlagRecord::Json) return;
        CLI::Option* opt = add_bound(a, names, field, help);
        const bool launch = record == FlagRecord::Launch || record == FlagRecord::Hidden;
        // per process or machine: never in config.toml, not read from --config
        if (launch || record == FlagRecord::Machine) opt->configurable(false);
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
