// Device emulation, the per-step report: what the host asked of the emulated device between two
// step markers - kernel launches by kernel (those a graph runs included), graph launches and
// instantiations, cuBLASLt matmuls and their FLOPs, copies by direction, memsets, host
// synchronisations by kind, NCCL collectives - counted
// by the emulated runtime, cuBLASLt, NCCL and launch (grid.cpp), each when it runs (work captured for
// a graph counts when the graph runs), and written as one JSON line per interval to the file LLMC_EMU_REPORT names
// ("-" = stderr; "%p" in the name = the process id, for several ranks; unset = nothing written).
//
// Intervals. The training loop marks the start and the end of each optimizer step
// (Backend::on_step_begin / on_step_end -> llmc/cuda/step_marker.cuh -> mark()). A mark writes the
// interval that just ended and starts counting afresh:
//   {"interval": "step", "step": s, ...}           from the begin mark of step s to its end mark
//   {"interval": "before_step", "step": s, ...}    from the previous mark (or process start) to the
//                                                  begin mark of step s: set-up, then the loop's work
//                                                  between steps (logging, validation, checkpoints)
// What follows the last end mark (the run's end) is not written.
//
// Host synchronisations ("host_syncs", the sum of "syncs"), after the CUDA Runtime API reference's
// "API synchronization behavior": cudaDeviceSynchronize, cudaStreamSynchronize and
// cudaEventSynchronize calls, and synchronous cudaMemcpy calls with a host side (device to host
// returns once the copy is done; pageable host to device syncs the stream first; pinned host to
// device is synchronous with the host). cudaMemcpyAsync between the device and pageable host memory
// "might be synchronous" there: counted apart ("async_pageable_copies"), not as a sync. In the
// emulation every call completes before it returns, so these are the calls that WOULD block a GPU
// run's host, not time the emulation spends.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include <unistd.h>

namespace llmc::emu {

// The JSON string literal of s (quotes, backslashes and control characters escaped).
inline std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (const char ch : s) {
        const unsigned char c = (unsigned char)ch;
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

struct CountBytes {
    uint64_t count = 0, bytes = 0;
};

// The counts of one interval.
struct IntervalCounts {
    std::map<std::string, uint64_t> kernels;        // demangled kernel name -> launches (run by a graph too)
    uint64_t programmatic_launches = 0;             // of those, with programmatic stream serialization
    uint64_t graph_launches = 0;                    // cudaGraphLaunch calls
    uint64_t graph_instantiations = 0;              // cudaGraphInstantiate calls (each after a capture)
    uint64_t matmuls = 0;                           // cublasLtMatmul calls that ran
    uint64_t matmul_flops = 0;                      // their multiply-adds x 2 (2 m n k per call)
    std::map<std::string, CountBytes> copies;       // "HtoD", "DtoH", "DtoD", "HtoH"
    CountBytes async_pageable_copies;               // cudaMemcpyAsync between the device and pageable host memory
    CountBytes memsets;                             // cudaMemset / cudaMemsetAsync on device memory
    std::map<std::string, uint64_t> syncs;          // call (or "cudaMemcpy <dir>") -> count
    std::map<std::string, CountBytes> collectives;  // NCCL call -> calls, bytes of their send buffers
};

class StepCounters {
public:
    // report_path: LLMC_EMU_REPORT (nullptr or "" = count but write nothing).
    explicit StepCounters(const char* report_path) {
        if (!report_path || !*report_path) return;
        std::string path = report_path;
        if (path == "-") {
            out_ = stderr;
            return;
        }
        for (size_t at = path.find("%p"); at != std::string::npos; at = path.find("%p", at))
            path.replace(at, 2, std::to_string((long)getpid()));
        out_ = std::fopen(path.c_str(), "w");
        if (!out_) {
            std::fprintf(stderr, "error: LLMC_EMU_REPORT '%s': cannot open it for writing; give a writable path\n",
                         path.c_str());
            std::exit(2);
        }
        owns_ = true;
    }
    ~StepCounters() {
        if (owns_) std::fclose(out_);
    }
    StepCounters(const StepCounters&) = delete;
    StepCounters& operator=(const StepCounters&) = delete;

    void kernel(const std::string& name, bool programmatic) {
        std::lock_guard<std::mutex> lock(mu_);
        cur_.kernels[name]++;
        totals_.kernels[name]++;
        cur_.programmatic_launches += programmatic;
        totals_.programmatic_launches += programmatic;
    }
    void graph_launch() {
        std::lock_guard<std::mutex> lock(mu_);
        cur_.graph_launches++;
        totals_.graph_launches++;
    }
    void graph_instantiation() {
        std::lock_guard<std::mutex> lock(mu_);
        cur_.graph_instantiations++;
        totals_.graph_instantiations++;
    }
    // A matmul of an (m, n) output with depth k.
    void matmul(uint64_t m, uint64_t n, uint64_t k) {
        std::lock_guard<std::mutex> lock(mu_);
        cur_.matmuls++;
        totals_.matmuls++;
        cur_.matmul_flops += 2 * m * n * k;
        totals_.matmul_flops += 2 * m * n * k;
    }
    // The kernel launches (by name), graph launches and instantiations, matmuls and their FLOPs, host
    // synchronisations by call since the process started, never reset by a mark
    // (llmc/cuda/kernel_profiler.cuh counts a step's as the difference of two of these).
    IntervalCounts totals() {
        std::lock_guard<std::mutex> lock(mu_);
        return totals_;
    }
    // dir: "HtoD", "DtoH", "DtoD", "HtoH"; synchronous: cudaMemcpy (not ...Async); pageable: the host
    // side is not from cudaMallocHost.
    void copy(const char* dir, size_t bytes, bool synchronous, bool pageable) {
        std::lock_guard<std::mutex> lock(mu_);
        CountBytes& c = cur_.copies[dir];
        c.count++;
        c.bytes += bytes;
        const bool host_side = std::string(dir) != "DtoD";
        const bool device_side = std::string(dir) != "HtoH";
        if (synchronous && host_side) cur_.syncs[std::string("cudaMemcpy ") + dir]++;
        if (!synchronous && host_side && device_side && pageable) {
            cur_.async_pageable_copies.count++;
            cur_.async_pageable_copies.bytes += bytes;
        }
    }
    void memset(size_t bytes) {
        std::lock_guard<std::mutex> lock(mu_);
        cur_.memsets.count++;
        cur_.memsets.bytes += bytes;
    }
    void sync(const char* call) {
        std::lock_guard<std::mutex> lock(mu_);
        cur_.syncs[call]++;
        totals_.syncs[call]++;
    }
    void collective(const char* call, size_t bytes) {
        std::lock_guard<std::mutex> lock(mu_);
        CountBytes& c = cur_.collectives[call];
        c.count++;
        c.bytes += bytes;
    }

    // A step marker: writes the interval that ends here (begin: "before_step"; end: "step") and
    // starts the next one.
    void mark(int step, bool begin) {
        std::lock_guard<std::mutex> lock(mu_);
        if (out_) {
            const std::string line = to_json(begin ? "before_step" : "step", step, cur_) + "\n";
            std::fputs(line.c_str(), out_);
            std::fflush(out_);
        }
        cur_ = IntervalCounts();
    }

    static std::string to_json(const char* interval, int step, const IntervalCounts& c) {
        auto cb = [](const CountBytes& x) {
            return "{\"count\": " + std::to_string(x.count) + ", \"bytes\": " + std::to_string(x.bytes) + "}";
        };
        uint64_t launches = 0, syncs = 0;
        std::string kernels, copies, sync_list, colls;
        for (const auto& [name, n] : c.kernels) {
            kernels += (kernels.empty() ? "" : ", ") + json_string(name) + ": " + std::to_string(n);
            launches += n;
        }
        for (const auto& [dir, x] : c.copies) copies += (copies.empty() ? "" : ", ") + json_string(dir) + ": " + cb(x);
        for (const auto& [call, n] : c.syncs) {
            sync_list += (sync_list.empty() ? "" : ", ") + json_string(call) + ": " + std::to_string(n);
            syncs += n;
        }
        for (const auto& [call, x] : c.collectives)
            colls += (colls.empty() ? "" : ", ") + json_string(call) + ": " + cb(x);
        return "{\"interval\": " + json_string(interval) + ", \"step\": " + std::to_string(step) +
               ", \"launches\": " + std::to_string(launches) +
               ", \"programmatic_launches\": " + std::to_string(c.programmatic_launches) +
               ", \"graph_launches\": " + std::to_string(c.graph_launches) +
               ", \"graph_instantiations\": " + std::to_string(c.graph_instantiations) +
               ", \"matmuls\": " + std::to_string(c.matmuls) + ", \"matmul_flops\": " + std::to_string(c.matmul_flops) +
               ", \"host_syncs\": " + std::to_string(syncs) + ", \"syncs\": {" + sync_list + "}, \"copies\": {" +
               copies + "}, \"async_pageable_copies\": " + cb(c.async_pageable_copies) +
               ", \"memsets\": " + cb(c.memsets) + ", \"nccl\": {" + colls + "}, \"kernels\": {" + kernels + "}}";
    }

private:
    std::mutex mu_;
    IntervalCounts cur_;
    IntervalCounts totals_;  // kernels, graph launches and instantiations, matmuls and their FLOPs, syncs
    std::FILE* out_ = nullptr;
    bool owns_ = false;
};

}  // namespace llmc::emu
