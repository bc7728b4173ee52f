// The launch configuration of the production kernels, read from the launchers' own constants and
// helpers (llmc/cuda/*.cuh), for dev/cuda/sass_report's occupancy: one line per kernel and shape,
//   <kernel as c++filt names it, without namespace and parameters> \t <threads per block> \t
//   <dynamic shared memory bytes> \t <shape the numbers hold for, "-" when any>
// Kernels whose block size is a literal inside a launcher are not listed (the report says so).
// Shape-dependent sizes are printed for the paper model (C 192, NH 6) and GPT-2 124M (C 768, NH 12).
// Built by the host compiler through the device emulation's headers (dev/cuda/sassreport/build.py: the
// emulated build's -DLLMC_EMULATE and include folder, at -O0, without sanitizers; docs/emulation.md) and
// run on the host: no device code is built, run or read, and no GPU is needed.
#include <cstdio>

#include "llmc/cuda/attention_decode.cuh"
#include "llmc/cuda/attention_ls.cuh"
#include "llmc/cuda/classifier.cuh"
#include "llmc/cuda/decode_linear.cuh"
#include "llmc/cuda/global_norm.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/qknorm.cuh"
#include "llmc/cuda/residual.cuh"

using namespace llmc::cuda;

namespace {

void line(const char* kernel, int threads, size_t smem, const char* shape = "-") {
    std::printf("%s\t%d\t%zu\t%s\n", kernel, threads, smem, shape);
}

// The attention kernels of this build's family (llmc/cuda/attention_ls.cuh: FA2-class in bf16,
// scalar in FP32).
template <int HD>
void attention(const char* hd) {
    char name[128];
    // statistics off, basic, basic + near/far (STATS, NEAR)
    for (const char* stats_near : {"false, false", "true, false", "true, true"}) {
#if defined(ENABLE_FP32)
        std::snprintf(name, sizeof name, "attn_fwd_scalar_kernel<%s, %s>", hd, stats_near);
        line(name, kAttnScalarThreads, attn_fwd_scalar_smem<HD>());
#else
        for (const char* softcap : {"false", "true"}) {
            std::snprintf(name, sizeof name, "attn_fwd_fa2_kernel<%s, %s, %s>", hd, stats_near, softcap);
            line(name, kAttnFa2Threads, Fa2FwdSmem<HD>::bytes);
        }
#endif
    }
#if defined(ENABLE_FP32)
    std::snprintf(name, sizeof name, "attn_bwd_kv_scalar_kernel<%s>", hd);
    line(name, kAttnScalarThreads, attn_bwd_kv_smem<HD>());
    std::snprintf(name, sizeof name, "attn_bwd_q_scalar_kernel<%s>", hd);
    line(name, kAttnScalarThreads, attn_bwd_q_smem<HD>());
#else
    for (const char* softcap : {"false", "true"}) {
        std::snprintf(name, sizeof name, "attn_bwd_kv_fa2_kernel<%s, %s>", hd, softcap);
        line(name, kAttnFa2Threads, Fa2BwdKvSmem<HD>::bytes);
        std::snprintf(name, sizeof name, "attn_bwd_q_fa2_kernel<%s, %s>", hd, softcap);
        line(name, kAttnFa2Threads, Fa2BwdQSmem<HD>::bytes);
    }
#endif
}

// layernorm_backward and qknorm_backward as their launchers size them for one model shape
void norms_backward(int C, int NH, const char* shape) {
    const int ln_warps = layernorm_backward_warps(C);
    char name[64];
    if (C % kPack == 0 && C <= 32 * kPack * kLayerNormCachedChunks) {  // the launcher's choice for this C
        std::snprintf(name, sizeof name, "layernorm_backward_cached_kernel<%d>", (int)ceil_div(C, 32 * kPack));
        line(name, ln_warps * 32, (size_t)ln_warps * 2 * layernorm_cached_width(C) * sizeof(float), shape);
    }
    for (int pack : {1, kPack}) {
        std::snprintf(name, sizeof name, "layernorm_backward_kernel<%d>", pack);
        line(name, ln_warps * 32, (size_t)ln_warps * 2 * C * sizeof(float), shape);
    }
    const int hd = C / NH, qk_warps = qknorm_backward_warps(hd);
    line("qknorm_backward_kernel", qk_warps * 32, (size_t)qk_warps * 4 * hd * sizeof(float), shape);
    if (qknorm_packed_lanes(hd, true) > 0) {  // the launchers' choice for this head size (aligned pointers)
        line("qknorm_forward_packed_kernel", 256, 0, shape);
        line("qknorm_backward_packed_kernel", qk_warps * 32, 0, shape);
    }
}

}  // namespace

int main() {
    attention<32>("32");
    attention<64>("64");
    attention<128>("128");
    for (const char* fused : {"false", "true"}) {
        char name[64];
        for (int pack : {1, kPack}) {
            std::snprintf(name, sizeof name, "layernorm_forward_kernel<%d, %s>", pack, fused);
            line(name, kLayerNormForwardBlock, 0);
        }
    }
    line("attn_bwd_dot_kernel", kAttnDotThreads, 0);
    norms_backward(192, 6, "C=192,NH=6");
    norms_backward(768, 12, "C=768,NH=12");
    line("residual_forward_kernel", kElementwiseBlock, 0);
    line("gelu_forward_kernel", kElementwiseBlock, 0);
    line("gelu_backward_kernel", kElementwiseBlock, 0);
    for (int pack : {1, kPack}) {
        char name[64];
        std::snprintf(name, sizeof name, "encoder_forward_kernel<%d>", pack);
        line(name, kElementwiseBlock, 0);
    }
    line("encoder_backward_wpe_kernel", kElementwiseBlock, 0);
    line("classifier_kernel", detail::classifier_threads(10112), 0, "Vp 10112");
    line("classifier_kernel", detail::classifier_threads(50304), 0, "Vp 50304");
    line("global_norm_kernel", detail::kNormBlock, 0);
    line("bias_sum_kernel", detail::kBiasGroupPacks * detail::kBiasRowThreads, 0);
    line("attention_decode_split_kernel", kDecodeWarps * 32, 0);
    line("attention_decode_one_launch_kernel", kDecodeWarps * 32, 0);
    line("attention_decode_combine_kernel", kDecodeCombineThreads, 0);
    // the largest dynamic shared memory a decode step asks for: fcproj's B x 4C inputs
    line("decode_linear_kernel", kDecodeLinearWarps * 32, decode_linear_smem(4, 4 * 192, false), "B 4, C=192");
    if (decode_linear_fits(8, 4 * 768, false))  // (not in the FP32 build: the generator refuses that shape)
        line("decode_linear_kernel", kDecodeLinearWarps * 32, decode_linear_smem(8, 4 * 768, false), "B 8, C=768");
    // the qkv layer of layers 1..L-1: the residual prologue
    line("decode_linear_kv_kernel", kDecodeLinearWarps * 32, decode_linear_smem(4, 192, true), "B 4, C=192");
    return 0;
}
