"""
Self-tests of the PyTorch reference. Needs torch, so it runs with Debian's python (no pytest there):
  /usr/bin/python3 dev/reference/test_gpt2_ls.py          (or: pytest dev/reference where torch exists)
"""
import dataclasses
import math
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint import fnv1a64, read_model, write_model  # noqa: E402
from debug_state import read_debug, write_debug  # noqa: E402
from gpt2_ls import (Config, adamw_step, attention, attention_mask, flatten, forward, gelu, init_params,  # noqa: E402
                     num_params, param_shapes, split_flat, BIAS_PARAMS, WEIGHT_DECAY_PARAMS)
import make_fixtures  # noqa: E402

# tiny configs for gradcheck: Vp = V + 3 (padding columns that must get no gradient from the loss)
TINY = dict(max_seq_len=6, vocab_size=10, padded_vocab_size=13, num_layers=2, num_heads=4, channels=8)
LAYOUTS = {
    "ls": Config(**TINY, global_heads=1, window=2),
    "mhsa": Config(**TINY, global_heads=4, window=2),
    "all_local": Config(**TINY, global_heads=0, window=3),
    "ls_softcap": Config(**TINY, global_heads=2, window=2, attn_softcap=0.7),
    # QK-norm with hd = 4 (2 heads): LayerNorm over hd = 2 is too sharp for finite differences
    "ls_qknorm": Config(**dict(TINY, num_heads=2), global_heads=1, window=2, qk_norm=True),
    "all_stabilizers_untied": Config(**dict(TINY, num_heads=2), global_heads=1, window=3, qk_norm=True,
                                     attn_softcap=1.5, tied_embeddings=False),
    # the paper's configuration: no bias anywhere, exact erf GELU, untied head; with and without QK-norm
    "paper_nobias_erf_untied": Config(**TINY, global_heads=1, window=2, tied_embeddings=False, bias=False,
                                      gelu="erf"),
    "paper_nobias_erf_qknorm": Config(**dict(TINY, num_heads=2), global_heads=1, window=2, qk_norm=True,
                                      tied_embeddings=False, bias=False, gelu="erf"),
}


def _batch(cfg, B, T, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, cfg.vocab_size, (B, T), generator=g),
            torch.randint(0, cfg.vocab_size, (B, T), generator=g))


def test_gradcheck_every_layout():
    """Autograd of the whole objective (CE + z-loss) vs central finite differences in float64."""
    for name, cfg in LAYOUTS.items():
        g = torch.Generator().manual_seed(7)
        p0 = init_params(cfg, g)
        flat0 = flatten(cfg, p0).clone().requires_grad_(True)
        idx, tgt = _batch(cfg, 2, 5, 11)

        def objective(flat):
            _, loss, z = forward(cfg, split_flat(cfg, flat), idx, tgt, z_weight=0.1)
            return loss + z
        try:
            torch.autograd.gradcheck(objective, (flat0,), eps=1e-6, atol=1e-7, rtol=1e-5)
        except Exception as e:
            raise AssertionError(f"gradcheck failed for layout {name}: {e}")
        # the padded rows [V, Vp) of the LM head (tied or not) get exactly no gradient
        (grad,) = torch.autograd.grad(objective(flat0), flat0)
        head = split_flat(cfg, grad)["wte" if cfg.tied_embeddings else "lm_head"]
        assert torch.all(head[cfg.vocab_size:] == 0), name


def _attention_by_loops(cfg, x, qkvw, qkvb, qnorm, knorm):
    """A second, loop-based attention: for each query only the keys its head may see."""
    B, T, C = x.shape
    NH, hd = cfg.num_heads, cfg.head_size
    qkv = x @ qkvw.t() + (0 if qkvb is None else qkvb)
    out = torch.zeros(B, T, C, dtype=x.dtype)
    for b in range(B):
        for h in range(NH):
            lo_of = (lambda i: max(0, i - cfg.window + 1)) if h < NH - cfg.global_heads else (lambda i: 0)
            for i in range(T):
                q = qkv[b, i, h * hd:(h + 1) * hd]
                keys = range(lo_of(i), i + 1)
                ks = torch.stack([qkv[b, j, C + h * hd:C + (h + 1) * hd] for j in keys])
                vs = torch.stack([qkv[b, j, 2 * C + h * hd:2 * C + (h + 1) * hd] for j in keys])
                if cfg.qk_norm:
                    q = torch.nn.functional.layer_norm(q, (hd,), qnorm[0], qnorm[1], 1e-5)
                    ks = torch.nn.functional.layer_norm(ks, (hd,), knorm[0], knorm[1], 1e-5)
                s = ks @ q / math.sqrt(hd)
                if cfg.attn_softcap > 0:
                    s = cfg.attn_softcap * torch.tanh(s / cfg.attn_softcap)
                w = torch.exp(s - s.max())
                out[b, i, h * hd:(h + 1) * hd] = (w / w.sum()) @ vs
    return out


def test_attention_mask_matches_loops():
    for name, cfg in LAYOUTS.items():
        g = torch.Generator().manual_seed(3)
        p = init_params(cfg, g)
        x = torch.randn(2, 6, cfg.channels, generator=g, dtype=torch.float64)
        def b0(name):  # layer 0's bias, None without biases
            return p[name][0] if cfg.bias else None
        qn = (p["qnormw"][0], b0("qnormb")) if cfg.qk_norm else None
        kn = (p["knormw"][0], b0("knormb")) if cfg.qk_norm else None
        a = attention(cfg, x, p["qkvw"][0], b0("qkvb"), qn, kn, attention_mask(cfg, 6))
        b = _attention_by_loops(cfg, x, p["qkvw"][0], b0("qkvb"), qn, kn)
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12), name


def test_window_at_least_T_is_global():
    g = torch.Generator().manual_seed(5)
    cfg_local = Config(**TINY, global_heads=0, window=6)
    cfg_mhsa = Config(**TINY, global_heads=4, window=1)
    p = init_params(cfg_local, g)
    idx, tgt = _batch(cfg_local, 2, 6, 1)
    la = forward(cfg_local, p, idx, tgt)[0]
    lb = forward(cfg_mhsa, p, idx, tgt)[0]
    assert torch.equal(la, lb)
    # and a genuinely smaller window changes the output
    lc = forward(Config(**TINY, global_heads=0, window=2), p, idx, tgt)[0]
    assert (la - lc).abs().max() > 1e-4


def test_loss_matches_torch_cross_entropy():
    cfg = LAYOUTS["all_stabilizers_untied"]
    p = init_params(cfg, torch.Generator().manual_seed(9))
    idx, tgt = _batch(cfg, 3, 6, 2)
    logits, loss, z = forward(cfg, p, idx, tgt, z_weight=0.25)
    real = logits[..., :cfg.vocab_size].reshape(-1, cfg.vocab_size)
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(real, tgt.reshape(-1)), rtol=1e-14)
    assert torch.allclose(z, 0.25 * (torch.logsumexp(real, -1) ** 2).mean(), rtol=1e-14)


def test_adamw_matches_torch_optim():
    cfg = LAYOUTS["all_stabilizers_untied"]
    p = init_params(cfg, torch.Generator().manual_seed(4))
    ref = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    hyper = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-6, weight_decay=0.1)
    opt = torch.optim.AdamW([
        {"params": [ref[k] for k in ref if k in WEIGHT_DECAY_PARAMS], "weight_decay": hyper["weight_decay"]},
        {"params": [ref[k] for k in ref if k not in WEIGHT_DECAY_PARAMS], "weight_decay": 0.0}],
        lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"])
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v = {k: torch.zeros_like(x) for k, x in p.items()}
    g = torch.Generator().manual_seed(8)
    for t in range(1, 4):
        grads = {k: torch.randn(x.shape, generator=g, dtype=torch.float64) for k, x in p.items()}
        mult = 0.3
        adamw_step(cfg, p, grads, m, v, t, grad_multiplier=mult, **hyper)
        for k in ref:
            ref[k].grad = grads[k] * mult
        opt.step()
    for k in p:
        assert torch.allclose(p[k], ref[k].detach(), rtol=1e-12, atol=1e-14), k


def test_param_table_matches_params_h():
    # llmc/core/params.h for C=32, L=2, NH=4, Vp=128, maxT=16, qk_norm, untied
    cfg = Config(max_seq_len=16, vocab_size=100, padded_vocab_size=128, num_layers=2, num_heads=4, channels=32,
                 qk_norm=True, tied_embeddings=False)
    C, L, hd = 32, 2, 8
    expect = [128 * C, 16 * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
              L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C, L * hd, L * hd, L * hd, L * hd, 128 * C]
    assert [math.prod(s) for _, s in param_shapes(cfg)] == expect
    assert num_params(cfg) == sum(expect)
    # without biases every bias tensor is empty and the others keep their order
    nobias = dataclasses.replace(cfg, bias=False)
    expect_nobias = [0 if name in BIAS_PARAMS else n for name, n in zip([n for n, _ in param_shapes(cfg)], expect)]
    assert expect_nobias == [128 * C, 16 * C, L * C, 0, L * 3 * C * C, 0, L * C * C, 0, L * C, 0,
                             L * 4 * C * C, 0, L * C * 4 * C, 0, C, 0, L * hd, 0, L * hd, 0, 128 * C]
    assert [math.prod(s) for _, s in param_shapes(nobias)] == expect_nobias
    assert num_params(nobias) == sum(expect_nobias)


def test_nobias_model_has_no_bias_and_erf_gelu_is_exact():
    """bias=False: no parameter named *b exists and the forward needs none; gelu "erf" is x Phi(x)."""
    x = torch.linspace(-6, 6, 241, dtype=torch.float64)
    erf = torch.tensor([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()], dtype=torch.float64)
    tanh = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    assert torch.allclose(gelu(Config(gelu="erf"), x), erf, rtol=0, atol=1e-15)
    assert torch.allclose(gelu(Config(gelu="tanh"), x), tanh, rtol=0, atol=1e-15)
    assert (erf - tanh).abs().max() > 1e-4  # the two kinds differ enough for the fixtures to tell apart
    cfg = LAYOUTS["paper_nobias_erf_qknorm"]
    p = init_params(cfg, torch.Generator().manual_seed(2))
    assert all(p[name].numel() == 0 for name in BIAS_PARAMS)
    p["fcw"] = p["fcw"] * 25  # std 0.5: MLP pre-activations of order 1, where the two GELUs differ
    idx, tgt = _batch(cfg, 2, 5, 3)
    logits_erf = forward(cfg, p, idx, tgt)[0]
    logits_tanh = forward(dataclasses.replace(cfg, gelu="tanh"), p, idx, tgt)[0]
    assert (logits_erf - logits_tanh).abs().max() > 1e-5


def test_checkpoint_round_trip_and_damage():
    cfg = dataclasses.replace(LAYOUTS["all_stabilizers_untied"], padded_vocab_size=128)
    flat = flatten(cfg, init_params(cfg, torch.Generator().manual_seed(1))).float().numpy()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.bin")
        write_model(path, cfg, flat, step=42)
        cfg2, flat2, step = read_model(path)
        assert cfg2 == cfg and step == 42 and np.array_equal(flat2, flat)
        raw = bytearray(open(path, "rb").read())
        assert len(raw) == 1024 + 4 * flat.size
        hdr = np.frombuffer(bytes(raw[:1024]), dtype="<i4")
        assert hdr[0] == 20250521 and hdr[1] == 1 and hdr[12] == 0
        assert (int(hdr[16]) & 0xFFFFFFFF) | ((int(hdr[17]) & 0xFFFFFFFF) << 32) == fnv1a64(bytes(raw[1024:]))
        raw[2000] ^= 1
        open(path, "wb").write(raw)
        try:
            read_model(path)
            raise AssertionError("a flipped payload bit was not detected")
        except ValueError as e:
            assert "checksum" in str(e)
        open(path, "wb").write(raw[:-4])
        try:
            read_model(path)
            raise AssertionError("a truncated file was not detected")
        except ValueError as e:
            assert "truncated" in str(e)
        # bf16 payload: round-to-nearest-even, exactly as torch's fp32 -> bfloat16 conversion
        write_model(path, cfg, flat, dtype="bf16")
        _, fb, _ = read_model(path)
        assert np.array_equal(fb, torch.from_numpy(flat).bfloat16().float().numpy())
        # header words 20 (no biases) and 21 (GELU): 0 for GPT-2's biases and tanh GELU, as older files hold
        assert hdr[20] == 0 and hdr[21] == 0
        for bias, kind in [(False, "erf"), (False, "tanh"), (True, "erf")]:
            c = dataclasses.replace(cfg, bias=bias, gelu=kind)
            flat_c = flatten(c, init_params(c, torch.Generator().manual_seed(2))).float().numpy()
            write_model(path, c, flat_c, step=3)
            raw = open(path, "rb").read()
            hdr = np.frombuffer(raw[:1024], dtype="<i4")
            assert hdr[20] == (0 if bias else 1) and hdr[21] == {"tanh": 0, "erf": 1}[kind]
            assert hdr[1] == 2  # version 2: a reader that predates words 20 and 21 refuses the file
            assert len(raw) == 1024 + 4 * num_params(c)
            c2, f2, _ = read_model(path)
            assert c2 == c and np.array_equal(f2, flat_c)
            assert type(c2.bias) is bool and type(c2.gelu) is str  # plain Python values (JSON-serializable)
        bad = bytearray(raw)  # version 1 with the words of a version-2 model: damaged
        bad[4:8] = np.array([1], dtype="<i4").tobytes()
        open(path, "wb").write(bad)
        try:
            read_model(path)
            raise AssertionError("version 1 with header word 21 = 1 was accepted")
        except ValueError as e:
            assert "does not match its model fields" in str(e), e
        for word, value in [(20, 2), (21, 2), (21, -1)]:
            bad = bytearray(raw)
            bad[4 * word:4 * word + 4] = np.array([value], dtype="<i4").tobytes()
            open(path, "wb").write(bad)
            try:
                read_model(path)
                raise AssertionError(f"header word {word} = {value} was accepted")
            except ValueError as e:
                assert f"header index {word}" in str(e), e


def test_fixtures_are_up_to_date():
    """The committed fixtures are what make_fixtures.py produces now: byte for byte but for float64 noise
    (mathematically zero gradients, one fp32 step: make_fixtures.fixture_differences)."""
    fixture_dir = os.path.join(make_fixtures.REPO, "test", "fixtures")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        for fx in make_fixtures.fixture_list():
            for path in make_fixtures.make_one(fx, d):
                committed = os.path.join(fixture_dir, os.path.basename(path))
                assert make_fixtures.fixture_differences(path, committed) == [], committed
            dbg = read_debug(os.path.join(d, fx["name"] + "_debug.bin"))
            assert dbg.grads.size == num_params(fx["cfg"]) and dbg.step_loss[0] == np.float32(dbg.loss)


def test_fixture_differences_forgive_only_zero_noise():
    """fixture_differences: a debug file equal but for a mathematically zero gradient's float64 noise
    or one fp32 step (a gradient or a result scalar such as the loss) agrees; two steps on a gradient
    that is not zero or on the loss, more than MAX_ONE_STEP entries one step apart, noise against a
    value, a hyperparameter of the header one step apart, an int or a missing file do not; a model file
    must match byte for byte."""
    fixture_dir = os.path.join(make_fixtures.REPO, "test", "fixtures")
    committed = os.path.join(fixture_dir, "ls_debug.bin")
    base = read_debug(committed)
    scale = float(np.max(np.abs(base.grads)))
    noise = make_fixtures.ZERO_NOISE * scale
    # the key bias's gradient: zero but for float64 noise, ~1e-18 (chosen without ZERO_NOISE)
    small = np.flatnonzero((base.grads != 0) & (np.abs(base.grads) < 1e-15 * scale))
    big = int(np.argmax(np.abs(base.grads)))
    assert small.size > 0
    rng = np.random.default_rng(52)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ls_debug.bin")

        def differences(change):
            s = read_debug(committed)
            change(s)
            write_debug(path, s)
            return make_fixtures.fixture_differences(path, committed)

        assert differences(lambda s: None) == []
        i = int(rng.choice(small))
        assert differences(lambda s: s.grads.__setitem__(i, np.float32(-s.grads[i] / 2))) == []
        up = np.nextafter(base.grads[big], np.float32(np.inf), dtype=np.float32)
        assert differences(lambda s: s.grads.__setitem__(big, up)) == []
        two = np.nextafter(up, np.float32(np.inf), dtype=np.float32)
        assert "grads differs at 1 entries" in differences(lambda s: s.grads.__setitem__(big, two))[0]
        j = int(rng.choice(np.flatnonzero(np.abs(base.grads) > scale * 1e-3)))
        assert differences(lambda s: s.grads.__setitem__(j, np.float32(noise / 2)))
        assert "targets differs" in differences(lambda s: s.targets.__setitem__((0, 0), s.targets[0, 0] ^ 1))[0]
        assert differences(lambda s: setattr(s, "loss", np.float32(s.loss) * np.float32(1 + 2 ** -20)))
        loss_up = np.nextafter(np.float32(base.loss), np.float32(np.inf))
        assert differences(lambda s: setattr(s, "loss", float(loss_up))) == []
        loss_two = np.nextafter(loss_up, np.float32(np.inf))
        assert "loss differs at 1 entries" in differences(lambda s: setattr(s, "loss", float(loss_two)))[0]
        lr_up = np.nextafter(np.float32(base.lr), np.float32(np.inf))
        assert "lr differs" in "; ".join(differences(lambda s: setattr(s, "lr", float(lr_up))))
        reserved = bytearray(open(committed, "rb").read())
        reserved[100 * 4] ^= 1  # a reserved header word, which no field reads
        open(path, "wb").write(reserved)
        assert make_fixtures.fixture_differences(path, committed) == [f"{committed}: the header differs"]
        cap = make_fixtures.MAX_ONE_STEP
        many = rng.choice(np.flatnonzero(np.abs(base.grads) > scale * 1e-3), cap + 1, replace=False)

        def steps(count):
            def change(s):
                s.grads[many[:count]] = np.nextafter(s.grads[many[:count]], np.float32(np.inf))
            return change
        assert differences(steps(cap)) == []
        forgiven = {}
        assert make_fixtures.fixture_differences(path, committed, forgiven) == [] and forgiven["one step"] == cap
        assert f"{cap + 1} results one fp32 step apart, more than the {cap}" in differences(steps(cap + 1))[0]
        model = os.path.join(d, "ls_model.bin")
        raw = bytearray(open(os.path.join(fixture_dir, "ls_model.bin"), "rb").read())
        raw[-1] ^= 1
        open(model, "wb").write(raw)
        assert make_fixtures.fixture_differences(model, os.path.join(fixture_dir, "ls_model.bin"))
        assert "missing" in make_fixtures.fixture_differences(path, os.path.join(d, "none_debug.bin"))[0]


if __name__ == "__main__":
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    for n, f in tests:
        f()
        print(f"PASS {n}")
    print(f"{len(tests)} tests passed")
