// KV cache for incremental decoding (docs/generation.md) and the CPU decode attention over it.
//
// Layout, per layer l (every buffer row-major, the last dimension contiguous):
//   global heads (h = NH-G .. NH-1):  k_global, v_global  (L, B, G, max_len, hd)  slot = position
//   local heads  (h = 0 .. NH-G-1):   k_local,  v_local   (L, B, NH-G, R, hd)     slot = position % R
// with R = min(P, max_len) the ring size: a local head's query at position t only sees keys
// t-P+1 .. t, so the last P keys/values are all it ever needs. When P >= max_len the ring never
// wraps and a local head behaves (and costs) like a global one. The cache stores k after QK-norm
// (what the attention actually sees) and v. Memory, fp32:
//   bytes = 2 * L * B * hd * (G * max_len + (NH-G) * min(P, max_len)) * sizeof(float)
// so it is flat in max_len for the local heads and linear for the global ones.
//
// attention_decode computes, for every sequence b and head h, the attention of ONE new query at
// position t against the cached keys lo..t, with the row arithmetic of the forward's kernel
// (llmc/cpu/attention_flash.h: the same key-block grid and per-row operations), so a cached decode
// step gives bit-identical outputs to the full forward's row t.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "llmc/core/batch_check.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/cpu/attention_flash.h"
#include "llmc/cpu/simd.h"

namespace llmc {
namespace cpu {

template <typename F>
struct KvCache {
    int L = 0, B = 0, NH = 0, G = 0, hd = 0, P = 0;
    int max_len = 0;                    // positions per sequence the cache can hold
    int ring = 0;                       // R = min(P, max_len): slots of a local head
    int pos = 0;                        // positions cached so far (the same for every sequence)
    std::vector<F> k_global, v_global;  // (L, B, G, max_len, hd)
    std::vector<F> k_local, v_local;    // (L, B, NH-G, R, hd)

    // An empty cache for B sequences of up to max_len positions (buffers reused when they fit).
    void init(const ModelConfig& cfg, int B_, int max_len_) {
        check_kv_begin(cfg, B_, max_len_);
        L = cfg.num_layers;
        B = B_;
        NH = cfg.num_heads;
        G = cfg.global_heads;
        hd = cfg.head_size();
        P = cfg.window;
        max_len = max_len_;
        ring = std::min(P, max_len);
        pos = 0;
        const size_t ng = (size_t)L * B * G * max_len * hd, nl = (size_t)L * B * (NH - G) * ring * hd;
        k_global.resize(ng);
        v_global.resize(ng);
        k_local.resize(nl);
        v_local.resize(nl);
        k_global.shrink_to_fit();
        v_global.shrink_to_fit();
        k_local.shrink_to_fit();
        v_local.shrink_to_fit();
    }

    size_t bytes() const {
        return (k_global.capacity() + v_global.capacity() + k_local.capacity() + v_local.capacity()) * sizeof(F);
    }

    bool is_local(int h) const { return h < NH - G; }
    // First position the query at position t of head h sees (as attention_key_lo).
    int key_lo(int t, int h) const { return is_local(h) ? std::max(0, t - P + 1) : 0; }
    // Offset of the (hd) row holding position t of head h of sequence b in layer l, inside
    // k_local/v_local (local heads) or k_global/v_global (global heads).
    size_t offset(int l, int b, int h, int t) const {
        if (is_local(h)) return ((((size_t)l * B + b) * (NH - G) + h) * ring + t % ring) * hd;
        return ((((size_t)l * B + b) * G + (h - (NH - G))) * max_len + t) * hd;
    }
    const F* k_row(int l, int b, int h, int t) const {
        return (is_local(h) ? k_local.data() : k_global.data()) + offset(l, b, h, t);
    }
    const F* v_row(int l, int b, int h, int t) const {
        return (is_local(h) ? v_local.data() : v_global.data()) + offset(l, b, h, t);
    }

    // Stores k and v of position t of sequence b in layer l from one qkv row (3C): k in channels
    // [C, 2C), v in [2C, 3C), head h at h*hd.
    void store(int l, int b, int t, const F* qkv_row) {
        const int C = NH * hd;
        for (int h = 0; h < NH; h++) {
            const size_t o = offset(l, b, h, t);
            F* kd = (is_local(h) ? k_local.data() : k_global.data()) + o;
            F* vd = (is_local(h) ? v_local.data() : v_global.data()) + o;
            std::copy(qkv_row + C + h * hd, qkv_row + C + h * hd + hd, kd);
            std::copy(qkv_row + 2 * C + h * hd, qkv_row + 2 * C + h * hd + hd, vd);
        }
    }
};

// out: (B, C) attention output of the query at position t, heads concatenated.
// qkv: (B, 3C) the new position's qkv row per sequence (only q, channels [0, C), is read; its k
// and v must already be stored at position t of layer l). Keys lo..t of each head must be cached.
// isa: the kernel twin; the forward's row t is bit-identical only with the same twin (the default).
template <typename F>
void attention_decode(F* out, const F* qkv, const KvCache<F>& cache, int l, int t, float softcap,
                      Isa isa = isa_best()) {
    const int B = cache.B, NH = cache.NH, hd = cache.hd, C = NH * hd;
    if (t < 0 || t >= cache.max_len || l < 0 || l >= cache.L)
        throw InputError("attention_decode: position " + std::to_string(t) + " / layer " + std::to_string(l) +
                         " outside the cache (max_len " + std::to_string(cache.max_len) + ", " +
                         std::to_string(cache.L) + " layers)");
    // the shape as the forward sees it (T = t + 1: only the key grid and the window matter)
    const flash::Shape<F> sh{B, t + 1, C, NH, cache.G, cache.P, hd, cache.P, F(1) / std::sqrt(F(hd)), F(softcap)};
    flash::decode(
        sh, t, [&](int b, int h) { return qkv + (size_t)b * 3 * C + h * hd; },
        [&](int b, int h, int j) { return cache.k_row(l, b, h, j); },
        [&](int b, int h, int j) { return cache.v_row(l, b, h, j); },
        [&](int b, int h) { return out + (size_t)b * C + h * hd; }, isa);
}

}  // namespace cpu
}  // namespace llmc
