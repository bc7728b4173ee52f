"""The emulated device's per-step report (LLMC_EMU_REPORT, dev/emu/step_counters.h, docs/emulation.md):
what one optimizer step of `build/emu/train_gpt2_ls --device cuda` asks of the device - kernel
launches by kernel, cuBLASLt matmuls, copies, host synchronisations, NCCL calls. EMULATED counts of
API calls, not GPU timings.

What is checked:
  - the report's intervals: "before_step" s then "step" s for every step, in order;
  - a step repeats itself: steps 2 and 3 give identical records (step 1 also allocates);
  - the counts follow from the model's structure, derived here from the code's op list
    (llmc/cuda/gpt2_cuda.cuh, gpt2_cuda_step.cuh and the op headers), not from a previous run:
    cuBLASLt matmuls = 4 linear layers per block x (1 forward + 2 backward: dinp, dweight) + the LM head's 3;
    kernel launches per kernel family = a fixed part + a part per layer (PER_LAYER / FIXED below),
    at 1, 2 and 3 layers, so a launch added or removed anywhere changes the expectation;
  - work the loop does between steps (validation) is reported before the next step, not in it;
  - a step that QK-Clips scales on the device: no copy of the model, one scaling launch, no extra sync;
  - an unwritable report path is refused with a one-line error.
The launch tables pin today's op list: a change that fuses or splits kernels (issue 26) updates
them in the same commit, which is the point - the counts are measured, not assumed.
Data: a periodic token sequence (every batch holds the same distinct tokens); the step graph's test:
random tokens (every micro-batch holds other tokens at other positions).
"""
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from run_helpers import REPO, train_records, write_shard

EMU_TRAIN = Path(os.environ.get("EMU_TRAIN_GPT2_LS", REPO / "build" / "emu" / "train_gpt2_ls"))
ENV = dict(os.environ, LLMC_EMU_SCHEDULES="forward", UBSAN_OPTIONS="print_stacktrace=1")
# hd 32: one local head (window 8) and one global head
MODEL = ["--channels", "64", "--heads", "2", "--global-heads", "1", "--window", "8"]
BASE = ["-b", "2", "-t", "32", "--max-seq-len", "32", "-s", "0", "--threads", "2", "-x", "3"]
# the steps issued kernel by kernel, for the tests whose subject is a step's launches one by one (by
# default, --cuda-graph auto, step 2 is captured as a graph and step 3 replays it: the graph's tests)
EAGER = ["--cuda-graph", "0"]

# Kernel launches per optimizer step, by kernel family (a substring of the demangled kernel name),
# read from the op list of CudaBackend (forward, backward, grad_norm, adamw_update):
PER_LAYER = {  # every transformer block
    "attn_fwd_fa2_kernel": 1,  # attention forward (the FA2-class kernel of the BF16 build)
    "layernorm_forward_kernel": 2,  # the fused residual + LayerNorm after each branch
    # bias gradients of qkv, attproj, fc, fcproj (one launch each: grid_arrival.cuh; fc's also does
    # the GELU backward)
    "bias_sum_kernel": 4,
    # ln1, ln2 backward (their dw, db partials reduced after the backward; C 64: the row-in-registers kernel)
    "layernorm_backward_cached_kernel": 2,
    "attn_bwd_dot_kernel": 1,  # attention backward: D = rowsum(dO * O),
    "attn_bwd_kv_fa2_kernel": 1,  # dK/dV over key tiles (the FA2-class backward),
    "attn_bwd_q_fa2_kernel": 1,  # dQ over query tiles
}
FIXED = {  # once per step, whatever the depth
    "encoder_forward_kernel": 1,
    "layernorm_forward_kernel": 1,  # layer 0's ln1
    "attn_stats_reduce_kernel": 1,  # every layer's attention logit statistics (recorded every step)
    "classifier_kernel": 1,  # loss, lse and dlogits in one pass (the step's forward; its backward takes them)
    "classifier_summary_kernel": 1,  # the forward's loss and statistics summed on the device
    "layernorm_backward_cached_kernel": 1,  # lnf backward
    "reduce_layernorm_partials_kernel": 1,  # every LayerNorm's dw, db partials (2L + 1 of them)
    "encoder_backward_wte_kernel": 1,  # its positions grouped by token on the host (token_groups.h)
    "encoder_backward_wpe_kernel": 1,
    "global_norm_kernel": 1,  # global gradient norm (one launch: grid_arrival.cuh)
    "adamw_all_kernel": 1,  # one AdamW launch over every parameter tensor, writing the bf16 working copy
}


def expected_launches(L):
    fams = set(PER_LAYER) | set(FIXED)
    return {f: FIXED.get(f, 0) + PER_LAYER.get(f, 0) * L for f in fams}


def expected_matmuls(L):
    return 4 * 3 * L + 3


@pytest.fixture(scope="module")
def periodic_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("periodic")
    tokens = np.tile(np.arange(1, 17, dtype=np.uint16), 4000)  # period 16 < T: every window holds all 16
    write_shard(d / "train_000000.bin", tokens[:40000])
    write_shard(d / "val_000000.bin", tokens[40000:])
    (d / "meta.json").write_text(json.dumps({"vocab_size": 256, "eot": 0}))
    return d


@pytest.fixture(scope="module")
def varied_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("varied")
    rng = np.random.default_rng(5)
    # skewed (a few tokens in many positions, long runs in the encoder backward's grouping), no period
    tokens = np.minimum(rng.zipf(1.3, 44000), 255).astype(np.uint16)
    write_shard(d / "train_000000.bin", tokens[:40000])
    write_shard(d / "val_000000.bin", tokens[40000:])
    (d / "meta.json").write_text(json.dumps({"vocab_size": 256, "eot": 0}))
    return d


def run_report(data, tmp_path, name, extra, env_report=None):
    if not EMU_TRAIN.exists():
        pytest.fail(f"{EMU_TRAIN} is missing; build it with `make emu` (part of `make test`)")
    report = tmp_path / f"{name}.jsonl"
    env = dict(ENV, LLMC_EMU_REPORT=str(env_report or report))
    args = ["--device", "cuda", "-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin"] + BASE + extra
    p = subprocess.run([str(EMU_TRAIN)] + args, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    return p, report


def records(data, tmp_path, name, extra):
    p, report = run_report(data, tmp_path, name, extra)
    if p.returncode != 0:
        pytest.fail(f"emulated trainer failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return [json.loads(line) for line in report.read_text().splitlines()]


def family_counts(kernels):
    """Launches per family of PER_LAYER / FIXED; a kernel of no family is returned under its name."""
    fams = set(PER_LAYER) | set(FIXED)
    out = {}
    for name, n in kernels.items():
        match = [f for f in fams if f in name]
        assert len(match) <= 1, f"kernel {name} matches several families: {match}"
        key = match[0] if match else name
        out[key] = out.get(key, 0) + n
    return out


@pytest.mark.parametrize("L", [1, 2, 3])
def test_step_counts_repeat_and_follow_the_model_structure(periodic_data, tmp_path, L):
    recs = records(periodic_data, tmp_path, f"L{L}", ["--layers", str(L), "-v", "0"] + MODEL + EAGER)
    order = [(r["interval"], r["step"]) for r in recs]
    assert order == [("before_step", 1), ("step", 1), ("before_step", 2), ("step", 2), ("before_step", 3),
                     ("step", 3)], f"report intervals: {order}"
    steps = {r["step"]: r for r in recs if r["interval"] == "step"}
    s2, s3 = dict(steps[2], step=None), dict(steps[3], step=None)
    assert s2 == s3, f"steps 2 and 3 differ:\n{json.dumps(s2, indent=1)}\n{json.dumps(s3, indent=1)}"
    r = steps[2]
    assert r["launches"] > 0 and r["matmuls"] > 0, r
    assert r["launches"] == sum(r["kernels"].values())
    got, want = family_counts(r["kernels"]), expected_launches(L)
    diff = {k: f"{got.get(k, 0)} launched, {want.get(k, 0)} expected" for k in sorted(set(got) | set(want))
            if got.get(k, 0) != want.get(k, 0)}
    assert not diff, f"L={L}: launches by kernel family differ from the model's op list: {diff}"
    assert r["matmuls"] == expected_matmuls(L), f"L={L}: {r['matmuls']} cuBLASLt matmuls, expected {expected_matmuls(L)}"
    # every step moves its batch up and reads something back
    assert r["copies"]["HtoD"]["count"] > 0 and r["copies"]["DtoH"]["count"] > 0, r["copies"]
    assert r["nccl"] == {}, "one process: no NCCL collective"
    print(f"L={L}: {r['launches']} kernel launches + {r['matmuls']} cuBLASLt matmuls, host syncs {r['syncs']}")


def test_work_between_steps_is_not_counted_in_the_step(periodic_data, tmp_path):
    """Validation every step (-v 1) runs between steps: it shows up before the next step, and the
    step records equal those of a run without validation."""
    plain = records(periodic_data, tmp_path, "plain", ["--layers", "1", "-v", "0"] + MODEL + EAGER)
    val = records(periodic_data, tmp_path, "val", ["--layers", "1", "-v", "1", "--val-batches", "1"] + MODEL + EAGER)
    step = lambda rs, s: next(r for r in rs if r["interval"] == "step" and r["step"] == s)  # noqa: E731
    before = lambda rs, s: next(r for r in rs if r["interval"] == "before_step" and r["step"] == s)  # noqa: E731
    assert step(val, 2) == step(plain, 2)
    assert before(plain, 2)["launches"] == 0, before(plain, 2)
    assert before(val, 2)["launches"] > 0, "validation after step 1 must appear before step 2"


def test_no_host_synchronisation_inside_a_step(periodic_data, tmp_path):
    """The queued step (llmc/train/train_step.h): no host synchronisation between a step's begin and end
    marks; the host waits once per step, after the end mark, for the step's numbers (one
    cudaEventSynchronize, reported in the next "before_step" interval). --skip-spikes needs the numbers
    inside the step: that synchronous path waits inside it (the losses and statistics, the norm)."""
    recs = records(periodic_data, tmp_path, "sync", ["--layers", "1", "-v", "0"] + MODEL)
    for r in recs:
        if r["interval"] == "step" and r["step"] >= 2:
            assert r["host_syncs"] == 0, f"step {r['step']}: {r['syncs']}"
        if r["interval"] == "before_step" and r["step"] >= 2:
            assert r["syncs"] == {"cudaEventSynchronize": 1}, f"before step {r['step']}: {r['syncs']}"
    forced = records(periodic_data, tmp_path, "forced", ["--layers", "1", "-v", "0", "--skip-spikes", "1e30"] + MODEL)
    for r in forced:
        if r["interval"] == "step" and r["step"] >= 2:
            assert r["syncs"] == {"cudaStreamSynchronize": 2}, f"synchronous path, step {r['step']}: {r['syncs']}"


def test_qk_clip_scales_on_the_device_without_a_model_copy(periodic_data, tmp_path):
    """--qk-clip on the emulated CUDA backend: the clipped heads' q/k rows are scaled on the device
    (Backend::scale_params, llmc/cuda/param_scale.cuh), so a step that clips moves no copy of the
    model between host and device: its device-to-host and host-to-device bytes are each under 1/20
    of the parameters' 4 * P bytes (the generic round trip, get_params + set_params, moved 4 * P each
    way and relaunched the whole working-copy refresh), it launches the scaling kernel once, and it
    synchronises the host no more than the synchronous path does without QK-Clip (two
    cudaStreamSynchronize: the step's numbers, then the norm). Tau 1e-6: every step clips."""
    out = tmp_path / "out"
    p, report = run_report(periodic_data, tmp_path, "clip",
                           ["--layers", "2", "-v", "0", "--qk-clip", "1e-6", "-o", str(out)] + MODEL)
    if p.returncode != 0:
        pytest.fail(f"emulated trainer failed ({p.returncode}):\n{p.stderr[-3000:]}")
    recs = [json.loads(line) for line in report.read_text().splitlines()]
    plan = re.search(r"cuda memory plan \(\w+, (\d+) params", p.stdout + p.stderr)
    assert plan, f"no memory plan line in the output:\n{p.stdout[-2000:]}"
    model_bytes = 4 * int(plan.group(1))
    clipped = {r["step"]: r["qk_clip_heads"] for r in train_records(out / "metrics.jsonl")}
    assert sorted(clipped) == [1, 2, 3] and all(n > 0 for n in clipped.values()), f"tau 1e-6 must clip: {clipped}"
    steps = {r["step"]: r for r in recs if r["interval"] == "step"}
    for s, r in steps.items():
        moved = {d: r["copies"].get(d, {}).get("bytes", 0) for d in ("DtoH", "HtoD")}
        assert all(b * 20 < model_bytes for b in moved.values()), \
            f"step {s} clipped {clipped[s]} head(s) and copied {moved} bytes; the model is {model_bytes} bytes"
        launches = lambda family: sum(n for k, n in r["kernels"].items() if family in k)  # noqa: E731
        assert launches("scale_param_runs_kernel") == 1 and launches("copy_master_kernel") == 0, \
            f"step {s}: one scaling launch and no working-copy refresh expected: {r['kernels']}"
        if s >= 2:  # step 1 also allocates
            assert r["syncs"] == {"cudaStreamSynchronize": 2}, f"step {s}: {r['syncs']}"
    print(f"clipping steps copy {[steps[s]['copies'] for s in sorted(steps)]}; the model is {model_bytes} bytes")


def test_unwritable_report_path_is_refused(periodic_data, tmp_path):
    p, _ = run_report(periodic_data, tmp_path, "bad", ["--layers", "1", "-v", "0"] + MODEL,
                      env_report=tmp_path / "no" / "such" / "dir" / "r.jsonl")
    assert p.returncode != 0
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "LLMC_EMU_REPORT" in errors[0], p.stderr[-2000:]


def test_cuda_graph_step_is_its_graph_with_the_same_bits(varied_data, tmp_path):
    """--cuda-graph 1 (llmc/cuda/step_graph.cuh): 6 steps of 2 micro-batches (-d), a cosine schedule
    (the learning rate changes every step: it reaches the graph through page-locked memory), validation
    every 3 steps between them. Every micro-batch has other tokens: a replay must upload its own tokens
    and their grouping by token for the encoder backward (staged in page-locked memory), not the
    captured step's. The run's numbers and files are bit for bit those of --cuda-graph 0;
    step 1 is issued eagerly (it allocates), step 2 repeats it and is captured and launched as a graph,
    step 3 replays that graph: two graph launches (its parts: the host groups the tokens between them),
    the same kernels and matmuls as the eager step, no host synchronisation. The first validation grows the staging (a buffer moves), so step 4 is
    issued eagerly again, step 5 captured, step 6 replayed."""
    flags = ["--layers", "2", "-v", "3", "--val-batches", "2", "-x", "6", "-d", "128", "-k", "cosine", "-u", "3",
             "-l", "3e-3", "--near", "3"] + MODEL
    outs, recs = {}, {}
    for g in (0, 1):
        outs[g] = tmp_path / f"graph{g}"
        recs[g] = records(varied_data, tmp_path, f"graph{g}", flags + ["--cuda-graph", str(g), "-o", str(outs[g])])
    ref = {r["step"]: r for r in train_records(outs[0] / "metrics.jsonl")}
    got = {r["step"]: r for r in train_records(outs[1] / "metrics.jsonl")}
    assert sorted(ref) == sorted(got) == [1, 2, 3, 4, 5, 6]
    for s in ref:
        for key in ["loss", "z_loss", "grad_norm", "lr", "val_loss", "max_attn_logit", "out_max_logit"]:
            assert ref[s].get(key) == got[s].get(key), f"step {s}: {key} {ref[s].get(key)} != {got[s].get(key)}"
    # the replayed steps update with their own learning rate, not the one their graph was captured with
    assert ref[3]["lr"] != ref[2]["lr"] and ref[6]["lr"] != ref[5]["lr"], {s: ref[s]["lr"] for s in ref}
    for name in ["model_00000006.bin", "state_00000006_00000.bin", "logit_stats.jsonl"]:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), f"{name} differs"
    eager = {r["step"]: r for r in recs[0] if r["interval"] == "step"}
    graph = {r["step"]: r for r in recs[1] if r["interval"] == "step"}
    assert [graph[s]["graph_launches"] for s in range(1, 7)] == [0, 2, 2, 0, 2, 2], \
        {s: graph[s]["graph_launches"] for s in graph}
    assert all(eager[s]["graph_launches"] == 0 for s in eager)
    for s in (2, 3, 5, 6):  # captured and replayed: no host synchronisation (the grouping between the two
        assert graph[s]["host_syncs"] == 0, f"step {s}: {graph[s]['syncs']}"  # launches never waits)
    for s in (3, 6):  # replays: the eager step's work, as the graph's two launches
        assert graph[s]["kernels"] == eager[s]["kernels"] and graph[s]["matmuls"] == eager[s]["matmuls"], s
        assert graph[s]["copies"] == eager[s]["copies"], f"step {s}: {graph[s]['copies']} vs {eager[s]['copies']}"


@pytest.mark.parametrize("extra, words, graph_launches", [
    ([], "one CUDA graph a step once its shapes repeat (--cuda-graph auto)", [0, 2, 2]),
    (["--cuda-graph", "0"], "kernel by kernel (--cuda-graph 0)", [0, 0, 0]),
    (["--skip-spikes", "1e30"], "kernel by kernel (--cuda-graph auto: --skip-spikes decides on the host inside "
                                "the step)", [0, 0, 0]),
    (["--qk-clip", "1e30"], "kernel by kernel (--cuda-graph auto: --qk-clip rescales weights on the host inside "
                            "the step)", [0, 0, 0]),
    (["-d", "128"], "kernel by kernel (--cuda-graph auto: 2 micro-batches a step, which load while the device "
                    "runs; --cuda-graph 1 for one graph)", [0, 0, 0]),
])
def test_cuda_graph_auto_takes_the_graph_where_a_step_can_run_as_one(periodic_data, tmp_path, extra, words,
                                                                      graph_launches):
    """--cuda-graph auto, the default: the graph wherever a step can run as one and has one micro-batch
    (step 1 eager, step 2 captured and launched, step 3 replayed), else kernel by kernel; the run header
    says which and, under auto, what keeps the graph off. The numbers are those of --cuda-graph 0 with the
    same flags, bit for bit (thresholds no step reaches: --skip-spikes and --qk-clip change no number)."""
    out = tmp_path / "run"
    p, report = run_report(periodic_data, tmp_path, "auto", ["--layers", "1", "-v", "0", "-o", str(out)] + MODEL + extra)
    assert p.returncode == 0, p.stderr[-3000:]
    # the line ends with the words of --pdl auto (on here; test_pdl_auto_is_on_where_...), after these
    pdl = "; kernels with programmatic dependent launch (--pdl auto)"
    assert f"  steps: {words}{pdl}\n" in p.stdout, p.stdout[-2000:]
    recs = [json.loads(line) for line in report.read_text().splitlines()]
    assert [r["graph_launches"] for r in recs if r["interval"] == "step"] == graph_launches
    ref = tmp_path / "eager"
    p0, _ = run_report(periodic_data, tmp_path, "eager",
                       ["--layers", "1", "-v", "0", "-o", str(ref)] + MODEL + extra +
                       ([] if "--cuda-graph" in extra else EAGER))
    assert p0.returncode == 0, p0.stderr[-3000:]
    keys = ["loss", "grad_norm", "max_attn_logit", "out_max_logit"]
    got = [[r.get(k) for k in keys] for r in train_records(out / "metrics.jsonl")]
    assert got == [[r.get(k) for k in keys] for r in train_records(ref / "metrics.jsonl")] and len(got) == 3
    assert (out / "model_00000003.bin").read_bytes() == (ref / "model_00000003.bin").read_bytes()


def test_samples_during_training_are_the_same_with_the_default_graph(periodic_data, tmp_path):
    """Under --cuda-graph auto the samples the loop prints (-s) decode through the KV cache with each
    decode step as one CUDA graph (CudaBackend::use_step_graph): the same text as --cuda-graph 0."""
    texts = {}
    for name, g in (("auto", []), ("eager", EAGER)):
        out = tmp_path / name
        args = ["--device", "cuda", "-i", f"{periodic_data}/train_*.bin", "-j", f"{periodic_data}/val_*.bin",
                "-b", "2", "-t", "32", "--max-seq-len", "32", "-s", "1", "-g", "12", "--threads", "2", "-x", "3",
                "--layers", "1", "-v", "0", "-o", str(out)] + MODEL + g
        p = subprocess.run([str(EMU_TRAIN)] + args, cwd=REPO, capture_output=True, text=True, timeout=600, env=ENV)
        assert p.returncode == 0, p.stderr[-3000:]
        texts[name] = (out / "samples.txt").read_text()
    assert texts["auto"] == texts["eager"] and texts["auto"].count("step") >= 3, texts


def test_cuda_graph_header_line_is_the_cuda_backends_only(periodic_data, tmp_path):
    """The CPU backend has no step graph: its run header has no steps line, whatever --cuda-graph says
    (except 1, refused below)."""
    for g in (["--cuda-graph", "auto"], ["--cuda-graph", "0"]):
        args = ["--device", "cpu", "-i", f"{periodic_data}/train_*.bin", "-j", f"{periodic_data}/val_*.bin"] + \
            BASE + ["--layers", "1", "-v", "0", "-x", "1"] + MODEL + g
        p = subprocess.run([str(EMU_TRAIN)] + args, cwd=REPO, capture_output=True, text=True, timeout=600, env=ENV)
        assert p.returncode == 0, p.stderr[-2000:]
        assert "  steps: " not in p.stdout, p.stdout[-2000:]


@pytest.mark.parametrize("extra, needle", [
    (["--device", "cpu"], "--cuda-graph 1 needs the CUDA backend"),
    (["--qk-clip", "100"], "--cuda-graph 1 replays the queued step"),
    (["--skip-spikes", "6"], "--cuda-graph 1 replays the queued step"),
])
def test_cuda_graph_refuses_what_it_cannot_replay(periodic_data, tmp_path, extra, needle):
    """A run that would not use the graph is refused with one line, not run without it."""
    args = ["-i", f"{periodic_data}/train_*.bin", "-j", f"{periodic_data}/val_*.bin"] + BASE + \
        ["--layers", "1", "-v", "0", "--cuda-graph", "1"] + MODEL + extra
    if "--device" not in extra:
        args = ["--device", "cuda"] + args
    p = subprocess.run([str(EMU_TRAIN)] + args, cwd=REPO, capture_output=True, text=True, timeout=600, env=ENV)
    assert p.returncode != 0, p.stderr[-2000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], p.stderr[-2000:]


def test_profile_steps_counts_the_profiled_step(periodic_data, tmp_path):
    """--profile-steps 1 on the emulated device (llmc/cuda/kernel_profiler.cuh): step 3 (after 2 warm-up
    steps) is profiled, with validation every step (-v 1) between the steps; its table counts the launches
    of the model's op list by family (expected_launches) and its cuBLASLt matmuls, untimed, and
    profile.json holds the same rows."""
    out = tmp_path / "run"
    p, report = run_report(periodic_data, tmp_path, "profile",
                           ["--layers", "2", "-v", "1", "--profile-steps", "1", "-o", str(out)] + MODEL)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "profile of 1 training steps (emulated device: launch counts, not times)" in p.stdout
    prof = json.loads((out / "profile.json").read_text())
    assert prof["timed"] is False and prof["steps"] == 1 and "step_us" not in prof
    rows = {r["kernel"]: r["calls_per_step"] for r in prof["kernels"]}
    matmul_rows = [k for k in rows if k.startswith("cublasLtMatmul")]
    assert len(matmul_rows) == 1 and rows.pop(matmul_rows[0]) == expected_matmuls(2)
    got, want = family_counts(rows), expected_launches(2)
    assert got == want, f"profiled launches by family {got}, the op list's {want}"
    step3 = [json.loads(line) for line in report.read_text().splitlines()][-1]
    assert step3["interval"] == "step" and step3["step"] == 3
    assert prof["activities_per_step"] == step3["launches"] + step3["matmuls"] and prof["dropped_records"] == 0
    for name, n in rows.items():
        assert f"{n:10.1f}  {name}\n" in p.stdout, name


# cublasLt.h: CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128 (GELU = 32, aux output = 128)
EPILOGUE_BIAS_BIT, EPILOGUE_AUX_BIT = 4, 128


@pytest.mark.parametrize("graph", [[], EAGER], ids=["graph", "eager"])
def test_profile_counts_the_steps_gemms(periodic_data, tmp_path, graph):
    """--profile-steps counts the profiled step's cuBLASLt calls (llmc/cuda/matmul.cuh) whether the step
    replays its graph (step 3 under --cuda-graph auto) or is issued kernel by kernel: calls and FLOPs
    equal the emulated cuBLASLt's own count of that step (dev/emu/step_counters.h) and the model's
    3 x (24 L N C^2 + 2 N C Vp) (forward, dinp, dweight); each problem's bytes are its operands read or
    written once (dweight's fp32 D is accumulated into, so read too)."""
    L, N, C, Vp = 2, 2 * 32, 64, 256
    out = tmp_path / "run"
    p, report = run_report(periodic_data, tmp_path, "gemms",
                           ["--layers", str(L), "-v", "0", "--profile-steps", "1", "-o", str(out)] + MODEL + graph)
    assert p.returncode == 0, p.stderr[-3000:]
    step3 = [json.loads(line) for line in report.read_text().splitlines()][-1]
    assert step3["interval"] == "step" and step3["step"] == 3
    g = json.loads((out / "profile.json").read_text())["gemms"]
    assert g["calls_per_step"] == step3["matmuls"] == expected_matmuls(L)
    assert g["flops_per_step"] == step3["matmul_flops"] == 3 * (24 * L * N * C * C + 2 * N * C * Vp)
    assert "us_per_step" not in g and "tflops" not in g  # untimed
    total_bytes = 0
    for prob in g["problems"]:
        f = dict(kv.split("=") for kv in prob["problem"].split())
        m, n, k, epi = int(f["m"]), int(f["n"]), int(f["k"]), int(f["epilogue"])
        ab, d = {"bf16": 2, "f32": 4}[f["ab"]], {"bf16": 2, "f32": 4}[f["d"]]
        one = (m * k + k * n) * ab + m * n * d * (2 if f["d"] == "f32" else 1) + \
            (m * d if epi & EPILOGUE_BIAS_BIT else 0) + (m * n * d if epi & EPILOGUE_AUX_BIT else 0)
        assert prob["flops_per_step"] == 2 * m * n * k * prob["calls_per_step"], prob
        assert prob["bytes_per_step"] == one * prob["calls_per_step"], prob
        total_bytes += prob["bytes_per_step"]
    assert g["bytes_per_step"] == total_bytes
    assert (f"cuBLASLt per step: {expected_matmuls(L):.1f} calls, {g['flops_per_step'] / 1e9:.3f} GFLOP (2 m n k)"
            in p.stdout), p.stdout[-3000:]


@pytest.mark.parametrize("graph, extra", [("0", ["--qk-clip", "1e-6"]), ("1", ["--qk-norm"])])
def test_pdl_launches_every_step_kernel_programmatic_with_the_same_bits(varied_data, tmp_path, graph, extra):
    """--pdl 1 (llmc/cuda/launch.cuh LaunchStream, dev/emu/griddep.h): every kernel launch of a training
    step carries programmatic stream serialization, kernel by kernel (with QK-Clip's scaling, every step)
    and in the step graph (with QK-norm's kernels), and the emulation refuses a thread of such a grid that
    ends without griddepcontrol.wait: so every kernel the step runs waits. The numbers and files are bit
    for bit those of --pdl 0 (which launches none programmatic), and the run header says so; so is an
    --eval-only of the run's checkpoint."""
    flags = ["--layers", "2", "-v", "0", "-x", "4", "-l", "3e-3", "--near", "3", "--cuda-graph", graph] + MODEL + extra
    outs, recs, heads = {}, {}, {}
    for pdl in (0, 1):
        outs[pdl] = tmp_path / f"pdl{pdl}"
        p, report = run_report(varied_data, tmp_path, f"pdl{pdl}", flags + ["--pdl", str(pdl), "-o", str(outs[pdl])])
        assert p.returncode == 0, p.stderr[-3000:]
        heads[pdl] = p.stdout
        recs[pdl] = [json.loads(line) for line in report.read_text().splitlines()]
    steps = {pdl: [r for r in recs[pdl] if r["interval"] == "step"] for pdl in (0, 1)}
    assert len(steps[1]) == 4 and all(r["launches"] > 0 for r in steps[1])
    assert all(r["programmatic_launches"] == r["launches"] for r in steps[1]), \
        [(r["step"], r["programmatic_launches"], r["launches"]) for r in steps[1]]
    assert all(r["programmatic_launches"] == 0 for r in recs[0])
    assert [r["kernels"] for r in steps[0]] == [r["kernels"] for r in steps[1]]
    # the options' kernels ran in those steps (QK-Clip's scaling every step at this threshold; QK-norm's)
    want = "scale_param_runs_kernel" if "--qk-clip" in extra else "qknorm_forward"
    assert all(any(want in k for k in r["kernels"]) for r in steps[1]), [list(r["kernels"]) for r in steps[1]]
    keys = ["loss", "grad_norm", "max_attn_logit", "out_max_logit"]
    got = [[r.get(k) for k in keys] for r in train_records(outs[1] / "metrics.jsonl")]
    assert got == [[r.get(k) for k in keys] for r in train_records(outs[0] / "metrics.jsonl")] and len(got) == 4
    for name in ["model_00000004.bin", "logit_stats.jsonl"]:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), f"{name} differs"
    assert "kernels with programmatic dependent launch (--pdl 1)" in heads[1]
    assert "programmatic" not in heads[0]
    if graph == "1":
        return  # --eval-only runs no step graph: its check below runs once, in the kernel-by-kernel case
    # --eval-only (no step markers: the emulator's launch lines, LLMC_EMU_VERBOSE, say how each kernel ran)
    evals = {}
    for pdl in (0, 1):
        # 4 batches, not all 62 (--eval-only's default): every batch runs the same kernels
        args = ["--device", "cuda", "--eval-only", "-e", str(outs[0] / "model_00000004.bin"), "-j",
                f"{varied_data}/val_*.bin", "-b", "2", "-t", "32", "-m", "4", "--threads", "2", "--pdl", str(pdl)]
        p = subprocess.run([str(EMU_TRAIN)] + args, cwd=REPO, capture_output=True, text=True, timeout=600,
                           env=dict(ENV, LLMC_EMU_VERBOSE="1"))
        assert p.returncode == 0, p.stderr[-3000:]
        launches = [ln for ln in p.stderr.splitlines() if ln.startswith("emu: launch ")]
        plain = [ln for ln in launches if not ln.endswith(" programmatic")]
        # with --pdl 1 only the backend's construction (its working copy of the initial weights) precedes it
        assert launches and (len(plain) == len(launches) if pdl == 0 else
                             len(plain) <= 1 and all("copy_master_kernel" in ln for ln in plain)), plain[:3]
        evals[pdl] = p.stdout
    assert "kernels with programmatic dependent launch (--pdl 1)" in evals[1] and "programmatic" not in evals[0]
    strip = [re.sub(r"; kernels with programmatic dependent launch \(--pdl 1\)", "", e) for e in (evals[0], evals[1])]
    assert strip[0] == strip[1] and "loss" in evals[0], evals


def test_pdl_auto_is_on_where_the_device_has_it_and_off_for_a_profile(periodic_data, tmp_path):
    """--pdl auto, the default: on the (emulated sm_90) CUDA backend every step launch is programmatic and
    the run header says "(--pdl auto)", with the numbers of --pdl 0; with --profile-steps it is off (no
    programmatic launch, no such words), not refused; on the CPU backend it is off, not refused."""
    flags = ["--layers", "1", "-v", "0"] + MODEL
    outs, recs, heads = {}, {}, {}
    for name, extra in [("auto", []), ("off", ["--pdl", "0"]), ("profiled", ["--profile-steps", "1"])]:
        outs[name] = tmp_path / name
        p, report = run_report(periodic_data, tmp_path, name, flags + extra + ["-o", str(outs[name])])
        assert p.returncode == 0, p.stderr[-3000:]
        heads[name] = p.stdout
        recs[name] = [json.loads(line) for line in report.read_text().splitlines()]
    steps = [r for r in recs["auto"] if r["interval"] == "step"]
    assert len(steps) == 3 and all(r["programmatic_launches"] == r["launches"] > 0 for r in steps), steps
    assert "kernels with programmatic dependent launch (--pdl auto)" in heads["auto"]
    for name in ("off", "profiled"):
        assert all(r["programmatic_launches"] == 0 for r in recs[name]) and "programmatic" not in heads[name]
    keys = ["loss", "grad_norm", "max_attn_logit"]
    assert [[r[k] for k in keys] for r in train_records(outs["auto"] / "metrics.jsonl")] == \
        [[r[k] for k in keys] for r in train_records(outs["off"] / "metrics.jsonl")]
    assert json.loads((outs["auto"] / "config.json").read_text())["train"]["pdl"] == "auto"
    cpu = subprocess.run([str(EMU_TRAIN), "--device", "cpu", "-i", f"{periodic_data}/train_*.bin"] + BASE + flags +
                         ["-o", str(tmp_path / "cpu")], cwd=REPO, capture_output=True, text=True, timeout=600, env=ENV)
    assert cpu.returncode == 0 and "programmatic" not in cpu.stdout, cpu.stderr[-2000:]


@pytest.mark.parametrize("extra, needle", [
    (["--device", "cpu"], "--pdl 1 needs the CUDA backend"),
    (["--device", "cpu", "--eval-only"], "--pdl 1 needs the CUDA backend"),
    (["--device", "cuda", "--profile-steps", "1"], "--profile-steps times each kernel alone, and --pdl 1 lets"),
])
def test_pdl_refuses_what_it_cannot_apply(periodic_data, tmp_path, extra, needle):
    """--pdl 1 on the CPU backend (training or --eval-only), or with a per-kernel profile (whose kernel
    spans would include their waits), is refused with one line, not run without it."""
    ckpt = tmp_path / "run" / "model_00000001.bin"
    if "--eval-only" in extra:  # a checkpoint to evaluate, trained here on the CPU
        base = ["--device", "cpu", "-i", f"{periodic_data}/train_*.bin"] + BASE + ["--layers", "1", "-v", "0", "-x",
                                                                                  "1", "-o", str(tmp_path / "run")]
        p = subprocess.run([str(EMU_TRAIN)] + base + MODEL, cwd=REPO, capture_output=True, text=True, timeout=600, env=ENV)
        assert p.returncode == 0 and ckpt.exists(), p.stderr[-2000:]
        args = ["-e", str(ckpt), "-j", f"{periodic_data}/val_*.bin", "-b", "2", "-t", "32", "--pdl", "1"] + extra
    else:
        args = ["-i", f"{periodic_data}/train_*.bin", "-j", f"{periodic_data}/val_*.bin"] + BASE + \
            ["--layers", "1", "-v", "0", "--pdl", "1"] + MODEL + extra
    p = subprocess.run([str(EMU_TRAIN)] + args, cwd=REPO, capture_output=True, text=True, timeout=600, env=ENV)
    assert p.returncode != 0, p.stderr[-2000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], p.stderr[-2000:]
