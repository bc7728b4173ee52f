// The CPU backend against the independent PyTorch reference (dev/reference/): for every committed
// fixture (test/fixtures/<name>_model.bin + <name>_debug.bin, written by make_fixtures.py in
// float64), load the model with load_model_checkpoint, run CpuBackend forward/backward on the
// fixture's batch and compare logits, loss, z-loss, attention/output logit statistics, every
// gradient tensor, and the losses and gradient norms of N AdamW steps on that batch.
// The debug-state format is documented in dev/reference/README.md; test/reference_fixture.h reads it
// (shared with the GPU test test/gpu/test_cuda_model.cu, which checks CudaBackend against the
// head-size-32 fixtures).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/core/params.h"
#include "test/reference_fixture.h"

namespace {

using llmc_test::DebugState;
using llmc_test::fixture_path;
using llmc_test::read_debug_state;

double rel_error(const float* a, const float* b, size_t n, double* max_abs = nullptr) {
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
        mx = std::max(mx, std::fabs(d));
        if (std::isnan(a[i])) mx = INFINITY;
    }
    if (max_abs) *max_abs = mx;
    return std::sqrt(num) / std::sqrt(den);
}

// |a - b| <= tol * (1 + |b|) for a scalar of order one; NaN never passes.
bool close(double a, double b, double tol) { return std::fabs(a - b) <= tol * (1.0 + std::fabs(b)); }

void check_fixture(const std::string& name) {
    INFO("fixture " << name);
    const llmc::ModelCheckpoint ck = llmc::load_model_checkpoint(fixture_path(name + "_model.bin"));
    const DebugState d = read_debug_state(fixture_path(name + "_debug.bin"));
    const llmc::ModelConfig& cfg = ck.config;
    REQUIRE(cfg.vocab_size == d.V);
    REQUIRE(cfg.padded_vocab_size == d.Vp);
    REQUIRE(cfg.num_layers == d.L);
    REQUIRE(cfg.num_heads == d.NH);
    REQUIRE(ck.params.size() == d.num_params);
    REQUIRE(llmc::param_layout(cfg).total == d.num_params);

    llmc::cpu::CpuBackend backend(cfg, 1234);
    backend.set_params(ck.params.data());
    const int B = d.B, T = d.T, V = d.V, Vp = d.Vp;

    // ---- forward: logits, losses, statistics
    llmc::LogitStats stats;
    const llmc::ForwardResult r = backend.forward(d.inputs.data(), d.targets.data(), B, T, d.z_weight, &stats);
    const float* logits = backend.logits();  // (B, T, Vp)
    std::vector<float> real((size_t)B * T * V);
    for (size_t i = 0; i < (size_t)B * T; i++) std::copy(logits + i * Vp, logits + i * Vp + V, real.begin() + i * V);
    double max_abs = 0;
    const double logit_rel = rel_error(real.data(), d.logits.data(), real.size(), &max_abs);
    INFO("logits: relative error " << logit_rel << ", max abs diff " << max_abs);
    CHECK(logit_rel <= 1e-5);
    size_t bad = 0;
    for (size_t i = 0; i < real.size(); i++)
        if (!close(real[i], d.logits[i], 1e-5)) bad++;
    CHECK(bad == 0);
    INFO("loss " << r.loss << " vs " << d.loss << ", z_loss " << r.z_loss << " vs " << d.z_loss);
    CHECK(std::fabs(r.loss - d.loss) <= 1e-5 * std::fabs(d.loss));
    CHECK(std::fabs(r.z_loss - d.z_loss) <= 1e-5 * std::fabs(d.z_loss));
    REQUIRE(stats.max_logit.size() == (size_t)d.L * d.NH);
    for (size_t i = 0; i < stats.max_logit.size(); i++) {
        INFO("layer " << i / d.NH << " head " << i % d.NH << ": max " << stats.max_logit[i] << " vs " << d.attn_max[i]
                      << ", min " << stats.min_logit[i] << " vs " << d.attn_min[i] << ", entropy " << stats.entropy[i]
                      << " vs " << d.attn_entropy[i]);
        CHECK(close(stats.max_logit[i], d.attn_max[i], 1e-5));
        CHECK(close(stats.min_logit[i], d.attn_min[i], 1e-5));
        CHECK(close(stats.entropy[i], d.attn_entropy[i], 1e-5));
    }
    CHECK(close(stats.out_max_logit, d.out_max_logit, 1e-5));
    CHECK(close(stats.out_mean_lse, d.out_mean_lse, 1e-5));

    // ---- backward: every gradient tensor. Relative per tensor, with a floor of 1e-3 of the whole
    // gradient's norm for tensors whose gradient is zero in exact arithmetic (e.g. the k-norm bias
    // without soft-capping, softmax being shift invariant), where fp32 leaves only rounding noise.
    backend.zero_grad();
    backend.backward(1.0f);
    std::vector<float> grads(d.num_params);
    backend.get_grads(grads.data());
    const llmc::ParamLayout lay = llmc::param_layout(cfg);
    double total = 0;
    for (float g : d.grads) total += (double)g * g;
    total = std::sqrt(total);
    for (int id = 0; id < llmc::NUM_PARAM_TENSORS; id++) {
        const size_t off = lay.offset[id], n = lay.size[id];
        if (n == 0) continue;
        double num = 0, den = 0;
        bool finite = true;
        for (size_t i = off; i < off + n; i++) {
            const double diff = (double)grads[i] - d.grads[i];
            num += diff * diff;
            den += (double)d.grads[i] * d.grads[i];
            finite = finite && std::isfinite(grads[i]);
        }
        const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-3 * total);
        INFO("gradient of " << llmc::param_name(id) << ": relative error " << err << " (reference norm "
                            << std::sqrt(den) << ")");
        CHECK(finite);
        CHECK(err <= 1e-4);
    }

    // ---- N AdamW steps on the same batch; loss and gradient norm are measured before update t
    llmc::AdamWHyper h;
    h.lr = d.lr;
    h.beta1 = d.beta1;
    h.beta2 = d.beta2;
    h.eps = d.eps;
    h.weight_decay = d.weight_decay;
    for (int t = 1; t <= d.n_steps; t++) {
        backend.zero_grad();
        const llmc::ForwardResult rt = backend.forward(d.inputs.data(), d.targets.data(), B, T, d.z_weight, nullptr);
        backend.backward(1.0f);
        const float norm = backend.grad_norm();
        INFO("AdamW step " << t << ": loss " << rt.loss << " vs " << d.step_loss[t - 1] << " (relative error "
                           << std::fabs(rt.loss - d.step_loss[t - 1]) / d.step_loss[t - 1] << "), z_loss " << rt.z_loss
                           << " vs " << d.step_z_loss[t - 1] << ", grad norm " << norm << " vs "
                           << d.step_grad_norm[t - 1]);
        CHECK(std::fabs(rt.loss - d.step_loss[t - 1]) <= 1e-4 * std::fabs(d.step_loss[t - 1]));
        CHECK(std::fabs(rt.z_loss - d.step_z_loss[t - 1]) <= 1e-4 * std::fabs(d.step_z_loss[t - 1]));
        CHECK(std::fabs(norm - d.step_grad_norm[t - 1]) <= 1e-4 * d.step_grad_norm[t - 1]);
        backend.adamw_update(h, t, std::min(1.0f, d.grad_clip / norm));
    }
}

}  // namespace

TEST_CASE("CPU backend matches the PyTorch reference on every fixture", "[reference]") {
    // dev/reference/make_fixtures.py: LS (G=1, P=3), MHSA, all-local with QK-norm + soft-cap +
    // z-loss + untied head, and window 1 with 2 global heads + QK-norm + z-loss (head size 8); then
    // head size 32 (bf16 model files; also used by the GPU test): LS (G=1 of 2, P=4), MHSA (2 heads),
    // two layers of an all-local head (P=5) with QK-norm + soft-cap + z-loss. The paper's configuration
    // (no bias anywhere, erf GELU, untied head, local heads + one global head): "paper" (head size 4)
    // and "paper_qknorm_hd32" (with QK-norm, gains only; z-loss; bf16 model file).
    for (const char* name : {"ls", "mhsa", "local_qknorm_softcap", "ls_p1_qknorm", "paper", "ls_hd32", "mhsa_hd32",
                             "local_qknorm_softcap_hd32", "paper_qknorm_hd32"}) {
        DYNAMIC_SECTION(name) { check_fixture(name); }
    }
}

TEST_CASE("the paper fixtures hold the model options they are meant to cover", "[reference]") {
    // A fixture that silently lost its options (header words 20/21 written as 0) would pass the
    // comparison above while testing nothing new.
    for (const char* name : {"paper", "paper_qknorm_hd32"}) {
        INFO("fixture " << name);
        const llmc::ModelConfig c = llmc::load_model_checkpoint(fixture_path(std::string(name) + "_model.bin")).config;
        CHECK_FALSE(c.bias);
        CHECK(c.gelu == llmc::Gelu::Erf);
        CHECK_FALSE(c.tied_embeddings);
        CHECK(c.global_heads >= 1);
        CHECK(c.local_heads() >= 1);
        CHECK(c.window < c.max_seq_len);
        CHECK(c.qk_norm == (std::string(name) == "paper_qknorm_hd32"));
        const llmc::ParamLayout lay = llmc::param_layout(c);
        for (int id : {llmc::P_LN1B, llmc::P_QKVB, llmc::P_ATTPROJB, llmc::P_LN2B, llmc::P_FCB, llmc::P_FCPROJB,
                       llmc::P_LNFB, llmc::P_QNORMB, llmc::P_KNORMB})
            CHECK(lay.size[id] == 0);
    }
}

TEST_CASE("fixture debug state is self-consistent", "[reference]") {
    // The first AdamW step's loss is the forward loss of the unchanged model.
    const DebugState d = read_debug_state(fixture_path("ls_debug.bin"));
    REQUIRE(d.n_steps >= 2);
    CHECK(d.step_loss[0] == d.loss);
    CHECK(d.step_loss[d.n_steps - 1] < d.step_loss[0]);  // the steps train
}
