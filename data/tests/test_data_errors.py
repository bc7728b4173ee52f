"""Bad input to data/prepare.py: a one-line message naming the problem, a non-zero exit, no meta.json."""
import json
import os
import shutil

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


@pytest.mark.parametrize("args, expect", [
    (["--dataset", "tinyshakespeare", "--tokenizer", "gpt2", "--syn-vocab", "12"],
     "--syn-vocab is a setting of the synthetic language, used by --dataset synthetic only, and this run has "
     "--dataset tinyshakespeare: drop --syn-vocab"),
    (["--dataset", "pg19", "--tokenizer", "sp", "--syn-copy-rate=0.5"], "--syn-copy-rate is a setting of the synthetic"),
    (["--dataset", "text", "--tokenizer", "sp", "--gpt2-bpe", "/x"],
     "--gpt2-bpe is GPT-2's BPE files, used by --tokenizer gpt2 only, and this run has --tokenizer sp: drop --gpt2-bpe"),
    (["--dataset", "text", "--tokenizer", "gpt2", "--sp-train-lines", "5"],
     "--sp-train-lines is SentencePiece's training sample, used by --tokenizer sp only, and this run has "
     "--tokenizer gpt2"),
    (["--dataset", "synthetic", "--gpt2-bpe", "/x"], "and this run has --dataset synthetic: drop --gpt2-bpe"),
])
def test_options_of_another_tokenizer_or_data_set_are_refused(tmp_path, args, expect):
    """A new-user trial: --gpt2-bpe with --tokenizer sp and --syn-* with a text data set were read and ignored
    (while --vocab-size with gpt2 is refused): every such option is now refused with one line."""
    source = [] if "synthetic" in args else ["--source", tmp_path]
    fails(tmp_path, *args, *source, expect=expect)


def test_given_options_sees_abbreviations_and_equals():
    import prepare
    p = prepare.argparse.ArgumentParser()
    p.add_argument("--syn-vocab", type=int, default=256)
    p.add_argument("--out", required=True)
    assert prepare.given_options(p, ["--syn-v=3", "--out", "x"]) == {"syn_vocab", "out"}
    assert prepare.given_options(p, ["--out", "x"]) == {"out"}


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


# An earlier data set in --out survives every failure byte for byte: the new one is built in a work directory
# beside --out and moved in only when complete (data/prepare.py: building, commit_out).

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # 52 characters: SentencePiece needs 259 + 52


def snapshot(directory):
    """{relative path: sha256} of every file under directory, and the names beside it (no work dir left)."""
    import hashlib
    files = {}
    for root, dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            files[os.path.relpath(path, directory)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
        for name in dirs:
            files[os.path.relpath(os.path.join(root, name), directory) + "/"] = "dir"
    return files, sorted(os.listdir(os.path.dirname(directory)))


@pytest.fixture
def earlier(tmp_path):
    """(source text, --out holding a complete earlier data set plus a file of the user's, its snapshot)."""
    src = tmp_path / "letters.txt"
    src.write_text((LETTERS + " some words, and more words\n") * 60)
    out = tmp_path / "out"
    run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 340,
                "--shard-tokens", 500, "--workers", 1)
    (out / "notes.txt").write_text("the user's file\n")
    assert (out / "meta.json").exists() and (out / "train_000001.bin").exists()
    return src, out, snapshot(str(out))


def fails_keeping(earlier, *args, expect, code=1, force=True):
    """The failure of a run over the earlier data set with args: one error line with expect, --out unchanged.
    force: with --force, so that a failure past the refusal of another vocabulary is what is tested."""
    src, out, before = earlier
    proc = run_prepare("--dataset", "text", "--source", src, "--out", out, "--workers", 1, *args,
                       *(["--force"] if force else []), check=False)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], proc.stderr
    assert snapshot(str(out)) == before
    return lines[0]


def test_sp_vocab_below_the_fixed_ids_keeps_earlier_data_set(earlier):
    line = fails_keeping(earlier, "--tokenizer", "sp", "--vocab-size", 259, expect="--vocab-size 259 is too small")
    assert "259 fixed ids" in line


def test_sp_vocab_too_small_for_the_text_names_the_size_needed_and_keeps_earlier_data_set(earlier):
    line = fails_keeping(earlier, "--tokenizer", "sp", "--vocab-size", 299, expect="--vocab-size 299 is too small")
    # the source has the 52 letters, space and ',': 259 + 54 ids
    assert "at least 313" in line and "try a larger --vocab-size" in line
    src, out, _ = earlier
    run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 313,
                "--workers", 1, "--force")  # the size named works


def test_sentencepiece_failure_keeps_earlier_data_set(earlier):
    fails_keeping(earlier, "--tokenizer", "sp", "--vocab-size", 1000000, expect="Vocabulary size too high")


def test_source_failing_mid_run_keeps_earlier_data_set(earlier, tmp_path_factory):
    """Two files, the validation one not UTF-8: it is read after SentencePiece was trained on the other one and
    tokenizer.model, tokenizer.bin and the training shards were written (--force: other source files than the
    earlier data set's, refused before anything is read without it)."""
    import sources
    d = tmp_path_factory.mktemp("two")
    paths = [str(d / "a.txt"), str(d / "b.txt")]
    val = sources.split_by_file(paths, ["a.txt", "b.txt"], False, 0.05, 1337)["val"][0].path
    for p in paths:
        with open(p, "wb") as f:
            good = (LETTERS + " some words, and more words\n").encode() * 60
            f.write(b"caf\xe9 latin-1\n" * 300 if p == val else good)
    _, out, before = earlier
    proc = run_prepare("--dataset", "text", "--source", d, "--out", out, "--tokenizer", "sp", "--vocab-size", 340,
                       "--shard-tokens", 100, "--workers", 1, "--force", check=False)
    assert proc.returncode == 1 and f"{os.path.basename(val)} is not UTF-8" in proc.stderr, proc.stderr
    assert "SentencePiece BPE trained" in proc.stdout
    assert snapshot(str(out)) == before


def run_in_process(monkeypatch, earlier, fail_on):
    """data/prepare.py's main() in this process (--workers 1: no worker processes) with ShardWriter._write
    raising fail_on() at the third shard, after the tokenizer files and two shards were written."""
    import prepare
    import shards
    src, out, _ = earlier
    real_write, calls = shards.ShardWriter._write, []

    def write(self, tokens):
        calls.append(self.split)
        real_write(self, tokens)
        if len(calls) == 3:
            raise fail_on()
    monkeypatch.setattr(shards.ShardWriter, "_write", write)
    return prepare.main(["--dataset", "text", "--source", str(src), "--out", str(out), "--tokenizer", "sp",
                         "--vocab-size", "320", "--shard-tokens", "300", "--workers", "1", "--force"]), calls


def test_disk_full_mid_write_keeps_earlier_data_set(monkeypatch, earlier, capsys):
    import errno
    rc, calls = run_in_process(monkeypatch, earlier, lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert rc == 1 and len(calls) == 3
    assert "error: No space left on device" in capsys.readouterr().err
    assert snapshot(str(earlier[1])) == earlier[2]


def test_unexpected_exception_mid_write_keeps_earlier_data_set(monkeypatch, earlier):
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C, or a bug: not reported as a one-line error, but cleaned up
        run_in_process(monkeypatch, earlier, KeyboardInterrupt)
    assert snapshot(str(earlier[1])) == earlier[2]


def test_failure_while_moving_in_restores_earlier_data_set(monkeypatch, earlier, capsys):
    """The new meta.json (moved in last) cannot be moved: the new files already moved in are removed and the
    earlier ones moved back."""
    import prepare
    src, out, before = earlier
    real_rename = os.rename

    def rename(a, b):
        if os.path.basename(str(a)) == "meta.json" and os.path.dirname(str(b)) == str(out):
            if ".earlier" not in str(a):
                raise OSError(5, os.strerror(5), str(b))
        return real_rename(a, b)
    monkeypatch.setattr(os, "rename", rename)
    rc = prepare.main(["--dataset", "text", "--source", str(src), "--out", str(out), "--tokenizer", "sp",
                       "--vocab-size", "320", "--workers", "1", "--force"])
    assert rc == 1 and "Input/output error" in capsys.readouterr().err
    assert snapshot(str(out)) == before


def test_success_replaces_only_the_scripts_files(earlier):
    """A new run into --out: earlier shards that the new data set does not have are gone, the user's file stays,
    nothing is left beside --out, and the files equal those of a run into a new directory (--force: other
    --shard-tokens, refused without it)."""
    src, out, (files, beside) = earlier
    assert "train_000003.bin" in files
    run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 340,
                "--workers", 1, "--force")
    fresh = out.parent / "fresh"
    run_prepare("--dataset", "text", "--source", src, "--out", fresh, "--tokenizer", "sp", "--vocab-size", 340,
                "--workers", 1)
    now, now_beside = snapshot(str(out))
    assert now.pop("notes.txt") == files["notes.txt"]
    assert sorted(now) == ["meta.json", "tokenizer.bin", "tokenizer.model", "train_000000.bin", "val_000000.bin"]
    fresh_files = snapshot(str(fresh))[0]
    assert now.pop("meta.json") and fresh_files.pop("meta.json") and now == fresh_files  # meta.json names --out
    meta, fresh_meta = (json.loads((d / "meta.json").read_text()) for d in (out, fresh))
    assert meta["args"].pop("out") == str(out) and fresh_meta["args"].pop("out") == str(fresh) and meta == fresh_meta
    assert now_beside == sorted(beside + ["fresh"])


def test_a_data_set_of_another_vocabulary_is_kept_without_force(earlier):
    """A new-user trial prepared PG-19 again at another --vocab-size into the --out its runs used: it was replaced
    with a note, and every run trained on it refused its data from then on. Another tokenizer or vocabulary is
    refused, with one error line naming both and the fix, before anything is written (--out byte for byte as it
    was, nothing beside it); the same one is prepared again as before; --force replaces it, with one note."""
    src, out, before = earlier
    for args, new in [(("--tokenizer", "sp", "--vocab-size", 330), "sp (vocabulary 330)"),
                      (("--tokenizer", "gpt2", "--gpt2-bpe", "/nonexistent"), "gpt2 (vocabulary 50257)")]:
        line = fails_keeping(earlier, *args, expect=f"--out {out} holds a data set of tokenizer sp (vocabulary 340",
                             force=False)
        assert f"this one is {new}" in line and "prepare into another --out, or give --force to replace it" in line
    proc = run_prepare("--dataset", "synthetic", "--out", out, "--syn-length", 4000, "--syn-doc-len", 1000, check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "this one is synthetic (vocabulary 257)" in proc.stderr
    assert snapshot(str(out)) == before

    same = run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 340,
                       "--shard-tokens", 500, "--workers", 1)
    assert "note:" not in same.stderr and "error:" not in same.stderr, same.stderr
    # the same kind and vocabulary from other text (the source edited): refused as other text before anything is
    # read; --force replaces it, with one note
    kept = snapshot(str(out))
    line = LETTERS + " other text, other pieces\n"
    src.write_text(line * 30 + "0123456789\n" * 3 + line * 30)  # digits in the middle: below
    proc = run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 340,
                       "--shard-tokens", 500, "--workers", 1, check=False)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"error: --out {out} holds a data set of text from 1 source file (letters.txt, its meta.json says), and this "
        "one is text from 1 source file (letters.txt; 1 with other bytes, e.g. letters.txt): every run trained on "
        "that data would read other text; prepare into another --out, or give --force to replace it"], proc.stderr
    assert snapshot(str(out)) == kept
    proc = run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 340,
                       "--workers", 1, "--force")
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith(("note:", "error:"))] == [
        f"note: --force: --out {out} held a data set of text from 1 source file (letters.txt), now replaced by text "
        "from 1 source file (letters.txt; 1 with other bytes, e.g. letters.txt): runs trained on the earlier one "
        "read other text now"], proc.stderr
    # the same source split otherwise (the digits are validation only): another split, refused before anything is
    # read; as made (the check of the settings bypassed), another SentencePiece model, which the runs refuse too
    kept = snapshot(str(out))
    proc = run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 340,
                       "--workers", 1, "--val-fraction", 0.6, check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"error: --out {out} holds a data set prepared with --val-fraction 0.05 (its meta.json says), and this one "
        "has --val-fraction 0.6: its shards would differ from those every run trained on that data read; prepare "
        "into another --out, or give --force to replace it"), proc.stderr
    assert "SentencePiece" not in proc.stdout and snapshot(str(out)) == kept
    meta = json.loads((out / "meta.json").read_text())
    meta["args"]["val_fraction"] = 0.6  # as if prepared with 0.6 (the check before tokenizing passes)
    (out / "meta.json").write_text(json.dumps(meta))
    kept = snapshot(str(out))
    proc = run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 340,
                       "--workers", 1, "--val-fraction", 0.6, check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"error: --out {out} holds a data set of the same tokenizer kind and vocabulary, but this one's "
        "tokenizer.model differs (a SentencePiece model trained on other text): every run trained on that data would "
        "refuse it; prepare into another --out, or give --force to replace it"), proc.stderr
    assert snapshot(str(out)) == kept
    other = run_prepare("--dataset", "text", "--source", src, "--out", out, "--tokenizer", "sp", "--vocab-size", 330,
                        "--workers", 1, "--force")
    notes = [ln for ln in other.stderr.splitlines() if ln.startswith("note:")]
    assert notes == [f"note: --force: --out {out} held a data set of tokenizer sp (vocabulary 340), now replaced by sp "
                     "(vocabulary 330): runs trained on the earlier one refuse this one (their data identity)"], \
        other.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["vocab_size"] == 330 and "force" not in meta["args"]
    assert (out / "notes.txt").read_text() == "the user's file\n"


def test_a_data_set_made_from_other_text_is_kept_without_force(tmp_path, shared_data, gpt2_dir):
    """review: tiny Shakespeare prepared into an --out (and a run trained on it), then `--dataset text --source
    pg1001.txt pg1002.txt` into the same --out, exited 0 and replaced the shards: --force was asked only for
    another tokenizer or vocabulary. A data set made from other text (another --dataset, or other source files:
    names, sizes, sha256 as meta.json records them) is refused with one line naming both and the fix, before
    anything is read or written; the same preparation runs again as before (the same file from another directory
    too); --force replaces it, with one note."""
    pg, ts = os.path.join(shared_data, "pg19"), os.path.join(shared_data, "tinyshakespeare", "input.txt")
    out = tmp_path / "d"
    gpt2 = ["--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir, "--workers", 1]
    run_prepare("--dataset", "tinyshakespeare", "--source", ts, "--out", out, *gpt2)
    (out / "notes.txt").write_text("the user's file\n")
    books = tmp_path / "books"
    books.mkdir()
    for name in ("pg1001.txt", "pg1002.txt"):
        os.symlink(os.path.join(pg, name), books / name)
    before = snapshot(str(out))
    why = ": every run trained on that data would read other text; prepare into another --out, or give --force to " \
          "replace it"
    held = f"error: --out {out} holds a data set of tinyshakespeare from 1 source file (input.txt, its meta.json says)"
    for args, this in [(["--dataset", "text", "--source", books / "pg1001.txt", books / "pg1002.txt"], "text"),
                       (["--dataset", "pg19", "--source", books], "pg19")]:
        proc = run_prepare(*args, "--out", out, *gpt2, check=False)
        assert proc.returncode == 1 and proc.stderr.splitlines() == [
            f"{held}, and this one is {this} from 2 source files (pg1001.txt, pg1002.txt){why}"], proc.stderr
        assert proc.stdout == "" and snapshot(str(out)) == before

    # the same preparation again: as before, the same files byte for byte; so from a copy of input.txt elsewhere
    # (meta.json's args name that --source)
    proc = run_prepare("--dataset", "tinyshakespeare", "--source", ts, "--out", out, *gpt2)
    assert "note:" not in proc.stderr and "error:" not in proc.stderr and snapshot(str(out)) == before, proc.stderr
    copy = tmp_path / "copy" / "input.txt"
    copy.parent.mkdir()
    copy.write_bytes(open(ts, "rb").read())
    proc = run_prepare("--dataset", "tinyshakespeare", "--source", copy, "--out", out, *gpt2)
    assert "note:" not in proc.stderr and "error:" not in proc.stderr, proc.stderr
    files, was = snapshot(str(out))[0], dict(before[0])
    assert files.pop("meta.json") != was.pop("meta.json") and files == was
    meta = json.loads((out / "meta.json").read_text())
    assert meta["args"]["source"] == [str(copy)] and [r["file"] for r in meta["sources"]] == ["input.txt"]

    proc = run_prepare("--dataset", "text", "--source", books / "pg1001.txt", books / "pg1002.txt", "--out", out,
                       *gpt2, "--force")
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith(("note:", "error:"))] == [
        f"note: --force: --out {out} held a data set of tinyshakespeare from 1 source file (input.txt), now replaced "
        "by text from 2 source files (pg1001.txt, pg1002.txt): runs trained on the earlier one read other text now"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["dataset"] == "text" and [r["file"] for r in meta["sources"]] == ["pg1001.txt", "pg1002.txt"]
    assert (out / "notes.txt").read_text() == "the user's file\n"

    # the same --dataset from other files: a file added, a file missing; the same files elsewhere are the same text
    before = snapshot(str(out))
    os.symlink(os.path.join(pg, "pg1003.txt"), books / "pg1003.txt")
    held = (f"error: --out {out} holds a data set of text from 2 source files (pg1001.txt, pg1002.txt, its meta.json "
            "says), and this one is text from ")
    for names, this in [(["pg1001.txt", "pg1002.txt", "pg1003.txt"], "3 source files (pg1001.txt, pg1002.txt, "
                         "pg1003.txt; 1 not in that data set, e.g. pg1003.txt)"),
                        (["pg1001.txt", "pg1003.txt"], "2 source files (pg1001.txt, pg1003.txt; 1 not in that data "
                         "set, e.g. pg1003.txt; 1 of its missing, e.g. pg1002.txt)")]:
        proc = run_prepare("--dataset", "text", "--source", *[books / n for n in names], "--out", out, *gpt2,
                           check=False)
        assert proc.returncode == 1 and proc.stderr.splitlines() == [held + this + why], proc.stderr
        assert snapshot(str(out)) == before
    (tmp_path / "again").mkdir()
    for name in ("pg1001.txt", "pg1002.txt"):
        (tmp_path / "again" / name).write_bytes(open(os.path.join(pg, name), "rb").read())
    proc = run_prepare("--dataset", "text", "--source", tmp_path / "again" / "pg1002.txt",
                       tmp_path / "again" / "pg1001.txt", "--out", out, *gpt2)
    assert "note:" not in proc.stderr and "error:" not in proc.stderr, proc.stderr
    files, was = snapshot(str(out))[0], dict(before[0])
    assert files.pop("meta.json") != was.pop("meta.json") and files == was  # the same shards: meta.json's args differ


def test_the_same_files_under_other_names_are_the_same_text(tmp_path, gpt2_dir):
    """A review: a text data set prepared from a directory, then from the same files given by name or from a copy
    of the directory, was refused as "other text" (meta.json's names differ: src/a.txt, a.txt, src2/a.txt). The
    files are matched by content first: the same files are the same text, replaced as before when the shards come
    out the same; names that order or split them otherwise are refused once the shards are made (--out as it
    was), and --force replaces the data set with one note."""
    src = tmp_path / "src"
    src.mkdir()
    for i, name in enumerate("abcdef"):
        (src / f"{name}.txt").write_text(f"text number {i}, " * (50 + 10 * i) + "\n")
    out = tmp_path / "out"
    gpt2 = ["--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir, "--workers", 1, "--val-fraction", 0.2]
    run_prepare("--dataset", "text", "--source", src, "--out", out, *gpt2)
    before = snapshot(str(out))
    shutil.copytree(src, tmp_path / "src2")
    for sources in ([src / f"{n}.txt" for n in "abcdef"], [tmp_path / "src2"]):
        proc = run_prepare("--dataset", "text", "--source", *sources, "--out", out, *gpt2)
        assert "note:" not in proc.stderr and "error:" not in proc.stderr, proc.stderr
        files, was = snapshot(str(out))[0], dict(before[0])
        assert files.pop("meta.json") != was.pop("meta.json") and files == was  # the same shards
    # the same files renamed in reverse order: the training shard holds them in another order
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    for old, new in zip("abcdef", "zyxwvu"):
        (renamed / f"{new}.txt").write_bytes((src / f"{old}.txt").read_bytes())
    before = snapshot(str(out))
    proc = run_prepare("--dataset", "text", "--source", renamed, "--out", out, *gpt2, check=False)
    assert proc.returncode == 1 and [ln for ln in proc.stderr.splitlines() if ln.startswith(("note:", "error:"))] == [
        f"error: --out {out} holds a data set of the same text, tokenizer and settings, but this one's "
        "train_000000.bin differs (the source files under other names or paths order and split them otherwise): "
        "every run trained on that data would read other shards; prepare into another --out, or give --force to "
        "replace it"], proc.stderr
    assert snapshot(str(out)) == before
    proc = run_prepare("--dataset", "text", "--source", renamed, "--out", out, *gpt2, "--force")
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith(("note:", "error:"))] == [
        f"note: --force: --out {out} held a data set now replaced by one whose shards differ: runs trained on the "
        "earlier one read other shards now"], proc.stderr
    assert [r["file"] for r in json.loads((out / "meta.json").read_text())["sources"]] == [
        f"renamed/{n}.txt" for n in "uvwxyz"]


@pytest.mark.parametrize("dataset", ["text", "synthetic"])
def test_a_data_set_split_otherwise_is_kept_without_force(tmp_path, gpt2_dir, dataset):
    """A review: the same text prepared again into its --out with another --val-fraction replaced the data set
    without a word, although the new split changes the shards every run trained on it reads (which is why other
    text is refused). A setting that changes the shards (--val-fraction, --seed, --shard-tokens, the synthetic
    language's) is refused with one line naming the old and the new value, --out as it was; the split's settings
    before anything is tokenized; --force replaces the data set, with one note."""
    out = tmp_path / "out"
    if dataset == "text":
        src = tmp_path / "src"
        src.mkdir()
        for i in range(8):
            (src / f"f{i}.txt").write_text(f"words of file {i}. " * 40 + "\n")
        base = ["--dataset", "text", "--source", src, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir]
        others = [(["--val-fraction", 0.5], "--val-fraction 0.05", "--val-fraction 0.5"),
                  (["--seed", 7], "--seed 1337", "--seed 7"),
                  (["--seed", 7, "--val-fraction", 0.5], "--val-fraction 0.05 and --seed 1337",
                   "--val-fraction 0.5 and --seed 7"),
                  (["--shard-tokens", 300], "--shard-tokens 100000000", "--shard-tokens 300")]
    else:
        base = ["--dataset", "synthetic", "--syn-vocab", 20, "--syn-doc-len", 500, "--syn-length", 5000]
        others = [(["--val-fraction", 0.3], "--val-fraction 0.05", "--val-fraction 0.3"),
                  (["--syn-order", 2], "--syn-order 3", "--syn-order 2"),
                  (["--seed", 7], "--seed 1337", "--seed 7")]
    run_prepare(*base, "--out", out, "--workers", 1)
    (out / "notes.txt").write_text("the user's file\n")
    before = snapshot(str(out))
    for args, was, now in others:
        proc = run_prepare(*base, *args, "--out", out, "--workers", 1, check=False)
        assert proc.returncode == 1 and proc.stderr.splitlines()[-1:] == [
            f"error: --out {out} holds a data set prepared with {was} (its meta.json says), and this one has {now}: "
            "its shards would differ from those every run trained on that data read; prepare into another --out, or "
            "give --force to replace it"], proc.stderr
        assert [ln for ln in proc.stderr.splitlines() if ln.startswith(("note:", "error:"))] == \
            proc.stderr.splitlines()[-1:] and snapshot(str(out)) == before
        if "--shard-tokens" not in was:  # the split's settings: refused before anything is tokenized
            assert "tokenized" not in proc.stdout and "documents" not in proc.stdout, proc.stdout
    # the same settings again: replaced as before, the same files
    proc = run_prepare(*base, "--out", out, "--workers", 1)
    assert "note:" not in proc.stderr and "error:" not in proc.stderr, proc.stderr
    assert snapshot(str(out))[0]["train_000000.bin"] == before[0]["train_000000.bin"]
    args, was, now = others[0]
    proc = run_prepare(*base, *args, "--out", out, "--workers", 1, "--force")
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith(("note:", "error:"))] == [
        f"note: --force: --out {out} held a data set prepared with {was}, now replaced by one with {now}: runs "
        "trained on the earlier one read other shards now"], proc.stderr
    assert json.loads((out / "meta.json").read_text())["args"]["val_fraction"] == args[1]
    assert (out / "notes.txt").read_text() == "the user's file\n"


def test_source_files_are_hashed_once_per_run(monkeypatch, tmp_path, gpt2_dir):
    """prepare_text hashes each source file once (the corpus check against --out, then meta.json), in a cache of
    its own: a second run hashes them again (no state kept between runs)."""
    import prepare
    import text_tokenizers
    (tmp_path / "a.txt").write_text("alpha beta gamma delta. " * 200)
    (tmp_path / "b.txt").write_text("one two three four five. " * 200)
    out, gpt2 = tmp_path / "d", ["--tokenizer", "gpt2", "--gpt2-bpe", str(gpt2_dir), "--workers", "1"]
    argv = ["--dataset", "text", "--source", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--out", str(out),
            *gpt2]
    assert prepare.main(argv) == 0
    hashed = []
    real = text_tokenizers.sha256_file
    monkeypatch.setattr(text_tokenizers, "sha256_file", lambda p: hashed.append(os.path.basename(p)) or real(p))
    for _ in range(2):  # --out holds the same corpus: checked (hashed), then meta.json (from the cache)
        hashed.clear()
        assert prepare.main(argv) == 0
        assert sorted(h for h in hashed if h.endswith(".txt")) == ["a.txt", "b.txt"]


def test_other_text_is_checked_again_as_made(monkeypatch, tmp_path, gpt2_dir, capsys):
    """The data set as made is checked again before it is moved in (as another tokenizer is): sources that the
    check before tokenizing took for --out's (here: made to) are refused then, --out byte for byte as it was."""
    import prepare
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text(f"text {name}, " * 200 + "\n")
    out = tmp_path / "out"
    gpt2 = ["--tokenizer", "gpt2", "--gpt2-bpe", str(gpt2_dir), "--workers", "1"]
    run_prepare("--dataset", "text", "--source", tmp_path / "a.txt", "--out", out, *gpt2)
    before = snapshot(str(out))
    monkeypatch.setattr(prepare, "planned_files",
                        lambda splits, digests: prepare.recorded_files(prepare._meta_of(str(out))))
    assert prepare.main(["--dataset", "text", "--source", str(tmp_path / "b.txt"), "--out", str(out), *gpt2]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --out {out} holds a data set of text from 1 source file (a.txt, its meta.json says), and this one is "
        "text from 1 source file (b.txt; 1 not in that data set, e.g. b.txt; 1 of its missing, e.g. a.txt): every run "
        "trained on that data would read other text; prepare into another --out, or give --force to replace it")
    assert snapshot(str(out)) == before


def test_a_training_run_directory_is_refused_as_out(tmp_path):
    """--out naming a run's directory (the trainer's -o) would put shards among its checkpoints: refused, with
    --force too, nothing written."""
    for name, content in [("config.json", '{"model": {}, "train": {"seed": 1}}'), ("DONE_00000020", "step 20"),
                          ("model_00000020.bin", "x"), ("state_00000020_00000.bin", "x")]:
        run_dir = tmp_path / name.split(".")[0]
        run_dir.mkdir()
        (run_dir / name).write_text(content)
        for force in ([], ["--force"]):
            proc = run_prepare("--dataset", "synthetic", "--out", run_dir, "--syn-length", 4000, "--syn-doc-len", 1000,
                               *force, check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1, proc.stderr
            assert lines[0] == (f"error: --out {run_dir} is a training run's directory (it holds {name}), not a data "
                                "set's; prepare into a directory of its own (e.g. data/shards/NAME)"), lines[0]
            assert sorted(os.listdir(run_dir)) == [name] and sorted(os.listdir(tmp_path)) == sorted(
                p.name for p in tmp_path.iterdir())
    (tmp_path / "cfg").mkdir()  # a config.json that is not a run's (no "train" object): not refused
    (tmp_path / "cfg" / "config.json").write_text('{"note": "mine"}')
    run_prepare("--dataset", "synthetic", "--out", tmp_path / "cfg", "--syn-length", 4000, "--syn-doc-len", 1000)


def test_misspelled_flag_is_named(tmp_path):
    """argparse reports missing required flags before unknown ones: --datset must still be named."""
    for args in (["--datset", "text", "--out", tmp_path / "out"],
                 ["--datset", "text", "--source", tmp_path, "--out", tmp_path / "out", "--tokenizer", "sp"]):
        proc = run_prepare(*args, check=False)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: unrecognized arguments: --datset text"), proc.stderr
    assert not (tmp_path / "out").exists()


def test_parent_of_out_not_writable_builds_inside_out(monkeypatch, earlier):
    """The work directory goes inside an existing --out when its parent refuses it (and is removed after)."""
    import prepare
    _, out, (files, beside) = earlier
    real_mkdir = os.mkdir

    def mkdir(path, *a, **k):
        if os.path.dirname(str(path)) == str(out.parent):
            raise PermissionError(13, os.strerror(13), str(path))
        return real_mkdir(path, *a, **k)
    monkeypatch.setattr(os, "mkdir", mkdir)
    assert prepare.main(["--dataset", "synthetic", "--syn-length", "4000", "--syn-doc-len", "1000", "--out", str(out),
                         "--workers", "1", "--force"]) == 0  # (--force: it replaces a data set of SentencePiece)
    now, now_beside = snapshot(str(out))
    assert sorted(now) == ["meta.json", "notes.txt", "tokenizer.bin", "train_000000.bin", "val_000000.bin"]
    assert now_beside == beside


def test_source_file_given_twice(tmp_path):
    """A file named alone and again inside a directory given with it (or twice, or through a symlink) would
    put the same text in training and validation: refused, naming the file and both ways it was given."""
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "train.txt").write_text("some training text\n" * 50)
    (d / "valid.txt").write_text("other validation text\n" * 50)
    line = fails(tmp_path, "--dataset", "text", "--source", d, d / "valid.txt", "--tokenizer", "sp",
                 "--vocab-size", 300, expect=f"{d / 'valid.txt'} is given twice")
    assert "give each file once" in line
    (tmp_path / "link.txt").symlink_to(d / "train.txt")
    fails(tmp_path, "--dataset", "text", "--source", d / "train.txt", tmp_path / "link.txt", "--tokenizer", "sp",
          "--vocab-size", 300, expect=f"{d / 'train.txt'} is given twice")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_stopped_by_a_signal_leaves_no_work_directory(tmp_path, sig):
    """SIGTERM (a job's time limit, `kill`) or SIGINT while the data set is being built: the hidden work
    directory beside --out is removed (it once stayed, 58 MB, for SIGTERM), --out is not created, and one
    line says the preparation was stopped; the exit status is 128 + the signal's number."""
    import signal
    import subprocess
    import sys
    import time
    from datatest_util import PREPARE
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, PREPARE, "--dataset", "synthetic", "--out", str(out), "--workers", "1",
                             "--syn-length", "5000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not [n for n in os.listdir(tmp_path) if ".prepare-" in n] and time.time() < deadline:
            time.sleep(0.05)
        assert [n for n in os.listdir(tmp_path) if ".prepare-" in n], "no work directory appeared"
        time.sleep(0.5)  # generating
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + getattr(signal, sig), err
    assert err.strip().splitlines() == [f"error: stopped by {sig} before the data set was complete; {out} was "
                                        "left as it was (not created)"], err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


@pytest.mark.parametrize("flag", [["--vocab_size", "10000"], ["--vocab_size=10000"]])
def test_underscore_flag_gets_its_dash_spelling(tmp_path, flag):
    """nanoGPT / HF spell flags with underscores: --vocab_size names --vocab-size, in the one error line."""
    proc = run_prepare("--dataset", "pg19", "--source", tmp_path, "--out", tmp_path / "out", "--tokenizer", "sp",
                       *flag, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == (f"error: unrecognized arguments: {' '.join(flag)} (did you mean --vocab-size?); "
                        "see python3 data/prepare.py --help"), lines[0]
    assert not (tmp_path / "out").exists()


def test_seed_where_one_file_is_split_by_characters_with_gpt2(tmp_path, shared_data, gpt2_dir):
    """trial 9: --seed picks the by-file split and SentencePiece's sample; one file split by characters with
    --tokenizer gpt2 uses neither, and --seed was read and ignored: refused with one line. With sp (its sample)
    or several files (the split) it is taken."""
    one = tmp_path / "one.txt"
    one.write_text("a line of text for the split\n" * 200)
    shakespeare = os.path.join(shared_data, "tinyshakespeare", "input.txt")
    for dataset, source in (("text", one), ("tinyshakespeare", shakespeare)):
        fails(tmp_path, "--dataset", dataset, "--source", source, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
              "--seed", 5, expect="--seed picks the by-file split and SentencePiece's training sample, and this run "
              "splits one file by characters with --tokenizer gpt2, so it has no effect: drop --seed")
    run_prepare("--dataset", "text", "--source", one, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
                "--out", tmp_path / "noseed")
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.txt", "b.txt"):
        (two / name).write_text(f"the text of file {name}\n" * 100)
    run_prepare("--dataset", "text", "--source", two, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir, "--seed", 5,
                "--out", tmp_path / "seeded")
    meta = json.loads((tmp_path / "seeded" / "meta.json").read_text())
    assert meta["args"]["seed"] == 5 and "seed_given" not in meta["args"], meta["args"]


def test_another_file_as_tinyshakespeare_is_refused(tmp_path, shared_data, gpt2_dir):
    """review: --dataset tinyshakespeare of any one file (WikiText's valid.txt) labelled its shards
    tinyshakespeare. The one file of that name is checked by its sha256 (../shared/data/README.md); another is
    refused before anything is written, naming --dataset text."""
    other = os.path.join(shared_data, "wikitext2", "valid.txt")
    if not os.path.isfile(other):
        other = tmp_path / "other.txt"
        other.write_text("a line of text for the split\n" * 200)
    size = os.path.getsize(other)
    fails(tmp_path, "--dataset", "tinyshakespeare", "--source", other, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
          expect=f"--dataset tinyshakespeare: {other} is not tiny Shakespeare's input.txt ({size:,} bytes, its "
          "text's sha256 ")
    assert not (tmp_path / "out").exists()
    # a CRLF copy (with a byte-order mark) is the same text as tokenized: taken, the same shards
    crlf = tmp_path / "input_crlf.txt"
    original = open(os.path.join(shared_data, "tinyshakespeare", "input.txt"), "rb").read()
    crlf.write_bytes(b"\xef\xbb\xbf" + original.replace(b"\n", b"\r\n"))
    for name, src in (("a", crlf), ("b", os.path.join(shared_data, "tinyshakespeare", "input.txt"))):
        run_prepare("--dataset", "tinyshakespeare", "--source", src, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
                    "--out", tmp_path / name)
    for shard in ("train_000000.bin", "val_000000.bin"):
        assert (tmp_path / "a" / shard).read_bytes() == (tmp_path / "b" / shard).read_bytes(), shard


def test_files_of_a_source_directory_not_named_txt_are_noted(tmp_path, gpt2_dir):
    """trial 9: --dataset text DIR reads DIR's *.txt files only, and left out e.g. NOTES.TXT without a word: one
    note names how many files are not read and one of them."""
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    for name in ("a.txt", "b.txt"):
        (d / name).write_text(f"the text of file {name}\n" * 100)
    (d / "NOTES.TXT").write_text("upper-case suffix\n")
    (d / "sub" / "c.md").write_text("markdown\n")
    (d / ".hidden").write_text("hidden files are not data\n")
    proc = run_prepare("--dataset", "text", "--source", d, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
                       "--out", tmp_path / "out")
    assert (f"note: --source: 2 files in the directory not named *.txt are not read (e.g. {d / 'NOTES.TXT'}); give "
            "such a file by name (or rename it *.txt) to include it") in proc.stderr.splitlines(), proc.stderr
    (d / "NOTES.TXT").unlink()
    (d / "sub" / "c.md").unlink()
    proc = run_prepare("--dataset", "text", "--source", d, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
                       "--out", tmp_path / "out2")
    assert "not named *.txt" not in proc.stderr, proc.stderr


def test_pg19_metadata_beside_the_books_is_not_noted(tmp_path, gpt2_dir):
    """review: the shipped PG-19 directory holds books.tsv and a LICENSE beside the books; the not-*.txt note told
    users to add them to the training text. Only --dataset text notes such files."""
    d = tmp_path / "pg"
    d.mkdir()
    for i in range(3):
        (d / f"book{i}.txt").write_text(f"*** START OF THIS PROJECT GUTENBERG EBOOK {i} ***\n" +
                                        f"the text of book {i}\n" * 100)
    (d / "books.tsv").write_text("id\ttitle\n")
    (d / "LICENSE.pg19-metadata").write_text("licence\n")
    proc = run_prepare("--dataset", "pg19", "--source", d, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
                       "--out", tmp_path / "out")
    assert "not named *.txt" not in proc.stderr, proc.stderr
