// CudaBackend's KV-cached decoding (Backend::has_kv_cache; docs/generation.md): same semantics and
// errors as CpuBackend (llmc/cpu/gpt2_cpu.h); cache layout: llmc/cuda/attention_decode.cuh
// (= llmc/cpu/kv_cache.h with floatX elements). The class and its buffers:
// llmc/cuda/gpt2_cuda_backend.cuh.
//
// Phases:
//   kv_begin           an empty cache for B sequences of up to max_len positions: the cache
//                      (L, B, G, max_len, hd) global and (L, B, NH-G, R, hd) local ring, the decode
//                      scratch and the row buffers (llmc/cuda/gpt2_cuda_acts.cuh) sized
//   kv_prefill_queue   n > 1 positions into an empty cache: the forward's layers (llmc/cuda/gpt2_cuda.cuh)
//                      over (B, n), every layer's k (after QK-norm) and v copied into the cache, then the
//                      logits asked for: All, forward()'s LM head over (B, n); Last, the last layer past
//                      its qkv for the last row of each sequence only: its input and q, k, v rows gathered
//                      and finished as a decode step finishes its rows (kv_layer_rest: the attention over
//                      the cache, attproj, MLP, residual + lnf; LM head over B rows) in the decode buffers
//   kv_prefill_device  kv_prefill_queue with Last, waited for (the latency benchmark's prefill)
//   kv_forward         appends n positions: the prefill, or one kv_decode per position, and returns the
//                      logits asked for, fp32 on the host: Last (B, Vp), All (B, n, Vp)
//   kv_decode          one position per sequence through every layer with the forward's ops, attending
//                      over the cache (attention_decode); logits (B, Vp) on the device. Its input (the B
//                      tokens and the position) reaches the device by a copy from page-locked memory
//                      (dec_in_pinned_ -> dec_.step_in) that is part of the step, and its kernels read the
//                      position there, so with use_step_graph the whole step is one CUDA graph
//                      (llmc/cuda/step_graph.cuh), captured once per split depth of the decode attention
//                      (every 128 positions of a global head's context; all-local models: once), at the
//                      depth's second step, and launched for every later position of that depth: the same
//                      work and bits as issued eagerly
//   kv_layer_rest      a layer of a decode step from its attention on, over the B rows in the decode buffers
#pragma once
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/cuda/attention_decode.cuh"
#include "llmc/cuda/decode_linear.cuh"
#include "llmc/cuda/encoder.cuh"
#include "llmc/cuda/gpt2_cuda_backend.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/qknorm.cuh"
#include "llmc/cuda/row_gather.cuh"

namespace llmc::cuda {

// An empty cache for B sequences of up to max_len (<= max_seq_len) positions each. The cache
// buffers are reallocated only when their size changes, and filled with NaN bytes (a read of a
// slot nothing wrote shows up as NaN).
inline void CudaBackend::kv_begin(int B, int max_len) {
    check_kv_begin(cfg_, B, max_len);
    if (fused_decode_) check_fused_decode(B);
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued work may still use the old buffers
    dec_graph_.reset();                          // it holds the buffers below (kv_begin alone moves them)
    dec_eager_plan_ = DecodePlan();
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
    // NaN bytes: a split the combine reads that no split block wrote shows up as NaN
    CUDA_CHECK(cudaMemsetAsync(kv_partial_.get(), 0xFF, kv_partial_.bytes(), stream_));
    c.partial = kv_partial_.get();
    if (kv_arrivals_.size() != (size_t)B * c.NH) kv_arrivals_.resize((size_t)B * c.NH);
    CUDA_CHECK(cudaMemsetAsync(kv_arrivals_.get(), 0, kv_arrivals_.bytes(), stream_));  // 0 between launches
    c.arrivals = kv_arrivals_.get();
    dec_.allocate(cfg_, B);
    dec_tokens_host_.resize(B);
    if (dec_in_pinned_.size() != (size_t)B + 1) dec_in_pinned_.resize((size_t)B + 1);
    dec_in_in_flight_ = false;  // the stream was synchronized above
    kv_pos_ = 0;
}

// Appends n positions to every cached sequence; tokens: (B, n) on the host. Returns the logits
// `rows` asks for (Backend::kv_forward), fp32 on the host, valid until the next call: Last (B, Vp),
// All (B, n, Vp). Prefill (n > 1 into an empty cache): kv_prefill_queue; otherwise one decode step
// per position (with Last, only the last step's logits are copied to the host).
inline const float* CudaBackend::kv_forward(const int* tokens, int n, KvLogits rows) {
    const int B = kv_.B, Vp = cfg_.padded_vocab_size;
    if (B < 1) throw std::logic_error("CudaBackend::kv_forward needs kv_begin first");
    check_kv_append(kv_pos_, n, kv_.max_len);
    check_batch(tokens, nullptr, B, n);
    if (kv_pos_ == 0 && n > 1) {
        kv_prefill_queue(tokens, n, rows);
        // All: (B, n, Vp) converted to fp32 on the host; Last: (B, Vp). Either copy waits for the prefill.
        const float* out = rows == KvLogits::All ? logits() : kv_logits_to_host(dec_.logits.get(), (size_t)B * Vp);
        note_stream_idle();
        return out;
    }
    if (n == 1 || rows == KvLogits::Last) {
        for (int i = 0; i < n; i++) {
            for (int b = 0; b < B; b++) dec_tokens_host_[b] = tokens[(size_t)b * n + i];
            kv_decode();
        }
        return kv_logits_to_host(dec_.logits.get(), (size_t)B * Vp);
    }
    const size_t row = (size_t)Vp;
    kv_logits_host_.resize((size_t)B * n * row);
    kv_logits_stage_.resize((size_t)B * row);
    for (int i = 0; i < n; i++) {
        for (int b = 0; b < B; b++) dec_tokens_host_[b] = tokens[(size_t)b * n + i];
        kv_decode();
        download(kv_logits_stage_.data(), dec_.logits.get(), (size_t)B * row);  // waits for the step
        note_stream_idle();
        for (int b = 0; b < B; b++) {
            const floatX* src = kv_logits_stage_.data() + b * row;
            float* dst = kv_logits_host_.data() + ((size_t)b * n + i) * row;
            for (size_t v = 0; v < row; v++) dst[v] = to_float(src[v]);
        }
    }
    return kv_logits_host_.data();
}

// count device logits (floatX) into kv_logits_host_ as fp32; waits for the queued work.
inline const float* CudaBackend::kv_logits_to_host(const floatX* rows, size_t count) {
    kv_logits_stage_.resize(count);
    kv_logits_host_.resize(count);
    download(kv_logits_stage_.data(), rows, count);
    note_stream_idle();
    for (size_t i = 0; i < count; i++) kv_logits_host_[i] = to_float(kv_logits_stage_[i]);
    return kv_logits_host_.data();
}

// Prefill of an empty cache with tokens (B, n), n >= 1: the forward's layers over (B, n), k (after
// QK-norm) and v of every layer copied into the cache, then the logits `rows` asks for (Last: into
// dec_.logits (B, Vp), the last layer past its qkv over the last row of each sequence only, no (B, n,
// Vp) logits planned; All: forward()'s (B, n, Vp), logits() fetches them). Queued, not waited for.
inline void CudaBackend::kv_prefill_queue(const int* tokens, int n, KvLogits rows) {
    const int B = kv_.B, L = cfg_.num_layers, C = cfg_.channels;
    if (B < 1) throw std::logic_error("CudaBackend::kv_prefill_device needs kv_begin first");
    if (kv_pos_ != 0) throw std::logic_error("CudaBackend::kv_prefill_device needs an empty cache (kv_begin)");
    if (n < 1 || n > kv_.max_len)
        throw InputError("kv_forward: prefill of " + std::to_string(n) +
                         " positions; pass 1 <= n <= the cache "
                         "length " +
                         std::to_string(kv_.max_len));
    check_no_open_graph_step("kv_forward");
    check_batch(tokens, nullptr, B, n);
    const bool all = rows == KvLogits::All;
    stage_tokens(queued_, tokens, nullptr, B, n);
    issue_forward(queued_, B, n, 0.0f, false, false, 0, 0.0f, all);
    const size_t N = (size_t)B * n;
    for (int l = 0; l < L; l++) {
        const floatX* qkv = acts_.layer(l, N).att_in();  // (B, n, 3C)
        kv_store_prefill(kv_, qkv, l, n, launch_stream());
    }
    kv_pos_ = n;
    if (all) return;
    // the last layer for the last position of each sequence, as a decode step at position n - 1 (its
    // k, v already cached): the layer's input and its q, k, v rows gathered, then the rest of the
    // layer and lnf over B rows, then the LM head: logits (B, Vp)
    const LaunchStream st = launch_stream();
    Gpt2CudaDecodeActs& a = dec_;
    const LayerActs<floatX, float> last = acts_.layer(L - 1, N);
    floatX* att_in = cfg_.qk_norm ? a.qkvn.get() : a.qkv.get();  // (B, 3C)
    gather_rows(a.x.get(), last.residual, B, n, n - 1, C, st);   // (B, C)
    gather_rows(att_in, last.att_in(), B, n, n - 1, 3 * C, st);  // (B, 3C)
    stage_decode_input(n - 1);                                   // its position (the tokens are not read)
    issue_decode_input();
    dec_in_in_flight_ = true;
    kv_layer_rest(L - 1, decode_splits_at(kv_, n - 1), att_in);
    issue_decode_head();
}

// kv_forward(tokens, n, KvLogits::Last) without the host copy: returns when the device is done,
// the logits (B, Vp) on the device. The latency benchmark times it as the prefill.
inline void CudaBackend::kv_prefill_device(const int* tokens, int n) {
    kv_prefill_queue(tokens, n, KvLogits::Last);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    note_stream_idle();
}

// Queues one decode step: the tokens in dec_tokens_host_ (B) at position kv_pos_ through every
// layer, one row per sequence, with the same ops as forward(); logits (B, Vp) in dec_.logits. With
// use_step_graph: launched as the graph captured for this step's plan (its split depth); a plan seen
// for the first time is issued eagerly (every kernel and matmul of it then ran once before a capture,
// as the training step's graph does), and captured and launched when it repeats.
inline void CudaBackend::kv_decode() {
    const int t = kv_pos_;
    stage_decode_input(t);
    const DecodePlan plan{kv_.B, decode_splits_at(kv_, t), buffers_epoch_};
    if (use_graph_ && dec_graph_.matches(plan)) {
        dec_graph_.launch(stream_);
        add_replayed_gemms(mm_, dec_graph_gemms_);
    } else if (use_graph_ && plan == dec_eager_plan_) {
        const GemmCounts before = gemms_issued(mm_);
        dec_graph_.capture_and_launch(stream_, plan, [&] { issue_decode(plan.splits); });
        dec_graph_gemms_ = gemms_between(before, gemms_issued(mm_));
    } else {
        issue_decode(plan.splits);
        if (use_graph_) dec_eager_plan_ = plan;
    }
    dec_in_in_flight_ = true;  // whichever way it was issued, the step's copy reads dec_in_pinned_ when it runs
    kv_pos_ = t + 1;
}

// Writes a decode step's input at position t into dec_in_pinned_: dec_tokens_host_ (B), then t. Waits
// first for a queued copy that may still read it (dec_in_in_flight_: set by every issued step and the
// prefill's copy, cleared by note_stream_idle after every host wait). Decode steps issued back to back
// (kv_forward of several positions) therefore wait for each other: one page-locked input slot.
inline void CudaBackend::stage_decode_input(int t) {
    if (dec_in_in_flight_) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        note_stream_idle();
    }
    int* in = dec_in_pinned_.get();
    std::copy(dec_tokens_host_.begin(), dec_tokens_host_.end(), in);
    in[kv_.B] = t;
}

// Queues the copy of dec_in_pinned_ to dec_.step_in (it reads the page-locked memory when it runs);
// the caller marks dec_in_in_flight_ (inside a capture nothing is queued yet).
inline void CudaBackend::issue_decode_input() {
    CUDA_CHECK(cudaMemcpyAsync(dec_.step_in.get(), dec_in_pinned_.get(), dec_.step_in.bytes(), cudaMemcpyHostToDevice,
                               stream_));
}

// Issues the work of one decode step, the input's copy first: its kernels read the position from
// dec_.step_in, and its decode attention runs a grid of `splits` splits (>= the position's depth).
inline void CudaBackend::issue_decode(int splits) {
    const int B = kv_.B, L = cfg_.num_layers, C = cfg_.channels, NH = cfg_.num_heads;
    const LaunchStream st = launch_stream();
    Gpt2CudaDecodeActs& a = dec_;
    const ParamView<const floatX> w = weights();
    const bool fused = decode_fused();

    issue_decode_input();
    // x = wte[token] + wpe[t]  (B, C): the encoder with T = 1 at the position in device memory
    encoder_forward(a.x.get(), a.tokens(), w.wte(), w.wpe(), B, 1, C, st, a.position());
    if (!fused)
        layernorm_forward(a.ln.get(), a.mean.get(), a.rstd.get(), a.x.get(), w.layer(0).ln1w, w.layer(0).ln1b, B, C,
                          st);
    for (int l = 0; l < L; l++) {
        const LayerParams<const floatX> lw = w.layer(l);
        if (fused) {
            // ln1 of the layer input: the encoder's x, or x = x2 + fcproj of the layer before
            DecodeLnPrologue ln1;
            ln1.a = l == 0 ? a.x.get() : a.x2.get();
            ln1.b = l == 0 ? nullptr : a.branch.get();
            ln1.residual = l == 0 ? nullptr : a.x.get();
            ln1.w = lw.ln1w;
            ln1.bias = lw.ln1b;
            // without QK-norm the cache takes k and v as the qkv layer writes them: stored in its launch
            DecodeKvStore store;
            store.cache = kv_;
            store.layer = l;
            store.pos = a.position();
            decode_linear(a.qkv.get(), nullptr, lw.qkvw, lw.qkvb, B, C, 3 * C, st, nullptr, cfg_.gelu, &ln1,
                          cfg_.qk_norm ? nullptr : &store);
        } else {
            matmul_forward(mm_, a.qkv.get(), a.ln.get(), lw.qkvw, lw.qkvb, B, C, 3 * C, st);
        }
        const floatX* att_in = a.qkv.get();  // (B, 3C)
        if (cfg_.qk_norm) {
            qknorm_forward(a.qkvn.get(), a.qkn_mean.get(), a.qkn_rstd.get(), a.qkv.get(), lw.qnormw, lw.qnormb,
                           lw.knormw, lw.knormb, B, C, NH, st);
            att_in = a.qkvn.get();
        }
        if (!fused || cfg_.qk_norm) kv_store(kv_, att_in, l, a.position(), st);
        kv_layer_rest(l, splits, att_in);
    }
    issue_decode_head();
}

// Whether the decode steps use decode_linear (use_fused_decode; kv_begin refused a cache it cannot
// take); else matmul_forward and the LayerNorm kernels.
inline bool CudaBackend::decode_fused() const { return fused_decode_; }

// Refuses --fused-decode for a cache of B sequences decode_linear cannot take (its rows, or the model's
// 4C inputs of B rows past its shared memory).
inline void CudaBackend::check_fused_decode(int B) const {
    const int C = cfg_.channels;
    if (C % 8 != 0)  // decode_linear's outputs (C, 3C, 4C columns) are multiples of 8
        throw InputError("--fused-decode 1 needs a model whose channels are a multiple of 8; this one has C " +
                         std::to_string(C) + ": drop --fused-decode");
    if (!decode_linear_fits(B, C, true) || !decode_linear_fits(B, 4 * C, false))
        throw InputError("--fused-decode 1 takes up to " + std::to_string(kDecodeMaxRows) +
                         " sequences (fewer for a wide model: B x 4C inputs in " +
                         std::to_string(kDecodeLinearMaxSmem / 1024) + " KiB), and this run decodes " +
                         std::to_string(B) + " sequences of C " + std::to_string(C) +
                         ": give fewer sequences (--bench-batch with --bench), or drop --fused-decode");
}

// --fused-decode: decode_linear for the decode steps' linear layers (a graph captured before the switch
// is dropped). Refuses a cache already begun that it cannot take.
inline void CudaBackend::use_fused_decode(bool on) {
    if (on && kv_.B > 0) check_fused_decode(kv_.B);
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // a queued step may still use the captured graph
    fused_decode_ = on;
    dec_graph_.reset();
    dec_eager_plan_ = DecodePlan();
}

// The LM head over the B rows after the last layer: logits (B, Vp) in dec_.logits. Fused, lnf of the
// last layer's x2 + fcproj in its prologue; else from dec_.ln (kv_layer_rest's residual + lnf).
inline void CudaBackend::issue_decode_head() {
    const int B = kv_.B, C = cfg_.channels, Vp = cfg_.padded_vocab_size;
    const LaunchStream st = launch_stream();
    Gpt2CudaDecodeActs& a = dec_;
    const ParamView<const floatX> w = weights();
    if (!decode_fused()) {
        matmul_forward(mm_, a.logits.get(), a.ln.get(), w.lm_head(), nullptr, B, C, Vp, st);
        return;
    }
    DecodeLnPrologue lnf;
    lnf.a = a.x2.get();
    lnf.b = a.branch.get();
    lnf.residual = a.x.get();
    lnf.w = w.lnfw();
    lnf.bias = w.lnfb();
    decode_linear(a.logits.get(), nullptr, w.lm_head(), nullptr, B, C, Vp, st, nullptr, cfg_.gelu, &lnf);
}

// Queues layer l of a decode step at position t (in dec_.step_in) from its attention on, over the B rows
// of the decode buffers: the layer's input in dec_.x (B, C), its q, k, v in att_in (B, 3C; k and v of
// positions <= t already in the cache); splits: the decode attention's grid depth (>= t's). Leaves the
// layer's output in dec_.x and the next LayerNorm (the next layer's ln1, or lnf after the last layer)
// in dec_.ln; fused (decode_fused), the output as dec_.x2 + dec_.branch, which the next layer's qkv
// or the LM head adds in its prologue.
inline void CudaBackend::kv_layer_rest(int l, int splits, const floatX* att_in) {
    const int B = kv_.B, L = cfg_.num_layers, C = cfg_.channels;
    const LaunchStream st = launch_stream();
    Gpt2CudaDecodeActs& a = dec_;
    const ParamView<const floatX> w = weights();
    const LayerParams<const floatX> lw = w.layer(l);
    // fused: the split and combine kernels in one launch (the same bits)
    attention_decode(a.atty.get(), att_in, kv_, l, a.position(), splits, cfg_.attn_softcap, st, decode_fused());
    if (decode_fused()) {
        decode_linear(a.branch.get(), a.atty.get(), lw.attprojw, lw.attprojb, B, C, C, st);
        DecodeLnPrologue ln2;  // x2 = x + attproj; ln2(x2)
        ln2.a = a.x.get();
        ln2.b = a.branch.get();
        ln2.residual = a.x2.get();
        ln2.w = lw.ln2w;
        ln2.bias = lw.ln2b;
        decode_linear(a.fch_gelu.get(), nullptr, lw.fcw, lw.fcb, B, C, 4 * C, st, a.fch.get(), cfg_.gelu, &ln2);
        decode_linear(a.branch.get(), a.fch_gelu.get(), lw.fcprojw, lw.fcprojb, B, 4 * C, C, st);
        return;
    }
    matmul_forward(mm_, a.branch.get(), a.atty.get(), lw.attprojw, lw.attprojb, B, C, C, st);
    // x2 = x + attproj; ln = LayerNorm2(x2)
    fused_residual_layernorm_forward(a.x2.get(), a.ln.get(), a.mean.get(), a.rstd.get(), a.x.get(), a.branch.get(),
                                     lw.ln2w, lw.ln2b, B, C, st);
    matmul_forward(mm_, a.fch_gelu.get(), a.ln.get(), lw.fcw, lw.fcb, B, C, 4 * C, st, a.fch.get(), cfg_.gelu);
    matmul_forward(mm_, a.branch.get(), a.fch_gelu.get(), lw.fcprojw, lw.fcprojb, B, 4 * C, C, st);
    // x = x2 + fcproj (the layer output); ln = the next layer's ln1, or lnf after the last layer
    const bool last = l + 1 == L;
    fused_residual_layernorm_forward(a.x.get(), a.ln.get(), a.mean.get(), a.rstd.get(), a.x2.get(), a.branch.get(),
                                     last ? w.lnfw() : w.layer(l + 1).ln1w, last ? w.lnfb() : w.layer(l + 1).ln1b, B, C,
                                     st);
}

}  // namespace llmc::cuda
