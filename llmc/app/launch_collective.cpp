// The definitions behind llmc/app/launch_collective.h: the only unit of the trainer that tests which of
// MPI (USE_MPI) and NCCL (USE_NCCL, with the CUDA backend) were compiled in.
#include "llmc/app/launch_collective.h"

#include <stdexcept>

#include "llmc/dist/collective_choice.h"
#include "llmc/dist/collective_mpi.h"
#if defined(LLMC_CUDA_BACKEND) && defined(USE_NCCL)
#include "llmc/cuda/collective_nccl.cuh"
#endif

namespace llmc {

#if defined(LLMC_CUDA_BACKEND) && defined(USE_NCCL)
constexpr bool kNcclBuilt = true;
#else
constexpr bool kNcclBuilt = false;
#endif

struct LaunchSession::Impl {
    MpiSession mpi;
    Impl(int* argc, char*** argv) : mpi(argc, argv) {}
};

LaunchSession::LaunchSession(int* argc, char*** argv) : impl_(std::make_unique<Impl>(argc, argv)) {}
LaunchSession::~LaunchSession() = default;
bool LaunchSession::mpi_active() const { return impl_->mpi.active(); }
int LaunchSession::max_over_processes(int v) const { return impl_->mpi.max_over_processes(v); }
void LaunchSession::abort(int code) { impl_->mpi.abort(code); }

std::unique_ptr<Collective> make_collective(Device device, const LaunchInfo& li, const LaunchSession& session,
                                            const std::string& rendezvous) {
    switch (choose_collective(li, device == Device::Cuda, {kMpiBuilt, kNcclBuilt}, session.mpi_active(), rendezvous)) {
        case CollectiveKind::Single: return std::make_unique<SingleProcessCollective>();
#if defined(LLMC_CUDA_BACKEND) && defined(USE_NCCL)
        case CollectiveKind::NcclFile: return make_nccl_collective_file(li, rendezvous);
#ifdef USE_MPI
        case CollectiveKind::NcclMpi: return make_nccl_collective_mpi(li.local_rank);
#endif
#endif
#ifdef USE_MPI
        case CollectiveKind::Mpi: return std::make_unique<MpiCollective>();
#endif
        default: break;
    }
    throw std::logic_error("make_collective: a collective this build does not have was chosen");
}

}  // namespace llmc
