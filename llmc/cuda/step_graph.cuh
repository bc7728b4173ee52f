// A step as a CUDA graph (--cuda-graph 1): the work one queued training step, or one KV decode step,
// issues on the backend's stream, captured once (cudaStreamBeginCapture .. cudaStreamEndCapture) and
// then launched as one graph each step. What a step changes from one step to the next reaches the
// graph through page-locked host memory that its captured copies read when it runs (a training
// step's micro-batches' tokens, learning rate and bias corrections; a decode step's tokens and
// position); everything else it captured - shapes, pointers, kernel arguments - must be what the
// next step would issue, which CudaBackend checks (StepPlan, DecodePlan) before it launches the
// graph instead of issuing the work again.
#pragma once
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/device_buffer.h"  // CUDA_CHECK

namespace llmc::cuda {

// What a queued step issues, as far as the captured graph depends on it: per micro-batch its shape
// and the scalars its kernels take as arguments, the update's hyper-parameters that are arguments
// (not lr: that comes from device memory), and the epoch of the backend's buffers (a reallocation
// moves pointers the graph holds).
struct StepPlan {
    struct Micro {
        int B = 0, T = 0;
        float z_weight = 0.0f, grad_scale = 0.0f;
        int near_distance = 0;
        bool operator==(const Micro& o) const {
            return B == o.B && T == o.T && z_weight == o.z_weight && grad_scale == o.grad_scale &&
                   near_distance == o.near_distance;
        }
    };
    std::vector<Micro> micro;
    float beta1 = 0.0f, beta2 = 0.0f, eps = 0.0f, weight_decay = 0.0f, grad_clip = 0.0f;
    unsigned long long buffers_epoch = 0;
    bool operator==(const StepPlan& o) const {
        return micro == o.micro && beta1 == o.beta1 && beta2 == o.beta2 && eps == o.eps &&
               weight_decay == o.weight_decay && grad_clip == o.grad_clip && buffers_epoch == o.buffers_epoch;
    }
    bool operator!=(const StepPlan& o) const { return !(*this == o); }
};

// What a decode step issues, as far as its captured graph depends on it: the sequences and the split
// grid's depth of its decode attention (llmc/cuda/attention_decode.cuh: a graph serves every position
// of that depth). The buffers it holds (the cache, the decode rows, the page-locked input) move only in
// kv_begin, which resets the graph; the epoch of the training buffers is a conservative extra (a
// training step's reallocation recaptures).
struct DecodePlan {
    int B = 0, splits = 0;
    unsigned long long buffers_epoch = 0;
    bool operator==(const DecodePlan& o) const {
        return B == o.B && splits == o.splits && buffers_epoch == o.buffers_epoch;
    }
};

// One executable graph and the plan it was captured from.
template <typename Plan>
class CapturedGraph {
public:
    CapturedGraph() = default;
    CapturedGraph(const CapturedGraph&) = delete;
    CapturedGraph& operator=(const CapturedGraph&) = delete;
    ~CapturedGraph() { reset(); }

    // Whether launch() would run the work `plan` describes.
    bool matches(const Plan& plan) const { return exec_ != nullptr && plan == plan_; }

    // Captures what issue() puts on stream (replacing any earlier graph), then launches it once: the
    // step runs. issue() must not synchronize or allocate (capture refuses it; the error propagates
    // as CudaError, the run ends, and no graph is kept).
    template <typename Issue>
    void capture_and_launch(cudaStream_t stream, const Plan& plan, Issue&& issue) {
        reset();
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        try {
            issue();
        } catch (...) {
            cudaGraph_t partial = nullptr;
            (void)cudaStreamEndCapture(stream, &partial);  // ends the capture; an invalidated one has no graph
            if (partial) (void)cudaGraphDestroy(partial);
            (void)cudaGetLastError();
            throw;
        }
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        cudaGraphExec_t exec = nullptr;
        const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
        CUDA_CHECK(cudaGraphDestroy(graph));
        CUDA_CHECK(e);
        exec_ = exec;  // the graph and its plan together
        plan_ = plan;
        launch(stream);
    }
    void launch(cudaStream_t stream) { CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }
    void reset() {
        if (exec_) (void)cudaGraphExecDestroy(exec_);
        exec_ = nullptr;
        plan_ = Plan();
    }

private:
    cudaGraphExec_t exec_ = nullptr;
    Plan plan_;
};

using StepGraph = CapturedGraph<StepPlan>;
using DecodeGraph = CapturedGraph<DecodePlan>;

}  // namespace llmc::cuda
