// Kernel lab: matmul through cuBLASLt (llmc/cuda/matmul.cuh) against the fp32 CPU reference
// (llmc/cpu/matmul.h, llmc/cpu/gelu.h).
//   ./matmul            validate every shape below, then a timing table (ms, TFLOP/s, % of peak)
//   ./matmul --check    validation only; exit status 1 on any failure
// Validation per shape: forward with/without bias, GELU through the fused epilogue and through the
// separate kernel, the erf GELU (Gelu::Erf: never the epilogue, asked for or not); backward with/without
// dinp and dbias, dweight/dbias ADDED onto random values of the gradient's own size; the GELU backward
// of both kinds with and without the bias gradient, and which derivative it applies (tanh's or
// erf's); two runs bit-identical; unsupported shapes throw std::invalid_argument.
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "dev/cuda/lab_common.cuh"
#include "llmc/cpu/gelu.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cuda/matmul.cuh"

using llmc::cuda::DeviceBuffer;
using llmc::cuda::floatX;
using llmc::cuda::MatmulContext;

namespace {

// Tolerance for out = gelu(pre) when cuBLASLt's GELU epilogue computed it. BF16 build: the usual one.
// FP32 build: 1e-3, because how the epilogue evaluates tanh is undocumented (a hardware tanh
// approximation is ~1e-4 off); the FP32 build does not use the epilogue by default
// (MatmulContext::fuse_gelu), pre_gelu is still checked at 1e-5, and check_gelu_formula tells tanh
// from erf.
constexpr double kEpilogueGeluTol = sizeof(floatX) == 2 ? lab::kTol : 1e-3;

// Dense bf16 tensor-core peak (TFLOP/s) from the device name, as llm.c does; 0 = unknown.
double bf16_peak_tflops(const std::string& name) {
    if (name.find("H200") != std::string::npos) return 989.0;
    if (name.find("H100") != std::string::npos) {
        if (name.find("PCIe") != std::string::npos) return 756.0;
        return 989.0;  // SXM (HBM3) and NVL
    }
    if (name.find("A100") != std::string::npos) return 312.0;
    return 0.0;
}

// Device copy of host that starts `off` elements into its buffer (off = 16 bytes' worth: operands
// that are 16- but not 256-byte aligned, like tensors inside the flat parameter buffer).
template <typename T>
struct Offset {
    DeviceBuffer<T> buf;
    size_t off;
    Offset(const std::vector<float>& host, size_t off_) : off(off_) {
        std::vector<float> h(off, 0.f);
        h.insert(h.end(), host.begin(), host.end());
        buf = lab::upload_as<T>(h);
    }
    Offset(size_t n, size_t off_) : buf(n + off_), off(off_) { lab::poison(buf.get(), buf.size()); }
    T* get() const { return buf.get() + off; }
};

// kind: the GELU's (with gelu); Erf must run the separate kernel even with fuse (the epilogue is tanh).
bool check_forward(MatmulContext& ctx, llmc::Rng& rng, int N, int IC, int OC, bool with_bias, bool gelu, bool fuse,
                   bool offset16 = false, llmc::Gelu kind = llmc::Gelu::Tanh) {
    std::printf("forward N=%d IC=%d OC=%d bias=%d gelu=%s%s%s\n", N, IC, OC, (int)with_bias,
                gelu ? (fuse ? "epilogue" : "kernel") : "no", gelu ? (kind == llmc::Gelu::Erf ? " erf" : " tanh") : "",
                offset16 ? " (operands at 16-byte offsets)" : "");
    const size_t ox = offset16 ? 16 / sizeof(floatX) : 0;
    std::vector<float> inp = lab::random_normal(rng, (size_t)N * IC, 0.f, 1.f);
    std::vector<float> w = lab::random_normal(rng, (size_t)OC * IC, 0.f, 1.f / std::sqrt((float)IC));
    std::vector<float> b = lab::random_normal(rng, OC, 0.f, 0.5f);
    lab::round_to_floatX(inp);
    lab::round_to_floatX(w);
    lab::round_to_floatX(b);
    std::vector<float> pre((size_t)N * OC), out((size_t)N * OC);
    llmc::cpu::matmul_forward<float>(pre.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N, IC, OC);
    if (gelu) llmc::cpu::gelu_forward(out.data(), pre.data(), out.size(), kind);

    const Offset<floatX> d_inp(inp, ox), d_w(w, ox), d_b(b, ox);
    const Offset<floatX> d_out((size_t)N * OC, ox), d_pre((size_t)N * OC, ox), d_out2((size_t)N * OC, ox);
    const bool default_fuse = ctx.fuse_gelu;
    ctx.fuse_gelu = fuse;
    llmc::cuda::matmul_forward(ctx, d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr, N, IC, OC, 0,
                               gelu ? d_pre.get() : nullptr, kind);
    bool ok = true;
    if (gelu && kind == llmc::Gelu::Erf && ctx.last_gelu_fused) {
        std::printf("  the erf GELU ran in cuBLASLt's GELU epilogue  FAIL\n");
        ok = false;
    }
    if (gelu) {
        if (fuse && !ctx.last_gelu_fused && kind == llmc::Gelu::Tanh)
            std::printf("  note: cuBLASLt offered no GELU epilogue for this shape/type; the separate kernel ran\n");
        ok &= lab::check("pre_gelu", d_pre.get(), pre);
        ok &= lab::check("out", d_out.get(), out, ctx.last_gelu_fused ? kEpilogueGeluTol : lab::kTol);
    } else {
        ok &= lab::check("out", d_out.get(), pre);
    }
    llmc::cuda::matmul_forward(ctx, d_out2.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr, N, IC, OC, 0,
                               gelu ? d_pre.get() : nullptr, kind);
    ok &= lab::check_identical("out", d_out.get(), d_out2.get(), (size_t)N * OC);
    ctx.fuse_gelu = default_fuse;
    return ok;
}

bool check_backward(MatmulContext& ctx, llmc::Rng& rng, int N, int IC, int OC, bool with_dinp, bool with_dbias,
                    bool offset16 = false) {
    std::printf("backward N=%d IC=%d OC=%d dinp=%d dbias=%d%s\n", N, IC, OC, (int)with_dinp, (int)with_dbias,
                offset16 ? " (operands at 16-byte offsets)" : "");
    const size_t ox = offset16 ? 16 / sizeof(floatX) : 0, of = offset16 ? 4 : 0;
    std::vector<float> inp = lab::random_normal(rng, (size_t)N * IC, 0.f, 1.f);
    std::vector<float> w = lab::random_normal(rng, (size_t)OC * IC, 0.f, 1.f / std::sqrt((float)IC));
    std::vector<float> dout = lab::random_normal(rng, (size_t)N * OC, 0.f, 1.f);
    lab::round_to_floatX(inp);
    lab::round_to_floatX(w);
    lab::round_to_floatX(dout);
    // gradients are ADDED: start from random values as large as the gradient itself (~sqrt(N))
    const float gscale = std::sqrt((float)N);
    const std::vector<float> dw0 = lab::random_normal(rng, (size_t)OC * IC, 0.f, gscale);
    const std::vector<float> db0 = lab::random_normal(rng, OC, 0.f, gscale);
    std::vector<float> dinp_ref((size_t)N * IC, 0.f), dw_ref = dw0, db_ref = db0;
    llmc::cpu::matmul_backward<float>(dinp_ref.data(), dw_ref.data(), with_dbias ? db_ref.data() : nullptr, dout.data(),
                                      inp.data(), w.data(), N, IC, OC);

    const Offset<floatX> d_inp(inp, ox), d_w(w, ox), d_dout(dout, ox);
    const Offset<floatX> d_dinp((size_t)N * IC, ox), d_dinp2((size_t)N * IC, ox);
    DeviceBuffer<float> d_scratch(llmc::cuda::matmul_backward_scratch_floats(N, OC));
    lab::poison(d_scratch.get(), d_scratch.size());
    DeviceBuffer<uint32_t> d_arrivals(llmc::cuda::matmul_backward_arrivals(OC), true);
    const Offset<float> d_dw(dw0, of), d_db(db0, of);
    llmc::cuda::matmul_backward(ctx, with_dinp ? d_dinp.get() : nullptr, d_dw.get(), with_dbias ? d_db.get() : nullptr,
                                d_scratch.get(), d_arrivals.get(), d_dout.get(), d_inp.get(), d_w.get(), N, IC, OC, 0);
    bool ok = true;
    if (with_dinp) ok &= lab::check("dinp", d_dinp.get(), dinp_ref);
    ok &= lab::check("dweight", d_dw.get(), dw_ref);
    ok &= lab::check("dbias", d_db.get(), with_dbias ? db_ref : db0);  // untouched when skipped
    ok &= lab::check_arrivals_zero("dbias", d_arrivals.get(), d_arrivals.size());
    // determinism: the same call again from the same starting gradients
    const Offset<float> d_dw2(dw0, of), d_db2(db0, of);
    llmc::cuda::matmul_backward(ctx, with_dinp ? d_dinp2.get() : nullptr, d_dw2.get(),
                                with_dbias ? d_db2.get() : nullptr, d_scratch.get(), d_arrivals.get(), d_dout.get(),
                                d_inp.get(), d_w.get(), N, IC, OC, 0);
    if (with_dinp) ok &= lab::check_identical("dinp", d_dinp.get(), d_dinp2.get(), (size_t)N * IC);
    ok &= lab::check_identical("dweight", d_dw.get(), d_dw2.get(), (size_t)OC * IC);
    ok &= lab::check_identical("dbias", d_db.get(), d_db2.get(), (size_t)OC);
    return ok;
}

// matmul_gelu_backward: the GELU backward of `kind` (d pre = dout * gelu'(pre), in place, rounded to
// floatX) in the bias gradient's launch (with_dbias) or its own (without: a layer without bias, no
// scratch nor arrivals given), then the products; against the CPU's gelu_backward (its result rounded
// to floatX, as the kernel stores it) and matmul_backward, and run to run.
bool check_gelu_backward(MatmulContext& ctx, llmc::Rng& rng, int N, int IC, int OC, llmc::Gelu kind = llmc::Gelu::Tanh,
                         bool with_dbias = true) {
    std::printf("gelu (%s) backward + backward N=%d IC=%d OC=%d dbias=%d\n", llmc::gelu_name(kind), N, IC, OC,
                (int)with_dbias);
    std::vector<float> inp = lab::random_normal(rng, (size_t)N * IC, 0.f, 1.f);
    std::vector<float> w = lab::random_normal(rng, (size_t)OC * IC, 0.f, 1.f / std::sqrt((float)IC));
    std::vector<float> pre = lab::random_normal(rng, (size_t)N * OC, 0.f, 2.f);
    std::vector<float> dout = lab::random_normal(rng, (size_t)N * OC, 0.f, 1.f);
    for (auto* v : {&inp, &w, &pre, &dout}) lab::round_to_floatX(*v);
    const float gscale = std::sqrt((float)N);
    const std::vector<float> dw0 = lab::random_normal(rng, (size_t)OC * IC, 0.f, gscale);
    const std::vector<float> db0 = lab::random_normal(rng, OC, 0.f, gscale);
    std::vector<float> dpre_ref((size_t)N * OC);
    llmc::cpu::gelu_backward(dpre_ref.data(), pre.data(), dout.data(), dpre_ref.size(), kind);
    lab::round_to_floatX(dpre_ref);
    std::vector<float> dinp_ref((size_t)N * IC, 0.f), dw_ref = dw0, db_ref = db0;
    llmc::cpu::matmul_backward<float>(dinp_ref.data(), dw_ref.data(), with_dbias ? db_ref.data() : nullptr,
                                      dpre_ref.data(), inp.data(), w.data(), N, IC, OC);
    const Offset<floatX> d_inp(inp, 0), d_w(w, 0), d_pre(pre, 0);
    DeviceBuffer<float> d_scratch(llmc::cuda::matmul_backward_scratch_floats(N, OC));
    DeviceBuffer<uint32_t> d_arrivals(llmc::cuda::matmul_backward_arrivals(OC), true);
    bool ok = true;
    Offset<floatX> dg[2] = {Offset<floatX>(dout, 0), Offset<floatX>(dout, 0)};
    Offset<floatX> dinp[2] = {Offset<floatX>((size_t)N * IC, 0), Offset<floatX>((size_t)N * IC, 0)};
    Offset<float> dw[2] = {Offset<float>(dw0, 0), Offset<float>(dw0, 0)};
    Offset<float> db[2] = {Offset<float>(db0, 0), Offset<float>(db0, 0)};
    for (int run = 0; run < 2; run++) {
        lab::poison(d_scratch.get(), d_scratch.size());
        llmc::cuda::matmul_gelu_backward(ctx, dinp[run].get(), dw[run].get(), with_dbias ? db[run].get() : nullptr,
                                         with_dbias ? d_scratch.get() : nullptr,
                                         with_dbias ? d_arrivals.get() : nullptr, dg[run].get(), d_pre.get(),
                                         d_inp.get(), d_w.get(), N, IC, OC, 0, kind);
    }
    ok &= lab::check("d pre", dg[0].get(), dpre_ref);
    ok &= lab::check("dinp", dinp[0].get(), dinp_ref);
    ok &= lab::check("dweight", dw[0].get(), dw_ref);
    ok &= lab::check("dbias", db[0].get(), with_dbias ? db_ref : db0);  // untouched without dbias
    ok &= lab::check_arrivals_zero("dbias", d_arrivals.get(), d_arrivals.size());
    ok &= lab::check_identical("d pre", dg[0].get(), dg[1].get(), (size_t)N * OC);
    ok &= lab::check_identical("dinp", dinp[0].get(), dinp[1].get(), (size_t)N * IC);
    ok &= lab::check_identical("dweight", dw[0].get(), dw[1].get(), (size_t)OC * IC);
    ok &= lab::check_identical("dbias", db[0].get(), db[1].get(), (size_t)OC);
    return ok;
}

// The bias gradient's kernel alone (detail::bias_sum, no GEMM) with row_blocks row blocks (0: the
// backward's rule): dbias ADDED onto random values += the column sums of dout (N, OC), or with kind
// (not nullptr) of d pre = dout * gelu'(pre), stored in place rounded to floatX; against the CPU's
// gelu_backward and sums in double, and run to run.
bool check_bias_sum(llmc::Rng& rng, int N, int OC, const llmc::Gelu* kind, int row_blocks) {
    const int Y = row_blocks > 0 ? row_blocks : llmc::cuda::detail::bias_row_blocks(N, OC);
    std::printf("bias gradient alone N=%d OC=%d, %ld row chunks over %d row blocks%s%s\n", N, OC,
                llmc::cuda::ceil_div(N, llmc::cuda::detail::kBiasRows), Y, kind ? ", GELU backward " : "",
                kind ? llmc::gelu_name(*kind) : "");
    std::vector<float> pre = lab::random_normal(rng, (size_t)N * OC, 0.f, 2.f);
    std::vector<float> dout = lab::random_normal(rng, (size_t)N * OC, 0.f, 1.f);
    lab::round_to_floatX(pre);
    lab::round_to_floatX(dout);
    const std::vector<float> db0 = lab::random_normal(rng, OC, 0.f, std::sqrt((float)N));
    std::vector<float> summed = dout;
    if (kind) {
        llmc::cpu::gelu_backward(summed.data(), pre.data(), dout.data(), summed.size(), *kind);
        lab::round_to_floatX(summed);
    }
    std::vector<double> sums(db0.begin(), db0.end());
    for (int r = 0; r < N; r++)
        for (int c = 0; c < OC; c++) sums[c] += summed[(size_t)r * OC + c];
    const std::vector<float> db_ref(sums.begin(), sums.end());
    const Offset<floatX> d_pre(pre, 0);
    DeviceBuffer<float> d_scratch((size_t)Y * OC);
    DeviceBuffer<uint32_t> d_arrivals(llmc::cuda::matmul_backward_arrivals(OC), true);
    Offset<floatX> dg[2] = {Offset<floatX>(dout, 0), Offset<floatX>(dout, 0)};
    Offset<float> db[2] = {Offset<float>(db0, 0), Offset<float>(db0, 0)};
    for (int run = 0; run < 2; run++) {
        lab::poison(d_scratch.get(), d_scratch.size());
        llmc::cuda::detail::bias_sum(db[run].get(), d_scratch.get(), d_arrivals.get(), dg[run].get(),
                                     kind ? d_pre.get() : nullptr, kind ? *kind : llmc::Gelu::Tanh, N, OC, 0,
                                     row_blocks);
    }
    bool ok = lab::check("dbias", db[0].get(), db_ref);
    ok &= lab::check("d pre", dg[0].get(), summed);  // dout itself, unchanged, without the GELU pass
    ok &= lab::check_arrivals_zero("dbias", d_arrivals.get(), d_arrivals.size());
    ok &= lab::check_identical("dbias", db[0].get(), db[1].get(), (size_t)OC);
    ok &= lab::check_identical("d pre", dg[0].get(), dg[1].get(), (size_t)N * OC);
    return ok;
}

// The backward's grid rule (bias_row_blocks) on the host, over N 1..3000 and 16384 and OC multiples of
// 8 up to 26000: 1 <= Y <= the row chunks; at most kBiasGridAim blocks in all (one row block a column
// group when there are more groups); the fewest chunks a row block that allows, over the fewest row
// blocks that give it; and the training shapes whose blocks sum several chunks (d12's qkv and fc at N
// 16384) do.
bool check_bias_row_rule() {
    using llmc::cuda::ceil_div;
    namespace d = llmc::cuda::detail;
    std::vector<int> Ns;
    for (int N = 1; N <= 3000; N++) Ns.push_back(N);
    Ns.push_back(16384);
    long shapes = 0, bad = 0;
    for (int N : Ns)
        for (int OC = 8; OC <= 26000; OC += OC < 1024 ? 8 : 1000) {
            const long chunks = ceil_div(N, d::kBiasRows), groups = ceil_div(OC, d::kBiasGroupCols);
            const long most = std::max<long>(1, d::kBiasGridAim / groups), Y = d::bias_row_blocks(N, OC);
            const long per = ceil_div(chunks, std::min(chunks, most));  // fewest chunks a block within the aim
            shapes++;
            const bool fine =
                Y >= 1 && Y <= chunks && Y <= most && ceil_div(chunks, Y) == per && Y == ceil_div(chunks, per);
            if (!fine && bad++ < 5)
                std::printf("  FAIL: N=%d OC=%d: Y %ld for %ld chunks, %ld groups\n", N, OC, Y, chunks, groups);
        }
    const int y_qkv = d::bias_row_blocks(16384, 2304), y_fc = d::bias_row_blocks(16384, 3072);
    const bool ok = bad == 0 && y_qkv < 128 && y_fc < 128;
    std::printf(
        "bias gradient's grid rule: %ld shapes, %ld outside it; N 16384: Y %d (OC 2304), %d (OC 3072) of "
        "128 chunks  %s\n",
        shapes, bad, y_qkv, y_fc, ok ? "OK" : "FAIL");
    return ok;
}

// Which GELU does the epilogue compute? pre = x exactly (one non-zero input column, unit weights, no
// bias), so out = gelu(x) for x in [-6, 4]. Over the outputs where the tanh approximation and the
// exact (erf) GELU differ by more than 4 output ulps, the sum of squared distances to the tanh GELU
// must be smaller than to the erf GELU (robust to a hardware tanh approximation's own error, which a
// point-by-point "closer" vote is not: near x = -2.7 that error is as large as the tanh/erf gap).
// kind Erf: matmul_forward asked for the erf GELU (with fuse: it must not take the epilogue) must be
// closer to erf (the relative-error checks above cannot tell the kinds apart in the BF16 build).
bool check_gelu_formula(MatmulContext& ctx, bool fuse, llmc::Gelu kind = llmc::Gelu::Tanh) {
    const int N = 512, IC = 8, OC = 8;
    const bool want_erf = kind == llmc::Gelu::Erf;
    std::printf("GELU formula (%s, asked for %s): %s\n", fuse ? "epilogue" : "kernel", llmc::gelu_name(kind),
                want_erf ? "erf, not the tanh approximation" : "tanh approximation, not erf");
    std::vector<float> inp((size_t)N * IC, 0.f), w((size_t)OC * IC, 0.f);
    for (int n = 0; n < N; n++) inp[(size_t)n * IC] = -6.f + 10.f * n / (N - 1);
    lab::round_to_floatX(inp);
    for (int o = 0; o < OC; o++) w[(size_t)o * IC] = 1.f;
    auto d_inp = lab::upload_as<floatX>(inp);
    auto d_w = lab::upload_as<floatX>(w);
    DeviceBuffer<floatX> d_out((size_t)N * OC), d_pre((size_t)N * OC);
    lab::poison(d_out.get(), d_out.size());
    const bool default_fuse = ctx.fuse_gelu;
    ctx.fuse_gelu = fuse;
    llmc::cuda::matmul_forward(ctx, d_out.get(), d_inp.get(), d_w.get(), nullptr, N, IC, OC, 0, d_pre.get(), kind);
    const bool fused = ctx.last_gelu_fused;
    ctx.fuse_gelu = default_fuse;
    if (want_erf && fused) {
        std::printf("  the erf GELU ran in cuBLASLt's GELU epilogue  FAIL\n");
        return false;
    }
    if (fuse && !fused && !want_erf) {
        std::printf("  cuBLASLt offered no GELU epilogue here (the kernel ran); nothing to decide\n");
        return true;
    }
    const std::vector<float> out = lab::download(d_out.get(), d_out.size());
    int decisive = 0, tanh_closer = 0, bad = 0;
    double sq_tanh = 0.0, sq_erf = 0.0;  // over the decisive outputs
    for (int n = 0; n < N; n++) {
        const double x = inp[(size_t)n * IC];
        const double gt = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        const double ge = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        // output spacing near gt: relative 2^-7 (bf16, upper bound) or 2^-23 (fp32)
        const double ulp = std::max(std::fabs(gt) * (sizeof(floatX) == 2 ? 0x1p-7 : 0x1p-23), 1e-30);
        for (int o = 0; o < OC; o++) {
            const double y = out[(size_t)n * OC + o];
            if (!std::isfinite(y)) {
                bad++;
                continue;
            }
            if (std::fabs(gt - ge) > 4 * ulp) {
                decisive++;
                tanh_closer += std::fabs(y - gt) < std::fabs(y - ge);
                sq_tanh += (y - gt) * (y - gt);
                sq_erf += (y - ge) * (y - ge);
            }
        }
    }
    const bool ok =
        bad == 0 && (decisive == 0 || (want_erf ? sq_erf < sq_tanh : sq_tanh < sq_erf)) && (!want_erf || decisive > 0);
    std::printf(
        "  %d decisive outputs (%d closer to tanh-GELU), rms distance to tanh-GELU %.3g, to erf-GELU %.3g, "
        "%d non-finite  %s\n",
        decisive, tanh_closer, decisive ? std::sqrt(sq_tanh / decisive) : 0.0,
        decisive ? std::sqrt(sq_erf / decisive) : 0.0, bad,
        ok         ? "OK"
        : want_erf ? "FAIL"
                   : "FAIL (set MatmulContext::fuse_gelu = false by default)");
    return ok;
}

// Shapes the wrappers must refuse with std::invalid_argument.
// Which GELU derivative does matmul_gelu_backward apply? pre = x for x in [-6, 4] (a row each, the
// same in every column), dout = 1, so d pre = gelu'(x) of the kind asked for, in the bias gradient's
// pass (with_dbias) or gelu_backward's own. As check_gelu_formula: over the outputs where the two
// derivatives differ by more than 4 output ulps, the sum of squared distances to the kind asked for
// must be the smaller (the relative-error checks of check_gelu_backward cannot tell the kinds apart
// in the BF16 build).
bool check_gelu_backward_formula(MatmulContext& ctx, llmc::Gelu kind, bool with_dbias) {
    const int N = 512, IC = 8, OC = 8;
    const bool want_erf = kind == llmc::Gelu::Erf;
    std::printf("GELU backward formula (asked for %s, dbias=%d)\n", llmc::gelu_name(kind), (int)with_dbias);
    std::vector<float> pre((size_t)N * OC), dout((size_t)N * OC, 1.f), inp((size_t)N * IC, 0.f),
        w((size_t)OC * IC, 0.f);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) pre[(size_t)n * OC + o] = -6.f + 10.f * n / (N - 1);
    lab::round_to_floatX(pre);
    auto d_pre = lab::upload_as<floatX>(pre);
    auto d_dout = lab::upload_as<floatX>(dout);
    auto d_inp = lab::upload_as<floatX>(inp);
    auto d_w = lab::upload_as<floatX>(w);
    DeviceBuffer<float> d_dw((size_t)OC * IC, true), d_db(OC, true);
    DeviceBuffer<float> d_scratch(llmc::cuda::matmul_backward_scratch_floats(N, OC));
    DeviceBuffer<uint32_t> d_arrivals(llmc::cuda::matmul_backward_arrivals(OC), true);
    llmc::cuda::matmul_gelu_backward(ctx, nullptr, d_dw.get(), with_dbias ? d_db.get() : nullptr,
                                     with_dbias ? d_scratch.get() : nullptr, with_dbias ? d_arrivals.get() : nullptr,
                                     d_dout.get(), d_pre.get(), d_inp.get(), d_w.get(), N, IC, OC, 0, kind);
    const std::vector<float> got = lab::download(d_dout.get(), d_dout.size());
    const double k = 0.7978845608028654;
    int decisive = 0, bad = 0;
    double sq_tanh = 0.0, sq_erf = 0.0;
    for (int n = 0; n < N; n++) {
        const double x = pre[(size_t)n * OC];
        const double t = std::tanh(k * (x + 0.044715 * x * x * x));
        const double gt = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
        const double ge =
            0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
        const double ulp = std::max(std::fabs(gt) * (sizeof(floatX) == 2 ? 0x1p-7 : 0x1p-23), 1e-30);
        for (int o = 0; o < OC; o++) {
            const double y = got[(size_t)n * OC + o];
            if (!std::isfinite(y)) {
                bad++;
                continue;
            }
            if (std::fabs(gt - ge) > 4 * ulp) {
                decisive++;
                sq_tanh += (y - gt) * (y - gt);
                sq_erf += (y - ge) * (y - ge);
            }
        }
    }
    const bool ok = bad == 0 && decisive > 0 && (want_erf ? sq_erf < sq_tanh : sq_tanh < sq_erf);
    std::printf("  %d decisive outputs, rms distance to tanh-GELU' %.3g, to erf-GELU' %.3g, %d non-finite  %s\n",
                decisive, decisive ? std::sqrt(sq_tanh / decisive) : 0.0, decisive ? std::sqrt(sq_erf / decisive) : 0.0,
                bad, ok ? "OK" : "FAIL");
    return ok;
}

bool check_rejects(MatmulContext& ctx) {
    std::printf("unsupported shapes are refused\n");
    DeviceBuffer<floatX> a(4096), b(4096), c(4096);
    bool ok = true;
    auto expect_throw = [&](const char* what, auto fn) {
        bool threw = false;
        try {
            fn();
        } catch (const std::invalid_argument& e) {
            threw = true;
            std::printf("  %-28s -> %s\n", what, e.what());
        }
        if (!threw) {
            std::printf("  %-28s did NOT throw  FAIL\n", what);
            ok = false;
        }
    };
    expect_throw("IC = 12 (not a multiple of 8)",
                 [&] { llmc::cuda::matmul_forward(ctx, c.get(), a.get(), b.get(), nullptr, 4, 12, 8, 0); });
    expect_throw("OC = 20 (not a multiple of 8)",
                 [&] { llmc::cuda::matmul_forward(ctx, c.get(), a.get(), b.get(), nullptr, 4, 8, 20, 0); });
    expect_throw("misaligned inp",
                 [&] { llmc::cuda::matmul_forward(ctx, c.get(), a.get() + 1, b.get(), nullptr, 4, 8, 8, 0); });
    expect_throw("N = 0", [&] { llmc::cuda::matmul_forward(ctx, c.get(), a.get(), b.get(), nullptr, 0, 8, 8, 0); });
    // the GELU backward reads pre in 16-byte packs (bias_sum_kernel)
    DeviceBuffer<float> dw(64), db(8), scratch(llmc::cuda::matmul_backward_scratch_floats(4, 8));
    DeviceBuffer<uint32_t> arrivals(llmc::cuda::matmul_backward_arrivals(8), true);
    expect_throw("misaligned pre", [&] {
        llmc::cuda::matmul_gelu_backward(ctx, nullptr, dw.get(), db.get(), scratch.get(), arrivals.get(), c.get(),
                                         a.get() + 1, b.get(), a.get(), 4, 8, 8, 0);
    });
    return ok;
}

struct Timing {
    std::string kernel, shape;
    float ms;
    double flops;
};

}  // namespace

int main(int argc, char** argv) {
    const lab::Args args = lab::parse_args(argc, argv, "matmul");
    const cudaDeviceProp prop = lab::require_gpu(args);
    llmc::Rng rng(args.seed);
    try {
        MatmulContext ctx;
        bool ok = true;
        // (N, IC, OC): 19 row chunks per column group of the bias gradient (first: its emulated race
        // check ends the run at the first race, test/test_emulation.py's bias-sum mutant), tiny,
        // ragged N, the paper model's layers, an LM head slice, GPT-2 small's fc
        const int shapes[][3] = {{2333, 64, 72},  {64, 64, 64},     {77, 192, 576},  {333, 192, 768},
                                 {512, 768, 192}, {130, 192, 2048}, {256, 768, 3072}};
        for (const auto& s : shapes) {
            const int N = s[0], IC = s[1], OC = s[2];
            ok &= check_forward(ctx, rng, N, IC, OC, true, false, true);
            ok &= check_forward(ctx, rng, N, IC, OC, false, false, true);
            ok &= check_forward(ctx, rng, N, IC, OC, true, true, true);
            ok &= check_forward(ctx, rng, N, IC, OC, true, true, false);
            ok &= check_forward(ctx, rng, N, IC, OC, false, true, true);
            ok &= check_backward(ctx, rng, N, IC, OC, true, true);
            ok &= check_backward(ctx, rng, N, IC, OC, false, false);
        }
        // operands inside a larger buffer, 16- but not 256-byte aligned (as in the parameter buffer)
        ok &= check_forward(ctx, rng, 333, 192, 768, true, true, true, true);
        ok &= check_forward(ctx, rng, 333, 192, 768, true, false, true, true);
        ok &= check_backward(ctx, rng, 333, 192, 768, true, true, true);
        ok &= check_gelu_backward(ctx, rng, 333, 192, 768);  // the paper model's fc (4C = 768)
        ok &= check_gelu_backward(ctx, rng, 2333, 64, 72);   // 19 row chunks, a ragged column group
        // the erf GELU (never the epilogue, even when asked for) and layers without bias
        ok &= check_forward(ctx, rng, 333, 192, 768, true, true, true, false, llmc::Gelu::Erf);
        ok &= check_forward(ctx, rng, 77, 192, 576, false, true, true, true, llmc::Gelu::Erf);
        ok &= check_forward(ctx, rng, 64, 64, 64, true, true, false, false, llmc::Gelu::Erf);
        ok &= check_gelu_backward(ctx, rng, 333, 192, 768, llmc::Gelu::Erf, true);
        ok &= check_gelu_backward(ctx, rng, 2333, 64, 72, llmc::Gelu::Erf, true);
        ok &= check_gelu_backward(ctx, rng, 333, 192, 768, llmc::Gelu::Erf, false);
        ok &= check_gelu_backward(ctx, rng, 77, 64, 72, llmc::Gelu::Tanh, false);
        // the bias gradient's edges: fewer rows than a block's row threads (1, 5, 31, 33), one chunk
        // exactly (128), one pack (OC 8), several column groups and a ragged one (136 = 2 x 64 + 8)
        const int bias_edges[][3] = {{1, 8, 8}, {5, 8, 8}, {31, 64, 8}, {33, 64, 16}, {128, 8, 64}, {129, 8, 136}};
        for (const auto& s : bias_edges) {
            ok &= check_backward(ctx, rng, s[0], s[1], s[2], true, true);
            ok &= check_gelu_backward(ctx, rng, s[0], s[1], s[2], llmc::Gelu::Tanh, true);
            ok &= check_gelu_backward(ctx, rng, s[0], s[1], s[2], llmc::Gelu::Erf, true);
        }
        // a row block sums several row chunks: the grid rule on the host; the kernel with fewer row blocks
        // than chunks forced (19 chunks, the last ragged, over 1, 4 or 7 row blocks: 19, 5 or 4, 3 or 2
        // chunks a block), three column groups in bf16 (five in fp32), the last ragged (8 columns), in each path
        ok &= check_bias_row_rule();
        {
            const llmc::Gelu tanh_kind = llmc::Gelu::Tanh, erf_kind = llmc::Gelu::Erf;
            for (int Y : {1, 4, 7}) {
                ok &= check_bias_sum(rng, 2333, 136, nullptr, Y);
                ok &= check_bias_sum(rng, 2333, 136, &erf_kind, Y);
            }
            ok &= check_bias_sum(rng, 2333, 136, &tanh_kind, 4);
        }
        ok &= check_gelu_formula(ctx, true);
        ok &= check_gelu_formula(ctx, false);
        ok &= check_gelu_formula(ctx, true, llmc::Gelu::Erf);
        ok &= check_gelu_formula(ctx, false, llmc::Gelu::Erf);
        for (llmc::Gelu kind : {llmc::Gelu::Tanh, llmc::Gelu::Erf})
            for (bool with_dbias : {true, false}) ok &= check_gelu_backward_formula(ctx, kind, with_dbias);
        ok &= check_rejects(ctx);
        std::printf("%s\n", ok ? "matmul: all checks passed" : "matmul: FAILED");
        if (args.check || !ok) return ok ? 0 : 1;

        // ---- timing: GPT-2 124M (N = 8*1024) and the paper model (N = 8*2048) layer shapes ----
        std::vector<Timing> rows;
        const int tshapes[][4] = {// N, IC, OC, gelu
                                  {8192, 768, 2304, 0}, {8192, 768, 768, 0},   {8192, 768, 3072, 1},
                                  {8192, 3072, 768, 0}, {8192, 768, 50304, 0}, {16384, 192, 576, 0},
                                  {16384, 192, 768, 1}, {16384, 768, 192, 0},  {16384, 192, 10112, 0}};
        for (const auto& s : tshapes) {
            const int N = s[0], IC = s[1], OC = s[2];
            const bool gelu = s[3] != 0;
            auto inp = lab::upload_as<floatX>(lab::random_normal(rng, (size_t)N * IC, 0.f, 1.f));
            auto w = lab::upload_as<floatX>(lab::random_normal(rng, (size_t)OC * IC, 0.f, 0.02f));
            auto b = lab::upload_as<floatX>(lab::random_normal(rng, OC, 0.f, 0.02f));
            auto dout = lab::upload_as<floatX>(lab::random_normal(rng, (size_t)N * OC, 0.f, 1.f));
            DeviceBuffer<floatX> out((size_t)N * OC), pre((size_t)N * OC), dinp((size_t)N * IC);
            DeviceBuffer<float> dw((size_t)OC * IC, true), db(OC, true);
            DeviceBuffer<float> scratch(llmc::cuda::matmul_backward_scratch_floats(N, OC));
            DeviceBuffer<uint32_t> arrivals(llmc::cuda::matmul_backward_arrivals(OC), true);
            const std::string shape =
                "N=" + std::to_string(N) + " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC);
            const double f = 2.0 * N * IC * OC;
            const bool bias = OC != 50304 && OC != 10112;  // LM heads have no bias
            rows.push_back({"forward", shape,
                            lab::time_ms(
                                [&] {
                                    llmc::cuda::matmul_forward(ctx, out.get(), inp.get(), w.get(),
                                                               bias ? b.get() : nullptr, N, IC, OC, 0);
                                },
                                args.reps),
                            f});
            if (gelu) {
                const bool default_fuse = ctx.fuse_gelu;
                ctx.fuse_gelu = true;
                rows.push_back({"forward+gelu (epilogue)", shape,
                                lab::time_ms(
                                    [&] {
                                        llmc::cuda::matmul_forward(ctx, out.get(), inp.get(), w.get(), b.get(), N, IC,
                                                                   OC, 0, pre.get());
                                    },
                                    args.reps),
                                f});
                if (!ctx.last_gelu_fused) rows.back().kernel = "forward+gelu (no epilogue!)";
                rows.push_back({"forward+gelu erf (kernel)", shape,
                                lab::time_ms(
                                    [&] {
                                        llmc::cuda::matmul_forward(ctx, out.get(), inp.get(), w.get(), b.get(), N, IC,
                                                                   OC, 0, pre.get(), llmc::Gelu::Erf);
                                    },
                                    args.reps),
                                f});
                ctx.fuse_gelu = false;
                rows.push_back({"forward+gelu (kernel)", shape,
                                lab::time_ms(
                                    [&] {
                                        llmc::cuda::matmul_forward(ctx, out.get(), inp.get(), w.get(), b.get(), N, IC,
                                                                   OC, 0, pre.get());
                                    },
                                    args.reps),
                                f});
                ctx.fuse_gelu = default_fuse;
            }
            rows.push_back({"backward (dinp+dweight+dbias)", shape,
                            lab::time_ms(
                                [&] {
                                    llmc::cuda::matmul_backward(ctx, dinp.get(), dw.get(), bias ? db.get() : nullptr,
                                                                scratch.get(), arrivals.get(), dout.get(), inp.get(),
                                                                w.get(), N, IC, OC, 0);
                                },
                                args.reps),
                            2 * f});
            // the fc layer's backward as the trainer runs it: GELU backward in the bias pass (in place: each
            // rep multiplies dout by gelu'(pre) again, |gelu'| <= 1.13, so the values drift but stay finite
            // over the reps; the time does not depend on them)
            if (gelu)
                rows.push_back({"gelu backward + backward", shape,
                                lab::time_ms(
                                    [&] {
                                        llmc::cuda::matmul_gelu_backward(ctx, dinp.get(), dw.get(), db.get(),
                                                                         scratch.get(), arrivals.get(), dout.get(),
                                                                         pre.get(), inp.get(), w.get(), N, IC, OC, 0);
                                    },
                                    args.reps),
                                2 * f});
            // without bias (--bias 0): the GELU backward in its own launch, then the products
            if (gelu)
                rows.push_back({"gelu erf backward + backward, no bias", shape,
                                lab::time_ms(
                                    [&] {
                                        llmc::cuda::matmul_gelu_backward(ctx, dinp.get(), dw.get(), nullptr, nullptr,
                                                                         nullptr, dout.get(), pre.get(), inp.get(),
                                                                         w.get(), N, IC, OC, 0, llmc::Gelu::Erf);
                                    },
                                    args.reps),
                                2 * f});
        }
        const double peak = bf16_peak_tflops(prop.name);
        std::printf("\n%-32s %-26s %9s %9s %8s\n", "kernel", "shape", "ms", "TFLOP/s",
                    llmc::cuda::kPrecisionName[0] == 'b' ? "% peak" : "");
        for (const Timing& r : rows) {
            const double tf = r.flops / (r.ms * 1e-3) / 1e12;
            std::printf("%-32s %-26s %9.4f %9.1f", r.kernel.c_str(), r.shape.c_str(), r.ms, tf);
            if (peak > 0 && llmc::cuda::kPrecisionName[0] == 'b') std::printf(" %7.1f%%", 100.0 * tf / peak);
            std::printf("\n");
        }
        if (peak > 0) std::printf("(dense bf16 tensor-core peak of %s: %.0f TFLOP/s)\n", prop.name, peak);
        else std::printf("(no bf16 peak known for %s)\n", prop.name);
        if (!args.json.empty()) {
            FILE* f = std::fopen(args.json.c_str(), "w");
            if (!f) {
                std::fprintf(stderr, "matmul: cannot write %s\n", args.json.c_str());
                return 1;
            }
            std::fprintf(f, "{\"device\": \"%s\", \"precision\": \"%s\", \"peak_tflops\": %.1f, \"rows\": [", prop.name,
                         llmc::cuda::kPrecisionName, peak);
            for (size_t i = 0; i < rows.size(); i++)
                std::fprintf(f, "%s\n  {\"kernel\": \"%s\", \"shape\": \"%s\", \"ms\": %.6f, \"tflops\": %.2f}",
                             i ? "," : "", rows[i].kernel.c_str(), rows[i].shape.c_str(), rows[i].ms,
                             rows[i].flops / (rows[i].ms * 1e-3) / 1e12);
            std::fprintf(f, "\n]}\n");
            std::fclose(f);
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "matmul: error: %s\n", e.what());
        return 1;
    }
}
