// The emulation is not blind: small kernels that each break one rule of the device, run by
// test/test_emulation.py, which expects the emulated build to refuse each one with the right
// message (and the correct kernels to pass). Run emulated only (build/emu/self/emu_faults); nvcc
// compiles it too, for its kernels' static shared memory (dev/emu/static_smem_table.py), so the
// device code here must be CUDA.
//   emu_faults MODE      MODE as listed in main(); exit 0 = the kernel ran and its result is right
// The shuffle semantics mode checks __shfl*_sync against the CUDA C++ Programming Guide's
// definitions ("Warp Shuffle Functions"), computed here on the host.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"

using llmc::cuda::launch_kernel;

// The kernels have external linkage (a named namespace): the emulation names a kernel by its symbol.
namespace emu_faults {

// ---- correct kernels ----------------------------------------------------------------------------
// Block sum through shared memory with barriers, then a warp-shuffle tree: out[b] = sum of in[b*n..].
__global__ void block_sum_kernel(float* out, const float* in, int n) {
    __shared__ float part[256];
    const float* x = in + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = 0.0f;
        for (int i = threadIdx.x; i < (int)blockDim.x; i += 32) v += part[i];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) out[blockIdx.x] = v;
    }
}

// out[lane * 4 + k] = the four shuffles of `lane * 10 + 1` with the given width and argument.
__global__ void shuffles_kernel(int* out, int width, int arg) {
    const int lane = threadIdx.x;
    const int v = lane * 10 + 1;
    out[lane * 4 + 0] = __shfl_sync(0xffffffffu, v, arg, width);
    out[lane * 4 + 1] = __shfl_xor_sync(0xffffffffu, v, arg, width);
    out[lane * 4 + 2] = __shfl_up_sync(0xffffffffu, v, (unsigned)arg, width);
    out[lane * 4 + 3] = __shfl_down_sync(0xffffffffu, v, (unsigned)arg, width);
}

// ---- broken kernels -----------------------------------------------------------------------------
// Reads a neighbour's shared value without a barrier between the write and the read.
__global__ void missing_barrier_kernel(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = s[(threadIdx.x + 1) % 64];  // needs __syncthreads() before this line
}
// Every block writes its index to the same word: the result is whichever block runs last, which a
// GPU does not promise (the emulation's block order follows the schedule).
__global__ void last_writer_kernel(float* out) {
    if (threadIdx.x == 0) out[0] = (float)blockIdx.x;
}
// Half the block returns before a barrier the other half waits at.
__global__ void divergent_barrier_kernel(float* out) {
    if (threadIdx.x < 16) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
// Half the warp returns; the other half shuffles with a full mask.
__global__ void warp_deadlock_kernel(float* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
// Lanes disagree on the mask.
__global__ void mask_mismatch_kernel(float* out) {
    const unsigned mask = threadIdx.x == 3 ? 0x0000ffffu : 0xffffffffu;
    if (threadIdx.x < 16 || mask == 0xffffffffu) out[threadIdx.x] = __shfl_xor_sync(mask, 1.0f, 1);
}
__global__ void plain_kernel(float* out) { out[threadIdx.x] = 1.0f; }
__global__ void dynamic_smem_kernel(float* out, int n) {
    LLMC_DYNAMIC_SHARED(float, buf);
    buf[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = buf[(threadIdx.x + 1) % n];
}
// 16 bytes of static shared memory beside the dynamic buffer, as the FA2-class kernels' grid-arrival
// ticket: the two count together against the launch's limit. out[t] = 3 for n = blockDim.x.
__global__ void static_and_dynamic_smem_kernel(float* out, int n) {
    __shared__ float ticket[4];
    LLMC_DYNAMIC_SHARED(float, buf);
    if (threadIdx.x < 4) ticket[threadIdx.x] = 1.0f;
    buf[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = buf[(threadIdx.x + 1) % n] + ticket[threadIdx.x % 4];
}
__global__ void misaligned_int4_kernel(int* out, const int* in) {
    const int4 v = *reinterpret_cast<const int4*>(in + 1);  // 4 bytes past a 16-byte boundary
    out[threadIdx.x] = v.x;
}
__global__ void oob_global_kernel(float* out, int n) { out[n + threadIdx.x] = 1.0f; }  // past the end
__global__ void oob_static_shared_kernel(float* out) {
    __shared__ float s[32];
    s[threadIdx.x + 1] = 1.0f;  // thread 31 writes s[32]
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
__global__ void oob_dynamic_shared_kernel(float* out, int n) {
    LLMC_DYNAMIC_SHARED(float, buf);
    buf[threadIdx.x + n] = 1.0f;  // one launch's smem holds n floats
    __syncthreads();
    out[threadIdx.x] = 0.0f;
}

}  // namespace emu_faults

namespace {
using namespace emu_faults;

float* dev_floats(size_t n) {
    float* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
    return p;
}

int shuffle_semantics() {
    int* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, 128 * sizeof(int)));
    int bad = 0;
    for (int width : {32, 16, 8, 4}) {
        for (int arg : {0, 1, 2, 5, 31}) {
            launch_kernel(shuffles_kernel, 1, 32, 0, 0, d, width, arg);
            CUDA_CHECK(cudaGetLastError());
            int out[128];
            CUDA_CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
            for (int lane = 0; lane < 32; lane++) {
                auto val = [](int l) { return l * 10 + 1; };
                const int base = lane / width * width;  // the Programming Guide's subsection of `width` lanes
                const int idx = base + arg % width;
                const int x = lane ^ arg;
                const int xr = x < base + width ? val(x) : val(lane);  // "a later group: own value"
                const int up = lane - arg >= base ? val(lane - arg) : val(lane);
                const int down = lane + arg < base + width ? val(lane + arg) : val(lane);
                const int want[4] = {val(idx), xr, up, down};
                for (int k = 0; k < 4; k++)
                    if (out[lane * 4 + k] != want[k] && bad++ < 10)
                        std::printf("  width %d arg %d lane %d op %d: got %d, want %d\n", width, arg, lane, k,
                                    out[lane * 4 + k], want[k]);
            }
        }
    }
    CUDA_CHECK(cudaFree(d));
    std::printf("shuffle semantics: %s (%d mismatches)\n", bad ? "FAIL" : "OK", bad);
    return bad ? 1 : 0;
}

int block_sum() {
    const int blocks = 5, n = 1000;
    std::vector<float> h((size_t)blocks * n);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)(i % 17);  // small integers: exact sums
    float *in = dev_floats(h.size()), *out = dev_floats(blocks);
    CUDA_CHECK(cudaMemcpy(in, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    launch_kernel(block_sum_kernel, blocks, 256, 0, 0, out, in, n);
    CUDA_CHECK(cudaGetLastError());
    float got[blocks];
    CUDA_CHECK(cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int b = 0; b < blocks; b++) {
        float want = 0.0f;
        for (int i = 0; i < n; i++) want += h[(size_t)b * n + i];
        bad += got[b] != want;
    }
    std::printf("block sum: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}

// Launches with a configuration the device refuses: the launch must not run and cudaGetLastError
// must name it (exit 3 when it did not, so the test tells "refused" from "missed").
int expect_refused(dim3 grid, dim3 block, size_t smem, cudaError_t want) {
    float* out = dev_floats(4096);
    CUDA_CHECK(cudaMemset(out, 0, 4096 * 4));
    if (smem) launch_kernel(dynamic_smem_kernel, grid, block, smem, 0, out, 1);
    else launch_kernel(plain_kernel, grid, block, 0, 0, out);
    const cudaError_t e = cudaGetLastError();
    float first = -1.0f;
    CUDA_CHECK(cudaMemcpy(&first, out, 4, cudaMemcpyDeviceToHost));
    std::printf("launch grid (%u,%u,%u) block (%u,%u,%u) smem %zu: %s, kernel %s\n", grid.x, grid.y, grid.z, block.x,
                block.y, block.z, smem, cudaGetErrorString(e), first == 0.0f ? "did not run" : "RAN");
    return e == want && first == 0.0f ? 0 : 3;
}

// static_and_dynamic_smem_kernel (16 static bytes) launched with `dynamic` bytes after an opt-in of
// `optin` bytes (0: none). The CUDA Runtime API: without the opt-in static + dynamic <= 48 KB; the
// opt-in itself fails when static + optin exceeds cudaDevAttrMaxSharedMemoryPerBlockOptin (227 KB).
// Prints what happened; exit 0 when it is `want_run` (ran with the right result, or refused with
// cudaErrorInvalidValue and not run), 3 otherwise.
int static_plus_dynamic(size_t dynamic, int optin, bool want_run) {
    float* out = dev_floats(32);
    CUDA_CHECK(cudaMemset(out, 0, 32 * sizeof(float)));
    if (optin) {
        const cudaError_t e =
            cudaFuncSetAttribute(static_and_dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
        std::printf("opt-in to %d bytes beside 16 static: %s\n", optin, cudaGetErrorString(e));
        if (e != cudaSuccess) return want_run || e != cudaErrorInvalidValue ? 3 : 0;
    }
    launch_kernel(static_and_dynamic_smem_kernel, 1, 32, dynamic, 0, out, 32);
    const cudaError_t e = cudaGetLastError();
    float v[32];
    CUDA_CHECK(cudaMemcpy(v, out, sizeof v, cudaMemcpyDeviceToHost));
    bool right = true;
    for (float x : v) right = right && x == 3.0f;
    std::printf("16 static + %zu dynamic bytes%s: %s, kernel %s\n", dynamic, optin ? " after the opt-in" : "",
                cudaGetErrorString(e),
                v[0] == 0.0f ? "did not run"
                : right      ? "ran, result OK"
                             : "ran, result WRONG");
    if (want_run) return e == cudaSuccess && right ? 0 : 3;
    return e == cudaErrorInvalidValue && v[0] == 0.0f ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    float* out = dev_floats(4096);
    if (mode == "ok") return block_sum();
    if (mode == "shuffle-semantics") return shuffle_semantics();
    if (mode == "missing-barrier") launch_kernel(missing_barrier_kernel, 2, 64, 0, 0, out);
    else if (mode == "block-order") launch_kernel(last_writer_kernel, 4, 32, 0, 0, out);
    else if (mode == "divergent-barrier") launch_kernel(divergent_barrier_kernel, 1, 64, 0, 0, out);
    else if (mode == "warp-deadlock") launch_kernel(warp_deadlock_kernel, 1, 32, 0, 0, out);
    else if (mode == "mask-mismatch") launch_kernel(mask_mismatch_kernel, 1, 32, 0, 0, out);
    else if (mode == "too-many-threads") return expect_refused(1, 1025, 0, cudaErrorInvalidConfiguration);
    else if (mode == "block-z") return expect_refused(1, dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration);
    else if (mode == "grid-y") return expect_refused(dim3(1, 65536), 32, 0, cudaErrorInvalidConfiguration);
    else if (mode == "smem-no-optin") return expect_refused(1, 32, 64 * 1024, cudaErrorInvalidValue);
    else if (mode == "smem-optin") {
        CUDA_CHECK(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
        launch_kernel(dynamic_smem_kernel, 1, 32, 64 * 1024, 0, out, 32);
        CUDA_CHECK(cudaGetLastError());
        float v = 0.0f;
        CUDA_CHECK(cudaMemcpy(&v, out, 4, cudaMemcpyDeviceToHost));
        std::printf("64 KB of dynamic shared memory after opt-in: %s\n", v == 2.0f ? "OK" : "FAIL");
        return v == 2.0f ? 0 : 1;
    } else if (mode == "smem-optin-too-big") {
        const cudaError_t e =
            cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024);
        std::printf("opt-in to 228 KB: %s\n", cudaGetErrorString(e));
        return e == cudaErrorInvalidValue ? 0 : 3;
    } else if (mode == "smem-static-plus-dynamic") return static_plus_dynamic(48 * 1024, 0, false);
    else if (mode == "smem-static-plus-dynamic-fits") return static_plus_dynamic(48 * 1024 - 16, 0, true);
    else if (mode == "smem-static-optin") return static_plus_dynamic(48 * 1024, 48 * 1024, true);
    else if (mode == "smem-static-optin-too-big") return static_plus_dynamic(48 * 1024, 227 * 1024, false);
    else if (mode == "smem-static-optin-max") return static_plus_dynamic(227 * 1024 - 16, 227 * 1024 - 16, true);
    else if (mode == "misaligned-int4") {
        int* in = nullptr;
        CUDA_CHECK(cudaMalloc(&in, 64 * sizeof(int)));
        CUDA_CHECK(cudaMemset(in, 0, 64 * sizeof(int)));
        launch_kernel(misaligned_int4_kernel, 1, 1, 0, 0, reinterpret_cast<int*>(out), in);
    } else if (mode == "oob-global") launch_kernel(oob_global_kernel, 1, 32, 0, 0, out, 4096 - 16);
    else if (mode == "oob-static-shared") launch_kernel(oob_static_shared_kernel, 1, 32, 0, 0, out);
    else if (mode == "oob-dynamic-shared")
        launch_kernel(oob_dynamic_shared_kernel, 1, 32, 32 * sizeof(float), 0, out, 8);
    else if (mode == "bad-copy") {
        std::vector<float> h(8);
        const cudaError_t e = cudaMemcpy(h.data(), out, 8 * sizeof(float), cudaMemcpyHostToDevice);  // kinds swapped
        const cudaError_t e2 =
            cudaMemcpy(h.data(), out + 4090, 8 * sizeof(float), cudaMemcpyDeviceToHost);  // past the end
        std::printf("swapped kind: %s; past the end: %s\n", cudaGetErrorString(e), cudaGetErrorString(e2));
        return e == cudaErrorInvalidValue && e2 == cudaErrorInvalidValue ? 0 : 3;
    } else {
        std::fprintf(
            stderr,
            "usage: emu_faults ok|shuffle-semantics|missing-barrier|block-order|divergent-barrier|warp-deadlock|"
            "mask-mismatch|too-many-threads|block-z|grid-y|smem-no-optin|smem-optin|"
            "smem-optin-too-big|smem-static-plus-dynamic|smem-static-plus-dynamic-fits|smem-static-optin|"
            "smem-static-optin-too-big|smem-static-optin-max|misaligned-int4|oob-global|oob-static-shared|oob-dynamic-shared|bad-copy\n");
        return 2;
    }
    CUDA_CHECK(cudaGetLastError());
    std::printf("%s: the broken kernel ran to the end unnoticed\n", mode.c_str());
    return 0;
}
