"""The emulated NCCL (dev/emu/nccl.cpp, docs/emulation.md) against NCCL's documentation.

1. build/emu/self/nccl_cases (dev/emu/tests/nccl_cases.cu): every collective, op, several types, in
   place and out of place, counts 1, 7 and many chunks, worlds of 1-4 ranks as threads and of 2
   and 4 ranks as processes, and the error cases (bounded waits, not hangs); it must pass.
2. Mutations of the emulation itself, each applied to a copy of nccl.cpp (nothing broken is
   committed), built as the Makefile builds the emulated objects (EMU_CXXFLAGS / EMU_LDFLAGS, read
   from the Makefile) and linked with the test and the other emulated libraries; the test must
   catch each one.

Needs the emulated build (`make emu`, part of `make test`); a missing binary or object is a failure.
"""
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from run_helpers import need_emulated_build

REPO = Path(__file__).resolve().parents[1]
EMU = REPO / "build" / "emu"
CASES = EMU / "self" / "nccl_cases"
SOURCE = REPO / "dev" / "emu" / "nccl.cpp"
ENV = dict(os.environ, UBSAN_OPTIONS="print_stacktrace=1")


def run(cmd, env=ENV, timeout=300):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def test_nccl_cases_pass():
    p = run([need_emulated_build(CASES)])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "nccl_cases: all" in p.stdout and "checks passed" in p.stdout, out[-4000:]
    # every section ran, including the worlds of processes
    for section in ["api", "threads", "group", "large", "errors", "processes", "process-errors"]:
        assert f"== {section}:" in p.stdout, f"section {section} did not run\n{out[-3000:]}"
    assert "processes sweep world 4 rank 3" in p.stdout and "1 failed" not in p.stdout


# name -> (original text in nccl.cpp (exactly once), mutated text, text expected in the output)
MUTANTS = {
    # the stride between the destination blocks of sendbuff taken as the chunk's length: the same
    # as long as a block fits one chunk, so only the many-chunk cases can catch it
    "reduce-scatter-block-stride": (
        "o.send + ((size_t)b * o.count + off) * es",
        "o.send + ((size_t)b * len + off) * es",
        ": ncclReduceScatter "),
    "avg-not-divided": (
        "if (op == ncclAvg) acc = divide<T>(acc, nr);",
        "",
        " avg count "),
    # the documented in-place offset of all-gather taken in elements instead of bytes: every
    # in-place all-gather on a rank > 0 is then refused as an overlap
    "all-gather-in-place-offset-in-elements": (
        "o.send == o.recv + me * bytes,",
        "o.send == o.recv + me * o.count,",
        ": ncclAllGather "),
}


def make_var(name):
    p = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-%: ; @echo $($*)", f"print-{name}"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    """Each mutant of nccl.cpp compiled and linked with the test (compiled once), in parallel."""
    need_emulated_build(CASES)  # the unmutated build must exist (and pass: test_nccl_cases_pass)
    others = [EMU / (src.stem + ".o") for src in sorted((REPO / "dev" / "emu").glob("*.cpp"))
              if src.name != "nccl.cpp"]
    for o in others:
        need_emulated_build(o)
    cxx, cxxflags, ldflags = make_var("EMU_CXX"), make_var("EMU_CXXFLAGS"), make_var("EMU_LDFLAGS")
    root = tmp_path_factory.mktemp("nccl_mutants")
    text = SOURCE.read_text()

    def compile_(src, obj):
        return subprocess.run(cxx + cxxflags + ["-x", "c++", "-c", str(src), "-o", str(obj)], capture_output=True,
                              text=True, cwd=REPO, timeout=600)

    def mutant_object(name):
        old, new, _ = MUTANTS[name]
        assert text.count(old) == 1, f"{name}: the code to mutate is not in {SOURCE} exactly once; update the mutation"
        src = root / f"{name}.cpp"
        src.write_text(text.replace(old, new))
        return compile_(src, root / f"{name}.o")

    test_obj = root / "nccl_cases.o"
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as ex:
        test_build = ex.submit(compile_, REPO / "dev/emu/tests/nccl_cases.cu", test_obj)
        objects = {n: ex.submit(mutant_object, n) for n in MUTANTS}
        b = test_build.result()
        assert b.returncode == 0, b.stderr[-3000:]

        def link(name):
            c = objects[name].result()
            if c.returncode != 0:
                return None, c
            exe = root / name
            c = subprocess.run(cxx + [str(test_obj), str(root / f"{name}.o")] + [str(o) for o in others] +
                               ["-o", str(exe)] + ldflags, capture_output=True, text=True, cwd=REPO, timeout=600)
            return exe, c

        links = {n: ex.submit(link, n) for n in MUTANTS}
        return {n: f.result() for n, f in links.items()}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_is_caught(mutants, name):
    exe, build = mutants[name]
    assert exe is not None and build.returncode == 0, f"{name}: the mutant did not build\n{build.stderr[-3000:]}"
    # a rank refused by the mutant leaves the others waiting: 1 s, then the communicator is broken
    p = run([exe, "--only", "threads"], env=dict(ENV, LLMC_EMU_NCCL_TIMEOUT_S="1"), timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, f"{name}: the mutated emulation passed the tests\n{out[-3000:]}"
    text = MUTANTS[name][2]
    assert any(line.startswith("FAIL ") and text in line for line in p.stdout.splitlines()), \
        f"{name}: expected a FAIL line with '{text}'\n{out[-3000:]}"
