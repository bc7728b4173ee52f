// Deterministic random numbers shared by every backend: weight initialization, data shuffling,
// sampling. A 64-bit xorshift* generator whose whole state is one uint64, so it is saved in the
// training-state file and a resumed run draws exactly what an uninterrupted one would.
#pragma once
#include <cmath>
#include <cstdint>

namespace llmc {

class Rng {
public:
    explicit Rng(uint64_t seed = 1337) { seed_state(seed); }
    void seed_state(uint64_t seed) { state_ = seed ? seed : 0x9E3779B97F4A7C15ull; }
    uint64_t state() const { return state_; }
    void set_state(uint64_t s) { state_ = s ? s : 0x9E3779B97F4A7C15ull; }

    uint64_t next_u64() {  // xorshift64*
        state_ ^= state_ >> 12;
        state_ ^= state_ << 25;
        state_ ^= state_ >> 27;
        return state_ * 0x2545F4914F6CDD1Dull;
    }
    uint32_t next_u32() { return (uint32_t)(next_u64() >> 32); }
    // Uniform in [0, 1) with 24 random bits (exactly representable in float).
    float uniform() { return (next_u32() >> 8) / 16777216.0f; }
    // Uniform integer in [0, n) (n > 0), by rejection so it is unbiased.
    uint64_t below(uint64_t n) {
        uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
        do { x = next_u64(); } while (x >= limit);
        return x % n;
    }
    // Standard normal by Box-Muller (one value per call; no cached second value, so the state
    // is the single uint64 above).
    float normal() {
        double u1 = ((next_u64() >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
        double u2 = (next_u64() >> 11) / 9007199254740992.0;          // [0, 1)
        return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }

private:
    uint64_t state_;
};

}  // namespace llmc
