"""Finding and running the external programs of the report: cuobjdump and nvdisasm (the CUDA
toolkit's bin/, else the PyPI wheels nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm that `make deps`
installs, else PATH), c++filt (binutils), nvcc and the host C++ compiler."""
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

# The wheels `make deps` installs (scripts/install_deps.sh, requirements.txt pins the versions).
WHEELS = {"cuobjdump": "nvidia-cuda-cuobjdump", "nvdisasm": "nvidia-cuda-nvdisasm"}


class ToolError(RuntimeError):
    """A required program is missing or failed; the message says which and how to fix it."""


def cuda_home():
    env = os.environ.get("CUDA_HOME")
    if env:
        return Path(env)
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


def _from_wheel(tool: str):
    try:
        dist = importlib.metadata.distribution(WHEELS[tool])
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == tool and f.parent.name == "bin":
            path = Path(dist.locate_file(f))
            if path.is_file() and os.access(path, os.X_OK):
                return path
    return None


def find_cuda_tool(tool: str) -> Path:
    """cuobjdump or nvdisasm: the toolkit's, else the wheel's, else PATH's; ToolError when none."""
    home = cuda_home()
    if home and (home / "bin" / tool).is_file():
        return home / "bin" / tool
    path = _from_wheel(tool)
    if path:
        return path
    found = shutil.which(tool)
    if found:
        return Path(found)
    raise ToolError(f"{tool} not found (not in the CUDA toolkit's bin/, not installed by pip for {sys.executable}, "
                    f"not on PATH); run `make deps` (pip install {WHEELS[tool]})")


def find_program(name: str, hint: str) -> Path:
    found = shutil.which(name)
    if not found:
        raise ToolError(f"{name} not found on PATH; {hint}")
    return Path(found)


def run(cmd: list, stdin: str = None) -> str:
    """stdout of cmd; ToolError naming the command and its stderr when it fails."""
    try:
        proc = subprocess.run([str(c) for c in cmd], input=stdin, capture_output=True, text=True)
    except OSError as e:
        raise ToolError(f"cannot run {cmd[0]}: {e}") from e
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-5:]
        raise ToolError(f"{Path(str(cmd[0])).name} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return proc.stdout


def demangle(names: list) -> dict:
    """{mangled: demangled} by one c++filt run (names c++filt leaves alone map to themselves)."""
    if not names:
        return {}
    cxxfilt = find_program("c++filt", "install binutils")
    out = run([cxxfilt], stdin="\n".join(names) + "\n").splitlines()
    if len(out) != len(names):
        raise ToolError(f"c++filt returned {len(out)} lines for {len(names)} names")
    return dict(zip(names, out))
