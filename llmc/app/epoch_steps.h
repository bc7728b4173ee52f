// -x -1, one epoch of the training data, as a run's step total. An epoch is counted in tokens: the
// data loader's whole global batches, batches_per_epoch x B x T x processes. A new run trains
// epoch / (tokens per step) steps (rounded down, at least 1). A run continued at step s (-y 1,
// --fork-from) that has trained `done` tokens by then trains the tokens left at its own tokens per
// step: its total is s + (epoch - done) / (tokens per step), rounded down (s: nothing to train). With
// -d unchanged that is the first start's total; with -d changed on the way the epoch stays an epoch,
// and a note and the record ("history" entry with "epoch": true, llmc/app/run_history.h) give both
// totals. The record's side (done, what trained step s): run_history.h epoch_steps_of_record.
// docs/training.md "Resuming and forking".
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

namespace llmc {

// The step total of -x -1 for a run at `start` that has trained `done` tokens (a new run: 0 and 0).
inline int epoch_total_steps(int64_t epoch_tokens, int64_t done_tokens, int64_t tokens_per_step, int start) {
    const int64_t left = std::max<int64_t>(0, epoch_tokens - done_tokens) / tokens_per_step;
    const int64_t total = start == 0 && done_tokens == 0 ? std::max<int64_t>(1, left) : start + left;
    return (int)std::min<int64_t>(total, INT_MAX);
}

// -x -1's step total for one run, and for a continued run what trained its start step.
struct EpochSteps {
    int64_t epoch_tokens = 0;     // one epoch of the training data
    int64_t done_tokens = 0;      // trained by the start step
    int64_t tokens_per_step = 0;  // this run's (B x T x accum x processes)
    int start = 0;                // the start step (0: a new run)
    int total = 0;                // the step total: epoch_total_steps
    // a continued run: the settings that trained step `start`
    int64_t was_tokens_per_step = 0;
    int was_total = -1;      // the step total then: -x -1's, or the -x given; -1: a new run
    bool was_epoch = false;  // whether that was -x -1 too (a change of the total is then no flag's change)

    // the total differs from the one that trained the start step (a note says both)
    bool changed() const { return was_total >= 0 && was_total != total; }
    // the record gains an "epoch" history entry was_total -> total (-x stayed -1)
    bool history_entry() const { return changed() && was_epoch; }

    // "-x -1 (one epoch, 3072 tokens): 768 tokens trained by step 6, 2304 left"
    std::string head() const {
        return "-x -1 (one epoch, " + std::to_string(epoch_tokens) + " tokens): " + std::to_string(done_tokens) +
               " tokens trained by step " + std::to_string(start) + ", " +
               std::to_string(std::max<int64_t>(0, epoch_tokens - done_tokens)) + " left";
    }
    // "...: at 256 tokens/step (was 128) the run ends at step 15 (was 24), 9 steps from here"
    std::string change_note() const {
        const std::string was_tps =
            was_tokens_per_step != tokens_per_step ? " (was " + std::to_string(was_tokens_per_step) + ")" : "";
        const std::string was = was_epoch ? std::to_string(was_total) : "-x " + std::to_string(was_total);
        return "note: " + head() + ": at " + std::to_string(tokens_per_step) + " tokens/step" + was_tps +
               " the run ends at step " + std::to_string(total) + " (was " + was + "), " +
               std::to_string(total - start) + " steps from here";
    }
    // "...: less than one step of 256 tokens; nothing to train"
    std::string nothing_left() const {
        return head() + ": less than one step of " + std::to_string(tokens_per_step) + " tokens; nothing to train";
    }
};

}  // namespace llmc
