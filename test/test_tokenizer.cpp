// tokenizer.bin decoding (llmc/text/tokenizer.h): round trip of a file written here, the absent
// tokenizer, every malformed file, UTF-8 repair, and the real tiny-Shakespeare shards if built.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "llmc/io/shard.h"
#include "test/test_util.h"
#include "llmc/text/tokenizer.h"

using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct TempDir : llmc_test::TempDir {
    TempDir() : llmc_test::TempDir("llmc_tok_") {}
};

// Writes tokenizer.bin in llm.c's layout, independently of llmc/text/tokenizer.h. `trailing` extra
// bytes are appended; `vocab_override` >= 0 replaces the header's vocabulary size.
void write_tokenizer(const std::string& path, const std::vector<std::string>& tokens, uint32_t version, uint32_t eot,
                     uint32_t magic = 20240328, int64_t vocab_override = -1, size_t trailing = 0) {
    std::vector<uint32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = vocab_override >= 0 ? (uint32_t)vocab_override : (uint32_t)tokens.size();
    if (version == 2) header[3] = eot;
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(header.data(), 4, header.size(), f);
    for (const std::string& t : tokens) {
        REQUIRE(t.size() < 256);
        const unsigned char len = (unsigned char)t.size();
        std::fwrite(&len, 1, 1, f);
        std::fwrite(t.data(), 1, t.size(), f);
    }
    for (size_t i = 0; i < trailing; i++) std::fputc('x', f);
    std::fclose(f);
}

std::vector<std::string> random_tokens(std::mt19937& rng, int V) {
    std::vector<std::string> toks((size_t)V);
    for (auto& t : toks) {
        t.resize(rng() % 20);  // includes empty tokens and every byte value
        for (auto& c : t) c = (char)(rng() % 256);
    }
    return toks;
}

}  // namespace

TEST_CASE("tokenizer.bin round trip", "[tokenizer]") {
    TempDir dir;
    const uint32_t seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const int V = 1 + (int)(rng() % 3000);
    const std::vector<std::string> toks = random_tokens(rng, V);
    const uint32_t eot = rng() % (uint32_t)V;
    write_tokenizer(dir.file("tok.bin"), toks, 2, eot);
    const llmc::Tokenizer tk(dir.file("tok.bin"));
    REQUIRE(tk.present());
    REQUIRE(tk.vocab_size() == V);
    REQUIRE(tk.eot_token() == (int)eot);
    for (int id = 0; id < V; id++) REQUIRE(tk.decode(id) == toks[(size_t)id]);
    std::vector<int> ids(100);
    std::string expect;
    for (auto& id : ids) {
        id = (int)(rng() % (uint32_t)V);
        expect += toks[(size_t)id];
    }
    REQUIRE(tk.decode(ids.data(), ids.size()) == expect);
    REQUIRE_THROWS_WITH(tk.decode(V), Contains("token id " + std::to_string(V) + " is outside the vocabulary"));
    REQUIRE_THROWS_WITH(tk.decode(-1), Contains("token id -1"));
}

TEST_CASE("version 1 tokenizer.bin implies GPT-2's EOT 50256", "[tokenizer]") {
    TempDir dir;
    std::vector<std::string> toks(50257, "ab");
    toks[50256] = "<|endoftext|>";
    write_tokenizer(dir.file("v1.bin"), toks, 1, 0);
    const llmc::Tokenizer tk(dir.file("v1.bin"));
    REQUIRE(tk.vocab_size() == 50257);
    REQUIRE(tk.eot_token() == 50256);
    REQUIRE(tk.decode(50256) == "<|endoftext|>");
    toks.resize(100);
    write_tokenizer(dir.file("v1small.bin"), toks, 1, 0);
    REQUIRE_THROWS_WITH(llmc::Tokenizer(dir.file("v1small.bin")),
                        Contains("EOT token 50256 (implied by version 1)") && Contains("vocabulary size 100"));
}

TEST_CASE("an absent tokenizer prints ids", "[tokenizer]") {
    TempDir dir;
    const llmc::Tokenizer none;
    REQUIRE_FALSE(none.present());
    REQUIRE(none.decode(42) == "<42>");
    const int ids[] = {1, 2};
    REQUIRE(none.decode(ids, 2) == "<1><2>");
    std::string warning;
    const llmc::Tokenizer missing = llmc::Tokenizer::load_or_absent(dir.file("tokenizer.bin"), &warning);
    REQUIRE_FALSE(missing.present());
    REQUIRE_THAT(warning, Contains(dir.file("tokenizer.bin")) && Contains("token ids"));
    // a file that exists but is corrupt is an error, not an absent tokenizer
    write_tokenizer(dir.file("bad.bin"), {"a"}, 2, 0, 1234);
    REQUIRE_THROWS_WITH(llmc::Tokenizer::load_or_absent(dir.file("bad.bin"), &warning), Contains("bad magic 1234"));
}

TEST_CASE("malformed tokenizer.bin files are refused naming the file, offset and fix", "[tokenizer]") {
    TempDir dir;
    const std::string p = dir.file("tok.bin");
    const std::vector<std::string> toks = {"a", "bc", "", "def"};
    SECTION("missing") { REQUIRE_THROWS_WITH(llmc::Tokenizer(p), Contains("cannot open tokenizer") && Contains(p)); }
    SECTION("bad magic") {
        write_tokenizer(p, toks, 2, 0, 20240520);
        REQUIRE_THROWS_WITH(llmc::Tokenizer(p), Contains(p) && Contains("bad magic 20240520 at byte offset 0") &&
                                                    Contains("data/prepare.py"));
    }
    SECTION("unknown version") {
        write_tokenizer(p, toks, 3, 0);
        REQUIRE_THROWS_WITH(llmc::Tokenizer(p), Contains("unknown version 3 at byte offset 4"));
    }
    SECTION("EOT outside the vocabulary") {
        write_tokenizer(p, toks, 2, 4);
        REQUIRE_THROWS_WITH(llmc::Tokenizer(p), Contains("EOT token 4 at byte offset 12"));
    }
    SECTION("header says more tokens than the file has") {
        write_tokenizer(p, toks, 2, 0, 20240328, 5);
        // 1024 + (1+1) + (1+2) + 1 + (1+3) = 1034: the length byte of token 4
        REQUIRE_THROWS_WITH(llmc::Tokenizer(p), Contains(p) && Contains("truncated at byte offset 1034") &&
                                                    Contains("length of token 4 of 5"));
    }
    SECTION("a token's bytes cut off") {
        write_tokenizer(p, toks, 2, 0);
        fs::resize_file(p, 1034 - 2);
        REQUIRE_THROWS_WITH(llmc::Tokenizer(p),
                            Contains("truncated at byte offset 1031") && Contains("bytes of token 3"));
    }
    SECTION("trailing bytes") {
        write_tokenizer(p, toks, 2, 0, 20240328, -1, 3);
        REQUIRE_THROWS_WITH(llmc::Tokenizer(p),
                            Contains("3 unexpected bytes after the last token at byte offset 1034"));
    }
    SECTION("shorter than the header") {
        FILE* f = std::fopen(p.c_str(), "wb");
        std::fputs("tok", f);
        std::fclose(f);
        REQUIRE_THROWS_WITH(llmc::Tokenizer(p), Contains("shorter than the 1024-byte header"));
    }
    SECTION("zero vocabulary") {
        write_tokenizer(p, {}, 2, 0);
        REQUIRE_THROWS_WITH(llmc::Tokenizer(p), Contains("vocabulary size 0"));
    }
}

// Expected outputs from Python's bytes.decode("utf-8", errors="replace") (which replaces each
// maximal invalid subpart with one U+FFFD); a scratch run also matched it on 200,000 random strings.
TEST_CASE("safe_printable replaces invalid UTF-8 with U+FFFD", "[tokenizer]") {
    const std::string R = "\xEF\xBF\xBD";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"abc\n", "abc\n"},
        {"caf\xC3\xA9", "caf\xC3\xA9"},
        {"\xE2\x82\xAC", "\xE2\x82\xAC"},
        {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
        {"\x80", R},         // lone continuation byte
        {"a\xC3", "a" + R},  // truncated at the end
        {"\xE2\x82", R},     // truncated 3-byte sequence: one replacement
        {"\xE2\x82x", R + "x"},
        {"\xF0\x9F\x98", R},
        {"\xC0\x80", R + R},                  // overlong
        {"\xE0\x80\xAF", R + R + R},          // overlong 3-byte form
        {"\xED\xA0\x80", R + R + R},          // surrogate
        {"\xF4\x90\x80\x80", R + R + R + R},  // above U+10FFFF
        {"\xF5"
         "a",
         R + "a"},
        {"\xFF\xFE", R + R},
        {std::string("a\0b", 3), std::string("a\0b", 3)},
    };
    for (const auto& c : cases) {
        INFO("input bytes: " << c.first.size());
        REQUIRE(llmc::safe_printable(c.first) == c.second);
    }
}

TEST_CASE("the real tiny-Shakespeare shard decodes to 'First Citizen'", "[tokenizer][data]") {
    const std::string dir = "data/shards/tinyshakespeare_gpt2/";
    const std::string shard = dir + "train_000000.bin", tok = dir + "tokenizer.bin";
    if (!fs::exists(shard) || !fs::exists(tok)) {
        WARN("skipped: " << shard << " or " << tok << " missing (run `make data-tinyshakespeare` from the repo root)");
        return;
    }
    const llmc::Tokenizer tk(tok);
    REQUIRE(tk.vocab_size() == 50257);
    REQUIRE(tk.eot_token() == 50256);
    const std::vector<uint32_t> t = llmc::read_shard_tokens(shard, tk.vocab_size());
    REQUIRE(t.size() >= 8);
    REQUIRE(t[0] == 50256u);  // every document starts with EOT
    std::vector<int> ids(t.begin() + 1, t.begin() + 8);
    const std::string text = tk.decode(ids.data(), ids.size());
    INFO("decoded: " << llmc::safe_printable(text));
    REQUIRE(text.rfind("First Citizen", 0) == 0);
}
