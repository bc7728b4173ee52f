// The host side of the CUDA backend that needs no CUDA compiler: the error check of a runtime call
// (CUDA_CHECK) and an owning device buffer. Host code compiled by the C++ compiler (the programs'
// NCCL collective, llmc/cuda/collective_nccl.cuh) includes this instead of llmc/cuda/common.cuh.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

namespace llmc::cuda {

// A CUDA failure is not a user error: it throws std::runtime_error naming the call and place.
inline void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(e) + " in " + what + " at " + file +
                                 ":" + std::to_string(line));
}
#define CUDA_CHECK(call) ::llmc::cuda::cuda_check((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches launch-configuration errors (not asynchronous faults).
#define CUDA_CHECK_LAUNCH() ::llmc::cuda::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// Owning device allocation of n elements of T (move-only). Zero-initialized on request.
template <typename T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t n, bool zero = false) { resize(n, zero); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) {
        o.ptr_ = nullptr;
        o.n_ = 0;
    }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = o.ptr_;
            n_ = o.n_;
            o.ptr_ = nullptr;
            o.n_ = 0;
        }
        return *this;
    }
    void resize(size_t n, bool zero = false) {
        release();
        if (n > 0) CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
        n_ = n;
        if (zero && n > 0) CUDA_CHECK(cudaMemset(ptr_, 0, n * sizeof(T)));
    }
    T* get() const { return ptr_; }
    T* data() const { return ptr_; }  // as std::vector names it (llmc/core/layer_acts.h reads both)
    size_t size() const { return n_; }
    size_t bytes() const { return n_ * sizeof(T); }

private:
    void release() {
        if (ptr_) cudaFree(ptr_);
        ptr_ = nullptr;
        n_ = 0;
    }
    T* ptr_ = nullptr;
    size_t n_ = 0;
};

// Owning page-locked host allocation of n elements of T (move-free): what an asynchronous device-to-host
// copy may target without blocking the host. resize() discards the contents; the caller makes sure no
// queued copy still targets the old allocation (cudaFreeHost would wait for it).
template <typename T>
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    ~PinnedBuffer() { release(); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    void resize(size_t n) {
        release();
        if (n > 0) CUDA_CHECK(cudaMallocHost(&ptr_, n * sizeof(T)));
        n_ = n;
    }
    T* get() const { return ptr_; }
    size_t size() const { return n_; }

private:
    void release() {
        if (ptr_) cudaFreeHost(ptr_);
        ptr_ = nullptr;
        n_ = 0;
    }
    T* ptr_ = nullptr;
    size_t n_ = 0;
};

}  // namespace llmc::cuda
