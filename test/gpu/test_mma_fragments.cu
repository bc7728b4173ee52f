// The tensor-core instruction behind the LS-attention kernels, alone:
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32  (llmc::cuda::mma_bf16_16816, llmc/cuda/ptx.cuh)
// One warp builds its fragments of A (16x16), B (16x8) and C (16x8) from matrices in global memory
// using the fragment layout exactly as NVIDIA's PTX ISA states it (section "Matrix Fragments for
// mma.m16n8k16 with floating point type"; the formulas are transcribed below, not taken from the
// kernels or from the emulation), runs the instruction, and scatters its fragment of D back by the
// same layout. D must equal A * B + C computed on the host:
//   - small integers: every product and sum is exact in fp32, so D must match bit for bit whatever
//     the accumulation order (a wrong fragment index moves an element and cannot pass);
//   - random normals: relative error within fp32 accumulation bounds.
// Runs on a GPU (the hardware is the arbiter of this reading of the ISA) and under emulation
// (where it checks dev/emu/mma.h). Exit 0 = pass, 1 = fail.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"

// A named namespace: the kernel needs external linkage for the emulation to find its static shared
// memory by symbol (dev/emu/static_smem.h).
namespace mma_fragments {

// The PTX ISA's layout for m16n8k16 with .bf16 A/B and .f32 C/D (groupID = %laneid >> 2,
// threadID_in_group = %laneid % 4). i indexes the elements a0..a7, b0..b3, c0..c3 of one thread.
__host__ __device__ int isa_a_row(int lane, int i) {
    const int groupID = lane >> 2;
    return ((0 <= i && i < 2) || (4 <= i && i < 6)) ? groupID : groupID + 8;
}
__host__ __device__ int isa_a_col(int lane, int i) {
    const int threadID_in_group = lane % 4;
    return i < 4 ? (threadID_in_group * 2) + (i & 0x1) : (threadID_in_group * 2) + (i & 0x1) + 8;
}
__host__ __device__ int isa_b_row(int lane, int i) {
    const int threadID_in_group = lane % 4;
    return i < 2 ? (threadID_in_group * 2) + (i & 0x1) : (threadID_in_group * 2) + (i & 0x1) + 8;
}
__host__ __device__ int isa_b_col(int lane, int) { return lane >> 2; }
__host__ __device__ int isa_c_row(int lane, int i) { return i < 2 ? (lane >> 2) : (lane >> 2) + 8; }
__host__ __device__ int isa_c_col(int lane, int i) { return ((lane % 4) * 2) + (i & 0x1); }

__device__ uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {  // the lower-indexed element in bits 0..15
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return (uint32_t)l | ((uint32_t)h << 16);
}

// A (16,16) row-major, B (16,8) as B[k][n] row-major, C, D (16,8) row-major. One warp.
__global__ void mma_kernel(float* D, const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C) {
    const int lane = threadIdx.x;
    __nv_bfloat16 a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = A[isa_a_row(lane, i) * 16 + isa_a_col(lane, i)];
    for (int i = 0; i < 4; i++) b[i] = B[isa_b_row(lane, i) * 8 + isa_b_col(lane, i)];
    uint32_t ra[4] = {pack(a[0], a[1]), pack(a[2], a[3]), pack(a[4], a[5]), pack(a[6], a[7])};
    float c[4];
    for (int i = 0; i < 4; i++) c[i] = C[isa_c_row(lane, i) * 8 + isa_c_col(lane, i)];
    llmc::cuda::mma_bf16_16816(c, ra, pack(b[0], b[1]), pack(b[2], b[3]));
    for (int i = 0; i < 4; i++) D[isa_c_row(lane, i) * 8 + isa_c_col(lane, i)] = c[i];
}

#define CK(call) llmc::cuda::cuda_check((call), #call, __FILE__, __LINE__)

// Returns the number of failed elements for one case.
int run_case(const char* name, bool integers, std::mt19937& gen) {
    std::vector<__nv_bfloat16> A(256), B(128);
    std::vector<float> Af(256), Bf(128), C(128), D(128), ref(128);
    std::uniform_int_distribution<int> small(-8, 8);
    std::normal_distribution<float> nd;
    for (int i = 0; i < 256; i++) {
        A[i] = __float2bfloat16(integers ? (float)small(gen) : nd(gen));
        Af[i] = __bfloat162float(A[i]);
    }
    for (int i = 0; i < 128; i++) {
        B[i] = __float2bfloat16(integers ? (float)small(gen) : nd(gen));
        Bf[i] = __bfloat162float(B[i]);
        C[i] = integers ? (float)small(gen) * 4.0f : nd(gen);
    }
    double scale = 0.0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            double s = C[r * 8 + n], mag = std::fabs(C[r * 8 + n]);
            for (int k = 0; k < 16; k++) {
                s += (double)Af[r * 16 + k] * Bf[k * 8 + n];
                mag += std::fabs((double)Af[r * 16 + k] * Bf[k * 8 + n]);
            }
            ref[r * 8 + n] = (float)s;
            scale = std::max(scale, mag);
        }
    __nv_bfloat16 *dA, *dB;
    float *dC, *dD;
    CK(cudaMalloc(&dA, 256 * sizeof(__nv_bfloat16)));
    CK(cudaMalloc(&dB, 128 * sizeof(__nv_bfloat16)));
    CK(cudaMalloc(&dC, 128 * sizeof(float)));
    CK(cudaMalloc(&dD, 128 * sizeof(float)));
    CK(cudaMemcpy(dA, A.data(), 256 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), 128 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C.data(), 128 * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemset(dD, 0xFF, 128 * sizeof(float)));  // NaN: an element no lane wrote fails
    llmc::cuda::launch_kernel(mma_kernel, 1, 32, 0, 0, dD, dA, dB, dC);
    CK(cudaGetLastError());
    CK(cudaMemcpy(D.data(), dD, 128 * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    CK(cudaFree(dD));
    int bad = 0;
    double worst = 0.0;
    for (int i = 0; i < 128; i++) {
        const double err = std::fabs((double)D[i] - ref[i]);
        const bool ok = integers ? D[i] == ref[i] : err <= 1e-6 * scale;  // 16 fp32 additions: ~1e-6 of the magnitude
        if (!ok && bad++ < 5) std::printf("    D[%d][%d] = %.9g, expected %.9g\n", i / 8, i % 8, D[i], ref[i]);
        if (std::isfinite(err)) worst = std::max(worst, err / std::max(scale, 1e-30));
        else worst = INFINITY;
    }
    std::printf("  %-34s %s: %d of 128 elements wrong, worst |err| / magnitude %.2e\n", name, bad ? "FAIL" : "ok  ",
                bad, worst);
    return bad;
}

}  // namespace mma_fragments

using namespace mma_fragments;

int main() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        std::fprintf(stderr, "test_mma_fragments: no CUDA device; run on a GPU machine or the emulated build\n");
        return 1;
    }
    std::mt19937 gen(std::random_device{}());
    std::printf("test_mma_fragments: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, fragments per the PTX ISA\n");
    int bad = 0;
    for (int rep = 0; rep < 3; rep++) bad += run_case("small integers (exact)", true, gen);
    for (int rep = 0; rep < 3; rep++) bad += run_case("random normals", false, gen);
    std::printf("test_mma_fragments: %s\n", bad ? "FAIL" : "OK");
    return bad ? 1 : 0;
}
