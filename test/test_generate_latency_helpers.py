"""Pure helpers of dev/bench/generate_latency.py (no torch, no GPU): variant configs, the random
weights and their checkpoint, the KV-cache size formula, parsing generate_gpt2_ls --bench output and
the table. The torch decoder itself is checked by `generate_latency.py --self-test` (needs torch)."""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "dev", "bench"))
sys.path.insert(0, os.path.join(HERE, "..", "dev", "reference"))
import generate_latency as gl  # noqa: E402
import checkpoint  # noqa: E402
from model_config import num_params  # noqa: E402


def test_variant_configs():
    m = gl.variant_config("mhsa")
    assert (m.global_heads, m.num_heads, m.max_seq_len, m.padded_vocab_size) == (6, 6, 16384, 50304)
    for name, P in (("ls-p50", 50), ("ls-p100", 100)):
        c = gl.variant_config(name)
        assert (c.global_heads, c.window, c.channels, c.num_layers) == (1, P, 192, 6)
    with pytest.raises(KeyError):
        gl.variant_config("nope")


def test_random_params_and_checkpoint_round_trip(tmp_path):
    cfg = gl.variant_config("ls-p50", dict(gl.BASE, max_seq_len=64, vocab_size=300))
    flat = gl.random_params(cfg, seed=3)
    assert flat.dtype == np.float32 and flat.size == num_params(cfg) and np.isfinite(flat).all()
    # LayerNorm gains 1, biases 0, matrices ~ N(0, 0.02)
    from model_config import param_shapes
    off = {}
    o = 0
    for name, shape in param_shapes(cfg):
        n = int(np.prod(shape))
        off[name] = flat[o:o + n]
        o += n
    assert (off["ln1w"] == 1).all() and (off["lnfw"] == 1).all() and (off["qkvb"] == 0).all()
    assert abs(off["qkvw"].std() - 0.02) < 2e-3 and off["attprojw"].std() < off["qkvw"].std()
    assert not np.array_equal(flat, gl.random_params(cfg, seed=4))
    path = str(tmp_path / "m.bin")
    checkpoint.write_model(path, cfg, flat)
    got = checkpoint.read_model(path)
    params = got[1] if isinstance(got, tuple) else got["params"]
    assert np.array_equal(np.asarray(params, dtype=np.float32).reshape(-1), flat)


def test_kv_cache_bytes_formula():
    ls = gl.variant_config("ls-p50")
    mhsa = gl.variant_config("mhsa")
    # docs/generation.md: paper model, B = 1, fp32: 3.4 MiB (LS) and 18.0 MiB (MHSA) at 2048
    assert gl.kv_cache_bytes(ls, 1, 2048, 4) / 2**20 == pytest.approx(3.4, abs=0.05)
    assert gl.kv_cache_bytes(mhsa, 1, 2048, 4) / 2**20 == pytest.approx(18.0, abs=0.05)
    # local part flat in the length, global part linear
    d1 = gl.kv_cache_bytes(ls, 2, 8192) - gl.kv_cache_bytes(ls, 2, 4096)
    assert d1 == 2 * 6 * 2 * 32 * (1 * 4096) * 2
    assert gl.kv_cache_bytes(ls, 1, 10) == 2 * 6 * 32 * (10 + 5 * 10) * 2  # ring = min(P, max_len)


SAMPLE = {
    "backend": "cuda", "device": "GPU X", "precision": "bf16", "config": {}, "batch": 4, "decode_steps": 8,
    "device_memory_baseline_bytes": 1000,
    "prefill": [{"T": 2048, "ms_median": 2.5, "ms": [2.4, 2.5, 2.6], "device_memory_bytes": 5000},
                {"T": 8192, "ms_median": 8.0, "ms": [8.0, 8.0, 8.1], "device_memory_bytes": 9000}],
    "decode": [{"context": 1024, "ms_per_token_median": 0.4, "ms_per_token_mean": 0.41, "kv_cache_bytes": 77,
                "device_memory_bytes": 3000},
               {"context": 2048, "ms_per_token_median": 0.5, "ms_per_token_mean": 0.52, "kv_cache_bytes": 99,
                "device_memory_bytes": 4000}],
}


def test_parse_ours_subtracts_the_baseline():
    s = gl.parse_ours(json.dumps(SAMPLE))
    assert s["prefill"] == {2048: {"ms": 2.5, "peak_bytes": 4000}, 8192: {"ms": 8.0, "peak_bytes": 8000}}
    assert s["decode"][2048] == {"ms_per_token": 0.5, "kv_cache_bytes": 99, "peak_bytes": 3000}
    # what ran, as the generator resolved --cuda-graph and --pdl (auto by default); SAMPLE, as a generator's
    # JSON before it recorded them, has neither: None
    assert "pdl" not in SAMPLE and s["cuda_graph"] is None and s["pdl"] is None
    t = gl.parse_ours(json.dumps(dict(SAMPLE, cuda_graph=1, pdl=1)))
    assert (t["cuda_graph"], t["pdl"]) == (1, 1)
    with pytest.raises(json.JSONDecodeError):
        gl.parse_ours("error: no CUDA device")


def test_ours_command():
    cmd = gl.ours_command("./g", "m.bin", 4, [2048, 8192], [1024, 2048], 32, 5)
    assert cmd[:6] == ["./g", "-e", "m.bin", "--device", "cuda", "--bench"]
    assert cmd[cmd.index("--bench-prompt") + 1] == "2048,8192"
    assert cmd[cmd.index("--bench-contexts") + 1] == "1024,2048"
    assert cmd[cmd.index("--cuda-graph") + 1] == "0" and cmd[cmd.index("--pdl") + 1] == "0"
    graph = gl.ours_command("./g", "m.bin", 4, [2048], [1024, 2048], 32, 5, gl.OURS_SIDES["graph"])
    # the graph side is the generator's defaults, named: the graphs and programmatic launch where the device has it
    assert graph[graph.index("--cuda-graph") + 1] == "1" and graph[graph.index("--pdl") + 1] == "auto"
    assert "--bench-profile" not in graph
    # every side names --fused-decode; the fused side is graph's with the fused decode kernels
    assert cmd[cmd.index("--fused-decode") + 1] == "0" and graph[graph.index("--fused-decode") + 1] == "0"
    fused = gl.ours_command("./g", "m.bin", 4, [2048], [1024, 2048], 32, 5, gl.OURS_SIDES["fused"])
    assert fused[fused.index("--fused-decode") + 1] == "1" and fused[fused.index("--cuda-graph") + 1] == "1"
    assert fused[fused.index("--pdl") + 1] == "auto"
    prof = gl.ours_command("./g", "m.bin", 4, [2048], [1024], 32, 5, gl.OURS_SIDES["graph"], profile=True)
    # the generator's profile needs --pdl 0: named, so the timings of a --profile run say what they timed
    assert prof[-1] == "--bench-profile" and prof[prof.index("--pdl") + 1] == "0"


def test_parse_ours_keeps_the_profile():
    """--bench-profile's "profile" object (prefill and decode tables as JSON) is kept as it is."""
    prof = {"prefill": {"steps": 1, "kernels": []}, "decode_context": 2048, "decode": {"steps": 32, "kernels": []}}
    assert gl.parse_ours(json.dumps(dict(SAMPLE, profile=prof)))["profile"] == prof
    assert "profile" not in gl.parse_ours(json.dumps(SAMPLE))


def test_table_and_reduction():
    assert gl.reduction(6.0, 10.0) == pytest.approx(0.4)
    assert gl.reduction(None, 1.0) is None and gl.reduction(1.0, 0.0) is None
    mh = gl.parse_ours(json.dumps(SAMPLE))
    ls = gl.parse_ours(json.dumps(dict(SAMPLE, prefill=[dict(SAMPLE["prefill"][0], ms_median=1.0),
                                                        dict(SAMPLE["prefill"][1], ms_median=6.0)])))
    prompts = [2048, 4096, 8192]  # 4096 timed by neither: '-'
    text = gl.format_table({"mhsa": {"ours": mh, "torch": None}, "ls-p50": {"ours": ls, "torch": None}}, prompts,
                           [1024, 2048])
    assert "mhsa" in text and "ls-p50" in text and "dec@2048" in text and "pre@8192" in text
    assert "ours ls-p50 vs ours mhsa: prefill lower by @2048 60.0%, @4096 -%, @8192 25.0%; decode@2048 0.0% lower " \
           "(goal: prefill >= 30% lower at 8192 and 16384)" in text, text
    row = next(ln for ln in text.splitlines() if ln.startswith("ls-p50    ours"))
    assert row.split()[2:5] == ["1.000", "-", "6.000"], row
    # the torch sides compared the same way, without the goal
    text = gl.format_table({"mhsa": {"ours": None, "torch": mh}, "ls-p50": {"ours": None, "torch": ls}}, prompts,
                           [1024, 2048])
    assert "torch ls-p50 vs torch mhsa: prefill lower by @2048 60.0%, @4096 -%, @8192 25.0%; decode@2048 0.0% " \
           "lower\n" in text + "\n", text
    fast = gl.parse_ours(json.dumps(dict(SAMPLE, decode=[dict(d, ms_per_token_median=d["ms_per_token_median"] / 4)
                                                          for d in SAMPLE["decode"]])))
    text = gl.format_table({"mhsa": {"ours": mh, "graph": fast, "torch": None}}, [2048], [1024, 2048])
    assert "mhsa      graph" in text
    assert "decode steps as CUDA graphs vs issued one by one: decode@1024" in text and "decode@2048 75.0% lower" in text
    # the fused side against the graph side it differs from by --fused-decode 1 alone
    faster = gl.parse_ours(json.dumps(dict(SAMPLE, fused_decode=1, decode=[
        dict(d, ms_per_token_median=d["ms_per_token_median"] / 8) for d in SAMPLE["decode"]])))
    assert faster["fused_decode"] == 1 and mh["fused_decode"] is None
    text = gl.format_table({"mhsa": {"ours": mh, "graph": fast, "fused": faster, "torch": None}}, [2048], [1024, 2048])
    assert "mhsa      fused" in text
    assert "ours mhsa, fused decode kernels vs cuBLASLt (both as graphs): decode@1024 50.0% lower, decode@2048 " \
           "50.0% lower" in text, text


@pytest.mark.parametrize("args, expect", [
    (["--prompts", "2048,x"], "--prompts '2048,x': give comma-separated lengths in 1..16384"),
    (["--prompts", "40000"], "--prompts '40000': give comma-separated lengths in 1..16384"),
    (["--contexts", "0,1024"], "--contexts '0,1024': give comma-separated lengths"),
    (["--prompts", "4096,2048"], "--prompts 4096,2048: give the lengths ascending, each once"),
    (["--prompts", "2048,2048"], "--prompts 2048,2048: give the lengths ascending, each once"),
    (["--contexts", "32"], "--contexts: each context must exceed --steps 32"),
    (["--max-seq-len", "64", "--contexts", "40", "--prompts", "16,100"],
     "--prompts '16,100': give comma-separated lengths in 1..64"),
    (["--vocab", "0"], "--max-seq-len and --vocab must be >= 1"),
    (["--batch", "9", "--ours-sides", "graph,fused"], "--ours-sides fused: the fused decode kernels take up to 8 "
     "sequences and --batch is 9; give --batch 8 or less, or drop the side fused"),
])
def test_bad_lengths_are_refused_before_any_work(tmp_path, capsys, args, expect):
    """Refused by argparse (exit 2, the error's line) before a checkpoint is written or a binary runs."""
    with pytest.raises(SystemExit) as e:
        gl.main(["--out", str(tmp_path / "o"), "--skip-torch", "--binary", "/nonexistent"] + args)
    assert e.value.code == 2 and expect in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_default_sides_leave_fused_out_past_its_batch(tmp_path, capsys):
    """The default sides include fused, which takes up to 8 sequences: at --batch 9 it is left out with a
    note (the run goes on with the others), never run to fail."""
    assert gl.main(["--out", str(tmp_path / "o"), "--skip-ours", "--skip-torch", "--variants", "mhsa", "--prompts",
                    "16", "--contexts", "40", "--steps", "2", "--max-seq-len", "64", "--vocab", "300", "--batch",
                    "9"]) == 0
    assert "note: side fused left out: --batch 9 is more than the fused decode kernels take (8)" in \
        capsys.readouterr().err


def test_max_seq_len_and_vocab_size_the_models(tmp_path, capsys):
    """--max-seq-len and --vocab give the models' position rows and vocabulary: in the checkpoint each
    variant writes (its header) and in the JSON's config; the window stays the variant's while below them."""
    out = tmp_path / "o"
    assert gl.main(["--out", str(out), "--skip-ours", "--skip-torch", "--variants", "mhsa,ls-p50", "--prompts", "16",
                    "--contexts", "40", "--steps", "2", "--max-seq-len", "64", "--vocab", "300"]) == 0
    res = json.loads((out / "generate_latency.json").read_text())["results"]
    for v, window in (("mhsa", 64), ("ls-p50", 50)):
        c = res[v]["config"]
        assert (c["max_seq_len"], c["vocab_size"], c["padded_vocab_size"], c["window"]) == (64, 300, 384, window), c
        cfg, _, _ = checkpoint.read_model(str(out / "work" / f"{v}.bin"))
        assert (cfg.max_seq_len, cfg.vocab_size) == (64, 300)


def test_a_max_seq_len_below_the_torch_check_is_refused_unless_torch_is_skipped(tmp_path, capsys):
    """The torch side checks its decoder on a prompt and 24 decode steps (67 + 24 positions for MHSA, 2P + 3
    + 24 for LS): a --max-seq-len below that is refused up front (argparse, exit 2), not found by the check."""
    with pytest.raises(SystemExit) as e:
        gl.main(["--out", str(tmp_path / "o"), "--binary", "/nonexistent", "--variants", "mhsa,ls-p50", "--prompts",
                 "16", "--contexts", "40", "--max-seq-len", "100"])
    assert e.value.code == 2
    assert "--max-seq-len 100: the torch side's check of ls-p50 runs 127 positions" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert gl.torch_check_length(gl.variant_config("mhsa")) == 91
