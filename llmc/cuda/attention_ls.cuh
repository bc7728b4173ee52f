// LS-attention on the GPU: local sliding-window heads + global causal heads of one layer in ONE
// launch per pass, FlashAttention-2 style (query tiles x (batch, head) grid, online softmax, no
// T x T buffer). CPU reference: llmc/cpu/attention_ls.h (same layout, lse, soft-cap, statistics).
// Algorithm, tile ranges, determinism and verification status: docs/attention_kernel.md.
//
// Layout: qkv (B, T, 3C): q in channels [0, C), k in [C, 2C), v in [2C, 3C); head h uses channels
// h*hd .. h*hd+hd-1 of each part. out (B, T, C). lse (B, NH, T) fp32. Heads 0 .. NH-G-1 local
// (query i sees keys max(0, i-P+1) .. i), heads NH-G .. NH-1 global (keys 0 .. i).
// Score s = q.k / sqrt(hd); the softmax sees c*tanh(s/c) when softcap c > 0.
//
// Kernel family, chosen at compile time by the precision (each object holds only what it runs):
//   bf16 build  the FlashAttention-2-class pair (bf16 tensor cores, mma.sync m16n8k16 with fp32
//               accumulation, ldmatrix, swizzled shared memory, cp.async double buffering, base-2
//               softmax; sm_80+): forward llmc/cuda/attention_ls_fa2.cuh, backward (dK/dV kernel
//               over key tiles, dQ kernel over query tiles) llmc/cuda/attention_ls_fa2_bwd.cuh.
//   FP32 build  the scalar kernels (fp32 FMA math on 32x32 tiles; tight comparison with the CPU):
//               llmc/cuda/attention_ls_scalar.cuh.
// Both are tiled with the same tile-range math (llmc/core/attention_tiles.h). The lab
// (dev/cuda/attention_ls.cu) runs these beside a naive reference and the candidates under
// dev/cuda/attention_candidates/.
//
// Head sizes 32, 64, 128 (templates); any T, any P >= 1, any G in 0..NH. The tensor-core kernels read
// qkv and dout with 16-byte loads: qkv, out, dout, dqkv must be 16-byte aligned (cudaMalloc pointers are);
// the backward's D kernel reads out and dout in 16-byte packs in both builds.
// Backward: D_i = rowsum(dO*O) (pre-kernel), then one kernel over key tiles writes dK, dV and one
// over query tiles writes dQ; each output element is summed in a fixed order (by one thread, or in
// the FA2-class kernels by the blocks of a split tile loop, whose partials the last block to arrive
// adds in chunk order), so the result is deterministic (bit-identical across runs) without float
// atomics.
// Statistics (stats != nullptr; a template bool, so the off path costs nothing): each block writes
// {max raw logit, min raw logit, entropy sum} of its (query tile, b, h) to stats_scratch, then a
// small kernel merges them per head in a fixed order into stats (max, min, +=). With near_n >= 1
// (another template bool) also {near mass sum, near max, far max} at distance near_n (the fields:
// llmc/cuda/attention_ls_common.cuh).
//
// Files: this header holds the entry points (AttnCall, attention_forward, attention_backward), the
// argument checks and the launchers; the kernels are in llmc/cuda/attention_ls_fa2.cuh (forward)
// and llmc/cuda/attention_ls_fa2_bwd.cuh (backward) of the bf16 build and
// llmc/cuda/attention_ls_scalar.cuh of the FP32 build, what they share in
// llmc/cuda/attention_ls_common.cuh, the per-element math and tile ranges in llmc/core/attention_tiles.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "llmc/core/attention_split.h"
#include "llmc/core/attention_tiles.h"
#include "llmc/cuda/attention_ls_common.cuh"
#if defined(ENABLE_FP32)
#include "llmc/cuda/attention_ls_scalar.cuh"
#else
#include "llmc/cuda/attention_ls_fa2.cuh"
#include "llmc/cuda/attention_ls_fa2_bwd.cuh"
#endif
#include "llmc/cuda/common.cuh"
#include "llmc/core/error.h"

namespace llmc::cuda {

// Whether the forward soft-caps with tanh.approx.f32 (the FA2-class forward) rather than tanhf
// (the scalar one): whatever recomputes p = exp(s' - lse) from the forward's lse caps the same way.
inline bool attention_caps_with_tanh_approx() {
#if defined(ENABLE_FP32)
    return false;
#else
    return true;
#endif
}

// Per-block statistics partials: up to kAttnStatsNear floats per (b, h, query tile) of the smallest
// query tile.
inline size_t attention_stats_scratch_floats(int B, int T, int NH) {
    return kAttnStatsNear * (size_t)B * NH * (size_t)ceil_div(T, kAttnScalarBQ);
}
// The split tile loops of the FA2-class kernels (llmc/core/attention_split.h) for one launch: chunk
// size `tiles` (0: chosen from the shape, >= 1: forced, as the lab's checks do) and runs of outer
// tiles `run` (attn_split_kind's: 1 none, 0 chosen from the shape, >= 2 forced; the backward's
// kernels at hd 32 / 64 take them). geom: the kernel's loop (its local field is ignored).
struct AttnSplitPlan {
    AttnSplitKind global, local;
    size_t slots = 0;   // partials: one per chunk of a split outer tile (0: nothing is split)
    size_t blocks = 0;  // blocks of the launch
};
inline AttnSplitPlan attention_split_plan(AttnSplitGeom geom, int B, int NH, int G, int tiles, int run = 1) {
    AttnSplitPlan plan;
    geom.local = false;
    plan.global = attn_split_kind(geom, tiles, B, NH, G, run);
    geom.local = true;
    plan.local = attn_split_kind(geom, tiles, B, NH, G, run);
    const size_t n_global = (size_t)B * G * plan.global.items, n_local = (size_t)B * (NH - G) * plan.local.items;
    plan.blocks = n_global + n_local;
    // partial slots: the global heads' split outer tiles' chunks, then the local heads'
    plan.slots = (size_t)B * G * plan.global.slots + (size_t)B * (NH - G) * plan.local.slots;
    return plan;
}
// The three loops: the forward and dQ (a query tile of 64 over key tiles of 64) and dK/dV (a key
// tile of 64 over query tiles of 64, 32 at hd 128: Fa2BwdKvSmem), and their partials' floats per block
// (Fa2Partial<HD> in llmc/cuda/attention_ls_fa2.cuh; dQ; dK + dV: 4 floats per 8 dims per thread).
inline AttnSplitGeom attention_split_geom_rows(int T, int P) {
    return AttnSplitGeom{T, kAttnFa2BQ, kAttnFa2BK, P, false, false};
}
inline AttnSplitGeom attention_split_geom_kv(int T, int P, int hd) {
    return AttnSplitGeom{T, hd == 128 ? 32 : kAttnFa2BQ, kAttnFa2BK, P, false, true};
}
inline size_t attention_split_fwd_floats(int hd) { return (size_t)(hd / 2 + 12) * kAttnFa2Threads; }
inline size_t attention_split_dq_floats(int hd) { return (size_t)(hd / 2) * kAttnFa2Threads; }
inline size_t attention_split_dkv_floats(int hd) { return (size_t)hd * kAttnFa2Threads; }

// Where the FA2-class kernels' split tile loops keep their state. part: attention_split_scratch_floats(B,
// T, C, NH, G, P, tiles) floats, any contents (null: no loop is split); arrivals:
// attention_split_arrivals(B, T, NH) counters, zero before the first launch (every launch leaves them
// zero: they may be shared with other ops' counters that keep the same rule); tiles: the chunk size
// part was sized for (0: chosen from the shape). The forward and the backward may share them (one
// launch at a time); the other kernel families do not use them. run: the backward's runs of outer
// tiles (attn_split_kind: 0 chosen from the shape, 1 none, >= 2 forced; they need no scratch).
struct AttnSplitScratch {
    float* part = nullptr;
    uint32_t* arrivals = nullptr;
    int tiles = 0;
    int run = 0;
};
inline size_t attention_split_scratch_floats(int B, int T, int C, int NH, int G, int P, int tiles = 0) {
    const int hd = C / NH;
    const size_t fwd =
        attention_split_plan(attention_split_geom_rows(T, P), B, NH, G, tiles).slots * attention_split_fwd_floats(hd);
    const size_t dq =
        attention_split_plan(attention_split_geom_rows(T, P), B, NH, G, tiles).slots * attention_split_dq_floats(hd);
    const size_t dkv =
        attention_split_plan(attention_split_geom_kv(T, P, hd), B, NH, G, tiles).slots * attention_split_dkv_floats(hd);
    return std::max(fwd, std::max(dq, dkv));
}
// One counter per (b, h, outer tile): query tiles of 32 rows bound both tile sizes.
inline size_t attention_split_arrivals(int B, int T, int NH) { return (size_t)B * NH * ceil_div(T, 32); }

#if !defined(ENABLE_FP32)
// The kernels' split argument for a launch with plan (the scratch unused when nothing splits).
inline Fa2Split attention_split_args(const AttnSplitPlan& plan, int B, const AttnSplitScratch& scratch) {
    Fa2Split a;
    a.global = plan.global;
    a.local = plan.local;
    a.B = B;
    a.part = scratch.part;
    a.arrivals = scratch.arrivals;
    if (plan.blocks > 2147483647u)
        throw InputError("attention: " + std::to_string(plan.blocks) +
                         " blocks in one launch exceed the grid's 2^31-1; use fewer batch rows or a shorter sequence");
    return a;
}
#endif
// The plan a launch uses: without scratch nothing is split (every kind one chunk of all inner tiles).
// runs: whether the launch's kernel walks runs of outer tiles (then s.run's, else none).
inline AttnSplitPlan attention_split_plan_for(AttnSplitGeom geom, int B, int NH, int G, const AttnSplitScratch& s,
                                              bool runs = false) {
    return attention_split_plan(geom, B, NH, G, s.part && s.arrivals ? s.tiles : geom.n_inner(), runs ? s.run : 1);
}

// Backward scratch: D (B, NH, T).
inline size_t attention_ls_backward_scratch_floats(int B, int T, int C, int NH) {
    (void)C;
    return (size_t)B * NH * T;
}

// The one head-size dispatch: f(std::integral_constant<int, HD>{}) for hd 32, 64 or 128 (the sizes
// attention_ls_check_args admits).
template <typename F>
inline void attention_head_dim_switch(int hd, F&& f) {
    if (hd == 32) f(std::integral_constant<int, 32>{});
    else if (hd == 64) f(std::integral_constant<int, 64>{});
    else f(std::integral_constant<int, 128>{});
}

inline void attention_ls_check_args(int B, int T, int C, int NH, int G, int P) {
    if (B < 1 || T < 1)
        throw InputError("attention: B and T must be >= 1 (got B=" + std::to_string(B) + ", T=" + std::to_string(T) +
                         "); pass a non-empty batch");
    if (NH < 1 || C < 1 || C % NH != 0)
        throw InputError("attention: channels C=" + std::to_string(C) + " must be a positive multiple of heads NH=" +
                         std::to_string(NH) + "; pick C and NH with C % NH == 0");
    const int hd = C / NH;
    if (!cuda_head_size_supported(hd))
        throw InputError("attention: the CUDA kernels support head size 32, 64 or 128, got C/NH=" + std::to_string(hd) +
                         "; pick C and NH with C/NH one of those");
    if (G < 0 || G > NH)
        throw InputError("attention: global heads G=" + std::to_string(G) + " must be in [0, NH=" + std::to_string(NH) +
                         "]");
    if (P < 1) throw InputError("attention: window P=" + std::to_string(P) + " must be >= 1");
    // grid (B*NH, tiles): gridDim.y <= 65535 tiles of 32 rows
    static_assert(kCudaAttnMaxSeqLen == 65535L * kAttnScalarBQ, "the app layer's limit (llmc/core/attention_tiles.h)");
    if (T > kCudaAttnMaxSeqLen)
        throw InputError("attention: sequence length T=" + std::to_string(T) + " exceeds the CUDA kernels' limit " +
                         std::to_string(kCudaAttnMaxSeqLen) + "; use a shorter sequence");
    if ((long)B * NH > 2147483647L)
        throw InputError("attention: B*NH=" + std::to_string((long)B * NH) +
                         " exceeds 2^31-1; use fewer batch rows or heads");
}

// The FA2-class kernels move qkv / out / dout / dqkv with 16-byte (int4) accesses.
inline void attention_ls_check_aligned(const void* p, const char* what) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
        throw InputError(std::string("attention: ") + what +
                         " is not 16-byte aligned; pass a pointer from cudaMalloc "
                         "(or offset by a multiple of 8 bf16 elements)");
}

// One attention call as the host describes it to attention_forward / attention_backward (the
// trainer's and the lab's one entry point each). The kernels keep positional scalars
// (docs/attention_kernel.md, "Dispatch and arguments").
struct AttnCall {
    int B = 0, T = 0;      // batch rows, sequence length
    int C = 0, NH = 0;     // channels, heads: head size hd() = C / NH (32, 64 or 128)
    int G = 0;             // global heads: heads NH-G .. NH-1 (the others local)
    int P = 1;             // local window: query i sees keys max(0, i-P+1) .. i
    float softcap = 0.0f;  // > 0: the softmax sees softcap * tanh(s / softcap)
    // Forward statistics: with stats_part non-null each block leaves its partial there
    // (attention_stats_scratch_floats(B, T, NH) floats at most; attention_stats_reduce merges them);
    // near_n >= 1 (needs stats_part): the near/far fields too, at that distance (0: none).
    float* stats_part = nullptr;
    int near_n = 0;
    float* bwd_scratch = nullptr;  // backward: attention_ls_backward_scratch_floats(B, T, C, NH) floats (D)
    AttnSplitScratch split;        // the FA2-class kernels' split tile loops (default: nothing split, the
                                   // backward's runs of outer tiles chosen from the shape)
    int hd() const { return C / NH; }
};

// ------------------------------------------------------------------------------------------------
// Host launchers
// ------------------------------------------------------------------------------------------------

// Sets `kernel`'s dynamic shared-memory limit to `bytes` before every launch that uses some: the
// default 48 KiB bounds static and dynamic bytes together, and the kernels' static bytes come from
// inlined helpers (arrive_last's ticket: 16 bytes in every FA2 kernel; the statistics' reductions),
// so a threshold on the dynamic bytes alone is never safe (the hd-64 dQ kernel asks for exactly
// 48 KiB dynamic).
template <typename KernelT>
inline void attn_set_smem(KernelT kernel, size_t bytes) {
    if (bytes > 0) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int HD, bool STATS, bool NEAR>
inline int attn_forward_launch(const AttnCall& a, floatX* out, float* lse, const floatX* qkv, LaunchStream st) {
    const int B = a.B, T = a.T, C = a.C, NH = a.NH, G = a.G, P = a.P;
#if !defined(ENABLE_FP32)
    attention_ls_check_aligned(qkv, "qkv");
    attention_ls_check_aligned(out, "out");
    const int nqt = (int)ceil_div(T, kAttnFa2BQ);
    static_assert(Fa2Partial<HD>::floats == (size_t)(HD / 2 + 12) * kAttnFa2Threads, "attention_split_fwd_floats");
    const AttnSplitPlan plan = attention_split_plan_for(attention_split_geom_rows(T, P), B, NH, G, a.split);
    const Fa2Split split = attention_split_args(plan, B, a.split);
    const dim3 grid((unsigned)plan.blocks);
    const size_t bytes = Fa2FwdSmem<HD>::bytes;
    auto go = [&](auto kernel) {  // soft-cap as a template parameter: one dispatch here
        attn_set_smem(kernel, bytes);
        launch_kernel(kernel, grid, kAttnFa2Threads, bytes, st, out, lse, qkv, T, C, NH, G, P, a.softcap, a.stats_part,
                      a.near_n, split);
        CUDA_CHECK_LAUNCH();
    };
    if (a.softcap > 0.0f) go(attn_fwd_fa2_kernel<HD, STATS, NEAR, true>);
    else go(attn_fwd_fa2_kernel<HD, STATS, NEAR, false>);
#else
    const int nqt = (int)ceil_div(T, kAttnScalarBQ);
    const dim3 grid(B * NH, nqt);
    const size_t bytes = attn_fwd_scalar_smem<HD>();
    attn_set_smem(attn_fwd_scalar_kernel<HD, STATS, NEAR>, bytes);
    launch_kernel(attn_fwd_scalar_kernel<HD, STATS, NEAR>, grid, kAttnScalarThreads, bytes, st, out, lse, qkv, T, C, NH,
                  G, P, a.softcap, a.stats_part, a.near_n);
    CUDA_CHECK_LAUNCH();
#endif
    return nqt;
}

// The forward: out (B, T, C) and lse (B, NH, T) overwritten; with a.stats_part the statistics
// partials (F floats per (b, h, query tile): F = kAttnStatsNear with near_n >= 1, else
// kAttnStatsBasic) are left there. Returns the number of query tiles nqt, which
// attention_stats_reduce needs to merge them.
inline int attention_forward(const AttnCall& a, floatX* out, float* lse, const floatX* qkv, LaunchStream st) {
    attention_ls_check_args(a.B, a.T, a.C, a.NH, a.G, a.P);
    if (a.near_n < 0 || (a.near_n > 0 && !a.stats_part))
        throw InputError("attention: near/far distance " + std::to_string(a.near_n) +
                         " needs stats and must be >= 1 (0 = no near/far statistics)");
    int nqt = 0;
    auto by_hd = [&](auto stats_tag, auto near_tag) {
        attention_head_dim_switch(a.hd(), [&](auto hd_tag) {
            nqt = attn_forward_launch<decltype(hd_tag)::value, decltype(stats_tag)::value, decltype(near_tag)::value>(
                a, out, lse, qkv, st);
        });
    };
    if (!a.stats_part) by_hd(std::false_type{}, std::false_type{});
    else if (a.near_n == 0) by_hd(std::true_type{}, std::false_type{});
    else by_hd(std::true_type{}, std::true_type{});
    return nqt;
}

// Merges the statistics partials of `layers` forwards into their stats, in one launch: layer y's
// partials at part + y * part_stride (as attention_forward left them, nqt query tiles), its stats
// (F, NH) at stats + y * stats_stride (max, min, += per field; docs/design.md).
inline void attention_stats_reduce(float* stats, size_t stats_stride, const float* part, size_t part_stride, int layers,
                                   int B, int NH, int nqt, int near_n, LaunchStream st) {
    if (layers <= 0) return;
    const dim3 grid((unsigned)NH, (unsigned)layers);
    if (near_n == 0)
        launch_kernel(attn_stats_reduce_kernel<kAttnStatsBasic>, grid, 256, 0, st, stats, part, B, NH, nqt,
                      stats_stride, part_stride);
    else
        launch_kernel(attn_stats_reduce_kernel<kAttnStatsNear>, grid, 256, 0, st, stats, part, B, NH, nqt, stats_stride,
                      part_stride);
    CUDA_CHECK_LAUNCH();
}

// The backward's first step: D (B, NH, T) = rowsum(dout * out) per head. dout, out (B, T, C), 16-byte
// aligned (the kernel reads them in 16-byte packs); a head size of attention_ls_check_args.
inline void attention_backward_row_dots(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH,
                                        LaunchStream st) {
    // every admitted head size is a whole number of packs, at most a warp of them, a power of two
    static_assert(32 % kPack == 0 && 128 / kPack <= 32, "attn_bwd_dot_kernel: hd / kPack lanes per head");
    if (B < 1 || T < 1 || NH < 1 || C % NH != 0 || !cuda_head_size_supported(C / NH))
        throw InputError("attention: the row dots need B, T >= 1 and head size C/NH of 32, 64 or 128 (got B=" +
                         std::to_string(B) + ", T=" + std::to_string(T) + ", C=" + std::to_string(C) +
                         ", NH=" + std::to_string(NH) + "); pick C and NH with C/NH one of those");
    attention_ls_check_aligned(dout, "dout");
    attention_ls_check_aligned(out, "out");
    const long packs = (long)B * T * (C / kPack);
    if (packs > 2147483647L)
        throw InputError("attention: B*T*C=" + std::to_string(packs * kPack) + " exceeds the row dots' " +
                         std::to_string(2147483647L * kPack) + " elements; use fewer batch rows or a shorter sequence");
    launch_kernel(attn_bwd_dot_kernel, (unsigned)ceil_div(packs, kAttnDotThreads), kAttnDotThreads, 0, st, D, dout, out,
                  B, T, C, NH);
    CUDA_CHECK_LAUNCH();
}

#if defined(ENABLE_FP32)
template <int HD>
inline void attn_backward_launch(const AttnCall& a, floatX* dqkv, const floatX* dout, const floatX* qkv,
                                 const float* lse, const float* D, LaunchStream st) {
    const int B = a.B, T = a.T, C = a.C, NH = a.NH, G = a.G, P = a.P;
    const size_t kv_bytes = attn_bwd_kv_smem<HD>(), q_bytes = attn_bwd_q_smem<HD>();
    attn_set_smem(attn_bwd_kv_scalar_kernel<HD>, kv_bytes);
    attn_set_smem(attn_bwd_q_scalar_kernel<HD>, q_bytes);
    const dim3 grid_kv(B * NH, (unsigned)ceil_div(T, kAttnScalarBK));
    launch_kernel(attn_bwd_kv_scalar_kernel<HD>, grid_kv, kAttnScalarThreads, kv_bytes, st, dqkv, dout, qkv, lse, D, T,
                  C, NH, G, P, a.softcap);
    CUDA_CHECK_LAUNCH();
    const dim3 grid_q(B * NH, (unsigned)ceil_div(T, kAttnScalarBQ));
    launch_kernel(attn_bwd_q_scalar_kernel<HD>, grid_q, kAttnScalarThreads, q_bytes, st, dqkv, dout, qkv, lse, D, T, C,
                  NH, G, P, a.softcap);
    CUDA_CHECK_LAUNCH();
}
#else
// The plan of the FA2-class backward's dK/dV kernel (kv) or dQ kernel: runs of outer tiles where the
// warps' A fragments stay in registers (hd 32 / 64: a run's next K, V or Q, dO tile is loaded into
// shared memory while the last one's fragments are in use).
inline AttnSplitPlan attention_backward_plan(const AttnCall& a, bool kv) {
    static_assert(kFa2BwdARegs<64> && !kFa2BwdARegs<128>, "runs at hd 32 and 64");
    const AttnSplitGeom geom = kv ? attention_split_geom_kv(a.T, a.P, a.hd()) : attention_split_geom_rows(a.T, a.P);
    return attention_split_plan_for(geom, a.B, a.NH, a.G, a.split, a.hd() <= 64);
}
// Whether that backward walks runs of outer tiles (the lab compares it with a backward without).
inline bool attention_backward_has_runs(const AttnCall& a) {
    const AttnSplitPlan kv = attention_backward_plan(a, true), q = attention_backward_plan(a, false);
    return kv.local.run > 1 || kv.global.run > 1 || q.local.run > 1 || q.global.run > 1;
}

template <int HD>
inline void attn_backward_launch(const AttnCall& a, floatX* dqkv, const floatX* dout, const floatX* qkv,
                                 const float* lse, const float* D, LaunchStream st) {
    const int B = a.B, T = a.T, C = a.C, NH = a.NH, G = a.G, P = a.P;
    attention_ls_check_aligned(dqkv, "dqkv");
    attention_ls_check_aligned(dout, "dout");
    attention_ls_check_aligned(qkv, "qkv");
    static_assert(Fa2BwdKvSmem<HD>::BQ == (HD == 128 ? 32 : kAttnFa2BQ), "attention_split_geom_kv");
    const AttnSplitPlan kv_plan = attention_backward_plan(a, true), q_plan = attention_backward_plan(a, false);
    const Fa2Split kv_split = attention_split_args(kv_plan, B, a.split);
    const Fa2Split q_split = attention_split_args(q_plan, B, a.split);
    auto go = [&](auto kv_kernel, auto q_kernel) {  // soft-cap as a template parameter: one dispatch here
        attn_set_smem(kv_kernel, Fa2BwdKvSmem<HD>::bytes);
        attn_set_smem(q_kernel, Fa2BwdQSmem<HD>::bytes);
        launch_kernel(kv_kernel, dim3((unsigned)kv_plan.blocks), kAttnFa2Threads, Fa2BwdKvSmem<HD>::bytes, st, dqkv,
                      dout, qkv, lse, D, T, C, NH, G, P, a.softcap, kv_split);
        CUDA_CHECK_LAUNCH();
        launch_kernel(q_kernel, dim3((unsigned)q_plan.blocks), kAttnFa2Threads, Fa2BwdQSmem<HD>::bytes, st, dqkv, dout,
                      qkv, lse, D, T, C, NH, G, P, a.softcap, q_split);
        CUDA_CHECK_LAUNCH();
    };
    if (a.softcap > 0.0f) go(attn_bwd_kv_fa2_kernel<HD, true>, attn_bwd_q_fa2_kernel<HD, true>);
    else go(attn_bwd_kv_fa2_kernel<HD, false>, attn_bwd_q_fa2_kernel<HD, false>);
}
#endif

// The backward: dqkv (B, T, 3C) OVERWRITTEN from dout (B, T, C), the forward's qkv, out and lse;
// a.bwd_scratch holds D (attention_ls_backward_scratch_floats floats, any contents).
inline void attention_backward(const AttnCall& a, floatX* dqkv, const floatX* dout, const floatX* qkv,
                               const floatX* out, const float* lse, LaunchStream st) {
    attention_ls_check_args(a.B, a.T, a.C, a.NH, a.G, a.P);
    if (!a.bwd_scratch)
        throw InputError("attention: the backward needs bwd_scratch; pass attention_ls_backward_scratch_floats floats");
    float* D = a.bwd_scratch;  // (B, NH, T)
    attention_backward_row_dots(D, dout, out, a.B, a.T, a.C, a.NH, st);
    attention_head_dim_switch(
        a.hd(), [&](auto hd_tag) { attn_backward_launch<decltype(hd_tag)::value>(a, dqkv, dout, qkv, lse, D, st); });
}

}  // namespace llmc::cuda
