// Checkpoints: model files (ours and llm.c's), training-state files, the checkpoint directory
// (markers, newest complete, fallback, pruning) and atomic writes. Every test works in its own
// temporary directory and uses fresh random data.
#include <signal.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llmc/io/atomic_file.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/checkpoint_dir.h"
#include "llmc/core/rng.h"
#include "llmc/io/train_state.h"

namespace fs = std::filesystem;
using namespace llmc;

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        std::string templ = (fs::temp_directory_path() / "ckpt_test_XXXXXX").string();
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        REQUIRE(::mkdtemp(buf.data()) != nullptr);
        path = buf.data();
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// A small model exercising every optional part (QK-norm, untied head, soft-cap).
ModelConfig small_config(bool qk_norm = true, bool tied = false) {
    ModelConfig c;
    c.max_seq_len = 16;
    c.vocab_size = 100;
    c.padded_vocab_size = 128;
    c.num_layers = 2;
    c.num_heads = 4;
    c.channels = 16;
    c.global_heads = 1;
    c.window = 5;
    c.qk_norm = qk_norm;
    c.attn_softcap = 30.0f;
    c.tied_embeddings = tied;
    return c;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = rng.normal() * 0.5f;
    return v;
}

std::vector<char> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::vector<char>& b) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(b.data(), (std::streamsize)b.size());
}
std::vector<int32_t> read_header(const std::string& path) {
    std::vector<char> b = read_bytes(path);
    REQUIRE(b.size() >= 1024);
    std::vector<int32_t> h(256);
    std::memcpy(h.data(), b.data(), 1024);
    return h;
}
void flip_byte(const std::string& path, size_t offset) {
    std::vector<char> b = read_bytes(path);
    REQUIRE(offset < b.size());
    b[offset] ^= 0x10;
    write_bytes(path, b);
}
void set_header_int(const std::string& path, int index, int32_t value) {
    std::vector<char> b = read_bytes(path);
    std::memcpy(b.data() + 4 * index, &value, 4);
    write_bytes(path, b);
}

// Independent references: FNV-1a written out from its definition, and bf16 rounding done in
// double by picking the nearer of the two neighbouring bf16 values (ties to even mantissa).
uint64_t ref_fnv1a(const std::vector<char>& b, size_t begin) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = begin; i < b.size(); i++) h = (h ^ (uint8_t)b[i]) * 1099511628211ull;
    return h;
}
// The header checksum a file stores in words w and w + 1 (docs/formats.md): FNV-1a of its first 1024
// bytes with those 8 bytes zero.
uint64_t ref_header_sum(const std::vector<char>& file, int w) {
    std::vector<char> b(file.begin(), file.begin() + 1024);
    std::fill(b.begin() + 4 * w, b.begin() + 4 * w + 8, 0);
    return ref_fnv1a(b, 0);
}
uint16_t ref_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint16_t lo = (uint16_t)(x >> 16), hi = (uint16_t)(lo + 1);  // toward zero, away from zero
    double dlo = bf16_to_float(lo), dhi = bf16_to_float(hi), d = f;
    double elo = std::fabs(d - dlo), ehi = std::fabs(dhi - d);
    if (elo < ehi) return lo;
    if (ehi < elo) return hi;
    return (lo & 1) ? hi : lo;
}

template <class E, class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const E& e) { return e.what(); }
    FAIL("expected an exception");
    return "";
}

bool has_temp_files(const std::string& dir) {
    for (auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
    return false;
}

// A synthetic llm.c GPT-2 checkpoint (header + the 16 tensors), fp32 (v3) or bf16 (v5).
std::vector<float> write_llmc_file(const std::string& path, int version, int maxT, int V, int L, int NH, int C, int Vp,
                                   uint64_t seed) {
    ModelConfig c;
    c.max_seq_len = maxT;
    c.vocab_size = V;
    c.num_layers = L;
    c.num_heads = NH;
    c.channels = C;
    c.padded_vocab_size = Vp;
    c.global_heads = NH;
    c.window = maxT;
    c.qk_norm = false;
    c.tied_embeddings = true;
    size_t n = 0;                            // llm.c's 16 tensors, sized from their shapes here (not from params.h)
    n += (size_t)Vp * C + (size_t)maxT * C;  // wte, wpe
    n += (size_t)L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C);
    n += 2 * (size_t)C;  // lnfw, lnfb
    std::vector<float> p = random_floats(n, seed);
    std::vector<int32_t> h(256, 0);
    h[0] = 20240326;
    h[1] = version;
    h[2] = maxT;
    h[3] = V;
    h[4] = L;
    h[5] = NH;
    h[6] = C;
    h[7] = Vp;
    std::ofstream f(path, std::ios::binary);
    f.write((const char*)h.data(), 1024);
    if (version == 3) {
        f.write((const char*)p.data(), (std::streamsize)(n * 4));
    } else {
        std::vector<uint16_t> b(n);
        for (size_t i = 0; i < n; i++) {
            uint32_t x;
            std::memcpy(&x, &p[i], 4);
            b[i] = (uint16_t)(x >> 16);  // truncation: the file holds whatever bf16 it holds
            p[i] = bf16_to_float(b[i]);  // what a correct reader must return
        }
        f.write((const char*)b.data(), (std::streamsize)(n * 2));
    }
    return p;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// primitives

TEST_CASE("fnv1a64 matches the published test vectors", "[checkpoint]") {
    CHECK(fnv1a64("", 0) == 0xcbf29ce484222325ull);
    CHECK(fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
    CHECK(fnv1a64("bar", 3, fnv1a64("foo", 3)) == 0x85944171f73967e8ull);  // incremental
}

TEST_CASE("bf16 rounding is round-to-nearest-even, widening exact", "[checkpoint]") {
    Rng rng(std::random_device{}());
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = rng.next_u32();
        float f;
        std::memcpy(&f, &bits, 4);
        if (!std::isfinite(f) || std::fabs(f) > 3.0e38f) continue;  // near FLT_MAX the upper neighbour is inf
        REQUIRE(float_to_bf16(f) == ref_bf16(f));
    }
    CHECK(float_to_bf16(1.0f) == 0x3f80);
    CHECK(bf16_to_float(0x3f80) == 1.0f);
    CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
    // Exact ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; even mantissa (1.0) wins.
    CHECK(float_to_bf16(1.0f + 1.0f / 256) == 0x3f80);
    CHECK(float_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
}

// ---------------------------------------------------------------------------------------------
// model files

TEST_CASE("model checkpoint fp32 round trip is bit-exact with every header field", "[checkpoint]") {
    TempDir dir;
    for (bool qk : {false, true})
        for (bool tied : {false, true}) {
            ModelConfig c = small_config(qk, tied);
            const size_t n = param_layout(c).total;
            std::vector<float> p = random_floats(n, std::random_device{}());
            const std::string path = dir / "m.bin";
            save_model_checkpoint(path, c, p.data(), 1234);

            std::vector<char> bytes = read_bytes(path);
            REQUIRE(bytes.size() == 1024 + 4 * n);
            std::vector<int32_t> h = read_header(path);
            CHECK(h[0] == 20250521);
            CHECK(h[1] == 4);
            CHECK(h[2] == 16);
            CHECK(h[3] == 100);
            CHECK(h[4] == 2);
            CHECK(h[5] == 4);
            CHECK(h[6] == 16);
            CHECK(h[7] == 128);
            CHECK(h[8] == 1);
            CHECK(h[9] == 5);
            CHECK(h[10] == (qk ? 1 : 0));
            CHECK(h[11] == (tied ? 1 : 0));
            CHECK(h[12] == 0);
            float cap;
            std::memcpy(&cap, &h[13], 4);
            CHECK(cap == 30.0f);
            CHECK(((uint64_t)(uint32_t)h[14] | ((uint64_t)(uint32_t)h[15] << 32)) == n);
            CHECK(((uint64_t)(uint32_t)h[16] | ((uint64_t)(uint32_t)h[17] << 32)) == ref_fnv1a(bytes, 1024));
            CHECK(h[18] == 1234);
            for (int i = 19; i < 22; i++) REQUIRE(h[i] == 0);
            CHECK(((uint64_t)(uint32_t)h[22] | ((uint64_t)(uint32_t)h[23] << 32)) == ref_header_sum(bytes, 22));
            for (int i = 24; i < 256; i++) REQUIRE(h[i] == 0);

            ModelCheckpoint ck = load_model_checkpoint(path);
            CHECK(config_difference(ck.config, c) == "");
            CHECK(ck.config.qk_norm == qk);
            CHECK(ck.config.tied_embeddings == tied);
            CHECK(ck.step == 1234);
            CHECK_FALSE(ck.from_llmc);
            CHECK_FALSE(ck.bf16);
            REQUIRE(ck.params.size() == n);
            CHECK(std::memcmp(ck.params.data(), p.data(), 4 * n) == 0);
        }
}

TEST_CASE("model checkpoint: --bias 0 and --gelu erf in header words 20 and 21 (version 2), no bias tensors stored",
          "[checkpoint]") {
    TempDir dir;
    for (bool bias : {true, false})
        for (Gelu gelu : {Gelu::Tanh, Gelu::Erf}) {
            INFO("bias " << bias << ", gelu " << gelu_name(gelu));
            ModelConfig c = small_config(/*qk_norm=*/true, /*tied=*/false);
            c.bias = bias;
            c.gelu = gelu;
            // without biases: 2 layers x (C + 3C + C + C + 4C + C) + lnfb C + 2 layers x 2 QK-norm biases of hd
            const size_t C = 16, hd = 4, with_bias = param_layout(small_config(true, false)).total;
            const size_t n = param_layout(c).total;
            CHECK(n == (bias ? with_bias : with_bias - 2 * 11 * C - C - 2 * 2 * hd));
            CHECK((double)n == model_param_count(c));
            const std::vector<float> p = random_floats(n, std::random_device{}());
            const std::string path = dir / "m.bin";
            save_model_checkpoint(path, c, p.data(), 5);
            REQUIRE(read_bytes(path).size() == 1024 + 4 * n);
            const std::vector<int32_t> h = read_header(path);
            CHECK(h[1] == 4);  // readers that predate words 20 and 21 (versions 1 and 2 only) refuse it
            CHECK(h[20] == (bias ? 0 : 1));
            CHECK(h[21] == (gelu == Gelu::Erf ? 1 : 0));
            for (int i = 24; i < 256; i++) REQUIRE(h[i] == 0);
            const ModelCheckpoint ck = load_model_checkpoint(path);
            CHECK(config_difference(ck.config, c) == "");
            CHECK(ck.config.bias == bias);
            CHECK(ck.config.gelu == gelu);
            CHECK(std::memcmp(ck.params.data(), p.data(), 4 * n) == 0);
        }
}

TEST_CASE("model config hash: unchanged for biases + tanh, distinct for --bias 0 and --gelu erf", "[checkpoint]") {
    // the hash state files written before header words 20/21 existed hold: FNV-1a of words 2..13, dtype 0
    const ModelConfig c = small_config();
    int32_t w[12];
    w[0] = c.max_seq_len, w[1] = c.vocab_size, w[2] = c.num_layers, w[3] = c.num_heads, w[4] = c.channels;
    w[5] = c.padded_vocab_size, w[6] = c.global_heads, w[7] = c.window, w[8] = c.qk_norm, w[9] = c.tied_embeddings;
    w[10] = 0;
    std::memcpy(&w[11], &c.attn_softcap, 4);
    std::vector<char> bytes((const char*)w, (const char*)w + sizeof w);
    CHECK(model_config_hash(c) == ref_fnv1a(bytes, 0));
    ModelConfig no_bias = c, erf = c, both = c;
    no_bias.bias = false;
    erf.gelu = Gelu::Erf;
    both.bias = false;
    both.gelu = Gelu::Erf;
    const uint64_t hs[4] = {model_config_hash(c), model_config_hash(no_bias), model_config_hash(erf),
                            model_config_hash(both)};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) CHECK(hs[i] != hs[j]);
}

TEST_CASE("get_config_fields reads header indices 2..13 as docs/formats.md lays them out", "[checkpoint]") {
    std::mt19937 rng(std::random_device{}());
    for (int trial = 0; trial < 100; trial++) {
        int32_t h[CKPT_HEADER_INTS] = {0};
        for (size_t i = 0; i < CKPT_HEADER_INTS; i++) h[i] = (int32_t)rng();
        h[10] = (int32_t)(rng() % 3);  // 0, 1, or a value no writer writes
        h[11] = (int32_t)(rng() % 3);
        h[20] = (int32_t)(rng() % 3);
        h[21] = (int32_t)(rng() % 2);
        const ModelConfig c = get_config_fields(h);
        INFO("trial " << trial);
        CHECK(c.max_seq_len == h[2]);
        CHECK(c.vocab_size == h[3]);
        CHECK(c.num_layers == h[4]);
        CHECK(c.num_heads == h[5]);
        CHECK(c.channels == h[6]);
        CHECK(c.padded_vocab_size == h[7]);
        CHECK(c.global_heads == h[8]);
        CHECK(c.window == h[9]);
        CHECK(c.qk_norm == (h[10] == 1));
        CHECK(c.tied_embeddings == (h[11] == 1));
        CHECK(c.bias == (h[20] != 1));
        CHECK((int)c.gelu == h[21]);
        float cap;
        std::memcpy(&cap, &h[13], 4);
        CHECK(std::memcmp(&c.attn_softcap, &cap, 4) == 0);  // the bits, NaN included
        int32_t back[CKPT_HEADER_INTS] = {0};
        put_config_fields(back, c);  // and put_config_fields writes them back (flags as 0/1)
        for (int i = 2; i <= 13; i++)
            if (i != 12) CHECK(back[i] == (i == 10 || i == 11 ? (h[i] == 1 ? 1 : 0) : h[i]));
        CHECK(back[20] == (h[20] == 1 ? 1 : 0));
        CHECK(back[21] == h[21]);
    }
}

TEST_CASE("model checkpoint bf16 round trip is within bf16 rounding", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    const size_t n = param_layout(c).total;
    std::vector<float> p = random_floats(n, std::random_device{}());
    save_model_checkpoint(dir / "m.bin", c, p.data(), 7, /*bf16=*/true);
    std::vector<char> bytes = read_bytes(dir / "m.bin");
    REQUIRE(bytes.size() == 1024 + 2 * n);
    std::vector<int32_t> h = read_header(dir / "m.bin");
    CHECK(h[12] == 1);
    CHECK(((uint64_t)(uint32_t)h[16] | ((uint64_t)(uint32_t)h[17] << 32)) == ref_fnv1a(bytes, 1024));

    ModelCheckpoint ck = load_model_checkpoint(dir / "m.bin");
    CHECK(ck.bf16);
    CHECK(ck.step == 7);
    REQUIRE(ck.params.size() == n);
    for (size_t i = 0; i < n; i++) {
        REQUIRE(ck.params[i] == bf16_to_float(ref_bf16(p[i])));                      // exactly RNE
        REQUIRE(std::fabs(ck.params[i] - p[i]) <= std::ldexp(std::fabs(p[i]), -8));  // half an ulp
    }
}

TEST_CASE("model checkpoint records the trained sequence length in header[19]; 0 = unknown", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    const size_t n = param_layout(c).total;
    std::vector<float> p = random_floats(n, std::random_device{}());
    const std::string path = dir / "m.bin";
    save_model_checkpoint(path, c, p.data(), 5, false, c.max_seq_len - 1);
    const std::vector<char> with_length = read_bytes(path);
    CHECK(read_header(path)[19] == c.max_seq_len - 1);
    ModelCheckpoint ck = load_model_checkpoint(path);
    CHECK(ck.trained_seq_len == c.max_seq_len - 1);
    CHECK(past_trained_length_note(ck, path, c.max_seq_len - 1, "generation").empty());
    const std::string note = past_trained_length_note(ck, path, c.max_seq_len, "generation");
    CHECK(note.rfind("note: generation uses " + std::to_string(c.max_seq_len) + " positions", 0) == 0);
    CHECK(note.find(path) != std::string::npos);
    CHECK(note.find("-t " + std::to_string(c.max_seq_len - 1)) != std::string::npos);

    // the weights' bytes do not depend on it
    save_model_checkpoint(path, c, p.data(), 5);
    const std::vector<char> without = read_bytes(path);
    REQUIRE(without.size() == with_length.size());
    CHECK(std::memcmp(without.data() + 1024, with_length.data() + 1024, without.size() - 1024) == 0);

    // a file written before the field existed (0 there): unknown, and no note
    CHECK(read_header(path)[19] == 0);
    ck = load_model_checkpoint(path);
    CHECK(ck.trained_seq_len == 0);
    CHECK(past_trained_length_note(ck, path, c.max_seq_len, "generation").empty());

    // outside [0, maxT]: a damaged header when read, refused when written
    set_header_int(path, 19, c.max_seq_len + 1);
    std::string e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
    CHECK(e.find("trained sequence length " + std::to_string(c.max_seq_len + 1)) != std::string::npos);
    set_header_int(path, 19, -1);
    CHECK(error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); }).find("trained sequence length -1") !=
          std::string::npos);
    CHECK(error_of<InputError>([&] {
              save_model_checkpoint(path, c, p.data(), 5, false, c.max_seq_len + 1);
          }).find("trained sequence length") != std::string::npos);
}

TEST_CASE("model file version 4 records its tokenizer in words 24-25; version 3 reads as unknown", "[checkpoint]") {
    TempDir dir;
    const ModelConfig c = small_config();
    std::vector<float> p = random_floats(param_layout(c).total, std::random_device{}());
    const std::string path = dir / "m.bin";
    Rng rng(std::random_device{}());
    const uint64_t id = rng.next_u64() | 1;  // fresh, never 0 (unknown)
    save_model_checkpoint(path, c, p.data(), 5, false, 0, id);
    std::vector<int32_t> h = read_header(path);
    CHECK(h[1] == 4);
    CHECK((uint32_t)h[24] == (uint32_t)id);
    CHECK((uint32_t)h[25] == (uint32_t)(id >> 32));
    CHECK(load_model_checkpoint(path).tokenizer_id == id);
    save_model_checkpoint(path, c, p.data(), 5);  // the default: unknown
    CHECK(load_model_checkpoint(path).tokenizer_id == 0);

    // a version-3 file (an earlier build's: words 24..255 are 0, checksummed as version 3) reads as unknown
    h = read_header(path);
    h[1] = 3;
    put_u64(h.data(), 22, header_checksum(h.data(), 22));
    for (int i = 0; i < 24; i++) set_header_int(path, i, h[i]);
    const ModelCheckpoint v3 = load_model_checkpoint(path);
    CHECK(v3.tokenizer_id == 0);
    CHECK(v3.params == p);
    // ... where a word 24 that is not 0 is damage, never a tokenizer (its checksum made to hold)
    h[24] = 7;
    put_u64(h.data(), 22, header_checksum(h.data(), 22));
    for (int i = 0; i < 25; i++) set_header_int(path, i, h[i]);
    CHECK(error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); }).find("reserved header field 24 is 7") !=
          std::string::npos);
    // in version 4, word 26 is the first reserved one
    save_model_checkpoint(path, c, p.data(), 5, false, 0, id);
    h = read_header(path);
    h[26] = 1;
    put_u64(h.data(), 22, header_checksum(h.data(), 22));
    for (int i = 0; i < 27; i++) set_header_int(path, i, h[i]);
    CHECK(error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); }).find("reserved header field 26 is 1") !=
          std::string::npos);
}

TEST_CASE("model checkpoint refusals name the file and the problem", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    const size_t n = param_layout(c).total;
    std::vector<float> p = random_floats(n, std::random_device{}());
    const std::string path = dir / "m.bin";
    auto fresh = [&]() { save_model_checkpoint(path, c, p.data(), 3); };

    SECTION("bad magic") {
        fresh();
        set_header_int(path, 0, 12345);
        std::string e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find(path) != std::string::npos);
        CHECK(e.find("bad magic 12345") != std::string::npos);
    }
    SECTION("wrong version") {
        fresh();  // another build's version 5, its header checksum consistent: the user's to resolve
        std::vector<int32_t> h = read_header(path);
        h[1] = 5;
        put_u64(h.data(), 22, header_checksum(h.data(), 22));
        for (int i = 0; i < 24; i++) set_header_int(path, i, h[i]);
        std::string e = error_of<InputError>([&] { load_model_checkpoint(path); });
        CHECK(e.find("version 5 is not supported (this build reads versions 1 to 4)") != std::string::npos);
        CHECK(e.find("damaged") == std::string::npos);
        fresh();  // version 4's word flipped to 7: damaged
        set_header_int(path, 1, 7);
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("version word is 7, its header checksum says 4") != std::string::npos);
        fresh();  // flipped to 2 (a version without a header checksum): words 22-23 must then be 0
        set_header_int(path, 1, 2);
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("reserved header field 22") != std::string::npos);
        // version 2 is a model without biases or with erf GELU: not this one (words 20, 21 are 0)
        fresh();
        set_header_int(path, 1, 2);
        set_header_int(path, 22, 0);
        set_header_int(path, 23, 0);
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("version 2 does not match its model fields (biases on, tanh GELU: version 1)") !=
              std::string::npos);
    }
    SECTION("truncated payload") {
        fresh();
        fs::resize_file(path, 1024 + 4 * n - 1);
        std::string e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("truncated") != std::string::npos);
        CHECK(e.find(std::to_string(1024 + 4 * n)) != std::string::npos);
    }
    SECTION("truncated header") {
        fresh();
        fs::resize_file(path, 100);
        std::string e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("shorter than the 1024-byte header") != std::string::npos);
    }
    SECTION("flipped payload byte -> checksum error") {
        fresh();
        Rng rng(std::random_device{}());
        flip_byte(path, 1024 + rng.below(4 * n));
        std::string e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("checksum mismatch") != std::string::npos);
    }
    SECTION("corrupt header field") {
        fresh();
        set_header_int(path, 5, 3);  // NH = 3 does not divide C = 16
        std::string e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("corrupt header") != std::string::npos);
        CHECK(e.find("not divisible") != std::string::npos);
        fresh();
        set_header_int(path, 14, 5);  // parameter count
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("parameter count 5") != std::string::npos);
        fresh();
        set_header_int(path, 12, 7);  // dtype
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("payload dtype is 7") != std::string::npos);
        fresh();
        set_header_int(path, 20, 2);  // no-bias flag
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("no-bias flag is 2") != std::string::npos);
        fresh();
        set_header_int(path, 21, 3);  // GELU kind
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("GELU kind is 3") != std::string::npos);
        fresh();
        set_header_int(path, 20, 1);  // says "no biases" over a payload that has them
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("parameter count") != std::string::npos);
        fresh();
        set_header_int(path, 1, 1);  // a version-1 file (no header checksum) ...
        set_header_int(path, 22, 0);
        set_header_int(path, 23, 0);
        set_header_int(path, 21, 1);  // ... that says "erf": a damaged (or hand-edited) header
        e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("version 1 does not match its model fields (biases on, erf GELU: version 2)") !=
              std::string::npos);
    }
    SECTION("missing file") {
        std::string e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(dir / "nope.bin"); });
        CHECK(e.find("nope.bin: cannot open") != std::string::npos);
    }
    SECTION("invalid config is refused on save") {
        ModelConfig bad = c;
        bad.global_heads = 9;
        std::string e = error_of<InputError>([&] { save_model_checkpoint(path, bad, p.data(), 0); });
        CHECK(e.find("--global-heads 9") != std::string::npos);
        CHECK_FALSE(fs::exists(path));
    }
}

TEST_CASE("llm.c GPT-2 checkpoints v3 (fp32) and v5 (bf16) load as all-global models", "[checkpoint]") {
    TempDir dir;
    for (int version : {3, 5}) {
        const std::string path = dir / ("gpt2_v" + std::to_string(version) + ".bin");
        std::vector<float> expect = write_llmc_file(path, version, 32, 200, 3, 4, 24, 256, std::random_device{}());
        ModelCheckpoint ck = load_model_checkpoint(path);
        CHECK(ck.from_llmc);
        CHECK(ck.bf16 == (version == 5));
        CHECK(ck.step == 0);
        CHECK(ck.config.max_seq_len == 32);
        CHECK(ck.config.vocab_size == 200);
        CHECK(ck.config.num_layers == 3);
        CHECK(ck.config.num_heads == 4);
        CHECK(ck.config.channels == 24);
        CHECK(ck.config.padded_vocab_size == 256);
        CHECK(ck.config.global_heads == 4);
        CHECK(ck.config.window == 32);
        CHECK_FALSE(ck.config.qk_norm);
        CHECK(ck.config.attn_softcap == 0.0f);
        CHECK(ck.config.tied_embeddings);
        REQUIRE(ck.params.size() == expect.size());
        CHECK(std::memcmp(ck.params.data(), expect.data(), 4 * expect.size()) == 0);
        // The tensors land where params.h says: the last value of lnfb is the file's last.
        ParamLayout lay = param_layout(ck.config);
        CHECK(lay.offset[P_LNFB] + lay.size[P_LNFB] == expect.size());

        fs::resize_file(path, fs::file_size(path) - 2);
        std::string e = error_of<CheckpointDamaged>([&] { load_model_checkpoint(path); });
        CHECK(e.find("truncated") != std::string::npos);
    }
    const std::string path = dir / "gpt2_v4.bin";
    write_llmc_file(path, 4, 8, 10, 1, 2, 8, 128, 1);
    std::string e = error_of<InputError>([&] { load_model_checkpoint(path); });
    CHECK(e.find("llm.c checkpoint version 4 is not supported") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// training state

namespace {
TrainState random_state(const ModelConfig& c, int rank, int world, uint64_t seed) {
    const size_t n = param_layout(c).total;
    Rng rng(seed);
    TrainState s;
    s.step = 40;
    s.rank = rank;
    s.world_size = world;
    s.m = random_floats(n, rng.next_u64());
    s.v = random_floats(n, rng.next_u64());
    s.master = random_floats(n, rng.next_u64());
    for (int i = 0; i < 3; i++) s.rng.push_back(rng.next_u64());
    for (int i = 0; i < 7; i++) s.loader.push_back((int64_t)rng.next_u64());
    for (int i = 0; i < 5; i++) s.extra.push_back(rng.normal() * 1e3);
    s.extra.push_back(std::nan(""));
    return s;
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
}  // namespace

TEST_CASE("training state round trip is bit-exact", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    const size_t n = param_layout(c).total;
    TrainState s = random_state(c, 2, 4, std::random_device{}());
    const std::string path = dir / "state.bin";
    save_train_state(path, c, s);
    REQUIRE(fs::file_size(path) == 1024 + 3 * 4 * n + 8 * (3 + 7 + 6));
    std::vector<int32_t> h = read_header(path);
    CHECK(h[0] == 20250522);
    CHECK(h[1] == 2);
    CHECK(h[2] == 40);
    CHECK(h[3] == 2);
    CHECK(h[4] == 4);
    CHECK(((uint64_t)(uint32_t)h[19] | ((uint64_t)(uint32_t)h[20] << 32)) == ref_header_sum(read_bytes(path), 19));
    for (int i = 21; i < 256; i++) REQUIRE(h[i] == 0);

    TrainState r = load_train_state(path, c, 2, 4);
    CHECK(r.step == 40);
    CHECK(r.rank == 2);
    CHECK(r.world_size == 4);
    CHECK(same_bits(r.m, s.m));
    CHECK(same_bits(r.v, s.v));
    CHECK(same_bits(r.master, s.master));
    CHECK(same_bits(r.rng, s.rng));
    CHECK(same_bits(r.loader, s.loader));
    CHECK(same_bits(r.extra, s.extra));

    // Optional sections may be empty.
    s.master.clear();
    s.extra.clear();
    save_train_state(path, c, s);
    r = load_train_state(path, c, 2, 4);
    CHECK(r.master.empty());
    CHECK(r.extra.empty());
    CHECK(same_bits(r.loader, s.loader));
}

TEST_CASE("training state refusals", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    const size_t n = param_layout(c).total;
    const std::string path = dir / "state.bin";
    save_train_state(path, c, random_state(c, 1, 2, std::random_device{}()));

    SECTION("world size") {
        std::string e = error_of<InputError>([&] { load_train_state(path, c, 1, 3); });
        CHECK(e.find("checkpoint written by 2 processes, this run has 3; resume with the same -np (2)") !=
              std::string::npos);
    }
    SECTION("rank") {
        std::string e = error_of<InputError>([&] { load_train_state(path, c, 0, 2); });
        CHECK(e.find("training state of rank 1 opened by rank 0") != std::string::npos);
    }
    SECTION("config hash") {
        ModelConfig other = c;
        other.window = 6;  // same parameter count, different model
        std::string e = error_of<InputError>([&] { load_train_state(path, other, 1, 2); });
        CHECK(e.find("different model configuration") != std::string::npos);
    }
    SECTION("checksum") {
        Rng rng(std::random_device{}());
        flip_byte(path, 1024 + rng.below(fs::file_size(path) - 1024));
        std::string e = error_of<CheckpointDamaged>([&] { load_train_state(path, c, 1, 2); });
        CHECK(e.find("checksum mismatch") != std::string::npos);
    }
    SECTION("truncated") {
        fs::resize_file(path, fs::file_size(path) - 8);
        std::string e = error_of<CheckpointDamaged>([&] { load_train_state(path, c, 1, 2); });
        CHECK(e.find("truncated") != std::string::npos);
    }
    SECTION("wrong sizes on save") {
        TrainState s = random_state(c, 0, 1, 3);
        s.v.resize(n - 1);
        std::string e = error_of<InputError>([&] { save_train_state(dir / "x.bin", c, s); });
        CHECK(e.find("AdamW moments") != std::string::npos);
        CHECK_FALSE(fs::exists(dir / "x.bin"));
    }
}

// ---------------------------------------------------------------------------------------------
// checkpoint directory

namespace {
// Writes a complete (marked) checkpoint of `world` ranks at step; params depend on the step.
void save_step(const std::string& dir, const ModelConfig& c, int step, int world = 1, bool mark = true) {
    std::vector<float> p = random_floats(param_layout(c).total, 1000 + step);
    save_model_checkpoint(model_path(dir, step), c, p.data(), step);
    for (int r = 0; r < world; r++) {
        TrainState s = random_state(c, r, world, 2000 + step);
        s.step = step;
        save_train_state(state_path(dir, step, r), c, s);
    }
    if (mark) write_done_marker(dir, step, world);
}

TEST_CASE("checkpoint names", "[checkpoint]") {
    CHECK(model_path("out", 42) == "out/model_00000042.bin");
    CHECK(model_path("out/", 42) == "out/model_00000042.bin");
    CHECK(state_path("out", 42, 3) == "out/state_00000042_00003.bin");
    CHECK(done_path("out", 42) == "out/DONE_00000042");
    int step = 0;
    CHECK(parse_checkpoint_name("model_00000042.bin", step) == CkptFileKind::Model);
    CHECK(step == 42);
    CHECK(parse_checkpoint_name("state_00000042_00003.bin", step) == CkptFileKind::State);
    CHECK(parse_checkpoint_name("DONE_123456789", step) == CkptFileKind::Done);
    CHECK(step == 123456789);
    CHECK(parse_checkpoint_name("model_00000042.bin.tmp.ab12CD", step) == CkptFileKind::Model);
    CHECK(parse_checkpoint_name("model_00000042.binx", step) == CkptFileKind::None);
    CHECK(parse_checkpoint_name("model_.bin", step) == CkptFileKind::None);
    CHECK(parse_checkpoint_name("DONE_", step) == CkptFileKind::None);
    CHECK(parse_checkpoint_name("metrics.jsonl", step) == CkptFileKind::None);
    CHECK(parse_checkpoint_name("DONE_99999999999", step) == CkptFileKind::None);
}

TEST_CASE("markers: only marked steps count, marker needs every file", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    CHECK(newest_complete_step(dir.path) == -1);
    CHECK(newest_complete_step(dir / "does_not_exist") == -1);
    CHECK_FALSE(load_newest_checkpoint(dir.path, c, 0, 1).has_value());

    save_step(dir.path, c, 10);
    save_step(dir.path, c, 20, 1, /*mark=*/false);  // a save that never finished
    CHECK(complete_steps(dir.path) == std::vector<int>{10});
    CHECK(newest_complete_step(dir.path) == 10);

    // Two ranks: the marker is refused until rank 1's file exists.
    save_model_checkpoint(model_path(dir.path, 30), c, random_floats(param_layout(c).total, 5).data(), 30);
    TrainState s0 = random_state(c, 0, 2, 6);
    s0.step = 30;
    save_train_state(state_path(dir.path, 30, 0), c, s0);
    std::string e = error_of<InputError>([&] { write_done_marker(dir.path, 30, 2); });
    CHECK(e.find("state_00000030_00001.bin is missing") != std::string::npos);
    CHECK_FALSE(fs::exists(done_path(dir.path, 30)));
    TrainState s1 = random_state(c, 1, 2, 7);
    s1.step = 30;
    save_train_state(state_path(dir.path, 30, 1), c, s1);
    write_done_marker(dir.path, 30, 2);
    CHECK(newest_complete_step(dir.path) == 30);

    auto ck = load_newest_checkpoint(dir.path, c, 1, 2);
    REQUIRE(ck.has_value());
    CHECK(ck->step == 30);
    CHECK(same_bits(ck->state.m, s1.m));
    CHECK(same_bits(ck->state.loader, s1.loader));
    // max_step lets ranks agree on an older step.
    auto older = load_newest_checkpoint(dir.path, c, 0, 1, 29);
    REQUIRE(older.has_value());
    CHECK(older->step == 10);
    CHECK(!has_temp_files(dir.path));
}

TEST_CASE("a damaged newest checkpoint falls back to the previous complete one", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    save_step(dir.path, c, 10);
    save_step(dir.path, c, 20);
    save_step(dir.path, c, 30);

    std::stringstream err;
    auto* old_buf = std::cerr.rdbuf(err.rdbuf());
    SECTION("flipped byte in the newest model") {
        flip_byte(model_path(dir.path, 30), 2000);
        auto ck = load_newest_checkpoint(dir.path, c, 0, 1);
        std::cerr.rdbuf(old_buf);
        REQUIRE(ck.has_value());
        CHECK(ck->step == 20);
        CHECK(ck->model.step == 20);
        CHECK(same_bits(ck->model.params, random_floats(param_layout(c).total, 1000 + 20)));
        CHECK(err.str().find("warning: checkpoint step 30 is damaged") != std::string::npos);
        CHECK(err.str().find("checksum mismatch") != std::string::npos);
    }
    SECTION("truncated newest state and missing state of the one before") {
        fs::resize_file(state_path(dir.path, 30, 0), 2000);
        fs::remove(state_path(dir.path, 20, 0));
        auto ck = load_newest_checkpoint(dir.path, c, 0, 1);
        std::cerr.rdbuf(old_buf);
        REQUIRE(ck.has_value());
        CHECK(ck->step == 10);
        CHECK(err.str().find("step 30 is damaged") != std::string::npos);
        CHECK(err.str().find("step 20 is damaged") != std::string::npos);
    }
    SECTION("all damaged") {
        for (int s : {10, 20, 30}) flip_byte(model_path(dir.path, s), 1500);
        std::string e = error_of<InputError>([&] { load_newest_checkpoint(dir.path, c, 0, 1); });
        std::cerr.rdbuf(old_buf);
        CHECK(e.find("no usable checkpoint") != std::string::npos);
        CHECK(e.find("all 3 complete checkpoints are damaged") != std::string::npos);
    }
    SECTION("a different model is refused, not skipped") {
        ModelConfig other = c;
        other.num_layers = 3;
        std::string e = error_of<InputError>([&] { load_newest_checkpoint(dir.path, other, 0, 1); });
        std::cerr.rdbuf(old_buf);
        CHECK(e.find("layers 2 vs 3") != std::string::npos);
        CHECK(err.str().empty());
    }
    SECTION("a different process count is refused, not skipped") {
        std::string e = error_of<InputError>([&] { load_newest_checkpoint(dir.path, c, 0, 2); });
        std::cerr.rdbuf(old_buf);
        CHECK(e.find("checkpoint written by 1 processes, this run has 2") != std::string::npos);
    }
    std::cerr.rdbuf(old_buf);
}

TEST_CASE("the checkpoints -y 1 fell back past are retired, and a new save of the step clears that", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    for (int s : {10, 20, 30, 40}) save_step(dir.path, c, s);
    fs::resize_file(state_path(dir.path, 40, 0), 2000);
    flip_byte(model_path(dir.path, 30), 2000);
    std::stringstream err;
    auto* old_buf = std::cerr.rdbuf(err.rdbuf());
    auto ck = load_newest_checkpoint(dir.path, c, 0, 1);
    std::cerr.rdbuf(old_buf);
    REQUIRE(ck.has_value());
    REQUIRE(ck->step == 20);
    CHECK(ck->damaged_newer == std::vector<int>{40, 30});  // the steps this rank found damaged, newest first
    // only the steps given: a marked step no one found damaged (another rank's view) keeps its marker
    CHECK(retire_checkpoints(dir.path, {40}) == std::vector<int>{40});
    CHECK(complete_steps(dir.path) == std::vector<int>{10, 20, 30});
    CHECK(retire_checkpoints(dir.path, ck->damaged_newer) == std::vector<int>{30});
    CHECK(complete_steps(dir.path) == std::vector<int>{10, 20});
    for (int s : {30, 40}) {
        CHECK(fs::exists(damaged_marker_path(dir.path, s)));  // the marker renamed
        CHECK(fs::exists(model_path(dir.path, s)));           // the files stay, for inspection
        CHECK(fs::exists(state_path(dir.path, s, 0)));
    }
    CHECK(retire_checkpoints(dir.path, ck->damaged_newer).empty());  // retired already
    // the step written again: complete, and no longer marked damaged
    save_step(dir.path, c, 30);
    CHECK(complete_steps(dir.path) == std::vector<int>{10, 20, 30});
    CHECK_FALSE(fs::exists(damaged_marker_path(dir.path, 30)));
    // an unpadded marker too (DONE_5 and DONE_00000005 are one step)
    std::ofstream(dir / "DONE_50") << "step 50 world_size 1\n";
    CHECK(retire_checkpoints(dir.path, {50}) == std::vector<int>{50});
    CHECK(fs::exists(damaged_marker_path(dir.path, 50)));
    // pruning deletes a retired step's files with its marker, as those of any step it does not keep
    save_step(dir.path, c, 60);
    CHECK(prune_checkpoints(dir.path, 2, 60) == std::vector<int>{10, 20, 40, 50});  // each gets its line
    CHECK_FALSE(fs::exists(damaged_marker_path(dir.path, 40)));
    CHECK_FALSE(fs::exists(model_path(dir.path, 40)));
    CHECK(complete_steps(dir.path) == std::vector<int>{30, 60});
}

// Rewrites step's model and state files (world 1) as a build before header checksums wrote them: model
// version 1 or 2 by its fields and words 22-23 zero, state version 1 and words 19-20 zero.
void make_legacy_step(const std::string& dir, const ModelConfig& c, int step) {
    const std::string m = model_path(dir, step), s = state_path(dir, step, 0);
    set_header_int(m, 1, c.bias && c.gelu == Gelu::Tanh ? 1 : 2);
    set_header_int(m, 22, 0);
    set_header_int(m, 23, 0);
    set_header_int(s, 1, 1);
    set_header_int(s, 19, 0);
    set_header_int(s, 20, 0);
}
}  // namespace

TEST_CASE("a bit flip in the newest checkpoint's header falls back too", "[checkpoint]") {
    // docs/reliability.md "Chaos soak" fix 3: without a header checksum (files of older builds) a flip in
    // a model field that leaves the parameter count (window, global heads, soft-cap) read as the user's
    // model mismatch, and one in the state file's config hash, rank or world size too: the run stopped
    // with an error instead of falling back; a flip in a reserved (zero) field went unnoticed. The
    // sections "legacy ..." keep that pairing of the two files tested on such files.
    TempDir dir;
    ModelConfig c = small_config();
    for (int s : {10, 20, 30}) save_step(dir.path, c, s);
    const std::string model30 = model_path(dir.path, 30), state30 = state_path(dir.path, 30, 0);
    std::stringstream err;
    auto* old_buf = std::cerr.rdbuf(err.rdbuf());
    std::string expect;
    SECTION("legacy model: window") {
        make_legacy_step(dir.path, c, 30);
        set_header_int(model30, 9, c.window + 1);
        expect = "describes another model";
    }
    SECTION("legacy model: global heads") {
        make_legacy_step(dir.path, c, 30);
        set_header_int(model30, 8, c.global_heads ^ 1);
        expect = "describes another model";
    }
    SECTION("legacy model: a reserved field") {
        make_legacy_step(dir.path, c, 30);
        set_header_int(model30, 200, 1 << 20);
        expect = "reserved header field 200";
    }
    SECTION("legacy state: config hash") {
        make_legacy_step(dir.path, c, 30);
        flip_byte(state30, 7 * 4 + 2);
        expect = "another model";
    }
    SECTION("legacy state: rank") {
        make_legacy_step(dir.path, c, 30);
        set_header_int(state30, 3, 1);
        expect = "rank 1";
    }
    SECTION("legacy state: world size (the marker says 1)") {
        make_legacy_step(dir.path, c, 30);
        set_header_int(state30, 4, 3);
        expect = "3 processes";
    }
    SECTION("legacy state: a reserved field") {
        make_legacy_step(dir.path, c, 30);
        set_header_int(state30, 100, -1);
        expect = "reserved header field 100";
    }
    SECTION("model: window") {
        set_header_int(model30, 9, c.window + 1);
        expect = "header checksum";
    }
    SECTION("model: trained sequence length") {
        set_header_int(model30, 19, 1);
        expect = "header checksum";
    }
    SECTION("model: version (to one this build does not read)") {
        set_header_int(model30, 1, read_header(model30)[1] ^ 4);
        expect = "version word";
    }
    SECTION("state: version (to one this build does not read)") {
        set_header_int(state30, 1, read_header(state30)[1] ^ 1);
        expect = "version word";
    }
    SECTION("state: step") {
        set_header_int(state30, 2, 29);
        expect = "header checksum";
    }
    std::optional<LoadedCheckpoint> ck;
    std::string e;
    try {
        ck = load_newest_checkpoint(dir.path, c, 0, 1);
    } catch (const std::exception& x) { e = x.what(); }
    std::cerr.rdbuf(old_buf);
    INFO(err.str());
    CHECK(e == "");
    REQUIRE(ck.has_value());
    CHECK(ck->step == 20);
    CHECK(err.str().find("warning: checkpoint step 30 is damaged") != std::string::npos);
    CHECK(err.str().find(expect) != std::string::npos);
}

TEST_CASE("every single-bit flip in a checkpoint header this build wrote is detected and falls back", "[checkpoint]") {
    // A flip anywhere in the 1024-byte header of the newest step's model or state file: every bit of the
    // fields' words (model 0..23, state 0..20), one bit of each other byte. The step is skipped as
    // damaged (never loaded, never an error that names the user's flags) and step 20 loads.
    TempDir dir;
    ModelConfig c = small_config();
    for (int s : {10, 20, 30}) save_step(dir.path, c, s);
    int checked = 0;
    for (const std::string& path : {model_path(dir.path, 30), state_path(dir.path, 30, 0)}) {
        const bool model = path == model_path(dir.path, 30);
        const std::vector<char> original = read_bytes(path);
        for (size_t byte = 0; byte < CKPT_HEADER_BYTES; byte++) {
            const bool field = byte < (model ? 24u : 21u) * 4;
            for (int bit = field ? 0 : (int)(byte % 8); bit < (field ? 8 : (int)(byte % 8) + 1); bit++) {
                std::vector<char> b = original;
                b[byte] = (char)(b[byte] ^ (1 << bit));
                write_bytes(path, b);
                std::stringstream err;
                auto* old_buf = std::cerr.rdbuf(err.rdbuf());
                std::optional<LoadedCheckpoint> ck;
                std::string e;
                try {
                    ck = load_newest_checkpoint(dir.path, c, 0, 1);
                } catch (const std::exception& x) { e = x.what(); }
                std::cerr.rdbuf(old_buf);
                INFO((model ? "model" : "state") << " byte " << byte << " bit " << bit << ": " << e << err.str());
                REQUIRE(e == "");
                REQUIRE(ck.has_value());
                REQUIRE(ck->step == 20);
                checked++;
            }
        }
        write_bytes(path, original);
    }
    CHECK(checked == (24 + 21) * 4 * 8 + (2 * 1024 - (24 + 21) * 4));
    REQUIRE(load_newest_checkpoint(dir.path, c, 0, 1)->step == 30);
}

TEST_CASE("a model or state file of another version with an intact header is refused, not skipped", "[checkpoint]") {
    // A file of another build (a version this build does not read, its header checksum consistent with
    // it) is the user's to resolve: "use the build that wrote it", not a silent fallback.
    TempDir dir;
    ModelConfig c = small_config();
    save_step(dir.path, c, 10);
    for (const std::string& path : {model_path(dir.path, 10), state_path(dir.path, 10, 0)}) {
        const std::vector<char> original = read_bytes(path);
        const bool model = path == model_path(dir.path, 10);
        const int sum_at = model ? 22 : 19;
        std::vector<int32_t> h = read_header(path);
        h[1] = 9;
        h[sum_at] = h[sum_at + 1] = 0;
        const uint64_t sum = fnv1a64(h.data(), CKPT_HEADER_BYTES);
        put_u64(h.data(), sum_at, sum);
        std::vector<char> b = original;
        std::memcpy(b.data(), h.data(), CKPT_HEADER_BYTES);
        write_bytes(path, b);
        const std::string e = error_of<InputError>([&] { load_newest_checkpoint(dir.path, c, 0, 1); });
        INFO(e);
        CHECK(e.find("version 9") != std::string::npos);
        CHECK(e.find("damaged") == std::string::npos);
        write_bytes(path, original);
    }
}

TEST_CASE("a checkpoint of a build before header checksums still loads", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    save_step(dir.path, c, 10);
    make_legacy_step(dir.path, c, 10);
    std::optional<LoadedCheckpoint> ck = load_newest_checkpoint(dir.path, c, 0, 1);
    REQUIRE(ck.has_value());
    CHECK(ck->step == 10);
}

TEST_CASE("another model's or process count's checkpoint is still refused, not skipped", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config(), other = small_config();
    other.window = c.window + 1;  // the same parameter count: only the header and the hash differ
    save_step(dir.path, other, 10);
    CHECK(error_of<InputError>([&] { load_newest_checkpoint(dir.path, c, 0, 1); }).find("window") != std::string::npos);
    CHECK(error_of<InputError>([&] { load_newest_checkpoint(dir.path, other, 0, 2); }).find("1 processes") !=
          std::string::npos);
}

TEST_CASE("pruning keeps the newest K complete checkpoints", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config(false, true);
    save_step(dir.path, c, 5, 1, /*mark=*/false);  // leftover of a crashed save, older than newest
    for (int s : {10, 20, 30, 40}) save_step(dir.path, c, s, 2);
    save_step(dir.path, c, 50, 2, /*mark=*/false);  // a save in progress: newer than the newest complete
    {
        std::ofstream(dir / "model_00000005.bin.tmp.abcdef") << "x";  // stale temporary
        std::ofstream(dir / "metrics.jsonl") << "{}\n";               // not ours
    }
    CHECK(steps_next_save_prunes(dir.path, 2) == std::vector<int>{10, 20, 30});    // a new step + the newest
    CHECK(steps_next_save_prunes(dir.path, 2, {10}) == std::vector<int>{20, 30});  // pinned: never pruned
    CHECK(steps_next_save_prunes(dir.path, 0).empty());
    CHECK(steps_next_save_prunes(dir.path, 5).empty());
    // the complete steps it deleted (the unfinished save of step 5 is no checkpoint)
    CHECK(prune_checkpoints(dir.path, 2, 40) == std::vector<int>{10, 20});
    CHECK(complete_steps(dir.path) == std::vector<int>{30, 40});
    for (int s : {5, 10, 20}) {
        CHECK_FALSE(fs::exists(model_path(dir.path, s)));
        CHECK_FALSE(fs::exists(state_path(dir.path, s, 0)));
    }
    CHECK_FALSE(fs::exists(dir / "model_00000005.bin.tmp.abcdef"));
    for (int s : {30, 40, 50}) {
        CHECK(fs::exists(model_path(dir.path, s)));
        CHECK(fs::exists(state_path(dir.path, s, 1)));
    }
    CHECK(fs::exists(dir / "metrics.jsonl"));
    REQUIRE(load_newest_checkpoint(dir.path, c, 1, 2).has_value());

    // keep = 1 still keeps the newest and the protected step; keep <= 0 keeps everything.
    CHECK(prune_checkpoints(dir.path, 0).empty());
    CHECK(complete_steps(dir.path) == std::vector<int>{30, 40});
    CHECK(prune_checkpoints(dir.path, 1, 30).empty());
    CHECK(complete_steps(dir.path) == std::vector<int>{30, 40});
    CHECK(prune_checkpoints(dir.path, 1) == std::vector<int>{30});
    CHECK(complete_steps(dir.path) == std::vector<int>{40});
    CHECK(fs::exists(model_path(dir.path, 50)));
}

TEST_CASE("pruning removes stale temporaries of kept steps, whatever the keep count", "[checkpoint]") {
    // docs/reliability.md "Chaos soak" fix 1: a kill in the middle of writing step s's file left
    // "<file>.tmp.XXXXXX"; once s was complete (written again after the resume) the temporary was
    // kept with its step, and with --keep-checkpoints 0 no temporary was ever removed.
    TempDir dir;
    ModelConfig c = small_config(false, true);
    for (int s : {10, 20, 30}) save_step(dir.path, c, s, 1);
    const std::vector<std::string> stale = {"model_00000030.bin.tmp.aaaaaa", "state_00000020_00000.bin.tmp.bbbbbb",
                                            "DONE_00000030.tmp.cccccc", "model_00000010.bin.tmp.dddddd"};
    const std::string in_progress = "model_00000040.bin.tmp.eeeeee";  // newer than the newest complete
    auto make_temporaries = [&] {
        for (const std::string& n : stale) std::ofstream(dir / n) << "x";
        std::ofstream(dir / in_progress) << "x";
    };
    SECTION("keep 3") {
        make_temporaries();
        prune_checkpoints(dir.path, 3, 30);
    }
    SECTION("keep 0 (keep all)") {
        make_temporaries();
        prune_checkpoints(dir.path, 0, 30);
    }
    for (const std::string& n : stale) CHECK_FALSE(fs::exists(dir / n));
    CHECK(fs::exists(dir / in_progress));
    CHECK(complete_steps(dir.path) == std::vector<int>{10, 20, 30});
    for (int s : {10, 20, 30}) CHECK(fs::exists(model_path(dir.path, s)));
}

TEST_CASE("a step marked twice (DONE_5 and DONE_00000005) is one complete step", "[checkpoint]") {
    // docs/reliability.md fix 13: it was listed twice, so --keep-checkpoints 2 could keep one step
    TempDir dir;
    ModelConfig c = small_config(false, true);
    for (int s : {5, 6, 7}) save_step(dir.path, c, s, 1);
    std::ofstream(dir / "DONE_5") << "step 5 world_size 1\n";
    std::ofstream(dir / "DONE_0007") << "step 7 world_size 1\n";
    CHECK(complete_steps(dir.path) == std::vector<int>{5, 6, 7});
    prune_checkpoints(dir.path, 2, 7);
    CHECK(complete_steps(dir.path) == std::vector<int>{6, 7});
    CHECK(fs::exists(model_path(dir.path, 6)));
    CHECK_FALSE(fs::exists(model_path(dir.path, 5)));
    CHECK_FALSE(fs::exists(dir / "DONE_5"));
}

// ---------------------------------------------------------------------------------------------
// atomic writes

TEST_CASE("a failed save leaves an existing checkpoint intact", "[checkpoint]") {
    TempDir dir;
    ModelConfig c = small_config();
    const size_t n = param_layout(c).total;
    std::vector<float> old_params = random_floats(n, std::random_device{}());
    const std::string path = model_path(dir.path, 10);
    save_model_checkpoint(path, c, old_params.data(), 10);
    const std::vector<char> before = read_bytes(path);
    std::vector<float> new_params = random_floats(n, std::random_device{}());

    SECTION("the write fails midway (file-size limit, like a full disk)") {
        struct rlimit old_lim;
        REQUIRE(getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
        auto old_handler = signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = old_lim;
        lim.rlim_cur = 4096;  // the model is larger: write() fails with EFBIG partway
        REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        std::string e;
        try {
            save_model_checkpoint(path, c, new_params.data(), 20);
        } catch (const InputError& ex) { e = ex.what(); }
        setrlimit(RLIMIT_FSIZE, &old_lim);
        signal(SIGXFSZ, old_handler);
        CHECK(e.find("writing") != std::string::npos);
        CHECK(e.find("File too large") != std::string::npos);
        CHECK(e.find(path + " was left unchanged") != std::string::npos);
    }
    SECTION("the directory cannot hold new files") {
        // A regular file where the directory should be: creating the temporary file fails.
        std::ofstream(dir / "not_a_dir") << "x";
        std::string e =
            error_of<InputError>([&] { save_model_checkpoint(dir / "not_a_dir/model.bin", c, new_params.data(), 20); });
        CHECK(e.find("cannot create a temporary file next to") != std::string::npos);
    }
    SECTION("the target is a directory: rename fails") {
        fs::create_directory(dir / "model_00000020.bin");
        std::string e =
            error_of<InputError>([&] { save_model_checkpoint(model_path(dir.path, 20), c, new_params.data(), 20); });
        CHECK(e.find("renaming") != std::string::npos);
    }
    CHECK(read_bytes(path) == before);
    CHECK_FALSE(has_temp_files(dir.path));
    ModelCheckpoint ck = load_model_checkpoint(path);
    CHECK(ck.step == 10);
    CHECK(same_bits(ck.params, old_params));
}
