// Scaling runs of the flat parameter vector in place (Backend::scale_params; QK-Clip,
// llmc/train/qk_clip.h, is the caller). A run is `count` consecutive elements of the canonical
// layout (llmc/core/params.h) starting at `offset`, each multiplied by `factor` in fp32
// (p = p * factor, one rounding), the same operation on every backend and on a ZeRO-1 master shard.
#pragma once
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc {

// A run of parameters (canonical layout, element offsets) to multiply by factor.
struct ParamScale {
    size_t offset, count;
    float factor;
};

// Applies the scales to a slice of the flat parameter vector: data holds elements
// [begin, begin + n) (the whole vector: begin 0, n = total; a ZeRO-1 shard: its range).
inline void apply_param_scales(float* data, size_t begin, size_t n, const std::vector<ParamScale>& scales) {
    const size_t end = begin + n;
    for (const ParamScale& s : scales) {
        const size_t lo = s.offset > begin ? s.offset : begin;
        const size_t hi = s.offset + s.count < end ? s.offset + s.count : end;
        for (size_t i = lo; i < hi; i++) data[i - begin] *= s.factor;
    }
}

// The contract of Backend::scale_params: every run lies inside [0, total) and no two runs share an
// element (a device applies the runs in parallel, so an element in two runs would be a race).
// Throws std::invalid_argument naming the first offending run.
inline void check_param_scales(const std::vector<ParamScale>& scales, size_t total) {
    std::vector<ParamScale> sorted = scales;
    std::sort(sorted.begin(), sorted.end(),
              [](const ParamScale& a, const ParamScale& b) { return a.offset < b.offset; });
    size_t covered_to = 0, covered_by = 0;  // the furthest end of the runs so far, and its run's offset
    for (const ParamScale& s : sorted) {
        if (s.offset > total || s.count > total - s.offset)
            throw std::invalid_argument("scale_params: run [" + std::to_string(s.offset) + ", +" +
                                        std::to_string(s.count) + ") lies outside the " + std::to_string(total) +
                                        " parameters");
        if (s.count == 0) continue;
        if (s.offset < covered_to)
            throw std::invalid_argument("scale_params: runs at " + std::to_string(covered_by) + " and " +
                                        std::to_string(s.offset) + " overlap");
        covered_to = s.offset + s.count;
        covered_by = s.offset;
    }
}

}  // namespace llmc
