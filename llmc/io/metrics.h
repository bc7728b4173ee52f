// JSON Lines writers for <out>/metrics.jsonl and <out>/logit_stats.jsonl (schemas in
// docs/formats.md). One JSON object per line, handed to the OS with a single write(2) per record
// (no user-space buffer), so a process killed with kill -9 leaves every completed record intact;
// a reader ignores at most one unterminated last line. A write that fails partway (disk full,
// file-size limit) is rolled back: the file is truncated to its length before the record and the
// writer throws, so no half line is left behind. Non-finite floats are written as null.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/io/atomic_file.h"
#include "llmc/io/json_text.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"

namespace llmc {

class JsonlWriter {
public:
    JsonlWriter() = default;
    // append = false truncates an existing file.
    JsonlWriter(const std::string& path, bool append) { open(path, append); }
    ~JsonlWriter() { close(); }
    JsonlWriter(const JsonlWriter&) = delete;
    JsonlWriter& operator=(const JsonlWriter&) = delete;

    void open(const std::string& path, bool append) {
        close();
        // O_APPEND also without `append`: after a rolled-back record the next one starts at the end
        fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
        if (fd_ < 0)
            throw InputError("cannot open " + path + " for writing (" + std::strerror(errno) +
                             "); check that -o is a writable directory");
        struct stat st;
        if (::fstat(fd_, &st) != 0) {
            const int err = errno;
            close();
            throw InputError("cannot stat " + path + " (" + std::strerror(err) + "); check the file system of -o");
        }
        size_ = st.st_size;
        path_ = path;
    }
    bool is_open() const { return fd_ >= 0; }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

    // Appends one record as one line. On failure the file keeps its previous complete lines only.
    void write(const nlohmann::ordered_json& record) { write_line(record.dump()); }

    // Appends one record given as JSON text without its newline (llmc/io/json_text.h), as write().
    void write_line(std::string line) {
        if (fd_ < 0) return;
        line += '\n';
        const char* p = line.data();
        size_t left = line.size();
        while (left > 0) {  // one write(2); more only after a short write, which the next one reports
            const ssize_t n = ::write(fd_, p, left);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail(n < 0 ? errno : EIO);
            p += n;
            left -= (size_t)n;
        }
        size_ += (off_t)line.size();
    }

private:
    // Removes the partial record (truncates back to size_) and throws one line.
    [[noreturn]] void fail(int err) {
        std::string what = "writing a record to " + path_ + " failed (" + std::strerror(err) + ")";
        if (::ftruncate(fd_, size_) == 0)
            what += "; the partial record was removed, so the file holds only complete records";
        else
            what += std::string("; removing the partial record failed too (") + std::strerror(errno) +
                    "), a resume (-y 1) drops it";
        throw InputError(what + "; check " + write_error_hint(err, parent_dir(path_)));
    }

    int fd_ = -1;
    off_t size_ = 0;  // length of the complete records
    std::string path_;
};

// A float for JSON: null when non-finite (JSON has no NaN/Inf).
inline nlohmann::ordered_json json_float(double x) {
    if (x != x || x > 1.7976931348623157e308 || x < -1.7976931348623157e308) return nullptr;
    return x;
}

// Keeps only the complete records of a JSONL file whose "step" is <= max_step (used when
// resuming: records written after the checkpoint by the interrupted run are dropped, as are an
// unterminated last line and lines that do not parse). When the kept records are the start of the
// file (the usual case: records in step order) the file is cut in place with truncate(2), which
// needs no free space (a disk that just filled up); otherwise it is rewritten atomically
// (llmc/io/atomic_file.h: temporary + rename; on failure the file is left as it was). A missing file is fine.
inline void truncate_jsonl_after_step(const std::string& path, long max_step) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return;
    std::string kept, line;
    bool prefix = true;    // every line so far kept
    off_t prefix_len = 0;  // bytes of the kept lines while `prefix`
    while (std::getline(in, line)) {
        if (in.eof()) break;  // no trailing newline: an interrupted write
        auto rec = nlohmann::ordered_json::parse(line, nullptr, false);
        const bool keep = !rec.is_discarded() && rec.is_object() && rec.contains("step") && rec["step"].is_number() &&
                          rec["step"].get<long>() <= max_step;
        if (keep) {
            kept += line + "\n";
            if (prefix) prefix_len += (off_t)line.size() + 1;
        } else {
            prefix = false;
        }
    }
    in.close();
    if (kept.size() == (size_t)prefix_len) {  // the kept records are the file's first bytes
        struct stat st;
        if (::stat(path.c_str(), &st) == 0 && st.st_size == prefix_len) return;  // nothing to drop
        if (::truncate(path.c_str(), prefix_len) != 0) {
            const int err = errno;
            throw InputError("cannot cut " + path + " back to the records up to step " + std::to_string(max_step) +
                             " (" + std::strerror(err) + "); check " + write_error_hint(err, parent_dir(path)));
        }
        return;
    }
    write_file_atomic(path, kept.data(), kept.size());
}

// One logit_stats.jsonl record as one line of JSON text (no newline): the attention-logit statistics of
// step `step` (L x NH entries in layer-major order) and the output-softmax statistics. The near/far
// fields ("near" and per head "near_mass", "near_max", "far_max") only when the backend computed them
// (s.has_near_far()). Written every step between the step's read-back and the next step's first launch,
// while the device idles, so it is built as text (llmc/io/json_text.h), not as an nlohmann tree (a few
// times slower: docs/cuda_backend.md, "Host work between steps"). Key order as in docs/formats.md.
inline std::string logit_stats_line(long step, const LogitStats& s, const ModelConfig& cfg) {
    const bool near_far = s.has_near_far();
    std::string out;
    out.reserve(256 + (size_t)s.num_layers * s.num_heads * (near_far ? 200 : 120));
    JsonObjectText rec(out);
    rec.integer("step", step);
    rec.integer("num_layers", s.num_layers);
    rec.integer("num_heads", s.num_heads);
    rec.integer("global_heads", cfg.global_heads);
    rec.integer("window", cfg.window);
    if (near_far) rec.integer("near", s.near_or(cfg.window));
    rec.key("attn");
    out += '[';
    for (int l = 0; l < s.num_layers; l++) {
        for (int h = 0; h < s.num_heads; h++) {
            const size_t i = (size_t)l * s.num_heads + h;
            if (i > 0) out += ',';
            JsonObjectText head(out);
            head.integer("layer", l);
            head.integer("head", h);
            head.boolean("global", !cfg.is_local_head(h));
            head.number("max", s.max_logit[i]);
            head.number("min", s.min_logit[i]);
            head.number("entropy", s.entropy[i]);
            if (near_far) {
                head.number("near_mass", s.near_mass[i]);
                head.number("near_max", s.near_max_logit[i]);
                head.number("far_max", s.far_max_logit[i]);  // null: the head had no far key
            }
            head.close();
        }
    }
    out += ']';
    rec.number("out_max_logit", s.out_max_logit);
    rec.number("out_mean_lse", s.out_mean_lse);
    rec.close();
    return out;
}

}  // namespace llmc
