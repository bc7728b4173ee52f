// The CUDA backend as the programs see it: seven functions, defined in llmc/cuda/backend_entry.cu,
// which nvcc (or the emulated build) compiles once per precision into an object that every program
// links. The programs' own translation units then hold no kernels, so the trainer, its USE_MPI x
// USE_NCCL variants and the generator share one compilation of the device code instead of one each.
// Plain C++: no CUDA header is needed to include it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "llmc/core/backend.h"
#include "llmc/core/model_config.h"

namespace llmc::cuda_backend {

// Creates the CUDA context on the current GPU (so that a memory baseline taken next includes it).
void create_context();

// Makes GPU `device` current for this thread (the process's one GPU: its rank on the node).
void use_device(int device);

// The CudaBackend of llmc/cuda/gpt2_cuda.cuh on the current GPU, its weights drawn from `seed`.
std::unique_ptr<Backend> create(const ModelConfig& model, uint64_t seed);

// Bytes of device memory in use on the current GPU (by anything: context, other processes).
size_t device_memory_in_use();

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB, bf16)" for the current GPU.
std::string device_description();

// "bf16" or "fp32": the precision the object was compiled for (PRECISION=BF16|FP32).
const char* precision_name();

// Whether the attention kernels soft-cap with tanh.approx.f32 (the BF16 build's FA2-class kernels)
// rather than tanhf (llmc/cuda/attention_ls.cuh, attention_caps_with_tanh_approx).
bool softcap_uses_tanh_approx();

}  // namespace llmc::cuda_backend
