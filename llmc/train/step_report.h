// What one optimizer step measured and decided (StepResult), and how it is reported: the console
// line and the metrics.jsonl record (docs/training.md describes both). The training loop fills a
// StepResult per step (train_step, llmc/train/train_step.h) and adds what only the device knows
// (MFU, device memory) and the validation loss when one was due.
#pragma once
#include <cstdio>
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

// The console line (two lines when the logit alarm flagged the step). mfu < 0: not known.
// alarm_checkpoint: the model file written for the alarm ("" for none).
inline std::string step_line(const StepResult& r, int max_steps, const LogitStats& s, std::optional<double> val_loss,
                             double mfu, double mem_gib, const std::string& alarm_checkpoint, int spike_window) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "step %*d/%d | loss %.4f | norm %.2f | lr %.2e | %.1f ms | %.0f tok/s | max-logit %.2f",
                  (int)std::to_string(max_steps).size(), r.step, max_steps, r.loss, r.norm, r.lr, r.ms, r.tokens_per_s,
                  s.overall_max());
    std::string line = buf;
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
inline nlohmann::ordered_json step_record(const StepResult& r, const LogitStats& s, std::optional<double> val_loss,
                                          bool qk_clip_on) {
    nlohmann::ordered_json rec = {{"step", r.step},
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

}  // namespace llmc
