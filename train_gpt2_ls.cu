// train_gpt2_ls: the binary. Thin on purpose: parse the flags (llmc/app/cli.h), set up the processes
// (llmc/app/launch_collective.h) and build the backend for the device (llmc/app/backends.h,
// llmc/app/device.h), run the training loop (llmc/train/train_loop.h) or --eval-only
// (llmc/train/eval_run.h).
// Any user error (flags, data, checkpoints) ends as one line "error: <message>" and exit code 1;
// in a multi-process run the failing rank then aborts every rank (MPI_Abort), so nothing hangs. An
// error in the flags, which every process reads alike, is printed by rank 0 only.
// A failed write (disk full, `ulimit -f`: SIGXFSZ is ignored) is such an error: the previous
// checkpoint stays intact and loadable, metrics/logit_stats.jsonl keep only complete lines.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "llmc/app/backends.h"
#include "llmc/app/checkpoint_run.h"
#include "llmc/app/cli.h"
#include "llmc/app/launch_collective.h"
#include "llmc/app/rank_agreement.h"
#include "llmc/app/threads.h"
#include "llmc/app/validate.h"
#include "llmc/core/error.h"
#include "llmc/dist/collective.h"
#include "llmc/io/atomic_file.h"
#include "llmc/train/eval_run.h"
#include "llmc/train/train_loop.h"

int main(int argc, char** argv) {
    if (!llmc::use_passive_wait_policy(argv)) return 1;  // may re-execute this program (llmc/app/threads.h)
    // A write past `ulimit -f` fails with EFBIG (one error line, files left intact) instead of SIGXFSZ
    llmc::ignore_file_size_signal();
    llmc::LaunchSession mpi(&argc, &argv);  // MPI_Init / MPI_Finalize when started by a launcher
    llmc::TrainCli cli;
    const llmc::LaunchInfo env = llmc::launch_env();
    cli.set_launch_rank(env.rank, env.world_size);  // a flag error once, not once per process
    const int rc = cli.parse(argc, argv);
    // An error that read files may be this process's alone: end the whole launch, no rank left waiting
    if (rc > 0 && cli.error_read_files() && env.world_size > 1 && mpi.mpi_active()) mpi.abort(rc);
    if (env.world_size > 1 && mpi.mpi_active()) {
        // Flags that ended some processes (an error in argv, which rank 0 alone prints, or --help) and not
        // others (mpirun's A : B): every process ends, none left waiting in a collective; a failing rank
        // says why when rank 0 did not.
        const int rank0_rc = mpi.max_over_processes(env.rank == 0 ? rc : -1);
        const int any_rc = mpi.max_over_processes(rc);
        if (rc > 0 && rank0_rc < 0)
            std::fprintf(stderr, "error: rank %d of %d: %s\n", env.rank, env.world_size, cli.error().c_str());
        if (any_rc >= 0) return rc >= 0 ? rc : any_rc;
    }
    if (rc >= 0) return rc;
    llmc::TrainConfig cfg = cli.config();
    std::unique_ptr<llmc::Collective> comm;
    try {
        // Before the model is known: the device the launch asks for (it picks NCCL or MPI).
        const llmc::Device device = llmc::resolve_device(cfg.device, llmc::cuda_device_count(), nullptr);
        const llmc::LaunchInfo launch = llmc::detect_launch(cfg.flag_rank, cfg.flag_world_size, cfg.flag_local_rank);
        comm = llmc::make_collective(device, launch, mpi, cfg.rendezvous);
        cfg.rank = comm->rank();
        cfg.world_size = comm->world_size();
        cfg.local_rank = launch.local_rank;
        llmc::set_thread_count(cfg.threads);
        llmc::check_ranks_share_settings(*comm, cli.config_file_text(), cfg.fork_from);  // one experiment
        if (const int64_t d = cfg.eval_only ? 0 : llmc::batch_of_config_record(cfg, cfg.rank == 0)) {
            cli.set_flag("total-batch-size", std::to_string(d));  // the recorded batch, on this process count
            cfg.total_batch_size = cli.config().total_batch_size;
        }
        if (const int64_t m = cfg.eval_only ? 0 : llmc::val_batches_of_config_record(cfg, cfg.rank == 0)) {
            cli.set_flag("val-batches", std::to_string(m));  // the recorded validation set, on this process count
            cfg.val_batches = cli.config().val_batches;
        }
        if (cfg.eval_only) llmc::check_eval_only_continues_no_run(cfg);  // before -e's run is read
        // what -e's run recorded; the line saying so comes with the result
        const std::string eval_note = cfg.eval_only ? llmc::eval_settings_from_run(cfg, cfg.rank == 0) : "";
        // Once the model is known: a GPU the CUDA backend cannot use for it leaves `auto` on the CPU.
        const llmc::BackendFactory backend_for = [&cfg](const llmc::ModelConfig& m) {
            return llmc::make_backend(llmc::device_for_model(cfg.device, m, cfg.rank == 0), m, cfg.seed,
                                      cfg.local_rank);
        };
        return cfg.eval_only
                   ? llmc::run_eval(cfg, backend_for, *comm, eval_note)
                   : llmc::run_training(cfg, backend_for, cli.config_file_text(), *comm, llmc::make_step_profiler);
    } catch (const llmc::InputErrorOnEveryRank& e) {  // the same line on every rank: said once
        std::fflush(stdout);
        if (!comm || comm->rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
        // every rank is here: each ends as a finished run does (no abort: none is left waiting)
        return 1;
    } catch (const std::exception&) {
        const std::string message = llmc::current_error_message(
            "use a smaller model (--layers, --channels, --vocab, --max-seq-len) or batch (-b, -t)");
        std::fflush(stdout);
        if (comm && comm->world_size() > 1)
            std::fprintf(stderr, "error: rank %d of %d: %s\n", comm->rank(), comm->world_size(), message.c_str());
        else std::fprintf(stderr, "error: %s\n", message.c_str());
        if (comm && comm->world_size() > 1) comm->abort(1);  // ends every rank of the run
        return 1;
    }
}
