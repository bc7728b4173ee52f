// Device emulation, the state of the emulated device: its memory (each cudaMalloc an exact-size
// host allocation, poisoned with 0xFF bytes = NaN in float and bf16, so AddressSanitizer sees an
// access past its end), the last error, the per-kernel attributes set by cudaFuncSetAttribute, the
// schedules every launch runs under, and the properties of an H100 SXM (sm_90, 132 SMs, 227 KB of
// opt-in shared memory per block). Like the driver it stands in for, it is process-wide: device().
// LLMC_EMU_DEVICE_COUNT > 1 numbers several devices that all share this one state (parse_device_count).
// It also keeps the per-step counts of launches, copies and synchronisations (step_counters.h), and
// the stream captures in progress (cudaStreamBeginCapture: the work recorded instead of run).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <driver_types.h>

#include "dev/emu/block.h"
#include "dev/emu/step_counters.h"

namespace llmc::emu {

// Limits of the real device that a launch is checked against (CUDA C++ Programming Guide,
// "Technical Specifications per Compute Capability", compute capability 9.0).
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDimXY = 1024, kMaxBlockDimZ = 64;
constexpr unsigned long kMaxGridDimX = 2147483647UL;
constexpr unsigned kMaxGridDimYZ = 65535;
constexpr size_t kSharedDefault = 48 * 1024;    // dynamic shared memory without opt-in
constexpr size_t kSharedOptinMax = 227 * 1024;  // cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90
constexpr int kSmCount = 132;

struct Allocation {
    size_t bytes = 0;
    bool host_pinned = false;  // cudaMallocHost: host memory, not device
    int device = 0;            // the device current when it was allocated (cudaPointerGetAttributes)
};

// How many devices cudaGetDeviceCount reports: LLMC_EMU_DEVICE_COUNT (1 to kMaxDevices, default 1).
// They are one device in all but number: every device shares this process's one DeviceState (one
// memory pool, one set of kernel attributes); only the current device differs, per host thread.
constexpr int kMaxDevices = 64;
inline int parse_device_count(const char* s) {
    if (!s || !*s) return 1;
    char* end = nullptr;
    const long n = std::strtol(s, &end, 10);
    if (*end || n < 1 || n > kMaxDevices) {
        std::fprintf(stderr, "error: LLMC_EMU_DEVICE_COUNT '%s' is not a number of devices from 1 to %d\n", s,
                     kMaxDevices);
        std::exit(2);
    }
    return (int)n;
}

// A stream capture in progress (CUDA Runtime API, cudaStreamBeginCapture): the work pushed into the
// stream, recorded in issue order instead of run (each item runs it when the graph does). A call
// that capture does not permit sets `invalidated` (what it was); cudaStreamEndCapture then gives no
// graph.
struct Capture {
    std::vector<std::function<void()>> work;
    std::string invalidated;
};

class DeviceState {
public:
    std::mutex mu;  // allocations may be made from several host threads (emulated NCCL ranks)
    std::map<uintptr_t, Allocation> allocs;
    cudaError_t last_error = cudaSuccess;
    std::map<const void*, int> max_dynamic_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel
    std::vector<ScheduleSpec> schedules;          // every launch runs under each; results must agree
    StackPool stacks;
    uint64_t launches = 0, blocks_run = 0;
    bool verbose = false;
    int device_count = 1;                                   // LLMC_EMU_DEVICE_COUNT
    StepCounters counters{std::getenv("LLMC_EMU_REPORT")};  // per-step report (step_counters.h)

    DeviceState() {
        schedules = parse_schedules(std::getenv("LLMC_EMU_SCHEDULES"));
        verbose = std::getenv("LLMC_EMU_VERBOSE");
        device_count = parse_device_count(std::getenv("LLMC_EMU_DEVICE_COUNT"));
    }

    // "forward", "reverse", "greedy-forward", "greedy-reverse", "shuffle:SEED", comma-separated;
    // default "forward" (block.h says what each does).
    static std::vector<ScheduleSpec> parse_schedules(const char* s) {
        std::vector<ScheduleSpec> out;
        std::string all = s && *s ? s : "forward";
        size_t pos = 0;
        while (pos <= all.size()) {
            const size_t comma = all.find(',', pos);
            const std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
            ScheduleSpec sp;
            if (item == "forward") sp.kind = Schedule::Forward;
            else if (item == "reverse") sp.kind = Schedule::Reverse;
            else if (item == "greedy-forward") sp.kind = Schedule::GreedyForward;
            else if (item == "greedy-reverse") sp.kind = Schedule::GreedyReverse;
            else if (item.rfind("shuffle:", 0) == 0) {
                sp.kind = Schedule::Shuffle;
                sp.seed = std::strtoull(item.c_str() + 8, nullptr, 10);
            } else {
                std::fprintf(
                    stderr,
                    "error: LLMC_EMU_SCHEDULES item '%s' is not forward, reverse, greedy-forward, greedy-reverse or shuffle:SEED\n",
                    item.c_str());
                std::exit(2);
            }
            out.push_back(sp);
            if (comma == std::string::npos) break;
            pos = comma + 1;
        }
        return out;
    }

    // The allocation containing p (device or pinned host), or nullptr.
    const std::pair<const uintptr_t, Allocation>* find(const void* p) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(p);
        auto it = allocs.upper_bound(a);
        if (it == allocs.begin()) return nullptr;
        --it;
        if (a >= it->first && a < it->first + std::max<size_t>(it->second.bytes, 1)) return &*it;
        return nullptr;
    }
    bool is_device(const void* p) {
        const auto* a = find(p);
        return a && !a->second.host_pinned;
    }
    // True when [p, p+n) lies inside one device allocation.
    bool device_range(const void* p, size_t n) {
        const auto* a = find(p);
        return a && !a->second.host_pinned && reinterpret_cast<uintptr_t>(p) + n <= a->first + a->second.bytes;
    }

    // ---- stream capture (runtime.cpp: cudaStreamBeginCapture, cudaStreamEndCapture) ----
    // The capture in progress on `stream`, or nullptr. Work issued to a capturing stream is appended
    // to it (grid.cpp's run_grid, runtime.cpp's async copies and memsets, cuBLASLt).
    Capture* capture_of(const void* stream) {
        std::lock_guard<std::mutex> lock(capture_mu_);
        auto it = captures_.find(stream);
        return it == captures_.end() ? nullptr : &it->second;
    }
    void begin_capture(const void* stream) {
        std::lock_guard<std::mutex> lock(capture_mu_);
        captures_[stream] = Capture();
    }
    // Work for the legacy default stream (nullptr or cudaStreamLegacy, which synchronizes with every
    // stream) while a stream captures: cudaStreamCaptureModeGlobal prohibits it; true when that is
    // the case (the captures are then invalidated, and the caller fails with
    // cudaErrorStreamCaptureImplicit).
    bool legacy_work_in_capture(const void* stream, const std::string& call) {
        if (stream != nullptr && stream != reinterpret_cast<const void*>(0x1)) return false;  // 0x1: cudaStreamLegacy
        return invalidate_captures(call + " on the legacy default stream");
    }
    // Moves the capture of `stream` into *out and ends it; false when there is none.
    bool end_capture(const void* stream, Capture* out) {
        std::lock_guard<std::mutex> lock(capture_mu_);
        auto it = captures_.find(stream);
        if (it == captures_.end()) return false;
        *out = std::move(it->second);
        captures_.erase(it);
        return true;
    }
    bool any_capture() {
        std::lock_guard<std::mutex> lock(capture_mu_);
        return !captures_.empty();
    }
    // For a call that capture does not permit (cudaStreamCaptureModeGlobal's "potentially unsafe"
    // calls): when some stream captures, marks every capture invalidated by `call` and returns true.
    bool invalidate_captures(const std::string& call) {
        std::lock_guard<std::mutex> lock(capture_mu_);
        for (auto& [stream, c] : captures_)
            if (c.invalidated.empty()) c.invalidated = call;
        return !captures_.empty();
    }

    // Copies of every device allocation (for the schedule comparison in launch.h).
    std::vector<std::vector<unsigned char>> snapshot() {
        std::vector<std::vector<unsigned char>> s;
        for (auto& [p, a] : allocs)
            if (!a.host_pinned)
                s.emplace_back(reinterpret_cast<unsigned char*>(p), reinterpret_cast<unsigned char*>(p) + a.bytes);
        return s;
    }
    void restore(const std::vector<std::vector<unsigned char>>& s) {
        size_t i = 0;
        for (auto& [p, a] : allocs)
            if (!a.host_pinned) {
                std::memcpy(reinterpret_cast<void*>(p), s[i].data(), a.bytes);
                i++;
            }
    }

private:
    std::mutex capture_mu_;
    std::map<const void*, Capture> captures_;  // stream -> its capture in progress
};

inline DeviceState& device() {
    static DeviceState d;
    return d;
}

}  // namespace llmc::emu
