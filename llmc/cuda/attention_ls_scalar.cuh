// LS-attention, scalar kernel family: fp32 FMA math on fp32 copies of 32 x 32 tiles in shared
// memory. The FP32 build's forward and backward (tight comparison with the CPU). Launched by
// llmc/cuda/attention_ls.cuh; grid layout, tile sizes and the statistics helpers in
// llmc/cuda/attention_ls_common.cuh; algorithm in docs/attention_kernel.md.
#pragma once
#include "llmc/cuda/attention_ls_common.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin

namespace llmc::cuda {

// Rows [r0, r0+R) of one part of a (rows, stride) tensor (HD channels at base) -> fp32 smem
// dst (R, ld); rows at or past T are zero-filled.
template <int HD>
__device__ inline void attn_scalar_load_rows(float* dst, int ld, const floatX* base, int r0, int R, int T, int stride) {
    for (int idx = threadIdx.x; idx < R * HD; idx += blockDim.x) {
        const int r = idx / HD, d = idx % HD, i = r0 + r;
        dst[r * ld + d] = i < T ? to_float(base[(size_t)i * stride + d]) : 0.0f;
    }
}

// Forward: grid (B*NH, query tiles), 128 threads. Each warp owns 8 query rows; within a key tile
// lane l handles key k0+l (score, probability), and for the output lane l owns dims l, l+32, ...
// (HD/32 of them). Dynamic smem: Q (32, HD), K (32, HD+1) padded, V (32, HD), fp32.
// STATS: the block's basic statistics partial (kAttnStatsBasic floats, llmc/cuda/attention_ls_common.cuh)
// in stats_part; NEAR (implies STATS): the near/far ones too (kAttnStatsNear floats), split at
// distance near_n >= 1.
template <int HD>
constexpr size_t attn_fwd_scalar_smem() {
    return sizeof(float) * (kAttnScalarBQ * HD + kAttnScalarBK * (HD + 1) + kAttnScalarBK * HD);
}

template <int HD, bool STATS, bool NEAR>
__global__ void __launch_bounds__(kAttnScalarThreads)
    attn_fwd_scalar_kernel(floatX* out, float* lse, const floatX* qkv, int T, int C, int NH, int G, int P,
                           float softcap, float* stats_part, int near_n) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    static_assert(STATS || !NEAR, "the near/far statistics extend the basic ones");
    constexpr int NF = NEAR ? kAttnStatsNear : kAttnStatsBasic;
    constexpr int BQ = kAttnScalarBQ, BK = kAttnScalarBK, RPW = BQ / 4, DPL = HD / 32, LDK = HD + 1;
    LLMC_DYNAMIC_SHARED(float, smem);
    float* sQ = smem;           // (BQ, HD)
    float* sK = sQ + BQ * HD;   // (BK, HD+1)
    float* sV = sK + BK * LDK;  // (BK, HD)
    const int nqt = gridDim.y;
    const int qt = nqt - 1 - blockIdx.y;  // longest (causal) tiles first
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float scale = attn_scale(HD);
    const floatX* base = qkv + (size_t)b * T * C3 + h * HD;

    attn_scalar_load_rows<HD>(sQ, HD, base, q0, BQ, T, C3);

    float m[RPW], l[RPW], es[RPW], nl[RPW], o[RPW][DPL];  // nl: as l over the near keys (NEAR)
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        es[r] = 0.0f;
        nl[r] = 0.0f;
#pragma unroll
        for (int t = 0; t < DPL; t++) o[r][t] = 0.0f;
    }
    float smax = -INFINITY, smin = INFINITY, near_max = -INFINITY, far_max = -INFINITY;

    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;
        __syncthreads();  // the previous tile is no longer read (and the Q tile is written)
        attn_scalar_load_rows<HD>(sK, LDK, base + C, k0, BK, T, C3);
        attn_scalar_load_rows<HD>(sV, HD, base + 2 * C, k0, BK, T, C3);
        __syncthreads();
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
        const int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < RPW; r++) {
            const int rr = warp * RPW + r, i = q0 + rr;
            if (i >= T) continue;  // warp-uniform
            float s = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++) s += sQ[rr * HD + d] * sK[lane * LDK + d];
            s *= scale;
            const bool vis = !need_mask || attn_visible(i, j, local, P);  // j >= T implies j > i
            float t;
            const float sc = attn_softcap(s, softcap, t);
            const bool near = NEAR && i - j < near_n;
            if (STATS && vis) {
                smax = fmaxf(smax, s);
                smin = fminf(smin, s);
                if (NEAR && near) near_max = fmaxf(near_max, s);
                if (NEAR && !near) far_max = fmaxf(far_max, s);
            }
            const float tmax = warp_max(vis ? sc : -INFINITY);
            if (tmax == -INFINITY) continue;  // nothing visible for this row in this tile (warp-uniform)
            // tmax is finite here, so m_new is too (the -inf guard of attn_online_rescale is not needed)
            const float m_new = fmaxf(m[r], tmax);
            const float alpha = expf(m[r] - m_new);  // 0 on the first visible tile (m = -inf)
            m[r] = m_new;
            const float p = vis ? expf(sc - m_new) : 0.0f;
            l[r] = l[r] * alpha + warp_sum(p);
            if (STATS) es[r] = es[r] * alpha + warp_sum(p * sc);
            if (NEAR) nl[r] = nl[r] * alpha + warp_sum(near ? p : 0.0f);
#pragma unroll
            for (int t2 = 0; t2 < DPL; t2++) o[r][t2] *= alpha;
            for (int kk = 0; kk < BK; kk++) {
                const float pk = __shfl_sync(0xffffffffu, p, kk);
#pragma unroll
                for (int t2 = 0; t2 < DPL; t2++) o[r][t2] += pk * sV[kk * HD + lane + 32 * t2];
            }
        }
    }

    float ent = 0.0f, near_sum = 0.0f;
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int i = q0 + warp * RPW + r;
        if (i >= T) continue;
        const float inv = 1.0f / l[r];  // l > 0: key i is always visible
        floatX* orow = out + ((size_t)b * T + i) * C + h * HD;
#pragma unroll
        for (int t2 = 0; t2 < DPL; t2++) orow[lane + 32 * t2] = from_float<floatX>(o[r][t2] * inv);
        const float row_lse = m[r] + logf(l[r]);
        if (lane == 0) {
            lse[((size_t)b * NH + h) * T + i] = row_lse;
            if (STATS) ent += row_lse - es[r] * inv;  // entropy = lse - sum_j p_j s'_j
            if (NEAR) near_sum += attn_row_has_far(i, local, P, near_n) ? nl[r] * inv : 1.0f;
        }
    }
    if (STATS) {
        float v[NF];
        v[kAttnMax] = smax;
        v[kAttnMin] = smin;
        v[kAttnEntropySum] = ent;
        if constexpr (NEAR) {
            v[kAttnNearMassSum] = near_sum;
            v[kAttnNearMax] = near_max;
            v[kAttnFarMax] = far_max;
        }
        attn_block_stats<kAttnScalarThreads / 32>(v, stats_part + ((size_t)bh * nqt + qt) * NF);
    }
}

// dK, dV: grid (B*NH, key tiles), 128 threads; each warp owns 8 keys, lane l handles query row
// q0+l of the current query tile and, for the accumulation, dims l, l+32, ...
// Dynamic smem: K (32, HD), V (32, HD), Q (32, HD+1), dO (32, HD+1), lse (32), D (32), fp32.
template <int HD>
constexpr size_t attn_bwd_kv_smem() {
    return sizeof(float) * (2 * kAttnScalarBK * HD + 2 * kAttnScalarBQ * (HD + 1) + 2 * kAttnScalarBQ);
}

template <int HD>
__global__ void __launch_bounds__(kAttnScalarThreads)
    attn_bwd_kv_scalar_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                              int T, int C, int NH, int G, int P, float softcap) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    constexpr int BQ = kAttnScalarBQ, BK = kAttnScalarBK, KPW = BK / 4, DPL = HD / 32, LDQ = HD + 1;
    LLMC_DYNAMIC_SHARED(float, smem);
    float* sK = smem;            // (BK, HD)
    float* sV = sK + BK * HD;    // (BK, HD)
    float* sQ = sV + BK * HD;    // (BQ, HD+1)
    float* sdO = sQ + BQ * LDQ;  // (BQ, HD+1)
    float* sL = sdO + BQ * LDQ;  // (BQ)
    float* sD = sL + BQ;         // (BQ)
    const int kt = blockIdx.y;   // early key tiles see the most queries (global heads): launched first
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, k0 = kt * BK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float scale = attn_scale(HD);
    const floatX* base = qkv + (size_t)b * T * C3 + h * HD;
    const floatX* gbase = dout + (size_t)b * T * C + h * HD;
    const float* lse_bh = lse + (size_t)bh * T;
    const float* D_bh = D + (size_t)bh * T;

    attn_scalar_load_rows<HD>(sK, HD, base + C, k0, BK, T, C3);
    attn_scalar_load_rows<HD>(sV, HD, base + 2 * C, k0, BK, T, C3);
    float dk[KPW][DPL], dv[KPW][DPL];
#pragma unroll
    for (int r = 0; r < KPW; r++)
#pragma unroll
        for (int t = 0; t < DPL; t++) dk[r][t] = dv[r][t] = 0.0f;

    const int qb = attn_q_tile_begin(kt, BQ, BK), qe = attn_q_tile_end(kt, BQ, BK, T, local, P);
    for (int qt = qb; qt < qe; qt++) {
        const int q0 = qt * BQ;
        __syncthreads();  // every warp is done with the previous query tile (and K, V are written)
        attn_scalar_load_rows<HD>(sQ, LDQ, base, q0, BQ, T, C3);
        attn_scalar_load_rows<HD>(sdO, LDQ, gbase, q0, BQ, T, C);
        if (threadIdx.x < BQ) {
            const int i = q0 + threadIdx.x;
            sL[threadIdx.x] = i < T ? lse_bh[i] : 0.0f;
            sD[threadIdx.x] = i < T ? D_bh[i] : 0.0f;
        }
        __syncthreads();
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
        const int i = q0 + lane;
#pragma unroll
        for (int r = 0; r < KPW; r++) {
            const int kk = warp * KPW + r, j = k0 + kk;
            if (j >= T) continue;  // warp-uniform
            float s = 0.0f, dp = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++) {
                s += sQ[lane * LDQ + d] * sK[kk * HD + d];
                dp += sdO[lane * LDQ + d] * sV[kk * HD + d];
            }
            const bool vis = !need_mask || (i < T && attn_visible(i, j, local, P));
            float ds;
            const float p = attn_prob_grad(s * scale, dp, sL[lane], sD[lane], softcap, scale, vis, ds);
            for (int q = 0; q < BQ; q++) {
                const float pq = __shfl_sync(0xffffffffu, p, q);
                const float dsq = __shfl_sync(0xffffffffu, ds, q);
#pragma unroll
                for (int t2 = 0; t2 < DPL; t2++) {
                    dv[r][t2] += pq * sdO[q * LDQ + lane + 32 * t2];
                    dk[r][t2] += dsq * sQ[q * LDQ + lane + 32 * t2];
                }
            }
        }
    }
    floatX* dbase = dqkv + (size_t)b * T * C3 + h * HD;
#pragma unroll
    for (int r = 0; r < KPW; r++) {
        const int j = k0 + warp * KPW + r;
        if (j >= T) continue;
#pragma unroll
        for (int t2 = 0; t2 < DPL; t2++) {
            dbase[(size_t)j * C3 + C + lane + 32 * t2] = from_float<floatX>(dk[r][t2]);
            dbase[(size_t)j * C3 + 2 * C + lane + 32 * t2] = from_float<floatX>(dv[r][t2]);
        }
    }
}

// dQ: grid (B*NH, query tiles), 128 threads; each warp owns 8 query rows, lane l handles key k0+l
// of the current key tile and, for the accumulation, dims l, l+32, ...
// Dynamic smem: Q (32, HD), dO (32, HD), K (32, HD+1), V (32, HD+1), fp32.
template <int HD>
constexpr size_t attn_bwd_q_smem() {
    return sizeof(float) * (2 * kAttnScalarBQ * HD + 2 * kAttnScalarBK * (HD + 1));
}

template <int HD>
__global__ void __launch_bounds__(kAttnScalarThreads)
    attn_bwd_q_scalar_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* D,
                             int T, int C, int NH, int G, int P, float softcap) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    constexpr int BQ = kAttnScalarBQ, BK = kAttnScalarBK, RPW = BQ / 4, DPL = HD / 32, LDK = HD + 1;
    LLMC_DYNAMIC_SHARED(float, smem);
    float* sQ = smem;                           // (BQ, HD)
    float* sdO = sQ + BQ * HD;                  // (BQ, HD)
    float* sK = sdO + BQ * HD;                  // (BK, HD+1)
    float* sV = sK + BK * LDK;                  // (BK, HD+1)
    const int qt = gridDim.y - 1 - blockIdx.y;  // longest (causal) tiles first
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int C3 = 3 * C, q0 = qt * BQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float scale = attn_scale(HD);
    const floatX* base = qkv + (size_t)b * T * C3 + h * HD;
    const floatX* gbase = dout + (size_t)b * T * C + h * HD;

    attn_scalar_load_rows<HD>(sQ, HD, base, q0, BQ, T, C3);
    attn_scalar_load_rows<HD>(sdO, HD, gbase, q0, BQ, T, C);
    float row_lse[RPW], row_D[RPW], dq[RPW][DPL];
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int i = q0 + warp * RPW + r;
        row_lse[r] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
        row_D[r] = i < T ? D[(size_t)bh * T + i] : 0.0f;
#pragma unroll
        for (int t = 0; t < DPL; t++) dq[r][t] = 0.0f;
    }

    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;
        __syncthreads();  // every warp is done with the previous K / V tile (and Q, dO are written)
        attn_scalar_load_rows<HD>(sK, LDK, base + C, k0, BK, T, C3);
        attn_scalar_load_rows<HD>(sV, LDK, base + 2 * C, k0, BK, T, C3);
        __syncthreads();
        const bool need_mask = attn_tile_needs_mask(qt, kt, BQ, BK, T, local, P);
        const int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < RPW; r++) {
            const int rr = warp * RPW + r, i = q0 + rr;
            if (i >= T) continue;  // warp-uniform
            float s = 0.0f, dp = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++) {
                s += sQ[rr * HD + d] * sK[lane * LDK + d];
                dp += sdO[rr * HD + d] * sV[lane * LDK + d];
            }
            const bool vis = !need_mask || attn_visible(i, j, local, P);  // j >= T implies j > i
            float ds;
            attn_prob_grad(s * scale, dp, row_lse[r], row_D[r], softcap, scale, vis, ds);
            for (int kk = 0; kk < BK; kk++) {
                const float dsk = __shfl_sync(0xffffffffu, ds, kk);
#pragma unroll
                for (int t2 = 0; t2 < DPL; t2++) dq[r][t2] += dsk * sK[kk * LDK + lane + 32 * t2];
            }
        }
    }
    floatX* dbase = dqkv + (size_t)b * T * C3 + h * HD;
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int i = q0 + warp * RPW + r;
        if (i >= T) continue;
#pragma unroll
        for (int t2 = 0; t2 < DPL; t2++) dbase[(size_t)i * C3 + lane + 32 * t2] = from_float<floatX>(dq[r][t2]);
    }
}

}  // namespace llmc::cuda
