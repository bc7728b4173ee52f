// train_gpt2_ls: the binary. Thin on purpose: parse the flags (llmc/cli.h), pick the device
// (llmc/device.h), set up the processes (llmc/collective*.h), build the backend (llmc/cpu/ or
// llmc/cuda/), run the training loop or --eval-only (llmc/train_loop.h).
// Any user error (flags, data, checkpoints) ends as one line "error: <message>" and exit code 1;
// in a multi-process run the failing rank then aborts every rank (MPI_Abort), so nothing hangs.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include <omp.h>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

#include "llmc/cli.h"
#include "llmc/collective.h"
#include "llmc/collective_mpi.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/device.h"
#include "llmc/error.h"
#include "llmc/train_loop.h"
#ifdef __CUDACC__
#include "llmc/cuda/gpt2_cuda.cuh"
#endif
#if defined(__CUDACC__) && defined(USE_NCCL)
#include "llmc/cuda/collective_nccl.cuh"
#endif

// Number of CUDA devices (0 without a GPU, a driver, or when built by a host compiler).
static int cuda_device_count() {
#ifdef __CUDACC__
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" error
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

// The collective for this launch: one process; MPI (CPU backend under mpirun); NCCL (CUDA
// backend; bootstrapped by MPI, or by --rendezvous DIR with ranks from flags or Slurm).
static std::unique_ptr<llmc::Collective> make_collective(const llmc::TrainConfig& cfg, llmc::Device device,
                                                         const llmc::MpiSession& mpi) {
    const llmc::LaunchInfo li = llmc::detect_launch(cfg.flag_rank, cfg.flag_world_size, cfg.flag_local_rank);
    if (li.world_size == 1) return std::make_unique<llmc::SingleProcessCollective>();
#if defined(__CUDACC__) && defined(USE_NCCL)
    if (device == llmc::Device::Cuda) {
        if (mpi.active()) return llmc::make_nccl_collective_mpi(li.local_rank);
        if (cfg.rendezvous.empty())
            throw llmc::InputError(std::to_string(li.world_size) + " processes (from " + li.source +
                                   ") but no MPI to bootstrap NCCL; give --rendezvous DIR on a shared file system");
        return llmc::make_nccl_collective_file(li, cfg.rendezvous);
    }
#endif
    (void)device;
#ifdef USE_MPI
    if (mpi.active()) return std::make_unique<llmc::MpiCollective>();
#endif
    (void)mpi;
    throw llmc::InputError(std::to_string(li.world_size) + " processes (from " + li.source + ") but " +
                           (llmc::kMpiBuilt ? std::string("this process was not started by mpirun")
                                            : std::string("this build has no MPI (the Makefile found no mpicxx)")) +
                           "; the CPU backend needs `mpirun -np N` with an MPI build, or run one process");
}

int main(int argc, char** argv) {
    llmc::MpiSession mpi(&argc, &argv);  // MPI_Init / MPI_Finalize when started by a launcher
    llmc::TrainCli cli;
    const int rc = cli.parse(argc, argv);
    if (rc >= 0) return rc;
    llmc::TrainConfig cfg = cli.config();
    std::unique_ptr<llmc::Collective> comm;
    try {
        std::string notice;
        const llmc::Device device = llmc::resolve_device(cfg.device, cuda_device_count(), &notice);
        comm = make_collective(cfg, device, mpi);
        cfg.rank = comm->rank();
        cfg.world_size = comm->world_size();
        cfg.local_rank = llmc::detect_launch(cfg.flag_rank, cfg.flag_world_size, cfg.flag_local_rank).local_rank;
        if (!notice.empty() && cfg.rank == 0) std::fprintf(stderr, "%s\n", notice.c_str());
        if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
        std::string device_name = "cpu (" + std::to_string(omp_get_max_threads()) + " threads)";
        llmc::BackendFactory make_backend = [&cfg](const llmc::ModelConfig& m) -> std::unique_ptr<llmc::Backend> {
            return std::make_unique<llmc::CpuBackend>(m, cfg.seed);
        };
#ifdef __CUDACC__
        if (device == llmc::Device::Cuda) {
            // One GPU per process: the process's rank on its node picks it.
            if (cfg.local_rank >= cuda_device_count())
                throw llmc::InputError("local rank " + std::to_string(cfg.local_rank) + " has no GPU (" +
                                       std::to_string(cuda_device_count()) +
                                       " on this node); start at most one process per GPU");
            CUDA_CHECK(cudaSetDevice(cfg.local_rank));
            device_name = llmc::cuda::cuda_device_description();
            make_backend = [&cfg](const llmc::ModelConfig& m) -> std::unique_ptr<llmc::Backend> {
                return llmc::cuda::make_cuda_backend(m, cfg.seed);
            };
        }
#endif
        return cfg.eval_only ? llmc::run_eval(cfg, make_backend, device_name, *comm)
                             : llmc::run_training(cfg, make_backend, device_name, cli.config_file_text(), *comm);
    } catch (const std::exception& e) {
        const bool input = dynamic_cast<const llmc::InputError*>(&e) != nullptr;
        std::fflush(stdout);
        if (comm && comm->world_size() > 1)
            std::fprintf(stderr, "error: rank %d of %d: %s%s\n", comm->rank(), comm->world_size(),
                         input ? "" : "internal error: ", e.what());
        else
            std::fprintf(stderr, "error: %s%s\n", input ? "" : "internal error: ", e.what());
        if (comm && comm->world_size() > 1) comm->abort(1);  // ends every rank of the run
        return 1;
    }
}
