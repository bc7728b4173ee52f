// The per-kernel profile's folding and table (llmc/core/kernel_profile.h) on captures made here with
// known intervals: rows per kernel name without parameter lists, calls/time/mean/share per step,
// activities outside the step windows ignored, the busy time as the union of overlapping intervals,
// untimed captures (the emulated device) with calls only.
#include <catch2/catch.hpp>

#include <string>

#include "llmc/core/kernel_profile.h"

using namespace llmc;

TEST_CASE("short_kernel_name drops 'void' and the parameter list, keeps template arguments", "[profile]") {
    CHECK(short_kernel_name("void llmc::cuda::k<32, true>(float*, int)") == "llmc::cuda::k<32, true>");
    CHECK(short_kernel_name("void f<(int)2>(bool (*)(int))") == "f<(int)2>");
    CHECK(short_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32") == "sm90_xmma_gemm_bf16bf16_bf16f32");
    CHECK(short_kernel_name("memcpy HtoD") == "memcpy HtoD");
    CHECK(short_kernel_name("g (int)") == "g");
}

TEST_CASE("profile_table: per-step calls, time, mean and share; busy time is the union; outside windows ignored",
          "[profile]") {
    ProfileCapture cap;
    cap.timed = true;
    cap.source = "test";
    cap.steps = 2;
    cap.windows = {{1000, 2000}, {5000, 6000}};  // 1000 ns each
    // step 1: a 100..300 (200 ns) and 250..450 of b (overlap: union 1100..1450 = 350 ns)
    cap.activities.push_back({"void a<1>(int)", 1100, 1300});
    cap.activities.push_back({"void b(float*)", 1250, 1450});
    // step 2: a twice (100 + 300 ns), b once (50 ns), disjoint: busy 450 ns
    cap.activities.push_back({"void a<1>(int)", 5000, 5100});
    cap.activities.push_back({"void a<1>(int)", 5200, 5500});
    cap.activities.push_back({"void b(float*)", 5900, 5950});
    cap.activities.push_back({"void c()", 3000, 3500});  // between the steps: validation, not the step
    const ProfileTable t = profile_table(cap);
    REQUIRE(t.rows.size() == 2);
    CHECK(t.steps == 2);
    CHECK(t.step_us == Approx(1.0));
    CHECK(t.busy_us == Approx((350.0 + 450.0) / 2 / 1e3));
    CHECK(t.idle_us == Approx(1.0 - 0.4));
    CHECK(t.rows[0].name == "a<1>");  // largest time first
    CHECK(t.rows[0].calls_per_step == Approx(1.5));
    CHECK(t.rows[0].us_per_step == Approx((200.0 + 100.0 + 300.0) / 2 / 1e3));
    CHECK(t.rows[0].mean_us == Approx(600.0 / 3 / 1e3));
    CHECK(t.rows[0].share == Approx(0.3));
    CHECK(t.rows[1].name == "b");
    CHECK(t.rows[1].us_per_step == Approx(0.125));
    CHECK(t.calls_per_step == Approx(2.5));

    const std::string text = profile_table_text(t);
    CHECK(text.find("profile of 2 training steps (test)") == 0);
    CHECK(text.find("a<1>") < text.find("  b\n"));
    CHECK(text.find("step 1.0 us: some activity running 0.4 us (40.0%), idle 0.6 us") != std::string::npos);
    CHECK(text.find("WARNING") == std::string::npos);
    const nlohmann::ordered_json j = profile_table_json(t);
    CHECK(j["kernels"].size() == 2);
    CHECK(j["kernels"][0]["kernel"] == "a<1>");
    CHECK(j["step_us"].get<double>() == Approx(1.0));

    // at most max_rows rows, the rest summed in one line
    const std::string one = profile_table_text(t, 1);
    CHECK(one.find("(1 more kernels)") != std::string::npos);
    CHECK(one.find("  b\n") == std::string::npos);
}

TEST_CASE("profile_table: an untimed capture has calls per step only", "[profile]") {
    ProfileCapture cap;
    cap.timed = false;
    cap.source = "emulated";
    cap.steps = 2;
    for (int i = 0; i < 6; i++) cap.activities.push_back({"void k(int)"});
    for (int i = 0; i < 2; i++) cap.activities.push_back({"cublasLtMatmul"});
    const ProfileTable t = profile_table(cap);
    REQUIRE(t.rows.size() == 2);
    CHECK(t.rows[0].name == "k");
    CHECK(t.rows[0].calls_per_step == 3.0);
    CHECK(t.rows[0].us_per_step == 0.0);
    CHECK(t.rows[1].calls_per_step == 1.0);
    const std::string text = profile_table_text(t);
    CHECK(text.find("us/step") == std::string::npos);
    CHECK(text.find("4.0 activities per step (not timed)") != std::string::npos);
    CHECK_FALSE(profile_table_json(t).contains("step_us"));
    cap.dropped = 7;  // records the capture lost are said, in the table and the JSON
    CHECK(profile_table_text(profile_table(cap)).find("WARNING: 7 activity records were dropped") != std::string::npos);
    CHECK(profile_table_json(profile_table(cap))["dropped_records"] == 7);
}
