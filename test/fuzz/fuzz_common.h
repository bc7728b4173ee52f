// Shared by the libFuzzer harnesses (test/fuzz/fuzz_*.cpp; docs/reliability.md) and by the
// seed writer test/fuzz/make_seeds.cpp.
//
// A harness feeds arbitrary bytes to one reader. The expected outcomes are a correct result (checked
// against the reader's documented invariants with FUZZ_CHECK) or an llmc::InputError (the one-line
// error). Anything else is a finding that libFuzzer reports and saves: a crash, an ASan/UBSan report,
// any other exception (it escapes the harness: std::terminate -> abort), a failed FUZZ_CHECK (abort),
// a timeout, or an allocation above -malloc_limit_mb / -rss_limit_mb.
#pragma once
#include <dirent.h>
#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "llmc/core/model_config.h"

namespace fuzz {

// A violated invariant of a reader's result: print it and abort (libFuzzer saves the input). The
// line also goes to the sanitizers' report stream, which survives libFuzzer's -close_fd_mask=2.
#define FUZZ_CHECK(cond)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            std::fprintf(stderr, "FUZZ_CHECK failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
            __sanitizer_report_error_summary("FUZZ_CHECK failed: " #cond);                       \
            std::abort();                                                                        \
        }                                                                                        \
    } while (0)

// Where the temporary files and directories go: /dev/shm when it is writable (a disk-backed /tmp
// made ftruncate + rewrite cost milliseconds: 25x fewer executions), else $TMPDIR or /tmp.
inline std::string scratch_base() {
    const char* tmp = std::getenv("TMPDIR");
    return ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : tmp && *tmp ? tmp : "/tmp";
}

// One temporary file per process and slot, created on first use, rewritten for every input
// (readers that take a path read it), removed at exit, under scratch_base().
class TempFile {
public:
    explicit TempFile(const char* tag) {
        std::string templ = scratch_base() + "/llmc_fuzz_" + tag + "_XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        fd_ = ::mkstemp(buf.data());
        if (fd_ < 0) {
            std::perror("fuzz: mkstemp");
            std::abort();
        }
        path_ = buf.data();
    }
    ~TempFile() {
        ::close(fd_);
        ::unlink(path_.c_str());
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;

    // Replaces the file's contents with `data` and returns its path.
    const std::string& write(const void* data, size_t size) {
        if (::ftruncate(fd_, 0) != 0) {
            std::perror("fuzz: ftruncate");
            std::abort();
        }
        const char* p = static_cast<const char*>(data);
        size_t off = 0;
        while (off < size) {
            const ssize_t n = ::pwrite(fd_, p + off, size - off, (off_t)off);
            if (n <= 0) {
                std::perror("fuzz: pwrite");
                std::abort();
            }
            off += (size_t)n;
        }
        return path_;
    }
    const std::string& path() const { return path_; }

private:
    int fd_ = -1;
    std::string path_;
};

// One temporary directory per process (under scratch_base(), like TempFile), for readers of a
// directory (the data's meta.json / tokenizer.bin, the checkpoint directory); emptied on demand and
// removed at exit. It holds plain files only.
class TempDir {
public:
    explicit TempDir(const char* tag) {
        std::string templ = scratch_base() + "/llmc_fuzz_" + tag + "_XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data()) == nullptr) {
            std::perror("fuzz: mkdtemp");
            std::abort();
        }
        path_ = buf.data();
    }
    ~TempDir() {
        clear();
        ::rmdir(path_.c_str());
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::string& path() const { return path_; }
    // The names in the directory, sorted, without "." and "..".
    std::set<std::string> names() const {
        std::set<std::string> out;
        if (DIR* d = ::opendir(path_.c_str())) {
            while (const struct dirent* e = ::readdir(d))
                if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.insert(e->d_name);
            ::closedir(d);
        }
        return out;
    }
    void clear() const {
        for (const std::string& n : names()) ::unlink((path_ + "/" + n).c_str());
    }
    // Creates (or replaces) the file `name` holding `size` bytes of `data`.
    void put(const std::string& name, const void* data, size_t size) const {
        std::FILE* f = std::fopen((path_ + "/" + name).c_str(), "wb");
        if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
            std::perror(("fuzz: writing " + name).c_str());
            std::abort();
        }
    }

private:
    std::string path_;
};

// The tiny model of the checkpoint and training-state seeds (and the model the training-state
// harness loads state for): 342 parameters, so a checkpoint is 2.4 KB.
inline llmc::ModelConfig tiny_model() {
    llmc::ModelConfig c;
    c.max_seq_len = 4;
    c.vocab_size = 5;
    c.padded_vocab_size = 128;
    c.num_layers = 1;
    c.num_heads = 2;
    c.channels = 2;
    c.global_heads = 1;
    c.window = 2;
    c.qk_norm = false;
    c.attn_softcap = 0.0f;
    c.tied_embeddings = true;
    return c;
}

// The parameter count of llmc/core/params.h's layout computed independently, in 128-bit integers (never
// wraps for int fields): a loaded model's size_t count must equal it.
inline unsigned __int128 exact_param_count(const llmc::ModelConfig& c) {
    using u128 = unsigned __int128;
    const u128 Vp = (u128)(uint32_t)c.padded_vocab_size, C = (u128)(uint32_t)c.channels,
               L = (u128)(uint32_t)c.num_layers, T = (u128)(uint32_t)c.max_seq_len,
               hd = c.num_heads > 0 ? (u128)(uint32_t)(c.channels / c.num_heads) : 0;
    return (c.tied_embeddings ? 1 : 2) * Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C +
           (c.qk_norm ? 4 * L * hd : 0);
}

// --spike-window of the training-state seeds and harness (the loop's loss/norm windows and alarm).
constexpr int kSpikeWindow = 3;

inline uint32_t get_u32(const uint8_t* p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
inline void put_u32(uint8_t* p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}

}  // namespace fuzz
