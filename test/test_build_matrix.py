"""The trainer in every USE_MPI x USE_NCCL combination (build/matrix/, built by `make test`), and a
GPU test built without what it tests reporting SKIPPED (exit 77) instead of passing. No GPU needed:
nothing here touches CUDA before it answers."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

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
