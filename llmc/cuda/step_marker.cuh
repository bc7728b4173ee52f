// The host-side seam between the training loop's optimizer steps and the machine that runs them:
// mark_step(step, begin) at the start and at the end of each step (CudaBackend::on_step_begin /
// on_step_end). Under nvcc it does nothing. In the emulated build (docs/emulation.md) it closes the
// emulated device's current counting interval, so LLMC_EMU_REPORT gets the launches, copies and
// host synchronisations of each step (dev/emu/step_counters.h).
#pragma once

#ifdef LLMC_EMULATE
#include "dev/emu/device_state.h"
#endif

namespace llmc::cuda {

// step: the 1-based optimizer step; begin: true at its start, false at its end.
inline void mark_step(int step, bool begin) {
#ifdef LLMC_EMULATE
    ::llmc::emu::device().counters.mark(step, begin);
#else
    (void)step;
    (void)begin;
#endif
}

}  // namespace llmc::cuda
