// One optimizer step of the training loop (train_step), in order: zero the gradients; accum
// micro-batches of next batch, forward, backward(1/accum); the mean losses, the logit statistics (with
// the ranks' stop vote, llmc/train/interrupt.h) and the gradients reduced over the ranks; the global
// gradient norm; the spike verdict; the AdamW update
// with the step's learning rate and clipped gradients (skipped when loss or norm is not finite, or
// on a spike with --skip-spikes); QK-Clip; the spike windows and the logit alarm. Every decision
// is taken from values reduced over the ranks, so all ranks decide alike. The step is bracketed by
// Backend::on_step_begin / on_step_end (instruments: the emulated device's per-step report).
//
// Queued step (Backend::has_queued_step, the CUDA backend; see runs_queued for when): the host queues
// the whole step - micro-batches, gradient norm, AdamW with the clip factor and the non-finite skip
// decided on the device - without waiting once, ends the step's bracket, and only then waits for the
// step's numbers (one wait per step, at the step boundary). Everything the loop reports and decides
// afterwards (losses, norm, statistics, spike windows, alarm) is computed from step s's own numbers,
// exactly as on the synchronous path; the device's verdict (update applied or skipped) must equal the
// loop's rule on those numbers, which is checked every step (std::logic_error otherwise).
#pragma once
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/app/train_config.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/logit_stats.h"
#include "llmc/dist/collective.h"
#include "llmc/io/dataloader.h"
#include "llmc/train/interrupt.h"
#include "llmc/train/loop_state.h"
#include "llmc/train/qk_clip.h"
#include "llmc/train/run_plan.h"
#include "llmc/train/schedule.h"
#include "llmc/train/step_report.h"
#include "llmc/train/training_model.h"

namespace llmc {

// Host buffers the steps reuse: one micro-batch's tokens, the logit statistics of a micro-batch
// and of the whole step.
struct StepBuffers {
    std::vector<int> inputs, targets;  // (B, T)
    LogitStats micro, step;            // micro.near_distance: --near (0: not given; LogitStats)
    explicit StepBuffers(const TrainConfig& c)
        : inputs((size_t)c.batch_size * c.seq_len), targets((size_t)c.batch_size * c.seq_len) {
        micro.near_distance = c.near.value_or(0);
    }
};

struct LossSums {
    double loss = 0.0, z_loss = 0.0;  // over the micro-batches of a step
};

// zero_grad, then accum micro-batches of forward + backward(1/accum); buf.step gets their merged
// logit statistics.
inline LossSums accumulate_gradients(const TrainConfig& cfg, int accum, Backend& model, DataLoader& train,
                                     StepBuffers& buf) {
    model.zero_grad();
    LossSums sums;
    for (int mb = 0; mb < accum; mb++) {
        train.next_batch(buf.inputs.data(), buf.targets.data());
        const ForwardResult r =
            model.forward(buf.inputs.data(), buf.targets.data(), cfg.batch_size, cfg.seq_len, cfg.z_loss, &buf.micro);
        merge_logit_stats(buf.step, buf.micro, mb, accum);
        sums.loss += r.loss;
        sums.z_loss += r.z_loss;
        model.backward(1.0f / accum);
    }
    return sums;
}

// Whether the step runs queued: the backend can, one rank without ZeRO (the ranks reduce the losses and
// the norm on the host before deciding), and no decision needs the step's numbers on the host inside
// the step: --skip-spikes compares the loss and norm with the host's spike windows before the update,
// and QK-Clip rescales weights from the step's statistics right after it. (The same conditions in the
// flags' words: host_decides_inside_the_step, llmc/train/step_graph_choice.h.)
inline bool runs_queued(const TrainConfig& cfg, const TrainingModel& model, const Collective& comm) {
    return model.backend->has_queued_step() && !model.zero && comm.world_size() == 1 && !(cfg.skip_spikes > 0) &&
           !(cfg.qk_clip > 0);
}

// zero_grad, then accum micro-batches queued (forward + backward(1/accum), their numbers kept on the device).
inline void queue_gradients(const TrainConfig& cfg, int accum, Backend& model, DataLoader& train, StepBuffers& buf) {
    model.zero_grad();
    for (int mb = 0; mb < accum; mb++) {
        train.next_batch(buf.inputs.data(), buf.targets.data());
        model.queue_micro_batch(buf.inputs.data(), buf.targets.data(), cfg.batch_size, cfg.seq_len, cfg.z_loss,
                                1.0f / accum, buf.micro.near_distance);
    }
}

// The read-back numbers of a queued step as accumulate_gradients gives them: the loss sums, and the
// merged logit statistics in buf.step.
inline LossSums queued_sums(QueuedStep& q, int accum, StepBuffers& buf) {
    LossSums sums;
    for (int mb = 0; mb < accum; mb++) {
        q.stats[mb].near_distance = buf.micro.near_distance;
        merge_logit_stats(buf.step, q.stats[mb], mb, accum);
        sums.loss += q.micro[mb].loss;
        sums.z_loss += q.micro[mb].z_loss;
    }
    return sums;
}

// Averages the gradients over the ranks (-z 1: reduce-scatters them into this rank's shard) and
// returns the global gradient norm.
inline float reduced_grad_norm(TrainingModel& model, Collective& comm) {
    if (!model.zero) {
        model.backend->all_reduce_grads(comm);
        return model.backend->grad_norm();
    }
    model.backend->get_grads(model.grads_pad.data());  // entries [n, world * chunk) stay 0
    const double sq = model.zero->reduce_scatter_grads(comm, model.grads_pad.data());
    return (float)std::sqrt(comm.all_reduce_double(sq, ReduceOp::Sum));
}

// AdamW step t with learning rate lr on the gradients clipped to --grad-clip (-z 1: on this rank's
// shard, then every rank's weights are gathered).
inline void update_weights(const TrainConfig& cfg, const RunPlan& plan, TrainingModel& model, Collective& comm, int t,
                           float lr, float norm) {
    AdamWHyper hyper = plan.adamw;
    hyper.lr = lr;
    const float clip = cfg.grad_clip > 0 && norm > cfg.grad_clip ? cfg.grad_clip / norm : 1.0f;
    if (model.zero) {
        model.zero->step_and_gather(comm, hyper, t, clip, model.params_pad.data());
        model.backend->set_params(model.params_pad.data());  // its first n_params elements
    } else {
        model.backend->adamw_update(hyper, t, clip);
    }
}

// Optimizer step `step` + 1 (0-based `step` steps are done), as described at the top of this file; casts
// this rank's stop vote (interrupts.cast_vote()) into the reduction of the logit statistics.
inline StepResult train_step(const TrainConfig& cfg, const RunPlan& plan, TrainingModel& model, LoopState& loop,
                             StepBuffers& buf, Collective& comm, int step, InterruptHandlers& interrupts) {
    const auto t0 = std::chrono::steady_clock::now();
    model.backend->on_step_begin(step + 1);
    const bool queued = runs_queued(cfg, model, comm);
    LossSums sums;
    if (queued) queue_gradients(cfg, plan.accum, *model.backend, loop.train, buf);
    else sums = accumulate_gradients(cfg, plan.accum, *model.backend, loop.train, buf);
    if (cfg.debug_fail_rank == cfg.rank)  // test hook: the other ranks are about to wait for this one
        throw InputError("--debug-fail-rank " + std::to_string(cfg.rank) + ": rank " + std::to_string(cfg.rank) +
                         " fails on purpose in step " + std::to_string(step + 1) + " (test hook)");
    StepResult r;
    r.lr = learning_rate(plan.schedule, step);
    QueuedStep q;
    if (queued) {
        AdamWHyper hyper = plan.adamw;
        hyper.lr = r.lr;
        model.backend->queue_update(hyper, step + 1, cfg.grad_clip);
        model.backend->on_step_end(step + 1);  // the step is queued; what follows reads it back
        model.backend->read_queued_step(q);
        if ((int)q.micro.size() != plan.accum || (int)q.stats.size() != plan.accum)
            throw std::logic_error("train_step: the backend read back " + std::to_string(q.micro.size()) +
                                   " micro-batches of a queued step, expected " + std::to_string(plan.accum));
        sums = queued_sums(q, plan.accum, buf);
    }
    r.loss = (float)comm.all_reduce_double(sums.loss / plan.accum, ReduceOp::Avg);
    r.zloss = (float)comm.all_reduce_double(sums.z_loss / plan.accum, ReduceOp::Avg);
    reduce_logit_stats(comm, buf.step, interrupts.cast_vote());  // the stop vote rides on its Max all-reduce
    r.norm = queued ? q.norm : reduced_grad_norm(model, comm);
    r.loss_z = loop.loss_spikes.zscore(r.loss);
    r.norm_z = loop.norm_spikes.zscore(r.norm);
    r.nonfinite = !std::isfinite(r.loss) || !std::isfinite(r.norm);
    r.spike = r.loss_z > cfg.spike_z || r.norm_z > cfg.spike_z;  // NaN (window not full) is false
    r.skip_spike = !r.nonfinite && cfg.skip_spikes > 0 && (r.loss_z > cfg.skip_spikes || r.norm_z > cfg.skip_spikes);
    if (queued) {  // the update was decided on the device: it must be the rule's decision on these numbers
        if (q.applied != (!r.nonfinite && !r.skip_spike))
            throw std::logic_error("train_step: the device " + std::string(q.applied ? "applied" : "skipped") +
                                   " the update of step " + std::to_string(step + 1) +
                                   " against the loop's rule (loss " + std::to_string(r.loss) + ", norm " +
                                   std::to_string(r.norm) + ")");
    } else if (!r.nonfinite && !r.skip_spike) {
        update_weights(cfg, plan, model, comm, step + 1, r.lr, r.norm);
    }
    // QK-Clip after every step (also a skipped one: the logits exceeded TAU on the current weights)
    if (cfg.qk_clip > 0) r.clipped = apply_qk_clip(cfg.qk_clip, buf.step, plan.model, *model.backend, model.zero.get());
    loop.loss_spikes.push(r.loss);
    loop.norm_spikes.push(r.norm);
    r.step = step + 1;
    // every step, rules on or off, so a checkpoint's alarm window is always the last W steps'
    r.alarm = loop.alarm.observe(r.step, buf.step);
    r.alarm_checkpoint = r.alarm.checkpoint && !cfg.output_dir.empty();
    if (!queued) model.backend->on_step_end(step + 1);
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.tokens_per_s = (double)cfg.batch_size * cfg.seq_len * plan.accum * cfg.world_size / (r.ms / 1000.0);
    return r;
}

}  // namespace llmc
