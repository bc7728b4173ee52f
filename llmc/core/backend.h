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
#include "llmc/core/model_config.h"
#include "llmc/core/params.h"

namespace llmc {

// Attention-logit statistics of one forward pass (GUIDE section 3), filled by the attention
// kernel itself (never from a materialized T x T matrix). Indexed [layer * NH + head].
struct LogitStats {
    int num_layers = 0, num_heads = 0;
    std::vector<float> max_logit;    // max pre-softmax logit q.k/sqrt(hd) over unmasked pairs
    std::vector<float> min_logit;    //   (after QK-norm, before soft-capping)
    std::vector<float> entropy;      // mean over query rows of the attention distribution's entropy (nats)
    float out_max_logit = 0.0f;      // max output-softmax logit over the batch (real vocabulary only)
    float out_mean_lse = 0.0f;       // mean over positions of logsumexp(output logits)
    // Near/far statistics (issue 16). Key j of query i (j <= i, visible to the head) is "near" when
    // its distance i - j < N, else "far"; N = near_distance, or the model's window P when that is 0
    // (near_or). Empty when the backend does not compute them (Backend::has_near_far_stats; CUDA).
    int near_distance = 0;                // input set by the caller before forward; 0 = window P
    std::vector<float> near_mass;         // mean over query rows of the softmax probability on near keys
                                          //   (far mass = 1 - near_mass)
    std::vector<float> near_max_logit;    // max pre-softmax logit over near keys (as max_logit: after
    std::vector<float> far_max_logit;     //   QK-norm, before soft-cap) / over far keys; -inf: no far key
    int near_or(int window) const { return near_distance > 0 ? near_distance : window; }
    bool has_near_far() const { return !near_mass.empty(); }
    // Sizes the per-head vectors for L x NH; the near/far ones are emptied (resize_near fills them).
    void resize(int L, int NH) {
        num_layers = L; num_heads = NH;
        max_logit.assign((size_t)L * NH, 0.0f);
        min_logit.assign((size_t)L * NH, 0.0f);
        entropy.assign((size_t)L * NH, 0.0f);
        near_mass.clear();
        near_max_logit.clear();
        far_max_logit.clear();
    }
    void resize_near(int L, int NH) {
        near_mass.assign((size_t)L * NH, 0.0f);
        near_max_logit.assign((size_t)L * NH, 0.0f);
        far_max_logit.assign((size_t)L * NH, 0.0f);
    }
    float overall_max() const {
        float m = max_logit.empty() ? 0.0f : max_logit[0];
        for (float v : max_logit) m = v > m ? v : m;
        return m;
    }
};

// What a forward pass with targets reports. Losses are means over the B*T positions.
struct ForwardResult {
    float loss = 0.0f;    // cross-entropy (the number printed and compared with references)
    float z_loss = 0.0f;  // mean of z_loss_weight * logsumexp^2 (0 when the weight is 0)
};

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
    // AdamW moments, fp32, same layout (for the training-state file).
    virtual void get_optimizer_state(float* m, float* v) const = 0;
    virtual void set_optimizer_state(const float* m, const float* v) = 0;

    // inputs, targets: (B, T) int32 token ids < vocab_size; T <= max_seq_len.
    // targets == nullptr: logits only (no loss, no backward possible).
    // stats != nullptr: the attention kernels and the classifier fill it for this pass.
    // z_loss_weight > 0 adds z_loss_weight * logsumexp(logits)^2 per position to the objective.
    virtual ForwardResult forward(const int* inputs, const int* targets, int B, int T,
                                  float z_loss_weight, LogitStats* stats) = 0;
    // Logits of the last forward, (B, T, Vp) fp32 on the host; entries [V, Vp) are meaningless.
    virtual const float* logits() = 0;
    // Whether forward fills LogitStats' near/far vectors (honouring stats->near_distance).
    virtual bool has_near_far_stats() const { return false; }

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

    // --- incremental decoding with a KV cache (issue 8); backends without one keep the defaults ---
    // kv_begin: an empty cache for B sequences of up to max_len (<= max_seq_len) tokens each.
    // kv_forward: appends n tokens to every sequence (tokens: (B, n) int32) and returns the logits of
    // those n positions, (B, n, Vp) fp32 on the host, equal to what forward() gives for the same
    // positions of the whole sequence. Global heads cache every position; local heads only their
    // last P keys and values (a ring buffer). kv_cache_bytes: memory the cache holds now.
    virtual bool has_kv_cache() const { return false; }
    virtual void kv_begin(int /*B*/, int /*max_len*/) { throw std::logic_error(std::string(name()) + " backend has no KV cache"); }
    virtual const float* kv_forward(const int* /*tokens*/, int /*n*/) { throw std::logic_error(std::string(name()) + " backend has no KV cache"); }
    virtual size_t kv_cache_bytes() const { return 0; }
    // kv_prefill_device: kv_forward of n (1 <= n <= max_len) positions into an empty cache, returning
    // once the work is done, the logits left where the backend computed them (CUDA: on the device, no
    // (B, n, Vp) host copy; logits() fetches them). What the latency benchmark times as the prefill.
    virtual void kv_prefill_device(const int* tokens, int n) { kv_forward(tokens, n); }

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

    // --- data parallelism (issue 6) ---
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
