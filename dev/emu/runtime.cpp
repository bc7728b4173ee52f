// Device emulation, the CUDA runtime C API subset the project uses, defined against NVIDIA's own
// declarations (cuda_runtime_api.h), so an emulated binary links this instead of libcudart.
// Semantics follow the CUDA Runtime API reference: streams and events complete in issue order
// (every call is synchronous here, except work captured for a graph: below), copies are checked
// against the kind they name and the bounds of
// the allocation (a GPU faults or returns cudaErrorInvalidValue), errors are returned and
// remembered for cudaGetLastError. An H100 SXM 80GB (sm_90); LLMC_EMU_DEVICE_COUNT of them (default
// 1), all sharing one memory pool (device_state.h), the current device kept per host thread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>

#include <cuda_runtime_api.h>

#include "dev/emu/device_state.h"
#include "dev/emu/static_smem.h"

using llmc::emu::device;

namespace {

cudaError_t fail(cudaError_t e, const std::string& why) {
    std::fprintf(stderr, "emulated CUDA runtime: %s\n", why.c_str());
    device().last_error = e;
    return e;
}

// A call that stream capture does not permit (cudaStreamCaptureModeGlobal: synchronising,
// allocating or freeing, synchronous copies and memsets): while any stream captures, it fails with
// cudaErrorStreamCaptureUnsupported and invalidates the captures. cudaSuccess otherwise.
cudaError_t refuse_in_capture(const char* call) {
    if (!device().invalidate_captures(call)) return cudaSuccess;
    return fail(cudaErrorStreamCaptureUnsupported,
                std::string(call) + ": not permitted while a stream captures (the capture is now invalidated)");
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
    if (synchronous)
        if (cudaError_t e = refuse_in_capture(call)) return e;
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
    if (cudaError_t e = refuse_in_capture("cudaMalloc")) return e;
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
    if (cudaError_t e = refuse_in_capture("cudaFree")) return e;
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
    if (cudaError_t e = refuse_in_capture("cudaMallocHost")) return e;
    void* m = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t(256), std::nothrow);
    if (!m) return fail(cudaErrorMemoryAllocation, "cudaMallocHost: out of memory");
    std::lock_guard<std::mutex> lock(device().mu);
    device().allocs[reinterpret_cast<uintptr_t>(m)] = {bytes, true, current_device};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
    if (cudaError_t e = refuse_in_capture("cudaFreeHost")) return e;
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
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    if (device().legacy_work_in_capture(s, "cudaMemcpyAsync"))
        return fail(cudaErrorStreamCaptureImplicit,
                    "cudaMemcpyAsync on the legacy default stream while a stream captures");
    if (llmc::emu::Capture* c = device().capture_of(s)) {  // a copy node: it copies when the graph runs
        if (n == 0) return cudaSuccess;
        const bool dst_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ||
                              (kind == cudaMemcpyDefault && !device().is_device(dst));
        const bool src_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost ||
                              (kind == cudaMemcpyDefault && !device().is_device(src));
        for (const auto& [host, p] : {std::make_pair(dst_host, (const void*)dst), std::make_pair(src_host, src)}) {
            if (!host) continue;
            const auto* a = device().find(p);
            if (!a || !a->second.host_pinned)
                return fail(cudaErrorInvalidValue,
                            "cudaMemcpyAsync in a capture: the host side is not page-locked "
                            "(cudaMallocHost); a graph reads it when it runs");
        }
        c->work.push_back([=] {
            if (do_copy(dst, src, n, kind, "cudaMemcpyAsync (graph)", false) != cudaSuccess)
                llmc::emu::device_fault("a captured cudaMemcpyAsync failed when its graph ran");
        });
        return cudaSuccess;
    }
    return do_copy(dst, src, n, kind, "cudaMemcpyAsync", false);
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
    if (cudaError_t e = refuse_in_capture("cudaMemset")) return e;
    if (n == 0) return cudaSuccess;
    std::lock_guard<std::mutex> lock(device().mu);
    if (cudaError_t e = check_side(p, n, true, "pointer", "cudaMemset")) return e;
    std::memset(p, value, n);
    device().counters.memset(n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
    if (device().legacy_work_in_capture(s, "cudaMemsetAsync"))
        return fail(cudaErrorStreamCaptureImplicit,
                    "cudaMemsetAsync on the legacy default stream while a stream captures");
    if (llmc::emu::Capture* c = device().capture_of(s)) {  // a memset node
        c->work.push_back([=] {
            if (cudaMemset(p, value, n) != cudaSuccess)
                llmc::emu::device_fault("a captured cudaMemsetAsync failed when its graph ran");
        });
        return cudaSuccess;
    }
    return cudaMemset(p, value, n);
}

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
    if (cudaError_t e = refuse_in_capture("cudaStreamSynchronize")) return e;
    device().counters.sync("cudaStreamSynchronize");
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    if (cudaError_t e = refuse_in_capture("cudaDeviceSynchronize")) return e;
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
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    auto* ev = reinterpret_cast<EmuEvent*>(e);
    if (device().capture_of(s) || device().legacy_work_in_capture(s, "cudaEventRecord"))
        return fail(cudaErrorStreamCaptureUnsupported,
                    "cudaEventRecord in a capture: the emulation does not model events inside a graph (in CUDA they "
                    "order streams within it); record the event after cudaGraphLaunch");
    ev->t = std::chrono::steady_clock::now();
    ev->recorded = true;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
    if (cudaError_t e = refuse_in_capture("cudaEventSynchronize")) return e;
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

// ---- stream capture and graphs (Runtime API reference: "Stream Management", "Graph Management") ----
// While a stream captures, the work pushed into it is not executed but recorded in issue order
// (DeviceState::capture_of): kernel launches with their arguments' values (grid.cpp), copies and
// memsets (above), cuBLASLt matmuls with their host scalars' values (cublaslt.cpp). Work for the
// legacy default stream meanwhile fails (cudaErrorStreamCaptureImplicit) and invalidates the capture.
// cudaStreamEndCapture makes the record a graph, cudaGraphInstantiate an executable copy of it, and
// cudaGraphLaunch runs that copy's work in order, all of it again at every launch; a captured copy
// reads its source when the graph runs. Calls that capture does not permit (refuse_in_capture) fail
// and invalidate the capture: cudaStreamEndCapture then returns no graph and
// cudaErrorStreamCaptureInvalidated. This emulation's own rules: only cudaStreamCaptureModeGlobal,
// the host side of a captured copy must be page-locked (a graph reads it when it runs), no event is
// recorded in a capture (CUDA uses them to order streams inside a graph, which is not modelled), a
// graph is launched on a stream that is not capturing, and NCCL calls are not captured
// (dev/emu/nccl.cpp).
}  // extern "C"
struct CUgraph_st {
    std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> work;
};
extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
        return fail(cudaErrorStreamCaptureUnsupported,
                    "cudaStreamBeginCapture: not on a default stream; capture a stream from cudaStreamCreate");
    if (mode != cudaStreamCaptureModeGlobal)
        return fail(cudaErrorInvalidValue,
                    "cudaStreamBeginCapture: the emulation supports cudaStreamCaptureModeGlobal only");
    if (device().capture_of(s))
        return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is capturing already");
    device().begin_capture(s);
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
    if (!graph) return fail(cudaErrorInvalidValue, "cudaStreamEndCapture: null graph pointer");
    llmc::emu::Capture c;
    if (!device().end_capture(s, &c))
        return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
    if (!c.invalidated.empty()) {
        *graph = nullptr;
        return fail(cudaErrorStreamCaptureInvalidated,
                    "cudaStreamEndCapture: the capture was invalidated by " + c.invalidated);
    }
    *graph = new CUgraph_st{std::move(c.work)};
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
    if (!status) return fail(cudaErrorInvalidValue, "cudaStreamIsCapturing: null status pointer");
    const llmc::emu::Capture* c = device().capture_of(s);
    *status = !c                       ? cudaStreamCaptureStatusNone
              : c->invalidated.empty() ? cudaStreamCaptureStatusActive
                                       : cudaStreamCaptureStatusInvalidated;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    if (!exec || !graph) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: null argument");
    *exec = new CUgraphExec_st{graph->work};
    device().counters.graph_instantiation();
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!exec) return fail(cudaErrorInvalidValue, "cudaGraphLaunch: null executable graph");
    if (device().capture_of(s))
        return fail(cudaErrorStreamCaptureUnsupported,
                    "cudaGraphLaunch: the emulation does not capture a graph launch");
    device().counters.graph_launch();
    for (const auto& w : exec->work) w();
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
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
        case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureImplicit:
            return "operation would make the legacy stream depend on a capturing blocking stream";
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
        // "The sum of this value and the function attribute sharedSizeBytes cannot exceed the device
        // attribute cudaDevAttrMaxSharedMemoryPerBlockOptin" (CUDA Runtime API, cudaFuncSetAttribute)
        const llmc::emu::StaticSmemEntry* entry = llmc::emu::find_static_smem(fn);
        if (!entry) llmc::emu::no_static_smem_entry(fn, llmc::emu::kernel_name(fn));
        if (value < 0 || entry->bytes + (size_t)value > llmc::emu::kSharedOptinMax)
            return fail(cudaErrorInvalidValue,
                        "cudaFuncSetAttribute: MaxDynamicSharedMemorySize " + std::to_string(value) +
                            " + the kernel's " + std::to_string(entry->bytes) +
                            " bytes of static shared memory above the device's 227 KB opt-in limit (232448 bytes)");
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
