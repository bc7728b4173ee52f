// Text -> token ids for prompts (generate_gpt2_ls --prompt; docs/generation.md "Text prompts").
//
// GPT-2 byte-level BPE, giving exactly tiktoken's `encode_ordinary` for the "gpt2" encoding, with no
// dependency: the vocabulary is the data set's tokenizer.bin (llmc/text/tokenizer.h). In GPT-2 (and
// tiktoken's mergeable ranks) the merge rank of a byte string is its token id, so:
//   1. pre-tokenize: split the text with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (matched by hand below, alternative by alternative, leftmost-first like a regex engine;
//      \p{L}, \p{N}, \s from the generated table llmc/text/unicode_classes.h);
//   2. each piece that is a token is that token; otherwise start from its single bytes and merge,
//      again and again, the adjacent pair whose concatenation has the lowest rank (the leftmost
//      one on ties), until no adjacent pair is a token.
// "<|endoftext|>" in the text is plain text (encode_ordinary; so is every other string), as in
// data/prepare.py: only the EOT that encode_prompt() puts first is the special token.
//
// Invalid UTF-8 is kept, not replaced: each byte that does not begin a complete, valid UTF-8
// sequence (stray continuation bytes, truncated or overlong sequences, surrogates, > U+10FFFF) is
// one character of class Other (like a symbol) and its byte goes through BPE like any other, so
// decoding the ids gives back the input bytes exactly. Valid text never meets this rule.
#pragma once
#include <cstdint>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/text/tokenizer.h"
#include "llmc/text/unicode_classes.h"

namespace llmc {

// The class of code point `cp` in GPT-2's pattern: binary search in the generated ranges.
inline CharClass char_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof(kCharClassRanges) / sizeof(kCharClassRanges[0]);
    while (lo < hi) {  // first range with hi >= cp
        const size_t mid = (lo + hi) / 2;
        if (kCharClassRanges[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo < sizeof(kCharClassRanges) / sizeof(kCharClassRanges[0]) && kCharClassRanges[lo].lo <= cp)
        return (CharClass)kCharClassRanges[lo].cls;
    return CharClass::Other;
}

constexpr uint32_t kInvalidUtf8Byte = 0xFFFFFFFFu;  // code point of a character made of one invalid byte

// One character of the text: a code point of valid UTF-8, or one invalid byte (cp = kInvalidUtf8Byte).
struct TextChar {
    uint32_t cp;
    CharClass cls;
    size_t begin;  // byte offset in the text
};

// The characters of `s` (see the top of the file for invalid bytes).
inline std::vector<TextChar> utf8_chars(const std::string& s) {
    std::vector<TextChar> out;
    out.reserve(s.size());
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            out.push_back({c, char_class(c), i});
            i++;
            continue;
        }
        int len = 0;                         // total length of the sequence c starts
        unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        uint32_t cp = 0;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c == 0xE0) {
            len = 3;
            lo = 0xA0;
            cp = c & 0x0F;
        }  // no overlong 3-byte forms
        else if (c >= 0xE1 && c <= 0xEC) {
            len = 3;
            cp = c & 0x0F;
        } else if (c == 0xED) {
            len = 3;
            hi = 0x9F;
            cp = c & 0x0F;
        }  // no surrogates
        else if (c >= 0xEE && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c == 0xF0) {
            len = 4;
            lo = 0x90;
            cp = c & 0x07;
        }  // no overlong 4-byte forms
        else if (c >= 0xF1 && c <= 0xF3) {
            len = 4;
            cp = c & 0x07;
        } else if (c == 0xF4) {
            len = 4;
            hi = 0x8F;
            cp = c & 0x07;
        }  // nothing above U+10FFFF
        bool ok = len > 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++) {
            const unsigned char b = (unsigned char)s[i + (size_t)k];
            ok = b >= (k == 1 ? lo : 0x80) && b <= (k == 1 ? hi : 0xBF);
            cp = (cp << 6) | (b & 0x3F);
        }
        if (ok) {
            out.push_back({cp, char_class(cp), i});
            i += (size_t)len;
        } else {
            out.push_back({kInvalidUtf8Byte, CharClass::Other, i});
            i++;
        }
    }
    return out;
}

// GPT-2's pre-tokenizer: the pieces of `text` as byte ranges [begin, end), in order, covering it.
inline std::vector<std::pair<size_t, size_t>> gpt2_pretokenize(const std::string& text) {
    const std::vector<TextChar> ch = utf8_chars(text);
    const size_t n = ch.size();
    auto cp_at = [&](size_t k) { return k < n ? ch[k].cp : kInvalidUtf8Byte; };
    auto run_end = [&](size_t k, CharClass c) {  // end of the run of class c starting at k
        while (k < n && ch[k].cls == c) k++;
        return k;
    };
    std::vector<std::pair<size_t, size_t>> pieces;
    size_t i = 0;
    while (i < n) {
        size_t j = i;  // the match is characters [i, j)
        // 's|'t|'re|'ve|'m|'ll|'d   (case-sensitive, ASCII apostrophe only)
        if (ch[i].cp == '\'') {
            const uint32_t a = cp_at(i + 1), b = cp_at(i + 2);
            if (a == 's' || a == 't' || a == 'm' || a == 'd') j = i + 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) j = i + 3;
        }
        // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+': an optional U+0020, then a run of one class.
        // (A space is itself \s, so with no space in front the run starts at i.)
        if (j == i) {
            const size_t k = ch[i].cp == ' ' ? i + 1 : i;
            if (k < n && ch[k].cls != CharClass::Space) j = run_end(k, ch[k].cls);
        }
        // '\s+(?!\S)|\s+': a whitespace run; before a non-space character the last one is left
        // for the next piece (it becomes the ' ?' of a word), unless the run is that one character.
        if (j == i) {
            const size_t k = run_end(i, CharClass::Space);  // > i: ch[i] is Space here
            j = (k == n || k - i == 1) ? k : k - 1;
        }
        pieces.emplace_back(ch[i].begin, j < n ? ch[j].begin : text.size());
        i = j;
    }
    return pieces;
}

// Byte-level BPE whose merge rank of a byte string is its token id (GPT-2's vocabulary).
class Gpt2BpeEncoder {
public:
    // The GPT-2 vocabulary of tokenizer.bin: is_gpt2_vocabulary(tok) must hold, else InputError.
    explicit Gpt2BpeEncoder(const Tokenizer& tok) {
        std::string why;
        if (!is_gpt2_vocabulary(tok, &why))
            throw InputError("the tokenizer is not GPT-2's BPE vocabulary (" + why +
                             "); pass the tokenizer.bin of a --tokenizer gpt2 data set");
        std::vector<std::string> tokens((size_t)tok.vocab_size());
        for (int id = 0; id < tok.vocab_size(); id++) tokens[(size_t)id] = tok.decode(id);
        build(tokens, tok.eot_token());
    }

    // Any vocabulary with rank = id: every single byte must be a token; `special` (or -1) is left out
    // of the merges (like EOT). For tests with toy vocabularies.
    Gpt2BpeEncoder(const std::vector<std::string>& tokens, int special) { build(tokens, special); }

    // tiktoken's encode_ordinary.
    std::vector<int> encode(const std::string& text) const {
        std::vector<int> ids;
        ids.reserve(text.size() / 3 + 1);
        for (const auto& p : gpt2_pretokenize(text)) encode_piece(text.substr(p.first, p.second - p.first), ids);
        return ids;
    }

    // The tokens of one pre-tokenized piece, appended to `out`.
    void encode_piece(const std::string& piece, std::vector<int>& out) const {
        const int whole = rank(piece, 0, piece.size());
        if (whole >= 0) {  // tiktoken's shortcut: a piece that is a token is that token
            out.push_back(whole);
            return;
        }
        // The parts are bytes [k, end[k]) for the live starts k; the candidate merges (adjacent parts whose
        // concatenation is a token) wait in a min-heap by (rank, left start), so the leftmost lowest
        // merge is found in O(log n), not by a scan of all parts per merge (quadratic: minutes for a
        // 1 MB prompt of letters). A candidate is stale, and skipped, once one of its parts changed.
        const size_t n = piece.size();
        std::vector<size_t> end(n), prev(n);  // end[k] = 0: k is no longer a part's start
        for (size_t k = 0; k < n; k++) {
            end[k] = k + 1;
            prev[k] = k - 1;  // unused for k = 0 (the first part never merges into another)
        }
        struct Cand {
            int rank;
            size_t left, mid, right;  // parts [left, mid) and [mid, right)
        };
        auto later = [](const Cand& a, const Cand& b) {
            return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
        };
        std::priority_queue<Cand, std::vector<Cand>, decltype(later)> heap(later);
        auto consider = [&](size_t left) {  // part `left` joined with the part after it
            const size_t mid = end[left];
            if (mid >= n) return;
            const int r = rank(piece, left, end[mid]);
            if (r >= 0) heap.push({r, left, mid, end[mid]});
        };
        for (size_t k = 0; k + 1 < n; k++) consider(k);
        while (!heap.empty()) {
            const Cand c = heap.top();
            heap.pop();
            if (end[c.left] != c.mid || end[c.mid] != c.right) continue;  // stale
            end[c.left] = c.right;
            end[c.mid] = 0;
            if (c.right < n) prev[c.right] = c.left;
            if (c.left > 0) consider(prev[c.left]);
            consider(c.left);
        }
        for (size_t k = 0; k < n; k = end[k]) out.push_back(rank(piece, k, end[k]));
    }

    // GPT-2's tokenizer.bin: 50257 tokens, EOT 50256 = "<|endoftext|>", ids 0..255 the single bytes in
    // GPT-2's order (the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF, then the others in
    // increasing order), and no token of 255 bytes (the length limit of tokenizer.bin: it may have
    // been cut; GPT-2's longest has 128). Otherwise false, with the reason in *why.
    static bool is_gpt2_vocabulary(const Tokenizer& tok, std::string* why) {
        auto fail = [&](const std::string& w) {
            if (why) *why = w;
            return false;
        };
        if (!tok.present()) return fail("no tokenizer");
        if (tok.vocab_size() != 50257 || tok.eot_token() != 50256)
            return fail("vocabulary " + std::to_string(tok.vocab_size()) + ", EOT " + std::to_string(tok.eot_token()) +
                        "; GPT-2 has 50257 and 50256");
        if (tok.decode(50256) != "<|endoftext|>") return fail("token 50256 is not <|endoftext|>");
        std::vector<int> order;
        for (int b = '!'; b <= '~'; b++) order.push_back(b);
        for (int b = 0xA1; b <= 0xAC; b++) order.push_back(b);
        for (int b = 0xAE; b <= 0xFF; b++) order.push_back(b);
        for (int b = 0; b < 256; b++)
            if (b < '!' || (b > '~' && b < 0xA1) || b == 0xAD) order.push_back(b);
        for (int id = 0; id < 256; id++)
            if (tok.decode(id) != std::string(1, (char)order[(size_t)id]))
                return fail("token " + std::to_string(id) + " is not GPT-2's byte " +
                            std::to_string(order[(size_t)id]));
        for (int id = 0; id < tok.vocab_size(); id++)
            if (tok.decode(id).size() >= 255)
                return fail("token " + std::to_string(id) + " has 255 bytes, so it may have been cut");
        return true;
    }

private:
    std::unordered_map<std::string, int> ranks_;  // token bytes -> id (= merge rank)
    int byte_rank_[256];                          // id of each single byte

    void build(const std::vector<std::string>& tokens, int special) {
        ranks_.reserve(tokens.size());
        for (size_t id = 0; id < tokens.size(); id++) {
            if ((int)id == special) continue;
            auto ins = ranks_.emplace(tokens[id], (int)id);
            if (!ins.second)
                throw InputError("the tokenizer is not a BPE vocabulary: token " + std::to_string(id) +
                                 " repeats the bytes of token " + std::to_string(ins.first->second) +
                                 "; pass the tokenizer.bin of a --tokenizer gpt2 data set");
        }
        for (int b = 0; b < 256; b++) {
            auto it = ranks_.find(std::string(1, (char)b));
            if (it == ranks_.end())
                throw InputError("the tokenizer is not a byte-level BPE vocabulary: no token for byte " +
                                 std::to_string(b) + "; pass the tokenizer.bin of a --tokenizer gpt2 data set");
            byte_rank_[b] = it->second;
        }
    }

    // Id of bytes [a, b) of s, or -1.
    int rank(const std::string& s, size_t a, size_t b) const {
        if (b - a == 1) return byte_rank_[(unsigned char)s[a]];
        auto it = ranks_.find(s.substr(a, b - a));
        return it == ranks_.end() ? -1 : it->second;
    }
};

// True for a byte-level tokenizer.bin: 256 tokens, token i is the byte i.
inline bool is_byte_vocabulary(const Tokenizer& tok) {
    if (!tok.present() || tok.vocab_size() != 256) return false;
    for (int id = 0; id < 256; id++)
        if (tok.decode(id) != std::string(1, (char)id)) return false;
    return true;
}

// The prompt for `text`: the tokenizer's EOT (every document in the shards starts with it), then the
// text's tokens. GPT-2 BPE or byte-level tokenizers; others (SentencePiece, synthetic) -> InputError.
inline std::vector<int> encode_prompt(const Tokenizer& tok, const std::string& text) {
    if (!tok.present())
        throw InputError(
            "--prompt/--prompt-file need --tokenizer: the tokenizer.bin of the model's data set, to encode the text");
    std::vector<int> ids{tok.eot_token()};
    std::vector<int> body;
    if (Gpt2BpeEncoder::is_gpt2_vocabulary(tok, nullptr)) {
        body = Gpt2BpeEncoder(tok).encode(text);
    } else if (is_byte_vocabulary(tok)) {
        for (unsigned char c : text) body.push_back(c);
    } else {
        throw InputError("--prompt: this tokenizer (" + std::to_string(tok.vocab_size()) +
                         " tokens) is neither GPT-2 BPE nor byte-level; for a SentencePiece data set put its "
                         "tokenizer.model next to tokenizer.bin or pass --sp-model, else encode the text in python "
                         "and pass --prompt-ids (docs/generation.md, 'Text prompts')");
    }
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
}

}  // namespace llmc
