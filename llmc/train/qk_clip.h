// QK-Clip (Kimi K2, arXiv 2507.20534), the fourth stabilizer beside QK-norm, z-loss and soft-capping.
// After an optimizer step, every head h of layer l whose max pre-softmax logit over the step's
// batch S = max q.k/sqrt(hd) (LogitStats::max_logit, over every micro-batch and rank) exceeds tau
// has its query and key projections scaled by gamma = sqrt(tau / S):
//   qkvw rows  h*hd .. h*hd+hd-1 (q) and C+h*hd .. C+h*hd+hd-1 (k) of layer l   (each row: C weights)
//   qkvb        the same 2*hd entries                                          (biases)
// q and k are linear in these, so every logit of that head becomes gamma^2 = tau/S times what it
// was. S comes from the step's forward (the weights before the update) and the scale is applied to
// the updated weights (as Kimi K2's MuonClip): the pre-update weights, scaled, would give max tau on
// that batch; the updated ones give near tau. Other heads are untouched bit for bit.
// The AdamW moments are left alone (as in Kimi K2). With --qk-norm the logits do not depend on
// the scale of the projections, so the combination is refused (validate_run).
// Deterministic: the decision uses only the reduced statistics every rank holds, so all ranks
// scale identically and a resumed run repeats an uninterrupted one bit for bit.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "llmc/core/backend.h"
#include "llmc/core/model_config.h"
#include "llmc/core/param_scale.h"
#include "llmc/core/params.h"
#include "llmc/dist/zero.h"

namespace llmc {

struct ClippedHead {
    int layer, head;
    float max_logit;  // S, the statistic that triggered the clip
    float gamma;      // sqrt(tau / S), the factor applied to the head's q and k projections
};

// The heads to clip for threshold tau > 0 (non-finite statistics never trigger a clip: a step
// whose logits overflowed is skipped by the loop, and scaling by 0 would destroy the head).
inline std::vector<ClippedHead> qk_clip_heads(const LogitStats& s, float tau) {
    std::vector<ClippedHead> out;
    for (int l = 0; l < s.num_layers; l++)
        for (int h = 0; h < s.num_heads; h++) {
            const float S = s.max_logit[(size_t)l * s.num_heads + h];
            if (std::isfinite(S) && S > tau) out.push_back({l, h, S, (float)std::sqrt((double)tau / (double)S)});
        }
    return out;
}

// The parameter runs QK-Clip scales for these heads: per head, 2 weight blocks of hd*C and (when the
// model has biases) 2 bias runs of hd.
inline std::vector<ParamScale> qk_clip_scales(const ModelConfig& m, const std::vector<ClippedHead>& heads) {
    const ParamLayout p = param_layout(m);
    const size_t C = m.channels, hd = m.head_size();
    std::vector<ParamScale> out;
    for (const ClippedHead& c : heads) {
        const size_t w = p.offset[P_QKVW] + (size_t)c.layer * 3 * C * C;  // layer's (3C, C) block
        const size_t b = p.offset[P_QKVB] + (size_t)c.layer * 3 * C;      // layer's (3C) bias
        for (size_t part : {(size_t)0, C}) {                              // q rows, then k rows
            const size_t row = part + (size_t)c.head * hd;
            out.push_back({w + row * C, hd * C, c.gamma});
            if (m.bias) out.push_back({b + row, hd, c.gamma});
        }
    }
    return out;
}

// QK-Clip after a step: scales the q/k projections of the heads whose max logit exceeded tau in
// the backend's weights, in place where the backend keeps them (Backend::scale_params: no host copy
// of the model), and, with ZeRO-1, in this rank's master shard (which the next step's all-gather
// publishes). Returns the clipped heads.
inline std::vector<ClippedHead> apply_qk_clip(float tau, const LogitStats& s, const ModelConfig& m, Backend& model,
                                              Zero1Optimizer* zero) {
    std::vector<ClippedHead> heads = qk_clip_heads(s, tau);
    if (heads.empty()) return heads;
    const std::vector<ParamScale> scales = qk_clip_scales(m, heads);
    model.scale_params(scales);
    if (zero) apply_param_scales(zero->master(), zero->range().begin, zero->range().size(), scales);
    return heads;
}

}  // namespace llmc
