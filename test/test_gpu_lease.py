"""scripts/gpu_lease.sh leaves in its output folder only what the device tool brings back: at most 8
files of at most 16 MiB, 64 MiB together (/work/.library/device/README.md), whatever the work folder
of scripts/gpu_check.sh holds (checkpoints, shards and attention maps beside the logs).
scripts/pack_lease_logs.py does the packing; its own limits are scaled down here to reach the case
where records must be left out in seconds.

gpu_lease.sh runs in a copy of scripts/ with a stand-in gpu_check.sh (it writes the report and fills
the work folder as a GPU run would): the subject is what the lease leaves, not the checks."""
import base64
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")

# the stand-in: report.txt and report.json in --out, as scripts/gpu_check.sh writes them
FAKE_CHECK = """#!/usr/bin/env bash
out=
while [ $# -gt 0 ]; do case $1 in --out) out=$2; shift 2 ;; *) shift ;; esac; done
mkdir -p "$out"
echo "gpu_check report (stand-in)" >"$out/report.txt"
echo '{"steps": []}' >"$out/report.json"
"""


def random_text(n):
    """N bytes of text that gzip cannot shrink much (base64 of random bytes: ~75% after gzip)."""
    return base64.b64encode(os.urandom(n * 3 // 4))[:n]


def fill_work(work):
    """A work folder as a GPU lease leaves it: logs and JSON beside checkpoints, shards and maps."""
    files = {
        "results.tsv": b"train:ls-small-gpu\tPASS\t6.0\tbuild/gpu_check/logs/train_ls-small-gpu.log\n",
        "logs/environment.log": b"nvcc: cuda 13.0\n",
        "logs/train_ls-small-gpu.log": b"step 1/300 | loss 9.2\n" * 2000,
        "bench/attention/attention.json": json.dumps({"benchmark": "attention", "ms": 1.5}).encode(),
        "train/data/meta.json": b'{"synthetic": {}}',
        "train/out/metrics.jsonl": b'{"step": 1, "loss": 9.2}\n' * 300,
        "train/out/logit_stats.jsonl": random_text(22 * MIB),  # compressed over 15 MiB: two parts
        "train/out/model_00000300.bin": os.urandom(20 * MIB),  # the dummy checkpoint
        "train/out/state_00000300_00000.bin": os.urandom(8 * MIB),
        "train/data/train_000000.bin": os.urandom(6 * MIB),
        "train/maps/attn_L0_H0.npy": os.urandom(16 * MIB),
    }
    for rel, data in files.items():
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


def lease_copy(tmp_path):
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    for name in ("gpu_lease.sh", "pack_lease_logs.py"):
        src = REPO / "scripts" / name
        assert src.is_file(), f"{src} is missing"
        (scripts / name).write_bytes(src.read_bytes())
    (scripts / "gpu_check.sh").write_text(FAKE_CHECK)
    for f in scripts.iterdir():
        f.chmod(0o755)
    return tmp_path / "repo"


def assert_comes_back(out, max_files=8, file_limit=16 * MIB, total=64 * MIB):
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert files, f"{out} is empty"
    assert len(files) <= max_files, [p.name for p in files]
    for p in files:
        assert p.parent == out, f"{p}: the lease leaves files in OUT itself"
        assert NAME_OK.match(p.name), p.name
        assert p.stat().st_size <= file_limit, f"{p.name}: {p.stat().st_size} bytes"
    assert sum(p.stat().st_size for p in files) <= total
    return [p.name for p in files]


def joined_archive(out):
    """The archive as report.txt says to join it."""
    report = (out / "report.txt").read_text()
    parts = sorted(out.glob("logs.tar.gz.part*"))
    if parts:
        assert "cat logs.tar.gz.part* > logs.tar.gz && tar xzf logs.tar.gz" in report, report
        data = b"".join(p.read_bytes() for p in parts)
    else:
        assert "tar xzf logs.tar.gz" in report, report
        data = (out / "logs.tar.gz").read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_the_lease_output_comes_back_with_a_large_checkpoint_in_the_work_folder(tmp_path):
    repo = lease_copy(tmp_path)
    work = repo / "build" / "gpu_check"
    files = fill_work(work)
    out = tmp_path / "out"
    p = subprocess.run(["bash", str(repo / "scripts" / "gpu_lease.sh"), "300", "train"], env={**os.environ, "OUT": str(out)},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    names = assert_comes_back(out)
    assert {"report.txt", "report.json"} <= set(names)
    assert "logs.tar.gz.part0" in names and "logs.tar.gz.part1" in names, names  # 16.5 MiB compressed: split
    got = joined_archive(out)
    for rel, data in files.items():
        name = f"build/gpu_check/{rel}"
        if rel.endswith((".bin", ".npy")):
            assert name not in got, name
        else:
            assert got.get(name) == data, name
    report = (out / "report.txt").read_text()
    assert report.startswith("gpu_check report (stand-in)")
    assert re.search(r"left out \(checkpoints, data, maps, binaries, markers\): 3 \.bin, 1 \.npy; 50\.0 MiB\n", report), report


def test_an_earlier_archive_in_out_is_replaced(tmp_path):
    repo = lease_copy(tmp_path)
    work = repo / "build" / "gpu_check"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "environment.log").write_text("nvcc\n")
    out = tmp_path / "out"
    out.mkdir()
    for i in range(6):  # an earlier call's six parts: kept, they would make nine files
        (out / f"logs.tar.gz.part{i}").write_bytes(b"old")
    p = subprocess.run(["bash", str(repo / "scripts" / "gpu_lease.sh"), "300", "train"], env={**os.environ, "OUT": str(out)},
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert sorted(assert_comes_back(out)) == ["logs.tar.gz", "report.json", "report.txt"]
    assert joined_archive(out) == {"build/gpu_check/logs/environment.log": b"nvcc\n"}


def test_records_too_large_for_the_room_left_are_named_and_left_out(tmp_path):
    """Limits scaled by 1/16: 8 files of 1 MiB, 4 MiB in all, parts of 0.9 MiB. Three logs of ~1.6 MiB
    compressed cannot all fit beside a 0.5 MiB report: the largest goes, named in report.txt, the rest come back."""
    work = tmp_path / "gpu_check"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "small.log").write_text("PASS\n")
    for i, size in enumerate((2.0, 2.1, 2.2)):
        (work / "logs" / f"big{i}.log").write_bytes(random_text(int(size * MIB)))
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.txt").write_bytes(b"report\n" + b"x" * (MIB // 2))
    (out / "report.json").write_text("{}")
    p = subprocess.run(["python3", str(REPO / "scripts" / "pack_lease_logs.py"), str(work), str(out), "--file-mib", "1",
                        "--total-mib", "4", "--part-mib", "0.9"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert_comes_back(out, file_limit=MIB, total=4 * MIB)
    got = joined_archive(out)
    assert sorted(got) == [f"gpu_check/logs/{n}.log" for n in ("big0", "big1", "small")], sorted(got)
    report = (out / "report.txt").read_text()
    assert re.search(r"\nleft out to fit the room beside the report \(6 files, 3\.4 MiB\), largest first: logs/big2\.log "
                     r"\(2\.2 MiB\)\n", report), report[-800:]


def test_no_room_for_the_archive_is_one_error_line(tmp_path):
    work = tmp_path / "gpu_check"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "a.log").write_text("PASS\n")
    out = tmp_path / "out"
    out.mkdir()
    for i in range(8):
        (out / f"other{i}.txt").write_text("x")
    p = subprocess.run(["python3", str(REPO / "scripts" / "pack_lease_logs.py"), str(work), str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1 and "already holds 8 files, 0.0 MiB: no room for logs.tar.gz" in p.stderr, p.stderr
    assert not list(out.glob("logs.tar.gz*"))


def test_the_lease_rewrites_the_report_after_its_last_part(tmp_path):
    """A part the budget cuts off never writes its report: the lease asks gpu_check.sh for it again."""
    repo = lease_copy(tmp_path)
    calls = tmp_path / "calls.txt"
    (repo / "scripts" / "gpu_check.sh").write_text(FAKE_CHECK.replace("out=\n", f'echo "$*" >>{calls}\nout=\n', 1))
    (repo / "build" / "gpu_check" / "logs").mkdir(parents=True)
    out = tmp_path / "out"
    p = subprocess.run(["bash", str(repo / "scripts" / "gpu_lease.sh"), "300", "train", "labs"],
                       env={**os.environ, "OUT": str(out)}, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert calls.read_text().splitlines() == [f"--part train --out {out}", f"--part labs --out {out}",
                                              f"--report-only --out {out}"]


def test_report_only_writes_every_recorded_step_and_names_a_cut_off_one(tmp_path):
    """gpu_check.sh --report-only runs nothing: the report of the steps recorded, a cut-off step a failure."""
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    for name in ("gpu_check.sh", "build_digest.sh"):
        (scripts / name).write_bytes((REPO / "scripts" / name).read_bytes())
    (scripts / "build_digest.sh").chmod(0o755)
    source = b"__global__ void k() {}\n"
    (tmp_path / "repo" / "k.cu").write_bytes(source)
    work = tmp_path / "repo" / "build" / "gpu_check"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "lab_adamw.log").write_text("adamw table\n")
    (work / "logs" / "lab_attention_ls_batch.log").write_text("$ attention_batch_scaling\nB 8 half a table\n")
    (work / "results.tsv").write_text(
        f"lab:adamw\tPASS\t1.6\t{work}/logs/lab_adamw.log\n"
        f"lab:attention_ls:batch\tFAIL(cut off: the call ended first)\t0.0\t{work}/logs/lab_attention_ls_batch.log\n")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "GPU_CHECK_EMULATE"}
    p = subprocess.run(["bash", str(scripts / "gpu_check.sh"), "--report-only", "--out", str(out)],
                       env={**env, "GPU_CHECK_COMMIT": "abc1234"}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    js = json.loads((out / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in js["steps"]] == [
        ("lab:adamw", "PASS"), ("lab:attention_ls:batch", "FAIL(cut off: the call ended first)")]
    assert (js["passed"], js["failed"], js["commit"]) == (1, 1, "abc1234")
    # the tree that ran, for lease_digest.py to check the commit label against: build_digest.sh's definition
    # (sha256sum's line of each source, the first 16 hex digits of their list's SHA-256), the one source here
    listing = f"{hashlib.sha256(source).hexdigest()}  ./k.cu\n".encode()
    assert js["sources_digest"] == hashlib.sha256(listing).hexdigest()[:16]
    report = (out / "report.txt").read_text()
    assert "adamw table" in report and "B 8 half a table" in report, report
    assert "1 of 2 steps PASS, 1 FAIL" in report, report
    assert not (work / "logs" / "environment.log").exists()  # nothing ran, nothing was probed


def test_a_part_cut_off_by_the_budget_stops_its_running_step(tmp_path):
    """gpu_lease.sh ends a part with timeout: the step that part was in must end with it (not run on
    beside the report, the archive and the next part), and it stays "cut off" in the results."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "gpu_check.sh").write_bytes((REPO / "scripts" / "gpu_check.sh").read_bytes())
    (repo / "scripts" / "gpu_check.sh").chmod(0o755)
    for h in ("CLI/CLI.hpp", "nlohmann/json.hpp"):  # the header check passes; nothing compiles
        (repo / ".deps" / "include" / h).parent.mkdir(parents=True, exist_ok=True)
        (repo / ".deps" / "include" / h).write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "make.pid"
    (bin_dir / "make").write_text(f"#!/usr/bin/env bash\necho $$ >{pid_file}\nexec sleep 60\n")  # the build step, hanging
    (bin_dir / "nvidia-smi").write_text("#!/usr/bin/env bash\necho 'NVIDIA H200'\n")  # a GPU is present
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_CHECK_EMULATE", "OUT")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    # as gpu_lease.sh runs a part; its budget's end (timeout's SIGTERM) once the build step has started
    p = subprocess.Popen(["timeout", "--kill-after=5", "60", str(repo / "scripts" / "gpu_check.sh"), "--part", "build",
                          "--out", str(tmp_path / "out")], cwd=repo, env={**env, "GPU_CHECK_COMMIT": "abc1234"},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        if pid_file.is_file() and pid_file.read_text().strip():
            break
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) != 0
    pid = int(pid_file.read_text())

    def running():
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(")")[-1].split()[0] != "Z"
        except FileNotFoundError:
            return False
    try:
        for _ in range(50):  # the step's process gets up to 5 s to end after the part's
            if not running():
                break
            time.sleep(0.1)
        assert not running(), "the cut-off step still runs after its part ended"
    finally:
        if running():
            os.kill(pid, signal.SIGKILL)
    results = (repo / "build" / "gpu_check" / "results.tsv").read_text()
    assert "build:bf16-sm90\tFAIL(cut off: the call ended first)\t" in results, results
