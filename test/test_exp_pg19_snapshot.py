"""scripts/exp_pg19.sh's snapshot of --results while the runs train: a device command that runs past its
timeout_s can be SIGKILLed without a SIGTERM first (no trap runs), and only the files under its $OUT come
back. So --results must already hold what was trained when the kill comes: each run's NAME.tar.gz (its
metrics, logit statistics, configs and console, no checkpoints), window.md, report.txt and logs.tar.gz,
refreshed every SNAPSHOT_EVERY s (here 1) and each written whole (copied in under a temporary name, then
renamed).

The trainer is $TRAINER, else $TRAIN_GPT2_LS, else the repository's ./train_gpt2_ls; the books are
$SHARED_DATA/pg19 (default ../shared/data/pg19), as in test/test_experiments.py.
"""
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TRAINER", os.environ.get("TRAIN_GPT2_LS", REPO / "train_gpt2_ls")))
SHARED = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))
ENV = dict(os.environ, TRAINER=str(BIN), PYTHON=sys.executable, OMP_NUM_THREADS="1")
SCRIPT = REPO / "scripts" / "exp_pg19.sh"
RUN_FILES = {"metrics.jsonl", "logit_stats.jsonl", "config.json", "config.toml", "console.log"}


def need_trainer_and_books():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls` (or set TRAINER)")
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")


def jsonl_records(data):
    """The records of a JSON Lines text as plot_run.read_jsonl reads it: every line that ends in a newline is
    JSON (an assertion), a last line without one may be partial (cut by the copy) and is left out."""
    lines = data.decode("utf-8").split("\n")
    return [json.loads(line) for line in lines[:-1] if line.strip()]


def snapshot_steps(archive, name):
    """The newest training step in the snapshot's NAME.tar.gz (None while it is missing or being renamed)."""
    try:
        with tarfile.open(archive) as tar:
            data = tar.extractfile(f"{name}/metrics.jsonl").read()
    except (FileNotFoundError, KeyError, tarfile.TarError, EOFError):
        return None
    steps = [r["step"] for r in jsonl_records(data) if "loss" in r]
    return max(steps) if steps else None


def test_exp_pg19_sigkill_leaves_a_snapshot_in_results(tmp_path):
    """SIGKILL to the script's process group (the script, its trainers and its tee; a snapshot being written has a
    group of its own and ends by itself) while the first of two runs trains: --results holds the snapshot, refreshed while it trained (a later one has more steps than the
    first seen), with parseable content: the run's archive with its metrics (JSON lines with a step), config and
    console and no checkpoint, window.md with its row, the report so far (its header, then the snapshot's line),
    and logs.tar.gz with the run's start event; at most 8 files of at most 16 MiB, what comes back from the GPU
    machine. A .part file an earlier start's kill left there is removed at the start, with the other files of
    that start. (The script before the snapshot left --results empty here: it copied its files only at its end,
    on an abort or in its INT/TERM trap.)"""
    need_trainer_and_books()
    out, res = tmp_path / "w", tmp_path / "res"
    res.mkdir()
    (res / ".local.tar.gz.part").write_text("cut off by a kill of an earlier start")
    (res / "notes.txt").write_text("not the script's")
    env = dict(ENV, SNAPSHOT_EVERY="1")
    # the paper's window (two variants one after another, --budget): 120 s is far past the kill below
    proc = subprocess.Popen(["bash", str(SCRIPT), "--smoke", "--budget", "120", "--parallel", "0", "--variants",
                             "local mhsa_qknorm", "--out", str(out), "--results", str(res), "--source",
                             str(SHARED / "pg19")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = last = None
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            steps = snapshot_steps(res / "local.tar.gz", "local")
            if steps is not None:
                first = steps if first is None else first
                last = steps
                if last > first and (res / "window.md").exists():
                    break
            time.sleep(0.2)
        assert proc.poll() is None, f"the script ended ({proc.returncode}) before the kill: {proc.stderr.read()[-3000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
    assert first is not None, f"no snapshot of run local appeared in {res} within 120 s: {sorted(os.listdir(res))}"
    assert last > first, f"the snapshot was not refreshed: step {first} then {last}"
    assert f"== {res}: removed the files of an earlier start: .local.tar.gz.part" in stdout, stdout[-3000:]

    files = sorted(f.name for f in res.iterdir() if not f.name.endswith(".part"))  # (a kill mid-copy leaves one)
    assert {"local.tar.gz", "window.md", "report.txt", "logs.tar.gz", "notes.txt"} <= set(files), files
    assert len(list(res.iterdir())) <= 8 and all(f.stat().st_size <= 16 << 20 for f in res.iterdir())
    with tarfile.open(res / "local.tar.gz") as tar:
        names = set(tar.getnames())
        beside = {"local.log", "local.args", "local.build"}  # the launcher's log, the run's settings and trainer
        assert names <= {f"local/{f}" for f in RUN_FILES | beside}, names  # never a checkpoint
        assert {"local/metrics.jsonl", "local/config.json", "local/console.log"} <= names, names
        metrics = jsonl_records(tar.extractfile("local/metrics.jsonl").read())
        config = json.loads(tar.extractfile("local/config.json").read())
    train = [r for r in metrics if "loss" in r]
    assert train and all(isinstance(r["step"], int) for r in train), metrics[:3]
    assert max(r["step"] for r in train) >= last
    assert config["model"]["global_heads"] == 0  # the all-local variant
    assert "| local |" in (res / "window.md").read_text()
    report = (res / "report.txt").read_text()
    assert report.startswith("== exp_pg19 ") and "== training: 2 run(s) one after another" in report, report[:2000]
    assert report.rstrip("\n").splitlines()[-1].startswith("== snapshot at "), report[-2000:]
    with tarfile.open(res / "logs.tar.gz") as tar:
        events = tar.extractfile("logs/events.tsv").read().decode()
    assert "\tstart local" in events, events
    assert (res / "notes.txt").read_text() == "not the script's"


def test_exp_pg19_bad_snapshot_period_is_refused(tmp_path):
    """SNAPSHOT_EVERY must be whole seconds (0: no snapshot): another value is one error line before anything
    is written."""
    need_trainer_and_books()
    out = tmp_path / "o"
    p = subprocess.run(["bash", str(SCRIPT), "--smoke", "--out", str(out), "--source", str(SHARED / "pg19")],
                       cwd=REPO, env=dict(ENV, SNAPSHOT_EVERY="1m"), capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "error: SNAPSHOT_EVERY=1m must be a whole number of seconds" in p.stderr, p.stderr
    assert not out.exists()


def snapshot_functions():
    """exp_pg19.sh's snapshot_start, snapshot_running and snapshot_stop, as the script defines them (the text
    from `snapshot_start() {` to the `trap cleanup` line)."""
    text = SCRIPT.read_text()
    start, end = text.index("snapshot_start() {"), text.index("trap cleanup INT TERM")
    return text[start:end]


def test_exp_pg19_snapshot_stop_ends_every_process_of_the_snapshot(tmp_path):
    """snapshot_stop ends the snapshot and every process it started, also one started while it is being
    stopped or detached from it (here a snapshot that starts copies and detached sleepers without pause): none
    is left running, no .part file stays, and the stop prints nothing (no job "Killed" line). The test runs the
    script's own functions with a stand-in snapshot body; the earlier stop (kill the processes it listed) left
    copies that started after the listing running."""
    big = tmp_path / "big"
    big.write_bytes(os.urandom(1 << 20))
    res = tmp_path / "results"
    res.mkdir()
    tag = f"snapstop{os.getpid()}"
    prog = f"""set -euo pipefail
now() {{ date +%s; }}
SNAPSHOT_EVERY=1 SNAP_AT=0 SNAP_PID="" RESULTS={res}
snapshot() {{
  while :; do
    ( exec -a {tag} sleep 30 & )
    cp {big} "$RESULTS/.x.part"; cp {big} "$RESULTS/.y.part"
  done
}}
{snapshot_functions()}
for i in 1 2 3 4 5; do
  snapshot_start
  snapshot_running || {{ echo "no snapshot running after snapshot_start" >&2; exit 3; }}
  sleep 0.$((RANDOM % 5 + 1))
  snapshot_stop
  snapshot_running && {{ echo "a snapshot still running after snapshot_stop" >&2; exit 4; }}
  ls -A "$RESULTS"
done
echo stopped
"""
    # outputs to files (a sleeper left running would hold a pipe open); whatever is left is killed at the end,
    # the snapshot's own process groups included (a stop that failed leaves them running)
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(["bash", "-c", prog], stdout=fo, stderr=fe, text=True, start_new_session=True)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            time.sleep(0.2)
            left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()
            subprocess.run(["pkill", "-KILL", "-f", tag])
            subprocess.run(["pkill", "-KILL", "-f", str(big)])  # copies of a snapshot that was not stopped
    p = subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())
    assert p.returncode == 0 and p.stdout == "stopped\n", (p.stdout, p.stderr)
    assert p.stderr == "", p.stderr
    assert not left, f"processes of a stopped snapshot still run: {left}"
    assert not list(res.iterdir()), sorted(os.listdir(res))
