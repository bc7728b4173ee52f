// A decode step's linear layers over a few rows in one launch each, without cuBLASLt (the generator's
// --fused-decode 1; docs/generation.md, "Fused decode kernels"):
//   out (B, OC) = inp (B, IC) @ weight^T + bias        weight (OC, IC), bias (OC) nullable
//   with pre_gelu: pre_gelu = that, rounded to floatX; out = gelu(pre_gelu)   (matmul_forward's contract)
//   with a LayerNorm prologue: inp = LayerNorm(a + b) (or LayerNorm(a)), computed in every block from
//   (B, IC) rows, the residual a + b and the LayerNorm written by block 0 (the same values as
//   fused_residual_layernorm_forward's, bit for bit: the same row function, layernorm_row)
//   with a cache store (the qkv layer of a model without QK-norm): k and v of the new position written into
//   the KV cache as well, the values kv_store_kernel would copy
// so a decode layer is qkv (ln1 prologue, the cache store), attproj, fc + GELU (residual + ln2 prologue),
// fcproj, and the next layer's qkv (or the LM head) adds fcproj's output in its own prologue.
//
// A warp computes one output column at a time (OC columns over gridDim.x x kDecodeLinearWarps warps): each
// lane a 16-byte pack of the weight row at a time, against the B input rows in shared memory, fp32
// sums reduced by shuffles in a fixed order (deterministic on every GPU, not cuBLASLt's order: the same
// sums within fp32 rounding). At B <= kDecodeMaxRows rows the step reads each weight once, and its time
// is the launch's and the weight's (a layer of the paper model: 0.9 MB), not a GEMM's.
// CPU reference: llmc/cpu/matmul.h and llmc/cpu/layernorm.h; test/gpu/test_decode_linear.cu checks it
// against a double-precision reference written from this contract. The outputs (out, pre_gelu, the
// prologue's residual and ln_out) must not overlap the inputs (inp, a, b): other blocks still read those
// while one writes (std::invalid_argument).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "llmc/core/model_config.h"        // Gelu
#include "llmc/cuda/attention_decode.cuh"  // KvCacheView
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/layernorm.cuh"  // layernorm_row
#include "llmc/cuda/ptx.cuh"        // griddep_begin
#include "llmc/cuda/residual.cuh"   // kPack, load_vec, aligned16

namespace llmc::cuda {

constexpr int kDecodeMaxRows = 8;                   // rows (sequences) a launch takes (--fused-decode refuses more)
constexpr int kDecodeLinearWarps = 4;               // warps a block
constexpr int kDecodeLinearMaxBlocks = 1024;        // a function of OC alone below it: the same grid on every GPU
constexpr size_t kDecodeLinearMaxSmem = 48 * 1024;  // the default dynamic shared memory limit

// The LayerNorm before a decode linear layer: inp = LayerNorm(a + b) (b nullptr: LayerNorm(a)).
struct DecodeLnPrologue {
    const floatX* a = nullptr;     // (B, IC)
    const floatX* b = nullptr;     // (B, IC) or nullptr
    floatX* residual = nullptr;    // (B, IC): a + b as stored (needed when b is given; unused without)
    floatX* ln_out = nullptr;      // (B, IC): the LayerNorm (nullable)
    const floatX* w = nullptr;     // (IC)
    const floatX* bias = nullptr;  // (IC) or nullptr
};

// Bytes of dynamic shared memory a launch takes: the B input rows, and with a prologue that adds (b
// given) the B residual rows too.
inline size_t decode_linear_smem(int B, int IC, bool residual) {
    return (residual ? 2 : 1) * (size_t)B * IC * sizeof(floatX);
}
// Whether decode_linear takes B rows of IC inputs (with a residual prologue): else the caller uses
// matmul_forward.
inline bool decode_linear_fits(int B, int IC, bool residual) {
    return B >= 1 && B <= kDecodeMaxRows && IC > 0 && IC % kPack == 0 &&
           decode_linear_smem(B, IC, residual) <= kDecodeLinearMaxSmem;
}

namespace detail {
// What a launch stores besides out: nothing, or (the qkv layer of a decode step) each k and v value into the
// KV cache at the step's position, as kv_store_kernel would copy it from out.
struct NoExtraStore {
    __device__ void operator()(int /*row*/, int /*n*/, floatX /*v*/) const {}
};
struct KvCacheStore {
    KvCacheView cache;
    int layer;
    const int* pos;  // the step's position (device memory), read after the wait
    // out[row, n] = v of the qkv row (B, 3C): k in [C, 2C), v in [2C, 3C)
    __device__ void operator()(int row, int n, floatX v) const {
        const int C = cache.NH * cache.hd;
        if (n < C) return;
        const bool is_v = n >= 2 * C;
        const int c = n - (is_v ? 2 * C : C), h = c / cache.hd, d = c % cache.hd;
        const size_t o = cache.offset(layer, row, h, *pos) + d;
        (is_v ? cache.v_of(h) : cache.k_of(h))[o] = v;
    }
};

// The kernels' body. gelu < 0: no GELU (pre_gelu unused); else the Gelu kind. ln_a nullptr: no prologue
// (inp read); else inp = LayerNorm(ln_a + ln_b) (ln_b nullable), ln_residual / ln_out written by block 0.
template <typename Store>
__device__ __forceinline__ void decode_linear_body(floatX* out, floatX* pre_gelu, const floatX* inp,
                                                   const floatX* weight, const floatX* bias, const floatX* ln_a,
                                                   const floatX* ln_b, floatX* ln_residual, floatX* ln_out,
                                                   const floatX* ln_w, const floatX* ln_bias, int B, int IC, int OC,
                                                   int gelu, const Store& store) {
    griddep_begin();                    // first: wait for the previous kernel (programmatic launch)
    LLMC_DYNAMIC_SHARED(floatX, rows);  // (B, IC) the input rows; with ln_b (B, IC) more: the residual
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int packs = B * IC / kPack;
    // The warp's first weight pack (its first column, this lane's first k) is loaded here, after the
    // wait and before the prologue: no kernel of a decode step writes the weights, so its latency
    // overlaps the prologue's loads instead of following them.
    const int n_first = blockIdx.x * kDecodeLinearWarps + warp;
    uint4 w_first = make_uint4(0u, 0u, 0u, 0u);  // 16 bytes: a PackX
    if (n_first < OC && lane * kPack < IC)
        w_first = *reinterpret_cast<const uint4*>(weight + (size_t)n_first * IC + lane * kPack);
    if (ln_a) {
        floatX* resid = rows + (size_t)B * IC;
        for (int r = warp; r < B; r += kDecodeLinearWarps) {
            const size_t off = (size_t)r * IC;
            float m = 0.0f, s = 0.0f;
            if (ln_b)
                layernorm_row<kPack, true>(resid + off, rows + off, ln_a + off, ln_b + off, ln_w, ln_bias, IC, lane, m,
                                           s);
            else layernorm_row<kPack, false>(nullptr, rows + off, ln_a + off, nullptr, ln_w, ln_bias, IC, lane, m, s);
        }
        __syncthreads();
        if (blockIdx.x == 0) {
            for (int p = threadIdx.x; p < packs; p += blockDim.x) {
                if (ln_b) reinterpret_cast<PackX*>(ln_residual)[p] = reinterpret_cast<const PackX*>(resid)[p];
                if (ln_out) reinterpret_cast<PackX*>(ln_out)[p] = reinterpret_cast<const PackX*>(rows)[p];
            }
        }
    } else {
        for (int p = threadIdx.x; p < packs; p += blockDim.x)
            reinterpret_cast<PackX*>(rows)[p] = reinterpret_cast<const PackX*>(inp)[p];
        __syncthreads();
    }

    for (int n = blockIdx.x * kDecodeLinearWarps + warp; n < OC; n += gridDim.x * kDecodeLinearWarps) {
        float acc[kDecodeMaxRows];
#pragma unroll
        for (int r = 0; r < kDecodeMaxRows; r++) acc[r] = 0.0f;
        const floatX* wrow = weight + (size_t)n * IC;
        for (int k = lane * kPack; k < IC; k += 32 * kPack) {
            float wv[kPack];
            if (n == n_first && k == lane * kPack) {
                PackX pk;  // the early pack's bytes (memcpy: no type pun)
                std::memcpy(&pk, &w_first, sizeof pk);
                load_vec<kPack>(wv, pk.v);
            } else {
                load_vec<kPack>(wv, wrow + k);
            }
#pragma unroll
            for (int r = 0; r < kDecodeMaxRows; r++) {
                if (r < B) {
                    float xv[kPack];
                    load_vec<kPack>(xv, rows + (size_t)r * IC + k);
#pragma unroll
                    for (int j = 0; j < kPack; j++) acc[r] = fmaf(wv[j], xv[j], acc[r]);
                }
            }
        }
        const float bn = bias ? to_float(bias[n]) : 0.0f;
#pragma unroll
        for (int r = 0; r < kDecodeMaxRows; r++) {
            if (r < B) {
                const float v = warp_sum(acc[r]) + bn;
                if (lane == r) {
                    const size_t i = (size_t)r * OC + n;
                    if (gelu < 0) {
                        out[i] = from_float<floatX>(v);
                        store(r, n, out[i]);
                    } else {  // as matmul_forward's unfused path: the pre-activation rounded, then gelu_forward
                        const floatX pre = from_float<floatX>(v);
                        pre_gelu[i] = pre;
                        out[i] = from_float<floatX>(gelu_value(to_float(pre), static_cast<Gelu>(gelu)));
                    }
                }
            }
        }
    }
}

__global__ void __launch_bounds__(kDecodeLinearWarps * 32)
    decode_linear_kernel(floatX* out, floatX* pre_gelu, const floatX* inp, const floatX* weight, const floatX* bias,
                         const floatX* ln_a, const floatX* ln_b, floatX* ln_residual, floatX* ln_out,
                         const floatX* ln_w, const floatX* ln_bias, int B, int IC, int OC, int gelu) {
    decode_linear_body(out, pre_gelu, inp, weight, bias, ln_a, ln_b, ln_residual, ln_out, ln_w, ln_bias, B, IC, OC,
                       gelu, NoExtraStore{});
}

// The qkv layer of a decode step: also k and v of position *pos into layer `layer` of the cache.
__global__ void __launch_bounds__(kDecodeLinearWarps * 32)
    decode_linear_kv_kernel(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                            const floatX* ln_a, const floatX* ln_b, floatX* ln_residual, floatX* ln_out,
                            const floatX* ln_w, const floatX* ln_bias, int B, int IC, int OC, KvCacheView cache,
                            int layer, const int* pos) {
    decode_linear_body(out, nullptr, inp, weight, bias, ln_a, ln_b, ln_residual, ln_out, ln_w, ln_bias, B, IC, OC, -1,
                       KvCacheStore{cache, layer, pos});
}

inline void decode_linear_check(const void* p, const char* name) {
    if (!aligned16(p)) throw std::invalid_argument(std::string("decode_linear: ") + name + " must be 16-byte aligned");
}
}  // namespace detail

// A decode step's qkv layer storing its k and v into the cache itself (instead of kv_store).
struct DecodeKvStore {
    KvCacheView cache;
    int layer = 0;
    const int* pos = nullptr;  // the step's position, device memory
};

// out (B, OC) OVERWRITTEN = inp (B, IC) @ weight^T + bias (nullable); with pre_gelu (B, OC): pre_gelu = that
// and out = gelu(pre_gelu) of kind `gelu`. ln non-null: inp is ignored, LayerNorm(ln->a + ln->b) is the
// input (ln->residual, ln->ln_out written). kv non-null (a qkv layer, OC = 3C of the cache, B its
// sequences, no GELU): out's k and v also into the cache at *kv->pos, as kv_store would copy them. Needs
// decode_linear_fits(B, IC, ln && ln->b), OC a multiple of 8, 16-byte aligned pointers (else
// std::invalid_argument).
inline void decode_linear(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int B, int IC,
                          int OC, LaunchStream st, floatX* pre_gelu = nullptr, Gelu gelu = Gelu::Tanh,
                          const DecodeLnPrologue* ln = nullptr, const DecodeKvStore* kv = nullptr) {
    const bool residual = ln && ln->b;
    if (!decode_linear_fits(B, IC, residual) || OC <= 0 || OC % 8 != 0)
        throw std::invalid_argument("decode_linear: B " + std::to_string(B) + ", IC " + std::to_string(IC) + ", OC " +
                                    std::to_string(OC) + " outside what it takes (decode_linear_fits, OC % 8)");
    detail::decode_linear_check(out, "out");
    detail::decode_linear_check(weight, "weight");
    if (pre_gelu) detail::decode_linear_check(pre_gelu, "pre_gelu");
    if (ln) {
        if (!ln->a || !ln->w) throw std::invalid_argument("decode_linear: the LayerNorm prologue needs a and w");
        if (residual && !ln->residual)
            throw std::invalid_argument("decode_linear: the prologue's residual a + b needs somewhere to go");
        for (const void* p : {(const void*)ln->a, (const void*)ln->b, (const void*)ln->residual,
                              (const void*)ln->ln_out, (const void*)ln->w, (const void*)ln->bias})
            if (p) detail::decode_linear_check(p, "a LayerNorm prologue pointer");
    } else {
        detail::decode_linear_check(inp, "inp");
    }
    // no output may overlap an input (another block may still read it)
    const size_t in_bytes = (size_t)B * IC * sizeof(floatX), out_bytes = (size_t)B * OC * sizeof(floatX);
    const auto overlap = [](const void* p, size_t np, const void* q, size_t nq) {
        const char *x = static_cast<const char*>(p), *y = static_cast<const char*>(q);
        return p && q && x < y + nq && y < x + np;
    };
    const void* ins[] = {ln ? (const void*)ln->a : (const void*)inp, ln ? (const void*)ln->b : nullptr};
    const std::pair<const void*, size_t> outs[] = {{out, out_bytes},
                                                   {pre_gelu, out_bytes},
                                                   {ln ? ln->residual : nullptr, in_bytes},
                                                   {ln ? ln->ln_out : nullptr, in_bytes}};
    for (const void* i : ins)
        for (const auto& [o, n] : outs)
            if (overlap(i, in_bytes, o, n))
                throw std::invalid_argument("decode_linear: an output overlaps an input; give separate buffers");
    if (kv && (pre_gelu || !kv->pos || kv->layer < 0 || kv->layer >= kv->cache.L || kv->cache.B != B ||
               OC != 3 * kv->cache.NH * kv->cache.hd))
        throw std::invalid_argument(
            "decode_linear: a cache store needs a qkv layer of the cache's B rows and 3C "
            "columns, a layer of the cache, a position, and no GELU");
    const unsigned grid = (unsigned)std::min<long>(ceil_div(OC, kDecodeLinearWarps), kDecodeLinearMaxBlocks);
    const DecodeLnPrologue p = ln ? *ln : DecodeLnPrologue{};  // every pointer null without a prologue
    const floatX* in = ln ? nullptr : inp;
    const size_t smem = decode_linear_smem(B, IC, residual);
    if (kv)
        launch_kernel(detail::decode_linear_kv_kernel, grid, kDecodeLinearWarps * 32, smem, st, out, in, weight, bias,
                      p.a, p.b, p.residual, p.ln_out, p.w, p.bias, B, IC, OC, kv->cache, kv->layer, kv->pos);
    else
        launch_kernel(detail::decode_linear_kernel, grid, kDecodeLinearWarps * 32, smem, st, out, pre_gelu, in, weight,
                      bias, p.a, p.b, p.residual, p.ln_out, p.w, p.bias, B, IC, OC,
                      pre_gelu ? static_cast<int>(gelu) : -1);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
