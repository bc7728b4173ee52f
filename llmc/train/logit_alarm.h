// The logit alarm: flags a step whose max attention logit jumps, names the layer and head, and
// asks the loop for a checkpoint of that step (the weights after its update; the spiking forward used
// the previous step's weights), from which the run continues bit for bit.
//   --logit-alarm Z            z-score rule (the spike detector's, llmc/train/spikes.h): the step's max
//                              pre-softmax logit M (over layers, heads, micro-batches and ranks)
//                              against the last W = --spike-window values of M; flagged when
//                              z > Z (z is NaN, never flagged, until the window is full), or when
//                              M is not finite (an overflowed logit) once the window is full
//   --logit-alarm-above X      absolute rule, edge-triggered: flagged when M crosses above X, i.e.
//                              M > X while the rule is armed. It starts armed, disarms at every step
//                              with M > X and re-arms at every step with M <= X (no hysteresis; a NaN
//                              M leaves it as it is), so a run that stays above X raises one alarm, not
//                              one per step. Only steps with the rule on change it (a rule switched on
//                              at a resume starts armed).
//   --logit-alarm-cooldown N   at most one alarm checkpoint per N steps (the first flagged step
//                              at or after the previous alarm checkpoint's step + N gets one)
//   --logit-alarm-keep K       the newest K alarm checkpoints are pinned (0 = all), each with the newest
//                              checkpoint before it (alarm_pins, llmc/train/training_model.h):
//                              --keep-checkpoints never prunes them and they do not count toward it
//                              (checkpoint_dir.h); an older alarm checkpoint is unpinned and pruned like
//                              a regular one
// 0 turns a rule off. Every step's M joins the window after its z-score is taken (non-finite M
// never does); the loop calls observe() every step, also with both rules off, so the window a
// checkpoint holds is always the last W steps'. The state (window, whether the absolute rule is
// armed, every step that got an alarm checkpoint) round-trips through to_vector()/from_vector() for
// the training-state file, so a resumed run raises the same alarms.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/core/error.h"
#include "llmc/core/logit_stats.h"
#include "llmc/io/metrics.h"
#include "llmc/train/spikes.h"

namespace llmc {

struct LogitAlarmConfig {
    float z = 0.0f;      // --logit-alarm Z (0 = off)
    float above = 0.0f;  // --logit-alarm-above X (0 = off)
    int cooldown = 100;  // --logit-alarm-cooldown N
    int keep = 3;        // --logit-alarm-keep K (0 = pin every alarm checkpoint)
    int window = 100;    // --spike-window W
    bool on() const { return z > 0 || above > 0; }
};

struct LogitAlarmEvent {
    bool flagged = false;
    int layer = -1, head = -1;  // where the step's max logit is (the first such head)
    float value = 0.0f;         // M
    double z = 0.0;             // M's z-score against the window (NaN while it fills)
    bool by_z = false, by_above = false;
    bool checkpoint = false;  // the loop writes a checkpoint at this step
};

class LogitAlarm {
public:
    // Tags that start the alarm's section of the state: kStateTag [tag, window, n, steps...] (version 1,
    // written before the absolute rule was edge-triggered; restores an armed rule), kStateTagV2 [tag,
    // window, armed, n, steps...] (what to_vector writes).
    static constexpr double kStateTag = 1279348813.0;    // 0x4C41504D, "LAPM"
    static constexpr double kStateTagV2 = 1279348786.0;  // 0x4C415032, "LAP2"
    static bool is_state_tag(double v) { return v == kStateTag || v == kStateTagV2; }

    explicit LogitAlarm(const LogitAlarmConfig& c) : cfg_(c), window_(c.window) {}

    // Judges step `step` (1-based) from its reduced statistics, then adds M to the window.
    LogitAlarmEvent observe(int step, const LogitStats& s) {
        LogitAlarmEvent e;
        for (int l = 0; l < s.num_layers; l++)
            for (int h = 0; h < s.num_heads; h++) {
                const float v = s.max_logit[(size_t)l * s.num_heads + h];
                if (e.layer < 0 || v > e.value || (std::isnan(e.value) && !std::isnan(v))) {
                    e.layer = l;
                    e.head = h;
                    e.value = v;
                }
            }
        e.z = window_.zscore(e.value);
        const bool window_full = window_.count() == window_.window();
        // NaN z compares false; a non-finite M with a full window is an alarm of its own
        e.by_z = cfg_.z > 0 && (e.z > cfg_.z || (window_full && !std::isfinite(e.value)));
        e.by_above = cfg_.above > 0 && armed_ && e.value > cfg_.above;
        if (cfg_.above > 0 && e.value > cfg_.above) armed_ = false;  // NaN compares false both ways: no change
        else if (cfg_.above > 0 && e.value <= cfg_.above) armed_ = true;
        e.flagged = e.by_z || e.by_above;
        if (e.flagged && (ckpt_steps_.empty() || (long)step - ckpt_steps_.back() >= cfg_.cooldown)) {
            e.checkpoint = true;
            ckpt_steps_.push_back(step);
        }
        window_.push(e.value);
        return e;
    }

    const LogitAlarmConfig& config() const { return cfg_; }
    // Every step that got an alarm checkpoint (ascending).
    const std::vector<int>& checkpoint_steps() const { return ckpt_steps_; }
    // The alarm checkpoints pruning must keep: the newest --logit-alarm-keep of checkpoint_steps().
    std::vector<int> pinned_steps() const {
        const size_t k = cfg_.keep > 0 ? std::min(ckpt_steps_.size(), (size_t)cfg_.keep) : ckpt_steps_.size();
        return std::vector<int>(ckpt_steps_.end() - (long)k, ckpt_steps_.end());
    }
    // Whether the absolute rule would flag the next step above X.
    bool armed() const { return armed_; }

    // [tag, window state..., armed (0/1), n, steps...]
    std::vector<double> to_vector() const {
        std::vector<double> out = {kStateTagV2};
        const std::vector<double> w = window_.to_vector();
        out.insert(out.end(), w.begin(), w.end());
        out.push_back(armed_ ? 1.0 : 0.0);
        out.push_back((double)ckpt_steps_.size());
        for (int s : ckpt_steps_) out.push_back(s);
        return out;
    }
    // Restores from data[pos...] (written by to_vector()); returns the position after it.
    size_t from_vector(const std::vector<double>& data, size_t pos) {
        auto corrupt = [] {
            return InputError("logit-alarm state in the checkpoint is corrupt; resume from an earlier checkpoint");
        };
        if (pos >= data.size() || !is_state_tag(data[pos])) throw corrupt();
        const bool has_armed = data[pos] == kStateTagV2;
        pos = window_.from_vector(data, pos + 1);
        armed_ = true;
        if (has_armed) {
            if (pos >= data.size() || (data[pos] != 0.0 && data[pos] != 1.0)) throw corrupt();
            armed_ = data[pos++] == 1.0;
        }
        if (pos >= data.size()) throw corrupt();
        const double n = data[pos++];
        if (!(n >= 0) || n > (double)(data.size() - pos) || n != std::floor(n)) throw corrupt();
        // steps: integers 1 .. INT_MAX, ascending (range-checked before the conversion to int)
        ckpt_steps_.clear();
        for (size_t i = pos; i < pos + (size_t)n; i++) {
            const double s = data[i];
            if (!(s >= 1 && s <= 2147483647.0 && s == std::floor(s)) ||
                (!ckpt_steps_.empty() && s <= ckpt_steps_.back()))
                throw corrupt();
            ckpt_steps_.push_back((int)s);
        }
        return pos + (size_t)n;
    }

private:
    LogitAlarmConfig cfg_;
    SpikeDetector window_;
    std::vector<int> ckpt_steps_;  // every step that got an alarm checkpoint
    bool armed_ = true;            // the absolute rule fires at the next M > X
};

// The console line of a flagged step; checkpoint is the model file written for it ("" for none).
inline std::string logit_alarm_line(int step, const LogitAlarmEvent& e, int window, const std::string& checkpoint) {
    char value[32], z[32];
    std::snprintf(value, sizeof value, "%.4g", (double)e.value);
    std::snprintf(z, sizeof z, "%.3g", e.z);
    std::string line = "logit alarm at step " + std::to_string(step) + ": layer " + std::to_string(e.layer) + " head " +
                       std::to_string(e.head) + " max logit " + value;
    if (e.by_z) line += std::string(" (z ") + z + " over the last " + std::to_string(window) + " steps)";
    if (e.by_above) line += " (above --logit-alarm-above)";
    if (!checkpoint.empty()) line += " -> checkpoint " + checkpoint;
    return line;
}

// The "logit_alarm" entry of a flagged step's metrics record.
inline nlohmann::ordered_json logit_alarm_json(const LogitAlarmEvent& e) {
    return {{"layer", e.layer}, {"head", e.head},         {"value", json_float(e.value)}, {"z", json_float(e.z)},
            {"by_z", e.by_z},   {"by_above", e.by_above}, {"checkpoint", e.checkpoint}};
}

}  // namespace llmc
