// Tests of the CPU ops other than attention (llmc/cpu/{encoder,layernorm,matmul,gelu,residual,
// classifier,adamw,global_norm}.h; the vector exp and tanh: test_vec_exp.cpp, test_vec_tanh.cpp):
//   - every forward against a naive implementation written here, in double;
//   - every backward against central finite differences in double (eps 1e-6) of the scalar
//     objective L = sum(out * R) for a random R, for every input and parameter element, with the
//     gradient buffers pre-filled with random values (the gradient contract, docs/design.md:
//     parameter gradients and the residual stream's (LayerNorm's dinp, residual) are ADDED onto
//     them, the other activation gradients overwrite them);
//   - the float instantiations against the double ones;
//   - AdamW against the scalar formula, global_norm_squared against a double sum;
//   - bit-identical results for 1, 2 and 3 OpenMP threads.
// Inputs are fresh random numbers every run; the seed is printed on failure.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "llmc/core/adamw.h"
#include "llmc/cpu/classifier.h"
#include "llmc/cpu/encoder.h"
#include "llmc/cpu/gelu.h"
#include "llmc/core/global_norm.h"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/residual.h"
#include "llmc/core/error.h"

using namespace llmc::cpu;
using llmc::adamw_update;  // backend-neutral host math (llmc/core/)
using llmc::global_norm_squared;
using llmc::cpu::Isa;
using Vec = std::vector<double>;

namespace {

struct Rand {
    unsigned seed;
    std::mt19937_64 gen;
    Rand() : seed(std::random_device{}()), gen(seed) {}
    Vec normal(size_t n, double scale = 1.0) {
        std::normal_distribution<double> d(0.0, scale);
        Vec v(n);
        for (auto& x : v) x = d(gen);
        return v;
    }
    std::vector<int> ints(size_t n, int lo, int hi) {  // uniform in [lo, hi)
        std::uniform_int_distribution<int> d(lo, hi - 1);
        std::vector<int> v(n);
        for (auto& x : v) x = d(gen);
        return v;
    }
};

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// Central finite differences of the scalar f() with respect to every element of x (x is
// perturbed in place and restored).
Vec numeric_grad(Vec& x, const std::function<double()>& f, double eps = 1e-6) {
    Vec g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        const double x0 = x[i];
        x[i] = x0 + eps;
        const double fp = f();
        x[i] = x0 - eps;
        const double fm = f();
        x[i] = x0;
        g[i] = (fp - fm) / (2 * eps);
    }
    return g;
}

// Every element: |got - want| <= atol + rtol * scale, scale = |want| or, where given, scale[i]: the
// magnitude of the terms that make want[i] (where they cancel, want is small beside their rounding).
// Reports the worst element.
template <typename A, typename B>
void check_close(const A& got, const B& want, double rtol, double atol, const char* what, const Vec* scale = nullptr) {
    REQUIRE(got.size() == want.size());
    if (scale) REQUIRE(scale->size() == want.size());
    size_t worst = 0;
    double worst_excess = -1.0;
    bool ok = true;
    for (size_t i = 0; i < got.size(); i++) {
        const double g = got[i], w = want[i];
        const double excess = std::fabs(g - w) - (atol + rtol * (scale ? (*scale)[i] : std::fabs(w)));
        if (!(excess <= 0)) ok = false;  // NaN fails
        if (!(excess <= worst_excess)) {
            worst_excess = excess;
            worst = i;
        }
    }
    INFO(what << ": worst element " << worst << " got " << double(got[worst]) << " want " << double(want[worst])
              << " (rtol " << rtol << ", atol " << atol << ")");
    CHECK(ok);
}

// grad_after - grad_before, i.e. what a backward added.
Vec added(const Vec& after, const Vec& before) {
    Vec d(after.size());
    for (size_t i = 0; i < d.size(); i++) d[i] = after[i] - before[i];
    return d;
}

// An analytic gradient (what a backward added) against central finite differences in double.
// The differences carry the rounding noise of the objective divided by eps (~1e-7 of the
// gradient's scale for the shapes here), so the bound is relative to each element plus 1e-6 of
// the largest gradient element; a wrong term in a gradient is off by far more.
void check_fd(const Vec& got, const Vec& fd, const char* what) {
    double scale = 0;
    for (double g : fd) scale = std::max(scale, std::fabs(g));
    check_close(got, fd, 1e-6, 1e-6 * scale + 1e-12, what);
}

// Runs fn with the given OpenMP thread count, restoring the previous one.
template <typename Fn>
void with_threads(int n, Fn fn) {
    const int prev = omp_get_max_threads();
    omp_set_num_threads(n);
    fn();
    omp_set_num_threads(prev);
}

template <typename T>
bool bit_equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ---- naive references (double) ----------------------------------------------------------------

Vec ref_matmul(const Vec& inp, const Vec& w, const Vec* bias, int N, int IC, int OC) {
    Vec out((size_t)N * OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? (*bias)[o] : 0.0;
            for (int i = 0; i < IC; i++) s += inp[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
    return out;
}

Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int N, int C) {
    Vec out(x.size());
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[(size_t)n * C + c] / C;
        for (int c = 0; c < C; c++) v += std::pow(x[(size_t)n * C + c] - m, 2) / C;
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = (x[(size_t)n * C + c] - m) / std::sqrt(v + 1e-5) * w[c] + b[c];
    }
    return out;
}

double ref_gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

}  // namespace

// ---- matmul -----------------------------------------------------------------------------------

namespace {

// Runs the matmul checks for one shape on one code path (Avx2 = the AVX2+FMA tiles).
template <bool Avx2>
void check_matmul(Rand& rng, int N, int IC, int OC, bool with_bias) {
    INFO("seed " << rng.seed << " N=" << N << " IC=" << IC << " OC=" << OC << " bias=" << with_bias
                 << " avx2=" << Avx2);
    Vec inp = rng.normal((size_t)N * IC), w = rng.normal((size_t)OC * IC), b = rng.normal(OC);
    const Vec R = rng.normal((size_t)N * OC);
    const Vec* bias = with_bias ? &b : nullptr;

    // forward, double and float, against the naive product
    const Vec want = ref_matmul(inp, w, bias, N, IC, OC);
    Vec out((size_t)N * OC, std::nan(""));
    detail::matmul_forward_impl<double, Avx2>(out.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N, IC,
                                              OC);
    check_close(out, want, 1e-12, 1e-12, "forward (double)");
    auto inpf = to_float(inp), wf = to_float(w), bf = to_float(b);
    std::vector<float> outf((size_t)N * OC, std::nanf(""));
    detail::matmul_forward_impl<float, Avx2>(outf.data(), inpf.data(), wf.data(), with_bias ? bf.data() : nullptr, N,
                                             IC, OC);
    check_close(outf, want, 1e-5, 1e-5 * std::sqrt((double)IC), "forward (float)");

    // backward (double) against finite differences of L = sum(out * R)
    Vec dinp = rng.normal(inp.size()), dw = rng.normal(w.size()), db = rng.normal(b.size());
    const Vec dinp0 = dinp, dw0 = dw, db0 = db;
    detail::matmul_backward_impl<double, Avx2>(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, R.data(),
                                               inp.data(), w.data(), N, IC, OC);
    auto loss = [&]() {
        Vec o((size_t)N * OC);
        detail::matmul_forward_impl<double, Avx2>(o.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N, IC,
                                                  OC);
        return dot(o, R);
    };
    check_fd(dinp, numeric_grad(inp, loss), "dinp vs finite differences (overwritten)");
    check_fd(added(dw, dw0), numeric_grad(w, loss), "dweight vs finite differences");
    if (with_bias) check_fd(added(db, db0), numeric_grad(b, loss), "dbias vs finite differences");
    else CHECK(db == db0);

    // backward (float) against the double one
    auto Rf = to_float(R), dinpf = to_float(dinp0), dwf = to_float(dw0), dbf = to_float(db0);
    detail::matmul_backward_impl<float, Avx2>(dinpf.data(), dwf.data(), with_bias ? dbf.data() : nullptr, Rf.data(),
                                              inpf.data(), wf.data(), N, IC, OC);
    check_close(dinpf, dinp, 1e-5, 1e-5 * std::sqrt((double)OC), "dinp (float)");
    check_close(dwf, dw, 1e-5, 1e-5 * std::sqrt((double)N), "dweight (float)");
    check_close(dbf, db, 1e-5, 1e-5 * std::sqrt((double)N), "dbias (float)");
}

}  // namespace

TEST_CASE("matmul forward and backward, every code path, ragged and full tiles", "[cpu_ops][matmul]") {
    Rand rng;
    // 7x5x9 and 33x17x13: nothing is a multiple of a tile; 14x35x70: full tiles plus edges
    const int shapes[][3] = {{7, 5, 9}, {33, 17, 13}, {14, 35, 70}, {1, 1, 1}};
    for (auto& s : shapes) {
        for (bool bias : {true, false}) {
            check_matmul<false>(rng, s[0], s[1], s[2], bias);
            if (detail::use_avx2_tiles()) check_matmul<true>(rng, s[0], s[1], s[2], bias);
        }
    }
}

TEST_CASE("matmul public entry points match the naive product", "[cpu_ops][matmul]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const int N = 19, IC = 40, OC = 67;
    Vec inp = rng.normal((size_t)N * IC), w = rng.normal((size_t)OC * IC), b = rng.normal(OC);
    Vec out((size_t)N * OC, std::nan(""));
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
    check_close(out, ref_matmul(inp, w, &b, N, IC, OC), 1e-12, 1e-12, "matmul_forward");
    // backward with dout = e_(n, o): dinp row n = weight row o; dweight row o = inp row n
    Vec dout((size_t)N * OC, 0.0), dinp((size_t)N * IC, 0.0), dw((size_t)OC * IC, 0.0), db(OC, 0.0);
    const int n = 11, o = 50;
    dout[(size_t)n * OC + o] = 1.0;
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    for (int i = 0; i < IC; i++) {
        CHECK(dinp[(size_t)n * IC + i] == w[(size_t)o * IC + i]);
        CHECK(dw[(size_t)o * IC + i] == inp[(size_t)n * IC + i]);
    }
    CHECK(db[o] == 1.0);
}

TEST_CASE("matmul backward over several K blocks matches naive sums", "[cpu_ops][matmul]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const int N = 2 * detail::MM_KB + 7, IC = 21, OC = detail::MM_KB + 29;  // K = N and K = OC span several blocks
    Vec inp = rng.normal((size_t)N * IC), w = rng.normal((size_t)OC * IC), dout = rng.normal((size_t)N * OC);
    Vec dinp = rng.normal(inp.size()), dw = rng.normal(w.size()), db = rng.normal(OC);
    Vec want_dinp(dinp.size(), 0.0), want_dw = dw, want_db = db;  // dinp is overwritten
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            const double d = dout[(size_t)n * OC + o];
            for (int i = 0; i < IC; i++) {
                want_dinp[(size_t)n * IC + i] += d * w[(size_t)o * IC + i];
                want_dw[(size_t)o * IC + i] += d * inp[(size_t)n * IC + i];
            }
            want_db[o] += d;
        }
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    check_close(dinp, want_dinp, 1e-12, 1e-12, "dinp");
    check_close(dw, want_dw, 1e-12, 1e-12, "dweight");
    check_close(db, want_db, 1e-12, 1e-12, "dbias");
}

// ---- encoder ----------------------------------------------------------------------------------

TEST_CASE("encoder forward and backward with repeated token ids", "[cpu_ops][encoder]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const int B = 3, T = 5, C = 19, Vp = 4, maxT = 7;  // 15 positions, 4 tokens: ids repeat
    const std::vector<int> inp = rng.ints((size_t)B * T, 0, Vp);
    Vec wte = rng.normal((size_t)Vp * C), wpe = rng.normal((size_t)maxT * C);
    const Vec R = rng.normal((size_t)B * T * C);

    Vec want((size_t)B * T * C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                want[((size_t)b * T + t) * C + c] = wte[(size_t)inp[b * T + t] * C + c] + wpe[(size_t)t * C + c];
    Vec out(want.size(), std::nan(""));
    encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    check_close(out, want, 0, 0, "encoder forward (double)");
    auto wtef = to_float(wte), wpef = to_float(wpe);
    std::vector<float> outf(want.size(), std::nanf(""));
    encoder_forward(outf.data(), inp.data(), wtef.data(), wpef.data(), B, T, C);
    check_close(outf, want, 1e-6, 1e-6, "encoder forward (float)");

    Vec dwte = rng.normal(wte.size()), dwpe = rng.normal(wpe.size());
    const Vec dwte0 = dwte, dwpe0 = dwpe;
    encoder_backward(dwte.data(), dwpe.data(), R.data(), inp.data(), B, T, C);
    auto loss = [&]() {
        Vec o(want.size());
        encoder_forward(o.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
        return dot(o, R);
    };
    check_fd(added(dwte, dwte0), numeric_grad(wte, loss), "dwte vs finite differences");
    check_fd(added(dwpe, dwpe0), numeric_grad(wpe, loss), "dwpe vs finite differences");
    // rows of wpe past T get nothing
    for (size_t i = (size_t)T * C; i < dwpe.size(); i++) CHECK(dwpe[i] == dwpe0[i]);
}

// ---- layernorm --------------------------------------------------------------------------------

TEST_CASE("layernorm forward and backward", "[cpu_ops][layernorm]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const int N = 6, C = 13;
    Vec x = rng.normal((size_t)N * C, 2.0), w = rng.normal(C), b = rng.normal(C);
    for (int n = 0; n < N; n++)  // rows with a non-zero mean
        for (int c = 0; c < C; c++) x[(size_t)n * C + c] += n - 2.5;
    const Vec R = rng.normal((size_t)N * C);

    const Vec want = ref_layernorm(x, w, b, N, C);
    Vec out(want.size(), std::nan("")), mean(N, std::nan("")), rstd(N, std::nan(""));
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    check_close(out, want, 1e-12, 1e-12, "layernorm forward (double)");
    auto xf = to_float(x), wf = to_float(w), bf = to_float(b);
    std::vector<float> outf(want.size()), meanf(N), rstdf(N);
    layernorm_forward(outf.data(), meanf.data(), rstdf.data(), xf.data(), wf.data(), bf.data(), N, C);
    check_close(outf, want, 1e-5, 1e-5, "layernorm forward (float)");

    Vec dx = rng.normal(x.size()), dw = rng.normal(C), db = rng.normal(C);
    const Vec dx0 = dx, dw0 = dw, db0 = db;
    layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    auto loss = [&]() {
        Vec o(want.size()), m(N), s(N);
        layernorm_forward(o.data(), m.data(), s.data(), x.data(), w.data(), b.data(), N, C);
        return dot(o, R);
    };
    check_fd(added(dx, dx0), numeric_grad(x, loss), "dinp vs finite differences");
    check_fd(added(dw, dw0), numeric_grad(w, loss), "dw vs finite differences");
    check_fd(added(db, db0), numeric_grad(b, loss), "db vs finite differences");

    auto Rf = to_float(R), dxf = to_float(dx0), dwf = to_float(dw0), dbf = to_float(db0);
    layernorm_backward(dxf.data(), dwf.data(), dbf.data(), Rf.data(), xf.data(), wf.data(), meanf.data(), rstdf.data(),
                       N, C);
    check_close(dxf, dx, 1e-4, 1e-5, "dinp (float)");
    check_close(dwf, dw, 1e-4, 1e-5, "dw (float)");
    check_close(dbf, db, 1e-5, 1e-5, "db (float)");
}

// A LayerNorm without bias (--bias 0): b = nullptr is the reference with b = 0, and db = nullptr leaves
// dinp and dw as they are with a bias.
TEST_CASE("layernorm without bias", "[cpu_ops][layernorm]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const int N = 5, C = 19;
    const Vec x = rng.normal((size_t)N * C, 2.0), w = rng.normal(C), R = rng.normal((size_t)N * C);
    const Vec zero(C, 0.0);
    const Vec want = ref_layernorm(x, w, zero, N, C);
    Vec out((size_t)N * C, std::nan("")), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), (const double*)nullptr, N, C);
    check_close(out, want, 1e-12, 1e-12, "layernorm forward without bias");
    Vec dx_b((size_t)N * C, 0.0), dw_b(C, 0.0), db(C, 0.0), dx((size_t)N * C, 0.0), dw(C, 0.0);
    layernorm_backward(dx_b.data(), dw_b.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                       C);
    layernorm_backward(dx.data(), dw.data(), (double*)nullptr, R.data(), x.data(), w.data(), mean.data(), rstd.data(),
                       N, C);
    CHECK(dx == dx_b);
    CHECK(dw == dw_b);
}

// ---- gelu and residual ------------------------------------------------------------------------

TEST_CASE("gelu forward and backward", "[cpu_ops][gelu]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const size_t n = 101;
    Vec x = rng.normal(n, 3.0);
    const Vec R = rng.normal(n);
    Vec want(n);
    for (size_t i = 0; i < n; i++) want[i] = ref_gelu(x[i]);
    Vec out(n, std::nan(""));
    gelu_forward(out.data(), x.data(), n);
    check_close(out, want, 1e-14, 1e-14, "gelu forward (double)");
    auto xf = to_float(x);
    std::vector<float> outf(n);
    gelu_forward(outf.data(), xf.data(), n);
    check_close(outf, want, 1e-5, 1e-6, "gelu forward (float)");

    Vec dx = rng.normal(n);
    const Vec dx0 = dx;
    gelu_backward(dx.data(), x.data(), R.data(), n);
    auto loss = [&]() {
        Vec o(n);
        gelu_forward(o.data(), x.data(), n);
        return dot(o, R);
    };
    check_fd(dx, numeric_grad(x, loss), "gelu dinp vs finite differences (overwritten)");
    auto Rf = to_float(R), dxf = to_float(dx0);
    gelu_backward(dxf.data(), xf.data(), Rf.data(), n);
    check_close(dxf, dx, 1e-5, 1e-5, "gelu dinp (float)");
}

// The exact GELU (--gelu erf) against x Phi(x) with Phi from erfc (another library function than the
// kernel's erf), its gradient against finite differences; n spans several of the float path's chunks.
TEST_CASE("gelu erf forward and backward", "[cpu_ops][gelu]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const size_t n = 9001;
    const Vec x = rng.normal(n, 3.0);
    const Vec R = rng.normal(n);
    Vec want(n);
    for (size_t i = 0; i < n; i++) want[i] = x[i] * 0.5 * std::erfc(-x[i] / std::sqrt(2.0));
    Vec out(n, std::nan(""));
    gelu_forward(out.data(), x.data(), n, llmc::Gelu::Erf);
    check_close(out, want, 1e-14, 1e-14, "gelu erf forward (double)");
    const auto xf = to_float(x);
    std::vector<float> outf(n, std::nanf(""));
    gelu_forward(outf.data(), xf.data(), n, llmc::Gelu::Erf);
    check_close(outf, want, 1e-5, 1e-6, "gelu erf forward (float)");
    // the kind is honoured: tanh's approximation is up to ~4.7e-4 away (near x = -2.7)
    std::vector<float> tanhf_out(n);
    gelu_forward(tanhf_out.data(), xf.data(), n, llmc::Gelu::Tanh);
    double most = 0;
    for (size_t i = 0; i < n; i++) most = std::max(most, std::fabs((double)tanhf_out[i] - (double)outf[i]));
    CHECK(most > 1e-4);

    Vec dx(n, std::nan(""));
    gelu_backward(dx.data(), x.data(), R.data(), n, llmc::Gelu::Erf);
    Vec xs(x.begin(), x.begin() + 200), Rs(R.begin(), R.begin() + 200), dxs(dx.begin(), dx.begin() + 200);
    auto loss = [&]() {
        Vec o(xs.size());
        gelu_forward(o.data(), xs.data(), xs.size(), llmc::Gelu::Erf);
        return dot(o, Rs);
    };
    check_fd(dxs, numeric_grad(xs, loss), "gelu erf dinp vs finite differences");
    auto Rf = to_float(R);
    std::vector<float> dxf(n, std::nanf(""));
    gelu_backward(dxf.data(), xf.data(), Rf.data(), n, llmc::Gelu::Erf);
    check_close(dxf, dx, 1e-5, 1e-5, "gelu erf dinp (float)");
}

TEST_CASE("residual forward and backward", "[cpu_ops][residual]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const size_t n = 37;
    Vec a = rng.normal(n), b = rng.normal(n);
    const Vec R = rng.normal(n);
    Vec out(n, std::nan(""));
    residual_forward(out.data(), a.data(), b.data(), n);
    for (size_t i = 0; i < n; i++) CHECK(out[i] == a[i] + b[i]);
    Vec da = rng.normal(n), db = rng.normal(n);
    const Vec da0 = da, db0 = db;
    residual_backward(da.data(), db.data(), R.data(), n);
    auto loss = [&]() {
        Vec o(n);
        residual_forward(o.data(), a.data(), b.data(), n);
        return dot(o, R);
    };
    check_fd(added(da, da0), numeric_grad(a, loss), "da vs finite differences");
    check_fd(added(db, db0), numeric_grad(b, loss), "db vs finite differences");
}

// ---- classifier -------------------------------------------------------------------------------

TEST_CASE("classifier: cross-entropy + z-loss over the real vocabulary", "[cpu_ops][classifier]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const int N = 7, V = 11, Vp = 16;
    const double PAD = 100.0;  // padded logits: would dominate lse and the max if they were read
    for (float z : {0.0f, 0.1f}) {
        INFO("z_weight " << z);
        Vec logits = rng.normal((size_t)N * Vp, 3.0);
        for (int n = 0; n < N; n++)
            for (int v = V; v < Vp; v++) logits[(size_t)n * Vp + v] = PAD;
        std::vector<int> targets = rng.ints(N, 0, V);
        targets[0] = 0;  // the edges of the real vocabulary and a repeated target
        targets[1] = V - 1;
        targets[2] = V - 1;

        // naive reference
        Vec want_loss(N), want_z(N), want_lse(N);
        double want_max = -1e300, want_lse_sum = 0;
        for (int n = 0; n < N; n++) {
            double m = -1e300, s = 0;
            for (int v = 0; v < V; v++) m = std::max(m, logits[(size_t)n * Vp + v]);
            for (int v = 0; v < V; v++) s += std::exp(logits[(size_t)n * Vp + v] - m);
            want_lse[n] = m + std::log(s);
            want_loss[n] = want_lse[n] - logits[(size_t)n * Vp + targets[n]];
            want_z[n] = z * want_lse[n] * want_lse[n];
            want_max = std::max(want_max, m);
            want_lse_sum += want_lse[n];
        }

        Vec loss(N, std::nan("")), zl(N, std::nan("")), lse(N, std::nan(""));
        OutputStats st{std::nanf(""), std::nan(""), -1};
        classifier_forward(loss.data(), zl.data(), lse.data(), logits.data(), targets.data(), z, N, V, Vp, &st);
        check_close(loss, want_loss, 1e-12, 1e-12, "CE (double)");
        check_close(zl, want_z, 1e-12, 1e-12, "z-loss (double)");
        check_close(lse, want_lse, 1e-12, 1e-12, "lse (double)");
        CHECK(st.max_logit == Approx(want_max).epsilon(1e-6));
        CHECK(st.lse_sum == Approx(want_lse_sum).epsilon(1e-12));
        CHECK(st.count == N);
        CHECK(st.max_logit < PAD);

        auto logitsf = to_float(logits);
        std::vector<float> lossf(N), zlf(N), lsef(N);
        classifier_forward(lossf.data(), zlf.data(), lsef.data(), logitsf.data(), targets.data(), z, N, V, Vp,
                           (OutputStats*)nullptr);
        check_close(lossf, want_loss, 1e-5, 1e-5, "CE (float)");
        check_close(zlf, want_z, 1e-5, 1e-5, "z-loss (float)");

        // backward vs finite differences of L = dloss * sum_n (CE_n + z_n)
        const double dloss = 0.37;
        Vec dlogits = rng.normal(logits.size());
        const Vec dlogits0 = dlogits;
        classifier_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dloss, z, N, V, Vp);
        auto objective = [&]() {
            Vec l(N), zz(N), s(N);
            classifier_forward(l.data(), zz.data(), s.data(), logits.data(), targets.data(), z, N, V, Vp,
                               (OutputStats*)nullptr);
            double sum = 0;
            for (int n = 0; n < N; n++) sum += dloss * (l[n] + zz[n]);
            return sum;
        };
        const Vec fd = numeric_grad(logits, objective);
        check_fd(dlogits, fd, "dlogits vs finite differences (overwritten)");
        for (int n = 0; n < N; n++)  // the padding gets a zero gradient
            for (int v = V; v < Vp; v++) CHECK(dlogits[(size_t)n * Vp + v] == 0.0);

        auto dlf = to_float(dlogits0);
        classifier_backward(dlf.data(), logitsf.data(), lsef.data(), targets.data(), (float)dloss, z, N, V, Vp);
        check_close(dlf, dlogits, 1e-5, 1e-6, "dlogits (float)");
    }
}

TEST_CASE("classifier: every ISA twin on long rows against double", "[cpu_ops][classifier]") {
    // rows long enough for the vector loops, the blocks of 8 vectors and the ragged tails
    Rand rng;
    INFO("seed " << rng.seed);
    for (int V : {1, 7, 16, 100, 1000, 50257}) {
        const int N = 3, Vp = V + 47;
        Vec logits = rng.normal((size_t)N * Vp, 3.0);
        for (int n = 0; n < N; n++)
            for (int v = V; v < Vp; v++) logits[(size_t)n * Vp + v] = 100.0;  // padding: never read
        const std::vector<int> targets = rng.ints(N, 0, V);
        const float z = 0.1f;
        const double dloss = 0.37;
        // want_dl_terms: |dloss p (1 + 2 z lse)| + dloss at the target, whose difference is the gradient
        // there (p near 1 leaves a few 1e-3 of terms near dloss: float's rounding of p is then 1e-5 of it)
        Vec want_lse(N), want_loss(N), want_dl((size_t)N * Vp, 0.0), want_dl_terms((size_t)N * Vp, 0.0);
        for (int n = 0; n < N; n++) {
            const double* l = &logits[(size_t)n * Vp];
            double m = l[0], sum = 0;
            for (int v = 0; v < V; v++) m = std::max(m, l[v]);
            for (int v = 0; v < V; v++) sum += std::exp(l[v] - m);
            want_lse[n] = m + std::log(sum);
            want_loss[n] = want_lse[n] - l[targets[n]];
            for (int v = 0; v < V; v++) {
                want_dl[(size_t)n * Vp + v] = dloss * std::exp(l[v] - want_lse[n]) * (1 + 2 * z * want_lse[n]);
                want_dl_terms[(size_t)n * Vp + v] = std::fabs(want_dl[(size_t)n * Vp + v]);
            }
            want_dl[(size_t)n * Vp + targets[n]] -= dloss;
            want_dl_terms[(size_t)n * Vp + targets[n]] += dloss;
        }
        const std::vector<float> lf = to_float(logits);
        for (Isa isa : {Isa::Base, Isa::Avx2, Isa::Avx512}) {
            if (!isa_supported(isa)) continue;
            INFO("V " << V << ", isa " << isa_name(isa));
            std::vector<float> loss(N), zl(N), lse(N), dl((size_t)N * Vp, std::nanf(""));
            classifier_forward(loss.data(), zl.data(), lse.data(), lf.data(), targets.data(), z, N, V, Vp,
                               (OutputStats*)nullptr, isa);
            classifier_backward(dl.data(), lf.data(), lse.data(), targets.data(), (float)dloss, z, N, V, Vp, isa);
            check_close(lse, want_lse, 1e-6, 1e-6, "lse (float)");
            check_close(loss, want_loss, 1e-6, 1e-6, "CE (float)");
            check_close(dl, want_dl, 1e-5, 1e-8, "dlogits (float)", &want_dl_terms);
        }
    }
}

TEST_CASE("classifier refuses a target outside the vocabulary", "[cpu_ops][classifier]") {
    const int N = 2, V = 3, Vp = 4;
    std::vector<float> logits((size_t)N * Vp, 0.0f), loss(N), zl(N), lse(N), dl((size_t)N * Vp);
    std::vector<int> targets = {1, 3};  // 3 is padding, not vocabulary
    CHECK_THROWS_AS(classifier_forward(loss.data(), zl.data(), lse.data(), logits.data(), targets.data(), 0.0f, N, V,
                                       Vp, (OutputStats*)nullptr),
                    llmc::InputError);
    targets[1] = -1;
    CHECK_THROWS_AS(classifier_backward(dl.data(), logits.data(), lse.data(), targets.data(), 1.0f, 0.0f, N, V, Vp),
                    llmc::InputError);
}

// ---- adamw and global norm --------------------------------------------------------------------

TEST_CASE("adamw matches the scalar formula over several steps", "[cpu_ops][adamw]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const size_t n = 1000;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    for (float wd : {0.0f, 0.1f}) {
        for (float mult : {1.0f, 0.25f}) {
            INFO("weight_decay " << wd << " grad_multiplier " << mult);
            auto p = to_float(rng.normal(n)), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
            Vec pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
            for (int t = 1; t <= 4; t++) {
                const auto g = to_float(rng.normal(n, 0.5));
                adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t, mult);
                for (size_t i = 0; i < n; i++) {
                    const double gi = (double)g[i] * mult;
                    md[i] = b1 * md[i] + (1.0 - b1) * gi;
                    vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
                    const double mhat = md[i] / (1.0 - std::pow((double)b1, t));
                    const double vhat = vd[i] / (1.0 - std::pow((double)b2, t));
                    pd[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * pd[i]);
                }
                check_close(m, md, 1e-5, 1e-7, "m");
                check_close(v, vd, 1e-5, 1e-8, "v");
                check_close(p, pd, 1e-6, 1e-6, "params");
            }
        }
    }
}

TEST_CASE("global_norm_squared matches a double sum", "[cpu_ops][global_norm]") {
    Rand rng;
    INFO("seed " << rng.seed);
    for (size_t n : {(size_t)0, (size_t)1, (size_t)7, (size_t)100003}) {
        const auto g = to_float(rng.normal(n));
        double want = 0;
        for (float x : g) want += (double)x * x;
        CHECK(global_norm_squared(g.data(), n) == Approx(want).epsilon(1e-12));
    }
}

// ---- determinism ------------------------------------------------------------------------------

TEST_CASE("results are bit-identical for 1, 2 and 3 threads", "[cpu_ops][determinism]") {
    Rand rng;
    INFO("seed " << rng.seed);
    const int N = 300, IC = 48, OC = 333, B = 5, T = 14, C = 48, Vp = 9;
    const auto inp = to_float(rng.normal((size_t)N * IC)), w = to_float(rng.normal((size_t)OC * IC)),
               dout = to_float(rng.normal((size_t)N * OC)), bias = to_float(rng.normal(OC));
    const auto x = to_float(rng.normal((size_t)N * C)), lw = to_float(rng.normal(C)), lb = to_float(rng.normal(C)),
               ldout = to_float(rng.normal((size_t)N * C));
    const std::vector<int> tokens = rng.ints((size_t)B * T, 0, Vp);
    const auto edout = to_float(rng.normal((size_t)B * T * C));
    const auto big = to_float(rng.normal(300001));
    const auto g0 = to_float(rng.normal((size_t)OC * IC));  // pre-filled gradients

    struct Results {
        std::vector<float> out, dinp, dw, db, ln_out, ln_dx, ln_dw, ln_db, dwte, dwpe;
        double norm;
    };
    auto run = [&]() {
        Results r;
        r.out.assign((size_t)N * OC, 0.0f);
        matmul_forward(r.out.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
        r.dinp.assign(g0.begin(), g0.begin() + (size_t)N * IC);
        r.dw = g0;
        r.db.assign(g0.begin(), g0.begin() + OC);
        matmul_backward(r.dinp.data(), r.dw.data(), r.db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
        std::vector<float> mean(N), rstd(N);
        r.ln_out.assign((size_t)N * C, 0.0f);
        layernorm_forward(r.ln_out.data(), mean.data(), rstd.data(), x.data(), lw.data(), lb.data(), N, C);
        r.ln_dx.assign(g0.begin(), g0.begin() + (size_t)N * C);
        r.ln_dw.assign(g0.begin(), g0.begin() + C);
        r.ln_db.assign(g0.begin() + C, g0.begin() + 2 * C);
        layernorm_backward(r.ln_dx.data(), r.ln_dw.data(), r.ln_db.data(), ldout.data(), x.data(), lw.data(),
                           mean.data(), rstd.data(), N, C);
        r.dwte.assign(g0.begin(), g0.begin() + (size_t)Vp * C);
        r.dwpe.assign(g0.begin(), g0.begin() + (size_t)T * C);
        encoder_backward(r.dwte.data(), r.dwpe.data(), edout.data(), tokens.data(), B, T, C);
        r.norm = global_norm_squared(big.data(), big.size());
        return r;
    };
    Results r1, rk;
    with_threads(1, [&]() { r1 = run(); });
    for (int threads : {2, 3}) {
        INFO(threads << " threads");
        with_threads(threads, [&]() { rk = run(); });
        CHECK(bit_equal(r1.out, rk.out));
        CHECK(bit_equal(r1.dinp, rk.dinp));
        CHECK(bit_equal(r1.dw, rk.dw));
        CHECK(bit_equal(r1.db, rk.db));
        CHECK(bit_equal(r1.ln_out, rk.ln_out));
        CHECK(bit_equal(r1.ln_dx, rk.ln_dx));
        CHECK(bit_equal(r1.ln_dw, rk.ln_dw));
        CHECK(bit_equal(r1.ln_db, rk.ln_db));
        CHECK(bit_equal(r1.dwte, rk.dwte));
        CHECK(bit_equal(r1.dwpe, rk.dwpe));
        CHECK(std::memcmp(&r1.norm, &rk.norm, sizeof(double)) == 0);
    }
}
