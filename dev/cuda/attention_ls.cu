// Kernel lab for LS-attention (llm.c pattern). Includes the production kernels from
// llmc/cuda/attention_ls.cuh (never a copy) and validates them against the CPU reference
// llmc/cpu/attention_ls.h (fp32). The kernels, by --kernel:
//   naive       kernels that materialize the (B, NH, T, T) probabilities (lab only)
//   production  the trainer's kernels: the FA2-class forward + backward in the bf16 build (sm_80+),
//               the scalar kernels in the FP32 build (make PRECISION=FP32)
//   onepass     candidate (bf16 build, sm_80+): the production forward + the one-pass FA2-class
//               backward (dQ by parts from the dK/dV kernel, no dQ kernel; hd 128 runs the production
//               backward): dev/cuda/attention_candidates/attention_ls_onepass.cuh
// Usage:
//   attention_ls --check                    validate every kernel on a matrix of shapes; exit 1 on failure
//   attention_ls --check --small            a smaller matrix (every case kind, T <= 200), for the emulated build
//   attention_ls --check-one -T 100 ...     validate the one shape given by the flags (every kernel)
//   attention_ls --sweep-full [--kernel K]  forward + backward sweep around the 64-row tiles (hd 32,
//                                           a third at hd 64, a quarter soft-capped; one local + one
//                                           global head, statistics on, determinism; default production):
//                                           every P in 1..192 at T = 192 (windows starting
//                                           and ending on every tile, warp and 8-key edge) and every T
//                                           in 1..192, each with one P of {1, 8, 63, 64, 65, 128, T,
//                                           T+1} in turn. Long when emulated.
//   attention_ls --sweep [--kernel K]       the same around the edges only (make test's share): P in
//                                           1..9 and within 1 of every multiple of 8 up to 193 at
//                                           T = 192; T in 1..9 and within 1 of 16, 32, 63, 64, 65, 128,
//                                           192; no determinism rerun
//   attention_ls [--kernel K] [-B 8 -T 2048 --nh 6 --hd 32 -G 1 -P 50 --softcap 0 --near 0]
//                                           validate that shape (B=1 for the CPU), then a timing table
//                                           (--near N: validated and timed with the statistics and
//                                           their near/far split at N; 0 = timed without statistics)
//   --split S: the FA2-class kernels cut their tile loops into chunks of S tiles (llmc/core/attention_split.h;
//   0, the default: chosen from the shape; the matrices and sweeps force 1-3 on some shapes)
//   --run R: the FA2-class backward's local-head blocks walk runs of R outer tiles where the window
//   allows (attn_split_kind; 0, the default: chosen from the shape, 1: none; the matrices force 2-4 on
//   some shapes and check the result bit-identical to the backward without runs)
//   attention_ls ... --json                 timing of one kernel (default production) as one JSON line (dev/bench)
//   attention_ls ... --dump FILE            write qkv, out, lse of the production path (dev/bench)
// The matrices and sweeps give about half their shapes a near/far distance (the production forward
// computes the near/far statistics: near mass, near and far max logit per head, checked like the others).
// Validation: relative error ||x - ref|| / ||ref|| of out, lse, dqkv (and the statistics), fresh
// random inputs (seed printed; --seed to repeat), outputs poisoned with NaN first, every element
// checked finite; tolerance 1e-2 in the bf16 build, 1e-5 in the FP32 build (make PRECISION=FP32),
// and element-wise (out, dqkv: 0.1 rms + 2% in bf16; lse and statistics: 1e-3 (1 + |ref|)-ish).
// The backward's D (B, NH, T) (production, onepass): against double dot products of the dout and out
// the kernel read, within the fp32 rounding bound of a sum of hd products.
// A failure prints the worst element's coordinates (b, t, q/k/v, head, dim).
// Also checks that two runs of the forward (with statistics) and of the backward are bit-identical.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llmc/cpu/attention_ls.h"
#include "llmc/cuda/attention_ls.cuh"
#if !defined(ENABLE_FP32)
#include "dev/cuda/attention_candidates/attention_ls_onepass.cuh"
#endif

using namespace llmc::cuda;

#if defined(ENABLE_FP32)
constexpr double kTol = 1e-5;
#else
constexpr double kTol = 1e-2;
#endif

struct Shape {
    int B, T, NH, hd, G, P;
    float softcap;
    int near = 0;   // the statistics' near/far distance N; 0: no near/far statistics
    int split = 0;  // the FA2-class kernels' chunk of tiles (llmc/core/attention_split.h); 0: chosen from the shape
    int run = 0;    // the FA2-class backward's runs of outer tiles (attn_split_kind): 0 chosen, 1 none, R >= 2 forced
    __host__ __device__ int C() const { return NH * hd; }
    std::string str() const {
        char buf[256];
        snprintf(buf, sizeof buf, "B=%d T=%d NH=%d hd=%d G=%d P=%d softcap=%g%s%s%s", B, T, NH, hd, G, P, softcap,
                 near > 0 ? (" near=" + std::to_string(near)).c_str() : "",
                 split > 0 ? (" split=" + std::to_string(split)).c_str() : "",
                 run > 0 ? (" run=" + std::to_string(run)).c_str() : "");
        return buf;
    }
};

// The kernels the lab runs (--kernel NAME).
enum class LabKernel { Naive, Production, OnePass };
const char* lab_kernel_name(LabKernel k) {
    return k == LabKernel::Naive ? "naive" : k == LabKernel::Production ? "production" : "onepass";
}
// The kernels this build runs: the one-pass candidate only in the bf16 build.
std::vector<LabKernel> lab_kernels_built() {
#if defined(ENABLE_FP32)
    return {LabKernel::Naive, LabKernel::Production};
#else
    return {LabKernel::Naive, LabKernel::Production, LabKernel::OnePass};
#endif
}
// Whether the kernel's forward computes the logit statistics (every one but the naive).
bool has_stats(LabKernel k) { return k != LabKernel::Naive; }

// ------------------------------------------------------------------------------------------------
// Naive kernels, one thread per (b, h, row), probabilities materialized in att (B,NH,T,T)
// ------------------------------------------------------------------------------------------------
__global__ void naive_forward_kernel(floatX* out, float* lse, float* att, const floatX* qkv, Shape s) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;  // (b*NH + h)*T + i
    if (idx >= (long)s.B * s.NH * s.T) return;
    const int i = (int)(idx % s.T), h = (int)((idx / s.T) % s.NH), b = (int)(idx / ((long)s.T * s.NH));
    const int C = s.C(), C3 = 3 * C, hd = s.hd;
    const bool local = h < s.NH - s.G;
    const float scale = 1.0f / sqrtf((float)hd);
    float* row = att + idx * s.T;  // (T)
    const floatX* q = qkv + ((size_t)b * s.T + i) * C3 + h * hd;
    float mx = -INFINITY;
    for (int j = 0; j < s.T; j++) {
        if (!llmc::attn_visible(i, j, local, s.P)) {
            row[j] = -INFINITY;
            continue;
        }
        const floatX* k = qkv + ((size_t)b * s.T + j) * C3 + C + h * hd;
        float d = 0.0f;
        for (int c = 0; c < hd; c++) d += to_float(q[c]) * to_float(k[c]);
        d *= scale;
        if (s.softcap > 0.0f) d = s.softcap * tanhf(d / s.softcap);
        row[j] = d;
        mx = fmaxf(mx, d);
    }
    float sum = 0.0f;
    for (int j = 0; j < s.T; j++) {
        row[j] = row[j] == -INFINITY ? 0.0f : expf(row[j] - mx);
        sum += row[j];
    }
    for (int j = 0; j < s.T; j++) row[j] /= sum;
    lse[idx] = mx + logf(sum);
    floatX* o = out + ((size_t)b * s.T + i) * C + h * hd;
    for (int c = 0; c < hd; c++) {
        float acc = 0.0f;
        for (int j = 0; j <= i; j++) acc += row[j] * to_float(qkv[((size_t)b * s.T + j) * C3 + 2 * C + h * hd + c]);
        o[c] = from_float<floatX>(acc);
    }
}

// dS (B,NH,T,T) = d(score) from att; one thread per (b, h, row i).
__global__ void naive_dscore_kernel(float* dS, const float* att, const floatX* qkv, const floatX* out,
                                    const floatX* dout, Shape s) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)s.B * s.NH * s.T) return;
    const int i = (int)(idx % s.T), h = (int)((idx / s.T) % s.NH), b = (int)(idx / ((long)s.T * s.NH));
    const int C = s.C(), C3 = 3 * C, hd = s.hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const floatX* q = qkv + ((size_t)b * s.T + i) * C3 + h * hd;
    const floatX* go = dout + ((size_t)b * s.T + i) * C + h * hd;
    const floatX* o = out + ((size_t)b * s.T + i) * C + h * hd;
    float D = 0.0f;
    for (int c = 0; c < hd; c++) D += to_float(go[c]) * to_float(o[c]);
    for (int j = 0; j < s.T; j++) {
        const float p = att[idx * s.T + j];
        float ds = 0.0f;
        if (p != 0.0f) {
            const floatX* k = qkv + ((size_t)b * s.T + j) * C3 + C + h * hd;
            const floatX* v = k + C;
            float dp = 0.0f, sc = 0.0f;
            for (int c = 0; c < hd; c++) {
                dp += to_float(go[c]) * to_float(v[c]);
                sc += to_float(q[c]) * to_float(k[c]);
            }
            ds = p * (dp - D);
            if (s.softcap > 0.0f) {
                const float t = tanhf(sc * scale / s.softcap);
                ds *= 1.0f - t * t;
            }
            ds *= scale;
        }
        dS[idx * s.T + j] = ds;
    }
}

// dq_i = sum_j dS_ij k_j; dk_j = sum_i dS_ij q_i; dv_j = sum_i P_ij dout_i. One thread per (b, h, t).
__global__ void naive_dqkv_kernel(floatX* dqkv, const float* dS, const float* att, const floatX* qkv,
                                  const floatX* dout, Shape s) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)s.B * s.NH * s.T) return;
    const int t = (int)(idx % s.T), h = (int)((idx / s.T) % s.NH), b = (int)(idx / ((long)s.T * s.NH));
    const int C = s.C(), C3 = 3 * C, hd = s.hd;
    const long bh = (long)b * s.NH + h;
    floatX* d = dqkv + ((size_t)b * s.T + t) * C3 + h * hd;
    for (int c = 0; c < hd; c++) {
        float dq = 0.0f, dk = 0.0f, dv = 0.0f;
        for (int j = 0; j < s.T; j++)
            dq += dS[(bh * s.T + t) * s.T + j] * to_float(qkv[((size_t)b * s.T + j) * C3 + C + h * hd + c]);
        for (int i = 0; i < s.T; i++) {
            dk += dS[(bh * s.T + i) * s.T + t] * to_float(qkv[((size_t)b * s.T + i) * C3 + h * hd + c]);
            dv += att[(bh * s.T + i) * s.T + t] * to_float(dout[((size_t)b * s.T + i) * C + h * hd + c]);
        }
        d[c] = from_float<floatX>(dq);
        d[C + c] = from_float<floatX>(dk);
        d[2 * C + c] = from_float<floatX>(dv);
    }
}

// ------------------------------------------------------------------------------------------------
// Device buffers of one problem and the dispatch by kernel
// ------------------------------------------------------------------------------------------------
struct Problem {
    Shape s;
    DeviceBuffer<floatX> qkv, out, dout, dqkv;
    DeviceBuffer<float> lse, stats, stats_scratch, bwd_scratch, att, dS;
    DeviceBuffer<float> dq_parts;     // the one-pass backward's dQ parts (any contents)
    DeviceBuffer<float> split_part;   // the FA2-class kernels' split partials (any contents)
    DeviceBuffer<uint32_t> arrivals;  // its arrival counters (zero; every forward leaves them zero)
    explicit Problem(const Shape& sh, LabKernel kernel) : s(sh) {
        const bool naive = kernel == LabKernel::Naive;
        const size_t N = (size_t)s.B * s.T;
        qkv.resize(N * 3 * s.C());
        out.resize(N * s.C());
        dout.resize(N * s.C());
        dqkv.resize(N * 3 * s.C());
        lse.resize((size_t)s.B * s.NH * s.T);
        stats.resize(kAttnStatsNear * s.NH);
        stats_scratch.resize(attention_stats_scratch_floats(s.B, s.T, s.NH));
        bwd_scratch.resize(attention_ls_backward_scratch_floats(s.B, s.T, s.C(), s.NH));
#if !defined(ENABLE_FP32)
        if (kernel == LabKernel::OnePass) dq_parts.resize(attention_onepass_dq_floats(s.B, s.T, s.C(), s.NH, s.G, s.P));
#endif
        split_part.resize(attention_split_scratch_floats(s.B, s.T, s.C(), s.NH, s.G, s.P, s.split));
        arrivals.resize(attention_split_arrivals(s.B, s.T, s.NH), true);
        if (naive) {
            att.resize((size_t)s.B * s.NH * s.T * s.T);
            dS.resize((size_t)s.B * s.NH * s.T * s.T);
        }
    }
    // the production entry points' description of this problem (statistics off)
    AttnCall call() {
        AttnCall a{s.B, s.T, s.C(), s.NH, s.G, s.P, s.softcap};
        a.bwd_scratch = bwd_scratch.get();
        a.split = AttnSplitScratch{split_part.get(), arrivals.get(), s.split, s.run};
        return a;
    }
};

void run_forward(LabKernel kernel, Problem& p, const floatX* qkv, bool with_stats, cudaStream_t st) {
    const Shape& s = p.s;
    if (kernel == LabKernel::Naive) {
        const long rows = (long)s.B * s.NH * s.T;
        llmc::cuda::launch_kernel(naive_forward_kernel, (unsigned)ceil_div(rows, 128), 128, 0, st, p.out.get(),
                                  p.lse.get(), p.att.get(), qkv, s);
        CUDA_CHECK_LAUNCH();
        return;
    }
    // the production forward for the production kernels and the candidate, its statistics merged
    AttnCall a = p.call();
    if (with_stats) {
        a.stats_part = p.stats_scratch.get();
        a.near_n = s.near;
    }
    const int nqt = attention_forward(a, p.out.get(), p.lse.get(), qkv, st);
    if (with_stats) attention_stats_reduce(p.stats.get(), 0, a.stats_part, 0, 1, s.B, s.NH, nqt, a.near_n, st);
}

void run_backward(LabKernel kernel, Problem& p, const floatX* qkv, const floatX* dout, cudaStream_t st) {
    const Shape& s = p.s;
    if (kernel == LabKernel::Naive) {
        const long rows = (long)s.B * s.NH * s.T;
        llmc::cuda::launch_kernel(naive_dscore_kernel, (unsigned)ceil_div(rows, 128), 128, 0, st, p.dS.get(),
                                  p.att.get(), qkv, p.out.get(), dout, s);
        CUDA_CHECK_LAUNCH();
        llmc::cuda::launch_kernel(naive_dqkv_kernel, (unsigned)ceil_div(rows, 128), 128, 0, st, p.dqkv.get(),
                                  p.dS.get(), p.att.get(), qkv, dout, s);
        CUDA_CHECK_LAUNCH();
        return;
    }
#if !defined(ENABLE_FP32)
    if (kernel == LabKernel::OnePass) {
        attention_backward_onepass(p.call(), p.dq_parts.get(), p.dqkv.get(), dout, qkv, p.out.get(), p.lse.get(), st);
        return;
    }
#endif
    attention_backward(p.call(), p.dqkv.get(), dout, qkv, p.out.get(), p.lse.get(), st);
}

// ------------------------------------------------------------------------------------------------
// Validation
// ------------------------------------------------------------------------------------------------
std::vector<floatX> to_device_dtype(const std::vector<float>& v) {
    std::vector<floatX> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = from_float<floatX>(v[i]);
    return r;
}
template <typename T>
std::vector<float> download(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) r[i] = to_float(h[i]);
    return r;
}
template <typename T>
std::vector<unsigned char> download_bytes(const T* d, size_t n) {
    std::vector<unsigned char> h(n * sizeof(T));
    CUDA_CHECK(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost));
    return h;
}

// ||x - ref|| / ||ref||; +inf if any element of x is not finite.
double rel_error(const std::vector<float>& x, const std::vector<float>& ref, size_t* nonfinite) {
    double num = 0, den = 0;
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); i++) {
        if (!std::isfinite(x[i])) {
            bad++;
            continue;
        }
        const double d = (double)x[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    *nonfinite = bad;
    if (bad) return INFINITY;
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// Element-wise tolerance |x - ref| <= atol_rms * rms(ref) + rtol * |ref|: catches a few wrong
// elements (one row, one head, a tile edge) that the norm-wise error averages away.
struct ElemTol {
    double atol_rms, rtol;
};
#if defined(ENABLE_FP32)
constexpr ElemTol kElemTol{1e-4, 1e-4};
#else
constexpr ElemTol kElemTol{0.1, 0.02};  // bf16 outputs and bf16-rounded P / dS: ~0.01 rms typical
#endif
// lse and the statistics see the same fp32 math on the same (rounded) inputs in both builds.
constexpr ElemTol kTightTol{1e-3, 1e-3};

// what: name; layout (for the worst element's coordinates) "btc3" = (B, T, 3C), "btc" = (B, T, C),
// "bht" = (B, NH, T), "" = flat.
bool report(const char* what, const std::vector<float>& x, const std::vector<float>& ref, bool verbose, const Shape& s,
            const char* layout, ElemTol tol) {
    size_t bad = 0;
    const double e = rel_error(x, ref, &bad);
    double rms = 0;
    for (float r : ref) rms += (double)r * r;
    rms = std::sqrt(rms / std::max<size_t>(1, ref.size()));
    size_t worst = 0, nfail = 0;
    double worst_excess = -INFINITY;
    for (size_t i = 0; i < x.size(); i++) {
        const double lim = tol.atol_rms * rms + tol.rtol * std::fabs(ref[i]);
        const double err = std::isfinite(x[i]) ? std::fabs((double)x[i] - ref[i]) : INFINITY;
        if (err > lim) nfail++;
        if (err - lim > worst_excess) {
            worst_excess = err - lim;
            worst = i;
        }
    }
    const bool ok = bad == 0 && e <= kTol && nfail == 0;
    if (!ok || verbose) {
        printf("    %-8s rel err %.3e, %zu elements past tolerance %s%s\n", what, e, nfail, ok ? "ok" : "FAIL",
               bad ? (" (" + std::to_string(bad) + " non-finite)").c_str() : "");
        if (!ok) {
            char where[128] = "";
            const std::string lay = layout;
            const size_t w = worst;
            if (lay == "btc3" || lay == "btc") {
                const size_t CC = (lay == "btc3" ? 3 : 1) * (size_t)s.C();
                const size_t ch = w % CC, t = (w / CC) % s.T, b = w / CC / s.T;
                const char* part = lay == "btc" ? "" : (ch / s.C() == 0 ? "q " : ch / s.C() == 1 ? "k " : "v ");
                snprintf(where, sizeof where, "b=%zu t=%zu %shead=%zu dim=%zu", b, t, part, (ch % s.C()) / s.hd,
                         ch % s.hd);
            } else if (lay == "bht") {
                snprintf(where, sizeof where, "b=%zu head=%zu t=%zu", w / ((size_t)s.NH * s.T), (w / s.T) % s.NH,
                         w % s.T);
            } else {
                snprintf(where, sizeof where, "index %zu", w);
            }
            printf("      worst: %s got %.6g want %.6g (rms of ref %.3g)\n", where, x[w], ref[w], rms);
        }
    }
    return ok;
}

// Maxima that may be -inf (a head without any far key): the -inf entries must agree, the others are
// compared as report() does.
bool report_maxima(const char* what, const std::vector<float>& x, const std::vector<float>& ref, bool verbose,
                   const Shape& s) {
    std::vector<float> xf, rf;
    size_t one_sided = 0;
    for (size_t i = 0; i < x.size(); i++) {
        const bool x_none = x[i] == -INFINITY, ref_none = ref[i] == -INFINITY;
        if (x_none != ref_none) one_sided++;
        else if (!ref_none) xf.push_back(x[i]), rf.push_back(ref[i]);
    }
    if (one_sided) {
        printf("    %-8s %zu entries -inf on one side only FAIL\n", what, one_sided);
        return false;
    }
    return rf.empty() || report(what, xf, rf, verbose, s, "", kTightTol);
}

// The backward's D (B, NH, T) against the dot products dout_i . out_i per head in double, from the
// very inputs the kernel read (out as the device stored it): every element within the fp32 rounding
// bound of a sum of hd products, (hd + 1) * 2^-24 * sum |dout_c out_c| (any order, FMA or not), and
// finite (D is poisoned with NaN first).
bool report_row_dots(const std::vector<float>& D, const std::vector<float>& out, const std::vector<float>& dout,
                     bool verbose, const Shape& s) {
    const int C = s.C(), hd = s.hd;
    size_t nfail = 0, worst = 0;
    double worst_excess = -INFINITY, worst_ref = 0;
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int i = 0; i < s.T; i++) {
                const size_t off = ((size_t)b * s.T + i) * C + (size_t)h * hd, row = ((size_t)b * s.NH + h) * s.T + i;
                double ref = 0, mag = 0;
                for (int c = 0; c < hd; c++) {
                    ref += (double)dout[off + c] * out[off + c];
                    mag += std::fabs((double)dout[off + c] * out[off + c]);
                }
                const double lim = (hd + 1) * std::ldexp(1.0, -24) * mag;
                const double err = std::isfinite(D[row]) ? std::fabs(D[row] - ref) : INFINITY;
                if (err > lim) nfail++;
                if (err - lim > worst_excess) worst_excess = err - lim, worst = row, worst_ref = ref;
            }
    const bool ok = nfail == 0;
    if (!ok || verbose)
        printf("    %-8s %zu of %zu rows past the fp32 bound %s\n", "D", nfail, D.size(), ok ? "ok" : "FAIL");
    if (!ok)
        printf("      worst: b=%zu head=%zu t=%zu got %.6g want %.6g\n", worst / ((size_t)s.NH * s.T),
               (worst / s.T) % s.NH, worst % s.T, D[worst], worst_ref);
    return ok;
}

// The D kernel's launcher refuses what its 16-byte packs cannot read: out or dout off a 16-byte boundary
// and a head size other than 32, 64, 128, each with an InputError and nothing launched (D keeps its
// poison). Returns true when every refusal happened.
bool check_row_dot_refusals() {
    const int B = 1, T = 3, NH = 2, hd = 32, C = NH * hd, C48 = NH * 48;
    DeviceBuffer<floatX> dout(B * T * C48 + kPack), out(B * T * C48 + kPack);  // room for every call below
    DeviceBuffer<float> D(B * NH * T);
    CUDA_CHECK(cudaMemset(D.get(), 0xFF, D.bytes()));
    auto refused = [&](const floatX* d, const floatX* o, int c, const char* what) {
        bool threw = false;
        try {
            attention_backward_row_dots(D.get(), d, o, B, T, c, NH, 0);
        } catch (const llmc::InputError&) { threw = true; }
        if (!threw) printf("    row dots: %s accepted FAIL\n", what);
        return threw;
    };
    bool ok = refused(dout.get(), out.get() + 1, C, "out off a 16-byte boundary");
    ok &= refused(dout.get() + 1, out.get(), C, "dout off a 16-byte boundary");
    ok &= refused(dout.get(), out.get(), C48, "head size 48");
    CUDA_CHECK(cudaDeviceSynchronize());
    for (float x : download(D.get(), D.size()))
        if (!std::isnan(x)) ok = false;
    printf("  row dots: misaligned out, misaligned dout, head size 48 %s\n", ok ? "refused ok" : "FAIL");
    return ok;
}

// Validates the kernels `kernels` on shape s against the CPU; returns true when all pass.
// stats: the forward also collects the logit statistics (checked against the CPU); false runs the
// forward without them (the path a step without --logit-stats takes). backward = false: the forward
// alone (out, lse, statistics), for the sweeps; determinism = false skips the second run.
bool validate(const Shape& s, const std::vector<LabKernel>& kernels, std::mt19937_64& gen, bool verbose,
              bool stats = true, bool backward = true, bool determinism = true) {
    const int C = s.C();
    const size_t N = (size_t)s.B * s.T;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    // q, k with std 1.5 so that logits spread; rounded to floatX so the CPU sees the GPU's inputs
    std::vector<float> qkv(N * 3 * C), dout(N * C);
    for (auto& x : qkv) x = 1.5f * nd(gen);
    for (auto& x : dout) x = nd(gen);
    const std::vector<floatX> qkv_x = to_device_dtype(qkv), dout_x = to_device_dtype(dout);
    for (size_t i = 0; i < qkv.size(); i++) qkv[i] = to_float(qkv_x[i]);
    for (size_t i = 0; i < dout.size(); i++) dout[i] = to_float(dout_x[i]);

    // CPU reference
    std::vector<float> out_ref(N * C), lse_ref((size_t)s.B * s.NH * s.T), dqkv_ref(N * 3 * C, 0.0f);
    std::vector<llmc::cpu::AttnHeadStats> st_ref(s.NH, llmc::cpu::AttnHeadStats{-INFINITY, INFINITY, 0.0, 0});
    llmc::cpu::attention_forward<float>(out_ref.data(), lse_ref.data(), qkv.data(), s.B, s.T, C, s.NH, s.G, s.P,
                                        s.softcap, st_ref.data(), s.near);
    if (backward) {
        // The backward reads the forward's output as stored (floatX), in its D = rowsum(dO * O): the reference
        // reads the same rounding of its own output. (With O in fp32 instead, bf16 rounding alone moved one
        // dq element of a 2-key row by 9% on an H200 run, past the tolerance, identically in every kernel.)
        std::vector<float> out_stored(out_ref.size());
        for (size_t i = 0; i < out_ref.size(); i++) out_stored[i] = to_float(from_float<floatX>(out_ref[i]));
        llmc::cpu::attention_backward<float>(dqkv_ref.data(), dout.data(), qkv.data(), out_stored.data(),
                                             lse_ref.data(), s.B, s.T, C, s.NH, s.G, s.P, s.softcap);
    }
    // the CPU's statistics in the device's (field, head) layout (llmc/cuda/attention_ls_common.cuh), the
    // sums divided by the rows; the near/far fields are compared when s.near > 0
    const int NH = s.NH;
    std::vector<float> stats_ref(kAttnStatsNear * NH);
    for (int h = 0; h < NH; h++) {
        const double rows = (double)st_ref[h].rows;
        stats_ref[kAttnMax * NH + h] = st_ref[h].max_logit;
        stats_ref[kAttnMin * NH + h] = st_ref[h].min_logit;
        stats_ref[kAttnEntropySum * NH + h] = (float)(st_ref[h].entropy_sum / rows);
        stats_ref[kAttnNearMassSum * NH + h] = (float)(st_ref[h].near_mass_sum / rows);
        stats_ref[kAttnNearMax * NH + h] = st_ref[h].near_max_logit;
        stats_ref[kAttnFarMax * NH + h] = st_ref[h].far_max_logit;
    }
    auto fields = [NH](const std::vector<float>& v, int f, int n) {  // fields f .. f+n-1
        return std::vector<float>(v.begin() + (size_t)f * NH, v.begin() + (size_t)(f + n) * NH);
    };
    // the device's statistics with the sums divided by the rows
    auto download_stats = [&](const Problem& p) {
        std::vector<float> st = download(p.stats.get(), p.stats.size());
        for (int h = 0; h < NH; h++) {
            st[kAttnEntropySum * NH + h] /= (float)(s.B * s.T);
            st[kAttnNearMassSum * NH + h] /= (float)(s.B * s.T);
        }
        return st;
    };

    bool all_ok = true;
    for (LabKernel v : kernels) {
        Problem p(s, v);
        CUDA_CHECK(cudaMemcpy(p.qkv.get(), qkv_x.data(), qkv_x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(p.dout.get(), dout_x.data(), dout_x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        // poison every output (0xFF bytes are NaN in fp32 and bf16)
        CUDA_CHECK(cudaMemset(p.out.get(), 0xFF, p.out.bytes()));
        CUDA_CHECK(cudaMemset(p.lse.get(), 0xFF, p.lse.bytes()));
        CUDA_CHECK(cudaMemset(p.dqkv.get(), 0xFF, p.dqkv.bytes()));
        CUDA_CHECK(cudaMemset(p.stats_scratch.get(), 0xFF, p.stats_scratch.bytes()));
        CUDA_CHECK(cudaMemset(p.bwd_scratch.get(), 0xFF, p.bwd_scratch.bytes()));
        if (p.split_part.size()) CUDA_CHECK(cudaMemset(p.split_part.get(), 0xFF, p.split_part.bytes()));
        if (p.dq_parts.size()) CUDA_CHECK(cudaMemset(p.dq_parts.get(), 0xFF, p.dq_parts.bytes()));
        std::vector<float> st_init(kAttnStatsNear * NH);
        for (int f = 0; f < kAttnStatsNear; f++)
            for (int h = 0; h < NH; h++) st_init[f * NH + h] = attn_stat_identity(f);
        CUDA_CHECK(cudaMemcpy(p.stats.get(), st_init.data(), st_init.size() * 4, cudaMemcpyHostToDevice));

        run_forward(v, p, p.qkv.get(), stats, 0);
        if (backward) run_backward(v, p, p.qkv.get(), p.dout.get(), 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        bool ok = true;
        if (verbose) printf("  %s:\n", lab_kernel_name(v));
        ok &= report("out", download(p.out.get(), p.out.size()), out_ref, verbose, s, "btc", kElemTol);
        ok &= report("lse", download(p.lse.get(), p.lse.size()), lse_ref, verbose, s, "bht", kTightTol);
        if (backward)
            ok &= report("dqkv", download(p.dqkv.get(), p.dqkv.size()), dqkv_ref, verbose, s, "btc3", kElemTol);
        if (backward && v != LabKernel::Naive)  // the production backward's D, left in bwd_scratch
            ok &= report_row_dots(download(p.bwd_scratch.get(), p.bwd_scratch.size()),
                                  download(p.out.get(), p.out.size()), dout, verbose, s);
        if (has_stats(v) && stats) {  // statistics: max and min per head, mean entropy per head (+ near/far)
            const std::vector<float> st = download_stats(p);
            // max[NH], min[NH], mean entropy[NH]
            ok &= report("stats", fields(st, 0, kAttnStatsBasic), fields(stats_ref, 0, kAttnStatsBasic), verbose, s, "",
                         kTightTol);
            if (s.near > 0) {  // mean near mass[NH]; near max[NH], far max[NH]
                ok &= report("nearmass", fields(st, kAttnNearMassSum, 1), fields(stats_ref, kAttnNearMassSum, 1),
                             verbose, s, "", kTightTol);
                ok &= report_maxima("nearfar", fields(st, kAttnNearMax, 2), fields(stats_ref, kAttnNearMax, 2), verbose,
                                    s);
            }
            const auto out1 = download_bytes(p.out.get(), p.out.size());
            const auto lse1 = download_bytes(p.lse.get(), p.lse.size());
            if (determinism) {  // forward (with stats) and backward again, bit-identical
                const auto dq1 = download_bytes(p.dqkv.get(), p.dqkv.size());
                CUDA_CHECK(cudaMemcpy(p.stats.get(), st_init.data(), st_init.size() * 4, cudaMemcpyHostToDevice));
                run_forward(v, p, p.qkv.get(), true, 0);
                if (backward) run_backward(v, p, p.qkv.get(), p.dout.get(), 0);
                CUDA_CHECK(cudaDeviceSynchronize());
                const std::vector<float> st2 = download_stats(p);
                const bool same = out1 == download_bytes(p.out.get(), p.out.size()) &&
                                  lse1 == download_bytes(p.lse.get(), p.lse.size()) &&
                                  dq1 == download_bytes(p.dqkv.get(), p.dqkv.size()) &&
                                  std::memcmp(st.data(), st2.data(), st.size() * 4) == 0;
                if (!same || verbose) printf("    determinism: %s\n", same ? "bit-identical" : "FAIL (runs differ)");
                ok &= same;
            }
#if !defined(ENABLE_FP32)
            if (backward && v == LabKernel::Production && attention_backward_has_runs(p.call())) {
                // runs of outer tiles change no bit: the backward without them gives the same dqkv
                const auto dq_runs = download_bytes(p.dqkv.get(), p.dqkv.size());
                CUDA_CHECK(cudaMemset(p.dqkv.get(), 0xFF, p.dqkv.bytes()));
                p.s.run = 1;
                run_backward(v, p, p.qkv.get(), p.dout.get(), 0);
                CUDA_CHECK(cudaDeviceSynchronize());
                p.s.run = s.run;
                const bool same = dq_runs == download_bytes(p.dqkv.get(), p.dqkv.size());
                if (!same || verbose)
                    printf("    without runs: %s\n", same ? "dqkv bit-identical" : "FAIL (dqkv differs)");
                ok &= same;
            }
#endif
            if (s.near > 0) {
                // asking for the near/far statistics changes nothing else: the forward without them
                // gives the same out, lse and basic statistics, bit for bit
                p.s.near = 0;
                CUDA_CHECK(cudaMemcpy(p.stats.get(), st_init.data(), st_init.size() * 4, cudaMemcpyHostToDevice));
                run_forward(v, p, p.qkv.get(), true, 0);
                CUDA_CHECK(cudaDeviceSynchronize());
                p.s.near = s.near;
                const std::vector<float> st3 = download_stats(p);
                const bool unchanged = out1 == download_bytes(p.out.get(), p.out.size()) &&
                                       lse1 == download_bytes(p.lse.get(), p.lse.size()) &&
                                       std::memcmp(st.data(), st3.data(), kAttnStatsBasic * NH * 4) == 0;
                if (!unchanged || verbose)
                    printf("    without near/far: %s\n",
                           unchanged ? "out, lse, statistics bit-identical" : "FAIL (out, lse or statistics differ)");
                ok &= unchanged;
            }
        }
        if (!ok) printf("FAIL %s at %s\n", lab_kernel_name(v), s.str().c_str());
        all_ok &= ok;
    }
    return all_ok;
}

// ------------------------------------------------------------------------------------------------
// Timing
// ------------------------------------------------------------------------------------------------
// Visible (query, key) pairs of the whole problem: the work a kernel that skips masked tiles does.
double visible_pairs(const Shape& s) {
    double pairs = 0;
    for (int h = 0; h < s.NH; h++) {
        const bool local = h < s.NH - s.G;
        for (int i = 0; i < s.T; i++) pairs += local ? std::min(i + 1, s.P) : i + 1;
    }
    return pairs * s.B;
}

struct Timing {
    double fwd_ms, fwdbwd_ms;
};

Timing time_kernel(LabKernel kernel, const Shape& s, int reps) {
    Problem p(s, kernel);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    // rotate inputs over copies whose total exceeds twice the L2 so no run finds its inputs cached
    const size_t in_bytes = p.qkv.bytes() + p.dout.bytes();
    const int copies = (int)std::min<size_t>(16, std::max<size_t>(1, (2 * (size_t)prop.l2CacheSize) / in_bytes + 1));
    std::vector<DeviceBuffer<floatX>> qkvs, douts;
    std::mt19937_64 gen(1234);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> h(p.qkv.size());
    for (int c = 0; c < copies; c++) {
        for (auto& x : h) x = nd(gen);
        auto hx = to_device_dtype(h);
        qkvs.emplace_back(p.qkv.size());
        CUDA_CHECK(cudaMemcpy(qkvs.back().get(), hx.data(), hx.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        auto dx = std::vector<floatX>(hx.begin(), hx.begin() + p.dout.size());
        douts.emplace_back(p.dout.size());
        CUDA_CHECK(cudaMemcpy(douts.back().get(), dx.data(), dx.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    }
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    auto median_ms = [&](bool bwd) {
        std::vector<float> ms;
        for (int r = -3; r < reps; r++) {  // 3 warm-up runs
            const int c = (r + 3) % copies;
            CUDA_CHECK(cudaEventRecord(e0));
            run_forward(kernel, p, qkvs[c].get(), s.near > 0, 0);  // --near: timed with the statistics
            if (bwd) run_backward(kernel, p, qkvs[c].get(), douts[c].get(), 0);
            CUDA_CHECK(cudaEventRecord(e1));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float t = 0;
            CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
            if (r >= 0) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        return (double)ms[ms.size() / 2];
    };
    Timing t{median_ms(false), median_ms(true)};
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return t;
}

// ------------------------------------------------------------------------------------------------
int usage() {
    fprintf(
        stderr,
        "usage: attention_ls [--check [--small] | --check-one | --sweep | --sweep-full] [--kernel naive|production|onepass]\n"
        "                    [-B n] [-T n] [--nh n] [--hd 32|64|128] [-G n] [-P n]\n"
        "                    [--softcap c] [--near N] [--split S] [--run R] [--reps n] [--seed n] [--json]\n"
        "                    [--dump FILE]\n");
    return 2;
}

int main(int argc, char** argv) {
    Shape s{8, 2048, 6, 32, 1, 50, 0.0f};
    std::string kernel_name;  // empty: every kernel the build runs
    int reps = 50;
    bool check = false, small = false, check_one = false, json = false, sweep = false, sweep_full = false;
    std::string dump;
    unsigned long long seed = std::random_device{}();
    for (int a = 1; a < argc; a++) {
        const std::string k = argv[a];
        auto val = [&]() -> const char* {
            if (a + 1 >= argc) {
                fprintf(stderr, "attention_ls: %s needs a value\n", k.c_str());
                exit(2);
            }
            return argv[++a];
        };
        if (k == "--check") check = true;
        else if (k == "--small") small = true;
        else if (k == "--check-one") check_one = true;
        else if (k == "--sweep") sweep = true;
        else if (k == "--sweep-full") sweep_full = true;
        else if (k == "--json") json = true;
        else if (k == "--kernel") kernel_name = val();
        else if (k == "-B") s.B = atoi(val());
        else if (k == "-T") s.T = atoi(val());
        else if (k == "--nh") s.NH = atoi(val());
        else if (k == "--hd") s.hd = atoi(val());
        else if (k == "-G") s.G = atoi(val());
        else if (k == "-P") s.P = atoi(val());
        else if (k == "--softcap") s.softcap = (float)atof(val());
        else if (k == "--near") s.near = atoi(val());
        else if (k == "--split") s.split = atoi(val());
        else if (k == "--run") s.run = atoi(val());
        else if (k == "--reps") reps = atoi(val());
        else if (k == "--seed") seed = strtoull(val(), nullptr, 10);
        else if (k == "--dump") dump = val();
        else return usage();
    }
    std::vector<LabKernel> kernels;
    for (LabKernel k : lab_kernels_built())
        if (kernel_name.empty() || kernel_name == lab_kernel_name(k)) kernels.push_back(k);
    if (kernels.empty()) {
        fprintf(stderr, "attention_ls: --kernel %s is not one of this %s build's kernels (", kernel_name.c_str(),
                kPrecisionName);
        for (LabKernel k : lab_kernels_built()) fprintf(stderr, " %s", lab_kernel_name(k));
        fprintf(stderr, " )\n");
        return 2;
    }

    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("attention_ls: no CUDA device; run on a GPU machine\n");
        return 1;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
#if !defined(ENABLE_FP32)
    if (prop.major < 8) {  // the bf16 build's kernels use mma.sync bf16
        printf("attention_ls: the bf16 build's kernels need sm_80+, this is sm_%d%d\n", prop.major, prop.minor);
        return 1;
    }
#endif
    std::mt19937_64 gen(seed);

    try {
        if (check_one) {
            printf("attention_ls --check-one %s (%s build, %s, seed %llu)\n", s.str().c_str(), kPrecisionName,
                   prop.name, seed);
            const bool ok = validate(s, kernels, gen, true);
            printf("%s\n", ok ? "OK" : "FAIL");
            return ok ? 0 : 1;
        }
        if (sweep || sweep_full) {
            const std::vector<LabKernel> sv =
                kernel_name.empty() ? std::vector<LabKernel>{LabKernel::Production} : kernels;
            printf("attention_ls --sweep%s (%s build, %s, seed %llu, kernels", sweep_full ? "-full" : "",
                   kPrecisionName, prop.name, seed);
            for (LabKernel v : sv) printf(" %s", lab_kernel_name(v));
            printf(")\n");
            constexpr int kMaxT = 3 * kAttnFa2BQ;  // three 64-row tiles
            std::vector<std::pair<int, int>> tp;   // (T, P)
            // near(x): x is 1..9, or within 1 of a multiple of 8 (the 8-key blocks, 16-row warps and
            // 64-key tiles all have edges on multiples of 8)
            auto near = [&](int x, bool full) { return full || x <= 9 || (x + 1) % 8 <= 2; };
            for (int P = 1; P <= kMaxT + 1; P++)
                if (near(P, sweep_full)) tp.emplace_back(kMaxT, P);
            for (int T = 1; T <= kMaxT; T++) {
                const bool edge = T <= 9 || T == 16 || T == 32 || T == 128 || T == kMaxT || T == kMaxT - 1 || T == 15 ||
                                  T == 17 || T == 31 || T == 33 || T == 127 || T == 129 || (T >= 63 && T <= 65);
                const int cycle[] = {1, 8, 63, 64, 65, 128, T, T + 1};
                if (sweep_full || edge) tp.emplace_back(T, cycle[T % 8]);
            }
            int failed = 0;
            for (const auto& [T, P] : tp) {
                // every other shape with a near/far distance that moves across the tile edges, up to
                // 140: from 80 on, some warps' interior tiles are all near (the FA2 forward's shortcut)
                const int near = (T + P) % 2 ? 1 + (T + 3 * P) % 140 : 0;
                // two shapes in three split the FA2 kernels' tile loops into chunks of 1 or 2 tiles; one
                // in three at hd 64, one in four with soft-cap (the backward's pair skips at both head
                // sizes that skip, with and without tanh)
                const int hd = (T + P) % 3 == 1 ? 64 : 32;
                const float softcap = (T + 5 * P) % 4 == 2 ? 2.0f : 0.0f;
                const Shape sh{1, T, 2, hd, 1, P, softcap, near, (T + 2 * P) % 3};
                if (!validate(sh, sv, gen, false, true, true, sweep_full)) failed++;
            }
            printf("%s: %d of %zu (T, P) shapes passed\n", failed ? "FAIL" : "OK", (int)tp.size() - failed, tp.size());
            return failed ? 1 : 0;
        }
        if (check && small) {  // the emulated build's matrix (make test-emu): every case kind, small T
            printf("attention_ls --check --small (%s build, %s, seed %llu)\n", kPrecisionName, prop.name, seed);
            int n = 0, failed = 0;
            for (int hd : {32, 64, 128}) {
                // LS with a ragged last tile (soft-capped at hd 128); all-local with P = 1 and softcap;
                // all-global with P >= T; near/far distances that cut tiles (and N = P = 1)
                const Shape shapes[] = {{1, 100, 4, hd, 1, 50, hd == 128 ? 2.0f : 0.0f, 20},
                                        {1, 70, 2, hd, 0, 1, 2.0f, hd == 64 ? 1 : 0},
                                        {2, 67, 2, hd, 2, 300, 0.0f, 7}};
                for (const Shape& sh : shapes) {
                    n++;
                    if (!validate(sh, kernels, gen, false)) failed++;
                }
            }
            n += 3;  // statistics off; a single row; the window equal to the 64-row tile over several tiles
            if (!validate(Shape{1, 90, 2, 64, 1, 20, 1.5f}, kernels, gen, false, false)) failed++;
            if (!validate(Shape{3, 1, 2, 64, 1, 5, 2.0f}, kernels, gen, false)) failed++;
            if (!validate(Shape{1, 200, 2, 32, 1, 64, 0.0f, 64}, kernels, gen, false)) failed++;
            // the FA2-class kernels' split tile loops (chunks of 1 or 2 tiles; the merge of 2-4 partials):
            // LS with near/far, all-local with a long window and soft-cap, all-global at hd 128, statistics off
            n += 4;
            if (!validate(Shape{1, 200, 2, 32, 1, 70, 0.0f, 30, 1}, kernels, gen, false)) failed++;
            if (!validate(Shape{1, 150, 2, 64, 0, 130, 2.0f, 0, 1}, kernels, gen, false)) failed++;
            if (!validate(Shape{1, 130, 2, 128, 2, 1, 0.0f, 65, 2}, kernels, gen, false)) failed++;
            if (!validate(Shape{1, 150, 2, 32, 1, 9, 1.5f, 0, 1}, kernels, gen, false, false)) failed++;
            // the backward's runs of outer tiles (forced; attn_split_kind chooses them only at batch sizes
            // that fill a GPU): LS with a ragged last tile and runs of 3 (a short last run at both ends),
            // all-local with P = 1 (one inner tile per outer tile: every step a new one) and soft-cap at
            // hd 64, the window of P = 65 (two tiles, the widest a run takes) with runs of 2
            n += 3;
            if (!validate(Shape{2, 300, 3, 32, 1, 50, 0.0f, 20, 0, 3}, kernels, gen, false)) failed++;
            if (!validate(Shape{1, 200, 2, 64, 0, 1, 2.0f, 0, 0, 2}, kernels, gen, false)) failed++;
            if (!validate(Shape{1, 257, 2, 32, 1, 65, 0.0f, 0, 0, 2}, kernels, gen, false)) failed++;
            const bool refusals = check_row_dot_refusals();
            printf("%s: %d of %d shapes passed (kernels", failed || !refusals ? "FAIL" : "OK", n - failed, n);
            for (LabKernel v : kernels) printf(" %s", lab_kernel_name(v));
            printf(", tolerance %.0e)\n", kTol);
            return failed || !refusals ? 1 : 0;
        }
        if (check) {
            printf("attention_ls --check (%s build, %s, seed %llu)\n", kPrecisionName, prop.name, seed);
            int n = 0, failed = 0;
            for (int hd : {32, 64, 128})
                for (int T : {100, 257})
                    for (int G : {0, 1, 4})
                        for (int P : {1, 50, 300})
                            for (float cap : {0.0f, 2.0f}) {
                                const Shape sh{2, T, 4, hd, G, P, cap, T == 257 ? 1 + P / 3 : 0};
                                n++;
                                if (!validate(sh, kernels, gen, false)) failed++;
                            }
            // a global-only shape with a full last tile and a batch > 2, and an LS shape with
            // several full tiles and the window equal to the 64-row tile
            for (int hd : {32, 64, 128}) {
                n += 2;
                if (!validate(Shape{3, 128, 2, hd, 2, 1, 0.0f}, kernels, gen, false)) failed++;
                if (!validate(Shape{1, 640, 3, hd, 1, 64, 0.0f}, kernels, gen, false)) failed++;
            }
            // split key ranges forced to chunks of 1 and 3 tiles (the shapes above split where T = 257 or
            // 640 gives a global head more than 4 key tiles)
            for (int hd : {32, 64, 128}) {
                n += 2;
                if (!validate(Shape{2, 400, 4, hd, 2, 100, hd == 64 ? 2.0f : 0.0f, 50, 1}, kernels, gen, false))
                    failed++;
                if (!validate(Shape{1, 700, 2, hd, 1, 260, 0.0f, 0, 3}, kernels, gen, false)) failed++;
            }
            // the backward's runs of outer tiles forced to 4 and 2 (at hd 128 none: its fragments are
            // reloaded per tile), the global head's loops split beside them (chunks chosen from the shape:
            // 4 tiles; a forced --split would split the local heads' loops too, which then take no runs)
            for (int hd : {32, 64, 128}) {
                n += 2;
                if (!validate(Shape{2, 640, 4, hd, 1, 50, hd == 64 ? 2.0f : 0.0f, 30, 0, 4}, kernels, gen, false))
                    failed++;
                if (!validate(Shape{3, 450, 3, hd, 1, 64, 0.0f, 0, 0, 2}, kernels, gen, false)) failed++;
            }
            // a single row, and B*NH past 65535 (the grid puts b*NH + h on x, whose limit is 2^31-1)
            n += 2;
            if (!validate(Shape{3, 1, 2, 64, 1, 5, 2.0f}, kernels, gen, false)) failed++;
            if (!validate(Shape{16400, 3, 4, 32, 1, 2, 0.0f}, kernels, gen, false)) failed++;
            const bool refusals = check_row_dot_refusals();
            printf("%s: %d of %d shapes passed (kernels", failed || !refusals ? "FAIL" : "OK", n - failed, n);
            for (LabKernel v : kernels) printf(" %s", lab_kernel_name(v));
            printf(", tolerance %.0e)\n", kTol);
            return failed || !refusals ? 1 : 0;
        }

        if (!dump.empty()) {  // production path on one shape, for dev/bench/attention_vs_torch.py
            Problem p(s, LabKernel::Production);
            std::normal_distribution<float> nd(0.0f, 1.0f);
            std::vector<float> q(p.qkv.size());
            for (auto& x : q) x = nd(gen);
            auto qx = to_device_dtype(q);
            CUDA_CHECK(cudaMemcpy(p.qkv.get(), qx.data(), qx.size() * sizeof(floatX), cudaMemcpyHostToDevice));
            attention_forward(p.call(), p.out.get(), p.lse.get(), p.qkv.get(), 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            // file: int32 B, T, NH, hd, G, P; float softcap; then fp32 qkv (B,T,3C), out (B,T,C), lse (B,NH,T)
            FILE* f = fopen(dump.c_str(), "wb");
            if (!f) {
                fprintf(stderr, "attention_ls: cannot write %s\n", dump.c_str());
                return 1;
            }
            const int hdr[6] = {s.B, s.T, s.NH, s.hd, s.G, s.P};
            fwrite(hdr, 4, 6, f);
            fwrite(&s.softcap, 4, 1, f);
            const auto qf = download(p.qkv.get(), p.qkv.size()), of = download(p.out.get(), p.out.size()),
                       lf = download(p.lse.get(), p.lse.size());
            fwrite(qf.data(), 4, qf.size(), f);
            fwrite(of.data(), 4, of.size(), f);
            fwrite(lf.data(), 4, lf.size(), f);
            fclose(f);
            printf("attention_ls: wrote %s (%s)\n", dump.c_str(), s.str().c_str());
            return 0;
        }

        const double pairs = visible_pairs(s);
        const double fwd_flops = 4.0 * s.hd * pairs, bwd_flops = 10.0 * s.hd * pairs;
        Shape sg = s;
        sg.G = s.NH;  // all-global run of the same shape
        if (json) {
            const LabKernel v = kernel_name.empty() ? LabKernel::Production : kernels[0];
            const Timing t = time_kernel(v, s, reps);
            const Timing tg = time_kernel(v, sg, reps);
            printf(
                "{\"kernel\": \"%s\", \"precision\": \"%s\", \"device\": \"%s\", \"B\": %d, \"T\": %d, \"NH\": %d, "
                "\"hd\": %d, \"G\": %d, \"P\": %d, \"softcap\": %g, \"fwd_ms\": %.5f, \"fwdbwd_ms\": %.5f, "
                "\"global_fwd_ms\": %.5f, \"global_fwdbwd_ms\": %.5f, \"fwd_tflops\": %.3f, \"fwdbwd_tflops\": %.3f, "
                "\"split\": %d, \"run\": %d}\n",
                lab_kernel_name(v), kPrecisionName, prop.name, s.B, s.T, s.NH, s.hd, s.G, s.P, s.softcap, t.fwd_ms,
                t.fwdbwd_ms, tg.fwd_ms, tg.fwdbwd_ms, fwd_flops / t.fwd_ms * 1e-9,
                (fwd_flops + bwd_flops) / t.fwdbwd_ms * 1e-9, s.split, s.run);
            return 0;
        }

        // validate the shape (B=1 keeps the CPU reference quick), then the timing table
        Shape sv = s;
        sv.B = 1;
#if !defined(ENABLE_FP32)
        // the backward's runs the timed shape takes (chosen from its batch size), forced on the B = 1 shape
        // validated, which would take none
        // (a local kind with runs is never split: its windows span at most 2 tiles, below the smallest
        // chunk, so the plan without split scratch chooses the same runs)
        if (s.run == 0) sv.run = attention_backward_plan(AttnCall{s.B, s.T, s.C(), s.NH, s.G, s.P}, true).local.run;
#endif
        printf("attention_ls (%s build, %s, seed %llu): validating %s\n", kPrecisionName, prop.name, seed,
               sv.str().c_str());
        if (!validate(sv, kernels, gen, true)) return 1;
        printf("\ntiming %s, median of %d, visible pairs %.3g (%.1f%% of all-global)\n", s.str().c_str(), reps, pairs,
               100.0 * pairs / visible_pairs(sg));
        printf("%-10s %10s %10s %12s %12s %10s %10s\n", "kernel", "fwd ms", "f+b ms", "fwd TFLOP/s", "f+b TFLOP/s",
               "fwd/glob", "f+b/glob");
        for (LabKernel v : kernels) {
            if (v == LabKernel::Naive && (double)s.B * s.NH * s.T * s.T * 8 > 0.5 * prop.totalGlobalMem) {
                printf("%-10s (skipped: the naive kernels' T x T buffers do not fit)\n", lab_kernel_name(v));
                continue;
            }
            const Timing t = time_kernel(v, s, reps);
            const Timing tg = time_kernel(v, sg, reps);
            printf("%-10s %10.4f %10.4f %12.2f %12.2f %10.3f %10.3f\n", lab_kernel_name(v), t.fwd_ms, t.fwdbwd_ms,
                   fwd_flops / t.fwd_ms * 1e-9, (fwd_flops + bwd_flops) / t.fwdbwd_ms * 1e-9, t.fwd_ms / tg.fwd_ms,
                   t.fwdbwd_ms / tg.fwdbwd_ms);
        }
    } catch (const std::exception& e) {
        fprintf(stderr, "attention_ls: %s\n", e.what());
        return 1;
    }
    return 0;
}
