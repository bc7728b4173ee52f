// Interrupts and preemption: SIGINT (Ctrl-C), SIGTERM (kill, Slurm's time limit and preemption) and
// SIGUSR1 (Slurm's warning before the time limit, `--signal=USR1@60` in scripts/slurm_train.sh) stop a
// training run cleanly (docs/training.md, "Interrupts and preemption"):
//   - the handler only records the signal (and writes one fixed acknowledgement line to stderr);
//   - the ranks agree on the stop without a collective of their own (with NCCL every collective is a
//     device synchronization): in each step every rank casts its vote, the signal it has recorded so
//     far (cast_vote()), into a reduction the step does anyway, the Max of the logit statistics
//     (train_step, llmc/train/train_step.h); after the step the loop (llmc/train/train_loop.h) asks
//     agreed_signal(), the Max over the ranks, so a signal that reached one rank stops every rank
//     after the same step. The bound on the delay: a signal stops the run after the step during which
//     it arrived when it arrived before that step's vote (after its forward and backward passes, the
//     bulk of a step), else after the next step (one step more; with one process there is no vote and
//     no delay: the signal as of the end of the step counts);
//   - every rank writes its part of a checkpoint of that step through the scheduled save path
//     (save_checkpoint, llmc/train/training_model.h), rank 0 prints interrupt_line() on stderr, every rank
//     waits for rank 0's DONE marker (a barrier: launchers end the other ranks at the first non-zero exit),
//     and the process exits with interrupt_exit_code(): 128 + the signal's number, as a shell reports a
//     process ended by that signal (Linux: SIGINT 130, SIGUSR1 138, SIGTERM 143).
// A closed stdout stops a run the same way: while run_training runs, SIGPIPE is ignored (SigpipeIgnored),
// so that a write to a pipe whose reader ended (`| head`, or `| tee` ended by the same Ctrl-C) fails with
// EPIPE instead of ending the process before its checkpoint; the run's log (llmc/train/run_log.h) then
// stops printing and the loop asks stop_for(SIGPIPE): a checkpoint of the step and exit status 141, what
// a process that SIGPIPE ended shows (a signal recorded before the stop is decided names it, e.g. the
// Ctrl-C: 130).
// Closed before the first step (the header, step 0's validation), there is no step to checkpoint: the run
// stops there on every rank with one line (unstarted_line) and exit status 141; a run that this start
// began leaves no files behind, a run it continues keeps its record as it was (llmc/train/train_loop.h).
// The signal handler is installed for the loop's lifetime only (before it the default action ends the
// process).
// A signal during the last step changes nothing: the run ends as planned (its final checkpoint, exit 0).
// A second SIGINT while a stop is pending ends the process at once (SIGINT's default action). That
// cannot damage a checkpoint: every file is written atomically and a step counts only once its DONE
// marker exists (llmc/io/atomic_file.h, llmc/io/checkpoint_dir.h), so the previous complete checkpoint
// stays loadable. A further SIGTERM or SIGUSR1 changes nothing (the save already asked for goes on;
// SIGKILL ends it at once).
// POSIX (sigaction, write). Host-only, no GPU needed.
#pragma once
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>

#include "llmc/dist/collective.h"
#include "llmc/io/checkpoint_dir.h"

namespace llmc {

// The signal that asked this process to stop, 0 while none did. The project's one piece of global
// mutable state, and necessarily so: a signal handler may only communicate with the rest of the
// program through an object of type volatile std::sig_atomic_t with static storage duration
// (C++17 [support.signal]); it is set only by on_interrupt_signal, cleared and read by InterruptHandlers.
inline volatile std::sig_atomic_t g_interrupt_signal = 0;

// The signals that stop a run, and their names.
inline constexpr int kInterruptSignals[] = {SIGINT, SIGTERM, SIGUSR1};

inline const char* interrupt_signal_name(int sig) {
    switch (sig) {
        case SIGINT: return "SIGINT";
        case SIGTERM: return "SIGTERM";
        case SIGUSR1: return "SIGUSR1";
        case SIGPIPE: return "SIGPIPE";
        default: return "a signal";
    }
}

// The process's exit status after a stop for `sig`: 128 + its number, what a shell shows for a
// process that `sig` ended.
inline int interrupt_exit_code(int sig) { return 128 + sig; }

// The line rank 0 prints on stderr after the stop at `step`; output_dir empty: nothing was saved.
inline std::string interrupt_line(int sig, int step, const std::string& output_dir) {
    const std::string head = std::string("interrupted by ") + interrupt_signal_name(sig) + " at step " +
                             std::to_string(step) +
                             (sig == SIGPIPE ? " (stdout was closed: the reader of its pipe ended): " : ": ");
    if (output_dir.empty()) return head + "nothing was saved (no -o given; give -o DIR to keep checkpoints)";
    return head + "wrote " + model_path(output_dir, step) + "; resume with -y 1";
}

// The line rank 0 prints on stderr when stdout was closed before the first step (SIGPIPE's stop, exit
// status 141): nothing was trained. `removed`: this start began the run in output_dir and removed its
// files; else without -o nothing was saved, and with it the run keeps what it held, its record as it was
// (a checkpoint of start_step to resume, or a run that has none yet, which -y 1 starts again from step 0),
// the flags this start gave not recorded.
inline std::string unstarted_line(const std::string& output_dir, int start_step, bool removed) {
    const std::string head = "stopped before the first step: stdout was closed (the reader of its pipe ended); ";
    if (output_dir.empty()) return head + "nothing was trained or saved";
    if (removed)
        return head + "nothing was trained, and the files this run had written in " + output_dir +
               " are removed; start it again with stdout open";
    const std::string again = " (its config.json is as it was: give again the flags that change a setting)";
    if (start_step > 0)
        return head + "nothing was trained past step " + std::to_string(start_step) + "; resume with -y 1" + again;
    return head + "nothing was trained; " + output_dir + " holds the run without a checkpoint: continue it with -y 1" +
           again;
}

// SIGPIPE ignored for the object's lifetime (run_training's), its previous disposition restored after:
// a write to a closed stdout then fails with EPIPE, which the run's log turns into a stop.
class SigpipeIgnored {
public:
    SigpipeIgnored() {
        struct sigaction ignore;
        std::memset(&ignore, 0, sizeof ignore);
        ignore.sa_handler = SIG_IGN;
        sigemptyset(&ignore.sa_mask);
        ignored_ = ::sigaction(SIGPIPE, &ignore, &previous_) == 0;
    }
    ~SigpipeIgnored() {
        if (ignored_) ::sigaction(SIGPIPE, &previous_, nullptr);
    }
    SigpipeIgnored(const SigpipeIgnored&) = delete;
    SigpipeIgnored& operator=(const SigpipeIgnored&) = delete;

private:
    struct sigaction previous_;
    bool ignored_ = false;
};

// The handler: async-signal-safe (only sig_atomic_t stores, write, signal, raise).
inline void on_interrupt_signal(int sig) {
    if (sig == SIGINT && g_interrupt_signal != 0) {  // a second Ctrl-C: SIGINT's default action, now
        ::signal(SIGINT, SIG_DFL);
        ::raise(SIGINT);  // delivered as this handler returns (SIGINT is blocked while it runs)
        return;
    }
    if (g_interrupt_signal != 0) return;  // the first signal names the stop
    g_interrupt_signal = sig;
    const char* msg = sig == SIGINT    ? "train_gpt2_ls: SIGINT received: stopping after this step with a checkpoint "
                                         "(a second SIGINT stops at once)\n"
                      : sig == SIGTERM ? "train_gpt2_ls: SIGTERM received: stopping after this step with a checkpoint "
                                         "(a SIGINT stops at once)\n"
                                       : "train_gpt2_ls: SIGUSR1 received: stopping after this step with a checkpoint "
                                         "(a SIGINT stops at once)\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, std::strlen(msg));
    (void)ignored;
}

// Usage: InterruptHandlers interrupts;   (the loop's lifetime: installs the handler, restores the
//        ...                              previous dispositions when it goes out of scope)
//        per step: reduce_logit_stats(comm, stats, interrupts.cast_vote());   (train_step)
//        if (int sig = interrupts.agreed_signal(comm)) { checkpoint; report; return interrupt_exit_code(sig); }
class InterruptHandlers {
public:
    // A signal the process inherited as ignored (e.g. SIGINT of a `cmd &` started by a script) stays ignored.
    InterruptHandlers() {
        g_interrupt_signal = 0;
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_interrupt_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;  // reads and writes interrupted by the signal resume
        for (int i = 0; i < kCount; i++) {
            installed_[i] = ::sigaction(kInterruptSignals[i], nullptr, &previous_[i]) == 0 &&
                            previous_[i].sa_handler != SIG_IGN && ::sigaction(kInterruptSignals[i], &sa, nullptr) == 0;
        }
    }
    ~InterruptHandlers() {
        for (int i = 0; i < kCount; i++)
            if (installed_[i]) ::sigaction(kInterruptSignals[i], &previous_[i], nullptr);
    }

    // A stop the program asks itself for `sig` (SIGPIPE: stdout was closed), counted as that signal would
    // be: after this step with a checkpoint (one process; with more, the rank's next vote), unless a signal
    // names the stop (a signal recorded by then wins). Kept apart from the handler's record, so that a
    // user's first Ctrl-C after it is still a first one (a checkpoint, not SIGINT's default action).
    void stop_for(int sig) {
        if (requested_ == 0) requested_ = sig;
    }
    InterruptHandlers(const InterruptHandlers&) = delete;
    InterruptHandlers& operator=(const InterruptHandlers&) = delete;

    // This step's vote, set to the signal this rank has recorded so far (0: none), for the step to reduce
    // in place with Max over the ranks in a reduction it does anyway (a signal number is exact in a float).
    // Every rank casts it at the same point of every step.
    float* cast_vote() {
        vote_ = (float)stop_signal();
        return &vote_;
    }
    // The signal every rank stops for after this step, 0 to go on: the largest signal number in the votes
    // the ranks cast in this step (one process: the signal recorded so far). Makes no collective call; a
    // step that cast no vote agrees on 0. Clears the vote for the next step.
    int agreed_signal(const Collective& comm) {
        const int sig = comm.world_size() == 1 ? stop_signal() : (int)vote_;
        vote_ = 0.0f;
        return sig;
    }

private:
    // The stop this rank asks for so far: the signal recorded, else the program's own request (stop_for).
    int stop_signal() const { return g_interrupt_signal != 0 ? (int)g_interrupt_signal : requested_; }

    static constexpr int kCount = sizeof kInterruptSignals / sizeof kInterruptSignals[0];
    struct sigaction previous_[kCount];
    bool installed_[kCount] = {};
    float vote_ = 0.0f;  // cast_vote() .. agreed_signal(): this rank's vote, then (reduced) the ranks' Max
    int requested_ = 0;  // stop_for's signal, 0 while none
};

}  // namespace llmc
