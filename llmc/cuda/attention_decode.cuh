// Decode attention on the GPU (docs/generation.md): ONE new query per sequence against the KV cache, with
// the cache layout of llmc/cpu/kv_cache.h (documented there and in docs/generation.md):
//   global heads (h = NH-G .. NH-1):  k_global, v_global  (L, B, G, max_len, hd)  slot = position
//   local heads  (h = 0 .. NH-G-1):   k_local,  v_local   (L, B, NH-G, R, hd)     slot = position % R
// R = min(P, max_len). Elements are floatX (bf16 in the default build); scores, softmax and the
// output accumulate in fp32. The query at position t of head h sees positions lo..t, lo =
// max(0, t-P+1) for a local head and 0 for a global one, so a local head reads at most P keys
// whatever the context length. Soft-capping as in the training kernels: s' = c*tanh(s/c).
//
// Kernels (flash-decoding): the visible keys lo..t of a head are cut into splits of
// kDecodeSplitKeys keys, one block per (head, sequence, split), so a long global context is spread
// over many SMs (one block per head would walk a global head's keys serially:
// docs/results/kernel_journal.md). In a block, kDecodeWarps warps: warp w
// walks keys start+w, start+w+kDecodeWarps, ...; its lanes split the head dimension (lane owns dims
// lane, lane+32, ...), a warp reduction gives the score, and an online softmax (running max m, sum
// l, output acc) folds each key in; the warps' (m, l, acc) are merged in shared memory and written
// to the scratch `partial` (B, NH, max_splits, hd + 2) = (m, l, acc[hd]). The combine kernel merges
// a head's splits in split order (deterministic) into the output. With one_launch (the generator's
// --fused-decode 1), attention_decode_one_launch_kernel does both in one launch: each (head, sequence)'s
// split blocks count in on a counter (llmc/cuda/grid_arrival.cuh), and the last to arrive merges the
// partials as the combine kernel does, thread for thread: the same bits.
// kv_store writes one new position per sequence (a decode step); kv_store_prefill writes the
// positions 0..T-1 of a prefill (a local head only its last R, so every slot has one writer).
// A decode step's kernels read its position t from device memory (`pos`, one int for every
// sequence), so a captured decode step (a CUDA graph) serves every position whose splits fit its
// grid; the host launcher takes the grid's depth in splits.
#pragma once
#include <algorithm>
#include <cmath>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/grid_arrival.cuh"  // arrive_last
#include "llmc/cuda/ptx.cuh"           // griddep_begin

namespace llmc::cuda {

constexpr int kDecodeWarps = 4;
constexpr int kDecodeMaxHeadSize = 128;     // hd <= 128 (4 dims per lane)
constexpr int kDecodeSplitKeys = 128;       // keys per split (32 per warp)
constexpr int kDecodeCombineThreads = 128;  // the combine kernel's block

// Splits of max_len keys, and the scratch floats of a cache of B sequences: (B, NH, splits, hd + 2).
__host__ __device__ inline int decode_max_splits(int max_len) {
    return (max_len + kDecodeSplitKeys - 1) / kDecodeSplitKeys;
}
inline size_t decode_scratch_floats(int B, int NH, int hd, int max_len) {
    return (size_t)B * NH * decode_max_splits(max_len) * (hd + 2);
}

// Device pointers and shape of a KV cache (layout above).
struct KvCacheView {
    floatX* k_global = nullptr;  // (L, B, G, max_len, hd)
    floatX* v_global = nullptr;
    floatX* k_local = nullptr;  // (L, B, NH-G, R, hd)
    floatX* v_local = nullptr;
    int L = 0, B = 0, NH = 0, G = 0, hd = 0, P = 0, max_len = 0, ring = 0;
    float* partial = nullptr;      // scratch of decode_scratch_floats(B, NH, hd, max_len) floats
    uint32_t* arrivals = nullptr;  // (B, NH) the one-launch attention's arrival counters, 0 between launches

    __host__ __device__ bool is_local(int h) const { return h < NH - G; }
    // The k (or v) buffer that holds head h's rows.
    __host__ __device__ floatX* k_of(int h) const { return is_local(h) ? k_local : k_global; }
    __host__ __device__ floatX* v_of(int h) const { return is_local(h) ? v_local : v_global; }
    // Offset of the (hd) row of position t of head h of sequence b in layer l.
    __host__ __device__ size_t offset(int l, int b, int h, int t) const {
        if (is_local(h)) return ((((size_t)l * B + b) * (NH - G) + h) * ring + t % ring) * hd;
        return ((((size_t)l * B + b) * G + (h - (NH - G))) * max_len + t) * hd;
    }
};

// Writes k and v of position t = *pos of every sequence into layer l of the cache.
// qkv: (B, 3C) the new position's row per sequence (k in [C, 2C), v in [2C, 3C)).
__global__ void kv_store_kernel(KvCacheView cache, const floatX* qkv, int l, const int* pos) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int C = cache.NH * cache.hd, t = *pos;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // over (B, C)
    if (idx >= cache.B * C) return;
    const int b = idx / C, c = idx % C, h = c / cache.hd, d = c % cache.hd;
    const size_t o = cache.offset(l, b, h, t) + d;
    const floatX* row = qkv + (size_t)b * 3 * C;
    cache.k_of(h)[o] = row[C + c];
    cache.v_of(h)[o] = row[2 * C + c];
}

// Prefill: writes k and v of positions 0..T-1 of every sequence into layer l of the cache.
// qkv: (B, T, 3C) the prefill's rows. A local head keeps only positions T-R .. T-1 (the last R =
// ring slots; earlier ones would be overwritten anyway, and skipping them keeps every slot written
// by exactly one thread).
__global__ void kv_store_prefill_kernel(KvCacheView cache, const floatX* qkv, int l, int T) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int C = cache.NH * cache.hd;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // over (B, T, C)
    if (idx >= (size_t)cache.B * T * C) return;
    const int c = (int)(idx % C), h = c / cache.hd, d = c % cache.hd;
    const size_t bt = idx / C;
    const int t = (int)(bt % T), b = (int)(bt / T);
    if (cache.is_local(h) && t < T - cache.ring) return;
    const size_t o = cache.offset(l, b, h, t) + d;
    const floatX* row = qkv + bt * 3 * C;
    cache.k_of(h)[o] = row[C + c];
    cache.v_of(h)[o] = row[2 * C + c];
}

// Keys lo..t of the query at position t of head h (lo = t-P+1 for a local head, clamped at 0).
__device__ __forceinline__ int decode_first_key(const KvCacheView& cache, int h, int t) {
    return cache.is_local(h) ? max(0, t - cache.P + 1) : 0;
}

// Splits of the keys the query at position t of head h sees.
__device__ __forceinline__ int decode_head_splits(const KvCacheView& cache, int h, int t) {
    return (t - decode_first_key(cache, h, t)) / kDecodeSplitKeys + 1;
}

// Block (h, b, split)'s split of keys of the query at position t: partial (m, l, acc) into cache.partial.
// The split holds at least one key (start <= t).
__device__ __forceinline__ void decode_split_body(const floatX* qkv, const KvCacheView& cache, int l, int t,
                                                  float softcap) {
    constexpr int DPL = kDecodeMaxHeadSize / 32;  // dims per lane, at most
    __shared__ float s_m[kDecodeWarps], s_l[kDecodeWarps];
    __shared__ float s_acc[kDecodeWarps][kDecodeMaxHeadSize];
    const int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z, hd = cache.hd, C = cache.NH * hd;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int start = decode_first_key(cache, h, t) + split * kDecodeSplitKeys;
    const int end = min(t, start + kDecodeSplitKeys - 1);
    const float scale = rsqrtf((float)hd);
    const floatX* kbase = cache.k_of(h);
    const floatX* vbase = cache.v_of(h);

    float q[DPL], acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        const int d = lane + 32 * i;
        q[i] = d < hd ? to_float(qkv[(size_t)b * 3 * C + h * hd + d]) : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, lsum = 0.0f;
    for (int j = start + warp; j <= end; j += kDecodeWarps) {
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
    // merge the warps: (M, L, acc) with acc = sum_w acc_w e^(m_w - M), L = sum_w l_w e^(m_w - M); a warp
    // that saw no key has m_w = -inf and contributes 0 (warp 0 saw key `start`, so M is finite).
    float M = -INFINITY;
    for (int w = 0; w < kDecodeWarps; w++) M = fmaxf(M, s_m[w]);
    float* part = cache.partial + (((size_t)b * cache.NH + h) * decode_max_splits(cache.max_len) + split) * (hd + 2);
    if (threadIdx.x == 0) {
        float L = 0.0f;
        for (int w = 0; w < kDecodeWarps; w++) L += s_l[w] * expf(s_m[w] - M);
        part[0] = M;
        part[1] = L;
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < kDecodeWarps; w++) o += s_acc[w][d] * expf(s_m[w] - M);
        part[2 + d] = o;
    }
}

// out[b, head h] (hd) = head h of sequence b's `splits` partials merged in split order, by the block's
// threads (dims threadIdx.x, threadIdx.x + blockDim.x, ...).
__device__ __forceinline__ void decode_combine_body(floatX* out, const KvCacheView& cache, int h, int b, int splits) {
    const int hd = cache.hd, C = cache.NH * hd;
    const float* part = cache.partial + ((size_t)b * cache.NH + h) * decode_max_splits(cache.max_len) * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, part[s * (hd + 2)]);
    float L = 0.0f;
    for (int s = 0; s < splits; s++) L += part[s * (hd + 2) + 1] * expf(part[s * (hd + 2)] - M);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < splits; s++) o += part[s * (hd + 2) + 2 + d] * expf(part[s * (hd + 2)] - M);
        out[(size_t)b * C + h * hd + d] = from_float<floatX>(o / L);
    }
}

// out[b, head h] = NaN (hd): a grid too shallow for the head's splits.
__device__ __forceinline__ void decode_nan_row(floatX* out, const KvCacheView& cache, int h, int b) {
    const int hd = cache.hd, C = cache.NH * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[(size_t)b * C + h * hd + d] = from_float<floatX>(NAN);
}

// One split of keys for each (head, sequence) of the query at position t = *pos: partial (m, l, acc)
// into cache.partial. qkv: (B, 3C) (only q, channels [0, C), is read). grid (NH, B, splits of the
// longest head at the largest t the launch serves), block kDecodeWarps * 32; a block past its head's
// last split at t returns at once.
__global__ void attention_decode_split_kernel(const floatX* qkv, KvCacheView cache, int l, const int* pos,
                                              float softcap) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int t = *pos;
    if ((int)blockIdx.z >= decode_head_splits(cache, blockIdx.x, t)) return;  // this head has fewer splits
    decode_split_body(qkv, cache, l, t, softcap);
}

// out: (B, C) attention output at position t = *pos: each head's splits merged in split order.
// grid (NH, B), block kDecodeCombineThreads. grid_splits: the split kernel's grid depth; a position that needs more
// splits than it ran (a launch planned for a smaller t) gets NaN, never another step's partials.
__global__ void attention_decode_combine_kernel(floatX* out, KvCacheView cache, const int* pos, int grid_splits) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int h = blockIdx.x, b = blockIdx.y;
    const int splits = decode_head_splits(cache, h, *pos);
    if (splits > grid_splits) {
        decode_nan_row(out, cache, h, b);
        return;
    }
    decode_combine_body(out, cache, h, b, splits);
}

// The split and combine kernels in one launch (grid and block of the split kernel): each (head, sequence)'s
// split blocks write their partials and count in on cache.arrivals[b * NH + h]; the last to arrive merges
// them (decode_combine_body, as the combine kernel's block does). A grid shallower than the head needs:
// its row NaN (by split 0; no block counts in), never another step's partials.
__global__ void attention_decode_one_launch_kernel(floatX* out, const floatX* qkv, KvCacheView cache, int l,
                                                   const int* pos, float softcap) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int h = blockIdx.x, b = blockIdx.y, t = *pos;
    const int splits = decode_head_splits(cache, h, t);
    if (splits > (int)gridDim.z) {
        if (blockIdx.z == 0) decode_nan_row(out, cache, h, b);
        return;
    }
    if ((int)blockIdx.z >= splits) return;  // this head has fewer splits (not counted in its group)
    decode_split_body(qkv, cache, l, t, softcap);
    if (!arrive_last(cache.arrivals + (size_t)b * cache.NH + h, (uint32_t)splits)) return;
    decode_combine_body(out, cache, h, b, splits);
}

// Host launchers. They check the shapes (std::invalid_argument: a programming error, not input); the
// position itself is in device memory (pos: one int), and the caller keeps it inside the cache.
inline void kv_store(const KvCacheView& cache, const floatX* qkv, int l, const int* pos,
                     LaunchStream stream = LaunchStream(nullptr)) {
    if (l < 0 || l >= cache.L || pos == nullptr)
        throw std::invalid_argument("kv_store: layer " + std::to_string(l) + " outside the cache, or no position");
    const int n = cache.B * cache.NH * cache.hd;
    launch_kernel(kv_store_kernel, (unsigned)ceil_div(n, 256), 256, 0, stream, cache, qkv, l, pos);
    CUDA_CHECK_LAUNCH();
}

// qkv: (B, T, 3C); positions 0..T-1 of an empty cache (T <= max_len).
inline void kv_store_prefill(const KvCacheView& cache, const floatX* qkv, int l, int T,
                             LaunchStream stream = LaunchStream(nullptr)) {
    if (l < 0 || l >= cache.L || T < 1 || T > cache.max_len)
        throw std::invalid_argument("kv_store_prefill: layer " + std::to_string(l) + " / length " + std::to_string(T) +
                                    " outside the cache");
    const size_t n = (size_t)cache.B * T * cache.NH * cache.hd;
    launch_kernel(kv_store_prefill_kernel, (unsigned)ceil_div((long)n, 256), 256, 0, stream, cache, qkv, l, T);
    CUDA_CHECK_LAUNCH();
}

// Splits of keys of the longest head at position t: the least split grid depth for t.
inline int decode_splits_at(const KvCacheView& cache, int t) {
    const int longest = t + 1 - (cache.G > 0 ? 0 : std::max(0, t - cache.P + 1));  // keys of the longest head
    return (longest + kDecodeSplitKeys - 1) / kDecodeSplitKeys;
}

// out (B, C): the attention of the query at position *pos (device) of layer l over the cache. splits:
// the split grid's depth, at least decode_splits_at(cache, *pos) (deeper grids give the same bits:
// their extra blocks return at once).
// one_launch: attention_decode_one_launch_kernel (cache.arrivals needed), the same bits in one launch.
inline void attention_decode(floatX* out, const floatX* qkv, const KvCacheView& cache, int l, const int* pos,
                             int splits, float softcap, LaunchStream stream = LaunchStream(nullptr),
                             bool one_launch = false) {
    if (cache.hd < 1 || cache.hd > kDecodeMaxHeadSize)
        throw std::invalid_argument("attention_decode: head size " + std::to_string(cache.hd) + " not in [1, " +
                                    std::to_string(kDecodeMaxHeadSize) + "]");
    if (l < 0 || l >= cache.L || splits < 1 || splits > decode_max_splits(cache.max_len))
        throw std::invalid_argument("attention_decode: layer " + std::to_string(l) + " / split depth " +
                                    std::to_string(splits) + " outside the cache");
    if (cache.partial == nullptr || pos == nullptr)
        throw std::invalid_argument(
            "attention_decode: the cache has no scratch (decode_scratch_floats), or no position");
    dim3 split_grid(cache.NH, cache.B, (unsigned)splits);
    if (one_launch) {
        if (cache.arrivals == nullptr)
            throw std::invalid_argument("attention_decode: one launch needs the cache's arrival counters");
        launch_kernel(attention_decode_one_launch_kernel, split_grid, kDecodeWarps * 32, 0, stream, out, qkv, cache, l,
                      pos, softcap);
        CUDA_CHECK_LAUNCH();
        return;
    }
    launch_kernel(attention_decode_split_kernel, split_grid, kDecodeWarps * 32, 0, stream, qkv, cache, l, pos, softcap);
    CUDA_CHECK_LAUNCH();
    launch_kernel(attention_decode_combine_kernel, dim3(cache.NH, cache.B), kDecodeCombineThreads, 0, stream, out,
                  cache, pos, splits);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
