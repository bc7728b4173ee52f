// "did you mean --qk-norm?": the valid flag name nearest to a mistyped one (or to a nanoGPT setting's
// name, or what replaces a nanoGPT setting that has no flag here), for the errors of an unknown
// command-line flag and of an unknown key in a --config file (llmc/app/cli.h).
// Nearness is the edit distance (insertions, deletions, substitutions; Levenshtein) between the names
// lowercased, with '_' read as '-' (so "qk_norm" is 0 away from "qk-norm").
#pragma once
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>
#include <vector>

namespace llmc {

// Edit distance between a and b (O(|a| |b|) time, O(|b|) memory).
inline size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diag = row[0];  // row[i-1][j-1]
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

// A flag name as compared: without leading dashes, lowercase, '_' as '-'.
inline std::string normalized_flag_name(const std::string& name) {
    std::string out = name.substr(std::min(name.find_first_not_of('-'), name.size()));
    for (char& ch : out) ch = ch == '_' ? '-' : (char)std::tolower((unsigned char)ch);
    return out;
}

// nanoGPT's train.py settings whose name is not near ours (normalized name -> our long name, and what
// differs), and those with no flag of ours (ours "": the note says what does its job here, or that
// nothing does, and the fix): taken before the edit distance, which would offer a wrong near name
// (block_size is near batch-size) or none. None is accepted as an alias: where a meaning differs, an
// alias would silently run another experiment.
struct NanoGptName {
    const char* theirs;
    const char* ours;  // "" when no flag takes its place
    const char* note;  // "" when the meaning is the same
};
inline constexpr NanoGptName kNanoGptNames[] = {
    {"block-size", "seq-len", "the trained length; the model's longest is --max-seq-len"},
    {"n-layer", "layers", ""},
    {"n-head", "heads", ""},
    {"n-embd", "channels", ""},
    {"warmup-iters", "warmup-steps", ""},
    {"eval-interval", "val-every", ""},
    {"eval-iters", "val-batches", ""},
    {"out-dir", "output-dir", ""},
    {"gradient-accumulation-steps", "total-batch-size", "tokens a step: batch x seq-len x accumulation steps"},
    {"min-lr", "final-lr-frac", "-q is the final lr as a fraction of -l: min_lr / learning_rate"},
    {"dropout", "", "this trainer has no dropout (nanoGPT's pretraining default is 0.0); drop it"},
    {"lr-decay-iters", "",
     "-k cosine (linear, wsd) decays from the end of warmup to the last step, -x, with no constant tail at the "
     "final lr; set -x to the decay span"},
    {"decay-lr", "", "False is a constant lr without warmup: -k constant -u 0; True is the default -k cosine"},
    {"init-from", "",
     "resume is -y 1 (with -o the run's directory), scratch the default; for GPT-2's weights give -e with "
     "llm.c's gpt2_124M.bin"},
    {"always-save-checkpoint", "",
     "checkpoints do not wait for a better validation loss: -n N writes one every N steps (and one at the "
     "end)"},
    {"compile", "", "there is no torch.compile here (the kernels are compiled C++/CUDA); drop it"},
    {"dtype", "", "the precision is the build's (fp32 on the CPU; CUDA: bf16, or make PRECISION=FP32); drop it"},
    {"dataset", "", "give the token shards: -i 'DIR/train_*.bin' -j 'DIR/val_*.bin' (data/prepare.py writes them)"},
    {"log-interval", "", "every step is printed and written to -o DIR/metrics.jsonl; drop it"},
    {"wandb-log", "", "there is no wandb logging; metrics go to -o DIR/metrics.jsonl; drop it"},
    {"wandb-project", "", "there is no wandb logging; metrics go to -o DIR/metrics.jsonl; drop it"},
    {"wandb-run-name", "", "there is no wandb logging; metrics go to -o DIR/metrics.jsonl; drop it"},
};

// Other trainers' common spellings (llm.c's scripts and PyTorch trainers' --lr, Hugging Face's
// max_grad_norm, Gemma's attn_logit_softcapping, modded-nanogpt's num_iterations) and long forms too far
// from ours for the edit distance (softcap is 5 edits from attn-softcap, lr 11 from learning-rate): the
// same form as kNanoGptNames, said without naming a project ("did you mean --learning-rate?"). None
// is an alias either.
inline constexpr NanoGptName kOtherNames[] = {
    {"lr", "learning-rate", ""},
    {"max-lr", "learning-rate", "the peak learning rate"},
    {"peak-lr", "learning-rate", ""},
    {"warmup", "warmup-steps", ""},
    {"lr-warmup-steps", "warmup-steps", ""},
    {"lr-min", "final-lr-frac", "-q is the final lr as a fraction of -l"},
    {"wd", "weight-decay", ""},
    {"max-grad-norm", "grad-clip", ""},
    {"clip-grad-norm", "grad-clip", ""},
    {"grad-norm-clip", "grad-clip", ""},
    {"softcap", "attn-softcap", ""},
    {"soft-cap", "attn-softcap", ""},
    {"attention-softcap", "attn-softcap", ""},
    {"attn-logit-softcapping", "attn-softcap", ""},
    {"logit-softcap", "attn-softcap", "it caps the attention logits; the output logits have no soft-cap here"},
    {"final-logit-softcapping", "attn-softcap",
     "it caps the attention logits; the output logits have no soft-cap here (--z-loss keeps them small)"},
    {"qk-layernorm", "qk-norm", ""},
    {"qk-layer-norm", "qk-norm", ""},
    {"z-loss-weight", "z-loss", ""},
    {"zloss-weight", "z-loss", ""},
    {"num-iterations", "max-steps", ""},
    {"steps", "max-steps", ""},
    {"num-layers", "layers", ""},
    {"num-heads", "heads", ""},
    {"d-model", "channels", ""},
    {"hidden-size", "channels", ""},
    {"n-positions", "max-seq-len", ""},
    {"sequence-length", "seq-len", ""},
    {"context-length", "seq-len", "the trained length; the model's longest is --max-seq-len"},
    {"vocab-size", "vocab", ""},
    {"window-size", "window", "a local head's keys: itself and the window - 1 before it"},
    {"sliding-window", "window", "a local head's keys: itself and the window - 1 before it"},
    {"num-threads", "threads", ""},
    {"save-every", "checkpoint-every", ""},
    {"micro-batch-size", "batch-size", "-b is the micro-batch; -d the tokens of a step"},
};

// The entry of `table` for a name (as normalized_flag_name gives it) whose flag is a candidate (or, with
// `no_flag_notes`, that has no flag of ours: the trainer's notes), or null.
template <size_t N>
const NanoGptName* listed_name(const NanoGptName (&table)[N], const std::string& normalized,
                               const std::vector<std::string>& candidates, bool no_flag_notes) {
    for (const NanoGptName& alias : table)
        if (normalized == alias.theirs &&
            ((no_flag_notes && *alias.ours == '\0') ||
             std::find(candidates.begin(), candidates.end(), alias.ours) != candidates.end()))
            return &alias;
    return nullptr;
}
inline const NanoGptName* nanogpt_name(const std::string& normalized, const std::vector<std::string>& candidates,
                                       bool no_flag_notes = true) {
    return listed_name(kNanoGptNames, normalized, candidates, no_flag_notes);
}

// The candidate nearest to `name` (candidates are long names without dashes, e.g. "qk-norm"), or ""
// when none is near: at most max(1, length/3) edits away (a third of the name may be mistyped). Ties:
// the first candidate in the list.
inline std::string nearest_flag_name(const std::string& name, const std::vector<std::string>& candidates) {
    const std::string n = normalized_flag_name(name);
    if (n.empty()) return "";
    const size_t limit = std::max<size_t>(1, n.size() / 3);
    std::string best;
    size_t best_distance = limit + 1;
    for (const std::string& c : candidates) {
        const size_t d = edit_distance(n, normalized_flag_name(c));
        if (d < best_distance) {
            best = c;
            best_distance = d;
        }
    }
    return best;
}

// "; did you mean --qk-norm?" for the nearest candidate, or "" when none is near; a nanoGPT setting's
// name (nanogpt_name) gets its flag first, saying so and what differs: "; did you mean --seq-len?
// (nanoGPT's block_size: ...)", or, without a flag of ours, what to do instead: "; nanoGPT's dropout:
// this trainer has no dropout ...; drop it" (only with `no_flag_notes`: they are the trainer's); another
// trainer's spelling (kOtherNames) its flag: "; did you mean --learning-rate?", with what differs in
// parentheses.
inline std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates,
                                bool no_flag_notes = true) {
    if (const NanoGptName* other = listed_name(kOtherNames, normalized_flag_name(name), candidates, false))
        return std::string("; did you mean --") + other->ours + "?" +
               (*other->note ? std::string(" (") + other->note + ")" : std::string());
    if (const NanoGptName* alias = nanogpt_name(normalized_flag_name(name), candidates, no_flag_notes)) {
        std::string theirs = alias->theirs;
        std::replace(theirs.begin(), theirs.end(), '-', '_');
        if (*alias->ours == '\0') return "; nanoGPT's " + theirs + ": " + alias->note;
        return std::string("; did you mean --") + alias->ours + "? (nanoGPT's " + theirs +
               (*alias->note ? std::string(": ") + alias->note : std::string()) + ")";
    }
    const std::string best = nearest_flag_name(name, candidates);
    return best.empty() ? "" : "; did you mean --" + best + "?";
}

}  // namespace llmc
