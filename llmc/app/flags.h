// The trainer's settings, one row each: the only place a flag is defined. Expanded from this table:
//   TrainConfig's and ModelOverrides' fields, with their defaults   llmc/app/train_config.h
//   the CLI11 parser and --help, config.toml (CLI11 writes every configurable flag), and the launch
//   flags it leaves out                                            llmc/app/cli.h
//   config.json's "train" object                                   llmc/app/config_json.h
//   the single-flag range checks and their messages                llmc/app/validate.h
// Rules between flags are written out in validate.h (check_flag_combinations), the checks that need
// the model in validate_run. Adding a flag: a row here, then the code that reads it (and the line
// in docs/training.md). An X-macro rather than CLI11 options plus an nlohmann mapping because one row
// then also declares the field, and the row order is the order of --help, config.toml and config.json.
//
// LLMC_TRAIN_FLAGS(SETTING, MODEL) calls, in --help order (that of config.toml and config.json too):
//   SETTING(record, type, field, default, names, ok, rule, help)   a field of TrainConfig
//   MODEL(type, field, names, help)   a model flag: a field of ModelOverrides, set only when given (it
//                                     overrides the preset of -e); written to config.toml only (config.json
//                                     has the resolved model), checked with the whole model (validate_model_config)
// record: where the setting is written (FlagRecord)
//   Both    config.toml and config.json
//   Toml    config.toml only (--eval-only and its flags: an evaluation writes eval.json instead)
//   Machine config.json only: the machine the run ran on (--device, --threads, --cuda-graph, --pdl), not the experiment;
//           never taken from a file: not by --config (a config.toml that holds it gets a note) nor by
//           a resumed or forked run from its record (llmc/app/run_record.h)
//   Launch  neither: a flag of one process or launch (--rank, --fork-from, ...), which --config cannot set
//           and a resumed or forked run never takes from its record
//   Hidden  a Launch flag that --help does not list (a test hook)
//   Json    config.json only: not a flag, set by main() (the number of processes)
// names: CLI11's "-b,--batch-size" ("" for Json); messages write it "-b/--batch-size"
// ok: an expression in the value v, true when v is valid (an optional field's only when given);
//     otherwise the run is refused with "<names> <rule>", each "{}" of rule replaced by v (an integer
//     as an integer, a float with printf's %g).
//     It may throw its own InputError instead (-k: parse_lr_schedule names the schedules).
// --help and config.toml show a flag's default unless it is optional, on/off, Launch or Hidden.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "llmc/app/thread_limit.h"

static_assert(llmc::kMaxThreads == 8192, "--threads' rule and help below name 8192: change them with kMaxThreads");

namespace llmc {

enum class FlagRecord { Both, Toml, Machine, Launch, Hidden, Json };

// clang-format off
#define LLMC_TRAIN_FLAGS(SETTING, MODEL) \
    /* data and output */ \
    SETTING(Both, std::string, train_data, "", "-i,--train-data", true, "", \
            "glob of training shards, e.g. 'data/shards/x/train_*.bin'") \
    SETTING(Both, std::string, val_data, "", "-j,--val-data", true, "", \
            "glob of validation shards ('' = no validation)") \
    SETTING(Both, std::string, expect_tokenizer, "", "--expect-tokenizer", \
            v.empty() || v == "gpt2" || v == "sp" || v == "synthetic", \
            "must be gpt2, sp or synthetic (meta.json's \"tokenizer\"; '' = no check)", \
            "refuse -i/-j data whose meta.json names another tokenizer, or none (gpt2 | sp | synthetic; '' = no " \
            "check)") \
    SETTING(Both, int, expect_vocab, 0, "--expect-vocab", v >= 0, "must be >= 0 (0 = no check)", \
            "refuse -i/-j data of another vocabulary (meta.json / tokenizer.bin), or of none known (0 = no check)") \
    SETTING(Both, std::string, output_dir, "", "-o,--output-dir", true, "", \
            "directory for metrics, logit stats, checkpoints ('' = write nothing)") \
    SETTING(Both, std::string, model, "ls-small", "-e,--model", true, "", \
            "preset (ls-small, d6, d12, ...) or a checkpoint file (ours or llm.c's GPT-2)") \
    /* batch */ \
    SETTING(Both, int, batch_size, 4, "-b,--batch-size", v >= 1, "must be >= 1 (got {})", \
            "B: sequences per micro-batch") \
    SETTING(Both, int, seq_len, 256, "-t,--seq-len", v >= 1, "must be >= 1 (got {})", \
            "T: tokens per sequence") \
    SETTING(Both, long, total_batch_size, -1, "-d,--total-batch-size", \
            v == -1 || v >= 1, "must be -1 (= B*T*processes) or a positive number of tokens", \
            "tokens per optimizer step; gradient accumulation = d/(B*T*processes); -1 = B*T*processes") \
    /* optimization */ \
    SETTING(Both, int, max_steps, -1, "-x,--max-steps", v >= -1, "must be -1 (one epoch) or >= 0 (got {})", \
            "optimizer steps; -1 = one epoch of the training data") \
    SETTING(Both, float, learning_rate, 6e-4f, "-l,--learning-rate", v >= 0, "must be >= 0", \
            "peak learning rate") \
    SETTING(Both, int, warmup_steps, 10, "-u,--warmup-steps", v >= 0, "must be >= 0", \
            "linear warmup steps") \
    SETTING(Both, float, final_lr_frac, 0.1f, "-q,--final-lr-frac", v >= 0 && v <= 1, "must be in [0, 1] (got {})", \
            "final learning rate as a fraction of the peak") \
    SETTING(Both, std::string, lr_schedule, "cosine", "-k,--lr-schedule", (parse_lr_schedule(v), true), "", \
            "cosine | linear | constant | wsd") \
    SETTING(Both, float, wsd_decay_frac, 0.2f, "--wsd-decay-frac", v >= 0 && v <= 1, "must be in [0, 1]", \
            "wsd: fraction of the post-warmup steps spent decaying") \
    SETTING(Both, float, weight_decay, 0.1f, "-c,--weight-decay", v >= 0, "must be >= 0", \
            "AdamW decoupled weight decay (matrices, embeddings)") \
    SETTING(Both, float, beta1, 0.9f, "--beta1", v >= 0 && v < 1, "must be in [0, 1) (got {})", \
            "AdamW beta1") \
    SETTING(Both, float, beta2, 0.95f, "--beta2", v >= 0 && v < 1, "must be in [0, 1) (got {})", \
            "AdamW beta2") \
    SETTING(Both, float, eps, 1e-8f, "--eps", v > 0, "must be > 0", \
            "AdamW epsilon") \
    SETTING(Both, float, grad_clip, 1.0f, "--grad-clip", v >= 0, "must be >= 0 (0 = off)", \
            "clip the global gradient norm to this (0 = off)") \
    SETTING(Both, float, z_loss, 0.0f, "--z-loss", v >= 0, "must be >= 0 (0 = off)", \
            "weight of the z-loss W * logsumexp(logits)^2 (0 = off; PaLM uses 1e-4)") \
    SETTING(Both, uint64_t, seed, 1337, "--seed", true, "", \
            "seed of weight init, data shuffling and sampling") \
    SETTING(Both, int, shuffle, 1, "--shuffle", v == 0 || v == 1, "must be 0 or 1 (got {})", \
            "1 = shuffle the training data (seeded), 0 = read it in order") \
    SETTING(Both, std::string, sampler, "windows", "--sampler", v == "windows" || v == "random", \
            "must be windows or random", \
            "training rows: windows = B*T+1-token windows in order or shuffled (--shuffle); random = each row " \
            "from a random offset, drawn with replacement (nanoGPT's get_batch; seeded)") \
    /* model (on/off flags are bools: in a config file "qk-norm=false", as config.toml writes it, means off) */ \
    MODEL(std::optional<int>, layers, "--layers", \
          "L: transformer blocks") \
    MODEL(std::optional<int>, channels, "--channels", \
          "C: model width") \
    MODEL(std::optional<int>, heads, "--heads", \
          "NH: attention heads per layer") \
    MODEL(std::optional<int>, global_heads, "--global-heads", \
          "G: global heads (the last G); G = NH is plain MHSA") \
    MODEL(std::optional<int>, window, "--window", \
          "P: a local head's window (query i sees keys i-P < j <= i)") \
    MODEL(std::optional<int>, vocab, "--vocab", \
          "V: vocabulary (default: from the data's meta.json / tokenizer.bin, else 50257)") \
    MODEL(std::optional<int>, max_seq_len, "--max-seq-len", \
          "maxT: rows of the position embedding") \
    MODEL(std::optional<float>, attn_softcap, "--attn-softcap", \
          "soft-cap attention logits s -> c*tanh(s/c) (0 = off)") \
    MODEL(bool, qk_norm, "--qk-norm", \
          "LayerNorm over the head dimension on q and k") \
    MODEL(bool, untie_embeddings, "--untie-embeddings", \
          "separate LM head instead of sharing the token embedding") \
    MODEL(std::optional<int>, bias, "--bias", \
          "1 = biases in every linear layer and LayerNorm (GPT-2), 0 = none (the paper's code, bias=False)") \
    MODEL(std::optional<std::string>, gelu, "--gelu", \
          "MLP activation: tanh (GPT-2's approximation, llm.c) | erf (exact, PyTorch's nn.GELU())") \
    /* evaluation, samples */ \
    SETTING(Both, int, val_every, 20, "-v,--val-every", v >= 0, "must be >= 0 (0 = never)", \
            "validation loss every N steps (0 = never) and at the end") \
    SETTING(Both, int, val_batches, 20, "-m,--val-batches", v == -1 || v >= 1, "must be -1 (all) or >= 1", \
            "validation batches (-1 = all; --eval-only defaults to all)") \
    SETTING(Both, int, sample_every, 20, "-s,--sample-every", v >= 0, "must be >= 0 (0 = never)", \
            "print a sample every N steps (0 = never)") \
    SETTING(Both, int, gen_tokens, 64, "-g,--gen-tokens", v >= 0, "must be >= 0", \
            "tokens per sample") \
    SETTING(Both, float, temperature, 1.0f, "--temperature", v > 0, "must be > 0", \
            "sampling temperature") \
    /* checkpoints */ \
    SETTING(Both, int, checkpoint_every, 0, "-n,--checkpoint-every", v >= 0, "must be >= 0 (0 = only at the end)", \
            "checkpoint every N steps (0 = only at the end; needs -o)") \
    SETTING(Both, int, resume, 0, "-y,--resume", v == 0 || v == 1, \
            "must be 0 or 1 (got {}); -y 1 resumes the run in -o", \
            "1 = resume from the newest complete checkpoint in -o") \
    SETTING(Launch, std::string, fork_from, "", "--fork-from", true, "", \
            "start a new run in -o from this complete checkpoint RUN/model_NNNNNNNN.bin, with RUN's settings") \
    SETTING(Both, int, keep_checkpoints, 0, "--keep-checkpoints", v >= 0, "must be >= 0 (0 = keep all)", \
            "keep the newest K checkpoints (0 = all: every step stays a fork point)") \
    /* statistics, spikes */ \
    SETTING(Both, int, logit_stats_every, 1, "--logit-stats-every", v >= 0, "must be >= 0 (0 = never)", \
            "write attention-logit statistics every N steps (0 = never)") \
    SETTING(Both, std::optional<int>, near, {}, "--near", \
            v >= 1, "must be >= 1 (got {}); drop it to split at the model's --window", \
            "N: logit statistics split keys at distance i-j < N (near) vs >= N (far), for every head (default: " \
            "the model's --window P on the CPU; the CUDA backend computes them only when N is given)") \
    SETTING(Both, float, skip_spikes, 0.0f, "--skip-spikes", v >= 0, "must be >= 0 (0 = never skip)", \
            "skip updates whose loss or grad-norm z-score exceeds Z (0 = never)") \
    SETTING(Both, int, spike_window, 100, "--spike-window", v >= 2, "must be >= 2 (got {})", \
            "W: steps in the spike detector's moving window") \
    SETTING(Both, float, spike_z, 6.0f, "--spike-z", v > 0, "must be > 0", \
            "z-score above which a step is logged as a spike") \
    SETTING(Both, float, qk_clip, 0.0f, "--qk-clip", v >= 0, "must be >= 0 (0 = off; e.g. 100, Kimi K2's threshold)", \
            "QK-Clip: after each step, scale the q and k projections of every head whose max logit S exceeded TAU " \
            "by sqrt(TAU/S) (0 = off)") \
    SETTING(Both, float, logit_alarm, 0.0f, "--logit-alarm", v >= 0, "must be >= 0 (0 = off; e.g. 6, a z-score)", \
            "flag a step whose max attention logit has z-score > Z over the last --spike-window steps; checkpoint " \
            "it (0 = off)") \
    SETTING(Both, float, logit_alarm_above, 0.0f, "--logit-alarm-above", v >= 0, "must be >= 0 (0 = off)", \
            "flag a step whose max attention logit crosses above X (once until it falls back to <= X); checkpoint " \
            "it (0 = off)") \
    SETTING(Both, int, logit_alarm_cooldown, 100, "--logit-alarm-cooldown", \
            v >= 1, "must be >= 1 (steps between alarm checkpoints)", \
            "at most one logit-alarm checkpoint per N steps") \
    SETTING(Both, int, logit_alarm_keep, 3, "--logit-alarm-keep", v >= 0, "must be >= 0 (0 = keep all)", \
            "keep the newest K logit-alarm checkpoints pinned (not pruned by --keep-checkpoints; 0 = all)") \
    /* modes, machine */ \
    SETTING(Toml, bool, eval_only, false, "--eval-only", true, "", \
            "load -e, report the mean loss over -j, and exit") \
    SETTING(Toml, std::string, dump_logits, "", "--dump-logits", true, "", \
            "--eval-only: write the first batch's logits, raw float32 (B, T, V)") \
    SETTING(Toml, std::string, dump_attention, "", "--dump-attention", true, "", \
            "--eval-only: write the attention probabilities of heads L:H[,L:H...] for the first sequence to -o " \
            "DIR/attn_L<l>_H<h>.npy, float32 (T, T) (CPU and CUDA backends)") \
    SETTING(Machine, std::string, device, "auto", "--device", true, "", \
            "auto | cpu | cuda") \
    SETTING(Machine, int, threads, 0, "--threads", v >= 0 && v <= kMaxThreads, \
            "must be 0 (automatic) to 8192, the most CPUs a Linux kernel runs on (got {})", \
            "OpenMP threads, at most 8192 (0 = OMP_NUM_THREADS, else the CPUs this process may use); idle threads sleep " \
            "(OMP_WAIT_POLICY=PASSIVE) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set") \
    SETTING(Launch, int, profile_steps, 0, "--profile-steps", v >= 0, "must be >= 0 (0 = off)", \
            "time every kernel of N training steps after 2 warm-up steps and print a table per kernel; profile.json " \
            "in -o (CUDA backend: CUPTI; the emulated device counts launches)") \
    SETTING(Machine, std::string, cuda_graph, "auto", "--cuda-graph", v == "auto" || v == "0" || v == "1", \
            "must be auto, 0 or 1 (got {})", \
            "auto = each training step as one CUDA graph once its shapes repeat wherever a step can run as one " \
            "(the CUDA backend, one process, -z 0, no --skip-spikes or --qk-clip) and has one micro-batch (no -d " \
            "above B*T), else kernel by kernel, as the run header says; 1 = as one graph, or refuse the run; 0 = " \
            "kernel by kernel (the same numbers either way)") \
    SETTING(Machine, std::string, pdl, "auto", "--pdl", v == "auto" || v == "0" || v == "1", \
            "must be auto, 0 or 1 (got {})", \
            "1 = launch the CUDA backend's kernels (training and --eval-only) with programmatic dependent launch " \
            "(sm_90+: a kernel is scheduled while the one before it ends and waits for it on the device; the same " \
            "numbers; not with --profile-steps), or refuse the run; 0 = in stream order; auto = 1 where the " \
            "backend and device have it and no --profile-steps is asked, else 0, as the run header says " \
            "(docs/cuda_backend.md)") \
    /* data parallelism (docs/multigpu.md) */ \
    SETTING(Json, int, world_size, 1, "", true, "", \
            "processes, from the collective") \
    SETTING(Both, int, zero_stage, 0, "-z,--zero-stage", v == 0 || v == 1, "must be 0 or 1 (got {})", \
            "0 = every rank keeps all AdamW state, 1 = ZeRO-1 (sharded)") \
    /* launch flags (-1 = from mpirun / Slurm / 1 process) */ \
    SETTING(Launch, int, flag_rank, -1, "--rank", true, "", \
            "this process's rank (default: from mpirun or Slurm)") \
    SETTING(Launch, int, flag_world_size, -1, "--world-size", true, "", \
            "number of processes (default: from mpirun or Slurm)") \
    SETTING(Launch, int, flag_local_rank, -1, "--local-rank", true, "", \
            "rank within the node = GPU index (default: from mpirun or Slurm)") \
    SETTING(Launch, std::string, rendezvous, "", "--rendezvous", true, "", \
            "CUDA without MPI: shared directory for the NCCL bootstrap") \
    SETTING(Hidden, int, debug_fail_rank, -1, "--debug-fail-rank", true, "", \
            "test hook: this rank fails in step 1")
// clang-format on

// For an expansion that uses only one of the two kinds of rows.
#define LLMC_NO_SETTING(record, type, field, def, names, ok, rule, help)
#define LLMC_NO_MODEL(type, field, names, help)

}  // namespace llmc
