"""Multi-process data parallelism on the CPU backend (docs/multigpu.md): `mpirun -np 2
./train_gpt2_ls --device cpu` against one process, ZeRO-1 against ZeRO-0, 2-rank resume, outputs
from rank 0 only, and a failing rank ending every rank. Uses run_helpers.py's byte-level data and
tiny model (imported, not copied). Skipped when mpirun is missing or the binary has no MPI, except
under CI=true, where scripts/install_deps.sh installs OpenMPI and a skip would hide a broken build.

Tolerances (2 ranks x B against 1 rank x 2B, same rows in the same order every step):
the two runs differ only in the order of fp32 summations over the batch (each rank sums its B
rows, then the two halves are averaged), so
  - losses and gradient norms: rtol 1.5e-5 = n * u, the worst-case relative error bound of
    recursive fp32 summation of the loss mean over n = 2*B*T = 256 terms (u = 2^-24 = 6e-8);
  - weights: an AdamW step moves a weight by at most about lr (m_hat / sqrt(v_hat) <= ~1), so
    after the run a weight can have moved at most M = sum of the steps' learning rates; rounding
    differences leave the weights within 1e-3 * M of each other, while a real bug (wrong rows,
    gradients not averaged, a rank's update lost) moves them by a sizeable fraction of M.
The max attention logit gets the same rtol with no bound behind it (it follows the weights' rounding
differences): observed 3.2e-6.
Observed (6 steps): losses equal to 1e-7 relative, weights to 2.2e-6 (bound 1.1e-5); the last 3 steps
move some weight by 4.9e-3, so the bound is far below what a lost or doubled update would leave.
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from run_helpers import BIN, REPO, TINY, data_args, read_jsonl, train_records

MPIRUN = shutil.which("mpirun")
STEPS, LR = 6, 3e-3
COMMON = TINY + ["-x", STEPS, "-l", LR, "-u", 3, "-v", 3, "-m", 2]


def lr_sum(out):
    """Sum of the learning rates of the run's steps (from its metrics)."""
    return sum(r["lr"] for r in train_records(out / "metrics.jsonl"))


def skip_unless_ci(reason):
    if os.environ.get("CI") == "true":  # CI installs OpenMPI: not running these tests there is a failure
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def run_np(n, args, check=True, timeout=120):
    """Runs the binary under mpirun with n processes (one thread each) from the repo root."""
    if MPIRUN is None:
        skip_unless_ci("mpirun not found (install OpenMPI: apt-get install openmpi-bin libopenmpi-dev)")
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls`")
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(n), str(BIN), "--device", "cpu"] + \
        [str(a) for a in args]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if "this build has no MPI" in p.stderr:
        skip_unless_ci("train_gpt2_ls was built without MPI (no mpicxx when it was built)")
    if check and p.returncode != 0:
        pytest.fail(f"mpirun -np {n} train_gpt2_ls {' '.join(map(str, args))} failed ({p.returncode}):\n"
                    f"{p.stderr[-3000:]}\n{p.stdout[-2000:]}")
    return p


def weights(path):
    return np.fromfile(path, dtype=np.float32, offset=1024)


def model_file(d, step=STEPS):
    return d / f"model_{step:08d}.bin"


def assert_close_runs(a, b, loss_rtol, w_atol):
    ra, rb = read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    for x, y in zip(ra, rb):
        for k in ["loss", "grad_norm", "val_loss", "max_attn_logit"]:
            assert (k in x) == (k in y)
            if k in x:
                np.testing.assert_allclose(y[k], x[k], rtol=loss_rtol, err_msg=f"step {x['step']} {k}")
    wa, wb = weights(model_file(a)), weights(model_file(b))
    assert wa.shape == wb.shape and np.isfinite(wa).all() and np.isfinite(wb).all()
    diff = np.abs(wa - wb).max()
    assert diff <= w_atol, f"weights differ by {diff} > {w_atol}"
    return diff


def test_two_ranks_of_b_equal_one_rank_of_2b(byte_data, tmp_path):
    """Shuffled data: the ranks' rows of each global batch are the single process's rows."""
    run_np(1, data_args(byte_data) + COMMON + ["-b", 8, "-n", 3, "-o", tmp_path / "one"])
    run_np(2, data_args(byte_data) + COMMON + ["-b", 4, "-o", tmp_path / "two"])
    conf = json.loads((tmp_path / "two" / "config.json").read_text())
    assert conf["derived"]["world_size"] == 2 and conf["derived"]["tokens_per_step"] == 256
    w_atol = 1e-3 * lr_sum(tmp_path / "one")
    assert_close_runs(tmp_path / "one", tmp_path / "two", loss_rtol=1.5e-5, w_atol=w_atol)
    # sanity of the tolerance: the last 3 steps alone move some weight by far more than it (~ their lr sum)
    moved = np.abs(weights(model_file(tmp_path / "one")) - weights(model_file(tmp_path / "one", 3))).max()
    assert moved > 100 * w_atol, f"steps 4-6 moved the weights by only {moved}; the tolerance {w_atol} proves nothing"


def test_near_far_stats_reduced_over_ranks(byte_data, tmp_path):
    """Step 1 (same weights): 2 ranks of B rows give the near/far statistics of 1 rank of 2B rows:
    the maxima exactly (a far max null on every rank, the local heads' with P = 8 = N, stays null),
    the near mass (mean of the ranks' means = mean over all rows, equal rows per rank) to rounding."""
    args = data_args(byte_data) + TINY + ["-x", 1, "-v", 0, "-s", 0]
    run_np(1, args + ["-b", 8, "-o", tmp_path / "one"])
    run_np(2, args + ["-b", 4, "-o", tmp_path / "two"])
    one, two = (read_jsonl(tmp_path / d / "logit_stats.jsonl")[0] for d in ("one", "two"))
    assert one["near"] == two["near"] == 8
    for a, b in zip(one["attn"], two["attn"]):
        assert (a["far_max"] is None) == (not a["global"]), a  # local heads: no far key at N = P
        assert b["near_max"] == a["near_max"] and b["far_max"] == a["far_max"]
        assert b["near_mass"] == pytest.approx(a["near_mass"], rel=1e-6)


def test_zero1_matches_zero0(byte_data, tmp_path):
    """Without clipping the update is the same fp32 arithmetic per element: bit-identical.
    With clipping the global norm is summed in another order (shards): within rounding."""
    for clip in ["0", "1"]:
        for z in ["0", "1"]:
            run_np(2, data_args(byte_data) + COMMON + ["--grad-clip", clip, "-z", z, "-o", tmp_path / f"c{clip}z{z}"])
    a, b = tmp_path / "c0z0", tmp_path / "c0z1"
    assert [r["loss"] for r in train_records(a / "metrics.jsonl")] == [r["loss"] for r in train_records(b / "metrics.jsonl")]
    assert model_file(a).read_bytes() == model_file(b).read_bytes()
    assert_close_runs(tmp_path / "c1z0", tmp_path / "c1z1", loss_rtol=1e-6, w_atol=1e-4 * lr_sum(tmp_path / "c1z0"))
    conf = json.loads((b / "config.json").read_text())
    assert conf["train"]["zero_stage"] == 1


def test_qk_clip_and_logit_alarm_over_ranks_zero1_equals_zero0(byte_data, tmp_path):
    """QK-Clip and the alarm with 2 ranks: every rank takes the same decisions from the reduced
    statistics, and with -z 1 each rank also scales its master shard (without that, the next step's
    all-gather would undo the clip). Without gradient clipping ZeRO-1's update is the same fp32
    arithmetic per element as ZeRO-0's, so the two runs must be bit-identical, clips, alarm records
    and alarm checkpoints (a collective save) included."""
    args = data_args(byte_data) + TINY + ["-x", 10, "-k", "constant", "-u", 0, "-l", "4e-3", "-v", 0, "-s", 0,
                                          "--grad-clip", 0, "--qk-clip", 0.1, "--logit-alarm-above", 0.1,
                                          "--logit-alarm-cooldown", 3, "--keep-checkpoints", 1]
    for z in ["0", "1"]:
        run_np(2, args + ["-z", z, "-o", tmp_path / f"z{z}"])
    a, b = tmp_path / "z0", tmp_path / "z1"
    ra, rb = train_records(a / "metrics.jsonl"), train_records(b / "metrics.jsonl")
    assert [r["loss"] for r in ra] == [r["loss"] for r in rb]
    assert [r["qk_clipped"] for r in ra] == [r["qk_clipped"] for r in rb]
    assert [r.get("logit_alarm") for r in ra] == [r.get("logit_alarm") for r in rb]
    assert sum(r["qk_clip_heads"] for r in ra) > 0, "tau 0.1 was meant to clip some head in this run"
    alarm_steps = [r["step"] for r in ra if r.get("logit_alarm", {}).get("checkpoint")]
    assert alarm_steps, "X 0.1 was meant to raise an alarm in this run"
    assert model_file(a, 10).read_bytes() == model_file(b, 10).read_bytes()
    for d in (a, b):  # the alarm's checkpoints are pinned; --keep-checkpoints 1 keeps the last one besides
        assert sorted(int(f.name[5:]) for f in d.glob("DONE_*")) == sorted(set(alarm_steps) | {10})


@pytest.mark.parametrize("zero", ["0", "1"])
def test_two_rank_resume_is_bit_identical_and_refused_on_one_rank(byte_data, tmp_path, zero):
    full = tmp_path / "full"
    args = data_args(byte_data) + COMMON + ["-n", 3, "-z", zero]
    run_np(2, args + ["-o", full])
    part = tmp_path / "part"
    shutil.copytree(full, part)
    for name in ["DONE_00000006", "model_00000006.bin", "state_00000006_00000.bin", "state_00000006_00001.bin"]:
        (part / name).unlink()
    p = run_np(2, args + ["-o", part, "-y", 1])
    assert "resumed from" in p.stdout
    for name in ["model_00000006.bin", "state_00000006_00000.bin", "state_00000006_00001.bin"]:
        assert (full / name).read_bytes() == (part / name).read_bytes(), f"{name} differs after resume"
    ref = {r["step"]: r for r in read_jsonl(full / "metrics.jsonl")}
    got = {r["step"]: r for r in read_jsonl(part / "metrics.jsonl")}
    assert sorted(ref) == sorted(got)
    for s in ref:
        for k in ["loss", "grad_norm", "val_loss"]:
            assert ref[s].get(k) == got[s].get(k), f"step {s} {k}"
    # one process cannot continue a 2-process run: one clear line, no files touched
    before = {f.name: f.read_bytes() for f in full.iterdir()}
    one = run_np(1, args + ["-o", full, "-y", 1], check=False)
    assert one.returncode != 0
    assert "error:" in one.stderr and "written by 2 processes" in one.stderr and "-np (2)" in one.stderr
    assert {f.name: f.read_bytes() for f in full.iterdir()} == before


def test_a_step_one_rank_found_damaged_is_retired_by_rank_0(byte_data, tmp_path):
    """-y 1 over 2 ranks with rank 1's state file of the newest step truncated: the ranks agree on the step
    before, and rank 0 retires the newer one (DONE_ -> DAMAGED_) although its own files of it were whole:
    the steps any rank found damaged are gathered (damaged_on_any_rank)."""
    out = tmp_path / "run"
    args = data_args(byte_data) + COMMON + ["-n", 3]
    run_np(2, args + ["-o", out])
    os.truncate(out / "state_00000006_00001.bin", 1000)
    p = run_np(2, args + ["-o", out, "-y", 1, "-x", 5])
    assert "resumed from" in p.stdout and "at step 3" in p.stdout, p.stdout
    assert f"its marker is now {out / 'DAMAGED_00000006'}" in p.stderr, p.stderr
    assert not (out / "DONE_00000006").exists() and (out / "DONE_00000005").exists()
    assert (out / "state_00000006_00000.bin").exists()  # the files stay


def test_a_fork_on_another_process_count_is_refused_as_a_fork(byte_data, tmp_path):
    """trial 3 F8: --fork-from a 2-process run's checkpoint on 1 process said "... or start fresh without -y",
    though no -y was given: the line names the fork and its fixes."""
    src = tmp_path / "src"
    run_np(2, data_args(byte_data) + COMMON + ["-x", 3, "-n", 3, "-o", src])
    ck = src / "model_00000003.bin"
    p = run_np(1, ["--fork-from", ck, "-o", tmp_path / "fork"], check=False)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode != 0 and len(errors) == 1, p.stderr
    assert errors[0].startswith(f"error: --fork-from {ck}: the checkpoint's run trained on 2 processes and this "
                                "fork has 1") and "mpirun -np 2" in errors[0] and f"-e {ck}" in errors[0], errors[0]
    assert "-y" not in errors[0], errors[0]
    assert not (tmp_path / "fork").exists() or not list((tmp_path / "fork").glob("model_*"))


def test_a_resume_on_another_process_count_names_a_fix_that_works(byte_data, tmp_path):
    """trial 5 F9: -y 1 of a 2-process run on 1 process said "... or start fresh without -y", which the
    run's -o then refuses (it holds checkpoints): the line names a new run from its weights in another -o,
    and that command trains."""
    src = tmp_path / "src"
    run_np(2, data_args(byte_data) + COMMON + ["-x", 3, "-n", 3, "-o", src])
    ck = src / "model_00000003.bin"
    p = run_np(1, ["-o", src, "-y", 1, "-x", 4], check=False)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode != 0 and errors == [
        f"error: -y 1: the checkpoint of step 3 in {src} was written by 2 processes and this run has 1; resume "
        f"with the same -np (2), or start a new run from its weights in another -o: -e {ck}"], p.stderr
    run_np(1, data_args(byte_data) + COMMON + ["-e", ck, "-o", tmp_path / "new", "-x", 1, "-v", 0])
    assert (tmp_path / "new" / "model_00000001.bin").exists()


def test_a_resume_on_more_processes_is_no_damaged_checkpoint(byte_data, tmp_path):
    """trial 10: -y 1 of a 1-process run on 2 processes: rank 1, which has no state file of its own, warned that
    every checkpoint was damaged and told the user to restore them from a copy; every rank now names the process
    count, and the run is left as it was."""
    src = tmp_path / "src"
    run_np(1, data_args(byte_data) + COMMON + ["-x", 3, "-n", 3, "-o", src])
    before = sorted(f.name for f in src.iterdir())
    p = run_np(2, ["-o", src, "-y", 1, "-x", 4], check=False)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode != 0 and errors, p.stderr
    assert "damaged" not in p.stderr and "restore them" not in p.stderr, p.stderr
    assert all(f"-y 1: the checkpoint of step 3 in {src} was written by 1 processes and this run has 2" in e
               for e in errors), errors
    assert sorted(f.name for f in src.iterdir()) == before


def test_outputs_come_from_rank_0_only(byte_data, tmp_path):
    out = tmp_path / "o"
    p = run_np(2, data_args(byte_data) + COMMON + ["-o", out, "-n", 3, "-s", 3, "-g", 8, "--logit-stats-every", 2])
    for s in range(1, STEPS + 1):
        assert p.stdout.count(f"step {s}/{STEPS} | loss") == 1, f"step {s} printed more than once"
    assert p.stdout.count("--- sample at step ") == 2  # steps 3 and 6, once each
    assert p.stdout.count("train_gpt2_ls | device") == 1
    assert "data parallel: 2 processes (MPI)" in p.stdout
    steps = [r["step"] for r in read_jsonl(out / "metrics.jsonl")]
    assert steps == [0, 1, 2, 3, 4, 5, 6]  # one record per step (plus step 0's val loss), no duplicates
    assert [r["step"] for r in read_jsonl(out / "logit_stats.jsonl")] == [2, 4, 6]
    names = sorted(f.name for f in out.iterdir())
    assert names == sorted([".lock", "config.json", "config.toml", "metrics.jsonl", "logit_stats.jsonl",
                            "console.log", "samples.txt"] +
                           [f"{k}_{s:08d}{e}" for s in (3, 6) for k, e in (("model", ".bin"), ("DONE", ""))] +
                           [f"state_{s:08d}_{r:05d}.bin" for s in (3, 6) for r in (0, 1)])
    marker = (out / "DONE_00000006").read_text().splitlines()
    assert marker[0] == "step 6 world_size 2" and re.fullmatch("settings_fnv1a64 [0-9a-f]{16}", marker[1]), marker
    assert (out / "console.log").read_text() == p.stdout  # rank 0's lines, once
    assert (out / "samples.txt").read_text().count("--- sample at step ") == 2
    keys = {line.split("=", 1)[0] for line in (out / "config.toml").read_text().splitlines()}
    assert not keys & {"rank", "world-size", "local-rank", "rendezvous"}  # launch flags are per process


def test_a_failing_rank_ends_every_rank(byte_data, tmp_path):
    """Rank 1 fails in step 1 while rank 0 waits for it in the gradient all-reduce: all exit, no hang."""
    t0 = time.monotonic()
    p = run_np(2, data_args(byte_data) + COMMON + ["-o", tmp_path / "o", "--debug-fail-rank", 1], check=False,
               timeout=60)
    assert p.returncode != 0
    assert "error: rank 1 of 2: --debug-fail-rank 1" in p.stderr
    assert time.monotonic() - t0 < 60
    assert not list((tmp_path / "o").glob("DONE_*"))


def test_bad_flag_on_every_rank_is_one_clear_error(byte_data, tmp_path):
    p = run_np(2, data_args(byte_data) + COMMON + ["-z", 2], check=False, timeout=60)
    assert p.returncode != 0
    assert "-z/--zero-stage must be 0 or 1" in p.stderr


def test_second_launch_on_a_locked_output_dir_is_refused(byte_data, tmp_path):
    """Only rank 0 takes <out>/.lock (llmc/io/output_lock.h): a 2-rank launch on a directory a running
    trainer holds is refused by its rank 0, which ends the other rank (no hang), and writes nothing."""
    out = tmp_path / "o"
    first = subprocess.Popen([str(BIN), "--device", "cpu"] + [str(a) for a in data_args(byte_data) + TINY +
                             ["-x", 1_000_000, "-v", 0, "-s", 0, "-o", out]], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lock = out / ".lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().startswith(f"pid {first.pid} ")):
            assert first.poll() is None and time.monotonic() < deadline, "the first trainer did not take the lock"
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)  # holds the lock, writes nothing while the second launch runs
        before = {f.name: f.read_bytes() for f in out.iterdir()}
        t0 = time.monotonic()
        p = run_np(2, data_args(byte_data) + COMMON + ["-o", out], check=False, timeout=60)
        assert p.returncode != 0
        assert f"error: rank 0 of 2: output directory {out} is in use by another train_gpt2_ls (pid {first.pid} " \
            in p.stderr, p.stderr[-3000:]
        assert "error: rank 1" not in p.stderr  # rank 1 takes no lock: it is ended by rank 0's abort
        assert time.monotonic() - t0 < 60
        assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    finally:
        first.kill()
        first.wait()


def test_paper_options_over_ranks_zero1_equals_zero0(byte_data, tmp_path):
    """The paper code's model (--bias 0 --gelu erf --untie-embeddings: a parameter layout without bias
    tensors) over 2 ranks with QK-Clip (weight rows only, no bias runs): ZeRO-1's shards of that layout
    give bit-identically ZeRO-0's run (no gradient clipping: the same fp32 update per element)."""
    args = data_args(byte_data) + TINY + ["--bias", 0, "--gelu", "erf", "--untie-embeddings", "-x", 6, "-k",
                                          "constant", "-u", 0, "-l", "4e-3", "-v", 0, "-s", 0, "--grad-clip", 0,
                                          "--qk-clip", 0.1]
    for z in ["0", "1"]:
        run_np(2, args + ["-z", z, "-o", tmp_path / f"z{z}"])
    a, b = tmp_path / "z0", tmp_path / "z1"
    ra, rb = train_records(a / "metrics.jsonl"), train_records(b / "metrics.jsonl")
    assert [r["loss"] for r in ra] == [r["loss"] for r in rb]
    assert sum(r["qk_clip_heads"] for r in ra) > 0, "tau 0.1 was meant to clip some head in this run"
    assert model_file(a, 6).read_bytes() == model_file(b, 6).read_bytes()
    assert np.fromfile(model_file(a, 6), dtype=np.int32, count=256)[20] == 1  # no biases


def run_per_rank_script(script, body, timeout):
    """mpirun -np 2 of a shell script (body after its #! line) that starts the trainer its own way per rank."""
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    p = subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", str(script)], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    if "this build has no MPI" in p.stderr:
        skip_unless_ci("train_gpt2_ls was built without MPI (no mpicxx when it was built)")
    return p


def test_an_error_of_files_on_one_rank_ends_the_job_and_names_the_rank(byte_data, tmp_path):
    """A review of the flag-errors-once change: an error found reading files (here --config) can be one rank's
    alone (another node's file system); rank 1 then printed nothing and rank 0 waited forever. Rank 1 now says
    it with its rank and the job ends (MPI_Abort) instead of hanging."""
    if MPIRUN is None:
        skip_unless_ci("mpirun not found (install OpenMPI: apt-get install openmpi-bin libopenmpi-dev)")
    good = tmp_path / "good.toml"
    good.write_text("max-steps = 2\n")
    missing = tmp_path / "missing.toml"
    script = tmp_path / "per_rank.sh"
    flags = data_args(byte_data) + TINY + ["-v", 0, "-s", 0, "-o", tmp_path / "run"]
    args = " ".join(shlex.quote(str(a)) for a in flags)
    p = run_per_rank_script(script, f'c={good}; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && c={missing}\n'
                                    f'exec {BIN} --device cpu --config "$c" {args}\n', timeout=60)
    assert p.returncode != 0, p.stderr
    assert f"error: rank 1 of 2: --config {missing}: no such file" in p.stderr, p.stderr


def test_a_stdout_closed_on_rank_0_before_the_first_step_ends_every_rank(byte_data, tmp_path):
    """Review 15: rank 0 stopped before the first step on a closed stdout (exit 141) while the other ranks went
    on into the first step's reduction, and the job hung. Every rank now stops there, and the new run leaves no
    run files."""
    if MPIRUN is None:
        skip_unless_ci("mpirun not found (install OpenMPI: apt-get install openmpi-bin libopenmpi-dev)")
    out = tmp_path / "run"
    script = tmp_path / "rank0_closed.sh"
    flags = data_args(byte_data) + TINY + ["-x", 3, "-v", 0, "-s", 0, "-o", out]
    args = " ".join(shlex.quote(str(a)) for a in [BIN, "--device", "cpu"] + flags)
    # rank 0's stdout: a pipe whose reader is gone before the trainer starts
    closed = ("import os, subprocess, sys; r, w = os.pipe(); os.close(r); "
              "sys.exit(subprocess.run(sys.argv[1:], stdout=w).returncode)")
    p = run_per_rank_script(script, f'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec {shlex.quote(sys.executable)} '
                                    f'-c {shlex.quote(closed)} {args}; fi\nexec {args}\n', timeout=120)
    assert p.returncode != 0, p.stderr
    assert ("stopped before the first step: stdout was closed (the reader of its pipe ended); nothing was trained, "
            f"and the files this run had written in {out} are removed") in p.stderr, p.stderr
    assert not (out / "config.json").exists() and not list(out.glob("model_*"))


def test_an_unreadable_config_file_is_an_error_of_files(tmp_path):
    """A --config file that exists but cannot be read (CLI11: "was not readable (missing?)") was classed as a flag
    error: a rank that alone could not read it said nothing. Like a missing one, each rank says it with its rank.
    Rank 1 of 2 comes from Slurm's environment (no launcher: nothing to end); run as an unprivileged user, for whom
    chmod 000 holds."""
    as_user = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            skip_unless_ci("setpriv not found (util-linux): root reads a chmod 000 file")
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    d = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp_path is root's alone
    try:
        d.chmod(0o755)
        config = d / "c.toml"
        config.write_text("max-steps = 2\n")
        config.chmod(0)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM_"))}
        env.update(SLURM_PROCID="1", SLURM_NTASKS="2")
        p = subprocess.run(as_user + [str(BIN), "--device", "cpu", "--config", str(config), "-i", "no/such/train_*.bin",
                                      "-o", str(tmp_path / "run")], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=60)
    finally:
        shutil.rmtree(d)
    assert p.returncode == 1 and p.stderr == f"error: rank 1 of 2: --config {config}: not readable; check its " \
        "permissions\n", p.stderr


GLOB_EXPANDED = ["-i", "{tmp}/train_0.bin", "{tmp}/train_1.bin"]  # what the shell makes of an unquoted train_*.bin


@pytest.mark.parametrize("args", [["-x", "1e3"], ["-l", "inf"], ["--no-such-flag", "1"], ["-ge", "1"], ["-h", "1"],
                                  GLOB_EXPANDED])
def test_a_flag_error_is_printed_once_not_once_per_rank(tmp_path, args):
    """trial 3: a mistake in the flags under mpirun -np 2 printed the same error line once per process, without
    a rank. Every rank reads the same flags: rank 0 says it once. So do the mistakes found before CLI11 parses
    (llm.c's flags, a glob the shell expanded), which were printed by every rank and ended by MPI_Abort."""
    for i in range(2):
        (tmp_path / f"train_{i}.bin").write_bytes(b"")
    out = tmp_path / "run"
    args = [a.format(tmp=tmp_path) for a in args]
    p = run_np(2, ["-i", "no/such/train_*.bin", "-o", out] + args, check=False)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode != 0 and len(errors) == 1, p.stderr
    assert not out.exists()


def run_two_commands(args0, args1, wdirs=(REPO, REPO), timeout=60):
    """mpirun's `A : B`: rank 0 runs train_gpt2_ls with args0 in wdirs[0], rank 1 with args1 in wdirs[1]."""
    if MPIRUN is None:
        skip_unless_ci("mpirun not found (install OpenMPI: apt-get install openmpi-bin libopenmpi-dev)")
    ctx = [[str(a) for a in args] for args in (args0, args1)]
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "1", "--wdir", str(wdirs[0]), str(BIN), "--device",
           "cpu"] + ctx[0] + [":", "-np", "1", "--wdir", str(wdirs[1]), str(BIN), "--device", "cpu"] + ctx[1]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if "this build has no MPI" in p.stderr:
        skip_unless_ci("train_gpt2_ls was built without MPI (no mpicxx when it was built)")
    return p


def test_ranks_started_with_other_settings_or_data_are_refused(byte_data, tmp_path):
    """A new-user trial: ranks given different flags (mpirun's A : B) trained on a mix (another -l: exit 0, the
    replicas drifting apart; another -i: half of each batch other data), hung (another -x) or failed at the
    first checkpoint (another -o). Every rank now learns rank 0's settings and data and all refuse together,
    one line naming the first flag that differs, before anything is written."""
    base = data_args(byte_data) + COMMON
    out = tmp_path / "run"
    for extra, flag in ((["-l", "1e-3"], "--learning-rate"), (["-x", 9], "--max-steps"),
                        (["--qk-norm"], "--qk-norm"), (["--layers", 3], "--layers")):
        p = run_two_commands(base + ["-o", out], base + ["-o", out] + extra)
        assert p.returncode != 0, p.stdout
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
        assert errors == [f"error: the processes of this run were started with different settings: rank 1's {flag} "
                          "differs from rank 0's (1 of 2 ranks differ); start every process with the same flags and "
                          "--config file, e.g. mpirun -np 2 ./train_gpt2_ls FLAGS"], p.stderr
        assert not out.exists()
        assert "MPI_ABORT" not in p.stderr  # every rank refused: each ended as a finished run does
    p = run_two_commands(base + ["-o", out], base + ["-o", tmp_path / "other"])
    assert "rank 1's --output-dir differs" in p.stderr and not out.exists() and not (tmp_path / "other").exists()
    # a flag refused on one rank only (argv alone: rank 0 prints such errors) ends every rank, said once
    for typo_rank in (0, 1):
        args = [base, base]
        args[typo_rank] = base + ["--learning-rat", "1e-3"]
        p = run_two_commands(*args, timeout=60)
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
        prefix = "error: " if typo_rank == 0 else "error: rank 1 of 2: "
        assert p.returncode != 0 and errors == [prefix + "unknown flag --learning-rat; did you mean --learning-rate?"
                                                ], p.stderr
    # the same relative glob over other data on rank 1 (as node-local disks): refused; identical copies train
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        shutil.copytree(byte_data, d / "data")
    rel = ["-i", "data/train_*.bin", "-j", "data/val_*.bin"] + COMMON
    assert run_two_commands(rel, rel, wdirs=dirs).returncode == 0
    (dirs[1] / "data" / "train_000001.bin").unlink()
    p = run_two_commands(rel, rel, wdirs=dirs)
    assert p.returncode != 0
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
    assert errors == ["error: the processes of this run read different training data -i 'data/train_*.bin': rank 1 "
                      "finds other shards there than rank 0 (their names, sizes or content; 1 of 2 ranks differ); "
                      "give every process the same data (a shared file system, or identical copies)"], p.stderr


def stopped_before_first_checkpoint(out, byte_data, np, batch=4):
    """A run into out on np processes (-b batch, -t 32, -m 2, validated at its step 1) stopped, as if killed,
    before its first checkpoint (its checkpoint files and console line removed)."""
    tiny = [str(batch) if a == "4" and TINY[k - 1] == "-b" else a for k, a in enumerate(TINY)]
    flags = data_args(byte_data) + tiny + ["-o", out, "-x", 2, "-n", 0, "-v", 1, "-m", 2, "-s", 0]
    if np == 1:
        one_process(flags)
    else:
        run_np(np, flags)
    for f in list(out.glob("model_*")) + list(out.glob("state_*")) + list(out.glob("DONE_*")):
        f.unlink()
    log = out / "console.log"
    log.write_text("".join(ln for ln in log.read_text().splitlines(True) if not ln.startswith("checkpoint of step")))
    return out


def one_process(args):
    """The trainer on one process (no mpirun) from the repository root; returns its CompletedProcess (exit 0)."""
    p = subprocess.run([str(BIN), "--device", "cpu"] + [str(a) for a in args], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p


def world_size_note(stderr):
    return [ln for ln in stderr.splitlines() if "where the run started on" in ln]


def test_a_restart_from_step_0_on_another_process_count_says_what_changes(byte_data, tmp_path):
    """(a new-user trial) -y 1 of a run stopped before its first checkpoint, started again under mpirun -np 2
    where it started on one process, trained twice its tokens per step (B x T x processes, no -d) and validated
    twice its -m tokens, with no note (a resume from a checkpoint refuses another process count). (a review)
    The note's advice is taken: it once offered -d 128, which B 4 x T 32 x 2 processes cannot divide (refused);
    it now names the flags these processes accept, and the run started with them trains the run's batch."""
    out = stopped_before_first_checkpoint(tmp_path / "r", byte_data, 1)
    shutil.copytree(out, tmp_path / "saved")
    p = run_np(2, ["-o", out, "-y", 1, "--threads", 1])
    assert world_size_note(p.stderr) == [
        "note: -y 1: starting again from step 0 on 2 processes where the run started on 1: a step trains B x T x "
        "processes = 256 tokens (the run's 128; -b 2 keeps it), and -m 2 validates 512 tokens (the run's 256: -m "
        "counts global batches; -b 2 keeps it too)"], p.stderr
    # the advice as a command: accepted, no note, the run's 128 tokens a step (1 x 2 x 32 x 2) and its validation
    shutil.rmtree(out)
    shutil.copytree(tmp_path / "saved", out)
    p = run_np(2, ["-o", out, "-y", 1, "--threads", 1, "-b", 2])
    assert world_size_note(p.stderr) == [], p.stderr
    derived = json.loads((out / "config.json").read_text())["derived"]
    assert derived["tokens_per_step"] == 128 and derived["world_size"] == 2, derived
    # from 2 processes to 1: -d (B x T x 1 divides the run's 256) and the -m that reads the run's 512 tokens
    two = stopped_before_first_checkpoint(tmp_path / "two", byte_data, 2)
    shutil.copytree(two, tmp_path / "saved_two")
    p = one_process(["-o", two, "-y", 1, "--threads", 1])
    assert world_size_note(p.stderr) == [
        "note: -y 1: starting again from step 0 on 1 processes where the run started on 2: a step trains B x T x "
        "processes = 128 tokens (the run's 256; -d 256 keeps it), and -m 2 validates 256 tokens (the run's 512: -m "
        "counts global batches; -m 4 keeps it)"], p.stderr
    shutil.rmtree(two)
    shutil.copytree(tmp_path / "saved_two", two)
    p = one_process(["-o", two, "-y", 1, "--threads", 1, "-d", 256, "-m", 4])
    assert world_size_note(p.stderr) == [], p.stderr
    derived = json.loads((two / "config.json").read_text())["derived"]
    assert derived["tokens_per_step"] == 256 and derived["grad_accum_steps"] == 2, derived
    # B 3 on one process (96 tokens) cannot be a step of 2 processes at T 32 (64 tokens a row): no flag is offered
    three = stopped_before_first_checkpoint(tmp_path / "three", byte_data, 1, batch=3)
    p = run_np(2, ["-o", three, "-y", 1, "--threads", 1])
    assert world_size_note(p.stderr) == [
        "note: -y 1: starting again from step 0 on 2 processes where the run started on 1: a step trains B x T x "
        "processes = 192 tokens (the run's 96; no -b or -d keeps it on 2 processes: mpirun -np 1 does), and -m 2 "
        "validates 384 tokens (the run's 192: -m counts global batches; -m 1 keeps it)"], p.stderr
