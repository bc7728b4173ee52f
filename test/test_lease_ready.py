"""scripts/lease_ready.sh: whether a clone is ready for a GPU session's two calls (committed, tarballs of its
sources, .deps, packed shards, within 64 MiB a call) and the two calls it prints. On a clone of this
repository with this tree's script committed, and stand-ins for the tarballs, .deps and the shards."""
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def git(tree, *args):
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def clone(tmp_path):
    tree = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", str(REPO), str(tree)], check=True, timeout=120)
    shutil.copy2(REPO / "scripts" / "lease_ready.sh", tree / "scripts" / "lease_ready.sh")
    git(tree, "add", "scripts/lease_ready.sh")
    git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "--no-verify", "-m",
        "this tree's lease_ready.sh")
    return tree


def tarball(path, digest):
    """A tarball as scripts/prebuild_gpu.sh writes it, as far as this script reads it: PREBUILT's digest line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as t:
        data = f"commit x\ndigest {digest}\narch 90\n".encode()
        info = tarfile.TarInfo("PREBUILT")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))


def ready(tree):
    """What lease_ready.sh checks, made: the two tarballs of the tree's digest, .deps, the shards' meta.json
    (all under paths the repository's .gitignore ignores, as on the machine)."""
    digest = subprocess.run(["bash", str(tree / "scripts" / "build_digest.sh"), str(tree)], capture_output=True,
                            text=True, check=True).stdout.strip()
    for name in ("lease", "paper"):
        tarball(tree / "prebuilt" / f"bf16-sm90-{name}.tar.gz", digest)
    for header in ("CLI/CLI.hpp", "nlohmann/json.hpp"):
        (tree / ".deps" / "include" / header).parent.mkdir(parents=True, exist_ok=True)
        (tree / ".deps" / "include" / header).write_text("// stand-in\n")
    (tree / "data" / "shards" / "pg19_sp").mkdir(parents=True)
    (tree / "data" / "shards" / "pg19_sp" / "meta.json").write_text("{}\n")
    return digest


def check(tree):
    return subprocess.run(["bash", "scripts/lease_ready.sh"], cwd=tree, capture_output=True, text=True, timeout=120)


def test_a_ready_tree_gets_the_two_calls_of_its_commit(tmp_path):
    tree = clone(tmp_path)
    ready(tree)
    assert git(tree, "status", "--porcelain") == ""  # every stand-in is in an ignored path
    p = check(tree)
    assert p.returncode == 0, p.stderr
    sha = git(tree, "rev-parse", "--short=7", "HEAD")
    calls = p.stdout.splitlines()
    assert calls[0] == (f"call 1 (the speed lease): run(command=\"GPU_CHECK_COMMIT={sha} GPU_CHECK_PREBUILT="
                        "prebuilt/bf16-sm90-lease.tar.gz scripts/gpu_lease.sh 340 build,test train profile e2e-d12\", "
                        "carry=[\".deps\", \"prebuilt/bf16-sm90-lease.tar.gz\"], timeout_s=360)"), p.stdout
    # the window's command is the campaign file's, with this commit
    window = next(ln for ln in (tree / "docs" / "results" / "experiments" / "paper_campaign.md").read_text()
                  .splitlines() if ln.startswith("EXP_COMMIT=<sha> scripts/exp_pg19.sh "))
    assert window.replace("<sha>", sha).replace('"', '\\"') in calls[1], calls[1]
    assert 'carry=["data/shards/pg19_sp", ".deps", "prebuilt/bf16-sm90-paper.tar.gz"], timeout_s=S + 40)' in calls[1]
    assert calls[2].startswith("after: python3 scripts/lease_digest.py FILES_AT/report.json --prediction "
                               "docs/results/predictions/HEAD-"), calls[2]
    assert "not ready" not in p.stderr and "call 2: the tree" in p.stderr


def test_what_is_missing_is_named_and_the_exit_is_1(tmp_path):
    tree = clone(tmp_path)
    ready(tree)
    tarball(tree / "prebuilt" / "bf16-sm90-paper.tar.gz", "0123456789abcdef")  # of other sources
    (tree / "data" / "shards" / "pg19_sp" / "meta.json").unlink()
    (tree / "stray.txt").write_text("travels\n")  # untracked, not ignored
    with open(tree / "Makefile", "a") as f:
        f.write("\n# changed\n")
    p = check(tree)
    assert p.returncode == 1, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("not ready: ")]
    assert any("tracked files differ from HEAD" in ln for ln in lines), lines
    assert any("untracked files travel with the tree (stray.txt)" in ln for ln in lines), lines
    assert any(ln.startswith("not ready: prebuilt/bf16-sm90-paper.tar.gz was built from other sources (digest "
                             "0123456789abcdef, this tree's ") for ln in lines), lines
    # the Makefile changed: the lease tarball's digest is no longer the tree's either
    assert any(ln.startswith("not ready: prebuilt/bf16-sm90-lease.tar.gz was built from other sources") for ln in lines)
    assert any("data/shards/pg19_sp holds no packed PG-19 shards: scripts/pack_pg19.sh" in ln for ln in lines)
    assert all(ln.startswith("NOT READY (above): ") for ln in p.stdout.splitlines()[:2]), p.stdout
    # no usable lease tarball: call 1 builds on the device, with the build's time added and no tarball carried
    sha = git(tree, "rev-parse", "--short=7", "HEAD")
    assert p.stdout.splitlines()[0] == (
        "NOT READY (above): call 1 (the speed lease, without the prebuilt programs: the build on the device): "
        f"run(command=\"GPU_CHECK_COMMIT={sha} scripts/gpu_lease.sh 420 build,test train profile e2e-d12\", "
        "carry=[\".deps\"], timeout_s=440)"), p.stdout


def test_a_carry_over_64_mib_is_refused(tmp_path):
    tree = clone(tmp_path)
    ready(tree)
    with open(tree / "data" / "shards" / "pg19_sp" / "train_000000.bin", "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: its apparent size is what travels
    p = check(tree)
    assert p.returncode == 1, p.stderr
    assert "not ready: call 2's tree and carry are " in p.stderr and "over the device tool's 64 MiB" in p.stderr
    assert "not ready: call 1" not in p.stderr, p.stderr
    os.remove(tree / "data" / "shards" / "pg19_sp" / "train_000000.bin")
    assert check(tree).returncode == 0


def test_call_1_builds_on_the_device_only_without_a_usable_lease_tarball(tmp_path):
    """A missing lease tarball makes call 1 the build-on-the-device form (420 s, carry .deps only); a stale
    paper tarball alone leaves call 1 with its prebuilt programs (only call 2 needs that one)."""
    tree = clone(tmp_path)
    ready(tree)
    sha = git(tree, "rev-parse", "--short=7", "HEAD")
    (tree / "prebuilt" / "bf16-sm90-lease.tar.gz").unlink()
    p = check(tree)
    assert p.returncode == 1 and "not ready: prebuilt/bf16-sm90-lease.tar.gz is missing" in p.stderr, p.stderr
    assert p.stdout.splitlines()[0] == (
        "NOT READY (above): call 1 (the speed lease, without the prebuilt programs: the build on the device): "
        f"run(command=\"GPU_CHECK_COMMIT={sha} scripts/gpu_lease.sh 420 build,test train profile e2e-d12\", "
        "carry=[\".deps\"], timeout_s=440)"), p.stdout
    digest = subprocess.run(["bash", str(tree / "scripts" / "build_digest.sh"), str(tree)],
                            capture_output=True, text=True, check=True).stdout.strip()
    tarball(tree / "prebuilt" / "bf16-sm90-lease.tar.gz", digest)
    tarball(tree / "prebuilt" / "bf16-sm90-paper.tar.gz", "0123456789abcdef")  # of other sources
    p = check(tree)
    assert p.returncode == 1, p.stderr
    assert p.stdout.splitlines()[0] == (
        f"NOT READY (above): call 1 (the speed lease): run(command=\"GPU_CHECK_COMMIT={sha} GPU_CHECK_PREBUILT="
        "prebuilt/bf16-sm90-lease.tar.gz scripts/gpu_lease.sh 340 build,test train profile e2e-d12\", "
        "carry=[\".deps\", \"prebuilt/bf16-sm90-lease.tar.gz\"], timeout_s=360)"), p.stdout
