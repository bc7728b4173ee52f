// Whether a run's training steps are issued as CUDA graphs (--cuda-graph; docs/cuda_backend.md, "The
// step as one CUDA graph"), and the run header's words for it. A step runs as one graph only on the
// queued path (llmc/train/train_step.h, runs_queued): a backend with step graphs (the CUDA backend),
// one process, -z 0, neither --skip-spikes nor --qk-clip. auto (the default) takes the graph wherever
// it can, except for a step of several micro-batches (-d: the graph stages every micro-batch's tokens
// before its launch, where steps issued kernel by kernel load the next while the device runs one), and
// names what keeps it off; 1 takes it or the run is refused (the flags here by llmc/app/validate.h, a
// backend without step graphs here); 0 never takes it. Also --pdl (use_pdl_if_asked): whether the
// backend's kernels are launched with programmatic dependent launch, in training and --eval-only.
#pragma once
#include <string>

#include "llmc/app/train_config.h"
#include "llmc/core/backend.h"
#include "llmc/core/error.h"

namespace llmc {

struct StepGraphChoice {
    bool on = false;
    std::string words;  // the run header's "steps:" line; "" for a backend without step graphs
};

// What in the flags keeps a step off the queued path (the host decides inside the step), or nullptr:
// the words of train_step.h's runs_queued conditions (several processes: world_size, -z 1, then the
// two flags), which validate.h's refusal of --cuda-graph 1 and choose_step_graph share.
inline const char* host_decides_inside_the_step(const TrainConfig& cfg) {
    return cfg.world_size > 1    ? "several processes reduce the step's numbers on the host"
           : cfg.zero_stage == 1 ? "-z 1 updates the weights through the host"
           : cfg.skip_spikes > 0 ? "--skip-spikes decides on the host inside the step"
           : cfg.qk_clip > 0     ? "--qk-clip rescales weights on the host inside the step"
                                 : nullptr;
}

// accum: the micro-batches of a step (RunPlan::accum).
inline StepGraphChoice choose_step_graph(const TrainConfig& cfg, int accum, bool backend_has_step_graph,
                                         const std::string& backend_name) {
    if (cfg.cuda_graph == "1" && !backend_has_step_graph)
        throw InputError("--cuda-graph 1 needs the CUDA backend; this run uses the " + backend_name +
                         " backend (give --device cuda, or drop --cuda-graph)");
    if (!backend_has_step_graph) return {};
    const std::string on = "one CUDA graph a step once its shapes repeat (--cuda-graph " + cfg.cuda_graph + ")";
    if (cfg.cuda_graph == "0") return {false, "kernel by kernel (--cuda-graph 0)"};
    if (cfg.cuda_graph == "1") return {true, on};
    if (const char* off = host_decides_inside_the_step(cfg))
        return {false, std::string("kernel by kernel (--cuda-graph auto: ") + off + ")"};
    if (accum > 1)
        return {false, "kernel by kernel (--cuda-graph auto: " + std::to_string(accum) +
                           " micro-batches a step, which load while the device runs; --cuda-graph 1 for one graph)"};
    return {true, on};
}

// --pdl 1: the backend's kernels launched with programmatic dependent launch (training and
// --eval-only alike), or the run refused where the backend has none (the CPU backend; the CUDA
// backend itself refuses a device below sm_90). auto (the default): the same wherever the backend
// and its device have it (programmatic_launch_supported) and no per-kernel profile is asked (its
// spans would include each kernel's wait), else none. Returns the run header's words ("" for none).
inline std::string use_pdl_if_asked(const TrainConfig& cfg, Backend& model) {
    if (cfg.pdl == "0") return "";
    if (cfg.pdl == "auto" && (cfg.profile_steps > 0 || !model.programmatic_launch_supported())) return "";
    if (!model.has_programmatic_launch())
        throw InputError("--pdl 1 needs the CUDA backend; this run uses the " + std::string(model.name()) +
                         " backend (give --device cuda, or drop --pdl 1)");
    model.use_programmatic_launch(true);
    return "kernels with programmatic dependent launch (--pdl " + cfg.pdl + ")";
}

}  // namespace llmc
