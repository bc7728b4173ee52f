// GPU decode attention (llmc/cuda/attention_decode.cuh) against the CPU decode attention
// (llmc/cpu/kv_cache.h, itself bit-identical to the CPU training attention): fresh random q/k/v
// each run, the cache filled through kv_store one position at a time (as decoding does), the
// output poisoned with NaN before every call, every element checked, relative error
// ||gpu - cpu|| / ||cpu|| below 1e-2 (bf16) or 1e-5 (fp32 build) at every position, including
// positions where a local head's ring buffer has wrapped. The position reaches the kernels in device
// memory (as a decode step, or its CUDA graph, passes it); the split grid is the least for the
// position on even positions and the cache's deepest on odd ones (the extra blocks must change
// nothing), and a grid shallower than a position needs gives NaN for the heads that need more. The
// one-launch kernel (attention_decode's one_launch, --fused-decode 1) at every checked position and
// with the shallow grid: the same bits as the split and combine kernels (NaN where they give NaN),
// and its arrival counters back to 0 after every call; and, with every counter set to a sentinel K
// before one call (so no block's ticket is its head's last), each head's counter K + its splits where
// the grid covers it and K where it does not, and no covered head's output row written: each counted
// block arrives exactly once, the blocks past a head's splits not at all, and only the last to arrive
// merges (a GPU and the emulator give the same answer, whatever the block order). The CPU
// reference reads the same floatX-rounded values the GPU reads. Exit 0 = pass, 1 = fail or no GPU.
// --edges (the emulated run: scripts/gpu_check.sh --emulate): on the shapes longer than 64 positions
// the attention is checked at the positions edge_position() names instead of all; the cache is still
// filled at every position.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "llmc/cpu/kv_cache.h"
#include "llmc/cuda/attention_decode.cuh"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;
using llmc::cuda::floatX;

namespace {

struct Shape {
    const char* name;
    int B, NH, G, hd, P, max_len;
    float softcap;
};
const Shape kShapes[] = {
    {"LS G=1 P=8 hd=32", 2, 6, 1, 32, 8, 40, 0.0f},
    {"MHSA G=NH hd=64", 1, 4, 4, 64, 8, 70, 0.0f},
    {"all-local G=0 P=5 hd=16", 3, 4, 0, 16, 5, 33, 0.0f},
    {"P=1 hd=128", 2, 3, 1, 128, 1, 20, 0.0f},
    {"P>=T softcap hd=48", 2, 4, 2, 48, 64, 30, 1.0f},
    {"long LS G=1 P=50 hd=32", 1, 6, 1, 32, 50, 300, 5.0f},
    // past several splits of cuda::kDecodeSplitKeys keys, the last one partial; a local window over two splits
    {"long MHSA G=NH hd=64", 2, 2, 2, 64, 8, 3 * cuda::kDecodeSplitKeys + 5, 0.0f},
    {"long local P=130 G=0 hd=32", 1, 2, 0, 32, cuda::kDecodeSplitKeys + 2, cuda::kDecodeSplitKeys + 40, 0.0f},
};

float round_x(float x) { return cuda::to_float(cuda::from_float<floatX>(x)); }

// Whether --edges checks position t of a shape of T positions: the first 64, the last two, every 16th,
// and those within 2 of a split's first key (a multiple of kDecodeSplitKeys) or, with local heads, of
// a multiple of the window (where their ring buffer wraps); both parities of t, so both grids, at each.
bool edge_position(const Shape& s, int t, int T) {
    const auto near_multiple = [t](int m) { return t % m <= 2 || t % m >= m - 2; };
    return t < 64 || t >= T - 2 || t % 16 == 0 || near_multiple(cuda::kDecodeSplitKeys) ||
           (s.G < s.NH && s.P > 4 && near_multiple(s.P));
}

bool check_shape(const Shape& s, std::mt19937_64& gen, bool edges) {
    ModelConfig cfg;
    cfg.num_layers = 2;
    cfg.num_heads = s.NH;
    cfg.channels = s.NH * s.hd;
    cfg.global_heads = s.G;
    cfg.window = s.P;
    cfg.max_seq_len = s.max_len;
    const int B = s.B, C = cfg.channels, T = s.max_len, layer = 1;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> qkv((size_t)T * B * 3 * C);  // (T, B, 3C): one (B, 3C) row block per position
    for (float& x : qkv) x = round_x(1.5f * nd(gen));

    cpu::KvCache<float> ref;
    ref.init(cfg, B, T);
    cuda::KvCacheView view;
    view.L = cfg.num_layers;
    view.B = B;
    view.NH = s.NH;
    view.G = s.G;
    view.hd = s.hd;
    view.P = s.P;
    view.max_len = T;
    view.ring = ref.ring;
    cuda::DeviceBuffer<floatX> kg(ref.k_global.size()), vg(ref.v_global.size()), kl(ref.k_local.size()),
        vl(ref.v_local.size()), d_qkv((size_t)B * 3 * C), d_out((size_t)B * C);
    cuda::DeviceBuffer<int> d_pos(1);  // the position, read by the kernels from device memory
    cuda::DeviceBuffer<float> partial(cuda::decode_scratch_floats(B, s.NH, s.hd, T));
    CUDA_CHECK(cudaMemset(partial.get(), 0xFF, partial.bytes()));  // NaN: a split read before written shows
    view.partial = partial.get();
    view.k_global = kg.get();
    view.v_global = vg.get();
    view.k_local = kl.get();
    view.v_local = vl.get();

    std::vector<floatX> row_x((size_t)B * 3 * C), out_x((size_t)B * C);
    cuda::DeviceBuffer<uint32_t> arrivals((size_t)B * s.NH, /*zero=*/true);
    view.arrivals = arrivals.get();
    cuda::DeviceBuffer<floatX> d_one((size_t)B * C);  // the one-launch kernel's output
    std::vector<floatX> one_x((size_t)B * C);
    std::vector<uint32_t> counters((size_t)B * s.NH);
    int one_differ = 0, counters_left = 0;
    // the one-launch kernel with the same grid as the two kernels' last call: its output's bits equal
    // out_x's, NaN where out_x has NaN, and every counter 0 after it
    // (the scratch poisoned first: a merge before every split of its head wrote would read NaN, not the
    // two kernels' partials of the same values)
    // one call of the one-launch kernel on poisoned output and scratch: its output in one_x, the
    // counters after it in counters
    auto run_one_launch = [&](int splits) {
        CUDA_CHECK(cudaMemset(d_one.get(), 0xFF, d_one.bytes()));
        CUDA_CHECK(cudaMemset(partial.get(), 0xFF, partial.bytes()));
        cuda::attention_decode(d_one.get(), d_qkv.get(), view, layer, d_pos.get(), splits, s.softcap,
                               cudaStream_t(nullptr), /*one_launch=*/true);
        CUDA_CHECK(cudaMemcpy(one_x.data(), d_one.get(), d_one.bytes(), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(counters.data(), arrivals.get(), arrivals.bytes(), cudaMemcpyDeviceToHost));
    };
    auto check_one_launch = [&](int t, int splits) {
        run_one_launch(splits);
        if (std::memcmp(one_x.data(), out_x.data(), one_x.size() * sizeof(floatX)) != 0) {
            if (one_differ++ == 0)
                std::fprintf(stderr, "  %s: t=%d: one launch differs from split + combine\n", s.name, t);
        }
        for (uint32_t c : counters) counters_left += c != 0;
    };
    constexpr uint32_t kSentinel = 1000;
    int sentinel_bad = 0;
    auto check_arrivals = [&](int t, int splits) {
        std::vector<uint32_t> k((size_t)B * s.NH, kSentinel);
        CUDA_CHECK(cudaMemcpy(arrivals.get(), k.data(), arrivals.bytes(), cudaMemcpyHostToDevice));
        run_one_launch(splits);
        // an element's expected bytes: all 0xFF (the poison, unwritten) or the NaN the kernels write
        unsigned char poison_bytes[sizeof(floatX)], nan_bytes[sizeof(floatX)];
        std::memset(poison_bytes, 0xFF, sizeof(floatX));
        const floatX nan_x = cuda::from_float<floatX>(NAN);
        std::memcpy(nan_bytes, &nan_x, sizeof(floatX));
        for (int b = 0; b < B; b++)
            for (int h = 0; h < s.NH; h++) {
                const int first_key = h < s.NH - s.G ? std::max(0, t - s.P + 1) : 0;
                const int need = (t - first_key) / cuda::kDecodeSplitKeys + 1;
                const bool covered = need <= splits;
                const uint32_t want = kSentinel + (covered ? need : 0);
                const unsigned char* expect = covered ? poison_bytes : nan_bytes;
                bool row_ok = true;
                for (int d = 0; d < s.hd; d++)
                    row_ok &= std::memcmp(&one_x[(size_t)b * C + h * s.hd + d], expect, sizeof(floatX)) == 0;
                if (counters[(size_t)b * s.NH + h] != want || !row_ok) {
                    if (sentinel_bad++ == 0)
                        std::fprintf(
                            stderr, "  %s: t=%d grid %d: head %d of sequence %d counted %u (want %u), row %s\n", s.name,
                            t, splits, h, b, counters[(size_t)b * s.NH + h], want, row_ok ? "as expected" : "written");
                }
            }
        CUDA_CHECK(cudaMemset(arrivals.get(), 0, arrivals.bytes()));
    };
    std::vector<float> ref_out((size_t)B * C);
    double worst = 0.0;
    int checked = 0;
    for (int t = 0; t < T; t++) {
        const float* row = qkv.data() + (size_t)t * B * 3 * C;  // (B, 3C)
        for (int b = 0; b < B; b++) ref.store(layer, b, t, row + (size_t)b * 3 * C);
        for (size_t i = 0; i < row_x.size(); i++) row_x[i] = cuda::from_float<floatX>(row[i]);
        CUDA_CHECK(cudaMemcpy(d_qkv.get(), row_x.data(), row_x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_pos.get(), &t, sizeof(int), cudaMemcpyHostToDevice));
        cuda::kv_store(view, d_qkv.get(), layer, d_pos.get());
        if (edges && T > 64 && !edge_position(s, t, T)) continue;
        checked++;
        cpu::attention_decode(ref_out.data(), row, ref, layer, t, s.softcap);
        CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, d_out.bytes()));  // NaN poison
        // the least grid for t, and on odd t the deepest (the cache's): the same result either way
        const int splits = t % 2 ? cuda::decode_max_splits(T) : cuda::decode_splits_at(view, t);
        cuda::attention_decode(d_out.get(), d_qkv.get(), view, layer, d_pos.get(), splits, s.softcap);
        CUDA_CHECK(cudaMemcpy(out_x.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost));
        check_one_launch(t, splits);
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < out_x.size(); i++) {
            const float g = cuda::to_float(out_x[i]);
            if (!std::isfinite(g)) {
                std::fprintf(stderr, "  %s: t=%d element %zu is %f\n", s.name, t, i, g);
                return false;
            }
            num += (double)(g - ref_out[i]) * (g - ref_out[i]);
            den += (double)ref_out[i] * ref_out[i];
        }
        const double rel = std::sqrt(num / (den > 0 ? den : 1e-30));
        worst = rel > worst ? rel : worst;
    }
    // a grid shallower than the last position needs: the heads that needed more splits get NaN (never
    // partials of an earlier call), the others their result
    bool shallow_ok = true;
    const int t_last = T - 1, least = cuda::decode_splits_at(view, t_last);
    check_arrivals(t_last, least);
    if (least >= 2) check_arrivals(t_last, least - 1);
    if (least >= 2) {
        cuda::attention_decode(d_out.get(), d_qkv.get(), view, layer, d_pos.get(), least - 1, s.softcap);
        CUDA_CHECK(cudaMemcpy(out_x.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost));
        check_one_launch(t_last, least - 1);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < s.NH; h++) {
                const int first_key = h < s.NH - s.G ? std::max(0, t_last - s.P + 1) : 0;
                const bool needs_more = (t_last - first_key) / cuda::kDecodeSplitKeys + 1 > least - 1;
                for (int d = 0; d < s.hd; d++)
                    shallow_ok &= std::isnan(cuda::to_float(out_x[(size_t)b * C + h * s.hd + d])) == needs_more;
            }
        if (!shallow_ok)
            std::fprintf(stderr, "  %s: a grid of %d splits at t=%d: NaN not where a head needs more\n", s.name,
                         least - 1, t_last);
    }
    const double tol = sizeof(floatX) == 2 ? 1e-2 : 1e-5;
    const bool ok = worst < tol && shallow_ok && one_differ == 0 && counters_left == 0 && sentinel_bad == 0;
    std::printf(
        "  %-26s B=%d NH=%d G=%d hd=%d P=%d T=%d cap=%g: %d positions, worst rel err %.2e (tol %.0e); one "
        "launch: %d calls differ, %d counters left non-zero, %d heads miscounted from a sentinel %s\n",
        s.name, B, s.NH, s.G, s.hd, s.P, T, s.softcap, checked, worst, tol, one_differ, counters_left, sentinel_bad,
        ok ? "ok" : "FAIL");
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    const bool edges = argc == 2 && std::strcmp(argv[1], "--edges") == 0;
    if (argc > 2 || (argc == 2 && !edges)) {
        std::fprintf(stderr, "usage: test_attention_decode [--edges]\n");
        return 1;
    }
    if (!gpu_test::have_gpu("test_attention_decode")) return 1;
    std::random_device rd;
    const uint64_t seed = ((uint64_t)rd() << 32) ^ rd();
    std::printf("test_attention_decode (%s), seed %llu\n", cuda::kPrecisionName, (unsigned long long)seed);
    std::mt19937_64 gen(seed);
    bool ok = true;
    try {
        for (const Shape& s : kShapes) ok = check_shape(s, gen, edges) && ok;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "test_attention_decode: %s\n", e.what());
        return 1;
    }
    std::printf("test_attention_decode: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
