// CUDA graphs made by stream capture, checked against what NVIDIA's CUDA Runtime API reference
// ("Stream Management": cudaStreamBeginCapture, cudaStreamEndCapture, cudaStreamIsCapturing;
// "Graph Management": cudaGraphInstantiate, cudaGraphLaunch) and the Programming Guide's "CUDA
// Graphs" say, not from the trainer's use of them:
//   1. capture may not begin on the legacy default stream;
//   2. while a stream captures, the work pushed into it is not executed (a kernel, a memset and a
//      copy leave memory as it was) and cudaStreamIsCapturing says Active (None before and after);
//   3. cudaGraphLaunch executes the captured work in issue order (a kernel reads what a captured
//      kernel and a captured copy wrote before it);
//   4. kernel arguments are copied when the launch is captured: changing the host variable after
//      capture does not change what the graph does;
//   5. a captured copy from page-locked host memory reads that memory when the graph runs, and every
//      launch repeats the work: two launches with different host contents add both;
//   6. a call not permitted during capture (synchronizing the capturing stream) fails, and the
//      capture is invalidated: cudaStreamEndCapture returns no graph and an error;
//   7. work for the legacy default stream while a (blocking) stream captures fails and invalidates
//      the capture the same way;
//   8. capture may end and begin again on the same stream (two graphs, the trainer's step in two
//      parts: llmc/cuda/step_graph.cuh): launched in order on one stream, the second runs after the
//      first (reads what it wrote), and its copy from page-locked memory reads what the host wrote
//      there after launching the first and before launching the second.
// Runs on a GPU and under emulation (dev/emu/runtime.cpp). Exit 0 = pass, 1 = fail.
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/launch.cuh"
#include "test/gpu/gpu_test_util.cuh"

namespace cuda_graph {

__global__ void fill_kernel(float* x, float v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
// y += a * x
__global__ void axpy_kernel(float* y, const float* x, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

constexpr int kN = 1000;
const dim3 kGrid((kN + 255) / 256), kBlock(256);

std::vector<float> download(const float* d) {
    std::vector<float> h(kN);
    CUDA_CHECK(cudaMemcpy(h.data(), d, kN * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
bool all_equal(const std::vector<float>& h, float v) {
    for (float x : h)
        if (x != v) return false;
    return true;
}
void set(float* d, float v, cudaStream_t s) {
    llmc::cuda::launch_kernel(fill_kernel, kGrid, kBlock, 0, s, d, v, kN);
    CUDA_CHECK(cudaStreamSynchronize(s));
}
cudaStreamCaptureStatus capture_status(cudaStream_t s) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusInvalidated;
    CUDA_CHECK(cudaStreamIsCapturing(s, &st));
    return st;
}
// Ends the capture on s, instantiates the graph and destroys the graph (the executable graph stays).
cudaGraphExec_t end_and_instantiate(cudaStream_t s) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    return exec;
}

int run() {
    gpu_test::Checks checks;
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    float *x, *y, *z;
    CUDA_CHECK(cudaMalloc(&x, kN * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&y, kN * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&z, kN * sizeof(float)));
    float* pinned = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, kN * sizeof(float)));

    // 1. the legacy default stream
    checks.expect(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal) != cudaSuccess,
                  "capture on the legacy default stream is refused");
    (void)cudaGetLastError();

    // 2. captured work is not executed; 3. a launch runs it in issue order
    set(x, 1.0f, s);
    set(y, 1.0f, s);
    set(z, 5.0f, s);
    checks.expect(capture_status(s) == cudaStreamCaptureStatusNone, "cudaStreamIsCapturing: None before capture");
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    checks.expect(capture_status(s) == cudaStreamCaptureStatusActive, "cudaStreamIsCapturing: Active in capture");
    llmc::cuda::launch_kernel(fill_kernel, kGrid, kBlock, 0, s, x, 2.0f, kN);                   // x = 2
    CUDA_CHECK(cudaMemcpyAsync(y, x, kN * sizeof(float), cudaMemcpyDeviceToDevice, s));         // y = x = 2
    llmc::cuda::launch_kernel(axpy_kernel, kGrid, kBlock, 0, s, z, (const float*)y, 3.0f, kN);  // z = 5 + 6
    CUDA_CHECK(cudaMemsetAsync(x, 0, kN * sizeof(float), s));  // x = 0 (after y took its copy)
    cudaGraphExec_t order = end_and_instantiate(s);
    checks.expect(capture_status(s) == cudaStreamCaptureStatusNone, "cudaStreamIsCapturing: None after capture");
    checks.expect(all_equal(download(x), 1.0f) && all_equal(download(y), 1.0f) && all_equal(download(z), 5.0f),
                  "captured work is not executed (kernel, copy, memset: memory as before)");
    CUDA_CHECK(cudaGraphLaunch(order, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    checks.expect(all_equal(download(z), 11.0f), "a launch runs kernel, copy, kernel in issue order (z = 5 + 3 * 2)");
    checks.expect(all_equal(download(y), 2.0f) && all_equal(download(x), 0.0f),
                  "the copy and the memset ran, in order (y = 2, x = 0)");
    CUDA_CHECK(cudaGraphExecDestroy(order));

    // 4. arguments are copied at capture
    set(x, 1.0f, s);
    set(y, 0.0f, s);
    float a = 3.0f;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    llmc::cuda::launch_kernel(axpy_kernel, kGrid, kBlock, 0, s, y, (const float*)x, a, kN);
    cudaGraphExec_t by_value = end_and_instantiate(s);
    a = 100.0f;
    (void)a;
    CUDA_CHECK(cudaGraphLaunch(by_value, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    checks.expect(all_equal(download(y), 3.0f), "kernel arguments are the values at capture (y = 3 x, not 100 x)");
    CUDA_CHECK(cudaGraphExecDestroy(by_value));

    // 5. a copy from page-locked memory reads it when the graph runs; launches repeat the work
    set(y, 0.0f, s);
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaMemcpyAsync(x, pinned, kN * sizeof(float), cudaMemcpyHostToDevice, s));
    llmc::cuda::launch_kernel(axpy_kernel, kGrid, kBlock, 0, s, y, (const float*)x, 1.0f, kN);
    cudaGraphExec_t staged = end_and_instantiate(s);
    for (int i = 0; i < kN; i++) pinned[i] = 1.0f;
    CUDA_CHECK(cudaGraphLaunch(staged, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    checks.expect(all_equal(download(y), 1.0f), "first launch copies the host buffer as it is then (y = 1)");
    for (int i = 0; i < kN; i++) pinned[i] = 10.0f;
    CUDA_CHECK(cudaGraphLaunch(staged, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    checks.expect(all_equal(download(y), 11.0f), "second launch copies the new contents and adds again (y = 1 + 10)");
    CUDA_CHECK(cudaGraphExecDestroy(staged));

    // 6. synchronizing the capturing stream fails and invalidates the capture
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    llmc::cuda::launch_kernel(fill_kernel, kGrid, kBlock, 0, s, x, 4.0f, kN);
    checks.expect(cudaStreamSynchronize(s) != cudaSuccess, "cudaStreamSynchronize in capture fails");
    cudaGraph_t bad = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &bad);
    checks.expect(end != cudaSuccess && bad == nullptr, "the capture is invalidated: no graph, an error (%s)",
                  cudaGetErrorString(end));
    (void)cudaGetLastError();
    checks.expect(capture_status(s) == cudaStreamCaptureStatusNone, "the stream is no longer capturing");

    // 7. the legacy default stream while s captures
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    llmc::cuda::launch_kernel(fill_kernel, kGrid, kBlock, 0, s, x, 4.0f, kN);
    llmc::cuda::launch_kernel(fill_kernel, kGrid, kBlock, 0, (cudaStream_t)0, y, 5.0f, kN);
    checks.expect(cudaGetLastError() != cudaSuccess, "a launch on the legacy stream in capture fails");
    bad = nullptr;
    const cudaError_t end_legacy = cudaStreamEndCapture(s, &bad);
    checks.expect(end_legacy != cudaSuccess && bad == nullptr, "that capture is invalidated too (%s)",
                  cudaGetErrorString(end_legacy));
    (void)cudaGetLastError();

    // 8. two parts captured back to back on s; the host writes the pinned buffer between their launches
    set(y, 0.0f, s);
    set(z, 0.0f, s);
    for (int i = 0; i < kN; i++) pinned[i] = 1.0f;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    llmc::cuda::launch_kernel(fill_kernel, kGrid, kBlock, 0, s, z, 7.0f, kN);  // part one: z = 7
    cudaGraphExec_t first = end_and_instantiate(s);
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaMemcpyAsync(x, pinned, kN * sizeof(float), cudaMemcpyHostToDevice, s));      // part two: x = pinned
    llmc::cuda::launch_kernel(axpy_kernel, kGrid, kBlock, 0, s, y, (const float*)x, 1.0f, kN);  // y += x
    llmc::cuda::launch_kernel(axpy_kernel, kGrid, kBlock, 0, s, y, (const float*)z, 1.0f, kN);  // y += z
    cudaGraphExec_t second = end_and_instantiate(s);
    checks.expect(all_equal(download(z), 0.0f) && all_equal(download(y), 0.0f), "two captures: nothing executed");
    for (float v : {3.0f, 5.0f}) {
        CUDA_CHECK(cudaGraphLaunch(first, s));
        for (int i = 0; i < kN; i++) pinned[i] = v;  // after the first launch, before the second
        CUDA_CHECK(cudaGraphLaunch(second, s));
        CUDA_CHECK(cudaStreamSynchronize(s));  // the next write only after this copy ran (the trainer's read-back)
    }
    checks.expect(all_equal(download(y), 3.0f + 7.0f + 5.0f + 7.0f),
                  "the second part reads the first's output and the pinned contents written between the launches "
                  "(y = (3 + 7) + (5 + 7))");
    CUDA_CHECK(cudaGraphExecDestroy(first));
    CUDA_CHECK(cudaGraphExecDestroy(second));

    CUDA_CHECK(cudaFreeHost(pinned));
    CUDA_CHECK(cudaFree(x));
    CUDA_CHECK(cudaFree(y));
    CUDA_CHECK(cudaFree(z));
    CUDA_CHECK(cudaStreamDestroy(s));
    std::printf("test_cuda_graph: %s\n", checks.failures ? "FAIL" : "OK");
    return checks.failures ? 1 : 0;
}

}  // namespace cuda_graph

int main() {
    if (!gpu_test::have_gpu("test_cuda_graph")) return 1;
    return cuda_graph::run();
}
