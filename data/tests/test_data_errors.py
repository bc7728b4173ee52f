"""Bad input to data/prepare.py: a one-line message naming the problem, a non-zero exit, no meta.json."""
import os

import pytest

from datatest_util import run_prepare


def fails(tmp_path, *args, expect):
    out = tmp_path / "out"
    proc = run_prepare(*args, "--out", out, check=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert expect in lines[0], lines[0]
    assert not (out / "meta.json").exists()
    return lines[0]


def test_missing_source(tmp_path):
    fails(tmp_path, "--dataset", "tinyshakespeare", "--source", tmp_path / "nope.txt", "--tokenizer", "gpt2",
          expect="does not exist")


def test_empty_source(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    fails(tmp_path, "--dataset", "text", "--source", tmp_path / "empty.txt", "--tokenizer", "sp", expect="is empty")
    (tmp_path / "dir").mkdir()
    fails(tmp_path, "--dataset", "pg19", "--source", tmp_path / "dir", "--tokenizer", "sp", expect="no .txt books")


def test_not_utf8(tmp_path, gpt2_dir):
    d = tmp_path / "books"
    d.mkdir()
    (d / "a.txt").write_text("fine text\n")
    (d / "b.txt").write_bytes(b"caf\xe9 latin-1\n")
    fails(tmp_path, "--dataset", "text", "--source", d, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
          "--workers", 2, expect="b.txt is not UTF-8")


@pytest.mark.parametrize("args,expect", [
    (["--val-fraction", "1.5"], "--val-fraction 1.5"),
    (["--workers", "0"], "--workers 0"),
    (["--shard-tokens", "0"], "--shard-tokens 0"),
    (["--tokenizer", "bpe"], "invalid choice"),
    (["--vocab-size", "100"], "--vocab-size 100 is too small"),
    (["--gpt2-bpe", "/nonexistent"], "encoder.json not found"),
])
def test_bad_arguments(tmp_path, shared_data, args, expect):
    src = os.path.join(shared_data, "tinyshakespeare", "input.txt")
    base = ["--dataset", "tinyshakespeare", "--source", src]
    if "--tokenizer" not in args:
        base += ["--tokenizer", "gpt2" if "--gpt2-bpe" in args else "sp"]
    fails(tmp_path, *base, *args, expect=expect)


def test_missing_required(tmp_path):
    fails(tmp_path, "--dataset", "pg19", "--tokenizer", "gpt2", expect="--source is required")
    fails(tmp_path, "--dataset", "text", "--source", tmp_path, expect="--tokenizer is required")
    fails(tmp_path, "--dataset", "wiki", expect="invalid choice")


def test_bad_synthetic(tmp_path):
    fails(tmp_path, "--dataset", "synthetic", "--syn-copy-rate", "1.0", expect="--syn-copy-rate")
    fails(tmp_path, "--dataset", "synthetic", "--syn-copy-min-dist", "0", expect="--syn-copy-min-dist")
    fails(tmp_path, "--dataset", "synthetic", "--syn-length", "100", "--syn-doc-len", "100", expect="one document")
    fails(tmp_path, "--dataset", "synthetic", "--tokenizer", "gpt2", expect="drop --source and --tokenizer")


def test_too_short_to_split(tmp_path):
    (tmp_path / "t.txt").write_text("a")
    fails(tmp_path, "--dataset", "text", "--source", tmp_path / "t.txt", "--tokenizer", "sp", expect="too short")


def test_sp_vocab_larger_than_corpus_supports(tmp_path):
    (tmp_path / "t.txt").write_text("a small text, far too small for 10000 pieces\n" * 3)
    fails(tmp_path, "--dataset", "text", "--source", tmp_path / "t.txt", "--tokenizer", "sp",
          expect="try a smaller --vocab-size")


# A proxy on a closed local port makes every download fail at once, like a machine without network;
# an empty tiktoken cache makes sure tiktoken has to download.
def no_network_env(tmp_path):
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    proxy = "http://127.0.0.1:9"
    return {"TIKTOKEN_CACHE_DIR": str(cache), "HTTPS_PROXY": proxy, "https_proxy": proxy, "HTTP_PROXY": proxy,
            "http_proxy": proxy, "NO_PROXY": "", "no_proxy": ""}


def test_no_network_without_gpt2_bpe_names_the_flag_and_keeps_out(tmp_path):
    (tmp_path / "t.txt").write_text("some text to tokenize\n" * 20)
    out = tmp_path / "out"
    out.mkdir()
    (out / "meta.json").write_text('{"earlier": "data set"}\n')  # an earlier data set in --out is left alone
    (out / "train_000000.bin").write_bytes(b"earlier shard")
    proc = run_prepare("--dataset", "text", "--source", tmp_path / "t.txt", "--tokenizer", "gpt2", "--out", out,
                       check=False, env=no_network_env(tmp_path))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot download GPT-2's BPE files"), proc.stderr
    assert "--gpt2-bpe" in lines[0] and "GPT2_BPE_DIR" in lines[0]
    assert (out / "meta.json").read_text() == '{"earlier": "data set"}\n'
    assert (out / "train_000000.bin").read_bytes() == b"earlier shard"


def test_out_that_cannot_be_created(tmp_path):
    (tmp_path / "t.txt").write_text("some text to tokenize\n" * 20)
    (tmp_path / "a_file").write_text("x")
    proc = run_prepare("--dataset", "synthetic", "--syn-length", "4000", "--syn-doc-len", "1000",
                       "--out", tmp_path / "a_file" / "out", check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot use --out "), proc.stderr
    assert "a_file" in lines[0] and "Not a directory" in lines[0]
    proc = run_prepare("--dataset", "text", "--source", tmp_path / "t.txt", "--tokenizer", "sp", "--out",
                       tmp_path / "a_file", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: --out ") and "is not a directory" in proc.stderr
    assert (tmp_path / "a_file").read_text() == "x"


@pytest.mark.parametrize("args", [["--dataset", "synthetic"], ["--dataset", "text", "--tokenizer", "gpt2"]])
def test_vocab_size_where_it_is_not_used(tmp_path, args):
    (tmp_path / "t.txt").write_text("some text\n" * 20)
    source = [] if "synthetic" in args else ["--source", tmp_path / "t.txt"]
    line = fails(tmp_path, *args, *source, "--vocab-size", "5000", expect="--vocab-size")
    assert "drop it" in line


def test_exit_code_is_one(tmp_path):
    proc = run_prepare("--dataset", "tinyshakespeare", "--source", tmp_path / "nope.txt", "--tokenizer", "sp",
                       "--out", tmp_path / "out", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ")


def test_sp_vocab_smaller_than_the_characters_of_the_text(tmp_path):
    """More distinct characters than pieces: the fix is a larger vocabulary, not a smaller one."""
    (tmp_path / "t.txt").write_text("".join(chr(0x4E00 + i) for i in range(400)) + "\n" + "some text\n" * 50)
    line = fails(tmp_path, "--dataset", "text", "--source", tmp_path / "t.txt", "--tokenizer", "sp",
                 "--vocab-size", "300", expect="try a larger --vocab-size")
    assert "smaller --vocab-size" not in line
