"""The run directory is the source of truth (docs/training.md "Resuming and forking"), end to end with
the real binary on byte-level tiny Shakespeare and a tiny model:
  - `-o RUN -y 1` alone resumes with RUN's recorded settings; a changed training flag prints a note and
    is appended to config.json's "history" (the original "train" object and config.toml untouched);
  - --config reads a run's config.json; unknown TOML keys and mistyped flags get "did you mean";
  - --fork-from RUN/model_N.bin -o NEW starts a new run from that checkpoint, RUN untouched;
  - `make train` twice continues the run.
"""
import json
import os
import re
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


def test_a_changed_total_under_a_decaying_schedule_is_said_with_both_rates(byte_data, tmp_path):
    """-x sets where cosine's decay ends: a resume with another -x says the next step's rate under the new
    total and the old one, and the schedule now; the metrics carry the new rate."""
    out = tmp_path / "run"
    cosine = [a for a in COMMON]
    cosine[cosine.index("constant")] = "cosine"
    run(data_args(byte_data) + cosine + ["-o", out, "-x", 4])
    p = run(["-o", out, "-y", 1, "-x", 8, "--threads", 1])
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]
    assert notes[0] == "note: resuming at step 4 with --max-steps 8 (was 4)", notes
    # update 4 (step 5): min_lr 2e-4 past the end of -x 4; under -x 8, p = 4/7 of the decay
    now = 2e-4 + (2e-3 - 2e-4) * 0.5 * (1 + __import__("math").cos(__import__("math").pi * 4 / 7))
    assert notes[1] == (f"note: the learning rate follows -x 8: step 5's is {now:.2e} (2.00e-04 with -x 4); "
                        "cosine: no warmup, 2.00e-03 from step 1, decay over steps 1-8 to 2.00e-04 (-q 0.1)"), notes
    assert abs(train_losses(out)[5]["lr"] - now) < 1e-9
    p = run(["-o", out, "-y", 1, "-x", 10, "-n", 0, "--threads", 1, "-k", "constant"])  # no decay: no such note
    assert "the learning rate follows" not in p.stderr


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


def test_a_run_record_with_a_key_twice_is_refused(byte_data, tmp_path):
    """A hand-edited config.json holding a key twice: JSON parsers keep the last value (0.01 trained silently);
    refused with one line naming the file and the key, as a TOML file's key given twice is. Every reader of a
    record reads through the same parser: --config, -y 1 and --eval-only alike."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 1])
    conf = src / "config.json"
    text = conf.read_text()
    assert text.count('"learning_rate": ') == 1
    conf.write_text(text.replace('"learning_rate": ', '"learning_rate": 0.01,\n    "learning_rate": ', 1))
    o = tmp_path / "o"
    o.mkdir()
    expect = f"config file {conf}: the key 'train.learning_rate' is given twice"
    assert_refused(["--config", conf, "-o", o, "--threads", 1], o, expect)
    assert_refused(["-o", src, "-y", 1, "-x", 2, "--threads", 1], src, expect)
    assert_refused(["--eval-only", "-e", src / "model_00000001.bin", "-m", 1], src, expect)


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


def make_train(out, args=None):
    """`make train` with the Makefile's own rule, the trainer and data taken as built (make -o);
    args None: no TRAIN_ARGS given (the Makefile's defaults apply)."""
    gpt2_tinyshakespeare()
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls`")
    given = [] if args is None else ["TRAIN_ARGS=" + " ".join(map(str, args))]
    env = {k: v for k, v in os.environ.items() if k != "TRAIN_ARGS"}
    return subprocess.run(["make", "-s", "-o", "train_gpt2_ls", "-o", "data/shards/tinyshakespeare_gpt2/meta.json", "train",
                           f"TRAIN_OUT={out}"] + given, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


def test_make_train_twice_continues_the_run(tmp_path):
    out = tmp_path / "ts"
    tiny = ["--device", "cpu", "--layers", 1, "--channels", 32, "--heads", 2, "-b", 2, "-t", 32, "-v", 0, "-s", 0,
            "--threads", 1]
    first = make_train(out, tiny + ["-x", 2])
    assert first.returncode == 0, first.stderr
    # a new run: the Makefile's -x 300 -v 50 -s 100 -n 100, then TRAIN_ARGS, which win (a new-user trial:
    # TRAIN_ARGS replaced them all, so `TRAIN_ARGS="-x 1000"` lost the intermediate checkpoints)
    train = json.loads((out / "config.json").read_text())["train"]
    assert (train["max_steps"], train["val_every"], train["sample_every"], train["checkpoint_every"]) == (2, 0, 0, 100)
    second = make_train(out, tiny + ["-x", 4])
    assert second.returncode == 0, second.stderr
    assert "resumed from" in second.stdout and "at step 2" in second.stdout
    assert sorted(train_losses(out)) == [1, 2, 3, 4]
    assert json.loads((out / "config.json").read_text())["history"] == [
        {"step": 2, "flag": "--max-steps", "old": 2, "new": 4}]


def test_make_train_with_a_config_file_or_a_fork_takes_its_data_and_values(tmp_path):
    """A re-trial: `make train TRAIN_ARGS="--config FILE"` typed tiny Shakespeare's -i/-j and the new-run
    defaults before the file, and typed flags win over a file's, so the file's data and -x were replaced;
    a trial of round 6: `--fork-from CKPT` likewise replaced the source run's -x (its schedule), -v, -s, -n
    and data. With a --config or --fork-from in TRAIN_ARGS the new run gets neither (make -n: the command
    only)."""
    out = tmp_path / "new"
    env = {k: v for k, v in os.environ.items() if k != "TRAIN_ARGS"}
    for given, defaults in (("--config configs/paper_pg19.toml", False), ("--config=configs/paper_pg19.toml", False),
                            ("--fork-from out/src/model_00000010.bin", False),
                            ("--fork-from=out/src/model_00000010.bin -x 40", False), ("-x 5", True)):
        p = subprocess.run(["make", "-n", "-s", "-o", "train_gpt2_ls", "-o", "data/shards/tinyshakespeare_gpt2/meta.json",
                            "train", f"TRAIN_OUT={out}", f"TRAIN_ARGS={given}"], cwd=REPO, capture_output=True,
                           text=True, timeout=60, env=env)
        line = [ln for ln in p.stdout.splitlines() if "./train_gpt2_ls " in ln]
        assert p.returncode == 0 and len(line) == 1, p.stdout + p.stderr
        words = line[0].split()
        assert words[-len(given.split()):] == given.split(), line
        assert ("-i" in words and "-n" in words) == defaults, line
        # a new-user trial: only a Makefile comment said the defaults were dropped; now one line on stderr
        said = [ln for ln in p.stderr.splitlines() if "gets none of make train's defaults" in ln]
        flag = given.split()[0].split("=")[0]
        source = "the file" if flag == "--config" else "the source run"
        assert said == ([] if defaults else [
            f"make train: TRAIN_ARGS has {flag}: the new run in {out} gets none of make train's defaults (tiny "
            f"Shakespeare's -i/-j and -x 300 -v 50 -s 100 -n 100); its data and settings come from {source} and "
            "the flags given; add them to TRAIN_ARGS to keep them"]), p.stderr
    # continuing the run in TRAIN_OUT takes no defaults anyway: no line
    out.mkdir()
    (out / "config.json").write_text("{}")
    p = subprocess.run(["make", "-n", "-s", "-o", "train_gpt2_ls", "-o", "data/shards/tinyshakespeare_gpt2/meta.json",
                        "train", f"TRAIN_OUT={out}", "TRAIN_ARGS=--config configs/paper_pg19.toml"], cwd=REPO,
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and "make train's defaults" not in p.stderr, p.stderr


def test_plain_make_train_continues_with_the_recorded_settings(tmp_path):
    """A run started by `make train TRAIN_ARGS=...` and stopped early is continued by a plain `make
    train` with its recorded settings: the Makefile's new-run defaults (-x 300 ...) never override
    the record (neither on a run with a checkpoint nor on one stopped before its first)."""
    tiny = ["--device", "cpu", "--layers", 1, "--channels", 32, "--heads", 2, "-b", 2, "-t", 32, "-v", 0,
            "--threads", 1]
    out = tmp_path / "mk"
    first = make_train(out, tiny + ["-x", 4, "-n", 2, "-s", 0])
    assert first.returncode == 0, first.stderr
    for f in ["DONE_00000004", "model_00000004.bin"]:  # as if stopped after step 2's checkpoint
        (out / f).unlink()
    again = make_train(out)
    assert again.returncode == 0, again.stderr
    assert "note: resuming" not in again.stderr, again.stderr  # no recorded setting was changed
    assert "resumed from" in again.stdout and "at step 2" in again.stdout
    assert sorted(train_losses(out)) == [1, 2, 3, 4]
    assert "history" not in json.loads((out / "config.json").read_text())
    # stopped before its first checkpoint: the run starts again from step 0 with its own settings
    early = tmp_path / "early"
    assert make_train(early, tiny + ["-x", 2, "-n", 0, "-s", 0]).returncode == 0
    as_if_killed_before_its_first_checkpoint(early)
    again = make_train(early)
    assert again.returncode == 0, again.stderr
    assert sorted(train_losses(early)) == [1, 2]
    assert json.loads((early / "config.json").read_text())["train"]["max_steps"] == 2


def test_plain_make_train_keeps_a_runs_own_data(byte_data, tmp_path):
    """`make train TRAIN_OUT=DIR` on a run of other data (not make train's tiny Shakespeare) continues it on
    its own data: the Makefile's -i/-j are a new run's defaults and are not passed to a run, neither one
    stopped before its first checkpoint (which was switched to tiny Shakespeare, its config.json rewritten)
    nor one with a checkpoint (which was refused)."""
    early, ckpt = tmp_path / "early", tmp_path / "ckpt"
    run(data_args(byte_data) + COMMON + ["-o", early, "-x", 2, "-n", 0])
    as_if_killed_before_its_first_checkpoint(early)
    run(data_args(byte_data) + COMMON + ["-o", ckpt, "-x", 2, "-n", 2])
    for out, steps in [(early, [1, 2]), (ckpt, [1, 2, 3])]:
        before = json.loads((out / "config.json").read_text())
        again = make_train(out, None if out == early else ["-x", 3])
        assert again.returncode == 0, again.stderr
        assert "--train-data" not in again.stderr and "--val-data" not in again.stderr, again.stderr
        conf = json.loads((out / "config.json").read_text())
        assert conf["train"]["train_data"] == before["train"]["train_data"]
        assert conf["train"]["val_data"] == before["train"]["val_data"]
        assert "tinyshakespeare_gpt2" not in json.dumps(conf)
        assert sorted(train_losses(out)) == steps


def test_a_new_run_never_overwrites_a_run_without_a_checkpoint(byte_data, tmp_path):
    """A run stopped before its first checkpoint still has its record files: a new run (fresh or
    forked) into that -o is refused and they stay as they were; -y 1 continues it from step 0."""
    killed, src = tmp_path / "killed", tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", killed, "-x", 3, "-n", 0])
    as_if_killed_before_its_first_checkpoint(killed)  # records of steps 1..3, no checkpoint
    assert_refused(data_args(byte_data) + COMMON + ["-o", killed, "-x", 2], killed,
                   "holds a run without a checkpoint (config.json, config.toml, metrics.jsonl")
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 2, "-n", 2])
    assert_refused(["--fork-from", src / "model_00000002.bin", "-o", killed, "-x", 4], killed,
                   "continue it with -y 1")
    # model flags over the record (trial 11: the run started again as another model, with a note naming
    # none of them, its logit statistics split at the old window): refused, as with a checkpoint
    for flags, diff in [(["--window", 3], "window 3 vs 8"), (["--qk-norm", "--bias", 0],
                                                             "qk_norm true vs false, bias false vs true")]:
        assert_refused(["-o", killed, "-y", 1, "--threads", 1] + flags, killed,
                       f"-y 1: {killed} has no complete checkpoint yet, and the model flags given make another model "
                       f"than {killed / 'config.json'} records ({diff}): -y 1 continues the run's model; drop those "
                       "flags, or train that model in another -o")
    # (a review) a model flag a --config file set, not typed: named with the file, and the fix is the file's
    conf = tmp_path / "w3.toml"
    conf.write_text("window=3\n")
    assert_refused(["--config", conf, "-o", killed, "-y", 1, "--threads", 1], killed,
                   f"-y 1: {killed} has no complete checkpoint yet, and the model flags of --config {conf} (--window) "
                   f"make another model than {killed / 'config.json'} records (window 3 vs 8): -y 1 continues the "
                   "run's model; drop --config, or train that model in another -o")
    assert_refused(["--config", conf, "-o", killed, "-y", 1, "--threads", 1, "--bias", 0], killed,
                   f"the model flags given make another model than {killed / 'config.json'} records (window 3 vs 8, "
                   f"bias false vs true): -y 1 continues the run's model; drop those flags (--window from --config "
                   f"{conf}), or train that model in another -o")
    p = run(["-o", killed, "-y", 1, "--threads", 1, "--seed", 5])
    assert "note: -y 1: " + str(killed) + " has no complete checkpoint yet; its run starts again from step 0" \
        in p.stderr
    assert "note: -y 1: starting again from step 0 with --seed 5 (was 1337)" in p.stderr  # a flag over the record
    assert sorted(train_losses(killed)) == [1, 2, 3]


def test_resume_into_a_directory_without_a_run_says_so_on_stderr(byte_data, tmp_path):
    """-y 1 with a mistyped -o starts a new run (a requeued job's first start does the same), and says so
    on stderr, naming a run directory with a near name."""
    run(data_args(byte_data) + COMMON + ["-o", tmp_path / "run_a", "-x", 2, "-n", 2])
    p = run(data_args(byte_data) + COMMON + ["-o", tmp_path / "run-b", "-y", 1, "-x", 2])
    assert (f"note: -y 1: {tmp_path / 'run-b'} holds no run (no config.json); a new run starts there from step 0; "
            f"did you mean -o {tmp_path / 'run_a'}?") in p.stderr.splitlines()
    assert "note:" not in p.stdout


def test_a_fork_that_trains_nothing_is_refused_before_writing(byte_data, tmp_path):
    """--fork-from the source's last step with its -x: nothing to train, so nothing is written (a run of only
    the source's checkpoint would then refuse the -x the note asked for), and the error names the -x needed."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 4, "-n", 2])
    fork = tmp_path / "fork"
    for extra in ([], ["-x", 3]):
        p = run(["--fork-from", src / "model_00000004.bin", "-o", fork, "--threads", 1] + extra, check=False)
        assert p.returncode != 0 and not fork.exists()
        assert p.stderr.strip().splitlines()[-1] == (
            f"error: --fork-from {src / 'model_00000004.bin'}: the checkpoint's step 4 is not below -x "
            f"{extra[-1] if extra else 4}; nothing to train: a fork trains from step 5, so give -x above 4 "
            "(nothing was written)")
    p = run(["--fork-from", src / "model_00000004.bin", "-o", fork, "-x", 6, "--threads", 1])
    assert max(train_losses(fork)) == 6


def test_a_resume_that_trains_nothing_records_nothing(byte_data, tmp_path):
    """-y 1 -x 3 on a run at step 4: nothing to train, so config.json gains no history entry (a copy by
    --config would otherwise run 3 steps)."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 4, "-n", 2])
    before = (out / "config.json").read_bytes()
    p = run(["-o", out, "-y", 1, "-x", 3, "--threads", 1])
    assert "nothing to train" in p.stderr and "nothing to train" not in p.stdout
    assert "note: --max-steps 3 (was 4) is not recorded: no step is trained (config.json unchanged)" in p.stderr
    assert (out / "config.json").read_bytes() == before


def test_config_of_a_run_whose_settings_changed_asks_for_each_value(byte_data, tmp_path):
    """--config RUN/config.json of a run that changed settings while it trained (z-loss turned on at step
    3, extended to 5 steps): a new run cannot repeat a change at a step, so each changed setting must be
    given (its start or its end value, or another); then the copy runs with those, from step 1."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 3])
    run(["-o", src, "-y", 1, "-x", 5, "--z-loss", "1e-4", "--threads", 1])
    copy = tmp_path / "copy"
    copy.mkdir()
    assert_refused(["--config", src / "config.json", "-o", copy, "--threads", 1], copy,
                   "the run changed settings while it trained: --max-steps (3 at the start, 5 at the end), "
                   "--z-loss (0 at the start, 0.0001 at the end); a new run takes one value from its first step")
    assert_refused(["--config", src / "config.json", "-o", copy, "-x", 5, "--threads", 1], copy,
                   "while it trained: --z-loss (0 at the start, 0.0001 at the end);")
    p = run(["--config", src / "config.json", "-o", copy, "-x", 5, "--z-loss", "1e-4", "--threads", 1])
    assert (f"note: --config {src / 'config.json'}: that run's recorded settings and model, under the flags "
            "given here") in p.stderr
    train = json.loads((copy / "config.json").read_text())["train"]
    assert train["max_steps"] == 5 and train["z_loss"] == pytest.approx(1e-4)
    assert sorted(train_losses(copy)) == [1, 2, 3, 4, 5]


def test_a_setting_changed_and_changed_back_names_every_value(byte_data, tmp_path):
    """trial 14: a run whose z-loss was turned on at step 2 and off again at step 4 was said to have changed
    it "(0 at the start, 0 at the end)": each value is now named with its first step."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 2])
    run(["-o", src, "-y", 1, "-x", 4, "--z-loss", "1e-4", "-l", "1e-3", "--threads", 1])
    run(["-o", src, "-y", 1, "-x", 6, "--z-loss", "0", "--threads", 1])
    copy = tmp_path / "copy"
    copy.mkdir()
    assert_refused(["--config", src / "config.json", "-o", copy, "-x", 6, "--threads", 1], copy,
                   "the run changed settings while it trained: --learning-rate (0.002 at the start, 0.001 at the "
                   "end), --z-loss (0 at the start, 0.0001 from step 3, 0 from step 5 to the end); a new run")
    p = run(["--config", src / "config.toml", "-o", copy, "--threads", 1])
    assert ("--max-steps (2 at the start, 4 from step 3, 6 from step 5 to the end), --learning-rate (0.002 at the "
            "start, 0.001 at the end), --z-loss (0 at the start, 0.0001 from step 3, 0 from step 5 to the end); "
            "this run takes the start values") in p.stderr, p.stderr


def test_config_of_the_run_being_resumed_is_not_called_a_new_run(byte_data, tmp_path):
    """trial 3 F21: --config RUN/config.json -o RUN -y 1 (a resume of that run, whose settings changed while it
    trained) was refused as "a new run takes one value from its first step": the line now says it is the
    resumed run's own record and to drop --config; another run's record on a resume names -y 1 too."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 3])
    run(["-o", src, "-y", 1, "-x", 5, "--z-loss", "1e-4", "--threads", 1])
    before = dir_hashes(src)
    p = run(["--config", src / "config.json", "-o", src, "-y", 1, "-x", 6, "--threads", 1], check=False)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1, p.stderr
    assert err[0] == (f"error: --config {src / 'config.json'} is the record of the run in -o, which -y 1 continues "
                      "with its recorded settings and history (--z-loss (0 at the start, 0.0001 at the end)): "
                      "drop --config"), err[0]
    assert "a new run" not in err[0] and dir_hashes(src) == before
    other = tmp_path / "other"
    run(data_args(byte_data) + COMMON + ["-o", other, "-x", 2])
    p = run(["--config", src / "config.json", "-o", other, "-y", 1, "-x", 6, "--threads", 1], check=False)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1 and "-y 1 continues the run in -o from its checkpoint" in err[0], err
    assert "a new run" not in err[0]
    run(["-o", src, "-y", 1, "-x", 6, "--threads", 1])  # the fix: -y 1 alone continues with the record


def test_config_toml_of_a_run_whose_settings_changed_notes_the_start_values(byte_data, tmp_path):
    """--config RUN/config.toml holds the run's first start; when the config.json beside it records
    changes made while it trained, a note names them and that the copy takes the start values."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 3])
    run(["-o", src, "-y", 1, "-x", 5, "--z-loss", "1e-4", "--threads", 1])
    p = run(["--config", src / "config.toml", "-o", tmp_path / "copy", "--threads", 1])
    assert (f"note: --config {src / 'config.toml'} holds the flags of that run's first start, but the run "
            f"changed settings while it trained ({src / 'config.json'}): --max-steps (3 at the start, 5 at the "
            "end), --z-loss (0 at the start, 0.0001 at the end); this run takes the start values (give a flag "
            "to choose)") in p.stderr.splitlines()
    assert sorted(train_losses(tmp_path / "copy")) == [1, 2, 3]
    p = run(["--config", src / "config.toml", "-o", tmp_path / "given", "-x", 5, "--z-loss", "1e-4",
             "--threads", 1])
    assert "holds the flags of that run's first start" not in p.stderr  # every changed flag given


def test_a_runs_config_toml_gives_its_settings_not_its_directory(byte_data, tmp_path):
    """trial 8 F2: a run first started with -y 1 (the requeue pattern) writes output-dir and resume=1 into its
    config.toml, so --config RUN/config.toml -x 5 continued RUN (two steps trained into it, its history
    changed). A run's config.toml (config.json beside it) now gives its settings only, with one note; -o and
    -y name the run. A copy of it elsewhere is a hand-written TOML file and gives them."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-y", 1, "-x", 3, "-n", 3])
    before = dir_hashes(src)
    note = (f"note: config file {src / 'config.toml'}: output-dir={src} and resume=1 are not taken: -o and -y "
            "name a run, and this file is a run's config.toml (config.json beside it): its settings only; give -o "
            "(and -y 1 to continue that run) on the command line")
    assert_refused(["--config", src / "config.toml", "-x", 5], src,
                   f"-n 3 (from --config {src / 'config.toml'}) needs -o DIR to write checkpoints into")
    p = run(["--config", src / "config.toml", "-x", 5, "-n", 0])
    assert note in p.stderr.splitlines(), p.stderr
    assert "weights: not saved (no -o)" in p.stdout and dir_hashes(src) == before
    p = run(["--config", src / "config.toml", "-o", tmp_path / "copy", "-x", 4])
    assert f"note: config file {src / 'config.toml'}: resume=1 is not taken: -o and -y" in p.stderr, p.stderr
    assert sorted(train_losses(tmp_path / "copy")) == [1, 2, 3, 4]
    assert dir_hashes(src) == before
    # -y 1 and -o on the command line continue it
    run(["--config", src / "config.toml", "-o", src, "-y", 1, "-x", 4])
    assert sorted(train_losses(src)) == [1, 2, 3, 4]
    # a copy elsewhere: a TOML file like any other, its output-dir taken (and refused: that run has checkpoints)
    shutil.copy(src / "config.toml", tmp_path / "recipe.toml")
    run(["--config", tmp_path / "recipe.toml", "-x", 5])  # resume=1: continues src, as the file says
    assert sorted(train_losses(src)) == [1, 2, 3, 4, 5]


def test_config_toml_of_a_fork_notes_the_settings_its_first_steps_trained_with(byte_data, tmp_path):
    """trial 8 F5: --config FORK/config.toml took the fork's settings from step 1 without the note that
    --config FORK/config.json gives (its first steps were its source's, trained with other settings)."""
    src, fork = tmp_path / "src", tmp_path / "fork"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 4, "-n", 2])
    run(["--fork-from", src / "model_00000002.bin", "-o", fork, "--z-loss", "1e-4", "--threads", 1])
    p = run(["--config", fork / "config.toml", "-o", tmp_path / "copy", "--threads", 1])
    notes = [ln for ln in p.stderr.splitlines() if "that run is a fork" in ln]
    assert notes == [f"note: --config {fork / 'config.toml'}: that run is a fork at step 2 of "
                     f"{src / 'model_00000002.bin'}, whose steps 1-2 trained with other settings "
                     f"({src / 'config.json'}): --z-loss 0 in steps 1-2 (0.0001 here); this run takes the values "
                     "here from step 1 (give a flag to choose)"], p.stderr


def test_config_of_a_fork_notes_the_settings_its_first_steps_trained_with(byte_data, tmp_path):
    """--config FORK/config.json of a fork taken after its source changed a setting: the fork's record holds the
    values from the fork on, so the new run took them from step 1 without a word, though the fork's first steps
    (its source's) trained with others. A note now names each, with the steps; flags given choose (no note)."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 3])
    run(["-o", src, "-y", 1, "-x", 5, "--z-loss", "1e-4", "--threads", 1])  # z-loss on from step 4
    fork = tmp_path / "fork"
    run(["--fork-from", src / "model_00000005.bin", "-o", fork, "-x", 6, "--threads", 1])
    p = run(["--config", fork / "config.json", "-o", tmp_path / "copy", "--threads", 1])
    notes = [ln for ln in p.stderr.splitlines() if "that run is a fork" in ln]
    assert len(notes) == 1, p.stderr
    assert notes[0].startswith(f"note: --config {fork / 'config.json'}: that run is a fork at step 5 of "
                               f"{src / 'model_00000005.bin'}, whose steps 1-5 trained with other settings"), notes[0]
    assert "--max-steps 3 in steps 1-3 and 5 in steps 4-5 (6 here)" in notes[0], notes[0]
    assert "--z-loss 0 in steps 1-3 (0.0001 here)" in notes[0], notes[0]
    p = run(["--config", fork / "config.json", "-o", tmp_path / "given", "-x", 6, "--z-loss", "1e-4",
             "--threads", 1])
    assert "that run is a fork" not in p.stderr, p.stderr


def test_training_from_a_checkpoint_with_e_says_it_takes_the_weights_only(byte_data, tmp_path):
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 2, "-n", 2])
    p = run(data_args(byte_data) + COMMON + ["-e", src / "model_00000002.bin", "-o", tmp_path / "new", "-x", 2])
    assert (f"note: -e {src / 'model_00000002.bin'}: a new run from its weights only (step 0, new AdamW moments "
            "and data order); to continue its run's training, --fork-from a checkpoint of it") in p.stderr
    assert sorted(train_losses(tmp_path / "new")) == [1, 2]


def test_a_run_without_o_says_so_on_stderr(byte_data, tmp_path):
    p = run(data_args(byte_data) + COMMON + ["-x", 1])
    assert ("note: no -o given; nothing is written (metrics, checkpoints): give -o DIR to keep them"
            in p.stderr.splitlines())
    assert "note:" not in p.stdout


def test_eval_into_a_directory_of_another_models_evaluation_is_refused(byte_data, tmp_path):
    """eval.json names the model of the attention dumps beside it: a later --eval-only -o of another model
    would relabel them, so it is refused (files unchanged); the same model's evaluation writes over it."""
    a, b, ev = tmp_path / "a", tmp_path / "b", tmp_path / "ev"
    run(data_args(byte_data) + COMMON + ["-o", a, "-x", 2, "-n", 2])
    run(data_args(byte_data) + COMMON + ["-o", b, "-x", 2, "-n", 2, "-s", 1])
    evals = ["--eval-only", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 32, "-m", 1, "--threads", 1,
             "--dump-attention", "0:0", "-o", ev]
    run(["-e", a / "model_00000002.bin"] + evals)
    assert_refused(["-e", b / "model_00000002.bin"] + evals, ev,
                   f"-o {ev} holds the evaluation of another model ({ev}/eval.json names {a}/model_00000002.bin)")
    run(["-e", a / "model_00000002.bin"] + evals)  # the same model again


def test_a_window_not_below_t_is_noted_as_mhsa(byte_data, tmp_path):
    p = run(data_args(byte_data) + COMMON + ["-x", 1, "--window", 32])  # -t 32: the window covers it
    assert ("note: --window 32 is not below -t 32: a local head sees the whole context, so its 3 local head(s) "
            "compute as global ones (MHSA); lower --window for LS-attention") in p.stderr
    assert "--window" not in run(data_args(byte_data) + COMMON + ["-x", 1]).stderr


def test_random_rows_resume_bit_identical_and_a_sampler_change_is_refused(byte_data, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    rand = data_args(byte_data) + COMMON + ["--sampler", "random"]
    run(rand + ["-o", full, "-x", 6, "-n", 3])
    run(rand + ["-o", part, "-x", 3, "-n", 3])
    run(["-o", part, "-y", 1, "-x", 6, "-n", 3, "--threads", 1])
    assert_same_steps(full, part, range(1, 7))
    assert (full / "model_00000006.bin").read_bytes() == (part / "model_00000006.bin").read_bytes()
    windows = tmp_path / "windows"
    run(data_args(byte_data) + COMMON + ["-o", windows, "-x", 6, "-n", 3])
    assert train_losses(windows)[1]["loss"] != train_losses(full)[1]["loss"]  # other rows
    assert_refused(["-o", part, "-y", 1, "-x", 8, "--sampler", "windows", "--threads", 1], part,
                   "resume with the same -b/-t, process count, shuffle, sampler, seed and shards")


def as_if_killed_before_its_first_checkpoint(out):
    """Removes out's checkpoints and the console lines that announced them: what a run (or fork) killed
    after its first steps and before its first checkpoint leaves."""
    for f in list(out.glob("model_*")) + list(out.glob("state_*")) + list(out.glob("DONE_*")):
        f.unlink()
    log = out / "console.log"
    log.write_text("".join(ln for ln in log.read_text().splitlines(True) if not ln.startswith("checkpoint of step")))


def test_resume_of_a_fork_without_its_own_checkpoint_forks_again(byte_data, tmp_path):
    """trial 3 S7: -y 1 on a fork stopped before its first checkpoint (a requeued fork job) forks again from
    the checkpoint its config.json records, with the fork's settings; never a new model from step 0. A
    source checkpoint that is gone or was written again after the fork is refused, naming --fork-from."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-o", src, "-x", 6, "-n", 2])
    fork = tmp_path / "fork"
    run(["--fork-from", src / "model_00000002.bin", "-o", fork, "-x", 4, "--threads", 1])
    as_if_killed_before_its_first_checkpoint(fork)
    record = json.loads((fork / "config.json").read_text())
    p = run(["-o", fork, "-y", 1, "--threads", 1])
    assert (f"note: -y 1: {fork} is a fork of {src / 'model_00000002.bin'} (step 2) without a checkpoint of "
            "its own; it forks again from that checkpoint") in p.stderr.splitlines()
    assert "forked from" in p.stdout and "at step 2" in p.stdout
    assert sorted(train_losses(fork)) == [3, 4], "the fork's steps only, each once"
    assert_same_steps(src, fork, [3, 4])
    conf = json.loads((fork / "config.json").read_text())
    assert conf["forked_from"] == record["forked_from"] and conf["train"] == record["train"]

    # the source checkpoint written again after the fork started, or gone: refused, fork untouched
    as_if_killed_before_its_first_checkpoint(fork)
    done = src / "DONE_00000002"
    later = (fork / "config.json").stat().st_mtime + 10
    os.utime(done, (later, later))
    assert_refused(["-o", fork, "-y", 1, "--threads", 1], fork, "was written again after the fork started")
    shutil.rmtree(src)
    assert_refused(["-o", fork, "-y", 1, "--threads", 1], fork,
                   f"--fork-from {src / 'model_00000002.bin'}")


def test_resume_of_a_run_whose_checkpoints_were_deleted_is_refused(byte_data, tmp_path):
    """trial 3 D2: -y 1 on a run whose checkpoints were deleted but whose records were kept would start a new
    model at step 0 over them: refused, the records untouched. A run killed before its first checkpoint
    (no checkpoint line in console.log) still starts again from step 0."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 4, "-n", 2, "--keep-checkpoints", 1])
    # the files there but the only DONE_ marker gone (the chaos soak's "undone" fault): the same refusal,
    # whose advice ("restore the files") the soak follows
    marker = (out / "DONE_00000004").read_bytes()
    (out / "DONE_00000004").unlink()
    assert_refused(["-o", out, "-y", 1, "--threads", 1], out, "restore the files to continue")
    (out / "DONE_00000004").write_bytes(marker)
    for f in list(out.glob("model_*")) + list(out.glob("state_*")) + list(out.glob("DONE_*")):
        f.unlink()
    assert_refused(["-o", out, "-y", 1, "--threads", 1], out,
                   f"-y 1: {out} has no complete checkpoint, but its console.log records the checkpoint of step 4")
    as_if_killed_before_its_first_checkpoint(out)
    p = run(["-o", out, "-y", 1, "--threads", 1])
    assert "has no complete checkpoint yet; its run starts again from step 0" in p.stderr
    assert sorted(train_losses(out)) == [1, 2, 3, 4]


def edit_record(out, edit):
    """config.json of run `out` changed by `edit` (a function of the parsed record), as a hand edit would."""
    conf = json.loads((out / "config.json").read_text())
    edit(conf)
    (out / "config.json").write_text(json.dumps(conf, indent=2))


def test_a_hand_edited_record_is_refused_by_resume_fork_and_eval(byte_data, tmp_path):
    """trial 5 finding 4: a setting edited in config.json after a checkpoint was written would change the
    resumed run and rewrite the record of the steps already trained, without a word. Each checkpoint's
    DONE_ marker holds the fingerprint of the settings that trained it; -y 1, --fork-from and --eval-only of
    it refuse a record that no longer says so. A change given as a flag is history and keeps the fingerprints
    of the steps before it."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 4, "-n", 2])
    original = (out / "config.json").read_bytes()
    edit_record(out, lambda c: c["train"].update(learning_rate=0.003))
    edited = "config.json was edited after its checkpoint of step 4 was written"
    assert_refused(["-o", out, "-y", 1, "-x", 6, "--threads", 1], out, edited)
    fork = tmp_path / "fork"
    assert_refused(["--fork-from", out / "model_00000002.bin", "-o", fork, "-x", 4, "--threads", 1], out,
                   "config.json was edited after its checkpoint of step 2 was written")
    assert not fork.exists()
    assert_refused(["--eval-only", "-e", out / "model_00000004.bin", "--threads", 1], out, edited)
    (out / "config.json").write_bytes(original)
    edit_record(out, lambda c: c["model"].update(window=4))  # the model object counts too
    assert_refused(["--eval-only", "-e", out / "model_00000004.bin", "--threads", 1], out,
                   f"(to take the file as it now stands, delete the second line of {out / 'DONE_00000004'})")
    # --eval-only with -j, -t and -b given takes nothing from the record: an edit cannot change it
    run(["--eval-only", "-e", out / "model_00000004.bin", "-j", f"{byte_data}/val_*.bin", "-t", 32, "-b", 4,
         "--threads", 1])
    # the process count (the tokens trained, so -x -1's total, rest on it) counts too
    (out / "config.json").write_bytes(original)
    edit_record(out, lambda c: c["train"].update(world_size=2))
    assert_refused(["-o", out, "-y", 1, "-x", 6, "--threads", 1], out, edited)
    (out / "config.json").write_bytes(original)
    edit_record(out, lambda c: c["model"].update(window=4))  # the model object counts too
    assert_refused(["--eval-only", "-e", out / "model_00000004.bin", "--threads", 1], out, edited)

    # restored, the same change given as a flag: history from step 4 on; steps 2 and 4 keep their fingerprints
    (out / "config.json").write_bytes(original)
    p = run(["-o", out, "-y", 1, "-x", 6, "-l", "0.003", "--threads", 1])
    assert "note: resuming at step 4 with --learning-rate 0.003 (was 0.002)" in p.stderr
    assert json.loads((out / "config.json").read_text())["history"][-1] == {
        "step": 4, "flag": "--learning-rate", "old": 0.002, "new": 0.003}
    run(["--eval-only", "-e", out / "model_00000004.bin", "--threads", 1])
    run(["--fork-from", out / "model_00000002.bin", "-o", fork, "-x", 4, "--threads", 1])
    run(["-o", out, "-y", 1, "-x", 8, "--threads", 1])
    # the history itself is part of what trained steps 5 and 6: an edited entry is refused too
    edit_record(out, lambda c: c["history"][-2].update(new=0.004))
    assert_refused(["-o", out, "-y", 1, "-x", 10, "--threads", 1], out,
                   "config.json was edited after its checkpoint of step 8 was written")


def test_a_checkpoint_without_a_settings_fingerprint_resumes_as_before(byte_data, tmp_path):
    """Checkpoints of earlier versions have a DONE_ marker without the fingerprint line: nothing to
    compare, so they resume, fork and evaluate as they did (a record edited since included)."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 4])
    marker = out / "DONE_00000004"
    assert marker.read_text().startswith("step 4 world_size 1\nsettings_fnv1a64 ")
    marker.write_text("step 4 world_size 1\n")
    edit_record(out, lambda c: c["train"].update(gen_tokens=8))
    run(["--eval-only", "-e", out / "model_00000004.bin", "--threads", 1])
    run(["-o", out, "-y", 1, "-x", 6, "--threads", 1])


def test_a_record_with_floats_widened_from_float32_resumes_unchanged(byte_data, tmp_path):
    """trial 5 finding 12: config.json writes a float flag in its shortest decimal form (0.001, not
    0.0010000000474974513). A record of an earlier version, which held the widened form, reads as the same
    values: its resume notes no change, adds no history and matches its checkpoint's fingerprint."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 4, "--beta2", "0.99", "--eps", "1e-6",
                                         "--attn-softcap", "2.3"])
    text = (out / "config.json").read_text()
    conf = json.loads(text)
    assert conf["train"]["learning_rate"] == 0.002 and '"learning_rate": 0.002,' in text
    assert conf["train"]["beta2"] == 0.99 and conf["train"]["eps"] == 1e-6
    assert conf["model"]["attn_softcap"] == 2.3
    widened = text
    for short, wide in [('"learning_rate": 0.002,', '"learning_rate": 0.0020000000949949026,'),
                        ('"beta2": 0.99,', '"beta2": 0.9900000095367432,'),
                        ('"eps": 1e-06,', '"eps": 9.999999974752427e-07,'),
                        ('"attn_softcap": 2.3,', '"attn_softcap": 2.299999952316284,')]:
        assert widened.count(short) == 1, short
        widened = widened.replace(short, wide)
    (out / "config.json").write_text(widened)
    p = run(["-o", out, "-y", 1, "-x", 6, "--threads", 1])
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("note:")] == [
        "note: resuming at step 4 with --max-steps 6 (was 4)"]
    assert json.loads((out / "config.json").read_text())["history"] == [
        {"step": 4, "flag": "--max-steps", "old": 4, "new": 6}]


def test_a_runs_config_toml_with_relative_data_paths_from_another_directory(byte_data, tmp_path):
    """trial 11: a run's config.toml keeps -i/-j as typed; --config RUN/config.toml from another directory
    trained on that directory's data/... (other books, the same vocabulary: no check noticed). Refused there,
    naming both paths and the fixes; from the run's own directory, or with -i/-j given, it runs."""
    home, other = tmp_path / "home", tmp_path / "other"
    for d in (home, other):
        (d / "data").mkdir(parents=True)
        for f in byte_data.iterdir():
            (d / "data" / f.name).symlink_to(f)

    def trainer(cwd, args, check=True):
        p = subprocess.run([str(BIN), "--device", "cpu", "--threads", "1"] + [str(a) for a in args], cwd=cwd,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 or not check, p.stderr
        return p
    trainer(home, ["-i", "data/train_*.bin", "-j", "data/val_*.bin"] + TINY + ["-o", home / "run", "-x", 1, "-v", 0,
                                                                               "-s", 0])
    toml = home / "run" / "config.toml"
    p = trainer(other, ["--config", toml, "-o", other / "rep", "-x", 1], check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == (
        f"error: config file {toml}: train-data=\"data/train_*.bin\" is relative, and from this directory it names "
        f"{other}/data/train_*.bin where the run's was {home}/data/train_*.bin ({home / 'run' / 'config.json'}); "
        f"start in the directory the run started in, give --train-data on the command line, or --config "
        f"{home / 'run' / 'config.json'}"), p.stderr
    assert not (other / "rep").exists()
    trainer(home, ["--config", toml, "-o", home / "rep", "-x", 1])
    trainer(other, ["--config", toml, "-o", other / "rep", "-x", 1, "-i", byte_data / "train_*.bin",
                    "-j", byte_data / "val_*.bin"])
    # (a review) the same files by another spelling are the same: `..` from a sibling directory
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    trainer(tmp_path / "a", ["-i", "../home/data/train_*.bin", "-j", "../home/data/val_*.bin"] + TINY +
            ["-o", tmp_path / "dotdot", "-x", 1, "-v", 0, "-s", 0])
    trainer(tmp_path / "b", ["--config", tmp_path / "dotdot" / "config.toml", "-o", tmp_path / "b" / "rep", "-x", 1])
    # (a review) a record of an older version holds the relative path as typed: nothing to compare, the file is
    # read from the directory started in, as those versions did, with a note naming what it names from there
    # (review 14: from another directory it trained on other data without a word)
    record = json.loads((home / "run" / "config.json").read_text())
    record["train"]["train_data"], record["train"]["val_data"] = "data/train_*.bin", "data/val_*.bin"
    (home / "run" / "config.json").write_text(json.dumps(record, indent=2))
    for cwd, name in ((home, "rep_old"), (other, "rep_old_other")):
        p = trainer(cwd, ["--config", toml, "-o", cwd / name, "-x", 1])
        for key, files in (("train-data", "train_*.bin"), ("val-data", "val_*.bin")):
            assert (f"note: config file {toml}: {key}=\"data/{files}\" is relative, and the run's record (of an "
                    "older version) holds it as typed, so whether it named these files cannot be checked: from "
                    f"this directory it names {cwd}/data/{files}") in p.stderr.splitlines(), p.stderr


def test_a_new_run_into_a_data_directory_is_refused(byte_data, tmp_path):
    """(a new-user trial) -o naming the shards' own directory put the run's files and checkpoints among the
    shards (and data/prepare.py then refused to remake that directory, "a training run's directory"). A new run
    or fork into a directory holding a data set is refused, naming its files, with nothing written."""
    data = tmp_path / "data"
    shutil.copytree(byte_data, data)
    names = sorted(f.name for f in data.iterdir())
    assert "meta.json" in names and len(names) >= 4, names
    listed = ", ".join(names[:3]) + ", ..."
    for extra in ([], ["--fork-from", "x"]):
        if extra:
            src = tmp_path / "src"
            run(data_args(byte_data) + COMMON + ["-o", src, "-x", 1, "-n", 1])
            extra = ["--fork-from", src / "model_00000001.bin"]
        assert_refused(data_args(data) + COMMON + ["-o", data, "-x", 2] + extra, data,
                       f"output directory {data} holds a data set ({listed}): a run's files would go among its "
                       "shards; choose another -o (e.g. out/RUN_NAME)")
    # (a review) -y 1, which starts a new run where -o holds none, too
    assert_refused(data_args(data) + COMMON + ["-o", data, "-x", 2, "-y", 1], data,
                   f"output directory {data} holds a data set ({listed})")


def test_a_fork_records_its_source_absolute_and_forks_again_from_it_anywhere(byte_data, tmp_path):
    """(a new-user trial) a fork's config.json held --fork-from as typed (relative): -y 1 of a fork stopped before
    its first checkpoint, started in another directory that held a run of the same relative path, forked again
    from that other run's checkpoint, exit 0. The source is recorded absolute, so it is the same file from
    anywhere."""
    home, other = tmp_path / "home", tmp_path / "other"
    for d in (home, other):
        d.mkdir()
        run(data_args(byte_data) + COMMON + ["-o", d / "src", "-x", 2, "-n", 1, "-l", "1e-3" if d == home else "5e-2"])

    def trainer(cwd, args):
        p = subprocess.run([str(BIN), "--device", "cpu", "--threads", "1"] + [str(a) for a in args], cwd=cwd,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return p
    fork = tmp_path / "fork"
    trainer(home, ["--fork-from", "src/model_00000001.bin", "-o", fork, "-x", 2])
    record = json.loads((fork / "config.json").read_text())
    assert record["forked_from"]["checkpoint"] == str(home / "src" / "model_00000001.bin"), record["forked_from"]
    expected = read_jsonl(fork / "metrics.jsonl")
    as_if_killed_before_its_first_checkpoint(fork)
    (fork / "metrics.jsonl").write_text("")
    p = trainer(other, ["-o", fork, "-y", 1])
    assert f"is a fork of {home / 'src' / 'model_00000001.bin'} (step 1)" in p.stderr, p.stderr
    assert [r["loss"] for r in read_jsonl(fork / "metrics.jsonl") if "loss" in r] == \
        [r["loss"] for r in expected if "loss" in r]


def test_no_training_data_for_an_o_that_holds_a_run_names_y1(byte_data, tmp_path):
    """trial 11: -o RUN -x 8 without -y 1 said only "no training data: give -i", pointing at new data where the
    likely intent was to continue the run. The refusal names the run and -y 1; an -o without a run keeps the
    plain line."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 2, "-n", 2])
    assert_refused(["-o", out, "-x", 4, "--threads", 1], out,
                   f"no training data: {out} holds a run (config.json); continue it with -y 1, which takes its -i, or "
                   "give -i 'DIR/train_*.bin' and another -o for a new run")
    p = run(["-o", tmp_path / "new", "-x", 4, "--threads", 1], check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == (
        "error: no training data: give -i 'DIR/train_*.bin' (make shards with data/prepare.py)"), p.stderr
