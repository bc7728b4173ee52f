// Tests of the attention maps (--eval-only --dump-attention): llmc/io/npy.h (the .npy header bytes
// against the format spec, a round trip, refusals), llmc/io/attention_dump.h (the L:H spec, range and
// flag checks), and the probabilities the CPU backend writes (llmc/cpu/attention_probs.h via
// CpuBackend and write_attention_dumps) against a brute-force T x T softmax in double computed
// here from the layer's LayerNorm output and weights (q, k = ln1 @ W^T + b, QK-norm, scores,
// mask, soft-cap, softmax), for local and global heads, with and without QK-norm and soft-cap, on
// random order-one weights. The probabilities are also tied to the forward: sum_j p_ij v_j equals
// the attention output the forward computed.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/app/validate.h"  // check_dump_attention_flags
#include "llmc/io/attention_dump.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/core/error.h"
#include "llmc/io/npy.h"
#include "llmc/core/rng.h"
#include "test/test_util.h"

using namespace llmc;
using llmc::cpu::CpuBackend;
using llmc::cpu::Gpt2Cpu;

namespace {

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), (std::streamsize)bytes.size());
}

// The spec's header for '<f4' C order: preamble, dict, spaces, '\n', total a multiple of 64.
std::string spec_header(const std::string& shape_repr) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_repr + ", }";
    while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
    dict += '\n';
    std::string h("\x93NUMPY\x01\x00", 8);
    h += (char)(dict.size() & 0xff);
    h += (char)(dict.size() >> 8);
    return h + dict;
}

}  // namespace

TEST_CASE("npy: header bytes follow the .npy version 1.0 spec", "[attention_dump][npy]") {
    CHECK(npy_header_f32({3, 4}) == spec_header("(3, 4)"));
    CHECK(npy_header_f32({5}) == spec_header("(5,)"));
    CHECK(npy_header_f32({}) == spec_header("()"));
    CHECK(npy_header_f32({2048, 2048}) == spec_header("(2048, 2048)"));
    // the bytes NumPy 2.4's np.save writes for np.zeros((3, 4), '<f4') before the data: HEADER_LEN
    // 118 ('v'), the dict, 58 spaces, '\n' (128 bytes)
    const std::string lit = std::string("\x93NUMPY\x01\x00v\x00", 10) +
                            "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }" + std::string(58, ' ') + "\n";
    CHECK(lit.size() == 128);
    CHECK(npy_header_f32({3, 4}) == lit);
    for (const std::vector<size_t>& s : {std::vector<size_t>{1}, {7, 9}, {1, 2, 3, 4}, {123456789, 2}}) {
        const std::string h = npy_header_f32(s);
        CHECK(h.size() % 64 == 0);
        CHECK(h.back() == '\n');
        CHECK((size_t)((unsigned char)h[8] | ((unsigned char)h[9] << 8)) == h.size() - 10);
    }
}

TEST_CASE("npy: write + read round trip, bit for bit; bad files refused", "[attention_dump][npy]") {
    llmc_test::TempDir dir("npy_");
    Rng r(0x4e5059ull + Catch::rngSeed());
    std::vector<float> a(7 * 5);
    for (float& x : a) x = r.normal() * 3.0f;
    a[0] = -0.0f;
    a[1] = std::numeric_limits<float>::denorm_min();
    a[2] = std::numeric_limits<float>::infinity();
    a[3] = std::numeric_limits<float>::quiet_NaN();
    a[4] = std::numeric_limits<float>::max();
    const std::string path = dir.file("a.npy");
    write_npy_f32(path, a.data(), {7, 5});
    const std::string bytes = read_bytes(path);
    const size_t hsize = npy_header_f32({7, 5}).size();
    REQUIRE(bytes.size() == hsize + a.size() * 4);
    CHECK(bytes.compare(0, hsize, npy_header_f32({7, 5})) == 0);
    CHECK(std::memcmp(bytes.data() + hsize, a.data(), a.size() * 4) == 0);  // little-endian host: raw floats
    const NpyArrayF32 b = read_npy_f32(path);
    CHECK(b.shape == std::vector<size_t>{7, 5});
    REQUIRE(b.data.size() == a.size());
    CHECK(std::memcmp(b.data.data(), a.data(), a.size() * 4) == 0);

    // an empty and a 1-D array
    write_npy_f32(dir.file("e.npy"), a.data(), {0, 3});
    CHECK(read_npy_f32(dir.file("e.npy")).shape == std::vector<size_t>{0, 3});
    write_npy_f32(dir.file("v.npy"), a.data() + 5, {6});
    const NpyArrayF32 v = read_npy_f32(dir.file("v.npy"));
    CHECK(v.shape == std::vector<size_t>{6});
    CHECK(std::memcmp(v.data.data(), a.data() + 5, 6 * 4) == 0);

    // refusals name the file
    auto refused = [&](const std::string& content, const std::string& why) {
        const std::string p = dir.file("bad.npy");
        write_bytes(p, content);
        CHECK_THROWS_WITH(read_npy_f32(p), Catch::Contains(p) && Catch::Contains(why));
    };
    refused("hello world, not an npy file", "magic");
    refused(bytes.substr(0, bytes.size() - 4), "does not match the shape");
    std::string f8 = bytes;
    f8.replace(f8.find("<f4"), 3, "<f8");
    refused(f8, "'<f4'");
    std::string fortran = bytes;
    fortran.replace(fortran.find("False"), 5, "True ");
    refused(fortran, "C order");
    CHECK_THROWS_AS(read_npy_f32(dir.file("missing.npy")), InputError);
}

TEST_CASE("--dump-attention spec: LAYER:HEAD list parsed, bad forms refused", "[attention_dump]") {
    auto heads = parse_dump_attention("0:0,5:3, 1:2 ,5:3");
    REQUIRE(heads.size() == 3);  // the repeated 5:3 kept once
    CHECK(heads[0] == DumpHead{0, 0});
    CHECK(heads[1] == DumpHead{5, 3});
    CHECK(heads[2] == DumpHead{1, 2});
    CHECK(parse_dump_attention("12:07").at(0) == DumpHead{12, 7});
    for (const char* bad : {"", " ", "1", "1:", ":1", "a:b", "1:2,", ",1:2", "1:2,,3:4", "-1:0", "0:-1", "1:2:3",
                            "1.0:2", "1;2", "0x1:2", "1 :2", "9999999999:0"}) {
        INFO("spec '" << bad << "'");
        CHECK_THROWS_WITH(parse_dump_attention(bad),
                          Catch::Contains("--dump-attention") && Catch::Contains("LAYER:HEAD"));
    }
}

TEST_CASE("--dump-attention checks: flags, range, backend", "[attention_dump]") {
    TrainConfig c;
    c.eval_only = true;
    c.output_dir = "out";
    c.device = "cpu";
    c.dump_attention = "0:1";
    CHECK_NOTHROW(check_dump_attention_flags(c));
    c.device = "auto";
    CHECK_NOTHROW(check_dump_attention_flags(c));
    c.device = "cuda";  // the CUDA backend computes the maps too (llmc/cuda/attention_probs.cuh)
    CHECK_NOTHROW(check_dump_attention_flags(c));
    c.device = "cpu";
    c.eval_only = false;
    CHECK_THROWS_WITH(check_dump_attention_flags(c), Catch::Contains("add --eval-only"));
    c.eval_only = true;
    c.output_dir.clear();
    CHECK_THROWS_WITH(check_dump_attention_flags(c), Catch::Contains("give -o DIR"));
    c.output_dir = "out";
    c.dump_attention = "0-1";
    CHECK_THROWS_WITH(check_dump_attention_flags(c), Catch::Contains("'0-1'"));
    c.dump_attention.clear();  // no flag: nothing to check, whatever the rest
    c.eval_only = false;
    c.device = "cuda";
    CHECK_NOTHROW(check_dump_attention_flags(c));

    ModelConfig m;
    m.num_layers = 3;
    m.num_heads = 4;
    CHECK_NOTHROW(check_dump_attention_heads({{0, 0}, {2, 3}}, m));
    CHECK_THROWS_WITH(check_dump_attention_heads({{0, 0}, {3, 0}}, m),
                      Catch::Contains("3:0") && Catch::Contains("layer 3") && Catch::Contains("3 layers (0..2)"));
    CHECK_THROWS_WITH(check_dump_attention_heads({{1, 4}}, m), Catch::Contains("1:4") && Catch::Contains("head 4") &&
                                                                   Catch::Contains("4 heads per layer (0..3)"));

    struct NoMaps : CpuBackend {  // a backend without attention maps
        using CpuBackend::CpuBackend;
        const char* name() const override { return "other"; }
        bool has_attention_probs() const override { return false; }
    };
    ModelConfig tiny;
    tiny.num_layers = 1;
    tiny.channels = 8;
    tiny.num_heads = 2;
    tiny.global_heads = 1;
    tiny.window = 2;
    tiny.vocab_size = 5;
    tiny.padded_vocab_size = 128;
    tiny.max_seq_len = 4;
    CpuBackend cpu(tiny, 1);
    NoMaps other(tiny, 1);
    CHECK_NOTHROW(check_dump_attention_backend(cpu));
    CHECK_THROWS_WITH(check_dump_attention_backend(other),
                      Catch::Contains("other backend") && Catch::Contains("--device cpu"));
    CHECK(attention_dump_path("d/x", {2, 11}) == "d/x/attn_L2_H11.npy");
}

namespace {

struct Variant {
    const char* name;
    bool qk_norm;
    float softcap;
};

// Order-one random weights (GPT-2's init gives near-uniform attention, which would hide a wrong
// mask or a wrong head in the comparison): matrices 0.3 N(0,1), biases 0.2 N(0,1), gains 1 + 0.2 N(0,1).
void randomize(Gpt2Cpu<float>& m, uint64_t seed) {
    Rng r(seed);
    const ParamLayout& lay = m.layout();
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const bool gain = id == P_LN1W || id == P_LN2W || id == P_LNFW || id == P_QNORMW || id == P_KNORMW;
        const bool bias = id == P_LN1B || id == P_LN2B || id == P_LNFB || id == P_QKVB || id == P_ATTPROJB ||
                          id == P_FCB || id == P_FCPROJB || id == P_QNORMB || id == P_KNORMB;
        float* p = m.param((ParamId)id);
        for (size_t i = 0; i < lay.size[id]; i++) {
            const double n = r.normal();
            p[i] = (float)(gain ? 1.0 + 0.2 * n : bias ? 0.2 * n : 0.3 * n);
        }
    }
}

// Brute force, in double: the (T, T) attention probabilities of head h of layer l for sequence b,
// from the layer's LayerNorm output ln1 (the model's activation) and the layer's weights.
std::vector<double> brute_probs(Gpt2Cpu<float>& m, int l, int h, int b, int B, int T) {
    const ModelConfig& cfg = m.config();
    const int C = cfg.channels, hd = cfg.head_size();
    const size_t N = (size_t)B * T;
    const float* ln1 = m.acts().ln1.data() + l * N * C;        // (B, T, C)
    const float* W = m.param(P_QKVW) + (size_t)l * 3 * C * C;  // (3C, C)
    const float* bias = m.param(P_QKVB) + (size_t)l * 3 * C;   // (3C)
    // q, k of head h: rows h*hd.. of the q block and of the k block
    std::vector<double> q((size_t)T * hd), k((size_t)T * hd);
    for (int t = 0; t < T; t++)
        for (int d = 0; d < hd; d++) {
            double sq = bias[h * hd + d], sk = bias[C + h * hd + d];
            for (int c = 0; c < C; c++) {
                const double x = ln1[((size_t)b * T + t) * C + c];
                sq += x * W[(size_t)(h * hd + d) * C + c];
                sk += x * W[(size_t)(C + h * hd + d) * C + c];
            }
            q[(size_t)t * hd + d] = sq;
            k[(size_t)t * hd + d] = sk;
        }
    if (cfg.qk_norm) {  // LayerNorm over hd, eps 1e-5, biased variance, per-layer gain and bias
        auto norm = [&](std::vector<double>& x, ParamId w, ParamId bb) {
            for (int t = 0; t < T; t++) {
                double mean = 0, var = 0;
                for (int d = 0; d < hd; d++) mean += x[(size_t)t * hd + d] / hd;
                for (int d = 0; d < hd; d++)
                    var += (x[(size_t)t * hd + d] - mean) * (x[(size_t)t * hd + d] - mean) / hd;
                for (int d = 0; d < hd; d++)
                    x[(size_t)t * hd + d] =
                        (x[(size_t)t * hd + d] - mean) / std::sqrt(var + 1e-5) * m.param(w)[l * hd + d] +
                        m.param(bb)[l * hd + d];
            }
        };
        norm(q, P_QNORMW, P_QNORMB);
        norm(k, P_KNORMW, P_KNORMB);
    }
    const bool local = h < cfg.num_heads - cfg.global_heads;
    std::vector<double> p((size_t)T * T, 0.0);
    for (int i = 0; i < T; i++) {
        std::vector<bool> visible(T);
        for (int j = 0; j < T; j++) visible[j] = j <= i && (!local || i - j < cfg.window);
        double mx = -1e300;
        for (int j = 0; j < T; j++) {
            if (!visible[j]) continue;
            double s = 0;
            for (int d = 0; d < hd; d++) s += q[(size_t)i * hd + d] * k[(size_t)j * hd + d];
            s /= std::sqrt((double)hd);
            if (cfg.attn_softcap > 0) s = cfg.attn_softcap * std::tanh(s / cfg.attn_softcap);
            p[(size_t)i * T + j] = s;
            mx = std::max(mx, s);
        }
        double z = 0;
        for (int j = 0; j < T; j++)
            if (visible[j]) z += std::exp(p[(size_t)i * T + j] - mx);
        for (int j = 0; j < T; j++) p[(size_t)i * T + j] = visible[j] ? std::exp(p[(size_t)i * T + j] - mx) / z : 0.0;
    }
    return p;
}

}  // namespace

TEST_CASE("dumped attention probabilities match a brute-force softmax of the model's q, k", "[attention_dump]") {
    // fp32 model, double reference: the scores agree to ~1e-6 (|s| <= ~20, fp32 sums over C and hd),
    // so every probability to ~1e-6 (observed: <= 5.3e-7); 1e-5 leaves a 10x margin and still catches
    // a wrong mask, head, layer, sequence, scale, cap or normalization (each moves entries by >= 1e-2).
    const double tol = 1e-5;
    const Variant variants[] = {
        {"plain", false, 0.0f}, {"qk_norm", true, 0.0f}, {"softcap", false, 2.0f}, {"qk_norm+softcap", true, 2.0f}};
    const int B = 2, T = 13;
    uint64_t seed = 0xA77D0ull + Catch::rngSeed();
    for (const Variant& v : variants) {
        ModelConfig cfg;
        cfg.num_layers = 2;
        cfg.channels = 32;
        cfg.num_heads = 4;  // hd 8
        cfg.global_heads = 1;
        cfg.window = 4;  // heads 0..2 local (P 4), head 3 global
        cfg.vocab_size = 50;
        cfg.padded_vocab_size = 128;
        cfg.max_seq_len = 16;
        cfg.qk_norm = v.qk_norm;
        cfg.attn_softcap = v.softcap;
        CpuBackend be(cfg, 1);
        randomize(be.model(), ++seed);
        Rng r(++seed);
        std::vector<int> inp(B * T);
        for (int& x : inp) x = (int)r.below(cfg.vocab_size);
        be.forward(inp.data(), nullptr, B, T, 0.0f, nullptr);

        llmc_test::TempDir dir("attn_dump_");
        std::vector<DumpHead> heads;
        for (int l = 0; l < cfg.num_layers; l++)
            for (int h = 0; h < cfg.num_heads; h++) heads.push_back({l, h});
        const std::vector<std::string> paths = write_attention_dumps(be, heads, T, dir.file("maps"));
        REQUIRE(paths.size() == heads.size());

        double worst = 0, worst_out = 0;
        for (size_t k = 0; k < heads.size(); k++) {
            const int l = heads[k].layer, h = heads[k].head;
            const bool local = h < cfg.num_heads - cfg.global_heads;
            INFO("variant " << v.name << ", layer " << l << ", head " << h << (local ? " (local)" : " (global)"));
            CHECK(paths[k] == dir.file("maps") + "/attn_L" + std::to_string(l) + "_H" + std::to_string(h) + ".npy");
            const NpyArrayF32 a = read_npy_f32(paths[k]);
            REQUIRE(a.shape == std::vector<size_t>{(size_t)T, (size_t)T});
            for (int b = 0; b < B; b++) {
                INFO("sequence " << b);
                std::vector<float> p((size_t)T * T);
                if (b == 0) p = a.data;  // the file holds sequence 0
                else be.attention_probs(l, h, b, p.data());
                const std::vector<double> ref = brute_probs(be.model(), l, h, b, B, T);
                size_t far_positive = 0;
                for (int i = 0; i < T; i++) {
                    double row = 0;
                    for (int j = 0; j < T; j++) {
                        const bool visible = j <= i && (!local || i - j < cfg.window);
                        const float x = p[(size_t)i * T + j];
                        if (!visible) {
                            CHECK(x == 0.0f);  // masked: exactly zero
                            continue;
                        }
                        REQUIRE(std::isfinite(x));
                        const double e = std::fabs((double)x - ref[(size_t)i * T + j]);
                        worst = std::max(worst, e);
                        if (e > tol)
                            FAIL_CHECK("p[" << i << "][" << j << "] = " << x << ", brute force "
                                            << ref[(size_t)i * T + j]);
                        if (i - j >= cfg.window && x > 0) far_positive++;
                        row += x;
                    }
                    CHECK(std::fabs(row - 1.0) <= tol);
                }
                if (!local) CHECK(far_positive > 0);  // a global head does attend beyond the window

                // the forward's attention output of this head is sum_j p_ij v_j (relative to the row's scale)
                const ModelConfig& mc = be.model().config();
                const int C = mc.channels, hd = mc.head_size();
                const size_t N = (size_t)B * T;
                const float* att_in =
                    (mc.qk_norm ? be.model().acts().qkvn.data() : be.model().acts().qkv.data()) + l * N * 3 * C;
                const float* atty = be.model().acts().atty.data() + l * N * C;
                for (int i = 0; i < T; i++) {
                    double num = 0, den = 0;
                    for (int d = 0; d < hd; d++) {
                        double o = 0;
                        for (int j = 0; j <= i; j++)
                            o +=
                                (double)p[(size_t)i * T + j] * att_in[((size_t)b * T + j) * 3 * C + 2 * C + h * hd + d];
                        const double got = atty[((size_t)b * T + i) * C + h * hd + d];
                        num += (got - o) * (got - o);
                        den += o * o;
                    }
                    worst_out = std::max(worst_out, std::sqrt(num / std::max(den, 1e-30)));
                }
            }
        }
        INFO("variant " << v.name << ": worst |p - brute| " << worst << ", worst relative attention-output error "
                        << worst_out);
        CHECK(worst <= tol);
        CHECK(worst_out <= 1e-5);  // the same fp32 probabilities: only summation-order rounding (~1e-7)
    }
}

TEST_CASE("attention_probs: refused before a forward and out of range", "[attention_dump]") {
    ModelConfig cfg;
    cfg.num_layers = 2;
    cfg.channels = 16;
    cfg.num_heads = 4;
    cfg.global_heads = 1;
    cfg.window = 3;
    cfg.vocab_size = 20;
    cfg.padded_vocab_size = 128;
    cfg.max_seq_len = 8;
    CpuBackend be(cfg, 3);
    std::vector<float> p(64);
    CHECK_THROWS_AS(be.attention_probs(0, 0, 0, p.data()), std::logic_error);
    const std::vector<int> inp = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    be.forward(inp.data(), nullptr, 2, 8, 0.0f, nullptr);
    CHECK_NOTHROW(be.attention_probs(1, 3, 1, p.data()));
    CHECK_THROWS_AS(be.attention_probs(2, 0, 0, p.data()), InputError);
    CHECK_THROWS_AS(be.attention_probs(-1, 0, 0, p.data()), InputError);
    CHECK_THROWS_AS(be.attention_probs(0, 4, 0, p.data()), InputError);
    CHECK_THROWS_AS(be.attention_probs(0, 0, 2, p.data()), InputError);
    CHECK(be.has_attention_probs());
}
