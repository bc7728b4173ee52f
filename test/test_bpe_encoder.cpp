// Tests of llmc/text/bpe_encoder.h: the generated Unicode classes, UTF-8 decoding (invalid bytes kept),
// GPT-2's pre-tokenizer on hand-checked cases (each expected split was also checked against the
// `regex` module's findall with GPT-2's pattern), byte-pair merging on toy vocabularies, prompt
// encoding for byte-level / GPT-2 / other tokenizers. Exact equality with tiktoken on real text
// is in test/test_generate.py (it needs python's tiktoken and the GPT-2 BPE files).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "llmc/text/bpe_encoder.h"
#include "test/test_util.h"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> pieces(const std::string& text) {
    std::vector<std::string> out;
    for (const auto& p : llmc::gpt2_pretokenize(text)) out.push_back(text.substr(p.first, p.second - p.first));
    return out;
}

// The 256 single bytes (id = byte) followed by `merged` (ids 256, 257, ...).
std::vector<std::string> toy_vocab(const std::vector<std::string>& merged) {
    std::vector<std::string> v;
    for (int b = 0; b < 256; b++) v.push_back(std::string(1, (char)b));
    v.insert(v.end(), merged.begin(), merged.end());
    return v;
}

// tokenizer.bin in llm.c's layout (version 2), written independently of llmc/text/tokenizer.h.
void write_tokenizer(const std::string& path, const std::vector<std::string>& tokens, uint32_t eot) {
    std::vector<uint32_t> header(256, 0);
    header[0] = 20240328;
    header[1] = 2;
    header[2] = (uint32_t)tokens.size();
    header[3] = eot;
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(header.data(), 4, header.size(), f);
    for (const std::string& t : tokens) {
        const unsigned char len = (unsigned char)t.size();
        std::fwrite(&len, 1, 1, f);
        std::fwrite(t.data(), 1, t.size(), f);
    }
    std::fclose(f);
}

}  // namespace

TEST_CASE("the generated Unicode class table is sorted, disjoint and classifies known code points", "[bpe]") {
    const size_t n = sizeof(llmc::kCharClassRanges) / sizeof(llmc::kCharClassRanges[0]);
    for (size_t i = 0; i < n; i++) {
        REQUIRE(llmc::kCharClassRanges[i].lo <= llmc::kCharClassRanges[i].hi);
        REQUIRE(llmc::kCharClassRanges[i].hi <= 0x10FFFFu);
        if (i > 0) REQUIRE(llmc::kCharClassRanges[i - 1].hi < llmc::kCharClassRanges[i].lo);
    }
    using llmc::CharClass;
    const std::vector<std::pair<uint32_t, CharClass>> cases = {
        {'a', CharClass::Letter},     {'Z', CharClass::Letter},
        {'5', CharClass::Number},     {' ', CharClass::Space},
        {'\t', CharClass::Space},     {'\n', CharClass::Space},
        {'\r', CharClass::Space},     {0x0B, CharClass::Space},
        {0x0C, CharClass::Space},     {0x85, CharClass::Space},
        {0xA0, CharClass::Space},     {0x2028, CharClass::Space},
        {0x3000, CharClass::Space},   {0x1C, CharClass::Other},
        {0x1F, CharClass::Other},  // isspace but not White_Space
        {0x200B, CharClass::Other},   {'!', CharClass::Other},
        {'\'', CharClass::Other},     {'_', CharClass::Other},
        {0, CharClass::Other},        {0xE9, CharClass::Letter},  // é
        {0x301, CharClass::Other},    {0x3A9, CharClass::Letter},
        {0x4E2D, CharClass::Letter},  // U+0301 Mn, Ω, 中
        {0x2B0, CharClass::Letter},   {0xBD, CharClass::Number},
        {0x2167, CharClass::Number},  // ʰ Lm, ½ No, Ⅷ Nl
        {0x663, CharClass::Number},   {0xB2, CharClass::Number},
        {0x1F44B, CharClass::Other},  // ٣ Nd, ², 👋
        {0x1F3FD, CharClass::Other},  {0x20AC, CharClass::Other},
        {0x20000, CharClass::Letter},  // skin tone, €, CJK ext B
        {0x10FFFF, CharClass::Other}, {0xE000, CharClass::Other},
    };
    for (const auto& c : cases) {
        INFO("U+" << std::hex << c.first);
        REQUIRE(llmc::char_class(c.first) == c.second);
    }
}

TEST_CASE("utf8_chars decodes valid UTF-8 and keeps every invalid byte as one Other character", "[bpe]") {
    struct Case {
        std::string text;
        std::vector<uint32_t> cps;  // kInvalidUtf8Byte for an invalid byte
    };
    const uint32_t X = llmc::kInvalidUtf8Byte;
    const std::vector<Case> cases = {
        {"a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x91\x8B", {'a', 0xE9, 0x20AC, 0x1F44B}},
        {"\xF4\x8F\xBF\xBF", {0x10FFFF}},
        {"\xFF", {X}},
        {"a\x80"
         "b",
         {'a', X, 'b'}},                     // stray continuation byte
        {"\xC0\xAF", {X, X}},                // overlong '/'
        {"\xE0\x80\xAF", {X, X, X}},         // overlong 3-byte form
        {"\xED\xA0\x80", {X, X, X}},         // surrogate U+D800
        {"\xF4\x90\x80\x80", {X, X, X, X}},  // above U+10FFFF
        {"\xE2\x82", {X, X}},                // truncated at the end
        {"\xE2\x82"
         "a",
         {X, X, 'a'}},  // truncated before ASCII
        {"\xF0\x9F\x91", {X, X, X}},
        {"\xC3\xA9\xC3", {0xE9, X}},
    };
    for (const Case& c : cases) {
        INFO("text " << llmc::safe_printable(c.text));
        const std::vector<llmc::TextChar> ch = llmc::utf8_chars(c.text);
        REQUIRE(ch.size() == c.cps.size());
        size_t expect_begin = 0;
        for (size_t i = 0; i < ch.size(); i++) {
            REQUIRE(ch[i].cp == c.cps[i]);
            REQUIRE(ch[i].begin == expect_begin);
            if (ch[i].cp == X) REQUIRE(ch[i].cls == llmc::CharClass::Other);
            expect_begin += ch[i].cp == X ? 1 : ch[i].cp < 0x80 ? 1 : ch[i].cp < 0x800 ? 2 : ch[i].cp < 0x10000 ? 3 : 4;
        }
        REQUIRE(expect_begin == c.text.size());
    }
}

TEST_CASE("GPT-2 pre-tokenizer splits like the regex", "[bpe]") {
    using V = std::vector<std::string>;
    struct Case {
        std::string text;
        V expect;
    };
    const std::vector<Case> cases = {
        {"", {}},
        {"Hello world", {"Hello", " world"}},
        {"Hello, world!", {"Hello", ",", " world", "!"}},
        // contractions: case-sensitive, ASCII apostrophe, matched before letters
        {"I'm don't we'll they've you're he'd it's",
         {"I", "'m", " don", "'t", " we", "'ll", " they", "'ve", " you", "'re", " he", "'d", " it", "'s"}},
        {"IT'S", {"IT", "'", "S"}},
        {"'sup 'rex 'l", {"'s", "up", " '", "rex", " '", "l"}},
        {"rock 'n' roll", {"rock", " '", "n", "'", " roll"}},
        {"x''s", {"x", "''", "s"}},                // ' ?[^\s\p{L}\p{N}]+ takes both apostrophes
        {"\xE2\x80\x99s", {"\xE2\x80\x99", "s"}},  // U+2019 is not a contraction apostrophe
        // whitespace runs: the last space before a word goes with the word
        {"a  b", {"a", " ", " b"}},
        {"a   b", {"a", "  ", " b"}},
        {"a\n\nb", {"a", "\n", "\n", "b"}},
        {"a \n b", {"a", " \n", " b"}},
        {"a\tb", {"a", "\t", "b"}},
        {"a  ", {"a", "  "}},
        {"   ", {"   "}},
        {" ", {" "}},
        {"\n", {"\n"}},
        {"a \n\n", {"a", " \n\n"}},
        {"  !", {" ", " !"}},
        {"\t\tx", {"\t", "\t", "x"}},
        {"a\xC2\xA0"
         "b",
         {"a", "\xC2\xA0", "b"}},  // NBSP is \s but not the ' ' of ' ?'
        {"a\xC2\xA0\xC2\xA0"
         "b",
         {"a", "\xC2\xA0", "\xC2\xA0", "b"}},
        {"a\xE3\x80\x80"
         "b",
         {"a", "\xE3\x80\x80", "b"}},  // U+3000
        {"a\x1C"
         "b",
         {"a", "\x1C", "b"}},  // U+001C: isspace() but not White_Space
        // digits: not split, ' ?' only before the run
        {"abc123 4567 8.9", {"abc", "123", " 4567", " 8", ".", "9"}},
        {"x\xC2\xBD \xE2\x85\xA7 \xD9\xA3", {"x", "\xC2\xBD", " \xE2\x85\xA7", " \xD9\xA3"}},  // ½ Ⅷ ٣
        // symbols and punctuation runs
        {"foo()...bar", {"foo", "()...", "bar"}},
        {" ?!", {" ?!"}},
        {"<|endoftext|>", {"<|", "endoftext", "|>"}},
        // non-ASCII letters
        {"na\xC3\xAFve caf\xC3\xA9 \xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1",
         {"na\xC3\xAFve", " caf\xC3\xA9", " \xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1"}},
        {"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x80\x82",
         {"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "\xE3\x80\x82"}},  // 日本語。
        {"e\xCC\x81t\xC3\xA9", {"e", "\xCC\x81", "t\xC3\xA9"}},      // combining acute (Mn) is Other
        // emoji (So) and a skin-tone modifier (Sk) are Other
        {"hi \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!", {"hi", " \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!"}},
        {"\xF0\x9F\x98\x80"
         "a",
         {"\xF0\x9F\x98\x80", "a"}},
        // invalid UTF-8: each bad byte is an Other character
        {"a\xFF"
         "b",
         {"a", "\xFF", "b"}},
        {" \xFF\xFE!x", {" \xFF\xFE!", "x"}},
        {"ab\xE2\x82", {"ab", "\xE2\x82"}},
        {"\xC3 x", {"\xC3", " x"}},
    };
    for (const Case& c : cases) {
        INFO("text '" << llmc::safe_printable(c.text) << "'");
        REQUIRE(pieces(c.text) == c.expect);
    }
}

TEST_CASE("pre-tokenizer pieces tile random text exactly", "[bpe]") {
    std::mt19937 rng(12345);
    const std::vector<std::string> alphabet = {
        "a",        "Z",    "7",        " ",   " ",        "\n",           "\t",       "'",
        "s",        "l",    "!",        ".",   "\xC3\xA9", "\xE2\x85\xA7", "\xC2\xA0", "\xF0\x9F\x91\x8B",
        "\xCC\x81", "\xFF", "\xE2\x82", "\x80"};
    for (int trial = 0; trial < 300; trial++) {
        std::string text;
        const int len = (int)(rng() % 40);
        for (int i = 0; i < len; i++) text += alphabet[rng() % alphabet.size()];
        const auto p = llmc::gpt2_pretokenize(text);
        size_t pos = 0;
        for (const auto& r : p) {
            REQUIRE(r.first == pos);
            REQUIRE(r.second > r.first);
            pos = r.second;
        }
        REQUIRE(pos == text.size());
    }
}

TEST_CASE("byte-pair merging takes the lowest rank first, leftmost on ties", "[bpe]") {
    // 256 "bc", 257 "ab", 258 "abc", 259 "bcd", 260 "aa", 261 "xyz" (not reachable by merges)
    const llmc::Gpt2BpeEncoder enc(toy_vocab({"bc", "ab", "abc", "bcd", "aa", "xyz"}), -1);
    auto bpe = [&](const std::string& piece) {
        std::vector<int> out;
        enc.encode_piece(piece, out);
        return out;
    };
    REQUIRE(bpe("abcd") == std::vector<int>{258, 'd'});  // bc (256) before ab (257); then abc (258) before bcd (259)
    REQUIRE(bpe("abc") == std::vector<int>{258});        // the whole piece is a token
    REQUIRE(bpe("bcd") == std::vector<int>{259});
    REQUIRE(bpe("aaa") == std::vector<int>{260, 'a'});  // tie: the leftmost pair merges
    REQUIRE(bpe("aaaaa") == std::vector<int>{260, 260, 'a'});
    REQUIRE(bpe("xyz") == std::vector<int>{261});  // tiktoken's shortcut: a piece that is a token
    REQUIRE(bpe("xyzx") == std::vector<int>{'x', 'y', 'z', 'x'});
    REQUIRE(bpe("q") == std::vector<int>{'q'});
    REQUIRE(bpe(std::string("\xFF\x00", 2)) == std::vector<int>{0xFF, 0});
    // encode = pre-tokenize, then merge each piece on its own (no merge across pieces)
    REQUIRE(enc.encode("ab abc") == std::vector<int>{257, ' ', 258});
    REQUIRE(enc.encode("") == std::vector<int>{});
}

TEST_CASE("BPE encode round-trips arbitrary bytes", "[bpe]") {
    const std::vector<std::string> vocab = toy_vocab({"th", "the", " the", "e ", "  ", "\xC3\xA9", "\xFF\xFF", "!!"});
    const llmc::Gpt2BpeEncoder enc(vocab, -1);
    std::mt19937 rng(7);
    const std::string alphabet = std::string("the !\n\xC3\xA9\xFF\x80", 10);
    for (int trial = 0; trial < 300; trial++) {
        std::string text;
        const int len = (int)(rng() % 60);
        for (int i = 0; i < len; i++) text += alphabet[rng() % alphabet.size()];
        std::string back;
        for (int id : enc.encode(text)) {
            REQUIRE(id >= 0);
            REQUIRE(id < (int)vocab.size());
            back += vocab[(size_t)id];
        }
        REQUIRE(back == text);
    }
}

TEST_CASE("a vocabulary that is not byte-level BPE is refused", "[bpe]") {
    std::vector<std::string> dup = toy_vocab({"ab", "ab"});
    REQUIRE_THROWS_WITH(llmc::Gpt2BpeEncoder(dup, -1), Catch::Contains("token 257 repeats the bytes of token 256"));
    std::vector<std::string> no_byte = toy_vocab({"ab"});
    no_byte[7] = "zz";
    REQUIRE_THROWS_WITH(llmc::Gpt2BpeEncoder(no_byte, -1), Catch::Contains("no token for byte 7"));
    // the special token may repeat another token's bytes: it is left out of the merges
    REQUIRE_NOTHROW(llmc::Gpt2BpeEncoder(toy_vocab({"ab", "ab"}), 257));
}

TEST_CASE("encode_prompt: EOT first, byte-level tokenizers byte by byte, others refused", "[bpe]") {
    llmc_test::TempDir dir("llmc_bpe_");
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; b++) bytes.push_back(std::string(1, (char)b));
    write_tokenizer(dir.file("bytes.bin"), bytes, 10);
    const llmc::Tokenizer byte_tok(dir.file("bytes.bin"));
    REQUIRE(llmc::is_byte_vocabulary(byte_tok));
    REQUIRE_FALSE(llmc::Gpt2BpeEncoder::is_gpt2_vocabulary(byte_tok, nullptr));
    REQUIRE(llmc::encode_prompt(byte_tok, "Hi\xC3\xA9") == std::vector<int>{10, 'H', 'i', 0xC3, 0xA9});
    REQUIRE(llmc::encode_prompt(byte_tok, "") == std::vector<int>{10});

    std::vector<std::string> sp = bytes;  // e.g. SentencePiece: pieces after the bytes
    sp.push_back("\xE2\x96\x81the");
    sp.push_back("</s>");
    write_tokenizer(dir.file("sp.bin"), sp, 257);
    const llmc::Tokenizer sp_tok(dir.file("sp.bin"));
    REQUIRE_FALSE(llmc::is_byte_vocabulary(sp_tok));
    std::string why;
    REQUIRE_FALSE(llmc::Gpt2BpeEncoder::is_gpt2_vocabulary(sp_tok, &why));
    REQUIRE(why.find("50257") != std::string::npos);
    REQUIRE_THROWS_WITH(llmc::encode_prompt(sp_tok, "the"), Catch::Contains("--prompt-ids"));
    REQUIRE_THROWS_WITH(llmc::encode_prompt(llmc::Tokenizer(), "the"), Catch::Contains("--tokenizer"));
    REQUIRE_THROWS_WITH(llmc::Gpt2BpeEncoder(sp_tok), Catch::Contains("not GPT-2's BPE vocabulary"));
}

TEST_CASE("GPT-2 tokenizer.bin of the tiny-Shakespeare shards encodes like tiktoken", "[bpe][data]") {
    const std::string path = "data/shards/tinyshakespeare_gpt2/tokenizer.bin";
    if (!fs::exists(path)) {
        WARN("skipped: " << path << " missing (run `make data-tinyshakespeare` from the repo root)");
        return;
    }
    const llmc::Tokenizer tok(path);
    std::string why;
    REQUIRE(llmc::Gpt2BpeEncoder::is_gpt2_vocabulary(tok, &why));
    const llmc::Gpt2BpeEncoder enc(tok);
    // expected ids: tiktoken's GPT-2 encode_ordinary
    REQUIRE(enc.encode("Hello world") == std::vector<int>{15496, 995});
    REQUIRE(enc.encode(" the") == std::vector<int>{262});
    REQUIRE(enc.encode("First Citizen:\nBefore we proceed") == std::vector<int>{5962, 22307, 25, 198, 8421, 356, 5120});
    REQUIRE(enc.encode("I'm here") == std::vector<int>{40, 1101, 994});
    REQUIRE(
        enc.encode("na\xC3\xAFve caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!") ==
        std::vector<int>{2616, 38776, 40304, 10545, 245, 98, 17312, 105, 45739, 252, 50169, 233, 8582, 237, 121, 0});
    REQUIRE(llmc::encode_prompt(tok, "Hello world") == std::vector<int>{50256, 15496, 995});
}
