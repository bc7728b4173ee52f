// Token shards (llmc/io/shard.h) and the data loader (llmc/io/dataloader.h): exact read-back, windows
// across shard boundaries, distributed split, shuffle, save/restore, reset, and every refusal.
// Expected batches are computed here from the tokens the test wrote, not from the loader.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "llmc/io/dataloader.h"
#include "llmc/io/shard.h"
#include "test/test_util.h"

using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct TempDir : llmc_test::TempDir {
    TempDir() : llmc_test::TempDir("llmc_loader_") {}
};

uint32_t fresh_seed() { return std::random_device{}(); }

// Writes a file of 256 int32 header words (rest zero) followed by `payload` raw bytes.
void write_raw(const std::string& path, int32_t magic, int32_t version, int32_t count, size_t payload) {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(header.data(), 4, header.size(), f);
    std::vector<char> zeros(payload, 0);
    if (payload > 0) std::fwrite(zeros.data(), 1, zeros.size(), f);  // (data() of an empty vector may be null: UB)
    std::fclose(f);
}

// Shards of the given sizes whose tokens are their index in the concatenation of all shards
// (unique, so each token identifies its position). Returns the concatenation.
std::vector<uint32_t> write_index_shards(const TempDir& dir, const std::vector<int>& sizes, int version = 2) {
    std::vector<uint32_t> all;
    for (size_t s = 0; s < sizes.size(); s++) {
        std::vector<uint32_t> toks;
        for (int i = 0; i < sizes[s]; i++) toks.push_back((uint32_t)all.size() + (uint32_t)i);
        char name[32];
        std::snprintf(name, sizeof(name), "train_%06zu.bin", s);
        llmc::write_shard(dir.file(name), toks, version);
        all.insert(all.end(), toks.begin(), toks.end());
    }
    return all;
}

struct Batch {
    std::vector<int> x, y;
    bool operator==(const Batch& o) const { return x == o.x && y == o.y; }
};

Batch next(llmc::DataLoader& dl, int B, int T) {
    Batch b{std::vector<int>((size_t)B * T, -1), std::vector<int>((size_t)B * T, -1)};
    dl.next_batch(b.x.data(), b.y.data());
    return b;
}

std::vector<Batch> take(llmc::DataLoader& dl, int B, int T, int64_t n) {
    std::vector<Batch> out;
    for (int64_t i = 0; i < n; i++) out.push_back(next(dl, B, T));
    return out;
}

}  // namespace

// --- shards ----------------------------------------------------------------------------------

TEST_CASE("shards of both versions read back exactly", "[shard]") {
    TempDir dir;
    const uint32_t seed = fresh_seed();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    for (int version : {1, 2}) {
        // the largest vocabulary each version can hold (version 2: the int vocabulary limit)
        const uint32_t vocab = version == 1 ? 65536u : (uint32_t)INT32_MAX;
        std::vector<uint32_t> toks(1 + rng() % 5000);
        for (auto& t : toks) t = rng() % vocab;
        toks[0] = vocab - 1;
        const std::string path = dir.file("s" + std::to_string(version) + ".bin");
        llmc::write_shard(path, toks, version);
        REQUIRE(fs::file_size(path) == 1024 + toks.size() * (version == 1 ? 2 : 4));
        const llmc::ShardHeader h = llmc::read_shard_header(path);
        REQUIRE(h.version == version);
        REQUIRE(h.num_tokens == (int64_t)toks.size());
        REQUIRE(llmc::read_shard_tokens(path, (int)vocab) == toks);
    }
}

TEST_CASE("a glob that catches a file other than a shard names the pattern and its fix", "[shard]") {
    TempDir dir;
    write_index_shards(dir, {300});
    write_raw(dir.file("tokenizer.bin"), 20240328, 2, 4, 8);  // not a shard's magic
    // a pattern wider than the shards: narrow it
    REQUIRE_THROWS_WITH(
        llmc::DataLoader(dir.file("*.bin"), 1, 8, 0, 1, false, 0, 1000),
        Contains("the shard pattern '" + dir.file("*.bin") + "' matches " + dir.file("tokenizer.bin")) &&
            Contains("give a pattern that matches only the shards, e.g. '" + dir.path.string() + "/train_*.bin'"));
    // the shards' own pattern (a new-user trial: it was suggested back): the file is a damaged shard
    write_raw(dir.file("train_000001.bin"), 777, 1, 4, 8);
    REQUIRE_THROWS_WITH(llmc::DataLoader(dir.file("train_*.bin"), 1, 8, 0, 1, false, 0, 1000),
                        Contains("which is not a token shard (bad magic 777") &&
                            Contains("): a damaged shard: regenerate it with data/prepare.py") &&
                            !Contains("give a pattern"));
}

TEST_CASE("malformed shards are refused naming the file, offset and fix", "[shard]") {
    TempDir dir;
    const std::string p = dir.file("bad.bin");
    SECTION("bad magic") {
        write_raw(p, 12345, 1, 4, 8);
        REQUIRE_THROWS_WITH(llmc::read_shard_header(p),
                            Contains(p) && Contains("bad magic 12345 at byte offset 0") && Contains("data/prepare.py"));
    }
    SECTION("unknown version") {
        write_raw(p, 20240520, 3, 4, 8);
        REQUIRE_THROWS_WITH(llmc::read_shard_header(p), Contains(p) && Contains("unknown version 3 at byte offset 4"));
    }
    SECTION("file shorter than the header count says") {
        write_raw(p, 20240520, 1, 100, 198);
        REQUIRE_THROWS_WITH(llmc::read_shard_header(p),
                            Contains(p) && Contains("file size 1222 bytes") && Contains("expected 1224 bytes"));
    }
    SECTION("file longer than the header count says") {
        write_raw(p, 20240520, 2, 10, 44);
        REQUIRE_THROWS_WITH(llmc::read_shard_header(p), Contains("file size 1068 bytes") && Contains("expected 1064"));
    }
    SECTION("zero tokens") {
        write_raw(p, 20240520, 1, 0, 0);
        REQUIRE_THROWS_WITH(llmc::read_shard_header(p),
                            Contains(p) && Contains("zero tokens") && Contains("byte offset 8"));
    }
    SECTION("shorter than the header") {
        FILE* f = std::fopen(p.c_str(), "wb");
        std::fwrite("abc", 1, 3, f);
        std::fclose(f);
        REQUIRE_THROWS_WITH(llmc::read_shard_header(p), Contains(p) && Contains("shorter than the 1024-byte header"));
    }
    SECTION("missing file") {
        REQUIRE_THROWS_WITH(llmc::read_shard_header(dir.file("nope.bin")),
                            Contains("cannot open shard") && Contains("nope.bin"));
    }
    SECTION("token id >= vocabulary names the token offset") {
        std::vector<uint32_t> toks(20, 7);
        toks[13] = 50;
        llmc::write_shard(p, toks, 1);
        REQUIRE(llmc::read_shard_tokens(p, 51) == toks);
        REQUIRE_THROWS_WITH(llmc::read_shard_tokens(p, 50),
                            Contains(p) && Contains("token id 50 at token offset 13 (byte offset 1050)") &&
                                Contains("vocabulary size 50"));
    }
    SECTION("write_shard refuses ids that do not fit version 1 and writes nothing") {
        REQUIRE_THROWS_WITH(llmc::write_shard(p, {1, 2, 70000}, 1),
                            Contains("token id 70000 at token offset 2") && Contains("version 2"));
        REQUIRE_FALSE(fs::exists(p));
        REQUIRE_THROWS_WITH(llmc::write_shard(p, {}, 1), Contains("0 tokens"));
        REQUIRE_THROWS_WITH(llmc::write_shard(p, {1}, 3), Contains("version 3"));
    }
}

// --- data loader -----------------------------------------------------------------------------

TEST_CASE("sequential batches are the windows of the concatenated shards, across boundaries", "[loader]") {
    TempDir dir;
    const uint32_t seed = fresh_seed();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const int B = 2, T = 6, BT = B * T, V = 1000;
    // 5 tokens < B*T+1: some window spans three shards
    const std::vector<int> sizes = {37, 5, 50, 23};
    std::vector<uint32_t> all;
    for (size_t s = 0; s < sizes.size(); s++) {
        std::vector<uint32_t> toks((size_t)sizes[s]);
        for (auto& t : toks) t = rng() % V;
        llmc::write_shard(dir.file("d_" + std::to_string(s) + ".bin"), toks, s % 2 ? 2 : 1);  // mixed versions
        all.insert(all.end(), toks.begin(), toks.end());
    }
    llmc::DataLoader dl(dir.file("d_*.bin"), B, T, 0, 1, false, 0, V);
    REQUIRE(dl.num_shards() == 4);
    REQUIRE(dl.total_tokens() == 115);
    const int64_t W = (115 - 1) / BT;  // 9 windows
    REQUIRE(dl.batches_per_epoch() == W);
    for (int epoch = 0; epoch < 3; epoch++) {  // wraps around to the first window
        for (int64_t w = 0; w < W; w++) {
            Batch b = next(dl, B, T);
            for (int i = 0; i < BT; i++) {
                REQUIRE(b.x[i] == (int)all[(size_t)(w * BT + i)]);
                REQUIRE(b.y[i] == (int)all[(size_t)(w * BT + i + 1)]);
            }
        }
        REQUIRE(dl.epoch() == epoch + 1);
    }
}

TEST_CASE("distributed ranks read disjoint windows that together cover the data", "[loader]") {
    TempDir dir;
    const uint32_t seed = fresh_seed();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    std::vector<int> sizes;
    for (int s = 0; s < 4; s++) sizes.push_back(10 + (int)(rng() % 60));
    const std::vector<uint32_t> all = write_index_shards(dir, sizes);
    const int B = 1, T = 4, BT = B * T, n = 3;
    const int64_t W = ((int64_t)all.size() - 1) / BT;
    std::set<int64_t> seen;
    for (int r = 0; r < n; r++) {
        llmc::DataLoader dl(dir.file("train_*.bin"), B, T, r, n, false, 0, (int)all.size());
        REQUIRE(dl.batches_per_epoch() == W / n);
        for (int epoch = 0; epoch < 2; epoch++) {
            for (int64_t i = 0; i < W / n; i++) {
                Batch b = next(dl, B, T);
                const int64_t start = b.x[0];
                REQUIRE(start == (r + i * n) * BT);  // llm.c-style interleaving
                for (int k = 0; k < BT; k++) {
                    REQUIRE(b.x[k] == start + k);
                    REQUIRE(b.y[k] == start + k + 1);
                }
                if (epoch == 0) REQUIRE(seen.insert(start / BT).second);  // disjoint across ranks
            }
        }
    }
    // together: every window except the last W mod n
    REQUIRE((int64_t)seen.size() == (W / n) * n);
    REQUIRE(*seen.rbegin() == (W / n) * n - 1);
}

TEST_CASE("shuffle is deterministic, differs by seed and epoch, and still tiles the data", "[loader]") {
    TempDir dir;
    const uint32_t seed = fresh_seed();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    std::vector<int> sizes;
    for (int s = 0; s < 5; s++) sizes.push_back(30 + (int)(rng() % 80));
    const std::vector<uint32_t> all = write_index_shards(dir, sizes);
    std::set<uint32_t> shard_first, shard_last;  // boundary tokens
    for (int s = 0, off = 0; s < 5; off += sizes[s], s++) {
        shard_first.insert((uint32_t)off);
        shard_last.insert((uint32_t)(off + sizes[s] - 1));
    }
    const int B = 2, T = 3, BT = B * T, V = (int)all.size();
    const int64_t W = ((int64_t)all.size() - 1) / BT;
    const std::string glob = dir.file("train_*.bin");
    const uint64_t s1 = rng(), s2 = s1 + 1;

    llmc::DataLoader a(glob, B, T, 0, 1, true, s1, V), a2(glob, B, T, 0, 1, true, s1, V);
    llmc::DataLoader b(glob, B, T, 0, 1, true, s2, V), plain(glob, B, T, 0, 1, false, 0, V);
    REQUIRE(a.batches_per_epoch() == W);
    const std::vector<Batch> ea0 = take(a, B, T, W), ea1 = take(a, B, T, W);
    const std::vector<Batch> eb0 = take(b, B, T, W), eplain = take(plain, B, T, W);
    REQUIRE((take(a2, B, T, W) == ea0 && take(a2, B, T, W) == ea1));  // same seed, same batches
    REQUIRE(ea0 != eb0);                                              // different seed
    REQUIRE(ea0 != ea1);                                              // different epoch
    REQUIRE(ea0 != eplain);

    for (const auto* epoch : {&ea0, &ea1, &eb0}) {
        std::set<int> inputs;
        for (const Batch& bt : *epoch) {
            // each window is a contiguous run of some shard order: +1 steps, or a jump from
            // the last token of a shard to the first token of another
            std::vector<int> run(bt.x);
            run.push_back(bt.y.back());
            for (int k = 0; k < BT; k++) REQUIRE(bt.y[k] == run[k + 1]);
            for (int k = 0; k + 1 <= BT; k++) {
                const bool step = run[k + 1] == run[k] + 1 && !shard_last.count((uint32_t)run[k]);
                const bool jump = shard_last.count((uint32_t)run[k]) && shard_first.count((uint32_t)run[k + 1]);
                REQUIRE((step || jump));
            }
            inputs.insert(bt.x.begin(), bt.x.end());
        }
        REQUIRE((int64_t)inputs.size() == W * BT);  // W disjoint windows: a tiling of the epoch
    }

    // Windows come grouped by the shard their first token lies in; the group order is the
    // epoch's shard order, which is shuffled too (identity in all three epochs: chance 1/120^3).
    bool some_order_shuffled = false;
    for (const auto* epoch : {&ea0, &ea1, &eb0}) {
        std::vector<int> groups;
        for (const Batch& bt : *epoch) {
            const int shard = (int)std::distance(shard_first.begin(), shard_first.upper_bound((uint32_t)bt.x[0])) - 1;
            if (groups.empty() || groups.back() != shard) groups.push_back(shard);
        }
        REQUIRE(groups.size() == 5);  // each shard one block
        REQUIRE(std::set<int>(groups.begin(), groups.end()).size() == 5);
        some_order_shuffled = some_order_shuffled || !std::is_sorted(groups.begin(), groups.end());
    }
    REQUIRE(some_order_shuffled);

    SECTION("ranks split the shuffled order like the unshuffled one") {
        const int n = 3;
        llmc::DataLoader one(glob, B, T, 0, 1, true, s1, V);
        const std::vector<Batch> order = take(one, B, T, 2 * W);  // two epochs of items
        for (int r = 0; r < n; r++) {
            llmc::DataLoader dl(glob, B, T, r, n, true, s1, V);
            REQUIRE(dl.batches_per_epoch() == W / n);
            for (int epoch = 0; epoch < 2; epoch++) {
                for (int64_t i = 0; i < W / n; i++) {
                    REQUIRE(next(dl, B, T) == order[(size_t)(epoch * W + r + i * n)]);
                }
            }
        }
    }
}

TEST_CASE("with one shard, shuffle permutes its windows anew each epoch", "[loader]") {
    TempDir dir;
    const std::vector<uint32_t> all = write_index_shards(dir, {200});
    const int B = 1, T = 3, W = 199 / 3;
    const uint64_t seed = fresh_seed();
    INFO("seed " << seed);
    llmc::DataLoader dl(dir.file("train_*.bin"), B, T, 0, 1, true, seed, (int)all.size());
    std::vector<int> starts[2];
    for (int e = 0; e < 2; e++) {
        for (const Batch& b : take(dl, B, T, W)) starts[e].push_back(b.x[0]);
    }
    REQUIRE(starts[0] != starts[1]);
    for (auto& s : starts) {
        REQUIRE_FALSE(std::is_sorted(s.begin(), s.end()));
        std::sort(s.begin(), s.end());
        for (int w = 0; w < W; w++) REQUIRE(s[(size_t)w] == w * T);  // a permutation of the windows
    }
}

TEST_CASE("a restored loader yields exactly the batches of an uninterrupted one", "[loader]") {
    TempDir dir;
    const uint32_t seed = fresh_seed();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    std::vector<int> sizes;
    for (int s = 0; s < 4; s++) sizes.push_back(20 + (int)(rng() % 50));
    const std::vector<uint32_t> all = write_index_shards(dir, sizes, 1);
    const int B = 2, T = 2, V = (int)all.size(), n = 3;
    const std::string glob = dir.file("train_*.bin");
    for (bool shuffle : {false, true}) {
        for (int r = 0; r < n; r++) {
            INFO("shuffle " << shuffle << " rank " << r);
            llmc::DataLoader run(glob, B, T, r, n, shuffle, 99, V);
            const int64_t k = (int64_t)(rng() % (3 * run.batches_per_epoch()));  // may cross epochs
            const int64_t m = 2 * run.batches_per_epoch() + 1;
            take(run, B, T, k);
            const std::vector<int64_t> saved = run.state().to_vector();
            const std::vector<Batch> expect = take(run, B, T, m);

            llmc::DataLoader resumed(glob, B, T, r, n, shuffle, 99, V);
            take(resumed, B, T, 1);  // some unrelated position first
            resumed.restore(llmc::LoaderState::from_vector(saved));
            REQUIRE(take(resumed, B, T, m) == expect);
        }
    }
    SECTION("a state from a different loader or a corrupt vector is refused") {
        llmc::DataLoader a(glob, 2, 2, 0, 1, true, 5, V);
        llmc::DataLoader other_b(glob, 1, 2, 0, 1, true, 5, V), other_seed(glob, 2, 2, 0, 1, true, 6, V);
        REQUIRE_THROWS_WITH(other_b.restore(a.state()),
                            Contains("B=2 T=2") && Contains("B=1 T=2") && Contains("resume with the same"));
        REQUIRE_THROWS_WITH(other_seed.restore(a.state()), Contains("seed=5") && Contains("seed=6"));
        std::vector<int64_t> v = a.state().to_vector();
        v.pop_back();
        REQUIRE_THROWS_WITH(llmc::LoaderState::from_vector(v), Contains("has 9 values") && Contains("corrupt"));
        llmc::LoaderState s = a.state();
        s.batch = a.batches_per_epoch();
        REQUIRE_THROWS_WITH(a.restore(s), Contains("corrupt"));
    }
}

TEST_CASE("reset returns to the first batch", "[loader]") {
    TempDir dir;
    const std::vector<uint32_t> all = write_index_shards(dir, {40, 33, 17});
    const std::string glob = dir.file("train_*.bin");
    for (bool shuffle : {false, true}) {
        llmc::DataLoader dl(glob, 2, 4, 1, 2, shuffle, 7, (int)all.size());
        llmc::DataLoader fresh(glob, 2, 4, 1, 2, shuffle, 7, (int)all.size());
        take(dl, 2, 4, dl.batches_per_epoch() + 3);
        dl.reset();
        REQUIRE(dl.epoch() == 0);
        REQUIRE(take(dl, 2, 4, 2 * dl.batches_per_epoch()) == take(fresh, 2, 4, 2 * fresh.batches_per_epoch()));
    }
}

TEST_CASE("the loader refuses bad input with a clear error", "[loader]") {
    TempDir dir;
    SECTION("glob matching nothing") {
        const std::string pat = dir.file("train_*.bin");
        REQUIRE_THROWS_WITH(llmc::DataLoader(pat, 1, 4, 0, 1, false, 0, 100),
                            Contains("no files match") && Contains(pat) && Contains("data/prepare.py"));
    }
    SECTION("glob matching a directory") {
        fs::create_directories(dir.file("train_dir"));
        const std::string named = "matches the directory '" + dir.file("train_dir") + "/'";
        const std::string fix =
            "e.g. '" + dir.file("train_dir") + "/train_*.bin' or '" + dir.file("train_dir") + "/val_*.bin'";
        REQUIRE_THROWS_WITH(llmc::DataLoader(dir.file("train_*"), 1, 4, 0, 1, false, 0, 100),
                            Contains(named) && Contains(fix));
        // the check every reader of a data set's identity makes first (read_data_identity), with the same line
        REQUIRE_THROWS_WITH(llmc::refuse_directory_match(dir.file("train_dir")), Contains(named) && Contains(fix));
        // written with a trailing slash, as a shell's completion leaves it
        REQUIRE_THROWS_WITH(llmc::refuse_directory_match(dir.file("train_dir/")), Contains(named) && Contains(fix));
        write_index_shards(dir, {30});
        // a pattern matching shards and the directory beside them: refused, not read with the shards
        REQUIRE_THROWS_WITH(llmc::refuse_directory_match(dir.file("train_*")), Contains(named));
        REQUIRE_THROWS_WITH(llmc::DataLoader(dir.file("train_*"), 1, 4, 0, 1, false, 0, 100), Contains(named));
        REQUIRE_NOTHROW(llmc::refuse_directory_match(dir.file("train_0*.bin")));
        REQUIRE_NOTHROW(llmc::refuse_directory_match(dir.file("nothing_*.bin")));  // the loader names it
    }
    SECTION("a malformed shard among good ones is named at construction") {
        write_index_shards(dir, {30, 30});
        const std::string bad = dir.file("train_000002.bin");
        SECTION("bad magic") {
            write_raw(bad, 7, 1, 3, 6);
            REQUIRE_THROWS_WITH(llmc::DataLoader(dir.file("train_*.bin"), 1, 4, 0, 1, false, 0, 100),
                                Contains(bad) && Contains("bad magic 7"));
        }
        SECTION("unknown version") {
            write_raw(bad, 20240520, 0, 3, 6);
            REQUIRE_THROWS_WITH(llmc::DataLoader(dir.file("train_*.bin"), 1, 4, 0, 1, false, 0, 100),
                                Contains(bad) && Contains("unknown version 0"));
        }
        SECTION("size mismatch") {
            write_raw(bad, 20240520, 2, 3, 6);
            REQUIRE_THROWS_WITH(llmc::DataLoader(dir.file("train_*.bin"), 1, 4, 0, 1, false, 0, 100),
                                Contains(bad) && Contains("does not match"));
        }
        SECTION("zero tokens") {
            write_raw(bad, 20240520, 1, 0, 0);
            REQUIRE_THROWS_WITH(llmc::DataLoader(dir.file("train_*.bin"), 1, 4, 0, 1, false, 0, 100),
                                Contains(bad) && Contains("zero tokens"));
        }
    }
    SECTION("token id >= vocabulary, checked when its shard is loaded") {
        write_index_shards(dir, {30, 30});  // ids 0..59
        llmc::DataLoader dl(dir.file("train_*.bin"), 1, 4, 0, 1, false, 0, 45);
        take(dl, 1, 4, 7);  // windows 0..6 read tokens 0..28 of the first shard only
        REQUIRE_THROWS_WITH(next(dl, 1, 4), Contains(dir.file("train_000001.bin")) &&
                                                Contains("token id 45 at token offset 15 (byte offset 1084)") &&
                                                Contains("vocabulary size 45"));
    }
    SECTION("too few tokens for one B*T+1 window per rank") {
        write_index_shards(dir, {10, 6});  // 16 tokens
        const std::string pat = dir.file("train_*.bin");
        REQUIRE_THROWS_WITH(llmc::DataLoader(pat, 4, 4, 0, 1, false, 0, 100), Contains(pat) && Contains("16 tokens") &&
                                                                                  Contains("B*T+1 = 17") &&
                                                                                  Contains("smaller -b/-t"));
        REQUIRE(llmc::DataLoader(pat, 3, 5, 0, 1, false, 0, 100).batches_per_epoch() == 1);  // 16 = 15 + 1 fits
        REQUIRE(llmc::DataLoader(pat, 1, 5, 2, 3, false, 0, 100).batches_per_epoch() == 1);
        REQUIRE_THROWS_WITH(llmc::DataLoader(pat, 1, 6, 2, 3, false, 0, 100),
                            Contains("for each of 3 rank(s)") && Contains("need at least 19"));
    }
    SECTION("bad batch shape or rank") {
        write_index_shards(dir, {30});
        const std::string pat = dir.file("train_*.bin");
        REQUIRE_THROWS_WITH(llmc::DataLoader(pat, 0, 4, 0, 1, false, 0, 100), Contains("B=0"));
        REQUIRE_THROWS_WITH(llmc::DataLoader(pat, 1, 4, 3, 3, false, 0, 100), Contains("rank 3 of 3"));
        REQUIRE_THROWS_WITH(llmc::DataLoader(pat, 1, 4, 0, 1, false, 0, 0), Contains("vocabulary size 0"));
    }
}

// --- random rows (--sampler random) ------------------------------------------------------------

namespace {
// splitmix64's finalizer of a + golden * (b + 1), written from docs/dataloader.md "Random rows".
uint64_t doc_mix(uint64_t a, uint64_t b) {
    uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
}  // namespace

TEST_CASE("glob_dir: a wildcard directory is the one its shards are in; several are refused", "[loader]") {
    TempDir dir;
    fs::create_directories(dir.file("set_a"));
    fs::create_directories(dir.file("set_b"));
    llmc::write_shard(dir.file("set_a/train_000000.bin"), {1, 2, 3}, 1);
    llmc::write_shard(dir.file("set_b/val_000000.bin"), {1, 2, 3}, 1);
    CHECK(llmc::glob_dir(dir.file("set_a/train_*.bin")) == dir.file("set_a"));  // no wildcard: as written
    CHECK(llmc::glob_dir(dir.file("set_?/train_*.bin")) == dir.file("set_a"));  // only set_a has train shards
    CHECK(llmc::glob_dir(dir.file("*/val_*.bin")) == dir.file("set_b"));
    CHECK(llmc::glob_dir(dir.file("nothing_*/train_*.bin")) == dir.file("nothing_*"));  // the loader names the miss
    CHECK(llmc::glob_dir("train_*.bin") == ".");
    llmc::write_shard(dir.file("set_b/train_000000.bin"), {1, 2, 3}, 1);
    REQUIRE_THROWS_WITH(llmc::glob_dir(dir.file("set_?/train_*.bin")),
                        Contains("matches shards in 2 directories (" + dir.file("set_a") + ", " + dir.file("set_b")) &&
                            Contains("a glob reads one data set"));
}

TEST_CASE("random rows: each row starts at the documented offset, across shard boundaries", "[loader]") {
    TempDir dir;
    const uint32_t seed = fresh_seed();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    std::vector<int> sizes;
    for (int s = 0; s < 5; s++) sizes.push_back(7 + (int)(rng() % 40));  // rows of T+1 often straddle two
    const std::vector<uint32_t> all = write_index_shards(dir, sizes, 1);
    const int B = 3, T = 5, V = (int)all.size();
    const uint64_t data_seed = rng();
    llmc::DataLoader dl(dir.file("train_*.bin"), B, T, 0, 1, true, data_seed, V, llmc::RankSplit::Rows, true);
    const int64_t N = (int64_t)all.size(), steps = 3 * dl.batches_per_epoch() + 2;  // over epoch ends
    int straddling = 0;
    for (int64_t k = 0; k < steps; k++) {
        const Batch b = next(dl, B, T);
        for (int r = 0; r < B; r++) {
            const uint64_t o =
                doc_mix(doc_mix(data_seed ^ 0x52414E44524F5753ull, (uint64_t)k), (uint64_t)r) % (uint64_t)(N - T);
            for (int i = 0; i < T; i++) {
                INFO("batch " << k << " row " << r << " i " << i);
                REQUIRE(b.x[(size_t)(r * T + i)] == (int)all[o + (uint64_t)i]);
                REQUIRE(b.y[(size_t)(r * T + i)] == (int)all[o + (uint64_t)i + 1]);
            }
            int64_t start = 0;
            for (int s : sizes) {
                if ((int64_t)o < start + s && (int64_t)o + T >= start + s) straddling++;
                start += s;
            }
        }
    }
    REQUIRE(straddling > 0);  // the boundary path ran
}

TEST_CASE("random rows: n ranks x B = 1 rank x nB, and a restored loader continues them", "[loader]") {
    TempDir dir;
    const uint32_t seed = fresh_seed();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const std::vector<uint32_t> all = write_index_shards(dir, {300, 211}, 2);
    const int B = 2, T = 4, n = 3, V = (int)all.size();
    const std::string glob = dir.file("train_*.bin");
    llmc::DataLoader one(glob, n * B, T, 0, 1, false, 42, V, llmc::RankSplit::Rows, true);
    std::vector<std::unique_ptr<llmc::DataLoader>> ranks;
    for (int r = 0; r < n; r++)
        ranks.push_back(
            std::make_unique<llmc::DataLoader>(glob, B, T, r, n, false, 42, V, llmc::RankSplit::Rows, true));
    for (int k = 0; k < 2 * (int)one.batches_per_epoch() + 3; k++) {
        const Batch whole = next(one, n * B, T);
        for (int r = 0; r < n; r++) {
            const Batch part = next(*ranks[(size_t)r], B, T);
            const auto at = (std::ptrdiff_t)r * B * T;
            REQUIRE(std::vector<int>(whole.x.begin() + at, whole.x.begin() + at + B * T) == part.x);
            REQUIRE(std::vector<int>(whole.y.begin() + at, whole.y.begin() + at + B * T) == part.y);
        }
    }
    llmc::DataLoader run(glob, B, T, 1, n, false, 42, V, llmc::RankSplit::Rows, true);
    take(run, B, T, (int64_t)(rng() % 50));
    const llmc::LoaderState saved = run.state();
    const std::vector<Batch> expect = take(run, B, T, 20);
    llmc::DataLoader resumed(glob, B, T, 1, n, false, 42, V, llmc::RankSplit::Rows, true);
    resumed.restore(saved);
    REQUIRE(take(resumed, B, T, 20) == expect);
    // a windows loader cannot continue a random-rows state, nor the other way round
    llmc::DataLoader windows(glob, B, T, 1, n, false, 42, V, llmc::RankSplit::Rows);
    REQUIRE_THROWS_WITH(windows.restore(saved),
                        Contains("sampler=random") && Contains("shuffle=0") && Contains("sampler"));
    REQUIRE_THROWS_WITH(resumed.restore(windows.state()), Contains("sampler=random"));
}
