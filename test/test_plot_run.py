"""Tests of scripts/plot_run.py's labels and figures (docs/experiments.md): the legend label is a pure
function of config.json's content (plain GPT-2 MHSA, LS with G/P, each stabilizer, training flags
changed on resume, a fork); end to end on two tiny real training runs: the legends lie outside the
axes, every head of a run and every run are told apart with --heads all, runs whose curves coincide by
their marker shapes, titles lie whole inside the figure (a 1-layer run, a long common title), the history
markers are drawn, and --out defaults to the first run's directory; on hand-written runs: the near/far plots
take N per record (a --near changed on resume breaks the curves and is named), runs that differ in other
settings (tokens per step, weight decay, schedule) are labelled so, with one note and a tokens column, a
fork's summary (and exp_summary's hours) counts its source's steps up to the fork, or marks its cells and says
why when the source cannot be read, a logit_stats.jsonl of another model than config.json's is refused,
exp_summary.py reads T/C and the variant of a directory not named r<ratio>_<variant>_s<seed> from its config,
and a name of exp_text_ratio.sh's that disagrees with it (a numbered soft-cap or QK-Clip too; an LS or all-local
run whose window reaches T agrees) with one note naming the parts that differ, and a bad --formats is refused
before anything is written; both scripts skip the .args/.log/.build files of a glob runs/* and refuse other
files and a run given twice; plot_run.py says which file it cannot write and offers --out, and its --labels keep
a note of the labels the configs make and refuse duplicates and labels that contradict their run.

The trainer is $TRAINER, else $TRAIN_GPT2_LS, else the repository's ./train_gpt2_ls (`make` builds it).
"""
import errno
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TRAINER", os.environ.get("TRAIN_GPT2_LS", REPO / "train_gpt2_ls")))
PLOT = REPO / "scripts" / "plot_run.py"
sys.path.insert(0, str(PLOT.parent))
import plot_run  # noqa: E402

# config.json of a plain GPT-2 small run (docs/formats.md), the fields the labels read
GPT2_MODEL = {"max_seq_len": 1024, "vocab_size": 50257, "padded_vocab_size": 50304, "num_layers": 12, "num_heads": 12,
              "channels": 768, "global_heads": 12, "window": 0, "qk_norm": False, "attn_softcap": 0.0,
              "tied_embeddings": True}
GPT2_TRAIN = {"batch_size": 4, "seq_len": 1024, "learning_rate": 0.0006000000284984708, "grad_clip": 1.0,
              "z_loss": 0.0, "seed": 1337, "skip_spikes": 0.0, "qk_clip": 0.0, "logit_alarm": 0.0,
              "logit_alarm_above": 0.0, "max_steps": 1000}


def config(model=None, train=None, **extra):
    c = {"model": dict(GPT2_MODEL, **(model or {})), "train": dict(GPT2_TRAIN, **(train or {}))}
    c.update(extra)
    return c


def label(cfg):
    """The label of a run shown alone."""
    return plot_run.make_labels([plot_run.label_parts(cfg)], ["run"])[0][0]


def test_label_plain_gpt2_and_ls():
    assert label(config()) == "MHSA, T=1024, C=768, L=12"
    assert plot_run.make_labels([plot_run.label_parts(config())], ["run"])[1] == "lr=6e-4, seed 1337"
    assert label(config(model={"global_heads": 2, "window": 64})) == "LS G=2/12 P=64, T=1024, C=768, L=12"
    assert label(config(model={"global_heads": 0, "window": 32})).startswith("all-local P=32,")


def test_label_a_window_not_below_t_is_mhsa():
    """--window >= -t: every local head sees the whole context and computes as a global one; the trainer says
    "MHSA", and so does the label (it said "LS G=1/12 P=1024")."""
    assert label(config(model={"global_heads": 1, "window": 1024})).startswith("MHSA (P=1024 >= T), T=1024,")
    assert label(config(model={"global_heads": 0, "window": 2048})).startswith("MHSA (P=2048 >= T), ")
    assert label(config(model={"global_heads": 1, "window": 1023})).startswith("LS G=1/12 P=1023, ")
    # a run whose T grew above P on resume has local heads from then on
    hist = [{"step": 10, "flag": "--seq-len", "old": 512, "new": 2048}]
    assert label(config(model={"global_heads": 1, "window": 1024}, train={"seq_len": 2048}, history=hist)).startswith(
        "LS G=1/12 P=1024, ")


@pytest.mark.parametrize("model,train,piece", [
    ({"qk_norm": True}, {}, "QK-norm"),
    ({"attn_softcap": 50.0}, {}, "soft-cap 50"),
    ({"bias": False}, {}, "no bias"),
    ({"gelu": "erf"}, {}, "erf GELU"),
    ({}, {"z_loss": 9.999999747378752e-05}, "z-loss 1e-4"),
    ({}, {"qk_clip": 100.0}, "QK-Clip 100"),
    ({}, {"logit_alarm": 6.0}, "logit alarm z>6"),
    ({}, {"logit_alarm_above": 30.0}, "logit alarm >30"),
    ({}, {"skip_spikes": 5.0}, "skip spikes z>5"),
    ({}, {"grad_clip": 0.0}, "grad-clip off"),
    ({}, {"grad_clip": 0.5}, "grad-clip 0.5"),
])
def test_label_names_each_stabilizer(model, train, piece):
    lab = label(config(model=model, train=train))
    assert lab.startswith("MHSA, ") and piece in lab.split(", "), lab
    assert piece not in label(config())  # off: not named
    # two runs that differ only in the stabilizer: the labels say which has it, the title the rest
    labels, title = plot_run.make_labels([plot_run.label_parts(config()), plot_run.label_parts(
        config(model=model, train=train))], ["a", "b"])
    assert piece in labels[1] and piece not in labels[0] and piece not in title


def test_label_gpt2_biases_and_tanh_gelu_are_not_named():
    # written by the trainer (bias true, gelu "tanh") or absent (config.json from before those fields)
    assert label(config(model={"bias": True, "gelu": "tanh"})) == label(config()) == "MHSA, T=1024, C=768, L=12"
    assert label(config(model={"bias": False, "gelu": "erf", "global_heads": 1, "window": 50})) == \
        "LS G=1/12 P=50, no bias, erf GELU, T=1024, C=768, L=12"


def test_label_all_stabilizers_of_one_run():
    cfg = config(model={"qk_norm": True, "attn_softcap": 30.0},
                 train={"z_loss": 1e-4, "qk_clip": 100.0, "logit_alarm": 6.0})
    assert label(cfg) == ("MHSA, QK-norm, soft-cap 30, z-loss 1e-4, QK-Clip 100, logit alarm z>6, "
                          "T=1024, C=768, L=12")


def test_label_notes_settings_changed_on_resume():
    hist = [{"step": 400, "flag": "--z-loss", "old": 0.0, "new": 1e-4},
            {"step": 400, "flag": "--learning-rate", "old": 0.0003, "new": 0.0001},
            {"step": 800, "flag": "--qk-clip", "old": 100.0, "new": 0.0},
            {"step": 900, "flag": "-x", "old": 1000, "new": 2000},
            {"step": 900, "flag": "--val-every", "old": 20, "new": 50}]
    # "train" as written at the last start (the new values): the run's starting values come from history
    cfg = config(train={"z_loss": 1e-4, "learning_rate": 0.0001, "qk_clip": 0.0, "max_steps": 2000, "val_every": 50},
                 history=hist)
    pieces = label(cfg).split(", ")
    assert "z-loss 1e-4 from step 400" in pieces
    assert "QK-Clip 100 (off from step 800)" in pieces
    assert "lr=3e-4 (1e-4 from step 400)" in pieces  # a changed setting stays in the label, not the title
    assert "max-steps 1000->2000 at step 900" in pieces
    assert not any("val" in p for p in pieces)  # bookkeeping flags: a marker, no label piece
    # two runs sharing everything but one's history: only that one is noted
    plain, changed = config(train={"learning_rate": 3e-4}), config(train={"learning_rate": 3e-4}, history=hist[1:2])
    labels, _ = plot_run.make_labels([plot_run.label_parts(plain), plot_run.label_parts(changed)], ["a", "b"])
    assert "lr=3e-4 (1e-4 from step 400)" in labels[1] and "from step" not in labels[0], labels
    assert plot_run.markers_of(cfg) == [(400, "--z-loss 0->1e-4\n--learning-rate 3e-4->1e-4"),
                                        (800, "--qk-clip 100->0"), (900, "-x 1000->2000\n--val-every 20->50")]


def test_an_epoch_entry_is_labelled_as_the_epoch_not_a_max_steps_change():
    """config.json's history entry {"epoch": true} (always "flag": "--max-steps"; docs/formats.md) is no change of
    -x: -x stayed -1 (one epoch) and a -d changed at that step moved the epoch's step total. The label and the
    marker say so; they said "max-steps 4330->2165 at step 1126", a -x the user never gave."""
    # as the trainer writes them (test/test_epoch_steps.py): -d -1 (B x T = 128 tokens) -> 256 at step 1126
    hist = [{"step": 1126, "flag": "--total-batch-size", "old": -1, "new": 256},
            {"step": 1126, "flag": "--max-steps", "old": 4330, "new": 2165, "epoch": True}]
    cfg = config(train={"max_steps": -1, "total_batch_size": 256}, history=hist)
    pieces = label(cfg).split(", ")
    assert "one epoch: 4330->2165 steps at step 1126" in pieces, pieces
    assert "total-batch-size -1->256 at step 1126" in pieces, pieces
    assert not any(p.startswith("max-steps") for p in pieces), pieces
    assert plot_run.markers_of(cfg) == [(1126, "--total-batch-size -1->256\none epoch: 4330->2165 steps")]
    # a real -x change next to it keeps its own piece
    cfg["history"] = hist + [{"step": 1500, "flag": "--max-steps", "old": -1, "new": 3000}]
    pieces = label(cfg).split(", ")
    assert "one epoch: 4330->2165 steps at step 1126" in pieces and "max-steps -1->3000 at step 1500" in pieces, pieces


def test_label_notes_a_fork():
    cfg = config(forked_from={"checkpoint": "out/run/model_00000400.bin", "step": 400})
    assert "forked from run at step 400" in label(cfg).split(", ")
    assert plot_run.markers_of(cfg) == [(400, "fork of run")]
    labels, _ = plot_run.make_labels([plot_run.label_parts(config()), plot_run.label_parts(cfg)], ["run", "branch"])
    assert "forked from run at step 400" in labels[1] and "fork" not in labels[0]


def test_flag_keys_match_the_trainer():
    """Every short flag of llmc/app/flags.h is in SHORT_FLAGS with its field, and the long names map to the
    fields by the rule of flag_key."""
    src = (REPO / "llmc" / "app" / "flags.h").read_text()
    rows = re.findall(r'SETTING\(\w+, [\w:<>]+, (\w+), .*?"(-\w),(--[\w-]+)"', src)
    assert len(rows) >= 15
    assert {short: field for field, short, _ in rows} == plot_run.SHORT_FLAGS
    for field, short, long in rows:
        assert plot_run.flag_key(long) == field and plot_run.flag_key(short) == field
        assert plot_run.flag_key(f"{short},{long}") == field and plot_run.flag_key(f"{short}/{long}") == field
    for field, long in re.findall(r'SETTING\(Both, [\w:<>]+, (\w+), .*?"(?:-\w,)?(--[\w-]+)"', src):
        assert plot_run.flag_key(long) == field


# ---------------------------------------------------------------------------------------------
# end to end

def sh(cmd):
    p = subprocess.run([str(c) for c in cmd], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stderr[-3000:]}\n{p.stdout[-2000:]}")
    return p


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two 12-step runs of a tiny 2-layer model on a small synthetic language: MHSA with QK-Clip, and LS
    (G = 1 of 4 heads, P = 4); a copy of the LS run whose config.json has a history entry and a fork."""
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls` (or set TRAINER)")
    d = tmp_path_factory.mktemp("plot")
    data = d / "data"
    sh([sys.executable, REPO / "data" / "prepare.py", "--dataset", "synthetic", "--out", data, "--workers", "1",
        "--syn-vocab", "16", "--syn-length", "20000", "--syn-doc-len", "1024"])
    common = ["-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin", "--layers", "2", "--channels", "16",
              "--heads", "4", "--max-seq-len", "32", "-b", "2", "-t", "32", "-x", "12", "-v", "4", "-m", "2",
              "-s", "0", "-l", "3e-2", "-u", "2", "--threads", "1", "--device", "cpu"]
    mhsa, ls = d / "mhsa_qkclip", d / "ls"
    sh([BIN, *common, "-o", mhsa, "--global-heads", "4", "--qk-clip", "100"])
    sh([BIN, *common, "-o", ls, "--global-heads", "1", "--window", "4"])
    hist = d / "ls_history"
    hist.mkdir()
    for name in ["metrics.jsonl", "logit_stats.jsonl"]:
        (hist / name).write_bytes((ls / name).read_bytes())
    cfg = json.loads((ls / "config.json").read_text())
    cfg["history"] = [{"step": 6, "flag": "--z-loss", "old": 0.0, "new": 1e-4}]
    cfg["forked_from"] = {"checkpoint": "out/base/model_00000004.bin", "step": 4}
    (hist / "config.json").write_text(json.dumps(cfg))
    return d, mhsa, ls, hist


def overlaps(a, b):
    """Whether two display-space bounding boxes share area (touching edges do not count)."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def check_legends_outside(fig):
    """Every legend lies outside every axes and wholly inside the figure (none of its text cut off)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.axison]
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends
    for leg in legends:
        box = leg.get_window_extent(renderer)
        for ax in axes:
            assert not overlaps(box, ax.get_window_extent(renderer)), (leg, ax.get_title())
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, \
            ("legend past the figure's edge", box, fig.bbox, [t.get_text() for t in leg.get_texts()])
    return legends


@pytest.mark.parametrize("heads", ["max", "all"])
def test_figures_have_legends_outside_and_distinct_lines(two_runs, heads):
    _, mhsa, ls, _ = two_runs
    runs = [plot_run.Run(str(mhsa)), plot_run.Run(str(ls))]
    labels, title = plot_run.run_labels(runs)
    assert labels[0].startswith("MHSA, QK-Clip 100") and labels[1].startswith("LS G=1/4 P=4"), labels
    figures = dict(plot_run.build_figures(runs, labels, title, heads=heads, threshold=10.0))
    assert sorted(figures) == ["entropy", "logits", "loss", "near_far_logits", "near_mass"]
    for name, fig in figures.items():
        legends = check_legends_outside(fig)
        texts = [t.get_text() for leg in legends for t in leg.get_texts()]
        assert all(lab in texts or any(t.startswith(lab) for t in texts) for lab in labels), (name, texts)
    for name in ["logits", "entropy", "near_mass"]:
        lines = [ln for ln in figures[name].axes[0].get_lines() if len(ln.get_xdata()) > 1]
        n = 2 * 4 if heads == "all" else (2 if name != "near_mass" else 3)  # near_mass max: MHSA global, LS both
        assert len(lines) == n, (name, len(lines))
        looks = {(str(ln.get_color()), ln.get_marker(), ln.get_linestyle()) for ln in lines}
        assert len(looks) == n, (name, looks)  # every head of every run drawn differently
        if heads == "all":
            for run_marker in {ln.get_marker() for ln in lines}:  # the heads of one run: one colour each
                assert len({str(ln.get_color()) for ln in lines if ln.get_marker() == run_marker}) == 4
    import matplotlib.pyplot as plt
    for fig in figures.values():
        plt.close(fig)


def test_history_markers_and_default_out(two_runs):
    d, _, _, hist = two_runs
    runs = [plot_run.Run(str(hist))]
    labels, title = plot_run.run_labels(runs)
    assert "z-loss 1e-4 from step 6" in labels[0] and "forked from base at step 4" in labels[0], labels
    figures = dict(plot_run.build_figures(runs, labels, title))
    ax = figures["loss"].axes[0]
    vertical = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if list(ln.get_xdata()) == [ln.get_xdata()[0]] * 2)
    assert vertical == [4, 6]
    top = [a for a in ax.child_axes if list(a.get_xticks()) == [4, 6]]  # the changes written above the axes
    assert len(top) == 1 and [t.get_text() for t in top[0].get_xticklabels()] == ["fork of base", "--z-loss 0->1e-4"]
    check_legends_outside(figures["loss"])
    import matplotlib.pyplot as plt
    for fig in figures.values():
        plt.close(fig)

    p = sh([sys.executable, PLOT, hist, "--heads", "all", "--formats", "png"])  # no --out: into the run's directory
    for name in ["loss", "logits", "entropy", "near_mass", "near_far_logits"]:
        assert (hist / f"plot_{name}.png").stat().st_size > 1000, name
    assert (hist / "plot_summary.md").exists() and "| ls_history |" in p.stdout
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("wrote ")]  # every file written, named
    written = said[0].split(": ", 1)[1].split(", ") if len(said) == 1 else said
    assert sorted(written) == sorted(str(f) for f in hist.glob("plot_*")), said


@pytest.mark.parametrize("heads", ["max", "all"])
@pytest.mark.parametrize("with_other_run", [False, True], ids=["alone", "with_mhsa"])
def test_a_long_history_label_is_wrapped_inside_the_figure(two_runs, tmp_path, heads, with_other_run):
    """A run with several flags changed on resume has a label longer than the figure is wide: the legend
    wraps it between its pieces, all of it inside the figure (with the figure no shorter), nothing lost."""
    _, mhsa, ls, _ = two_runs
    run = tmp_path / "ls_long_history"
    run.mkdir()
    for name in ["metrics.jsonl", "logit_stats.jsonl"]:
        (run / name).write_bytes((ls / name).read_bytes())
    cfg = json.loads((ls / "config.json").read_text())
    cfg["history"] = [{"step": 4, "flag": "--z-loss", "old": 0.0, "new": 1e-4},
                      {"step": 4, "flag": "--learning-rate", "old": 0.03, "new": 0.01},
                      {"step": 8, "flag": "--qk-clip", "old": 0.0, "new": 50.0},
                      {"step": 8, "flag": "-x", "old": 10, "new": 12},
                      {"step": 10, "flag": "--grad-clip", "old": 1.0, "new": 0.5}]
    (run / "config.json").write_text(json.dumps(cfg))
    runs = [plot_run.Run(str(run))] + ([plot_run.Run(str(mhsa))] if with_other_run else [])
    labels, title = plot_run.run_labels(runs)
    assert len(labels[0]) > 140, labels[0]  # longer than a line of the loss figure's legend
    import matplotlib.pyplot as plt
    for name, fig in plot_run.build_figures(runs, labels, title, heads=heads):
        legends = check_legends_outside(fig)
        texts = [t.get_text() for leg in legends for t in leg.get_texts()]
        for lab in labels:  # every label whole, wrapped or not (the near/far plots may add " (N=...)")
            assert any(t.replace(",\n", ", ").replace("\n", " ").startswith(lab) for t in texts), (name, lab, texts)
        plt.close(fig)


@pytest.mark.parametrize("extra,expect", [
    ({"history": {"step": 4}}, '"history" is not a list'),
    ({"history": [{"step": "4", "flag": "--z-loss", "old": 0, "new": 1}]}, '"history" entry 0'),
    ({"history": [{"step": 4, "old": 0, "new": 1}]}, '"history" entry 0'),
    ({"forked_from": {"checkpoint": "out/run/model_00000004.bin"}}, '"forked_from" is not'),
])
def test_malformed_history_or_fork_is_refused(tmp_path, extra, expect):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0, "max_attn_logit": 1.0}\n')
    (run / "config.json").write_text(json.dumps(config(**extra)))
    p = subprocess.run([sys.executable, str(PLOT), str(run), "--formats", "png"], capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    assert expect in p.stderr and "config.json" in p.stderr
    assert not list(run.glob("plot_*"))
    (run / "config.json").write_text("{")
    p = subprocess.run([sys.executable, str(PLOT), str(run), "--formats", "png"], capture_output=True, text=True)
    assert p.returncode == 1 and "config.json is not valid JSON" in p.stderr and p.stderr.count("\n") == 1


def titles_of(fig):
    """The figure's suptitle and its axes' titles, as Text artists."""
    texts = [fig._suptitle] if fig._suptitle is not None else []
    return texts + [ax.title for ax in fig.axes if ax.get_title()]


def check_titles_inside(fig):
    """Every title lies wholly inside the figure (none of its text cut off)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for t in titles_of(fig):
        box = t.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, \
            ("title past the figure's edge", t.get_text(), box, fig.bbox)


def twin_runs(ls, tmp_path, layers_run=None):
    """Two copies of one run's records (so their curves coincide) whose configs share many stabilizers and
    differ only in the seed: the title (their common pieces) is long, the labels short."""
    runs = []
    for seed in (1, 2):
        run = tmp_path / f"twin_{seed}"
        run.mkdir()
        src = layers_run or ls
        for name in ["metrics.jsonl", "logit_stats.jsonl"]:
            (run / name).write_bytes((src / name).read_bytes())
        cfg = json.loads((src / "config.json").read_text())
        cfg["train"].update(seed=seed, z_loss=1e-4, qk_clip=100.0, logit_alarm=6.0, skip_spikes=5.0, grad_clip=0.5)
        cfg["model"].update(qk_norm=True, attn_softcap=30.0)
        (run / "config.json").write_text(json.dumps(cfg))
        runs.append(plot_run.Run(str(run)))
    return runs


@pytest.mark.parametrize("every, file, reason", [
    (20, "", "its 12 steps are fewer than --logit-stats-every 20"),
    (1, None, "no logit_stats.jsonl"),
    (0, None, "--logit-stats-every 0"),
])
def test_a_run_without_logit_statistics_is_left_out_of_their_plots_with_one_note(two_runs, tmp_path, capsys, every,
                                                                                 file, reason):
    """A run with no logit_stats.jsonl record (fewer steps than --logit-stats-every, statistics off, or no file)
    is in none of the plots drawn from them (logits, entropy, near/far): no legend entry without a line, and
    one note that names the run, the reason and the plots; the other run's lines and legend are whole."""
    _, mhsa, ls, _ = two_runs
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_bytes((mhsa / "metrics.jsonl").read_bytes())
    if file is not None:
        (bare / "logit_stats.jsonl").write_text(file)
    cfg = json.loads((mhsa / "config.json").read_text())
    cfg["train"]["logit_stats_every"] = every
    (bare / "config.json").write_text(json.dumps(cfg))
    runs = [plot_run.Run(str(bare)), plot_run.Run(str(ls))]
    labels, title = plot_run.run_labels(runs)
    figures = dict(plot_run.build_figures(runs, labels, title))
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert notes == [f"note: no logit statistics for {labels[0]} ({reason}); left out of the logits, entropy and "
                     "near/far plots"], notes
    assert sorted(figures) == ["entropy", "logits", "loss", "near_far_logits", "near_mass"]
    for name, fig in figures.items():
        texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        assert (labels[0] in texts) == (name == "loss") and labels[1] in texts, (name, texts)
    assert len([ln for ln in figures["logits"].axes[0].get_lines() if len(ln.get_xdata()) > 1]) == 1
    import matplotlib.pyplot as plt
    for fig in figures.values():
        plt.close(fig)
    figures = dict(plot_run.build_figures(runs[:1], labels[:1], title))  # alone: only the loss plot
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert sorted(figures) == ["loss"] and notes == [
        f"note: no logit statistics for {labels[0]} ({reason}); logits, entropy and near/far plots skipped"], notes
    plt.close(figures["loss"])


@pytest.fixture(scope="module")
def one_layer_run(two_runs):
    """A 1-layer run: one panel per figure, the narrowest figure (its titles were cut at both sides)."""
    d = two_runs[0]
    out = d / "one_layer"
    sh([BIN, "-i", f"{d}/data/train_*.bin", "-j", f"{d}/data/val_*.bin", "--layers", "1", "--channels", "16",
        "--heads", "4", "--max-seq-len", "32", "-b", "2", "-t", "32", "-x", "6", "-v", "3", "-m", "1", "-s", "0",
        "-l", "3e-2", "-u", "2", "--threads", "1", "--device", "cpu", "-o", out, "--global-heads", "1",
        "--window", "4"])
    return out


@pytest.mark.parametrize("heads", ["max", "all"])
@pytest.mark.parametrize("which", ["one_layer", "twins"])
def test_titles_fit_whole_inside_the_figure(two_runs, one_layer_run, tmp_path, heads, which):
    """A title wider than the figure (a 1-layer run's one panel; the long common title of runs that share many
    settings) is wrapped, whole: it was cut to 110-140 characters, and past both edges of a narrow figure."""
    _, _, ls, _ = two_runs
    runs = [plot_run.Run(str(one_layer_run))] if which == "one_layer" else twin_runs(ls, tmp_path)
    labels, title = plot_run.run_labels(runs)
    if which == "twins":
        assert len(title) > 100 and labels == ["seed 1", "seed 2"], (title, labels)
    import matplotlib.pyplot as plt
    for name, fig in plot_run.build_figures(runs, labels, title, heads=heads):
        check_titles_inside(fig)
        check_legends_outside(fig)
        main = titles_of(fig)[0].get_text().replace("\n", " ")
        assert main.endswith(f" - {title}"), (name, main)  # nothing lost
        plt.close(fig)


@pytest.mark.parametrize("heads", ["max", "all"])
def test_runs_whose_curves_coincide_are_told_apart(two_runs, tmp_path, heads):
    """Two runs with the same records: every curve of one lies on the other's. Each run has its own marker
    shape (not only a colour: the curve drawn last hid the other), and the legend shows it."""
    _, _, ls, _ = two_runs
    runs = twin_runs(ls, tmp_path)
    labels, title = plot_run.run_labels(runs)
    import matplotlib.pyplot as plt
    for name, fig in plot_run.build_figures(runs, labels, title, heads=heads):
        for ax in fig.axes:
            lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1 and ln.get_linestyle() != "None"]
            for i, a in enumerate(lines):
                for b in lines[i + 1:]:
                    same = (list(a.get_xdata()) == list(b.get_xdata())
                            and np.array_equal(np.asarray(a.get_ydata(), float), np.asarray(b.get_ydata(), float),
                                               equal_nan=True))
                    # --heads all: a colour per head, so coinciding heads of one run cannot differ; the same
                    # head of two runs must
                    one_head = heads == "max" or a.get_color() == b.get_color()
                    if same and a.get_linestyle() == b.get_linestyle() and one_head:
                        assert a.get_marker() not in (None, "None", "") and a.get_marker() != b.get_marker(), \
                            (name, ax.get_title(), a.get_marker(), b.get_marker())
        legend = fig.legends[0]
        shapes = {h.get_marker() for h in legend.legend_handles if h.get_label() in labels}
        assert len(shapes) == 2 and None not in shapes and "None" not in shapes, (name, shapes)
        plt.close(fig)


# ---------------------------------------------------------------------------------------------
# data identity: losses of runs on different tokenizers or validation sets are not comparable

def data_of(name, tokenizer, vocab, fnv, val_hash=None):
    """config.json's "data" (docs/formats.md) of a data set at data/shards/NAME."""
    def role(split, h):
        return {"glob": f"/repo/data/shards/{name}/{split}_*.bin", "tokenizer": tokenizer, "vocab_size": vocab,
                "tokenizer_bin_fnv1a64": fnv, "sha256_tokenizer_model": None, "shards": 1, "tokens": 1000,
                "shards_sha256_fnv1a64": h}
    return {"train": role("train", None), "val": role("val", val_hash)}


TS_SP = data_of("ts_sp", "sp", 500, "a5016a9c00000000")
TS_GPT2 = data_of("tinyshakespeare_gpt2", "gpt2", 50257, "c5ebdf6886f34239")


def test_label_names_the_data_set_and_vocabulary_when_runs_differ_in_data():
    """Runs on different tokenizers get the data set and V in their labels (the loss per token of another
    vocabulary is another number); runs on the same data have it once, in the title."""
    a, b = config(data=TS_SP), config(model={"vocab_size": 50257}, data=TS_GPT2)
    labels, title = plot_run.make_labels([plot_run.label_parts(a), plot_run.label_parts(b)], ["a", "b"])
    assert "data ts_sp (sp V=500)" in labels[0].split(", ") and "data" not in title, (labels, title)
    assert "data tinyshakespeare_gpt2 (gpt2 V=50257)" in labels[1].split(", "), labels
    labels, title = plot_run.make_labels([plot_run.label_parts(a), plot_run.label_parts(config(data=TS_SP,
                                          train={"seed": 1}))], ["a", "b"])
    assert "data ts_sp (sp V=500)" in title.split(", ") and not any("data" in lab for lab in labels), (labels, title)
    # one run: the data set in the title, beside lr and seed (exp_pg19.sh's summary.md names V in it)
    labels, title = plot_run.make_labels([plot_run.label_parts(a)], ["a"])
    assert "data ts_sp (sp V=500)" in title.split(", ") and "data" not in labels[0], (labels, title)
    # a folder named data (exp_pg19.sh --smoke's OUT/data) is named with its parent: never "data data"
    assert plot_run.data_set_name("/tmp/smoke/data/train_*.bin") == "smoke/data"
    assert plot_run.data_set_name("data/shards/pg19_sp/train_*.bin") == "pg19_sp"


def test_data_piece_names_a_validation_set_in_another_folder(tmp_path):
    """A review: a fork validated on a copy of the data (-j data/shards/ts2/val_*.bin) read "fk6:
    tinyshakespeare_gpt2 (gpt2 V=50257) #42de1e" in the note: only the digest showed that its validation set
    differs. Validation shards in another folder than the training shards name both."""
    fork = json.loads(json.dumps(TS_GPT2))
    fork["val"].update(glob="/repo/data/shards/ts2/val_*.bin", shards_sha256_fnv1a64="1234123412341234")
    assert plot_run.data_text(config(data=fork)) == "data train tinyshakespeare_gpt2, val ts2 (gpt2 V=50257)"
    assert plot_run.data_text(config(data=TS_GPT2)) == "data tinyshakespeare_gpt2 (gpt2 V=50257)"
    no_val = dict(TS_GPT2, val=None)  # a run without validation: its training set alone
    assert plot_run.data_text(config(data=no_val)) == "data tinyshakespeare_gpt2 (gpt2 V=50257)"
    write_run(tmp_path / "mk", config(model={"vocab_size": 50257}, data=TS_GPT2), 6.17)
    write_run(tmp_path / "fk6", config(model={"vocab_size": 50257}, data=fork), 6.3)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "mk"), str(tmp_path / "fk6"), "--out",
                        str(tmp_path / "cmp"), "--no-figures"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines()[0] == (
        "note: these runs' losses are per token of different validation sets (mk: tinyshakespeare_gpt2 (gpt2 "
        "V=50257); fk6: train tinyshakespeare_gpt2, val ts2 (gpt2 V=50257)): not comparable, a lower loss is not a "
        "better model here"), p.stderr


def write_run(path, cfg, val_loss):
    path.mkdir()
    (path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": val_loss + 0.1, "max_attn_logit": 1.0})
                                        + "\n" + json.dumps({"step": 1, "val_loss": val_loss}) + "\n")
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("other,what", [
    (config(model={"vocab_size": 50257}, data=TS_GPT2), "tokenizers"),
    # the same directory name and vocabulary, tokenized again (another tokenizer.bin)
    (config(data=data_of("ts_sp", "sp", 500, "ffff00000000ffff")), "tokenizers"),
    (config(data=data_of("ts_sp", "sp", 500, "a5016a9c00000000", val_hash="1234123412341234")),
     "validation sets"),
])
def test_runs_on_different_data_get_one_note_and_distinct_labels(tmp_path, other, what):
    write_run(tmp_path / "c", config(data=data_of("ts_sp", "sp", 500, "a5016a9c00000000",
                                                  val_hash="abcdabcdabcdabcd" if what == "validation sets" else None)),
              6.17)
    write_run(tmp_path / "t", other, 9.54)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "c"), str(tmp_path / "t"), "--out",
                        str(tmp_path / "cmp"), "--formats", "png"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    notes = [ln for ln in p.stderr.splitlines() if "comparable" in ln]
    assert len(notes) == 1 and notes[0].startswith("note: ") and f"different {what}" in notes[0], p.stderr
    # the note tells the two data sets apart as the labels do (trial 11: "c: ts_sp (sp V=500); t: ts_sp (sp
    # V=500)" for two tokenizations of one directory; now with a digest of each identity)
    each = notes[0].split(" (", 1)[1].rsplit("): not comparable", 1)[0]
    described = [x.split(": ", 1)[1] for x in each.split("; ")]
    assert len(described) == 2 and described[0] != described[1], notes[0]
    rows = [ln for ln in (tmp_path / "cmp_summary.md").read_text().splitlines() if ln.startswith("| ")][1:]
    labels = [r.split(" | ")[0].lstrip("| ") for r in rows]
    assert len(set(labels)) == 2 and all("data " in lab for lab in labels), labels
    assert "not comparable" in (tmp_path / "cmp_summary.md").read_text()
    # the same data: no note, the data set named once in the title
    same = tmp_path / "same"
    write_run(same, config(data=json.loads((tmp_path / "c" / "config.json").read_text())["data"],
                           train={"seed": 7}), 6.2)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "c"), str(same), "--out", str(tmp_path / "s"),
                        "--formats", "png"], capture_output=True, text=True)
    assert p.returncode == 0 and "not comparable" not in p.stderr + p.stdout, p.stderr
    assert (tmp_path / "s_summary.md").read_text().startswith("Runs: ") and "data ts_sp (sp V=500)" in \
        (tmp_path / "s_summary.md").read_text().splitlines()[0]


def test_a_run_recorded_without_hashes_agrees_with_one_of_the_same_data_that_has_them():
    """Older runs recorded no shard or tokenizer hashes (docs/formats.md): the same data set is compared by what
    both records have (the glob, the tokenizer kind and V), never called another data set for a missing field;
    hashes that both have still decide."""
    old = data_of("ts_sp", "sp", 500, None)
    new = data_of("ts_sp", "sp", 500, "a5016a9c00000000", val_hash="abcdabcdabcdabcd")
    new["train"]["shards_sha256_fnv1a64"] = "0123012301230123"
    a, b = plot_run.data_identity(config(data=old)), plot_run.data_identity(config(data=new))
    assert plot_run.same_data(a, b) and plot_run.data_note([config(data=old), config(data=new)], ["o", "n"]) is None
    other = data_of("ts_sp", "sp", 500, "a5016a9c00000000", val_hash="1234123412341234")
    assert not plot_run.same_data(b, plot_run.data_identity(config(data=other)))
    assert not plot_run.same_data(a, plot_run.data_identity(config(data=data_of("wt_sp", "sp", 500, None))))


@pytest.mark.parametrize("flag", ["--val-data", "--val-batches", "-m"])
def test_a_run_whose_validation_set_changed_gets_the_not_comparable_note(tmp_path, flag):
    """trial 5 F2: a run resumed with another -j (or -m) compared its final val loss with another run's, as if
    both were on one set; the data note compares only the "data" recorded at the first start."""
    data = data_of("ts_sp", "sp", 500, "a5016a9c00000000")
    write_run(tmp_path / "g", config(data=data), 6.17)
    write_run(tmp_path / "gj", config(data=data, history=[{"step": 20, "flag": flag, "old": 2, "new": 1}]), 9.5)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "gj"), str(tmp_path / "g"), "--out",
                        str(tmp_path / "cmp"), "--formats", "png"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    notes = [ln for ln in p.stderr.splitlines() if "not comparable" in ln]
    assert len(notes) == 1 and notes[0].startswith("note: ") and f"gj: {flag} at step 20" in notes[0], p.stderr
    assert "g:" not in notes[0].replace("gj:", ""), notes
    assert f"gj: {flag} at step 20" in (tmp_path / "cmp_summary.md").read_text()
    # a change of another flag (the learning rate) keeps the validation set: no note
    write_run(tmp_path / "lr", config(data=data, history=[{"step": 20, "flag": "--learning-rate", "old": 1e-3,
                                                           "new": 3e-4}]), 6.0)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "lr"), str(tmp_path / "g"), "--out",
                        str(tmp_path / "c2"), "--formats", "png"], capture_output=True, text=True)
    assert p.returncode == 0 and "not comparable" not in p.stderr + p.stdout, p.stderr


def write_steps(path, cfg, steps):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 3.0, "max_attn_logit": 1.0,
                                                            **({"val_loss": 2.9} if s == steps else {})}) + "\n"
                                                for s in range(1, steps + 1)))


@pytest.mark.parametrize("bad", ["pngg", ",", "png,,svg"])
def test_a_bad_format_is_refused_before_anything_is_written(tmp_path, bad):
    """--formats is checked first (it failed after the summary was written, with matplotlib's message)."""
    write_steps(tmp_path / "a", config(), 3)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "a"), "--out", str(tmp_path / "o" / "cmp"),
                        "--formats", bad], capture_output=True, text=True)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1 and err[0].startswith("error: --formats"), p.stderr
    assert not (tmp_path / "o").exists() and p.stdout == ""


# ---------------------------------------------------------------------------------------------
# --near changed on resume (trial 6 F2) and runs that differ in other settings (trial 6 F4)

def near_stats(step, near, window=8):
    """A logit_stats.jsonl record of a 1-layer model with a local head 0 (P = window) and a global head 1 that
    splits at `near` (docs/formats.md)."""
    mass = 1.0 if near >= window else 0.3
    attn = [{"layer": 0, "head": h, "global": h == 1, "max": 1.0, "min": -1.0, "entropy": 1.0,
             "near_mass": mass if h == 0 else mass / 2, "near_max": 1.0, "far_max": 0.5} for h in range(2)]
    return {"step": step, "num_layers": 1, "num_heads": 2, "global_heads": 1, "window": window, "near": near,
            "attn": attn, "out_max_logit": 1.0, "out_mean_lse": 1.0}


NEAR_CHANGED = [{"step": 4, "flag": "--near", "old": None, "new": 2}]


def write_near_run(path, history=NEAR_CHANGED, steps=8):
    """A run of 8 steps whose --near was the default (the window, 8) up to step 4 and 2 after its resume there."""
    path.mkdir()
    cfg = config(model={"num_layers": 1, "num_heads": 2, "global_heads": 1, "window": 8},
                 train={"seq_len": 16, "near": None}, history=history)
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 3.0 - 0.1 * s, "max_attn_logit": 1.0})
                                                + "\n" for s in range(1, steps + 1)))
    changed = {h["step"]: h["new"] for h in history}
    near, lines = 8, []
    for s in range(1, steps + 1):
        lines.append(json.dumps(near_stats(s, near)) + "\n")
        near = changed.get(s, near)  # an entry at step s holds from step s + 1 on
    (path / "logit_stats.jsonl").write_text("".join(lines))
    return cfg


def test_near_changed_on_resume_is_named_with_its_effective_values(tmp_path):
    """trial 6 F2: `old: null` is the default (the window); the label and the marker say 8->2, not None->2."""
    cfg = write_near_run(tmp_path / "lsn")
    assert "near 8->2 at step 4" in label(cfg).split(", "), label(cfg)
    assert plot_run.markers_of(cfg) == [(4, "--near 8->2")]
    # a run at the default and one with --near 8 (its window) split alike: no difference to name
    a = config(model={"window": 8, "global_heads": 1}, train={"near": None})
    b = config(model={"window": 8, "global_heads": 1}, train={"near": 8})
    labels, _ = plot_run.make_labels([plot_run.label_parts(a), plot_run.label_parts(b)], ["a", "b"])
    assert not any("near" in lab for lab in labels), labels


def test_near_plots_read_n_per_record_and_break_where_it_changes(tmp_path):
    """trial 6 F2: the near plots took one N for the whole run ("N=8" in the title) and drew one curve across a
    --near changed on resume, so the drop of the near mass read as a change of the mechanism."""
    write_near_run(tmp_path / "lsn")
    run = plot_run.Run(str(tmp_path / "lsn"))
    labels, title = plot_run.run_labels([run])
    figures = dict(plot_run.build_figures([run], labels, title, "max"))
    for name in ("near_mass", "near_far_logits"):
        fig = figures[name]
        text = fig._suptitle.get_text().replace("\n", " ")
        assert "N=8 up to step 4, N=2 from step 5" in text, text
        curves = [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata()) > 2]
        assert curves, name
        for ln in curves:  # no curve joins a point split at N=8 to one split at N=2
            x = np.asarray(ln.get_xdata(), dtype=float)
            assert x.max() <= 4 or x.min() >= 5, (name, x)
    # the exp_text_ratio table's uniform near mass is that of the last record's N, as its measured one is
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"), str(tmp_path / "lsn")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    head, _, row = [[c.strip() for c in ln.strip("|").split("|")] for ln in p.stdout.splitlines()[:3]]
    uniform = sum(min(i + 1, 2) / (i + 1) for i in range(16)) / 16
    assert row[head.index("near mass if uniform")] == f"{uniform:.3f}", (head, row)


def test_exp_summary_prints_a_dash_for_a_max_logit_not_recorded(tmp_path):
    """trial 9: exp_summary's final max-logit read "nan" for a run whose records hold none (plot_run's table: "-");
    a recorded non-finite one stays "nan" (it says the run went non-finite)."""
    def final_max_logit(name, value, recorded=True):
        d = tmp_path / name
        write_records(d, config(train={"seq_len": 16}), [dict(train_record(s), max_attn_logit=value)
                                                          for s in range(1, 4)])
        if not recorded:
            (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 3.0}) + "\n" for s in range(1, 4)))
        p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"), str(d)], capture_output=True,
                           text=True)
        assert p.returncode == 0, p.stderr
        head, _, row = [[c.strip() for c in ln.strip("|").split("|")] for ln in p.stdout.splitlines()[:3]]
        return row[head.index("final max-logit")]
    assert final_max_logit("none", None, recorded=False) == "-"
    assert final_max_logit("five", 5.0) == "5.00"
    assert final_max_logit("nonfinite", None) == "nan"  # the trainer writes a non-finite one as null (review)


def test_exp_summary_prints_a_dash_for_a_run_that_never_validated(tmp_path):
    """trial 11: exp_summary's final val loss and perplexity read "nan" for a run trained with -v 0 (in a
    study of divergence, a blown-up run); plot_run's table says "-". A last validation older than the last
    step is marked with its step, as there; a non-finite validation loss stays "nan"."""
    def val_cells(name, val_at):  # val_at: {step: validation loss}, in that step's record as the trainer writes it
        d = tmp_path / name
        write_records(d, config(train={"seq_len": 16}),
                      [dict(train_record(s), **({"val_loss": val_at[s]} if s in val_at else {})) for s in range(1, 4)])
        p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"), str(d)], capture_output=True,
                           text=True)
        assert p.returncode == 0, p.stderr
        head, _, row = [[c.strip() for c in ln.strip("|").split("|")] for ln in p.stdout.splitlines()[:3]]
        return row[head.index("final val loss")], row[head.index("val ppl")]
    assert val_cells("never", {}) == ("-", "-")
    assert val_cells("last", {3: 2.0}) == ("2.0000", f"{math.exp(2.0):.2f}")
    assert val_cells("older", {2: 2.0}) == ("2.0000 (step 2)", f"{math.exp(2.0):.2f}")
    assert val_cells("blown", {3: None}) == ("nan", "nan")


def test_exp_summary_notes_other_data_and_settings_changed_on_resume(tmp_path):
    """trial 10: exp_summary compared runs on different tokenizers without the note plot_run gives, and a run
    resumed with another -l read as one of its starting settings. Both are notes on stderr; the table on
    stdout is unchanged; runs on the same data, never resumed with changes, get no note."""
    records = [train_record(s) for s in range(1, 4)]
    write_records(tmp_path / "sp", config(train={"seq_len": 16, "lr_schedule": "cosine", "sampler": "windows"},
                                          data=TS_SP), records)
    write_records(tmp_path / "gpt2", config(model={"vocab_size": 50257}, train={"seq_len": 16}, data=TS_GPT2),
                  records)
    write_records(tmp_path / "same", config(train={"seq_len": 16, "learning_rate": 3e-4}, data=TS_SP,
                                            history=[{"step": 2, "flag": "--learning-rate", "old": 6e-4,
                                                      "new": 3e-4}]), records)

    def summary(*names):
        p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py")] + [str(tmp_path / n)
                                                                                          for n in names],
                           capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.startswith("| run |"), p.stderr
        return p.stderr.splitlines()
    notes = summary("sp", "gpt2")
    assert len(notes) == 1 and notes[0].startswith("note: these runs' losses are per token of different "
                                                   "tokenizers") and "ts_sp (sp V=500)" in notes[0], notes
    notes = summary("sp", "same")
    assert notes == ["note: settings changed while a run trained (same: lr=6e-4 (3e-4 from step 2))",
                     "note: runs also differ in: learning_rate (config.json), which the table's columns do not "
                     "show"], notes
    assert summary("sp") == []
    # settings plot_run does not label (trial 11: two runs of other schedules and samplers, no word)
    write_records(tmp_path / "wsd", config(train={"seq_len": 16, "lr_schedule": "wsd", "sampler": "random"},
                                           data=TS_SP), records)
    assert summary("sp", "wsd") == ["note: runs also differ in: lr_schedule, sampler (config.json), which the "
                                    "table's columns do not show"]
    # and in what plot_run's labels show but no column of this table does (trial 11: a 5x learning rate)
    write_records(tmp_path / "lr", config(train={"seq_len": 16, "learning_rate": 3e-3}, data=TS_SP), records)
    assert summary("sp", "lr") == ["note: runs also differ in: learning_rate (config.json), which the table's "
                                   "columns do not show"]


def test_runs_with_another_near_each_name_their_n(tmp_path):
    """Two runs of different N: the near plots' title says N varies and each legend label names its run's N."""
    write_near_run(tmp_path / "lsn")
    write_near_run(tmp_path / "ls", history=[])
    runs = [plot_run.Run(str(tmp_path / "lsn")), plot_run.Run(str(tmp_path / "ls"))]
    labels, title = plot_run.run_labels(runs)
    fig = dict(plot_run.build_figures(runs, labels, title, "max"))["near_mass"]
    assert "N varies" in fig._suptitle.get_text().replace("\n", " ")
    legend = [t.get_text().replace("\n", " ") for leg in fig.legends for t in leg.get_texts()]
    assert any("N=8 up to step 4, N=2 from step 5" in t for t in legend), legend
    assert any(t.endswith("(N=8)") for t in legend), legend


def test_runs_that_differ_in_other_settings_say_so_and_count_tokens(tmp_path):
    """trial 6 F4: runs of 4x the tokens per step, another weight decay and schedule had labels [a], [b] and a
    per-step summary: the comparison looked like one of attention alone."""
    base = {"weight_decay": 0.1, "lr_schedule": "cosine", "total_batch_size": -1, "batch_size": 4, "seq_len": 1024}
    a = config(train=dict(base, threads=1, output_dir="/runs/a", train_data="/d/a/train_*.bin"),
               derived={"tokens_per_step": 4096})
    b = config(train=dict(base, weight_decay=0.0, lr_schedule="linear", total_batch_size=16384, threads=8,
                          output_dir="/runs/b", train_data="/d/b/train_*.bin"),
               derived={"tokens_per_step": 16384},
               history=[{"step": 5, "flag": "--total-batch-size", "old": 16384, "new": 8192}])
    write_steps(tmp_path / "a", a, 10)
    write_steps(tmp_path / "b", b, 10)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                        str(tmp_path / "cmp"), "--formats", "png"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    summary = (tmp_path / "cmp_summary.md").read_text()
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in summary.splitlines() if ln.startswith("| ")]
    head, la, lb = rows[0], rows[1][0].split(", "), rows[2][0].split(", ")
    assert "weight-decay 0.1" in la and "lr-schedule cosine" in la and "tokens/step 4096" in la, la
    # -d is compared as the tokens per step it gives, with its change on resume (no second piece for -d)
    assert "weight-decay 0" in lb and "lr-schedule linear" in lb and "tokens/step 16384 (8192 from step 5)" in lb, lb
    assert not any("total-batch-size" in piece for piece in la + lb), (la, lb)
    assert not any(k in rows[1][0] + rows[2][0] for k in ("threads", "output", "train-data")), rows
    # tokens seen at the final step: b changed -d on resume at step 5 (16384 per step up to it, 8192 after)
    assert rows[1][head.index("tokens")] == "40960" and rows[2][head.index("tokens")] == str(5 * 16384 + 5 * 8192)
    notes = [ln for ln in p.stderr.splitlines() if "also differ" in ln]
    assert len(notes) == 1 and notes[0].startswith("note: runs also differ in: "), p.stderr
    for key in ("weight_decay", "lr_schedule", "tokens_per_step"):
        assert key in notes[0], notes
    assert not any(k in notes[0] for k in ("threads", "output_dir", "train_data")), notes
    assert "Runs also differ in: " in summary


def test_tokens_seen_counts_a_fork_from_its_source_tokens():
    cfg = config(train={"batch_size": 2, "seq_len": 32, "total_batch_size": -1},
                 forked_from={"checkpoint": "out/a/model_00000004.bin", "step": 4, "tokens": 1000})
    assert plot_run.tokens_seen(cfg, 10) == 1000 + 6 * 64  # no "derived": B x T of "train"
    assert plot_run.tokens_seen({}, 10) is None


def test_settings_that_only_say_where_or_how_a_run_executed_are_not_differences():
    base = {"batch_size": 4, "seq_len": 64, "total_batch_size": -1, "near": None, "val_batches": 2}
    a = config(model={"window": 8, "global_heads": 1}, train=dict(base, threads=1, world_size=1, output_dir="/a"))
    same = [config(model={"window": 8, "global_heads": 1}, train=dict(base, **t)) for t in [
        {"threads": 8, "device": "cuda", "zero_stage": 1, "output_dir": "/b", "val_every": 50},
        {"total_batch_size": 256},  # -d equal to B x T: the same tokens per step
        {"near": 8},                # the window, given
        {"batch_size": 2, "world_size": 2}]]  # trial 9: -b 2 on 2 processes is -b 4 on one (docs/multigpu.md)
    for b in same:
        assert plot_run.differing_settings([a, b]) == [], b["train"]
    other = config(model={"window": 8, "global_heads": 1}, train=dict(base, val_batches=4, near=4))
    assert sorted(plot_run.differing_settings([a, other])) == ["near", "val_batches"]
    halved = config(model={"window": 8, "global_heads": 1}, train=dict(base, batch_size=2, total_batch_size=256))
    assert plot_run.differing_settings([a, halved]) == ["batch_sequences"]  # the same tokens per step
    assert "sequences/micro-batch 2" in [p for _, p, _ in plot_run.label_parts(halved, ["batch_sequences"])]
    assert plot_run.differing_settings([a]) == []


# ---------------------------------------------------------------------------------------------
# a fork's summary counts its source's steps up to the fork (trial 7 F1)

def write_records(path, cfg, records):
    """A run directory of hand-written metrics.jsonl records and config.json (docs/formats.md)."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def train_record(step, loss=None, max_logit=2.0):
    """A training record without the trainer's spike flags (the own spike rule counts), 36 s a step."""
    return {"step": step, "loss": 4.0 + 0.01 * ((step * 7) % 5 - 2) if loss is None else loss,
            "max_attn_logit": max_logit, "ms": 36000.0}


FORK_TRAIN = {"batch_size": 2, "seq_len": 32, "total_batch_size": -1, "seed": 1}


def fork_of(source, step, tokens):
    return {"checkpoint": str(source / f"model_{step:08d}.bin"), "step": step, "tokens": tokens}


def write_fork_chain(tmp_path):
    """src: steps 1-120, its peak max-logit 30 at step 50 and a non-finite loss at step 60; fk: a fork of src at
    step 110 (its own steps 111-130: a loss spike at step 112, max-logit 5 at step 115, else 2); fk2: a fork of fk
    at step 120 (its own steps 121-135). Only the steps before the forks hold the peak and the non-finite step,
    and the spike is one only against the 100 losses before it, most of them src's."""
    model = {"num_layers": 2, "num_heads": 4, "channels": 16, "global_heads": 1, "window": 8, "max_seq_len": 32}
    src, fk, fk2 = tmp_path / "src", tmp_path / "fk", tmp_path / "fk2"
    write_records(src, config(model=model, train=FORK_TRAIN),
                  [train_record(s, loss=float("nan") if s == 60 else None, max_logit=30.0 if s == 50 else 2.0)
                   for s in range(1, 121)])
    write_records(fk, config(model=model, train=FORK_TRAIN, forked_from=fork_of(src, 110, 110 * 64)),
                  [train_record(s, loss=6.0 if s == 112 else None, max_logit=5.0 if s == 115 else 2.0)
                   for s in range(111, 131)])
    write_records(fk2, config(model=model, train=FORK_TRAIN, forked_from=fork_of(fk, 120, 120 * 64)),
                  [train_record(s) for s in range(121, 136)])
    text = (src / "metrics.jsonl").read_text().replace("NaN", "null")  # non-finite numbers are null in the files
    (src / "metrics.jsonl").write_text(text)
    return src, fk, fk2


def summary_rows(path):
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in Path(path).read_text().splitlines()
            if ln.startswith("| ")]
    return {r[1]: dict(zip(rows[0], r)) for r in rows[1:]}


def exp_summary_rows(stdout):
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in stdout.splitlines() if ln.startswith("| ")]
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def test_a_forks_summary_counts_the_steps_of_its_source_up_to_the_fork(tmp_path):
    """trial 7 F1: a fork's steps and tokens counted its source's steps 1..S, but its peak max-logit, first step
    over the threshold, spikes and non-finite steps (and exp_summary's hours) only its own steps after S."""
    src, fk, fk2 = write_fork_chain(tmp_path)
    p = subprocess.run([sys.executable, str(PLOT), str(src), str(fk), str(fk2), "--out", str(tmp_path / "cmp"),
                        "--no-figures"], capture_output=True, text=True)
    assert p.returncode == 0 and "note:" not in p.stderr, p.stderr
    rows = summary_rows(tmp_path / "cmp_summary.md")
    for name, steps, tokens in [("fk", "130", str(130 * 64)), ("fk2", "135", str(135 * 64))]:
        row = rows[name]
        assert row["steps"] == steps and row["tokens"] == tokens, row
        assert row["peak max-logit"] == "30.000" and row["at step"] == "50", row  # src's step 50
        assert row["first step > 10"] == "50" and row["non-finite steps"] == "1", row
        assert row["loss spikes"] == "1", row  # step 112 against the 100 losses before it
    assert rows["src"]["loss spikes"] == "0" and rows["src"]["peak max-logit"] == "30.000", rows["src"]
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"), str(fk), str(fk2)],
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    by_run = {r["run"]: r for r in exp_summary_rows(p.stdout)}
    fork_row, fork2_row = by_run["fk"], by_run["fk2"]
    assert fork_row["hours"] == "1.30" and fork2_row["hours"] == "1.35", (fork_row, fork2_row)  # 36 s a step from 1
    assert fork_row["peak max-logit"] == "30.00" and fork_row["at step"] == "50", fork_row
    # trial 8 F4: the variant names the fork (its peak is its source's steps), as plot_run's label does
    assert fork_row["variant"] == "LS G=1/4 P=8, forked from src at step 110", fork_row
    assert fork2_row["variant"] == "LS G=1/4 P=8, forked from fk at step 120", fork2_row


def test_a_fork_whose_source_moved_says_its_summary_counts_its_own_steps(tmp_path):
    """The source of a fork moved away (or replaced by a run of another model): the cells counted over the steps
    say which steps they count, and one note on stderr (and under the table) names the source and what it means."""
    src, fk, fk2 = write_fork_chain(tmp_path)
    src.rename(tmp_path / "elsewhere")
    p = subprocess.run([sys.executable, str(PLOT), str(fk), str(fk2), "--out", str(tmp_path / "cmp"), "--no-figures"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]
    assert len(notes) == 2 and all(f"{src}/metrics.jsonl" in n and "does not exist" in n for n in notes), p.stderr
    assert notes[0].startswith("note: fork fk: the summary cells marked (steps 111-130) count only those steps, "
                               "not steps 1-110"), notes
    assert notes[1].startswith("note: fork fk2: the summary cells marked (steps 111-135)"), notes  # fk's steps kept
    rows = summary_rows(tmp_path / "cmp_summary.md")
    row = rows["fk"]
    assert row["steps"] == "130" and row["tokens"] == str(130 * 64), row  # forked_from's tokens: still counted
    assert row["peak max-logit"] == "5.000 (steps 111-130)" and row["at step"] == "115", row
    assert row["first step > 10"] == "- (steps 111-130)" and row["non-finite steps"] == "0 (steps 111-130)", row
    assert row["loss spikes"] == "0 (steps 111-130)", row  # 1 loss before step 112 now: no spike to see
    assert rows["fk2"]["peak max-logit"] == "5.000 (steps 111-135)" and rows["fk2"]["at step"] == "115", rows["fk2"]
    assert "Fork fk: the summary cells marked (steps 111-130)" in (tmp_path / "cmp_summary.md").read_text()
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"), str(fk)], capture_output=True,
                       text=True)
    assert p.returncode == 0 and p.stderr.startswith("note: fork fk: ") and p.stderr.count("\n") == 1, p.stderr
    row = exp_summary_rows(p.stdout)[0]
    assert row["hours"] == "0.20 (steps 111-130)" and row["peak max-logit"] == "5.00 (steps 111-130)", row
    # a run of another model there now is not the source: not counted, and said so
    cfg = json.loads((fk / "config.json").read_text())
    write_records(src, config(model=dict(cfg["model"], window=4), train=FORK_TRAIN),
                  [train_record(s, max_logit=30.0) for s in range(1, 121)])
    p = subprocess.run([sys.executable, str(PLOT), str(fk), "--out", str(tmp_path / "other"), "--no-figures"],
                       capture_output=True, text=True)
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "describes another model (window 4; the fork's 8)" in notes[0], p.stderr
    assert summary_rows(tmp_path / "other_summary.md")["fk"]["peak max-logit"] == "5.000 (steps 111-130)"


def test_a_fork_whose_source_trained_again_or_named_relatively(tmp_path, monkeypatch):
    """A review: the source directory trained again with the same model after the fork (its records younger
    than the fork's first step) was counted as the fork's past; it is not, and said so. A relative checkpoint
    path is read from the current directory, as the trainer reads it."""
    model = {"num_layers": 2, "num_heads": 4, "channels": 16, "global_heads": 1, "window": 8, "max_seq_len": 32}
    src, fk = tmp_path / "src", tmp_path / "fk"
    timed = lambda s, t0, **kw: dict(train_record(s, **kw), time=t0 + s)  # noqa: E731
    write_records(src, config(model=model, train=FORK_TRAIN),
                  [timed(s, 1000.0, max_logit=30.0 if s == 3 else 2.0) for s in range(1, 21)])
    monkeypatch.chdir(tmp_path)
    fork = dict(fork_of(Path("src"), 10, 640), checkpoint="src/model_00000010.bin")
    write_records(fk, config(model=model, train=FORK_TRAIN, forked_from=fork),
                  [timed(s, 2000.0) for s in range(11, 31)])
    row = plot_run.summarize(plot_run.Run(str(fk)), 10.0)
    assert row["source_note"] is None and row["peak_max_logit"] == 30.0 and row["peak_step"] == 3, row
    (src / "metrics.jsonl").write_text("".join(  # trained again after the fork: not its past
        json.dumps(timed(s, 3000.0, max_logit=99.0 if s == 3 else 2.0)) + "\n" for s in range(1, 21)))
    row = plot_run.summarize(plot_run.Run(str(fk)), 10.0)
    assert row["peak_max_logit"] == 2.0 and row["counted_from"] == 11, row
    assert "record of step 10 was written after this fork's first step" in row["source_note"], row["source_note"]


def stats_record(step, layers, heads, global_heads, window):
    return {"step": step, "num_layers": layers, "num_heads": heads, "global_heads": global_heads, "window": window,
            "attn": [{"layer": layer, "head": h, "global": h >= heads - global_heads, "max": 1.0, "min": -1.0,
                      "entropy": 1.0} for layer in range(layers) for h in range(heads)]}


def test_logit_stats_of_another_model_than_the_config_is_refused(tmp_path):
    """trial 7 F3: a 3-layer G=2 run's logit_stats.jsonl copied into a 2-layer G=1 run's directory was drawn as 3
    layer panels under the 2-layer run's label."""
    run = tmp_path / "l2"
    write_records(run, config(model={"num_layers": 2, "num_heads": 4, "global_heads": 1, "window": 8}),
                  [train_record(s) for s in range(1, 4)])
    (run / "logit_stats.jsonl").write_text("".join(json.dumps(stats_record(s, 3, 4, 2, 8)) + "\n" for s in (1, 2, 3)))
    for cmd in ([PLOT, run, "--out", tmp_path / "p" / "cmp", "--formats", "png"],
                [REPO / "scripts" / "exp_summary.py", run]):
        p = subprocess.run([sys.executable] + [str(c) for c in cmd], capture_output=True, text=True)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 1 and len(err) == 1 and err[0].startswith(f"error: {run}/logit_stats.jsonl "), p.stderr
        assert "(L=3, NH=4, G=2, P=8 at step 1)" in err[0] and f"{run}/config.json (L=2, NH=4, G=1, P=8)" in err[0]
        assert "put the run's own logit_stats.jsonl back" in err[0] and p.stdout == "", err
    assert not (tmp_path / "p").exists()
    # its own model's records: plotted
    (run / "logit_stats.jsonl").write_text("".join(json.dumps(stats_record(s, 2, 4, 1, 8)) + "\n" for s in (1, 2, 3)))
    p = subprocess.run([sys.executable, str(PLOT), str(run), "--out", str(tmp_path / "ok"), "--no-figures"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_exp_summary_of_runs_not_named_by_ratio_reads_t_over_c_and_the_variant(tmp_path):
    """trial 7 F4: for a directory not named r<ratio>_<variant>_s<seed>, T/C was T // C (0 for T=32, C=64) and the
    variant '?'. Now the exact ratio and plot_run's attention label; rows of both kinds sort by T/C."""
    runs = [("t32_c64", 32, 64, 4, 8), ("t48_c32", 48, 32, 0, 8), ("t64_c16", 64, 16, 1, 8), ("t96_c72", 96, 72, 1, 8)]
    for name, t, c, g, p in runs:
        write_records(tmp_path / name, config(model={"num_layers": 1, "num_heads": 4, "channels": c,
                                                     "global_heads": g, "window": p},
                                              train={"seq_len": t, "seed": 3}), [train_record(s) for s in (1, 2)])
    write_records(tmp_path / "r2_ls_s1", config(model={"channels": 16, "num_heads": 4, "global_heads": 1, "window": 8},
                                                train={"seq_len": 32, "seed": 1}), [train_record(s) for s in (1, 2)])
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py")] +
                       [str(tmp_path / n) for n in ["t64_c16", "r2_ls_s1", "t96_c72", "t32_c64", "t48_c32"]],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "name says" not in p.stderr, p.stderr
    got = [(r["T/C"], r["T"], r["variant"], r["seed"]) for r in exp_summary_rows(p.stdout)]
    assert got == [("0.5", "32", "MHSA", "3"), ("1.33", "96", "LS G=1/4 P=8", "3"), ("1.5", "48", "all-local P=8", "3"),
                   ("2", "32", "ls", "1"), ("4", "64", "LS G=1/4 P=8", "3")], got
    assert [r["run"] for r in exp_summary_rows(p.stdout)] == ["t32_c64", "t96_c72", "t48_c32", "r2_ls_s1", "t64_c16"]


@pytest.mark.parametrize("name, model, train, said, good", [
    # an LS run under an MHSA name
    ("r8_mhsa_s1", {"global_heads": 1}, {"seq_len": 64, "seed": 1}, "variant", "r8_ls_s1"),
    ("r8_ls_s1", {"global_heads": 1}, {"seq_len": 32, "seed": 1}, "T/C", "r4_ls_s1"),  # T/C 4, not 8
    ("r8_ls_s2", {"global_heads": 1}, {"seq_len": 64, "seed": 1}, "seed", "r8_ls_s1"),  # seed 1, not 2
    ("r8_mhsa_qknorm_s1", {"global_heads": 4}, {"seq_len": 64, "seed": 1}, "variant", "r8_mhsa_s1"),  # no QK-norm
    ("r8_mhsa_s1", {"global_heads": 4}, {"seq_len": 64, "seed": 1, "z_loss": 1e-4}, "variant",  # a z-loss
     "r8_mhsa_zloss_s1"),
    # a review: exp_text_ratio.sh's numbered variants were the user's own label, never checked
    ("r8_mhsa_softcap7_s1", {"global_heads": 4}, {"seq_len": 64, "seed": 1, "qk_clip": 7.0}, "variant",
     "r8_mhsa_qkclip7_s1"),  # a QK-Clip run
    ("r8_mhsa_softcap50_s1", {"global_heads": 4, "attn_softcap": 30.0}, {"seq_len": 64, "seed": 1}, "variant",
     "r8_mhsa_softcap_s1"),  # soft-cap 30 (the script's default), not 50
    ("r8_mhsa_qkclip_s1", {"global_heads": 4}, {"seq_len": 64, "seed": 1, "qk_clip": 7.0}, "variant",
     "r8_mhsa_qkclip7_s1"),  # QK-Clip 7, not the script's 30
    ("r8_mhsa_qkclip7_s1", {"global_heads": 4}, {"seq_len": 64, "seed": 1, "qk_clip": 30.0}, "variant",
     "r8_mhsa_qkclip30_s1"),
    # the note names the parts that differ, and only those
    ("r4_ls_s2", {"global_heads": 1}, {"seq_len": 64, "seed": 1}, "T/C and seed", "r8_ls_s1"),
    ("r4_mhsa_s2", {"global_heads": 1}, {"seq_len": 64, "seed": 1}, "T/C, variant and seed", "r8_ls_s1"),
])
def test_exp_summary_takes_the_config_where_a_name_disagrees(tmp_path, name, model, train, said, good):
    """trial 11: a run copied to r8_mhsa_s1 (an LS run at T/C 4, seed 1337) read T/C 8, mhsa, seed 1: the
    name was taken without a look at config.json. Where the name's T/C, seed, attention or stabilizer (with
    mhsa_softcapN's and mhsa_qkclipN's N) disagrees with the record, the row shows the record's, with one note
    naming the parts that differ (it named all three whatever differed); an agreeing name is kept."""
    base = {"num_layers": 1, "num_heads": 4, "channels": 8, "window": 8}
    write_records(tmp_path / name, config(model=dict(base, **model), train=train), [train_record(s) for s in (1, 2)])
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"), str(tmp_path / name)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    row = exp_summary_rows(p.stdout)[0]
    variant = ", ".join(["MHSA" if model["global_heads"] == 4 else "LS G=1/4 P=8"]
                        + ([f"soft-cap {model['attn_softcap']:g}"] if "attn_softcap" in model else [])
                        + (["z-loss 1e-4"] if "z_loss" in train else [])
                        + ([f"QK-Clip {train['qk_clip']:g}"] if "qk_clip" in train else []))
    recorded = {"T/C": f"T/C {train['seq_len'] // 8}", "variant": variant, "seed": "seed 1"}
    shown = ", ".join(recorded[part] for part in ("T/C", "variant", "seed") if part in said)
    assert p.stderr.splitlines() == [f"note: {name}'s name says {said} other than its config.json records ({shown}): "
                                     "the row shows config.json's T/C, variant and seed"], p.stderr
    assert (row["T/C"], row["variant"], row["seed"]) == (str(train["seq_len"] // 8), variant, "1"), row
    # the same run under a name that agrees keeps the name's variant
    shutil.copytree(tmp_path / name, tmp_path / "ok" / good)
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"), str(tmp_path / "ok" / good)],
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert exp_summary_rows(p.stdout)[0]["variant"] == good.split("_", 1)[1].rsplit("_s", 1)[0]


def test_exp_summary_knows_every_variant_name_of_exp_text_ratio():
    """The variant names exp_summary checks against config.json are exp_text_ratio.sh's, with its soft-cap and
    QK-Clip defaults (a bare mhsa_softcap is --attn-softcap SOFTCAP)."""
    import exp_summary
    script = (REPO / "scripts" / "exp_text_ratio.sh").read_text()
    assert exp_summary.NAME_DEFAULTS == {"softcap": int(re.search(r"^SOFTCAP=(\d+)$", script, re.M).group(1)),
                                         "qkclip": int(re.search(r"^QKCLIP=(\d+)$", script, re.M).group(1))}
    accepted = re.search(r"\[\[ \$v =~ \^\((.*)\)\$ \]\]", script).group(1)
    assert accepted == "mhsa|ls|local|mhsa_qknorm|mhsa_zloss|mhsa_softcap([1-9][0-9]*)?|mhsa_qkclip([1-9][0-9]*)?"
    for v in ("mhsa", "ls", "local", "mhsa_qknorm", "mhsa_zloss", "mhsa_softcap", "mhsa_softcap7", "mhsa_qkclip",
              "mhsa_qkclip15"):
        assert exp_summary.NAME_VARIANT.fullmatch(v), v


def test_exp_summary_names_the_model_options_and_stabilizers_of_a_variant(tmp_path):
    """A QK-norm run and a plain one of one attention layout (directories not named r<ratio>_<variant>_s<seed>)
    were two rows of variant 'MHSA': the variant now names each option and stabilizer, and the run column the
    directory."""
    model = {"num_layers": 1, "num_heads": 4, "channels": 16, "global_heads": 4, "window": 8}
    for name, m, t in [("plain", {}, {}), ("qkn", {"qk_norm": True}, {}),
                       ("cap_z", {"attn_softcap": 30.0, "bias": False, "gelu": "erf"}, {"z_loss": 1e-4}),
                       ("clip", {}, {"qk_clip": 50.0}), ("guard", {}, {"skip_spikes": 3.0, "grad_clip": 0.0})]:
        write_records(tmp_path / name, config(model=dict(model, **m), train=dict({"seq_len": 32, "seed": 3}, **t)),
                      [train_record(s) for s in (1, 2)])
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py")] +
                       [str(tmp_path / n) for n in ["plain", "qkn", "cap_z", "clip", "guard"]], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    got = {r["run"]: r["variant"] for r in exp_summary_rows(p.stdout)}
    assert got == {"plain": "MHSA", "qkn": "MHSA, QK-norm", "clip": "MHSA, QK-Clip 50",
                   "guard": "MHSA, skip spikes z>3, grad-clip off",
                   "cap_z": "MHSA, soft-cap 30, no bias, erf GELU, z-loss 1e-4"}, got


def test_exp_summary_tells_two_runs_of_one_name_apart(tmp_path):
    """Two r2_ls_s1 directories under different parents (two campaigns) were two rows named r2_ls_s1: the run
    column now adds the parent folders that tell them apart, and only to the names that need them."""
    for parent in ("w1", "w2"):
        (tmp_path / parent).mkdir()
        write_records(tmp_path / parent / "r2_ls_s1", config(model={"channels": 16}, train={"seq_len": 32}),
                      [train_record(s) for s in (1, 2)])
    write_records(tmp_path / "w1" / "r4_ls_s1", config(model={"channels": 16}, train={"seq_len": 64}),
                  [train_record(s) for s in (1, 2)])
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py")] +
                       [str(tmp_path / r) for r in ["w2/r2_ls_s1", "w1/r2_ls_s1/", "w1/r4_ls_s1"]],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert sorted(r["run"] for r in exp_summary_rows(p.stdout)) == ["r4_ls_s1", "w1/r2_ls_s1", "w2/r2_ls_s1"]


def test_exp_summary_takes_an_ls_or_local_run_whose_window_reaches_t_by_its_name(two_runs, tmp_path):
    """A review: an honest r1_ls_s1 (G=1, C 32, window 32, T 32) is labelled "MHSA (P=32 >= T)" by plot_run, and
    exp_summary said its name disagreed with config.json. Its local heads are there (they see everything): ls (and
    local for G=0) agree, as mhsa did; the other layout's name still disagrees, naming the variant alone."""
    d = two_runs[0]
    common = ["-i", f"{d}/data/train_*.bin", "-j", f"{d}/data/val_*.bin", "--layers", "1", "--channels", "32",
              "--heads", "4", "--max-seq-len", "32", "-b", "2", "-t", "32", "-x", "2", "-v", "2", "-m", "1", "-s", "0",
              "--seed", "1", "--window", "32", "--threads", "1", "--device", "cpu"]
    runs = tmp_path / "runs"
    sh([BIN, *common, "-o", runs / "r1_ls_s1", "--global-heads", "1"])
    sh([BIN, *common, "-o", runs / "r1_local_s1", "--global-heads", "0"])
    shutil.copytree(runs / "r1_ls_s1", tmp_path / "as_mhsa" / "r1_mhsa_s1")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"), str(runs / "r1_ls_s1"),
                        str(runs / "r1_local_s1"), str(tmp_path / "as_mhsa" / "r1_mhsa_s1")],
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert sorted((r["run"], r["T/C"], r["variant"], r["seed"]) for r in exp_summary_rows(p.stdout)) == [
        ("r1_local_s1", "1", "local", "1"), ("r1_ls_s1", "1", "ls", "1"), ("r1_mhsa_s1", "1", "mhsa", "1")]
    # the G=1 run under the all-local name, the G=0 run under the LS name: not theirs
    shutil.copytree(runs / "r1_ls_s1", tmp_path / "swapped" / "r1_local_s1")
    shutil.copytree(runs / "r1_local_s1", tmp_path / "swapped" / "r1_ls_s1")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py"),
                        str(tmp_path / "swapped" / "r1_local_s1"), str(tmp_path / "swapped" / "r1_ls_s1")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        f"note: {n}'s name says variant other than its config.json records (MHSA (P=32 >= T)): "
        "the row shows config.json's T/C, variant and seed" for n in ("r1_local_s1", "r1_ls_s1")], p.stderr


def test_the_files_beside_the_runs_of_a_glob_are_skipped_and_other_files_refused(tmp_path):
    """A new-user trial: `exp_summary.py runs/*` also matched the RUN.args, RUN.log and RUN.build files the
    experiment scripts keep beside each run and failed with ".../r2_local_s1.args/metrics.jsonl does not exist".
    Those of a run directory given too are skipped, by both scripts; any other file is refused, naming it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("r2_local_s1", "r2_ls_s1"):
        write_records(runs / name, config(model={"channels": 16, "global_heads": 1 if "ls" in name else 0,
                                                 "window": 8}, train={"seq_len": 32, "seed": 1}),
                      [train_record(s) for s in (1, 2)])
        for ext in (".args", ".log", ".build"):
            (runs / (name + ext)).write_text("x\n")
    every = sorted(str(p) for p in runs.iterdir())  # runs/*
    assert len(every) == 8
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "exp_summary.py")] + every, capture_output=True,
                       text=True)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert sorted(r["run"] for r in exp_summary_rows(p.stdout)) == ["r2_local_s1", "r2_ls_s1"]
    p = subprocess.run([sys.executable, str(PLOT)] + every + ["--out", str(tmp_path / "cmp"), "--no-figures"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr.splitlines() == [f"wrote 1 files: {tmp_path}/cmp_summary.md"], p.stderr
    assert sorted(summary_rows(tmp_path / "cmp_summary.md")) == ["r2_local_s1", "r2_ls_s1"]
    # a run's .log without its run, or another file: refused, named
    for args in ([runs / "r2_ls_s1", runs / "r2_local_s1.log"], [runs / "r2_ls_s1" / "config.json"]):
        bad = args[-1]
        for cmd in ([REPO / "scripts" / "exp_summary.py"], [PLOT, "--out", tmp_path / "no", "--no-figures"]):
            p = subprocess.run([sys.executable] + [str(c) for c in cmd + args], capture_output=True, text=True)
            assert p.returncode == 1 and p.stderr.splitlines() == [
                f"error: {bad} is not a directory; pass output directories of train_gpt2_ls (-o DIR)"], p.stderr
            assert p.stdout == "" and not (tmp_path / "no_summary.md").exists()


def test_a_run_given_twice_is_refused(tmp_path):
    """A review: `plot_run.py RUN RUN/` plotted one run as two (and exp_summary listed it twice)."""
    write_records(tmp_path / "a", config(), [train_record(s) for s in (1, 2)])
    (tmp_path / "link").symlink_to(tmp_path / "a")
    for twice in ([tmp_path / "a", f"{tmp_path}/a/"], [tmp_path / "a", tmp_path / "x" / ".." / "a"],
                  [tmp_path / "a", tmp_path / "link"]):
        (tmp_path / "x").mkdir(exist_ok=True)
        for cmd in ([REPO / "scripts" / "exp_summary.py"], [PLOT, "--out", tmp_path / "no", "--no-figures"]):
            p = subprocess.run([sys.executable] + [str(c) for c in cmd + twice], capture_output=True, text=True)
            assert p.returncode == 1 and p.stderr.splitlines() == [
                f"error: {twice[0]} and {twice[1]} are the same run directory; give each run once"], p.stderr
            assert p.stdout == "" and not (tmp_path / "no_summary.md").exists()


def test_a_summary_that_cannot_be_written_says_where_and_offers_out(tmp_path, monkeypatch, capsys):
    """A new-user trial: plot_run.py on a run in a read-only directory, without --out, failed with a bare
    "[Errno 30] Read-only file system: '.../plot_summary.md'"."""
    write_records(tmp_path / "a", config(), [train_record(s) for s in (1, 2)])
    real_open = open

    def read_only(path, mode="r", *args, **kwargs):
        if "w" in mode:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, mode, *args, **kwargs)
    monkeypatch.setattr(plot_run, "open", read_only, raising=False)
    assert plot_run.main([str(tmp_path / "a"), "--no-figures"]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"error: cannot write {tmp_path}/a/plot_summary.md (Read-only file system); give "
                                "--out PREFIX in a writable directory (e.g. --out /tmp/plots/run)"] and out == ""


def test_a_run_in_a_read_only_directory_is_plotted_with_out(tmp_path):
    """The same on a real read-only file system (a tmpfs mounted read-only: root writes into a chmod 555
    directory), and --out elsewhere plots the run."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only tmpfs needs root; the test above covers the message")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({p.stderr.strip()})")
    try:
        write_records(mnt / "a", config(), [train_record(s) for s in (1, 2)])
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        p = subprocess.run([sys.executable, str(PLOT), str(mnt / "a"), "--formats", "png"], capture_output=True,
                           text=True)
        assert p.returncode == 1 and p.stderr.splitlines() == [
            f"error: cannot write {mnt}/a/plot_summary.md (Read-only file system); give --out PREFIX in a writable "
            "directory (e.g. --out /tmp/plots/run)"], p.stderr
        p = subprocess.run([sys.executable, str(PLOT), str(mnt / "a"), "--out", str(tmp_path / "w" / "a"),
                            "--formats", "png"], capture_output=True, text=True)
        assert p.returncode == 0 and (tmp_path / "w" / "a_summary.md").exists(), p.stderr
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_custom_labels_keep_what_the_runs_differ_in(tmp_path):
    """A new-user trial: with --labels the title leaves out what the runs differ in (for the labels to show it),
    and custom labels do not: two runs of another lr showed nothing of it. A note (stderr and under the table)
    names, per label, the label the configs make and the directory."""
    write_steps(tmp_path / "a", config(train={"learning_rate": 6e-4}), 3)
    write_steps(tmp_path / "c", config(train={"learning_rate": 1e-3}), 3)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "a"), str(tmp_path / "c"), "--labels", "x,y",
                        "--out", str(tmp_path / "cmp"), "--no-figures"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == ["note: --labels: x = lr=6e-4 [a]; y = lr=1e-3 [c]",
                                     f"wrote 1 files: {tmp_path}/cmp_summary.md"], p.stderr
    summary = (tmp_path / "cmp_summary.md").read_text()
    assert "\n--labels: x = lr=6e-4 [a]; y = lr=1e-3 [c].\n" in summary, summary
    assert [r["run"] for r in summary_rows(tmp_path / "cmp_summary.md").values()] == ["x", "y"]
    # runs the configs cannot tell apart already carry their directory: not named twice
    write_steps(tmp_path / "b", config(train={"learning_rate": 6e-4}), 3)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "a"), str(tmp_path / "b"), "--labels", "x,y",
                        "--out", str(tmp_path / "same"), "--no-figures"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr.splitlines()[0] == "note: --labels: x = [a]; y = [b]", p.stderr


def test_duplicate_custom_labels_are_refused(tmp_path):
    write_steps(tmp_path / "a", config(train={"learning_rate": 6e-4}), 3)
    write_steps(tmp_path / "c", config(train={"learning_rate": 1e-3}), 3)
    p = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "a"), str(tmp_path / "c"), "--labels", "x,x",
                        "--out", str(tmp_path / "cmp"), "--no-figures"], capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.splitlines() == [
        "error: --labels gives 'x' twice; give each run its own label, or drop --labels"], p.stderr
    assert p.stdout == "" and not (tmp_path / "cmp_summary.md").exists()


def test_label_words():
    assert plot_run.label_words("LS_QK-norm 2") == ["ls", "qknorm", "2"]
    assert plot_run.label_words("MHSA, z-loss 1e-4, Soft-Cap 30, qk_clip, All-Local") == [
        "mhsa", "zloss", "1e-4", "softcap", "30", "qkclip", "alllocal"]
    assert plot_run.label_words("mhsa_qkclip7") == ["mhsa", "qkclip7"]
    assert plot_run.label_words("softcap=0, qkclip0.5, z-loss 0.0, G=1") == [
        "softcap", "0", "qkclip0.5", "zloss", "0.0", "g", "1"]


def test_label_negated():
    """The words whose absence a label names: the one after no/without/w/o/neither/nor and the list that follows
    of words of its kind, up to a word of another kind, a ")" or other punctuation."""
    def absent(text):
        words = plot_run.label_words(text)
        return [words[i] for i in sorted(plot_run.label_negated(text))]
    assert absent("LS without QK-norm or z-loss") == ["qknorm", "zloss"]
    assert absent("LS no stabilizers (qknorm/zloss)") == ["stabilizers", "qknorm", "zloss"]
    assert absent("neither QK-norm nor z-loss, MHSA") == ["qknorm", "zloss"]
    assert absent("no QK-norm 2 or z-loss 1e-4 MHSA") == ["qknorm", "2", "zloss", "1e-4"]
    assert absent("baseline (no LS) MHSA") == ["ls"]
    assert absent("LS (without z-loss) qk-clip") == ["zloss"]
    assert absent("w/o warmup, z-loss 1e-4") == ["warmup"]
    assert absent("w/o warmup nor z-loss") == ["warmup", "zloss"]
    assert absent("LS no mhsa or global, QK-norm") == ["mhsa", "global"]
    assert absent("LS QK-norm z-loss") == []
    # (review 15) a plain space does not join: the word after it is named
    assert absent("LS no z-loss QK-norm") == ["zloss"]
    assert absent("LS w/o zloss and QK-norm 1") == ["zloss", "qknorm", "1"]
    assert absent("no soft-cap 30 QK-clip 100") == ["softcap", "30"]
    assert absent("no (z-loss QK-norm) MHSA") == ["zloss", "qknorm"]
    assert absent("LS no QK-norm, z-loss 1e-4") == ["qknorm"]  # a comma outside "(" separates the label's parts
    assert absent("LS no stabilizers (QK-norm, z-loss)") == ["stabilizers", "qknorm", "zloss"]


def test_custom_labels_that_contradict_their_run_are_refused(two_runs, tmp_path):
    """A review: --labels MHSA,LS given to an LS run then an MHSA run (the directories' order swapped) drew the LS
    run as MHSA. A label naming exactly one attention kind other than its run's, or a stabilizer its run does not
    have, is refused; one naming no kind, several, or the run's, is taken."""
    _, mhsa, ls, _ = two_runs  # mhsa: MHSA with QK-Clip 100; ls: G=1/4 P=4
    # the fix: the directories' order where the label fits the other run given, else another label
    order, relabel = "give the labels in the order of the directories", "relabel it to match"

    def plot(labels, *runs):
        return subprocess.run([sys.executable, str(PLOT), *map(str, runs), "--labels", labels, "--out",
                               str(tmp_path / "cmp"), "--no-figures"], capture_output=True, text=True)
    for labels, runs, error, fix in [
            ("MHSA,LS", (ls, mhsa), f"label 'MHSA' says MHSA, but {ls}'s config.json records LS G=1/4 P=4", order),
            ("LS,MHSA", (mhsa, ls), f"label 'LS' says LS, but {mhsa}'s config.json records MHSA, QK-Clip 100",
             order),
            ("all-local,b", (ls, mhsa), f"label 'all-local' says all-local, but {ls}'s config.json records "
                                        "LS G=1/4 P=4", relabel),
            ("ls_qk-clip,b", (ls, mhsa), f"label 'ls_qk-clip' says QK-Clip, but {ls}'s config.json records "
                                         "LS G=1/4 P=4, without it", relabel),
            ("a,MHSA QK-norm", (ls, mhsa), f"label 'MHSA QK-norm' says QK-norm, but {mhsa}'s config.json records "
                                           "MHSA, QK-Clip 100, without it", relabel),
            # a value that is not 0 names the stabilizer; a negation ends at a word of another kind, a ")" or
            # other punctuation; "local" alone
            ("LS soft-cap 0.5,b", (ls, mhsa), f"label 'LS soft-cap 0.5' says soft-cap, but {ls}'s config.json "
                                              "records LS G=1/4 P=4, without it", relabel),
            ("a,z-loss 1e-4", (ls, mhsa), f"label 'z-loss 1e-4' says z-loss, but {mhsa}'s config.json records "
                                          "MHSA, QK-Clip 100, without it", relabel),
            ("baseline (no LS) MHSA,b", (ls, mhsa), f"label 'baseline (no LS) MHSA' says MHSA, but {ls}'s "
                                                    "config.json records LS G=1/4 P=4", order),
            ("LS (without z-loss) qk-clip,b", (ls, mhsa), f"label 'LS (without z-loss) qk-clip' says QK-Clip, but "
                                                          f"{ls}'s config.json records LS G=1/4 P=4, without it",
             relabel),
            ("LS w/o warmup; z-loss 1e-4,b", (ls, mhsa), f"label 'LS w/o warmup; z-loss 1e-4' says z-loss, but "
                                                         f"{ls}'s config.json records LS G=1/4 P=4, without it",
             relabel),
            ("LS without QK-norm or MHSA z-loss,b", (ls, mhsa), "label 'LS without QK-norm or MHSA z-loss' says "
                                                               f"z-loss, but {ls}'s config.json records LS G=1/4 "
                                                               "P=4, without it", relabel),
            ("local heads only,b", (ls, mhsa), f"label 'local heads only' says all-local, but {ls}'s config.json "
                                               "records LS G=1/4 P=4", relabel)]:
        p = plot(labels, *runs)
        assert p.returncode == 1 and p.stderr.splitlines() == [f"error: --labels: {error}; {fix}, or drop --labels"], \
            p.stderr
        assert p.stdout == "" and not (tmp_path / "cmp_summary.md").exists()
    for labels in ("LS,MHSA_QKclip100", "ls (local+global),global", "mhsa vs ls,MHSA", "ls no softcap,b",
                   "ls w/o z-loss,qk-clip",
                   # a review: accurate labels were refused: a stabilizer at 0, off or none names its absence;
                   # a negated kind is not named; "local" beside a layout word (G=, global, ...) is not all-local
                   "LS,z-loss 0", "LS QK-clip off,b", "LS,softcap=0", "LS soft-cap none,b", "LS qkclip0,b",
                   "LS,baseline (no LS)", "G=1 + 3 local heads,MHSA", "1 global + 3 local,b",
                   # a review: a negation covered only the word after it, not the list that follows
                   "LS without QK-norm or z-loss,MHSA", "LS no stabilizers (qknorm/zloss),b",
                   "LS neither QK-norm nor soft-cap,b", "LS w/o any z-loss and qk-clip 100,b",
                   "LS no extra stabilizers (QK-norm 2/z-loss 1e-4),MHSA qk-clip"):
        p = plot(labels, ls, mhsa)
        assert p.returncode == 0, (labels, p.stderr)
    # a window not below T: LS with its local heads, computing as MHSA; either name is the run's
    big = tmp_path / "big"
    cfg = json.loads((ls / "config.json").read_text())
    cfg["model"]["window"] = 32
    write_steps(big, cfg, 3)
    for labels in ("LS,b", "MHSA,b"):
        assert plot(labels, big, mhsa).returncode == 0
    p = plot("all-local,b", big, mhsa)
    assert p.stderr.splitlines() == [f"error: --labels: label 'all-local' says all-local, but {big}'s config.json "
                                     f"records MHSA (P=32 >= T); {relabel}, or drop --labels"], p.stderr
