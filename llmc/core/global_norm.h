// Squared L2 norm of a gradient buffer, for clipping by the global gradient norm.
// Deterministic and independent of the thread count: the buffer is cut into fixed chunks of
// GN_CHUNK elements (the cut depends on n only); each chunk is summed in double by one thread in
// 8 interleaved lanes (vectorizable, fixed order), and the chunk sums are added in order.
#pragma once
#include <cstddef>
#include <vector>

namespace llmc {

constexpr size_t GN_CHUNK = 1 << 14;

// g (n) fp32; returns sum_i g[i]^2 in double.
inline double global_norm_squared(const float* g, size_t n) {
    const size_t num_chunks = (n + GN_CHUNK - 1) / GN_CHUNK;
    std::vector<double> partial(num_chunks);
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < num_chunks; ch++) {
        const size_t i0 = ch * GN_CHUNK;
        const size_t i1 = i0 + GN_CHUNK < n ? i0 + GN_CHUNK : n;
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        size_t i = i0;
        for (; i + 8 <= i1; i += 8)
            for (int j = 0; j < 8; j++) lane[j] += (double)g[i + j] * (double)g[i + j];
        for (; i < i1; i++) lane[0] += (double)g[i] * (double)g[i];
        double s = 0.0;
        for (int j = 0; j < 8; j++) s += lane[j];
        partial[ch] = s;
    }
    double total = 0.0;
    for (size_t ch = 0; ch < num_chunks; ch++) total += partial[ch];
    return total;
}

}  // namespace llmc
