// Token shards in llm.c's format: a header of 256 int32 (little-endian), then the tokens.
//   header[0] = 20240520 (magic), header[1] = version (1: uint16 tokens, 2: uint32 tokens),
//   header[2] = number of tokens N; the file is exactly 1024 + N * (2 or 4) bytes.
// Every problem is reported as an llmc::InputError with one line naming the file, the byte or
// token offset where it applies, and the fix. The host is assumed little-endian (x86, ARM).
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "llmc/core/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llmc/io/shard.h reads little-endian files with plain fread: a big-endian host is not supported"
#endif

namespace llmc {

constexpr int kShardMagic = 20240520;
constexpr int kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

struct ShardHeader {
    int version;         // 1: uint16 tokens, 2: uint32 tokens
    int64_t num_tokens;  // N > 0
};

namespace shard_detail {

struct FileCloser {
    void operator()(FILE* f) const {
        if (f) std::fclose(f);
    }
};
using File = std::unique_ptr<FILE, FileCloser>;

// A directory opens as a FILE on Linux (its size then reads as LONG_MAX): named as such, with the data
// set's file inside it when there is one.
inline File open_or_throw(const std::string& path, const char* mode, const char* what) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        const std::string inside = (std::filesystem::path(path) / "tokenizer.bin").string();
        const bool tokenizer = std::string(what) == "tokenizer";
        throw InputError(std::string(what) + " '" + path + "' is a directory; give a file" +
                         (tokenizer && std::filesystem::is_regular_file(inside, ec) ? ": " + inside : std::string()) +
                         (std::string(what) == "shard" ? " (a shard pattern names files: 'DIR/train_*.bin')" : ""));
    }
    File f(std::fopen(path.c_str(), mode));
    if (!f) {
        throw InputError(std::string("cannot open ") + what + " '" + path + "': " + std::strerror(errno) +
                         "; check the path (data/prepare.py makes shards and tokenizer.bin)");
    }
    return f;
}

inline int64_t file_size(FILE* f, const std::string& path) {
    if (std::fseek(f, 0, SEEK_END) != 0) throw InputError("cannot seek in '" + path + "'; is it a regular file?");
    long size = std::ftell(f);
    if (size < 0) throw InputError("cannot get the size of '" + path + "'; is it a regular file?");
    std::rewind(f);
    return (int64_t)size;
}

inline int token_bytes(int version) { return version == 1 ? 2 : 4; }

}  // namespace shard_detail

// Reads and validates the header of the shard at `path` (magic, version, token count > 0, file
// size == 1024 + N * bytes per token). Does not read the tokens.
inline ShardHeader read_shard_header(const std::string& path) {
    shard_detail::File f = shard_detail::open_or_throw(path, "rb", "shard");
    const int64_t size = shard_detail::file_size(f.get(), path);
    const std::string where = "shard '" + path + "': ";
    if (size < kShardHeaderBytes) {
        throw InputError(where + "file is " + std::to_string(size) + " bytes, shorter than the " +
                         std::to_string(kShardHeaderBytes) +
                         "-byte header; the file is truncated or not a shard, regenerate it with data/prepare.py");
    }
    int32_t header[kShardHeaderInts];
    if (std::fread(header, 4, kShardHeaderInts, f.get()) != (size_t)kShardHeaderInts) {
        throw InputError(where + "could not read the header; regenerate it with data/prepare.py");
    }
    if (header[0] != kShardMagic) {
        throw InputError(where + "bad magic " + std::to_string(header[0]) + " at byte offset 0 (expected " +
                         std::to_string(kShardMagic) +
                         "); it is not a token shard, regenerate it with data/prepare.py");
    }
    const int version = header[1];
    if (version != 1 && version != 2) {
        throw InputError(
            where + "unknown version " + std::to_string(version) +
            " at byte offset 4 (expected 1 = uint16 or 2 = uint32 tokens); regenerate it with data/prepare.py");
    }
    const int64_t n = header[2];
    if (n < 0) {  // a count of 2^31 or more (as uint32): no shard holds that many
        throw InputError(where + "header token count " + std::to_string((uint32_t)header[2]) +
                         " at byte offset 8 is over the limit of 2^31-1 tokens per shard; the file is corrupt, "
                         "regenerate it with data/prepare.py");
    }
    if (n == 0) {
        throw InputError(
            where + "header token count is " + std::to_string(n) +
            " at byte offset 8 (zero tokens); remove the empty shard or regenerate it with data/prepare.py");
    }
    const int64_t expected = kShardHeaderBytes + n * shard_detail::token_bytes(version);
    if (size != expected) {
        throw InputError(where + "file size " + std::to_string(size) + " bytes does not match the header's " +
                         std::to_string(n) + " version-" + std::to_string(version) + " tokens (expected " +
                         std::to_string(expected) +
                         " bytes); the file is truncated or corrupt, regenerate it with data/prepare.py");
    }
    return ShardHeader{version, n};
}

// Reads all tokens of the shard at `path` (validating the header) and checks every id is
// < vocab_size; the error names the token offset (and its byte offset) of the first bad id.
inline std::vector<uint32_t> read_shard_tokens(const std::string& path, int vocab_size) {
    const ShardHeader h = read_shard_header(path);
    shard_detail::File f = shard_detail::open_or_throw(path, "rb", "shard");
    const int tb = shard_detail::token_bytes(h.version);
    std::vector<uint32_t> tokens((size_t)h.num_tokens);
    bool ok = std::fseek(f.get(), kShardHeaderBytes, SEEK_SET) == 0;
    if (ok && h.version == 1) {
        std::vector<uint16_t> raw((size_t)h.num_tokens);
        ok = std::fread(raw.data(), 2, raw.size(), f.get()) == raw.size();
        for (size_t i = 0; i < raw.size(); i++) tokens[i] = raw[i];
    } else if (ok) {
        ok = std::fread(tokens.data(), 4, tokens.size(), f.get()) == tokens.size();
    }
    if (!ok) throw InputError("shard '" + path + "': could not read its tokens; regenerate it with data/prepare.py");
    for (size_t i = 0; i < tokens.size(); i++) {
        if (tokens[i] >= (uint32_t)vocab_size) {
            throw InputError(
                "shard '" + path + "': token id " + std::to_string(tokens[i]) + " at token offset " +
                std::to_string(i) + " (byte offset " + std::to_string(kShardHeaderBytes + (int64_t)i * tb) +
                ") is >= the model's vocabulary size " + std::to_string(vocab_size) +
                "; use a vocabulary size that matches the shards or regenerate them with the model's tokenizer");
        }
    }
    return tokens;
}

// Writes `tokens` as a shard (version 1: uint16 tokens, every id must be <= 65535; version 2:
// uint32 tokens). Used by tests and tools; data/prepare.py writes the same format from Python.
inline void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int version) {
    if (version != 1 && version != 2) {
        throw InputError("write_shard '" + path + "': version " + std::to_string(version) +
                         " is not 1 (uint16) or 2 (uint32); pass 1 or 2");
    }
    if (tokens.empty() || tokens.size() > (size_t)INT32_MAX) {
        throw InputError("write_shard '" + path + "': " + std::to_string(tokens.size()) +
                         " tokens; a shard holds 1 .. 2^31-1 tokens, split the data into several shards");
    }
    int32_t header[kShardHeaderInts] = {};
    header[0] = kShardMagic;
    header[1] = version;
    header[2] = (int32_t)tokens.size();
    std::vector<uint16_t> raw;  // version 1 payload, checked before the file is created
    if (version == 1) {
        raw.resize(tokens.size());
        for (size_t i = 0; i < tokens.size(); i++) {
            if (tokens[i] > 0xFFFFu) {
                throw InputError("write_shard '" + path + "': token id " + std::to_string(tokens[i]) +
                                 " at token offset " + std::to_string(i) +
                                 " does not fit in uint16; write version 2 for vocabularies over 65,536");
            }
            raw[i] = (uint16_t)tokens[i];
        }
    }
    shard_detail::File f = shard_detail::open_or_throw(path, "wb", "shard for writing");
    bool ok = std::fwrite(header, 4, kShardHeaderInts, f.get()) == (size_t)kShardHeaderInts;
    if (version == 1) {
        ok = ok && std::fwrite(raw.data(), 2, raw.size(), f.get()) == raw.size();
    } else {
        ok = ok && std::fwrite(tokens.data(), 4, tokens.size(), f.get()) == tokens.size();
    }
    ok = (std::fflush(f.get()) == 0) && ok;
    if (!ok) throw InputError("write_shard '" + path + "': write failed (disk full?); free space and retry");
}

}  // namespace llmc
