// Lab candidate: the one-pass FlashAttention-2-class backward (bf16 build, hd 32 / 64; hd 128 runs
// the production backward). The dK/dV kernel also forms each visited tile's dQ part dS K (dS^T
// through shared memory) into an fp32 block per (query tile, key tile), and attn_bwd_dq_reduce_kernel
// sums a query tile's blocks in key-tile order, instead of the production dQ kernel. Compiled only by
// the lab (dev/cuda/attention_ls.cu --kernel onepass), timed against the production pair
// (docs/attention_kernel.md, "The one-pass design"). Its dK/dV kernel runs the production dK/dV block
// (fa2_bwd_kv_block, llmc/cuda/attention_ls_fa2_bwd.cuh) with the dQ parts as its Extra
// (OnePassDqParts): only what the candidate adds is here.
#pragma once
#if defined(ENABLE_FP32)
#error "the one-pass backward is a bf16-build candidate (the FP32 build runs the scalar kernels)"
#endif
#include <algorithm>
#include <string>

#include "llmc/cuda/attention_ls.cuh"

namespace llmc::cuda {

// The one-pass dK/dV kernel's extra shared memory: sdS (64 keys, 64 queries) bf16 and sPairs[4].
constexpr size_t kOnePassDsBytes = sizeof(__nv_bfloat16) * kAttnFa2BK * kAttnFa2BQ;
constexpr size_t kOnePassExtraBytes = kOnePassDsBytes + 4 * sizeof(unsigned);

// The one-pass backward's dQ part of one (query tile, key tile) for warp w: dQ_part (queries
// 16w .. +15 of the tile, HD) = dS K over the tile's 64 keys, A = dS from the swizzled (64 keys, 64
// queries) tile sds (stored key-major as dS^T: ldmatrix.x4.trans), B = K from the swizzled tile sk
// (k = key: .trans, as dK's Q). Key block kk (warp kk's 16 keys) is skipped when that warp did not
// compute the 16-query pair w (pairs[kk]: its dS there is all zero, and sdS holds stale values).
template <int HD>
__device__ __forceinline__ void fa2_bwd_dq_part(float (&acc)[HD / 8][4], const char* sds, const char* sk,
                                                const unsigned* pairs, int w) {
    const int lane = threadIdx.x % 32, mi = lane / 8, j8 = lane % 8;
#pragma unroll
    for (int db = 0; db < HD / 8; db++) acc[db][0] = acc[db][1] = acc[db][2] = acc[db][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kAttnFa2BK / 16; kk++) {
        if (!(pairs[kk] & attn_pair_bits(w))) continue;
        // matrices (queries 0..7 | 8..15) x (keys 0..7 | 8..15), stored as rows = keys: transposed
        uint32_t xa[4];
        ldmatrix_x4_trans(xa, sds + fa2_lane_offset<kAttnFa2BQ>(kk * 16 + (mi >> 1) * 8 + j8, 2 * w + (mi & 1)));
        fa2_a_times_block<HD>(acc, xa, sk, kk);
    }
}

// The one-pass backward's dQ parts (fp32): per (b, h, query tile qt of 64, key tile kt of qt's range
// [attn_kv_tile_begin, attn_kv_tile_end)) one 64 x HD block, in the thread-major order of
// fa2_store_acc (the dQ-phase accumulators of the dK/dV kernel's 128 threads). Per batch row the
// local heads' blocks, then the global heads'; per head and query tile span_local / span_global blocks
// (the widest key-tile range of a query tile of that kind: attention_onepass_dq_span). The dK/dV kernel
// writes the blocks of the (qt, kt) it visits - the same tiles as that range
// (test/test_attention_tiles.cpp: both loops visit exactly the tiles holding a visible pair) - and
// attn_bwd_dq_reduce_kernel sums them.
struct Fa2DqParts {
    float* part = nullptr;
    int span_local = 0, span_global = 0;
};
// Head (b, h)'s blocks: block (qt, kt_rel) is head + (qt * span + kt_rel) * 64 * HD floats.
struct Fa2DqHeadParts {
    float* head;
    int span;
    template <int HD>
    __device__ __forceinline__ float* block(int qt, int kt_rel) const {
        return head + ((size_t)qt * span + kt_rel) * (size_t)(kAttnFa2BQ * HD);
    }
};
template <int HD>
__device__ __forceinline__ Fa2DqHeadParts fa2_dq_head_parts(const Fa2DqParts& dq, int b, int h, int NH, int G,
                                                            int nqt) {
    const int NL = NH - G;
    const size_t row = (size_t)nqt * ((size_t)NL * dq.span_local + (size_t)G * dq.span_global);  // blocks per b
    const size_t in_row = h < NL ? (size_t)h * nqt * dq.span_local
                                 : (size_t)nqt * ((size_t)NL * dq.span_local + (size_t)(h - NL) * dq.span_global);
    return {dq.part + ((size_t)b * row + in_row) * (size_t)(kAttnFa2BQ * HD), h < NL ? dq.span_local : dq.span_global};
}

// What the one-pass dK/dV block does besides dK and dV (fa2_bwd_kv_block's Extra): per visited
// query tile the warps leave dS^T in shared memory (sdS, after their dV and dK terms of each pair) and
// then form the tile's dQ part dS K (fa2_bwd_dq_part) into dq's block of (query tile, key tile).
template <int HD>
struct OnePassDqParts {
    static constexpr int BQ = kAttnFa2BQ, BK = kAttnFa2BK;
    Fa2DqParts dq;
    Fa2DqHeadParts dq_head;  // this head's dQ parts
    char* sdS;               // (BK, BQ) bf16 swizzled: dS^T of the current query tile
    unsigned* sPairs;        // [4]: each warp's computed pairs
    char* ds_rows;           // this warp's 16 rows of sdS
    int key_tile, window;    // the block's key tile, P
    bool local;

    __device__ __forceinline__ void begin(char* extra_smem, const Fa2BlockWork& work, int T, int NH, int G, int P) {
        sdS = extra_smem;
        sPairs = reinterpret_cast<unsigned*>(sdS + kOnePassDsBytes);
        ds_rows = sdS + (uint32_t)(threadIdx.x / 32) * (16u * BQ * 2u);
        key_tile = work.outer, window = P, local = work.local;
        dq_head = fa2_dq_head_parts<HD>(dq, work.b, work.h, NH, G, (int)ceil_div(T, BQ));
    }
    // dS^T rows g, g+8 (hf), queries np*16 + 2c + {0, 1} (d0), + 8 (d1)
    __device__ __forceinline__ void after_accumulate(const float (&d0)[4], const float (&d1)[4], int np) {
        const int c = threadIdx.x % 4;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int row = threadIdx.x % 32 / 4 + 8 * hf;
            *reinterpret_cast<uint32_t*>(ds_rows + fa2_lane_offset<BQ>(row, 2 * np) + 4 * c) =
                pack_bf16x2(d0[2 * hf], d0[2 * hf + 1]);
            *reinterpret_cast<uint32_t*>(ds_rows + fa2_lane_offset<BQ>(row, 2 * np + 1) + 4 * c) =
                pack_bf16x2(d1[2 * hf], d1[2 * hf + 1]);
        }
    }
    // dQ part of (qt, kt): warp w takes queries 16w .. +15 over the 64 keys
    __device__ __forceinline__ void after_tile(int qt, unsigned pairs, const __nv_bfloat16* sK) {
        const int warp = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) sPairs[warp] = pairs;
        __syncthreads();  // every warp's dS^T and pairs in shared memory
        float dqp[HD / 8][4];
        fa2_bwd_dq_part<HD>(dqp, sdS, reinterpret_cast<const char*>(sK), sPairs, warp);
        fa2_store_acc<HD / 8>(dqp, dq_head.block<HD>(qt, key_tile - attn_kv_tile_begin(qt, BQ, BK, local, window)));
    }  // the next tile's barrier orders these reads of sdS before its writes
};

// dK, dV and the dQ parts (hd 32 / 64): the production dK/dV block (fa2_bwd_kv_block, as
// attn_bwd_kv_fa2_kernel) with OnePassDqParts, whose dQ parts attn_bwd_dq_reduce_kernel sums (no dQ
// kernel). Registers: at hd 64 it asks for 3 blocks/SM (ptxas's own choice takes every register:
// 2 blocks/SM).
template <int HD, bool SOFTCAP>
__global__ void __launch_bounds__(kAttnFa2Threads, HD == 64 ? 3 : 0)
    attn_bwd_kv_onepass_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                               const float* lse, const float* D, int T, int C, int NH, int G, int P, float softcap,
                               Fa2Split split, Fa2DqParts dq) {
    static_assert(kFa2BwdARegs<HD>, "the one-pass backward is built for hd 32 / 64");
    using L = Fa2BwdKvSmem<HD>;
    // the dQ parts' tiles (sdS, fa2_bwd_dq_part, the reduce kernel): 64 x 64, warp w = query pair w
    static_assert(L::BQ == kAttnFa2BQ && L::BK == kAttnFa2BK && kAttnFa2BK / 16 == kAttnFa2Threads / 32 &&
                      kAttnFa2BQ / 16 == kAttnFa2Threads / 32,
                  "the one-pass dQ part assumes 64 x 64 tiles and one 16-query pair per warp");
    OnePassDqParts<HD> parts;
    parts.dq = dq;
    fa2_bwd_kv_block<HD, SOFTCAP>(dqkv, dout, qkv, lse, D, T, C, NH, G, P, softcap, split, parts);
}

// The one-pass backward's dQ: one block of 128 threads per (b, h, query tile of 64) sums the dQ parts
// of the query tile's key tiles in key-tile order (the same bits whatever order the dK/dV kernel's
// blocks ran in) and writes dqkv's q part, with the 1/sqrt(hd) of dS. Thread t holds what thread t of
// the dK/dV kernel's dQ phase stored: rows q0 + 16 (t / 32) + g (+ 8), dims 8 db + 2c + {0, 1}.
template <int HD>
__global__ void __launch_bounds__(kAttnFa2Threads)
    attn_bwd_dq_reduce_kernel(__nv_bfloat16* dqkv, Fa2DqParts dq, int T, int C, int NH, int G, int P) {
    constexpr int BQ = kAttnFa2BQ, BK = kAttnFa2BK, DB = HD / 8;
    const int nqt = (int)ceil_div(T, BQ);
    const int bh = (int)(blockIdx.x / (unsigned)nqt), qt = (int)(blockIdx.x % (unsigned)nqt);
    const int b = bh / NH, h = bh % NH;
    const bool local = h < NH - G;
    const int kb = attn_kv_tile_begin(qt, BQ, BK, local, P), ke = attn_kv_tile_end(qt, BQ, BK, T);
    float acc[DB][4];
    const Fa2DqHeadParts dq_head = fa2_dq_head_parts<HD>(dq, b, h, NH, G, nqt);
    fa2_sum_acc<DB>(acc, 0, ke - kb, [&](int j) { return dq_head.block<HD>(qt, j); });
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = qt * BQ + warp * 16 + g + 8 * hf;
        if (i >= T) continue;
        mma_store_row<DB>(dqkv + ((size_t)b * T + i) * 3 * C + h * HD + 2 * c, acc, hf, attn_scale(HD));
    }
}

// The one-pass backward's dQ parts per query tile of 64 of a head kind (Fa2DqParts::span_local /
// span_global): the most key tiles of 64 such a query tile visits.
inline int attention_onepass_dq_span(int T, bool local, int P) {
    int span = 0;
    for (int qt = 0; qt < (int)ceil_div(T, kAttnFa2BQ); qt++)
        span = std::max(span, attn_kv_tile_end(qt, kAttnFa2BQ, kAttnFa2BK, T) -
                                  attn_kv_tile_begin(qt, kAttnFa2BQ, kAttnFa2BK, local, P));
    return span;
}
// The one-pass backward's dQ parts (hd 32 / 64; 0 at hd 128, which runs the production backward):
// per batch row, head and query tile of 64, span blocks of 64 x hd fp32 (Fa2DqHeadParts::block).
inline size_t attention_onepass_dq_floats(int B, int T, int C, int NH, int G, int P) {
    if (C / NH > 64) return 0;
    const size_t spans =
        (size_t)(NH - G) * attention_onepass_dq_span(T, true, P) + (size_t)G * attention_onepass_dq_span(T, false, P);
    return (size_t)B * ceil_div(T, kAttnFa2BQ) * spans * kAttnFa2BQ * (C / NH);
}

template <int HD>
inline void attn_backward_onepass_launch(const AttnCall& a, Fa2DqParts dq, floatX* dqkv, const floatX* dout,
                                         const floatX* qkv, const float* lse, const float* D, cudaStream_t st) {
    const int B = a.B, T = a.T, C = a.C, NH = a.NH, G = a.G, P = a.P;
    attention_ls_check_aligned(dqkv, "dqkv");
    attention_ls_check_aligned(dout, "dout");
    attention_ls_check_aligned(qkv, "qkv");
    const AttnSplitPlan kv_plan = attention_split_plan_for(attention_split_geom_kv(T, P, HD), B, NH, G, a.split);
    const Fa2Split kv_split = attention_split_args(kv_plan, B, a.split);
    constexpr size_t kv_bytes = Fa2BwdKvSmem<HD>::bytes + kOnePassExtraBytes;
    auto go = [&](auto kv_kernel) {  // soft-cap as a template parameter: one dispatch here
        attn_set_smem(kv_kernel, kv_bytes);
        launch_kernel(kv_kernel, dim3((unsigned)kv_plan.blocks), kAttnFa2Threads, kv_bytes, st, dqkv, dout, qkv, lse, D,
                      T, C, NH, G, P, a.softcap, kv_split, dq);
        CUDA_CHECK_LAUNCH();
    };
    if (a.softcap > 0.0f) go(attn_bwd_kv_onepass_kernel<HD, true>);
    else go(attn_bwd_kv_onepass_kernel<HD, false>);
    const long reduce_blocks = (long)B * NH * ceil_div(T, kAttnFa2BQ);
    if (reduce_blocks > 2147483647L)
        throw InputError("attention: B * NH * ceil(T/64) = " + std::to_string(reduce_blocks) +
                         " blocks exceed the grid's 2^31-1; use a smaller batch");
    launch_kernel(attn_bwd_dq_reduce_kernel<HD>, (unsigned)reduce_blocks, kAttnFa2Threads, 0, st, dqkv, dq, T, C, NH, G,
                  P);
    CUDA_CHECK_LAUNCH();
}

// The one-pass backward, as attention_backward (llmc/cuda/attention_ls.cuh) with dq_parts:
// attention_onepass_dq_floats floats of its own, any contents (null at hd 128, which runs
// attention_backward).
inline void attention_backward_onepass(const AttnCall& a, float* dq_parts, floatX* dqkv, const floatX* dout,
                                       const floatX* qkv, const floatX* out, const float* lse, cudaStream_t st) {
    if (a.hd() > 64) {
        attention_backward(a, dqkv, dout, qkv, out, lse, st);
        return;
    }
    attention_ls_check_args(a.B, a.T, a.C, a.NH, a.G, a.P);
    if (!dq_parts || !a.bwd_scratch)
        throw InputError(
            "attention: the one-pass backward needs bwd_scratch and dq_parts; pass attention_onepass_dq_floats(B, T, "
            "C, NH, G, P) floats of its own");
    float* D = a.bwd_scratch;  // (B, NH, T)
    attention_backward_row_dots(D, dout, out, a.B, a.T, a.C, a.NH, st);
    Fa2DqParts dq;
    dq.part = dq_parts;
    dq.span_local = attention_onepass_dq_span(a.T, true, a.P);
    dq.span_global = attention_onepass_dq_span(a.T, false, a.P);
    if (a.hd() == 32) attn_backward_onepass_launch<32>(a, dq, dqkv, dout, qkv, lse, D, st);
    else attn_backward_onepass_launch<64>(a, dq, dqkv, dout, qkv, lse, D, st);
}

}  // namespace llmc::cuda
