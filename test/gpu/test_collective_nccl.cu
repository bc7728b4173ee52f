// The NCCL collective (llmc/cuda/collective_nccl.cuh) with one rank on one GPU: every operation
// on device buffers and on host buffers (the staged path), fresh random data, outputs poisoned
// with NaN first, every element checked (with one rank: all_reduce/reduce_scatter/all_gather/
// broadcast return the input, Avg = Sum, Max = Min = the value; the reductions are then copies that
// never reach NCCL, whose one-rank Avg drops the tail before 2.29.7). The multi-rank logic is
// covered on the CPU by test/test_mpi.py. Exit 0 = pass, 1 = fail or no GPU, 77 = SKIPPED (built
// without NCCL: nothing tested; gpu_test::kSkipExitCode).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "test/gpu/gpu_test_util.cuh"

#ifdef USE_NCCL
#include "llmc/cuda/collective_nccl.cuh"
#endif

int main() {
#ifndef USE_NCCL
    return gpu_test::skip("test_collective_nccl", "built without NCCL (the Makefile found no nccl.h); nothing tested");
#else
    if (!gpu_test::have_gpu("test_collective_nccl")) return 1;
    using llmc::ReduceOp;
    ncclUniqueId id;
    NCCL_CHECK(ncclGetUniqueId(&id));
    llmc::NcclCollective comm(0, 1, 0, id);
    std::mt19937 gen(std::random_device{}());
    std::normal_distribution<float> nd;
    const size_t n = 100003;
    std::vector<float> x(n), out(n);
    for (float& v : x) v = nd(gen);
    float* d = nullptr;
    float* d2 = nullptr;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d2, n * sizeof(float)));
    int failures = 0;
    auto expect_equal = [&](const char* what) {
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += !(out[i] == x[i]);  // NaN never passes
        std::printf("%-34s %s (%zu of %zu elements differ)\n", what, bad ? "FAIL" : "ok", bad, n);
        for (size_t i = 0, shown = 0; i < n && shown < 5; i++)  // the first differences, bits included
            if (!(out[i] == x[i])) {
                uint32_t got_bits, want_bits;
                std::memcpy(&got_bits, &out[i], 4);
                std::memcpy(&want_bits, &x[i], 4);
                std::printf("    [%zu] got %.9g (0x%08x) want %.9g (0x%08x)\n", i, out[i], got_bits, x[i], want_bits);
                shown++;
            }
        failures += bad != 0;
    };
    auto poison = [&]() { std::fill(out.begin(), out.end(), std::nanf("")); };
    auto poison_dev = [&](float* p) { CUDA_CHECK(cudaMemset(p, 0xFF, n * sizeof(float))); };  // NaN bytes

    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
        out = x;  // host, in place
        comm.all_reduce(out.data(), n, op);
        expect_equal("all_reduce host");
        CUDA_CHECK(cudaMemcpy(d, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        comm.all_reduce(d, n, op);  // device, in place
        poison();
        CUDA_CHECK(cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
        expect_equal("all_reduce device");
    }
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        poison();
        comm.reduce_scatter(x.data(), out.data(), n, op);
        expect_equal(op == ReduceOp::Sum ? "reduce_scatter host sum" : "reduce_scatter host avg");
    }
    CUDA_CHECK(cudaMemcpy(d, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        poison_dev(d2);
        comm.reduce_scatter(d, d2, n, op);
        poison();
        CUDA_CHECK(cudaMemcpy(out.data(), d2, n * sizeof(float), cudaMemcpyDeviceToHost));
        expect_equal(op == ReduceOp::Sum ? "reduce_scatter device sum" : "reduce_scatter device avg");
    }
    poison();
    comm.all_gather(x.data(), out.data(), n);
    expect_equal("all_gather host");
    poison_dev(d2);
    comm.all_gather(d, d2, n);
    poison();
    CUDA_CHECK(cudaMemcpy(out.data(), d2, n * sizeof(float), cudaMemcpyDeviceToHost));
    expect_equal("all_gather device");
    out = x;
    comm.broadcast(out.data(), n, 0);
    expect_equal("broadcast host");
    comm.barrier();
    const double s = comm.all_reduce_double(3.25, ReduceOp::Sum);
    const long long m = comm.all_reduce_int(-7, ReduceOp::Min);
    std::printf("%-34s %s\n", "scalars", s == 3.25 && m == -7 ? "ok" : "FAIL");
    failures += !(s == 3.25 && m == -7);
    cudaFree(d);
    cudaFree(d2);
    std::printf("test_collective_nccl: %s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
#endif
}
