// --dump-attention L:H[,L:H...] (with --eval-only): the attention probabilities of the listed
// heads for the first sequence of the first validation batch, one .npy file per head
// (docs/training.md, docs/formats.md). This file holds the flag's parsing and checks and the
// writing; the probabilities come from Backend::attention_probs (the CPU backend:
// llmc/cpu/attention_probs.h; CUDA: llmc/cuda/attention_probs.cuh).
//
//   <-o DIR>/attn_L<l>_H<h>.npy   float32 (T, T), row i = query i, column j = key j;
//                                 masked entries (j > i; j <= i - P for a local head) are 0
#pragma once
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/io/npy.h"

namespace llmc {

struct DumpHead {
    int layer, head;  // 0-based
    bool operator==(const DumpHead& o) const { return layer == o.layer && head == o.head; }
};

// "0:0,5:3" -> {{0,0},{5,3}}: comma-separated LAYER:HEAD pairs of 0-based decimal integers
// (spaces around an item are ignored; a repeated pair is kept once, in first-seen order).
// Anything else is refused with an InputError naming the bad item and the expected form.
inline std::vector<DumpHead> parse_dump_attention(const std::string& spec) {
    auto bad = [&](const std::string& item, const std::string& why) {
        throw InputError("--dump-attention '" + spec + "': " + (item.empty() ? std::string() : "'" + item + "' ") +
                         why + "; use LAYER:HEAD[,LAYER:HEAD...] with 0-based numbers, e.g. --dump-attention 0:0,5:3");
    };
    auto number = [&](const std::string& item, const std::string& s, int* out) {
        if (s.empty() || s.size() > 9) bad(item, "is not LAYER:HEAD");
        int v = 0;
        for (char ch : s) {
            if (ch < '0' || ch > '9') bad(item, "is not LAYER:HEAD (two non-negative integers)");
            v = v * 10 + (ch - '0');
        }
        *out = v;
    };
    if (spec.find_first_not_of(' ') == std::string::npos) bad("", "is empty");
    std::vector<DumpHead> heads;
    size_t pos = 0;
    for (;;) {
        const size_t comma = spec.find(',', pos);
        std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        const size_t a = item.find_first_not_of(' '), b = item.find_last_not_of(' ');
        item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
        if (item.empty()) bad("", "has an empty item");
        const size_t colon = item.find(':');
        if (colon == std::string::npos) bad(item, "has no ':'");
        DumpHead h{};
        number(item, item.substr(0, colon), &h.layer);
        number(item, item.substr(colon + 1), &h.head);
        bool seen = false;
        for (const DumpHead& x : heads) seen = seen || x == h;
        if (!seen) heads.push_back(h);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return heads;
}

// Every requested layer and head must exist in the model.
inline void check_dump_attention_heads(const std::vector<DumpHead>& heads, const ModelConfig& m) {
    for (const DumpHead& h : heads) {
        const std::string item = std::to_string(h.layer) + ":" + std::to_string(h.head);
        if (h.layer >= m.num_layers)
            throw InputError("--dump-attention " + item + ": layer " + std::to_string(h.layer) +
                             " does not exist, the model has " + std::to_string(m.num_layers) + " layers (0.." +
                             std::to_string(m.num_layers - 1) + ")");
        if (h.head >= m.num_heads)
            throw InputError("--dump-attention " + item + ": head " + std::to_string(h.head) +
                             " does not exist, the model has " + std::to_string(m.num_heads) + " heads per layer (0.." +
                             std::to_string(m.num_heads - 1) + ")");
    }
}

// The backend must be able to hand out attention probabilities (the CPU and CUDA backends can).
inline void check_dump_attention_backend(const Backend& b) {
    if (!b.has_attention_probs())
        throw InputError(std::string("--dump-attention: the ") + b.name() +
                         " backend cannot compute attention maps; use --device cpu (checkpoints are portable)");
}

inline std::string attention_dump_path(const std::string& dir, const DumpHead& h) {
    return dir + "/attn_L" + std::to_string(h.layer) + "_H" + std::to_string(h.head) + ".npy";
}

// After a forward of a batch of sequence length T: writes every listed head's (T, T) probabilities
// of sequence 0 to attention_dump_path(dir, head), creating dir. Returns the paths written.
inline std::vector<std::string> write_attention_dumps(Backend& model, const std::vector<DumpHead>& heads, int T,
                                                      const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw InputError("cannot create output directory " + dir + " (" + ec.message() + ")");
    std::vector<float> probs((size_t)T * T);  // (T, T)
    std::vector<std::string> paths;
    for (const DumpHead& h : heads) {
        model.attention_probs(h.layer, h.head, 0, probs.data());
        paths.push_back(attention_dump_path(dir, h));
        write_npy_f32(paths.back(), probs.data(), {(size_t)T, (size_t)T});
    }
    return paths;
}

}  // namespace llmc
