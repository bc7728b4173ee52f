// Choosing the compute device from --device auto|cpu|cuda and the number of CUDA devices found
// (train_gpt2_ls.cu asks the CUDA runtime; this file needs no GPU and no CUDA headers).
#pragma once
#include <string>

#include "error.h"

namespace llmc {

enum class Device { Cpu, Cuda };

// True when the CUDA backend (llmc/cuda/) is part of the binary: train_gpt2_ls.cu compiled by nvcc.
// A host-compiler build (g++, e.g. the CPU tests) has no CUDA backend.
#ifdef __CUDACC__
constexpr bool kCudaBackendBuilt = true;
#else
constexpr bool kCudaBackendBuilt = false;
#endif

// requested: "auto", "cpu" or "cuda"; gpu_count: CUDA devices present. Sets *notice to a one-line
// message when auto falls back to the CPU. Throws InputError for an impossible request.
inline Device resolve_device(const std::string& requested, int gpu_count, std::string* notice) {
    if (requested == "cpu") return Device::Cpu;
    if (requested == "cuda") {
        if (!kCudaBackendBuilt) throw InputError("this build has no CUDA backend (compiled without nvcc); use --device cpu or build with nvcc");
        if (gpu_count < 1) throw InputError("--device cuda: no CUDA device found; use --device cpu");
        return Device::Cuda;
    }
    if (requested == "auto") {
        if (gpu_count > 0 && kCudaBackendBuilt) return Device::Cuda;
        if (notice)
            *notice = gpu_count > 0 ? "note: a GPU is present but this build has no CUDA backend (compiled without nvcc); running on the CPU"
                                    : "note: no CUDA device found; running on the CPU";
        return Device::Cpu;
    }
    throw InputError("unknown --device '" + requested + "'; use auto, cpu or cuda");
}

}  // namespace llmc
