// Sampling the next token from a row of output logits, with llmc::Rng so samples are
// reproducible and the generator's state is saved in the training state.
#pragma once
#include <cmath>
#include <vector>

#include "backend.h"
#include "rng.h"

namespace llmc {

// logits: (Vp) one row; only [0, V) is considered (padded entries are never sampled).
// temperature > 0 divides the logits; softmax in double; inverse-CDF with one uniform draw.
inline int sample_token(const float* logits, int V, float temperature, Rng& rng) {
    double maxv = -INFINITY;
    for (int i = 0; i < V; i++) maxv = logits[i] > maxv ? logits[i] : maxv;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += std::exp((logits[i] - maxv) / temperature);
    const double coin = rng.uniform() * sum;
    double cdf = 0.0;
    for (int i = 0; i < V; i++) {
        cdf += std::exp((logits[i] - maxv) / temperature);
        if (coin < cdf) return i;
    }
    return V - 1;  // rounding: coin landed at the very end
}

// Generates n tokens after `prompt` (at least one token, e.g. EOT) with full forward passes over
// the growing context (no KV cache), keeping at most max_len tokens of context (the newest).
// Returns the generated tokens only.
inline std::vector<int> generate(Backend& model, std::vector<int> prompt, int n, int max_len,
                                 float temperature, Rng& rng) {
    const int V = model.config().vocab_size, Vp = model.config().padded_vocab_size;
    std::vector<int> out;
    for (int i = 0; i < n; i++) {
        const int len = (int)prompt.size() < max_len ? (int)prompt.size() : max_len;
        const int* ctx = prompt.data() + (prompt.size() - len);
        model.forward(ctx, nullptr, 1, len, 0.0f, nullptr);
        const float* row = model.logits() + (size_t)(len - 1) * Vp;  // (1, len, Vp): last position
        int tok = sample_token(row, V, temperature, rng);
        prompt.push_back(tok);
        out.push_back(tok);
    }
    return out;
}

}  // namespace llmc
