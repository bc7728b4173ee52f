#!/usr/bin/env python3
"""The table of a T/C experiment (scripts/exp_text_ratio.sh): one row per run, sorted by T/C, variant
and seed, as markdown on stdout.

    scripts/exp_summary.py RUN_DIR [RUN_DIR ...] [--threshold X]

A file RUN.args, RUN.log or RUN.build beside a run directory RUN given too (what the experiment scripts keep
there: `scripts/exp_summary.py runs/*` matches them) is skipped; any other path that is not a directory, or a
run given twice (out/run and out/run/), is refused with one error line.
Columns: the run (its directory's name, with the parent folders that tell two runs of one name apart),
T/C, T, variant and seed (from the directory name r<ratio>_<variant>_s<seed> when config.json agrees: its T/C,
its seed, and for one of exp_text_ratio.sh's variants, kind[_stabilizer[N]], the attention (ls and local also
for a window >= T, "MHSA (P=p >= T)"), the one stabilizer named and no other, and mhsa_softcapN's soft-cap and
mhsa_qkclipN's QK-Clip N (30, the script's, without N); name_disagrees. A name that disagrees gets one note on
stderr naming the parts that differ and what config.json records;
for another name, or one that disagrees, from config.json: T/C = T / C, an integer when C divides T,
else a decimal of 3 significant digits (0.5, 1.33; one decimal from 100: 170.7), the variant as
scripts/plot_run.py labels it: the attention (MHSA, MHSA (P=p >= T), LS G=g/NH P=p or all-local P=p) and
each model option and stabilizer that plot_run labels and the run has (QK-norm, soft-cap, no bias, erf GELU,
z-loss, QK-Clip, logit alarm, skip spikes, a grad-clip other than 1: "MHSA, QK-norm"; a fork's source and
step: "MHSA, QK-Clip 0.1, forked from mhsa at step 3"; not tied or untied embeddings), and the seed; rows
sorted by T/C, variant and seed), steps, tokens, final validation loss and perplexity, peak max-logit and its step, final
max-logit (the last step's), the first step whose max-logit exceeds --threshold, loss spikes,
non-finite steps, and the near mass of the global heads at the last statistics record (mean over
layers and global heads of the attention mass on keys with i - j < N; "-" for runs without global
heads or without near/far statistics) beside what uniform causal attention would put there (the mean
over rows i of min(i + 1, N) / (i + 1), N that record's: a --near changed on resume changes it), and the
run's wall-clock hours (sum of the steps' ms).
The numbers are those of scripts/plot_run.py (its reader and summary row), not recomputed here. As there,
a fork's peak max-logit and its step, first step over the threshold, loss spikes, non-finite steps and hours
count from step 1: the steps up to the fork step are its source's (read from the checkpoint's directory).
When the source cannot be read, those cells count the fork's own steps and say so ("12.34 (steps 11-20)"), with
one note on stderr naming the source.
Notes on stderr, as scripts/plot_run.py gives them: runs whose recorded data differ (their losses are per token
of different tokenizers or validation sets), a validation set changed while a run trained, and the settings
changed on resume (-y 1 with other flags), which the row's variant and T do not show, and the settings in which
runs differ beyond what plot_run labels (its differing_settings: tokens per step, schedule, sampler, ...).
"""
import argparse
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_run  # noqa: E402  (the reader and the summary row of every run plot)


# The label pieces (plot_run.label_parts) beside the attention that make a run another variant: the model
# options and every stabilizer plot_run labels (without them a QK-norm run and a plain one of one attention
# layout would be two rows of one variant), and a fork's source and step ("forked from mhsa at step 3": its
# first steps trained with the source's settings). Settings plot_run does not label (tied or untied
# embeddings) are not in the variant; the run column tells such runs apart.
VARIANT_OPTIONS = (("qk_norm", "attn_softcap", "bias", "gelu") + tuple(key for _, key, _, _ in plot_run.TRAIN_STABILIZERS)
                   + ("grad_clip", "forked_from"))


# exp_text_ratio.sh's variant names: kind[_stabilizer[N]] (its variant_flags: mhsa_softcapN is --attn-softcap N,
# mhsa_qkclipN --qk-clip N, without N its SOFTCAP and QKCLIP)
NAME_VARIANT = re.compile(r"(mhsa|ls|local)(?:_(qknorm|zloss)|_(softcap|qkclip)(\d*))?")
NAME_DEFAULTS = {"softcap": 30, "qkclip": 30}  # exp_text_ratio.sh's SOFTCAP and QKCLIP
# where config.json records a numbered stabilizer's value
NAME_VALUES = {"softcap": ("model", "attn_softcap"), "qkclip": ("train", "qk_clip")}


def variant_agrees(variant, config):
    """Whether an exp_text_ratio.sh variant name (NAME_VARIANT) agrees with the run's config: the attention kind
    (plot_run.attention_kinds: ls and local also for a window not below T), the one stabilizer among plot_run's
    STABILIZER_WORDS it names and no other, and a soft-cap's or QK-Clip's number (its default without one), held
    all along. Any other name is the user's label: True."""
    m = NAME_VARIANT.fullmatch(variant)
    kinds = plot_run.attention_kinds(config)
    if not m or not kinds:
        return True  # not one of the script's names, or a run whose heads are not recorded
    kind, stab = m.group(1), m.group(2) or m.group(3)
    parts = {key: text for key, text, _ in plot_run.label_parts(config)}
    has = {word for word, (key, _) in plot_run.STABILIZER_WORDS.items() if key in parts}
    if kind not in kinds or has != ({stab} if stab else set()):
        return False
    if stab in NAME_VALUES:
        section, key = NAME_VALUES[stab]
        want = int(m.group(4)) if m.group(4) else NAME_DEFAULTS[stab]
        if section == "model":
            start, changes = (config.get("model") or {}).get(key), []
        else:
            start, changes = plot_run.timeline(config.get("train") or {}, plot_run.history_entries(config), key)
        if changes or not isinstance(start, (int, float)) or not math.isclose(start, want, rel_tol=1e-6):
            return False
    return True


def name_disagrees(name, config):
    """The parts ("T/C", "variant", "seed") of a directory's (ratio, variant, seed) (r<ratio>_<variant>_s<seed>)
    that its config records otherwise (config_parts): T/C and seed where recorded, the variant where it is one of
    exp_text_ratio.sh's (variant_agrees; a renamed or copied run: r8_mhsa_s1 holding an LS run at T/C 4)."""
    (ratio, variant, seed), (c_ratio, _, c_seed) = name, config_parts(config)
    return [part for part, differs in (("T/C", c_ratio is not None and c_ratio != ratio),
                                       ("variant", not variant_agrees(variant, config)),
                                       ("seed", c_seed is not None and c_seed != seed)) if differs]


def name_parts(path, config):
    """((ratio, variant, seed), disagreeing): from r<ratio>_<variant>_s<seed> when the config agrees, else from
    the config (config_parts), with the parts of the name it disagrees with (name_disagrees)."""
    m = re.fullmatch(r"r(\d+)_(\w+?)_s(\d+)", os.path.basename(os.path.normpath(path)))
    if m:
        named = int(m.group(1)), m.group(2), int(m.group(3))
        disagreeing = name_disagrees(named, config) if config else []
        return (config_parts(config), disagreeing) if disagreeing else (named, [])
    return config_parts(config), []


def config_parts(config):
    """(ratio, variant, seed) from the config (plot_run.Run.label_config): T / C (an int when C divides T, else
    a float; None without T or C), the label's attention ("kind": MHSA, MHSA (P=p >= T), LS G=g/NH P=p,
    all-local P=p; '?' without the model's heads) with its VARIANT_OPTIONS pieces ("MHSA, QK-norm") and the
    seed."""
    train, model = (config or {}).get("train", {}), (config or {}).get("model", {})
    t, c = train.get("seq_len"), model.get("channels")
    ratio = (t // c if t % c == 0 else t / c) if t and c else None
    parts = {key: text for key, text, _ in plot_run.label_parts(config)}
    variant = ", ".join([parts.get("kind", "?")] + [parts[k] for k in VARIANT_OPTIONS if k in parts])
    return ratio, variant, train.get("seed")


def ratio_text(ratio):
    """T/C as the table shows it: 4, 0.5, 0.375, 1.33, 170.7 (a fraction keeps a decimal)."""
    if ratio is None:
        return "-"
    return str(ratio) if isinstance(ratio, int) else f"{ratio:.3g}" if ratio < 100 else f"{ratio:.1f}"


def global_near_mass(run):
    """Mean near mass over layers and global heads at the last record with near/far fields, or None."""
    arrays = plot_run.near_far_arrays(run)
    if arrays is None:
        return None
    _, mass, _, _, is_global, _ = arrays
    g = np.array(is_global, dtype=bool)
    if not g.any():
        return None
    last = mass[-1][:, g]
    return float(np.nanmean(last)) if np.isfinite(last).any() else None


def last_near(run):
    """N of the last record with near/far fields (the split global_near_mass measured at), else the run's
    --near, else its window."""
    arrays = plot_run.near_far_arrays(run)
    if arrays is not None:
        return arrays[5][-1]
    return (run.config or {}).get("train", {}).get("near") or (run.config or {}).get("model", {}).get("window")


def run_names(paths):
    """Each run's name for the run column: its directory's name, with as many parent folders as it takes
    to tell it from the other runs' (a/r2_ls_s1 and b/r2_ls_s1, not r2_ls_s1 twice)."""
    parts = [os.path.normpath(os.path.abspath(p)).split(os.sep) for p in paths]
    names = []
    for i, own in enumerate(parts):
        depth = 1
        while depth < len(own) and any(other[-depth:] == own[-depth:] for j, other in enumerate(parts)
                                       if j != i and other != own):
            depth += 1
        names.append("/".join(own[-depth:]))
    return names


def uniform_near_mass(T, near):
    """The near mass of uniform causal attention over T rows: mean over i of min(i + 1, N) / (i + 1)."""
    if not T or not near:
        return None
    return sum(min(i + 1, near) / (i + 1) for i in range(T)) / T


def changed_settings_note(configs, names):
    """One line naming, per run, the settings changed while it trained (-y 1 with other flags: config.json's
    "history"), as scripts/plot_run.py labels them ("lr=6e-4 (3e-4 from step 100)"): a row's variant and T are
    of the settings it started with. None when no run changed one."""
    changed = []
    for config, name in zip(configs, names):
        pieces = [text for key, text, pinned in plot_run.label_parts(config) if pinned and key != "forked_from"]
        if pieces:
            changed.append(f"{name}: {', '.join(pieces)}")
    if not changed:
        return None
    return f"note: settings changed while a run trained ({'; '.join(changed)})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--threshold", type=float, default=20.0)
    a = ap.parse_args(argv)
    try:
        paths = plot_run.run_dirs(a.runs)
    except plot_run.PlotError as e:
        sys.exit(f"error: {e}")
    rows, configs, names = [], [], run_names(paths)
    for path, name in zip(paths, names):
        try:
            run = plot_run.Run(path)
        except plot_run.PlotError as e:
            sys.exit(f"error: {e}")
        configs.append(run.label_config())
        train = (run.config or {}).get("train", {})
        parts, disagreeing = name_parts(path, run.label_config())
        if disagreeing:  # a renamed or copied run: the row shows what it recorded
            recorded = {"T/C": f"T/C {ratio_text(parts[0])}", "variant": parts[1], "seed": f"seed {parts[2]}"}
            said = disagreeing[0] if len(disagreeing) == 1 else \
                ", ".join(disagreeing[:-1]) + " and " + disagreeing[-1]
            print(f"note: {name}'s name says {said} other than its config.json records "
                  f"({', '.join(recorded[d] for d in disagreeing)}): the row shows config.json's T/C, variant and seed",
                  file=sys.stderr)
        ratio, variant, seed = parts
        s = plot_run.summarize(run, a.threshold)
        if s["source_note"]:
            print(s["source_note"], file=sys.stderr)
        span = plot_run.span_text(s)  # on the cells counted over the steps (a fork without its source)
        # "-" when not recorded (as plot_run's table); a non-finite one (JSON null, the trainer's
        # json_text) is "nan"
        recorded = bool(run.train) and "max_attn_logit" in run.train[-1]
        last_ml = plot_run.num(run.train[-1]["max_attn_logit"]) if recorded else None
        counted = run.counted()[0]  # a fork's source steps too, as the summary's
        hours = sum(plot_run.num(r.get("ms")) for r in counted if math.isfinite(plot_run.num(r.get("ms")))) / 3.6e6
        T = train.get("seq_len")
        tokens = s["tokens"]
        val, ppl = plot_run.fmt(s["final_val_loss"]), plot_run.fmt(s["val_ppl"], ".2f")
        if s["val_step"] is None:  # never validated (-v 0, no -j): "-" as plot_run's table, never "nan"
            val = ppl = "-"
        elif s["val_step"] != s["steps"]:  # the last validation is older than the last step
            val += f" (step {s['val_step']})"
        rows.append(((ratio if ratio is not None else 0, variant, seed or 0), [
            name, ratio_text(ratio), plot_run.fmt(T), variant, plot_run.fmt(seed),
            plot_run.fmt(s["steps"]),
            plot_run.fmt(tokens), val, ppl,
            plot_run.fmt(s["peak_max_logit"], ".2f") + span, plot_run.fmt(s["peak_step"]),
            plot_run.fmt(last_ml, ".2f"), plot_run.fmt(s["first_cross"]) + span, plot_run.fmt(s["spikes"]) + span,
            plot_run.fmt(s["nonfinite"]) + span, plot_run.fmt(global_near_mass(run), ".3f"),
            plot_run.fmt(uniform_near_mass(T, last_near(run)), ".3f"), plot_run.fmt(hours, ".2f") + span]))
    # plot_run labels these (so differing_settings leaves them out), and the table has no column for them
    shown_by_labels = [k for k in ("learning_rate", "channels", "num_layers")
                       if len({dict((key, text) for key, text, _ in plot_run.label_parts(c)).get(k) for c in configs}) > 1]
    differ = shown_by_labels + plot_run.differing_settings(configs)
    other_settings = (f"note: runs also differ in: {', '.join(differ)} (config.json), which the table's columns "
                      "do not show") if differ else None
    for note in (plot_run.data_note(configs, names), plot_run.val_change_note(configs, names),
                 changed_settings_note(configs, names), other_settings):
        if note:
            print(note, file=sys.stderr)
    head = ["run", "T/C", "T", "variant", "seed", "steps", "tokens", "final val loss", "val ppl", "peak max-logit",
            "at step",
            "final max-logit", f"first step > {a.threshold:g}", "loss spikes", "non-finite", "near mass (global heads)",
            "near mass if uniform", "hours"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for _, cells in sorted(rows, key=lambda r: (r[0][0], str(r[0][1]), r[0][2])):
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
