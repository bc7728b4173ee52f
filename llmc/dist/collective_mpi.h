// MPI: the collective of the CPU backend (host buffers) and the bootstrap of NCCL.
// Built only when the Makefile found an MPI (USE_MPI, flags from `mpicxx --showme:*`); without it
// kMpiBuilt is false and a multi-process CPU run is refused with a clear error.
//   MpiSession      RAII MPI_Init / MPI_Finalize, only when a launcher (mpirun, srun with PMI)
//                   started this process, so a plain ./train_gpt2_ls never touches MPI.
//   MpiCollective   Collective over MPI_COMM_WORLD. Avg = Sum, then / world on every rank, so
//                   all_reduce and reduce_scatter give the same bits for the same inputs.
// MPI's default error handler (MPI_ERRORS_ARE_FATAL) ends the whole job on a communication error.
#pragma once
#include "llmc/dist/collective.h"

#ifdef USE_MPI
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <vector>
#endif

namespace llmc {

#ifdef USE_MPI
constexpr bool kMpiBuilt = true;

// True when a launcher started this process (its environment says so).
inline bool launched_by_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

class MpiSession {
public:
    MpiSession(int* argc, char*** argv) {
        if (!launched_by_mpi()) return;
        int done = 0;
        MPI_Initialized(&done);
        if (!done) {
            MPI_Init(argc, argv);
            owner_ = true;
        }
    }
    ~MpiSession() {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (owner_ && !finalized) MPI_Finalize();
    }
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;
    bool active() const { return owner_; }
    // The largest `v` over the launch's processes (MPI_Allreduce; v itself when not active): a decision
    // every process must share before the run's collective exists. Collective when active.
    int max_over_processes(int v) const {
        if (!owner_) return v;
        int out = v;
        MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        return out;
    }
    // Ends every process of the launch (MPI_Abort) with exit code `code`.
    [[noreturn]] void abort(int code) {
        MPI_Abort(MPI_COMM_WORLD, code);
        std::exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
    }

private:
    bool owner_ = false;
};

class MpiCollective : public Collective {
public:
    MpiCollective() {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &world_);
    }
    const char* name() const override { return "MPI"; }
    int rank() const override { return rank_; }
    int world_size() const override { return world_; }

    void all_reduce(float* buf, size_t n, ReduceOp op) override {
        for (size_t done = 0; done < n;) {  // MPI counts are int: chunks of at most 2^30
            const int c = (int)std::min<size_t>(n - done, (size_t)1 << 30);
            MPI_Allreduce(MPI_IN_PLACE, buf + done, c, MPI_FLOAT, mpi_op(op), MPI_COMM_WORLD);
            done += (size_t)c;
        }
        if (op == ReduceOp::Avg) divide(buf, n);
    }
    void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override {
        if (count > (size_t)1 << 30)
            throw InputError("reduce-scatter of more than 2^30 floats per rank is not supported");
        MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, mpi_op(op), MPI_COMM_WORLD);
        if (op == ReduceOp::Avg) divide(recv, count);
    }
    void all_gather(const float* send, float* recv, size_t count) override {
        if (count > (size_t)1 << 30) throw InputError("all-gather of more than 2^30 floats per rank is not supported");
        MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
    }
    void broadcast(float* buf, size_t n, int root) override {
        for (size_t done = 0; done < n;) {
            const int c = (int)std::min<size_t>(n - done, (size_t)1 << 30);
            MPI_Bcast(buf + done, c, MPI_FLOAT, root, MPI_COMM_WORLD);
            done += (size_t)c;
        }
    }
    void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
    double all_reduce_double(double x, ReduceOp op) override {
        MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, mpi_op(op), MPI_COMM_WORLD);
        return op == ReduceOp::Avg ? x / world_ : x;
    }
    long long all_reduce_int(long long x, ReduceOp op) override {
        MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_LONG_LONG, mpi_op(op), MPI_COMM_WORLD);
        return op == ReduceOp::Avg ? x / world_ : x;
    }
    [[noreturn]] void abort(int code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
        std::exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
    }

private:
    static MPI_Op mpi_op(ReduceOp op) {
        switch (op) {
            case ReduceOp::Max: return MPI_MAX;
            case ReduceOp::Min: return MPI_MIN;
            default: return MPI_SUM;
        }
    }
    void divide(float* buf, size_t n) const {
        const float w = (float)world_;
        for (size_t i = 0; i < n; i++) buf[i] /= w;
    }
    int rank_ = 0, world_ = 1;
};

#else
constexpr bool kMpiBuilt = false;

// Without MPI: no session; a launcher's environment is still detected (detect_launch) so that
// `mpirun -np 2` of a build without MPI fails with a clear message instead of training twice.
class MpiSession {
public:
    MpiSession(int*, char***) {}
    bool active() const { return false; }
    int max_over_processes(int v) const { return v; }
    [[noreturn]] void abort(int code) { std::exit(code); }
};
#endif

}  // namespace llmc
