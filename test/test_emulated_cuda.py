"""The CUDA backend end to end under the device emulation (docs/emulation.md): build/emu/train_gpt2_ls
and build/emu/generate_gpt2_ls are the same trainer and generator sources compiled by g++ against
llmc/cuda/emu/ (kernels on CPU fibers, the emulated cuBLASLt and NCCL, ASan + UBSan), so
`--device cuda` runs every CUDA kernel, the cuBLASLt matmuls, the backend's memory plan and op order,
checkpoints and resume. EMULATED, not GPU-verified: nothing here says how a real H100 behaves.

Data and models: test_e2e.py's byte-level tiny Shakespeare (V = 256), models of head size 32 and 64
(the CUDA attention supports 32/64/128), with and without QK-norm, soft-cap and z-loss. Each emulated
launch runs under one thread schedule here (LLMC_EMU_SCHEDULES=forward): the two-schedule race check
runs on the kernel labs (make test-emu), and repeating it for every launch of a training run would
only cost time.

Tolerances:
  - BF16 emulated CUDA vs the CPU backend (fp32), per-step training loss: 1e-2 relative, the
    "AdamW step losses" tolerance of test/gpu/test_cuda_model.cu (bf16 activations and weights
    copies; ~2e-3 rounding per op random-walking through the layers and the steps).
  - FP32 emulated CUDA vs the CPU backend: same math in fp32 with another summation order; 1e-4
    relative per step, test_cuda_model.cu's FP32 tolerance.
  - resume on the emulated CUDA backend: bit-identical (same binary, same kernels, same order).
"""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from test_e2e import BIN, REPO, assert_same_run, byte_data, data_args, read_jsonl, train_records  # noqa: F401

EMU = REPO / "build" / "emu"
EMU_TRAIN, EMU_GEN = EMU / "train_gpt2_ls", EMU / "generate_gpt2_ls"
EMU_FP32_TRAIN = REPO / "build" / "emu-fp32" / "train_gpt2_ls"
ENV = dict(os.environ, LLMC_EMU_SCHEDULES="forward", UBSAN_OPTIONS="print_stacktrace=1")

BASE = ["-b", "2", "-t", "32", "--max-seq-len", "32", "-v", "0", "-s", "0", "--threads", "2"]
MODELS = {
    # L, C, NH -> head size 32; one global head, window 8
    "ls_hd32": ["--layers", "2", "--channels", "64", "--heads", "2", "--global-heads", "1", "--window", "8"],
    # head size 64, QK-norm and soft-capped attention logits
    "ls_hd64_qknorm_softcap": ["--layers", "2", "--channels", "128", "--heads", "2", "--global-heads", "1",
                               "--window", "4", "--qk-norm", "--attn-softcap", "5"],
    # plain MHSA, head size 32, with z-loss on the output softmax
    "mhsa_hd32_zloss": ["--layers", "2", "--channels", "64", "--heads", "2", "--global-heads", "2",
                        "--z-loss", "1e-2"],
}
TOL_BF16, TOL_FP32 = 1e-2, 1e-4


def need(path):
    if not Path(path).exists():
        pytest.fail(f"{path} is missing; build it with `make emu` (part of `make test`)"
                    + (" and `make emu PRECISION=FP32`" if "fp32" in str(path) else ""))
    return path


def run_bin(binary, args, device, check=True, timeout=600, env=ENV):
    p = subprocess.run([str(need(binary)), "--device", device] + [str(a) for a in args], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        pytest.fail(f"{binary.name} --device {device} {' '.join(map(str, args))} failed ({p.returncode}):\n"
                    f"{p.stderr[-4000:]}\n{p.stdout[-2000:]}")
    return p


def losses(out):
    return {r["step"]: r["loss"] for r in train_records(out / "metrics.jsonl")}


def assert_losses_close(got, ref, rtol, steps=None):
    steps = steps or sorted(ref)
    assert steps and all(s in got for s in steps), f"steps missing: {sorted(got)} vs {steps}"
    worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in steps)
    assert np.isfinite(worst) and worst <= rtol, \
        f"worst per-step loss relative error {worst:.3g} > {rtol:g}: " + \
        ", ".join(f"{s}: {got[s]:.5f} vs {ref[s]:.5f}" for s in steps)
    return worst


@pytest.mark.parametrize("name", list(MODELS))
def test_emulated_cuda_trains_like_the_cpu(byte_data, tmp_path, name):
    """20 steps on the emulated CUDA backend: the device is the emulated H100, the loss falls, and
    every step's loss is within the bf16 tolerance of the CPU backend's on the same batches."""
    args = data_args(byte_data) + BASE + MODELS[name] + ["-x", 20, "-l", "3e-3"]
    emu = run_bin(EMU_TRAIN, args + ["-o", tmp_path / "emu"], "cuda")
    assert "(emulated)" in emu.stdout, "the emulated build must say the device is emulated"
    run_bin(BIN, args + ["-o", tmp_path / "cpu"], "cpu", env=None)
    got, ref = losses(tmp_path / "emu"), losses(tmp_path / "cpu")
    assert got[20] < got[1] - 0.5, f"the emulated CUDA run does not train: {got[1]:.4f} -> {got[20]:.4f}"
    worst = assert_losses_close(got, ref, TOL_BF16)
    print(f"{name}: worst per-step loss relative error vs CPU {worst:.2e}")


def test_emulated_fp32_build_matches_the_cpu(byte_data, tmp_path):
    """PRECISION=FP32 emulated: the CUDA backend's math in fp32 equals the CPU backend's to ~1e-5."""
    args = data_args(byte_data) + BASE + MODELS["ls_hd64_qknorm_softcap"] + ["-x", 8, "-l", "3e-3"]
    run_bin(EMU_FP32_TRAIN, args + ["-o", tmp_path / "emu"], "cuda")
    run_bin(BIN, args + ["-o", tmp_path / "cpu"], "cpu", env=None)
    worst = assert_losses_close(losses(tmp_path / "emu"), losses(tmp_path / "cpu"), TOL_FP32)
    print(f"fp32 emulated vs CPU: worst per-step loss relative error {worst:.2e}")


def test_emulated_cuda_checkpoint_continues_on_the_cpu(byte_data, tmp_path):
    """A checkpoint written by the emulated CUDA backend is loaded by the CPU backend, which continues
    it (-y 1): its steps 11-20 match the emulated CUDA run's own continuation within the bf16
    tolerance, and --eval-only on the CPU reads the model file."""
    args = data_args(byte_data) + BASE + MODELS["ls_hd32"] + ["-k", "constant", "-u", 0, "-l", "2e-3"]
    full, part = tmp_path / "full", tmp_path / "part"
    run_bin(EMU_TRAIN, args + ["-o", full, "-x", 20, "-n", 10], "cuda")
    run_bin(EMU_TRAIN, args + ["-o", part, "-x", 10], "cuda")
    cpu_cont = tmp_path / "cpu_cont"
    shutil.copytree(part, cpu_cont)
    run_bin(BIN, args + ["-o", cpu_cont, "-x", 20, "-y", 1], "cpu", env=None)
    got, ref = losses(cpu_cont), losses(full)
    assert sorted(got) == list(range(1, 21))
    assert_losses_close(got, ref, TOL_BF16, steps=list(range(11, 21)))
    ev = run_bin(BIN, ["-e", part / "model_00000010.bin", "-j", f"{byte_data}/val_*.bin", "--eval-only", "-b", 2,
                       "-t", 32, "-m", 4, "--threads", 2], "cpu", env=None)
    assert "loss" in ev.stdout, ev.stdout


def test_emulated_cuda_kill_9_and_resume_is_bit_identical(byte_data, tmp_path):
    """kill -9 after the checkpoint of step 10, then -y 1 on the emulated CUDA backend: every loss
    and the final model and state files equal an uninterrupted emulated run's, bit for bit."""
    args = data_args(byte_data) + BASE + MODELS["ls_hd64_qknorm_softcap"] + \
        ["-x", 16, "-n", 5, "-l", "2e-3", "--keep-checkpoints", 2]
    full, killed = tmp_path / "full", tmp_path / "killed"
    run_bin(EMU_TRAIN, args + ["-o", full], "cuda")
    proc = subprocess.Popen([str(EMU_TRAIN), "--device", "cuda"] + [str(a) for a in args + ["-o", killed]], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.time() + 300
    while not (killed / "DONE_00000010").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = sorted(p.name for p in killed.glob("DONE_*"))
    assert done and done[-1] < "DONE_00000016", f"the run was not interrupted: {done}"
    run_bin(EMU_TRAIN, args + ["-o", killed, "-y", 1], "cuda")
    assert_same_run(full, killed, 16)


def test_emulated_cuda_generation_cached_equals_uncached(byte_data, tmp_path):
    """generate_gpt2_ls --device cuda (emulated): greedy decoding with the GPU KV cache gives the
    same tokens as a full forward per token (--no-cache), as on the CPU."""
    args = data_args(byte_data) + BASE + MODELS["ls_hd32"] + ["-x", 30, "-l", "3e-3"]
    run_bin(EMU_TRAIN, args + ["-o", tmp_path / "run"], "cuda")
    model = tmp_path / "run" / "model_00000030.bin"
    gen = ["-e", model, "--greedy", "-n", 40, "--print-ids", "--prompt-ids", "10,84,104,101"]
    cached = run_bin(EMU_GEN, gen, "cuda")
    uncached = run_bin(EMU_GEN, gen + ["--no-cache"], "cuda")
    ids = cached.stdout.split()
    assert len(ids) >= 40 and all(t.isdigit() and int(t) < 256 for t in ids), cached.stdout
    assert ids == uncached.stdout.split(), "cached and uncached greedy decoding differ on the emulated CUDA backend"
