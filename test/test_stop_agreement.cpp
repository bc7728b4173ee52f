// The ranks' agreement to stop after a signal (llmc/train/interrupt.h): it rides on the step's own
// reduction of the logit statistics instead of a collective call of its own (with NCCL each one is a
// device synchronization). Run here by run_training on the CPU backend as rank 0 of a simulated
// 2-rank world whose partner mirrors this rank's buffers; the end-to-end signal tests, with real
// signals and real MPI ranks, are in test/test_interrupt.py.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/dist/collective.h"
#include "llmc/io/shard.h"
#include "llmc/train/train_loop.h"
#include "test/test_util.h"

using namespace llmc;

namespace {

// Rank 0 of a 2-rank world whose partner rank holds exactly this rank's values (Avg and Max give this
// rank's values back; Sum doubles them), except that the partner has received signal `partner_signal`
// (0: none): every value it contributes to a Max reduction is at least that number. (Its statistics
// are of no interest here; a vote it casts is.) Its part of a checkpoint in `output_dir`, a copy of this
// rank's training state, is there at the barrier before the DONE marker. Counts the calls by kind.
class MirrorCollective : public SingleProcessCollective {
public:
    float partner_signal = 0.0f;
    std::string output_dir;
    long float_reductions = 0, double_reductions = 0, int_reductions = 0, barriers = 0;
    int world_size() const override { return 2; }
    void all_reduce(float* buf, size_t n, ReduceOp op) override {
        float_reductions++;
        for (size_t i = 0; i < n; i++) {
            if (op == ReduceOp::Sum) buf[i] *= 2;
            if (op == ReduceOp::Max) buf[i] = std::max(buf[i], partner_signal);
        }
    }
    void reduce_scatter(const float*, float*, size_t, ReduceOp) override { FAIL("no -z 1 here"); }
    void barrier() override {
        barriers++;
        if (output_dir.empty()) return;
        for (const auto& e : std::filesystem::directory_iterator(output_dir)) {
            const std::string name = e.path().filename().string();  // state_SSSSSSSS_00000.bin
            if (name.rfind("state_", 0) == 0 && name.size() > 10 && name.substr(name.size() - 10) == "_00000.bin")
                std::filesystem::copy_file(e.path(), output_dir + "/" + name.substr(0, name.size() - 10) + "_00001.bin",
                                           std::filesystem::copy_options::skip_existing);
        }
    }
    double all_reduce_double(double x, ReduceOp op) override {
        double_reductions++;
        return op == ReduceOp::Sum ? 2 * x : x;
    }
    long long all_reduce_int(long long x, ReduceOp op) override {
        int_reductions++;
        return op == ReduceOp::Sum ? 2 * x : x;
    }
};

// Byte-like tokens (ids < 64) in one train shard and meta.json; a tiny LS model; `steps` steps.
TrainConfig tiny_run(const llmc_test::TempDir& dir, int steps) {
    std::mt19937 rng(std::random_device{}());
    std::vector<uint32_t> tokens(4000);
    for (uint32_t& t : tokens) t = rng() % 64;
    write_shard(dir.file("train_000.bin"), tokens, 1);  // uint16 tokens
    std::ofstream(dir.file("meta.json")) << "{\"vocab_size\": 64}";
    TrainConfig c;
    c.train_data = dir.file("train_*.bin");
    c.overrides.layers = 1;
    c.overrides.channels = 16;
    c.overrides.heads = 2;
    c.overrides.global_heads = 1;
    c.overrides.window = 4;
    c.overrides.max_seq_len = 16;
    c.batch_size = 2;
    c.seq_len = 16;
    c.max_steps = steps;
    c.val_every = 0;
    c.sample_every = 0;
    c.checkpoint_every = 0;
    c.rank = 0;
    c.world_size = 2;
    return c;
}

int train(const TrainConfig& c, MirrorCollective& comm) {
    const BackendFactory cpu = [&c](const ModelConfig& m) -> std::unique_ptr<Backend> {
        return std::make_unique<cpu::CpuBackend>(m, c.seed);
    };
    return run_training(c, cpu, "", comm);
}

}  // namespace

TEST_CASE("the stop agreement adds no collective call to a step", "[interrupt]") {
    llmc_test::TempDir dir;
    MirrorCollective short_run, long_run;
    REQUIRE(train(tiny_run(dir, 3), short_run) == 0);
    REQUIRE(train(tiny_run(dir, 7), long_run) == 0);
    // per step: the losses (double), the logit statistics and the gradients (float); no integer
    // all-reduce and no barrier
    CHECK(long_run.int_reductions == short_run.int_reductions);
    CHECK(long_run.barriers == short_run.barriers);
    CHECK(long_run.double_reductions - short_run.double_reductions == 4 * 2);
    CHECK(long_run.float_reductions > short_run.float_reductions);
}

TEST_CASE("a signal that reached only the partner rank stops this rank after the same step, checkpointed",
          "[interrupt]") {
    llmc_test::TempDir dir;
    TrainConfig c = tiny_run(dir, 6);
    c.output_dir = dir.file("out");
    MirrorCollective comm;
    comm.output_dir = c.output_dir;
    comm.partner_signal = (float)SIGTERM;  // cast in step 1's reduction
    CHECK(train(c, comm) == 128 + SIGTERM);
    CHECK(std::filesystem::exists(dir.file("out/DONE_00000001")));
    CHECK(std::filesystem::exists(dir.file("out/model_00000001.bin")));
    CHECK(std::filesystem::exists(dir.file("out/state_00000001_00000.bin")));
    CHECK_FALSE(std::filesystem::exists(dir.file("out/DONE_00000002")));
}

TEST_CASE("a vote cast in the last step changes nothing: the run ends as planned", "[interrupt]") {
    llmc_test::TempDir dir;
    TrainConfig c = tiny_run(dir, 1);
    c.output_dir = dir.file("out");
    MirrorCollective comm;
    comm.output_dir = c.output_dir;
    comm.partner_signal = (float)SIGUSR1;
    CHECK(train(c, comm) == 0);
    CHECK(std::filesystem::exists(dir.file("out/DONE_00000001")));
}

TEST_CASE("a stop the program asks for leaves a user's first SIGINT a first one", "[interrupt]") {
    // (a review) stop_for(SIGPIPE), a closed stdout, once set the handler's record: the user's first Ctrl-C
    // then took SIGINT's default action (a second one's) and ended the process in its checkpoint's write.
    struct sigaction inherited;  // a test binary started in the background (`cmd &`) inherits SIGINT ignored
    struct sigaction deflt;
    std::memset(&deflt, 0, sizeof deflt);
    deflt.sa_handler = SIG_DFL;
    REQUIRE(::sigaction(SIGINT, &deflt, &inherited) == 0);
    llmc::SingleProcessCollective one;
    {
        llmc::InterruptHandlers interrupts;
        interrupts.stop_for(SIGPIPE);
        CHECK(interrupts.agreed_signal(one) == SIGPIPE);
        interrupts.stop_for(SIGPIPE);
        REQUIRE(::raise(SIGINT) == 0);  // the process lives on: a first SIGINT is recorded
        CHECK(llmc::g_interrupt_signal == SIGINT);
        CHECK(interrupts.agreed_signal(one) == SIGINT);  // a signal recorded by then names the stop
    }
    ::sigaction(SIGINT, &inherited, nullptr);
}
