#!/usr/bin/env python3
"""Roofline model of one training step (forward + backward + AdamW) on an H100 SXM. MODELED, not
measured on a GPU: every figure comes from counting, none from a run.

    python3 dev/bench/roofline.py                          # paper model and GPT-2 124M, markdown
    python3 dev/bench/roofline.py --model paper --batch 8 --seq 1024
    python3 dev/bench/roofline.py --sass sass.json         # + the column modeled from SASS figures
    python3 dev/bench/roofline.py --out out/bench/roofline    # + DIR/roofline.json (scripts/gpu_check.sh)
    python3 dev/bench/roofline.py --dq-designs             # + the backward's dQ in two designs
    python3 dev/bench/roofline.py --dq-designs --sass FILE # + both backward designs from SASS figures

The step is the CUDA backend's op list (llmc/cuda/gpt2_cuda.cuh: forward, backward, grad_norm,
adamw_update), one micro-batch of B x T tokens (N = B T). Per op:
  FLOPs   the op's arithmetic: 2 per multiply-add of its GEMMs; for element-wise and row ops a
          nominal count per element (they are memory-bound by orders of magnitude either way).
          Attention counts only VISIBLE (query, key) pairs: a global head's causal triangle
          T (T + 1) / 2, a local head's sum_i min(i + 1, P) (window P). Forward 4 hd per pair
          (S = Q K^T and O = P V); backward 10 hd per pair (S recomputed as FlashAttention-2 does,
          then dV, dP, dQ, dK: 2.5x the forward; storing P instead is not an option at T = 2048).
  bytes   compulsory HBM traffic: every input read once and every output written once, in the
          dtypes the BF16 build stores (activations and the weights' working copy bf16, LayerNorm
          statistics, attention lse and parameter gradients fp32); nothing re-read, nothing spilled.
          Parameter gradients are written once (fp32; the first micro-batch needs no zeroed buffer
          to add into); a matmul's bias gradient is taken as fused into its dW GEMM (no extra read);
          an activation gradient that an op adds into (the residual stream's) is read and written.
          The two GEMMs of a matmul backward (dinp, dW) each read the output gradient.
  time    max(FLOPs / peak, bytes / bandwidth) at 989 TFLOP/s dense bf16 and 3.35 TB/s (H100 SXM);
          "bound" names the larger. The step's roofline is the SUM over ops (ops run one after
          another on one stream; an op cannot overlap the next), which is more than
          max(total FLOPs / peak, total bytes / bandwidth).
The model ignores launch gaps, the host, tail effects and the kernels' real efficiency, so a real
step is slower; it says how fast the op list could be, and which ops are bound by what.

Today's passes (a second time column): the same ops with the traffic today's kernels add beyond
the compulsory - the bias gradients' own pass over dout (except fc's, summed in the GELU
backward's pass), dW added into with beta = 1 (read), the
gradient memset, the bf16 weight copy as its own pass, the backward classifier re-reading the
logits to recompute the log-sum-exp, the attention backward's D = rowsum(dO O) pass and the dQ
kernel's second read of q, k, v, dO. FLOPs are the same.

Modeled from SASS (--sass FILE, optional). The attention kernels' tensor-core work is modeled from
the instruction mix of their compiled hot loops, as dev/cuda/sass_report --json reports it. FILE is
JSON: either {"kernels": [ENTRY, ...]} or a list of ENTRY, where ENTRY is
    {"name": "<demangled kernel name>", "instructions_per_hmma": I, "smem_wavefronts_per_hmma": W,
     "mufu_per_hmma": M}
(W and M optional; other keys ignored), or as dev/cuda/sass_report --json writes it
(build/sass/report.json, `make sass-report`): there I and M are the full path's (an interior tile
that prefetches) of the entry's hot loop with the most HMMA, I' and M' its masked path's (a masked
tile with every pair computed that prefetches a whole tile: an upper bound for a masked tile, whose
invisible 16-key pairs the forward skips; the max path, which may take the ragged-tile copy that
runs at most once per block, for a report without masked_path), and W is not reported; a hand-written entry's masked tiles take I and M. An entry belongs
to a kernel of ATTENTION_KERNELS when its name contains the kernel's base name and, if it has
template arguments, the first is the head size; of several matches (e.g. statistics on / off) the
slowest is used, on interior and on masked tiles separately. Per kernel:
    tensor work = GEMMs per visited tile pair x 2 hd x 64 x 64 FLOPs x visited 64 x 64 tile pairs
    (a visited tile is computed whole, masked pairs included: the kernels' tile rule,
    llmc/core/attention_tiles.h), split into interior tiles and masked ones (attn_tile_needs_mask:
    ragged, crossing the diagonal, or, for a local head, the window's edge; at P < 64 every tile a
    local head visits is masked);
    efficiency = min(1, 4 / I, 1 / W, 1 / (2 M)): at 989 TFLOP/s (= 132 SMs x 4096 FLOPs x 1.83 GHz)
    an SM retires one m16n8k16 HMMA (4096 FLOPs) per cycle, i.e. each of its 4 schedulers one per 4
    cycles while it can issue one instruction per cycle (so I instructions per HMMA cap it at 4 / I),
    the SM's shared memory delivers one 128-byte wavefront per cycle (W wavefronts per HMMA, as a
    warp's hot loop issues them, cap it at 1 / W), and its special-function units 16 results per
    cycle (3.9 TFLOP/s of special functions on the whole H100 SXM, FlashAttention-3's figure), so a
    warp's MUFU (ex2, tanh) occupies them 2 cycles (M per HMMA cap it at 1 / (2 M));
    time = max(sum over the op's kernels of interior work / (peak x efficiency(I, M))
                   + masked work / (peak x efficiency(I', M')), bytes / bandwidth)
    (bytes: the op's traffic with today's passes).
    A kernel whose hot loop's shortest trip holds no HMMA skips the 16-wide pairs a warp cannot see
    on masked tiles (the FA2-class backward at hd 32 / 64; the forward skips too, but its shortest
    trip is an interior tile, so its masked tiles stay at I', M'): its masked work is modeled at the
    fraction f of pairs its warps compute over the shape's masked tiles (masked_pair_fraction: the
    kernels' pair rule, llmc/core/attention_tiles.h), masked work / peak x max(f, I(f) / 4, 2 M(f)),
    with I(f) = I0 + f (I' - I0) and M(f) likewise, I0 and M0 the shortest trip's instructions and
    MUFU over the masked trip's HMMA (each pair is the same code, so a trip is linear in its pairs;
    the shortest trip lacks the prefetch and barrier of the others, so I(f) is a few percent low).
An attention op whose kernels have no entry shows "-". The other ops keep their today's-passes time
in that column (cuBLASLt and the memory-bound kernels are not modeled), so the column isolates the
attention kernels' distance from their roofline. No factor is added for mma.sync against Hopper's
wgmma (the peak is the device's).
"""
import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field

PEAK_FLOPS = 989e12  # H100 SXM dense bf16 tensor-core rate, FLOP/s
BANDWIDTH = 3.35e12  # H100 SXM HBM3, bytes/s
ACT = 2  # bf16 activation / working-weight bytes
F32 = 4
TILE = 64  # the tensor-core attention kernels' query and key tile (llmc/cuda/attention_ls_common.cuh)

# The shapes modeled. paper: the paper's small model (docs/experiments.md, scripts/exp_pg19.sh:
# ls-small, 6 layers, C 192, 6 heads of 32, one global head, P = 50, SentencePiece 10K vocabulary,
# T = 2048; 16 sequences = the script's default 32768 tokens per step). gpt2-124m: GPT-2 small (12
# layers, C 768, 12 heads of 64, every head global as in GPT-2, vocabulary 50257) at llm.c's
# B 16 x T 1024 (dev/bench/train_vs_torch.py's d12 shape).
MODELS = {
    "paper": dict(L=6, C=192, NH=6, G=1, P=50, V=10000, maxT=2048, B=16, T=2048),
    "gpt2-124m": dict(L=12, C=768, NH=12, G=12, P=1024, V=50257, maxT=1024, B=16, T=1024),
}

# The attention kernels the BF16 build trains with (llmc/cuda/attention_ls.cuh's default, the
# FlashAttention-2-class family: attention_ls_fa2.cuh, attention_ls_fa2_bwd.cuh) for the SASS column:
# the op they belong to and the GEMMs each computes per visited tile pair. (The forward skips the
# 16-key pairs of MMA blocks of a tile outside a local head's window; the model counts whole tiles,
# so it overstates the forward's local-head work.)
ATTENTION_KERNELS = {
    "attn_fwd_fa2_kernel": ("attention fwd", 2, "rows"),  # S = Q K^T, O += P V
    "attn_bwd_kv_fa2_kernel": ("attention bwd", 4, "keys"),  # S, dP = dO V^T, dV += P^T dO, dK += dS^T Q
    "attn_bwd_q_fa2_kernel": ("attention bwd", 3, "rows"),  # S, dP again, dQ += dS K
}
# The one-pass backward's dK/dV kernel (attn_bwd_kv_fa2_kernel<HD, SOFTCAP, true>, lab version 7:
# AttnKernel::Fa2OnePass): the four GEMMs above and dQ's part dS K per visited tile. Its instances
# are kept apart from the production kernel's under this key (dq_designs_sass), never in the step.
ONE_PASS_KERNEL = "attn_bwd_kv_fa2_kernel+dq"
ONE_PASS_GEMMS = 5


@dataclass
class Op:
    name: str
    phase: str  # forward, backward, optimizer
    count: int = 0  # calls of this op per step (an op of every layer: L)
    flops: float = 0.0
    bytes: float = 0.0
    # attention: kernel -> (tensor FLOPs on visited interior tiles, on visited masked tiles)
    tile_flops: dict = field(default_factory=dict)
    # attention: kernel -> the mean fraction of a masked tile's 16-wide pairs a warp computes
    # (masked_pair_fraction, weighted by the masked tiles of each head kind)
    pair_fraction: dict = field(default_factory=dict)

    def add(self, flops, nbytes):
        self.count += 1
        self.flops += flops
        self.bytes += nbytes


def padded_vocab(V):
    return (V + 127) // 128 * 128


def visible_pairs(T, window, local):
    """Visible (query, key) pairs of one head over one sequence of T."""
    if not local:
        return T * (T + 1) // 2
    P = min(window, T)
    return P * (P + 1) // 2 + (T - P) * P  # sum_i min(i + 1, P)


def visited_tiles(T, window, local, tile=TILE):
    """64 x 64 tile pairs (query tile, key tile) holding at least one visible pair (the tiles the
    kernels visit and compute whole)."""
    n = 0
    nt = (T + tile - 1) // tile
    for qt in range(nt):
        q0, q1 = qt * tile, min(qt * tile + tile, T)
        for kt in range(nt):
            k0, k1 = kt * tile, min(kt * tile + tile, T)
            if k0 > q1 - 1:
                continue  # every key after every query
            nearest = max(0, q0 - (k1 - 1))  # smallest i - j >= 0 in the tile
            if not local or nearest < window:
                n += 1
    return n


def masked_tile_list(T, window, local, tile=TILE):
    """Of the visited tiles (visited_tiles), the (query tile, key tile) pairs the kernels run with the
    per-pair mask: the tile rule attn_tile_needs_mask (llmc/core/attention_tiles.h) - a ragged tile,
    a tile whose last key is past its first query, and for a local head one whose first key is at
    or before its last query - window."""
    out = []
    nt = (T + tile - 1) // tile
    for qt in range(nt):
        q0, q1 = qt * tile, qt * tile + tile
        for kt in range(nt):
            k0, k1 = kt * tile, kt * tile + tile
            if k0 > min(q1, T) - 1:
                continue  # not visited: every key after every query
            if local and max(0, q0 - (min(k1, T) - 1)) >= window:
                continue  # not visited: every key before every query's window
            if q1 > T or k1 > T or k1 - 1 > q0 or (local and k0 <= q1 - 1 - window):
                out.append((qt, kt))
    return out


def masked_tiles(T, window, local, tile=TILE):
    return len(masked_tile_list(T, window, local, tile))


def warp_pairs(side, w0, t0, T, window, local):
    """How many of a 64 x 64 tile's four 16-wide pairs a warp computes on a masked tile (the
    FA2-class kernels' skips: the pairs holding a visible score, from the OR of the warp's score
    bits): side "rows", a warp of rows w0 .. w0+15 over the keys t0 .. t0+63 (forward, dQ); side
    "keys", a warp of keys w0 .. w0+15 over the queries t0 .. t0+63 (dK/dV). Only the rows / keys < T.
    The visible part is one run of pairs (the windows [key_lo(i), i] move right with i)."""
    if w0 >= T:
        return 0
    last_own = min(w0 + 15, T - 1)
    if side == "rows":
        first, last = ((max(0, w0 - window + 1) if local else 0) - t0) >> 4, (last_own - t0) >> 4
    else:
        last_query = min(T - 1, last_own + window - 1) if local else T - 1
        first, last = (w0 - t0) >> 4, (last_query - t0) >> 4
    return max(0, min(last, 3) - max(first, 0) + 1)


def masked_pair_fraction(side, T, window, local, tile=TILE):
    """The mean over the masked tiles (masked_tile_list) and their four warps of warp_pairs / 4;
    1.0 when there is no masked tile."""
    tiles = masked_tile_list(T, window, local, tile)
    if not tiles:
        return 1.0
    total = 0
    for qt, kt in tiles:
        own, other = (qt, kt) if side == "rows" else (kt, qt)
        total += sum(warp_pairs(side, own * tile + 16 * w, other * tile, T, window, local) for w in range(4))
    return total / (4 * 4 * len(tiles))


def step_ops(m, as_implemented=False):
    """The ops of one training step for model shape m (a MODELS entry), in execution order.
    as_implemented: add the traffic today's kernels cause beyond the compulsory ("today's passes" in
    the module docstring)."""
    L, C, NH, G, P, V, maxT, B, T = (m[k] for k in ("L", "C", "NH", "G", "P", "V", "maxT", "B", "T"))
    qk_norm = m.get("qk_norm", False)
    Vp, hd, N = padded_vocab(V), C // NH, B * T
    rows_wte = min(N, V)  # distinct embedding rows a batch can touch
    params = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C + (4 * L * hd if qk_norm else 0)
    ops = {}

    def op(name, phase):
        if name not in ops:
            ops[name] = Op(name, phase)
        return ops[name]

    def matmul_fwd(name, IC, OC, bias=True, extra_out=0):
        op(name, "forward").add(2 * N * IC * OC,
                                (N * IC + OC * IC + (OC if bias else 0) + N * OC * (1 + extra_out)) * ACT)

    def matmul_bwd(name, IC, OC, bias=True, bias_in_gelu_pass=False):
        dinp = (N * OC + OC * IC + N * IC) * ACT  # read dout, W; write dinp
        dw = (N * OC + N * IC) * ACT + (OC * IC + (OC if bias else 0)) * F32  # read dout, inp; write dW (+db)
        if as_implemented:  # dW added with beta = 1 (read), the bias gradient's own pass over dout
            # (the fc layer's is summed in the GELU backward's pass, which reads dout anyway)
            dw += OC * IC * F32 + ((N * OC * ACT + OC * F32) if bias and not bias_in_gelu_pass else 0)
        op(name, "backward").add(4 * N * IC * OC, dinp + dw)

    def layernorm_fwd(name, residual):
        reads = N * C * ACT * (2 if residual else 1) + 2 * C * ACT
        writes = N * C * ACT * (2 if residual else 1) + 2 * N * F32
        op(name, "forward").add(8 * N * C, reads + writes)

    def layernorm_bwd():
        nbytes = (N * C * ACT * 2 + 2 * N * F32 + C * ACT) + N * C * ACT * 2 + 2 * C * F32  # dout, inp, stats, w; dres +=; dw, db
        op("layernorm bwd", "backward").add(16 * N * C, nbytes)

    pairs = B * ((NH - G) * visible_pairs(T, P, True) + G * visible_pairs(T, P, False))
    tiles = B * ((NH - G) * visited_tiles(T, P, True) + G * visited_tiles(T, P, False))
    masked = B * ((NH - G) * masked_tiles(T, P, True) + G * masked_tiles(T, P, False))
    attn_io_fwd = (N * 3 * C + N * C) * ACT + N * NH * F32  # read qkv; write out, lse
    attn_io_bwd = (N * 3 * C + 2 * N * C) * ACT + N * NH * F32 + N * 3 * C * ACT  # qkv, out, dout, lse; dqkv

    if as_implemented:  # D = rowsum(dO O) (reads dO, O; written, read twice); both kernels read q, k, v, dO, lse
        attn_io_bwd += 5 * N * C * ACT + 4 * N * NH * F32
    # the pairs a warp computes on a masked tile, by side, weighted by each head kind's masked tiles
    window = {True: P, False: T}
    pair_fraction = {}
    for side in ("rows", "keys"):
        weights = [(B * heads * masked_tiles(T, P, local), masked_pair_fraction(side, T, window[local], local))
                   for heads, local in ((NH - G, True), (G, False)) if heads]
        n = sum(wt for wt, _ in weights)
        pair_fraction[side] = sum(wt * f for wt, f in weights) / n if n else 1.0

    def attention(phase):
        o = op(f"attention {phase}", "forward" if phase == "fwd" else "backward")
        o.add((4 if phase == "fwd" else 10) * hd * pairs, attn_io_fwd if phase == "fwd" else attn_io_bwd)
        for kernel, (owner, gemms, side) in ATTENTION_KERNELS.items():
            if owner == o.name:
                per_tile = gemms * 2 * hd * TILE * TILE
                interior, on_masked = o.tile_flops.get(kernel, (0, 0))
                o.tile_flops[kernel] = (interior + per_tile * (tiles - masked), on_masked + per_tile * masked)
                o.pair_fraction[kernel] = pair_fraction[side]

    if as_implemented:
        op("zero gradients (memset)", "backward").add(0, params * F32)
    # forward
    op("encoder fwd", "forward").add(N * C, N * 4 + (rows_wte + T) * C * ACT + N * C * ACT)
    layernorm_fwd("layernorm fwd", residual=False)
    for _ in range(L):
        matmul_fwd("matmul qkv fwd", C, 3 * C)
        if qk_norm:
            op("qk-norm fwd", "forward").add(8 * N * 2 * C, 2 * N * 3 * C * ACT + 4 * N * NH * F32)
        attention("fwd")
        matmul_fwd("matmul attproj fwd", C, C)
        layernorm_fwd("residual + layernorm fwd", residual=True)
        matmul_fwd("matmul fc + GELU fwd", C, 4 * C, extra_out=1)  # GELU output and its input (aux)
        matmul_fwd("matmul fcproj fwd", 4 * C, C)
        layernorm_fwd("residual + layernorm fwd", residual=True)
    matmul_fwd("matmul LM head fwd", C, Vp, bias=False)
    op("classifier fwd (loss, lse)", "forward").add(5 * N * V, N * V * ACT + N * 4 + 4 * N * F32)
    # backward
    # as implemented, the backward's classifier pass recomputes the log-sum-exp: one more read of the logits
    op("classifier bwd (dlogits)", "backward").add(
        3 * N * V, N * V * ACT * (2 if as_implemented else 1) + N * F32 + N * 4 + N * Vp * ACT)
    matmul_bwd("matmul LM head bwd", C, Vp, bias=False)
    layernorm_bwd()
    for _ in range(L):
        matmul_bwd("matmul fcproj bwd", 4 * C, C)
        op("gelu bwd", "backward").add(15 * N * 4 * C, 3 * N * 4 * C * ACT)
        matmul_bwd("matmul fc bwd", C, 4 * C, bias_in_gelu_pass=True)  # matmul_gelu_backward
        layernorm_bwd()
        matmul_bwd("matmul attproj bwd", C, C)
        attention("bwd")
        if qk_norm:
            op("qk-norm bwd", "backward").add(16 * N * 2 * C, 3 * N * 3 * C * ACT + 4 * N * NH * F32 + 4 * hd * F32)
        matmul_bwd("matmul qkv bwd", C, 3 * C)
        layernorm_bwd()
    # the tied wte gradient: positions' rows read and written (the LM head wrote it), wpe written
    op("encoder bwd", "backward").add(N * C, N * C * ACT + N * 4 + rows_wte * C * F32 * 2 + T * C * F32)
    # optimizer
    op("gradient norm", "optimizer").add(2 * params, params * F32)
    # as implemented, the bf16 copy is its own pass (reads the new master again)
    op("AdamW + bf16 copy", "optimizer").add(15 * params,
                                             params * (4 * F32 + 3 * F32 + ACT + (F32 if as_implemented else 0)))
    return list(ops.values()), dict(N=N, Vp=Vp, hd=hd, params=params, pairs=pairs, tiles=tiles)


SFU_RATE = PEAK_FLOPS / 4096 * 16  # special-function results per second: 16 per SM cycle (module docstring)


def dq_designs(m):
    """The dQ half of the attention backward in two designs, per layer of model shape m (B x T
    tokens), from the visited 64 x 64 tiles. MODELED at the H100 limits above, nothing measured
    (docs/attention_kernel.md, "Why dQ has a pass of its own"):
      two-pass (built): the dQ kernel visits the forward's tiles again and recomputes S = Q K^T and
        dP = dO V^T there: per visited tile 2 more GEMMs (2 x 2 hd x 64 x 64 FLOPs), one more ex2
        per pair (64 x 64), and K and V read again (2 x 64 x hd bf16: a head's K and V tiles are
        read by each of its query tiles, reuse an L2 can serve);
      one-pass (FlashAttention-2's loop): the dK/dV kernel forms dQ's part dS K of every visited
        tile without recomputing, and hands it to the tile's query rows through an fp32 dQ buffer
        in global memory, dS through shared memory besides. Its traffic lies between a floor, the
        fp32 buffer written and read once (an L2 that holds the buffer absorbs every add: FA2's
        atomic adds resolve there), and an upper bound, each visited tile's (64 x hd) fp32 part
        written and read once at HBM (per-tile partials summed in a fixed order, none in the L2).
    Returns one dict per head kind present and a total: tiles; the two-pass's recompute (flops, ex2,
    compute_s = max of the two at peak) and re-read bytes (reread_hbm_s: were none an L2 hit); the
    one-pass's handoff bytes (handoff_hbm_s, the upper bound) and floor bytes (floor_hbm_s)."""
    NH, G, P, B, T = (m[k] for k in ("NH", "G", "P", "B", "T"))
    hd = m["C"] // NH
    out = []
    for kind, heads, local in (("local", NH - G, True), ("global", G, False)):
        if heads == 0:
            continue
        tiles = B * heads * visited_tiles(T, P, local)
        flops = tiles * 2 * 2 * hd * TILE * TILE
        ex2 = tiles * TILE * TILE
        reread = tiles * 2 * TILE * hd * ACT
        handoff = tiles * 2 * TILE * hd * F32
        floor = 2 * B * T * heads * hd * F32
        out.append(dict(kind=kind, heads=heads, hd=hd, tiles=tiles, recompute_flops=flops, recompute_ex2=ex2,
                        compute_s=max(flops / PEAK_FLOPS, ex2 / SFU_RATE), reread_bytes=reread,
                        reread_hbm_s=reread / BANDWIDTH, handoff_bytes=handoff, handoff_hbm_s=handoff / BANDWIDTH,
                        floor_bytes=floor, floor_hbm_s=floor / BANDWIDTH))
    total = {k: sum(r[k] for r in out) for k in out[0] if k not in ("kind", "heads", "hd")}
    out.append(dict(total, kind="all", heads=NH, hd=hd))
    return out


def dq_designs_markdown(name, m, sass=None):
    rows = dq_designs(m)
    out = [f"**{name}** (B {m['B']} x T {m['T']}, per layer; modeled, not measured on a GPU)", "",
           "| heads | hd | visited tiles | two-pass: recompute GFLOP | ex2 (M) | compute µs | K, V re-read MB | "
           "µs if all from HBM | one-pass: dQ handoff, floor - bound MB | µs at HBM |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        kind = "all" if r["kind"] == "all" else f"{r['heads']} {r['kind']}"
        out.append(f"| {kind} | {r['hd']} | {r['tiles']:,} | {r['recompute_flops'] / 1e9:,.2f} | "
                   f"{r['recompute_ex2'] / 1e6:,.1f} | {fmt_us(r['compute_s'])} | {r['reread_bytes'] / 1e6:,.1f} | "
                   f"{fmt_us(r['reread_hbm_s'])} | {r['floor_bytes'] / 1e6:,.1f} - {r['handoff_bytes'] / 1e6:,.1f} | "
                   f"{fmt_us(r['floor_hbm_s'])} - {fmt_us(r['handoff_hbm_s'])} |")
    d = dq_designs_sass(m, sass) if sass is not None else None
    if d is not None:
        out += ["", f"**{name}**, the attention backward per layer from SASS figures (modeled, not measured on a GPU)", "",
                "| design | tensor work at its SASS rate µs | MB | memory µs | modeled µs |", "|---|---:|---:|---:|---:|",
                f"| two-pass (dK/dV + dQ kernels, built) | {fmt_us(d['two_pass_compute_s'])} | "
                f"{d['two_pass_bytes'] / 1e6:,.1f} | {fmt_us(d['two_pass_bytes'] / BANDWIDTH)} | {fmt_us(d['two_pass_s'])} |"]
        for edge in ("floor", "bound"):
            out.append(f"| one-pass (lab version 7), handoff at its {edge} | {fmt_us(d['one_pass_compute_s'])} | "
                       f"{d[f'one_pass_{edge}_bytes'] / 1e6:,.1f} | {fmt_us(d[f'one_pass_{edge}_bytes'] / BANDWIDTH)} | "
                       f"{fmt_us(d[f'one_pass_{edge}_s'])} |")
    return "\n".join(out)


def dq_designs_sass(m, sass):
    """The attention backward per layer of model shape m in both designs, modeled from SASS figures
    (MODELED, nothing measured): two-pass (built: the dK/dV and dQ kernels, sass_time of the step's
    op with today's passes) and one-pass (lab version 7: the one-pass dK/dV kernel's tensor work,
    ONE_PASS_GEMMS per visited tile at its SASS efficiency, masked tiles by its pair fraction, against
    the compulsory traffic plus the D pass and the dQ parts' handoff, at its floor and at its bound
    (dq_designs); one max(compute, bytes) per design, as sass_time). Returns None when the figures
    of either design's kernels are missing."""
    ops, info = step_ops(m, as_implemented=True)
    o = next(x for x in ops if x.name == "attention bwd")
    hd, L = info["hd"], o.count
    fig = sass.get((ONE_PASS_KERNEL, hd))
    two = sass_time(o, hd, sass)
    if fig is None or two is None:
        return None
    kv = "attn_bwd_kv_fa2_kernel"
    interior, on_masked = (x * ONE_PASS_GEMMS / ATTENTION_KERNELS[kv][1] for x in o.tile_flops[kv])
    compute1 = interior / (PEAK_FLOPS * fig.eff) + on_masked / PEAK_FLOPS * masked_factor(fig, o.pair_fraction[kv])
    compulsory = next(x for x in step_ops(m)[0] if x.name == "attention bwd").bytes
    N, NH = m["B"] * m["T"], m["NH"]
    # beyond the compulsory: dO read twice (the D pass and the dK/dV kernel), D written and read once
    io1 = compulsory + L * (N * m["C"] * ACT + 2 * N * NH * F32)
    total = dq_designs(m)[-1]
    compute2 = sass_time(Op(o.name, o.phase, tile_flops=o.tile_flops, pair_fraction=o.pair_fraction), hd, sass)
    out = dict(two_pass_compute_s=compute2 / L, two_pass_bytes=o.bytes / L, two_pass_s=two / L,
               one_pass_compute_s=compute1 / L)
    for edge, handoff in (("floor", total["floor_bytes"]), ("bound", total["handoff_bytes"])):
        nbytes = io1 / L + handoff
        out[f"one_pass_{edge}_bytes"] = nbytes
        out[f"one_pass_{edge}_s"] = max(compute1 / L, nbytes / BANDWIDTH)
    return out


def parse_sass(path):
    """{(kernel base name, head size or None): SassFigure} for the kernels of ATTENTION_KERNELS, from
    a sass_report JSON (module docstring); the one-pass dK/dV kernel's instances under
    (ONE_PASS_KERNEL, head size), apart from the production kernel's."""
    with open(path) as f:
        data = json.load(f)
    entries = data.get("kernels", data) if isinstance(data, dict) else data
    if isinstance(entries, dict):
        entries = [dict(v, name=k) for k, v in entries.items()]
    out = {}
    for e in entries:
        name = e.get("name", "")
        ipm, mufu = e.get("instructions_per_hmma"), e.get("mufu_per_hmma")
        ipm_masked, mufu_masked = ipm, mufu
        skip = None
        if ipm is None or isinstance(ipm, dict):  # sass_report's schema (or no figure at all)
            ipm, mufu = sass_report_path(e, "full_path")
            # masked tiles: the longest trip without a ragged (zero-filling) copy, which runs at most
            # once per block; max_path where the report has no such trip (or predates it)
            masked = "masked_path"
            ipm_masked, mufu_masked = sass_report_path(e, masked)
            if ipm_masked is None:
                masked = "max_path"
                ipm_masked, mufu_masked = sass_report_path(e, masked)
            skip = sass_report_skip(e, masked)
        if ipm is None:
            continue
        for base in ATTENTION_KERNELS:
            if base not in name or near_far_instance(name):
                continue
            t = re.search(re.escape(base) + r"\s*<\s*(\d+)", name)
            hd = int(t.group(1)) if t else None
            key = (ONE_PASS_KERNEL if one_pass_instance(name) else base, hd)
            w = e.get("smem_wavefronts_per_hmma")
            fig = SassFigure(float(ipm), w, mufu, efficiency(ipm, w, mufu),
                             efficiency(ipm_masked if ipm_masked is not None else ipm, w,
                                        mufu_masked if ipm_masked is not None else mufu), skip)
            if key in out:  # the slowest variant, per path (masked: with every pair computed)
                prev = out[key]
                if prev.eff < fig.eff:
                    fig.ipm, fig.w, fig.mufu, fig.eff = prev.ipm, prev.w, prev.mufu, prev.eff
                if prev.eff_masked < fig.eff_masked:
                    fig.eff_masked, fig.skip = prev.eff_masked, prev.skip
            out[key] = fig
    return out


def near_far_instance(name):
    """Whether name is a forward instance with the near/far statistics (attn_fwd_fa2_kernel<HD, STATS,
    NEAR, SOFTCAP> with NEAR true): a run computes them only with --near, so the model leaves them out."""
    t = re.search(r"attn_fwd_fa2_kernel\s*<([^>]*)>", name)
    args = [a.strip() for a in t.group(1).split(",")] if t else []
    return len(args) == 4 and args[2] == "true"


def one_pass_instance(name):
    """Whether name is the one-pass backward's dK/dV kernel (attn_bwd_kv_fa2_kernel<HD, SOFTCAP, ONEPASS>
    with ONEPASS true), which the step does not run (lab version 7)."""
    t = re.search(r"attn_bwd_kv_fa2_kernel\s*<([^>]*)>", name)
    args = [a.strip() for a in t.group(1).split(",")] if t else []
    return len(args) == 3 and args[2] == "true"


@dataclass
class SassFigure:
    ipm: float  # instructions per HMMA, interior tile
    w: float  # shared-memory wavefronts per HMMA, or None
    mufu: float  # MUFU per HMMA, interior tile, or None
    eff: float  # efficiency on interior tiles
    eff_masked: float  # efficiency on masked tiles (every pair computed)
    # a kernel whose masked trips skip pairs (its shortest trip has no HMMA): the masked trip with
    # every pair and the one with none, in instructions and MUFU per HMMA of the whole trip
    skip: tuple = None  # (ipm all, mufu all, ipm none, mufu none)


def efficiency(ipm, w, mufu):
    """min(1, 4 / I, 1 / W, 1 / (2 M)) (module docstring); a missing W or M does not cap."""
    return min(1.0, 4.0 / float(ipm), 1.0 / float(w) if w else 1.0, 1.0 / (2.0 * float(mufu)) if mufu else 1.0)


def sass_report_path(e, path):
    """(instructions per HMMA, MUFU per HMMA or None) on one path ("full_path", "masked_path", "max_path") of the
    hot loop with the most HMMA on its full path of a sass_report kernel entry, or (None, None) (no
    hot loop with tensor-core work)."""
    loops = [h for h in e.get("hot_loops", []) or []
             if isinstance(h.get("instructions_per_hmma"), dict) and h["instructions_per_hmma"].get("full_path")]
    if not loops:
        return None, None
    hot = max(loops, key=lambda h: (h.get("full_path") or {}).get("HMMA", 0))
    counts = hot.get(path) or {}
    ipm = hot["instructions_per_hmma"].get(path)
    mufu = counts["MUFU"] / counts["HMMA"] if counts.get("HMMA") and "MUFU" in counts else None
    return ipm, mufu


def masked_factor(fig, f):
    """A masked tile's time over its tensor time at peak: 1 / eff_masked, or for a kernel that skips
    pairs (fig.skip) with a fraction f of them computed, max(f, I(f) / 4, 2 M(f)), I and M
    interpolated between the trips with no pair and with every pair (module docstring)."""
    if fig.skip is None:
        return 1.0 / fig.eff_masked
    ipm_all, mufu_all, ipm_none, mufu_none = fig.skip
    ipm = ipm_none + f * (ipm_all - ipm_none)
    mufu = (mufu_none or 0.0) + f * ((mufu_all or 0.0) - (mufu_none or 0.0))
    return max(f, ipm / 4.0, 2.0 * mufu)


def sass_report_skip(e, masked):
    """SassFigure.skip of a sass_report kernel entry: when the shortest trip of its hottest loop has
    no HMMA (masked tiles skip pairs), (instructions, MUFU) per HMMA of the masked trip (path
    masked) with every pair and of that shortest trip, both over the masked trip's HMMA; else None."""
    loops = [h for h in e.get("hot_loops", []) or [] if (h.get("full_path") or {}).get("HMMA")]
    if not loops:
        return None
    hot = max(loops, key=lambda h: h["full_path"]["HMMA"])
    full, none = hot.get(masked) or {}, hot.get("min_path") or {}
    if not full.get("HMMA") or none.get("HMMA", 1) != 0 or "instructions" not in none:
        return None
    h = full["HMMA"]
    return (full["instructions"] / h, full.get("MUFU", 0) / h, none["instructions"] / h, none.get("MUFU", 0) / h)


def sass_time(o, hd, sass):
    """Modeled seconds of an attention op from SASS figures, or None when a kernel has none."""
    t = 0.0
    for kernel, (interior, on_masked) in o.tile_flops.items():
        fig = sass.get((kernel, hd)) or sass.get((kernel, None))
        if fig is None:
            return None
        t += interior / (PEAK_FLOPS * fig.eff) + on_masked / PEAK_FLOPS * masked_factor(fig, o.pair_fraction[kernel])
    return max(t, o.bytes / BANDWIDTH)


def model_table(name, m, sass=None):
    """Rows (one per op: compulsory figures, the as-implemented time, the SASS-modeled time) and a summary."""
    ops, info = step_ops(m)
    today = {o.name: o for o in step_ops(m, as_implemented=True)[0]}
    rows = []
    for o in list(today.values()):
        c = next((x for x in ops if x.name == o.name), None) or Op(o.name, o.phase)
        tf, tm = c.flops / PEAK_FLOPS, c.bytes / BANDWIDTH
        t_today = max(o.flops / PEAK_FLOPS, o.bytes / BANDWIDTH)
        modeled = t_today
        if sass is not None and o.tile_flops:
            modeled = sass_time(o, info["hd"], sass)
        rows.append(dict(op=o.name, phase=o.phase, count=o.count, flops=c.flops, bytes=c.bytes, t_flops=tf,
                         t_bytes=tm, bound="compute" if tf > tm else "memory" if c.count else "-",
                         t=max(tf, tm), bytes_today=o.bytes, t_today=t_today, modeled=modeled))
    total = sum(r["t"] for r in rows)
    flops = sum(r["flops"] for r in rows)
    nbytes = sum(r["bytes"] for r in rows)
    tokens = info["N"]
    # the model FLOPs of MFU (llmc/core/flops.h): 6 x matmul weights x tokens + 12 hd x visible pairs
    mfu_flops = 6 * tokens * (12 * m["C"] ** 2 * m["L"] + m["C"] * info["Vp"]) + 12 * info["hd"] * info["pairs"] * m["L"]
    T, P = m["T"], m["P"]
    summary = dict(model=name, shape=m, tokens=tokens, params=info["params"], flops=flops, bytes=nbytes,
                   roofline_s=total, flops_only_s=flops / PEAK_FLOPS, bytes_only_s=nbytes / BANDWIDTH,
                   today_s=sum(r["t_today"] for r in rows), bytes_today=sum(r["bytes_today"] for r in rows),
                   tokens_per_s=tokens / total, mfu_at_roofline=mfu_flops / total / PEAK_FLOPS,
                   visible_fraction_local=visible_pairs(T, P, True) / (visited_tiles(T, P, True) * TILE * TILE),
                   visible_fraction_global=visible_pairs(T, P, False) / (visited_tiles(T, P, False) * TILE * TILE),
                   peak_flops=PEAK_FLOPS, bandwidth=BANDWIDTH)
    if sass is not None:
        mod = [r["modeled"] for r in rows]
        summary["modeled_s"] = None if any(x is None for x in mod) else sum(mod)
    return rows, summary


def fmt_us(s):
    return "-" if s is None else f"{s * 1e6:,.0f}"


def markdown(name, rows, summary, with_sass):
    m = summary["shape"]
    hd = m["C"] // m["NH"]
    heads = "all global" if m["G"] == m["NH"] else f"G {m['G']} global + {m['NH'] - m['G']} local, P {m['P']}"
    out = [f"**{name}**: L {m['L']}, C {m['C']}, NH {m['NH']} (hd {hd}), {heads}, V {m['V']} "
           f"(Vp {padded_vocab(m['V'])}), B {m['B']} x T {m['T']} = {summary['tokens']:,} tokens, "
           f"{summary['params'] / 1e6:.2f}M parameters; H100 SXM {PEAK_FLOPS / 1e12:.0f} TFLOP/s dense bf16, "
           f"{BANDWIDTH / 1e12:.2f} TB/s. Modeled, not measured on a GPU.", ""]
    head = "| op | per step | GFLOP | MB | compute µs | memory µs | bound | roofline µs | today's passes µs |"
    sep = "|---|---:|---:|---:|---:|---:|---|---:|---:|"
    if with_sass:
        head += " modeled from SASS µs |"
        sep += "---:|"
    out += [head, sep]
    for r in rows:
        line = (f"| {r['op']} | {r['count']} | {r['flops'] / 1e9:,.1f} | {r['bytes'] / 1e6:,.1f} | "
                f"{fmt_us(r['t_flops'])} | {fmt_us(r['t_bytes'])} | {r['bound']} | {fmt_us(r['t'])} | "
                f"{fmt_us(r['t_today'])} |")
        if with_sass:
            line += f" {fmt_us(r['modeled'])} |"
        out.append(line)
    s = summary
    total = (f"| **step** | | {s['flops'] / 1e9:,.1f} | {s['bytes'] / 1e6:,.1f} | {fmt_us(s['flops_only_s'])} | "
             f"{fmt_us(s['bytes_only_s'])} | | **{fmt_us(s['roofline_s'])}** | **{fmt_us(s['today_s'])}** |")
    if with_sass:
        total += f" **{fmt_us(s.get('modeled_s'))}** |"
    out.append(total)
    vis = f"{100 * s['visible_fraction_global']:.0f}% (global heads)"
    if m["G"] < m["NH"]:
        vis = f"{100 * s['visible_fraction_local']:.0f}% (local heads), " + vis
    out += ["", f"Roofline step {s['roofline_s'] * 1e3:.2f} ms = {s['tokens_per_s'] / 1e6:.2f}M tokens/s, MFU at the "
            f"roofline {100 * s['mfu_at_roofline']:.0f}% (llmc/core/flops.h's model FLOPs); today's passes at their "
            f"roofline {s['today_s'] * 1e3:.2f} ms ({s['bytes_today'] / 1e9:.1f} GB moved). Visible pairs in the 64 x 64 "
            f"tiles the attention kernels visit: {vis}."]
    if with_sass and s.get("modeled_s") is not None:
        out.append(f"Modeled from SASS: {s['modeled_s'] * 1e3:.2f} ms ({s['modeled_s'] / s['roofline_s']:.2f}x the roofline).")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS) + ["all"], default="all")
    ap.add_argument("--batch", type=int, help="sequences per step (default: the model's)")
    ap.add_argument("--seq", type=int, help="sequence length T (default: the model's)")
    ap.add_argument("--sass", help="sass_report JSON: adds the column modeled from SASS figures")
    ap.add_argument("--out", help="also write every figure as JSON to DIR/roofline.json")
    ap.add_argument("--dq-designs", action="store_true",
                    help="also the attention backward's dQ half in two designs (dq_designs)")
    a = ap.parse_args(argv)
    sass = None
    if a.sass:
        try:
            sass = parse_sass(a.sass)
        except (OSError, ValueError) as e:
            print(f"error: --sass {a.sass}: {e}; give the JSON dev/cuda/sass_report --json writes", file=sys.stderr)
            return 2
    names = sorted(MODELS, key=lambda k: k != "paper") if a.model == "all" else [a.model]
    results, text = [], []
    for name in names:
        m = dict(MODELS[name])
        if a.batch:
            m["B"] = a.batch
        if a.seq:
            if a.seq > m["maxT"]:
                print(f"error: --seq {a.seq} is above {name}'s maximum sequence length {m['maxT']}; "
                      f"give --seq <= {m['maxT']}", file=sys.stderr)
                return 2
            m["T"] = a.seq
        rows, summary = model_table(name, m, sass)
        results.append(dict(summary=summary, ops=rows))
        text.append(markdown(name, rows, summary, sass is not None))
        if a.dq_designs:
            text.append(dq_designs_markdown(name, m, sass))
    print("\n\n".join(text))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "roofline.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
