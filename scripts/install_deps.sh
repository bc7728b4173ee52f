#!/usr/bin/env bash
# Installs everything the build and the CPU tests need. Idempotent: safe to run again.
#   Debian: CLI11, nlohmann/json, Catch2 v2 (header-only), OpenMPI, Boost.Context (the fibers of
#           the device emulation, make emu), clang with libclang-rt (libFuzzer, make fuzz-smoke),
#           clang-format-14 (make format-check, part of make test).
#   PyPI:   requirements.txt (numpy, tiktoken, sentencepiece, tqdm, pytest, matplotlib; cuobjdump and
#           nvdisasm as the wheels nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm, pinned, for
#           dev/cuda/sass_report, which finds them in the wheel without PATH changes);
#           requirements-test.txt (torch, transformers, safetensors: test/test_export_hf.py).
# The CUDA toolkit (nvcc, cuBLAS/cuBLASLt, NCCL) is not installed here: with it, make builds the GPU
# targets too; without it, the CPU programs and tests only (the Makefile says so).
set -euo pipefail
cd "$(dirname "$0")/.."
debs=(libcli11-dev nlohmann-json3-dev catch2 libopenmpi-dev openmpi-bin libboost-context-dev clang libclang-rt-14-dev clang-format-14)
missing=()
for p in "${debs[@]}"; do
  # "install ok installed" only: a removed package keeps its config files and dpkg -s still succeeds
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "install_deps: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "install_deps: Debian packages present"
fi
PYTHON=${PYTHON:-python3}
# the pinned versions of requirements.txt's '==' lines installed, and the modules importable
pinned_ok() {
  $PYTHON - <<'PY' 2>/dev/null
import importlib.metadata as md, re, sys
for line in open("requirements.txt"):
    m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
    if m and md.version(m.group(1)) != m.group(2):
        sys.exit(1)
import numpy, tiktoken, sentencepiece, tqdm, pytest, matplotlib
PY
}
if ! pinned_ok; then
  echo "install_deps: pip install -r requirements.txt"
  $PYTHON -m pip install -q -r requirements.txt
else
  echo "install_deps: Python packages present"
fi
if ! $PYTHON -c "import torch, transformers, safetensors" 2>/dev/null; then
  echo "install_deps: pip install -r requirements-test.txt (torch, transformers, safetensors; several GB, minutes)"
  $PYTHON -m pip install -q -r requirements-test.txt
else
  echo "install_deps: Python test packages present"
fi
command -v nvcc >/dev/null || echo "install_deps: note: nvcc not on PATH; make builds the trainer and the generator for the CPU only (the GPU targets and the emulated GPU tests need the CUDA toolkit)" >&2
