// Device emulation, a block's threads on their fibers (dev/emu/block.h): the scheduler loop of one
// block, the end of a grid's thread slots, and a warp collective's exchange (WarpExchange's arrival
// and its faults). Compiled once into libemu.a instead of into every emulated unit: none of these is
// small enough to be inlined where it is called; the thread-side accessors and the barrier stay
// inline in block.h.
#include "dev/emu/block.h"

#include <memory>
#include <random>

namespace llmc::emu {

WarpExchange::WarpExchange(unsigned mask, const void* data, size_t bytes, const char* op) {
    BlockCtx& b = cur_block();
    ThreadCtx& t = cur_thread();
    lane_ = t.linear % kWarpSize;
    warp_ = &b.warps[t.linear / kWarpSize];
    parity_ = (int)(t.warp_ops & 1);
    if (!(mask & (1u << lane_))) not_in_own_mask_fault(op, b, t, mask);
    // lanes beyond the block's last thread do not exist: a full mask in a partial warp hangs a GPU
    const int warp_base = (t.linear / kWarpSize) * kWarpSize;
    const int lanes = std::min<int>(kWarpSize, (int)b.threads.size() - warp_base);
    if (lanes < kWarpSize && (mask >> lanes) != 0) lanes_beyond_fault(op, b, t, mask, lanes);
    std::memcpy(warp_->slots[parity_][lane_], data, bytes);
    t.warp_mask = mask;
    t.state = ThreadState::AtWarp;
    warp_->arrived |= 1u << lane_;
    if ((warp_->arrived & mask) == mask) {
        for (int l = 0; l < kWarpSize; l++) {
            if (!(mask & (1u << l))) continue;
            ThreadCtx& o = b.threads[warp_base + l];
            if (o.warp_mask != mask) mask_mismatch_fault(op, b, o, t, mask);
            b.make_ready(o);
        }
        warp_->arrived &= ~mask;
    }
    yield_to_scheduler();
    t.warp_ops++;
    mask_ = mask;
}

[[noreturn]] void WarpExchange::not_in_own_mask_fault(const char* op, const BlockCtx& b, const ThreadCtx& t,
                                                      unsigned mask) {
    device_fault(std::string(op) + " in " + b.where() + ": " + b.who(t) + " is not in its own mask 0x" + hex(mask));
}
[[noreturn]] void WarpExchange::lanes_beyond_fault(const char* op, const BlockCtx& b, const ThreadCtx& t, unsigned mask,
                                                   int lanes) {
    device_fault(std::string(op) + " in " + b.where() + ": mask 0x" + hex(mask) + " names lanes beyond the " +
                 std::to_string(lanes) + " threads of warp " + std::to_string(t.linear / kWarpSize));
}
[[noreturn]] void WarpExchange::mask_mismatch_fault(const char* op, const BlockCtx& b, const ThreadCtx& o,
                                                    const ThreadCtx& t, unsigned mask) {
    device_fault(std::string(op) + " in " + b.where() + ": " + b.who(o) + " arrived with mask 0x" + hex(o.warp_mask) +
                 ", " + b.who(t) + " with 0x" + hex(mask) + " (every lane of a *_sync call must name the same mask)");
}
[[noreturn]] void WarpExchange::lane_outside_mask_fault(const char* op, int src, unsigned mask) {
    BlockCtx& b = cur_block();
    device_fault(std::string(op) + " in " + b.where() + ": " + b.who(cur_thread()) + " reads lane " +
                 std::to_string(src) + ", which is not in the mask 0x" + hex(mask) + " (undefined on a GPU)");
}
[[noreturn]] void WarpExchange::partial_aligned_fault(const char* op, unsigned mask) {
    BlockCtx& b = cur_block();
    device_fault(std::string(op) + " in " + b.where() + ": " + b.who(cur_thread()) +
                 " reads every lane under the mask 0x" + hex(mask) + " (a .aligned collective needs the whole warp)");
}

[[noreturn, gnu::noinline, gnu::cold]] static void ended_with_copies_fault(const BlockCtx& b, const ThreadCtx& t) {
    device_fault("cp.async in " + b.where() + ": " + b.who(t) + " ended while " +
                 std::to_string(t.async_copies.pending.size()) +
                 " of its cp.async copies were not complete (end every thread's copies with "
                 "cp.async.wait_group 0 or cp.async.wait_all before it returns)");
}
[[noreturn, gnu::noinline, gnu::cold]] static void ended_without_griddep_wait_fault(const BlockCtx& b,
                                                                                    const ThreadCtx& t) {
    device_fault("griddepcontrol in " + b.where() + ": " + b.who(t) +
                 " ended without griddepcontrol.wait in a grid launched with programmatic stream serialization "
                 "(on a GPU it may read its predecessor's output too early; begin the kernel with "
                 "llmc::cuda::griddep_begin(), or launch it without the attribute)");
}
[[noreturn, gnu::noinline, gnu::cold]] static void ended_at_barrier_fault(const BlockCtx& b, const ThreadCtx& t) {
    device_fault("barrier divergence in " + b.where() + ": " + b.who(t) + " ended while " +
                 std::to_string(b.at_barrier) + " threads wait at __syncthreads (a GPU hangs here)");
}

// A thread's fiber: the kernel once for each block of the grid that the scheduler runs it in (one
// fiber per thread slot for the whole grid: making a fiber per thread per block was a tenth of the
// emulated run time), until end_block_threads.
static void run_thread_of_grid(BlockCtx& b, ThreadCtx& t) {
    for (;;) {
        (*b.body)();
        // the PTX ISA makes a cp.async's result visible only after a wait that covers it; a
        // thread that ends before that has issued a copy nothing can legally read (the
        // emulation's rule, stricter than the ISA, which says nothing of a thread's end)
        if (!t.async_copies.pending.empty()) ended_with_copies_fault(b, t);
        if (b.programmatic && !t.waited_for_prerequisites) ended_without_griddep_wait_fault(b, t);
        t.state = ThreadState::Done;
        b.ended++;
        // a thread that ends while others wait at a barrier never arrives
        if (b.at_barrier > 0) ended_at_barrier_fault(b, t);
        t.fiber.yield();  // until this slot's thread of the next block, or the end of the grid
        if (b.grid_done) return;
    }
}

// Runs one block: every thread executes `body` (the kernel with its arguments) on its slot's fiber.
void run_block(BlockCtx& b, const std::function<void()>& body, const ScheduleSpec& sched, StackPool& stacks,
               uint64_t block_seq) {
    const int n = (int)b.threads.size();
    b.ended = 0;
    b.body = &body;
    for (int i = 0; i < n; i++) {
        ThreadCtx& t = b.threads[i];
        t.linear = i;
        t.thread_idx = uint3{(unsigned)(i % b.block_dim.x), (unsigned)((i / b.block_dim.x) % b.block_dim.y),
                             (unsigned)(i / (b.block_dim.x * b.block_dim.y))};
        t.state = ThreadState::Ready;
        t.warp_ops = 0;
        t.async_copies.pending.clear();
        t.async_copies.committed = 0;
        t.waited_for_prerequisites = false;
        // (two pointers: std::function holds them without a heap allocation)
        if (!t.fiber.started()) t.fiber.start(stacks, [bp = &b, tp = &t]() { run_thread_of_grid(*bp, *tp); });
    }
    const bool reversed = sched.kind == Schedule::Reverse || sched.kind == Schedule::GreedyReverse;
    const bool greedy = sched.kind == Schedule::GreedyForward || sched.kind == Schedule::GreedyReverse;
    std::vector<int>& order = b.order;
    order.resize(n);
    b.position.assign(n, 0);
    for (int i = 0; i < n; i++) {
        order[i] = reversed ? n - 1 - i : i;
        b.position[order[i]] = i;
    }
    b.restart = n;
    // (on the heap and for the shuffled schedule only: its 2.5 KB of state, seeded, and ASan's redzones
    // around it were a cost of every block of every schedule)
    std::unique_ptr<std::mt19937_64> rng;
    if (sched.kind == Schedule::Shuffle)
        rng = std::make_unique<std::mt19937_64>(sched.seed ^ (block_seq * 0x9E3779B97F4A7C15ULL));
    current().block = &b;
    int done = 0;
    while (done < n && greedy) {  // the first runnable thread in order, until every thread is done
        int k = 0;
        while (k < n && b.threads[order[k]].state != ThreadState::Ready) k++;
        if (k == n) break;  // nothing runnable: deadlock, reported below
        for (; k < n; k++) {
            ThreadCtx& t = b.threads[order[k]];
            if (t.state != ThreadState::Ready) continue;
            b.restart = n;
            current().thread = &t;
            t.fiber.resume();
            current().thread = nullptr;
            if (t.state == ThreadState::Done) done++;
            if (b.restart <= k) k = b.restart - 1;  // an earlier thread became runnable: it goes first
        }
    }
    while (done < n) {
        if (rng) std::shuffle(order.begin(), order.end(), *rng);
        bool progressed = false;
        for (int i : order) {
            ThreadCtx& t = b.threads[i];
            if (t.state != ThreadState::Ready) continue;
            progressed = true;
            current().thread = &t;
            t.fiber.resume();
            current().thread = nullptr;
            if (t.state == ThreadState::Done) done++;
        }
        if (!progressed && done < n) {
            std::string who;
            int listed = 0;
            for (const ThreadCtx& t : b.threads) {
                if (t.state == ThreadState::Done) continue;
                if (listed++ < 6)
                    who += "\n  " + b.who(t) +
                           (t.state == ThreadState::AtBarrier
                                ? " waits at __syncthreads"
                                : " waits in a warp collective with mask 0x" + WarpExchange::hex(t.warp_mask));
            }
            device_fault("deadlock in " + b.where() + ": " + std::to_string(n - done) + " threads wait, " +
                         std::to_string(done) + " ended; none can go on (a GPU hangs here):" + who +
                         (listed > 6 ? "\n  ..." : ""));
        }
    }
    current().block = nullptr;
}

// After the grid's last block: every thread slot's fiber returns, and its stack goes back to the pool.
void end_block_threads(BlockCtx& b) {
    b.grid_done = true;
    for (ThreadCtx& t : b.threads) {
        if (!t.fiber.started()) continue;
        current().thread = &t;
        t.fiber.resume();
        current().thread = nullptr;
    }
}

}  // namespace llmc::emu
