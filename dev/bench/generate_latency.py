"""
KV-cached inference latency (docs/generation.md): prefill time for a batch of prompts at each prompt length T
and per-token decode time at growing context, LS-attention (G = 1, P = 50 and P = 100) against MHSA of the
same size, ours (generate_gpt2_ls --device cuda --bench) side by side with PyTorch in the same run.

  python3 dev/bench/generate_latency.py --out DIR [--binary ./generate_gpt2_ls] [--batch 4]
        [--prompts 2048,4096,8192,16384] [--contexts 1024,2048,4096,8192,16384] [--steps 32] [--repeats 5]
        [--skip-ours] [--ours-sides ours,graph,fused] [--skip-torch] [--max-seq-len 16384] [--vocab 50257]
  /usr/bin/python3 dev/bench/generate_latency.py --self-test     (CPU, torch >= 1.13: the torch decoder)

Model: the paper's small model (L 6, NH 6, C 192, hd 32), max_seq_len 16384, GPT-2 vocabulary
(V 50257), random GPT-2-style weights (written once per variant as a checkpoint under DIR/work, the
same weights for both sides). Variants: mhsa (G = NH), ls-p50 (G = 1, P = 50), ls-p100 (G = 1, P = 100).
--max-seq-len and --vocab shrink the models' position and token embeddings for a run whose lengths are
short (the emulated run of scripts/gpu_check.sh: a 16M-parameter model took most of its ~18 s there);
with the torch side, max_seq_len must hold its decoder check (torch_check_length), else it is refused.

Ours: generate_gpt2_ls --bench (one JSON object): prefill at each T = kv_begin + the ordinary forward of
(B, T) + filling the cache, the logits of each prompt's last position left on the device, median of
--repeats after a warm-up of that T; decode at
context c = a fresh cache, c - steps tokens prefilled, then `steps` single-token steps timed each to
the (B, Vp) fp32 logits on the host (what sampling needs); median ms per token. Three sides of ours:
"ours" issues each decode step's kernels one by one without programmatic dependent launch
(--cuda-graph 0 --pdl 0), "graph" is the generator's defaults: each step one CUDA graph with
programmatic dependent launch where the device has it (--cuda-graph 1 --pdl auto; the first step of a
context runs eagerly and the second captures the graph: two of the `steps` samples, which the median
plays down), "fused" is graph with the decode steps' own fused linear kernels (--fused-decode 1:
docs/generation.md, "Fused decode kernels"). With --profile every side runs with --pdl 0 (the generator's
profile needs it off), timings included; each side's record keeps the cuda_graph, pdl and fused_decode that
ran.
PyTorch (2.x on the GPU, bf16 weights and activations, eager except the attention kernels):
  prefill: MHSA = SDPA restricted to its flash back-end; LS = flex_attention (torch.compile'd) with
    the per-head block mask (local heads skip key blocks outside their window); the logits of each
    prompt's last position, as ours (KvLogits::Last) and as generation needs them. The k/v of every
    layer written into the cache.
  decode: the cache as ours (global heads every position, local heads a ring of their last P keys);
    per layer one SDPA call for the local heads over their ring (softmax attention does not care
    about key order: positions enter through the position embedding only) and one for the global
    heads over positions 0..t; logits of the step copied to the host as fp32.
  Before timing, the torch decoder is CHECKED against the twin's full forward (same weights, a short
  sequence with the ring wrapped): rel. error of every decode step's logits <= 2e-2 (bf16).
Memory: KV-cache bytes (exact, both sides); peak device memory: ours = device memory in use
(cudaMemGetInfo) minus the baseline before the model was built; torch = max_memory_allocated.
Output: a table (last) on stdout and DIR/generate_latency.json (commit, device, every number).
The pure helpers (config, weights, cache size, parsing, table) need no torch:
test/test_generate_latency_helpers.py.
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

# Its --self-test checks the PyTorch decoder against the full forward, so it needs torch
# (test/test_attention_bench.py reads this line to pick a python that has it).
SELF_TEST_NEEDS_TORCH = True

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "dev", "reference"))
from train_vs_torch import device_name, git_commit, write_json  # noqa: E402
from model_config import Config, param_shapes  # noqa: E402
import checkpoint  # noqa: E402

BASE = dict(num_layers=6, num_heads=6, channels=192, max_seq_len=16384, vocab_size=50257)
VARIANTS = {  # name -> (global heads, window); MHSA: every head global
    "mhsa": (None, 16384),
    "ls-p50": (1, 50),
    "ls-p100": (1, 100),
}
DEFAULT_CONTEXTS = [1024, 2048, 4096, 8192, 16384]
# prompt lengths of the prefill timings: issue 52's target is LS >= 30% below MHSA at 8K and 16K
DEFAULT_PROMPTS = [2048, 4096, 8192, 16384]
DEFAULT_BATCH = 4
PREFILL_GOAL = (0.30, (8192, 16384))  # (least reduction, at these prompt lengths)


# ---------------------------------------------------------------------------------------- helpers
def variant_config(name, base=None):
    """The model Config of a variant (reference/model_config.Config)."""
    b = dict(BASE if base is None else base)
    G, P = VARIANTS[name]
    G = b["num_heads"] if G is None else G
    Vp = ((b["vocab_size"] + 127) // 128) * 128
    return Config(max_seq_len=b["max_seq_len"], vocab_size=b["vocab_size"], padded_vocab_size=Vp,
                  num_layers=b["num_layers"], num_heads=b["num_heads"], channels=b["channels"],
                  global_heads=G, window=min(P, b["max_seq_len"]))


def random_params(cfg, seed=0):
    """Flat fp32 parameters in llmc/core/params.h order: GPT-2-style init (normal 0.02, residual
    projections / sqrt(2L), LayerNorm gains 1, biases 0). Weights only need to be realistic in
    scale: the benchmark measures time, not text."""
    rng = np.random.default_rng(seed)
    parts = []
    for name, shape in param_shapes(cfg):
        n = math.prod(shape)
        if n == 0:
            continue
        if name.endswith("w") and name.startswith(("ln", "qnorm", "knorm")):
            parts.append(np.ones(n, np.float32))
        elif name.endswith("b") and name != "wte":
            parts.append(np.zeros(n, np.float32))
        else:
            std = 0.02 / math.sqrt(2 * cfg.num_layers) if name in ("attprojw", "fcprojw") else 0.02
            parts.append((rng.standard_normal(n) * std).astype(np.float32))
    return np.concatenate(parts)


# The torch decoder's check before timing: a prompt of torch_check_prompt(cfg) positions, then
# TORCH_CHECK_STEPS decode steps (the local heads' ring wrapped); the model's max_seq_len must hold both.
TORCH_CHECK_STEPS = 24


def torch_check_prompt(cfg):
    return 67 if cfg.global_heads == cfg.num_heads else 2 * cfg.window + 3


def torch_check_length(cfg):
    return torch_check_prompt(cfg) + TORCH_CHECK_STEPS


def kv_cache_bytes(cfg, B, max_len, elem_bytes=2):
    """docs/generation.md: 2 * L * B * hd * (G * max_len + (NH - G) * min(P, max_len)) * elem."""
    hd = cfg.channels // cfg.num_heads
    G = cfg.global_heads
    return 2 * cfg.num_layers * B * hd * (G * max_len + (cfg.num_heads - G) * min(cfg.window, max_len)) * elem_bytes


def ours_command(binary, ckpt, batch, prompts, contexts, steps, repeats, side=("0", "0", "0"), profile=False):
    """prompts: the prefill lengths, timed in this order. side: (--cuda-graph, --pdl, --fused-decode), OURS_SIDES'
    values. profile: --bench-profile, the per-kernel profile of a prefill (of the last prompt length) and of
    decode steps after the timings; it runs with --pdl 0, which the generator's profile needs."""
    graph, pdl, fused = side
    return [binary, "-e", ckpt, "--device", "cuda", "--bench", "--bench-batch", str(batch), "--bench-prompt",
            ",".join(map(str, prompts)), "--bench-contexts", ",".join(map(str, contexts)), "--bench-steps", str(steps),
            "--bench-repeats", str(repeats), "--cuda-graph", str(graph), "--pdl", "0" if profile else str(pdl),
            "--fused-decode", str(fused)] + (["--bench-profile"] if profile else [])


# our sides: name -> generate_gpt2_ls (--cuda-graph, --pdl, --fused-decode): each decode step issued kernel by
# kernel without programmatic launch; the generator's defaults on a GPU (one CUDA graph, programmatic launch
# where the device has it); those with the fused decode kernels
OURS_SIDES = {"ours": ("0", "0", "0"), "graph": ("1", "auto", "0"), "fused": ("1", "auto", "1")}
FUSED_MAX_BATCH = 8  # llmc/cuda/decode_linear.cuh kDecodeMaxRows: the generator refuses more with --fused-decode 1


def parse_ours(stdout):
    """The JSON object generate_gpt2_ls --bench prints, normalized to this script's side record."""
    j = json.loads(stdout)
    base = j.get("device_memory_baseline_bytes", 0)
    side = {
        "device": j.get("device"), "precision": j.get("precision"),
        "cuda_graph": j.get("cuda_graph"), "pdl": j.get("pdl"),  # what ran (the generator resolves auto)
        "fused_decode": j.get("fused_decode"),
        "prefill": {int(p["T"]): {"ms": p["ms_median"], "peak_bytes": p["device_memory_bytes"] - base}
                    for p in j["prefill"]},
        "decode": {},
    }
    if "profile" in j:  # --bench-profile: the per-kernel tables of a prefill and of decode steps, as JSON
        side["profile"] = j["profile"]
    for d in j["decode"]:
        side["decode"][int(d["context"])] = {"ms_per_token": d["ms_per_token_median"],
                                             "kv_cache_bytes": d["kv_cache_bytes"],
                                             "peak_bytes": d["device_memory_bytes"] - base}
    return side


def reduction(x, ref):
    """1 - x/ref (0.4 = 40% less than ref), None when either is missing."""
    if x is None or ref is None or ref <= 0:
        return None
    return 1.0 - x / ref


def _f(x, spec, none="-"):
    return none if x is None else format(x, spec)


def format_table(results, prompts, contexts):
    """results: {variant: {"ours": side or None, "graph": side or None, "fused": side or None, "torch": side or
    None}} -> text table ("graph": ours with each decode step as one CUDA graph; "fused": graph with the fused
    decode kernels)."""
    head = (f"{'variant':<9} {'side':<6} " + " ".join(f"{'pre@' + str(t):>9}" for t in prompts) + " "
            + " ".join(f"{'dec@' + str(c):>9}" for c in contexts) + f" {'KV MiB@max':>10} {'peak MiB':>9}")
    lines = [head, "-" * len(head)]
    cmax = max(contexts)
    for v, sides in results.items():
        for name in ("ours", "graph", "fused", "torch"):
            s = sides.get(name)
            if not s:
                continue
            pre, dec = s.get("prefill", {}), s.get("decode", {})
            pre_cells = " ".join(f"{_f(pre.get(t, {}).get('ms'), '.3f'):>9}" for t in prompts)
            dec_cells = " ".join(f"{_f(dec.get(c, {}).get('ms_per_token'), '.3f'):>9}" for c in contexts)
            kv = dec.get(cmax, {}).get("kv_cache_bytes")
            peak = dec.get(cmax, {}).get("peak_bytes")
            lines.append(f"{v:<9} {name:<6} {pre_cells} {dec_cells} "
                         f"{_f(None if kv is None else kv / 2**20, '.2f'):>10} "
                         f"{_f(None if peak is None else peak / 2**20, '.0f'):>9}")
    lines.append("pre@T: ms per prefill of the batch's prompts of length T; dec@c: ms per decoded token (batch) at "
                 "context c; KV at the largest context; peak: device memory; ours: --cuda-graph 0 --pdl 0; graph: "
                 "each decode step one CUDA graph with programmatic launch where the device has it (--cuda-graph 1 "
                 "--pdl auto; --pdl 0 with --profile); fused: graph with --fused-decode 1")
    least, at = PREFILL_GOAL
    for side in ("ours", "graph", "fused", "torch"):
        by = {v: s.get(side) for v, s in results.items()}
        if not by.get("mhsa"):
            continue
        for v in ("ls-p50", "ls-p100"):
            if not by.get(v):
                continue
            cells = []
            for t in prompts:
                r = reduction(by[v]["prefill"].get(t, {}).get("ms"), by["mhsa"]["prefill"].get(t, {}).get("ms"))
                cells.append(f"@{t} {_f(None if r is None else 100 * r, '.1f')}%")
            d = reduction(by[v]["decode"].get(cmax, {}).get("ms_per_token"),
                          by["mhsa"]["decode"].get(cmax, {}).get("ms_per_token"))
            goal = (f" (goal: prefill >= {100 * least:.0f}% lower at {' and '.join(map(str, at))})"
                    if side != "torch" else "")
            lines.append(f"{side} {v} vs {side} mhsa: prefill lower by " + ", ".join(cells)
                         + f"; decode@{cmax} {_f(None if d is None else 100 * d, '.1f')}% lower" + goal)
    # one of our sides against the side it differs from by one setting, at the least and largest context
    pairs = (("graph", "ours", "decode steps as CUDA graphs vs issued one by one"),
             ("fused", "graph", "fused decode kernels vs cuBLASLt (both as graphs)"))
    for v, sides in results.items():
        for side, base, words in pairs:
            if not (sides.get(side) and sides.get(base)):
                continue
            cells = []
            for c in (min(contexts), cmax):
                d = reduction(sides[side]["decode"].get(c, {}).get("ms_per_token"),
                              sides[base]["decode"].get(c, {}).get("ms_per_token"))
                cells.append(f"decode@{c} {_f(None if d is None else 100 * d, '.1f')}% lower")
            lines.append(f"ours {v}, {words}: " + ", ".join(cells))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- torch side
def _attend_plain(q, k, v):
    """softmax(q k^T / sqrt(hd)) v with no mask; q (B, H, 1, hd), k/v (B, H, n, hd)."""
    import torch.nn.functional as F
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v)
    import torch
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, dim=-1), v)


class TorchDecoder:
    """KV-cached inference for TwinGPT's parameters (dev/bench/torch_fast_model.py), the cache laid
    out as ours: global heads (L, B, G, max_len, hd), local heads a ring (L, B, NH-G, R, hd), R =
    min(P, max_len), slot = position % R. prefill_attend(q, k, v) does the full-sequence attention
    (flex / SDPA flash / dense): the caller picks the fastest correct route."""

    def __init__(self, model, B, max_len, prefill_attend):
        import torch
        cfg = model.cfg
        if cfg.attn_softcap > 0:
            raise ValueError("TorchDecoder: soft-capping is not supported by SDPA; benchmark without it")
        p0 = next(iter(model.params.values()))
        self.m, self.cfg, self.B, self.max_len = model, cfg, B, max_len
        self.hd = cfg.channels // cfg.num_heads
        self.nl = cfg.num_heads - cfg.global_heads
        self.R = min(cfg.window, max_len)
        L, G, hd = cfg.num_layers, cfg.global_heads, self.hd
        kw = dict(device=p0.device, dtype=p0.dtype)
        self.kg = torch.empty(L, B, G, max_len, hd, **kw)
        self.vg = torch.empty(L, B, G, max_len, hd, **kw)
        self.kl = torch.empty(L, B, self.nl, self.R, hd, **kw)
        self.vl = torch.empty(L, B, self.nl, self.R, hd, **kw)
        self.pos = 0
        self.prefill_attend = prefill_attend

    def cache_bytes(self):
        return sum(t.numel() * t.element_size() for t in (self.kg, self.vg, self.kl, self.vl))

    def _qkv(self, x, l):
        import torch.nn.functional as F
        from torch_fast_model import LN_EPS
        cfg, p, C, NH, hd = self.cfg, self.m.params, self.cfg.channels, self.cfg.num_heads, self.hd
        B, T, _ = x.shape
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], LN_EPS)
        q, k, v = F.linear(h, p["qkvw"][l], p["qkvb"][l]).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hd)
        if cfg.qk_norm:
            q = F.layer_norm(q, (hd,), p["qnormw"][l], p["qnormb"][l], LN_EPS)
            k = F.layer_norm(k, (hd,), p["knormw"][l], p["knormb"][l], LN_EPS)
        return q, k, v

    def _rest(self, x, y, l):
        """x + attproj(y), then the MLP branch; y (B, T, C)."""
        import torch.nn.functional as F
        from torch_fast_model import LN_EPS
        p, C = self.m.params, self.cfg.channels
        x = x + F.linear(y, p["attprojw"][l], p["attprojb"][l])
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], LN_EPS)
        h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        return x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])

    def _logits(self, x):
        import torch.nn.functional as F
        from torch_fast_model import LN_EPS
        p = self.m.params
        x = F.layer_norm(x, (self.cfg.channels,), p["lnfw"], p["lnfb"], LN_EPS)
        return F.linear(x, p["wte"] if self.cfg.tied_embeddings else p["lm_head"])

    def prefill(self, idx, last_only=False):
        """idx (B, T) into an empty cache -> logits (B, T, Vp) on the device; last_only: (B, 1, Vp), those of
        each prompt's last position (what generation needs, as ours computes them)."""
        import torch
        B, T = idx.shape
        assert self.pos == 0 and T <= self.max_len
        p, nl = self.m.params, self.nl
        x = p["wte"][idx] + p["wpe"][:T]
        keep = torch.arange(max(0, T - self.R), T, device=idx.device)  # positions a local head keeps
        for l in range(self.cfg.num_layers):
            q, k, v = self._qkv(x, l)
            self.kg[l, :, :, :T] = k[:, nl:]
            self.vg[l, :, :, :T] = v[:, nl:]
            if nl > 0:
                self.kl[l][:, :, keep % self.R] = k[:, :nl, keep]
                self.vl[l][:, :, keep % self.R] = v[:, :nl, keep]
            y = self.prefill_attend(q, k, v).transpose(1, 2).reshape(B, T, self.cfg.channels)
            x = self._rest(x, y, l)
        self.pos = T
        return self._logits(x[:, -1:] if last_only else x)

    def decode(self, tok):
        """tok (B,) at position self.pos -> logits (B, Vp) on the device."""
        import torch
        t, nl, p = self.pos, self.nl, self.m.params
        assert t < self.max_len
        x = (p["wte"][tok] + p["wpe"][t]).unsqueeze(1)  # (B, 1, C)
        slot, n_ring = t % self.R, min(t + 1, self.R)  # the ring fills slots 0.. in order first
        for l in range(self.cfg.num_layers):
            q, k, v = self._qkv(x, l)  # (B, NH, 1, hd)
            self.kg[l, :, :, t] = k[:, nl:, 0]
            self.vg[l, :, :, t] = v[:, nl:, 0]
            ys = []
            if nl > 0:
                self.kl[l, :, :, slot] = k[:, :nl, 0]
                self.vl[l, :, :, slot] = v[:, :nl, 0]
                ys.append(_attend_plain(q[:, :nl], self.kl[l, :, :, :n_ring], self.vl[l, :, :, :n_ring]))
            if nl < self.cfg.num_heads:
                ys.append(_attend_plain(q[:, nl:], self.kg[l, :, :, :t + 1], self.vg[l, :, :, :t + 1]))
            y = torch.cat(ys, dim=1) if len(ys) > 1 else ys[0]  # heads in head order: local, then global
            x = self._rest(x, y.transpose(1, 2).reshape(x.shape[0], 1, self.cfg.channels), l)
        self.pos = t + 1
        return self._logits(x)[:, 0]


def rel_err(a, b):
    a, b = a.double(), b.double()
    if not (bool(a.isfinite().all()) and bool(b.isfinite().all())):
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_decoder(model, make_decoder, B, T0, steps, tol, gen):
    """Worst rel. error of the cached decoder's logits (prefill rows and every decode step) against
    the twin's full forward over the same tokens. Returns (worst error, number of comparisons)."""
    import torch
    V = model.cfg.vocab_size
    idx = torch.randint(0, V, (B, T0 + steps), generator=gen).to(next(iter(model.params.values())).device)
    full = model(idx[:, :T0])[0][..., :V]
    # the timed prefill's logits (the last position only) on a decoder of their own
    worst = rel_err(make_decoder(B, T0 + steps).prefill(idx[:, :T0], last_only=True)[:, 0, :V], full[:, -1])
    dec = make_decoder(B, T0 + steps)
    worst = max(worst, rel_err(dec.prefill(idx[:, :T0])[..., :V], full))
    for s in range(steps):
        t = T0 + s
        got = dec.decode(idx[:, t])
        want = model(idx[:, :t + 1])[0][:, t]
        worst = max(worst, rel_err(got[:, :V], want[:, :V]))
    return worst, steps + 2


def torch_side(cfg, flat, args):
    """Checks, then times the torch decoder for one variant on the GPU. Returns the side record."""
    import torch
    import torch.nn.functional as F
    from torch_fast_model import TwinGPT
    from gpt2_ls import split_flat
    dev = "cuda"
    all_global = cfg.global_heads == cfg.num_heads
    model = TwinGPT(cfg, attn="sdpa" if all_global else "flex", device=dev, dtype=torch.bfloat16)
    model.load_params({k: v.to(torch.bfloat16) for k, v in split_flat(cfg, torch.from_numpy(flat)).items()})
    model.eval()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if all_global:
        def attend(q, k, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        from torch.nn.attention.flex_attention import flex_attention
        torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)  # one graph per T
        flex = torch.compile(flex_attention, dynamic=False)
        scale = 1.0 / math.sqrt(cfg.channels // cfg.num_heads)

        def attend(q, k, v):
            return flex(q, k, v, block_mask=model.prepare(q.shape[2], dev)[1], scale=scale)
    # Decode (checked and timed): SDPA's flash and memory-efficient back-ends only. Every decode step has a
    # new key length, and a back-end that plans per shape (cuDNN's) would pay its planning at every step
    # (docs/generation.md, latency benchmark).
    decode_backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    side = {"route": ("sdpa-flash prefill" if all_global else "flex_attention (compiled) prefill")
            + "; decode: sdpa (flash or mem-efficient) over the local heads' ring and the global heads' cache",
            "decode": {}}
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        # the check: a short sequence, the local heads' ring wrapped (T0 + steps > P); without local heads
        # there is no ring (and 2 * window would pass max_seq_len); main() refuses a max_seq_len below it
        T0, steps = torch_check_prompt(cfg), TORCH_CHECK_STEPS
        with sdpa_kernel(decode_backends):
            worst, n = check_decoder(model, lambda B, L: TorchDecoder(model, B, L, attend), 2, T0, steps, 2e-2, gen)
        side["check"] = {"worst_rel_err": worst, "comparisons": n, "tol": 2e-2, "ok": worst <= 2e-2}
        B, V = args.batch, cfg.vocab_size
        side["prefill"] = {}
        for T in args.prompts:  # as ours: each length's own warm-up (for LS, flex_attention compiles per T)
            idx = torch.randint(0, V, (B, T), generator=gen).to(dev)
            ms, dec = [], None
            for r in range(args.repeats + 1):
                dec = None
                dec = TorchDecoder(model, B, T, attend)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                dec.prefill(idx, last_only=True)
                torch.cuda.synchronize()
                if r > 0:
                    ms.append(1000 * (time.perf_counter() - t0))
            side["prefill"][T] = {"ms": statistics.median(ms), "peak_bytes": torch.cuda.max_memory_allocated()}
            del dec
            torch.cuda.empty_cache()
        for ci, c in enumerate([args.contexts[0]] + list(args.contexts)):  # first: warm-up
            dec = None
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            dec = TorchDecoder(model, B, c, attend)
            dec.prefill(torch.randint(0, V, (B, c - args.steps), generator=gen).to(dev), last_only=True)
            ms = []
            for s in range(args.steps):
                tok = torch.randint(0, V, (B,), generator=gen).to(dev)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with sdpa_kernel(decode_backends):
                    dec.decode(tok).float().cpu()
                ms.append(1000 * (time.perf_counter() - t0))
            if ci > 0:
                side["decode"][c] = {"ms_per_token": statistics.median(ms), "ms_per_token_max": max(ms),
                                     "kv_cache_bytes": dec.cache_bytes(), "peak_bytes": torch.cuda.max_memory_allocated()}
            del dec
    side["device"] = torch.cuda.get_device_name()
    side["torch"] = torch.__version__
    return side


# ---------------------------------------------------------------------------------------- self-test
def self_test():
    """CPU, float64: the torch decoder (ring + global cache, SDPA or plain attention) against the
    twin's dense full forward, for LS (ring wrapped), all-local, MHSA and QK-norm; and that a wrong
    ring (slots shifted) is caught. Torch >= 1.13."""
    import torch
    from torch_fast_model import TwinGPT
    from gpt2_ls import init_params
    fails = 0
    for name, kw in [("ls G1 P5", dict(global_heads=1, window=5)), ("all-local P4", dict(global_heads=0, window=4)),
                     ("mhsa", dict(global_heads=4, window=64)), ("qk-norm G2 P3", dict(global_heads=2, window=3,
                                                                                        qk_norm=True))]:
        cfg = Config(max_seq_len=64, vocab_size=97, padded_vocab_size=128, num_layers=2, num_heads=4, channels=32,
                     **kw)
        gen = torch.Generator().manual_seed(1)
        model = TwinGPT(cfg, attn="dense", dtype=torch.float64)
        model.load_params(init_params(cfg, gen, dtype=torch.float64))

        def dense(q, k, v, model=model):
            return model._attend(q, k, v, "dense", None)
        worst, n = check_decoder(model, lambda B, L: TorchDecoder(model, B, L, dense), 2, 7, 12, 1e-10, gen)
        ok = worst < 1e-10
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} torch decoder vs full forward, {name}: worst rel err {worst:.2e} ({n} steps)")
    # a broken ring (keys written one slot off) must be caught
    cfg = Config(max_seq_len=64, vocab_size=97, padded_vocab_size=128, num_layers=1, num_heads=4, channels=32,
                 global_heads=1, window=5)
    gen = torch.Generator().manual_seed(2)
    model = TwinGPT(cfg, attn="dense", dtype=torch.float64)
    model.load_params(init_params(cfg, gen, dtype=torch.float64))

    class Broken(TorchDecoder):
        def decode(self, tok):
            self.pos += 1  # skips a position: wrong slot and wrong position embedding
            return super().decode(tok)
    worst, _ = check_decoder(model, lambda B, L: Broken(model, B, 2 * L, lambda q, k, v: model._attend(q, k, v, "dense", None)),
                             1, 7, 6, 1e-10, gen)
    ok = worst > 1e-3
    fails += not ok
    print(f"{'ok  ' if ok else 'FAIL'} a broken decoder is caught (rel err {worst:.2e})")
    return 1 if fails else 0


# ---------------------------------------------------------------------------------------- main
def lengths(ap, flag, text, max_len):
    """'2048,4096' -> [2048, 4096]: positive lengths up to the models' max_seq_len, else ap.error (one line)."""
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        out = []
    if not out or not all(0 < x <= max_len for x in out):
        ap.error(f"{flag} '{text}': give comma-separated lengths in 1..{max_len} (the models' "
                 "max_seq_len), e.g. 2048,4096")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (JSON + work files)")
    ap.add_argument("--binary", default=os.path.join(REPO, "generate_gpt2_ls"))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    ap.add_argument("--prompts", default=",".join(map(str, DEFAULT_PROMPTS)),
                    help="prompt lengths of the prefill timings, comma-separated")
    ap.add_argument("--contexts", default=",".join(map(str, DEFAULT_CONTEXTS)))
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-ours", action="store_true")
    ap.add_argument("--ours-sides", default=",".join(OURS_SIDES),
                    help="our sides to time: ours (decode steps issued one by one, --pdl 0), graph (each one CUDA "
                         "graph, --pdl auto: the generator's defaults), fused (graph with --fused-decode 1)")
    ap.add_argument("--profile", action="store_true",
                    help="also the per-kernel profile of a prefill and of decode steps on each of our sides "
                         "(--bench-profile, after the timings): in the JSON, and its tables in work/; every side "
                         "then runs with --pdl 0, its timings too (the generator's profile needs it off)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--max-seq-len", type=int, default=BASE["max_seq_len"],
                    help="the models' max_seq_len (rows of the position embedding)")
    ap.add_argument("--vocab", type=int, default=BASE["vocab_size"], help="the models' vocabulary")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.out:
        ap.error("--out DIR is required")
    if args.max_seq_len < 1 or args.vocab < 1:
        ap.error("--max-seq-len and --vocab must be >= 1")
    base = dict(BASE, max_seq_len=args.max_seq_len, vocab_size=args.vocab)
    args.contexts = lengths(ap, "--contexts", args.contexts, base["max_seq_len"])
    args.prompts = lengths(ap, "--prompts", args.prompts, base["max_seq_len"])
    if args.prompts != sorted(set(args.prompts)):
        ap.error(f"--prompts {','.join(map(str, args.prompts))}: give the lengths ascending, each once (a prefill "
                 "keeps the buffers of a longer one before it, so its memory reading would be the longer one's)")
    if args.steps < 1 or args.repeats < 1 or args.batch < 1:
        ap.error("--steps, --repeats and --batch must be >= 1")
    if min(args.contexts) <= args.steps:
        ap.error(f"--contexts: each context must exceed --steps {args.steps} (a decode context holds context - steps "
                 "prefilled positions)")
    variants = args.variants.split(",")
    ours_sides = [s for s in args.ours_sides.split(",") if s]
    for s in ours_sides:
        if s not in OURS_SIDES:
            ap.error(f"unknown side '{s}' in --ours-sides (have {', '.join(OURS_SIDES)})")
    if "fused" in ours_sides and args.batch > FUSED_MAX_BATCH:
        if any(a.startswith("--ours-sides") for a in (sys.argv[1:] if argv is None else argv)):
            ap.error(f"--ours-sides fused: the fused decode kernels take up to {FUSED_MAX_BATCH} sequences and "
                     f"--batch is {args.batch}; give --batch {FUSED_MAX_BATCH} or less, or drop the side fused")
        ours_sides.remove("fused")
        print(f"note: side fused left out: --batch {args.batch} is more than the fused decode kernels take "
              f"({FUSED_MAX_BATCH})", file=sys.stderr)
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant '{v}' (have {', '.join(VARIANTS)})")
    if not args.skip_torch:
        for v in variants:
            need = torch_check_length(variant_config(v, base))
            if need > base["max_seq_len"]:
                ap.error(f"--max-seq-len {base['max_seq_len']}: the torch side's check of {v} runs {need} positions; "
                         f"give --max-seq-len {need} or more, or --skip-torch")
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    results, failed = {}, False
    for v in variants:
        cfg = variant_config(v, base)
        flat = random_params(cfg, seed=1)
        ckpt = os.path.join(work, f"{v}.bin")
        checkpoint.write_model(ckpt, cfg, flat)
        results[v] = {"config": vars(cfg) if hasattr(cfg, "__dict__") else str(cfg),
                      "kv_cache_bytes_formula": {c: kv_cache_bytes(cfg, args.batch, c) for c in args.contexts}}
        for side in [] if args.skip_ours else ours_sides:
            cmd = ours_command(args.binary, ckpt, args.batch, args.prompts, args.contexts, args.steps, args.repeats,
                               OURS_SIDES[side], args.profile)
            print(f"{side}:", " ".join(cmd), flush=True)
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(p.stderr, file=sys.stderr)
                results[v][side] = None
                results[v][f"{side}_error"] = p.stderr.strip().splitlines()[-1:] if p.stderr else ["exit %d" % p.returncode]
                failed = True
            else:
                results[v][side] = parse_ours(p.stdout)
                if args.profile:
                    with open(os.path.join(work, f"{v}-{side}-profile.txt"), "w") as f:
                        f.write(p.stderr)
        if not args.skip_torch:
            print(f"torch: {v}", flush=True)
            try:
                results[v]["torch"] = torch_side(cfg, flat, args)
                failed |= not results[v]["torch"]["check"]["ok"]
            except Exception as e:  # reported, not hidden: the table shows '-' and the JSON the error
                results[v]["torch"] = None
                results[v]["torch_error"] = f"{type(e).__name__}: {e}"
                print(f"torch {v} failed: {e}", file=sys.stderr)
                failed = True
    payload = {"commit": git_commit(), "device": device_name(), "host": platform.node(),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "batch": args.batch, "prompts": args.prompts, "contexts": args.contexts, "steps": args.steps,
               "repeats": args.repeats, "results": results}
    write_json(os.path.join(args.out, "generate_latency.json"), payload)
    print(format_table({v: {k: r.get(k) for k in ("ours", "graph", "torch")} for v, r in results.items()},
                       args.prompts, args.contexts))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
