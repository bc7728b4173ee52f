#!/usr/bin/env python3
"""Chaos soak of train_gpt2_ls's checkpoints and resume (issue 55; docs/reliability.md "Chaos soak").

A reference run of N steps on a tiny model, uninterrupted; then episodes of the same run in fresh
output directories, each driven by a loop that starts the trainer with `-y 1`, injects one fault per
round and starts it again, until the run reaches step N. The faults:

  kill    SIGKILL                     term   SIGTERM          usr1   SIGUSR1
  int     SIGINT                      int2   SIGINT twice     disk   a full disk (a tmpfs shrunk under
                                                                     the run, or the file-size limit)
  trunc   truncate the newest checkpoint's model or state file while the trainer is stopped
  flip    flip one byte of the newest checkpoint's model or state file while stopped
  undone  delete the newest DONE_ marker while stopped

Half the episodes keep every checkpoint, half the newest 2 (--keep-checkpoints 2). A signal lands
after a random time (up to a little more than a whole run, so some land before the first step, some
after the last) or at the first temporary file of a checkpoint write seen after a random time
(mid-write). A damage fault is followed by a random SIGKILL. After every exit:

- the exit is one the fault allows (128 + signal after a clean stop, killed by the signal before the
  first step or by a second SIGINT, 0 when the run had finished), and stderr has no `error:` line,
  or the fault is one the trainer cannot recover from alone (a full disk; every checkpoint damaged)
  and stderr ends with one `error:` line naming the action, which the soak then takes (frees the disk,
  restores the damaged files) as a user's script would;
- a resume starts at the newest complete checkpoint the soak did not damage; a step the trainer
  retired (its marker renamed DAMAGED_: one -y 1 fell back past) is one the soak damaged;
- the newest checkpoint the trainer reported complete and the soak did not damage is still complete
  with the same bytes (or, with --keep-checkpoints 2, was deleted while two newer ones were marked
  complete: the soak may damage those later); every complete checkpoint of a step the reference has
  equals the reference's.

In a quarter of the rounds (--readers) a reader runs beside the trainer, one of:
  eval      `--eval-only -e` of the newest complete checkpoint the soak did not damage
  generate  generate_gpt2_ls of that checkpoint
  export    scripts/export_hf.py of the run directory: its newest complete checkpoint that reads; the
            exported weights must equal an export of the reference's checkpoint of that step (when the
            reference wrote one: a clean stop checkpoints steps between)
  fork      `--fork-from` that checkpoint into a new directory, trained to step N: its final model and
            state files must equal the reference's (under `mpirun -np 2` with --ranks 2); not of step N
            itself, where a fork has nothing to train and is refused
It must print its result, or, when the trainer pruned the file meanwhile, end with one error line that
does not call it damaged; never a crash, never a damaged or partial file. --ranks 2 runs everything
under `mpirun -np 2`.

At step N the final model and state files, metrics.jsonl and logit_stats.jsonl (the timing fields
masked) must equal the reference's byte for byte, and no temporary file may be left.

Modes: --quick (about 40 interruptions; `make test` runs it through test/test_chaos_soak.py), --long
(at least 500 interruptions), or --rounds R. A failure prints the seed that reproduces it
(`--seed S`). Exit status 0 when every check held, 1 otherwise. Counts go to stdout (and --json FILE).
"""
import argparse
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))
from run_helpers import BIN, REPO, TINY, byte_data_in, data_args  # noqa: E402

GEN = Path(os.environ.get("GENERATE_GPT2_LS", REPO / "generate_gpt2_ls"))
EXPORT = REPO / "scripts" / "export_hf.py"
READERS = ["eval", "generate", "export", "fork"]
EXPORTED = re.compile(r"^exported (\S+) \(step (\d+)\) to ", re.M)

STEPS = 60
# Constant LR, validation every 5, a sample every 2, statistics every step, a checkpoint every 3 steps.
RUN = TINY + ["-k", "constant", "-u", "0", "-l", "2e-3", "-v", "5", "-m", "2", "-s", "0", "--logit-stats-every", "1",
              "-x", str(STEPS), "-n", "3"]
# --device cuda (the emulated CUDA build, TRAIN_GPT2_LS=build/emu/train_gpt2_ls): head size 32, which
# the CUDA backend supports (TINY's is 8).
CUDA_MODEL = ["--channels", "64", "--heads", "2"]
SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "usr1": signal.SIGUSR1, "int": signal.SIGINT,
           "int2": signal.SIGINT}
KINDS = ["kill", "term", "usr1", "int", "int2", "disk", "trunc", "flip", "undone"]
WEIGHTS = [4, 2, 2, 2, 2, 2, 1, 1, 1]
# With 2 ranks under mpirun: kill = SIGKILL to every process of the job (a lost node), kill1 = SIGKILL
# to one rank, term1 = SIGTERM to one rank, usr1 / term / killmpi = SIGUSR1 / SIGTERM / SIGKILL to
# mpirun (after which Open MPI 4's ranks go on alone; the soak waits for them as a requeued job would
# wait for the directory's lock).
KINDS_MPI = ["kill", "kill1", "term1", "usr1", "term", "killmpi", "disk", "trunc", "flip", "undone"]
WEIGHTS_MPI = [2, 2, 2, 2, 1, 1, 2, 1, 1, 1]
MPIRUN = shutil.which("mpirun") or "mpirun"
JOB_ENDED = re.compile(r"Primary job\s+terminated|mpirun noticed that process rank")  # Open MPI 4's job-end lines
TIMING = re.compile(r'"(time|ms|tokens_per_s|mfu)":[^,}]*')  # mfu: --device cuda
DONE = re.compile(r"DONE_(\d{8})")
REPORTED = re.compile(r"^checkpoint of step (\d+)", re.M)
INTERRUPTED = re.compile(r"^interrupted by (SIG\w+) at step (\d+): wrote", re.M)
RESUMED = re.compile(r"^\s*resumed from \S+ at step (\d+)", re.M)
RETIRED = re.compile(r"^note: -y 1: the damaged checkpoint of step (\d+) is left behind", re.M)


class SoakFailure(Exception):
    pass


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def ckpt_files(out, step, ranks):
    return [out / f"model_{step:08d}.bin"] + [out / f"state_{step:08d}_{r:05d}.bin" for r in range(ranks)]


def marker_step_line(path):
    """A file's bytes; of a DONE_ marker only its first line ("step N world_size W"): its settings fingerprint
    comes from config.json, whose --keep-checkpoints an episode sets otherwise than the reference."""
    data = path.read_bytes()
    return data.split(b"\n", 1)[0] if DONE.fullmatch(path.name) else data


def complete_steps(out):
    return sorted(int(m.group(1)) for p in out.iterdir() if (m := DONE.fullmatch(p.name)))


def temporaries(out):
    return sorted(p.name for p in out.iterdir() if ".tmp." in p.name)


def masked(path):
    """The file's text with the timing fields' values replaced by '_'."""
    return TIMING.sub(lambda m: f'"{m.group(1)}":_', Path(path).read_text()) if Path(path).exists() else None


def default_sigint():
    """The trainer's SIGINT as a foreground job has it (a script started with `cmd &` inherits it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Disk:
    """The episodes' output directories: on a tmpfs the soak mounts (root) and shrinks for a full disk,
    else in the work directory with the file-size limit (RLIMIT_FSIZE) for a full disk."""

    BIG = 256 << 20

    def __init__(self, work, mode):
        self.path = work / "fs"
        self.path.mkdir()
        self.tmpfs = False
        if mode in ("auto", "tmpfs") and os.geteuid() == 0 and shutil.which("mount"):
            p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.BIG},mode=0755", "tmpfs", str(self.path)],
                               capture_output=True, text=True)
            self.tmpfs = p.returncode == 0
        if mode == "tmpfs" and not self.tmpfs:
            raise SystemExit("error: --disk tmpfs needs to mount a tmpfs (root); use --disk fsize")

    def used(self):
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def shrink(self, room):
        subprocess.run(["mount", "-o", f"remount,size={self.used() + room}", str(self.path)], check=True)

    def free(self):
        if self.tmpfs:
            subprocess.run(["mount", "-o", f"remount,size={self.BIG}", str(self.path)], check=True)

    def close(self):
        if self.tmpfs:
            subprocess.run(["umount", "-l", str(self.path)], check=False)


class Trainer:
    """One trainer process in its own process group (killed as a group when the soak ends)."""

    def __init__(self, args, log, fsize=None, ranks=1, device="cpu"):
        def setup():
            default_sigint()
            if fsize is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        self.stdout_path, self.stderr_path = log.with_suffix(".out"), log.with_suffix(".err")
        with open(self.stdout_path, "wb") as o, open(self.stderr_path, "wb") as e:
            mpi = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []
            self.p = subprocess.Popen(mpi + [str(BIN), "--device", device] + args, cwd=REPO, stdout=o, stderr=e,
                                      preexec_fn=setup, start_new_session=True)

    def wait(self, timeout=120):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise SoakFailure(f"the trainer did not end within {timeout} s")

    def wait_job(self, timeout, finalize_hang_s):
        """mpirun's exit status, and whether mpirun was killed for hanging in its own finalize: alive for
        finalize_hang_s after its last rank ended (Open MPI 4.1 with PMIx 4.2 deadlocks in
        PMIx_server_finalize now and then after a rank was killed: docs/reliability.md). It is killed as a
        scheduler's time limit would (the ranks have ended, so no file is being written). Ranks never
        seen (no rank process and no output yet), or alive past timeout: a failure, as wait's."""
        start, seen, gone_since = time.monotonic(), False, None
        while self.p.poll() is None:
            now = time.monotonic()
            if now - start > timeout:
                self.kill_group()
                raise SoakFailure(f"the trainer did not end within {timeout} s")
            if self.ranks():
                seen, gone_since = True, None
            elif seen or self.stdout_path.stat().st_size > 0 or JOB_ENDED.search(self.stderr()):
                seen = True  # its ranks have run: they wrote a header, or mpirun said the job ended
                gone_since = gone_since or now
                if now - gone_since > finalize_hang_s:
                    self.kill_group()
                    return self.p.wait(), True
            time.sleep(0.2)
        return self.p.returncode, False

    def session(self, comm=None):
        """The processes of this start's session (mpirun puts each rank in a process group of its own),
        those named `comm` when given, less the session leader."""
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != self.p.pid:
                try:
                    stat = (d / "stat").read_text()
                except OSError:
                    continue
                name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
                if int(rest[3]) == self.p.pid and (comm is None or name == comm):
                    pids.append(int(d.name))
        return sorted(pids)

    def ranks(self):
        """The trainer processes mpirun started (their name may read "exe": found by their program)."""
        def program(pid):
            try:
                return os.readlink(f"/proc/{pid}/exe")
            except OSError:
                return None
        return [pid for pid in self.session() if program(pid) == str(BIN.resolve())]

    def kill_group(self):
        """SIGKILL to the trainer and every process of its session (mpirun's ranks)."""
        for pid in [self.p.pid] + self.session():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait()

    def stdout(self):
        return self.stdout_path.read_text(errors="replace")

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")


class Soak:
    def __init__(self, opts, work):
        self.opts, self.work = opts, work
        self.rng = random.Random(opts.seed)
        self.data = byte_data_in(self.mkdir(work / "data"))
        self.args = data_args(self.data) + RUN + (CUDA_MODEL if opts.device == "cuda" else [])
        self.disk = Disk(work, opts.disk)
        self.running = None
        self.readers = []
        self.ranks = opts.ranks
        self.kinds, self.weights = (KINDS, WEIGHTS) if self.ranks == 1 else (KINDS_MPI, WEIGHTS_MPI)
        self.ref_exports = {}  # step -> model.safetensors bytes of the reference's checkpoint exported
        self.reader_index = 0
        self.counts = {"ranks": self.ranks,
                       "readers": {k: 0 for r in READERS for k in (r, r + " (file pruned meanwhile)")},
                       "interruptions": {k: 0 for k in self.kinds}, "finished_before_fault": {k: 0 for k in self.kinds},
                       "mid_write_kills": 0, "starts": 0, "resumes": 0, "fresh_starts": 0,
                       "damaged_newest_recoveries": 0, "user_actions": {}, "episodes": 0,
                       "episodes_byte_identical": 0, "mpirun_finalize_hangs": 0}

    @staticmethod
    def mkdir(p):
        p.mkdir(parents=True)
        return p

    # -- the reference --------------------------------------------------------------------------

    def reference(self):
        out = self.work / "ref"
        t = Trainer(self.args + ["-o", str(out), "--keep-checkpoints", "0"], self.work / "ref", ranks=self.ranks,
                    device=self.opts.device)
        start = time.monotonic()
        if t.wait() != 0:
            raise SoakFailure(f"the reference run failed:\n{t.stderr()}")
        self.ref_wall = time.monotonic() - start
        self.ref = out
        self.ref_ckpt = {s: [sha(f) for f in ckpt_files(out, s, self.ranks)] for s in complete_steps(out)}
        self.ref_sizes = [f.stat().st_size for f in ckpt_files(out, STEPS, self.ranks)]

    # -- one episode: a run driven to step N through faults ---------------------------------------

    def episode(self, index, budget):
        out = self.disk.path / f"run{index}"
        self.current = out
        self.counts["episodes"] += 1
        # step -> hashes; step -> original bytes; half the episodes prune to the newest 2 checkpoints, so
        # that readers meet files deleted under them
        st = {"reported": {}, "damaged": {}, "rounds": 0, "keep": self.rng.choice([0, 2])}
        while True:
            st["rounds"] += 1
            if st["rounds"] > 400:
                raise SoakFailure("the run made no progress in 400 rounds")
            kind = self.rng.choices(self.kinds, self.weights)[0] if budget() else None
            if self.round(out, kind, st):
                break
        self.check_final(out)
        self.counts["episodes_byte_identical"] += 1
        shutil.rmtree(out)  # the tmpfs holds one episode at a time

    def round(self, out, kind, st):
        """One start of the trainer with fault `kind` (None: none, let it finish). Returns whether the run
        reached step N."""
        if kind in ("trunc", "flip", "undone") and not self.damage(out, kind, st):
            kind = "kill"  # nothing complete to damage yet
        if kind == "disk" and self.ranks > 1 and not self.disk.tmpfs:
            kind = "kill"
        fsize = None
        if kind == "disk":
            room = self.rng.randrange(0, sum(self.ref_sizes) + 64 * 1024)
            # (with mpirun the file-size limit would hit mpirun's own shared-memory files: tmpfs only)
            if self.disk.tmpfs and (self.opts.disk != "auto" or self.ranks > 1 or self.rng.random() < 0.5):
                self.disk.shrink(room)
            else:
                fsize = max(room, 1)
        expect_resume = self.newest_usable(out, st) if out.exists() else None
        t = Trainer(self.args + ["-o", str(out), "-y", "1", "--keep-checkpoints", str(st["keep"])], self.work / "last",
                    fsize, self.ranks, self.opts.device)
        self.running = t
        self.counts["starts"] += 1
        reader = self.start_reader(out, st) if self.rng.random() < self.opts.readers else None
        left_tmp = False
        if kind in SIGNALS or kind in ("trunc", "flip", "undone", "kill1", "term1", "killmpi"):
            sig = SIGNALS.get(kind, signal.SIGTERM if kind == "term1" else signal.SIGKILL)
            target = "rank" if kind in ("kill1", "term1") else "main" if self.ranks == 1 or kind != "kill" and \
                kind in SIGNALS or kind == "killmpi" else "group"
            left_tmp = self.fire(t, out, sig, twice=kind == "int2", target=target)
        if self.ranks > 1:
            rc, hung = t.wait_job(180, 30)
            if hung:
                self.counts["mpirun_finalize_hangs"] += 1
                self.log(f"{out.name} round {st['rounds']}: mpirun hung in its finalize after its ranks ended; killed")
        else:
            rc = t.wait(timeout=180)
        if self.ranks > 1:
            deadline = time.monotonic() + 30
            while t.session() and time.monotonic() < deadline:
                time.sleep(0.01)  # the ranks mpirun was ending
            if t.session():
                t.kill_group()
                raise SoakFailure(f"processes of the job outlived mpirun by 30 s (fault {kind})")
        self.running = None
        self.log(f"{out.name} round {st['rounds']}: {kind}, exit {rc}")
        finished = self.check_exit(t, kind, rc, out, st)
        if kind == "disk":
            self.disk.free()  # also when the run did not hit the limit
        if kind is not None:
            self.counts["finished_before_fault" if finished and rc == 0 else "interruptions"][kind] += 1
        if kind == "kill" and rc == -signal.SIGKILL and left_tmp:
            self.counts["mid_write_kills"] += 1
        if reader is not None:
            self.check_reader(*reader)
        self.check_resume(t, expect_resume, out)
        self.check_checkpoints(t, out, st)
        return finished

    def start_reader(self, out, st):
        """A reader beside the trainer just started, of the newest complete checkpoint the soak did not
        damage (eval, generate, fork) or of the run directory (export). Returns (kind, process, model
        path, its step, output directory) or None."""
        if not out.exists():
            return None
        self.forget_repaired(out, st)
        ok = [s for s in complete_steps(out) if s not in st["damaged"]]
        if not ok:
            return None
        model = out / f"model_{ok[-1]:08d}.bin"
        self.reader_index += 1
        dest = self.work / "readers" / f"r{self.reader_index}"
        dest.parent.mkdir(exist_ok=True)
        kind = self.rng.choice(READERS if ok[-1] < STEPS else [k for k in READERS if k != "fork"])
        if kind == "eval":
            cmd = [str(BIN), "--device", "cpu", "--eval-only", "-e", str(model), "-m", "1", "--threads", "1"]
        elif kind == "generate":
            cmd = [str(GEN), "--device", "cpu", "-e", str(model), "-n", "4", "--print-ids", "--threads", "1"]
        elif kind == "export":
            cmd = [sys.executable, str(EXPORT), str(out), str(dest)]
        else:
            mpi = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(self.ranks)] if self.ranks > 1 else []
            cmd = mpi + [str(BIN), "--device", self.opts.device, "--fork-from", str(model), "-o", str(dest)]
        p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        self.readers.append(p)
        return kind, p, model, ok[-1], dest

    def ref_export(self, step):
        """model.safetensors of the reference's checkpoint of `step` exported (cached)."""
        if step not in self.ref_exports:
            dest = self.work / "ref_exports" / str(step)
            p = subprocess.run([sys.executable, str(EXPORT), str(self.ref / f"model_{step:08d}.bin"), str(dest)],
                               cwd=REPO, capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                raise SoakFailure(f"export of the reference's step {step} failed:\n{p.stderr}")
            self.ref_exports[step] = (dest / "model.safetensors").read_bytes()
            shutil.rmtree(dest)
        return self.ref_exports[step]

    def check_reader_result(self, kind, out, step, dest):
        """What a reader that ended with 0 made equals what the reference's checkpoint makes (export: the
        reference's checkpoint of the step exported when the reference has one)."""
        if kind == "export":
            m = EXPORTED.search(out)
            if not m:
                raise SoakFailure(f"export reader: no `exported ... (step s)` line:\n{out}")
            s = int(m.group(2))
            if s < step:
                raise SoakFailure(f"export reader exported step {s}; the newest complete one was {step} at its start")
            # (a step of a clean stop, between the every-3-steps ones, has no reference to compare with)
            if s in self.ref_ckpt and (dest / "model.safetensors").read_bytes() != self.ref_export(s):
                raise SoakFailure(f"export reader: step {s}'s exported weights differ from the reference's")
        elif kind == "fork":
            if f"done: step {STEPS}" not in out:
                raise SoakFailure(f"fork reader: no `done: step {STEPS}` line:\n{out[-2000:]}")
            for f in ckpt_files(self.ref, STEPS, self.ranks):
                if not (dest / f.name).exists() or (dest / f.name).read_bytes() != f.read_bytes():
                    raise SoakFailure(f"fork reader from step {step}: final {f.name} differs from the reference's")
            if temporaries(dest):
                raise SoakFailure(f"fork reader: temporary files left: {temporaries(dest)}")

    def check_reader(self, kind, p, model, step, dest):
        """A reader ends with its result, or, when the file is gone (pruned meanwhile), with one error
        line that does not call it damaged; never a crash, never a damaged or partial file."""
        try:
            out, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            raise SoakFailure(f"{kind} reader of {model} did not end within 180 s")
        self.readers.remove(p)
        lines = [ln for ln in err.strip().splitlines() if ln.startswith("error")]
        if self.ranks > 1:  # under mpirun each rank that fails says it: the same line once per rank is one error
            lines = list(dict.fromkeys(lines))
        if p.returncode == 0 and not lines and out.strip():
            self.check_reader_result(kind, out, step, dest)
            shutil.rmtree(dest, ignore_errors=True)
            self.counts["readers"][kind] += 1
        elif p.returncode == 1 and len(lines) == 1 and not model.exists() and \
                not any(w in lines[0] for w in ("damaged", "checksum", "truncated", "corrupt")):
            shutil.rmtree(dest, ignore_errors=True)
            self.log(f"{kind} reader of {model.name}: {lines[0]}")
            self.counts["readers"][kind + " (file pruned meanwhile)"] += 1
        else:
            raise SoakFailure(f"{kind} reader of {model} (beside the trainer) exited {p.returncode}:\n{err}")

    def fire(self, t, out, sig, twice, target="main"):
        """Sends `sig` after a random time, or at the first temporary file seen after a random time.
        Returns whether a temporary file existed when it landed."""
        horizon = self.ref_wall * (1.3 if self.rng.random() < 0.1 else 0.9)
        at_write = self.rng.random() < 0.4
        delay = self.rng.uniform(0, horizon * (0.7 if at_write else 1.0))
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and t.p.poll() is None:
            time.sleep(min(0.002, max(0.0, deadline - time.monotonic())))
        if at_write:
            end = time.monotonic() + horizon
            while t.p.poll() is None and time.monotonic() < end:
                if out.exists() and temporaries(out):
                    break
        if t.p.poll() is not None:
            return False
        if target == "group":  # SIGKILL to every process of the job, until none is left
            end = time.monotonic() + 5
            while time.monotonic() < end:
                pids = [pid for pid in [t.p.pid] + t.session() if pid != t.p.pid or t.p.poll() is None]
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                time.sleep(0.001)
        elif target == "rank":
            ranks = t.ranks()
            if not ranks:
                return False  # not started yet, or already ended
            try:
                os.kill(self.rng.choice(ranks), sig)
            except ProcessLookupError:
                return False
        else:
            t.p.send_signal(sig)
        left = out.exists() and bool(temporaries(out))
        if twice:
            time.sleep(self.rng.uniform(0, 0.02))
            if t.p.poll() is None:
                t.p.send_signal(sig)
        return left

    def damage(self, out, kind, st):
        """Damages the newest complete checkpoint while the trainer is stopped; False when there is none."""
        steps = complete_steps(out) if out.exists() else []
        if not steps:
            return False
        s = steps[-1]
        if kind == "undone":
            victim = out / f"DONE_{s:08d}"
        else:
            victim = self.rng.choice(ckpt_files(out, s, self.ranks))
        data = victim.read_bytes()
        if kind == "undone":
            victim.unlink()
            bad = None
            self.log(f"deleted {victim.name}")
        elif kind == "trunc":
            n = self.rng.randrange(0, len(data))
            bad = data[:n]
            self.log(f"truncated {victim.name} to {n} of {len(data)} bytes")
        else:
            i, bit = self.rng.randrange(len(data)), self.rng.randrange(8)
            bad = data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1:]
            self.log(f"flipped bit {bit} of byte {i} of {victim.name} ({len(data)} bytes)")
        if bad is not None:
            victim.write_bytes(bad)
        original = st["damaged"].get(s, {}).get(victim.name, (data, None))[0]
        st["damaged"].setdefault(s, {})[victim.name] = (original, None if bad is None else hashlib.sha256(bad).digest())
        return True

    @staticmethod
    def forget_repaired(out, st):
        """Drops the damage the trainer has since replaced (a file written again, a marker back)."""
        for s in list(st["damaged"]):
            files = st["damaged"][s]
            for name in list(files):
                p, bad = out / name, files[name][1]
                if (p.exists() if bad is None else not p.exists() or hashlib.sha256(p.read_bytes()).digest() != bad):
                    del files[name]
            if not files:
                del st["damaged"][s]

    def log(self, text):
        with open(self.work / "events.log", "a") as f:
            f.write(text + "\n")

    def newest_usable(self, out, st):
        """The step a resume must start at: the newest complete checkpoint the soak did not damage
        (0 when none; a step whose marker the soak deleted is not complete)."""
        self.forget_repaired(out, st)
        ok = [s for s in complete_steps(out) if s not in st["damaged"]]
        return ok[-1] if ok else 0

    # -- checks after each exit -------------------------------------------------------------------

    def check_exit(self, t, kind, rc, out, st):
        """Checks the exit status and stderr against the fault; takes the action an error names.
        Returns whether the run reached step N."""
        err = t.stderr()
        errors = [ln for ln in err.splitlines() if ln.startswith("error")]
        if self.ranks > 1:  # an argument error (no rank prefix) is said once by each rank: one error
            errors = list(dict.fromkeys(errors))
        if "done: step" in t.stdout() and rc == 0:
            if errors:
                raise SoakFailure(f"exit 0 with an error line:\n{err}")
            return True
        if rc == 1 and self.ranks > 1 and not errors:
            return self.check_mpi_exit(t, kind, rc, err, errors)  # mpirun ended the job
        if rc == 1:
            lines = [ln for ln in err.strip().splitlines() if ln.strip()]
            if self.ranks > 1:  # one line per failing rank ("error: rank R of N: ..."), then mpirun's
                if not 1 <= len(errors) <= self.ranks or len(set(e.split(":")[1] for e in errors)) != len(errors):
                    raise SoakFailure(f"exit 1 without one `error: rank R` line per failing rank (fault {kind}):\n{err}")
                lines = errors[-1:] if all(e.split(":", 2)[2].split(";")[-1] == errors[0].split(":", 2)[2].split(
                    ";")[-1] for e in errors) else []
            if len(errors) != 1 and self.ranks == 1 or not lines or not lines[-1].startswith("error: "):
                raise SoakFailure(f"exit 1 without exactly one final `error:` line (fault {kind}):\n{err}")
            line = lines[-1]
            if kind == "disk" and ("ulimit -f" in line or "free disk space" in line):
                self.disk.free()  # the user frees space (the next start has no file-size limit)
                self.action("free disk space")
                return False
            # the trainer's two ways of asking for the files back: a checkpoint that console.log records
            # is gone (llmc/app/output_intent.h), every complete checkpoint damaged (llmc/io/checkpoint_dir.h)
            if ("restore the files" in line or "restore them from a copy" in line) and st["damaged"]:
                for s, files in st["damaged"].items():
                    for name, (data, _) in files.items():
                        (out / name).write_bytes(data)
                st["damaged"].clear()
                self.action("restore damaged checkpoint files")
                return False
            raise SoakFailure(f"an error the fault ({kind}) does not explain, or one whose advice the soak cannot "
                              f"follow:\n{err}")
        if self.ranks > 1:
            return self.check_mpi_exit(t, kind, rc, err, errors)
        if errors:
            raise SoakFailure(f"exit {rc} with an error line (fault {kind}):\n{err}")
        sig = SIGNALS.get(kind, signal.SIGKILL) if kind != "disk" else None
        allowed = {0}
        if sig is not None:
            allowed |= {-sig, 128 + sig if sig != signal.SIGKILL else -sig}
        if rc not in allowed:
            raise SoakFailure(f"exit status {rc} after fault {kind} (allowed: {sorted(allowed)}):\n{err}")
        if rc > 128:
            m = INTERRUPTED.findall(err)
            if len(m) != 1 or m[0][0] != signal.Signals(rc - 128).name:
                raise SoakFailure(f"exit {rc} without one matching `interrupted by` line:\n{err}")
        if rc == 0:
            raise SoakFailure(f"exit 0 without the `done:` line:\n{t.stdout()[-2000:]}\n{err}")
        return False

    def check_mpi_exit(self, t, kind, rc, err, errors):
        """mpirun's exit: not 0 (the run did not finish), no trainer `error:` line; a clean stop (a
        signal to one rank or SIGUSR1 to mpirun) has one `interrupted by` line."""
        if rc == 0:
            raise SoakFailure(f"exit 0 without the `done:` line:\n{t.stdout()[-2000:]}\n{err}")
        if errors:
            raise SoakFailure(f"exit {rc} with an error line (fault {kind}):\n{err}")
        if len(INTERRUPTED.findall(err)) > 1:
            raise SoakFailure(f"more than one `interrupted by` line:\n{err}")
        return False

    def action(self, what):
        self.counts["user_actions"][what] = self.counts["user_actions"].get(what, 0) + 1

    def check_resume(self, t, expect, out):
        out_text = t.stdout()
        m = RESUMED.search(out_text)
        if "warning: checkpoint step" in t.stderr():
            self.counts["damaged_newest_recoveries"] += 1
        if m:
            self.counts["resumes"] += 1
            if expect is not None and int(m.group(1)) != expect:
                raise SoakFailure(f"resumed at step {m.group(1)}, but the newest usable checkpoint is step {expect}")
        elif "step " in out_text and "/%d | loss" % STEPS in out_text:
            self.counts["fresh_starts"] += 1
            if expect:
                raise SoakFailure(f"started at step 0 while checkpoint {expect} was usable:\n{out_text[:2000]}")

    def check_checkpoints(self, t, out, st):
        if not out.exists():
            return
        # a step -y 1 fell back past is retired (DONE_ renamed DAMAGED_, llmc/io/checkpoint_dir.h): no longer
        # the run's, and only a checkpoint the soak damaged may be; checked before a repair is forgotten. Seen
        # by its marker, or by the trainer's note (the run may have written the step again, which removes the
        # marker, and been killed before marking it complete)
        retired = {int(f.name[len("DAMAGED_"):]): f.name for f in out.glob("DAMAGED_*")}
        retired.update({int(m): "its note" for m in RETIRED.findall(t.stderr())})
        for s, how in sorted(retired.items()):
            if s in st["reported"]:
                if s not in st["damaged"]:
                    raise SoakFailure(f"checkpoint {s} was retired ({how}), but the soak did not damage it")
                del st["reported"][s]
        self.forget_repaired(out, st)
        # reported complete: the lines, and every marked step seen (a killed mpirun loses rank 0's lines)
        complete = complete_steps(out)
        reported = [int(s) for s in REPORTED.findall(t.stdout())] + \
            [int(s) for _, s in INTERRUPTED.findall(t.stderr())] + [s for s in complete if s not in st["damaged"]]
        for s in reported:
            if s not in complete:
                continue  # pruned after it, or never marked (a kill between the line and ... ) is checked below
            st["damaged"].pop(s, None)  # written again: the soak's damage is gone
            st["reported"][s] = [sha(f) for f in ckpt_files(out, s, self.ranks)]
        if st["keep"]:
            # --keep-checkpoints K deletes a checkpoint once K newer ones are marked complete (the trainer's
            # rule, prune_checkpoints); checked after the round that deleted it, before the soak damages
            # anything again, so a later damage of those newer ones does not make the deletion a loss
            for s in [s for s in st["reported"] if s not in complete]:
                if sum(1 for c in complete if c > s) >= st["keep"]:
                    del st["reported"][s]
        for s in complete:
            files = ckpt_files(out, s, self.ranks)
            if s in st["damaged"]:
                continue
            missing = [f.name for f in files if not f.exists()]
            if missing:
                raise SoakFailure(f"step {s} is marked complete but {missing} are missing")
            if s in self.ref_ckpt and [sha(f) for f in files] != self.ref_ckpt[s]:
                raise SoakFailure(f"checkpoint {s} differs from the reference's")
        alive = [s for s in st["reported"] if s not in st["damaged"]]
        if alive:
            s = max(alive)
            if s not in complete or [sha(f) for f in ckpt_files(out, s, self.ranks)] != st["reported"][s]:
                raise SoakFailure(f"checkpoint {s}, reported complete, was destroyed or changed (reported now: "
                                  f"{reported}, complete: {complete}, damaged: {sorted(st['damaged'])})")

    def check_final(self, out):
        for f in [p.name for p in ckpt_files(self.ref, STEPS, self.ranks)] + [f"DONE_{STEPS:08d}"]:
            if not (out / f).exists() or marker_step_line(out / f) != marker_step_line(self.ref / f):
                raise SoakFailure(f"final {f} differs from the reference's")
        for f in ("metrics.jsonl", "logit_stats.jsonl"):
            if masked(self.ref / f) is None:  # a reference without its records proves nothing
                raise SoakFailure(f"the reference run wrote no {f}")
            if masked(out / f) != masked(self.ref / f):
                raise SoakFailure(f"{f} differs from the reference's (timings masked)")
        if temporaries(out):
            raise SoakFailure(f"temporary files left: {temporaries(out)}")

    def close(self):
        if self.running is not None:
            self.running.kill_group()
        for p in self.readers:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        self.disk.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="about 40 interruptions (make test)")
    mode.add_argument("--long", action="store_true", help="at least 500 interruptions")
    mode.add_argument("--rounds", type=int, help="at least this many interruptions")
    ap.add_argument("--seed", type=int, help="the soak's random seed (default: from the clock, printed)")
    ap.add_argument("--disk", choices=["auto", "tmpfs", "fsize"], default="auto",
                    help="full disk by a shrunk tmpfs (needs root), the file-size limit, or both (auto)")
    ap.add_argument("--ranks", type=int, choices=[1, 2], default=1, help="processes (2: under mpirun)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="the trainer's --device (cuda: e.g. the emulated build, TRAIN_GPT2_LS=build/emu/train_gpt2_ls)")
    ap.add_argument("--readers", type=float, default=0.25,
                    help="share of rounds that also start a reader (--eval-only, generate_gpt2_ls, export_hf.py or "
                    "--fork-from) of the newest complete checkpoint beside the trainer (default 0.25)")
    ap.add_argument("--work", type=Path, help="work directory (default: a temporary one, removed on success)")
    ap.add_argument("--json", type=Path, help="write the counts to this file")
    opts = ap.parse_args()
    target = opts.rounds or (500 if opts.long else 40)
    if opts.seed is None:
        opts.seed = int(time.time() * 1000) % 1_000_000_007
    if not BIN.exists():
        raise SystemExit(f"error: {BIN} is missing; build it with `make train_gpt2_ls` (or set TRAIN_GPT2_LS)")
    if opts.readers > 0 and not GEN.exists():
        raise SystemExit(f"error: {GEN} is missing; build it with `make generate_gpt2_ls` (or --readers 0)")
    work = opts.work or Path(tempfile.mkdtemp(prefix="chaos_soak_"))
    work.mkdir(parents=True, exist_ok=True)
    soak = Soak(opts, work)
    start = time.monotonic()
    ok = False
    try:
        soak.reference()
        index = 0

        def budget():
            return sum(soak.counts["interruptions"].values()) < target
        while budget():
            index += 1
            soak.episode(index, budget)
        ok = True
    except SoakFailure as e:
        if getattr(soak, "current", None) is not None and soak.current.exists():
            shutil.copytree(soak.current, work / "failed_run", dirs_exist_ok=True)  # before the tmpfs goes
        print(f"chaos soak FAILED (seed {opts.seed}; reproduce: scripts/chaos_soak.py --seed {opts.seed} "
              f"{'--long' if opts.long else f'--rounds {target}'} --disk {opts.disk} --ranks {opts.ranks} --device {opts.device}): {e}\nlogs and files: {work}",
              file=sys.stderr)
    finally:
        soak.close()
    c = soak.counts
    c.update(seed=opts.seed, disk=("tmpfs" if opts.ranks > 1 else "tmpfs and file-size limit") if soak.disk.tmpfs
             else "file-size limit",
             wall_s=round(time.monotonic() - start, 1), ok=ok)
    print(json.dumps(c, indent=1))
    if opts.json:
        opts.json.write_text(json.dumps(c, indent=1) + "\n")
    if ok and opts.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
