// What this binary was built with, and the factories the two mains build from: the CUDA devices
// present and the backend for a model (CpuBackend, or CudaBackend when the CUDA backend is compiled in);
// the collective for a launch (single process, MPI, NCCL) is llmc/app/launch_collective.h's. This is
// the one header of the programs that tests whether CUDA (LLMC_CUDA_BACKEND, llmc/app/device.h) was
// compiled in (MPI and NCCL: llmc/app/launch_collective.cpp); the mains call these functions and test
// nothing.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "llmc/app/device.h"  // LLMC_CUDA_BACKEND: nvcc, or the device emulation (docs/emulation.md)
#include "llmc/core/backend.h"
#include "llmc/core/error.h"
#include "llmc/core/kernel_profile.h"
#include "llmc/core/model_config.h"
#include "llmc/cpu/gpt2_cpu.h"
#ifdef LLMC_CUDA_BACKEND
#include <cuda_runtime.h>

#include "llmc/cuda/backend_entry.h"  // the kernels: compiled once, in llmc/cuda/backend_entry.cu
#endif

namespace llmc {

// Number of CUDA devices (0 without a GPU, a driver, or when built without the CUDA backend).
inline int cuda_device_count() {
#ifdef LLMC_CUDA_BACKEND
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" error
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

// --device for a known model on this machine (llmc/app/device.h resolve_device with the CUDA devices
// present). The note of an `auto` that stays on the CPU goes to stderr when print_note is set.
inline Device device_for_model(const std::string& requested, const ModelConfig& model, bool print_note) {
    std::string note;
    const Device d = resolve_device(requested, cuda_device_count(), model, &note);
    if (!note.empty() && print_note) std::fprintf(stderr, "%s\n", note.c_str());
    return d;
}

// The backend on `device`, its weights drawn from `seed` (llmc/core/init.h). CUDA: one GPU per
// process, GPU number local_rank (the process's rank on its node).
inline std::unique_ptr<Backend> make_backend(Device device, const ModelConfig& model, uint64_t seed, int local_rank) {
#ifdef LLMC_CUDA_BACKEND
    if (device == Device::Cuda) {
        const int gpus = cuda_device_count();
        if (local_rank >= gpus)
            throw InputError("local rank " + std::to_string(local_rank) + " has no GPU (" + std::to_string(gpus) +
                             " on this node); start at most one process per GPU");
        cuda_backend::use_device(local_rank);
        return cuda_backend::create(model, seed);
    }
#endif
    (void)device;
    (void)local_rank;
    return std::make_unique<CpuBackend>(model, seed);
}

// A per-kernel profiler for `backend` (llmc/cuda/kernel_profiler.cuh: CUPTI on a GPU, launch counts on
// the emulated device); InputError, naming the option that asked for it (`flag`), for a backend without
// kernels to time. make_step_profiler: the trainer's, for --profile-steps.
inline std::unique_ptr<StepProfiler> make_profiler(const Backend& backend, const std::string& flag) {
#ifdef LLMC_CUDA_BACKEND
    if (std::string(backend.name()) == "cuda") return cuda_backend::create_step_profiler(backend, flag);
#endif
    throw InputError(flag + " times GPU kernels; the " + backend.name() +
                     " backend has none: use --device cuda, or drop " + flag);
}
inline std::unique_ptr<StepProfiler> make_step_profiler(const Backend& backend) {
    return make_profiler(backend, "--profile-steps");
}

// What a benchmark reports about the device beside the backend's own numbers.
struct DeviceFacts {
    std::string name = "cpu";  // CUDA: "NVIDIA H100 ... (sm_90, 132 SMs, 79.1 GiB, bf16)"
    std::string precision = "fp32";
    size_t memory_baseline = 0;  // device memory in use before any model (CUDA context, other processes)
};

// Call before make_backend: on CUDA it creates the context on GPU 0, so the baseline includes it.
inline DeviceFacts device_facts(Device device) {
    DeviceFacts f;
#ifdef LLMC_CUDA_BACKEND
    if (device == Device::Cuda) {
        cuda_backend::create_context();
        f.memory_baseline = cuda_backend::device_memory_in_use();
        f.name = cuda_backend::device_description();
        f.precision = cuda_backend::precision_name();
    }
#endif
    (void)device;
    return f;
}

}  // namespace llmc
