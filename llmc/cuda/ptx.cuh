// Inline PTX, one device function per instruction: the only place the kernels touch PTX, so that
// the emulated build (make emu) swaps in a twin written from NVIDIA's PTX ISA document
// (dev/emu/mma.h, dev/emu/ldmatrix.h, dev/emu/cp_async.h, dev/emu/ex2.h, dev/emu/tanh.h,
// dev/emu/redux.h, dev/emu/atomic.h, dev/emu/griddep.h) and nothing else changes.
// Shared-memory addresses are passed as generic pointers; on the GPU the wrapper converts them to
// the .shared window (__cvta_generic_to_shared), in the emulation the pointer is the address.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#ifdef LLMC_EMULATE
#include "dev/emu/atomic.h"
#include "dev/emu/cp_async.h"
#include "dev/emu/ex2.h"
#include "dev/emu/griddep.h"
#include "dev/emu/ldmatrix.h"
#include "dev/emu/mma.h"
#include "dev/emu/redux.h"
#include "dev/emu/tanh.h"
#endif

namespace llmc::cuda {

// c += A * B for one warp: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32. A (16x16 bf16,
// row-major) in a[4], B (16x8 bf16, column-major) in b0, b1, C/D (16x8 fp32) in c[4], each lane
// holding its fragment as the PTX ISA lays it out ("Matrix Fragments for mma.m16n8k16").
__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(LLMC_EMULATE)
    const uint32_t b[2] = {b0, b1};
    ::llmc::emu::mma_m16n8k16_row_col_f32_bf16_bf16_f32(c, a, b, c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();  // the host launcher only runs this path on sm_80+
#endif
}

// ---- ldmatrix: 8x8 matrices of 16-bit elements from shared memory into mma fragments ----------
// One warp, all 32 lanes: lane 8*m + j passes the address of row j (16 bytes, 16-byte aligned, in
// shared memory) of matrix m, m < the count (.x1: lanes 0-7, .x2: 0-15, .x4: all; the other lanes'
// addresses are ignored). r[m] receives this lane's fragment of matrix m: lane t holds elements
// (t/4, 2*(t%4)) in its low and (t/4, 2*(t%4)+1) in its high 16 bits ("ldmatrix fragment layout
// for one 8x8 Matrix with 16-bit elements"), the layout of an mma A or B fragment register. The
// .trans forms deliver the transposed matrices. Shared stores the rows depend on must be ordered
// before the call by __syncthreads / __syncwarp (the asm takes no "memory" clobber, like the
// loads the compiler schedules around it).
__device__ __forceinline__ void ldmatrix_x1(uint32_t (&r)[1], const void* smem_row) {
#if defined(LLMC_EMULATE)
    ::llmc::emu::ldmatrix_m8n8_b16(r, 1, false, smem_row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
#else
    __trap();  // ldmatrix needs sm_75+
#endif
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem_row) {
#if defined(LLMC_EMULATE)
    ::llmc::emu::ldmatrix_m8n8_b16(r, 2, false, smem_row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#else
    __trap();
#endif
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
#if defined(LLMC_EMULATE)
    ::llmc::emu::ldmatrix_m8n8_b16(r, 4, false, smem_row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    __trap();
#endif
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t (&r)[1], const void* smem_row) {
#if defined(LLMC_EMULATE)
    ::llmc::emu::ldmatrix_m8n8_b16(r, 1, true, smem_row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
#else
    __trap();
#endif
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem_row) {
#if defined(LLMC_EMULATE)
    ::llmc::emu::ldmatrix_m8n8_b16(r, 2, true, smem_row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#else
    __trap();
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
#if defined(LLMC_EMULATE)
    ::llmc::emu::ldmatrix_m8n8_b16(r, 4, true, smem_row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    __trap();
#endif
}

// ---- cp.async: 16 bytes from global to shared memory, completed per thread in groups ----------
// The copy runs in the background: its destination must not be read, nor its source written,
// until a cp.async.wait_group / wait_all of the issuing thread covers it; other threads see it
// after that wait and a barrier. Both addresses 16-byte aligned. The asm statements clobber
// "memory", so the compiler moves no load or store of ours across them.

// cp.async.cg.shared.global [smem_dst], [gmem_src], 16;
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
#if defined(LLMC_EMULATE)
    ::llmc::emu::cp_async_cg_shared_global(smem_dst, gmem_src, 16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(__cvta_generic_to_global(gmem_src))
                 : "memory");
#else
    __trap();  // cp.async needs sm_80+
#endif
}

// cp.async.cg.shared.global [smem_dst], [gmem_src], 16, src_bytes;  the first src_bytes (0..16)
// bytes from gmem_src, the rest of the 16 zeros: the ragged tail of a row. With src_bytes = 0
// nothing is read (gmem_src must still be 16-byte aligned).
__device__ __forceinline__ void cp_async_16_zfill(void* smem_dst, const void* gmem_src, uint32_t src_bytes) {
#if defined(LLMC_EMULATE)
    ::llmc::emu::cp_async_cg_shared_global(smem_dst, gmem_src, src_bytes);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(__cvta_generic_to_global(gmem_src)),
                 "r"(src_bytes)
                 : "memory");
#else
    __trap();
#endif
}

// cp.async.commit_group;  this thread's copies issued since its last commit become one group.
__device__ __forceinline__ void cp_async_commit_group() {
#if defined(LLMC_EMULATE)
    ::llmc::emu::cp_async_commit_group();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
    __trap();
#endif
}

// cp.async.wait_group N;  waits until at most this thread's N most recent groups are pending (all
// older ones complete). Copies not yet committed are not waited for.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    static_assert(N >= 0, "cp.async.wait_group takes N >= 0");
#if defined(LLMC_EMULATE)
    ::llmc::emu::cp_async_wait_group(N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
    __trap();
#endif
}

// cp.async.wait_all;  commits the uncommitted copies and waits for every copy of this thread.
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(LLMC_EMULATE)
    ::llmc::emu::cp_async_wait_all();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#else
    __trap();
#endif
}

// ---- ex2: the special-function unit's base-2 exponential ---------------------------------------
// ex2.approx.ftz.f32 d, a;  d approximates 2^a in one MUFU.EX2 (exp2f adds a range fix-up for
// subnormal results: three more instructions). .ftz: a subnormal a counts as 0 (d = 1) and a
// subnormal result is +0; ex2(-Inf) = +0, ex2(+Inf) = +Inf, ex2(NaN) = NaN.
__device__ __forceinline__ float ex2_approx_ftz(float a) {
#if defined(LLMC_EMULATE)
    return ::llmc::emu::ex2_approx_ftz_f32(a);
#elif defined(__CUDA_ARCH__)
    float d;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(d) : "f"(a));
    return d;
#else
    __trap();
    return a;
#endif
}

// ---- tanh: the special-function unit's hyperbolic tangent ---------------------------------------
// tanh.approx.f32 d, a;  d approximates tanh(a) in one MUFU.TANH (tanhf: ~20 instructions and a
// branch), relative error at most 2^-11 over the whole range (the PTX ISA); tanh(+-Inf) = +-1,
// tanh(+-0) = +-0, tanh(NaN) = NaN, subnormal inputs pass through. sm_75+.
__device__ __forceinline__ float tanh_approx(float a) {
#if defined(LLMC_EMULATE)
    return ::llmc::emu::tanh_approx_f32(a);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    float d;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(d) : "f"(a));
    return d;
#else
    __trap();
    return a;
#endif
}

// ---- redux: a warp-wide bitwise OR -------------------------------------------------------------
// redux.sync.or.b32 d, a, membermask;  each thread named in membermask (every one of them executing
// it with the same membermask, the caller among them) receives the OR of a over those threads. One
// REDUX, its result in a uniform register (a 5-step shuffle tree takes ~10 instructions). sm_80+.
__device__ __forceinline__ uint32_t redux_sync_or_b32(uint32_t a, uint32_t membermask) {
#if defined(LLMC_EMULATE)
    return ::llmc::emu::redux_sync_or_b32(a, membermask);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t d;
    asm volatile("redux.sync.or.b32 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(membermask));
    return d;
#else
    __trap();
    return a;
#endif
}

// ---- grid-wide ordering: the atomic counter and the fence of a "last block" reduction ----------
// atom.global.add.u32 d, [a], b;  atomically adds b to the 32-bit word at a (global memory, 4-byte
// aligned; the sum wraps mod 2^32) and returns the word's value before the add. Relaxed: it
// orders nothing by itself; pair it with fence_acq_rel_gpu (llmc/cuda/grid_arrival.cuh).
__device__ __forceinline__ uint32_t atom_add_global_u32(uint32_t* a, uint32_t b) {
#if defined(LLMC_EMULATE)
    return ::llmc::emu::atom_global_add_u32(a, b);
#elif defined(__CUDA_ARCH__)
    uint32_t d;
    asm volatile("atom.global.add.u32 %0, [%1], %2;\n" : "=r"(d) : "l"(__cvta_generic_to_global(a)), "r"(b) : "memory");
    return d;
#else
    __trap();
    return b;
#endif
}

// fence.acq_rel.gpu;  this thread's memory accesses before the fence are ordered before its
// accesses after it, for every thread of the GPU (release and acquire at GPU scope).
__device__ __forceinline__ void fence_acq_rel_gpu() {
#if defined(LLMC_EMULATE)
    ::llmc::emu::fence_acq_rel_gpu();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
#else
    __trap();  // fence.acq_rel needs sm_70+
#endif
}

// ---- grid dependency control (programmatic dependent launch, sm_90+) -----------------------------
// griddepcontrol.wait;  the thread waits until every prerequisite grid (the kernel before this one on
// its stream, when this one was launched with programmatic stream serialization: launch_kernel with a
// programmatic LaunchStream, llmc/cuda/launch.cuh) has completed and its memory operations are
// visible. In a grid launched without that attribute it returns at once. Every kernel of the
// backend executes it first, in every thread, before it touches global memory.
__device__ __forceinline__ void griddep_wait() {
#if defined(LLMC_EMULATE)
    ::llmc::emu::griddepcontrol_wait();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    // below sm_90 there is no programmatic launch (the host never asks for one): nothing to wait for
}

// griddepcontrol.launch_dependents;  the kernel after this one on the stream, if launched with
// programmatic stream serialization, may be scheduled once every block of this grid has executed
// this or ended (it then waits in griddep_wait). No memory ordering; a hint, no promise.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(LLMC_EMULATE)
    ::llmc::emu::griddepcontrol_launch_dependents();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

// Every kernel's first statement: wait for the previous kernel on the stream (programmatic launch
// only; else at once), then let the next one be scheduled. After it the kernel may read and write
// what earlier kernels wrote or still read.
__device__ __forceinline__ void griddep_begin() {
    griddep_wait();
    griddep_launch_dependents();
}

// ---- a value the front end may not rewrite ------------------------------------------------------
// An empty inline-PTX statement that reads and writes x: no instruction, and ptxas still sees the
// value, but NVVM (the C++ front end) does not. So NVVM cannot recompute x from its inputs inside
// each branch that uses it (it keeps one register), nor rewrite a bit test (w & (x << k)) != 0 with
// x = 1 into a shift and a compare of the shifted bit (ptxas, seeing the 1, turns the test into one
// LOP3 or a share of an R2P). The emulation returns x.
__device__ __forceinline__ uint32_t opaque_u32(uint32_t x) {
#if defined(__CUDA_ARCH__) && !defined(LLMC_EMULATE)
    asm volatile("" : "+r"(x));
#endif
    return x;
}

}  // namespace llmc::cuda
