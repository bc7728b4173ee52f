// Programmatic dependent launch, alone: griddep_wait / griddep_launch_dependents (llmc/cuda/ptx.cuh)
// and the programmatic LaunchStream of launch_kernel (llmc/cuda/launch.cuh). What it must do is
// transcribed from NVIDIA's PTX ISA ("griddepcontrol") and the CUDA Runtime API
// (cudaLaunchAttributeProgrammaticStreamSerialization), not from the kernels or the emulation:
//   - a grid launched with programmatic stream serialization that executes griddepcontrol.wait sees
//     every write of the kernel before it on the stream, also when that kernel lets it be scheduled
//     early (griddepcontrol.launch_dependents as its first statement) and is slow to write;
//   - a third programmatic grid sees the first grid's writes too (the second, which waits, cannot
//     complete before the first);
//   - the same inside a captured CUDA graph, replayed.
// Each round writes other values, so a read of the previous round's data fails the check. On a GPU
// an informative fourth part launches a consumer without the wait and counts the stale values it
// read (how much the grids overlapped; not a pass condition: a race may or may not show). Runs on a
// GPU (sm_90+, else SKIPPED) and under emulation, where every grid runs to its end before the next
// and a thread without the wait is refused (dev/emu/tests/emu_ptx_faults.cu). Exit 0 = pass, 1 = fail.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"
#include "test/gpu/gpu_test_util.cuh"

namespace griddep_test {

using llmc::cuda::LaunchStream;

constexpr int kBlocks = 264, kThreads = 256;  // two blocks an SM of an H100/H200
constexpr int kPerThread = 4;
constexpr int kN = kBlocks * kThreads * kPerThread;

__host__ __device__ inline uint32_t value(uint32_t i, uint32_t round) { return i * 2654435761u ^ round; }

// Lets the next grid be scheduled at once, then spins `spin` rounds before it writes buf[i] =
// value(i, round): a slow producer whose dependents start early. Launched in stream order.
__global__ void slow_producer_kernel(uint32_t* buf, int spin, uint32_t round) {
    llmc::cuda::griddep_launch_dependents();
    float acc = (float)threadIdx.x;
    for (int k = 0; k < spin; k++) acc = acc * 0.999f + 1.0f;
    const int base = (blockIdx.x * kThreads + threadIdx.x) * kPerThread;
    for (int j = 0; j < kPerThread; j++) buf[base + j] = value((uint32_t)(base + j), round) + (acc < -1.0f ? 1u : 0u);
}

// out[i] = buf[i] + 1, after waiting for the previous grid (launched programmatic).
__global__ void consumer_kernel(uint32_t* out, const uint32_t* buf) {
    llmc::cuda::griddep_begin();
    const int base = (blockIdx.x * kThreads + threadIdx.x) * kPerThread;
    for (int j = 0; j < kPerThread; j++) out[base + j] = buf[base + j] + 1u;
}

// out2[i] = buf[i] ^ out[i], after waiting for the previous grid (launched programmatic).
__global__ void second_consumer_kernel(uint32_t* out2, const uint32_t* buf, const uint32_t* out) {
    llmc::cuda::griddep_begin();
    const int base = (blockIdx.x * kThreads + threadIdx.x) * kPerThread;
    for (int j = 0; j < kPerThread; j++) out2[base + j] = buf[base + j] ^ out[base + j];
}

// out[i] = buf[i] + 1 without the wait: the early read the wait exists for (GPU only, informative).
__global__ void racy_consumer_kernel(uint32_t* out, const uint32_t* buf) {
    const int base = (blockIdx.x * kThreads + threadIdx.x) * kPerThread;
    for (int j = 0; j < kPerThread; j++) out[base + j] = buf[base + j] + 1u;
}

struct Buffers {
    uint32_t *buf = nullptr, *out = nullptr, *out2 = nullptr;
};

// The three grids of one round on `st`.
void issue_round(const Buffers& b, int spin, uint32_t round, cudaStream_t st) {
    llmc::cuda::launch_kernel(slow_producer_kernel, kBlocks, kThreads, 0, st, b.buf, spin, round);
    llmc::cuda::launch_kernel(consumer_kernel, kBlocks, kThreads, 0, LaunchStream(st, true), b.out, b.buf);
    llmc::cuda::launch_kernel(second_consumer_kernel, kBlocks, kThreads, 0, LaunchStream(st, true), b.out2, b.buf,
                              b.out);
    CUDA_CHECK(cudaGetLastError());
}

// Elements of out / out2 that are not what the round's producer implies.
int wrong_values(const Buffers& b, uint32_t round, int* wrong2) {
    std::vector<uint32_t> out(kN), out2(kN);
    CUDA_CHECK(cudaMemcpy(out.data(), b.out, kN * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(out2.data(), b.out2, kN * 4, cudaMemcpyDeviceToHost));
    int wrong = 0;
    *wrong2 = 0;
    for (int i = 0; i < kN; i++) {
        const uint32_t v = value((uint32_t)i, round);
        wrong += out[i] != v + 1u;
        *wrong2 += out2[i] != (v ^ (v + 1u));
    }
    return wrong;
}

}  // namespace griddep_test

int main() {
    using namespace griddep_test;
    if (!gpu_test::have_gpu("test_griddep")) return 1;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 9) return gpu_test::skip("test_griddep", "programmatic dependent launch needs sm_90+");
    const bool emulated = std::strstr(prop.name, "(emulated)") != nullptr;
    const int spin = emulated ? 1 : 20000;  // ~tens of microseconds a thread on a GPU
    std::printf("test_griddep: griddepcontrol.wait / launch_dependents with programmatic stream serialization\n");
    const unsigned seed = std::random_device{}();
    std::printf("  seed %u, %d elements, producer spin %d\n", seed, kN, spin);
    gpu_test::Checks c;
    Buffers b;
    CUDA_CHECK(cudaMalloc(&b.buf, kN * 4));
    CUDA_CHECK(cudaMalloc(&b.out, kN * 4));
    CUDA_CHECK(cudaMalloc(&b.out2, kN * 4));
    CUDA_CHECK(cudaMemset(b.buf, 0, kN * 4));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    uint32_t round = seed | 1u;
    for (int r = 0; r < 3; r++, round += 0x9E3779B9u) {  // stream order, kernel by kernel
        issue_round(b, spin, round, st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        int wrong2 = 0;
        const int wrong = wrong_values(b, round, &wrong2);
        c.expect(wrong == 0, "stream round %d: the waiting consumer read the producer's writes (%d of %d wrong)", r,
                 wrong, kN);
        c.expect(wrong2 == 0, "stream round %d: the third grid read the first grid's writes (%d of %d wrong)", r,
                 wrong2, kN);
    }
    // the same three grids captured into a graph (programmatic edges), replayed with the round's value
    // fixed at capture: each replay after other writes to buf must again read this round's values
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    issue_round(b, spin, round, st);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < 2; r++) {
        CUDA_CHECK(cudaMemsetAsync(b.buf, 0xA5, kN * 4, st));
        CUDA_CHECK(cudaMemsetAsync(b.out, 0, kN * 4, st));
        CUDA_CHECK(cudaMemsetAsync(b.out2, 0, kN * 4, st));
        CUDA_CHECK(cudaGraphLaunch(exec, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        int wrong2 = 0;
        const int wrong = wrong_values(b, round, &wrong2);
        c.expect(wrong == 0 && wrong2 == 0, "graph replay %d: both consumers read the producer's writes (%d, %d wrong)",
                 r, wrong, wrong2);
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    if (!emulated) {
        round += 0x9E3779B9u;
        llmc::cuda::launch_kernel(slow_producer_kernel, kBlocks, kThreads, 0, st, b.buf, spin, round);
        llmc::cuda::launch_kernel(racy_consumer_kernel, kBlocks, kThreads, 0, LaunchStream(st, true), b.out, b.buf);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaStreamSynchronize(st));
        int wrong2 = 0;
        const int stale = wrong_values(b, round, &wrong2);
        std::printf(
            "  info: a consumer without the wait read %d of %d values before the producer wrote them "
            "(how far the grids overlapped; not a pass condition)\n",
            stale, kN);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
    CUDA_CHECK(cudaFree(b.buf));
    CUDA_CHECK(cudaFree(b.out));
    CUDA_CHECK(cudaFree(b.out2));
    std::printf("test_griddep: %s\n", c.failures ? "FAIL" : "OK");
    return c.failures ? 1 : 0;
}
