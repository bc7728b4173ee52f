// CudaBackend's queued step (Backend::has_queued_step): a training step issued without a host
// synchronisation, and with --cuda-graph as one CUDA graph (llmc/cuda/step_graph.cuh). The class and
// its buffers: llmc/cuda/gpt2_cuda_backend.cuh; the passes it issues: llmc/cuda/gpt2_cuda.cuh.
//
// A step, in order:
//   zero_grad          opens the step: its slots start at 0, the device's running loss sum and the
//                      gradients are zeroed (with the graph: nothing issued, the step's plan cleared)
//   queue_micro_batch  per micro-batch: its tokens staged in the next slot of page-locked memory
//                      (stage_tokens); then its forward (queue_forward) and backward issued; with the
//                      graph: its shape added to the plan instead
//   queue_update       the norm, AdamW with the device's verdict and clip factor, the copies of the norm
//                      and the verdict (issue_update); with the graph: the planned step launched as the
//                      graph captured from an identical plan, or captured and launched (two parts: the
//                      host groups the micro-batches' positions by token between their launches, while
//                      the device runs the first), or issued eagerly (issue_step); then step_done_ recorded
//   read_queued_step   the step's only host wait (step_done_), then every slot read (read_slot)
//
// Slots: pass k of a step stages its tokens and their groups by token in slot k of tokens_pinned_
// (ensure_token_staging) and gets its classifier summary and attention statistics copied into slot k
// of summary_pinned_ / stats_pinned_ (ensure_slots). A slot is rewritten only after the uploads that
// read it have run (staged_in_flight_, groups_in_flight_; note_stream_idle after every host wait).
// Growing the staging or the slots moves buffers a captured graph holds: buffers_epoch_ moves with them.
#pragma once
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/core/token_groups.h"
#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/classifier.cuh"
#include "llmc/cuda/global_norm.cuh"
#include "llmc/cuda/gpt2_cuda_backend.cuh"
#include "llmc/cuda/step_graph.cuh"

namespace llmc::cuda {

// Also starts a new queued step: its micro-batch slots and the device's running loss sum. With
// the step graph (use_step_graph) the step's work is issued at queue_update, as one graph.
inline void CudaBackend::zero_grad() {
    if (!use_graph_) issue_zero_grad();
    graph_step_open_ = use_graph_;
    plan_ = StepPlan();
    queued_ = 0;
    update_queued_ = false;
}

// ---- a step without host synchronisation (Backend::has_queued_step). Each micro-batch's summary
// (classifier_summary: 4 doubles) and attention statistics are copied asynchronously into its slot
// of pinned host memory; queue_update queues the norm, AdamW with the device's verdict and clip
// factor, the copies of the norm and the verdict, and records step_done_; read_queued_step waits
// for that event (the step's only wait) and reads the slots.
inline void CudaBackend::queue_micro_batch(const int* inputs, const int* targets, int B, int T, float z_weight,
                                           float grad_scale, int near_distance) {
    if (!targets) throw std::logic_error("CudaBackend::queue_micro_batch needs targets");
    if (use_graph_) {  // staged now, issued at queue_update (the tokens grouped there)
        check_batch(inputs, targets, B, T);
        stage_tokens(queued_, inputs, targets, B, T);
        plan_.micro.push_back({B, T, z_weight, grad_scale, near_distance});
        queued_++;
        return;
    }
    queue_forward(inputs, targets, B, T, z_weight, true, near_distance, grad_scale);
    queued_++;
    backward(grad_scale);
}

// Step t's lr and bias corrections go to the device through page-locked memory inside the step
// (issue_update). With the step graph: the step just planned is launched as the graph captured
// from an identical plan; else, when it repeats the last step issued eagerly (so every buffer is
// allocated and every shape seen), it is captured and launched; else issued eagerly.
inline void CudaBackend::queue_update(const AdamWHyper& h, int t, float grad_clip) {
    *step_pinned_.get() = detail::adamw_step_scalars(h.lr, h.beta1, h.beta2, t);
    if (use_graph_) {
        if (plan_.micro.empty()) throw std::logic_error("CudaBackend::queue_update needs a queued micro-batch");
        graph_step_open_ = false;
        plan_.beta1 = h.beta1;
        plan_.beta2 = h.beta2;
        plan_.eps = h.eps;
        plan_.weight_decay = h.weight_decay;
        plan_.grad_clip = grad_clip;
        plan_.buffers_epoch = buffers_epoch_;
        // between the graph's two launches (the first part ends before the first groups upload): every
        // micro-batch's positions grouped by token into its slot, which the second part's copies read
        const auto group_slots = [&] {
            for (size_t k = 0; k < plan_.micro.size(); k++) group_slot((int)k, plan_.micro[k].B * plan_.micro[k].T);
        };
        if (graph_.matches(plan_)) {
            graph_.launch(stream_, group_slots);
            add_replayed_gemms(mm_, graph_gemms_);
            note_issued_step(plan_);
        } else if (plan_ == eager_plan_) {
            const GemmCounts before = gemms_issued(mm_);
            capturing_step_graph_ = true;
            struct Done {
                bool& flag;
                ~Done() { flag = false; }
            } done{capturing_step_graph_};
            graph_.capture_and_launch(
                stream_, plan_,
                [&] {
                    issue_step(plan_, h, grad_clip);
                    if (graph_.parts() != 1)  // part one ended at the split, part two is being captured
                        throw std::logic_error(
                            "CudaBackend::queue_update: the step's capture has no split before its groups upload; "
                            "grouping between the launches would race the upload");
                },
                group_slots);
            graph_gemms_ = gemms_between(before, gemms_issued(mm_));
            note_issued_step(plan_);
        } else {
            graph_.reset();
            issue_step(plan_, h, grad_clip);
            eager_plan_ = plan_;
            eager_plan_.buffers_epoch = buffers_epoch_;  // after whatever the step allocated
        }
    } else {
        issue_update(h, grad_clip);
    }
    CUDA_CHECK(cudaEventRecord(step_done_, stream_));
    update_queued_ = true;
}

// --cuda-graph: queued steps and KV decode steps run as CUDA graphs (llmc/cuda/step_graph.cuh), the
// same work with the same bits as without.
inline void CudaBackend::use_step_graph(bool on) {
    graph_.reset();
    dec_graph_.reset();
    use_graph_ = on;
    eager_plan_ = StepPlan();
    dec_eager_plan_ = DecodePlan();
}

// --pdl: the backend's kernels (training steps, --eval-only's forward, the generator's prefill and KV
// decode steps) launched with programmatic stream serialization (llmc/cuda/launch.cuh). Needs sm_90.
// A graph captured before a switch is dropped, so the next step captures the launches anew.
inline void CudaBackend::use_programmatic_launch(bool on) {
    if (on) {
        const DeviceInfo d = current_device_info();
        if (d.sm_major < 9)
            throw InputError(
                "--pdl 1 needs programmatic dependent launch, on GPUs of compute capability 9.0 or "
                "newer; " +
                d.name + " is " + std::to_string(d.sm_major) + "." + std::to_string(d.sm_minor) + ": drop --pdl 1");
    }
    programmatic_launch_ = on;
    graph_.reset();
    dec_graph_.reset();
    eager_plan_ = StepPlan();
    dec_eager_plan_ = DecodePlan();
}

inline void CudaBackend::read_queued_step(QueuedStep& out) {
    if (!update_queued_) throw std::logic_error("CudaBackend::read_queued_step needs queue_update first");
    CUDA_CHECK(cudaEventSynchronize(step_done_));
    note_stream_idle();  // step_done_ follows every upload of the step
    out.micro.resize(queued_);
    out.stats.resize(queued_);
    for (int k = 0; k < queued_; k++) out.micro[k] = read_slot(k, &out.stats[k]);
    out.norm = (float)std::sqrt((double)norm_pinned_.get()[0]);  // grad_norm()'s expression
    out.applied = applied_pinned_.get()[0] != 0;
}

// Queues a forward over (B, T) (the body of forward()); with targets or stats, also the classifier
// pass, its summary and the copies of the summary and the attention statistics into slot queued_
// of the pinned buffers, and returns that slot (-1: logits only, nothing to read). near_distance
// (LogitStats::near_distance) >= 1 with stats: the near/far statistics at that distance too; 0:
// not asked for, not computed (a run without --near pays nothing for them).
inline int CudaBackend::queue_forward(const int* inputs, const int* targets, int B, int T, float z_weight,
                                      bool with_stats, int near_distance, float grad_scale) {
    check_batch(inputs, targets, B, T);
    stage_tokens(queued_, inputs, targets, B, T);
    return issue_forward(queued_, B, T, z_weight, targets != nullptr, with_stats, near_distance, grad_scale);
}

// The tokens of the pass in slot `slot` (inputs, and targets when not null) into its page-locked
// staging, which the pass's upload reads when it runs (so a queued step, or a graph, may stage
// them before issuing its work).
inline void CudaBackend::stage_tokens(int slot, const int* inputs, const int* targets, int B, int T) {
    const size_t N = (size_t)B * T;
    ensure_token_staging((size_t)slot + 1, N);
    if (staged_in_flight_[slot]) {  // an upload of the slot's tokens may not have run yet
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        note_stream_idle();
    }
    int* dst = slot_inputs(slot);
    std::copy(inputs, inputs + N, dst);
    if (targets) std::copy(targets, targets + N, dst + token_stride_);
    slot_grouped_[slot] = false;
}

// The positions of the inputs staged in `slot` (n of them) grouped by token into the slot's groups
// (llmc/core/token_groups.h), which the backward uploads for the encoder backward. Waits only if
// the slot's last groups upload may not have run yet (no flow of the training loop leaves one:
// every step and every synchronous forward waits for the stream first).
inline void CudaBackend::group_slot(int slot, int n) {
    if (groups_in_flight_[slot]) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        note_stream_idle();
    }
    group_tokens(slot_groups(slot), slot_inputs(slot), n, cfg_.padded_vocab_size, group_scratch_);
    slot_grouped_[slot] = true;
}

// Staging for `slots` passes of up to `rows` tokens; growing waits for the queued uploads (a
// host synchronisation: only when a step has more passes or rows than any before) and keeps what
// is staged (a graph step stages every micro-batch before it issues any).
inline void CudaBackend::ensure_token_staging(size_t slots, size_t rows) {
    const size_t old_stride = token_stride_, old_slot_stride = slot_stride_;
    const size_t old_slots = old_slot_stride ? tokens_pinned_.size() / old_slot_stride : 0;
    if (slots <= old_slots && rows <= old_stride) return;
    const size_t stride = std::max(rows, old_stride), cap = std::max(slots, 2 * old_slots);
    const size_t slot_stride = 2 * stride + token_groups_ints((int)stride, cfg_.padded_vocab_size);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::vector<int> kept(tokens_pinned_.get(), tokens_pinned_.get() + tokens_pinned_.size());
    tokens_pinned_.resize(cap * slot_stride);
    for (size_t k = 0; k < old_slots; k++) {  // inputs, targets, groups at their new offsets
        const auto from = kept.begin() + k * old_slot_stride;
        int* to = tokens_pinned_.get() + k * slot_stride;
        std::copy(from, from + old_stride, to);
        std::copy(from + old_stride, from + 2 * old_stride, to + stride);
        std::copy(from + 2 * old_stride, from + old_slot_stride, to + 2 * stride);
    }
    token_stride_ = stride;
    slot_stride_ = slot_stride;
    staged_in_flight_.assign(cap, false);  // the synchronization above completed every upload
    groups_in_flight_.assign(cap, false);
    slot_grouped_.resize(cap, false);
    buffers_epoch_++;
}

// The host waited for everything issued on the stream: no upload still reads the staging.
inline void CudaBackend::note_stream_idle() {
    std::fill(staged_in_flight_.begin(), staged_in_flight_.end(), false);
    std::fill(groups_in_flight_.begin(), groups_in_flight_.end(), false);
    dec_in_in_flight_ = false;
}

// Pinned slots for at least k passes. Growing waits for the queued copies into the old slots
// (a host synchronisation, only when a step has more micro-batches than any before).
inline void CudaBackend::ensure_slots(int k) {
    if ((size_t)k <= slot_rows_.size()) return;
    const size_t old = slot_rows_.size(), cap = std::max<size_t>((size_t)k, 2 * old);
    const size_t F = detail::kSummaryFields, S = attn_stats_.size();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<double> summaries(summary_pinned_.get(), summary_pinned_.get() + old * F);
    std::vector<float> stats(stats_pinned_.get(), stats_pinned_.get() + old * S);
    summary_pinned_.resize(cap * F);
    stats_pinned_.resize(cap * S);
    std::copy(summaries.begin(), summaries.end(), summary_pinned_.get());
    std::copy(stats.begin(), stats.end(), stats_pinned_.get());
    slot_rows_.resize(cap, 0);
    slot_near_.resize(cap, 0);
    buffers_epoch_++;
}

// ---- a queued step's work (queue_micro_batch / queue_update issue it as they come; with the step
// graph, issue_step issues a whole planned step at queue_update, eagerly or into a capture)
inline void CudaBackend::issue_zero_grad() {
    CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
    CUDA_CHECK(cudaMemsetAsync(loss_check_.get(), 0, loss_check_.bytes(), stream_));
}

// The norm, then AdamW with the device's verdict and clip factor and the step's scalars copied
// from step_pinned_ (which queue_update wrote), then the copies of the norm and the verdict.
inline void CudaBackend::issue_update(const AdamWHyper& h, float grad_clip) {
    global_norm_squared(norm_.get(), grads_.get(), layout_.total, scratch_.get(), arrivals_.get(), launch_stream());
    CUDA_CHECK(
        cudaMemcpyAsync(step_dev_.get(), step_pinned_.get(), step_dev_.bytes(), cudaMemcpyHostToDevice, stream_));
    detail::AdamWGate gate;
    gate.norm_sq = norm_.get();
    gate.loss_check = loss_check_.get();
    gate.grad_clip = grad_clip;
    gate.applied = applied_dev_.get();
    gate.step = step_dev_.get();
    adamw_update_all(working_copy_target(), master_.get(), grads_.get(), m_.get(), v_.get(),
                     segments_with_decay(h.weight_decay), h.lr, h.beta1, h.beta2, h.eps, 0, gate, launch_stream());
    CUDA_CHECK(cudaMemcpyAsync(norm_pinned_.get(), norm_.get(), sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(
        cudaMemcpyAsync(applied_pinned_.get(), applied_dev_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
}

// The whole planned step, its micro-batches' tokens already staged in slots 0.. (queue_micro_batch).
inline void CudaBackend::issue_step(const StepPlan& plan, const AdamWHyper& h, float grad_clip) {
    issuing_step_ = true;
    struct Done {
        bool& flag;
        ~Done() { flag = false; }
    } done{issuing_step_};
    issue_zero_grad();
    queued_ = 0;
    for (const StepPlan::Micro& m : plan.micro) {
        issue_forward(queued_, m.B, m.T, m.z_weight, true, true, m.near_distance, m.grad_scale);
        queued_++;
        backward(m.grad_scale);
    }
    issue_update(h, grad_clip);
}

// With the step graph, zero_grad opens a step whose work waits for queue_update: the gradients,
// and whatever reads or updates them, are not the step's until then (the training loop never
// mixes the two; this refuses it).
inline void CudaBackend::check_no_open_graph_step(const char* call) const {
    if (graph_step_open_)
        throw std::logic_error(std::string("CudaBackend::") + call +
                               " between zero_grad and queue_update with the step graph on; a step is zero_grad, "
                               "queue_micro_batch per micro-batch, queue_update");
}

// The host's record of a step that a graph launch issued: what issue_step would have left, and the
// uploads of its slots in flight (the launch queued them; the capture does not mark the groups upload).
inline void CudaBackend::note_issued_step(const StepPlan& plan) {
    for (size_t k = 0; k < plan.micro.size(); k++) {
        const StepPlan::Micro& m = plan.micro[k];
        slot_rows_[k] = (size_t)m.B * m.T;
        slot_near_[k] = m.near_distance;
        staged_in_flight_[k] = true;
        groups_in_flight_[k] = true;
    }
    const StepPlan::Micro& last = plan.micro.back();
    B_ = last.B;
    T_ = last.T;
    z_weight_ = last.z_weight;
    has_targets_ = true;
    logits_state_ = LogitsState::Overwritten;  // the last backward turned the logits into dlogits
    queued_ = (int)plan.micro.size();
}

// The numbers of slot k (its copies have completed): the losses as means over its rows and, when
// stats != nullptr, the attention and output-logit statistics.
inline ForwardResult CudaBackend::read_slot(int k, LogitStats* stats) const {
    const int L = cfg_.num_layers, NH = cfg_.num_heads;
    const double* sum = summary_pinned_.get() + (size_t)k * detail::kSummaryFields;
    const double N = (double)slot_rows_[k];
    ForwardResult res;
    res.loss = (float)(sum[detail::kSumCE] / N);
    res.z_loss = (float)(sum[detail::kSumZ] / N);
    if (!stats) return res;
    stats->resize(L, NH);
    const bool near = slot_near_[k] > 0;
    if (near) stats->resize_near(L, NH);
    for (int l = 0; l < L; l++) {
        const float* s = stats_pinned_.get() + (size_t)k * attn_stats_.size() + (size_t)l * kAttnStatsNear * NH;
        for (int h = 0; h < NH; h++) {
            const size_t i = (size_t)l * NH + h;
            stats->max_logit[i] = s[kAttnMax * NH + h];
            stats->min_logit[i] = s[kAttnMin * NH + h];
            stats->entropy[i] = (float)((double)s[kAttnEntropySum * NH + h] / N);
            if (!near) continue;
            stats->near_mass[i] = (float)((double)s[kAttnNearMassSum * NH + h] / N);
            stats->near_max_logit[i] = s[kAttnNearMax * NH + h];
            stats->far_max_logit[i] = s[kAttnFarMax * NH + h];
        }
    }
    stats->out_max_logit = (float)sum[detail::kMaxRowMax];
    stats->out_mean_lse = (float)(sum[detail::kSumLse] / N);
    return res;
}

}  // namespace llmc::cuda
