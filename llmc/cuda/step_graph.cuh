// A step as a CUDA graph (--cuda-graph 1): the work one queued training step, or one KV decode step,
// issues on the backend's stream, captured once (cudaStreamBeginCapture .. cudaStreamEndCapture) and
// then launched as that graph each step (a training step: two parts, launched back to back, the host
// grouping the step's tokens between them). What a step changes from one step to the next reaches
// the graph through page-locked host memory that its captured copies read when it runs (a training
// step's micro-batches' tokens and their grouping, learning rate and bias corrections; a decode
// step's tokens and position); everything else it captured - shapes, pointers, kernel arguments -
// must be what the next step would issue, which CudaBackend checks (StepPlan, DecodePlan) before it
// launches the graph instead of issuing the work again.
#pragma once
#include <stdexcept>
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

// The executable graphs of one captured piece of work, in launch order (its parts), and the plan they
// were captured from. One part unless the work asked for a split while it was captured (split): a
// training step is two, so that the host can do work between their launches (CudaBackend's token
// grouping, llmc/cuda/gpt2_cuda_step.cuh) while the device runs the first.
template <typename Plan>
class CapturedGraph {
public:
    CapturedGraph() = default;
    CapturedGraph(const CapturedGraph&) = delete;
    CapturedGraph& operator=(const CapturedGraph&) = delete;
    ~CapturedGraph() { reset(); }

    // Whether launch() would run the work `plan` describes.
    bool matches(const Plan& plan) const { return !parts_.empty() && plan == plan_; }

    // Captures what issue() puts on stream (replacing any earlier graph), then launches it once: the
    // work runs, between() called on the host after the first part's launch (launch()). issue() must
    // not synchronize or allocate (capture refuses it; the error propagates as CudaError, the run ends,
    // and no graph is kept); it may call split(stream).
    template <typename Issue, typename Between>
    void capture_and_launch(cudaStream_t stream, const Plan& plan, Issue&& issue, Between&& between) {
        reset();
        capturing_ = true;
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        try {
            issue();
            capturing_ = false;
            end_part(stream);
        } catch (...) {
            if (capturing_) {
                cudaGraph_t partial = nullptr;
                (void)cudaStreamEndCapture(stream, &partial);  // ends the capture; an invalidated one has no graph
                if (partial) (void)cudaGraphDestroy(partial);
                (void)cudaGetLastError();
            }
            capturing_ = false;
            reset();
            throw;
        }
        try {
            launch(stream, between);
        } catch (...) {
            reset();  // no graph kept from a step that did not launch whole
            throw;
        }
        plan_ = plan;  // the graphs and their plan together
    }
    template <typename Issue>
    void capture_and_launch(cudaStream_t stream, const Plan& plan, Issue&& issue) {
        capture_and_launch(stream, plan, issue, [] {});
    }

    // Inside capture_and_launch's issue(): the part captured so far ends here and the next begins.
    void split(cudaStream_t stream) {
        if (!capturing_) throw std::logic_error("CapturedGraph::split outside capture_and_launch");
        end_part(stream);
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    }
    // The parts ended so far: inside issue(), those before the one being captured.
    size_t parts() const { return parts_.size(); }

    // The parts in order on stream, between() on the host after the first one's launch (while the
    // device runs it; work the later parts read, e.g. page-locked memory their copies upload).
    template <typename Between>
    void launch(cudaStream_t stream, Between&& between) {
        for (size_t k = 0; k < parts_.size(); k++) {
            CUDA_CHECK(cudaGraphLaunch(parts_[k], stream));
            if (k == 0) between();
        }
    }
    void launch(cudaStream_t stream) {
        launch(stream, [] {});
    }
    void reset() {
        for (cudaGraphExec_t e : parts_) (void)cudaGraphExecDestroy(e);
        parts_.clear();
        plan_ = Plan();
    }

private:
    // Ends the capture on stream and keeps its graph, instantiated, as the next part.
    void end_part(cudaStream_t stream) {
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        cudaGraphExec_t exec = nullptr;
        const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
        CUDA_CHECK(cudaGraphDestroy(graph));
        CUDA_CHECK(e);
        parts_.push_back(exec);
    }

    std::vector<cudaGraphExec_t> parts_;
    bool capturing_ = false;  // inside capture_and_launch's issue()
    Plan plan_;
};

using StepGraph = CapturedGraph<StepPlan>;
using DecodeGraph = CapturedGraph<DecodePlan>;

}  // namespace llmc::cuda
