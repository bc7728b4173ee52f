// GPT-2 weight initialization, shared by every backend: the weights are drawn on the host from
// llmc::Rng in parameter-table order (llmc/core/params.h) into the canonical flat fp32 layout, so the
// CPU and CUDA backends start from bit-identical weights for the same seed.
//   wte, wpe, qkvw, fcw, lm_head   normal(0, 0.02)
//   attprojw, fcprojw              normal(0, 0.02 / sqrt(2L))   (residual output projections)
//   LayerNorm and QK-norm gains    1
//   every bias                     0
// The padded vocabulary rows [V, Vp) of wte and lm_head are 0 and draw nothing from the RNG, so
// the real rows do not depend on the padding.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "llmc/core/model_config.h"
#include "llmc/core/params.h"
#include "llmc/core/rng.h"

namespace llmc {

inline std::vector<float> init_params(const ModelConfig& cfg, uint64_t seed) {
    const ParamLayout lay = param_layout(cfg);
    std::vector<float> params(lay.total, 0.0f);  // biases (and padded rows) stay 0
    Rng rng(seed);
    const float std_base = 0.02f;
    const float std_resid = 0.02f / std::sqrt(2.0f * (float)cfg.num_layers);
    const size_t C = (size_t)cfg.channels, V = (size_t)cfg.vocab_size;

    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        float* p = params.data() + lay.offset[id];
        const size_t n = lay.size[id];
        switch (id) {
            case P_WTE:
            case P_LMHEAD:  // (Vp, C): only the real rows [0, V) are drawn
                for (size_t i = 0; i < (n ? V * C : 0); i++) p[i] = std_base * rng.normal();
                break;
            case P_WPE:
            case P_QKVW:
            case P_FCW:
                for (size_t i = 0; i < n; i++) p[i] = std_base * rng.normal();
                break;
            case P_ATTPROJW:
            case P_FCPROJW:
                for (size_t i = 0; i < n; i++) p[i] = std_resid * rng.normal();
                break;
            case P_LN1W:
            case P_LN2W:
            case P_LNFW:
            case P_QNORMW:
            case P_KNORMW:
                for (size_t i = 0; i < n; i++) p[i] = 1.0f;
                break;
            default:  // biases: 0
                break;
        }
    }
    return params;
}

}  // namespace llmc
