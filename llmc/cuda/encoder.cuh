// Token + position embedding on the GPU (GPT-2's first layer). CPU reference: llmc/cpu/encoder.h.
//   forward:  out[b, t, :] = wte[inp[b, t], :] + wpe[t, :]
//   backward: dwte[tok, :] += sum over positions (b, t) with inp[b, t] == tok of dout[b, t, :]
//             dwpe[t, :]   += sum over b of dout[b, t, :]
// Deterministic backward without floating-point atomics: the positions are grouped by token on the
// host (llmc/core/token_groups.h: a counting sort, one run per distinct token, its positions in
// increasing (b, t) order, runs longest first) and uploaded with the batch; one thread per (run,
// channel) sums its run's positions in that order; one thread per (t, channel) sums b in order.
// Token ids must be valid rows of wte (the data loader checks them against the vocabulary).
#pragma once
#include <cstddef>

#include "llmc/core/token_groups.h"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin
#include "llmc/cuda/residual.cuh"

namespace llmc::cuda {

// out (B*T, C): item = (bt, j) with channels [j*V, j*V + V). V = kPack needs C % kPack == 0 and aligned pointers.
// Position t of a sequence reads wpe row t0 + t: t0 = *first_pos (device), or 0 when first_pos is nullptr.
template <int V>
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                       const int* first_pos, int B, int T, int C) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int t0 = first_pos ? *first_pos : 0;
    const int per_row = C / V;
    const size_t n_items = (size_t)B * T * per_row;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t item = (size_t)blockIdx.x * blockDim.x + threadIdx.x; item < n_items; item += stride) {
        const size_t bt = item / per_row;
        const int c = (int)(item % per_row) * V;
        const int t = t0 + (int)(bt % T);
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
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const size_t n_items = (size_t)T * C;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_items; i += stride) {
        float sum = 0.0f;
        for (int b = 0; b < B; b++) sum += to_float(dout[(size_t)b * T * C + i]);
        dwpe[i] += sum;
    }
}

// dwte (Vp, C): block (r, channel chunk), thread = channel; the grid's x is G = token_groups_runs(n, Vp).
// groups: llmc/core/token_groups.h's layout for the n positions (run_begin (G + 1), then sorted_pos
// (n)); block r sums run r's positions in increasing order (an empty run: nothing). The run's end is known before the loop, so its loads do
// not wait on a test of the previous position's token (a frequent token's run is hundreds of
// positions long).
__global__ void encoder_backward_wte_kernel(float* dwte, const floatX* dout, const int* groups, const int* inp, int C) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int r = blockIdx.x;
    const int G = gridDim.x;
    const int begin = groups[r], end = groups[r + 1];
    if (begin == end) return;  // past the batch's distinct tokens
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int* sorted_pos = groups + G + 1;
    const int tok = inp[sorted_pos[begin]];
    float sum = 0.0f;
#pragma unroll 8
    for (int j = begin; j < end; j++) sum += to_float(dout[(size_t)sorted_pos[j] * C + c]);
    dwte[(size_t)tok * C + c] += sum;
}

// ---- host API -------------------------------------------------------------------------------------
// out (B,T,C) OVERWRITTEN; inp (B,T) device token ids; wte (Vp,C); wpe (maxT,C). The positions are
// first_pos[0] + 0..T-1 (a decode step's: its position in device memory, which the caller keeps
// below maxT - T + 1), or 0..T-1 with first_pos nullptr (T <= maxT).
inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            LaunchStream st, const int* first_pos = nullptr) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    const bool vec = C % kPack == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
    const size_t items = (size_t)B * T * (vec ? C / kPack : C);
    if (vec)
        launch_kernel(encoder_forward_kernel<kPack>, elementwise_grid(items), kElementwiseBlock, 0, st, out, inp, wte,
                      wpe, first_pos, B, T, C);
    else
        launch_kernel(encoder_forward_kernel<1>, elementwise_grid(items), kElementwiseBlock, 0, st, out, inp, wte, wpe,
                      first_pos, B, T, C);
    CUDA_CHECK_LAUNCH();
}

// dwte (Vp,C), dwpe (maxT,C) fp32 ADDED from dout (B,T,C); inp (B,T) device token ids in [0, Vp);
// groups: device copy of group_tokens(inp, B*T, Vp) (llmc/core/token_groups.h; token_groups_ints(B*T, Vp)
// ints), which the caller computes on the host and uploads with the batch. Queues two kernels; never
// blocks the host.
inline void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* inp, const int* groups, int B,
                             int T, int C, int Vp, LaunchStream st) {
    if (B <= 0 || T <= 0 || C <= 0 || Vp <= 0) return;
    const int n = B * T;
    const int block = 256;
    const dim3 grid_wte((unsigned)token_groups_runs(n, Vp), (unsigned)ceil_div(C, block));
    launch_kernel(encoder_backward_wte_kernel, grid_wte, block, 0, st, dwte, dout, groups, inp, C);
    CUDA_CHECK_LAUNCH();
    launch_kernel(encoder_backward_wpe_kernel, elementwise_grid((size_t)T * C), kElementwiseBlock, 0, st, dwpe, dout, B,
                  T, C);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
