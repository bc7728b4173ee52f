// Token + position embedding on the GPU (GPT-2's first layer). CPU reference: llmc/cpu/encoder.h.
//   forward:  out[b, t, :] = wte[inp[b, t], :] + wpe[t, :]
//   backward: dwte[tok, :] += sum over positions (b, t) with inp[b, t] == tok of dout[b, t, :]
//             dwpe[t, :]   += sum over b of dout[b, t, :]
// Deterministic backward without floating-point atomics and without the host: one block groups the positions by
// token on the device (encoder_group_kernel: a counting sort, positions of a token in increasing
// (b, t) order), then one thread per (token, channel) sums its positions in that order; one thread
// per (t, channel) sums b in order.
// Token ids must be valid rows of wte (the data loader checks them against the vocabulary).
#pragma once
#include <cstddef>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // atom_add_global_u32
#include "llmc/cuda/residual.cuh"

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

// ---- grouping positions by token, on the device (one block; integer atomics for the counts) ---------
// sorted_pos (n) = the positions 0..n-1 ordered by (token, position): the positions of a token form
// one run, increasing. A counting sort over the vocabulary rows:
//   1. count[tok] = occurrences of tok (integer atomics: the counts do not depend on their order);
//   2. count = exclusive prefix sum (the start of tok's run);
//   3. each position goes to count[tok] + (earlier positions of tok), and count[tok] advances, so
//      that afterwards count[tok] is the end of tok's run (encoder_backward_wte_kernel reads it).
// Step 3 walks the positions in chunks of kGroupBlock in increasing order; inside a chunk the
// block sorts the keys (token, index in chunk) - all distinct, so the order is unique - with a bitonic
// network, and a token's occurrences in the chunk are one run of that sorted order. The run's last
// thread alone updates count[tok], after every thread of the run has read it. The result is a pure
// function of inp: bit-identical on every run and device.
constexpr int kGroupBlock = 512;  // power of two (bitonic network)

// The chunk [base, base + kGroupBlock) of inp sorted by (token, index) into keys (shared); each thread
// gets the element at sorted index threadIdx.x: its token (-1 past n), its position, and the length of
// the run of its token up to and including it (rank + 1), and whether it is the run's last element.
struct ChunkElement {
    int token, position, rank;
    bool last;
};
__device__ inline ChunkElement sort_chunk(const int* inp, int n, int base, unsigned long long* keys, int* run_start) {
    const int k = threadIdx.x;
    const int i = base + k;
    keys[k] = i < n ? ((unsigned long long)(unsigned)inp[i] << 32) | (unsigned)k : ~0ull;
    __syncthreads();
    for (int size = 2; size <= kGroupBlock; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const int partner = k ^ stride;
            if (partner > k) {
                const bool ascending = (k & size) == 0;
                const unsigned long long a = keys[k], b = keys[partner];
                if ((a > b) == ascending) {
                    keys[k] = b;
                    keys[partner] = a;
                }
            }
            __syncthreads();
        }
    const unsigned long long key = keys[k];
    const bool valid = key != ~0ull;
    const unsigned tok = (unsigned)(key >> 32);
    const bool head = k == 0 || (unsigned)(keys[k - 1] >> 32) != tok;
    // run_start[k] = the sorted index where k's run begins: an inclusive max-scan of (head ? k : 0)
    run_start[k] = head ? k : 0;
    __syncthreads();
    for (int d = 1; d < kGroupBlock; d <<= 1) {
        const int other = k >= d ? run_start[k - d] : 0;
        __syncthreads();
        if (other > run_start[k]) run_start[k] = other;
        __syncthreads();
    }
    ChunkElement e;
    e.token = valid ? (int)tok : -1;
    e.position = base + (int)(key & 0xFFFFFFFFu);
    e.rank = k - run_start[k];
    e.last = valid && (k + 1 == kGroupBlock || (unsigned)(keys[k + 1] >> 32) != tok);
    __syncthreads();  // keys and run_start are rewritten by the next chunk
    return e;
}

// sorted_pos (n) written; count (vocab_rows) int scratch; inp (n) token ids in [0, vocab_rows). One block of kGroupBlock.
__global__ void __launch_bounds__(kGroupBlock)
    encoder_group_kernel(int* sorted_pos, int* count, const int* inp, int n, int vocab_rows) {
    __shared__ unsigned long long keys[kGroupBlock];
    __shared__ int run_start[kGroupBlock];
    __shared__ long long thread_sum[kGroupBlock];
    const int k = threadIdx.x;
    for (int r = k; r < vocab_rows; r += kGroupBlock) count[r] = 0;
    __syncthreads();
    // 1. occurrences per token (the barrier orders the atomics before step 2's reads)
    for (int i = k; i < n; i += kGroupBlock) atom_add_global_u32(reinterpret_cast<uint32_t*>(count + inp[i]), 1u);
    __syncthreads();
    // 2. exclusive prefix sum over count: thread k owns rows [k*per, (k+1)*per)
    const int per = (vocab_rows + kGroupBlock - 1) / kGroupBlock;
    const int lo = k * per < vocab_rows ? k * per : vocab_rows, hi = lo + per < vocab_rows ? lo + per : vocab_rows;
    long long s = 0;
    for (int r = lo; r < hi; r++) s += count[r];
    thread_sum[k] = s;
    __syncthreads();
    if (k == 0) {
        long long acc = 0;
        for (int j = 0; j < kGroupBlock; j++) {
            const long long x = thread_sum[j];
            thread_sum[j] = acc;
            acc += x;
        }
    }
    __syncthreads();
    s = thread_sum[k];
    for (int r = lo; r < hi; r++) {
        const int c = count[r];
        count[r] = (int)s;
        s += c;
    }
    __syncthreads();
    // 3. scatter: a position lands at its token's cursor + its rank among the chunk's occurrences
    for (int base = 0; base < n; base += kGroupBlock) {
        const ChunkElement e = sort_chunk(inp, n, base, keys, run_start);
        if (e.token >= 0) sorted_pos[count[e.token] + e.rank] = e.position;
        __syncthreads();  // every thread of a run has read count[token]
        if (e.last) count[e.token] += e.rank + 1;
        __syncthreads();
    }
}

// dwte (Vp, C): block (i, channel chunk), thread = channel. Block i works only when sorted index i starts
// a token's run (sorted_pos and run_end = the group kernel's count); it sums that run's positions in
// increasing order. The run's end is known before the loop, so its loads do not wait on a test of
// the previous position's token (a frequent token's run is hundreds of positions long).
__global__ void encoder_backward_wte_kernel(float* dwte, const floatX* dout, const int* sorted_pos, const int* inp,
                                            const int* run_end, int C) {
    const int i = blockIdx.x;
    const int tok = inp[sorted_pos[i]];
    if (i > 0 && inp[sorted_pos[i - 1]] == tok) return;  // not the first position of its token
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int end = run_end[tok];
    float sum = 0.0f;
#pragma unroll 8
    for (int j = i; j < end; j++) sum += to_float(dout[(size_t)sorted_pos[j] * C + c]);
    dwte[(size_t)tok * C + c] += sum;
}

// Device scratch of encoder_backward, grown on demand: sorted_pos (B*T) | count (Vp).
struct EncoderBackwardScratch {
    DeviceBuffer<int> index;
    void reserve(size_t ints) {
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

// dwte (Vp,C), dwpe (maxT,C) fp32 ADDED from dout (B,T,C); inp (B,T) device token ids in [0, Vp)
// (the caller checks them: llmc/core/batch_check.h). Queues three kernels; never blocks the host.
// Resizing the scratch (the first call, or a larger B*T or Vp) synchronizes the device (cudaFree).
inline void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* inp, int B, int T, int C, int Vp,
                             EncoderBackwardScratch& scratch, cudaStream_t st) {
    if (B <= 0 || T <= 0 || C <= 0 || Vp <= 0) return;
    const int n = B * T;
    scratch.reserve((size_t)n + (size_t)Vp);
    int* sorted_pos = scratch.index.get();
    int* count = sorted_pos + n;
    launch_kernel(encoder_group_kernel, 1, kGroupBlock, 0, st, sorted_pos, count, inp, n, Vp);
    CUDA_CHECK_LAUNCH();
    const int block = 256;
    const dim3 grid_wte((unsigned)n, (unsigned)ceil_div(C, block));
    launch_kernel(encoder_backward_wte_kernel, grid_wte, block, 0, st, dwte, dout, sorted_pos, inp, count, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(encoder_backward_wpe_kernel, elementwise_grid((size_t)T * C), kElementwiseBlock, 0, st, dwpe, dout, B,
                  T, C);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
