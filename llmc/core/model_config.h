// Model configuration: the fields that define a GPT-2 with LS-attention, presets, and
// validation. Host-only, no GPU needed. Every field here is stored in the checkpoint header
// (docs/formats.md) so a checkpoint rebuilds exactly this model.
#pragma once
#include <cstdio>
#include <string>

namespace llmc {

// The MLP's activation. Tanh: GPT-2's and llm.c's approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
// x^3))); Erf: the exact 0.5 x (1 + erf(x / sqrt(2))) (PyTorch's nn.GELU(), the paper's code). The
// values are the checkpoint header's (docs/formats.md).
enum class Gelu : int { Tanh = 0, Erf = 1 };

inline const char* gelu_name(Gelu g) { return g == Gelu::Erf ? "erf" : "tanh"; }

struct ModelConfig {
    int max_seq_len = 1024;         // maxT: rows of the position embedding
    int vocab_size = 50257;         // V: real vocabulary
    int padded_vocab_size = 50304;  // Vp: V rounded up to a multiple of 128; logits [V, Vp) are never used
    int num_layers = 6;             // L
    int num_heads = 6;              // NH
    int channels = 192;             // C; head size hd = C / NH
    int global_heads = 1;           // G: heads NH-G .. NH-1 are global (causal), 0 .. NH-G-1 local
    int window = 50;                // P: a local head's query i sees keys i-P < j <= i
    bool qk_norm = false;           // LayerNorm over the head dimension on q and k (per-layer gain/bias)
    float attn_softcap = 0.0f;      // > 0: attention logits s -> c * tanh(s / c); 0 = off
    bool tied_embeddings = true;    // LM head shares wte; false adds a separate lm_head (Vp, C)
    bool bias = true;               // biases in every linear layer and LayerNorm (GPT-2); false: none at all
                                    // (no qkv/attproj/fc/fcproj bias, LayerNorms and QK-norm gain only)
    Gelu gelu = Gelu::Tanh;         // the MLP's activation

    int head_size() const { return channels / num_heads; }
    int local_heads() const { return num_heads - global_heads; }
    // Head h is local iff h < NH - G.
    bool is_local_head(int h) const { return h < num_heads - global_heads; }
};

// Rounds V up to a multiple of 128 (llm.c's padding; keeps matmuls aligned). A V too large to pad
// within int (> kMaxVocab) comes back unchanged, for validate_model_config to refuse.
constexpr int kMaxVocab = 2147483520;  // 2^31 - 128, the largest multiple of 128 in int32
inline int pad_vocab(int V) { return V > kMaxVocab ? V : ((V + 127) / 128) * 128; }

// The most parameters a model may have: 2^40 (1.1e12, 4.4 TB in fp32), far beyond what this trainer
// can hold, and small enough that the size_t arithmetic of llmc/core/params.h and of the checkpoint
// readers (bytes = 4 * count) cannot wrap around. Checkpoint headers and flags come from users: a
// wrapped count could match a small file and load a model far larger than its payload.
constexpr double kMaxModelParams = 1099511627776.0;  // 2^40

// The parameter count of llmc/core/params.h's param_layout, in double so that any int fields give a
// finite value (exact below 2^53) instead of overflowing.
inline double model_param_count(const ModelConfig& c) {
    const double Vp = c.padded_vocab_size, C = c.channels, L = c.num_layers, T = c.max_seq_len;
    const double hd = c.num_heads > 0 ? (double)(c.channels / c.num_heads) : 0.0;
    const double per_layer_vectors = c.bias ? 13 * C : 2 * C;  // LayerNorm gains (2C) + biases (11C)
    return (c.tied_embeddings ? 1 : 2) * Vp * C + T * C + L * (12 * C * C + per_layer_vectors) + (c.bias ? 2 : 1) * C +
           (c.qk_norm ? (c.bias ? 4 : 2) * L * hd : 0);
}

// Returns "" when the configuration is buildable, else one line naming the problem and the fix.
inline std::string validate_model_config(const ModelConfig& c) {
    auto s = [](int v) { return std::to_string(v); };
    if (c.num_layers < 1) return "--layers must be >= 1 (got " + s(c.num_layers) + ")";
    if (c.num_heads < 1) return "--heads must be >= 1 (got " + s(c.num_heads) + ")";
    if (c.channels < 1) return "--channels must be >= 1 (got " + s(c.channels) + ")";
    if (c.channels % c.num_heads != 0)
        return "--channels " + s(c.channels) + " is not divisible by --heads " + s(c.num_heads) +
               "; pick channels = heads * head_size";
    if (c.global_heads < 0 || c.global_heads > c.num_heads)
        return "--global-heads " + s(c.global_heads) + " must be in 0..--heads (" + s(c.num_heads) +
               "); use --global-heads " + s(c.num_heads) + " for plain MHSA";
    if (c.window < 1) return "--window " + s(c.window) + " must be >= 1 (a local head sees at least itself)";
    if (c.max_seq_len < 1) return "--max-seq-len must be >= 1 (got " + s(c.max_seq_len) + ")";
    if (c.vocab_size < 2) return "--vocab must be >= 2 (got " + s(c.vocab_size) + ")";
    if (c.vocab_size > kMaxVocab)
        return "--vocab " + s(c.vocab_size) + " is too large: at most " + s(kMaxVocab) +
               " (padded to a multiple of 128 in int32)";
    if (c.padded_vocab_size < c.vocab_size || c.padded_vocab_size % 128 != 0)
        return "padded vocabulary " + s(c.padded_vocab_size) + " must be a multiple of 128 and >= vocab " +
               s(c.vocab_size);
    if (!(c.attn_softcap >= 0.0f)) return "--attn-softcap must be >= 0 (0 = off)";
    if (c.gelu != Gelu::Tanh && c.gelu != Gelu::Erf) return "--gelu must be tanh or erf";
    if (model_param_count(c) > kMaxModelParams) {
        char n[32];
        std::snprintf(n, sizeof n, "%.0f", model_param_count(c));  // a count: an integer
        // each size by its flag and value, where llmc/app/model_setup.h with_flag_origins names the origin
        return std::string("the model would have ") + n + " parameters (--layers " + s(c.num_layers) + ", --channels " +
               s(c.channels) + ", --vocab " + s(c.vocab_size) + " padded to " + s(c.padded_vocab_size) +
               ", --max-seq-len " + s(c.max_seq_len) +
               "), more than the 2^40 this trainer supports; use smaller values of them";
    }
    return "";
}

}  // namespace llmc
