// The training loop and --eval-only, written once against llmc/core/backend.h so the CPU and CUDA
// backends run the same code. train_gpt2_ls.cu parses the flags (llmc/app/cli.h), picks the device
// and calls run_training() or run_eval() with a factory that builds the backend.
//
// Order of work (nothing is written before every check has passed, so bad flags or a bad
// checkpoint leave the output directory untouched):
//   1. resolve the model (preset + flags, or a checkpoint given with -e) and the vocabulary of
//      the data; refuse impossible combinations with one line
//   2. open the data (shard headers are validated), find and load the checkpoint to resume from
//   3. build the backend, restore weights / optimizer / loader / RNG / spike windows
//   4. take <out>/.lock (llmc/io/output_lock.h; rank 0), write <out>/config.json + config.toml,
//      open metrics.jsonl and logit_stats.jsonl, train
// A second run on the same -o is refused in 2 (before it reads checkpoints) or 4 (a race).
// Each step s = 1..max_steps: zero grads; accum x (next batch, forward, backward(1/accum));
// grad norm; skip the update when loss or norm is non-finite or (--skip-spikes) a spike; clip;
// AdamW with lr(s-1); then validation, the console line, the metrics record, logit stats, a
// sample, a checkpoint, each when due. A checkpoint of step s therefore holds everything after
// step s's records, and a resumed run continues at step s+1 exactly as an uninterrupted one.
//
// Several processes (docs/multigpu.md; rank and world size come from the Collective): each rank
// reads rows r*B .. r*B+B-1 of every global batch (RankSplit::Rows); the gradients are averaged
// over the ranks (Backend::all_reduce_grads), or with -z 1 reduce-scattered into ZeRO-1 shards
// (llmc/dist/zero.h); loss, norm, validation loss and logit statistics are reduced over the ranks so
// every rank takes the same decisions. Console, metrics, statistics, samples, config files, model
// files and DONE markers come from rank 0; every rank writes its own training-state file, and a
// barrier precedes the marker. On resume the ranks agree on the newest step all of them can load.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/io/attention_dump.h"
#include "llmc/core/backend.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/dist/collective.h"
#include "llmc/io/dataloader.h"
#include "llmc/core/error.h"
#include "llmc/core/flops.h"
#include "llmc/train/logit_alarm.h"
#include "llmc/io/metrics.h"
#include "llmc/core/model_config.h"
#include "llmc/io/output_lock.h"
#include "llmc/train/qk_clip.h"
#include "llmc/core/rng.h"
#include "llmc/text/sampler.h"
#include "llmc/train/schedule.h"
#include "llmc/train/spikes.h"
#include "llmc/text/tokenizer.h"
#include "llmc/app/train_config.h"
#include "llmc/app/config_json.h"
#include "llmc/app/model_setup.h"
#include "llmc/app/validate.h"
#include "llmc/io/json_text.h"
#include "llmc/io/train_state.h"
#include "llmc/dist/zero.h"

namespace llmc {

using BackendFactory = std::function<std::unique_ptr<Backend>(const ModelConfig&)>;

// ---------------------------------------------------------------------------------------------
// setup: model, data vocabulary, validation

// The directory part of a shard glob ("." when it has none).
inline std::string glob_dir(const std::string& pattern) {
    const size_t slash = pattern.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : pattern.substr(0, slash);
}

// Vocabulary of the data next to the shards: meta.json's "vocab_size", else tokenizer.bin's
// header. Returns -1 when neither is there (or meta.json has no "vocab_size"); *source names where it
// came from. A meta.json that is not a JSON object or whose vocab_size is not an integer in
// [1, 2^31 - 1], and a tokenizer.bin header with V = 0 or V >= 2^31, are refused with InputError
// naming the file (they used to be skipped or wrapped silently: docs/reliability.md).
inline int data_vocab_size(const std::string& pattern, std::string* source) {
    const std::string dir = glob_dir(pattern);
    const std::string meta = dir + "/meta.json";
    std::ifstream in(meta);
    if (in) {
        const auto j = nlohmann::ordered_json::parse(in, nullptr, false);
        if (!j.is_object())
            throw InputError(meta + " is not a JSON object; regenerate the data with data/prepare.py or remove the file");
        const auto v = j.find("vocab_size");
        if (v != j.end()) {
            if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > INT32_MAX)
                throw InputError(meta + ": \"vocab_size\" " + json_value_brief(*v) +
                                 " is not an integer from 1 to 2147483647; regenerate the data with data/prepare.py "
                                 "or remove the file");
            *source = meta;
            return (int)v->get<int64_t>();
        }
    }
    const std::string tok = dir + "/tokenizer.bin";
    std::FILE* f = std::fopen(tok.c_str(), "rb");
    if (f) {
        uint32_t header[4] = {0, 0, 0, 0};
        const bool ok = std::fread(header, 4, 4, f) == 4;
        std::fclose(f);
        if (ok && header[0] == kTokenizerMagic) {
            if (header[2] == 0 || header[2] > (uint32_t)INT32_MAX)
                throw InputError(tok + ": vocabulary size " + std::to_string(header[2]) +
                                 " in the header is not from 1 to 2147483647; regenerate it with data/prepare.py");
            *source = tok;
            return (int)header[2];
        }
    }
    return -1;
}

inline bool is_regular_file(const std::string& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
}

// Writes a text file through a temporary + rename (so a crash never leaves half a config).
inline void write_text_file(const std::string& path, const std::string& text) {
    write_file_atomic(path, text.data(), text.size());
}

// ---------------------------------------------------------------------------------------------
// pieces of a step

// Combines the statistics of the micro-batches of one step: max of maxima, min of minima,
// mean of entropies and of the mean logsumexp.
inline void merge_logit_stats(LogitStats& acc, const LogitStats& s, int index, int count) {
    if (index == 0) {
        acc = s;
    } else {
        for (size_t i = 0; i < acc.max_logit.size(); i++) {
            acc.max_logit[i] = std::max(acc.max_logit[i], s.max_logit[i]);
            acc.min_logit[i] = std::min(acc.min_logit[i], s.min_logit[i]);
            acc.entropy[i] += s.entropy[i];
        }
        for (size_t i = 0; i < acc.near_mass.size() && i < s.near_mass.size(); i++) {  // near/far: mean, max, max
            acc.near_mass[i] += s.near_mass[i];
            acc.near_max_logit[i] = std::max(acc.near_max_logit[i], s.near_max_logit[i]);
            acc.far_max_logit[i] = std::max(acc.far_max_logit[i], s.far_max_logit[i]);
        }
        acc.out_max_logit = std::max(acc.out_max_logit, s.out_max_logit);
        acc.out_mean_lse += s.out_mean_lse;
    }
    if (index == count - 1 && count > 1) {
        for (float& e : acc.entropy) e /= count;
        for (float& m : acc.near_mass) m /= count;
        acc.out_mean_lse /= count;
    }
}

// Mean cross-entropy over `batches` validation batches (from the loader's start).
// Each rank evaluates its rows of every batch; the result is the mean over the ranks.
inline double evaluate(Backend& model, DataLoader& loader, int B, int T, int64_t batches, std::vector<int>& inputs,
                       std::vector<int>& targets, Collective& comm) {
    loader.reset();
    double sum = 0.0;
    for (int64_t i = 0; i < batches; i++) {
        loader.next_batch(inputs.data(), targets.data());
        sum += model.forward(inputs.data(), targets.data(), B, T, 0.0f, nullptr).loss;
    }
    return comm.all_reduce_double(sum / (double)batches, ReduceOp::Avg);
}

// The step's logit statistics over all ranks: max of maxima, min of minima, mean of the means.
inline void reduce_logit_stats(Collective& comm, LogitStats& s) {
    if (comm.world_size() == 1) return;
    comm.all_reduce(s.max_logit.data(), s.max_logit.size(), ReduceOp::Max);
    comm.all_reduce(s.min_logit.data(), s.min_logit.size(), ReduceOp::Min);
    comm.all_reduce(s.entropy.data(), s.entropy.size(), ReduceOp::Avg);
    if (s.has_near_far()) {  // every rank runs the same backend: all have them or none
        comm.all_reduce(s.near_mass.data(), s.near_mass.size(), ReduceOp::Avg);
        comm.all_reduce(s.near_max_logit.data(), s.near_max_logit.size(), ReduceOp::Max);
        comm.all_reduce(s.far_max_logit.data(), s.far_max_logit.size(), ReduceOp::Max);
    }
    float outs[2] = {s.out_max_logit, s.out_mean_lse};
    comm.all_reduce(&outs[0], 1, ReduceOp::Max);
    comm.all_reduce(&outs[1], 1, ReduceOp::Avg);
    s.out_max_logit = outs[0];
    s.out_mean_lse = outs[1];
}

// --near needs a backend that computes the near/far statistics (the CPU one; the CUDA kernels do
// not yet, and a CUDA run's records simply omit them).
inline void check_near_supported(const TrainConfig& c, const Backend& b) {
    if (c.near && !b.has_near_far_stats())
        throw InputError(std::string("--near: the ") + b.name() +
                         " backend does not compute near/far attention statistics yet; use --device cpu or drop --near");
}

// -y 1 with several ranks: each rank loads the newest complete checkpoint it can (a damaged
// state file makes only that rank fall back); they agree on the minimum step and ranks that found
// a newer one reload at most that step, until all hold the same step.
inline std::optional<LoadedCheckpoint> load_agreed_checkpoint(const std::string& out, const ModelConfig& m,
                                                              Collective& comm) {
    const int rank = comm.rank(), world = comm.world_size();
    std::optional<LoadedCheckpoint> ck = load_newest_checkpoint(out, m, rank, world);
    for (;;) {
        const long long mine = ck ? ck->step : -1;
        const long long lo = comm.all_reduce_int(mine, ReduceOp::Min), hi = comm.all_reduce_int(mine, ReduceOp::Max);
        if (lo == hi) return ck;
        if (lo < 0)
            throw InputError("rank " + std::to_string(rank) + (mine < 0 ? " found no" : " found a") +
                             " complete checkpoint in " + out + " but another rank did" + (mine < 0 ? "" : " not") +
                             "; every rank must see the same -o directory (a shared file system)");
        if (mine != lo) ck = load_newest_checkpoint(out, m, rank, world, (int)lo);
    }
}

// QK-Clip after a step (llmc/train/qk_clip.h): scales the q/k projections of the heads whose max logit
// exceeded tau, in the backend's weights and, with ZeRO-1, in this rank's master shard (which the
// next step's all-gather publishes). params_buf is scratch. Returns the clipped heads.
inline std::vector<ClippedHead> apply_qk_clip(float tau, const LogitStats& s, const ModelConfig& m, Backend& model,
                                              Zero1Optimizer* zero, std::vector<float>& params_buf) {
    std::vector<ClippedHead> heads = qk_clip_heads(s, tau);
    if (heads.empty()) return heads;
    const std::vector<ParamScale> scales = qk_clip_scales(m, heads);
    params_buf.resize(model.num_params());
    model.get_params(params_buf.data());
    apply_param_scales(params_buf.data(), 0, params_buf.size(), scales);
    model.set_params(params_buf.data());
    if (zero) apply_param_scales(zero->master(), zero->range().begin, zero->range().size(), scales);
    return heads;
}

inline int64_t val_batch_count(const TrainConfig& c, const DataLoader& val, bool all_by_default) {
    const int64_t avail = val.batches_per_epoch();
    if (c.val_batches == -1 || (all_by_default && !c.val_batches_given)) return avail;
    return std::min<int64_t>(c.val_batches, avail);
}

// The spike detectors' windows, for the training-state file's opaque section.
inline std::vector<double> spikes_to_vector(const SpikeDetector& loss, const SpikeDetector& norm) {
    std::vector<double> out = loss.to_vector(), b = norm.to_vector();
    out.insert(out.end(), b.begin(), b.end());
    return out;
}

inline std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

// The console line and the metrics entry of a logit alarm.
inline std::string logit_alarm_line(int step, const LogitAlarmEvent& e, int window, const std::string& checkpoint) {
    std::string line = "logit alarm at step " + std::to_string(step) + ": layer " + std::to_string(e.layer) + " head " +
                       std::to_string(e.head) + " max logit " + fmt("%.4g", e.value);
    if (e.by_z) line += " (z " + fmt("%.3g", e.z) + " over the last " + std::to_string(window) + " steps)";
    if (e.by_above) line += " (above --logit-alarm-above)";
    if (!checkpoint.empty()) line += " -> checkpoint " + checkpoint;
    return line;
}
inline nlohmann::ordered_json logit_alarm_json(const LogitAlarmEvent& e) {
    return {{"layer", e.layer}, {"head", e.head}, {"value", json_float(e.value)}, {"z", json_float(e.z)},
            {"by_z", e.by_z}, {"by_above", e.by_above}, {"checkpoint", e.checkpoint}};
}

// ---------------------------------------------------------------------------------------------
// training

inline int run_training(const TrainConfig& cfg, const BackendFactory& make_backend,
                        const std::string& config_toml, Collective& comm) {
    if (cfg.rank != comm.rank() || cfg.world_size != comm.world_size())
        throw std::logic_error("run_training: cfg.rank/world_size must be the collective's");
    const bool main_rank = cfg.rank == 0;  // console, metrics, samples, model files, markers
    // 1. model, vocabulary, flags (no side effects)
    validate_train_flags(cfg);
    std::string vocab_source;
    const int data_vocab = data_vocab_size(cfg.train_data, &vocab_source);
    ModelSetup ms = resolve_model(cfg, data_vocab);
    const ModelConfig& model_cfg = ms.config;
    const int accum = validate_run(cfg, model_cfg, data_vocab, vocab_source);
    const int B = cfg.batch_size, T = cfg.seq_len;

    // 2. data and the checkpoint to resume from (still nothing written)
    DataLoader train(cfg.train_data, B, T, cfg.rank, cfg.world_size, cfg.shuffle == 1, cfg.seed, model_cfg.vocab_size,
                     RankSplit::Rows);
    std::unique_ptr<DataLoader> val;
    if (!cfg.val_data.empty())
        val = std::make_unique<DataLoader>(cfg.val_data, B, T, cfg.rank, cfg.world_size, false, cfg.seed,
                                           model_cfg.vocab_size, RankSplit::Rows);
    const int max_steps =
        cfg.max_steps >= 0 ? cfg.max_steps : (int)std::max<int64_t>(1, train.batches_per_epoch() / accum);
    const std::string& out = cfg.output_dir;
    std::optional<LoadedCheckpoint> resume;
    if (!out.empty() && main_rank) check_output_unlocked(out);  // another run on -o: refuse (read-only)
    if (!out.empty()) {
        if (cfg.resume) {
            resume = load_agreed_checkpoint(out, model_cfg, comm);
            if (!resume && main_rank) std::printf("note: -y 1 but %s has no complete checkpoint; starting from step 0\n", out.c_str());
        } else if (newest_complete_step(out) >= 0) {
            throw InputError("output directory " + out + " already holds checkpoints (newest step " +
                             std::to_string(newest_complete_step(out)) +
                             "); resume with -y 1 or choose another -o");
        }
    }
    SpikeDetector loss_spikes(cfg.spike_window), norm_spikes(cfg.spike_window);
    LogitAlarmConfig alarm_cfg;
    alarm_cfg.z = cfg.logit_alarm;
    alarm_cfg.above = cfg.logit_alarm_above;
    alarm_cfg.cooldown = cfg.logit_alarm_cooldown;
    alarm_cfg.window = cfg.spike_window;
    LogitAlarm alarm(alarm_cfg);
    Rng sample_rng(cfg.seed ^ 0x53414D504C45ull);  // "SAMPLE"
    int start_step = 0;
    if (resume) {
        const TrainState& st = resume->state;
        train.restore(LoaderState::from_vector(st.loader));
        size_t pos = loss_spikes.from_vector(st.extra, 0);
        pos = norm_spikes.from_vector(st.extra, pos);
        if (pos < st.extra.size() && st.extra[pos] == LogitAlarm::kStateTag)  // a run with the logit alarm
            pos = alarm.from_vector(st.extra, pos);
        if (pos != st.extra.size() || st.rng.size() != 1)
            throw InputError(state_path(out, resume->step, cfg.rank) +
                             ": unexpected loop-state layout; it was written by another version, start a fresh run");
        sample_rng.set_state(st.rng[0]);
        start_step = resume->step;
    }

    // 3. the model
    std::unique_ptr<Backend> model = make_backend(model_cfg);
    check_near_supported(cfg, *model);
    const std::string device_name = model->device_description();
    const size_t n_params = model->num_params();
    if (resume) {
        model->set_params(resume->model.params.data());
        model->set_optimizer_state(resume->state.m.data(), resume->state.v.data());
    } else if (ms.init) {
        model->set_params(ms.init->params.data());
    }
    std::vector<float> params_buf, m_buf, v_buf;
    if (cfg.world_size > 1) {  // every rank starts from rank 0's weights
        params_buf.resize(n_params);
        model->get_params(params_buf.data());
        comm.broadcast(params_buf.data(), n_params, 0);
        model->set_params(params_buf.data());
    }
    // ZeRO-1: this rank's shard of master weights and moments (from the checkpoint when resuming)
    std::unique_ptr<Zero1Optimizer> zero;
    std::vector<float> grads_pad, params_pad;  // (world * chunk) padded full vectors
    if (cfg.zero_stage == 1) {
        zero = std::make_unique<Zero1Optimizer>(param_layout(model_cfg), cfg.rank, cfg.world_size);
        grads_pad.assign(zero->padded_total(), 0.0f);
        params_pad.assign(zero->padded_total(), 0.0f);
        params_buf.resize(n_params);
        model->get_params(params_buf.data());
        if (resume)
            zero->load(params_buf.data(), resume->state.m.data(), resume->state.v.data(),
                       resume->state.master.empty() ? nullptr : resume->state.master.data());
        else
            zero->load(params_buf.data(), nullptr, nullptr, nullptr);
    }
    std::string tok_warning;
    const Tokenizer tokenizer = Tokenizer::load_or_absent(glob_dir(cfg.train_data) + "/tokenizer.bin", &tok_warning);

    // 4. outputs
    JsonlWriter metrics, logit_log;
    if (!out.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(out, ec);
        if (ec) throw InputError("cannot create output directory " + out + " (" + ec.message() + "); choose another -o");
    }
    OutputLock out_lock;  // held until run_training returns (or the process ends)
    if (!out.empty() && main_rank) out_lock.acquire(out);
    if (!out.empty() && main_rank) {
        nlohmann::ordered_json conf = {{"train", train_config_json(cfg)},
                               {"model", model_config_json(model_cfg)},
                               {"derived", {{"model_source", ms.source},
                                            {"vocab_source", data_vocab > 0 ? vocab_source : "default"},
                                            {"grad_accum_steps", accum},
                                            {"tokens_per_step", (long)B * T * accum * cfg.world_size},
                                            {"max_steps", max_steps},
                                            {"num_params", n_params},
                                            {"device", device_name},
                                            {"world_size", cfg.world_size},
                                            {"zero_stage", cfg.zero_stage},
                                            {"flops_per_token", flops_per_token(model_cfg, T)},
                                            {"resumed_from_step", start_step}}}};
        write_text_file(out + "/config.json", json_file_text(conf));
        write_text_file(out + "/config.toml", config_toml);
        if (resume) {  // drop records the interrupted run wrote after its checkpoint
            truncate_jsonl_after_step(out + "/metrics.jsonl", start_step);
            truncate_jsonl_after_step(out + "/logit_stats.jsonl", start_step);
        }
        metrics.open(out + "/metrics.jsonl", resume.has_value());
        logit_log.open(out + "/logit_stats.jsonl", resume.has_value());
    }

    if (main_rank) {
        std::printf("train_gpt2_ls | device %s | model %s\n  %s\n", device_name.c_str(), ms.source.c_str(),
                    describe_model(model_cfg, n_params).c_str());
        std::printf("  train: %lld tokens in %zu shard(s), %lld batches/epoch | val: %s\n", (long long)train.total_tokens(),
                    train.num_shards(), (long long)train.batches_per_epoch(),
                    val ? (std::to_string(val->total_tokens()) + " tokens").c_str() : "none");
        std::printf("  batch: B %d x T %d x accum %d x %d process(es) = %ld tokens/step | %d steps | lr %.2e %s\n", B, T,
                    accum, cfg.world_size, (long)B * T * accum * cfg.world_size, max_steps, cfg.learning_rate,
                    cfg.lr_schedule.c_str());
        if (cfg.world_size > 1)
            std::printf("  data parallel: %d processes (%s)%s\n", cfg.world_size, comm.name(),
                        cfg.zero_stage == 1 ? ", ZeRO-1: AdamW state sharded" : "");
        if (resume) std::printf("  resumed from %s at step %d\n", model_path(out, start_step).c_str(), start_step);
        if (start_step >= max_steps && resume)
            std::printf("  note: the checkpoint's step %d is not below -x %d; nothing to train (raise -x to continue)\n",
                        start_step, max_steps);
        if (!tok_warning.empty() && cfg.sample_every > 0) std::printf("  note: %s\n", tok_warning.c_str());
        if (out.empty()) std::printf("  note: no -o given; nothing is written (metrics, checkpoints)\n");
        std::fflush(stdout);
    }

    ScheduleConfig sched;
    sched.kind = parse_lr_schedule(cfg.lr_schedule);
    sched.max_lr = cfg.learning_rate;
    sched.warmup_steps = cfg.warmup_steps;
    sched.final_lr_frac = cfg.final_lr_frac;
    sched.total_steps = max_steps;
    sched.wsd_decay_frac = cfg.wsd_decay_frac;
    AdamWHyper hyper;
    hyper.beta1 = cfg.beta1;
    hyper.beta2 = cfg.beta2;
    hyper.eps = cfg.eps;
    hyper.weight_decay = cfg.weight_decay;

    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    const int64_t val_batches = val ? val_batch_count(cfg, *val, false) : 0;
    const int eot = tokenizer.present() && tokenizer.eot_token() >= 0 ? tokenizer.eot_token() : model_cfg.vocab_size - 1;

    auto save_checkpoint = [&](int step) {
        TrainState st;
        st.step = step;
        st.rank = cfg.rank;
        st.world_size = cfg.world_size;
        params_buf.resize(n_params);
        if (zero) {  // gather the shards: every rank's state file holds the full m, v and master
            m_buf.resize(zero->padded_total());
            v_buf.resize(zero->padded_total());
            zero->gather_state(comm, m_buf.data(), v_buf.data(), params_pad.data());
            st.m.assign(m_buf.begin(), m_buf.begin() + (long)n_params);
            st.v.assign(v_buf.begin(), v_buf.begin() + (long)n_params);
            st.master.assign(params_pad.begin(), params_pad.begin() + (long)n_params);
            std::copy(st.master.begin(), st.master.end(), params_buf.begin());
        } else {
            // the model file is fp32: it is the master copy of the weights (st.master stays empty)
            model->get_params(params_buf.data());
            st.m.resize(n_params);
            st.v.resize(n_params);
            model->get_optimizer_state(st.m.data(), st.v.data());
        }
        st.rng = {sample_rng.state()};
        st.loader = train.state().to_vector();
        st.extra = spikes_to_vector(loss_spikes, norm_spikes);
        if (alarm_cfg.on() || !alarm.checkpoint_steps().empty()) {
            const std::vector<double> a = alarm.to_vector();
            st.extra.insert(st.extra.end(), a.begin(), a.end());
        }
        if (main_rank) save_model_checkpoint(model_path(out, step), model_cfg, params_buf.data(), step);
        save_train_state(state_path(out, step, cfg.rank), model_cfg, st);
        comm.barrier();  // every rank's files exist before the marker
        if (main_rank) {
            write_done_marker(out, step, cfg.world_size);
            prune_checkpoints(out, cfg.keep_checkpoints, step, alarm.checkpoint_steps());
        }
    };
    const double flops_token = flops_per_token(model_cfg, T), peak = model->peak_flops();

    if (!resume && val && cfg.val_every > 0) {  // the untrained model's validation loss
        const double vl = evaluate(*model, *val, B, T, val_batches, inputs, targets, comm);
        if (main_rank) std::printf("step %*d/%d | val loss %.4f\n", (int)std::to_string(max_steps).size(), 0, max_steps, vl);
        metrics.write({{"step", 0}, {"val_loss", json_float(vl)}});
    }

    LogitStats mb_stats, step_stats;
    mb_stats.near_distance = cfg.near.value_or(0);  // 0: the model's window
    for (int step = start_step; step < max_steps;) {
        const auto t0 = std::chrono::steady_clock::now();
        model->zero_grad();
        double loss_sum = 0.0, zloss_sum = 0.0;
        for (int mb = 0; mb < accum; mb++) {
            train.next_batch(inputs.data(), targets.data());
            const ForwardResult r = model->forward(inputs.data(), targets.data(), B, T, cfg.z_loss, &mb_stats);
            merge_logit_stats(step_stats, mb_stats, mb, accum);
            loss_sum += r.loss;
            zloss_sum += r.z_loss;
            model->backward(1.0f / accum);
        }
        if (cfg.debug_fail_rank == cfg.rank)  // test hook: the other ranks are about to wait for this one
            throw InputError("--debug-fail-rank " + std::to_string(cfg.rank) + ": rank " + std::to_string(cfg.rank) +
                             " fails on purpose in step " + std::to_string(step + 1) + " (test hook)");
        // the global batch's mean losses; gradients averaged over the ranks; the global norm
        const float loss = (float)comm.all_reduce_double(loss_sum / accum, ReduceOp::Avg);
        const float zloss = (float)comm.all_reduce_double(zloss_sum / accum, ReduceOp::Avg);
        reduce_logit_stats(comm, step_stats);
        float norm;
        if (zero) {
            model->get_grads(grads_pad.data());  // entries [n, world * chunk) stay 0
            norm = (float)std::sqrt(comm.all_reduce_double(zero->reduce_scatter_grads(comm, grads_pad.data()), ReduceOp::Sum));
        } else {
            model->all_reduce_grads(comm);
            norm = model->grad_norm();
        }
        const double loss_z = loss_spikes.zscore(loss), norm_z = norm_spikes.zscore(norm);
        const bool nonfinite = !std::isfinite(loss) || !std::isfinite(norm);
        const bool spike = loss_z > cfg.spike_z || norm_z > cfg.spike_z;  // NaN (window not full) is false
        const bool skip_spike = !nonfinite && cfg.skip_spikes > 0 && (loss_z > cfg.skip_spikes || norm_z > cfg.skip_spikes);
        const float lr = learning_rate(sched, step);
        if (!nonfinite && !skip_spike) {
            hyper.lr = lr;
            const float clip = cfg.grad_clip > 0 && norm > cfg.grad_clip ? cfg.grad_clip / norm : 1.0f;
            if (zero) {
                zero->step_and_gather(comm, hyper, step + 1, clip, params_pad.data());
                model->set_params(params_pad.data());  // its first n_params elements
            } else {
                model->adamw_update(hyper, step + 1, clip);
            }
        }
        // QK-Clip after every step (also a skipped one: the logits exceeded TAU on the current weights)
        const std::vector<ClippedHead> clipped =
            cfg.qk_clip > 0 ? apply_qk_clip(cfg.qk_clip, step_stats, model_cfg, *model, zero.get(), params_buf)
                            : std::vector<ClippedHead>{};
        loss_spikes.push(loss);
        norm_spikes.push(norm);
        step++;
        // every step, rules on or off, so a checkpoint's alarm window is always the last W steps'
        const LogitAlarmEvent alarm_event = alarm.observe(step, step_stats);
        const double ms_step =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const double tok_s = (double)B * T * accum * cfg.world_size / (ms_step / 1000.0);

        std::optional<double> val_loss;
        if (val && cfg.val_every > 0 && (step % cfg.val_every == 0 || step == max_steps))
            val_loss = evaluate(*model, *val, B, T, val_batches, inputs, targets, comm);
        // model FLOPs utilization per device and device memory, when the backend knows its peak
        const double mfu = peak > 0 ? flops_token * tok_s / cfg.world_size / peak : -1.0;
        const double mem_gib = (double)model->device_memory_used() / (1024.0 * 1024.0 * 1024.0);

        // console line
        char buf[256];
        std::snprintf(buf, sizeof buf, "step %*d/%d | loss %.4f | norm %.2f | lr %.2e | %.1f ms | %.0f tok/s | max-logit %.2f",
                      (int)std::to_string(max_steps).size(), step, max_steps, loss, norm, lr, ms_step, tok_s,
                      step_stats.overall_max());
        std::string line = buf;
        if (val_loss) line += " | val " + fmt("%.4f", *val_loss);
        if (mfu >= 0) line += " | MFU " + fmt("%.1f%%", 100.0 * mfu) + " | mem " + fmt("%.2f GiB", mem_gib);
        if (nonfinite) line += " | SKIPPED: non-finite loss or norm";
        else if (skip_spike) line += " | SKIPPED: spike (z loss " + fmt("%.1f", loss_z) + ", norm " + fmt("%.1f", norm_z) + ")";
        else if (spike) line += " | spike (z loss " + fmt("%.1f", loss_z) + ", norm " + fmt("%.1f", norm_z) + ")";
        if (!clipped.empty()) line += " | qk-clip " + std::to_string(clipped.size()) + " head(s)";
        const bool alarm_checkpoint = alarm_event.checkpoint && !out.empty();
        if (alarm_event.flagged)
            line += "\n" + logit_alarm_line(step, alarm_event, cfg.spike_window, alarm_checkpoint ? model_path(out, step) : "");
        if (main_rank) {
            std::printf("%s\n", line.c_str());
            std::fflush(stdout);
        }

        nlohmann::ordered_json rec = {{"step", step},
                              {"loss", json_float(loss)},
                              {"z_loss", json_float(zloss)},
                              {"grad_norm", json_float(norm)},
                              {"lr", lr},
                              {"ms", ms_step},
                              {"tokens_per_s", tok_s},
                              {"max_attn_logit", json_float(step_stats.overall_max())},
                              {"out_max_logit", json_float(step_stats.out_max_logit)},
                              {"loss_z", json_float(loss_z)},
                              {"norm_z", json_float(norm_z)},
                              {"spike", spike},
                              {"skipped_nonfinite", nonfinite},
                              {"skipped_spike", skip_spike}};
        if (val_loss) rec["val_loss"] = json_float(*val_loss);
        if (cfg.qk_clip > 0) {
            nlohmann::ordered_json heads = nlohmann::ordered_json::array();
            for (const ClippedHead& c : clipped) heads.push_back({c.layer, c.head});
            rec["qk_clip_heads"] = clipped.size();
            rec["qk_clipped"] = heads;  // [[layer, head], ...]
        }
        if (alarm_event.flagged) rec["logit_alarm"] = logit_alarm_json(alarm_event);
        if (mfu >= 0) {
            rec["mfu"] = mfu;
            rec["device_memory_bytes"] = model->device_memory_used();
        }
        metrics.write(rec);
        if (cfg.logit_stats_every > 0 && step % cfg.logit_stats_every == 0)
            logit_log.write(logit_stats_record(step, step_stats, model_cfg));

        if (main_rank && cfg.sample_every > 0 && cfg.gen_tokens > 0 && step % cfg.sample_every == 0) {
            std::vector<int> gen = generate(*model, {eot}, cfg.gen_tokens, model_cfg.max_seq_len, cfg.temperature, sample_rng);
            std::printf("--- sample at step %d ---\n%s\n---\n", step,
                        safe_printable(tokenizer.decode(gen.data(), gen.size())).c_str());
            std::fflush(stdout);
        }
        if (!out.empty() && ((cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) || step == max_steps ||
                             alarm_checkpoint))
            save_checkpoint(step);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// --eval-only

inline int run_eval(const TrainConfig& cfg, const BackendFactory& make_backend, Collective& comm) {
    const bool main_rank = comm.rank() == 0;
    validate_train_flags(cfg);
    if (!is_regular_file(cfg.model))
        throw InputError("--eval-only needs -e CHECKPOINT (a model file); '" + cfg.model + "' is not a file");
    std::string vocab_source;
    const int data_vocab = data_vocab_size(cfg.val_data, &vocab_source);
    ModelSetup ms = resolve_model(cfg, data_vocab);
    validate_run(cfg, ms.config, data_vocab, vocab_source);
    std::vector<DumpHead> dump_heads;  // --dump-attention
    if (!cfg.dump_attention.empty()) dump_heads = parse_dump_attention(cfg.dump_attention);
    check_dump_attention_heads(dump_heads, ms.config);
    std::vector<std::string> dump_paths;
    const int B = cfg.batch_size, T = cfg.seq_len, V = ms.config.vocab_size, Vp = ms.config.padded_vocab_size;
    DataLoader val(cfg.val_data, B, T, cfg.rank, cfg.world_size, false, cfg.seed, V, RankSplit::Rows);
    const int64_t batches = val_batch_count(cfg, val, true);

    std::unique_ptr<Backend> model = make_backend(ms.config);
    const std::string device_name = model->device_description();
    if (!dump_heads.empty()) check_dump_attention_backend(*model);
    model->set_params(ms.init->params.data());
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    double sum = 0.0;
    for (int64_t i = 0; i < batches; i++) {
        val.next_batch(inputs.data(), targets.data());
        sum += model->forward(inputs.data(), targets.data(), B, T, 0.0f, nullptr).loss;
        if (i == 0 && main_rank && !cfg.dump_logits.empty()) {  // (B, T, V) fp32: the real vocabulary of each row
            std::string bytes;
            bytes.reserve((size_t)B * T * V * sizeof(float));
            const float* lg = model->logits();
            for (size_t r = 0; r < (size_t)B * T; r++)
                bytes.append(reinterpret_cast<const char*>(lg + r * Vp), (size_t)V * sizeof(float));
            write_file_atomic(cfg.dump_logits, bytes.data(), bytes.size());
        }
        if (i == 0 && main_rank && !dump_heads.empty())  // sequence 0's (T, T) attention probabilities per head
            dump_paths = write_attention_dumps(*model, dump_heads, T, cfg.output_dir);
    }
    const double loss = comm.all_reduce_double(sum / (double)batches, ReduceOp::Avg);  // the ranks' rows
    if (!main_rank) return 0;
    const long long tokens = (long long)batches * B * T * cfg.world_size;
    std::printf("eval | device %s | model %s | %s\n", device_name.c_str(), ms.source.c_str(),
                describe_model(ms.config, model->num_params()).c_str());
    std::printf("eval loss %.6f over %lld batches of B %d x T %d%s (%lld tokens) from '%s'\n", loss, (long long)batches,
                B, T, cfg.world_size > 1 ? (" x " + std::to_string(cfg.world_size) + " processes").c_str() : "", tokens,
                cfg.val_data.c_str());
    if (!cfg.dump_logits.empty())
        std::printf("wrote the first batch's logits (%d, %d, %d) float32 to %s\n", B, T, V, cfg.dump_logits.c_str());
    for (const std::string& p : dump_paths)
        std::printf("wrote the attention probabilities (%d, %d) float32 of the first sequence to %s\n", T, T, p.c_str());
    if (!cfg.output_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(cfg.output_dir, ec);
        if (ec) throw InputError("cannot create output directory " + cfg.output_dir + " (" + ec.message() + ")");
        nlohmann::ordered_json rec = {{"model", cfg.model}, {"val_data", cfg.val_data}, {"batch_size", B}, {"seq_len", T},
                              {"batches", batches}, {"tokens", tokens}, {"loss", json_float(loss)}};
        write_text_file(cfg.output_dir + "/eval.json", json_file_text(rec));
    }
    return 0;
}

}  // namespace llmc
