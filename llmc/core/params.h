// The parameter table: every trainable tensor of the model, its shape and its offset in the one
// flat fp32 buffer that holds them all. Code refers to tensors by the ParamId enum, never by
// hand-computed offsets. The order is llm.c's (so its GPT-2 checkpoints load by a plain copy of
// the first 16 tensors), followed by our additions, which are empty when unused. Without biases
// (ModelConfig::bias false) every bias tensor (the *B rows) is empty too: the layout keeps its order.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

#include "llmc/core/model_config.h"

namespace llmc {

enum ParamId {
    P_WTE,       // (Vp, C)  token embedding (and the LM head when tied)
    P_WPE,       // (maxT, C) position embedding
    P_LN1W,      // (L, C)
    P_LN1B,      // (L, C)
    P_QKVW,      // (L, 3C, C)  rows: q (C), k (C), v (C); head h uses rows h*hd .. h*hd+hd-1 of each
    P_QKVB,      // (L, 3C)
    P_ATTPROJW,  // (L, C, C)
    P_ATTPROJB,  // (L, C)
    P_LN2W,      // (L, C)
    P_LN2B,      // (L, C)
    P_FCW,       // (L, 4C, C)
    P_FCB,       // (L, 4C)
    P_FCPROJW,   // (L, C, 4C)
    P_FCPROJB,   // (L, C)
    P_LNFW,      // (C)
    P_LNFB,      // (C)
    P_QNORMW,    // (L, hd) QK-norm gain for q, shared by the heads of a layer; empty unless qk_norm
    P_QNORMB,    // (L, hd)
    P_KNORMW,    // (L, hd)
    P_KNORMB,    // (L, hd)
    P_LMHEAD,    // (Vp, C) untied LM head; empty when tied
    NUM_PARAM_TENSORS
};

inline const char* param_name(int id) {
    static const char* names[NUM_PARAM_TENSORS] = {
        "wte", "wpe",     "ln1w",    "ln1b", "qkvw", "qkvb",   "attprojw", "attprojb", "ln2w",   "ln2b",   "fcw",
        "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "qnormw", "qnormb",   "knormw",   "knormb", "lm_head"};
    return names[id];
}

struct ParamLayout {
    std::array<size_t, NUM_PARAM_TENSORS> size{};    // elements per tensor (0 when absent)
    std::array<size_t, NUM_PARAM_TENSORS> offset{};  // element offset in the flat buffer
    size_t total = 0;
};

inline ParamLayout param_layout(const ModelConfig& c) {
    const size_t Vp = c.padded_vocab_size, C = c.channels, L = c.num_layers, maxT = c.max_seq_len;
    const size_t hd = c.head_size(), qk = c.qk_norm ? L * hd : 0;
    const size_t b = c.bias ? 1 : 0;  // bias tensors are empty without biases
    ParamLayout p;
    p.size = {Vp * C,
              maxT * C,
              L * C,
              b * L * C,
              L * 3 * C * C,
              b * L * 3 * C,
              L * C * C,
              b * L * C,
              L * C,
              b * L * C,
              L * 4 * C * C,
              b * L * 4 * C,
              L * C * 4 * C,
              b * L * C,
              C,
              b * C,
              qk,
              b * qk,
              qk,
              b * qk,
              c.tied_embeddings ? 0 : Vp * C};
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        p.offset[i] = p.total;
        p.total += p.size[i];
    }
    return p;
}

// AdamW's decoupled weight decay applies to matrices and embeddings only, not to biases,
// LayerNorm and QK-norm gains/biases.
inline bool param_gets_weight_decay(int id) {
    return id == P_WTE || id == P_WPE || id == P_QKVW || id == P_ATTPROJW || id == P_FCW || id == P_FCPROJW ||
           id == P_LMHEAD;
}

}  // namespace llmc
