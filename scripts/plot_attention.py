#!/usr/bin/env python3
"""Heatmaps of attention maps written by `train_gpt2_ls --eval-only --dump-attention L:H,...`.

    python3 scripts/plot_attention.py out/eval [more .npy files or dirs] --config out/run/config.json
    python3 scripts/plot_attention.py out/eval/attn_L0_H3.npy --window 50 --global-heads 1 --heads 6 --formats png,pdf

Inputs: `attn_L<l>_H<h>.npy` files (docs/formats.md: float32 (T, T), row i = query i, column j =
key j, masked entries 0), or directories holding them. Whether head h is local, and its window P,
come from the training run's config.json (the file the trainer writes into its -o directory:
model.window, model.global_heads, model.num_heads, and train.near when the run set --near), or from
--window, --global-heads and --heads (which override the config; one that differs from the dumps' own
model gets a note on stderr). The dumps' own model wins: when
the directory of the dumps holds the eval.json that `--eval-only -o DIR` writes, its "model" names the
checkpoint, and the config.json beside that checkpoint is the one used; `--config` is then not needed,
and a `--config` whose model (P, G, NH, near) differs from it is refused. Without that eval.json (or
with a checkpoint that has no config.json beside it) `--config` is used with a note on stderr that it
cannot be checked against the dump. eval.json also records the checkpoint's identity (model_header_fnv1a64,
the FNV-1a 64 of its 1024-byte header, which holds the payload checksum): when the file at that path is
another model now (the run directory was replaced) or gone, its config.json is not used: without --config
(or all of --window, --global-heads, --heads) that is an error naming the fix, with them a note. An eval.json
without the identity (older builds) gets a note that it cannot be checked.

Writes one image per input and format (--formats, as plot_run.py's: comma-separated, default png),
`attn_L<l>_H<h>.png` (.svg, .pdf, ...), into --out DIR (default: next to the .npy):
  - the probabilities p[i, j] as a heatmap, query i down, key j across; color scale logarithmic
    (default, --vmin 1e-4 .. 1; smaller values get the --vmin color) or --scale linear (0 .. max);
    entries the mask hides (j > i, and for a local head j <= i - P) are light grey;
  - a local head's window boundary: the line j = i - P + 1 (its first visible key), drawn between
    key i - P + 1 and key i - P (solid);
  - the near/far split at distance N (--near, else the run's --near at the checkpoint's step: config.json's
    train.near and the changes its history records before that step; else P), as in the trainer's
    near/far statistics: key j is near when i - j < N; drawn between key i - N + 1 and i - N (dashed),
    for every head;
  - the title: layer, head, local (P) or global, T, and the near mass, the mean over the query rows
    of the probability on near keys.
Prints one line per input (its images' paths, head, near mass). The files are checked first: square float arrays,
probabilities in [0, 1], rows summing to 1, and zero wherever the mask of the given P and G hides a
key (a mismatch means the config does not belong to the dump: a window too small, a global head called
local); any problem is one line `error: ...` on stderr and exit status 1.
The other direction, labels whose mask shows keys the dump never attends (a local head of window Q called
global, or given a window above Q), gets one note per dump on stderr naming the window the map shows and the
flags that would label it so, when the dumps' own model is not known (with it, the heads are labelled by it,
and a flag that overrides it has its note above). A map counts as a local head's of window Q when every key at
distance >= Q is exactly 0 while 2 <= Q and T >= 2Q (Q = 1 is also a head collapsed onto its own key), at least 90% of the keys at distances < Q are non-zero, and the key
at distance Q - 1 is non-zero in at least half the rows, with a median probability of at least 1e-30. This is
a note, not a refusal, because exact zeros are not proof of a mask: a global head whose far logits lie ~100
below its near ones (the logit explosion this tool studies) underflows to the same zeros in float32 (exp
below ~1e-45 is 0), and a refusal would leave no true labels to give such a head.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_formats import FormatsError, add_formats_argument, parse_formats  # noqa: E402

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


def near_at(conf, step):
    """The run's --near for its checkpoint of `step` (None: its start value): "train" holds the value the run
    started with and "history" each change made on a resume from a step (docs/formats.md); the checkpoint of
    step S was trained, and its statistics split, with the changes made before S."""
    near = conf.get("train", {}).get("near")
    changes = sorted((h for h in conf.get("history") or [] if isinstance(h, dict) and "--near" in
                      [n.strip() for n in str(h.get("flag", "")).replace("/", ",").split(",")]),
                     key=lambda h: h.get("step", 0))
    if changes:
        near = changes[0].get("old")
    for h in changes:
        if step is not None and isinstance(h.get("step"), int) and h["step"] < step:
            near = h.get("new")
    return near


def read_geometry(path, what, step=None):
    """(P, G, NH, near or None) of a run's config.json, near that of its checkpoint of `step` (None: the
    run's start); `what` names it in errors ("--config X")."""
    try:
        with open(path, encoding="utf-8") as f:
            conf = json.load(f)
        model = conf["model"]
        near = near_at(conf, step)
        return int(model["window"]), int(model["global_heads"]), int(model["num_heads"]), near
    except (OSError, json.JSONDecodeError) as e:
        raise PlotError(f"{what}: cannot read it as JSON ({e}); give the run's config.json")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise PlotError(f"{what}: no model.window / model.global_heads / model.num_heads; "
                        "give the config.json that train_gpt2_ls wrote into the run's -o directory")


def header_identity(path):
    """eval.json's "model_header_fnv1a64" of a model file: FNV-1a 64 of its 1024-byte header (which holds the
    payload checksum and every model field), 16 hex digits; None when the file cannot be read or is shorter."""
    try:
        with open(path, "rb") as f:
            header = f.read(1024)
    except OSError:
        return None
    if len(header) != 1024:
        return None
    h = 0xcbf29ce484222325
    for b in header:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def dump_config(dump_dirs, notes):
    """((eval.json, config.json) of the run whose checkpoint the dumps' eval.json names, or None when a
    directory has no such eval.json or the checkpoint no config.json beside it; stale), where stale says why
    the checkpoint at the named path is no longer the model evaluated (eval.json's model_header_fnv1a64
    differs, or the file is gone), else None. An eval.json without that checksum (older builds) gets a line
    in `notes` that it cannot be checked. Refuses dumps of two models."""
    found = set()
    for d in sorted(set(dump_dirs)):
        ev = os.path.join(d, "eval.json")
        try:
            with open(ev, encoding="utf-8") as f:
                rec = json.load(f)
            model, recorded = rec.get("model"), rec.get("model_header_fnv1a64")
        except (OSError, ValueError, AttributeError):
            return None, None
        # a relative path (eval.json of older versions) names a file relative to an unknown directory
        absolute = isinstance(model, str) and os.path.isabs(model)
        conf = os.path.join(os.path.dirname(model), "config.json") if absolute else ""
        if not conf or not os.path.isfile(conf):
            return None, None
        if not isinstance(recorded, str):
            notes.append(f"note: {ev} records no checksum of {model} (written by an older build): cannot check "
                         f"that it is still the model that wrote the dumps, and {conf} its run")
        else:
            now = header_identity(model)
            if now is None:
                return None, f"{ev} names {model}, which no longer exists"
            if now != recorded:
                return None, (f"{ev} names {model}, which is no longer the model it evaluated (model_header_fnv1a64 "
                              f"{recorded} then, {now} now: the run was replaced or retrained)")
        found.add((ev, conf))
    if len({read_geometry(c, f"{c} (named by {e})") for e, c in found}) > 1:
        raise PlotError("the dumps come from models of different shapes (" +
                        ", ".join(f"{e} names {c}" for e, c in sorted(found)) + "); plot each directory on its own")
    return (sorted(found)[0] if found else None), None


def evaluated_step(eval_json):
    """The step of the checkpoint an eval.json names (model_<step>.bin), None for another name."""
    try:
        with open(eval_json, encoding="utf-8") as f:
            model = json.load(f).get("model")
    except (OSError, ValueError, AttributeError):
        return None
    m = re.fullmatch(r"model_(\d+)\.bin", os.path.basename(str(model)))
    return int(m.group(1)) if m else None


def describe_geometry(g):
    return f"window {g[0]}, global heads {g[1]}, heads {g[2]}, near {g[3] if g[3] is not None else g[0]}"


def model_geometry(args, dump_dirs=(), notes=None):
    """(window P, global heads G, heads NH, near N, labelled_by): the dumps' own model (dump_config), else
    --config (a line saying it cannot be checked is appended to `notes`), then the flags (flags win); a --config
    that differs from the dumps' own model is refused. labelled_by names what decides which heads are local and
    their window when the dumps' own model is not known ("--config X", "--window 16, --global-heads 1, ..."),
    else None."""
    window = global_heads = heads = near = None
    notes = [] if notes is None else notes
    own, stale = dump_config(dump_dirs, notes)
    if stale:
        if not args.config and None in (args.window, args.global_heads, args.heads):
            raise PlotError(f"{stale}; give --config with the config.json of the run evaluated (or --window P "
                            "--global-heads G --heads NH), or evaluate the checkpoint again into a new -o")
        notes.append(f"note: {stale}: cannot check that " +
                     (f"--config {args.config} describes" if args.config else
                      "--window, --global-heads and --heads describe") + " the model that wrote the dumps")
    geometry = read_geometry(own[1], f"{own[1]} (named by {own[0]})", evaluated_step(own[0])) if own else None
    if args.config:
        given = read_geometry(args.config, f"--config {args.config}")
        if geometry is not None and given[:3] != geometry[:3]:  # (near splits the statistics; not the model)
            raise PlotError(f"--config {args.config} describes another model ({describe_geometry(given)}) than "
                            f"the dumps': {own[0]} names a checkpoint of the run {own[1]} "
                            f"({describe_geometry(geometry)}); drop --config or give that run's config.json")
        if geometry is None and not stale:
            notes.append(f"note: the dumps have no eval.json naming a checkpoint with a config.json beside it: "
                         f"cannot check that --config {args.config} describes the model that wrote them")
        if geometry is None:
            geometry = given
    if geometry is not None:
        window, global_heads, heads, near = geometry
    overridden = [f"--{flag} {given} (the model's {own_value})" for flag, given, own_value in
                  [("window", args.window, window), ("global-heads", args.global_heads, global_heads),
                   ("heads", args.heads, heads), ("near", args.near, near if near is not None else window)]
                  if own and given is not None and given != own_value]
    # the dumps' own model labels them, or its note above names each flag that overrides it
    labelled_by = None if own else ", ".join(
        ([f"--config {args.config}"] if args.config else []) +
        [f"--{flag} {given}" for flag, given in [("window", args.window), ("global-heads", args.global_heads),
                                                 ("heads", args.heads)] if given is not None])
    if overridden:  # the flags win, but the dumps' own model is known: say they differ
        notes.append(f"note: {', '.join(overridden)} override the model of the dumps ({own[1]}, named by {own[0]}): "
                     "the heads are labelled and checked with the flags' values")
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
    return window, global_heads, heads, near, labelled_by


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


EDGE_MIN = 1e-30  # probabilities at a window's edge below this could be underflow's, not a mask's


def looks_narrower(p, local, window):
    """(Q, rows with a non-zero key at distance Q - 1, rows with such a key, median probability there) when the
    map looks like a local head of window Q narrower than the labels' mask (a global head's: T; a local head's:
    `window`), else None. Q is one more than the largest distance of a non-zero key, so every key at distance >=
    Q is exactly 0; it counts as a local head's band when T >= 2Q (as many rows past the band as in it), at least
    90% of the keys at distances < Q are non-zero (a full band: not a head whose mass collapsed onto a few keys),
    the key at distance Q - 1 is non-zero in at least half the rows that have one, and the median probability
    there is at least EDGE_MIN (the keys just inside an underflow cutoff are tiny: exp(-103) is float32's
    smallest). A global head whose far logits lie over ~100 below its near ones (logit explosion) has exact zeros
    there too, so this is evidence, not proof."""
    T = p.shape[0]
    rows, cols = np.nonzero(p)
    Q = int((rows - cols).max()) + 1
    if Q < 2 or Q >= (window if local else T) or T < 2 * Q:  # Q 1: a head collapsed onto its own key
        return None
    i = np.arange(T)[:, None]
    d = i - np.arange(T)[None, :]
    band = (d >= 0) & (d < Q)
    if np.count_nonzero(p[band]) < 0.9 * np.count_nonzero(band):
        return None
    r = np.arange(Q - 1, T)
    edge = p[r, r - (Q - 1)]
    median = float(np.median(edge))
    if 2 * np.count_nonzero(edge) < edge.size or median < EDGE_MIN:
        return None
    return Q, int(np.count_nonzero(edge)), int(edge.size), median


def narrower_note(path, head, heads, local, window, labelled_by, found):
    """The note of a map that looks_narrower than its labels: what it shows, the likely window, the fix, and
    why it is not refused."""
    Q, nonzero, rows, median = found
    T = rows + Q - 1
    kind = f"local with window {window}" if local else "global"
    flags = f"--window {Q}" + ("" if local else f" and --global-heads below {heads - head}")
    return (f"note: {path}: every key at distance >= {Q} is exactly 0 in all {T - Q} rows that have one, and the "
            f"key at distance {Q - 1} is non-zero in {nonzero} of {rows} rows (median {median:.2g}): the map of a "
            f"local head of window {Q}, but head {head} is labelled {kind} (by {labelled_by}); if it is one, give "
            f"the config.json of the run that wrote it, or {flags} (a global head whose far logits fell ~100 below "
            "its near ones underflows to the same exact zeros, so this is not refused)")


def near_mass(p, near):
    """Mean over query rows of the probability on keys with i - j < near."""
    T = p.shape[0]
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return float((p * ((i - j) < near)).sum(axis=1).mean())


def plot_one(plt, colors, p, vis, layer, head, local, window, near, scale, vmin, out_paths):
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
    for out_path in out_paths:
        fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return nm


def main(argv=None):
    ap = argparse.ArgumentParser(description="Heatmaps (PNG by default) of attention maps dumped by train_gpt2_ls "
                                 "--eval-only --dump-attention.")
    ap.add_argument("inputs", nargs="+", metavar="DUMP", help="attn_L<l>_H<h>.npy files, or directories holding them")
    ap.add_argument("--config", help="the training run's config.json (model.window, model.global_heads, "
                    "model.num_heads, train.near); default: the one beside the checkpoint the dumps' eval.json "
                    "names, which a --config must agree with")
    ap.add_argument("--window", type=int, help="P: a local head's window (overrides --config)")
    ap.add_argument("--global-heads", type=int, help="G: the last G heads are global (overrides --config)")
    ap.add_argument("--heads", type=int, help="NH: heads per layer (overrides --config)")
    ap.add_argument("--near", type=int, help="near/far split distance N: key j is near when i - j < N "
                    "(default: the run's --near at the checkpoint's step, else P)")
    ap.add_argument("--scale", choices=["log", "linear"], default="log", help="color scale (default log)")
    ap.add_argument("--vmin", type=float, default=1e-4, help="log scale: the smallest probability with its own "
                    "color (default 1e-4)")
    ap.add_argument("--out", help="directory for the images (default: next to each .npy)")
    add_formats_argument(ap, "png")
    args = ap.parse_args(argv)
    try:
        formats = parse_formats(args.formats)
        if not 0 < args.vmin < 1:
            raise PlotError(f"--vmin {args.vmin} must be in (0, 1)")
        dumps = find_dumps(args.inputs)
        notes = []  # printed once every file has passed its checks
        window, global_heads, heads, near, labelled_by = model_geometry(
            args, [os.path.dirname(p) or "." for p, _, _ in dumps], notes)
        loaded = []
        for path, layer, head in dumps:  # check every file before writing anything
            if head >= heads:
                raise PlotError(f"{path}: head {head} does not exist with --heads {heads}; the config does not "
                                "match the dump")
            local = head < heads - global_heads
            p, vis = load_dump(path, local, window)
            found = looks_narrower(p, local, window) if labelled_by else None  # None: the dumps' own labels
            if found:
                notes.append(narrower_note(path, head, heads, local, window, labelled_by, found))
            loaded.append((path, layer, head, local, p, vis))
        for note in notes:
            print(note, file=sys.stderr)
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.colors as colors
        import matplotlib.pyplot as plt
        if args.out:
            os.makedirs(args.out, exist_ok=True)
        for path, layer, head, local, p, vis in loaded:
            out_dir = args.out or os.path.dirname(path) or "."
            out_paths = [os.path.join(out_dir, f"attn_L{layer}_H{head}.{ext}") for ext in formats]
            nm = plot_one(plt, colors, p, vis, layer, head, local, window, near, args.scale, args.vmin, out_paths)
            kind = f"local P={window}" if local else "global"
            print(f"{', '.join(out_paths)}: layer {layer} head {head} ({kind}), T {p.shape[0]}, near mass (i-j < {near}) {nm:.4f}")
    except (PlotError, FormatsError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
