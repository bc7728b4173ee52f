// Shared helpers for the kernel labs in dev/cuda/ (one binary per kernel family, llm.c's pattern).
// Every lab includes its production kernel from llmc/cuda/ and this file; nothing here is used by
// the trainer. The API below is small and stable (other labs include it):
//
//   lab::Args args = lab::parse_args(argc, argv, "layernorm");  // --check, --seed S, --json FILE, --reps R
//   cudaDeviceProp prop = lab::require_gpu(args);               // no GPU: one line on stderr, exit(1);
//                                                               //   else prints device, build and seed
//   lab::kTol                                                   // pass threshold: 1e-2 (bf16 build), 1e-5 (fp32)
//   llmc::Rng rng(args.seed);                                   // fresh seed per run unless --seed (printed)
//   std::vector<float> x = lab::random_normal(rng, n, 0.f, 1.f);   // also lab::random_uniform(rng, n, lo, hi)
//   lab::round_to_floatX(x);                                    // CPU reference sees exactly the GPU's inputs
//   llmc::cuda::DeviceBuffer<floatX> d_x = lab::upload_as<floatX>(x);  // host floats -> device T
//   lab::poison(d_out.get(), n);                                // fill with NaN bytes (0xFF) before the kernel
//   bool ok = lab::check("out", d_out.get(), ref, lab::kTol);   // rel error ||out-ref||/||ref||, every element
//                                                               //   finite, prints one line; NaN never passes
//   lab::check_added("dw", d_dw.get(), dw0, ref);               // ADDED outputs: compares out - dw0 with ref - dw0
//   std::vector<float> h = lab::download(d_out.get(), n);       // device T -> host floats
//   float ms = lab::time_ms([&] { kernel(...); }, args.reps);   // median of reps, L2 flushed before each rep
//   lab::Table table(prop);  table.add("layernorm_forward", "N=.. C=..", ms, bytes);  table.print();
//   table.write_json(args.json);                                // no-op when the path is empty
//
// Timing: each repetition is bracketed by its own CUDA events after a memset of a buffer twice the
// L2 size, so every launch reads its inputs from HBM (inputs need not be larger than L2). GB/s is
// bytes moved (each input read once + each output written once) / time; the ceiling is the memory
// bandwidth from the device attributes (2 * memory clock * bus width).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "llmc/cuda/common.cuh"
#include "llmc/core/rng.h"

namespace lab {

using llmc::cuda::DeviceBuffer;
using llmc::cuda::floatX;

#if defined(ENABLE_FP32)
constexpr double kTol = 1e-5;
#else
constexpr double kTol = 1e-2;
#endif

// ---- command line ---------------------------------------------------------------------------
struct Args {
    bool check = false;  // --check: validate several shapes, no timing; exit status is the verdict
    uint64_t seed = 0;   // --seed S: reproduce a run (default: a fresh random seed, printed)
    int reps = 50;       // --reps R: timing repetitions (median)
    std::string json;    // --json FILE: also write the timing table as JSON
    std::string name;    // the lab's name, for messages
};

inline Args parse_args(int argc, char** argv, const char* lab_name) {
    Args a;
    a.name = lab_name;
    bool seeded = false;
    for (int i = 1; i < argc; i++) {
        const std::string s = argv[i];
        const bool has_value = i + 1 < argc;
        if (s == "--check") a.check = true;
        else if (s == "--seed" && has_value) {
            a.seed = std::strtoull(argv[++i], nullptr, 10);
            seeded = true;
        } else if (s == "--reps" && has_value) a.reps = std::max(1, std::atoi(argv[++i]));
        else if (s == "--json" && has_value) a.json = argv[++i];
        else {
            std::fprintf(stderr, "%s: unknown argument '%s'; usage: %s [--check] [--seed S] [--reps R] [--json FILE]\n",
                         lab_name, s.c_str(), lab_name);
            std::exit(2);
        }
    }
    if (!seeded) a.seed = std::random_device{}() | 1u;
    return a;
}

// No device: one line and exit 1 (the labs are part of `make test-gpu`).
inline cudaDeviceProp require_gpu(const Args& a) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        std::fprintf(stderr, "%s: no CUDA device found; run this lab on a GPU machine\n", a.name.c_str());
        std::exit(1);
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s lab, %s build, device %s (sm_%d%d), seed %llu (rerun with --seed %llu)\n", a.name.c_str(),
                llmc::cuda::kPrecisionName, prop.name, prop.major, prop.minor, (unsigned long long)a.seed,
                (unsigned long long)a.seed);
    return prop;
}

// ---- random inputs and host<->device ----------------------------------------------------------
inline std::vector<float> random_uniform(llmc::Rng& rng, size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (auto& x : v) x = lo + (hi - lo) * rng.uniform();
    return v;
}
// Normal values by Box-Muller from the generator's words, both values of each pair (cos and sin):
// half the logarithms, roots and draws of llmc::Rng::normal, which keeps one value per pair so that its
// state stays one word (the weights' initialization and resume need that; a lab's inputs do not).
// Under the emulated build's sanitizers the one-value draw was a third of the matmul lab's --check.
inline std::vector<float> random_normal(llmc::Rng& rng, size_t n, float mean, float stddev) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i += 2) {
        const double u1 = ((rng.next_u64() >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
        const double u2 = (rng.next_u64() >> 11) / 9007199254740992.0;          // [0, 1)
        const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
        v[i] = mean + stddev * (float)(r * std::cos(a));
        if (i + 1 < n) v[i + 1] = mean + stddev * (float)(r * std::sin(a));
    }
    return v;
}
// Rounds every value to floatX and back, so the fp32 CPU reference reads the GPU's exact inputs.
inline void round_to_floatX(std::vector<float>& v) {
    for (auto& x : v) x = llmc::cuda::to_float(llmc::cuda::from_float<floatX>(x));
}

template <typename T>
DeviceBuffer<T> upload_as(const std::vector<float>& host) {
    std::vector<T> tmp(host.size());
    for (size_t i = 0; i < host.size(); i++) tmp[i] = llmc::cuda::from_float<T>(host[i]);
    DeviceBuffer<T> d(host.size());
    if (!host.empty()) CUDA_CHECK(cudaMemcpy(d.get(), tmp.data(), tmp.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {  // same type (e.g. int token ids)
    DeviceBuffer<T> d(host.size());
    if (!host.empty()) CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
std::vector<float> download(const T* d, size_t n) {
    std::vector<T> tmp(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (n) CUDA_CHECK(cudaMemcpy(tmp.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i++) out[i] = llmc::cuda::to_float(tmp[i]);
    return out;
}

// All bytes 0xFF: NaN in both bf16 and fp32.
template <typename T>
void poison(T* d, size_t n) {
    if (n) CUDA_CHECK(cudaMemset(d, 0xFF, n * sizeof(T)));
}

// ---- validation ---------------------------------------------------------------------------------
// ||out - ref|| / ||ref|| (absolute norm when ref is all zero); *nonfinite = count of non-finite outputs.
inline double rel_error(const std::vector<float>& out, const std::vector<float>& ref, size_t* nonfinite) {
    double num = 0, den = 0;
    size_t bad = 0;
    for (size_t i = 0; i < out.size(); i++) {
        if (!std::isfinite(out[i])) {
            bad++;
            continue;
        }
        const double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (nonfinite) *nonfinite = bad;
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Downloads n = ref.size() elements of d_out and compares them; prints one line; true = pass.
template <typename T>
bool check(const char* what, const T* d_out, const std::vector<float>& ref, double tol = kTol) {
    const std::vector<float> out = download(d_out, ref.size());
    size_t nonfinite = 0;
    const double err = rel_error(out, ref, &nonfinite);
    const bool ok = nonfinite == 0 && err <= tol && std::isfinite(err);
    std::printf("  %-14s rel err %.2e (tol %.0e), non-finite %zu / %zu  %s\n", what, err, tol, nonfinite, ref.size(),
                ok ? "OK" : "FAIL");
    return ok;
}

// For an output that is ADDED into (a gradient that starts from base): compares the increment
// out - base with ref - base (in double), so the check is as sensitive as for an overwritten output
// however large base is (e.g. one missing row among thousands of untouched ones). Every element of
// out must be finite. base, ref: n = ref.size() host values; prints one line; true = pass.
template <typename T>
bool check_added(const char* what, const T* d_out, const std::vector<float>& base, const std::vector<float>& ref,
                 double tol = kTol) {
    const std::vector<float> out = download(d_out, ref.size());
    double num = 0, den = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < out.size(); i++) {
        if (!std::isfinite(out[i])) {
            nonfinite++;
            continue;
        }
        const double want = (double)ref[i] - base[i], got = (double)out[i] - base[i];
        num += (got - want) * (got - want);
        den += want * want;
    }
    const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const bool ok = nonfinite == 0 && err <= tol && std::isfinite(err);
    std::printf("  %-14s rel err of the increment %.2e (tol %.0e), non-finite %zu / %zu  %s\n", what, err, tol,
                nonfinite, ref.size(), ok ? "OK" : "FAIL");
    return ok;
}

// Bit-identical comparison of two device buffers (determinism checks).
template <typename T>
bool check_identical(const char* what, const T* d_a, const T* d_b, size_t n) {
    std::vector<T> a(n), b(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (n) {
        CUDA_CHECK(cudaMemcpy(a.data(), d_a, n * sizeof(T), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b.data(), d_b, n * sizeof(T), cudaMemcpyDeviceToHost));
    }
    const bool ok = n == 0 || std::memcmp(a.data(), b.data(), n * sizeof(T)) == 0;
    std::printf("  %-14s two runs bit-identical: %s\n", what, ok ? "OK" : "FAIL");
    return ok;
}

// The arrival counters of a one-launch reduction (llmc/cuda/grid_arrival.cuh) are back at zero.
inline bool check_arrivals_zero(const char* what, const uint32_t* d, size_t n) {
    std::vector<uint32_t> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (n) CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    size_t nonzero = 0;
    for (uint32_t v : h) nonzero += v != 0;
    std::printf("  %-14s arrival counters left at zero: %zu of %zu nonzero  %s\n", what, nonzero, n,
                nonzero ? "FAIL" : "OK");
    return nonzero == 0;
}

// ---- timing -----------------------------------------------------------------------------------
// Median time in ms of `launch` (which enqueues work on the default stream), L2 flushed before each rep.
inline float time_ms(const std::function<void()>& launch, int reps = 50) {
    int dev = 0, l2 = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    DeviceBuffer<char> flush((size_t)std::max(l2, 1 << 20) * 2);
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    launch();  // warm-up (first-launch costs)
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; r++) {
        CUDA_CHECK(cudaMemsetAsync(flush.get(), r & 0xFF, flush.bytes()));
        CUDA_CHECK(cudaEventRecord(start));
        launch();
        CUDA_CHECK(cudaEventRecord(stop));
        CUDA_CHECK(cudaEventSynchronize(stop));
        CUDA_CHECK(cudaEventElapsedTime(&ms[r], start, stop));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}

// Peak DRAM bandwidth in GB/s from the device attributes (double data rate).
inline double peak_bandwidth_gbs(int dev = 0) {
    int clock_khz = 0, bus_bits = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
}

// Rows of (kernel, shape, ms, bytes moved); prints ms, GB/s and % of the bandwidth ceiling.
class Table {
public:
    explicit Table(const cudaDeviceProp& prop) : device_(prop.name), peak_gbs_(peak_bandwidth_gbs()) {}
    void add(const std::string& kernel, const std::string& shape, float ms, double bytes) {
        rows_.push_back({kernel, shape, ms, bytes});
    }
    void print() const {
        std::printf("\n%-34s %-28s %10s %10s %8s\n", "kernel", "shape", "ms", "GB/s", "% peak");
        for (const Row& r : rows_) {
            const double gbs = r.bytes / (r.ms * 1e-3) / 1e9;
            std::printf("%-34s %-28s %10.4f %10.1f %7.1f%%\n", r.kernel.c_str(), r.shape.c_str(), r.ms, gbs,
                        100.0 * gbs / peak_gbs_);
        }
        std::printf("(memory-bandwidth ceiling %.0f GB/s on %s, %s build)\n", peak_gbs_, device_.c_str(),
                    llmc::cuda::kPrecisionName);
    }
    void write_json(const std::string& path) const {
        if (path.empty()) return;
        FILE* f = std::fopen(path.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "cannot write %s\n", path.c_str());
            std::exit(1);
        }
        std::fprintf(f, "{\"device\": \"%s\", \"precision\": \"%s\", \"peak_gbs\": %.1f, \"rows\": [", device_.c_str(),
                     llmc::cuda::kPrecisionName, peak_gbs_);
        for (size_t i = 0; i < rows_.size(); i++) {
            const Row& r = rows_[i];
            std::fprintf(f,
                         "%s\n  {\"kernel\": \"%s\", \"shape\": \"%s\", \"ms\": %.6f, \"bytes\": %.0f, \"gbs\": %.2f}",
                         i ? "," : "", r.kernel.c_str(), r.shape.c_str(), r.ms, r.bytes, r.bytes / (r.ms * 1e-3) / 1e9);
        }
        std::fprintf(f, "\n]}\n");
        std::fclose(f);
    }

private:
    struct Row {
        std::string kernel, shape;
        float ms;
        double bytes;
    };
    std::string device_;
    double peak_gbs_;
    std::vector<Row> rows_;
};

}  // namespace lab
