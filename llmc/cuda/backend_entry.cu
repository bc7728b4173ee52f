// The definitions of llmc/cuda/backend_entry.h: the one translation unit that compiles the CUDA
// kernels for the programs (the Makefile's $(BUILD)/cuda_backend.o, linked into train_gpt2_ls, its
// build matrix and generate_gpt2_ls; $(EMU_DIR)/cuda_backend.o in the emulated build).
#include "llmc/cuda/backend_entry.h"

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/device_info.cuh"
#include "llmc/cuda/gpt2_cuda.cuh"

namespace llmc::cuda_backend {

void create_context() { CUDA_CHECK(cudaFree(nullptr)); }

void use_device(int device) { CUDA_CHECK(cudaSetDevice(device)); }

std::unique_ptr<Backend> create(const ModelConfig& model, uint64_t seed) {
    return cuda::make_cuda_backend(model, seed);
}

size_t device_memory_in_use() { return cuda::device_memory_in_use(); }

std::string device_description() { return cuda::cuda_device_description(); }

const char* precision_name() { return cuda::kPrecisionName; }

bool softcap_uses_tanh_approx() { return cuda::attention_caps_with_tanh_approx(cuda::attention_default_kernel()); }

}  // namespace llmc::cuda_backend
