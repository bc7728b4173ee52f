// AdamW on the GPU with fp32 master weights: exactly llmc/core/adamw.h's formula,
//   g = grads * grad_multiplier
//   m = beta1 m + (1 - beta1) g;       v = beta2 v + (1 - beta2) g^2
//   mhat = m / (1 - beta1^t);          vhat = v / (1 - beta2^t)
//   master -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * master)
// t is the 1-based step. The bias corrections are computed on the host with the CPU's expression,
// and the kernel uses explicitly rounded operations (__fmul_rn, __fadd_rn, ...: no FMA contraction)
// with IEEE division and sqrt, so it reproduces an fp32 CPU build that does not contract either
// (g++ for x86-64 without -mfma); elsewhere the two differ by a few ulp.
//
// The working copy params (floatX) is written from the new master:
//   BF16 build: stochastic rounding. bf16 is the top 16 bits of fp32; we add a random 16-bit
//   integer r to the bit pattern and truncate to the top 16 bits, so the magnitude rounds up with
//   probability (low 16 bits of x) / 2^16 and down otherwise: E[round(x)] = x (unbiased).
//   r = low 16 bits of sr_hash(seed, i), a counter-based hash (Chris Wellons' "lowbias32" integer
//   mixer applied to the seed, the high and the low 32 bits of the element index i), so the
//   result is a pure function of (x, seed, i): deterministic for a given seed and independent of
//   the launch shape. Non-finite x is converted with round-to-nearest. The caller passes a
//   different seed per step and per tensor (e.g. a hash of both).
//   FP32 build: an exact copy (params may alias master).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin

namespace llmc::cuda {

namespace detail {

// "lowbias32" integer hash (bijective 32-bit mixer).
__device__ __host__ inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
__device__ __host__ inline uint32_t sr_hash(uint32_t seed, size_t i) {
    return mix32((uint32_t)i ^ mix32(seed ^ mix32((uint32_t)((uint64_t)i >> 32) + 0x9e3779b9u)));
}

// fp32 -> bf16 with stochastic rounding, random bits from sr_hash(seed, i). Host and device.
__device__ __host__ inline __nv_bfloat16 stochastic_round_bf16(float x, uint32_t seed, size_t i) {
    if (!(x - x == 0.0f)) return __float2bfloat16_rn(x);  // inf or NaN: round to nearest
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    bits += sr_hash(seed, i) & 0xFFFFu;  // carries into the kept bits with probability low16 / 2^16
    __nv_bfloat16_raw r;
    r.x = (unsigned short)(bits >> 16);
    return __nv_bfloat16(r);
}

inline __device__ void store_param(float* p, float x, uint32_t, size_t i) { p[i] = x; }
inline __device__ void store_param(__nv_bfloat16* p, float x, uint32_t seed, size_t i) {
    p[i] = stochastic_round_bf16(x, seed, i);
}

// One element of AdamW in registers, every operation rounded as written (no contraction): m, v and
// p (the master value) updated from the scaled gradient g.
__device__ inline void adamw_math(float g, float& m, float& v, float& p, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float bc1, float bc2) {
    m = __fadd_rn(__fmul_rn(beta1, m), __fmul_rn(1.0f - beta1, g));
    v = __fadd_rn(__fmul_rn(beta2, v), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
    const float mhat = __fdiv_rn(m, bc1);
    const float vhat = __fdiv_rn(v, bc2);
    const float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)), __fmul_rn(weight_decay, p));
    p = __fsub_rn(p, __fmul_rn(lr, step));
}

// adamw_math on element i of the buffers; returns the new master value.
__device__ inline float adamw_element(float* master, float* m, float* v, size_t i, float g, float lr, float beta1,
                                      float beta2, float eps, float weight_decay, float bc1, float bc2) {
    float mi = m[i], vi = v[i], p = master[i];
    adamw_math(g, mi, vi, p, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    return p;
}

__global__ void adamw_kernel(floatX* params, float* master, const float* grads, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
                             float grad_multiplier, uint32_t seed) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = __fmul_rn(grads[i], grad_multiplier);
        const float np = adamw_element(master, m, v, i, g, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        if (params) store_param(params, np, seed, i);
    }
}

__global__ void copy_master_kernel(floatX* params, const float* master, size_t n) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        params[i] = from_float<floatX>(master[i]);  // round to nearest even
}

// Blocks of `block` threads for the element-wise grid-stride kernels over n elements: at least 4
// elements a thread (fewer threads to start; each thread's loads stay coalesced across its warp),
// at most 8192 blocks (reached at 8M elements: every model worth a GPU strides further). Each element
// is computed alone, so the grid changes no result.
inline unsigned adamw_grid(size_t n, int block) {
    const long blocks = ceil_div((long)n, 4L * block);
    return (unsigned)(blocks < 8192 ? (blocks > 0 ? blocks : 1) : 8192);
}

// ---- one launch over every tensor of a flat buffer (adamw_update_all) ----
constexpr int kMaxSegments = 32;

// Tensor j of the flat buffer holds elements [end[j-1], end[j]) (end[-1] = 0) and decays with
// weight_decay[j]; count <= kMaxSegments tensors, ends non-decreasing (empty tensors allowed).
struct AdamWSegments {
    size_t end[kMaxSegments];
    float weight_decay[kMaxSegments];
    int count = 0;
};

// Step t's learning rate and bias corrections 1 - beta^t, computed as the CPU computes them (bit for bit).
struct AdamWStepScalars {
    float lr, bc1, bc2;
};
inline AdamWStepScalars adamw_step_scalars(float lr, float beta1, float beta2, int t) {
    return {lr, 1.0f - std::pow(beta1, (float)t), 1.0f - std::pow(beta2, (float)t)};
}

// Where the gradient multiplier comes from. norm_sq == nullptr: `multiplier`, set by the host.
// Otherwise it is decided on the device, exactly as the training loop decides it on the host
// (llmc/train/train_step.h): norm = (float)sqrt((double)*norm_sq); the update is skipped entirely
// (nothing written) when norm or *loss_check (nullable) is not finite; else the multiplier is
// grad_clip / norm when grad_clip > 0 and norm > grad_clip, and 1 otherwise. applied (nullable, with
// norm_sq) gets the verdict: 1 applied, 0 skipped. step (nullable): the step's AdamWStepScalars read
// on the device instead of the lr and t arguments (a queued step copies them there from pinned
// memory inside the step, so a replayed CUDA graph updates with each step's values).
struct AdamWGate {
    const float* norm_sq = nullptr;
    const double* loss_check = nullptr;
    float grad_clip = 0.0f;
    float multiplier = 1.0f;
    int* applied = nullptr;
    const AdamWStepScalars* step = nullptr;
};

__device__ inline bool finite_float(float x) { return x - x == 0.0f; }
__device__ inline bool finite_double(double x) { return x - x == 0.0; }

// Four consecutive fp32 elements, one 16-byte access; the working copy's four in one access of
// 4 * sizeof(floatX) bytes (8 in the BF16 build, 16 in the FP32 build).
constexpr int kAdamWVec = 4;
struct alignas(16) AdamWVec {
    float v[kAdamWVec];
};
struct alignas(kAdamWVec * sizeof(floatX)) ParamVec {
    floatX v[kAdamWVec];
};

// adamw_kernel's update for every element of the flat buffer, the weight decay by tensor; params
// (nullable) = round-to-nearest of the new master. The first n_vecs * kAdamWVec elements go four
// at a time (n_vecs = 0 when a pointer is not aligned to its vector: the host checks), the rest one
// at a time; each element's operations are the same either way, so the grouping changes no bit.
// Blocks of 256 threads, at least 6 an SM: at most 40 registers (46 unbounded; a bound of 8 spills).
constexpr int kAdamWAllBlock = 256;
__global__ void __launch_bounds__(kAdamWAllBlock, 6)
    adamw_all_kernel(floatX* params, float* master, const float* grads, float* m, float* v, AdamWSegments seg,
                     size_t n_vecs, float lr, float beta1, float beta2, float eps, float bc1, float bc2,
                     AdamWGate gate) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    if (gate.step) {
        lr = gate.step->lr;
        bc1 = gate.step->bc1;
        bc2 = gate.step->bc2;
    }
    float multiplier = gate.multiplier;
    if (gate.norm_sq) {
        const float norm = (float)sqrt((double)*gate.norm_sq);
        const bool apply = finite_float(norm) && (!gate.loss_check || finite_double(*gate.loss_check));
        if (gate.applied && blockIdx.x == 0 && threadIdx.x == 0) *gate.applied = apply ? 1 : 0;
        if (!apply) return;
        multiplier = gate.grad_clip > 0.0f && norm > gate.grad_clip ? __fdiv_rn(gate.grad_clip, norm) : 1.0f;
    }
    const size_t n = seg.count > 0 ? seg.end[seg.count - 1] : 0;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    int j = 0;  // the tensor of the element in hand; elements only grow, so j only moves forward
    for (size_t q = tid; q < n_vecs; q += stride) {
        const size_t i0 = q * kAdamWVec;
        const AdamWVec g = reinterpret_cast<const AdamWVec*>(grads)[q];
        AdamWVec mv = reinterpret_cast<const AdamWVec*>(m)[q];
        AdamWVec vv = reinterpret_cast<const AdamWVec*>(v)[q];
        AdamWVec pv = reinterpret_cast<const AdamWVec*>(master)[q];
#pragma unroll
        for (int k = 0; k < kAdamWVec; k++) {
            while (i0 + k >= seg.end[j]) j++;
            adamw_math(__fmul_rn(g.v[k], multiplier), mv.v[k], vv.v[k], pv.v[k], lr, beta1, beta2, eps,
                       seg.weight_decay[j], bc1, bc2);
        }
        reinterpret_cast<AdamWVec*>(m)[q] = mv;
        reinterpret_cast<AdamWVec*>(v)[q] = vv;
        reinterpret_cast<AdamWVec*>(master)[q] = pv;
        if (params) {
            ParamVec out;
#pragma unroll
            for (int k = 0; k < kAdamWVec; k++) out.v[k] = from_float<floatX>(pv.v[k]);  // round to nearest even
            reinterpret_cast<ParamVec*>(params)[q] = out;
        }
    }
    for (size_t i = n_vecs * kAdamWVec + tid; i < n; i += stride) {
        while (i >= seg.end[j]) j++;
        const float g = __fmul_rn(grads[i], multiplier);
        const float np = adamw_element(master, m, v, i, g, lr, beta1, beta2, eps, seg.weight_decay[j], bc1, bc2);
        if (params) params[i] = from_float<floatX>(np);  // round to nearest even, as copy_master_kernel
    }
}

// Whether adamw_all_kernel may take the buffers four elements at a time: every fp32 buffer 16-byte
// aligned, the working copy (nullable) aligned to its four elements.
inline bool adamw_vec_aligned(const floatX* params, const float* master, const float* grads, const float* m,
                              const float* v) {
    const auto at = [](const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; };
    return at(master, 16) && at(grads, 16) && at(m, 16) && at(v, 16) &&
           (!params || at(params, kAdamWVec * sizeof(floatX)));
}

}  // namespace detail

// master, m, v (n) fp32 updated in place; grads (n) fp32 read (times grad_multiplier);
// params (n) floatX written from the new master (nullable). FP32 build: params may alias master.
inline void adamw_update(floatX* params, float* master, const float* grads, float* m, float* v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int t, float grad_multiplier,
                         uint32_t seed, LaunchStream st) {
    if (n == 0) return;
    const detail::AdamWStepScalars sc = detail::adamw_step_scalars(lr, beta1, beta2, t);  // the CPU's, bit for bit
    constexpr int block = 256;
    launch_kernel(detail::adamw_kernel, detail::adamw_grid(n, block), block, 0, st, params, master, grads, m, v, n, lr,
                  beta1, beta2, eps, weight_decay, sc.bc1, sc.bc2, grad_multiplier, seed);
    CUDA_CHECK_LAUNCH();
}

// params (n) floatX = master (n) fp32, rounded to nearest (deterministic); for set_params.
inline void copy_master_to_params(floatX* params, const float* master, size_t n, LaunchStream st) {
    if (n == 0) return;
    constexpr int block = 256;
    launch_kernel(detail::copy_master_kernel, detail::adamw_grid(n, block), block, 0, st, params, master, n);
    CUDA_CHECK_LAUNCH();
}

// One AdamW step over every tensor of a flat buffer in one launch: master, m, v (n = seg.end[last])
// fp32 in place, grads read, params (nullable; FP32 build: may alias master) = round-to-nearest of
// the new master. Per element the same operations as adamw_update (bit-identical to it with that
// tensor's weight decay, then copy_master_to_params), with the gradient multiplier from gate (and,
// when gate.step is set, lr and the bias corrections too: t and lr are then not used).
inline void adamw_update_all(floatX* params, float* master, const float* grads, float* m, float* v,
                             const detail::AdamWSegments& seg, float lr, float beta1, float beta2, float eps, int t,
                             const detail::AdamWGate& gate, LaunchStream st) {
    if (seg.count < 1 || seg.count > detail::kMaxSegments)
        throw std::invalid_argument("adamw_update_all: " + std::to_string(seg.count) + " tensors; need 1 to " +
                                    std::to_string(detail::kMaxSegments));
    const size_t n = seg.end[seg.count - 1];
    if (n == 0) return;
    const detail::AdamWStepScalars sc = detail::adamw_step_scalars(lr, beta1, beta2, t);
    const size_t n_vecs = detail::adamw_vec_aligned(params, master, grads, m, v) ? n / detail::kAdamWVec : 0;
    constexpr int block = detail::kAdamWAllBlock;
    launch_kernel(detail::adamw_all_kernel, detail::adamw_grid(n, block), block, 0, st, params, master, grads, m, v,
                  seg, n_vecs, sc.lr, beta1, beta2, eps, sc.bc1, sc.bc2, gate);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
