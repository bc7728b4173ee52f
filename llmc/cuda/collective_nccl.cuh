// NCCL: the collective of the CUDA backend. Buffers may be device memory (reduced in place by
// NCCL) or host memory (staged through a device buffer, so the training loop's host path works
// unchanged). Operations run on one stream and are synchronized before returning.
// Bootstrap (the ncclUniqueId every rank needs):
//   make_nccl_collective_mpi(local_rank)    rank 0 creates it, MPI_Bcast (needs USE_MPI)
//   make_nccl_collective_file(launch, dir)  without MPI: through files in DIR (llmc/dist/rendezvous.h:
//       per-run nonces, so a stale file left by a crashed run is never taken; 300 s limit with an
//       error naming the ranks that did not show up).
// abort(): ncclCommAbort, then MPI_Abort when MPI is up, else exit (under Slurm use
// `srun --kill-on-bad-exit=1` so the other ranks are ended too).
// What has run on GPUs, and at which commit: docs/multigpu.md, docs/results/README.md.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "llmc/io/atomic_file.h"
#include "llmc/dist/collective.h"
#include "llmc/dist/collective_mpi.h"
#include "llmc/cuda/device_buffer.h"
#include "llmc/core/error.h"
#include "llmc/dist/rendezvous.h"

namespace llmc {

inline void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess)
        throw std::runtime_error(std::string("NCCL error: ") + ncclGetErrorString(r) + " in " + what + " at " + file +
                                 ":" + std::to_string(line));
}
#define NCCL_CHECK(call) ::llmc::nccl_check((call), #call, __FILE__, __LINE__)

class NcclCollective : public Collective {
public:
    NcclCollective(int rank, int world, int local_rank, const ncclUniqueId& id) : rank_(rank), world_(world) {
        CUDA_CHECK(cudaSetDevice(local_rank));
        CUDA_CHECK(cudaStreamCreate(&stream_));
        NCCL_CHECK(ncclCommInitRank(&comm_, world, id, rank));
        scalar_.resize(1);
    }
    ~NcclCollective() override {
        if (comm_) ncclCommDestroy(comm_);
        if (stream_) cudaStreamDestroy(stream_);
    }
    NcclCollective(const NcclCollective&) = delete;
    NcclCollective& operator=(const NcclCollective&) = delete;

    const char* name() const override { return "NCCL"; }
    bool takes_device_buffers() const override { return true; }
    int rank() const override { return rank_; }
    int world_size() const override { return world_; }

    void all_reduce(float* buf, size_t n, ReduceOp op) override {
        if (world_ == 1) return;  // the identity for every op (one_rank_copy says why NCCL is not asked)
        float* d = to_device(buf, n, stage_a_);
        NCCL_CHECK(ncclAllReduce(d, d, n, ncclFloat, nccl_op(op), comm_, stream_));
        from_device(buf, d, n);
    }
    void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override {
        if (world_ == 1) return one_rank_copy(recv, send, count);
        const float* ds = to_device(const_cast<float*>(send), count * world_, stage_a_);
        // send == recv is staged: NCCL's in-place form is recv == send + rank * count, not recv == send
        float* dr = is_device(recv) && recv != send ? recv : staged(stage_b_, count);
        NCCL_CHECK(ncclReduceScatter(ds, dr, count, ncclFloat, nccl_op(op), comm_, stream_));
        from_device(recv, dr, count);
    }
    void all_gather(const float* send, float* recv, size_t count) override {
        const float* ds = to_device(const_cast<float*>(send), count, stage_a_);
        // send == recv is staged: NCCL's in-place form is send == recv + rank * count, not send == recv
        float* dr = is_device(recv) && recv != send ? recv : staged(stage_b_, count * world_);
        NCCL_CHECK(ncclAllGather(ds, dr, count, ncclFloat, comm_, stream_));
        from_device(recv, dr, count * world_);
    }
    void broadcast(float* buf, size_t n, int root) override {
        float* d = to_device(buf, n, stage_a_);
        NCCL_CHECK(ncclBroadcast(d, d, n, ncclFloat, root, comm_, stream_));
        from_device(buf, d, n);
    }
    void barrier() override { all_reduce_int(0, ReduceOp::Sum); }
    double all_reduce_double(double x, ReduceOp op) override {
        double* d = scalar_.get();
        CUDA_CHECK(cudaMemcpyAsync(d, &x, sizeof x, cudaMemcpyHostToDevice, stream_));
        NCCL_CHECK(ncclAllReduce(d, d, 1, ncclDouble, nccl_op(op), comm_, stream_));
        CUDA_CHECK(cudaMemcpyAsync(&x, d, sizeof x, cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        return x;
    }
    long long all_reduce_int(long long x, ReduceOp op) override {
        if (op == ReduceOp::Avg) return (long long)(all_reduce_double((double)x, ReduceOp::Avg));
        int64_t v = x;
        int64_t* d = reinterpret_cast<int64_t*>(scalar_.get());
        CUDA_CHECK(cudaMemcpyAsync(d, &v, sizeof v, cudaMemcpyHostToDevice, stream_));
        NCCL_CHECK(ncclAllReduce(d, d, 1, ncclInt64, nccl_op(op), comm_, stream_));
        CUDA_CHECK(cudaMemcpyAsync(&v, d, sizeof v, cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        return v;
    }
    [[noreturn]] void abort(int code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        if (comm_) ncclCommAbort(comm_);
        comm_ = nullptr;
#ifdef USE_MPI
        int up = 0, down = 0;
        MPI_Initialized(&up);
        MPI_Finalized(&down);
        if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
#endif
        std::exit(code);
    }

private:
    static ncclRedOp_t nccl_op(ReduceOp op) {
        switch (op) {
            case ReduceOp::Avg: return ncclAvg;
            case ReduceOp::Max: return ncclMax;
            case ReduceOp::Min: return ncclMin;
            default: return ncclSum;
        }
    }
    // One rank: a reduction returns its input, so it is a copy. NCCL is not asked: NCCL before 2.29.7
    // leaves the last elements of a one-rank ncclAvg unwritten (NVIDIA/nccl#1950; seen on an H200 with
    // 2.28.3: the last 3 of 100003 floats of a reduce_scatter, test/gpu/test_collective_nccl.cu).
    void one_rank_copy(float* recv, const float* send, size_t count) {
        if (recv != send) CUDA_CHECK(cudaMemcpyAsync(recv, send, count * sizeof(float), cudaMemcpyDefault, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    static bool is_device(const void* p) {
        cudaPointerAttributes a;
        if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    }
    float* staged(cuda::DeviceBuffer<float>& buf, size_t n) {
        if (buf.size() < n) buf.resize(n);
        return buf.get();
    }
    // A device pointer to n floats with the contents of p (p itself when it is device memory).
    float* to_device(float* p, size_t n, cuda::DeviceBuffer<float>& buf) {
        if (is_device(p)) return p;
        float* d = staged(buf, n);
        CUDA_CHECK(cudaMemcpyAsync(d, p, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
        return d;
    }
    // Waits for the operation; copies the result back when it was staged (dst may be host memory, or
    // device memory staged for aliasing: cudaMemcpyDefault handles both).
    void from_device(float* dst, const float* d, size_t n) {
        if (dst != d) CUDA_CHECK(cudaMemcpyAsync(dst, d, n * sizeof(float), cudaMemcpyDefault, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    int rank_ = 0, world_ = 1;
    ncclComm_t comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    cuda::DeviceBuffer<float> stage_a_, stage_b_;
    cuda::DeviceBuffer<double> scalar_;  // 8 bytes: one double or one int64
};

#ifdef USE_MPI
// Rank, world and the id from MPI; local_rank picks the GPU.
inline std::unique_ptr<Collective> make_nccl_collective_mpi(int local_rank) {
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    return std::make_unique<NcclCollective>(rank, world, local_rank, id);
}
#endif

// The shared-directory rendezvous (llmc/dist/rendezvous.h: per-run nonces, so a stale file from a crashed
// run is never taken; bounded waits with an error naming the missing ranks).
inline std::unique_ptr<Collective> make_nccl_collective_file(const LaunchInfo& li, const std::string& dir,
                                                             double timeout_s = 300) {
    ncclUniqueId id;
    std::vector<char> bytes;
    if (li.rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        bytes.assign(reinterpret_cast<const char*>(&id), reinterpret_cast<const char*>(&id) + sizeof id);
    }
    RendezvousOptions opt;
    opt.dir = dir;
    opt.timeout_s = timeout_s;
    bytes = rendezvous_exchange(opt, li.rank, li.world_size, bytes);
    if (bytes.size() != sizeof id)
        throw InputError("--rendezvous: rank 0 sent " + std::to_string(bytes.size()) + " bytes, NCCL's id has " +
                         std::to_string(sizeof id) + "; every rank must run the same build");
    std::memcpy(&id, bytes.data(), sizeof id);
    return std::make_unique<NcclCollective>(li.rank, li.world_size, li.local_rank, id);
}

}  // namespace llmc
