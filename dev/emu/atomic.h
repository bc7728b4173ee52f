// Device emulation, the global-memory atomic add and the GPU-scope fence, from NVIDIA's PTX ISA
// ("Parallel Synchronization and Communication Instructions: atom" and "membar / fence", with the
// "Memory Consistency Model" chapter):
//   atom.global.add.u32 d, [a], b;   atomically: d = *a; *a = *a + b (mod 2^32); d is the value
//                                    *a held before the add; a: 4-byte aligned, in global memory
//   fence.acq_rel.gpu;               orders this thread's memory accesses before the fence against
//                                    those after it for every observer on the GPU (a release and
//                                    an acquire fence: what the "last block" pattern needs)
// The emulation runs a grid's blocks one after another and a block's threads one at a time
// (block.h), and every store lands in host memory at once: its memory is sequentially
// consistent, so the atomic is a read-modify-write no other thread can interleave with and the
// fence has nothing to order. What a fence prevents on a GPU (a block that counts itself in
// before its stores are visible to the last one) therefore cannot show here: the fence's
// presence is checked statically (dev/cuda/sass_report's grid_ordering, required by
// test/test_sass_report.py; docs/emulation.md), and the GPU run of test/gpu/test_grid_arrival.cu
// is its test. The block order does vary with the schedule (grid.h), so code that depends on which
// block arrives last does show.
// A violation of the ISA's operand rules ends the run with "emulated device error: atom ...".
// The wrappers that call these are llmc::cuda::atom_add_global_u32 / fence_acq_rel_gpu (llmc/cuda/ptx.cuh).
#pragma once
#include <cstdint>
#include <string>

#include "dev/emu/block.h"
#include "dev/emu/cp_async.h"  // in_global_memory

namespace llmc::emu {

// atom.global.add.u32 d, [a], b;
inline uint32_t atom_global_add_u32(uint32_t* a, uint32_t b) {
    if (reinterpret_cast<uintptr_t>(a) % 4 != 0 || !in_global_memory(a, 4)) {
        BlockCtx& blk = cur_block();
        device_fault("atom.global.add.u32 in " + blk.where() + ": " + blk.who(cur_thread()) +
                     " passed an address that is not 4 aligned bytes of global memory (a device allocation)");
    }
    return __atomic_fetch_add(a, b, __ATOMIC_SEQ_CST);  // unsigned: wraps mod 2^32
}

// fence.acq_rel.gpu;  nothing to order in a sequentially consistent emulation (above); only a
// kernel thread may execute it.
inline void fence_acq_rel_gpu() { (void)cur_thread(); }

}  // namespace llmc::emu
