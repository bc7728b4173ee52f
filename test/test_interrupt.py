"""Interrupts and preemption (docs/training.md, llmc/train/interrupt.h), end to end with the real binary on
run_helpers.py's byte-level tiny Shakespeare and tiny model:

- SIGTERM, SIGUSR1 (Slurm's warning before the time limit) or SIGINT at an arbitrary step: the trainer
  finishes the step, writes a complete checkpoint of it, prints one line naming it on stderr and exits
  with 128 + the signal's number; `-y 1` to the same final step then gives the uninterrupted run's
  metrics and final checkpoint bit for bit;
- without -o the line says that nothing was saved;
- a SIGINT the trainer inherited as ignored (a script's `cmd &`) stays ignored;
- a stdout whose reader ended (`| head`; `| tee` ended by the same Ctrl-C) stops the run the same way:
  a checkpoint, exit status 141 (SIGPIPE's), or the signal's when one came first; before the first step,
  one line and 141, and no files of a run this start began;
- a second SIGINT ends the process at once (killed by SIGINT) and the previous checkpoint stays loadable
  (a resume from it reproduces the uninterrupted run);
- with 2 MPI ranks, a SIGTERM that reaches rank 1 only, or a SIGUSR1 to mpirun (which forwards it to
  every rank), stops both ranks after the same step; both write their part of the checkpoint, and a
  2-rank resume is bit-identical to the uninterrupted 2-rank run.

Where the step lands: the single-process tests read the trainer's stdout through a pipe shrunk to one
page (F_SETPIPE_SZ) and stop reading once it printed step FIRST_SEEN; the trainer can then get at most
two pages (the pipe and the test's read buffer, about 90 step lines) ahead before its next step line
blocks, so the signal lands at a step between FIRST_SEEN and about FIRST_SEEN + 90, below -x, whatever
the machine's load. The 2-rank runs bound it the same way: rank 0's stdout (the console; mpirun would
buffer it without limit) goes into a FIFO shrunk to one page that the test reads byte by byte, and the
ranks move in step (every step reduces over both), so neither rank gets more than a page of step lines
(at most 40 of over 100 bytes) past step FIRST_SEEN, plus the line rank 0 is held in and the one step a
vote may take (llmc/train/interrupt.h): far below MPI_STEPS, whatever the machine's load.
"""
import array
import fcntl
import json
import os
import re
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest

from run_helpers import BIN, REPO, TINY, assert_same_run, data_args, read_jsonl, run
from test_mpi import MPIRUN, run_np

# Constant LR: the interrupted and the resumed run use the same -x anyway; -n 0: the interrupt writes
# the only checkpoint before the final one.
STEPS = 200
BASE = TINY + ["-k", "constant", "-u", 0, "-l", "2e-3", "-v", 25, "-m", 2, "-s", 0, "-x", STEPS]
FIRST_SEEN = 5
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux), absent from older Pythons' fcntl
LINE = re.compile(r"^interrupted by (SIG[A-Z0-9]+) at step (\d+)(?: \([^)]*\))?: (.*)$", re.M)  # (SIGPIPE's reason)
ACK = "train_gpt2_ls: {} received: stopping after this step with a checkpoint"


def default_sigint():
    """The trainer's SIGINT as a terminal's foreground job has it (default), whatever this process
    inherited: a test run started by a script's `cmd &` ignores SIGINT, and the trainer keeps an
    inherited ignore (test_an_inherited_ignored_sigint_stays_ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args, stderr_path, preexec_fn=default_sigint):
    """Starts the trainer with stdout on a one-page pipe (returned: the read end) and stderr into a file."""
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls`")
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    with open(stderr_path, "wb") as err:
        p = subprocess.Popen([str(BIN), "--device", "cpu"] + [str(a) for a in args], cwd=REPO, stdout=w, stderr=err,
                             preexec_fn=preexec_fn)
    os.close(w)
    return p, os.fdopen(r, "r")


def step_line(step, steps):
    """The start of the console line of `step` (the step number is padded to the width of -x)."""
    return f"step {step:>{len(str(steps))}}/{steps} | loss"


def read_until_step(out, step, what):
    """Reads stdout lines until the console line of `step`; returns what was read."""
    seen = []
    for line in out:
        seen.append(line)
        if line.startswith(step_line(step, STEPS)):
            return "".join(seen)
    pytest.fail(f"{what}: the trainer ended before step {step}:\n{''.join(seen)[-2000:]}")


def wait_for_text(path, text, proc, seconds=60):
    deadline = time.monotonic() + seconds
    while text not in Path(path).read_text():
        assert proc.poll() is None, f"the trainer ended (status {proc.returncode}) before '{text}':\n" + \
            Path(path).read_text()
        assert time.monotonic() < deadline, f"no '{text}' on stderr within {seconds} s"
        time.sleep(0.01)


def wait_until_blocked(proc, stdout, seconds=60):
    """Waits until the trainer sleeps with its stdout pipe unchanged for half a second (blocked writing a line)."""
    deadline, last, still = time.monotonic() + seconds, -1, 0
    while still < 50:
        assert proc.poll() is None and time.monotonic() < deadline, "the trainer did not block on its stdout"
        queued = array.array("i", [0])
        fcntl.ioctl(stdout.fileno(), termios.FIONREAD, queued)
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        still = still + 1 if queued[0] == last and queued[0] > 0 and state == "S" else 0
        last = queued[0]
        time.sleep(0.01)


def interrupted_line(stderr, sig_name):
    """The one `interrupted by` line; returns its step and its tail."""
    lines = LINE.findall(stderr)
    assert len(lines) == 1, f"expected one 'interrupted by' line on stderr, got:\n{stderr}"
    name, step, tail = lines[0]
    assert name == sig_name, lines[0]
    return int(step), tail


@pytest.fixture(scope="module")
def reference(byte_data, tmp_path_factory):
    """The uninterrupted single-process run."""
    out = tmp_path_factory.mktemp("ref")
    run(data_args(byte_data) + BASE + ["-o", out])
    return out


def assert_resumes_to_reference(byte_data, out, from_step, ref):
    p = run(data_args(byte_data) + BASE + ["-o", out, "-y", 1])
    assert f"resumed from {out}/model_{from_step:08d}.bin at step {from_step}" in p.stdout, p.stdout[:2000]
    assert_same_run(ref, out, STEPS)
    assert read_jsonl(ref / "logit_stats.jsonl") == read_jsonl(out / "logit_stats.jsonl")


# ---------------------------------------------------------------------------------------------
# one process

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT], ids=lambda s: s.name)
def test_signal_checkpoints_the_step_and_resume_is_bit_identical(byte_data, reference, tmp_path, sig):
    out, err = tmp_path / "o", tmp_path / "stderr"
    p, stdout = start(data_args(byte_data) + BASE + ["-o", out], err)
    console = read_until_step(stdout, FIRST_SEEN, sig.name)
    p.send_signal(sig)
    console += stdout.read()  # lets the trainer go on to the end of its step
    stdout.close()
    assert p.wait(timeout=120) == 128 + int(sig), f"exit status {p.returncode}:\n{err.read_text()}"
    stderr = err.read_text()
    assert ACK.format(sig.name) in stderr
    step, tail = interrupted_line(stderr, sig.name)
    assert FIRST_SEEN <= step < STEPS
    assert tail == f"wrote {out}/model_{step:08d}.bin; resume with -y 1"
    assert step_line(step, STEPS) in console and step_line(step + 1, STEPS) not in console  # it finished that step
    assert sorted(f.name for f in out.glob("DONE_*")) == [f"DONE_{step:08d}"]
    assert (out / f"model_{step:08d}.bin").exists() and (out / f"state_{step:08d}_00000.bin").exists()
    assert not list(out.glob("*.tmp*"))
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "loss" in r] == list(range(1, step + 1))
    assert_resumes_to_reference(byte_data, out, step, reference)


def test_a_closed_stdout_checkpoints_the_step_and_resume_is_bit_identical(byte_data, reference, tmp_path):
    """(a new-user trial) `./train_gpt2_ls ... | head -N`: the reader of stdout ends. The trainer was killed by
    SIGPIPE at its next step line, every step since the last checkpoint lost; it now stops after that step as a
    signal stops it: a checkpoint, one line, exit status 141 (128 + SIGPIPE), console.log whole."""
    out, err = tmp_path / "o", tmp_path / "stderr"
    p, stdout = start(data_args(byte_data) + BASE + ["-o", out], err)
    console = read_until_step(stdout, FIRST_SEEN, "closed stdout")
    stdout.close()
    assert p.wait(timeout=120) == 128 + int(signal.SIGPIPE), f"exit status {p.returncode}:\n{err.read_text()}"
    step, tail = interrupted_line(err.read_text(), "SIGPIPE")
    assert FIRST_SEEN <= step < STEPS
    assert tail == f"wrote {out}/model_{step:08d}.bin; resume with -y 1"
    assert f"interrupted by SIGPIPE at step {step} (stdout was closed: the reader of its pipe ended): " in \
        err.read_text()
    log = (out / "console.log").read_text()
    assert log.startswith(console) and step_line(step, STEPS) in log and step_line(step + 1, STEPS) not in log
    assert log.endswith(f"checkpoint of step {step}: {out}/model_{step:08d}.bin\n"), log[-500:]
    assert sorted(f.name for f in out.glob("DONE_*")) == [f"DONE_{step:08d}"]
    assert_resumes_to_reference(byte_data, out, step, reference)


def test_sigint_then_a_closed_stdout_still_checkpoints(byte_data, tmp_path):
    """(a new-user trial) Ctrl-C on `./train_gpt2_ls ... | tee log`: the terminal's SIGINT ends tee too, so the
    trainer's next step line meets a pipe without a reader; it was killed by SIGPIPE before the checkpoint it had
    just promised. Held in the write of a step line (its pipe full), it gets the SIGINT, then loses its reader:
    it finishes the step, checkpoints it and exits 130, the SIGINT's."""
    out, err = tmp_path / "o", tmp_path / "stderr"
    p, stdout = start(data_args(byte_data) + BASE + ["-o", out], err)
    read_until_step(stdout, FIRST_SEEN, "SIGINT, closed stdout")
    wait_until_blocked(p, stdout)
    p.send_signal(signal.SIGINT)
    wait_for_text(err, ACK.format("SIGINT"), p)
    stdout.close()
    assert p.wait(timeout=120) == 128 + int(signal.SIGINT), f"exit status {p.returncode}:\n{err.read_text()}"
    step, tail = interrupted_line(err.read_text(), "SIGINT")
    assert FIRST_SEEN <= step < STEPS and tail == f"wrote {out}/model_{step:08d}.bin; resume with -y 1"
    assert sorted(f.name for f in out.glob("DONE_*")) == [f"DONE_{step:08d}"]


def run_with_stdout_closed(args, err):
    """The trainer with stdout a pipe whose reader ended before it started (`| head` that is gone: its first
    console line meets EPIPE, before the first step); SIGPIPE's default action as a shell gives it. Returns
    (exit status, stderr)."""
    r, w = os.pipe()
    os.close(r)
    with open(err, "wb") as e:
        p = subprocess.run([str(BIN), "--device", "cpu"] + [str(a) for a in args], cwd=REPO, stdout=w, stderr=e,
                           timeout=120, preexec_fn=default_sigint)
    os.close(w)
    return p.returncode, Path(err).read_text()


def test_a_stdout_closed_before_the_first_step_stops_with_one_line(byte_data, tmp_path):
    """(a review) `(./train_gpt2_ls -o p1 ...) | head -3`: the reader ended while the header printed, and SIGPIPE
    killed the trainer without a word (status 141 from the shell, empty stderr), leaving config.json and the
    other files of a run without a checkpoint, for which the same command again was refused. It now stops with
    one line and status 141; a run this start began leaves no files, and -y 1 keeps the run's."""
    short = data_args(byte_data) + TINY + ["-x", 2, "-v", 1, "-m", 2, "-s", 0, "-n", 0]
    head = "stopped before the first step: stdout was closed (the reader of its pipe ended); "
    out, err = tmp_path / "o", tmp_path / "stderr"
    status, text = run_with_stdout_closed(short + ["-o", out], err)
    assert status == 128 + int(signal.SIGPIPE), text
    assert [ln for ln in text.splitlines() if not ln.startswith("note: ")] == [
        head + f"nothing was trained, and the files this run had written in {out} are removed; start it again with "
        "stdout open"], text
    assert [f.name for f in out.iterdir() if f.name != ".lock"] == [], sorted(out.iterdir())
    # (review 15) files of the run's names that -o held before, empty ones too, are not this start's: kept
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep\n")
    for name in ("samples.txt", "console.log"):
        (mine / name).write_bytes(b"")
    status, text = run_with_stdout_closed(short + ["-o", mine], err)
    assert status == 141 and "are removed" in text, text
    assert sorted(f.name for f in mine.iterdir() if f.name != ".lock") == ["console.log", "notes.txt", "samples.txt"]
    assert (mine / "notes.txt").read_text() == "keep\n" and (mine / "samples.txt").read_bytes() == b""
    assert (mine / "console.log").read_bytes() == b""  # (review 16) cut back: this start's header was in it
    run(short + ["-o", mine])  # the fix the line names: the same command, stdout open, a new run
    assert sorted(f.name for f in mine.glob("DONE_*")) == ["DONE_00000002"]
    # (review 16) an empty config.json in -o: a new run starts there, and its stop leaves it empty again
    cj = tmp_path / "cj"
    cj.mkdir()
    (cj / "config.json").write_bytes(b"")
    status, text = run_with_stdout_closed(short + ["-o", cj], err)
    assert status == 141 and "are removed" in text, text
    assert sorted(f.name for f in cj.iterdir() if f.name != ".lock") == ["config.json"]
    assert (cj / "config.json").read_bytes() == b""
    run(short + ["-o", cj])
    run(short + ["-o", out])  # the same command with stdout open: a new run, not refused
    assert sorted(f.name for f in out.glob("DONE_*")) == ["DONE_00000002"]
    # -y 1 of a run with a checkpoint: nothing trained past it, every file kept
    before = {f.name: f.read_bytes() for f in out.iterdir()
              if f.name.startswith(("model_", "state_", "DONE_", "config.json"))}
    # (review 15) the flags given (-x 4, -l) were recorded in config.json's history by a start that trained no
    # step: the record is put back as it was, and the line says to give them again
    again = " (its config.json is as it was: give again the flags that change a setting)"
    status, text = run_with_stdout_closed(short + ["-o", out, "-y", 1, "-x", 4, "-l", "1e-3"], err)
    assert status == 141 and text.splitlines()[-1] == head + "nothing was trained past step 2; resume with -y 1" + \
        again, text
    assert {f.name: f.read_bytes() for f in out.iterdir()
            if f.name.startswith(("model_", "state_", "DONE_", "config.json"))} == before
    assert (out / "console.log").exists()
    p = run(short + ["-o", out, "-y", 1, "-x", 4])
    assert f"resumed from {out}/model_00000002.bin at step 2" in p.stdout, p.stdout
    # -y 1 of a run stopped before its first checkpoint: its files stay (it is still that run)
    two = tmp_path / "two"
    run(short + ["-o", two])
    for f in list(two.glob("model_*")) + list(two.glob("state_*")) + list(two.glob("DONE_*")):
        f.unlink()
    log = two / "console.log"
    log.write_text("".join(ln for ln in log.read_text().splitlines(True) if not ln.startswith("checkpoint of step")))
    status, text = run_with_stdout_closed(short + ["-o", two, "-y", 1], err)
    assert status == 141 and text.splitlines()[-1] == head + f"nothing was trained; {two} holds the run without a " \
        "checkpoint: continue it with -y 1" + again, text
    assert (two / "config.json").exists()
    run(short + ["-o", two, "-y", 1])
    # without -o
    status, text = run_with_stdout_closed(short, err)
    assert status == 141 and text.splitlines()[-1] == head + "nothing was trained or saved", text


def test_signal_without_output_dir_says_nothing_was_saved(byte_data, tmp_path):
    err = tmp_path / "stderr"
    p, stdout = start(data_args(byte_data) + BASE, err)
    read_until_step(stdout, FIRST_SEEN, "no -o")
    p.send_signal(signal.SIGTERM)
    stdout.read()
    stdout.close()
    assert p.wait(timeout=120) == 128 + int(signal.SIGTERM), err.read_text()
    step, tail = interrupted_line(err.read_text(), "SIGTERM")
    assert FIRST_SEEN <= step < STEPS
    assert tail.startswith("nothing was saved (no -o given"), tail
    assert list(tmp_path.iterdir()) == [err]


def test_an_inherited_ignored_sigint_stays_ignored(byte_data, tmp_path):
    """A trainer started with SIGINT ignored (what a shell script's `cmd &` does) is not stopped by SIGINT;
    SIGTERM still stops it."""
    out, err = tmp_path / "o", tmp_path / "stderr"
    p, stdout = start(data_args(byte_data) + BASE + ["-o", out], err,
                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    read_until_step(stdout, FIRST_SEEN, "ignored SIGINT")
    p.send_signal(signal.SIGINT)
    read_until_step(stdout, 100, "ignored SIGINT")  # a stop would have come by step FIRST_SEEN + ~90
    p.send_signal(signal.SIGTERM)
    stdout.read()
    stdout.close()
    assert p.wait(timeout=120) == 128 + int(signal.SIGTERM), err.read_text()
    assert ACK.format("SIGINT") not in err.read_text()
    step, _ = interrupted_line(err.read_text(), "SIGTERM")
    assert 100 <= step < STEPS


def test_second_sigint_exits_at_once_and_keeps_the_previous_checkpoint(byte_data, reference, tmp_path):
    """The trainer is held in the write of a step line (its stdout pipe full, the test reads no more), so
    the first SIGINT is pending and no step can end while the second one arrives."""
    out, err = tmp_path / "o", tmp_path / "stderr"
    p, stdout = start(data_args(byte_data) + BASE + ["-o", out, "-n", 5], err)
    read_until_step(stdout, 12, "SIGINT twice")  # checkpoints 5 and 10 are complete
    wait_until_blocked(p, stdout)
    p.send_signal(signal.SIGINT)
    wait_for_text(err, ACK.format("SIGINT"), p)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=10) == -signal.SIGINT, f"exit status {p.returncode}:\n{err.read_text()}"
    stdout.close()
    assert "interrupted by" not in err.read_text()
    done = sorted(int(f.name[5:]) for f in out.glob("DONE_*"))
    assert done and done[-1] >= 10 and done[-1] % 5 == 0, done  # only the scheduled checkpoints
    assert_resumes_to_reference(byte_data, out, done[-1], reference)


# ---------------------------------------------------------------------------------------------
# two MPI ranks

MPI_STEPS = 120
MPI_BASE = TINY + ["-k", "constant", "-u", 0, "-l", "2e-3", "-v", 30, "-m", 2, "-s", 0, "-x", MPI_STEPS]
# rank 0 with its stdout into the FIFO named by $CONSOLE_FIFO, rank 1 as mpirun starts it (exec: the
# processes below mpirun are the trainers, with their own pids and signals)
RANK0_STDOUT_TO_FIFO = 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec "$@" >"$CONSOLE_FIFO"; else exec "$@"; fi'


def rank_pids(launcher_pid):
    """{rank: pid} of the trainer processes below mpirun (from /proc: parent pids and environments)."""
    parent, found = {}, {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    for pid in parent:
        up = pid
        while up in parent and up != launcher_pid and up > 1:
            up = parent[up]
        if up != launcher_pid or pid == launcher_pid:
            continue
        try:
            env = dict(kv.split("=", 1) for kv in (Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                                                   .split("\0")) if "=" in kv)
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if "OMPI_COMM_WORLD_RANK" in env and os.path.samefile(exe, BIN):
            found[int(env["OMPI_COMM_WORLD_RANK"])] = pid
    return found


class ConsoleFifo:
    """A FIFO at `path` for rank 0's stdout, its read end shrunk to one page, so that rank 0 blocks on its
    console once a page of lines is unread. A stand-in write end, open until rank 0's first byte arrives,
    keeps a read from seeing the end of the file before rank 0 opened the FIFO."""

    def __init__(self, path):
        os.mkfifo(path)
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # no writer yet: a blocking open would wait
        fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        fcntl.fcntl(self.fd, F_SETPIPE_SZ, 4096)
        self.stand_in = os.open(path, os.O_WRONLY)

    def read_until(self, prefix, proc):
        """Reads byte by byte (nothing read ahead) through the line starting with `prefix`; returns the text
        read. Fails when the trainer ends before writing, or closes its console before that line."""
        text = b""
        while not text.endswith(b"\n") or not text.rsplit(b"\n", 2)[-2].startswith(prefix.encode()):
            while self.stand_in is not None and not select.select([self.fd], [], [], 0.1)[0]:
                if proc.poll() is not None:
                    pytest.fail(f"the run ended (status {proc.returncode}) before writing its console")
            c = os.read(self.fd, 1)
            self.close_stand_in()
            if not c:
                proc.wait(timeout=60)
                pytest.fail(f"the run ended (status {proc.returncode}) before '{prefix}':\n{text.decode()[-2000:]}")
            text += c
        return text.decode()

    def read_to_end(self):
        chunks = []
        while True:
            c = os.read(self.fd, 65536)
            if not c:
                return b"".join(chunks).decode()
            chunks.append(c)

    def close_stand_in(self):
        if self.stand_in is not None:
            os.close(self.stand_in)
            self.stand_in = None

    def close(self):
        self.close_stand_in()
        os.close(self.fd)


@pytest.fixture(scope="module")
def mpi_reference(byte_data, tmp_path_factory):
    """The uninterrupted 2-rank run (run_np skips as test_mpi.py does without mpirun or an MPI build)."""
    out = tmp_path_factory.mktemp("mpi_ref")
    run_np(2, data_args(byte_data) + MPI_BASE + ["-o", out], timeout=300)
    return out


@pytest.mark.parametrize("target", ["rank1-SIGTERM", "mpirun-SIGUSR1"])
def test_two_ranks_stop_at_the_same_step_and_resume_is_bit_identical(byte_data, mpi_reference, tmp_path, target):
    """A SIGTERM to rank 1 alone (rank 0 learns it from the vote in the step's reduction), or a SIGUSR1 to
    mpirun, which Open MPI forwards to every rank. Where the step lands: the module's docstring."""
    out, err, fifo = tmp_path / "o", tmp_path / "stderr", tmp_path / "console"
    console_fifo = ConsoleFifo(fifo)
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "CONSOLE_FIFO", "sh", "-c",
           RANK0_STDOUT_TO_FIFO, "sh", str(BIN), "--device", "cpu"] + \
        [str(a) for a in data_args(byte_data) + MPI_BASE + ["-o", out]]
    with open(err, "wb") as e:
        p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=e, text=True,
                             env=dict(os.environ, CONSOLE_FIFO=str(fifo)))
    try:
        console = console_fifo.read_until(step_line(FIRST_SEEN, MPI_STEPS), p)
        ranks = rank_pids(p.pid)
        assert sorted(ranks) == [0, 1], f"trainer processes below mpirun: {ranks}"
        name, sig = target.split("-")
        (os.kill(ranks[1], signal.SIGTERM) if name == "rank1" else p.send_signal(signal.SIGUSR1))
        console += console_fifo.read_to_end()  # lets rank 0 go on to the end of its step
        p.communicate(timeout=300)  # ranks that disagree hang in their collectives: a failure
        status = p.returncode
    finally:
        console_fifo.close()
        if p.poll() is None:
            p.kill()
            p.wait()
    stderr = err.read_text()
    assert status == 128 + int(getattr(signal, sig)), f"mpirun's exit status {status}:\n{stderr[-3000:]}"
    step, tail = interrupted_line(stderr, sig)
    # the lines of a page after FIRST_SEEN's (a step line has over 100 bytes), the one rank 0 is held in,
    # and the step a vote may take
    assert FIRST_SEEN <= step <= FIRST_SEEN + 4096 // 100 + 2 < MPI_STEPS, step
    assert tail == f"wrote {out}/model_{step:08d}.bin; resume with -y 1"
    assert step_line(step, MPI_STEPS) in console and step_line(step + 1, MPI_STEPS) not in console
    assert sorted(f.name for f in out.glob("DONE_*")) == [f"DONE_{step:08d}"]
    assert (out / f"DONE_{step:08d}").read_text().splitlines()[0] == f"step {step} world_size 2"
    for r in (0, 1):
        assert (out / f"state_{step:08d}_{r:05d}.bin").exists()
    p2 = run_np(2, data_args(byte_data) + MPI_BASE + ["-o", out, "-y", 1], timeout=300)
    assert f"resumed from {out}/model_{step:08d}.bin at step {step}" in p2.stdout
    assert_same_run(mpi_reference, out, MPI_STEPS)
    name = f"state_{MPI_STEPS:08d}_00001.bin"
    assert (mpi_reference / name).read_bytes() == (out / name).read_bytes(), f"{name} differs"


# ---------------------------------------------------------------------------------------------
# scripts/slurm_train.sh (with a stand-in srun and scontrol)

@pytest.mark.parametrize("status, requeue, requeued", [(138, "1", True), (143, "1", True), (1, "1", False),
                                                        (0, "1", False), (138, "0", False)])
def test_slurm_script_asks_for_usr1_and_requeues_a_stopped_run(tmp_path, status, requeue, requeued):
    script = REPO / "scripts" / "slurm_train.sh"
    assert "\n#SBATCH --signal=USR1@60\n" in script.read_text()  # every task, not only the batch shell ("B:")
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f'#!/bin/sh\necho "srun $*" >> {log}\nexit {status}\n')
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "scontrol $*" >> {log}\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_SUBMIT_DIR=str(tmp_path),
               SLURM_JOB_ID="4242", REQUEUE=requeue)
    p = subprocess.run(["bash", str(script), "-o", "out", "-y", "1"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == status, p.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("srun --kill-on-bad-exit=1 ") and calls[0].endswith(" -o out -y 1")
    assert calls[1:] == (["scontrol requeue 4242"] if requeued else []), p.stderr
    assert ("requeueing job 4242" in p.stderr) == requeued


@pytest.mark.parametrize("case", ["requeued", "first start", "no record yet", "another fork", "fork= form"])
def test_slurm_script_requeues_a_fork_as_its_resume(tmp_path, case):
    """A fork submitted with REQUEUE=1 (`--fork-from SRC -o FORK`): Slurm reruns the same flags, which the trainer
    refuses once FORK has a checkpoint (and `--fork-from` with `-y 1` is refused too). On a requeued start
    (SLURM_RESTART_COUNT > 0) whose FORK records that very fork, the script passes `-o FORK -y 1` instead: the
    trainer resumes the fork from its newest checkpoint, or forks again from SRC when it has none. A first
    start, a FORK without config.json, or one recording another fork is left to the trainer as typed."""
    script = REPO / "scripts" / "slurm_train.sh"
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f'#!/bin/sh\necho "srun $*" >> {log}\nexit 0\n')
    (bin_dir / "srun").chmod(0o755)
    fork = tmp_path / "fk"
    src = "out/run/model_00000004.bin"
    if case != "no record yet":
        fork.mkdir()
        recorded = "out/other/model_00000008.bin" if case == "another fork" else src
        (fork / "config.json").write_text(json.dumps({"train": {}, "forked_from": {"checkpoint": recorded, "step": 4}}))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_SUBMIT_DIR=str(tmp_path),
               SLURM_JOB_ID="4242", REQUEUE="1", SLURM_RESTART_COUNT="0" if case == "first start" else "1")
    flags = ([f"--fork-from={src}"] if case == "fork= form" else ["--fork-from", src]) + \
        ["-o", str(fork), "--qk-clip", "100", "-x", "8000"]
    p = subprocess.run(["bash", str(script), *flags], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    call = log.read_text().splitlines()[0]
    if case in ("requeued", "fork= form"):
        assert call.endswith(f" -o {fork} --qk-clip 100 -x 8000 -y 1") and "--fork-from" not in call, call
        assert f"requeued fork: resuming {fork} with -y 1" in p.stderr, p.stderr
    else:
        assert call.endswith(" " + " ".join(flags)), call
        assert "-y 1" not in call and "resuming" not in p.stderr, p.stderr
