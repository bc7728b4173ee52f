// The harness of the single-instruction GPU tests (test_ex2_approx, test_tanh_approx): one float
// in, one float out, one thread per element.
#pragma once
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"

namespace gpu_test {

// Runs kernel(d, a, n) on the device (128 threads per block, one element per thread) over the
// inputs a and returns d.
template <typename Kernel>
std::vector<float> run_elementwise(Kernel kernel, const std::vector<float>& a) {
    const int n = (int)a.size();
    float *da = nullptr, *dd = nullptr;
    CUDA_CHECK(cudaMalloc(&da, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dd, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    llmc::cuda::launch_kernel(kernel, (unsigned)((n + 127) / 128), 128, 0, 0, dd, da, n);
    CUDA_CHECK_LAUNCH();
    std::vector<float> d(n);
    CUDA_CHECK(cudaMemcpy(d.data(), dd, n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(da));
    CUDA_CHECK(cudaFree(dd));
    return d;
}

}  // namespace gpu_test
