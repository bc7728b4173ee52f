// LoopState (llmc/train/loop_state.h): the loop's resumable state maps onto the training-state
// file's rng, loader and extra sections and back without loss, in the layout docs/formats.md gives.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/io/shard.h"
#include "llmc/train/loop_state.h"
#include "test/test_util.h"

using Catch::Matchers::Contains;

namespace {

llmc::TrainConfig loop_config(float alarm_z) {
    llmc::TrainConfig c;
    c.spike_window = 3;
    c.logit_alarm = alarm_z;
    c.logit_alarm_cooldown = 1;
    c.seed = 7;
    return c;
}

// Three steps of history: spike windows, the alarm's window and its pinned steps, RNG draws, batches.
void advance(llmc::LoopState& s) {
    llmc::LogitStats stats;
    stats.resize(1, 2);
    std::vector<int> inputs(2 * 8), targets(2 * 8);
    for (int step = 1; step <= 4; step++) {
        s.loss_spikes.push(3.0 + step);
        s.norm_spikes.push(1.0 / step);
        stats.max_logit = {1.0f, step == 4 ? 50.0f : 1.0f + 0.1f * step};
        s.alarm.observe(step, stats);
        s.sample_rng.next_u64();
        s.train.next_batch(inputs.data(), targets.data());
    }
}

}  // namespace

TEST_CASE("LoopState round-trips through the training-state sections") {
    llmc_test::TempDir dir;
    std::vector<uint32_t> toks(500);
    for (size_t i = 0; i < toks.size(); i++) toks[i] = (uint32_t)(i % 50);
    llmc::write_shard(dir.file("train_000.bin"), toks, 2);
    auto loader = [&] {
        return llmc::DataLoader(dir.file("train_*.bin"), 2, 8, 0, 1, true, 7, 50, llmc::RankSplit::Rows);
    };

    for (float alarm_z : {0.0f, 2.0f}) {
        llmc::DataLoader train_a = loader(), train_b = loader();
        llmc::LoopState a(loop_config(alarm_z), train_a);
        advance(a);
        llmc::TrainState st;
        a.to_train_state(st);
        REQUIRE(st.rng == std::vector<uint64_t>{a.sample_rng.state()});
        REQUIRE(st.loader == train_a.state().to_vector());
        const size_t windows = 2 * (3 + 3);  // [window, count, next, 3 values] twice
        REQUIRE(st.extra.size() == (alarm_z > 0 ? windows + a.alarm.to_vector().size() : windows));

        llmc::LoopState b(loop_config(alarm_z), train_b);
        b.from_train_state(st, "state.bin");
        llmc::TrainState again;
        b.to_train_state(again);
        CHECK(again.rng == st.rng);
        CHECK(again.loader == st.loader);
        CHECK(again.extra == st.extra);
        CHECK(b.alarm.checkpoint_steps() == a.alarm.checkpoint_steps());
    }
}

TEST_CASE("LoopState refuses a state whose sections have another layout, naming the file") {
    llmc_test::TempDir dir;
    std::vector<uint32_t> toks(500, 1);
    llmc::write_shard(dir.file("train_000.bin"), toks, 2);
    llmc::DataLoader train(dir.file("train_*.bin"), 2, 8, 0, 1, false, 7, 50, llmc::RankSplit::Rows);
    llmc::LoopState s(loop_config(0.0f), train);
    llmc::TrainState st;
    s.to_train_state(st);
    llmc::TrainState extra_value = st;
    extra_value.extra.push_back(1.0);
    CHECK_THROWS_WITH(s.from_train_state(extra_value, "dir/state_00000004_00000.bin"),
                      Contains("dir/state_00000004_00000.bin: unexpected loop-state layout"));
    llmc::TrainState two_rngs = st;
    two_rngs.rng.push_back(3);
    CHECK_THROWS_AS(s.from_train_state(two_rngs, "x"), llmc::InputError);
}
