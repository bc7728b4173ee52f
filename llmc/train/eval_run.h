// --eval-only: the validation loss of a model (a checkpoint or a preset) over the validation data, with
// the same plan_run and evaluate as training (llmc/train/train_loop.h), and the dumps it can write
// (--dump-logits, --dump-attention). docs/training.md "--eval-only" describes the flags.
#pragma once
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "llmc/train/step_graph_choice.h"  // use_pdl_if_asked
#include "llmc/train/train_loop.h"

namespace llmc {

// --dump-logits: the last forward's logits, (B, T, V) fp32 (the real vocabulary of each row).
inline void write_logits_dump(const std::string& path, Backend& model, int B, int T) {
    const int V = model.config().vocab_size, Vp = model.config().padded_vocab_size;
    std::string bytes;
    bytes.reserve((size_t)B * T * V * sizeof(float));
    const float* lg = model.logits();
    for (size_t r = 0; r < (size_t)B * T; r++)
        bytes.append(reinterpret_cast<const char*>(lg + r * Vp), (size_t)V * sizeof(float));
    write_file_atomic(path, bytes.data(), bytes.size());
}

// --dump-logits FILE replaces only what an earlier dump of this shape would be: an existing FILE that is a
// checkpoint's file, a directory, or of another size than B*T*V*4 bytes (a run's record, a shard, a
// mistyped name) is refused before anything is computed.
inline void check_dump_logits_target(const std::string& path, int B, int T, int V) {
    if (path.empty()) return;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return;
    const uint64_t want = (uint64_t)B * T * V * sizeof(float);
    int step = 0;
    const bool checkpoint =
        parse_checkpoint_name(std::filesystem::path(path).filename().string(), step) != CkptFileKind::None;
    const bool file = std::filesystem::is_regular_file(path, ec);
    const uint64_t size = file ? (uint64_t)std::filesystem::file_size(path, ec) : 0;
    if (file && !checkpoint && !ec && size == want) return;
    throw InputError("--dump-logits " + path + ": " +
                     (!file        ? std::string("is a directory or not a plain file")
                      : checkpoint ? std::string("is a checkpoint's file")
                                   : "exists and is not a logits dump of (" + std::to_string(B) + ", " +
                                         std::to_string(T) + ", " + std::to_string(V) + ") (" + std::to_string(want) +
                                         " bytes; it has " + std::to_string(size) + ")") +
                     "; give a new file name");
}

// The summed loss of `batches` batches of val. From the first one, on rank 0, the --dump-logits
// file and the --dump-attention maps (their paths into *dump_paths).
inline double eval_loss_sum(const TrainConfig& cfg, Backend& model, DataLoader& val, int64_t batches, bool main_rank,
                            const std::vector<DumpHead>& dump_heads, std::vector<std::string>* dump_paths) {
    const int B = cfg.batch_size, T = cfg.seq_len;
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    double sum = 0.0;
    for (int64_t i = 0; i < batches; i++) {
        val.next_batch(inputs.data(), targets.data());
        sum += model.forward(inputs.data(), targets.data(), B, T, 0.0f, nullptr).loss;
        if (i == 0 && main_rank && !cfg.dump_logits.empty()) write_logits_dump(cfg.dump_logits, model, B, T);
        if (i == 0 && main_rank && !dump_heads.empty())  // sequence 0's (T, T) attention probabilities per head
            *dump_paths = write_attention_dumps(model, dump_heads, T, cfg.output_dir);
    }
    return sum;
}

// The console summary of --eval-only and, with -o, <out>/eval.json (rank 0).
// model_id: model_header_identity of the evaluated file, read before it was loaded.
inline void report_eval(const TrainConfig& cfg, const RunPlan& plan, const std::string& device, size_t num_params,
                        int64_t batches, double loss, const std::vector<std::string>& dump_paths,
                        const std::string& model_id) {
    const int B = cfg.batch_size, T = cfg.seq_len, V = plan.model.vocab_size;
    const long long tokens = (long long)batches * B * T * cfg.world_size;
    std::printf("eval | device %s | model %s | %s\n", device.c_str(), plan.model_source.c_str(),
                describe_model(plan.model, num_params).c_str());
    std::printf("eval loss %.6f over %lld batches of B %d x T %d%s (%lld tokens) from '%s'\n", loss, (long long)batches,
                B, T, cfg.world_size > 1 ? (" x " + std::to_string(cfg.world_size) + " processes").c_str() : "", tokens,
                cfg.val_data.c_str());
    if (!cfg.dump_logits.empty())
        std::printf("wrote the first batch's logits (%d, %d, %d) float32 to %s\n", B, T, V, cfg.dump_logits.c_str());
    for (const std::string& p : dump_paths)
        std::printf("wrote the attention probabilities (%d, %d) float32 of the first sequence to %s\n", T, T,
                    p.c_str());
    if (cfg.output_dir.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(cfg.output_dir, ec);
    if (ec) throw InputError("cannot create output directory " + cfg.output_dir + " (" + ec.message() + ")");
    nlohmann::ordered_json rec = {{"model", recorded_form("model", cfg.model)},
                                  {"model_header_fnv1a64", model_id},
                                  {"val_data", recorded_form("val_data", cfg.val_data)},
                                  {"batch_size", B},
                                  {"seq_len", T},
                                  {"batches", batches},
                                  {"processes", cfg.world_size},
                                  {"tokens", tokens},
                                  {"loss", json_float(loss)}};
    write_text_file(cfg.output_dir + "/eval.json", json_file_text(rec));
}

// Whether `dir` holds an attention dump (attn_L<l>_H<h>.npy, llmc/io/attention_dump.h).
inline bool holds_attention_dumps(const std::string& dir) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("attn_L", 0) == 0 && name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
            return true;
    }
    return false;
}

// An -o that holds a run (config.json) is refused for a model that is not one of its checkpoints. An -o
// that holds the evaluation of another model (its eval.json names another checkpoint, or the same
// path whose file has another model_header_fnv1a64 now) is refused: eval.json is what names the model of
// the attention dumps beside it (scripts/plot_attention.py), so this evaluation would relabel the other
// model's dumps. So is one whose attention dumps are of another input (eval.json's -j or -t: the first
// sequence dumped), which this evaluation's eval.json would relabel. The same model's evaluation of the
// same input is written over (its dumps join those there); of another input, with no dumps there, too,
// with the returned note naming the evaluation replaced ("" for none).
inline std::string check_eval_output_dir(const TrainConfig& cfg, const std::string& model_id) {
    if (cfg.output_dir.empty()) return "";
    const std::string path = cfg.output_dir + "/eval.json";
    std::error_code ec;
    // a run's directory takes the evaluations of its own checkpoints: another model's eval.json there would
    // read as an evaluation of that run (and keep its own from that -o)
    if (std::filesystem::exists(cfg.output_dir + "/config.json", ec)) {
        const std::filesystem::path model_dir = std::filesystem::path(recorded_form("model", cfg.model)).parent_path();
        if (std::filesystem::weakly_canonical(model_dir, ec) != std::filesystem::weakly_canonical(cfg.output_dir, ec))
            throw InputError("-o " + cfg.output_dir + " holds a run (config.json), and -e " + cfg.model +
                             " is not one of its checkpoints: the evaluation would sit among that run's files as "
                             "one of its model; give -o the checkpoint's own run directory or a new directory");
    }
    if (!std::filesystem::exists(path, ec)) return "";
    std::string named, named_id, named_val, named_loss;
    int named_seq_len = 0;
    try {
        std::ifstream in(path, std::ios::binary);
        const nlohmann::json rec = nlohmann::json::parse(in);
        named = rec.at("model").get<std::string>();
        if (rec.contains("model_header_fnv1a64")) named_id = rec.at("model_header_fnv1a64").get<std::string>();
        if (rec.contains("val_data") && rec.contains("seq_len")) {  // absent: an older build's, not compared
            named_val = rec.at("val_data").get<std::string>();
            named_seq_len = rec.at("seq_len").get<int>();
        }
        if (rec.contains("loss") && rec.at("loss").is_number())
            named_loss = json_float(rec.at("loss").get<double>()).dump();
    } catch (const std::exception&) {
        throw InputError("-o " + cfg.output_dir + " holds an eval.json that cannot be read; give a new -o (or remove " +
                         path + ")");
    }
    const std::string mine = recorded_form("model", cfg.model);
    const bool same = std::filesystem::path(named).is_absolute() &&
                      std::filesystem::weakly_canonical(named, ec) == std::filesystem::weakly_canonical(mine, ec);
    if (!same)
        throw InputError("-o " + cfg.output_dir + " holds the evaluation of another model (" + path + " names " +
                         named + "); its attention dumps would be labelled with this model: give a new -o");
    if (!named_id.empty() && !model_id.empty() && named_id != model_id)  // "": unreadable, the load says why
        throw InputError("-o " + cfg.output_dir + " holds the evaluation of another model (" + path + " names " +
                         named + " with model_header_fnv1a64 " + named_id + ", the file there now has " + model_id +
                         "); its attention dumps would be labelled with this model: give a new -o");
    const std::string val = recorded_form("val_data", cfg.val_data);
    if (named_seq_len > 0 && (named_val != val || named_seq_len != cfg.seq_len) &&
        holds_attention_dumps(cfg.output_dir))
        throw InputError("-o " + cfg.output_dir + " holds attention dumps of -j '" + named_val + "' -t " +
                         std::to_string(named_seq_len) + " (" + path + "), and this evaluation is of -j '" + val +
                         "' -t " + std::to_string(cfg.seq_len) +
                         ": its eval.json would label both as one input; give another -o, or remove the attn_*.npy "
                         "and eval.json there");
    if (named_seq_len > 0 && (named_val != val || named_seq_len != cfg.seq_len))
        return "note: " + path + " held the evaluation of -j '" + named_val + "' -t " + std::to_string(named_seq_len) +
               (named_loss.empty() ? "" : " (loss " + named_loss + ")") +
               "; this evaluation of another input replaced it (give another -o to keep both)";
    return "";
}

// -e of --eval-only, checked before the flags (a run's -j and -t come from its checkpoint's run): a
// checkpoint's model file (llmc/app/checkpoint_run.h check_model_file).
inline void check_eval_checkpoint(const std::string& model) {
    const std::string head = "--eval-only needs -e CHECKPOINT (a model file); '" + model + "' ";
    if (!check_model_file(model, head)) throw InputError(head + "is not a file");
}

// The flags typed with --eval-only that only a training run reads (-l, -x, --sampler, --seed, --near,
// --cuda-graph, ...): one note naming them, "" when none. An evaluation reads the data, batch and output
// flags, the model flags (checked against -e) and the machine's and launch flags; a --config file's
// values are a preset's and are not noted.
inline std::string eval_only_unused_flags_note(const TrainConfig& cfg) {
    static const char* const reads[] = {
        "train-data",  "val-data",       "expect-tokenizer", "expect-vocab", "output-dir",
        "model",       "batch-size",     "seq-len",          "val-batches",  "eval-only",
        "dump-logits", "dump-attention", "device",           "threads",      "pdl",
        "rank",        "world-size",     "local-rank",       "rendezvous",   "debug-fail-rank",
        "resume",      "fork-from",      "profile-steps"};
    std::string unused;
    const auto consider = [&](const char* names) {
        const std::string row(names), flag = long_flag_name(names);
        if (row.empty() || !cfg.was_given(flag) || !cfg.origin_of(flag).empty()) return;
        for (const char* r : reads)
            if (flag == r) return;
        unused += (unused.empty() ? "" : ", ") + row.substr(0, row.find(','));
    };
#define LLMC_EVAL_UNUSED(record, type, field, def, names, ok, rule, help) consider(names);
    LLMC_TRAIN_FLAGS(LLMC_EVAL_UNUSED, LLMC_NO_MODEL)
#undef LLMC_EVAL_UNUSED
    if (unused.empty()) return "";
    return "note: --eval-only trains nothing, so " + unused +
           " (the settings of a training run) have no effect; the evaluation reads -e, -j, -b, -t, -m and -o";
}

// -j of another data set than the one the run of -e trained on (its config.json's -i): the note a run
// training on -i with this -j gets (other_val_set_note), "" otherwise and for -e without a run beside it.
inline std::string eval_other_data_set_note(const TrainConfig& cfg, const std::vector<std::string>& val_shards) {
    const std::optional<CheckpointRun> run = read_checkpoint_run(cfg.model);
    if (!run || run->train_data.empty()) return "";
    return other_val_set_note("the training data of -e's run, -i '" + run->train_data + "'", glob_dir(run->train_data),
                              "-j '" + cfg.val_data + "'", val_shards);
}

// settings_note: the line saying which settings came from the checkpoint's run (eval_settings_from_run),
// printed on stderr by rank 0 after the result, only when the evaluation succeeded ("" for none).
inline int run_eval(const TrainConfig& cfg, const BackendFactory& make_backend, Collective& comm,
                    const std::string& settings_note) {
    check_eval_checkpoint(cfg.model);
    validate_train_flags(cfg);
    const std::string model_id = model_header_identity(cfg.model);  // before loading: the bytes evaluated
    const std::string replaced = check_eval_output_dir(cfg, model_id);
    RunPlan plan;
    check_config_shard_patterns(cfg);
    check_expected_data(cfg, cfg.val_data, "-j");
    plan_model(cfg, cfg.val_data, plan);
    check_lone_gpt2_checkpoint_data(cfg.model, plan.model, plan.init && plan.init->from_llmc, "-j", cfg.val_data);
    const DataIdentity val_identity = read_data_identity(cfg.val_data);
    check_model_tokenizer(cfg.model, plan.init->tokenizer_id, val_identity, "-j '" + cfg.val_data + "'",
                          "give -j data prepared with that tokenizer (data/prepare.py)");
    const std::string notes[] = {
        past_trained_length_note(*plan.init, cfg.model, cfg.seq_len, "--eval-only -t"),
        model_tokenizer_matches(plan.init->tokenizer_id, val_identity)
            ? ""
            : lone_checkpoint_vocab_note(cfg.model, plan.model, plan.data_vocab, plan.vocab_source, "-j", cfg.val_data),
        retired_checkpoint_note(cfg.model), eval_only_unused_flags_note(cfg)};
    for (const std::string& note : notes)
        if (!note.empty() && comm.rank() == 0) std::fprintf(stderr, "%s\n", note.c_str());
    std::vector<DumpHead> dump_heads;  // --dump-attention
    if (!cfg.dump_attention.empty()) dump_heads = parse_dump_attention(cfg.dump_attention);
    check_dump_attention_heads(dump_heads, plan.model);
    check_dump_logits_target(cfg.dump_logits, cfg.batch_size, cfg.seq_len, plan.model.vocab_size);
    plan.val = open_loader(cfg, cfg.val_data, false, plan.model.vocab_size);
    check_ranks_share_data(comm, "validation data -j '" + cfg.val_data + "'", shards_identity(plan.val->shard_paths()));
    check_shard_roles(plan.val->shard_paths(), ShardRole::Val, "-j '" + cfg.val_data + "'", false, comm.rank() == 0);
    const std::string changed =
        eval_data_changed_note(cfg.model, cfg.val_data, plan.val->num_shards(), plan.val->total_tokens(),
                               shards_content_hash(plan.val->shard_paths()));
    if (!changed.empty() && comm.rank() == 0) std::fprintf(stderr, "%s\n", changed.c_str());
    const std::string other_set = comm.rank() == 0 ? eval_other_data_set_note(cfg, plan.val->shard_paths()) : "";
    if (!other_set.empty()) std::fprintf(stderr, "%s\n", other_set.c_str());
    const int64_t batches = val_batch_count(cfg, *plan.val, true);

    std::unique_ptr<Backend> model = make_backend(plan.model);
    const std::string pdl = use_pdl_if_asked(cfg, *model);  // said beside the device, as a run header says it
    const std::string device = model->device_description() + (pdl.empty() ? "" : "; " + pdl);
    if (!dump_heads.empty()) check_dump_attention_backend(*model);
    model->set_params(plan.init->params.data());
    std::vector<std::string> dump_paths;
    const double sum = eval_loss_sum(cfg, *model, *plan.val, batches, comm.rank() == 0, dump_heads, &dump_paths);
    const double loss = comm.all_reduce_double(sum / (double)batches, ReduceOp::Avg);  // the ranks' rows
    if (comm.rank() == 0) {
        report_eval(cfg, plan, device, model->num_params(), batches, loss, dump_paths, model_id);
        std::fflush(stdout);  // the note follows the result it explains
        if (!settings_note.empty()) std::fprintf(stderr, "%s\n", settings_note.c_str());
        if (!replaced.empty()) std::fprintf(stderr, "%s\n", replaced.c_str());  // once it was replaced
    }
    return 0;
}

}  // namespace llmc
