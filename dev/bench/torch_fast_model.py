"""
The speed twin of dev/reference/gpt2_ls.py: the same model (same math, same parameter names, order
and shapes as llmc/core/params.h), written for speed, as the PyTorch side of the end-to-end benchmark
(dev/bench/train_vs_torch.py). Not a reference: dev/reference/gpt2_ls.py stays the independent,
plain implementation, and check_against_reference() below measures this twin against it.

  x = wte[idx] + wpe[:T]; per layer x += attn(ln1(x)); x += mlp(ln2(x)); logits = lnf(x) @ head^T
  attention: heads 0..NH-G-1 local (query i sees keys i-P < j <= i), heads NH-G..NH-1 causal;
  optional QK-norm (LayerNorm over hd, per-layer gain/bias shared by the heads) and soft-cap
  c*tanh(s/c); loss = mean CE over the real vocabulary [0, V), z_loss = z_weight * mean(lse^2).

Attention back-ends (TwinGPT(attn=...)):
  "flex"  torch.nn.attention.flex_attention with a per-head block mask (local heads skip every key
          block outside their window) and the soft-cap as a score_mod. The LS layout's path.
  "sdpa"  F.scaled_dot_product_attention(is_causal=True): plain MHSA (every head global, no
          soft-cap); the benchmark worker restricts SDPA to its flash back-end.
  "dense" an explicit (NH, T, T) mask and softmax. Only for checking the twin's math on a machine
          without flex_attention (torch 1.13 on the CPU): `--self-test` below. Never used for timing.
  "auto"  sdpa when every head is global and there is no soft-cap, else flex; dense on the CPU.
Speed settings live in the caller: torch.compile(model), bf16 autocast, fused AdamW (make_optimizer).

Self-test on the CPU (torch 1.13 has no flex_attention; float64, dense back-end):
  /usr/bin/python3 dev/bench/torch_fast_model.py --self-test
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

_REF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference")
sys.path.insert(0, os.path.abspath(_REF_DIR))
from model_config import Config, WEIGHT_DECAY_PARAMS, param_shapes  # noqa: E402

LN_EPS = 1e-5


def flex_attention_available():
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
        return True
    except ImportError:
        return False


def all_heads_global(cfg, T):
    """True when no head is restricted: G == NH, or the window covers the whole sequence."""
    return cfg.global_heads == cfg.num_heads or cfg.window >= T


def choose_attention(cfg, T, device, attn="auto"):
    if attn != "auto":
        return attn
    if torch.device(device).type != "cuda":
        return "dense"
    if all_heads_global(cfg, T) and cfg.attn_softcap == 0:
        return "sdpa"
    return "flex"


class TwinGPT(nn.Module):
    """GPT-2 with LS-attention. Parameters: one nn.Parameter per llmc/core/params.h table entry (absent
    entries, zero-sized in the table, are not created); per-layer tensors are stacked (L, ...)."""

    def __init__(self, cfg, attn="auto", device="cpu", dtype=torch.float32):
        super().__init__()
        self.cfg = cfg
        self.attn_kind = attn
        self.params = nn.ParameterDict()
        for name, shape in param_shapes(cfg):
            if math.prod(shape) > 0:
                self.params[name] = nn.Parameter(torch.zeros(shape, device=device, dtype=dtype))
        self._prepared = {}  # T -> (attention back-end, flex BlockMask or None), built outside compile

    @torch.no_grad()
    def load_params(self, p):
        """Copies a reference parameter dict (dev/reference/gpt2_ls.py layout) into the twin."""
        for name, t in self.params.items():
            if tuple(p[name].shape) != tuple(t.shape):
                raise ValueError(f"parameter {name}: shape {tuple(p[name].shape)} != {tuple(t.shape)}")
            t.copy_(p[name])

    def param_groups(self, weight_decay):
        """AdamW groups: decoupled weight decay only on the matrices and embeddings, as the trainer."""
        decay = [t for n, t in self.params.items() if n in WEIGHT_DECAY_PARAMS]
        other = [t for n, t in self.params.items() if n not in WEIGHT_DECAY_PARAMS]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]

    # -- attention back-ends: q, k, v (B, NH, T, hd) -> (B, NH, T, hd) -------------------------
    def prepare(self, T, device):
        """Builds what the attention needs for sequence length T (the flex block mask) outside the
        compiled region; returns (back-end, block mask or None). Call it before compiling: forward()
        only looks the result up (it calls prepare() itself on a miss, which is fine in eager mode).
        The model lives on one device, so T is the key."""
        if T not in self._prepared:
            kind = choose_attention(self.cfg, T, device, self.attn_kind)
            block_mask = None
            if kind == "flex":
                from torch.nn.attention.flex_attention import create_block_mask
                n_local, P = self.cfg.num_heads - self.cfg.global_heads, self.cfg.window

                def ls_mask(b, h, q_idx, kv_idx):
                    # causal, and for a local head (h < n_local) within the window i-P < j <= i
                    return (kv_idx <= q_idx) & ((h >= n_local) | (q_idx - kv_idx < P))
                block_mask = create_block_mask(ls_mask, B=None, H=self.cfg.num_heads, Q_LEN=T, KV_LEN=T,
                                               device=str(device))
            self._prepared[T] = (kind, block_mask)
        return self._prepared[T]

    def _attend(self, q, k, v, kind, block_mask):
        cfg = self.cfg
        B, NH, T, hd = q.shape
        scale = 1.0 / math.sqrt(hd)
        cap = cfg.attn_softcap
        if kind == "flex":
            from torch.nn.attention.flex_attention import flex_attention
            score_mod = None
            if cap > 0:
                def score_mod(score, b, h, q_idx, kv_idx):  # flex applies `scale` before score_mod
                    return cap * torch.tanh(score / cap)
            return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
        if kind == "sdpa":
            if not all_heads_global(cfg, T) or cap > 0:
                raise ValueError("the sdpa back-end is plain causal attention: it needs every head global "
                                 "and no soft-cap; use attn='flex'")
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if kind == "dense":
            i = torch.arange(T, device=q.device)
            dist = i.view(T, 1) - i.view(1, T)                            # (T, T) query - key
            local = torch.arange(NH, device=q.device) < NH - cfg.global_heads  # (NH,)
            allowed = (dist >= 0) & ((~local).view(NH, 1, 1) | (dist < cfg.window))  # (NH, T, T)
            s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
            if cap > 0:
                s = cap * torch.tanh(s / cap)
            s = s.masked_fill(~allowed, float("-inf"))
            return torch.einsum("bhij,bhjd->bhid", torch.softmax(s, dim=-1), v)
        raise ValueError(f"unknown attention back-end '{kind}' (flex, sdpa, dense or auto)")

    def forward(self, idx, targets=None, z_weight=0.0):
        """idx, targets (B, T) int64 -> logits (B, T, Vp), loss (mean CE) and z_loss (or None)."""
        cfg, p = self.cfg, self.params
        B, T = idx.shape
        C, NH, hd, V = cfg.channels, cfg.num_heads, cfg.head_size, cfg.vocab_size
        kind, block_mask = self._prepared[T] if T in self._prepared else self.prepare(T, idx.device)

        def b(name, l=None):  # a bias, or None for a model without biases (cfg.bias False)
            return None if not cfg.bias else p[name] if l is None else p[name][l]
        if cfg.gelu not in ("tanh", "erf"):
            raise ValueError(f"gelu {cfg.gelu!r}: tanh or erf")
        approximate = "tanh" if cfg.gelu == "tanh" else "none"             # "erf": the exact GELU
        x = p["wte"][idx] + p["wpe"][:T]                                  # (B, T, C)
        for l in range(cfg.num_layers):
            h = F.layer_norm(x, (C,), p["ln1w"][l], b("ln1b", l), LN_EPS)
            qkv = F.linear(h, p["qkvw"][l], b("qkvb", l))                  # (B, T, 3C)
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, hd).transpose(1, 2)                        # (B, NH, T, hd)
            k = k.view(B, T, NH, hd).transpose(1, 2)
            v = v.view(B, T, NH, hd).transpose(1, 2)
            if cfg.qk_norm:  # layer_norm runs in fp32 under autocast: back to v's dtype
                q = F.layer_norm(q, (hd,), p["qnormw"][l], b("qnormb", l), LN_EPS).to(v.dtype)
                k = F.layer_norm(k, (hd,), p["knormw"][l], b("knormb", l), LN_EPS).to(v.dtype)
            y = self._attend(q, k, v, kind, block_mask)                                # (B, NH, T, hd)
            y = y.transpose(1, 2).reshape(B, T, C)                           # heads in head order
            x = x + F.linear(y, p["attprojw"][l], b("attprojb", l))
            h = F.layer_norm(x, (C,), p["ln2w"][l], b("ln2b", l), LN_EPS)
            h = F.gelu(F.linear(h, p["fcw"][l], b("fcb", l)), approximate=approximate)  # (B, T, 4C)
            x = x + F.linear(h, p["fcprojw"][l], b("fcprojb", l))
        x = F.layer_norm(x, (C,), p["lnfw"], b("lnfb"), LN_EPS)
        head = p["wte"] if cfg.tied_embeddings else p["lm_head"]
        logits = F.linear(x, head)                                           # (B, T, Vp)
        if targets is None:
            return logits, None, None
        real = logits[:, :, :V]                                              # padded columns never count
        if real.dtype in (torch.bfloat16, torch.float16):
            real = real.float()                                              # CE in fp32 under autocast
        loss = F.cross_entropy(real.reshape(B * T, V), targets.reshape(B * T))
        z_loss = None
        if z_weight > 0:
            z_loss = z_weight * (torch.logsumexp(real, dim=-1) ** 2).mean()
        return logits, loss, z_loss


def make_optimizer(model, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=None):
    """AdamW as the trainer's defaults (decay only on WEIGHT_DECAY_PARAMS); fused on CUDA."""
    if fused is None:
        fused = next(model.parameters()).is_cuda
    kw = {"fused": True} if fused else {}
    return torch.optim.AdamW(model.param_groups(weight_decay), lr=lr, betas=betas, eps=eps, **kw)


def rel_err(a, b, chunk=1 << 24):
    """||a - b|| / ||b||, accumulated in float64 over chunks of `chunk` elements (the logits of a
    full batch are GBs: no float64 copy of the whole tensor); NaN anywhere gives NaN, which never
    passes a `<=` check."""
    a, b = a.reshape(-1), b.reshape(-1)
    if a.numel() != b.numel():
        raise ValueError(f"rel_err: {a.numel()} vs {b.numel()} elements")
    num = den = 0.0
    for i in range(0, a.numel(), chunk):
        x, y = a[i:i + chunk].double(), b[i:i + chunk].double()
        num += float(((x - y) ** 2).sum())
        den += float((y ** 2).sum())
    return math.sqrt(num) / max(math.sqrt(den), 1e-300)


def check_against_reference(cfg, params, idx, targets, twin_forward, *, z_weight=0.0, chunk=None,
                            autocast_dtype=None, wrong_cfg=None):
    """
    Compares the twin with dev/reference/gpt2_ls.py on the same weights and batch.
    params: reference parameter dict, on the device and in the dtype the reference runs in;
    twin_forward(idx, targets) -> (logits, loss, z_loss) of a TwinGPT already holding `params`
    (compiled or not); its parameters must require grad. The reference runs on
    `chunk` rows at a time (memory: it materializes (chunk, NH, T, T)), accumulating the mean.
    wrong_cfg: optional config with another attention layout (e.g. all heads global); its distance
    from the reference shows how much a wrong mask would move the numbers, i.e. that the
    tolerance can fail. Returns a dict of relative errors; the twin's gradients are left in .grad.
    """
    import gpt2_ls as ref
    B, T = idx.shape
    chunk = chunk or B

    def run_reference(c):
        ref_p = {n: t.detach().clone().requires_grad_(True) for n, t in params.items()}
        logits_parts, loss_sum, z_sum = [], 0.0, 0.0
        for b0 in range(0, B, chunk):
            lg, loss, z = ref.forward(c, ref_p, idx[b0:b0 + chunk], targets[b0:b0 + chunk], z_weight=z_weight)
            n = lg.shape[0]
            ((loss + z) * (n / B)).backward()
            logits_parts.append(lg.detach())
            loss_sum += float(loss) * n / B
            z_sum += float(z) * n / B
        grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)) for n, t in ref_p.items()}
        return torch.cat(logits_parts), loss_sum, z_sum, grads

    ref_logits, ref_loss, ref_z, ref_grads = run_reference(cfg)

    if autocast_dtype is not None:
        with torch.autocast(device_type=idx.device.type, dtype=autocast_dtype):
            logits, loss, z = twin_forward(idx, targets)
    else:
        logits, loss, z = twin_forward(idx, targets)
    (loss + z if z is not None else loss).backward()
    model_grads = twin_forward.grads() if hasattr(twin_forward, "grads") else None

    out = {"loss_ref": ref_loss, "loss_twin": float(loss),
           "loss_rel": abs(float(loss) - ref_loss) / abs(ref_loss),
           "logits_rel": rel_err(logits, ref_logits)}
    if z_weight > 0:
        out["z_loss_rel"] = abs(float(z) - ref_z) / max(abs(ref_z), 1e-300)
    if model_grads is not None:
        names = [n for n, s in param_shapes(cfg) if math.prod(s) > 0]
        flat_t = torch.cat([model_grads[n].reshape(-1).double() for n in names])
        flat_r = torch.cat([ref_grads[n].reshape(-1).double() for n in names])
        out["grads_rel"] = rel_err(flat_t, flat_r)
        out["grads_rel_worst_tensor"] = max(
            (rel_err(model_grads[n], ref_grads[n]) if float(ref_grads[n].norm()) > 1e-3 * float(flat_r.norm())
             else 0.0, n) for n in names)
    if wrong_cfg is not None:
        w_logits, w_loss, _, w_grads = run_reference(wrong_cfg)
        out["wrong_layout_logits_rel"] = rel_err(w_logits, ref_logits)
        out["wrong_layout_loss_rel"] = abs(w_loss - ref_loss) / abs(ref_loss)
        if model_grads is not None:
            out["wrong_layout_grads_rel"] = rel_err(torch.cat([w_grads[n].reshape(-1) for n in names]),
                                                    torch.cat([ref_grads[n].reshape(-1) for n in names]))
    return out


class TwinForward:
    """A callable (idx, targets) -> (logits, loss, z_loss) over a TwinGPT, optionally compiled,
    that also hands out the model's gradients by parameter name (for check_against_reference)."""

    def __init__(self, model, fn=None, z_weight=0.0):
        self.model, self.fn, self.z_weight = model, fn if fn is not None else model, z_weight

    def __call__(self, idx, targets):
        return self.fn(idx, targets, self.z_weight)

    def grads(self):
        return {n: t.grad for n, t in self.model.params.items()}


# -------------------------------------------------------------------------------------------
# --self-test: the twin's math against the reference on the CPU (float64, dense back-end).

SELF_TEST_LAYOUTS = {
    # name: (Config overrides, z_weight, a wrong layout: how far the numbers move if the mask is wrong)
    "ls": (dict(global_heads=1, window=3), 0.0, dict(global_heads=4)),
    "mhsa": (dict(global_heads=4, window=3), 0.0, dict(global_heads=3)),
    "all_local": (dict(global_heads=0, window=2), 1e-2, dict(window=3)),
    "qknorm_softcap_untied": (dict(global_heads=2, window=4, qk_norm=True, attn_softcap=2.0,
                                   tied_embeddings=False), 1e-2, dict(global_heads=1)),
    "window_ge_T": (dict(global_heads=1, window=64), 0.0, dict(window=12)),
    "paper_nobias_erf_qknorm": (dict(global_heads=1, window=3, qk_norm=True, tied_embeddings=False, bias=False,
                                     gelu="erf"), 0.0, dict(global_heads=4)),
}


def self_test(tol=1e-10):
    import gpt2_ls as ref
    torch.manual_seed(0)
    failures = []
    for name, (over, zw, wrong_over) in SELF_TEST_LAYOUTS.items():
        cfg = Config(max_seq_len=16, vocab_size=50, padded_vocab_size=64, num_layers=2, num_heads=4, channels=16,
                     **over)
        g = torch.Generator().manual_seed(1234 + len(name))
        params = ref.init_params(cfg, g, dtype=torch.float64, perturbed=True)
        idx = torch.randint(0, cfg.vocab_size, (3, 13), generator=g)
        tgt = torch.randint(0, cfg.vocab_size, (3, 13), generator=g)
        model = TwinGPT(cfg, attn="dense", dtype=torch.float64)
        model.load_params(params)
        wrong = Config(**{**cfg.__dict__, **wrong_over})
        r = check_against_reference(cfg, params, idx, tgt, TwinForward(model, z_weight=zw), z_weight=zw,
                                    chunk=2, wrong_cfg=wrong)
        errs = {k: v for k, v in r.items() if k.endswith("_rel") and not k.startswith("wrong")}
        worst = max(errs.values())
        ok = worst <= tol  # NaN compares False
        # the check must be able to fail: a wrong head layout moves the logits far more than tol
        discriminates = r["wrong_layout_logits_rel"] > 1e3 * tol
        print(f"{name:24s} worst rel err {worst:.2e} (loss {r['loss_rel']:.1e}, logits {r['logits_rel']:.1e}, "
              f"grads {r['grads_rel']:.1e}); wrong layout logits {r['wrong_layout_logits_rel']:.1e} "
              f"-> {'ok' if ok and discriminates else 'FAIL'}")
        if not (ok and discriminates):
            failures.append(name)
    if failures:
        print(f"self-test FAILED: {', '.join(failures)}")
        return 1
    print("self-test passed: the twin (dense back-end) computes the reference's loss, logits and gradients")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    print(__doc__)
    sys.exit(2)
