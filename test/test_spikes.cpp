// Spike detection (llmc/train/spikes.h): z-scores against an independent two-pass computation,
// NaN until the window is full, the window really moves, non-finite values are ignored, and the
// state round-trips exactly (resume).
#include <catch2/catch.hpp>

#include <cmath>
#include <deque>

#include "llmc/core/rng.h"
#include "llmc/train/spikes.h"

static double ref_z(const std::deque<double>& w, double x) {
    double mean = 0.0;
    for (double v : w) mean += v;
    mean /= w.size();
    double var = 0.0;
    for (double v : w) var += (v - mean) * (v - mean);
    return (x - mean) / std::sqrt(var / w.size());
}

TEST_CASE("z-score is NaN until the window is full, then matches the moving-window formula", "[spikes]") {
    const int W = 7;
    llmc::SpikeDetector d(W);
    llmc::Rng rng(42);
    std::deque<double> window;
    for (int i = 0; i < 60; i++) {
        double x = 3.0 + rng.normal() * (1.0 + 0.05 * i);
        double z = d.zscore(x);
        if ((int)window.size() < W) {
            CHECK(std::isnan(z));
        } else {
            CHECK(z == Approx(ref_z(window, x)).epsilon(1e-12));
        }
        d.push(x);
        window.push_back(x);
        if ((int)window.size() > W) window.pop_front();
    }
}

TEST_CASE("a spike stands out; a constant window gives z = 0", "[spikes]") {
    llmc::SpikeDetector d(10);
    for (int i = 0; i < 10; i++) d.push(2.0 + 0.01 * (i % 2));  // mean 2.005, std 0.005
    CHECK(d.zscore(2.005) == Approx(0.0).margin(1e-9));
    CHECK(d.zscore(2.5) == Approx(99.0).epsilon(1e-9));
    CHECK(d.zscore(1.5) < -50.0);
    llmc::SpikeDetector flat(3);
    for (int i = 0; i < 3; i++) flat.push(1.0);
    CHECK(flat.zscore(5.0) == 0.0);
}

TEST_CASE("non-finite values never enter the window", "[spikes]") {
    llmc::SpikeDetector d(4);
    for (double x : {1.0, 2.0, (double)NAN, 3.0, (double)INFINITY, 4.0}) d.push(x);
    CHECK(d.count() == 4);
    CHECK(d.zscore(2.5) == Approx(0.0).margin(1e-12));  // window {1,2,3,4}
    CHECK(std::isnan(d.zscore(NAN)));
}

TEST_CASE("state round-trips exactly and a different window is refused", "[spikes]") {
    llmc::SpikeDetector a(5), b(5);
    llmc::Rng rng(7);
    for (int i = 0; i < 13; i++) a.push(rng.normal());
    b.from_vector(a.to_vector());
    for (int i = 0; i < 20; i++) {
        double x = rng.normal();
        CHECK(a.zscore(x) == b.zscore(x));  // bit-identical
        a.push(x);
        b.push(x);
    }
    llmc::SpikeDetector c(6);
    CHECK_THROWS_WITH(c.from_vector(a.to_vector()), Catch::Contains("--spike-window"));
    CHECK_THROWS_WITH(llmc::SpikeDetector(1), Catch::Contains("--spike-window must be >= 2"));
}
