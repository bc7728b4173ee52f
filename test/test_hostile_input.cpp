// Hostile input (docs/reliability.md): the readers of user files refuse absurd sizes before
// allocating, and the bugs the fuzzers (test/fuzz/) found stay fixed. The resource-limit tests run
// the reader in a child process whose data segment may grow by at most 256 MB (RLIMIT_DATA): a
// reader that allocates what the header claims dies there (std::bad_alloc, or an ASan out-of-memory
// report) instead of answering with its one-line llmc::InputError.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llmc/text/bpe_encoder.h"
#include "llmc/io/checkpoint.h"
#include "llmc/core/error.h"
#include "llmc/app/cli.h"
#include "llmc/train/logit_alarm.h"
#include "llmc/core/model_config.h"
#include "llmc/io/json_text.h"
#include "llmc/io/shard.h"
#include "llmc/train/spikes.h"
#include "llmc/text/tokenizer.h"
#include "llmc/train/train_loop.h"
#include "test/test_util.h"

using Catch::Matchers::Contains;
using llmc::InputError;

namespace {

void write_file(const std::string& path, const std::vector<unsigned char>& bytes) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    REQUIRE(std::fclose(f) == 0);
}

// A 1024-byte header of 256 32-bit words (the first ones given), then `payload` zero bytes.
std::vector<unsigned char> header_file(const std::vector<uint32_t>& words, size_t payload = 0) {
    std::vector<unsigned char> out(1024 + payload, 0);
    std::memcpy(out.data(), words.data(), words.size() * 4);
    return out;
}

struct Outcome {
    enum Kind { kInputError, kReturned, kBadAlloc, kOtherException, kDied } kind;
    std::string message;  // InputError's what()
};

// Runs fn in a child process whose data segment may grow by at most `limit` bytes past its size now.
Outcome run_with_memory_limit(size_t limit, const std::function<void()>& fn) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(fds[0]);
        long data_kb = 0;
        std::ifstream status("/proc/self/status");
        for (std::string line; std::getline(status, line);)
            if (line.rfind("VmData:", 0) == 0) data_kb = std::stol(line.substr(7));
        const rlim_t cap = (rlim_t)data_kb * 1024 + limit;
        const rlimit lim{cap, cap};
        if (data_kb <= 0 || ::setrlimit(RLIMIT_DATA, &lim) != 0) ::_exit(90);
        int code = Outcome::kReturned;
        std::string msg;
        try {
            fn();
        } catch (const InputError& e) {
            code = Outcome::kInputError;
            msg = e.what();
        } catch (const std::bad_alloc&) { code = Outcome::kBadAlloc; } catch (...) {
            code = Outcome::kOtherException;
        }
        if (!msg.empty() && ::write(fds[1], msg.data(), msg.size()) < 0) code = Outcome::kOtherException;
        ::_exit(code);
    }
    ::close(fds[1]);
    std::string msg;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, (size_t)n);
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 90));  // the limit could not be set
    if (!WIFEXITED(status) || WEXITSTATUS(status) > Outcome::kOtherException) return {Outcome::kDied, msg};
    return {(Outcome::Kind)WEXITSTATUS(status), msg};
}

constexpr size_t kLimit = 256u << 20;

void require_refused(const Outcome& o, const std::string& what) {
    INFO("outcome " << (int)o.kind << " (0 InputError, 1 returned, 2 bad_alloc, 3 other exception, 4 died)");
    REQUIRE(o.kind == Outcome::kInputError);
    REQUIRE_THAT(o.message, Contains(what));
    REQUIRE(o.message.find('\n') == std::string::npos);  // one line
}

std::vector<uint32_t> model_header(uint32_t magic, uint32_t version, const llmc::ModelConfig& c) {
    std::vector<uint32_t> h(20, 0);
    h[0] = magic;
    h[1] = version;
    h[2] = (uint32_t)c.max_seq_len;
    h[3] = (uint32_t)c.vocab_size;
    h[4] = (uint32_t)c.num_layers;
    h[5] = (uint32_t)c.num_heads;
    h[6] = (uint32_t)c.channels;
    h[7] = (uint32_t)c.padded_vocab_size;
    h[8] = (uint32_t)c.global_heads;
    h[9] = (uint32_t)c.window;
    h[10] = c.qk_norm;
    h[11] = c.tied_embeddings;
    return h;
}

// A model whose parameter count, 12 L C^2 + 13 L C + (Vp + maxT + 2) C, is exactly 2^64: the size_t
// count of llmc/core/params.h wraps around to 0, so a 1024-byte file "matches" it.
llmc::ModelConfig wrapping_model() {
    llmc::ModelConfig c;
    c.num_layers = 991146312;  // a multiple of 4: 12 L C^2 = 3 L 2^62 is a multiple of 2^64
    c.channels = 1 << 30;
    c.num_heads = 1;
    c.global_heads = 1;
    c.window = 1;
    c.vocab_size = 2;
    c.padded_vocab_size = 2147483520;
    c.max_seq_len = 2147483606;  // Vp + maxT + 13 L + 2 = 2^34, and 2^34 C = 2^64
    c.tied_embeddings = true;
    c.qk_norm = false;
    return c;
}

// The naive byte-pair merge (rescan every pair after each merge: quadratic) that
// Gpt2BpeEncoder::encode_piece replaced: ids for one pre-tokenized piece, rank = id.
std::vector<int> naive_bpe(const std::unordered_map<std::string, int>& ranks, const std::string& piece) {
    auto rank = [&](size_t a, size_t b) {
        auto it = ranks.find(piece.substr(a, b - a));
        return it == ranks.end() ? -1 : it->second;
    };
    if (rank(0, piece.size()) >= 0) return {rank(0, piece.size())};
    std::vector<size_t> start(piece.size() + 1);
    for (size_t k = 0; k < start.size(); k++) start[k] = k;
    for (;;) {
        size_t best = SIZE_MAX;
        int best_rank = -1;
        for (size_t k = 0; k + 2 < start.size(); k++) {
            const int r = rank(start[k], start[k + 2]);
            if (r >= 0 && (best == SIZE_MAX || r < best_rank)) {
                best = k;
                best_rank = r;
            }
        }
        if (best == SIZE_MAX) break;
        start.erase(start.begin() + (std::ptrdiff_t)best + 1);
    }
    std::vector<int> ids;
    for (size_t k = 0; k + 1 < start.size(); k++) ids.push_back(rank(start[k], start[k + 1]));
    return ids;
}

int parse_config_text(llmc::TrainCli& cli, const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
    const char* argv[] = {"train_gpt2_ls", "--config", path.c_str()};
    return cli.parse(3, argv);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// resource limits: refused before allocating

TEST_CASE("a shard header claiming 2^31 - 1 or 2^31 tokens is refused before its tokens are allocated", "[hostile]") {
    llmc_test::TempDir dir;
    const std::string p = dir.file("big.bin");
    write_file(p, header_file({20240520u, 2u, (uint32_t)INT32_MAX}, 400));  // 100 tokens present
    require_refused(run_with_memory_limit(kLimit, [&] { llmc::read_shard_tokens(p, 50257); }),
                    "does not match the header's 2147483647 version-2 tokens");
    write_file(p, header_file({20240520u, 1u, 0x80000000u}, 200));
    require_refused(run_with_memory_limit(kLimit, [&] { llmc::read_shard_tokens(p, 50257); }),
                    "header token count 2147483648 at byte offset 8 is over the limit of 2^31-1 tokens");
}

TEST_CASE("a tokenizer.bin claiming a vocabulary of 2^30 (or 2^31 - 1) is refused before allocating it", "[hostile]") {
    llmc_test::TempDir dir;
    const std::string p = dir.file("tokenizer.bin");
    for (uint32_t V : {1u << 30, (uint32_t)INT32_MAX, 1u << 24}) {
        std::vector<unsigned char> f = header_file({20240328u, 2u, V, 0u});
        for (int i = 0; i < 300; i++) {
            f.push_back(1);
            f.push_back('a');
        }
        write_file(p, f);
        require_refused(run_with_memory_limit(kLimit, [&] { llmc::Tokenizer t(p); }),
                        "vocabulary size " + std::to_string(V) + " at byte offset 8 needs at least " +
                            std::to_string(V) + " bytes of token records but the file has 600");
    }
}

TEST_CASE("a model file or llm.c checkpoint whose header needs terabytes is refused before allocating", "[hostile]") {
    llmc_test::TempDir dir;
    const std::string p = dir.file("model.bin");
    llmc::ModelConfig c;  // 48 layers of width 8192: 3.9e10 parameters, a 155 GB file; this one has 1 KB
    c.num_layers = 48;
    c.channels = 8192;
    c.num_heads = 64;
    c.global_heads = 64;
    c.window = 8;
    c.max_seq_len = 1024;
    c.vocab_size = 50257;
    c.padded_vocab_size = 50304;
    std::vector<uint32_t> h = model_header(llmc::MODEL_MAGIC, 1, c);
    const uint64_t n = llmc::param_layout(c).total;
    h[14] = (uint32_t)n;
    h[15] = (uint32_t)(n >> 32);
    write_file(p, header_file(h, 1024));
    require_refused(run_with_memory_limit(kLimit, [&] { llmc::load_model_checkpoint(p); }),
                    "bytes but its header describes " + std::to_string(1024 + n * 4));
    write_file(p, header_file(model_header(llmc::LLMC_MAGIC, 5, c), 1024));
    require_refused(run_with_memory_limit(kLimit, [&] { llmc::load_model_checkpoint(p); }),
                    "bytes but its header describes " + std::to_string(1024 + n * 2));

    c.num_layers = 1000;
    c.channels = 65536;
    c.num_heads = 1;
    c.global_heads = 1;  // 5e13 parameters
    write_file(p, header_file(model_header(llmc::MODEL_MAGIC, 1, c), 1024));
    require_refused(run_with_memory_limit(kLimit, [&] { llmc::load_model_checkpoint(p); }),
                    "more than the 2^40 this trainer supports");
}

TEST_CASE("a checkpoint header whose parameter count wraps around 2^64 is refused", "[hostile]") {
    // Found in review of the fuzzers' invariants (test/fuzz/regressions/{checkpoint,llmc_checkpoint}/
    // param_count_wraps_to_zero.bin): the count wrapped to 0, the 1024-byte file matched it and loaded
    // as a model of 991146312 layers with no parameters.
    const llmc::ModelConfig c = wrapping_model();
    REQUIRE_THAT(llmc::validate_model_config(c), Contains("more than the 2^40 this trainer supports"));
    llmc_test::TempDir dir;
    const std::string p = dir.file("model.bin");
    std::vector<uint32_t> h = model_header(llmc::MODEL_MAGIC, 1, c);
    h[16] = (uint32_t)llmc::FNV1A64_OFFSET;  // checksum of the empty payload, count 0
    h[17] = (uint32_t)(llmc::FNV1A64_OFFSET >> 32);
    write_file(p, header_file(h));
    REQUIRE_THROWS_WITH(llmc::load_model_checkpoint(p), Contains("corrupt header") && Contains("2^40"));
    write_file(p, header_file(model_header(llmc::LLMC_MAGIC, 3, c)));
    REQUIRE_THROWS_WITH(llmc::load_model_checkpoint(p), Contains("invalid model") && Contains("2^40"));
}

TEST_CASE("--vocab 2^31 - 1 is refused instead of overflowing its padding", "[hostile]") {
    llmc::ModelConfig c;
    c.vocab_size = INT32_MAX;
    c.padded_vocab_size = llmc::pad_vocab(c.vocab_size);
    REQUIRE(c.padded_vocab_size == INT32_MAX);  // unpadded, not wrapped to a negative number
    REQUIRE_THAT(llmc::validate_model_config(c), Contains("--vocab 2147483647 is too large: at most 2147483520"));
    REQUIRE(llmc::pad_vocab(llmc::kMaxVocab) == llmc::kMaxVocab);
    REQUIRE(llmc::pad_vocab(llmc::kMaxVocab - 127) == llmc::kMaxVocab);
}

// ---------------------------------------------------------------------------------------------
// training state: the loop's sections (fuzz_train_state)

TEST_CASE("spike-detector state with NaN, fractional or out-of-range numbers is refused", "[hostile]") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const std::vector<std::vector<double>> bad = {
        {3, nan, 0, 1, 2, 3},    // count NaN (test/fuzz/regressions/train_state/spike_window_nan_count.bin)
        {nan, 3, 0, 1, 2, 3},    // window NaN
        {3.5, 3, 0, 1, 2, 3},    // window 3.5 (was read as 3)
        {3, 2.5, 0, 1, 2, 3},    // fractional count
        {3, 1e300, 0, 1, 2, 3},  // count beyond int
        {3, 3, -1e300, 1, 2, 3}, {3, 3, 0, 1, nan, 3},  // a non-finite value never enters the window
        {3, 3, 0, inf, 2, 3},
    };
    for (const auto& v : bad) {
        llmc::SpikeDetector d(3);
        INFO("state " << v[0] << " " << v[1] << " " << v[2] << " " << v[3] << " " << v[4] << " " << v[5]);
        REQUIRE_THROWS_AS(d.from_vector(v, 0), InputError);
    }
    llmc::SpikeDetector d(3);
    REQUIRE(d.from_vector({3, 2, 2, 1.5, 2.5, 0}, 0) == 6);
    REQUIRE(d.count() == 2);
    REQUIRE_THROWS_WITH(llmc::SpikeDetector(4).from_vector({3, 2, 2, 1.5, 2.5, 0}, 0),
                        Contains("has window 3, this run uses --spike-window 4"));
}

TEST_CASE("logit-alarm state with pinned steps that are not ascending integers is refused", "[hostile]") {
    llmc::LogitAlarmConfig ac;
    ac.window = 2;
    const double tag = llmc::LogitAlarm::kStateTag;
    for (const std::vector<double>& steps : std::vector<std::vector<double>>{
             {2.5}, {1e300}, {-3}, {0}, {std::numeric_limits<double>::quiet_NaN()}, {5, 5}, {7, 3}}) {
        std::vector<double> v = {tag, 2, 0, 0, 0, 0, (double)steps.size()};
        v.insert(v.end(), steps.begin(), steps.end());
        llmc::LogitAlarm a(ac);
        INFO("first step " << steps[0]);
        REQUIRE_THROWS_WITH(a.from_vector(v, 0), Contains("logit-alarm state in the checkpoint is corrupt"));
    }
    llmc::LogitAlarm fractional(ac);
    REQUIRE_THROWS_WITH(fractional.from_vector({tag, 2, 0, 0, 0, 0, 1.5, 3, 9}, 0), Contains("corrupt"));
    llmc::LogitAlarm a(ac);
    REQUIRE(a.from_vector({tag, 2, 0, 0, 0, 0, 2, 3, 9}, 0) == 9);
    REQUIRE(a.checkpoint_steps() == std::vector<int>{3, 9});
}

// ---------------------------------------------------------------------------------------------
// the --config file (fuzz_config)

TEST_CASE("--config: qk-norm=false and untie-embeddings=false, as config.toml writes them, mean off", "[hostile]") {
    // Found by fuzz_config's round trip (test/fuzz/regressions/config/minimal_qk_norm_flag_round_trip.toml):
    // config.toml lists every flag, "qk-norm=false" counted as given, and --config on a run's
    // config.toml turned QK-norm and untied embeddings on.
    llmc_test::TempDir dir;
    llmc::TrainCli cli;
    REQUIRE(parse_config_text(cli, dir.file("a.toml"), "qk-norm=false\nuntie-embeddings=false\n") == -1);
    REQUIRE_FALSE(cli.config().overrides.qk_norm);
    REQUIRE_FALSE(cli.config().overrides.untie_embeddings);
    llmc::TrainCli on;
    REQUIRE(parse_config_text(on, dir.file("b.toml"), "qk-norm=true\nuntie-embeddings=1\n") == -1);
    REQUIRE(on.config().overrides.qk_norm);
    REQUIRE(on.config().overrides.untie_embeddings);

    llmc::TrainCli first;  // a run's config.toml read back gives the same settings
    const char* argv[] = {"train_gpt2_ls", "-i", "x", "--layers", "2", "--attn-softcap", "30"};
    REQUIRE(first.parse(7, argv) == -1);
    llmc::TrainCli again;
    REQUIRE(parse_config_text(again, dir.file("config.toml"), first.config_file_text()) == -1);
    const llmc::ModelOverrides& o = again.config().overrides;
    REQUIRE_FALSE(o.qk_norm);
    REQUIRE_FALSE(o.untie_embeddings);
    REQUIRE(o.layers == 2);
    REQUIRE(o.attn_softcap == 30.0f);
    REQUIRE_FALSE(o.channels);
    REQUIRE(again.config_file_text() == first.config_file_text());
}

TEST_CASE("--config and flags: an empty value for a number is refused, not read as 0", "[hostile]") {
    // Found by fuzz_config (test/fuzz/regressions/config/empty_value_learning_rate.toml): "learning-rate="
    // gave a learning rate of 0 and config.toml then left the flag out.
    llmc_test::TempDir dir;
    for (const char* line : {"learning-rate=", "seq-len=", "seed=", "layers=", "learning-rate=#0.0006"}) {
        llmc::TrainCli cli;
        INFO(line);
        REQUIRE(parse_config_text(cli, dir.file("c.toml"), std::string("train-data=\"x\"\n") + line + "\n") == 1);
    }
    llmc::TrainCli flags;
    const char* argv[] = {"train_gpt2_ls", "-l", ""};
    REQUIRE(flags.parse(3, argv) == 1);
    llmc::TrainCli text;  // an empty string is still a value for a text option (-o '' = write nothing)
    REQUIRE(parse_config_text(text, dir.file("d.toml"), "output-dir=\"\"\nlr-schedule=\"linear\"\n") == -1);
    REQUIRE(text.config().output_dir.empty());
}

TEST_CASE("--config and flags: white space around a number is removed, so config.toml holds the number", "[hostile]") {
    // Found by fuzz_config's round trip (test/fuzz/regressions/config/numeric_value_leading_space.toml):
    // seq-len=" 64" was read as 64 but written back to config.toml unquoted as "seq-len= 64", which
    // reads back as "64", so a resumed run's config.toml differed from the first.
    llmc_test::TempDir dir;
    llmc::TrainCli cli;
    REQUIRE(parse_config_text(cli, dir.file("a.toml"),
                              "train-data=\"x\"\nseq-len=\" 64\"\nbatch-size='\t8 '\nlearning-rate=\" 1e-3\"\n") == -1);
    REQUIRE(cli.config().seq_len == 64);
    REQUIRE(cli.config().batch_size == 8);
    REQUIRE(cli.config().learning_rate == 1e-3f);
    const std::string text = cli.config_file_text();
    REQUIRE_THAT(text,
                 Contains("\nseq-len=64\n") && Contains("\nbatch-size=8\n") && Contains("\nlearning-rate=1e-3\n"));
    llmc::TrainCli again;
    REQUIRE(parse_config_text(again, dir.file("config.toml"), text) == -1);
    REQUIRE(again.config_file_text() == text);

    llmc::TrainCli flags;  // the same on the command line; a value of only spaces is empty
    const char* argv[] = {"train_gpt2_ls", "-i", "x", "-t", "\t64 ", "--layers", " 3"};
    REQUIRE(flags.parse(7, argv) == -1);
    REQUIRE(flags.config().seq_len == 64);
    REQUIRE(flags.config().overrides.layers == 3);
    llmc::TrainCli blank;
    const char* blank_argv[] = {"train_gpt2_ls", "-l", "  "};
    REQUIRE(blank.parse(3, blank_argv) == 1);
}

TEST_CASE("--config and flags: an on/off flag's value is a word or a whole integer, written as true or false",
          "[hostile]") {
    // Found by fuzz_config's round trip (test/fuzz/regressions/config/flag_value_digits_then_junk.toml):
    // CLI11 2.1 reads a flag's value with std::stoll, so "eval-only=99999999'9..." meant on, and
    // config.toml kept the text, which did not read back.
    llmc_test::TempDir dir;
    const std::vector<std::pair<std::string, bool>> accepted = {
        {"true", true}, {"False", false}, {"ON", true},  {"no", false},   {"1", true},  {"0", false},
        {"-1", false},  {"+2", true},     {"007", true}, {" yes ", true}, {"-", false}, {"", true}};
    for (const auto& [value, on] : accepted) {
        llmc::TrainCli cli;
        INFO("qk-norm=\"" << value << "\"");
        REQUIRE(parse_config_text(cli, dir.file("a.toml"), "train-data=\"x\"\nqk-norm=\"" + value + "\"\n") == -1);
        REQUIRE(cli.config().overrides.qk_norm == on);
        const std::string text = cli.config_file_text();
        REQUIRE_THAT(text, Contains(on ? "\nqk-norm=true\n" : "\nqk-norm=false\n"));
        llmc::TrainCli again;
        REQUIRE(parse_config_text(again, dir.file("config.toml"), text) == -1);
        REQUIRE(again.config_file_text() == text);
    }
    for (const char* value : {"9x", "99999999'9", "maybe", "1.5", "+-1", "tru"}) {
        llmc::TrainCli cli;
        INFO("eval-only=\"" << value << "\"");
        REQUIRE(parse_config_text(cli, dir.file("b.toml"),
                                  std::string("train-data=\"x\"\neval-only=\"") + value + "\"\n") == 1);
    }
    llmc::TrainCli flags;  // the same on the command line
    const char* argv[] = {"train_gpt2_ls", "-i", "x", "--eval-only=2x"};
    REQUIRE(flags.parse(4, argv) == 1);
    llmc::TrainCli plain;
    const char* plain_argv[] = {"train_gpt2_ls", "-i", "x", "--untie-embeddings", "--qk-norm=off"};
    REQUIRE(plain.parse(5, plain_argv) == -1);
    REQUIRE(plain.config().overrides.untie_embeddings);
    REQUIRE_FALSE(plain.config().overrides.qk_norm);
}

TEST_CASE("--config: an empty list or a list left open at the end of the file is refused", "[hostile]") {
    // Found by fuzz_config (test/fuzz/regressions/config/unclosed_list_at_eof.toml, empty_list.toml):
    // CLI11 2.1 made an item with no value of "zero-stage=[0" at the end of the file and read past
    // its empty value list (undefined behaviour).
    llmc_test::TempDir dir;
    for (const char* text : {"zero-stage=[0", "seed=[]\n", "val-data=[]\n", "qk-norm=[\n", "[sec]\nseed=[]\n"}) {
        llmc::TrainCli cli;
        INFO(text);
        REQUIRE(parse_config_text(cli, dir.file("e.toml"), std::string("train-data=\"x\"\n") + text) == 1);
    }
    llmc::TrainCli ok;  // sections and one-element lists still work
    REQUIRE(parse_config_text(ok, dir.file("f.toml"), "[default]\nseed=[5]\nbatch-size=2\n") == -1);
    REQUIRE(ok.config().seed == 5);
    REQUIRE(ok.config().batch_size == 2);
}

TEST_CASE("--config: a '#' inside a quoted value is part of it; line breaks, NUL bytes, end spaces are refused",
          "[hostile]") {
    // Found by fuzz_config (test/fuzz/regressions/config/hash_in_quoted_value.toml): CLI11 2.1 cut
    // output-dir="runs/#3" at the '#', so a run's config.toml gave -o '"runs/' when read back.
    llmc_test::TempDir dir;
    llmc::TrainCli cli;
    REQUIRE(parse_config_text(cli, dir.file("g.toml"),
                              "train-data=\"x\" # a comment\n# a comment line\noutput-dir=\"runs/#3\"  # another\n"
                              "val-data='a\\#b'\nseed=5 #\n") == -1);
    REQUIRE(cli.config().train_data == "x");
    REQUIRE(cli.config().output_dir == "runs/#3");
    REQUIRE(cli.config().val_data == "a\\#b");
    REQUIRE(cli.config().seed == 5);
    llmc::TrainCli again;
    REQUIRE(parse_config_text(again, dir.file("config.toml"), cli.config_file_text()) == -1);
    REQUIRE(again.config().output_dir == "runs/#3");
    REQUIRE(again.config().val_data == "a\\#b");
    llmc::TrainCli marker;  // the reader's private marker byte passes through unchanged
    REQUIRE(parse_config_text(marker, dir.file("h.toml"),
                              "train-data=\"a\x01"
                              "2\x01#b\"\n") == -1);
    REQUIRE(marker.config().train_data ==
            "a\x01"
            "2\x01#b");

    // a double quote (test/fuzz/regressions/config/unclosed_quote_hash.toml: CLI11 writes quotes without
    // escapes, so a value with both kinds of quote and a '#' did not come back), and a space at either end: CLI11 wrote val-data=" 64" unquoted, as a number, and read back "64"
    // (test/fuzz/regressions/config/leading_space_numeric_text.toml)
    for (const std::string& text : {std::string("output-dir=\"a\rb\"\n"), std::string("output-dir=\"a\0b\"\n", 17),
                                    std::string("val-data=\" 64\"\n"), std::string("val-data=\"x \"\n"),
                                    std::string("val-data='a\"b'\n"), std::string("val-data=\"a\n")}) {
        llmc::TrainCli bad;
        REQUIRE(parse_config_text(bad, dir.file("i.toml"), "train-data=\"x\"\n" + text) == 1);
    }
    llmc::TrainCli flags;
    const char* argv[] = {"train_gpt2_ls", "-o", "a\nb"};
    REQUIRE(flags.parse(3, argv) == 1);
}

TEST_CASE("--config: backslashes and quotes inside quotes are literal, so such values come back", "[hostile]") {
    // Found by fuzz_config (test/fuzz/regressions/config/round_trip_comma_trailing_backslash.toml): CLI11
    // 2.1 wrote a value with a ',' that ends in a backslash as train-data="a,b\" and read backslash-quote
    // back as an escaped quote, so a run's own config.toml was refused ("contains ... double quote").
    llmc_test::TempDir dir;
    llmc::TrainCli cli;
    REQUIRE(parse_config_text(cli, dir.file("j.toml"),
                              "train-data=\"d/a,b\\\"\noutput-dir='c:\\runs\\'\nval-data=\"x\\\\,#y\"\n") == -1);
    REQUIRE(cli.config().train_data == "d/a,b\\");
    REQUIRE(cli.config().output_dir == "c:\\runs\\");
    REQUIRE(cli.config().val_data == "x\\\\,#y");
    llmc::TrainCli again;
    REQUIRE(parse_config_text(again, dir.file("config.toml"), cli.config_file_text()) == -1);
    REQUIRE(again.config().train_data == "d/a,b\\");
    REQUIRE(again.config().output_dir == "c:\\runs\\");
    REQUIRE(again.config().val_data == "x\\\\,#y");
    REQUIRE(again.config_file_text() == cli.config_file_text());
    // the other kind of quote inside quotes is literal too (review: the value 'a b', written "'a b'",
    // read back as a b: -o "'my run'" resumed into another directory), with a space or a ','
    for (const std::string& value : {std::string("'a b'"), std::string("'x,y'"), std::string("it's a b\\"),
                                     std::string("'"), std::string("''a b''")}) {
        llmc::TrainCli first;
        REQUIRE(parse_config_text(first, dir.file("l.toml"), "train-data=\"" + value + "\"\n") == -1);
        REQUIRE(first.config().train_data == value);
        llmc::TrainCli back;
        REQUIRE(parse_config_text(back, dir.file("config.toml"), first.config_file_text()) == -1);
        REQUIRE(back.config().train_data == value);
    }
    // a backslash before a quote is not an escape: the value then holds a quote, which is refused
    llmc::TrainCli escaped;
    REQUIRE(parse_config_text(escaped, dir.file("k.toml"), "train-data=\"a\\\"b\"\n") == 1);
}

TEST_CASE("config.json of a run whose paths are not UTF-8 is written, with U+FFFD", "[hostile]") {
    // Found by fuzz_config (test/fuzz/regressions/config/invalid_utf8_json.toml): -o with a Latin-1
    // directory name ended the run with "internal error: [json.exception.type_error.316]".
    llmc::TrainConfig c;
    c.train_data = "data/caf\xe9/train_*.bin";
    c.output_dir = "out/\xff";
    const std::string text = llmc::json_file_text(llmc::train_config_json(c));
    REQUIRE_THAT(text, Contains("\"out/\xEF\xBF\xBD\"") && Contains("data/caf\xEF\xBF\xBD/train_*.bin"));
    REQUIRE(text.back() == '\n');
}

TEST_CASE("a recorded path is checked as UTF-8 as nlohmann's dump checks it", "[hostile]") {
    // validate.h refuses -i/-j/-o/-e/--fork-from that config.json could hold only with U+FFFD (trial 3 F24)
    using llmc::first_invalid_utf8;
    CHECK(first_invalid_utf8("data/caf\xc3\xa9/train_*.bin") == std::string::npos);   // UTF-8 'é'
    CHECK(first_invalid_utf8("\xf0\x9f\x98\x80 \xe2\x82\xac") == std::string::npos);  // 4- and 3-byte forms
    CHECK(first_invalid_utf8("data/caf\xe9/x") == 8);                                 // Latin-1 'é'
    CHECK(first_invalid_utf8("a\xc3") == 1);                                          // cut short
    CHECK(first_invalid_utf8("a\xc0\xaf") == 1);                                      // overlong '/'
    CHECK(first_invalid_utf8("\xed\xa0\x80") == 0);                                   // a surrogate
    CHECK(first_invalid_utf8("\xf4\x90\x80\x80") == 0);                               // past U+10FFFF
    CHECK(first_invalid_utf8("\x80") == 0);                                           // a lone continuation
    for (const std::string s : {"data/caf\xe9/x", "a\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
        const nlohmann::json j = s;  // what the check refuses is what dump cannot write without U+FFFD
        CHECK_THROWS(j.dump());
    }
    CHECK(llmc::escaped_bytes("caf\xe9\n") == "caf\\xe9\\x0a");
}

// ---------------------------------------------------------------------------------------------
// GPT-2 BPE on long prompts

TEST_CASE("BPE merging with a heap gives the naive leftmost-lowest merge's ids", "[hostile][bpe]") {
    // encode_piece used to rescan all parts after every merge: quadratic, minutes for a 1 MB prompt
    // without spaces. The heap version must merge exactly as before.
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; b++) tokens.push_back(std::string(1, (char)b));
    std::mt19937 rng(17);
    const std::string alphabet = "abcab";  // few letters: many merges, many ties of equal rank
    std::unordered_map<std::string, int> ranks;
    for (int i = 0; i < 256; i++) ranks[tokens[(size_t)i]] = i;
    auto pick = [&]() {  // 'a', 'b', 'c' or a merged token
        const size_t k = rng() % (3 + tokens.size() - 256);
        return k < 3 ? tokens[97 + k] : tokens[256 + (k - 3)];
    };
    while (tokens.size() < 600) {  // random merges of existing tokens, like a trained vocabulary
        const std::string t = pick() + pick();
        if (t.size() < 12 && ranks.emplace(t, (int)tokens.size()).second) tokens.push_back(t);
    }
    const llmc::Gpt2BpeEncoder enc(tokens, -1);
    for (int trial = 0; trial < 300; trial++) {
        std::string piece;
        const size_t n = 1 + rng() % 200;
        for (size_t i = 0; i < n; i++) piece += alphabet[rng() % alphabet.size()];
        std::vector<int> ids;
        enc.encode_piece(piece, ids);
        INFO(piece);
        REQUIRE(ids == naive_bpe(ranks, piece));
    }
    std::string big(1 << 20, 'a');  // one 1 MB piece (took ~15 minutes with the quadratic merge)
    for (size_t i = 0; i < big.size(); i++) big[i] = alphabet[rng() % alphabet.size()];
    std::string back;
    for (int id : enc.encode(big)) back += tokens[(size_t)id];
    REQUIRE(back == big);
}

TEST_CASE("error_message: input errors as they are, running out of memory with the fix, the rest as internal",
          "[hostile]") {
    // main() of both programs prints "error: " + this (a model too big for memory used to end with
    // "internal error: std::bad_alloc"; test/test_faults.py runs the trainer into it)
    REQUIRE(llmc::error_message(llmc::InputError("--vocab 0 must be positive"), "x") == "--vocab 0 must be positive");
    const std::string oom = llmc::error_message(std::bad_alloc(), "use a smaller model");
    REQUIRE_THAT(oom, Contains("out of memory (std::bad_alloc)") && Contains("; use a smaller model"));
    REQUIRE(oom.find('\n') == std::string::npos);
    REQUIRE(llmc::error_message(std::bad_array_new_length(), "f").rfind("out of memory", 0) == 0);  // a bad_alloc too
    REQUIRE(llmc::error_message(std::logic_error("vector::_M_range_check"), "f") ==
            "internal error: vector::_M_range_check");
}

namespace {
void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
void write_tokenizer_header(const std::string& path, uint32_t vocab) {
    uint32_t header[256] = {};
    header[0] = llmc::kTokenizerMagic;
    header[1] = 2;
    header[2] = vocab;
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(header), sizeof header);
}
}  // namespace

TEST_CASE("the data's vocabulary: meta.json and tokenizer.bin with impossible sizes are refused, not skipped",
          "[hostile]") {
    // Found reading data_vocab_size for fuzz_data_vocab: "vocab_size": 5000000000 became 705032704
    // (int conversion), 0 or -5 and a meta.json that is not JSON were skipped silently (the run then
    // took tokenizer.bin's or the default vocabulary), a tokenizer.bin V of 2^31 wrapped negative.
    llmc_test::TempDir dir;
    const std::string glob = dir.file("train_*.bin"), meta = dir.file("meta.json"), tok = dir.file("tokenizer.bin");
    std::string source;
    REQUIRE(llmc::data_vocab_size(glob, &source) == -1);  // neither file
    write_tokenizer_header(tok, 300);
    REQUIRE(llmc::data_vocab_size(glob, &source) == 300);
    REQUIRE(source == tok);
    write_text(meta, "{\"eot\": 10}");  // no vocab_size: tokenizer.bin's
    REQUIRE(llmc::data_vocab_size(glob, &source) == 300);
    write_text(meta, "{\"vocab_size\": 2147483647, \"eot\": 10}");
    REQUIRE(llmc::data_vocab_size(glob, &source) == 2147483647);
    REQUIRE(source == meta);
    for (const char* bad : {"{\"vocab_size\": 0}", "{\"vocab_size\": -5}", "{\"vocab_size\": 5000000000}",
                            "{\"vocab_size\": 18446744073709551615}", "{\"vocab_size\": 2147483648}",
                            "{\"vocab_size\": \"256\"}", "{\"vocab_size\": 256.5}", "{\"vocab_size\": null}"}) {
        write_text(meta, bad);
        REQUIRE_THROWS_WITH(llmc::data_vocab_size(glob, &source),
                            Contains(meta + ": \"vocab_size\"") && Contains("is not an integer from 1 to 2147483647"));
    }
    // a deeply nested value is named by its type (review: dumping it recursed once per level)
    write_text(meta, "{\"vocab_size\": " + std::string(200000, '[') + std::string(200000, ']') + "}");
    REQUIRE_THROWS_WITH(llmc::data_vocab_size(glob, &source),
                        Contains(meta + ": \"vocab_size\" array is not an integer"));
    for (const char* bad : {"", "{\"vocab_size\": 256", "[256]", "256", "{\"vocab_size\": 256}\xff"}) {
        write_text(meta, bad);
        REQUIRE_THROWS_WITH(llmc::data_vocab_size(glob, &source), Contains(meta + " is not a JSON object"));
    }
    std::filesystem::remove(meta);
    for (uint32_t v : {0u, 2147483648u, 4294967295u}) {
        write_tokenizer_header(tok, v);
        REQUIRE_THROWS_WITH(
            llmc::data_vocab_size(glob, &source),
            Contains(tok + ": vocabulary size " + std::to_string(v)) && Contains("is not from 1 to 2147483647"));
    }
}
