// TrainingModel: the model a run trains, i.e. the backend plus what the optimizer keeps beside it
// (with -z 1 this rank's ZeRO-1 shard, llmc/dist/zero.h), built with the run's starting weights
// (build_model), and its checkpoints (save_checkpoint, the directory's protocol in
// llmc/io/checkpoint_dir.h).
#pragma once
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llmc/app/train_config.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/dist/collective.h"
#include "llmc/dist/zero.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/core/kernel_profile.h"
#include "llmc/io/train_state.h"
#include "llmc/train/loop_state.h"
#include "llmc/train/run_plan.h"
#include "llmc/train/step_graph_choice.h"

namespace llmc {

using BackendFactory = std::function<std::unique_ptr<Backend>(const ModelConfig&)>;
// The profiler of --profile-steps for a backend (llmc/app/backends.h make_step_profiler).
using ProfilerFactory = std::function<std::unique_ptr<StepProfiler>(const Backend&)>;

struct TrainingModel {
    std::unique_ptr<Backend> backend;
    std::string device;                        // Backend::device_description()
    std::string step_graph;                    // how the steps are issued (choose_step_graph), "" on the CPU
    std::unique_ptr<Zero1Optimizer> zero;      // -z 1: this rank's shard of master weights and moments
    std::vector<float> params_buf;             // (num_params) host copy of the weights (scratch)
    std::vector<float> grads_pad, params_pad;  // -z 1: (world * chunk) padded full vectors
};

// -z 1: this rank's shard of the master weights and moments (the checkpoint's when resuming).
inline void start_zero1(const TrainConfig& cfg, const RunPlan& plan, TrainingModel& t) {
    t.zero = std::make_unique<Zero1Optimizer>(param_layout(plan.model), cfg.rank, cfg.world_size);
    t.grads_pad.assign(t.zero->padded_total(), 0.0f);
    t.params_pad.assign(t.zero->padded_total(), 0.0f);
    t.params_buf.resize(t.backend->num_params());
    t.backend->get_params(t.params_buf.data());
    if (plan.resume) {
        const TrainState& st = plan.resume->state;
        t.zero->load(t.params_buf.data(), st.m.data(), st.v.data(), st.master.empty() ? nullptr : st.master.data());
    } else {
        t.zero->load(t.params_buf.data(), nullptr, nullptr, nullptr);
    }
}

// The backend with the starting weights (the checkpoint's, -e's, or its own initialization; rank
// 0's on every rank) and the checkpoint's AdamW moments.
inline TrainingModel build_model(const TrainConfig& cfg, const RunPlan& plan, const BackendFactory& make_backend,
                                 Collective& comm) {
    TrainingModel t;
    t.backend = make_backend(plan.model);
    Backend& model = *t.backend;
    t.device = model.device_description();
    const StepGraphChoice graph = choose_step_graph(cfg, plan.accum, model.has_step_graph(), model.name());
    if (graph.on) model.use_step_graph(true);
    t.step_graph = graph.words;
    if (const std::string pdl = use_pdl_if_asked(cfg, model); !pdl.empty()) t.step_graph += "; " + pdl;
    const size_t n = model.num_params();
    if (plan.resume) {
        model.set_params(plan.resume->model.params.data());
        model.set_optimizer_state(plan.resume->state.m.data(), plan.resume->state.v.data());
    } else if (plan.init) {
        model.set_params(plan.init->params.data());
    }
    if (cfg.world_size > 1) {  // every rank starts from rank 0's weights
        t.params_buf.resize(n);
        model.get_params(t.params_buf.data());
        comm.broadcast(t.params_buf.data(), n, 0);
        model.set_params(t.params_buf.data());
    }
    if (cfg.zero_stage == 1) start_zero1(cfg, plan, t);
    return t;
}

// The weights (into model.params_buf) and the AdamW state of a checkpoint. -z 1 gathers the
// shards: every rank's state file holds the full m, v and master weights.
inline void read_optimizer_state(TrainingModel& model, Collective& comm, TrainState& st) {
    const size_t n = model.backend->num_params();
    model.params_buf.resize(n);
    if (model.zero) {
        std::vector<float> m_buf(model.zero->padded_total()), v_buf(model.zero->padded_total());
        model.zero->gather_state(comm, m_buf.data(), v_buf.data(), model.params_pad.data());
        st.m.assign(m_buf.begin(), m_buf.begin() + (long)n);
        st.v.assign(v_buf.begin(), v_buf.begin() + (long)n);
        st.master.assign(model.params_pad.begin(), model.params_pad.begin() + (long)n);
        std::copy(st.master.begin(), st.master.end(), model.params_buf.begin());
    } else {
        // the model file is fp32: it is the master copy of the weights (st.master stays empty)
        model.backend->get_params(model.params_buf.data());
        st.m.resize(n);
        st.v.resize(n);
        model.backend->get_optimizer_state(st.m.data(), st.v.data());
    }
}

// The checkpoints in out that pruning keeps for the logit alarm: its pinned alarm checkpoints `pins`
// (LogitAlarm::pinned_steps: the weights after each spiking step's update) and, for each, the newest
// complete checkpoint before it (the weights the spiking step's forward started from: a fork there
// replays the spike bit for bit, e.g. with another stabilizer).
inline std::vector<int> alarm_pins(const std::string& out, std::vector<int> pins) {
    if (pins.empty()) return pins;
    const std::vector<int> complete = complete_steps(out);  // ascending
    const size_t alarms = pins.size();
    for (size_t i = 0; i < alarms; i++) {
        const auto at = std::lower_bound(complete.begin(), complete.end(), pins[i]);
        if (at != complete.begin()) pins.push_back(*(at - 1));
    }
    return pins;
}
inline std::vector<int> alarm_pins(const std::string& out, const LogitAlarm& alarm) {
    return alarm_pins(out, alarm.pinned_steps());
}

// Checkpoint `step` in -o: the model file (rank 0; recording `tokenizer_id`, the training data's
// tokenizer.bin FNV-1a 64, 0 unknown) and this rank's training state (weights'
// optimizer state and the loop's); once every rank's files exist, the DONE marker with the fingerprint
// of the settings that trained the step (`settings`, llmc/app/run_record.h) and the pruning (rank 0; the
// logit alarm's pinned checkpoints are kept: alarm_pins). Returns the steps it deleted, ascending (none on
// other ranks), for the caller to say after the checkpoint's own line (pruned_checkpoint_lines).
inline std::vector<int> save_checkpoint(const TrainConfig& cfg, const ModelConfig& m, uint64_t tokenizer_id, int step,
                                        TrainingModel& model, const LoopState& loop, Collective& comm,
                                        const std::string& settings) {
    TrainState st;
    st.step = step;
    st.rank = cfg.rank;
    st.world_size = cfg.world_size;
    read_optimizer_state(model, comm, st);
    loop.to_train_state(st);
    const std::string& out = cfg.output_dir;
    if (cfg.rank == 0)
        save_model_checkpoint(model_path(out, step), m, model.params_buf.data(), step, false, cfg.seq_len,
                              tokenizer_id);
    save_train_state(state_path(out, step, cfg.rank), m, st);
    comm.barrier();  // every rank's files exist before the marker
    if (cfg.rank != 0) return {};
    write_done_marker(out, step, cfg.world_size, settings);
    return prune_checkpoints(out, cfg.keep_checkpoints, step, alarm_pins(out, loop.alarm));
}

// One stderr line per checkpoint save_checkpoint deleted: "pruned checkpoint of step 8 (--keep-checkpoints 2)".
inline std::string pruned_checkpoint_lines(const std::vector<int>& pruned, int keep) {
    std::string text;
    for (const int step : pruned)
        text += "pruned checkpoint of step " + std::to_string(step) + " (--keep-checkpoints " + std::to_string(keep) +
                ")\n";
    return text;
}

// A resume or fork that gives --keep-checkpoints K for the first time, or lowers it, prunes checkpoints
// the run already had at its next save; so does one that lowers --logit-alarm-keep (or gives it where it
// was 0, keep all), whose alarm checkpoints then lose their pin: the note that says how many, and which
// ("" otherwise, and when this run saves nothing or keeps every checkpoint).
inline std::string keep_checkpoints_note(const TrainConfig& cfg, const RunPlan& plan, const LoopState& loop) {
    if (!plan.resume || cfg.output_dir.empty() || plan.start_step() >= plan.max_steps) return "";
    const int keep = cfg.keep_checkpoints;
    if (keep <= 0) return "";
    const auto lowered = [](int was, int now) { return now > 0 && (was <= 0 || now < was); };
    for (const SettingChange& c : cfg.record_changes) {
        if (!c.old_value.is_number_integer()) continue;
        const int was = c.old_value.get<int>();
        std::string why;
        if (c.flag == "--keep-checkpoints" && lowered(was, keep))
            why = "--keep-checkpoints " + std::to_string(keep) + " (was " + std::to_string(was) + ") keeps " +
                  (keep == 1 ? std::string("the newest checkpoint")
                             : "the newest " + std::to_string(keep) + " checkpoints");
        else if (c.flag == "--logit-alarm-keep" && lowered(was, cfg.logit_alarm_keep))
            why = "--logit-alarm-keep " + std::to_string(cfg.logit_alarm_keep) + " (was " + std::to_string(was) +
                  ") pins only the newest " +
                  (cfg.logit_alarm_keep == 1 ? std::string("alarm checkpoint")
                                             : std::to_string(cfg.logit_alarm_keep) + " alarm checkpoints") +
                  " past --keep-checkpoints " + std::to_string(keep);
        else continue;
        std::vector<int> doomed = steps_next_save_prunes(cfg.output_dir, keep, alarm_pins(cfg.output_dir, loop.alarm));
        if (c.flag == "--logit-alarm-keep") {  // only what loses its pin: the rest goes under the old keep too
            const std::vector<int>& alarms = loop.alarm.checkpoint_steps();
            const size_t k = was > 0 ? std::min(alarms.size(), (size_t)was) : alarms.size();
            const std::vector<int> doomed_before = steps_next_save_prunes(
                cfg.output_dir, keep,
                alarm_pins(cfg.output_dir, std::vector<int>(alarms.end() - (long)k, alarms.end())));
            const auto before = [&](int s) {
                return std::find(doomed_before.begin(), doomed_before.end(), s) != doomed_before.end();
            };
            doomed.erase(std::remove_if(doomed.begin(), doomed.end(), before), doomed.end());
        }
        if (doomed.empty()) continue;
        std::string steps;
        for (const int s : doomed) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
        const size_t existing = complete_steps(cfg.output_dir).size();
        return "note: " + why + ": the next save deletes " + std::to_string(doomed.size()) + " of the " +
               std::to_string(existing) + " existing checkpoint" + (existing == 1 ? "" : "s") + " in " +
               cfg.output_dir + " (step" + (doomed.size() == 1 ? " " : "s ") + steps + ")";
    }
    return "";
}

}  // namespace llmc
