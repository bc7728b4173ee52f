// CudaBackend, the Backend of --device cuda (llmc/cuda/gpt2_cuda.cuh describes the model it runs):
// its interface and its state. One class: its concerns share one stream, one set of buffers and one
// record of the last pass, and call one another (a queued step issues the model's passes, a pass
// fills the step's staging slots), so they are members of one object, each concern's members
// defined in its own file:
//   llmc/cuda/gpt2_cuda.cuh          model wiring: construction, forward (per layer), backward
//   llmc/cuda/gpt2_cuda_step.cuh     the queued step: token staging, result slots, the CUDA graph
//   llmc/cuda/gpt2_cuda_decode.cuh   KV-cached decoding: kv_begin, prefill, decode steps
//   llmc/cuda/gpt2_cuda_memory.cuh   the memory plan: activations and op scratch sized per pass
//   llmc/cuda/gpt2_cuda_io.cuh       parameters, optimizer state and gradients in and out, the
//                                    synchronous AdamW step and norm, logits and attention maps
// and the activation buffers in llmc/cuda/gpt2_cuda_acts.cuh.
//
// Buffers (all on the device; N = B*T rows):
//   master (P) fp32      parameters in the canonical flat layout of llmc/core/params.h (get/set_params copy it;
//                        scale_params scales runs of it in place)
//   wparams (P) floatX   working copy the kernels read; BF16 build: round-to-nearest of master,
//                        refreshed after every set_params, scale_params and AdamW step; FP32 build: the master itself
//   grads, m, v (P) fp32 gradients (every backward ADDS into them) and AdamW moments, same layout
//   activations          floatX (LayerNorm mean/rstd, attention lse, losses fp32), per layer in the
//                        layout the CPU shares (llmc/core/layer_acts.h), planned on the first forward
//                        and grown if a later pass is larger
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/core/backend.h"
#include "llmc/core/batch_check.h"
#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/attention_decode.cuh"
#include "llmc/cuda/attention_ls.cuh"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/device_buffer.h"
#include "llmc/cuda/device_info.cuh"
#include "llmc/cuda/gpt2_cuda_acts.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/step_graph.cuh"
#include "llmc/cuda/step_marker.cuh"
#include "llmc/core/model_config.h"
#include "llmc/core/param_scale.h"
#include "llmc/core/param_view.h"
#include "llmc/core/params.h"
#include "llmc/core/token_groups.h"

namespace llmc::cuda {

class CudaBackend : public Backend {
public:
    CudaBackend(const ModelConfig& cfg, uint64_t seed);  // gpt2_cuda.cuh
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    const char* name() const override { return "cuda"; }
    std::string device_description() const override { return describe_device(current_device_info()); }
    const ModelConfig& config() const override { return cfg_; }

    // ---- model wiring (gpt2_cuda.cuh): one pass over inputs, targets (B, T) on the host
    ForwardResult forward(const int* inputs, const int* targets, int B, int T, float z_weight,
                          LogitStats* stats) override;
    void backward(float grad_scale) override;

    // ---- the queued step and its graph (gpt2_cuda_step.cuh)
    void zero_grad() override;
    bool has_queued_step() const override { return true; }
    void queue_micro_batch(const int* inputs, const int* targets, int B, int T, float z_weight, float grad_scale,
                           int near_distance) override;
    void queue_update(const AdamWHyper& h, int t, float grad_clip) override;
    bool has_step_graph() const override { return true; }
    void use_step_graph(bool on) override;
    bool has_programmatic_launch() const override { return true; }
    bool programmatic_launch_supported() const override { return current_device_info().sm_major >= 9; }
    void use_programmatic_launch(bool on) override;
    bool has_fused_decode() const override { return true; }
    bool fused_decode_on() const override { return fused_decode_; }
    void use_fused_decode(bool on) override;
    void read_queued_step(QueuedStep& out) override;

    // ---- parameters, optimizer state, gradients, read-outs (gpt2_cuda_io.cuh)
    void get_params(float* dst) const override;
    void set_params(const float* src) override;
    void scale_params(const std::vector<ParamScale>& runs) override;
    void get_optimizer_state(float* m, float* v) const override;
    void set_optimizer_state(const float* m, const float* v) override;
    void get_grads(float* dst) const override;
    void set_grads(const float* src) override;
    float grad_norm() override;
    void adamw_update(const AdamWHyper& h, int t, float grad_multiplier) override;
    void all_reduce_grads(Collective& comm) override;
    const float* logits() override;
    bool has_attention_probs() const override { return true; }
    void attention_probs(int layer, int head, int b, float* probs) override;

    // ---- KV-cached decoding (gpt2_cuda_decode.cuh)
    bool has_kv_cache() const override { return true; }
    void kv_begin(int B, int max_len) override;
    const float* kv_forward(const int* tokens, int n, KvLogits rows) override;
    void kv_prefill_device(const int* tokens, int n) override;
    size_t kv_cache_bytes() const override { return kv_kg_.bytes() + kv_vg_.bytes() + kv_kl_.bytes() + kv_vl_.bytes(); }
    // For tests and the latency benchmark: positions cached so far, and the cache's device view.
    int kv_position() const { return kv_pos_; }
    const KvCacheView& kv_view() const { return kv_; }
    // The cuBLASLt context: its per-problem counts of the calls run (--profile-steps).
    const MatmulContext& matmul_context() const { return mm_; }

    // The step boundaries for the emulated device's per-step report (nothing under nvcc).
    void on_step_begin(int step) override { mark_step(step, true); }
    void on_step_end(int step) override { mark_step(step, false); }

    double peak_flops() const override { return peak_flops_; }
    size_t device_memory_used() const override { return device_memory_in_use(); }

    // For tests and diagnostics: the stream every op runs on, and the activations of the last forward.
    cudaStream_t stream() const { return stream_; }
    // The stream as the backend's kernels are launched on it (programmatic with --pdl 1:
    // use_programmatic_launch).
    LaunchStream launch_stream() const { return {stream_, programmatic_launch_}; }
    const Gpt2CudaActs& acts() const { return acts_; }

private:
    static constexpr bool kSeparateWorkingCopy = !std::is_same<floatX, float>::value;
    // The classifier's dlogits scale for a backward of grad_scale over N rows: d(mean)/d(row) = 1/N.
    static float dlogits_scale(float grad_scale, size_t N) { return (float)((double)grad_scale / (double)N); }
    // Dlogits: the queued step's forward already turned the logits into dlogits (its classifier pass
    // computes both), and the backward that follows takes them; Overwritten: a backward consumed them.
    // PrefillLast: the last pass was a KV prefill with KvLogits::Last (no (B, T, Vp) logits computed).
    enum class LogitsState { None, OnDevice, OnHost, Dlogits, Overwritten, PrefillLast };

    // model wiring (gpt2_cuda.cuh)
    int layer_forward(int l, int B, int T, bool with_stats, int near_n, bool head = true);
    int issue_forward(int slot, int B, int T, float z_weight, bool with_targets, bool with_stats, int near_distance,
                      float grad_scale = 0.0f, bool head = true);
    void init_attention_stats();
    void reset_attention_stats();
    // The working copy of the weights and the fp32 gradients as the model's tensors (llmc/core/param_view.h).
    ParamView<const floatX> weights() const { return {wparams_, layout_, cfg_.num_layers}; }
    ParamView<float> grad_view() const { return {grads_.get(), layout_, cfg_.num_layers}; }
    // Refuses what the model cannot run, with the fix in the message (the CPU's checks: llmc/core/batch_check.h).
    void check_batch(const int* inputs, const int* targets, int B, int T) const {
        check_token_batch(cfg_, inputs, targets, B, T);
    }

    // the queued step (gpt2_cuda_step.cuh)
    int queue_forward(const int* inputs, const int* targets, int B, int T, float z_weight, bool with_stats,
                      int near_distance, float grad_scale = 0.0f);
    void stage_tokens(int slot, const int* inputs, const int* targets, int B, int T);
    void group_slot(int slot, int n);
    // A slot of the token staging: inputs (token_stride_), targets (token_stride_), groups.
    int* slot_inputs(int slot) const { return tokens_pinned_.get() + (size_t)slot * slot_stride_; }
    int* slot_groups(int slot) const { return slot_inputs(slot) + 2 * token_stride_; }
    void ensure_token_staging(size_t slots, size_t rows);
    void note_stream_idle();
    void ensure_slots(int k);
    void issue_zero_grad();
    void issue_update(const AdamWHyper& h, float grad_clip);
    void issue_step(const StepPlan& plan, const AdamWHyper& h, float grad_clip);
    void check_no_open_graph_step(const char* call) const;
    void note_issued_step(const StepPlan& plan);
    ForwardResult read_slot(int k, LogitStats* stats) const;

    // KV-cached decoding (gpt2_cuda_decode.cuh)
    void kv_prefill_queue(const int* tokens, int n, KvLogits rows);
    const float* kv_logits_to_host(const floatX* rows, size_t count);
    void kv_decode();
    void stage_decode_input(int t);
    void issue_decode_input();
    void issue_decode(int splits);
    void kv_layer_rest(int l, int splits, const floatX* att_in);
    bool decode_fused() const;
    void check_fused_decode(int B) const;
    void issue_decode_head();

    // the memory plan (gpt2_cuda_memory.cuh)
    void ensure_capacity(int B, int T, bool head);
    AttnSplitScratch attn_split_scratch(int B, int T) const;
    void print_memory_plan() const;

    // parameters and optimizer (gpt2_cuda_io.cuh)
    detail::AdamWSegments segments_with_decay(float weight_decay) const;
    // Where AdamW writes the working copy: the bf16 buffer, or nothing (FP32 build: it is the master).
    floatX* working_copy_target() const { return kSeparateWorkingCopy ? wparams_ : nullptr; }
    void refresh_working_copy();
    // Host <-> device copies on the stream; download waits for them.
    template <typename T>
    void upload(T* dst, const T* src, size_t count) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyHostToDevice, stream_));
    }
    template <typename T>
    void download(T* dst, const T* src, size_t count) const {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    ModelConfig cfg_;
    ParamLayout layout_;
    cudaStream_t stream_ = nullptr;
    MatmulContext mm_;
    DeviceBuffer<float> master_, grads_, m_, v_;  // (P) fp32, canonical layout
    DeviceBuffer<ParamScale> scale_runs_;         // the runs of the last scale_params (grown on demand)
    DeviceBuffer<floatX> wparams_buf_;            // (P) BF16 build only
    floatX* wparams_ = nullptr;                   // working copy the kernels read
    Gpt2CudaActs acts_;
    size_t capacity_ = 0;              // rows (B*T) the activations' forward group holds
    size_t head_capacity_ = 0;         // rows the head group (logits, loss rows, backward) holds
    DeviceBuffer<float> scratch_;      // shared op scratch (ops run one after another on stream_)
    DeviceBuffer<uint32_t> arrivals_;  // the ops' arrival counters (llmc/cuda/grid_arrival.cuh), zero between ops
    DeviceBuffer<float>
        stats_part_;  // (L, ...): each layer's attention statistics partials, merged after the last layer
    DeviceBuffer<float> ln_partials_;   // (2L + 1, blocks, 2, C): the backward's LayerNorm partials, reduced at its end
    DeviceBuffer<float> attn_stats_;    // (L, kAttnStatsNear, NH) the attention statistics' fields per layer
    DeviceBuffer<float> probs_dev_;     // (T, T) attention_probs' rows (grown on demand)
    DeviceBuffer<float> norm_;          // (1) squared gradient norm
    DeviceBuffer<double> summary_dev_;  // (4) the last classifier pass's summary (classifier_summary)
    DeviceBuffer<double> loss_check_;   // (1) sum of the losses queued since zero_grad (AdamW's verdict)
    DeviceBuffer<int> applied_dev_;     // (1) AdamW's verdict of the last queue_update (1 = applied)
    detail::AdamWSegments segments_;    // the canonical layout's tensors (weight decay set per call)
    DeviceBuffer<int> enc_groups_;      // (token_groups_ints(B*T, Vp)) the backward pass's token groups, uploaded
    DeviceBuffer<float> stats_identity_;               // (L, kAttnStatsNear, NH) the statistics' start values
    DeviceBuffer<detail::AdamWStepScalars> step_dev_;  // (1) the queued step's lr and bias corrections
    // host side
    // (slots, slot_stride_) per pass: inputs, targets (token_stride_ each), then the inputs' token groups
    // (token_groups_ints(token_stride_, Vp): llmc/core/token_groups.h)
    PinnedBuffer<int> tokens_pinned_;
    size_t token_stride_ = 0, slot_stride_ = 0;
    std::vector<bool> staged_in_flight_;  // (slots) an upload of the slot's tokens may not have run yet
    std::vector<bool> groups_in_flight_;  // (slots) an upload of the slot's groups may not have run yet
    std::vector<bool> slot_grouped_;      // (slots) the slot's groups are those of its staged inputs
    int pass_slot_ = 0;                   // the slot of the last forward (its backward uploads its groups)
    TokenGroupScratch group_scratch_;     // group_tokens' host scratch
    PinnedBuffer<detail::AdamWStepScalars> step_pinned_;  // (1) copied to step_dev_ inside the step
    PinnedBuffer<double> summary_pinned_;                 // (slots, 4) per pass: classifier_summary
    PinnedBuffer<float> stats_pinned_;  // (slots, L, kAttnStatsNear, NH) per pass: attention statistics
    std::vector<size_t> slot_rows_;     // (slots) rows B*T of the pass in each slot
    std::vector<int> slot_near_;        // (slots) its near/far distance (0: no near/far statistics)
    PinnedBuffer<float> norm_pinned_;   // (1) squared gradient norm of the last queue_update
    PinnedBuffer<int> applied_pinned_;  // (1) its verdict
    cudaEvent_t step_done_ = nullptr;   // recorded after queue_update's copies
    int queued_ = 0;                    // micro-batches queued since zero_grad
    bool update_queued_ = false;        // queue_update since zero_grad
    // the step graph (use_step_graph)
    bool use_graph_ = false;
    bool programmatic_launch_ = false;   // use_programmatic_launch (launch_stream)
    bool graph_step_open_ = false;       // zero_grad was called, queue_update not yet (graph mode)
    bool issuing_step_ = false;          // inside issue_step
    bool capturing_step_graph_ = false;  // issue_step into graph_'s capture (backward splits it)
    StepGraph graph_;
    GemmCounts graph_gemms_;                // the matmuls graph_'s capture issued (counted again at each replay)
    StepPlan plan_;                         // the step being queued (graph mode)
    StepPlan eager_plan_;                   // the last step issued eagerly in graph mode
    unsigned long long buffers_epoch_ = 0;  // +1 whenever a buffer or staging a step uses is reallocated
    std::vector<floatX> logits_stage_;      // (B, T, Vp) raw device logits
    std::vector<float> logits_host_;        // (B, T, Vp) fp32
    LogitsState logits_state_ = LogitsState::None;
    float dlogits_grad_scale_ = 0.0f;  // the grad_scale of the dlogits a Dlogits state holds
    int B_ = 0, T_ = 0;
    float z_weight_ = 0.0f;
    bool has_targets_ = false;
    double peak_flops_ = 0.0;
    // KV cache (kv_begin / kv_forward)
    KvCacheView kv_;                       // shape + pointers into the four buffers below
    DeviceBuffer<floatX> kv_kg_, kv_vg_;   // (L, B, G, max_len, hd)
    DeviceBuffer<floatX> kv_kl_, kv_vl_;   // (L, B, NH-G, R, hd)
    DeviceBuffer<float> kv_partial_;       // decode scratch (B, NH, splits, hd + 2): llmc/cuda/attention_decode.cuh
    DeviceBuffer<uint32_t> kv_arrivals_;   // (B, NH) the one-launch decode attention's counters (--fused-decode)
    int kv_pos_ = 0;                       // positions cached so far (every sequence)
    Gpt2CudaDecodeActs dec_;               // row buffers of a decode step
    std::vector<int> dec_tokens_host_;     // (B) tokens of the current decode step
    PinnedBuffer<int> dec_in_pinned_;      // (B + 1) its input as dec_.step_in receives it: tokens, position
    bool dec_in_in_flight_ = false;        // a copy of dec_in_pinned_ may not have run yet
    DecodeGraph dec_graph_;                // the decode step as a graph (use_step_graph)
    GemmCounts dec_graph_gemms_;           // the matmuls dec_graph_'s capture issued
    DecodePlan dec_eager_plan_;            // the last decode step issued eagerly in graph mode
    bool fused_decode_ = false;            // use_fused_decode: decode_linear for the decode step's layers
    std::vector<floatX> kv_logits_stage_;  // (B, Vp) raw logits of one decode step or a Last prefill
    std::vector<float> kv_logits_host_;    // what kv_forward returns, (B, Vp) or (B, n, Vp), unless logits()
};

}  // namespace llmc::cuda
