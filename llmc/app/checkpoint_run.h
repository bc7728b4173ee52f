// The run a checkpoint belongs to: the config.json the trainer wrote next to it (llmc/app/config_json.h,
// docs/formats.md), read for what `train_gpt2_ls --eval-only -e RUN/model_N.bin` and
// `generate_gpt2_ls -e RUN/model_N.bin` were not given (docs/training.md "Evaluating a checkpoint",
// docs/generation.md), and checked against the data identity the run recorded (llmc/app/run_data.h):
//   --eval-only      -j (the run's validation data), -t and -b (the run's), when not given (on the
//                    command line or by --config); -j, given or taken, must be tokenized as the run's
//                    training data was (for a run recorded without an identity: as its training data is)
//   generate_gpt2_ls --tokenizer: the tokenizer.bin next to the run's training data when not given;
//                    given or taken, it must be the one the run trained with
// Flags given always win; the model itself always comes from the checkpoint. What is taken is said in
// one line on stderr. A checkpoint without config.json beside it (an llm.c file, a copied model) gets
// nothing from here.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/config_json.h"
#include "llmc/app/config_origin.h"
#include "llmc/app/generate_cli.h"
#include "llmc/app/run_data.h"
#include "llmc/app/run_history.h"
#include "llmc/app/run_record.h"
#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/io/data_identity.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/io/dataloader.h"
#include "llmc/text/tokenizer.h"

namespace llmc {

// What a run recorded in config.json's "train" object, with the changes of its "history" that trained
// the checkpoint applied, that a later use of its checkpoints needs.
struct CheckpointRun {
    std::string config_path;  // RUN/config.json
    std::string train_data;   // -i as recorded ("" when absent)
    std::string val_data;     // -j as recorded ("" when the run had none)
    int seq_len = 0;          // -t (0 when absent)
    int batch_size = 0;       // -b (0 when absent)
    int val_batches = 0;      // -m (global batches: B x T x world_size tokens each)
    int world_size = 1;       // the processes the run trained on
    RecordedData data;        // the data identity the run recorded
};

// A checkpoint whose config.json is a Hugging Face config (an object with "model_type" or "architectures"
// and no "train"): a folder scripts/export_hf.py wrote, not a run. Refused, naming what it is.
inline void check_not_hf_folder(const std::string& checkpoint, const std::string& config_path) {
    std::ifstream in(config_path, std::ios::binary);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object() || j.contains("train") || !(j.contains("model_type") || j.contains("architectures"))) return;
    throw InputError("-e " + checkpoint + " is in a Hugging Face folder exported by scripts/export_hf.py (" +
                     config_path + " is its config, not a run record); give the train_gpt2_ls checkpoint it was " +
                     "exported from (RUN/model_NNNNNNNN.bin), or load the folder with transformers");
}

// The config.json in the checkpoint's directory (read through llmc/app/run_record.h, the one reader),
// with the history entries before the checkpoint's step applied (all of them when its name has no
// step); nullopt when there is none. A file that cannot be read as a run's record, or that records a
// value its flag refuses, is refused, naming it.
inline std::optional<CheckpointRun> read_checkpoint_run(const std::string& checkpoint) {
    const std::filesystem::path dir = std::filesystem::path(checkpoint).parent_path();
    CheckpointRun run;
    run.config_path = ((dir.empty() ? std::filesystem::path(".") : dir) / "config.json").string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(run.config_path, ec)) return std::nullopt;
    const std::string fix = "give the settings as flags, or restore the record of the run of " + checkpoint;
    int step = 0;
    const bool named =
        parse_checkpoint_name(std::filesystem::path(checkpoint).filename().string(), step) == CkptFileKind::Model;
    check_not_hf_folder(checkpoint, run.config_path);
    const nlohmann::ordered_json record = read_run_record(run.config_path, fix);
    const TrainConfig t =
        recorded_settings(effective_train(record, run.config_path, named ? step - 1 : INT_MAX), run.config_path);
    run.data = recorded_data(record, run.config_path);
    run.train_data = t.train_data;
    run.val_data = t.val_data;
    run.seq_len = t.was_given("seq-len") ? t.seq_len : 0;
    run.batch_size = t.was_given("batch-size") ? t.batch_size : 0;
    run.val_batches = t.val_batches;
    run.world_size = t.world_size;
    return run;
}

// The fields in which a run record's "model" differs from m: "field M's vs the record's, ..." as
// "window 20 vs 50"; "" when none does. A record without "model", or without one of its fields (an
// earlier version's), is not compared there; numbers compare as float32 (earlier versions wrote
// attn_softcap widened from float, 0.30000001192092896 for 0.3); the padded vocabulary follows V.
// (record_model_differences: each differing field's model_config_json key, and its text "window 20 vs 50")
struct RecordModelDifference {
    std::string key, text;
};
inline std::vector<RecordModelDifference> record_model_differences(const nlohmann::ordered_json& record,
                                                                   const ModelConfig& m) {
    std::vector<RecordModelDifference> out;
    const auto rec = record.find("model");
    if (rec == record.end() || !rec->is_object()) return out;
    const nlohmann::ordered_json ours = model_config_json(m);  // named: items() refers to it
    for (const auto& field : ours.items()) {
        const auto there = rec->find(field.key());
        if (field.key() == "padded_vocab_size" || there == rec->end()) continue;
        const bool same = there->is_number() && field.value().is_number()
                              ? (float)there->get<double>() == (float)field.value().get<double>()
                              : *there == field.value();
        if (!same) out.push_back({field.key(), field.key() + " " + field.value().dump() + " vs " + there->dump()});
    }
    return out;
}
inline std::string record_model_difference(const nlohmann::ordered_json& record, const ModelConfig& m) {
    std::string diff;
    for (const RecordModelDifference& d : record_model_differences(record, m))
        diff += (diff.empty() ? "" : ", ") + d.text;
    return diff;
}

// The long flag (without "--") that sets config.json "model" key `key` (model_config_json's names).
inline std::string model_key_flag(const std::string& key) {
    if (key == "vocab_size") return "vocab";
    if (key == "num_layers") return "layers";
    if (key == "num_heads") return "heads";
    if (key == "tied_embeddings") return "untie-embeddings";
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    return flag;
}

// -y 1 of a run without a complete checkpoint starts it again from step 0 with its recorded settings; a
// model flag given over the record's model is refused, as a resume from a checkpoint refuses it (the
// run's record and its logs are of the recorded model). out: the run's -o. A flag the --config file set
// (set_by_config), not typed, is named with the file, and the fix is the file's.
inline void check_restart_keeps_model(const std::string& out, const ModelConfig& m, const TrainConfig& cfg) {
    const std::string path = out + "/config.json";
    if (!file_exists(path)) return;
    const std::vector<RecordModelDifference> diffs =
        record_model_differences(read_run_record(path, "restore the file, or start a new run in another -o"), m);
    if (diffs.empty()) return;
    std::string diff, from_file;
    bool typed = false;
    for (const RecordModelDifference& d : diffs) {
        diff += (diff.empty() ? "" : ", ") + d.text;
        const std::string flag = model_key_flag(d.key);
        if (set_by_config(cfg, flag)) from_file += (from_file.empty() ? "--" : ", --") + flag;
        else typed = true;
    }
    const std::string head = "-y 1: " + out + " has no complete checkpoint yet, and the model flags ";
    const std::string tail =
        " make another model than " + path + " records (" + diff + "): -y 1 continues the run's model; ";
    if (!typed)
        throw InputError(head + "of --config " + cfg.config_file + " (" + from_file + ")" + tail +
                         "drop --config, or train that model in another -o");
    throw InputError(head + "given" + tail + "drop those flags" +
                     (from_file.empty() ? "" : " (" + from_file + " from --config " + cfg.config_file + ")") +
                     ", or train that model in another -o");
}

// A checkpoint read with the config.json beside it (--eval-only -e, generate_gpt2_ls -e, a new run's
// -e FILE) whose "model" records another model than the checkpoint's header: the two files are of
// different runs (a model file copied into another run's directory), and the record's data and tokenizer
// would be taken for a model they did not train. Refused, naming the fields that differ, before anything
// is taken from the record. A record without "model", or without one of its fields (an earlier
// version's), is not compared there; numbers compare as float32 (earlier versions wrote attn_softcap
// widened from float, 0.30000001192092896 for 0.3).
inline void check_run_records_checkpoint_model(const std::string& checkpoint, const std::string& config_path) {
    const std::optional<ModelConfig> m = peek_model_config(checkpoint);
    if (!m) return;  // unreadable or not a model file: the load says why
    const nlohmann::ordered_json record =
        read_run_record(config_path, "give the settings as flags, or restore the record of the run of " + checkpoint);
    const std::string diff = record_model_difference(record, *m);
    if (diff.empty()) return;
    throw InputError(checkpoint + " is another model than " + config_path + " beside it records (" + diff +
                     "): the two files are of different runs, and that record's data and tokenizer are not the "
                     "model's; keep a checkpoint beside its own run's config.json, or copy it alone into a "
                     "directory of its own");
}

// --eval-only -m N of a run's checkpoint, N the run's -m: -m counts global batches (B x T x processes
// tokens), so on another process count (or -b) the same N reads other tokens than the run's validation
// losses were of. The note says so and names the -m that reads them ("" when the tokens agree).
inline std::string eval_val_batches_note(const TrainConfig& cfg, const CheckpointRun& run) {
    if (!cfg.was_given("val-batches") || cfg.val_batches <= 0 || cfg.val_batches != run.val_batches ||
        run.batch_size <= 0 || cfg.seq_len != run.seq_len || cfg.val_data != run.val_data)
        return "";
    const int64_t here = (int64_t)cfg.batch_size * cfg.seq_len * cfg.world_size;
    const int64_t tokens = (int64_t)run.val_batches * run.batch_size * run.seq_len * run.world_size;
    if (here <= 0 || tokens == cfg.val_batches * here) return "";
    return "note: --eval-only -m " + std::to_string(cfg.val_batches) + " validates " +
           std::to_string(cfg.val_batches * here) + " tokens here (B " + std::to_string(cfg.batch_size) + " x T " +
           std::to_string(cfg.seq_len) + " x " + std::to_string(cfg.world_size) +
           " process(es) per batch), but the run of " + cfg.model + " validated " + std::to_string(tokens) +
           " with -m " + std::to_string(run.val_batches) + " on " + std::to_string(run.world_size) + " process(es) (" +
           run.config_path + "); " +
           (tokens % here == 0
                ? "give -m " + std::to_string(tokens / here) + " to evaluate the tokens of its validation losses"
                : "no -m reads those tokens with -b " + std::to_string(cfg.batch_size) +
                      " here (-m counts batches of B x T x processes)");
}

// Whether --eval-only takes anything from the record beside its checkpoint (-j, -t, -b): not when all
// three are given.
inline bool eval_takes_from_record(const TrainConfig& cfg) {
    return cfg.val_data.empty() || !cfg.was_given("val-data") || !cfg.was_given("seq-len") ||
           !cfg.was_given("batch-size");
}

// --eval-only: fills -j, -t and -b from the checkpoint's run when they were not given (-j empty; -t, -b
// not given by a flag or --config: TrainConfig::was_given) and returns the line that says what it took
// ("" for nothing; run_eval prints it once the evaluation succeeded, so a failing command prints only its
// error), and refuses a -j tokenized differently from the run's training data: as the run recorded it,
// or, when the record holds no identity (a run from before "data", with a note saying so, or one whose
// data had neither meta.json nor tokenizer.bin), as its training data is now (check_same_tokenizer,
// which notes a data set it cannot check, as training does). A record edited after the checkpoint was
// written no longer says what trained it and is refused (check_record_of_checkpoint). print: whether to
// print those notes.
inline std::string eval_settings_from_run(TrainConfig& cfg, bool print) {
    const std::optional<CheckpointRun> run = read_checkpoint_run(cfg.model);
    if (!run) return "";
    int step = 0;
    const std::filesystem::path ckpt(cfg.model);
    // the record matters here only for what --eval-only takes from it (-j, -t, -b): with all three given,
    // an edit of the record cannot change the evaluation and is not checked
    if (eval_takes_from_record(cfg) && parse_checkpoint_name(ckpt.filename().string(), step) == CkptFileKind::Model)
        check_record_of_checkpoint(read_run_record(run->config_path), run->config_path,
                                   ckpt.has_parent_path() ? ckpt.parent_path().string() : ".", step,
                                   "restore it (--eval-only takes -j, -t and -b from it)");
    // (after that check: a record edited since its checkpoint is named as such first)
    if (eval_takes_from_record(cfg)) check_run_records_checkpoint_model(cfg.model, run->config_path);
    std::vector<std::string> taken;
    const bool given = !cfg.val_data.empty();
    if (!given && cfg.was_given("val-data") && !run->val_data.empty())  // -j '' typed: not "take the run's"
        throw InputError(
            "--eval-only with -j '' names no shards to evaluate on; give -j 'DIR/val_*.bin', or drop -j "
            "to evaluate on the run's -j '" +
            run->val_data + "' (" + run->config_path + ")");
    if (!given && !run->val_data.empty()) {
        cfg.val_data = run->val_data;
        taken.push_back("-j '" + cfg.val_data + "'");
    }
    if (!cfg.val_data.empty() && run->data.identity_known()) {
        check_data_against_record(run->data, cfg.val_data, "-j '" + cfg.val_data + "'",
                                  given ? "give -j data prepared with the run's tokenizer (data/prepare.py)"
                                        : "the data was prepared again after the run: prepare it with the run's "
                                          "tokenizer (data/prepare.py), or give -j data prepared with it");
        const std::string note = unknown_data_now_note(run->data, cfg.val_data, "-j '" + cfg.val_data + "'");
        if (print && !note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
    } else if (given && !run->train_data.empty()) {
        check_same_tokenizer(run->train_data, "the training data of " + run->config_path + " '" + run->train_data + "'",
                             cfg.val_data, "-j '" + cfg.val_data + "'", print);
    }
    if (!run->data.known() && print) std::fprintf(stderr, "%s\n", unknown_data_note(run->data).c_str());
    if (run->seq_len > 0 && !cfg.was_given("seq-len")) {
        cfg.seq_len = run->seq_len;
        taken.push_back("-t " + std::to_string(cfg.seq_len));
    }
    if (run->batch_size > 0 && !cfg.was_given("batch-size")) {
        cfg.batch_size = run->batch_size;
        taken.push_back("-b " + std::to_string(cfg.batch_size));
    }
    if (print) {
        const std::string note = eval_val_batches_note(cfg, *run);
        if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
    }
    if (taken.empty()) return "";
    std::string list;
    for (const std::string& s : taken) list += (list.empty() ? "" : ", ") + s;
    return "note: --eval-only: " + list + " from " + run->config_path + " (flags given win)";
}

// -e of --eval-only and generate_gpt2_ls, checked before anything is read. A run directory (a run's -o) is
// refused, naming its newest complete checkpoint ("did you mean"); a missing model file RUN/model_NNNNNNNN.bin
// (a step --keep-checkpoints pruned, a typo) is refused, listing the complete checkpoints RUN holds. head: the
// error's start, naming the program and -e. Returns whether model is a regular file (else the caller says so).
inline bool check_model_file(const std::string& model, const std::string& head) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(model, ec)) return true;
    if (std::filesystem::is_directory(model, ec)) {
        const int newest = newest_complete_step(model);
        if (newest >= 0)
            throw InputError(head + "is a run directory: did you mean -e " + model_path(model, newest) +
                             "? (its newest complete checkpoint)");
        throw InputError(head + "is a directory without a complete checkpoint; give RUN/model_NNNNNNNN.bin");
    }
    const std::filesystem::path path(model);
    const std::string dir = path.has_parent_path() ? path.parent_path().string() : ".";
    int step = 0;
    if (parse_checkpoint_name(path.filename().string(), step) != CkptFileKind::Model) return false;
    const std::string held = complete_steps_text(dir, "-e");
    if (held.empty()) return false;
    throw InputError(head + "does not exist; " + held);
}

// A model file named by its step (RUN/model_NNNNNNNN.bin) whose step a resume retired (DAMAGED_NNNNNNNN
// beside it: -y 1 found the step's checkpoint damaged on some process and went on from an earlier one,
// llmc/io/checkpoint_dir.h retire_checkpoints): the note that it is of the trajectory the run left, read
// as asked by --eval-only, generate_gpt2_ls and a new run's -e ("" otherwise).
inline std::string retired_checkpoint_note(const std::string& checkpoint) {
    const std::filesystem::path path(checkpoint);
    int step = 0;
    if (parse_checkpoint_name(path.filename().string(), step) != CkptFileKind::Model) return "";
    const std::string dir = path.has_parent_path() ? path.parent_path().string() : ".";
    const std::string marker = damaged_marker_path(dir, step);
    if (!file_exists(marker)) return "";
    const int newest = newest_complete_step(dir);
    return "note: " + marker + " says a resume (-y 1) found step " + std::to_string(step) +
           " damaged and went on from an earlier step: " + checkpoint + " is of the trajectory that run left" +
           (newest >= 0 ? " (its newest complete checkpoint: " + model_path(dir, newest) + ")" : "");
}

// --eval-only (flag "-j") or a new run (flag "-i") from a checkpoint with no run beside it (nothing to
// compare the data with: a copied model file, llm.c's gpt2_124M.bin): the note when the data's known
// vocabulary differs from the model's ("" otherwise). A smaller data vocabulary is accepted (a model may
// be trained with a --vocab above its data's), but it usually means another tokenizer.
inline std::string lone_checkpoint_vocab_note(const std::string& checkpoint, const ModelConfig& model, int data_vocab,
                                              const std::string& vocab_source, const std::string& flag,
                                              const std::string& data) {
    if (data_vocab <= 0 || data_vocab == model.vocab_size || read_checkpoint_run(checkpoint)) return "";
    return "note: " + flag + " '" + data + "' has vocabulary " + std::to_string(data_vocab) + " (" + vocab_source +
           ") and the model " + std::to_string(model.vocab_size) + ", and " + checkpoint +
           " has no config.json beside it naming its training data: check that " + flag + " was tokenized like it";
}

// An llm.c GPT-2 checkpoint (gpt2_124M.bin and llm.c's model_*.bin: from_llmc, GPT-2's vocabulary 50257)
// reads token ids as GPT-2 BPE's; data or a tokenizer whose meta.json names another tokenizer (sp,
// synthetic) would give it other tokens under those ids: the run would train, score or generate with
// another model than the one asked for, where a note is easily missed. Refused, for -i and -j and
// generate_gpt2_ls's --tokenizer; `what(tokenizer)` words the input ("-i '...' is tokenized with 'sp'
// (DIR/meta.json)"). A checkpoint of ours keeps the note: one trained with --vocab 50257 on such data and
// copied away from its run is legitimate there.
constexpr int kGpt2Vocab = 50257;
template <class What>
void check_lone_gpt2_checkpoint_tokens(const std::string& checkpoint, const ModelConfig& model, bool from_llmc,
                                       const DataIdentity& id, What what, const std::string& fix) {
    if (!from_llmc || model.vocab_size != kGpt2Vocab || id.tokenizer.empty() || id.tokenizer == "gpt2" ||
        read_checkpoint_run(checkpoint))
        return;
    throw InputError(what(id) + " and " + checkpoint +
                     " is an llm.c GPT-2 checkpoint (vocabulary 50257), so its token ids would mean other tokens "
                     "to it; " +
                     fix);
}
inline void check_lone_gpt2_checkpoint_data(const std::string& checkpoint, const ModelConfig& model, bool from_llmc,
                                            const std::string& flag, const std::string& data) {
    if (!from_llmc || model.vocab_size != kGpt2Vocab) return;  // (only then are the data set's files read)
    check_lone_gpt2_checkpoint_tokens(
        checkpoint, model, from_llmc, read_data_identity(data),
        [&](const DataIdentity& id) {
            return flag + " '" + data + "' is tokenized with '" + id.tokenizer + "' (" + id.dir + "/meta.json)";
        },
        "give GPT-2 BPE data (data/prepare.py --tokenizer gpt2) or a model trained on "
        "this data");
}

// --eval-only of the run's own validation data (-j as the run recorded it): the note when the loader
// finds other shards or tokens there than the run recorded, or the same counts of other content
// (recorded_shards_change), "" otherwise. The tokenizer is checked (eval_settings_from_run); this is the
// same tokenizer on other text, e.g. prepared again with another --val-fraction or from edited text, so
// the loss is valid but not comparable with the run's validation losses.
inline std::string eval_data_changed_note(const std::string& checkpoint, const std::string& val_data, size_t shards,
                                          int64_t tokens, const std::string& content) {
    const std::optional<CheckpointRun> run = read_checkpoint_run(checkpoint);
    if (!run) return "";
    const std::string change =
        recorded_shards_change(run->data.val, run->config_path, val_data, shards, tokens, content);
    if (change.empty()) return "";
    return "note: -j '" + val_data + "' " + change +
           ": the data changed after the run (same tokenizer), so this loss is not comparable with the run's "
           "validation losses";
}

// generate_gpt2_ls --tokenizer of an llm.c GPT-2 checkpoint: check_lone_gpt2_checkpoint_tokens.
inline void check_lone_gpt2_checkpoint_tokenizer(const std::string& checkpoint, const ModelConfig& model,
                                                 bool from_llmc, const std::string& tokenizer) {
    if (!from_llmc || model.vocab_size != kGpt2Vocab || tokenizer.empty()) return;
    check_lone_gpt2_checkpoint_tokens(
        checkpoint, model, from_llmc, read_tokenizer_identity(tokenizer),
        [&](const DataIdentity& id) {
            return "--tokenizer " + tokenizer + " is the '" + id.tokenizer + "' tokenizer (" + id.dir + "/meta.json)";
        },
        "give GPT-2's tokenizer.bin (the one beside GPT-2 BPE data, or llm.c's "
        "gpt2_tokenizer.bin) or a model trained with this tokenizer");
}

// generate_gpt2_ls of a checkpoint with no run beside it (nothing names its tokenizer): the note when
// --tokenizer's vocabulary differs from the model's ("" otherwise; a larger one is refused later).
inline std::string generate_vocab_note(const std::string& checkpoint, const std::string& tokenizer, int tok_vocab,
                                       int model_vocab) {
    if (tokenizer.empty() || tok_vocab >= model_vocab || read_checkpoint_run(checkpoint)) return "";
    return "note: --tokenizer " + tokenizer + " has " + std::to_string(tok_vocab) + " tokens and the model " +
           std::to_string(model_vocab) + ", and " + checkpoint +
           " has no config.json beside it naming its training data: check that the tokenizer is the model's";
}

// generate_gpt2_ls: --tokenizer from the checkpoint's run (the tokenizer.bin next to its training data)
// when not given, and the tokenizer, given or taken, checked to be the run's: the bytes the run
// recorded (tokenizer_bin_fnv1a64), or for a run recorded without an identity, the tokenizer.bin next
// to its training data now. Returns the lines to say on stderr ("" when none: what it took, a note on
// an unknown identity), for stderr once the inputs are checked (so an error stays the only line).
inline std::string generate_settings_from_run(GenerateConfig& g) {
    if (g.model.empty()) return "";
    const std::optional<CheckpointRun> run = read_checkpoint_run(g.model);
    if (!run) return "";
    check_run_records_checkpoint_model(g.model, run->config_path);
    const std::string run_tok = run->train_data.empty() ? "" : glob_dir(run->train_data) + "/tokenizer.bin";
    std::error_code ec;
    const bool run_tok_exists = !run_tok.empty() && std::filesystem::is_regular_file(run_tok, ec);
    const std::string recorded = run->data.tokenizer_bin_hash();
    std::string lines = run->data.known() ? "" : unknown_data_note(run->data);
    if (!g.tokenizer.empty()) {
        const std::string given = file_fnv1a64(g.tokenizer);  // "" unreadable: generation_input names it
        if (given.empty()) return lines;
        // the run's SentencePiece model (tokenizer.model beside its tokenizer.bin): the right tokenizer, in
        // the other file format
        const std::string run_sp = run->train_data.empty() ? "" : glob_dir(run->train_data) + "/tokenizer.model";
        const bool run_tok_recorded =
            run_tok_exists &&
            (recorded.empty()
                 ? !run->data.identity_known()
                 : recorded_tokenizer_difference(run->data.train, read_tokenizer_identity(run_tok)).empty());
        if (run_tok_recorded && std::filesystem::is_regular_file(run_sp, ec) && file_fnv1a64(run_sp) == given &&
            file_fnv1a64(run_tok) != given)
            throw InputError("--tokenizer " + g.tokenizer +
                             " is the run's SentencePiece model (the tokenizer.model of its training data), the right "
                             "tokenizer in the other file format; generate_gpt2_ls reads its tokenizer.bin form: pass "
                             "--tokenizer " +
                             run_tok + " (the tokenizer.model beside it encodes --prompt), or leave --tokenizer out");
        try {  // a file that is no tokenizer.bin is named so (bad magic, ...), not as another tokenizer
            Tokenizer{g.tokenizer};
        } catch (const InputError& e) {
            // with the run's tokenizer known, its fix replaces the reader's own ("regenerate it ...")
            throw InputError(run_tok_exists ? damage_without_advice(e.what()) + "; the run's tokenizer is " + run_tok +
                                                  ": pass it, or leave --tokenizer out"
                                            : std::string(e.what()));
        }
        if (run->data.identity_known()) {  // the facts eval compares, of the data set the tokenizer belongs to
            const std::string diff =
                recorded_tokenizer_difference(run->data.train, read_tokenizer_identity(g.tokenizer));
            if (diff.empty()) return lines;
            const bool run_tok_right =
                run_tok_exists &&
                recorded_tokenizer_difference(run->data.train, read_tokenizer_identity(run_tok)).empty();
            throw InputError("--tokenizer " + g.tokenizer + " is not the tokenizer the model was trained with (" +
                             diff + " differs): " + run->config_path + " records " +
                             describe_recorded(run->data.train) + ", and --tokenizer has " +
                             describe_now(read_tokenizer_identity(g.tokenizer)) + "; " +
                             (run_tok_right ? "pass --tokenizer " + run_tok + ", or leave --tokenizer out"
                                            : "pass the tokenizer.bin of the data the run trained on"));
        }
        // no recorded identity: the tokenizer.bin next to the run's training data now, if there is one
        const std::string want = run_tok_exists ? file_fnv1a64(run_tok) : "";
        if (want.empty()) {
            if (run->data.known())  // recorded "data" whose directory had neither meta.json nor tokenizer.bin
                lines += cannot_check_note("--tokenizer " + g.tokenizer + " and the training data of " +
                                               run->config_path + " '" + run->train_data + "' were tokenized alike",
                                           glob_dir(run->train_data) + " has no meta.json or tokenizer.bin");
            return lines;
        }
        if (given != want)
            throw InputError("--tokenizer " + g.tokenizer + " is not the tokenizer the model was trained with: " +
                             run->config_path + " names the training data '" + run->train_data +
                             "', whose tokenizer.bin is " + run_tok + ", and --tokenizer has fnv1a64 " + given +
                             "; pass --tokenizer " + run_tok + ", or leave --tokenizer out");
        return lines;
    }
    if (!run_tok_exists) {
        if (run_tok.empty()) return lines;
        const std::string dir = glob_dir(run->train_data);
        const std::string why = std::filesystem::is_directory(dir, ec) ? dir + " has no tokenizer.bin"
                                                                       : dir + " no longer exists (renamed or moved?)";
        const std::string fix = "pass --tokenizer with that data set's tokenizer.bin where it is now";
        const std::string named = run->config_path + " names the training data '" + run->train_data + "', but " + why;
        if (g.has_prompt_text || !g.prompt_file.empty())
            throw InputError("--prompt/--prompt-file need the run's tokenizer: " + named + "; " + fix);
        if (g.prompt_ids.empty())  // the prompt would be the tokenizer's EOT
            throw InputError("no prompt without the run's tokenizer: " + named + "; " + fix +
                             " (or give --prompt-ids)");
        return lines + (lines.empty() ? "" : "\n") + "note: " + named + ": tokens print as <id>; " + fix;
    }
    if (!recorded.empty() && file_fnv1a64(run_tok) != recorded)
        throw InputError(run_tok + " (next to the run's training data -i '" + run->train_data +
                         "') is not the tokenizer the model was trained with: " + run->config_path + " records " +
                         describe_recorded(run->data.train) + ", and it has fnv1a64 " + file_fnv1a64(run_tok) +
                         " now (the data was prepared again after the run); prepare it with the run's tokenizer "
                         "(data/prepare.py), or pass --tokenizer with the tokenizer.bin the run trained with");
    g.tokenizer = run_tok;
    return lines + (lines.empty() ? "" : "\n") + "note: generate: --tokenizer " + run_tok + " from " +
           run->config_path + " (the run's training data -i '" + run->train_data + "')";
}

}  // namespace llmc
