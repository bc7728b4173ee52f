// Explicit SIMD for the CPU kernels: GCC vector-extension types of a fixed byte width, the few
// lane operations the kernels need (load, store, splat, lane index, fixed-order reductions), and the
// run-time choice of the x86-64 instruction set.
//
// Run-time dispatch: the default build is for baseline x86-64 (SSE2), so a kernel that wants AVX2 or
// AVX-512 is compiled a second or third time inside a function marked LLMC_TARGET_AVX2 /
// LLMC_TARGET_AVX512, with every helper below inlined into it (always_inline), and isa_best() picks
// the widest twin this CPU runs (__builtin_cpu_supports). llmc/cpu/matmul.h does the same for its tiles.
// Results may differ in the last bits between ISAs (FMA contraction, lane count); within one ISA
// they are deterministic, and a machine always picks the same one.
//
// Widths: Base = 16 bytes (SSE2), Avx2 = 32 bytes (AVX2 + FMA), Avx512 = 64 bytes (AVX-512F).
// No lambda may take or return a vector inside such a kernel: a lambda is compiled for the
// baseline ISA, where a 32- or 64-byte vector crossing its call has another ABI (it crashed).
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define LLMC_SIMD_INLINE __attribute__((always_inline)) inline

// Vectors wider than the baseline ISA are returned by value only from always_inline functions, so
// no call ABI is involved; GCC's note that such an ABI changed (-Wpsabi) is silenced for the rest of
// the translation unit (a push/pop pair would not do: nvcc emits the template instantiations that
// trigger it after the header's end). Vector parameters are const references: GCC notes a 64-byte
// by-value parameter even then. No arithmetic on a value-initialized vector temporary (U{} + x):
// nvcc 13's device front end crashes on a 64-byte one (= {} initialization is fine).
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__GNUC__) && defined(__x86_64__)
#define LLMC_SIMD_X86 1
#define LLMC_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define LLMC_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#endif

namespace llmc {
namespace cpu {

enum class Isa { Base, Avx2, Avx512 };

inline const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        default: return "base";
    }
}

// Vector width in bytes of each ISA's twin.
constexpr int isa_bytes(Isa isa) { return isa == Isa::Avx512 ? 64 : isa == Isa::Avx2 ? 32 : 16; }

// Whether this CPU (and this build) runs the twin of `isa`.
inline bool isa_supported(Isa isa) {
    if (isa == Isa::Base) return true;
#ifdef LLMC_SIMD_X86
    if (isa == Isa::Avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

// The widest ISA whose twin runs here.
inline Isa isa_best() {
    if (isa_supported(Isa::Avx512)) return Isa::Avx512;
    if (isa_supported(Isa::Avx2)) return Isa::Avx2;
    return Isa::Base;
}

namespace simd {

// The vector of VB bytes of F, and the same-width vector of integers (comparison results).
template <typename F, int VB>
struct Vec {
    static_assert(VB % sizeof(F) == 0, "the width must hold whole lanes");
    static constexpr int lanes = VB / (int)sizeof(F);
    typedef F type __attribute__((vector_size(VB)));
    typedef std::conditional_t<sizeof(F) == 4, int32_t, int64_t> int_lane;
    typedef int_lane mask __attribute__((vector_size(VB)));
};

// Lane type and lane count of a vector type V.
template <typename V>
using lane_t = std::remove_cv_t<std::remove_reference_t<decltype(std::declval<V>()[0])>>;
template <typename V>
constexpr int lanes_of() {
    return (int)(sizeof(V) / sizeof(lane_t<V>));
}

template <typename V>
LLMC_SIMD_INLINE V load(const lane_t<V>* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
}
template <typename V>
LLMC_SIMD_INLINE void store(lane_t<V>* p, const V& v) {
    std::memcpy(p, &v, sizeof(V));
}
// Every lane = x. Written as x - 0 (exact for every x, -0 included), which compiles to a broadcast;
// a lane-by-lane fill does not on every target.
template <typename V>
LLMC_SIMD_INLINE V splat(lane_t<V> x) {
    const V zero = {};
    return x - zero;
}
// Lanes 0, 1, ..., L-1 as the vector's lane type.
template <typename T, int L>
constexpr std::array<T, L> iota_array() {
    std::array<T, L> a{};
    for (int i = 0; i < L; i++) a[i] = (T)i;
    return a;
}
template <typename V>
LLMC_SIMD_INLINE V lane_index() {
    static constexpr std::array<lane_t<V>, lanes_of<V>()> idx = iota_array<lane_t<V>, lanes_of<V>()>();
    V v;
    std::memcpy(&v, idx.data(), sizeof(V));
    return v;
}

// The integer vector of the same lane size and count as V (what a comparison of two V returns).
template <typename V>
using mask_of = typename Vec<lane_t<V>, (int)sizeof(V)>::mask;

// Shuffle indices of take_upper: lane i takes lane i + W for i < L - W, the others keep their own.
template <typename I, int L, int W>
constexpr std::array<I, L> upper_indices() {
    std::array<I, L> idx{};
    for (int i = 0; i < L; i++) idx[i] = (I)(i + W < L ? i + W : i);
    return idx;
}
// One step of a reduction: lane i takes lane i + W (a compile-time shuffle).
template <int W, typename V>
LLMC_SIMD_INLINE V take_upper(const V& v) {
    static constexpr std::array<lane_t<mask_of<V>>, lanes_of<V>()> idx =
        upper_indices<lane_t<mask_of<V>>, lanes_of<V>(), W>();
    mask_of<V> m;
    std::memcpy(&m, idx.data(), sizeof(m));
    return __builtin_shuffle(v, m);
}
// Max / min / sum of the lanes, as a halving tree (lane i with lane i + L/2, then i + L/4, ...):
// a fixed order, so the result depends only on the lane values.
template <typename V, int W = lanes_of<V>() / 2>
LLMC_SIMD_INLINE lane_t<V> hmax(const V& v) {
    if constexpr (W == 0) {
        return v[0];
    } else {
        const V u = take_upper<W>(v);
        return hmax<V, W / 2>(u > v ? u : v);
    }
}
template <typename V, int W = lanes_of<V>() / 2>
LLMC_SIMD_INLINE lane_t<V> hmin(const V& v) {
    if constexpr (W == 0) {
        return v[0];
    } else {
        const V u = take_upper<W>(v);
        return hmin<V, W / 2>(u < v ? u : v);
    }
}
template <typename V, int W = lanes_of<V>() / 2>
LLMC_SIMD_INLINE lane_t<V> hsum(const V& v) {
    if constexpr (W == 0) return v[0];
    else return hsum<V, W / 2>(v + take_upper<W>(v));
}

}  // namespace simd
}  // namespace cpu
}  // namespace llmc
