"""Programs built on the CPU machine for a GPU lease (scripts/prebuild_gpu.sh) are installed there by
scripts/use_prebuilt.sh only when they were built from the same sources (scripts/build_digest.sh),
for the architecture and the set the run needs, and every one finds its libraries (ldd); otherwise
nothing is installed, one line says why, and the caller builds (exit 77).

The subject runs in a small tree of its own (the two scripts, a few sources) with stand-in programs:
host executables, one of them linked against a library that is then removed. No GPU and no nvcc."""
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def make_tree(root):
    """A tree with the two scripts and build inputs of each kind the digest reads (and one it does not)."""
    (root / "scripts").mkdir(parents=True)
    for s in ("build_digest.sh", "use_prebuilt.sh"):
        shutil.copy2(REPO / "scripts" / s, root / "scripts" / s)
    (root / "llmc" / "cuda").mkdir(parents=True)
    (root / "llmc" / "cuda" / "k.cuh").write_text("// kernel\n")
    (root / "llmc" / "a.h").write_text("// header\n")
    (root / "train_gpt2_ls.cu").write_text("int main() { return 0; }\n")
    (root / "Makefile").write_text("all:\n")
    (root / "README.md").write_text("not a build input\n")
    return root


def digest(tree):
    p = subprocess.run(["bash", str(tree / "scripts" / "build_digest.sh"), str(tree)], capture_output=True, text=True)
    assert p.returncode == 0 and len(p.stdout.strip()) == 16, p.stderr
    return p.stdout.strip()


def make_tarball(path, programs, *, digest_of, arch="90", set_name="lease", precision="BF16", listed=None,
                 cublaslt=None):
    """A tarball as prebuild_gpu.sh writes it: PREBUILT and the programs (name -> a file to copy) at their paths.
    listed: the record's program list, when it is to name more than the tarball holds. cublaslt: the record's
    "NAME DIR" of the library the trainer loads at run time (none: the line left out, as older records)."""
    record = (f"commit {'ab' * 20}\ndigest {digest_of}\narch {arch}\nprecision {precision}\nset {set_name}\n"
              f"mpi no nccl no\n"
              f"nvcc Build cuda_13.0\nbuilt 2026-12-01T00:00:00Z on cpu\nprograms {' '.join(listed or programs)}\n"
              + (f"cublaslt {cublaslt}\n" if cublaslt else ""))
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("PREBUILT")
        info.size = len(record)
        tar.addfile(info, io.BytesIO(record.encode()))
        for name, src in programs.items():
            tar.add(src, arcname=name)
    return path


def use(tree, tarball, *args, cwd=None, env=None):
    base = {k: v for k, v in os.environ.items() if k not in MAKE_ENV}
    return subprocess.run(["bash", str(tree / "scripts" / "use_prebuilt.sh"), str(tarball), *args], cwd=cwd or tree,
                          capture_output=True, text=True, timeout=60, env=dict(base, **(env or {})))


@pytest.fixture
def true_bin():
    path = shutil.which("true")
    assert path, "no 'true' program on PATH"
    return Path(path)


PROGRAMS = ("train_gpt2_ls", "build/dev/attention_ls", "build/test_gpu/test_cuda_model")
# the Makefile's settings a caller's environment can hold; the prebuild sets none (use_prebuilt.sh)
MAKE_ENV = ("CUBLASLT_LAZY", "USE_NCCL", "USE_MPI", "HOST_BUILD", "NVCCFLAGS", "HOST_OPT", "CXXFLAGS", "NVCC", "CXX")


def test_the_digest_reads_sources_by_path_and_content_and_nothing_else(tmp_path):
    a = make_tree(tmp_path / "a")
    b = make_tree(tmp_path / "b")
    assert digest(a) == digest(b)  # the same sources in another folder
    (b / "README.md").write_text("changed\n")
    (b / "build").mkdir()
    (b / "build" / "x.h").write_text("an output folder's file\n")
    assert digest(a) == digest(b)  # neither a document nor the build folder is an input
    for change in (lambda t: (t / "llmc" / "a.h").write_text("// other\n"),
                   lambda t: (t / "llmc" / "cuda" / "k.cuh").rename(t / "llmc" / "cuda" / "k2.cuh"),
                   lambda t: (t / "Makefile").write_text("all: x\n"),
                   lambda t: (t / "llmc" / "new.cpp").write_text("\n")):
        c = make_tree(tmp_path / f"c{len(list(tmp_path.iterdir()))}")
        change(c)
        assert digest(c) != digest(a)


@pytest.mark.parametrize("want", ["lease", "paper"])
def test_programs_of_the_same_sources_are_installed(tmp_path, true_bin, want):
    """The lease set also meets the paper window's need (its three programs are in it). The Makefile's link
    stamps of an earlier build are removed, so that a later make relinks rather than keep these programs."""
    tree = make_tree(tmp_path / "tree")
    stamps = [tree / "build" / n for n in ("cublaslt-link", "compiler-train_gpt2_ls", "compiler-generate_gpt2_ls")]
    (tree / "build").mkdir()
    for st in stamps:
        st.write_text("linked\n")
    tarball = make_tarball(tmp_path / "p.tar.gz", {p: true_bin for p in PROGRAMS}, digest_of=digest(tree))
    p = use(tree, tarball, "90", want)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not any(st.exists() for st in stamps)
    assert p.stdout.startswith("prebuilt programs installed: 3, built at commit abababababab"), p.stdout
    for name in PROGRAMS:
        assert (tree / name).is_file() and (tree / name).stat().st_mode & 0o111, name
        assert subprocess.run([str(tree / name)]).returncode == 0
    assert "digest " + digest(tree) in (tree / "build" / "prebuilt.installed").read_text()


def test_a_tarball_named_from_another_folder_is_found(tmp_path, true_bin):
    tree = make_tree(tmp_path / "tree")
    (tmp_path / "elsewhere").mkdir()
    make_tarball(tmp_path / "elsewhere" / "p.tar.gz", {"train_gpt2_ls": true_bin}, digest_of=digest(tree))
    p = use(tree, "p.tar.gz", cwd=tmp_path / "elsewhere")
    assert p.returncode == 0 and (tree / "train_gpt2_ls").is_file(), p.stdout + p.stderr


@pytest.mark.parametrize("case, args, needle", [
    ("other sources", ("90", "lease"), "built from other sources (commit abababababab"),
    ("other arch", ("80", "lease"), "built for sm_90, this run is for sm_80"),
    ("other set", ("90", "lease"), "it is the paper set, this run needs the lease set"),
    ("fp32", ("90", "lease"), "built in precision FP32, not BF16"),
    ("linked cuBLASLt", ("90", "lease"), "this run's environment sets CUBLASLT_LAZY=0, the prebuilt programs were"),
    ("debug build", ("90", "lease"), "this run's environment sets NVCCFLAGS=-G, the prebuilt programs were"),
    ("program missing", ("90", "lease"), "build/dev/missing_lab is listed but not in"),
    ("no tarball", ("90", "lease"), "is not there"),
    ("not a tarball", ("90", "lease"), "does not unpack"),
])
def test_what_cannot_stand_for_this_tree_is_not_installed(tmp_path, true_bin, case, args, needle):
    tree = make_tree(tmp_path / "tree")
    tarball = tmp_path / "p.tar.gz"
    make_tarball(tarball, {p: true_bin for p in PROGRAMS}, digest_of=digest(tree),
                 precision="FP32" if case == "fp32" else "BF16", set_name="paper" if case == "other set" else "lease",
                 listed=PROGRAMS + ("build/dev/missing_lab",)
                 if case == "program missing" else None)
    if case == "other sources":
        (tree / "llmc" / "a.h").write_text("// changed after the prebuild\n")
    elif case == "no tarball":
        tarball.unlink()
    elif case == "not a tarball":
        tarball.write_bytes(b"not gzip")
    env = {"linked cuBLASLt": {"CUBLASLT_LAZY": "0"}, "debug build": {"NVCCFLAGS": "-G"}}.get(case)
    p = use(tree, tarball, *args, env=env)
    assert p.returncode == 77, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prebuilt programs not used: ") and needle in lines[0], p.stdout
    assert not any((tree / name).exists() for name in PROGRAMS) and not (tree / "build" / "prebuilt.installed").exists()


def test_a_program_whose_library_is_missing_here_installs_nothing(tmp_path, true_bin):
    """ldd names the library; the programs that would load are not installed either (all or nothing)."""
    if not shutil.which("cc") or not shutil.which("ldd"):
        pytest.skip("needs a C compiler and ldd to make a program whose library is missing")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (tmp_path / "gone.c").write_text("int gone(void) { return 0; }\n")
    (tmp_path / "main.c").write_text("int gone(void);\nint main(void) { return gone(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(tmp_path / "gone.c"), "-o", str(libdir / "libgone.so")], check=True)
    subprocess.run(["cc", str(tmp_path / "main.c"), "-L", str(libdir), "-lgone", f"-Wl,-rpath,{libdir}",
                    "-o", str(tmp_path / "needs_gone")], check=True)
    (libdir / "libgone.so").unlink()  # built where the library was; this machine lacks it
    tree = make_tree(tmp_path / "tree")
    tarball = make_tarball(tmp_path / "p.tar.gz", {"train_gpt2_ls": true_bin,
                                                   "build/dev/attention_ls": tmp_path / "needs_gone"},
                           digest_of=digest(tree))
    p = use(tree, tarball)
    assert p.returncode == 77, p.stdout + p.stderr
    assert "build/dev/attention_ls needs a library this machine lacks (libgone.so => not found)" in p.stdout, p.stdout
    assert not (tree / "train_gpt2_ls").exists() and not (tree / "build" / "dev" / "attention_ls").exists()


def test_prebuild_refuses_uncommitted_changes_and_unknown_sets(tmp_path):
    """The prebuilt programs are HEAD's: a tree whose tracked files differ from HEAD is refused before any
    build (a clone of this repository with one tracked file changed)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    shutil.copy2(REPO / "scripts" / "prebuild_gpu.sh", clone / "scripts" / "prebuild_gpu.sh")  # this tree's
    p = subprocess.run(["bash", "scripts/prebuild_gpu.sh", "--set", "nightly"], cwd=clone, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "the sets are lease, paper and both" in p.stderr, p.stderr
    with open(clone / "Makefile", "a") as f:
        f.write("\n# changed\n")
    p = subprocess.run(["bash", "scripts/prebuild_gpu.sh", "--set", "paper", "--out", str(tmp_path / "pre")],
                       cwd=clone, capture_output=True, text=True, timeout=60)
    if shutil.which("nvcc") is None:
        assert p.returncode == 2 and "nvcc not found" in p.stderr, p.stderr
    else:
        assert p.returncode == 2 and "tracked files differ from HEAD: commit them first" in p.stderr, p.stderr
    assert not (tmp_path / "pre").exists()


FAKE_GPU_MAKE = """#!/usr/bin/env bash
# make's stand-in: records its arguments, makes the programs of the targets named (executable files)
echo "$*" >>"$CALLS"
dir=.
args=()
while [[ $# -gt 0 ]]; do
  case $1 in -C) dir=$2; shift 2 ;; -j*|*=*) shift ;; *) args+=("$1"); shift ;; esac
done
for t in "${args[@]}"; do
  case $t in
    gpu-targets) files=(train_gpt2_ls generate_gpt2_ls build/dev/adamw build/dev/attention_ls build/test_gpu/test_cuda_model) ;;
    *) files=("$t") ;;
  esac
  for f in "${files[@]}"; do mkdir -p "$dir/$(dirname "$f")"; printf '#!/bin/sh\\n' >"$dir/$f"; chmod +x "$dir/$f"; done
done
echo "nvcc -DLLMC_CUBLASLT_DIR='\\"/opt/cuda/lib64\\"' -c x.cu"
"""


def test_prebuild_both_sets_from_one_build(tmp_path):
    """--set both: one make of gpu-targets, then the lease tarball and the paper tarball, each with its own
    PREBUILT (set, programs) and the same commit and digest. make and nvcc are stand-ins (the real build takes
    tens of minutes here); the clone commits this tree's script, so its tracked files are HEAD's."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    shutil.copy2(REPO / "scripts" / "prebuild_gpu.sh", clone / "scripts" / "prebuild_gpu.sh")
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-a",
                    "--allow-empty", "--no-verify", "-m", "this tree's prebuild_gpu.sh"], check=True, timeout=60)
    bin_dir, inc = tmp_path / "cuda" / "bin", tmp_path / "cuda" / "include"
    bin_dir.mkdir(parents=True)
    inc.mkdir()
    (inc / "cublas_api.h").write_text("#define CUBLAS_VER_MAJOR 13\n")
    (bin_dir / "make").write_text(FAKE_GPU_MAKE)
    (bin_dir / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.0'\n")
    for f in ("make", "nvcc"):
        (bin_dir / f).chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls)}
    p = subprocess.run(["bash", "scripts/prebuild_gpu.sh", "--set", "both", "--out", str(tmp_path / "pre")],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    made = calls.read_text().splitlines()
    assert len(made) == 1 and made[0].endswith("PRECISION=BF16 gpu-targets"), made
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    want = {"lease": "train_gpt2_ls generate_gpt2_ls build/dev/adamw build/dev/attention_ls "
                     "build/test_gpu/test_cuda_model",
            "paper": "train_gpt2_ls build/test_gpu/test_cuda_model build/dev/attention_ls"}
    for set_name, programs in want.items():
        with tarfile.open(tmp_path / "pre" / f"bf16-sm90-{set_name}.tar.gz") as t:
            record = dict(line.split(" ", 1) for line in
                          t.extractfile("PREBUILT").read().decode().splitlines())
            assert sorted(t.getnames()) == sorted(["PREBUILT", *programs.split()])
        assert (record["set"], record["programs"], record["commit"]) == (set_name, programs, head)
        assert record["digest"] == digest(clone) and record["cublaslt"] == "libcublasLt.so.13 /opt/cuda/lib64"
        assert f"carry \"{tmp_path}/pre/bf16-sm90-{set_name}.tar.gz\"" in p.stdout
    assert "warning" not in p.stderr, p.stderr


def test_exp_pg19_refuses_prebuilt_programs_for_a_run_without_a_build(tmp_path):
    """--prebuilt stands in for the build: with --build 0 (or on the CPU) it would be ignored, so it is refused."""
    p = subprocess.run(["bash", str(REPO / "scripts" / "exp_pg19.sh"), "--smoke", "--device", "cpu", "--prebuilt",
                        str(tmp_path / "p.tar.gz"), "--out", str(tmp_path / "o")], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode != 0 and len(errors) == 1 and "--prebuilt stands in for the build" in errors[0], p.stderr


FAKE_SMI = "#!/bin/sh\necho 'NVIDIA H200'\n"  # gpu_check.sh reads the device's name, and nothing else here
# the build, recorded instead of run; MAKE_FAIL=1: a build that fails, and `make -q` says the targets
# named in MAKE_STALE are still out of date (their compile failed), the others current
FAKE_MAKE = """#!/bin/bash
echo "$@" >>"$MAKE_CALLS"
if [ "$1" = -q ]; then for t in $MAKE_STALE; do [ "${@: -1}" = "$t" ] && exit 1; done; exit 0; fi
[ "${MAKE_FAIL:-0}" = 1 ] && exit 2
exit 0
"""


def rows_log(clone, step):
    """The log of STEP, as results.tsv names it (relative to the tree)."""
    for ln in (clone / "build" / "gpu_check" / "results.tsv").read_text().splitlines():
        name, _, _, log = ln.split("\t")
        if name == step:
            return log
    raise AssertionError(f"no step {step}")


def gpu_check_clone(tmp_path):
    """A clone of this tree with this working tree's scripts, the header-only deps' two headers, and a
    folder of stand-ins (nvidia-smi, make) to put first on PATH."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    for s in ("gpu_check.sh", "use_prebuilt.sh", "build_digest.sh"):  # this working tree's
        shutil.copy2(REPO / "scripts" / s, clone / "scripts" / s)
    for h in ("CLI/CLI.hpp", "nlohmann/json.hpp"):  # the header check up front (the build is a stand-in)
        (clone / ".deps" / "include" / h).parent.mkdir(parents=True, exist_ok=True)
        (clone / ".deps" / "include" / h).write_text("")
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("nvidia-smi", FAKE_SMI), ("make", FAKE_MAKE)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    return clone, fake


def gpu_check(clone, fake, calls, part, **extra):
    env = {k: v for k, v in os.environ.items() if k not in MAKE_ENV}
    # PYTHON: this interpreter, whose packages the environment log's check reads
    env.update(PATH=f"{fake}:{env['PATH']}", MAKE_CALLS=str(calls), GPU_CHECK_COMMIT="test", PYTHON=sys.executable,
               **extra)
    return subprocess.run(["bash", "scripts/gpu_check.sh", "--part", part, "--out", str(clone / "out")], cwd=clone,
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("matching", [True, False], ids=["same-sources", "other-sources"])
def test_gpu_check_build_stage_installs_or_builds(tmp_path, true_bin, matching):
    """scripts/gpu_check.sh's build stage with GPU_CHECK_PREBUILT, in a clone of this tree with a stand-in
    nvidia-smi and make: the same sources install the programs (build:bf16-sm90-prebuilt PASS, make never
    called); other sources leave that step SKIPPED with the reason and run the build, and the call passes."""
    clone, fake = gpu_check_clone(tmp_path)
    tarball = make_tarball(tmp_path / "p.tar.gz", {p: true_bin for p in PROGRAMS}, digest_of=digest(clone))
    if not matching:
        (clone / "llmc" / "core" / "flops.h").write_text((clone / "llmc" / "core" / "flops.h").read_text() + "\n")
    calls = tmp_path / "make_calls"
    p = gpu_check(clone, fake, calls, "build", GPU_CHECK_PREBUILT=str(tarball))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = dict(ln.split("\t")[:2] for ln in (clone / "build" / "gpu_check" / "results.tsv").read_text().splitlines())
    log = (clone / rows_log(clone, "build:bf16-sm90-prebuilt")).read_text()
    if matching:
        assert rows == {"build:bf16-sm90-prebuilt": "PASS"}, rows
        assert "prebuilt programs installed: 3" in log and not calls.exists()
        assert all((clone / name).is_file() for name in PROGRAMS)
    else:
        assert rows == {"build:bf16-sm90-prebuilt": "SKIPPED", "build:bf16-sm90": "PASS"}, rows
        assert "prebuilt programs not used: built from other sources" in log, log
        assert "gpu-targets" in calls.read_text() and not (clone / "train_gpt2_ls").exists()
    assert (clone / "build" / "sources.digest").read_text().strip() == digest(clone) + " sm90"
    # the environment log names torch's version (read from torch/version.py, not imported: ~3.5 CPU-s a call)
    env_log = (clone / "build" / "gpu_check" / "logs" / "environment.log").read_text()
    try:
        from importlib import metadata
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    torch_line = [ln for ln in env_log.splitlines() if ln.startswith("torch: ")]
    assert len(torch_line) == 1, env_log
    if torch_version is None:
        assert torch_line[0] == "torch: none", env_log
    else:  # the package's version (with its local tag, +cu132), then torch.version.cuda
        assert torch_line[0].startswith(f"torch: {torch_version}") and len(torch_line[0].split()) == 3, env_log


def test_a_later_call_rebuilds_when_the_tree_changed(tmp_path, true_bin):
    """A later call without the build stage (here the sanitize part, whose first act is ensure_bf16) uses
    the programs of an earlier call only while the tree's sources are the ones they were built from: a
    source changed between the calls makes it build first, and the changed file is touched first, so that
    make (which decides by times) rebuilds what uses it even when the copy kept an old time."""
    clone, fake = gpu_check_clone(tmp_path)
    tarball = make_tarball(tmp_path / "p.tar.gz", {p: true_bin for p in PROGRAMS}, digest_of=digest(clone))
    calls = tmp_path / "make_calls"
    assert gpu_check(clone, fake, calls, "build", GPU_CHECK_PREBUILT=str(tarball)).returncode == 0
    gpu_check(clone, fake, calls, "sanitize")  # no compute-sanitizer here: its step fails after ensure_bf16
    assert not calls.exists()  # the same sources: nothing built
    flops = clone / "llmc" / "core" / "flops.h"
    old = flops.stat().st_mtime - 10
    flops.write_text(flops.read_text() + "\n")
    os.utime(flops, (old, old))  # older than the clone: make's own rule would not see the change
    p = gpu_check(clone, fake, calls, "sanitize")
    assert "gpu-targets" in calls.read_text()
    # and the build saw the change: the file was touched (to now, past the clone) before make, which decides by
    # times (a margin from the clone's time of its own: the calls before take well under a second)
    assert flops.stat().st_mtime > old + 5 and "1 source file(s) changed since the last build here" in p.stderr


def test_a_failed_build_removes_the_programs_it_did_not_remake(tmp_path, true_bin):
    """make -k builds what it can; a program whose target failed keeps an earlier call's file on a warm
    machine. After a failed build those (make -q: still out of date) are removed, so their tests say
    "not built" instead of passing on old code; the ones rebuilt stay."""
    clone, fake = gpu_check_clone(tmp_path)
    tarball = make_tarball(tmp_path / "p.tar.gz", {p: true_bin for p in PROGRAMS}, digest_of=digest(clone))
    calls = tmp_path / "make_calls"
    assert gpu_check(clone, fake, calls, "build", GPU_CHECK_PREBUILT=str(tarball)).returncode == 0
    flops = clone / "llmc" / "core" / "flops.h"
    flops.write_text(flops.read_text() + "\n")  # the next call's tree: the prebuilt programs are not its
    p = gpu_check(clone, fake, calls, "build", MAKE_FAIL="1", MAKE_STALE="build/dev/attention_ls")
    assert p.returncode != 0
    rows = dict(ln.split("\t")[:2] for ln in (clone / "build" / "gpu_check" / "results.tsv").read_text().splitlines())
    assert rows["build:bf16-sm90"] == "FAIL(rc=2)", rows
    assert not (clone / "build" / "dev" / "attention_ls").exists()
    assert (clone / "train_gpt2_ls").exists() and (clone / "build" / "test_gpu" / "test_cuda_model").exists()
    assert "build/dev/attention_ls is not this tree's build (its target failed): removed" in p.stderr, p.stderr
    assert not (clone / "build" / "sources.digest").exists()  # and a later call builds again


def test_the_cublaslt_loaded_at_run_time_must_load_here(tmp_path, true_bin):
    """The trainer loads cuBLASLt at its first matmul (no link-time library: ldd does not see it). Recorded by
    name and the build's folder; loaded here by either (a library in that folder only: found), else nothing
    is installed."""
    tree = make_tree(tmp_path / "tree")
    programs = {p: true_bin for p in PROGRAMS}
    missing = make_tarball(tmp_path / "m.tar.gz", programs, digest_of=digest(tree),
                           cublaslt=f"libcublasLt.so.99 {tmp_path / 'nowhere'}")
    p = use(tree, missing)
    assert p.returncode == 77, p.stdout + p.stderr
    assert ("the trainer loads libcublasLt.so.99 at its first matmul, and neither the dynamic linker nor "
            f"{tmp_path / 'nowhere'} (the build machine's toolkit folder) has it here") in p.stdout, p.stdout
    assert not (tree / "train_gpt2_ls").exists()
    by_name = make_tarball(tmp_path / "n.tar.gz", programs, digest_of=digest(tree),
                           cublaslt=f"libc.so.6 {tmp_path / 'nowhere'}")  # the dynamic linker's search finds it
    p = use(tree, by_name)
    assert p.returncode == 0 and (tree / "train_gpt2_ls").is_file(), p.stdout + p.stderr
    tree = make_tree(tmp_path / "tree2")
    if not shutil.which("cc"):
        pytest.skip("needs a C compiler to make a library found only in the recorded folder")
    libdir = tmp_path / "toolkit"
    libdir.mkdir()
    (tmp_path / "lt.c").write_text("int lt(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(tmp_path / "lt.c"), "-o", str(libdir / "libfakeLt.so.99")],
                   check=True)
    in_folder = make_tarball(tmp_path / "f.tar.gz", programs, digest_of=digest(tree),
                             cublaslt=f"libfakeLt.so.99 {libdir}")
    p = use(tree, in_folder)
    assert p.returncode == 0 and (tree / "train_gpt2_ls").is_file(), p.stdout + p.stderr
