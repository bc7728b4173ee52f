"""A synthetic language with dense local dependencies plus sparse long-range ones (docs/data.md).

Tokens 0..V-1 are the language; id V is the end-of-text token that starts every document. A document of n
tokens x_0 .. x_{n-1} is generated left to right. For position t:

1. Local part (an additive order-k model). With PAD = V standing for the positions before the document,
       logits_t = sum_{j=1..k} E_j[x_{t-j}]            E_j: (V+1, V), entries N(0, strength^2 / k)
       L_t = softmax(logits_t)
   so each of the previous k tokens shifts the next-token distribution; `strength` is the standard
   deviation of the logits (0 = uniform, larger = more peaked).
2. Long-range copy (induction). Let s be the most recent position with x_s = x_{t-1} and
   s <= t-1-copy_min_dist (so the copied token x_{s+1} lies at least copy_min_dist back). A copy source
   exists when such an s exists and s >= t-1-copy_max_dist. If it exists, with probability copy_rate the
   token is the copy y_t = x_{s+1}; otherwise (or without a source) it is drawn from L_t.

So the exact next-token distribution given the document so far is
       p_t = (1 - c) L_t + c * onehot(y_t)   if a source exists,   p_t = L_t   otherwise,
and the ideal model's expected loss at t is its entropy H(p_t). The generator records H(p_t) (and the
ideal model's realized loss -log p_t(x_t)) at every position; the mean over a split is the entropy floor
written into meta.json. A model reaches it only if its context covers copy_max_dist + 1 tokens.

Randomness: the tables E_j come from seed; document d uses its own stream seeded from (seed, d), so the
output does not depend on how documents are batched or spread over worker processes.
"""
from typing import NamedTuple

import numpy as np


class SyntheticSpec(NamedTuple):
    vocab: int            # V language tokens (the EOT token is id V, so the vocabulary has V + 1 ids)
    order: int            # k previous tokens shape the local distribution
    strength: float       # standard deviation of the local logits
    copy_rate: float      # probability c of a long-range copy when a source exists
    copy_min_dist: int    # a copied token lies at least this far back
    copy_max_dist: int    # ... and at most this far back
    doc_len: int          # tokens per document (the last document may be shorter)
    length: int           # language tokens in total (train + val), EOT tokens not counted
    seed: int


def check_spec(spec):
    """Return an error message for an impossible spec, or None."""
    if not 2 <= spec.vocab <= 2**31 - 2:
        return f"--syn-vocab {spec.vocab} must be at least 2"
    if spec.order < 1:
        return f"--syn-order {spec.order} must be at least 1"
    if not spec.strength >= 0:
        return f"--syn-strength {spec.strength} must be >= 0"
    if not 0 <= spec.copy_rate < 1:
        return f"--syn-copy-rate {spec.copy_rate} must be in [0, 1)"
    if not 1 <= spec.copy_min_dist <= spec.copy_max_dist:
        return f"need 1 <= --syn-copy-min-dist ({spec.copy_min_dist}) <= --syn-copy-max-dist ({spec.copy_max_dist})"
    if spec.doc_len < 1 or spec.length < 1:
        return f"--syn-doc-len ({spec.doc_len}) and --syn-length ({spec.length}) must be positive"
    if spec.vocab * spec.vocab * (spec.order + 1) > 2**28:
        return f"--syn-vocab {spec.vocab} with --syn-order {spec.order} needs too large a table; use a vocabulary <= 4096"
    return None


def local_tables(spec):
    """E: (k, V+1, V) float32 (drawn in float64), row V of each E_j is the PAD (before-the-document) context."""
    rng = np.random.default_rng([spec.seed, 1])
    scale = spec.strength / np.sqrt(spec.order)
    return (rng.standard_normal((spec.order, spec.vocab + 1, spec.vocab)) * scale).astype(np.float32)


def doc_lengths(spec):
    """Lengths of all documents: length // doc_len full ones plus a shorter last one if needed."""
    n_full, rest = divmod(spec.length, spec.doc_len)
    return [spec.doc_len] * n_full + ([rest] if rest else [])


def _xlogx(p):
    return np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)


def generate(spec, tables, doc_ids, lens):
    """Generate the documents doc_ids (their lengths `lens`) together, vectorized over documents.
    Returns a dict of (B, Tmax) arrays: tokens (int64, -1 past a document's end), entropy H(p_t),
    nll -log p_t(x_t), has_source (bool) and copied (bool)."""
    V, k, c = spec.vocab, spec.order, spec.copy_rate
    B, Tmax = len(doc_ids), max(lens)
    rows = np.arange(B)
    u_tok = np.zeros((B, Tmax))   # uniform draws for the local sample
    u_copy = np.ones((B, Tmax))   # uniform draws for the copy coin
    for b, (d, n) in enumerate(zip(doc_ids, lens)):
        rng = np.random.default_rng([spec.seed, 2, d])
        u_tok[b, :n] = rng.random(n)
        u_copy[b, :n] = rng.random(n)

    x = np.full((B, k + Tmax), V, dtype=np.int64)       # k PAD columns, then the document (column k + t)
    last = np.full((B, V), -1, dtype=np.int64)           # last[b, v]: most recent s <= t-1-min_dist with x_s = v
    out = {"entropy": np.zeros((B, Tmax)), "nll": np.zeros((B, Tmax)),
           "has_source": np.zeros((B, Tmax), dtype=bool), "copied": np.zeros((B, Tmax), dtype=bool)}
    for t in range(Tmax):
        # local distribution L_t from the previous k tokens: (B, V)
        logits = tables[0][x[:, k + t - 1]].copy()
        for j in range(2, k + 1):
            logits += tables[j - 1][x[:, k + t - j]]
        a = logits - logits.max(axis=1, keepdims=True)    # (B, V) float32; the sampled distribution is w / Z
        w = np.exp(a)
        cdf = np.cumsum(w, axis=1)
        Z = cdf[:, -1].astype(np.float64)
        H_local = np.log(Z) - (w * a).sum(axis=1, dtype=np.float64) / Z
        tok = np.minimum((cdf <= (u_tok[:, t] * Z)[:, None]).sum(axis=1), V - 1)

        # copy source: the most recent s <= t-1-min_dist with x_s = x_{t-1}, no further back than max_dist
        s_new = t - 1 - spec.copy_min_dist
        if s_new >= 0:
            last[rows, x[:, k + s_new]] = s_new
        if t >= 1:
            src = last[rows, x[:, k + t - 1]]
            has = (src >= 0) & (src >= t - 1 - spec.copy_max_dist)
        else:
            src, has = np.full(B, -1), np.zeros(B, dtype=bool)
        y = np.where(has, x[rows, k + np.maximum(src, 0) + 1], 0)   # the copy candidate (0 where none)
        copied = has & (u_copy[:, t] < c)
        tok = np.where(copied, y, tok)

        # the ideal model: p_t = (1-c) L_t + c onehot(y) where has, else L_t
        L_tok, L_y = w[rows, tok] / Z, w[rows, y] / Z
        p_y = (1 - c) * L_y + c
        H_mix = (1 - c) * (H_local - np.log(1 - c)) + _xlogx((1 - c) * L_y) - _xlogx(p_y)
        p_tok = np.where(has, (1 - c) * L_tok + c * (tok == y), L_tok)
        out["entropy"][:, t] = np.where(has, H_mix, H_local)
        out["nll"][:, t] = -np.log(p_tok)
        out["has_source"][:, t] = has
        out["copied"][:, t] = copied
        x[:, k + t] = tok

    tokens = x[:, k:]
    for b, n in enumerate(lens):  # blank out positions past each document's end
        tokens[b, n:] = -1
        for key in ("entropy", "nll"):
            out[key][b, n:] = 0.0
        out["has_source"][b, n:] = False
        out["copied"][b, n:] = False
    out["tokens"] = tokens
    return out


def generate_group(spec, doc_ids, lens):
    """Worker entry point: (tokens with EOT before each document as one (n,) uint32 array, statistics sums)."""
    g = generate(spec, local_tables(spec), doc_ids, lens)
    pieces = []
    for b, n in enumerate(lens):
        pieces.append(np.array([spec.vocab], dtype=np.uint32))
        pieces.append(g["tokens"][b, :n].astype(np.uint32))
    stats = {"tokens": int(sum(lens)), "entropy_sum": float(g["entropy"].sum()), "nll_sum": float(g["nll"].sum()),
             "has_source": int(g["has_source"].sum()), "copied": int(g["copied"].sum())}
    return np.concatenate(pieces), stats


def token_bytes(spec):
    """tokenizer.bin entries: token v is written as 't<v> ', the EOT token as '<|endoftext|>'."""
    return [f"t{v} ".encode() for v in range(spec.vocab)] + [b"<|endoftext|>"]
