// Device emulation, the warp-wide bitwise OR reduction, from NVIDIA's PTX ISA ("Parallel
// Synchronization and Communication Instructions: redux.sync"):
//   redux.sync.or.b32 d, a, membermask;   every thread named in membermask waits until all of them
//                                          have executed it with the same membermask, then each
//                                          receives d = the bitwise OR of a over those threads
// A thread absent from its own membermask, or threads naming different masks, are undefined on a
// GPU: the warp exchange (block.h) refuses both ("emulated device error: ..."). The ISA reduces over
// the non-exited threads of the mask; a lane of the mask that has exited is reported as a deadlock
// here (stricter: no kernel of ours calls it after lanes exit). sm_80+.
// test/gpu/test_redux.cu checks this reading of the ISA, on emulation and on a GPU. The wrapper
// that calls it is llmc::cuda::redux_sync_or_b32 (llmc/cuda/ptx.cuh).
#pragma once
#include <cstdint>
#include <cstring>

#include "dev/emu/block.h"

namespace llmc::emu {

inline uint32_t redux_sync_or_b32(uint32_t a, uint32_t membermask) {
    const char* op = "redux.sync.or.b32";
    WarpExchange x(membermask, &a, sizeof a, op);
    uint32_t d = 0u;
    for (int lane = 0; lane < kWarpSize; lane++) {
        if (!((membermask >> lane) & 1u)) continue;
        uint32_t v;
        std::memcpy(&v, x.payload(lane, op), sizeof v);
        d |= v;
    }
    return d;
}

}  // namespace llmc::emu
