// KV-cached decoding on the CPU (llmc/cpu/kv_cache.h, Gpt2Cpu::kv_forward, llmc/text/sampler.h):
// the decode attention equals attention_forward's rows bit for bit; every decode step's logits
// and a prefill's (every position, or the last one only: then the LM head runs over the last rows
// only) equal the full forward's row bit for bit (several head layouts, windows, QK-norm, soft-cap,
// untied head, batch > 1); cached generation gives exactly the tokens of the uncached generator
// (greedy, sampled, top-k, with the context window sliding); the cache size is flat in the
// length for local heads and linear for global heads; bad use is refused.
// Weights and inputs are fresh random numbers each run (the seed is printed on failure).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "llmc/cpu/attention_ls.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/cpu/kv_cache.h"
#include "llmc/core/rng.h"
#include "llmc/text/sampler.h"

using namespace llmc;
using llmc::cpu::CpuBackend;
using llmc::cpu::Gpt2Cpu;
using llmc::cpu::KvCache;

namespace {

uint64_t fresh_seed() {
    std::random_device rd;
    return ((uint64_t)rd() << 32) ^ rd();
}

struct Case {
    const char* name;
    int G, P;
    bool qk_norm;
    float softcap;
    bool untied;
    bool bias = true;
    Gelu gelu = Gelu::Tanh;
};
// NH = 4, maxT = 20: windows that wrap (P = 1, 3), that never fill (P >= maxT), all-local and MHSA;
// the paper code's model (no biases, erf GELU, untied) with QK-norm.
const Case kCases[] = {
    {"G=1 P=3 qk_norm untied no-bias erf", 1, 3, true, 0.0f, true, false, Gelu::Erf},
    {"LS G=1 P=3", 1, 3, false, 0.0f, false},
    {"MHSA G=NH", 4, 3, false, 0.0f, false},
    {"all-local G=0 P=3", 0, 3, false, 0.0f, false},
    {"G=1 P=1", 1, 1, false, 0.0f, false},
    {"G=2 P>=T", 2, 25, false, 0.0f, false},
    {"G=1 P=4 qk_norm", 1, 4, true, 0.0f, false},
    {"G=1 P=5 softcap", 1, 5, false, 0.5f, false},
    {"G=0 P=2 qk_norm softcap untied", 0, 2, true, 0.7f, true},
};

ModelConfig case_config(const Case& c) {
    ModelConfig m;
    m.num_layers = 2;
    m.channels = 40;  // 3C = 120: a ragged matmul panel too
    m.num_heads = 4;  // hd = 10
    m.global_heads = c.G;
    m.window = c.P;
    m.vocab_size = 67;
    m.padded_vocab_size = 128;
    m.max_seq_len = 20;
    m.qk_norm = c.qk_norm;
    m.attn_softcap = c.softcap;
    m.tied_embeddings = !c.untied;
    m.bias = c.bias;
    m.gelu = c.gelu;
    return m;
}

// Random parameters large enough that attention is far from uniform and the soft-cap bites.
std::vector<float> random_params(const ModelConfig& cfg, Rng& rng) {
    std::vector<float> p(param_layout(cfg).total);
    for (float& x : p) x = 0.4f * rng.normal();
    return p;
}

std::vector<int> random_tokens(size_t n, int V, Rng& rng) {
    std::vector<int> t(n);
    for (int& x : t) x = (int)rng.below((uint64_t)V);
    return t;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

bool all_finite(const float* a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!std::isfinite(a[i])) return false;
    return true;
}

// Calls body(cfg, rng) for every case with one fresh seed; the seed and the case name are printed on failure.
template <typename Body>
void for_each_case(Body&& body) {
    const uint64_t seed = fresh_seed();
    INFO("seed " << seed);
    Rng rng(seed);
    for (const Case& c : kCases) {
        INFO(c.name);
        body(case_config(c), rng);
    }
}

// Sets random weights into model and runs its uncached forward over random (B, T) tokens, returned;
// the forward's logits (B, T, Vp) are model.logits().
std::vector<int> random_forward(Gpt2Cpu<float>& model, const ModelConfig& cfg, int B, int T, Rng& rng) {
    const std::vector<float> params = random_params(cfg, rng);
    model.set_params(params.data());
    std::vector<int> tokens = random_tokens((size_t)B * T, cfg.vocab_size, rng);
    model.forward(tokens.data(), nullptr, B, T, 0.0f, nullptr);
    return tokens;
}

}  // namespace

TEST_CASE("attention_decode equals attention_forward's rows bit for bit", "[kv_cache]") {
    for_each_case([](const ModelConfig& cfg, Rng& rng) {
        const int B = 3, T = cfg.max_seq_len, C = cfg.channels, NH = cfg.num_heads;
        std::vector<float> qkv((size_t)B * T * 3 * C);
        for (float& x : qkv) x = 1.5f * rng.normal();
        std::vector<float> ref((size_t)B * T * C), lse((size_t)B * NH * T);
        cpu::attention_forward(ref.data(), lse.data(), qkv.data(), B, T, C, NH, cfg.global_heads, cfg.window,
                               cfg.attn_softcap, nullptr);
        KvCache<float> cache;
        cache.init(cfg, B, T);
        std::vector<float> row((size_t)B * 3 * C), out((size_t)B * C);
        for (int t = 0; t < T; t++) {
            for (int b = 0; b < B; b++) {
                std::copy_n(qkv.data() + ((size_t)b * T + t) * 3 * C, 3 * C, row.data() + (size_t)b * 3 * C);
                cache.store(0, b, t, row.data() + (size_t)b * 3 * C);
            }
            std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());  // poison
            cpu::attention_decode(out.data(), row.data(), cache, 0, t, cfg.attn_softcap);
            for (int b = 0; b < B; b++) {
                INFO("t " << t << " b " << b);
                REQUIRE(all_finite(out.data() + (size_t)b * C, C));
                REQUIRE(same_bits(out.data() + (size_t)b * C, ref.data() + ((size_t)b * T + t) * C, C));
            }
        }
    });
}

TEST_CASE("every cached decode step's logits equal the full forward's row bit for bit", "[kv_cache]") {
    for_each_case([](const ModelConfig& cfg, Rng& rng) {
        // B = 2 and 3: decode rows go through the matmul's 1-row and full tiles; the forward's mostly full ones
        for (int B : {2, 3}) {
            INFO("B " << B);
            const int T = cfg.max_seq_len, Vp = cfg.padded_vocab_size;
            Gpt2Cpu<float> model(cfg);
            const std::vector<int> tokens = random_forward(model, cfg, B, T, rng);
            const std::vector<float> ref(model.logits(), model.logits() + (size_t)B * T * Vp);  // (B, T, Vp)
            REQUIRE(all_finite(ref.data(), ref.size()));

            // Stale contents first (other tokens through the same buffers), so nothing passes by luck.
            model.kv_begin(B, T);
            const std::vector<int> junk = random_tokens((size_t)B * T, cfg.vocab_size, rng);
            model.kv_forward(junk.data(), T, KvLogits::All);

            // prefill lengths: a single decode step, short, past the window, all
            for (const auto& [prefill, rows] :
                 {std::pair{1, KvLogits::Last}, std::pair{2, KvLogits::All}, std::pair{2, KvLogits::Last},
                  std::pair{7, KvLogits::All}, std::pair{7, KvLogits::Last}, std::pair{T, KvLogits::Last}}) {
                const bool all = rows == KvLogits::All;
                INFO("prefill " << prefill << (all ? " KvLogits::All" : " KvLogits::Last"));
                model.kv_begin(B, T);
                std::vector<int> pre((size_t)B * prefill);
                for (int b = 0; b < B; b++)
                    std::copy_n(tokens.data() + (size_t)b * T, prefill, pre.data() + (size_t)b * prefill);
                const float* lg = model.kv_forward(pre.data(), prefill, rows);  // All (B, prefill, Vp); Last (B, Vp)
                const int from = all ? 0 : prefill - 1, count = prefill - from;
                for (int b = 0; b < B; b++)
                    for (int t = from; t < prefill; t++) {
                        const float* got = lg + ((size_t)b * count + t - from) * Vp;
                        REQUIRE(all_finite(got, Vp));
                        REQUIRE(same_bits(got, ref.data() + ((size_t)b * T + t) * Vp, Vp));
                    }
                std::vector<int> col(B);
                for (int t = prefill; t < T; t++) {
                    INFO("decode position " << t);
                    for (int b = 0; b < B; b++) col[b] = tokens[(size_t)b * T + t];
                    lg = model.kv_forward(col.data(), 1, t % 2 ? KvLogits::All : KvLogits::Last);  // (B, Vp) both
                    for (int b = 0; b < B; b++) {
                        REQUIRE(all_finite(lg + (size_t)b * Vp, Vp));
                        REQUIRE(same_bits(lg + (size_t)b * Vp, ref.data() + ((size_t)b * T + t) * Vp, Vp));
                    }
                }
                REQUIRE(model.kv_cache().pos == T);
            }

            // Several positions appended to a non-empty cache in one call.
            model.kv_begin(B, T);
            std::vector<int> first((size_t)B * 4), rest((size_t)B * (T - 4));
            for (int b = 0; b < B; b++) {
                std::copy_n(tokens.data() + (size_t)b * T, 4, first.data() + (size_t)b * 4);
                std::copy_n(tokens.data() + (size_t)b * T + 4, T - 4, rest.data() + (size_t)b * (T - 4));
            }
            model.kv_forward(first.data(), 4, KvLogits::Last);
            const float* lg = model.kv_forward(rest.data(), T - 4, KvLogits::All);  // (B, T-4, Vp)
            for (int b = 0; b < B; b++)
                for (int t = 4; t < T; t++)
                    REQUIRE(
                        same_bits(lg + ((size_t)b * (T - 4) + t - 4) * Vp, ref.data() + ((size_t)b * T + t) * Vp, Vp));
            model.kv_begin(B, T);
            model.kv_forward(first.data(), 4, KvLogits::Last);
            lg = model.kv_forward(rest.data(), T - 4, KvLogits::Last);  // (B, Vp): position T-1
            for (int b = 0; b < B; b++)
                REQUIRE(same_bits(lg + (size_t)b * Vp, ref.data() + ((size_t)b * T + T - 1) * Vp, Vp));
        }
    });
}

TEST_CASE("a KvLogits::Last prefill computes the LM head of the last rows only", "[kv_cache]") {
    // The last position's logits equal the uncached forward's last row bit for bit, and the (B, n, Vp)
    // logits buffer of the forward is not written: the LM head ran over B rows, not B*n. logits()
    // refuses after such a prefill; a KvLogits::All prefill gives forward()'s logits there.
    for_each_case([](const ModelConfig& cfg, Rng& rng) {
        const int B = 3, n = cfg.max_seq_len - 1, Vp = cfg.padded_vocab_size;
        Gpt2Cpu<float> model(cfg);
        const std::vector<int> tokens = random_forward(model, cfg, B, n, rng);
        const std::vector<float> ref(model.logits(), model.logits() + (size_t)B * n * Vp);  // (B, n, Vp)

        // the buffer holds another batch's logits before the prefill; it must keep them
        const std::vector<int> junk = random_tokens((size_t)B * n, cfg.vocab_size, rng);
        model.forward(junk.data(), nullptr, B, n, 0.0f, nullptr);
        const std::vector<float> before(model.acts().logits.begin(), model.acts().logits.end());
        model.kv_begin(B, n);
        const float* lg = model.kv_forward(tokens.data(), n, KvLogits::Last);  // (B, Vp)
        for (int b = 0; b < B; b++) {
            INFO("b " << b);
            REQUIRE(all_finite(lg + (size_t)b * Vp, Vp));
            REQUIRE(same_bits(lg + (size_t)b * Vp, ref.data() + ((size_t)b * n + n - 1) * Vp, Vp));
        }
        REQUIRE(model.acts().logits.size() == before.size());
        REQUIRE(same_bits(model.acts().logits.data(), before.data(), before.size()));
        REQUIRE_THROWS_AS(model.logits(), std::logic_error);

        model.kv_begin(B, n);
        lg = model.kv_forward(tokens.data(), n, KvLogits::All);  // (B, n, Vp)
        REQUIRE(same_bits(lg, ref.data(), ref.size()));
        REQUIRE(model.logits() == lg);
    });
}

TEST_CASE("cached generation gives exactly the uncached generator's tokens", "[kv_cache][generate]") {
    for_each_case([](const ModelConfig& cfg, Rng& rng) {
        CpuBackend model(cfg, 1);
        const std::vector<float> params = random_params(cfg, rng);
        model.set_params(params.data());
        REQUIRE(model.has_kv_cache());
        const std::vector<int> prompt = random_tokens(5, cfg.vocab_size, rng);
        struct Mode {
            float temperature;
            int top_k;
            int max_len;
        };
        // greedy, sampled, top-k; max_len 12 < 5 + 30 makes the context window slide
        for (const Mode m :
             {Mode{0.0f, 0, 20}, Mode{1.0f, 0, 20}, Mode{0.8f, 5, 20}, Mode{1.0f, 0, 12}, Mode{0.0f, 0, 12}}) {
            INFO("temperature " << m.temperature << " top_k " << m.top_k << " max_len " << m.max_len);
            const uint64_t s = rng.next_u64();
            Rng r1(s), r2(s);
            GenerateOptions uncached, cached;
            uncached.use_cache = false;
            uncached.top_k = cached.top_k = m.top_k;
            std::vector<int> streamed;
            cached.on_token = [&](int t) { streamed.push_back(t); };
            const std::vector<int> a = generate(model, prompt, 30, m.max_len, m.temperature, r1, uncached);
            const std::vector<int> b = generate(model, prompt, 30, m.max_len, m.temperature, r2, cached);
            REQUIRE(a.size() == 30);
            REQUIRE(a == b);
            REQUIRE(streamed == b);
            REQUIRE(r1.state() == r2.state());
        }
    });
}

TEST_CASE("sample_token: greedy, top-k and the default path", "[generate]") {
    const uint64_t seed = fresh_seed();
    INFO("seed " << seed);
    Rng rng(seed);
    const int V = 50;
    std::vector<float> logits(64, 1e9f);  // padded entries [V, 64) must never be drawn
    // below 3 so that 17 and 33 are the maximum (unclamped, one of 48 normals exceeds 3 in ~6% of runs)
    for (int i = 0; i < V; i++) logits[i] = std::min(rng.normal(), 2.5f);
    logits[17] = 3.0f;
    logits[33] = 3.0f;  // a tie for the maximum: greedy takes the lower index
    Rng r(7);
    const uint64_t before = r.state();
    REQUIRE(sample_token(logits.data(), V, 0.0f, r) == 17);
    REQUIRE(r.state() == before);  // greedy draws nothing
    REQUIRE(sample_token(logits.data(), V, 1.0f, r, 1) == 17);
    std::vector<int> top3 = {17, 33};
    int third = -1;
    for (int i = 0; i < V; i++)
        if (i != 17 && i != 33 && (third < 0 || logits[i] > logits[third])) third = i;
    top3.push_back(third);
    std::vector<int> counts(V, 0);
    for (int k = 0; k < 3000; k++) {
        const int t = sample_token(logits.data(), V, 2.0f, r, 3);
        REQUIRE(t >= 0);
        REQUIRE(t < V);
        counts[t]++;
    }
    int in_top = 0;
    for (int t : top3) in_top += counts[t];
    REQUIRE(in_top == 3000);
    for (int t : top3) REQUIRE(counts[t] > 0);
    for (int k = 0; k < 3000; k++) REQUIRE(sample_token(logits.data(), V, 1.0f, r) < V);
}

TEST_CASE("KV cache size: flat in the length for local heads, linear for global heads", "[kv_cache]") {
    ModelConfig cfg = case_config(kCases[0]);
    cfg.max_seq_len = 256;
    cfg.window = 16;
    const int L = cfg.num_layers, hd = cfg.head_size(), NH = cfg.num_heads, B = 2;
    auto bytes = [&](int G, int len) {
        cfg.global_heads = G;
        CpuBackend m(cfg, 1);
        m.kv_begin(B, len);
        return m.kv_cache_bytes();
    };
    // all-local: the same memory for every length >= P
    REQUIRE(bytes(0, 16) == bytes(0, 64));
    REQUIRE(bytes(0, 16) == bytes(0, 256));
    REQUIRE(bytes(0, 256) == (size_t)2 * L * B * NH * 16 * hd * sizeof(float));
    // MHSA: linear
    REQUIRE(bytes(NH, 128) == 2 * bytes(NH, 64));
    // mixed: exactly the documented formula
    for (int len : {8, 16, 100, 256}) {
        const size_t expect = (size_t)2 * L * B * hd * (1 * len + (NH - 1) * std::min(16, len)) * sizeof(float);
        REQUIRE(bytes(1, len) == expect);
    }
}

TEST_CASE("KV cache refuses bad use with a clear error", "[kv_cache]") {
    const ModelConfig cfg = case_config(kCases[0]);
    CpuBackend m(cfg, 1);
    REQUIRE_THROWS_AS(m.kv_begin(1, cfg.max_seq_len + 1), InputError);
    REQUIRE_THROWS_AS(m.kv_begin(0, 4), InputError);
    m.kv_begin(1, 4);
    const std::vector<int> four = {1, 2, 3, 4}, one = {5}, bad = {cfg.vocab_size};
    REQUIRE_THROWS_AS(m.kv_forward(bad.data(), 1, KvLogits::Last), InputError);
    m.kv_forward(four.data(), 4, KvLogits::Last);
    REQUIRE_THROWS_WITH(m.kv_forward(one.data(), 1, KvLogits::Last), Catch::Contains("exceed the cache length 4"));
    Rng r(1);
    REQUIRE_THROWS_AS(generate(m, {}, 3, 4, 1.0f, r), InputError);
    REQUIRE_THROWS_AS(generate(m, {1}, 3, cfg.max_seq_len + 1, 1.0f, r), InputError);
}
