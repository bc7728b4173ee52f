// The definitions of llmc/cuda/backend_entry.h: the one translation unit that compiles the CUDA
// kernels for the programs (the Makefile's $(BUILD)/cuda_backend.o, linked into train_gpt2_ls, its
// build matrix and generate_gpt2_ls; $(EMU_DIR)/cuda_backend.o in the emulated build).
#include "llmc/cuda/backend_entry.h"

#include <stdexcept>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/device_info.cuh"
#include "llmc/cuda/gpt2_cuda.cuh"
#include "llmc/cuda/kernel_profiler.cuh"

namespace llmc::cuda_backend {

void create_context() { CUDA_CHECK(cudaFree(nullptr)); }

void use_device(int device) { CUDA_CHECK(cudaSetDevice(device)); }

std::unique_ptr<Backend> create(const ModelConfig& model, uint64_t seed) {
    return cuda::make_cuda_backend(model, seed);
}

std::unique_ptr<StepProfiler> create_step_profiler(const Backend& backend, const std::string& flag) {
    const auto* gpu = dynamic_cast<const cuda::CudaBackend*>(&backend);
    if (!gpu)
        throw std::invalid_argument("create_step_profiler: not a CUDA backend (" + std::string(backend.name()) + ")");
    return cuda::make_step_profiler(&gpu->matmul_context(), flag);
}

size_t device_memory_in_use() { return cuda::device_memory_in_use(); }

std::string device_description() { return cuda::cuda_device_description(); }

const char* precision_name() { return cuda::kPrecisionName; }

bool softcap_uses_tanh_approx() { return cuda::attention_caps_with_tanh_approx(); }

KvCacheContents kv_cache_contents(const Backend& backend) {
    const auto* gpu = dynamic_cast<const cuda::CudaBackend*>(&backend);
    if (!gpu)
        throw std::invalid_argument("kv_cache_contents: not a CUDA backend (" + std::string(backend.name()) + ")");
    const cuda::KvCacheView& v = gpu->kv_view();
    KvCacheContents c;
    c.position = gpu->kv_position();
    c.hd = v.hd, c.ring = v.ring, c.max_len = v.max_len;
    auto copy = [](const cuda::floatX* src, size_t n) {
        std::vector<cuda::floatX> h(src ? n : 0);
        if (!h.empty()) CUDA_CHECK(cudaMemcpy(h.data(), src, n * sizeof(cuda::floatX), cudaMemcpyDeviceToHost));
        std::vector<float> out(h.size());
        for (size_t i = 0; i < h.size(); i++) out[i] = cuda::to_float(h[i]);
        return out;
    };
    const size_t global = (size_t)v.L * v.B * v.G * v.max_len * v.hd;
    const size_t local = (size_t)v.L * v.B * (v.NH - v.G) * v.ring * v.hd;
    c.k_global = copy(v.k_global, global);
    c.v_global = copy(v.v_global, global);
    c.k_local = copy(v.k_local, local);
    c.v_local = copy(v.v_local, local);
    return c;
}

}  // namespace llmc::cuda_backend
