// How a launch is set up, without a GPU, MPI or NCCL: the device choice with any GPU count
// injected (llmc/app/device.h), the collective for every build x launcher combination
// (llmc/dist/collective_choice.h), and the file rendezvous with ranks as threads, stale files from a
// crashed run and ranks that never come (llmc/dist/rendezvous.h).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "llmc/io/atomic_file.h"
#include "llmc/dist/collective_choice.h"
#include "llmc/app/device.h"
#include "llmc/dist/rendezvous.h"
#include "test/test_util.h"

using Catch::Matchers::Contains;

namespace {
llmc::ModelConfig model_with(int C, int NH) {
    llmc::ModelConfig m;
    m.channels = C;
    m.num_heads = NH;
    m.global_heads = 1;
    return m;
}
}  // namespace

TEST_CASE("--device auto stays on the CPU for a model the CUDA backend cannot run, and says why", "[launch]") {
    const llmc::ModelConfig hd8 = model_with(32, 4), hd32 = model_with(192, 6), hd64 = model_with(256, 4),
                            hd128 = model_with(256, 2), hd48 = model_with(192, 4);
    std::string note;
    // no GPU: the CPU, with the reason (the build's first: one without the CUDA backend counts no GPU)
    CHECK(llmc::resolve_device("auto", 0, hd32, &note, true) == llmc::Device::Cpu);
    CHECK(note == "note: no CUDA device found; running on the CPU");
    CHECK(llmc::resolve_device("auto", 0, hd32, &note, false) == llmc::Device::Cpu);
    CHECK(note == "note: this build has no CUDA backend (compiled without nvcc); running on the CPU");
    // the model rule itself, independent of the build
    CHECK(llmc::cuda_model_unsupported_reason(hd32).empty());
    CHECK(llmc::cuda_model_unsupported_reason(hd64).empty());
    CHECK(llmc::cuda_model_unsupported_reason(hd128).empty());
    CHECK_THAT(llmc::cuda_model_unsupported_reason(hd8), Contains("head size 32, 64 or 128") && Contains("is 8"));
    CHECK_THAT(llmc::cuda_model_unsupported_reason(hd48), Contains("is 48"));
    CHECK(llmc::resolve_device("cpu", 4, hd32, &note) == llmc::Device::Cpu);
    CHECK_THROWS_WITH(llmc::resolve_device("gpu", 1, hd32, &note), Contains("unknown --device 'gpu'"));
}

TEST_CASE("resolve_device with a model, as the CUDA build decides (GPU count and build injected)", "[launch]") {
    std::string note;
    const bool cuda = true;  // as train_gpt2_ls built by nvcc
    CHECK(llmc::resolve_device("auto", 1, model_with(192, 6), &note, cuda) == llmc::Device::Cuda);
    CHECK(llmc::resolve_device("auto", 1, model_with(256, 2), &note, cuda) == llmc::Device::Cuda);
    note.clear();
    CHECK(llmc::resolve_device("auto", 1, model_with(32, 4), &note, cuda) == llmc::Device::Cpu);
    CHECK_THAT(note,
               Contains("a GPU is present but the CUDA backend supports head size") && Contains("running on the CPU"));
    CHECK_THROWS_WITH(llmc::resolve_device("cuda", 1, model_with(32, 4), &note, cuda),
                      Contains("--device cuda:") && Contains("is 8") && Contains("use --device cpu"));
    CHECK(llmc::resolve_device("cuda", 1, model_with(192, 6), &note, cuda) == llmc::Device::Cuda);
    CHECK_THROWS_WITH(llmc::resolve_device("cuda", 0, model_with(192, 6), &note, cuda),
                      Contains("no CUDA device found"));
    CHECK(llmc::resolve_device("cpu", 1, model_with(192, 6), &note, cuda) == llmc::Device::Cpu);
    // a sequence past the CUDA attention kernels' limit: refused before the run, naming the flag
    llmc::ModelConfig long_t = model_with(192, 6);
    long_t.max_seq_len = (int)llmc::kCudaAttnMaxSeqLen;
    CHECK(llmc::resolve_device("cuda", 1, long_t, &note, cuda) == llmc::Device::Cuda);
    long_t.max_seq_len++;
    CHECK_THAT(llmc::cuda_model_unsupported_reason(long_t), Contains("up to 2097120") && Contains("2097121"));
    CHECK_THROWS_WITH(llmc::resolve_device("cuda", 1, long_t, &note, cuda),
                      Contains("--device cuda:") && Contains("change --max-seq-len or use --device cpu"));
    CHECK_THROWS_WITH(llmc::resolve_device("cuda", 1, model_with(32, 4), &note, cuda),
                      Contains("change --channels/--heads or use --device cpu"));
    // without the CUDA backend, a GPU changes nothing
    note.clear();
    CHECK(llmc::resolve_device("auto", 1, model_with(192, 6), &note, false) == llmc::Device::Cpu);
    CHECK_THAT(note, Contains("no CUDA backend"));
}

TEST_CASE("choose_collective: every build x launcher combination picks a collective or says what is missing",
          "[launch]") {
    using K = llmc::CollectiveKind;
    llmc::LaunchInfo one;
    llmc::LaunchInfo two;
    two.world_size = 2;
    two.source = "mpirun (Open MPI)";
    for (bool mpi : {false, true})
        for (bool nccl : {false, true})
            for (bool cuda : {false, true})
                CHECK(llmc::choose_collective(one, cuda, {mpi, nccl}, false, "") == K::Single);

    // MPI and NCCL built, started by mpirun
    CHECK(llmc::choose_collective(two, true, {true, true}, true, "") == K::NcclMpi);
    CHECK(llmc::choose_collective(two, false, {true, true}, true, "") == K::Mpi);
    // NCCL but no MPI (the common GPU machine): CUDA needs --rendezvous, and says so
    CHECK(llmc::choose_collective(two, true, {false, true}, false, "/shared/rdv") == K::NcclFile);
    CHECK_THROWS_WITH(llmc::choose_collective(two, true, {false, true}, false, ""),
                      Contains("2 processes (from mpirun (Open MPI))") && Contains("this build has no MPI") &&
                          Contains("--rendezvous DIR"));
    CHECK_THROWS_WITH(llmc::choose_collective(two, false, {false, true}, false, ""),
                      Contains("this build has no MPI") && Contains("mpirun -np N"));
    // MPI but no NCCL: CUDA goes through MPI with host buffers
    CHECK(llmc::choose_collective(two, true, {true, false}, true, "") == K::Mpi);
    // MPI built but not started by mpirun (e.g. srun without PMI)
    CHECK_THROWS_WITH(llmc::choose_collective(two, true, {true, true}, false, ""),
                      Contains("not started by mpirun") && Contains("--rendezvous DIR"));
    CHECK(llmc::choose_collective(two, true, {true, true}, false, "/d") == K::NcclFile);
    // neither built
    CHECK_THROWS_WITH(llmc::choose_collective(two, true, {false, false}, false, "/d"),
                      Contains("this build has no MPI") && Contains("no NCCL either"));
    CHECK_THROWS_WITH(llmc::choose_collective(two, false, {false, false}, false, ""),
                      Contains("this build has no MPI"));
}

namespace {
std::vector<char> random_bytes(size_t n, std::mt19937_64& g) {
    std::vector<char> b(n);
    for (char& c : b) c = (char)(g() & 0xFF);
    return b;
}
// Runs `world` ranks as threads, rank r starting after delay_ms[r]; returns what each got (or the error).
struct RankResult {
    std::vector<char> bytes;
    std::string error;
};
std::vector<RankResult> run_ranks(const llmc::RendezvousOptions& opt, int world, const std::vector<char>& payload,
                                  const std::vector<int>& delay_ms) {
    std::vector<RankResult> res(world);
    std::vector<std::thread> th;
    for (int r = 0; r < world; r++)
        th.emplace_back([&, r] {
            std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms[r]));
            try {
                res[r].bytes = llmc::rendezvous_exchange(opt, r, world, r == 0 ? payload : std::vector<char>());
            } catch (const std::exception& e) { res[r].error = e.what(); }
        });
    for (auto& t : th) t.join();
    return res;
}
}  // namespace

TEST_CASE("file rendezvous: every rank gets rank 0's bytes, whatever the start order", "[launch][rendezvous]") {
    std::mt19937_64 g(std::random_device{}());
    llmc_test::TempDir dir("llmc_rdv_");
    llmc::RendezvousOptions opt;
    opt.dir = dir.path.string();
    opt.job = "t";
    opt.timeout_s = 20;
    opt.poll_ms = 2;
    for (const std::vector<int>& delays : {std::vector<int>{0, 0, 0, 0}, {100, 0, 10, 30}, {0, 80, 40, 120}}) {
        const std::vector<char> payload = random_bytes(128, g);
        const auto res = run_ranks(opt, 4, payload, delays);
        for (int r = 0; r < 4; r++) {
            INFO("rank " << r << " delays " << delays[0] << "," << delays[1] << "," << delays[2] << "," << delays[3]);
            CHECK(res[r].error.empty());
            CHECK(res[r].bytes == payload);
        }
        CHECK(std::filesystem::is_empty(dir.path));  // rank 0 removed every file of the run
    }
}

TEST_CASE("file rendezvous: a stale id file from a crashed run is never taken", "[launch][rendezvous]") {
    std::mt19937_64 g(std::random_device{}());
    llmc_test::TempDir dir("llmc_rdv_");
    llmc::RendezvousOptions opt;
    opt.dir = dir.path.string();
    opt.job = "t";
    opt.poll_ms = 2;
    // A crashed run of the same job left its id, joins and acks: well-formed files with its nonces.
    const std::vector<char> stale = random_bytes(128, g);
    const std::vector<uint64_t> old_nonces = {g() | 1, g() | 1, g() | 1};
    const std::vector<char> id = llmc::rdv_detail::encode_id(4, stale, old_nonces);
    auto plant_stale = [&] {
        llmc::write_file_atomic(dir.file("rdv_t_id"), id.data(), id.size());
        for (int r = 1; r < 4; r++) {
            llmc::write_file_atomic(dir.file("rdv_t_join_" + std::to_string(r)), &old_nonces[r - 1], 8);
            llmc::write_file_atomic(dir.file("rdv_t_ack_" + std::to_string(r)), &old_nonces[r - 1], 8);
        }
    };
    SECTION("a rank whose rank 0 never comes times out instead of joining with the stale id") {
        plant_stale();
        opt.timeout_s = 0.3;
        std::vector<char> got;
        CHECK_THROWS_WITH(got = llmc::rendezvous_exchange(opt, 2, 4, {}),
                          Contains("rank 2 waited 0.3 s") && Contains("for rank 0 of this run"));
        CHECK(got.empty());
    }
    SECTION("with rank 0 starting last, the other ranks wait for the fresh id") {
        plant_stale();
        opt.timeout_s = 20;
        const std::vector<char> fresh = random_bytes(128, g);
        const auto res = run_ranks(opt, 4, fresh, {150, 0, 0, 0});
        for (int r = 0; r < 4; r++) {
            INFO("rank " << r);
            CHECK(res[r].error.empty());
            CHECK(res[r].bytes == fresh);
        }
    }
    SECTION("with rank 0 first, stale joins and acks are not counted as ranks that arrived") {
        plant_stale();
        opt.timeout_s = 20;
        const std::vector<char> fresh = random_bytes(128, g);
        const auto res = run_ranks(opt, 4, fresh, {0, 120, 60, 200});
        for (int r = 0; r < 4; r++) {
            INFO("rank " << r);
            CHECK(res[r].error.empty());
            CHECK(res[r].bytes == fresh);
        }
    }
}

TEST_CASE("file rendezvous: rank 0 names the ranks that never came", "[launch][rendezvous]") {
    llmc_test::TempDir dir("llmc_rdv_");
    llmc::RendezvousOptions opt;
    opt.dir = dir.path.string();
    opt.job = "t";
    opt.poll_ms = 2;
    opt.timeout_s = 0.3;
    std::vector<RankResult> res(3);
    std::thread one([&] {
        try {
            llmc::rendezvous_exchange(opt, 1, 3, {});
        } catch (const std::exception& e) { res[1].error = e.what(); }
    });
    CHECK_THROWS_WITH(llmc::rendezvous_exchange(opt, 0, 3, std::vector<char>(128, 'x')),
                      Contains("rank 0 waited 0.3 s") && Contains("for ranks 1 2") && !Contains("ranks 1 2 "));
    one.join();
    // rank 1 saw no id file written for it (rank 2 never joined), so it timed out too
    CHECK_THAT(res[1].error, Contains("rank 1 waited"));
    CHECK_THROWS_WITH(llmc::rendezvous_exchange(opt, 3, 3, {}), Contains("out of range"));
}
