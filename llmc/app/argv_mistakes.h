// Mistakes on a train_gpt2_ls command line that CLI11 would misreport, found before it parses, each
// as one error line naming the mistake and its fix (docs/training.md "Flags"):
//   llm.c's flags of two letters ("-nk 4", "-nk4": CLI11 reads -n with the value "k"), and
//   its one-letter flags this trainer has no counterpart of ("-r 0": CLI11 says "not expected");
//   llm.c's "-h 1" (HellaSwag there; CLI11 prints the help and exits 0);
//   a one-letter flag with '=' ("-m=1": CLI11 reads the value "=1");
//   a glob the shell expanded ("-i d/train_*.bin" unquoted: CLI11 names one "argument not expected");
//   an on/off flag's value after a space ("--qk-norm false": CLI11 says "not expected: false");
//   --config naming a directory or no file (CLI11: "was not readable (missing?)").
// argv_mistake finds all but the last from argv alone: alike on every rank of a launch (a glob's paths
// are looked at, but a rank that does not see them refuses the same command through CLI11).
// config_path_error depends on a file system, which may be one rank's alone (docs/multigpu.md "Errors").
// docs/from_llmc.md lists llm.c's flags and ours.
#pragma once
#include <cctype>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>

#include "llmc/app/flag_suggest.h"
#include "llmc/app/on_off_text.h"

namespace llmc {

// One of llm.c's train_gpt2.cu flags of more than one letter and what does its job here ("" for
// nothing); -lr, a common spelling of the learning rate, too. The rows of docs/from_llmc.md.
struct LlmcFlag {
    const char* llmc;
    const char* here;
};
inline const std::vector<LlmcFlag>& multi_letter_llmc_flags() {
    static const std::vector<LlmcFlag> flags = {{"-nk", "--keep-checkpoints"},
                                                {"-nm", ""},
                                                {"-sl", "--skip-spikes"},
                                                {"-sg", "--skip-spikes"},
                                                {"-pn", "--world-size"},
                                                {"-pr", "--rank"},
                                                {"-pg", "--local-rank"},
                                                {"-pm", "--rendezvous"},
                                                {"-pp", "--rendezvous"},
                                                {"-ps", "--rendezvous"},
                                                {"-lg", ""},
                                                {"-ge", ""},
                                                {"-lr", "-l/--learning-rate"}};
    return flags;
}

// llm.c's one-letter flags that no flag here takes the place of (the rows of docs/from_llmc.md with
// "(none)"), with what they do there.
inline const std::vector<LlmcFlag>& one_letter_llmc_flags() {
    static const std::vector<LlmcFlag> flags = {{"-a", "overfit a single batch"},
                                                {"-f", "TF32 switch"},
                                                {"-w", "fp32 master-weights switch"},
                                                {"-r", "recompute setting"}};
    return flags;
}

// Whether `arg` is an option rather than a value: "-x", "--name", "-x5", but not "-", "-1" or "-.5".
inline bool looks_like_option(const std::string& arg) {
    return arg.size() >= 2 && arg[0] == '-' && !std::isdigit((unsigned char)arg[1]) && arg[1] != '.';
}

// The error for a single-dash token of two or more letters ("-nk"), "" when it is none of these: one
// of llm.c's (multi_letter_llmc_flags; also with its value attached, "-nk2"), or one CLI11 would read
// as a one-letter flag that takes a number followed by letters (-x with "s" for "-xs"). A flag that
// takes text keeps its attached value ("-ofoo" is -o foo).
inline std::string multi_letter_error(const CLI::App& app, const std::string& arg) {
    if (arg.size() < 3 || arg[0] != '-' || arg[1] == '-') return "";
    size_t letters = 1;
    while (letters < arg.size() && std::isalpha((unsigned char)arg[letters])) letters++;
    const std::string name = arg.substr(0, letters);  // "-nk" of "-nk2"
    for (const LlmcFlag& f : multi_letter_llmc_flags()) {
        if (name != f.llmc) continue;
        if (*f.here == '\0')
            return arg +
                   " is llm.c's flag, which this trainer has no counterpart of; drop it (llm.c's flags and ours: "
                   "docs/from_llmc.md)";
        return arg + ": this trainer spells it " + f.here + " (llm.c's flags and ours: docs/from_llmc.md)";
    }
    if (letters < arg.size()) return "";  // letters, then more: a value attached to a one-letter flag
    const CLI::Option* first = app.get_option_no_throw(arg.substr(0, 2));
    if (first == nullptr || first->get_expected_min() == 0 || first->get_type_name().rfind("TEXT", 0) == 0) return "";
    return arg + " is not a flag: a short flag is one letter, its value after a space (" + arg.substr(0, 2) +
           " VALUE); run with --help for the flags";
}

// The error for a one-letter flag with its value after '=' ("-m=1": CLI11 would read the value "=1"),
// "" for any other token: the value follows a space, or '=' after the long name.
inline std::string short_flag_equals_error(const CLI::App& app, const std::string& arg) {
    if (arg.size() < 3 || arg[0] != '-' || arg[1] == '-' || arg[2] != '=') return "";
    const CLI::Option* opt = app.get_option_no_throw(arg.substr(0, 2));
    if (opt == nullptr || opt->get_expected_min() == 0 || opt->get_lnames().empty()) return "";
    const std::string value = arg.substr(3);
    return arg + ": a short flag's value follows a space (" + arg.substr(0, 2) + " " + value +
           "); '=' goes with the long name (--" + opt->get_lnames().front() + "=" + value + ")";
}

// The error for arguments `strays` that follow the value of `option` (as typed) and that exist as
// files, as a glob the shell expanded does; "" otherwise (CLI11 then names the first one).
inline std::string stray_arguments_error(const std::string& option, const std::string& value,
                                         const std::vector<std::string>& strays) {
    std::error_code ec;
    if (option.empty() || strays.empty() || !std::filesystem::exists(value, ec)) return "";
    std::string named;
    for (size_t i = 0; i < strays.size(); i++) {
        if (!std::filesystem::exists(strays[i], ec)) return "";
        if (i < 2) named += (i ? ", " : "") + strays[i];
    }
    if (strays.size() > 2) named += ", ...";
    return option + " takes one value, but " + std::to_string(strays.size()) + " more path(s) follow " + value + " (" +
           named + "): the shell expanded a glob; quote it (" + option +
           " 'DIR/train_*.bin') so that the trainer reads the pattern";
}

// The error for an on/off flag `flag` (as typed) followed by `next`, a value of such a flag after a space
// ("--qk-norm false": CLI11 would say "not expected: false"), "" otherwise.
inline std::string on_off_value_error(const CLI::App& app, const std::string& flag, const std::string& next) {
    const CLI::Option* opt = app.get_option_no_throw(flag);
    if (opt == nullptr || opt == app.get_help_ptr() || opt->get_expected_min() != 0 || opt->get_lnames().empty() ||
        on_off_text(next) < 0)
        return "";
    const std::string name = "--" + opt->get_lnames().front();
    return flag + " " + next + ": an on/off flag takes its value after '=' (" + name + "=" + next + "); " + flag +
           " alone is on";
}

// The error line for arguments CLI11 did not expect (its ExtrasError `what`, after `app` parsed): the
// first unknown flag by name, with its "did you mean" among `app`'s long names (did_you_mean) or the pointer
// to --help, and any other unknown flags after it: "unknown flag --min_lr; did you mean
// --final-lr-frac? (...)". CLI11's own line ("not expected: 6e-5 --min_lr") lists the flag's value
// before it. Without an unknown flag (only stray values), CLI11's line. `trainer`: nanoGPT's training
// settings without a flag here get the trainer's note on them (did_you_mean's no_flag_notes).
inline std::string unknown_flag_error(const CLI::App& app, const std::string& what, bool trainer = true) {
    std::vector<std::string> flag_names;
    for (const CLI::Option* opt : app.get_options())
        for (const std::string& n : opt->get_lnames()) flag_names.push_back(n);
    std::vector<std::string> unknown;  // as typed, without "=value"
    for (const std::string& arg : app.remaining())
        if (looks_like_option(arg)) unknown.push_back(arg.substr(0, arg.find('=')));
    if (unknown.empty()) return what + "; run with --help for the flags";
    const std::string hint = did_you_mean(unknown[0], flag_names, trainer);
    std::string line = "unknown flag " + unknown[0] + (hint.empty() ? "; run with --help for the flags" : hint);
    for (size_t i = 1; i < unknown.size(); i++) line += (i == 1 ? " (also unknown: " : ", ") + unknown[i];
    return line + (unknown.size() > 1 ? ")" : "");
}

// The error for a --config path that is a directory or does not exist ("" when it is a file or empty).
inline std::string config_path_error(const std::string& path) {
    std::error_code ec;
    if (path.empty() || std::filesystem::is_regular_file(path, ec)) return "";
    if (std::filesystem::is_directory(path, ec))
        return "--config " + path + " is a directory; give a file: " + path + "/config.json (a run's record) or " +
               path + "/config.toml";
    return "--config " + path + ": no such file; check the path";
}

// The first mistake in argv (before "--") of the kinds above but --config's, "" when there is none.
inline std::string argv_mistake(const CLI::App& app, int argc, const char* const* argv) {
    std::string value_of, value;  // the option whose value argv[i - 1] was, and that value
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--") break;
        if (!looks_like_option(a)) {  // an argument no option takes: the first of a run of them
            std::vector<std::string> strays;
            while (i < argc && !looks_like_option(argv[i])) strays.push_back(argv[i++]);
            const std::string e = stray_arguments_error(value_of, value, strays);
            if (!e.empty()) return e;
            i--;
            value_of.clear();
            continue;
        }
        value_of.clear();
        if (a == "-h" && i + 1 < argc && !looks_like_option(argv[i + 1]))
            return "-h is --help here; llm.c's -h " + std::string(argv[i + 1]) +
                   " (HellaSwag evaluation) has no counterpart in this trainer (it reports the validation loss "
                   "of -j); drop -h " +
                   argv[i + 1];
        const std::string e = multi_letter_error(app, a);
        if (!e.empty()) return e;
        const std::string eq = short_flag_equals_error(app, a);
        if (!eq.empty()) return eq;
        for (const LlmcFlag& f : one_letter_llmc_flags())
            if (a == f.llmc && app.get_option_no_throw(a) == nullptr)
                return a + " is llm.c's flag (" + f.here +
                       "), which this trainer has no counterpart of; drop it (llm.c's flags and ours: "
                       "docs/from_llmc.md)";
        if (a.find('=') != std::string::npos || (a[1] != '-' && a.size() > 2)) continue;  // value attached
        if (i + 1 < argc) {
            const std::string on_off = on_off_value_error(app, a, argv[i + 1]);
            if (!on_off.empty()) return on_off;
        }
        const CLI::Option* opt = app.get_option_no_throw(a);
        if (opt != nullptr && opt->get_expected_min() > 0 && i + 1 < argc) {
            value_of = a;
            value = argv[++i];
        }
    }
    return "";
}

}  // namespace llmc
