"""Compiling what the report needs when it is not given: the production sources as sm_90 cubins
(with the Makefile's device flags), the launch probe (launch_probe.cu, by the host compiler through the
device emulation's headers) and the occupancy checker (occupancy_check.cpp). Each output is rebuilt
only when older than what it is built from."""
from pathlib import Path

from tools import ToolError, find_program, run

# The device-code flags of the Makefile's nvcc build (NVCCFLAGS: -O3 -std=c++17, -DENABLE_BF16, -I.)
# for sm_90 only; the host flags (-Xcompiler ...) do not change the device code.
NVCC_DEVICE_FLAGS = ["-O3", "-std=c++17", "-gencode", "arch=compute_90,code=sm_90", "-DENABLE_BF16"]
PRODUCTION_SOURCES = ["llmc/cuda/backend_entry.cu"]  # the one translation unit with the programs' kernels


def _stale(out: Path, inputs: list) -> bool:
    if not out.exists():
        return True
    t = out.stat().st_mtime
    return any(p.stat().st_mtime > t for p in inputs if p.exists())


def _headers(repo: Path) -> list:
    return [p for p in (repo / "llmc").rglob("*") if p.suffix in (".h", ".cuh")]


def production_cubins(repo: Path, build_dir: Path, nvcc: str) -> list:
    """The production sources compiled to sm_90 cubins under build_dir (device code only)."""
    find_program(nvcc, "install the CUDA toolkit, or pass the binaries the Makefile built")
    outs = []
    for src in PRODUCTION_SOURCES:
        out = build_dir / (Path(src).stem + ".sm_90.cubin")
        if _stale(out, [repo / src] + _headers(repo)):
            build_dir.mkdir(parents=True, exist_ok=True)
            run([nvcc, *NVCC_DEVICE_FLAGS, f"-I{repo}", "-cubin", repo / src, "-o", out])
        outs.append(out)
    return outs


def launch_probe(repo: Path, build_dir: Path, cxx: str, cuda_include) -> Path:
    """The probe binary: launch_probe.cu compiled by the host compiler through the device emulation's
    headers (of the emulated build's flags, EMU_CXXFLAGS, the ones that select them: -DLLMC_EMULATE, the
    emulation's include folder and its cuda_runtime.h; at -O0, without sanitizers or OpenMP;
    docs/emulation.md). It prints constants of the launchers' host code only, so no device code is built
    (nvcc's compile of it spent ~30 CPU-s in cicc on the headers' kernels, which the probe never launches)."""
    src = Path(__file__).with_name("launch_probe.cu")
    out = build_dir / "launch_probe"
    if _stale(out, [src] + _headers(repo) + [p for p in (repo / "dev" / "emu").rglob("*") if p.suffix in (".h", ".inc")]):
        find_program(cxx, "install a C++ compiler")
        build_dir.mkdir(parents=True, exist_ok=True)
        cuda = [f"-I{cuda_include}"] if cuda_include else []
        run([cxx, "-std=c++17", "-O0", "-DLLMC_EMULATE", "-DENABLE_BF16", f"-I{repo / 'dev' / 'emu' / 'include'}",
             "-include", repo / "dev" / "emu" / "include" / "cuda_runtime.h", f"-I{repo}", *cuda, "-x", "c++", src,
             "-o", out])
    return out


def occupancy_checker(build_dir: Path, cuda_include: Path, cxx: str) -> Path:
    src = Path(__file__).with_name("occupancy_check.cpp")
    out = build_dir / "occupancy_check"
    if _stale(out, [src]):
        if not (cuda_include / "cuda_occupancy.h").is_file():
            raise ToolError(f"cuda_occupancy.h not in {cuda_include}")
        find_program(cxx, "install a C++ compiler")
        build_dir.mkdir(parents=True, exist_ok=True)
        run([cxx, "-std=c++17", "-O1", f"-I{cuda_include}", src, "-o", out])
    return out
