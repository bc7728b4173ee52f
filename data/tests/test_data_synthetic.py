"""The synthetic language: the vectorized generator against a literal per-token reference, its statistics
against the documented parameters, and its pipeline."""
import json
import math

import numpy as np
import pytest

import synthetic
import text_tokenizers as tk
from datatest_util import read_bytes, run_prepare, split_documents
from shards import read_split


def spec_of(**kw):
    base = dict(vocab=32, order=2, strength=2.0, copy_rate=0.3, copy_min_dist=5, copy_max_dist=60,
                doc_len=400, length=2000, seed=11)
    base.update(kw)
    return synthetic.SyntheticSpec(**base)


def reference_document(spec, tables, doc_id, n):
    """docs/data.md's process written out token by token (float64, linear search for the copy source), using
    the same uniform draws as the generator. Returns tokens, H(p_t), -log p_t(x_t), has_source, copied."""
    V, k, c = spec.vocab, spec.order, spec.copy_rate
    rng = np.random.default_rng([spec.seed, 2, doc_id])
    u_tok, u_copy = rng.random(n), rng.random(n)
    x, H, nll, has, copied = [], [], [], [], []
    for t in range(n):
        logits = np.zeros(V)
        for j in range(1, k + 1):
            logits += tables[j - 1][x[t - j] if t - j >= 0 else V].astype(np.float64)
        L = np.exp(logits - logits.max())
        L /= L.sum()
        src = None
        if t >= 1:
            for s in range(t - 1 - spec.copy_min_dist, -1, -1):
                if x[s] == x[t - 1]:
                    src = s
                    break
            if src is not None and src < t - 1 - spec.copy_max_dist:
                src = None
        tok = int(np.searchsorted(np.cumsum(L), u_tok[t], side="right"))
        p = L.copy()
        if src is not None:
            p = (1 - c) * L
            p[x[src + 1]] += c
            if u_copy[t] < c:
                tok = x[src + 1]
        x.append(tok)
        H.append(-sum(q * math.log(q) for q in p if q > 0))
        nll.append(-math.log(p[tok]))
        has.append(src is not None)
        copied.append(src is not None and u_copy[t] < c)
    return np.array(x), np.array(H), np.array(nll), np.array(has), np.array(copied)


@pytest.mark.parametrize("kw", [{}, dict(order=1, copy_rate=0.0), dict(order=3, vocab=8, copy_min_dist=1)])
def test_generator_matches_reference(kw):
    spec = spec_of(**kw)
    tables = synthetic.local_tables(spec)
    doc_ids, lens = [0, 3, 4], [300, 257, 120]   # different lengths in one batch
    g = synthetic.generate(spec, tables, doc_ids, lens)
    for b, (d, n) in enumerate(zip(doc_ids, lens)):
        x, H, nll, has, copied = reference_document(spec, tables, d, n)
        np.testing.assert_array_equal(g["tokens"][b, :n], x)
        assert (g["tokens"][b, n:] == -1).all()
        np.testing.assert_allclose(g["entropy"][b, :n], H, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g["nll"][b, :n], nll, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(g["has_source"][b, :n], has)
        np.testing.assert_array_equal(g["copied"][b, :n], copied)
        if spec.copy_rate > 0:
            assert copied.any() and has.any() and not has.all()


def test_output_independent_of_batching():
    spec = spec_of()
    tables = synthetic.local_tables(spec)
    together = synthetic.generate(spec, tables, [0, 1, 2, 3], [400] * 4)["tokens"]
    alone = synthetic.generate(spec, tables, [2], [400])["tokens"]
    np.testing.assert_array_equal(together[2], alone[0])


def test_uniform_language_floor_is_log_v():
    spec = spec_of(strength=0.0, copy_rate=0.0)
    g = synthetic.generate(spec, synthetic.local_tables(spec), [0, 1], [500, 500])
    np.testing.assert_allclose(g["entropy"], math.log(spec.vocab), rtol=1e-6)


@pytest.fixture(scope="module")
def big_sample():
    """~400k tokens of a language with copies, for the statistics tests."""
    spec = spec_of(vocab=64, order=2, strength=2.5, copy_rate=0.2, copy_min_dist=16, copy_max_dist=512,
                   doc_len=4000)
    return spec, synthetic.generate(spec, synthetic.local_tables(spec), list(range(100)), [4000] * 100)


def test_copy_rate_matches_parameter(big_sample):
    spec, g = big_sample
    n = int(g["has_source"].sum())
    rate = g["copied"].sum() / n
    se = math.sqrt(spec.copy_rate * (1 - spec.copy_rate) / n)
    assert abs(rate - spec.copy_rate) < 4 * se, (rate, se)  # binomial, 4 standard errors
    assert n > 0.9 * g["has_source"].size  # with V=64 a source nearly always exists


def test_realized_ideal_loss_matches_floor(big_sample):
    """E[-log p_t(x_t) | history] = H(p_t): if tokens were not drawn from the p_t the floor is computed from,
    the mean difference would be far outside its sampling error."""
    _, g = big_sample
    diff = (g["nll"] - g["entropy"]).ravel()
    se = diff.std() / math.sqrt(diff.size)
    assert abs(diff.mean()) < 4 * se, (diff.mean(), se)


def test_empirical_conditional_entropy_matches_floor():
    """Order 1, no copies: the plug-in estimate of H(X_t | X_{t-1}) from 1M tokens of counts (context PAD for
    the first token of a document), Miller-Madow corrected, is within 0.005 nats of the documented floor
    (the sampling error is ~0.001)."""
    spec = spec_of(vocab=16, order=1, strength=1.5, copy_rate=0.0, doc_len=10_000)
    g = synthetic.generate(spec, synthetic.local_tables(spec), list(range(100)), [10_000] * 100)
    x = g["tokens"]
    prev = np.concatenate([np.full((x.shape[0], 1), spec.vocab), x[:, :-1]], axis=1)
    counts = np.zeros((spec.vocab + 1, spec.vocab))
    np.add.at(counts, (prev.ravel(), x.ravel()), 1)
    n = counts.sum()
    p_joint = counts / n
    p_ctx = counts.sum(axis=1, keepdims=True) / n
    nz = counts > 0
    plug_in = -(p_joint[nz] * np.log((p_joint / np.where(p_ctx > 0, p_ctx, 1))[nz])).sum()
    miller_madow = plug_in + (nz.sum() - (counts.sum(axis=1) > 0).sum()) / (2 * n)
    floor = g["entropy"].mean()
    assert abs(miller_madow - floor) < 0.005, (miller_madow, floor)
    assert floor < math.log(spec.vocab) - 0.3  # and the language is far from uniform


def test_synthetic_pipeline(tmp_path):
    args = ["--dataset", "synthetic", "--syn-vocab", 50, "--syn-order", 2, "--syn-strength", 2.0,
            "--syn-copy-rate", 0.15, "--syn-copy-min-dist", 8, "--syn-copy-max-dist", 200, "--syn-doc-len", 1000,
            "--syn-length", 20_500, "--val-fraction", 0.1, "--seed", 4]
    run_prepare(*args, "--out", tmp_path / "a", "--workers", 2)
    run_prepare(*args, "--out", tmp_path / "b", "--workers", 1, "--shard-tokens", 5000)
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    assert meta["vocab_size"] == 51 and meta["eot_token"] == 50 and meta["tokenizer"] == "synthetic"
    assert meta["num_documents"] == {"train": 19, "val": 2}  # 20 full documents + one of 500; last 2 are val
    assert meta["num_tokens"] == {"train": 19 * 1001, "val": 1001 + 501}
    syn = meta["synthetic"]
    for split in ("train", "val"):
        tokens = read_split(str(tmp_path / "a"), split)
        np.testing.assert_array_equal(tokens, read_split(str(tmp_path / "b"), split))  # workers/sharding
        docs = split_documents(tokens.tolist(), 50)
        assert [len(d) for d in docs] == ([1000] * 19 if split == "train" else [1000, 500])
        assert 0 < syn["entropy_floor_nats"][split] < math.log(50)
        assert abs(syn["copy_fraction"][split] / syn["copy_source_fraction"][split] - 0.15) < 0.05
    # the floor in meta.json is the generator's mean entropy over the same documents
    spec = synthetic.SyntheticSpec(50, 2, 2.0, 0.15, 8, 200, 1000, 20_500, 4)
    g = synthetic.generate(spec, synthetic.local_tables(spec), [19, 20], [1000, 500])
    assert syn["entropy_floor_nats"]["val"] == pytest.approx(g["entropy"].sum() / 1500, rel=1e-12)
    vocab, eot, names = tk.read_tokenizer_bin(str(tmp_path / "a" / "tokenizer.bin"))
    assert (vocab, eot, names[17], names[50]) == (51, 50, b"t17 ", b"<|endoftext|>")
    assert read_bytes(tmp_path / "a" / "tokenizer.bin") == read_bytes(tmp_path / "b" / "tokenizer.bin")


def test_strength_is_logit_std():
    spec = spec_of(vocab=200, order=3, strength=2.5)
    tables = synthetic.local_tables(spec).astype(np.float64)
    ctx = np.random.default_rng(0).integers(0, spec.vocab + 1, size=(500, spec.order))
    logits = sum(tables[j][ctx[:, j]] for j in range(spec.order))  # (500, V): 100k values, N(0, 2.5^2)
    assert abs(logits.std() - 2.5) < 0.03 and abs(logits.mean()) < 0.03
