"""Compiling what the report needs when it is not given: the production sources as sm_90 cubins
(with the Makefile's device flags), the launch probe (launch_probe.cu) and the occupancy checker
(occupancy_check.cpp). Each output is rebuilt only when older than what it is built from."""
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


def launch_probe(repo: Path, build_dir: Path, nvcc: str) -> Path:
    """The probe binary (PTX-only device code: nothing of it runs on a GPU)."""
    src = Path(__file__).with_name("launch_probe.cu")
    out = build_dir / "launch_probe"
    if _stale(out, [src] + _headers(repo)):
        find_program(nvcc, "install the CUDA toolkit")
        build_dir.mkdir(parents=True, exist_ok=True)
        run([nvcc, "-std=c++17", "-gencode", "arch=compute_90,code=compute_90", "-DENABLE_BF16", f"-I{repo}", src, "-o",
             out])
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
