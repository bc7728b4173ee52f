// Tests of the tiled CPU attention kernel (llmc/cpu/attention_flash.h, through attention_ls.h and
// kv_cache.h) on every ISA twin this CPU runs and on every head-size instantiation (hd 8, 16, 32,
// 64, 128 are compiled for their size; hd 4, 12 take the generic path):
//   - forward (out, lse, max/min logit, entropy, near mass, near/far max) and backward (dq, dk, dv)
//     in float against a naive full-matrix implementation in double written here, on shapes with
//     several query and key blocks (32 each), windows that straddle block edges, P = 1, soft-cap on
//     and off, the near/far split at the window and elsewhere;
//   - the double instantiation of each twin against the same reference, to double rounding;
//   - the decode over a KV cache equals the forward's row bit for bit, on each twin;
//   - 1, 2 and 3 OpenMP threads give bit-identical results, on each twin.
// test/test_cpu_attention.cpp holds the finite-difference checks and the window-poisoning test of
// the default twin. Inputs are random (llmc::Rng seeded per case, mixed with Catch's --rng-seed).
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "llmc/core/model_config.h"
#include "llmc/core/rng.h"
#include "llmc/cpu/attention_ls.h"
#include "llmc/cpu/kv_cache.h"
#include "llmc/cpu/simd.h"

using llmc::cpu::AttnHeadStats;
using llmc::cpu::Isa;

namespace {

struct Case {
    int B, T, C, NH, G, P, near;  // near 0 = P
    std::string name() const {
        return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " hd=" + std::to_string(C / NH) +
               " NH=" + std::to_string(NH) + " G=" + std::to_string(G) + " P=" + std::to_string(P) +
               " near=" + std::to_string(near);
    }
};

const std::vector<Case> kCases = {
    {2, 97, 32, 4, 1, 33, 0},    // hd 8: three key blocks, a window one key over a block
    {1, 130, 64, 4, 2, 40, 3},   // hd 16: five blocks, near < P
    {2, 75, 96, 3, 1, 50, 0},    // hd 32: the paper's head size and window
    {1, 70, 128, 2, 1, 20, 64},  // hd 64: near > P
    {1, 40, 128, 1, 0, 7, 0},    // hd 128: all-local
    {1, 67, 48, 4, 2, 5, 0},     // hd 12: generic head size
    {2, 33, 12, 3, 3, 1, 0},     // hd 4: MHSA (P unused), generic
    {1, 50, 32, 2, 1, 1, 0},     // hd 16: P = 1, a local head sees only itself
};

uint64_t case_seed(int index) { return 0xF1A5Bull + 6151ull * index + Catch::rngSeed(); }

std::vector<Isa> supported_isas() {
    std::vector<Isa> v;
    for (Isa isa : {Isa::Base, Isa::Avx2, Isa::Avx512})
        if (llmc::cpu::isa_supported(isa)) v.push_back(isa);
    return v;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
    return std::vector<double>(v.begin(), v.end());
}

template <typename A>
double rel_err(const std::vector<A>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return std::sqrt(num / den);  // NaN never passes a < check
}

std::vector<AttnHeadStats> fresh_stats(int NH) {
    return std::vector<AttnHeadStats>(
        NH, AttnHeadStats{-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(), 0.0, 0});
}

// ---- naive reference in double: full T x T matrices with an explicit mask ----------------------
struct Ref {
    std::vector<double> out, lse, dqkv;                                     // (B,T,C), (B,NH,T), (B,T,3C)
    std::vector<double> smax, smin, entropy, near_mass, near_max, far_max;  // (NH)
};

Ref naive(const std::vector<double>& qkv, const std::vector<double>& dout, const Case& c, double cap) {
    const int B = c.B, T = c.T, C = c.C, NH = c.NH, hd = C / NH, N = c.near > 0 ? c.near : c.P;
    const double scale = 1.0 / std::sqrt((double)hd);
    Ref r;
    r.out.assign((size_t)B * T * C, 0.0);
    r.lse.assign((size_t)B * NH * T, 0.0);
    r.dqkv.assign((size_t)B * T * 3 * C, 0.0);
    r.smax.assign(NH, -INFINITY);
    r.smin.assign(NH, INFINITY);
    r.entropy.assign(NH, 0.0);
    r.near_mass.assign(NH, 0.0);
    r.near_max.assign(NH, -INFINITY);
    r.far_max.assign(NH, -INFINITY);
    auto q = [&](int b, int i, int h) { return &qkv[((size_t)b * T + i) * 3 * C + h * hd]; };
    auto k = [&](int b, int j, int h) { return &qkv[((size_t)b * T + j) * 3 * C + C + h * hd]; };
    auto v = [&](int b, int j, int h) { return &qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hd]; };
    std::vector<double> S((size_t)T * T), Sc((size_t)T * T), Pm((size_t)T * T), Tn((size_t)T * T);
    std::vector<char> vis((size_t)T * T);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const bool local = h < NH - c.G;
            for (int i = 0; i < T; i++) {
                double m = -INFINITY;
                for (int j = 0; j < T; j++) {
                    const size_t ij = (size_t)i * T + j;
                    vis[ij] = j <= i && (!local || i - j < c.P);
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += q(b, i, h)[d] * k(b, j, h)[d];
                    S[ij] = s * scale;
                    Tn[ij] = cap > 0 ? std::tanh(S[ij] / cap) : 0.0;
                    Sc[ij] = cap > 0 ? cap * Tn[ij] : S[ij];
                    if (!vis[ij]) continue;
                    m = std::max(m, Sc[ij]);
                    r.smax[h] = std::max(r.smax[h], S[ij]);
                    r.smin[h] = std::min(r.smin[h], S[ij]);
                    if (i - j < N) r.near_max[h] = std::max(r.near_max[h], S[ij]);
                    else r.far_max[h] = std::max(r.far_max[h], S[ij]);
                }
                double sum = 0;
                for (int j = 0; j < T; j++) sum += vis[(size_t)i * T + j] ? std::exp(Sc[(size_t)i * T + j] - m) : 0.0;
                double ent = 0, near = 0;
                for (int j = 0; j < T; j++) {
                    const size_t ij = (size_t)i * T + j;
                    const double p = vis[ij] ? std::exp(Sc[ij] - m) / sum : 0.0;
                    Pm[ij] = p;
                    if (p > 0) ent -= p * std::log(p);
                    if (vis[ij] && i - j < N) near += p;
                }
                r.lse[((size_t)b * NH + h) * T + i] = m + std::log(sum);
                r.entropy[h] += ent / (B * T);
                r.near_mass[h] += near / (B * T);
                for (int d = 0; d < hd; d++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += Pm[(size_t)i * T + j] * v(b, j, h)[d];
                    r.out[((size_t)b * T + i) * C + h * hd + d] = o;
                }
            }
            // backward of L = sum(out * dout)
            for (int i = 0; i < T; i++) {
                const double* go = &dout[((size_t)b * T + i) * C + h * hd];
                double D = 0;
                for (int d = 0; d < hd; d++) D += go[d] * r.out[((size_t)b * T + i) * C + h * hd + d];
                for (int j = 0; j <= i; j++) {
                    const size_t ij = (size_t)i * T + j;
                    if (!vis[ij]) continue;
                    double dp = 0;
                    for (int d = 0; d < hd; d++) dp += go[d] * v(b, j, h)[d];
                    double ds = Pm[ij] * (dp - D);
                    if (cap > 0) ds *= 1.0 - Tn[ij] * Tn[ij];
                    ds *= scale;
                    for (int d = 0; d < hd; d++) {
                        r.dqkv[((size_t)b * T + i) * 3 * C + h * hd + d] += ds * k(b, j, h)[d];
                        r.dqkv[((size_t)b * T + j) * 3 * C + C + h * hd + d] += ds * q(b, i, h)[d];
                        r.dqkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hd + d] += Pm[ij] * go[d];
                    }
                }
            }
        }
    }
    return r;
}

// The kernel's forward (with statistics) and backward on one twin.
template <typename F>
struct Run {
    std::vector<F> out, lse, dqkv;
    std::vector<AttnHeadStats> st;
};

template <typename F>
Run<F> run(const std::vector<F>& qkv, const std::vector<F>& dout, const Case& c, float cap, Isa isa) {
    Run<F> r;
    r.out.assign((size_t)c.B * c.T * c.C, F(NAN));
    r.lse.assign((size_t)c.B * c.NH * c.T, F(NAN));
    r.dqkv.assign(qkv.size(), F(NAN));
    r.st = fresh_stats(c.NH);
    llmc::cpu::attention_forward(r.out.data(), r.lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, cap,
                                 r.st.data(), c.near, isa);
    llmc::cpu::attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), c.B, c.T, c.C,
                                  c.NH, c.G, c.P, cap, isa);
    return r;
}

}  // namespace

TEST_CASE("tiled attention: every twin and head size against the naive reference", "[attention][flash]") {
    for (size_t ci = 0; ci < kCases.size(); ci++) {
        const Case& c = kCases[ci];
        for (float cap : {0.0f, 2.5f}) {
            llmc::Rng rng(case_seed((int)ci));
            std::vector<float> qkv((size_t)c.B * c.T * 3 * c.C), dout((size_t)c.B * c.T * c.C);
            for (float& x : qkv) x = 1.5f * (float)rng.normal();  // logits of a few units: the cap bites
            for (float& x : dout) x = (float)rng.normal();
            const Ref ref = naive(to_double(qkv), to_double(dout), c, cap);
            for (Isa isa : supported_isas()) {
                INFO(c.name() << " softcap=" << cap << " isa=" << llmc::cpu::isa_name(isa));
                const Run<float> f = run(qkv, dout, c, cap, isa);
                const double e_out = rel_err(f.out, ref.out), e_lse = rel_err(f.lse, ref.lse),
                             e_d = rel_err(f.dqkv, ref.dqkv);
                INFO("float: out " << e_out << ", lse " << e_lse << ", dqkv " << e_d);
                CHECK(e_out < 1e-5);
                CHECK(e_lse < 1e-5);
                CHECK(e_d < 1e-5);
                for (int h = 0; h < c.NH; h++) {
                    INFO("head " << h);
                    const AttnHeadStats& s = f.st[h];
                    CHECK(s.rows == (int64_t)c.B * c.T);
                    CHECK(std::fabs(s.max_logit - ref.smax[h]) <= 1e-5 * std::fabs(ref.smax[h]));
                    CHECK(std::fabs(s.min_logit - ref.smin[h]) <= 1e-5 * std::fabs(ref.smin[h]));
                    CHECK(std::fabs(s.entropy_sum / s.rows - ref.entropy[h]) <= 1e-5 * std::max(1.0, ref.entropy[h]));
                    CHECK(std::fabs(s.near_mass_sum / s.rows - ref.near_mass[h]) <= 1e-5);
                    CHECK(std::fabs(s.near_max_logit - ref.near_max[h]) <= 1e-5 * std::fabs(ref.near_max[h]));
                    if (std::isinf(ref.far_max[h])) CHECK(s.far_max_logit == -INFINITY);
                    else CHECK(std::fabs(s.far_max_logit - ref.far_max[h]) <= 1e-5 * std::fabs(ref.far_max[h]));
                }

                const Run<double> d = run(to_double(qkv), to_double(dout), c, cap, isa);
                const double ed_out = rel_err(d.out, ref.out), ed_lse = rel_err(d.lse, ref.lse),
                             ed_d = rel_err(d.dqkv, ref.dqkv);
                INFO("double: out " << ed_out << ", lse " << ed_lse << ", dqkv " << ed_d);
                CHECK(ed_out < 1e-13);
                CHECK(ed_lse < 1e-13);
                CHECK(ed_d < 1e-13);
                for (int h = 0; h < c.NH; h++)
                    CHECK(std::fabs(d.st[h].near_mass_sum / d.st[h].rows - ref.near_mass[h]) <= 1e-13);
            }
        }
    }
}

TEST_CASE("tiled attention: 1, 2 and 3 threads give the same bits on every twin", "[attention][flash]") {
    const Case c{2, 100, 96, 3, 1, 37, 0};  // hd 32
    llmc::Rng rng(case_seed(100));
    std::vector<float> qkv((size_t)c.B * c.T * 3 * c.C), dout((size_t)c.B * c.T * c.C);
    for (float& x : qkv) x = 1.5f * (float)rng.normal();
    for (float& x : dout) x = (float)rng.normal();
    const int saved = omp_get_max_threads();
    for (Isa isa : supported_isas()) {
        INFO("isa " << llmc::cpu::isa_name(isa));
        omp_set_num_threads(1);
        const Run<float> a = run(qkv, dout, c, 3.0f, isa);
        for (int threads : {2, 3}) {
            omp_set_num_threads(threads);
            const Run<float> b = run(qkv, dout, c, 3.0f, isa);
            INFO(threads << " threads");
            CHECK(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 4) == 0);
            CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
            CHECK(std::memcmp(a.dqkv.data(), b.dqkv.data(), a.dqkv.size() * 4) == 0);
            for (int h = 0; h < c.NH; h++) {
                CHECK(a.st[h].entropy_sum == b.st[h].entropy_sum);
                CHECK(a.st[h].near_mass_sum == b.st[h].near_mass_sum);
                CHECK(a.st[h].max_logit == b.st[h].max_logit);
                CHECK(a.st[h].min_logit == b.st[h].min_logit);
            }
        }
    }
    omp_set_num_threads(saved);
}

TEST_CASE("tiled attention: the KV-cache decode equals the forward's rows bit for bit on every twin",
          "[attention][flash][kv_cache]") {
    struct DecodeCase {
        int C, NH, G, P, T;
        float cap;
    };
    // hd 8, 32 (compiled sizes), 10 (generic); windows that wrap the ring, straddle key blocks, P >= T
    const std::vector<DecodeCase> cases = {
        {32, 4, 1, 33, 80, 0.0f}, {96, 3, 1, 50, 75, 2.0f}, {40, 4, 2, 7, 70, 0.0f}, {64, 2, 0, 100, 40, 1.5f}};
    llmc::Rng rng(case_seed(200));
    for (const DecodeCase& dc : cases) {
        llmc::ModelConfig cfg;
        cfg.num_layers = 1;
        cfg.channels = dc.C;
        cfg.num_heads = dc.NH;
        cfg.global_heads = dc.G;
        cfg.window = dc.P;
        cfg.max_seq_len = dc.T;
        cfg.attn_softcap = dc.cap;
        const int B = 2, T = dc.T, C = dc.C, NH = dc.NH;
        std::vector<float> qkv((size_t)B * T * 3 * C);
        for (float& x : qkv) x = 1.5f * (float)rng.normal();
        for (Isa isa : supported_isas()) {
            INFO("hd " << C / NH << " G " << dc.G << " P " << dc.P << " isa " << llmc::cpu::isa_name(isa));
            std::vector<float> ref((size_t)B * T * C), lse((size_t)B * NH * T);
            llmc::cpu::attention_forward(ref.data(), lse.data(), qkv.data(), B, T, C, NH, dc.G, dc.P, dc.cap, nullptr,
                                         0, isa);
            llmc::cpu::KvCache<float> cache;
            cache.init(cfg, B, T);
            std::vector<float> row((size_t)B * 3 * C), out((size_t)B * C);
            size_t mismatches = 0;
            for (int t = 0; t < T; t++) {
                for (int b = 0; b < B; b++) {
                    std::copy_n(qkv.data() + ((size_t)b * T + t) * 3 * C, 3 * C, row.data() + (size_t)b * 3 * C);
                    cache.store(0, b, t, row.data() + (size_t)b * 3 * C);
                }
                std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
                llmc::cpu::attention_decode(out.data(), row.data(), cache, 0, t, dc.cap, isa);
                for (int b = 0; b < B; b++)
                    mismatches += std::memcmp(out.data() + (size_t)b * C, ref.data() + ((size_t)b * T + t) * C,
                                              C * sizeof(float)) != 0;
            }
            CHECK(mismatches == 0);
        }
    }
}
