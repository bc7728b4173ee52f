"""Helpers the pytest tests share to run the repository's programs on small data: where the programs and
the data are, a tiny model, running the trainer, writing byte-level shards and tokenizers, reading the
run's records, comparing two runs, and the GPT-2-BPE tiny-Shakespeare shards. test/conftest.py turns
byte_data_in() into the session's `byte_data` fixture.

The trainer is $TRAIN_GPT2_LS, else the repository's ./train_gpt2_ls (`make train_gpt2_ls`).
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TRAIN_GPT2_LS", REPO / "train_gpt2_ls"))  # override to test another build
SHARED = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))
TS_GPT2 = REPO / "data" / "shards" / "tinyshakespeare_gpt2"  # `make data-tinyshakespeare`
TINY_SHAKESPEARE = SHARED / "tinyshakespeare" / "input.txt"

# A tiny LS model for the byte-level data: L=2, C=32, NH=4 (hd 8), G=1, P=8.
TINY = ["--layers", "2", "--channels", "32", "--heads", "4", "--global-heads", "1", "--window", "8",
        "--max-seq-len", "64", "-b", "4", "-t", "32", "--threads", "1"]


def torch_python():
    """The python the tests run PyTorch code with: $TORCH_PYTHON if set, else the first of Debian's
    /usr/bin/python3 and the python running the tests that imports torch, else /usr/bin/python3 (whose
    missing torch the calling test names when it skips)."""
    if os.environ.get("TORCH_PYTHON"):
        return os.environ["TORCH_PYTHON"]
    for py in ("/usr/bin/python3", sys.executable):
        try:
            if subprocess.run([py, "-c", "import torch"], capture_output=True, timeout=120).returncode == 0:
                return py
        except (OSError, subprocess.SubprocessError):
            pass
    return "/usr/bin/python3"


def run(args, check=True, timeout=300):
    """Runs the trainer from the repository root on the CPU (these tests mean the CPU backend even on a
    machine with a GPU; a later --device in args wins); returns the CompletedProcess. check: a non-zero
    exit fails the test with the trainer's stderr."""
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls` (or set TRAIN_GPT2_LS)")
    p = subprocess.run([str(BIN), "--device", "cpu"] + [str(a) for a in args], cwd=REPO, capture_output=True,
                       text=True, timeout=timeout)
    if check and p.returncode != 0:
        pytest.fail(f"train_gpt2_ls {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}\n{p.stdout[-2000:]}")
    return p


# ---------------------------------------------------------------------------------------------
# data (docs/formats.md)

def write_shard(path, tokens):
    """A token shard of uint16 tokens (version 1)."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def write_byte_tokenizer(path, eot):
    """tokenizer.bin of the byte-level vocabulary (token b decodes to byte b), EOT `eot`."""
    header = np.zeros(256, dtype=np.uint32)
    header[:4] = [20240328, 2, 256, eot]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for b in range(256):
            f.write(bytes([1, b]))


def shakespeare_bytes(n, required=False):
    """The first n bytes of tiny Shakespeare; without the shared copy a deterministic stand-in with some
    structure to learn (required: a failure instead)."""
    if TINY_SHAKESPEARE.exists():
        return TINY_SHAKESPEARE.read_bytes()[:n]
    if required:
        pytest.fail(f"{TINY_SHAKESPEARE} is missing; the shared data folder must be at ../shared/data or SHARED_DATA")
    rng = np.random.default_rng(0)
    words = [b"the", b"king", b"shall", b"not", b"be", b"so", b"and", b"my", b"lord", b"good"]
    return b" ".join(words[i] for i in rng.integers(0, len(words), n // 4 + 1))[:n]


def write_byte_data(d, text, train_ends, meta=None, tokenizer=False):
    """Byte-level shards (V = 256) of `text` in folder d: train_00000k.bin holds text[train_ends[k-1]:
    train_ends[k]] (from 0), val_000000.bin the rest; meta.json (default: V 256, EOT '\\n'), and
    tokenizer.bin when asked. Returns d."""
    tok = np.frombuffer(text, dtype=np.uint8).astype(np.uint16)
    for k, (a, b) in enumerate(zip([0] + list(train_ends), train_ends)):
        write_shard(d / f"train_{k:06d}.bin", tok[a:b])
    write_shard(d / "val_000000.bin", tok[train_ends[-1]:])
    (d / "meta.json").write_text(json.dumps(meta or {"vocab_size": 256, "eot": 10}))
    if tokenizer:
        write_byte_tokenizer(d / "tokenizer.bin", 10)
    return d


def byte_data_in(d):
    """The shared byte-level data set (the `byte_data` fixture, test/conftest.py): the first 120 kB of tiny
    Shakespeare to train on (two shards), the next 12 kB to validate; V 256, EOT '\\n', tokenizer.bin."""
    return write_byte_data(d, shakespeare_bytes(132_000), [60_000, 120_000], tokenizer=True)


def data_args(d):
    return ["-i", f"{d}/train_*.bin", "-j", f"{d}/val_*.bin"]


def gpt2_tinyshakespeare():
    """data/shards/tinyshakespeare_gpt2 (GPT-2 BPE), prepared by data/prepare.py when missing."""
    if not (TS_GPT2 / "meta.json").exists():
        env = dict(os.environ, GPT2_BPE_DIR=str(SHARED / "gpt2"))
        subprocess.run([sys.executable, "data/prepare.py", "--dataset", "tinyshakespeare", "--source",
                        str(TINY_SHAKESPEARE), "--out", str(TS_GPT2), "--tokenizer", "gpt2"], cwd=REPO, env=env,
                       check=True)
    return TS_GPT2


# ---------------------------------------------------------------------------------------------
# a run's records (docs/formats.md)

def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def train_records(path):
    return [r for r in read_jsonl(path) if "loss" in r]


def dir_hashes(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(d).iterdir()) if p.is_file()}


def assert_same_run(ref_dir, other_dir, step):
    """Every training loss (bitwise, as written) and the final model and state files are identical."""
    ref = {r["step"]: r for r in read_jsonl(ref_dir / "metrics.jsonl")}
    got = {r["step"]: r for r in read_jsonl(other_dir / "metrics.jsonl")}
    assert sorted(ref) == sorted(got)
    for s in ref:
        for key in ["loss", "z_loss", "grad_norm", "lr", "val_loss", "loss_z", "norm_z", "skipped_spike"]:
            assert ref[s].get(key) == got[s].get(key), f"step {s}: {key} {ref[s].get(key)} != {got[s].get(key)}"
    name = f"model_{step:08d}.bin"
    assert (ref_dir / name).read_bytes() == (other_dir / name).read_bytes(), f"{name} differs"
    name = f"state_{step:08d}_00000.bin"
    assert (ref_dir / name).read_bytes() == (other_dir / name).read_bytes(), f"{name} differs"


def assert_refused(args, out_dir, expect):
    """The trainer refuses `args` with one `error:` line containing `expect`, a non-zero exit, and no file of
    out_dir changed."""
    before = dir_hashes(out_dir)
    p = run(args, check=False)
    assert p.returncode != 0, f"{args} should fail"
    err = p.stderr.strip().splitlines()
    assert len(err) >= 1 and err[-1].startswith("error: "), p.stderr
    assert expect in err[-1], f"expected '{expect}' in: {err[-1]}"
    assert len([ln for ln in err if ln.startswith("error")]) == 1
    assert dir_hashes(out_dir) == before, "a refused run changed files in the output directory"


# ---------------------------------------------------------------------------------------------
# builds

def need_emulated_build(path):
    """path, a program of the emulated build (build/emu, or build/emu-fp32); a failure naming the make
    command when it is missing."""
    if not Path(path).exists():
        pytest.fail(f"{path} is missing; build it with `make emu` (part of `make test`)"
                    + (" and `make emu PRECISION=FP32`" if "fp32" in str(path) else ""))
    return path


def flip_last_token_bit(shard):
    """Shard (version 1: uint16 token ids) with its last token's lowest bit flipped: another token of the
    vocabulary for an even V (a byte-level token stays one; GPT-2's EOT 50256 would become 50257, outside
    V = 50257), so the shard holds other text of the same size."""
    data = bytearray(shard.read_bytes())
    assert int.from_bytes(data[4:8], "little") == 1, f"{shard}: not a version-1 (uint16) shard"
    data[-2] ^= 1
    shard.write_bytes(bytes(data))
