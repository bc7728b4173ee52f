// QK-norm on the CPU (Dehghani et al. 2023; docs/design.md): a LayerNorm over the head dimension
// hd of every head's q and of every head's k inside llm.c's qkv buffer (B, T, 3C). One gain/bias
// pair of size hd for q and one for k, shared by the heads of the layer; v is copied through.
// eps = 1e-5, biased variance, as nn.LayerNorm.
//
// Determinism: the forward and the input gradient are per row (independent); the gain/bias
// gradients are reductions over rows, parallelized over the hd channels with every channel
// summing its rows in a fixed order, so results do not depend on the OpenMP thread count.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "llmc/core/error.h"

namespace llmc {
namespace cpu {

inline void qknorm_check_args(int B, int T, int C, int NH) {
    if (B < 1 || T < 1 || NH < 1 || C < 1 || C % NH != 0) {
        throw InputError("qknorm: need B, T >= 1 and channels C=" + std::to_string(C) +
                         " a positive multiple of heads NH=" + std::to_string(NH) + "; change --channels or --heads");
    }
}

// qkv_out: (B, T, 3C) normalized q and k, v copied. mean, rstd: (B, T, 2, NH), part 0 = q, 1 = k.
// qkv_in: (B, T, 3C). qw, qb, kw, kb: (hd); qb and kb both nullptr for a model without biases.
template <typename F>
void qknorm_forward(F* qkv_out, F* mean, F* rstd, const F* qkv_in, const F* qw, const F* qb, const F* kw, const F* kb,
                    int B, int T, int C, int NH) {
    qknorm_check_args(B, T, C, NH);
    const int hd = C / NH;
    const int C3 = 3 * C;
    const F eps = F(1e-5);
    const int64_t N = (int64_t)B * T;
#pragma omp parallel for
    for (int64_t r = 0; r < N; r++) {
        const F* x_row = qkv_in + r * C3;  // (3C)
        F* y_row = qkv_out + r * C3;       // (3C)
        for (int part = 0; part < 2; part++) {
            const F* w = part == 0 ? qw : kw;
            const F* bias = part == 0 ? qb : kb;
            for (int h = 0; h < NH; h++) {
                const F* x = x_row + part * C + h * hd;  // (hd)
                F* y = y_row + part * C + h * hd;        // (hd)
                F m = 0;
                for (int d = 0; d < hd; d++) m += x[d];
                m /= F(hd);
                F var = 0;
                for (int d = 0; d < hd; d++) var += (x[d] - m) * (x[d] - m);
                var /= F(hd);
                const F rs = F(1) / std::sqrt(var + eps);
                for (int d = 0; d < hd; d++) y[d] = (x[d] - m) * rs * w[d] + (bias ? bias[d] : F(0));
                mean[(r * 2 + part) * NH + h] = m;
                rstd[(r * 2 + part) * NH + h] = rs;
            }
        }
        for (int c = 2 * C; c < C3; c++) y_row[c] = x_row[c];  // v passes through
    }
}

// From dqkv_out (B, T, 3C): dqkv_in (B, T, 3C) overwritten; dqw, dqb, dkw, dkb (hd) added into (dqb, dkb
// both nullptr without biases).
template <typename F>
void qknorm_backward(F* dqkv_in, F* dqw, F* dqb, F* dkw, F* dkb, const F* dqkv_out, const F* qkv_in, const F* mean,
                     const F* rstd, const F* qw, const F* kw, int B, int T, int C, int NH) {
    qknorm_check_args(B, T, C, NH);
    const int hd = C / NH;
    const int C3 = 3 * C;
    const int64_t N = (int64_t)B * T;

    // input gradient, one row (b, t) at a time:
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w
#pragma omp parallel for
    for (int64_t r = 0; r < N; r++) {
        const F* x_row = qkv_in + r * C3;
        const F* dy_row = dqkv_out + r * C3;
        F* dx_row = dqkv_in + r * C3;
        for (int part = 0; part < 2; part++) {
            const F* w = part == 0 ? qw : kw;
            for (int h = 0; h < NH; h++) {
                const F* x = x_row + part * C + h * hd;
                const F* dy = dy_row + part * C + h * hd;
                F* dx = dx_row + part * C + h * hd;
                const F m = mean[(r * 2 + part) * NH + h];
                const F rs = rstd[(r * 2 + part) * NH + h];
                F mean_dxhat = 0, mean_dxhat_xhat = 0;
                for (int d = 0; d < hd; d++) {
                    F xhat = (x[d] - m) * rs;
                    F dxhat = dy[d] * w[d];
                    mean_dxhat += dxhat;
                    mean_dxhat_xhat += dxhat * xhat;
                }
                mean_dxhat /= F(hd);
                mean_dxhat_xhat /= F(hd);
                for (int d = 0; d < hd; d++) {
                    F xhat = (x[d] - m) * rs;
                    F dxhat = dy[d] * w[d];
                    dx[d] = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
                }
            }
        }
        for (int c = 2 * C; c < C3; c++) dx_row[c] = dy_row[c];  // v passes through
    }

    // gain and bias gradients: one task per (part, channel d), rows summed in order (r, h)
#pragma omp parallel for
    for (int task = 0; task < 2 * hd; task++) {
        const int part = task / hd;
        const int d = task % hd;
        F dw = 0, db = 0;
        for (int64_t r = 0; r < N; r++) {
            for (int h = 0; h < NH; h++) {
                const int64_t c = r * C3 + part * C + h * hd + d;
                const F xhat = (qkv_in[c] - mean[(r * 2 + part) * NH + h]) * rstd[(r * 2 + part) * NH + h];
                dw += dqkv_out[c] * xhat;
                db += dqkv_out[c];
            }
        }
        if (part == 0) {
            dqw[d] += dw;
            if (dqb) dqb[d] += db;
        } else {
            dkw[d] += dw;
            if (dkb) dkb[d] += db;
        }
    }
}

}  // namespace cpu
}  // namespace llmc
