// The per-kernel profile's folding and table (llmc/core/kernel_profile.h) on captures made here with
// known intervals: rows per kernel name without parameter lists, calls/time/mean/share per step,
// activities outside the step windows ignored, the busy time as the union of overlapping intervals,
// untimed captures (the emulated device) with calls only.
#include <catch2/catch.hpp>

#include <string>

#include "llmc/core/kernel_profile.h"
#include "llmc/core/rng.h"

using namespace llmc;

TEST_CASE("short_kernel_name drops 'void' and the parameter list, keeps template arguments", "[profile]") {
    CHECK(short_kernel_name("void llmc::cuda::k<32, true>(float*, int)") == "llmc::cuda::k<32, true>");
    CHECK(short_kernel_name("void f<(int)2>(bool (*)(int))") == "f<(int)2>");
    CHECK(short_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32") == "sm90_xmma_gemm_bf16bf16_bf16f32");
    CHECK(short_kernel_name("memcpy HtoD") == "memcpy HtoD");
    CHECK(short_kernel_name("g (int)") == "g");
}

TEST_CASE("short_kernel_name demangles CUPTI's mangled symbols as c++filt -p does", "[profile]") {
    // names as CUPTI gave them on the H200 at c276bf2 (docs/results/2026-11-29-H200-c276bf2/report.txt);
    // the expected names are binutils' `c++filt -p` output for them
    CHECK(short_kernel_name("_ZN4llmc4cuda22attn_bwd_kv_fa2_kernelILi32ELb0EEEvP13__nv_bfloat16PKS2_S5_PKfS7_"
                            "iiiiifNS0_8Fa2SplitE") == "llmc::cuda::attn_bwd_kv_fa2_kernel<32, false>");
    CHECK(short_kernel_name("_ZN4llmc4cuda6detail15bias_sum_kernelEPfS2_PjP13__nv_bfloat16PKS4_NS_4GeluEii") ==
          "llmc::cuda::detail::bias_sum_kernel");
    CHECK(short_kernel_name("_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_"
                            "18cublasSplitKParamsIT4_EEPKT2_PKT8_PT7_PT3_PKS2_SF_PKT9_S6_PSG_PvlPS2_PiSL_SL_SF_SF_"
                            "SF_SF_SF_") ==
          "cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, "
          "false, false, false>");
    // cuBLASLt's extern "C" kernels and what does not demangle stay as they are
    CHECK(short_kernel_name("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT") ==
          "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT");
    CHECK(demangled_kernel_name("_Znot_a_symbol") == "_Znot_a_symbol");
    // the mangled and the demangled spelling of one kernel fold into one row
    ProfileCapture cap;
    cap.steps = 1;
    cap.activities.push_back({"_ZN4llmc4cuda6detail15bias_sum_kernelEPfS2_PjP13__nv_bfloat16PKS4_NS_4GeluEii"});
    cap.activities.push_back({"llmc::cuda::detail::bias_sum_kernel(float*, float*)"});
    const ProfileTable t = profile_table(cap);
    REQUIRE(t.rows.size() == 1);
    CHECK(t.rows[0].name == "llmc::cuda::detail::bias_sum_kernel");
    CHECK(t.rows[0].calls_per_step == 2.0);
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

TEST_CASE("profile_table: the idle time split before, between and after the activities", "[profile]") {
    ProfileCapture cap;
    cap.timed = true;
    cap.source = "test";
    cap.steps = 2;
    cap.windows = {{1000, 2000}, {5000, 6000}};
    // step 1: lead 100 ns; a 1100..1300; gap 200 before b 1500..1600; c 1550..1700 starts inside b (no
    // gap); gap 50 before a 1750..1800; tail 200
    cap.activities.push_back({"void a<1>(int)", 1100, 1300});
    cap.activities.push_back({"void b(float*)", 1500, 1600});
    cap.activities.push_back({"void c()", 1550, 1700});
    cap.activities.push_back({"void a<1>(int)", 1750, 1800});
    // step 2: lead 0; b 5000..5010; gap 980 before c 5990..6000; tail 0
    cap.activities.push_back({"void b(float*)", 5000, 5010});
    cap.activities.push_back({"void c()", 5990, 6000});
    const ProfileTable t = profile_table(cap);
    CHECK(t.idle.lead_us == Approx((100.0 + 0.0) / 2 / 1e3));
    CHECK(t.idle.inner_us == Approx((200.0 + 50.0 + 980.0) / 2 / 1e3));
    CHECK(t.idle.tail_us == Approx((200.0 + 0.0) / 2 / 1e3));
    CHECK(t.idle.inner_gaps == Approx(3.0 / 2));
    CHECK(t.idle.inner_gaps_5us == Approx(0.0));  // 980 ns is under 5 us
    CHECK(t.idle.largest_gap_us == Approx(0.98));
    CHECK(t.idle.lead_us + t.idle.inner_us + t.idle.tail_us == Approx(t.idle_us));
    const auto row = [&](const std::string& n) {
        for (const ProfileRow& r : t.rows)
            if (r.name == n) return r;
        FAIL("no row " << n);
        return ProfileRow();
    };
    CHECK(row("b").gap_before_us == Approx(200.0 / 2 / 1e3));  // step 2's b starts the window: lead, not a gap
    CHECK(row("b").gaps_before == Approx(0.5));
    CHECK(row("a<1>").gap_before_us == Approx(50.0 / 2 / 1e3));
    CHECK(row("c").gap_before_us == Approx(980.0 / 2 / 1e3));
    const std::string text = profile_table_text(t);
    CHECK(text.find("idle per step: 0.1 us before the first activity, 0.6 us in 1.5 gaps between activities (0.0 over "
                    "5 us, the largest 1.0 us), 0.1 us after the last") != std::string::npos);
    CHECK(text.find("  gaps before c: 0.5 us per step (0.5 gaps)") < text.find("  gaps before b:"));
    const nlohmann::ordered_json j = profile_table_json(t);
    CHECK(j["idle_split"]["inner_us"].get<double>() == Approx(t.idle.inner_us));
    CHECK(j["kernels"][0].contains("gap_before_us"));
    // a window without activity is all lead
    ProfileCapture empty = cap;
    empty.activities.clear();
    CHECK(profile_table(empty).idle.lead_us == Approx(1.0));
}

TEST_CASE("profile_table: on random captures the split adds up to the idle time", "[profile]") {
    Rng gen(0x1d1e5ull + Catch::rngSeed());
    const auto rng = [&] { return gen.next_u64(); };
    for (int trial = 0; trial < 200; trial++) {
        ProfileCapture cap;
        cap.timed = true;
        cap.steps = 1 + (int)(rng() % 4);
        uint64_t t0 = 1000;
        for (int s = 0; s < cap.steps; s++) {
            const uint64_t len = 100 + rng() % 100000;
            cap.windows.push_back({t0, t0 + len});
            const int n = (int)(rng() % 30);
            for (int i = 0; i < n; i++) {  // activities start and end inside their window (a sync ends it)
                const uint64_t a = t0 + rng() % len, b = a + rng() % (t0 + len - a + 1);
                cap.activities.push_back({"k" + std::to_string(rng() % 5), a, b});
            }
            t0 += len + 1 + rng() % 1000;
        }
        const ProfileTable t = profile_table(cap);
        INFO("trial " << trial);
        CHECK(t.idle.lead_us + t.idle.inner_us + t.idle.tail_us == Approx(t.idle_us).margin(1e-9));
        double before = 0;
        for (const ProfileRow& r : t.rows) before += r.gap_before_us;
        CHECK(before == Approx(t.idle.inner_us).margin(1e-9));
    }
}

TEST_CASE("profile_table: the GEMMs' achieved rates from their counts and cuBLASLt's rows", "[profile]") {
    ProfileCapture cap;
    cap.timed = true;
    cap.steps = 2;
    cap.windows = {{0, 1'000'000}, {2'000'000, 3'000'000}};
    // per step: cuBLASLt's kernels 300 + 100 us (a GEMM and its split-K reduction), ours 200 us,
    // a memset and an NCCL kernel, which are not cuBLASLt's
    for (uint64_t w : {0ull, 2'000'000ull}) {
        cap.activities.push_back({"nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT", w, w + 300'000});
        cap.activities.push_back(
            {"_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_"
             "18cublasSplitKParamsIT4_EEPKT2_PKT8_PT7_PT3_PKS2_SF_PKT9_S6_PSG_PvlPS2_PiSL_SL_SF_"
             "SF_SF_SF_SF_",
             w + 300'000, w + 400'000});
        cap.activities.push_back({"void llmc::cuda::k<1>(int)", w + 400'000, w + 600'000});
        cap.activities.push_back({"memset", w + 600'000, w + 610'000});
        cap.activities.push_back({"ncclDevKernel_AllReduce_Sum_f32_RING_LL", w + 610'000, w + 700'000});
    }
    cap.gemms_counted = true;
    cap.gemms["m=8 n=8 k=8 a"] = {2, 2 * 8e12, 2 * 4e9};  // over both steps: 8 TFLOP and 4 GB a step
    cap.gemms["m=8 n=8 k=8 b"] = {6, 2 * 24e12, 2 * 2e9};
    const ProfileTable t = profile_table(cap);
    const ProfileTable::Gemms& g = t.gemms;
    REQUIRE(g.counted);
    CHECK(g.calls == 4.0);
    CHECK(g.flops == Approx(32e12));
    CHECK(g.bytes == Approx(6e9));
    CHECK(g.us == Approx(400.0));  // the nvjet and splitKreduce rows only
    CHECK(g.kernel_calls == 2.0);
    REQUIRE(g.problems.size() == 2);
    CHECK(g.problems[0].name == "m=8 n=8 k=8 b");  // most FLOPs first
    CHECK(g.problems[0].calls == 3.0);
    CHECK(g.problems[0].flops == Approx(24e12));
    CHECK(g.problems[0].bytes == Approx(2e9));
    const std::string text = profile_table_text(t);
    // 32 TFLOP in 400 us: 80,000 TFLOP/s; 6 GB in 400 us: 15,000 GB/s
    CHECK(text.find("cuBLASLt per step: 4.0 calls, 32000.000 GFLOP (2 m n k), 6.0000 GB of operands (each read or "
                    "written once); its kernels (2.0 launches) 400.0 us: 80000.0 TFLOP/s, 15000 GB/s\n") !=
          std::string::npos);
    CHECK(text.find("     3.0 calls  24000.000 GFLOP  m=8 n=8 k=8 b\n") < text.find("     1.0 calls   8000.000 GFLOP"));
    const nlohmann::ordered_json j = profile_table_json(t);
    CHECK(j["gemms"]["tflops"].get<double>() == Approx(80000.0));
    CHECK(j["gemms"]["gbps"].get<double>() == Approx(15000.0));
    CHECK(j["gemms"]["problems"][1]["calls_per_step"].get<double>() == 1.0);
    CHECK(j["gemms"]["problems"][1]["flops_per_step"].get<double>() == Approx(8e12));
    // not counted: no line, no JSON key; untimed: counts without a rate
    ProfileCapture plain = cap;
    plain.gemms_counted = false;
    plain.gemms.clear();
    CHECK(profile_table_text(profile_table(plain)).find("cuBLASLt per step") == std::string::npos);
    CHECK(!profile_table_json(profile_table(plain)).contains("gemms"));
    ProfileCapture untimed;
    untimed.steps = 1;
    untimed.activities.push_back({"cublasLtMatmul [emulated cuBLASLt: one call, its kernels unknown]"});
    untimed.gemms_counted = true;
    untimed.gemms["p"] = {1, 2e9, 1e9};
    const std::string ut = profile_table_text(profile_table(untimed));
    CHECK(ut.find("cuBLASLt per step: 1.0 calls, 2.000 GFLOP (2 m n k), 1.0000 GB of operands (each read or written "
                  "once) (not timed)\n") != std::string::npos);
    CHECK(!profile_table_json(profile_table(untimed))["gemms"].contains("tflops"));
}
