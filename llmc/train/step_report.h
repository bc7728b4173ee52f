// What one optimizer step measured and decided (StepResult), and how it is reported: the console
// line (with the run's elapsed time and ETA), the metrics.jsonl record, the line per checkpoint and
// the end-of-run summary (docs/training.md describes them). The training loop fills a StepResult per
// step (train_step, llmc/train/train_step.h) and adds what only the device knows (MFU, device
// memory) and the validation loss when one was due.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/core/logit_stats.h"
#include "llmc/io/metrics.h"
#include "llmc/train/logit_alarm.h"
#include "llmc/train/qk_clip.h"

namespace llmc {

// Every value is the same on every rank (reduced over the ranks before any decision).
struct StepResult {
    int step = 0;                         // the step just taken (1-based)
    float loss = 0.0f, zloss = 0.0f;      // the global batch's mean cross-entropy and z-loss
    float norm = 0.0f;                    // global gradient norm (before clipping)
    float lr = 0.0f;                      // learning rate of the update
    double loss_z = 0.0, norm_z = 0.0;    // z-scores against the spike windows (NaN while they fill)
    bool nonfinite = false;               // loss or norm not finite: the update was skipped
    bool spike = false;                   // a z-score above --spike-z
    bool skip_spike = false;              // a z-score above --skip-spikes: the update was skipped
    std::vector<ClippedHead> clipped;     // heads QK-Clip rescaled after the update
    LogitAlarmEvent alarm;                // the logit alarm's verdict on the step
    bool alarm_checkpoint = false;        // the alarm asked for a checkpoint and there is an -o to write it to
    double ms = 0.0, tokens_per_s = 0.0;  // wall time of the step (without validation and reports)
};

inline std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

// A wall-clock duration in seconds for the console: "4.2s" below a minute, "3m07s" below an hour,
// "2h05m" from there ("?" when not finite or negative, e.g. an ETA before any step).
inline std::string format_duration(double seconds) {
    if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
    char buf[48];
    if (seconds < 59.95) {
        std::snprintf(buf, sizeof buf, "%.1fs", seconds);
    } else if (seconds < 3600) {
        const long s = std::lround(seconds);
        std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
    } else {
        const long m = std::lround(seconds / 60);
        std::snprintf(buf, sizeof buf, "%ldh%02ldm", m / 60, m % 60);
    }
    return buf;
}

// Estimated seconds to the last step: the mean wall time of the steps this process took so far
// (elapsed_s over steps_done, validation, samples and checkpoints included) times the steps left.
// NaN before the first step.
inline double eta_seconds(double elapsed_s, int steps_done, int steps_left) {
    if (steps_done <= 0) return std::nan("");
    return elapsed_s / steps_done * std::max(0, steps_left);
}

// Wall-clock progress of this process's run: seconds since its first step began, and the ETA.
struct StepProgress {
    double elapsed_s = 0.0;
    double eta_s = std::nan("");
};

// The wall-clock time now, in Unix seconds rounded to milliseconds (the "time" of metrics.jsonl).
inline double unix_time_now() {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    return (double)ms / 1000.0;
}

// The console line (two lines when the logit alarm flagged the step). mfu < 0: not known.
// alarm_checkpoint: the model file written for the alarm ("" for none).
inline std::string step_line(const StepResult& r, int max_steps, const LogitStats& s, std::optional<double> val_loss,
                             double mfu, double mem_gib, const std::string& alarm_checkpoint, int spike_window,
                             const StepProgress& progress) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "step %*d/%d | loss %.4f | norm %.2f | lr %.2e | %.1f ms | %.0f tok/s | max-logit %.2f",
                  (int)std::to_string(max_steps).size(), r.step, max_steps, r.loss, r.norm, r.lr, r.ms, r.tokens_per_s,
                  s.overall_max());
    std::string line = buf;
    line += " | elapsed " + format_duration(progress.elapsed_s) + " | ETA " + format_duration(progress.eta_s);
    if (val_loss) line += " | val " + fmt("%.4f", *val_loss);
    if (mfu >= 0) line += " | MFU " + fmt("%.1f%%", 100.0 * mfu) + " | mem " + fmt("%.2f GiB", mem_gib);
    const std::string z = " (z loss " + fmt("%.1f", r.loss_z) + ", norm " + fmt("%.1f", r.norm_z) + ")";
    if (r.nonfinite) line += " | SKIPPED: non-finite loss or norm";
    else if (r.skip_spike) line += " | SKIPPED: spike" + z;
    else if (r.spike) line += " | spike" + z;
    if (!r.clipped.empty()) line += " | qk-clip " + std::to_string(r.clipped.size()) + " head(s)";
    if (r.alarm.flagged) line += "\n" + logit_alarm_line(r.step, r.alarm, spike_window, alarm_checkpoint);
    return line;
}

// The metrics.jsonl record, up to the device measures (mfu, device_memory_bytes) the loop appends.
// qk_clip_on: --qk-clip is given (the record then lists the clipped heads, possibly none).
// unix_time: when the record was made (unix_time_now()).
inline nlohmann::ordered_json step_record(const StepResult& r, const LogitStats& s, std::optional<double> val_loss,
                                          bool qk_clip_on, double unix_time) {
    nlohmann::ordered_json rec = {{"step", r.step},
                                  {"time", unix_time},
                                  {"loss", json_float(r.loss)},
                                  {"z_loss", json_float(r.zloss)},
                                  {"grad_norm", json_float(r.norm)},
                                  {"lr", r.lr},
                                  {"ms", r.ms},
                                  {"tokens_per_s", r.tokens_per_s},
                                  {"max_attn_logit", json_float(s.overall_max())},
                                  {"out_max_logit", json_float(s.out_max_logit)},
                                  {"loss_z", json_float(r.loss_z)},
                                  {"norm_z", json_float(r.norm_z)},
                                  {"spike", r.spike},
                                  {"skipped_nonfinite", r.nonfinite},
                                  {"skipped_spike", r.skip_spike}};
    if (val_loss) rec["val_loss"] = json_float(*val_loss);
    if (qk_clip_on) {
        nlohmann::ordered_json heads = nlohmann::ordered_json::array();
        for (const ClippedHead& c : r.clipped) heads.push_back({c.layer, c.head});
        rec["qk_clip_heads"] = r.clipped.size();
        rec["qk_clipped"] = heads;  // [[layer, head], ...]
    }
    if (r.alarm.flagged) rec["logit_alarm"] = logit_alarm_json(r.alarm);
    return rec;
}

// The line after a checkpoint was written; model_file is its model file.
inline std::string checkpoint_line(int step, const std::string& model_file, bool alarm) {
    return "checkpoint of step " + std::to_string(step) + (alarm ? " (logit alarm)" : "") + ": " + model_file;
}

// What the end-of-run summary reports; filled by the loop as it goes (RunSummary::note_*).
struct RunSummary {
    int start_step = 0;               // the step this process started from (a resumed run's checkpoint)
    int last_step = 0;                // the last step taken (or start_step)
    int64_t tokens_per_step = 0;      // B * T * accum * processes, this process's
    int64_t tokens_before = 0;        // tokens of the steps up to start_step, per the run record (resumed, forked)
    double wall_s = 0.0;              // seconds this process spent from its first step to its end
    std::optional<double> final_val;  // the last validation loss and its step
    int final_val_step = 0;
    // the lowest validation loss of the run (earlier processes' included) after val_set_since, and its step
    std::optional<double> best_val;
    int best_val_step = 0;
    int val_set_since = -1;     // the step at which the validation set last changed (-1: never)
    std::string val_set_flags;  // the flags that changed it then ("--val-data")
    std::string weights;        // the last model file written ("" for none)
    bool output = false;        // the run writes into an -o (no weights then: no step was trained)
    // steps whose update was skipped (their tokens were read, the weights not changed), the run's:
    // earlier processes' from metrics.jsonl, this process's as it goes
    int skipped_nonfinite = 0;
    int skipped_spike = 0;

    void note_val(int step, double loss) {
        final_val = loss;
        final_val_step = step;
        if (step > val_set_since && std::isfinite(loss) && (!best_val || loss < *best_val)) {
            best_val = loss;
            best_val_step = step;
        }
    }
    void note_skipped(bool nonfinite, bool spike) {
        skipped_nonfinite += nonfinite ? 1 : 0;
        skipped_spike += spike ? 1 : 0;
    }
    // note_val of every "val_loss" and note_skipped of every record in a metrics.jsonl (a resumed run's
    // earlier steps); lines that do not parse, and fields that are not a number or a bool, are passed over.
    void note_metrics_records(const std::string& metrics_path) {
        std::ifstream in(metrics_path);
        for (std::string line; std::getline(in, line);) {
            const nlohmann::json rec = nlohmann::json::parse(line, nullptr, false);
            if (!rec.is_object() || !rec.contains("step") || !rec["step"].is_number_integer()) continue;
            if (rec.contains("val_loss") && rec["val_loss"].is_number())
                note_val(rec["step"].get<int>(), rec["val_loss"].get<double>());
            const auto flag = [&](const char* key) {
                return rec.contains(key) && rec[key].is_boolean() && rec[key].get<bool>();
            };
            note_skipped(flag("skipped_nonfinite"), flag("skipped_spike"));
        }
    }
};

// The end-of-run summary, one line: steps, tokens (all the run read: earlier processes' at their -d; the
// steps whose update was skipped, when any, said beside them), wall time, final and best validation loss (the best on the validation set of the final one: after
// the step at which -j or -m last changed, which it names), weights.
inline std::string summary_line(const RunSummary& s) {
    std::string line = "done: step " + std::to_string(s.last_step) + " (" + std::to_string(s.last_step - s.start_step) +
                       " in this run) | " +
                       std::to_string(s.tokens_before + (int64_t)(s.last_step - s.start_step) * s.tokens_per_step) +
                       " tokens";
    if (s.skipped_nonfinite + s.skipped_spike > 0) {
        const int n = s.skipped_nonfinite + s.skipped_spike;
        line += " (" + std::to_string(n) + (n == 1 ? " step" : " steps") +
                " read but not trained: " + std::to_string(s.skipped_nonfinite) + " non-finite, " +
                std::to_string(s.skipped_spike) + " spike-skipped)";
    }
    line += " | wall time " + format_duration(s.wall_s);
    if (s.final_val) {
        line += " | val loss " + fmt("%.4f", *s.final_val) + " (step " + std::to_string(s.final_val_step) + ")";
        if (s.best_val)
            line += ", best " + fmt("%.4f", *s.best_val) + " (step " + std::to_string(s.best_val_step) +
                    (s.val_set_since >= 0
                         ? "; since step " + std::to_string(s.val_set_since) + ", when " + s.val_set_flags + " changed"
                         : std::string()) +
                    ")";
    } else {
        line += " | no validation";
    }
    line += " | weights: " + (!s.weights.empty() ? s.weights
                              : s.output         ? std::string("not saved (no step trained)")
                                                 : std::string("not saved (no -o)"));
    return line;
}

}  // namespace llmc
