// Decode attention on the GPU (docs/generation.md): ONE new query per sequence against the KV cache, with
// the cache layout of llmc/cpu/kv_cache.h (documented there and in docs/generation.md):
//   global heads (h = NH-G .. NH-1):  k_global, v_global  (L, B, G, max_len, hd)  slot = position
//   local heads  (h = 0 .. NH-G-1):   k_local,  v_local   (L, B, NH-G, R, hd)     slot = position % R
// R = min(P, max_len). Elements are floatX (bf16 in the default build); scores, softmax and the
// output accumulate in fp32. The query at position t of head h sees positions lo..t, lo =
// max(0, t-P+1) for a local head and 0 for a global one, so a local head reads at most P keys
// whatever the context length. Soft-capping as in the training kernels: s' = c*tanh(s/c).
//
// Kernel: one block per (head, sequence), kDecodeWarps warps. Warp w walks keys lo+w,
// lo+w+kDecodeWarps, ...; its lanes split the head dimension (lane owns dims lane, lane+32, ...),
// a warp reduction gives the score, and an online softmax (running max m, sum l, output acc)
// folds each key in. The warps' (m, l, acc) are merged in shared memory at the end.
// kv_store writes one new position per sequence (a decode step); kv_store_prefill writes the
// positions 0..T-1 of a prefill (a local head only its last R, so every slot has one writer).
// Not yet tuned: no split over keys across blocks (flash-decoding), so a long global context with
// few sequences uses few SMs; see docs/generation.md.
#pragma once
#include <cmath>

#include "llmc/cuda/common.cuh"

namespace llmc::cuda {

constexpr int kDecodeWarps = 4;
constexpr int kDecodeMaxHeadSize = 128;  // hd <= 128 (4 dims per lane)

// Device pointers and shape of a KV cache (layout above).
struct KvCacheView {
    floatX* k_global = nullptr;  // (L, B, G, max_len, hd)
    floatX* v_global = nullptr;
    floatX* k_local = nullptr;  // (L, B, NH-G, R, hd)
    floatX* v_local = nullptr;
    int L = 0, B = 0, NH = 0, G = 0, hd = 0, P = 0, max_len = 0, ring = 0;

    __host__ __device__ bool is_local(int h) const { return h < NH - G; }
    // Offset of the (hd) row of position t of head h of sequence b in layer l.
    __host__ __device__ size_t offset(int l, int b, int h, int t) const {
        if (is_local(h)) return ((((size_t)l * B + b) * (NH - G) + h) * ring + t % ring) * hd;
        return ((((size_t)l * B + b) * G + (h - (NH - G))) * max_len + t) * hd;
    }
};

// Writes k and v of position t of every sequence into layer l of the cache.
// qkv: (B, 3C) the new position's row per sequence (k in [C, 2C), v in [2C, 3C)).
__global__ void kv_store_kernel(KvCacheView cache, const floatX* qkv, int l, int t) {
    const int C = cache.NH * cache.hd;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // over (B, C)
    if (idx >= cache.B * C) return;
    const int b = idx / C, c = idx % C, h = c / cache.hd, d = c % cache.hd;
    const size_t o = cache.offset(l, b, h, t) + d;
    const floatX* row = qkv + (size_t)b * 3 * C;
    (cache.is_local(h) ? cache.k_local : cache.k_global)[o] = row[C + c];
    (cache.is_local(h) ? cache.v_local : cache.v_global)[o] = row[2 * C + c];
}

// Prefill: writes k and v of positions 0..T-1 of every sequence into layer l of the cache.
// qkv: (B, T, 3C) the prefill's rows. A local head keeps only positions T-R .. T-1 (the last R =
// ring slots; earlier ones would be overwritten anyway, and skipping them keeps every slot written
// by exactly one thread).
__global__ void kv_store_prefill_kernel(KvCacheView cache, const floatX* qkv, int l, int T) {
    const int C = cache.NH * cache.hd;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // over (B, T, C)
    if (idx >= (size_t)cache.B * T * C) return;
    const int c = (int)(idx % C), h = c / cache.hd, d = c % cache.hd;
    const size_t bt = idx / C;
    const int t = (int)(bt % T), b = (int)(bt / T);
    if (cache.is_local(h) && t < T - cache.ring) return;
    const size_t o = cache.offset(l, b, h, t) + d;
    const floatX* row = qkv + bt * 3 * C;
    (cache.is_local(h) ? cache.k_local : cache.k_global)[o] = row[C + c];
    (cache.is_local(h) ? cache.v_local : cache.v_global)[o] = row[2 * C + c];
}

// out: (B, C) attention output at position t; qkv: (B, 3C) (only q, channels [0, C), is read).
// grid (NH, B), block kDecodeWarps * 32.
__global__ void attention_decode_kernel(floatX* out, const floatX* qkv, KvCacheView cache, int l, int t,
                                        float softcap) {
    constexpr int DPL = kDecodeMaxHeadSize / 32;  // dims per lane, at most
    __shared__ float s_m[kDecodeWarps], s_l[kDecodeWarps];
    __shared__ float s_acc[kDecodeWarps][kDecodeMaxHeadSize];
    const int h = blockIdx.x, b = blockIdx.y, hd = cache.hd, C = cache.NH * hd;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int lo = cache.is_local(h) ? max(0, t - cache.P + 1) : 0;
    const float scale = rsqrtf((float)hd);
    const floatX* kbase = cache.is_local(h) ? cache.k_local : cache.k_global;
    const floatX* vbase = cache.is_local(h) ? cache.v_local : cache.v_global;

    float q[DPL], acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        const int d = lane + 32 * i;
        q[i] = d < hd ? to_float(qkv[(size_t)b * 3 * C + h * hd + d]) : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, lsum = 0.0f;
    for (int j = lo + warp; j <= t; j += kDecodeWarps) {
        const size_t o = cache.offset(l, b, h, j);
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + 32 * i;
            if (d < hd) part += q[i] * to_float(kbase[o + d]);
        }
        float s = warp_sum(part) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);  // 0 for the first key (m = -inf)
        const float p = expf(s - m_new);
        lsum = lsum * corr + p;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + 32 * i;
            acc[i] = acc[i] * corr + (d < hd ? p * to_float(vbase[o + d]) : 0.0f);
        }
        m = m_new;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = lsum;
    }
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        const int d = lane + 32 * i;
        if (d < hd) s_acc[warp][d] = acc[i];
    }
    __syncthreads();
    // merge the warps: out = sum_w acc_w e^(m_w - M) / sum_w l_w e^(m_w - M); a warp that saw no
    // key has m_w = -inf and contributes 0 (at least one warp saw key t, so M is finite).
    float M = -INFINITY;
    for (int w = 0; w < kDecodeWarps; w++) M = fmaxf(M, s_m[w]);
    float L = 0.0f;
    for (int w = 0; w < kDecodeWarps; w++) L += s_l[w] * expf(s_m[w] - M);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < kDecodeWarps; w++) o += s_acc[w][d] * expf(s_m[w] - M);
        out[(size_t)b * C + h * hd + d] = from_float<floatX>(o / L);
    }
}

// Host launchers. They check the shapes (std::invalid_argument: a programming error, not input).
inline void kv_store(const KvCacheView& cache, const floatX* qkv, int l, int t, cudaStream_t stream = 0) {
    if (l < 0 || l >= cache.L || t < 0 || t >= cache.max_len)
        throw std::invalid_argument("kv_store: layer " + std::to_string(l) + " / position " + std::to_string(t) +
                                    " outside the cache");
    const int n = cache.B * cache.NH * cache.hd;
    launch_kernel(kv_store_kernel, (unsigned)ceil_div(n, 256), 256, 0, stream, cache, qkv, l, t);
    CUDA_CHECK_LAUNCH();
}

// qkv: (B, T, 3C); positions 0..T-1 of an empty cache (T <= max_len).
inline void kv_store_prefill(const KvCacheView& cache, const floatX* qkv, int l, int T, cudaStream_t stream = 0) {
    if (l < 0 || l >= cache.L || T < 1 || T > cache.max_len)
        throw std::invalid_argument("kv_store_prefill: layer " + std::to_string(l) + " / length " + std::to_string(T) +
                                    " outside the cache");
    const size_t n = (size_t)cache.B * T * cache.NH * cache.hd;
    launch_kernel(kv_store_prefill_kernel, (unsigned)ceil_div((long)n, 256), 256, 0, stream, cache, qkv, l, T);
    CUDA_CHECK_LAUNCH();
}

inline void attention_decode(floatX* out, const floatX* qkv, const KvCacheView& cache, int l, int t, float softcap,
                             cudaStream_t stream = 0) {
    if (cache.hd < 1 || cache.hd > kDecodeMaxHeadSize)
        throw std::invalid_argument("attention_decode: head size " + std::to_string(cache.hd) + " not in [1, " +
                                    std::to_string(kDecodeMaxHeadSize) + "]");
    if (l < 0 || l >= cache.L || t < 0 || t >= cache.max_len)
        throw std::invalid_argument("attention_decode: layer " + std::to_string(l) + " / position " +
                                    std::to_string(t) + " outside the cache");
    dim3 grid(cache.NH, cache.B);
    launch_kernel(attention_decode_kernel, grid, kDecodeWarps * 32, 0, stream, out, qkv, cache, l, t, softcap);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
