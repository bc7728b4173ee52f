"""-x -1 is one epoch of the training data, counted in tokens (docs/training.md "Resuming and forking"), end
to end with the real binary on a byte-level epoch of 3072 tokens (24 steps of B 4 x T 32):
  - a -d changed on resume (-y 1) or in a fork trains the tokens left of the epoch at the new tokens per
    step, with a note giving both step totals and, on -y 1, a history entry {"epoch": true} for the total;
  - a run that has trained its epoch has nothing to train, said as an epoch, not as an -x never given.
"""
import json
import re
import shutil

from run_helpers import TINY, data_args, read_jsonl, run, shakespeare_bytes, write_byte_data

# B 4 x T 32 = 128 tokens per micro-step; the train shard holds 24 windows of 128 (+1) tokens
EPOCH = TINY + ["-s", 0, "-v", 0, "-u", 2, "-n", 6, "--logit-stats-every", 0]


def epoch_data(tmp_path):
    (tmp_path / "data").mkdir()
    return write_byte_data(tmp_path / "data", shakespeare_bytes(3700), [24 * 128 + 1])


def steps_of(out):
    return {r["step"]: r for r in read_jsonl(out / "metrics.jsonl") if "loss" in r}


def notes(p):
    return [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]


def back_to_step(out, step, later):
    """The run directory as if its run had stopped after the checkpoint of `step`."""
    for s in later:
        for name in (f"model_{s:08d}.bin", f"state_{s:08d}_00000.bin", f"DONE_{s:08d}"):
            (out / name).unlink()


def test_a_d_changed_on_resume_trains_the_rest_of_the_epoch(tmp_path):
    data, out = epoch_data(tmp_path), tmp_path / "run"
    p = run(data_args(data) + EPOCH + ["-o", out])
    assert "128 tokens/step | 24 steps" in p.stdout and max(steps_of(out)) == 24
    back_to_step(out, 6, [12, 18, 24])

    p = run(["-o", out, "-y", 1, "-d", 256, "--threads", 1])
    assert notes(p) == [
        "note: resuming at step 6 with --total-batch-size 256 (was -1)",
        "note: -x -1 (one epoch, 3072 tokens): 768 tokens trained by step 6, 2304 left: at 256 tokens/step "
        "(was 128) the run ends at step 15 (was 24), 9 steps from here"]
    assert sorted(steps_of(out)) == list(range(1, 16))
    assert "done: step 15 (9 in this run) | 3072 tokens" in p.stdout
    conf = json.loads((out / "config.json").read_text())
    assert conf["train"]["max_steps"] == -1 and conf["derived"]["max_steps"] == 24
    assert conf["history"] == [{"step": 6, "flag": "--total-batch-size", "old": -1, "new": 256},
                               {"step": 6, "flag": "--max-steps", "old": 24, "new": 15, "epoch": True}]

    # the epoch is trained: a plain -y 1 (and one back at 128 tokens/step) has nothing to train, in those words
    before = (out / "config.json").read_bytes()
    for extra in ([], ["-d", -1]):
        p = run(["-o", out, "-y", 1, "--threads", 1] + extra)
        assert ("note: -x -1 (one epoch, 3072 tokens): 3072 tokens trained by step 15, 0 left: less than one step "
                f"of {256 if not extra else 128} tokens; nothing to train (give -x above 15 to train past the epoch)"
                in notes(p)), p.stderr
        assert "not below -x" not in p.stderr
    assert (out / "config.json").read_bytes() == before

    # resumed again from step 12 (an epoch entry at or after the checkpoint's step goes, derived anew)
    back_to_step(out, 12, [15])
    p = run(["-o", out, "-y", 1, "--threads", 1])
    assert not any("one epoch" in n for n in notes(p)), p.stderr
    assert max(steps_of(out)) == 15
    assert json.loads((out / "config.json").read_text())["history"] == conf["history"]


def test_a_fork_with_another_d_trains_the_rest_of_the_epoch(tmp_path):
    data, src = epoch_data(tmp_path), tmp_path / "src"
    run(data_args(data) + EPOCH + ["-o", src])
    ckpt = src / "model_00000006.bin"

    fork = tmp_path / "fork"
    p = run(["--fork-from", ckpt, "-o", fork, "-d", 256, "--threads", 1])
    assert notes(p) == [
        "note: forking at step 6 with --total-batch-size 256 (was -1)",
        "note: -x -1 (one epoch, 3072 tokens): 768 tokens trained by step 6, 2304 left: at 256 tokens/step "
        "(was 128) the run ends at step 15 (was 24), 9 steps from here"]
    assert "done: step 15 (9 in this run) | 3072 tokens" in p.stdout
    conf = json.loads((fork / "config.json").read_text())
    assert conf["derived"]["max_steps"] == 15 and "history" not in conf
    assert conf["forked_from"]["tokens"] == 768

    # the learning rate of those steps is the schedule of a 15-step run, as -x 15 gives it
    fixed = tmp_path / "fixed"
    run(["--fork-from", ckpt, "-o", fixed, "-d", 256, "-x", 15, "--threads", 1])
    got, want = steps_of(fork), steps_of(fixed)
    assert sorted(got) == sorted(want) == list(range(7, 16))
    assert [got[s]["lr"] for s in got] == [want[s]["lr"] for s in want]

    # the same -d: the source's epoch, no note
    same = tmp_path / "same"
    p = run(["--fork-from", ckpt, "-o", same, "-x", -1, "--threads", 1])
    assert not any("one epoch" in n for n in notes(p)) and max(steps_of(same)) == 24

    # a fork of the epoch's last step has nothing to train: refused before writing anything
    done = tmp_path / "done"
    p = run(["--fork-from", src / "model_00000024.bin", "-o", done, "--threads", 1], check=False)
    assert p.returncode != 0 and not done.exists()
    assert p.stderr.strip().splitlines()[-1] == (
        f"error: --fork-from {src / 'model_00000024.bin'}: -x -1 (one epoch, 3072 tokens): 3072 tokens trained by "
        "step 24, 0 left: less than one step of 128 tokens; nothing to train: a fork trains from step 25, so give "
        "-x above 24 (nothing was written)")
