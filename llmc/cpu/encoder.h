// Token + position embedding on the CPU (GPT-2's first layer).
//   out[b, t, :] = wte[inp[b, t], :] + wpe[t, :]
// Token ids must already be valid rows of wte (the data loader checks them against the vocabulary).
#pragma once
#include <cstddef>

namespace llmc {
namespace cpu {

// out (B, T, C); inp (B, T) token ids; wte (Vp, C); wpe (maxT, C) with T <= maxT.
template <typename F>
void encoder_forward(F* out, const int* inp, const F* wte, const F* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const int t = bt % T;
        F* o = out + (size_t)bt * C;
        const F* te = wte + (size_t)inp[bt] * C;
        const F* pe = wpe + (size_t)t * C;
        for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

// ADDS into dwte (Vp, C) and dwpe (maxT, C) from dout (B, T, C).
// A token id can repeat inside the batch, so rows of dwte receive several contributions. To stay
// deterministic without atomics, threads split the channels: each thread owns a block of
// channels and walks all positions in order, so every element sums its terms in (b, t) order.
template <typename F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const int* inp, int B, int T, int C) {
    constexpr int CB = 16;  // channels per block (one 64-byte line of fp32)
    const int num_blocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < num_blocks; blk++) {
        const int c0 = blk * CB;
        const int c1 = c0 + CB < C ? c0 + CB : C;
        for (int bt = 0; bt < B * T; bt++) {
            const F* d = dout + (size_t)bt * C;
            F* dte = dwte + (size_t)inp[bt] * C;
            for (int c = c0; c < c1; c++) dte[c] += d[c];
        }
        for (int t = 0; t < T; t++) {
            F* dpe = dwpe + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                const F* d = dout + ((size_t)b * T + t) * C;
                for (int c = c0; c < c1; c++) dpe[c] += d[c];
            }
        }
    }
}

}  // namespace cpu
}  // namespace llmc
