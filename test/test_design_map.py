"""docs/design.md's layout map names every header under llmc/ and no header that does not exist;
only the factory includes a backend; only the five seams name the emulated build.

The map is the code block of the "## Layout" section: a line `  <folder>/` opens a folder of
llmc/, and the lines under it indented by four spaces name that folder's headers.
"""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def headers_in_map():
    text = (REPO / "docs/design.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    listed, folder = set(), None
    for line in block.splitlines():
        m = re.match(r"^  (\w+)/\s", line)
        if m:
            folder = m.group(1)
            continue
        m = re.match(r"^    (\S+\.(?:h|cuh))\s", line)
        if m and folder:
            listed.add(f"llmc/{folder}/{m.group(1)}")
        elif not line.startswith("    "):
            folder = None
    return listed


def headers_on_disk():
    return {str(p.relative_to(REPO)) for p in (REPO / "llmc").rglob("*") if p.suffix in (".h", ".cuh")}


def test_every_header_is_in_the_map():
    missing = sorted(headers_on_disk() - headers_in_map())
    assert not missing, f"headers missing from docs/design.md's layout map: {missing}"


def test_the_map_names_only_existing_headers():
    stale = sorted(headers_in_map() - headers_on_disk())
    assert not stale, f"docs/design.md's layout map names headers that do not exist: {stale}"


def test_no_header_directly_under_llmc():
    loose = sorted(str(p.relative_to(REPO)) for p in (REPO / "llmc").glob("*.h*"))
    assert not loose, f"headers belong in a folder of llmc/ (docs/design.md): {loose}"


def product_files():
    return sorted(p for p in list((REPO / "llmc").rglob("*")) + list(REPO.glob("*.cu"))
                  if p.suffix in (".h", ".cuh", ".cu", ".cpp"))


FACTORY = {"llmc/app/backends.h", "llmc/app/launch_collective.cpp"}  # they build the backend and the collective


def test_only_the_factory_includes_a_backend():
    backend_include = re.compile(r'#\s*include\s*"llmc/(cpu|cuda)/')
    offenders = []
    for p in product_files():
        rel = str(p.relative_to(REPO))
        if rel.startswith(("llmc/cpu/", "llmc/cuda/")) or rel in FACTORY:
            continue
        if backend_include.search(p.read_text()):
            offenders.append(rel)
    assert not offenders, \
        f"only the factory {sorted(FACTORY)} may include llmc/cpu or llmc/cuda (docs/design.md): {offenders}"


def test_only_the_seams_name_the_emulated_build():
    seams = {"llmc/app/device.h", "llmc/cuda/launch.cuh", "llmc/cuda/ptx.cuh", "llmc/cuda/step_marker.cuh",
             "llmc/cuda/kernel_profiler.cuh"}
    naming = {str(p.relative_to(REPO)) for p in product_files() if "LLMC_EMULATE" in p.read_text()}
    assert naming <= seams, f"LLMC_EMULATE outside the seams (docs/design.md): {sorted(naming - seams)}"
    assert naming, "no seam names LLMC_EMULATE: the emulated build has lost its seams"


def test_lower_layers_never_include_the_app_or_the_loop():
    """core/, io/, text/, dist/, cpu/ and cuda/ never include the app layer (flags, run records) or the
    training loop (docs/design.md, "Layout")."""
    upward = re.compile(r'#\s*include\s*"llmc/(app|train)/')
    lower = ("llmc/core/", "llmc/io/", "llmc/text/", "llmc/dist/", "llmc/cpu/", "llmc/cuda/")
    offenders = [str(p.relative_to(REPO)) for p in product_files()
                 if str(p.relative_to(REPO)).startswith(lower) and upward.search(p.read_text())]
    assert not offenders, f"a lower layer includes llmc/app or llmc/train (docs/design.md): {offenders}"


MAX_LINES = 700


def test_no_file_in_llmc_is_longer_than_the_limit():
    """A file of llmc/ holds one concern in at most ~700 lines (docs/design.md, "The CUDA backend's
    files"); a longer one is split at a seam of its concern."""
    lengths = {str(p.relative_to(REPO)): len(p.read_text().splitlines())
               for p in (REPO / "llmc").rglob("*") if p.suffix in (".h", ".cuh", ".cu", ".cpp")}
    long = {f: n for f, n in sorted(lengths.items()) if n > MAX_LINES}
    assert lengths, "no source file found under llmc/"
    assert not long, f"files of llmc/ longer than {MAX_LINES} lines (docs/design.md): {long}"


COPY_RUN = 6  # lines of code a candidate may share with llmc/ in one run


def code_runs(text, n):
    """The runs of n consecutive lines of code (blank lines, comments, lone braces and pragmas left
    out; white space folded) in text, as tuples."""
    lines = []
    for line in text.splitlines():
        line = " ".join(line.split("//", 1)[0].split())
        if line and not re.fullmatch(r"[{}();]*|#pragma unroll", line):
            lines.append(line)
    return {tuple(lines[i:i + n]) for i in range(len(lines) - n + 1)}


def test_lab_candidates_reuse_the_production_kernels_instead_of_copying_them():
    """A kernel candidate of a lab (dev/cuda/*_candidates/: the attention lab's, the whole-K GEMM's) calls
    the production kernels' building blocks and holds only what it changes (docs/design.md): no run of
    COPY_RUN lines of code is also in llmc/cuda/."""
    production = set()
    for p in (REPO / "llmc/cuda").glob("*.cuh"):
        production |= code_runs(p.read_text(), COPY_RUN)
    candidates = sorted(REPO.glob("dev/cuda/*_candidates/*.cuh"))
    for folder in ("attention_candidates", "matmul_candidates"):
        assert any(p.parent.name == folder for p in candidates), f"no candidate under dev/cuda/{folder}/"
    copied = {str(p.relative_to(REPO)): [run[0] for run in code_runs(p.read_text(), COPY_RUN) & production]
              for p in candidates}
    copied = {f: runs for f, runs in copied.items() if runs}
    assert not copied, f"lab candidates repeat production code (first lines of each run): {copied}"
