// Scaling runs of the parameters in place on the GPU (CudaBackend::scale_params; QK-Clip): for each
// run r (llmc/core/param_scale.h: offset, count, factor) and each element i of it,
//   master[i] = master[i] * factor           fp32, one rounding (__fmul_rn: the CPU's p *= factor)
//   params[i] = round-to-nearest(master[i])  the floatX working copy, as copy_master_to_params and
//                                            AdamW write it (params nullable: FP32 build, where the
//                                            working copy is the master itself)
// Elements outside the runs are not touched, so the working copy stays round-to-nearest of the
// master everywhere. The runs must be disjoint (check_param_scales): blocks apply them in parallel.
//
// Launch: grid (x, y) of kBlock threads; block row y takes runs y, y + gridDim.y, ...; within a run
// the x blocks stride over its elements. runs (n_runs) is a device array.
#pragma once
#include <cstddef>
#include <vector>

#include "llmc/core/param_scale.h"
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"  // griddep_begin

namespace llmc::cuda {

namespace detail {

constexpr int kScaleBlock = 256;
constexpr long kScaleMaxBlocksPerRun = 64;  // grid-stride beyond
constexpr long kScaleMaxRunRows = 65535;    // grid.y limit

__global__ void __launch_bounds__(kScaleBlock)
    scale_param_runs_kernel(float* master, floatX* params, const ParamScale* runs, int n_runs) {
    griddep_begin();  // first: wait for the previous kernel (programmatic launch)
    for (int r = blockIdx.y; r < n_runs; r += gridDim.y) {
        const ParamScale run = runs[r];
        for (size_t i = blockIdx.x * (size_t)kScaleBlock + threadIdx.x; i < run.count;
             i += (size_t)gridDim.x * kScaleBlock) {
            const size_t at = run.offset + i;
            const float p = __fmul_rn(master[at], run.factor);
            master[at] = p;
            if (params) params[at] = from_float<floatX>(p);  // round to nearest even
        }
    }
}

}  // namespace detail

// master (P) fp32 and params (P) floatX (nullable) scaled on the runs; runs_dev (n_runs) on the
// device, host_runs the same runs on the host (their lengths size the grid). Asynchronous on st.
inline void scale_param_runs(float* master, floatX* params, const ParamScale* runs_dev,
                             const std::vector<ParamScale>& host_runs, LaunchStream st) {
    size_t longest = 0;
    for (const ParamScale& r : host_runs) longest = r.count > longest ? r.count : longest;
    if (longest == 0) return;
    const long per_run = ceil_div((long)longest, detail::kScaleBlock);
    const long rows = (long)host_runs.size();
    const dim3 grid((unsigned)(per_run < detail::kScaleMaxBlocksPerRun ? per_run : detail::kScaleMaxBlocksPerRun),
                    (unsigned)(rows < detail::kScaleMaxRunRows ? rows : detail::kScaleMaxRunRows));
    launch_kernel(detail::scale_param_runs_kernel, grid, detail::kScaleBlock, 0, st, master, params, runs_dev,
                  (int)host_runs.size());
    CUDA_CHECK_LAUNCH();
}

}  // namespace llmc::cuda
