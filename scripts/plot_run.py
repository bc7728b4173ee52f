#!/usr/bin/env python3
"""Plots and a summary table from one or more train_gpt2_ls output directories.

    python3 scripts/plot_run.py out/mhsa out/ls --out out/plots/cmp [--heads max|all] [--threshold 10]

Reads from each directory what the trainer writes there (docs/formats.md): metrics.jsonl (loss,
val_loss, max_attn_logit, spike flags per step), logit_stats.jsonl (per layer and head max/min
attention logit and entropy) and config.json (the run's configuration, used for the legend).
Writes
    PREFIX_loss.{png,svg}      training loss (thin) and validation loss (markers) vs step
    PREFIX_logits.{png,svg}    per layer: max pre-softmax attention logit vs step
                               (--heads max: the max over the layer's heads, one line per run;
                                --heads all: one line per head, global heads solid, local dashed)
    PREFIX_entropy.{png,svg}   per layer: attention entropy (nats) vs step
                               (--heads max: the mean over the layer's heads; all: one line per head)
    PREFIX_near_mass.{png,svg} per layer: attention mass on near keys (distance i-j < N, the record's
                               `near`) vs step (--heads max: mean over the global heads solid, over
                               the local heads dashed; all: one line per head, same styles)
    PREFIX_near_far_logits.{png,svg}  per layer: max pre-softmax logit among near keys (solid) and
                               among far keys (dotted) vs step (--heads max: max over the layer's
                               heads; all: one pair per head). Both near/far plots are skipped with a
                               note for runs whose records lack the fields (older runs, CUDA backend)
    PREFIX_ratio.{png,svg}     with --by-ratio: peak max-logit and final val loss vs T/C, one line
                               per attention variant (runs of several T and C)
    PREFIX_summary.md          the summary table, also printed on stdout
Summary columns: final validation loss and its perplexity exp(loss), peak max-logit (metrics'
max_attn_logit over all steps) and its step, the first step whose max-logit exceeds --threshold,
loss spikes (the trainer's `spike` flags; for files without them, our own rule: the loss z-score
against the previous 100 finite losses exceeds 6, the trainer's default), non-finite steps.

A run killed mid-record leaves a partial last line: it is ignored. Non-finite numbers are `null`
in the files and become NaN here.
"""
import argparse
import json
import math
import os
import sys
import warnings

import numpy as np

SPIKE_WINDOW = 100  # own spike rule (only for metrics without `spike` flags): trainer defaults
SPIKE_Z = 6.0


class PlotError(Exception):
    pass


def read_jsonl(path):
    """Records of a JSON Lines file; a partial last line (run killed mid-write) is skipped."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # the last line has no newline: cut short by a kill
                break
            raise PlotError(f"{path}:{i + 1} is not valid JSON; the file is damaged "
                            "(only a run's last line may be partial)")
    return records


def by_step(records):
    """One record per step (the last one wins), in step order."""
    d = {}
    for r in records:
        if "step" in r:
            d[int(r["step"])] = r
    return [d[s] for s in sorted(d)]


def num(x):
    return float("nan") if x is None else float(x)


class Run:
    """Everything read from one output directory."""

    def __init__(self, path):
        self.path = path
        mpath = os.path.join(path, "metrics.jsonl")
        if not os.path.isfile(mpath):
            raise PlotError(f"{mpath} does not exist; pass an output directory of train_gpt2_ls (-o DIR)")
        self.metrics = by_step(read_jsonl(mpath))
        spath = os.path.join(path, "logit_stats.jsonl")
        self.stats = by_step(read_jsonl(spath)) if os.path.isfile(spath) else []
        cpath = os.path.join(path, "config.json")
        self.config = None
        if os.path.isfile(cpath):
            with open(cpath, encoding="utf-8") as f:
                self.config = json.load(f)
        self.train = [r for r in self.metrics if "loss" in r]
        self.val = [r for r in self.metrics if "val_loss" in r]

    def model(self):
        """Model fields: config.json's, else what logit_stats.jsonl tells."""
        if self.config:
            return self.config.get("model", {})
        if self.stats:
            s = self.stats[0]
            return {"num_layers": s["num_layers"], "num_heads": s["num_heads"],
                    "global_heads": s["global_heads"], "window": s["window"]}
        return {}

    def label_parts(self):
        """Ordered (key, text) pieces describing the run; the legend keeps those that differ."""
        m = self.model()
        t = (self.config or {}).get("train", {})
        parts = []
        nh, g = m.get("num_heads"), m.get("global_heads")
        if nh is not None and g is not None:
            if g == nh:
                kind = "MHSA"
            elif g == 0:
                kind = f"all-local P={m.get('window')}"
            else:
                kind = f"LS G={g}/{nh} P={m.get('window')}"
            parts.append(("kind", kind))
        if m.get("qk_norm"):
            parts.append(("qk", "QK-norm"))
        if t.get("z_loss"):
            parts.append(("z", f"z-loss {t['z_loss']:g}"))
        if m.get("attn_softcap"):
            parts.append(("cap", f"soft-cap {m['attn_softcap']:g}"))
        if "seq_len" in t:
            parts.append(("T", f"T={t['seq_len']}"))
        if "channels" in m:
            parts.append(("C", f"C={m['channels']}"))
        if "num_layers" in m:
            parts.append(("L", f"L={m['num_layers']}"))
        if "learning_rate" in t:
            parts.append(("lr", f"lr={t['learning_rate']:.3g}"))
        if "seed" in t:
            parts.append(("seed", f"seed {t['seed']}"))
        return parts


def make_labels(runs):
    """Legend labels with the configuration pieces that differ between the runs; the common ones
    form the title. Runs that still look alike get their directory name."""
    parts = [dict(r.label_parts()) for r in runs]
    keys = []
    for p in parts:
        keys += [k for k in p if k not in keys]
    varying = [k for k in keys if len({p.get(k, "") for p in parts}) > 1]
    common = [k for k in keys if k not in varying]
    if len(runs) == 1:
        varying, common = [k for k in keys if k not in ("lr", "seed")], [k for k in ("lr", "seed") if k in keys]
    labels = [", ".join(p[k] for k in varying if p.get(k)) for p in parts]
    if len(set(labels)) < len(labels) or not all(labels):
        labels = [(lab + " " if lab else "") + f"[{os.path.basename(os.path.normpath(r.path))}]"
                  for lab, r in zip(labels, runs)]
    title = ", ".join(parts[0][k] for k in common if parts[0].get(k))
    return labels, title


def count_spikes(train):
    """(spikes, rule): the trainer's spike flags when present, else our own z-score rule."""
    if train and all("spike" in r for r in train):
        return sum(1 for r in train if r["spike"]), "trainer"
    window, n = [], 0
    for r in train:
        x = num(r.get("loss"))
        if not math.isfinite(x):
            continue
        if len(window) >= SPIKE_WINDOW:
            w = np.array(window[-SPIKE_WINDOW:])
            sd = w.std()
            if sd > 0 and (x - w.mean()) / sd > SPIKE_Z:
                n += 1
        window.append(x)
    return n, f"own: loss z>{SPIKE_Z:g} vs previous {SPIKE_WINDOW}"


def summarize(run, threshold):
    """The summary row of one run (a dict; NaN / None where the files have no such value)."""
    steps = [r["step"] for r in run.train]
    ml = np.array([num(r.get("max_attn_logit")) for r in run.train])
    row = {"steps": steps[-1] if steps else 0}
    row["final_train_loss"] = num(run.train[-1].get("loss")) if run.train else float("nan")
    if run.val:
        row["val_step"] = run.val[-1]["step"]
        row["final_val_loss"] = num(run.val[-1]["val_loss"])
        row["val_ppl"] = math.exp(row["final_val_loss"]) if math.isfinite(row["final_val_loss"]) else float("nan")
    else:
        row["val_step"], row["final_val_loss"], row["val_ppl"] = None, float("nan"), float("nan")
    finite = np.isfinite(ml)
    if finite.any():
        i = int(np.nanargmax(np.where(finite, ml, -np.inf)))
        row["peak_max_logit"], row["peak_step"] = float(ml[i]), steps[i]
    else:
        row["peak_max_logit"], row["peak_step"] = float("nan"), None
    cross = [s for s, x in zip(steps, ml) if math.isfinite(x) and x > threshold]
    row["first_cross"] = cross[0] if cross else None
    row["spikes"], row["spike_rule"] = count_spikes(run.train)
    row["nonfinite"] = sum(1 for r in run.train
                           if r.get("skipped_nonfinite") or not math.isfinite(num(r.get("loss"))))
    return row


def fmt(x, spec=".4f"):
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else format(x, spec)
    return str(x)


def summary_table(runs, labels, rows, threshold):
    head = ["run", "dir", "steps", "final val loss", "val ppl", "final train loss", "peak max-logit",
            "at step", f"first step > {threshold:g}", "loss spikes", "non-finite steps"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, lab, r in zip(runs, labels, rows):
        cells = [lab, os.path.basename(os.path.normpath(run.path)), fmt(r["steps"]), fmt(r["final_val_loss"]),
                 fmt(r["val_ppl"], ".2f"), fmt(r["final_train_loss"]), fmt(r["peak_max_logit"], ".3f"),
                 fmt(r["peak_step"]), fmt(r["first_cross"]), fmt(r["spikes"]), fmt(r["nonfinite"])]
        out.append("| " + " | ".join(cells) + " |")
    rules = sorted({r["spike_rule"] for r in rows})
    out.append("")
    out.append(f"Spikes counted by: {'; '.join(rules)}. Perplexity = exp(final val loss). "
               "Peak max-logit: max over steps of the largest pre-softmax attention logit (all layers and heads).")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# plots

def color(i, n):
    """Run i of n: matplotlib's 10 default colors, tab20 beyond 10 runs."""
    if n <= 10:
        return f"C{i}"
    import matplotlib
    return matplotlib.colormaps["tab20"](i % 20)


def save(fig, prefix, name, formats):
    for ext in formats:
        fig.savefig(f"{prefix}_{name}.{ext}", dpi=80 if ext == "png" else None)


def plot_loss(plt, runs, labels, title, prefix, formats):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (run, lab) in enumerate(zip(runs, labels)):
        c = color(i, len(runs))
        ax.plot([r["step"] for r in run.train], [num(r.get("loss")) for r in run.train],
                lw=0.8, alpha=0.7, label=f"{lab} (train)", color=c)
        if run.val:
            ax.plot([r["step"] for r in run.val], [num(r["val_loss"]) for r in run.val], color=c,
                    marker="o", ms=3, lw=1.5, ls="--", label=f"{lab} (val)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(("loss" + (f" - {title}" if title else ""))[:110], fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2 if len(runs) > 4 else 1)
    fig.tight_layout()
    save(fig, prefix, "loss", formats)
    plt.close(fig)


def per_layer_series(run, field, heads):
    """{layer: [(label_suffix, is_global, steps, values)]} from logit_stats.jsonl."""
    if not run.stats:
        return {}
    L, NH = run.stats[0]["num_layers"], run.stats[0]["num_heads"]
    steps = [s["step"] for s in run.stats]
    vals = np.array([[num(a[field]) for a in s["attn"]] for s in run.stats]).reshape(len(steps), L, NH)
    glob = [bool(a["global"]) for a in run.stats[0]["attn"][:NH]]
    out = {}
    for layer in range(L):
        v = vals[:, layer, :]
        if heads == "all":
            out[layer] = [(f" h{h}", glob[h], steps, v[:, h]) for h in range(NH)]
        else:
            with np.errstate(all="ignore"):
                agg = np.nanmax(v, axis=1) if field == "max" else np.nanmean(v, axis=1)
            out[layer] = [("", None, steps, agg)]
    return out


def plot_per_layer(plt, runs, labels, title, prefix, formats, field, heads, ylabel, name, threshold=None):
    series = [per_layer_series(r, field, heads) for r in runs]
    L = max((len(s) for s in series), default=0)
    if L == 0:
        print(f"note: no logit_stats.jsonl records; {name} plot skipped", file=sys.stderr)
        return
    ncol = min(L, 3)
    nrow = (L + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol + 1, 2.8 * nrow + 0.6), squeeze=False, sharex=True)
    for layer in range(nrow * ncol):
        ax = axes[layer // ncol][layer % ncol]
        if layer >= L:
            ax.axis("off")
            continue
        for i, (s, lab) in enumerate(zip(series, labels)):
            for suffix, is_global, steps, v in s.get(layer, []):
                ls = "-" if is_global in (None, True) else "--"
                ax.plot(steps, v, color=color(i, len(runs)), lw=0.9 if heads == "max" else 0.6, ls=ls,
                        label=(lab if heads == "max" else None) if layer == 0 else None)
            if heads == "all" and layer == 0:
                ax.plot([], [], color=color(i, len(runs)), label=lab)
        top = max((np.nanmax(v) for s in series for (_, _, _, v) in s.get(layer, []) if np.isfinite(v).any()),
                  default=0.0)
        if threshold is not None and top >= 0.5 * threshold:  # only where it does not squash the curves
            ax.axhline(threshold, color="k", lw=0.6, ls=":")
        ax.set_title(f"layer {layer}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if layer % ncol == 0:
            ax.set_ylabel(ylabel, fontsize=7)
        if layer // ncol == nrow - 1 or layer + ncol >= L:
            ax.set_xlabel("step", fontsize=7)
    how = {"max": {"max": "max over heads", "all": "each head (global solid, local dashed)"},
           "entropy": {"max": "mean over heads", "all": "each head (global solid, local dashed)"}}[field][heads]
    fig.suptitle((f"{ylabel}: {how}" + (f" - {title}" if title else ""))[:120], fontsize=9)
    handles, labs = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labs, fontsize=6, loc="lower center", ncol=min(len(labs), 3), frameon=False)
    fig.tight_layout(rect=(0, 0.04 + 0.025 * ((len(labs) + 2) // 3), 1, 0.95))
    save(fig, prefix, name, formats)
    plt.close(fig)


def near_far_arrays(run):
    """(steps, near_mass, near_max, far_max, is_global, near) from the logit_stats records that carry the
    near/far fields; arrays (steps, L, NH), NaN where the file has null (far_max: the head had no far
    key). None when no record has them (runs of older versions, the CUDA backend)."""
    recs = [s for s in run.stats if s.get("attn") and "near_mass" in s["attn"][0]]
    if not recs:
        return None
    L, NH = recs[0]["num_layers"], recs[0]["num_heads"]

    def arr(field):
        return np.array([[num(a.get(field)) for a in s["attn"]] for s in recs]).reshape(len(recs), L, NH)
    glob = [bool(a["global"]) for a in recs[0]["attn"][:NH]]
    return [s["step"] for s in recs], arr("near_mass"), arr("near_max"), arr("far_max"), glob, recs[0].get("near")


def layer_grid(plt, L):
    ncol = min(L, 3)
    nrow = (L + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol + 1, 2.8 * nrow + 0.6), squeeze=False, sharex=True)
    for k in range(L, nrow * ncol):
        axes[k // ncol][k % ncol].axis("off")
    return fig, axes, ncol, nrow


def plot_near_far(plt, runs, labels, title, prefix, formats, heads):
    """PREFIX_near_mass and PREFIX_near_far_logits (module docstring); a note on stderr for runs
    without the fields, and no files when no run has them."""
    data = [near_far_arrays(r) for r in runs]
    missing = [lab for lab, d in zip(labels, data) if d is None]
    if len(missing) == len(runs):
        print("note: no near/far statistics in logit_stats.jsonl (older run or CUDA backend); "
              "near_mass and near_far_logits plots skipped", file=sys.stderr)
        return
    if missing:
        print(f"note: no near/far statistics for {', '.join(missing)}; left out of the near/far plots", file=sys.stderr)
    L = max(d[1].shape[1] for d in data if d is not None)
    nvals = sorted({str(d[5]) for d in data if d is not None})
    for name, ylabel in [("near_mass", "attention mass on near keys"), ("near_far_logits", "max logit: near / far")]:
        fig, axes, ncol, nrow = layer_grid(plt, L)
        for layer in range(L):
            ax = axes[layer // ncol][layer % ncol]
            for i, (d, lab) in enumerate(zip(data, labels)):
                if d is None or layer >= d[1].shape[1]:
                    continue
                steps, mass, nmax, fmax, glob, near = d
                c, first = color(i, len(runs)), layer == 0
                lw = 0.9 if heads == "max" else 0.6
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices (no far key)
                    if name == "near_mass":
                        g = [h for h in range(len(glob)) if glob[h]]
                        loc = [h for h in range(len(glob)) if not glob[h]]
                        if heads == "all":
                            for h in range(len(glob)):
                                ax.plot(steps, mass[:, layer, h], color=c, lw=lw, ls="-" if glob[h] else "--")
                        else:
                            if g:
                                ax.plot(steps, np.nanmean(mass[:, layer, g], axis=1), color=c, lw=lw, ls="-")
                            if loc:
                                ax.plot(steps, np.nanmean(mass[:, layer, loc], axis=1), color=c, lw=lw, ls="--")
                    else:
                        if heads == "all":
                            for h in range(len(glob)):
                                ax.plot(steps, nmax[:, layer, h], color=c, lw=lw, ls="-")
                                ax.plot(steps, fmax[:, layer, h], color=c, lw=lw, ls=":")
                        else:
                            ax.plot(steps, np.nanmax(nmax[:, layer, :], axis=1), color=c, lw=lw, ls="-")
                            ax.plot(steps, np.nanmax(fmax[:, layer, :], axis=1), color=c, lw=lw, ls=":")
                if first:
                    ax.plot([], [], color=c, label=f"{lab} (N={near})" if len(nvals) > 1 else lab)
            if name == "near_mass":
                ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"layer {layer}", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if layer % ncol == 0:
                ax.set_ylabel(ylabel, fontsize=7)
            if layer // ncol == nrow - 1 or layer + ncol >= L:
                ax.set_xlabel("step", fontsize=7)
        how = {"near_mass": {"max": "mean over global heads (solid) / local heads (dashed)",
                             "all": "each head (global solid, local dashed)"},
               "near_far_logits": {"max": "max over heads, near keys (solid) / far keys (dotted)",
                                   "all": "each head, near keys (solid) / far keys (dotted)"}}[name][heads]
        near_txt = f"near: i-j < N, N={nvals[0]}" if len(nvals) == 1 else "near: i-j < N"
        fig.suptitle((f"{ylabel}: {how}; {near_txt}" + (f" - {title}" if title else ""))[:140], fontsize=8)
        handles, labs = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labs, fontsize=6, loc="lower center", ncol=min(max(len(labs), 1), 3), frameon=False)
        fig.tight_layout(rect=(0, 0.04 + 0.025 * ((len(labs) + 2) // 3), 1, 0.95))
        save(fig, prefix, name, formats)
        plt.close(fig)


def plot_by_ratio(plt, runs, rows, prefix, formats):
    """Peak max-logit and final val loss vs T/C, one line per attention variant (the run's label
    without T, C and seed)."""
    parts = [dict(r.label_parts()) for r in runs]
    keys = []
    for p in parts:
        keys += [k for k in p if k not in keys and k not in ("T", "C")]
    shown = [k for k in keys if k == "kind" or len({p.get(k, "") for p in parts}) > 1]
    groups = {}
    for run, row, p in zip(runs, rows, parts):
        m, t = run.model(), (run.config or {}).get("train", {})
        if "channels" not in m or "seq_len" not in t:
            raise PlotError(f"{run.path}/config.json is missing; --by-ratio needs T and C of every run")
        key = ", ".join(p[k] for k in shown if p.get(k))
        groups.setdefault(key, []).append((t["seq_len"] / m["channels"], row))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for i, (key, pts) in enumerate(sorted(groups.items())):
        pts.sort(key=lambda p: p[0])
        x = [p[0] for p in pts]
        axes[0].plot(x, [p[1]["peak_max_logit"] for p in pts], marker="o", color=f"C{i % 10}", label=key)
        axes[1].plot(x, [p[1]["final_val_loss"] for p in pts], marker="o", color=f"C{i % 10}", label=key)
    for ax, yl in zip(axes, ["peak max attention logit", "final val loss (nats)"]):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("T / C")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    save(fig, prefix, "ratio", formats)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description="Plot loss, attention max-logit and entropy of train_gpt2_ls runs; "
                                "write a summary table.")
    p.add_argument("dirs", nargs="+", metavar="OUT_DIR", help="output directories of train_gpt2_ls (-o)")
    p.add_argument("--out", required=True, metavar="PREFIX", help="output prefix, e.g. out/plots/cmp")
    p.add_argument("--heads", choices=["max", "all"], default="max",
                   help="max: per layer the max over heads (logits) / mean over heads (entropy); all: every head")
    p.add_argument("--threshold", type=float, default=10.0, help="report the first step whose max-logit exceeds this")
    p.add_argument("--labels", help="comma-separated legend labels, one per OUT_DIR (default: from the configs)")
    p.add_argument("--by-ratio", action="store_true",
                   help="also PREFIX_ratio.{png,svg}: peak max-logit and final val loss vs T/C per attention variant")
    p.add_argument("--formats", default="png,svg", help="comma-separated image formats")
    args = p.parse_args(argv)
    try:
        runs = [Run(d) for d in args.dirs]
        labels, title = make_labels(runs)
        if args.labels:
            labels = args.labels.split(",")
            if len(labels) != len(runs):
                raise PlotError(f"--labels has {len(labels)} labels for {len(runs)} directories; give one per OUT_DIR")
        rows = [summarize(r, args.threshold) for r in runs]
        table = summary_table(runs, labels, rows, args.threshold)
        d = os.path.dirname(args.out)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(args.out + "_summary.md", "w", encoding="utf-8") as f:
            f.write((f"Runs: {title}\n\n" if title else "") + table)
        print(table, end="")
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        formats = [x for x in args.formats.split(",") if x]
        plot_loss(plt, runs, labels, title, args.out, formats)
        plot_per_layer(plt, runs, labels, title, args.out, formats, "max", args.heads,
                       "max attention logit", "logits", threshold=args.threshold)
        plot_per_layer(plt, runs, labels, title, args.out, formats, "entropy", args.heads,
                       "attention entropy (nats)", "entropy")
        plot_near_far(plt, runs, labels, title, args.out, formats, args.heads)
        if args.by_ratio:
            plot_by_ratio(plt, runs, rows, args.out, formats)
    except (PlotError, OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
