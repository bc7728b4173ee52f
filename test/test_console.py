"""The trainer's console and its records end to end (CPU backend, run_helpers.py's byte-level data and TINY
model): every step line carries elapsed time and an ETA, one line per checkpoint written, the
end-of-run summary, console.log and samples.txt in -o (appended on resume, never truncated), the
wall-clock "time" of every metrics record, and integers printed as integers. The formatting itself
is unit-tested in test/test_console.cpp."""
import re
import subprocess
import time

import numpy as np

from run_helpers import BIN, REPO, TINY, data_args, gpt2_tinyshakespeare, read_jsonl, run, write_shard

COMMON = TINY + ["-k", "constant", "-u", 0, "-l", "3e-3", "-v", 4, "-m", 2, "-s", 4, "-g", 12, "-n", 6,
                 "--logit-stats-every", 0]
TOKENS_PER_STEP = 4 * 32  # TINY's B x T, one process, no accumulation


def samples_of(text):
    """[(step, text)] of the --- sample at step N --- blocks in text."""
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"--- sample at step (\d+) ---\n(.*?)\n---\n", text, re.S)]


def summary_of(stdout):
    lines = [ln for ln in stdout.splitlines() if ln.startswith("done: ")]
    assert len(lines) == 1, stdout[-2000:]
    return lines[0]


def best_val(out):
    recs = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("val_loss") is not None]
    best = min(recs, key=lambda r: (r["val_loss"], r["step"]))
    return best["val_loss"], best["step"], recs[-1]["val_loss"], recs[-1]["step"]


def test_step_lines_checkpoint_lines_summary_and_the_files_in_o(byte_data, tmp_path):
    out = tmp_path / "run"
    t0 = time.time()
    p = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 12])
    t1 = time.time()
    steps = [ln for ln in p.stdout.splitlines() if ln.startswith("step") and "| loss" in ln]
    assert len(steps) == 12
    for ln in steps:
        assert re.search(r" \| elapsed \d+\.\ds \| ETA (\d+\.\ds|\d+m\d\ds)", ln), ln
    assert steps[-1].split("| ETA ")[1].startswith("0.0s")
    # one line per checkpoint written, naming its model file
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("checkpoint of step")] == \
           [f"checkpoint of step {s}: {out}/model_{s:08d}.bin" for s in (6, 12)]
    # the summary: steps, tokens, wall time, final and best validation loss, the weights
    best, best_step, final, final_step = best_val(out)
    assert final_step == 12
    s = summary_of(p.stdout)
    assert s.startswith(f"done: step 12 (12 in this run) | {12 * TOKENS_PER_STEP} tokens | wall time "), s
    assert f" | val loss {final:.4f} (step 12), best {best:.4f} (step {best_step}) | " in s, s
    assert s.endswith(f" | weights: {out}/model_00000012.bin"), s
    assert p.stdout.rstrip("\n").splitlines()[-1] == s
    # the console log is what was printed; the samples file holds the samples
    assert (out / "console.log").read_text() == p.stdout
    assert samples_of((out / "samples.txt").read_text()) == samples_of(p.stdout)
    assert [st for st, _ in samples_of((out / "samples.txt").read_text())] == [4, 8, 12]
    # every metrics record has the wall-clock time (Unix seconds), non-decreasing
    times = [r["time"] for r in read_jsonl(out / "metrics.jsonl")]
    assert len(times) == 13  # step 0's validation and 12 steps
    assert all(isinstance(t, float) and t0 - 1 <= t <= t1 + 1 for t in times), times
    assert times == sorted(times)


def test_resume_appends_to_console_log_and_samples_and_sums_up_the_whole_run(byte_data, tmp_path):
    out = tmp_path / "run"
    a = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 6])
    b = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 12, "-y", 1])
    assert "resumed from" in b.stdout
    assert (out / "console.log").read_text() == a.stdout + b.stdout
    assert samples_of((out / "samples.txt").read_text()) == samples_of(a.stdout) + samples_of(b.stdout)
    best, best_step, final, _ = best_val(out)  # over steps 0..12: the first run's validations included
    s = summary_of(b.stdout)
    assert s.startswith(f"done: step 12 (6 in this run) | {12 * TOKENS_PER_STEP} tokens | wall time "), s
    assert f" | val loss {final:.4f} (step 12), best {best:.4f} (step {best_step}) | " in s, s
    # a refused run (a bad flag) writes nothing into either file
    before = {f: (out / f).read_bytes() for f in ("console.log", "samples.txt")}
    bad = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 14, "-y", 1, "-b", 0], check=False)
    assert bad.returncode != 0
    assert {f: (out / f).read_bytes() for f in before} == before


def test_without_o_the_summary_says_nothing_was_saved(byte_data):
    p = run(data_args(byte_data) + COMMON + ["-x", 2, "-s", 0, "-n", 0])
    s = summary_of(p.stdout)
    assert s.endswith(" | weights: not saved (no -o)"), s
    assert "checkpoint of step" not in p.stdout


def test_a_run_of_no_step_into_o_says_why_nothing_was_saved(byte_data, tmp_path):
    """trial 3 F6: -x 0 -o DIR said "weights: not saved (no -o)" though -o was given."""
    p = run(data_args(byte_data) + COMMON + ["-x", 0, "-o", tmp_path / "x0"])
    s = summary_of(p.stdout)
    assert s.endswith(" | weights: not saved (no step trained)"), s


def test_integers_print_as_integers(byte_data, tmp_path):
    p = run(data_args(byte_data) + COMMON + ["-o", tmp_path / "x", "-x", -2000000], check=False)
    assert p.returncode == 1
    assert "(got -2000000)" in p.stderr and "e+" not in p.stderr, p.stderr
    p = run(data_args(byte_data) + COMMON + ["-o", tmp_path / "w", "--spike-window", 1], check=False)
    assert "(got 1)" in p.stderr, p.stderr


def test_best_val_counts_only_since_the_validation_set_changed(byte_data, tmp_path):
    """trial 5 F2: after -y 1 changed -m, the summary's "best" took a loss of the earlier validation set
    (2 batches) as the best of the run, whose last losses are on another (1 batch)."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 6])
    b = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 12, "-y", 1, "-m", 1])
    recs = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("val_loss") is not None]
    assert [r["step"] for r in recs] == [0, 4, 6, 8, 12]
    after = [r for r in recs if r["step"] > 6]  # measured on the new set (step 6's was on the old one)
    best = min(after, key=lambda r: (r["val_loss"], r["step"]))
    s = summary_of(b.stdout)
    assert (f" | val loss {recs[-1]['val_loss']:.4f} (step 12), best {best['val_loss']:.4f} (step {best['step']}; "
            "since step 6, when --val-batches changed) | ") in s, s
    # a later resume that changes nothing keeps counting from that change
    c = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 14, "-y", 1, "-m", 1])
    assert "; since step 6, when --val-batches changed) | " in summary_of(c.stdout)


def test_best_val_of_a_new_val_data_is_not_a_loss_of_the_old_one(byte_data, tmp_path):
    """trial 5 F2: after -y 1 changed -j to a harder set, the summary named a loss of the old set as the best."""
    noise = tmp_path / "noise"
    noise.mkdir()
    write_shard(noise / "val_000000.bin", np.random.default_rng(0).integers(0, 256, 12_000))
    for f in ("meta.json", "tokenizer.bin"):
        (noise / f).write_bytes((byte_data / f).read_bytes())
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 6])
    b = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 12, "-y", 1, "-j", f"{noise}/val_*.bin"])
    recs = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("val_loss") is not None]
    old = min(r["val_loss"] for r in recs if r["step"] <= 6)
    new = [r for r in recs if r["step"] > 6]
    best = min(new, key=lambda r: (r["val_loss"], r["step"]))
    assert old < best["val_loss"]  # random bytes are harder than Shakespeare: the old set's best would win
    s = summary_of(b.stdout)
    assert f", best {best['val_loss']:.4f} (step {best['step']}; since step 6, when --val-data changed) | " in s, s


def test_a_lowered_alarm_keep_on_resume_says_which_checkpoints_lose_their_pin(tmp_path):
    """(a new-user trial) -y 1 --logit-alarm-keep 1 on a run whose alarm checkpoints were pinned deleted them
    at the next save, said only after it and as "--keep-checkpoints 1" prunes. A note now says first which
    checkpoints lose their pin (those that --keep-checkpoints prunes anyway are not its doing)."""
    data = gpt2_tinyshakespeare()
    out = tmp_path / "run"
    model = ["--layers", 2, "--channels", 32, "--heads", 2, "-b", 2, "-t", 32, "--window", 8, "-s", 0, "-v", 0,
             "--threads", 1]
    run(["-i", f"{data}/train_*.bin", "-o", out, "-x", 30, "-n", 5, "-l", "1e-2", "--keep-checkpoints", 1,
         "--logit-alarm-above", 0.5, "--logit-alarm-cooldown", 1, "--logit-alarm", 2, "--spike-window", 5] + model)
    before = sorted(int(p.name[5:]) for p in out.glob("DONE_*"))
    assert len(before) >= 3 and before[-1] == 30, before  # alarm checkpoints (and their predecessors) pinned
    p = run(["-o", out, "-y", 1, "-x", 32, "--logit-alarm-keep", 1, "--threads", 1])
    notes = [ln for ln in p.stderr.splitlines() if "existing checkpoint" in ln]
    assert len(notes) == 1, p.stderr
    m = re.fullmatch(rf"note: --logit-alarm-keep 1 \(was 3\) pins only the newest alarm checkpoint past "
                     rf"--keep-checkpoints 1: the next save deletes (\d+) of the {len(before)} existing checkpoints "
                     rf"in {re.escape(str(out))} \(steps? ([\d, ]+)\)", notes[0])
    assert m, notes[0]
    said = [int(x) for x in m.group(2).split(", ")]
    pruned = [int(ln.split()[4]) for ln in p.stderr.splitlines() if ln.startswith("pruned checkpoint of step")]
    assert int(m.group(1)) == len(said) and set(said) < set(pruned) and 30 not in said, (said, pruned)
    assert 30 in pruned  # pruned by --keep-checkpoints 1 under any alarm keep: not the note's


def test_pruned_checkpoints_are_named_and_a_new_keep_on_resume_says_what_it_deletes(byte_data, tmp_path):
    """trial 5 F5: -y 1 --keep-checkpoints 1 on a run that held five checkpoints deleted four of them (and the
    one resumed from) without a line naming them. Each pruned step gets one line on stderr, and giving K on a
    resume (or lowering it) says first how many existing checkpoints it will delete."""
    out = tmp_path / "run"
    args = data_args(byte_data) + COMMON + ["-o", out, "-n", 2, "-v", 0, "-s", 0]
    a = run(args + ["-x", 6])
    assert "pruned" not in a.stderr, a.stderr  # --keep-checkpoints 0: all kept
    assert sorted(p.name for p in out.glob("DONE_*")) == [f"DONE_{s:08d}" for s in (2, 4, 6)]
    b = run(args + ["-x", 10, "-y", 1, "--keep-checkpoints", 2])
    notes = [ln for ln in b.stderr.splitlines() if "existing checkpoint" in ln]
    assert notes == [f"note: --keep-checkpoints 2 (was 0) keeps the newest 2 checkpoints: the next save deletes 2 "
                     f"of the 3 existing checkpoints in {out} (steps 2, 4)"], b.stderr
    pruned = [ln for ln in b.stderr.splitlines() if ln.startswith("pruned ")]
    assert pruned == [f"pruned checkpoint of step {s} (--keep-checkpoints 2)" for s in (2, 4, 6)], b.stderr
    assert sorted(p.name for p in out.glob("DONE_*")) == [f"DONE_{s:08d}" for s in (8, 10)]
    # the same K again: pruning goes on, named step by step, with no new note
    c = run(args + ["-x", 12, "-y", 1])
    assert "existing checkpoint" not in c.stderr, c.stderr
    # a new-user trial: "keeps the newest 1 checkpoints"; one checkpoint and one step in the singular
    d = run(args + ["-x", 14, "-y", 1, "--keep-checkpoints", 1])
    notes = [ln for ln in d.stderr.splitlines() if "existing checkpoint" in ln]
    assert notes == [f"note: --keep-checkpoints 1 (was 2) keeps the newest checkpoint: the next save deletes 2 "
                     f"of the 2 existing checkpoints in {out} (steps 10, 12)"], d.stderr
    assert [ln for ln in c.stderr.splitlines() if ln.startswith("pruned ")] == \
        ["pruned checkpoint of step 8 (--keep-checkpoints 2)"], c.stderr
    # a trial of round 6: the pruned lines came before the line of the checkpoint whose save deleted them; in
    # one stream (stdout flushed per line) each save's line comes first, then what it deleted
    merged = subprocess.run([str(BIN), "--device", "cpu"] + [str(a) for a in args + ["-x", 18, "-y", 1]], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert merged.returncode == 0, merged.stdout
    lines = [ln for ln in merged.stdout.splitlines() if ln.startswith(("checkpoint of step", "pruned checkpoint"))]
    assert [ln.split(":")[0].split(" (")[0] for ln in lines] == [
        "checkpoint of step 16", "pruned checkpoint of step 14", "checkpoint of step 18",
        "pruned checkpoint of step 16"], merged.stdout
