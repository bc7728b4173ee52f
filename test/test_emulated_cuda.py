"""The CUDA backend end to end under the device emulation (docs/emulation.md): build/emu/train_gpt2_ls
and build/emu/generate_gpt2_ls are the same trainer and generator sources compiled by g++ against
dev/emu/ (kernels on CPU fibers, the emulated cuBLASLt and NCCL, ASan + UBSan), so
`--device cuda` runs every CUDA kernel, the cuBLASLt matmuls, the backend's memory plan and op order,
checkpoints and resume. EMULATED, not GPU-verified: nothing here says how a real H100 behaves.

Data and models: run_helpers.py's byte-level tiny Shakespeare (V = 256), models of head size 32 and 64
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
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from run_helpers import BIN, REPO, assert_same_run, data_args, need_emulated_build, read_jsonl, train_records

EMU = REPO / "build" / "emu"
EMU_TRAIN, EMU_GEN = EMU / "train_gpt2_ls", EMU / "generate_gpt2_ls"
EMU_FP32_TRAIN = REPO / "build" / "emu-fp32" / "train_gpt2_ls"
ENV = dict(os.environ, LLMC_EMU_SCHEDULES="forward", UBSAN_OPTIONS="print_stacktrace=1")

BASE = ["-b", "2", "-t", "32", "--max-seq-len", "32", "-v", "0", "-s", "0", "--threads", "2"]
# head size 32 (L 2, C 64, NH 2), one global and one local head with a window of 8
LS_HD32 = ["--layers", "2", "--channels", "64", "--heads", "2", "--global-heads", "1", "--window", "8"]
# head size 64, QK-norm, soft-capped attention logits and z-loss on the output softmax
LS_HD64_ALL = ["--layers", "2", "--channels", "128", "--heads", "2", "--global-heads", "1", "--window", "4",
               "--qk-norm", "--attn-softcap", "5", "--z-loss", "1e-2"]
TOL_BF16, TOL_FP32 = 1e-2, 1e-4
# The shared emulated run: 16 steps, constant LR, a checkpoint every 4 steps (all kept), QK-Clip at
# tau 0.25 (this run's max logits grow from ~0.1 to ~0.45: some steps clip a head, most do not), the
# near/far statistics at distance 3 (inside the local head's window of 8: both heads have far keys,
# and the 32 rows' distances cut the tiles).
FULL_STEPS = 16
FULL_NEAR = 3
FULL_ARGS = BASE + LS_HD32 + ["-k", "constant", "-u", 0, "-l", "3e-3", "-x", FULL_STEPS, "-n", 4,
                              "--keep-checkpoints", 0, "--qk-clip", "0.25", "--near", FULL_NEAR]


def run_bin(binary, args, device, check=True, timeout=900, env=ENV):
    p = subprocess.run([str(need_emulated_build(binary)), "--device", device] + [str(a) for a in args], cwd=REPO,
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


@pytest.fixture(scope="module")
def full_run(byte_data, tmp_path_factory):
    """One uninterrupted emulated CUDA run (16 steps, checkpoints at 4, 8, 12, 16; cuBLASLt's algorithms
    logged) and the CPU backend's run with the same flags."""
    d = tmp_path_factory.mktemp("emu_full")
    args = data_args(byte_data) + FULL_ARGS
    emu = run_bin(EMU_TRAIN, args + ["-o", d / "emu"], "cuda", env=dict(ENV, LLMC_CUBLASLT_ALGOS="1"))
    run_bin(BIN, args + ["-o", d / "cpu"], "cpu", env=None)
    return d / "emu", d / "cpu", emu


def test_emulated_cuda_trains_like_the_cpu_hd32(full_run):
    """The shared run: the device is the emulated H100, the loss falls, and every step's loss is
    within the bf16 tolerance of the CPU backend's on the same batches."""
    emu_dir, cpu_dir, emu = full_run
    assert "(emulated)" in emu.stdout, "the emulated build must say the device is emulated"
    got, ref = losses(emu_dir), losses(cpu_dir)
    assert got[FULL_STEPS] < got[1] - 0.5, f"the emulated CUDA run does not train: {got[1]:.4f} -> {got[FULL_STEPS]:.4f}"
    worst = assert_losses_close(got, ref, TOL_BF16)
    print(f"ls hd32: worst per-step loss relative error vs CPU {worst:.2e}")
    # QK-Clip ran on the emulated CUDA backend (scaled on the device: scale_params), at steps like the CPU's
    clipped = {r["step"]: r["qk_clipped"] for r in train_records(emu_dir / "metrics.jsonl")}
    clipped_cpu = {r["step"]: r["qk_clipped"] for r in train_records(cpu_dir / "metrics.jsonl")}
    assert sum(len(c) for c in clipped.values()) > 0, "tau 0.25 was meant to clip some head in this run"
    agree = sum(clipped[s] == clipped_cpu[s] for s in clipped)
    print(f"ls hd32: QK-Clip decisions equal to the CPU's on {agree} of {len(clipped)} steps")
    # bf16 rounding may flip a decision of a head whose max logit is within rounding of tau
    assert agree >= len(clipped) - 2, f"QK-Clip decisions differ from the CPU's: {clipped} vs {clipped_cpu}"


def test_emulated_cuda_trains_like_the_cpu_hd64_qknorm_softcap_zloss(byte_data, tmp_path):
    """20 steps of the head-size-64 model with every stabilizer on, against the CPU backend. Without
    --near the CUDA run computes no near/far statistics and its records omit them (the CPU computes
    them anyway, at the window). Seed 1, and a tolerance of 4e-3: the default seed's trajectory has
    a gradient-norm spike (24.4 at step 14), after which bf16 rounding differences grow past what
    the per-step tolerance models (worst error vs the CPU there: 7.4e-3 with c276bf2's classifier
    kernel, 1.2e-2 with 0137e48's, both at most 4.2e-4 up to step 13; at seed 11, a norm spike at
    step 19: 0.125 and 0.025). At seeds 1-10 both kernels gave 2.8e-4 to 1.6e-3, emulated; seed 1's
    largest gradient norm is 5.3. A spike is chaos, not a kernel's error: this test runs seed 1's
    trajectory and holds it to 4e-3 (2.5x the worst of those ten seeds). LLMC_CUBLASLT_ALGOS other
    than 1 logs no algorithm."""
    args = data_args(byte_data) + BASE + LS_HD64_ALL + ["-x", 20, "-l", "3e-3", "--seed", 1]
    p = run_bin(EMU_TRAIN, args + ["-o", tmp_path / "emu"], "cuda", env=dict(ENV, LLMC_CUBLASLT_ALGOS="0"))
    assert "cuBLASLt algorithm" not in p.stderr + p.stdout
    run_bin(BIN, args + ["-o", tmp_path / "cpu"], "cpu", env=None)
    got, ref = losses(tmp_path / "emu"), losses(tmp_path / "cpu")
    assert got[20] < got[1] - 0.5, f"the emulated CUDA run does not train: {got[1]:.4f} -> {got[20]:.4f}"
    z = [r["z_loss"] for r in train_records(tmp_path / "emu" / "metrics.jsonl")]
    assert all(v > 0 for v in z), "z-loss on but not reported"
    worst = assert_losses_close(got, ref, 4e-3)
    print(f"ls hd64 qk-norm softcap z-loss: worst per-step loss relative error vs CPU {worst:.2e}")
    emu, cpu = read_jsonl(tmp_path / "emu" / "logit_stats.jsonl"), read_jsonl(tmp_path / "cpu" / "logit_stats.jsonl")
    assert emu and all("near" not in r and not any("near_mass" in a or "far_max" in a for a in r["attn"]) for r in emu)
    assert cpu and all("near" in r and all("near_mass" in a and "far_max" in a for a in r["attn"]) for r in cpu)


def test_emulated_fp32_build_matches_the_cpu(byte_data, tmp_path):
    """PRECISION=FP32 emulated: the CUDA backend's math in fp32 equals the CPU backend's to ~1e-5, the
    near/far statistics (the scalar forward's, with QK-norm and soft-cap; distance 2 inside the window
    of 4) to the same order."""
    args = data_args(byte_data) + BASE + LS_HD64_ALL + ["-x", 6, "-l", "3e-3", "--near", 2]
    run_bin(EMU_FP32_TRAIN, args + ["-o", tmp_path / "emu"], "cuda")
    run_bin(BIN, args + ["-o", tmp_path / "cpu"], "cpu", env=None)
    worst = assert_losses_close(losses(tmp_path / "emu"), losses(tmp_path / "cpu"), TOL_FP32)
    print(f"fp32 emulated vs CPU: worst per-step loss relative error {worst:.2e}")
    worst_mass, worst_max = assert_near_far_close(tmp_path / "emu", tmp_path / "cpu", 2, 1e-4, 1e-5, 1e-4)
    print(f"near/far fp32 emulated vs CPU: worst near mass difference {worst_mass:.2e}, logits {worst_max:.2e}")


def test_cublaslt_algorithms_are_logged_once_per_problem(full_run):
    """LLMC_CUBLASLT_ALGOS=1: one stderr line per distinct matmul problem, when the heuristic picks its
    algorithm, with every configuration attribute read back (the emulation's one algorithm: cublasLt.h's
    defaults); none on stdout."""
    _, _, emu = full_run
    lines = [ln for ln in emu.stderr.splitlines() if ln.startswith("cuBLASLt algorithm: ")]
    problems = [ln.split(": ")[1] for ln in lines]
    assert lines and len(set(problems)) == len(problems), lines
    # forward qkv, attproj, fc, fcproj, LM head; backward dinp and dweight of each (C 64, V 256 padded)
    assert len(lines) >= 10, lines
    for ln in lines:
        assert ln.endswith(": algo 0 tile 0 stages 0 splitk 1 reduction 0 swizzle 0 custom 0 inner 0 cluster 0 "
                           "workspace 0 waves 1.000000"), ln
    assert "cuBLASLt algorithm" not in emu.stdout


def test_emulated_cuda_checkpoint_continues_on_the_cpu(byte_data, full_run, tmp_path):
    """The CPU backend resumes (-y 1) from the emulated CUDA run's step-8 checkpoint (model and
    training state written by the CUDA backend) and its steps 9-16 match the emulated run's own
    within the bf16 tolerance; --eval-only on the CPU reads the CUDA-written model file."""
    emu_dir, _, _ = full_run
    cont = tmp_path / "cpu_cont"
    shutil.copytree(emu_dir, cont)
    for step in (12, 16):  # leave step 8 the newest complete checkpoint
        (cont / f"DONE_{step:08d}").unlink()
    p = run_bin(BIN, data_args(byte_data) + FULL_ARGS + ["-o", cont, "-y", 1], "cpu", env=None)
    assert "resum" in (p.stdout + p.stderr).lower(), p.stdout[-2000:]
    got, ref = losses(cont), losses(emu_dir)
    assert sorted(got) == list(range(1, FULL_STEPS + 1))
    assert_losses_close(got, ref, TOL_BF16, steps=list(range(9, FULL_STEPS + 1)))
    ev = run_bin(BIN, ["-e", emu_dir / "model_00000008.bin", "-j", f"{byte_data}/val_*.bin", "--eval-only",
                       "-b", 2, "-t", 32, "-m", 4, "--threads", 2], "cpu", env=None)
    assert "loss" in ev.stdout, ev.stdout


def test_emulated_cuda_dumps_attention_maps_like_the_cpu(byte_data, full_run, tmp_path):
    """--eval-only --dump-attention on the emulated CUDA backend (llmc/cuda/attention_probs.cuh) on
    the run's step-16 checkpoint, T 29 (ragged): the global and the local head of both layers are
    row-stochastic, exactly 0 outside the causal window, and the CPU backend's maps of the same
    checkpoint within the bf16 tolerance (3e-2, as test/gpu/test_cuda_attention_probs.cu, which
    checks the maps' values on attention far from uniform; here the wiring: flag, files, format)."""
    emu_dir, _, _ = full_run
    heads = ["0:0", "0:1", "1:0", "1:1"]
    T, P = 29, 8  # LS_HD32: NH 2, G 1 (head 0 local, head 1 global), window 8
    maps = {}
    for device, binary, env in (("cuda", EMU_TRAIN, ENV), ("cpu", BIN, None)):
        out = tmp_path / device
        p = run_bin(binary, ["-e", emu_dir / f"model_{FULL_STEPS:08d}.bin", "-j", f"{byte_data}/val_*.bin",
                             "--eval-only", "-b", 1, "-t", T, "-m", 1, "--threads", 2,
                             "--dump-attention", ",".join(heads), "-o", out], device, env=env)
        assert p.stdout.count("attn_L") == len(heads), p.stdout
        maps[device] = {h: np.load(out / f"attn_L{h[0]}_H{h[2]}.npy") for h in heads}
    i, j = np.indices((T, T))
    for h in heads:
        g, c = maps["cuda"][h], maps["cpu"][h]
        assert g.shape == (T, T) and g.dtype == np.float32 and np.isfinite(g).all()
        visible = (j <= i) & ((j > i - P) if h.endswith(":0") else True)
        assert (g[~visible] == 0).all(), f"{h}: nonzero outside the window"
        assert np.abs(g.sum(axis=1) - 1).max() <= 1e-4, f"{h}: rows do not sum to 1"
        err = np.linalg.norm(g - c) / np.linalg.norm(c)
        print(f"attention map {h}: relative error vs the CPU {err:.2e}")
        assert err <= 3e-2, f"{h}: map differs from the CPU's by {err:.3g} relative"


def test_emulated_cuda_kill_9_and_resume_is_bit_identical(byte_data, full_run, tmp_path):
    """kill -9 after the checkpoint of step 8, then -y 1 on the emulated CUDA backend: every loss
    and the final model and state files equal the uninterrupted emulated run's, bit for bit."""
    emu_dir, _, _ = full_run
    args = data_args(byte_data) + FULL_ARGS
    killed = tmp_path / "killed"
    proc = subprocess.Popen([str(EMU_TRAIN), "--device", "cuda"] + [str(a) for a in args + ["-o", killed]], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.time() + 600
    while not (killed / "DONE_00000008").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = sorted(p.name for p in killed.glob("DONE_*"))
    assert done and done[-1] < f"DONE_{FULL_STEPS:08d}", f"the run was not interrupted: {done}"
    run_bin(EMU_TRAIN, args + ["-o", killed, "-y", 1], "cuda")
    assert_same_run(emu_dir, killed, FULL_STEPS)


def test_emulated_cuda_generation_cached_equals_uncached(full_run):
    """generate_gpt2_ls --device cuda (emulated): greedy decoding with the GPU KV cache gives the
    same tokens as a full forward per token (--no-cache), as on the CPU; with --cuda-graph 1 (each
    decode step one graph) and with the defaults (--cuda-graph auto and --pdl auto: the graphs and
    programmatic launches on the CUDA backend, the emulated device being sm_90) the same tokens, greedy
    and sampled, as with 0; with --pdl 1; and with --fused-decode 1 the same greedy tokens."""
    emu_dir, _, _ = full_run
    gen = ["-e", emu_dir / f"model_{FULL_STEPS:08d}.bin", "--greedy", "-n", 24, "--print-ids",
           "--prompt-ids", "10,84,104,101"]
    cached = run_bin(EMU_GEN, gen + ["--cuda-graph", 0, "--pdl", 0], "cuda")
    assert "decode steps as CUDA graphs" not in cached.stderr and "programmatic" not in cached.stderr, cached.stderr
    auto = run_bin(EMU_GEN, gen, "cuda", env=dict(ENV, LLMC_EMU_VERBOSE="1"))
    assert auto.stdout == cached.stdout, "--cuda-graph auto / --pdl auto changed the greedy tokens"
    summary = auto.stderr.splitlines()[-1]
    assert "decode steps as CUDA graphs" in summary and "programmatic dependent launch" in summary, summary
    launches = [ln for ln in auto.stderr.splitlines() if ln.startswith("emu: launch ")]
    assert launches and sum(ln.endswith(" programmatic") for ln in launches) > len(launches) - 3, launches[:3]
    uncached = run_bin(EMU_GEN, gen + ["--no-cache"], "cuda")
    ids = cached.stdout.split()
    assert len(ids) >= 24 and all(t.isdigit() and int(t) < 256 for t in ids), cached.stdout
    assert ids == uncached.stdout.split(), "cached and uncached greedy decoding differ on the emulated CUDA backend"
    graphed = run_bin(EMU_GEN, gen + ["--cuda-graph", 1, "--pdl", 0], "cuda")
    assert graphed.stdout == cached.stdout, "--cuda-graph 1 changed the greedy tokens"
    assert "decode steps as CUDA graphs" in graphed.stderr, graphed.stderr
    sample = [a for a in gen if a != "--greedy"] + ["--seed", 7, "--temperature", 1.5]
    sampled = [run_bin(EMU_GEN, sample + ["--cuda-graph", g], "cuda").stdout for g in (0, 1)]
    assert sampled[0] == sampled[1] and len(sampled[0].split()) >= 24, sampled
    # --pdl 1 (every kernel launched programmatic; the emulation refuses a thread that skips the wait):
    # the same tokens, with and without the decode graphs
    # (LLMC_EMU_VERBOSE: the emulator's launch lines say each kernel was launched so: a flag the generator
    # accepted and did not apply would give the same tokens)
    verbose = dict(ENV, LLMC_EMU_VERBOSE="1")
    for g in (0, 1):
        pdl = run_bin(EMU_GEN, gen + ["--cuda-graph", g, "--pdl", 1], "cuda", env=verbose)
        assert pdl.stdout == cached.stdout, f"--pdl 1 changed the greedy tokens (--cuda-graph {g})"
        launches = [ln for ln in pdl.stderr.splitlines() if ln.startswith("emu: launch ")]
        plain = [ln for ln in launches if not ln.endswith(" programmatic")]
        # only the backend's construction (its working copy of the weights) precedes the switch
        assert len(launches) > 50 and len(plain) <= 2 and all("copy_master_kernel" in ln for ln in plain), plain[:3]
        assert "programmatic dependent launch" in pdl.stderr.splitlines()[-1], pdl.stderr.splitlines()[-1]
    # --fused-decode 1 (the decode steps' own linear kernels, the one-launch attention): the same greedy
    # tokens here (not bit-identical logits: sums in another order), the emulator's launch lines name its
    # kernels (4 decode_linear a layer-step at least), and the summary says it ran
    fused = run_bin(EMU_GEN, gen + ["--fused-decode", 1], "cuda", env=verbose)
    assert fused.stdout == cached.stdout, "--fused-decode 1 changed the greedy tokens"
    launches = [ln for ln in fused.stderr.splitlines() if ln.startswith("emu: launch ")]
    assert sum("decode_linear" in ln for ln in launches) >= 24 and \
        any("attention_decode_one_launch_kernel" in ln for ln in launches), launches[-5:]
    assert "fused decode kernels" in fused.stderr.splitlines()[-1], fused.stderr.splitlines()[-1]
    bench = run_bin(EMU_GEN, ["-e", emu_dir / f"model_{FULL_STEPS:08d}.bin", "--bench", "--bench-batch", 1,
                              "--bench-prompt", 8, "--bench-contexts", 16, "--bench-steps", 2, "--bench-repeats", 1,
                              "--pdl", 1], "cuda", env=verbose)
    plain = [ln for ln in bench.stderr.splitlines() if ln.startswith("emu: launch ") and not ln.endswith(" programmatic")]
    assert json.loads(bench.stdout)["pdl"] == 1 and all("copy_master_kernel" in ln for ln in plain), plain[:3]
    assert json.loads(bench.stdout)["cuda_graph"] == 1, "--cuda-graph auto: the JSON records the graphs that ran"


@pytest.mark.parametrize("graph", [0, 1])
def test_emulated_cuda_bench_profile(full_run, graph):
    """generate_gpt2_ls --bench --bench-profile (emulated): after the timings, the profile of one prefill
    (of the last --bench-prompt length) and of the decode steps, tables on stderr and their JSON in the
    object on stdout, with the cuBLASLt calls counted (docs/generation.md): a KvLogits::Last prefill of (B, T) runs each layer's matmuls over
    B*T rows except the last layer's projection, fc and fc projection (over the B last rows), and the
    LM head over the B last rows; a decode step all of them over B rows. Per row, 2 x (qkv 3C^2, the
    projection C^2, fc and its projection 4C^2 each) = 24 C^2 FLOPs, 6 C^2 of them qkv's. With
    --cuda-graph 1 the profiled decode steps replay the graph captured at the second warm-up step and
    count its matmuls as the eager steps do (a build that does not count a replay's fails here)."""
    emu_dir, _, _ = full_run
    L, C, Vp, B, T, steps = 2, 64, 256, 2, 16, 4
    p = run_bin(EMU_GEN, ["-e", emu_dir / f"model_{FULL_STEPS:08d}.bin", "--bench", "--bench-profile",
                          "--bench-batch", B, "--bench-prompt", f"{T // 2},{T}", "--bench-contexts", 32,
                          "--bench-steps", steps,
                          "--bench-repeats", 1, "--cuda-graph", graph], "cuda")
    out = json.loads(p.stdout)
    prof = out["profile"]
    assert out["cuda_graph"] == graph and out["pdl"] == 0
    assert [r["T"] for r in out["prefill"]] == [T // 2, T]  # the profiled prefill is of the last length
    assert out["decode"][-1]["context"] == prof["decode_context"] == 32
    prefill_flops = 24 * (L - 1) * B * T * C * C + 6 * B * T * C * C + 18 * B * C * C + 2 * B * C * Vp
    decode_flops = 24 * L * B * C * C + 2 * B * C * Vp
    for what, n, flops in (("prefill", 1, prefill_flops), ("decode", steps, decode_flops)):
        t = prof[what]
        assert t["timed"] is False and t["steps"] == n, t
        assert t["gemms"]["calls_per_step"] == 4 * L + 1, t["gemms"]
        assert t["gemms"]["flops_per_step"] == flops, (what, t["gemms"])
        kernels = {k["kernel"]: k["calls_per_step"] for k in t["kernels"]}
        assert any(k.startswith("cublasLtMatmul") and c == 4 * L + 1 for k, c in kernels.items()), kernels
    assert "profile of 1 prefills (emulated device: launch counts, not times)" in p.stderr, p.stderr[-3000:]
    assert f"profile of {steps} decode steps (emulated device: launch counts, not times)" in p.stderr
    assert "cuBLASLt per step" not in p.stdout  # stdout is the JSON object alone


MPIRUN = shutil.which("mpirun")
RANK_STEPS = 3
RANK_ARGS = BASE[:] + LS_HD32 + ["-x", RANK_STEPS, "-l", "3e-3"]


@pytest.fixture(scope="module")
def one_rank_whole_batch(byte_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("emu_rank1")
    args = data_args(byte_data) + [str(a) for a in RANK_ARGS]
    args[args.index("-b") + 1] = "4"
    run_bin(EMU_TRAIN, args + ["-o", d / "out", "--threads", 1], "cuda")
    return d / "out"


@pytest.mark.parametrize("ranks,zero", [(2, 0), (2, 1), (4, 0), (4, 1)])
def test_emulated_nccl_ranks_train_the_rows_of_one_rank(byte_data, one_rank_whole_batch, tmp_path, ranks, zero):
    """mpirun -np N of the emulated trainer with --device cuda goes through the NCCL collective
    (llmc/cuda/collective_nccl.cuh over the emulated NCCL, one emulated device per rank) and, with
    B = 4 / N rows each, trains exactly the rows of one rank with B = 4: losses and gradient norms
    within rtol 1.5e-5, test_mpi.py's bound for the fp32 summation-order difference (each rank
    sums its rows, then the ranks are averaged). ZeRO-1 (-z 1) shards the AdamW state over ranks."""
    if MPIRUN is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but mpirun is missing (scripts/install_deps.sh installs OpenMPI)")
        pytest.skip("mpirun not found")
    args = data_args(byte_data) + [str(a) for a in RANK_ARGS]
    args[args.index("-b") + 1] = str(4 // ranks)
    out = tmp_path / "out"
    # Open MPI's own allocations are reported as leaks at exit (frames in its plugins): leak
    # detection off under mpirun; every other sanitizer check stays on.
    env = dict(ENV, LLMC_EMU_DEVICE_COUNT=str(ranks), ASAN_OPTIONS="detect_leaks=0")
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
           "-x", "LLMC_EMU_SCHEDULES", "-x", "LLMC_EMU_DEVICE_COUNT", "-x", "ASAN_OPTIONS", "-x", "UBSAN_OPTIONS",
           str(need_emulated_build(EMU_TRAIN)), "--device", "cuda"] + args + ["-o", str(out), "--threads", "1", "-z", str(zero)]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}\n{p.stdout[-2000:]}"
    assert f"data parallel: {ranks} processes (NCCL)" in p.stdout, p.stdout[-2000:]
    ref = {r["step"]: r for r in train_records(one_rank_whole_batch / "metrics.jsonl")}
    got = {r["step"]: r for r in train_records(out / "metrics.jsonl")}
    assert sorted(got) == sorted(ref) == list(range(1, RANK_STEPS + 1))
    for s in ref:
        for k in ["loss", "grad_norm"]:
            np.testing.assert_allclose(got[s][k], ref[s][k], rtol=1.5e-5, err_msg=f"step {s} {k}")


def test_emulated_nccl_qk_clip_zero1_equals_zero0(byte_data, tmp_path):
    """QK-Clip over 2 ranks on the emulated CUDA backend (NCCL): every rank scales its device weights
    (scale_params) from the same reduced statistics, and with -z 1 each rank also scales its host
    master shard (without that the next all-gather would undo the clip). Without gradient clipping
    ZeRO-1's host AdamW is the device AdamW's fp32 arithmetic per element, so -z 0 and -z 1 give the
    same losses, the same clipped heads and the same final model, bit for bit."""
    if MPIRUN is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but mpirun is missing (scripts/install_deps.sh installs OpenMPI)")
        pytest.skip("mpirun not found")
    steps = 6
    args = data_args(byte_data) + [str(a) for a in BASE + LS_HD32] + [
        "-x", str(steps), "-k", "constant", "-u", "0", "-l", "3e-3", "--grad-clip", "0", "--qk-clip", "0.15",
        "--threads", "1"]
    env = dict(ENV, LLMC_EMU_DEVICE_COUNT="2", ASAN_OPTIONS="detect_leaks=0")  # as in the test above
    for z in ["0", "1"]:
        cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "LLMC_EMU_SCHEDULES",
               "-x", "LLMC_EMU_DEVICE_COUNT", "-x", "ASAN_OPTIONS", "-x", "UBSAN_OPTIONS",
               str(need_emulated_build(EMU_TRAIN)), "--device", "cuda"] + args + ["-z", z, "-o", str(tmp_path / f"z{z}")]
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
        assert p.returncode == 0, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}\n{p.stdout[-2000:]}"
    ra, rb = (train_records(tmp_path / z / "metrics.jsonl") for z in ["z0", "z1"])
    assert [r["step"] for r in ra] == [r["step"] for r in rb] == list(range(1, steps + 1))
    assert [r["loss"] for r in ra] == [r["loss"] for r in rb]
    assert [r["qk_clipped"] for r in ra] == [r["qk_clipped"] for r in rb]
    assert sum(r["qk_clip_heads"] for r in ra) > 0, "tau 0.15 was meant to clip some head in this run"
    model = f"model_{steps:08d}.bin"
    assert (tmp_path / "z0" / model).read_bytes() == (tmp_path / "z1" / model).read_bytes()


def assert_near_far_close(emu_dir, cpu_dir, near, mass_atol, first_max_atol, max_atol):
    """Every step's near/far statistics (logit_stats.jsonl) of the emulated CUDA run against the CPU
    run's, per layer and head: near mass within mass_atol; near / far max logit within first_max_atol
    at step 1 (the same weights: only the kernels' arithmetic differs) and max_atol later (the weights
    drift apart, and the max logit with them); a head without far keys (far_max null) without them on
    both; and in the CUDA run max = max(near_max, far_max) exactly. Returns the worst differences."""
    emu, cpu = read_jsonl(emu_dir / "logit_stats.jsonl"), read_jsonl(cpu_dir / "logit_stats.jsonl")
    assert emu and [r["step"] for r in emu] == [r["step"] for r in cpu]
    worst_mass = worst_max = 0.0
    for re_, rc in zip(emu, cpu):
        assert re_["near"] == rc["near"] == near, f"step {re_['step']}: near {re_.get('near')} vs {rc.get('near')}"
        for ae, ac in zip(re_["attn"], rc["attn"]):
            where = f"step {re_['step']} layer {ae['layer']} head {ae['head']}"
            d = abs(ae["near_mass"] - ac["near_mass"])
            assert d <= mass_atol, f"{where}: near mass {ae['near_mass']} vs the CPU's {ac['near_mass']}"
            worst_mass = max(worst_mass, d)
            assert ae["max"] == max(v for v in [ae["near_max"], ae["far_max"]] if v is not None), where
            for key in ["near_max", "far_max"]:
                assert (ae[key] is None) == (ac[key] is None), f"{where}: {key} {ae[key]} vs the CPU's {ac[key]}"
                if ac[key] is not None:
                    d = abs(ae[key] - ac[key])
                    atol = first_max_atol if re_["step"] == 1 else max_atol
                    assert d <= atol, f"{where}: {key} {ae[key]} vs the CPU's {ac[key]}"
                    worst_max = max(worst_max, d)
    return worst_mass, worst_max


def test_emulated_cuda_near_far_stats_like_the_cpu(full_run):
    """--near on the emulated CUDA backend (the FA2-class forward's near/far statistics, bf16): every step's
    near mass and near / far max logit per layer and head agree with the CPU run's on the same batches.
    Tolerances (this run's logits lie below 0.5): at step 1, bf16 q and k against fp32 ones, 2e-3 on the
    logits (seen: 3e-4); later the bf16 weights drift from the CPU's (the losses' 1e-2), and the max
    logit, near/far or not, drifts with them (seen: up to 0.025 by step 16): 0.05. The near mass, a
    ratio of sums of probabilities, moves far less (seen: 2e-4): 2e-3, while a split one distance off
    moves the global head's mass by ~0.07 (the mean of 1/(i+1) over the rows i >= 3 of 32)."""
    emu_dir, cpu_dir, _ = full_run
    worst_mass, worst_max = assert_near_far_close(emu_dir, cpu_dir, FULL_NEAR, 2e-3, 2e-3, 0.05)
    print(f"near/far bf16 emulated vs CPU: worst near mass difference {worst_mass:.2e}, logits {worst_max:.2e}")


def test_emulated_cuda_split_tile_loops_train_like_the_cpu(byte_data, tmp_path):
    """Rows of 320 tokens (5 tiles of 64): the FA2-class kernels' chunk size chosen from the shape is 4
    tiles (llmc/core/attention_split.h; test/test_attention_split.cpp), so the global head's last query
    tile (forward, dQ) and first key tile (dK/dV: chunks aligned to the last query tile) run as two
    blocks each whose partials the last to arrive merges, through the trainer's own scratch (after the backward's D in its op scratch, the
    counters shared with the matmuls'). 6 steps with the near/far statistics at distance 3 against the
    CPU backend: per-step losses within the bf16 tolerance, near mass and near / far max logit within
    the tolerances of test_emulated_cuda_near_far_stats_like_the_cpu (these logits are as small)."""
    args = data_args(byte_data) + ["-b", "2", "-t", "320", "--max-seq-len", "320", "-v", "0", "-s", "0",
                                   "--threads", "2"] + LS_HD32[:8] + ["--window", "70"] + \
        ["-k", "constant", "-u", 0, "-l", "3e-3", "-x", 6, "-n", 0, "--near", 3]
    run_bin(EMU_TRAIN, args + ["-o", tmp_path / "emu"], "cuda")
    run_bin(BIN, args + ["-o", tmp_path / "cpu"], "cpu", env=None)
    worst = assert_losses_close(losses(tmp_path / "emu"), losses(tmp_path / "cpu"), TOL_BF16)
    worst_mass, worst_max = assert_near_far_close(tmp_path / "emu", tmp_path / "cpu", 3, 2e-3, 2e-3, 0.05)
    print(f"T 320 split: worst loss error {worst:.2e}, near mass {worst_mass:.2e}, logits {worst_max:.2e}")


# The queued step (llmc/train/train_step.h: no host wait inside the step, the clip factor and the
# non-finite skip decided on the device) runs when neither --skip-spikes nor --qk-clip needs the step's
# numbers on the host inside it; --skip-spikes with a threshold no z-score reaches forces the
# synchronous path without changing any decision. Both paths must give the same bits.
QUEUED_ARGS = BASE + LS_HD32 + ["-k", "constant", "-u", 0, "-l", "3e-3", "--grad-clip", "0.5"]
FORCE_SYNC = ["--skip-spikes", "1e30"]
STEP_KEYS = ["loss", "z_loss", "grad_norm", "lr", "loss_z", "norm_z", "skipped_spike", "skipped_nonfinite"]


def assert_same_records(ref_dir, got_dir, keys=STEP_KEYS):
    ref = {r["step"]: r for r in train_records(ref_dir / "metrics.jsonl")}
    got = {r["step"]: r for r in train_records(got_dir / "metrics.jsonl")}
    assert sorted(ref) == sorted(got) and ref, f"steps {sorted(ref)} vs {sorted(got)}"
    for st in ref:
        for key in keys:
            assert key in ref[st], f"step {st}: no {key} recorded"
            assert ref[st][key] == got[st][key], f"step {st}: {key} {ref[st][key]} != {got[st][key]}"
    return ref


def test_emulated_queued_step_equals_the_synchronous_step(byte_data, tmp_path):
    """8 steps with gradient clipping active and 2 micro-batches per step: the queued and the synchronous
    path record the same numbers every step (the logit statistics with their near/far split too) and
    write the same model and optimizer state."""
    args = data_args(byte_data) + QUEUED_ARGS + ["-x", 8, "-n", 8, "--total-batch-size", 128, "--near", 5]
    run_bin(EMU_TRAIN, args + ["-o", tmp_path / "queued"], "cuda")
    run_bin(EMU_TRAIN, args + FORCE_SYNC + ["-o", tmp_path / "sync"], "cuda")
    recs = assert_same_records(tmp_path / "sync", tmp_path / "queued")
    stats_q, stats_s = (read_jsonl(tmp_path / d / "logit_stats.jsonl") for d in ["queued", "sync"])
    assert len(stats_q) == 8 and all(r["near"] == 5 and "near_mass" in r["attn"][0] for r in stats_q)
    assert stats_q == stats_s, "the queued step's logit statistics differ from the synchronous step's"
    assert any(r["grad_norm"] > 0.5 for r in recs.values()), "clipping never active: the test would not see it"
    for name in ["model_00000008.bin", "state_00000008_00000.bin"]:
        assert (tmp_path / "sync" / name).read_bytes() == (tmp_path / "queued" / name).read_bytes(), f"{name} differs"


def test_emulated_queued_step_skips_non_finite_steps_like_the_loop(byte_data, tmp_path):
    """A learning rate of 1e30 overflows the weights after step 1: every later step has a non-finite loss
    or norm. The device must skip those updates exactly where the loop's rule does (train_step checks the
    device's verdict against the rule every step) and the records equal the synchronous path's."""
    args = data_args(byte_data) + BASE + LS_HD32 + ["-k", "constant", "-u", 0, "-l", "1e30", "-x", 4]
    run_bin(EMU_TRAIN, args + ["-o", tmp_path / "queued"], "cuda")
    run_bin(EMU_TRAIN, args + FORCE_SYNC + ["-o", tmp_path / "sync"], "cuda")
    recs = assert_same_records(tmp_path / "sync", tmp_path / "queued", ["loss", "grad_norm", "skipped_nonfinite"])
    skipped = [st for st, r in sorted(recs.items()) if r["skipped_nonfinite"]]
    assert skipped and skipped[0] >= 2 and skipped == list(range(skipped[0], 5)), f"skipped steps {skipped}"


def test_emulated_queued_step_resumes_bit_identically(byte_data, tmp_path):
    """The queued path: 4 steps and a checkpoint, then a resumed run to step 8, equal an uninterrupted
    8-step run bit for bit."""
    args = data_args(byte_data) + QUEUED_ARGS + ["-n", 4, "--keep-checkpoints", 0]
    run_bin(EMU_TRAIN, args + ["-x", 8, "-o", tmp_path / "whole"], "cuda")
    run_bin(EMU_TRAIN, args + ["-x", 4, "-o", tmp_path / "parts"], "cuda")
    run_bin(EMU_TRAIN, args + ["-x", 8, "-o", tmp_path / "parts", "-y", 1], "cuda")
    assert_same_run(tmp_path / "whole", tmp_path / "parts", 8)


def test_plot_run_draws_the_emulated_cuda_run_with_near(full_run):
    """scripts/plot_run.py reads a CUDA run with --near unchanged: the same five figures as for the CPU
    run, the near mass drawn for every layer and head of both runs."""
    sys.path.insert(0, str(REPO / "scripts"))
    import matplotlib.pyplot as plt
    import plot_run
    emu_dir, cpu_dir, _ = full_run
    runs = [plot_run.Run(str(emu_dir)), plot_run.Run(str(cpu_dir))]
    labels, title = plot_run.run_labels(runs)
    figures = dict(plot_run.build_figures(runs, labels, title, heads="all", threshold=10.0))
    assert sorted(figures) == ["entropy", "logits", "loss", "near_far_logits", "near_mass"]
    for layer in range(2):  # one axes per layer, one line per run and head
        lines = [ln for ln in figures["near_mass"].axes[layer].get_lines() if len(ln.get_xdata()) > 1]
        assert len(lines) == 2 * 2, (layer, len(lines))
    for fig in figures.values():
        plt.close(fig)
