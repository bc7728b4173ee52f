// Near/far attention statistics (docs/training.md): key j of query i is "near" when i - j < N (N = --near,
// default the window P, for global heads too), else "far"; per head the mean softmax mass on near
// keys and the max pre-softmax logit among near keys and among far keys.
//   - llmc/cpu/attention_ls.h against a brute-force T x T computation in double on fresh random
//     inputs, for every layout (mixed local/global, MHSA G = NH, all-local G = 0, P >= T, T <= N,
//     N = 1, N < P, N > P), with and without soft-cap;
//   - the CPU model (Gpt2Cpu / CpuBackend) fills LogitStats' near/far vectors for every layer from
//     its actual attention inputs (QK-norm on and off);
//   - merging over micro-batches and ranks, the logit_stats.jsonl record, --near's validation and
//     the refusal of --near on a backend without these statistics.
// Inputs are random (llmc::Rng seeded per case, mixed with Catch's --rng-seed).
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "llmc/app/cli.h"
#include "llmc/cpu/attention_ls.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/io/metrics.h"
#include "llmc/core/rng.h"
#include "llmc/train/train_loop.h"

using namespace llmc;
using llmc::cpu::AttnHeadStats;

namespace {

constexpr double kU = 1.0 / 16777216.0;  // fp32 unit roundoff 2^-24
// Near mass is a mean of per-row probabilities in [0, 1]; fp32 rows of <= 70 keys carry an error
// of a few 1e-7 at most (observed: see the report in the test output); 1e-5 absolute is far
// below any real mistake (one key on the wrong side moves the mass by ~1/n >= 0.01).
constexpr double kMassTol = 1e-5;

uint64_t nf_seed(int index) { return 0x4EA2FA2ull + 104729ull * index + Catch::rngSeed(); }
const float kInf = std::numeric_limits<float>::infinity();

// ---- brute force: the full T x T score matrix with explicit masks, in double ------------------
struct NearFarRef {
    std::vector<double> near_mass;   // (NH) mean over the B*T query rows
    std::vector<double> near_max;    // (NH) max s over visible near pairs
    std::vector<double> far_max;     // (NH) max s over visible far pairs (-inf: none)
    std::vector<double> near_tol;    // (NH) fp32 error bound of the computed near_max / far_max:
    std::vector<double> far_tol;     //      max over the pairs of (hd + 2) u sum_d |q_d k_d| / sqrt(hd)
    std::vector<int64_t> far_pairs;  // (NH) number of visible far pairs
};

// qkv: (B, T, 3C) floats, llm.c layout; heads 0..NH-G-1 local (window P), the rest global.
NearFarRef brute_near_far(const float* qkv, int B, int T, int C, int NH, int G, int P, double softcap, int N) {
    const int hd = C / NH;
    NearFarRef r;
    r.near_mass.assign(NH, 0.0);
    r.near_max.assign(NH, -INFINITY);
    r.far_max.assign(NH, -INFINITY);
    r.near_tol.assign(NH, 0.0);
    r.far_tol.assign(NH, 0.0);
    r.far_pairs.assign(NH, 0);
    std::vector<double> S((size_t)T * T), bound((size_t)T * T);
    for (int h = 0; h < NH; h++) {
        const bool local = h < NH - G;
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < T; i++) {
                for (int j = 0; j < T; j++) {
                    double s = 0, sabs = 0;
                    for (int d = 0; d < hd; d++) {
                        const double x = (double)qkv[((size_t)b * T + i) * 3 * C + h * hd + d] *
                                         (double)qkv[((size_t)b * T + j) * 3 * C + C + h * hd + d];
                        s += x;
                        sabs += std::fabs(x);
                    }
                    S[(size_t)i * T + j] = s / std::sqrt((double)hd);
                    bound[(size_t)i * T + j] = (hd + 2) * kU * sabs / std::sqrt((double)hd);
                }
            }
            for (int i = 0; i < T; i++) {
                auto visible = [&](int j) { return j <= i && (!local || i - j < P); };
                double m = -INFINITY;
                for (int j = 0; j < T; j++) {
                    if (!visible(j)) continue;
                    const double s = S[(size_t)i * T + j];
                    m = std::max(m, softcap > 0 ? softcap * std::tanh(s / softcap) : s);
                }
                double z = 0, z_near = 0;
                for (int j = 0; j < T; j++) {
                    if (!visible(j)) continue;
                    const double s = S[(size_t)i * T + j];
                    const double e = std::exp((softcap > 0 ? softcap * std::tanh(s / softcap) : s) - m);
                    z += e;
                    if (i - j < N) {
                        z_near += e;
                        r.near_max[h] = std::max(r.near_max[h], s);
                        r.near_tol[h] = std::max(r.near_tol[h], bound[(size_t)i * T + j]);
                    } else {
                        r.far_max[h] = std::max(r.far_max[h], s);
                        r.far_tol[h] = std::max(r.far_tol[h], bound[(size_t)i * T + j]);
                        r.far_pairs[h]++;
                    }
                }
                r.near_mass[h] += z_near / z / ((double)B * T);
            }
        }
    }
    return r;
}

std::vector<AttnHeadStats> fresh(int NH) { return std::vector<AttnHeadStats>(NH, AttnHeadStats{-kInf, kInf, 0.0, 0}); }

struct NfCase {
    int B, T, C, NH, G, P, near;  // near 0 = P
    const char* what;
    std::string name() const {
        return std::string(what) + ": B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
               " NH=" + std::to_string(NH) + " G=" + std::to_string(G) + " P=" + std::to_string(P) +
               " near=" + std::to_string(near);
    }
};

const NfCase kCases[] = {
    {2, 13, 16, 4, 1, 4, 0, "mixed, N = P"},
    {2, 37, 24, 3, 1, 5, 2, "mixed, N < P, two row chunks"},
    {1, 70, 16, 2, 1, 7, 20, "mixed, N > P: local heads have no far key"},
    {1, 19, 16, 4, 0, 6, 0, "all-local, N = P: no far key at all"},
    {2, 19, 16, 4, 0, 6, 3, "all-local, N < P"},
    {2, 11, 24, 3, 3, 4, 0, "MHSA, N = P < T"},
    {2, 40, 16, 4, 4, 50, 0, "MHSA, N = P >= T: no far key"},
    {2, 10, 16, 4, 2, 50, 0, "P > T: local heads act global"},
    {1, 9, 24, 3, 1, 9, 1, "P = T, N = 1: only the diagonal is near"},
    {2, 12, 16, 4, 1, 3, 12, "T <= N: no far key"},
    {1, 45, 16, 4, 2, 8, 30, "global heads split at N > P, two row chunks"},
};

// The statistics of one attention_forward call against the brute force; returns the largest
// near-mass error seen (for the report).
double check_case(const NfCase& c, float softcap, uint64_t seed, int64_t* heads_without_far, int64_t* heads_with_far) {
    llmc::Rng rng(seed);
    std::vector<float> qkv((size_t)c.B * c.T * 3 * c.C);
    for (float& x : qkv) x = 1.5f * (float)rng.normal();  // logits of a few units: the cap at 2.5 matters
    std::vector<float> out((size_t)c.B * c.T * c.C), lse((size_t)c.B * c.NH * c.T);
    std::vector<float> out0(out.size(), std::nanf("")), lse0(lse.size(), std::nanf(""));
    auto st = fresh(c.NH);
    std::fill(out.begin(), out.end(), std::nanf(""));
    llmc::cpu::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, softcap, st.data(),
                                 c.near);
    // statistics do not change the attention itself
    llmc::cpu::attention_forward(out0.data(), lse0.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, softcap,
                                 (AttnHeadStats*)nullptr, c.near);
    CHECK(out == out0);
    CHECK(lse == lse0);

    const int N = c.near > 0 ? c.near : c.P;
    const NearFarRef ref = brute_near_far(qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, softcap, N);
    double worst = 0;
    for (int h = 0; h < c.NH; h++) {
        INFO("head " << h << (h < c.NH - c.G ? " (local)" : " (global)"));
        REQUIRE(st[h].rows == (int64_t)c.B * c.T);
        const double mass = st[h].near_mass_sum / (double)st[h].rows;
        worst = std::max(worst, std::fabs(mass - ref.near_mass[h]));
        CHECK(std::fabs(mass - ref.near_mass[h]) <= kMassTol);
        CHECK(mass >= 0.0);
        CHECK(mass <= 1.0);
        CHECK(std::fabs((double)st[h].near_max_logit - ref.near_max[h]) <= ref.near_tol[h]);
        if (ref.far_pairs[h] == 0) {
            ++*heads_without_far;
            CHECK(st[h].far_max_logit == -kInf);  // written as null
            CHECK(mass == 1.0);                   // every row's mass is exactly 1: far mass 0
        } else {
            ++*heads_with_far;
            REQUIRE(std::isfinite(st[h].far_max_logit));
            CHECK(std::fabs((double)st[h].far_max_logit - ref.far_max[h]) <= ref.far_tol[h]);
            CHECK(mass < 1.0);
        }
        // max over all pairs = max(near max, far max), as the existing max_logit
        CHECK(st[h].max_logit == std::max(st[h].near_max_logit, st[h].far_max_logit));
    }
    return worst;
}

}  // namespace

TEST_CASE("near/far statistics of attention_forward match a brute-force T x T computation", "[near_far]") {
    int64_t without_far = 0, with_far = 0;
    double worst = 0;
    int index = 0;
    for (const NfCase& c : kCases) {
        for (float softcap : {0.0f, 2.5f}) {
            INFO(c.name() << " softcap=" << softcap);
            worst = std::max(worst, check_case(c, softcap, nf_seed(index++), &without_far, &with_far));
        }
    }
    // both branches ran: heads with far keys and heads with none
    CHECK(without_far > 0);
    CHECK(with_far > 0);
    WARN("near/far: worst |near_mass - brute force| = " << worst << " (tolerance " << kMassTol << ") over " << index
                                                        << " cases; heads with / without far keys: " << with_far
                                                        << " / " << without_far);
}

TEST_CASE("near/far statistics: the expected layouts have (no) far keys", "[near_far]") {
    // The brute force itself: a guard that the layouts above exercise what their names say.
    std::vector<float> qkv((size_t)12 * 3 * 16, 0.5f);
    auto far_pairs = [&](int T, int G, int P, int N) {
        return brute_near_far(qkv.data(), 1, T, 16, 4, G, P, 0.0, N).far_pairs;
    };
    CHECK(far_pairs(12, 0, 5, 5) == std::vector<int64_t>(4, 0));    // all-local, N = P
    CHECK(far_pairs(12, 4, 50, 50) == std::vector<int64_t>(4, 0));  // MHSA, N >= T
    CHECK(far_pairs(12, 1, 3, 12) == std::vector<int64_t>(4, 0));   // T <= N
    const auto mixed = far_pairs(12, 1, 3, 3);                      // local: none; global: (T-3)(T-2)/2 = 45
    CHECK(mixed == std::vector<int64_t>{0, 0, 0, 45});
}

TEST_CASE("near/far statistics accumulate over calls and ignore the thread count", "[near_far]") {
    const NfCase c{2, 41, 16, 4, 1, 5, 3, "mixed"};
    llmc::Rng rng(nf_seed(1000));
    std::vector<float> qkv((size_t)c.B * c.T * 3 * c.C);
    for (float& x : qkv) x = (float)rng.normal();
    std::vector<float> out((size_t)c.B * c.T * c.C), lse((size_t)c.B * c.NH * c.T);
    std::vector<AttnHeadStats> by_threads[2];
    const int saved = omp_get_max_threads();
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        by_threads[t] = fresh(c.NH);
        llmc::cpu::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, 0.0f,
                                     by_threads[t].data(), c.near);
    }
    omp_set_num_threads(saved);
    auto twice = fresh(c.NH);
    for (int k = 0; k < 2; k++)
        llmc::cpu::attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.G, c.P, 0.0f,
                                     twice.data(), c.near);
    for (int h = 0; h < c.NH; h++) {
        INFO("head " << h);
        CHECK(by_threads[0][h].near_mass_sum == by_threads[1][h].near_mass_sum);
        CHECK(by_threads[0][h].near_max_logit == by_threads[1][h].near_max_logit);
        CHECK(by_threads[0][h].far_max_logit == by_threads[1][h].far_max_logit);
        CHECK(twice[h].rows == 2 * by_threads[0][h].rows);
        CHECK(twice[h].near_mass_sum == 2 * by_threads[0][h].near_mass_sum);
        CHECK(twice[h].near_max_logit == by_threads[0][h].near_max_logit);
        CHECK(twice[h].far_max_logit == by_threads[0][h].far_max_logit);
    }
    float* p = out.data();
    CHECK_THROWS_AS(llmc::cpu::attention_forward(p, p, p, 1, 4, 16, 4, 1, 3, 0.0f, (AttnHeadStats*)nullptr, -1),
                    InputError);
}

// ---- the whole CPU model ------------------------------------------------------------------------

TEST_CASE("CPU model: LogitStats near/far vectors match a brute-force computation per layer", "[near_far]") {
    struct Layout {
        int G, P;
        const char* what;
    };
    const Layout layouts[] = {{1, 3, "mixed"}, {4, 3, "MHSA"}, {0, 3, "all-local"}, {1, 20, "P >= T"}};
    int index = 0;
    for (const Layout& lay : layouts) {
        for (bool qk : {false, true}) {
            for (int near : {0, 2, 16}) {  // 0 = P; 16 = T: no far key
                INFO(lay.what << " G=" << lay.G << " P=" << lay.P << " qk_norm " << qk << " near " << near);
                ModelConfig cfg;
                cfg.num_layers = 2;
                cfg.channels = 32;
                cfg.num_heads = 4;
                cfg.global_heads = lay.G;
                cfg.window = lay.P;
                cfg.vocab_size = 50;
                cfg.padded_vocab_size = 128;
                cfg.max_seq_len = 32;
                cfg.qk_norm = qk;
                cfg.attn_softcap = 1.5f;
                cpu::Gpt2Cpu<float> m(cfg);
                Rng r(nf_seed(2000 + index++));
                std::vector<float> w(m.layout().total);
                for (float& x : w) x = 0.3f * (float)r.normal();  // order-one weights: logits of a few units
                m.set_params(w.data());
                const int B = 2, T = 16;
                std::vector<int> inp(B * T), tgt(B * T);
                for (int& t : inp) t = (int)(r.next_u64() % cfg.vocab_size);
                for (int& t : tgt) t = (int)(r.next_u64() % cfg.vocab_size);
                LogitStats st;
                st.near_distance = near;
                m.forward(inp.data(), tgt.data(), B, T, 0.0f, &st);
                REQUIRE(st.has_near_far());
                REQUIRE(st.near_mass.size() == (size_t)cfg.num_layers * cfg.num_heads);
                REQUIRE(st.near_max_logit.size() == st.near_mass.size());
                REQUIRE(st.far_max_logit.size() == st.near_mass.size());
                CHECK(st.near_distance == near);  // the caller's request is kept
                const size_t N = (size_t)B * T, C = cfg.channels;
                for (int l = 0; l < cfg.num_layers; l++) {
                    const float* att_in = (qk ? m.acts().qkvn.data() : m.acts().qkv.data()) + l * N * 3 * C;
                    const NearFarRef ref = brute_near_far(att_in, B, T, (int)C, cfg.num_heads, cfg.global_heads,
                                                          cfg.window, cfg.attn_softcap, st.near_or(cfg.window));
                    for (int h = 0; h < cfg.num_heads; h++) {
                        INFO("layer " << l << " head " << h);
                        const size_t k = (size_t)l * cfg.num_heads + h;
                        CHECK(std::fabs(st.near_mass[k] - ref.near_mass[h]) <= kMassTol);
                        CHECK(std::fabs(st.near_max_logit[k] - ref.near_max[h]) <= ref.near_tol[h]);
                        if (ref.far_pairs[h] == 0) {
                            CHECK(st.far_max_logit[k] == -kInf);
                            CHECK(st.near_mass[k] == 1.0f);
                        } else {
                            CHECK(std::fabs(st.far_max_logit[k] - ref.far_max[h]) <= ref.far_tol[h]);
                        }
                    }
                }
            }
        }
    }
    // the CPU backend computes them without being asked (near_distance 0: at the window P)
    ModelConfig cfg;
    cfg.num_layers = 1;
    cfg.channels = 16;
    cfg.num_heads = 2;
    cfg.global_heads = 1;
    cfg.window = 2;
    cfg.vocab_size = 20;
    cfg.padded_vocab_size = 128;
    cfg.max_seq_len = 8;
    CpuBackend cpu(cfg, 1);
    const std::vector<int> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
    LogitStats unasked;
    cpu.forward(tokens.data(), tokens.data(), 1, 8, 0.0f, &unasked);
    CHECK(unasked.has_near_far());
    CHECK(unasked.near_mass.size() == 2);
    CHECK(unasked.near_mass[0] == 1.0f);  // the local head's keys (window 2) are all at distance < 2
    CHECK(unasked.near_mass[1] < 1.0f);   // the global head's row 7 sees keys 0 .. 5 at distance >= 2
}

// ---- merging, the record, the flag --------------------------------------------------------------

namespace {

LogitStats make_stats(std::vector<float> mass, std::vector<float> nmax, std::vector<float> fmax) {
    LogitStats s;
    s.resize(1, (int)mass.size());
    s.resize_near(1, (int)mass.size());
    s.near_mass = mass;
    s.near_max_logit = nmax;
    s.far_max_logit = fmax;
    return s;
}

// Rank 0 of a 2-rank world whose partner's buffers are scripted, in call order: every all_reduce
// combines this rank's buffer with the next scripted one by its op (the op is what is tested).
class ScriptedCollective : public SingleProcessCollective {
public:
    std::deque<std::vector<float>> partner;
    std::vector<ReduceOp> ops;
    int world_size() const override { return 2; }
    void all_reduce(float* buf, size_t n, ReduceOp op) override {
        REQUIRE(!partner.empty());
        const std::vector<float> o = partner.front();
        partner.pop_front();
        REQUIRE(o.size() == n);
        ops.push_back(op);
        for (size_t i = 0; i < n; i++) {
            switch (op) {
                case ReduceOp::Sum: buf[i] += o[i]; break;
                case ReduceOp::Avg: buf[i] = (buf[i] + o[i]) / 2; break;
                case ReduceOp::Max: buf[i] = std::max(buf[i], o[i]); break;
                case ReduceOp::Min: buf[i] = std::min(buf[i], o[i]); break;
            }
        }
    }
};

}  // namespace

TEST_CASE("near/far statistics merge over micro-batches (mean, max, max) and ranks", "[near_far]") {
    // three micro-batches; head 1 has no far key in the first two (-inf)
    const LogitStats a = make_stats({0.5f, 1.0f}, {2.0f, 1.0f}, {3.0f, -kInf});
    const LogitStats b = make_stats({0.25f, 1.0f}, {4.0f, 0.5f}, {1.0f, -kInf});
    const LogitStats c = make_stats({0.75f, 0.4f}, {1.0f, 0.25f}, {2.0f, 7.0f});
    LogitStats acc;
    merge_logit_stats(acc, a, 0, 3);
    merge_logit_stats(acc, b, 1, 3);
    merge_logit_stats(acc, c, 2, 3);
    CHECK(acc.near_mass[0] == Approx(0.5));
    CHECK(acc.near_mass[1] == Approx(2.4 / 3));
    CHECK(acc.near_max_logit == std::vector<float>{4.0f, 1.0f});
    CHECK(acc.far_max_logit == std::vector<float>{3.0f, 7.0f});
    LogitStats none;  // no far key in any micro-batch stays -inf
    merge_logit_stats(none, a, 0, 2);
    merge_logit_stats(none, b, 1, 2);
    CHECK(none.far_max_logit[1] == -kInf);
    CHECK(none.near_mass[1] == 1.0f);

    // a backend without them (CUDA): nothing appears
    LogitStats cuda_like, cuda_acc;
    cuda_like.resize(1, 2);
    merge_logit_stats(cuda_acc, cuda_like, 0, 2);
    merge_logit_stats(cuda_acc, cuda_like, 1, 2);
    CHECK_FALSE(cuda_acc.has_near_far());
    CHECK(cuda_acc.far_max_logit.empty());

    // over ranks: near mass averaged, maxima maxed; the partner rank's buffers in call order
    ScriptedCollective comm;
    comm.partner = {{9, 9},        {-9, -9},     {1, 1},          // max_logit, min_logit, entropy
                    {0.25f, 0.6f}, {5.0f, 0.5f}, {-kInf, -kInf},  // near_mass, near_max, far_max
                    {0},           {0}};                          // out_max_logit, out_mean_lse
    LogitStats s = acc;
    reduce_logit_stats(comm, s);
    CHECK(comm.partner.empty());
    CHECK(s.near_mass[0] == Approx((0.5 + 0.25) / 2));
    CHECK(s.near_mass[1] == Approx((2.4 / 3 + 0.6) / 2));
    CHECK(s.near_max_logit == std::vector<float>{5.0f, 1.0f});
    CHECK(s.far_max_logit == std::vector<float>{3.0f, 7.0f});
    ScriptedCollective comm2;  // without near/far vectors no extra collective call is made
    comm2.partner = {{0, 0}, {0, 0}, {0, 0}, {0}, {0}};
    LogitStats c2 = cuda_acc;
    reduce_logit_stats(comm2, c2);
    CHECK(comm2.partner.empty());
    CHECK_FALSE(c2.has_near_far());
}

TEST_CASE("logit_stats line: near/far fields, null far max, omitted without them", "[near_far]") {
    ModelConfig cfg;
    cfg.num_layers = 1;
    cfg.channels = 16;
    cfg.num_heads = 2;
    cfg.global_heads = 1;
    cfg.window = 5;
    LogitStats s = make_stats({0.75f, 1.0f}, {2.5f, 1.5f}, {3.5f, -kInf});
    auto rec = nlohmann::ordered_json::parse(logit_stats_line(7, s, cfg));
    CHECK(rec["near"] == 5);  // near_distance 0: the window
    REQUIRE(rec["attn"].size() == 2);
    CHECK(rec["attn"][0]["near_mass"] == 0.75);
    CHECK(rec["attn"][0]["near_max"] == 2.5);
    CHECK(rec["attn"][0]["far_max"] == 3.5);
    CHECK(rec["attn"][1]["far_max"].is_null());
    CHECK(rec["attn"][1]["near_mass"] == 1.0);
    s.near_distance = 3;
    CHECK(nlohmann::ordered_json::parse(logit_stats_line(7, s, cfg))["near"] == 3);
    LogitStats cuda_like;
    cuda_like.resize(1, 2);
    auto rec2 = nlohmann::ordered_json::parse(logit_stats_line(7, cuda_like, cfg));
    CHECK_FALSE(rec2.contains("near"));
    CHECK_FALSE(rec2["attn"][0].contains("near_mass"));
    CHECK_FALSE(rec2["attn"][0].contains("far_max"));
}

TEST_CASE("--near: parsed and validated (>= 1)", "[near_far]") {
    auto parse = [](std::vector<const char*> args) {
        args.insert(args.begin(), "train_gpt2_ls");
        TrainCli cli;
        REQUIRE(cli.parse((int)args.size(), args.data()) == -1);
        return std::make_pair(cli.config(), cli.config_file_text());
    };
    auto [given, toml] = parse({"-i", "x", "--near", "7"});
    REQUIRE(given.near.has_value());
    CHECK(*given.near == 7);
    CHECK(toml.find("near=7") != std::string::npos);
    CHECK(train_config_json(given)["near"] == 7);
    auto [absent, toml2] = parse({"-i", "x"});
    CHECK_FALSE(absent.near.has_value());
    CHECK(toml2.find("near") == std::string::npos);
    CHECK(train_config_json(absent)["near"].is_null());

    CHECK_NOTHROW(validate_train_flags(given));
    CHECK_NOTHROW(validate_train_flags(absent));
    for (int bad : {0, -3}) {
        TrainConfig c = given;
        c.near = bad;
        CHECK_THROWS_WITH(validate_train_flags(c), Catch::Contains("--near must be >= 1"));
    }
}
