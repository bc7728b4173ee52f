// The CUDA backend as the programs see it: nine functions, defined in llmc/cuda/backend_entry.cu,
// which nvcc (or the emulated build) compiles once per precision into an object that every program
// links. The programs' own translation units then hold no kernels, so the trainer, its USE_MPI x
// USE_NCCL variants and the generator share one compilation of the device code instead of one each.
// Plain C++: no CUDA header is needed to include it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/core/backend.h"
#include "llmc/core/kernel_profile.h"
#include "llmc/core/model_config.h"

namespace llmc::cuda_backend {

// Creates the CUDA context on the current GPU (so that a memory baseline taken next includes it).
void create_context();

// Makes GPU `device` current for this thread (the process's one GPU: its rank on the node).
void use_device(int device);

// The CudaBackend of llmc/cuda/gpt2_cuda.cuh on the current GPU, its weights drawn from `seed`.
std::unique_ptr<Backend> create(const ModelConfig& model, uint64_t seed);

// The profiler of --profile-steps on the current GPU (llmc/cuda/kernel_profiler.cuh: CUPTI; launch counts
// on the emulated device), counting the cuBLASLt calls of `backend` (a CUDA backend). InputError when
// CUPTI cannot be opened, naming `flag`, the option that asked for the profile.
std::unique_ptr<StepProfiler> create_step_profiler(const Backend& backend, const std::string& flag);

// Bytes of device memory in use on the current GPU (by anything: context, other processes).
size_t device_memory_in_use();

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB, bf16)" for the current GPU.
std::string device_description();

// "bf16" or "fp32": the precision the object was compiled for (PRECISION=BF16|FP32).
const char* precision_name();

// Whether the attention kernels soft-cap with tanh.approx.f32 (the BF16 build's FA2-class kernels)
// rather than tanhf (llmc/cuda/attention_ls.cuh, attention_caps_with_tanh_approx).
bool softcap_uses_tanh_approx();

// The KV cache of a backend made by create(), copied to the host as fp32 (test/gpu/test_cuda_generate.cu
// compares it with the CPU's): the positions cached so far and the four buffers in their device layout
// (llmc/cuda/attention_decode.cuh, KvCacheView: global (L, B, G, max_len, hd), local (L, B, NH-G,
// ring, hd)); empty buffers before kv_begin. std::invalid_argument for a backend of another kind.
struct KvCacheContents {
    int position = 0, hd = 0, ring = 0, max_len = 0;
    std::vector<float> k_global, v_global, k_local, v_local;
};
KvCacheContents kv_cache_contents(const Backend& backend);

}  // namespace llmc::cuda_backend
