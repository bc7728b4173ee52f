"""The run directory is the source of truth (docs/training.md "Resuming and forking"), end to end with
the real binary on byte-level tiny Shakespeare and a tiny model:
  - `-o RUN -y 1` alone resumes with RUN's recorded settings; a changed training flag prints a note and
    is appended to config.json's "history" (the original "train" object and config.toml untouched);
  - --config reads a run's config.json; unknown TOML keys and mistyped flags get "did you mean";
  - --fork-from RUN/model_N.bin -o NEW starts a new run from that checkpoint, RUN untouched;
  - `make train` twice continues the run.
"""
import json
import shutil
import subprocess

import pytest

from run_helpers import (BIN, REPO, TINY, assert_refused, data_args, dir_hashes, gpt2_tinyshakespeare, read_jsonl,
                         run)

# constant LR, so a run continued to another -x follows the same schedule as an uninterrupted one
COMMON = TINY + ["-k", "constant", "-u", 0, "-l", "2e-3", "-v", 3, "-m", 2, "-s", 0, "--logit-stats-every", 2]


def train_losses(out):
    return {r["step"]: r for r in read_jsonl(out / "metrics.jsonl") if "loss" in r}


def assert_same_steps(ref, other, steps):
    a, b = train_losses(ref), train_losses(other)
    for s in steps:
        for key in ["loss", "grad_norm", "lr"]:
            assert a[s][key] == b[s][key], f"step {s}: {key} {a[s][key]} != {b[s][key]}"


def test_plain_resume_uses_the_record_and_a_change_becomes_history(byte_data, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    run(data_args(byte_data) + COMMON + ["-o", full, "-x", 10, "-n", 6])
    run(data_args(byte_data) + COMMON + ["-o", part, "-x", 6])
    conf_before = json.loads((part / "config.json").read_text())
    toml_before = (part / "config.toml").read_bytes()

    p = run(["-o", part, "-y", 1, "-x", 10, "--threads", 1])  # nothing else retyped
    assert "resumed from" in p.stdout and "at step 6" in p.stdout
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("note:")] == [
        "note: resuming at step 6 with --max-steps 10 (was 6)"]
    assert_same_steps(full, part, range(1, 11))
    assert (full / "model_00000010.bin").read_bytes() == (part / "model_00000010.bin").read_bytes()

    conf = json.loads((part / "config.json").read_text())
    assert conf["train"] == conf_before["train"] and conf["model"] == conf_before["model"]
    assert conf["derived"] == conf_before["derived"]
    assert conf["history"] == [{"step": 6, "flag": "--max-steps", "old": 6, "new": 10}]
    assert (part / "config.toml").read_bytes() == toml_before

    # a changed learning rate: one note, one more history entry; a later plain -y 1 keeps it
    p = run(["-o", part, "-y", 1, "-x", 12, "-l", "1e-3", "--threads", 1])
    assert "note: resuming at step 10 with --learning-rate 0.001 (was 0.002)" in p.stderr
    p = run(["-o", part, "-y", 1, "-x", 14, "--threads", 1])
    assert "--learning-rate" not in p.stderr
    conf = json.loads((part / "config.json").read_text())
    assert conf["train"] == conf_before["train"]
    assert conf["history"] == [{"step": 6, "flag": "--max-steps", "old": 6, "new": 10},
                               {"step": 10, "flag": "--max-steps", "old": 10, "new": 12},
                               {"step": 10, "flag": "--learning-rate", "old": 0.002, "new": 0.001},
                               {"step": 12, "flag": "--max-steps", "old": 12, "new": 14}]
    lrs = {s: r["lr"] for s, r in train_losses(part).items()}
    assert lrs[10] == pytest.approx(2e-3) and lrs[11] == pytest.approx(1e-3) and lrs[14] == pytest.approx(1e-3)
    assert (part / "config.toml").read_bytes() == toml_before

    # a plain -y 1 with nothing to change leaves config.json as it is
    before = (part / "config.json").read_bytes()
    run(["-o", part, "-y", 1, "--threads", 1])
    assert (part / "config.json").read_bytes() == before


def test_resume_refuses_a_change_the_data_position_depends_on(byte_data, tmp_path):
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 4])
    assert_refused(["-o", out, "-y", 1, "-x", 8, "-b", 2], out, "resume with the same -b/-t")
    assert_refused(["-o", out, "-y", 1, "-x", 8, "--seed", 7], out, "seed")
    assert_refused(["-o", out, "-y", 1, "-x", 8, "--layers", 3], out, "different model")


def test_resume_and_fork_refuse_other_weights(byte_data, tmp_path):
    """-e on a resumed or forked run would name weights the run does not use: refused, not recorded."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 4])
    assert_refused(["-o", out, "-y", 1, "-x", 8, "-e", "d6"], out,
                   "-e d6 differs from the run's -e ls-small, but a resumed run continues its checkpoint's weights")
    assert_refused(["-o", out, "-y", 1, "-x", 8, "-e", out / "model_00000004.bin"], out, "resumed run continues")
    assert_refused(["--fork-from", out / "model_00000004.bin", "-o", tmp_path / "branch", "-e", "d6"], out,
                   "but a forked run continues its checkpoint's weights")
    assert not (tmp_path / "branch").exists() or not any((tmp_path / "branch").iterdir())
    run(["-o", out, "-y", 1, "-x", 6, "-e", "ls-small", "--threads", 1])  # the run's own -e: no change


def test_config_reads_a_runs_config_json(byte_data, tmp_path):
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 2, "--z-loss", "1e-4"])
    new = tmp_path / "new"
    run(["--config", src / "config.json", "-o", new, "-x", 3, "--threads", 1])
    a, b = json.loads((src / "config.json").read_text()), json.loads((new / "config.json").read_text())
    assert b["model"] == a["model"]
    differ = {k for k in a["train"] if a["train"][k] != b["train"][k]}
    assert differ == {"output_dir", "max_steps"}, differ

    bad = tmp_path / "bad.json"
    bad.write_text('{"train": {"seq_len": 32,')
    o = tmp_path / "o"
    o.mkdir()
    assert_refused(["--config", bad, "-o", o], o, f"config file {bad}: not valid JSON")


def test_unknown_config_keys_and_mistyped_flags_suggest_the_nearest(byte_data, tmp_path):
    o = tmp_path / "o"
    o.mkdir()
    cfg = tmp_path / "x.toml"
    cfg.write_text("learning-rate=0.001\nqknorm=true\n")
    assert_refused(data_args(byte_data) + TINY + ["--config", cfg, "-o", o], o,
                   f"error: config file {cfg}: unknown key 'qknorm'; did you mean --qk-norm?")
    cfg.write_text("[train]\nlearning-rate=0.001\n")
    assert_refused(data_args(byte_data) + TINY + ["--config", cfg, "-o", o], o, "unknown section [train]")
    assert_refused(data_args(byte_data) + TINY + ["--qknorm", "-o", o], o, "--qknorm; did you mean --qk-norm?")
    assert_refused(data_args(byte_data) + TINY + ["--learning_rate", "1e-3", "-o", o], o,
                   "did you mean --learning-rate?")


def test_fork_from_a_checkpoint_leaves_the_source_untouched(byte_data, tmp_path):
    src = tmp_path / "src"
    # --logit-alarm-above far below any logit: step 1 is an alarm checkpoint (pinned), -n 2 the others
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 6, "-n", 2, "--keep-checkpoints", 2,
                                         "--logit-alarm-above", "1e-6"])
    assert (src / "DONE_00000001").exists() and (src / "DONE_00000006").exists()
    hashes = dir_hashes(src)

    same = tmp_path / "same"  # a fork with no change continues exactly as the source did
    p = run(["--fork-from", src / "model_00000004.bin", "-o", same, "--threads", 1])
    assert "forked from" in p.stdout and "at step 4" in p.stdout
    assert_same_steps(src, same, [5, 6])
    assert (src / "model_00000006.bin").read_bytes() == (same / "model_00000006.bin").read_bytes()
    conf = json.loads((same / "config.json").read_text())
    assert conf["forked_from"] == {"checkpoint": str(src / "model_00000004.bin"), "step": 4, "tokens": 4 * 4 * 32}
    assert conf["train"]["output_dir"] == str(same) and "history" not in conf

    branch = tmp_path / "branch"  # from the alarm checkpoint, with another stabilizer
    p = run(["--fork-from", src / "model_00000001.bin", "-o", branch, "-x", 3, "--qk-clip", 50, "--threads", 1])
    assert "note: forking at step 1 with --qk-clip 50 (was 0)" in p.stderr
    conf = json.loads((branch / "config.json").read_text())
    assert conf["train"]["qk_clip"] == 50 and conf["forked_from"]["step"] == 1
    assert sorted(train_losses(branch)) == [2, 3]
    assert dir_hashes(src) == hashes, "the fork changed the source run"

    # refusals: one line each, nothing written
    assert_refused(["--fork-from", src / "model_00000004.bin", "-o", branch, "-y", 1], branch, "drop one of them")
    assert_refused(["--fork-from", src / "model_00000004.bin", "-o", src], src, "already holds checkpoints")
    assert_refused(["--fork-from", src / "model_00000002.bin", "-o", tmp_path / "x"], src, "no such file")
    partial = tmp_path / "partial"
    shutil.copytree(src, partial)
    (partial / "DONE_00000004").unlink()
    assert_refused(["--fork-from", partial / "model_00000004.bin", "-o", tmp_path / "y"], partial,
                   "is not a complete checkpoint")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def make_train(out, args):
    """`make train` with the Makefile's own rule, the trainer and data taken as built (make -o)."""
    gpt2_tinyshakespeare()
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls`")
    return subprocess.run(["make", "-s", "-o", "train_gpt2_ls", "-o", "data/shards/tinyshakespeare_gpt2/meta.json", "train",
                           f"TRAIN_OUT={out}", "TRAIN_ARGS=" + " ".join(map(str, args))],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_make_train_twice_continues_the_run(tmp_path):
    out = tmp_path / "ts"
    tiny = ["--device", "cpu", "--layers", 1, "--channels", 32, "--heads", 2, "-b", 2, "-t", 32, "-v", 0, "-s", 0,
            "--threads", 1]
    first = make_train(out, tiny + ["-x", 2])
    assert first.returncode == 0, first.stderr
    second = make_train(out, tiny + ["-x", 4])
    assert second.returncode == 0, second.stderr
    assert "resumed from" in second.stdout and "at step 2" in second.stdout
    assert sorted(train_losses(out)) == [1, 2, 3, 4]
    assert json.loads((out / "config.json").read_text())["history"] == [
        {"step": 2, "flag": "--max-steps", "old": 2, "new": 4}]
