"""Fault tests of the train_gpt2_ls binary (docs/reliability.md), run from the repository root like
test_e2e.py (TRAIN_GPT2_LS selects the binary):

- a checkpoint or JSONL write that fails midway, by the process's file-size limit (RLIMIT_FSIZE,
  set in the child before exec; the trainer ignores SIGXFSZ so the write fails with EFBIG) or by a
  really full disk (a size-limited tmpfs the test mounts; skipped where mounting is not permitted):
  one error line, exit status 1, the previous complete checkpoint byte-identical and loadable,
  no temporary files, metrics.jsonl / logit_stats.jsonl holding only complete lines, and a later
  `-y 1` reproducing the uninterrupted run bit for bit;
- a partial last line left in the JSONL files (a kill -9 mid-write) is dropped on resume;
- the output-directory lock (llmc/io/output_lock.h): a second trainer on the same -o is refused with
  one line naming the directory and the first one's pid, changes nothing, and after the first is
  killed with SIGKILL a `-y 1` run succeeds;
- a model too big for the machine's memory (an address-space limit) ends with one line saying so.
"""
import json
import os
import re
import resource
import signal
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from run_helpers import BIN, REPO, TINY, assert_same_run, data_args, dir_hashes, read_jsonl, run

# Constant LR: the interrupted runs use -x 10 first and -x 20 later, like an uninterrupted -x 20.
BASE = TINY + ["-k", "constant", "-u", 0, "-l", "2e-3", "-v", 5, "-m", 2, "-s", 0]
STATS_ON = ["--logit-stats-every", 1]
STATS_OFF = ["--logit-stats-every", 0]
CKPT10 = ["model_00000010.bin", "state_00000010_00000.bin", "DONE_00000010"]


def run_limited(args, fsize):
    """Runs the trainer with RLIMIT_FSIZE = fsize bytes (soft and hard: the child cannot raise it)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return subprocess.run([str(BIN), "--device", "cpu"] + [str(a) for a in args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, preexec_fn=limit)


@pytest.fixture(scope="module")
def reference(byte_data, tmp_path_factory):
    """Uninterrupted 20-step runs (checkpoints at 10 and 20), one per statistics setting."""
    refs = {}
    for name, stats in (("on", STATS_ON), ("off", STATS_OFF)):
        out = tmp_path_factory.mktemp(f"ref_{name}")
        run(data_args(byte_data) + BASE + stats + ["-o", out, "-x", 20, "-n", 10])
        refs[name] = out
    return refs


def first_ten(byte_data, out, stats):
    """The first 10 steps (checkpoint 10) into out; returns the checkpoint's file hashes."""
    run(data_args(byte_data) + BASE + stats + ["-o", out, "-x", 10, "-n", 10])
    return {n: h for n, h in dir_hashes(out).items() if n in CKPT10}


def assert_one_error_line(p, *expect):
    assert p.returncode == 1, f"exit status {p.returncode} (a signal if negative; SIGXFSZ is {int(signal.SIGXFSZ)}):\n{p.stderr}"
    # the notes of a resume that changes -x (docs/training.md "Resuming and forking") come before it
    lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("note: resuming at step")]
    assert len(lines) == 1 and lines[0].startswith("error: "), f"expected one error line on stderr, got:\n{p.stderr}"
    for e in expect:
        assert e in lines[0], f"expected '{e}' in: {lines[0]}"
    return lines[0]


def assert_complete_jsonl(path):
    """Every line of the file is a complete JSON record (nothing after the last newline)."""
    text = Path(path).read_text()
    assert text == "" or text.endswith("\n"), f"{path.name} ends with a partial line: {text[-200:]!r}"
    return [json.loads(line) for line in text.splitlines()]


def assert_previous_checkpoint_intact(out, before):
    assert {n: h for n, h in dir_hashes(out).items() if n in CKPT10} == before, "checkpoint 10 changed"
    assert not (out / "DONE_00000020").exists(), "the failed save marked step 20 complete"
    assert not list(out.glob("*.tmp*")), f"temporary files left: {sorted(p.name for p in out.glob('*.tmp*'))}"
    for f in ("metrics.jsonl", "logit_stats.jsonl"):
        assert_complete_jsonl(out / f)


def resume_and_compare(byte_data, out, stats, ref):
    """-y 1 without any limit continues from checkpoint 10 and equals the uninterrupted run."""
    p = run(data_args(byte_data) + BASE + stats + ["-o", out, "-x", 20, "-n", 10, "-y", 1])
    assert "resumed from" in p.stdout and "at step 10" in p.stdout, p.stdout[:2000]
    assert_same_run(ref, out, 20)
    assert read_jsonl(ref / "logit_stats.jsonl") == read_jsonl(out / "logit_stats.jsonl")
    assert (ref / "metrics.jsonl").read_text().count("\n") == (out / "metrics.jsonl").read_text().count("\n")


# ---------------------------------------------------------------------------------------------
# file-size limit (RLIMIT_FSIZE)

@pytest.mark.parametrize("victim", ["model", "state"])
def test_checkpoint_write_past_file_size_limit(byte_data, reference, tmp_path, victim):
    """The save of step 20 fails in the model file (limit below its size) or in the state file
    after the model file was written (limit between the two sizes)."""
    out = tmp_path / "run"
    before = first_ten(byte_data, out, STATS_ON)
    model_size = (out / "model_00000010.bin").stat().st_size
    state_size = (out / "state_00000010_00000.bin").stat().st_size
    jsonl_max = 2 * max((out / f).stat().st_size for f in ("metrics.jsonl", "logit_stats.jsonl"))
    limit = model_size // 2 if victim == "model" else model_size + 4096
    assert jsonl_max < limit < (model_size if victim == "model" else state_size), \
        (jsonl_max, limit, model_size, state_size)  # the limit hits exactly the file meant
    p = run_limited(data_args(byte_data) + BASE + STATS_ON + ["-o", out, "-x", 20, "-n", 10, "-y", 1], limit)
    name = "model_00000020.bin" if victim == "model" else "state_00000020_00000.bin"
    assert_one_error_line(p, "File too large", f"{out}/{name} was left unchanged", "ulimit -f")
    assert "step 20/20" in p.stdout, "the run should have trained up to the checkpoint of step 20"
    assert_previous_checkpoint_intact(out, before)
    assert (out / "model_00000020.bin").exists() == (victim == "state")  # written before the state failed
    resume_and_compare(byte_data, out, STATS_ON, reference["on"])


@pytest.mark.parametrize("victim", ["metrics.jsonl", "logit_stats.jsonl"])
def test_jsonl_write_past_file_size_limit(byte_data, reference, tmp_path, victim):
    """The file-size limit cuts a JSONL record in the middle: the partial record is removed, the file
    ends with complete lines, and a resume from checkpoint 10 is bit-identical."""
    stats, ref = (STATS_OFF, reference["off"]) if victim == "metrics.jsonl" else (STATS_ON, reference["on"])
    out = tmp_path / "run"
    before = first_ten(byte_data, out, stats)
    size10 = (out / victim).stat().st_size
    record = max(len(line) + 1 for line in (out / victim).read_text().splitlines() if '"step":0' not in line)
    limit = size10 + 2 * record + record // 2  # two more records fit, the third is cut midway
    others = [f for f in ("metrics.jsonl", "logit_stats.jsonl") if f != victim]
    assert all(2 * (out / f).stat().st_size < limit for f in others)
    assert (out / "config.json").stat().st_size + 512 < limit  # its rewrite with a "history" entry fits
    p = run_limited(data_args(byte_data) + BASE + stats + ["-o", out, "-x", 20, "-n", 10, "-y", 1], limit)
    line = assert_one_error_line(p, f"{out}/{victim}", "File too large", "partial record was removed", "ulimit -f")
    assert "step 20/20" not in p.stdout, line
    recs = assert_complete_jsonl(out / victim)
    steps = [r["step"] for r in recs if victim == "logit_stats.jsonl" or "loss" in r]
    assert steps == list(range(1, 13)), f"expected the records of steps 1..12 (two after the checkpoint): {steps}"
    assert (out / victim).stat().st_size <= limit
    assert_previous_checkpoint_intact(out, before)
    resume_and_compare(byte_data, out, stats, ref)


def test_partial_last_jsonl_line_is_dropped_on_resume(byte_data, reference, tmp_path):
    """A kill -9 in the middle of a record (simulated: a cut line after records of later steps)."""
    out = tmp_path / "run"
    first_ten(byte_data, out, STATS_ON)
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 11, "loss": 4.1}\n{"step": 12, "lo')
    with open(out / "logit_stats.jsonl", "a") as f:
        f.write('{"step": 11, "num_layers": 2, "att')
    resume_and_compare(byte_data, out, STATS_ON, reference["on"])


# ---------------------------------------------------------------------------------------------
# a really full disk: a size-limited tmpfs (needs mount permission: root or CAP_SYS_ADMIN)

@pytest.fixture
def small_fs(tmp_path):
    """mount(size) mounts a tmpfs of that many bytes at tmp_path/fs and returns it; remount(size)
    resizes it (frees the disk). Skipped where mounting is not permitted."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    mounted = []

    class Fs:
        path = mnt

        @staticmethod
        def mount(size):
            if os.geteuid() != 0 or shutil.which("mount") is None:
                pytest.skip("the full-disk variant mounts a small tmpfs, which needs root (or CAP_SYS_ADMIN); "
                            "the RLIMIT_FSIZE tests cover the same error paths")
            p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mnt)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                pytest.skip(f"mounting a tmpfs is not permitted here ({p.stderr.strip()}); "
                            "the RLIMIT_FSIZE tests cover the same error paths")
            mounted.append(mnt)

        @staticmethod
        def remount(size):
            subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)

    yield Fs
    for m in mounted:
        subprocess.run(["umount", "-l", str(m)], check=False)


def used_bytes(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.mark.parametrize("victim", ["state", "jsonl"])
def test_full_disk(byte_data, reference, small_fs, tmp_path, victim):
    """Checkpoint 10 is written to a tmpfs of 4 MB; the tmpfs is then shrunk to what it holds plus
    room for the model file of step 20 and half its state file (victim "state": ENOSPC in the state
    file) or plus one page (victim "jsonl": ENOSPC in metrics.jsonl or logit_stats.jsonl). After the
    failure the disk is enlarged again and -y 1 finishes the run bit-identically."""
    small_fs.mount(4 << 20)
    out = small_fs.path / "run"
    before = first_ten(byte_data, out, STATS_ON)
    model_size = (out / "model_00000010.bin").stat().st_size
    state_size = (out / "state_00000010_00000.bin").stat().st_size
    page = 4096
    room = 64 * 1024 + model_size + state_size // 2 if victim == "state" else page
    small_fs.remount(used_bytes(small_fs.path) + room)
    p = run(data_args(byte_data) + BASE + STATS_ON + ["-o", out, "-x", 20, "-n", 10, "-y", 1], check=False)
    if victim == "state":
        assert_one_error_line(p, "No space left on device", f"{out}/state_00000020_00000.bin was left unchanged",
                              "free disk space")
        assert (out / "model_00000020.bin").exists()
    else:
        line = assert_one_error_line(p, "No space left on device", "partial record was removed", "free disk space")
        assert f"{out}/metrics.jsonl" in line or f"{out}/logit_stats.jsonl" in line, line
        assert "step 20/20" not in p.stdout
    assert_previous_checkpoint_intact(out, before)
    small_fs.remount(16 << 20)  # the user frees space
    resume_and_compare(byte_data, out, STATS_ON, reference["on"])


# ---------------------------------------------------------------------------------------------
# the output-directory lock

def wait_for(cond, proc, what, timeout=120):
    deadline = time.time() + timeout
    while not cond():
        if proc.poll() is not None:
            pytest.fail(f"the first trainer ended ({proc.returncode}) before {what}:\n{proc.stderr.read()}")
        if time.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def done_steps(out):
    """Steps with a completion marker (not a marker's temporary file, which a kill can leave)."""
    return sorted(int(m.group(1)) for p in out.iterdir() if (m := re.fullmatch(r"DONE_(\d{8})", p.name)))


def test_second_trainer_on_the_same_output_dir_is_refused(byte_data, tmp_path):
    out = tmp_path / "run"
    args = data_args(byte_data) + BASE + STATS_ON + ["-n", 20, "--keep-checkpoints", 2]
    first = subprocess.Popen([str(BIN), "--device", "cpu"] + [str(a) for a in args + ["-o", out, "-x", 1_000_000]],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lock = out / ".lock"
        wait_for(lambda: lock.exists() and lock.read_text().startswith(f"pid {first.pid} "), first, "it took the lock")
        wait_for(lambda: (out / "DONE_00000040").exists(), first, "its second checkpoint")
        first.send_signal(signal.SIGSTOP)  # frozen while holding the lock: its files stay still
        time.sleep(0.2)
        before = dir_hashes(out)
        # a fresh run (the directory already has checkpoints) and a resume are both refused by the lock
        for extra in (["-x", 30], ["-x", 1_000_000, "-y", 1]):
            p = run(args + ["-o", out] + extra, check=False)
            assert_one_error_line(p, f"output directory {out} is in use", f"pid {first.pid} ", "choose another -o")
            assert dir_hashes(out) == before, "the refused run changed files in the output directory"
        # (a second run that passes the read-only check in a race is refused when it takes the lock:
        # test/test_output_faults.cpp) the first run goes on and checkpoints again
        first.send_signal(signal.SIGCONT)
        done = done_steps(out)[-1]
        wait_for(lambda: done_steps(out)[-1] > done, first, "a checkpoint after the refusals")
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == -signal.SIGKILL
    newest = done_steps(out)[-1]
    p = run(args + ["-o", out, "-x", newest + 3, "-y", 1])  # the dead run's lock does not block
    assert f"at step {newest}" in p.stdout
    recs = [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "loss" in r]
    assert recs == list(range(1, newest + 4)), "records are one per step, without duplicates"


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="a GPU is present: CUDA's start-up reserves more address space than the limit")
def test_model_too_big_for_memory_is_one_line(byte_data, tmp_path):
    """A model that passes validation but does not fit in memory (here 1.4e9 parameters, 5.4 GB in
    fp32, under a 4 GiB address-space limit, RLIMIT_AS, set in the child) ends with one line naming
    the problem and what to make smaller, not "internal error: std::bad_alloc"."""
    if b"AddressSanitizer" in BIN.read_bytes():
        pytest.skip(f"{BIN} is a sanitizer build: ASan reserves terabytes of address space, RLIMIT_AS cannot apply")
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    big = ["--layers", 48, "--channels", 1536, "--heads", 12, "--global-heads", 2]
    p = subprocess.run([str(BIN), "--device", "cpu"] + [str(a) for a in data_args(byte_data) + BASE + big + ["-o", tmp_path / "run", "-x", 2]],
                       cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert_one_error_line(p, "out of memory", "use a smaller model (--layers, --channels")
