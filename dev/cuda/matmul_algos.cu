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
//   --corrupt                                                          one sampled output of each problem's
//                                                                      first answer four bounds off: exit 0
//                                                                      only if the check caught every one and
//                                                                      nothing else failed (its own test)
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
#include <memory>
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
    // element e (a sampled element: the whole of D at the LM head's shape is 331M elements a rank)
    float at(size_t e) const {
        if (f32) {
            float v;
            CUDA_CHECK(cudaMemcpy(&v, static_cast<const float*>(p) + e, 4, cudaMemcpyDeviceToHost));
            return v;
        }
        bf16 v;
        CUDA_CHECK(cudaMemcpy(&v, static_cast<const bf16*>(p) + e, 2, cudaMemcpyDeviceToHost));
        return llmc::cuda::to_float(v);
    }
};

// n values j / 64, j uniform in [-128, 128), times scale (a power of two): exact in bf16 and fp32, so the
// host's copy is the device's; eight from one draw (the LM head's operands are 331M elements at paper-b16).
static std::vector<float> random_exact(llmc::Rng& rng, size_t n, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t w = rng.next_u64();
        for (size_t b = 0; b < 8 && i + b < n; b++) v[i + b] = (float)(int8_t)(w >> (8 * b)) * (scale / 64.0f);
    }
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
    // beta: the trainer accumulates only its weight gradients, the one call of op NT (llmc/cuda/matmul.cuh:
    // dweight^T += inp^T (op N) @ dout (op T)); the problem text does not carry it
    static bool accumulates(const Problem& q) { return !q.transa && q.transb; }
    Setup(const Problem& q, llmc::Rng& rng)
        : p(q),
          A((size_t)q.lda * (q.transa ? q.m : q.k), q.ab_f32, q.align[0]),
          B((size_t)q.ldb * (q.transb ? q.k : q.n), q.ab_f32, q.align[1]),
          C0(accumulates(q) ? (size_t)q.ldd * q.n : 0, q.d_f32, 256),
          D((size_t)q.ldd * q.n, q.d_f32, q.align[2]),
          bias(has_bias(q.epilogue) ? (size_t)q.m : 0, q.d_f32, q.align[3]),
          aux(has_gelu(q.epilogue) ? (size_t)q.ldd * q.n : 0, q.d_f32, q.align[4]) {
        a = random_exact(rng, A.n, 1.0f);
        b = random_exact(rng, B.n, 1.0f);
        // C far above the bound's share of it (gamma_k |C|, 2e-3 |C| at k 32768), so that an answer that
        // drops the accumulation fails; none with beta 0
        c0 = random_exact(rng, C0.n, 4096.0f);
        bv = random_exact(rng, bias.n, 1.0f);
        A.upload(a);
        B.upload(b);
        if (C0.n) C0.upload(c0);
        if (bias.n) bias.upload(bv);
        for (int s = 0; s < 256; s++)
            samples.emplace_back((int)(rng.uniform() * q.m) % q.m, (int)(rng.uniform() * q.n) % q.n);
        samples.emplace_back(q.m - 1, q.n - 1);  // the last element (ragged tiles)
    }
    float beta() const { return accumulates(p) ? 1.0f : 0.0f; }
    // D = C0 again (an accumulating D's starting value; with beta 0 NaN, so that an element the call does
    // not write fails the check), then one call at this context's rank
    bool run(llmc::cuda::MatmulContext& ctx, bool reset = true) {
        const size_t d_bytes = D.n * (p.d_f32 ? 4 : 2);
        if (reset && C0.n) CUDA_CHECK(cudaMemcpy(D.p, C0.p, d_bytes, cudaMemcpyDeviceToDevice));
        if (reset && !C0.n) CUDA_CHECK(cudaMemset(D.p, 0xFF, d_bytes));
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
        CUDA_CHECK(cudaDeviceSynchronize());
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
            test("D", D.at(at) + (corrupt && si == 0 ? 4.0 * tol_d : 0.0), ref, tol_d);
            if (aux.n) test("aux", aux.at(at), x, tol_x);
        }
        std::printf("    %-8s worst error / bound %.3f over %zu sampled elements%s  %s\n", who, worst, samples.size(),
                    bad ? (", first outside: " + first).c_str() : "", bad ? "FAIL" : "OK");
        return bad == 0;
    }
};

struct RankTime {
    int rank;
    std::string status;  // "ok", "check failed", or the call's error
    float ms;            // median time of a call (timed ranks with status ok; else NaN)
    std::string algo;
};

// A problem's outcome: each rank the heuristic offered (up to ranks), checked and (unless check_only)
// timed; then the first answer and the fastest passing one timed again, interleaved (three rounds,
// medians), so that the gain is not the minimum of several medians against one. A rank whose call
// throws or whose check fails is recorded and left out of the fastest.
struct Outcome {
    bool ok = true;                   // every offered rank passed its check (and rank 0 was offered)
    bool rank0_check_failed = false;  // rank 0 ran and its check failed (what --corrupt expects)
    bool other_failure = false;       // anything else failed: a call, another rank's check, the problem itself
    std::vector<RankTime> ranks;
    int best = -1;                         // index into ranks of the fastest passing rank
    double first_us = NAN, best_us = NAN;  // from the interleaved timing
};

static Outcome run_problem(const Problem& q, llmc::Rng& rng, int ranks, bool check_only, bool corrupt, int reps) {
    std::printf("%s  (calls a step: %g)\n", q.text.c_str(), q.calls);
    Outcome o;
    Setup s(q, rng);
    std::vector<std::unique_ptr<llmc::cuda::MatmulContext>> ctx;
    for (int r = 0; r < ranks; r++) {
        ctx.push_back(std::make_unique<llmc::cuda::MatmulContext>());
        llmc::cuda::MatmulContext& c = *ctx.back();
        c.heuristic_rank = r;
        const std::string who = "rank " + std::to_string(r);
        RankTime t{r, "ok", NAN, ""};
        try {
            if (!s.run(c)) {
                std::printf("    %s: the heuristic offered %d algorithm%s\n", who.c_str(), r, r == 1 ? "" : "s");
                if (r == 0) o.ok = false, o.other_failure = true;
                break;
            }
        } catch (const std::exception& e) {  // the library refused this answer's call
            t.status = std::string("error: ") + e.what();
            std::printf("    %-8s %s  FAIL\n", who.c_str(), t.status.c_str());
            o.ok = false;
            o.other_failure = true;
            o.ranks.push_back(t);
            continue;
        }
        const auto& entry = *c.algo_cache.begin();
        if (c.algo_cache.size() != 1 || lt::problem_text(entry.first) != q.text) {
            std::printf("    %s: the call ran problem '%s', not the profile's  FAIL\n", who.c_str(),
                        lt::problem_text(entry.first).c_str());
            o.ok = false;
            o.other_failure = true;
            return o;
        }
        cublasLtMatmulHeuristicResult_t h{};
        h.algo = entry.second.algo;
        t.algo = lt::algo_config_text(h);
        if (!s.check(who.c_str(), corrupt && r == 0)) {
            t.status = "check failed";
            o.ok = false;
            (r == 0 ? o.rank0_check_failed : o.other_failure) = true;
        } else if (!check_only) {
            t.ms = lab::time_ms([&] { s.run(c, false); }, reps);  // an accumulating D keeps accumulating
            std::printf("    %-8s %10.2f us  %s\n", who.c_str(), t.ms * 1e3, t.algo.c_str());
            if (o.best < 0 || t.ms < o.ranks[o.best].ms) o.best = (int)o.ranks.size();
        }
        o.ranks.push_back(t);
    }
    if (check_only || o.best < 0 || o.ranks[0].status != "ok") return o;
    const int b = o.best;
    auto time_rank = [&](int i) { return lab::time_ms([&] { s.run(*ctx[o.ranks[i].rank], false); }, reps); };
    std::vector<float> t0, tb;
    for (int round = 0; round < 3; round++) {
        t0.push_back(time_rank(0));
        tb.push_back(b == 0 ? t0.back() : time_rank(b));
    }
    std::sort(t0.begin(), t0.end());
    std::sort(tb.begin(), tb.end());
    o.first_us = t0[1] * 1e3;
    o.best_us = std::min(t0[1], tb[1]) * 1e3;  // the first answer stays when the other is not faster again
    if (tb[1] >= t0[1]) o.best = 0;
    std::printf("    interleaved: rank 0 %.2f us, rank %d %.2f us\n", t0[1] * 1e3, o.ranks[b].rank, tb[1] * 1e3);
    return o;
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

    // per problem: the first answer, the fastest passing one (timed again, interleaved), the step's gain;
    // the JSON rewritten after each problem, so that a later failure or the step's time limit keeps the rows
    bool ok = true, corrupt_caught = true, corrupt_other = false;
    double first_us = 0.0, best_us = 0.0;
    nlohmann::json out = {{"device", prop.name},       {"precision", llmc::cuda::kPrecisionName},
                          {"problems", problems_path}, {"ranks", ranks},
                          {"checks_passed", true},     {"rows", nlohmann::json::array()}};
    auto write_json = [&] {
        if (args.json.empty()) return true;
        out["checks_passed"] = ok;
        out["first_us_per_step"] = first_us;
        out["best_us_per_step"] = best_us;
        std::ofstream f(args.json);
        f << out.dump(1) << "\n";
        if (!f) std::fprintf(stderr, "matmul_algos: cannot write %s\n", args.json.c_str());
        return (bool)f;
    };
    std::vector<std::string> table;
    for (const Problem& q : problems) {
        Outcome o;
        nlohmann::json row = {{"problem", q.text}, {"calls_per_step", q.calls}};
        bool stop = false;
        try {
            o = run_problem(q, rng, ranks, args.check, corrupt, args.reps);
        } catch (const std::exception& e) {  // outside one answer's call: the device may be unusable now
            std::printf("    %s  FAIL\n", e.what());
            o.ok = false;
            o.other_failure = true;
            row["error"] = e.what();
            stop = true;
        }
        ok = o.ok && ok;
        corrupt_caught = o.rank0_check_failed && corrupt_caught;
        corrupt_other = o.other_failure || corrupt_other;
        nlohmann::json ranks_json = nlohmann::json::array();
        for (const RankTime& t : o.ranks) {
            nlohmann::json r = {{"rank", t.rank}, {"status", t.status}, {"algo", t.algo}};
            r["us"] = std::isfinite(t.ms) ? nlohmann::json(t.ms * 1e3) : nlohmann::json(nullptr);
            ranks_json.push_back(r);
        }
        row["ranks"] = ranks_json;
        char line[256];
        if (std::isfinite(o.first_us)) {
            const double gain = q.calls * (o.first_us - o.best_us);
            first_us += q.calls * o.first_us;
            best_us += q.calls * o.best_us;
            std::snprintf(line, sizeof line, "%6g %6zu %10.2f %10.2f %5d %10.2f", q.calls, o.ranks.size(), o.first_us,
                          o.best_us, o.ranks[o.best].rank, gain);
            row["first_us"] = o.first_us;
            row["best_us"] = o.best_us;
            row["best_rank"] = o.ranks[o.best].rank;
            row["gain_us_per_step"] = gain;
        } else {
            std::snprintf(line, sizeof line, "%6g %6zu  (not timed)", q.calls, o.ranks.size());
        }
        table.push_back(q.text + std::string(std::max<int>(1, 93 - (int)q.text.size()), ' ') + line);
        out["rows"].push_back(row);
        if (!args.check && !write_json()) return 1;
        if (stop) break;
    }
    if (corrupt) {  // the self-test: every first answer's corrupted sample caught, nothing else wrong
        const bool pass = corrupt_caught && !corrupt_other;
        std::printf("corrupt self-test: %s\n", pass ? "every corrupted sample caught, nothing else failed: OK"
                                                    : "FAILED (a corrupted sample passed, or something else failed)");
        return pass ? 0 : 1;
    }
    std::printf("validation: %s\n", ok ? "all OK" : "FAILED");
    if (args.check) return ok ? 0 : 1;
    std::printf("\n%-92s %6s %6s %10s %10s %5s %10s\n", "problem", "calls", "ranks", "rank 0 us", "best us", "best",
                "gain us");
    for (const std::string& l : table) std::printf("%s\n", l.c_str());
    std::printf(
        "a step's GEMMs at the heuristic's first answers %.1f us, at the fastest offered %.1f us: %.1f us "
        "(%.1f%%) less (each call timed alone, L2 flushed; the problems whose first answer passed)\n",
        first_us, best_us, first_us - best_us, first_us > 0 ? 100.0 * (first_us - best_us) / first_us : 0.0);
    return ok ? 0 : 1;
}
