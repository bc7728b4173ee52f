// Reader for the PyTorch reference's debug-state fixtures (test/fixtures/<name>_debug.bin, written
// by dev/reference/make_fixtures.py; format in dev/reference/README.md), shared by the CPU test
// (test/test_reference.cpp) and the GPU test (test/gpu/test_cuda_model.cu). No Catch2: errors throw
// std::runtime_error naming the file and the problem.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc_test {

// What the reference computed for one fixture (dev/reference/debug_state.py).
struct DebugState {
    int B = 0, T = 0, V = 0, Vp = 0, L = 0, NH = 0, n_steps = 0;
    size_t num_params = 0;
    float z_weight = 0, lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, grad_clip = 0;
    std::vector<int> inputs, targets;  // (B, T)
    std::vector<float> logits;         // (B, T, V) real vocabulary only
    float loss = 0, z_loss = 0;        // mean CE; z_weight * mean(lse^2)
    std::vector<float> grads;          // (num_params) d(loss + z_loss)/d(params), llmc/core/params.h order
    std::vector<float> attn_max, attn_min, attn_entropy;  // (L, NH), before the soft-cap
    float out_max_logit = 0, out_mean_lse = 0;
    std::vector<float> step_loss, step_z_loss, step_grad_norm;  // (n_steps), measured before update t
};

constexpr int kDebugMagic = 20250522;
constexpr int kDebugVersion = 1;

inline float int_bits_to_float(int32_t i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}

inline DebugState read_debug_state(const std::string& path) {
    auto fail = [&](const std::string& what) {
        return std::runtime_error(path + ": " + what + "; regenerate with dev/reference/make_fixtures.py");
    };
    std::ifstream f(path, std::ios::binary);
    if (!f.good()) throw fail("cannot open the file");
    const std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (raw.size() < 1024) throw fail(std::to_string(raw.size()) + " bytes, shorter than the 1024-byte header");
    int32_t h[256];
    std::memcpy(h, raw.data(), sizeof(h));
    if (h[0] != kDebugMagic || h[1] != kDebugVersion)
        throw fail("magic " + std::to_string(h[0]) + " version " + std::to_string(h[1]) + ", expected " +
                   std::to_string(kDebugMagic) + " version " + std::to_string(kDebugVersion));
    DebugState d;
    d.B = h[2];
    d.T = h[3];
    d.V = h[4];
    d.Vp = h[5];
    d.num_params = (size_t)(uint32_t)h[6] | ((size_t)(uint32_t)h[7] << 32);
    d.n_steps = h[8];
    d.z_weight = int_bits_to_float(h[9]);
    d.lr = int_bits_to_float(h[10]);
    d.beta1 = int_bits_to_float(h[11]);
    d.beta2 = int_bits_to_float(h[12]);
    d.eps = int_bits_to_float(h[13]);
    d.weight_decay = int_bits_to_float(h[14]);
    d.grad_clip = int_bits_to_float(h[15]);
    d.L = h[16];
    d.NH = h[17];
    if (d.B < 1 || d.T < 1 || d.V < 1 || d.Vp < d.V || d.L < 1 || d.NH < 1 || d.n_steps < 0)
        throw fail("implausible header (B " + std::to_string(d.B) + ", T " + std::to_string(d.T) + ", V " +
                   std::to_string(d.V) + ", Vp " + std::to_string(d.Vp) + ", L " + std::to_string(d.L) + ", NH " +
                   std::to_string(d.NH) + ", steps " + std::to_string(d.n_steps) + ")");
    size_t pos = 1024;
    auto take = [&](auto& vec, size_t n) {  // n 4-byte values (int32 or fp32)
        if (pos + n * 4 > raw.size()) throw fail("truncated: " + std::to_string(raw.size()) + " bytes");
        vec.resize(n);
        std::memcpy(vec.data(), raw.data() + pos, n * 4);
        pos += n * 4;
    };
    const size_t BT = (size_t)d.B * d.T, LH = (size_t)d.L * d.NH;
    std::vector<float> pair;
    take(d.inputs, BT);
    take(d.targets, BT);
    take(d.logits, BT * d.V);
    take(pair, 2);
    d.loss = pair[0];
    d.z_loss = pair[1];
    take(d.grads, d.num_params);
    take(d.attn_max, LH);
    take(d.attn_min, LH);
    take(d.attn_entropy, LH);
    take(pair, 2);
    d.out_max_logit = pair[0];
    d.out_mean_lse = pair[1];
    take(d.step_loss, d.n_steps);
    take(d.step_z_loss, d.n_steps);
    take(d.step_grad_norm, d.n_steps);
    if (pos != raw.size())
        throw fail(std::to_string(raw.size()) + " bytes, expected " + std::to_string(pos) + " from its header");
    return d;
}

// test/fixtures/<file>: next to this header (the path the compiler saw it by), else relative to the
// working directory (the repo root, where make runs the tests), else one or two levels up.
inline std::string fixture_path(const std::string& file) {
    const std::string src = __FILE__;
    const size_t slash = src.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : src.substr(0, slash);
    const std::string cands[] = {dir + "/fixtures/" + file, "test/fixtures/" + file, "../fixtures/" + file,
                                 "../../test/fixtures/" + file};
    for (const std::string& c : cands)
        if (std::ifstream(c).good()) return c;
    throw std::runtime_error("fixture " + file + " not found in " + dir +
                             "/fixtures or test/fixtures; run the "
                             "tests from the repo root (regenerate with dev/reference/make_fixtures.py)");
}

}  // namespace llmc_test
