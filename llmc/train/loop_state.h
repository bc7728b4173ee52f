// LoopState: what the training loop carries from step to step besides the weights and the AdamW
// moments, and what a checkpoint must hold of it for a resumed run to continue bit for bit: the
// train loader's position, the spike detectors' windows, the logit alarm and the samples' RNG.
// to_train_state / from_train_state map it onto the training-state file's loop sections
// (llmc/io/train_state.h, docs/formats.md):
//   rng     [sample RNG state]
//   loader  LoaderState::to_vector() of the train loader
//   extra   [loss window, norm window (SpikeDetector::to_vector each),
//            logit alarm (LogitAlarm::to_vector, starts with its tag) when the alarm is on or took a checkpoint]
// A state without the alarm section restores an alarm with an empty window (and an armed absolute rule).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/app/train_config.h"
#include "llmc/core/error.h"
#include "llmc/core/rng.h"
#include "llmc/io/dataloader.h"
#include "llmc/io/train_state.h"
#include "llmc/train/logit_alarm.h"
#include "llmc/train/spikes.h"

namespace llmc {

inline LogitAlarmConfig logit_alarm_config(const TrainConfig& c) {
    LogitAlarmConfig a;
    a.z = c.logit_alarm;
    a.above = c.logit_alarm_above;
    a.cooldown = c.logit_alarm_cooldown;
    a.keep = c.logit_alarm_keep;
    a.window = c.spike_window;
    return a;
}

struct LoopState {
    DataLoader& train;                       // the train loader: its position is saved and restored
    SpikeDetector loss_spikes, norm_spikes;  // the last --spike-window losses and gradient norms
    LogitAlarm alarm;                        // window of the steps' max logits, pinned checkpoint steps
    Rng sample_rng;                          // draws of the samples printed every -s steps

    LoopState(const TrainConfig& c, DataLoader& train_loader)
        : train(train_loader),
          loss_spikes(c.spike_window),
          norm_spikes(c.spike_window),
          alarm(logit_alarm_config(c)),
          sample_rng(c.seed ^ 0x53414D504C45ull) {}  // "SAMPLE"

    // Fills st's loop sections (rng, loader, extra); the caller fills the rest.
    void to_train_state(TrainState& st) const {
        st.rng = {sample_rng.state()};
        st.loader = train.state().to_vector();
        st.extra = loss_spikes.to_vector();
        const std::vector<double> norm = norm_spikes.to_vector();
        st.extra.insert(st.extra.end(), norm.begin(), norm.end());
        if (alarm.config().on() || !alarm.checkpoint_steps().empty()) {
            const std::vector<double> a = alarm.to_vector();
            st.extra.insert(st.extra.end(), a.begin(), a.end());
        }
    }

    // Restores from st's loop sections, read from the file `path` (named in the error when the
    // sections do not have the layout above); `fork`: for --fork-from, not -y 1.
    void from_train_state(const TrainState& st, const std::string& path, bool fork = false) {
        train.restore(LoaderState::from_vector(st.loader), fork);
        size_t pos = loss_spikes.from_vector(st.extra, 0);
        pos = norm_spikes.from_vector(st.extra, pos);
        if (pos < st.extra.size() && LogitAlarm::is_state_tag(st.extra[pos]))  // a run with the logit alarm
            pos = alarm.from_vector(st.extra, pos);
        if (pos != st.extra.size() || st.rng.size() != 1)
            throw InputError(path +
                             ": unexpected loop-state layout; it was written by another version, start a fresh run");
        sample_rng.set_state(st.rng[0]);
    }
};

}  // namespace llmc
