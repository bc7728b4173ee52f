"""Tests of dev/bench/cpu_vs_torch.py (our CPU trainer vs PyTorch): its PyTorch GPT against the
independent float64 reference dev/reference/gpt2_ls.py (loss, logits and every gradient, dense and
SDPA attention, LS / MHSA / all-local / window >= T layouts, fresh random weights and tokens), and
the whole benchmark in --smoke mode: exit status 0, a well-formed markdown table with every column
and a number in every cell, the run's conditions and the JSON. Timings are never asserted.
torch is a test dependency (requirements-test.txt): without it these tests fail, they do not skip.
The trainer is $TRAIN_GPT2_LS, else the repository's ./train_gpt2_ls (make cpu)."""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "dev" / "bench" / "cpu_vs_torch.py"
sys.path.insert(0, str(REPO / "dev" / "bench"))
sys.path.insert(0, str(REPO / "dev" / "reference"))
import cpu_vs_torch as cvt  # noqa: E402
import gpt2_ls as ref  # noqa: E402
from model_config import Config, pad_vocab  # noqa: E402

BIN = Path(os.environ.get("TRAIN_GPT2_LS", REPO / "train_gpt2_ls"))


def rel(a, b):
    return float((a - b).detach().norm() / b.detach().norm())


def reference_config(shape):
    return Config(max_seq_len=shape["max_seq_len"], vocab_size=shape["vocab"],
                  padded_vocab_size=pad_vocab(shape["vocab"]),
                  num_layers=shape["layers"], num_heads=shape["heads"], channels=shape["channels"],
                  global_heads=shape["global_heads"], window=shape["window"])


def reference_vs_gpt(shape, attention, seed, T=13, B=3):
    """Loss, logits and gradient relative errors of cpu_vs_torch.GPT against the reference (float64)
    on fresh random weights and tokens."""
    cfg = reference_config(shape)
    g = torch.Generator().manual_seed(seed)
    p = ref.init_params(cfg, g, dtype=torch.float64, perturbed=True)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    rp = {n: t.clone().requires_grad_(True) for n, t in p.items()}
    ref_logits, ref_loss, _ = ref.forward(cfg, rp, idx, tgt)
    ref_loss.backward()

    model = cvt.GPT(shape, attention).double()
    model.load_reference(p)
    loss = model(idx, tgt)
    loss.backward()
    with torch.no_grad():
        logits = model.logits(idx)
    grads = model.reference_grads()
    names = sorted(grads)
    flat = torch.cat([grads[n].reshape(-1) for n in names])
    flat_ref = torch.cat([rp[n].grad.reshape(-1) for n in names])
    loss, ref_loss = loss.item(), ref_loss.item()
    return {"loss": abs(loss - ref_loss) / abs(ref_loss), "logits": rel(logits, ref_logits),
            "grads": rel(flat, flat_ref), "every_grad_present": all(rp[n].grad is not None for n in names)}


LAYOUTS = {  # name: (layout, a wrong layout: the numbers must move when the mask is wrong)
    "ls": (dict(global_heads=1, window=3), dict(global_heads=4)),
    "mhsa": (dict(global_heads=4, window=3), dict(global_heads=3)),
    "all_local": (dict(global_heads=0, window=2), dict(window=3)),
    "window_ge_T": (dict(global_heads=1, window=40), dict(window=12)),
}


@pytest.mark.parametrize("attention", ["dense", "sdpa"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_gpt_matches_the_reference(layout, attention):
    base = dict(layers=2, channels=16, heads=4, vocab=50, max_seq_len=16)
    good, wrong = LAYOUTS[layout]
    seed = int.from_bytes(os.urandom(4), "little")
    r = reference_vs_gpt(dict(base, **good), attention, seed)
    assert r["every_grad_present"]
    assert max(r["loss"], r["logits"], r["grads"]) < 1e-10, (seed, r)  # NaN fails
    # the comparison can fail: the same model with another head layout is far off the reference
    moved = reference_vs_gpt_wrong(dict(base, **good), {**base, **good, **wrong}, attention, seed)
    assert moved > 1e-4, (seed, moved)


def reference_vs_gpt_wrong(shape, wrong_shape, attention, seed, T=13, B=3):
    """Logits distance between the reference of `shape` and GPT built with `wrong_shape`."""
    cfg = reference_config(shape)
    g = torch.Generator().manual_seed(seed)
    p = ref.init_params(cfg, g, dtype=torch.float64, perturbed=True)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    ref_logits, _, _ = ref.forward(cfg, p, idx)
    model = cvt.GPT(wrong_shape, attention).double()
    model.load_reference(p)
    with torch.no_grad():
        return rel(model.logits(idx), ref_logits)


def test_ls_mask_is_the_window_of_the_docs():
    """Key j visible to query i iff j <= i, and i - P < j for a local head (heads 0 .. NH-G-1)."""
    NH, G, P, T = 5, 2, 3, 11
    allowed = cvt.ls_allowed(NH, G, P, T)
    for h in range(NH):
        for i in range(T):
            for j in range(T):
                assert bool(allowed[h, i, j]) == (j <= i and (h >= NH - G or i - P < j)), (h, i, j)


def test_table_marks_failures_and_the_fastest():
    row = cvt.SMOKE_ROWS["smoke-ls-2t"]

    def side(ms):
        return {"status": "ok", "ms": {"median": ms}}
    results = [{"row": row, "ours": side(2.0), "torch": {"sides": {"eager": side(9.0), "sdpa": side(3.0),
                                                                    "compile": side(5.0)}}},
               {"row": row, "ours": {"status": "FAIL (exit 2)"}, "torch": {"sides": {"eager": side(150.0)}}}]
    lines = cvt.format_table(results).splitlines()
    assert lines[0] == "| " + " | ".join(cvt.COLUMNS) + " |"
    assert lines[2] == f"| {cvt.row_label(row)} | **2.0** | 9.0 | 3.0 | 5.0 | 2.50x |"
    assert lines[3] == f"| {cvt.row_label(row)} | FAIL | **150** | FAIL | FAIL | - |"


def trainer():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make cpu` (or set TRAIN_GPT2_LS)")
    return str(BIN)


def test_smoke_run_writes_the_whole_table(tmp_path):
    out_json = tmp_path / "r.json"
    p = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--trainer", trainer(), "--json", str(out_json)],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    n = len(cvt.SMOKE_ROWS)
    table = lines[-(n + 2):]
    assert table[0] == "| " + " | ".join(cvt.COLUMNS) + " |"
    assert table[1] == "|" + "---|" * len(cvt.COLUMNS)
    number = r"(\*\*)?\d+(\.\d)?(\*\*)?"
    for line, row in zip(table[2:], cvt.SMOKE_ROWS.values()):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(cvt.COLUMNS), line
        assert cells[0] == cvt.row_label(row)
        for c in cells[1:5]:
            assert re.fullmatch(number, c), line
        assert re.fullmatch(r"\d+\.\d\dx", cells[5]), line
        assert sum(c.startswith("**") for c in cells[1:5]) >= 1, line
    text = p.stdout
    assert "commit " in text and "load average" in text and "GEMM ceiling" in text and "GFLOP/s" in text

    r = json.loads(out_json.read_text())
    assert r["meta"]["smoke"] is True and [g["threads"] for g in r["meta"]["gemm"]] == [1, 2]
    assert all(g["gflops_median"] > 0 for g in r["meta"]["gemm"])
    assert [x["name"] for x in r["rows"]] == list(cvt.SMOKE_ROWS)
    for x in r["rows"]:
        assert x["ours"]["status"] == "ok" and x["ours"]["steps_timed"] == 2
        assert "--threads" in x["ours"]["command"]
        for s in cvt.TORCH_SIDES:
            side = x["torch"]["sides"][s]
            assert side["status"] == "ok" and side["ms"]["n"] == 2 and len(side["warmup_ms"]) == 1
            assert side["loss_rel_to_eager_first2"] <= cvt.CONSISTENCY_TOL
            assert all(math.isfinite(v) for v in side["losses"])
        assert x["torch"]["threads"] == x["row"]["threads"]
        assert x["ratio_compile_over_ours"] > 0


@pytest.mark.parametrize("argv,expect", [(["--rows", "nope"], "--rows: unknown row nope"),
                                         (["--rows", ""], "--rows: unknown row (none given)"),
                                         (["--trainer", "/nonexistent/t"], "--trainer /nonexistent/t is not"),
                                         (["--steps", "0"], "--steps 0 and --warmup")])
def test_bad_arguments_are_one_line(argv, expect, capsys):
    """The script's main() in this process (the script as a program: test_smoke_run_writes_the_whole_table;
    a process of its own would import torch again, ~3.5 CPU-s a case)."""
    with pytest.raises(SystemExit) as e:
        cvt.main(["--smoke"] + argv + (["--trainer", trainer()] if "--trainer" not in argv else []))
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    assert err.startswith("error: " + expect) and len(err.strip().splitlines()) == 1, err
