// Tests of the CPU LS-attention and QK-norm ops (llmc/cpu/attention_ls.h, llmc/cpu/qknorm.h):
// forward against a naive full-matrix implementation in double, backward by central finite
// differences in double, the sliding window never read outside, and thread-count determinism.
// Inputs are random (llmc::Rng seeded per case, mixed with Catch's --rng-seed).
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "llmc/cpu/attention_ls.h"
#include "llmc/cpu/qknorm.h"
#include "llmc/core/error.h"
#include "llmc/core/rng.h"

using llmc::cpu::AttnHeadStats;

namespace {

struct AttnCase {
    int B, T, C, NH, G, P;
    std::string name() const {
        return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
               " NH=" + std::to_string(NH) + " G=" + std::to_string(G) + " P=" + std::to_string(P);
    }
};

uint64_t case_seed(int index) { return 0xC1A77E57ull + 7919ull * index + Catch::rngSeed(); }

std::vector<double> random_vec(llmc::Rng& rng, size_t n, double scale) {
    std::vector<double> v(n);
    for (auto& x : v) x = scale * rng.normal();
    return v;
}

template <typename To, typename From>
std::vector<To> cast_vec(const std::vector<From>& v) {
    return std::vector<To>(v.begin(), v.end());
}

// ||a - b|| / ||b||
template <typename A>
double rel_err(const std::vector<A>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return std::sqrt(num) / std::sqrt(den);
}

// max_i |a_i - b_i| / max_i |b_i|: catches a single wrong element a norm ratio could hide
double max_err(const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        num = std::max(num, std::fabs(a[i] - b[i]));
        den = std::max(den, std::fabs(b[i]));
    }
    return num / den;
}

std::vector<AttnHeadStats> fresh_stats(int NH) {
    return std::vector<AttnHeadStats>(
        NH, AttnHeadStats{-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(), 0.0, 0});
}

// ---- naive reference: full T x T score matrix with an explicit mask, in double ----------------
struct NaiveAttn {
    std::vector<double> out, lse;                  // (B, T, C), (B, NH, T)
    std::vector<double> smax, smin, entropy_mean;  // (NH)
};

NaiveAttn naive_attention(const std::vector<double>& qkv, const AttnCase& c, double softcap) {
    const int B = c.B, T = c.T, C = c.C, NH = c.NH, hd = C / NH;
    NaiveAttn r;
    r.out.assign((size_t)B * T * C, 0.0);
    r.lse.assign((size_t)B * NH * T, 0.0);
    r.smax.assign(NH, -INFINITY);
    r.smin.assign(NH, INFINITY);
    r.entropy_mean.assign(NH, 0.0);
    std::vector<double> S((size_t)T * T), Pm((size_t)T * T);
    std::vector<char> mask((size_t)T * T);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const bool local = h < NH - c.G;
            for (int i = 0; i < T; i++) {
                for (int j = 0; j < T; j++) {
                    bool visible = j <= i && (!local || i - j < c.P);
                    mask[i * T + j] = visible;
                    double s = 0;
                    for (int d = 0; d < hd; d++) {
                        s += qkv[((size_t)b * T + i) * 3 * C + h * hd + d] *
                             qkv[((size_t)b * T + j) * 3 * C + C + h * hd + d];
                    }
                    s /= std::sqrt((double)hd);
                    if (visible) {
                        r.smax[h] = std::max(r.smax[h], s);
                        r.smin[h] = std::min(r.smin[h], s);
                    }
                    S[i * T + j] = softcap > 0 ? softcap * std::tanh(s / softcap) : s;
                }
            }
            for (int i = 0; i < T; i++) {
                double m = -INFINITY;
                for (int j = 0; j < T; j++)
                    if (mask[i * T + j]) m = std::max(m, S[i * T + j]);
                double sum = 0;
                for (int j = 0; j < T; j++) sum += mask[i * T + j] ? std::exp(S[i * T + j] - m) : 0.0;
                double ent = 0;
                for (int j = 0; j < T; j++) {
                    double p = mask[i * T + j] ? std::exp(S[i * T + j] - m) / sum : 0.0;
                    Pm[i * T + j] = p;
                    if (p > 0) ent -= p * std::log(p);
                }
                r.lse[((size_t)b * NH + h) * T + i] = m + std::log(sum);
                r.entropy_mean[h] += ent / (B * T);
                for (int d = 0; d < hd; d++) {
                    double o = 0;
                    for (int j = 0; j < T; j++)
                        o += Pm[i * T + j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hd + d];
                    r.out[((size_t)b * T + i) * C + h * hd + d] = o;
                }
            }
        }
    }
    return r;
}

// ---- naive QK-norm in double -------------------------------------------------------------------
std::vector<double> naive_qknorm(const std::vector<double>& x, const std::vector<double>& qw,
                                 const std::vector<double>& qb, const std::vector<double>& kw,
                                 const std::vector<double>& kb, int B, int T, int C, int NH) {
    const int hd = C / NH;
    std::vector<double> y = x;
    for (int r = 0; r < B * T; r++) {
        for (int part = 0; part < 2; part++) {
            for (int h = 0; h < NH; h++) {
                const double* xs = &x[(size_t)r * 3 * C + part * C + h * hd];
                double mu = 0, var = 0;
                for (int d = 0; d < hd; d++) mu += xs[d] / hd;
                for (int d = 0; d < hd; d++) var += (xs[d] - mu) * (xs[d] - mu) / hd;
                for (int d = 0; d < hd; d++) {
                    double w = part == 0 ? qw[d] : kw[d], bb = part == 0 ? qb[d] : kb[d];
                    y[(size_t)r * 3 * C + part * C + h * hd + d] = (xs[d] - mu) / std::sqrt(var + 1e-5) * w + bb;
                }
            }
        }
    }
    return y;
}

// Central finite differences of a scalar function f over every element of x (restored after).
template <typename Fn>
std::vector<double> finite_diff(std::vector<double>& x, Fn f, double eps = 1e-6) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        double x0 = x[i];
        x[i] = x0 + eps;
        double fp = f();
        x[i] = x0 - eps;
        double fm = f();
        x[i] = x0;
        g[i] = (fp - fm) / (2 * eps);
    }
    return g;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

const std::vector<AttnCase> kForwardCases = {
    {2, 13, 16, 4, 1, 4},   // mixed, hd 4, T prime
    {2, 37, 24, 3, 1, 5},   // mixed, hd 8, more rows than one forward chunk (32)
    {1, 70, 16, 2, 1, 7},   // hd 8, three chunks, T not a multiple of anything used
    {1, 19, 16, 4, 0, 6},   // all-local (G = 0)
    {2, 11, 24, 3, 3, 4},   // MHSA (G = NH); P ignored
    {2, 17, 16, 4, 2, 1},   // P = 1: a local head sees only itself
    {1, 9, 24, 3, 1, 9},    // P = T
    {2, 10, 16, 4, 2, 50},  // P > T: local heads act global
};

}  // namespace

TEST_CASE("attention forward matches the naive full-matrix reference", "[attention]") {
    for (size_t ci = 0; ci < kForwardCases.size(); ci++) {
        const AttnCase& c = kForwardCases[ci];
        for (float softcap : {0.0f, 2.5f}) {
            SECTION(c.name() + " softcap=" + std::to_string(softcap)) {
                llmc::Rng rng(case_seed((int)ci));
                // scale 1.5: logits of a few units, so the cap at 2.5 matters
                std::vector<double> qkv = random_vec(rng, (size_t)c.B * c.T * 3 * c.C, 1.5);
                const NaiveAttn ref = naive_attention(qkv, c, softcap);

                // double
                std::vector<double> out((size_t)c.B * c.T * c.C, NAN), lse((size_t)c.B * c.NH * c.T, NAN);
                auto st = fresh_stats(c.NH);
                llmc::cpu::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, softcap,
                                             st.data());
                const double e_out = rel_err(out, ref.out), e_lse = rel_err(lse, ref.lse);
                INFO("double: out rel err " << e_out << ", lse rel err " << e_lse);
                CHECK(e_out < 1e-12);
                CHECK(e_lse < 1e-12);
                for (int h = 0; h < c.NH; h++) {
                    // the op keeps max/min as float
                    CHECK(std::fabs(st[h].max_logit - ref.smax[h]) <= 1e-7 * std::fabs(ref.smax[h]));
                    CHECK(std::fabs(st[h].min_logit - ref.smin[h]) <= 1e-7 * std::fabs(ref.smin[h]));
                    CHECK(st[h].rows == (int64_t)c.B * c.T);
                    CHECK(std::fabs(st[h].entropy_sum / st[h].rows - ref.entropy_mean[h]) <=
                          1e-12 * std::max(1.0, ref.entropy_mean[h]));
                }

                // float, against the reference on the same (float-rounded) inputs
                std::vector<float> qkvf = cast_vec<float>(qkv);
                const NaiveAttn reff = naive_attention(cast_vec<double>(qkvf), c, softcap);
                std::vector<float> outf(out.size(), NAN), lsef(lse.size(), NAN);
                auto stf = fresh_stats(c.NH);
                llmc::cpu::attention_forward(outf.data(), lsef.data(), qkvf.data(), c.B, c.T, c.C, c.NH, c.G, c.P,
                                             softcap, stf.data());
                const double ef_out = rel_err(outf, reff.out), ef_lse = rel_err(lsef, reff.lse);
                INFO("float: out rel err " << ef_out << ", lse rel err " << ef_lse);
                CHECK(ef_out < 1e-5);
                CHECK(ef_lse < 1e-5);
                for (int h = 0; h < c.NH; h++) {
                    CHECK(std::fabs(stf[h].max_logit - reff.smax[h]) <= 1e-5 * std::fabs(reff.smax[h]));
                    CHECK(std::fabs(stf[h].min_logit - reff.smin[h]) <= 1e-5 * std::fabs(reff.smin[h]));
                    CHECK(stf[h].rows == (int64_t)c.B * c.T);
                    CHECK(std::fabs(stf[h].entropy_sum / stf[h].rows - reff.entropy_mean[h]) <=
                          1e-5 * std::max(1.0, reff.entropy_mean[h]));
                }
            }
        }
    }
}

TEST_CASE("attention statistics merge into the caller's accumulators", "[attention]") {
    const AttnCase c{2, 13, 16, 4, 1, 4};
    llmc::Rng rng(case_seed(100));
    std::vector<double> qkv = random_vec(rng, (size_t)c.B * c.T * 3 * c.C, 1.0);
    std::vector<double> out((size_t)c.B * c.T * c.C), lse((size_t)c.B * c.NH * c.T);
    auto once = fresh_stats(c.NH);
    llmc::cpu::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, 0.0f, once.data());
    auto twice = fresh_stats(c.NH);
    twice[0].max_logit = 1e9f;  // an earlier pass saw a bigger logit: must survive the merge
    for (int k = 0; k < 2; k++) {
        llmc::cpu::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, 0.0f,
                                     twice.data());
    }
    CHECK(twice[0].max_logit == 1e9f);
    for (int h = 0; h < c.NH; h++) {
        if (h > 0) CHECK(twice[h].max_logit == once[h].max_logit);
        CHECK(twice[h].min_logit == once[h].min_logit);
        CHECK(twice[h].rows == 2 * once[h].rows);
        CHECK(twice[h].entropy_sum == Approx(2 * once[h].entropy_sum).epsilon(1e-12));
    }
}

TEST_CASE("attention backward matches central finite differences in double", "[attention]") {
    const std::vector<AttnCase> cases = {
        {2, 9, 16, 4, 1, 3},    // mixed, hd 4
        {1, 11, 24, 3, 0, 4},   // all-local, hd 8
        {2, 7, 16, 2, 2, 100},  // MHSA, hd 8
        {1, 10, 16, 4, 2, 1},   // P = 1
    };
    for (size_t ci = 0; ci < cases.size(); ci++) {
        const AttnCase& c = cases[ci];
        for (float softcap : {0.0f, 2.0f}) {
            SECTION(c.name() + " softcap=" + std::to_string(softcap)) {
                llmc::Rng rng(case_seed(200 + (int)ci));
                const size_t nqkv = (size_t)c.B * c.T * 3 * c.C, nout = (size_t)c.B * c.T * c.C;
                std::vector<double> qkv = random_vec(rng, nqkv, 1.5);
                std::vector<double> R = random_vec(rng, nout, 1.0);  // objective L = sum(out * R)
                std::vector<double> out(nout), lse((size_t)c.B * c.NH * c.T);
                auto objective = [&]() {
                    llmc::cpu::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P,
                                                 softcap, (AttnHeadStats*)nullptr);
                    return dot(out, R);
                };
                std::vector<double> fd = finite_diff(qkv, objective);

                objective();  // out and lse at the unperturbed point
                // dqkv is OVERWRITTEN (an activation gradient): start from random values
                std::vector<double> dqkv = random_vec(rng, nqkv, 1.0);
                llmc::cpu::attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), c.B, c.T, c.C,
                                              c.NH, c.G, c.P, softcap);
                double re = rel_err(dqkv, fd), me = max_err(dqkv, fd);
                INFO("rel err " << re << ", max err " << me);
                CHECK(re < 1e-7);
                CHECK(me < 1e-7);
            }
        }
    }
}

TEST_CASE("local heads never read keys outside their window, no head reads the future", "[attention]") {
    const AttnCase c{2, 40, 16, 4, 2, 5};  // heads 0, 1 local; 2, 3 global; hd 4
    const int hd = c.C / c.NH, C3 = 3 * c.C;
    llmc::Rng rng(case_seed(300));
    std::vector<float> qkv = cast_vec<float>(random_vec(rng, (size_t)c.B * c.T * C3, 1.0));
    std::vector<float> dout = cast_vec<float>(random_vec(rng, (size_t)c.B * c.T * c.C, 1.0));
    std::vector<float> out(dout.size()), lse((size_t)c.B * c.NH * c.T), dqkv(qkv.size(), 0.0f);
    llmc::cpu::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, 1.5f,
                                 (AttnHeadStats*)nullptr);
    llmc::cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), c.B, c.T, c.C, c.NH,
                                  c.G, c.P, 1.5f);

    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int i = 0; i < c.T; i++) {
        // poison: every future row (all heads), and k, v of local heads before the window of i
        std::vector<float> bad = qkv;
        for (int b = 0; b < c.B; b++) {
            for (int j = 0; j < c.T; j++) {
                for (int h = 0; h < c.NH; h++) {
                    const bool local = h < c.NH - c.G;
                    const bool future = j > i, before_window = local && j <= i - c.P;
                    if (!future && !before_window) continue;
                    for (int d = 0; d < hd; d++) {
                        float* row = &bad[((size_t)b * c.T + j) * C3];
                        if (future) row[h * hd + d] = nan;
                        row[c.C + h * hd + d] = nan;
                        row[2 * c.C + h * hd + d] = nan;
                    }
                }
            }
        }
        std::vector<float> out2(out.size()), lse2(lse.size()), dqkv2(qkv.size(), 0.0f);
        llmc::cpu::attention_forward(out2.data(), lse2.data(), bad.data(), c.B, c.T, c.C, c.NH, c.G, c.P, 1.5f,
                                     (AttnHeadStats*)nullptr);
        llmc::cpu::attention_backward(dqkv2.data(), dout.data(), bad.data(), out2.data(), lse2.data(), c.B, c.T, c.C,
                                      c.NH, c.G, c.P, 1.5f);
        for (int b = 0; b < c.B; b++) {
            const size_t o = ((size_t)b * c.T + i) * c.C;
            INFO("query " << i << " batch " << b);
            // out row i, lse row i and dq row i are bit-identical (NaN would never compare equal)
            CHECK(std::memcmp(&out[o], &out2[o], c.C * sizeof(float)) == 0);
            for (int h = 0; h < c.NH; h++) {
                const size_t l = ((size_t)b * c.NH + h) * c.T + i;
                CHECK(std::memcmp(&lse[l], &lse2[l], sizeof(float)) == 0);
            }
            const size_t q = ((size_t)b * c.T + i) * C3;
            CHECK(std::memcmp(&dqkv[q], &dqkv2[q], c.C * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("qknorm forward matches a naive per-head LayerNorm", "[qknorm]") {
    struct Shape {
        int B, T, C, NH;
    };
    const std::vector<Shape> shapes = {{2, 5, 16, 4}, {1, 7, 24, 3}, {3, 4, 8, 1}};
    for (size_t si = 0; si < shapes.size(); si++) {
        const Shape s = shapes[si];
        const int hd = s.C / s.NH;
        llmc::Rng rng(case_seed(400 + (int)si));
        const size_t n = (size_t)s.B * s.T * 3 * s.C, nst = (size_t)s.B * s.T * 2 * s.NH;
        std::vector<double> x = random_vec(rng, n, 2.0);
        for (auto& v : x) v += 0.5;  // nonzero means
        std::vector<double> qw = random_vec(rng, hd, 1.0), qb = random_vec(rng, hd, 1.0);
        std::vector<double> kw = random_vec(rng, hd, 1.0), kb = random_vec(rng, hd, 1.0);
        const std::vector<double> ref = naive_qknorm(x, qw, qb, kw, kb, s.B, s.T, s.C, s.NH);

        std::vector<double> y(n, NAN), mean(nst, NAN), rstd(nst, NAN);
        llmc::cpu::qknorm_forward(y.data(), mean.data(), rstd.data(), x.data(), qw.data(), qb.data(), kw.data(),
                                  kb.data(), s.B, s.T, s.C, s.NH);
        CHECK(rel_err(y, ref) < 1e-12);
        // mean/rstd layout (B, T, 2, NH): spot-check against a direct computation
        for (size_t r = 0; r < (size_t)s.B * s.T; r++) {
            for (int part = 0; part < 2; part++) {
                for (int h = 0; h < s.NH; h++) {
                    double mu = 0, var = 0;
                    const double* xs = &x[r * 3 * s.C + part * s.C + h * hd];
                    for (int d = 0; d < hd; d++) mu += xs[d] / hd;
                    for (int d = 0; d < hd; d++) var += (xs[d] - mu) * (xs[d] - mu) / hd;
                    CHECK(mean[(r * 2 + part) * s.NH + h] == Approx(mu).epsilon(1e-12).margin(1e-12));
                    CHECK(rstd[(r * 2 + part) * s.NH + h] == Approx(1 / std::sqrt(var + 1e-5)).epsilon(1e-12));
                }
            }
        }

        std::vector<float> xf = cast_vec<float>(x), yf(n, NAN), meanf(nst), rstdf(nst);
        std::vector<float> qwf = cast_vec<float>(qw), qbf = cast_vec<float>(qb), kwf = cast_vec<float>(kw),
                           kbf = cast_vec<float>(kb);
        llmc::cpu::qknorm_forward(yf.data(), meanf.data(), rstdf.data(), xf.data(), qwf.data(), qbf.data(), kwf.data(),
                                  kbf.data(), s.B, s.T, s.C, s.NH);
        const std::vector<double> reff =
            naive_qknorm(cast_vec<double>(xf), cast_vec<double>(qwf), cast_vec<double>(qbf), cast_vec<double>(kwf),
                         cast_vec<double>(kbf), s.B, s.T, s.C, s.NH);
        CHECK(rel_err(yf, reff) < 1e-5);
    }
}

namespace {

// Everything a QK-norm finite-difference check needs, in double.
struct QkNormFixture {
    int B, T, C, NH, hd;
    std::vector<double> x, qw, qb, kw, kb;
    std::vector<double> y, mean, rstd;
    QkNormFixture(int B_, int T_, int C_, int NH_, uint64_t seed) : B(B_), T(T_), C(C_), NH(NH_), hd(C_ / NH_) {
        llmc::Rng rng(seed);
        x = random_vec(rng, (size_t)B * T * 3 * C, 1.5);
        qw = random_vec(rng, hd, 1.0);
        qb = random_vec(rng, hd, 0.5);
        kw = random_vec(rng, hd, 1.0);
        kb = random_vec(rng, hd, 0.5);
        y.resize(x.size());
        mean.resize((size_t)B * T * 2 * NH);
        rstd.resize(mean.size());
    }
    void forward() {
        llmc::cpu::qknorm_forward(y.data(), mean.data(), rstd.data(), x.data(), qw.data(), qb.data(), kw.data(),
                                  kb.data(), B, T, C, NH);
    }
};

// Checks analytic gradients (after subtracting the random values they were added onto) vs fd:
// ||g - fd|| / max(||fd||, floor) and max|g - fd| / max(max|fd|, floor) below tol. The floor is
// for gradients that are exactly zero in theory (dkb without soft-capping: adding a constant to
// every key of a row's softmax changes nothing), where fd is pure rounding noise.
void check_grad(const char* what, std::vector<double> g, const std::vector<double>& base, const std::vector<double>& fd,
                double tol, double floor = 0.0) {
    double num2 = 0, den2 = 0, num_max = 0, den_max = 0;
    for (size_t i = 0; i < g.size(); i++) {
        double d = (g[i] - base[i]) - fd[i];
        num2 += d * d;
        den2 += fd[i] * fd[i];
        num_max = std::max(num_max, std::fabs(d));
        den_max = std::max(den_max, std::fabs(fd[i]));
    }
    double re = std::sqrt(num2) / std::max(std::sqrt(den2), floor), me = num_max / std::max(den_max, floor);
    INFO(what << ": rel err " << re << ", max err " << me << " (||fd|| = " << std::sqrt(den2) << ")");
    CHECK(re < tol);
    CHECK(me < tol);
}

double norm(const std::vector<double>& v) { return std::sqrt(dot(v, v)); }

}  // namespace

TEST_CASE("qknorm backward matches central finite differences in double", "[qknorm]") {
    QkNormFixture f(2, 3, 16, 2, case_seed(500));  // hd 8
    llmc::Rng rng(case_seed(501));
    const std::vector<double> R = random_vec(rng, f.x.size(), 1.0);  // L = sum(y * R)
    auto objective = [&]() {
        f.forward();
        return dot(f.y, R);
    };
    const auto fd_x = finite_diff(f.x, objective), fd_qw = finite_diff(f.qw, objective),
               fd_qb = finite_diff(f.qb, objective), fd_kw = finite_diff(f.kw, objective),
               fd_kb = finite_diff(f.kb, objective);
    f.forward();
    const auto bx = random_vec(rng, f.x.size(), 1.0), bqw = random_vec(rng, f.hd, 1.0),
               bqb = random_vec(rng, f.hd, 1.0), bkw = random_vec(rng, f.hd, 1.0), bkb = random_vec(rng, f.hd, 1.0);
    auto dx = bx, dqw = bqw, dqb = bqb, dkw = bkw, dkb = bkb;
    llmc::cpu::qknorm_backward(dx.data(), dqw.data(), dqb.data(), dkw.data(), dkb.data(), R.data(), f.x.data(),
                               f.mean.data(), f.rstd.data(), f.qw.data(), f.kw.data(), f.B, f.T, f.C, f.NH);
    check_grad("dqkv_in", dx, std::vector<double>(bx.size(), 0.0), fd_x, 1e-7);  // overwritten, not added onto bx
    check_grad("dqw", dqw, bqw, fd_qw, 1e-7);
    check_grad("dqb", dqb, bqb, fd_qb, 1e-7);
    check_grad("dkw", dkw, bkw, fd_kw, 1e-7);
    check_grad("dkb", dkb, bkb, fd_kb, 1e-7);
}

TEST_CASE("qknorm -> attention composed backward matches finite differences", "[qknorm][attention]") {
    for (float softcap : {0.0f, 2.0f}) {
        SECTION("softcap=" + std::to_string(softcap)) {
            const AttnCase c{2, 8, 16, 4, 1, 3};  // hd 4
            QkNormFixture f(c.B, c.T, c.C, c.NH, case_seed(600));
            llmc::Rng rng(case_seed(601));
            const std::vector<double> R = random_vec(rng, (size_t)c.B * c.T * c.C, 1.0);
            std::vector<double> out(R.size()), lse((size_t)c.B * c.NH * c.T);
            auto objective = [&]() {
                f.forward();
                llmc::cpu::attention_forward(out.data(), lse.data(), f.y.data(), c.B, c.T, c.C, c.NH, c.G, c.P, softcap,
                                             (AttnHeadStats*)nullptr);
                return dot(out, R);
            };
            const auto fd_x = finite_diff(f.x, objective), fd_qw = finite_diff(f.qw, objective),
                       fd_qb = finite_diff(f.qb, objective), fd_kw = finite_diff(f.kw, objective),
                       fd_kb = finite_diff(f.kb, objective);
            objective();
            std::vector<double> dy(f.x.size(), 0.0);
            llmc::cpu::attention_backward(dy.data(), R.data(), f.y.data(), out.data(), lse.data(), c.B, c.T, c.C, c.NH,
                                          c.G, c.P, softcap);
            const std::vector<double> zx(f.x.size(), 0.0), zh(f.hd, 0.0);
            auto dx = zx, dqw = zh, dqb = zh, dkw = zh, dkb = zh;
            llmc::cpu::qknorm_backward(dx.data(), dqw.data(), dqb.data(), dkw.data(), dkb.data(), dy.data(), f.x.data(),
                                       f.mean.data(), f.rstd.data(), f.qw.data(), f.kw.data(), c.B, c.T, c.C, c.NH);
            check_grad("dqkv_in", dx, zx, fd_x, 1e-7);
            check_grad("dqw", dqw, zh, fd_qw, 1e-7);
            check_grad("dqb", dqb, zh, fd_qb, 1e-7);
            check_grad("dkw", dkw, zh, fd_kw, 1e-7);
            check_grad("dkb", dkb, zh, fd_kb, 1e-7, norm(fd_kw));  // exactly 0 when uncapped
        }
    }
}

TEST_CASE("attention and qknorm are bit-identical across OpenMP thread counts", "[attention][qknorm]") {
    const AttnCase c{2, 70, 24, 3, 1, 9};
    const int hd = c.C / c.NH;
    llmc::Rng rng(case_seed(700));
    const size_t nqkv = (size_t)c.B * c.T * 3 * c.C, nout = (size_t)c.B * c.T * c.C;
    const std::vector<float> x = cast_vec<float>(random_vec(rng, nqkv, 1.5));
    const std::vector<float> dout = cast_vec<float>(random_vec(rng, nout, 1.0));
    const std::vector<float> w = cast_vec<float>(random_vec(rng, 4 * hd, 1.0));  // qw, qb, kw, kb

    struct Result {
        std::vector<float> y, mean, rstd, out, lse, dy, dx, dw;
        std::vector<AttnHeadStats> stats;
    };
    auto run = [&](int threads) {
        omp_set_num_threads(threads);
        Result r;
        r.y.resize(nqkv);
        r.mean.resize((size_t)c.B * c.T * 2 * c.NH);
        r.rstd.resize(r.mean.size());
        r.out.resize(nout);
        r.lse.resize((size_t)c.B * c.NH * c.T);
        r.dy.assign(nqkv, 0.0f);
        r.dx.assign(nqkv, 0.0f);
        r.dw.assign(4 * hd, 0.0f);
        r.stats = fresh_stats(c.NH);
        const float* qw = &w[0];
        const float* qb = &w[hd];
        const float* kw = &w[2 * hd];
        const float* kb = &w[3 * hd];
        llmc::cpu::qknorm_forward(r.y.data(), r.mean.data(), r.rstd.data(), x.data(), qw, qb, kw, kb, c.B, c.T, c.C,
                                  c.NH);
        llmc::cpu::attention_forward(r.out.data(), r.lse.data(), r.y.data(), c.B, c.T, c.C, c.NH, c.G, c.P, 3.0f,
                                     r.stats.data());
        llmc::cpu::attention_backward(r.dy.data(), dout.data(), r.y.data(), r.out.data(), r.lse.data(), c.B, c.T, c.C,
                                      c.NH, c.G, c.P, 3.0f);
        llmc::cpu::qknorm_backward(r.dx.data(), &r.dw[0], &r.dw[hd], &r.dw[2 * hd], &r.dw[3 * hd], r.dy.data(),
                                   x.data(), r.mean.data(), r.rstd.data(), qw, kw, c.B, c.T, c.C, c.NH);
        return r;
    };
    const int saved = omp_get_max_threads();
    const Result a = run(1), b = run(2), d = run(3);
    omp_set_num_threads(saved);
    for (const Result* o : {&b, &d}) {
        CHECK(a.y == o->y);
        CHECK(a.mean == o->mean);
        CHECK(a.rstd == o->rstd);
        CHECK(a.out == o->out);
        CHECK(a.lse == o->lse);
        CHECK(a.dy == o->dy);
        CHECK(a.dx == o->dx);
        CHECK(a.dw == o->dw);
        for (int h = 0; h < c.NH; h++) {
            CHECK(a.stats[h].max_logit == o->stats[h].max_logit);
            CHECK(a.stats[h].min_logit == o->stats[h].min_logit);
            CHECK(a.stats[h].entropy_sum == o->stats[h].entropy_sum);
            CHECK(a.stats[h].rows == o->stats[h].rows);
        }
    }
}

TEST_CASE("attention and qknorm refuse impossible shapes", "[attention][qknorm]") {
    std::vector<float> buf(4096, 0.0f);
    float* p = buf.data();
    using llmc::InputError;
    CHECK_THROWS_AS(llmc::cpu::attention_forward(p, p, p, 1, 4, 16, 4, 5, 3, 0.0f, (AttnHeadStats*)nullptr),
                    InputError);
    CHECK_THROWS_AS(llmc::cpu::attention_forward(p, p, p, 1, 4, 16, 4, 1, 0, 0.0f, (AttnHeadStats*)nullptr),
                    InputError);
    CHECK_THROWS_AS(llmc::cpu::attention_forward(p, p, p, 1, 4, 18, 4, 1, 3, 0.0f, (AttnHeadStats*)nullptr),
                    InputError);
    CHECK_THROWS_AS(llmc::cpu::attention_backward(p, p, p, p, p, 1, 4, 16, 4, -1, 3, 0.0f), InputError);
    CHECK_THROWS_AS(llmc::cpu::qknorm_forward(p, p, p, p, p, p, p, p, 1, 4, 18, 4), InputError);
}
