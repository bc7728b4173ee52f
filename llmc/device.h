// Choosing the compute device from --device auto|cpu|cuda and the number of CUDA devices found
// (train_gpt2_ls.cu asks the CUDA runtime; this file needs no GPU and no CUDA headers).
#pragma once
#include <string>

#include "error.h"

namespace llmc {

enum class Device { Cpu, Cuda };

// True once the CUDA backend (llmc/cuda/, issue 5) is part of the binary.
constexpr bool kCudaBackendBuilt = false;

// requested: "auto", "cpu" or "cuda"; gpu_count: CUDA devices present. Sets *notice to a one-line
// message when auto falls back to the CPU. Throws InputError for an impossible request.
inline Device resolve_device(const std::string& requested, int gpu_count, std::string* notice) {
    if (requested == "cpu") return Device::Cpu;
    if (requested == "cuda") {
        if (!kCudaBackendBuilt) throw InputError("the CUDA backend is not built yet (issue 5); use --device cpu");
        if (gpu_count < 1) throw InputError("--device cuda: no CUDA device found; use --device cpu");
        return Device::Cuda;
    }
    if (requested == "auto") {
        if (gpu_count > 0 && kCudaBackendBuilt) return Device::Cuda;
        if (notice)
            *notice = gpu_count > 0 ? "note: a GPU is present but the CUDA backend is not built yet (issue 5); running on the CPU"
                                    : "note: no CUDA device found; running on the CPU";
        return Device::Cpu;
    }
    throw InputError("unknown --device '" + requested + "'; use auto, cpu or cuda");
}

}  // namespace llmc
