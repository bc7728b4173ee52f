// JSON written as text without an nlohmann tree (llmc/io/json_text.h append_json_*, and the per-step
// logit_stats.jsonl line of llmc/io/metrics.h) against nlohmann itself as the reference: the same
// values, types and key order as the record built as an nlohmann tree, on fresh random inputs (the
// seed printed with a failure).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/core/logit_stats.h"
#include "llmc/core/model_config.h"
#include "llmc/io/json_text.h"
#include "llmc/io/metrics.h"

using namespace llmc;

namespace {

// `x` through append_json_double, read back by nlohmann's parser.
nlohmann::json parsed_double(double x) {
    std::string s;
    append_json_double(s, x);
    return nlohmann::json::parse(s);
}

// The reference: the record as an nlohmann tree, in docs/formats.md's key order.
nlohmann::ordered_json reference_record(long step, const LogitStats& s, const ModelConfig& cfg) {
    auto num = [](float x) -> nlohmann::ordered_json {
        if (!std::isfinite(x)) return nullptr;
        return (double)x;
    };
    nlohmann::ordered_json heads = nlohmann::ordered_json::array();
    for (int l = 0; l < s.num_layers; l++) {
        for (int h = 0; h < s.num_heads; h++) {
            const size_t i = (size_t)l * s.num_heads + h;
            nlohmann::ordered_json a;
            a["layer"] = l;
            a["head"] = h;
            a["global"] = h >= cfg.num_heads - cfg.global_heads;
            a["max"] = num(s.max_logit[i]);
            a["min"] = num(s.min_logit[i]);
            a["entropy"] = num(s.entropy[i]);
            if (!s.near_mass.empty()) {
                a["near_mass"] = num(s.near_mass[i]);
                a["near_max"] = num(s.near_max_logit[i]);
                a["far_max"] = num(s.far_max_logit[i]);
            }
            heads.push_back(a);
        }
    }
    nlohmann::ordered_json rec;
    rec["step"] = step;
    rec["num_layers"] = s.num_layers;
    rec["num_heads"] = s.num_heads;
    rec["global_heads"] = cfg.global_heads;
    rec["window"] = cfg.window;
    if (!s.near_mass.empty()) rec["near"] = s.near_distance > 0 ? s.near_distance : cfg.window;
    rec["attn"] = heads;
    rec["out_max_logit"] = num(s.out_max_logit);
    rec["out_mean_lse"] = num(s.out_mean_lse);
    return rec;
}

// A float of any magnitude, or one of the values a formatter gets wrong: zeros, integers, powers of
// ten, the extremes, denormals, non-finite.
float random_stat(std::mt19937& rng) {
    static const float special[] = {0.0f,
                                    -0.0f,
                                    1.0f,
                                    -3.0f,
                                    100.0f,
                                    1e-5f,
                                    1e16f,
                                    123456792.0f,
                                    std::numeric_limits<float>::max(),
                                    std::numeric_limits<float>::lowest(),
                                    std::numeric_limits<float>::min(),
                                    std::numeric_limits<float>::denorm_min(),
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    std::numeric_limits<float>::quiet_NaN()};
    const uint32_t pick = rng() % 4;
    if (pick == 0) return special[rng() % (sizeof special / sizeof special[0])];
    if (pick == 1) return std::uniform_real_distribution<float>(-500.0f, 500.0f)(rng);
    const uint32_t bits = (uint32_t)rng();  // any bit pattern: every exponent
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

}  // namespace

TEST_CASE("append_json_double: nlohmann reads back the same double, as a float", "[json_text]") {
    const uint64_t seed = std::random_device{}();
    INFO("seed " << seed << ", shortest text: " << detail::kShortestDoubleText);
    std::mt19937_64 rng(seed);
    for (int k = 0; k < 50000; k++) {
        double x;
        const uint64_t bits = rng();
        std::memcpy(&x, &bits, sizeof x);
        if (k % 2) x = (double)(float)x;  // the records' values: floats widened
        if (k % 7 == 0) x = std::round(x);
        const nlohmann::json j = parsed_double(x);
        if (!std::isfinite(x)) {
            INFO("bits " << bits);
            REQUIRE(j.is_null());
            continue;
        }
        INFO("bits " << bits << " dump " << nlohmann::json(x).dump());
        REQUIRE(j.is_number_float());
        const double back = j.get<double>();
        REQUIRE(std::memcmp(&back, &x, sizeof x) == 0);  // bit for bit: -0.0 stays -0.0
    }
    for (const double x : {0.0, -0.0, 1.0, -1.0, 1e300, 5e-324, 123456789012345678.0, 0.1}) {
        INFO(x);
        const nlohmann::json j = parsed_double(x);
        REQUIRE(j.is_number_float());
        const double back = j.get<double>();
        CHECK(std::memcmp(&back, &x, sizeof x) == 0);
    }
    // the "%.17g" text (the fallback without floating-point std::to_chars) reads back bit for bit too
    for (int k = 0; k < 30000; k++) {
        double x;
        const uint64_t bits = rng();
        std::memcpy(&x, &bits, sizeof x);
        if (!std::isfinite(x)) continue;
        char buf[40];
        const size_t n = detail::double_text_17g(buf, sizeof buf, x);
        const double back = std::strtod(std::string(buf, n).c_str(), nullptr);
        INFO("bits " << bits << " text " << std::string(buf, n));
        REQUIRE(std::memcmp(&back, &x, sizeof x) == 0);
    }
    std::string s;
    append_json_double(s, 3.0);
    CHECK(s == "3.0");  // an integral value still reads as a float
    s.clear();
    append_json_double(s, std::nan(""));
    CHECK(s == "null");
}

TEST_CASE("logit_stats_line: the reference tree's values, types and key order", "[json_text][near_far]") {
    const uint32_t seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    for (int trial = 0; trial < 100; trial++) {
        ModelConfig cfg;
        cfg.num_layers = 1 + (int)(rng() % 6);
        cfg.num_heads = 1 + (int)(rng() % 8);
        cfg.channels = 16 * cfg.num_heads;
        cfg.global_heads = (int)(rng() % (cfg.num_heads + 1));
        cfg.window = 1 + (int)(rng() % 300);
        LogitStats s;
        s.resize(cfg.num_layers, cfg.num_heads);
        const bool near_far = rng() % 2;
        if (near_far) s.resize_near(cfg.num_layers, cfg.num_heads);
        s.near_distance = rng() % 2 ? 0 : 1 + (int)(rng() % 100);
        for (std::vector<float>* v :
             {&s.max_logit, &s.min_logit, &s.entropy, &s.near_mass, &s.near_max_logit, &s.far_max_logit})
            for (float& x : *v) x = random_stat(rng);
        s.out_max_logit = random_stat(rng);
        s.out_mean_lse = random_stat(rng);
        const long step = (long)(rng() % 1000000);
        const std::string line = logit_stats_line(step, s, cfg);
        INFO(line.substr(0, 400));
        REQUIRE(line.find('\n') == std::string::npos);
        const nlohmann::ordered_json got = nlohmann::ordered_json::parse(line);
        const nlohmann::ordered_json want = reference_record(step, s, cfg);
        REQUIRE(got == want);                // ordered: keys in the same order; numbers compared as doubles
        REQUIRE(got.dump() == want.dump());  // and the same types (a float stays a float)
    }
}

TEST_CASE("JsonObjectText: members in call order, commas between, nesting, misuse refused", "[json_text]") {
    std::string out;
    JsonObjectText empty(out);
    empty.close();
    CHECK(out == "{}");
    out.clear();
    JsonObjectText o(out);
    o.integer("a", -3);
    o.key("list");
    out += '[';
    JsonObjectText inner(out);
    inner.boolean("b", true);
    inner.number("x", 0.5);
    inner.number("y", std::nan(""));
    inner.close();
    out += ']';
    o.number("z", 2.0);
    o.close();
    CHECK(out == R"({"a":-3,"list":[{"b":true,"x":0.5,"y":null}],"z":2.0})");
    CHECK(nlohmann::ordered_json::parse(out).dump() == out);  // nlohmann writes the same text back
    CHECK_THROWS_AS(o.integer("late", 1), std::logic_error);
    CHECK_THROWS_AS(o.close(), std::logic_error);
}
