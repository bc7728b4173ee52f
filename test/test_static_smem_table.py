"""dev/emu/static_smem_table.inc, the emulator's static shared memory per kernel (docs/emulation.md),
against what nvcc makes of the same sources in this build. The table holds each kernel's largest size
over the modules it is compiled into (dev/emu/static_smem_table.py), so for every kernel of

- `make sass-report` (the trainer's and generator's kernels; SASS_REPORT_JSON, which make test sets,
  else build/sass/report.json),
- the nvcc-built labs and GPU tests (build/dev/*, build/test_gpu/*: make gpu-targets, part of make
  test; cuobjdump -res-usage),
- the emulation's own fault tests (dev/emu/tests/emu_faults.cu, compiled here to an sm_90 cubin: a
  few seconds),

the table must hold the largest of the sizes seen, exactly (and the kernel the shared-memory fault
cases assume 16 static bytes of must have 16). A missing file is a failure, not a skip: these run
only where nvcc is (make test deselects them without it, PYTEST_NEEDS_NVCC). What only the FP32
compiles show is checked by the full regeneration, `python3 dev/emu/static_smem_table.py --check`
(minutes; not here).
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "dev/emu/static_smem_table.inc"
sys.path.insert(0, str(REPO / "dev/cuda/sassreport"))
sys.path.insert(0, str(REPO / "dev/emu"))

from resources import resources_by_function  # noqa: E402
from tools import find_cuda_tool, find_program  # noqa: E402

import static_smem_table  # noqa: E402

ROW = re.compile(r'^\{"([^"]+)", (\d+)\},  // ')


def read_table() -> dict:
    rows = [ROW.match(line) for line in TABLE.read_text().splitlines() if not line.startswith("//")]
    assert all(rows), "a row of the table is not {\"symbol\", bytes},  // name"
    names = [m.group(1) for m in rows]
    assert names == sorted(names) and len(set(names)) == len(names), "the table is not sorted by symbol, once each"
    return {m.group(1): int(m.group(2)) for m in rows}


REGEN = "; regenerate the table: python3 dev/emu/static_smem_table.py"


def sass_report_sizes() -> dict:
    path = Path(os.environ.get("SASS_REPORT_JSON", REPO / "build/sass/report.json"))
    assert path.is_file(), f"{path} does not exist: run make sass-report"
    kernels = json.loads(path.read_text())["kernels"]
    assert kernels, f"{path} lists no kernel"
    return {k["mangled"]: k["static_smem"] for k in kernels}


def nvcc_binaries() -> list:
    """The nvcc builds of the labs and GPU tests (make gpu-targets), all of them."""
    want = [REPO / "build/dev" / p.stem for p in sorted((REPO / "dev/cuda").glob("*.cu"))]
    want += [REPO / "build/test_gpu" / p.stem for p in sorted((REPO / "test/gpu").glob("*.cu"))]
    missing = [str(p.relative_to(REPO)) for p in want if not p.is_file()]
    assert not missing, f"not built: {', '.join(missing)}; run make gpu-targets (nvcc)"
    return want


def binary_sizes(b: Path) -> dict:
    p = subprocess.run([str(find_cuda_tool("cuobjdump")), "-arch", "sm_90", "-res-usage", str(b)],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"cuobjdump failed on {b}: {p.stderr}"
    found = {n: r.static_smem for n, r in resources_by_function(p.stdout).items()}
    if b.parent.name == "dev":  # every lab has kernels (a GPU test may have none of its own)
        assert found, f"{b} holds no sm_90 kernel (CUDA_ARCH without 90?)"
    return found


def fault_test_sizes(tmp_path) -> dict:
    return static_smem_table.cubin_sizes(str(find_program("nvcc", "install the CUDA toolkit")),
                                         find_cuda_tool("cuobjdump"), "dev/emu/tests/emu_faults.cu", "BF16", tmp_path)


def test_table_holds_the_largest_size_of_every_build(tmp_path):
    builds = {"make sass-report": sass_report_sizes(), "emu_faults.cu": fault_test_sizes(tmp_path)}
    builds.update({str(b.relative_to(REPO)): binary_sizes(b) for b in nvcc_binaries()})
    table, seen, bad = read_table(), {}, []
    for where, sizes in builds.items():
        for name, size in sizes.items():
            seen.setdefault(name, []).append((size, where))
    for name, sizes in sorted(seen.items()):
        size, where = max(sizes)
        if name not in table:
            bad.append(f"{name}: {size} bytes in {where}, not in the table")
        elif table[name] != size:
            bad.append(f"{name}: at most {size} bytes ({where}; {len(sizes)} builds), the table says {table[name]}")
    assert not bad, "\n".join(bad) + REGEN


def test_fault_cases_kernel_has_16_static_bytes():
    """test_emulation.py's smem-static-* cases are written for float ticket[4]."""
    table = read_table()
    ticket = [n for n in table if "static_and_dynamic_smem_kernel" in n]
    assert len(ticket) == 1 and table[ticket[0]] == 16, [(n, table[n]) for n in ticket]
