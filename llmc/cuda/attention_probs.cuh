// The attention probabilities of one head of one sequence as a T x T matrix, on the device
// (--eval-only --dump-attention, docs/training.md): the CUDA counterpart of
// llmc/cpu/attention_probs.h, with its definition. The training kernels never hold T x T; this
// recomputes one head's rows after a forward from what the forward stored: the attention input
// (qkv, after QK-norm when it is on; floatX) and each row's log-sum-exp lse_i (natural log) of the
// capped scores:
//   s_ij = q_i . k_j / sqrt(hd)   (fp32 sum of the floatX products, d = 0 .. hd-1 in order)
//   s'_ij = c * tanh(s_ij / c) when the soft-cap c > 0, else s_ij; tanh as the forward computed it
//                                 (tanh.approx for the FA2-class kernels, tanhf for the others:
//                                 attention_caps_with_tanh_approx, llmc/cuda/attention_ls.cuh)
//   p_ij = exp(s'_ij - lse_i)     for visible keys (attn_visible: j <= i, and j > i - P for a local
//                                 head, h < NH - G); 0 for masked keys.
// The forward summed its scores with tensor-core MMAs (another order), so p_ij agrees with the
// weight it gave v_j to fp32 rounding of the score, and a row sums to 1 within that (with soft-cap
// and tanh.approx, within what the approximation does to that rounding: the PTX ISA bounds its
// error by 2^-11 relative, not its smoothness).
//
// Launch: grid (T) blocks of kProbsBlock threads; block i writes row i, its threads striding over
// the keys j in [0, T). One launch per dumped head; not on the training path.
#pragma once
#include <cstddef>

#include "llmc/core/attention_tiles.h"
#include "llmc/cuda/attention_ls_common.cuh"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"

namespace llmc::cuda {

namespace detail {

constexpr int kProbsBlock = 128;

// probs: (T, T) fp32 row-major; qkv: (B, T, 3C) floatX; lse: (B, NH, T). TANH_APPROX: the soft-cap's
// tanh by tanh.approx (else tanhf).
template <bool TANH_APPROX>
__global__ void __launch_bounds__(kProbsBlock)
    attention_probs_kernel(float* probs, const floatX* qkv, const float* lse, int b, int h, int T, int C, int NH,
                           bool local, int P, float softcap) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int i = blockIdx.x;
    const int hd = C / NH, C3 = 3 * C;
    const floatX* q = qkv + ((size_t)b * T + i) * C3 + (size_t)h * hd;  // (hd)
    const float row_lse = lse[((size_t)b * NH + h) * T + i];
    const float scale = attn_scale(hd);
    for (int j = threadIdx.x; j < T; j += kProbsBlock) {
        float p = 0.0f;
        if (attn_visible(i, j, local, P)) {
            const floatX* k = qkv + ((size_t)b * T + j) * C3 + C + (size_t)h * hd;  // (hd)
            float s = 0.0f;
            for (int d = 0; d < hd; d++) s += to_float(q[d]) * to_float(k[d]);
            float t;
            // tanh.approx's argument rounded as the forward's: raw score times (scale / c)
            const float capped = TANH_APPROX && softcap > 0.0f ? softcap * tanh_approx(s * (scale / softcap))
                                                               : attn_softcap(s * scale, softcap, t);
            p = expf(capped - row_lse);
        }
        probs[(size_t)i * T + j] = p;
    }
}

}  // namespace detail

// probs_dev: (T, T) fp32 on the device, fully written. qkv: (B, T, 3C) the layer's attention input;
// lse: (B, NH, T) its forward's log-sum-exp; b in [0, B), h in [0, NH) (the caller checks);
// tanh_approx: whether that forward capped with tanh.approx. Asynchronous on st.
inline void attention_probs(float* probs_dev, const floatX* qkv, const float* lse, int b, int h, int T, int C, int NH,
                            int G, int P, float softcap, bool tanh_approx, LaunchStream st) {
    auto kernel = tanh_approx ? detail::attention_probs_kernel<true> : detail::attention_probs_kernel<false>;
    launch_kernel(kernel, dim3((unsigned)T), detail::kProbsBlock, 0, st, probs_dev, qkv, lse, b, h, T, C, NH,
                  h < NH - G, P, softcap);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
