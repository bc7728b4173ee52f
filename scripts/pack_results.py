#!/usr/bin/env python3
"""Packs the logs of a GPU window's runs into a folder that comes back whole, and says how fast they ran.

    python3 scripts/pack_results.py --results DIR --runs NAME=RUN_DIR [NAME=RUN_DIR ...]
                                    [--events FILE] [--logs DIR]
                                    [--limit-mib 16] [--max-files 8] [--table FILE]

The device tool brings back at most 8 files of 16 MiB each (/work/.library/device/README.md), so
DIR receives, per run, one NAME.tar.gz with its metrics.jsonl, logit_stats.jsonl, config.json,
config.toml, console.log, the launcher's log RUN_DIR.log and, where the experiment script kept them,
RUN_DIR.args (the run's settings) and RUN_DIR.build (the trainer that trained it: its sources' digest,
commit, binary sha256 and path; scripts/exp_run_settings.sh) as NAME.log, NAME.args, NAME.build (never checkpoints); a logs.tar.gz with
every file under --logs (build and check logs, plots).
When a run's archive exceeds --limit-mib, its logit_stats.jsonl is thinned to every k-th record
(k = 2, 4, 8, ...; the first and last records kept) until it fits, then metrics.jsonl likewise (its
records with a validation loss, a spike, a skipped or non-finite step always kept); each thinning is
named in the window table. More files than --max-files is an error (exit 1), as is a run without
metrics.jsonl.

The window table (markdown, printed and written to --table, default DIR/window.md), per run: steps,
tokens, the training wall time of this window's steps (from the start of its first step, its record's
time less its ms, to its last record; this window's steps are those recorded after the run's start
event, so a run resumed in a later window counts neither its earlier steps nor the time between the
windows, and a note names the steps covered; without --events every record), steps per minute over
it, the median ms per step
of the steps it ran alone and of those it shared the GPU with other runs (from --events: lines
"EPOCH_SECONDS<TAB>start NAME" / "stop NAME" / "end NAME ..." that scripts/exp_pg19.sh writes; a step
counts as shared when another run was between its start and its end at the step's "time"; steps within
2 s of a start or an end count in neither; a median needs 5 steps, and a run that had fewer in a phase
gets '-' and a note with its counts), the peak
max logit and its step, the first step over 50 / 100 / 200, loss spikes, non-finite steps, the last
validation loss and the global heads' mean near mass at the last statistics record. Below it, when
every run has steps both alone and shared: the throughput of running them together relative to one
after another, sum over runs of (median alone ms / median shared ms); above 1, at once is faster.
"""
import argparse
import io
import json
import math
import os
import statistics
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_run import PlotError, by_step, read_jsonl  # noqa: E402

RUN_FILES = ["metrics.jsonl", "logit_stats.jsonl", "config.json", "config.toml", "console.log"]
SETTLE_S = 2.0  # steps this close after a run starts or stops are in neither phase (start-up, hand-over)


class PackError(Exception):
    pass


def part_path(path):
    """The temporary name a file is written under before it is renamed into place: .NAME.part beside it."""
    return os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".part")


def write_whole(path, data):
    """path holds data, or its earlier content whole: written as .NAME.part and renamed over it, so a kill
    mid-write (a device command cut off at its limit) never leaves a cut file under the name."""
    with open(part_path(path), "wb") as f:
        f.write(data)
    os.replace(part_path(path), path)


def read_events(path):
    """[(time, verb, name)] from the script's events file."""
    out = []
    if not path:
        return out
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 2 or not parts[1].strip():
                raise PackError(f"{path}:{n}: expected 'EPOCH<TAB>start|stop|end NAME', got {line.strip()!r}")
            words = parts[1].split()
            if len(words) < 2:
                raise PackError(f"{path}:{n}: expected 'EPOCH<TAB>start|stop|end NAME', got {line.strip()!r}")
            out.append((float(parts[0]), words[0], words[1]))
    return out


def intervals(events):
    """{name: (start, end)}: a run's process lifetime (end: its 'end' event, else +inf)."""
    spans = {}
    for t, verb, name in events:
        if verb == "start":
            spans[name] = [t, math.inf]
        elif verb == "end" and name in spans:
            spans[name][1] = t
    return {k: tuple(v) for k, v in spans.items()}


MIN_PHASE_STEPS = 5  # a phase's median needs this many steps


def phase_ms(name, train, spans, events):
    """(median ms per step of the run's steps alone, of those shared with every other run of this session,
    {phase: (steps counted, steps within SETTLE_S of a start or an end)}); a median is None with fewer than
    MIN_PHASE_STEPS steps counted. Only the run's steps of this session count (a resumed run's earlier
    records are before its start event); steps with some but not all other runs active (the middle of a
    stagger of three or more) are neither."""
    if name not in spans:
        return None, None, {}
    own_start, own_end = spans[name]
    marks = [t for t, verb, _ in events if verb in ("start", "end")]
    ms_of = {"alone": [], "shared": []}
    settled = {"alone": 0, "shared": 0}
    for r in train:
        t, ms = r.get("time"), r.get("ms")
        if t is None or ms is None or not own_start <= t - ms / 1000.0 <= own_end:
            continue
        others = [o for o, (a, b) in spans.items() if o != name and a <= t <= b]
        phase = "alone" if not others else "shared" if len(others) == len(spans) - 1 else None
        if phase is None:
            continue
        if any(abs(t - m) < SETTLE_S or abs(t - ms / 1000.0 - m) < SETTLE_S for m in marks):
            settled[phase] += 1
        else:
            ms_of[phase].append(ms)
    med = lambda xs: statistics.median(xs) if len(xs) >= MIN_PHASE_STEPS else None  # noqa: E731
    return med(ms_of["alone"]), med(ms_of["shared"]), {k: (len(ms_of[k]), settled[k]) for k in ms_of}


def window_steps(name, train, spans, have_events):
    """The run's step records of this window: those made after its start event (a run resumed in a later
    window keeps its earlier windows' records, made before); none for a run without a start event in the
    events (not started in this window: finished already); without events, every record (a run trained in
    one process). Records without a time are left out."""
    timed = [r for r in train if r.get("time") is not None]
    if not have_events:
        return timed
    if name not in spans:
        return []
    return [r for r in timed if r["time"] >= spans[name][0]]


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def run_row(name, path, spans, events):
    mpath = os.path.join(path, "metrics.jsonl")
    if not os.path.isfile(mpath):
        raise PackError(f"{mpath} does not exist: run {name} left no metrics (see {path}.log)")
    metrics = by_step(read_jsonl(mpath))
    train = [r for r in metrics if "loss" in r]
    val = [r for r in metrics if r.get("val_loss") is not None]
    cfg = {}
    if os.path.isfile(os.path.join(path, "config.json")):
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    tokens_per_step = cfg.get("derived", {}).get("tokens_per_step") or cfg.get("train", {}).get("total_batch_size")
    logits = [(r.get("max_attn_logit"), r["step"]) for r in train]
    finite = [(x, s) for x, s in logits if x is not None and math.isfinite(x)]
    peak = max(finite) if finite else (None, None)
    first = {th: next((s for x, s in finite if x > th), None) for th in (50, 100, 200)}
    window = window_steps(name, train, spans, bool(events))
    wall = None
    if window:
        wall = window[-1]["time"] - (window[0]["time"] - window[0].get("ms", 0.0) / 1000.0)
    alone, shared, phase_steps = phase_ms(name, train, spans, events)
    near = None
    spath = os.path.join(path, "logit_stats.jsonl")
    if os.path.isfile(spath):
        stats = by_step(read_jsonl(spath))
        if stats:
            g = [a["near_mass"] for a in stats[-1].get("attn", []) if a.get("global") and a.get("near_mass") is not None]
            near = sum(g) / len(g) if g else None
    nonfinite = sum(1 for r in train if r.get("loss") is None or r.get("skipped_nonfinite"))
    return {
        "run": name, "steps": train[-1]["step"] if train else 0,
        "tokens": (train[-1]["step"] * tokens_per_step) if train and isinstance(tokens_per_step, int) and tokens_per_step > 0 else None,
        "wall_s": wall, "steps_per_min": len(window) / wall * 60 if wall else None,
        "window_first": window[0]["step"] if window else None,
        "ms_alone": alone, "ms_shared": shared, "phase_steps": phase_steps,
        "peak": peak[0], "peak_step": peak[1], "first": first,
        "spikes": sum(1 for r in train if r.get("spike")), "nonfinite": nonfinite,
        "val": val[-1]["val_loss"] if val else None, "val_step": val[-1]["step"] if val else None,
        "train_loss": train[-1]["loss"] if train else None, "near": near,
    }


def table(rows, notes):
    head = ["run", "steps", "tokens", "train wall s", "steps/min", "ms/step alone", "ms/step shared",
            "peak max-logit (step)", "first > 50", "first > 100", "first > 200", "spikes", "non-finite",
            "last val loss (step)", "val ppl", "final train loss", "near mass (global heads)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ppl = math.exp(r["val"]) if r["val"] is not None and r["val"] < 50 else None
        cells = [r["run"], str(r["steps"]), fmt(r["tokens"], ","), fmt(r["wall_s"], ".1f"),
                 fmt(r["steps_per_min"], ".0f"), fmt(r["ms_alone"], ".2f"), fmt(r["ms_shared"], ".2f"),
                 f"{fmt(r['peak'], '.2f')} ({fmt(r['peak_step'], 'd')})",
                 *[fmt(r["first"][t], "d") for t in (50, 100, 200)], str(r["spikes"]), str(r["nonfinite"]),
                 f"{fmt(r['val'], '.4f')} ({fmt(r['val_step'], 'd')})", fmt(ppl, ".2f"),
                 fmt(r["train_loss"], ".4f"), fmt(r["near"], ".3f")]
        lines.append("| " + " | ".join(cells) + " |")
    both = [r for r in rows if r["ms_alone"] and r["ms_shared"]]
    if len(rows) > 1 and len(both) == len(rows):
        gain = sum(r["ms_alone"] / r["ms_shared"] for r in rows)
        lines += ["", f"Runs at once vs one after another: throughput x{gain:.2f} (sum over runs of median ms/step "
                  f"alone / shared; > 1: at once gives more steps per minute)."]
    elif len(rows) > 1:
        lines += ["", "Runs at once vs one after another: not measured in this window (a run lacks steps alone "
                  "or shared; exp_pg19.sh --parallel 1 with --stagger S > 0 measures it)."]
    resumed = [f"- {r['run']}: resumed in this window at step {r['window_first'] - 1}: train wall s and steps/min "
               f"cover its steps {r['window_first']}-{r['steps']}" for r in rows
               if r["window_first"] is not None and r["window_first"] > 1]
    resumed += [f"- {r['run']}: trained no step in this window (train wall s and steps/min: -)" for r in rows
                if r["window_first"] is None and r["steps"]]
    for r in rows:  # a '-' of a phase the run had steps in: too few for a median, not "never in it"
        for phase, ms in (("alone", r["ms_alone"]), ("shared", r["ms_shared"])):
            counted, settled = r["phase_steps"].get(phase, (0, 0))
            if ms is None and counted + settled > 0:
                resumed.append(f"- {r['run']}: ms/step {phase} -: of its {counted + settled} steps {phase}, {settled} "
                               f"were within {SETTLE_S:g} s of a run's start or end (counted in neither phase); a "
                               f"median needs {MIN_PHASE_STEPS}")
    notes = resumed + notes
    lines += [""] + notes if notes else []
    return "\n".join(lines) + "\n"


def thin(text, k, keep):
    """Every k-th record of a JSON Lines text (the first and last, and those `keep` accepts, always)."""
    lines = [ln for ln in text.split("\n") if ln.strip()]
    out = []
    for i, ln in enumerate(lines):
        if i % k == 0 or i == len(lines) - 1:
            out.append(ln)
            continue
        try:
            if keep(json.loads(ln)):
                out.append(ln)
        except json.JSONDecodeError:
            pass  # a partial last line: dropped
    return "\n".join(out) + "\n"


def keep_metric(r):
    return (r.get("val_loss") is not None or r.get("spike") or r.get("skipped_spike") or r.get("skipped_nonfinite")
            or r.get("loss") is None or r.get("logit_alarm"))


def tar_run(dest, name, path, limit, notes):
    texts = {}
    for f in RUN_FILES:
        p = os.path.join(path, f)
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as fh:
                texts[f] = fh.read()
    for ext in (".log", ".args", ".build"):  # the launcher's log, the run's settings and trainer (exp_run_settings.sh)
        if os.path.isfile(path + ext):
            with open(path + ext, encoding="utf-8", errors="replace") as fh:
                texts[name + ext] = fh.read()
    original = dict(texts)
    k_stats = k_metrics = 1
    while True:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
            for f, t in texts.items():
                data = t.encode("utf-8")
                info = tarfile.TarInfo(f"{name}/{f}")
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))
        if buf.tell() <= limit:
            break
        if "logit_stats.jsonl" in texts and k_stats < 4096:
            k_stats *= 2
            texts["logit_stats.jsonl"] = thin(original["logit_stats.jsonl"], k_stats, lambda r: False)
        elif "metrics.jsonl" in texts and k_metrics < 4096:
            k_metrics *= 2
            texts["metrics.jsonl"] = thin(original["metrics.jsonl"], k_metrics, keep_metric)
        else:
            raise PackError(f"{name}: its logs do not fit in {limit} bytes even thinned; pack fewer files")
    write_whole(os.path.join(dest, f"{name}.tar.gz"), buf.getvalue())
    if k_stats > 1:
        notes.append(f"- {name}.tar.gz: logit_stats.jsonl thinned to every {k_stats}th record to fit {limit >> 20} MiB")
    if k_metrics > 1:
        notes.append(f"- {name}.tar.gz: metrics.jsonl thinned to every {k_metrics}th record (validation, spike and "
                     f"skipped steps kept) to fit {limit >> 20} MiB")


def main(argv=None):
    p = argparse.ArgumentParser(description="Pack a GPU window's run logs into one folder and tabulate the runs.")
    p.add_argument("--results", required=True, help="the folder that comes back (created)")
    p.add_argument("--runs", nargs="+", required=True, metavar="NAME=RUN_DIR")
    p.add_argument("--events", help="the script's events file (EPOCH<TAB>start|stop|end NAME)")
    p.add_argument("--logs", help="a folder packed whole into logs.tar.gz")
    p.add_argument("--limit-mib", type=float, default=16.0)
    p.add_argument("--max-files", type=int, default=8)
    p.add_argument("--table", help="where the window table goes (default RESULTS/window.md)")
    a = p.parse_args(argv)
    try:
        runs = []
        for item in a.runs:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise PackError(f"--runs {item!r}: expected NAME=RUN_DIR")
            runs.append((name, path))
        os.makedirs(a.results, exist_ok=True)
        events = read_events(a.events)
        spans = intervals(events)
        limit = int(a.limit_mib * (1 << 20))
        rows = [run_row(n, d, spans, events) for n, d in runs]
        notes = []
        for n, d in runs:
            tar_run(a.results, n, d, limit, notes)
        if a.logs and os.path.isdir(a.logs):
            path = os.path.join(a.results, "logs.tar.gz")
            with tarfile.open(part_path(path), "w:gz") as tar:
                tar.add(a.logs, arcname="logs")
            os.replace(part_path(path), path)
            if os.path.getsize(path) > limit:
                raise PackError(f"{path} is {os.path.getsize(path)} bytes, over {limit}; put less under {a.logs}")
        text = table(rows, notes)
        table_path = a.table or os.path.join(a.results, "window.md")
        write_whole(table_path, text.encode("utf-8"))
        files = sorted(os.listdir(a.results))
        if len(files) > a.max_files:
            raise PackError(f"{a.results} holds {len(files)} files ({', '.join(files)}), more than --max-files "
                            f"{a.max_files} come back; run fewer variants per window")
        big = [f for f in files if os.path.getsize(os.path.join(a.results, f)) > limit]
        if big:
            raise PackError(f"{', '.join(big)} in {a.results} exceed {limit} bytes")
        sys.stdout.write(text)
    except (PackError, PlotError, OSError, json.JSONDecodeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
