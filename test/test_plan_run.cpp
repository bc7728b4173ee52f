// plan_run (llmc/train/train_loop.h): the phase of a training run that resolves the flags and the
// files into a RunPlan without a backend and without writing anything.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "llmc/dist/collective.h"
#include "llmc/io/shard.h"
#include "llmc/train/train_loop.h"
#include "test/test_util.h"

using Catch::Matchers::Contains;

namespace {

// Two training shards of 1000 and 600 tokens (ids < 300), a validation shard of 600 other tokens (a
// copy of a training shard is refused: llmc/io/data_roles.h) and meta.json with "vocab_size": 300.
void write_data(const llmc_test::TempDir& dir) {
    std::vector<uint32_t> a(1000), b(600), v(600);
    for (size_t i = 0; i < a.size(); i++) a[i] = (uint32_t)(i * 7 % 300);
    for (size_t i = 0; i < b.size(); i++) b[i] = (uint32_t)(i * 11 % 300);
    for (size_t i = 0; i < v.size(); i++) v[i] = (uint32_t)(i * 13 % 300);
    llmc::write_shard(dir.file("train_000.bin"), a, 2);
    llmc::write_shard(dir.file("train_001.bin"), b, 2);
    llmc::write_shard(dir.file("val_000.bin"), v, 2);
    std::ofstream(dir.file("meta.json")) << "{\"vocab_size\": 300}";
}

llmc::TrainConfig small_run(const llmc_test::TempDir& dir) {
    llmc::TrainConfig c;
    c.train_data = dir.file("train_*.bin");
    c.model = "d2";
    c.batch_size = 2;
    c.seq_len = 32;
    c.max_steps = 5;
    c.val_every = 0;
    return c;
}

}  // namespace

TEST_CASE("plan_run resolves model, vocabulary, accumulation, loaders and schedule without a backend") {
    llmc_test::TempDir dir;
    write_data(dir);
    llmc::SingleProcessCollective comm;
    llmc::TrainConfig c = small_run(dir);

    SECTION("a preset takes the data's vocabulary; -x sets the steps") {
        const llmc::RunPlan p = llmc::plan_run(c, comm);
        CHECK(p.model.vocab_size == 300);
        CHECK(p.model.padded_vocab_size == 384);
        CHECK(p.data_vocab == 300);
        CHECK(p.vocab_source == dir.file("meta.json"));
        CHECK(p.model_source == "preset d2");
        CHECK(!p.init);
        CHECK(p.accum == 1);
        CHECK(p.max_steps == 5);
        CHECK(p.schedule.total_steps == 5);
        CHECK(p.adamw.beta2 == c.beta2);
        REQUIRE(p.train);
        CHECK(p.train->total_tokens() == 1600);
        CHECK(!p.val);
        CHECK(!p.resume);
        CHECK(p.start_step() == 0);
    }
    SECTION("-d sets the accumulation; -x -1 is one epoch of optimizer steps") {
        c.total_batch_size = 4L * 2 * 32;
        c.max_steps = -1;
        c.val_data = dir.file("val_*.bin");
        c.val_batches = 3;
        const llmc::RunPlan p = llmc::plan_run(c, comm);
        CHECK(p.accum == 4);
        CHECK(p.max_steps == (int)(p.train->batches_per_epoch() / 4));
        REQUIRE(p.val);
        CHECK(p.val_batches == 3);
    }
    SECTION("-y 1 on an -o without checkpoints plans a fresh start and creates nothing") {
        c.output_dir = dir.file("out");
        c.resume = 1;
        const llmc::RunPlan p = llmc::plan_run(c, comm);
        CHECK(!p.resume);
        CHECK(!std::filesystem::exists(c.output_dir));
    }
    SECTION("a flag the model contradicts is refused with one line") {
        c.seq_len = 4096;
        REQUIRE_THROWS_AS(llmc::plan_run(c, comm), llmc::InputError);
        REQUIRE_THROWS_WITH(llmc::plan_run(c, comm), Contains("exceeds the model's --max-seq-len"));
    }
}

TEST_CASE("a model flag that contradicts the checkpoint is named with the values as written", "[plan_run]") {
    llmc::ModelConfig ck;
    ck.num_layers = 2;
    ck.vocab_size = 50257;
    ck.attn_softcap = 30.0f;
    ck.qk_norm = false;
    llmc::ModelOverrides o;
    o.layers = 3;
    REQUIRE_THROWS_WITH(llmc::check_overrides_match(ck, o, "m.bin"),
                        "--layers 3 contradicts the checkpoint m.bin (which has 2); drop the flag, a checkpoint "
                        "fixes the model");
    o = llmc::ModelOverrides();
    o.vocab = 1000000;
    REQUIRE_THROWS_WITH(llmc::check_overrides_match(ck, o, "m.bin"),
                        Contains("--vocab 1000000 contradicts") && Contains("(which has 50257)"));
    o = llmc::ModelOverrides();
    o.attn_softcap = 0.5f;
    REQUIRE_THROWS_WITH(llmc::check_overrides_match(ck, o, "m.bin"),
                        Contains("--attn-softcap 0.5 contradicts") && Contains("(which has 30)"));
    o = llmc::ModelOverrides();
    o.qk_norm = true;
    REQUIRE_THROWS_WITH(llmc::check_overrides_match(ck, o, "m.bin"),
                        Contains("--qk-norm 1 contradicts") && Contains("(which has 0)"));
    // a value the user never typed names where it came from, and the fix that fits it (a new-user trial
    // met "--layers 2 contradicts ...; drop the flag" after -y 1 -e CKPT, with no --layers given)
    o = llmc::ModelOverrides();
    o.layers = 3;
    auto from_record = [](const std::string& name) {
        return name == "layers" ? std::string(" (from the record r/config.json)") : std::string();
    };
    REQUIRE_THROWS_WITH(llmc::check_overrides_match(ck, o, "m.bin", from_record),
                        "--layers 3 (from the record r/config.json) contradicts the checkpoint m.bin (which has 2); a "
                        "continued run trains its recorded model: drop -e to continue it, or start a new run (another "
                        "-o) from the checkpoint");
    auto from_file = [](const std::string&) { return std::string(" (from --config p.toml)"); };
    REQUIRE_THROWS_WITH(llmc::check_overrides_match(ck, o, "m.bin", from_file),
                        "--layers 3 (from --config p.toml) contradicts the checkpoint m.bin (which has 2); drop it "
                        "from the file or drop -e, a checkpoint fixes the model");
}

TEST_CASE("--fork-from of a step its run deletes while the fork reads it says so, not damage", "[plan_run]") {
    llmc_test::TempDir dir;
    llmc::ModelConfig m;
    m.num_layers = 2;
    const llmc::ForkSource src{dir.path.string(), 4};  // fork_source found its files and DONE_ marker before this
    const std::string given = dir.file("model_00000004.bin");
    // pruned between fork_source and the load: the marker went first, then the files
    REQUIRE_THROWS_WITH(llmc::load_fork_checkpoint(given, src, m, 0, 1),
                        Contains("step 4 was deleted while this fork read it") && !Contains("damaged"));
    // the marker still there but a file missing: damage, not pruning
    std::ofstream(dir.file("DONE_00000004")) << "step 4 world_size 1\n";
    REQUIRE_THROWS_WITH(llmc::load_fork_checkpoint(given, src, m, 0, 1),
                        Contains("the checkpoint is damaged") && Contains("fork from another step"));
}
