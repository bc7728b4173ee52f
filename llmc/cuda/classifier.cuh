// Fused output classifier on the GPU: softmax statistics, cross-entropy, z-loss and (optionally)
// dlogits, in place, over the REAL vocabulary [0, V) of (N, Vp) floatX logits.
// CPU reference: llmc/cpu/classifier.h (classifier_forward + classifier_backward). Per row n:
//   lse = logsumexp(logits[n, 0:V]),  loss = lse - logits[n, target],  zloss = z_weight * lse^2
//   dlogits[n, v] = scale * (p_v - [v == target] + 2 * z_weight * lse * p_v),  p_v = exp(l_v - lse)
// for v < V, and 0 for the padding columns [V, Vp) (read with their vectors, never used for the
// statistics).
//
// One block per row, of classifier_threads(Vp) threads: enough whole warps (32 to 512) that each
// holds at most kClassifierRowVecs = 5 16-byte vectors of the row, so a row of up to 5 x 512 vectors
// is read from memory once into registers and written once (bf16: 20480 columns, the paper model's
// 10112 in 256 threads; fp32: 10240). A longer row (GPT-2's 50304: three segments of 512 x 5
// vectors in bf16, five in fp32) is walked in segments and read again for the dlogits (from L2
// while it holds the rows in flight: in bf16 2 blocks an SM of 100 KB rows are 26 MB; 1024 threads
// would leave one block an SM, its loads and its arithmetic in turn). Per segment all its loads are
// issued together (a thread past the row loads the row's last vector and ignores it); then online
// softmax a vector at a time: the running max M and the sum of exp(x - M) rescaled only when M
// moves, each term ex2.approx.ftz (MUFU.EX2) of (x - M) log2e; then merged across the block in a
// fixed order (deterministic). Columns at or past V count as -inf (exp 0) and their dlogits are
// exactly 0; only a vector holding V's boundary or the target takes the per-column path. Pass 2
// (only when dlogits_scale != 0) overwrites the row with dlogits = scale x ex2((x - lse) log2e) (+
// the one-hot term). Static (nvcc 13, sm_90): 64 registers in bf16 (20 hold the row), 54 in fp32,
// no spills; a sixth vector a thread spills in bf16 (so does masking into the bf16 registers, or a
// per-thread max before the sum: the compiler keeps every unpacked column live). At 256 threads 4
// blocks an SM, so several rows' loads are in flight while others compute. No fp32 (N, Vp) buffer.
//
// Requirements (else std::invalid_argument): 1 <= V <= Vp, Vp a multiple of 8 (16 / sizeof(floatX)
// elements per vector; the model's Vp is a multiple of 128), logits 16-byte aligned, targets
// non-null when dlogits_scale != 0. Targets are validated on the host by the data loader; a target
// outside [0, V) reaching this kernel gives loss = NaN (visible) and no one-hot term.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // ex2_approx_ftz

namespace llmc::cuda {

namespace detail {

constexpr int kClassifierMaxBlock = 512;  // the most threads per row
constexpr int kClassifierRowVecs = 5;     // 16-byte vectors a thread holds (a segment: blockDim x 5)
constexpr float kClassifierLog2e = 1.4426950408889634f;

// Merge running softmax state (m, s) with (m2, s2): s = s*e^(m-M) + s2*e^(m2-M), M = max(m, m2).
// Equal maxima (also both -inf: empty states) scale by exactly 1, never by exp(-inf - -inf) = NaN.
__device__ __host__ inline void softmax_merge(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    const float a = (m == M) ? 1.0f : expf(m - M);
    const float b = (m2 == M) ? 1.0f : expf(m2 - M);
    s = s * a + s2 * b;
    m = M;
}

// 16-byte vector of floatX.
constexpr int kVecX = 16 / sizeof(floatX);
struct alignas(16) VecX {
    floatX v[kVecX];
};

// Threads per row: whole warps, at most kClassifierRowVecs vectors each over the padded row, between
// 32 and kClassifierMaxBlock. A function of Vp alone, so the order of the block's reduction (and the
// bits) is the same on every GPU.
inline int classifier_threads(int Vp) {
    const int vecs = Vp / kVecX;
    const int per_vecs = (vecs + kClassifierRowVecs - 1) / kClassifierRowVecs;
    return std::min(kClassifierMaxBlock, std::max(32, (per_vecs + 31) / 32 * 32));
}

// The segment's vectors of this thread: x[i] = row[j0 + i * blockDim.x], the index clamped to the
// row's last vector (past the row: loaded, never used; an `if` around the load makes the compiler
// spill), all loads issued before any is used.
__device__ __forceinline__ void classifier_load(VecX (&x)[kClassifierRowVecs], const VecX* row, int j0, int nvec) {
#pragma unroll
    for (int i = 0; i < kClassifierRowVecs; i++) {
        const int j = j0 + i * (int)blockDim.x;
        x[i] = row[min(j, nvec - 1)];
    }
}

// logits (N, Vp) one block of classifier_threads(Vp) threads per row; lse, losses, zlosses, row_max
// (N) each nullable.
__global__ void __launch_bounds__(kClassifierMaxBlock, 2)
    classifier_kernel(floatX* logits, float* lse_out, float* losses, float* zlosses, float* row_max, const int* targets,
                      float z_weight, float dscale, int V, int Vp) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    const int n = blockIdx.x;
    VecX* row = reinterpret_cast<VecX*>(logits + (size_t)n * Vp);
    const int target = targets ? targets[n] : -1;
    const bool target_ok = target >= 0 && target < V;
    // read before any thread can overwrite the row (pass 2 starts after the block reduction)
    const float target_logit = (threadIdx.x == 0 && target_ok) ? to_float(logits[(size_t)n * Vp + target]) : 0.0f;

    // pass 1: online softmax a vector at a time: M = max(m, the vector's max), s rescaled to M (by
    // exactly 1 when the max did not move) plus the vector's exp(x - M) = ex2((x - M) log2e): an
    // FADD, an FMUL and ex2.approx.ftz a column, rounded as written (x - M is exact near the max at
    // any magnitude, where fmaf(x, log2e, -M log2e) carries M log2e's rounding, past 127 once
    // |M| > ~1.5e9; plain operators make the compiler spill in bf16). Columns at or past V count as
    // -inf (ex2(-inf) = 0); only a vector holding V's boundary checks them. (The columns are masked
    // as floats: writing -inf into the bf16 registers, or a per-thread max before the sum, makes the
    // compiler spill.)
    const int nvec = Vp / kVecX;
    const int seg = blockDim.x * kClassifierRowVecs;
    VecX x[kClassifierRowVecs];
    float m = -INFINITY, s = 0.0f;
    for (int j0 = threadIdx.x; j0 < nvec; j0 += seg) {
        classifier_load(x, row, j0, nvec);
#pragma unroll
        for (int i = 0; i < kClassifierRowVecs; i++) {
            const int j = j0 + i * (int)blockDim.x;
            if (j >= nvec) continue;
            float f[kVecX];
#pragma unroll
            for (int e = 0; e < kVecX; e++) f[e] = to_float(x[i].v[e]);
            if ((j + 1) * kVecX > V)
#pragma unroll
                for (int e = 0; e < kVecX; e++)
                    if (j * kVecX + e >= V) f[e] = -INFINITY;
            float vm = -INFINITY;
#pragma unroll
            for (int e = 0; e < kVecX; e++) vm = fmaxf(vm, f[e]);
            const float M = fmaxf(m, vm);
            const float Msub = (M == -INFINITY) ? 0.0f : M;  // all -inf so far: every term 0, NaN stays NaN
            float vs = (m == M) ? s : s * ex2_approx_ftz(__fmul_rn(__fsub_rn(m, Msub), kClassifierLog2e));
#pragma unroll
            for (int e = 0; e < kVecX; e++) vs += ex2_approx_ftz(__fmul_rn(__fsub_rn(f[e], Msub), kClassifierLog2e));
            s = vs;
            m = M;
        }
    }
    // block reduction in a fixed order: warps (xor butterfly), then warp 0 over the warp results
    constexpr int kMaxWarps = kClassifierMaxBlock / 32;
    const int warps = blockDim.x / 32;
    __shared__ float sm_m[kMaxWarps], sm_s[kMaxWarps];
    __shared__ float sh_lse;
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        softmax_merge(m, s, m2, s2);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sm_m[warp] = m;
        sm_s[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < warps ? sm_m[lane] : -INFINITY;
        s = lane < warps ? sm_s[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
            softmax_merge(m, s, m2, s2);
        }
        if (lane == 0) {
            const float lse = m + logf(s);
            sh_lse = lse;
            if (lse_out) lse_out[n] = lse;
            if (row_max) row_max[n] = m;
            if (targets) {
                if (losses) losses[n] = target_ok ? lse - target_logit : NAN;
                if (zlosses) zlosses[n] = z_weight * lse * lse;
            }
        }
    }
    if (dscale == 0.0f) return;
    __syncthreads();

    // pass 2: dlogits in place, every column of the row ([V, Vp) gets 0); a row of one segment is
    // still in x, else each segment is read again. A vector holding V's boundary or the target takes
    // the per-column path.
    const float lse = sh_lse;
    const float pscale = dscale * (1.0f + 2.0f * z_weight * lse);
    const bool in_registers = nvec <= seg;
    for (int j0 = threadIdx.x; j0 < nvec; j0 += seg) {
        if (!in_registers) classifier_load(x, row, j0, nvec);
#pragma unroll
        for (int i = 0; i < kClassifierRowVecs; i++) {
            const int j = j0 + i * blockDim.x;
            if (j >= nvec) continue;
            const int v0 = j * kVecX;
            float g[kVecX];
#pragma unroll
            for (int e = 0; e < kVecX; e++)
                g[e] = pscale * ex2_approx_ftz(__fmul_rn(__fsub_rn(to_float(x[i].v[e]), lse), kClassifierLog2e));
            if (v0 + kVecX > V || (target_ok && target >= v0 && target < v0 + kVecX))
#pragma unroll
                for (int e = 0; e < kVecX; e++) {
                    if (v0 + e >= V) g[e] = 0.0f;
                    else if (v0 + e == target) g[e] -= dscale;
                }
            VecX d;  // written whole (writing into x's bf16 halves in place makes the compiler spill)
#pragma unroll
            for (int e = 0; e < kVecX; e++) d.v[e] = from_float<floatX>(g[e]);
            row[j] = d;
        }
    }
}

constexpr int kSummaryBlock = 1024;

// The four numbers of one pass's summary (classifier_summary), in this order.
enum SummaryField { kSumCE = 0, kSumZ = 1, kSumLse = 2, kMaxRowMax = 3, kSummaryFields = 4 };

// out[0..3] = {sum losses, sum zlosses, sum lse, max row_max} over n rows, sums in double; one block.
// Thread k takes rows k, k + kSummaryBlock, ... in increasing order, the block combines the threads in
// a fixed tree order: the same bits every run. A NaN row_max makes the maximum NaN. losses, zlosses,
// row_max nullable (their fields stay 0 / -inf). check (nullable): check[0] += out[kSumCE] (a running
// sum over the passes since it was zeroed, for the device's finite-loss verdict before AdamW).
__global__ void __launch_bounds__(kSummaryBlock)
    classifier_summary_kernel(double* out, double* check, const float* losses, const float* zlosses, const float* lse,
                              const float* row_max, int n) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    double ce = 0.0, z = 0.0, l = 0.0;
    float mx = -INFINITY;
    // unrolled by 4: four rows' loads in flight at once; the additions stay in row order (same bits)
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += kSummaryBlock) {
        if (losses) ce += (double)losses[i];
        if (zlosses) z += (double)zlosses[i];
        l += (double)lse[i];
        if (row_max) {
            const float x = row_max[i];
            mx = (x > mx || x != x) && mx == mx ? x : mx;  // NaN sticks
        }
    }
    __shared__ double sm[3][kSummaryBlock];
    __shared__ float smx[kSummaryBlock];
    const int k = threadIdx.x;
    sm[0][k] = ce;
    sm[1][k] = z;
    sm[2][k] = l;
    smx[k] = mx;
    __syncthreads();
    for (int half = kSummaryBlock / 2; half > 0; half >>= 1) {
        if (k < half) {
            for (int f = 0; f < 3; f++) sm[f][k] += sm[f][k + half];
            const float a = smx[k], b = smx[k + half];
            smx[k] = (b > a || b != b) && a == a ? b : a;
        }
        __syncthreads();
    }
    if (k == 0) {
        for (int f = 0; f < 3; f++) out[f] = sm[f][0];
        out[kMaxRowMax] = (double)smx[0];
        if (check) check[0] += sm[0][0];
    }
}

}  // namespace detail

// logits (N, Vp) floatX; targets (N) or nullptr; lse (N) written; losses, zlosses (N) written when
// targets != nullptr (each nullable); row_max (N) nullable: max real-vocabulary logit per row.
// dlogits_scale != 0: also overwrites logits with dlogits (see the top of this file); needs targets.
inline void classifier_forward_backward(floatX* logits, float* lse, float* losses, float* zlosses, float* row_max,
                                        const int* targets, float z_weight, float dlogits_scale, int N, int V, int Vp,
                                        LaunchStream st) {
    if (N < 0 || V < 1 || V > Vp || Vp % detail::kVecX != 0)
        throw std::invalid_argument("classifier: unsupported shape N=" + std::to_string(N) + " V=" + std::to_string(V) +
                                    " Vp=" + std::to_string(Vp) +
                                    "; need 1 <= V <= Vp and Vp a "
                                    "multiple of " +
                                    std::to_string(detail::kVecX));
    if (reinterpret_cast<uintptr_t>(logits) % 16 != 0)
        throw std::invalid_argument("classifier: logits must be 16-byte aligned");
    if (dlogits_scale != 0.0f && !targets)
        throw std::invalid_argument("classifier: dlogits (dlogits_scale != 0) need targets");
    if (N == 0) return;
    launch_kernel(detail::classifier_kernel, N, detail::classifier_threads(Vp), 0, st, logits, lse, losses, zlosses,
                  row_max, targets, z_weight, dlogits_scale, V, Vp);
    CUDA_CHECK_LAUNCH();
}

// out (4 doubles, device) = the summary of one classifier pass over N rows (detail::SummaryField):
// {sum of losses, sum of zlosses, sum of lse, max of row_max}; losses, zlosses, row_max nullable.
// check (nullable, one device double) accumulates the sum of losses. The host reads out instead of
// the (N) vectors: a fixed-order double reduction, deterministic.
inline void classifier_summary(double* out, double* check, const float* losses, const float* zlosses, const float* lse,
                               const float* row_max, int N, LaunchStream st) {
    launch_kernel(detail::classifier_summary_kernel, 1, detail::kSummaryBlock, 0, st, out, check, losses, zlosses, lse,
                  row_max, N);
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
