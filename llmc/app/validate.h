// The checks of a run's settings, in the order the trainer makes them: -y's range, the rules between
// flags (check_flag_combinations), each flag's own range (from the table, llmc/app/flags.h), then, once
// the model is known, validate_run. Each refusal is an InputError naming the flag and the fix.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "llmc/app/flags.h"
#include "llmc/app/output_intent.h"
#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/io/attention_dump.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/json_text.h"
#include "llmc/train/schedule.h"
#include "llmc/train/step_graph_choice.h"

namespace llmc {

// A flag's names as messages write them: "-b,--batch-size" -> "-b/--batch-size".
inline std::string flag_names_text(std::string names) {
    for (char& ch : names)
        if (ch == ',') ch = '/';
    return names;
}

// Refuses `value` when ok(value) is false: "<names><origin> <rule>", each "{}" of rule replaced by the
// value; origin: where a value not typed came from (TrainConfig::origin_of: " (from --config F)").
template <class T, class Ok>
void check_setting(const T& value, const char* names, const char* rule, Ok ok, const std::string& origin = "") {
    if (ok(value)) return;
    std::string msg = flag_names_text(names) + origin + " " + rule;
    std::string text;  // an integer as an integer (1000000, not 1e+06), a float with %g, a text as given
    if constexpr (std::is_integral<T>::value) {
        text = std::to_string(value);
    } else if constexpr (std::is_floating_point<T>::value) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", (double)value);
        text = buf;
    } else if constexpr (std::is_same<T, std::string>::value) {
        text = value;
    }
    for (size_t at = msg.find("{}"); at != std::string::npos; at = msg.find("{}", at + text.size()))
        msg.replace(at, 2, text);
    throw InputError(msg);
}
template <class T, class Ok>
void check_setting(const std::optional<T>& value, const char* names, const char* rule, Ok ok,
                   const std::string& origin = "") {
    if (value) check_setting(*value, names, rule, ok, origin);
}

// TrainConfig::origin_of the flag of a table row's names ("-b,--batch-size"): "" when typed or default.
inline std::string origin_of_names(const TrainConfig& c, const char* names) {
    const std::string n(names);
    const size_t at = n.rfind("--");
    return at == std::string::npos ? "" : c.origin_of(n.substr(at + 2));
}

// Every flag's own range, in table order (only the field `only_field` when given).
inline void check_flag_ranges(const TrainConfig& c, const char* only_field = nullptr) {
#define LLMC_CHECK_SETTING(record, type, field, def, names, ok, rule, help) \
    if (only_field == nullptr || std::strcmp(only_field, #field) == 0)      \
        check_setting(                                                      \
            c.field, names, rule,                                           \
            [](const auto& v) {                                             \
                (void)v;                                                    \
                return ok;                                                  \
            },                                                              \
            origin_of_names(c, names));
    LLMC_TRAIN_FLAGS(LLMC_CHECK_SETTING, LLMC_NO_MODEL)
#undef LLMC_CHECK_SETTING
}

// Checks that need only the flags (check_flag_combinations calls it): --eval-only, -o, the spec's
// syntax.
inline void check_dump_attention_flags(const TrainConfig& c) {
    if (c.dump_attention.empty()) return;
    if (!c.eval_only)
        throw InputError("--dump-attention works with --eval-only only; add --eval-only -e CHECKPOINT -j VAL_GLOB");
    if (c.output_dir.empty())
        throw InputError("--dump-attention writes attn_L<layer>_H<head>.npy into the output directory; give -o DIR");
    parse_dump_attention(c.dump_attention);
}

// The paths a run's config.json (and eval.json) records and its readers open again: each must be UTF-8,
// as JSON is; a byte that is not (a Latin-1 directory name) would be recorded as U+FFFD, a path that no
// longer names the file (-y 1, generate and eval of the run could not find its data). Refused first;
// without -o nothing is recorded and any path the system takes is fine.
inline void check_recorded_paths_utf8(const TrainConfig& c) {
    if (c.output_dir.empty()) return;
    const std::pair<const char*, const std::string*> paths[] = {{"-i", &c.train_data},
                                                                {"-j", &c.val_data},
                                                                {"-o", &c.output_dir},
                                                                {"-e", &c.model},
                                                                {"--fork-from", &c.fork_from}};
    for (const auto& [flag, value] : paths) {
        const size_t at = first_invalid_utf8(*value);
        if (at == std::string::npos) continue;
        char byte[8];
        std::snprintf(byte, sizeof byte, "0x%02x", (unsigned)(unsigned char)(*value)[at]);
        throw InputError(std::string(flag) + " '" + escaped_bytes(*value) + "' is not valid UTF-8 (byte " + byte +
                         " at offset " + std::to_string(at) +
                         "): config.json records paths as UTF-8 text, so the run could not find it again; rename it "
                         "to a UTF-8 name (e.g. ASCII)");
    }
}

// -e PRESET typed beside a --config file (a TOML file or a run's config.json) whose model is another one
// and that sets the model's shape (--layers, --channels, --heads, --max-seq-len) to other values than
// the preset's: the file's values would override the typed preset (the flags the command line does not
// give come from the file), so the run would train another model than the one named. Refused, naming
// each value; a value equal to the preset's is no conflict, nor is a typed -e that is the file's own
// model, nor a run continued (-y 1, --fork-from), whose model the checkpoint gives (checked there).
inline void check_typed_preset_against_config_file(const TrainConfig& c) {
    const auto from_file = [&](const char* flag) {
        for (const std::string& f : c.from_config)
            if (f == flag) return true;
        return false;
    };
    if (c.config_file.empty() || !c.was_given("model") || from_file("model") || !is_model_preset(c.model) ||
        c.config_model == c.model || c.resume == 1 || !c.fork_from.empty())
        return;
    const ModelConfig p = model_preset(c.model);
    const std::pair<const char*, std::pair<std::optional<int>, int>> shape[] = {
        {"layers", {c.overrides.layers, p.num_layers}},
        {"channels", {c.overrides.channels, p.channels}},
        {"heads", {c.overrides.heads, p.num_heads}},
        {"max-seq-len", {c.overrides.max_seq_len, p.max_seq_len}}};
    std::string file_values, preset_values;
    for (const auto& [flag, v] : shape)
        if (from_file(flag) && v.first && *v.first != v.second) {
            file_values += (file_values.empty() ? "--" : ", --") + std::string(flag) + " " + std::to_string(*v.first);
            preset_values += (preset_values.empty() ? "" : ", ") + std::to_string(v.second);
        }
    if (!file_values.empty())
        throw InputError("-e " + c.model + " on the command line, but --config " + c.config_file + " sets " +
                         file_values + ", which would override that preset's (" + preset_values +
                         ") and train another model: give those flags on the command line too, or drop -e");
}

// --eval-only with a run's flags (-y 1, --fork-from, a TOML's -o): checked before anything of -e is read,
// since each would take or write another run's settings whatever -e is.
inline void check_eval_only_continues_no_run(const TrainConfig& c) {
    if (!c.eval_only) return;
    if (!c.output_dir.empty() && !c.origin_of("output-dir").empty())  // a TOML's output-dir
        throw InputError("--eval-only: -o " + c.output_dir + c.origin_of("output-dir") +
                         " would write eval.json into the directory that file names (a run's); give -o on the "
                         "command line for eval.json, or none");
    if (c.resume == 1 || !c.fork_from.empty()) {  // a run's settings would replace -e's
        const bool resume = c.resume == 1;
        throw InputError(std::string("--eval-only evaluates -e and continues no run, but ") +
                         (resume ? "-y 1" + c.origin_of("resume") : "--fork-from" + c.origin_of("fork-from")) +
                         " would take another run's settings and data: drop it; to evaluate a run's checkpoint, "
                         "give it as -e (e.g. -e RUN/model_00000100.bin)");
    }
}

// Where the flags a rule names got their values, when not typed, one group per origin
// (TrainConfig::origin_of): " (-z, --qk-clip: from --config F)"; "" when each was typed or is the
// default. names: a flag table row's ("-y,--resume"), shown by its first name; a flag no file sets
// (--fork-from, --profile-steps, the machine's) is not listed.
inline std::string origins_of_flags(const TrainConfig& c, const std::vector<const char*>& names) {
    std::vector<std::pair<std::string, std::string>> groups;  // (origin, "-a, --b")
    for (const char* row : names) {
        const std::string origin = origin_of_names(c, row);
        if (origin.empty()) continue;
        const std::string shown = std::string(row).substr(0, std::string(row).find(','));
        auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == origin; });
        if (g == groups.end()) groups.emplace_back(origin, shown);
        else g->second += ", " + shown;
    }
    std::string out;
    for (const auto& [origin, shown] : groups)  // origin: " (from ...)"
        out += " (" + shown + ": " + origin.substr(2);
    return out;
}

// The rules between flags, checked first (so a rule holds whatever the range of a flag it reads).
inline void check_flag_combinations(const TrainConfig& c) {
    auto fail = [&c](const std::string& msg, const std::vector<const char*>& flags = {}) {
        throw InputError(msg + origins_of_flags(c, flags));
    };
    if (!c.fork_from.empty() && c.resume == 1)
        fail("--fork-from starts a new run in -o and -y 1 continues -o's own; drop one of them", {"-y,--resume"});
    check_eval_only_continues_no_run(c);
    if (!c.fork_from.empty() && c.output_dir.empty())
        fail("--fork-from needs -o DIR, a new directory for the forked run");
    check_dump_attention_flags(c);  // --dump-attention: --eval-only, -o, its syntax
    check_recorded_paths_utf8(c);
    check_typed_preset_against_config_file(c);
    if (c.eval_only) {
        if (c.val_data.empty()) fail("--eval-only needs -j VAL_GLOB, the shards to evaluate on", {"--eval-only"});
        if (c.profile_steps > 0)
            fail("--profile-steps profiles training steps; drop it with --eval-only", {"--eval-only"});
        if (c.was_given("train-data") && c.origin_of("train-data").empty())  // typed, not a file's
            fail(
                "--eval-only evaluates -j and reads no -i: to evaluate on training shards, give them as -j "
                "(and drop -i)");
    } else {
        if (c.train_data.empty() && c.resume == 1 && !c.output_dir.empty() &&
            !file_exists(join_path(c.output_dir, "config.json"))) {  // -y 1 of a mistyped -o
            const std::string near = nearest_run_dir(c.output_dir);
            throw InputError("-y 1: " + c.output_dir + " holds no run to resume (no config.json); " +
                             (near.empty() ? "give the -o of a run, or start a new run there with"
                                           : "did you mean -o " + near + "? (to start a new run there:") +
                             " -i 'DIR/train_*.bin' without -y 1" + (near.empty() ? "" : ")"));
        }
        if (c.train_data.empty() && c.resume == 0 && !c.output_dir.empty() &&
            file_exists(join_path(c.output_dir, "config.json")))  // a run there: -y 1 forgotten, likely
            fail("no training data: " + c.output_dir + " holds a run (config.json); continue it with -y 1, which " +
                 "takes its -i, or give -i 'DIR/train_*.bin' and another -o for a new run");
        if (c.train_data.empty())
            fail("no training data: give -i 'DIR/train_*.bin' (make shards with data/prepare.py)");
        if (!c.dump_logits.empty())
            fail("--dump-logits works with --eval-only only; add --eval-only", {"--dump-logits"});
    }
    if (c.profile_steps > 0 && c.pdl == "1")
        fail(
            "--profile-steps times each kernel alone, and --pdl 1 lets a kernel start before the one ahead of it "
            "ends (its span would include that wait): profile with --pdl 0 or auto");
    if (c.resume == 1 && c.output_dir.empty())
        fail("-y 1 resumes from the checkpoints in -o; give -o DIR", {"-y,--resume"});
    if (c.checkpoint_every > 0 && c.output_dir.empty() && !c.eval_only)  // (an evaluation writes no checkpoint)
        throw InputError("-n " + std::to_string(c.checkpoint_every) + c.origin_of("checkpoint-every") +
                         " needs -o DIR to write checkpoints into");
    if (c.cuda_graph == "1" && !c.eval_only && host_decides_inside_the_step(c))
        fail(
            "--cuda-graph 1 replays the queued step, which needs one process, -z 0, and no --skip-spikes or "
            "--qk-clip (each decides on the host inside the step); drop --cuda-graph 1 or those flags",
            {c.zero_stage == 1 ? "-z,--zero-stage" : "", c.skip_spikes > 0 ? "--skip-spikes" : "",
             c.qk_clip > 0 ? "--qk-clip" : ""});  // those set, not those at their defaults
}

// The flags, without the model.
inline void validate_train_flags(const TrainConfig& c) {
    check_flag_ranges(c, "resume");  // -y decides where the settings come from: its range before any rule
    // a text flag's word is read without a check; named before the rules, as an integer flag's is
    check_flag_ranges(c, "cuda_graph");
    check_flag_combinations(c);
    check_flag_ranges(c);
}

// The checkpoint whose model the run takes, whose size (its --max-seq-len too) no flag can change, as
// messages name it; "" for a preset (model flags size it).
inline std::string checkpoint_of_model(const TrainConfig& c) {
    if (!c.fork_from.empty()) return "the checkpoint of --fork-from " + c.fork_from;
    if (c.resume == 1 && newest_complete_step(c.output_dir) >= 0) return "the checkpoint in -o " + c.output_dir;
    if (!is_model_preset(c.model)) return "the checkpoint -e " + c.model;
    return "";
}

// Checks that need the model: sequence length, batch divisibility, vocabulary vs the data.
// Returns the gradient-accumulation steps.
inline int validate_run(const TrainConfig& c, const ModelConfig& m, int data_vocab, const std::string& vocab_source) {
    if (c.seq_len > m.max_seq_len) {
        const std::string checkpoint = checkpoint_of_model(c), maxT = std::to_string(m.max_seq_len);
        throw InputError("-t " + std::to_string(c.seq_len) + " exceeds the model's --max-seq-len " + maxT +
                         (checkpoint.empty() ? "; use -t <= " + maxT + " or a larger --max-seq-len"
                                             : ", which " + checkpoint + " fixes; use -t <= " + maxT));
    }
    if (data_vocab > m.vocab_size) {  // the fix names what fixes V: a checkpoint, a typed --vocab, or neither
        const std::string checkpoint = checkpoint_of_model(c), V = std::to_string(m.vocab_size),
                          D = std::to_string(data_vocab);
        const std::string head =
            "the model's vocabulary " + V + " is smaller than the data's " + D + " (from " + vocab_source + ")";
        if (!checkpoint.empty())
            throw InputError(head + ", and " + checkpoint + " fixes it; give data of that model's tokenizer (ids < " +
                             V + ")");
        throw InputError(head + "; use --vocab >= " + D + (c.overrides.vocab ? " or drop --vocab" : ""));
    }
    if (c.qk_clip > 0 && m.qk_norm && !c.eval_only)  // an evaluation notes that --qk-clip has no effect
        throw InputError(
            "--qk-clip with --qk-norm: QK-norm normalizes q and k, so scaling their projections changes "
            "no logit; use one of the two");
    const long per_micro = (long)c.batch_size * c.seq_len * c.world_size;
    if (c.total_batch_size == -1) return 1;
    if (c.total_batch_size % per_micro != 0)
        throw InputError("-d " + std::to_string(c.total_batch_size) + " is not a multiple of B*T*processes = " +
                         std::to_string(c.batch_size) + "*" + std::to_string(c.seq_len) + "*" +
                         std::to_string(c.world_size) + " = " + std::to_string(per_micro) + "; use -d " +
                         std::to_string(per_micro) + " times the gradient-accumulation steps");
    return (int)(c.total_batch_size / per_micro);
}

// --vocab V (typed, from a --config file or a run's record) above the data's vocabulary D in a run whose
// model no checkpoint fixes: the rows of ids D..V-1 (embedding, LM head) belong to no token of the data,
// so they are never trained, and samples never draw them. Legitimate (nanoGPT pads 50257 to 50304), but
// the model pads V to a multiple of 128 by itself, and a --vocab carried over from another data set runs
// a larger model than the data needs: one note naming the fix ("" otherwise; a checkpoint's V against the
// data is lone_checkpoint_vocab_note's, a smaller V validate_run's refusal).
inline std::string larger_vocab_note(const TrainConfig& c, const ModelConfig& m, int data_vocab,
                                     const std::string& vocab_source) {
    if (!c.overrides.vocab || data_vocab <= 0 || m.vocab_size <= data_vocab || !checkpoint_of_model(c).empty())
        return "";
    const std::string V = std::to_string(m.vocab_size), D = std::to_string(data_vocab);
    return "note: --vocab " + V + c.origin_of("vocab") + " is larger than the data's vocabulary " + D + " (from " +
           vocab_source + "): the model's " + std::to_string(m.vocab_size - data_vocab) + " extra rows (ids " + D +
           ".." + std::to_string(m.vocab_size - 1) +
           ") are never trained; leave --vocab out to use the data's (the model pads it to a multiple of 128 "
           "itself)";
}

}  // namespace llmc
