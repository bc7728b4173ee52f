// choose_step_graph (llmc/train/step_graph_choice.h): --cuda-graph auto takes the step graph wherever a
// step can run as one and names the first flag that keeps it off; 1 takes it (the flags it cannot take
// are refused by validate.h) or refuses a backend without step graphs; 0 never takes it; a backend
// without step graphs gets no header line.
#include <catch2/catch.hpp>
#include <string>

#include "llmc/app/train_config.h"
#include "llmc/train/step_graph_choice.h"

using namespace llmc;

namespace {
TrainConfig with_graph(const std::string& g) {
    TrainConfig c;
    c.cuda_graph = g;
    return c;
}
}  // namespace

TEST_CASE("--cuda-graph auto takes the step graph where a step can run as one", "[step_graph]") {
    TrainConfig c = with_graph("auto");
    StepGraphChoice g = choose_step_graph(c, 1, true, "cuda");
    CHECK(g.on);
    CHECK(g.words == "one CUDA graph a step once its shapes repeat (--cuda-graph auto)");
    struct Off {
        const char* what;
        void (*set)(TrainConfig&);
        const char* reason;
    };
    const Off offs[] = {
        {"two processes", [](TrainConfig& t) { t.world_size = 2; },
         "several processes reduce the step's numbers on the host"},
        {"-z 1", [](TrainConfig& t) { t.zero_stage = 1; }, "-z 1 updates the weights through the host"},
        {"--skip-spikes", [](TrainConfig& t) { t.skip_spikes = 6.0f; },
         "--skip-spikes decides on the host inside the step"},
        {"--qk-clip", [](TrainConfig& t) { t.qk_clip = 100.0f; },
         "--qk-clip rescales weights on the host inside the step"},
    };
    for (const Off& o : offs) {
        INFO(o.what);
        TrainConfig t = with_graph("auto");
        o.set(t);
        g = choose_step_graph(t, 1, true, "cuda");
        CHECK_FALSE(g.on);
        CHECK(g.words == std::string("kernel by kernel (--cuda-graph auto: ") + o.reason + ")");
    }
}

TEST_CASE("--cuda-graph auto issues a step of several micro-batches kernel by kernel; 1 takes the graph",
          "[step_graph]") {
    StepGraphChoice g = choose_step_graph(with_graph("auto"), 4, true, "cuda");
    CHECK_FALSE(g.on);
    CHECK(g.words ==
          "kernel by kernel (--cuda-graph auto: 4 micro-batches a step, which load while the device runs; "
          "--cuda-graph 1 for one graph)");
    g = choose_step_graph(with_graph("1"), 4, true, "cuda");
    CHECK(g.on);
    // several reasons: the first in the order of host_decides_inside_the_step, then the micro-batches
    TrainConfig t = with_graph("auto");
    t.world_size = 2;
    t.qk_clip = 100.0f;
    g = choose_step_graph(t, 4, true, "cuda");
    CHECK(g.words == "kernel by kernel (--cuda-graph auto: several processes reduce the step's numbers on the host)");
    CHECK(std::string(host_decides_inside_the_step(t)) == "several processes reduce the step's numbers on the host");
    CHECK(host_decides_inside_the_step(with_graph("auto")) == nullptr);
}

TEST_CASE("--cuda-graph 0 never takes the graph, 1 always on a backend that has one", "[step_graph]") {
    StepGraphChoice g = choose_step_graph(with_graph("0"), 1, true, "cuda");
    CHECK_FALSE(g.on);
    CHECK(g.words == "kernel by kernel (--cuda-graph 0)");
    g = choose_step_graph(with_graph("1"), 1, true, "cuda");
    CHECK(g.on);
    CHECK(g.words == "one CUDA graph a step once its shapes repeat (--cuda-graph 1)");
}

TEST_CASE("a backend without step graphs: no header line; --cuda-graph 1 is refused naming it", "[step_graph]") {
    for (const char* v : {"auto", "0"}) {
        const StepGraphChoice g = choose_step_graph(with_graph(v), 1, false, "cpu");
        CHECK_FALSE(g.on);
        CHECK(g.words.empty());
    }
    try {
        choose_step_graph(with_graph("1"), 1, false, "cpu");
        FAIL("--cuda-graph 1 on the cpu backend was not refused");
    } catch (const InputError& e) {
        CHECK(std::string(e.what()) ==
              "--cuda-graph 1 needs the CUDA backend; this run uses the cpu backend (give --device cuda, or drop "
              "--cuda-graph)");
    }
}
