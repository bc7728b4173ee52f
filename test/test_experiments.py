"""Tests of the experiment scripts (docs/experiments.md): scripts/plot_run.py on a tiny real run (files
written, every summary value equal to the number recomputed here from the jsonl files, a partial last
line ignored, a damaged middle line refused), its own spike rule on hand-made records, and the CPU
smoke modes of scripts/exp_synthetic.sh, scripts/exp_pg19.sh (with the paper preset configs/paper_pg19.toml:
one GPU window's stages with a budget, runs at once, checks that pass and fail, the packed results;
scripts/pack_results.py on hand-made runs) and scripts/exp_text_ratio.sh.

The trainer is $TRAINER, else $TRAIN_GPT2_LS, else the repository's ./train_gpt2_ls (`make` builds it).
"""
import hashlib
import json
import re
import math
import os
import shutil
import subprocess
import tarfile
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TRAINER", os.environ.get("TRAIN_GPT2_LS", REPO / "train_gpt2_ls")))
SHARED = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))
PLOT = REPO / "scripts" / "plot_run.py"
ENV = dict(os.environ, TRAINER=str(BIN), PYTHON=sys.executable, OMP_NUM_THREADS="1")


def sh(cmd, check=True, timeout=120, env=None):
    """cmd from the repository with ENV (and `env`'s variables over it)"""
    p = subprocess.run([str(c) for c in cmd], cwd=REPO, env=dict(ENV, **(env or {})), capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stderr[-3000:]}\n{p.stdout[-2000:]}")
    return p


def need_trainer():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls` (or set TRAINER)")


def other_build(tmp_path):
    """Another trainer binary (a script running BIN): what a rebuild after a change is to the scripts' build
    record (RUN.build). Returns its path."""
    path = tmp_path / "other_trainer"
    path.write_text(f'#!/bin/sh\nexec "{BIN}" "$@"\n')
    path.chmod(0o755)
    return path


def sources_digest(tree):
    return subprocess.run(["bash", REPO / "scripts" / "build_digest.sh", tree], capture_output=True, text=True,
                          check=True).stdout.strip()


def build_line(path):
    """RUN.build's first line (the one compared) for the trainer at path: the repository's by its sources' digest
    ("sources <digest>"), another by its binary's sha256 ("sha256 <16 hex digits>"); no path."""
    if Path(path).resolve() == (REPO / "train_gpt2_ls").resolve():
        return f"sources {sources_digest(REPO)}"
    return f"sha256 {hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]}"


def build_shown(path):
    """How the scripts' messages name the trainer at path: build_line's text " of " where it was built (REPO for
    the repository's own, else path)."""
    where = REPO if Path(path).resolve() == (REPO / "train_gpt2_ls").resolve() else path
    return f"{build_line(path)} of {where}"


def meta_only_data(path, vocab=1024):
    """A PG-19 SentencePiece data folder at path holding only its meta.json (no shards); returns path."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "meta.json").write_text(json.dumps({"dataset": "pg19", "tokenizer": "sp", "vocab_size": vocab}))
    return path


def exp_pg19_failing_check(data, out, res):
    """exp_pg19.sh's command for a one-variant (mhsa) CPU start on data, results to res, whose one check fails."""
    return [str(a) for a in ["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--vocab", 1024, "--device",
                             "cpu", "--steps", 1, "--variants", "mhsa", "--out", out, "--results", res,
                             "--check-cmd", "exit 3"]]


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


def test_plot_run_marks_a_validation_before_the_last_step_and_none(tmp_path):
    """The summary's final val loss is the last validation: when that is not at the run's last step (a run stopped
    before its first -v has only step 0's, the untrained model's) the cell says its step; a run without -j has
    "-" (it said "nan", as for a diverged run)."""
    early = tmp_path / "early"
    early.mkdir()
    recs = [{"step": 0, "val_loss": 9.2337}] + [{"step": s, "loss": 9.0 - s, "max_attn_logit": 1.0} for s in (1, 2, 3)]
    (early / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    none = tmp_path / "noval"
    none.mkdir()
    (none / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[1:]))
    prefix = tmp_path / "p"
    sh([sys.executable, PLOT, early, none, "--out", prefix, "--formats", "png"])
    rows = table_rows(f"{prefix}_summary.md")
    assert rows["early"]["final val loss"] == "9.2337 (step 0)" and rows["early"]["steps"] == "3", rows
    assert rows["early"]["val ppl"] == f"{math.exp(9.2337):.2f}"
    assert rows["noval"]["final val loss"] == "-" and rows["noval"]["val ppl"] == "-", rows


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
    steps, mass, nmax, fmax, glob, nears = plot_run.near_far_arrays(plot_run.Run(str(run)))
    assert steps == [r["step"] for r in recs] and nears == [3] * len(recs) and glob == [False, False, False, True]
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
    assert f"== data: {out}/data (synthetic language: vocabulary 16, copies 8-64 tokens back (rate 0.1), order 3)" \
        in p.stdout.splitlines(), p.stdout


def test_exp_synthetic_smoke_takes_the_steps_and_grid_given(tmp_path):
    """--smoke sets small defaults, but a --steps or --grid typed beside it is used (both were dropped without a
    word: `--smoke --steps 8` trained the smoke's 6 steps). The trainer's note: lines reach the console as
    "== NAME: note: ...", as in exp_pg19.sh (a grid point with T <= P, whose local heads compute as global ones,
    said so only in its runs' logs)."""
    need_trainer()
    out = tmp_path / "syn"
    p = sh(["bash", REPO / "scripts" / "exp_synthetic.sh", "--smoke", "--out", out, "--threads", "1", "--steps", 1,
            "--grid", "16:8", "--plots", 0])
    runs = out / "runs"
    # --plots 0: the summary table alone
    assert sorted(f.name for f in (out / "plots").iterdir()) == ["all_summary.md"]
    assert table_rows(out / "summary.md").keys() == {"C16_T8_mhsa", "C16_T8_ls", "C16_T8_local"}
    assert sorted(d.name for d in runs.iterdir() if d.is_dir()) == ["C16_T8_local", "C16_T8_ls", "C16_T8_mhsa"]
    for d in runs.iterdir():
        if d.is_dir():
            assert (d / "DONE_00000001").exists(), sorted(os.listdir(d))
            assert [r["step"] for r in records(d / "metrics.jsonl") if "loss" in r] == [1]
    assert "steps=1" in p.stdout
    for name in ("C16_T8_ls", "C16_T8_local"):
        assert f"== {name}: note: --window 8 is not below -t 8" in p.stdout, p.stdout
        assert f"== {name}: note: --warmup-steps 2 is longer than the run's 1 steps" in p.stdout, p.stdout
    assert "== C16_T8_mhsa: note: --window" not in p.stdout, p.stdout


def test_exp_synthetic_reuses_a_run_only_for_the_same_settings(tmp_path):
    """Started again on the same --out, a finished run is reused only when its recorded settings equal the
    ones asked: another --lr or --steps is refused with one line naming the flags, before anything runs and
    with every file kept (the script once reported the earlier runs as "done already" for another --lr, and
    deleted and retrained them for another --steps); --force replaces such a run alone, saying so."""
    need_trainer()
    data = tmp_path / "data"  # validation: 5% of 30 documents of 1024 tokens, more than one step's 2048
    sh([sys.executable, REPO / "data" / "prepare.py", "--dataset", "synthetic", "--out", data, "--workers", "1",
        "--syn-vocab", "16", "--syn-length", "60000", "--syn-doc-len", "1024", "--syn-copy-min-dist", "8",
        "--syn-copy-max-dist", "64", "--val-fraction", "0.1"])
    out = tmp_path / "syn"
    base = ["bash", REPO / "scripts" / "exp_synthetic.sh", "--out", out, "--data", data, "--grid", "16:32",
            "--threads", "1", "--plots", "0"]  # the plots are test_exp_synthetic_smoke's
    sh(base + ["--steps", 2])
    runs = out / "runs"
    names = ["C16_T32_mhsa", "C16_T32_ls", "C16_T32_local"]

    def files():
        return {str(f.relative_to(runs)): f.read_bytes() for f in runs.rglob("*") if f.is_file()}
    before = files()
    assert all(f"{n}/DONE_00000002" in before for n in names)
    for args, was, now in [(["--steps", 2, "--lr", "3e-3"], "-l 1e-2", "-l 3e-3"),
                           (["--steps", 3], "-x 2", "-x 3")]:
        p = sh(base + args, check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
        assert f"{runs / 'C16_T32_mhsa'} holds a run of other settings" in p.stderr, p.stderr
        assert was in p.stderr and now in p.stderr and "another --out" in p.stderr and "--force" in p.stderr
        assert "==" not in p.stdout, p.stdout
        assert files() == before
    # a run of another trainer build (RUN.build) is not taken as this one's either (the script once called an
    # earlier build's finished runs "done already" and continued its unfinished ones with the new build)
    assert (runs / "C16_T32_mhsa.build").read_text().splitlines()[0] == build_line(BIN)
    other = other_build(tmp_path)
    p = sh(base + ["--steps", 2], check=False, env={"TRAINER": str(other)})
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"error: {runs / 'C16_T32_mhsa'} was trained by another trainer build "
                               f"({build_shown(BIN)}, commit "), p.stderr
    assert f"this one: {build_shown(other)}, commit " in p.stderr, p.stderr
    assert "another --out" in p.stderr and "--force" in p.stderr and "==" not in p.stdout, p.stdout
    assert files() == before
    # (a review) the same sources rebuilt are the same trainer (two nvcc builds differ byte for byte): the
    # binary's sha256 in RUN.build is for the record
    record = (runs / "C16_T32_mhsa.build").read_text()
    assert record.splitlines()[2].startswith("binary sha256 ") and record.splitlines()[3] == f"repository {REPO}"
    (runs / "C16_T32_mhsa.build").write_text(record.replace(record.splitlines()[2], "binary sha256 0000000000000000"))
    p = sh(base + ["--steps", 2])
    assert f"== {runs / 'C16_T32_mhsa'} done already" in p.stdout, p.stdout
    before = files()
    (runs / "C16_T32_ls.args").unlink()  # a run with no record of its settings is not taken as this one's
    p = sh(base + ["--steps", 2], check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert f"{runs / 'C16_T32_ls'} holds a run with no record of its settings" in p.stderr, p.stderr
    # --force: that run alone is deleted and trained again; the two of the same settings are reused
    p = sh(base + ["--steps", 2, "--force"])
    assert [ln for ln in p.stderr.splitlines() if "note: --force" in ln] == [
        f"note: --force: deleting {runs / 'C16_T32_ls'}, which holds a run with no record of its settings "
        f"({runs / 'C16_T32_ls'}.args is missing)"], p.stderr
    assert [ln for ln in p.stdout.splitlines() if "done already" in ln] == [
        f"== {runs / n} done already" for n in names if n != "C16_T32_ls"], p.stdout
    after = files()
    assert {k: v for k, v in after.items() if not k.startswith("C16_T32_ls")} == {
        k: v for k, v in before.items() if not k.startswith("C16_T32_ls")}
    assert after["C16_T32_ls/DONE_00000002"] is not None and "-l 1e-2" in after["C16_T32_ls.args"].decode()
    assert sorted(r["step"] for r in records(runs / "C16_T32_ls" / "metrics.jsonl") if "loss" in r) == [1, 2]


def test_run_build_is_the_same_for_the_same_sources_in_another_checkout(tmp_path):
    """(a review) RUN.build named the trainer by "sources <digest> of <REPO>", all of it compared, so the same
    sources in another checkout (the device machine's copy of the tree at another root) were "another trainer
    build": refused, and --force deleted good runs. Only the digest is compared; the path is for the record."""
    need_trainer()
    copy = tmp_path / "copy"
    for line in subprocess.run(["bash", REPO / "scripts" / "build_digest.sh", "--list", REPO], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        rel = line.split("  ", 1)[1]
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, copy / rel)
    (copy / "scripts").mkdir(exist_ok=True)
    shutil.copy2(REPO / "scripts" / "build_digest.sh", copy / "scripts" / "build_digest.sh")
    shutil.copy2(BIN, copy / "train_gpt2_ls")
    assert sources_digest(copy) == sources_digest(REPO)
    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")  # a run exists

    def check(record_of, checked_with, text=None):
        """build_check on run, its RUN.build written for the trainer of tree record_of (or text), checked with the
        trainer of tree checked_with: (status, stdout, stderr)"""
        write = (f'build_write "$RUN" "$(trainer_build "$A/train_gpt2_ls" "$A" abc)"' if text is None else
                 'printf "%s" "$TEXT" > "$RUN.build"')
        p = sh(["bash", "-c", f'source scripts/exp_run_settings.sh; {write}; '
                'build_check "$RUN" 0 "$(trainer_build "$B/train_gpt2_ls" "$B" def)"'], check=False,
               env={"RUN": str(run), "A": str(record_of), "B": str(checked_with), "TEXT": text or ""})
        return p.returncode, p.stdout, p.stderr

    assert check(REPO, copy) == (0, "", "")
    assert check(copy, REPO) == (0, "", "")
    assert (run.parent / "x.build").read_text().splitlines() == [
        f"sources {sources_digest(REPO)}", "commit abc", f"binary sha256 {hashlib.sha256(BIN.read_bytes()).hexdigest()[:16]}",
        f"repository {copy}"]
    # a RUN.build of the scripts before this (the path on the first line) is read by its digest
    old = f"sources {sources_digest(REPO)} of /elsewhere/repo\ncommit abc\nbinary sha256 0000000000000000\n"
    assert check(None, copy, text=old) == (0, "", "")
    # other sources are another build, in any checkout, and the message names both with their paths
    (copy / "llmc" / "app" / "threads.h").write_text((REPO / "llmc" / "app" / "threads.h").read_text() + "\n")
    status, out, err = check(REPO, copy)
    assert status == 1 and err == "", err
    assert out.startswith(f"{run} was trained by another trainer build (sources {sources_digest(REPO)} of {REPO}, "
                          f"commit abc; this one: sources {sources_digest(copy)} of {copy}, commit def); "), out
    status, out, _ = check(None, copy, text=old)
    assert status == 1 and f"(sources {sources_digest(REPO)} of /elsewhere/repo, commit abc;" in out, out


def test_exp_synthetic_refuses_data_other_than_the_synthetic_language(tmp_path):
    """(a new-user trial) `exp_synthetic.sh --data data/shards/tinyshakespeare_gpt2` trained the grid on GPT-2 BPE
    Shakespeare without a word (only the summary's title named the data). Data that is not the synthetic language
    is refused with one line before any run; the header names the language's parameters."""
    need_trainer()
    data = meta_only_data(tmp_path / "text_sp")
    p = sh(["bash", REPO / "scripts" / "exp_synthetic.sh", "--smoke", "--out", tmp_path / "o", "--data", data],
           check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [
        f"error: --data {data} holds 'pg19' data (tokenizer 'sp', vocabulary 1024), not the synthetic language this "
        "experiment is about; give --data a folder of data/prepare.py --dataset synthetic, or drop --data"], p.stderr
    assert not (tmp_path / "o" / "runs").exists() or not any((tmp_path / "o" / "runs").iterdir())


@pytest.mark.parametrize("variant", ["mhsa_softcap0", "mhsa_qkclip0", "mhsa_qkclip050", "mhsa_lss"])
def test_exp_text_ratio_refuses_a_variant_it_cannot_name_honestly(tmp_path, variant):
    """(a new-user trial) --variants mhsa_softcap0 trained --attn-softcap 0, which is off: a plain MHSA run
    listed as mhsa_softcap0. A threshold of 0 (or with a leading 0, another name for the same run) is refused
    with the unknown variants, before anything is made."""
    p = sh(["bash", REPO / "scripts" / "exp_text_ratio.sh", "--smoke", "--out", tmp_path / "o", "--variants",
            f"mhsa {variant}"], check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [
        f"error: unknown variant '{variant}'; pick from: mhsa ls local mhsa_qknorm mhsa_zloss mhsa_softcap "
        "mhsa_qkclip (mhsa_softcapN, mhsa_qkclipN: threshold N >= 1, no leading 0: 0 turns it off)"], p.stderr
    assert not (tmp_path / "o").exists()


def test_exp_text_ratio_refuses_runs_of_other_settings(tmp_path):
    """A run directory of another experiment (its recorded settings differ, or are missing) stops the script
    with one line before anything is tokenized or trained, and stays as it was."""
    need_trainer()
    out = tmp_path / "ratio"
    run = out / "runs" / "r2_mhsa_s1"
    run.mkdir(parents=True)
    (run / "DONE_00000006").write_text("")
    cmd = ["bash", REPO / "scripts" / "exp_text_ratio.sh", "--smoke", "--out", out, "--source", tmp_path / "none",
           "--variants", "mhsa", "--key-seeds", ""]
    p = sh(cmd, check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert f"error: {run} holds a run with no record of its settings" in p.stderr and "--force" in p.stderr
    (out / "runs" / "r2_mhsa_s1.args").write_text("-x 99\n")
    p = sh(cmd, check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert f"error: {run} holds a run of other settings (it has -x 99; asked: " in p.stderr, p.stderr
    assert "-x 6" in p.stderr
    assert sorted(os.listdir(run)) == ["DONE_00000006"] and not (out / "data").exists()
    p = sh(cmd + ["--force"], check=False)  # replaced: on to the (here missing) text
    assert f"note: --force: deleting {run}" in p.stderr and "no pg19 text at" in p.stderr, p.stderr
    assert not run.exists()


PAPER = {  # configs/paper_pg19.toml: the paper code's values (docs/experiments.md, "PG-19, the paper's setting")
    "model": "ls-small", "layers": 6, "channels": 192, "heads": 6, "max-seq-len": 2048, "global-heads": 1,
    "window": 50, "bias": 0, "gelu": "erf", "untie-embeddings": True, "seq-len": 2048, "batch-size": 64,
    "total-batch-size": 524288, "max-steps": 50000, "learning-rate": 0.0006, "weight-decay": 0.1, "beta1": 0.9,
    "beta2": 0.95, "grad-clip": 1, "warmup-steps": 2000, "lr-schedule": "constant", "val-every": 500,
    "val-batches": -1, "sample-every": 0, "near": 50, "logit-stats-every": 1, "sampler": "random",
    "train-data": "data/shards/pg19_sp/train_*.bin", "val-data": "data/shards/pg19_sp/val_*.bin",
    "expect-tokenizer": "sp", "expect-vocab": 10000}


def test_paper_preset_values_and_trainer_reads_it(tmp_path):
    """The preset holds exactly the documented keys and values, and the trainer takes every setting not
    overridden on the command line from it (a tiny shape given on the command line, as exp_pg19.sh --smoke does)."""
    import tomllib
    cfg = tomllib.loads((REPO / "configs" / "paper_pg19.toml").read_text())
    assert cfg == PAPER
    need_trainer()
    data = tmp_path / "data"
    sh([sys.executable, REPO / "data" / "prepare.py", "--dataset", "synthetic", "--out", data, "--workers", "1",
        "--syn-vocab", "16", "--syn-length", "20000", "--syn-doc-len", "1024"])
    out = tmp_path / "run"
    cmd = [BIN, "--config", REPO / "configs" / "paper_pg19.toml", "-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin",
           "-o", out, "--layers", "1", "--channels", "48", "--max-seq-len", "64", "-t", "64", "-b", "2", "-d", "128",
           "-x", "2", "-m", "1", "--device", "cpu", "--threads", "1"]
    p = sh(cmd, check=False)  # the preset expects the paper's data (SentencePiece 10000), not this
    assert p.returncode == 1 and p.stderr.startswith(f"error: -i '{data}/train_*.bin' holds tokenizer synthetic"), p.stderr
    assert not out.exists()
    sh(cmd + ["--expect-tokenizer", "synthetic", "--expect-vocab", "17"])  # --syn-vocab 16 + the end-of-text token
    rec = json.loads((out / "config.json").read_text())
    m, t = rec["model"], rec["train"]
    assert (m["num_heads"], m["global_heads"], m["window"]) == (6, 1, 50)
    assert m["bias"] is False and m["gelu"] == "erf" and m["tied_embeddings"] is False
    assert t["lr_schedule"] == "constant" and t["warmup_steps"] == 2000 and t["near"] == 50
    assert t["sampler"] == "random"  # the paper's get_batch
    assert (t["expect_tokenizer"], t["expect_vocab"]) == ("synthetic", 17)  # the flags given win
    assert math.isclose(t["learning_rate"], 6e-4, rel_tol=1e-6) and math.isclose(t["weight_decay"], 0.1, rel_tol=1e-6)
    assert math.isclose(t["beta2"], 0.95, rel_tol=1e-6) and t["val_every"] == 500 and t["sample_every"] == 0
    lrs = [r["lr"] for r in records(out / "metrics.jsonl") if "loss" in r]
    assert [round(x / 6e-4 * 2000, 3) for x in lrs] == [1.0, 2.0]  # the paper's warmup: 2000 steps


PG19_VARIANTS = {"mhsa": 6, "ls": 1, "local": 0, "mhsa_qknorm": 6, "mhsa_zloss": 6, "mhsa_softcap": 6, "mhsa_qkclip": 6}


def test_exp_pg19_smoke(tmp_path):
    """Every variant with the paper preset (tiny shapes on the command line), one after another: the preset's
    settings and each variant's flags reach config.json, the summary and window tables have a row per run, and
    the results folder holds one archive of logs per run (no checkpoints) beside the report."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "pg19"
    p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--out", out, "--source", SHARED / "pg19",
            "--variants", " ".join(PG19_VARIANTS)], timeout=300)
    assert "== checks: SKIPPED on the CPU" in p.stdout and "== build: skipped" in p.stdout
    rows = table_rows(out / "summary.md")
    assert sorted(rows) == sorted(PG19_VARIANTS)
    for v, g in PG19_VARIANTS.items():
        cfg = json.loads((out / "runs" / v / "config.json").read_text())
        m, t = cfg["model"], cfg["train"]
        assert m["global_heads"] == g and m["bias"] is False and m["gelu"] == "erf" and m["tied_embeddings"] is False
        assert t["lr_schedule"] == "constant" and t["max_steps"] == 4 and t["logit_stats_every"] == 1
        assert m["attn_softcap"] == (50 if v == "mhsa_softcap" else 0)
        assert t["qk_clip"] == (100 if v == "mhsa_qkclip" else 0)
        assert m["qk_norm"] == (v == "mhsa_qknorm") and math.isclose(t["z_loss"], 1e-4 if v == "mhsa_zloss" else 0, rel_tol=1e-6)
    window = (out / "window.md").read_text()
    for v in PG19_VARIANTS:
        assert f"| {v} | 4 | 512 |" in window, v
    assert (out / "plots" / "pg19_logits.png").stat().st_size > 1000
    res = out / "results"
    assert sorted(f.name for f in res.iterdir()) == sorted(
        [f"{v}.tar.gz" for v in PG19_VARIANTS] + ["report.txt", "summary.md", "window.md", "logs.tar.gz"])
    import tarfile
    with tarfile.open(res / "ls.tar.gz") as tar:
        names = tar.getnames()
        assert sorted(names) == sorted(f"ls/{f}" for f in ["metrics.jsonl", "logit_stats.jsonl", "config.json",
                                                             "config.toml", "console.log", "ls.log", "ls.args",
                                                             "ls.build"])
        # which binary trained it comes back with the logs (the GPU machine's build)
        assert tar.extractfile("ls/ls.build").read().decode().splitlines()[0] == build_line(BIN), names
        packed = [json.loads(x) for x in tar.extractfile("ls/metrics.jsonl").read().decode().splitlines()]
    assert packed == records(out / "runs" / "ls" / "metrics.jsonl")
    assert "== done in" in (res / "report.txt").read_text()


def test_exp_pg19_budget_parallel_window(tmp_path):
    """One 'GPU window' on the CPU: --budget with both runs at once, started and stopped 5 s apart, and checks
    that pass. Both runs are stopped by the budget (SIGTERM: checkpoint, exit 143), the script ends within its
    budget (plus the packing), and the results folder is what comes back from the GPU machine: at most 8 files
    of at most 16 MiB, one archive per run, the window table with each run's steps alone and shared."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "win"
    env = dict(ENV, STAGGER_SMOKE="5", PROGRESS_EVERY="1")  # ticks before a run has its first step line
    # 26 s: the smoke data (~1 s) and the check, then 21 s to the deadline (the reserve is 5 s): mhsa alone
    # ~5 s, both ~8 s, ls alone 5 s; every phase is thousands of the smoke's steps, and a longer window
    # checks nothing more (the stagger's bounds below are the same 1 s under and 2 s over it)
    budget = 26
    p = subprocess.run(["bash", str(REPO / "scripts" / "exp_pg19.sh"), "--smoke", "--out", str(out), "--source",
                        str(SHARED / "pg19"), "--budget", str(budget), "--parallel", "1", "--check-cmd", "true",
                        "--check-cmd", "test -x " + str(BIN)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
    assert "check 1: true: PASS" in p.stdout and "check 2: test -x" in p.stdout
    events = [ln.split("\t") for ln in (out / "logs" / "events.tsv").read_text().splitlines()]
    verbs = [e[1] for e in events]
    assert verbs == ["start mhsa", "start ls", "stop mhsa", "end mhsa 143", "stop ls", "end ls 143"], verbs
    t = {e[1]: float(e[0]) for e in events}
    assert 4 <= t["start ls"] - t["start mhsa"] <= 7 and 4 <= t["stop ls"] - t["stop mhsa"] <= 7
    done = [ln for ln in p.stdout.splitlines() if ln.startswith("== done in ")]
    assert len(done) == 1 and int(done[0].split()[3]) <= budget + 10, done  # the reserve (5 s) and the packing
    for v in ("mhsa", "ls"):
        steps = [r["step"] for r in records(out / "runs" / v / "metrics.jsonl") if "loss" in r]
        assert steps and (out / "runs" / v / f"DONE_{steps[-1]:08d}").exists(), v  # the stop's checkpoint
    res = sorted(f.name for f in (out / "results").iterdir())
    assert res == ["logs.tar.gz", "ls.tar.gz", "mhsa.tar.gz", "report.txt", "summary.md", "window.md"]
    assert all((out / "results" / f).stat().st_size < 16 << 20 for f in res)
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[1:-1]]
            for ln in (out / "window.md").read_text().splitlines() if ln.startswith("| mhsa") or ln.startswith("| ls")}
    assert rows["mhsa"][5] != "-" and rows["mhsa"][6] != "-"  # mhsa alone at the start, both shared after
    assert rows["ls"][5] != "-" and rows["ls"][6] != "-"  # ls alone at the end
    assert "Runs at once vs one after another: throughput x" in (out / "window.md").read_text()
    assert "budget reached" in p.stdout and "ls: stopped (exit 143) with a checkpoint" in p.stdout
    assert re.search(r"^== ls: --global-heads 1 \| up to \d+ steps of 128 tokens \| until \d+ s \| device cpu \| ",
                     p.stdout, re.M), p.stdout  # ("until 35 s| device")
    progress = [ln for ln in p.stdout.splitlines() if re.match(r"== (mhsa|ls) at \d+ s: step +\d+", ln)]
    assert len(progress) >= 2, p.stdout[-3000:]  # the running runs' newest steps, every PROGRESS_EVERY s
    # the next window: the same command again continues both runs from their checkpoints (-y 1)
    last = {v: max(r["step"] for r in records(out / "runs" / v / "metrics.jsonl") if "loss" in r) for v in ("mhsa", "ls")}
    p = subprocess.run(["bash", str(REPO / "scripts" / "exp_pg19.sh"), "--smoke", "--out", str(out), "--source",
                        str(SHARED / "pg19"), "--budget", "16", "--parallel", "1", "--check-cmd", "true"], cwd=REPO,
                       env=dict(env, STAGGER_SMOKE="2"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
    for v in ("mhsa", "ls"):
        assert re.search(rf"^== {v}: .* \| resume 1$", p.stdout, re.M), p.stdout
        assert f"resumed from {out / 'runs' / v}" in (out / "runs" / v / "console.log").read_text()
        steps = [r["step"] for r in records(out / "runs" / v / "metrics.jsonl") if "loss" in r]
        assert steps == sorted(set(steps)) and steps[-1] > last[v], (v, last[v], steps[-5:])


def test_exp_pg19_failed_check_stops_before_training(tmp_path):
    """A failing check ends the script with exit 4 before any run starts, and its log still comes back."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "bad"
    p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--out", out, "--source", SHARED / "pg19",
            "--check-cmd", "true", "--check-cmd", "echo wrong kernel; exit 3"], check=False)
    assert p.returncode == 4, p.stderr
    assert "check 2: echo wrong kernel; exit 3: FAIL (exit 3" in p.stdout and "wrong kernel" in p.stdout
    assert p.stderr.strip().splitlines()[-1].startswith("error: check 'echo wrong kernel; exit 3' failed")
    assert not (out / "runs").exists() or not any((out / "runs").iterdir())
    assert sorted(f.name for f in (out / "results").iterdir()) == ["logs.tar.gz", "report.txt"]


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_exp_pg19_header_names_the_changed_files_and_a_stale_git(tmp_path):
    """The header named a count alone: "commit bd9197f + 5 changed files" on the GPU machine, which had been sent
    the clean tree of bd9197f. The 5 were the files bd9197f changed since c276bf2, the commit of the call before
    on the same warm machine, whose git metadata stayed there. Now the header names the first three files, counts
    against EXP_COMMIT where git knows it, and says what git there holds when it is not EXP_COMMIT. Here: a copy
    of the scripts in a git repository of its own, five tracked notes changed (a failing check ends the start)."""
    need_trainer()
    repo = tmp_path / "repo"
    for rel in subprocess.run(["git", "-C", str(REPO), "ls-files", "scripts", "configs", "data/*.py", "llmc/app/flags.h"],
                              check=True, capture_output=True, text=True).stdout.split():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, repo / rel)
    for i in range(5):
        (repo / f"note{i}.txt").write_text("as committed\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "A")
    a = _git(repo, "rev-parse", "--short", "HEAD")
    data = meta_only_data(tmp_path / "pg19_sp")
    cmd = ["bash", repo / "scripts" / "exp_pg19.sh", "--data", data, "--vocab", 1024, "--device", "cpu", "--steps", 1,
           "--variants", "mhsa", "--out", tmp_path / "o", "--check-cmd", "exit 3"]

    def header(exp_commit=None):
        env = {k: v for k, v in ENV.items() if k != "EXP_COMMIT"}
        if exp_commit:
            env["EXP_COMMIT"] = exp_commit
        p = subprocess.run([str(c) for c in cmd], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 4, p.stderr
        return p.stdout.splitlines()[0].split(" | ")[1]

    assert header() == f"commit {a}"
    (repo / "note3.txt").write_text("changed\n")
    assert header() == f"commit {a} + 1 changed file (note3.txt)"
    for i in range(5):
        (repo / f"note{i}.txt").write_text("changed\n")
    named = "5 changed files (note0.txt, note1.txt, note2.txt, ...)"
    assert header() == f"commit {a} + {named}"
    assert header(a) == f"commit {a} + {named}"
    # the GPU machine's state: the tree of commit B, git's HEAD and index still at A
    _git(repo, "commit", "-qam", "B")
    b = _git(repo, "rev-parse", "--short", "HEAD")
    _git(repo, "reset", "-q", "--mixed", a)
    assert header(b) == f"commit {b} (git here: HEAD {a})"
    assert header() == f"commit {a} + {named}"
    _git(repo, "reflog", "expire", "--expire=now", "--all")
    _git(repo, "gc", "-q", "--prune=now")  # B gone: git there never had it
    assert header(b) == f"commit {b} (git here: HEAD {a} + {named}; {b} unknown to it: changes unchecked)"
    shutil.rmtree(repo / ".git")
    assert header(b) == f"commit {b} (no git here: changes unchecked)"


def test_exp_pg19_results_hold_only_this_starts_files(tmp_path):
    """Started again with --results of an earlier start (another variant list): the script's own files of that
    start (a run's NAME.tar.gz, summary, window table, report, logs) are removed with one line, so the
    folder never mixes two starts; other files there stay. Here a failing check ends the start early."""
    need_trainer()
    data = meta_only_data(tmp_path / "pg19_sp")
    res = tmp_path / "res"
    res.mkdir()
    for f in ["ls.tar.gz", "mhsa_s3.tar.gz", "summary.md", "window.md", "report.txt", "logs.tar.gz", "notes.txt"]:
        (res / f).write_text("of an earlier start")
    p = sh(exp_pg19_failing_check(data, tmp_path / "o", res), check=False)
    assert p.returncode == 4, p.stderr
    assert (f"== {res}: removed the files of an earlier start: logs.tar.gz ls.tar.gz mhsa_s3.tar.gz report.txt "
            "summary.md window.md") in p.stdout.splitlines(), p.stdout
    assert sorted(f.name for f in res.iterdir()) == ["logs.tar.gz", "notes.txt", "report.txt"]
    assert (res / "notes.txt").read_text() == "of an earlier start"
    assert "check 1: exit 3: FAIL" in (res / "report.txt").read_text()


def test_exp_pg19_report_holds_one_start(tmp_path):
    """report.txt (OUT/logs and --results) is one start's console, like the rest of the results folder: a second
    start on the same --out replaces it (it accumulated every start's lines)."""
    need_trainer()
    data = tmp_path / "pg19_sp"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"dataset": "pg19", "tokenizer": "sp", "vocab_size": 1024}))
    cmd = ["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--vocab", 1024, "--device", "cpu", "--steps", 1,
           "--variants", "mhsa", "--out", tmp_path / "o", "--check-cmd", "exit 3"]
    for _ in range(2):
        p = sh(cmd, check=False)
        assert p.returncode == 4, p.stderr
    for report in [tmp_path / "o" / "logs" / "report.txt", tmp_path / "o" / "results" / "report.txt"]:
        text = report.read_text()
        assert text.count("== exp_pg19 ") == 1 and text.count("check 1: exit 3: FAIL") == 1, (report, text)


def test_exp_pg19_report_copy_is_whole_when_tee_lags(tmp_path):
    """report.txt in --results is copied after the script's tee processes have written everything: with a tee
    that writes only at its end (the slowest a loaded machine can be), the copy still holds the last lines
    (once it could lack them, e.g. "== done in", under load)."""
    need_trainer()
    data = meta_only_data(tmp_path / "pg19_sp")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tee").write_text(f'#!/bin/sh\nbuf=$(mktemp)\ncat > "$buf"\n{shutil.which("tee")} "$@" < "$buf"\n'
                                 'rm -f "$buf"\n')
    (bin_dir / "tee").chmod(0o755)
    env = dict(ENV, PATH=f"{bin_dir}{os.pathsep}{ENV['PATH']}")
    res = tmp_path / "res"
    p = subprocess.run(exp_pg19_failing_check(data, tmp_path / "o", res), cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 4, p.stderr
    report = (res / "report.txt").read_text()
    # (this tee writes stdout's and stderr's lines at its end, in either order)
    assert "== exp_pg19 " in report and "check 1: exit 3: FAIL" in report, report
    assert "error: check 'exit 3' failed" in report, report


def test_exp_pg19_sigterm_stops_the_runs(tmp_path):
    """SIGTERM to the script while a run trains: the run is stopped the same way (its step finished and
    checkpointed, exit 143), no later run starts, the results folder holds what was trained (a device command
    cut off at its time limit brings back what it left), and the script exits 130."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    import signal
    import time
    out = tmp_path / "int"
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "exp_pg19.sh"), "--smoke", "--steps", "1000000", "--out",
                             str(out), "--source", str(SHARED / "pg19")], cwd=REPO,
                            env=dict(ENV, SNAPSHOT_EVERY="1"),  # a snapshot is likely being written at the signal
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "runs" / "mhsa" / "metrics.jsonl"
    t0 = time.time()
    while not (metrics.exists() and metrics.stat().st_size > 0) and time.time() - t0 < 60:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    verbs = [ln.split("\t")[1] for ln in (out / "logs" / "events.tsv").read_text().splitlines()]
    assert verbs == ["start mhsa", "stop mhsa", "end mhsa 143"], verbs
    assert "mhsa: the script was interrupted" in stdout and "== interrupted: stopping the runs" in stderr
    last = [r["step"] for r in records(metrics) if "loss" in r][-1]
    assert (out / "runs" / "mhsa" / f"DONE_{last:08d}").exists()
    res = {f.name for f in (out / "results").iterdir()}
    assert {"report.txt", "logs.tar.gz", "mhsa.tar.gz"} <= res, res
    assert not [n for n in res if n.startswith(".")], res  # the snapshot stopped: no .part file left
    assert "Killed" not in stderr, stderr
    with tarfile.open(out / "results" / "mhsa.tar.gz") as t:
        packed = [m.name for m in t.getmembers()]
    assert any(n.endswith("metrics.jsonl") for n in packed), packed
    report = (out / "results" / "report.txt").read_text()
    assert "== interrupted after " in report and "the runs' logs packed in" in report, report[-2000:]


def test_exp_pg19_refuses_data_of_another_vocabulary(tmp_path):
    """The paper's setting is SentencePiece 10K: data of another vocabulary is refused with the command that makes
    the paper's data, before anything is built or trained; --vocab N runs on it, saying so in the header."""
    data = meta_only_data(tmp_path / "pg19_sp")
    args = ["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--device", "cpu", "--steps", 1,
            "--variants", "ls", "--out", tmp_path / "o"]
    p = sh(args, check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
    assert f"{data} holds vocabulary 1024, not the paper's 10000" in p.stderr, p.stderr
    # the command offered makes the paper's data beside it, never over it (it once said `--out DATA --force`,
    # which replaced whatever data set DATA held: a new user's tiny Shakespeare once)
    assert "scripts/pack_pg19.sh --out NEW_DIR, then --data NEW_DIR" in p.stderr and "--vocab 1024" in p.stderr
    assert "--force" not in p.stderr
    assert not (tmp_path / "o").exists()
    p = sh(args + ["--vocab", 1024], check=False)  # no shards: the run itself fails, after the header
    assert "vocabulary 1024 (not the paper's 10000: --vocab)" in p.stdout.splitlines()[0], p.stdout
    assert "holds vocabulary" not in p.stderr
    # the paper's vocabulary itself: the header names it plainly (the header's label once ended the
    # script under set -e, silently, exactly for V 10000)
    meta_only_data(data, vocab=10000)
    # ... and --vocab N on it says to drop --vocab (it once said to repack the paper's data, and called 10000
    # "not the paper's setting")
    p = sh(args + ["--vocab", 1024], check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert f"{data} holds vocabulary 10000, the paper's, not 1024 (--vocab): drop --vocab" in p.stderr, p.stderr
    assert "pack_pg19" not in p.stderr and "not the paper's setting" not in p.stderr
    p = sh(args, check=False)
    assert p.stdout, f"no header at all (rc {p.returncode}): {p.stderr}"
    assert f"SentencePiece vocabulary 10000 ({data})" in p.stdout.splitlines()[0], p.stdout


def test_exp_pg19_never_advises_packing_over_another_data_set(tmp_path):
    """--data naming GPT-2 data (a typo for the paper's folder): refused with the command that makes the paper's data
    in a directory of its own. The advice once read `scripts/pack_pg19.sh --out DATA --force`, and following it
    replaced a new user's tiny Shakespeare shards with PG-19."""
    data = tmp_path / "tinyshakespeare_gpt2"
    data.mkdir()
    meta = json.dumps({"dataset": "tinyshakespeare", "tokenizer": "gpt2", "vocab_size": 50257})
    (data / "meta.json").write_text(meta)
    p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--device", "cpu", "--steps", 1, "--variants",
            "ls", "--out", tmp_path / "o"], check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
    assert f"{data} holds data of tokenizer gpt2, not SentencePiece" in p.stderr, p.stderr
    assert "scripts/pack_pg19.sh --out NEW_DIR, then --data NEW_DIR" in p.stderr and "--force" not in p.stderr
    assert (data / "meta.json").read_text() == meta and not (tmp_path / "o").exists()


def test_exp_pg19_never_prepares_data_over_files_without_meta(tmp_path):
    """--data DIR holding shards but no meta.json: the script would prepare PG-19 into it (over the user's
    shards); it is refused before anything is built, and the files are left as they were."""
    data = tmp_path / "mine"
    data.mkdir()
    (data / "train_000000.bin").write_bytes(b"user shard")
    (data / "val_000000.bin").write_bytes(b"user val")
    p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--vocab", 500, "--device", "cpu", "--steps",
            1, "--variants", "ls", "--out", tmp_path / "o", "--source", SHARED / "pg19"], check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
    assert f"{data} holds files but no meta.json" in p.stderr
    assert (data / "train_000000.bin").read_bytes() == b"user shard"
    assert (data / "val_000000.bin").read_bytes() == b"user val" and sorted(os.listdir(data)) == [
        "train_000000.bin", "val_000000.bin"]
    assert not (tmp_path / "o").exists()


def test_exp_pg19_smoke_takes_the_data_and_vocabulary_given(tmp_path):
    """--smoke made its own 3-book data (vocabulary 400) whenever --data was the default string, so a typed
    `--data data/shards/pg19_sp` and any --vocab were dropped without a line: a --data given is now used (and
    checked), and --vocab without --data is refused, before anything is built."""
    meta_only_data(tmp_path / "data" / "shards" / "pg19_sp")  # the default's path, typed, from tmp_path
    script = REPO / "scripts" / "exp_pg19.sh"
    conf = REPO / "configs" / "paper_pg19.toml"
    p = subprocess.run(["bash", str(script), "--smoke", "--data", "data/shards/pg19_sp", "--config", str(conf),
                        "--out", "o"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("error: data/shards/pg19_sp holds vocabulary 1024"), p.stderr
    p = sh(["bash", script, "--smoke", "--vocab", 1024, "--out", tmp_path / "o2", "--source", SHARED / "pg19"],
           check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("error: --smoke makes its own data, with vocabulary 400: drop --vocab 1024"), p.stderr
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


def test_exp_pg19_relays_the_trainers_notes(tmp_path):
    """-u 2 (the smoke's warmup) of a 1-step run: the trainer's note reaches the console and report.txt. The
    report names --extra in its header and its run's line, and says what the run trained with from its own
    config.json (the lines once stated the script's values whatever --extra changed)."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "pg19"
    p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--steps", 1, "--out", out, "--source",
            SHARED / "pg19", "--variants", "ls", "--extra", "--grad-clip 0.5"], timeout=300)
    assert "vocabulary 400 (not the paper's 10000: --smoke)" in p.stdout.splitlines()[0], p.stdout
    assert p.stdout.splitlines()[0].endswith(" | --extra '--grad-clip 0.5'"), p.stdout
    report = (out / "logs" / "report.txt").read_text()
    note = "== ls: note: --warmup-steps 2 is longer than the run's 1 steps"
    assert note in p.stdout and note in report, p.stdout
    # the run's line has its pieces apart ("tokens | | device" without a budget), and the finished line the whole
    # checkpoint path (it was cut at 160 characters: "model_00000001.)")
    run_line = f"== ls: --global-heads 1 + --extra --grad-clip 0.5 | up to 1 steps of 128 tokens | device cpu | np 1 | resume 0"
    assert run_line in p.stdout.splitlines(), p.stdout
    trained = ("== ls: trained with (config.json): G 1 of 6 heads, window 8, near 8, qk-norm false, z-loss 0, "
               "attn-softcap 0, qk-clip 0, grad-clip 0.5, L 1, C 48, T 64, B 2, D 128, lr 0.0006, warmup 2, "
               "max-steps 1, seed 1337, V 400, bias false, gelu erf, tied false")
    assert trained in p.stdout.splitlines() and trained in report.splitlines(), p.stdout
    finished = [ln for ln in p.stdout.splitlines() if ln.startswith("== ls: finished (")]
    assert len(finished) == 1 and finished[0].endswith(f"weights: {out}/runs/ls/model_00000001.bin)"), finished
    # the summary names the data set and its vocabulary (a loss per token means nothing without V)
    runs_line = (out / "summary.md").read_text().splitlines()[0]
    # (the smoke's data folder is OUT/data: a folder named data is named with its parent, not "data data")
    assert runs_line.startswith("Runs: ") and "data pg19/data (sp V=400)" in runs_line, runs_line


def test_exp_pg19_reuses_a_run_only_for_the_same_settings(tmp_path):
    """Started again on the same --out, a run is reused only for the same settings (runs/NAME.args,
    scripts/exp_run_settings.sh): a finished one of the same flags is "done already"; another --steps or
    --extra is refused with one line naming the flags, before anything runs, every file kept (the script once
    skipped a finished run on its DONE_ marker alone, reporting the earlier experiment); a run without
    .args is refused too; --force deletes such a run (saying so) and trains it again."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "pg19"
    base = ["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--out", out, "--source", SHARED / "pg19",
            "--variants", "ls"]
    sh(base + ["--steps", 1], timeout=300)
    run = out / "runs" / "ls"

    def files():
        return {str(f.relative_to(out / "runs")): f.read_bytes() for f in (out / "runs").rglob("*") if f.is_file()}
    before = files()
    assert "ls/DONE_00000001" in before and "-x 1" in before["ls.args"].decode().splitlines(), sorted(before)
    p = sh(base + ["--steps", 1], timeout=300)
    assert f"== ls: done already ({run})" in p.stdout, p.stdout
    assert files() == before
    # ... and only by the trainer binary that trained it (runs/NAME.build), checked after the build stage
    assert before["ls.build"].decode().splitlines()[0] == build_line(BIN)
    assert f"== trainer: {build_shown(BIN)}, commit " in p.stdout, p.stdout
    other = other_build(tmp_path)
    p = sh(base + ["--steps", 1], check=False, timeout=300, env={"TRAINER": str(other)})
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"error: {run} was trained by another trainer build ({build_shown(BIN)}, commit "), \
        p.stderr
    assert "another --out" in p.stderr and "--force" in p.stderr and "done already" not in p.stdout, p.stdout
    assert files() == before
    p = sh(base + ["--steps", 1, "--force"], timeout=300, env={"TRAINER": str(other)})
    assert f"note: --force: deleting {run}, which was trained by another trainer build" in p.stderr, p.stderr
    assert (out / "runs" / "ls.build").read_text().splitlines()[0] == build_line(other)
    assert sorted(r["step"] for r in records(run / "metrics.jsonl") if "loss" in r) == [1]
    (out / "runs" / "ls.build").unlink()  # a run of an earlier script version: its build is unknown, a note says so
    p = sh(base + ["--steps", 1], timeout=300)
    assert f"note: {run} has no record of the trainer that trained it" in p.stderr, p.stderr
    assert f"== ls: done already ({run})" in p.stdout, p.stdout
    before = files()
    for args, was, now in [(["--steps", 2], "-x 1", "-x 2"), (["--steps", 1, "--extra", "--grad-clip 0.5"], "nothing more",
                                                               "--grad-clip 0.5")]:
        p = sh(base + args, check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
        assert f"{run} holds a run of other settings" in p.stderr and was in p.stderr and now in p.stderr, p.stderr
        assert "another --out" in p.stderr and "--force" in p.stderr and p.stdout == "", p.stdout
        assert files() == before
    (out / "runs" / "ls.args").unlink()
    p = sh(base + ["--steps", 1], check=False)
    assert p.returncode == 1 and f"{run} holds a run with no record of its settings" in p.stderr, p.stderr
    p = sh(base + ["--steps", 2, "--force"], timeout=300)
    assert f"note: --force: deleting {run}, which holds a run with no record" in p.stderr, p.stderr
    assert sorted(r["step"] for r in records(run / "metrics.jsonl") if "loss" in r) == [1, 2]
    assert "-x 2" in (out / "runs" / "ls.args").read_text().splitlines()
    # a start the trainer refused (flags) left NAME.args and no run: the next start is a new run
    shutil.rmtree(run)
    run.mkdir()
    (out / "runs" / "ls.args").write_text("-x 7\n--bad-flag\n")
    p = sh(base + ["--steps", 1], timeout=300)
    assert sorted(r["step"] for r in records(run / "metrics.jsonl") if "loss" in r) == [1], p.stderr
    assert "-x 1" in (out / "runs" / "ls.args").read_text().splitlines()


def test_exp_pg19_refuses_a_run_whose_preset_was_edited(tmp_path):
    """The preset is recorded by its path and its contents (runs/NAME.args): edited between two starts, the run
    is other settings, refused with one line naming the preset's contents (a start once continued it with the
    new learning rate, seeing the same path)."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    preset = tmp_path / "preset.toml"
    preset.write_text((REPO / "configs" / "paper_pg19.toml").read_text())
    out = tmp_path / "pg19"
    base = ["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--out", out, "--source", SHARED / "pg19",
            "--variants", "ls", "--config", preset, "--steps", 2]
    sh(base[:-2] + ["--steps", 1], timeout=300)
    assert f"contents of {preset}: sha256 " in (out / "runs" / "ls.args").read_text()
    text = preset.read_text()
    assert "learning-rate=0.0006" in text
    preset.write_text(text.replace("learning-rate=0.0006", "learning-rate=0.0003"))
    p = sh(base, check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
    assert "holds a run of other settings" in p.stderr and f"contents of {preset}: sha256" in p.stderr, p.stderr
    assert sorted(r["step"] for r in records(out / "runs" / "ls" / "metrics.jsonl") if "loss" in r) == [1]


def test_exp_pg19_bad_arguments(tmp_path):
    for args, words in [(["--parallel", "2"], "--parallel 2"), (["--budget", "9m"], "--budget 9m"),
                        (["--variants", "mhsa foo"], "unknown variant 'foo'"),
                        (["--budget", "300", "--variants", "mhsa ls local mhsa_qknorm mhsa_zloss"], "at most 4"),
                        (["--config", str(tmp_path / "none.toml")], "no preset"),
                        # --smoke fixes the batch: a given one was dropped without a word (a new-user trial)
                        (["--smoke", "--batch", "3"], "--smoke trains B 2 x T 64, one micro-batch per process: drop "
                         "--batch, or drop --smoke"),
                        (["--total-batch", "100", "--smoke"], "drop --total-batch, or drop --smoke"),
                        (["--smoke", "--batch", "3", "--total-batch", "100"], "drop --batch and --total-batch, or"),
                        # a new-user trial: "ls ls" trained one run and reported it twice; "mhsa lss" with --smoke
                        # was refused after --smoke's books were linked into --out
                        (["--variants", "ls ls"], "--variants names ls twice; name each variant once"),
                        (["--variants", "mhsa ls mhsa"], "--variants names mhsa twice"),
                        (["--smoke", "--source", SHARED / "pg19", "--variants", "mhsa lss"], "unknown variant 'lss'"),
                        (["--smoke", "--source", SHARED / "pg19", "--variants", "ls ls"], "names ls twice"),
                        (["--smoke", "--source", SHARED / "pg19", "--steps", "x"], "must be a positive integer"),
                        (["--smoke", "--source", SHARED / "pg19", "--budget", "300", "--variants",
                          "mhsa ls local mhsa_qknorm mhsa_zloss"], "at most 4")]:
        p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--out", tmp_path / "o", *args], check=False)
        assert p.returncode == 1 and p.stderr.startswith("error: ") and words in p.stderr, (args, p.stderr)
        assert p.stderr.count("\n") == 1, p.stderr
        assert not (tmp_path / "o").exists(), (args, os.listdir(tmp_path / "o"))  # refused before anything is made


def test_exp_pg19_refuses_flags_that_conflict_or_it_sets_itself(tmp_path):
    """--steps with --tokens, and a flag in --extra that the script sets itself (-x: the header said 50000 steps
    while the runs trained 5), are refused with one line naming the script's own option, before anything is made;
    the bookkeeping flags (-m, -v) stay free to change. --tokens alone that is not a whole number of steps says how
    many steps (and tokens) it trains."""
    data = tmp_path / "pg19_sp"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"dataset": "pg19", "tokenizer": "sp", "vocab_size": 1024}))
    base = ["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--vocab", 1024, "--device", "cpu",
            "--variants", "mhsa", "--out", tmp_path / "o", "--check-cmd", "exit 3"]
    for args, words in [(["--steps", 5, "--tokens", 20000], "--steps and --tokens"),
                        (["--tokens", 20000, "--steps", 5], "--steps and --tokens"),
                        (["--extra", "-m 1 -x 5"], "--extra sets -x, which the script sets itself: use --steps"),
                        (["--extra", "--max-steps=5"], "--extra sets --max-steps, which the script sets itself: use --steps"),
                        (["--extra", "-b 4"], "use --batch"), (["--extra", "--seed 3"], "use --seed"),
                        (["--extra", "-i x/train_*.bin"], "use --data"), (["--extra", "--global-heads 2"], "use --variants"),
                        (["--extra", "-y 1"], "-y"), (["--extra", "-x5"], "--extra sets -x"),
                        (["--extra", "-oelsewhere"], "use --out"), (["--extra", "-b4"], "use --batch")]:
        p = sh(base + args, check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), (args, p.stderr)
        assert words in p.stderr, (args, p.stderr)
        assert not (tmp_path / "o").exists()
    p = sh(base + ["--tokens", 40000, "--extra", "-m 1 -v 3"], check=False)
    assert p.returncode == 4, p.stderr  # past the arguments, to the failing check
    assert "note: --tokens 40000 is 2 steps of 16384 tokens (32768 tokens)" in p.stderr, p.stderr


def test_exp_pg19_refuses_extra_flags_that_define_a_variant_or_the_model(tmp_path):
    """A flag in --extra that any variant, the preset's model or --smoke sets is refused with one line naming the
    flag and its owner, whichever variants run (`--extra "--z-loss 0.01"` gave the plain mhsa baseline a z-loss
    and mhsa_zloss 100x its value while report.txt stated the script's; `--qk-clip 5` ran mhsa_qkclip at tau 5
    instead of 100). Long and short names of one flag are the same flag; the bookkeeping flags stay free."""
    data = meta_only_data(tmp_path / "pg19_sp")
    base = ["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--vocab", 1024, "--device", "cpu",
            "--steps", 1, "--variants", "mhsa", "--out", tmp_path / "o", "--check-cmd", "exit 3"]
    for extra, words in [("--z-loss 0.01", "--extra sets --z-loss, which the script sets itself: use --variants "
                          "(variant mhsa_zloss: --z-loss 1e-4)"),
                         ("--attn-softcap=20", "--attn-softcap, which the script sets itself: use --variants "
                          "(variant mhsa_softcap: --attn-softcap 50)"),
                         ("--qk-clip 5", "(variant mhsa_qkclip: --qk-clip 100)"),
                         ("-m 1 --qk-norm", "--extra sets --qk-norm, which the script sets itself: use --variants "
                          "(variant mhsa_qknorm: --qk-norm)"),
                         ("--global-heads 2", "use --variants (variants mhsa: --global-heads 6, ls: --global-heads 1, local: "),
                         ("--window 3", "--extra sets --window, which the script sets itself: use --config"),
                         ("--heads 12", "--extra sets --heads"), ("--near 4", "--extra sets --near"),
                         ("--vocab 12000", "--extra sets --vocab: the model's vocabulary is the data's (the "
                          "script's --vocab V chooses the data and checks it): drop it"),
                         ("-e out/x/model_00000004.bin", "--extra sets -e: every variant starts from the preset's "
                          "initialization"),
                         ("--fork-from=x/model_00000004.bin", "--extra sets --fork-from: every variant starts from "
                          "the preset's initialization (a fork would carry another run's training"),
                         ("--total-batch-size 4", "use --total-batch"), ("--expect-vocab 7", "use --vocab"),
                         ("--output-dir x", "use --out"), ("--device=cuda", "use --device")]:
        p = sh(base + ["--extra", extra], check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), (extra, p.stderr)
        assert words in p.stderr, (extra, p.stderr)
        assert not (tmp_path / "o").exists()
    # (trial 15) the warmup is the preset's optimizer setting, not its model: --extra takes it, as it takes -l
    p = sh(base + ["--extra", "--warmup-steps 5 -l 1e-3"], check=False)
    assert p.returncode == 4 and "check 1: exit 3: FAIL" in p.stdout, p.stderr
    if (SHARED / "pg19" / "pg45265.txt").exists():  # --smoke's model flags are its own
        p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--out", tmp_path / "s", "--source",
                SHARED / "pg19", "--extra", "--layers 2"], check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
        assert p.stderr.startswith("error: --extra sets --layers, which the script sets itself: use --smoke"), p.stderr
        assert not (tmp_path / "s" / "runs").exists()


def test_experiment_scripts_take_flag_equals_value(tmp_path):
    """--flag=value, the form the trainer takes, is --flag value in exp_pg19.sh and its siblings (a value is
    never split: --extra's own words stay whole)."""
    data = meta_only_data(tmp_path / "pg19_sp")
    p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", f"--data={data}", "--vocab=1024", "--device=cpu", "--steps=5",
            "--variants=mhsa", f"--out={tmp_path / 'o'}", "--check-cmd=exit 3", "--extra", "--val-every=3"],
           check=False)
    assert p.returncode == 4 and "check 1: exit 3: FAIL" in p.stdout, p.stderr  # past the arguments, to the check
    for script, args, words in [("exp_synthetic.sh", ["--steps=0"], "--steps 0 must be a positive integer"),
                                ("exp_text_ratio.sh", ["--corpus=x"], "--corpus x: use pg19 or wikitext2"),
                                ("pack_pg19.sh", ["--out=/abs"], "--out /abs: give a path inside the repository")]:
        p = sh(["bash", REPO / "scripts" / script, *args], check=False)
        assert p.returncode == 1 and p.stderr.startswith("error: ") and words in p.stderr, (script, p.stderr)


def test_exp_pg19_checks_the_extra_flags_with_the_trainer_before_anything_runs(tmp_path):
    """--extra's flags are checked by the trainer's own parsing and validation (with each run's full flags, on
    shards that do not exist) before the build, the checks and the data: a misspelt flag or a combination the
    trainer refuses for one variant is one error line with the trainer's reason, and nothing is made."""
    need_trainer()
    data = meta_only_data(tmp_path / "pg19_sp")
    base = ["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--vocab", 1024, "--device", "cpu", "--steps", 1,
            "--out", tmp_path / "o", "--check-cmd", "exit 3"]
    for args, words in [(["--variants", "mhsa", "--extra", "--batch_size 4"],
                         ["--extra '--batch_size 4': the trainer refuses run mhsa's flags:", "did you mean --batch-size?"]),
                        (["--variants", "ls mhsa_qkclip", "--extra", "--cuda-graph 1"],
                         ["the trainer refuses run mhsa_qkclip's flags: --cuda-graph 1 replays"])]:
        p = sh(base + args, check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), (args, p.stderr)
        assert all(w in p.stderr for w in words), (args, p.stderr)
        assert "check 1" not in p.stdout and not (tmp_path / "o").exists(), p.stdout
    p = sh(base + ["--variants", "ls", "--extra", "--cuda-graph 1 -m 1 -n 5"], check=False)  # -n needs an -o
    assert p.returncode == 4 and "check 1: exit 3: FAIL" in p.stdout, p.stderr  # accepted: on to the check
    # --build 1 (the GPU machine's default): the trainer is built first, so its check follows the build (a
    # stand-in make here) and precedes the checks; the report comes back with the line
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "make").write_text("#!/bin/sh\nexit 0\n")
    (fake / "make").chmod(0o755)
    out = tmp_path / "built"
    p = subprocess.run([str(a) for a in base[:-4] + ["--out", out, "--check-cmd", "exit 3", "--build", 1, "--variants",
                                                      "mhsa", "--extra", "--batch_size 4"]],
                       cwd=REPO, env=dict(ENV, PATH=f"{fake}:{os.environ['PATH']}"), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and "build: PASS" in p.stdout and "check 1" not in p.stdout, p.stdout + p.stderr
    assert p.stderr.splitlines()[-1].startswith("error: --extra '--batch_size 4': the trainer refuses"), p.stderr
    assert "did you mean --batch-size?" in (out / "results" / "report.txt").read_text()


def test_exp_pg19_prepares_a_missing_data_given_only_with_prepare(tmp_path):
    """A --data that does not exist (a typo of the data set's name) is refused with one line: the script once
    tokenized PG-19 into it (a minute, 40 MB, a new directory). --prepare asks for that; the default --data
    is still prepared when missing."""
    typo = tmp_path / "pg19-sp"
    base = ["bash", REPO / "scripts" / "exp_pg19.sh", "--data", typo, "--vocab", 500, "--device", "cpu", "--steps", 1,
            "--variants", "ls", "--out", tmp_path / "o", "--source", tmp_path / "no_books"]
    p = sh(base, check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
    assert f"--data {typo} does not exist" in p.stderr and "--prepare" in p.stderr, p.stderr
    assert not typo.exists() and not (tmp_path / "o").exists()
    p = sh(base + ["--prepare"], check=False)  # past that check, to the (here missing) books
    assert p.returncode == 1 and f"no PG-19 books at {tmp_path / 'no_books'}" in p.stderr, p.stderr
    assert not typo.exists()


def test_pack_results_phases_thinning_and_limits(tmp_path):
    """pack_results.py on hand-made runs: the medians of a run's steps alone and shared follow the events
    (steps within 2 s of a start or an end in neither), the at-once throughput is the sum of alone/shared,
    an archive over the limit gets its statistics thinned (and says so), and too many files is an error."""
    pack = REPO / "scripts" / "pack_results.py"
    t0 = 1000.0
    # a: alone 0-20 s at 4 ms, shared 20-60 s at 6 ms; b: shared 20-60 s at 8 ms, alone 60-80 s at 5 ms
    spans = {"a": [(0, 20, 4.0), (20, 60, 6.0)], "b": [(20, 60, 8.0), (60, 80, 5.0)]}
    for name, parts in spans.items():
        d = tmp_path / name
        d.mkdir()
        recs, stats, step = [], [], 0
        for a, b, ms in parts:
            t = t0 + a + 0.05
            while t < t0 + b:
                step += 1
                recs.append({"step": step, "time": t, "loss": 3.0, "ms": ms, "max_attn_logit": step / 10,
                             "spike": False})
                stats.append({"step": step, "attn": [{"layer": 0, "head": 0, "global": True, "max": 1.0,
                                                      "near_mass": 0.25, "pad": hashlib.sha256(str(step).encode()).hexdigest() * 3}]})
                t += 0.05
        recs[-1]["val_loss"] = 3.5
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        (d / "logit_stats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stats))
        (d / "config.json").write_text(json.dumps({"train": {"total_batch_size": 100}, "model": {}, "derived": {}}))
        (d / "model_00000001.bin").write_bytes(b"x" * 1000)
    ev = tmp_path / "events.tsv"
    ev.write_text(f"{t0}\tstart a\n{t0 + 20}\tstart b\n{t0 + 60}\tstop a\n{t0 + 60}\tend a 143\n"
                  f"{t0 + 80}\tstop b\n{t0 + 80}\tend b 143\n")
    res = tmp_path / "res"
    p = sh([sys.executable, pack, "--results", res, "--runs", f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}",
            "--events", ev, "--limit-mib", "0.05"])
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[1:-1]]
            for ln in p.stdout.splitlines() if ln.startswith("| a ") or ln.startswith("| b ")}
    assert rows["a"][5:7] == ["4.00", "6.00"] and rows["b"][5:7] == ["5.00", "8.00"]
    assert rows["a"][2] == f"{len(records(tmp_path / 'a' / 'metrics.jsonl')) * 100:,}"
    n_a = len(records(tmp_path / "a" / "metrics.jsonl"))
    assert rows["a"][-1] == "0.250" and rows["a"][13] == f"3.5000 ({n_a})" and rows["a"][1] == str(n_a)
    assert f"throughput x{4 / 6 + 5 / 8:.2f}" in p.stdout
    assert "logit_stats.jsonl thinned to every" in p.stdout
    import tarfile
    for name in ("a", "b"):
        f = res / f"{name}.tar.gz"
        assert f.stat().st_size <= 0.05 * (1 << 20)
        with tarfile.open(f) as tar:
            assert not any(n.endswith(".bin") for n in tar.getnames())
            kept = tar.extractfile(f"{name}/logit_stats.jsonl").read().decode().splitlines()
            metrics = tar.extractfile(f"{name}/metrics.jsonl").read().decode().splitlines()
        assert 1 < len(kept) < len(records(tmp_path / name / "logit_stats.jsonl"))
        assert len(metrics) == len(records(tmp_path / name / "metrics.jsonl"))
    p = sh([sys.executable, pack, "--results", tmp_path / "res2", "--runs", f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}",
            "--max-files", "1"], check=False)
    assert p.returncode == 1 and p.stderr.startswith("error: ") and "more than --max-files 1" in p.stderr
    p = sh([sys.executable, pack, "--results", tmp_path / "res3", "--runs", f"c={tmp_path / 'c'}"], check=False)
    assert p.returncode == 1 and "run c left no metrics" in p.stderr


def test_pack_results_says_why_a_run_alone_has_no_median(tmp_path):
    """Two runs one after another (--parallel 0), both alone: a run with too few steps alone for a median (5,
    after leaving out those within 2 s of a start or an end) has '-' in 'ms/step alone' and a note that says
    so with its counts, so the '-' is not read as "not alone" beside the other run's number."""
    pack = REPO / "scripts" / "pack_results.py"
    t0 = 1000.0
    runs = {"mhsa": (t0, 6), "ls": (t0 + 40, 12)}  # (start, steps) at 4.5 s per step, 1.5 s of start-up
    for name, (start, n) in runs.items():
        d = tmp_path / name
        d.mkdir()
        recs = [{"step": k, "time": start + 1.5 + 4.5 * k, "loss": 3.0, "ms": 4500.0 + k} for k in range(1, n + 1)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    ev = tmp_path / "events.tsv"
    ev.write_text("".join(f"{start}\tstart {name}\n{start + 2.5 + 4.5 * n}\tend {name} 143\n"
                          for name, (start, n) in runs.items()))
    p = sh([sys.executable, pack, "--results", tmp_path / "res", "--runs", f"mhsa={tmp_path / 'mhsa'}",
            f"ls={tmp_path / 'ls'}", "--events", ev])
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[1:-1]]
            for ln in p.stdout.splitlines() if ln.startswith("| mhsa ") or ln.startswith("| ls ")}
    assert rows["mhsa"][5:7] == ["-", "-"] and rows["ls"][5:7] == ["4506.50", "-"], rows
    assert ("- mhsa: ms/step alone -: of its 6 steps alone, 2 were within 2 s of a run's start or end (counted in "
            "neither phase); a median needs 5") in p.stdout, p.stdout
    assert "- ls: ms/step" not in p.stdout


def test_pack_results_times_only_this_windows_steps(tmp_path):
    """A run resumed in a later window (exp_pg19.sh started again on the same --out): its train wall time and
    steps per minute cover the steps this window trained, from its start event on, never the idle time
    between the windows (once 444 s and 0 steps/min for a run that trained one 6 s step), and a note names
    the steps they cover."""
    pack = REPO / "scripts" / "pack_results.py"
    t0 = 1000.0
    d = tmp_path / "mhsa"
    d.mkdir()
    recs = [{"step": s, "time": t0 + 4.0 * s, "loss": 3.0, "ms": 4000.0} for s in (1, 2, 3)]  # window 1: 4 s/step
    start = t0 + 12 + 432  # window 2 starts 432 s later; 3 s of start-up, then steps 4 and 5 at 6 s each
    recs += [{"step": 4, "time": start + 9, "loss": 2.9, "ms": 6000.0},
             {"step": 5, "time": start + 15, "loss": 2.8, "ms": 6000.0, "val_loss": 2.95}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "config.json").write_text(json.dumps({"train": {}, "model": {}, "derived": {"tokens_per_step": 100}}))
    ev = tmp_path / "events.tsv"
    ev.write_text(f"{start}\tstart mhsa\n{start + 16}\tend mhsa 0\n")
    p = sh([sys.executable, pack, "--results", tmp_path / "res", "--runs", f"mhsa={d}", "--events", ev])
    row = next(ln for ln in p.stdout.splitlines() if ln.startswith("| mhsa "))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[1:5] == ["5", "500", "12.0", "10"], row  # steps 4-5: 12 s from the start of step 4, 2 steps
    assert "- mhsa: resumed in this window at step 3: train wall s and steps/min cover its steps 4-5" in p.stdout
    # a run not started in this window (finished already): no time of another window is shown as this one's
    ev.write_text(f"{start}\tstart other\n{start + 16}\tend other 0\n")
    p = sh([sys.executable, pack, "--results", tmp_path / "res1", "--runs", f"mhsa={d}", "--events", ev])
    cells = [c.strip() for c in next(ln for ln in p.stdout.splitlines() if ln.startswith("| mhsa ")).split("|")[1:-1]]
    assert cells[1:5] == ["5", "500", "-", "-"] and "- mhsa: trained no step in this window" in p.stdout
    # without --events: the records are one window (a run trained in one process), and no note
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[:3]))
    p = sh([sys.executable, pack, "--results", tmp_path / "res2", "--runs", f"fresh={fresh}"])
    cells = [c.strip() for c in next(ln for ln in p.stdout.splitlines() if ln.startswith("| fresh ")).split("|")[1:-1]]
    assert cells[3:5] == ["12.0", "15"] and "resumed" not in p.stdout  # 3 steps in 12 s (from step 1's start)


def test_pack_pg19_refuses_paths_that_do_not_travel(tmp_path):
    script = REPO / "scripts" / "pack_pg19.sh"
    p = sh(["bash", script, "--out", tmp_path / "x", "--no-deps"], check=False)
    assert p.returncode == 1 and "give a path inside the repository" in p.stderr and p.stderr.count("\n") == 1
    p = sh(["bash", script, "--out", "scripts/not_ignored", "--no-deps"], check=False)
    assert p.returncode == 1 and "is not ignored by git" in p.stderr and p.stderr.count("\n") == 1
    assert not (REPO / "scripts" / "not_ignored").exists()


def test_pack_pg19_never_replaces_another_data_set_without_force():
    """--out holding another data set, or shards without meta.json, is refused with one line naming --force
    before anything is read or written (a missing --source would be the next error); its files stay as they
    were. An empty --out is used, and --force goes on to prepare."""
    script = REPO / "scripts" / "pack_pg19.sh"
    base = REPO / "data" / "shards" / f"test_pack_{os.getpid()}"  # git-ignored, inside the repository
    try:
        other = base / "other"
        other.mkdir(parents=True)
        meta = json.dumps({"dataset": "tinyshakespeare", "tokenizer": "sp", "vocab_size": 500})
        (other / "meta.json").write_text(meta)
        (other / "train_000000.bin").write_bytes(b"their shard")
        bare = base / "bare"
        bare.mkdir()
        (bare / "train_000000.bin").write_bytes(b"user shard")
        nobooks = base / "no_books"
        for d, what in [(other, "holds another data set (meta.json: dataset tinyshakespeare, tokenizer sp, "
                                "vocabulary 500)"), (bare, "holds files but no meta.json")]:
            p = sh(["bash", script, "--out", d.relative_to(REPO), "--no-deps", "--source", nobooks], check=False)
            assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
            assert what in p.stderr and "--force" in p.stderr and "another --out" in p.stderr, p.stderr
        assert (other / "meta.json").read_text() == meta and (other / "train_000000.bin").read_bytes() == b"their shard"
        assert sorted(os.listdir(other)) == ["meta.json", "train_000000.bin"]
        assert sorted(os.listdir(bare)) == ["train_000000.bin"] and (bare / "train_000000.bin").read_bytes() == b"user shard"
        # --force, or an empty --out: past the check, to the (here missing) books
        empty = base / "empty"
        empty.mkdir()
        for args, note in [(["--out", other.relative_to(REPO), "--force"], True),
                           (["--out", empty.relative_to(REPO)], False)]:
            p = sh(["bash", script, *args, "--no-deps", "--source", nobooks], check=False)
            assert p.returncode == 1 and f"no PG-19 books at {nobooks}" in p.stderr, p.stderr
            assert ("note: --force: replacing" in p.stderr) == note, p.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _pg19_same_meta(path, books):
    """A meta.json at path saying pg19 / sp / 10000, made from books ({name: text}); returns path."""
    path.mkdir(parents=True, exist_ok=True)
    srcs = [{"file": n, "bytes": len(t.encode()), "sha256": "x", "splits": ["train"]} for n, t in sorted(books.items())]
    (path / "meta.json").write_text(json.dumps({"dataset": "pg19", "tokenizer": "sp", "vocab_size": 10000,
                                                "sources": srcs}))
    return path


def test_a_source_of_other_books_than_the_data_is_refused(tmp_path):
    """pack_pg19.sh and exp_pg19.sh keep the paper's data that exists; a --source given for it must be the
    books it was made from (names and sizes, data/source_check.py), else one error line before anything is
    read or written (both once took the existing 201-book data for the full PG-19 the user pointed at, without
    a word). The same books, or no --source, go on."""
    books = {"pg1.txt": "one book\n", "pg2.txt": "another book\n"}
    same, other = tmp_path / "same", tmp_path / "other"
    for d, bk in [(same, books), (other, dict(books, **{"pg3.txt": "a third\n"}))]:
        d.mkdir()
        for n, t in bk.items():
            (d / n).write_text(t)
    base = REPO / "data" / "shards" / f"test_source_{os.getpid()}"  # git-ignored, inside the repository
    try:
        data = _pg19_same_meta(base, books)
        before = (data / "meta.json").read_text()
        pack = ["bash", REPO / "scripts" / "pack_pg19.sh", "--out", data.relative_to(REPO), "--no-deps"]
        p = sh(pack + ["--source", other], check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
        assert f"made from 2 book(s), not the 3 in {other} (1 there not in the data (e.g. pg3.txt))" in p.stderr
        assert "--force" in p.stderr and (data / "meta.json").read_text() == before
        p = sh(pack + ["--source", same], check=False)  # the same books: kept (the listing of the shards follows)
        assert "holds PG-19 with the 10K SentencePiece vocabulary already" in p.stdout, p.stdout + p.stderr
        exp = ["bash", REPO / "scripts" / "exp_pg19.sh", "--data", data, "--device", "cpu", "--steps", 1,
               "--variants", "ls", "--out", tmp_path / "o", "--check-cmd", "exit 3"]
        p = sh(exp + ["--source", other], check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
        assert f"{data} holds PG-19 made from 2 book(s), not the 3 in {other}" in p.stderr, p.stderr
        assert "drop --source" in p.stderr and not (tmp_path / "o").exists()
        for extra in (["--source", same], []):  # on to the header (and the failing check)
            p = sh(exp + extra, check=False)
            assert "holds PG-19 made from" not in p.stderr and p.stdout.startswith("== exp_pg19"), p.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_exp_text_ratio_smoke_takes_the_steps_and_ratios_given(tmp_path):
    """--smoke sets small defaults, but a --steps, --ratios or --key-ratio given beside it is used, as in
    exp_synthetic.sh (`--smoke --steps 40 --ratios 2` trained 6 steps at ratios 2 and 4). The trainer's note: lines
    reach the console as "== NAME: note: ..." (-u 2, the smoke's warmup, of a 1-step run)."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "ratio"
    p = sh(["bash", REPO / "scripts" / "exp_text_ratio.sh", "--smoke", "--out", out, "--source", SHARED / "pg19",
            "--steps", 1, "--ratios", 4, "--key-ratio", 4, "--variants", "ls", "--jobs", 1, "--plots", 0], timeout=300)
    assert not (out / "plots").exists() or not list((out / "plots").iterdir())  # --plots 0
    assert sorted(d.name for d in (out / "runs").iterdir() if d.is_dir()) == ["r4_ls_s1", "r4_ls_s2"], p.stdout
    for name in ("r4_ls_s1", "r4_ls_s2"):
        run = out / "runs" / name
        assert (run / "DONE_00000001").exists(), sorted(os.listdir(run))
        assert json.loads((run / "config.json").read_text())["train"]["seq_len"] == 4 * 16
        assert f"== {name}: note: --warmup-steps 2 is longer than the run's 1 steps" in p.stdout, p.stdout
    assert "more run(s) than this start's plan" not in p.stderr
    # (trial 14) a second start with fewer seeds rewrites summary.md of its own plan: the other run is said
    p = sh(["bash", REPO / "scripts" / "exp_text_ratio.sh", "--smoke", "--out", out, "--source", SHARED / "pg19",
            "--steps", 1, "--ratios", 4, "--key-ratio", 4, "--variants", "ls", "--seeds", "1", "--key-seeds", "1",
            "--jobs", 1, "--plots", 0], timeout=300)
    assert "== summary of 1 of 1 runs" in p.stdout, p.stdout
    assert (f"note: {out}/runs holds 1 more run(s) than this start's plan (an earlier start's other --ratios, "
            "--variants or --seeds)") in p.stderr, p.stderr


def test_exp_text_ratio_plans_a_run_named_twice_once(tmp_path):
    """(a review) --seeds "1 2" with the key seed 2 planned the key ratio's run of seed 2 twice: two jobs trained
    one directory at once, and the summary listed it twice (plot_run now refuses a run given twice). Each run is
    planned once."""
    need_trainer()
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path / "ratio"
    p = sh(["bash", REPO / "scripts" / "exp_text_ratio.sh", "--smoke", "--out", out, "--source", SHARED / "pg19",
            "--steps", 1, "--ratios", 4, "--key-ratio", 4, "--variants", "ls", "--seeds", "1 2", "--key-seeds", "2",
            "--jobs", 2, "--plots", 0], timeout=300)
    assert [ln for ln in p.stdout.splitlines() if " r4 ls seed 2: T " in ln] != [] and \
        len([ln for ln in p.stdout.splitlines() if " r4 ls seed 2: T " in ln]) == 1, p.stdout
    assert "== summary of 2 of 2 runs" in p.stdout, p.stdout
    assert sorted(r["step"] for r in records(out / "runs" / "r4_ls_s2" / "metrics.jsonl") if "loss" in r) == [1]


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
    # the report (every == line, the tables) on stdout, like exp_pg19.sh and exp_synthetic.sh; stderr only
    # for error:/note: lines (the == lines were on stderr here and on stdout there)
    assert not [ln for ln in p.stderr.splitlines() if ln.startswith("==")], p.stderr
    finished = [ln for ln in p.stdout.splitlines() if re.match(r"== \S+ r\d+ \S+ seed \d+: done: step 6 ", ln)]
    assert len(finished) == len(names), p.stdout  # one line per run as it finishes
    assert all(re.search(r"weights: \S+/model_00000006\.bin$", ln) for ln in finished), finished  # whole paths
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
    again = sh(cmd + ["--plots", "0"], timeout=300)  # (--plots is no run's setting)
    assert "== " not in again.stdout.replace("== summary", ""), again.stdout  # nothing trained again
    assert "== summary of 12 of 12 runs" in p.stdout


def test_exp_pg19_from_another_directory_uses_its_repositorys_trainer(tmp_path):
    """trial 11: exp_pg19.sh started from another directory took that directory's ./train_gpt2_ls (with this
    repository's scripts and preset) and data/shards/pg19_sp. Its defaults are its repository's."""
    repo_bin = REPO / "train_gpt2_ls"
    if not repo_bin.exists():
        pytest.fail(f"{repo_bin} is missing; build it with `make cpu`")
    decoy = tmp_path / "train_gpt2_ls"  # a program of that name in the directory started in
    decoy.write_text("#!/bin/sh\necho decoy >&2\nexit 3\n")
    decoy.chmod(0o755)
    env = {k: v for k, v in ENV.items() if k not in ("TRAINER", "TRAIN_GPT2_LS")}
    p = subprocess.run(["bash", str(REPO / "scripts" / "exp_pg19.sh"), "--smoke", "--steps", "1", "--variants", "ls",
                        "--out", tmp_path / "o", "--source", SHARED / "pg19"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "decoy" not in p.stderr, p.stderr[-2000:]
    assert f"the CPU trainer is {repo_bin}" in p.stdout, p.stdout


@pytest.mark.parametrize("line, said", [("z-loss=1e-4", "z-loss=1e-4, which variant mhsa_zloss"),
                                        ("attn-softcap = 50  # capped", "attn-softcap=50, which variant mhsa_softcap"),
                                        ("qk-norm=", "qk-norm=true, which variant mhsa_qknorm"),
                                        ("qk-clip=\"100\"", "qk-clip=100, which variant mhsa_qkclip")])
def test_exp_pg19_refuses_a_preset_that_turns_on_a_variants_stabilizer(tmp_path, line, said):
    """trial 11: a --config preset with z-loss=1e-4 gave every variant the z-loss, the plain mhsa too, each run
    under its variant's name with identical numbers. Refused before anything runs, as --extra's flags are; the
    same keys set off are taken."""
    conf = tmp_path / "my.toml"
    conf.write_text((REPO / "configs" / "paper_pg19.toml").read_text() + line + "\n")
    p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--config", conf, "--out", tmp_path / "o",
            "--source", SHARED / "pg19"], check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [
        f"error: --config {conf} sets {said} sets for itself: every run would have it, the baselines too; "
        "remove it from the file and choose the variants with --variants"], p.stderr
    assert not (tmp_path / "o").exists()
    off = tmp_path / "off.toml"
    off.write_text((REPO / "configs" / "paper_pg19.toml").read_text() + line.split("=")[0] + "=0\n")
    sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--config", off, "--out", tmp_path / "o2",
        "--source", SHARED / "pg19", "--variants", "ls", "--steps", "1"], timeout=300)


def test_exp_pg19_variants_are_what_they_say_whatever_the_preset_spells(tmp_path):
    """(a review) spellings of a stabilizer the refusal above does not read, a bare `qk-norm` line (on, to the
    trainer), a quoted key, still reached every run through the file. Each variant now gives the stabilizers it
    does not set as off on its command line, which wins over the file: the baseline is plain MHSA and
    mhsa_zloss has its z-loss alone."""
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    conf = tmp_path / "my.toml"
    conf.write_text((REPO / "configs" / "paper_pg19.toml").read_text() + "qk-norm\n\"attn-softcap\"=30\n'qk-clip' = 5\n")
    out = tmp_path / "o"
    sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--config", conf, "--out", out, "--source",
        SHARED / "pg19", "--variants", "mhsa mhsa_zloss", "--steps", "1"], timeout=300)
    # (a review) not recorded in NAME.args, which the variant's name stands for: a run of an earlier version,
    # whose .args lacks them, resumes as the same settings
    assert not [ln for ln in (out / "runs" / "mhsa.args").read_text().splitlines()
                if ln.split()[0].split("=")[0] in ("--qk-norm", "--z-loss", "--attn-softcap", "--qk-clip")]
    for name, z_loss in [("mhsa", 0), ("mhsa_zloss", 1e-4)]:
        c = json.loads((out / "runs" / name / "config.json").read_text())
        assert (c["model"]["qk_norm"], c["model"]["attn_softcap"], c["train"]["qk_clip"]) == (False, 0, 0), c
        assert c["train"]["z_loss"] == pytest.approx(z_loss), c["train"]


def test_exp_pg19_smoke_takes_a_stagger_given(tmp_path):
    """trial 11: --smoke set the stagger to 1 s over a --stagger given (every other smoke default yields to a
    value given), so a smoke window never measured the runs alone and together."""
    p = sh(["bash", REPO / "scripts" / "exp_pg19.sh", "--smoke", "--parallel", "1", "--stagger", "2", "--steps", "1",
            "--out", tmp_path / "o", "--source", SHARED / "pg19"], timeout=300)
    assert "== training: 2 run(s) at once, started 2 s apart" in p.stdout, p.stdout
