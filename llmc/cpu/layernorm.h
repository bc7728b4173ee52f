// LayerNorm over the last dimension on the CPU (eps = 1e-5, as GPT-2).
//   out = (inp - mean) * rstd * w + b,   rstd = 1 / sqrt(var + eps),  var biased (divides by C)
#pragma once
#include <cmath>
#include <cstddef>

namespace llmc {
namespace cpu {

constexpr float LAYERNORM_EPS = 1e-5f;

// out (N, C), mean (N), rstd (N) (saved for the backward); inp (N, C); w (C), b (C) or nullptr (no bias).
// N = B*T rows.
template <typename F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const F* x = inp + (size_t)n * C;
        F m = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        F v = 0;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        const F s = F(1) / std::sqrt(v + F(LAYERNORM_EPS));
        F* o = out + (size_t)n * C;
        if (b)
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        else
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// ADDS into dinp (N, C) (the residual stream's gradient: the gradient contract's exception,
// docs/design.md), dw (C), db (C; nullptr: a LayerNorm without bias). With xhat = (inp - mean) * rstd and g = dout * w:
//   dinp = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)),  dw = sum_n dout * xhat,  db = sum_n dout
// dinp is parallel over rows; dw and db over blocks of channels, each summing the rows in order.
template <typename F>
void layernorm_backward(F* dinp, F* dw, F* db, const F* dout, const F* inp, const F* w, const F* mean, const F* rstd,
                        int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const F* x = inp + (size_t)n * C;
        const F* d = dout + (size_t)n * C;
        const F m = mean[n], s = rstd[n];
        F g_mean = 0, gx_mean = 0;
        for (int c = 0; c < C; c++) {
            const F g = d[c] * w[c];
            g_mean += g;
            gx_mean += g * (x[c] - m) * s;
        }
        g_mean /= C;
        gx_mean /= C;
        F* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            const F xhat = (x[c] - m) * s;
            dx[c] += s * (d[c] * w[c] - g_mean - xhat * gx_mean);
        }
    }
    constexpr int CB = 16;  // channels per block
    const int num_blocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < num_blocks; blk++) {
        const int c0 = blk * CB;
        const int c1 = c0 + CB < C ? c0 + CB : C;
        for (int n = 0; n < N; n++) {
            const F* x = inp + (size_t)n * C;
            const F* d = dout + (size_t)n * C;
            const F m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dw[c] += d[c] * (x[c] - m) * s;
                if (db) db[c] += d[c];
            }
        }
    }
}

}  // namespace cpu
}  // namespace llmc
