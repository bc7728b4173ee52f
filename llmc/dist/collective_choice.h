// Which collective a launch gets, from what the binary was built with and how it was started.
// A pure function (no MPI, NCCL or CUDA headers) so every combination of USE_MPI x USE_NCCL x
// launcher is tested on the CPU (test/test_collective.cpp); train_gpt2_ls.cu builds the choice.
//   one process                           -> Single
//   CUDA backend, NCCL built, under mpirun -> NcclMpi   (MPI broadcasts NCCL's unique id)
//   CUDA backend, NCCL built, --rendezvous -> NcclFile  (the id through a shared directory)
//   otherwise, under mpirun with MPI built -> Mpi       (host buffers; CUDA gradients staged)
//   anything else                         -> InputError naming what is missing and the fix
#pragma once
#include <string>

#include "llmc/dist/collective.h"
#include "llmc/core/error.h"

namespace llmc {

enum class CollectiveKind { Single, Mpi, NcclMpi, NcclFile };

struct CollectiveBuild {
    bool mpi = false;   // compiled with USE_MPI
    bool nccl = false;  // compiled with USE_NCCL (and the CUDA backend)
};

// li: the launch (detect_launch); cuda: the CUDA backend was chosen; mpi_active: MPI_Init ran (a
// launcher started this process and the build has MPI); rendezvous: --rendezvous DIR or "".
inline CollectiveKind choose_collective(const LaunchInfo& li, bool cuda, CollectiveBuild built, bool mpi_active,
                                        const std::string& rendezvous) {
    if (li.world_size == 1) return CollectiveKind::Single;
    const std::string who = std::to_string(li.world_size) + " processes (from " + li.source + ") but ";
    if (cuda && built.nccl) {
        if (mpi_active) return CollectiveKind::NcclMpi;
        if (!rendezvous.empty()) return CollectiveKind::NcclFile;
        throw InputError(who +
                         (built.mpi ? "this process was not started by mpirun"
                                    : "this build has no MPI (the Makefile found no mpicxx)") +
                         ", so nothing can hand out NCCL's id; give --rendezvous DIR (a directory every rank sees)");
    }
    if (mpi_active) return CollectiveKind::Mpi;
    std::string why;
    if (!built.mpi) why = "this build has no MPI (the Makefile found no mpicxx)";
    else why = "this process was not started by mpirun";
    std::string fix = cuda ? "; this build has no NCCL either (no nccl.h): install NCCL and rebuild, then use "
                             "--rendezvous DIR or mpirun, or run one process"
                           : "; the CPU backend needs `mpirun -np N` with an MPI build (install Open MPI and "
                             "rebuild), or run one process";
    throw InputError(who + why + fix);
}

}  // namespace llmc
