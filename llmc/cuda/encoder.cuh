// Token + position embedding on the GPU (GPT-2's first layer). CPU reference: llmc/cpu/encoder.h.
//   forward:  out[b, t, :] = wte[inp[b, t], :] + wpe[t, :]
//   backward: dwte[tok, :] += sum over positions (b, t) with inp[b, t] == tok of dout[b, t, :]
//             dwpe[t, :]   += sum over b of dout[b, t, :]
// Deterministic backward without atomics: the host groups the positions by token from inp_host
// (positions of a token in increasing (b, t) order), uploads that grouping, and one thread per
// (token, channel) sums its positions in that order; one thread per (t, channel) sums b in order.
// Token ids must be valid rows of wte (the data loader checks them against the vocabulary).
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/residual.cuh"
#include "llmc/core/error.h"

namespace llmc::cuda {

// out (B*T, C): item = (bt, j) with channels [j*V, j*V + V). V = kPack needs C % kPack == 0 and aligned pointers.
template <int V>
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T,
                                       int C) {
    const int per_row = C / V;
    const size_t n_items = (size_t)B * T * per_row;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t item = (size_t)blockIdx.x * blockDim.x + threadIdx.x; item < n_items; item += stride) {
        const size_t bt = item / per_row;
        const int c = (int)(item % per_row) * V;
        const int t = (int)(bt % T);
        float x[V], y[V];
        load_vec<V>(x, wte + (size_t)inp[bt] * C + c);
        load_vec<V>(y, wpe + (size_t)t * C + c);
#pragma unroll
        for (int k = 0; k < V; k++) x[k] += y[k];
        store_vec<V>(out + bt * C + c, x);
    }
}

// dwpe (maxT, C) rows [0, T): one thread per (t, c), summing b = 0..B-1 in order.
__global__ void encoder_backward_wpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
    const size_t n_items = (size_t)T * C;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_items; i += stride) {
        float sum = 0.0f;
        for (int b = 0; b < B; b++) sum += to_float(dout[(size_t)b * T * C + i]);
        dwpe[i] += sum;
    }
}

// dwte (Vp, C): block (u, channel chunk), thread = channel. Bucket u is token bucket_token[u] and owns the
// positions positions[bucket_start[u] .. bucket_start[u+1]) (increasing), summed in that order.
__global__ void encoder_backward_wte_kernel(float* dwte, const floatX* dout, const int* positions,
                                            const int* bucket_start, const int* bucket_token, int C) {
    const int u = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0.0f;
    for (int i = bucket_start[u]; i < bucket_start[u + 1]; i++) sum += to_float(dout[(size_t)positions[i] * C + c]);
    dwte[(size_t)bucket_token[u] * C + c] += sum;
}

// Buffers of encoder_backward, grown on demand. The grouping is built in pinned host memory and copied
// asynchronously; `copied` marks when the previous copy finished so the host buffer can be rewritten.
struct EncoderBackwardScratch {
    DeviceBuffer<int> index;   // positions (B*T) | bucket_start (U+1) | bucket_token (U)
    int* host = nullptr;       // pinned mirror of `index`
    size_t host_capacity = 0;  // ints
    cudaEvent_t copied = nullptr;
    std::vector<std::pair<int, int>> order;  // (token, position), host work array

    EncoderBackwardScratch() = default;
    EncoderBackwardScratch(const EncoderBackwardScratch&) = delete;
    EncoderBackwardScratch& operator=(const EncoderBackwardScratch&) = delete;
    ~EncoderBackwardScratch() {
        if (copied) {
            cudaEventSynchronize(copied);
            cudaEventDestroy(copied);
        }
        if (host) cudaFreeHost(host);
    }
    void reserve(size_t ints) {
        if (!copied) CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
        if (ints > host_capacity) {
            CUDA_CHECK(cudaEventSynchronize(copied));  // the old buffer may still be read by a pending copy
            if (host) CUDA_CHECK(cudaFreeHost(host));
            host = nullptr;
            CUDA_CHECK(cudaMallocHost(&host, ints * sizeof(int)));
            host_capacity = ints;
        }
        if (ints > index.size()) index.resize(ints);
    }
};

// ---- host API -------------------------------------------------------------------------------------
// out (B,T,C) OVERWRITTEN; inp (B,T) device token ids; wte (Vp,C); wpe (maxT,C) with T <= maxT.
inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            cudaStream_t st) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    const bool vec = C % kPack == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
    const size_t items = (size_t)B * T * (vec ? C / kPack : C);
    if (vec)
        launch_kernel(encoder_forward_kernel<kPack>, elementwise_grid(items), kElementwiseBlock, 0, st, out, inp, wte,
                      wpe, B, T, C);
    else
        launch_kernel(encoder_forward_kernel<1>, elementwise_grid(items), kElementwiseBlock, 0, st, out, inp, wte, wpe,
                      B, T, C);
    CUDA_CHECK_LAUNCH();
}

// dwte (Vp,C), dwpe (maxT,C) fp32 ADDED from dout (B,T,C). inp_host (B,T): the same ids as inp, on the host.
// (inp itself is not read: the grouping comes from inp_host.) Blocks the host only when the previous call's
// grouping copy has not finished yet.
inline void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* inp, const int* inp_host, int B,
                             int T, int C, EncoderBackwardScratch& scratch, cudaStream_t st) {
    (void)inp;
    if (B <= 0 || T <= 0 || C <= 0) return;
    const int n = B * T;

    // group positions by token: sort (token, position) pairs; positions of a token stay increasing
    scratch.order.resize(n);
    for (int i = 0; i < n; i++) {
        if (inp_host[i] < 0)
            throw InputError("encoder_backward: negative token id " + std::to_string(inp_host[i]) + " at position " +
                             std::to_string(i) + "; check the data shards");
        scratch.order[i] = {inp_host[i], i};
    }
    std::sort(scratch.order.begin(), scratch.order.end());
    int U = 0;  // distinct tokens
    for (int i = 0; i < n; i++) U += (i == 0 || scratch.order[i].first != scratch.order[i - 1].first);

    const size_t ints = (size_t)n + 2 * (size_t)U + 1;
    scratch.reserve(ints);
    CUDA_CHECK(cudaEventSynchronize(scratch.copied));  // the previous copy has read the pinned buffer
    int* positions = scratch.host;
    int* bucket_start = positions + n;
    int* bucket_token = bucket_start + U + 1;
    int u = -1;
    for (int i = 0; i < n; i++) {
        if (i == 0 || scratch.order[i].first != scratch.order[i - 1].first) {
            u++;
            bucket_start[u] = i;
            bucket_token[u] = scratch.order[i].first;
        }
        positions[i] = scratch.order[i].second;
    }
    bucket_start[U] = n;
    CUDA_CHECK(cudaMemcpyAsync(scratch.index.get(), scratch.host, ints * sizeof(int), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaEventRecord(scratch.copied, st));

    const int* d_positions = scratch.index.get();
    const int* d_start = d_positions + n;
    const int* d_token = d_start + U + 1;
    const int block = 256;
    const dim3 grid_wte(U, (unsigned)ceil_div(C, block));
    launch_kernel(encoder_backward_wte_kernel, grid_wte, block, 0, st, dwte, dout, d_positions, d_start, d_token, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(encoder_backward_wpe_kernel, elementwise_grid((size_t)T * C), kElementwiseBlock, 0, st, dwpe, dout, B,
                  T, C);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
