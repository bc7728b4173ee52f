// Pure logic of data parallelism (no MPI needed): ZeRO-1 shard ranges, the launcher's
// environment (detect_launch), the single-process collective, ZeRO-1's sharded AdamW against
// the whole-vector update, the row-split data loader against a bigger batch, and the model
// FLOPs formula against a brute-force count. The multi-process runs are in test/test_mpi.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "llmc/dist/collective.h"
#include "llmc/core/adamw.h"
#include "llmc/io/dataloader.h"
#include "llmc/core/flops.h"
#include "llmc/io/shard.h"
#include "llmc/dist/zero.h"
#include "test/test_util.h"

using Catch::Matchers::Contains;

TEST_CASE("ZeRO-1 shards are contiguous, disjoint, cover the vector and have one padded size", "[collective]") {
    for (size_t n : {0ul, 1ul, 7ul, 8ul, 9ul, 1000003ul}) {
        for (int world : {1, 2, 3, 8, 13}) {
            INFO("n " << n << " world " << world);
            size_t next = 0;
            for (int r = 0; r < world; r++) {
                const llmc::ShardRange s = llmc::shard_range(n, r, world);
                REQUIRE(s.chunk == (n + world - 1) / world);
                REQUIRE(s.begin == next);
                REQUIRE(s.end >= s.begin);
                REQUIRE(s.size() <= s.chunk);
                if (s.end < n) REQUIRE(s.size() == s.chunk);  // only trailing shards are short
                next = s.end;
            }
            REQUIRE(next == n);
        }
    }
}

TEST_CASE("detect_launch reads flags, then mpirun, Slurm or PMI variables", "[collective]") {
    std::map<std::string, std::string> env;
    auto get = [&](const char* k) -> const char* {
        auto it = env.find(k);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    llmc::LaunchInfo li = llmc::detect_launch(-1, -1, -1, get);
    REQUIRE((li.rank == 0 && li.world_size == 1 && li.local_rank == 0));

    env = {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}};
    li = llmc::detect_launch(-1, -1, -1, get);
    REQUIRE((li.rank == 5 && li.world_size == 8 && li.local_rank == 1 && li.source == "Slurm"));

    env["OMPI_COMM_WORLD_RANK"] = "2";  // mpirun inside a Slurm allocation: mpirun's values win
    env["OMPI_COMM_WORLD_SIZE"] = "4";
    env["OMPI_COMM_WORLD_LOCAL_RANK"] = "2";
    li = llmc::detect_launch(-1, -1, -1, get);
    REQUIRE((li.rank == 2 && li.world_size == 4 && li.local_rank == 2));

    li = llmc::detect_launch(1, 2, 0, get);  // flags win
    REQUIRE((li.rank == 1 && li.world_size == 2 && li.local_rank == 0 && li.source == "flags"));

    env = {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}};
    li = llmc::detect_launch(-1, -1, -1, get);
    REQUIRE((li.rank == 3 && li.world_size == 4 && li.local_rank == 0));

    REQUIRE_THROWS_WITH(llmc::detect_launch(2, 2, -1, get), Contains("rank 2 of world size 2"));
    REQUIRE_THROWS_WITH(llmc::detect_launch(-1, 0, -1, get), Contains("--world-size"));
    env = {{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "2"}};
    REQUIRE_THROWS_WITH(llmc::detect_launch(-1, -1, -1, get), Contains("SLURM_PROCID='x1'"));
}

TEST_CASE("the single-process collective is the identity", "[collective]") {
    llmc::SingleProcessCollective c;
    std::vector<float> a = {1, 2, 3}, b(3, -1.0f);
    c.all_reduce(a.data(), 3, llmc::ReduceOp::Avg);
    REQUIRE(a == std::vector<float>{1, 2, 3});
    c.reduce_scatter(a.data(), b.data(), 3, llmc::ReduceOp::Sum);
    REQUIRE(b == a);
    std::fill(b.begin(), b.end(), -1.0f);
    c.all_gather(a.data(), b.data(), 3);
    REQUIRE(b == a);
    REQUIRE(c.all_reduce_double(2.5, llmc::ReduceOp::Sum) == 2.5);
    REQUIRE(c.all_reduce_int(-4, llmc::ReduceOp::Min) == -4);
}

// ZeRO-1 with one rank per "world" simulated shard by shard: the union of the shards' updates
// must equal the per-tensor AdamW of the backends (weight decay per tensor) bit for bit.
TEST_CASE("ZeRO-1's sharded AdamW equals the whole-vector update per tensor", "[collective]") {
    llmc::ModelConfig m;
    m.num_layers = 2;
    m.channels = 16;
    m.num_heads = 4;
    m.global_heads = 1;
    m.window = 3;
    m.max_seq_len = 8;
    m.vocab_size = 40;
    m.padded_vocab_size = llmc::pad_vocab(40);
    m.qk_norm = true;
    const llmc::ParamLayout lay = llmc::param_layout(m);
    const size_t n = lay.total;
    const uint32_t seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> p(n), g(n), mo(n), v(n);
    for (size_t i = 0; i < n; i++) {
        p[i] = nd(rng);
        g[i] = nd(rng);
        mo[i] = 0.1f * nd(rng);
        v[i] = std::abs(nd(rng));
    }
    llmc::AdamWHyper h;
    h.lr = 1e-2f;
    h.weight_decay = 0.3f;
    const int t = 3;
    const float mult = 0.7f;
    // reference: per tensor, as the CPU backend does
    std::vector<float> rp = p, rm = mo, rv = v;
    for (int id = 0; id < llmc::NUM_PARAM_TENSORS; id++) {
        const size_t off = lay.offset[id];
        llmc::adamw_update(rp.data() + off, g.data() + off, rm.data() + off, rv.data() + off, lay.size[id], h.lr,
                           h.beta1, h.beta2, h.eps, llmc::param_gets_weight_decay(id) ? h.weight_decay : 0.0f, t, mult);
    }
    for (int world : {1, 3, 7}) {
        std::vector<float> got(n, std::nanf(""));
        for (int r = 0; r < world; r++) {
            llmc::SingleProcessCollective one;  // a 1-rank all-gather returns this shard only
            llmc::Zero1Optimizer z(lay, r, world);
            z.load(p.data(), mo.data(), v.data(), nullptr);
            const llmc::ShardRange s = z.range();
            std::vector<float> gpad(z.padded_total(), 0.0f);
            std::copy(g.begin(), g.end(), gpad.begin());
            // a 1-rank "reduce-scatter" of this shard's block: feed the block directly
            const double sq = z.reduce_scatter_grads(one, gpad.data() + (size_t)r * s.chunk);
            double want = 0.0;
            for (size_t i = s.begin; i < s.end; i++) want += (double)g[i] * g[i];
            REQUIRE(sq == Approx(want).epsilon(1e-12));
            std::vector<float> shard_out(s.chunk, std::nanf(""));
            z.step_and_gather(one, h, t, mult, shard_out.data());
            std::copy(shard_out.begin(), shard_out.begin() + (long)s.size(), got.begin() + (long)s.begin);
        }
        for (size_t i = 0; i < n; i++) {
            INFO("world " << world << " element " << i);
            REQUIRE(got[i] == rp[i]);  // NaN never passes
        }
    }
}

TEST_CASE("row split: n ranks of B read exactly the rows 1 rank of n*B reads, shuffled, across epochs", "[loader]") {
    llmc_test::TempDir dir("llmc_rows_");
    const uint32_t seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    uint32_t next_tok = 0;
    for (int s = 0; s < 3; s++) {
        std::vector<uint32_t> toks(50 + rng() % 80);
        for (uint32_t& x : toks) x = next_tok++;
        llmc::write_shard(dir.file("train_00000" + std::to_string(s) + ".bin"), toks, 2);
    }
    const std::string glob = dir.file("train_*.bin");
    const int B = 2, T = 3, n = 3, V = (int)next_tok;
    for (bool shuffle : {false, true}) {
        const uint64_t s = rng();
        llmc::DataLoader big(glob, n * B, T, 0, 1, shuffle, s, V);
        std::vector<llmc::DataLoader> ranks;
        for (int r = 0; r < n; r++) ranks.emplace_back(glob, B, T, r, n, shuffle, s, V, llmc::RankSplit::Rows);
        REQUIRE(ranks[0].batches_per_epoch() == big.batches_per_epoch());
        for (int64_t step = 0; step < 2 * big.batches_per_epoch() + 1; step++) {
            std::vector<int> bx((size_t)n * B * T, -1), by(bx.size(), -1);
            big.next_batch(bx.data(), by.data());
            for (int r = 0; r < n; r++) {
                std::vector<int> x((size_t)B * T, -1), y(x.size(), -1);
                ranks[(size_t)r].next_batch(x.data(), y.data());
                INFO("shuffle " << shuffle << " step " << step << " rank " << r);
                REQUIRE(std::equal(x.begin(), x.end(), bx.begin() + (long)r * B * T));
                REQUIRE(std::equal(y.begin(), y.end(), by.begin() + (long)r * B * T));
            }
        }
    }
}

TEST_CASE("model FLOPs per token: attention counts exactly the unmasked pairs", "[flops]") {
    for (int T : {1, 5, 64, 100}) {
        for (int P : {1, 3, 50, 200}) {
            long pairs = 0;  // brute force: pairs (i, j) with max(0, i-P+1) <= j <= i
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) pairs += (i - j < P) ? 1 : 0;
            REQUIRE(llmc::mean_attended_keys(T, P) == Approx((double)pairs / T).epsilon(1e-12));
        }
    }
    llmc::ModelConfig m;  // ls-small: L 6, C 192, NH 6 (hd 32), G 1, P 50
    m.num_layers = 6;
    m.channels = 192;
    m.num_heads = 6;
    m.global_heads = 1;
    m.window = 50;
    m.vocab_size = 50257;
    m.padded_vocab_size = 50304;
    const int T = 2048;
    const double matmul = 2.0 * (12.0 * 192 * 192 * 6 + 192.0 * 50304);
    const double keys = 5 * llmc::mean_attended_keys(T, 50) + 1 * (T + 1) / 2.0;
    REQUIRE(llmc::flops_per_token(m, T) == Approx(3.0 * (matmul + 4.0 * 32 * keys * 6)).epsilon(1e-12));
    // all-global at the same shape costs more attention, never less
    llmc::ModelConfig g = m;
    g.global_heads = 6;
    REQUIRE(llmc::flops_per_token(g, T) > llmc::flops_per_token(m, T));
}
