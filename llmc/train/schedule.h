// Learning-rate schedules: cosine with warmup (default), linear, constant, warmup-stable-decay.
// A pure function of the step, so a resumed run gets exactly the rates an uninterrupted one did.
//
// Steps are 0-based update indices: step s is the (s+1)-th optimizer update of a run of
// total_steps updates.
//   warmup   steps 0 .. W-1:  lr = max_lr * (s + 1) / W          (llm.c's linear warmup)
//   after warmup, with min_lr = max_lr * final_lr_frac and progress p = (s - W) / (total - 1 - W)
//   in [0, 1] (p = 1 on the last update, so the last update uses exactly min_lr; p = 0 when
//   there is only one update after warmup):
//   cosine:   lr = min_lr + (max_lr - min_lr) * 0.5 * (1 + cos(pi * p))
//   linear:   lr = max_lr - (max_lr - min_lr) * p
//   constant: lr = max_lr                         (final_lr_frac is ignored)
//   wsd:      lr = max_lr until the last decay_frac of the run, then linear to min_lr: with
//             D = decay start = total - round(decay_frac * (total - W)), for s >= D
//             lr = max_lr - (max_lr - min_lr) * (s - D + 1) / (total - D)
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

#include "llmc/core/error.h"

namespace llmc {

enum class LrSchedule { Cosine, Linear, Constant, Wsd };

inline LrSchedule parse_lr_schedule(const std::string& name) {
    if (name == "cosine") return LrSchedule::Cosine;
    if (name == "linear") return LrSchedule::Linear;
    if (name == "constant") return LrSchedule::Constant;
    if (name == "wsd") return LrSchedule::Wsd;
    throw InputError("unknown --lr-schedule '" + name + "'; use cosine, linear, constant or wsd");
}

inline const char* lr_schedule_name(LrSchedule s) {
    switch (s) {
        case LrSchedule::Cosine: return "cosine";
        case LrSchedule::Linear: return "linear";
        case LrSchedule::Constant: return "constant";
        case LrSchedule::Wsd: return "wsd";
    }
    return "?";
}

struct ScheduleConfig {
    LrSchedule kind = LrSchedule::Cosine;
    float max_lr = 6e-4f;
    int warmup_steps = 0;
    float final_lr_frac = 0.1f;   // min_lr = max_lr * final_lr_frac
    int total_steps = 1;          // number of updates in the run
    float wsd_decay_frac = 0.2f;  // wsd: fraction of the post-warmup steps spent decaying
};

// Learning rate of update `step` (0-based).
inline float learning_rate(const ScheduleConfig& c, int step) {
    const double max_lr = c.max_lr, min_lr = (double)c.max_lr * c.final_lr_frac;
    const int W = c.warmup_steps, total = c.total_steps;
    if (step < W) return (float)(max_lr * (step + 1) / W);
    switch (c.kind) {
        case LrSchedule::Constant: return c.max_lr;
        case LrSchedule::Cosine:
        case LrSchedule::Linear: {
            const int span = total - 1 - W;
            double p = span > 0 ? (double)(step - W) / span : 0.0;  // a single post-warmup step: max_lr
            if (p > 1.0) p = 1.0;
            if (c.kind == LrSchedule::Linear) return (float)(max_lr - (max_lr - min_lr) * p);
            return (float)(min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p)));
        }
        case LrSchedule::Wsd: {
            const int decay_steps = (int)std::lround((double)c.wsd_decay_frac * (total - W));
            const int D = total - decay_steps;  // first decaying step
            if (step < D || decay_steps <= 0) return c.max_lr;
            double p = (double)(step - D + 1) / decay_steps;
            if (p > 1.0) p = 1.0;
            return (float)(max_lr - (max_lr - min_lr) * p);
        }
    }
    return c.max_lr;
}

// The schedule in words, for the run header, with steps as the console numbers them (update s is step
// s + 1): "cosine: warmup 10 steps to 6.00e-04, decay over steps 11-100 to 6.00e-05 (-q 0.1)";
// constant: "constant: warmup 10 steps to 6.00e-04, then 6.00e-04 to the end"; wsd names its stable
// steps and its decay (--wsd-decay-frac). Without warmup: "no warmup, 6.00e-04 from step 1".
inline std::string describe_schedule(const ScheduleConfig& c) {
    auto lr = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2e", v);
        return std::string(buf);
    };
    auto steps = [](int first, int last) {
        return first == last ? "step " + std::to_string(first)
                             : "steps " + std::to_string(first) + "-" + std::to_string(last);
    };
    const int W = c.warmup_steps, total = c.total_steps;
    std::string out = std::string(lr_schedule_name(c.kind)) + ": " +
                      (W > 0 ? "warmup " + std::to_string(W) + " steps to " + lr(c.max_lr)
                             : "no warmup, " + lr(c.max_lr) + " from step 1");
    char frac[32];
    std::snprintf(frac, sizeof frac, "%g", (double)c.final_lr_frac);
    const std::string to_final = " to " + lr((double)c.max_lr * c.final_lr_frac) + " (-q " + frac + ")";
    switch (c.kind) {
        case LrSchedule::Constant: return out + ", then " + lr(c.max_lr) + " to the end";
        case LrSchedule::Cosine:
        case LrSchedule::Linear:  // update W (step W + 1) is p = 0, the peak; update total - 1 is p = 1
            if (total - W < 2) return out + ", no step left to decay (-x " + std::to_string(total) + ")";
            return out + ", decay over " + steps(W + 1, total) + to_final;
        case LrSchedule::Wsd: {
            char decay[32];
            std::snprintf(decay, sizeof decay, "%g", (double)c.wsd_decay_frac);
            const int decay_steps = (int)std::lround((double)c.wsd_decay_frac * (total - W));
            if (decay_steps <= 0 || total <= W) return out + ", no step left to decay (--wsd-decay-frac " + decay + ")";
            const int D = total - decay_steps;  // updates D .. total - 1 decay: steps D + 1 .. total
            return out + (D > W ? ", stable to step " + std::to_string(D) : std::string()) + ", decay over " +
                   steps(D + 1, total) + to_final + " (--wsd-decay-frac " + decay + ")";
        }
    }
    return out;
}

}  // namespace llmc
