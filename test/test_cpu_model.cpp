// The whole CPU model (llmc/cpu/gpt2_cpu.h) and CpuBackend: gradients of every parameter against
// central finite differences in double, float vs double forward, padded vocabulary, causality and
// the sliding window end to end, logit statistics against a brute-force recomputation, AdamW
// training, determinism and thread-count independence, input errors.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/core/init.h"
#include "llmc/core/rng.h"

using namespace llmc;
using llmc::cpu::CpuBackend;
using llmc::cpu::Gpt2Cpu;

namespace {

struct Variant {
    const char* name;
    bool qk_norm;
    float softcap;
    float z_weight;
    bool untied;
    bool bias = true;
    Gelu gelu = Gelu::Tanh;
    // whether the variant changes what reaches the attention logits or their gradient (QK-norm,
    // soft-capping, the q/k biases): only those are checked on every layout of the heads
    bool in_attention() const { return qk_norm || softcap > 0 || !bias; }
};

// The last three: the paper code's model (no biases anywhere, exact GELU, untied), with every
// stabilizer, and erf GELU alone.
const Variant kVariants[] = {
    {"plain", false, 0.0f, 0.0f, false},
    {"qk_norm", true, 0.0f, 0.0f, false},
    {"softcap", false, 1.0f, 0.0f, false},
    {"z_loss", false, 0.0f, 0.1f, false},
    {"untied", false, 0.0f, 0.0f, true},
    {"combined", true, 1.0f, 0.1f, true},
    {"paper (no bias, erf, untied)", false, 0.0f, 0.0f, true, false, Gelu::Erf},
    {"paper + every stabilizer", true, 1.0f, 0.1f, true, false, Gelu::Erf},
    {"erf", false, 0.0f, 0.0f, false, true, Gelu::Erf},
};

struct Layout {
    const char* name;
    int G, P;
};
// NH = 4: one global head + three local heads with window 3; MHSA; all-local.
const Layout kLayouts[] = {{"local G=1 P=3", 1, 3}, {"MHSA G=NH", 4, 3}, {"all-local G=0 P=3", 0, 3}};

ModelConfig tiny_config(int G, int P, const Variant& v) {
    ModelConfig c;
    c.num_layers = 2;
    c.channels = 16;
    c.num_heads = 4;  // hd = 4
    c.global_heads = G;
    c.window = P;
    c.vocab_size = 11;
    c.padded_vocab_size = 128;
    c.max_seq_len = 8;
    c.qk_norm = v.qk_norm;
    c.attn_softcap = v.softcap;
    c.tied_embeddings = !v.untied;
    c.bias = v.bias;
    c.gelu = v.gelu;
    return c;
}

bool is_gain(int id) { return id == P_LN1W || id == P_LN2W || id == P_LNFW || id == P_QNORMW || id == P_KNORMW; }
bool is_bias(int id) {
    return id == P_LN1B || id == P_LN2B || id == P_LNFB || id == P_QKVB || id == P_ATTPROJB || id == P_FCB ||
           id == P_FCPROJB || id == P_QNORMB || id == P_KNORMB;
}

// Weights of order one (not GPT-2's small init) so every path, bias and gain carries a sizeable
// gradient and the soft-cap's tanh is in its nonlinear range. Padded vocabulary rows are random too.
template <typename F>
void randomize(Gpt2Cpu<F>& m, uint64_t seed) {
    Rng r(seed);
    const ParamLayout& lay = m.layout();
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        F* p = m.param((ParamId)id);
        for (size_t i = 0; i < lay.size[id]; i++) {
            const double n = r.normal();
            p[i] = (F)(is_gain(id) ? 1.0 + 0.2 * n : is_bias(id) ? 0.2 * n : 0.3 * n);
        }
    }
}

std::vector<int> random_tokens(Rng& r, size_t n, int V) {
    std::vector<int> t(n);
    for (int& x : t) x = (int)r.below((uint64_t)V);
    return t;
}

double rel_norm_err(const std::vector<double>& a, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// Checks d(objective)/d(param) of every tensor against central differences in double:
//   - elementwise: all elements of the real vocabulary rows (all_elements) or a random subset of
//     up to `subset` elements per tensor, |g - fd| <= 2e-6 |fd| + 2e-8 max|fd|, and the norm-based
//     relative error over the checked elements < 1e-7 (observed: ~3e-9 at worst);
//   - along 2 random directions u over the whole tensor: |g.u - fd_u| <= 1e-6 ||g|| ||u|| / sqrt(n);
//   - padded vocabulary rows [V, Vp) of wte / lm_head get exactly zero gradient.
void check_model_gradients(const ModelConfig& cfg, float z_weight, uint64_t seed, bool all_elements) {
    const int B = 2, T = 7, subset = 40;
    const double eps = 1e-5;
    Gpt2Cpu<double> m(cfg);
    randomize(m, seed);
    Rng r(seed * 7919 + 1);
    const std::vector<int> inp = random_tokens(r, (size_t)B * T, cfg.vocab_size);
    const std::vector<int> tgt = random_tokens(r, (size_t)B * T, cfg.vocab_size);
    auto objective = [&]() {
        m.forward(inp.data(), tgt.data(), B, T, z_weight, nullptr);
        return m.objective();
    };
    objective();
    m.zero_grad();
    m.backward(1.0f);
    const std::vector<double> g = m.grads();
    const ParamLayout& lay = m.layout();
    const size_t realC = (size_t)cfg.vocab_size * cfg.channels;

    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        if (lay.size[id] == 0) continue;
        INFO("tensor " << param_name(id));
        double* p = m.param((ParamId)id);
        const double* gt = g.data() + lay.offset[id];
        const bool vocab_rows = id == P_WTE || id == P_LMHEAD;
        const size_t n = vocab_rows ? realC : lay.size[id];  // elements that can affect the loss

        if (vocab_rows) {  // padded rows: never any gradient
            double pad_max = 0;
            for (size_t i = realC; i < lay.size[id]; i++) pad_max = std::max(pad_max, std::fabs(gt[i]));
            CHECK(pad_max == 0.0);
        }

        if (id == P_KNORMB && cfg.attn_softcap == 0.0f) {
            // Analytically zero: a bias shared by every key adds the same q.b to all logits of a
            // row, and the softmax is shift-invariant (the soft-cap's tanh breaks this).
            double gmax = 0;
            for (size_t i = 0; i < n; i++) gmax = std::max(gmax, std::fabs(gt[i]));
            CHECK(gmax < 1e-12);
            continue;
        }
        std::vector<size_t> idx;
        if (all_elements || n <= (size_t)subset) {
            for (size_t i = 0; i < n; i++) idx.push_back(i);
        } else {
            for (int k = 0; k < subset; k++) idx.push_back((size_t)r.below(n));
        }
        std::vector<double> fd(idx.size()), an(idx.size());
        for (size_t k = 0; k < idx.size(); k++) {
            const double old = p[idx[k]];
            p[idx[k]] = old + eps;
            const double fp = objective();
            p[idx[k]] = old - eps;
            const double fm = objective();
            p[idx[k]] = old;
            fd[k] = (fp - fm) / (2 * eps);
            an[k] = gt[idx[k]];
        }
        double fd_max = 0;
        for (double v : fd) fd_max = std::max(fd_max, std::fabs(v));
        double worst = 0;  // worst ratio of error to the allowed error
        for (size_t k = 0; k < idx.size(); k++)
            worst = std::max(worst, std::fabs(an[k] - fd[k]) / (2e-6 * std::fabs(fd[k]) + 2e-8 * fd_max));
        INFO("elements checked " << idx.size() << ", max |fd| " << fd_max);
        CHECK(fd_max > 0.0);
        CHECK(worst <= 1.0);
        CHECK(rel_norm_err(an, fd) < 1e-7);

        // random directions over the whole tensor
        double gnorm = 0;
        for (size_t i = 0; i < n; i++) gnorm += gt[i] * gt[i];
        gnorm = std::sqrt(gnorm);
        for (int rep = 0; rep < 2; rep++) {
            std::vector<double> u(n), saved(p, p + n);
            double gu = 0, unorm = 0;
            for (size_t i = 0; i < n; i++) {
                u[i] = r.normal();
                gu += gt[i] * u[i];
                unorm += u[i] * u[i];
            }
            unorm = std::sqrt(unorm);
            for (size_t i = 0; i < n; i++) p[i] = saved[i] + eps * u[i];
            const double fp = objective();
            for (size_t i = 0; i < n; i++) p[i] = saved[i] - eps * u[i];
            const double fm = objective();
            std::copy(saved.begin(), saved.end(), p);
            const double fdu = (fp - fm) / (2 * eps);
            INFO("direction " << rep << ": g.u " << gu << " fd " << fdu << " ||g|| " << gnorm);
            CHECK(std::fabs(gu - fdu) <= 1e-6 * gnorm * unorm / std::sqrt((double)n));
        }
    }
}

// Brute-force attention statistics of one layer from its attention input (B, T, 3C), in double.
void brute_attention_stats(const ModelConfig& cfg, const float* qkv, int B, int T, std::vector<double>& mx,
                           std::vector<double>& mn, std::vector<double>& ent) {
    const int C = cfg.channels, NH = cfg.num_heads, hd = cfg.head_size();
    mx.assign(NH, -1e300);
    mn.assign(NH, 1e300);
    ent.assign(NH, 0.0);
    for (int h = 0; h < NH; h++) {
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < T; i++) {
                std::vector<double> s;
                for (int j = 0; j <= i; j++) {
                    if (cfg.is_local_head(h) && i - j >= cfg.window) continue;
                    double d = 0;
                    for (int c = 0; c < hd; c++)
                        d += (double)qkv[((size_t)b * T + i) * 3 * C + h * hd + c] *
                             qkv[((size_t)b * T + j) * 3 * C + C + h * hd + c];
                    s.push_back(d / std::sqrt((double)hd));
                }
                double m = -1e300, z = 0, e = 0;
                for (double v : s) {
                    mx[h] = std::max(mx[h], v);
                    mn[h] = std::min(mn[h], v);
                }
                for (double v : s) {
                    const double sp = cfg.attn_softcap > 0 ? cfg.attn_softcap * std::tanh(v / cfg.attn_softcap) : v;
                    m = std::max(m, sp);
                }
                std::vector<double> w;
                for (double v : s) {
                    const double sp = cfg.attn_softcap > 0 ? cfg.attn_softcap * std::tanh(v / cfg.attn_softcap) : v;
                    w.push_back(std::exp(sp - m));
                    z += w.back();
                }
                for (double x : w) e -= (x / z) * std::log(x / z);
                ent[h] += e;
            }
        }
        ent[h] /= (double)B * T;
    }
}

ModelConfig small_config() {
    ModelConfig c;
    c.num_layers = 2;
    c.channels = 32;
    c.num_heads = 4;
    c.global_heads = 1;
    c.window = 4;
    c.vocab_size = 50;
    c.padded_vocab_size = 128;
    c.max_seq_len = 16;
    return c;
}

}  // namespace

namespace {
// RAII: runs a scope with a given OpenMP thread count (restored on exit, also when a REQUIRE throws).
struct OmpThreads {
    int saved;
    explicit OmpThreads(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
    ~OmpThreads() { omp_set_num_threads(saved); }
};
}  // namespace

TEST_CASE("whole model gradients match finite differences (double, every tensor)", "[cpu_model]") {
    // Tens of thousands of tiny forwards: one thread avoids the fork/join cost of each op's
    // parallel region (thread-count independence is tested separately below).
    OmpThreads one(1);
    uint64_t seed = 100;
    for (const Layout& lo : kLayouts) {
        for (const Variant& v : kVariants) {
            // the first layout (global and local heads) takes every variant; the others, the plain
            // model and the variants that change the attention (z-loss, untied and erf GELU act
            // after or beside it, the same on every layout)
            if (&lo != &kLayouts[0] && !(v.in_attention() || std::string(v.name) == "plain")) continue;
            const bool all = &lo == &kLayouts[0] && std::string(v.name) == "combined";
            INFO("layout " << lo.name << ", variant " << v.name);
            // every element of every tensor for LS layout + all stabilizers; random subsets (and
            // whole-tensor random directions) for the rest, to keep the test a few seconds
            check_model_gradients(tiny_config(lo.G, lo.P, v), v.z_weight, ++seed, all);
        }
    }
}

TEST_CASE("backward adds grad_scale times the gradient", "[cpu_model]") {
    const ModelConfig cfg = tiny_config(1, 3, kVariants[5]);
    Gpt2Cpu<double> m(cfg);
    randomize(m, 7);
    Rng r(8);
    const auto inp = random_tokens(r, 14, cfg.vocab_size), tgt = random_tokens(r, 14, cfg.vocab_size);
    m.forward(inp.data(), tgt.data(), 2, 7, 0.1f, nullptr);
    m.zero_grad();
    m.backward(1.0f);
    const std::vector<double> g1 = m.grads();
    m.backward(1.0f);  // accumulates
    std::vector<double> twice(g1.size());
    for (size_t i = 0; i < g1.size(); i++) twice[i] = 2 * g1[i];
    CHECK(rel_norm_err(m.grads(), twice) < 1e-14);
    m.zero_grad();
    m.backward(1.0f);  // deterministic
    CHECK(m.grads() == g1);
    m.zero_grad();
    m.backward(0.25f);
    std::vector<double> quarter(g1.size());
    for (size_t i = 0; i < g1.size(); i++) quarter[i] = 0.25 * g1[i];
    CHECK(rel_norm_err(m.grads(), quarter) < 1e-14);
}

TEST_CASE("float and double forward and backward agree", "[cpu_model]") {
    for (const Variant& v : kVariants) {
        INFO("variant " << v.name);
        ModelConfig cfg = small_config();
        cfg.qk_norm = v.qk_norm;
        cfg.attn_softcap = v.softcap;
        cfg.tied_embeddings = !v.untied;
        cfg.bias = v.bias;
        cfg.gelu = v.gelu;
        Gpt2Cpu<double> md(cfg);
        randomize(md, 31);
        Gpt2Cpu<float> mf(cfg);
        mf.set_params(md.params().data());
        // double starts from exactly the float weights
        md.set_params(mf.params().data());
        const int B = 2, T = 16;
        Rng r(32);
        const auto inp = random_tokens(r, B * T, cfg.vocab_size), tgt = random_tokens(r, B * T, cfg.vocab_size);
        const ForwardResult rf = mf.forward(inp.data(), tgt.data(), B, T, v.z_weight, nullptr);
        md.forward(inp.data(), tgt.data(), B, T, v.z_weight, nullptr);
        CHECK(std::fabs(rf.loss + rf.z_loss - md.objective()) <= 1e-6 * std::fabs(md.objective()));
        std::vector<double> lf, ld;
        for (int i = 0; i < B * T; i++)
            for (int j = 0; j < cfg.vocab_size; j++) {
                lf.push_back(mf.logits()[(size_t)i * cfg.padded_vocab_size + j]);
                ld.push_back(md.logits()[(size_t)i * cfg.padded_vocab_size + j]);
            }
        CHECK(rel_norm_err(lf, ld) < 5e-6);
        mf.zero_grad();
        mf.backward(1.0f);
        md.zero_grad();
        md.backward(1.0f);
        double all_norm = 0;
        for (double x : md.grads()) all_norm += x * x;
        all_norm = std::sqrt(all_norm);
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            const size_t off = md.layout().offset[id], n = md.layout().size[id];
            if (n == 0) continue;
            INFO("tensor " << param_name(id));
            std::vector<double> gf(mf.grads().begin() + off, mf.grads().begin() + off + n);
            std::vector<double> gd(md.grads().begin() + off, md.grads().begin() + off + n);
            if (id == P_KNORMB && v.softcap == 0.0f) {  // analytically zero (see the FD test)
                double gf_norm = 0;
                for (double x : gf) gf_norm += x * x;
                CHECK(std::sqrt(gf_norm) < 1e-6 * all_norm);
                continue;
            }
            CHECK(rel_norm_err(gf, gd) < 2e-5);
        }
    }
}

TEST_CASE("padded vocabulary rows never affect the loss and get no gradient", "[cpu_model]") {
    for (bool untied : {false, true}) {
        INFO("untied " << untied);
        Variant v = kVariants[0];
        v.untied = untied;
        const ModelConfig cfg = tiny_config(1, 3, v);
        Gpt2Cpu<double> m(cfg);
        randomize(m, 41);  // padded rows random
        Rng r(42);
        const auto inp = random_tokens(r, 14, cfg.vocab_size), tgt = random_tokens(r, 14, cfg.vocab_size);
        m.forward(inp.data(), tgt.data(), 2, 7, 0.1f, nullptr);
        const double with_pad = m.objective();
        m.zero_grad();
        m.backward(1.0f);
        const size_t realC = (size_t)cfg.vocab_size * cfg.channels;
        for (ParamId id : {P_WTE, P_LMHEAD}) {
            const size_t n = m.layout().size[id];
            for (size_t i = realC; i < n; i++) {
                REQUIRE(m.grad(id)[i] == 0.0);
                m.param(id)[i] = 0.0;
            }
        }
        m.forward(inp.data(), tgt.data(), 2, 7, 0.1f, nullptr);
        CHECK(m.objective() == with_pad);
    }
}

TEST_CASE("the model is causal and local heads see only their window, end to end", "[cpu_model]") {
    // all-local, L = 2, P = 3: token t reaches positions t .. t + L*(P-1) and nothing else.
    for (const Layout& lo : {Layout{"all-local", 0, 3}, Layout{"MHSA", 4, 3}}) {
        INFO(lo.name);
        const ModelConfig cfg = tiny_config(lo.G, lo.P, kVariants[5]);
        Gpt2Cpu<double> m(cfg);
        randomize(m, 51);
        const int T = 8, t0 = 1, Vp = cfg.padded_vocab_size;
        Rng r(52);
        auto inp = random_tokens(r, T, cfg.vocab_size);
        m.forward(inp.data(), nullptr, 1, T, 0.0f, nullptr);
        const std::vector<double> before(m.logits(), m.logits() + (size_t)T * Vp);
        inp[t0] = (inp[t0] + 1) % cfg.vocab_size;
        m.forward(inp.data(), nullptr, 1, T, 0.0f, nullptr);
        const int reach = lo.G == 0 ? t0 + cfg.num_layers * (lo.P - 1) : T - 1;
        for (int t = 0; t < T; t++) {
            bool same = true;
            for (int j = 0; j < cfg.vocab_size; j++)
                same = same && m.logits()[(size_t)t * Vp + j] == before[(size_t)t * Vp + j];
            INFO("position " << t);
            CHECK(same == (t < t0 || t > reach));
        }
    }
}

TEST_CASE("local heads with a window >= T are global heads", "[cpu_model]") {
    Variant v = kVariants[5];
    ModelConfig local = tiny_config(0, 8, v), global = tiny_config(4, 8, v);
    Gpt2Cpu<double> ml(local), mg(global);
    randomize(ml, 61);
    mg.set_params(ml.params().data());
    Rng r(62);
    const auto inp = random_tokens(r, 16, local.vocab_size), tgt = random_tokens(r, 16, local.vocab_size);
    ml.forward(inp.data(), tgt.data(), 2, 8, 0.1f, nullptr);
    mg.forward(inp.data(), tgt.data(), 2, 8, 0.1f, nullptr);
    CHECK(std::fabs(ml.objective() - mg.objective()) <= 1e-12 * std::fabs(mg.objective()));
}

TEST_CASE("LogitStats: L x NH entries matching a brute-force recomputation", "[cpu_model]") {
    for (bool qk : {false, true}) {
        INFO("qk_norm " << qk);
        ModelConfig cfg = small_config();
        cfg.num_heads = 4;
        cfg.global_heads = 1;
        cfg.window = 3;
        cfg.qk_norm = qk;
        cfg.attn_softcap = 1.5f;
        Gpt2Cpu<float> m(cfg);
        randomize(m, 71);
        const int B = 2, T = 16;
        Rng r(72);
        const auto inp = random_tokens(r, B * T, cfg.vocab_size), tgt = random_tokens(r, B * T, cfg.vocab_size);
        LogitStats st;
        m.forward(inp.data(), tgt.data(), B, T, 0.0f, &st);
        REQUIRE(st.num_layers == cfg.num_layers);
        REQUIRE(st.num_heads == cfg.num_heads);
        REQUIRE(st.max_logit.size() == (size_t)cfg.num_layers * cfg.num_heads);
        REQUIRE(st.min_logit.size() == st.max_logit.size());
        REQUIRE(st.entropy.size() == st.max_logit.size());
        const size_t N = (size_t)B * T, C = cfg.channels;
        for (int l = 0; l < cfg.num_layers; l++) {
            const float* att_in = (qk ? m.acts().qkvn.data() : m.acts().qkv.data()) + l * N * 3 * C;
            std::vector<double> mx, mn, ent;
            brute_attention_stats(cfg, att_in, B, T, mx, mn, ent);
            for (int h = 0; h < cfg.num_heads; h++) {
                INFO("layer " << l << " head " << h);
                const size_t k = (size_t)l * cfg.num_heads + h;
                CHECK(st.max_logit[k] == Approx(mx[h]).epsilon(1e-5));
                CHECK(st.min_logit[k] == Approx(mn[h]).epsilon(1e-5));
                CHECK(st.entropy[k] == Approx(ent[h]).epsilon(1e-5));
                CHECK(st.min_logit[k] < st.max_logit[k]);
            }
        }
        // output softmax statistics over the real vocabulary
        double omax = -1e300, lse_sum = 0;
        for (size_t i = 0; i < N; i++) {
            const float* row = m.logits() + i * cfg.padded_vocab_size;
            double rm = -1e300, z = 0;
            for (int j = 0; j < cfg.vocab_size; j++) rm = std::max(rm, (double)row[j]);
            for (int j = 0; j < cfg.vocab_size; j++) z += std::exp(row[j] - rm);
            omax = std::max(omax, rm);
            lse_sum += rm + std::log(z);
        }
        CHECK(st.out_max_logit == Approx(omax).epsilon(1e-6));
        CHECK(st.out_mean_lse == Approx(lse_sum / N).epsilon(1e-5));
        // the same pass without statistics gives the same loss; statistics also come without targets
        const float loss = m.forward(inp.data(), tgt.data(), B, T, 0.0f, &st).loss;
        CHECK(m.forward(inp.data(), tgt.data(), B, T, 0.0f, nullptr).loss == loss);
        LogitStats st2;
        m.forward(inp.data(), nullptr, B, T, 0.0f, &st2);
        CHECK(st2.max_logit == st.max_logit);
        CHECK(st2.out_max_logit == st.out_max_logit);
        CHECK(st2.out_mean_lse == st.out_mean_lse);
    }
}

TEST_CASE("init_params: GPT-2 initialization in table order", "[cpu_model][init]") {
    ModelConfig cfg = small_config();
    cfg.qk_norm = true;
    cfg.tied_embeddings = false;
    const std::vector<float> p = init_params(cfg, 1234);
    const ParamLayout lay = param_layout(cfg);
    REQUIRE(p.size() == lay.total);
    CHECK(init_params(cfg, 1234) == p);
    CHECK(init_params(cfg, 1235) != p);
    const size_t realC = (size_t)cfg.vocab_size * cfg.channels;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        INFO("tensor " << param_name(id));
        const float* t = p.data() + lay.offset[id];
        size_t n = lay.size[id];
        if (id == P_WTE || id == P_LMHEAD) {
            for (size_t i = realC; i < n; i++) REQUIRE(t[i] == 0.0f);
            n = realC;
        }
        if (is_gain(id)) {
            for (size_t i = 0; i < n; i++) REQUIRE(t[i] == 1.0f);
            continue;
        }
        if (is_bias(id)) {
            for (size_t i = 0; i < n; i++) REQUIRE(t[i] == 0.0f);
            continue;
        }
        double s = 0, s2 = 0;
        for (size_t i = 0; i < n; i++) {
            s += t[i];
            s2 += (double)t[i] * t[i];
        }
        const double mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
        const double want = (id == P_ATTPROJW || id == P_FCPROJW) ? 0.02 / std::sqrt(2.0 * cfg.num_layers) : 0.02;
        CHECK(std::fabs(mean) < 5 * want / std::sqrt((double)n));  // 5 standard errors
        CHECK(sd == Approx(want).epsilon(0.1));
    }
    // the first tensor drawn is wte's real rows, straight from the RNG
    Rng r(1234);
    CHECK(p[lay.offset[P_WTE]] == 0.02f * r.normal());
}

TEST_CASE("CpuBackend: AdamW lowers the loss, repeats bit for bit, ignores the thread count", "[cpu_model]") {
    ModelConfig cfg = small_config();
    cfg.qk_norm = true;
    cfg.attn_softcap = 5.0f;
    const int B = 4, T = 16;
    Rng r(81);
    const auto inp = random_tokens(r, B * T, cfg.vocab_size), tgt = random_tokens(r, B * T, cfg.vocab_size);
    AdamWHyper h;
    h.lr = 1e-2f;

    auto train = [&](int steps, std::vector<float>& losses, std::vector<float>& params) {
        CpuBackend be(cfg, 7);
        losses.clear();
        for (int t = 1; t <= steps; t++) {
            be.zero_grad();
            losses.push_back(be.forward(inp.data(), tgt.data(), B, T, 1e-4f, nullptr).loss);
            be.backward(1.0f);
            const float norm = be.grad_norm();
            be.adamw_update(h, t, std::min(1.0f, 1.0f / norm));
        }
        params.resize(be.num_params());
        be.get_params(params.data());
    };
    std::vector<float> l1, p1, l2, p2;
    train(15, l1, p1);
    INFO("loss " << l1.front() << " -> " << l1.back());
    CHECK(l1.front() == Approx(std::log((double)cfg.vocab_size)).epsilon(0.05));  // GPT-2 init: near uniform
    CHECK(l1.back() < 0.6f * l1.front());
    train(15, l2, p2);
    CHECK(l1 == l2);
    CHECK(p1 == p2);

    // thread count: loss, gradients, statistics and the update are identical with 1 and 2 threads
    std::vector<float> loss_t, grads_t[2], params_t[2], stats_t[2];
    for (int k = 0; k < 2; k++) {
        OmpThreads threads(k + 1);
        CpuBackend be(cfg, 9);
        LogitStats st;
        be.zero_grad();
        loss_t.push_back(be.forward(inp.data(), tgt.data(), B, T, 1e-4f, &st).loss);
        be.backward(1.0f);
        grads_t[k].resize(be.num_params());
        be.get_grads(grads_t[k].data());
        stats_t[k] = st.max_logit;
        stats_t[k].insert(stats_t[k].end(), st.entropy.begin(), st.entropy.end());
        stats_t[k].push_back(be.grad_norm());
        be.adamw_update(h, 1, 1.0f);
        params_t[k].resize(be.num_params());
        be.get_params(params_t[k].data());
    }
    CHECK(loss_t[0] == loss_t[1]);
    CHECK(grads_t[0] == grads_t[1]);
    CHECK(stats_t[0] == stats_t[1]);
    CHECK(params_t[0] == params_t[1]);
}

TEST_CASE("CpuBackend: weight decay only on matrices and embeddings; state round trip", "[cpu_model]") {
    const ModelConfig cfg = tiny_config(1, 3, kVariants[5]);
    CpuBackend be(cfg, 3);
    const size_t n = be.num_params();
    std::vector<float> p0(n), p1(n), zeros(n, 0.0f);
    be.get_params(p0.data());
    be.set_grads(zeros.data());
    AdamWHyper h;
    h.lr = 0.5f;
    h.weight_decay = 0.1f;
    be.adamw_update(h, 1, 1.0f);  // zero gradient: only weight decay moves parameters
    be.get_params(p1.data());
    const ParamLayout lay = param_layout(cfg);
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        INFO("tensor " << param_name(id));
        for (size_t i = lay.offset[id]; i < lay.offset[id] + lay.size[id]; i++) {
            const float want = param_gets_weight_decay(id) ? p0[i] - 0.5f * (0.1f * p0[i]) : p0[i];
            REQUIRE(p1[i] == Approx(want).epsilon(1e-6).margin(1e-12));
        }
    }
    std::vector<float> m(n), v(n), m2(n), v2(n);
    for (size_t i = 0; i < n; i++) {
        m[i] = 0.001f * i;
        v[i] = 0.002f * i;
    }
    be.set_optimizer_state(m.data(), v.data());
    be.get_optimizer_state(m2.data(), v2.data());
    CHECK(m == m2);
    CHECK(v == v2);
}

TEST_CASE("CpuBackend refuses tokens outside the vocabulary and T > max_seq_len", "[cpu_model]") {
    const ModelConfig cfg = small_config();
    CpuBackend be(cfg, 1);
    std::vector<int> ok(2 * 8, 3), bad = ok, neg = ok;
    bad[5] = cfg.vocab_size;
    neg[0] = -1;
    CHECK_NOTHROW(be.forward(ok.data(), ok.data(), 2, 8, 0.0f, nullptr));
    CHECK_THROWS_AS(be.forward(bad.data(), ok.data(), 2, 8, 0.0f, nullptr), InputError);
    CHECK_THROWS_AS(be.forward(ok.data(), bad.data(), 2, 8, 0.0f, nullptr), InputError);
    CHECK_THROWS_AS(be.forward(neg.data(), ok.data(), 2, 8, 0.0f, nullptr), InputError);
    std::vector<int> longer((size_t)cfg.max_seq_len + 1, 1);
    CHECK_THROWS_AS(be.forward(longer.data(), longer.data(), 1, cfg.max_seq_len + 1, 0.0f, nullptr), InputError);
    CHECK_THROWS_WITH(be.forward(bad.data(), ok.data(), 2, 8, 0.0f, nullptr), Catch::Contains("vocabulary"));
    // the message names the first bad id of the first array that has one (check_token_batch's pass
    // without branches, then its search): two bad inputs, then a negative target behind good inputs
    std::vector<int> two_bad = ok;
    two_bad[3] = cfg.vocab_size + 7;
    two_bad[11] = -4;
    CHECK_THROWS_WITH(be.forward(two_bad.data(), neg.data(), 2, 8, 0.0f, nullptr),
                      Catch::Contains("input token " + std::to_string(cfg.vocab_size + 7) + " at position 3 "));
    std::vector<int> neg_late = ok;
    neg_late[15] = -2;
    CHECK_THROWS_WITH(be.forward(ok.data(), neg_late.data(), 2, 8, 0.0f, nullptr),
                      Catch::Contains("target token -2 at position 15 "));
    ModelConfig broken = cfg;
    broken.channels = 30;  // not divisible by 4 heads
    CHECK_THROWS_AS(CpuBackend(broken, 1), InputError);
}

TEST_CASE("activations grow with B*T and smaller batches reuse them", "[cpu_model]") {
    const ModelConfig cfg = small_config();
    Gpt2Cpu<float> m(cfg);
    m.set_params(init_params(cfg, 5).data());
    Rng r(91);
    const auto inp = random_tokens(r, 4 * 16, cfg.vocab_size), tgt = random_tokens(r, 4 * 16, cfg.vocab_size);
    const float small1 = m.forward(inp.data(), tgt.data(), 1, 8, 0.0f, nullptr).loss;
    m.forward(inp.data(), tgt.data(), 4, 16, 0.0f, nullptr);
    const float small2 = m.forward(inp.data(), tgt.data(), 1, 8, 0.0f, nullptr).loss;
    CHECK(small1 == small2);
    Gpt2Cpu<float> fresh(cfg);
    fresh.set_params(init_params(cfg, 5).data());
    CHECK(fresh.forward(inp.data(), tgt.data(), 1, 8, 0.0f, nullptr).loss == small1);
}
