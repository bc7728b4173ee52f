// CudaBackend's parameters, optimizer state and gradients in and out, and its read-outs. The class
// and its buffers: llmc/cuda/gpt2_cuda_backend.cuh.
//
// Phases (all fp32 on the host in the canonical layout of llmc/core/params.h):
//   get/set_params             the fp32 master; set_params refreshes the working copy
//   scale_params               runs of the master and the working copy scaled on the device (QK-Clip)
//   get/set_optimizer_state    the AdamW moments m, v
//   get/set_grads              the fp32 gradients
//   grad_norm, adamw_update    the synchronous step's norm and AdamW (the queued step's:
//                              llmc/cuda/gpt2_cuda_step.cuh)
//   all_reduce_grads           the gradients averaged over the ranks (NCCL: in place on the device)
//   logits                     the last forward's logits (B, T, Vp) as fp32 on the host
//   attention_probs            one head's (T, T) map of the last forward (--dump-attention)
#pragma once
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/attention_ls.cuh"
#include "llmc/cuda/attention_probs.cuh"
#include "llmc/cuda/global_norm.cuh"
#include "llmc/cuda/gpt2_cuda_backend.cuh"
#include "llmc/cuda/param_scale.cuh"

namespace llmc::cuda {

// ---- parameters, optimizer state, gradients: fp32 host <-> device, canonical layout
inline void CudaBackend::get_params(float* dst) const { download(dst, master_.get(), layout_.total); }

inline void CudaBackend::set_params(const float* src) {
    upload(master_.get(), src, layout_.total);
    refresh_working_copy();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// The runs scaled on the device (llmc/cuda/param_scale.cuh): the master and the working copy,
// one launch; only the runs' list crosses to the device (no host copy of the parameters, no
// host synchronisation).
inline void CudaBackend::scale_params(const std::vector<ParamScale>& runs) {
    check_no_open_graph_step("scale_params");
    check_param_scales(runs, layout_.total);
    if (runs.empty()) return;
    if (scale_runs_.size() < runs.size()) scale_runs_.resize(runs.size());
    upload(scale_runs_.get(), runs.data(), runs.size());
    scale_param_runs(master_.get(), working_copy_target(), scale_runs_.get(), runs, launch_stream());
}

inline void CudaBackend::get_optimizer_state(float* m, float* v) const {
    download(m, m_.get(), layout_.total);
    download(v, v_.get(), layout_.total);
}

inline void CudaBackend::set_optimizer_state(const float* m, const float* v) {
    upload(m_.get(), m, layout_.total);
    upload(v_.get(), v, layout_.total);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

inline void CudaBackend::get_grads(float* dst) const {
    check_no_open_graph_step("get_grads");
    download(dst, grads_.get(), layout_.total);
}

inline void CudaBackend::set_grads(const float* src) {
    check_no_open_graph_step("set_grads");
    upload(grads_.get(), src, layout_.total);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// Synchronous: downloads the norm (the loop's path with --skip-spikes, --qk-clip or several ranks).
inline float CudaBackend::grad_norm() {
    check_no_open_graph_step("grad_norm");
    global_norm_squared(norm_.get(), grads_.get(), layout_.total, scratch_.get(), arrivals_.get(), launch_stream());
    float sq = 0.0f;
    download(&sq, norm_.get(), 1);
    return (float)std::sqrt((double)sq);
}

// One AdamW step over every parameter tensor, each with its own weight-decay rule (params.h), in
// one launch (adamw_update_all) that also writes the working copy. The master weights are updated
// in fp32; the working copy is the round-to-nearest of the new master (a function of the master
// alone, so a run resumed from the fp32 checkpoint continues bit-identically; see
// docs/cuda_backend.md for why not stochastic rounding).
inline void CudaBackend::adamw_update(const AdamWHyper& h, int t, float grad_multiplier) {
    check_no_open_graph_step("adamw_update");
    detail::AdamWGate gate;
    gate.multiplier = grad_multiplier;
    adamw_update_all(working_copy_target(), master_.get(), grads_.get(), m_.get(), v_.get(),
                     segments_with_decay(h.weight_decay), h.lr, h.beta1, h.beta2, h.eps, t, gate, launch_stream());
}

// AdamW's view of the flat parameter buffer: the tensors of the canonical layout, each with its
// weight decay (params.h: param_gets_weight_decay).
inline detail::AdamWSegments CudaBackend::segments_with_decay(float weight_decay) const {
    detail::AdamWSegments seg = segments_;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++)
        seg.weight_decay[id] = param_gets_weight_decay(id) ? weight_decay : 0.0f;
    return seg;
}

// BF16 build: wparams = round-to-nearest(master); FP32 build: wparams is master (nothing to do).
inline void CudaBackend::refresh_working_copy() {
    if constexpr (kSeparateWorkingCopy) copy_master_to_params(wparams_, master_.get(), layout_.total, launch_stream());
}

// ---- data parallelism: gradients averaged over the ranks. A collective that takes device buffers
// (NCCL) all-reduces the fp32 device gradient buffer in place; any other collective gets the
// Backend default (through the host).
inline void CudaBackend::all_reduce_grads(Collective& comm) {
    check_no_open_graph_step("all_reduce_grads");
    if (comm.takes_device_buffers()) {
        // the backward was queued on stream_, NCCL runs on its own stream: wait for the gradients
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        comm.all_reduce(grads_.get(), layout_.total, ReduceOp::Avg);  // synchronizes before returning
        return;
    }
    Backend::all_reduce_grads(comm);
}

// (B, T, Vp) fp32 host copy of the last forward's logits (converted from floatX on first call).
inline const float* CudaBackend::logits() {
    if (logits_state_ == LogitsState::None) throw std::logic_error("CudaBackend::logits: no forward() yet");
    if (logits_state_ == LogitsState::PrefillLast)
        throw std::logic_error(
            "CudaBackend::logits: the last pass was a KV prefill of the last positions only (KvLogits::Last); "
            "read what kv_forward returned, or run forward()");
    if (logits_state_ == LogitsState::Overwritten || logits_state_ == LogitsState::Dlogits)
        throw std::logic_error(
            "CudaBackend::logits: the logits were replaced by their gradient (by backward(), or by a queued "
            "step's classifier pass); read logits() after forward(), before backward()");
    if (logits_state_ == LogitsState::OnDevice) {
        const size_t count = (size_t)B_ * T_ * cfg_.padded_vocab_size;
        if (logits_host_.size() < count) {  // host copies only when asked for (training never is)
            logits_stage_.resize(count);
            logits_host_.resize(count);
        }
        download(logits_stage_.data(), acts_.logits.get(), count);
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)count; i++) logits_host_[i] = to_float(logits_stage_[i]);
        logits_state_ = LogitsState::OnHost;
    }
    return logits_host_.data();
}

// ---- attention maps (--eval-only --dump-attention): probs (T, T) fp32 on the host, head `head` of
// layer `layer` for sequence b of the last forward, recomputed on the device from that forward's
// attention input and log-sum-exp (llmc/cuda/attention_probs.cuh; Backend::attention_probs).
inline void CudaBackend::attention_probs(int layer, int head, int b, float* probs) {
    if (B_ < 1) throw std::logic_error("CudaBackend::attention_probs needs a preceding forward");
    if (layer < 0 || layer >= cfg_.num_layers)
        throw InputError("attention_probs: layer " + std::to_string(layer) + " out of range (the model has " +
                         std::to_string(cfg_.num_layers) + " layers)");
    if (b < 0 || b >= B_ || head < 0 || head >= cfg_.num_heads)
        throw InputError("attention_probs: sequence " + std::to_string(b) + " / head " + std::to_string(head) +
                         " out of range (B=" + std::to_string(B_) + ", NH=" + std::to_string(cfg_.num_heads) + ")");
    const size_t TT = (size_t)T_ * T_;
    if (probs_dev_.size() < TT) probs_dev_.resize(TT);
    const LayerActs<floatX, float> la = acts_.layer(layer, (size_t)B_ * T_);
    cuda::attention_probs(probs_dev_.get(), la.att_in(), la.att_lse, b, head, T_, cfg_.channels, cfg_.num_heads,
                          cfg_.global_heads, cfg_.window, cfg_.attn_softcap, attention_caps_with_tanh_approx(),
                          stream_);
    download(probs, probs_dev_.get(), TT);
}

}  // namespace llmc::cuda
