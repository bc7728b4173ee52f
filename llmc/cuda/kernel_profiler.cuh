// The device side of --profile-steps (llmc/core/kernel_profile.h folds and prints what it captures).
//
// GPU: CUPTI's activity API, the source PyTorch's profiler reads: every kernel (ours and cuBLASLt's
// own, by name), memcpy and memset the device ran, with its start and end on the device's clock.
// libcupti is opened at run time (dlopen), so a machine without it still runs the trainer and
// --profile-steps says in one line that it is missing. CUPTI hands its record buffers to two plain
// callbacks without a user pointer: they fill the one CuptiSink of the process (the only process-wide
// state of this file; one profiler at a time). Around each profiled step the device is synchronised
// and the window [begin, end] taken on CUPTI's clock (cuptiGetTimestamp, the records' time base):
// the step's wall time includes its launch gaps and host work, not the loop's validation or logging.
//
// Emulated device (make emu): no CUPTI and no time. The profile counts the launches the emulated
// runtime saw in each step (dev/emu/step_counters.h's running totals), cuBLASLt matmuls as one row:
// the same table with calls and no times.
//
// Both: the cuBLASLt calls of the profiled steps, counted on the host by the matmul context
// (llmc/cuda/matmul.cuh) with their FLOPs and operand bytes, so the table gives the GEMMs' achieved
// TFLOP/s; per kernel bytes and FLOPs for our own kernels come from the model (dev/bench/roofline.py
// --compare).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/core/kernel_profile.h"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/matmul.cuh"

#ifdef LLMC_EMULATE
#include "dev/emu/device_state.h"
#elif __has_include(<cupti.h>)
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <cupti.h>
#define LLMC_HAVE_CUPTI 1
#endif

namespace llmc::cuda {

// The cuBLASLt calls of the profiled steps, from the matmul context's counts (matmul.cuh: the calls
// issued plus those a replayed step graph ran), added to the capture by problem. No context: not counted.
class GemmStepCounter {
public:
    explicit GemmStepCounter(const MatmulContext* mm) : mm_(mm) {}
    void step_begin() {
        if (mm_) before_ = gemms_issued(*mm_);
    }
    void step_end(ProfileCapture& cap) const {
        if (!mm_) return;
        cap.gemms_counted = true;
        for (const auto& [problem, c] : gemms_by_problem(gemms_between(before_, gemms_issued(*mm_))))
            cap.gemms[problem] += c;
    }

private:
    const MatmulContext* mm_;
    GemmCounts before_;
};

#ifdef LLMC_EMULATE

class EmulatedLaunchProfiler : public StepProfiler {
public:
    explicit EmulatedLaunchProfiler(const MatmulContext* mm) : gemms_(mm) {}
    void step_begin() override {
        before_ = ::llmc::emu::device().counters.totals();
        gemms_.step_begin();
    }
    void step_end() override {
        gemms_.step_end(cap_);
        const ::llmc::emu::IntervalCounts after = ::llmc::emu::device().counters.totals();
        for (const auto& [name, n] : after.kernels) {
            const auto it = before_.kernels.find(name);
            const uint64_t since = n - (it == before_.kernels.end() ? 0 : it->second);
            for (uint64_t i = 0; i < since; i++) cap_.activities.push_back({name, 0, 0});
        }
        for (uint64_t i = before_.matmuls; i < after.matmuls; i++)
            cap_.activities.push_back({"cublasLtMatmul [emulated cuBLASLt: one call, its kernels unknown]"});
        cap_.steps++;
    }
    ProfileCapture finish() override {
        cap_.timed = false;
        cap_.source = "emulated device: launch counts, not times";
        return cap_;
    }

private:
    ::llmc::emu::IntervalCounts before_;
    GemmStepCounter gemms_;
    ProfileCapture cap_;
};

// mm: the matmul context whose cuBLASLt calls the profile counts (nullptr: not counted).
// flag: the option that asked for the profile, as errors name it (unused here: nothing can fail).
inline std::unique_ptr<StepProfiler> make_step_profiler(const MatmulContext* mm, const std::string& /*flag*/) {
    return std::make_unique<EmulatedLaunchProfiler>(mm);
}

#elif !defined(LLMC_HAVE_CUPTI)

inline std::unique_ptr<StepProfiler> make_step_profiler(const MatmulContext*, const std::string& flag) {
    throw InputError(flag +
                     ": this build found no cupti.h (CUDA's extras/CUPTI/include); rebuild with it on the include "
                     "path (EXTRA_INCLUDE=...), or drop " +
                     flag);
}

#else

namespace detail {

// Where CUPTI's buffer callbacks leave the records (see the file comment).
struct CuptiSink {
    std::mutex mu;
    std::vector<DeviceActivity> activities;
    uint64_t dropped = 0;  // records CUPTI could not store (cuptiActivityGetNumDroppedRecords)
    bool active = false;
};
inline CuptiSink& cupti_sink() {
    static CuptiSink sink;
    return sink;
}

// The CUPTI functions used, resolved from libcupti at run time.
struct CuptiApi {
    void* lib = nullptr;
    decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
    decltype(&cuptiActivityEnable) enable = nullptr;
    decltype(&cuptiActivityDisable) disable = nullptr;
    decltype(&cuptiActivityFlushAll) flush_all = nullptr;
    decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
    decltype(&cuptiGetTimestamp) timestamp = nullptr;
    decltype(&cuptiGetResultString) result_string = nullptr;
    decltype(&cuptiActivityGetNumDroppedRecords) num_dropped = nullptr;
    bool callbacks_registered = false;  // once per process: a later profiler reuses them
};

// Opens libcupti: the dynamic loader's search, then $CUDA_HOME and /usr/local/cuda (lib64,
// extras/CUPTI/lib64). "" on success, else why not.
inline std::string open_cupti(CuptiApi& api) {
    std::vector<std::string> names = {"libcupti.so.13", "libcupti.so"};
    for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
        if (const char* home = std::getenv(env))
            for (const char* sub : {"/lib64/libcupti.so", "/extras/CUPTI/lib64/libcupti.so"})
                names.push_back(std::string(home) + sub);
    for (const char* sub : {"/lib64/libcupti.so", "/extras/CUPTI/lib64/libcupti.so"})
        names.push_back(std::string("/usr/local/cuda") + sub);
    for (const std::string& n : names)
        if ((api.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!api.lib) return "libcupti not found (tried libcupti.so.13, libcupti.so, $CUDA_HOME/lib64, /usr/local/cuda)";
    auto get = [&](auto& fn, const char* sym) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api.lib, sym));
        return fn != nullptr;
    };
    if (!get(api.register_callbacks, "cuptiActivityRegisterCallbacks") || !get(api.enable, "cuptiActivityEnable") ||
        !get(api.disable, "cuptiActivityDisable") || !get(api.flush_all, "cuptiActivityFlushAll") ||
        !get(api.next_record, "cuptiActivityGetNextRecord") || !get(api.timestamp, "cuptiGetTimestamp") ||
        !get(api.result_string, "cuptiGetResultString") || !get(api.num_dropped, "cuptiActivityGetNumDroppedRecords")) {
        // Unloaded whole: a later profiler opens it again rather than calling a null function.
        dlclose(api.lib);
        api = CuptiApi{};
        return "libcupti lacks a function of the activity API";
    }
    return "";
}

inline CuptiApi& cupti_api() {
    static CuptiApi api;
    return api;
}

constexpr size_t kCuptiBufferBytes = 8u << 20;

inline void CUPTIAPI cupti_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kCuptiBufferBytes));
    *size = *buffer ? kCuptiBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

inline const char* copy_kind_name(uint8_t kind) {
    switch (kind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
        default: return "memcpy (other)";
    }
}

inline void CUPTIAPI cupti_buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
    CuptiSink& sink = cupti_sink();
    CUpti_Activity* rec = nullptr;
    size_t dropped = 0;
    if (cupti_api().num_dropped(context, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
    {
        std::lock_guard<std::mutex> lock(sink.mu);
        sink.dropped += dropped;
        while (cupti_api().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
            if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
                const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
                sink.activities.push_back({k->name ? k->name : "(unnamed kernel)", k->start, k->end});
            } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
                const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
                sink.activities.push_back({copy_kind_name(m->copyKind), m->start, m->end});
            } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
                const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
                sink.activities.push_back({"memset", m->start, m->end});
            }
        }
    }
    std::free(buffer);
}

}  // namespace detail

class CuptiProfiler : public StepProfiler {
public:
    // flag: the option that asked for the profile, as errors name it.
    CuptiProfiler(const MatmulContext* mm, std::string flag) : flag_(std::move(flag)), gemms_(mm) {
        detail::CuptiApi& api = detail::cupti_api();
        if (!api.lib) {
            const std::string why = detail::open_cupti(api);
            if (!why.empty())
                throw InputError(flag_ + ": " + why +
                                 "; put the CUDA toolkit's lib64 (or extras/CUPTI/lib64) on LD_LIBRARY_PATH");
        }
        detail::CuptiSink& sink = detail::cupti_sink();
        {
            std::lock_guard<std::mutex> lock(sink.mu);
            if (sink.active) throw std::logic_error("CuptiProfiler: one profiler at a time");
            sink.active = true;
            sink.activities.clear();
            sink.dropped = 0;
        }
        try {
            if (!api.callbacks_registered) {
                check(api.register_callbacks(detail::cupti_buffer_requested, detail::cupti_buffer_completed),
                      "cuptiActivityRegisterCallbacks");
                api.callbacks_registered = true;
            }
            for (CUpti_ActivityKind k :
                 {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET})
                check(api.enable(k), "cuptiActivityEnable");
        } catch (...) {
            stop(/*check=*/false);
            throw;
        }
    }
    ~CuptiProfiler() override {
        if (!finished_) stop(/*check=*/false);
    }

    void step_begin() override {
        begin_ = now();
        gemms_.step_begin();
    }
    void step_end() override {
        windows_.push_back({begin_, now()});
        gemms_.step_end(gemm_cap_);
        steps_++;
    }
    ProfileCapture finish() override {
        stop(/*check=*/true);
        ProfileCapture cap;
        cap.timed = true;
        cap.source = "CUPTI activity records, GPU";
        cap.windows = windows_;
        cap.steps = steps_;
        std::lock_guard<std::mutex> lock(detail::cupti_sink().mu);
        cap.activities = std::move(detail::cupti_sink().activities);
        cap.dropped = detail::cupti_sink().dropped;
        cap.gemms_counted = gemm_cap_.gemms_counted;
        cap.gemms = std::move(gemm_cap_.gemms);
        return cap;
    }

private:
    // The device synchronised, then CUPTI's clock.
    uint64_t now() {
        CUDA_CHECK(cudaDeviceSynchronize());
        uint64_t t = 0;
        check(detail::cupti_api().timestamp(&t), "cuptiGetTimestamp");
        return t;
    }
    // Disables the records and flushes every buffer (also incomplete ones) into the sink; check: a CUPTI
    // error is an InputError (else ignored: a constructor that failed, a destructor).
    void stop(bool check_errors) {
        finished_ = true;
        detail::CuptiApi& api = detail::cupti_api();
        (void)cudaDeviceSynchronize();
        CUptiResult r = CUPTI_SUCCESS;
        for (CUpti_ActivityKind k :
             {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
            const CUptiResult d = api.disable(k);
            if (r == CUPTI_SUCCESS) r = d;
        }
        const CUptiResult f = api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        {
            std::lock_guard<std::mutex> lock(detail::cupti_sink().mu);
            detail::cupti_sink().active = false;
        }
        if (check_errors) {
            check(r, "cuptiActivityDisable");
            check(f, "cuptiActivityFlushAll");
        }
    }
    void check(CUptiResult r, const char* what) const {
        if (r == CUPTI_SUCCESS) return;
        const char* s = nullptr;
        detail::cupti_api().result_string(r, &s);
        throw InputError(flag_ + ": " + what + " failed: " + (s ? s : "unknown CUPTI error") + "; run without " +
                         flag_);
    }

    std::string flag_;
    uint64_t begin_ = 0;
    GemmStepCounter gemms_;
    ProfileCapture gemm_cap_;  // the profiled steps' cuBLASLt calls
    std::vector<std::pair<uint64_t, uint64_t>> windows_;
    int steps_ = 0;
    bool finished_ = false;
};

inline std::unique_ptr<StepProfiler> make_step_profiler(const MatmulContext* mm, const std::string& flag) {
    return std::make_unique<CuptiProfiler>(mm, flag);
}

#endif

}  // namespace llmc::cuda
