// The decode step's fused linear layer (llmc/cuda/decode_linear.cuh) against a CPU reference written
// here from its contract, in double: out = inp @ W^T + bias; with GELU, pre = that rounded to floatX and
// out = gelu(pre) (tanh or erf form, llmc/core/model_config.h); with the LayerNorm prologue, residual =
// a + b rounded to floatX (checked bit for bit), ln = LayerNorm(residual) (eps 1e-5, biased variance)
// rounded to floatX and used as the input (and equal, bit for bit, to the training forward's
// layernorm_forward / fused_residual_layernorm_forward on the same rows). Fresh random inputs each run (the seed is printed), every
// output poisoned with NaN first, every element checked: relative error ||gpu - ref|| / ||ref|| below
// 1e-2 (bf16) or 1e-5 (fp32 build). Shapes: 1-8 rows, IC 64-768 (a multiple of 8 that is not one of
// 256 too), OC 8 to past the grid's cap (kDecodeLinearMaxBlocks x kDecodeLinearWarps columns). The
// qkv layer's cache store: every k and v value of the new position in its slot of the KV cache
// (llmc/cuda/attention_decode.cuh's layout: a global head's slot = position, a local head's = position %
// ring), bit for bit the layer's own output, and every other byte of the cache as it was (NaN), at a
// position past a local ring's wrap. Also: the refusals (9 rows, IC not a multiple of the pack, a
// misaligned pointer, a residual with nowhere to go, a cache store of another shape). Exit 0 = pass,
// 1 = fail or no GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/decode_linear.cuh"
#include "llmc/cuda/device_buffer.h"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;
using llmc::cuda::floatX;

namespace {

constexpr double kTol = sizeof(floatX) == 2 ? 1e-2 : 1e-5;
// Each element: |gpu - ref| <= kElemTol * (|ref| + 0.01 rms(ref)): two units of the last place of a bf16
// (the stored rounding is at most half of one; the fp32 sums' order adds far less); in fp32, 1e-4: the
// sums of up to 776 products in the kernel's order are within IC * 2^-24 (4.6e-5 at IC 776) of the
// sum of their magnitudes from the double reference, more than an element's |ref| where terms cancel
// (1e-5 failed 3-4 cases on every seed of the emulated FP32 build, worst 2.5e-5).
constexpr double kElemTol = sizeof(floatX) == 2 ? 1.0 / 128 : 1e-4;

// The largest |a - ref| / (|ref| + 0.01 rms(ref)) over the elements; NaN or Inf: +inf.
double worst_elem(const std::vector<float>& a, const std::vector<float>& ref) {
    double ss = 0.0;
    for (float r : ref) ss += (double)r * r;
    const double floor = 0.01 * std::sqrt(ss / (double)std::max<size_t>(1, ref.size())) + 1e-30;
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        if (!std::isfinite(a[i])) return INFINITY;
        worst = std::max(worst, std::fabs((double)a[i] - ref[i]) / (std::fabs((double)ref[i]) + floor));
    }
    return worst;
}

float round_x(float x) { return cuda::to_float(cuda::from_float<floatX>(x)); }

enum class Pro { None, Ln, ResidualLn };
const char* pro_name(Pro p) { return p == Pro::None ? "none" : p == Pro::Ln ? "ln(a)" : "ln(a+b)"; }

struct Case {
    int B, IC, OC;
    Pro pro;
    bool bias;
    int gelu;  // -1 none, else (int)Gelu
};
const Case kCases[] = {
    {4, 192, 576, Pro::Ln, true, -1},             // the paper's qkv after ln1 of the encoder's output
    {4, 192, 192, Pro::None, false, -1},          // attproj without biases
    {4, 192, 768, Pro::ResidualLn, false, 1},     // fc + erf GELU after residual + ln2
    {4, 768, 192, Pro::None, false, -1},          // fcproj
    {3, 192, 10112, Pro::ResidualLn, false, -1},  // the LM head after residual + lnf: OC past the grid's cap
    {1, 64, 8, Pro::None, true, 0},               // one row, one warp's columns, tanh GELU
    {8, 200, 96, Pro::ResidualLn, true, 0},       // 8 rows, IC a multiple of the pack but not of a warp's 256
    {5, 768, 3072, Pro::ResidualLn, true, 1},     // d12's fc
    {2, 3072 / 4, 40, Pro::Ln, false, 1},
    {2, 776, 4160, Pro::None, true, -1},  // past the grid's cap (warps with two columns), IC past 256 and ragged
};

std::vector<float> random_x(size_t n, float scale, std::mt19937_64& gen) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = round_x(scale * nd(gen));
    return v;
}
cuda::DeviceBuffer<floatX> to_device(const std::vector<float>& v) {
    cuda::DeviceBuffer<floatX> d(v.size());
    std::vector<floatX> x(v.size());
    for (size_t i = 0; i < v.size(); i++) x[i] = cuda::from_float<floatX>(v[i]);
    CUDA_CHECK(cudaMemcpy(d.get(), x.data(), d.bytes(), cudaMemcpyHostToDevice));
    return d;
}
std::vector<float> to_host(const cuda::DeviceBuffer<floatX>& d) {
    std::vector<floatX> x(d.size());
    CUDA_CHECK(cudaMemcpy(x.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost));
    std::vector<float> v(x.size());
    for (size_t i = 0; i < v.size(); i++) v[i] = cuda::to_float(x[i]);
    return v;
}
void poison(cuda::DeviceBuffer<floatX>& d) { CUDA_CHECK(cudaMemset(d.get(), 0xFF, d.bytes())); }

double gelu_ref(double x, int kind) {
    if (kind == 1) return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    const double k = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

bool check_case(const Case& c, std::mt19937_64& gen, gpu_test::Checks& checks) {
    const int B = c.B, IC = c.IC, OC = c.OC;
    const std::vector<float> a = random_x((size_t)B * IC, 1.0f, gen), b = random_x((size_t)B * IC, 1.0f, gen);
    const std::vector<float> lw = random_x(IC, 0.5f, gen), lb = random_x(IC, 0.2f, gen);
    const std::vector<float> W = random_x((size_t)OC * IC, 1.0f / std::sqrt((float)IC), gen);
    const std::vector<float> bias = random_x(OC, 0.3f, gen);

    // the reference: the input rows (the LayerNorm of the prologue, as stored), then the layer
    std::vector<float> resid_ref(a), in((size_t)B * IC);
    if (c.pro == Pro::ResidualLn)
        for (size_t i = 0; i < a.size(); i++) resid_ref[i] = round_x(a[i] + b[i]);
    for (int r = 0; r < B; r++) {
        const float* x = resid_ref.data() + (size_t)r * IC;
        if (c.pro == Pro::None) {
            for (int k = 0; k < IC; k++) in[(size_t)r * IC + k] = a[(size_t)r * IC + k];
            continue;
        }
        double m = 0.0, var = 0.0;
        for (int k = 0; k < IC; k++) m += x[k];
        m /= IC;
        for (int k = 0; k < IC; k++) var += (x[k] - m) * (x[k] - m);
        const double s = 1.0 / std::sqrt(var / IC + 1e-5);
        for (int k = 0; k < IC; k++)
            in[(size_t)r * IC + k] = round_x((float)((x[k] - m) * s * lw[k] + (c.pro == Pro::Ln ? lb[k] : 0.0)));
    }
    cuda::DeviceBuffer<floatX> d_a = to_device(a), d_b = to_device(b), d_lw = to_device(lw), d_lb = to_device(lb);
    cuda::DeviceBuffer<floatX> d_W = to_device(W), d_bias = to_device(bias);
    cuda::DeviceBuffer<floatX> d_out((size_t)B * OC), d_pre((size_t)B * OC), d_resid((size_t)B * IC),
        d_ln((size_t)B * IC);
    for (auto* d : {&d_out, &d_pre, &d_resid, &d_ln}) poison(*d);
    cuda::DecodeLnPrologue ln;
    ln.a = d_a.get();
    ln.b = c.pro == Pro::ResidualLn ? d_b.get() : nullptr;
    ln.residual = c.pro == Pro::ResidualLn ? d_resid.get() : nullptr;
    ln.ln_out = d_ln.get();
    ln.w = d_lw.get();
    ln.bias = c.pro == Pro::Ln ? d_lb.get() : nullptr;
    cuda::decode_linear(d_out.get(), c.pro == Pro::None ? d_a.get() : nullptr, d_W.get(),
                        c.bias ? d_bias.get() : nullptr, B, IC, OC, cudaStream_t(nullptr),
                        c.gelu < 0 ? nullptr : d_pre.get(), c.gelu == 1 ? Gelu::Erf : Gelu::Tanh,
                        c.pro == Pro::None ? nullptr : &ln);
    CUDA_CHECK(cudaDeviceSynchronize());

    // the layer's reference from the input rows the kernel used: with a prologue its own LayerNorm (checked
    // against `in` below; an element of it one bf16 unit off the double reference, where the exact value
    // lies near a rounding boundary, would otherwise show in out as a difference the layer did not make)
    const std::vector<float> used = c.pro == Pro::None ? in : to_host(d_ln);
    std::vector<float> out_ref((size_t)B * OC), pre_ref((size_t)B * OC);
    for (int r = 0; r < B; r++)
        for (int n = 0; n < OC; n++) {
            double acc = c.bias ? bias[n] : 0.0;
            for (int k = 0; k < IC; k++) acc += (double)used[(size_t)r * IC + k] * W[(size_t)n * IC + k];
            const size_t i = (size_t)r * OC + n;
            pre_ref[i] = round_x((float)acc);
            out_ref[i] = c.gelu < 0 ? (float)acc : (float)gelu_ref(pre_ref[i], c.gelu);
        }

    char name[160];
    std::snprintf(name, sizeof(name), "B %d IC %d OC %d prologue %s bias %d gelu %d", B, IC, OC, pro_name(c.pro),
                  (int)c.bias, c.gelu);
    const std::vector<float> out = to_host(d_out);
    if (c.gelu >= 0) {  // GELU of the pre-activation the kernel stored (itself checked against pre_ref below): a
        // unit of the last place in pre, where the exact sum lies near a rounding boundary, is amplified by
        // GELU's slope where GELU is small (x < 0)
        const std::vector<float> pre_got = to_host(d_pre);
        for (size_t i = 0; i < out_ref.size(); i++) out_ref[i] = (float)gelu_ref(pre_got[i], c.gelu);
    }
    const double e_out = gpu_test::rel_error(out.data(), out_ref.data(), out.size());
    const double w_out = worst_elem(out, out_ref);
    checks.expect(e_out < kTol && w_out <= kElemTol, "%s: out rel error %.3g (< %.0e), worst element %.3g (<= %.3g)",
                  name, e_out, kTol, w_out, kElemTol);
    if (c.gelu >= 0) {
        const std::vector<float> pre = to_host(d_pre);
        const double e_pre = gpu_test::rel_error(pre.data(), pre_ref.data(), pre.size());
        const double w_pre = worst_elem(pre, pre_ref);
        checks.expect(e_pre < kTol && w_pre <= kElemTol, "%s: pre-activation rel error %.3g, worst element %.3g", name,
                      e_pre, w_pre);
    }
    if (c.pro != Pro::None) {
        const std::vector<float> lno = to_host(d_ln);
        const double e_ln = gpu_test::rel_error(lno.data(), in.data(), lno.size());
        const double w_ln = worst_elem(lno, in);
        checks.expect(e_ln < kTol && w_ln <= kElemTol,
                      "%s: the prologue's LayerNorm rel error %.3g, worst element %.3g", name, e_ln, w_ln);
    }
    if (c.pro == Pro::ResidualLn) {
        const std::vector<float> resid = to_host(d_resid);
        checks.expect(gpu_test::same_bits(resid.data(), resid_ref.data(), resid.size()),
                      "%s: the residual a + b, bit for bit", name);
    }
    if (c.pro != Pro::None) {  // the training forward's LayerNorm kernels on the same rows: the same bits
        cuda::DeviceBuffer<floatX> t_resid((size_t)B * IC), t_ln((size_t)B * IC);
        if (c.pro == Pro::ResidualLn)
            cuda::fused_residual_layernorm_forward(t_resid.get(), t_ln.get(), nullptr, nullptr, d_a.get(), d_b.get(),
                                                   d_lw.get(), nullptr, B, IC, cudaStream_t(nullptr));
        else
            cuda::layernorm_forward(t_ln.get(), nullptr, nullptr, d_a.get(), d_lw.get(), d_lb.get(), B, IC,
                                    cudaStream_t(nullptr));
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> mine = to_host(d_ln), theirs = to_host(t_ln);
        checks.expect(gpu_test::same_bits(mine.data(), theirs.data(), mine.size()),
                      "%s: the prologue's LayerNorm == %s's, bit for bit", name,
                      c.pro == Pro::ResidualLn ? "fused_residual_layernorm_forward" : "layernorm_forward");
    }
    return true;
}

template <typename F>
void expect_refused(gpu_test::Checks& checks, const char* what, F f);

// The qkv layer with the cache store: B 3, NH 4 heads of 16 (C 64), 1 global; ring 5 (P 5), max_len 12,
// layer 1 of 2, position 7 (the local heads' ring wrapped: slot 2).
void check_kv_store(std::mt19937_64& gen, gpu_test::Checks& checks) {
    const int B = 3, NH = 4, G = 1, hd = 16, C = NH * hd, L = 2, P = 5, max_len = 12, layer = 1, t = 7;
    cuda::KvCacheView v;
    v.L = L;
    v.B = B;
    v.NH = NH;
    v.G = G;
    v.hd = hd;
    v.P = P;
    v.max_len = max_len;
    v.ring = P;
    const size_t ng = (size_t)L * B * G * max_len * hd, nl = (size_t)L * B * (NH - G) * P * hd;
    cuda::DeviceBuffer<floatX> kg(ng), vg(ng), kl(nl), vl(nl);
    for (auto* d : {&kg, &vg, &kl, &vl}) poison(*d);
    v.k_global = kg.get();
    v.v_global = vg.get();
    v.k_local = kl.get();
    v.v_local = vl.get();
    cuda::DeviceBuffer<int> d_pos(1);
    CUDA_CHECK(cudaMemcpy(d_pos.get(), &t, sizeof(int), cudaMemcpyHostToDevice));
    const std::vector<float> x = random_x((size_t)B * C, 1.0f, gen), x2 = random_x((size_t)B * C, 1.0f, gen);
    const std::vector<float> lw = random_x(C, 0.5f, gen), bias = random_x(3 * C, 0.3f, gen);
    const std::vector<float> W = random_x((size_t)3 * C * C, 0.125f, gen);
    cuda::DeviceBuffer<floatX> d_x = to_device(x), d_x2 = to_device(x2), d_lw = to_device(lw), d_W = to_device(W);
    cuda::DeviceBuffer<floatX> d_bias = to_device(bias), d_out((size_t)B * 3 * C), d_plain((size_t)B * 3 * C),
                               d_resid((size_t)B * C);
    // layer 0's form (ln1 of the input) for layer 0 of the cache, the later layers' (x = x2 + fcproj, then
    // ln1) for layer 1; the kernel's out == the plain kernel's out bit for bit either way
    cuda::DecodeLnPrologue ln0, ln1;
    ln0.a = d_x.get();
    ln0.w = d_lw.get();
    ln1 = ln0;
    ln1.b = d_x2.get();
    ln1.residual = d_resid.get();
    cuda::DecodeKvStore store;
    store.cache = v;
    store.pos = d_pos.get();
    bool same_out = true;
    for (int lyr : {0, layer}) {
        const cuda::DecodeLnPrologue& ln = lyr == 0 ? ln0 : ln1;
        store.layer = lyr;
        cuda::decode_linear(d_out.get(), nullptr, d_W.get(), d_bias.get(), B, C, 3 * C, cudaStream_t(nullptr), nullptr,
                            Gelu::Tanh, &ln, &store);
        cuda::decode_linear(d_plain.get(), nullptr, d_W.get(), d_bias.get(), B, C, 3 * C, cudaStream_t(nullptr),
                            nullptr, Gelu::Tanh, &ln);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> a = to_host(d_out), b = to_host(d_plain);
        same_out &= gpu_test::same_bits(a.data(), b.data(), a.size());
    }
    checks.expect(same_out, "cache store: the qkv rows == the plain kernel's, bit for bit (both prologues)");
    const std::vector<float> out = to_host(d_out);  // layer 1's
    const std::vector<float> hkg = to_host(kg), hvg = to_host(vg), hkl = to_host(kl), hvl = to_host(vl);
    // the expected cache: NaN everywhere but the slots of position t of layers 0 and 1, which hold their
    // out's k and v (layer 0's from the ln0 run, recomputed here by the plain kernel)
    std::vector<float> ekg(ng, NAN), evg(ng, NAN), ekl(nl, NAN), evl(nl, NAN);
    cuda::decode_linear(d_plain.get(), nullptr, d_W.get(), d_bias.get(), B, C, 3 * C, cudaStream_t(nullptr), nullptr,
                        Gelu::Tanh, &ln0);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out0 = to_host(d_plain);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < hd; d++) {
                const size_t o = v.offset(0, b, h, t) + d;
                (v.is_local(h) ? ekl : ekg)[o] = out0[(size_t)b * 3 * C + C + h * hd + d];
                (v.is_local(h) ? evl : evg)[o] = out0[(size_t)b * 3 * C + 2 * C + h * hd + d];
            }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < hd; d++) {
                const size_t o = v.offset(layer, b, h, t) + d;
                const float k = out[(size_t)b * 3 * C + C + h * hd + d],
                            val = out[(size_t)b * 3 * C + 2 * C + h * hd + d];
                (v.is_local(h) ? ekl : ekg)[o] = k;
                (v.is_local(h) ? evl : evg)[o] = val;
            }
    size_t wrong = 0, stored = 0;
    const auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
    for (const auto& [got, want] : {std::make_pair(&hkg, &ekg), std::make_pair(&hvg, &evg), std::make_pair(&hkl, &ekl),
                                    std::make_pair(&hvl, &evl)})
        for (size_t i = 0; i < got->size(); i++) {
            wrong += !same((*got)[i], (*want)[i]);
            stored += !std::isnan((*want)[i]);
        }
    checks.expect(wrong == 0 && stored == (size_t)4 * B * C,
                  "cache store: position %d's k and v (%zu values) in their slots bit for bit, every other "
                  "element untouched (%zu differ)",
                  t, stored, wrong);
    expect_refused(checks, "a cache store of another width", [&] {
        cuda::decode_linear(d_out.get(), nullptr, d_W.get(), nullptr, B, C, 2 * C, cudaStream_t(nullptr), nullptr,
                            Gelu::Tanh, &ln0, &store);
    });
    expect_refused(checks, "a cache store with GELU", [&] {
        cuda::decode_linear(d_out.get(), nullptr, d_W.get(), nullptr, B, C, 3 * C, cudaStream_t(nullptr), d_plain.get(),
                            Gelu::Tanh, &ln0, &store);
    });
    expect_refused(checks, "an output overlapping an input (the residual written over a)", [&] {
        cuda::DecodeLnPrologue alias = ln1;
        alias.residual = d_x.get();
        cuda::decode_linear(d_out.get(), nullptr, d_W.get(), nullptr, B, C, 3 * C, cudaStream_t(nullptr), nullptr,
                            Gelu::Tanh, &alias);
    });
}

// f() must throw std::invalid_argument.
template <typename F>
void expect_refused(gpu_test::Checks& checks, const char* what, F f) {
    bool refused = false;
    try {
        f();
    } catch (const std::invalid_argument&) { refused = true; }
    checks.expect(refused, "refused: %s", what);
}

void check_refusals(gpu_test::Checks& checks) {
    cuda::DeviceBuffer<floatX> x(16 * 1024), w(16 * 1024), out(16 * 1024);
    checks.expect(!cuda::decode_linear_fits(cuda::kDecodeMaxRows + 1, 64, false), "decode_linear_fits: 9 rows");
    checks.expect(cuda::decode_linear_fits(cuda::kDecodeMaxRows, 64, true), "decode_linear_fits: 8 rows of 64");
    expect_refused(checks, "9 rows", [&] {
        cuda::decode_linear(out.get(), x.get(), w.get(), nullptr, cuda::kDecodeMaxRows + 1, 64, 8,
                            cudaStream_t(nullptr));
    });
    expect_refused(checks, "IC not a multiple of the pack", [&] {
        cuda::decode_linear(out.get(), x.get(), w.get(), nullptr, 2, cuda::kPack + 1, 8, cudaStream_t(nullptr));
    });
    expect_refused(checks, "OC not a multiple of 8", [&] {
        cuda::decode_linear(out.get(), x.get(), w.get(), nullptr, 2, 64, 12, cudaStream_t(nullptr));
    });
    expect_refused(checks, "a misaligned weight", [&] {
        cuda::decode_linear(out.get(), x.get(), w.get() + 1, nullptr, 2, 64, 8, cudaStream_t(nullptr));
    });
    expect_refused(checks, "a residual with nowhere to go", [&] {
        cuda::DecodeLnPrologue ln;
        ln.a = x.get();
        ln.b = x.get();
        ln.w = w.get();
        cuda::decode_linear(out.get(), nullptr, w.get(), nullptr, 2, 64, 8, cudaStream_t(nullptr), nullptr, Gelu::Tanh,
                            &ln);
    });
}

}  // namespace

int main() {
    if (!gpu_test::have_gpu("test_decode_linear")) return 1;
    std::random_device rd;
    const uint64_t seed = ((uint64_t)rd() << 32) ^ rd();
    std::printf("test_decode_linear (%s), seed %llu\n", cuda::kPrecisionName, (unsigned long long)seed);
    std::mt19937_64 gen(seed);
    gpu_test::Checks checks;
    try {
        for (const Case& c : kCases) check_case(c, gen, checks);
        check_kv_store(gen, checks);
        check_refusals(checks);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "test_decode_linear: %s\n", e.what());
        return 1;
    }
    std::printf("test_decode_linear: %s\n", checks.failures == 0 ? "OK" : "FAILED");
    return checks.failures == 0 ? 0 : 1;
}
