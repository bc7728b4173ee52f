// The logit alarm (llmc/train/logit_alarm.h) on synthetic logit series: the z-score rule against the
// moving window, the absolute rule, the layer/head that holds the max, the checkpoint cooldown,
// and the state round trip a resume relies on. The absolute rule is edge-triggered and only the newest
// --logit-alarm-keep alarm checkpoints stay pinned against pruning.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "llmc/io/checkpoint_dir.h"
#include "llmc/train/logit_alarm.h"
#include "test_util.h"

using namespace llmc;

namespace {

// One step's statistics: L x NH heads at `base`, one head (l, h) at `peak`.
LogitStats stats_with(int L, int NH, float base, int l, int h, float peak) {
    LogitStats s;
    s.resize(L, NH);
    for (float& v : s.max_logit) v = base;
    s.max_logit[(size_t)l * NH + h] = peak;
    return s;
}

LogitAlarmConfig alarm_config(float z, float above, int cooldown, int window) {
    LogitAlarmConfig c;
    c.z = z;
    c.above = above;
    c.cooldown = cooldown;
    c.window = window;
    return c;
}

}  // namespace

TEST_CASE("logit alarm: z-score rule over the window, naming layer and head", "[logit_alarm]") {
    LogitAlarm alarm(alarm_config(4.0f, 0.0f, 5, 10));
    // 10 steps of a slowly oscillating max logit 5 +- 0.1: nothing flagged (z NaN while filling)
    for (int s = 1; s <= 10; s++) {
        const LogitAlarmEvent e = alarm.observe(s, stats_with(3, 4, 1.0f, 1, 2, 5.0f + 0.1f * ((s % 2) ? 1 : -1)));
        CHECK_FALSE(e.flagged);
        CHECK(std::isnan(e.z));
        CHECK(e.layer == 1);
        CHECK(e.head == 2);
    }
    // a value within 4 std (std 0.1): not flagged, z computed against the full window
    LogitAlarmEvent e = alarm.observe(11, stats_with(3, 4, 1.0f, 0, 0, 5.3f));
    CHECK_FALSE(e.flagged);
    CHECK(e.z == Approx(3.0).epsilon(1e-3));  // (5.3 - 5.0) / 0.1
    // a jump in another head: flagged with that head, z = (6 - mean) / std of the window
    e = alarm.observe(12, stats_with(3, 4, 1.0f, 2, 3, 6.0f));
    CHECK(e.flagged);
    CHECK(e.by_z);
    CHECK_FALSE(e.by_above);
    CHECK(e.layer == 2);
    CHECK(e.head == 3);
    CHECK(e.value == 6.0f);
    CHECK(e.checkpoint);
    CHECK(alarm.checkpoint_steps() == std::vector<int>{12});
    // a non-finite max once the window is full is flagged by the z rule, and never enters the window
    e = alarm.observe(13, stats_with(3, 4, 1.0f, 0, 1, std::numeric_limits<float>::infinity()));
    CHECK(e.flagged);
    CHECK(e.by_z);
    CHECK_FALSE(e.checkpoint);  // within the cooldown of step 12's
    // the window now holds steps 3..12 (the inf did not enter): z of 5.0 against exactly those values
    std::vector<double> win;
    for (int s = 3; s <= 10; s++) win.push_back(5.0f + 0.1f * ((s % 2) ? 1 : -1));
    win.push_back(5.3f);
    win.push_back(6.0f);
    double mean = 0, var = 0;
    for (double v : win) mean += v / win.size();
    for (double v : win) var += (v - mean) * (v - mean) / win.size();
    e = alarm.observe(14, stats_with(3, 4, 1.0f, 0, 1, 5.0f));
    CHECK(e.z == Approx((5.0 - mean) / std::sqrt(var)).epsilon(1e-9));
}

TEST_CASE("logit alarm: a huge cooldown never overflows into a checkpoint per alarm", "[logit_alarm]") {
    LogitAlarm a(alarm_config(0.0f, 1.0f, std::numeric_limits<int>::max(), 2));
    std::vector<int> ckpt;
    for (int s = 1; s <= 5; s++)
        if (a.observe(s, stats_with(1, 1, 0.0f, 0, 0, 2.0f)).checkpoint) ckpt.push_back(s);
    CHECK(ckpt == std::vector<int>{1});
}

TEST_CASE("logit alarm: absolute rule, cooldown of the checkpoints, state round trip", "[logit_alarm]") {
    const LogitAlarmConfig cfg = alarm_config(0.0f, 50.0f, 4, 3);
    LogitAlarm a(cfg);
    // series of maxima; above 50 at steps 2, 3, 5, 6, 9, 11; crossing above 50 (edge-triggered) at 2, 5, 9, 11
    // -> checkpoints at 2 (first), 9 (>= 2 + 4), not 5 (< 2 + 4) nor 11 (< 9 + 4)
    const std::vector<float> series = {10, 60, 70, 20, 55, 80, 30, 40, 51, 49, 52};
    std::vector<int> flagged, ckpt;
    std::vector<double> state_after_5;
    for (int s = 1; s <= (int)series.size(); s++) {
        const LogitAlarmEvent e = a.observe(s, stats_with(2, 2, 0.0f, 1, 0, series[s - 1]));
        if (e.flagged) flagged.push_back(s);
        if (e.checkpoint) ckpt.push_back(s);
        CHECK_FALSE(e.by_z);  // the z rule is off
        if (s == 5) state_after_5 = a.to_vector();
    }
    CHECK(flagged == std::vector<int>{2, 5, 9, 11});
    CHECK(ckpt == std::vector<int>{2, 9});
    CHECK(a.checkpoint_steps() == ckpt);

    // resumed after step 5 (from the state vector, behind other data), it repeats steps 6..11 exactly
    LogitAlarmConfig zcfg = cfg;
    zcfg.z = 1.0f;  // also the z rule: the restored window must give the same z-scores
    LogitAlarm full(zcfg), resumed(zcfg);
    std::vector<double> saved;
    for (int s = 1; s <= 5; s++) full.observe(s, stats_with(2, 2, 0.0f, 1, 0, series[s - 1]));
    saved = {7.0, 8.0};
    const std::vector<double> st = full.to_vector();
    saved.insert(saved.end(), st.begin(), st.end());
    CHECK(resumed.from_vector(saved, 2) == saved.size());
    for (int s = 6; s <= (int)series.size(); s++) {
        const LogitAlarmEvent x = full.observe(s, stats_with(2, 2, 0.0f, 1, 0, series[s - 1]));
        const LogitAlarmEvent y = resumed.observe(s, stats_with(2, 2, 0.0f, 1, 0, series[s - 1]));
        CHECK(x.flagged == y.flagged);
        CHECK(x.checkpoint == y.checkpoint);
        CHECK((x.z == y.z || (std::isnan(x.z) && std::isnan(y.z))));
    }
    CHECK(full.checkpoint_steps() == resumed.checkpoint_steps());

    // a state vector without the alarm's tag, or truncated, is refused with a message
    LogitAlarm fresh(cfg);
    CHECK_THROWS_AS(fresh.from_vector({1.0, 2.0, 3.0}, 0), InputError);
    std::vector<double> cut = state_after_5;
    cut.pop_back();
    cut.back() = 1e9;  // claims far more pinned steps than there are
    CHECK_THROWS_AS(fresh.from_vector(cut, 0), InputError);
}

TEST_CASE("pruning never deletes the logit alarm's pinned checkpoints, which do not count toward K", "[logit_alarm]") {
    llmc_test::TempDir dir;
    ModelConfig c;
    c.num_layers = 1;
    c.channels = 8;
    c.num_heads = 2;
    c.global_heads = 1;
    c.window = 2;
    c.vocab_size = 10;
    c.padded_vocab_size = 128;
    c.max_seq_len = 4;
    std::vector<float> p(param_layout(c).total, 0.5f);
    for (int s : {10, 13, 20, 30, 40}) {
        save_model_checkpoint(model_path(dir.path.string(), s), c, p.data(), s);
        TrainState st;
        st.step = s;
        st.m.assign(p.size(), 0.0f);
        st.v.assign(p.size(), 0.0f);
        st.rng = {1};
        save_train_state(state_path(dir.path.string(), s, 0), c, st);
        write_done_marker(dir.path.string(), s, 1);
    }
    prune_checkpoints(dir.path.string(), 2, 40, {13});
    CHECK(complete_steps(dir.path.string()) == std::vector<int>{13, 30, 40});
    prune_checkpoints(dir.path.string(), 1, 40, {13});
    CHECK(complete_steps(dir.path.string()) == std::vector<int>{13, 40});
    prune_checkpoints(dir.path.string(), 1, 40);  // unpinned: gone
    CHECK(complete_steps(dir.path.string()) == std::vector<int>{40});
}

TEST_CASE("logit alarm: the absolute rule fires once per crossing above X, re-armed at M <= X", "[logit_alarm]") {
    // a diverging run: 25 steps above X = 10 raise one alarm (level-triggered, it was 25 checkpoints)
    LogitAlarm a(alarm_config(0.0f, 10.0f, 1, 4));
    std::vector<int> flagged, ckpt;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    //                            1  2   3   ..25 above; 26 = X (re-arms), 27 above, 28 NaN, 29 above, 30 inf
    std::vector<float> series = {5};
    for (int s = 2; s <= 25; s++) series.push_back(10.0f + (float)s);
    series.insert(series.end(), {10.0f, 11.0f, nan, 12.0f, std::numeric_limits<float>::infinity(), 3.0f, 10.5f});
    for (int s = 1; s <= (int)series.size(); s++) {
        const LogitAlarmEvent e = a.observe(s, stats_with(1, 1, 0.0f, 0, 0, series[s - 1]));  // M = the series
        CHECK(e.flagged == e.by_above);
        if (e.flagged) flagged.push_back(s);
        if (e.checkpoint) ckpt.push_back(s);
        if (!std::isnan(series[s - 1])) CHECK(a.armed() == !(series[s - 1] > 10.0f));
    }
    // 2: first crossing; 27: after step 26 (M = X) re-armed; the NaN at 28 leaves it disarmed (29 is silent);
    // 31 (M = 3) re-arms, 32 crosses again
    CHECK(flagged == std::vector<int>{2, 27, 32});
    CHECK(ckpt == flagged);  // cooldown 1
}

TEST_CASE("logit alarm: only the newest --logit-alarm-keep alarm checkpoints stay pinned", "[logit_alarm]") {
    LogitAlarmConfig cfg = alarm_config(0.0f, 1.0f, 1, 2);
    cfg.keep = 2;
    LogitAlarm a(cfg);
    for (int s = 1; s <= 10; s++)
        a.observe(s, stats_with(1, 1, 0.0f, 0, 0, s % 2 ? 2.0f : 0.5f));  // crossings at odd steps
    CHECK(a.checkpoint_steps() == std::vector<int>{1, 3, 5, 7, 9});
    CHECK(a.pinned_steps() == std::vector<int>{7, 9});
    cfg.keep = 0;  // 0 = all
    LogitAlarm all(cfg);
    for (int s = 1; s <= 10; s++) all.observe(s, stats_with(1, 1, 0.0f, 0, 0, s % 2 ? 2.0f : 0.5f));
    CHECK(all.pinned_steps() == std::vector<int>{1, 3, 5, 7, 9});
    cfg.keep = 9;
    LogitAlarm more(cfg);
    more.observe(1, stats_with(1, 1, 0.0f, 0, 0, 2.0f));
    CHECK(more.pinned_steps() == std::vector<int>{1});
}

TEST_CASE("logit alarm: the armed state is part of the saved state; a version-1 state restores it armed",
          "[logit_alarm]") {
    const LogitAlarmConfig cfg = alarm_config(0.0f, 10.0f, 1, 2);
    const std::vector<float> series = {5, 20, 30, 40, 5, 50};  // crossings at 2 and 6
    LogitAlarm full(cfg), resumed(cfg);
    for (int s = 1; s <= 3; s++) full.observe(s, stats_with(1, 1, 0.0f, 0, 0, series[s - 1]));
    const std::vector<double> st = full.to_vector();  // saved while above X: disarmed
    REQUIRE(st[0] == LogitAlarm::kStateTagV2);
    CHECK_FALSE(full.armed());
    CHECK(resumed.from_vector(st, 0) == st.size());
    CHECK_FALSE(resumed.armed());
    for (int s = 4; s <= 6; s++) {
        const LogitAlarmEvent x = full.observe(s, stats_with(1, 1, 0.0f, 0, 0, series[s - 1]));
        const LogitAlarmEvent y = resumed.observe(s, stats_with(1, 1, 0.0f, 0, 0, series[s - 1]));
        CHECK(x.flagged == (s == 6));
        CHECK(y.flagged == x.flagged);
        CHECK(y.checkpoint == x.checkpoint);
    }
    CHECK(resumed.to_vector() == full.to_vector());
    // version 1 (no armed value): [tag, window state, n, steps...] restores an armed rule
    std::vector<double> v1 = {LogitAlarm::kStateTag};
    const std::vector<double> window = SpikeDetector(2).to_vector();
    v1.insert(v1.end(), window.begin(), window.end());
    v1.insert(v1.end(), {1, 2});
    LogitAlarm old(cfg);
    CHECK(old.from_vector(v1, 0) == v1.size());
    CHECK(old.armed());
    CHECK(old.checkpoint_steps() == std::vector<int>{2});
    // an armed value other than 0 or 1 is refused
    std::vector<double> bad = st;
    bad[1 + window.size()] = 0.5;
    LogitAlarm b(cfg);
    CHECK_THROWS_WITH(b.from_vector(bad, 0), Catch::Contains("logit-alarm state in the checkpoint is corrupt"));
}

TEST_CASE("pruning keeps only the alarm checkpoints the cap pins", "[logit_alarm]") {
    llmc_test::TempDir dir;
    ModelConfig c;
    c.num_layers = 1;
    c.channels = 8;
    c.num_heads = 2;
    c.global_heads = 1;
    c.window = 2;
    c.vocab_size = 10;
    c.padded_vocab_size = 128;
    c.max_seq_len = 4;
    std::vector<float> p(param_layout(c).total, 0.5f);
    LogitAlarmConfig cfg = alarm_config(0.0f, 1.0f, 1, 2);
    cfg.keep = 2;
    LogitAlarm a(cfg);
    for (int s = 1; s <= 8; s++) {
        const bool alarm_ckpt = a.observe(s, stats_with(1, 1, 0.0f, 0, 0, s % 2 ? 2.0f : 0.5f)).checkpoint;
        if (!alarm_ckpt && s != 8) continue;
        save_model_checkpoint(model_path(dir.path.string(), s), c, p.data(), s);
        TrainState st;
        st.step = s;
        st.m.assign(p.size(), 0.0f);
        st.v.assign(p.size(), 0.0f);
        st.rng = {1};
        save_train_state(state_path(dir.path.string(), s, 0), c, st);
        write_done_marker(dir.path.string(), s, 1);
        prune_checkpoints(dir.path.string(), 1, s, a.pinned_steps());
    }
    // alarm checkpoints at 1, 3, 5, 7; the newest two stay pinned, plus the newest regular one (8)
    CHECK(complete_steps(dir.path.string()) == std::vector<int>{5, 7, 8});
}
