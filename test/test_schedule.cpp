// LR schedules (llmc/train/schedule.h): values at key steps worked out by hand from the documented
// formulas: warmup ramp, peak, midpoint, final fraction, and the wsd decay start.
#include <catch2/catch.hpp>

#include "llmc/train/schedule.h"

using llmc::learning_rate;
using llmc::LrSchedule;
using llmc::ScheduleConfig;

static ScheduleConfig sched(LrSchedule kind, int warmup, int total, float frac = 0.1f) {
    ScheduleConfig c;
    c.kind = kind;
    c.max_lr = 1.0f;
    c.warmup_steps = warmup;
    c.total_steps = total;
    c.final_lr_frac = frac;
    return c;
}

TEST_CASE("warmup ramps linearly to the peak for every schedule", "[schedule]") {
    for (auto kind : {LrSchedule::Cosine, LrSchedule::Linear, LrSchedule::Constant, LrSchedule::Wsd}) {
        ScheduleConfig c = sched(kind, 10, 111);
        c.max_lr = 3e-4f;
        CHECK(learning_rate(c, 0) == Approx(3e-5).epsilon(1e-6));
        CHECK(learning_rate(c, 4) == Approx(1.5e-4).epsilon(1e-6));
        CHECK(learning_rate(c, 9) == Approx(3e-4).epsilon(1e-6));
        CHECK(learning_rate(c, 10) == Approx(3e-4).epsilon(1e-6));  // first post-warmup step: peak
    }
}

TEST_CASE("cosine: peak, midpoint, final fraction", "[schedule]") {
    // W = 10, total 111: post-warmup steps 10..110, p = (s - 10) / 100
    ScheduleConfig c = sched(LrSchedule::Cosine, 10, 111, 0.1f);
    CHECK(learning_rate(c, 10) == Approx(1.0).epsilon(1e-6));
    CHECK(learning_rate(c, 35) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25))).epsilon(1e-6));
    CHECK(learning_rate(c, 60) == Approx(0.55).epsilon(1e-6));
    CHECK(learning_rate(c, 110) == Approx(0.1).epsilon(1e-6));  // the last update: exactly the final fraction
    CHECK(learning_rate(c, 500) == Approx(0.1).epsilon(1e-6));  // past the end: stays at the floor
    // strictly decreasing after warmup
    for (int s = 11; s <= 110; s++) CHECK(learning_rate(c, s) < learning_rate(c, s - 1));
    // final fraction 0 decays to zero
    CHECK(learning_rate(sched(LrSchedule::Cosine, 0, 101, 0.0f), 100) == Approx(0.0).margin(1e-7));
}

TEST_CASE("linear: straight line from the peak to the final fraction", "[schedule]") {
    ScheduleConfig c = sched(LrSchedule::Linear, 10, 111, 0.1f);
    CHECK(learning_rate(c, 10) == Approx(1.0).epsilon(1e-6));
    CHECK(learning_rate(c, 35) == Approx(0.775).epsilon(1e-6));
    CHECK(learning_rate(c, 60) == Approx(0.55).epsilon(1e-6));
    CHECK(learning_rate(c, 110) == Approx(0.1).epsilon(1e-6));
}

TEST_CASE("constant: the peak after warmup, final fraction ignored", "[schedule]") {
    ScheduleConfig c = sched(LrSchedule::Constant, 5, 50, 0.1f);
    CHECK(learning_rate(c, 2) == Approx(0.6).epsilon(1e-6));
    for (int s : {5, 20, 49, 100}) CHECK(learning_rate(c, s) == 1.0f);
}

TEST_CASE("wsd: stable, then linear decay over the last fraction", "[schedule]") {
    // W = 10, total 110, decay 0.2 of the 100 post-warmup steps = 20 steps: 90..109
    ScheduleConfig c = sched(LrSchedule::Wsd, 10, 110, 0.1f);
    c.wsd_decay_frac = 0.2f;
    CHECK(learning_rate(c, 10) == 1.0f);
    CHECK(learning_rate(c, 89) == 1.0f);
    CHECK(learning_rate(c, 90) == Approx(1.0 - 0.9 / 20).epsilon(1e-6));
    CHECK(learning_rate(c, 99) == Approx(1.0 - 0.9 * 10 / 20).epsilon(1e-6));
    CHECK(learning_rate(c, 109) == Approx(0.1).epsilon(1e-6));
    c.wsd_decay_frac = 0.0f;  // no decay at all
    CHECK(learning_rate(c, 109) == 1.0f);
}

TEST_CASE("edge cases: no warmup, single step, warmup longer than the run", "[schedule]") {
    CHECK(learning_rate(sched(LrSchedule::Cosine, 0, 100), 0) == 1.0f);
    CHECK(learning_rate(sched(LrSchedule::Cosine, 0, 1), 0) == 1.0f);
    CHECK(learning_rate(sched(LrSchedule::Linear, 0, 1), 0) == 1.0f);
    CHECK(learning_rate(sched(LrSchedule::Cosine, 20, 10), 9) == Approx(0.5).epsilon(1e-6));
}

TEST_CASE("schedule names parse and unknown names are refused", "[schedule]") {
    CHECK(llmc::parse_lr_schedule("cosine") == LrSchedule::Cosine);
    CHECK(llmc::parse_lr_schedule("linear") == LrSchedule::Linear);
    CHECK(llmc::parse_lr_schedule("constant") == LrSchedule::Constant);
    CHECK(llmc::parse_lr_schedule("wsd") == LrSchedule::Wsd);
    CHECK_THROWS_WITH(llmc::parse_lr_schedule("cosin"), Catch::Contains("--lr-schedule 'cosin'"));
}
