// Device emulation, the execution of one thread block: its threads as cooperative fibers
// (Boost.Context fibers with AddressSanitizer's fiber-switch annotations; see Fiber below), a real
// __syncthreads barrier, warp-synchronous exchanges among the 32 lanes of a warp (the basis of
// __shfl*_sync, mma.sync and ldmatrix), each thread's pending cp.async copies, a schedule that
// decides the order in which runnable threads go on, and deadlock / barrier-divergence reports
// naming the kernel, the block and the threads.
//
// Design after ROCm's HIP-CPU (a block's threads as fibers that run until they reach a barrier),
// written here for CUDA's names and for what the project's tests need (schedules, diagnostics).
// Part of the emulated build only (make emu, -DLLMC_EMULATE); see docs/emulation.md.
// Rule: what runs once per block (run_block, the checks at a thread's end) and a warp collective's
// exchange (WarpExchange's constructor, the faults) are defined in dev/emu/block.cpp (libemu.a);
// the small accessors a thread calls while it runs and the barrier stay inline here.
//
// Execution model: the threads of a block run one at a time on the host thread that runs the
// block. A thread runs until it reaches __syncthreads, a warp collective, or its end; then the
// scheduler resumes the next runnable thread in the schedule's order (forward, reverse or a seeded
// shuffle). Between two synchronization points the order of threads is therefore the schedule's,
// which is what makes a missing barrier or a race visible: the same launch under two schedules
// gives different memory (grid.cpp's run_grid_now compares them).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>  // std::allocator_arg (the fibers' preallocated stacks)
#include <string>
#include <vector>

#include <boost/context/fiber.hpp>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include <vector_types.h>

namespace llmc::emu {

// Round-robin schedules resume every runnable thread once per pass, in thread order (Forward),
// reverse order (Reverse) or a seeded random order per pass (Shuffle): warps stay close to lock
// step. Greedy schedules always resume the first runnable thread in thread order (GreedyForward)
// or reverse order (GreedyReverse): warp 0 (or the last warp) runs ahead to the next
// __syncthreads before any other warp moves, the largest skew between warps a GPU may show, which
// is what exposes a missing __syncthreads between a shared-memory read and the next overwrite.
// The schedule also orders the grid's blocks (grid.cpp: forward, reverse, or shuffled).
enum class Schedule { Forward, Reverse, Shuffle, GreedyForward, GreedyReverse };

struct ScheduleSpec {
    Schedule kind = Schedule::Forward;
    uint64_t seed = 0;  // Shuffle only
    std::string name() const {
        switch (kind) {
            case Schedule::Forward: return "forward";
            case Schedule::Reverse: return "reverse";
            case Schedule::GreedyForward: return "greedy-forward";
            case Schedule::GreedyReverse: return "greedy-reverse";
            default: return "shuffle:" + std::to_string(seed);
        }
    }
};

// Reports a misuse of the device that a GPU would hang or fault on, and ends the process.
[[noreturn]] inline void device_fault(const std::string& what) {
    std::fflush(stdout);
    std::fprintf(stderr, "emulated device error: %s\n", what.c_str());
    std::fflush(stderr);
    std::abort();
}

constexpr int kWarpSize = 32;
constexpr size_t kWarpSlotBytes = 64;  // the largest per-lane payload of a warp collective (mma: 40)

// Fiber stacks, reused across blocks and launches (allocating one per thread per block would
// dominate the run time). Sized for kernels' register arrays with AddressSanitizer's redzones.
class StackPool {
public:
#if defined(__SANITIZE_ADDRESS__)
    static constexpr size_t kStackBytes = 512 * 1024;
#else
    static constexpr size_t kStackBytes = 128 * 1024;
#endif
    void* get() {
        if (!free_.empty()) {
            void* p = free_.back();
            free_.pop_back();
            return p;
        }
        void* p = std::malloc(kStackBytes);
        if (!p) device_fault("out of host memory for fiber stacks");
        return p;
    }
    void put(void* p) { free_.push_back(p); }
    ~StackPool() {
        for (void* p : free_) std::free(p);
    }

private:
    std::vector<void*> free_;
};

// A cooperative fiber: Boost.Context's fiber (fcontext: a switch is a few instructions, no system
// call), on a stack from the pool, with AddressSanitizer's fiber-switch annotations
// (__sanitizer_start/finish_switch_fiber) placed at every switch here, because Debian's
// libboost-context is built for fcontext, which does not annotate them itself (its ucontext
// flavour does, but needs a library built for it, and swapcontext costs two system calls per
// switch: 12 s for a million-thread kernel instead of a fraction of one).
class Fiber {
public:
    Fiber() = default;
    Fiber(const Fiber&) = delete;
    Fiber& operator=(const Fiber&) = delete;
    // Movable only before start() (so that a vector of threads can be sized); a started fiber is
    // referred to by its own context.
    Fiber(Fiber&& o) noexcept {
        if (o.stack_) device_fault("internal: a started fiber was moved");
    }
    // Prepares the fiber to run fn() on a stack from pool (returned when the fiber ends).
    void start(StackPool& pool, std::function<void()> fn) {
        pool_ = &pool;
        stack_ = pool.get();
        fn_ = std::move(fn);
        done_ = false;
        self_ = boost::context::fiber(std::allocator_arg, Preallocated{stack_}, [this](boost::context::fiber&& caller) {
            caller_ = std::move(caller);
            after_switch_in(nullptr);
            fn_();
            done_ = true;
            before_switch_out(nullptr);  // this stack ends
            return std::move(caller_);
        });
    }
    // From the scheduler: runs the fiber until it yields or ends.
    void resume() {
#if defined(__SANITIZE_ADDRESS__)
        void* fake = nullptr;
        __sanitizer_start_switch_fiber(&fake, stack_, StackPool::kStackBytes);
#endif
        self_ = std::move(self_).resume();
#if defined(__SANITIZE_ADDRESS__)
        __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
        if (done_ && stack_) {
            pool_->put(stack_);
            stack_ = nullptr;
        }
    }
    // From inside the fiber: back to the scheduler.
    void yield() {
        before_switch_out(&fake_stack_);
        caller_ = std::move(caller_).resume();
        after_switch_in(fake_stack_);
    }
    bool done() const { return done_; }
    // Started and not yet ended (it holds a stack from the pool).
    bool started() const { return stack_ != nullptr; }

private:
    struct Preallocated {  // Boost.Context's StackAllocator over one pooled stack
        void* p;
        boost::context::stack_context allocate() {
            boost::context::stack_context sc;
            sc.size = StackPool::kStackBytes;
            sc.sp = static_cast<char*>(p) + StackPool::kStackBytes;
            return sc;
        }
        void deallocate(boost::context::stack_context&) {}  // the pool owns it
    };
    void before_switch_out(void** fake) {
#if defined(__SANITIZE_ADDRESS__)
        __sanitizer_start_switch_fiber(fake, caller_bottom_, caller_size_);
#else
        (void)fake;
#endif
    }
    void after_switch_in(void* fake) {
#if defined(__SANITIZE_ADDRESS__)
        __sanitizer_finish_switch_fiber(fake, &caller_bottom_, &caller_size_);
#else
        (void)fake;
#endif
    }
    boost::context::fiber self_, caller_;
    StackPool* pool_ = nullptr;
    void* stack_ = nullptr;
    std::function<void()> fn_;
    bool done_ = true;
    void* fake_stack_ = nullptr;
    const void* caller_bottom_ = nullptr;
    size_t caller_size_ = 0;
};

enum class ThreadState { Ready, AtBarrier, AtWarp, Done };

// One cp.async a thread has issued and not yet completed. What the copies mean (groups, waits,
// the poisoned destination) is dev/emu/cp_async.h; the block only refuses a thread that ends
// with copies still pending (run_block).
struct PendingAsyncCopy {
    unsigned char* dst = nullptr;        // in shared memory, cp_bytes long
    const unsigned char* src = nullptr;  // in global memory, src_bytes long (0: not read)
    uint32_t cp_bytes = 0, src_bytes = 0;
    uint64_t group = 0;                   // the thread's cp.async-group (== committed: not committed yet)
    unsigned char src_at_issue[16] = {};  // the source when issued: it must not change before completion
};
struct AsyncCopyQueue {
    std::vector<PendingAsyncCopy> pending;  // in issue order
    uint64_t committed = 0;                 // cp.async.commit_group calls so far (groups 0 .. committed-1)
};

struct ThreadCtx {
    uint3 thread_idx{0, 0, 0};
    int linear = 0;  // x + y*Dx + z*Dx*Dy: lane = linear % 32, warp = linear / 32
    ThreadState state = ThreadState::Ready;
    unsigned warp_mask = 0;                 // the mask of the warp collective it waits in
    uint64_t warp_ops = 0;                  // warp collectives it has completed (selects the exchange buffer)
    AsyncCopyQueue async_copies;            // its cp.async copies not yet completed (cp_async.h)
    bool waited_for_prerequisites = false;  // it executed griddepcontrol.wait (griddep.h)
    Fiber fiber;                            // the thread itself
};

struct WarpCtx {
    unsigned arrived = 0;
    unsigned char slots[2][kWarpSize][kWarpSlotBytes];  // exchange buffers, double-buffered by parity
};

struct BlockCtx {
    std::string kernel;
    dim3 grid_dim, block_dim;
    uint3 block_idx{0, 0, 0};
    std::vector<ThreadCtx> threads;
    std::vector<WarpCtx> warps;
    int at_barrier = 0;
    int ended = 0;              // threads that have returned from the kernel (ThreadState::Done)
    std::vector<int> order;     // the schedule's order of the threads (kept across blocks)
    std::vector<int> position;  // each thread's place in the schedule's order
    int restart = 0;            // greedy schedules: the smallest position made runnable since the last look
    unsigned char* dynamic_smem = nullptr;
    // The kernel with its arguments, and whether the grid has run its last block: each thread's fiber
    // runs `body` once per block of the grid and ends with the grid (run_block, end_block_threads).
    const std::function<void()>* body = nullptr;
    bool grid_done = false;
    // Launched with programmatic stream serialization: each thread must execute griddepcontrol.wait
    // before it ends (griddep.h).
    bool programmatic = false;

    void make_ready(ThreadCtx& t);
    size_t dynamic_smem_bytes = 0;

    std::string where() const {
        char b[160];
        std::snprintf(b, sizeof b, "kernel %s, block (%u,%u,%u) of grid (%u,%u,%u), %zu threads", kernel.c_str(),
                      block_idx.x, block_idx.y, block_idx.z, grid_dim.x, grid_dim.y, grid_dim.z, threads.size());
        return b;
    }
    std::string who(const ThreadCtx& t) const {
        char b[96];
        std::snprintf(b, sizeof b, "thread (%u,%u,%u) [warp %d lane %d]", t.thread_idx.x, t.thread_idx.y,
                      t.thread_idx.z, t.linear / kWarpSize, t.linear % kWarpSize);
        return b;
    }
};

inline void BlockCtx::make_ready(ThreadCtx& t) {
    t.state = ThreadState::Ready;
    restart = std::min(restart, position[t.linear]);
}

// The block and thread running on this host thread (set by run_block; read by threadIdx & co.).
struct Current {
    BlockCtx* block = nullptr;
    ThreadCtx* thread = nullptr;
};
inline Current& current() {
    static thread_local Current c;
    return c;
}
inline BlockCtx& cur_block() {
    BlockCtx* b = current().block;
    if (!b) device_fault("a device builtin (threadIdx, __syncthreads, ...) was used outside a kernel");
    return *b;
}
inline ThreadCtx& cur_thread() {
    ThreadCtx* t = current().thread;
    if (!t) device_fault("a device builtin (threadIdx, __syncthreads, ...) was used outside a kernel");
    return *t;
}

// Suspends the running thread; the scheduler resumes it when its state is Ready again.
inline void yield_to_scheduler() {
    ThreadCtx& t = cur_thread();
    t.fiber.yield();
    current().thread = &t;  // resumed by the scheduler, which set it too; keep it explicit
}

// The faults of the hot paths (barriers, warp collectives) are out of line and cold: the strings of
// their messages would otherwise be locals of every call, whose stack redzones ASan poisons and
// unpoisons on each one.
[[noreturn, gnu::noinline, gnu::cold]] inline void barrier_divergence_fault(const BlockCtx& b) {
    for (const ThreadCtx& o : b.threads)
        if (o.state == ThreadState::Done)
            device_fault("barrier divergence in " + b.where() + ": " + b.who(o) +
                         " ended without reaching the __syncthreads that " + std::to_string(b.at_barrier) +
                         " threads reached (a GPU hangs or misbehaves here)");
    device_fault("internal: barrier divergence without an ended thread in " + b.where());
}

// __syncthreads: every thread of the block must arrive; one that ended instead is an error.
inline void block_barrier() {
    BlockCtx& b = cur_block();
    ThreadCtx& t = cur_thread();
    t.state = ThreadState::AtBarrier;
    b.at_barrier++;
    if (b.ended > 0) barrier_divergence_fault(b);
    if (b.at_barrier == (int)b.threads.size()) {
        b.at_barrier = 0;
        for (ThreadCtx& o : b.threads) b.make_ready(o);
    }
    yield_to_scheduler();
}

// A warp-synchronous exchange: the calling lane publishes `bytes` of `data`, waits until every
// lane of `mask` has arrived (with the same mask), and may then read any of those lanes' payloads
// through the returned accessor until its next warp collective.
class WarpExchange {
public:
    // (dev/emu/block.cpp: once per lane per collective, not inline in every unit)
    WarpExchange(unsigned mask, const void* data, size_t bytes, const char* op);
    // The payload lane `src` published (src must be in the mask).
    const unsigned char* payload(int src, const char* op) const {
        if (src < 0 || src >= kWarpSize || !(mask_ & (1u << src))) lane_outside_mask_fault(op, src, mask_);
        return warp_->slots[parity_][src];
    }
    // Every lane's payload (slot l is lane l's), for the .aligned collectives, whose mask must be the
    // whole warp: one check instead of one per lane read.
    const unsigned char (*all_payloads(const char* op) const)[kWarpSlotBytes] {
        if (mask_ != 0xffffffffu) partial_aligned_fault(op, mask_);
        return warp_->slots[parity_];
    }
    int lane() const { return lane_; }

    static std::string hex(unsigned v) {
        char b[16];
        std::snprintf(b, sizeof b, "%08x", v);
        return b;
    }

private:
    // the collectives' faults (dev/emu/block.cpp)
    [[noreturn, gnu::noinline, gnu::cold]] static void not_in_own_mask_fault(const char* op, const BlockCtx& b,
                                                                             const ThreadCtx& t, unsigned mask);
    [[noreturn, gnu::noinline, gnu::cold]] static void lanes_beyond_fault(const char* op, const BlockCtx& b,
                                                                          const ThreadCtx& t, unsigned mask, int lanes);
    [[noreturn, gnu::noinline, gnu::cold]] static void mask_mismatch_fault(const char* op, const BlockCtx& b,
                                                                           const ThreadCtx& o, const ThreadCtx& t,
                                                                           unsigned mask);
    [[noreturn, gnu::noinline, gnu::cold]] static void lane_outside_mask_fault(const char* op, int src, unsigned mask);
    [[noreturn, gnu::noinline, gnu::cold]] static void partial_aligned_fault(const char* op, unsigned mask);

    WarpCtx* warp_ = nullptr;
    int lane_ = 0, parity_ = 0;
    unsigned mask_ = 0;
};

// Runs one block: every thread executes `body` (the kernel with its arguments) on its slot's fiber
// (dev/emu/block.cpp). block_seq: the block's place in the schedule's order (mixed into the seed of
// the shuffled schedule's thread order for this block).
void run_block(BlockCtx& b, const std::function<void()>& body, const ScheduleSpec& sched, StackPool& stacks,
               uint64_t block_seq);

// After the grid's last block: every thread slot's fiber returns, and its stack goes back to the pool.
void end_block_threads(BlockCtx& b);

}  // namespace llmc::emu
