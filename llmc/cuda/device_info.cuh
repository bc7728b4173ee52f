// What the trainer reports about the GPU: its name and compute capability, the peak dense bf16
// tensor-core rate (for MFU, looked up from the device name as llm.c does), and memory in use.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/device_peak.h"  // bf16_peak_flops_for

namespace llmc::cuda {

struct DeviceInfo {
    std::string name;
    int sm_major = 0, sm_minor = 0;
    int multiprocessors = 0;
    size_t total_memory = 0;  // bytes
};

// The current device's properties.
inline DeviceInfo current_device_info() {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    DeviceInfo d;
    d.name = prop.name;
    d.sm_major = prop.major;
    d.sm_minor = prop.minor;
    d.multiprocessors = prop.multiProcessorCount;
    d.total_memory = prop.totalGlobalMem;
    return d;
}

// Bytes of device memory in use on the current device (by every process: total - free), as llm.c reports.
inline size_t device_memory_in_use() {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

// One line for logs: "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB, bf16)".
inline std::string describe_device(const DeviceInfo& d) {
    char buf[320];
    std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %d SMs, %.1f GiB, %s)", d.name.c_str(), d.sm_major, d.sm_minor,
                  d.multiprocessors, d.total_memory / 1073741824.0, kPrecisionName);
    return buf;
}

}  // namespace llmc::cuda
