// Device emulation, grid dependency control (programmatic dependent launch), from NVIDIA's PTX ISA
// ("Parallel Synchronization and Communication Instructions: griddepcontrol") and the CUDA Runtime
// API (cudaLaunchAttributeProgrammaticStreamSerialization):
//   griddepcontrol.wait;                the thread waits until every prerequisite grid in flight has
//                                       completed and its memory operations are visible to this grid
//   griddepcontrol.launch_dependents;   the grids that depend on this one may be scheduled once every
//                                       CTA of this grid has executed it or completed; no memory
//                                       visibility, and no promise that they start early
// A grid launched with programmatic stream serialization may start before the previous kernel on its
// stream has completed; it resolves that dependency itself, with griddepcontrol.wait. The emulation
// runs the launches of a stream in issue order, each to its end, so a prerequisite grid has always
// completed when a grid starts: the wait returns at once, and launch_dependents changes nothing.
// What a GPU does differently cannot show here: a read of the previous kernel's output before the
// wait. So the emulation enforces the project's rule instead (stricter than the ISA, like the
// cp.async rule in cp_async.h): in a grid launched with programmatic serialization every thread
// executes griddepcontrol.wait before it ends (llmc/cuda/launch.cuh: the wait is each kernel's
// first statement). A thread that ends without it is reported ("emulated device error: ...") - on a
// GPU such a grid may read its predecessor's output too early, or complete before its predecessor,
// which lets the next kernel on the stream start too early. Both instructions need sm_90;
// test/gpu/test_griddep.cu checks the ordering on a GPU. The wrappers that call these are
// llmc::cuda::griddep_wait / griddep_launch_dependents (llmc/cuda/ptx.cuh).
#pragma once
#include "dev/emu/block.h"

namespace llmc::emu {

// griddepcontrol.wait;  every prerequisite grid has completed (issue order): records that the thread
// waited, which a programmatic grid's threads must have done when they end (block.cpp).
inline void griddepcontrol_wait() { cur_thread().waited_for_prerequisites = true; }

// griddepcontrol.launch_dependents;  nothing starts early in the emulation, so it has no effect (only a
// kernel thread may execute it).
inline void griddepcontrol_launch_dependents() { (void)cur_thread(); }

}  // namespace llmc::emu
