// QK-Clip (llmc/train/qk_clip.h, applied by its apply_qk_clip): after the scaling, a
// recomputation of the logits on the same batch gives at most TAU for every clipped head (equal to
// TAU up to fp32 rounding), and every other head's parameters and max logit are bit-identical.
// The guarantee is per layer, for the layer's input of the step: clipping layer 0 changes what
// layer 1 sees, so the logits are recomputed for the first layer (the whole model for L = 1; the
// first layer's heads for L = 2), and the parameters of every layer are checked element by element.
// Fresh random weights per run; the q/k projections are scaled up first so that some heads exceed
// TAU and others do not.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/train/train_loop.h"

using namespace llmc;
using llmc::cpu::CpuBackend;

namespace {

ModelConfig clip_config(int G, float softcap, int L = 2) {
    ModelConfig c;
    c.num_layers = L;
    c.channels = 32;
    c.num_heads = 4;
    c.global_heads = G;
    c.window = 4;
    c.vocab_size = 50;
    c.padded_vocab_size = 128;
    c.max_seq_len = 16;
    c.attn_softcap = softcap;
    return c;
}

// Multiplies the q/k/v projection weights by `factor` so that the logits are large.
void scale_qkv(CpuBackend& be, const ModelConfig& c, float factor) {
    std::vector<float> p(be.num_params());
    be.get_params(p.data());
    const ParamLayout l = param_layout(c);
    for (size_t i = 0; i < l.size[P_QKVW]; i++) p[l.offset[P_QKVW] + i] *= factor;
    be.set_params(p.data());
}

bool head_is_clipped(const std::vector<ClippedHead>& heads, int l, int h) {
    return std::any_of(heads.begin(), heads.end(), [&](const ClippedHead& c) { return c.layer == l && c.head == h; });
}

}  // namespace

TEST_CASE("QK-Clip: clipped heads reach TAU on the same batch, the others stay bit-identical", "[qk_clip]") {
    const uint64_t seed = std::random_device{}() | 1u;
    INFO("seed " << seed);
    for (int L : {1, 2})
        for (int G : {0, 1, 4})
            for (float softcap : {0.0f, 3.0f}) {
                const ModelConfig cfg = clip_config(G, softcap, L);
                INFO("L " << L << ", G " << G << ", softcap " << softcap);
                const int B = 2, T = 16, NH = cfg.num_heads;
                CpuBackend be(cfg, seed + G);
                scale_qkv(be, cfg, 8.0f);
                Rng r(seed ^ 77);
                std::vector<int> inp(B * T), tgt(B * T);
                for (int& t : inp) t = (int)(r.uniform() * cfg.vocab_size) % cfg.vocab_size;
                for (int& t : tgt) t = (int)(r.uniform() * cfg.vocab_size) % cfg.vocab_size;

                LogitStats before, after;
                be.forward(inp.data(), tgt.data(), B, T, 0.0f, &before);
                std::vector<float> sorted = before.max_logit;
                std::sort(sorted.begin(), sorted.end());
                const float tau = 0.5f * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);  // half the heads
                REQUIRE(sorted.front() < tau);
                REQUIRE(sorted.back() > tau);

                std::vector<float> p0(be.num_params()), p1(be.num_params());
                be.get_params(p0.data());
                const std::vector<ClippedHead> clipped = apply_qk_clip(tau, before, cfg, be, nullptr);
                be.get_params(p1.data());
                be.forward(inp.data(), tgt.data(), B, T, 0.0f, &after);

                CHECK(clipped.size() == sorted.size() / 2);
                // every parameter outside the clipped heads' q/k rows and biases is bit-identical
                std::vector<char> touched(p0.size(), 0);
                for (const ParamScale& s : qk_clip_scales(cfg, clipped))
                    for (size_t i = s.offset; i < s.offset + s.count; i++) touched[i] = 1;
                size_t changed_outside = 0, n_touched = 0;
                for (size_t i = 0; i < p0.size(); i++) {
                    if (touched[i]) {
                        n_touched++;
                        continue;
                    }
                    changed_outside += p0[i] != p1[i];
                }
                CHECK(changed_outside == 0);
                int n_checked_clipped = 0;
                CHECK(n_touched == clipped.size() * 2 * (cfg.head_size() * cfg.channels + cfg.head_size()));
                for (int l = 0; l < 1; l++)  // the first layer: its input is the same batch's embedding
                    for (int h = 0; h < NH; h++) {
                        const size_t i = (size_t)l * NH + h;
                        INFO("layer " << l << " head " << h << ": " << before.max_logit[i] << " -> "
                                      << after.max_logit[i] << ", tau " << tau);
                        if (head_is_clipped(clipped, l, h)) {
                            n_checked_clipped++;
                            CHECK(before.max_logit[i] > tau);
                            // the recomputed max logit: TAU up to fp32 rounding of the scaled projections
                            CHECK(after.max_logit[i] <= tau * (1.0f + 1e-5f));
                            CHECK(after.max_logit[i] == Approx(tau).epsilon(1e-5));
                        } else {
                            CHECK(before.max_logit[i] <= tau);
                            CHECK(after.max_logit[i] == before.max_logit[i]);  // bit-identical
                            CHECK(after.min_logit[i] == before.min_logit[i]);
                        }
                    }
                if (L == 1) CHECK(n_checked_clipped == (int)clipped.size());
            }
}

TEST_CASE("QK-Clip: the rows scaled are the head's q and k rows and biases; shards agree with the whole", "[qk_clip]") {
    const ModelConfig cfg = clip_config(1, 0.0f);
    const size_t C = cfg.channels, hd = cfg.head_size();
    LogitStats s;
    s.resize(cfg.num_layers, cfg.num_heads);
    s.max_logit = {1, 2, 30, 4, 5, 60, 7, std::numeric_limits<float>::infinity()};  // (L=2, NH=4)
    const std::vector<ClippedHead> heads = qk_clip_heads(s, 10.0f);
    REQUIRE(heads.size() == 2);  // the infinite statistic never triggers a clip
    CHECK(heads[0].layer == 0);
    CHECK(heads[0].head == 2);
    CHECK(heads[0].gamma == Approx(std::sqrt(10.0 / 30.0)));
    CHECK(heads[1].layer == 1);
    CHECK(heads[1].head == 1);

    // independent index arithmetic: qkvw is (L, 3C, C) with q rows [0, C), k rows [C, 2C); without
    // biases (--bias 0) the weight rows only
    for (bool bias : {true, false}) {
        INFO("bias " << bias);
        ModelConfig m = cfg;
        m.bias = bias;
        const ParamLayout lb = param_layout(m);
        std::vector<float> pb(lb.total, 1.0f);
        apply_param_scales(pb.data(), 0, pb.size(), qk_clip_scales(m, heads));
        size_t scaled = 0;
        for (size_t i = 0; i < lb.total; i++) {
            float want = 1.0f;
            if (i >= lb.offset[P_QKVW] && i < lb.offset[P_QKVW] + lb.size[P_QKVW]) {
                const size_t e = i - lb.offset[P_QKVW], layer = e / (3 * C * C), row = e % (3 * C * C) / C;
                for (const ClippedHead& h : heads)
                    if ((int)layer == h.layer && row < 2 * C && (row % C) / hd == (size_t)h.head) want = h.gamma;
            } else if (i >= lb.offset[P_QKVB] && i < lb.offset[P_QKVB] + lb.size[P_QKVB]) {
                const size_t e = i - lb.offset[P_QKVB], layer = e / (3 * C), row = e % (3 * C);
                for (const ClippedHead& h : heads)
                    if ((int)layer == h.layer && row < 2 * C && (row % C) / hd == (size_t)h.head) want = h.gamma;
            }
            scaled += want != 1.0f;
            if (pb[i] != want) FAIL("element " << i << " is " << pb[i] << ", expected " << want);
        }
        CHECK(scaled == heads.size() * 2 * hd * (C + (bias ? 1 : 0)));  // q and k: hd rows of C, hd biases
    }
    const ParamLayout l = param_layout(cfg);
    std::vector<float> p(l.total, 1.0f);
    apply_param_scales(p.data(), 0, p.size(), qk_clip_scales(cfg, heads));

    // ZeRO-1: each rank scales its shard [begin, begin + n); together they equal the whole vector
    for (int world : {2, 3, 7}) {
        std::vector<float> joined(l.total, 1.0f);
        for (int r = 0; r < world; r++) {
            const size_t chunk = (l.total + world - 1) / world, b = std::min(l.total, r * chunk),
                         e = std::min(l.total, b + chunk);
            std::vector<float> shard(e - b, 1.0f);
            apply_param_scales(shard.data(), b, e - b, qk_clip_scales(cfg, heads));
            std::copy(shard.begin(), shard.end(), joined.begin() + (long)b);
        }
        CHECK(joined == p);
    }
}

TEST_CASE("scale_params (CPU backend): the runs scaled in place, nothing else; bad runs refused", "[qk_clip]") {
    const uint64_t seed = std::random_device{}() | 1u;
    INFO("seed " << seed);
    const ModelConfig cfg = clip_config(1, 0.0f);
    CpuBackend be(cfg, seed);
    const size_t n = be.num_params();
    std::vector<float> before(n), after(n), m0(n), v0(n), m1(n), v1(n);
    Rng r(seed ^ 5);
    for (float& x : m0) x = r.uniform();
    for (float& x : v0) x = r.uniform();
    for (float& x : before) x = 2.0f * r.uniform() - 1.0f;  // no zeros (the initial biases are 0)
    be.set_optimizer_state(m0.data(), v0.data());
    be.set_params(before.data());
    // random disjoint runs with random factors, an empty one, and one ending at the last element
    std::vector<ParamScale> runs;
    for (size_t at = (size_t)(r.uniform() * 50); at < n - 40; at += 1 + (size_t)(r.uniform() * 3000)) {
        const size_t count = std::min(n - 40 - at, (size_t)(r.uniform() * 700));
        runs.push_back({at, count, 0.25f + 1.5f * r.uniform()});
        at += count;
    }
    runs.push_back({n - 30, 0, 2.0f});
    runs.push_back({n - 20, 20, 0.5f + r.uniform()});
    REQUIRE(runs.size() > 3);
    std::shuffle(runs.begin(), runs.end(), std::mt19937_64(seed));  // the order of the runs does not matter
    be.scale_params(runs);
    be.get_params(after.data());
    // independent reference: each element's factor (1 where no run covers it), one fp32 product
    std::vector<float> factor(n, 1.0f);
    for (const ParamScale& s : runs)
        for (size_t i = s.offset; i < s.offset + s.count; i++) factor[i] = s.factor;
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += after[i] != (factor[i] == 1.0f ? before[i] : before[i] * factor[i]);
    CHECK(wrong == 0);
    be.get_optimizer_state(m1.data(), v1.data());
    CHECK(m1 == m0);  // the AdamW moments are not touched
    CHECK(v1 == v0);

    // outside the parameters, or two runs sharing an element: refused, parameters unchanged
    for (const std::vector<ParamScale>& bad :
         {std::vector<ParamScale>{{n - 10, 11, 2.0f}}, std::vector<ParamScale>{{n + 1, 0, 2.0f}},
          std::vector<ParamScale>{{100, 50, 2.0f}, {149, 5, 3.0f}},
          std::vector<ParamScale>{{100, 50, 2.0f}, {120, 0, 3.0f}, {130, 5, 3.0f}}}) {
        CHECK_THROWS_AS(be.scale_params(bad), std::invalid_argument);
        std::vector<float> still(n);
        be.get_params(still.data());
        CHECK(still == after);
    }
}
