// Device emulation, the CUDA runtime C API subset the project uses, defined against NVIDIA's own
// declarations (cuda_runtime_api.h), so an emulated binary links this instead of libcudart.
// Semantics follow the CUDA Runtime API reference: streams and events complete in issue order
// (every call is synchronous here), copies are checked against the kind they name and the bounds of
// the allocation (a GPU faults or returns cudaErrorInvalidValue), errors are returned and
// remembered for cudaGetLastError. An H100 SXM 80GB (sm_90); LLMC_EMU_DEVICE_COUNT of them (default
// 1), all sharing one memory pool (device_state.h), the current device kept per host thread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include <cuda_runtime_api.h>

#include "dev/emu/device_state.h"

using llmc::emu::device;

namespace {

cudaError_t fail(cudaError_t e, const std::string& why) {
    std::fprintf(stderr, "emulated CUDA runtime: %s\n", why.c_str());
    device().last_error = e;
    return e;
}

struct EmuEvent {
    std::chrono::steady_clock::time_point t;
    bool recorded = false;
};
struct EmuStream {
    int id;
};

// The current device of this host thread (cudaSetDevice), as in the runtime: 0 until set.
thread_local int current_device = 0;

cudaError_t check_device(int d, const char* call) {
    const int n = device().device_count;
    if (d < 0 || d >= n)
        return fail(cudaErrorInvalidDevice, std::string(call) + "(" + std::to_string(d) + "): the emulation has " +
                                                std::to_string(n) + " device" + (n == 1 ? "" : "s") +
                                                " (LLMC_EMU_DEVICE_COUNT)");
    return cudaSuccess;
}

// What a copy's pointer must be for its kind: device (inside one allocation) or host.
cudaError_t check_side(const void* p, size_t n, bool want_device, const char* what, const char* call) {
    auto& d = device();
    if (want_device) {
        if (!d.device_range(p, n))
            return fail(cudaErrorInvalidValue, std::string(call) + ": " + what + " " +
                                                   (d.is_device(p) ? "range runs past the end of its allocation"
                                                                   : "is not device memory from cudaMalloc"));
    } else if (d.is_device(p)) {
        return fail(cudaErrorInvalidValue,
                    std::string(call) + ": " + what + " is device memory but the copy kind says host");
    }
    return cudaSuccess;
}

// synchronous: cudaMemcpy (counted as a host synchronisation when a side is host memory, per the
// Runtime API's "API synchronization behavior"); otherwise cudaMemcpyAsync.
cudaError_t do_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* call, bool synchronous) {
    if (n == 0) return cudaSuccess;
    std::lock_guard<std::mutex> lock(device().mu);
    auto& d = device();
    bool dst_dev = false, src_dev = false;
    switch (kind) {
        case cudaMemcpyHostToHost: break;
        case cudaMemcpyHostToDevice: dst_dev = true; break;
        case cudaMemcpyDeviceToHost: src_dev = true; break;
        case cudaMemcpyDeviceToDevice: dst_dev = src_dev = true; break;
        case cudaMemcpyDefault:
            dst_dev = d.is_device(dst);
            src_dev = d.is_device(src);
            break;
        default: return fail(cudaErrorInvalidMemcpyDirection, std::string(call) + ": unknown copy kind");
    }
    if (cudaError_t e = check_side(dst, n, dst_dev, "destination", call)) return e;
    if (cudaError_t e = check_side(src, n, src_dev, "source", call)) return e;
    std::memmove(dst, src, n);
    const void* host_side = !dst_dev ? dst : !src_dev ? src : nullptr;
    const auto* pinned = host_side ? d.find(host_side) : nullptr;
    static const char* const kDirection[2][2] = {{"HtoH", "HtoD"}, {"DtoH", "DtoD"}};  // [src_dev][dst_dev]
    d.counters.copy(kDirection[src_dev][dst_dev], n, synchronous, host_side && !pinned);
    return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
    if (!p) return fail(cudaErrorInvalidValue, "cudaMalloc: null pointer argument");
    if (bytes == 0) {
        *p = nullptr;
        return cudaSuccess;
    }
    // 256-byte aligned like the real allocator; exact size so that AddressSanitizer sees overruns
    void* m = ::operator new(bytes, std::align_val_t(256), std::nothrow);
    if (!m)
        return fail(cudaErrorMemoryAllocation,
                    "cudaMalloc: out of (host) memory for " + std::to_string(bytes) + " bytes");
    std::memset(m, 0xFF, bytes);  // NaN in float and bf16: reading memory nothing wrote shows up
    std::lock_guard<std::mutex> lock(device().mu);
    device().allocs[reinterpret_cast<uintptr_t>(m)] = {bytes, false, current_device};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;  // also the idiom that creates the context
    std::lock_guard<std::mutex> lock(device().mu);
    auto& a = device().allocs;
    auto it = a.find(reinterpret_cast<uintptr_t>(p));
    if (it == a.end() || it->second.host_pinned)
        return fail(cudaErrorInvalidValue, "cudaFree: pointer was not returned by cudaMalloc (or was freed already)");
    a.erase(it);
    ::operator delete(p, std::align_val_t(256));
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
    void* m = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t(256), std::nothrow);
    if (!m) return fail(cudaErrorMemoryAllocation, "cudaMallocHost: out of memory");
    std::lock_guard<std::mutex> lock(device().mu);
    device().allocs[reinterpret_cast<uintptr_t>(m)] = {bytes, true, current_device};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> lock(device().mu);
    auto& a = device().allocs;
    auto it = a.find(reinterpret_cast<uintptr_t>(p));
    if (it == a.end() || !it->second.host_pinned)
        return fail(cudaErrorInvalidValue, "cudaFreeHost: not from cudaMallocHost");
    a.erase(it);
    ::operator delete(p, std::align_val_t(256));
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    return do_copy(dst, src, n, kind, "cudaMemcpy", true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t) {
    return do_copy(dst, src, n, kind, "cudaMemcpyAsync", false);
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
    if (n == 0) return cudaSuccess;
    std::lock_guard<std::mutex> lock(device().mu);
    if (cudaError_t e = check_side(p, n, true, "pointer", "cudaMemset")) return e;
    std::memset(p, value, n);
    device().counters.memset(n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) { return cudaMemset(p, value, n); }

cudaError_t cudaStreamCreate(cudaStream_t* s) {
    static int next = 1;
    *s = reinterpret_cast<cudaStream_t>(new EmuStream{next++});
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete reinterpret_cast<EmuStream*>(s);
    return cudaSuccess;
}
// Every call has completed already (issue order, synchronous); the host synchronisations are counted
// for the per-step report (step_counters.h).
cudaError_t cudaStreamSynchronize(cudaStream_t) {
    device().counters.sync("cudaStreamSynchronize");
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    device().counters.sync("cudaDeviceSynchronize");
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
    *e = reinterpret_cast<cudaEvent_t>(new EmuEvent());
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete reinterpret_cast<EmuEvent*>(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    auto* ev = reinterpret_cast<EmuEvent*>(e);
    ev->t = std::chrono::steady_clock::now();
    ev->recorded = true;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
    device().counters.sync("cudaEventSynchronize");
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    auto *x = reinterpret_cast<EmuEvent*>(a), *y = reinterpret_cast<EmuEvent*>(b);
    if (!x->recorded || !y->recorded)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event not recorded");
    *ms = std::chrono::duration<float, std::milli>(y->t - x->t).count();
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    const cudaError_t e = device().last_error;
    device().last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return device().last_error; }

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        default: return "unknown error (emulated runtime)";
    }
}
const char* cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }

cudaError_t cudaGetDeviceCount(int* n) {
    *n = device().device_count;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
    *d = current_device;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    if (cudaError_t e = check_device(d, "cudaSetDevice")) return e;
    current_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (cudaError_t e = check_device(d, "cudaGetDeviceProperties")) return e;
    std::memset(p, 0, sizeof *p);
    std::snprintf(p->name, sizeof p->name, "NVIDIA H100 80GB HBM3 (emulated)");
    p->totalGlobalMem = 80ull << 30;
    p->sharedMemPerBlock = llmc::emu::kSharedDefault;
    p->sharedMemPerBlockOptin = llmc::emu::kSharedOptinMax;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = llmc::emu::kSmCount;
    p->l2CacheSize = 50 << 20;
    p->memoryBusWidth = 5120;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int d) {
    if (cudaError_t e = check_device(d, "cudaDeviceGetAttribute")) return e;
    switch (attr) {
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)llmc::emu::kSharedOptinMax; return cudaSuccess;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)llmc::emu::kSharedDefault; return cudaSuccess;
        case cudaDevAttrMultiProcessorCount: *v = llmc::emu::kSmCount; return cudaSuccess;
        case cudaDevAttrComputeCapabilityMajor: *v = 9; return cudaSuccess;
        case cudaDevAttrComputeCapabilityMinor: *v = 0; return cudaSuccess;
        case cudaDevAttrMemoryClockRate: *v = 2619000; return cudaSuccess;  // kHz (H100 SXM HBM3)
        case cudaDevAttrGlobalMemoryBusWidth: *v = 5120; return cudaSuccess;
        case cudaDevAttrL2CacheSize: *v = 50 << 20; return cudaSuccess;
        case cudaDevAttrMaxThreadsPerBlock: *v = 1024; return cudaSuccess;
        case cudaDevAttrWarpSize: *v = 32; return cudaSuccess;
        case cudaDevAttrClockRate: *v = 1980000; return cudaSuccess;
        default:
            return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string((int)attr) +
                                                   " is not emulated; add it to dev/emu/runtime.cpp");
    }
}

cudaError_t cudaFuncSetAttribute(const void* fn, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > llmc::emu::kSharedOptinMax)
            return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: MaxDynamicSharedMemorySize " +
                                                   std::to_string(value) + " above the device's 227 KB opt-in limit");
        device().max_dynamic_smem[fn] = value;
        return cudaSuccess;
    }
    return cudaSuccess;  // other attributes are hints (carveout, ...)
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
    std::lock_guard<std::mutex> lock(device().mu);
    std::memset(a, 0, sizeof *a);
    const auto* al = device().find(p);
    a->type = !al ? cudaMemoryTypeUnregistered : al->second.host_pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    a->device = al ? al->second.device : current_device;
    a->devicePointer = al && !al->second.host_pinned ? const_cast<void*>(p) : nullptr;
    a->hostPointer = !al || al->second.host_pinned ? const_cast<void*>(p) : nullptr;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    std::lock_guard<std::mutex> lock(device().mu);
    size_t used = 0;
    for (auto& [p, a] : device().allocs)
        if (!a.host_pinned) used += a.bytes;
    *total = 80ull << 30;
    *free_bytes = *total - std::min(used, *total);
    return cudaSuccess;
}

}  // extern "C"
