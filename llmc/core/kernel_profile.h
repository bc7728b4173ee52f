// The per-kernel profile of training steps (--profile-steps N, docs/training.md "Profiling the step"):
// what a StepProfiler captured over the profiled steps, folded into one row per kernel name, and its
// table and JSON. Host-only, no GPU needed: the capture itself is the backend's (llmc/cuda/
// kernel_profiler.cuh: CUPTI's activity records on a GPU, launch counts on the emulated device).
//
// Per row, per profiled step: calls, total time, mean time per call, share of the step; per profile:
// the step's wall time between its two device synchronisations (before its first launch, after its
// last), the time some activity ran (the union of the kernels', copies' and memsets' intervals) and the
// rest ("idle": launch gaps, host work, synchronisations), split into before the first activity,
// between activities (with the kernels the longest gaps precede) and after the last. An untimed
// capture (the emulation) has calls only.
#pragma once
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmc {

// One device activity: a kernel (or copy / memset) with its start and end in ns on the device's
// clock; start = end = 0 when not timed.
struct DeviceActivity {
    std::string name;
    uint64_t start_ns = 0, end_ns = 0;
};

// What matmul calls cost, counted on the host as they are issued (llmc/cuda/matmul.cuh, lt_matmul):
// calls, FLOPs (2 m n k a call) and bytes (each operand read or written once: A, B, D, C when it is
// accumulated into, the bias, the GELU epilogue's aux; the least traffic the call can have).
struct GemmCount {
    uint64_t calls = 0;
    double flops = 0, bytes = 0;
    GemmCount& operator+=(const GemmCount& o) {
        calls += o.calls;
        flops += o.flops;
        bytes += o.bytes;
        return *this;
    }
    GemmCount operator-(const GemmCount& o) const { return {calls - o.calls, flops - o.flops, bytes - o.bytes}; }
};

// What a profiler captured: the activities of every profiled step and each step's window [begin, end]
// on the same clock (timed), or only the activities (untimed).
struct ProfileCapture {
    std::string unit = "training steps";  // what a profiled "step" is, as the table's title says it
    bool timed = false;
    std::string source;  // "CUPTI activity records, GPU" or "emulated device: launch counts, not times"
    std::vector<DeviceActivity> activities;
    std::vector<std::pair<uint64_t, uint64_t>> windows;  // (steps) [begin, end] ns
    int steps = 0;
    uint64_t dropped = 0;  // activity records the capture lost (CUPTI's count): the table then undercounts
    // the cuBLASLt calls of the profiled steps, by problem (the algorithm log's text); gemms_counted:
    // whether the profiler counted them
    bool gemms_counted = false;
    std::map<std::string, GemmCount> gemms;
};

// Captures the device activity of the steps between step_begin and step_end (the training loop calls
// them around each profiled step) until finish. One per process.
class StepProfiler {
public:
    virtual ~StepProfiler() = default;
    virtual void step_begin() = 0;
    virtual void step_end() = 0;
    virtual ProfileCapture finish() = 0;
};

struct ProfileRow {
    std::string name;
    double calls_per_step = 0;  // calls per step
    double us_per_step = 0;     // total time per step (0 when untimed)
    double mean_us = 0;         // per call
    double share = 0;           // of the step's wall time
    double gap_before_us = 0;   // per step: idle time just before this kernel's calls (inner gaps, below)
    double gaps_before = 0;     // per step: how many of the inner gaps precede one of its calls
};

// Where a step's idle time lies, per step: before its first activity (the host preparing and issuing
// the step's start), between activities (inner gaps: the GPU waited for the next launch or for a
// dependency), after its last (the host's wait returning and its reading of the results). The three
// add up to idle_us.
struct IdleSplit {
    double lead_us = 0, inner_us = 0, tail_us = 0;
    double inner_gaps = 0;      // per step
    double inner_gaps_5us = 0;  // per step: inner gaps longer than 5 us
    double largest_gap_us = 0;  // over all profiled steps
};

struct ProfileTable {
    std::string unit = "training steps";
    bool timed = false;
    std::string source;
    int steps = 0;
    double step_us = 0;         // mean wall time per step
    double busy_us = 0;         // per step: time at least one activity ran (union of intervals)
    double idle_us = 0;         // step_us - busy_us
    double calls_per_step = 0;  // activities per step: kernels (cuBLASLt's own ones on a GPU; one per
                                // cuBLASLt call emulated), copies and memsets
    uint64_t dropped = 0;
    IdleSplit idle;                // timed only
    std::vector<ProfileRow> rows;  // by time (timed) or calls (untimed), largest first, then by name
    // The cuBLASLt calls per step (ProfileCapture::gemms; counted = false: not counted) and the time of
    // the rows that are cuBLASLt's kernels (library_kernel_row): achieved TFLOP/s and GB/s of the GEMMs.
    struct Gemms {
        bool counted = false;
        double calls = 0, flops = 0, bytes = 0;  // per step
        double us = 0;                           // per step, timed only
        double kernel_calls = 0;                 // per step: the launches of those rows
        struct Problem {
            std::string name;                        // the algorithm log's text
            double calls = 0, flops = 0, bytes = 0;  // per step
        };
        std::vector<Problem> problems;  // most FLOPs first
    } gemms;
};

// Whether a row is a kernel of cuBLASLt's: not one of ours (llmc::), not a copy or memset, not
// NCCL's. (On the emulated device: the one cublasLtMatmul row.)
inline bool library_kernel_row(const std::string& name) {
    for (const char* p : {"llmc::", "memcpy", "memset", "nccl"})
        if (name.compare(0, std::char_traits<char>::length(p), p) == 0) return false;
    return true;
}

// A kernel's name as C++ spells it. CUPTI names our kernels and cuBLASLt's C++ ones by their mangled
// symbols (_ZN4llmc4cuda6detail15bias_sum_kernel...): demangled here, as c++filt and the emulated
// device (dev/emu/kernel_symbol.h) do. A name that is not a mangled symbol (cuBLASLt's extern "C"
// kernels, "memset") or does not demangle stays as it is.
inline std::string demangled_kernel_name(const std::string& name) {
    if (name.compare(0, 2, "_Z") != 0) return name;
    int status = 0;
    char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : name;
    std::free(d);
    return s;
}

// A kernel's demangled name without its parameter list ("void f<32, true>(float*, int)" and its
// mangled symbol -> "f<32, true>"), so a row names the instantiation.
inline std::string short_kernel_name(const std::string& name) {
    std::string s = demangled_kernel_name(name);
    if (s.compare(0, 5, "void ") == 0) s = s.substr(5);
    // the parameter list: the last top-level '(' (template arguments may hold parentheses)
    int depth = 0;
    size_t cut = std::string::npos;
    for (size_t i = 0; i < s.size(); i++) {
        const char c = s[i];
        if (c == '<') depth++;
        if (c == '>') depth--;
        if (c == '(' && depth == 0) {
            cut = i;
            break;
        }
    }
    if (cut != std::string::npos) s = s.substr(0, cut);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

// Folds a capture into rows. Activities outside every window are ignored (timed captures only).
inline ProfileTable profile_table(const ProfileCapture& cap) {
    ProfileTable t;
    t.unit = cap.unit;
    t.timed = cap.timed;
    t.source = cap.source;
    t.steps = cap.steps;
    t.dropped = cap.dropped;
    if (cap.steps <= 0) return t;
    const double steps = cap.steps;
    struct Acc {
        uint64_t calls = 0;
        double ns = 0;
    };
    std::map<std::string, Acc> by_name;
    std::vector<std::pair<uint64_t, uint64_t>> busy;  // intervals of the activities inside a window
    double wall_ns = 0;
    for (const auto& w : cap.windows) wall_ns += (double)(w.second - w.first);
    for (const DeviceActivity& a : cap.activities) {
        if (cap.timed) {
            bool inside = false;
            for (const auto& w : cap.windows) inside |= a.start_ns >= w.first && a.start_ns <= w.second;
            if (!inside) continue;
            busy.push_back({a.start_ns, std::max(a.start_ns, a.end_ns)});
        }
        Acc& acc = by_name[short_kernel_name(a.name)];
        acc.calls++;
        acc.ns += cap.timed ? (double)(std::max(a.start_ns, a.end_ns) - a.start_ns) : 0.0;
    }
    // the idle split, window by window: its activities in start order, a gap wherever one starts after
    // every earlier one has ended
    std::map<std::string, std::pair<double, uint64_t>> gap_before;  // name: (ns, gaps)
    if (cap.timed) {
        for (const auto& w : cap.windows) {
            std::vector<std::pair<uint64_t, const DeviceActivity*>> in;
            for (const DeviceActivity& a : cap.activities)
                if (a.start_ns >= w.first && a.start_ns <= w.second) in.push_back({a.start_ns, &a});
            std::stable_sort(in.begin(), in.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
            if (in.empty()) {
                t.idle.lead_us += (double)(w.second - w.first);
                continue;
            }
            uint64_t end = in.front().first;
            t.idle.lead_us += (double)(end - w.first);
            for (const auto& [start, a] : in) {
                if (start > end) {
                    const double g = (double)(start - end);
                    t.idle.inner_us += g;
                    t.idle.inner_gaps += 1;
                    if (g > 5e3) t.idle.inner_gaps_5us += 1;
                    t.idle.largest_gap_us = std::max(t.idle.largest_gap_us, g / 1e3);
                    auto& gb = gap_before[short_kernel_name(a->name)];
                    gb.first += g;
                    gb.second++;
                }
                end = std::max(end, std::max(a->start_ns, a->end_ns));
            }
            if (w.second > end) t.idle.tail_us += (double)(w.second - end);
        }
        t.idle.lead_us /= steps * 1e3;
        t.idle.inner_us /= steps * 1e3;
        t.idle.tail_us /= steps * 1e3;
        t.idle.inner_gaps /= steps;
        t.idle.inner_gaps_5us /= steps;
    }
    std::sort(busy.begin(), busy.end());
    double busy_ns = 0;
    uint64_t cur_b = 0, cur_e = 0;
    bool open = false;
    for (const auto& iv : busy) {
        if (open && iv.first <= cur_e) {
            cur_e = std::max(cur_e, iv.second);
            continue;
        }
        if (open) busy_ns += (double)(cur_e - cur_b);
        cur_b = iv.first;
        cur_e = iv.second;
        open = true;
    }
    if (open) busy_ns += (double)(cur_e - cur_b);
    t.step_us = wall_ns / steps / 1e3;
    t.busy_us = busy_ns / steps / 1e3;
    t.idle_us = std::max(0.0, t.step_us - t.busy_us);
    for (const auto& [name, acc] : by_name) {
        ProfileRow r;
        r.name = name;
        r.calls_per_step = (double)acc.calls / steps;
        r.us_per_step = acc.ns / steps / 1e3;
        r.mean_us = acc.calls > 0 ? acc.ns / (double)acc.calls / 1e3 : 0.0;
        r.share = t.step_us > 0 ? r.us_per_step / t.step_us : 0.0;
        const auto gb = gap_before.find(name);
        if (gb != gap_before.end()) {
            r.gap_before_us = gb->second.first / steps / 1e3;
            r.gaps_before = (double)gb->second.second / steps;
        }
        t.calls_per_step += r.calls_per_step;
        t.rows.push_back(r);
    }
    std::sort(t.rows.begin(), t.rows.end(), [&](const ProfileRow& a, const ProfileRow& b) {
        const double ka = t.timed ? a.us_per_step : a.calls_per_step, kb = t.timed ? b.us_per_step : b.calls_per_step;
        return ka != kb ? ka > kb : a.name < b.name;
    });
    if (cap.gemms_counted) {
        ProfileTable::Gemms& g = t.gemms;
        g.counted = true;
        for (const auto& [problem, c] : cap.gemms) {
            g.calls += (double)c.calls / steps;
            g.flops += c.flops / steps;
            g.bytes += c.bytes / steps;
            g.problems.push_back({problem, (double)c.calls / steps, c.flops / steps, c.bytes / steps});
        }
        std::stable_sort(g.problems.begin(), g.problems.end(),
                         [](const auto& a, const auto& b) { return a.flops > b.flops; });
        for (const ProfileRow& r : t.rows)
            if (library_kernel_row(r.name)) {
                g.us += r.us_per_step;
                g.kernel_calls += r.calls_per_step;
            }
    }
    return t;
}

// The table as printed: a header line, one line per row (at most max_rows; the rest summed in one
// line), and the step's totals last.
inline std::string profile_table_text(const ProfileTable& t, size_t max_rows = 40) {
    std::string out;
    char buf[512];
    std::snprintf(buf, sizeof buf, "profile of %d %s (%s)\n", t.steps, t.unit.c_str(), t.source.c_str());
    out += buf;
    if (t.timed)
        std::snprintf(buf, sizeof buf, "%10s %12s %10s %7s  %s\n", "calls/step", "us/step", "mean us", "share",
                      "kernel");
    else std::snprintf(buf, sizeof buf, "%10s  %s\n", "calls/step", "kernel");
    out += buf;
    ProfileRow rest;
    size_t rest_n = 0;
    for (size_t i = 0; i < t.rows.size(); i++) {
        const ProfileRow& r = t.rows[i];
        if (i >= max_rows) {
            rest.calls_per_step += r.calls_per_step;
            rest.us_per_step += r.us_per_step;
            rest.share += r.share;
            rest_n++;
            continue;
        }
        if (t.timed)
            std::snprintf(buf, sizeof buf, "%10.1f %12.1f %10.2f %6.1f%%  %s\n", r.calls_per_step, r.us_per_step,
                          r.mean_us, 100.0 * r.share, r.name.c_str());
        else std::snprintf(buf, sizeof buf, "%10.1f  %s\n", r.calls_per_step, r.name.c_str());
        out += buf;
    }
    if (rest_n > 0) {
        if (t.timed)
            std::snprintf(buf, sizeof buf, "%10.1f %12.1f %10s %6.1f%%  (%zu more kernels)\n", rest.calls_per_step,
                          rest.us_per_step, "", 100.0 * rest.share, rest_n);
        else std::snprintf(buf, sizeof buf, "%10.1f  (%zu more kernels)\n", rest.calls_per_step, rest_n);
        out += buf;
    }
    if (t.timed)
        std::snprintf(buf, sizeof buf,
                      "step %.1f us: some activity running %.1f us (%.1f%%), idle %.1f us (launch gaps, host work, "
                      "syncs); %.1f activities per step\n",
                      t.step_us, t.busy_us, t.step_us > 0 ? 100.0 * t.busy_us / t.step_us : 0.0, t.idle_us,
                      t.calls_per_step);
    else std::snprintf(buf, sizeof buf, "%.1f activities per step (not timed)\n", t.calls_per_step);
    out += buf;
    if (t.timed) {
        std::snprintf(buf, sizeof buf,
                      "idle per step: %.1f us before the first activity, %.1f us in %.1f gaps between activities "
                      "(%.1f over 5 us, the largest %.1f us), %.1f us after the last\n",
                      t.idle.lead_us, t.idle.inner_us, t.idle.inner_gaps, t.idle.inner_gaps_5us, t.idle.largest_gap_us,
                      t.idle.tail_us);
        out += buf;
        std::vector<const ProfileRow*> by_gap;
        for (const ProfileRow& r : t.rows)
            if (r.gap_before_us > 0) by_gap.push_back(&r);
        std::sort(by_gap.begin(), by_gap.end(), [](const ProfileRow* a, const ProfileRow* b) {
            return a->gap_before_us != b->gap_before_us ? a->gap_before_us > b->gap_before_us : a->name < b->name;
        });
        for (size_t i = 0; i < by_gap.size() && i < 5; i++) {
            std::snprintf(buf, sizeof buf, "  gaps before %s: %.1f us per step (%.1f gaps)\n", by_gap[i]->name.c_str(),
                          by_gap[i]->gap_before_us, by_gap[i]->gaps_before);
            out += buf;
        }
    }
    if (t.gemms.counted) {
        const ProfileTable::Gemms& g = t.gemms;
        std::snprintf(buf, sizeof buf,
                      "cuBLASLt per step: %.1f calls, %.3f GFLOP (2 m n k), %.4f GB of operands (each read or "
                      "written once)",
                      g.calls, g.flops / 1e9, g.bytes / 1e9);
        out += buf;
        if (t.timed && g.us > 0)
            std::snprintf(buf, sizeof buf, "; its kernels (%.1f launches) %.1f us: %.1f TFLOP/s, %.0f GB/s\n",
                          g.kernel_calls, g.us, g.flops / (g.us * 1e6), g.bytes / (g.us * 1e3));
        else std::snprintf(buf, sizeof buf, t.timed ? "; no cuBLASLt kernel timed\n" : " (not timed)\n");
        out += buf;
        for (const auto& p : g.problems) {
            std::snprintf(buf, sizeof buf, "  %6.1f calls %10.3f GFLOP  %s\n", p.calls, p.flops / 1e9, p.name.c_str());
            out += buf;
        }
    }
    if (t.dropped > 0) {
        std::snprintf(buf, sizeof buf, "WARNING: %llu activity records were dropped: the rows above undercount\n",
                      (unsigned long long)t.dropped);
        out += buf;
    }
    return out;
}

inline nlohmann::ordered_json profile_table_json(const ProfileTable& t) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const ProfileRow& r : t.rows) {
        nlohmann::ordered_json j = {{"kernel", r.name}, {"calls_per_step", r.calls_per_step}};
        if (t.timed) {
            j["us_per_step"] = r.us_per_step;
            j["mean_us"] = r.mean_us;
            j["share"] = r.share;
            j["gap_before_us"] = r.gap_before_us;
            j["gaps_before"] = r.gaps_before;
        }
        rows.push_back(j);
    }
    nlohmann::ordered_json j = {{"timed", t.timed},
                                {"source", t.source},
                                {"steps", t.steps},
                                {"activities_per_step", t.calls_per_step},
                                {"dropped_records", t.dropped}};
    if (t.timed) {
        j["step_us"] = t.step_us;
        j["busy_us"] = t.busy_us;
        j["idle_us"] = t.idle_us;
        j["idle_split"] = {{"lead_us", t.idle.lead_us},
                           {"inner_us", t.idle.inner_us},
                           {"tail_us", t.idle.tail_us},
                           {"inner_gaps", t.idle.inner_gaps},
                           {"inner_gaps_over_5us", t.idle.inner_gaps_5us},
                           {"largest_gap_us", t.idle.largest_gap_us}};
    }
    j["kernels"] = rows;
    if (t.gemms.counted) {
        const ProfileTable::Gemms& g = t.gemms;
        nlohmann::ordered_json problems = nlohmann::ordered_json::array();
        for (const auto& p : g.problems)
            problems.push_back({{"problem", p.name},
                                {"calls_per_step", p.calls},
                                {"flops_per_step", p.flops},
                                {"bytes_per_step", p.bytes}});
        nlohmann::ordered_json gj = {
            {"calls_per_step", g.calls}, {"flops_per_step", g.flops}, {"bytes_per_step", g.bytes}};
        if (t.timed) {
            gj["us_per_step"] = g.us;
            gj["kernel_launches_per_step"] = g.kernel_calls;
            gj["tflops"] = g.us > 0 ? g.flops / (g.us * 1e6) : 0.0;
            gj["gbps"] = g.us > 0 ? g.bytes / (g.us * 1e3) : 0.0;
        }
        gj["problems"] = problems;
        j["gemms"] = gj;
    }
    return j;
}

}  // namespace llmc
