// Sampling the next token from a row of output logits, with llmc::Rng so samples are
// reproducible and the generator's state is saved in the training state; and generate(), which
// uses the backend's KV cache when it has one (docs/generation.md).
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/rng.h"

namespace llmc {

// logits: (Vp) one row; only [0, V) is considered (padded entries are never sampled).
// temperature <= 0: greedy (the first index of the largest logit; no random number is drawn).
// temperature > 0 divides the logits; softmax in double; inverse-CDF with one uniform draw.
// top_k > 0 (and < V): only the k largest logits (ties: lower index first) can be drawn; the
// softmax is taken over them, walked in index order.
inline int sample_token(const float* logits, int V, float temperature, Rng& rng, int top_k = 0) {
    if (temperature <= 0.0f) {
        int best = 0;
        for (int i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
        return best;
    }
    std::vector<int> keep;  // candidate ids in increasing order (empty = all of [0, V))
    if (top_k > 0 && top_k < V) {
        keep.resize(V);
        for (int i = 0; i < V; i++) keep[i] = i;
        auto before = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
        std::nth_element(keep.begin(), keep.begin() + (top_k - 1), keep.end(), before);
        keep.resize(top_k);
        std::sort(keep.begin(), keep.end());
    }
    const int n = keep.empty() ? V : (int)keep.size();
    auto id = [&](int i) { return keep.empty() ? i : keep[i]; };
    double maxv = -INFINITY;
    for (int i = 0; i < n; i++) maxv = logits[id(i)] > maxv ? logits[id(i)] : maxv;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += std::exp((logits[id(i)] - maxv) / temperature);
    const double coin = rng.uniform() * sum;
    double cdf = 0.0;
    for (int i = 0; i < n; i++) {
        cdf += std::exp((logits[id(i)] - maxv) / temperature);
        if (coin < cdf) return id(i);
    }
    return id(n - 1);  // rounding: coin landed at the very end
}

struct GenerateOptions {
    int top_k = 0;                      // 0 = sample from the whole vocabulary
    int sample_vocab = 0;               // > 0: only ids below it are drawn (a tokenizer smaller than the model's V)
    bool use_cache = true;              // use the backend's KV cache when it has one
    std::function<void(int)> on_token;  // called with each token as soon as it is chosen (streaming)
};

// Generates n tokens after `prompt` (at least one token, e.g. EOT), each drawn from the ids below
// min(V, opt.sample_vocab) (padded ids never), keeping at most max_len
// tokens of context (the newest), and returns the generated tokens only. Without a KV cache
// every token is a full forward pass over the context. With one (backend.has_kv_cache() and
// opt.use_cache), the context is prefilled once and each new token is one decode step; once the
// context outgrows max_len the window slides, positions shift and the cache is invalid, so each
// further token re-prefills the newest max_len tokens (what the uncached path computes anyway).
// Both paths produce the same tokens (the cached logits equal the uncached ones bit for bit).
inline std::vector<int> generate(Backend& model, std::vector<int> prompt, int n, int max_len, float temperature,
                                 Rng& rng, const GenerateOptions& opt = {}) {
    const int V = model.config().vocab_size, Vp = model.config().padded_vocab_size;
    if (prompt.empty()) throw InputError("generate: the prompt is empty; pass at least one token (e.g. EOT)");
    if (max_len < 1 || max_len > model.config().max_seq_len)
        throw InputError("generate: context length " + std::to_string(max_len) +
                         " must be in [1, max_seq_len=" + std::to_string(model.config().max_seq_len) + "]");
    // ids [drawn, V) exist in the model (a --vocab above the data's) but no tokenizer can print them
    const int drawn = opt.sample_vocab > 0 && opt.sample_vocab < V ? opt.sample_vocab : V;
    const bool cached = opt.use_cache && model.has_kv_cache();
    size_t in_cache = 0;  // prompt[0, in_cache) is in the KV cache at positions 0.. (0 = no valid cache)
    std::vector<int> out;
    for (int i = 0; i < n; i++) {
        const int len = (int)prompt.size() < max_len ? (int)prompt.size() : max_len;
        const int* ctx = prompt.data() + (prompt.size() - len);
        const float* row = nullptr;  // (Vp) logits of the last context position
        if (!cached) {
            model.forward(ctx, nullptr, 1, len, 0.0f, nullptr);
            row = model.logits() + (size_t)(len - 1) * Vp;  // (1, len, Vp): last position
        } else if (in_cache > 0 && prompt.size() <= (size_t)max_len) {
            const int add = (int)(prompt.size() - in_cache);                        // new tokens since the last call
            row = model.kv_forward(prompt.data() + in_cache, add, KvLogits::Last);  // (1, Vp)
            in_cache = prompt.size();
        } else {  // first call, or the window slid: a fresh cache holding the newest len tokens
            model.kv_begin(1, max_len);
            row = model.kv_forward(ctx, len, KvLogits::Last);  // (1, Vp): the last row only
            in_cache = prompt.size() <= (size_t)max_len ? prompt.size() : 0;
        }
        const int tok = sample_token(row, drawn, temperature, rng, opt.top_k);
        prompt.push_back(tok);
        out.push_back(tok);
        if (opt.on_token) opt.on_token(tok);
    }
    return out;
}

}  // namespace llmc
