// GPU smoke test: a device is present, a kernel runs, and its result comes back exact.
// Later GPU tests (kernels vs the CPU reference) live beside this file.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "llmc/cuda/launch.cuh"

__global__ void axpy_kernel(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

#define CHECK(call)                                                                         \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "test_device: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

int main() {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    if (count == 0) {
        fprintf(stderr, "test_device: no CUDA device; run on a GPU machine\n");
        return 1;
    }
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s (sm_%d%d, %.1f GiB)\n", prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0);
    const int n = 1 << 20;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; i++) {
        x[i] = (float)(i % 1000);
        y[i] = (float)(i % 7);
    }
    float *dx, *dy;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    llmc::cuda::launch_kernel(axpy_kernel, (n + 255) / 256, 256, 0, 0, dy, dx, 2.0f, n);
    CHECK(cudaGetLastError());
    std::vector<float> out(n, -1.0f);
    CHECK(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += out[i] != y[i] + 2.0f * x[i];  // exact in fp32 for these values
    cudaFree(dx);
    cudaFree(dy);
    if (bad) {
        fprintf(stderr, "test_device: %d of %d elements wrong\n", bad, n);
        return 1;
    }
    printf("test_device: OK (%d elements exact)\n", n);
    return 0;
}
