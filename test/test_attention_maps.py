"""Attention maps end to end: `train_gpt2_ls --eval-only --dump-attention L:H,...` on tiny trained
checkpoints (an LS model with and without QK-norm + soft-cap), and scripts/plot_attention.py on the
dumps.

The dumps are checked against an independent NumPy float64 forward of the checkpoint (read here from
the model-file format of docs/formats.md) over the first validation sequence: every probability, the
(T, T) float32 .npy format, rows summing to 1, exact zeros outside the causal mask and a local head's
window, the same map whatever -b. Bad flags fail with one `error:` line, a non-zero exit and nothing
written. The plot script makes a PNG per dump, prints each head's near mass (checked against the
number computed here), refuses bad input and notes labels whose mask shows keys a dump never attends
(synthetic maps: a banded head called global or given a wider window; global heads with underflowed far
keys are not misjudged). The plot tests skip only when matplotlib is missing.

The trainer is $TRAIN_GPT2_LS, else the repository's ./train_gpt2_ls (`make train_gpt2_ls`), run on the
CPU (test/run_helpers.py).
"""
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from run_helpers import REPO, run, shakespeare_bytes, write_byte_data

PLOT = REPO / "scripts" / "plot_attention.py"

# Tiny LS model: L=2, C=32, NH=4 (hd 8), heads 0..2 local with P=6, head 3 global; T=24 > 3P.
L, C, NH, G, P, T = 2, 32, 4, 1, 6, 24
MODEL = ["--layers", L, "--channels", C, "--heads", NH, "--global-heads", G, "--window", P, "--max-seq-len", 32]
VARIANTS = {"plain": [], "qknorm_softcap": ["--qk-norm", "--attn-softcap", 3],
            "nobias_erf_qknorm": ["--bias", 0, "--gelu", "erf", "--qk-norm"]}
ALL_HEADS = ",".join(f"{l}:{h}" for l in range(L) for h in range(NH))
# fp32 trainer vs float64 NumPy through two small layers: scores agree to ~1e-6, probabilities to
# ~1e-6; 1e-5 still catches a wrong head, layer, sequence, mask, scale or cap (>= 1e-3 here).
PROB_TOL = 1e-5


def plot(args, check=True):
    p = subprocess.run([sys.executable, str(PLOT)] + [str(a) for a in args], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    if check and p.returncode != 0:
        pytest.fail(f"plot_attention.py {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}\n{p.stdout}")
    return p


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Byte-level shards (V = 256): 60 kB of tiny Shakespeare to train on, the next 4 kB to evaluate."""
    return write_byte_data(tmp_path_factory.mktemp("attn_data"), shakespeare_bytes(64_000), [60_000])


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def trained(request, data, tmp_path_factory):
    """(run dir, checkpoint) of a 12-step run of the tiny model (variant: plain, QK-norm + soft-cap, or
    the paper's no biases + erf GELU with QK-norm)."""
    out = tmp_path_factory.mktemp(f"attn_run_{request.param}")
    run(["-i", f"{data}/train_*.bin", "-o", out, "-x", 12, "-b", 4, "-t", T, "-v", 0, "-s", 0,
         "-l", "1e-2", "-u", 2, "--threads", 1] + MODEL + VARIANTS[request.param])
    return out, out / "model_00000012.bin"


def eval_args(data, ckpt, out, heads=ALL_HEADS, b=2):
    return ["--eval-only", "-e", ckpt, "-j", f"{data}/val_*.bin", "-b", b, "-t", T, "-m", 1,
            "--threads", 1, "--dump-attention", heads, "-o", out]


# ---------------------------------------------------------------------------------------------
# an independent float64 NumPy forward of the checkpoint (docs/formats.md, llmc/core/params.h)

def load_checkpoint(path):
    raw = Path(path).read_bytes()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    # version 4 (the trainer's: a header checksum and the tokenizer's id), 3 (a header checksum); without: 1
    # for biases and tanh GELU (words 20, 21 zero), 2 otherwise (docs/formats.md)
    assert h[0] == 20250521 and h[1] in (4, 3, 1 if h[20] == 0 and h[21] == 0 else 2) and h[12] == 0, \
        "our fp32 model file"
    cfg = dict(maxT=int(h[2]), V=int(h[3]), L=int(h[4]), NH=int(h[5]), C=int(h[6]), Vp=int(h[7]), G=int(h[8]),
               P=int(h[9]), qk_norm=bool(h[10]), tied=bool(h[11]),
               softcap=struct.unpack("<f", struct.pack("<i", int(h[13])))[0],
               bias=int(h[20]) == 0, erf=int(h[21]) == 1)  # words 20, 21: no biases, erf GELU
    assert int(h[20]) in (0, 1) and int(h[21]) in (0, 1), "header words 20 (no biases) and 21 (GELU) are 0 or 1"
    Lm, Cm, Vp, maxT, hd = cfg["L"], cfg["C"], cfg["Vp"], cfg["maxT"], cfg["C"] // cfg["NH"]
    qk = Lm * hd if cfg["qk_norm"] else 0
    b = 1 if cfg["bias"] else 0  # without biases every bias tensor is empty, the others keep their order
    shapes = [("wte", (Vp, Cm)), ("wpe", (maxT, Cm)), ("ln1w", (Lm, Cm)), ("ln1b", (b * Lm, Cm)),
              ("qkvw", (Lm, 3 * Cm, Cm)), ("qkvb", (b * Lm, 3 * Cm)), ("attprojw", (Lm, Cm, Cm)),
              ("attprojb", (b * Lm, Cm)), ("ln2w", (Lm, Cm)), ("ln2b", (b * Lm, Cm)), ("fcw", (Lm, 4 * Cm, Cm)),
              ("fcb", (b * Lm, 4 * Cm)), ("fcprojw", (Lm, Cm, 4 * Cm)), ("fcprojb", (b * Lm, Cm)), ("lnfw", (Cm,)),
              ("lnfb", (b * Cm,))]
    if qk:
        shapes += [("qnormw", (Lm, hd)), ("qnormb", (b * Lm, hd)), ("knormw", (Lm, hd)), ("knormb", (b * Lm, hd))]
    payload = np.frombuffer(raw[1024:], dtype="<f4").astype(np.float64)
    w, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        w[name] = payload[off:off + n].reshape(shape)
        off += n
    for name, shape in shapes:  # a model without biases: the bias terms are 0
        if w[name].size == 0:
            w[name] = np.zeros((Lm,) + shape[1:] if name != "lnfb" else (Cm,))
    return cfg, w


def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g + b


def reference_probs(ckpt, tokens):
    """{(layer, head): (T, T) float64 attention probabilities} of one sequence."""
    cfg, w = load_checkpoint(ckpt)
    n, Cm, NHm, hd = len(tokens), cfg["C"], cfg["NH"], cfg["C"] // cfg["NH"]
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    x = w["wte"][tokens] + w["wpe"][:n]
    out = {}
    for l in range(cfg["L"]):
        qkv = layernorm(x, w["ln1w"][l], w["ln1b"][l]) @ w["qkvw"][l].T + w["qkvb"][l]  # (T, 3C)
        q, k, v = (qkv[:, s * Cm:(s + 1) * Cm].reshape(n, NHm, hd) for s in range(3))
        if cfg["qk_norm"]:
            q = layernorm(q, w["qnormw"][l], w["qnormb"][l])
            k = layernorm(k, w["knormw"][l], w["knormb"][l])
        y = np.zeros((n, NHm, hd))
        for h in range(NHm):
            s = q[:, h] @ k[:, h].T / np.sqrt(hd)
            if cfg["softcap"] > 0:
                s = cfg["softcap"] * np.tanh(s / cfg["softcap"])
            vis = j <= i
            if h < NHm - cfg["G"]:
                vis = vis & (i - j < cfg["P"])
            s = np.where(vis, s, -np.inf)
            p = np.exp(s - s.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            out[(l, h)] = p
            y[:, h] = p @ v[:, h]
        x = x + y.reshape(n, Cm) @ w["attprojw"][l].T + w["attprojb"][l]
        f = layernorm(x, w["ln2w"][l], w["ln2b"][l]) @ w["fcw"][l].T + w["fcb"][l]
        if cfg["erf"]:
            f = 0.5 * f * (1 + np.vectorize(math.erf)(f / np.sqrt(2)))
        else:
            f = 0.5 * f * (1 + np.tanh(np.sqrt(2 / np.pi) * (f + 0.044715 * f ** 3)))
        x = x + f @ w["fcprojw"][l].T + w["fcprojb"][l]
    return out


def visible(local):
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return (j <= i) & ((i - j < P) if local else True)


# ---------------------------------------------------------------------------------------------

def test_help_lists_dump_attention():
    p = run(["--help"])
    assert "--dump-attention" in p.stdout


def test_dump_matches_numpy_forward(trained, data, tmp_path):
    run_dir, ckpt = trained
    eo = tmp_path / "eval"
    p = run(eval_args(data, ckpt, eo))
    names = sorted(f.name for f in eo.iterdir())
    assert names == sorted([f"attn_L{l}_H{h}.npy" for l in range(L) for h in range(NH)] + ["eval.json"]), names
    for l in range(L):
        for h in range(NH):
            assert f"to {eo}/attn_L{l}_H{h}.npy" in p.stdout
    assert "error" not in p.stderr

    # the first validation sequence: tokens [0, T) of the shard (read in order, never shuffled)
    val = np.fromfile(data / "val_000000.bin", dtype=np.uint16, offset=1024)[:T].astype(np.int64)
    ref = reference_probs(ckpt, val)
    for l in range(L):
        for h in range(NH):
            local = h < NH - G
            f = eo / f"attn_L{l}_H{h}.npy"
            raw = f.read_bytes()
            assert raw[:8] == b"\x93NUMPY\x01\x00"  # format version 1.0
            assert (10 + int.from_bytes(raw[8:10], "little")) % 64 == 0
            a = np.load(f, allow_pickle=False)
            assert a.dtype == np.dtype("<f4") and a.shape == (T, T) and a.flags["C_CONTIGUOUS"], (a.dtype, a.shape)
            vis = visible(local)
            assert np.all(a[~vis] == 0), f"L{l} H{h}: non-zero probability outside the mask"
            assert np.all(a[vis] > 0), f"L{l} H{h}: a visible key with probability 0 (mask too wide?)"
            assert np.abs(a.astype(np.float64).sum(1) - 1).max() <= 1e-5
            err = np.abs(a - ref[(l, h)]).max()
            assert err <= PROB_TOL, f"L{l} H{h}: max |dump - numpy| = {err:.3g}"
            if not local:  # the global head reaches past the window
                assert a[T - 1, : T - P].sum() > 1e-3


def test_dump_is_the_first_sequence_whatever_the_batch_size(trained, data, tmp_path):
    _, ckpt = trained
    run(eval_args(data, ckpt, tmp_path / "b1", heads="1:0,1:3", b=1))
    run(eval_args(data, ckpt, tmp_path / "b4", heads="1:0,1:3", b=4))
    for name in ["attn_L1_H0.npy", "attn_L1_H3.npy"]:
        # every CPU op computes a row the same way whatever the number of rows: bit-identical
        assert (tmp_path / "b1" / name).read_bytes() == (tmp_path / "b4" / name).read_bytes()


@pytest.mark.parametrize("extra,drop,expect", [
    (["--dump-attention", "0"], [], "'0' has no ':'"),
    (["--dump-attention", "a:b"], [], "LAYER:HEAD"),
    (["--dump-attention", "0:0,"], [], "empty item"),
    (["--dump-attention", "0:1:2"], [], "LAYER:HEAD"),
    (["--dump-attention", "0:0,2:0"], [], "layer 2 does not exist, the model has 2 layers (0..1)"),
    (["--dump-attention", "1:4"], [], "head 4 does not exist, the model has 4 heads per layer (0..3)"),
    ([], ["--eval-only"], "--dump-attention works with --eval-only only; add --eval-only"),
    ([], ["-o"], "give -o DIR"),
])
def test_bad_dump_flags_fail_cleanly(trained, data, tmp_path, extra, drop, expect):
    _, ckpt = trained
    out = tmp_path / "never"
    args = eval_args(data, ckpt, out)
    for flag in drop:
        k = args.index(flag)
        del args[k:k + (1 if flag == "--eval-only" else 2)]
    if "--eval-only" in drop:
        args += ["-i", f"{data}/train_*.bin", "-x", 1]
    p = run(args + extra, check=False)
    assert p.returncode != 0
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), p.stderr
    assert expect in err[0], err[0]
    assert not out.exists(), "a refused run wrote files"


# ---------------------------------------------------------------------------------------------
# scripts/plot_attention.py

# The tests of plot_attention.py run on one variant's dumps: it reads the model's window, heads and global
# heads and the run's near from config.json, the same in every variant (the dumps themselves are checked
# per variant above); running them per variant tripled ~35 s of plotting and refusals.
ONE_VARIANT = pytest.mark.parametrize("trained", ["plain"], indirect=True)


@pytest.fixture(scope="module")
def dumps(trained, data, tmp_path_factory):
    """The eval directory of every head's dump (and the run's config.json)."""
    pytest.importorskip("matplotlib", reason="matplotlib is missing (requirements.txt lists it): plot tests not run")
    run_dir, ckpt = trained
    eo = tmp_path_factory.mktemp("attn_eval")
    run(eval_args(data, ckpt, eo))
    return run_dir, eo


def near_mass(a, near):
    i = np.arange(a.shape[0])[:, None]
    j = np.arange(a.shape[0])[None, :]
    return float((a.astype(np.float64) * (i - j < near)).sum(1).mean())


def check_png(path):
    import matplotlib.image as mpimg
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 200, img.shape
    assert img[..., :3].std() > 0.05  # not a blank canvas


@ONE_VARIANT
def test_plot_attention_pngs_and_near_mass(dumps, tmp_path):
    run_dir, eo = dumps
    out = tmp_path / "png"
    p = plot([eo, "--config", run_dir / "config.json", "--out", out])
    lines = p.stdout.splitlines()
    assert len(lines) == L * NH, p.stdout
    for l in range(L):
        for h in range(NH):
            png = out / f"attn_L{l}_H{h}.png"
            check_png(png)
            line = next(ln for ln in lines if ln.startswith(f"{png}:"))
            kind = f"local P={P}" if h < NH - G else "global"
            nm = near_mass(np.load(eo / f"attn_L{l}_H{h}.npy"), P)
            assert f"layer {l} head {h} ({kind}), T {T}, near mass (i-j < {P}) {nm:.4f}" in line, line
            if h < NH - G:
                assert f"{nm:.4f}" == "1.0000"  # a local head with N = P has no far keys
    assert p.stderr == ""

    # one file, linear scale, another near distance, geometry from flags; PNG next to the .npy
    one = tmp_path / "one"
    one.mkdir()
    (one / "attn_L1_H3.npy").write_bytes((eo / "attn_L1_H3.npy").read_bytes())
    p = plot([one / "attn_L1_H3.npy", "--window", P, "--global-heads", G, "--heads", NH, "--near", 3,
              "--scale", "linear"])
    check_png(one / "attn_L1_H3.png")
    nm = near_mass(np.load(one / "attn_L1_H3.npy"), 3)
    assert f"near mass (i-j < 3) {nm:.4f}" in p.stdout
    assert nm < 1.0


@ONE_VARIANT
def test_plot_attention_refuses_bad_input(dumps, tmp_path):
    run_dir, eo = dumps
    conf = ["--config", run_dir / "config.json"]
    good = np.load(eo / "attn_L0_H0.npy")

    def refused(args, expect):
        out = tmp_path / "out"
        p = plot(args + ["--out", out], check=False)
        assert p.returncode == 1, (args, p.stdout, p.stderr)
        err = p.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and expect in err[0], (expect, p.stderr)
        assert not out.exists() or not any(out.iterdir()), "a refused plot wrote files"

    refused([tmp_path / "nothing.npy"] + conf, "no such file")
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    refused([empty] + conf, "no attn_L<l>_H<h>.npy")
    named = tmp_path / "probs.npy"
    np.save(named, good)
    refused([named] + conf, "attn_L<layer>_H<head>.npy")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "attn_L0_H0.npy").write_bytes(b"not a numpy file at all")
    refused([bad / "attn_L0_H0.npy"] + conf, "not a readable .npy")
    np.save(bad / "attn_L0_H1.npy", np.zeros((2, 3, 3), np.float32))
    refused([bad / "attn_L0_H1.npy"] + conf, "is not (T, T)")
    np.save(bad / "attn_L0_H2.npy", good * 0.5)
    refused([bad / "attn_L0_H2.npy"] + conf, "sums to 0.5")
    lone = tmp_path / "lone"  # a dump without the eval.json that names its model
    lone.mkdir()
    (lone / "attn_L0_H0.npy").write_bytes((eo / "attn_L0_H0.npy").read_bytes())
    refused([lone / "attn_L0_H0.npy"], "give --config")
    refused([eo / "attn_L0_H0.npy", "--config", tmp_path / "nothing.json"], "cannot read")
    # the global head's map under a config that calls it local: far keys are non-zero
    refused([eo / "attn_L0_H3.npy", "--window", P, "--global-heads", 0, "--heads", NH], "do not match")
    refused([eo / "attn_L0_H3.npy", "--window", P, "--global-heads", G, "--heads", 3], "head 3 does not exist")
    refused([eo / "attn_L0_H0.npy", "--window", 0, "--global-heads", G, "--heads", NH], "--window 0")


@ONE_VARIANT
def test_eval_json_names_the_model_absolute_and_a_relative_one_is_not_trusted(dumps, data, tmp_path):
    """eval.json records -e as an absolute path, so plot_attention finds the right run from any directory;
    a relative "model" (eval.json of older versions) is relative to an unknown directory: not taken (here it
    would name a decoy run of another shape from the plot's working directory)."""
    import os
    import shutil
    run_dir, eo = dumps
    ev = json.loads((eo / "eval.json").read_text())
    assert os.path.isabs(ev["model"]) and Path(ev["model"]).parent == run_dir
    rel_eval = tmp_path / "rel_eval"
    run(eval_args(data, os.path.relpath(ev["model"], REPO), rel_eval))
    recorded = json.loads((rel_eval / "eval.json").read_text())["model"]
    assert os.path.isabs(recorded) and Path(recorded).resolve() == Path(ev["model"]).resolve()
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    other = json.loads((run_dir / "config.json").read_text())
    other["model"]["global_heads"] = NH  # another run: every head global
    (decoy / "config.json").write_text(json.dumps(other))
    old = tmp_path / "old"
    shutil.copytree(eo, old)
    ev["model"] = os.path.relpath(decoy / "model_00000001.bin", REPO)  # relative to the plot's directory
    (old / "eval.json").write_text(json.dumps(ev))
    p = plot([old / "attn_L0_H0.npy", "--out", tmp_path / "out"], check=False)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1 and "give --config" in err[0], (p.stdout, p.stderr)


@ONE_VARIANT
def test_plot_attention_flags_that_differ_from_the_dumps_model_say_so(dumps, tmp_path):
    """The flags win over the dumps' own model (a what-if view), but labelled a local head "global" without a
    word while a --config of the same values is refused: now one note names each flag that differs."""
    run_dir, eo = dumps
    p = plot([eo, "--global-heads", NH, "--out", tmp_path / "flags"])
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and f"--global-heads {NH} (the model's {G})" in notes[0], p.stderr
    assert f"{run_dir}/config.json, named by {eo}/eval.json" in notes[0], notes[0]
    assert "layer 0 head 0 (global)" in p.stdout  # the flags' model, as asked
    p = plot([eo, "--window", P, "--heads", NH, "--out", tmp_path / "same"])  # the model's own values
    assert "note:" not in p.stderr, p.stderr


@ONE_VARIANT
def test_plot_attention_takes_the_model_the_dump_names(dumps, tmp_path):
    """eval.json beside the dumps names the checkpoint, whose run's config.json describes the model: it is used
    without --config, and a --config of another model is refused; a dump without eval.json uses --config with a
    note that it cannot be checked."""
    run_dir, eo = dumps
    p = plot([eo, "--out", tmp_path / "own"])
    for h in range(NH):
        kind = f"local P={P}" if h < NH - G else "global"
        assert f"layer 0 head {h} ({kind})" in p.stdout, p.stdout
    other = json.loads((run_dir / "config.json").read_text())
    other["model"]["global_heads"] = NH  # another run: every head global
    (tmp_path / "other.json").write_text(json.dumps(other))
    out = tmp_path / "refused"
    p = plot([eo, "--config", tmp_path / "other.json", "--out", out], check=False)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1 and err[0].startswith("error: --config "), p.stderr
    assert f"{eo}/eval.json" in err[0] and f"{run_dir}/config.json" in err[0] and "global heads" in err[0], err[0]
    assert not out.exists() or not any(out.iterdir())
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "attn_L0_H0.npy").write_bytes((eo / "attn_L0_H0.npy").read_bytes())
    p = plot([lone, "--config", run_dir / "config.json"])
    notes = p.stderr.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: ") and "cannot check" in notes[0], p.stderr


def header_fnv1a64(path):
    """FNV-1a 64 of a model file's 1024-byte header (docs/formats.md, eval.json), as 16 hex digits."""
    h = 0xcbf29ce484222325
    for b in Path(path).read_bytes()[:1024]:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_plot_attention_refuses_a_checkpoint_replaced_since_the_eval(data, tmp_path):
    """eval.json names the checkpoint by path and by the checksum of its header (which holds the payload's):
    after the run directory was replaced by a run of another model (every head global) under the same
    checkpoint name, the dumps are not labelled with the new model: refused, naming the fix; a --config then
    given is used with a note; an eval.json of an older build (no checksum) gets a note that it cannot check."""
    pytest.importorskip("matplotlib", reason="matplotlib is missing (requirements.txt lists it): plot tests not run")
    import shutil
    mine = tmp_path / "run"
    ckpt = mine / "model_00000004.bin"
    train = ["-i", f"{data}/train_*.bin", "-o", mine, "-x", 4, "-b", 2, "-t", T, "-v", 0, "-s", 0, "-l", "1e-2",
             "--threads", 1, "--layers", L, "--channels", C, "--heads", NH, "--max-seq-len", 32]
    run(train + ["--global-heads", G, "--window", P])
    shutil.copy(mine / "config.json", tmp_path / "evaluated_config.json")
    eo = tmp_path / "eval"
    run(eval_args(data, ckpt, eo, heads="0:0,0:3"))
    ev = json.loads((eo / "eval.json").read_text())
    assert ev["model_header_fnv1a64"] == header_fnv1a64(ckpt), ev
    p = plot([eo, "--out", tmp_path / "before"])
    assert f"layer 0 head 0 (local P={P})" in p.stdout and p.stderr == "", (p.stdout, p.stderr)

    shutil.rmtree(mine)  # "run it again": another model under the same -o and checkpoint name
    run(train + ["--global-heads", NH])
    assert header_fnv1a64(ckpt) != ev["model_header_fnv1a64"]
    out = tmp_path / "after"
    p = plot([eo, "--out", out], check=False)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1 and err[0].startswith("error: "), (p.stdout, p.stderr)
    assert str(ckpt) in err[0] and "no longer the model" in err[0] and "--config" in err[0], err[0]
    assert not out.exists() or not any(out.iterdir())
    # the checkpoint removed: the same refusal, naming that it is missing
    ckpt.rename(mine / "moved.bin")
    p = plot([eo, "--out", out], check=False)
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1 and "no longer exists" in err[0], p.stderr
    (mine / "moved.bin").rename(ckpt)
    # the fix the error names: the evaluated run's config.json, given by hand (cannot be checked: a note)
    p = plot([eo, "--config", tmp_path / "evaluated_config.json", "--out", out])
    notes = p.stderr.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: ") and "no longer the model" in notes[0], p.stderr
    assert f"layer 0 head 0 (local P={P})" in p.stdout, p.stdout
    # a re-evaluation with -o there is refused too: it would put the new model's name on the old dumps
    q = run(eval_args(data, ckpt, eo, heads="0:1"), check=False)
    assert q.returncode != 0 and "another model" in q.stderr, q.stderr
    good = ckpt.read_bytes()  # a truncated file there: the loader says so, not "another model"
    ckpt.write_bytes(good[:100])
    q = run(eval_args(data, ckpt, eo, heads="0:1"), check=False)
    assert q.returncode != 0 and "another model" not in q.stderr and "shorter than" in q.stderr, q.stderr
    ckpt.write_bytes(good)
    # an eval.json of an older build (no checksum): used, with a note that the model cannot be checked
    old = tmp_path / "old"
    shutil.copytree(eo, old)
    del ev["model_header_fnv1a64"]
    (old / "eval.json").write_text(json.dumps(ev))
    shutil.copy(tmp_path / "evaluated_config.json", mine / "config.json")
    p = plot([old, "--out", tmp_path / "old_png"])
    notes = p.stderr.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: ") and "cannot check" in notes[0], p.stderr
    assert f"layer 0 head 0 (local P={P})" in p.stdout, p.stdout


def test_plot_attention_splits_at_the_near_the_checkpoint_was_trained_with(data, tmp_path):
    """trial 3 F9: a run started with --near 4 and resumed with --near 16 had its dumps split at 4 (config.json's
    start value), while the checkpoint's statistics split at 16. The split of a checkpoint is the --near of the
    steps before it (config.json's history)."""
    out = tmp_path / "run"
    base = ["-i", f"{data}/train_*.bin", "-o", out, "-b", 4, "-t", T, "-v", 0, "-s", 0, "-n", 3, "--threads", 1]
    run(base + ["-x", 3, "--near", 4] + MODEL)
    run(base + ["-x", 6, "--near", 16, "-y", 1])
    assert json.loads((out / "config.json").read_text())["history"], "the resume recorded no --near change"
    for step, near in ((3, 4), (6, 16)):
        ev = tmp_path / f"eval{step}"
        run(eval_args(data, out / f"model_{step:08d}.bin", ev, heads="0:0"))
        p = plot([ev, "--config", out / "config.json"])
        assert f"near mass (i-j < {near})" in p.stdout, (step, p.stdout, p.stderr)


def test_dumps_of_another_input_into_one_folder_are_refused(data, tmp_path):
    """trial 5 F6: --dump-attention of the training data (or another -t) into an -o that held the dumps of the
    validation data put both under one eval.json, which named only the last input: refused, one line naming the
    folder, what its dumps are of and the fix; nothing there changes. The same input again writes over."""
    from run_helpers import dir_hashes
    mine = tmp_path / "run"
    run(["-i", f"{data}/train_*.bin", "-o", mine, "-x", 1, "-b", 2, "-t", T, "-v", 0, "-s", 0, "--threads", 1]
        + MODEL)
    ckpt, eo = mine / "model_00000001.bin", tmp_path / "maps"
    run(eval_args(data, ckpt, eo, heads="0:0"))
    before = dir_hashes(eo)
    val = json.loads((eo / "eval.json").read_text())["val_data"]
    for other, what in [(["-j", f"{data}/train_*.bin"], f"-j '{data}/train_*.bin' -t {T}"),
                        (["-t", 16], f"-j '{val}' -t 16")]:
        args = eval_args(data, ckpt, eo, heads="1:1")
        args[args.index(other[0]) + 1] = other[1]
        p = run(args, check=False)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 1 and len(err) == 1 and err[0].startswith(f"error: -o {eo} holds attention dumps of "
                                                                          f"-j '{val}' -t {T}"), p.stderr
        assert f"this evaluation is of {what}" in err[0] and "give another -o, or remove" in err[0], err[0]
        assert dir_hashes(eo) == before
    run(eval_args(data, ckpt, eo, heads="1:1"))  # the same input: its dumps join the others
    assert (eo / "attn_L1_H1.npy").exists() and (eo / "attn_L0_H0.npy").exists()


def test_plot_attention_writes_each_of_formats(tmp_path):
    """trial 6 F10: plot_run.py had --formats, plot_attention.py refused it. The same meaning here: the comma-
    separated image formats written (default png); a format matplotlib cannot write is refused before any file."""
    pytest.importorskip("matplotlib")
    T = 6
    rows = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]  # a global head attending uniformly
    np.save(tmp_path / "attn_L0_H0.npy", rows.astype(np.float32))
    geometry = ["--window", 4, "--global-heads", 1, "--heads", 1]
    plot([tmp_path / "attn_L0_H0.npy", *geometry, "--out", tmp_path / "both", "--formats", "png,svg"])
    assert sorted(f.name for f in (tmp_path / "both").iterdir()) == ["attn_L0_H0.png", "attn_L0_H0.svg"]
    check_png(tmp_path / "both" / "attn_L0_H0.png")
    plot([tmp_path / "attn_L0_H0.npy", *geometry, "--out", tmp_path / "default"])
    assert [f.name for f in (tmp_path / "default").iterdir()] == ["attn_L0_H0.png"]
    for bad in ["pngg", ",", "png,,svg"]:
        p = plot([tmp_path / "attn_L0_H0.npy", *geometry, "--out", tmp_path / "bad", "--formats", bad], check=False)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 1 and len(err) == 1 and err[0].startswith("error: --formats"), (bad, p.stderr)
        assert not (tmp_path / "bad").exists(), bad


def masked_softmax(logits, vis):
    """float32 softmax of each row over the visible keys (0 elsewhere), as the trainer's dumps hold it."""
    s = np.where(vis, logits, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).astype(np.float32)


def test_plot_attention_notes_labels_that_show_keys_the_dump_never_attends(tmp_path):
    """trial 7 F2: only a window smaller than the dump's was caught (non-zero keys under the mask); a local head of
    window 8 labelled global, or with window 16, was plotted so without a word. Now a note names the window the map
    shows (a note: a global head's far keys can underflow to exact zeros, the evidence is not proof). A global head
    of ordinary logits, one with a few underflowed far keys, one whose far logits fall off ~15 a key (all far keys 0,
    but those at the edge tiny) and one whose attention collapsed onto the previous key get no note."""
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(7)
    Tn, Pn = 64, 8
    i, j = np.arange(Tn)[:, None], np.arange(Tn)[None, :]
    causal = j <= i
    maps = {"band": masked_softmax(rng.normal(0, 2, (Tn, Tn)), causal & (i - j < Pn)),
            "global": masked_softmax(rng.normal(0, 2, (Tn, Tn)), causal)}
    logits = rng.normal(0, 2, (Tn, Tn))
    logits[40:, :3] = -300.0  # a few far keys of a global head underflow to exactly 0
    maps["underflow"] = masked_softmax(logits, causal)
    maps["recency"] = masked_softmax(-15.0 * (i - j) + rng.normal(0, 1, (Tn, Tn)), causal)
    maps["collapsed"] = np.eye(Tn, k=-1, dtype=np.float32)  # all on the previous key (row 0: itself)
    maps["collapsed"][0, 0] = 1.0
    maps["self"] = np.eye(Tn, dtype=np.float32)  # all on its own key: Q = 1, no window's band (a review)
    assert np.count_nonzero(maps["underflow"][~causal | (maps["underflow"] == 0)]) == 0
    assert (maps["underflow"][causal] == 0).sum() == 3 * (Tn - 40)
    assert np.all(maps["recency"][(i - j) >= 8] == 0)  # every far key 0, as under a window of 8
    for name, a in maps.items():
        assert np.abs(a.astype(np.float64).sum(1) - 1).max() < 1e-5, name
        (tmp_path / name).mkdir()
        np.save(tmp_path / name / "attn_L0_H2.npy", a)

    def notes(name, *args):
        p = plot([tmp_path / name / "attn_L0_H2.npy", *args, "--out", tmp_path / "png"])
        return [ln for ln in p.stderr.splitlines() if ln.startswith("note: ")], p.stdout

    dump = tmp_path / "band" / "attn_L0_H2.npy"
    # the local head of window 8 labelled global (head 2 of 4 with 2 global heads)
    got, out = notes("band", "--window", Pn, "--global-heads", 2, "--heads", 4)
    assert len(got) == 1 and got[0].startswith(f"note: {dump}: every key at distance >= 8 is exactly 0 in all 56 "
                                               "rows"), got
    assert "the map of a local head of window 8, but head 2 is labelled global" in got[0], got
    assert "--window 8 and --global-heads below 2" in got[0] and "underflow" in got[0], got
    assert "head 2 (global)" in out  # plotted as asked
    # ... labelled with a larger window
    got, _ = notes("band", "--window", 16, "--global-heads", 1, "--heads", 4)
    assert len(got) == 1 and "but head 2 is labelled local with window 16" in got[0] and "--window 8 " in got[0], got
    # ... by the config.json of another run (no eval.json beside the dump: that it cannot be checked, noted too)
    other = config_of(window=Pn, global_heads=2, heads=4)
    (tmp_path / "other.json").write_text(json.dumps(other))
    got, _ = notes("band", "--config", tmp_path / "other.json")
    assert len(got) == 2 and "cannot check" in got[0] and f"(by --config {tmp_path / 'other.json'})" in got[1], got
    # its own labels, and heads that are global: no note
    assert notes("band", "--window", Pn, "--global-heads", 1, "--heads", 4)[0] == []
    for name in ["global", "underflow", "recency", "collapsed", "self"]:
        assert notes(name, "--window", Pn, "--global-heads", 2, "--heads", 4)[0] == [], name
    # the other direction is refused, as before
    p = plot([dump, "--window", 4, "--global-heads", 1, "--heads", 4, "--out", tmp_path / "no"], check=False)
    assert p.returncode == 1 and "do not match" in p.stderr, p.stderr


def config_of(window, global_heads, heads):
    """The "model" and "train" of a config.json (docs/formats.md) that plot_attention.py reads."""
    return {"model": {"window": window, "global_heads": global_heads, "num_heads": heads, "num_layers": 1,
                      "channels": 8 * heads}, "train": {"near": None}}
