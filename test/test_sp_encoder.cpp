// llmc/text/sp_encoder.h: the protobuf reader, SentencePiece BPE encoding on toy models built here
// (hand-checked cases and random strings against a naive re-implementation of the merge rule),
// byte fallback, normalization, the newline convention, and refusal of unsupported models.
// test/test_generate_sp.py checks the ids against the python sentencepiece library on real text.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llmc/text/sp_encoder.h"

using llmc::SpBpeEncoder;
using llmc::SpModel;
using llmc::SpType;

namespace {

// ---- a tiny protobuf writer, to build ModelProto bytes -------------------------------------------
void put_varint(std::string& s, uint64_t v) {
    while (v >= 0x80) {
        s += (char)(0x80 | (v & 0x7F));
        v >>= 7;
    }
    s += (char)v;
}
void put_key(std::string& s, uint32_t field, uint32_t wire) { put_varint(s, (uint64_t)field << 3 | wire); }
void put_bytes(std::string& s, uint32_t field, const std::string& b) {
    put_key(s, field, 2);
    put_varint(s, b.size());
    s += b;
}
void put_uint(std::string& s, uint32_t field, uint64_t v) {
    put_key(s, field, 0);
    put_varint(s, v);
}
void put_float(std::string& s, uint32_t field, float f) {
    put_key(s, field, 5);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int k = 0; k < 4; k++) s += (char)((u >> (8 * k)) & 0xFF);
}

struct ToyPiece {
    std::string piece;
    float score;
    int type;  // 1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE
};

// The layout data/text_tokenizers.py trains: 0 <unk>, 1 </s>, 2 "\n", 3..258 <0x00>..<0xFF>, then
// `normal` (in order, ids from 259).
std::vector<ToyPiece> toy_pieces(const std::vector<std::pair<std::string, float>>& normal) {
    std::vector<ToyPiece> p{{"<unk>", 0, 2}, {"</s>", 0, 3}, {"\n", 0, 4}};
    char buf[8];
    for (int b = 0; b < 256; b++) {
        std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
        p.push_back({buf, 0, 6});
    }
    for (const auto& n : normal) p.push_back({n.first, n.second, 1});
    return p;
}

struct ToySettings {
    int model_type = 2;
    int byte_fallback = 1;     // -1: field absent
    std::string charsmap;      // non-empty: a "nmt_nfkc"-like rule
    int add_dummy_prefix = 0;  // -1: absent (default true)
    int remove_extra_ws = 0;   // -1: absent (default true)
    int escape_ws = -1;        // -1: absent (default true)
};

std::string toy_model_bytes(const std::vector<ToyPiece>& pieces, const ToySettings& st = {}) {
    std::string m;
    for (const auto& p : pieces) {
        std::string sp;
        put_bytes(sp, 1, p.piece);
        put_float(sp, 2, p.score);
        if (p.type != 1) put_uint(sp, 3, (uint64_t)p.type);
        put_uint(sp, 7, 5);  // an unknown field: skipped
        put_bytes(m, 1, sp);
    }
    std::string tr;
    put_bytes(tr, 2, "prefix");  // model_prefix (skipped)
    put_uint(tr, 3, (uint64_t)st.model_type);
    put_uint(tr, 41, (uint64_t)(int64_t)-1);  // bos_id -1: a 10-byte varint (skipped)
    put_key(tr, 10, 5);                       // character_coverage, fixed32 (skipped)
    tr += std::string("\x00\x00\x80\x3f", 4);
    if (st.byte_fallback >= 0) put_uint(tr, 35, (uint64_t)st.byte_fallback);
    put_key(tr, 99, 1);  // a fixed64 field (skipped)
    tr += std::string(8, '\x01');
    put_bytes(m, 2, tr);
    std::string no;
    put_bytes(no, 1, st.charsmap.empty() ? "identity" : "nmt_nfkc");
    if (!st.charsmap.empty()) put_bytes(no, 2, st.charsmap);
    if (st.add_dummy_prefix >= 0) put_uint(no, 3, (uint64_t)st.add_dummy_prefix);
    if (st.remove_extra_ws >= 0) put_uint(no, 4, (uint64_t)st.remove_extra_ws);
    if (st.escape_ws >= 0) put_uint(no, 5, (uint64_t)st.escape_ws);
    put_bytes(m, 3, no);
    return m;
}

SpBpeEncoder toy_encoder(const std::vector<std::pair<std::string, float>>& normal, const ToySettings& st = {}) {
    return SpBpeEncoder(llmc::parse_sp_model(toy_model_bytes(toy_pieces(normal), st), "toy"), "toy");
}

constexpr int kByte0 = 3;                   // id of <0x00>
constexpr int kFirst = 259;                 // id of the first normal piece
const std::string kSpace = "\xE2\x96\x81";  // U+2581

std::vector<int> enc(const SpBpeEncoder& e, const std::string& s) { return e.encode(s); }

// Naive reference of steps 2-4 for text without '\n': the normalized characters, then repeatedly
// scan every adjacent pair and merge the highest-scoring one that is a normal piece (leftmost on
// ties), then map to ids with byte fallback. Written independently of the encoder's queue.
std::vector<int> naive(const std::vector<ToyPiece>& pieces, const std::string& line) {
    std::vector<std::string> sym;
    const auto ch = llmc::utf8_chars(line);
    for (size_t k = 0; k < ch.size(); k++) {
        const size_t e = k + 1 < ch.size() ? ch[k + 1].begin : line.size();
        const std::string c = line.substr(ch[k].begin, e - ch[k].begin);
        sym.push_back(ch[k].cp == llmc::kInvalidUtf8Byte ? "\xEF\xBF\xBD" : c == " " ? kSpace : c);
    }
    auto normal_id = [&](const std::string& s) {
        for (size_t i = 0; i < pieces.size(); i++)
            if ((pieces[i].type == 1 || pieces[i].type == 4) && pieces[i].piece == s) return (int)i;
        return -1;
    };
    for (;;) {
        int best = -1;
        float best_score = 0;
        for (size_t k = 0; k + 1 < sym.size(); k++) {
            const int id = normal_id(sym[k] + sym[k + 1]);
            if (id >= 0 && (best < 0 || pieces[(size_t)id].score > best_score)) {
                best = (int)k;
                best_score = pieces[(size_t)id].score;
            }
        }
        if (best < 0) break;
        sym[(size_t)best] += sym[(size_t)best + 1];
        sym.erase(sym.begin() + best + 1);
    }
    std::vector<int> out;
    for (const auto& s : sym) {
        const int id = normal_id(s);
        if (id >= 0) out.push_back(id);
        else
            for (unsigned char b : s) out.push_back(kByte0 + b);
    }
    return out;
}

}  // namespace

TEST_CASE("sp proto reader: varints, wire types, truncation", "[sp_encoder]") {
    std::string s;
    put_varint(s, 300);
    put_varint(s, (uint64_t)(int64_t)-1);
    llmc::ProtoReader r(s.data(), s.size(), "t");
    CHECK(r.varint() == 300);
    CHECK(r.varint() == ~0ull);
    CHECK(r.done());

    const std::string bad[] = {
        std::string("\x0a\x05"
                    "abc",
                    5),                  // length past the end
        std::string("\x08\x80", 2),      // truncated varint
        std::string("\x0b", 1),          // wire type 3 (groups)
        std::string(11, '\xff'),         // varint longer than 10 bytes
        std::string("\x15\x00\x00", 3),  // truncated fixed32
    };
    for (const auto& b : bad) CHECK_THROWS_AS(llmc::parse_sp_model(b, "t"), llmc::InputError);
    CHECK_THROWS_WITH(llmc::parse_sp_model("", "t"), Catch::Contains("no pieces"));

    const SpModel m = llmc::parse_sp_model(toy_model_bytes(toy_pieces({{"ab", -1.5f}})), "toy");
    REQUIRE(m.pieces.size() == 260);
    CHECK(m.pieces[0].piece == "<unk>");
    CHECK(m.pieces[0].type == SpType::Unknown);
    CHECK(m.pieces[2].type == SpType::UserDefined);
    CHECK(m.pieces[3 + 0x41].piece == "<0x41>");
    CHECK(m.pieces[3 + 0x41].type == SpType::Byte);
    CHECK(m.pieces[259].piece == "ab");
    CHECK(m.pieces[259].score == -1.5f);
    CHECK(m.pieces[259].type == SpType::Normal);
    CHECK(m.model_type == 2);
    CHECK(m.byte_fallback);
    CHECK(m.normalizer_name == "identity");
    CHECK_FALSE(m.add_dummy_prefix);
    CHECK_FALSE(m.remove_extra_whitespaces);
    CHECK(m.escape_whitespaces);  // absent: proto2 default true
}

TEST_CASE("sp encoder: merges by score, leftmost on ties", "[sp_encoder]") {
    // ids: ab 259, bc 260, abc 261, cd 262
    const SpBpeEncoder e = toy_encoder({{"ab", -2}, {"bc", -1}, {"abc", -3}, {"cd", -1}});
    CHECK(enc(e, "ab") == std::vector<int>{259});
    // "abc": bc (-1) beats ab (-2); then a+bc = abc (-3)
    CHECK(enc(e, "abc") == std::vector<int>{261});
    // "bcd": bc and cd tie at -1: the leftmost (bc) wins, then bc+d is no piece
    CHECK(enc(e, "bcd") == std::vector<int>{260, kByte0 + 'd'});
    // "abcd": bc first (-1, left of cd), then a+bc = abc; abc+d is no piece
    CHECK(enc(e, "abcd") == std::vector<int>{261, kByte0 + 'd'});
    // "xbcd" (x no piece): bc wins the tie with cd, x+bc is no piece
    CHECK(enc(e, "xbcd") == std::vector<int>{kByte0 + 'x', 260, kByte0 + 'd'});
    // "abx": only ab
    CHECK(enc(e, "abx") == std::vector<int>{259, kByte0 + 'x'});
    // a merged piece merges again: ab, then ab+c = abc (no competing bc since b is taken)
    const SpBpeEncoder f = toy_encoder({{"ab", -1}, {"bc", -2}, {"abc", -3}});
    CHECK(enc(f, "abc") == std::vector<int>{261});
    CHECK(enc(f, "abcabc") == std::vector<int>{261, 261});
    CHECK(enc(f, "") == std::vector<int>{});
}

TEST_CASE("sp encoder: spaces, byte fallback, invalid UTF-8, newlines", "[sp_encoder]") {
    // ids: ▁ 259, ▁t 260, he 261, ▁the 262, ▁▁ 263, é 264
    const SpBpeEncoder e = toy_encoder(
        {{kSpace, -1}, {kSpace + "t", -2}, {"he", -3}, {kSpace + "the", -4}, {kSpace + kSpace, -5}, {"\xC3\xA9", -6}});
    CHECK(enc(e, " the") == std::vector<int>{262});
    CHECK(enc(e, "the") == std::vector<int>{kByte0 + 't', 261});  // no dummy prefix
    CHECK(enc(e, "  the") == std::vector<int>{259, 262});         // ▁ ▁the: ▁t (-2) beats ▁▁ (-5)
    CHECK(enc(e, "   ") == std::vector<int>{263, 259});           // spaces kept, not collapsed
    CHECK(enc(e, kSpace + "the") == enc(e, " the"));              // a literal U+2581 is a space
    CHECK(enc(e, "\xC3\xA9") == std::vector<int>{264});           // é is a piece
    // ü (C3 BC) is no piece: its two bytes; tab is no piece: byte 09
    CHECK(enc(e, "\xC3\xBC\t") == std::vector<int>{kByte0 + 0xC3, kByte0 + 0xBC, kByte0 + 9});
    // invalid UTF-8: each bad byte becomes U+FFFD (EF BF BD), as the library's normalizer does
    const std::vector<int> fffd{kByte0 + 0xEF, kByte0 + 0xBF, kByte0 + 0xBD};
    CHECK(enc(e, "\xFF") == fffd);
    CHECK(enc(e, "\xC3\x28") == std::vector<int>{fffd[0], fffd[1], fffd[2], kByte0 + '('});  // truncated é
    CHECK(enc(e, "\xED\xA0\x80") == std::vector<int>{fffd[0], fffd[1], fffd[2], fffd[0], fffd[1], fffd[2], fffd[0],
                                                     fffd[1], fffd[2]});  // surrogate: 3 bad bytes
    // newlines: lines encoded alone, joined by the "\n" piece (id 2); no piece spans a line
    CHECK(enc(e, "\n") == std::vector<int>{2});
    CHECK(enc(e, " the\n the") == std::vector<int>{262, 2, 262});
    CHECK(enc(e, "\n\n the\n") == std::vector<int>{2, 2, 262, 2});
    CHECK(enc(e, "t\r\nhe") == std::vector<int>{kByte0 + 't', kByte0 + '\r', 2, 261});
}

TEST_CASE("sp encoder: random strings equal the naive merge loop", "[sp_encoder]") {
    std::mt19937 rng(std::random_device{}());
    const std::vector<std::string> alphabet{"a", "b", "c", " ", "\xC3\xA9", "\xE2\x82\xAC", "\xFF", kSpace};
    for (int round = 0; round < 40; round++) {
        // a random vocabulary of 2..4-symbol strings with random (often tied) scores
        std::vector<std::pair<std::string, float>> normal;
        std::vector<std::string> seen;
        const int n = 5 + (int)(rng() % 30);
        for (int i = 0; i < n; i++) {
            std::string s;
            const int len = 2 + (int)(rng() % 3);
            for (int k = 0; k < len; k++) {
                const std::string c = alphabet[rng() % 5];  // only valid characters in pieces
                s += c == " " ? kSpace : c;
            }
            if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
            seen.push_back(s);
            normal.push_back({s, -(float)(rng() % 6)});
        }
        const auto pieces = toy_pieces(normal);
        const SpBpeEncoder e(llmc::parse_sp_model(toy_model_bytes(pieces), "toy"), "toy");
        for (int t = 0; t < 50; t++) {
            std::string text;
            const int len = (int)(rng() % 25);
            for (int k = 0; k < len; k++) text += alphabet[rng() % alphabet.size()];
            INFO("round " << round << " text '" << text << "'");
            REQUIRE(e.encode(text) == naive(pieces, text));
        }
    }
}

TEST_CASE("sp encoder: unsupported models are refused with one line", "[sp_encoder]") {
    auto refused = [](const std::vector<ToyPiece>& p, const ToySettings& st, const std::string& why) {
        INFO(why);
        CHECK_THROWS_WITH(SpBpeEncoder(llmc::parse_sp_model(toy_model_bytes(p, st), "toy"), "toy"),
                          Catch::Contains(why) && Catch::Contains("--prompt-ids"));
    };
    const auto ok = toy_pieces({{"ab", -1}});
    ToySettings st;
    st.model_type = 1;
    refused(ok, st, "not BPE");
    st = {};
    st.byte_fallback = -1;  // absent: default false
    refused(ok, st, "byte_fallback is off");
    st = {};
    st.charsmap = "xxxx";
    refused(ok, st, "not identity");
    st = {};
    st.add_dummy_prefix = -1;  // absent: default true
    refused(ok, st, "add_dummy_prefix is on");
    st = {};
    st.remove_extra_ws = 1;
    refused(ok, st, "remove_extra_whitespaces is on");
    st = {};
    st.escape_ws = 0;
    refused(ok, st, "escape_whitespaces is off");

    auto p = ok;
    p.push_back({"xy", -2, 5});
    refused(p, {}, "UNUSED");
    p = ok;
    p.push_back({"<sep>", 0, 4});
    refused(p, {}, "not the one newline piece");
    p = ok;
    p.erase(p.begin() + 3 + 0x20);  // no <0x20>
    refused(p, {}, "no byte piece for byte 32");
    p = ok;
    p.push_back({"ab", -3, 1});
    refused(p, {}, "repeats an earlier piece");
    p = ok;
    p[2].type = 1;  // "\n" a normal piece
    refused(p, {}, "no user-defined newline piece");
    p = ok;
    p[0].type = 3;
    refused(p, {}, "no UNKNOWN piece");
}

TEST_CASE("sp encoder: token bytes follow sp_token_bytes", "[sp_encoder]") {
    const SpBpeEncoder e = toy_encoder({{kSpace + "the", -1}, {"a" + kSpace + kSpace, -2}});
    CHECK(e.token_bytes(0) == "<unk>");
    CHECK(e.token_bytes(1) == "</s>");
    CHECK(e.token_bytes(2) == "\n");
    CHECK(e.token_bytes(kByte0 + 0xAB) == "\xAB");
    CHECK(e.token_bytes(kFirst) == " the");
    CHECK(e.token_bytes(kFirst + 1) == "a  ");
    CHECK(SpBpeEncoder::byte_of_piece("<0x0A>") == 10);
    CHECK(SpBpeEncoder::byte_of_piece("<0x0a>") == -1);
    CHECK(SpBpeEncoder::byte_of_piece("<0x0A") == -1);
}
