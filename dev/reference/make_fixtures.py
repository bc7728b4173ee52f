"""
Writes the fixtures the C++ tests compare against (test/test_reference.cpp; test/gpu/test_cuda_model.cu
for the head-size-32 ones, *_hd32):
  test/fixtures/<name>_model.bin   seeded random model in our checkpoint format (fp32; bf16 for *_hd32)
  test/fixtures/<name>_debug.bin   inputs, targets, logits, loss, z-loss, every gradient, attention
                                   statistics, and the losses of N AdamW steps on that batch
                                   (format: README.md), computed in float64, stored as fp32.
The float64 computation uses the fp32- (bf16-) rounded parameters that the model file holds, so the
reference is exact for what the C++ loads. Output is byte-identical when rerun with one torch; another
torch may change the float64 noise (ZERO_NOISE: zero gradients' noise; one fp32 step, MAX_ONE_STEP; --check).

It also reruns everything in float32 and prints how far that lands from float64: an fp32
implementation must be able to meet the tests' tolerances, or the tolerances are wrong.

  /usr/bin/python3 dev/reference/make_fixtures.py            # write test/fixtures/
  /usr/bin/python3 dev/reference/make_fixtures.py --check    # recompute, compare with the committed bytes
                                                             # (aside: zero entries' float64 noise, ZERO_NOISE,
                                                             # and up to MAX_ONE_STEP results a file one fp32
                                                             # step apart: fixture_differences)
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint import bf16_bits_to_fp32, fp32_to_bf16_bits, write_model  # noqa: E402
from debug_state import HEADER_INTS, DebugState, read_debug, write_debug  # noqa: E402
from gpt2_ls import (Config, adamw_step, flatten, forward, global_grad_norm, init_params,  # noqa: E402
                     new_attn_stats, pad_vocab, param_shapes)

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# AdamW hyperparameters of every fixture. lr = 1e-2 makes the steps large enough that a wrong
# weight-decay set or missing clipping moves the step losses by > 5e-4 relative (fp32 lands within
# 3e-7 of float64, the test allows 1e-4). eps = 1e-6 rather than 1e-8: gradients that are zero in
# exact arithmetic (e.g. the k bias without soft-capping: softmax is shift invariant) come out as
# ~1e-11 rounding noise in fp32, and Adam's normalization would blow that noise up into full
# lr-sized steps; with eps = 1e-6 such noise moves a weight by < 1e-5 * lr.
ADAM = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-6, weight_decay=0.1)
N_STEPS = 4


def FC_STD_ERF(C):
    """fcw's std for the erf-GELU fixtures: the MLP's pre-activations (fcw times LayerNorm outputs of
    about unit size, summed over C) get a std of about 2, where the erf GELU and its tanh approximation
    differ by 1e-4 to 5e-4 (|x| 1 to 3). At init_params' 0.02 they stay within about 0.1 of 0, where
    the two agree to 3e-8, and a backend that ran the wrong kind would pass."""
    return 2.0 / C ** 0.5


def fixture_list():
    V = 100
    base = dict(max_seq_len=16, vocab_size=V, padded_vocab_size=pad_vocab(V), num_layers=2, num_heads=4,
                channels=32)
    return [
        # (a) LS: 3 local heads with a window of 3, 1 global head
        dict(name="ls", cfg=Config(**base, global_heads=1, window=3), B=2, T=16, z=0.0, clip=1.0, seed=1),
        # (b) plain MHSA (G = NH), shorter sequence than maxT
        dict(name="mhsa", cfg=Config(**base, global_heads=4, window=3), B=2, T=12, z=0.0, clip=1.0, seed=2),
        # (c) all-local with every stabilizer: QK-norm, soft-cap 5, z-loss 1e-2, untied LM head;
        #     grad clip 0.05 so clipping is active in the AdamW steps
        dict(name="local_qknorm_softcap", cfg=Config(**base, global_heads=0, window=5, qk_norm=True,
                                                     attn_softcap=5.0, tied_embeddings=False),
             B=2, T=12, z=1e-2, clip=0.05, seed=3),
        # (d) edge cases: window 1 (a local head sees only itself), 2 global heads, QK-norm without
        #     soft-cap, odd T
        dict(name="ls_p1_qknorm", cfg=Config(**base, global_heads=2, window=1, qk_norm=True),
             B=2, T=9, z=1e-3, clip=1.0, seed=4),
        # (h) the paper's configuration (arXiv 2505.15548, its author's nanoGPT code) in miniature: no
        #     bias anywhere, exact erf GELU, untied LM head, 3 local heads (window 4) + 1 global head;
        #     C = 16 (head size 4) to keep the files small; fcw std 0.5 (FC_STD_ERF)
        dict(name="paper", cfg=Config(**dict(base, channels=16), global_heads=1, window=4, tied_embeddings=False,
                                      bias=False, gelu="erf"),
             B=2, T=16, z=0.0, clip=1.0, seed=8, init_std={"fcw": FC_STD_ERF(16)}),
    ] + fixture_list_hd32()


def fixture_list_hd32():
    """Head size 32, the smallest the CUDA attention kernel supports (32, 64, 128), so that the GPU
    test (test/gpu/test_cuda_model.cu) can check CudaBackend against these too. The model files hold
    bf16 parameters (the reference computes from exactly those values): half the bytes, and a BF16
    GPU build sees its weights without rounding. Sizes keep all of test/fixtures under 2 MB."""
    V = 64
    c64 = dict(max_seq_len=24, vocab_size=V, padded_vocab_size=pad_vocab(V), num_heads=2, channels=64)
    c32 = dict(max_seq_len=24, vocab_size=V, padded_vocab_size=pad_vocab(V), num_heads=1, channels=32)
    return [
        # (e) LS: one local head with a window of 4 and one global head; ragged T
        dict(name="ls_hd32", cfg=Config(**c64, num_layers=1, global_heads=1, window=4),
             B=2, T=19, z=0.0, clip=1.0, seed=5, model_dtype="bf16"),
        # (f) plain MHSA, two global heads, T = maxT
        dict(name="mhsa_hd32", cfg=Config(**c64, num_layers=1, global_heads=2, window=4),
             B=2, T=24, z=0.0, clip=1.0, seed=6, model_dtype="bf16"),
        # (g) two layers of one all-local head (window 5) with QK-norm, soft-cap 5 and z-loss 1e-2; grad
        #     clip 0.05 so clipping is active in the AdamW steps (tied: an untied head would push the
        #     fixtures over 2 MB; (c) covers it on the CPU, the GPU test's random cases on the GPU)
        dict(name="local_qknorm_softcap_hd32", cfg=Config(**c32, num_layers=2, global_heads=0, window=5,
                                                          qk_norm=True, attn_softcap=5.0),
             B=2, T=21, z=1e-2, clip=0.05, seed=7, model_dtype="bf16"),
        # (i) the paper's configuration with QK-norm: no bias anywhere (the QK-norm has gains only), erf
        #     GELU, untied LM head, one local head (window 6) + one global head; z-loss 1e-3 and grad
        #     clip 0.05 so clipping is active in the AdamW steps
        dict(name="paper_qknorm_hd32", cfg=Config(**c64, num_layers=1, global_heads=1, window=6, qk_norm=True,
                                                  tied_embeddings=False, bias=False, gelu="erf"),
             B=2, T=22, z=1e-3, clip=0.05, seed=9, model_dtype="bf16", init_std={"fcw": FC_STD_ERF(64)}),
    ]


def run_reference(cfg, params, inputs, targets, z, clip, dtype):
    """Forward/backward/stats and N AdamW steps in `dtype`. params: dict of float64 tensors."""
    p = {k: v.to(dtype).clone().requires_grad_(v.numel() > 0) for k, v in params.items()}
    idx, tgt = torch.from_numpy(inputs).long(), torch.from_numpy(targets).long()
    stats = new_attn_stats(cfg)
    logits, loss, z_loss = forward(cfg, p, idx, tgt, z, stats)
    grads = torch.autograd.grad(loss + z_loss, [p[k] for k, _ in param_shapes(cfg) if p[k].numel() > 0])
    it = iter(grads)
    g = {k: (next(it) if p[k].numel() > 0 else torch.zeros_like(p[k])) for k, _ in param_shapes(cfg)}
    out = dict(logits=logits[:, :, :cfg.vocab_size].detach().double().numpy(), loss=loss.item(),
               z_loss=z_loss.item(), grads={k: v.double().numpy() for k, v in g.items()}, stats=stats)

    # N AdamW steps on the same batch: loss_k and ||grad_k|| are measured before update k
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v2 = {k: torch.zeros_like(v) for k, v in p.items()}
    step_loss, step_z, step_norm = [], [], []
    for t in range(1, N_STEPS + 1):
        _, loss_t, z_t = forward(cfg, p, idx, tgt, z)
        gt = torch.autograd.grad(loss_t + z_t, [p[k] for k, _ in param_shapes(cfg) if p[k].numel() > 0])
        it = iter(gt)
        gd = {k: (next(it) if p[k].numel() > 0 else torch.zeros_like(p[k])) for k, _ in param_shapes(cfg)}
        norm = global_grad_norm(gd)
        step_loss.append(loss_t.item())
        step_z.append(z_t.item())
        step_norm.append(norm)
        adamw_step(cfg, p, gd, m, v2, t, grad_multiplier=min(1.0, clip / norm), **ADAM)
    out.update(step_loss=np.array(step_loss), step_z=np.array(step_z), step_norm=np.array(step_norm))
    return out


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return np.linalg.norm(a - b) / nb if nb > 0 else np.linalg.norm(a - b)


def grad_rel(a, b, total_norm):
    """The tests' per-tensor gradient error: ||a - b|| / max(||b||, 1e-3 ||all gradients||). The floor
    covers tensors whose gradient is zero in exact arithmetic (e.g. the k-norm bias without soft-cap)."""
    return np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(b), 1e-3 * total_norm)


def make_one(fx, out_dir):
    cfg, B, T, z, clip = fx["cfg"], fx["B"], fx["T"], fx["z"], fx["clip"]
    gen = torch.Generator().manual_seed(1000 + fx["seed"])
    params = init_params(cfg, gen)
    for name, std in fx.get("init_std", {}).items():  # the N(0, 0.02) draw rescaled to std
        params[name] = params[name] * (std / 0.02)
    # the model file holds fp32 (or bf16); compute the reference from exactly those values
    dtype = fx.get("model_dtype", "fp32")
    if dtype == "bf16":
        params = {k: torch.from_numpy(bf16_bits_to_fp32(fp32_to_bf16_bits(v.float().numpy()))).double()
                  for k, v in params.items()}
    else:
        params = {k: v.float().double() for k, v in params.items()}
    flat = flatten(cfg, params).float().numpy()
    tokens = torch.randint(0, cfg.vocab_size, (B * T + 1,), generator=gen).numpy().astype(np.int32)
    inputs = tokens[:-1].reshape(B, T).copy()
    targets = tokens[1:].reshape(B, T).copy()

    ref = run_reference(cfg, params, inputs, targets, z, clip, torch.float64)
    s = ref["stats"]
    grads = np.concatenate([ref["grads"][k].reshape(-1) for k, _ in param_shapes(cfg)])
    d = DebugState(B=B, T=T, V=cfg.vocab_size, Vp=cfg.padded_vocab_size, L=cfg.num_layers, NH=cfg.num_heads,
                   z_weight=z, grad_clip=clip, **ADAM, inputs=inputs, targets=targets,
                   logits=ref["logits"].astype(np.float32), loss=ref["loss"], z_loss=ref["z_loss"],
                   grads=grads.astype(np.float32), attn_max=s["max_logit"].numpy(), attn_min=s["min_logit"].numpy(),
                   attn_entropy=s["entropy"].numpy(), out_max_logit=s["out_max_logit"],
                   out_mean_lse=s["out_mean_lse"], step_loss=ref["step_loss"], step_z_loss=ref["step_z"],
                   step_grad_norm=ref["step_norm"])
    model_path = os.path.join(out_dir, fx["name"] + "_model.bin")
    debug_path = os.path.join(out_dir, fx["name"] + "_debug.bin")
    write_model(model_path, cfg, flat, dtype=dtype)
    write_debug(debug_path, d)
    d = read_debug(debug_path)  # report from what was stored

    # the same in float32: how far an fp32 implementation lands from the stored reference
    r32 = run_reference(cfg, params, inputs, targets, z, clip, torch.float32)
    gnorm = np.sqrt(sum(float((v ** 2).sum()) for v in ref["grads"].values()))
    worst_grad = max((grad_rel(r32["grads"][k], ref["grads"][k], gnorm), k) for k, _ in param_shapes(cfg)
                     if ref["grads"][k].size > 0)
    print(f"{fx['name']}: {sum(x.size for x in ref['grads'].values())} params, B={B} T={T}, "
          f"loss {d.loss:.6f} z_loss {d.z_loss:.3e}, step losses {np.array2string(d.step_loss, precision=6)}, "
          f"grad norms {np.array2string(d.step_grad_norm, precision=4)}, "
          f"attn logits [{d.attn_min.min():.3f}, {d.attn_max.max():.3f}]")
    print(f"   fp32 vs fp64: logits {rel(r32['logits'], ref['logits']):.1e}, loss {rel(r32['loss'], ref['loss']):.1e}, "
          f"worst grad tensor {worst_grad[0]:.1e} ({worst_grad[1]}), "
          f"step losses {rel(r32['step_loss'], ref['step_loss']):.1e}, "
          f"entropy {rel(r32['stats']['entropy'], s['entropy']):.1e}")
    return [model_path, debug_path]


# A debug file's float results hold float64 results rounded to fp32. The float64 results carry rounding
# noise whose bits follow the summation order of torch's CPU kernels, which changes with torch's
# version. Two things can then change: an entry that is mathematically zero (the key bias's gradient:
# softmax ignores a constant added to a row's logits; QK-norm's key bias likewise) comes out as noise,
# ~1e-18; and an entry whose float64 value lies next to a boundary between two fp32 values rounds to
# the other one. So the up-to-date check lets a result differ only when both values are below
# ZERO_NOISE times its array's largest magnitude (2^-40, far below fp32's resolution of any value the
# tests read), or by one fp32 step, at most MAX_ONE_STEP entries a file (a rounding boundary is rare;
# many entries one step off is a changed computation); every other byte must match: the header (shapes
# and the hyperparameters the C++ reads) and the integer arrays exactly. A change to the reference's
# computation moves its results by far more than that.
ZERO_NOISE = 2.0 ** -40
MAX_ONE_STEP = 16
# the debug file's fields that are results (fp32 scalars and arrays); every other field is the header
# or integer input, compared exactly
DEBUG_RESULTS = ("logits", "loss", "z_loss", "grads", "attn_max", "attn_min", "attn_entropy", "out_max_logit",
                 "out_mean_lse", "step_loss", "step_z_loss", "step_grad_norm")


def fixture_differences(fresh, committed, forgiven=None):
    """What differs between a fresh fixture file and the committed one ([] when they agree): a model
    file byte for byte; a debug file field by field, its header and integer fields exact, its fp32
    results (DEBUG_RESULTS, scalars as one-element fp32 arrays) exact but for entries that are zero up
    to float64 noise on both sides (ZERO_NOISE) or one fp32 step apart (at most MAX_ONE_STEP in the
    file). forgiven: a dict that gets the counts of "zero noise" and "one step" entries let through."""
    if not os.path.exists(committed):
        return [f"{committed}: missing"]
    a, b = open(fresh, "rb").read(), open(committed, "rb").read()
    if a == b:
        return []
    if not fresh.endswith("_debug.bin"):
        return [f"{committed}: bytes differ"]
    da, db = read_debug(fresh), read_debug(committed)
    assert set(DEBUG_RESULTS) <= set(DebugState.__dataclass_fields__), "DEBUG_RESULTS names a field DebugState lacks"
    out, one_step, zero_noise = [], 0, 0
    if a[:HEADER_INTS * 4] != b[:HEADER_INTS * 4]:  # every header word, the reserved ones too
        out.append(f"{committed}: the header differs")
    for name in DebugState.__dataclass_fields__:
        result = name in DEBUG_RESULTS
        x = np.asarray(getattr(da, name), dtype=np.float32 if result else None)
        y = np.asarray(getattr(db, name), dtype=np.float32 if result else None)
        if x.shape != y.shape or x.dtype != y.dtype:
            out.append(f"{committed}: {name} has shape {y.shape} {y.dtype}, a fresh run {x.shape} {x.dtype}")
            continue
        if np.array_equal(x, y):
            continue
        if not result:
            out.append(f"{committed}: {name} differs (committed {y.ravel()[:4]!r}, fresh {x.ravel()[:4]!r})")
            continue
        noise = ZERO_NOISE * float(np.max(np.abs(y)))
        step = (x == np.nextafter(y, np.float32(np.inf))) | (x == np.nextafter(y, np.float32(-np.inf)))
        quiet = (x != y) & (np.abs(x) <= noise) & (np.abs(y) <= noise)
        bad = (x != y) & ~step & ~quiet
        one_step += int((step & ~quiet).sum())
        zero_noise += int(quiet.sum())
        if bad.any():
            i = int(np.flatnonzero(bad.ravel())[0])
            out.append(f"{committed}: {name} differs at {int(bad.sum())} entries (first [{i}]: committed "
                       f"{y.ravel()[i]!r}, fresh {x.ravel()[i]!r})")
    if one_step > MAX_ONE_STEP:
        out.append(f"{committed}: {one_step} results one fp32 step apart, more than the {MAX_ONE_STEP} a rounding "
                   "boundary explains")
    if forgiven is not None:
        forgiven["zero noise"] = forgiven.get("zero noise", 0) + zero_noise
        forgiven["one step"] = forgiven.get("one step", 0) + one_step
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=os.path.join(REPO, "test", "fixtures"))
    ap.add_argument("--check", action="store_true",
                    help="recompute into a temporary directory and compare byte for byte with --out-dir")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a fixed reduction order: same bytes on every run
    if args.check:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            bad, forgiven = [], {}
            for fx in fixture_list():
                for path in make_one(fx, tmp):
                    bad += fixture_differences(path, os.path.join(args.out_dir, os.path.basename(path)), forgiven)
            if bad:
                sys.exit("error: fixtures differ from a fresh run: " + "; ".join(bad) +
                         "; rerun make_fixtures.py without --check and commit them")
            print(f"fixtures are up to date (byte-identical but for zero entries' float64 noise, ZERO_NOISE: "
                  f"{forgiven.get('zero noise', 0)}; results one fp32 step apart, at most {MAX_ONE_STEP} a file: "
                  f"{forgiven.get('one step', 0)})")
        return
    os.makedirs(args.out_dir, exist_ok=True)
    for fx in fixture_list():
        make_one(fx, args.out_dir)


if __name__ == "__main__":
    main()
