// The CUDA backend's activation buffers (llmc/cuda/gpt2_cuda_backend.cuh owns them):
//   Gpt2CudaActs         a training or evaluation pass over (B, T): every layer's activations, the
//                        final LayerNorm, the logits, the losses, the backward's gradient buffers;
//                        allocated by the memory plan (llmc/cuda/gpt2_cuda_memory.cuh), its byte
//                        totals per group printed there
//   Gpt2CudaDecodeActs   one decode step over B sequences (llmc/cuda/gpt2_cuda_decode.cuh)
#pragma once
#include <cstddef>

#include "llmc/core/layer_acts.h"
#include "llmc/core/model_config.h"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/device_buffer.h"

namespace llmc::cuda {

// alloc(buffer, count) of the activation plan: the buffer resized to count elements and filled with
// 0xFF bytes, its bytes added to total.
inline auto act_filler(size_t& total) {
    return [&total](auto& buf, size_t n) {
        buf.resize(n);
        if (n > 0) CUDA_CHECK(cudaMemset(buf.get(), 0xFF, buf.bytes()));
        total += buf.bytes();
    };
}

// Every activation buffer of the model on the device, in two groups with their own row capacities:
// the forward's (the layers) for N = B*T rows, and the head's (lnf, logits, losses, the backward's
// buffers) for the rows whose logits a pass computes (N for forward(); none for a KvLogits::Last
// prefill, whose rows are finished in the decode buffers). A pass with B*T <= capacity uses the
// leading part. The per-layer blocks (and their views) are LayerActBuffers' (llmc/core/layer_acts.h):
// floatX activations, fp32 LayerNorm statistics and attention lse. The rest, with their shapes:
struct Gpt2CudaActs : LayerActBuffers<DeviceBuffer, floatX, float> {
    // forward group
    DeviceBuffer<int> inputs, targets;  // (B, T)
    DeviceBuffer<floatX> branch;        // (B, T, C)       attproj / fcproj output before the add
    // head group: forward
    DeviceBuffer<floatX> lnf;                           // (B, T, C)
    DeviceBuffer<float> lnf_mean, lnf_rstd;             // (B, T)
    DeviceBuffer<floatX> logits;                        // (B, T, Vp)      backward overwrites it with dlogits
    DeviceBuffer<float> losses, zlosses, lse, row_max;  // (B, T)
    // head group: backward
    DeviceBuffer<floatX> dresidual;     // (B, T, C)  gradient of the residual stream, updated in place
    DeviceBuffer<floatX> dbtc;          // (B, T, C)  d lnf / d ln2 / d atty / d ln1
    DeviceBuffer<floatX> d4c;           // (B, T, 4C) d fch_gelu, then d fch (GELU backward in place)
    DeviceBuffer<floatX> d3c_a, d3c_b;  // (B, T, 3C) d qkv(n), d qkv (d3c_b: QK-norm only)

    // Byte totals per group, for the memory plan: forward (layers), logits (lnf, logits, loss rows), backward.
    size_t fwd_bytes = 0, logit_bytes = 0, bwd_bytes = 0;

    // Allocates the forward group for N rows. Every buffer is filled with 0xFF bytes (NaN in bf16 and
    // fp32), so a kernel that reads what nothing wrote shows up as NaN instead of a plausible stale value.
    void allocate_forward(const ModelConfig& cfg, size_t N) {
        const size_t C = cfg.channels;
        fwd_bytes = 0;
        auto alloc = act_filler(fwd_bytes);
        alloc(inputs, N);
        alloc(targets, N);
        allocate_layers(cfg, N, alloc);
        alloc(branch, N * C);
    }

    // Allocates the head group (logits and backward) for N rows, filled as allocate_forward's.
    void allocate_head(const ModelConfig& cfg, size_t N) {
        const size_t C = cfg.channels, Vp = cfg.padded_vocab_size;
        const size_t qk = cfg.qk_norm ? 1 : 0;
        logit_bytes = bwd_bytes = 0;
        auto logit = act_filler(logit_bytes);
        logit(lnf, N * C);
        logit(lnf_mean, N);
        logit(lnf_rstd, N);
        logit(logits, N * Vp);
        logit(losses, N);
        logit(zlosses, N);
        logit(lse, N);
        logit(row_max, N);
        auto bwd = act_filler(bwd_bytes);
        bwd(dresidual, N * C);
        bwd(dbtc, N * C);
        bwd(d4c, N * 4 * C);
        bwd(d3c_a, N * 3 * C);
        bwd(d3c_b, qk * N * 3 * C);
    }
};

// Row buffers of one decode step (one new position per sequence), for B sequences.
struct Gpt2CudaDecodeActs {
    DeviceBuffer<int> step_in;               // (B + 1) the step's input: its B tokens, then its position
    DeviceBuffer<floatX> x, x2;              // (B, C) residual stream before / after the attention branch
    DeviceBuffer<floatX> ln;                 // (B, C) output of the current LayerNorm
    DeviceBuffer<float> mean, rstd;          // (B)
    DeviceBuffer<floatX> qkv, qkvn;          // (B, 3C) (qkvn empty unless qk_norm)
    DeviceBuffer<float> qkn_mean, qkn_rstd;  // (B, 2, NH) (empty unless qk_norm)
    DeviceBuffer<floatX> atty, branch;       // (B, C)
    DeviceBuffer<floatX> fch, fch_gelu;      // (B, 4C)
    DeviceBuffer<floatX> logits;             // (B, Vp)
    int B = 0;

    const int* tokens() const { return step_in.get(); }        // (B)
    const int* position() const { return step_in.get() + B; }  // (1)

    void allocate(const ModelConfig& cfg, int B_) {
        if (B_ == B) return;
        B = B_;
        const size_t C = cfg.channels, NH = cfg.num_heads, Vp = cfg.padded_vocab_size, qk = cfg.qk_norm ? 1 : 0;
        step_in.resize(B + 1);
        x.resize(B * C);
        x2.resize(B * C);
        ln.resize(B * C);
        mean.resize(B);
        rstd.resize(B);
        qkv.resize(B * 3 * C);
        qkvn.resize(qk * B * 3 * C);
        qkn_mean.resize(qk * B * 2 * NH);
        qkn_rstd.resize(qk * B * 2 * NH);
        atty.resize(B * C);
        branch.resize(B * C);
        fch.resize(B * 4 * C);
        fch_gelu.resize(B * 4 * C);
        logits.resize(B * Vp);
    }
};

}  // namespace llmc::cuda
