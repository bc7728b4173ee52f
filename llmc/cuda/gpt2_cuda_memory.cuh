// CudaBackend's memory plan: what a pass over (B, T) needs on the device, grown when a pass needs
// more, and the plan printed whenever it changes. The class and its buffers:
// llmc/cuda/gpt2_cuda_backend.cuh; the activation buffers: llmc/cuda/gpt2_cuda_acts.cuh.
//
// Sizes (floats unless said), each the maximum over what the ops of one pass need:
//   activations     Gpt2CudaActs: the forward group for N = B*T rows, the head group (logits, loss
//                   rows, backward) for the N of the passes that compute logits (a KvLogits::Last
//                   prefill computes none); each grown to the largest N seen, never shrunk
//   scratch_        the ops' shared scratch: the norm's, QK-norm's backward, the bias gradients' (3C, C,
//                   4C with biases), LS-attention's backward D plus its split tile loops' partials
//   arrivals_       the ops' arrival counters (uint32, zero between ops; attention's split counters)
//   stats_part_     (L, ...) each layer's attention statistics partials
//   ln_partials_    (2L + 1, ...) the backward's LayerNorm dw, db partials
//   enc_groups_     (token_groups_ints(N, Vp)) ints: the encoder backward's token groups
// Every growth waits for the stream (queued work may use the old buffers) and moves buffers_epoch_
// (a captured step graph holds the old pointers: llmc/cuda/gpt2_cuda_step.cuh).
#pragma once
#include <algorithm>
#include <cstdio>

#include "llmc/core/token_groups.h"
#include "llmc/cuda/attention_ls.cuh"
#include "llmc/cuda/global_norm.cuh"
#include "llmc/cuda/gpt2_cuda_backend.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/qknorm.cuh"

namespace llmc::cuda {

// Grows activations (rows B*T; the head group only when head: the pass computes logits) and the op
// scratch (which depends on B and T separately) when this pass needs more; prints the memory plan
// whenever it changes.
inline void CudaBackend::ensure_capacity(int B, int T, bool head) {
    const size_t N = (size_t)B * T;
    const int C = cfg_.channels, NH = cfg_.num_heads;
    bool changed = false;
    if (N > capacity_) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));  // buffers in use by queued work are about to be freed
        acts_.allocate_forward(cfg_, N);
        capacity_ = N;
        changed = true;
    }
    if (head && N > head_capacity_) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        acts_.allocate_head(cfg_, N);
        head_capacity_ = N;
        changed = true;
    }
    const int n = (int)N;
    size_t need = global_norm_scratch_floats();
    if (cfg_.qk_norm) need = std::max(need, qknorm_backward_scratch_floats(n, C, NH));
    // bias gradients of qkv (3C), attproj/fcproj (C), fc (4C); the LM head has no bias (nor any
    // layer of a model without biases)
    if (cfg_.bias)
        for (int oc : {C, 3 * C, 4 * C}) need = std::max(need, matmul_backward_scratch_floats(n, oc));
    need = std::max(need, attention_ls_backward_scratch_floats(B, T, C, NH));
    // attention's split tile loops: partials in scratch_ after the backward's D, counters in arrivals_
    need = std::max(need, attention_ls_backward_scratch_floats(B, T, C, NH) +
                              attention_split_scratch_floats(B, T, C, NH, cfg_.global_heads, cfg_.window));
    if (need > scratch_.size()) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        scratch_.resize(need);
        changed = true;
    }
    if (attention_split_arrivals(B, T, NH) > arrivals_.size()) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        arrivals_.resize(attention_split_arrivals(B, T, NH), true);  // zero: every op leaves them zero
        changed = true;
    }
    const size_t stats_need = (size_t)cfg_.num_layers * attention_stats_scratch_floats(B, T, NH);
    if (stats_need > stats_part_.size()) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        stats_part_.resize(stats_need);
        changed = true;
    }
    const size_t ln_need = (size_t)(2 * cfg_.num_layers + 1) * layernorm_backward_scratch_floats(n, C);
    if (ln_need > ln_partials_.size()) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        ln_partials_.resize(ln_need);
        changed = true;
    }
    // the encoder backward's token groups, here rather than on their first use, so that they never
    // move under a captured step graph without buffers_epoch_ moving too
    const size_t enc_need = token_groups_ints(n, cfg_.padded_vocab_size);
    if (enc_need > enc_groups_.size()) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        enc_groups_.resize(enc_need);
        changed = true;
    }
    if (changed) {
        buffers_epoch_++;
        print_memory_plan();
    }
}

// Attention's split tile loops (llmc/core/attention_split.h): their partials in scratch_ after the
// backward's D (ensure_capacity sizes both), their counters in arrivals_ (zero between ops).
inline AttnSplitScratch CudaBackend::attn_split_scratch(int B, int T) const {
    return AttnSplitScratch{scratch_.get() + attention_ls_backward_scratch_floats(B, T, cfg_.channels, cfg_.num_heads),
                            arrivals_.get(), 0};
}

inline void CudaBackend::print_memory_plan() const {
    const double MiB = 1048576.0;
    const size_t P = layout_.total;
    const double params = (master_.bytes() + wparams_buf_.bytes()) / MiB;
    const double opt = (grads_.bytes() + m_.bytes() + v_.bytes()) / MiB;
    const double fwd = acts_.fwd_bytes / MiB, lg = acts_.logit_bytes / MiB, bwd = acts_.bwd_bytes / MiB;
    const double scr = (scratch_.bytes() + stats_part_.bytes() + ln_partials_.bytes()) / MiB;  // + the partials
    std::fprintf(stderr,
                 "cuda memory plan (%s, %zu params, B*T %zu, logits for %zu rows): params %.1f MiB (fp32 master%s), "
                 "grads+m+v %.1f MiB, activations %.1f MiB, logits %.1f MiB, backward %.1f MiB, scratch %.1f MiB, "
                 "total %.1f MiB\n",
                 kPrecisionName, P, capacity_, head_capacity_, params, kSeparateWorkingCopy ? " + bf16 copy" : "", opt,
                 fwd, lg, bwd, scr, params + opt + fwd + lg + bwd + scr);
}

}  // namespace llmc::cuda
