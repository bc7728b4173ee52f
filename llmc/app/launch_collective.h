// The processes of a launch: MPI's session (MPI_Init / MPI_Finalize when an MPI launcher started this
// process) and the collective the launch trains with (single process, MPI, NCCL; the choice:
// llmc/dist/collective_choice.h). Declared here, defined in llmc/app/launch_collective.cpp, the one unit
// of the trainer that USE_MPI and USE_NCCL change: the Makefile compiles it once per combination and
// links each with the trainer's one object (the build matrix).
#pragma once
#include <memory>
#include <string>

#include "llmc/app/device.h"
#include "llmc/dist/collective.h"

namespace llmc {

class LaunchSession {
public:
    LaunchSession(int* argc, char*** argv);  // MPI_Init when an MPI launcher started this process
    ~LaunchSession();                        // MPI_Finalize when this session called MPI_Init
    LaunchSession(const LaunchSession&) = delete;
    LaunchSession& operator=(const LaunchSession&) = delete;
    bool mpi_active() const;              // this session called MPI_Init
    int max_over_processes(int v) const;  // the largest v over the processes (MpiSession's; v without MPI)
    [[noreturn]] void abort(int code);    // MPI_Abort when active (ends every process), else exit

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The collective for this launch. device: what --device asks for before the model is known (it picks
// NCCL or MPI); rendezvous: --rendezvous DIR or "".
std::unique_ptr<Collective> make_collective(Device device, const LaunchInfo& li, const LaunchSession& session,
                                            const std::string& rendezvous);

}  // namespace llmc
