"""Runs the --self-test of every benchmark script in dev/bench/ that has one, so `make test` covers
their pure helpers (FLOP and pair counts, dump reader, table formatting, ...) on a machine without a
GPU. The GPU parts of the benchmarks are not exercised here (scripts/gpu_check.sh runs them).

A script whose module imports torch at top level (dev/bench/torch_fast_model.py), or whose self-test
needs torch (it says so with a module-level line `SELF_TEST_NEEDS_TORCH = True`, e.g.
dev/bench/generate_latency.py), runs under TORCH_PYTHON (run_helpers.torch_python(): $TORCH_PYTHON,
else /usr/bin/python3 or the python running pytest, whichever has torch) and is skipped when none
has; every other script runs under the python running pytest, as CI does."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from run_helpers import torch_python

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "dev" / "bench"
TORCH_PYTHON = torch_python()


def scripts_with_self_test():
    return sorted(p for p in BENCH.glob("*.py") if '"--self-test"' in p.read_text())


def imports_torch_at_top_level(path):
    return re.search(r"^(import torch|from torch)\b", path.read_text(), re.M) is not None


def self_test_needs_torch(path):
    return imports_torch_at_top_level(path) or re.search(r"^SELF_TEST_NEEDS_TORCH = True\b", path.read_text(), re.M) is not None


def python_has_torch(py):
    try:
        return subprocess.run([py, "-c", "import torch"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_the_attention_benchmark_has_a_self_test():
    # guards the discovery below: if the flag were renamed, the parametrized test would run nothing
    names = [p.name for p in scripts_with_self_test()]
    assert "attention_vs_torch.py" in names, names
    assert not imports_torch_at_top_level(BENCH / "attention_vs_torch.py"), \
        "attention_vs_torch.py must import torch lazily so its --self-test runs without torch"


@pytest.mark.parametrize("script", scripts_with_self_test(), ids=lambda p: p.name)
def test_bench_script_self_test_passes(script):
    py = sys.executable
    if self_test_needs_torch(script):
        if not python_has_torch(TORCH_PYTHON):
            pytest.skip(f"{script.name} needs torch; {TORCH_PYTHON} has none (set TORCH_PYTHON)")
        py = TORCH_PYTHON
    p = subprocess.run([py, str(script), "--self-test"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{script.name} --self-test exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
