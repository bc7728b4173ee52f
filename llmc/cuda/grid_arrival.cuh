// The last block to arrive: lets one launch both write per-block partial results and reduce them,
// instead of a partial kernel followed by a final kernel. Every block of a group writes its
// partials and counts itself in; the block that counts last (whichever it is on the device) sums
// all of the group's partials in a fixed order, so the result has the same bits whatever the order
// in which the blocks ran (the emulation varies that order with the schedule: dev/emu/grid.h).
//
// The protocol, in every thread of every block of the group, once per launch:
//   partial stores -> fence.acq_rel.gpu (release) -> __syncthreads -> thread 0: fence, then
//   atom.global.add on the group's counter, and in the last block a fence after it (acquire) ->
//   __syncthreads -> the last block's threads read the partials (ordered after thread 0's acquire
//   by the barrier, as a grid-wide sync does it) and thread 0 puts the counter back to 0.
// The counter is one 32-bit word of global memory per group, 0 before the launch and 0 after it
// (the last block resets it), so stream-ordered launches can reuse it; two launches that may run at
// the same time must not share one. Every block of the group must call this (none may return
// early), else the count never completes and the reduction never runs.
#pragma once
#include <cstdint>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"

namespace llmc::cuda {

// True in every thread of the group's last block to arrive at *counter; group_blocks blocks count
// in on it. Call once per block, from all of its threads, after the block's partial stores.
__device__ inline bool arrive_last(uint32_t* counter, uint32_t group_blocks) {
    __shared__ uint32_t ticket;  // one call per launch: a second could overwrite it before all have read it
    const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
    fence_acq_rel_gpu();  // this thread's partial stores before the block counts in
    __syncthreads();
    if (leader) {
        fence_acq_rel_gpu();  // and, through the barrier, every thread's
        const uint32_t t = atom_add_global_u32(counter, 1u);
        if (t == group_blocks - 1) {
            fence_acq_rel_gpu();  // the other blocks' partials after their arrival (acquire)
            *counter = 0u;        // every block of the group has counted in: ready for the next launch
        }
        ticket = t;
    }
    __syncthreads();
    return ticket == group_blocks - 1;
}

}  // namespace llmc::cuda
