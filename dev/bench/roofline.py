#!/usr/bin/env python3
"""Roofline model of one training step (forward + backward + AdamW) on an H100 SXM. MODELED, not
measured on a GPU: every figure comes from counting, none from a run.

    python3 dev/bench/roofline.py                          # paper model and GPT-2 124M, markdown
    python3 dev/bench/roofline.py --model paper --batch 8 --seq 1024
    python3 dev/bench/roofline.py --sass sass.json         # + the column modeled from SASS figures
    python3 dev/bench/roofline.py --out out/bench/roofline    # + DIR/roofline.json (scripts/gpu_check.sh)
    python3 dev/bench/roofline.py --dq-designs             # + the backward's dQ in two designs
    python3 dev/bench/roofline.py --dq-designs --sass FILE # + both backward designs from SASS figures
    python3 dev/bench/roofline.py --calibration            # the calibrated H200 model: parameters, errors
    python3 dev/bench/roofline.py --speed-steps            # issue 52's speed steps as modeled gains
    python3 dev/bench/roofline.py --prefill                # the Last prefill's last layer: modeled gain
    python3 dev/bench/roofline.py --predict PREFIX --commit SHA   # per-kernel prediction, PREFIX.json/.md
    python3 dev/bench/roofline.py --compare PROFILE.json --prediction PRED.json [--case NAME]

The roofline below is the static model (H100 limits, no calibration). The calibrated model of the
H200 (a kernel's duration from fixed costs, waves, tails and per-family efficiencies fitted to the
GPU runs at fa663e0 and 4628997) is the section "Calibrated model of the GPU" further down; its rules
are in that section's comment and in docs/cuda_kernels.md ("Calibrated model").

The step is the CUDA backend's op list (llmc/cuda/gpt2_cuda.cuh: forward, backward;
llmc/cuda/gpt2_cuda_io.cuh: grad_norm, adamw_update), one micro-batch of B x T tokens (N = B T). Per op:
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
gradient memset, the bf16 weight copy as its own pass, the attention backward's D = rowsum(dO O)
pass and the dQ kernel's second read of q, k, v, dO. FLOPs are the same.

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
# The one-pass backward's dK/dV kernel (attn_bwd_kv_onepass_kernel<HD, SOFTCAP>, the lab's candidate
# --kernel onepass, dev/cuda/attention_candidates/): the four GEMMs above and dQ's part dS K per visited
# tile. Its instances are kept apart from the production kernel's under this key (dq_designs_sass), never in the step.
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
    # as implemented, the step's one classifier pass reads the logits twice (loss, then dlogits) and
    # writes the dlogits: the forward's read and this op's read and write, nothing beyond
    op("classifier bwd (dlogits)", "backward").add(3 * N * V, N * V * ACT + N * F32 + N * 4 + N * Vp * ACT)
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
            out.append(f"| one-pass (lab candidate), handoff at its {edge} | {fmt_us(d['one_pass_compute_s'])} | "
                       f"{d[f'one_pass_{edge}_bytes'] / 1e6:,.1f} | {fmt_us(d[f'one_pass_{edge}_bytes'] / BANDWIDTH)} | "
                       f"{fmt_us(d[f'one_pass_{edge}_s'])} |")
    return "\n".join(out)


def dq_designs_sass(m, sass):
    """The attention backward per layer of model shape m in both designs, modeled from SASS figures
    (MODELED, nothing measured): two-pass (built: the dK/dV and dQ kernels, sass_time of the step's
    op with today's passes) and one-pass (the lab's candidate --kernel onepass: the one-pass dK/dV kernel's tensor work,
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
            one_pass = one_pass_instance(name) and base == "attn_bwd_kv_fa2_kernel"
            if (base not in name and not one_pass) or near_far_instance(name):
                continue
            t = re.search(r"_kernel\s*<\s*(\d+)", name)
            hd = int(t.group(1)) if t else None
            key = (ONE_PASS_KERNEL if one_pass else base, hd)
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
    """Whether name is the one-pass backward's dK/dV kernel (attn_bwd_kv_onepass_kernel<HD, SOFTCAP>),
    which the step does not run (the lab's candidate --kernel onepass)."""
    return re.search(r"attn_bwd_kv_onepass_kernel\s*<", name) is not None


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



# ================================================================================================
# Calibrated model of the GPU: MODELED, calibrated against GPU measurements at fa663e0, c276bf2, cb93781 (H200)
# ================================================================================================
# Rules (docs/cuda_kernels.md "Calibrated model", dev/bench/README.md): a kernel's duration is a fixed
# cost per launch plus the work of its family at a calibrated rate:
#   memory-bound kernels  t = kernel_fixed_us + bytes / (H200 bandwidth x eff_<family>); a lab row timed
#                         with events around its launches adds lab_event_us once per timed window
#   cuBLASLt GEMMs        t = gemm_fixed_us + gemm_wave_us x ceil(tiles / 132) + max(gemm_kstep_us x
#                         k-steps per SM, bytes / H200 bandwidth), tiles = M N / 128^2, k-steps per SM =
#                         tiles x ceil(K / 64) / 132 (the K loop spread evenly over the SMs: stream-K /
#                         split-K); an output of fewer than 132 tiles is split over K (splits =
#                         min(ceil(K / 64), 132 // tiles)) and cuBLASLt's reduction kernel adds
#                         kernel_fixed_us + the fp32 partials read and the output written at eff_elementwise
#   attention (FA2 class) the launch's real grid (llmc/core/attention_split.h: items, their order, the
#                         split of long tile loops; fa663e0: the unsplit (b, head) x tile grid, longest
#                         first) filling 132 SMs x occupancy (attn_kernel_us): resident blocks share an
#                         SM's issue rate (a lone block at most attn_lone_share / occupancy of it), a
#                         block's work = its family's set-up (attn_block_setup_us, attn_bwd_block_setup_us)
#                         once an outer tile it walks (a backward run: R of them) + its tiles + attn_merge_us if its outer tile is split, a tile's = occupancy x its
#                         tensor work at an SM's peak / its SASS efficiency (interior, masked, pair skips:
#                         STATIC_ATTENTION_FIGURES; the forward without statistics, as the labs time it:
#                         STATIC_ATTENTION_FIGURES_NO_STATS) / the family's issue efficiency
#   attention D kernel    one warp a row, 8 rows a block: kernel_fixed_us + attn_dot_wave_us x waves of
#                         132 x 8 resident blocks (each block one load round trip: latency, not bytes)
#   encoder grouping      fa663e0 (and HEAD up to 28765d1): one block on the device, kernel_fixed_us +
#                         positions x enc_group_ns_per_position; HEAD: on the host (off the device), its
#                         upload a copy of kernel_fixed_us + bytes / PCIE_HTOD (assumed); HEAD's wte
#                         kernel (a block a token, gathered rows): its bytes at eff_encoder_wte
#   classifier            a block a row: memory-bound + rows x classifier_row_ns; its summary (one block):
#                         kernel_fixed_us + rows x summary_row_ns
#   host -> device copies copy_fixed_us + bytes / PCIE_HTOD
#   the step              sum of its kernels + its idle time: (launches - 1) x gap_us + positions x
#                         host_ns_per_position (the host's per-token work inside the step's window); the
#                         launches as the device runs them, with cuBLASLt's memsets (counted in the
#                         cb93781 profile: CUBLASLT_MEMSETS); its split-K reductions pay no gap
# Each parameter is fitted from named measurements (MEASUREMENTS, fit_calibration: CALIBRATION_SOURCES
# says which fixes which) and checked on measurements not used to fit it (calibration_checks): the lab
# rows and steps of fa663e0, the per-kernel profile of c276bf2 (its ls-small-b8 case fits, its
# paper-b16 case checks) and that of cb93781 (its ls-small-b8 encoder wte row and the idle time of
# ls-small-b8 and paper-b16 fit; every other row and all of d12-b16 check).

H200_SMS = 132
H200_BANDWIDTH = 4.814e12  # bytes/s: the datasheet figure the labs' "% peak" uses
H200_PEAK = 989e12  # dense bf16 tensor-core FLOP/s (the labs' figure)
# host -> device copies from page-locked memory: ASSUMED (PCIe 5 x16 at about 80% of its 64 GB/s); the
# c276bf2 profile's copies fix their fixed cost (copy_fixed_us) at this rate, and its two cases' copies
# (237 and 433 KB a step) differ by 3.4 µs, i.e. 57 GB/s
PCIE_HTOD = 50e9

# The attention kernels' static figures: blocks per SM (sass_report's occupancy from registers and
# shared memory) and the efficiencies of parse_sass's rule for one instance (efficiency() of its
# full path, of its masked path, sass_report_skip), from `make sass-report` (build/sass/report.json at
# 5ce31b6: HEAD's kernels; fa663e0's hot loops are the same code, the split added an entry and a
# merge outside them).
STATIC_ATTENTION_FIGURES = {
    # (kernel, hd): (blocks per SM, eff interior, eff masked, skip or None); the instances a training
    # step runs (no soft-cap; the forward with statistics): attn_fwd_fa2_kernel<HD, true, false, false>,
    # attn_bwd_kv_fa2_kernel<HD, false>, attn_bwd_q_fa2_kernel<HD, false>
    ("attn_fwd_fa2_kernel", 32): (4, 0.37523452, 0.26075619, None),
    ("attn_fwd_fa2_kernel", 64): (3, 0.61728395, 0.45454545, None),
    ("attn_bwd_kv_fa2_kernel", 32): (4, 0.70175439, 0.44052863, (9.078125, 0.5, 1.234375, 0.0)),
    ("attn_bwd_kv_fa2_kernel", 64): (3, 1.0, 0.70546737, (5.671875, 0.25, 0.609375, 0.0)),
    ("attn_bwd_q_fa2_kernel", 32): (4, 0.69084629, 0.44345898, (9.02083333, 2.0 / 3.0, 1.54166667, 0.0)),
    ("attn_bwd_q_fa2_kernel", 64): (3, 1.0, 0.7518797, (5.32291667, 1.0 / 3.0, 0.76041667, 0.0)),
}
# The forward without statistics (attn_fwd_fa2_kernel<HD, false, false, false>: the path the kernel lab
# and attention_vs_torch time unless --near is given, and the prefill's), from the same report: its hot
# loop has 8.5 (hd 32) and 5.41 (hd 64) instructions per HMMA on the full path against the statistics
# instance's 10.66 and 6.48, so a lab row measures a faster kernel than a training step runs.
STATIC_ATTENTION_FIGURES_NO_STATS = {
    ("attn_fwd_fa2_kernel", 32): (4, 0.47058824, 0.31520883, None),
    ("attn_fwd_fa2_kernel", 64): (3, 0.73937153, 0.52910053, None),
}


def attn_figures(kernel, hd, stats=True):
    """STATIC_ATTENTION_FIGURES' entry of a kernel; stats=False: the forward's instance without
    statistics (the backward has one instance in a step)."""
    if not stats and (kernel, hd) in STATIC_ATTENTION_FIGURES_NO_STATS:
        return STATIC_ATTENTION_FIGURES_NO_STATS[(kernel, hd)]
    return STATIC_ATTENTION_FIGURES[(kernel, hd)]


ATTN_GEMMS = {"attn_fwd_fa2_kernel": 2, "attn_bwd_kv_fa2_kernel": 4, "attn_bwd_q_fa2_kernel": 3}
# llmc/core/attention_split.h's chunk-size constants and the longest run of outer tiles (kAttnRunTiles)
SPLIT_MIN_TILES, SPLIT_RESIDENT_BLOCKS, SPLIT_CHAIN_SHARE, RUN_TILES = 4, 132 * 4, 4, 4


def _cdiv(a, b):
    return -(-a // b)


def attn_ranges(T, P, local, by_key, tile=TILE):
    """Inner tile ranges [begin, end) per outer tile (llmc/core/attention_tiles.h, tiles of 64): a
    query tile's key tiles (forward, dQ) or a key tile's query tiles (dK/dV)."""
    out = []
    for o in range(_cdiv(T, tile)):
        if by_key:
            k1 = min(o * tile + tile, T)
            out.append((o, _cdiv(min(T, k1 - 1 + P) if local else T, tile)))
        else:
            out.append(((max(0, o * tile - P + 1) if local else 0) // tile, _cdiv(min(o * tile + tile, T), tile)))
    return out


def attn_split_chunk(T, P, B, NH, G, by_key, local):
    """attn_split_kind's chunk size S (chosen from the shape) of one head kind; n_inner: not split."""
    work, longest = {}, {}
    for kind in (True, False):
        r = attn_ranges(T, P, kind, by_key)
        work[kind], longest[kind] = sum(e - b for b, e in r), max(e - b for b, e in r)
    n_inner = _cdiv(T, TILE)
    s = _cdiv(B * (G * work[False] + (NH - G) * work[True]), SPLIT_RESIDENT_BLOCKS * SPLIT_CHAIN_SHARE)
    S = n_inner if s >= longest[local] else max(SPLIT_MIN_TILES, s)
    return n_inner if S >= longest[local] else S


def attn_run_tiles(T, P, B, heads, by_key, local):
    """attn_split_kind's chosen runs of outer tiles for an unsplit kind (llmc/core/attention_split.h):
    R = min(RUN_TILES, blocks // SPLIT_RESIDENT_BLOCKS) where every outer tile's inner range starts no
    earlier than the previous one's last tile (attn_run_allowed), else 1."""
    r = attn_ranges(T, P, local, by_key)
    if any(r[o + 1][0] < r[o][1] - 1 or r[o + 1][0] < r[o][0] for o in range(len(r) - 1)):
        return 1
    return max(1, min(RUN_TILES, B * heads * len(r) // SPLIT_RESIDENT_BLOCKS))


def attn_blocks(T, P, B, NH, G, by_key, split=True, runs=False, with_outers=False):
    """The blocks of one FA2-class launch in launch order: (masked flag per tile, merges partials,
    local head). split=True: HEAD's grid (attention_split.h: the global heads' items first, item-major
    over (b, head), then the local heads'; long tile loops cut into chunks); split=False: fa663e0's
    grid (blockIdx.x = (b, head) fastest, blockIdx.y = the outer tile, longest first). runs (with
    split): the backward's runs of outer tiles (a kind that is not split walks R consecutive outer
    tiles a block: attn_run_tiles; query tiles' runs from the end, key tiles' from the start).
    with_outers: each block also says how many outer tiles it walks (R in a run, else 1)."""
    def tiles(o, lo, hi, local):
        return tuple(masked_tile(i if by_key else o, o if by_key else i, T, P, local) for i in range(lo, hi))

    if not split:
        kinds = {}
        for local in (True, False):
            r = attn_ranges(T, P, local, by_key)
            order = range(len(r)) if by_key else range(len(r) - 1, -1, -1)
            kinds[local] = [tiles(o, *r[o], local) for o in order]
        return [(kinds[h >= G][y], False, h >= G) + ((1,) if with_outers else ()) for y in range(len(kinds[True]))
                for _ in range(B) for h in range(NH)]
    blocks = []
    for local, heads in ((False, G), (True, NH - G)):
        if heads <= 0:
            continue
        r = attn_ranges(T, P, local, by_key)
        n_inner = _cdiv(T, TILE)
        S = attn_split_chunk(T, P, B, NH, G, by_key, local)
        R = attn_run_tiles(T, P, B, heads, by_key, local) if runs and S == n_inner else 1
        if R > 1:
            n = len(r)
            for y in range(_cdiv(n, R)):
                lo, hi = (y * R, min(n, y * R + R)) if by_key else (max(0, n - y * R - R), n - y * R)
                walk = tuple(m for o in range(lo, hi) for m in tiles(o, *r[o], local))
                blocks.extend([(walk, False, local, hi - lo)] * (B * heads))
            continue
        z = (S - n_inner % S) % S if by_key else 0
        for j in range(_cdiv(n_inner + z, S)):
            lo, hi = max(0, j * S - z), min(n_inner, (j + 1) * S - z)
            outers = [o for o, (b, e) in enumerate(r) if b < hi and e > lo]
            for o in (outers if by_key else outers[::-1]):
                b, e = r[o]
                merges = _cdiv(e + z, S) - (b + z) // S > 1
                blocks.extend([(tiles(o, max(b, lo), min(e, hi), local), merges, local, 1)] * (B * heads))
    return blocks if with_outers else [b[:3] for b in blocks]


def masked_tile(qt, kt, T, P, local, tile=TILE):
    """attn_tile_needs_mask for one visited tile (masked_tile_list's rule)."""
    q0, q1, k0, k1 = qt * tile, qt * tile + tile, kt * tile, kt * tile + tile
    return q1 > T or k1 > T or k1 - 1 > q0 or (local and k0 <= q1 - 1 - P)


def attn_tile_us(kernel, hd, masked, pair_fraction, issue_eff, stats=True):
    """One tile's time on one slot (µs): occupancy x its tensor work at an SM's peak x its SASS factor
    (1 / eff, or masked_factor on a masked tile; attn_figures) / the calibrated issue efficiency."""
    occ, eff, eff_m, skip = attn_figures(kernel, hd, stats)
    work = ATTN_GEMMS[kernel] * 2 * hd * TILE * TILE / (H200_PEAK / H200_SMS)
    if not masked:
        factor = 1.0 / eff
    else:
        factor = masked_factor(SassFigure(0, None, None, eff, eff_m, skip), pair_fraction)
    return occ * work * factor / issue_eff * 1e6


_BLOCK_CACHE = {}


def attn_block_kinds(T, P, B, NH, G, by_key, split=True, runs_of_tiles=False):
    """attn_blocks folded for speed: per block in launch order (interior tiles, masked tiles, merges,
    local, outer tiles walked), as a list of (kind, count) runs of equal consecutive blocks (cached per shape)."""
    key = (T, P, B, NH, G, by_key, split, runs_of_tiles)
    if key not in _BLOCK_CACHE:
        runs = []
        for tl, merges, local, outers in attn_blocks(T, P, B, NH, G, by_key, split, runs_of_tiles, with_outers=True):
            kind = (len(tl) - sum(tl), sum(tl), merges, local, outers)
            if runs and runs[-1][0] == kind:
                runs[-1][1] += 1
            else:
                runs.append([kind, 1])
        _BLOCK_CACHE[key] = [(k, n) for k, n in runs]
    return _BLOCK_CACHE[key]


def attn_kernel_flops(kernel, hd, T, P, B, NH, G, split=True, runs=False):
    """A FA2-class attention launch's tile FLOPs as executed: every visited 64 x 64 tile (masked ones
    whole) x its GEMMs (ATTN_GEMMS) x 2 hd TILE^2."""
    by_key = kernel == "attn_bwd_kv_fa2_kernel"
    runs = runs and kernel != "attn_fwd_fa2_kernel" and hd <= 64
    tiles = sum((n_int + n_mask) * count
                for (n_int, n_mask, *_), count in attn_block_kinds(T, P, B, NH, G, by_key, split, runs))
    return tiles * ATTN_GEMMS[kernel] * 2 * hd * TILE * TILE


def attn_kernel_us(kernel, hd, T, P, B, NH, G, cal, split=True, stats=True, runs=False):
    """A FA2-class attention launch's modeled duration (µs). Its blocks, in launch order, fill 132 SMs x
    occupancy slots (breadth first, then each freed slot takes the next block); an SM's resident
    blocks share its issue rate: each runs at min(1 / resident, attn_lone_share / occupancy) of the
    SM's rate (attn_lone_share = 1: a block never runs faster than with the SM full; = occupancy: a
    lone block takes the whole SM), so the tail of a launch (a global head's long tile chain) runs
    faster than the full waves. A block's work at the whole SM's rate: its family's set-up
    (attn_block_setup_us forward, attn_bwd_block_setup_us backward) + its tiles (attn_tile_us /
    occupancy) + attn_merge_us when its outer tile is split (its partial stored, the arrival, the last
    block's merge). stats: the forward's instance
    with statistics (a training step's) or without (the lab's, the prefill's). runs: the backward's runs
    of outer tiles (HEAD since they were built; at hd 32 / 64, the kernels that take them): a run's
    block pays the set-up once for each of its R outer tiles (the GPU at cb93781 measured no gain from
    the runs: the set-up is each outer tile's loads and stores, not the block's start)."""
    import heapq
    by_key = kernel == "attn_bwd_kv_fa2_kernel"
    family = "attn_fwd" if kernel == "attn_fwd_fa2_kernel" else "attn_bwd"
    issue = cal[f"{family}_issue_eff_hd{hd}"]
    setup_key = "attn_block_setup_us" if family == "attn_fwd" else "attn_bwd_block_setup_us"
    side = "keys" if by_key else "rows"
    occ = attn_figures(kernel, hd, stats)[0]
    t_int = attn_tile_us(kernel, hd, False, 1.0, issue, stats) / occ
    t_mask = {loc: attn_tile_us(kernel, hd, True, masked_pair_fraction(side, T, P if loc else T, loc), issue,
                                stats) / occ for loc in (True, False)}
    lone = min(1.0, cal["attn_lone_share"] / occ)
    work = []
    runs = runs and family == "attn_bwd" and hd <= 64
    for (n_int, n_mask, merges, local, outers), count in attn_block_kinds(T, P, B, NH, G, by_key, split, runs):
        w = ((outers * cal[setup_key] + (cal["attn_merge_us"] if merges else 0.0)) / occ + n_int * t_int
             + n_mask * t_mask[local])
        work.extend([w] * count)
    sms = [[] for _ in range(H200_SMS)]  # remaining work of each SM's resident blocks
    last = [0.0] * H200_SMS
    nxt = 0
    for _ in range(occ):  # breadth-first fill
        for sm in range(H200_SMS):
            if nxt < len(work):
                sms[sm].append(work[nxt])
                nxt += 1
    events = []

    def schedule(sm, now):
        if sms[sm]:
            rate = min(lone, 1.0 / len(sms[sm]))
            heapq.heappush(events, (now + min(sms[sm]) / rate, sm))

    for sm in range(H200_SMS):
        schedule(sm, 0.0)
    end = 0.0
    while events:
        t, sm = heapq.heappop(events)
        if not sms[sm]:
            continue
        rate = min(lone, 1.0 / len(sms[sm]))
        done = (t - last[sm]) * rate
        due = min(sms[sm]) / rate + last[sm]
        if due > t * (1 + 1e-12) + 1e-12:
            continue  # a stale event: this SM's set changed since
        rem = [r - done for r in sms[sm]]
        keep = [r for r in rem if r > 1e-9]
        finished = len(rem) - len(keep)
        last[sm] = t
        end = max(end, t)
        while finished > 0 and nxt < len(work):
            keep.append(work[nxt])
            nxt += 1
            finished -= 1
        sms[sm] = keep
        schedule(sm, t)
    return cal["kernel_fixed_us"] + end


def gemm_waves_ksteps(M, N, K, tile=128):
    """(waves, k-steps per SM) of a GEMM with an M x N output and depth K: waves = ceil(tiles / 132)
    of 128 x 128 output tiles; the k-steps (128 x 128 x 64 multiply-adds) spread evenly over the 132
    SMs (stream-K / split-K: cuBLASLt's Hopper kernels balance the K loop over the SMs)."""
    tiles = M * N / (tile * tile)
    return _cdiv(M * N, tile * tile * H200_SMS), tiles * _cdiv(K, 64) / H200_SMS


def gemm_splits(M, N, K, tile=128):
    """The K splits of a GEMM whose output has fewer 128 x 128 tiles than the device has SMs:
    min(k-steps, 132 // tiles) (1: not split)."""
    tiles = _cdiv(M, tile) * _cdiv(N, tile)
    return 1 if tiles >= H200_SMS else max(1, min(_cdiv(K, 64), H200_SMS // tiles))


def gemm_bytes(M, N, K, out_bytes=ACT, accumulate=False):
    """A GEMM's compulsory traffic: both operands read once (bf16), the output written (and read when
    accumulating, beta = 1)."""
    return (M * K + K * N) * ACT + M * N * out_bytes * (2 if accumulate else 1)


def gemm_us(M, N, K, cal, out_bytes=ACT, accumulate=False, gelu_epilogue=False):
    """A cuBLASLt call's modeled duration (µs): gemm_fixed_us + gemm_wave_us x waves + max(gemm_kstep_us
    x k-steps per SM, bytes / bandwidth); the GELU epilogue's pre-activation copy (M x N bf16) at
    eff_gelu_epilogue on top."""
    w, s = gemm_waves_ksteps(M, N, K)
    t = cal["gemm_fixed_us"] + cal["gemm_wave_us"] * w + max(
        cal["gemm_kstep_us"] * s, gemm_bytes(M, N, K, out_bytes, accumulate) / H200_BANDWIDTH * 1e6)
    splits = gemm_splits(M, N, K)
    if splits > 1:  # split-K: cuBLASLt's reduction kernel reads the fp32 partials and writes the output
        t += cal["kernel_fixed_us"] + (splits + 1) * M * N * F32 / (H200_BANDWIDTH * cal["eff_elementwise"]) * 1e6
    if gelu_epilogue:
        t += M * N * ACT / (H200_BANDWIDTH * cal["eff_gelu_epilogue"]) * 1e6
    return t


def classifier_us(rows, nbytes, family, cal):
    """The classifier kernel (one block a row): mem_us + rows x classifier_row_ns."""
    return mem_us(nbytes, family, cal) + rows * cal["classifier_row_ns"] * 1e-3


# HEAD's classifier kernel (llmc/cuda/classifier.cuh since the row-in-registers rewrite): at most
# CLASSIFIER_ROW_VECS 16-byte vectors a thread, up to CLASSIFIER_MAX_THREADS threads a row, and SASS
# instructions a column on the hot paths (static, counted by hand in the bf16 cubin: pass 1's
# per-vector online softmax ~10, pass 2's dlogits ~7, each with the FADD of x - M); the issue efficiency is ASSUMED equal to the calibrated hd-32 attention
# backward's (attn_bwd_issue_eff_hd32), not measured for this kernel.
CLASSIFIER_ROW_VECS = 5
CLASSIFIER_MAX_THREADS = 512
CLASSIFIER_INSTR_PER_COLUMN = 17
H200_CLOCK_HZ = 1.83e9  # the clock H200_PEAK is quoted at (4 warp instructions a clock an SM)


def classifier_rowregs_bytes(rows, Vp):
    """HEAD's classifier kernel's traffic: a row of one segment read once, a longer one twice, and the
    dlogits written."""
    reads = 1 if Vp * ACT // 16 <= CLASSIFIER_ROW_VECS * CLASSIFIER_MAX_THREADS else 2
    return rows * Vp * ACT * (reads + 1)


def classifier_rowregs_us(rows, Vp, cal):
    """HEAD's classifier kernel (loss, lse and dlogits in one pass): a row of one segment
    (Vp / 8 <= 5 x 512 vectors) read once and written once, a longer one read twice (the second read
    counted as DRAM: an upper bound), at eff_elementwise (ASSUMED: a streaming kernel's measured
    rate), or the issue bound when that is longer: kernel_fixed_us + max(bytes, issue)."""
    mem = classifier_rowregs_bytes(rows, Vp) / (H200_BANDWIDTH * cal["eff_elementwise"]) * 1e6
    issue = rows * Vp * CLASSIFIER_INSTR_PER_COLUMN / 32 / (
        H200_SMS * 4 * H200_CLOCK_HZ * cal["attn_bwd_issue_eff_hd32"]) * 1e6
    return cal["kernel_fixed_us"] + max(mem, issue)


def mem_us(nbytes, family, cal):
    """A memory-bound kernel's modeled duration (µs)."""
    return cal["kernel_fixed_us"] + nbytes / (H200_BANDWIDTH * cal[f"eff_{family}"]) * 1e6


ATTN_DOT_ROWS_PER_BLOCK = 8  # attn_bwd_dot_kernel: one warp a row, 256 threads (llmc/cuda/attention_ls.cuh)
ATTN_DOT_BLOCKS_PER_SM = 8  # 2048 threads an SM / 256


def attn_dot_waves(B, T, NH):
    return _cdiv(_cdiv(B * NH * T, ATTN_DOT_ROWS_PER_BLOCK), H200_SMS * ATTN_DOT_BLOCKS_PER_SM)


def attn_dot_us(B, T, NH, cal):
    """attn_bwd_dot_kernel (D = rowsum(dO O) per head row): each block's warps read one head row each
    (hd bf16: 64 bytes at hd 32) and exit, so a wave of resident blocks costs a load round trip, not its
    bytes: kernel_fixed_us + attn_dot_waves x attn_dot_wave_us."""
    return cal["kernel_fixed_us"] + attn_dot_waves(B, T, NH) * cal["attn_dot_wave_us"]


def classifier_summary_us(rows, cal):
    """classifier_summary_kernel: one block reads the rows' loss, z-loss, lse and max: kernel_fixed_us +
    rows x summary_row_ns (one SM's rate)."""
    return cal["kernel_fixed_us"] + rows * cal["summary_row_ns"] * 1e-3


def htod_us(nbytes, cal):
    """A host -> device copy: copy_fixed_us + its bytes at PCIE_HTOD."""
    return cal["copy_fixed_us"] + nbytes / PCIE_HTOD * 1e6


# The lab candidate dev/cuda/matmul_candidates/small_k_gemm.cuh (a GEMM with the whole K = 192 in
# shared memory and the GELU in its epilogue; not wired into the trainer): SASS instructions a warp
# executes for a whole 128 x 128 tile (static, bf16 cubin, nvcc 13 sm_90, counted with one GELU kind
# compiled alone and the whole-tile path alone): the plain product 632 (B Rows) / 608 (B Cols), and
# on top, for each of the 64 elements a thread holds, the GELU epilogue's: erf forward 28.75, erf
# backward 42.125, tanh forward 25.25, tanh backward 33.875 (the GELU, the conversions, the second
# store or the pre load). The production GELU kernels' loops (llmc/cuda/gelu.cuh, erf, a pack of 8
# elements): 222 (forward) and 353 (backward) instructions, 27.75 and 44.125 an element.
SMALLK_K = 192
SMALLK_TILE = 128
SMALLK_WARP_INSTR = {"Rows": 632, "Cols": 608}
SMALLK_EPI_INSTR = {("fwd", "erf"): 28.75, ("bwd", "erf"): 42.125, ("fwd", "tanh"): 25.25, ("bwd", "tanh"): 33.875}
GELU_KERNEL_INSTR = {("fwd", "erf"): 27.75, ("bwd", "erf"): 44.125}
# What the candidate replaces at paper-b16, GPU at c2b0f82 (its profile, µs a call, 6 calls each): the
# fc forward (m 768 n 32768 k 192 TN: nvjet ..._256x128_..._coopA_TNT) and fcproj's dinp (NN:
# ..._coopA_NNT), gelu_forward_kernel and gelu_backward_kernel (erf).
SMALLK_PROD_C2B0F82 = {"fwd_gemm": 135.3 / 6, "bwd_gemm": 135.2 / 6, "fwd_gelu": 205.4 / 6, "bwd_gelu": 269.6 / 6}
SMALLK_PAPER_MN = (16 * 2048, 4 * 192)  # the lab's timing shape: the paper model's MLP at B16 x T2048


def gelu_fwd_issue_eff(cal):
    """The issue efficiency gelu_forward_kernel (erf) reached at paper-b16 on the GPU at c2b0f82, taken as
    issue-bound: its static instructions (GELU_KERNEL_INSTR) over its measured time after kernel_fixed_us."""
    M, N = SMALLK_PAPER_MN
    warp_instr = M * N * GELU_KERNEL_INSTR[("fwd", "erf")] / 32
    return warp_instr / (H200_SMS * 4 * H200_CLOCK_HZ * (SMALLK_PROD_C2B0F82["fwd_gelu"] - cal["kernel_fixed_us"]) * 1e-6)


def small_k_us(M, N, cal, layout="Rows", epi=None, gelu="erf", overlap=True):
    """The lab candidate, one launch of D (M, N) = A (M, 192) @ B with epilogue epi (None; "fwd": pre and
    gelu(pre) written; "bwd": pre read), modeled µs: kernel_fixed_us + the longest of its traffic at
    eff_elementwise (A read once, D written, pre written or read; B from L2), its issue time and its
    products at half the tensor peak (mma.sync, ASSUMED). Issue: the product's instructions at
    gelu_fwd_issue_eff (ASSUMED: the hot loop is mma and ldmatrix, not elementwise code), plus the erf
    epilogue priced as the production GELU kernel measured per instruction at c2b0f82 (pessimistic where
    that kernel waited on memory: its time counted as issue); a tanh epilogue at gelu_fwd_issue_eff.
    overlap: the epilogue's issue hidden under the other resident block's products (the upper bound);
    False: added to the products' time (a block's epilogue follows its own products, and 2 blocks an SM
    overlap only partly: the lower bound)."""
    tiles = -(-M // SMALLK_TILE) * -(-N // SMALLK_TILE)
    rate = H200_SMS * 4 * H200_CLOCK_HZ
    product_issue = tiles * 8 * SMALLK_WARP_INSTR[layout] / (rate * gelu_fwd_issue_eff(cal)) * 1e6
    epi_issue = 0.0
    if epi is not None:
        per_elem = SMALLK_EPI_INSTR[(epi, gelu)]
        if gelu == "erf":
            measured = SMALLK_PROD_C2B0F82[f"{epi}_gelu"] - cal["kernel_fixed_us"]
            pM, pN = SMALLK_PAPER_MN
            epi_issue = measured * (M * N) / (pM * pN) * per_elem / GELU_KERNEL_INSTR[(epi, "erf")]
        else:
            epi_issue = M * N * per_elem / 32 / (rate * gelu_fwd_issue_eff(cal)) * 1e6
    mem = (M * SMALLK_K + M * N * (1 if epi is None else 2)) * ACT / (H200_BANDWIDTH * cal["eff_elementwise"]) * 1e6
    mma = 2 * M * N * SMALLK_K / (H200_PEAK * 0.5) * 1e6
    busy = max(mma, product_issue + epi_issue) if overlap else max(mma, product_issue) + epi_issue
    return cal["kernel_fixed_us"] + max(mem, busy)


def small_k_rows(cal, overlap=True):
    """The lab's timing rows at its shape (dev/cuda/matmul_small_k.cu, the names it prints), µs a call: the
    production pairs and GEMMs as the GPU at c2b0f82 measured them in the paper-b16 profile
    (SMALLK_PROD_C2B0F82), the candidate modeled (small_k_us with overlap)."""
    M, N = SMALLK_PAPER_MN
    p = SMALLK_PROD_C2B0F82
    return {"cuBLASLt + gelu_forward (prod)": p["fwd_gemm"] + p["fwd_gelu"],
            "small_k GeluForward (Rows)": small_k_us(M, N, cal, "Rows", "fwd", overlap=overlap),
            "cuBLASLt forward alone": p["fwd_gemm"],
            "small_k Plain (Rows)": small_k_us(M, N, cal, "Rows", overlap=overlap),
            "cuBLASLt dinp + gelu_backward": p["bwd_gemm"] + p["bwd_gelu"],
            "small_k GeluBackward (Cols)": small_k_us(M, N, cal, "Cols", "bwd", overlap=overlap),
            "cuBLASLt dinp alone": p["bwd_gemm"],
            "small_k Plain (Cols)": small_k_us(M, N, cal, "Cols", overlap=overlap)}


def small_k_gain(cal, L, overlap=True):
    """µs a step if the candidate were wired for every layer's fc forward and fcproj dinp (paper-b16)."""
    r = small_k_rows(cal, overlap)
    return L * (r["cuBLASLt + gelu_forward (prod)"] - r["small_k GeluForward (Rows)"]
                + r["cuBLASLt dinp + gelu_backward"] - r["small_k GeluBackward (Cols)"])


BIAS_ROWS = 128  # rows of a bias_sum_kernel chunk (llmc/cuda/matmul.cuh kBiasRows)
BIAS_GROUP_COLS = 64  # bf16 columns of a column group (kBiasGroupCols)
BIAS_GRID_AIM = 132 * 3  # HEAD's grid aim: one wave of 3 resident blocks an SM (kBiasGridAim)
# HEAD's bias_sum_kernel, SASS instructions an element (static, bf16 cubin, nvcc 13 sm_90, counted by
# compiling the kernel with one path alone: the plain sum's chunk body ~2 an element (4 loads, 32
# conversions and adds); a GELU path's kernel has 1144 (tanh) / 1440 (erf) instructions more than the
# plain one, over the 32 elements of a thread's chunk, plus those ~2): the derivative, conversions, the
# rounding, the store and the sum
BIAS_INSTR_PER_ELEMENT = {None: 2, "tanh": 38, "erf": 47}


def bias_kinds(C):
    """A layer's bias gradients in the backward's order: (OC, with the GELU backward's pass)."""
    return ((C, False), (4 * C, True), (C, False), (3 * C, False))


def bias_row_blocks(Ntok, OC):
    """HEAD's row blocks Y of bias_sum_kernel's grid (llmc/cuda/matmul.cuh bias_row_blocks)."""
    chunks, groups = _cdiv(Ntok, BIAS_ROWS), _cdiv(OC, BIAS_GROUP_COLS)
    most = max(1, BIAS_GRID_AIM // groups)
    return _cdiv(chunks, _cdiv(chunks, most))


def bias_sum_us(Ntok, OC, cal, gelu_pass, packed=True, rowblocks=False, gelu="tanh"):
    """One bias_sum_kernel launch (dbias += column sums of dout (Ntok, OC); with gelu_pass dout is first
    replaced by dout * gelu'(pre) of kind gelu in the same pass).
    rowblocks (HEAD): each block sums several row chunks (bias_row_blocks), 3 resident blocks an SM:
    its traffic (bias_sum_rowblocks_bytes) at eff_elementwise, or its issue bound
    (BIAS_INSTR_PER_ELEMENT at attn_bwd_issue_eff_hd32), whichever is longer (ASSUMED, as for HEAD's
    other rewritten streaming kernels: not fitted, held out against the cb93781 profile (--calibration's
    checks); c276bf2's packed kernel, modeled so before it ran, measured at eff_bias_sum 0.36).
    packed (c276bf2): 16-byte column packs, a block a chunk, 4 rows in flight a thread: its traffic
    (bias_sum_bytes) at eff_bias_sum (the c276bf2 profile's rate of the kernel).
    Neither: fa663e0's kernel (one bf16 element per thread and row): the GELU pass at the measured
    eff_bias_gelu_bwd, the plain sum as the calibration has always modeled it (eff_elementwise: never
    measured alone)."""
    if rowblocks:
        mem = bias_sum_rowblocks_bytes(Ntok, OC, gelu_pass) / (H200_BANDWIDTH * cal["eff_elementwise"]) * 1e6
        instr = BIAS_INSTR_PER_ELEMENT[gelu if gelu_pass else None]
        issue = Ntok * OC * instr / 32 / (H200_SMS * 4 * H200_CLOCK_HZ * cal["attn_bwd_issue_eff_hd32"]) * 1e6
        return cal["kernel_fixed_us"] + max(mem, issue)
    if not packed:
        return (mem_us(Ntok * OC * ACT * 3, "bias_gelu_bwd", cal) if gelu_pass
                else mem_us(Ntok * OC * ACT, "elementwise", cal))
    return mem_us(bias_sum_bytes(Ntok, OC, gelu_pass), "bias_sum", cal)


def layernorm_bwd_blocks(N, C):
    """layernorm_backward_cached_kernel's blocks (each writes a (2, C) fp32 partial)."""
    return _cdiv(min(N, 4096 if C <= 256 else 2048), max(1, min(8, 48 * 1024 // (8 * C))))


def layernorm_bwd_bytes(N, C):
    """One LayerNorm backward launch's traffic: dout, x, dresidual read and written (4 N C bf16), the
    row statistics, its blocks' partials."""
    return 4 * N * C * ACT + 8 * N + layernorm_bwd_blocks(N, C) * 2 * C * F32


def bias_sum_bytes(Ntok, OC, gelu_pass):
    """c276bf2's bias_sum_kernel's traffic: dout read (with the GELU pass also pre read and dout
    written), the chunks' fp32 partials written and read once."""
    return Ntok * OC * ACT * (3 if gelu_pass else 1) + -(-Ntok // BIAS_ROWS) * OC * F32 * 2


def bias_sum_rowblocks_bytes(Ntok, OC, gelu_pass):
    """HEAD's bias_sum_kernel's traffic: as c276bf2's, with a partial per row block, not per chunk."""
    return Ntok * OC * ACT * (3 if gelu_pass else 1) + bias_row_blocks(Ntok, OC) * OC * F32 * 2


def matmul_backward_us(Ntok, IC, OC, cal, bias=True, gelu_pass=False):
    """The matmul backward as the lab timed it at fa663e0: dinp GEMM (Ntok x IC, K = OC), dW GEMM (OC x
    IC, K = Ntok, fp32, added into), and fa663e0's bias-sum kernel (reads dout; with gelu_pass also the
    GELU backward: reads the pre-activation, writes dinp of the GELU in place)."""
    t = gemm_us(Ntok, IC, OC, cal) + gemm_us(OC, IC, Ntok, cal, out_bytes=F32, accumulate=True)
    if gelu_pass or bias:
        t += bias_sum_us(Ntok, OC, cal, gelu_pass, packed=False)
    return t


# The GPU measurements the calibration uses or is checked on: id -> (µs, what it is). ids name the run
# and the table: docs/results/2026-11-27-H200-fa663e0/report.txt unless they start with 4628997.
MEASUREMENTS = {
    # lab:matmul (cuBLASLt), median of 50, L2 flushed
    "fa663e0 matmul fwd N8192 IC768 OC2304": 48.6,
    "fa663e0 matmul fwd N8192 IC768 OC768": 20.7,
    "fa663e0 matmul fwd N8192 IC768 OC3072": 60.6,
    "fa663e0 matmul fwd N8192 IC3072 OC768": 53.8,
    "fa663e0 matmul fwd N8192 IC768 OC50304": 896.1,
    "fa663e0 matmul fwd N16384 IC192 OC576": 16.4,
    "fa663e0 matmul fwd N16384 IC192 OC768": 17.5,
    "fa663e0 matmul fwd N16384 IC768 OC192": 15.9,
    "fa663e0 matmul fwd N16384 IC192 OC10112": 132.4,
    "fa663e0 matmul fwd+gelu-epilogue N8192 IC768 OC3072": 79.3,
    "fa663e0 matmul fwd+gelu-epilogue N16384 IC192 OC768": 29.0,
    "fa663e0 matmul bwd N8192 IC768 OC2304": 112.8,
    "fa663e0 matmul bwd N8192 IC768 OC768": 50.5,
    "fa663e0 matmul bwd N8192 IC768 OC3072": 139.7,
    "fa663e0 matmul bwd N8192 IC3072 OC768": 126.2,
    "fa663e0 matmul bwd N8192 IC768 OC50304": 1766.7,
    "fa663e0 matmul bwd N16384 IC192 OC576": 39.8,
    "fa663e0 matmul bwd N16384 IC192 OC768": 46.9,
    "fa663e0 matmul bwd N16384 IC768 OC192": 46.6,
    "fa663e0 matmul bwd N16384 IC192 OC10112": 208.3,
    "fa663e0 matmul gelu-bwd+bwd N8192 IC768 OC3072": 212.6,
    "fa663e0 matmul gelu-bwd+bwd N16384 IC192 OC768": 88.4,
    # memory-bound labs: (µs, bytes the lab counts = its GB/s x its ms); "adamw" is lab:adamw's
    # adamw_update row (per tensor, stochastic rounding), not its adamw_update_all row (added after fa663e0)
    "fa663e0 adamw n130023424": 1337.3,
    "fa663e0 adamw n3145728": 38.2,
    "fa663e0 copy_master n130023424": 279.4,
    "fa663e0 copy_master n3145728": 12.2,
    "4628997 global_norm n130023424": 135.2,
    "4628997 global_norm n3145728": 11.2,
    "fa663e0 gelu_forward n50331648": 55.9,
    "fa663e0 gelu_backward n50331648": 78.8,
    "fa663e0 residual_forward N16384 C768": 22.8,
    "fa663e0 add_inplace N16384 C768": 22.4,
    "fa663e0 layernorm_forward N16384 C768": 20.7,
    "fa663e0 fused_residual_layernorm_forward N16384 C768": 31.6,
    "fa663e0 layernorm_backward N16384 C768": 97.2,
    "fa663e0 encoder_forward B16 T1024 C768": 20.0,
    "fa663e0 encoder_backward B16 T1024 C768": 527.2,
    "fa663e0 classifier forward N8192 Vp50304": 374.4,
    "fa663e0 classifier forward+dlogits N8192 Vp50304": 681.0,
    "fa663e0 classifier forward N16384 Vp10112": 223.6,
    "fa663e0 classifier forward+dlogits N16384 Vp10112": 327.6,
    # lab:attention_ls's production pair and bench:attention_vs_torch's "ours" forward (the same
    # forward; its f+b then ran the FA2-class forward with a since-removed backward, not used)
    "fa663e0 attention fwd paper LS B8": 42.8,
    "fa663e0 attention fwd+bwd paper LS B8": 157.3,
    "fa663e0 attention fwd paper LS B64": 176.6,
    "fa663e0 attention fwd paper MHSA B64": 537.4,
    "fa663e0 attention fwd 124M LS T1024 B16": 52.9,
    "fa663e0 attention fwd 124M MHSA T1024 B16": 132.0,
    "fa663e0 attention fwd 124M LS T2048 B8": 59.7,
    "fa663e0 attention fwd 124M MHSA T2048 B8": 207.4,
    # training steps (the trainer's ms per step; medians)
    "fa663e0 step ls-small B8 V257": 3900.0,
    "fa663e0 step ls-small B16 V10000": 7710.0,
    "fa663e0 step d12 B16 V50257": 32190.0,
    # the per-kernel profile of the training step at c276bf2 (docs/results/2026-11-29-H200-c276bf2/report.json,
    # bench/profile/<case>.json: CUPTI, µs per step, mean of 8 steps); ls-small-b8 fits, paper-b16 checks
    "c276bf2 profile ls-small-b8 attn_fwd_fa2_kernel": 248.9,
    "c276bf2 profile paper-b16 attn_fwd_fa2_kernel": 423.9,
    "c276bf2 profile ls-small-b8 attn_bwd_kv+q": 541.7,  # attn_bwd_kv_fa2_kernel 299.1 + attn_bwd_q_fa2_kernel 242.6
    "c276bf2 profile paper-b16 attn_bwd_kv+q": 900.4,  # 494.0 + 406.4
    "c276bf2 profile ls-small-b8 attn_bwd_dot_kernel": 151.7,
    "c276bf2 profile paper-b16 attn_bwd_dot_kernel": 296.5,
    "c276bf2 profile ls-small-b8 layernorm_backward_cached_kernel": 133.0,
    "c276bf2 profile paper-b16 layernorm_backward_cached_kernel": 218.1,
    "c276bf2 profile ls-small-b8 bias_sum_kernel": 432.0,
    "c276bf2 profile ls-small-b8 classifier_summary_kernel": 10.9,
    "c276bf2 profile paper-b16 classifier_summary_kernel": 19.0,
    "c276bf2 profile ls-small-b8 memcpy HtoD": 20.0,
    "c276bf2 profile paper-b16 memcpy HtoD": 23.4,
    "c276bf2 profile ls-small-b8 idle": 371.4,
    "c276bf2 profile paper-b16 idle": 541.3,
    # the per-kernel profile of the training step at cb93781 (docs/results/2026-12-04-H200-cb93781/report.json,
    # bench/profile/<case>.json: CUPTI, µs per step, mean of 8 steps; the build sources of 3a6e0c9): the
    # encoder wte kernel's rate and the idle time fit (ls-small-b8; the idle with paper-b16), every other
    # row and all of d12-b16 (the first hd-64, C-768 profile) check
    "cb93781 profile ls-small-b8 attn_fwd_fa2_kernel": 249.0,
    "cb93781 profile paper-b16 attn_fwd_fa2_kernel": 423.4,
    "cb93781 profile d12-b16 attn_fwd_fa2_kernel": 865.7,
    "cb93781 profile ls-small-b8 attn_bwd_kv_fa2_kernel": 302.1,
    "cb93781 profile paper-b16 attn_bwd_kv_fa2_kernel": 501.7,
    "cb93781 profile d12-b16 attn_bwd_kv_fa2_kernel": 1217.0,
    "cb93781 profile ls-small-b8 attn_bwd_q_fa2_kernel": 241.5,
    "cb93781 profile paper-b16 attn_bwd_q_fa2_kernel": 405.4,
    "cb93781 profile d12-b16 attn_bwd_q_fa2_kernel": 863.6,
    "cb93781 profile ls-small-b8 attn_bwd_dot_kernel": 25.4,
    "cb93781 profile paper-b16 attn_bwd_dot_kernel": 45.1,
    "cb93781 profile d12-b16 attn_bwd_dot_kernel": 198.9,
    "cb93781 profile ls-small-b8 layernorm_backward_cached_kernel": 132.7,
    "cb93781 profile paper-b16 layernorm_backward_cached_kernel": 219.7,
    "cb93781 profile d12-b16 layernorm_backward_cached_kernel": 719.2,
    "cb93781 profile ls-small-b8 bias_sum_kernel": 288.3,
    "cb93781 profile d12-b16 bias_sum_kernel": 1731.2,
    "cb93781 profile ls-small-b8 classifier_kernel": 221.1,
    "cb93781 profile paper-b16 classifier_kernel": 429.6,
    "cb93781 profile d12-b16 classifier_kernel": 1023.4,
    "cb93781 profile ls-small-b8 adamw_all_kernel": 35.8,
    "cb93781 profile paper-b16 adamw_all_kernel": 56.3,
    "cb93781 profile d12-b16 adamw_all_kernel": 927.1,
    "cb93781 profile ls-small-b8 encoder_backward_wte_kernel": 13.2,
    "cb93781 profile paper-b16 encoder_backward_wte_kernel": 18.2,
    "cb93781 profile d12-b16 encoder_backward_wte_kernel": 60.3,
    "cb93781 profile ls-small-b8 idle": 437.0,
    "cb93781 profile paper-b16 idle": 528.8,
    "cb93781 profile d12-b16 idle": 881.1,
}
# The activities cuBLASLt adds to a step besides its GEMM kernels, counted in the cb93781 profile (GPU at
# cb93781; cuBLASLt's heuristic picks them, so the model takes the counts, it does not predict them):
# memsets beyond the step's own three (the profile's memset row: 16, 22, 102 a step; 0.4 µs each at
# ls-small-b8, charged nothing here). Each is one more launch gap in the step (step_idle_us); a shape
# not listed gets none. Its split-K reduction kernels (24, 25, 36 a step) are charged no gap: the
# profile's splitKreduce row puts 0.07 µs before them in all at ls-small-b8 (1 gap), 2.02 at paper-b16
# (13.5 gaps), 5.47 at d12-b16 (22.6 gaps), 0.07-0.24 µs a reduction (each is queued right after its
# GEMM). 3bd78f8 charged each of those a full gap_us; the profile does not support that.
CUBLASLT_MEMSETS = {"ls-small-b8": 13, "paper-b16": 19, "d12-b16": 99}
# bytes each memory-bound lab row counts (its GB/s x its ms, as printed)
LAB_BYTES = {
    "fa663e0 adamw n130023424": 2916.9e9 * 1.3373e-3, "fa663e0 adamw n3145728": 2469.9e9 * 0.0382e-3,
    "fa663e0 copy_master n130023424": 2792.0e9 * 0.2794e-3, "fa663e0 copy_master n3145728": 1548.1e9 * 0.0122e-3,
    "4628997 global_norm n130023424": 3846.8e9 * 0.1352e-3, "4628997 global_norm n3145728": 1120.3e9 * 0.0112e-3,
    "fa663e0 gelu_forward n50331648": 3603.4e9 * 0.0559e-3, "fa663e0 gelu_backward n50331648": 3830.0e9 * 0.0788e-3,
    "fa663e0 residual_forward N16384 C768": 3304.3e9 * 0.0228e-3,
    "fa663e0 add_inplace N16384 C768": 3365.6e9 * 0.0224e-3,
    "fa663e0 layernorm_forward N16384 C768": 2433.6e9 * 0.0207e-3,
    "fa663e0 fused_residual_layernorm_forward N16384 C768": 3188.1e9 * 0.0316e-3,
    "fa663e0 layernorm_backward N16384 C768": 1069.5e9 * 0.0972e-3,
    "fa663e0 encoder_forward B16 T1024 C768": 3774.9e9 * 0.0200e-3,
    "fa663e0 encoder_backward B16 T1024 C768": 298.4e9 * 0.5272e-3,
    "fa663e0 classifier forward N8192 Vp50304": 2201.1e9 * 0.3744e-3,
    "fa663e0 classifier forward+dlogits N8192 Vp50304": 2420.4e9 * 0.6810e-3,
    "fa663e0 classifier forward N16384 Vp10112": 1481.6e9 * 0.2236e-3,
    "fa663e0 classifier forward+dlogits N16384 Vp10112": 2023.0e9 * 0.3276e-3,
}
# launches a lab row times (default one): the layernorm backward's partials + reduce, the global norm's
# partials + final at 4628997 (HEAD's is one launch)
LAB_LAUNCHES = {"fa663e0 layernorm_backward N16384 C768": 2, "4628997 global_norm n130023424": 2,
                "4628997 global_norm n3145728": 2}


def lab_mem_us(row, family, cal):
    """A memory-bound lab row's modeled time: the event window's cost, its launches' fixed costs and its
    bytes at the family's rate."""
    return (cal["lab_event_us"] + mem_us(LAB_BYTES[row], family, cal)
            + (LAB_LAUNCHES.get(row, 1) - 1) * cal["kernel_fixed_us"])


# memory-bound family -> the lab row that fixes its efficiency
MEM_FAMILY_ROWS = {
    "adamw": "fa663e0 adamw n130023424",
    "copy": "fa663e0 copy_master n130023424",
    "global_norm": "4628997 global_norm n130023424",
    "elementwise": "fa663e0 gelu_backward n50331648",
    "layernorm_fwd": "fa663e0 layernorm_forward N16384 C768",
    "fused_ln_fwd": "fa663e0 fused_residual_layernorm_forward N16384 C768",
    "layernorm_bwd_fa663e0": "fa663e0 layernorm_backward N16384 C768",
    "encoder_fwd": "fa663e0 encoder_forward B16 T1024 C768",
}


def _gemm_rows(kind):
    out = []
    for k in MEASUREMENTS:
        t = re.match(r"fa663e0 matmul (\S+) N(\d+) IC(\d+) OC(\d+)$", k)
        if t and t.group(1) == kind:
            out.append((k, int(t.group(2)), int(t.group(3)), int(t.group(4))))
    return out


def _fit_gemm(cal):
    """gemm_fixed_us, gemm_wave_us, gemm_kstep_us: least squares in relative error over the forward
    rows of lab:matmul (each row compute- or bytes-bound as the current fit says, refitted until that
    settles); then eff_gelu_epilogue from the 124M fc forward with the GELU epilogue and
    eff_bias_gelu_bwd from its GELU backward + backward."""
    import numpy as np
    cal.update(gemm_fixed_us=5.0, gemm_wave_us=0.1, gemm_kstep_us=0.27)
    for _ in range(30):
        A, y = [], []
        for k, N, IC, OC in _gemm_rows("fwd"):
            w, s = gemm_waves_ksteps(N, OC, IC)
            m, nbytes = MEASUREMENTS[k] - cal["lab_event_us"], gemm_bytes(N, OC, IC) / H200_BANDWIDTH * 1e6
            if cal["gemm_kstep_us"] * s >= nbytes:
                A.append([1.0 / m, w / m, s / m])
                y.append(1.0)
            else:
                A.append([1.0 / m, w / m, 0.0])
                y.append((m - nbytes) / m)
        c, a, b = np.linalg.lstsq(np.array(A), np.array(y), rcond=None)[0]
        cal.update(gemm_fixed_us=float(c), gemm_wave_us=float(a), gemm_kstep_us=float(b))
    k = "fa663e0 matmul fwd+gelu-epilogue N8192 IC768 OC3072"
    busy = MEASUREMENTS[k] - cal["lab_event_us"] - gemm_us(8192, 3072, 768, cal)
    cal["eff_gelu_epilogue"] = 8192 * 3072 * ACT / (busy * 1e-6) / H200_BANDWIDTH
    k = "fa663e0 matmul gelu-bwd+bwd N8192 IC768 OC3072"
    rest = MEASUREMENTS[k] - cal["lab_event_us"] - matmul_backward_us(8192, 768, 3072, cal, bias=False) - cal[
        "kernel_fixed_us"]
    cal["eff_bias_gelu_bwd"] = 8192 * 3072 * ACT * 3 / (rest * 1e-6) / H200_BANDWIDTH


def _solve(f, target, x0):
    """x with f(x) = target for f decreasing in x (an efficiency): secant steps in log space."""
    import math
    x1, y1 = x0, f(x0)
    x2 = x1 * y1 / target if y1 > 0 else x1 * 2
    for _ in range(12):
        y2 = f(x2)
        if abs(y2 / target - 1) < 1e-4 or y2 == y1:
            break
        slope = (math.log(y2) - math.log(y1)) / (math.log(x2) - math.log(x1))
        x1, y1 = x2, y2
        x2 = x2 * math.exp((math.log(target) - math.log(y2)) / (slope if slope < -0.05 else -1.0))
    return x2


def _bisect(f, target, lo, hi, iters=40):
    """x in [lo, hi] with f(x) = target for f monotone on [lo, hi] (bisection)."""
    up = f(hi) > f(lo)
    for _ in range(iters):
        mid = (lo + hi) / 2
        if (f(mid) < target) == up:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _fit_attention(cal):
    """The attention parameters (CALIBRATION_SOURCES). Forward, fa663e0's unsplit grid and the instance
    without statistics (the labs time it so): attn_fwd_issue_eff_hd32 makes the MHSA B64 forward exact
    for each set-up; attn_block_setup_us minimises the squared log error of the two LS rows (B8, B64)
    (golden section on [0, 4] µs); attn_fwd_issue_eff_hd64 then makes the 124M MHSA T1024 forward
    exact. attn_merge_us makes the c276bf2 profile's ls-small-b8 forward exact (the split grid, the
    statistics instance). Backward: attn_bwd_issue_eff_hd32 makes the c276bf2 profile's ls-small-b8
    backward (split grid) exact for each attn_bwd_block_setup_us, which makes fa663e0's lab B8 backward
    (unsplit: f+b minus the forward, minus the D kernel) exact."""
    import math

    def fwd(name, c):  # as the lab times it: one launch in an event window, no statistics
        T, P, B, NH, G, hd = ATTN_SHAPES[name]
        return c["lab_event_us"] + attn_kernel_us("attn_fwd_fa2_kernel", hd, T, P, B, NH, G, c, split=False,
                                                  stats=False)

    def fit_eff(key, name):
        def f(x):
            cal[key] = x
            return fwd(name, cal)
        cal[key] = _solve(f, MEASUREMENTS[name], cal.get(key, 0.8))

    ls8, ls64, mh64 = ("fa663e0 attention fwd paper LS B8", "fa663e0 attention fwd paper LS B64",
                       "fa663e0 attention fwd paper MHSA B64")
    cal.setdefault("attn_merge_us", 0.0)

    def loss(setup):
        cal["attn_block_setup_us"] = setup
        fit_eff("attn_fwd_issue_eff_hd32", mh64)
        return sum(math.log(fwd(n, cal) / MEASUREMENTS[n]) ** 2 for n in (ls8, ls64))

    lo, hi = 0.0, 4.0
    g = (5 ** 0.5 - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = loss(x1), loss(x2)
    for _ in range(14):
        if f1 < f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = loss(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = loss(x2)
    loss((lo + hi) / 2)
    fit_eff("attn_fwd_issue_eff_hd64", "fa663e0 attention fwd 124M MHSA T1024 B16")
    # the split grid's merge: the c276bf2 profile's forward (statistics instance, HEAD's grid)
    T, P, B, NH, G, hd = PROFILE_ATTN_SHAPES["ls-small-b8"]

    def merged(x):
        cal["attn_merge_us"] = x
        return attn_kernel_us("attn_fwd_fa2_kernel", hd, T, P, B, NH, G, cal, split=True, stats=True)
    cal["attn_merge_us"] = _bisect(merged, MEASUREMENTS["c276bf2 profile ls-small-b8 attn_fwd_fa2_kernel"] / 6, 0.0,
                                   40.0)
    # backward: the split grid (c276bf2) and the unsplit one (fa663e0's lab, its D kernel as attn_dot_us)
    split_target = MEASUREMENTS["c276bf2 profile ls-small-b8 attn_bwd_kv+q"] / 6
    T, P, B, NH, G, hd = ATTN_SHAPES[ls8]
    unsplit_target = (MEASUREMENTS["fa663e0 attention fwd+bwd paper LS B8"] - MEASUREMENTS[ls8]
                      - attn_dot_us(B, T, NH, cal))

    def bwd(split):
        return sum(attn_kernel_us(k, hd, T, P, B, NH, G, cal, split=split)
                   for k in ("attn_bwd_kv_fa2_kernel", "attn_bwd_q_fa2_kernel"))

    def unsplit_for(setup):
        cal["attn_bwd_block_setup_us"] = setup

        def f(x):
            cal["attn_bwd_issue_eff_hd32"] = x
            return bwd(True)
        cal["attn_bwd_issue_eff_hd32"] = _solve(f, split_target, cal.get("attn_bwd_issue_eff_hd32", 0.5))
        return bwd(False)
    unsplit_for(_bisect(unsplit_for, unsplit_target, 0.0, 6.0, iters=24))
    # hd 64: no FA2-class backward was measured (attention_vs_torch's f+b ran a since-removed backward): the hd-32
    # backward's efficiency times the forward's hd-64 / hd-32 ratio
    cal["attn_bwd_issue_eff_hd64"] = (cal["attn_bwd_issue_eff_hd32"] * cal["attn_fwd_issue_eff_hd64"]
                                      / cal["attn_fwd_issue_eff_hd32"])


# A lone block's share of its SM's issue rate, in units of a full SM's per-block share (1 / occupancy):
# assumed, not fitted - 2 (four warps on four schedulers, their dependent HMMA chains at about half
# rate); the measurements cannot separate it from attn_block_setup_us (both move the B8 row by ~5%).
ATTN_LONE_SHARE = 2.0

# (T, P, B, NH, G, hd) of the c276bf2 profile's attention launches (the paper model's layer)
PROFILE_ATTN_SHAPES = {"ls-small-b8": (2048, 50, 8, 6, 1, 32), "paper-b16": (2048, 50, 16, 6, 1, 32)}

# (T, P, B, NH, G, hd) of the attention rows
ATTN_SHAPES = {
    "fa663e0 attention fwd paper LS B8": (2048, 50, 8, 6, 1, 32),
    "fa663e0 attention fwd paper LS B64": (2048, 50, 64, 6, 1, 32),
    "fa663e0 attention fwd paper MHSA B64": (2048, 2048, 64, 6, 6, 32),
    "fa663e0 attention fwd 124M LS T1024 B16": (1024, 64, 16, 12, 1, 64),
    "fa663e0 attention fwd 124M MHSA T1024 B16": (1024, 1024, 16, 12, 12, 64),
    "fa663e0 attention fwd 124M LS T2048 B8": (2048, 64, 8, 12, 1, 64),
    "fa663e0 attention fwd 124M MHSA T2048 B8": (2048, 2048, 8, 12, 12, 64),
}

# Which measurement fixes which parameter (the held-out table checks the others).
CALIBRATION_SOURCES = {
    "kernel_fixed_us, lab_event_us": "the intercepts (µs at zero bytes) of lab rows at two sizes: fa663e0 adamw "
                                     "(one launch in the timed window: event + fixed) and 4628997 global norm (two "
                                     "launches: event + 2 x fixed); one pair each, nothing else separates them",
    "eff_<family>": "the family's largest lab row at fa663e0 (MEM_FAMILY_ROWS; global_norm: 4628997's, the "
                    "four-loads loop HEAD restored; layernorm_bwd_fa663e0: fa663e0's LayerNorm backward), after "
                    "kernel_fixed_us per launch it times (LAB_LAUNCHES)",
    "eff_layernorm_bwd, eff_bias_sum": "the c276bf2 profile's ls-small-b8 rows of the kernels it ran (the "
                                       "LayerNorm backward of 1955330, the 16-byte-pack bias gradient of ff3945a, "
                                       "whose grid 883bc1a changed), "
                                       "their bytes over their time after kernel_fixed_us a launch; they replace "
                                       "fa663e0's rate carried over (LayerNorm: 0.24) and an assumed eff_elementwise "
                                       "(bias: 0.86); paper-b16 checks the LayerNorm (it has no bias)",
    "attn_dot_wave_us": "the c276bf2 profile's ls-small-b8 attn_bwd_dot_kernel: its 12 waves of 1056 resident "
                        "blocks (one warp a head row) each a load round trip; paper-b16's 24 waves check it",
    "summary_row_ns": "the c276bf2 profile's ls-small-b8 classifier_summary_kernel (one block over N rows); "
                      "paper-b16 checks it",
    "copy_fixed_us": "the c276bf2 profile's ls-small-b8 host -> device copies (tokens, targets, scalars, token "
                     "groups: 4 a step) after their bytes at PCIE_HTOD; paper-b16 checks it",
    "classifier_row_ns, eff_classifier_fwd": "lab:classifier forward at N8192 Vp50304 and N16384 Vp10112 (exact)",
    "eff_classifier_dlogits": "lab:classifier forward+dlogits at N8192 Vp50304",
    "eff_gelu_epilogue": "lab:matmul fc forward with the GELU epilogue minus without, N8192 IC768 OC3072",
    "eff_bias_gelu_bwd": "lab:matmul GELU backward + backward minus the backward without bias, N8192 IC768 OC3072",
    "gemm_fixed_us, gemm_wave_us, gemm_kstep_us": "least squares over the 9 forward rows of lab:matmul at fa663e0",
    "attn_fwd_issue_eff_hd32": "attention_vs_torch paper MHSA B64 forward (long global blocks, full waves), exact; "
                               "the lab rows ran the forward without statistics (STATIC_ATTENTION_FIGURES_NO_STATS), "
                               "a training step the instance with them",
    "attn_block_setup_us": "least squares over attention lab v6 forward paper LS B8 and attention_vs_torch paper "
                           "LS B64 forward (many short local blocks)",
    "attn_merge_us": "the c276bf2 profile's ls-small-b8 forward (HEAD's split grid, statistics on), exact: a split "
                     "outer tile's block stores its partial, arrives, and the last merges; paper-b16 checks it",
    "attn_bwd_block_setup_us, attn_bwd_issue_eff_hd32": "the backward at B8 in both grids, exact: the c276bf2 "
                                                         "profile's ls-small-b8 dK/dV + dQ (split) and fa663e0's "
                                                         "lab f+b minus its forward and D kernel (unsplit); "
                                                         "paper-b16's profile checks them",
    "attn_lone_share": "assumed (2), not fitted: the data cannot separate it from attn_block_setup_us",
    "attn_fwd_issue_eff_hd64": "attention_vs_torch 124M MHSA T1024 B16 forward",
    "attn_bwd_issue_eff_hd64": "not measured: the hd-32 backward's scaled by the forward's hd-64/hd-32 ratio",
    "enc_group_ns_per_position": "lab:encoder backward at B16 T1024 C768 minus its modeled wte/wpe kernels "
                                 "(one row: no held-out check)",
    "gap_us, host_ns_per_position": "the idle time of the cb93781 profile's ls-small-b8 and paper-b16 (exact: two "
                                    "rows, two parameters) = (launches - 1) x gap_us + positions x "
                                    "host_ns_per_position (gap_us_fit; used as max(0, fit)), the launches as the "
                                    "device runs them: the model's and cuBLASLt's memsets (CUBLASLT_MEMSETS, counted in "
                                    "that profile; the gaps before them ~2 µs each, like any launch's; cuBLASLt's "
                                    "split-K reductions pay none: 0.07-0.24 µs before each in that profile); paper-b16 "
                                    "idles 92 µs more with 5 fewer activities, so the idle grows with the tokens "
                                    "(the host's per-token work before the step's uploads); the cb93781 d12-b16 "
                                    "idle (its cuBLASLt counts from its own profile: 99 memsets), c276bf2's two "
                                    "and fa663e0's three steps check them",
    "eff_encoder_wte": "the cb93781 profile's ls-small-b8 encoder_backward_wte_kernel (HEAD's: a block a token and "
                       "256 columns, one bf16 a thread a position, gathered through the sorted positions): its "
                       "bytes over its time after kernel_fixed_us (0.41 of the bandwidth, against the element-wise "
                       "0.86 assumed before: 1.8-2.0x too fast at every shape in both profiles); paper-b16 and "
                       "d12-b16 check it",
}


def fit_calibration():
    """Every calibration parameter from MEASUREMENTS (CALIBRATION_SOURCES); a dict of floats."""
    cal = {"attn_lone_share": ATTN_LONE_SHARE}
    def intercept(big, small):  # µs at zero bytes of a lab row measured at two sizes
        slope = (MEASUREMENTS[big] - MEASUREMENTS[small]) / (LAB_BYTES[big] - LAB_BYTES[small])
        return MEASUREMENTS[small] - slope * LAB_BYTES[small]

    # one launch (AdamW) and two (4628997's global norm: partials + final) in one event-timed window
    one = intercept("fa663e0 adamw n130023424", "fa663e0 adamw n3145728")
    two = intercept("4628997 global_norm n130023424", "4628997 global_norm n3145728")
    cal["kernel_fixed_us"] = two - one
    cal["lab_event_us"] = 2 * one - two
    for fam, row in MEM_FAMILY_ROWS.items():
        busy = MEASUREMENTS[row] - cal["lab_event_us"] - LAB_LAUNCHES.get(row, 1) * cal["kernel_fixed_us"]
        cal[f"eff_{fam}"] = LAB_BYTES[row] / (busy * 1e-6) / H200_BANDWIDTH
    # classifier: one block a row, t = kernel_fixed_us + rows x classifier_row_ns + bytes / (bw x eff):
    # the two forward rows fix classifier_row_ns and eff_classifier_fwd, the N8192 dlogits row
    # eff_classifier_dlogits (its N16384 row is held out)
    (f1, f2), d1 = ("fa663e0 classifier forward N8192 Vp50304", "fa663e0 classifier forward N16384 Vp10112"), \
        "fa663e0 classifier forward+dlogits N8192 Vp50304"
    x1, x2 = (MEASUREMENTS[k] - cal["lab_event_us"] - cal["kernel_fixed_us"] for k in (f1, f2))
    # x = rows r + bytes u: two equations
    r1, r2, b1, b2 = 8192, 16384, LAB_BYTES[f1], LAB_BYTES[f2]
    u = (x1 * r2 - x2 * r1) / (b1 * r2 - b2 * r1)
    cal["classifier_row_ns"] = (x1 - b1 * u) / r1 * 1e3
    cal["eff_classifier_fwd"] = 1e6 / u / H200_BANDWIDTH
    busy = MEASUREMENTS[d1] - cal["lab_event_us"] - cal["kernel_fixed_us"] - 8192 * cal["classifier_row_ns"] * 1e-3
    cal["eff_classifier_dlogits"] = LAB_BYTES[d1] / (busy * 1e-6) / H200_BANDWIDTH
    _fit_gemm(cal)
    _fit_profile_kernels(cal)
    _fit_attention(cal)
    # encoder backward = grouping (one block) + wte (reads dout, writes its rows fp32) + wpe
    B, T, C = 16, 1024, 768
    rest = encoder_bwd_wte_wpe_us(B, T, C, cal)
    cal["enc_group_ns_per_position"] = (MEASUREMENTS["fa663e0 encoder_backward B16 T1024 C768"] - rest
                                        - cal["lab_event_us"] - cal["kernel_fixed_us"]) / (B * T) * 1e3
    # the encoder's wte kernel (HEAD's, host grouping): its bytes over the cb93781 profile's ls-small-b8
    # time after kernel_fixed_us
    c = CASES["ls-small-b8"]
    busy = MEASUREMENTS["cb93781 profile ls-small-b8 encoder_backward_wte_kernel"] - cal["kernel_fixed_us"]
    cal["eff_encoder_wte"] = (encoder_wte_bytes(c["B"] * c["T"], c["C"], padded_vocab(c["V"])) / (busy * 1e-6)
                              / H200_BANDWIDTH)
    # idle: the two cb93781 profiles' idle time = (launches - 1) x gap_us + positions x host_ns_per_position,
    # launches as the device runs them: the model's (a cuBLASLt call one) + cuBLASLt's memsets
    # (CUBLASLT_MEMSETS: counted in the profile; its split-K reductions are charged no gap)
    cal["gap_us"] = cal["host_ns_per_position"] = 0.0
    (a1, n1, i1), (a2, n2, i2) = ((profile_launches(c, cal) - 1, profile_positions(c),
                                   MEASUREMENTS[f"cb93781 profile {c} idle"]) for c in ("ls-small-b8", "paper-b16"))
    det = a1 * n2 - a2 * n1
    cal["gap_us_fit"] = (i1 * n2 - i2 * n1) / det
    cal["gap_us"] = max(0.0, cal["gap_us_fit"])
    cal["host_ns_per_position"] = (a1 * i2 - a2 * i1) / det * 1e3
    return cal


def profile_positions(case):
    return CASES[case]["B"] * CASES[case]["T"]


def profile_launches(case, cal):
    """A CASES step's launches as the model counts them (every row's calls)."""
    return sum(r["calls_per_step"] for r in predict_case(case, cal))


def _fit_profile_kernels(cal):
    """The parameters the c276bf2 profile's ls-small-b8 case fixes alone (its paper-b16 case checks
    them): eff_layernorm_bwd and eff_bias_sum (the kernels c276bf2 ran: their bytes over their time
    after kernel_fixed_us per launch), attn_dot_wave_us (per wave of resident blocks), summary_row_ns
    and copy_fixed_us (the host -> device copies: tokens, targets, scalars, token groups)."""
    c = CASES["ls-small-b8"]
    L, C, NH, B, T, Vp = c["L"], c["C"], c["NH"], c["B"], c["T"], padded_vocab(c["V"])
    N = B * T
    key = "c276bf2 profile ls-small-b8 "
    launches = 2 * L + 1
    busy = MEASUREMENTS[key + "layernorm_backward_cached_kernel"] - launches * cal["kernel_fixed_us"]
    cal["eff_layernorm_bwd"] = launches * layernorm_bwd_bytes(N, C) / (busy * 1e-6) / H200_BANDWIDTH
    kinds = bias_kinds(C)
    busy = MEASUREMENTS[key + "bias_sum_kernel"] - L * len(kinds) * cal["kernel_fixed_us"]
    cal["eff_bias_sum"] = L * sum(bias_sum_bytes(N, OC, g) for OC, g in kinds) / (busy * 1e-6) / H200_BANDWIDTH
    cal["attn_dot_wave_us"] = ((MEASUREMENTS[key + "attn_bwd_dot_kernel"] / L - cal["kernel_fixed_us"])
                               / attn_dot_waves(B, T, NH))
    cal["summary_row_ns"] = (MEASUREMENTS[key + "classifier_summary_kernel"] - cal["kernel_fixed_us"]) / N * 1e3
    htod_bytes = 2 * N * 4 + (min(N, Vp) + 1 + N) * 4
    cal["copy_fixed_us"] = (MEASUREMENTS[key + "memcpy HtoD"] - htod_bytes / PCIE_HTOD * 1e6) / 4


def calibration_checks(cal):
    """Every measurement the model can predict, modeled beside measured: rows (id, group, measured µs,
    modeled µs, "fit" when the measurement fixed a parameter, else "held out")."""
    fit_ids = set(MEM_FAMILY_ROWS.values()) | {
        "fa663e0 adamw n3145728", "4628997 global_norm n3145728", "fa663e0 attention fwd paper LS B8",
        "fa663e0 attention fwd paper LS B64", "fa663e0 attention fwd paper MHSA B64",
        "fa663e0 attention fwd 124M MHSA T1024 B16", "fa663e0 attention fwd+bwd paper LS B8",
        "fa663e0 encoder_backward B16 T1024 C768",
        "fa663e0 classifier forward N8192 Vp50304", "fa663e0 classifier forward N16384 Vp10112",
        "fa663e0 classifier forward+dlogits N8192 Vp50304", "fa663e0 matmul fwd+gelu-epilogue N8192 IC768 OC3072",
        "fa663e0 matmul gelu-bwd+bwd N8192 IC768 OC3072"}
    fit_ids |= {k for k, *_ in _gemm_rows("fwd")}
    fit_ids |= {k for k in MEASUREMENTS if k.startswith("c276bf2 profile ls-small-b8 ") and not k.endswith(" idle")}
    fit_ids |= {"cb93781 profile ls-small-b8 encoder_backward_wte_kernel", "cb93781 profile ls-small-b8 idle",
                "cb93781 profile paper-b16 idle"}
    rows = []

    def row(k, group, model):
        rows.append(dict(id=k, group=group, measured_us=MEASUREMENTS[k], modeled_us=model,
                         use="fit" if k in fit_ids else "held out"))

    for kind in ("fwd", "fwd+gelu-epilogue", "bwd", "gelu-bwd+bwd"):
        for k, N, IC, OC in _gemm_rows(kind):
            if kind == "fwd":
                t = gemm_us(N, OC, IC, cal)
            elif kind == "fwd+gelu-epilogue":
                t = gemm_us(N, OC, IC, cal, gelu_epilogue=True)
            else:
                t = matmul_backward_us(N, IC, OC, cal, bias=True, gelu_pass=kind == "gelu-bwd+bwd")
            row(k, "GEMMs", cal["lab_event_us"] + t)
    for k, fam in (("fa663e0 adamw n130023424", "adamw"), ("fa663e0 adamw n3145728", "adamw"),
                   ("fa663e0 copy_master n130023424", "copy"), ("fa663e0 copy_master n3145728", "copy"),
                   ("4628997 global_norm n130023424", "global_norm"), ("4628997 global_norm n3145728", "global_norm")):
        row(k, "optimizer", lab_mem_us(k, fam, cal))
    for k, fam in (("fa663e0 gelu_backward n50331648", "elementwise"),
                   ("fa663e0 gelu_forward n50331648", "elementwise"),
                   ("fa663e0 residual_forward N16384 C768", "elementwise"),
                   ("fa663e0 add_inplace N16384 C768", "elementwise")):
        row(k, "other", lab_mem_us(k, fam, cal))
    for k, fam in (("fa663e0 layernorm_forward N16384 C768", "layernorm_fwd"),
                   ("fa663e0 fused_residual_layernorm_forward N16384 C768", "fused_ln_fwd"),
                   ("fa663e0 layernorm_backward N16384 C768", "layernorm_bwd_fa663e0")):
        row(k, "LayerNorm", lab_mem_us(k, fam, cal))
    row("fa663e0 encoder_forward B16 T1024 C768", "encoder", lab_mem_us("fa663e0 encoder_forward B16 T1024 C768",
                                                                         "encoder_fwd", cal))
    row("fa663e0 encoder_backward B16 T1024 C768", "encoder", cal["lab_event_us"] + cal["kernel_fixed_us"] + 16 * 1024 *
        cal["enc_group_ns_per_position"] * 1e-3 + encoder_bwd_wte_wpe_us(16, 1024, 768, cal))
    for k, rows_n in (("fa663e0 classifier forward N8192 Vp50304", 8192),
                      ("fa663e0 classifier forward N16384 Vp10112", 16384)):
        row(k, "classifier/loss", cal["lab_event_us"] + classifier_us(rows_n, LAB_BYTES[k], "classifier_fwd", cal))
    for k, rows_n in (("fa663e0 classifier forward+dlogits N8192 Vp50304", 8192),
                      ("fa663e0 classifier forward+dlogits N16384 Vp10112", 16384)):
        row(k, "classifier/loss", cal["lab_event_us"] + classifier_us(rows_n, LAB_BYTES[k], "classifier_dlogits", cal))
    for k, (T, P, B, NH, G, hd) in ATTN_SHAPES.items():  # the labs time the forward without statistics
        row(k, "attention fwd", cal["lab_event_us"] + attn_kernel_us("attn_fwd_fa2_kernel", hd, T, P, B, NH, G, cal,
                                                                     split=False, stats=False))
    T, P, B, NH, G, hd = ATTN_SHAPES["fa663e0 attention fwd paper LS B8"]
    row("fa663e0 attention fwd+bwd paper LS B8", "attention bwd", cal["lab_event_us"] +
        attn_kernel_us("attn_fwd_fa2_kernel", hd, T, P, B, NH, G, cal, split=False, stats=False) +
        sum(attn_kernel_us(k, hd, T, P, B, NH, G, cal, split=False) for k in
            ("attn_bwd_kv_fa2_kernel", "attn_bwd_q_fa2_kernel")) + attn_dot_us(B, T, NH, cal))
    for k, case, over in (("fa663e0 step ls-small B8 V257", "ls-small-b8", dict(V=257)),
                          ("fa663e0 step ls-small B16 V10000", "ls-small-b8", dict(B=16)),
                          ("fa663e0 step d12 B16 V50257", "d12-b16", {})):
        shape = dict(CASES[case], **over)
        rows_k = predict_case(case, cal, shape, split=False, host_groups=False, one_pass_classifier=False,
                              packed_bias_sum=False, packed_adamw=False, ln_bwd_family="layernorm_bwd_fa663e0",
                              packed_dot=False, rowregs_classifier=False)
        row(k, "step", step_us(rows_k, cal, shape["B"] * shape["T"]))
    # the c276bf2 profile (HEAD's kernels and grid): ls-small-b8 fits, paper-b16 checks
    for case in ("ls-small-b8", "paper-b16"):
        c = CASES[case]
        L, C, NH, B, T = c["L"], c["C"], c["NH"], c["B"], c["T"]
        N, key = B * T, f"c276bf2 profile {case} "
        T_, P, B_, NH_, G, hd = PROFILE_ATTN_SHAPES[case]
        row(key + "attn_fwd_fa2_kernel", "attention fwd",
            L * attn_kernel_us("attn_fwd_fa2_kernel", hd, T, P, B, NH, G, cal, split=True, stats=True))
        row(key + "attn_bwd_kv+q", "attention bwd",
            L * sum(attn_kernel_us(k, hd, T, P, B, NH, G, cal, split=True)
                    for k in ("attn_bwd_kv_fa2_kernel", "attn_bwd_q_fa2_kernel")))
        row(key + "attn_bwd_dot_kernel", "attention bwd", L * attn_dot_us(B, T, NH, cal))
        row(key + "layernorm_backward_cached_kernel", "LayerNorm",
            (2 * L + 1) * mem_us(layernorm_bwd_bytes(N, C), "layernorm_bwd", cal))
        if c["bias"]:
            row(key + "bias_sum_kernel", "other",
                L * sum(bias_sum_us(N, OC, cal, g) for OC, g in bias_kinds(C)))
        row(key + "classifier_summary_kernel", "classifier/loss", classifier_summary_us(N, cal))
        Vp = padded_vocab(c["V"])
        row(key + "memcpy HtoD", "other", 3 * htod_us(0, cal) + htod_us(2 * N * 4, cal) - htod_us(0, cal)
            + htod_us((min(N, Vp) + 1 + N) * 4, cal))
        row(key + "idle", "gaps", step_idle_us(profile_launches(case, cal), N, cal))
    # the cb93781 profile (the build sources of HEAD's kernels): each row against the prediction's rows of
    # that kernel; its idle time against step_idle_us
    for case in CASES:
        pred = predict_case(case, cal)
        for k in MEASUREMENTS:
            t = re.fullmatch(rf"cb93781 profile {re.escape(case)} (\S+)", k)
            if not t:
                continue
            if t.group(1) == "idle":
                row(k, "gaps", step_idle_us(sum(r["calls_per_step"] for r in pred), profile_positions(case), cal))
                continue
            hit = [r for r in pred if re.search(rf"::{t.group(1)}(<|$)", r["kernel"])]
            assert hit, k
            row(k, hit[0]["group"], sum(r["us_per_step"] for r in hit))
    return rows


def step_idle_us(launches, positions, cal):
    """A step's modeled idle time: (launches - 1) gaps + the host's per-position work inside the step's
    window (the batch's tokens fetched and staged before the first launch)."""
    return max(0.0, launches - 1) * cal["gap_us"] + positions * cal["host_ns_per_position"] * 1e-3


def step_us(rows, cal, positions):
    """A step's modeled wall time: its kernels' sum + its idle time (step_idle_us)."""
    launches = sum(r["calls_per_step"] for r in rows)
    return sum(r["us_per_step"] for r in rows) + step_idle_us(launches, positions, cal)


def encoder_bwd_wte_wpe_us(B, T, C, cal, Vp=None):
    N = B * T
    wte = mem_us(N * C * ACT + N * 4 * 2 + min(N, Vp or N) * C * F32 * 2, "elementwise", cal)
    wpe = mem_us(N * C * ACT + T * C * F32 * 2, "elementwise", cal)
    return wte + wpe


# The emulated profile's one row for every cuBLASLt call (llmc/cuda/kernel_profiler.cuh)
EMULATED_GEMM_ROW = "cublasLtMatmul [emulated cuBLASLt: one call, its kernels unknown]"
def encoder_wte_bytes(N, C, Vp):
    """HEAD's encoder_backward_wte_kernel's traffic: dout read once (N C bf16), the positions' token and
    sorted index (8 bytes each), the groups' starts, each group's dwte row read and written (fp32)."""
    runs = min(N, Vp)
    return N * C * ACT + N * 8 + runs * 4 + runs * C * F32 * 2

# The shapes of gpu_check.sh's profile stage issued kernel by kernel (their trainer flags there).
CASES = {
    "ls-small-b8": dict(L=6, C=192, NH=6, G=1, P=50, V=10000, maxT=2048, B=8, T=2048, bias=True, gelu="tanh",
                        tied=True),
    "paper-b16": dict(L=6, C=192, NH=6, G=1, P=50, V=10000, maxT=2048, B=16, T=2048, bias=False, gelu="erf",
                      tied=False),
    "d12-b16": dict(L=12, C=768, NH=12, G=1, P=64, V=50257, maxT=1024, B=16, T=1024, bias=True, gelu="tanh",
                    tied=True),
}
# paper-b16 with its six heads all local (G 0) and all global (G 6: plain MHSA), the step alike but for
# attention, whose kernels weigh the model's two terms differently there (attn_terms, attn_attribution)
CASES["paper-b16-local"] = dict(CASES["paper-b16"], G=0)
CASES["paper-b16-mhsa"] = dict(CASES["paper-b16"], G=6)
CASE_FLAGS = {
    "ls-small-b8": "-e ls-small --vocab 10000 -b 8 -t 2048",
    "paper-b16": "-e ls-small --vocab 10000 --bias 0 --gelu erf --untie-embeddings -b 16 -t 2048",
    "d12-b16": "-e d12 --window 64 --vocab 50257 -b 16 -t 1024",
    "paper-b16-local": "-e ls-small --vocab 10000 --bias 0 --gelu erf --untie-embeddings --global-heads 0 -b 16 -t 2048",
    "paper-b16-mhsa": "-e ls-small --vocab 10000 --bias 0 --gelu erf --untie-embeddings --global-heads 6 -b 16 -t 2048",
}

# Kernel groups (issue 52): the first pattern that matches a kernel's name names its group; a GPU
# profile's cuBLASLt kernels (nvjet_*, sm90_xmma_*, cutlass_*, *splitK*, ...) fall in GEMMs.
GROUPS = ["GEMMs", "attention fwd", "attention bwd", "LayerNorm", "encoder", "classifier/loss", "optimizer",
          "other", "gaps"]
GROUP_PATTERNS = [
    ("attention fwd", r"attn_fwd_|attn_stats_reduce"),
    ("attention bwd", r"attn_bwd_"),
    ("LayerNorm", r"layernorm|reduce_partials_add"),
    ("encoder", r"encoder_"),
    ("classifier/loss", r"classifier"),
    ("optimizer", r"adamw|global_norm|copy_master"),
    ("GEMMs", r"cublasLt|gemm|nvjet|xmma|cutlass|splitK|cublas|sm90_|sm80_|ampere_|hopper"),
]


def kernel_group(name):
    if name.startswith("llmc::"):
        for g, pat in GROUP_PATTERNS[:-1]:
            if re.search(pat, name):
                return g
        return "other"
    for g, pat in GROUP_PATTERNS:
        if re.search(pat, name, re.I):
            return g
    return "other"


# The note of a HEAD kernel's rate that no GPU run was fitted to, and that the cb93781 profile checks
# (calibration_checks: its measured / modeled ratio at each case)
HELD_OUT = "held out against the cb93781 profile: --calibration"


def predict_case(case, cal, shape=None, split=True, host_groups=True, one_pass_classifier=True,
                 packed_bias_sum=True, packed_adamw=True, ln_bwd_family="layernorm_bwd", packed_dot=True,
                 rowregs_classifier=True, bwd_runs=True, rowblock_bias_sum=True):
    """Per-kernel rows of one step of a CASES shape at HEAD: the launches --profile-steps counts on
    the emulated device (the kernel names and calls of the emulated profile, HEAD-<sha>), each with its
    modeled µs per step. The GEMMs are one row per cuBLASLt call kind (their GPU kernels' names are
    cuBLASLt's own: compare_profile folds them into one row). split=False: fa663e0's attention grid;
    host_groups=False: the encoder backward's grouping on the device in one block (fa663e0 up to
    28765d1) instead of HEAD's host grouping and its upload; one_pass_classifier=False: the classifier's forward pass (loss, lse)
    and the backward's (dlogits) as two launches (as at fa663e0), not HEAD's one in the step;
    packed_bias_sum=False: fa663e0's bias-gradient kernel (bias_sum_us); packed_adamw=False: fa663e0's
    AdamW (one element a thread per iteration) at lab:adamw's measured rate, not HEAD's four elements
    in 16-byte accesses (assumed at eff_elementwise, held out); ln_bwd_family="layernorm_bwd_fa663e0":
    fa663e0's LayerNorm backward (lab:layernorm's rate) instead of HEAD's rewrite (1955330; the c276bf2
    profile's rate); packed_dot=False: c276bf2's D kernel (a warp a row, attn_dot_us) instead of HEAD's
    16-byte packs (assumed at eff_elementwise, held out); rowregs_classifier=False: c276bf2's
    classifier kernel (two 16-byte vectors a thread, 512 threads, expf; classifier_us at its lab rates)
    instead of HEAD's row in registers (classifier_rowregs_us); bwd_runs=False: the attention backward
    without runs of outer tiles (every block one outer tile, as up to f81a640); rowblock_bias_sum=False:
    c276bf2's bias-gradient kernel (a block a row chunk, at eff_bias_sum) instead of HEAD's row blocks of
    several chunks (assumed at eff_elementwise or its issue bound, held out). "Held out": not fitted,
    checked against the cb93781 profile (calibration_checks)."""
    m = dict(shape or CASES[case])
    L, C, NH, G, P, V, B, T = (m[k] for k in ("L", "C", "NH", "G", "P", "V", "B", "T"))
    bias, tanh, tied = m["bias"], m["gelu"] == "tanh", m["tied"]
    Vp, hd, N = padded_vocab(V), C // NH, B * T
    params = Vp * C * (1 if tied else 2) + m["maxT"] * C + L * (12 * C * C + (13 if bias else 4) * C) + 2 * C
    rows = {}

    def add(name, us, calls=1, note="", nbytes=None, flops=None):
        """A row's calls; nbytes and flops a call (the model's), None where the model has none: the
        row's bytes_per_step / flops_per_step are None once any of its calls has none."""
        r = rows.setdefault(name, dict(kernel=name, group=kernel_group(name), calls_per_step=0, us_per_step=0.0,
                                       note=note, bytes_per_step=0.0, flops_per_step=0.0))
        r["calls_per_step"] += calls
        r["us_per_step"] += us * calls
        for key, v in (("bytes_per_step", nbytes), ("flops_per_step", flops)):
            r[key] = None if v is None or r[key] is None else r[key] + v * calls

    def mem(name, nbytes, family, calls=1, note=""):
        """A memory-bound kernel's row: mem_us of its bytes."""
        add(name, mem_us(nbytes, family, cal), calls, note, nbytes=nbytes)

    gemm = EMULATED_GEMM_ROW

    def add_gemms(shapes, calls=1):
        """cuBLASLt calls, each (M, N, K, gemm_us's keywords, and bias=True for a bias epilogue), calls
        times over: one row, with their compulsory bytes (gemm_bytes, plus the bias read and the GELU
        epilogue's pre-activation written: what the trainer's own count, lt_matmul, adds) and 2 M N K
        FLOPs."""
        for M, Nn, K, kw in shapes:
            kw = dict(kw)
            epilogue_bytes = (Nn * ACT if kw.pop("bias", False) else 0) + (
                M * Nn * ACT if kw.get("gelu_epilogue") else 0)
            add(gemm, gemm_us(M, Nn, K, cal, **kw), calls,
                nbytes=gemm_bytes(M, Nn, K, kw.get("out_bytes", ACT), kw.get("accumulate", False)) + epilogue_bytes,
                flops=2 * M * Nn * K)

    # forward: qkv, attproj, fc (tanh: the GELU epilogue also writes the pre-activation), fcproj per
    # layer, each with its bias in the epilogue (a model with biases); the LM head
    for IC, OC, epi in ((C, 3 * C, False), (C, C, False), (C, 4 * C, tanh), (4 * C, C, False)):
        add_gemms([(N, OC, IC, dict(gelu_epilogue=epi, bias=bias))], L)
    lm_fwd, lm_dx, lm_dw = lm_head_gemm_shapes(N, C, Vp)
    add_gemms([lm_fwd])
    # backward: dinp and dW (fp32, added into) of the LM head, then of fcproj, fc, attproj, qkv per layer
    dw_kw = dict(out_bytes=F32, accumulate=True)
    add_gemms([lm_dx, lm_dw])
    for IC, OC in ((4 * C, C), (C, 4 * C), (C, C), (C, 3 * C)):
        add_gemms([(N, IC, OC, {}), (OC, IC, N, dw_kw)], L)
    rows[gemm]["note"] = "every cuBLASLt call (on a GPU cuBLASLt's own kernels, folded into one row by --compare)"
    # bias gradients (bias_sum_kernel: reads dout; fc's also runs the GELU backward: reads pre, writes d)
    if bias:
        for OC, gelu in bias_kinds(C):
            rowblocks = packed_bias_sum and rowblock_bias_sum
            add("llmc::cuda::detail::bias_sum_kernel",
                bias_sum_us(N, OC, cal, gelu, packed_bias_sum, rowblocks, "tanh" if tanh else "erf"), L,
                f"row blocks of several chunks at eff_elementwise or the issue bound (assumed; {HELD_OUT})"
                if rowblocks else "16-byte packs at the c276bf2 profile's rate (eff_bias_sum)"
                if packed_bias_sum else "",
                nbytes=bias_sum_rowblocks_bytes(N, OC, gelu) if rowblocks else bias_sum_bytes(N, OC, gelu)
                if packed_bias_sum else N * OC * ACT * (3 if gelu else 1))
    # the GELU's own kernels: the forward's where the epilogue cannot (erf: cuBLASLt's GELU is tanh's),
    # the backward's where no bias gradient's pass takes it (matmul_forward, matmul_gelu_backward)
    if not tanh:
        mem("llmc::cuda::gelu_forward_kernel", 2 * N * 4 * C * ACT, "elementwise", L)
    if not bias:
        mem("llmc::cuda::gelu_backward_kernel", 3 * N * 4 * C * ACT, "elementwise", L)
    # encoder
    # (bytes as lab:encoder counts them: a wte row and a wpe row read and the output written per position)
    mem("llmc::cuda::encoder_forward_kernel<8>", 3 * N * C * ACT, "encoder_fwd")
    # the backward's positions grouped by token: HEAD on the host (llmc/core/token_groups.h; the wte
    # kernel reads run_begin (G + 1) and sorted_pos (N), G = min(N, Vp)), before on the device in one block
    runs = min(N, Vp)
    if host_groups:
        mem("llmc::cuda::encoder_backward_wte_kernel", encoder_wte_bytes(N, C, Vp), "encoder_wte", 1,
            "a block a (token, 256 columns): dout gathered through the sorted positions, one bf16 a thread a "
            "position; at eff_encoder_wte (the cb93781 profile's ls-small-b8 rate)")
    else:
        add("llmc::cuda::encoder_group_kernel", cal["kernel_fixed_us"] + N * cal["enc_group_ns_per_position"] * 1e-3,
            1, "fa663e0's per-position cost carried over; the grouping changed since (6851561: integer-atomic counts)")
        mem("llmc::cuda::encoder_backward_wte_kernel", N * C * ACT + N * 8 + runs * C * F32 * 2, "elementwise")
    mem("llmc::cuda::encoder_backward_wpe_kernel", N * C * ACT + T * C * F32 * 2, "elementwise")
    # LayerNorm: the first (plain), 2L fused residual + LN forwards, 2L+1 backwards and their one reduce
    mem("llmc::cuda::layernorm_forward_kernel<8, false>", 2 * N * C * ACT + 8 * N, "layernorm_fwd")
    mem("llmc::cuda::layernorm_forward_kernel<8, true>", 4 * N * C * ACT + 8 * N, "fused_ln_fwd", 2 * L)
    ln_blocks = layernorm_bwd_blocks(N, C)
    ch = _cdiv(C, 256) if C <= 768 else 8
    mem(f"llmc::cuda::layernorm_backward_cached_kernel<{min(ch, 3)}>", layernorm_bwd_bytes(N, C), ln_bwd_family,
        2 * L + 1, "HEAD's rewrite (1955330) at the c276bf2 profile's rate (C = 192); C = 768 not measured since "
        "fa663e0" if ln_bwd_family == "layernorm_bwd" else "")
    mem("llmc::cuda::reduce_layernorm_partials_kernel",
        (2 * L + 1) * ln_blocks * 2 * C * F32 + (2 * L + 1) * 2 * C * F32, "elementwise")
    # attention (stats every step: STATS true in the forward)
    fw = attn_kernel_us("attn_fwd_fa2_kernel", hd, T, P, B, NH, G, cal, split, stats=True)
    add(f"llmc::cuda::attn_fwd_fa2_kernel<{hd}, true, false, false>", fw, L,
        "the statistics instance, HEAD's split grid",
        flops=attn_kernel_flops("attn_fwd_fa2_kernel", hd, T, P, B, NH, G, split))
    add("llmc::cuda::attn_stats_reduce_kernel<3>", cal["kernel_fixed_us"])
    if packed_dot:
        mem("llmc::cuda::attn_bwd_dot_kernel", 2 * N * C * ACT + N * NH * F32, "elementwise", L,
            f"HEAD's 16-byte packed kernel at eff_elementwise (assumed; {HELD_OUT})")
    else:
        add("llmc::cuda::attn_bwd_dot_kernel", attn_dot_us(B, T, NH, cal), L, "c276bf2's warp a row",
            nbytes=2 * N * C * ACT + N * NH * F32)
    for k in ("attn_bwd_kv_fa2_kernel", "attn_bwd_q_fa2_kernel"):
        add(f"llmc::cuda::{k}<{hd}, false>", attn_kernel_us(k, hd, T, P, B, NH, G, cal, split, runs=bwd_runs), L,
            flops=attn_kernel_flops(k, hd, T, P, B, NH, G, split, runs=bwd_runs))
    # classifier: HEAD's step computes loss, lse and the dlogits in place in one pass (the forward's);
    # before, the forward's loss + lse pass and the backward's dlogits pass; the summary
    if not one_pass_classifier:
        add("llmc::cuda::detail::classifier_kernel", classifier_us(N, N * Vp * ACT + 16 * N, "classifier_fwd", cal),
            nbytes=N * Vp * ACT + 16 * N)
    if rowregs_classifier and one_pass_classifier:
        add("llmc::cuda::detail::classifier_kernel", classifier_rowregs_us(N, Vp, cal), 1,
            f"HEAD's row in registers at eff_elementwise or its static issue bound (assumed; {HELD_OUT})",
            nbytes=classifier_rowregs_bytes(N, Vp))
    else:
        add("llmc::cuda::detail::classifier_kernel",
            classifier_us(N, 2 * N * Vp * ACT + 16 * N, "classifier_dlogits", cal), nbytes=2 * N * Vp * ACT + 16 * N)
    add("llmc::cuda::detail::classifier_summary_kernel", classifier_summary_us(N, cal))
    # optimizer: the global norm (reads the fp32 gradients), AdamW (30 bytes a parameter, lab:adamw's count)
    mem("llmc::cuda::detail::global_norm_kernel", params * F32, "global_norm", 1,
        "4628997's four-loads loop (restored by 3ed6efb), not fa663e0's")
    mem("llmc::cuda::detail::adamw_all_kernel", params * 30, "elementwise" if packed_adamw else "adamw", 1,
        f"16-byte accesses: assumed at eff_elementwise ({HELD_OUT})" if packed_adamw else "")
    # the step's memsets and copies (on a GPU only: the emulated profile counts kernels); their fixed
    # cost is kernel_fixed_us, not measured on its own
    add("memset", mem_us(params * F32, "copy", cal) + mem_us(N * C * ACT, "copy", cal) + cal["kernel_fixed_us"], 1)
    # cuBLASLt's own memsets: counted at the profiled shapes only (its split-K reductions: no gap charged)
    profiled = shape is None or dict(shape) == CASES.get(case)
    rows["memset"]["calls_per_step"] += 2 + (CUBLASLT_MEMSETS.get(case, 0) if profiled else 0)
    rows["memset"]["note"] = ("not in the emulated profile; gradients, loss check, dresidual"
                              + (f"; and cuBLASLt's {CUBLASLT_MEMSETS[case]} (counted at cb93781, no time charged)"
                                 if profiled and case in CUBLASLT_MEMSETS else ""))
    add("memcpy HtoD", 2 * htod_us(N * 4, cal) + htod_us(0, cal), 1,
        "not in the emulated profile: tokens, targets, step scalars" + (", token groups" if host_groups else ""))
    rows["memcpy HtoD"]["calls_per_step"] += 2
    if host_groups:
        add("memcpy HtoD", htod_us((runs + 1 + N) * 4, cal))
    add("memcpy DtoH", cal["kernel_fixed_us"], 3, "not in the emulated profile: summary, statistics, norm")
    add("memcpy DtoD", cal["kernel_fixed_us"], 1, "not in the emulated profile: statistics reset")
    return sorted(rows.values(), key=lambda r: -r["us_per_step"])



def group_totals(rows, idle_us):
    """{group: µs per step} over GROUPS ("gaps" = idle_us)."""
    out = {g: 0.0 for g in GROUPS}
    for r in rows:
        out[r["group"]] += r["us_per_step"]
    out["gaps"] = idle_us
    return out


def prediction(cal, commit, **design):
    """The prediction document (JSON-able): per CASES shape its kernel rows, groups and step, at HEAD's
    grid (split tile loops), labelled modeled. design: predict_case's switches to an earlier commit's
    kernels (e.g. packed_dot=False: c276bf2's D kernel)."""
    cases = {}
    for case in CASES:
        rows = predict_case(case, cal, **design)
        launches = sum(r["calls_per_step"] for r in rows)
        idle = step_idle_us(launches, profile_positions(case), cal)
        busy = sum(r["us_per_step"] for r in rows)
        cases[case] = dict(shape=CASES[case], trainer_flags=CASE_FLAGS[case], kernels=rows,
                           groups=group_totals(rows, idle), busy_us=busy, idle_us=idle, step_us=busy + idle,
                           launches_per_step=launches)
    return dict(label="modeled", commit=commit, device="NVIDIA H200 (132 SMs)",
                model="dev/bench/roofline.py calibrated model (docs/cuda_kernels.md, Calibrated model)",
                calibrated_on="GPU at fa663e0 (docs/results/2026-11-27-H200-fa663e0), global norm at 4628997, "
                              "the per-kernel profiles at c276bf2 (docs/results/2026-11-29-H200-c276bf2) and "
                              "cb93781 (docs/results/2026-12-04-H200-cb93781)",
                calibration=cal, cases=cases)


def prediction_markdown(pred):
    out = [f"# Per-kernel prediction for {pred['commit']} (modeled)", "",
           f"**Modeled, not measured**: {pred['model']}, calibrated on {pred['calibrated_on']}; "
           f"device {pred['device']}. The next GPU run's `bench/profile/<case>.json` is compared with "
           "`python3 dev/bench/roofline.py --compare PROFILE.json --prediction THIS.json`. Kernel names and "
           "calls per step are the emulated `--profile-steps 1` counts of this commit (plus the step's "
           "memsets and copies, which the emulation does not count, and cuBLASLt's memsets, counted in the GPU "
           "profile at cb93781, calls only; its split-K reductions are charged no launch gap); cuBLASLt is one row here and its own "
           "kernels on a GPU, which --compare folds into one cuBLASLt row against it. The emulated profiles ran "
           "the cases' model flags at -b 1 -t 128 (the full shapes take over 10 minutes emulated; the launches do "
           "not depend on B and T: the attention split is inside its kernels). A kernel's fixed cost (kernel_fixed_us, "
           f"{pred['calibration']['kernel_fixed_us']:.1f} µs) and the gap after each launch (gap_us, "
           f"{pred['calibration']['gap_us']:.2f} µs, with {pred['calibration']['host_ns_per_position']:.1f} ns of host "
           "work a token) come from lab rows and the cb93781 profile's idle time (docs/cuda_kernels.md, Calibrated model).",
           ""]
    for case, c in pred["cases"].items():
        out += [f"## {case} (`{c['trainer_flags']}`)", "",
                f"Step {c['step_us'] / 1e3:.2f} ms modeled: kernels {c['busy_us'] / 1e3:.2f} ms, gaps "
                f"{c['idle_us'] / 1e3:.2f} ms, {c['launches_per_step']:.0f} launches per step.", "",
                "| group | µs per step | share |", "|---|---:|---:|"]
        for g in GROUPS:
            out.append(f"| {g} | {c['groups'][g]:,.0f} | {100 * c['groups'][g] / c['step_us']:.1f}% |")
        out += ["", "| kernel | group | calls/step | µs/step | note |", "|---|---|---:|---:|---|"]
        for r in c["kernels"]:
            out.append(f"| `{r['kernel']}` | {r['group']} | {r['calls_per_step']:g} | {r['us_per_step']:,.1f} | "
                       f"{r['note']} |")
        out.append("")
    return "\n".join(out)


def load_profile(path_or_json):
    """A --profile-steps profile.json (llmc/core/kernel_profile.h's profile_table_json), checked; a path
    or the parsed JSON."""
    if isinstance(path_or_json, dict):
        j = path_or_json
    else:
        with open(path_or_json) as f:
            j = json.load(f)
    if not isinstance(j, dict) or not isinstance(j.get("kernels"), list) or "timed" not in j:
        raise ValueError("not a --profile-steps profile.json (no 'timed' and 'kernels')")
    for k in j["kernels"]:
        if "kernel" not in k or "calls_per_step" not in k or (j["timed"] and "us_per_step" not in k):
            raise ValueError(f"kernel row without kernel / calls_per_step{' / us_per_step' if j['timed'] else ''}: {k}")
    if j["timed"] and "idle_us" not in j:
        raise ValueError("a timed profile without idle_us")
    return j


def report_profiles(report):
    """{case: profile JSON} of a scripts/gpu_check.sh report.json (its benchmarks bench/profile/<case>.json)."""
    out = {}
    for key, val in (report.get("benchmarks") or {}).items():
        t = re.fullmatch(r"bench/profile/([^/]+)\.json", key)
        if t:
            out[t.group(1)] = val
    return out


# The compared row of every cuBLASLt kernel: a GPU profile's own kernels of cuBLASLt (nvjet_*, xmma, its
# split-K reduction, several per call, chosen by its heuristic) folded into one measured row, against the
# prediction's one row of every cublasLtMatmul call (EMULATED_GEMM_ROW)
CUBLASLT_ROW = "cuBLASLt"


class DemangleError(RuntimeError):
    pass


def demangle(names):
    """{name: demangled name without its parameter list} (`c++filt -p`, binutils): CUPTI reports a
    kernel by its mangled symbol (_ZN4llmc4cuda...), the prediction by the emulated profile's demangled
    name (llmc::cuda::attn_fwd_fa2_kernel<32, true, false, false>). Names that are not mangled map to
    themselves. Raises DemangleError when a name is mangled and c++filt is missing (the rows would not
    match)."""
    import shutil
    mangled = sorted({n for n in names if n.startswith("_Z")})
    out = {n: n for n in names}
    if not mangled:
        return out
    exe = shutil.which("c++filt")
    if exe is None:
        raise DemangleError("the profile's kernel names are mangled and c++filt is not on PATH; install binutils "
                            "(apt-get install binutils) so they can be matched with the prediction's")
    import subprocess
    p = subprocess.run([exe, "-p"], input="\n".join(mangled) + "\n", capture_output=True, text=True)
    lines = p.stdout.split("\n")[:len(mangled)]
    if p.returncode != 0 or len(lines) != len(mangled):
        raise DemangleError(f"c++filt -p failed (exit {p.returncode}): {p.stderr.strip()}")
    for n, d in zip(mangled, lines):
        out[n] = d.strip()
    return out


def compare_key(name):
    """The row a kernel is compared in: CUBLASLT_ROW for cuBLASLt's kernels (measured) and for the
    prediction's cublasLtMatmul row; else its (demangled) name."""
    return CUBLASLT_ROW if kernel_group(name) == "GEMMs" and not name.startswith("llmc::") else name


def fold_rows(kernels, names=None):
    """{compare_key: row} of profile or prediction rows (names: demangled names), calls and µs summed
    over the kernels a key folds, and a prediction's bytes and FLOPs per step (None where a folded row
    has none); "kernels" lists the names folded in."""
    out = {}
    for k in kernels:
        name = (names or {}).get(k["kernel"], k["kernel"])
        key = compare_key(name)
        r = out.setdefault(key, dict(kernel=key, group=k.get("group") or kernel_group(name), calls_per_step=0.0,
                                     us_per_step=0.0, kernels=[], bytes_per_step=0.0, flops_per_step=0.0))
        r["calls_per_step"] += k["calls_per_step"]
        r["us_per_step"] += k.get("us_per_step") or 0.0
        for f in ("bytes_per_step", "flops_per_step"):
            r[f] = None if k.get(f) is None or r[f] is None else r[f] + k[f]
        r["kernels"].append(name)
    return out


def compare_profile(profile, pred_case, tolerance=1.3):
    """Measured (a profile.json) against predicted (one case of a prediction): per kernel row (the
    measured names demangled; cuBLASLt's kernels one row, CUBLASLT_ROW) and per group (ratio measured /
    predicted, flagged outside [1 / tolerance, tolerance]); an untimed (emulated) profile compares calls
    per step only. Returns a dict (rows, groups, flagged, timed). Raises DemangleError (demangle)."""
    timed = bool(profile["timed"])
    pred_rows = fold_rows(pred_case["kernels"])
    meas_rows = fold_rows(profile["kernels"], demangle([k["kernel"] for k in profile["kernels"]]))
    rows = []
    for name in list(meas_rows) + [n for n in pred_rows if n not in meas_rows]:
        m, p = meas_rows.get(name), pred_rows.get(name)
        group = p["group"] if p else m["group"]
        r = dict(kernel=name, group=group, calls_measured=m["calls_per_step"] if m else 0.0,
                 calls_predicted=p["calls_per_step"] if p else 0.0,
                 us_measured=(m["us_per_step"] if m else 0.0) if timed else None,
                 us_predicted=p["us_per_step"] if p else 0.0,
                 measured_kernels=m["kernels"] if m else [])
        r["ratio"] = (r["us_measured"] / r["us_predicted"] if timed and r["us_predicted"] > 0 else None)
        # achieved rates: the model's bytes and FLOPs of the row over its measured time
        nbytes, flops = (p["bytes_per_step"], p["flops_per_step"]) if p else (None, None)
        t = r["us_measured"] if timed and r["us_measured"] else None
        r["gbps_measured"] = nbytes / t * 1e-3 if nbytes and t else None
        r["tflops_measured"] = flops / t * 1e-6 if flops and t else None
        rows.append(r)
    groups = []
    flagged = []
    for g in GROUPS:
        pg = pred_case["groups"].get(g, 0.0)
        calls_m = sum(r["calls_measured"] for r in rows if r["group"] == g)
        calls_p = sum(r["calls_predicted"] for r in rows if r["group"] == g)
        if timed:
            mg = profile["idle_us"] if g == "gaps" else sum(r["us_measured"] or 0.0 for r in rows if r["group"] == g)
            ratio = mg / pg if pg > 0 else (None if mg == 0 else float("inf"))
            out = ratio is not None and not (1 / tolerance <= ratio <= tolerance)
        else:
            mg, ratio = None, None
            # calls only; cuBLASLt's kernels per call differ on a GPU, memsets and copies are not counted
            out = g not in ("GEMMs", "other", "gaps") and calls_m != calls_p
        groups.append(dict(group=g, us_measured=mg, us_predicted=pg, ratio=ratio, calls_measured=calls_m,
                           calls_predicted=calls_p, flagged=out))
        if out:
            flagged.append(g)
    step = None
    if timed:
        step = dict(us_measured=profile.get("step_us"), us_predicted=pred_case["step_us"],
                    ratio=profile.get("step_us", 0.0) / pred_case["step_us"])
    # the trainer's own count of its cuBLASLt calls (profiles since a0d0247) against the model's GEMMs: the
    # same shapes give the same FLOPs and bytes exactly; else the model times other GEMMs than ran
    gemms = None
    if profile.get("gemms") and pred_rows.get(CUBLASLT_ROW):
        g, p = profile["gemms"], pred_rows[CUBLASLT_ROW]
        gemms = dict(calls_trainer=g["calls_per_step"], flops_trainer=g["flops_per_step"],
                     bytes_trainer=g["bytes_per_step"], flops_model=p["flops_per_step"],
                     bytes_model=p["bytes_per_step"], tflops_trainer=g.get("tflops"))
        gemms["same"] = (gemms["flops_model"], gemms["bytes_model"]) == (gemms["flops_trainer"], gemms["bytes_trainer"])
        if not gemms["same"]:
            flagged.append("GEMM shapes")
    return dict(timed=timed, rows=rows, groups=groups, flagged=flagged, step=step, tolerance=tolerance, gemms=gemms)


def compare_text(res, title):
    tol = res["tolerance"]
    out = [f"{title}: measured (profile) vs predicted (modeled); ratio = measured / predicted, "
           f"flagged outside [{1 / tol:.2f}, {tol:.2f}]" + ("" if res["timed"] else " (untimed profile: calls only)")]
    out.append(f"{'kernel':70s} {'group':16s} {'calls m/p':>13s} {'us m':>10s} {'us p':>10s} {'ratio':>7s} "
               f"{'GB/s m':>8s} {'TFLOP/s m':>9s}")
    for r in res["rows"]:
        um = "-" if r["us_measured"] is None else f"{r['us_measured']:.1f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        gbps = "-" if r.get("gbps_measured") is None else f"{r['gbps_measured']:.0f}"
        tfl = "-" if r.get("tflops_measured") is None else f"{r['tflops_measured']:.1f}"
        out.append(f"{r['kernel'][:70]:70s} {r['group']:16s} {r['calls_measured']:6g}/{r['calls_predicted']:<6g} "
                   f"{um:>10s} {r['us_predicted']:10.1f} {ratio:>7s} {gbps:>8s} {tfl:>9s}")
    out.append("")
    out.append(f"{'group':16s} {'calls m/p':>13s} {'us m':>10s} {'us p':>10s} {'ratio':>7s}")
    for g in res["groups"]:
        um = "-" if g["us_measured"] is None else f"{g['us_measured']:.1f}"
        ratio = "-" if g["ratio"] is None else f"{g['ratio']:.2f}"
        out.append(f"{g['group']:16s} {g['calls_measured']:6g}/{g['calls_predicted']:<6g} {um:>10s} "
                   f"{g['us_predicted']:10.1f} {ratio:>7s}" + ("  FLAG" if g["flagged"] else ""))
    if res["step"]:
        s = res["step"]
        out.append(f"{'step':16s} {'':13s} {s['us_measured']:10.1f} {s['us_predicted']:10.1f} {s['ratio']:7.2f}")
    g = res.get("gemms")
    if g:
        rate = "" if g["tflops_trainer"] is None else f"; cuBLASLt's kernels at {g['tflops_trainer']:.1f} TFLOP/s"
        out.append(f"cuBLASLt per step, the trainer's count: {g['calls_trainer']:g} calls, "
                   f"{g['flops_trainer'] / 1e9:.3f} GFLOP, {g['bytes_trainer'] / 1e9:.4f} GB; the model's: "
                   f"{g['flops_model'] / 1e9:.3f} GFLOP, "
                   f"{g['bytes_model'] / 1e9:.4f} GB" + rate +
                   ("" if g["same"] else "  FLAG: the model's GEMMs are not the ones the trainer ran"))
    out.append(f"groups outside the tolerance: {', '.join(res['flagged']) if res['flagged'] else 'none'}")
    return "\n".join(out)


def lm_head_no_recompute_at_mma(cal, case="paper-b16"):
    """lm_head_designs' no-recompute design (its upper bound) with its dX and dW GEMMs at what a kernel of
    ours with mma.sync reaches (half the tensor peak, ASSUMED, as the other designs' product passes)
    instead of cuBLASLt's modeled time: the gain in µs. The forward's GEMM stays at cuBLASLt's (K = 192,
    the whole-K candidate's shape)."""
    m = CASES[case]
    N, C, Vp = m["B"] * m["T"], m["C"], padded_vocab(m["V"])
    _, dx, dw = (gemm_us(M, Nn, K, cal, **kw) for M, Nn, K, kw in lm_head_gemm_shapes(N, C, Vp))
    half = 2 * N * Vp * C / (H200_PEAK * 0.5) * 1e6
    issue_rate = H200_SMS * 4 * H200_CLOCK_HZ * cal["attn_bwd_issue_eff_hd32"]
    moved = max(N * Vp / SFU_RATE, N * Vp * LM_DLOGITS_INSTR / 32 / issue_rate) * 1e6  # as lm_head_designs
    head, _, overlapped = next(d for d in lm_head_designs(cal, case) if "folded into GEMMs" in d[0])[1:4]
    return head - (overlapped - max(dx, moved) - max(dw, moved) + 2 * max(half, moved))


# The step graph's saving a paper-b16 step, GPU at cb93781: 5.38 ms a step issued kernel by kernel, 5.21
# as the graph (docs/cuda_kernels.md); PDL's bound in speed_steps counts every gap, of which the graph
# (the trainer's default) already removes this much.
GRAPH_SAVED_US_PAPER = 5380.0 - 5210.0


def two_x_headroom(cal, case="paper-b16"):
    """What the unbuilt speed steps can give at most together (issue 52's 2x target): each row of
    speed_steps at its upper bound, once: PDL less what the step graph measured it already saves
    (GRAPH_SAVED_US_PAPER), the GEMM calls' per-call cost less the calls the whole-K row replaces (2 a
    layer), the LM head without recompute (its alternatives, the same work, not added), the whole-K GELU
    GEMM at its overlapped figure, the attention forward's set-up. (items [(what, µs)], total µs, total
    with the LM head priced at the measured classifier's per-logit rate (classifier_fitted_cal), or
    None where that case was not measured)."""
    m = CASES[case]
    L = m["L"]
    _, steps = speed_steps(cal, case)
    gain = {name: g for name, g, _ in steps}
    designs = {f"LM head: {d[0]}": d for d in lm_head_designs(cal, case)}
    no_recompute = next(n for n in designs if "folded into GEMMs" in n)
    items = [("launch gaps the step graph left (PDL's bound less the graph's measured saving)",
              gain["programmatic dependent launch (the launch gaps)"] - GRAPH_SAVED_US_PAPER),
             ("the GEMM calls' per-call cost, less the calls the whole-K row replaces",
              gain["C = 192 GEMM path: a small-C GEMM without cuBLASLt's per-call cost (upper bound)"]
              - 2 * L * cal["gemm_fixed_us"] * 0.5),
             ("the LM head without recompute", gain[no_recompute]),
             ("the whole-K GELU GEMM (overlapped)", small_k_gain(cal, L, overlap=True)),
             ("the attention forward's set-up",
              gain["attention forward: blocks over 4 query tiles (a quarter of its per-block set-up)"])]
    total = sum(us for _, us in items)
    fitted = classifier_fitted_cal(cal, case)
    refit = None
    if fitted is not None:
        head, _, overlapped = next(d for d in lm_head_designs(fitted, case) if "folded into GEMMs" in d[0])[1:4]
        refit = total - gain[no_recompute] + head - overlapped
    return items, total, refit


def built_steps(cal):
    """Issue 52's speed steps built since the calibration, as modeled gains: (step, case, modeled gain
    µs, the modeled step with it undone µs, the assumption the figure rests on). Each at the case it
    changes most (the bias gradient: a model with biases)."""
    def gain(case, base=None, **undo):
        """base: switches on both sides (a step built before a later one that replaced its kernel)."""
        now = step_us(predict_case(case, cal, **(base or {})), cal, profile_positions(case))
        undone = step_us(predict_case(case, cal, **(base or {}), **undo), cal, profile_positions(case))
        return undone - now, undone

    classifier_held_out = classifier_measured_us("paper-b16") / classifier_rowregs_us(
        CASES["paper-b16"]["B"] * CASES["paper-b16"]["T"], padded_vocab(CASES["paper-b16"]["V"]), cal)
    return [("encoder backward grouping on the host, uploaded with the batch", "paper-b16",
             *gain("paper-b16", host_groups=False),
             "the one-block grouping kernel gone; its upload one copy at PCIE_HTOD (assumed, 50 GB/s); the host's "
             "counting sort is off the device (docs/cuda_kernels.md, Encoder)"),
            ("classifier loss + logit gradient in one pass (the step's forward writes the dlogits)", "paper-b16",
             *gain("paper-b16", base=dict(rowregs_classifier=False), one_pass_classifier=False),
             "with c276bf2's classifier kernel on both sides: the forward's classifier pass gone (the fused pass already reads the logits and writes "
             "dlogits; its L2 re-read as measured for forward+dlogits)"),
            ("bias gradients (and the GELU backward of fc) in 16-byte column packs", "d12-b16",
             *gain("d12-b16", base=dict(rowblock_bias_sum=False), packed_bias_sum=False),
             "the packed kernel at eff_bias_sum (the c276bf2 profile's rate) against fa663e0's one-element loop "
             "(its GELU pass measured at eff_bias_gelu_bwd; its plain sums at eff_elementwise, never measured "
             "alone); none at paper-b16 (no biases)"),
            ("bias gradients: a block sums several row chunks in one wave, 3 blocks an SM (80 registers)", "d12-b16",
             *gain("d12-b16", rowblock_bias_sum=False),
             "the rewritten kernel at eff_elementwise or its static issue bound (BIAS_INSTR_PER_ELEMENT: the "
             "tanh GELU pass 38 SASS instructions an element, at attn_bwd_issue_eff_hd32), whichever is longer "
             f"(assumed; {HELD_OUT}; c276bf2's packed kernel was modeled at eff_elementwise before its run "
             "measured 0.36) against c276bf2's kernel at its measured eff_bias_sum; "
             f"at ls-small-b8 {gain('ls-small-b8', rowblock_bias_sum=False)[0] / 1e3:.2f} ms, none at paper-b16 "
             "(no biases)"),
            ("AdamW four elements a thread in 16-byte accesses", "d12-b16", *gain("d12-b16", packed_adamw=False),
             "the packed kernel at eff_elementwise (assumed; the c276bf2 profile reads 0.93-1.07x it) against "
             "eff_adamw, lab:adamw's measured "
             "rate for the per-tensor kernel with stochastic rounding (fa663e0's one-launch kernel, the same "
             "one-element loop without the rounding hash, was never timed alone: part of the gain may be that "
             "difference; lab:adamw's adamw_update_all row measures HEAD's); 30 bytes a parameter either way; "
             f"at paper-b16 {gain('paper-b16', packed_adamw=False)[0] / 1e3:.2f} ms"),
            ("classifier: the row in registers (5 vectors a thread), read once, ex2.approx, online softmax per vector",
             "paper-b16", *gain("paper-b16", rowregs_classifier=False),
             "the rewritten kernel at eff_elementwise or its static issue bound (17 SASS instructions a column "
             f"at attn_bwd_issue_eff_hd32), whichever is longer (assumed; {HELD_OUT}: {classifier_held_out:.2f}x "
             "this at paper-b16) against c276bf2's kernel "
             "at its lab rates (measured there at 819.8 us in the paper-b16 profile, modeled 684)"),
            ("attention backward: local heads' blocks walk runs of up to 4 outer tiles",
             "paper-b16", *gain("paper-b16", bwd_runs=False),
             "the grid's blocks only: attn_bwd_block_setup_us (fitted to the c276bf2 backward at B8) is paid "
             "once an outer tile in a run too (each loads its K, V or Q, dO and writes its outputs), since "
             "the cb93781 profile measured the runs' backward as c276bf2's without them (ls-small-b8 543.6 "
             "against 541.7 µs, paper-b16 907.1 against 900.4) where one set-up a run modeled 0.10 ms less "
             "at paper-b16; runs of 4 at B16, 2 at B8 (llmc/core/attention_split.h)"),
            ("attention backward's D = rowsum(dO O) in 16-byte packs, a head's lanes reduced by shuffles",
             "paper-b16", *gain("paper-b16", packed_dot=False),
             f"the packed kernel at eff_elementwise (assumed; {HELD_OUT}) against c276bf2's warp a row, "
             "measured there at 25.3 / 49.4 us a call (B 8 / 16) and modeled by attn_dot_wave_us")]


# A KV decode step of the generator (llmc/cuda/gpt2_cuda_decode.cuh issue_decode), B rows, modeled from
# the decode profile the GPU measured at c2b0f82 (docs/results/2026-12-04-H200-c2b0f82/report.json,
# bench/generate/paper-b16.json: the paper-b16 model, B 4 at context 2048, --cuda-graph 1 --pdl 0, every
# kernel timed alone), not from the training step's calibration: at B 4 cuBLASLt runs one GEMV kernel a
# call (nvjet_sm90_tst_8x64, 2.55 µs), where the training calibration's GEMM model charges a split-K
# reduction as well (6.6 µs a call). Mean µs a launch, measured:
DECODE_MEASURED_C2B0F82 = {
    "gemv": 2.547,           # cuBLASLt, the 24 layer calls (qkv, attproj, fc, fcproj)
    "lm_head": 2.84,         # cuBLASLt, the LM head (V 10112 x C 192)
    "layernorm": 1.90,       # layernorm_forward_kernel<8, true> (residual + LayerNorm); ln1 of the input 1.82
    "gelu": 1.39,            # gelu_forward_kernel (erf)
    "kv_store": 1.70,
    "attention": 15.99,      # attention_decode_split_kernel at context 2048 (LS G1 P50)
    "combine": 3.22,         # attention_decode_combine_kernel
    "encoder": 1.59,
    "copies": 0.82 + 2.88,   # the input's copy and the logits' copy to the host
    "gap": 149.32 / 64,      # the step's inner idle time over its 64 inner gaps (graph, no PDL, profiled)
    "busy": 227.75,          # the profiled step's busy time
    "step_graph": 303.0,     # the generator bench's decode step, unprofiled: graphs, --pdl 0
    "step_graph_pdl": 260.0,  # the same with --pdl 1
}
# The decode target's figures at context 16384, graphs and PDL (the lease's latency targets, c2b0f82): ms
DECODE_16K_C2B0F82 = {"ls-p50": 0.544, "mhsa": 0.752}
# The fused path (--fused-decode 1) has no measurement: decode_linear is ASSUMED to take what cuBLASLt's
# GEMV of the same layer took (both read the weight once over B rows; ours adds the LayerNorm prologue,
# computed in every block from L2, and the qkv layer's k and v stores into the cache), and its launches
# the same gaps; the one-launch decode attention (split and combine in one kernel, the last split block of
# a head merging) is ASSUMED to take the split and combine kernels' summed time: its gain is one gap a layer.


def decode_step(B_gemv_us=None, fused=False, L=6, qk_norm=False, gelu_kernel=True, gap_us=None):
    """Rows [(kernel, us)] of a modeled paper-b16 decode step (DECODE_MEASURED_C2B0F82) and its wall time µs:
    the kernels + (launches - 1) gaps of gap_us (the measured profiled gap when None)."""
    m = DECODE_MEASURED_C2B0F82
    gemv = m["gemv"] if B_gemv_us is None else B_gemv_us
    rows = [("copies", m["copies"]), ("encoder", m["encoder"])]
    if not fused:
        rows.append(("layernorm ln1", m["layernorm"]))
    for layer in range(L):
        rows.append((f"linear qkv {layer}", gemv))
        if qk_norm:
            rows.append((f"qknorm {layer}", m["layernorm"]))  # ASSUMED: a LayerNorm's time (not in the profile)
        if not fused or qk_norm:  # fused without QK-norm, the qkv layer stores k and v itself
            rows.append((f"kv_store {layer}", m["kv_store"]))
        if fused:
            rows.append((f"attention one launch {layer}", m["attention"] + m["combine"]))
        else:
            rows += [(f"attention {layer}", m["attention"]), (f"combine {layer}", m["combine"])]
        rows.append((f"linear attproj {layer}", gemv))
        if not fused:
            rows.append((f"layernorm ln2 {layer}", m["layernorm"]))
        rows.append((f"linear fc {layer}", gemv))
        if gelu_kernel and not fused:
            rows.append((f"gelu {layer}", m["gelu"]))
        rows.append((f"linear fcproj {layer}", gemv))
        if not fused:
            rows.append((f"layernorm residual {layer}", m["layernorm"]))
    rows.append(("linear lm_head", m["lm_head"]))
    launches = len(rows) + 1  # the two copies are one row
    gap = m["gap"] if gap_us is None else gap_us
    return rows, sum(us for _, us in rows) + (launches - 1) * gap


def decode_gaps():
    """The gaps a launch to model with: (what, µs), each from the c2b0f82 measurements: the unprofiled graph
    steps' time beyond the profiled busy time over their 64 gaps (with and without PDL; the host's share of
    the step, the logits' wait, lumped in), and the profiled step's inner gap."""
    m = DECODE_MEASURED_C2B0F82
    return [("graphs + PDL (unprofiled step - busy) / 64", (m["step_graph_pdl"] - m["busy"]) / 64),
            ("graphs (unprofiled step - busy) / 64", (m["step_graph"] - m["busy"]) / 64),
            ("graphs, profiled inner gap", m["gap"])]


def decode_fused_gain(gaps=None):
    """The fused decode kernels' modeled gain at the paper-b16 decode step (B 4, context 2048): per gap
    (decode_gaps() by default: (what, µs) pairs), (what, gap µs, launches cuBLASLt / fused, the cuBLASLt step
    µs, the fused step µs, gain µs, LS below MHSA at 16K: the c2b0f82 graph + PDL figures less the gain from
    both, the models' layers differing only in attention)."""
    out = []
    for what, gap in decode_gaps() if gaps is None else gaps:
        rows_c, cub = decode_step(gap_us=gap)
        rows_f, fus = decode_step(fused=True, gap_us=gap)
        g = (cub - fus) / 1e3
        ls, mhsa = DECODE_16K_C2B0F82["ls-p50"] - g, DECODE_16K_C2B0F82["mhsa"] - g
        out.append((what, gap, (len(rows_c) + 1, len(rows_f) + 1), cub, fus, cub - fus, 1.0 - ls / mhsa))
    return out


# The attention kernels' two modeled terms read against a GPU's profiles of three head mixes: all
# local (set-up and masked tiles weigh most), the paper's G 1, all global (whole tiles weigh most).
ATTN_VARIANT_CASES = ("paper-b16-local", "paper-b16", "paper-b16-mhsa")
ATTN_KERNELS = ("attn_fwd_fa2_kernel", "attn_bwd_kv_fa2_kernel", "attn_bwd_q_fa2_kernel")


def attn_terms(case, cal):
    """{kernel: parts} of a CASES step's FA2-class kernels (ATTN_KERNELS), µs per step as predict_case
    models them: total; fixed (L x kernel_fixed_us); tiles (the launches modeled without block set-up
    and merges, less fixed); setup (the rest: the blocks' set-ups and the split's merges, with what they
    do to the schedule's waves and tail)."""
    m = CASES[case]
    hd, L = m["C"] // m["NH"], m["L"]
    bare = dict(cal, attn_block_setup_us=0.0, attn_bwd_block_setup_us=0.0, attn_merge_us=0.0)
    out = {}
    for k in ATTN_KERNELS:
        shape = (k, hd, m["T"], m["P"], m["B"], m["NH"], m["G"])
        total = L * attn_kernel_us(*shape, cal, runs=True)
        tiles = L * attn_kernel_us(*shape, bare, runs=True)
        fixed = L * cal["kernel_fixed_us"]
        out[k] = dict(total=total, fixed=fixed, tiles=tiles - fixed, setup=total - tiles)
    return out


def attn_profile_us(profile):
    """{kernel: measured µs per step} of ATTN_KERNELS in a profile (every instance of a kernel summed;
    mangled names demangled); a kernel the profile lacks is absent."""
    rows = [r for r in profile.get("kernels", []) if isinstance(r, dict) and isinstance(r.get("kernel"), str)]
    names = demangle([r["kernel"] for r in rows])
    out = {}
    for r in rows:
        for k in ATTN_KERNELS:
            if re.search(rf"::{k}<", names[r["kernel"]]) and r.get("us_per_step") is not None:
                out[k] = out.get(k, 0.0) + r["us_per_step"]
    return {k: v for k, v in out.items() if v > 0}  # a kernel timed at 0 is not a measurement


# attn_attribution: the measurement noise its factors' spread is stated at (each kernel's time a step,
# independently per case; an assumption: the profiles record no spread)
ATTN_NOISE = 0.02


def attn_attribution(cal, measured, noise=ATTN_NOISE):
    """Which modeled term of each attention kernel a GPU disagrees with. measured: {case: {kernel: µs per
    step}} of ATTN_VARIANT_CASES (attn_profile_us of each case's profile). Per kernel over the cases that
    measured it, the least-squares factors a (tiles) and b (set-up and merges) of
        measured - fixed = a x tiles + b x setup        (attn_terms; a = b = 1: the model as calibrated)
    with each case's measured / modeled before and after the factors, each factor's standard deviation
    if every measurement carried independent relative noise `noise` (sigma_a, sigma_b: how far apart the
    cases set the two terms; the forward's set-up is a small share everywhere, so its b is loose), and
    the refit's rms relative residual (0 with two cases: the fit is then exact). A linear reading of a
    model whose schedule is not linear in its terms: what it names is the term to look at, not a new
    calibration. {kernel: dict(a, b, sigma_a, sigma_b, residual, cases={case: (measured, modeled,
    refit)})}; the numbers are None with fewer than two cases or a singular system."""
    terms = {c: attn_terms(c, cal) for c in ATTN_VARIANT_CASES}
    out = {}
    for k in ATTN_KERNELS:
        pts = [(c, measured[c][k], terms[c][k]) for c in ATTN_VARIANT_CASES if k in measured.get(c, {})]
        fit = dict(a=None, b=None, sigma_a=None, sigma_b=None, residual=None)
        if len(pts) >= 2:
            stt = sum(t["tiles"] ** 2 for _, _, t in pts)
            sss = sum(t["setup"] ** 2 for _, _, t in pts)
            sts = sum(t["tiles"] * t["setup"] for _, _, t in pts)
            det = stt * sss - sts * sts
            if abs(det) > 1e-9 * max(stt * sss, 1e-30):
                # (a, b) = sum_i w_i (y_i - fixed_i): the rows of (M^T M)^-1 M^T
                wa = [(t["tiles"] * sss - t["setup"] * sts) / det for _, _, t in pts]
                wb = [(t["setup"] * stt - t["tiles"] * sts) / det for _, _, t in pts]
                a = sum(w * (y - t["fixed"]) for w, (_, y, t) in zip(wa, pts))
                b = sum(w * (y - t["fixed"]) for w, (_, y, t) in zip(wb, pts))
                fit = dict(a=a, b=b,
                           sigma_a=sum((w * noise * y) ** 2 for w, (_, y, _) in zip(wa, pts)) ** 0.5,
                           sigma_b=sum((w * noise * y) ** 2 for w, (_, y, _) in zip(wb, pts)) ** 0.5)
        cases = {c: (y, t["total"], None if fit["a"] is None else t["fixed"] + fit["a"] * t["tiles"] +
                     fit["b"] * t["setup"]) for c, y, t in pts}
        if fit["a"] is not None:
            fit["residual"] = (sum(((r - y) / y) ** 2 for y, _, r in cases.values()) / len(cases)) ** 0.5
        out[k] = dict(fit, cases=cases)
    return out


# The LM head and the classifier (issue 52): three designs that keep the (N, Vp) logits from making
# their round trips to memory (the forward GEMM writes them, the classifier reads them and writes the
# dlogits, the dX and dW GEMMs read those). Each is priced against what HEAD runs for the same work
# (gemm_us of its cuBLASLt calls, lm_head_gemm_shapes; classifier_rowregs_us, its rate ASSUMED and held
# out: the cb93781 profile measured it 1.19x longer at paper-b16, classifier_fitted_cal). A design's own product pass (2 N Vp C FLOPs, a kernel of ours: mma.sync) runs at half
# the tensor peak (ASSUMED, as the small-K candidate's) but no faster than the model's cuBLASLt terms
# for the forward's shape. Its per-logit work is the classifier's: CLASSIFIER_INSTR_PER_COLUMN SASS
# instructions (the lse pass's, LM_LSE_INSTR, and the dlogits', LM_DLOGITS_INSTR, of which one is
# the MUFU ex2) at attn_bwd_issue_eff_hd32 (ASSUMED, as for HEAD's classifier), or the ex2s at
# SFU_RATE where that is longer (the same work's other bound). Two figures each: "serial", the
# products and that work one after the other (a lower bound on the gain), and "overlapped", the
# longest of them and the traffic (an upper bound). None of these is built.
LM_DLOGITS_INSTR = 7  # a dlogits element recomputed from its logit and the row's lse: pass 2 of the classifier
LM_LSE_INSTR = CLASSIFIER_INSTR_PER_COLUMN - LM_DLOGITS_INSTR  # pass 1: the online max and sum of exponentials


def lm_head_gemm_shapes(N, C, Vp):
    """HEAD's LM-head cuBLASLt calls, (M, N, K, gemm_us keywords): the forward's logits, the backward's dX
    and dW (fp32, added into); predict_case charges these."""
    return [(N, Vp, C, {}), (N, C, Vp, {}), (Vp, C, N, dict(out_bytes=F32, accumulate=True))]


def classifier_measured_us(case):
    """HEAD's classifier (the row in registers) at a case as the cb93781 profile measured it (µs a
    step), None where that profile has no such case."""
    return MEASUREMENTS.get(f"cb93781 profile {case} classifier_kernel")


def classifier_fitted_cal(cal, case):
    """cal with attn_bwd_issue_eff_hd32 set so that classifier_rowregs_us at the case is the cb93781
    profile's measurement (its issue term, the longer one, taking the difference), or None where the
    case was not measured or the measurement is not above the classifier's memory term. Prices the LM
    head designs' per-logit work at the rate HEAD's classifier ran that work at (speed_steps)."""
    measured = classifier_measured_us(case)
    if measured is None:
        return None
    m = CASES[case]
    N, Vp = m["B"] * m["T"], padded_vocab(m["V"])
    mem = classifier_rowregs_bytes(N, Vp) / (H200_BANDWIDTH * cal["eff_elementwise"]) * 1e6
    issue = N * Vp * CLASSIFIER_INSTR_PER_COLUMN / 32 / (
        H200_SMS * 4 * H200_CLOCK_HZ * cal["attn_bwd_issue_eff_hd32"]) * 1e6
    target = measured - cal["kernel_fixed_us"]
    if target <= mem:
        return None
    return dict(cal, attn_bwd_issue_eff_hd32=cal["attn_bwd_issue_eff_hd32"] * issue / target)


def lm_head_designs(cal, case="paper-b16"):
    """The LM-head designs at one case: a list of (name, HEAD's µs for the launches it replaces, the
    design's µs serial, its µs overlapped, assumption), all modeled (the module comment above)."""
    m = CASES[case]
    N, C, Vp = m["B"] * m["T"], m["C"], padded_vocab(m["V"])
    fwd, dx, dw = (gemm_us(M, Nn, K, cal, **kw) for M, Nn, K, kw in lm_head_gemm_shapes(N, C, Vp))
    cls = classifier_rowregs_us(N, Vp, cal)
    w, s = gemm_waves_ksteps(N, Vp, C)
    product = max(cal["gemm_wave_us"] * w + cal["gemm_kstep_us"] * s, 2 * N * Vp * C / (H200_PEAK * 0.5) * 1e6)
    issue_rate = H200_SMS * 4 * H200_CLOCK_HZ * cal["attn_bwd_issue_eff_hd32"]

    def work_us(ex2s, instr):
        """A pass over every logit with instr instructions a logit, ex2s of them MUFU ex2s."""
        return max(N * Vp * ex2s / SFU_RATE, N * Vp * instr / 32 / issue_rate) * 1e6

    def mem(nbytes):
        return nbytes / (H200_BANDWIDTH * cal["eff_elementwise"]) * 1e6

    def cost(passes, work, nbytes, launches):
        """(serial, overlapped) µs of a kernel of ours: launches x kernel_fixed_us + its product passes
        and per-logit work added, or the longest of them and its traffic."""
        fixed = launches * cal["kernel_fixed_us"]
        return fixed + max(passes * product + work, mem(nbytes)), fixed + max(passes * product, work, mem(nbytes))

    xw = (N * C + Vp * C) * ACT
    out = []
    # 1. the forward and the classifier in one kernel: pass 1 the logits' lse (online), pass 2 the logits
    # again and the dlogits written (bf16, as the classifier writes them); the logits never stored
    s1, o1 = cost(2, work_us(2, LM_LSE_INSTR + LM_DLOGITS_INSTR), 2 * xw + N * Vp * ACT, 1)
    out.append(("forward + classifier in one kernel, the logits computed twice and never stored", fwd + cls, s1, o1,
                "replaces the forward's cuBLASLt call and the classifier (HEAD's "
                f"{(fwd + cls) / 1e3:.2f} ms); two product passes of ours at half the tensor peak (ASSUMED)"))
    # 2. the whole LM head as FlashAttention does attention: the lse pass, then dX (row blocks) and dW
    # (vocabulary blocks) each recomputing the logits and their dlogits: 5 product passes, 3 ex2 a
    # logit; 4 passes if one backward pass adds dX with atomics (FA2's dQ), free in the upper bound
    work2 = work_us(3, LM_LSE_INSTR + 2 * LM_DLOGITS_INSTR)
    traffic2 = 3 * xw + N * C * ACT + Vp * C * F32 * 2
    s2, _ = cost(5, work2, traffic2, 3)
    _, o2 = cost(4, work2, traffic2, 2)
    out.append(("the whole LM head as FlashAttention does attention (lse pass, dX pass, dW pass)",
                fwd + dx + dw + cls, s2, o2, "replaces the three cuBLASLt calls and the classifier (HEAD's "
                f"{(fwd + dx + dw + cls) / 1e3:.2f} ms); five product passes of ours at half the tensor peak "
                "(ASSUMED; four, dX added with atomics, in the upper bound)"))
    # 3. no recompute: GEMMs of our own as fast as cuBLASLt's (ASSUMED), the forward's epilogue writing the
    # logits and each (row, 128-column tile)'s max and sum of exponentials, a merge launch for the lse
    # and loss (reads them), and the dX and dW GEMMs building the dlogits from the logits as they load
    # them: the classifier's pass gone, its per-logit work moved into the three GEMMs
    stats = N * _cdiv(Vp, SMALLK_TILE) * 2 * F32
    merge = cal["kernel_fixed_us"] + mem(stats + 16 * N)
    gemms = [fwd + mem(stats), dx, dw]
    moved = [work_us(1, LM_LSE_INSTR), work_us(1, LM_DLOGITS_INSTR), work_us(1, LM_DLOGITS_INSTR)]
    out.append(("the classifier folded into GEMMs of our own (the forward's epilogue, the dX and dW prologues)",
                fwd + dx + dw + cls, sum(gemms) + sum(moved) + merge,
                sum(max(g, e) for g, e in zip(gemms, moved)) + merge,
                "own GEMMs at cuBLASLt's modeled time (ASSUMED) against HEAD's "
                f"{(fwd + dx + dw + cls) / 1e3:.2f} ms; each one's moved per-logit work hidden under its products "
                "(overlapped) or added (serial); the tile statistics written and merged in one more launch"))
    return out


def speed_steps(cal, case="paper-b16"):
    """Issue 52's speed steps as modeled gains at one case (HEAD's grid): (step, modeled gain µs, the
    assumption the figure rests on). Each variant changes the kernel rows as the step would and
    re-sums; none of them is built."""
    m = CASES[case]
    rows = predict_case(case, cal)
    base = step_us(rows, cal, profile_positions(case))
    N, C, L, Vp = m["B"] * m["T"], m["C"], m["L"], padded_vocab(m["V"])
    by = {r["kernel"]: r for r in rows}

    def us(prefix):
        return sum(r["us_per_step"] for r in rows if r["kernel"].startswith(prefix))

    out = []
    # 1. C = 192 GEMM path: GELU forward and backward as GEMM epilogues (erf needs one cuBLASLt lacks:
    # modeled at eff_gelu_epilogue / eff_bias_gelu_bwd), bias gradients in the dW GEMM's epilogue, and
    # the ln forward folded into the next GEMM's prologue (the LN kernels' traffic gone, their stats kept)
    gelu_now = us("llmc::cuda::gelu_") + us("llmc::cuda::detail::bias_sum_kernel")
    gelu_epi = L * (N * 4 * C * ACT / (H200_BANDWIDTH * cal["eff_gelu_epilogue"]) * 1e6
                    + N * 4 * C * ACT * 2 / (H200_BANDWIDTH * cal["eff_bias_gelu_bwd"]) * 1e6)
    calls = by[EMULATED_GEMM_ROW]["calls_per_step"]
    gemm_fixed = calls * cal["gemm_fixed_us"]
    out.append(("C = 192 GEMM path: GELU fwd/bwd and bias gradients in GEMM epilogues",
                gelu_now - gelu_epi, "erf GELU (paper) in a custom epilogue at the measured tanh epilogue's rate"))
    out.append(("C = 192 GEMM path: a small-C GEMM without cuBLASLt's per-call cost (upper bound)",
                gemm_fixed * 0.5, f"half of gemm_fixed_us x calls ({cal['gemm_fixed_us']:.1f} µs x {calls:.0f}): the "
                "model cannot say how much of the per-call cost a hand-written kernel keeps"))
    # 2. the lab candidate (built in the lab, not wired): the erf GELU model's fc forward and fcproj dinp
    # each one launch of the whole-K GEMM with the GELU in its epilogue, against cuBLASLt + the GELU kernel
    if (N, 4 * C) == SMALLK_PAPER_MN and m.get("gelu") == "erf" and not m.get("bias", True):
        lo, hi = small_k_gain(cal, L, overlap=False), small_k_gain(cal, L, overlap=True)
        out.append(("C = 192 MLP: the lab's whole-K GEMM with the GELU in its epilogue (fc forward, fcproj dinp)",
                    lo, f"dev/cuda/matmul_candidates/small_k_gemm.cuh wired for both (it is not), against the c2b0f82 "
                    f"profile's cuBLASLt calls and GELU kernels: its static SASS count, the product's at gelu_forward's "
                    f"measured issue rate, the erf epilogue at the GELU kernels' measured time per instruction, mma.sync "
                    f"at half the tensor peak (ASSUMED); the epilogue after the products ({lo / 1e3:.2f} ms; "
                    f"{hi / 1e3:.2f} ms if the other resident block's products hide it). The row \"GELU fwd/bwd and bias "
                    f"gradients in GEMM epilogues\" prices the same fusion at the cuBLASLt tanh epilogue's measured "
                    f"rate, a loss; this one at the GELU kernels' own: profile:matmul_small_k measures it"))
    # 3. attention scheduling: the forward's blocks over 4 query tiles (a quarter of its block set-ups;
    # the backward's runs of outer tiles are built: built_steps)
    c4 = dict(cal, attn_block_setup_us=cal["attn_block_setup_us"] / 4)
    att_now = us("llmc::cuda::attn_fwd_fa2")
    r4 = predict_case(case, c4)
    att4 = sum(r["us_per_step"] for r in r4 if r["kernel"].startswith("llmc::cuda::attn_fwd_fa2"))
    out.append(("attention forward: blocks over 4 query tiles (a quarter of its per-block set-up)", att_now - att4,
                "the forward's set-up / 4 on every block (local and global); the backward's runs are built"))
    # 4. the LM head and the classifier without the logits' round trips (lm_head_designs): the gain if the
    # work each design adds hides under its products (an upper bound), the serial figure beside it
    # (each also priced with the per-logit rate fitted to HEAD's measured classifier: classifier_fitted_cal)
    fitted = classifier_fitted_cal(cal, case)
    refit = lm_head_designs(fitted, case) if fitted else [None] * len(lm_head_designs(cal, case))
    cls = classifier_rowregs_us(N, Vp, cal)
    for (name, head, serial, overlapped, why), again in zip(lm_head_designs(cal, case), refit):
        measured = "" if again is None else (
            f"; the cb93781 profile measured HEAD's classifier at {classifier_measured_us(case) / 1e3:.2f} ms "
            f"(held out), and with the per-logit rate fitted to it (the designs' work at that rate too) "
            f"{(again[1] - again[2]) / 1e3:.2f} ms if they add, {(again[1] - again[3]) / 1e3:.2f} ms if they hide "
            f"one another")
        out.append((f"LM head: {name}", head - overlapped,
                    f"{why}: {(head - serial) / 1e3:.2f} ms if the products and the per-logit work (the classifier's "
                    f"instructions at attn_bwd_issue_eff_hd32, or its ex2 at SFU_RATE) add, "
                    f"{(head - overlapped) / 1e3:.2f} ms if they hide one another (an upper bound); HEAD's classifier "
                    f"at its modeled rate ({cls / 1e3:.2f} ms, ASSUMED; lm_head_designs){measured}"))
    # 5. programmatic dependent launch: the launch gaps (the step graph, the trainer's default since
    # --cuda-graph auto, measured 0.07 ms of them at ls-small-b8 on the GPU at c276bf2; the model has no
    # term for a graph's launches, so this bound is against the gaps of steps issued kernel by kernel)
    launches = sum(r["calls_per_step"] for r in rows)
    out.append(("programmatic dependent launch (the launch gaps)", (launches - 1) * cal["gap_us"],
                f"every gap gone ({launches - 1:.0f} x gap_us {cal['gap_us']:.2f} µs, the cb93781 profile's idle time "
                f"split with the host's per-token work; the launches counted with cuBLASLt's memsets, its "
                f"split-K reductions charged none): an upper bound, of which the step graph (the default) "
                f"measured 0.07 ms at ls-small-b8; built behind --pdl 1, which the GPU at cb93781 measured "
                f"at ls-small-b8: 0.15 ms a step less eager, 0.06 ms as a graph, bit-identical; the "
                f"trainer's and the generator's default is --pdl auto (on at sm_90)"))
    return base, out


# Prefill shapes (issue 52, item 4): d12 (the GPT-2 124M shape, LS G1 P64) at B1 and the paper model,
# at prompts of 4K-16K (max_seq_len taken as the prompt) and the latency benchmark's B4 x 2048.
# bench-*: dev/bench/generate_latency.py's models (the paper's layers, the GPT-2 vocabulary).
PREFILL_SHAPES = {
    "d12": dict(CASES["d12-b16"]),
    "paper": dict(CASES["paper-b16"]),
    "bench-ls-p50": dict(CASES["ls-small-b8"], V=50257),
    "bench-ls-p100": dict(CASES["ls-small-b8"], V=50257, P=100),
    "bench-mhsa": dict(CASES["ls-small-b8"], V=50257, G=6),
}
PREFILL_RUNS = [("d12", 1, 4096), ("d12", 1, 8192), ("d12", 1, 16384), ("paper", 1, 4096), ("paper", 1, 8192),
                ("paper", 1, 16384), ("bench-ls-p50", 4, 2048), ("bench-mhsa", 4, 2048),
                ("bench-ls-p50", 4, 16352)]


def prefill_us(m, B, n, cal, last_layer_rows=False):
    """A KV prefill of (B, n) with KvLogits::Last (llmc/cuda/gpt2_cuda_decode.cuh), modeled µs and
    launches: the forward's layers over B n rows, every layer's k, v copied into the cache, the last
    row of each sequence finished (residual + lnf, the LM head over B rows). last_layer_rows: the last
    layer past its qkv (and QK-norm) over the B gathered rows only, as a decode step runs it (the
    decode attention over the cache), instead of over all B n rows."""
    L, C, NH, G, P, V = (m[k] for k in ("L", "C", "NH", "G", "P", "V"))
    tanh = m["gelu"] == "tanh"
    Vp, hd, N = padded_vocab(V), C // NH, B * n
    parts = []  # (µs, launches)

    def mlp_and_attn(rows, attention_us, attention_launches):
        parts.append((attention_us, attention_launches))
        parts.append((gemm_us(rows, C, C, cal), 1))  # attproj
        parts.append((mem_us(4 * rows * C * ACT + 8 * rows, "fused_ln_fwd", cal), 1))  # residual + ln2
        parts.append((gemm_us(rows, 4 * C, C, cal, gelu_epilogue=tanh), 1))  # fc (tanh: cuBLASLt's epilogue)
        if not tanh:
            parts.append((mem_us(2 * rows * 4 * C * ACT, "elementwise", cal), 1))  # the GELU's own kernel
        parts.append((gemm_us(rows, C, 4 * C, cal), 1))  # fcproj

    parts.append((mem_us(3 * N * C * ACT, "encoder_fwd", cal), 1))
    parts.append((mem_us(2 * N * C * ACT + 8 * N, "layernorm_fwd", cal), 1))
    full_attn = attn_kernel_us("attn_fwd_fa2_kernel", hd, n, P, B, NH, G, cal, stats=False)  # a prefill: none
    for l in range(L):
        parts.append((gemm_us(N, 3 * C, C, cal), 1))  # qkv
        if m.get("qk_norm"):
            parts.append((mem_us(4 * N * 2 * C * ACT, "elementwise", cal), 1))
        if l + 1 < L or not last_layer_rows:
            mlp_and_attn(N, full_attn, 1)
            if l + 1 < L:
                parts.append((mem_us(4 * N * C * ACT + 8 * N, "fused_ln_fwd", cal), 1))  # residual + next ln1
    # every layer's k, v (2 C per row) read and written into the cache
    parts.append((L * mem_us(4 * N * C * ACT, "elementwise", cal), L))
    if last_layer_rows:
        # the rows gathered (the layer input, its q k v), the decode attention over the cache (reads
        # every cached k, v of a global head, a window's of a local one), then the decode step's ops
        parts.append((2 * mem_us(2 * B * 4 * C * ACT, "elementwise", cal), 2))
        # (two kernels: the split over the cache and its combine, llmc/cuda/attention_decode.cuh)
        cache = B * hd * 2 * ACT * (G * n + (NH - G) * min(P, n))
        mlp_and_attn(B, mem_us(cache + 2 * B * C * ACT, "elementwise", cal) + cal["kernel_fixed_us"], 2)
    else:
        parts.append((2 * mem_us(2 * B * C * ACT, "elementwise", cal), 2))  # residual2, fcproj rows gathered
    parts.append((mem_us(4 * B * C * ACT + 8 * B, "fused_ln_fwd", cal), 1))  # residual + lnf
    parts.append((gemm_us(B, Vp, C, cal), 1))  # LM head over B rows
    busy = sum(t for t, _ in parts)
    launches = sum(k for _, k in parts)
    return busy + max(0, launches - 1) * cal["gap_us"], launches


def prefill_memory(m, B, n, head_rows):
    """Device bytes of a prefill's activation plan (llmc/cuda/gpt2_cuda_acts.cuh, bf16): the forward
    group for B n rows (every layer's activations, inputs, targets, branch) and the head group (lnf,
    logits, the loss rows and the backward's buffers) for head_rows rows."""
    L, C, NH, V = (m[k] for k in ("L", "C", "NH", "V"))
    Vp, qk, N = padded_vocab(V), 1 if m.get("qk_norm") else 0, B * n
    layer = N * (16 * C + qk * 3 * C) * ACT + N * (4 + NH + qk * 4 * NH) * F32
    fwd = 2 * N * 4 + N * C * ACT * 2 + L * layer  # inputs, targets; encoded, branch; the layers
    head = head_rows * (C * ACT + 2 * F32 + Vp * ACT + 4 * F32 + (9 + 3 * qk) * C * ACT)
    return fwd, head


PREFILL_NAMES = {"d12": "d12 (C 768, V 50257, G 1 P 64)", "paper": "paper (C 192, V 10000, G 1 P 50)",
                 "bench-ls-p50": "latency bench ls-p50 (C 192, V 50257)", "bench-mhsa": "latency bench mhsa (G = NH)"}


def prefill_table(cal):
    """Markdown (docs/generation.md's table) and rows: the modeled KvLogits::Last prefill with the last
    layer over all B n rows (before) and over the B last rows (after), and the activation plan's bytes
    with the head group for B n rows (before) and without it (after)."""
    out = ["| model | B x n | prefill before | after | gain | activations before | after | saved |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    res = []
    mib = 1 << 20
    for name, B, n in PREFILL_RUNS:
        m = dict(PREFILL_SHAPES[name], maxT=n)
        now, _ = prefill_us(m, B, n, cal)
        new, _ = prefill_us(m, B, n, cal, last_layer_rows=True)
        fwd, head = prefill_memory(m, B, n, B * n)
        out.append(f"| {PREFILL_NAMES[name]} | {B} x {n} | {now / 1e3:.2f} ms | {new / 1e3:.2f} ms | "
                   f"{100 * (now - new) / now:.1f}% | {(fwd + head) / mib:,.0f} MiB | {fwd / mib:,.0f} MiB | "
                   f"{100 * head / (fwd + head):.0f}% |")
        res.append(dict(model=name, B=B, n=n, prefill_us=now, prefill_last_rows_us=new, act_bytes=fwd + head,
                        act_bytes_no_head=fwd))
    return "\n".join(out), res


# The latency benchmark's prefill timings (dev/bench/generate_latency.py: B 4, its DEFAULT_PROMPTS), the
# variants against MHSA; issue 52's target: LS >= 30% below MHSA at 8K and 16K.
PREFILL_LS_RUNS = (4, (2048, 4096, 8192, 16384))


def prefill_ls_table(cal):
    """Markdown and rows: the modeled KvLogits::Last prefill (as the CUDA backend runs it: the last layer past
    its qkv over the B last rows) of the latency benchmark's three variants per prompt length, and how far
    each LS variant is below MHSA."""
    B, prompts = PREFILL_LS_RUNS
    out = ["| B x n | mhsa | ls-p50 | ls-p100 | ls-p50 below mhsa | ls-p100 below mhsa |",
           "|---|---:|---:|---:|---:|---:|"]
    res = []
    for n in prompts:
        t = {v: prefill_us(dict(PREFILL_SHAPES["bench-" + v], maxT=n), B, n, cal, last_layer_rows=True)[0]
             for v in ("mhsa", "ls-p50", "ls-p100")}
        out.append(f"| {B} x {n} | {t['mhsa'] / 1e3:.2f} ms | {t['ls-p50'] / 1e3:.2f} ms | {t['ls-p100'] / 1e3:.2f} ms | "
                   f"{100 * (1 - t['ls-p50'] / t['mhsa']):.0f}% | {100 * (1 - t['ls-p100'] / t['mhsa']):.0f}% |")
        res.append(dict(B=B, n=n, **{v + "_us": x for v, x in t.items()}))
    return "\n".join(out), res


def calibration_markdown(cal, checks):
    out = ["**Calibrated model** (modeled; calibrated on GPU measurements at fa663e0 and the per-kernel profiles at "
           "c276bf2 and cb93781, H200): parameters", "",
           "| parameter | value |", "|---|---:|"]
    for k, v in cal.items():
        out.append(f"| {k} | {v:.4g} |")
    out += ["", "Which measurement fixes which parameter:", ""]
    out += [f"- `{k}`: {v}" for k, v in CALIBRATION_SOURCES.items()]
    out += ["", "| measurement | group | use | measured µs | modeled µs | modeled / measured |",
            "|---|---|---|---:|---:|---:|"]
    for r in checks:
        out.append(f"| {r['id']} | {r['group']} | {r['use']} | {r['measured_us']:,.1f} | {r['modeled_us']:,.1f} | "
                   f"{r['modeled_us'] / r['measured_us']:.2f} |")
    out += ["", "| group | held-out measurements | worst modeled / measured | mean factor off (exp of mean abs. log) |",
            "|---|---:|---:|---:|"]
    for g, n, worst, mean in held_out_summary(checks):
        out.append(f"| {g} | {n} | {worst:.2f} | {mean:.2f} |")
    return "\n".join(out)


def held_out_summary(checks):
    """Per group over the held-out rows: (group, count, the worst ratio (farthest from 1), the mean of
    |ln(modeled / measured)| as a factor)."""
    import math
    out = []
    for g in dict.fromkeys(r["group"] for r in checks):
        rs = [r["modeled_us"] / r["measured_us"] for r in checks if r["group"] == g and r["use"] == "held out"]
        if rs:
            worst = max(rs, key=lambda x: abs(math.log(x)))
            out.append((g, len(rs), worst, math.exp(sum(abs(math.log(x)) for x in rs) / len(rs))))
    return out


def calibrated_main(a):
    cal = fit_calibration()
    if a.calibration:
        print(calibration_markdown(cal, calibration_checks(cal)))
    if a.speed_steps:
        base, steps = speed_steps(cal)
        print(f"\nIssue 52's speed steps at paper-b16, modeled (calibrated model; HEAD's step {base / 1e3:.2f} ms):\n")
        print("| speed step | modeled gain ms | share of the step | assumption |\n|---|---:|---:|---|")
        for name, gain, why in sorted(steps, key=lambda x: -x[1]):
            print(f"| {name} | {gain / 1e3:.2f} | {100 * gain / base:.1f}% | {why} |")
        items, total, refit = two_x_headroom(cal)
        print("\nThe unbuilt steps together, each at its upper bound and counted once (two_x_headroom): " +
              " + ".join(f"{what} {us / 1e3:.2f}" for what, us in items) + f" = {total / 1e3:.3f} ms" +
              ("" if refit is None else f" ({refit / 1e3:.3f} ms with the LM head priced at the measured classifier's "
                                        "per-logit rate)"))
        fitted = classifier_fitted_cal(cal, "paper-b16")
        print(f"\nThe LM head without recompute, its dX and dW GEMMs at mma.sync's half peak (ASSUMED) instead of "
              f"cuBLASLt's modeled time (lm_head_no_recompute_at_mma): {lm_head_no_recompute_at_mma(cal) / 1e3:.3f} ms" +
              ("" if fitted is None else f" ({lm_head_no_recompute_at_mma(fitted) / 1e3:.3f} ms at the fitted "
                                         "classifier rate)"))
        print("\nBuilt since the calibration, modeled (HEAD against HEAD with the step undone):\n")
        print("| built speed step | case | modeled gain ms | share of the undone step | assumption |\n"
              "|---|---|---:|---:|---|")
        for name, case, gain, undone, why in built_steps(cal):
            print(f"| {name} | {case} | {gain / 1e3:.2f} | {100 * gain / undone:.1f}% | {why} |")
        print("\nThe fused decode kernels (--fused-decode 1, off by default), modeled from the c2b0f82 decode profile "
              "(paper-b16, B 4 at context 2048; decode_linear ASSUMED as long as cuBLASLt's GEMV, the one-launch attention "
              "as long as the split and combine kernels):\n")
        print("| gap a launch, from | µs | launches cuBLASLt / fused | cuBLASLt path ms | fused ms | modeled gain ms | "
              "LS below MHSA at 16K |\n|---|---:|---:|---:|---:|---:|---:|")
        for what, gap, (lc, lf), cub, fus, gain, below in decode_fused_gain():
            print(f"| {what} | {gap:.2f} | {lc} / {lf} | {cub / 1e3:.3f} | {fus / 1e3:.3f} | {gain / 1e3:.3f} | "
                  f"{100 * below:.1f}% |")
    if a.predict:
        pred = prediction(cal, a.commit)
        os.makedirs(os.path.dirname(a.predict) or ".", exist_ok=True)
        with open(a.predict + ".json", "w") as f:
            json.dump(pred, f, indent=1)
        with open(a.predict + ".md", "w") as f:
            f.write(prediction_markdown(pred) + "\n")
        print(f"wrote {a.predict}.json and {a.predict}.md", file=sys.stderr)
    return 0


def compare_main(a):
    """--compare PROFILE --prediction PRED: PROFILE a profile.json (its case: --case, or its file or
    directory name) or a gpu_check.sh report.json (every bench/profile/<case>.json in it, or --case)."""
    if not (a.compare and a.prediction):
        print("error: --compare PROFILE needs --prediction PRED (and the other way round); give both", file=sys.stderr)
        return 2
    try:
        with open(a.prediction) as f:
            pred = json.load(f)
        cases = pred["cases"]
        if not isinstance(cases, dict):
            raise ValueError("its 'cases' is not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: --prediction {a.prediction}: {e}; give a file `roofline.py --predict` wrote", file=sys.stderr)
        return 2
    try:
        with open(a.compare) as f:
            raw = json.load(f)
        if isinstance(raw, dict) and "benchmarks" in raw:  # a gpu_check.sh report.json
            found = report_profiles(raw)
            if a.case and a.case not in found:
                raise ValueError(f"the report has no bench/profile/{a.case}.json "
                                 f"(it has: {', '.join(found) or 'none'})")
            if not found:
                raise ValueError("the report has no bench/profile/*.json (did the profile stage run?)")
            if a.case:
                todo = {a.case: found[a.case]}
            else:  # every profiled case the prediction has (the step graph's case has none: no graph term)
                todo = {c: p for c, p in found.items() if c in cases}
                for c in found:
                    if c not in cases:
                        print(f"note: the report's profile {c} has no case in the prediction; not compared",
                              file=sys.stderr)
                if not todo:
                    raise ValueError(f"none of its profiles ({', '.join(found)}) is a case of the prediction "
                                     f"({', '.join(cases)})")
        else:
            case = a.case or os.path.splitext(os.path.basename(a.compare))[0]
            if not a.case and case == "profile":  # the trainer's -o DIR/profile.json: the case is DIR's name
                case = os.path.basename(os.path.dirname(os.path.abspath(a.compare)))
            todo = {case: raw}
        todo = {case: load_profile(prof) for case, prof in todo.items()}
    except (OSError, ValueError) as e:
        print(f"error: --compare {a.compare}: {e}; give the profile.json a --profile-steps run wrote "
              "(or gpu_check.sh's report.json)", file=sys.stderr)
        return 2
    missing = [c for c in todo if c not in cases]
    if missing:
        print(f"error: the prediction has no case '{missing[0]}' (it has {', '.join(cases)}); name one with --case",
              file=sys.stderr)
        return 2
    texts = []
    for case, prof in todo.items():
        try:
            res = compare_profile(prof, cases[case], a.tolerance)
        except DemangleError as e:
            print(f"error: --compare {a.compare}: {e}", file=sys.stderr)
            return 2
        texts.append(compare_text(res, f"{case}: {a.compare} vs {a.prediction} ({pred.get('label', '?')}, "
                                       f"{pred.get('commit', '?')})"))
    print("\n\n".join(texts))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS) + ["all"], default="all")
    ap.add_argument("--batch", type=int, help="sequences per step (default: the model's)")
    ap.add_argument("--seq", type=int, help="sequence length T (default: the model's)")
    ap.add_argument("--sass", help="sass_report JSON: adds the column modeled from SASS figures")
    ap.add_argument("--out", help="also write every figure as JSON to DIR/roofline.json")
    ap.add_argument("--dq-designs", action="store_true",
                    help="also the attention backward's dQ half in two designs (dq_designs)")
    ap.add_argument("--calibration", action="store_true",
                    help="the calibrated model (modeled): its parameters, what fixed each, and its error on the "
                         "measurements it was fitted on and on those held out")
    ap.add_argument("--predict", metavar="PREFIX",
                    help="write the calibrated per-kernel prediction of the profile stage's shapes to PREFIX.json "
                         "and PREFIX.md (labelled modeled), with --commit")
    ap.add_argument("--commit", default="HEAD", help="the commit a --predict file is for")
    ap.add_argument("--speed-steps", action="store_true",
                    help="issue 52's speed steps as modeled gains at paper-b16 (calibrated model)")
    ap.add_argument("--prefill", action="store_true",
                    help="a KvLogits::Last prefill with the last layer over all rows vs the last rows only, and "
                         "its activation memory with and without the head group (calibrated model)")
    ap.add_argument("--compare", metavar="PROFILE",
                    help="a --profile-steps profile.json to compare with --prediction, row by row and per group")
    ap.add_argument("--prediction", metavar="PRED", help="a --predict JSON (docs/results/predictions/)")
    ap.add_argument("--case", help="the prediction's case for --compare (default: PROFILE's file name, e.g. "
                                   "paper-b16 for bench/profile/paper-b16.json, or its directory's for "
                                   "profile/paper-b16/profile.json)")
    ap.add_argument("--tolerance", type=float, default=1.3, help="--compare flags groups outside this ratio")
    a = ap.parse_args(argv)
    if a.compare or a.prediction:
        return compare_main(a)
    if a.prefill:
        cal = fit_calibration()
        print(prefill_table(cal)[0])
        print("\nThe latency benchmark's prefill, LS against MHSA (modeled):\n")
        print(prefill_ls_table(cal)[0])
        return 0
    if a.calibration or a.predict or a.speed_steps:
        return calibrated_main(a)
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
