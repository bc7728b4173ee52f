"""cuBLASLt loaded on first use (llmc/cuda/cublaslt_loader.cpp): nvcc's train_gpt2_ls and generate_gpt2_ls
neither link nor load libcublasLt at start (its initializers cost every start ~0.1 s of CPU and ~200 MB of
memory, also a --help or a CPU run), and the loader's forwards reach the library's functions with their arguments: a
probe (test/probes/cublaslt_loader_probe.cpp) linked with the loader alone calls the functions that need
no GPU and checks the library's answers. The handle, the heuristic and the matmul run on a GPU only."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LOADER = REPO / "build" / "obj" / "cublaslt_loader.o"
PROBE = REPO / "test" / "probes" / "cublaslt_loader_probe.cpp"
PROGRAMS = [REPO / "train_gpt2_ls", REPO / "generate_gpt2_ls"]


def lazy_build():
    """Skips where the last link was `make CUBLASLT_LAZY=0` (build/cublaslt-link says which)."""
    mode = REPO / "build" / "cublaslt-link"
    if mode.exists() and mode.read_text().strip() != "lazy":
        pytest.skip(f"the programs were linked with cuBLASLt ({mode}: {mode.read_text().strip()})")


def nvcc_build(path):
    """The program as nvcc's build made it (build/compiler-NAME names the compiler of its last build)."""
    stamp = REPO / "build" / f"compiler-{path.name}"
    if not path.exists() or not stamp.exists():
        pytest.fail(f"{path} is missing; `make` builds it (part of `make test`)")
    compiler = stamp.read_text().split()
    if not compiler or Path(compiler[0]).name != "nvcc":
        pytest.skip(f"{path.name} was built without nvcc ({stamp}: {stamp.read_text().strip()})")
    lazy_build()
    return path


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_the_programs_do_not_link_cublaslt(program):
    dyn = subprocess.run(["readelf", "-d", str(nvcc_build(program))], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    assert needed, dyn  # the pattern reads readelf's lines
    assert not [n for n in needed if "cublas" in n], needed
    # and a start that never reaches the GPU does not load it, nor a library that needs it: the dynamic
    # linker's own list of what it loads (ru_maxrss cannot say: a child forked from a large pytest
    # process keeps the parent's high-water mark across its exec)
    p = subprocess.run([str(program), "--help"], capture_output=True, text=True, env=dict(os.environ, LD_DEBUG="files"))
    assert p.returncode == 0, p.stderr[-2000:]
    loaded = re.findall(r"file=(\S+) \[0\];  needed by", p.stderr)
    assert loaded, p.stderr[-2000:]  # the pattern reads the dynamic linker's lines
    assert not [f for f in loaded if "cublas" in f], loaded


def test_the_loader_forwards_to_the_library(tmp_path):
    lazy_build()
    if not LOADER.exists():
        pytest.fail(f"{LOADER} is missing; `make train_gpt2_ls` builds it (part of `make test`)")
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc is not on PATH (this test is left out without it: PYTEST_NEEDS_NVCC)"
    cuda_home = Path(nvcc).resolve().parents[1]  # the Makefile's CUDA_HOME: nvcc's bin/..
    probe = tmp_path / "probe"
    subprocess.run([os.environ.get("CXX", "g++"), "-std=c++17", "-Wall", "-Wextra", "-Werror",
                    "-isystem", str(cuda_home / "include"), str(PROBE), str(LOADER), "-ldl", "-o", str(probe)],
                   check=True)
    dyn = subprocess.run(["readelf", "-d", str(probe)], capture_output=True, text=True, check=True).stdout
    assert "cublas" not in dyn  # the loader alone reaches the library
    p = subprocess.run([str(probe)], capture_output=True, text=True)
    assert p.returncode == 0 and "cublaslt_loader_probe: all PASS" in p.stdout, p.stdout + p.stderr
    assert sum(ln.startswith("PASS ") for ln in p.stdout.splitlines()) == 12, p.stdout  # every check ran


def test_a_library_that_cannot_be_found_is_one_line_naming_it_and_the_fix(tmp_path):
    """The loader built for a library name that does not exist (LLMC_CUBLASLT_SONAME, the test's hook): the
    first call throws llmc::InputError naming the library, both places looked in, and the fix."""
    lazy_build()
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc is not on PATH (this test is left out without it: PYTEST_NEEDS_NVCC)"
    inc = Path(nvcc).resolve().parents[1] / "include"
    cxx = os.environ.get("CXX", "g++")
    loader, probe = tmp_path / "loader.o", tmp_path / "probe"
    subprocess.run([cxx, "-std=c++17", "-I", str(REPO), "-isystem", str(inc),
                    "-DLLMC_CUBLASLT_SONAME=\"libcublasLt.so.99\"", f"-DLLMC_CUBLASLT_DIR=\"{tmp_path}\"",
                    "-c", str(REPO / "llmc" / "cuda" / "cublaslt_loader.cpp"),
                    "-o", str(loader)], check=True)
    subprocess.run([cxx, "-std=c++17", "-isystem", str(inc),
                    str(PROBE), str(loader), "-ldl", "-o", str(probe)], check=True)
    p = subprocess.run([str(probe)], capture_output=True, text=True)
    assert p.returncode != 0 and "PASS" not in p.stdout, p.stdout
    # uncaught here (the programs print it as "error: ..."): std::terminate shows the type and the message
    assert "llmc::InputError" in p.stderr, p.stderr
    assert "cannot load libcublasLt.so.99 (libcublasLt.so.99: cannot open shared object file" in p.stderr, p.stderr
    assert f"{tmp_path}/libcublasLt.so.99" in p.stderr, p.stderr  # the second place looked in
    assert "install the CUDA toolkit's cuBLAS" in p.stderr and "LD_LIBRARY_PATH" in p.stderr, p.stderr
