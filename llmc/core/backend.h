// The compute-backend interface. The training loop (llmc/train/train_loop.h) is written once against
// this; the CPU backend (llmc/cpu/) and the CUDA backend (llmc/cuda/) implement it. Parameters,
// gradients and AdamW moments are fp32 in the canonical flat layout of llmc/core/params.h whenever
// they cross this interface, so checkpoints interchange between backends.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/dist/collective.h"
#include "llmc/core/logit_stats.h"
#include "llmc/core/model_config.h"
#include "llmc/core/param_scale.h"
#include "llmc/core/params.h"

namespace llmc {

// What a forward pass with targets reports. Losses are means over the B*T positions.
struct ForwardResult {
    float loss = 0.0f;    // cross-entropy (the number printed and compared with references)
    float z_loss = 0.0f;  // mean of z_loss_weight * logsumexp^2 (0 when the weight is 0)
};

// What read_queued_step reports for one optimizer step queued without host synchronisation.
struct QueuedStep {
    std::vector<ForwardResult> micro;  // per micro-batch queued since zero_grad(), in order
    std::vector<LogitStats> stats;     // their logit statistics, same order
    float norm = 0.0f;                 // global gradient norm, as grad_norm() returns it
    bool applied = false;              // whether the AdamW update was applied (skipped: non-finite)
};

// Which positions' logits kv_forward returns (Backend::kv_forward).
enum class KvLogits { Last, All };

struct AdamWHyper {
    float lr = 6e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;
    // One line for the console and config.json: "cpu (2 threads)", "NVIDIA H100 ... (sm_90, ...)".
    virtual std::string device_description() const { return name(); }
    virtual const ModelConfig& config() const = 0;
    size_t num_params() const { return param_layout(config()).total; }

    // Parameters, fp32, canonical layout (params.h), num_params() elements.
    virtual void get_params(float* dst) const = 0;
    virtual void set_params(const float* src) = 0;
    // Multiplies each run of parameters in place by its factor (llmc/core/param_scale.h: p = p *
    // factor in fp32), where the backend keeps them, with no copy of the whole model: afterwards
    // get_params returns exactly apply_param_scales of the parameters before. Runs must lie inside
    // num_params() and not overlap (check_param_scales; std::invalid_argument otherwise). Gradients
    // and AdamW moments are not touched. QK-Clip (llmc/train/qk_clip.h) calls it between steps.
    virtual void scale_params(const std::vector<ParamScale>& runs) = 0;
    // AdamW moments, fp32, same layout (for the training-state file).
    virtual void get_optimizer_state(float* m, float* v) const = 0;
    virtual void set_optimizer_state(const float* m, const float* v) = 0;

    // inputs, targets: (B, T) int32 token ids < vocab_size; T <= max_seq_len.
    // targets == nullptr: logits only (no loss, no backward possible).
    // stats != nullptr: the attention kernels and the classifier fill it for this pass.
    // z_loss_weight > 0 adds z_loss_weight * logsumexp(logits)^2 per position to the objective.
    virtual ForwardResult forward(const int* inputs, const int* targets, int B, int T, float z_loss_weight,
                                  LogitStats* stats) = 0;
    // Logits of the last forward, (B, T, Vp) fp32 on the host; entries [V, Vp) are meaningless.
    virtual const float* logits() = 0;

    virtual void zero_grad() = 0;
    // Backward of the last forward; ADDS grad_scale * d(objective)/d(params) into the gradients
    // (grad_scale = 1 / accumulation steps).
    virtual void backward(float grad_scale) = 0;
    // Gradients, fp32, canonical layout (for tests and the multi-rank all-reduce).
    virtual void get_grads(float* dst) const = 0;
    virtual void set_grads(const float* src) = 0;
    // L2 norm of all gradients.
    virtual float grad_norm() = 0;
    // One AdamW step (t = 1-based step count for bias correction); gradients are multiplied by
    // grad_multiplier first (clipping: min(1, clip / norm)).
    virtual void adamw_update(const AdamWHyper& h, int t, float grad_multiplier) = 0;

    // --- an optimizer step without host synchronisation (docs/cuda_backend.md, "The step") ---
    // A backend with has_queued_step() lets the training loop queue a whole step and read its numbers
    // once, after it (llmc/train/train_step.h):
    //   queue_micro_batch: forward with targets and logit statistics (near_distance as
    //     LogitStats::near_distance), then backward(grad_scale); the losses and statistics stay on the
    //     device (the tokens are still checked on the host, and bad ones throw InputError as in forward()).
    //   queue_update: the global gradient norm, then AdamW step t with the gradient multiplier
    //     grad_clip / norm when grad_clip > 0 and norm > grad_clip (else 1), decided on the device; the
    //     update is skipped there when the norm or the loss of a queued micro-batch is not finite -
    //     the loop's rule for a skipped step, taken from the same numbers.
    //   read_queued_step: waits for the queued work and reports it (QueuedStep).
    virtual bool has_queued_step() const { return false; }
    virtual void queue_micro_batch(const int* /*inputs*/, const int* /*targets*/, int /*B*/, int /*T*/,
                                   float /*z_loss_weight*/, float /*grad_scale*/, int /*near_distance*/) {
        throw std::logic_error(std::string(name()) + " backend has no queued step");
    }
    virtual void queue_update(const AdamWHyper& /*h*/, int /*t*/, float /*grad_clip*/) {
        throw std::logic_error(std::string(name()) + " backend has no queued step");
    }
    virtual void read_queued_step(QueuedStep& /*out*/) {
        throw std::logic_error(std::string(name()) + " backend has no queued step");
    }
    // The queued step, and each KV decode step, as one CUDA graph (--cuda-graph 1): the same work and
    // bits, issued as one launch once the step's shapes repeat (a decode step: once its split depth
    // was captured). has_step_graph(): the backend can (the CUDA backend).
    virtual bool has_step_graph() const { return false; }
    virtual void use_step_graph(bool /*on*/) {
        throw std::logic_error(std::string(name()) + " backend has no step graph");
    }
    // Kernels launched with programmatic dependent launch (--pdl 1): each may be scheduled while the
    // one before it ends, and waits for it on the device; the same work and bits as without.
    // has_programmatic_launch(): the backend can (the CUDA backend; use_programmatic_launch refuses a
    // device without it).
    virtual bool has_programmatic_launch() const { return false; }
    // programmatic_launch_supported(): the backend can, and so can its device (what use_programmatic_launch
    // would not refuse; the generator's --pdl auto asks it).
    virtual bool programmatic_launch_supported() const { return has_programmatic_launch(); }
    virtual void use_programmatic_launch(bool /*on*/) {
        throw std::logic_error(std::string(name()) + " backend has no programmatic launch");
    }
    // A KV decode step's linear layers as the backend's own kernels (--fused-decode 1): each LayerNorm
    // inside the next linear layer's launch, no cuBLASLt call; the same math, not the same bits (fp32
    // sums in another order). has_fused_decode(): the backend can (the CUDA backend).
    virtual bool has_fused_decode() const { return false; }
    virtual bool fused_decode_on() const { return false; }  // use_fused_decode(true) is in effect
    virtual void use_fused_decode(bool /*on*/) {
        throw std::logic_error(std::string(name()) + " backend has no fused decode kernels");
    }

    // --- incremental decoding with a KV cache (docs/generation.md); backends without one keep the defaults ---
    // kv_begin: an empty cache for B sequences of up to max_len (<= max_seq_len) tokens each.
    // kv_forward: appends n tokens to every sequence (tokens: (B, n) int32) and returns logits fp32 on
    // the host, valid until the next call, equal to what forward() gives for the same positions of the
    // whole sequence (CPU: bit for bit; CUDA: to bf16 noise, docs/cuda_backend.md). `rows` says which:
    //   KvLogits::Last  (B, Vp): the last of the n new positions of each sequence, what sampling needs.
    //                   A prefill computes the final LayerNorm and the LM head for these B rows only.
    //   KvLogits::All   (B, n, Vp): every new position (tests, per-position output).
    // A prefill (n > 1 into an empty cache) replaces the last forward(): after one with All, logits()
    // returns its (B, n, Vp) logits; after one with Last, logits() throws std::logic_error until the
    // next forward(). Decode steps leave logits() as it was. Global heads cache every position; local
    // heads only their last P keys and values (a ring buffer). kv_cache_bytes: memory the cache holds now.
    virtual bool has_kv_cache() const { return false; }
    virtual void kv_begin(int /*B*/, int /*max_len*/) {
        throw std::logic_error(std::string(name()) + " backend has no KV cache");
    }
    virtual const float* kv_forward(const int* /*tokens*/, int /*n*/, KvLogits /*rows*/) {
        throw std::logic_error(std::string(name()) + " backend has no KV cache");
    }
    virtual size_t kv_cache_bytes() const { return 0; }
    // kv_prefill_device: kv_forward(tokens, n, KvLogits::Last) of n (1 <= n <= max_len) positions into
    // an empty cache, returning once the work is done, with the (B, Vp) logits left where the backend
    // computed them (CUDA: on the device, no host copy). What the latency benchmark times as the prefill.
    virtual void kv_prefill_device(const int* tokens, int n) { kv_forward(tokens, n, KvLogits::Last); }

    // --- attention maps (--eval-only --dump-attention; llmc/io/attention_dump.h) ---
    // attention_probs: after a forward, the attention probabilities of head `head` of layer `layer`
    // for sequence b of that batch, (T, T) fp32 on the host, row = query i, column = key j, as the
    // forward used them (after QK-norm and soft-capping); masked entries 0, each row sums to 1.
    // Only backends with has_attention_probs() (the CPU one) implement it.
    virtual bool has_attention_probs() const { return false; }
    virtual void attention_probs(int /*layer*/, int /*head*/, int /*b*/, float* /*probs*/) {
        throw std::logic_error(std::string(name()) + " backend has no attention_probs");
    }

    // --- what the console line and metrics report beside the loss (0 = not applicable) ---
    // Peak dense bf16 tensor-core rate of the device in FLOP/s (for MFU), and device memory in use.
    virtual double peak_flops() const { return 0.0; }
    virtual size_t device_memory_used() const { return 0; }

    // --- instruments ---
    // Called by the training loop at the start and at the end of optimizer step `step` (1-based;
    // llmc/train/train_step.h). They must not change the computation; the CUDA backend marks the
    // steps for the emulated device's per-step report (llmc/cuda/step_marker.cuh).
    virtual void on_step_begin(int /*step*/) {}
    virtual void on_step_end(int /*step*/) {}

    // --- data parallelism (docs/multigpu.md) ---
    // Replaces the gradients by their mean over the ranks of comm. The default goes through the
    // host (get_grads -> all-reduce Avg -> set_grads); a GPU backend may override it to reduce its
    // device buffers in place (NCCL), e.g. per layer overlapped with the backward.
    virtual void all_reduce_grads(Collective& comm) {
        if (comm.world_size() == 1) return;
        std::vector<float> g(num_params());
        get_grads(g.data());
        comm.all_reduce(g.data(), g.size(), ReduceOp::Avg);
        set_grads(g.data());
    }
};

}  // namespace llmc
