"""End-to-end tests of the train_gpt2_ls binary (built by `make train_gpt2_ls`), run from the
repository root: training lowers the loss, kill-and-resume is bit-identical to an uninterrupted
run, the metrics and logit-statistics files follow docs/formats.md, bad flags and bad
checkpoints fail with one line and leave existing files untouched, --eval-only and --dump-logits.

Most tests use the byte-level shards of tiny Shakespeare of the `byte_data` fixture (test/conftest.py,
test/run_helpers.py: vocabulary 256, so a tiny model takes milliseconds per step); one test trains on
the real GPT-2-BPE shards of data/shards/tinyshakespeare_gpt2 (`make data-tinyshakespeare`; created
here when missing).
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from run_helpers import (BIN, REPO, TINY, assert_refused, assert_same_run, data_args, dir_hashes, flip_last_token_bit,
                         gpt2_tinyshakespeare, read_jsonl, run, train_records)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dev" / "reference"))
from checkpoint import header_checksum  # noqa: E402

# The binary was built by nvcc (it links cuBLAS), not by the host compiler (`make cpu`, or make without nvcc).
# nvcc's build names cuBLASLt's library, which it loads when it creates the CUDA backend
# (llmc/cuda/cublaslt_loader.cpp)
CUDA_BUILD = BIN.exists() and b"libcublasLt.so." in BIN.read_bytes()
L, NH = 2, 4  # TINY's layers and heads


@pytest.fixture(scope="session")
def trained(byte_data, tmp_path_factory):
    """A finished 20-step run with checkpoints at 10 and 20 (the reference for several tests)."""
    out = tmp_path_factory.mktemp("trained")
    p = run(data_args(byte_data) + TINY + ["-o", out, "-x", 20, "-n", 10, "-v", 5, "-m", 4, "-s", 7, "-g", 16,
                                           "--logit-stats-every", 3, "-l", "3e-3", "-u", 3])
    return out, p


# ---------------------------------------------------------------------------------------------

def test_help_lists_every_flag():
    p = run(["--help"])
    for flag in ["-i,--train-data", "-j,--val-data", "-o,--output-dir", "-e,--model", "-b,--batch-size",
                 "-t,--seq-len", "-d,--total-batch-size", "-x,--max-steps", "-l,--learning-rate",
                 "-u,--warmup-steps", "-q,--final-lr-frac", "-k,--lr-schedule", "-c,--weight-decay",
                 "-v,--val-every", "-m,--val-batches", "-s,--sample-every", "-g,--gen-tokens",
                 "-n,--checkpoint-every", "-y,--resume", "--layers", "--channels", "--heads", "--global-heads",
                 "--window", "--vocab", "--max-seq-len", "--qk-norm", "--z-loss", "--attn-softcap",
                 "--untie-embeddings", "--beta1", "--beta2", "--eps", "--grad-clip", "--seed", "--device",
                 "--config", "--logit-stats-every", "--keep-checkpoints", "--skip-spikes", "--spike-window",
                 "--eval-only", "--dump-logits", "--threads", "--qk-clip", "--logit-alarm", "--logit-alarm-above",
                 "--logit-alarm-cooldown", "--near", "--dump-attention"]:
        assert flag in p.stdout, f"--help does not list {flag}"


def test_training_writes_documented_outputs(trained):
    out, p = trained
    names = {f.name for f in out.iterdir()}
    for n in ["config.json", "config.toml", "metrics.jsonl", "logit_stats.jsonl", "model_00000010.bin",
              "model_00000020.bin", "state_00000010_00000.bin", "state_00000020_00000.bin", "DONE_00000010",
              "DONE_00000020"]:
        assert n in names, f"{n} missing from the output directory: {sorted(names)}"
    conf = json.loads((out / "config.json").read_text())
    assert conf["model"]["num_layers"] == L and conf["model"]["vocab_size"] == 256
    assert conf["derived"]["vocab_source"].endswith("meta.json")

    recs = read_jsonl(out / "metrics.jsonl")
    assert recs[0] == {"step": 0, "time": recs[0]["time"], "val_loss": recs[0]["val_loss"]}  # time: wall clock, Unix s
    train = [r for r in recs if "loss" in r]
    assert [r["step"] for r in train] == list(range(1, 21))
    for key in ["loss", "z_loss", "grad_norm", "lr", "ms", "tokens_per_s", "max_attn_logit", "out_max_logit",
                "loss_z", "norm_z", "spike", "skipped_nonfinite", "skipped_spike"]:
        assert all(key in r for r in train), f"metrics record lacks {key}"
    assert [r["step"] for r in train if "val_loss" in r] == [5, 10, 15, 20]
    assert all(r["max_attn_logit"] > 0 for r in train)

    # one console line per step, in the documented shape
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("step") and "| loss" in ln]
    assert len(lines) == 20
    assert lines[0].startswith("step  1/20 | loss ") and "| norm " in lines[0] and "| lr " in lines[0]
    assert "ms |" in lines[0] and "tok/s" in lines[0] and "max-logit" in lines[0]
    assert p.stdout.count("--- sample at step") == 2  # steps 7 and 14

    stats = read_jsonl(out / "logit_stats.jsonl")
    assert [s["step"] for s in stats] == [3, 6, 9, 12, 15, 18]
    for s in stats:
        assert s["num_layers"] == L and s["num_heads"] == NH and len(s["attn"]) == L * NH
        assert [(a["layer"], a["head"]) for a in s["attn"]] == [(l, h) for l in range(L) for h in range(NH)]
        assert [a["global"] for a in s["attn"][:NH]] == [False, False, False, True]
        for a in s["attn"]:
            assert a["min"] <= a["max"] and 0.0 <= a["entropy"] <= np.log(32) + 1e-4
        assert s["out_max_logit"] is not None and s["out_mean_lse"] is not None
        # near/far (CPU backend; near = the window 8 without --near): local heads see only near keys
        assert s["near"] == 8
        for a in s["attn"]:
            assert 0.0 <= a["near_mass"] <= 1.0 and a["near_max"] <= a["max"]
            if a["global"]:  # T = 32 > 8: far keys exist and hold some of the mass
                assert a["far_max"] is not None and max(a["near_max"], a["far_max"]) == a["max"]
                assert a["near_mass"] < 1.0
            else:
                assert a["far_max"] is None and a["near_mass"] == 1.0 and a["near_max"] == a["max"]


def test_training_lowers_loss_on_tinyshakespeare(tmp_path):
    """30 steps of a tiny model on the GPT-2-BPE tiny-Shakespeare shards lower the loss."""
    ts = gpt2_tinyshakespeare()
    out = tmp_path / "ts"
    run(["-i", f"{ts}/train_*.bin", "-j", f"{ts}/val_*.bin", "-o", out, "--layers", 2, "--channels", 64,
         "--heads", 4, "-b", 2, "-t", 64, "-x", 30, "-l", "3e-3", "-u", 5, "-v", 30, "-m", 2, "-s", 0, "--threads", 1])
    recs = read_jsonl(out / "metrics.jsonl")
    train = [r["loss"] for r in recs if "loss" in r]
    assert len(train) == 30
    assert abs(train[0] - np.log(50257)) < 0.5, "an untrained model should start near ln(V)"
    assert np.mean(train[-5:]) < np.mean(train[:5]) - 1.0, train
    assert recs[-1]["val_loss"] < recs[0]["val_loss"] - 1.0


def samples(stdout):
    parts = stdout.split("--- sample at step ")[1:]
    return {int(p.split(" ", 1)[0]): p.split("\n", 1)[1].split("\n---\n", 1)[0] for p in parts}


def test_run_of_10_then_resume_to_20_is_bit_identical(byte_data, tmp_path):
    """Constant LR (so -x does not change the schedule): 10 steps, then -y 1 -x 20, equals 20 steps."""
    common = data_args(byte_data) + TINY + ["-k", "constant", "-u", 0, "-l", "2e-3", "-v", 5, "-m", 3, "-s", 6,
                                            "-g", 12, "--logit-stats-every", 4]
    full, part = tmp_path / "full", tmp_path / "part"
    ref = run(common + ["-o", full, "-x", 20, "-n", 10])
    run(common + ["-o", part, "-x", 10])
    resumed = run(common + ["-o", part, "-x", 20, "-y", 1])
    assert "resumed from" in resumed.stdout
    assert_same_run(full, part, 20)
    assert read_jsonl(full / "logit_stats.jsonl") == read_jsonl(part / "logit_stats.jsonl")
    assert {s: t for s, t in samples(ref.stdout).items() if s > 10} == samples(resumed.stdout)


def test_resume_after_losing_the_last_checkpoint_is_bit_identical(trained, tmp_path):
    """Cosine schedule: a copy of the finished run loses checkpoint 20 (as if killed just before
    writing it, after its metrics lines); -y 1 resumes from 10, drops records 11..20 and redoes them."""
    ref, _ = trained
    part = tmp_path / "part"
    shutil.copytree(ref, part)
    for name in ["DONE_00000020", "model_00000020.bin", "state_00000020_00000.bin"]:
        (part / name).unlink()
    run(data_args_from_config(ref) + TINY + ["-o", part, "-x", 20, "-n", 10, "-v", 5, "-m", 4, "-s", 7, "-g", 16,
                                             "--logit-stats-every", 3, "-l", "3e-3", "-u", 3, "-y", 1])
    assert_same_run(ref, part, 20)
    assert read_jsonl(ref / "logit_stats.jsonl") == read_jsonl(part / "logit_stats.jsonl")


def data_args_from_config(out):
    conf = json.loads((out / "config.json").read_text())["train"]
    return ["-i", conf["train_data"], "-j", conf["val_data"]]


def test_kill_9_and_resume_is_bit_identical(byte_data, tmp_path):
    """A real kill -9 after the checkpoint of step 10: the files it leaves parse, and resuming
    reproduces the uninterrupted run."""
    common = data_args(byte_data) + TINY + ["-x", 120, "-n", 5, "-v", 10, "-m", 2, "-s", 0, "-l", "2e-3",
                                            "--logit-stats-every", 1, "--keep-checkpoints", 2]
    full, killed = tmp_path / "full", tmp_path / "killed"
    run(common + ["-o", full])
    proc = subprocess.Popen([str(BIN), "--device", "cpu"] + [str(a) for a in common + ["-o", killed]], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "DONE_00000010").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for f in ["metrics.jsonl", "logit_stats.jsonl"]:  # every complete line parses
        text = (killed / f).read_text()
        for line in text.split("\n")[:-1]:
            json.loads(line)
    done = sorted(p.name for p in killed.glob("DONE_*"))
    assert done and done[-1] < "DONE_00000120", f"the run was not interrupted: {done}"
    run(common + ["-o", killed, "-y", 1])
    assert_same_run(full, killed, 120)
    assert len(list(killed.glob("DONE_*"))) == 2, "--keep-checkpoints 2 keeps two"


# ---------------------------------------------------------------------------------------------
# refusals: one line on stderr, non-zero exit, nothing in the output directory changed

@pytest.mark.parametrize("extra,expect", [
    (["--channels", 30], "not divisible by --heads"),
    (["--global-heads", 5], "--global-heads 5"),
    (["--window", 0], "--window 0"),
    (["--near", 0], "--near must be >= 1"),
    (["-t", 128], "exceeds the model's --max-seq-len 64"),
    (["-d", 100], "not a multiple of B*T*processes"),
    (["--vocab", 200], "smaller than the data's 256"),
    (["-k", "cosinus"], "--lr-schedule 'cosinus'"),
    pytest.param(["--device", "cuda"], "--device cuda: no CUDA device found; use --device cpu" if CUDA_BUILD else
                 "this build has no CUDA backend (compiled without nvcc); use --device cpu or build with nvcc",
                 marks=pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="a GPU is present: not refused")),
    (["--bogus-flag"], "--bogus-flag"),
    (["-b", "four"], "four"),
    (["--dump-logits", "x.bin"], "--eval-only"),
    (["--layers", 3], "different model"),
    (["-b", 2], "resume with the same -b/-t"),
    (["--spike-window", 5], "resume with the same --spike-window"),
    (["--profile-steps", 2], "--profile-steps times GPU kernels; the cpu backend has none"),
    (["--profile-steps", 9], "--profile-steps 9 needs 11 steps to train (2 warm-up steps first) but this run trains 10"),
])
def test_bad_flags_fail_cleanly(trained, byte_data, extra, expect):
    out, _ = trained  # a finished run: -y 1 would resume it if the flags were fine
    assert_refused(data_args(byte_data) + TINY + ["-o", out, "-x", 30, "-y", 1] + extra, out, expect)


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="a GPU is present: auto may take it")
def test_device_auto_on_the_cpu_names_the_reason(byte_data):
    """trial 5 finding 12: --device auto staying on the CPU says why; a build without the CUDA backend (make
    cpu, or no nvcc) said "no CUDA device found", as if a GPU were missing."""
    p = run(data_args(byte_data) + TINY + ["-x", 1, "-v", 0, "-s", 0, "--device", "auto"])
    expect = ("note: no CUDA device found; running on the CPU" if CUDA_BUILD else
              "note: this build has no CUDA backend (compiled without nvcc); running on the CPU")
    assert [ln for ln in p.stderr.splitlines() if "running on the CPU" in ln] == [expect], p.stderr


def test_fresh_run_into_a_checkpoint_dir_is_refused(trained, byte_data):
    out, _ = trained
    assert_refused(data_args(byte_data) + TINY + ["-o", out, "-x", 30], out, "resume with -y 1")


def test_missing_data_is_refused(trained, tmp_path):
    out, _ = trained
    assert_refused(["-i", f"{tmp_path}/nothing_*.bin", "-o", out, "-y", 1] + TINY, out, "nothing_")


def test_bad_checkpoints(trained, byte_data, tmp_path):
    ref, _ = trained
    args = data_args(byte_data) + TINY + ["-x", 30, "-y", 1]

    # a checkpoint written by another process count is refused (its state header and its step's marker
    # both say 2; a header alone that disagrees with its marker is damage, test_chaos_soak.py)
    def as_two_processes(d):
        for step in (10, 20):
            st = d / f"state_{step:08d}_00000.bin"
            b = bytearray(st.read_bytes())
            b[16:20] = struct.pack("<i", 2)  # header[4] = world size
            h = np.frombuffer(bytes(b[:1024]), dtype="<i4")
            b[76:84] = struct.pack("<Q", header_checksum(h, 19))  # header[19..20]: the header's own checksum
            st.write_bytes(bytes(b))
            (d / f"DONE_{step:08d}").write_text(f"step {step} world_size 2\n")

    def damage_model(d, step):
        m = d / f"model_{step:08d}.bin"
        b = bytearray(m.read_bytes())
        b[-5] ^= 0x40
        m.write_bytes(bytes(b))

    d = tmp_path / "world"
    shutil.copytree(ref, d)
    as_two_processes(d)
    assert_refused(args + ["-o", d], d, "written by 2 processes")
    # a review: with the newest step damaged, the step whose state mismatches (10) is named, and its model file
    # (the line named step 20 and its damaged model)
    d = tmp_path / "world_fallback"
    shutil.copytree(ref, d)
    as_two_processes(d)
    damage_model(d, 20)
    assert_refused(args + ["-o", d], d, f"error: -y 1: the checkpoint of step 10 in {d} was written by 2 processes "
                   f"and this run has 1; resume with the same -np (2), or start a new run from its weights in another "
                   f"-o: -e {d}/model_00000010.bin")

    # every complete checkpoint damaged: refused, naming fixes that leave the run as it is (a code review: "start
    # fresh without -y" into the same -o is refused, as it holds checkpoints), and the second of them trains
    d = tmp_path / "damaged"
    shutil.copytree(ref, d)
    for step in (10, 20):
        damage_model(d, step)
    assert_refused(args + ["-o", d], d, "; restore them from a copy and resume again, or start the run over in a new "
                   f"directory with its settings: --config {d}/config.json -o NEW_DIR ({d} is left as it is)")
    # the newest one's damage is named without its own advice ("use another checkpoint": there is none)
    assert_refused(args + ["-o", d], d, f"error: no usable checkpoint in {d}: all 2 complete checkpoints are damaged "
                   f"(newest: {d}/model_00000020.bin: checksum mismatch (payload damaged)); restore them")
    before = dir_hashes(d)
    run(["--config", d / "config.json", "-o", tmp_path / "again", "-x", 2, "-n", 0, "-v", 0, "-s", 0])
    assert (tmp_path / "again" / "model_00000002.bin").exists() and dir_hashes(d) == before

    # -e pointing at a file that is not a checkpoint
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\0" * 2000)
    o = tmp_path / "fresh"
    o.mkdir()
    assert_refused(data_args(byte_data) + ["-e", junk, "-o", o, "-t", 32], o, str(junk))

    # a damaged newest checkpoint falls back to the previous one with a warning
    d = tmp_path / "fallback"
    shutil.copytree(ref, d)
    m = d / "model_00000020.bin"
    b = bytearray(m.read_bytes())
    b[-5] ^= 0x40
    m.write_bytes(bytes(b))
    p = run(data_args(byte_data) + TINY + ["-o", d, "-x", 20, "-y", 1, "-n", 10, "-v", 5, "-m", 4, "-s", 7, "-g", 16,
                                           "--logit-stats-every", 3, "-l", "3e-3", "-u", 3])
    assert "warning: checkpoint step 20 is damaged" in p.stderr
    assert "resumed from" in p.stdout and "at step 10" in p.stdout
    assert_same_run(ref, d, 20)


def test_a_damaged_checkpoint_fallen_back_past_is_retired(trained, byte_data, tmp_path):
    """A new-user trial: -y 1 fell back past a damaged step 20 and the run ended at 15, but DONE_00000020 stayed,
    so readers took the abandoned step 20 for the run's newest checkpoint (--eval-only's hint, export_hf.py).
    Its marker is now DAMAGED_00000020 (files kept), said in one note; the newest checkpoint is 15."""
    ref, _ = trained
    d = tmp_path / "retired"
    shutil.copytree(ref, d)
    os.truncate(d / "state_00000020_00000.bin", 1000)
    p = run(["-o", d, "-y", 1, "-x", 15])
    assert "warning: checkpoint step 20 is damaged" in p.stderr
    assert (f"note: -y 1: the damaged checkpoint of step 20 is left behind (this run continues from step 10): its "
            f"marker is now {d / 'DAMAGED_00000020'}, and its files stay for inspection") in p.stderr, p.stderr
    assert not (d / "DONE_00000020").exists() and (d / "DAMAGED_00000020").exists()
    assert (d / "model_00000020.bin").exists() and (d / "DONE_00000015").exists()
    q = run(["--eval-only", "-e", d], check=False)
    assert q.returncode == 1 and f"did you mean -e {d / 'model_00000015.bin'}?" in q.stderr, q.stderr
    assert_refused(["--fork-from", d / "model_00000020.bin", "-o", tmp_path / "f"], d,
                   f"(no {d / 'DONE_00000020'}; {d / 'DAMAGED_00000020'} says -y 1 found it damaged and left it behind)")
    # the retired step's model file named on its own is read as asked, with a note (evaluation, generation, a
    # new run from it, the export)
    retired = (f"note: {d / 'DAMAGED_00000020'} says a resume (-y 1) found step 20 damaged and went on from an "
               f"earlier step: {d / 'model_00000020.bin'} is of the trajectory that run left (its newest complete "
               f"checkpoint: {d / 'model_00000015.bin'})")
    gen = subprocess.run([str(REPO / "generate_gpt2_ls"), "--device", "cpu", "-e", d / "model_00000020.bin", "-n",
                          "2", "--print-ids"], capture_output=True, text=True, timeout=120)
    for q in (run(["--eval-only", "-e", d / "model_00000020.bin", "-m", 1]), gen,
              run(["-e", d / "model_00000020.bin", "-i", f"{byte_data}/train_*.bin", "-x", 1, "-v", 0, "-s", 0, "-b", 2,
                   "-t", 16]),
              subprocess.run([sys.executable, str(REPO / "scripts" / "export_hf.py"), d / "model_00000020.bin",
                              tmp_path / "hf"], capture_output=True, text=True, timeout=120)):
        assert q.returncode == 0 and retired in q.stderr, q.stderr
    assert retired not in run(["--eval-only", "-e", d / "model_00000015.bin", "-m", 1]).stderr
    # the step written again: a checkpoint like any other
    run(["-o", d, "-y", 1, "-x", 20])
    assert (d / "DONE_00000020").exists() and not (d / "DAMAGED_00000020").exists()


def test_eval_only_and_dump_logits(trained, byte_data, tmp_path):
    out, _ = trained
    dump = tmp_path / "logits.bin"
    eo = tmp_path / "eval"
    p = run(["--eval-only", "-e", out / "model_00000020.bin", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16,
             "-m", 3, "--dump-logits", dump, "-o", eo, "--threads", 1])
    rec = json.loads((eo / "eval.json").read_text())
    assert rec["batches"] == 3 and rec["tokens"] == 3 * 2 * 16
    assert f"eval loss {rec['loss']:.6f}" in p.stdout

    # the dump is (B, T, V) float32 over the real vocabulary; its loss on the first batch (the
    # first B*T+1 validation tokens, unshuffled) recomputed here matches one -m 1 evaluation
    logits = np.fromfile(dump, dtype=np.float32)
    assert logits.size == 2 * 16 * 256
    logits = logits.reshape(2, 16, 256).astype(np.float64)
    val = np.fromfile(byte_data / "val_000000.bin", dtype=np.uint16, offset=1024)[: 2 * 16 + 1].astype(np.int64)
    targets = val[1:].reshape(2, 16)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    ce = (lse - np.take_along_axis(logits, targets[..., None], -1)[..., 0]).mean()
    one = run(["--eval-only", "-e", out / "model_00000020.bin", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16,
               "-m", 1, "--threads", 1])
    printed = float(one.stdout.split("eval loss ")[1].split()[0])
    assert abs(ce - printed) < 1e-5 * abs(printed) + 1e-6, (ce, printed)

    # without -m: the whole validation set
    p = run(["--eval-only", "-e", out / "model_00000020.bin", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16,
             "--threads", 1])
    assert f"over {(12_000 - 1) // 32} batches" in p.stdout


def test_config_file_round_trip(trained, byte_data, tmp_path):
    """<out>/config.toml is accepted by --config; flags on the command line override it."""
    out, _ = trained
    o = tmp_path / "cfg"
    run(["--config", out / "config.toml", "-o", o, "-x", 2, "-s", 0, "-v", 0])
    conf = json.loads((o / "config.json").read_text())
    assert conf["model"]["num_layers"] == L and conf["model"]["channels"] == 32
    assert conf["train"]["max_steps"] == 2 and conf["train"]["learning_rate"] == pytest.approx(3e-3)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_llmc_gpt2_checkpoint_loads_as_all_global_model(byte_data, tmp_path):
    """-e takes an llm.c GPT-2 file (magic 20240326, version 3): it evaluates exactly like the same
    weights in our format with G = NH and P = maxT, and training from it writes such a model."""
    maxT, V, Vp, nl, nh, C = 64, 256, 256, 2, 4, 32
    sizes = [Vp * C, maxT * C, nl * C, nl * C, nl * 3 * C * C, nl * 3 * C, nl * C * C, nl * C, nl * C, nl * C,
             nl * 4 * C * C, nl * 4 * C, nl * C * 4 * C, nl * C, C, C]
    rng = np.random.default_rng(5)
    params = np.concatenate([rng.normal(0, 0.05, n) for n in sizes]).astype(np.float32)
    payload = params.tobytes()
    h = np.zeros(256, dtype=np.int32)
    h[:8] = [20240326, 3, maxT, V, nl, nh, C, Vp]
    llmc = tmp_path / "gpt2_tiny.bin"
    llmc.write_bytes(h.tobytes() + payload)

    ours = tmp_path / "ours.bin"  # docs/formats.md
    h = np.zeros(256, dtype=np.uint32)
    h[:14] = [20250521, 1, maxT, V, nl, nh, C, Vp, nh, maxT, 0, 1, 0, 0]
    h[14], h[15] = params.size & 0xFFFFFFFF, params.size >> 32
    s = fnv1a64(payload)
    h[16], h[17] = s & 0xFFFFFFFF, s >> 32
    ours.write_bytes(h.tobytes() + payload)

    ev = ["--eval-only", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 64, "-m", 2, "--threads", 1]
    a = run(ev + ["-e", llmc])
    b = run(ev + ["-e", ours])
    assert "llm.c GPT-2 checkpoint" in a.stdout
    loss = a.stdout.split("eval loss ")[1].split()[0]
    assert loss == b.stdout.split("eval loss ")[1].split()[0]
    assert abs(float(loss) - np.log(256)) < 1.0  # small random weights: near uniform

    out = tmp_path / "ft"
    run(data_args(byte_data) + ["-e", llmc, "-o", out, "-b", 2, "-t", 64, "-x", 2, "-v", 0, "-s", 0, "--threads", 1])
    m = json.loads((out / "config.json").read_text())["model"]
    assert (m["global_heads"], m["window"], m["num_heads"], m["vocab_size"]) == (nh, maxT, nh, V)
    header = np.fromfile(out / "model_00000002.bin", dtype=np.int32, count=19)
    assert list(header[[0, 2, 3, 4, 5, 6, 8, 9, 18]]) == [20250521, maxT, V, nl, nh, C, nh, maxT, 2]

    # --config of that run starts from the same file (its bytes recorded: an llm.c file has no payload
    # checksum); a new-user trial edited 100 bytes of it, and the run took the edited weights silently
    recorded = json.loads((out / "config.json").read_text())["derived"]["model_file_fnv1a64"]
    assert recorded == f"{fnv1a64(llmc.read_bytes()):016x}"
    run(["--config", out / "config.json", "-o", tmp_path / "again", "-x", 1])
    b = bytearray(llmc.read_bytes())
    b[2000:2100] = bytes(100)
    llmc.write_bytes(bytes(b))
    again = tmp_path / "again2"
    assert_refused(["--config", out / "config.json", "-o", again, "-x", 1], out,
                   f"-e {llmc} (from --config {out / 'config.json'}) is not the file that run started from")
    assert not again.exists()
    # a fork of that run carries the recorded bytes, so --config of the fork checks the file too (a re-trial)
    fork = tmp_path / "fork"
    run(["--fork-from", out / "model_00000002.bin", "-o", fork, "-x", 3])
    assert json.loads((fork / "config.json").read_text())["derived"]["model_file_fnv1a64"] == recorded
    assert_refused(["--config", fork / "config.json", "-o", tmp_path / "again3", "-x", 1], fork,
                   f"-e {llmc} (from --config {fork / 'config.json'}) is not the file that run started from")
    # -y 1 of such a run stopped before its first checkpoint starts again from step 0, from -e's file: checked too
    early = tmp_path / "again"
    for f in list(early.glob("model_*")) + list(early.glob("state_*")) + list(early.glob("DONE_*")):
        f.unlink()
    log = early / "console.log"  # as a run killed before its first checkpoint leaves it
    log.write_text("".join(ln for ln in log.read_text().splitlines(True) if not ln.startswith("checkpoint of step")))
    assert_refused(["-o", early, "-y", 1], early,
                   f"-e {llmc} (from the record {early / 'config.json'}) is not the file that run started from")


def test_vocab_comes_from_meta_then_tokenizer_then_default(byte_data, tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for f in byte_data.glob("*.bin"):
        shutil.copy(f, d / f.name)
    tiny = TINY + ["-x", 1, "-v", 0, "-s", 0]
    run(["-i", f"{d}/train_*.bin", "-o", tmp_path / "a"] + tiny)  # tokenizer.bin only
    conf = json.loads((tmp_path / "a" / "config.json").read_text())
    assert conf["model"]["vocab_size"] == 256 and conf["derived"]["vocab_source"].endswith("tokenizer.bin")
    (d / "tokenizer.bin").unlink()
    run(["-i", f"{d}/train_*.bin", "-o", tmp_path / "b"] + tiny)  # nothing: GPT-2's 50257
    conf = json.loads((tmp_path / "b" / "config.json").read_text())
    assert conf["model"]["vocab_size"] == 50257 and conf["derived"]["vocab_source"] == "default"


def test_nonfinite_steps_never_update_the_weights(byte_data, tmp_path):
    """A learning rate far too high makes the gradient norm overflow; those steps are logged as
    skipped and leave the weights alone (validation loss identical before and after them)."""
    out = tmp_path / "nan"
    run(data_args(byte_data) + TINY + ["-o", out, "-x", 12, "-l", "1e4", "-u", 0, "--grad-clip", 0, "-v", 4, "-m", 2,
                                       "-s", 0])
    recs = train_records(out / "metrics.jsonl")
    skipped = [r["step"] for r in recs if r["skipped_nonfinite"]]
    assert skipped, "expected non-finite steps with lr 1e4"
    for r in recs:
        assert r["skipped_nonfinite"] == (r["loss"] is None or r["grad_norm"] is None)
    vals = {r["step"]: r["val_loss"] for r in recs if "val_loss" in r}
    after = [s for s in vals if s >= skipped[0] and all(t in skipped for t in range(skipped[0], s + 1))]
    assert len({vals[s] for s in after}) <= 1, f"weights changed during skipped steps: {vals}"


def test_skip_spikes_and_resume_with_spike_windows(byte_data, tmp_path):
    """--skip-spikes Z skips exactly the steps whose z-score exceeds Z; the detectors' windows are
    part of the checkpoint, so a resumed run skips the same steps."""
    common = data_args(byte_data) + TINY + ["-x", 24, "-n", 12, "-v", 0, "-s", 0, "-l", "3e-3", "-u", 0,
                                            "--spike-window", 4, "--skip-spikes", 1.0, "--spike-z", 1.0]
    full, part = tmp_path / "full", tmp_path / "part"
    run(common + ["-o", full])
    recs = train_records(full / "metrics.jsonl")
    for r in recs:
        z = [x for x in (r["loss_z"], r["norm_z"]) if x is not None]
        assert r["skipped_spike"] == any(x > 1.0 for x in z)
        assert r["spike"] == r["skipped_spike"]
        if r["step"] <= 4:
            assert r["loss_z"] is None and r["norm_z"] is None  # window not full yet
    assert any(r["skipped_spike"] for r in recs) and not all(r["skipped_spike"] for r in recs[4:])
    shutil.copytree(full, part)
    for name in ["DONE_00000024", "model_00000024.bin", "state_00000024_00000.bin"]:
        (part / name).unlink()
    run(common + ["-o", part, "-y", 1])
    assert_same_run(full, part, 24)


def test_near_flag_and_near_far_merge_over_micro_batches(byte_data, tmp_path):
    """--near 3 (below the window 8) gives local heads far keys too and is recorded in config.json
    and every record; with -d 256 (2 micro-batches of B=4) step 1's near/far statistics equal those
    of one B=8 batch of the same rows: maxima exactly, the near mass (mean of the 2 micro-batch
    means = mean over the 8 rows) to float rounding."""
    common = data_args(byte_data) + TINY + ["-x", 1, "-v", 0, "-s", 0, "--shuffle", 0, "--near", 3]
    run(common + ["-o", tmp_path / "acc", "-d", 256])
    run(common + ["-o", tmp_path / "big", "-b", 8])
    assert json.loads((tmp_path / "acc" / "config.json").read_text())["train"]["near"] == 3
    acc, big = (read_jsonl(tmp_path / d / "logit_stats.jsonl")[0] for d in ("acc", "big"))
    assert acc["near"] == 3 and big["near"] == 3
    for a, b in zip(acc["attn"], big["attn"]):
        assert a["far_max"] is not None and 0.0 < a["near_mass"] < 1.0, a  # 3 < P = 8 and 3 < T
        assert a["near_max"] == b["near_max"] and a["far_max"] == b["far_max"]
        assert a["near_mass"] == pytest.approx(b["near_mass"], rel=1e-6)


def test_near_not_below_the_sequence_length_is_noted(byte_data, tmp_path):
    """A new-user trial: --near above -t ran without a word, and every key was near (near_mass 1, far_max
    null: a split that says nothing). A note names it and the fix, also for the CPU's default split at the
    window; --near below -t gets none, and with --logit-stats-every 0 the note that --near has no effect
    stands alone."""
    common = data_args(byte_data) + TINY + ["-x", 1, "-v", 0, "-s", 0]  # TINY: -t 32
    p = run(common + ["-o", tmp_path / "at", "--near", 32])
    assert ("note: --near 32 is not below -t 32: every key a query sees is near (distance < 32), so each head's "
            "near_mass is 1 and far_max null; give --near below 32 to split near from far") \
        in p.stderr.splitlines(), p.stderr
    rec = read_jsonl(tmp_path / "at" / "logit_stats.jsonl")[0]
    assert all(h["near_mass"] == 1.0 and h["far_max"] is None for h in rec["attn"]), rec  # what the note says
    conf = tmp_path / "near.toml"
    conf.write_text("near=100\nwindow=8\n")  # (a file's --near with a typed --window is refused)
    no_window = [a for i, a in enumerate(common) if a != "--window" and common[i - 1] != "--window"]
    p = run(no_window + ["--config", conf])
    assert f"note: --near 100 (from --config {conf}) is not below -t 32: every key" in p.stderr, p.stderr
    p = run(common + ["--near", 31])
    assert "is not below -t" not in p.stderr, p.stderr
    # without --near the CPU splits at the window: an MHSA model (every head global) at the default window 50
    # above -t 32 had every key near without a word
    mhsa = [("4" if common[i - 1] == "--global-heads" else a) for i, a in enumerate(no_window)]
    p = run(mhsa + ["-o", tmp_path / "mhsa"])
    assert ("note: the near/far split (--near not given: the window, 50, on the CPU) is not below -t 32: every key "
            "a query sees is near (distance < 50), so each head's near_mass is 1 and far_max null; give --near "
            "below 32 to split near from far") in p.stderr.splitlines(), p.stderr
    rec = read_jsonl(tmp_path / "mhsa" / "logit_stats.jsonl")[0]
    assert all(h["near_mass"] == 1.0 and h["far_max"] is None for h in rec["attn"]), rec
    assert "is not below -t" not in run(mhsa + ["--window", 8]).stderr
    p = run(common + ["--near", 100, "--logit-stats-every", 0])
    assert "is not below -t" not in p.stderr and "--near 100 has no effect with --logit-stats-every 0" in p.stderr, \
        p.stderr


def test_a_vocab_above_the_datas_is_noted(byte_data, tmp_path):
    """A new-user trial: --vocab 50257 on data whose meta.json says a smaller vocabulary trained without a
    word (a smaller --vocab is refused): a note says the extra rows are never trained and to leave --vocab
    out; none at the data's own vocabulary, nor without --vocab."""
    common = data_args(byte_data) + TINY + ["-x", 1, "-v", 0, "-s", 0]
    p = run(common + ["--vocab", 1024])
    assert (f"note: --vocab 1024 is larger than the data's vocabulary 256 (from {byte_data}/meta.json): the "
            "model's 768 extra rows (ids 256..1023) are never trained; leave --vocab out to use the data's (the "
            "model pads it to a multiple of 128 itself)") in p.stderr.splitlines(), p.stderr
    conf = tmp_path / "v.toml"
    conf.write_text("vocab=300\n")
    p = run(common + ["--config", conf])
    assert f"note: --vocab 300 (from --config {conf}) is larger than the data's vocabulary 256" in p.stderr, p.stderr
    for same in (["--vocab", 256], []):
        p = run(common + same)
        assert "is larger than the data's vocabulary" not in p.stderr, p.stderr


def test_gradient_accumulation_matches_a_bigger_batch(byte_data, tmp_path):
    """-d 256 with B=4, T=32 accumulates 2 micro-batches; without shuffling they hold the same
    tokens as one B=8 batch, so the losses agree to float rounding."""
    common = data_args(byte_data) + TINY + ["-x", 6, "-v", 0, "-s", 0, "--shuffle", 0, "-l", "3e-3"]
    run(common + ["-o", tmp_path / "acc", "-d", 256])
    run(common + ["-o", tmp_path / "big", "-b", 8])
    conf = json.loads((tmp_path / "acc" / "config.json").read_text())["derived"]
    assert conf["grad_accum_steps"] == 2 and conf["tokens_per_step"] == 256
    acc = [r["loss"] for r in train_records(tmp_path / "acc" / "metrics.jsonl")]
    big = [r["loss"] for r in train_records(tmp_path / "big" / "metrics.jsonl")]
    assert len(acc) == 6
    np.testing.assert_allclose(acc, big, rtol=1e-5)
    norms = [[r["grad_norm"] for r in train_records(tmp_path / d / "metrics.jsonl")] for d in ("acc", "big")]
    np.testing.assert_allclose(norms[0], norms[1], rtol=1e-4)  # the 1/accum scaling of the gradients


def test_paper_model_options_train_resume_evaluate_and_refuse_contradictions(byte_data, tmp_path):
    """--bias 0 --gelu erf --untie-embeddings (the paper code's model): the checkpoint header says so
    (words 20, 21), config.json records it, -y 1 continues bit-identically, --eval-only and -e take the
    model from the file, and a flag that contradicts it (on -e, or on -y 1) is refused."""
    paper = ["--bias", 0, "--gelu", "erf", "--untie-embeddings"]
    common = data_args(byte_data) + TINY + paper + ["-k", "constant", "-u", 0, "-l", "2e-3", "-v", 4, "-m", 2,
                                                     "-s", 0]
    full, part = tmp_path / "full", tmp_path / "part"
    run(common + ["-o", full, "-x", 8, "-n", 4])
    run(common + ["-o", part, "-x", 4])
    run(common + ["-o", part, "-x", 8, "-y", 1])
    assert_same_run(full, part, 8)

    hdr = np.fromfile(full / "model_00000008.bin", dtype=np.int32, count=256)
    assert hdr[20] == 1 and hdr[21] == 1 and hdr[11] == 0  # no biases, erf, untied
    C, Lyr, V, maxT = 32, 2, 256, 64
    no_bias_params = 2 * V * C + maxT * C + Lyr * (12 * C * C + 2 * C) + C  # wte, lm_head, wpe, layers, lnfw
    assert int(hdr[14]) == no_bias_params
    model = json.loads((full / "config.json").read_text())["model"]
    assert model["bias"] is False and model["gelu"] == "erf"

    ev = run(["--eval-only", "-e", full / "model_00000008.bin", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16,
              "-m", 2, "--threads", 1])
    assert "no biases" in ev.stdout + ev.stderr and "erf GELU" in ev.stdout + ev.stderr
    for flag, value in [("--bias", 1), ("--gelu", "tanh")]:
        p = run(["--eval-only", "-e", full / "model_00000008.bin", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16,
                 "-m", 1, "--threads", 1, flag, value], check=False)
        assert p.returncode != 0 and f"{flag} {value} contradicts the checkpoint" in p.stderr, p.stderr
    # an on/off model flag given off where the checkpoint has it on (trial 11: ignored without a word, the
    # run's config.toml then recorded qk-norm=false for a QK-norm model), on the command line or in a file
    qkn = tmp_path / "qkn"
    run(data_args(byte_data) + TINY + ["--qk-norm", "-o", qkn, "-x", 1, "-v", 0, "-s", 0, "--threads", 1])
    (tmp_path / "off.toml").write_text("untie-embeddings=false\n")
    for ckpt, off, said in [(qkn / "model_00000001.bin", ["--qk-norm=false"], "--qk-norm false"),
                            (full / "model_00000008.bin", ["--config", tmp_path / "off.toml"],
                             f"--untie-embeddings false (from --config {tmp_path / 'off.toml'})")]:
        fix = "drop it from the file or drop -e" if "--config" in off else "drop the flag"
        for mode in (["--eval-only", "-j", f"{byte_data}/val_*.bin", "-m", 1], data_args(byte_data) + ["-x", 1]):
            p = run(mode + ["-e", ckpt, "-b", 2, "-t", 16, "--threads", 1] + off, check=False)
            assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == (
                f"error: {said} contradicts the checkpoint {ckpt} (which has true); {fix}, a checkpoint fixes the "
                "model"), p.stderr
    # (a review) from another run's config.json the fix is not to edit that record
    plain = tmp_path / "plain"
    run(data_args(byte_data) + TINY + ["-o", plain, "-x", 1, "-v", 0, "-s", 0, "--threads", 1])
    p = run(["--config", plain / "config.json", "-e", qkn / "model_00000001.bin", "-x", 1, "--threads", 1],
            check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == (
        f"error: --qk-norm false (from --config {plain / 'config.json'}) contradicts the checkpoint "
        f"{qkn / 'model_00000001.bin'} (which has true); drop -e or drop --config, a checkpoint fixes the model"), \
        p.stderr
    assert_refused(data_args(byte_data) + TINY + ["--untie-embeddings", "--bias", 0, "-o", full, "-x", 12, "-y", 1,
                                                  "--gelu", "tanh"], full, "different model")
    (tmp_path / "bad").mkdir()
    assert_refused(data_args(byte_data) + TINY + ["-o", tmp_path / "bad", "--bias", 2], tmp_path / "bad",
                   "--bias must be 0 (no biases, the paper's bias=False) or 1 (GPT-2's biases) (got 2)")
    # bias=false, as the paper's code and config.json write it (trial 11): what 0 and 1 mean, not just "0 or 1"
    (tmp_path / "b.toml").write_text("bias=false\n")
    assert_refused(data_args(byte_data) + TINY + ["-o", tmp_path / "bad", "--config", tmp_path / "b.toml"],
                   tmp_path / "bad", f"--bias (from --config {tmp_path / 'b.toml'}) must be 0 (no biases, the "
                   "paper's bias=False) or 1 (GPT-2's biases) (got false)")
    assert_refused(data_args(byte_data) + TINY + ["-o", tmp_path / "bad", "--gelu", "exact"], tmp_path / "bad",
                   "--gelu 'exact' is not an activation")


def test_warmup_longer_than_the_run_is_noted(byte_data, tmp_path):
    """-u 20 -x 10: the learning rate never reaches -l; one note on stderr says so. None for -u 10 (its
    last step, s = 9, runs at lr * 10 / 10) nor -u 9."""
    p = run(data_args(byte_data) + TINY + ["-o", tmp_path / "a", "-x", 10, "-u", 20, "-l", "1e-3", "-v", 0, "-s", 0])
    assert "note: --warmup-steps 20 is longer than the run's 10 steps: the learning rate rises to 5.00e-04 " \
           "at most, never to -l 1.00e-03" in p.stderr, p.stderr
    for u in [10, 9]:
        p = run(data_args(byte_data) + TINY + ["-o", tmp_path / f"u{u}", "-x", 10, "-u", u, "-l", "1e-3", "-v", 0,
                                               "-s", 0])
        assert "--warmup-steps" not in p.stderr
        assert train_records(tmp_path / f"u{u}" / "metrics.jsonl")[-1]["lr"] == pytest.approx(1e-3)
    # -l 0 has no rate to fall short of (a new-user trial: "rises to 0.00e+00 at most, never to -l 0.00e+00");
    # and a header of -v 0 says the validation data is never read (it said "1 of its N batches per validation")
    p = run(data_args(byte_data) + TINY + ["-x", 10, "-u", 20, "-l", 0, "-v", 0, "-s", 0])
    assert "--warmup-steps" not in p.stderr, p.stderr
    assert "tokens, never read (-v 0)" in p.stdout and "batches per validation" not in p.stdout, p.stdout


def test_samples_longer_than_the_trained_length_are_noted(byte_data):
    """(a new-user trial) -g 200 with -t 32 (maxT 64): the run's samples read positions 32..63, which the run never
    trains, with no word (generate_gpt2_ls notes the same). One note, naming the -g that stays within -t."""
    base = data_args(byte_data) + TINY + ["-x", 1, "-v", 0, "-s", 1]
    p = run(base + ["-g", 200])
    assert [ln for ln in p.stderr.splitlines() if "samples use" in ln] == [
        "note: -g 200: the run's samples use 64 positions, more than the -t 32 it trains at; positions beyond 32 are "
        "never trained (-g 31 keeps the samples within them)"], p.stderr
    for g in (31, 0):
        assert "samples use" not in run(base + ["-g", g]).stderr
    # (a new-user trial) -s 5 in a run of one step draws no sample: no note about samples it does not draw
    p = run(data_args(byte_data) + TINY + ["-x", 1, "-v", 0, "-s", 5, "-g", 200])
    assert "samples use" not in p.stderr and "--- sample at step" not in p.stdout, p.stderr
    p = run(data_args(byte_data) + TINY + ["-x", 5, "-v", 0, "-s", 5, "-g", 200])
    assert sum("samples use" in ln for ln in p.stderr.splitlines()) == 1, p.stderr
    assert "--- sample at step 5 ---" in p.stdout, p.stdout


def test_flags_the_other_settings_make_useless_are_noted(byte_data, tmp_path):
    """-q with -k constant, --wsd-decay-frac with a schedule other than wsd, --temperature, -g and -s without
    samples, --keep-checkpoints without -o, --rendezvous with one process, --shuffle with --sampler random, --near with
    --logit-stats-every 0 and the logit alarms' cooldown and keep without an alarm do nothing: one note each when given (on the command
    line or in a --config file), none when they only hold their defaults."""
    base = data_args(byte_data) + TINY + ["-x", 1, "-v", 0, "-s", 0]
    p = run(base + ["-k", "constant", "-q", "0.5", "--wsd-decay-frac", "0.3"])
    assert [ln for ln in p.stderr.splitlines() if "has no effect" in ln] == [
        "note: --final-lr-frac 0.5 has no effect with --lr-schedule constant (it sets the final lr of cosine, "
        "linear and wsd)",
        "note: --wsd-decay-frac 0.3 has no effect with --lr-schedule constant (it sets the share of the run wsd "
        "decays over)"]
    toml = tmp_path / "preset.toml"
    toml.write_text("wsd-decay-frac = 0.5\nfinal-lr-frac = 0.2\n")
    p = run(base + ["--config", toml])
    assert [ln for ln in p.stderr.splitlines() if "has no effect" in ln] == [
        f"note: --wsd-decay-frac 0.5 (from --config {toml}) has no effect with --lr-schedule cosine (it sets the "
        "share of the run wsd decays over)"]
    for args in (["-k", "constant"], ["-k", "wsd", "-q", "0.5", "--wsd-decay-frac", "0.3"], ["-q", "0.5"]):
        assert "has no effect" not in run(base + args).stderr
    # --temperature without samples (-s 0, or -g 0), the alarms' cooldown and keep without an alarm
    p = run(base + ["--temperature", "0.5", "--logit-alarm-cooldown", "50", "--logit-alarm-keep", "2"])
    assert [ln for ln in p.stderr.splitlines() if "has no effect" in ln] == [
        "note: --temperature 0.5 has no effect with --sample-every 0 (it sets the temperature of the samples the "
        "run draws)",
        "note: --logit-alarm-cooldown 50 has no effect with --logit-alarm 0 and --logit-alarm-above 0 (it spaces the "
        "alarms' checkpoints)",
        "note: --logit-alarm-keep 2 has no effect with --logit-alarm 0 and --logit-alarm-above 0 (it keeps the "
        "newest alarms' checkpoints)"], p.stderr
    p = run(base[:-2] + ["-s", 5, "-g", 0, "--temperature", "0.5"])
    assert [ln for ln in p.stderr.splitlines() if "has no effect" in ln] == [
        "note: --temperature 0.5 has no effect with --gen-tokens 0 (it sets the temperature of the samples the run "
        "draws)",
        "note: --sample-every 5 has no effect with --gen-tokens 0 (it sets how often the run draws samples)"], p.stderr
    # (a new-user trial) -g without samples, --keep-checkpoints without -o, --rendezvous with one process
    p = run(base + ["-g", 5, "--keep-checkpoints", 2, "--rendezvous", tmp_path / "rdv"])
    assert [ln for ln in p.stderr.splitlines() if "has no effect" in ln] == [
        "note: --gen-tokens 5 has no effect with --sample-every 0 (it sets the length of the samples the run draws)",
        "note: --keep-checkpoints 2 has no effect with no -o (it prunes the checkpoints the run writes into -o)",
        f"note: --rendezvous {tmp_path / 'rdv'} has no effect with one process (it is the directory the processes "
        "of a CUDA launch without MPI meet in)"], p.stderr
    p = run(base + ["--sampler", "random", "--shuffle", 0])
    assert [ln for ln in p.stderr.splitlines() if "has no effect" in ln] == [
        "note: --shuffle 0 has no effect with --sampler random (it orders the windows of --sampler windows)"], p.stderr
    # (a new-user trial) --near with no logit statistics written; with them, or with --near unset, no note
    p = run(base + ["--logit-stats-every", 0, "--near", 3])
    assert [ln for ln in p.stderr.splitlines() if "has no effect" in ln] == [
        "note: --near 3 has no effect with --logit-stats-every 0 (it splits the logit statistics the run writes into "
        "near and far)"], p.stderr
    for args in (["--logit-stats-every", 2, "--near", 3], ["--logit-stats-every", 0]):
        assert "has no effect" not in run(base + args).stderr
    # (a new-user trial) -v and -m without validation data; with -j, no note
    train_only = ["-i", f"{byte_data}/train_*.bin"] + TINY + ["-x", 1, "-s", 0]
    p = run(train_only + ["-v", 1, "-m", 5])
    assert [ln for ln in p.stderr.splitlines() if "has no effect" in ln] == [
        "note: --val-every 1 has no effect with no validation data (-j) (it sets how often the run validates on -j)",
        "note: --val-batches 5 has no effect with no validation data (-j) (it sets how much of -j a validation "
        "reads)"], p.stderr
    assert "has no effect" not in run(data_args(byte_data) + TINY + ["-x", 1, "-s", 0, "-v", 1, "-m", 1]).stderr
    assert "has no effect" not in run(train_only + ["-v", 0]).stderr  # -v 0: never validate, which it does not
    # a continued run's alarm checkpoints come back with its state, and --logit-alarm-keep still pins them
    run(base + ["-o", tmp_path / "alarm", "-n", 1])
    p = run(data_args(byte_data) + TINY + ["-x", 2, "-v", 0, "-s", 0, "-o", tmp_path / "alarm", "-y", 1,
                                           "--logit-alarm-keep", 1])
    assert "has no effect" not in p.stderr, p.stderr
    for args in (["-s", 5, "--temperature", "0.5"], ["-s", 0, "--logit-alarm-above", 50, "--logit-alarm-cooldown", 5],
                 ["-s", 0, "--sampler", "windows", "--shuffle", 0], ["-s", 0, "--sampler", "random"],
                 ["-s", 0, "--logit-alarm", 6, "--logit-alarm-keep", 1]):
        assert "has no effect" not in run(base[:-2] + args).stderr
    # a run's config.json gives every setting of its run, chosen or not: a copy of a cosine run gets no note;
    # nor does its config.toml, which writes every flag (the unused ones at their defaults)
    src = tmp_path / "src"
    run(base + ["-o", src])
    assert "has no effect" not in run(["--config", src / "config.json", "-o", tmp_path / "copy"]).stderr
    assert "has no effect" not in run(["--config", src / "config.toml", "-o", tmp_path / "copy_toml"]).stderr


def test_eval_only_notes_the_training_flags_it_ignores(trained, byte_data):
    """A new-user trial: --eval-only took -l, -x, --sampler random, --seed, -z 1 ... and gave the same loss with
    no word, so a user could believe the evaluation drew random batches. One note names the typed flags only a
    training run reads; none for the flags it reads, nor for a --config file's values."""
    out, _ = trained
    model = out / "model_00000020.bin"
    val = ["-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16, "-m", 1]
    plain = run(["--eval-only", "-e", model] + val)
    assert "have no effect" not in plain.stderr, plain.stderr
    p = run(["--eval-only", "-e", model] + val + ["-l", "1e-3", "-x", 5, "--sampler", "random", "--seed", 5,
                                                  "--near", 4])
    assert ("note: --eval-only trains nothing, so -x, -l, --seed, --sampler, --near (the settings of a training "
            "run) have no effect; the evaluation reads -e, -j, -b, -t, -m and -o") in p.stderr, p.stderr
    assert p.stdout == plain.stdout  # the same evaluation
    assert "have no effect" not in run(["--eval-only", "-e", model, "--config", out / "config.json"] + val).stderr


def test_eval_json_of_another_input_is_replaced_with_a_note(trained, byte_data, tmp_path):
    """A new-user trial: a second --eval-only into the same -o, on another input, replaced eval.json without a
    word. It still does (no attention dumps there to mislabel), naming the evaluation replaced; the same input
    again is written over silently. eval.json records the process count its tokens count."""
    out, _ = trained
    model = out / "model_00000020.bin"
    ev = tmp_path / "ev"
    val = ["-j", f"{byte_data}/val_*.bin", "-b", 2, "-m", 1, "-o", ev]
    first = run(["--eval-only", "-e", model, "-t", 16] + val)
    rec = json.loads((ev / "eval.json").read_text())
    assert rec["processes"] == 1 and rec["tokens"] == rec["batches"] * 2 * 16
    assert "held the evaluation" not in run(["--eval-only", "-e", model, "-t", 16] + val).stderr
    p = run(["--eval-only", "-e", model, "-t", 8] + val)
    assert (f"note: {ev / 'eval.json'} held the evaluation of -j '{byte_data}/val_*.bin' -t 16 (loss "
            f"{rec['loss']}); this evaluation of another input replaced it (give another -o to keep both)") \
        in p.stderr, p.stderr
    assert json.loads((ev / "eval.json").read_text())["seq_len"] == 8 and "eval loss" in first.stdout


def test_eval_only_refuses_profile_steps(trained, byte_data):
    out, _ = trained
    assert_refused(["--eval-only", "-e", out / "model_00000020.bin", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16,
                    "--profile-steps", 2], out, "--profile-steps profiles training steps; drop it with --eval-only")


def test_eval_only_refuses_to_continue_a_run(trained, byte_data, tmp_path):
    """A new-user trial: --eval-only with -y 1 -o RUN or --fork-from took that run's settings and data, so -e
    was scored on another run's validation set (and -y 1 wrote eval.json into RUN). Refused, naming the fix."""
    out, _ = trained
    model = out / "model_00000020.bin"
    val = ["-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16, "-m", 1]
    fix = "to evaluate a run's checkpoint, give it as -e"
    assert_refused(["--eval-only", "-e", model] + val + ["-y", 1, "-o", out], out,
                   "--eval-only evaluates -e and continues no run, but -y 1 would take another run's settings")
    for extra in (["-o", tmp_path / "fork"], []):
        assert_refused(["--eval-only", "-e", model, "--fork-from", out / "model_00000010.bin"] + val + extra, out,
                       "but --fork-from would take another run's settings and data: drop it; " + fix)
    assert not (tmp_path / "fork").exists()
    # without -e, the refusal comes first (it said "--eval-only needs -e CHECKPOINT", then, with -e, this)
    assert_refused(["--eval-only", "--fork-from", out / "model_00000010.bin"] + val, out,
                   "but --fork-from would take another run's settings and data: drop it; " + fix)
    assert_refused(["--eval-only", "-y", 1, "-o", out] + val, out, "but -y 1 would take another run's settings")
    # a re-trial: --config RUN/config.json's -n is no error for an evaluation, and a TOML's output-dir (the
    # run's directory) would have received eval.json: refused. A run's own config.toml gives no -o (trial 8)
    p = run(["--eval-only", "-e", model, "--config", out / "config.json"] + val)
    assert "eval loss" in p.stdout and not (out / "eval.json").exists()
    p = run(["--eval-only", "-e", model, "--config", out / "config.toml"] + val)
    assert "eval loss" in p.stdout and not (out / "eval.json").exists()
    shutil.copy(out / "config.toml", tmp_path / "recipe.toml")
    assert_refused(["--eval-only", "-e", model, "--config", tmp_path / "recipe.toml"] + val, out,
                   f"--eval-only: -o {out} (from --config {tmp_path / 'recipe.toml'}) would write eval.json into "
                   "the directory that file names")


def test_errors_name_the_config_file_a_value_came_from(trained, byte_data, tmp_path):
    """A new-user trial: a value --config gave (-n, -o) was named in an error as if typed."""
    out, _ = trained
    assert_refused(["--config", out / "config.json", "-x", 1], out,
                   f"-n 10 (from --config {out / 'config.json'}) needs -o DIR to write checkpoints into")
    shutil.copy(out / "config.toml", tmp_path / "recipe.toml")  # not a run's own config.toml: its -o is taken
    assert_refused(["--config", tmp_path / "recipe.toml", "-x", 1], out,
                   f"output directory {out} (from --config {tmp_path / 'recipe.toml'}) already holds checkpoints")
    # a re-trial: a flag's own range (llmc/app/flags.h) refused for a value the file set names the file too
    toml = tmp_path / "bad.toml"
    toml.write_text("learning-rate = -1\n")
    assert_refused(["--config", toml, "-i", f"{byte_data}/train_*.bin", "-o", tmp_path / "x"], out,
                   f"-l/--learning-rate (from --config {toml}) must be >= 0")


def test_config_given_twice_is_refused(trained, tmp_path):
    """Two --config files are not merged, and the last would not simply win as a flag's value does: refused."""
    out, _ = trained
    assert_refused(["--config", out / "config.json", "--config", out / "config.toml", "-o", tmp_path / "two"], out,
                   f"--config given 2 times ({out / 'config.json'}, {out / 'config.toml'}); one file sets a run")
    assert not (tmp_path / "two").exists()


def test_eval_only_refuses_a_typed_train_data(trained, byte_data):
    """A new-user trial: --eval-only with -i (the training loss asked for) evaluated -j, or the run's -j, without
    a word. Refused; training shards are evaluated as -j (with a note that they are training shards)."""
    out, _ = trained
    model = out / "model_00000020.bin"
    assert_refused(["--eval-only", "-e", model, "-i", f"{byte_data}/train_*.bin", "-b", 2, "-t", 16], out,
                   "--eval-only evaluates -j and reads no -i: to evaluate on training shards, give them as -j")
    p = run(["--eval-only", "-e", model, "-j", f"{byte_data}/train_*.bin", "-b", 2, "-t", 16, "-m", 1])
    assert f"note: -j '{byte_data}/train_*.bin' reads training shards" in p.stderr, p.stderr
    assert "the loss is on tokens the model trained on" in p.stderr


def test_a_refused_fork_gets_no_note_on_its_validation_data(byte_data, tmp_path):
    """trial 14: a fork onto other training data printed the note on -j's directory, then the refusal of its
    data-loader state: a note on a run that does not start. The note now comes once the state has loaded."""
    other = tmp_path / "other"
    shutil.copytree(byte_data, other)
    (other / "meta.json").write_text(json.dumps({"vocab_size": 256, "eot": 10, "dataset": "other"}))
    (other / "train_000001.bin").unlink()  # other training text: fewer tokens than the run's loader state
    for shard in other.glob("val_*.bin"):
        flip_last_token_bit(shard)
    src = tmp_path / "src"
    run(data_args(byte_data) + TINY + ["-o", src, "-x", 2, "-v", 0])
    p = run(["--fork-from", src / "model_00000002.bin", "-o", tmp_path / "fork", "-x", 3, "-i",
             f"{other}/train_*.bin"], check=False)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1 and "data-loader state was saved by" in err[0], p.stderr
    # the same fork onto data its state fits (a copy of the run's) with -j of another set: the note, once
    same = tmp_path / "same"
    shutil.copytree(byte_data, same)
    p = run(["--fork-from", src / "model_00000002.bin", "-o", tmp_path / "fork2", "-x", 3, "-i",
             f"{same}/train_*.bin", "-j", f"{other}/val_*.bin", "-v", 3, "-m", 1])
    assert sum("is in another directory than -i" in ln for ln in p.stderr.splitlines()) == 1, p.stderr


def test_validation_data_in_another_directory_than_the_training_data_is_noted(byte_data, tmp_path):
    """trial 8 F3: -i and -j of two data sets tokenized alike trained with no word, and `make train
    TRAIN_ARGS="-i ..."` keeps tiny Shakespeare's -j: the validation loss was another data set's. A note, when
    the directories are known to hold two data sets (two meta.json that differ, or -i's own val_*.bin)."""
    other = tmp_path / "other"
    shutil.copytree(byte_data, other)
    (other / "meta.json").write_text(json.dumps({"vocab_size": 256, "eot": 10, "dataset": "other"}))
    for shard in other.glob("val_*.bin"):  # its own validation text (a byte copy of -j's would be -j's data)
        flip_last_token_bit(shard)
    p = run(["-i", f"{other}/train_*.bin", "-j", f"{byte_data}/val_*.bin"] + TINY + ["-x", 1, "-v", 1, "-m", 1])
    assert (f"note: -j '{byte_data}/val_*.bin' is in another directory than -i '{other}/train_*.bin' ({byte_data}, "
            f"not {other}): the validation loss is that of another data set than the training data's; for its own "
            f"validation split give -j '{other}/val_*.bin'") in p.stderr.splitlines(), p.stderr
    p = run(data_args(other) + TINY + ["-x", 1, "-v", 1, "-m", 1])
    assert "another directory" not in p.stderr, p.stderr
    shutil.copy(byte_data / "meta.json", other / "meta.json")  # a copy of the data set (the same meta.json)
    p = run(["-i", f"{other}/train_*.bin", "-j", f"{byte_data}/val_*.bin"] + TINY + ["-x", 1, "-v", 1, "-m", 1])
    assert "another directory" not in p.stderr, p.stderr
    # another data set (its own meta.json) with no validation split of its own: the note names no glob
    for f in other.glob("val_*.bin"):
        f.unlink()
    (other / "meta.json").write_text(json.dumps({"vocab_size": 256, "eot": 10, "dataset": "other"}))
    p = run(["-i", f"{other}/train_*.bin", "-j", f"{byte_data}/val_*.bin"] + TINY + ["-x", 1, "-v", 1, "-m", 1])
    assert (f"note: -j '{byte_data}/val_*.bin' is in another directory than -i '{other}/train_*.bin' ({byte_data}, "
            f"not {other}): the validation loss is that of another data set than the training data's") \
        in p.stderr.splitlines(), p.stderr
    # one data set split in two directories, neither with a meta.json (split/train, split/val): no note
    split = tmp_path / "split"
    for role in ("train", "val"):
        (split / role).mkdir(parents=True)
        shutil.copy(byte_data / "tokenizer.bin", split / role)
        for f in byte_data.glob(f"{role}_*.bin"):
            shutil.copy(f, split / role)
    p = run(["-i", f"{split}/train/train_*.bin", "-j", f"{split}/val/val_*.bin"] + TINY + ["-x", 1, "-v", 1, "-m", 1])
    assert p.returncode == 0 and "another directory" not in p.stderr, p.stderr
    # -j of byte copies of the training directory's own val_*.bin, in a directory without a meta.json: no note
    # (review of b392212: the note called them another data set)
    copies = tmp_path / "copies"
    copies.mkdir()
    for f in byte_data.glob("val_*.bin"):
        shutil.copy(f, copies)
    p = run(data_args(byte_data)[:2] + ["-j", f"{copies}/val_*.bin"] + TINY + ["-x", 1, "-v", 1, "-m", 1])
    assert p.returncode == 0 and "another directory" not in p.stderr, p.stderr
    # ... and one byte changed: they are not the training directory's split, so the note comes
    flip_last_token_bit(sorted(copies.glob("val_*.bin"))[-1])
    p = run(data_args(byte_data)[:2] + ["-j", f"{copies}/val_*.bin"] + TINY + ["-x", 1, "-v", 1, "-m", 1])
    assert f"for its own validation split give -j '{byte_data}/val_*.bin'" in p.stderr, p.stderr


def test_eval_only_of_another_data_set_than_the_run_trained_on_is_noted(byte_data, tmp_path):
    """A new-user trial: --eval-only with -j of another data set than the run's training data gave no note,
    where training on that -i with that -j does: the same note, with the run's -i from its config.json."""
    other = tmp_path / "other"
    shutil.copytree(byte_data, other)
    (other / "meta.json").write_text(json.dumps({"vocab_size": 256, "eot": 10, "dataset": "other"}))
    for shard in other.glob("val_*.bin"):  # its own validation text
        flip_last_token_bit(shard)
    out = tmp_path / "run"
    run(data_args(other) + TINY + ["-x", 1, "-v", 0, "-s", 0, "-n", 1, "-o", out])
    tail = (f"({byte_data}, not {other}): the validation loss is that of another data set than the training "
            f"data's; for its own validation split give -j '{other}/val_*.bin'")
    p = run(["--eval-only", "-e", out / "model_00000001.bin", "-j", f"{byte_data}/val_*.bin", "-m", 1])
    assert (f"note: -j '{byte_data}/val_*.bin' is in another directory than the training data of -e's run, -i "
            f"'{other}/train_*.bin' " + tail) in p.stderr.splitlines(), p.stderr
    p = run(["-i", f"{other}/train_*.bin", "-j", f"{byte_data}/val_*.bin"] + TINY + ["-x", 1, "-v", 1, "-m", 1])
    assert (f"note: -j '{byte_data}/val_*.bin' is in another directory than -i '{other}/train_*.bin' " + tail) \
        in p.stderr.splitlines(), p.stderr  # training's note, the same rule
    p = run(["--eval-only", "-e", out / "model_00000001.bin", "-j", f"{other}/val_*.bin", "-m", 1])
    assert "another directory" not in p.stderr, p.stderr


def test_eval_only_notes_qk_clip_on_a_qk_norm_checkpoint(byte_data, tmp_path):
    """trial 8 F6: --eval-only with --qk-clip on a QK-norm checkpoint was refused as the training
    combination is ("--qk-clip with --qk-norm"); an evaluation notes that --qk-clip has no effect."""
    out = tmp_path / "qkn"
    run(data_args(byte_data) + TINY + ["--qk-norm", "-o", out, "-x", 1, "-n", 1, "-v", 0])
    p = run(["--eval-only", "-e", out / "model_00000001.bin", "-j", f"{byte_data}/val_*.bin", "-b", 2, "-t", 16,
             "-m", 1, "--qk-clip", 5])
    assert "eval loss" in p.stdout
    assert ("note: --eval-only trains nothing, so --qk-clip (the settings of a training run) have no effect; "
            "the evaluation reads -e, -j, -b, -t, -m and -o") in p.stderr.splitlines(), p.stderr
    # training with both is still refused
    assert_refused(data_args(byte_data) + TINY + ["--qk-norm", "--qk-clip", 5, "-x", 1], tmp_path,
                   "--qk-clip with --qk-norm")


def test_a_command_line_only_flag_in_a_config_file_names_the_file(byte_data, tmp_path):
    """trial 8 F7: config= (or rank=, fork-from=) in a TOML file gave CLI11's own line without the file."""
    for key, flag in (("config", "--config"), ("rank", "--rank"), ("fork-from", "--fork-from")):
        toml = tmp_path / f"{key}.toml"
        toml.write_text(f'{key}="1"\nmax-steps=2\n')
        assert_refused(["--config", toml] + data_args(byte_data), tmp_path,
                       f"config file {toml}: '{key}' cannot be set in a file ({flag} is a command-line flag only); "
                       "give it on the command line")


def test_a_float_model_flag_against_a_checkpoint_is_written_as_given(trained, byte_data):
    """trial 8 F8: --attn-softcap 0.05 against a checkpoint was named '0.05000000075' (the float widened)."""
    out, _ = trained
    assert_refused(["--eval-only", "-e", out / "model_00000010.bin", "-j", f"{byte_data}/val_*.bin",
                    "--attn-softcap", "0.05"], out,
                   f"--attn-softcap 0.05 contradicts the checkpoint {out / 'model_00000010.bin'} (which has 0)")
