// Decoder for tokenizer.bin (llm.c's layout), used to print samples:
//   256 uint32 header (little-endian): [0] magic 20240328, [1] version (2; 1 is accepted),
//   [2] vocab size V, [3] EOT token id (version 2 only; version 1 means GPT-2's 50256);
//   then for each id 0 .. V-1: one uint8 length and that many bytes of the token.
// Tokens are raw bytes (a GPT-2 token may be part of a UTF-8 sequence); safe_printable()
// turns any byte string into valid UTF-8 for printing.
// A default-constructed Tokenizer is "absent" (no tokenizer.bin): decode() then writes ids as
// "<id>" so samples can still be printed.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/io/shard.h"  // shard_detail::File, open_or_throw, file_size

namespace llmc {

constexpr uint32_t kTokenizerMagic = 20240328;
constexpr int kTokenizerHeaderInts = 256;

class Tokenizer {
public:
    Tokenizer() = default;  // absent

    explicit Tokenizer(const std::string& path) : path_(path) {
        shard_detail::File f = shard_detail::open_or_throw(path, "rb", "tokenizer");
        const int64_t size = shard_detail::file_size(f.get(), path);
        const std::string where = "tokenizer '" + path + "': ";
        const std::string fix = "; regenerate it with data/prepare.py";
        uint32_t header[kTokenizerHeaderInts];
        if (size < kTokenizerHeaderInts * 4 ||
            std::fread(header, 4, kTokenizerHeaderInts, f.get()) != (size_t)kTokenizerHeaderInts) {
            throw InputError(where + "file is " + std::to_string(size) + " bytes, shorter than the " +
                             std::to_string(kTokenizerHeaderInts * 4) + "-byte header" + fix);
        }
        if (header[0] != kTokenizerMagic) {
            throw InputError(where + "bad magic " + std::to_string(header[0]) + " at byte offset 0 (expected " +
                             std::to_string(kTokenizerMagic) + "); it is not a tokenizer.bin" + fix);
        }
        const uint32_t version = header[1];
        if (version != 1 && version != 2) {
            throw InputError(where + "unknown version " + std::to_string(version) +
                             " at byte offset 4 (expected 1 or 2)" + fix);
        }
        if (header[2] == 0 || header[2] > (uint32_t)INT32_MAX) {
            throw InputError(where + "vocabulary size " + std::to_string(header[2]) + " at byte offset 8 is invalid" +
                             fix);
        }
        const int V = (int)header[2];
        const uint32_t eot = version == 1 ? 50256u : header[3];
        if (eot >= (uint32_t)V) {
            throw InputError(where + "EOT token " + std::to_string(eot) +
                             (version == 1 ? " (implied by version 1)" : " at byte offset 12") +
                             " is not below the vocabulary size " + std::to_string(V) + fix);
        }
        eot_ = (int)eot;
        int64_t offset = kTokenizerHeaderInts * 4;
        if (V > size - offset) {  // every record has its length byte: refuse before allocating V strings
            throw InputError(where + "vocabulary size " + std::to_string(V) + " at byte offset 8 needs at least " +
                             std::to_string(V) + " bytes of token records but the file has " +
                             std::to_string(size - offset) + " after the header; the file is truncated or corrupt" +
                             fix);
        }
        tokens_.resize((size_t)V);
        for (int id = 0; id < V; id++) {
            unsigned char len = 0;
            if (std::fread(&len, 1, 1, f.get()) != 1) {
                throw InputError(where + "truncated at byte offset " + std::to_string(offset) + " (length of token " +
                                 std::to_string(id) + " of " + std::to_string(V) + ")" + fix);
            }
            tokens_[(size_t)id].resize(len);
            if (len > 0 && std::fread(&tokens_[(size_t)id][0], 1, len, f.get()) != len) {
                throw InputError(where + "truncated at byte offset " + std::to_string(offset + 1) +
                                 " (bytes of token " + std::to_string(id) + " of " + std::to_string(V) + ")" + fix);
            }
            offset += 1 + len;
        }
        if (offset != size) {
            throw InputError(where + std::to_string(size - offset) +
                             " unexpected bytes after the last token at byte offset " + std::to_string(offset) +
                             "; the header's vocabulary size " + std::to_string(V) + " does not match the file" + fix);
        }
    }

    // A missing file gives an absent tokenizer (with a warning in *warning); a corrupt one throws.
    static Tokenizer load_or_absent(const std::string& path, std::string* warning) {
        FILE* probe = std::fopen(path.c_str(), "rb");
        if (!probe) {
            if (warning) {
                *warning =
                    "no tokenizer at '" + path + "'; samples are printed as token ids (make it with data/prepare.py)";
            }
            return Tokenizer();
        }
        std::fclose(probe);
        return Tokenizer(path);
    }

    bool present() const { return !tokens_.empty(); }
    int vocab_size() const { return (int)tokens_.size(); }
    int eot_token() const { return eot_; }

    // Raw bytes of token `id` (may be an incomplete UTF-8 sequence).
    std::string decode(int id) const {
        if (!present()) return "<" + std::to_string(id) + ">";
        if (id < 0 || id >= vocab_size()) {
            throw InputError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                             std::to_string(vocab_size()) + " of tokenizer '" + path_ +
                             "'; use the tokenizer.bin that matches the model and shards");
        }
        return tokens_[(size_t)id];
    }
    std::string decode(const int* ids, size_t n) const {
        std::string out;
        for (size_t i = 0; i < n; i++) out += decode(ids[i]);
        return out;
    }

private:
    std::string path_;
    std::vector<std::string> tokens_;  // (V,) raw bytes of each token
    int eot_ = -1;
};

// `s` with every invalid UTF-8 sequence replaced by U+FFFD (one per maximal invalid subpart, the
// Unicode recommendation that Python's errors="replace" also follows). Valid text is unchanged.
inline std::string safe_printable(const std::string& s) {
    static const char kReplacement[] = "\xEF\xBF\xBD";
    std::string out;
    out.reserve(s.size());
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            out += (char)c;
            i++;
            continue;
        }
        int len = 0;                         // total length of the sequence c starts
        unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c == 0xE0) {
            len = 3;
            lo = 0xA0;
        }  // no overlong 3-byte forms
        else if (c >= 0xE1 && c <= 0xEC) {
            len = 3;
        } else if (c == 0xED) {
            len = 3;
            hi = 0x9F;
        }  // no surrogates
        else if (c >= 0xEE && c <= 0xEF) {
            len = 3;
        } else if (c == 0xF0) {
            len = 4;
            lo = 0x90;
        }  // no overlong 4-byte forms
        else if (c >= 0xF1 && c <= 0xF3) {
            len = 4;
        } else if (c == 0xF4) {
            len = 4;
            hi = 0x8F;
        }  // nothing above U+10FFFF
        if (len == 0) {
            out += kReplacement;
            i++;
            continue;
        }                  // 0x80..0xC1, 0xF5..0xFF
        size_t j = i + 1;  // consume the valid prefix of the sequence
        for (int k = 1; k < len && j < n; k++, j++) {
            const unsigned char b = (unsigned char)s[j];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
        }
        if ((int)(j - i) == len) out.append(s, i, (size_t)len);
        else out += kReplacement;  // incomplete: one U+FFFD for the consumed prefix
        i = j;
    }
    return out;
}

}  // namespace llmc
