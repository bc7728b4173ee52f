// Kernel lab: what cuBLASLt's first heuristic answer leaves on the table. The trainer runs each GEMM
// problem with the first algorithm cublasLtMatmulAlgoGetHeuristic returns (llmc/cuda/matmul.cuh). Here
// each problem of a training step (its shape, layout, types, epilogue and alignments, as the trainer's
// --profile-steps profile.json lists them under "gemms.problems" with their calls per step) runs with
// each of the heuristic's first R answers through the trainer's own call (detail::lt_matmul with
// MatmulContext::heuristic_rank), each answer checked against a double product on sampled elements,
// then timed. The table: per problem the first answer's time, the fastest answer's, and what the step
// would gain (calls x the difference) if every problem ran its fastest.
//   ./matmul_algos --problems PROFILE.json [--ranks R] [--json FILE]  check + time the profile's problems
//   ./matmul_algos --check [--problems PROFILE.json]                   check only (built-in problems by default)
//   --corrupt                                                          change one sampled output before the
//                                                                      check: it must then fail (its own test)
// The check's bound per element is the one test/test_emulation_cublaslt.py derives from the cuBLASLt
// documentation (fp32 accumulation in any order, the epilogue's pre-activation possibly rounded to D's
// type, the tanh GELU of the guide's footnote, D's rounding); an fp32 D accumulates (beta = 1), as the
// trainer's weight gradients do. Epilogues: DEFAULT, BIAS, GELU_AUX and GELU_AUX_BIAS (the trainer's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dev/cuda/lab_common.cuh"
#include "llmc/cuda/matmul.cuh"

using bf16 = __nv_bfloat16;
namespace lt = llmc::cuda::detail;

// One GEMM problem as detail::problem_text writes it, with its calls per step.
struct Problem {
    int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0, epilogue = 0;
    bool transa = false, transb = false, ab_f32 = false, d_f32 = false;
    unsigned align[5] = {};  // A, B, D, bias, aux (0: none)
    double calls = 1.0;
    std::string text;
};

static bool has_bias(int e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
static bool has_gelu(int e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

// "m=.. n=.. k=.. op=XY ab=T d=T epilogue=E ld=a,b,d align=a,b,d,bias,aux"; throws on anything else.
static Problem parse_problem(const std::string& text, double calls) {
    Problem p;
    char ta = 0, tb = 0, ab[8] = {}, d[8] = {};
    int used = 0;
    const int got =
        std::sscanf(text.c_str(), "m=%d n=%d k=%d op=%c%c ab=%7s d=%7s epilogue=%d ld=%d,%d,%d align=%u,%u,%u,%u,%u%n",
                    &p.m, &p.n, &p.k, &ta, &tb, ab, d, &p.epilogue, &p.lda, &p.ldb, &p.ldd, &p.align[0], &p.align[1],
                    &p.align[2], &p.align[3], &p.align[4], &used);
    const auto type_ok = [](const char* t) { return !std::strcmp(t, "bf16") || !std::strcmp(t, "f32"); };
    if (got != 16 || (size_t)used != text.size() || (ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T') ||
        !type_ok(ab) || !type_ok(d) || p.m < 1 || p.n < 1 || p.k < 1)
        throw std::invalid_argument("not a GEMM problem of the trainer's profile: '" + text + "'");
    const int e = p.epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(e) && !has_gelu(e))
        throw std::invalid_argument("epilogue " + std::to_string(e) + " is not one the trainer uses: '" + text + "'");
    for (int i = 0; i < 5; i++)
        if (p.align[i] & (p.align[i] - 1))
            throw std::invalid_argument("an alignment that is not a power of two: '" + text + "'");
    p.transa = ta == 'T';
    p.transb = tb == 'T';
    p.ab_f32 = !std::strcmp(ab, "f32");
    p.d_f32 = !std::strcmp(d, "f32");
    p.calls = calls;
    p.text = text;
    return p;
}

// The problems of a profile.json ("gemms.problems": {problem, calls_per_step}).
static std::vector<Problem> read_profile(const std::string& path) {
    std::ifstream f(path);
    if (!f)
        throw std::invalid_argument("cannot read " + path + "; give a profile.json of the trainer's --profile-steps");
    nlohmann::json j;
    try {
        f >> j;
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(path + " is not JSON (" + e.what() + ")");
    }
    if (!j.contains("gemms") || !j["gemms"].contains("problems") || !j["gemms"]["problems"].is_array() ||
        j["gemms"]["problems"].empty())
        throw std::invalid_argument(path +
                                    " lists no GEMM problems (gemms.problems); give a profile.json of the "
                                    "trainer's --profile-steps");
    std::vector<Problem> out;
    for (const auto& q : j["gemms"]["problems"])
        out.push_back(parse_problem(q.at("problem").get<std::string>(), q.value("calls_per_step", 1.0)));
    return out;
}

// Built-in problems for --check: both transposes, both D types (an fp32 D accumulates), every epilogue,
// pointer alignments below 256 and a long k (split-K candidates).
static std::vector<Problem> builtin_problems() {
    const char* texts[] = {
        "m=192 n=128 k=576 op=NN ab=bf16 d=bf16 epilogue=1 ld=192,576,192 align=128,128,128,0,0",
        "m=576 n=96 k=192 op=TN ab=bf16 d=bf16 epilogue=1 ld=192,192,576 align=128,128,128,0,0",
        "m=192 n=64 k=4096 op=NT ab=bf16 d=f32 epilogue=1 ld=192,64,192 align=128,128,256,0,0",
        "m=136 n=40 k=64 op=TN ab=bf16 d=bf16 epilogue=4 ld=64,64,136 align=128,128,16,16,0",
        "m=256 n=72 k=64 op=TN ab=bf16 d=bf16 epilogue=164 ld=64,64,256 align=128,128,256,256,256",
        "m=256 n=24 k=128 op=TN ab=bf16 d=bf16 epilogue=160 ld=128,128,256 align=256,256,256,0,256",
        "m=64 n=48 k=96 op=NN ab=f32 d=f32 epilogue=1 ld=64,96,64 align=256,128,256,0,0",
    };
    std::vector<Problem> out;
    for (const char* t : texts) out.push_back(parse_problem(t, 1.0));
    return out;
}

// A device allocation whose pointer has exactly `align` bytes of alignment (a power of two <= 256), so
// the problem's alignment attributes are the profile's.
struct Operand {
    llmc::cuda::DeviceBuffer<char> mem;
    void* p = nullptr;
    size_t n = 0;
    bool f32 = false;
    Operand(size_t elems, bool is_f32, unsigned align) : mem(elems * (is_f32 ? 4 : 2) + 512), n(elems), f32(is_f32) {
        const uintptr_t base = ((uintptr_t)mem.get() + 255) & ~(uintptr_t)255;
        p = reinterpret_cast<void*>(base + (align && align < 256 ? align : 0));
    }
    void upload(const std::vector<float>& v) {
        if (f32) {
            CUDA_CHECK(cudaMemcpy(p, v.data(), n * 4, cudaMemcpyHostToDevice));
        } else {
            std::vector<bf16> t(n);
            for (size_t i = 0; i < n; i++) t[i] = llmc::cuda::from_float<bf16>(v[i]);
            CUDA_CHECK(cudaMemcpy(p, t.data(), n * 2, cudaMemcpyHostToDevice));
        }
    }
    std::vector<float> download() const {
        return f32 ? lab::download(static_cast<const float*>(p), n) : lab::download(static_cast<const bf16*>(p), n);
    }
};

static std::vector<float> rounded(std::vector<float> v, bool f32) {
    if (!f32)
        for (float& x : v) x = llmc::cuda::to_float(llmc::cuda::from_float<bf16>(x));
    return v;
}

static double gelu_tanh(double x) {  // the guide's GELU (cublasLtEpilogue_t, footnote)
    return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// The largest |GELU'(x)|, computed rather than quoted (about 1.129 near x = 1.5), with 0.1% to spare:
// an error e in GELU's input moves its output by at most this times e.
static double gelu_slope() {
    double s = 0.0;
    for (double x = -8.0; x <= 8.0; x += 1.0 / 1024)
        s = std::max(s, std::fabs(gelu_tanh(x + 1e-6) - gelu_tanh(x - 1e-6)) / 2e-6);
    return s * 1.001;
}

// A problem's inputs on the device and the sampled elements' reference, shared by every rank.
struct Setup {
    Problem p;
    Operand A, B, C0, D, bias, aux;
    std::vector<float> a, b, c0, bv;  // host copies of the device's exact values
    std::vector<std::pair<int, int>> samples;
    Setup(const Problem& q, llmc::Rng& rng)
        : p(q),
          A((size_t)q.lda * (q.transa ? q.m : q.k), q.ab_f32, q.align[0]),
          B((size_t)q.ldb * (q.transb ? q.k : q.n), q.ab_f32, q.align[1]),
          C0(q.d_f32 ? (size_t)q.ldd * q.n : 0, q.d_f32, 256),
          D((size_t)q.ldd * q.n, q.d_f32, q.align[2]),
          bias(has_bias(q.epilogue) ? (size_t)q.m : 0, q.d_f32, q.align[3]),
          aux(has_gelu(q.epilogue) ? (size_t)q.ldd * q.n : 0, q.d_f32, q.align[4]) {
        a = rounded(lab::random_normal(rng, A.n, 0.0f, 1.0f), q.ab_f32);
        b = rounded(lab::random_normal(rng, B.n, 0.0f, 1.0f), q.ab_f32);
        c0 = rounded(lab::random_normal(rng, C0.n, 0.0f, 1.0f), q.d_f32);  // beta 0 (a bf16 D): none
        bv = rounded(lab::random_normal(rng, bias.n, 0.0f, 1.0f), q.d_f32);
        A.upload(a);
        B.upload(b);
        if (C0.n) C0.upload(c0);
        if (bias.n) bias.upload(bv);
        for (int s = 0; s < 256; s++)
            samples.emplace_back((int)(rng.uniform() * q.m) % q.m, (int)(rng.uniform() * q.n) % q.n);
        samples.emplace_back(q.m - 1, q.n - 1);  // the last element (ragged tiles)
    }
    float beta() const { return p.d_f32 ? 1.0f : 0.0f; }  // an fp32 D accumulates, as the trainer's dweight
    // D = C0 again (an accumulating D's starting value; with beta 0 NaN, so that an element the call does
    // not write fails the check), then one call at this context's rank
    bool run(llmc::cuda::MatmulContext& ctx, bool reset = true) {
        if (reset && C0.n) CUDA_CHECK(cudaMemcpy(D.p, C0.p, D.n * 4, cudaMemcpyDeviceToDevice));
        if (reset && !C0.n) CUDA_CHECK(cudaMemset(D.p, 0xFF, D.n * 2));
        if (reset && aux.n) CUDA_CHECK(cudaMemset(aux.p, 0xFF, aux.n * (p.d_f32 ? 4 : 2)));
        const cudaDataType_t ab = p.ab_f32 ? CUDA_R_32F : CUDA_R_16BF, dt = p.d_f32 ? CUDA_R_32F : CUDA_R_16BF;
        return lt::lt_matmul(ctx, D.p, dt, A.p, p.transa, p.lda, B.p, p.transb, p.ldb, ab, p.m, p.n, p.k, p.ldd, beta(),
                             (cublasLtEpilogue_t)p.epilogue, bias.n ? bias.p : nullptr, aux.n ? aux.p : nullptr, 0,
                             /*may_fail=*/true);
    }
    // Every sampled element of D (and aux) within the documented bound; one line, true = pass.
    bool check(const char* who, bool corrupt) const {
        static const double slope = gelu_slope();
        const double u32 = 0x1p-24, uo = p.d_f32 ? 0x1p-24 : 0x1p-8;
        const double gamma = (p.k + 5) * u32 / (1.0 - (p.k + 5) * u32);
        const std::vector<float> d = D.download(), x_dev = aux.n ? aux.download() : std::vector<float>();
        size_t bad = 0;
        double worst = 0.0;
        std::string first;
        for (size_t si = 0; si < samples.size(); si++) {
            const int i = samples[si].first, j = samples[si].second;
            double pre = 0.0, mag = 0.0;
            for (int l = 0; l < p.k; l++) {
                const double av = a[p.transa ? (size_t)l + (size_t)i * p.lda : (size_t)i + (size_t)l * p.lda];
                const double bw = b[p.transb ? (size_t)j + (size_t)l * p.ldb : (size_t)l + (size_t)j * p.ldb];
                pre += av * bw;
                mag += std::fabs(av * bw);
            }
            const size_t at = (size_t)i + (size_t)j * p.ldd;
            if (beta() != 0.0f) {
                pre += c0[at];
                mag += std::fabs(c0[at]);
            }
            double x = pre;
            if (bias.n) {
                x += bv[i];
                mag += std::fabs(bv[i]);
            }
            const double ref = has_gelu(p.epilogue) ? gelu_tanh(x) : x;
            double ex = gamma * mag;
            if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) ex += uo * (std::fabs(pre) + ex);
            const double ed = has_gelu(p.epilogue) ? slope * ex + 16 * u32 * std::fabs(x) : ex;
            const double tol_d = ed + uo * (std::fabs(ref) + ed), tol_x = ex + uo * (std::fabs(x) + ex);
            auto test = [&](const char* what, double got, double want, double tol) {
                const double r = std::isfinite(got) ? std::fabs(got - want) / std::max(tol, 1e-300) : INFINITY;
                worst = std::max(worst, r);
                if (!(r <= 1.0) && !bad++)
                    first = std::string(what) + "(" + std::to_string(i) + "," + std::to_string(j) +
                            ") = " + std::to_string(got) + ", expected " + std::to_string(want) + " +- " +
                            std::to_string(tol);
            };
            // --corrupt: the first sample's D four bounds off (the check must then fail)
            test("D", d[at] + (corrupt && si == 0 ? 4.0 * tol_d : 0.0), ref, tol_d);
            if (aux.n) test("aux", x_dev[at], x, tol_x);
        }
        std::printf("    %-8s worst error / bound %.3f over %zu sampled elements%s  %s\n", who, worst, samples.size(),
                    bad ? (", first outside: " + first).c_str() : "", bad ? "FAIL" : "OK");
        return bad == 0;
    }
};

struct RankTime {
    int rank;
    float ms;
    std::string algo;
};

// Every rank the heuristic offers (up to ranks): checked, then (unless check_only) timed.
// Returns false when a rank's check fails; fills times.
static bool run_problem(const Problem& q, llmc::Rng& rng, int ranks, bool check_only, bool corrupt, int reps,
                        std::vector<RankTime>& times) {
    std::printf("%s  (calls a step: %g)\n", q.text.c_str(), q.calls);
    Setup s(q, rng);
    bool ok = true;
    for (int r = 0; r < ranks; r++) {
        llmc::cuda::MatmulContext ctx;
        ctx.heuristic_rank = r;
        if (!s.run(ctx)) {
            std::printf("    rank %d: the heuristic offered %d algorithm%s\n", r, r, r == 1 ? "" : "s");
            if (r == 0) ok = false;
            break;
        }
        const auto& entry = *ctx.algo_cache.begin();
        if (ctx.algo_cache.size() != 1 || lt::problem_text(entry.first) != q.text) {
            std::printf("    rank %d: the call ran problem '%s', not the profile's  FAIL\n", r,
                        lt::problem_text(entry.first).c_str());
            return false;
        }
        const std::string who = "rank " + std::to_string(r);
        ok = s.check(who.c_str(), corrupt && r == 0) && ok;
        if (check_only) continue;
        cublasLtMatmulHeuristicResult_t h{};
        h.algo = entry.second.algo;
        const float ms = lab::time_ms([&] { s.run(ctx, false); }, reps);  // an fp32 D accumulates across reps
        times.push_back({r, ms, lt::algo_config_text(h)});
        std::printf("    %-8s %10.2f us  %s\n", who.c_str(), ms * 1e3, times.back().algo.c_str());
    }
    return ok;
}

int main(int argc, char** argv) {
    // this lab's own options, then lab_common's (--check, --seed, --reps, --json)
    std::string problems_path;
    int ranks = 8;
    bool corrupt = false;
    std::vector<char*> rest = {argv[0]};
    for (int i = 1; i < argc; i++) {
        const std::string s = argv[i];
        if (s == "--problems" && i + 1 < argc) problems_path = argv[++i];
        else if (s == "--ranks" && i + 1 < argc) ranks = std::atoi(argv[++i]);
        else if (s == "--corrupt") corrupt = true;
        else rest.push_back(argv[i]);
    }
    if (ranks < 1 || ranks > llmc::cuda::MatmulContext::kMaxHeuristicRank + 1) {
        std::fprintf(stderr, "matmul_algos: --ranks must be in 1..%d\n",
                     llmc::cuda::MatmulContext::kMaxHeuristicRank + 1);
        return 2;
    }
    const lab::Args args = lab::parse_args((int)rest.size(), rest.data(), "matmul_algos");
    if (!args.check && problems_path.empty()) {
        std::fprintf(stderr,
                     "matmul_algos: give --problems PROFILE.json (a profile of the trainer's --profile-steps) "
                     "or --check\n");
        return 2;
    }
    std::vector<Problem> problems;
    try {
        problems = problems_path.empty() ? builtin_problems() : read_profile(problems_path);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "matmul_algos: %s\n", e.what());
        return 2;
    }
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);

    bool ok = true;
    struct Row {
        const Problem* p;
        std::vector<RankTime> t;
    };
    std::vector<Row> rows;
    for (const Problem& q : problems) {
        rows.push_back({&q, {}});
        ok = run_problem(q, rng, ranks, args.check, corrupt, args.reps, rows.back().t) && ok;
    }
    std::printf("validation: %s\n", ok ? "all OK" : "FAILED");
    if (!ok) return 1;
    if (args.check) return 0;

    // per problem: the first answer, the fastest, the step's gain at its calls
    double first_us = 0.0, best_us = 0.0;
    std::printf("\n%-92s %6s %6s %10s %10s %5s %10s\n", "problem", "calls", "ranks", "rank 0 us", "best us", "best",
                "gain us");
    nlohmann::json out = {{"device", prop.name},
                          {"precision", llmc::cuda::kPrecisionName},
                          {"problems", problems_path},
                          {"ranks", ranks},
                          {"rows", nlohmann::json::array()}};
    for (const Row& r : rows) {
        if (r.t.empty()) continue;
        const RankTime& best =
            *std::min_element(r.t.begin(), r.t.end(), [](const RankTime& x, const RankTime& y) { return x.ms < y.ms; });
        const double t0 = r.t[0].ms * 1e3, tb = best.ms * 1e3, gain = r.p->calls * (t0 - tb);
        first_us += r.p->calls * t0;
        best_us += r.p->calls * tb;
        std::printf("%-92s %6g %6zu %10.2f %10.2f %5d %10.2f\n", r.p->text.c_str(), r.p->calls, r.t.size(), t0, tb,
                    best.rank, gain);
        nlohmann::json ranks_json = nlohmann::json::array();
        for (const RankTime& t : r.t) ranks_json.push_back({{"rank", t.rank}, {"us", t.ms * 1e3}, {"algo", t.algo}});
        out["rows"].push_back({{"problem", r.p->text},
                               {"calls_per_step", r.p->calls},
                               {"ranks", ranks_json},
                               {"first_us", t0},
                               {"best_us", tb},
                               {"best_rank", best.rank},
                               {"gain_us_per_step", gain}});
    }
    std::printf(
        "a step's GEMMs at the heuristic's first answers %.1f us, at the fastest offered %.1f us: %.1f us "
        "(%.1f%%) less (each call timed alone, L2 flushed)\n",
        first_us, best_us, first_us - best_us, first_us > 0 ? 100.0 * (first_us - best_us) / first_us : 0.0);
    out["first_us_per_step"] = first_us;
    out["best_us_per_step"] = best_us;
    if (!args.json.empty()) {
        std::ofstream f(args.json);
        f << out.dump(1) << "\n";
        if (!f) {
            std::fprintf(stderr, "matmul_algos: cannot write %s\n", args.json.c_str());
            return 1;
        }
    }
    return 0;
}
