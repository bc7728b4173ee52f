// TrainConfig: every setting of a training (or --eval-only) run that is not part of the model,
// the model-size overrides given on the command line, and the model presets for -e.
// Filled by llmc/app/cli.h; the flag names are in comments. docs/training.md is the reference.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "llmc/core/error.h"
#include "llmc/core/model_config.h"

namespace llmc {

// Model flags given explicitly on the command line; each overrides the preset's value.
struct ModelOverrides {
    std::optional<int> layers, channels, heads, global_heads, window, vocab, max_seq_len;
    std::optional<float> attn_softcap;
    bool qk_norm = false;           // --qk-norm given
    bool untie_embeddings = false;  // --untie-embeddings given
    bool any() const {
        return layers || channels || heads || global_heads || window || vocab || max_seq_len ||
               attn_softcap || qk_norm || untie_embeddings;
    }
};

struct TrainConfig {
    // data and output
    std::string train_data;             // -i  glob of training shards
    std::string val_data;               // -j  glob of validation shards ("" = no validation)
    std::string output_dir;             // -o  "" = write nothing (no metrics, checkpoints)
    std::string model = "ls-small";     // -e  preset name or checkpoint path
    // batch
    int batch_size = 4;                 // -b  B, sequences per micro-batch
    int seq_len = 256;                  // -t  T
    long total_batch_size = -1;         // -d  tokens per step; -1 = B*T*world (no accumulation)
    // optimization
    int max_steps = -1;                 // -x  -1 = one epoch of the training data
    float learning_rate = 6e-4f;        // -l
    int warmup_steps = 10;              // -u
    float final_lr_frac = 0.1f;         // -q
    std::string lr_schedule = "cosine"; // -k  cosine | linear | constant | wsd
    float wsd_decay_frac = 0.2f;        // --wsd-decay-frac
    float weight_decay = 0.1f;          // -c
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;  // --beta1 --beta2 --eps
    float grad_clip = 1.0f;             // --grad-clip (0 = off)
    float z_loss = 0.0f;                // --z-loss  weight of logsumexp^2 (0 = off)
    uint64_t seed = 1337;               // --seed
    int shuffle = 1;                    // --shuffle  1 = seeded shuffling of the training data
    // evaluation, samples
    int val_every = 20;                 // -v  (0 = never; also at the last step)
    int val_batches = 20;               // -m  (-1 = the whole validation set)
    bool val_batches_given = false;     //     -m given explicitly (--eval-only defaults to all)
    int sample_every = 20;              // -s  (0 = never)
    int gen_tokens = 64;                // -g
    float temperature = 1.0f;           // --temperature
    // checkpoints
    int checkpoint_every = 0;           // -n  (0 = only at the end)
    int resume = 0;                     // -y  1 = resume from the newest complete checkpoint in -o
    int keep_checkpoints = 3;           // --keep-checkpoints K (0 = keep all)
    // statistics, spikes
    int logit_stats_every = 1;          // --logit-stats-every N (0 = never write logit_stats.jsonl)
    std::optional<int> near;            // --near N  near/far split distance of the logit statistics (unset = window P)
    float skip_spikes = 0.0f;           // --skip-spikes Z  skip updates with z-score > Z (0 = never)
    int spike_window = 100;             // --spike-window W
    float spike_z = 6.0f;               // --spike-z  z-score above which a step is logged as a spike
    float qk_clip = 0.0f;               // --qk-clip TAU  rescale q/k projections of heads whose max logit > TAU (0 = off)
    float logit_alarm = 0.0f;           // --logit-alarm Z  flag a max attention logit z-score > Z (0 = off)
    float logit_alarm_above = 0.0f;     // --logit-alarm-above X  flag a max attention logit > X (0 = off)
    int logit_alarm_cooldown = 100;     // --logit-alarm-cooldown N  at most one alarm checkpoint per N steps
    // modes, machine
    bool eval_only = false;             // --eval-only
    std::string dump_logits;            // --dump-logits FILE
    std::string dump_attention;         // --dump-attention L:H[,L:H...]  (llmc/io/attention_dump.h)
    std::string device = "auto";        // --device auto | cpu | cuda
    int threads = 0;                    // --threads (0 = OpenMP default)
    // data parallelism (docs/multigpu.md)
    int zero_stage = 0;                 // -z  0 = replicated AdamW state, 1 = ZeRO-1 (sharded)
    int world_size = 1, rank = 0;       //     processes and this one's rank: set by main() from the collective
    int local_rank = 0;                 //     rank within the node (its GPU): set by main()
    // launch flags, per process, never written to config.toml (-1 = from mpirun / Slurm / 1 process)
    int flag_rank = -1;                 // --rank
    int flag_world_size = -1;           // --world-size
    int flag_local_rank = -1;           // --local-rank
    std::string rendezvous;             // --rendezvous DIR  NCCL bootstrap through a shared directory (no MPI)
    int debug_fail_rank = -1;           // --debug-fail-rank R  (hidden test hook: rank R fails in step 1)

    ModelOverrides overrides;
};

// Presets for -e:
//   ls-small  the paper's small model: L=6, C=192, NH=6 (hd 32), G=1, P=50, maxT=2048
//   dN        llm.c's depth-N GPT-2 family: L=N, C=64*N, NH=N (hd 64), maxT=1024, with LS-attention
//             G=1, P=50 (d12 is GPT-2 124M's shape; add --global-heads N for plain MHSA)
// Vocabulary 50257 (Vp 50304) unless --vocab or the data say otherwise.
inline bool is_model_preset(const std::string& name) {
    if (name == "ls-small") return true;
    if (name.size() < 2 || name[0] != 'd') return false;
    for (size_t i = 1; i < name.size(); i++)
        if (name[i] < '0' || name[i] > '9') return false;
    return name.size() <= 4;
}

inline ModelConfig model_preset(const std::string& name) {
    ModelConfig c;  // model_config.h defaults: V 50257
    c.vocab_size = 50257;
    c.padded_vocab_size = pad_vocab(c.vocab_size);
    c.global_heads = 1;
    c.window = 50;
    if (name == "ls-small") {
        c.num_layers = 6; c.channels = 192; c.num_heads = 6; c.max_seq_len = 2048;
        return c;
    }
    if (!is_model_preset(name))
        throw InputError("-e '" + name + "' is neither a preset (ls-small, d6, d12, d24, ...) nor an existing checkpoint file");
    const int n = std::stoi(name.substr(1));
    if (n < 1) throw InputError("-e " + name + ": depth must be >= 1 (e.g. d6, d12)");
    c.num_layers = n; c.channels = 64 * n; c.num_heads = n; c.max_seq_len = 1024;
    return c;
}

// Applies the command-line model flags on top of a preset's configuration.
inline void apply_overrides(ModelConfig& c, const ModelOverrides& o) {
    if (o.layers) c.num_layers = *o.layers;
    if (o.channels) c.channels = *o.channels;
    if (o.heads) c.num_heads = *o.heads;
    if (o.global_heads) c.global_heads = *o.global_heads;
    if (o.window) c.window = *o.window;
    if (o.max_seq_len) c.max_seq_len = *o.max_seq_len;
    if (o.vocab) { c.vocab_size = *o.vocab; c.padded_vocab_size = pad_vocab(c.vocab_size); }
    if (o.attn_softcap) c.attn_softcap = *o.attn_softcap;
    if (o.qk_norm) c.qk_norm = true;
    if (o.untie_embeddings) c.tied_embeddings = false;
}

}  // namespace llmc
