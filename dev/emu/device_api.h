// Device emulation, the device-side names kernels use: threadIdx/blockIdx/blockDim/gridDim,
// __syncthreads, the warp shuffles (CUDA C++ Programming Guide, "Warp Shuffle Functions"), the
// round-to-nearest float intrinsics and __trap. Included by the emulated <cuda_runtime.h>.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "dev/emu/block.h"

#define threadIdx (::llmc::emu::cur_thread().thread_idx)
#define blockIdx (::llmc::emu::cur_block().block_idx)
#define blockDim (::llmc::emu::cur_block().block_dim)
#define gridDim (::llmc::emu::cur_block().grid_dim)
static constexpr int warpSize = 32;

inline void __syncthreads() { ::llmc::emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    const char nothing = 0;
    ::llmc::emu::WarpExchange(mask, &nothing, 1, "__syncwarp");
}

[[noreturn]] inline void __trap() {
    ::llmc::emu::BlockCtx& b = ::llmc::emu::cur_block();
    ::llmc::emu::device_fault("__trap() in " + b.where() + " by " + b.who(::llmc::emu::cur_thread()));
}

namespace llmc::emu {

// (out of line and cold: the message's strings are no locals of every shuffle; block.h says why)
[[noreturn, gnu::noinline, gnu::cold]] inline void shuffle_width_fault(const char* op, int width) {
    device_fault(std::string(op) + ": width " + std::to_string(width) + " is not a power of 2 in [1, 32]");
}

template <typename T>
inline T shuffle(unsigned mask, T var, int width, const char* op,
                 int (*source)(int lane, int arg, int width, bool* own), int arg) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= kWarpSlotBytes, "shuffle of this type");
    if (width < 1 || width > kWarpSize || (width & (width - 1)) != 0) shuffle_width_fault(op, width);
    WarpExchange x(mask, &var, sizeof(T), op);
    bool own = false;
    const int src = source(x.lane(), arg, width, &own);
    if (own) return var;
    T out;
    std::memcpy(&out, x.payload(src, op), sizeof(T));
    return out;
}

// Source lanes, as the Programming Guide defines them for a segment of `width` lanes.
inline int src_idx(int lane, int src_lane, int width, bool*) {
    return (lane & ~(width - 1)) + (src_lane & (width - 1));
}
inline int src_xor(int lane, int lane_mask, int width, bool* own) {
    const int src = lane ^ lane_mask;
    *own = src >= ((lane / width) + 1) * width;  // a later segment: the caller's own value
    return src;
}
inline int src_up(int lane, int delta, int width, bool* own) {
    *own = (lane & (width - 1)) - delta < 0;
    return lane - delta;
}
inline int src_down(int lane, int delta, int width, bool* own) {
    *own = (lane & (width - 1)) + delta >= width;
    return lane + delta;
}

}  // namespace llmc::emu

template <typename T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32) {
    return ::llmc::emu::shuffle(mask, var, width, "__shfl_sync", ::llmc::emu::src_idx, srcLane);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32) {
    return ::llmc::emu::shuffle(mask, var, width, "__shfl_xor_sync", ::llmc::emu::src_xor, laneMask);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return ::llmc::emu::shuffle(mask, var, width, "__shfl_up_sync", ::llmc::emu::src_up, (int)delta);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return ::llmc::emu::shuffle(mask, var, width, "__shfl_down_sync", ::llmc::emu::src_down, (int)delta);
}

// IEEE round-to-nearest single-precision operations (never contracted into an FMA). The host
// compiler gets -ffp-contract=off in the emulated build, so a*b+c is two roundings there too.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
// rsqrtf is approximate on a GPU (about 2 ulp); the emulation gives the correctly rounded value.
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }

// CUDA's integer and floating-point min/max overloads (math_functions.h) for device code.
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float min(float a, float b) { return fminf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
