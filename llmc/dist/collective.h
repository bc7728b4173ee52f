// Collective communication between the processes of a data-parallel run: one interface, three
// implementations.
//   SingleProcessCollective  (this file)                 world size 1, every operation a copy
//   MpiCollective            (llmc/dist/collective_mpi.h)      host buffers; the CPU backend under mpirun
//   NcclCollective           (llmc/cuda/collective_nccl.cuh)  device buffers (host ones are staged)
// Also here: where a process learns its rank, the world size and its local GPU (LaunchInfo),
// from explicit flags or the launcher's environment (mpirun, Slurm).
// Every operation is collective: all ranks call it in the same order with the same sizes.
#pragma once
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "llmc/core/error.h"

namespace llmc {

enum class ReduceOp { Sum, Avg, Max, Min };

class Collective {
public:
    virtual ~Collective() = default;
    virtual const char* name() const = 0;
    virtual int rank() const = 0;
    virtual int world_size() const = 0;

    // buf (n) fp32, in place: every rank ends with op over the ranks' buffers (Avg = Sum / world).
    virtual void all_reduce(float* buf, size_t n, ReduceOp op) = 0;
    // send (world * count) -> recv (count): block `rank` of op over the ranks' send buffers.
    virtual void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) = 0;
    // send (count) -> recv (world * count): block r of recv is rank r's send.
    virtual void all_gather(const float* send, float* recv, size_t count) = 0;
    // buf (n) fp32: every rank ends with root's buffer.
    virtual void broadcast(float* buf, size_t n, int root) = 0;
    virtual void barrier() = 0;
    // Small host values the ranks must agree on (a step, a norm, a loss).
    virtual double all_reduce_double(double x, ReduceOp op) = 0;
    virtual long long all_reduce_int(long long x, ReduceOp op) = 0;
    // Ends every rank of the run with exit code `code` (after an error on this rank), no hang.
    [[noreturn]] virtual void abort(int code) = 0;
    // Whether the buffers may be device memory, reduced there in place (NCCL); otherwise host memory.
    virtual bool takes_device_buffers() const { return false; }
};

class SingleProcessCollective : public Collective {
public:
    const char* name() const override { return "single process"; }
    int rank() const override { return 0; }
    int world_size() const override { return 1; }
    void all_reduce(float*, size_t, ReduceOp) override {}
    void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp) override {
        if (send != recv) std::memmove(recv, send, count * sizeof(float));
    }
    void all_gather(const float* send, float* recv, size_t count) override {
        if (send != recv) std::memmove(recv, send, count * sizeof(float));
    }
    void broadcast(float*, size_t, int) override {}
    void barrier() override {}
    double all_reduce_double(double x, ReduceOp) override { return x; }
    long long all_reduce_int(long long x, ReduceOp) override { return x; }
    [[noreturn]] void abort(int code) override {
        std::fflush(stdout);
        std::exit(code);
    }
};

// ---------------------------------------------------------------------------------------------
// launch: rank, world size, local GPU

struct LaunchInfo {
    int rank = 0, world_size = 1, local_rank = 0;
    std::string source = "single process";  // where the values came from (for messages)
};

// Explicit flags win (each >= 0 when given), then the launcher's environment:
//   Open MPI's mpirun   OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_RANK
//   Slurm's srun        SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID
//   MPICH/PMI           PMI_RANK / PMI_SIZE (local rank: MPI_LOCALRANKID)
// else a single process. getenv is a parameter so tests can feed an environment.
inline LaunchInfo detect_launch(int flag_rank, int flag_world, int flag_local,
                                const std::function<const char*(const char*)>& getenv) {
    auto env_int = [&](const char* name, int& out) {
        const char* v = getenv(name);
        if (!v || !*v) return false;
        char* end = nullptr;
        const long x = std::strtol(v, &end, 10);
        if (*end != '\0' || x < 0 || x > 1 << 30)
            throw InputError(std::string("environment variable ") + name + "='" + v +
                             "' is not a non-negative integer; fix the launcher's environment");
        out = (int)x;
        return true;
    };
    LaunchInfo li;
    struct Source {
        const char *rank, *size, *local, *what;
    };
    const Source sources[] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun (Open MPI)"},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"},
        {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI"},
    };
    for (const Source& s : sources) {
        int r = 0, w = 0;
        if (env_int(s.rank, r) && env_int(s.size, w)) {
            li.rank = r;
            li.world_size = w;
            li.local_rank = 0;
            env_int(s.local, li.local_rank);
            li.source = s.what;
            break;
        }
    }
    if (flag_world >= 0) {
        li.world_size = flag_world;
        li.source = "flags";
    }
    if (flag_rank >= 0) {
        li.rank = flag_rank;
        li.source = "flags";
    }
    if (flag_local >= 0) li.local_rank = flag_local;
    if (li.world_size < 1 || li.rank < 0 || li.rank >= li.world_size)
        throw InputError("rank " + std::to_string(li.rank) + " of world size " + std::to_string(li.world_size) +
                         " (from " + li.source + ") is invalid; need 0 <= --rank < --world-size");
    return li;
}

inline LaunchInfo detect_launch(int flag_rank, int flag_world, int flag_local) {
    return detect_launch(flag_rank, flag_world, flag_local, [](const char* n) { return std::getenv(n); });
}

// The rank and world size the launcher's environment gives this process, before the flags are read:
// rank 0 of 1 without a launcher or with an environment detect_launch refuses (that error comes
// later, once, per rank).
inline LaunchInfo launch_env() {
    try {
        return detect_launch(-1, -1, -1);
    } catch (const InputError&) { return LaunchInfo{}; }
}

}  // namespace llmc
