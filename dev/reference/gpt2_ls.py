"""
An independent, plain PyTorch GPT-2 with LS-attention (local sliding-window heads + global heads),
written from the math, not from the C++. It is the reference the C++ tests are compared against
(see make_fixtures.py) and a tool for cross-checking the trainer (see eval_checkpoint.py).

Model (docs/design.md):
  x = wte[idx] + wpe[pos]
  for each layer: x = x + attn(ln1(x)); x = x + mlp(ln2(x))       (pre-LN, LayerNorm eps 1e-5)
  logits = lnf(x) @ head^T, head = wte (tied) or lm_head (untied)  -> (B, T, Vp)
  attention: NH heads of size hd = C / NH; heads 0..NH-G-1 are local (query i sees keys
  i-P < j <= i), heads NH-G..NH-1 are global (causal). s = q.k / sqrt(hd), after the optional
  QK-norm (LayerNorm over hd, gain/bias of size hd shared by the layer's heads, one for q, one for k).
  With soft-capping c > 0 the softmax sees c * tanh(s / c).  MLP: 4C with GELU, the tanh approximation
  (GPT-2) or the exact 0.5 x (1 + erf(x / sqrt 2)) (cfg.gelu "erf").  Without biases (cfg.bias False)
  no linear layer, LayerNorm or QK-norm has a bias (their table entries are empty).
  loss = mean cross-entropy over the REAL vocabulary [0, V); z_loss = z_weight * mean(logsumexp^2);
  the objective differentiated is loss + z_loss.

Parameters live in a dict name -> tensor whose names, order and shapes are exactly
llmc/core/params.h (so the flat fp32 buffer of a checkpoint maps onto it by a plain split).
Works with torch 1.13 and 2.x, on CPU or CUDA, in float32 or float64.
"""
import math
import torch
import torch.nn.functional as F

from model_config import (BIAS_PARAMS, Config, PARAM_NAMES, WEIGHT_DECAY_PARAMS, num_params, pad_vocab,  # noqa: F401
                          param_shapes)

LN_EPS = 1e-5


def split_flat(cfg, flat):
    """Views of a flat parameter (or gradient) vector as the named tensors of the table."""
    assert flat.dim() == 1 and flat.numel() == num_params(cfg), (flat.shape, num_params(cfg))
    out, off = {}, 0
    for name, shape in param_shapes(cfg):
        n = math.prod(shape)
        out[name] = flat[off:off + n].view(shape)
        off += n
    return out


def flatten(cfg, tensors):
    """Concatenates named tensors (params or grads) into one flat vector in table order."""
    return torch.cat([tensors[name].reshape(-1) for name, _ in param_shapes(cfg)])


def attention_mask(cfg, T, device=None):
    """(NH, T, T) bool, True where query i may attend to key j."""
    i = torch.arange(T, device=device).view(T, 1)
    j = torch.arange(T, device=device).view(1, T)
    causal = j <= i
    local = causal & (j > i - cfg.window)
    n_local = cfg.num_heads - cfg.global_heads
    return torch.stack([local if h < n_local else causal for h in range(cfg.num_heads)])


def new_attn_stats(cfg):
    """Per (layer, head) attention-logit statistics, filled by forward() when passed in."""
    return {"max_logit": torch.zeros(cfg.num_layers, cfg.num_heads, dtype=torch.float64),
            "min_logit": torch.zeros(cfg.num_layers, cfg.num_heads, dtype=torch.float64),
            "entropy": torch.zeros(cfg.num_layers, cfg.num_heads, dtype=torch.float64),
            "out_max_logit": 0.0, "out_mean_lse": 0.0}


def linear(x, w, b):
    """x @ w^T (+ b when the model has biases; b is None without)."""
    y = x @ w.t()
    return y if b is None else y + b


def bias(cfg, p, name, l=None):
    """The bias tensor `name` (layer l's row when given), or None for a model without biases."""
    if not cfg.bias:
        return None
    return p[name] if l is None else p[name][l]


def gelu(cfg, x):
    """The MLP's activation: tanh approximation (GPT-2) or exact erf GELU."""
    assert cfg.gelu in ("tanh", "erf"), cfg.gelu
    return F.gelu(x, approximate="tanh") if cfg.gelu == "tanh" else F.gelu(x)


def attention(cfg, x, qkvw, qkvb, qnorm, knorm, mask, stats=None):
    """x (B, T, C) -> (B, T, C): LS-attention before the output projection. qkvb and the QK-norm
    biases (qnorm[1], knorm[1]) are None without biases."""
    B, T, C = x.shape
    NH, hd = cfg.num_heads, cfg.head_size
    qkv = linear(x, qkvw, qkvb)                               # (B, T, 3C): q, k, v
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hd).transpose(1, 2)                 # (B, NH, T, hd)
    k = k.view(B, T, NH, hd).transpose(1, 2)
    v = v.view(B, T, NH, hd).transpose(1, 2)
    if cfg.qk_norm:
        q = F.layer_norm(q, (hd,), qnorm[0], qnorm[1], LN_EPS)
        k = F.layer_norm(k, (hd,), knorm[0], knorm[1], LN_EPS)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)            # (B, NH, T, T) logits before the cap
    if cfg.attn_softcap > 0:
        s_soft = cfg.attn_softcap * torch.tanh(s / cfg.attn_softcap)
    else:
        s_soft = s
    s_soft = s_soft.masked_fill(~mask, float("-inf"))        # mask (NH, T, T) broadcasts over B
    a = torch.softmax(s_soft, dim=-1)                        # (B, NH, T, T)
    if stats is not None:
        with torch.no_grad():
            sd = s.double()
            stats["max"] = sd.masked_fill(~mask, float("-inf")).amax(dim=(0, 2, 3))   # (NH)
            stats["min"] = sd.masked_fill(~mask, float("inf")).amin(dim=(0, 2, 3))
            ad = a.double()
            plogp = torch.where(mask, ad * torch.log(ad.clamp_min(1e-300)), torch.zeros_like(ad))
            stats["entropy"] = -plogp.sum(dim=-1).mean(dim=(0, 2))                     # (NH)
    y = a @ v                                                # (B, NH, T, hd)
    return y.transpose(1, 2).reshape(B, T, C)                # heads concatenated in head order


def forward(cfg, p, idx, targets=None, z_weight=0.0, attn_stats=None):
    """
    p: dict of parameters (param_shapes); idx, targets: (B, T) int64.
    Returns logits (B, T, Vp), loss (mean CE, or None), z_loss (z_weight * mean lse^2, or None).
    attn_stats (from new_attn_stats) is filled with the attention-logit statistics when given.
    """
    B, T = idx.shape
    C, V = cfg.channels, cfg.vocab_size
    assert T <= cfg.max_seq_len, f"T={T} > max_seq_len={cfg.max_seq_len}"
    mask = attention_mask(cfg, T, idx.device)
    x = p["wte"][idx] + p["wpe"][:T]                          # (B, T, C)
    for l in range(cfg.num_layers):
        h = F.layer_norm(x, (C,), p["ln1w"][l], bias(cfg, p, "ln1b", l), LN_EPS)
        qnorm = (p["qnormw"][l], bias(cfg, p, "qnormb", l)) if cfg.qk_norm else None
        knorm = (p["knormw"][l], bias(cfg, p, "knormb", l)) if cfg.qk_norm else None
        st = {} if attn_stats is not None else None
        y = attention(cfg, h, p["qkvw"][l], bias(cfg, p, "qkvb", l), qnorm, knorm, mask, st)
        if st is not None:
            attn_stats["max_logit"][l] = st["max"].cpu()
            attn_stats["min_logit"][l] = st["min"].cpu()
            attn_stats["entropy"][l] = st["entropy"].cpu()
        x = x + linear(y, p["attprojw"][l], bias(cfg, p, "attprojb", l))
        h = F.layer_norm(x, (C,), p["ln2w"][l], bias(cfg, p, "ln2b", l), LN_EPS)
        h = gelu(cfg, linear(h, p["fcw"][l], bias(cfg, p, "fcb", l)))  # (B, T, 4C)
        x = x + linear(h, p["fcprojw"][l], bias(cfg, p, "fcprojb", l))
    x = F.layer_norm(x, (C,), p["lnfw"], bias(cfg, p, "lnfb"), LN_EPS)
    head = p["wte"] if cfg.tied_embeddings else p["lm_head"]
    logits = x @ head.t()                                     # (B, T, Vp)
    real = logits[:, :, :V]                                   # the padded columns [V, Vp) never count
    lse = torch.logsumexp(real, dim=-1)                       # (B, T)
    if attn_stats is not None:
        attn_stats["out_max_logit"] = real.max().item()
        attn_stats["out_mean_lse"] = lse.mean().item()
    if targets is None:
        return logits, None, None
    assert int(targets.min()) >= 0 and int(targets.max()) < V, "target id outside [0, V)"
    ce = lse - real.gather(-1, targets.unsqueeze(-1)).squeeze(-1)   # (B, T)
    loss = ce.mean()
    z_loss = z_weight * (lse ** 2).mean()
    return logits, loss, z_loss


def init_params(cfg, generator, dtype=torch.float64, perturbed=True):
    """
    Seeded random parameters (CPU). perturbed=True makes every parameter matter for the tests:
    normal(0, 0.02) matrices except larger qkvw/wte (so attention and logits are far from uniform),
    LayerNorm gains 1 + 0.1 N(0,1), biases 0.02 N(0,1), QK-norm gains 1.5 + 0.3 N(0,1) (logits
    large enough that soft-capping is non-linear). perturbed=False is GPT-2's init.
    """
    L = cfg.num_layers
    p = {}
    for name, shape in param_shapes(cfg):
        def randn(std, mean=0.0):
            return mean + std * torch.randn(shape, generator=generator, dtype=torch.float64)
        if math.prod(shape) == 0:
            t = torch.zeros(shape, dtype=torch.float64)
        elif not perturbed:
            if name in ("ln1w", "ln2w", "lnfw", "qnormw", "knormw"):
                t = torch.ones(shape, dtype=torch.float64)
            elif name in ("attprojw", "fcprojw"):
                t = randn(0.02 / math.sqrt(2 * L))
            elif name in WEIGHT_DECAY_PARAMS:
                t = randn(0.02)
            else:
                t = torch.zeros(shape, dtype=torch.float64)
        elif name in ("ln1w", "ln2w", "lnfw"):
            t = randn(0.1, 1.0)
        elif name in ("qnormw", "knormw"):
            t = randn(0.3, 1.5)
        elif name in ("qkvw", "wte", "lm_head"):
            t = randn(0.1)
        else:
            t = randn(0.02)
        p[name] = t.to(dtype)
    return p


def adamw_step(cfg, p, grads, m, v, t, lr, beta1, beta2, eps, weight_decay, grad_multiplier):
    """
    One AdamW step in place, exactly as the C++ (llmc/core/adamw.h): per tensor
      g = grad * grad_multiplier; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
      mhat = m / (1 - b1^t); vhat = v / (1 - b2^t);
      p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)   with wd only on WEIGHT_DECAY_PARAMS.
    t is 1-based. grad_multiplier = min(1, clip / global_norm).
    """
    with torch.no_grad():
        for name, _ in param_shapes(cfg):
            g = grads[name] * grad_multiplier
            m[name].mul_(beta1).add_((1 - beta1) * g)
            v[name].mul_(beta2).add_((1 - beta2) * g * g)
            mhat = m[name] / (1 - beta1 ** t)
            vhat = v[name] / (1 - beta2 ** t)
            wd = weight_decay if name in WEIGHT_DECAY_PARAMS else 0.0
            p[name].sub_(lr * (mhat / (vhat.sqrt() + eps) + wd * p[name]))


def global_grad_norm(grads):
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
