// Device emulation, the non-bulk asynchronous copy from global to shared memory and its
// async-group completion, from NVIDIA's PTX ISA ("Data Movement and Conversion Instructions:
// cp.async", "cp.async.commit_group", "cp.async.wait_group / cp.async.wait_all" and "Completion
// Mechanisms for Asynchronous Copy Operations"):
//   cp.async.cg.shared.global [dst], [src], 16;              16 bytes from global src to shared dst
//   cp.async.cg.shared.global [dst], [src], 16, src-size;    src-size bytes, the rest of the 16 zeros
//   cp.async.commit_group;    the thread's copies not yet in a group become one new group (possibly empty)
//   cp.async.wait_group N;    waits until at most the N most recent groups are pending: every older
//                             group is complete; copies not yet committed are not waited for
//   cp.async.wait_all;        = cp.async.commit_group; cp.async.wait_group 0;
// Groups are per thread and complete in commit order; a copy's writes are visible to the issuing
// thread only once a wait covers it (other threads: after that, through a barrier).
//
// The emulation makes early use visible instead of lucky:
//   - at issue the 16 destination bytes are poisoned (0xFF: NaN in fp32 and bf16), so a thread that
//     reads them before the wait, or another thread that reads them before the issuing thread waited
//     and then met it at a barrier, reads NaN, not the right answer by chance;
//   - the copy happens at the wait that completes it: the source is read then, and must equal what
//     it was at issue ("modifying the source ... before the asynchronous operation completes"
//     is undefined), and the destination must still hold the poison (a store or another copy that
//     wrote it meanwhile raced with this one);
//   - two pending copies of a thread must not write overlapping bytes (the ISA gives them no order);
//   - dst must be 16 bytes of shared memory and src global memory (an emulated device allocation),
//     both 16-byte aligned (the ISA's "Addresses as Operands": naturally aligned to cp-size), and
//     src-size at most 16; with src-size 0 the source is not read and may be any aligned address;
//   - a thread that ends with copies not completed is an error (block.cpp: the ISA does not say
//     what happens to them, and no thread can legally read their result).
// A violation ends the run with "emulated device error: cp.async ..." naming the kernel, block and
// thread. The wrappers that call this are llmc::cuda::cp_async_* (llmc/cuda/ptx.cuh).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "dev/emu/block.h"
#include "dev/emu/device_state.h"
#include "dev/emu/shared_space.h"

namespace llmc::emu {

constexpr uint32_t kCpAsyncCgBytes = 16;  // .cg takes cp-size 16 only
constexpr unsigned char kPendingPoison = 0xFF;

[[noreturn]] inline void cp_async_fault(const char* op, const std::string& what) {
    BlockCtx& b = cur_block();
    device_fault(std::string(op) + " in " + b.where() + ": " + b.who(cur_thread()) + " " + what);
}
// cp_async_fault(op, message()), out of line and cold: the message's strings are then no locals of the
// copies' hot paths (block.h says why). `message` is a lambda with no captures that returns the text.
template <typename Message, typename... Args>
[[noreturn, gnu::noinline, gnu::cold]] void cp_async_fault_with(const char* op, Message message, Args... args) {
    cp_async_fault(op, message(args...));
}

// True when [p, p+bytes) lies in one allocation of global memory (cudaMalloc, or mapped cudaMallocHost).
inline bool in_global_memory(const void* p, size_t bytes) {
    DeviceState& d = device();
    std::lock_guard<std::mutex> lock(d.mu);
    const auto* a = d.find(p);
    return a && reinterpret_cast<uintptr_t>(p) + bytes <= a->first + a->second.bytes;
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes;  (src_bytes = 16: the form without src-size)
inline void cp_async_cg_shared_global(void* dst, const void* src, uint32_t src_bytes) {
    const char* op = "cp.async.cg.shared.global";
    const uint32_t cp = kCpAsyncCgBytes;
    if (src_bytes > cp)
        cp_async_fault_with(
            op,
            [](uint32_t given, uint32_t size) {
                return "gives src-size " + std::to_string(given) + ", above cp-size " + std::to_string(size) +
                       " (undefined behaviour per the PTX ISA)";
            },
            src_bytes, cp);
    if (reinterpret_cast<uintptr_t>(dst) % cp != 0 || reinterpret_cast<uintptr_t>(src) % cp != 0)
        cp_async_fault_with(
            op,
            [](const void* from, const void* to) {
                return "copies from " + address_text(from) + " to " + address_text(to) +
                       ": both addresses must be aligned to cp-size, 16 bytes";
            },
            src, dst);
    if (!in_shared_memory(cur_block(), dst, cp))
        cp_async_fault_with(
            op,
            [](const void* to) {
                return "has destination " + address_text(to) + ", which is not 16 bytes of shared memory";
            },
            dst);
    if (src_bytes > 0 && !in_global_memory(src, src_bytes))
        cp_async_fault_with(
            op,
            [](uint32_t bytes, const void* from) {
                return "reads " + std::to_string(bytes) + " bytes at " + address_text(from) +
                       ", which are not in one global-memory allocation";
            },
            src_bytes, src);
    AsyncCopyQueue& q = cur_thread().async_copies;
    auto* d = static_cast<unsigned char*>(dst);
    for (const PendingAsyncCopy& o : q.pending)
        if (d < o.dst + o.cp_bytes && o.dst < d + cp)
            cp_async_fault_with(
                op,
                [](const void* to, const void* pending) {
                    return "writes " + address_text(to) + ", which overlaps its pending copy to " +
                           address_text(pending) + " (no order between them: undefined per the PTX ISA)";
                },
                dst, (const void*)o.dst);
    PendingAsyncCopy c;
    c.dst = d;
    c.src = static_cast<const unsigned char*>(src);
    c.cp_bytes = cp;
    c.src_bytes = src_bytes;
    c.group = q.committed;  // the group the next commit_group makes
    if (src_bytes > 0) std::memcpy(c.src_at_issue, c.src, src_bytes);
    std::memset(d, kPendingPoison, cp);
    q.pending.push_back(c);
}

// Completes one pending copy: checks that nothing touched its source or destination meanwhile,
// then writes the destination.
inline void complete_async_copy(const PendingAsyncCopy& c, const char* op) {
    if (c.src_bytes > 0 && std::memcmp(c.src, c.src_at_issue, c.src_bytes) != 0)
        cp_async_fault_with(
            op,
            [](const void* from) {
                return "completes the copy from " + address_text(from) +
                       ", whose source changed after the cp.async (undefined per the PTX ISA)";
            },
            (const void*)c.src);
    for (uint32_t i = 0; i < c.cp_bytes; i++)
        if (c.dst[i] != kPendingPoison)
            cp_async_fault_with(
                op,
                [](const void* to) {
                    return "completes the copy to " + address_text(to) +
                           ", whose destination was written while the copy was pending (a race)";
                },
                (const void*)c.dst);
    if (c.src_bytes > 0) std::memcpy(c.dst, c.src, c.src_bytes);
    std::memset(c.dst + c.src_bytes, 0, c.cp_bytes - c.src_bytes);
}

inline void cp_async_commit_group() { cur_thread().async_copies.committed++; }

// cp.async.wait_group n: every group but the n most recent is complete afterwards.
inline void cp_async_wait_group(int n) {
    AsyncCopyQueue& q = cur_thread().async_copies;
    if (n < 0) cp_async_fault("cp.async.wait_group", "waits with N = " + std::to_string(n) + " (N >= 0)");
    if (q.committed <= (uint64_t)n) return;
    const uint64_t first_pending_group = q.committed - (uint64_t)n;
    size_t kept = 0;
    for (size_t i = 0; i < q.pending.size(); i++) {  // in issue order, so older groups first
        if (q.pending[i].group < first_pending_group) complete_async_copy(q.pending[i], "cp.async.wait_group");
        else q.pending[kept++] = q.pending[i];
    }
    q.pending.resize(kept);
}

inline void cp_async_wait_all() {
    cp_async_commit_group();
    cp_async_wait_group(0);
}

}  // namespace llmc::emu
