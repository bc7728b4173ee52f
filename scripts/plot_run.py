#!/usr/bin/env python3
"""Plots and a summary table from one or more train_gpt2_ls output directories.

    python3 scripts/plot_run.py out/mhsa out/ls [--out out/plots/cmp] [--heads max|all] [--threshold 10]

Reads from each directory what the trainer writes there (docs/formats.md): metrics.jsonl (loss,
val_loss, max_attn_logit, spike flags per step), logit_stats.jsonl (per layer and head max/min
attention logit and entropy) and config.json (the run's configuration, used for the legend).
logit_stats.jsonl records of another model than config.json's (num_layers, num_heads, global_heads, window:
the file of another run copied there) are refused with one line naming both. A file RUN.args, RUN.log or
RUN.build beside a run directory RUN given too (what the experiment scripts keep there: a glob runs/* matches
them) is skipped; any other path that is not a directory, or a run given twice (out/run out/run/), is refused
with one line. A file that cannot be written (a run in a read-only directory without --out) is one error line
naming it, offering --out.
Writes, with PREFIX = --out (default: OUT_DIR/plot of the first OUT_DIR),
    PREFIX_loss.{png,svg}      training loss (thin) and validation loss (dashed, every point marked) vs step
    PREFIX_logits.{png,svg}    per layer: max pre-softmax attention logit vs step
                               (--heads max: the max over the layer's heads, one colour and one
                                marker shape per run;
                                --heads all: one line per head, one colour per head, one marker shape
                                per run, global heads solid, local dashed)
    PREFIX_entropy.{png,svg}   per layer: attention entropy (nats) vs step
                               (--heads max: the mean over the layer's heads; all: one line per head)
    PREFIX_near_mass.{png,svg} per layer: attention mass on near keys (distance i-j < N, each record's
                               own `near`) vs step (--heads max: mean over the global heads solid, over
                               the local heads dashed; all: one line per head, same styles). A --near
                               changed on resume breaks a run's curves at the change (no line joins points
                               of two N); the title names N ("N=8", "N=8 up to step 200, N=2 from step
                               201"), or with runs of different N says "N varies" and each legend label
                               names its run's
    PREFIX_near_far_logits.{png,svg}  per layer: max pre-softmax logit among near keys (solid) and
                               among far keys (dotted) vs step (--heads max: max over the layer's
                               heads; all: one pair per head; N as in near_mass). Both near/far plots are skipped with a
                               note for runs whose records lack the fields (older runs, CUDA runs
                               without --near)
A run without logit_stats.jsonl records (fewer steps than --logit-stats-every, --logit-stats-every 0, or no
file) is left out of the logits, entropy and near/far plots, legend included, with one note naming the run
and the reason; with no run that has records those plots are not written.
    PREFIX_ratio.{png,svg}     with --by-ratio: peak max-logit and final val loss vs T/C, one line
                               per attention variant (runs of several T and C)
    PREFIX_summary.md          the summary table, also printed on stdout (--no-figures: this alone, without
                               matplotlib)
Legends lie outside the axes (runs below the panels, heads on the right), a label longer than the figure is
wide wrapped between its pieces; a title too wide for the figure is wrapped, never cut. With several runs
each has a colour and a marker shape (at staggered steps), so that runs whose curves coincide are still told
apart. A run's label names its attention (MHSA, LS G=g/NH P=p, all-local; "MHSA (P=p >= T)" when the window
reaches the whole context), every stabilizer that is on (QK-norm, soft-cap, z-loss, QK-Clip, logit alarm,
skip spikes, a non-default grad-clip), T, C, L, the data (config.json's "data": "data ts_sp (sp V=500)";
a shards folder named data with its parent's name: "data smoke/data"; validation shards in another folder
than the training shards name both: "data train tinyshakespeare_gpt2, val ts2 (gpt2 V=50257)"),
lr, seed, and every other setting in which the runs differ (config.json's "train" values, changes on resume
included, and derived tokens per step, -d being compared as the tokens per step it gives: "tokens/step 2048",
-b as the sequences of a micro-batch over all processes: "sequences/micro-batch 8",
"weight-decay 0", "lr-schedule linear", "near 4"; the model's NH, max-seq-len and tied embeddings; never paths,
data (the data note below), processes, threads, device, ZeRO stage, CUDA graphs or what only changes the record,
such as -v; -m is compared), which also get one note on stderr, repeated under the summary table ("note: runs also differ in:
tokens_per_step, weight_decay"); the pieces all runs share form the title. Runs whose recorded data differ (tokenizer, vocabulary,
validation or training shards) get one note on stderr, repeated under the summary table: their losses per
token are not comparable. So does a run whose validation set changed while it trained (config.json's "history"
changed -j, -m, -b or -t): its validation losses on either side of that step are on different sets. A training
flag changed on resume (config.json's "history") is noted in the label ("z-loss 1e-4 from step 400") and drawn
as a vertical dash-dot line at its step (with "flag old->new" on the loss plot); a fork (config.json's
"forked_from") likewise. A history entry {"epoch": true} is no flag's change (-x stayed -1, one epoch, and a -d
changed at that step moved its step total): labelled "one epoch: 4330->2165 steps at step 1126".
--labels replaces the labels; one note on stderr, repeated under the summary table, names per label the label
made from the configs and the directory ("note: --labels: x = lr=6e-4 [a]; y = lr=1e-3 [c]"), since the title
leaves out what the runs differ in. A label given twice, or one that contradicts its run (label_conflict: it
names exactly one attention kind of mhsa, ls, local other than the run's, local only without another layout word
such as G= or global, or a stabilizer, qknorm, zloss, softcap, qkclip, that its config.json does not have; a word
after no/without/w/o/neither/nor, with the list that follows of words of its kind joined by or/and/nor/slash
or inside a "(" as in "without QK-norm or z-loss" or "no stabilizers (qknorm zloss)" (a plain space outside the "("
ends it: "no z-loss QK-norm" names QK-norm), or a stabilizer at 0/off/none as in
softcap=0, names an absence), is refused with one line naming the label, the run and what its config.json
records, and the fix: the directories' order where the label fits another run given, else another label.
Settings that change only what is recorded (-v, --threads, ...) get the line but no
note; --near, which changes what the near/far plots measure, gets both, with the values that acted: its
`old: null` (not given) is the window ("near 8->2 at step 200").
Summary columns: steps, tokens (the training tokens seen up to the last step: tokens per step as it changed
on resume, plus a fork's source tokens; "-" without config.json), final validation loss (the last one; "(step S)" when that is before the run's last step,
"-" without validation) and its perplexity exp(loss), peak max-logit (metrics'
max_attn_logit over all steps) and its step, the first step whose max-logit exceeds --threshold,
loss spikes (the trainer's `spike` flags; for files without them, our own rule: the loss z-score
against the previous 100 finite losses exceeds 6, the trainer's default), non-finite steps.
A fork (config.json's "forked_from") is summarized over steps 1 to its last, as steps and tokens count it: its
own metrics.jsonl starts after the fork step S, so peak max-logit and its step, the first step over --threshold,
loss spikes (our own rule over the whole sequence) and non-finite steps also count the training records of
steps 1..S of the run it forked from, read from the checkpoint's directory (a relative path from the current
directory, as the trainer takes it; a fork of a fork up to that fork's step, and so on). When a source cannot be
read (moved or removed, its metrics.jsonl missing steps up to S, its config.json of another model, or its record
of step S written after the fork's first step: its directory trained again), those
cells count the steps that can be (the fork's own: "12.345 (steps 11-20)"), and one note on stderr, repeated
under the summary table, names the source and what is missing. Validation and final losses are the fork's own;
the plots show the fork's own steps (the fork's line marks where they start).

A run killed mid-record leaves a partial last line: it is ignored. Non-finite numbers are `null`
in the files and become NaN here.
"""
import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import sys
import textwrap
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_formats import FormatsError, add_formats_argument, parse_formats  # noqa: E402

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


def check_config(config, path):
    """Refuses a config.json whose parts used for the labels have the wrong shape (docs/formats.md)."""
    fix = "fix or remove it (docs/formats.md)"
    if not isinstance(config, dict):
        raise PlotError(f"{path} is not a JSON object; {fix}")
    history = config.get("history")
    if history is not None:
        if not isinstance(history, list):
            raise PlotError(f'{path}: "history" is not a list; {fix}')
        for i, h in enumerate(history):
            if (not isinstance(h, dict) or not isinstance(h.get("step"), int) or isinstance(h.get("step"), bool)
                    or not isinstance(h.get("flag"), str) or "old" not in h or "new" not in h):
                raise PlotError(f'{path}: "history" entry {i} is not {{"step": int, "flag": str, "old", "new"}}; {fix}')
    fork = config.get("forked_from")
    if fork is not None and (not isinstance(fork, dict) or not isinstance(fork.get("step"), int)
                             or not isinstance(fork.get("checkpoint"), str)):
        raise PlotError(f'{path}: "forked_from" is not {{"checkpoint": str, "step": int}}; {fix}')


def read_config(cpath):
    """A run's config.json (check_config), None when there is none."""
    if not os.path.isfile(cpath):
        return None
    with open(cpath, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as e:
            raise PlotError(f"{cpath} is not valid JSON ({e}); restore it from the run's config.toml "
                            "or move it away to plot without the configuration")
    check_config(config, cpath)
    return config


# the model fields every logit_stats.jsonl record carries (docs/formats.md), as config.json's "model" names them
STATS_MODEL_KEYS = [("num_layers", "L"), ("num_heads", "NH"), ("global_heads", "G"), ("window", "P")]


def model_text(fields):
    return ", ".join(f"{short}={fields.get(key, '?')}" for key, short in STATS_MODEL_KEYS if key in fields)


def check_stats_model(stats, config, spath, cpath):
    """Refuses logit_stats.jsonl records whose model (num_layers, num_heads, global_heads, window) is not
    config.json's: the file of another run, whose panels would be drawn under this run's label."""
    model = (config or {}).get("model")
    if not isinstance(model, dict):
        return
    want = {key: model[key] for key, _ in STATS_MODEL_KEYS if key in model}
    for s in stats:
        got = {key: s.get(key) for key in want}
        if got != want:
            raise PlotError(f"{spath} holds statistics of another model ({model_text(got)} at step {s.get('step')}) "
                            f"than {cpath} ({model_text(want)}): not this run's; put the run's own logit_stats.jsonl "
                            "back, or move this one away to plot without logit statistics")


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
        self.config = read_config(cpath)
        check_stats_model(self.stats, self.config, spath, cpath)
        self.train = [r for r in self.metrics if "loss" in r]
        self.val = [r for r in self.metrics if "val_loss" in r]
        self._counted = None

    def counted(self):
        """(training records, problem) that the summary counts: a fork's source records of the steps up to
        its fork step (source_train), then its own; problem: why some source's steps are missing, else None."""
        if self._counted is None:
            earlier, problem = source_train(self.config, {os.path.realpath(self.path)},
                                            first_time(self.metrics))
            self._counted = by_step(earlier + self.train), problem
        return self._counted

    def model(self):
        """Model fields: config.json's, else what logit_stats.jsonl tells."""
        if self.config:
            return self.config.get("model", {})
        if self.stats:
            s = self.stats[0]
            return {"num_layers": s["num_layers"], "num_heads": s["num_heads"],
                    "global_heads": s["global_heads"], "window": s["window"]}
        return {}

    def label_config(self):
        """config.json's content, with the model fields read from logit_stats.jsonl when it is missing."""
        return dict(self.config) if self.config else {"model": self.model()}


# the files the experiment scripts keep beside a run directory RUN (scripts/exp_run_settings.sh, the run's log)
SIDE_FILES = (".args", ".log", ".build")


def run_dirs(paths):
    """The run directories of `paths`, in their order: a file RUN.args, RUN.log or RUN.build beside a run directory
    RUN given too (a glob runs/* matches them) is left out; any other path that exists but is not a directory is
    refused, and so is a run given twice (one directory in two spellings: out/run and out/run/, or a link)."""
    given = {os.path.realpath(p) for p in paths if os.path.isdir(p)}
    dirs, seen = [], {}
    for p in paths:
        if os.path.exists(p) and not os.path.isdir(p):
            stem, ext = os.path.splitext(p)
            if ext in SIDE_FILES and os.path.isfile(p) and os.path.realpath(stem) in given:
                continue
            raise PlotError(f"{p} is not a directory; pass output directories of train_gpt2_ls (-o DIR)")
        real = os.path.realpath(p)
        if real in seen:
            raise PlotError(f"{seen[real]} and {p} are the same run directory; give each run once")
        seen[real] = p
        dirs.append(p)
    return dirs


# ---------------------------------------------------------------------------------------------
# labels: pure functions of config.json's content (docs/formats.md)

# the short training flags of llmc/app/flags.h (test/test_plot_run.py checks this table against it)
SHORT_FLAGS = {"-i": "train_data", "-j": "val_data", "-o": "output_dir", "-e": "model", "-b": "batch_size",
               "-t": "seq_len", "-d": "total_batch_size", "-x": "max_steps", "-l": "learning_rate",
               "-u": "warmup_steps", "-q": "final_lr_frac", "-k": "lr_schedule", "-c": "weight_decay",
               "-v": "val_every", "-m": "val_batches", "-s": "sample_every", "-g": "gen_tokens",
               "-n": "checkpoint_every", "-y": "resume", "-z": "zero_stage"}

# training settings that only change what is recorded or where it runs, never the experiment: a change
# on resume gets a marker in the plots but no note in the label. --near is not one: it changes what the
# near/far plots measure
BOOKKEEPING = {"output_dir", "val_every", "val_batches", "sample_every", "gen_tokens", "temperature",
               "checkpoint_every", "resume", "keep_checkpoints", "logit_stats_every", "device", "threads",
               "logit_alarm_cooldown"}


def short_number(v):
    """A setting's value, short: 1e-4, 3e-4, 0.02, 100, 1.5; strings and booleans as they are."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e6:
        return str(int(v))
    if v != 0 and (abs(v) < 1e-2 or abs(v) >= 1e6):
        mantissa, exponent = f"{v:.2e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    return f"{v:.3g}"


def flag_key(flag):
    """config.json's "train" key of a flag as history records it: "--z-loss", "-l", "-l,--learning-rate" or
    "-l/--learning-rate" (the long name wins) -> "z_loss", "learning_rate"."""
    names = [n.strip() for n in str(flag).replace("/", ",").split(",") if n.strip()]
    for n in names:
        if n.startswith("--"):
            return n[2:].replace("-", "_")
    for n in names:
        if n in SHORT_FLAGS:
            return SHORT_FLAGS[n]
    return str(flag).lstrip("-").replace("-", "_")


def history_entries(config):
    """config.json's optional "history" (training flags changed on resume), in step order."""
    return sorted((config or {}).get("history") or [], key=lambda h: h.get("step", 0))


def epoch_text(h):
    """The text of a history entry {"epoch": true} ("flag": "--max-steps"): -x stayed -1 (one epoch) and a -d
    changed at that step moved the epoch's step total from old to new (docs/formats.md); None for a flag's
    change."""
    if h.get("epoch") is not True:
        return None
    return f"one epoch: {short_number(h.get('old'))}->{short_number(h.get('new'))} steps"


def acting_value(key, value, model):
    """A setting's value as it acted: --near's null (not given) is the model's window P, where the CPU's
    statistics split (docs/training.md "Near/far attention statistics"); any other value as it is."""
    if key == "near" and value is None:
        return (model or {}).get("window")
    return value


def setting_at(config, key, step):
    """The value of training setting `key` that trained step `step` (acting_value): "train"'s, or the first
    history change's `old`, with every change made at a step before `step` applied (docs/formats.md)."""
    config = config or {}
    start, changes = timeline(config.get("train") or {}, history_entries(config), key)
    value = start
    for at, new in changes:
        if isinstance(at, int) and at < step:
            value = new
    return acting_value(key, value, config.get("model"))


def timeline(train, history, key):
    """(value at step 0, [(step, new value), ...]) of a training setting: the first change's `old` is the
    value the run started with, whatever "train" holds."""
    changes = [(h.get("step"), h.get("new")) for h in history if flag_key(h.get("flag")) == key]
    firsts = [h.get("old") for h in history if flag_key(h.get("flag")) == key]
    return (firsts[0] if firsts else train.get(key)), changes


def timeline_text(name, sep, start, changes, value_text):
    """One label piece of a setting that may change during the run; value_text(v) is None for "off".
    "z-loss 1e-4", "z-loss 1e-4 from step 400" (off before), "lr=3e-4 (1e-4 from step 400)",
    "QK-Clip 100 (off from step 800)"; None when the setting is off all along."""
    first = value_text(start)
    rest = list(changes)
    if first is None:
        while rest and value_text(rest[0][1]) is None:
            rest.pop(0)
        if not rest:
            return None
        step, v = rest.pop(0)
        head = f"{name}{sep}{value_text(v)} from step {step}"
    else:
        head = f"{name}{sep}{first}"
    if rest:
        head += " (" + ", ".join(f"{value_text(v) or 'off'} from step {s}" for s, v in rest) + ")"
    return head


def on_value(v):
    """A stabilizer's value, None when off (0, false or absent)."""
    return short_number(v) if v not in (None, 0, False) else None


# the stabilizers that training flags switch (name, config.json "train" key, separator, value text)
TRAIN_STABILIZERS = [
    ("z-loss", "z_loss", " ", on_value),
    ("QK-Clip", "qk_clip", " ", on_value),
    ("logit alarm", "logit_alarm", " z>", on_value),
    ("logit alarm", "logit_alarm_above", " >", on_value),
    ("skip spikes", "skip_spikes", " z>", on_value),
]


def label_parts(config, compared=()):
    """Ordered (key, text, pinned) pieces describing a run, from config.json's content (a dict with "model",
    "train" and the optional "history" and "forked_from"; docs/formats.md), and one piece per setting of
    `compared` (differing_settings: those in which the runs differ beyond these pieces). make_labels keeps the
    pieces that differ between runs; a pinned piece (a setting changed on resume, a fork) is always shown."""
    config = config or {}
    m, t = config.get("model") or {}, config.get("train") or {}
    history = history_entries(config)
    changed = {flag_key(h.get("flag")) for h in history}
    parts = []
    nh, g = m.get("num_heads"), m.get("global_heads")
    if nh is not None and g is not None:
        t_start, t_changes = timeline(t, history, "seq_len")
        seq_lens = [v for v in [t_start] + [v for _, v in t_changes] if isinstance(v, int)]
        if g == nh:
            kind = "MHSA"
        elif seq_lens and isinstance(m.get("window"), int) and m["window"] >= max(seq_lens):
            kind = f"MHSA (P={m['window']} >= T)"  # every local head sees the whole context: the trainer says MHSA
        elif g == 0:
            kind = f"all-local P={m.get('window')}"
        else:
            kind = f"LS G={g}/{nh} P={m.get('window')}"
        parts.append(("kind", kind, False))
    if m.get("qk_norm"):
        parts.append(("qk_norm", "QK-norm", False))
    if m.get("attn_softcap"):
        parts.append(("attn_softcap", f"soft-cap {short_number(m['attn_softcap'])}", False))
    if m.get("bias") is False:  # absent (config.json written before the field existed): GPT-2's biases
        parts.append(("bias", "no bias", False))
    if m.get("gelu") == "erf":  # absent or "tanh": GPT-2's tanh GELU
        parts.append(("gelu", "erf GELU", False))
    for name, key, sep, value_text in TRAIN_STABILIZERS:
        start, changes = timeline(t, history, key)
        text = timeline_text(name, sep, start, changes, value_text)
        if text:
            parts.append((key, text, key in changed))
    start, changes = timeline(t, history, "grad_clip")  # on by default (1): named when it differs or changes
    if changes or start not in (None, 1, 1.0):
        text = timeline_text("grad-clip", " ", start, changes, lambda v: "off" if v == 0 else short_number(v))
        parts.append(("grad_clip", text, bool(changes)))
    if "seq_len" in t:
        start, changes = timeline(t, history, "seq_len")
        parts.append(("seq_len", timeline_text("T", "=", start, changes, short_number), "seq_len" in changed))
    if "channels" in m:
        parts.append(("channels", f"C={m['channels']}", False))
    if "num_layers" in m:
        parts.append(("num_layers", f"L={m['num_layers']}", False))
    data = data_text(config)
    if data:
        parts.append(("data", data, False))
    if "learning_rate" in t or "learning_rate" in changed:
        start, changes = timeline(t, history, "learning_rate")
        parts.append(("learning_rate", timeline_text("lr", "=", start, changes, short_number),
                      "learning_rate" in changed))
    if "seed" in t:
        start, changes = timeline(t, history, "seed")
        parts.append(("seed", timeline_text("seed", " ", start, changes, short_number), "seed" in changed))
    for key in compared:
        start, changes = setting_timeline(config, key)
        if start is None and not changes:  # not recorded by this run's version
            continue
        name, value_text = COMPARED_TEXT.get(key, (key.replace("_", "-") + " ", short_number))
        parts.append((f"setting:{key}", timeline_text(name, "", start, changes, value_text),
                      any(k in changed for k in SETTING_FLAGS.get(key, (key,)))))
    shown = ({k for k, _, _ in parts} | BOOKKEEPING | {k for key in compared for k in SETTING_FLAGS.get(key, (key,))})
    for h in history:  # every other change of the experiment: "max-steps 1000->2000 at step 1000"
        key = flag_key(h.get("flag"))
        if epoch_text(h):  # not a -x change: "one epoch: 4330->2165 steps at step 1126"
            parts.append((f"history:epoch:{h.get('step')}", f"{epoch_text(h)} at step {h.get('step')}", True))
        elif key not in shown:
            old, new = (short_number(acting_value(key, h.get(v), m)) for v in ("old", "new"))
            parts.append((f"history:{key}:{h.get('step')}", f"{key.replace('_', '-')} {old}->{new} at step "
                          f"{h.get('step')}", True))
    fork = config.get("forked_from")
    if fork:
        ckpt = str(fork.get("checkpoint", "?"))
        parent = os.path.basename(os.path.dirname(os.path.normpath(ckpt))) or ckpt
        parts.append(("forked_from", f"forked from {parent} at step {fork.get('step', '?')}", True))
    return parts


# the order of the pieces in a label (label_parts' order; "history" stands for history:FLAG:STEP)
LABEL_ORDER = ["kind", "qk_norm", "attn_softcap", "bias", "gelu"] + [key for _, key, _, _ in TRAIN_STABILIZERS] + [
    "grad_clip", "seq_len", "channels", "num_layers", "data", "learning_rate", "seed", "setting", "history",
    "forked_from"]

# ---------------------------------------------------------------------------------------------
# the settings in which runs differ beyond the label pieces above (trial 6: runs of 4x the tokens per step, or
# another weight decay, had identical labels)

# config.json "train" keys never compared: those the label pieces show, paths and the data (data_note compares
# the data identities), where and how the run executed (processes, threads, device, ZeRO, CUDA graphs, PDL) and
# what only changes the record (BOOKKEEPING, but -m, which makes the validation set); -d is compared as the tokens per step it gives (-1: B x T x
# processes), "tokens_per_step", and -b as the sequences of a micro-batch over all processes, "batch_sequences"
# (B x processes: -b 2 on 2 processes and -b 4 on one run the same steps, docs/multigpu.md)
NOT_COMPARED = (BOOKKEEPING - {"val_batches"}) | {key for _, key, _, _ in TRAIN_STABILIZERS} | {
    "grad_clip", "seq_len", "learning_rate", "seed", "train_data", "val_data", "model", "expect_tokenizer",
    "expect_vocab", "world_size", "zero_stage", "cuda_graph", "pdl", "logit_alarm_keep", "total_batch_size",
    "batch_size"}
# config.json "model" keys compared (the others are label pieces, or the data's vocabulary)
COMPARED_MODEL = ["num_heads", "max_seq_len", "tied_embeddings"]
# the label text of a compared setting other than "weight-decay 0.1": (name, value text)
COMPARED_TEXT = {"tokens_per_step": ("tokens/step ", short_number), "num_heads": ("NH=", short_number),
                 "batch_sequences": ("sequences/micro-batch ", short_number),
                 "tied_embeddings": ("", lambda v: "tied embeddings" if v else "untied embeddings")}
# the training flags whose changes on resume change a compared setting (default: the setting itself)
SETTING_FLAGS = {"tokens_per_step": ("total_batch_size", "batch_size", "seq_len"), "batch_sequences": ("batch_size",)}


def tokens_per_step_at(config, step):
    """Training tokens of step `step`: -d when > 0, else B x T x processes, with the settings that trained it
    (setting_at); config.json's derived.tokens_per_step before any change of them. None when unknown."""
    config = config or {}
    derived = (config.get("derived") or {}).get("tokens_per_step")
    moved = any(flag_key(h.get("flag")) in SETTING_FLAGS["tokens_per_step"] and isinstance(h.get("step"), int)
                and h["step"] < step for h in history_entries(config))
    if isinstance(derived, int) and not moved:
        return derived
    d = setting_at(config, "total_batch_size", step)
    if isinstance(d, int) and d > 0:
        return d
    b, t = setting_at(config, "batch_size", step), setting_at(config, "seq_len", step)
    processes = (config.get("train") or {}).get("world_size") or 1
    return b * t * processes if isinstance(b, int) and isinstance(t, int) else None


def setting_timeline(config, key):
    """(value at the run's first step, [(step, new value), ...]) of a compared setting as it acted (acting_value):
    a "train" key by its history, "tokens_per_step" by tokens_per_step_at, a "model" key constant."""
    config = config or {}
    if key in COMPARED_MODEL:
        return (config.get("model") or {}).get(key), []
    if key == "tokens_per_step":
        steps = sorted({h["step"] for h in history_entries(config) if isinstance(h.get("step"), int)
                        and flag_key(h.get("flag")) in SETTING_FLAGS[key]})
        start, changes = tokens_per_step_at(config, 1), []
        for s in steps:
            value = tokens_per_step_at(config, s + 1)
            if value != (changes[-1][1] if changes else start):
                changes.append((s, value))
        return start, changes
    if key == "batch_sequences":  # -b x processes
        processes = (config.get("train") or {}).get("world_size") or 1
        start, changes = timeline(config.get("train") or {}, history_entries(config), "batch_size")
        times = (lambda v: v * processes if isinstance(v, int) else v)
        return times(start), [(s, times(v)) for s, v in changes]
    start, changes = timeline(config.get("train") or {}, history_entries(config), key)
    model = config.get("model")
    return acting_value(key, start, model), [(s, acting_value(key, v, model)) for s, v in changes]


def compared_timeline(config, key):
    """setting_timeline as compared between runs: --near at the window (given or not) is "the window", so that
    runs of different P at the default split are not called different in --near (their P is in the label)."""
    start, changes = setting_timeline(config, key)
    if key == "near":
        window = ((config or {}).get("model") or {}).get("window")
        start, changes = ("P" if start == window else start), [(s, "P" if v == window else v) for s, v in changes]
    return start, changes


def differing_settings(configs):
    """The settings (config.json "train" keys, "tokens_per_step", COMPARED_MODEL keys) whose values, changes on
    resume included, differ between the runs that record them (compared_timeline), in config.json's order; none
    for one run."""
    if len(configs) < 2:
        return []
    keys = []
    for c in configs:
        for k in (c or {}).get("train") or {}:
            if k == "total_batch_size" and "tokens_per_step" not in keys:
                keys.append("tokens_per_step")
            if k == "batch_size" and "batch_sequences" not in keys:
                keys.append("batch_sequences")
            if k not in NOT_COMPARED and k not in keys:
                keys.append(k)
    if "tokens_per_step" not in keys:
        keys.append("tokens_per_step")
    out = []
    for k in keys + COMPARED_MODEL:
        values = [compared_timeline(c, k) for c in configs]
        values = {repr(v) for v in values if v[0] is not None or v[1]}
        if len(values) > 1:
            out.append(k)
    return out


def settings_note(configs):
    """One line naming the settings in which the runs differ beyond the label pieces (differing_settings), None
    when there are none: their labels name each run's values; a comparison per step is not one of attention
    alone."""
    keys = differing_settings(configs)
    if not keys:
        return None
    return (f"note: runs also differ in: {', '.join(keys)} (config.json; each run's value is in its label, and the "
            "summary's tokens column counts the training tokens each saw)")


def tokens_seen(config, step):
    """Training tokens a run saw up to and including `step`: a fork's source tokens (forked_from.tokens) and
    tokens_per_step_at of each later step; None when unknown (no config.json, a fork without "tokens")."""
    config = config or {}
    fork = config.get("forked_from")
    total, first = 0, 1
    if fork:
        if not isinstance(fork.get("tokens"), int):
            return None
        total, first = fork["tokens"], fork["step"] + 1
    bounds = sorted({h["step"] + 1 for h in history_entries(config) if isinstance(h.get("step"), int)
                     and flag_key(h.get("flag")) in SETTING_FLAGS["tokens_per_step"] and first < h["step"] + 1 <= step})
    for lo, hi in zip([first] + bounds, bounds + [step + 1]):  # steps lo .. hi - 1 at one rate
        if hi > lo:
            rate = tokens_per_step_at(config, lo)
            if rate is None:
                return None
            total += rate * (hi - lo)
    return total


def data_set_name(glob):
    """The data set of a shard glob: the directory that holds the shards (data/shards/ts_sp/train_*.bin -> ts_sp);
    a directory named data (exp_pg19.sh --smoke's OUT/data) with its parent's name (out/smoke/data/... ->
    smoke/data), so that a label never reads "data data"."""
    folder = os.path.dirname(os.path.normpath(str(glob)))
    name, parent = os.path.basename(folder), os.path.basename(os.path.dirname(folder))
    if name == "data" and parent:
        name = f"{parent}/data"
    return name or str(glob)


def data_text(config):
    """The label piece of config.json's "data" (the run's data identity, docs/formats.md): "data ts_sp (sp V=500)";
    both data sets when the validation shards lie in another one than the training shards ("data train
    tinyshakespeare_gpt2, val ts2 (gpt2 V=50257)"); None for a run recorded before "data" existed."""
    data = (config or {}).get("data")
    role = (data or {}).get("train") if isinstance(data, dict) else None
    if not isinstance(role, dict):
        return None
    tok, vocab = role.get("tokenizer"), role.get("vocab_size")
    what = " ".join(x for x in [str(tok) if tok else "", f"V={vocab}" if vocab is not None else ""] if x)
    name, val = data_set_name(role.get("glob")), data.get("val")
    if isinstance(val, dict) and val.get("glob") and data_set_name(val["glob"]) != name:
        name = f"train {name}, val {data_set_name(val['glob'])}"
    return f"data {name}" + (f" ({what})" if what else "")


def data_identity(config):
    """(tokenizer, validation set, training set) of config.json's "data", each a tuple of recorded fields (None
    where a field was not recorded: older runs have no hashes); None without "data" (docs/formats.md)."""
    data = (config or {}).get("data")
    if not isinstance(data, dict) or not isinstance(data.get("train"), dict):
        return None

    def shards(role):
        if not isinstance(role, dict):
            return None
        return role.get("shards_sha256_fnv1a64"), os.path.normpath(str(role.get("glob")))
    tr = data["train"]
    tokenizer = (tr.get("tokenizer"), tr.get("vocab_size"), tr.get("tokenizer_bin_fnv1a64"),
                 tr.get("sha256_tokenizer_model"))
    return tokenizer, shards(data.get("val")), shards(tr)


def same_part(k, a, b):
    """Whether part k (0 tokenizer, 1 validation set, 2 training set) of two data identities names the same
    thing, by what both runs recorded: the tokenizer's fields that both have; a set's shard hash when both
    have one, else its glob. A run without validation agrees with any validation set."""
    x, y = a[k], b[k]
    if x is None or y is None:
        return k != 0 or x == y
    if k == 0:
        return all(u == v for u, v in zip(x, y) if u is not None and v is not None)
    return x[0] == y[0] if x[0] and y[0] else x[1] == y[1]


def same_data(a, b):
    """Whether two data identities (data_identity) read the same tokenizer, training and validation sets."""
    if a is None or b is None:
        return True
    return all(same_part(k, a, b) for k in range(3))


def told_apart_data_texts(configs):
    """data_text of each run, where two data sets of one name and vocabulary differ (tokenized again into the
    same directory) told apart by a short digest of their identity: "data pg19_sp (sp V=10000) #c42b66"."""
    ids, texts = [data_identity(c) for c in configs], [data_text(c) for c in configs]
    out = list(texts)
    for n in range(len(configs)):
        if texts[n] and any(texts[m] == texts[n] and not same_data(ids[m], ids[n]) for m in range(len(configs))):
            out[n] = f"{texts[n]} #{hashlib.sha1(repr(ids[n]).encode()).hexdigest()[:6]}"
    return out


def data_note(configs, names):
    """One line when the runs' recorded data differ (docs/experiments.md): losses per token of different
    tokenizers or validation sets are not comparable. None when they agree (runs without "data" are left out,
    and a run without validation from the validation sets)."""
    ids = [(data_identity(c), text, name) for c, text, name in zip(configs, told_apart_data_texts(configs), names)]
    ids = [x for x in ids if x[0] is not None]
    differ = [name for k, name in [(0, "tokenizers"), (1, "validation sets"), (2, "training sets")]
              if any(not same_part(k, x[0], y[0]) for x in ids for y in ids)]
    if not differ:
        return None
    each = "; ".join(f"{name}: {text[len('data '):]}" for _, text, name in ids)
    if differ == ["training sets"]:
        return (f"note: these runs trained on different training sets ({each}): their training losses are not "
                "comparable (their validation losses, on one set, are)")
    return (f"note: these runs' losses are per token of different {' and '.join(differ[:2])} ({each}): "
            "not comparable, a lower loss is not a better model here")


# the settings that make a validation set: its shards, its batches (-m) and their rows (-b, -t)
VAL_SET_KEYS = ("val_data", "val_batches", "batch_size", "seq_len")


def val_change_note(configs, names):
    """One line naming the runs whose validation set changed while they trained (config.json's "history"
    changed -j, -m, -b or -t): their validation losses before and after that step are on different sets, so
    neither their curve nor their final loss compares with earlier points or other runs. None when none did."""
    changed = []
    for config, name in zip(configs, names):
        steps = {}
        for h in history_entries(config):
            if flag_key(h.get("flag")) in VAL_SET_KEYS:
                steps.setdefault(h.get("step"), []).append(str(h.get("flag")))
        if steps:
            changed.append(f"{name}: " + ", ".join(f"{' and '.join(flags)} at step {step}"
                                                   for step, flags in steps.items()))
    if not changed:
        return None
    return (f"note: the validation set changed during a run ({'; '.join(changed)}): its validation losses on either "
            "side of that step are per token of different validation sets, not comparable, a lower loss is not a "
            "better model here")


def make_labels(all_parts, names):
    """Legend labels of runs (all_parts: label_parts of each run; names: their directory names) with the
    pieces that differ between the runs and the pinned ones; the common pieces form the title. Runs that
    still look alike get their directory name. With one run, all but lr and seed go to the label."""
    parts = [{k: text for k, text, _ in p} for p in all_parts]
    pinned = {k for p in all_parts for k, _, pin in p if pin}
    keys = []
    for p in parts:
        keys += [k for k in p if k not in keys]
    keys.sort(key=lambda k: LABEL_ORDER.index(k.split(":")[0]))
    if len(parts) == 1:
        common = [k for k in ("data", "learning_rate", "seed") if k in keys and k not in pinned]
    else:
        common = [k for k in keys if k not in pinned and len({p.get(k, "") for p in parts}) == 1]
    varying = [k for k in keys if k not in common]
    labels = [", ".join(p[k] for k in varying if p.get(k)) for p in parts]
    if len(set(labels)) < len(labels) or not all(labels):
        labels = [(lab + " " if lab else "") + f"[{name}]" for lab, name in zip(labels, names)]
    title = ", ".join(parts[0][k] for k in common if parts[0].get(k))
    return labels, title


def run_labels(runs):
    configs = [r.label_config() for r in runs]
    compared = differing_settings(configs)
    all_parts = [label_parts(c, compared) for c in configs]
    texts = told_apart_data_texts(configs)
    all_parts = [[(k, texts[n] if k == "data" else text, pin) for k, text, pin in p] for n, p in enumerate(all_parts)]
    return make_labels(all_parts, [os.path.basename(os.path.normpath(r.path)) for r in runs])


# the stabilizers a run name (scripts/exp_text_ratio.sh's variants) or a --labels label may name, by their word
# (label_words): (label_parts key, text)
STABILIZER_WORDS = {"qknorm": ("qk_norm", "QK-norm"), "zloss": ("z_loss", "z-loss"),
                    "softcap": ("attn_softcap", "soft-cap"), "qkclip": ("qk_clip", "QK-Clip")}


def attention_kinds(config):
    """The attention kinds ("mhsa", "ls", "local") a name or label may give a run: its layout's (MHSA for G = NH,
    LS for 0 < G < NH, all-local for G = 0), and "mhsa" too for a window not below T (label_parts' "MHSA (P=p >=
    T)": the local heads are there, and see the whole context). Empty when the model's heads are not known."""
    m = (config or {}).get("model") or {}
    kind = {k: text for k, text, _ in label_parts(config)}.get("kind")
    if kind is None:
        return set()
    g, nh = m.get("global_heads"), m.get("num_heads")
    layout = "mhsa" if g == nh else "local" if g == 0 else "ls"
    return {layout} | ({"mhsa"} if kind.startswith("MHSA") else set())


# the attention kinds a --labels label may name, by their word (label_words), and their text
KIND_WORDS = {"mhsa": "mhsa", "ls": "ls", "local": "local", "alllocal": "local"}
KIND_TEXT = {"mhsa": "MHSA", "ls": "LS", "local": "all-local"}


def label_tokens(text):
    """The words of a label or run name (label_words) with the text before each: [(separator, word)], the
    separator being what lies between the word and the one before it ("LS (no QK-norm)" -> ("", "ls"), (" (",
    "no"), (" ", "qknorm")), and one last ("", None) holding the text after the last word."""
    t = text.lower()
    for a, b in (("qk", "norm"), ("z", "loss"), ("soft", "cap"), ("qk", "clip"), ("all", "local")):
        t = re.sub(rf"(?<![a-z0-9]){a}[-_]{b}", a + b, t)
    out, end = [], 0
    for m in re.finditer(r"[a-z]*\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![a-z0-9])|[a-z0-9]+", t):
        out.append((t[end:m.start()], m.group()))
        end = m.end()
    return out + [(t[end:], None)]


def label_words(text):
    """The words of a label or run name, lower case, split on anything but letters and digits (_ too), with
    qk-norm, z-loss, soft-cap, qk-clip and all-local (or with _) one word each, and a number one word with its
    point, exponent and the letters just before it: "LS_QK-norm 2, z-loss 1e-4, qkclip0.5" -> ls, qknorm, 2,
    zloss, 1e-4, qkclip0.5."""
    return [w for _, w in label_tokens(text)[:-1]]


# the words that name an absence of what follows (label_negated), "w/o" as the words w, o
NEGATORS = ("no", "without", "neither", "nor")
# the words that join a list (label_negated): "no QK-norm or z-loss" ("nor" starts a list of its own)
LIST_WORDS = ("or", "and")
# words inside a negated list that name nothing ("no extra stabilizers", "without any z-loss")
FILLER_WORDS = ("any", "extra", "the", "both", "either")


def word_kind(w):
    """The kind of a label word (label_words), for label_negated's lists: "attention" (mhsa, ls, local,
    all-local, global), "stabilizer" (qknorm, zloss, softcap, qkclip, with or without a value, and stabilizer(s)
    itself), "value" (a number, off, none) or "other"."""
    if w in KIND_WORDS or w == "global":
        return "attention"
    if re.fullmatch(r"(qknorm|zloss|softcap|qkclip)(\d[0-9.e+-]*)?|stabili[sz]ers?", w):
        return "stabilizer"
    return "value" if w in ("off", "none") or re.fullmatch(r"\d[0-9.e+-]*", w) else "other"


def label_negated(text):
    """The indexes of label_words' words whose absence the label names: those after "no", "without", "w/o",
    "neither" or "nor", and the list that follows on of words of the first one's kind (word_kind), each joined
    to the one before by "or", "and", "nor" or "/", or inside a "(" opened in the list, with their values:
    "LS without QK-norm or z-loss", "LS no stabilizers (qknorm zloss)". A word of another kind, a word of the
    kind after a plain space or a comma outside the "(" ("no z-loss QK-norm" names QK-norm, "no QK-norm, z-loss
    1e-4" z-loss), a ")" or other punctuation (";", "|", "+", ...) ends the list: "baseline (no LS) MHSA" names
    MHSA, "w/o warmup, z-loss 1e-4" z-loss."""
    toks = label_tokens(text)
    words = [w for _, w in toks[:-1]]
    out, kind = set(), None  # kind: of the negated list's words; "" right after a negator
    joined = paren = False   # a joiner since the list's last word; a "(" opened in the list
    for i, (sep, w) in enumerate(toks[:-1]):
        if kind is not None and not re.fullmatch(r"[\s,/(]*", sep):
            kind = None  # ")" or other punctuation ends the list
        if kind is not None and w not in NEGATORS:
            paren = paren or "(" in sep
            joined = joined or paren or "/" in sep
            k = word_kind(w)
            if w in LIST_WORDS:
                joined = True
                continue
            if w in FILLER_WORDS:
                continue
            if kind == "":
                out.add(i)
                kind = k if k != "value" else ""
                joined = False
                continue
            if k == "value" or (k == kind and joined):
                out.add(i)
                joined = False
                continue
            kind = None
        if w in NEGATORS or (w == "o" and i > 0 and words[i - 1] == "w" and sep == "/"):
            kind, joined, paren = "", False, False
    return out


def names_absence(value):
    """Whether a stabilizer's value word (label_words) names its absence: off, none, or a number that is 0
    ("softcap=0", "z-loss 0", "qkclip0")."""
    if value in ("off", "none"):
        return True
    try:
        return float(value) == 0
    except ValueError:
        return False


def recorded_variant(config):
    """The attention and the stabilizers of a run's label ("MHSA, QK-Clip 100"; label_parts)."""
    parts = {k: text for k, text, _ in label_parts(config)}
    keys = ["kind"] + [key for key, _ in STABILIZER_WORDS.values()]
    return ", ".join(parts[k] for k in keys if k in parts) or "no attention layout"


def label_conflict(lab, run):
    """Why --labels' `lab` contradicts its run (None when it does not): its words (label_words), but those whose
    absence it names (label_negated: after "no", "without" or "w/o", and the list that follows), name exactly one attention kind and not one of the run's
    (attention_kinds), "local" counting as all-local only in a label naming no other layout (mhsa, ls, global
    or G=: "G=1 + 3 local heads" is LS); or a stabilizer the run's config.json does not have, but one whose value
    names its absence (names_absence: "softcap=0", "QK-clip off")."""
    config = run.label_config()
    words = label_words(lab)
    absent = label_negated(lab)
    named = [(i, w) for i, w in enumerate(words) if i not in absent]
    layout = any(w in ("mhsa", "ls", "global") for _, w in named) or re.search(r"(?<![a-z0-9])g\s*=", lab.lower())
    parts = {k for k, _, _ in label_parts(config)}
    where = f"{run.path}'s {'config.json' if run.config else 'logit_stats.jsonl'} records {recorded_variant(config)}"
    kinds = {KIND_WORDS[w] for _, w in named if w in KIND_WORDS and not (w == "local" and layout)}
    allowed = attention_kinds(config)
    if len(kinds) == 1 and allowed and not kinds <= allowed:
        return f"label '{lab}' says {KIND_TEXT[kinds.pop()]}, but {where}"
    if run.config is None:  # the stabilizers are not known
        return None
    for i, w in named:
        m = re.fullmatch(r"(qknorm|zloss|softcap|qkclip)(\d[0-9.e+-]*)?", w)
        value = m and (m.group(2) or (words[i + 1] if i + 1 < len(words) else ""))
        if m and not names_absence(value) and STABILIZER_WORDS[m.group(1)][0] not in parts:
            return f"label '{lab}' says {STABILIZER_WORDS[m.group(1)][1]}, but {where}, without it"
    return None


def check_labels(labels, runs):
    """Refuses --labels that are not one per run, given twice, or contradict their run (label_conflict): the fix
    offered is the directories' order where the label fits another run given, else another label."""
    if len(labels) != len(runs):
        raise PlotError(f"--labels has {len(labels)} labels for {len(runs)} directories; give one per OUT_DIR")
    for i, lab in enumerate(labels):
        if lab in labels[:i]:
            raise PlotError(f"--labels gives '{lab}' twice; give each run its own label, or drop --labels")
    for lab, run in zip(labels, runs):
        why = label_conflict(lab, run)
        if why:  # the order is the fix only where the label is another run's
            swapped = any(r is not run and label_conflict(lab, r) is None for r in runs)
            fix = "give the labels in the order of the directories" if swapped else "relabel it to match"
            raise PlotError(f"--labels: {why}; {fix}, or drop --labels")


def labels_note(labels, derived, names):
    """One line naming, per --labels label, the label made from its run's config (run_labels) and its directory:
    the title leaves out what the runs differ in, for the labels to show it."""
    return "note: --labels: " + "; ".join(
        f"{lab} = {d if d.endswith(f'[{n}]') else f'{d} [{n}]'}" for lab, d, n in zip(labels, derived, names))


def markers_of(config):
    """Vertical markers of a run: [(step, text)], one per step where training flags changed on resume
    ("--z-loss 0->1e-4", several flags of one step on separate lines; an epoch entry as "one epoch: 4330->2165
    steps") and one at a fork's step."""
    by_step = {}
    model = (config or {}).get("model")
    for h in history_entries(config):
        text = epoch_text(h)
        if text is None:
            old, new = (short_number(acting_value(flag_key(h.get("flag")), h.get(v), model)) for v in ("old", "new"))
            text = f"{h.get('flag')} {old}->{new}"
        by_step.setdefault(h.get("step"), []).append(text)
    out = [(s, "\n".join(texts)) for s, texts in by_step.items() if isinstance(s, (int, float))]
    fork = (config or {}).get("forked_from")
    if fork and isinstance(fork.get("step"), (int, float)):
        ckpt = str(fork.get("checkpoint", "?"))
        out.append((fork["step"], f"fork of {os.path.basename(os.path.dirname(os.path.normpath(ckpt))) or ckpt}"))
    return sorted(out, key=lambda m: m[0])


MAX_FORK_DEPTH = 100  # sources read back through forks of forks (a loop of "forked_from" stops there)


def first_time(records):
    """The earliest wall-clock "time" (Unix seconds) of metrics records, None when none has one."""
    times = [r["time"] for r in records if isinstance(r.get("time"), (int, float))]
    return min(times) if times else None


def source_train(config, seen, started=None):
    """(records, problem) of a run with config.json `config`: for a fork ("forked_from": its checkpoint and step
    S) the training records of steps 1..S that trained the checkpoint, read from the checkpoint's directory (a
    relative path from the current directory, as the trainer takes it): the source's records of steps up to S,
    after its own source's when it is a fork too (recursively). problem is None when every step 1..S is there;
    else it says which source cannot be read, and records holds the steps of the sources after it (ending at S,
    or none). `seen`: the real paths of the runs already read; `started`: the earliest "time" of the forking
    run's own records (None: unknown): a source whose record of step S is younger was written after the fork
    (its directory trained again) and is not the fork's past. ([], None) for a run that is no fork."""
    fork = (config or {}).get("forked_from")
    if not fork:
        return [], None
    step, ckpt = fork["step"], fork["checkpoint"]
    src = os.path.dirname(ckpt) or "."
    mpath, cpath = os.path.join(src, "metrics.jsonl"), os.path.join(src, "config.json")
    real = os.path.realpath(src)
    if real in seen:
        return [], (f"its sources' \"forked_from\" lead back to {src} (a loop): their steps before {step + 1} "
                    "are unknown")
    if len(seen) > MAX_FORK_DEPTH:
        return [], f"its sources are forks more than {MAX_FORK_DEPTH} deep: steps before {step + 1} are not read"

    if not os.path.isfile(mpath):
        return [], (f"{mpath}, the record of the run it forked from at step {step} ({ckpt}), does not exist (moved or "
                    f"removed?); put that run back at {src} to count its steps 1-{step}")
    try:
        source_config = read_config(cpath)
        source_records = by_step(read_jsonl(mpath))
        records = [r for r in source_records if "loss" in r and r["step"] <= step]
    except (PlotError, OSError, ValueError) as e:
        return [], f"the record of the run it forked from at step {step} cannot be read ({e})"
    mine, theirs = config.get("model"), (source_config or {}).get("model")
    mine, theirs = (m if isinstance(m, dict) else {} for m in (mine, theirs))
    differ = sorted(k for k in set(mine) & set(theirs) if mine[k] != theirs[k])
    if differ:  # a fork has its checkpoint's model
        return [], (f"{cpath} describes another model ({', '.join(f'{k} {theirs[k]}' for k in differ)}; the fork's "
                    f"{', '.join(str(mine[k]) for k in differ)}): {src} holds another run now than the one it "
                    "forked from")
    source_fork = (source_config or {}).get("forked_from")
    first = source_fork["step"] + 1 if source_fork else 1
    missing = sorted(set(range(first, step + 1)) - {r["step"] for r in records})
    if missing:
        which = f"step {missing[0]}" if len(missing) == 1 else f"{len(missing)} steps ({missing[0]} to {missing[-1]})"
        return [], f"{mpath} lacks the training record of {which} of {first}-{step}, which trained {ckpt}"
    written = next((r.get("time") for r in records if r["step"] == step), None)
    if isinstance(written, (int, float)) and started is not None and written > started:
        return [], (f"{mpath}'s record of step {step} was written after this fork's first step (its directory "
                    f"trained again since): {src} no longer holds the run it forked from")
    earlier, problem = source_train(source_config, seen | {real},
                                    first_time([r for r in source_records if r["step"] >= first]))
    return earlier + records, problem


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
    """The summary row of one run (a dict; NaN / None where the files have no such value). A fork's training
    records are counted from step 1: its source's up to the fork step, then its own (Run.counted). When a
    source's steps cannot be read, counted_from is the first step counted (after 1) and source_note the one
    line that says why; else counted_from is None."""
    train, problem = run.counted()
    steps = [r["step"] for r in train]
    ml = np.array([num(r.get("max_attn_logit")) for r in train])
    row = {"steps": steps[-1] if steps else 0}
    row["counted_from"], row["source_note"] = None, None
    if problem and steps and steps[0] > 1:
        row["counted_from"] = steps[0]
        name = os.path.basename(os.path.normpath(run.path))
        row["source_note"] = (f"note: fork {name}: the summary cells marked {span_text(row).strip()} count "
                              f"only those steps, not steps 1-{steps[0] - 1}: {problem}")
    row["tokens"] = tokens_seen(run.config, row["steps"]) if run.config else None
    row["final_train_loss"] = num(train[-1].get("loss")) if train else float("nan")
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
    row["spikes"], row["spike_rule"] = count_spikes(train)
    row["nonfinite"] = sum(1 for r in train
                           if r.get("skipped_nonfinite") or not math.isfinite(num(r.get("loss"))))
    return row


def span_text(row):
    """The mark of a summary row's cells that count only part of its steps (a fork whose source cannot be
    read): " (steps 11-20)"; "" when they count every step."""
    return f" (steps {row['counted_from']}-{row['steps']})" if row.get("counted_from") else ""


def fmt(x, spec=".4f"):
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else format(x, spec)
    return str(x)


def summary_table(runs, labels, rows, threshold, notes=()):
    head = ["run", "dir", "steps", "tokens", "final val loss", "val ppl", "final train loss", "peak max-logit",
            "at step", f"first step > {threshold:g}", "loss spikes", "non-finite steps"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, lab, r in zip(runs, labels, rows):
        val, ppl = fmt(r["final_val_loss"]), fmt(r["val_ppl"], ".2f")
        if r["val_step"] is None:  # no validation (a run without -j)
            val = ppl = "-"
        elif r["val_step"] != r["steps"]:  # the last validation is older than the last step (step 0: untrained)
            val += f" (step {r['val_step']})"
        span = span_text(r)  # on the cells counted over the steps
        cells = [lab, os.path.basename(os.path.normpath(run.path)), fmt(r["steps"]), fmt(r["tokens"]), val, ppl,
                 fmt(r["final_train_loss"]), fmt(r["peak_max_logit"], ".3f") + span, fmt(r["peak_step"]),
                 fmt(r["first_cross"]) + span, fmt(r["spikes"]) + span, fmt(r["nonfinite"]) + span]
        out.append("| " + " | ".join(cells) + " |")
    rules = sorted({r["spike_rule"] for r in rows})
    out.append("")
    out.append(f"Spikes counted by: {'; '.join(rules)}. Perplexity = exp(final val loss). "
               "Peak max-logit: max over steps of the largest pre-softmax attention logit (all layers and heads).")
    for note in notes:
        out.append("")
        out.append(note[len("note: ")].upper() + note[len("note: ") + 1:] + ".")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# plots

RUN_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]


def color(i, n):
    """Run i of n: matplotlib's 10 default colors, tab20 beyond 10 runs."""
    if n <= 10:
        return f"C{i}"
    import matplotlib
    return matplotlib.colormaps["tab20"](i % 20)


def head_color(h, nh):
    """Head h of nh (--heads all): tab10 up to 10 heads, tab20 up to 20, else evenly spaced on turbo."""
    import matplotlib
    if nh <= 10:
        return matplotlib.colormaps["tab10"](h)
    if nh <= 20:
        return matplotlib.colormaps["tab20"](h)
    return matplotlib.colormaps["turbo"](h / (nh - 1))


def run_marker(i, n, npoints):
    """Run i of n's marker shape, at staggered steps (so that none hides another); none for a single run.
    Runs whose curves coincide are then still told apart: the curve drawn last has the other runs' marks on it."""
    if n <= 1:
        return {}
    every = max(1, npoints // 6)
    return {"marker": RUN_MARKERS[i % len(RUN_MARKERS)], "markevery": (i * every // n, every), "ms": 3.5}


def line_style(heads, i, n, h, nh, npoints):
    """Colour and marker of run i of n (head h of nh with --heads all; h None: the run's aggregate line).
    --heads max: one colour and one marker shape per run. --heads all: one colour per head, one marker
    shape per run. No marker with a single run."""
    style = {"color": color(i, n) if heads == "max" or h is None else head_color(h, nh)}
    style.update(run_marker(i, n, npoints))
    return style


def legend_handles(heads, runs, labels, head_globals):
    """(run handles, head handles) for the figure legends. head_globals: per head index, True/False when
    every run that has the head agrees whether it is global, else None."""
    from matplotlib.lines import Line2D
    n = len(runs)
    if heads == "max":
        return [Line2D([], [], color=color(i, n), marker=RUN_MARKERS[i % len(RUN_MARKERS)] if n > 1 else None,
                       ms=3.5, label=lab) for i, lab in enumerate(labels)], []
    run_h = [Line2D([], [], color="k", lw=0.8, marker=RUN_MARKERS[i % len(RUN_MARKERS)] if n > 1 else None,
                    ms=3.5, label=lab) for i, lab in enumerate(labels)]
    nh = len(head_globals)
    kind = {True: " global", False: " local", None: ""}
    head_h = [Line2D([], [], color=head_color(h, nh), ls="--" if g is False else "-", label=f"h{h}{kind[g]}")
              for h, g in enumerate(head_globals)]
    return run_h, head_h


def head_globals_of(runs):
    """Per head index (up to the largest NH): True/False when all runs with that head agree on global, else None."""
    per_run = []
    for r in runs:
        if r.stats:
            NH = r.stats[0]["num_heads"]
            per_run.append([bool(a["global"]) for a in r.stats[0]["attn"][:NH]])
    nh = max((len(g) for g in per_run), default=0)
    out = []
    for h in range(nh):
        vals = {g[h] for g in per_run if h < len(g)}
        out.append(vals.pop() if len(vals) == 1 else None)
    return out


def wrap_label(text, width):
    """A legend label broken into lines of at most `width` characters at the ", " between its pieces (a
    piece longer than `width` at its spaces)."""
    lines = []
    for piece in text.split(", "):
        if lines and len(lines[-1]) + 2 + len(piece) <= width:
            lines[-1] += ", " + piece
        else:
            if lines:
                lines[-1] += ","
            lines += textwrap.wrap(piece, max(width, 1), break_on_hyphens=False) or [piece]
    return "\n".join(lines)


def fit_legend(fig, legend, margin=0.02):
    """Wraps the legend's labels (wrap_label) until it is no wider than the figure less `margin` on each side,
    and makes the figure taller by the lines added, so that the axes keep their height. Without it a long
    label (a run with several stabilizers and flags changed on resume) ran past both edges of the figure."""
    texts = legend.get_texts()
    labels = [t.get_text() for t in texts]
    longest = max((len(lab) for lab in labels), default=0)
    width = longest
    line_in = legend.prop.get_size_in_points() * 1.25 / 72  # height of one more line of text, inches
    for _ in range(8):
        fig.draw_without_rendering()  # the layout and the text's extents, no pixels
        have = fig.bbox.width * (1 - 2 * margin)
        need = legend.get_window_extent(fig.canvas.get_renderer()).width
        if need <= have or width <= 10:
            return
        width = max(10, min(width - 1, int(width * have / need)))
        lines_before = sum(t.get_text().count("\n") for t in texts)
        for t, lab in zip(texts, labels):
            t.set_text(wrap_label(lab, width))
        fig.set_figheight(fig.get_figheight() + (sum(t.get_text().count("\n") for t in texts) - lines_before) * line_in)


def wrap_title(text, width):
    """A title broken into lines of at most `width` characters after a ", " or "; " or before a " - " between
    its pieces (a piece longer than `width` at its spaces)."""
    pieces = re.split(r"(?<=[,;]) | (?=- )", text)
    lines = []
    for piece in pieces:
        if lines and len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines += textwrap.wrap(piece, max(width, 1), break_on_hyphens=False) or [piece]
    return "\n".join(lines)


def fit_title(fig, artist, margin=0.02):
    """Wraps a title (the figure's suptitle or an axes title; wrap_title) until it lies within the figure
    less `margin` on each side, and makes the figure taller by the lines added. The whole text is kept: cut
    to a fixed length, or set on one line in a narrow figure (one panel per layer, 1 layer), it lost its ends.
    Called after add_legends (fit_legend lays the figure out)."""
    text = artist.get_text()
    width = len(text)
    line_in = artist.get_fontsize() * 1.25 / 72  # height of one more line of text, inches
    for attempt in range(40):
        if attempt:  # the first time, the layout of add_legends' last draw holds (it is called after it)
            fig.draw_without_rendering()
        box = artist.get_window_extent(fig.canvas.get_renderer())
        room = fig.bbox.width * margin
        if (box.x0 >= fig.bbox.x0 + room and box.x1 <= fig.bbox.x1 - room) or width <= 10:
            return
        have = fig.bbox.width * (1 - 2 * margin)
        width = max(10, min(width - 1, int(width * have / max(box.width, 1.0))))
        lines_before = artist.get_text().count("\n")
        artist.set_text(wrap_title(text, width))
        fig.set_figheight(fig.get_figheight() + (artist.get_text().count("\n") - lines_before) * line_in)


def add_legends(fig, run_handles, head_handles, note_handles=()):
    """Legends outside the axes (constrained layout makes room): runs below the panels, heads on the right;
    labels too long for the figure's width are wrapped (fit_legend)."""
    handles = list(run_handles) + list(note_handles)
    longest = max((len(hd.get_label()) for hd in handles), default=0)
    legend = fig.legend(handles=handles, fontsize=6, loc="outside lower center", frameon=False,
                        ncol=1 if longest > 60 else min(len(handles), 2 if longest > 30 else 3))
    if head_handles:
        fig.legend(handles=list(head_handles), fontsize=6, loc="outside right upper", frameon=False, title="heads",
                   title_fontsize=6, ncol=1 + len(head_handles) // 13)
    fit_legend(fig, legend)


def draw_markers(ax, runs, heads, with_text):
    """A vertical line at each step where a run's training flags changed on resume and at a fork's step
    (markers_of), in the run's colour (black with --heads all); with_text: the changes written above the
    axes, on a top axis whose ticks are those steps (outside the axes, so they never hide a curve)."""
    texts = {}
    for i, run in enumerate(runs):
        c = color(i, len(runs)) if heads == "max" else "k"
        for step, text in markers_of(run.config):
            ax.axvline(step, color=c, ls="-.", lw=0.8, alpha=0.8)
            texts.setdefault(step, [])
            if text not in texts[step]:
                texts[step].append(text)
    if with_text and texts:
        top = ax.secondary_xaxis("top")
        top.set_xticks(sorted(texts), ["\n".join(texts[s]) for s in sorted(texts)], fontsize=6, rotation=90)
        top.tick_params(length=2, pad=1)


@contextlib.contextmanager
def written_to(path):
    """Turns an OSError of writing `path` (a read-only run directory, the default --out) into one PlotError naming
    it and the fix."""
    try:
        yield
    except OSError as e:
        raise PlotError(f"cannot write {path} ({e.strerror or e}); give --out PREFIX in a writable directory "
                        "(e.g. --out /tmp/plots/run)") from e


def save(fig, prefix, name, formats):
    """Writes the figure in each format; returns the paths written."""
    paths = [f"{prefix}_{name}.{ext}" for ext in formats]
    for path, ext in zip(paths, formats):
        with written_to(path):
            fig.savefig(path, dpi=80 if ext == "png" else None)
    return paths


def plot_loss(plt, runs, labels, title):
    """The loss figure: training loss thin, validation loss dashed with markers, one colour per run."""
    from matplotlib.lines import Line2D
    marked = any(markers_of(r.config) for r in runs)
    fig, ax = plt.subplots(figsize=(7, 4.2 + 0.12 * len(runs) + (1.0 if marked else 0)), layout="constrained")
    n = len(runs)
    for i, run in enumerate(runs):
        c = color(i, n)
        ax.plot([r["step"] for r in run.train], [num(r.get("loss")) for r in run.train], lw=0.8, alpha=0.7, color=c,
                **run_marker(i, n, len(run.train)))
        if run.val:
            ax.plot([r["step"] for r in run.val], [num(r["val_loss"]) for r in run.val], color=c,
                    marker=RUN_MARKERS[i % len(RUN_MARKERS)] if n > 1 else "o", lw=1.5, ls="--",
                    # several runs: hollow, the earlier runs' larger, so that a point under another shows
                    **({"mfc": "none", "ms": 3 + 2 * (n - 1 - i) / max(1, n - 1) * 2} if n > 1 else {"ms": 3}))
    draw_markers(ax, runs, "max", with_text=True)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("loss" + (f" - {title}" if title else ""), fontsize=9)
    ax.grid(alpha=0.3)
    notes = [Line2D([], [], color="grey", lw=0.8, label="train (thin)"),
             Line2D([], [], color="grey", lw=1.5, ls="--", marker="o", ms=3, mfc="none" if n > 1 else None,
                    label="val (dashed, every point marked)")]
    if marked:
        notes.append(Line2D([], [], color="grey", lw=0.8, ls="-.", label="flags changed on resume / fork"))
    add_legends(fig, legend_handles("max", runs, labels, [])[0], [], notes)
    fit_title(fig, ax.title)
    return fig


def no_stats_reason(run):
    """Why run has no logit_stats.jsonl record (None when it has some): its steps fewer than its
    --logit-stats-every (config.json), the statistics off, or no file or an empty one."""
    if run.stats:
        return None
    every = ((run.config or {}).get("train") or {}).get("logit_stats_every")
    last = max((r["step"] for r in run.train), default=0)
    if every == 0:
        return "--logit-stats-every 0"
    if isinstance(every, int) and every > last:
        return f"its {last} steps are fewer than --logit-stats-every {every}"
    if not os.path.isfile(os.path.join(run.path, "logit_stats.jsonl")):
        return "no logit_stats.jsonl"
    return "logit_stats.jsonl holds no record"


def per_layer_series(run, field, heads):
    """{layer: [(head or None, is_global, steps, values)]} from logit_stats.jsonl."""
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
            out[layer] = [(h, glob[h], steps, v[:, h]) for h in range(NH)]
        else:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN steps
                agg = np.nanmax(v, axis=1) if field == "max" else np.nanmean(v, axis=1)
            out[layer] = [(None, None, steps, agg)]
    return out


def layer_grid(plt, L, extra_height=0.0):
    ncol = min(L, 3)
    nrow = (L + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol + 1.6, 2.8 * nrow + 0.8 + extra_height), squeeze=False,
                             sharex=True, layout="constrained")
    for k in range(L, nrow * ncol):
        axes[k // ncol][k % ncol].axis("off")
    return fig, axes, ncol, nrow


def label_panel(ax, layer, ncol, nrow, L, ylabel):
    ax.set_title(f"layer {layer}", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if layer % ncol == 0:
        ax.set_ylabel(ylabel, fontsize=7)
    if layer // ncol == nrow - 1 or layer + ncol >= L:
        ax.set_xlabel("step", fontsize=7)


def plot_per_layer(plt, runs, labels, title, field, heads, ylabel, threshold=None):
    """One panel per layer of logit_stats.jsonl's `field` (max or entropy) of the runs that have records (at
    least one has)."""
    series = [per_layer_series(r, field, heads) for r in runs]
    L = max(len(s) for s in series)
    fig, axes, ncol, nrow = layer_grid(plt, L, 0.12 * len(runs))
    hg = head_globals_of(runs)
    for layer in range(L):
        ax = axes[layer // ncol][layer % ncol]
        for i, s in enumerate(series):
            for h, is_global, steps, v in s.get(layer, []):
                ls = "-" if is_global in (None, True) else "--"
                ax.plot(steps, v, lw=0.9 if heads == "max" else 0.7, ls=ls,
                        **line_style(heads, i, len(runs), h, len(hg), len(steps)))
        top = max((np.nanmax(v) for s in series for (_, _, _, v) in s.get(layer, []) if np.isfinite(v).any()),
                  default=0.0)
        if threshold is not None and top >= 0.5 * threshold:  # only where it does not squash the curves
            ax.axhline(threshold, color="k", lw=0.6, ls=":")
        draw_markers(ax, runs, heads, with_text=False)
        label_panel(ax, layer, ncol, nrow, L, ylabel)
    how = {"max": {"max": "max over heads", "all": "each head (global solid, local dashed)"},
           "entropy": {"max": "mean over heads", "all": "each head (global solid, local dashed)"}}[field][heads]
    suptitle = fig.suptitle(f"{ylabel}: {how}" + (f" - {title}" if title else ""), fontsize=9)
    run_h, head_h = legend_handles(heads, runs, labels, hg)
    add_legends(fig, [hd for hd, s in zip(run_h, series) if s], head_h)  # runs with records only
    fit_title(fig, suptitle)
    return fig


def near_far_arrays(run):
    """(steps, near_mass, near_max, far_max, is_global, nears) from the logit_stats records that carry the
    near/far fields; arrays (steps, L, NH), NaN where the file has null (far_max: the head had no far
    key); nears: each record's N (its `near`; for records without one, the run's setting at that step,
    else the window). None when no record has them (runs of older versions, CUDA runs without --near)."""
    recs = [s for s in run.stats if s.get("attn") and "near_mass" in s["attn"][0]]
    if not recs:
        return None
    L, NH = recs[0]["num_layers"], recs[0]["num_heads"]

    def arr(field):
        return np.array([[num(a.get(field)) for a in s["attn"]] for s in recs]).reshape(len(recs), L, NH)
    glob = [bool(a["global"]) for a in recs[0]["attn"][:NH]]

    def near(rec):
        n = rec.get("near")
        if n is None and run.config:
            n = setting_at(run.config, "near", rec["step"])
        return n if n is not None else rec.get("window")
    return ([s["step"] for s in recs], arr("near_mass"), arr("near_max"), arr("far_max"), glob,
            [near(s) for s in recs])


def near_segments(nears):
    """[(N, first index, end index)]: the runs of equal N in a run's records (a --near changed on resume
    starts a new one)."""
    out = []
    for i, n in enumerate(nears):
        if out and out[-1][0] == n:
            out[-1] = (n, out[-1][1], i + 1)
        else:
            out.append((n, i, i + 1))
    return out


def near_text(steps, segments):
    """A run's N for the near plots: "N=8", or with --near changed on resume
    "N=8 up to step 200, N=2 from step 201" (a middle segment "N=4 steps 201-300")."""
    if len(segments) == 1:
        return f"N={segments[0][0]}"
    pieces = []
    for k, (n, i0, i1) in enumerate(segments):
        if k == 0:
            pieces.append(f"N={n} up to step {steps[i1 - 1]}")
        elif k == len(segments) - 1:
            pieces.append(f"N={n} from step {steps[i0]}")
        else:
            pieces.append(f"N={n} steps {steps[i0]}-{steps[i1 - 1]}")
    return ", ".join(pieces)


def plot_near_far(plt, runs, labels, title, heads):
    """[("near_mass", fig), ("near_far_logits", fig)] (module docstring); a note on stderr for runs whose
    records lack the fields (runs without records have build_figures' note), and no figures when no run has
    them."""
    from matplotlib.lines import Line2D
    data = [near_far_arrays(r) for r in runs]
    missing = [lab for lab, d, r in zip(labels, data, runs) if d is None and r.stats]
    if all(d is None for d in data):
        print("note: no near/far statistics in logit_stats.jsonl (older run or CUDA run without --near); "
              "near_mass and near_far_logits plots skipped", file=sys.stderr)
        return []
    if missing:
        print(f"note: no near/far statistics for {', '.join(missing)}; left out of the near/far plots", file=sys.stderr)
    L = max(d[1].shape[1] for d in data if d is not None)
    segments = [near_segments(d[5]) if d is not None else None for d in data]
    ntexts = [near_text(d[0], seg) if d is not None else None for d, seg in zip(data, segments)]
    nvals = sorted({t for t in ntexts if t is not None})
    hg = head_globals_of([r for r, d in zip(runs, data) if d is not None])
    figures = []
    for name, ylabel in [("near_mass", "attention mass on near keys"), ("near_far_logits", "max logit: near / far")]:
        fig, axes, ncol, nrow = layer_grid(plt, L, 0.12 * len(runs))
        for layer in range(L):
            ax = axes[layer // ncol][layer % ncol]
            for i, d in enumerate(data):
                if d is None or layer >= d[1].shape[1]:
                    continue
                lw = 0.9 if heads == "max" else 0.7
                nh = len(d[4])
                glob = d[4]
                for _, i0, i1 in segments[i]:  # one curve per N: none joins points split at two distances
                    steps = d[0][i0:i1]
                    mass, nmax, fmax = (a[i0:i1] for a in d[1:4])

                    def st(h):
                        return line_style(heads, i, len(runs), h, len(hg), len(steps))
                    with np.errstate(all="ignore"), warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices (no far key)
                        if name == "near_mass":
                            g = [h for h in range(nh) if glob[h]]
                            loc = [h for h in range(nh) if not glob[h]]
                            if heads == "all":
                                for h in range(nh):
                                    ax.plot(steps, mass[:, layer, h], lw=lw, ls="-" if glob[h] else "--", **st(h))
                            else:
                                if g:
                                    ax.plot(steps, np.nanmean(mass[:, layer, g], axis=1), lw=lw, ls="-", **st(None))
                                if loc:
                                    ax.plot(steps, np.nanmean(mass[:, layer, loc], axis=1), lw=lw, ls="--",
                                            **st(None))
                        else:
                            if heads == "all":
                                for h in range(nh):
                                    ax.plot(steps, nmax[:, layer, h], lw=lw, ls="-", **st(h))
                                    ax.plot(steps, fmax[:, layer, h], lw=lw, ls=":", **st(h))
                            else:
                                ax.plot(steps, np.nanmax(nmax[:, layer, :], axis=1), lw=lw, ls="-", **st(None))
                                ax.plot(steps, np.nanmax(fmax[:, layer, :], axis=1), lw=lw, ls=":", **st(None))
            if name == "near_mass":
                ax.set_ylim(-0.02, 1.02)
            draw_markers(ax, runs, heads, with_text=False)
            label_panel(ax, layer, ncol, nrow, L, ylabel)
        how = {"near_mass": {"max": "mean over global heads (solid) / local heads (dashed)",
                             "all": "each head (global solid, local dashed)"},
               "near_far_logits": {"max": "max over heads, near keys (solid) / far keys (dotted)",
                                   "all": "each head, near keys (solid) / far keys (dotted)"}}[name][heads]
        near_txt = f"near: i-j < N, {nvals[0]}" if len(nvals) == 1 else "near: i-j < N, N varies (in the legend)"
        suptitle = fig.suptitle(f"{ylabel}: {how}; {near_txt}" + (f" - {title}" if title else ""), fontsize=8)
        run_h, head_h = legend_handles(heads, runs, labels, hg)
        for hd, text in zip(run_h, ntexts):
            if len(nvals) > 1 and text is not None:
                hd.set_label(f"{hd.get_label()} ({text})")
        run_h = [hd for hd, d in zip(run_h, data) if d is not None]
        if name == "near_far_logits" and heads == "all":  # near/far by line style, heads keep theirs
            head_h = [Line2D([], [], color=hd.get_color(), label=hd.get_label()) for hd in head_h]
        add_legends(fig, run_h, head_h)
        fit_title(fig, suptitle)
        figures.append((name, fig))
    return figures


def plot_by_ratio(plt, runs, rows):
    """Peak max-logit and final val loss vs T/C, one line per attention variant (the run's label
    without T, C and seed)."""
    parts = [{k: text for k, text, _ in label_parts(r.label_config())} for r in runs]
    keys = []
    for p in parts:
        keys += [k for k in p if k not in keys and k not in ("seq_len", "channels")]
    shown = [k for k in keys if k == "kind" or len({p.get(k, "") for p in parts}) > 1]
    groups = {}
    for run, row, p in zip(runs, rows, parts):
        m, t = run.model(), (run.config or {}).get("train", {})
        if "channels" not in m or "seq_len" not in t:
            raise PlotError(f"{run.path}/config.json is missing; --by-ratio needs T and C of every run")
        key = ", ".join(p[k] for k in shown if p.get(k))
        groups.setdefault(key, []).append((t["seq_len"] / m["channels"], row))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6 + 0.12 * len(groups)), layout="constrained")
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
    add_legends(fig, axes[0].get_legend_handles_labels()[0], [])
    return fig


def build_figures(runs, labels, title, heads="max", threshold=10.0, rows=None):
    """[(name, matplotlib figure)] of the runs: loss, logits, entropy, near_mass and near_far_logits
    (those with data), and ratio when rows (summaries) are given. The caller saves and closes them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figures = [("loss", plot_loss(plt, runs, labels, title))]
    bare = [f"{lab} ({why})" for lab, why in zip(labels, map(no_stats_reason, runs)) if why]
    if len(bare) == len(runs):
        print(f"note: no logit statistics for {', '.join(bare)}; logits, entropy and near/far plots skipped",
              file=sys.stderr)
    else:
        if bare:
            print(f"note: no logit statistics for {', '.join(bare)}; left out of the logits, entropy and near/far "
                  "plots", file=sys.stderr)
        for field, ylabel, name, thr in [("max", "max attention logit", "logits", threshold),
                                         ("entropy", "attention entropy (nats)", "entropy", None)]:
            figures.append((name, plot_per_layer(plt, runs, labels, title, field, heads, ylabel, threshold=thr)))
        figures += plot_near_far(plt, runs, labels, title, heads)
    if rows is not None:
        figures.append(("ratio", plot_by_ratio(plt, runs, rows)))
    return figures


def main(argv=None):
    p = argparse.ArgumentParser(description="Plot loss, attention max-logit and entropy of train_gpt2_ls runs; "
                                "write a summary table.")
    p.add_argument("dirs", nargs="+", metavar="OUT_DIR", help="output directories of train_gpt2_ls (-o)")
    p.add_argument("--out", metavar="PREFIX",
                   help="output prefix, e.g. out/plots/cmp (default: OUT_DIR/plot of the first OUT_DIR)")
    p.add_argument("--heads", choices=["max", "all"], default="max",
                   help="max: per layer the max over heads (logits) / mean over heads (entropy); all: every head, "
                   "one colour per head and one marker shape per run")
    p.add_argument("--threshold", type=float, default=10.0, help="report the first step whose max-logit exceeds this")
    p.add_argument("--labels", help="comma-separated legend labels, one per OUT_DIR, each its own and not "
                   "contradicting its run's attention or stabilizers (no/without/w/o X or Y, X 0, X off, X none "
                   "name an absence) (default: from the configs; a note names those)")
    p.add_argument("--by-ratio", action="store_true",
                   help="also PREFIX_ratio.{png,svg}: peak max-logit and final val loss vs T/C per attention variant")
    add_formats_argument(p, "png,svg")
    p.add_argument("--no-figures", action="store_true",
                   help="write the summary table (PREFIX_summary.md) alone: no figures, no matplotlib needed")
    args = p.parse_args(argv)
    try:
        formats = [] if args.no_figures else parse_formats(args.formats)
        runs = [Run(d) for d in run_dirs(args.dirs)]
        prefix = args.out if args.out else os.path.join(runs[0].path, "plot")
        labels, title = run_labels(runs)
        names = [os.path.basename(os.path.normpath(r.path)) for r in runs]
        notes = []
        if args.labels:
            derived, labels = labels, args.labels.split(",")
            check_labels(labels, runs)
            notes.append(labels_note(labels, derived, names))
        rows = [summarize(r, args.threshold) for r in runs]
        configs = [r.label_config() for r in runs]
        notes += [r["source_note"] for r in rows if r["source_note"]]
        notes += [n for n in (data_note(configs, names), val_change_note(configs, names), settings_note(configs)) if n]
        for note in notes:
            print(note, file=sys.stderr)
        table = summary_table(runs, labels, rows, args.threshold, notes)
        with written_to(prefix + "_summary.md"):
            d = os.path.dirname(prefix)
            if d:
                os.makedirs(d, exist_ok=True)
            with open(prefix + "_summary.md", "w", encoding="utf-8") as f:
                f.write((f"Runs: {title}\n\n" if title else "") + table)
        print(table, end="")
        written = [prefix + "_summary.md"]
        if not args.no_figures:
            import matplotlib.pyplot as plt
            for name, fig in build_figures(runs, labels, title, args.heads, args.threshold,
                                           rows if args.by_ratio else None):
                written += save(fig, prefix, name, formats)
                plt.close(fig)
        print(f"wrote {len(written)} files: " + ", ".join(written), file=sys.stderr)
    except (PlotError, FormatsError, OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
