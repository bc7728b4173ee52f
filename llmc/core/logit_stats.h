// Attention-logit statistics (LogitStats): what the attention kernels and the classifier record
// in a forward pass, and how the training loop combines them over the micro-batches of a step
// (merge_logit_stats) and over the ranks (reduce_logit_stats). The combination is the same for
// every statistic kind: maxima by max, minima by min, means by mean.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "llmc/dist/collective.h"

namespace llmc {

// Attention-logit statistics of one forward pass (schema: docs/formats.md), filled by the attention
// kernel itself (never from a materialized T x T matrix). Indexed [layer * NH + head].
struct LogitStats {
    int num_layers = 0, num_heads = 0;
    std::vector<float> max_logit;  // max pre-softmax logit q.k/sqrt(hd) over unmasked pairs
    std::vector<float> min_logit;  //   (after QK-norm, before soft-capping)
    std::vector<float> entropy;    // mean over query rows of the attention distribution's entropy (nats)
    float out_max_logit = 0.0f;    // max output-softmax logit over the batch (real vocabulary only)
    float out_mean_lse = 0.0f;     // mean over positions of logsumexp(output logits)
    // Near/far statistics (docs/training.md). Key j of query i (j <= i, visible to the head) is "near" when
    // its distance i - j < N, else "far"; N = near_distance, or the model's window P when that is 0
    // (near_or). near_distance 0 means "not asked for" (no --near): the CPU backend computes them anyway
    // at P, the CUDA backend does not (its kernels compute them only when asked) and leaves them empty.
    int near_distance = 0;              // input set by the caller before forward: --near, or 0
    std::vector<float> near_mass;       // mean over query rows of the softmax probability on near keys
                                        //   (far mass = 1 - near_mass)
    std::vector<float> near_max_logit;  // max pre-softmax logit over near keys (as max_logit: after
    std::vector<float> far_max_logit;   //   QK-norm, before soft-cap) / over far keys; -inf: no far key
    int near_or(int window) const { return near_distance > 0 ? near_distance : window; }
    bool has_near_far() const { return !near_mass.empty(); }
    // Sizes the per-head vectors for L x NH; the near/far ones are emptied (resize_near fills them).
    void resize(int L, int NH) {
        num_layers = L;
        num_heads = NH;
        max_logit.assign((size_t)L * NH, 0.0f);
        min_logit.assign((size_t)L * NH, 0.0f);
        entropy.assign((size_t)L * NH, 0.0f);
        near_mass.clear();
        near_max_logit.clear();
        far_max_logit.clear();
    }
    void resize_near(int L, int NH) {
        near_mass.assign((size_t)L * NH, 0.0f);
        near_max_logit.assign((size_t)L * NH, 0.0f);
        far_max_logit.assign((size_t)L * NH, 0.0f);
    }
    float overall_max() const {
        float m = max_logit.empty() ? 0.0f : max_logit[0];
        for (float v : max_logit) m = v > m ? v : m;
        return m;
    }
};

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

// The step's logit statistics over all ranks: max of maxima, min of minima, mean of the means.
// carried_max, when given: one more value of the caller's that needs the Max over the ranks, reduced in
// place in the same all-reduce as the output max logit, so that it costs no collective call of its own
// (the ranks' stop vote, llmc/train/interrupt.h).
inline void reduce_logit_stats(Collective& comm, LogitStats& s, float* carried_max = nullptr) {
    if (comm.world_size() == 1) return;
    comm.all_reduce(s.max_logit.data(), s.max_logit.size(), ReduceOp::Max);
    comm.all_reduce(s.min_logit.data(), s.min_logit.size(), ReduceOp::Min);
    comm.all_reduce(s.entropy.data(), s.entropy.size(), ReduceOp::Avg);
    if (s.has_near_far()) {  // every rank runs the same backend: all have them or none
        comm.all_reduce(s.near_mass.data(), s.near_mass.size(), ReduceOp::Avg);
        comm.all_reduce(s.near_max_logit.data(), s.near_max_logit.size(), ReduceOp::Max);
        comm.all_reduce(s.far_max_logit.data(), s.far_max_logit.size(), ReduceOp::Max);
    }
    float maxima[2] = {s.out_max_logit, carried_max ? *carried_max : 0.0f};
    comm.all_reduce(maxima, carried_max ? 2 : 1, ReduceOp::Max);
    float mean_lse = s.out_mean_lse;
    comm.all_reduce(&mean_lse, 1, ReduceOp::Avg);
    s.out_max_logit = maxima[0];
    s.out_mean_lse = mean_lse;
    if (carried_max) *carried_max = maxima[1];
}

}  // namespace llmc
