// Spike (outlier) detection for the training loop, in the spirit of llm.c's outlier detector:
// the z-score of a new value (loss or gradient norm) against the last W values.
//   z = (x - mean) / std   over the window (population std), computed before x joins it.
// The z-score is NaN until the window holds W values (too little history to judge), and 0 when
// the window's std is 0. Non-finite values never enter the window (they would poison it).
// The whole state (window contents, fill count, ring position) round-trips through
// to_vector()/from_vector() so a resumed run sees exactly the z-scores of an uninterrupted one.
#pragma once
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "llmc/core/error.h"

namespace llmc {

class SpikeDetector {
public:
    explicit SpikeDetector(int window = 100) : window_(window), values_(window > 0 ? window : 0, 0.0) {
        if (window < 2) throw InputError("--spike-window must be >= 2 (got " + std::to_string(window) + ")");
    }
    int window() const { return window_; }
    int count() const { return count_; }

    // z-score of x against the current window (NaN until the window is full).
    double zscore(double x) const {
        if (count_ < window_ || !std::isfinite(x)) return std::numeric_limits<double>::quiet_NaN();
        double sum = 0.0;
        for (double v : values_) sum += v;
        const double mean = sum / window_;
        double var = 0.0;
        for (double v : values_) var += (v - mean) * (v - mean);
        var /= window_;
        if (var <= 0.0) return 0.0;
        return (x - mean) / std::sqrt(var);
    }

    // Adds x to the window (dropping the oldest when full); non-finite x is ignored.
    void push(double x) {
        if (!std::isfinite(x)) return;
        values_[next_] = x;
        next_ = (next_ + 1) % window_;
        if (count_ < window_) count_++;
    }

    // [window, count, next, values...]
    std::vector<double> to_vector() const {
        std::vector<double> out = {(double)window_, (double)count_, (double)next_};
        out.insert(out.end(), values_.begin(), values_.end());
        return out;
    }
    // Restores from to_vector()'s output starting at data[pos]; returns the position after it.
    // The numbers come from a file: each is range-checked as a double before any conversion to int
    // (NaN or 1e300 cast to int is undefined behaviour), and the window holds finite values only.
    size_t from_vector(const std::vector<double>& data, size_t pos = 0) {
        if (data.size() < pos + 3 || data[pos] != (double)window_ || data.size() - pos - 3 < (size_t)window_) {
            char got[32] = "?";
            if (data.size() > pos) std::snprintf(got, sizeof got, "%.10g", data[pos]);
            throw InputError(std::string("spike-detector state in the checkpoint has window ") + got +
                             ", this run uses --spike-window " + std::to_string(window_) +
                             "; resume with the same --spike-window");
        }
        auto corrupt = [] {
            return InputError("spike-detector state in the checkpoint is corrupt; resume from an earlier checkpoint");
        };
        const double count = data[pos + 1], next = data[pos + 2];
        if (!(count >= 0 && count <= window_ && count == std::floor(count)) ||
            !(next >= 0 && next < window_ && next == std::floor(next)))
            throw corrupt();
        for (int i = 0; i < window_; i++)
            if (!std::isfinite(data[pos + 3 + i])) throw corrupt();
        count_ = (int)count;
        next_ = (int)next;
        for (int i = 0; i < window_; i++) values_[i] = data[pos + 3 + i];
        return pos + 3 + window_;
    }

private:
    int window_;
    std::vector<double> values_;
    int count_ = 0;  // values in the window (<= window_)
    int next_ = 0;   // ring position the next value goes to
};

}  // namespace llmc
