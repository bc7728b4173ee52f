// Text -> token ids with a SentencePiece BPE model, for prompts of data sets prepared with
// `data/prepare.py --tokenizer sp` (generate_gpt2_ls --prompt; docs/generation.md "Text prompts").
// No dependency: the data set's tokenizer.model (a serialized sentencepiece.ModelProto) is read with
// the tiny protobuf reader below, and encoding repeats what the SentencePiece library does for the
// settings of data/text_tokenizers.py train_sentencepiece, giving the ids of its sp_encode():
//
//   1. the text is cut at every '\n'; each line is encoded alone and the lines are joined with the
//      id of the user-defined piece "\n" (sp_encode does this; "\n" is the only user-defined piece);
//   2. normalization (identity rule, no dummy prefix, no whitespace removal): every U+0020 becomes
//      U+2581 ("▁"); each byte that does not start a valid UTF-8 sequence becomes U+FFFD (as the
//      library's normalizer does: python cannot pass such bytes in a str, but sp.encode(bytes) can);
//      nothing else changes;
//   3. BPE: start from the characters of the line and, again and again, merge the adjacent pair whose
//      concatenation is a NORMAL or USER_DEFINED piece with the highest score, the leftmost on ties,
//      until no adjacent pair is such a piece;
//   4. each final symbol is its piece's id (CONTROL/UNKNOWN/BYTE pieces are looked up first, as the
//      library does); a symbol that is no piece (a character outside the vocabulary) becomes the
//      byte pieces <0xNN> of its UTF-8 bytes (byte fallback).
//
// Settings that change encoding and are required (anything else is refused with InputError):
// model_type BPE, byte_fallback on with all 256 byte pieces, an empty precompiled_charsmap (the
// "identity" rule), add_dummy_prefix off, remove_extra_whitespaces off, escape_whitespaces on, no
// UNUSED pieces, exactly one USER_DEFINED piece "\n", exactly one UNKNOWN piece. Trainer-only
// settings (split_digits, split_by_whitespace, allow_whitespace_only_pieces, character_coverage,
// max_sentencepiece_length, ...) shape the vocabulary but not the encoding, so they are not checked.
//
// Protobuf fields read (sentencepiece_model.proto; proto2, so an absent field has its default):
//   ModelProto:     1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece:  1 piece (string), 2 score (float), 3 type (enum, default NORMAL=1;
//                   UNKNOWN=2 CONTROL=3 USER_DEFINED=4 UNUSED=5 BYTE=6)
//   TrainerSpec:    3 model_type (default UNIGRAM=1; BPE=2), 35 byte_fallback (default false)
//   NormalizerSpec: 1 name, 2 precompiled_charsmap (bytes), 3 add_dummy_prefix (default true),
//                   4 remove_extra_whitespaces (default true), 5 escape_whitespaces (default true)
// Every other field is skipped by its wire type.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llmc/text/bpe_encoder.h"  // utf8_chars, kInvalidUtf8Byte, Gpt2BpeEncoder, is_byte_vocabulary
#include "llmc/core/error.h"
#include "llmc/text/tokenizer.h"

namespace llmc {

// ---------------------------------------------------------------------------------------------
// A minimal protobuf wire-format reader: varints, fixed32/64 and length-delimited fields.

class ProtoReader {
public:
    ProtoReader(const char* data, size_t size, std::string what)
        : p_(data), end_(data + size), what_(std::move(what)) {}

    bool done() const { return p_ == end_; }

    // The next field's number and wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
    void next_key(uint32_t* field, uint32_t* wire) {
        const uint64_t key = varint();
        *field = (uint32_t)(key >> 3);
        *wire = (uint32_t)(key & 7);
        if (*field == 0 || (*wire != 0 && *wire != 1 && *wire != 2 && *wire != 5))
            fail("unsupported field key " + std::to_string(key));
    }

    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 70; shift += 7) {
            if (p_ == end_) fail("truncated varint");
            const unsigned char b = (unsigned char)*p_++;
            v |= (uint64_t)(b & 0x7F) << shift;
            if (b < 0x80) return v;
        }
        fail("varint longer than 10 bytes");
        return 0;
    }

    float fixed32_float() {
        const std::string_view b = take(4);
        const uint32_t u = (uint32_t)(unsigned char)b[0] | (uint32_t)(unsigned char)b[1] << 8 |
                           (uint32_t)(unsigned char)b[2] << 16 | (uint32_t)(unsigned char)b[3] << 24;
        float f;
        static_assert(sizeof(f) == 4, "float must be 4 bytes");
        std::memcpy(&f, &u, 4);
        return f;
    }

    std::string_view bytes() { return take((size_t)varint()); }

    // Skips the value of a field of wire type `wire`.
    void skip(uint32_t wire) {
        if (wire == 0) varint();
        else if (wire == 1) take(8);
        else if (wire == 2) bytes();
        else take(4);
    }

    // Value of a field that must have wire type `want`.
    void expect(uint32_t wire, uint32_t want, const char* name) {
        if (wire != want) fail(std::string("field ") + name + " has wire type " + std::to_string(wire));
    }

    [[noreturn]] void fail(const std::string& why) const {
        throw InputError(what_ + ": not a SentencePiece model (" + why +
                         "); pass the tokenizer.model that "
                         "data/prepare.py --tokenizer sp wrote next to the shards");
    }

private:
    const char* p_;
    const char* end_;
    std::string what_;

    std::string_view take(size_t n) {
        if ((size_t)(end_ - p_) < n) fail("truncated field");
        std::string_view s(p_, n);
        p_ += n;
        return s;
    }
};

// ---------------------------------------------------------------------------------------------
// The parts of a SentencePiece ModelProto that encoding depends on.

enum class SpType : int { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct SpPiece {
    std::string piece;
    float score = 0.0f;
    SpType type = SpType::Normal;
};

struct SpModel {
    std::vector<SpPiece> pieces;       // id = index
    int model_type = 1;                // TrainerSpec.model_type: 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR
    bool byte_fallback = false;        // TrainerSpec.byte_fallback
    std::string normalizer_name;       // NormalizerSpec.name
    std::string precompiled_charsmap;  // NormalizerSpec.precompiled_charsmap (empty = identity)
    bool add_dummy_prefix = true;      // NormalizerSpec defaults
    bool remove_extra_whitespaces = true;
    bool escape_whitespaces = true;
};

// Parses the serialized ModelProto `data`; `what` names it in errors.
inline SpModel parse_sp_model(const std::string& data, const std::string& what) {
    SpModel m;
    ProtoReader r(data.data(), data.size(), what);
    uint32_t f, w;
    while (!r.done()) {
        r.next_key(&f, &w);
        if (f == 1) {  // pieces
            r.expect(w, 2, "pieces");
            const std::string_view sub = r.bytes();
            ProtoReader s(sub.data(), sub.size(), what);
            SpPiece p;
            while (!s.done()) {
                s.next_key(&f, &w);
                if (f == 1) {
                    s.expect(w, 2, "piece");
                    p.piece = std::string(s.bytes());
                } else if (f == 2) {
                    s.expect(w, 5, "score");
                    p.score = s.fixed32_float();
                } else if (f == 3) {
                    s.expect(w, 0, "type");
                    const uint64_t t = s.varint();
                    if (t < 1 || t > 6) s.fail("piece type " + std::to_string(t));
                    p.type = (SpType)t;
                } else s.skip(w);
            }
            m.pieces.push_back(std::move(p));
        } else if (f == 2) {  // trainer_spec
            r.expect(w, 2, "trainer_spec");
            const std::string_view sub = r.bytes();
            ProtoReader s(sub.data(), sub.size(), what);
            while (!s.done()) {
                s.next_key(&f, &w);
                if (f == 3) {
                    s.expect(w, 0, "model_type");
                    m.model_type = (int)s.varint();
                } else if (f == 35) {
                    s.expect(w, 0, "byte_fallback");
                    m.byte_fallback = s.varint() != 0;
                } else s.skip(w);
            }
        } else if (f == 3) {  // normalizer_spec
            r.expect(w, 2, "normalizer_spec");
            const std::string_view sub = r.bytes();
            ProtoReader s(sub.data(), sub.size(), what);
            while (!s.done()) {
                s.next_key(&f, &w);
                if (f == 1) {
                    s.expect(w, 2, "name");
                    m.normalizer_name = std::string(s.bytes());
                } else if (f == 2) {
                    s.expect(w, 2, "precompiled_charsmap");
                    m.precompiled_charsmap = std::string(s.bytes());
                } else if (f == 3) {
                    s.expect(w, 0, "add_dummy_prefix");
                    m.add_dummy_prefix = s.varint() != 0;
                } else if (f == 4) {
                    s.expect(w, 0, "remove_extra_whitespaces");
                    m.remove_extra_whitespaces = s.varint() != 0;
                } else if (f == 5) {
                    s.expect(w, 0, "escape_whitespaces");
                    m.escape_whitespaces = s.varint() != 0;
                } else s.skip(w);
            }
        } else {
            r.skip(w);
        }
    }
    if (m.pieces.empty()) r.fail("no pieces");
    return m;
}

inline SpModel read_sp_model(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
        throw InputError("SentencePiece model '" + path +
                         "' cannot be opened; pass the tokenizer.model of the data set");
    std::string data;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) throw InputError("SentencePiece model '" + path + "' could not be read; check the file");
    return parse_sp_model(data, "'" + path + "'");
}

// ---------------------------------------------------------------------------------------------
// The encoder.

class SpBpeEncoder {
public:
    // `what` names the model in errors. Refuses models whose settings this encoder does not implement.
    explicit SpBpeEncoder(SpModel model, const std::string& what = "SentencePiece model") : m_(std::move(model)) {
        auto refuse = [&](const std::string& why) {
            throw InputError(what + ": " + why +
                             "; only models trained by data/text_tokenizers.py "
                             "train_sentencepiece can encode prompts here (else pass --prompt-ids)");
        };
        if (m_.model_type != 2) refuse("model_type " + std::to_string(m_.model_type) + " is not BPE (2)");
        if (!m_.byte_fallback) refuse("byte_fallback is off");
        if (!m_.precompiled_charsmap.empty())
            refuse("normalization rule '" + m_.normalizer_name + "' is not identity (it has a charsmap)");
        if (m_.add_dummy_prefix) refuse("add_dummy_prefix is on");
        if (m_.remove_extra_whitespaces) refuse("remove_extra_whitespaces is on");
        if (!m_.escape_whitespaces) refuse("escape_whitespaces is off");
        for (int b = 0; b < 256; b++) byte_id_[b] = -1;
        for (size_t i = 0; i < m_.pieces.size(); i++) {
            const SpPiece& p = m_.pieces[i];
            const int id = (int)i;
            if (p.piece.empty()) refuse("piece " + std::to_string(id) + " is empty");
            const bool mergeable = p.type == SpType::Normal || p.type == SpType::UserDefined;
            if (p.type == SpType::Unused) refuse("piece " + std::to_string(id) + " is UNUSED");
            auto& map = mergeable ? pieces_ : reserved_;
            if (!map.emplace(std::string_view(p.piece), id).second)
                refuse("piece " + std::to_string(id) + " repeats an earlier piece");
            if (p.type == SpType::UserDefined) {
                if (p.piece != "\n" || newline_id_ >= 0)
                    refuse("user-defined piece " + std::to_string(id) + " is not the one newline piece");
                newline_id_ = id;
            }
            if (p.type == SpType::Unknown) {
                if (unk_id_ >= 0) refuse("two UNKNOWN pieces");
                unk_id_ = id;
            }
            if (p.type == SpType::Byte) {
                const int b = byte_of_piece(p.piece);
                if (b < 0 || byte_id_[b] >= 0) refuse("byte piece " + std::to_string(id) + " is not a new <0xNN>");
                byte_id_[b] = id;
            }
        }
        if (unk_id_ < 0) refuse("no UNKNOWN piece");
        if (newline_id_ < 0) refuse("no user-defined newline piece");
        for (int b = 0; b < 256; b++)
            if (byte_id_[b] < 0) refuse("no byte piece for byte " + std::to_string(b));
    }

    const SpModel& model() const { return m_; }
    int vocab_size() const { return (int)m_.pieces.size(); }
    int newline_id() const { return newline_id_; }

    // data/text_tokenizers.py sp_encode(): the lines' ids joined by the newline piece.
    std::vector<int> encode(const std::string& text) const {
        std::vector<int> ids;
        ids.reserve(text.size() / 3 + 1);
        size_t start = 0;
        for (;;) {
            const size_t nl = text.find('\n', start);
            encode_line(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start), ids);
            if (nl == std::string::npos) break;
            ids.push_back(newline_id_);
            start = nl + 1;
        }
        return ids;
    }

    // One line (no '\n'): normalize, BPE, byte fallback; ids appended to `out`.
    void encode_line(const std::string& line, std::vector<int>& out) const {
        // normalized text and its characters: sym[k] = bytes [begin[k], begin[k] + len[k])
        std::string norm;
        norm.reserve(line.size() * 3 / 2 + 3);
        struct Sym {
            size_t begin, len;
            int prev, next;  // neighbours among live symbols (-1: none)
        };
        std::vector<Sym> sym;
        const std::vector<TextChar> ch = utf8_chars(line);
        for (size_t k = 0; k < ch.size(); k++) {
            const size_t b = ch[k].begin, e = k + 1 < ch.size() ? ch[k + 1].begin : line.size();
            const size_t at = norm.size();
            if (ch[k].cp == kInvalidUtf8Byte) norm += "\xEF\xBF\xBD";  // U+FFFD
            else if (ch[k].cp == ' ') norm += "\xE2\x96\x81";          // U+2581
            else norm.append(line, b, e - b);
            sym.push_back({at, norm.size() - at, (int)k - 1, k + 1 < ch.size() ? (int)k + 1 : -1});
        }
        if (sym.empty()) return;
        const std::string_view nv(norm);

        // Candidate merges, best first: highest score, then leftmost. A candidate is stale (skipped)
        // once one of its symbols was merged into another (len 0) or grew (the lengths differ).
        struct Cand {
            float score;
            int left, right;
            size_t len;  // bytes of the merged piece
        };
        auto worse = [](const Cand& a, const Cand& b) {
            return a.score < b.score || (a.score == b.score && a.left > b.left);
        };
        std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> queue(worse);
        auto consider = [&](int l, int r) {
            if (l < 0 || r < 0) return;
            const size_t len = sym[(size_t)l].len + sym[(size_t)r].len;
            auto it = pieces_.find(nv.substr(sym[(size_t)l].begin, len));
            if (it != pieces_.end()) queue.push({m_.pieces[(size_t)it->second].score, l, r, len});
        };
        for (size_t k = 1; k < sym.size(); k++) consider((int)k - 1, (int)k);
        while (!queue.empty()) {
            const Cand c = queue.top();
            queue.pop();
            Sym& l = sym[(size_t)c.left];
            Sym& r = sym[(size_t)c.right];
            if (l.len == 0 || r.len == 0 || l.len + r.len != c.len) continue;  // stale
            l.len += r.len;
            r.len = 0;
            l.next = r.next;
            if (r.next >= 0) sym[(size_t)r.next].prev = c.left;
            consider(l.prev, c.left);
            consider(c.left, l.next);
        }
        for (int k = 0; k >= 0; k = sym[(size_t)k].next) {
            const std::string_view w = nv.substr(sym[(size_t)k].begin, sym[(size_t)k].len);
            const int id = piece_id(w);
            if (id == unk_id_) {
                for (unsigned char b : w) out.push_back(byte_id_[b]);
            } else {
                out.push_back(id);
            }
        }
    }

    // The id of piece `w` (reserved pieces first, as the library looks them up), else the UNKNOWN id.
    int piece_id(std::string_view w) const {
        auto it = reserved_.find(w);
        if (it != reserved_.end()) return it->second;
        it = pieces_.find(w);
        return it != pieces_.end() ? it->second : unk_id_;
    }

    // The bytes data/text_tokenizers.py sp_token_bytes() writes into tokenizer.bin for id `id`.
    std::string token_bytes(int id) const {
        const SpPiece& p = m_.pieces[(size_t)id];
        if (p.type == SpType::Byte) return std::string(1, (char)byte_of_piece(p.piece));
        if (p.type == SpType::Control || p.type == SpType::Unknown) return p.piece;
        std::string s;
        for (size_t i = 0; i < p.piece.size(); i++) {
            if (p.piece.compare(i, 3, "\xE2\x96\x81") == 0) {
                s += ' ';
                i += 2;
            } else s += p.piece[i];
        }
        return s;
    }

    // InputError unless `tok` is the tokenizer.bin data/prepare.py wrote with this model: same size,
    // the same bytes for every id, EOT a CONTROL piece.
    void check_tokenizer(const Tokenizer& tok, const std::string& model_what) const {
        const std::string fix = "; pass the tokenizer.model and tokenizer.bin of the same data set";
        if (tok.vocab_size() != vocab_size())
            throw InputError(model_what + " has " + std::to_string(vocab_size()) + " pieces but the tokenizer.bin " +
                             std::to_string(tok.vocab_size()) + " tokens" + fix);
        const int eot = tok.eot_token();
        if (eot < 0 || eot >= vocab_size() || m_.pieces[(size_t)eot].type != SpType::Control)
            throw InputError(model_what + ": the tokenizer.bin's EOT " + std::to_string(eot) +
                             " is not a control piece" + fix);
        for (int id = 0; id < vocab_size(); id++)
            if (tok.decode(id) != token_bytes(id).substr(0, 255))
                throw InputError(model_what + ": piece " + std::to_string(id) + " differs from token " +
                                 std::to_string(id) + " of the tokenizer.bin" + fix);
    }

    // "<0x4A>" -> 0x4A; anything else -> -1.
    static int byte_of_piece(const std::string& s) {
        auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
        if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
        const int hi = hex(s[3]), lo = hex(s[4]);
        return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
    }

private:
    SpModel m_;
    std::unordered_map<std::string_view, int> pieces_;    // NORMAL and USER_DEFINED pieces (views into m_)
    std::unordered_map<std::string_view, int> reserved_;  // CONTROL, UNKNOWN and BYTE pieces
    int byte_id_[256];
    int unk_id_ = -1;
    int newline_id_ = -1;
};

// ---------------------------------------------------------------------------------------------
// Picking the model for generate_gpt2_ls.

// The SentencePiece model to encode prompts with: `explicit_path` if given, else the tokenizer.model
// next to `tokenizer_path` when that file exists and `tok` is neither GPT-2 BPE nor byte-level
// (data/prepare.py --tokenizer sp writes both files into the shard directory); "" = none.
inline std::string sp_model_for(const std::string& explicit_path, const std::string& tokenizer_path,
                                const Tokenizer& tok) {
    if (!explicit_path.empty()) return explicit_path;
    if (tokenizer_path.empty() || !tok.present() || is_byte_vocabulary(tok) ||
        Gpt2BpeEncoder::is_gpt2_vocabulary(tok, nullptr))
        return "";
    const size_t slash = tokenizer_path.find_last_of('/');
    const std::string path =
        (slash == std::string::npos ? std::string() : tokenizer_path.substr(0, slash + 1)) + "tokenizer.model";
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return "";
    std::fclose(f);
    return path;
}

// The prompt for `text` with a SentencePiece data set: the tokenizer's EOT (</s>; every document in
// the shards starts with it), then sp_encode(text). The model must match `tok` (check_tokenizer).
inline std::vector<int> encode_prompt_sp(const Tokenizer& tok, const std::string& model_path, const std::string& text) {
    if (!tok.present())
        throw InputError(
            "--prompt/--prompt-file need --tokenizer: the tokenizer.bin of the model's data set, to encode the text");
    const std::string what = "SentencePiece model '" + model_path + "'";
    const SpBpeEncoder enc(read_sp_model(model_path), what);
    enc.check_tokenizer(tok, what);
    std::vector<int> ids{tok.eot_token()};
    const std::vector<int> body = enc.encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
}

}  // namespace llmc
