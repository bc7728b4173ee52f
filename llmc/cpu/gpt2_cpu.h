// GPT-2 with LS-attention on the CPU: the fp32 reference model (templated on the scalar so the
// finite-difference tests run it in double) and CpuBackend, the Backend the training loop drives
// when there is no GPU. Every op comes from llmc/cpu/<op>.h; this file only wires them together.
//
// Model (pre-LN GPT-2), N = B*T rows:
//   x = wte[inp] + wpe[pos]                                             (B, T, C)
//   per layer l:  qkv = ln1(x) @ qkvw^T + qkvb                          (B, T, 3C)
//                 qkv = qknorm(qkv)                     if cfg.qk_norm
//                 x  += attention_ls(qkv) @ attprojw^T + attprojb       (B, T, C)
//                 x  += gelu(ln2(x) @ fcw^T + fcb) @ fcprojw^T + fcprojb
//   without biases (cfg.bias false) every bias above and every LayerNorm's is absent (nullptr); gelu is
//   cfg.gelu's kind (tanh or erf)
//   logits = lnf(x) @ wte^T (lm_head^T when untied), no bias            (B, T, Vp)
//   per position objective = CE + z_weight * lse^2 over the real vocabulary [0, V)
//
// KV-cached decoding (kv_begin / kv_forward; cache layout in llmc/cpu/kv_cache.h): a
// prefill into an empty cache runs the forward's layers over the n positions, copies every
// layer's (QK-normed) k and v into the cache, and computes the final LayerNorm and the LM head
// for the rows kv_forward is asked for (KvLogits::Last: the last position of each sequence;
// All: every position); a decode step runs only the new row of each
// sequence through every layer, attending over the cache. Every op computes a row with the same
// arithmetic whatever the number of rows (matmul tiles, LayerNorm, GELU and attention rows are
// per-row computations in a fixed order), so kv_forward's logits equal forward()'s bit for bit
// (test/test_kv_cache.cpp checks it).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>

#include "llmc/core/backend.h"
#include "llmc/core/batch_check.h"
#include "llmc/core/adamw.h"
#include "llmc/cpu/attention_ls.h"
#include "llmc/cpu/attention_probs.h"
#include "llmc/cpu/classifier.h"
#include "llmc/cpu/encoder.h"
#include "llmc/cpu/gelu.h"
#include "llmc/core/global_norm.h"
#include "llmc/cpu/kv_cache.h"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/omp_wait.h"
#include "llmc/cpu/qknorm.h"
#include "llmc/cpu/residual.h"
#include "llmc/core/error.h"
#include "llmc/core/init.h"
#include "llmc/core/model_config.h"
#include "llmc/core/layer_acts.h"
#include "llmc/core/param_view.h"
#include "llmc/core/params.h"

namespace llmc::cpu {

// std::vector as the buffer of the shared activation layout (llmc/core/layer_acts.h).
template <typename E>
using HostBuffer = std::vector<E>;

// Every activation buffer of the model, sized for a capacity of N = B*T rows; a pass with
// B*T <= capacity uses the leading part. The per-layer blocks (and their views) are
// LayerActBuffers'; the rest, with their shapes:
template <typename F>
struct Gpt2CpuActs : LayerActBuffers<HostBuffer, F, F> {
    // forward
    std::vector<F> lnf;                   // (B, T, C)
    std::vector<F> lnf_mean, lnf_rstd;    // (B, T)
    std::vector<F> logits;                // (B, T, Vp)
    std::vector<F> losses, zlosses, lse;  // (B, T)  per-position CE, z-loss term, output log-sum-exp
    std::vector<F> branch;                // (B, T, C)  scratch: attproj / fcproj output before the add
    // backward: activation gradients, each overwritten by the op that produces it (docs/design.md)
    std::vector<F> dlogits;       // (B, T, Vp)
    std::vector<F> dresidual;     // (B, T, C)  gradient of the residual stream, updated in place
    std::vector<F> dbtc;          // (B, T, C)  d lnf / d ln2 / d atty / d ln1
    std::vector<F> d4c_a, d4c_b;  // (B, T, 4C) d fch_gelu, d fch
    std::vector<F> d3c_a, d3c_b;  // (B, T, 3C) d qkv(n), d qkv (QK-norm only)

    void allocate(const ModelConfig& cfg, size_t N) {
        const size_t C = cfg.channels, Vp = cfg.padded_vocab_size;
        const size_t qk = cfg.qk_norm ? 1 : 0;
        this->allocate_layers(cfg, N, [](std::vector<F>& buf, size_t count) { buf.resize(count); });
        lnf.resize(N * C);
        lnf_mean.resize(N);
        lnf_rstd.resize(N);
        logits.resize(N * Vp);
        losses.resize(N);
        zlosses.resize(N);
        lse.resize(N);
        branch.resize(N * C);
        dlogits.resize(N * Vp);
        dresidual.resize(N * C);
        dbtc.resize(N * C);
        d4c_a.resize(N * 4 * C);
        d4c_b.resize(N * 4 * C);
        d3c_a.resize(N * 3 * C);
        d3c_b.resize(qk * N * 3 * C);
    }
};

template <typename F>
class Gpt2Cpu {
public:
    // Parameters start at 0; fill them with set_params (e.g. from llmc::init_params).
    explicit Gpt2Cpu(const ModelConfig& cfg) : cfg_(cfg) {
        const std::string err = validate_model_config(cfg);
        if (!err.empty()) throw InputError(err);
        layout_ = param_layout(cfg);
        params_.assign(layout_.total, F(0));
        grads_.assign(layout_.total, F(0));
        attn_stats_.resize((size_t)cfg.num_layers * cfg.num_heads);
    }

    const ModelConfig& config() const { return cfg_; }
    const ParamLayout& layout() const { return layout_; }
    // Flat parameters and gradients, canonical layout (llmc/core/params.h).
    std::vector<F>& params() { return params_; }
    const std::vector<F>& params() const { return params_; }
    std::vector<F>& grads() { return grads_; }
    const std::vector<F>& grads() const { return grads_; }
    F* param(ParamId id) { return params_.data() + layout_.offset[id]; }
    F* grad(ParamId id) { return grads_.data() + layout_.offset[id]; }
    template <typename S>
    void set_params(const S* src) {
        std::copy(src, src + layout_.total, params_.begin());
    }
    void zero_grad() { std::fill(grads_.begin(), grads_.end(), F(0)); }

    // Activations of the last forward (for tests and diagnostics).
    const Gpt2CpuActs<F>& acts() const { return acts_; }
    int last_B() const { return B_; }
    int last_T() const { return T_; }
    // (B, T, Vp) of the last forward (or KvLogits::All prefill); a KvLogits::Last prefill computed
    // no such logits, so logits() refuses after one (std::logic_error) until the next forward.
    const F* logits() const {
        if (!logits_valid_)
            throw std::logic_error(
                "Gpt2Cpu::logits: the last pass was a KV prefill of the last positions only (KvLogits::Last); "
                "read what kv_forward returned, or run forward()");
        return acts_.logits.data();
    }
    // Mean CE + mean z-loss of the last forward with targets, in F precision (what backward differentiates).
    double objective() const { return mean_loss_ + mean_zloss_; }
    // probs (T, T): the attention probabilities of head h of layer l for sequence b of the last
    // forward, recomputed from its stored attention input and log-sum-exp (llmc/cpu/attention_probs.h).
    void attention_probs(int layer, int head, int b, float* probs) const {
        if (B_ < 1) throw std::logic_error("Gpt2Cpu::attention_probs needs a preceding forward");
        if (layer < 0 || layer >= cfg_.num_layers)
            throw InputError("attention_probs: layer " + std::to_string(layer) + " out of range (the model has " +
                             std::to_string(cfg_.num_layers) + " layers)");
        const LayerActs<const F, const F> la = acts_.layer(layer, (size_t)B_ * T_);
        cpu::attention_probs(probs, la.att_in(), la.att_lse, b, head, B_, T_, cfg_.channels, cfg_.num_heads,
                             cfg_.global_heads, cfg_.window, cfg_.attn_softcap);
    }

    // inputs, targets: (B, T) token ids in [0, V); targets may be nullptr (logits only).
    // stats (nullable): resized to L x NH and filled for this pass.
    ForwardResult forward(const int* inputs, const int* targets, int B, int T, float z_weight, LogitStats* stats) {
        forward_layers(inputs, targets, B, T, z_weight, stats);
        const int L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads;
        const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size;
        const size_t N = (size_t)B * T;
        const int n = (int)N;
        Gpt2CpuActs<F>& a = acts_;
        const ParamView<const F> w = weights();
        const F* x_last = a.layer(L - 1, N).residual3;  // (B, T, C)
        layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x_last, w.lnfw(), w.lnfb(), n, C);
        matmul_forward(a.logits.data(), a.lnf.data(), w.lm_head(), (const F*)nullptr, n, C, Vp);
        logits_valid_ = true;

        ForwardResult res;
        mean_loss_ = mean_zloss_ = 0.0;
        if (targets || stats) {
            OutputStats os{-std::numeric_limits<float>::infinity(), 0.0, 0};
            classifier_forward(a.losses.data(), a.zlosses.data(), a.lse.data(), a.logits.data(), targets_.data(),
                               z_weight, n, V, Vp, stats ? &os : nullptr);
            if (targets) {
                double sum_ce = 0.0, sum_z = 0.0;  // fixed order: deterministic
                for (size_t i = 0; i < N; i++) {
                    sum_ce += (double)a.losses[i];
                    sum_z += (double)a.zlosses[i];
                }
                mean_loss_ = sum_ce / (double)N;
                mean_zloss_ = sum_z / (double)N;
                res.loss = (float)mean_loss_;
                res.z_loss = (float)mean_zloss_;
            }
            if (stats) {
                stats->resize(L, NH);
                for (size_t i = 0; i < attn_stats_.size(); i++) {
                    const AttnHeadStats& s = attn_stats_[i];
                    stats->max_logit[i] = s.max_logit;
                    stats->min_logit[i] = s.min_logit;
                    stats->entropy[i] = s.rows > 0 ? (float)(s.entropy_sum / (double)s.rows) : 0.0f;
                }
                stats->resize_near(L, NH);  // near/far split at stats->near_or(P) (attention_ls.h)
                for (size_t i = 0; i < attn_stats_.size(); i++) {
                    const AttnHeadStats& s = attn_stats_[i];
                    stats->near_mass[i] = s.rows > 0 ? (float)(s.near_mass_sum / (double)s.rows) : 0.0f;
                    stats->near_max_logit[i] = s.near_max_logit;
                    stats->far_max_logit[i] = s.far_max_logit;
                }
                stats->out_max_logit = os.max_logit;
                stats->out_mean_lse = os.count > 0 ? (float)(os.lse_sum / (double)os.count) : 0.0f;
            }
        }
        return res;
    }

private:
    // The forward up to the last layer's output (residual3 of layer L-1, (B, T, C)): the state a
    // backward and the attention maps need, the attention statistics when stats is set. No final
    // LayerNorm, no logits (logits() refuses until they are computed).
    void forward_layers(const int* inputs, const int* targets, int B, int T, float z_weight, LogitStats* stats) {
        check_batch(inputs, targets, B, T);
        const int L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads, G = cfg_.global_heads, P = cfg_.window;
        const size_t N = (size_t)B * T;
        if (N > capacity_) {
            acts_.allocate(cfg_, N);
            inputs_.resize(N);
            targets_.resize(N);
            capacity_ = N;
        }
        B_ = B;
        T_ = T;
        z_weight_ = z_weight;
        has_targets_ = targets != nullptr;
        logits_valid_ = false;
        std::copy(inputs, inputs + N, inputs_.begin());
        if (targets) std::copy(targets, targets + N, targets_.begin());
        else std::fill(targets_.begin(), targets_.begin() + N, 0);  // only for output stats

        if (stats) {
            for (AttnHeadStats& s : attn_stats_)
                s = AttnHeadStats{-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(), 0.0,
                                  0};
        }
        Gpt2CpuActs<F>& a = acts_;
        const ParamView<const F> w = weights();
        const int n = (int)N;

        encoder_forward(a.encoded.data(), inputs_.data(), w.wte(), w.wpe(), B, T, C);
        for (int l = 0; l < L; l++) {
            const LayerActs<F, F> la = a.layer(l, N);
            const LayerParams<const F> lw = w.layer(l);
            layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, la.residual, lw.ln1w, lw.ln1b, n, C);
            matmul_forward(la.qkv, la.ln1, lw.qkvw, lw.qkvb, n, C, 3 * C);
            if (cfg_.qk_norm)
                qknorm_forward(la.qkvn, la.qkn_mean, la.qkn_rstd, la.qkv, lw.qnormw, lw.qnormb, lw.knormw, lw.knormb, B,
                               T, C, NH);
            attention_forward(la.atty, la.att_lse, la.att_in(), B, T, C, NH, G, P, cfg_.attn_softcap,
                              stats ? &attn_stats_[(size_t)l * NH] : nullptr, stats ? stats->near_distance : 0);
            matmul_forward(a.branch.data(), la.atty, lw.attprojw, lw.attprojb, n, C, C);
            residual_forward(la.residual2, la.residual, a.branch.data(), N * C);
            layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.residual2, lw.ln2w, lw.ln2b, n, C);
            matmul_forward(la.fch, la.ln2, lw.fcw, lw.fcb, n, C, 4 * C);
            gelu_forward(la.fch_gelu, la.fch, N * 4 * C, cfg_.gelu);
            matmul_forward(a.branch.data(), la.fch_gelu, lw.fcprojw, lw.fcprojb, n, 4 * C, C);
            residual_forward(la.residual3, la.residual2, a.branch.data(), N * C);
        }
    }

public:
    // Adds grad_scale * d(mean CE + mean z-loss)/d(params) of the last forward into grads().
    void backward(float grad_scale) {
        if (!has_targets_) throw std::logic_error("Gpt2Cpu::backward needs a preceding forward with targets");
        const int L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads;
        const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size, G = cfg_.global_heads, P = cfg_.window;
        const int B = B_, T = T_, n = B * T;
        const size_t N = (size_t)n;
        Gpt2CpuActs<F>& a = acts_;
        const ParamView<const F> w = weights();
        const ParamView<F> g = grad_view();

        // classifier: objective = (1/N) sum over positions of (CE + z), scaled by grad_scale
        classifier_backward(a.dlogits.data(), a.logits.data(), a.lse.data(), targets_.data(),
                            (F)((double)grad_scale / (double)N), z_weight_, n, V, Vp);
        matmul_backward(a.dbtc.data(), g.lm_head(), (F*)nullptr, a.dlogits.data(), a.lnf.data(), w.lm_head(), n, C, Vp);
        std::fill(a.dresidual.begin(), a.dresidual.begin() + N * C, F(0));  // the LayerNorm backward adds into it
        layernorm_backward(a.dresidual.data(), g.lnfw(), g.lnfb(), a.dbtc.data(), a.layer(L - 1, N).residual3, w.lnfw(),
                           a.lnf_mean.data(), a.lnf_rstd.data(), n, C);

        // dresidual holds d(objective)/d(x) of the residual stream. A residual add passes its
        // gradient unchanged to both inputs, so the stream's gradient is updated in place (the
        // branch reads it as its dout, and the LayerNorm backward adds into it).
        F* dres = a.dresidual.data();
        for (int l = L - 1; l >= 0; l--) {
            const LayerActs<const F, const F> la = std::as_const(a).layer(l, N);
            const LayerParams<const F> lw = w.layer(l);
            const LayerParams<F> lg = g.layer(l);

            // MLP branch: dres is d residual3 = d fcproj = (so far) d residual2
            matmul_backward(a.d4c_a.data(), lg.fcprojw, lg.fcprojb, dres, la.fch_gelu, lw.fcprojw, n, 4 * C, C);
            gelu_backward(a.d4c_b.data(), la.fch, a.d4c_a.data(), N * 4 * C, cfg_.gelu);
            matmul_backward(a.dbtc.data(), lg.fcw, lg.fcb, a.d4c_b.data(), la.ln2, lw.fcw, n, C, 4 * C);
            layernorm_backward(dres, lg.ln2w, lg.ln2b, a.dbtc.data(), la.residual2, lw.ln2w, la.ln2_mean, la.ln2_rstd,
                               n, C);

            // attention branch: dres is now d residual2 = d attproj = (so far) d residual
            matmul_backward(a.dbtc.data(), lg.attprojw, lg.attprojb, dres, la.atty, lw.attprojw, n, C, C);
            attention_backward(a.d3c_a.data(), a.dbtc.data(), la.att_in(), la.atty, la.att_lse, B, T, C, NH, G, P,
                               cfg_.attn_softcap);
            const F* dqkv = a.d3c_a.data();
            if (cfg_.qk_norm) {
                qknorm_backward(a.d3c_b.data(), lg.qnormw, lg.qnormb, lg.knormw, lg.knormb, a.d3c_a.data(), la.qkv,
                                la.qkn_mean, la.qkn_rstd, lw.qnormw, lw.knormw, B, T, C, NH);
                dqkv = a.d3c_b.data();
            }
            matmul_backward(a.dbtc.data(), lg.qkvw, lg.qkvb, dqkv, la.ln1, lw.qkvw, n, C, 3 * C);
            layernorm_backward(dres, lg.ln1w, lg.ln1b, a.dbtc.data(), la.residual, lw.ln1w, la.ln1_mean, la.ln1_rstd, n,
                               C);
        }
        encoder_backward(g.wte(), g.wpe(), dres, inputs_.data(), B, T, C);
    }

    // --- KV-cached decoding ---
    // An empty cache for B sequences of up to max_len (<= max_seq_len) positions each.
    void kv_begin(int B, int max_len) { kv_.init(cfg_, B, max_len); }
    const KvCache<F>& kv_cache() const { return kv_; }
    // Appends n positions to every cached sequence; tokens: (B, n). Returns the logits `rows` asks
    // for (Backend::kv_forward): Last (B, Vp), the last new position of each sequence; All (B, n, Vp).
    // Valid until the next call. Positions past the cache's max_len are refused (the caller starts a
    // new cache holding the newest window, as llmc/text/sampler.h does).
    const F* kv_forward(const int* tokens, int n, KvLogits rows) {
        const int B = kv_.B, Vp = cfg_.padded_vocab_size;
        if (B < 1) throw std::logic_error("Gpt2Cpu::kv_forward needs kv_begin first");
        check_kv_append(kv_.pos, n, kv_.max_len);
        check_batch(tokens, nullptr, B, n);
        if (kv_.pos == 0 && n > 1) return kv_prefill(tokens, n, rows);
        if (n == 1 || rows == KvLogits::Last) {  // one decode step per position; the last one's logits
            std::vector<int> col(B);
            const F* lg = nullptr;
            for (int i = 0; i < n; i++) {
                for (int b = 0; b < B; b++) col[b] = tokens[(size_t)b * n + i];
                lg = kv_decode(col.data());
            }
            return lg;
        }
        // every position of several after a non-empty cache: one decode step each
        kv_logits_.resize((size_t)B * n * Vp);
        std::vector<int> col(B);
        for (int i = 0; i < n; i++) {
            for (int b = 0; b < B; b++) col[b] = tokens[(size_t)b * n + i];
            const F* lg = kv_decode(col.data());
            for (int b = 0; b < B; b++)
                std::copy(lg + (size_t)b * Vp, lg + (size_t)(b + 1) * Vp,
                          kv_logits_.begin() + ((size_t)b * n + i) * Vp);
        }
        return kv_logits_.data();
    }

private:
    // Prefill of an empty cache: the forward's layers over (B, n), k/v of every layer cached, then
    // the final LayerNorm and the LM head over the rows asked for: All, forward()'s (B, n, Vp) logits;
    // Last, the B rows of position n-1 only, gathered into the decode buffers, (B, Vp). Both ops are
    // per-row computations, so a row's logits are forward()'s bit for bit either way.
    const F* kv_prefill(const int* tokens, int n, KvLogits rows) {
        const int B = kv_.B, L = cfg_.num_layers, C = cfg_.channels, Vp = cfg_.padded_vocab_size;
        forward_layers(tokens, nullptr, B, n, 0.0f, nullptr);
        const size_t N = (size_t)B * n;
        for (int l = 0; l < L; l++) {
            const F* qkv = acts_.layer(l, N).att_in();  // (B, n, 3C)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < n; t++) kv_.store(l, b, t, qkv + ((size_t)b * n + t) * 3 * C);
        }
        kv_.pos = n;
        Gpt2CpuActs<F>& a = acts_;
        const ParamView<const F> w = weights();
        const F* x_last = a.layer(L - 1, N).residual3;  // (B, n, C)
        if (rows == KvLogits::All) {
            layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x_last, w.lnfw(), w.lnfb(), (int)N,
                              C);
            matmul_forward(a.logits.data(), a.lnf.data(), w.lm_head(), (const F*)nullptr, (int)N, C, Vp);
            logits_valid_ = true;
            return a.logits.data();
        }
        DecodeActs& d = dec_;
        d.x.resize((size_t)B * C);
        d.ln.resize((size_t)B * C);
        d.mean.resize(B);
        d.rstd.resize(B);
        d.logits.resize((size_t)B * Vp);
        for (int b = 0; b < B; b++) {  // x (B, C) = the last position's row of each sequence
            const F* src = x_last + ((size_t)b * n + n - 1) * C;
            std::copy(src, src + C, d.x.begin() + (size_t)b * C);
        }
        layernorm_forward(d.ln.data(), d.mean.data(), d.rstd.data(), d.x.data(), w.lnfw(), w.lnfb(), B, C);
        matmul_forward(d.logits.data(), d.ln.data(), w.lm_head(), (const F*)nullptr, B, C, Vp);
        return d.logits.data();
    }

    // One new position per sequence (tokens: (B)) through every layer; the same ops as forward()
    // on B rows. Returns logits (B, Vp).
    const F* kv_decode(const int* tokens) {
        const int B = kv_.B, L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads;
        const int Vp = cfg_.padded_vocab_size, t = kv_.pos;
        DecodeActs& a = dec_;
        a.x.resize((size_t)B * C);
        a.ln.resize((size_t)B * C);
        a.mean.resize(B);
        a.rstd.resize(B);
        a.qkv.resize((size_t)B * 3 * C);
        a.qkvn.resize((size_t)B * 3 * C);
        a.qkn_mean.resize((size_t)B * 2 * NH);
        a.qkn_rstd.resize((size_t)B * 2 * NH);
        a.atty.resize((size_t)B * C);
        a.branch.resize((size_t)B * C);
        a.x2.resize((size_t)B * C);
        a.fch.resize((size_t)B * 4 * C);
        a.fch_gelu.resize((size_t)B * 4 * C);
        a.logits.resize((size_t)B * Vp);
        const ParamView<const F> w = weights();

        // x = wte[token] + wpe[t]  (B, C), as encoder_forward
        for (int b = 0; b < B; b++) {
            const F* te = w.wte() + (size_t)tokens[b] * C;
            const F* pe = w.wpe() + (size_t)t * C;
            for (int c = 0; c < C; c++) a.x[(size_t)b * C + c] = te[c] + pe[c];
        }
        for (int l = 0; l < L; l++) {
            const LayerParams<const F> lw = w.layer(l);
            layernorm_forward(a.ln.data(), a.mean.data(), a.rstd.data(), a.x.data(), lw.ln1w, lw.ln1b, B, C);
            matmul_forward(a.qkv.data(), a.ln.data(), lw.qkvw, lw.qkvb, B, C, 3 * C);
            const F* att_in = a.qkv.data();  // (B, 3C)
            if (cfg_.qk_norm) {
                qknorm_forward(a.qkvn.data(), a.qkn_mean.data(), a.qkn_rstd.data(), a.qkv.data(), lw.qnormw, lw.qnormb,
                               lw.knormw, lw.knormb, B, 1, C, NH);
                att_in = a.qkvn.data();
            }
            for (int b = 0; b < B; b++) kv_.store(l, b, t, att_in + (size_t)b * 3 * C);
            attention_decode(a.atty.data(), att_in, kv_, l, t, cfg_.attn_softcap);
            matmul_forward(a.branch.data(), a.atty.data(), lw.attprojw, lw.attprojb, B, C, C);
            residual_forward(a.x2.data(), a.x.data(), a.branch.data(), (size_t)B * C);
            layernorm_forward(a.ln.data(), a.mean.data(), a.rstd.data(), a.x2.data(), lw.ln2w, lw.ln2b, B, C);
            matmul_forward(a.fch.data(), a.ln.data(), lw.fcw, lw.fcb, B, C, 4 * C);
            gelu_forward(a.fch_gelu.data(), a.fch.data(), (size_t)B * 4 * C, cfg_.gelu);
            matmul_forward(a.branch.data(), a.fch_gelu.data(), lw.fcprojw, lw.fcprojb, B, 4 * C, C);
            residual_forward(a.x.data(), a.x2.data(), a.branch.data(), (size_t)B * C);  // x = layer output
        }
        layernorm_forward(a.ln.data(), a.mean.data(), a.rstd.data(), a.x.data(), w.lnfw(), w.lnfb(), B, C);
        matmul_forward(a.logits.data(), a.ln.data(), w.lm_head(), (const F*)nullptr, B, C, Vp);
        kv_.pos = t + 1;
        return a.logits.data();
    }

    // Row buffers of a decode step, one row per sequence.
    struct DecodeActs {
        std::vector<F> x, x2;               // (B, C) residual stream before / after the attention branch
        std::vector<F> ln, mean, rstd;      // (B, C), (B), (B)
        std::vector<F> qkv, qkvn;           // (B, 3C)
        std::vector<F> qkn_mean, qkn_rstd;  // (B, 2, NH)
        std::vector<F> atty, branch;        // (B, C)
        std::vector<F> fch, fch_gelu;       // (B, 4C)
        std::vector<F> logits;              // (B, Vp)
    };

    // The parameters and the gradients as the model's tensors (llmc/core/param_view.h).
    ParamView<const F> weights() const { return {params_.data(), layout_, cfg_.num_layers}; }
    ParamView<F> grad_view() { return {grads_.data(), layout_, cfg_.num_layers}; }

    // Refuses what the model cannot run, with the fix in the message (llmc/core/batch_check.h).
    void check_batch(const int* inputs, const int* targets, int B, int T) const {
        check_token_batch(cfg_, inputs, targets, B, T);
    }

    ModelConfig cfg_;
    ParamLayout layout_;
    std::vector<F> params_, grads_;  // canonical flat layout
    Gpt2CpuActs<F> acts_;
    size_t capacity_ = 0;                    // rows (B*T) the activations are allocated for
    std::vector<int> inputs_, targets_;      // (B, T) of the last forward (backward needs them)
    std::vector<AttnHeadStats> attn_stats_;  // (L, NH) scratch for the attention statistics
    int B_ = 0, T_ = 0;
    float z_weight_ = 0.0f;
    bool has_targets_ = false;
    bool logits_valid_ = false;  // acts_.logits hold the logits of the last forward (logits())
    double mean_loss_ = 0.0, mean_zloss_ = 0.0;
    KvCache<F> kv_;             // KV cache of kv_begin / kv_forward
    DecodeActs dec_;            // row buffers of a decode step
    std::vector<F> kv_logits_;  // (B, n, Vp) logits of a multi-position kv_forward after a prefill
};

// The CPU Backend: Gpt2Cpu<float> plus AdamW moments, all in the canonical flat layout.
class CpuBackend : public Backend {
public:
    CpuBackend(const ModelConfig& cfg, uint64_t seed) : model_(cfg) {
        const std::vector<float> init = init_params(cfg, seed);
        model_.set_params(init.data());
        m_.assign(init.size(), 0.0f);
        v_.assign(init.size(), 0.0f);
    }

    const char* name() const override { return "cpu"; }
    std::string device_description() const override {
        const int n = omp_get_max_threads();
        return "cpu (" + std::to_string(n) + (n == 1 ? " thread, " : " threads, ") + wait_policy_description() + ")";
    }
    const ModelConfig& config() const override { return model_.config(); }

    void get_params(float* dst) const override { std::copy(model_.params().begin(), model_.params().end(), dst); }
    void set_params(const float* src) override { model_.set_params(src); }
    void scale_params(const std::vector<ParamScale>& runs) override {
        check_param_scales(runs, model_.params().size());
        apply_param_scales(model_.params().data(), 0, model_.params().size(), runs);
    }
    void get_optimizer_state(float* m, float* v) const override {
        std::copy(m_.begin(), m_.end(), m);
        std::copy(v_.begin(), v_.end(), v);
    }
    void set_optimizer_state(const float* m, const float* v) override {
        std::copy(m, m + m_.size(), m_.begin());
        std::copy(v, v + v_.size(), v_.begin());
    }

    ForwardResult forward(const int* inputs, const int* targets, int B, int T, float z_loss_weight,
                          LogitStats* stats) override {
        return model_.forward(inputs, targets, B, T, z_loss_weight, stats);
    }
    const float* logits() override { return model_.logits(); }  // refuses after a KvLogits::Last prefill

    void zero_grad() override { model_.zero_grad(); }
    void backward(float grad_scale) override { model_.backward(grad_scale); }
    void get_grads(float* dst) const override { std::copy(model_.grads().begin(), model_.grads().end(), dst); }
    void set_grads(const float* src) override { std::copy(src, src + model_.grads().size(), model_.grads().begin()); }
    float grad_norm() override {
        return (float)std::sqrt(global_norm_squared(model_.grads().data(), model_.grads().size()));
    }
    void adamw_update(const AdamWHyper& h, int t, float grad_multiplier) override {
        const ParamLayout& lay = model_.layout();
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            const size_t off = lay.offset[id], n = lay.size[id];
            if (n == 0) continue;
            const float wd = param_gets_weight_decay(id) ? h.weight_decay : 0.0f;
            llmc::adamw_update(model_.params().data() + off, model_.grads().data() + off, m_.data() + off,
                               v_.data() + off, n, h.lr, h.beta1, h.beta2, h.eps, wd, t, grad_multiplier);
        }
    }

    // KV-cached decoding (llmc/cpu/kv_cache.h); kv_forward's logits equal forward()'s bit for bit.
    bool has_kv_cache() const override { return true; }
    void kv_begin(int B, int max_len) override { model_.kv_begin(B, max_len); }
    const float* kv_forward(const int* tokens, int n, KvLogits rows) override {
        return model_.kv_forward(tokens, n, rows);
    }
    size_t kv_cache_bytes() const override { return model_.kv_cache().bytes(); }

    // Attention maps (--dump-attention): recomputed from the last forward's stored q, k.
    bool has_attention_probs() const override { return true; }
    void attention_probs(int layer, int head, int b, float* probs) override {
        model_.attention_probs(layer, head, b, probs);
    }

    // The underlying model (tests and diagnostics).
    Gpt2Cpu<float>& model() { return model_; }

private:
    Gpt2Cpu<float> model_;
    std::vector<float> m_, v_;  // AdamW moments, canonical layout
};

}  // namespace llmc::cpu

namespace llmc {
using cpu::CpuBackend;  // the trainer names it llmc::CpuBackend
}  // namespace llmc
