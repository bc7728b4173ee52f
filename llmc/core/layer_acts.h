// The per-layer activations both backends keep for the backward, as one definition: the buffers
// (one block per layer, plus the embedding that feeds layer 0) and the view of one layer's block.
// The CPU instantiates it with std::vector, the CUDA backend with DeviceBuffer; the offsets of a
// layer's block are computed here and nowhere else.
#pragma once
#include <cstddef>

#include "llmc/core/model_config.h"

namespace llmc {

// One layer's activations for a pass of N = B*T rows. X: activation element (float, double or the
// CUDA floatX); S: statistics element (LayerNorm mean/rstd, attention lse); const for a read-only view.
template <typename X, typename S>
struct LayerActs {
    X* residual;   // (B, T, C)      the layer's input: the embedding for layer 0, else the previous residual3
    X* ln1;        // (B, T, C)
    S* ln1_mean;   // (B, T)
    S* ln1_rstd;   // (B, T)
    X* qkv;        // (B, T, 3C)     qkv matmul output
    X* qkvn;       // (B, T, 3C)     after QK-norm; nullptr unless qk_norm
    S* qkn_mean;   // (B, T, 2, NH)  QK-norm statistics; nullptr unless qk_norm
    S* qkn_rstd;   // (B, T, 2, NH)
    X* atty;       // (B, T, C)      attention output, heads concatenated
    S* att_lse;    // (B, NH, T)     log-sum-exp of each attention row
    X* residual2;  // (B, T, C)      x after the attention branch
    X* ln2;        // (B, T, C)
    S* ln2_mean;   // (B, T)
    S* ln2_rstd;   // (B, T)
    X* fch;        // (B, T, 4C)     fc matmul output (pre-GELU)
    X* fch_gelu;   // (B, T, 4C)
    X* residual3;  // (B, T, C)      x after the MLP branch: the layer's output

    // (B, T, 3C) what the attention reads: qkv after QK-norm when the model has it.
    X* att_in() const { return qkvn ? qkvn : qkv; }
};

// Buf<E>: a buffer of E with data() and resize semantics given by the caller's alloc. Sized for a
// capacity of N = B*T rows; a pass with B*T <= capacity uses the leading part of each layer's
// block, so a block's stride is the pass's N (layer() takes it).
template <template <typename> class Buf, typename X, typename S>
struct LayerActBuffers {
    Buf<X> encoded;             // (B, T, C)        wte[inp] + wpe
    Buf<X> ln1;                 // (L, B, T, C)
    Buf<S> ln1_mean, ln1_rstd;  // (L, B, T)
    Buf<X> qkv;                 // (L, B, T, 3C)
    Buf<X> qkvn;                // (L, B, T, 3C)    empty unless qk_norm
    Buf<S> qkn_mean, qkn_rstd;  // (L, B, T, 2, NH) empty unless qk_norm
    Buf<X> atty;                // (L, B, T, C)
    Buf<S> att_lse;             // (L, B, NH, T)
    Buf<X> residual2;           // (L, B, T, C)
    Buf<X> ln2;                 // (L, B, T, C)
    Buf<S> ln2_mean, ln2_rstd;  // (L, B, T)
    Buf<X> fch;                 // (L, B, T, 4C)
    Buf<X> fch_gelu;            // (L, B, T, 4C)
    Buf<X> residual3;           // (L, B, T, C)

    // Sizes every buffer above for N rows, in declaration order: alloc(buffer, element count).
    template <typename Alloc>
    void allocate_layers(const ModelConfig& cfg, size_t N, Alloc&& alloc) {
        const size_t L = cfg.num_layers, C = cfg.channels, NH = cfg.num_heads, qk = cfg.qk_norm ? 1 : 0;
        channels_ = C;
        heads_ = NH;
        qk_norm_ = cfg.qk_norm;
        alloc(encoded, N * C);
        alloc(ln1, L * N * C);
        alloc(ln1_mean, L * N);
        alloc(ln1_rstd, L * N);
        alloc(qkv, L * N * 3 * C);
        alloc(qkvn, qk * L * N * 3 * C);
        alloc(qkn_mean, qk * L * N * 2 * NH);
        alloc(qkn_rstd, qk * L * N * 2 * NH);
        alloc(atty, L * N * C);
        alloc(att_lse, L * N * NH);
        alloc(residual2, L * N * C);
        alloc(ln2, L * N * C);
        alloc(ln2_mean, L * N);
        alloc(ln2_rstd, L * N);
        alloc(fch, L * N * 4 * C);
        alloc(fch_gelu, L * N * 4 * C);
        alloc(residual3, L * N * C);
    }

    // Layer l's activations in a pass of N rows.
    LayerActs<X, S> layer(int l, size_t N) { return view<X, S>(*this, l, N); }
    LayerActs<const X, const S> layer(int l, size_t N) const { return view<const X, const S>(*this, l, N); }

private:
    template <typename VX, typename VS, typename Self>
    static LayerActs<VX, VS> view(Self& a, int layer, size_t N) {
        const size_t l = (size_t)layer, C = a.channels_, NH = a.heads_;
        LayerActs<VX, VS> v;
        v.residual = l == 0 ? a.encoded.data() : a.residual3.data() + (l - 1) * N * C;
        v.ln1 = a.ln1.data() + l * N * C;
        v.ln1_mean = a.ln1_mean.data() + l * N;
        v.ln1_rstd = a.ln1_rstd.data() + l * N;
        v.qkv = a.qkv.data() + l * N * 3 * C;
        v.qkvn = a.qk_norm_ ? a.qkvn.data() + l * N * 3 * C : nullptr;
        v.qkn_mean = a.qk_norm_ ? a.qkn_mean.data() + l * N * 2 * NH : nullptr;
        v.qkn_rstd = a.qk_norm_ ? a.qkn_rstd.data() + l * N * 2 * NH : nullptr;
        v.atty = a.atty.data() + l * N * C;
        v.att_lse = a.att_lse.data() + l * N * NH;
        v.residual2 = a.residual2.data() + l * N * C;
        v.ln2 = a.ln2.data() + l * N * C;
        v.ln2_mean = a.ln2_mean.data() + l * N;
        v.ln2_rstd = a.ln2_rstd.data() + l * N;
        v.fch = a.fch.data() + l * N * 4 * C;
        v.fch_gelu = a.fch_gelu.data() + l * N * 4 * C;
        v.residual3 = a.residual3.data() + l * N * C;
        return v;
    }

    size_t channels_ = 0, heads_ = 0;  // C, NH of the model the buffers were sized for
    bool qk_norm_ = false;
};

}  // namespace llmc
