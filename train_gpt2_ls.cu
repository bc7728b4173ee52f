// train_gpt2_ls: the binary. Thin on purpose: parse the flags (llmc/app/cli.h), pick the device
// (llmc/app/device.h), set up the processes (llmc/collective*.h), build the backend (llmc/cpu/ or
// llmc/cuda/), run the training loop or --eval-only (llmc/train/train_loop.h).
// Any user error (flags, data, checkpoints) ends as one line "error: <message>" and exit code 1;
// in a multi-process run the failing rank then aborts every rank (MPI_Abort), so nothing hangs.
// A failed write (disk full, `ulimit -f`: SIGXFSZ is ignored) is such an error: the previous
// checkpoint stays intact and loadable, metrics/logit_stats.jsonl keep only complete lines.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include <omp.h>

#include "llmc/app/device.h"  // LLMC_CUDA_BACKEND: nvcc, or the device emulation (docs/emulation.md)
#ifdef LLMC_CUDA_BACKEND
#include <cuda_runtime.h>
#endif

#include "llmc/io/atomic_file.h"
#include "llmc/app/cli.h"
#include "llmc/dist/collective.h"
#include "llmc/dist/collective_choice.h"
#include "llmc/dist/collective_mpi.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/core/error.h"
#include "llmc/train/train_loop.h"
#ifdef LLMC_CUDA_BACKEND
#include "llmc/cuda/gpt2_cuda.cuh"
#endif
#if defined(LLMC_CUDA_BACKEND) && defined(USE_NCCL)
#include "llmc/cuda/collective_nccl.cuh"
#endif

// Number of CUDA devices (0 without a GPU, a driver, or when built by a host compiler).
static int cuda_device_count() {
#ifdef LLMC_CUDA_BACKEND
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

#if defined(LLMC_CUDA_BACKEND) && defined(USE_NCCL)
constexpr bool kNcclBuilt = true;
#else
constexpr bool kNcclBuilt = false;
#endif

// The collective for this launch (the choice: llmc/dist/collective_choice.h).
static std::unique_ptr<llmc::Collective> make_collective(const llmc::TrainConfig& cfg, llmc::Device device,
                                                         const llmc::MpiSession& mpi) {
    const llmc::LaunchInfo li = llmc::detect_launch(cfg.flag_rank, cfg.flag_world_size, cfg.flag_local_rank);
    switch (llmc::choose_collective(li, device == llmc::Device::Cuda, {llmc::kMpiBuilt, kNcclBuilt}, mpi.active(),
                                    cfg.rendezvous)) {
        case llmc::CollectiveKind::Single: return std::make_unique<llmc::SingleProcessCollective>();
#if defined(LLMC_CUDA_BACKEND) && defined(USE_NCCL)
        case llmc::CollectiveKind::NcclFile: return llmc::make_nccl_collective_file(li, cfg.rendezvous);
#ifdef USE_MPI
        case llmc::CollectiveKind::NcclMpi: return llmc::make_nccl_collective_mpi(li.local_rank);
#endif
#endif
#ifdef USE_MPI
        case llmc::CollectiveKind::Mpi: return std::make_unique<llmc::MpiCollective>();
#endif
        default: break;
    }
    throw std::logic_error("make_collective: a collective this build does not have was chosen");
}

int main(int argc, char** argv) {
    // A write past `ulimit -f` fails with EFBIG (one error line, files left intact) instead of SIGXFSZ
    llmc::ignore_file_size_signal();
    llmc::MpiSession mpi(&argc, &argv);  // MPI_Init / MPI_Finalize when started by a launcher
    llmc::TrainCli cli;
    const int rc = cli.parse(argc, argv);
    if (rc >= 0) return rc;
    llmc::TrainConfig cfg = cli.config();
    std::unique_ptr<llmc::Collective> comm;
    try {
        const int gpus = cuda_device_count();
        // Before the model is known: the device the launch asks for (it picks NCCL or MPI).
        const llmc::Device device = llmc::resolve_device(cfg.device, gpus, nullptr);
        comm = make_collective(cfg, device, mpi);
        cfg.rank = comm->rank();
        cfg.world_size = comm->world_size();
        cfg.local_rank = llmc::detect_launch(cfg.flag_rank, cfg.flag_world_size, cfg.flag_local_rank).local_rank;
        if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
        // Once the model is known: a GPU the CUDA backend cannot use for it leaves `auto` on the CPU.
        llmc::BackendFactory make_backend = [&cfg, gpus](const llmc::ModelConfig& m) -> std::unique_ptr<llmc::Backend> {
            std::string note;
            const llmc::Device d = llmc::resolve_device(cfg.device, gpus, m, &note);
            if (!note.empty() && cfg.rank == 0) std::fprintf(stderr, "%s\n", note.c_str());
#ifdef LLMC_CUDA_BACKEND
            if (d == llmc::Device::Cuda) {
                // One GPU per process: the process's rank on its node picks it.
                if (cfg.local_rank >= gpus)
                    throw llmc::InputError("local rank " + std::to_string(cfg.local_rank) + " has no GPU (" +
                                           std::to_string(gpus) + " on this node); start at most one process per GPU");
                CUDA_CHECK(cudaSetDevice(cfg.local_rank));
                return llmc::cuda::make_cuda_backend(m, cfg.seed);
            }
#endif
            (void)d;
            return std::make_unique<llmc::CpuBackend>(m, cfg.seed);
        };
        return cfg.eval_only ? llmc::run_eval(cfg, make_backend, *comm)
                             : llmc::run_training(cfg, make_backend, cli.config_file_text(), *comm);
    } catch (const std::exception& e) {
        const std::string message = llmc::error_message(
            e, "use a smaller model (--layers, --channels, --vocab, --max-seq-len) or batch (-b, -t)");
        std::fflush(stdout);
        if (comm && comm->world_size() > 1)
            std::fprintf(stderr, "error: rank %d of %d: %s\n", comm->rank(), comm->world_size(), message.c_str());
        else
            std::fprintf(stderr, "error: %s\n", message.c_str());
        if (comm && comm->world_size() > 1) comm->abort(1);  // ends every rank of the run
        return 1;
    }
}
