// GPU test: the attention instruments of CudaBackend against the CPU backend's after a forward of
// both on the same fresh random parameters and tokens, for LS, MHSA, all-local, soft-cap, QK-norm,
// a window P >= T, P = 1 and ragged T: the maps of attention_probs (llmc/cuda/attention_probs.cuh;
// --eval-only --dump-attention on CUDA; every layer and head, the first and the last sequence of the
// batch) and the near/far statistics of that forward (--near N: the attention forward's own; every
// layer and head). Exit status 0 = every check passed; without a GPU it prints one line and exits 1.
//
// Checks per map (T x T, row = query i, column = key j):
//   - masked entries (j > i; for a local head also j <= i - P) are exactly 0;
//   - every row sums to 1 within 1e-4: the map is recomputed from the same stored q, k and the
//     forward's own log-sum-exp, so the sum differs from 1 only by fp32 summation order and exp's
//     rounding (~1e-6), in either build; a wrong row, head or lse index gives O(1). With soft-cap c
//     in a build whose forward caps with tanh.approx, plus e^(2 c 2^-11) - 1: the PTX ISA bounds
//     that approximation's relative error by 2^-11, not its smoothness, so a score rounded
//     differently may be capped with the opposite error, up to 2 c 2^-11 in s' (the emulation errs
//     by the full bound, its sign flipping with the input's last bit);
//   - against the CPU map: ||gpu - cpu|| / ||cpu|| <= 1e-4 in the FP32 build (same math, another
//     summation order); <= 3e-2 in the BF16 build: q and k carry ~2e-3 relative bf16 rounding per op
//     over a few ops (the logits' budget of test_cuda_model.cu, 2e-2, covers whole layers), and
//     p = exp(s - lse) turns the score's absolute error into p's relative error; the scores here are
//     a few units (GPT-2 init with the qkv weights x5), so ~1e-2 of a few units;
//   - the maps are far from uniform (||cpu - uniform|| / ||uniform|| >= 0.3, 10x the BF16
//     tolerance; P = 1 is one-hot): a map from the wrong q, k or lse would not pass for the right one.
// Near/far statistics (N per case, below P where the window allows, so local heads have far keys):
//   - near mass per layer and head within kTolNearMass of the CPU's (absolute): a mean over rows of
//     sums of probabilities, whose errors largely average out (seen: 2e-4 in the BF16 build, so 3e-3;
//     6e-8 in the FP32 build, so 1e-5), while a split one key off (tried on the FA2 forward) moved it by 0.02-0.2;
//   - near and far max logit within kTolMap * (1 + |cpu|): the scores' error as above; a head
//     without far keys (P = 1, N = 1) has far max -inf on both.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/core/init.h"
#include "llmc/core/params.h"
#include "llmc/core/rng.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/cuda/backend_entry.h"
#include "test/gpu/gpu_test_util.cuh"

namespace {

// The build's precision is read at run time, so this unit reads no ENABLE_* macro (Makefile: one
// compile for both builds).
const bool kFp32 = std::strcmp(llmc::cuda_backend::precision_name(), "fp32") == 0;
const double kTolMap = kFp32 ? 1e-4 : 3e-2, kTolNearMass = kFp32 ? 1e-5 : 3e-3;
constexpr double kTolRowSum = 1e-4;
constexpr double kMinSpread = 0.3;  // 10x the BF16 map tolerance

using gpu_test::Checks;

struct Case {
    const char* name;
    llmc::ModelConfig cfg;
    int B, T;
    int near;  // the near/far distance N of the statistics
};

// ||p - u|| / ||u|| over a map, u uniform over each row's visible keys: how far the attention is
// from uniform (a comparison of near-uniform maps could not tell a wrong q or k from the right one).
double spread_from_uniform(const std::vector<float>& p, int T, bool local, int P) {
    double num = 0.0, den = 0.0;
    for (int i = 0; i < T; i++) {
        const int lo = local ? std::max(0, i - P + 1) : 0;
        const double u = 1.0 / (i - lo + 1);
        for (int j = lo; j <= i; j++) {
            num += (p[(size_t)i * T + j] - u) * (p[(size_t)i * T + j] - u);
            den += u * u;
        }
    }
    return std::sqrt(num / den);
}

// GPT-2 init with the qkv weights x kQkvScale: scores of a few units, attention far from uniform
// (GPT-2 init itself gives near-uniform maps, which a wrong q or k could match as well).
constexpr float kQkvScale = 5.0f;
std::vector<float> test_params(const llmc::ModelConfig& cfg, uint64_t seed) {
    std::vector<float> p = llmc::init_params(cfg, seed);
    const llmc::ParamLayout lay = llmc::param_layout(cfg);
    for (size_t i = 0; i < lay.size[llmc::P_QKVW]; i++) p[lay.offset[llmc::P_QKVW] + i] *= kQkvScale;
    return p;
}

// The near/far statistics of one forward (sg, the GPU's) against the CPU's (sc), every layer and head.
void check_near_far(Checks& ck, const llmc::LogitStats& sc, const llmc::LogitStats& sg, int near) {
    if (!sg.has_near_far() || sg.near_mass.size() != sc.near_mass.size()) {
        ck.expect(false, "near/far statistics at N = %d: the CUDA forward returned %zu heads' (want %zu)", near,
                  sg.near_mass.size(), sc.near_mass.size());
        return;
    }
    double worst_mass = 0.0, worst_logit = 0.0;
    long one_sided = 0;
    for (size_t i = 0; i < sc.near_mass.size(); i++) {
        worst_mass = std::max(worst_mass, std::fabs((double)sg.near_mass[i] - sc.near_mass[i]));
        const std::vector<float> llmc::LogitStats::*fields[2] = {&llmc::LogitStats::near_max_logit,
                                                                 &llmc::LogitStats::far_max_logit};
        for (const auto v : fields) {
            const float g = (sg.*v)[i], r = (sc.*v)[i];
            if ((g == -INFINITY) != (r == -INFINITY)) one_sided++;
            else if (r != -INFINITY)
                worst_logit = std::max(worst_logit, std::fabs((double)g - r) / (1.0 + std::fabs(r)));
        }
    }
    ck.expect(worst_mass <= kTolNearMass && worst_logit <= kTolMap && one_sided == 0,
              "near/far statistics at N = %d vs the CPU's: worst near mass |diff| %.3g, worst near/far max logit "
              "|diff| / (1 + |cpu|) %.3g (tol %.0e, %.0e), %ld far maxima -inf on one side only",
              near, worst_mass, worst_logit, kTolNearMass, kTolMap, one_sided);
}

void check_case(Checks& ck, const Case& c, uint64_t seed) {
    const llmc::ModelConfig& cfg = c.cfg;
    const int B = c.B, T = c.T, NH = cfg.num_heads, G = cfg.global_heads, P = cfg.window;
    std::printf("== %s (L %d, C %d, NH %d, G %d, P %d, qk_norm %d, softcap %g, B %d, T %d, near %d)\n", c.name,
                cfg.num_layers, cfg.channels, NH, G, P, (int)cfg.qk_norm, cfg.attn_softcap, B, T, c.near);
    llmc::Rng rng(seed);
    std::vector<int> tokens((size_t)B * T);
    for (int& t : tokens) t = (int)rng.below((uint64_t)cfg.vocab_size);
    const std::vector<float> params = test_params(cfg, seed);
    llmc::CpuBackend cpu(cfg, seed);
    const std::unique_ptr<llmc::Backend> gpu_owner = llmc::cuda_backend::create(cfg, seed);
    llmc::Backend& gpu = *gpu_owner;
    cpu.set_params(params.data());
    gpu.set_params(params.data());
    ck.expect(gpu.has_attention_probs(), "the CUDA backend has attention_probs");
    llmc::LogitStats sc, sg;
    sc.near_distance = sg.near_distance = c.near;
    cpu.forward(tokens.data(), nullptr, B, T, 0.0f, &sc);
    gpu.forward(tokens.data(), nullptr, B, T, 0.0f, &sg);
    check_near_far(ck, sc, sg, c.near);

    const size_t TT = (size_t)T * T;
    std::vector<float> pc(TT), pg(TT);
    double worst_map = 0.0, worst_sum = 0.0, least_spread = 1e30;
    long masked_nonzero = 0, nonfinite = 0;
    for (int l = 0; l < cfg.num_layers; l++)
        for (int h = 0; h < NH; h++)
            for (int b : {0, B - 1}) {
                std::fill(pg.begin(), pg.end(), NAN);
                cpu.attention_probs(l, h, b, pc.data());
                gpu.attention_probs(l, h, b, pg.data());
                const bool local = h < NH - G;
                for (int i = 0; i < T; i++) {
                    double sum = 0.0;
                    for (int j = 0; j < T; j++) {
                        const float p = pg[(size_t)i * T + j];
                        if (!std::isfinite(p)) nonfinite++;
                        const bool visible = j <= i && (!local || j > i - P);
                        if (!visible && p != 0.0f) masked_nonzero++;
                        sum += p;
                    }
                    worst_sum = std::max(worst_sum, std::fabs(sum - 1.0));
                }
                worst_map = std::max(worst_map, gpu_test::rel_error(pg.data(), pc.data(), TT));
                least_spread = std::min(least_spread, spread_from_uniform(pc, T, local, P));
            }
    ck.expect(nonfinite == 0 && masked_nonzero == 0, "every entry finite (%ld not), masked entries 0 (%ld not)",
              nonfinite, masked_nonzero);
    const bool approx_cap = cfg.attn_softcap > 0.0f && llmc::cuda_backend::softcap_uses_tanh_approx();
    const double tol_sum = kTolRowSum + (approx_cap ? std::expm1(2.0 * cfg.attn_softcap * std::ldexp(1.0, -11)) : 0.0);
    ck.expect(worst_sum <= tol_sum, "rows sum to 1: worst |sum - 1| %.3g (tol %.2e)", worst_sum, tol_sum);
    ck.expect(worst_map <= kTolMap, "maps vs the CPU backend's: worst relative error %.3g (tol %.0e)", worst_map,
              kTolMap);
    // a map from the wrong q, k or lse would be another non-uniform map: it must differ from the
    // right one by far more than the tolerance (P = 1 is one-hot: spread 0, checked exactly above)
    if (P > 1)
        ck.expect(least_spread >= kMinSpread, "the CPU maps are far from uniform: least spread %.3g (>= %.2g)",
                  least_spread, kMinSpread);
}

}  // namespace

int main() {
    if (!gpu_test::have_gpu("test_cuda_attention_probs")) return 1;
    Checks ck;
    std::printf("test_cuda_attention_probs: %s, build %s\n", llmc::cuda_backend::device_description().c_str(),
                llmc::cuda_backend::precision_name());
    const uint64_t seed = std::random_device{}() | 1u;
    std::printf("seed %llu\n", (unsigned long long)seed);
    using gpu_test::model_config;  // (L, C, NH, G, P, V, maxT, qk_norm, softcap, tied)
    const Case cases[] = {
        {"ls, ragged T", model_config(2, 64, 2, 1, 5, 100, 64, false, 0.0f, true), 2, 37, 3},
        {"mhsa, soft-cap", model_config(1, 64, 2, 2, 8, 100, 64, false, 1.5f, true), 2, 40, 8},
        {"all-local, qk-norm, hd 64", model_config(1, 128, 2, 0, 9, 100, 64, true, 0.0f, true), 2, 33, 4},
        {"ls, P >= T", model_config(1, 64, 2, 1, 64, 100, 64, false, 0.0f, true), 1, 48, 20},
        {"all-local, P = 1", model_config(1, 64, 2, 0, 1, 100, 64, false, 0.0f, true), 2, 20, 1},
    };
    uint64_t s = seed;
    for (const Case& c : cases) {
        try {
            check_case(ck, c, s++);
        } catch (const std::exception& e) {
            ck.failures++;
            std::printf("  FAIL %s threw: %s\n", c.name, e.what());
        }
    }
    // misuse: no forward yet, and out-of-range layer / head / sequence
    try {
        const llmc::ModelConfig cfg = model_config(1, 64, 2, 1, 4, 100, 16, false, 0.0f, true);
        const std::unique_ptr<llmc::Backend> gpu_owner = llmc::cuda_backend::create(cfg, 1);
        llmc::Backend& gpu = *gpu_owner;
        std::vector<float> out(16 * 16);
        bool threw = false;
        try {
            gpu.attention_probs(0, 0, 0, out.data());
        } catch (const std::logic_error&) { threw = true; }
        ck.expect(threw, "attention_probs before any forward throws std::logic_error");
        std::vector<int> tokens(2 * 16, 3);
        gpu.forward(tokens.data(), nullptr, 2, 16, 0.0f, nullptr);
        int refused = 0;
        const int bad[4][3] = {{1, 0, 0}, {0, 2, 0}, {0, 0, 2}, {-1, 0, 0}};  // (layer, head, sequence)
        for (const auto& lhb : bad) {
            try {
                gpu.attention_probs(lhb[0], lhb[1], lhb[2], out.data());
            } catch (const llmc::InputError&) { refused++; }
        }
        ck.expect(refused == 4, "out-of-range layer, head, sequence refused with InputError (%d of 4)", refused);
    } catch (const std::exception& e) {
        ck.failures++;
        std::printf("  FAIL misuse checks threw: %s\n", e.what());
    }
    if (ck.failures) {
        std::printf("test_cuda_attention_probs: %d check(s) FAILED\n", ck.failures);
        return 1;
    }
    std::printf("test_cuda_attention_probs: all checks passed\n");
    return 0;
}
