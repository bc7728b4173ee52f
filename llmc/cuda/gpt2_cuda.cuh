// GPT-2 with LS-attention on one GPU: CudaBackend, the Backend the training loop drives with
// --device cuda. It wires the CUDA ops of llmc/cuda/<op>.cuh together exactly as CpuBackend
// (llmc/cpu/gpt2_cpu.h) wires the CPU ops, so both compute the same model (see that file's header
// for the math). Memory, dtypes and determinism: docs/cuda_backend.md. The class, its buffers and the
// files of its other concerns: llmc/cuda/gpt2_cuda_backend.cuh; this file holds the model wiring and
// includes those files, so that including it gives the whole backend.
// Model options as on the CPU: without biases (cfg.bias false) every bias of the ParamViews is nullptr
// and each op takes nullptr for none (matmuls: no bias epilogue, no bias gradient; LayerNorms and
// QK-norm: gains only); cfg.gelu is the MLP's GELU (erf never runs in cuBLASLt's GELU epilogue:
// llmc/cuda/matmul.cuh).
//
// The wiring, in order:
//   CudaBackend      checks the model, creates the stream, allocates the (P) buffers and the attention
//                    statistics, draws the initial weights (llmc/core/init.h) and uploads them
//   forward          one pass queued as for a micro-batch (queue_forward: its tokens staged in the next
//                    slot, llmc/cuda/gpt2_cuda_step.cuh), then the host waits and reads the slot
//   issue_forward    the memory plan grown if needed (llmc/cuda/gpt2_cuda_memory.cuh); the slot's tokens
//                    uploaded; encoder, ln1; layer_forward per layer; every layer's attention statistics
//                    merged; the LM head; with targets or statistics the classifier pass and its summary
//                    copied into the slot
//   layer_forward    qkv = ln1 @ qkvw -> [QK-norm] -> LS-attention -> attproj, residual + ln2 fused,
//                    fc (+ GELU) -> fcproj, residual + the next LayerNorm fused
//   backward         the classifier (logits -> dlogits in place), the LM head, lnf; per layer from the
//                    last: the MLP branch, ln2, the attention branch, [QK-norm], qkv, ln1; the encoder
//                    (the positions grouped by token on the host); every LayerNorm's dw, db in one launch
//
// Differences from CpuBackend (interface-visible):
//   - backward() turns the device logits into dlogits in place (one fused classifier pass, no second
//     (N, Vp) buffer), so logits() must be read before backward() and a second backward() needs a
//     new forward(); both misuses throw std::logic_error instead of returning garbage.
//   - KV cache (kv_begin / kv_forward; docs/generation.md; llmc/cuda/gpt2_cuda_decode.cuh): a prefill is
//     the ordinary forward (with KvLogits::Last the last layer past its qkv, lnf and the LM head run for
//     the last row of each sequence only, as a decode step), then every layer's k (after QK-norm) and v are copied into the cache
//     (llmc/cuda/attention_decode.cuh layout); a decode step runs one row per sequence through the same
//     ops and attends over the cache. Unlike the CPU, the logits are close to forward()'s, not
//     bit-identical: cuBLASLt may pick another algorithm for B rows than for B*T, and the decode
//     attention sums in another order than the training kernel (test/gpu/test_cuda_generate.cu states
//     the comparison rule).
//   - all_reduce_grads: with an NCCL collective, the device gradients are all-reduced in place
//     (no host round trip); otherwise the Backend default (host path).
//   - queued steps may run as one CUDA graph (use_step_graph, --cuda-graph; llmc/cuda/gpt2_cuda_step.cuh,
//     llmc/cuda/step_graph.cuh).
//   - no activation recomputation (llm.c's -r): every layer's activations stay stored, as on the CPU.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "llmc/core/backend.h"
#include "llmc/core/batch_check.h"
#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/attention_decode.cuh"
#include "llmc/cuda/attention_ls.cuh"
#include "llmc/cuda/attention_probs.cuh"
#include "llmc/cuda/classifier.cuh"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/device_info.cuh"
#include "llmc/cuda/encoder.cuh"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/global_norm.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/param_scale.cuh"
#include "llmc/cuda/qknorm.cuh"
#include "llmc/cuda/step_graph.cuh"
#include "llmc/cuda/step_marker.cuh"
#include "llmc/core/error.h"
#include "llmc/core/init.h"
#include "llmc/core/model_config.h"
#include "llmc/core/layer_acts.h"
#include "llmc/core/param_view.h"
#include "llmc/core/params.h"
#include "llmc/core/token_groups.h"
#include "llmc/cuda/gpt2_cuda_backend.cuh"
#include "llmc/cuda/gpt2_cuda_decode.cuh"
#include "llmc/cuda/gpt2_cuda_io.cuh"
#include "llmc/cuda/gpt2_cuda_memory.cuh"
#include "llmc/cuda/gpt2_cuda_step.cuh"

namespace llmc::cuda {

// Builds the initial fp32 parameters on the host exactly as CpuBackend does (llmc::init_params,
// same seed -> same weights) and uploads them. Throws InputError for an unbuildable config.
inline CudaBackend::CudaBackend(const ModelConfig& cfg, uint64_t seed) : cfg_(cfg) {
    const std::string err = validate_model_config(cfg);
    if (!err.empty()) throw InputError(err);
    attention_ls_check_args(1, 1, cfg.channels, cfg.num_heads, cfg.global_heads, cfg.window);  // head size
    layout_ = param_layout(cfg);
    CUDA_CHECK(cudaStreamCreate(&stream_));
    const size_t P = layout_.total;
    master_.resize(P);
    grads_.resize(P, true);
    m_.resize(P, true);
    v_.resize(P, true);
    if constexpr (kSeparateWorkingCopy) {
        wparams_buf_.resize(P);
        wparams_ = wparams_buf_.get();
    } else {
        wparams_ = reinterpret_cast<floatX*>(master_.get());  // FP32 build: floatX is float
    }
    attn_stats_.resize((size_t)cfg.num_layers * kAttnStatsNear * cfg.num_heads);
    stats_identity_.resize(attn_stats_.size());
    init_attention_stats();
    step_pinned_.resize(1);
    step_dev_.resize(1);
    norm_.resize(1);
    summary_dev_.resize(detail::kSummaryFields);
    loss_check_.resize(1, true);
    applied_dev_.resize(1, true);
    norm_pinned_.resize(1);
    applied_pinned_.resize(1);
    CUDA_CHECK(cudaEventCreateWithFlags(&step_done_, cudaEventDisableTiming));
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) segments_.end[id] = layout_.offset[id] + layout_.size[id];
    segments_.count = NUM_PARAM_TENSORS;
    scratch_.resize(global_norm_scratch_floats());  // grad_norm() may come before any forward
    // the widest bias (fc, 4C) needs the most; zero, and every op leaves them zero
    arrivals_.resize(std::max<size_t>(1, matmul_backward_arrivals(4 * cfg.channels)), true);
    const std::vector<float> init = init_params(cfg, seed);
    set_params(init.data());
    peak_flops_ = bf16_peak_flops_for(current_device_info().name);
}

inline CudaBackend::~CudaBackend() {
    cudaStreamSynchronize(stream_);  // no throw from a destructor; buffers free after this
    cudaEventDestroy(step_done_);
    cudaStreamDestroy(stream_);
}

// ---- forward: inputs, targets (B, T) on the host; see Backend::forward. The pass is queued as for
// queue_micro_batch (its numbers in the next free slot), then the host waits and reads them.
inline ForwardResult CudaBackend::forward(const int* inputs, const int* targets, int B, int T, float z_weight,
                                          LogitStats* stats) {
    check_no_open_graph_step("forward");
    const int slot = queue_forward(inputs, targets, B, T, z_weight, stats != nullptr, stats ? stats->near_distance : 0);
    if (slot < 0) return ForwardResult{};
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    note_stream_idle();
    return read_slot(slot, stats);
}

// Issues the forward of queue_forward for the tokens staged in `slot` (stage_tokens). head false
// (a KvLogits::Last prefill, no targets, no statistics): the layers only, the last one up to its qkv
// (layer_forward); no logits and no memory planned for them; returns -1.
inline int CudaBackend::issue_forward(int slot, int B, int T, float z_weight, bool with_targets, bool with_stats,
                                      int near_distance, float grad_scale, bool head) {
    if (!head && (with_targets || with_stats))
        throw std::logic_error("CudaBackend::issue_forward: a pass without the LM head has no targets or statistics");
    const int L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads, V = cfg_.vocab_size,
              Vp = cfg_.padded_vocab_size;
    const size_t N = (size_t)B * T;
    const int n = (int)N;
    ensure_capacity(B, T, head);
    B_ = B;
    T_ = T;
    z_weight_ = z_weight;
    has_targets_ = with_targets;
    logits_state_ = head ? LogitsState::OnDevice : LogitsState::PrefillLast;
    const LaunchStream st = launch_stream();
    Gpt2CudaActs& a = acts_;
    const int* inputs = slot_inputs(slot);
    const int* targets = with_targets ? inputs + token_stride_ : nullptr;
    pass_slot_ = slot;

    CUDA_CHECK(cudaMemcpyAsync(a.inputs.get(), inputs, N * sizeof(int), cudaMemcpyHostToDevice, st));
    if (targets) CUDA_CHECK(cudaMemcpyAsync(a.targets.get(), targets, N * sizeof(int), cudaMemcpyHostToDevice, st));
    staged_in_flight_[slot] = true;
    if (with_stats) reset_attention_stats();

    const ParamView<const floatX> w = weights();
    const LayerActs<floatX, float> first = a.layer(0, N);
    encoder_forward(a.encoded.get(), a.inputs.get(), w.wte(), w.wpe(), B, T, C, st);
    layernorm_forward(first.ln1, first.ln1_mean, first.ln1_rstd, first.residual, w.layer(0).ln1w, w.layer(0).ln1b, n, C,
                      st);
    const int near_n = with_stats ? near_distance : 0;
    int nqt = 0;
    for (int l = 0; l < L; l++) nqt = layer_forward(l, B, T, with_stats, near_n, head);
    if (!head) return -1;
    if (with_stats)  // every layer's attention statistics, (F, NH) per layer in attn_stats_
        attention_stats_reduce(attn_stats_.get(), (size_t)kAttnStatsNear * NH, stats_part_.get(),
                               attention_stats_scratch_floats(B, T, NH), L, B, NH, nqt, near_n, st);
    // LM head, no bias: logits = lnf @ wte^T (lm_head^T when untied)   (N, Vp)
    matmul_forward(mm_, a.logits.get(), a.lnf.get(), w.lm_head(), nullptr, n, C, Vp, st);
    if (!targets && !with_stats) return -1;

    // grad_scale != 0 (a queued step's micro-batch, whose backward follows): the same pass also turns
    // the logits into dlogits, as backward's own pass would (the scale backward would use)
    const float dloss = targets && grad_scale != 0.0f ? dlogits_scale(grad_scale, N) : 0.0f;
    classifier_forward_backward(a.logits.get(), a.lse.get(), a.losses.get(), a.zlosses.get(),
                                with_stats ? a.row_max.get() : nullptr, targets ? a.targets.get() : nullptr, z_weight,
                                dloss, n, V, Vp, st);
    if (dloss != 0.0f) {
        logits_state_ = LogitsState::Dlogits;
        dlogits_grad_scale_ = grad_scale;
    }
    ensure_slots(slot + 1);
    slot_rows_[slot] = N;
    slot_near_[slot] = near_n;
    classifier_summary(summary_dev_.get(), targets ? loss_check_.get() : nullptr, targets ? a.losses.get() : nullptr,
                       targets ? a.zlosses.get() : nullptr, a.lse.get(), with_stats ? a.row_max.get() : nullptr, n, st);
    CUDA_CHECK(cudaMemcpyAsync(summary_pinned_.get() + (size_t)slot * detail::kSummaryFields, summary_dev_.get(),
                               summary_dev_.bytes(), cudaMemcpyDeviceToHost, st));
    if (with_stats)
        CUDA_CHECK(cudaMemcpyAsync(stats_pinned_.get() + (size_t)slot * attn_stats_.size(), attn_stats_.get(),
                                   attn_stats_.bytes(), cudaMemcpyDeviceToHost, st));
    return slot;
}

// Queues layer l of the forward over (B, T): its input and ln1 are already there; it leaves its
// output in residual3 and the next LayerNorm (the next layer's ln1, or lnf) fused after it; the last
// layer with head false stops after its qkv (and QK-norm): the caller finishes the rows it needs
// (kv_prefill_queue: the last row of each sequence, attending over the KV cache).
// near_n >= 1 (with_stats): the near/far statistics at that distance too. with_stats: the
// attention's statistics partials go to layer l's slot of stats_part_ (the forward merges every
// layer's in one launch); returns their query tiles.
inline int CudaBackend::layer_forward(int l, int B, int T, bool with_stats, int near_n, bool head) {
    const int L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads, G = cfg_.global_heads, P = cfg_.window;
    const size_t N = (size_t)B * T;
    const int n = (int)N;
    const LaunchStream st = launch_stream();
    Gpt2CudaActs& a = acts_;
    const LayerActs<floatX, float> la = a.layer(l, N);
    const LayerParams<const floatX> lw = weights().layer(l);

    // attention branch: qkv = ln1 @ qkvw^T + qkvb (N, 3C) -> [QK-norm] -> LS-attention (N, C)
    matmul_forward(mm_, la.qkv, la.ln1, lw.qkvw, lw.qkvb, n, C, 3 * C, st);
    if (cfg_.qk_norm)
        qknorm_forward(la.qkvn, la.qkn_mean, la.qkn_rstd, la.qkv, lw.qnormw, lw.qnormb, lw.knormw, lw.knormb, n, C, NH,
                       st);
    if (!head && l + 1 == L) return 0;
    AttnCall call{B, T, C, NH, G, P, cfg_.attn_softcap};
    call.stats_part = with_stats ? stats_part_.get() + (size_t)l * attention_stats_scratch_floats(B, T, NH) : nullptr;
    call.near_n = with_stats ? near_n : 0;
    call.split = attn_split_scratch(B, T);
    const int nqt = attention_forward(call, la.atty, la.att_lse, la.att_in(), st);
    matmul_forward(mm_, a.branch.get(), la.atty, lw.attprojw, lw.attprojb, n, C, C, st);
    // residual2 = residual + attproj; ln2 = LayerNorm(residual2)
    fused_residual_layernorm_forward(la.residual2, la.ln2, la.ln2_mean, la.ln2_rstd, la.residual, a.branch.get(),
                                     lw.ln2w, lw.ln2b, n, C, st);
    // MLP branch: fch = ln2 @ fcw^T + fcb, fch_gelu = gelu(fch) (tanh: the fused epilogue; erf: the
    // matmul, then gelu_forward), then fcproj
    matmul_forward(mm_, la.fch_gelu, la.ln2, lw.fcw, lw.fcb, n, C, 4 * C, st, la.fch, cfg_.gelu);
    matmul_forward(mm_, a.branch.get(), la.fch_gelu, lw.fcprojw, lw.fcprojb, n, 4 * C, C, st);
    // residual3 = residual2 + fcproj, and the next LayerNorm (the next layer's ln1, or lnf) fused
    if (l + 1 < L) {
        const LayerActs<floatX, float> next = a.layer(l + 1, N);
        const LayerParams<const floatX> next_w = weights().layer(l + 1);
        fused_residual_layernorm_forward(la.residual3, next.ln1, next.ln1_mean, next.ln1_rstd, la.residual2,
                                         a.branch.get(), next_w.ln1w, next_w.ln1b, n, C, st);
    } else {
        fused_residual_layernorm_forward(la.residual3, a.lnf.get(), a.lnf_mean.get(), a.lnf_rstd.get(), la.residual2,
                                         a.branch.get(), weights().lnfw(), weights().lnfb(), n, C, st);
    }
    return nqt;
}

// ---- backward: ADDS grad_scale * d(mean CE + mean z-loss)/d(params) into the fp32 gradients
inline void CudaBackend::backward(float grad_scale) {
    if (!issuing_step_) check_no_open_graph_step("backward");
    if (!has_targets_) throw std::logic_error("CudaBackend::backward needs a preceding forward with targets");
    if (logits_state_ == LogitsState::Overwritten)
        throw std::logic_error(
            "CudaBackend::backward: the logits were already turned into dlogits; run "
            "forward() again before another backward()");
    const int L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads;
    const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size, G = cfg_.global_heads, P = cfg_.window;
    const float softcap = cfg_.attn_softcap;
    const int B = B_, T = T_, n = B * T;
    const size_t N = (size_t)n;
    const LaunchStream st = launch_stream();
    Gpt2CudaActs& a = acts_;
    float* scratch = scratch_.get();
    uint32_t* arrivals = arrivals_.get();
    const ParamView<const floatX> w = weights();
    const ParamView<float> g = grad_view();

    // classifier: logits -> dlogits in place, objective (1/N) sum (CE + z), scaled by grad_scale (done
    // already when a queued step's forward computed them: LogitsState::Dlogits)
    if (logits_state_ == LogitsState::Dlogits && grad_scale != dlogits_grad_scale_)
        throw std::logic_error(
            "CudaBackend::backward: grad_scale differs from the one this step's forward wrote the "
            "dlogits with");
    if (logits_state_ != LogitsState::Dlogits)
        classifier_forward_backward(a.logits.get(), a.lse.get(), a.losses.get(), a.zlosses.get(), nullptr,
                                    a.targets.get(), z_weight_, dlogits_scale(grad_scale, N), n, V, Vp, st);
    logits_state_ = LogitsState::Overwritten;
    floatX* dlogits = a.logits.get();
    matmul_backward(mm_, a.dbtc.get(), g.lm_head(), nullptr, scratch, arrivals, dlogits, a.lnf.get(), w.lm_head(), n, C,
                    Vp, st);
    CUDA_CHECK(cudaMemsetAsync(a.dresidual.get(), 0, N * C * sizeof(floatX), st));
    // LayerNorm backwards leave their dw, db partials in ln_partials_ ((2L + 1) LayerNorms: every
    // layer's ln1, every layer's ln2, lnf), reduced for all of them in one launch at the end
    const size_t ln_part = layernorm_backward_scratch_floats(n, C);
    float* ln1_part = ln_partials_.get();
    float* ln2_part = ln1_part + (size_t)L * ln_part;
    float* lnf_part = ln2_part + (size_t)L * ln_part;
    layernorm_backward_partials(a.dresidual.get(), lnf_part, a.dbtc.get(), a.layer(L - 1, N).residual3, w.lnfw(),
                                a.lnf_mean.get(), a.lnf_rstd.get(), n, C, st);

    // dres holds d(objective)/d(x) of the residual stream; a residual add passes it unchanged to
    // both inputs, so it is updated in place: each branch reads it as its dout and the branch's
    // LayerNorm backward adds into it (as in gpt2_cpu.h).
    floatX* dres = a.dresidual.get();
    floatX* d4c = a.d4c.get();
    for (int l = L - 1; l >= 0; l--) {
        const LayerActs<const floatX, const float> la = std::as_const(a).layer(l, N);
        const LayerParams<const floatX> lw = w.layer(l);
        const LayerParams<float> lg = g.layer(l);

        // MLP branch: dres is d residual3 = d fcproj = (so far) d residual2
        matmul_backward(mm_, d4c, lg.fcprojw, lg.fcprojb, scratch, arrivals, dres, la.fch_gelu, lw.fcprojw, n, 4 * C, C,
                        st);
        // d fch_gelu -> d fch in place (the GELU backward, in the bias gradient's launch; without biases
        // its own launch), then fc's products
        matmul_gelu_backward(mm_, a.dbtc.get(), lg.fcw, lg.fcb, scratch, arrivals, d4c, la.fch, la.ln2, lw.fcw, n, C,
                             4 * C, st, cfg_.gelu);
        layernorm_backward_partials(dres, ln2_part + (size_t)l * ln_part, a.dbtc.get(), la.residual2, lw.ln2w,
                                    la.ln2_mean, la.ln2_rstd, n, C, st);

        // attention branch: dres is now d residual2 = d attproj = (so far) d residual
        matmul_backward(mm_, a.dbtc.get(), lg.attprojw, lg.attprojb, scratch, arrivals, dres, la.atty, lw.attprojw, n,
                        C, C, st);
        AttnCall call{B, T, C, NH, G, P, softcap};
        call.bwd_scratch = scratch;
        call.split = attn_split_scratch(B, T);
        attention_backward(call, a.d3c_a.get(), a.dbtc.get(), la.att_in(), la.atty, la.att_lse, st);
        const floatX* dqkv = a.d3c_a.get();
        if (cfg_.qk_norm) {
            qknorm_backward(a.d3c_b.get(), lg.qnormw, lg.qnormb, lg.knormw, lg.knormb, scratch, a.d3c_a.get(), la.qkv,
                            lw.qnormw, lw.knormw, la.qkn_mean, la.qkn_rstd, n, C, NH, st);
            dqkv = a.d3c_b.get();
        }
        matmul_backward(mm_, a.dbtc.get(), lg.qkvw, lg.qkvb, scratch, arrivals, dqkv, la.ln1, lw.qkvw, n, C, 3 * C, st);
        layernorm_backward_partials(dres, ln1_part + (size_t)l * ln_part, a.dbtc.get(), la.residual, lw.ln1w,
                                    la.ln1_mean, la.ln1_rstd, n, C, st);
    }
    // the positions grouped by token, then uploaded from the pass's slot: grouped on the host now, while
    // the device runs the work queued above; into the step graph's capture, not grouped here: the
    // graph's first part ends before the first upload, and the host groups every micro-batch between
    // the launches of the parts (queue_update), while the device runs the first
    if (capturing_step_graph_) {
        if (graph_.parts() == 0) graph_.split(st);
    } else if (!slot_grouped_[pass_slot_]) {
        group_slot(pass_slot_, n);
    }
    CUDA_CHECK(cudaMemcpyAsync(enc_groups_.get(), slot_groups(pass_slot_), token_groups_ints(n, Vp) * sizeof(int),
                               cudaMemcpyHostToDevice, st));
    if (!capturing_step_graph_) groups_in_flight_[pass_slot_] = true;  // a captured copy runs at the launch
    encoder_backward(g.wte(), g.wpe(), dres, a.inputs.get(), enc_groups_.get(), B, T, C, Vp, st);
    const LayerParams<float> g0 = g.layer(0);
    const LayerNormPartialGroups ln_groups{
        {ln1_part, ln2_part, lnf_part}, {g0.ln1w, g0.ln2w, g.lnfw()}, {g0.ln1b, g0.ln2b, g.lnfb()}, {L, L, 1}};
    reduce_layernorm_partials(ln_groups, n, C, st);
    // backward() returns with the work queued; the next host copy (get_grads, grad_norm) synchronizes.
}

// Per layer the (kAttnStatsNear, NH) fields of the attention statistics (max, min, entropy sum,
// near mass sum, near max, far max) start at their identities (-inf, +inf, 0, 0, -inf, -inf):
// stats_identity_ holds those values on the device (uploaded once, never rewritten).
inline void CudaBackend::init_attention_stats() {
    const int L = cfg_.num_layers, NH = cfg_.num_heads;
    std::vector<float> init(attn_stats_.size());
    for (int l = 0; l < L; l++)
        for (int f = 0; f < kAttnStatsNear; f++)
            for (int h = 0; h < NH; h++) init[((size_t)l * kAttnStatsNear + f) * NH + h] = attn_stat_identity(f);
    CUDA_CHECK(cudaMemcpy(stats_identity_.get(), init.data(), stats_identity_.bytes(), cudaMemcpyHostToDevice));
}

inline void CudaBackend::reset_attention_stats() {
    CUDA_CHECK(cudaMemcpyAsync(attn_stats_.get(), stats_identity_.get(), attn_stats_.bytes(), cudaMemcpyDeviceToDevice,
                               stream_));
}

// Entry points for train_gpt2_ls.cu.
inline std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, uint64_t seed) {
    return std::make_unique<CudaBackend>(cfg, seed);
}

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB, bf16)" for the current device.
inline std::string cuda_device_description() { return describe_device(current_device_info()); }

}  // namespace llmc::cuda
