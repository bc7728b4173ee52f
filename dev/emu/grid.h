// Device emulation, a kernel launch: the launch configuration checked against the real device's
// limits (what would make cudaLaunchKernel fail fails here, with the same error code from
// cudaGetLastError and a line naming the kernel), then every block of the grid run one after
// another, in the schedule's block order, once per schedule in device().schedules; when there are
// several, memory is restored between runs and the results must be bit-identical, else the kernel
// has a race or a missing barrier and the run ends naming it (the emulated counterpart of
// compute-sanitizer's racecheck). Rule: the launch functions are defined once, in dev/emu/grid.cpp
// (libemu.a), not inline: every emulated unit that launches a kernel includes this header.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dev/emu/block.h"
#include "dev/emu/device_state.h"

namespace llmc::emu {

// Why the configuration cannot launch on the device ("" = it can), and the error it gets.
std::string launch_config_error(const void* fn, dim3 grid, dim3 block, size_t smem, cudaError_t* code);

// Runs every block of the grid once under `sched`, in the schedule's block order; body() is the kernel
// with its arguments.
void run_grid_once(const std::string& name, dim3 grid, dim3 block, size_t smem, const std::function<void()>& body,
                   const ScheduleSpec& sched, bool programmatic);

// What a launch can write: the device allocations its pointer arguments point into. A kernel
// reaches memory only through its arguments (the project's kernels have no __device__ globals), so
// the schedule comparison needs to snapshot only these. An argument of class type (which could hold
// pointers) makes the footprint "everything": every allocation is compared.
struct LaunchFootprint {
    std::vector<const void*> pointers;
    bool everything = false;
};
template <typename T>
void add_to_footprint(LaunchFootprint& f, const T& arg) {
    if constexpr (std::is_pointer_v<T>) f.pointers.push_back(reinterpret_cast<const void*>(arg));
    else if constexpr (!std::is_arithmetic_v<T> && !std::is_enum_v<T>) f.everything = true;
}
template <typename... A>
LaunchFootprint launch_footprint(const A&... args) {
    LaunchFootprint f;
    (add_to_footprint(f, args), ...);
    return f;
}

// Copies of the device allocations in the footprint (base address -> bytes), in address order.
std::vector<std::pair<uintptr_t, std::vector<unsigned char>>> snapshot_footprint(const LaunchFootprint& f);
void restore_footprint(const std::vector<std::pair<uintptr_t, std::vector<unsigned char>>>& s);

// Runs a launch now: checks its configuration (an error is reported as cudaGetLastError would), then
// runs the grid under every schedule and compares what they leave in the footprint. programmatic:
// launched with programmatic stream serialization (griddep.h).
void run_grid_now(const void* fn, dim3 grid, dim3 block, size_t smem, const std::function<void()>& body,
                  const LaunchFootprint& footprint, bool programmatic);

// A launch on `stream` (llmc/cuda/launch.cuh; programmatic: with programmatic stream serialization,
// griddep.h): run now, or, while the stream captures, recorded with
// body (which holds the kernel's arguments by value, as a captured launch's parameters are copied
// when it is captured) and run by each cudaGraphLaunch of the graph.
// A launch on the legacy default stream while a stream captures is an error (the capture is
// invalidated); a captured launch's configuration is checked when it is captured, as the launch's
// error would be reported then.
void run_grid(const void* fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool programmatic,
              std::function<void()> body, LaunchFootprint footprint);

}  // namespace llmc::emu
