#!/usr/bin/env python3
"""Heatmaps of attention maps written by `train_gpt2_ls --eval-only --dump-attention L:H,...`.

    python3 scripts/plot_attention.py out/eval [more .npy files or dirs] --config out/run/config.json
    python3 scripts/plot_attention.py out/eval/attn_L0_H3.npy --window 50 --global-heads 1 --heads 6

Inputs: `attn_L<l>_H<h>.npy` files (docs/formats.md: float32 (T, T), row i = query i, column j =
key j, masked entries 0), or directories holding them. Whether head h is local, and its window P,
come from the training run's config.json (`--config`, the file the trainer writes into its -o
directory: model.window, model.global_heads, model.num_heads, and train.near when the run set
--near) or from --window, --global-heads and --heads (which override the config).

Writes one PNG per input, `attn_L<l>_H<h>.png`, into --out DIR (default: next to the .npy):
  - the probabilities p[i, j] as a heatmap, query i down, key j across; color scale logarithmic
    (default, --vmin 1e-4 .. 1; smaller values get the --vmin color) or --scale linear (0 .. max);
    entries the mask hides (j > i, and for a local head j <= i - P) are light grey;
  - a local head's window boundary: the line j = i - P + 1 (its first visible key), drawn between
    key i - P + 1 and key i - P (solid);
  - the near/far split at distance N (--near, else the run's --near, else P), as in the trainer's
    near/far statistics: key j is near when i - j < N; drawn between key i - N + 1 and i - N (dashed),
    for every head;
  - the title: layer, head, local (P) or global, T, and the near mass, the mean over the query rows
    of the probability on near keys.
Prints one line per PNG (path, head, near mass). The files are checked first: square float arrays,
probabilities in [0, 1], rows summing to 1, and zero wherever the mask of the given P and G hides a
key (a mismatch means the config does not belong to the dump); any problem is one line
`error: ...` on stderr and exit status 1.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

NAME = re.compile(r"^attn_L(\d+)_H(\d+)\.npy$")
ROW_SUM_TOL = 1e-4  # float32 rows of up to maxT probabilities sum to 1 within ~1e-5


class PlotError(Exception):
    pass


def find_dumps(paths):
    """(path, layer, head) of every dump named on the command line or found in a named directory."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(f for f in os.listdir(p) if NAME.match(f))
            if not found:
                raise PlotError(f"{p} holds no attn_L<l>_H<h>.npy files; write them with "
                                "train_gpt2_ls --eval-only --dump-attention L:H -o DIR")
            out += [os.path.join(p, f) for f in found]
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise PlotError(f"{p}: no such file or directory")
    dumps = []
    for p in out:
        m = NAME.match(os.path.basename(p))
        if not m:
            raise PlotError(f"{p}: the name must be attn_L<layer>_H<head>.npy, as --dump-attention writes it "
                            "(the layer and head are read from it)")
        dumps.append((p, int(m.group(1)), int(m.group(2))))
    return dumps


def model_geometry(args):
    """(window P, global heads G, heads NH, near N) from --config and the flags (flags win)."""
    window = global_heads = heads = near = None
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                conf = json.load(f)
            model = conf["model"]
            window, global_heads, heads = int(model["window"]), int(model["global_heads"]), int(model["num_heads"])
            near = conf.get("train", {}).get("near")
        except (OSError, json.JSONDecodeError) as e:
            raise PlotError(f"--config {args.config}: cannot read it as JSON ({e}); give the run's config.json")
        except (KeyError, TypeError, ValueError):
            raise PlotError(f"--config {args.config}: no model.window / model.global_heads / model.num_heads; "
                            "give the config.json that train_gpt2_ls wrote into the run's -o directory")
    if args.window is not None:
        window = args.window
    if args.global_heads is not None:
        global_heads = args.global_heads
    if args.heads is not None:
        heads = args.heads
    if args.near is not None:
        near = args.near
    missing = [flag for flag, v in [("--window", window), ("--global-heads", global_heads), ("--heads", heads)]
               if v is None]
    if missing:
        raise PlotError(f"unknown {', '.join(missing)}: give --config RUN_DIR/config.json (the training run's) "
                        "or --window P --global-heads G --heads NH")
    if window < 1:
        raise PlotError(f"--window {window} must be >= 1")
    if heads < 1 or not 0 <= global_heads <= heads:
        raise PlotError(f"--global-heads {global_heads} must be in 0..--heads ({heads})")
    near = window if near is None else int(near)
    if near < 1:
        raise PlotError(f"--near {near} must be >= 1")
    return window, global_heads, heads, near


def visible_mask(T, local, window):
    """(T, T) bool: key j visible to query i (j <= i, and i - j < P for a local head)."""
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    vis = j <= i
    if local:
        vis &= (i - j) < window
    return vis


def load_dump(path, local, window):
    try:
        p = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise PlotError(f"{path}: not a readable .npy file ({e})")
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] < 1:
        raise PlotError(f"{path}: shape {p.shape} is not (T, T)")
    if not np.issubdtype(p.dtype, np.floating):
        raise PlotError(f"{path}: dtype {p.dtype} is not a float type")
    p = p.astype(np.float64)
    if not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1 + ROW_SUM_TOL:
        raise PlotError(f"{path}: values outside [0, 1] (or not finite): not attention probabilities")
    sums = p.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1) > ROW_SUM_TOL)
    if bad.size:
        raise PlotError(f"{path}: row {bad[0]} sums to {sums[bad[0]]:.6g}, not 1: not attention probabilities")
    vis = visible_mask(p.shape[0], local, window)
    hidden = np.argwhere((p != 0) & ~vis)
    if hidden.size:
        i, j = hidden[0]
        kind = f"a local head with window {window}" if local else "a global (causal) head"
        raise PlotError(f"{path}: p[{i}, {j}] = {p[i, j]:.3g} is non-zero, but the key is masked for {kind}; "
                        "the --config / --window / --global-heads do not match the run that wrote the dump")
    return p, vis


def near_mass(p, near):
    """Mean over query rows of the probability on keys with i - j < near."""
    T = p.shape[0]
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return float((p * ((i - j) < near)).sum(axis=1).mean())


def plot_one(plt, colors, p, vis, layer, head, local, window, near, scale, vmin, out_path):
    T = p.shape[0]
    data = np.ma.masked_array(p, mask=~vis)
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("#dddddd")
    if scale == "log":
        norm = colors.LogNorm(vmin=vmin, vmax=1.0, clip=True)
        data = np.ma.masked_array(np.maximum(p, vmin), mask=~vis)  # zeros inside the mask: the vmin color
    else:
        norm = colors.Normalize(vmin=0.0, vmax=max(float(p.max()), 1e-12))
    fig, ax = plt.subplots(figsize=(7.2, 6.2))
    im = ax.imshow(data, cmap=cmap, norm=norm, interpolation="nearest", origin="upper",
                   extent=(-0.5, T - 0.5, T - 0.5, -0.5))
    fig.colorbar(im, ax=ax, label="attention probability" + (" (log scale)" if scale == "log" else ""))
    # boundary between key i - D + 1 (distance D - 1, inside) and key i - D: the line x = y - D + 0.5
    def boundary(D, **kw):
        if D >= T:
            return
        y = np.array([D - 1.0, T - 0.5])
        ax.plot(y - D + 0.5, y, **kw)
    if local:
        boundary(window, color="#d62728", lw=1.6, ls="-", label=f"window: j = i - {window} + 1 (P = {window})")
    nm = near_mass(p, near)
    boundary(near, color="white", lw=1.2, ls="--", label=f"near/far split: i - j = {near}")
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(T - 0.5, -0.5)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    kind = f"local, P = {window}" if local else "global"
    ax.set_title(f"layer {layer} head {head} ({kind}), T = {T}\nnear mass (i - j < {near}): {nm:.3f}", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        leg = ax.legend(loc="upper right", fontsize=8, framealpha=0.8)
        leg.get_frame().set_facecolor("#bbbbbb")
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return nm


def main(argv=None):
    ap = argparse.ArgumentParser(description="Heatmaps (PNG) of attention maps dumped by train_gpt2_ls "
                                 "--eval-only --dump-attention.")
    ap.add_argument("inputs", nargs="+", metavar="DUMP", help="attn_L<l>_H<h>.npy files, or directories holding them")
    ap.add_argument("--config", help="the training run's config.json (model.window, model.global_heads, "
                    "model.num_heads, train.near)")
    ap.add_argument("--window", type=int, help="P: a local head's window (overrides --config)")
    ap.add_argument("--global-heads", type=int, help="G: the last G heads are global (overrides --config)")
    ap.add_argument("--heads", type=int, help="NH: heads per layer (overrides --config)")
    ap.add_argument("--near", type=int, help="near/far split distance N: key j is near when i - j < N "
                    "(default: the run's --near, else P)")
    ap.add_argument("--scale", choices=["log", "linear"], default="log", help="color scale (default log)")
    ap.add_argument("--vmin", type=float, default=1e-4, help="log scale: the smallest probability with its own "
                    "color (default 1e-4)")
    ap.add_argument("--out", help="directory for the PNGs (default: next to each .npy)")
    args = ap.parse_args(argv)
    try:
        if not 0 < args.vmin < 1:
            raise PlotError(f"--vmin {args.vmin} must be in (0, 1)")
        window, global_heads, heads, near = model_geometry(args)
        dumps = find_dumps(args.inputs)
        loaded = []
        for path, layer, head in dumps:  # check every file before writing anything
            if head >= heads:
                raise PlotError(f"{path}: head {head} does not exist with --heads {heads}; the config does not "
                                "match the dump")
            local = head < heads - global_heads
            p, vis = load_dump(path, local, window)
            loaded.append((path, layer, head, local, p, vis))
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.colors as colors
        import matplotlib.pyplot as plt
        if args.out:
            os.makedirs(args.out, exist_ok=True)
        for path, layer, head, local, p, vis in loaded:
            out_dir = args.out or os.path.dirname(path) or "."
            out_path = os.path.join(out_dir, f"attn_L{layer}_H{head}.png")
            nm = plot_one(plt, colors, p, vis, layer, head, local, window, near, args.scale, args.vmin, out_path)
            kind = f"local P={window}" if local else "global"
            print(f"{out_path}: layer {layer} head {head} ({kind}), T {p.shape[0]}, near mass (i-j < {near}) {nm:.4f}")
    except (PlotError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
