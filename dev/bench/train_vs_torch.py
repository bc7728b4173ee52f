"""
End-to-end training throughput: our trainer (./train_gpt2_ls --device cuda) against its PyTorch twin
(dev/bench/torch_fast_model.py: torch.compile, bf16 autocast, flex_attention with the per-head LS
mask or SDPA flash for MHSA, fused AdamW), side by side in one run, same configuration, batch and T.

  python3 dev/bench/train_vs_torch.py --out DIR [--models paper,ls-small,d12] [--steps 30] [--warmup 10]
                                      [--batch-size B] [--trainer ./train_gpt2_ls] [--skip-ours] [--skip-torch]

Models (MODELS below): ls-small = the paper's model (L6 C192 NH6 hd32, G1 P50, T 2048, V 10000 as the
paper's SentencePiece vocabulary) with GPT-2's options (biases, tanh GELU, tied LM head), the shape
timed since fa663e0; paper = the same shape with the paper code's options (no biases, exact erf GELU,
untied LM head: configs/paper_pg19.toml, the model the PG-19 campaign trains); d12 = GPT-2 124M's
shape with LS-attention (L12 C768 NH12 hd64, G1 P64, T 1024, V 50257).

Per model:
  1. one batch of B x T uniform random token ids (benchmark_tokens), the same for both sides and every
     step, written for ours as a shard of the batch repeated (write_benchmark_shards): every window the
     trainer reads is the batch, so both sides run the same optimisation (same data, constant learning
     rate TRAIN_LR without warmup, AdamW with the trainer's defaults, clipping at 1.0), from the same
     weights: GPT-2's init drawn once (dev/reference/gpt2_ls.py, seed INIT_SEED) into a model file
     (--worker init, write_init) that ours loads with -e and the twin loads too, and their losses are
     compared step by step (training_agreement, TRAIN_AGREE_TOL; gradient norms beside them). Inits
     drawn apart are not enough at d12's size: with no warmup its first steps are chaotic, and two
     draws of the same distribution part by 18% at step 4 on the CPU (docs/results/2026-12-04-H200-c2b0f82);
  2. ours: the trainer as a subprocess for warmup + steps optimizer steps; ms/step = median of
     metrics.jsonl's "ms" after the warm-up steps (wall time of forward+backward+update, including
     the trainer's per-step host syncs and its logit statistics, which it always records);
  3. torch: a worker subprocess (this file, --worker torch) that first CHECKS the compiled twin
     against dev/reference/gpt2_ls.py (fp32, on the GPU, one row at a time) on the same perturbed
     weights and batch: the twin in fp32 (the function: loss, logits and every gradient within fp32
     tolerances; a wrong head layout must miss the logits tolerance, so the check can fail) and its
     loss under bf16 autocast (the timed precision: a sanity bound, CHECK_TOL below); then times warmup + steps
     training steps (host batch -> device, forward, backward, clip, fused AdamW) with CUDA events;
     ms/step = median. A failed check is reported and the model's result marked FAIL, and so is a
     model whose two sides' losses part by more than TRAIN_AGREE_TOL (they did not train alike).
  MFU = tokens/s * FLOPs/token / peak, FLOPs/token = 6 * N + attention (flops_per_token below:
  N = parameters in matmuls, i.e. all but wpe, and but wte when untied; attention 12 * hd per
  UNMASKED (query, key) pair per layer and head, so local heads count only their window), peak =
  dense bf16 tensor rate looked up from the device name (PEAK_BF16_FLOPS: llmc/cuda/device_peak.h).
  Peak memory: for both sides the peak of the device's used memory (NVML or nvidia-smi, sampled
  every 0.2 s) minus its value before the process started, i.e. the whole process footprint with
  the CUDA context and allocator caches; for torch also torch.cuda.max_memory_allocated(); for ours
  also whatever memory/MFU fields the trainer writes into metrics.jsonl.
Output: a table on stdout (last) and DIR/train_vs_torch.json with commit, device and every number.
Exit status 1 if a side failed or a check failed (the speed targets of the design guide, section 6, are reported, not
asserted: a benchmark measures, tests assert).

The pure parts (FLOP count, peak table, metrics parsing, statistics, table and JSON) need no torch
and are tested by test/test_bench_helpers.py.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

# name: trainer preset and flags, and the shape of the benchmark; bias, gelu and tied (absent: GPT-2's
# True, "tanh", True) are the model options both sides take (model_options)
MODELS = {
    "ls-small": dict(preset="ls-small", num_layers=6, channels=192, num_heads=6, global_heads=1, window=50,
                     max_seq_len=2048, vocab_size=10000, seq_len=2048, batch_size=16, target_speedup=2.0),
    "paper": dict(preset="ls-small", num_layers=6, channels=192, num_heads=6, global_heads=1, window=50,
                  max_seq_len=2048, vocab_size=10000, seq_len=2048, batch_size=16, target_speedup=2.0,
                  bias=False, gelu="erf", tied=False),
    "d12": dict(preset="d12", num_layers=12, channels=768, num_heads=12, global_heads=1, window=64,
                max_seq_len=1024, vocab_size=50257, seq_len=1024, batch_size=16, target_speedup=1.0),
    # optional baselines (plain MHSA: torch uses SDPA flash); not in the default --models
    "ls-small-mhsa": dict(preset="ls-small", num_layers=6, channels=192, num_heads=6, global_heads=6, window=50,
                          max_seq_len=2048, vocab_size=10000, seq_len=2048, batch_size=16, target_speedup=1.0),
    "d12-mhsa": dict(preset="d12", num_layers=12, channels=768, num_heads=12, global_heads=12, window=64,
                     max_seq_len=1024, vocab_size=50257, seq_len=1024, batch_size=16, target_speedup=1.0),
    # only for exercising the torch worker on the CPU (test/test_bench_helpers.py): --worker-device cpu
    "tiny-test": dict(preset="ls-small", num_layers=2, channels=32, num_heads=4, global_heads=1, window=5,
                      max_seq_len=32, vocab_size=100, seq_len=32, batch_size=2, target_speedup=1.0),
    "tiny-paper-test": dict(preset="ls-small", num_layers=2, channels=32, num_heads=4, global_heads=1, window=5,
                            max_seq_len=32, vocab_size=100, seq_len=32, batch_size=2, target_speedup=1.0,
                            bias=False, gelu="erf", tied=False),
}


def model_options(m):
    """(bias, gelu, tied) of a MODELS entry: GPT-2's (True, "tanh", True) unless it says otherwise."""
    return m.get("bias", True), m.get("gelu", "tanh"), m.get("tied", True)


def read_peak_table(path=os.path.join(REPO, "llmc", "cuda", "device_peak.h")):
    """Dense bf16 tensor-core peak (FLOP/s, no sparsity) by device name, as [(key, FLOP/s)]: the
    trainer's own table (llmc/cuda/device_peak.h), read from its source so that both sides of the
    comparison take MFU from one table; the first matching entry wins."""
    with open(path) as f:
        text = f.read()
    body = text[text.index("table[] = {"):]
    body = body[:body.index("};")]
    table = [(key, float(tflops) * 1e12) for key, tflops in re.findall(r'\{"([^"]+)",\s*([0-9.]+)\}', body)]
    if not table:
        raise SystemExit(f"error: no peak table found in {path}")
    return table


PEAK_BF16_FLOPS = read_peak_table()


# ------------------------------------------------------------------------------------------------
# pure helpers (tested without torch or a GPU)

def pad_vocab(V):
    return ((V + 127) // 128) * 128


def peak_bf16_flops(device_name):
    """Dense bf16 peak of a device from its name, or None when the name is not in the table."""
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in (device_name or "").lower():
            return flops
    return None


def num_params(m, tied=None, qk_norm=False):
    """Every parameter of the model (llmc/core/params.h's table); tied None: the model's own option.
    Without biases (model_options) no linear layer, LayerNorm or QK-norm has one."""
    L, C, Vp, maxT = m["num_layers"], m["channels"], pad_vocab(m["vocab_size"]), m["max_seq_len"]
    hd = C // m["num_heads"]
    bias, _, own_tied = model_options(m)
    tied = own_tied if tied is None else tied
    b = 1 if bias else 0
    per_layer = (1 + b) * C + (3 * C * C + b * 3 * C) + (C * C + b * C) + (1 + b) * C + (4 * C * C + b * 4 * C) + \
        (4 * C * C + b * C)
    n = Vp * C + maxT * C + L * per_layer + (1 + b) * C
    if qk_norm:
        n += (2 + 2 * b) * L * hd
    if not tied:
        n += Vp * C
    return n


def matmul_params(m, tied=None, qk_norm=False):
    """Parameters that take part in a matmul per token: all but the position embedding (a lookup),
    and, when the head is untied, but the token embedding (then also only a lookup)."""
    C, Vp, maxT = m["channels"], pad_vocab(m["vocab_size"]), m["max_seq_len"]
    tied = model_options(m)[2] if tied is None else tied
    n = num_params(m, tied, qk_norm) - maxT * C
    if not tied:
        n -= Vp * C
    return n


def attention_pairs(T, num_heads, global_heads, window):
    """Unmasked (query, key) pairs of one sequence summed over the heads of one layer: a global head
    sees i + 1 keys at query i, a local head min(i + 1, window)."""
    causal = T * (T + 1) // 2
    P = min(window, T)
    local = P * (P + 1) // 2 + (T - P) * P
    return (num_heads - global_heads) * local + global_heads * causal


def flops_per_token(m, T):
    """Training FLOPs per token: 6 * N for the matmuls (forward 2N, backward 4N) plus attention:
    q.k and a.v cost 2 * hd FLOPs each per unmasked pair forward, times 3 for forward + backward."""
    hd = m["channels"] // m["num_heads"]
    attn = 12 * hd * m["num_layers"] * attention_pairs(T, m["num_heads"], m["global_heads"], m["window"])
    return 6 * matmul_params(m) + attn / T


def mfu(tokens_per_s, flops_tok, peak):
    if not peak or tokens_per_s is None:
        return None
    return tokens_per_s * flops_tok / peak


def summarize_ms(ms):
    """Median, mean, p10 and p90 of per-step times (ms); None entries (non-finite) are dropped."""
    ms = sorted(x for x in ms if x is not None and math.isfinite(x))
    if not ms:
        return None

    def pct(q):  # nearest-rank percentile
        return ms[min(len(ms) - 1, max(0, math.ceil(q * len(ms)) - 1))]
    return {"n": len(ms), "median": statistics.median(ms), "mean": statistics.fmean(ms), "p10": pct(0.10),
            "p90": pct(0.90), "min": ms[0], "max": ms[-1]}


def read_jsonl(path):
    """Complete records of a JSON Lines file; an unterminated or unparsable last line is ignored."""
    out = []
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if i == len(lines) - 1:  # no newline after it: cut short by a kill
            break
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i >= len(lines) - 2:
                break
            raise ValueError(f"{path}: line {i + 1} is not JSON")
    return out


def parse_trainer_metrics(path, skip_steps):
    """Our trainer's metrics.jsonl -> step times after the first skip_steps optimizer steps, the
    losses, and any memory/MFU fields the trainer reports (names containing 'mem' or 'mfu')."""
    recs = [r for r in read_jsonl(path) if "ms" in r and "step" in r]
    recs.sort(key=lambda r: r["step"])
    timed = recs[skip_steps:]
    reported = {}
    for r in timed:
        for k, v in r.items():
            if ("mem" in k or "mfu" in k) and isinstance(v, (int, float)):
                reported[k] = max(reported.get(k, v), v) if "mem" in k else v
    return {"steps_total": len(recs), "steps_timed": len(timed), "ms": summarize_ms([r["ms"] for r in timed]),
            "loss_first": recs[0].get("loss") if recs else None, "loss_last": recs[-1].get("loss") if recs else None,
            "losses": [r.get("loss") for r in recs], "norms": [r.get("grad_norm") for r in recs],
            "trainer_reported": reported}


def side_result(ms_summary, tokens_per_step, flops_tok, peak):
    """tokens/s and MFU from the median step time."""
    if not ms_summary:
        return {"ms_per_step": None, "tokens_per_s": None, "mfu": None}
    tok_s = tokens_per_step / (ms_summary["median"] / 1000.0)
    return {"ms_per_step": ms_summary["median"], "tokens_per_s": tok_s, "mfu": mfu(tok_s, flops_tok, peak)}


# Both sides' losses, step by step, may part by at most this fraction (relative to torch's loss at
# that step): the same data, optimisation and initial weights (write_init), so the gap is the
# arithmetic's (ours bf16 kernels, torch bf16 autocast), not another optimisation or init.
TRAIN_AGREE_TOL = 0.05


def training_agreement(ours, torch_side, tol=TRAIN_AGREE_TOL):
    """The two sides' per-step losses (the loss of each step's forward, before its update) compared
    step by step over the steps both ran: their first and last losses, the largest relative gap and
    whether it is within tol (a non-finite loss never is); the first step beyond tol and each side's
    gradient norm there (None where a side reports none). None when a side has no losses."""
    a, b = (ours or {}).get("losses"), (torch_side or {}).get("losses")
    if not a or not b:
        return None
    n = min(len(a), len(b))
    gaps = [abs(x - y) / abs(y) if x is not None and y and math.isfinite(x) and math.isfinite(y) else math.inf
            for x, y in zip(a[:n], b[:n])]
    worst = max(gaps)
    apart = next((i + 1 for i, g in enumerate(gaps) if not g <= tol), None)

    def norm_at(side, step):  # the gradient norm (before clipping) a side reports at a 1-based step, if any
        ns = (side or {}).get("norms") or []
        return ns[step - 1] if step and step <= len(ns) else None
    return {"steps": n, "ours_first": a[0], "torch_first": b[0], "ours_last": a[n - 1], "torch_last": b[n - 1],
            "max_rel_gap": worst, "max_rel_gap_step": gaps.index(worst) + 1, "tolerance": tol,
            "first_apart_step": apart, "ours_norm_there": norm_at(ours, apart),
            "torch_norm_there": norm_at(torch_side, apart),
            "alike": bool(worst <= tol)}


def speedup(ours, torch_side):
    a, b = (ours or {}).get("tokens_per_s"), (torch_side or {}).get("tokens_per_s")
    if not a or not b:
        return None
    return a / b


def _fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def format_table(results, device):
    """The short table: one row per (model, side), then the speedup and its target per model."""
    hdr = f"{'model':10s} {'side':6s} {'B':>3s} {'T':>5s} {'ms/step':>9s} {'tok/s':>11s} {'MFU':>6s} " \
          f"{'peak mem GiB':>12s}  status"
    lines = [f"end-to-end training, {device}", hdr, "-" * len(hdr)]
    for r in results:
        for side in ("ours", "torch"):
            s = r.get(side) or {}
            mem = s.get("peak_mem_bytes")
            lines.append(f"{r['model']:10s} {side:6s} {r['batch_size']:3d} {r['seq_len']:5d} "
                         f"{_fmt(s.get('ms_per_step'), '9.2f'):>9s} {_fmt(s.get('tokens_per_s'), '11,.0f'):>11s} "
                         f"{_fmt(None if s.get('mfu') is None else 100 * s['mfu'], '5.1f'):>5s}% "
                         f"{_fmt(None if mem is None else mem / 2**30, '12.2f'):>12s}  {s.get('status', 'not run')}")
        sp = r.get("speedup")
        tgt = r.get("target_speedup")
        verdict = "-" if sp is None else ("met" if sp >= tgt else f"NOT met ({100 * (sp / tgt - 1):+.0f}%)")
        lines.append(f"{r['model']:10s} ours/torch tokens/s = {_fmt(sp, '.2f')}x (target >= {tgt:g}x: {verdict})")
        ag = r.get("training")
        if ag:
            lines.append(f"{r['model']:10s} loss ours {ag['ours_first']:.3f} -> {ag['ours_last']:.3f}, torch "
                         f"{ag['torch_first']:.3f} -> {ag['torch_last']:.3f} over {ag['steps']} steps: largest gap "
                         f"{100 * ag['max_rel_gap']:.1f}% (step {ag['max_rel_gap_step']}; bound "
                         f"{100 * ag['tolerance']:g}%): " + ("trained alike" if ag["alike"] else
                                                             "FAIL (the two sides did not train alike)"))
            if ag.get("first_apart_step"):
                lines.append(f"{r['model']:10s} first apart at step {ag['first_apart_step']}: gradient norm ours "
                             f"{_fmt(ag.get('ours_norm_there'), '.3g')}, "
                             f"torch {_fmt(ag.get('torch_norm_there'), '.3g')}")
    return "\n".join(lines)


def json_clean(x):
    """Non-finite floats -> None (JSON has no NaN/Inf), tuples -> lists, recursively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): json_clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_clean(v) for v in x]
    return x


def write_json(path, payload):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(json_clean(payload), f, indent=2, allow_nan=False, default=str)
        f.write("\n")
    os.replace(tmp, path)


def git_commit():
    c = os.environ.get("GPU_CHECK_COMMIT")
    if c:
        return c
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


# The optimisation both sides run: AdamW at a constant learning rate (no warmup, no decay), with the
# trainer's defaults otherwise (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and
# embeddings, gradient clipping at 1.0), which torch_fast_model.make_optimizer copies.
TRAIN_LR = 6e-4
# The seed of the one GPT-2 init both sides start from (write_init)
INIT_SEED = 1337


def trainer_command(trainer, m, init, data_glob, out_dir, steps, device="cuda"):
    """The trainer's command line for one benchmark run (no validation, samples or extra checkpoints):
    the weights of the model file init (write_init), the model named in full as well (the trainer
    refuses a flag the file contradicts), the optimisation of TRAIN_LR; the data read in order."""
    return [trainer, "--device", device, "-e", init, "--layers", str(m["num_layers"]),
            "--channels", str(m["channels"]), "--heads", str(m["num_heads"]), "--vocab", str(m["vocab_size"]),
            "--global-heads", str(m["global_heads"]), "--window", str(m["window"]),
            "--max-seq-len", str(m["max_seq_len"]), "-b", str(m["batch_size"]), "-t", str(m["seq_len"]),
            "-x", str(steps), "-l", repr(TRAIN_LR), "-k", "constant", "-u", "0", "--grad-clip", "1",
            "--shuffle", "0", "-v", "0", "-s", "0", "-i", data_glob, "-o", out_dir, "--seed", "1337"] + \
        option_flags(m)


def option_flags(m):
    """The trainer's flags for the model options of m (model_options): none for GPT-2's."""
    bias, gelu, tied = model_options(m)
    return (["--bias", "0"] if not bias else []) + (["--gelu", gelu] if gelu != "tanh" else []) + \
        (["--untie-embeddings"] if not tied else [])


def _use_reference():
    """dev/reference (gpt2_ls.py, checkpoint.py, model_config.py) importable."""
    ref_dir = os.path.join(REPO, "dev", "reference")
    if ref_dir not in sys.path:
        sys.path.insert(0, ref_dir)


def twin_config(m):
    """The reference's Config of a MODELS entry (dev/reference/model_config.py, torch-free)."""
    _use_reference()
    from model_config import Config
    bias, gelu, tied = model_options(m)
    return Config(max_seq_len=m["max_seq_len"], vocab_size=m["vocab_size"],
                  padded_vocab_size=pad_vocab(m["vocab_size"]), num_layers=m["num_layers"],
                  num_heads=m["num_heads"], channels=m["channels"],
                  global_heads=m["global_heads"], window=m["window"], bias=bias, gelu=gelu, tied_embeddings=tied)


def init_path(work, name):
    return os.path.join(work, f"init_{name}.bin")


def write_init(m, path):
    """GPT-2's init of the model m (dev/reference/gpt2_ls.py init_params, seed INIT_SEED, fp32) as our
    model file (dev/reference/checkpoint.py): the weights both sides start from. Needs torch (CPU only)."""
    import torch
    _use_reference()
    import gpt2_ls as ref
    import checkpoint as ck
    cfg = twin_config(m)
    p = ref.init_params(cfg, torch.Generator().manual_seed(INIT_SEED), dtype=torch.float32, perturbed=False)
    ck.write_model(path, cfg, ref.flatten(cfg, p).numpy())


def read_init(m, path):
    """The named tensors of the model file path (write_init), refused (ValueError naming the file and the
    fields that differ) unless its model is m's."""
    import dataclasses
    import torch
    _use_reference()
    import gpt2_ls as ref
    import checkpoint as ck
    cfg, flat, _ = ck.read_model(path)
    want = twin_config(m)
    if cfg != want:
        diff = ", ".join(f"{f.name} {getattr(cfg, f.name)!r} (wanted {getattr(want, f.name)!r})"
                         for f in dataclasses.fields(want) if getattr(cfg, f.name) != getattr(want, f.name))
        raise ValueError(f"{path}: its model is not {m.get('name', m['preset'])}'s: {diff}; write the init of "
                         f"this model (--worker init)")
    return ref.split_flat(cfg, torch.from_numpy(flat))


def _write_shard_dir(out_dir, vocab_size, tokens, dataset):
    sys.path.insert(0, os.path.join(REPO, "data"))
    from shards import shard_version_for_vocab, write_shard
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "train_000000.bin")
    write_shard(path, tokens, shard_version_for_vocab(vocab_size))
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump({"vocab_size": vocab_size, "dataset": dataset}, f)
    return path


def write_random_shards(out_dir, vocab_size, num_tokens, seed=0):
    """Uniform random token ids in one train shard plus meta.json (the trainer reads V from it)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab_size, size=num_tokens, dtype=np.int64)
    return _write_shard_dir(out_dir, vocab_size, tokens, "uniform random tokens (benchmark)")


def benchmark_tokens(vocab_size, B, T, seed=0):
    """The benchmark's batch: B x T uniform random token ids (int64, flat), the same on both sides."""
    import numpy as np
    return np.random.default_rng(seed).integers(0, vocab_size, size=B * T, dtype=np.int64)


def write_benchmark_shards(out_dir, vocab_size, B, T, batches, seed=0):
    """One train shard of the benchmark batch X repeated `batches` times, then X[0]: every B*T+1-token
    window at a multiple of B*T (what the trainer reads, in order or shuffled) is X followed by X[0],
    i.e. the batch the torch side builds from the same X (inputs X, targets X shifted by one, the
    last target X[0])."""
    import numpy as np
    x = benchmark_tokens(vocab_size, B, T, seed)
    tokens = np.concatenate([np.tile(x, batches), x[:1]])
    return _write_shard_dir(out_dir, vocab_size, tokens, f"one {B} x {T} batch of uniform random tokens, repeated")


# ------------------------------------------------------------------------------------------------
# device memory sampling (no CUDA context in this process)

class MemorySampler:
    """Samples the device's used memory every `period` s in a thread; peak() - baseline = footprint
    of what ran meanwhile (the only process on the GPU). NVML when importable, else nvidia-smi."""

    def __init__(self, period=0.2):
        self.period, self.peak_used, self.baseline = period, None, None
        self._stop, self._armed = threading.Event(), threading.Event()
        self._query = self._make_query()
        self._thread = None

    @staticmethod
    def _make_query():
        try:
            import pynvml
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            return lambda: int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
        except Exception:  # noqa: BLE001 (no NVML python binding: fall back to the CLI)
            pass
        if shutil.which("nvidia-smi") is None:
            return None

        def smi():
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            return int(float(out.splitlines()[0]) * 2**20)
        return smi

    def _sample(self):
        try:
            return self._query() if self._query else None
        except Exception:  # noqa: BLE001
            return None

    def start(self, armed=True):
        self.baseline = self._sample()
        if armed:
            self._armed.set()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def arm(self):
        self._armed.set()

    def _loop(self):
        while not self._stop.is_set():
            if self._armed.is_set():
                u = self._sample()
                if u is not None:
                    self.peak_used = u if self.peak_used is None else max(self.peak_used, u)
            self._stop.wait(self.period)

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join()
        if self.peak_used is None or self.baseline is None:
            return None
        return max(0, self.peak_used - self.baseline)


def run_streaming(cmd, log_path, on_line=None, timeout=None, cwd=REPO):
    """Runs cmd, copying its stdout+stderr to log_path line by line; on_line(line) sees each line.
    Returns (exit status, last lines of output)."""
    tail = []
    with open(log_path, "w", encoding="utf-8") as log:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        timer = threading.Timer(timeout, p.kill) if timeout else None
        if timer:
            timer.start()
        for line in p.stdout:
            log.write(line)
            tail = (tail + [line.rstrip("\n")])[-30:]
            if on_line:
                on_line(line)
        rc = p.wait()
        if timer:
            timer.cancel()
    return rc, tail


# ------------------------------------------------------------------------------------------------
# the two sides

def make_init(m, args, work):
    """Writes the shared init of m (init_path) with a --worker init subprocess (torch stays out of this
    process); None, or the reason it failed."""
    path = init_path(work, m["name"])
    if os.path.exists(path):
        os.remove(path)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "init", "--model", m["name"], "--init", path]
    print(f"[{m['name']}] init: {' '.join(cmd)}", flush=True)
    rc, tail = run_streaming(cmd, os.path.join(work, f"init_{m['name']}.log"), timeout=args.timeout)
    if rc != 0 or not os.path.exists(path):
        return f"exit {rc}: " + " | ".join(tail[-3:])
    return None


def run_ours(m, args, work, tokens_per_step, flops_tok, peak):
    name = m["name"]
    data_dir = os.path.join(work, f"data_{name}")
    steps = args.warmup + args.steps
    write_benchmark_shards(data_dir, m["vocab_size"], m["batch_size"], m["seq_len"], steps + 4)
    out_dir = os.path.join(work, f"ours_{name}")
    shutil.rmtree(out_dir, ignore_errors=True)
    init = init_path(work, name)
    cmd = trainer_command(args.trainer, m, init, os.path.join(data_dir, "train_*.bin"), out_dir, steps,
                          device=args.worker_device)
    log = os.path.join(work, f"ours_{name}.log")
    print(f"[{name}] ours: {' '.join(cmd)}", flush=True)
    sampler = MemorySampler().start()
    t0 = time.time()
    rc, tail = run_streaming(cmd, log, timeout=args.timeout)
    mem = sampler.stop()
    res = {"command": cmd, "exit_status": rc, "wall_s": time.time() - t0, "log": log, "peak_mem_bytes": mem}
    metrics = os.path.join(out_dir, "metrics.jsonl")
    if rc != 0 or not os.path.exists(metrics):
        res.update(status=f"FAIL (exit {rc})", error="\n".join(tail[-8:]))
        return res
    parsed = parse_trainer_metrics(metrics, args.warmup)
    res.update(parsed)
    res.update(side_result(parsed["ms"], tokens_per_step, flops_tok, peak))
    res["status"] = "ok" if parsed["ms"] else "FAIL (no timed steps in metrics.jsonl)"
    return res


def run_torch(m, args, work, tokens_per_step, flops_tok, peak):
    name = m["name"]
    out_json = os.path.join(work, f"torch_{name}.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "torch", "--model", name, "--json", out_json,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(m["batch_size"]),
           "--init", init_path(work, name)]
    if args.attn:
        cmd += ["--attn", args.attn]
    if args.worker_device != "cuda":
        cmd += ["--worker-device", args.worker_device]
    log = os.path.join(work, f"torch_{name}.log")
    print(f"[{name}] torch: {' '.join(cmd)}", flush=True)
    sampler = MemorySampler().start(armed=False)

    def on_line(line):  # the worker prints this once its check is done and its cache emptied
        if line.startswith("== timing =="):
            sampler.arm()
    t0 = time.time()
    rc, tail = run_streaming(cmd, log, on_line=on_line, timeout=args.timeout)
    mem = sampler.stop()
    res = {"command": cmd, "exit_status": rc, "wall_s": time.time() - t0, "log": log, "peak_mem_bytes": mem}
    if not os.path.exists(out_json):
        res.update(status=f"FAIL (exit {rc})", error="\n".join(tail[-8:]))
        return res
    with open(out_json) as f:
        w = json.load(f)
    res.update(w)
    res.update(side_result(w.get("ms"), tokens_per_step, flops_tok, peak))
    if rc != 0:
        res["status"] = res.get("status") or f"FAIL (exit {rc})"
    elif not twin_is_the_model(w, m):
        res["status"] = (f"FAIL (the twin is not the model: {w.get('params')} parameters, options "
                         f"{w.get('options')}; expected {num_params(m)}, {option_dict(m)})")
    return res


def option_dict(m):
    bias, gelu, tied = model_options(m)
    return {"bias": bias, "gelu": gelu, "tied": tied}


def twin_is_the_model(worker_result, m):
    """Whether the torch worker built the model m names: its parameter count (which differs with the
    options) and the options it reports (its own check is against a reference built from the same
    options, so it cannot tell)."""
    return worker_result.get("params") == num_params(m) and worker_result.get("options") == option_dict(m)


# ------------------------------------------------------------------------------------------------
# the torch worker (a subprocess, so its memory is measured alone and no CUDA context stays here)

# Tolerances of the twin-vs-reference check: both in fp32 (TF32 off), perturbed weights. The check is
# of the function, so it runs without autocast: with bf16 autocast, rounding alone moves a deep model's
# logits by more than a wrong mask does (perturbed weights make it chaotic): d12's dimensions at T 256
# on the CPU, bf16 autocast: logits 0.67, gradients 1.4; the same in fp32: loss 2.2e-6, logits 1.4e-4,
# gradients 9.4e-4; d12 at T 1024 (B 1, the worker's check on the CPU): loss 3.2e-7, logits 2.3e-4,
# gradients 1.4e-3 (L2 C192: ~1e-6 each). A wrong head layout gives logits ~1 (0.7-1.3).
CHECK_TOL = {"loss_rel": 1e-4, "logits_rel": 2e-3, "grads_rel": 1e-2}
# The timed precision (bf16 autocast) on the same weights and batch, forward only: its loss within this
# of the reference's. A sanity bound that catches a broken bf16 path (non-finite, garbage), not a
# wrong mask (a wrong layout moves the loss by < 2e-3). Measured: d12 0.17% (H200, T 1024, B 16), 0.12%
# (CPU, T 1024, B 1), 0.5% (CPU, T 256); ls-small 3e-6 (H200).
BF16_LOSS_TOL = 5e-2


def torch_worker(args):
    import numpy as np
    import torch
    sys.path.insert(0, HERE)
    import torch_fast_model as tfm
    import gpt2_ls as ref
    from model_config import Config

    spec = dict(MODELS[args.model], name=args.model)
    B, T = args.batch_size, spec["seq_len"]
    cfg = twin_config(spec)
    try:  # the weights ours starts from too (refused when another model's)
        start = read_init(spec, args.init)
    except (OSError, ValueError) as e:  # one line, and the reason in the JSON for the parent's table
        print(f"train_vs_torch worker: error: the shared init: {e}", file=sys.stderr, flush=True)
        write_json(args.json, {"status": f"FAIL (the shared init: {e})"})
        return 1
    dev = torch.device(args.worker_device)
    on_gpu = dev.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference stays fp32; the twin runs in bf16
    torch.backends.cudnn.allow_tf32 = False
    kind = tfm.choose_attention(cfg, T, dev, args.attn or "auto")
    if kind == "sdpa":  # MHSA: SDPA's flash back-end only
        torch.backends.cuda.enable_flash_sdp(True)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_math_sdp(False)
        if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            torch.backends.cuda.enable_cudnn_sdp(False)
    result = {"status": None, "attention": kind, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0) if on_gpu else "cpu", "batch_size": B, "seq_len": T}

    def save():
        write_json(args.json, result)

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    model = tfm.TwinGPT(cfg, attn=kind, device=dev)
    result["params"] = sum(p.numel() for p in model.parameters())  # what the parent checks (twin_is_the_model)
    result["options"] = {"bias": cfg.bias, "gelu": cfg.gelu, "tied": cfg.tied_embeddings}
    model.prepare(T, dev)
    compiled = torch.compile(model) if on_gpu else model  # the CPU run only exercises this code (torch 1.13)
    fwd = tfm.TwinForward(model, compiled)

    # 1. the check: same weights (perturbed so attention is far from uniform) and batch as the reference
    g = torch.Generator().manual_seed(1234)
    p_check = {n: t.to(dev) for n, t in ref.init_params(cfg, g, dtype=torch.float32, perturbed=True).items()}
    model.load_params(p_check)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g).to(dev)
    tgt = torch.randint(0, cfg.vocab_size, (B, T), generator=g).to(dev)
    wrong = Config(**{**cfg.__dict__, "global_heads": cfg.num_heads if cfg.global_heads < cfg.num_heads else 0})
    t0 = time.time()
    chk = tfm.check_against_reference(cfg, p_check, idx, tgt, fwd, chunk=1, wrong_cfg=wrong)
    model.zero_grad(set_to_none=True)
    with torch.no_grad(), torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
        chk["loss_bf16"] = float(fwd(idx, tgt)[1])
    chk["loss_bf16_rel"] = abs(chk["loss_bf16"] - chk["loss_ref"]) / abs(chk["loss_ref"])
    sync()
    chk["seconds_incl_compile"] = time.time() - t0
    chk["tolerances"] = dict(CHECK_TOL, loss_bf16_rel=BF16_LOSS_TOL)
    within = all(chk[k] <= tol for k, tol in chk["tolerances"].items())  # NaN fails
    discriminates = chk["wrong_layout_logits_rel"] > 2 * CHECK_TOL["logits_rel"]
    chk["passed"] = bool(within and discriminates)
    result["check"] = chk
    print(f"check vs dev/reference/gpt2_ls.py (fp32): loss {chk['loss_rel']:.2e}, logits {chk['logits_rel']:.2e}, "
          f"grads {chk['grads_rel']:.2e}, bf16 autocast loss {chk['loss_bf16_rel']:.2e} (tolerances "
          f"{chk['tolerances']}); wrong layout logits {chk['wrong_layout_logits_rel']:.2e} -> "
          f"{'PASS' if chk['passed'] else 'FAIL'}", flush=True)
    del p_check, idx, tgt
    model.zero_grad(set_to_none=True)
    sync()
    if on_gpu:
        torch.cuda.empty_cache()
    if not chk["passed"]:
        result["status"] = "FAIL (twin differs from the reference)"
        save()
        return 1

    # 2. timing: the shared GPT-2 init (--init), the trainer's AdamW defaults, host batches copied in each step
    print("== timing ==", flush=True)
    model.load_params({n: t.to(dev) for n, t in start.items()})
    del start
    opt = tfm.make_optimizer(model, lr=TRAIN_LR)
    # the benchmark batch as ours reads it (write_benchmark_shards): inputs X, targets X shifted by one
    x_tok = benchmark_tokens(cfg.vocab_size, B, T)
    x_host = torch.from_numpy(x_tok.reshape(B, T))
    y_host = torch.from_numpy(np.concatenate([x_tok[1:], x_tok[:1]]).reshape(B, T))
    if on_gpu:
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()
    params = list(model.parameters())

    def step(i):
        # copied in every step, as a trainer copies its batch; each its own contiguous, aligned tensor, as
        # in the check (no recompile)
        x, y = x_host.to(dev, non_blocking=True), y_host.to(dev, non_blocking=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            _, loss, _ = compiled(x, y, 0.0)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)  # foreach by default on CUDA
        opt.step()
        opt.zero_grad(set_to_none=True)
        norms.append(norm.detach())  # read after the loop: no host sync inside it
        return loss.detach()

    norms = []
    t0 = time.time()
    losses = [step(i) for i in range(args.warmup)]
    sync()
    result["warmup_s"] = time.time() - t0
    ms = []
    if on_gpu:  # CUDA events around each step: no host sync inside the timed loop
        torch.cuda.reset_peak_memory_stats()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps)]
        for i in range(args.steps):
            starts[i].record()
            losses.append(step(args.warmup + i))
            ends[i].record()
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        result.update(max_memory_allocated=torch.cuda.max_memory_allocated(),
                      max_memory_reserved=torch.cuda.max_memory_reserved())
    else:
        for i in range(args.steps):
            t1 = time.perf_counter()
            losses.append(step(args.warmup + i))
            ms.append(1000 * (time.perf_counter() - t1))
    losses = [float(x) for x in losses]
    result.update(ms=summarize_ms(ms), ms_all=ms, loss_first=losses[0], loss_last=losses[-1], losses=losses,
                  norms=[float(x) for x in norms])
    finite = all(math.isfinite(x) for x in losses)
    result["status"] = "ok" if finite else "FAIL (non-finite loss)"
    save()
    print(f"torch: median {result['ms']['median']:.2f} ms/step, loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
    return 0 if finite else 1


# ------------------------------------------------------------------------------------------------

def device_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "out", "bench"), help="directory for train_vs_torch.json")
    ap.add_argument("--work", default=os.path.join(REPO, "build", "bench_train_vs_torch"),
                    help="scratch directory: shards, trainer outputs, logs")
    ap.add_argument("--models", default="paper,ls-small,d12", help=f"comma-separated, from {', '.join(MODELS)}")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per side")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation, allocator, clocks)")
    ap.add_argument("--batch-size", type=int, default=None, help="B for every model (default: each model's)")
    ap.add_argument("--trainer", default=os.path.join(REPO, "train_gpt2_ls"))
    ap.add_argument("--attn", choices=["auto", "flex", "sdpa"], default=None, help="torch attention back-end")
    ap.add_argument("--skip-ours", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--timeout", type=float, default=420, help="seconds per side before it is killed")
    ap.add_argument("--worker", choices=["torch", "init"], help=argparse.SUPPRESS)  # init: write_init to --init
    ap.add_argument("--init", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    ap.add_argument("--worker-device", default="cuda", help=argparse.SUPPRESS)  # cpu: exercise the worker only
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        ap.error("--steps and --warmup must be >= 1")
    if args.worker == "init":
        if args.model not in MODELS or not args.init:
            ap.error("--worker init needs --model and --init")
        write_init(MODELS[args.model], args.init)
        return 0
    if args.worker:
        if args.model not in MODELS or not args.json or not args.init:
            ap.error("--worker torch needs --model, --json and --init")
        if args.batch_size is None:
            args.batch_size = MODELS[args.model]["batch_size"]
        return torch_worker(args)

    # absolute: the subprocesses run in REPO (run_streaming), this process wherever it was started
    args.out, args.work = os.path.abspath(args.out), os.path.abspath(args.work)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    bad = [n for n in names if n not in MODELS]
    if bad or not names:
        ap.error(f"unknown model(s) {bad}; choose from {', '.join(MODELS)}")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    dev_name = device_name()
    if dev_name is None:
        print("train_vs_torch: no NVIDIA GPU found (nvidia-smi); this benchmark needs one", file=sys.stderr)
        return 1
    peak = peak_bf16_flops(dev_name)
    payload = {"benchmark": "train_vs_torch", "commit": git_commit(), "device": dev_name,
               "peak_bf16_flops": peak, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "host": platform.node(), "steps": args.steps, "warmup": args.warmup, "results": []}
    ok = True
    for name in names:
        m = dict(MODELS[name], name=name)
        if args.batch_size:
            m["batch_size"] = args.batch_size
        tokens_per_step = m["batch_size"] * m["seq_len"]
        ftok = flops_per_token(m, m["seq_len"])
        r = {"model": name, "config": m, "batch_size": m["batch_size"], "seq_len": m["seq_len"],
             "params": num_params(m), "matmul_params": matmul_params(m), "flops_per_token": ftok,
             "target_speedup": m["target_speedup"]}
        init_error = make_init(m, args, args.work)
        if init_error:  # neither side can start from the shared weights: both fail, with the reason
            for side, skip in (("ours", args.skip_ours), ("torch", args.skip_torch)):
                if not skip:
                    r[side] = {"status": f"FAIL (the shared init: {init_error})"}
            ok = False
            payload["results"].append(r)
            write_json(os.path.join(args.out, "train_vs_torch.json"), payload)
            continue
        if not args.skip_ours:
            r["ours"] = run_ours(m, args, args.work, tokens_per_step, ftok, peak)
            ok &= r["ours"]["status"] == "ok"
        if not args.skip_torch:
            r["torch"] = run_torch(m, args, args.work, tokens_per_step, ftok, peak)
            ok &= r["torch"]["status"] == "ok"
        r["speedup"] = speedup(r.get("ours"), r.get("torch"))
        r["training"] = training_agreement(r.get("ours"), r.get("torch"))
        ok &= r["training"] is None or r["training"]["alike"]
        payload["results"].append(r)
        write_json(os.path.join(args.out, "train_vs_torch.json"), payload)  # after each model: partial results survive
    payload["passed"] = bool(ok)
    write_json(os.path.join(args.out, "train_vs_torch.json"), payload)
    print()
    print(f"commit {payload['commit']}, peak {_fmt(None if peak is None else peak / 1e12, '.1f')} TFLOP/s bf16")
    print(format_table(payload["results"], dev_name))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
