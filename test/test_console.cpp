// The trainer's console and its copies in -o: the step line's elapsed time and ETA
// (llmc/train/step_report.h), the line per checkpoint, the end-of-run summary, the metrics record's
// wall-clock "time", console.log and samples.txt appended, never truncated (llmc/train/run_log.h), and
// integers printed as integers in the flags' messages (llmc/app/validate.h).
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <sstream>
#include <string>

#include "llmc/app/model_setup.h"
#include "llmc/app/validate.h"
#include "llmc/train/run_log.h"
#include "llmc/train/step_report.h"
#include "test_util.h"

using namespace llmc;
using Catch::Matchers::Contains;

namespace {

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_CASE("durations print as seconds, minutes or hours; the ETA is the mean step time x steps left", "[console]") {
    CHECK(format_duration(0.0) == "0.0s");
    CHECK(format_duration(4.24) == "4.2s");
    CHECK(format_duration(59.9) == "59.9s");
    CHECK(format_duration(59.96) == "1m00s");
    CHECK(format_duration(187.4) == "3m07s");
    CHECK(format_duration(3599.4) == "59m59s");
    CHECK(format_duration(7500) == "2h05m");
    CHECK(format_duration(-1) == "?");
    CHECK(format_duration(std::nan("")) == "?");
    CHECK(format_duration(INFINITY) == "?");
    CHECK(eta_seconds(10.0, 5, 15) == Approx(30.0));  // 2 s per step, 15 steps left
    CHECK(eta_seconds(10.0, 5, 0) == 0.0);
    CHECK(std::isnan(eta_seconds(0.0, 0, 10)));  // no step yet
}

TEST_CASE("the step line carries the elapsed time and the ETA", "[console]") {
    StepResult r;
    r.step = 5;
    r.loss = 2.5f;
    LogitStats s;
    s.resize(1, 1);
    s.max_logit = {1.5f};
    StepProgress p;
    p.elapsed_s = 10.0;
    p.eta_s = eta_seconds(10.0, 5, 15);
    const std::string line = step_line(r, 20, s, std::nullopt, -1.0, 0.0, "", 100, p);
    CHECK_THAT(line, Contains("step  5/20 | loss 2.5000"));
    CHECK_THAT(line, Contains(" | elapsed 10.0s | ETA 30.0s"));
}

TEST_CASE("metrics records carry the wall-clock time in Unix seconds", "[console]") {
    StepResult r;
    r.step = 3;
    LogitStats s;
    s.resize(1, 1);
    const double now = unix_time_now();
    CHECK(now > 1.7e9);                                   // after 2023
    CHECK(std::round(now * 1000) == Approx(now * 1000));  // milliseconds
    const nlohmann::ordered_json rec = step_record(r, s, std::nullopt, false, 1764093783.25);
    REQUIRE(rec.contains("time"));
    CHECK(rec["time"].get<double>() == 1764093783.25);
    CHECK(rec.dump().find("\"step\":3,\"time\":1764093783.25,") != std::string::npos);
}

TEST_CASE("the checkpoint line and the end-of-run summary", "[console]") {
    CHECK(checkpoint_line(40, "out/run/model_00000040.bin", false) ==
          "checkpoint of step 40: out/run/model_00000040.bin");
    CHECK(checkpoint_line(7, "o/model_00000007.bin", true) ==
          "checkpoint of step 7 (logit alarm): o/model_00000007.bin");
    RunSummary s;
    s.start_step = 10;
    s.last_step = 1000000;
    s.tokens_per_step = 524288;
    s.tokens_before = 10 * 524288;  // steps 1..10, an earlier process's (from the run record)
    s.wall_s = 3725;
    s.note_val(0, 10.5);
    s.note_val(500, 3.25);
    s.note_val(1000000, 3.5);
    s.weights = "out/run/model_01000000.bin";
    CHECK(summary_line(s) ==
          "done: step 1000000 (999990 in this run) | 524288000000 tokens | wall time 1h02m | val loss 3.5000 (step "
          "1000000), best 3.2500 (step 500) | weights: out/run/model_01000000.bin");
    RunSummary none;
    none.last_step = 3;
    none.tokens_per_step = 64;
    CHECK(summary_line(none) ==
          "done: step 3 (3 in this run) | 192 tokens | wall time 0.0s | no validation | weights: "
          "not saved (no -o)");
    none.note_skipped(false, true);
    CHECK(summary_line(none).find(" | 192 tokens (1 step read but not trained: 0 non-finite, 1 spike-skipped) | ") !=
          std::string::npos);
}

TEST_CASE("a resumed run's summary counts the skipped updates of its earlier steps from metrics.jsonl", "[console]") {
    llmc_test::TempDir dir;
    std::ofstream(dir.file("metrics.jsonl"))
        << "{\"step\":1,\"skipped_nonfinite\":false,\"skipped_spike\":false}\n"
           "{\"step\":2,\"skipped_nonfinite\":true,\"skipped_spike\":false}\n"
           "{\"step\":3,\"skipped_nonfinite\":false,\"skipped_spike\":true}\n"
           "{\"step\":4,\"skipped_spike\":\"yes\"}\n{\"skipped_spike\":true}\n{\"step\":5,\"skipped_sp";
    RunSummary s;
    s.note_metrics_records(dir.file("metrics.jsonl"));
    CHECK(s.skipped_nonfinite == 1);
    CHECK(s.skipped_spike == 1);  // a string, a record without a step and a cut line count for nothing
    s.note_skipped(true, false);  // this process's step 6
    s.last_step = 6;
    s.tokens_per_step = 10;
    CHECK(summary_line(s).find("| 60 tokens (3 steps read but not trained: 2 non-finite, 1 spike-skipped) |") !=
          std::string::npos);
}

TEST_CASE("a resumed run's summary takes the best validation loss of the earlier steps from metrics.jsonl",
          "[console]") {
    llmc_test::TempDir dir;
    std::ofstream(dir.file("metrics.jsonl"))
        << "{\"step\":0,\"val_loss\":9.5}\n{\"step\":5,\"loss\":3.0}\n"
           "{\"step\":10,\"loss\":2.0,\"val_loss\":2.75}\n{\"step\":15,\"val_loss\":null}\n"
           "{\"step\":20,\"val_lo";
    RunSummary s;
    s.note_metrics_records(dir.file("metrics.jsonl"));
    REQUIRE(s.best_val);
    CHECK(*s.best_val == 2.75);
    CHECK(s.best_val_step == 10);
    s.note_val(25, 3.0);
    CHECK(*s.best_val == 2.75);
    CHECK(*s.final_val == 3.0);
}

TEST_CASE("the best validation loss counts only the steps after the validation set last changed", "[console]") {
    llmc_test::TempDir dir;
    std::ofstream(dir.file("metrics.jsonl")) << "{\"step\":0,\"val_loss\":9.5}\n{\"step\":10,\"val_loss\":2.5}\n"
                                                "{\"step\":20,\"val_loss\":2.25}\n{\"step\":30,\"val_loss\":4.0}\n";
    RunSummary s;
    s.val_set_since = 20;  // -j changed on the resume at step 20: step 20's loss was on the old set
    s.val_set_flags = "--val-data and --val-batches";
    s.note_metrics_records(dir.file("metrics.jsonl"));
    REQUIRE(s.best_val);
    CHECK(*s.best_val == 4.0);
    CHECK(s.best_val_step == 30);
    s.note_val(40, 3.75);
    s.last_step = 40;
    CHECK(summary_line(s).find(" | val loss 3.7500 (step 40), best 3.7500 (step 40; since step 20, when --val-data "
                               "and --val-batches changed) | ") != std::string::npos);
}

TEST_CASE("console.log and samples.txt are appended to, never truncated", "[console]") {
    llmc_test::TempDir dir;
    {
        RunLog log;
        log.open(dir.path.string());
        log.printf("step %d/%d\n", 1, 2);
        log.sample(1, "to be or not");
    }
    {
        RunLog log;  // a resumed run
        log.open(dir.path.string());
        log.print("resumed\n");
        log.sample(2, "that is");
    }
    CHECK(read_text(dir.file("console.log")) ==
          "step 1/2\n--- sample at step 1 ---\nto be or not\n---\nresumed\n--- sample at step 2 ---\nthat is\n---\n");
    CHECK(read_text(dir.file("samples.txt")) ==
          "--- sample at step 1 ---\nto be or not\n---\n--- sample at step 2 ---\nthat is\n---\n");
    RunLog closed;  // without -o: stdout only, nothing written
    closed.print("");
    RunLog bad;
    CHECK_THROWS_WITH(bad.open(dir.file("no/such/dir")), Contains("console.log") && Contains("writable directory"));
}

TEST_CASE("a console.log write past the file-size limit names ulimit -f", "[console]") {
    // docs/reliability.md "Chaos soak" fix 4: it said "free space on the file system of -o" for EFBIG
    llmc_test::TempDir dir;
    RunLog log;
    log.open(dir.path.string());
    struct rlimit old_lim;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old_lim;
    lim.rlim_cur = 100;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    std::string e;
    try {
        log.print(std::string(300, 'x') + "\n");
    } catch (const InputError& ex) { e = ex.what(); }
    setrlimit(RLIMIT_FSIZE, &old_lim);
    signal(SIGXFSZ, old_handler);
    CHECK(e.find("console.log failed (File too large)") != std::string::npos);
    CHECK(e.find("ulimit -f") != std::string::npos);
}

TEST_CASE("integers in the flags' messages print as integers, floats as %g", "[console]") {
    TrainConfig c;
    c.max_steps = -2000000;
    CHECK_THROWS_WITH(check_flag_ranges(c), Contains("-x/--max-steps must be -1 (one epoch) or >= 0 (got -2000000)"));
    c = TrainConfig();
    c.spike_window = 1;
    CHECK_THROWS_WITH(check_flag_ranges(c), Contains("(got 1)"));
    c = TrainConfig();
    c.beta1 = 1.5f;
    CHECK_THROWS_WITH(check_flag_ranges(c), Contains("(got 1.5)"));
    ModelConfig m;
    m.num_layers = 2;
    m.channels = 32;
    m.num_heads = 4;
    m.global_heads = 1;
    m.window = 8;
    m.vocab_size = 256;
    m.padded_vocab_size = 256;
    m.max_seq_len = 64;
    m.attn_softcap = 5.0f;
    CHECK_THAT(describe_model(m, 123), Contains(", softcap 5, "));
    CHECK_THAT(describe_model(m, 123), !Contains("5.000000"));
    m.num_layers = 1000000;
    m.channels = 100000;  // beyond 2^40 parameters
    CHECK_THAT(validate_model_config(m), Contains("the model would have ") && !Contains("e+"));
}
