"""The trainer in every USE_MPI x USE_NCCL combination (build/matrix/, built by `make test`), a
GPU test built without what it tests reporting SKIPPED (exit 77) instead of passing, and `make` on a
machine without nvcc (the last test: nvcc hidden from PATH) building a trainer and a generator for
the CPU that train and generate. No GPU needed: nothing here touches CUDA before it answers."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from test_e2e import TINY, write_byte_tokenizer, write_shard

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "build" / "matrix"
COMBOS = ["mpi0-ncclauto", "mpiauto-nccl0", "mpi0-nccl0"]
MPIRUN = shutil.which("mpirun")


def binary(name):
    p = MATRIX / name
    if not p.exists():
        pytest.fail(f"{p} is missing; `make dist-matrix` builds it (part of `make test`)")
    return p


@pytest.mark.parametrize("combo", COMBOS)
def test_every_combination_builds_and_runs(combo):
    p = subprocess.run([binary(f"train_gpt2_ls-{combo}"), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "--rendezvous" in p.stdout and "--device" in p.stdout


@pytest.mark.parametrize("combo", ["mpi0-ncclauto", "mpi0-nccl0"])
def test_mpirun_of_a_build_without_mpi_says_what_is_missing(combo, tmp_path):
    if MPIRUN is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but mpirun is missing (install_deps installs Open MPI)")
        pytest.skip("mpirun not found")
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", binary(f"train_gpt2_ls-{combo}"),
           "--device", "cpu", "-i", str(tmp_path / "none_*.bin"), "-x", "1"]
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "2 processes (from mpirun (Open MPI)) but this build has no MPI" in p.stderr, p.stderr


def test_nccl_test_without_nccl_is_skipped_not_passed():
    p = subprocess.run([binary("test_collective_nccl-nccl0")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 77, (p.returncode, p.stdout, p.stderr)
    assert "test_collective_nccl: SKIPPED: built without NCCL" in p.stderr


def path_without_nvcc():
    """PATH minus every directory holding an nvcc (as a machine without the CUDA toolkit has it)."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    return os.pathsep.join(dirs)


def test_make_without_nvcc_builds_cpu_programs_that_train_and_generate(tmp_path):
    """`make train_gpt2_ls generate_gpt2_ls` in a copy of the sources, nvcc off PATH: one line says the
    programs are built for the CPU by the host compiler; they train (loss finite, a checkpoint),
    generate from it, and --device cuda names the missing CUDA backend."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ["Makefile", "train_gpt2_ls.cu", "generate_gpt2_ls.cu"]:
        shutil.copy(REPO / f, src / f)
    shutil.copytree(REPO / "llmc", src / "llmc")
    env = {k: v for k, v in os.environ.items()
           if k not in ("NVCC", "CUDA_HOME", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "LLMC_NO_NVCC_SAID", "HOST_BUILD")}
    env["PATH"] = path_without_nvcc()
    assert shutil.which("nvcc", path=env["PATH"]) is None
    p = subprocess.run(["make", "-j2", "train_gpt2_ls", "generate_gpt2_ls"], cwd=src, env=env, capture_output=True,
                       text=True, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr
    said = [line for line in p.stdout.splitlines() if "no nvcc" in line]
    assert len(said) == 1 and "building train_gpt2_ls and generate_gpt2_ls with" in said[0], p.stdout
    assert not re.search(r"^\S*nvcc ", p.stdout, re.M), p.stdout

    data = tmp_path / "data"
    data.mkdir()
    tokens = np.frombuffer(b"the king shall not be so, and my lord is good.\n" * 400, dtype=np.uint8)
    write_shard(data / "train_000000.bin", tokens.astype(np.uint16))
    (data / "meta.json").write_text('{"vocab_size": 256, "eot": 10}')
    write_byte_tokenizer(data / "tokenizer.bin", 10)
    out = tmp_path / "out"
    train = [str(src / "train_gpt2_ls"), "-i", f"{data}/train_*.bin", "-o", str(out), "-x", "3", "-v", "0",
             "-s", "0"] + TINY
    p = subprocess.run(train, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    losses = [float(m) for m in re.findall(r"^step \d+/3 \| loss ([0-9.]+)", p.stdout, re.M)]
    assert len(losses) == 3 and all(np.isfinite(losses)), p.stdout
    assert "device cpu (" in p.stdout
    model = sorted(out.glob("model_*.bin"))[-1]
    g = subprocess.run([str(src / "generate_gpt2_ls"), "-e", str(model), "--prompt-ids", "116,104", "-n", "5",
                        "--print-ids", "--seed", "1"], capture_output=True, text=True, timeout=300, env=env)
    assert g.returncode == 0, g.stderr
    assert len(g.stdout.split()) == 5 and all(0 <= int(t) < 256 for t in g.stdout.split()), g.stdout
    c = subprocess.run(train[:1] + ["--device", "cuda"] + train[1:3], capture_output=True, text=True, timeout=60,
                       env=env)
    assert c.returncode == 1
    assert c.stderr.startswith("error: this build has no CUDA backend (compiled without nvcc)"), c.stderr


def test_make_help_prints_the_makefiles_header():
    """`make help` is the Makefile's header comment (its one list of targets and variables), every
    target the README's commands use included."""
    p = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")})
    assert p.returncode == 0, p.stderr
    header = []
    for line in (REPO / "Makefile").read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(re.sub(r"^# ?", "", line))
    assert [line for line in p.stdout.splitlines() if not line.startswith("make: no nvcc")] == header
    for target in ["make ", "make cpu", "make train", "make test", "make deps", "make help", "HOST_BUILD", "NVCC"]:
        assert target in p.stdout, target
