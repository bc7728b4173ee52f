// Choosing the compute device from --device auto|cpu|cuda, the number of CUDA devices found
// (llmc/app/backends.h asks the CUDA runtime; tests inject any count) and, once the model is known,
// whether the CUDA backend can run it. This file needs no GPU and no CUDA headers.
//   auto: CUDA when a GPU is present, the binary has the CUDA backend and that backend supports the
//         model; otherwise the CPU, with a one-line note saying why.
//   cuda: CUDA, or an InputError naming what is missing.   cpu: the CPU.
#pragma once
#include <string>

#include "llmc/core/attention_tiles.h"  // cuda_head_size_supported
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"

namespace llmc {

enum class Device { Cpu, Cuda };

// LLMC_CUDA_BACKEND: the CUDA backend (llmc/cuda/) is part of the binary. The Makefile defines it
// for the programs it links with the separately compiled kernels (llmc/cuda/backend_entry.cu; the
// programs' own source is then host code, compiled by the host compiler); it also follows from nvcc
// and from the device emulation (-DLLMC_EMULATE, docs/emulation.md, where "CUDA" runs on the CPU).
// A plain host-compiler build (g++, e.g. the CPU tests, `make cpu`) has none. The programs test this
// one macro, never __CUDACC__ directly, in llmc/app/backends.h and llmc/app/launch_collective.cpp only.
#if !defined(LLMC_CUDA_BACKEND) && (defined(__CUDACC__) || defined(LLMC_EMULATE))
#define LLMC_CUDA_BACKEND 1
#endif
#ifdef LLMC_CUDA_BACKEND
constexpr bool kCudaBackendBuilt = true;
#else
constexpr bool kCudaBackendBuilt = false;
#endif

// requested: "auto", "cpu" or "cuda"; gpu_count: CUDA devices present; cuda_built: the binary has
// the CUDA backend (tests inject both). Sets *notice to a one-line message when auto falls back to
// the CPU. Throws InputError for an impossible request.
inline Device resolve_device(const std::string& requested, int gpu_count, std::string* notice,
                             bool cuda_built = kCudaBackendBuilt) {
    if (requested == "cpu") return Device::Cpu;
    if (requested == "cuda") {
        if (!cuda_built)
            throw InputError(
                "this build has no CUDA backend (compiled without nvcc); use --device cpu or build with nvcc");
        if (gpu_count < 1) throw InputError("--device cuda: no CUDA device found; use --device cpu");
        return Device::Cuda;
    }
    if (requested == "auto") {
        if (gpu_count > 0 && cuda_built) return Device::Cuda;
        // the reason, the build's first: a build without the backend never counts GPUs (gpu_count is 0)
        if (notice)
            *notice = !cuda_built ? std::string(gpu_count > 0 ? "note: a GPU is present but this" : "note: this") +
                                        " build has no CUDA backend (compiled without nvcc); running on the CPU"
                                  : "note: no CUDA device found; running on the CPU";
        return Device::Cpu;
    }
    throw InputError("unknown --device '" + requested + "'; use auto, cpu or cuda");
}

// Why the CUDA backend cannot run this model, or "" when it can. Every ModelConfig field is a decision
// of the CUDA backend: today it implements all of them (llmc/cuda/gpt2_cuda.cuh) at the head sizes below.
// A field added to ModelConfig changes its size and stops the build here until that decision is made:
// implemented on the GPU, or refused in this function; never silently ignored.
static_assert(sizeof(ModelConfig) == 48,
              "ModelConfig gained or lost a field: decide whether the CUDA backend runs it (refuse it here if "
              "not), then update this size");
// flags (optional): the flags that would change the refused setting, as messages write them. The
// kernels' own checks (llmc/cuda/attention_ls.cuh) state these limits in shape terms; this is
// where they become flag advice, before the run starts.
inline std::string cuda_model_unsupported_reason(const ModelConfig& m, std::string* flags = nullptr) {
    if (m.num_heads < 1 || m.channels % m.num_heads != 0) return "";  // validate_model_config reports it
    const int hd = m.channels / m.num_heads;
    if (!cuda_head_size_supported(hd)) {
        if (flags) *flags = "--channels/--heads";
        return "the CUDA backend supports head size 32, 64 or 128 and this model's is " + std::to_string(hd) +
               " (C=" + std::to_string(m.channels) + " / NH=" + std::to_string(m.num_heads) + ")";
    }
    if (m.max_seq_len > kCudaAttnMaxSeqLen) {
        if (flags) *flags = "--max-seq-len";
        return "the CUDA attention kernels take sequences up to " + std::to_string(kCudaAttnMaxSeqLen) +
               " tokens and this model's --max-seq-len is " + std::to_string(m.max_seq_len);
    }
    return "";
}

// The device for a known model: resolve_device, then a CUDA choice the backend cannot run falls back
// to the CPU under auto (with *notice saying why) and is refused under --device cuda.
inline Device resolve_device(const std::string& requested, int gpu_count, const ModelConfig& model, std::string* notice,
                             bool cuda_built = kCudaBackendBuilt) {
    const Device d = resolve_device(requested, gpu_count, notice, cuda_built);
    if (d != Device::Cuda) return d;
    std::string flags;
    const std::string why = cuda_model_unsupported_reason(model, &flags);
    if (why.empty()) return d;
    if (requested == "cuda") throw InputError("--device cuda: " + why + "; change " + flags + " or use --device cpu");
    if (notice) *notice = "note: a GPU is present but " + why + "; running on the CPU";
    return Device::Cpu;
}

}  // namespace llmc
