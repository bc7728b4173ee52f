"""GPT-2 tokenizer (local files) and the tiny-Shakespeare pipeline end to end."""
import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import text_tokenizers as tk
from datatest_util import read_bytes, run_prepare, split_documents
from shards import read_shard, read_shard_header, read_split

TRICKY = ("Hello world!  It's   a test\n\n\tTabs,\r\nCRLF, ünïcødé, 漢字, emoji 🙂, "
          "numbers 12345.678, <|endoftext|> as plain text, 's 've 'LL, trailing spaces   \n \n")


def official_gpt2(gpt2_dir, tmp_path, monkeypatch):
    """tiktoken's own 'gpt2' definition (tiktoken_ext.openai_public), fed our local files through its download
    cache (cache key = sha1 of the URL; tiktoken checks the official sha256 of both files)."""
    import tiktoken
    import tiktoken_ext.openai_public as public
    base = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    for name in ("vocab.bpe", "encoder.json"):
        key = hashlib.sha1((base + name).encode()).hexdigest()
        shutil.copy(os.path.join(gpt2_dir, name), tmp_path / key)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    return tiktoken.Encoding(**public.gpt2())


def test_gpt2_matches_tiktoken_definition(gpt2_dir, gpt2_enc, shared_data, tmp_path, monkeypatch):
    ref = official_gpt2(gpt2_dir, tmp_path, monkeypatch)
    assert gpt2_enc.n_vocab == ref.n_vocab == 50257
    assert gpt2_enc.eot_token == 50256
    with open(os.path.join(shared_data, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        shakespeare = f.read()[:200_000]
    for text in (TRICKY, shakespeare):
        assert gpt2_enc.encode_ordinary(text) == ref.encode_ordinary(text)


def test_gpt2_round_trip(gpt2_enc, shared_data):
    import sources
    book, _ = sources.load_document(sources.DocSpec(os.path.join(shared_data, "pg19", "pg1097.txt"), "b", True))
    for text in (TRICKY, book):
        ids = gpt2_enc.encode_ordinary(text)
        assert gpt2_enc.decode(ids) == text
        assert 50256 not in ids  # "<|endoftext|>" inside a text is encoded as ordinary text


def test_gpt2_tokenizer_bin(gpt2_enc, tmp_path):
    path = tmp_path / "tokenizer.bin"
    assert tk.write_tokenizer_bin(str(path), tk.gpt2_token_bytes(gpt2_enc), tk.GPT2_EOT) == 0
    vocab, eot, tokens = tk.read_tokenizer_bin(str(path))
    assert (vocab, eot) == (50257, 50256)
    assert tokens[50256] == b"<|endoftext|>"
    ids = gpt2_enc.encode_ordinary(TRICKY)
    assert b"".join(tokens[i] for i in ids).decode("utf-8") == TRICKY


@pytest.fixture(scope="module")
def shakespeare_run(tmp_path_factory, shared_data, gpt2_dir):
    out = tmp_path_factory.mktemp("ts") / "out"
    src = os.path.join(shared_data, "tinyshakespeare", "input.txt")
    run_prepare("--dataset", "tinyshakespeare", "--source", src, "--out", out, "--tokenizer", "gpt2",
                "--gpt2-bpe", gpt2_dir, "--workers", 2)
    return out, src


def test_shakespeare_shards(shakespeare_run, gpt2_enc):
    out, src = shakespeare_run
    with open(src, encoding="utf-8") as f:
        text = f.read()
    cut = int(len(text) * 0.9)  # nanoGPT's split: the last 10% of the characters are validation
    meta = json.loads((out / "meta.json").read_text())
    for split, part in (("train", text[:cut]), ("val", text[cut:])):
        path = out / f"{split}_000000.bin"
        version, n = read_shard_header(path)
        assert version == 1
        assert os.path.getsize(path) == 1024 + 2 * n
        tokens = read_shard(path).tolist()
        assert tokens[0] == 50256 and tokens.count(50256) == 1  # one document per split, EOT first
        assert gpt2_enc.decode(tokens[1:]) == part
        assert meta["num_tokens"][split] == n
    # nanoGPT's prepare.py reports 301,966 train and 36,059 val GPT-2 tokens; +1 EOT each
    assert meta["num_tokens"] == {"train": 301_967, "val": 36_060}
    assert meta["vocab_size"] == 50257 and meta["eot_token"] == 50256 and meta["shard_version"] == 1
    assert meta["num_shards"] == {"train": 1, "val": 1}
    assert meta["sources"] == [{"file": "input.txt", "bytes": 1115394, "splits": ["train", "val"],
                                "sha256": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                                "tokens": {"train": 301_967, "val": 36_060}}]
    vocab, eot, tokens = tk.read_tokenizer_bin(str(out / "tokenizer.bin"))
    assert (vocab, eot) == (50257, 50256)
    first = read_shard(out / "train_000000.bin")[1:3]
    assert b"".join(tokens[i] for i in first) == b"First Citizen"


def test_determinism_and_sharding(shakespeare_run, shared_data, gpt2_dir, tmp_path):
    """Same inputs -> byte-identical files (also with 1 worker); small --shard-tokens -> the same stream."""
    out, src = shakespeare_run
    again = tmp_path / "again"
    shutil.copytree(out, again)  # the earlier run, kept aside; now rerun into the same --out path
    run_prepare("--dataset", "tinyshakespeare", "--source", src, "--out", out, "--tokenizer", "gpt2",
                "--gpt2-bpe", gpt2_dir, "--workers", 2)
    assert sorted(os.listdir(out)) == sorted(os.listdir(again))
    for name in os.listdir(out):
        assert read_bytes(out / name) == read_bytes(again / name), name

    small = tmp_path / "small"
    run_prepare("--dataset", "tinyshakespeare", "--source", src, "--out", small, "--tokenizer", "gpt2",
                "--workers", 1, "--shard-tokens", 100_000, env={"GPT2_BPE_DIR": gpt2_dir})
    meta = json.loads((small / "meta.json").read_text())
    assert meta["num_shards"] == {"train": 4, "val": 1}
    assert [read_shard_header(small / f"train_{i:06d}.bin")[1] for i in range(4)] == [100_000] * 3 + [1967]
    for split in ("train", "val"):
        np.testing.assert_array_equal(read_split(str(small), split), read_split(str(out), split))
    assert read_bytes(small / "tokenizer.bin") == read_bytes(out / "tokenizer.bin")


def test_stale_shards_removed(shakespeare_run, gpt2_dir, tmp_path):
    out, src = shakespeare_run
    d = tmp_path / "o"
    d.mkdir()
    (d / "train_000007.bin").write_bytes(b"stale")
    (d / "notes.txt").write_text("keep me")
    run_prepare("--dataset", "tinyshakespeare", "--source", src, "--out", d, "--tokenizer", "gpt2",
                "--gpt2-bpe", gpt2_dir)
    assert not (d / "train_000007.bin").exists()
    assert (d / "notes.txt").read_text() == "keep me"


def test_split_documents_helper():
    assert split_documents([7, 1, 2, 7, 7, 3], 7) == [[1, 2], [], [3]]


def test_each_source_file_says_its_split_and_tokens(shared_data, gpt2_dir, tmp_path):
    """trial 5 F12: WikiText-2's two files split by file made validation (test.txt) bigger than training, said
    nowhere. stderr now names each file's split and tokens (meta.json sources[] too), and warns when validation
    is larger than training; a split that is not gets no warning."""
    import sources
    text = open(os.path.join(shared_data, "tinyshakespeare", "input.txt"), encoding="utf-8").read()
    src = tmp_path / "src"
    src.mkdir()
    names = ["src/a.txt", "src/b.txt"]  # as meta.json names them: under the name of the --source directory
    paths = [str(tmp_path / n) for n in names]
    val = sources.split_by_file(paths, names, False, 0.05, 1337)["val"][0].name  # the default --val-fraction, seed
    big, small = text[:20_000], text[20_000:30_000]
    for n in names:
        (tmp_path / n).write_text(big if n == val else small)

    def prepare(out, *extra):
        p = run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "gpt2",
                        "--gpt2-bpe", gpt2_dir, "--workers", 1, *extra)
        return p, json.loads((out / "meta.json").read_text())

    p, meta = prepare(tmp_path / "o")
    tokens = {s["file"]: s["tokens"] for s in meta["sources"]}
    train = [n for n in names if n != val][0]
    assert set(tokens[val]) == {"val"} and set(tokens[train]) == {"train"}, tokens
    assert tokens[val]["val"] == meta["num_tokens"]["val"] > meta["num_tokens"]["train"] == tokens[train]["train"]
    lines = p.stderr.splitlines()
    assert f"source {val}: val, {tokens[val]['val']:,} tokens" in lines, p.stderr
    assert f"source {train}: train, {tokens[train]['train']:,} tokens" in lines, p.stderr
    warnings = [ln for ln in lines if ln.startswith("warning:")]
    assert warnings == [
        f"warning: validation ({meta['num_tokens']['val']:,} tokens) is larger than training "
        f"({meta['num_tokens']['train']:,} tokens): the split is by file (1 of 2 files is validation, "
        f"picked by --seed 1337); give more files, or one file to split by characters"], p.stderr

    # the other file in validation: no warning
    for n in names:
        (tmp_path / n).write_text(small if n == val else big)
    p, meta = prepare(tmp_path / "o2")
    assert not [ln for ln in p.stderr.splitlines() if ln.startswith("warning:")], p.stderr

    # one file: split by characters, both splits named
    one = tmp_path / "one.txt"
    one.write_text(big)
    p = run_prepare("--dataset", "text", "--source", one, "--out", tmp_path / "o3", "--tokenizer", "gpt2",
                    "--gpt2-bpe", gpt2_dir, "--workers", 1, "--val-fraction", 0.6)
    meta = json.loads((tmp_path / "o3" / "meta.json").read_text())
    n = meta["num_tokens"]
    assert meta["sources"][0]["tokens"] == n
    lines = p.stderr.splitlines()
    assert f"source one.txt: train, {n['train']:,} tokens, val, {n['val']:,} tokens (split by characters)" in lines
    assert [ln for ln in lines if ln.startswith("warning:")] == [
        f"warning: validation ({n['val']:,} tokens) is larger than training ({n['train']:,} tokens): "
        f"--val-fraction 0.6 of the characters is validation; lower --val-fraction"], p.stderr


def test_meta_records_the_gpt2_bpe_directory_used_however_given(gpt2_dir, tmp_path):
    """A new-user trial: make data-tinyshakespeare passes the BPE directory in GPT2_BPE_DIR, and meta.json recorded
    "gpt2_bpe": null, so scripts/export_hf.py (which copies the tokenizer from there) exported none from a clone
    not beside ../shared. The directory used is recorded, absolute, whether given by GPT2_BPE_DIR, by a relative
    --gpt2-bpe, or by an absolute one; the data set is the same."""
    (tmp_path / "t.txt").write_text(TRICKY * 20)
    rel = os.path.relpath(gpt2_dir, tmp_path)
    outs = {"env": (["--out", tmp_path / "env"], {"GPT2_BPE_DIR": gpt2_dir}),
            "env_rel": (["--out", tmp_path / "env_rel"], {"GPT2_BPE_DIR": rel}),
            "rel": (["--out", tmp_path / "rel", "--gpt2-bpe", rel], None),
            "abs": (["--out", tmp_path / "abs", "--gpt2-bpe", gpt2_dir], None)}
    for args, env in outs.values():
        run_prepare("--dataset", "text", "--source", "t.txt", "--tokenizer", "gpt2", "--workers", 1, *args,
                    env=env, cwd=tmp_path)
    for name in outs:
        meta = json.loads((tmp_path / name / "meta.json").read_text())
        assert meta["args"]["gpt2_bpe"] == os.path.abspath(gpt2_dir), (name, meta["args"])
        # SentencePiece's settings, refused with gpt2, are recorded as none (a review: vocab_size 10000 was)
        assert meta["args"]["vocab_size"] is None and meta["args"]["sp_train_lines"] is None, meta["args"]
        assert meta["gpt2_bpe"] == "local files"
        assert read_bytes(tmp_path / name / "train_000000.bin") == read_bytes(tmp_path / "abs" / "train_000000.bin")
