"""Tests of the experiment scripts (docs/experiments.md): scripts/plot_run.py on a tiny real run (files
written, every summary value equal to the number recomputed here from the jsonl files, a partial last
line ignored, a damaged middle line refused), its own spike rule on hand-made records, and the CPU
smoke modes of scripts/exp_synthetic.sh, scripts/exp_pg19.sh and scripts/exp_text_ratio.sh.

The trainer is $TRAINER, else $TRAIN_GPT2_LS, else the repository's ./train_gpt2_ls (`make` builds it).
"""
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TRAINER", os.environ.get("TRAIN_GPT2_LS", REPO / "train_gpt2_ls")))
SHARED = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))
PLOT = REPO / "scripts" / "plot_run.py"
ENV = dict(os.environ, TRAINER=str(BIN), PYTHON=sys.executable, OMP_NUM_THREADS="1")


def sh(cmd, check=True, timeout=120):
    p = subprocess.run([str(c) for c in cmd], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stderr[-3000:]}\n{p.stdout[-2000:]}")
    return p


def need_trainer():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls` (or set TRAINER)")


def records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def table_rows(md):
    """{dir: {column: cell}} from the markdown summary table."""
    lines = [ln for ln in Path(md).read_text().splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        row = dict(zip(head, cells))
        rows[row["dir"]] = row
    return rows


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A 24-step run of a tiny MHSA model on a small synthetic language, validation every 5 steps."""
    need_trainer()
    d = tmp_path_factory.mktemp("exp")
    data = d / "data"
    sh([sys.executable, REPO / "data" / "prepare.py", "--dataset", "synthetic", "--out", data, "--workers", "1",
        "--syn-vocab", "16", "--syn-length", "20000", "--syn-doc-len", "1024", "--syn-copy-min-dist", "8",
        "--syn-copy-max-dist", "64"])
    out = d / "run_mhsa"
    sh([BIN, "-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin", "-o", out, "--layers", "1", "--channels", "16",
        "--heads", "4", "--global-heads", "4", "--max-seq-len", "32", "-b", "4", "-t", "32", "-x", "24", "-v", "5",
        "-m", "2", "-s", "0", "-l", "3e-2", "-u", "3", "--spike-window", "5", "--spike-z", "1.5", "--threads", "1",
        "--device", "cpu"])
    return d, out


def expected_summary(run, threshold):
    """The summary numbers recomputed directly from the files, independently of plot_run.py."""
    m = records(run / "metrics.jsonl")
    train = [r for r in m if "loss" in r]
    val = [r for r in m if "val_loss" in r]
    logits = [(r["max_attn_logit"], r["step"]) for r in train]
    peak, peak_step = max(logits)
    cross = [s for x, s in logits if x > threshold]
    return {"steps": str(train[-1]["step"]),
            "final val loss": f"{val[-1]['val_loss']:.4f}",
            "val ppl": f"{math.exp(val[-1]['val_loss']):.2f}",
            "final train loss": f"{train[-1]['loss']:.4f}",
            "peak max-logit": f"{peak:.3f}",
            "at step": str(peak_step),
            f"first step > {threshold:g}": str(cross[0]) if cross else "-",
            "loss spikes": str(sum(r["spike"] for r in train)),
            "non-finite steps": "0"}


def test_plot_run_files_and_summary_values(tiny_run):
    d, run = tiny_run
    logits = sorted(r["max_attn_logit"] for r in records(run / "metrics.jsonl") if "loss" in r)
    threshold = round(logits[len(logits) // 2], 6)  # the median: crossed somewhere mid-run
    prefix = d / "plots" / "one"
    p = sh([sys.executable, PLOT, run, "--out", prefix, "--threshold", threshold, "--heads", "all"])
    for name in ["loss", "logits", "entropy", "near_mass", "near_far_logits"]:
        for ext in ["png", "svg"]:
            f = Path(f"{prefix}_{name}.{ext}")
            assert f.exists() and f.stat().st_size > 1000, f
    rows = table_rows(f"{prefix}_summary.md")
    assert list(rows) == ["run_mhsa"]
    got, want = rows["run_mhsa"], expected_summary(run, threshold)
    for k, v in want.items():
        assert got[k] == v, (k, got[k], v)
    assert want[f"first step > {threshold:g}"] != "-"
    assert "MHSA" in got["run"]
    assert "| run_mhsa |" in p.stdout  # the table is printed too


def test_plot_run_ignores_partial_last_line_and_refuses_damage(tiny_run):
    d, run = tiny_run
    cut = d / "run_cut"
    shutil.copytree(run, cut)
    with open(cut / "metrics.jsonl", "a") as f:
        f.write('{"step":25,"loss":9.99,"z_lo')
    with open(cut / "logit_stats.jsonl", "a") as f:
        f.write('{"step":25,"num_layers":1,"num_he')
    prefix = d / "plots" / "cut"
    sh([sys.executable, PLOT, cut, "--out", prefix, "--threshold", "1", "--formats", "png"])
    got, want = table_rows(f"{prefix}_summary.md")["run_cut"], expected_summary(run, 1.0)
    for k, v in want.items():
        assert got[k] == v, (k, got[k], v)

    bad = d / "run_bad"
    shutil.copytree(run, bad)
    lines = (bad / "metrics.jsonl").read_text().splitlines()
    lines[3] = lines[3][:20]
    (bad / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    p = sh([sys.executable, PLOT, bad, "--out", d / "plots" / "bad"], check=False)
    assert p.returncode == 1
    assert p.stderr.startswith("error: ") and "metrics.jsonl:4" in p.stderr and p.stderr.count("\n") == 1


def test_plot_run_own_spike_rule_and_labels(tmp_path):
    """Records without the trainer's spike flags (and no config.json): spikes are counted with the
    documented rule (loss z-score > 6 against the previous 100 finite losses); non-finite steps count."""
    run = tmp_path / "handmade"
    run.mkdir()
    recs = [{"step": 0, "val_loss": 5.0}]
    for s in range(1, 161):
        loss = 4.0 + 0.01 * ((s * 7) % 5 - 2)  # small deterministic wiggle
        if s in (120, 140):
            loss = 6.0  # two spikes
        if s == 150:
            loss = None  # non-finite
        recs.append({"step": s, "loss": loss, "max_attn_logit": s / 10})
    recs.append({"step": 160, "loss": recs[-1]["loss"], "max_attn_logit": 16.0, "val_loss": 3.5})
    with open(run / "metrics.jsonl", "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    prefix = tmp_path / "p"
    sh([sys.executable, PLOT, run, "--out", prefix, "--threshold", "10", "--formats", "png"])
    row = table_rows(f"{prefix}_summary.md")["handmade"]
    assert row["loss spikes"] == "2"
    assert row["non-finite steps"] == "1"
    assert row["first step > 10"] == "101"
    assert row["peak max-logit"] == "16.000" and row["at step"] == "160"
    assert row["final val loss"] == "3.5000" and row["val ppl"] == f"{math.exp(3.5):.2f}"
    assert "own: loss z>6" in Path(f"{prefix}_summary.md").read_text()


def test_plot_run_near_far_values_and_skip_note(tiny_run):
    """The near/far plots read exactly the records' near_mass / near_max / far_max (null far max ->
    NaN), on a mixed run with --near 3 (global heads have far keys, local heads with P = 3 none);
    a run without the fields (older versions, the CUDA backend) gets a note and no near/far files."""
    d, _ = tiny_run
    run = d / "run_near"
    sh([BIN, "-i", f"{d}/data/train_*.bin", "-o", run, "--layers", "2", "--channels", "16", "--heads", "4",
        "--global-heads", "1", "--window", "3", "--near", "3", "--max-seq-len", "32", "-b", "2", "-t", "32",
        "-x", "6", "-v", "0", "-s", "0", "-l", "3e-2", "--threads", "1", "--device", "cpu"])
    recs = records(run / "logit_stats.jsonl")
    sys.path.insert(0, str(PLOT.parent))
    import plot_run
    steps, mass, nmax, fmax, glob, near = plot_run.near_far_arrays(plot_run.Run(str(run)))
    assert steps == [r["step"] for r in recs] and near == 3 and glob == [False, False, False, True]
    for k, r in enumerate(recs):
        for a in r["attn"]:
            assert mass[k, a["layer"], a["head"]] == a["near_mass"]
            assert nmax[k, a["layer"], a["head"]] == a["near_max"]
            if a["global"]:
                assert fmax[k, a["layer"], a["head"]] == a["far_max"]
            else:
                assert a["far_max"] is None and math.isnan(fmax[k, a["layer"], a["head"]])
    prefix = d / "plots" / "near"
    p = sh([sys.executable, PLOT, run, "--out", prefix, "--formats", "png"])
    assert "near/far" not in p.stderr
    for name in ["near_mass", "near_far_logits"]:
        assert Path(f"{prefix}_{name}.png").stat().st_size > 1000, name

    old = d / "run_no_near"  # the same run as an older version or the CUDA backend writes it
    shutil.copytree(run, old)
    keep = {"layer", "head", "global", "max", "min", "entropy"}
    with open(old / "logit_stats.jsonl", "w") as f:
        for r in recs:
            r = {k: v for k, v in r.items() if k != "near"}
            r["attn"] = [{k: v for k, v in a.items() if k in keep} for a in r["attn"]]
            f.write(json.dumps(r) + "\n")
    assert plot_run.near_far_arrays(plot_run.Run(str(old))) is None
    prefix = d / "plots" / "no_near"
    p = sh([sys.executable, PLOT, old, "--out", prefix, "--formats", "png"])
    assert "note: no near/far statistics" in p.stderr
    assert not Path(f"{prefix}_near_mass.png").exists() and not Path(f"{prefix}_near_far_logits.png").exists()
    assert Path(f"{prefix}_logits.png").stat().st_size > 1000


def test_plot_run_missing_dir(tmp_path):
    p = sh([sys.executable, PLOT, tmp_path / "nope", "--out", tmp_path / "x"], check=False)
    assert p.returncode == 1 and p.stderr.startswith("error: ") and "metrics.jsonl" in p.stderr


def test_exp_synthetic_smoke(tmp_path):
    need_trainer()
    out = tmp_path / "syn"
    p = sh(["bash", REPO / "scripts" / "exp_synthetic.sh", "--smoke", "--out", out, "--threads", "1"])
    rows = table_rows(out / "summary.md")
    assert sorted(rows) == sorted(f"C16_T{t}_{v}" for t in (32, 64) for v in ("mhsa", "ls", "local"))
    for name in ["all_loss.png", "all_logits.png", "all_entropy.png", "all_ratio.png", "all_ratio.svg",
                 "C16_T32_logits.png", "C16_T64_loss.png"]:
        assert (out / "plots" / name).stat().st_size > 1000, name
    assert "summary" in p.stdout


def test_exp_pg19_smoke(tmp_path):
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "pg19"
    sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--out", out, "--source", SHARED / "pg19"])
    rows = table_rows(out / "summary.md")
    assert sorted(rows) == sorted(["mhsa", "ls", "mhsa_qknorm", "mhsa_zloss", "mhsa_softcap", "mhsa_qkclip"])
    cfg = json.loads((out / "runs" / "mhsa_softcap" / "config.json").read_text())
    assert cfg["model"]["attn_softcap"] == 50 and cfg["model"]["global_heads"] == 6
    cfg = json.loads((out / "runs" / "mhsa_qkclip" / "config.json").read_text())
    assert cfg["train"]["qk_clip"] == 100 and cfg["model"]["global_heads"] == 6
    assert json.loads((out / "runs" / "ls" / "config.json").read_text())["model"]["global_heads"] == 1
    for name in ["pg19_loss.png", "pg19_logits.svg", "pg19_entropy.png"]:
        assert (out / "plots" / name).stat().st_size > 1000, name


def test_exp_text_ratio_smoke_and_resume(tmp_path):
    """scripts/exp_text_ratio.sh --smoke: every planned run trains with its variant's flags and the near/far
    statistics, the summary has one row per run (T = ratio x C, near mass only where there are global heads),
    and a second start skips the finished runs."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "ratio"
    cmd = ["bash", REPO / "scripts" / "exp_text_ratio.sh", "--smoke", "--out", out, "--source", SHARED / "pg19",
           "--variants", "mhsa ls local mhsa_qkclip mhsa_qkclip5", "--jobs", "2"]
    p = sh(cmd, timeout=600)
    names = sorted(d.name for d in (out / "runs").iterdir() if d.is_dir())
    assert names == sorted([f"r{r}_{v}_s1" for r in (2, 4) for v in ("mhsa", "ls", "local", "mhsa_qkclip",
                                                                        "mhsa_qkclip5")]
                           + ["r2_mhsa_s2", "r2_ls_s2"])
    for name in names:
        cfg = json.loads((out / "runs" / name / "config.json").read_text())
        ratio, variant = int(name[1:].split("_")[0]), name.split("_", 1)[1].rsplit("_s", 1)[0]
        assert cfg["train"]["seq_len"] == ratio * cfg["model"]["channels"] == ratio * 16
        assert cfg["model"]["global_heads"] == {"mhsa": 2, "mhsa_qkclip": 2, "mhsa_qkclip5": 2, "ls": 1,
                                                "local": 0}[variant]
        assert cfg["train"]["near"] == cfg["model"]["window"] == 4
        assert cfg["train"]["qk_clip"] == {"mhsa_qkclip": 30, "mhsa_qkclip5": 5}.get(variant, 0)
        stats = records(out / "runs" / name / "logit_stats.jsonl")
        assert "near_mass" in stats[-1]["attn"][0]
    lines = [ln for ln in (out / "summary.md").read_text().splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, [c.strip() for c in ln.strip("|").split("|")])) for ln in lines[2:]]
    assert len(rows) == len(names)
    for r in rows:
        assert r["T"] == str(int(r["T/C"]) * 16) and r["steps"] == "6"
        T = int(r["T"])  # uniform causal attention's mass on the 4 nearest keys, averaged over the rows
        assert r["near mass if uniform"] == f"{sum(min(i + 1, 4) / (i + 1) for i in range(T)) / T:.3f}"
        assert (r["near mass (global heads)"] == "-") == (r["variant"] == "local")
        if r["variant"] != "local":
            assert 0 < float(r["near mass (global heads)"]) <= 1
    assert (out / "plots" / "all_ratio.png").stat().st_size > 1000
    again = sh(cmd, timeout=300)
    assert "== " not in again.stderr.replace("== summary", ""), again.stderr  # nothing trained again
    assert "summary" in p.stderr
