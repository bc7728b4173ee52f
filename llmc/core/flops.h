// Model FLOPs per trained token, for MFU (model FLOPs utilization) as llm.c reports it:
//   MFU = flops_per_token * tokens/s per device / the device's peak (Backend::peak_flops()).
// Counted (a multiply-add = 2 FLOPs; training = forward + backward = 3 x forward):
//   matmuls      2 * (12 C^2 per layer * L + C * Vp)            qkv 3C^2, attproj C^2, fc 4C^2,
//                                                               fcproj 4C^2, LM head C*Vp
//   attention    2 * 2 * hd * (keys a query attends) per head   q.k and att.v, per layer
//   total        3 * (matmuls + attention)
// "Keys a query attends" is the mean over the T query positions of the keys actually unmasked:
// a global head (i + 1 keys for query i) averages (T + 1) / 2, a local head with window P
// averages mean_i min(i + 1, P). Unlike PaLM's 6N + 12 L C T (which counts all T keys of every
// query) this counts only the work a causal / windowed kernel must do, so LS-attention gets no
// credit for keys it never touches. Embedding lookups, LayerNorms, GELU, softmax are not counted.
#pragma once
#include "llmc/core/model_config.h"

namespace llmc {

// Mean number of keys a query attends over T positions: causal, restricted to `window` keys.
inline double mean_attended_keys(int T, int window) {
    if (T <= 0) return 0.0;
    const long long P = window < T ? window : T;
    // sum_{i=0}^{T-1} min(i + 1, P) = P (P + 1) / 2 + (T - P) P
    const double sum = (double)P * (P + 1) / 2.0 + (double)(T - P) * (double)P;
    return sum / T;
}

// Training FLOPs (forward + backward) per token at sequence length T.
inline double flops_per_token(const ModelConfig& c, int T) {
    const double C = c.channels, L = c.num_layers, Vp = c.padded_vocab_size, hd = c.head_size();
    const double matmul = 2.0 * (12.0 * C * C * L + C * Vp);
    const double keys = c.local_heads() * mean_attended_keys(T, c.window) + c.global_heads * mean_attended_keys(T, T);
    const double attention = 4.0 * hd * keys * L;
    return 3.0 * (matmul + attention);
}

}  // namespace llmc
