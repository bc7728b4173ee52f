// JSON Lines writers for <out>/metrics.jsonl and <out>/logit_stats.jsonl (schemas in
// docs/formats.md). One JSON object per line, written with a single fwrite and flushed
// to the OS per record, so a process killed with kill -9 leaves every completed record intact;
// a reader ignores at most one unterminated last line. Non-finite floats are written as null.
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend.h"
#include "error.h"

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
        f_ = std::fopen(path.c_str(), append ? "ab" : "wb");
        if (!f_) throw InputError("cannot open " + path + " for writing (" + std::strerror(errno) +
                                  "); check that -o is a writable directory");
        path_ = path;
    }
    bool is_open() const { return f_ != nullptr; }
    void close() {
        if (f_) std::fclose(f_);
        f_ = nullptr;
    }

    void write(const nlohmann::ordered_json& record) {
        if (!f_) return;
        std::string line = record.dump() + "\n";
        if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
            throw InputError("write to " + path_ + " failed (" + std::strerror(errno) + "); is the disk full?");
    }

private:
    std::FILE* f_ = nullptr;
    std::string path_;
};

// A float for JSON: null when non-finite (JSON has no NaN/Inf).
inline nlohmann::ordered_json json_float(double x) {
    if (x != x || x > 1.7976931348623157e308 || x < -1.7976931348623157e308) return nullptr;
    return x;
}

// Keeps only the complete records of a JSONL file whose "step" is <= max_step (used when
// resuming: records written after the checkpoint by the interrupted run are dropped, as is an
// unterminated last line). Rewrites through a temporary file + rename. A missing file is fine.
inline void truncate_jsonl_after_step(const std::string& path, long max_step) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return;
    std::string kept, line;
    while (std::getline(in, line)) {
        if (in.eof()) break;  // no trailing newline: an interrupted write
        auto rec = nlohmann::ordered_json::parse(line, nullptr, false);
        if (rec.is_discarded() || !rec.contains("step") || !rec["step"].is_number()) continue;
        if (rec["step"].get<long>() <= max_step) kept += line + "\n";
    }
    in.close();
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << kept;
        if (!out) throw InputError("cannot rewrite " + path + "; check that -o is writable");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
        throw InputError("cannot replace " + path + " (" + std::strerror(errno) + ")");
}

// One logit_stats.jsonl record: the attention-logit statistics of step `step` (L x NH entries in
// layer-major order) and the output-softmax statistics. The near/far fields ("near" and per head
// "near_mass", "near_max", "far_max") only when the backend computed them (s.has_near_far()).
inline nlohmann::ordered_json logit_stats_record(long step, const LogitStats& s, const ModelConfig& cfg) {
    const bool near_far = s.has_near_far();
    nlohmann::ordered_json heads = nlohmann::ordered_json::array();
    for (int l = 0; l < s.num_layers; l++) {
        for (int h = 0; h < s.num_heads; h++) {
            const size_t i = (size_t)l * s.num_heads + h;
            nlohmann::ordered_json a = {{"layer", l},
                                        {"head", h},
                                        {"global", !cfg.is_local_head(h)},
                                        {"max", json_float(s.max_logit[i])},
                                        {"min", json_float(s.min_logit[i])},
                                        {"entropy", json_float(s.entropy[i])}};
            if (near_far) {
                a["near_mass"] = json_float(s.near_mass[i]);
                a["near_max"] = json_float(s.near_max_logit[i]);
                a["far_max"] = json_float(s.far_max_logit[i]);  // null: the head had no far key
            }
            heads.push_back(std::move(a));
        }
    }
    nlohmann::ordered_json rec = {{"step", step},
                                  {"num_layers", s.num_layers},
                                  {"num_heads", s.num_heads},
                                  {"global_heads", cfg.global_heads},
                                  {"window", cfg.window}};
    if (near_far) rec["near"] = s.near_or(cfg.window);
    rec["attn"] = std::move(heads);
    rec["out_max_logit"] = json_float(s.out_max_logit);
    rec["out_mean_lse"] = json_float(s.out_mean_lse);
    return rec;
}

}  // namespace llmc
