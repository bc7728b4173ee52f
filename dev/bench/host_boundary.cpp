// Host work of a training step, timed on this machine's CPU (docs/cuda_backend.md, "Host work between
// steps"): the pieces of the CUDA backend's queued step that the host does with the device idle - the
// token check, the staging copy, the logit statistics line of the step's report - and the token
// grouping, which the step graph does between its two launches and an eager step after queuing its
// backward (both while the device runs). Fresh random tokens and statistics of the given shape; prints
// one table row per piece (median of the repeats, µs per step). Not timed here: the loader's next
// batch, the console line and the metrics record.
//
//   make host-boundary-bench && build/host_boundary_bench [B T L NH Vp]   (default: the paper model at
//   B 16, T 2048: 6 layers, 6 heads, padded vocabulary 10112)
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "llmc/core/batch_check.h"
#include "llmc/core/logit_stats.h"
#include "llmc/core/model_config.h"
#include "llmc/core/token_groups.h"
#include "llmc/io/metrics.h"

namespace {

// Median µs of `reps` calls of f.
template <typename F>
double median_us(int reps, F&& f) {
    std::vector<double> t;
    for (int r = 0; r < reps; r++) {
        const auto a = std::chrono::steady_clock::now();
        f();
        const auto b = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// A whole decimal argument in [1, 2^31), or 0 (not one).
int positive_arg(const char* text) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    return errno == 0 && end != text && *end == '\0' && v >= 1 && v <= INT_MAX ? (int)v : 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 1 && argc != 6) {
        std::fprintf(stderr, "usage: %s [B T L NH Vp]\n", argv[0]);
        return 2;
    }
    int B = 16, T = 2048, L = 6, NH = 6, Vp = 10112;
    if (argc == 6) {
        B = positive_arg(argv[1]);
        T = positive_arg(argv[2]);
        L = positive_arg(argv[3]);
        NH = positive_arg(argv[4]);
        Vp = positive_arg(argv[5]);
    }
    if (B < 1 || T < 1 || L < 1 || NH < 1 || Vp < 2 || (long long)B * T > (1LL << 28) || (long long)L * NH > 4096 ||
        Vp > (1 << 24)) {
        std::fprintf(stderr,
                     "error: whole numbers B, T, L, NH >= 1 and Vp >= 2 needed, with B * T <= 2^28, L * NH <= 4096 "
                     "and Vp <= 2^24\n");
        return 2;
    }
    llmc::ModelConfig cfg;
    cfg.num_layers = L;
    cfg.num_heads = NH;
    cfg.channels = 32 * NH;
    cfg.global_heads = 1;
    cfg.window = 50;
    cfg.vocab_size = Vp - 1;
    cfg.padded_vocab_size = Vp;
    cfg.max_seq_len = T;
    const int n = B * T;
    std::mt19937 rng(std::random_device{}());
    std::vector<int> inputs(n), targets(n), staging(2 * (size_t)n);
    for (int i = 0; i < n; i++) {  // Zipf-like ids: a few tokens take long runs, as text does
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
        inputs[i] = std::min(cfg.vocab_size - 1, (int)(u * u * u * cfg.vocab_size));
        targets[i] = (int)(rng() % (unsigned)cfg.vocab_size);
    }
    std::vector<int> groups(llmc::token_groups_ints(n, Vp));
    llmc::TokenGroupScratch scratch;
    llmc::LogitStats stats;
    stats.resize(L, NH);
    stats.resize_near(L, NH);
    for (std::vector<float>* v : {&stats.max_logit, &stats.min_logit, &stats.entropy, &stats.near_mass,
                                  &stats.near_max_logit, &stats.far_max_logit})
        for (float& x : *v) x = std::uniform_real_distribution<float>(-50.0f, 50.0f)(rng);
    llmc::LogitStats no_near = stats;
    no_near.near_mass.clear();
    no_near.near_max_logit.clear();
    no_near.far_max_logit.clear();

    const int reps = 200;
    size_t sink = 0;
    struct Row {
        const char* what;
        double us;
    };
    const Row rows[] = {
        {"token check (check_token_batch, inputs and targets)",
         median_us(reps, [&] { llmc::check_token_batch(cfg, inputs.data(), targets.data(), B, T); })},
        {"staging copy (inputs and targets into the slot)",
         median_us(reps,
                   [&] {
                       std::copy(inputs.begin(), inputs.end(), staging.begin());
                       std::copy(targets.begin(), targets.end(), staging.begin() + n);
                   })},
        {"token grouping (group_tokens; while the device runs)",
         median_us(reps, [&] { llmc::group_tokens(groups.data(), inputs.data(), n, Vp, scratch); })},
        {"logit_stats line, with --near (logit_stats_line)",
         median_us(reps, [&] { sink += llmc::logit_stats_line(1, stats, cfg).size(); })},
        {"logit_stats line, without --near",
         median_us(reps, [&] { sink += llmc::logit_stats_line(1, no_near, cfg).size(); })},
    };
    std::printf("host work of a training step (CPU, median of %d): B %d T %d L %d NH %d Vp %d\n", reps, B, T, L, NH,
                Vp);
    std::printf("| piece | µs a step |\n|---|---:|\n");
    for (const Row& r : rows) std::printf("| %s | %.1f |\n", r.what, r.us);
    if (sink == 0) {  // the lines were built (and not optimized away)
        std::fprintf(stderr, "error: the logit_stats lines came out empty\n");
        return 1;
    }
    return 0;
}
