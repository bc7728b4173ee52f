"""
CPU training speed: our trainer (./train_gpt2_ls --device cpu) against PyTorch on the same CPU, same
shapes, same thread count, fp32: the table of issue 27 and docs/cpu_performance.md, in one command.

  python3 dev/bench/cpu_vs_torch.py [--trainer ./train_gpt2_ls] [--rows paper-ls,tiny-mhsa,...]
                                    [--steps 10] [--warmup 3] [--json FILE] [--work DIR] [--smoke]

Rows (ROWS below; --rows picks some): the paper model (L6 C192 NH6 hd32, V 50304, maxT 2048) at B4
T256 with LS attention G1 P50, at B1 T1024, and as plain MHSA (G6), on 2 threads; a tiny model (L2
C32 NH4 hd8, V 64 so Vp 128, maxT 512) at B4 T512 as MHSA and with LS attention G1 P32, on 1
thread. Not in the default table: paper-ls-1t, the first row on 1 thread (thread scaling).

Each cell is the median ms of one training step (forward + backward + gradient clipping at 1.0 +
AdamW, fp32) over --steps steps after --warmup untimed ones, uniform random tokens:
  train_gpt2_ls   the trainer as a subprocess on a random shard this script writes, run for warmup +
                  steps optimizer steps with validation and samples off; its metrics.jsonl "ms" (the
                  step's wall time: batch, forward, backward, norm, AdamW and the attention-logit
                  statistics it always records) of the steps after the warm-up ones.
  PyTorch eager   GPT below, attention as an explicit (B, NH, T, T) score matrix with the dense
                  (NH, T, T) mask, softmax and a second matmul (the textbook way).
  PyTorch SDPA    F.scaled_dot_product_attention: is_causal=True when every head is global, else the
                  LS mask as an explicit boolean attn_mask (NH, T, T) (SDPA has no sliding-window
                  option, so it cannot skip the keys outside a local head's window).
  SDPA + compile  the SDPA model under torch.compile (default mode, inductor); compilation happens in
                  the warm-up steps (its time is in the JSON as warmup_ms).
PyTorch's optimizer is torch.optim.AdamW (fused=True when this torch has the fused CPU kernel, else
foreach) with the trainer's defaults (lr 6e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the
matrices and embeddings only) and torch.nn.utils.clip_grad_norm_(1.0), as the trainer clips.

Fairness: every PyTorch side runs in a worker subprocess (--worker) with torch.set_num_threads and
OMP_NUM_THREADS = the row's threads, and with the OpenMP wait policy our trainer uses: PASSIVE
unless the environment sets OMP_WAIT_POLICY or GOMP_SPINCOUNT, which then reach both sides
(docs/training.md, "Threads"). The same initial weights and batches go into the three PyTorch
sides, and their first two losses (before and after one update) must agree within CONSISTENCY_TOL,
which checks the SDPA mask and the compiled forward and backward against the dense eager model at
the timed shape; test/test_cpu_vs_torch.py checks GPT against the independent
float64 reference dev/reference/gpt2_ls.py (loss, logits and every gradient).

The GEMM ceiling: torch.mm of two fp32 2048 x 2048 matrices (2 * 2048^3 FLOPs) per thread count of
the selected rows, median GFLOP/s of GEMM_REPEATS, in the same run, so the table can be read against
what the machine's matmuls reach at the time.

Output: progress on stderr; on stdout the run's conditions (commit, CPU, load average before and
after, niceness) and the markdown table, last; --json FILE writes every number. Exit status 1 when
a side failed (then its cell reads FAIL), 2 for bad arguments.
--smoke: tiny shapes, 2 timed steps and a 256^3 GEMM, to check that everything runs (the test).
"""
import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from train_vs_torch import (git_commit, parse_trainer_metrics, summarize_ms, write_json,  # noqa: E402
                            write_random_shards)

LN_EPS = 1e-5
ADAMW = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)  # the trainer's defaults
GRAD_CLIP = 1.0
CONSISTENCY_TOL = 1e-4  # relative difference of the three PyTorch sides' first-step losses (fp32)
GEMM_N, GEMM_REPEATS = 2048, 7

PAPER = dict(layers=6, channels=192, heads=6, vocab=50304, max_seq_len=2048)
TINY = dict(layers=2, channels=32, heads=4, vocab=64, max_seq_len=512)
# name -> model, attention layout, batch, threads (global_heads == heads: plain MHSA)
ROWS = {
    "paper-ls": dict(PAPER, global_heads=1, window=50, batch=4, seq_len=256, threads=2),
    "paper-ls-t1024": dict(PAPER, global_heads=1, window=50, batch=1, seq_len=1024, threads=2),
    "paper-mhsa": dict(PAPER, global_heads=6, window=50, batch=4, seq_len=256, threads=2),
    "tiny-mhsa": dict(TINY, global_heads=4, window=32, batch=4, seq_len=512, threads=1),
    "tiny-ls": dict(TINY, global_heads=1, window=32, batch=4, seq_len=512, threads=1),
    # not in the default table: with paper-ls, the 1-thread to 2-thread scaling (--rows paper-ls,paper-ls-1t)
    "paper-ls-1t": dict(PAPER, global_heads=1, window=50, batch=4, seq_len=256, threads=1),
}
DEFAULT_ROWS = ["paper-ls", "paper-ls-t1024", "paper-mhsa", "tiny-mhsa", "tiny-ls"]
SMOKE = dict(layers=1, channels=16, heads=4, vocab=64, max_seq_len=64, batch=2, seq_len=64)
SMOKE_ROWS = {
    "smoke-ls-2t": dict(SMOKE, global_heads=1, window=8, threads=2),
    "smoke-mhsa-1t": dict(SMOKE, global_heads=4, window=8, threads=1),
}
TORCH_SIDES = ("eager", "sdpa", "compile")
COLUMNS = ["model, shape (ms/step)", "train_gpt2_ls", "PyTorch eager (dense mask)", "PyTorch SDPA",
           "PyTorch SDPA + torch.compile", "ours vs SDPA + compile"]


def pad_vocab(V):
    return ((V + 127) // 128) * 128


def row_label(r):
    """'L6 C192 NH6 V50304, B4 T256, LS G1 P50, 2 threads' (MHSA when every head is global)."""
    layout = "MHSA" if r["global_heads"] == r["heads"] else f"LS G{r['global_heads']} P{r['window']}"
    return (f"L{r['layers']} C{r['channels']} NH{r['heads']} V{r['vocab']}, B{r['batch']} T{r['seq_len']}, "
            f"{layout}, {r['threads']} thread{'s' if r['threads'] != 1 else ''}")


# ------------------------------------------------------------------------------------------------
# the PyTorch model: GPT-2 with LS attention, written in the usual nanoGPT style (one nn.Linear per
# projection, tied embeddings), from the model's definition in docs/design.md.

def ls_allowed(num_heads, global_heads, window, T, device=None):
    """(NH, T, T) bool: key j is visible to query i iff j <= i, and for a local head (h < NH - G)
    also i - window < j."""
    i = torch.arange(T, device=device).view(T, 1)
    j = torch.arange(T, device=device).view(1, T)
    causal = j <= i
    local = causal & (j > i - window)
    is_local = (torch.arange(num_heads, device=device) < num_heads - global_heads).view(num_heads, 1, 1)
    return torch.where(is_local, local, causal)


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C, eps=LN_EPS)
        self.c_attn = nn.Linear(C, 3 * C)      # x -> q, k, v
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=LN_EPS)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, attend):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hd)
        y = attend(q, k, v).transpose(1, 2).reshape(B, T, C)                               # heads in order
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """shape: layers, channels, heads, global_heads, window, vocab, max_seq_len. attention: 'dense'
    (explicit scores + mask + softmax) or 'sdpa' (F.scaled_dot_product_attention). forward(idx,
    targets) (B, T) int64 -> mean cross-entropy over the real vocabulary; logits(idx) -> (B, T, Vp)."""

    def __init__(self, shape, attention):
        super().__init__()
        if attention not in ("dense", "sdpa"):
            raise ValueError(f"attention must be 'dense' or 'sdpa', not {attention!r}")
        L, C, NH = shape["layers"], shape["channels"], shape["heads"]
        self.V, self.attention = shape["vocab"], attention
        self.all_global = shape["global_heads"] == NH or shape["window"] >= shape["max_seq_len"]
        self.wte = nn.Embedding(pad_vocab(self.V), C)   # also the classifier (tied)
        self.wpe = nn.Embedding(shape["max_seq_len"], C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=LN_EPS)
        self.register_buffer("allowed", ls_allowed(NH, shape["global_heads"], shape["window"], shape["max_seq_len"]),
                             persistent=False)       # (NH, maxT, maxT)
        for name, p in self.named_parameters():      # GPT-2's initialization
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_"):
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def attend(self, q, k, v):
        T = q.shape[2]
        allowed = self.allowed[:, :T, :T]
        if self.attention == "sdpa":
            if self.all_global:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))   # (B, NH, T, T)
        s = s.masked_fill(~allowed, float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    def logits(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.blocks:
            x = block(x, self.attend)
        return F.linear(self.ln_f(x), self.wte.weight)                   # (B, T, Vp)

    def forward(self, idx, targets):
        real = self.logits(idx)[:, :, :self.V]                           # padded columns never count
        return F.cross_entropy(real.reshape(-1, self.V), targets.reshape(-1))

    def weight_decay_groups(self):
        """AdamW groups as the trainer: decay on the matrices and embeddings, not biases or LayerNorm."""
        decay = [p for n, p in self.named_parameters() if p.dim() == 2]
        rest = [p for n, p in self.named_parameters() if p.dim() != 2]
        return [{"params": decay, "weight_decay": ADAMW["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]

    @torch.no_grad()
    def load_reference(self, p):
        """Copies a dev/reference/gpt2_ls.py parameter dict (llmc/core/params.h names, tied, no
        QK-norm) into this model."""
        self.wte.weight.copy_(p["wte"])
        self.wpe.weight.copy_(p["wpe"])
        for l, b in enumerate(self.blocks):
            for mod, w, bias in ((b.ln_1, "ln1w", "ln1b"), (b.c_attn, "qkvw", "qkvb"),
                                 (b.c_proj, "attprojw", "attprojb"), (b.ln_2, "ln2w", "ln2b"),
                                 (b.c_fc, "fcw", "fcb"), (b.mlp_proj, "fcprojw", "fcprojb")):
                mod.weight.copy_(p[w][l])
                mod.bias.copy_(p[bias][l])
        self.ln_f.weight.copy_(p["lnfw"])
        self.ln_f.bias.copy_(p["lnfb"])

    def reference_grads(self):
        """This model's gradients under the reference's names and shapes (stacked per layer)."""
        g = {"wte": self.wte.weight.grad, "wpe": self.wpe.weight.grad,
             "lnfw": self.ln_f.weight.grad, "lnfb": self.ln_f.bias.grad}
        for name, attr in (("ln1", "ln_1"), ("qkv", "c_attn"), ("attproj", "c_proj"), ("ln2", "ln_2"),
                           ("fc", "c_fc"), ("fcproj", "mlp_proj")):
            g[name + "w"] = torch.stack([getattr(b, attr).weight.grad for b in self.blocks])
            g[name + "b"] = torch.stack([getattr(b, attr).bias.grad for b in self.blocks])
        return g


def make_adamw(model):
    """torch.optim.AdamW with the trainer's settings; fused when this torch has the CPU kernel."""
    try:
        return torch.optim.AdamW(model.weight_decay_groups(), **{k: v for k, v in ADAMW.items() if k != "weight_decay"},
                                 fused=True), "fused"
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(model.weight_decay_groups(), **{k: v for k, v in ADAMW.items() if k != "weight_decay"},
                                 foreach=True), "foreach"


# ------------------------------------------------------------------------------------------------
# workers (subprocesses: the OpenMP settings must be in the environment before torch loads)

def time_torch_side(row, side, steps, warmup, seed=1234):
    """Trains a fresh GPT for warmup + steps steps; returns every step's ms and loss."""
    torch.manual_seed(seed)
    model = GPT(row, "dense" if side == "eager" else "sdpa")
    opt, opt_kind = make_adamw(model)
    params = list(model.parameters())
    fn = torch.compile(model) if side == "compile" else model
    g = torch.Generator().manual_seed(seed + 1)
    batches = [torch.randint(0, row["vocab"], (2, row["batch"], row["seq_len"]), generator=g)
               for _ in range(warmup + steps)]  # each (idx, targets), (B, T)
    ms, losses = [], []
    for idx, tgt in batches:
        t0 = time.perf_counter()
        loss = fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ms.append(1000.0 * (time.perf_counter() - t0))
        losses.append(loss.item())
    return {"warmup_ms": ms[:warmup], "ms": summarize_ms(ms[warmup:]), "all_ms": ms, "losses": losses,
            "optimizer": f"AdamW ({opt_kind})"}


def worker_torch(row, steps, warmup):
    torch.set_num_threads(row["threads"])
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "sides": {}}
    for side in TORCH_SIDES:
        t0 = time.time()
        try:
            r = time_torch_side(row, side, steps, warmup)
            r["status"] = "ok"
        except Exception as e:  # noqa: BLE001 (a side that fails is reported in its cell, the others still run)
            r = {"status": f"FAIL ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"[:200]}
        r["wall_s"] = time.time() - t0
        out["sides"][side] = r
        print(f"  torch {side}: {r['status']}"
              + (f", median {r['ms']['median']:.1f} ms" if r.get("ms") else ""), file=sys.stderr, flush=True)
    # same weights and batches: the first two losses (before and after one update) must agree
    ok = {s: r["losses"] for s, r in out["sides"].items() if r["status"] == "ok"}
    if "eager" in ok:
        ref = ok["eager"]
        for s, losses in ok.items():
            rel = [abs(a - b) / abs(b) for a, b in zip(losses, ref)]
            out["sides"][s]["loss_rel_to_eager_first2"] = max(rel[:2])
            out["sides"][s]["loss_rel_to_eager_max"] = max(rel)
            if not max(rel[:2]) <= CONSISTENCY_TOL:  # NaN fails too
                out["sides"][s]["status"] = f"FAIL (losses {losses[:2]} vs eager {ref[:2]})"
    return out


def worker_gemm(threads, n, repeats):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    torch.mm(a, b)  # warm-up
    s = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        s.append(time.perf_counter() - t0)
    gflops = [2 * n**3 / x / 1e9 for x in s]
    return {"threads": threads, "n": n, "repeats": repeats, "gflops_median": statistics.median(gflops),
            "gflops_max": max(gflops)}


def worker_env(threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        env["OMP_WAIT_POLICY"] = "PASSIVE"  # what the trainer sets for itself (llmc/app/threads.h)
    return env


def wait_policy():
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return ", ".join(f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ)
    return "OMP_WAIT_POLICY=PASSIVE"


def run_worker(args_list, threads, work, name, timeout):
    """Runs this file as a worker; returns its JSON result, or {'status': 'FAIL ...'}."""
    out = os.path.join(work, f"{name}.json")
    cmd = [sys.executable, os.path.abspath(__file__)] + args_list + ["--worker-out", out]
    try:
        p = subprocess.run(cmd, env=worker_env(threads), stdout=subprocess.PIPE, stderr=None, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"FAIL (timeout after {timeout} s)"}
    if p.returncode != 0 or not os.path.exists(out):
        return {"status": f"FAIL (worker exit {p.returncode})"}
    with open(out, encoding="utf-8") as f:
        return json.load(f)


# ------------------------------------------------------------------------------------------------
# our trainer

def trainer_command(trainer, row, data_glob, out_dir, steps):
    return [trainer, "--device", "cpu", "--threads", str(row["threads"]), "-e", "ls-small",
            "--layers", str(row["layers"]), "--channels", str(row["channels"]), "--heads", str(row["heads"]),
            "--global-heads", str(row["global_heads"]), "--window", str(row["window"]), "--vocab", str(row["vocab"]),
            "--max-seq-len", str(row["max_seq_len"]), "-b", str(row["batch"]), "-t", str(row["seq_len"]),
            "-x", str(steps), "-v", "0", "-s", "0", "-i", data_glob, "-o", out_dir, "--seed", "1337"]


def run_ours(trainer, name, row, steps, warmup, work, timeout):
    data = os.path.join(work, f"data_{name}")
    total = warmup + steps
    write_random_shards(data, row["vocab"], (total + 2) * row["batch"] * row["seq_len"] + 1, seed=1)
    out = os.path.join(work, f"ours_{name}")
    shutil.rmtree(out, ignore_errors=True)
    cmd = trainer_command(trainer, row, os.path.join(data, "train_*.bin"), out, total)
    res = {"command": cmd}
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        res["status"] = f"FAIL (timeout after {timeout} s)"
        return res
    metrics = os.path.join(out, "metrics.jsonl")
    if p.returncode != 0 or not os.path.exists(metrics):
        err = (p.stderr.strip().splitlines() or [""])[-1]
        res["status"] = f"FAIL (exit {p.returncode}: {err})"[:200]
        return res
    res.update(parse_trainer_metrics(metrics, warmup))
    res["device_line"] = (p.stdout.splitlines() or [""])[0]
    res["status"] = "ok" if res["ms"] and res["steps_timed"] == steps else \
        f"FAIL ({res['steps_timed']} timed steps in metrics.jsonl, expected {steps})"
    shutil.rmtree(out, ignore_errors=True)   # the checkpoint of the paper model is ~200 MB
    shutil.rmtree(data, ignore_errors=True)
    return res


# ------------------------------------------------------------------------------------------------
# the table

def median_or_none(side):
    if not side or side.get("status") != "ok" or not side.get("ms"):
        return None
    return side["ms"]["median"]


def format_table(results):
    """Markdown table: one line per row, the fastest cell in bold, FAIL for a failed side, and the
    ratio = SDPA + compile ms / ours ms (> 1: ours is faster)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in results:
        cells = [("train_gpt2_ls", r["ours"])] + [(s, r["torch"]["sides"].get(s)) for s in TORCH_SIDES]
        values = [median_or_none(side) for _, side in cells]
        best = min((v for v in values if v is not None), default=None)
        text = []
        for v in values:
            if v is None:
                text.append("FAIL")
            else:
                t = f"{v:.1f}" if v < 100 else f"{v:.0f}"
                text.append(f"**{t}**" if v == best else t)
        ratio = "-" if values[0] is None or values[3] is None else f"{values[3] / values[0]:.2f}x"
        lines.append("| " + " | ".join([row_label(r["row"])] + text + [ratio]) + " |")
    return "\n".join(lines)


def cpu_description():
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = [f for f in ("avx2", "fma", "avx512f") if f in flags]
    return f"{model}, {len(os.sched_getaffinity(0))} CPUs usable, {'/'.join(simd) or 'no avx2'}"


def conditions_text(meta):
    g = ", ".join(f"{x['threads']} thread{'s' if x['threads'] != 1 else ''} "
                  + (f"{x['gflops_median']:.0f} GFLOP/s" if x.get("gflops_median") else x.get("status", "FAIL"))
                  for x in meta["gemm"])
    return "\n".join([
        f"commit {meta['commit']}; trainer {meta['trainer']}; torch {meta['torch']}",
        f"CPU: {meta['cpu']}; niceness {meta['niceness']}; OpenMP wait policy of both sides: {meta['wait_policy']}",
        f"load average (1 min) {meta['loadavg_before'][0]:.2f} before, {meta['loadavg_after'][0]:.2f} after "
        f"on {len(os.sched_getaffinity(0))} CPUs (this benchmark adds up to a row's threads; more: other "
        "processes share the machine and the numbers are noisy)",
        f"fp32 GEMM ceiling, torch.mm {meta['gemm_n']}^3 (median of {meta['gemm_repeats']}): {g}",
        f"ms/step = median of {meta['steps']} steps after {meta['warmup']} warm-up steps; fp32; "
        "ratio = SDPA + compile ms / ours ms (> 1: ours faster)",
    ])


# ------------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.strip(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", default=os.path.join(REPO, "train_gpt2_ls"), help="the trainer binary")
    ap.add_argument("--rows", default=None, help=f"comma-separated rows of {', '.join(ROWS)} (default: "
                    f"{', '.join(DEFAULT_ROWS)}; --smoke: {', '.join(SMOKE_ROWS)})")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per side (default 10; --smoke 2)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3; --smoke 1)")
    ap.add_argument("--json", default=None, help="also write every number to this JSON file")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one, removed)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per subprocess")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, 2 steps: checks that everything runs")
    ap.add_argument("--worker", choices=("torch", "gemm"), help=argparse.SUPPRESS)
    ap.add_argument("--worker-row", help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-gemm-n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def main(argv):
    args = parse_args(argv)
    if args.worker:
        if args.worker == "torch":
            res = worker_torch(json.loads(args.worker_row), args.steps, args.warmup)
        else:
            res = worker_gemm(args.worker_threads, args.worker_gemm_n, GEMM_REPEATS)
        write_json(args.worker_out, res)
        return 0

    table = SMOKE_ROWS if args.smoke else ROWS
    if args.rows is not None:
        names = [n.strip() for n in args.rows.split(",") if n.strip()]
    else:
        names = list(table) if args.smoke else DEFAULT_ROWS
    unknown = [n for n in names if n not in table]
    if unknown or not names:
        fail(f"--rows: unknown row {', '.join(unknown) or '(none given)'}; the rows are {', '.join(table)}")
    steps = args.steps if args.steps is not None else (2 if args.smoke else 10)
    warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    if steps < 1 or warmup < 1:
        fail(f"--steps {steps} and --warmup {warmup} must be >= 1 (the first step compiles and warms up)")
    trainer = os.path.abspath(args.trainer)
    if not (os.path.isfile(trainer) and os.access(trainer, os.X_OK)):
        fail(f"--trainer {args.trainer} is not an executable; build it (make cpu) or pass --trainer PATH")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        fail(f"--json {args.json}: its directory does not exist; create it or pick another path")

    work = args.work or tempfile.mkdtemp(prefix="cpu_vs_torch_")
    os.makedirs(work, exist_ok=True)
    gemm_n = 256 if args.smoke else GEMM_N
    meta = {"commit": git_commit(), "trainer": trainer, "torch": torch.__version__, "cpu": cpu_description(),
            "niceness": os.nice(0), "wait_policy": wait_policy(), "steps": steps, "warmup": warmup,
            "gemm_n": gemm_n, "gemm_repeats": GEMM_REPEATS, "smoke": args.smoke, "loadavg_before": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    try:
        meta["gemm"] = []
        for t in sorted({table[n]["threads"] for n in names}):
            print(f"GEMM {gemm_n}^3 on {t} thread(s)", file=sys.stderr, flush=True)
            meta["gemm"].append({"threads": t, **run_worker(["--worker", "gemm", "--worker-threads", str(t),
                                                             "--worker-gemm-n", str(gemm_n)], t, work, f"gemm{t}",
                                                            args.timeout)})
        results = []
        for n in names:
            row = table[n]
            print(f"[{n}] {row_label(row)}: train_gpt2_ls", file=sys.stderr, flush=True)
            la0 = os.getloadavg()
            ours = run_ours(trainer, n, row, steps, warmup, work, args.timeout)
            print(f"  ours: {ours['status']}" + (f", median {ours['ms']['median']:.1f} ms" if ours.get("ms") else ""),
                  file=sys.stderr, flush=True)
            tor = run_worker(["--worker", "torch", "--worker-row", json.dumps(row), "--steps", str(steps),
                              "--warmup", str(warmup)], row["threads"], work, f"torch_{n}", args.timeout)
            tor.setdefault("sides", {})
            results.append({"name": n, "row": row, "label": row_label(row), "ours": ours, "torch": tor,
                            "loadavg_before": la0, "loadavg_after": os.getloadavg()})
        meta["loadavg_after"] = os.getloadavg()
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    for r in results:
        ours_ms, comp = median_or_none(r["ours"]), median_or_none(r["torch"]["sides"].get("compile"))
        r["ratio_compile_over_ours"] = comp / ours_ms if ours_ms and comp else None
    if args.json:
        write_json(args.json, {"meta": meta, "rows": results})
    print(conditions_text(meta))
    print()
    print(format_table(results))
    failed = any(r["ours"].get("status") != "ok" or any(r["torch"]["sides"].get(s, {}).get("status") != "ok"
                                                        for s in TORCH_SIDES) for r in results)
    failed = failed or any(not g.get("gflops_median") for g in meta["gemm"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
