// GPT-2 with LS-attention on one GPU: CudaBackend, the Backend the training loop drives with
// --device cuda. It wires the CUDA ops of llmc/cuda/<op>.cuh together exactly as CpuBackend
// (llmc/cpu/gpt2_cpu.h) wires the CPU ops, so both compute the same model (see that file's header
// for the math). Memory, dtypes and determinism: docs/cuda_backend.md.
// Model options as on the CPU: without biases (cfg.bias false) every bias of the ParamViews is nullptr
// and each op takes nullptr for none (matmuls: no bias epilogue, no bias gradient; LayerNorms and
// QK-norm: gains only); cfg.gelu is the MLP's GELU (erf never runs in cuBLASLt's GELU epilogue:
// llmc/cuda/matmul.cuh).
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
//
// Differences from CpuBackend (interface-visible):
//   - backward() turns the device logits into dlogits in place (one fused classifier pass, no second
//     (N, Vp) buffer), so logits() must be read before backward() and a second backward() needs a
//     new forward(); both misuses throw std::logic_error instead of returning garbage.
//   - KV cache (kv_begin / kv_forward; docs/generation.md): a prefill is the ordinary forward, then every
//     layer's k (after QK-norm) and v are copied into the cache (llmc/cuda/attention_decode.cuh
//     layout); a decode step runs one row per sequence through the same ops and attends over the
//     cache. Unlike the CPU, the logits are close to forward()'s, not bit-identical: cuBLASLt may
//     pick another algorithm for B rows than for B*T, and the decode attention sums in another
//     order than the training kernel (test/gpu/test_cuda_generate.cu states the comparison rule).
//   - all_reduce_grads: with an NCCL collective, the device gradients are all-reduced in place
//     (no host round trip); otherwise the Backend default (host path).
//   - queued steps may run as one CUDA graph (use_step_graph, --cuda-graph; llmc/cuda/step_graph.cuh).
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

namespace llmc::cuda {

// Every activation buffer of the model on the device, for a capacity of N = B*T rows; a pass with
// B*T <= capacity uses the leading part. The per-layer blocks (and their views) are
// LayerActBuffers' (llmc/core/layer_acts.h): floatX activations, fp32 LayerNorm statistics and
// attention lse. The rest, with their shapes:
struct Gpt2CudaActs : LayerActBuffers<DeviceBuffer, floatX, float> {
    // forward
    DeviceBuffer<int> inputs, targets;                  // (B, T)
    DeviceBuffer<floatX> lnf;                           // (B, T, C)
    DeviceBuffer<float> lnf_mean, lnf_rstd;             // (B, T)
    DeviceBuffer<floatX> logits;                        // (B, T, Vp)      backward overwrites it with dlogits
    DeviceBuffer<float> losses, zlosses, lse, row_max;  // (B, T)
    DeviceBuffer<floatX> branch;                        // (B, T, C)       attproj / fcproj output before the add
    // backward
    DeviceBuffer<floatX> dresidual;     // (B, T, C)  gradient of the residual stream, updated in place
    DeviceBuffer<floatX> dbtc;          // (B, T, C)  d lnf / d ln2 / d atty / d ln1
    DeviceBuffer<floatX> d4c;           // (B, T, 4C) d fch_gelu, then d fch (GELU backward in place)
    DeviceBuffer<floatX> d3c_a, d3c_b;  // (B, T, 3C) d qkv(n), d qkv (d3c_b: QK-norm only)

    // Byte totals per group, for the memory plan.
    size_t fwd_bytes = 0, logit_bytes = 0, bwd_bytes = 0;

    // Allocates for N rows. Every buffer is filled with 0xFF bytes (NaN in bf16 and fp32), so a
    // kernel that reads what nothing wrote shows up as NaN instead of a plausible stale value.
    void allocate(const ModelConfig& cfg, size_t N) {
        const size_t C = cfg.channels, Vp = cfg.padded_vocab_size;
        const size_t qk = cfg.qk_norm ? 1 : 0;
        size_t* group = &fwd_bytes;
        fwd_bytes = logit_bytes = bwd_bytes = 0;
        auto alloc = [&](auto& buf, size_t n) {
            buf.resize(n);
            if (n > 0) CUDA_CHECK(cudaMemset(buf.get(), 0xFF, buf.bytes()));
            *group += buf.bytes();
        };
        alloc(inputs, N);
        alloc(targets, N);
        allocate_layers(cfg, N, alloc);
        alloc(lnf, N * C);
        alloc(lnf_mean, N);
        alloc(lnf_rstd, N);
        alloc(branch, N * C);
        group = &logit_bytes;
        alloc(logits, N * Vp);
        alloc(losses, N);
        alloc(zlosses, N);
        alloc(lse, N);
        alloc(row_max, N);
        group = &bwd_bytes;
        alloc(dresidual, N * C);
        alloc(dbtc, N * C);
        alloc(d4c, N * 4 * C);
        alloc(d3c_a, N * 3 * C);
        alloc(d3c_b, qk * N * 3 * C);
    }
};

// Row buffers of one decode step (one new position per sequence), for B sequences.
struct Gpt2CudaDecodeActs {
    DeviceBuffer<int> tokens;                // (B)
    DeviceBuffer<floatX> x, x2;              // (B, C) residual stream before / after the attention branch
    DeviceBuffer<floatX> ln;                 // (B, C) output of the current LayerNorm
    DeviceBuffer<float> mean, rstd;          // (B)
    DeviceBuffer<floatX> qkv, qkvn;          // (B, 3C) (qkvn empty unless qk_norm)
    DeviceBuffer<float> qkn_mean, qkn_rstd;  // (B, 2, NH) (empty unless qk_norm)
    DeviceBuffer<floatX> atty, branch;       // (B, C)
    DeviceBuffer<floatX> fch, fch_gelu;      // (B, 4C)
    DeviceBuffer<floatX> logits;             // (B, Vp)
    int B = 0;

    void allocate(const ModelConfig& cfg, int B_) {
        if (B_ == B) return;
        B = B_;
        const size_t C = cfg.channels, NH = cfg.num_heads, Vp = cfg.padded_vocab_size, qk = cfg.qk_norm ? 1 : 0;
        tokens.resize(B);
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

class CudaBackend : public Backend {
public:
    // Builds the initial fp32 parameters on the host exactly as CpuBackend does (llmc::init_params,
    // same seed -> same weights) and uploads them. Throws InputError for an unbuildable config.
    CudaBackend(const ModelConfig& cfg, uint64_t seed) : cfg_(cfg) {
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
    ~CudaBackend() override {
        cudaStreamSynchronize(stream_);  // no throw from a destructor; buffers free after this
        cudaEventDestroy(step_done_);
        cudaStreamDestroy(stream_);
    }
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    const char* name() const override { return "cuda"; }
    std::string device_description() const override { return describe_device(current_device_info()); }
    const ModelConfig& config() const override { return cfg_; }

    // ---- parameters, optimizer state, gradients: fp32 host <-> device, canonical layout
    void get_params(float* dst) const override { download(dst, master_.get(), layout_.total); }
    void set_params(const float* src) override {
        upload(master_.get(), src, layout_.total);
        refresh_working_copy();
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    // The runs scaled on the device (llmc/cuda/param_scale.cuh): the master and the working copy,
    // one launch; only the runs' list crosses to the device (no host copy of the parameters, no
    // host synchronisation).
    void scale_params(const std::vector<ParamScale>& runs) override {
        check_no_open_graph_step("scale_params");
        check_param_scales(runs, layout_.total);
        if (runs.empty()) return;
        if (scale_runs_.size() < runs.size()) scale_runs_.resize(runs.size());
        upload(scale_runs_.get(), runs.data(), runs.size());
        scale_param_runs(master_.get(), working_copy_target(), scale_runs_.get(), runs, stream_);
    }
    void get_optimizer_state(float* m, float* v) const override {
        download(m, m_.get(), layout_.total);
        download(v, v_.get(), layout_.total);
    }
    void set_optimizer_state(const float* m, const float* v) override {
        upload(m_.get(), m, layout_.total);
        upload(v_.get(), v, layout_.total);
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    void get_grads(float* dst) const override {
        check_no_open_graph_step("get_grads");
        download(dst, grads_.get(), layout_.total);
    }
    void set_grads(const float* src) override {
        check_no_open_graph_step("set_grads");
        upload(grads_.get(), src, layout_.total);
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    // Also starts a new queued step: its micro-batch slots and the device's running loss sum. With
    // the step graph (use_step_graph) the step's work is issued at queue_update, as one graph.
    void zero_grad() override {
        if (!use_graph_) issue_zero_grad();
        graph_step_open_ = use_graph_;
        plan_ = StepPlan();
        queued_ = 0;
        update_queued_ = false;
    }

    // ---- forward: inputs, targets (B, T) on the host; see Backend::forward. The pass is queued as for
    // queue_micro_batch (its numbers in the next free slot), then the host waits and reads them.
    ForwardResult forward(const int* inputs, const int* targets, int B, int T, float z_weight,
                          LogitStats* stats) override {
        check_no_open_graph_step("forward");
        const int slot =
            queue_forward(inputs, targets, B, T, z_weight, stats != nullptr, stats ? stats->near_distance : 0);
        if (slot < 0) return ForwardResult{};
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        note_stream_idle();
        return read_slot(slot, stats);
    }

    // ---- a step without host synchronisation (Backend::has_queued_step). Each micro-batch's summary
    // (classifier_summary: 4 doubles) and attention statistics are copied asynchronously into its slot
    // of pinned host memory; queue_update queues the norm, AdamW with the device's verdict and clip
    // factor, the copies of the norm and the verdict, and records step_done_; read_queued_step waits
    // for that event (the step's only wait) and reads the slots.
    bool has_queued_step() const override { return true; }
    void queue_micro_batch(const int* inputs, const int* targets, int B, int T, float z_weight, float grad_scale,
                           int near_distance) override {
        if (!targets) throw std::logic_error("CudaBackend::queue_micro_batch needs targets");
        if (use_graph_) {  // staged now, issued at queue_update
            check_batch(inputs, targets, B, T);
            stage_tokens(queued_, inputs, targets, B, T);
            group_slot(queued_, B * T);  // the graph's copy reads the slot: grouped before the launch
            plan_.micro.push_back({B, T, z_weight, grad_scale, near_distance});
            queued_++;
            return;
        }
        queue_forward(inputs, targets, B, T, z_weight, true, near_distance);
        queued_++;
        backward(grad_scale);
    }
    // Step t's lr and bias corrections go to the device through page-locked memory inside the step
    // (issue_update). With the step graph: the step just planned is launched as the graph captured
    // from an identical plan; else, when it repeats the last step issued eagerly (so every buffer is
    // allocated and every shape seen), it is captured and launched; else issued eagerly.
    void queue_update(const AdamWHyper& h, int t, float grad_clip) override {
        *step_pinned_.get() = detail::adamw_step_scalars(h.lr, h.beta1, h.beta2, t);
        if (use_graph_) {
            if (plan_.micro.empty()) throw std::logic_error("CudaBackend::queue_update needs a queued micro-batch");
            graph_step_open_ = false;
            plan_.beta1 = h.beta1;
            plan_.beta2 = h.beta2;
            plan_.eps = h.eps;
            plan_.weight_decay = h.weight_decay;
            plan_.grad_clip = grad_clip;
            plan_.buffers_epoch = buffers_epoch_;
            if (graph_.matches(plan_)) {
                graph_.launch(stream_);
                note_issued_step(plan_);
            } else if (plan_ == eager_plan_) {
                graph_.capture_and_launch(stream_, plan_, [&] { issue_step(plan_, h, grad_clip); });
            } else {
                graph_.reset();
                issue_step(plan_, h, grad_clip);
                eager_plan_ = plan_;
                eager_plan_.buffers_epoch = buffers_epoch_;  // after whatever the step allocated
            }
        } else {
            issue_update(h, grad_clip);
        }
        CUDA_CHECK(cudaEventRecord(step_done_, stream_));
        update_queued_ = true;
    }
    // --cuda-graph: queued steps run as a CUDA graph (llmc/cuda/step_graph.cuh), the same work with
    // the same bits as without.
    bool has_step_graph() const override { return true; }
    void use_step_graph(bool on) override {
        graph_.reset();
        use_graph_ = on;
        eager_plan_ = StepPlan();
    }
    void read_queued_step(QueuedStep& out) override {
        if (!update_queued_) throw std::logic_error("CudaBackend::read_queued_step needs queue_update first");
        CUDA_CHECK(cudaEventSynchronize(step_done_));
        note_stream_idle();  // step_done_ follows every upload of the step
        out.micro.resize(queued_);
        out.stats.resize(queued_);
        for (int k = 0; k < queued_; k++) out.micro[k] = read_slot(k, &out.stats[k]);
        out.norm = (float)std::sqrt((double)norm_pinned_.get()[0]);  // grad_norm()'s expression
        out.applied = applied_pinned_.get()[0] != 0;
    }

    // (B, T, Vp) fp32 host copy of the last forward's logits (converted from floatX on first call).
    const float* logits() override {
        if (logits_state_ == LogitsState::None) throw std::logic_error("CudaBackend::logits: no forward() yet");
        if (logits_state_ == LogitsState::Overwritten)
            throw std::logic_error(
                "CudaBackend::logits: backward() replaced the logits by their gradient; "
                "read logits() before backward()");
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

    // ---- backward: ADDS grad_scale * d(mean CE + mean z-loss)/d(params) into the fp32 gradients
    void backward(float grad_scale) override {
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
        cudaStream_t st = stream_;
        Gpt2CudaActs& a = acts_;
        float* scratch = scratch_.get();
        uint32_t* arrivals = arrivals_.get();
        const ParamView<const floatX> w = weights();
        const ParamView<float> g = grad_view();

        // classifier: logits -> dlogits in place, objective (1/N) sum (CE + z), scaled by grad_scale
        const float dloss = (float)((double)grad_scale / (double)N);
        classifier_forward_backward(a.logits.get(), a.lse.get(), a.losses.get(), a.zlosses.get(), nullptr,
                                    a.targets.get(), z_weight_, dloss, n, V, Vp, st);
        logits_state_ = LogitsState::Overwritten;
        floatX* dlogits = a.logits.get();
        matmul_backward(mm_, a.dbtc.get(), g.lm_head(), nullptr, scratch, arrivals, dlogits, a.lnf.get(), w.lm_head(),
                        n, C, Vp, st);
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
            matmul_backward(mm_, d4c, lg.fcprojw, lg.fcprojb, scratch, arrivals, dres, la.fch_gelu, lw.fcprojw, n,
                            4 * C, C, st);
            // d fch_gelu -> d fch in place (the GELU backward, in the bias gradient's launch; without biases
            // its own launch), then fc's products
            matmul_gelu_backward(mm_, a.dbtc.get(), lg.fcw, lg.fcb, scratch, arrivals, d4c, la.fch, la.ln2, lw.fcw, n,
                                 C, 4 * C, st, cfg_.gelu);
            layernorm_backward_partials(dres, ln2_part + (size_t)l * ln_part, a.dbtc.get(), la.residual2, lw.ln2w,
                                        la.ln2_mean, la.ln2_rstd, n, C, st);

            // attention branch: dres is now d residual2 = d attproj = (so far) d residual
            matmul_backward(mm_, a.dbtc.get(), lg.attprojw, lg.attprojb, scratch, arrivals, dres, la.atty, lw.attprojw,
                            n, C, C, st);
            AttnCall call{B, T, C, NH, G, P, softcap};
            call.bwd_scratch = scratch;
            call.split = attn_split_scratch(B, T);
            attention_backward(call, a.d3c_a.get(), a.dbtc.get(), la.att_in(), la.atty, la.att_lse, st);
            const floatX* dqkv = a.d3c_a.get();
            if (cfg_.qk_norm) {
                qknorm_backward(a.d3c_b.get(), lg.qnormw, lg.qnormb, lg.knormw, lg.knormb, scratch, a.d3c_a.get(),
                                la.qkv, lw.qnormw, lw.knormw, la.qkn_mean, la.qkn_rstd, n, C, NH, st);
                dqkv = a.d3c_b.get();
            }
            matmul_backward(mm_, a.dbtc.get(), lg.qkvw, lg.qkvb, scratch, arrivals, dqkv, la.ln1, lw.qkvw, n, C, 3 * C,
                            st);
            layernorm_backward_partials(dres, ln1_part + (size_t)l * ln_part, a.dbtc.get(), la.residual, lw.ln1w,
                                        la.ln1_mean, la.ln1_rstd, n, C, st);
        }
        // the positions grouped by token: on the host now (unless staged so: the step graph), while
        // the device runs the work queued above, then uploaded from the pass's slot
        if (!slot_grouped_[pass_slot_]) group_slot(pass_slot_, n);
        CUDA_CHECK(cudaMemcpyAsync(enc_groups_.get(), slot_groups(pass_slot_), token_groups_ints(n, Vp) * sizeof(int),
                                   cudaMemcpyHostToDevice, st));
        groups_in_flight_[pass_slot_] = true;
        encoder_backward(g.wte(), g.wpe(), dres, a.inputs.get(), enc_groups_.get(), B, T, C, Vp, st);
        const LayerParams<float> g0 = g.layer(0);
        const LayerNormPartialGroups ln_groups{
            {ln1_part, ln2_part, lnf_part}, {g0.ln1w, g0.ln2w, g.lnfw()}, {g0.ln1b, g0.ln2b, g.lnfb()}, {L, L, 1}};
        reduce_layernorm_partials(ln_groups, n, C, st);
        // backward() returns with the work queued; the next host copy (get_grads, grad_norm) synchronizes.
    }

    // Synchronous: downloads the norm (the loop's path with --skip-spikes, --qk-clip or several ranks).
    float grad_norm() override {
        check_no_open_graph_step("grad_norm");
        global_norm_squared(norm_.get(), grads_.get(), layout_.total, scratch_.get(), arrivals_.get(), stream_);
        float sq = 0.0f;
        download(&sq, norm_.get(), 1);
        return (float)std::sqrt((double)sq);
    }

    // One AdamW step over every parameter tensor, each with its own weight-decay rule (params.h), in
    // one launch (adamw_update_all) that also writes the working copy. The master weights are updated
    // in fp32; the working copy is the round-to-nearest of the new master (a function of the master
    // alone, so a run resumed from the fp32 checkpoint continues bit-identically; see
    // docs/cuda_backend.md for why not stochastic rounding).
    void adamw_update(const AdamWHyper& h, int t, float grad_multiplier) override {
        check_no_open_graph_step("adamw_update");
        detail::AdamWGate gate;
        gate.multiplier = grad_multiplier;
        adamw_update_all(working_copy_target(), master_.get(), grads_.get(), m_.get(), v_.get(),
                         segments_with_decay(h.weight_decay), h.lr, h.beta1, h.beta2, h.eps, t, gate, stream_);
    }

    // ---- KV-cached decoding. Same semantics and errors as CpuBackend (llmc/cpu/gpt2_cpu.h);
    // cache layout: llmc/cuda/attention_decode.cuh (= llmc/cpu/kv_cache.h with floatX elements).
    bool has_kv_cache() const override { return true; }

    // An empty cache for B sequences of up to max_len (<= max_seq_len) positions each. The cache
    // buffers are reallocated only when their size changes, and filled with NaN bytes (a read of a
    // slot nothing wrote shows up as NaN).
    void kv_begin(int B, int max_len) override {
        check_kv_begin(cfg_, B, max_len);
        CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued work may still use the old buffers
        KvCacheView& c = kv_;
        c.L = cfg_.num_layers;
        c.B = B;
        c.NH = cfg_.num_heads;
        c.G = cfg_.global_heads;
        c.hd = cfg_.head_size();
        c.P = cfg_.window;
        c.max_len = max_len;
        c.ring = std::min(c.P, max_len);
        const size_t ng = (size_t)c.L * B * c.G * max_len * c.hd;          // (L, B, G, max_len, hd)
        const size_t nl = (size_t)c.L * B * (c.NH - c.G) * c.ring * c.hd;  // (L, B, NH-G, R, hd)
        for (DeviceBuffer<floatX>* buf : {&kv_kg_, &kv_vg_, &kv_kl_, &kv_vl_}) {
            const size_t n = (buf == &kv_kg_ || buf == &kv_vg_) ? ng : nl;
            if (buf->size() != n) buf->resize(n);
            if (n > 0) CUDA_CHECK(cudaMemsetAsync(buf->get(), 0xFF, buf->bytes(), stream_));
        }
        c.k_global = kv_kg_.get();
        c.v_global = kv_vg_.get();
        c.k_local = kv_kl_.get();
        c.v_local = kv_vl_.get();
        const size_t n_partial = decode_scratch_floats(B, c.NH, c.hd, max_len);
        if (kv_partial_.size() != n_partial) kv_partial_.resize(n_partial);
        c.partial = kv_partial_.get();
        dec_.allocate(cfg_, B);
        dec_tokens_host_.resize(B);
        kv_pos_ = 0;
    }

    // Appends n positions to every cached sequence; tokens: (B, n) on the host. Returns their logits
    // (B, n, Vp) fp32 on the host, valid until the next call. Prefill (n > 1 into an empty cache): the
    // ordinary forward, then the cache filled from its qkv; otherwise one decode step per position.
    const float* kv_forward(const int* tokens, int n) override {
        const int B = kv_.B, Vp = cfg_.padded_vocab_size;
        if (B < 1) throw std::logic_error("CudaBackend::kv_forward needs kv_begin first");
        check_kv_append(kv_pos_, n, kv_.max_len);
        check_batch(tokens, nullptr, B, n);
        if (kv_pos_ == 0 && n > 1) return kv_prefill(tokens, n);
        const size_t row = (size_t)Vp;
        kv_logits_host_.resize((size_t)B * n * row);
        kv_logits_stage_.resize((size_t)B * row);
        for (int i = 0; i < n; i++) {
            for (int b = 0; b < B; b++) dec_tokens_host_[b] = tokens[(size_t)b * n + i];
            kv_decode();
            download(kv_logits_stage_.data(), dec_.logits.get(), (size_t)B * row);  // waits for the step
            for (int b = 0; b < B; b++) {
                const floatX* src = kv_logits_stage_.data() + b * row;
                float* dst = kv_logits_host_.data() + ((size_t)b * n + i) * row;
                for (size_t v = 0; v < row; v++) dst[v] = to_float(src[v]);
            }
        }
        return kv_logits_host_.data();
    }

    // Prefill of an empty cache with tokens (B, n), n >= 1: the ordinary forward over (B, n), then k
    // (after QK-norm) and v of every layer copied into the cache. Returns when the device is done; the
    // logits stay on the device (logits() fetches them). kv_forward uses it; the latency benchmark
    // calls it directly so that the (B, n, Vp) host copy is not timed.
    void kv_prefill_device(const int* tokens, int n) override {
        const int B = kv_.B, L = cfg_.num_layers;
        if (B < 1) throw std::logic_error("CudaBackend::kv_prefill_device needs kv_begin first");
        if (kv_pos_ != 0) throw std::logic_error("CudaBackend::kv_prefill_device needs an empty cache (kv_begin)");
        if (n < 1 || n > kv_.max_len)
            throw InputError("kv_forward: prefill of " + std::to_string(n) +
                             " positions; pass 1 <= n <= the cache "
                             "length " +
                             std::to_string(kv_.max_len));
        forward(tokens, nullptr, B, n, 0.0f, nullptr);  // checks the tokens
        const size_t N = (size_t)B * n;
        for (int l = 0; l < L; l++) {
            const floatX* qkv = acts_.layer(l, N).att_in();  // (B, n, 3C)
            kv_store_prefill(kv_, qkv, l, n, stream_);
        }
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        kv_pos_ = n;
    }

    size_t kv_cache_bytes() const override { return kv_kg_.bytes() + kv_vg_.bytes() + kv_kl_.bytes() + kv_vl_.bytes(); }
    // For tests and the latency benchmark: positions cached so far, and the cache's device view.
    int kv_position() const { return kv_pos_; }
    const KvCacheView& kv_view() const { return kv_; }

    // ---- attention maps (--eval-only --dump-attention): probs (T, T) fp32 on the host, head `head` of
    // layer `layer` for sequence b of the last forward, recomputed on the device from that forward's
    // attention input and log-sum-exp (llmc/cuda/attention_probs.cuh; Backend::attention_probs).
    bool has_attention_probs() const override { return true; }
    void attention_probs(int layer, int head, int b, float* probs) override {
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

    // ---- data parallelism: gradients averaged over the ranks. A collective that takes device buffers
    // (NCCL) all-reduces the fp32 device gradient buffer in place; any other collective gets the
    // Backend default (through the host).
    void all_reduce_grads(Collective& comm) override {
        check_no_open_graph_step("all_reduce_grads");
        if (comm.takes_device_buffers()) {
            // the backward was queued on stream_, NCCL runs on its own stream: wait for the gradients
            CUDA_CHECK(cudaStreamSynchronize(stream_));
            comm.all_reduce(grads_.get(), layout_.total, ReduceOp::Avg);  // synchronizes before returning
            return;
        }
        Backend::all_reduce_grads(comm);
    }

    // The step boundaries for the emulated device's per-step report (nothing under nvcc).
    void on_step_begin(int step) override { mark_step(step, true); }
    void on_step_end(int step) override { mark_step(step, false); }

    double peak_flops() const override { return peak_flops_; }
    size_t device_memory_used() const override { return device_memory_in_use(); }

    // For tests and diagnostics: the stream every op runs on, and the activations of the last forward.
    cudaStream_t stream() const { return stream_; }
    const Gpt2CudaActs& acts() const { return acts_; }

private:
    const float* kv_prefill(const int* tokens, int n) {
        kv_prefill_device(tokens, n);
        return logits();  // (B, n, Vp) converted to fp32 on the host
    }

    // Queues one decode step: the tokens in dec_tokens_host_ (B) at position kv_pos_ through every
    // layer, one row per sequence, with the same ops as forward(); logits (B, Vp) in dec_.logits.
    void kv_decode() {
        const int B = kv_.B, L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads;
        const int Vp = cfg_.padded_vocab_size, t = kv_pos_;
        const float softcap = cfg_.attn_softcap;
        cudaStream_t st = stream_;
        Gpt2CudaDecodeActs& a = dec_;
        const ParamView<const floatX> w = weights();

        upload(a.tokens.get(), dec_tokens_host_.data(), (size_t)B);
        // x = wte[token] + wpe[t]  (B, C): the encoder with T = 1 and the position table shifted to row t
        encoder_forward(a.x.get(), a.tokens.get(), w.wte(), w.wpe() + (size_t)t * C, B, 1, C, st);
        layernorm_forward(a.ln.get(), a.mean.get(), a.rstd.get(), a.x.get(), w.layer(0).ln1w, w.layer(0).ln1b, B, C,
                          st);
        for (int l = 0; l < L; l++) {
            const LayerParams<const floatX> lw = w.layer(l);
            matmul_forward(mm_, a.qkv.get(), a.ln.get(), lw.qkvw, lw.qkvb, B, C, 3 * C, st);
            const floatX* att_in = a.qkv.get();  // (B, 3C)
            if (cfg_.qk_norm) {
                qknorm_forward(a.qkvn.get(), a.qkn_mean.get(), a.qkn_rstd.get(), a.qkv.get(), lw.qnormw, lw.qnormb,
                               lw.knormw, lw.knormb, B, C, NH, st);
                att_in = a.qkvn.get();
            }
            kv_store(kv_, att_in, l, t, st);
            attention_decode(a.atty.get(), att_in, kv_, l, t, softcap, st);
            matmul_forward(mm_, a.branch.get(), a.atty.get(), lw.attprojw, lw.attprojb, B, C, C, st);
            // x2 = x + attproj; ln = LayerNorm2(x2)
            fused_residual_layernorm_forward(a.x2.get(), a.ln.get(), a.mean.get(), a.rstd.get(), a.x.get(),
                                             a.branch.get(), lw.ln2w, lw.ln2b, B, C, st);
            matmul_forward(mm_, a.fch_gelu.get(), a.ln.get(), lw.fcw, lw.fcb, B, C, 4 * C, st, a.fch.get(), cfg_.gelu);
            matmul_forward(mm_, a.branch.get(), a.fch_gelu.get(), lw.fcprojw, lw.fcprojb, B, 4 * C, C, st);
            // x = x2 + fcproj (the layer output); ln = the next layer's ln1, or lnf after the last layer
            const bool last = l + 1 == L;
            fused_residual_layernorm_forward(a.x.get(), a.ln.get(), a.mean.get(), a.rstd.get(), a.x2.get(),
                                             a.branch.get(), last ? w.lnfw() : w.layer(l + 1).ln1w,
                                             last ? w.lnfb() : w.layer(l + 1).ln1b, B, C, st);
        }
        matmul_forward(mm_, a.logits.get(), a.ln.get(), w.lm_head(), nullptr, B, C, Vp, st);
        kv_pos_ = t + 1;
    }

    // The working copy of the weights and the fp32 gradients as the model's tensors (llmc/core/param_view.h).
    ParamView<const floatX> weights() const { return {wparams_, layout_, cfg_.num_layers}; }
    ParamView<float> grad_view() const { return {grads_.get(), layout_, cfg_.num_layers}; }

    // Per layer the (kAttnStatsNear, NH) fields of the attention statistics (max, min, entropy sum,
    // near mass sum, near max, far max) start at their identities (-inf, +inf, 0, 0, -inf, -inf):
    // stats_identity_ holds those values on the device (uploaded once, never rewritten).
    void init_attention_stats() {
        const int L = cfg_.num_layers, NH = cfg_.num_heads;
        std::vector<float> init(attn_stats_.size());
        for (int l = 0; l < L; l++)
            for (int f = 0; f < kAttnStatsNear; f++)
                for (int h = 0; h < NH; h++) init[((size_t)l * kAttnStatsNear + f) * NH + h] = attn_stat_identity(f);
        CUDA_CHECK(cudaMemcpy(stats_identity_.get(), init.data(), stats_identity_.bytes(), cudaMemcpyHostToDevice));
    }
    void reset_attention_stats() {
        CUDA_CHECK(cudaMemcpyAsync(attn_stats_.get(), stats_identity_.get(), attn_stats_.bytes(),
                                   cudaMemcpyDeviceToDevice, stream_));
    }

    // Queues layer l of the forward over (B, T): its input and ln1 are already there; it leaves its
    // output in residual3 and the next LayerNorm (the next layer's ln1, or lnf) fused after it.
    // near_n >= 1 (with_stats): the near/far statistics at that distance too. with_stats: the
    // attention's statistics partials go to layer l's slot of stats_part_ (the forward merges every
    // layer's in one launch); returns their query tiles.
    int layer_forward(int l, int B, int T, bool with_stats, int near_n) {
        const int L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads, G = cfg_.global_heads, P = cfg_.window;
        const size_t N = (size_t)B * T;
        const int n = (int)N;
        cudaStream_t st = stream_;
        Gpt2CudaActs& a = acts_;
        const LayerActs<floatX, float> la = a.layer(l, N);
        const LayerParams<const floatX> lw = weights().layer(l);

        // attention branch: qkv = ln1 @ qkvw^T + qkvb (N, 3C) -> [QK-norm] -> LS-attention (N, C)
        matmul_forward(mm_, la.qkv, la.ln1, lw.qkvw, lw.qkvb, n, C, 3 * C, st);
        if (cfg_.qk_norm)
            qknorm_forward(la.qkvn, la.qkn_mean, la.qkn_rstd, la.qkv, lw.qnormw, lw.qnormb, lw.knormw, lw.knormb, n, C,
                           NH, st);
        AttnCall call{B, T, C, NH, G, P, cfg_.attn_softcap};
        call.stats_part =
            with_stats ? stats_part_.get() + (size_t)l * attention_stats_scratch_floats(B, T, NH) : nullptr;
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
            fused_residual_layernorm_forward(la.residual3, a.lnf.get(), a.lnf_mean.get(), a.lnf_rstd.get(),
                                             la.residual2, a.branch.get(), weights().lnfw(), weights().lnfb(), n, C,
                                             st);
        }
        return nqt;
    }

    // Queues a forward over (B, T) (the body of forward()); with targets or stats, also the classifier
    // pass, its summary and the copies of the summary and the attention statistics into slot queued_
    // of the pinned buffers, and returns that slot (-1: logits only, nothing to read). near_distance
    // (LogitStats::near_distance) >= 1 with stats: the near/far statistics at that distance too; 0:
    // not asked for, not computed (a run without --near pays nothing for them).
    int queue_forward(const int* inputs, const int* targets, int B, int T, float z_weight, bool with_stats,
                      int near_distance) {
        check_batch(inputs, targets, B, T);
        stage_tokens(queued_, inputs, targets, B, T);
        return issue_forward(queued_, B, T, z_weight, targets != nullptr, with_stats, near_distance);
    }

    // The tokens of the pass in slot `slot` (inputs, and targets when not null) into its page-locked
    // staging, which the pass's upload reads when it runs (so a queued step, or a graph, may stage
    // them before issuing its work).
    void stage_tokens(int slot, const int* inputs, const int* targets, int B, int T) {
        const size_t N = (size_t)B * T;
        ensure_token_staging((size_t)slot + 1, N);
        if (staged_in_flight_[slot]) {  // an upload of the slot's tokens may not have run yet
            CUDA_CHECK(cudaStreamSynchronize(stream_));
            note_stream_idle();
        }
        int* dst = slot_inputs(slot);
        std::copy(inputs, inputs + N, dst);
        if (targets) std::copy(targets, targets + N, dst + token_stride_);
        slot_grouped_[slot] = false;
    }
    // The positions of the inputs staged in `slot` (n of them) grouped by token into the slot's groups
    // (llmc/core/token_groups.h), which the backward uploads for the encoder backward. Waits only if
    // the slot's last groups upload may not have run yet (no flow of the training loop leaves one:
    // every step and every synchronous forward waits for the stream first).
    void group_slot(int slot, int n) {
        if (groups_in_flight_[slot]) {
            CUDA_CHECK(cudaStreamSynchronize(stream_));
            note_stream_idle();
        }
        group_tokens(slot_groups(slot), slot_inputs(slot), n, cfg_.padded_vocab_size, group_scratch_);
        slot_grouped_[slot] = true;
    }
    // A slot of the token staging: inputs (token_stride_), targets (token_stride_), groups.
    int* slot_inputs(int slot) const { return tokens_pinned_.get() + (size_t)slot * slot_stride_; }
    int* slot_groups(int slot) const { return slot_inputs(slot) + 2 * token_stride_; }
    // Staging for `slots` passes of up to `rows` tokens; growing waits for the queued uploads (a
    // host synchronisation: only when a step has more passes or rows than any before) and keeps what
    // is staged (a graph step stages every micro-batch before it issues any).
    void ensure_token_staging(size_t slots, size_t rows) {
        const size_t old_stride = token_stride_, old_slot_stride = slot_stride_;
        const size_t old_slots = old_slot_stride ? tokens_pinned_.size() / old_slot_stride : 0;
        if (slots <= old_slots && rows <= old_stride) return;
        const size_t stride = std::max(rows, old_stride), cap = std::max(slots, 2 * old_slots);
        const size_t slot_stride = 2 * stride + token_groups_ints((int)stride, cfg_.padded_vocab_size);
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        const std::vector<int> kept(tokens_pinned_.get(), tokens_pinned_.get() + tokens_pinned_.size());
        tokens_pinned_.resize(cap * slot_stride);
        for (size_t k = 0; k < old_slots; k++) {  // inputs, targets, groups at their new offsets
            const auto from = kept.begin() + k * old_slot_stride;
            int* to = tokens_pinned_.get() + k * slot_stride;
            std::copy(from, from + old_stride, to);
            std::copy(from + old_stride, from + 2 * old_stride, to + stride);
            std::copy(from + 2 * old_stride, from + old_slot_stride, to + 2 * stride);
        }
        token_stride_ = stride;
        slot_stride_ = slot_stride;
        staged_in_flight_.assign(cap, false);  // the synchronization above completed every upload
        groups_in_flight_.assign(cap, false);
        slot_grouped_.resize(cap, false);
        buffers_epoch_++;
    }
    // The host waited for everything issued on the stream: no upload still reads the staging.
    void note_stream_idle() {
        std::fill(staged_in_flight_.begin(), staged_in_flight_.end(), false);
        std::fill(groups_in_flight_.begin(), groups_in_flight_.end(), false);
    }

    // Issues the forward of queue_forward for the tokens staged in `slot` (stage_tokens).
    int issue_forward(int slot, int B, int T, float z_weight, bool with_targets, bool with_stats, int near_distance) {
        const int L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads, V = cfg_.vocab_size,
                  Vp = cfg_.padded_vocab_size;
        const size_t N = (size_t)B * T;
        const int n = (int)N;
        ensure_capacity(B, T);
        B_ = B;
        T_ = T;
        z_weight_ = z_weight;
        has_targets_ = with_targets;
        logits_state_ = LogitsState::OnDevice;
        cudaStream_t st = stream_;
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
        layernorm_forward(first.ln1, first.ln1_mean, first.ln1_rstd, first.residual, w.layer(0).ln1w, w.layer(0).ln1b,
                          n, C, st);
        const int near_n = with_stats ? near_distance : 0;
        int nqt = 0;
        for (int l = 0; l < L; l++) nqt = layer_forward(l, B, T, with_stats, near_n);
        if (with_stats)  // every layer's attention statistics, (F, NH) per layer in attn_stats_
            attention_stats_reduce(attn_stats_.get(), (size_t)kAttnStatsNear * NH, stats_part_.get(),
                                   attention_stats_scratch_floats(B, T, NH), L, B, NH, nqt, near_n, st);
        // LM head, no bias: logits = lnf @ wte^T (lm_head^T when untied)   (N, Vp)
        matmul_forward(mm_, a.logits.get(), a.lnf.get(), w.lm_head(), nullptr, n, C, Vp, st);
        if (!targets && !with_stats) return -1;

        classifier_forward_backward(a.logits.get(), a.lse.get(), a.losses.get(), a.zlosses.get(),
                                    with_stats ? a.row_max.get() : nullptr, targets ? a.targets.get() : nullptr,
                                    z_weight, 0.0f, n, V, Vp, st);
        ensure_slots(slot + 1);
        slot_rows_[slot] = N;
        slot_near_[slot] = near_n;
        classifier_summary(summary_dev_.get(), targets ? loss_check_.get() : nullptr,
                           targets ? a.losses.get() : nullptr, targets ? a.zlosses.get() : nullptr, a.lse.get(),
                           with_stats ? a.row_max.get() : nullptr, n, st);
        CUDA_CHECK(cudaMemcpyAsync(summary_pinned_.get() + (size_t)slot * detail::kSummaryFields, summary_dev_.get(),
                                   summary_dev_.bytes(), cudaMemcpyDeviceToHost, st));
        if (with_stats)
            CUDA_CHECK(cudaMemcpyAsync(stats_pinned_.get() + (size_t)slot * attn_stats_.size(), attn_stats_.get(),
                                       attn_stats_.bytes(), cudaMemcpyDeviceToHost, st));
        return slot;
    }

    // Pinned slots for at least k passes. Growing waits for the queued copies into the old slots
    // (a host synchronisation, only when a step has more micro-batches than any before).
    void ensure_slots(int k) {
        if ((size_t)k <= slot_rows_.size()) return;
        const size_t old = slot_rows_.size(), cap = std::max<size_t>((size_t)k, 2 * old);
        const size_t F = detail::kSummaryFields, S = attn_stats_.size();
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        std::vector<double> summaries(summary_pinned_.get(), summary_pinned_.get() + old * F);
        std::vector<float> stats(stats_pinned_.get(), stats_pinned_.get() + old * S);
        summary_pinned_.resize(cap * F);
        stats_pinned_.resize(cap * S);
        std::copy(summaries.begin(), summaries.end(), summary_pinned_.get());
        std::copy(stats.begin(), stats.end(), stats_pinned_.get());
        slot_rows_.resize(cap, 0);
        slot_near_.resize(cap, 0);
        buffers_epoch_++;
    }

    // ---- a queued step's work (queue_micro_batch / queue_update issue it as they come; with the step
    // graph, issue_step issues a whole planned step at queue_update, eagerly or into a capture)
    void issue_zero_grad() {
        CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
        CUDA_CHECK(cudaMemsetAsync(loss_check_.get(), 0, loss_check_.bytes(), stream_));
    }
    // The norm, then AdamW with the device's verdict and clip factor and the step's scalars copied
    // from step_pinned_ (which queue_update wrote), then the copies of the norm and the verdict.
    void issue_update(const AdamWHyper& h, float grad_clip) {
        global_norm_squared(norm_.get(), grads_.get(), layout_.total, scratch_.get(), arrivals_.get(), stream_);
        CUDA_CHECK(
            cudaMemcpyAsync(step_dev_.get(), step_pinned_.get(), step_dev_.bytes(), cudaMemcpyHostToDevice, stream_));
        detail::AdamWGate gate;
        gate.norm_sq = norm_.get();
        gate.loss_check = loss_check_.get();
        gate.grad_clip = grad_clip;
        gate.applied = applied_dev_.get();
        gate.step = step_dev_.get();
        adamw_update_all(working_copy_target(), master_.get(), grads_.get(), m_.get(), v_.get(),
                         segments_with_decay(h.weight_decay), h.lr, h.beta1, h.beta2, h.eps, 0, gate, stream_);
        CUDA_CHECK(cudaMemcpyAsync(norm_pinned_.get(), norm_.get(), sizeof(float), cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(
            cudaMemcpyAsync(applied_pinned_.get(), applied_dev_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
    }
    // The whole planned step, its micro-batches' tokens already staged in slots 0.. (queue_micro_batch).
    void issue_step(const StepPlan& plan, const AdamWHyper& h, float grad_clip) {
        issuing_step_ = true;
        struct Done {
            bool& flag;
            ~Done() { flag = false; }
        } done{issuing_step_};
        issue_zero_grad();
        queued_ = 0;
        for (const StepPlan::Micro& m : plan.micro) {
            issue_forward(queued_, m.B, m.T, m.z_weight, true, true, m.near_distance);
            queued_++;
            backward(m.grad_scale);
        }
        issue_update(h, grad_clip);
    }
    // With the step graph, zero_grad opens a step whose work waits for queue_update: the gradients,
    // and whatever reads or updates them, are not the step's until then (the training loop never
    // mixes the two; this refuses it).
    void check_no_open_graph_step(const char* call) const {
        if (graph_step_open_)
            throw std::logic_error(std::string("CudaBackend::") + call +
                                   " between zero_grad and queue_update with the step graph on; a step is zero_grad, "
                                   "queue_micro_batch per micro-batch, queue_update");
    }
    // The host's record of a step that a graph launch issued: what issue_step would have left.
    void note_issued_step(const StepPlan& plan) {
        for (size_t k = 0; k < plan.micro.size(); k++) {
            const StepPlan::Micro& m = plan.micro[k];
            slot_rows_[k] = (size_t)m.B * m.T;
            slot_near_[k] = m.near_distance;
        }
        const StepPlan::Micro& last = plan.micro.back();
        B_ = last.B;
        T_ = last.T;
        z_weight_ = last.z_weight;
        has_targets_ = true;
        logits_state_ = LogitsState::Overwritten;  // the last backward turned the logits into dlogits
        queued_ = (int)plan.micro.size();
    }

    // The numbers of slot k (its copies have completed): the losses as means over its rows and, when
    // stats != nullptr, the attention and output-logit statistics.
    ForwardResult read_slot(int k, LogitStats* stats) const {
        const int L = cfg_.num_layers, NH = cfg_.num_heads;
        const double* sum = summary_pinned_.get() + (size_t)k * detail::kSummaryFields;
        const double N = (double)slot_rows_[k];
        ForwardResult res;
        res.loss = (float)(sum[detail::kSumCE] / N);
        res.z_loss = (float)(sum[detail::kSumZ] / N);
        if (!stats) return res;
        stats->resize(L, NH);
        const bool near = slot_near_[k] > 0;
        if (near) stats->resize_near(L, NH);
        for (int l = 0; l < L; l++) {
            const float* s = stats_pinned_.get() + (size_t)k * attn_stats_.size() + (size_t)l * kAttnStatsNear * NH;
            for (int h = 0; h < NH; h++) {
                const size_t i = (size_t)l * NH + h;
                stats->max_logit[i] = s[kAttnMax * NH + h];
                stats->min_logit[i] = s[kAttnMin * NH + h];
                stats->entropy[i] = (float)((double)s[kAttnEntropySum * NH + h] / N);
                if (!near) continue;
                stats->near_mass[i] = (float)((double)s[kAttnNearMassSum * NH + h] / N);
                stats->near_max_logit[i] = s[kAttnNearMax * NH + h];
                stats->far_max_logit[i] = s[kAttnFarMax * NH + h];
            }
        }
        stats->out_max_logit = (float)sum[detail::kMaxRowMax];
        stats->out_mean_lse = (float)(sum[detail::kSumLse] / N);
        return res;
    }

    // AdamW's view of the flat parameter buffer: the tensors of the canonical layout, each with its
    // weight decay (params.h: param_gets_weight_decay).
    detail::AdamWSegments segments_with_decay(float weight_decay) const {
        detail::AdamWSegments seg = segments_;
        for (int id = 0; id < NUM_PARAM_TENSORS; id++)
            seg.weight_decay[id] = param_gets_weight_decay(id) ? weight_decay : 0.0f;
        return seg;
    }
    // Where AdamW writes the working copy: the bf16 buffer, or nothing (FP32 build: it is the master).
    floatX* working_copy_target() const { return kSeparateWorkingCopy ? wparams_ : nullptr; }

    static constexpr bool kSeparateWorkingCopy = !std::is_same<floatX, float>::value;
    enum class LogitsState { None, OnDevice, OnHost, Overwritten };

    // BF16 build: wparams = round-to-nearest(master); FP32 build: wparams is master (nothing to do).
    void refresh_working_copy() {
        if constexpr (kSeparateWorkingCopy) copy_master_to_params(wparams_, master_.get(), layout_.total, stream_);
    }

    template <typename T>
    void upload(T* dst, const T* src, size_t count) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyHostToDevice, stream_));
    }
    template <typename T>
    void download(T* dst, const T* src, size_t count) const {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    // Grows activations (rows B*T) and the op scratch (which depends on B and T separately) when
    // this pass needs more; prints the memory plan whenever it changes.
    void ensure_capacity(int B, int T) {
        const size_t N = (size_t)B * T;
        const int C = cfg_.channels, NH = cfg_.num_heads;
        bool changed = false;
        if (N > capacity_) {
            CUDA_CHECK(cudaStreamSynchronize(stream_));  // buffers in use by queued work are about to be freed
            acts_.allocate(cfg_, N);
            capacity_ = N;
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
    AttnSplitScratch attn_split_scratch(int B, int T) const {
        return AttnSplitScratch{
            scratch_.get() + attention_ls_backward_scratch_floats(B, T, cfg_.channels, cfg_.num_heads), arrivals_.get(),
            0};
    }

    void print_memory_plan() const {
        const double MiB = 1048576.0;
        const size_t P = layout_.total;
        const double params = (master_.bytes() + wparams_buf_.bytes()) / MiB;
        const double opt = (grads_.bytes() + m_.bytes() + v_.bytes()) / MiB;
        const double fwd = acts_.fwd_bytes / MiB, lg = acts_.logit_bytes / MiB, bwd = acts_.bwd_bytes / MiB;
        const double scr = (scratch_.bytes() + stats_part_.bytes() + ln_partials_.bytes()) / MiB;  // + the partials
        std::fprintf(stderr,
                     "cuda memory plan (%s, %zu params, B*T %zu): params %.1f MiB (fp32 master%s), grads+m+v %.1f MiB, "
                     "activations %.1f MiB, logits %.1f MiB, backward %.1f MiB, scratch %.1f MiB, total %.1f MiB\n",
                     kPrecisionName, P, capacity_, params, kSeparateWorkingCopy ? " + bf16 copy" : "", opt, fwd, lg,
                     bwd, scr, params + opt + fwd + lg + bwd + scr);
    }

    // Refuses what the model cannot run, with the fix in the message (the CPU's checks: llmc/core/batch_check.h).
    void check_batch(const int* inputs, const int* targets, int B, int T) const {
        check_token_batch(cfg_, inputs, targets, B, T);
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
    size_t capacity_ = 0;              // rows (B*T) the activations hold
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
    bool graph_step_open_ = false;  // zero_grad was called, queue_update not yet (graph mode)
    bool issuing_step_ = false;     // inside issue_step
    StepGraph graph_;
    StepPlan plan_;                         // the step being queued (graph mode)
    StepPlan eager_plan_;                   // the last step issued eagerly in graph mode
    unsigned long long buffers_epoch_ = 0;  // +1 whenever a buffer or staging a step uses is reallocated
    std::vector<floatX> logits_stage_;      // (B, T, Vp) raw device logits
    std::vector<float> logits_host_;        // (B, T, Vp) fp32
    LogitsState logits_state_ = LogitsState::None;
    int B_ = 0, T_ = 0;
    float z_weight_ = 0.0f;
    bool has_targets_ = false;
    double peak_flops_ = 0.0;
    // KV cache (kv_begin / kv_forward)
    KvCacheView kv_;                       // shape + pointers into the four buffers below
    DeviceBuffer<floatX> kv_kg_, kv_vg_;   // (L, B, G, max_len, hd)
    DeviceBuffer<floatX> kv_kl_, kv_vl_;   // (L, B, NH-G, R, hd)
    DeviceBuffer<float> kv_partial_;       // decode scratch (B, NH, splits, hd + 2): llmc/cuda/attention_decode.cuh
    int kv_pos_ = 0;                       // positions cached so far (every sequence)
    Gpt2CudaDecodeActs dec_;               // row buffers of a decode step
    std::vector<int> dec_tokens_host_;     // (B) tokens of the current decode step
    std::vector<floatX> kv_logits_stage_;  // (B, Vp) raw logits of one decode step
    std::vector<float> kv_logits_host_;    // (B, n, Vp) what kv_forward returns after decode steps
};

// Entry points for train_gpt2_ls.cu.
inline std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& cfg, uint64_t seed) {
    return std::make_unique<CudaBackend>(cfg, seed);
}

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB, bf16)" for the current device.
inline std::string cuda_device_description() { return describe_device(current_device_info()); }

}  // namespace llmc::cuda
