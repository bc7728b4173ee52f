"""What a run reads is the data it means (llmc/io/data_identity.h, llmc/io/data_roles.h, llmc/app/run_data.h;
docs/training.md "Data sets tokenized alike", "Data roles", "A run's data identity"):
- training and validation data tokenized differently are refused: -j shards of a SentencePiece data set with
  -i shards of GPT-2 BPE, two SentencePiece data sets of the same vocabulary but other models, and a plain
  vocabulary mismatch; -j shards without meta.json or tokenizer.bin train with one note on stderr;
- every shard has a role (meta.json "shards", else its name): -i of validation shards, -j of training shards,
  a file read by both and a shard meta.json does not list are refused;
- a run records its data identity in config.json "data", and --eval-only, generate_gpt2_ls, -y 1, --fork-from
  and scripts/export_hf.py refuse data prepared again with another tokenizer; a run recorded without it still
  reads, with one note; generate_gpt2_ls refuses a --tokenizer that is not the run's.

The data sets are made with data/prepare.py from 60 kB of tiny Shakespeare (SentencePiece with a
400-piece vocabulary trains in about a second; GPT-2 BPE from the shared encoder.json/vocab.bpe).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from run_helpers import REPO, SHARED, TINY, flip_last_token_bit, run, write_shard

TINY_RUN = TINY + ["-x", 1, "-u", 1, "-v", 0, "-s", 0]  # -u 1: no warmup note (a one-step run)


# the line of what --eval-only took from the checkpoint's run (-j, -t, -b), a note of its own
TAKEN = "note: --eval-only:"

def prepare(out, text, tokenizer, *extra):
    src = out.parent / (out.name + ".txt")
    src.write_text(text)
    subprocess.run([sys.executable, "data/prepare.py", "--dataset", "text", "--source", str(src), "--out", str(out),
                    "--tokenizer", tokenizer, "--workers", "1", *map(str, extra)], cwd=REPO, check=True,
                   capture_output=True)
    return out


@pytest.fixture(scope="module")
def data_sets(tmp_path_factory):
    """{"gpt2", "sp", "sp_other"}: directories made by data/prepare.py (sp and sp_other: vocabulary 400 each,
    SentencePiece trained on different halves of the text)."""
    text = (SHARED / "tinyshakespeare" / "input.txt").read_text()[:120_000]
    d = tmp_path_factory.mktemp("identity")
    return {"gpt2": prepare(d / "gpt2", text[:60_000], "gpt2", "--gpt2-bpe", SHARED / "gpt2"),
            "sp": prepare(d / "sp", text[:60_000], "sp", "--vocab-size", 400),
            "sp_other": prepare(d / "sp_other", text[60_000:], "sp", "--vocab-size", 400)}


def refused(args, *expect):
    p = run(args, check=False)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    for e in expect:
        assert e in lines[0], lines[0]
    return lines[0]


def test_sentencepiece_validation_with_gpt2_training_is_refused(data_sets, tmp_path):
    gpt2, sp = data_sets["gpt2"], data_sets["sp"]
    line = refused(["-i", f"{gpt2}/train_*.bin", "-j", f"{sp}/val_*.bin", "-o", tmp_path / "run"] + TINY_RUN,
                   f"-j '{sp}/val_*.bin'", f"-i '{gpt2}/train_*.bin'", "tokenizer sp, vocabulary 400",
                   "tokenizer gpt2, vocabulary 50257", "the tokenizer differs")
    assert "data/prepare.py" in line
    assert not (tmp_path / "run").exists()  # refused before anything is written
    refused(["-i", f"{sp}/train_*.bin", "-j", f"{gpt2}/val_*.bin"] + TINY_RUN, "the tokenizer differs")


def test_same_vocabulary_other_sentencepiece_model_is_refused(data_sets):
    sp, other = data_sets["sp"], data_sets["sp_other"]
    refused(["-i", f"{sp}/train_*.bin", "-j", f"{other}/val_*.bin"] + TINY_RUN, "tokenizer.bin differs",
            f"{other}/meta.json", f"{sp}/meta.json")


def test_other_vocabulary_without_tokenizer_names_is_refused(byte_data, data_sets):
    """byte_data's meta.json names no tokenizer: the vocabularies (256 vs 400) still differ."""
    refused(["-i", f"{byte_data}/train_*.bin", "-j", f"{data_sets['sp']}/val_*.bin"] + TINY_RUN,
            "the vocabulary differs", "vocabulary 256", "vocabulary 400")


def test_same_tokenizer_in_another_directory_trains(data_sets, tmp_path):
    sp = data_sets["sp"]
    copy = tmp_path / "sp_copy"
    shutil.copytree(sp, copy)
    p = run(["-i", f"{sp}/train_*.bin", "-j", f"{copy}/val_*.bin", "-o", tmp_path / "run"] + TINY_RUN)
    assert "note:" not in p.stderr and "error" not in p.stderr  # a copy (the same meta.json): one data set
    # another data set tokenized alike (its meta.json differs): trains, with the note that validation is not
    # the training data's own split (trial 8 F3)
    meta = json.loads((copy / "meta.json").read_text())
    meta["dataset"] = "other"
    (copy / "meta.json").write_text(json.dumps(meta))
    # ... and its own validation text (shards that hold the bytes of -i's own val_*.bin are -i's split)
    flip_last_token_bit(sorted(copy.glob("val_*.bin"))[-1])
    p = run(["-i", f"{sp}/train_*.bin", "-j", f"{copy}/val_*.bin", "-o", tmp_path / "run2"] + TINY_RUN)
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("note:") and not ln.startswith(TAKEN)] == [
        f"note: -j '{copy}/val_*.bin' is in another directory than -i '{sp}/train_*.bin' ({copy}, not {sp}): the "
        "validation loss is that of another data set than the training data's; for its own validation split give "
        f"-j '{sp}/val_*.bin'"], p.stderr


def test_validation_without_meta_or_tokenizer_trains_with_a_note(byte_data, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(byte_data / "val_000000.bin", bare / "val_000000.bin")
    p = run(["-i", f"{byte_data}/train_*.bin", "-j", f"{bare}/val_*.bin"] + TINY_RUN)
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note: cannot check")]
    assert len(notes) == 1 and str(bare) in notes[0], p.stderr


# ---------------------------------------------------------------------------------------------
# a wildcard in a glob's directory part (llmc/io/dataloader.h glob_dir, docs/training.md "One data set per
# glob"): the data set is the one directory the shards are in; shards of several directories are refused

def test_a_wildcard_directory_of_one_data_set_keeps_its_identity(data_sets, tmp_path):
    sp = data_sets["sp"]
    pattern = f"{sp.parent}/s?/train_*.bin"  # matches sp only
    run(["-i", pattern, "-j", f"{sp}/val_*.bin", "-o", tmp_path / "run"] + TINY_RUN)
    conf = json.loads((tmp_path / "run" / "config.json").read_text())
    assert conf["model"]["vocab_size"] == 400, conf["model"]  # the data's vocabulary, not 50257
    assert conf["data"]["train"]["tokenizer"] == "sp" and conf["data"]["train"]["vocab_size"] == 400
    # the -i/-j check is made: -j of another tokenizer through a wildcard directory is refused
    gpt2 = data_sets["gpt2"]
    refused(["-i", f"{gpt2}/train_*.bin", "-j", f"{sp.parent}/s?/val_*.bin"] + TINY_RUN, "the tokenizer differs",
            f"{sp}/meta.json")


def test_a_glob_over_several_data_set_directories_is_refused(data_sets, tmp_path):
    sp, other = data_sets["sp"], data_sets["sp_other"]
    for flags in (["-i", f"{sp.parent}/sp*/train_*.bin"],
                  ["-i", f"{sp}/train_*.bin", "-j", f"{sp.parent}/sp*/val_*.bin"]):
        line = refused(flags + ["-o", tmp_path / "run"] + TINY_RUN, f"{sp.parent}/sp*/", str(sp), str(other),
                       "2 directories")
        assert "one data set" in line
    assert not (tmp_path / "run").exists()


def test_a_wildcard_directory_without_identity_says_it_cannot_check(byte_data, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(byte_data / "val_000000.bin", bare / "val_000000.bin")
    p = run(["-i", f"{byte_data}/train_*.bin", "-j", f"{tmp_path}/ba?e/val_*.bin"] + TINY_RUN)
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note: cannot check")]
    assert len(notes) == 1 and str(bare) in notes[0], p.stderr


def test_samples_without_a_tokenizer_say_so_on_stderr(byte_data, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(byte_data / "train_000000.bin", bare / "train_000000.bin")
    p = run(["-i", f"{bare}/train_*.bin", "--vocab", 256] + TINY_RUN[:-2] + ["-s", 1, "-g", 4])
    assert f"note: no tokenizer at '{bare}/tokenizer.bin'" in p.stderr, p.stderr
    assert "no tokenizer" not in p.stdout  # a diagnostic: stderr only


# ---------------------------------------------------------------------------------------------
# data roles (llmc/io/data_roles.h, docs/training.md "Data roles")

def test_a_glob_matching_validation_shards_for_training_is_refused(data_sets, tmp_path):
    sp = data_sets["sp"]
    line = refused(["-i", f"{sp}/*_0*.bin", "-j", f"{sp}/val_*.bin", "-o", tmp_path / "run"] + TINY_RUN,
                   f"-i '{sp}/*_0*.bin'", "both read")  # the shared file comes first
    assert f"{sp}/val_000000.bin" in line
    refused(["-i", f"{sp}/*_0*.bin"] + TINY_RUN, f"{sp}/val_000000.bin", "a validation shard", f"in {sp}/meta.json")
    assert not (tmp_path / "run").exists()


def test_swapped_or_shared_train_and_val_are_refused(data_sets):
    sp = data_sets["sp"]
    refused(["-i", f"{sp}/val_*.bin", "-j", f"{sp}/train_*.bin"] + TINY_RUN, "a validation shard")
    refused(["-i", f"{sp}/train_*.bin", "-j", f"{sp}/train_*.bin"] + TINY_RUN, "both read",
            f"{sp}/train_000000.bin")


def test_a_pattern_naming_the_data_directory_is_refused_before_any_identity_note(sp_run):
    """-j DIR (the data set's directory, not its shards) is one error naming the directory and the shard
    patterns to give; no note first about the directory above it (whose identity glob_dir would read) and
    no identity error from there."""
    data, out = sp_run
    expect = (f"the shard pattern '{data}' matches the directory '{data}/'", f"'{data}/val_*.bin'")
    refused(["-i", f"{data}/train_*.bin", "-j", data] + TINY_RUN, *expect)
    refused(["-i", data, "-j", f"{data}/val_*.bin"] + TINY_RUN, *expect)
    refused(["--eval-only", "-e", out / "model_00000001.bin", "-j", data], *expect)
    # a new run sizes its model from the data's vocabulary (meta.json) before any identity check: the
    # directory above the data set holds a meta.json whose error would be about the wrong data set
    (data.parent / "meta.json").write_text("[1, 2]")
    refused(["-i", data, "-j", f"{data}/val_*.bin"] + TINY_RUN, *expect)
    (data.parent / "meta.json").write_text('{"vocab_size": 60000}')
    refused(["-i", data, "-j", ""] + TINY_RUN, *expect)


def test_a_copy_of_a_training_shard_as_validation_is_refused(byte_data, tmp_path):
    """A new-user trial copied train_000000.bin to val_000000.bin in a folder without meta.json: the run took it as
    validation data with only a note (the paths differ), so its validation loss was a loss on training tokens. The
    bytes are compared (shards of equal size), on a new run and on -y 1."""
    cp = tmp_path / "cp"
    cp.mkdir()
    shutil.copy(byte_data / "train_000000.bin", cp / "train_000000.bin")
    shutil.copy(byte_data / "train_000000.bin", cp / "val_000000.bin")
    line = refused(["-i", f"{cp}/train_*.bin", "-j", f"{cp}/val_*.bin", "--vocab", 256, "-o", tmp_path / "run"]
                   + TINY_RUN, f"reads {cp}/val_000000.bin, which holds the same bytes as the training shard "
                   f"{cp}/train_000000.bin", "held out from training")
    assert not (tmp_path / "run").exists(), line
    # the real validation shard beside it trains, and -y 1 with the copy named is refused the same way
    shutil.copy(byte_data / "val_000000.bin", cp / "val_000000.bin")
    run(["-i", f"{cp}/train_*.bin", "-j", f"{cp}/val_*.bin", "--vocab", 256, "-o", tmp_path / "run"] + TINY_RUN)
    shutil.copy(byte_data / "train_000000.bin", cp / "val_000000.bin")
    refused(["-o", tmp_path / "run", "-y", 1, "-x", 3], "which holds the same bytes as the training shard")


def test_a_shard_meta_json_does_not_list_is_refused(data_sets, tmp_path):
    copy = tmp_path / "sp"
    shutil.copytree(data_sets["sp"], copy)
    shutil.copy(copy / "val_000000.bin", copy / "train_000001.bin")  # a stray file named like a training shard
    refused(["-i", f"{copy}/train_*.bin", "-j", f"{copy}/val_*.bin"] + TINY_RUN, f"{copy}/train_000001.bin",
            f"{copy}/meta.json does not list")


def test_roles_from_names_without_a_shards_list(byte_data, tmp_path):
    """byte_data's meta.json has no "shards": the names say train/val; a name saying neither gets a note."""
    refused(["-i", f"{byte_data}/*_0*.bin"] + TINY_RUN, f"{byte_data}/val_000000.bin", "by its name")
    llmc = tmp_path / "llmc"
    llmc.mkdir()
    shutil.copy(byte_data / "train_000000.bin", llmc / "shakespeare_train.bin")  # llm.c's names
    shutil.copy(byte_data / "val_000000.bin", llmc / "shakespeare_val.bin")
    shutil.copy(byte_data / "meta.json", llmc / "meta.json")
    refused(["-i", f"{llmc}/*.bin"] + TINY_RUN, "shakespeare_val.bin", "a validation shard")
    p = run(["-i", f"{llmc}/*_train.bin", "-j", f"{llmc}/*_val.bin", "-o", tmp_path / "run"] + TINY_RUN)
    assert "note:" not in p.stderr
    shutil.copy(byte_data / "train_000000.bin", llmc / "tokens.bin")
    p = run(["-i", f"{llmc}/tokens.bin", "-j", f"{llmc}/*_val.bin", "-o", tmp_path / "run2"] + TINY_RUN)
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:") and not ln.startswith(TAKEN)]
    assert len(notes) == 1 and "role of 1 shard(s) is not known" in notes[0] and "tokens.bin" in notes[0], p.stderr


def test_eval_only_of_training_shards_says_so(byte_data, tmp_path):
    run(["-i", f"{byte_data}/train_*.bin", "-o", tmp_path / "run"] + TINY_RUN)
    p = run(["--eval-only", "-e", tmp_path / "run" / "model_00000001.bin", "-j", f"{byte_data}/train_*.bin",
             "-m", 1])
    notes = [ln for ln in p.stderr.splitlines() if "training shards" in ln]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "trained on" in notes[0], p.stderr


# ---------------------------------------------------------------------------------------------
# a run's data identity (config.json "data", llmc/app/run_data.h): every reader of the run compares it

GEN = Path(os.environ.get("GENERATE_GPT2_LS", REPO / "generate_gpt2_ls"))  # override to test another build


def generate(args, check=True):
    p = subprocess.run([str(GEN), "--device", "cpu", "--threads", "1"] + [str(a) for a in args], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        pytest.fail(f"generate_gpt2_ls {args} failed ({p.returncode}):\n{p.stderr}")
    return p


def refused_by(p, *expect):
    assert p.returncode != 0, p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    for e in expect:
        assert e in lines[0], lines[0]
    return lines[0]


def export(source, out):
    return subprocess.run([sys.executable, "scripts/export_hf.py", str(source), str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def sp_run(data_sets, tmp_path):
    """(data, run): a copy of the sp data set and a one-step run on it with a checkpoint."""
    data = tmp_path / "sp"
    shutil.copytree(data_sets["sp"], data)
    out = tmp_path / "run"
    run(["-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin", "-o", out] + TINY_RUN)
    return data, out


def retokenize(data, text_of):
    """data/prepare.py again into the same --out, with SentencePiece trained on other text (vocabulary 400)."""
    shutil.rmtree(data)
    prepare(data, text_of, "sp", "--vocab-size", 400)


def other_text():
    return (SHARED / "tinyshakespeare" / "input.txt").read_text()[60_000:120_000]


def test_run_records_its_data_identity(sp_run):
    data, out = sp_run
    rec = json.loads((out / "config.json").read_text())["data"]
    meta = json.loads((data / "meta.json").read_text())
    assert rec["train"]["glob"] == f"{data}/train_*.bin" and rec["val"]["glob"] == f"{data}/val_*.bin"
    assert rec["train"]["tokenizer"] == "sp" and rec["train"]["vocab_size"] == 400
    assert rec["train"]["tokens"] == meta["num_tokens"]["train"] and rec["val"]["tokens"] == meta["num_tokens"]["val"]
    assert rec["train"]["tokenizer_bin_fnv1a64"] == fnv1a64((data / "tokenizer.bin").read_bytes())


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_every_reader_refuses_retokenized_data(sp_run, tmp_path):
    data, out = sp_run
    model = out / "model_00000001.bin"
    retokenize(data, other_text())  # same vocabulary, another SentencePiece model
    expect = ("tokenizer.bin differs", f"{out}/config.json records tokenizer sp, vocabulary 400")
    refused(["--eval-only", "-e", model, "-m", 1], *expect, "prepare it with the run's tokenizer")
    refused(["--eval-only", "-e", model, "-m", 1, "-j", f"{data}/val_*.bin"], *expect)
    refused(["-y", 1, "-o", out, "-x", 2, "--threads", 1], *expect, f"-i '{data}/train_*.bin'")
    refused(["--fork-from", model, "-o", tmp_path / "fork", "-x", 2, "--threads", 1], *expect)
    assert not (tmp_path / "fork").exists()
    refused_by(generate(["-e", model, "-n", 4], check=False), f"{data}/tokenizer.bin", "is not the tokenizer the model was "
               "trained with", "the data was prepared again")
    line = refused_by(export(out, tmp_path / "hf"), "tokenizer", "changed since the run", f"{out}/config.json")
    assert "data/prepare.py" in line and not (tmp_path / "hf").exists()
    shutil.rmtree(data)
    prepare(data, other_text(), "sp", "--vocab-size", 450)  # a larger vocabulary: not a --vocab problem of the run
    refused(["-y", 1, "-o", out, "-x", 2, "--threads", 1], "the vocabulary differs", "vocabulary 450",
            "prepare the data with the run's tokenizer")


def test_a_run_recorded_without_identity_still_reads_with_a_note(sp_run, tmp_path):
    data, out = sp_run
    conf = json.loads((out / "config.json").read_text())
    del conf["data"]  # as written before config.json had "data"
    (out / "config.json").write_text(json.dumps(conf, indent=2))
    model = out / "model_00000001.bin"
    note = "records no data identity"
    for p in (run(["--eval-only", "-e", model, "-m", 1]), generate(["-e", model, "-n", 4]),
              run(["-y", 1, "-o", out, "-x", 2, "--threads", 1])):
        assert sum(note in ln for ln in p.stderr.splitlines()) == 1, p.stderr
    assert note in export(out, tmp_path / "hf").stderr


def test_generate_refuses_a_tokenizer_of_another_data_set(data_sets, tmp_path):
    """A GPT-2-BPE model given the 400-token SentencePiece tokenizer (fewer tokens than the model: this direction
    printed garbage with exit 0); also for a run recorded without identity (compared with its data's tokenizer)."""
    gpt2, sp = data_sets["gpt2"], data_sets["sp"]
    out = tmp_path / "run"
    run(["-i", f"{gpt2}/train_*.bin", "-j", f"{gpt2}/val_*.bin", "-o", out, "--layers", 1, "--channels", 16,
         "--heads", 2, "--max-seq-len", 16, "-b", 1, "-t", 16, "-x", 1, "-u", 1, "-v", 0, "-s", 0, "--threads", 1])
    model = out / "model_00000001.bin"
    line = refused_by(generate(["-e", model, "-n", 4, "--tokenizer", sp / "tokenizer.bin"], check=False),
                      f"--tokenizer {sp}/tokenizer.bin is not the tokenizer the model was trained with",
                      "tokenizer gpt2, vocabulary 50257")
    assert f"pass --tokenizer {gpt2}/tokenizer.bin, or leave --tokenizer out" in line
    assert generate(["-e", model, "-n", 4, "--tokenizer", gpt2 / "tokenizer.bin"]).returncode == 0
    conf = json.loads((out / "config.json").read_text())
    del conf["data"]
    (out / "config.json").write_text(json.dumps(conf))
    refused_by(generate(["-e", model, "-n", 4, "--tokenizer", sp / "tokenizer.bin"], check=False),
               f"names the training data '{gpt2}/train_*.bin'", f"pass --tokenizer {gpt2}/tokenizer.bin")
    lone = tmp_path / "lone"  # a copied model: its file names its tokenizer (version 4), refused as above
    lone.mkdir()
    shutil.copy(model, lone / "model.bin")
    refused_by(generate(["-e", lone / "model.bin", "-n", 2, "--print-ids", "--tokenizer", sp / "tokenizer.bin"],
                        check=False),
               f"--tokenizer {sp}/tokenizer.bin: another tokenizer than {lone / 'model.bin'} was trained with",
               "pass the tokenizer.bin of the data the model was trained on")
    # a copied file of an earlier build (version 3: words 24-25 zero): nothing names its tokenizer, a
    # vocabulary mismatch is a note
    sys.path.insert(0, str(REPO / "dev" / "reference"))
    from checkpoint import HEADER_SUM, header_checksum
    raw = bytearray((lone / "model.bin").read_bytes())
    h = np.frombuffer(bytes(raw[:1024]), dtype="<i4").copy()
    h[1], h[24], h[25] = 3, 0, 0
    s = header_checksum(h)
    h[HEADER_SUM:HEADER_SUM + 2] = np.array([s & 0xFFFFFFFF, s >> 32], dtype=np.uint32).view(np.int32)
    (lone / "v3.bin").write_bytes(h.astype("<i4").tobytes() + bytes(raw[1024:]))
    p = generate(["-e", lone / "v3.bin", "-n", 2, "--print-ids", "--tokenizer", sp / "tokenizer.bin"])
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:") and not ln.startswith(TAKEN)]
    assert len(notes) == 1 and "has 400 tokens and the model 50257" in notes[0], p.stderr


def test_generate_refuses_another_tokenizer_of_the_same_vocabulary(sp_run, data_sets):
    """Two SentencePiece tokenizers of 400 pieces: no id is out of range, so this printed garbage with exit 0."""
    data, out = sp_run
    other = data_sets["sp_other"] / "tokenizer.bin"
    refused_by(generate(["-e", out / "model_00000001.bin", "-n", 4, "--tokenizer", other], check=False),
               f"--tokenizer {other} is not the tokenizer the model was trained with",
               f"pass --tokenizer {data}/tokenizer.bin, or leave --tokenizer out")


def test_generate_given_a_file_that_is_no_tokenizer_names_its_format(sp_run, tmp_path):
    """trial 9: a text file as --tokenizer of a run's checkpoint was "not the tokenizer the model was trained with"
    (its bytes differ), a hint to look for another tokenizer; it is no tokenizer.bin at all, and the line says
    that (the reader's bad-magic error)."""
    data, out = sp_run
    text = tmp_path / "notes.txt"
    text.write_text("not a tokenizer\n" * 200)
    line = refused_by(generate(["-e", out / "model_00000001.bin", "-n", 4, "--tokenizer", text], check=False),
                      f"tokenizer '{text}': bad magic", f"the run's tokenizer is {data}/tokenizer.bin: pass it, or "
                      "leave --tokenizer out")
    assert "not the tokenizer the model was trained with" not in line, line
    assert "regenerate it" not in line, line  # one fix, the run's tokenizer (review of 1d31951)


def test_generate_given_the_runs_tokenizer_model_names_its_tokenizer_bin(sp_run):
    """trial 3 F25: the run's own SentencePiece tokenizer.model as --tokenizer was refused as "not the tokenizer the
    model was trained with": it is the right tokenizer in the other file format; the line says so."""
    data, out = sp_run
    line = refused_by(generate(["-e", out / "model_00000001.bin", "-n", 4, "--tokenizer", data / "tokenizer.model"],
                               check=False),
                      f"--tokenizer {data}/tokenizer.model is the run's SentencePiece model",
                      f"pass --tokenizer {data}/tokenizer.bin")
    assert "not the tokenizer" not in line, line


def test_generate_after_the_runs_data_was_renamed_names_it(sp_run, tmp_path):
    """trial 3 F22: with the run's data directory renamed, --prompt said only "need --tokenizer: the tokenizer.bin
    of the model's data set"; the line now names the directory config.json records and that it is gone."""
    data, out = sp_run
    data.rename(tmp_path / "renamed")
    model = out / "model_00000001.bin"
    refused_by(generate(["-e", model, "-n", 2, "--prompt", "To be"], check=False),
               f"{out}/config.json names the training data '{data}/train_*.bin', but {data} no longer exists",
               "pass --tokenizer")
    refused_by(generate(["-e", model, "-n", 2], check=False),  # no prompt: the EOT of the tokenizer it cannot find
               f"no prompt without the run's tokenizer: {out}/config.json names the training data", "--prompt-ids")
    p = generate(["-e", model, "-n", 2, "--prompt-ids", "1"])  # ids: generated, printed as <id>, with a note
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:") and not ln.startswith(TAKEN)]
    assert any(f"{data} no longer exists" in n and "tokens print as <id>" in n for n in notes), p.stderr


def test_eval_of_the_runs_validation_data_changed_since_says_so(sp_run):
    """The same tokenizer, other tokens (as after data/prepare.py with another --val-fraction): evaluated, with a
    note that the loss is not comparable with the run's."""
    import numpy as np
    data, out = sp_run
    tokens = np.fromfile(data / "val_000000.bin", dtype=np.uint16, offset=1024)
    write_shard(data / "val_000000.bin", tokens[:len(tokens) // 2])
    p = run(["--eval-only", "-e", out / "model_00000001.bin", "-m", 1])
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:") and not ln.startswith(TAKEN)]
    assert len(notes) == 1 and f"holds {len(tokens) // 2} tokens in 1 shard(s) now, {len(tokens)} in 1" in notes[0]
    assert "not comparable" in notes[0]


def test_config_of_a_run_checks_the_new_runs_data(sp_run, data_sets, tmp_path):
    """--config RUN/config.json starts a new run with that run's settings and model (docs/training.md "Starting
    from a run's settings"). Its model was made for the run's tokenizer: data of another tokenizer of the same
    vocabulary size trained silently with it; now refused, naming --config RUN/config.toml (the run's flags with
    this data's vocabulary), which trains. Other data of the same tokenizer trains with one note; the run's own
    data, without."""
    import numpy as np
    data, out = sp_run
    record = out / "config.json"
    other_tok = data_sets["sp_other"]
    p = run(["--config", record, "-i", f"{other_tok}/train_*.bin", "-j", f"{other_tok}/val_*.bin"], check=False)
    lines = [ln for ln in p.stderr.splitlines() if "that run's recorded settings and model" not in ln]  # --config's
    assert p.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    for e in (f"-i '{other_tok}/train_*.bin'", "tokenizer.bin differs", f"{out}/config.json records",
              f"--config {out}/config.toml", "data/prepare.py"):
        assert e in lines[0], lines[0]
    run(["--config", out / "config.toml", "-i", f"{other_tok}/train_*.bin", "-j", f"{other_tok}/val_*.bin",
         "-o", tmp_path / "from_toml", "--threads", 1])

    own = run(["--config", record, "--threads", 1])
    assert not [ln for ln in own.stderr.splitlines() if "other data" in ln], own.stderr

    more = tmp_path / "sp_more"  # the same tokenizer, other text: half of the training tokens
    shutil.copytree(data, more)
    tokens = np.fromfile(more / "train_000000.bin", dtype=np.uint16, offset=1024)
    write_shard(more / "train_000000.bin", tokens[:len(tokens) // 2])
    p = run(["--config", record, "-i", f"{more}/train_*.bin", "-j", f"{more}/val_*.bin", "--threads", 1])
    notes = [ln for ln in p.stderr.splitlines() if "other data" in ln]
    assert len(notes) == 1 and notes[0].startswith(f"note: --config {record}: -i '{more}/train_*.bin' "), p.stderr
    assert f"({len(tokens) // 2} tokens in 1 shard(s))" in notes[0] and f"{len(tokens)} tokens in 1" in notes[0]


def test_a_run_started_with_relative_globs_records_them_absolute(data_sets, tmp_path):
    """"data"'s globs are absolute, as "train"'s -i and -j are: a run started with relative ones recorded them
    as typed, so --eval-only compared its own (absolute) -j with a relative glob and never said that the
    validation data changed since the run."""
    import numpy as np
    data = tmp_path / "sp"
    shutil.copytree(data_sets["sp"], data)
    rel = os.path.relpath(data, REPO)
    out = tmp_path / "run"
    run(["-i", f"{rel}/train_*.bin", "-j", f"{rel}/val_*.bin", "-o", out] + TINY_RUN)
    rec = json.loads((out / "config.json").read_text())
    for role, key in (("train", "train_data"), ("val", "val_data")):
        glob = rec["data"][role]["glob"]
        assert glob == rec["train"][key] and os.path.normpath(glob) == f"{data}/{role}_*.bin", rec["data"]
    tokens = np.fromfile(data / "val_000000.bin", dtype=np.uint16, offset=1024)
    write_shard(data / "val_000000.bin", tokens[:len(tokens) // 2])
    p = run(["--eval-only", "-e", out / "model_00000001.bin", "-m", 1])
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:") and not ln.startswith(TAKEN)]
    assert len(notes) == 1 and "not comparable" in notes[0], p.stderr


def test_generate_compares_the_sentencepiece_model_when_the_data_has_no_tokenizer_bin(data_sets, tmp_path):
    """A run on data with meta.json but no tokenizer.bin records the SentencePiece model's sha256, not the
    bytes of a tokenizer.bin. --eval-only compared that sha256 with -j's meta.json; generate_gpt2_ls compared
    only tokenizer.bin bytes and printed another 400-piece tokenizer's text with exit 0. Both now read the
    identity of the data set a --tokenizer DIR/tokenizer.bin belongs to (its meta.json) the same way."""
    sp, other = data_sets["sp"], data_sets["sp_other"]
    data = tmp_path / "metaonly"
    data.mkdir()
    for name in ("train_000000.bin", "val_000000.bin", "meta.json"):
        shutil.copy(sp / name, data / name)
    out = tmp_path / "run"
    run(["-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin", "-o", out] + TINY_RUN)
    rec = json.loads((out / "config.json").read_text())["data"]["train"]
    assert rec["tokenizer_bin_fnv1a64"] is None and rec["sha256_tokenizer_model"]
    model = out / "model_00000001.bin"
    refused(["--eval-only", "-e", model, "-m", 1, "-j", f"{other}/val_*.bin"], "sha256_tokenizer_model")
    line = refused_by(generate(["-e", model, "-n", 4, "--tokenizer", other / "tokenizer.bin"], check=False),
                      f"--tokenizer {other}/tokenizer.bin is not the tokenizer the model was trained with",
                      "(the SentencePiece model (sha256_tokenizer_model) differs)", f"{out}/config.json records")
    assert "pass the tokenizer.bin of the data the run trained on" in line
    shas = [json.loads((d / "meta.json").read_text())["sha256_tokenizer_model"][:12] for d in (sp, other)]
    assert all(f"SentencePiece model sha256 {sha}..." in line for sha in shas), line  # the differing fact, both
    p = generate(["-e", model, "-n", 4, "--tokenizer", sp / "tokenizer.bin"])  # the same SentencePiece model
    assert "note:" not in p.stderr, p.stderr


def test_a_run_on_data_without_identity_says_eval_and_generate_cannot_check(data_sets, tmp_path):
    """A run trained on shards with neither meta.json nor tokenizer.bin records a "data" identity of nulls.
    Training noted that it could not check -j against -i; --eval-only with another -j and generate_gpt2_ls
    with any --tokenizer said nothing. Now each prints the same one-line note; the run's own data set gets
    none (one directory is one data set)."""
    sp, other = data_sets["sp"], data_sets["sp_other"]
    data = tmp_path / "bare"
    data.mkdir()
    for name in ("train_000000.bin", "val_000000.bin"):
        shutil.copy(sp / name, data / name)
    out = tmp_path / "run"
    run(["-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin", "-o", out, "--vocab", 400] + TINY_RUN)
    model = out / "model_00000001.bin"

    def cannot_check(p):
        return [ln for ln in p.stderr.splitlines() if ln.startswith("note: cannot check")]

    notes = cannot_check(run(["--eval-only", "-e", model, "-m", 1, "-j", f"{other}/val_*.bin"]))
    assert len(notes) == 1 and f"-j '{other}/val_*.bin'" in notes[0] and str(data) in notes[0], notes
    assert "no meta.json or tokenizer.bin" in notes[0]
    assert cannot_check(run(["--eval-only", "-e", model, "-m", 1])) == []  # the run's own validation data
    notes = cannot_check(generate(["-e", model, "-n", 4, "--tokenizer", other / "tokenizer.bin"]))
    assert len(notes) == 1 and f"--tokenizer {other}/tokenizer.bin" in notes[0] and str(data) in notes[0], notes
    assert "no meta.json or tokenizer.bin" in notes[0]


def test_data_prepared_again_from_other_text_is_noticed(tmp_path):
    """data/prepare.py again into the run's directory from edited text (two paragraphs swapped in the training
    part, two in the validation part): the same tokenizer and the same token counts, so only counts were
    compared and -y 1 and --eval-only said nothing. data/prepare.py now records each shard's sha256 in meta.json,
    the run records their hash in config.json "data", and the readers compare it."""
    text = (SHARED / "tinyshakespeare" / "input.txt").read_text()[:60_000]
    paras = text.split("\n\n")
    edited = list(paras)
    edited[1], edited[2] = edited[2], edited[1]
    edited[-2], edited[-3] = edited[-3], edited[-2]
    data = tmp_path / "txt"
    prepare(data, text, "gpt2", "--gpt2-bpe", SHARED / "gpt2")
    counts = json.loads((data / "meta.json").read_text())["num_tokens"]
    out = tmp_path / "run"
    run(["-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin", "-o", out] + TINY_RUN)
    recorded = json.loads((out / "config.json").read_text())["data"]
    before = {p.name: p.read_bytes() for p in data.glob("*_000000.bin")}
    shutil.rmtree(data)
    prepare(data, "\n\n".join(edited), "gpt2", "--gpt2-bpe", SHARED / "gpt2")
    assert json.loads((data / "meta.json").read_text())["num_tokens"] == counts  # the same counts: the case
    assert all(before[p.name] != p.read_bytes() for p in data.glob("*_000000.bin"))  # other tokens in both

    p = run(["--eval-only", "-e", out / "model_00000001.bin", "-m", 1])
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:") and not ln.startswith(TAKEN)]
    assert len(notes) == 1 and notes[0].startswith(f"note: -j '{data}/val_*.bin' holds other tokens now than when "
                                                   f"{out}/config.json recorded it"), p.stderr
    assert f"sha256 in {data}/meta.json differ" in notes[0] and "not comparable" in notes[0]
    p = run(["-y", 1, "-o", out, "-x", 2, "--threads", 1])
    notes = [ln for ln in p.stderr.splitlines() if "holds other tokens now" in ln]
    assert len(notes) == 2 and notes[0].startswith(f"note: -i '{data}/train_*.bin' holds other tokens"), p.stderr
    assert notes[1].startswith(f"note: -j '{data}/val_*.bin' holds other tokens"), p.stderr
    assert all(len(recorded[role]["shards_sha256_fnv1a64"]) == 16 for role in ("train", "val")), recorded


def test_a_new_run_from_a_checkpoints_weights_checks_its_data(sp_run, data_sets, tmp_path):
    """trial 3 S6: -e RUN/model_N.bin (a new run from a checkpoint's weights) on data of another tokenizer of the
    same size trained silently; refused as --fork-from and --eval-only refuse it. The run's own data trains."""
    data, out = sp_run
    other = data_sets["sp_other"]
    weights = ["-e", out / "model_00000001.bin", "-b", 4, "-t", 32, "--threads", 1, "-x", 1, "-u", 1, "-v", 0,
               "-s", 0]
    refused(["-i", f"{other}/train_*.bin", "-j", f"{other}/val_*.bin", "-o", tmp_path / "ft"] + weights,
            f"-i '{other}/train_*.bin'", "tokenizer.bin differs", "data/prepare.py")
    assert not (tmp_path / "ft").exists()
    run(["-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin", "-o", tmp_path / "own"] + weights)


def test_a_shard_meta_json_lists_but_is_missing_is_refused(data_sets, tmp_path):
    """trial 3 S10: a data set whose meta.json lists a training shard that is not there (an interrupted copy)
    trained on the shards present; refused, naming the missing shard."""
    copy = tmp_path / "sp"
    shutil.copytree(data_sets["sp"], copy)
    meta = json.loads((copy / "meta.json").read_text())
    meta["shards"]["train"].append("train_000001.bin")
    (copy / "meta.json").write_text(json.dumps(meta))
    refused(["-i", f"{copy}/train_*.bin", "-j", f"{copy}/val_*.bin"] + TINY_RUN, f"-i '{copy}/train_*.bin'",
            f"{copy}/meta.json lists 2 training shard(s) and 1 of them are missing (train_000001.bin)")


def test_a_vocab_above_the_datas_samples_and_generates_only_its_tokens(byte_data, tmp_path):
    """trial 3 B2: --vocab above the data's vocabulary (allowed) sampled ids the tokenizer cannot decode, and the
    first sample ended the run (and every -y 1 after it), generation too; only the tokenizer's ids are drawn."""
    out = tmp_path / "run"
    p = run(["-i", f"{byte_data}/train_*.bin", "-o", out, "--vocab", 1024] + TINY_RUN[:-2] + ["-s", 1, "-g", 64])
    assert "--- sample at step 1 ---" in (out / "samples.txt").read_text()
    g = generate(["-e", out / "model_00000001.bin", "--prompt-ids", "70,105", "-n", 64, "--print-ids"])
    ids = [int(t) for t in g.stdout.split()]
    assert len(ids) == 64 and all(0 <= t < 256 for t in ids), ids
    text = subprocess.run([str(GEN), "--device", "cpu", "--threads", "1", "-e", str(out / "model_00000001.bin"),
                           "--prompt-ids", "70,105", "-n", "64"], cwd=REPO, capture_output=True, timeout=120)
    assert text.returncode == 0, text.stderr  # each drawn id decodes: 2 prompt bytes + 64 + the newline
    assert len(text.stdout) == 2 + 64 + 1, text.stdout


def test_data_prepared_again_with_other_counts_is_named(tmp_path):
    """A new-user trial: the run's data prepared again with another --val-fraction (same tokenizer): -y 1 was
    refused by the data loader's state ("saved ... over 301967 tokens ... has 267689") with no word of the data's
    change. Refused now naming it, the record's counts and the fix; a new run from the checkpoint's weights
    trains. (Validation shards of other counts: a note that the losses are not comparable, as for content.)"""
    text = (SHARED / "tinyshakespeare" / "input.txt").read_text()[:60_000]
    data = tmp_path / "txt"
    prepare(data, text, "gpt2", "--gpt2-bpe", SHARED / "gpt2")
    out = tmp_path / "run"
    run(["-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin", "-o", out] + TINY_RUN)
    recorded = json.loads((out / "config.json").read_text())["data"]
    shutil.rmtree(data)
    prepare(data, text, "gpt2", "--gpt2-bpe", SHARED / "gpt2", "--val-fraction", 0.2)
    now = json.loads((data / "meta.json").read_text())["num_tokens"]
    assert now["train"] != recorded["train"]["tokens"]  # the case: other counts, the same tokenizer
    p = run(["-y", 1, "-o", out, "-x", 2, "--threads", 1], check=False)
    assert p.returncode == 1, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
    assert errors == [f"error: -i '{data}/train_*.bin' holds {now['train']} tokens in 1 shard(s) now, "
                      f"{recorded['train']['tokens']} in 1 when {out}/config.json recorded it: the data was prepared "
                      "again since, and the checkpoint's place in it (its data loader's state) does not exist in "
                      "these shards; prepare the data as the run's was (its meta.json's args), or start a new run "
                      f"from the checkpoint's weights (-e {out}/model_00000001.bin)"], p.stderr
    q = run(["-e", out / "model_00000001.bin", "-i", f"{data}/train_*.bin", "-o", tmp_path / "new"] + TINY_RUN)
    assert q.returncode == 0
    # validation data of its own directory prepared again from longer text: its counts differ, the run resumes
    # (the validation set is read from its start each time) with a note
    val = tmp_path / "val"
    prepare(val, text[:30_000], "gpt2", "--gpt2-bpe", SHARED / "gpt2")
    out2 = tmp_path / "run2"
    run(["-i", f"{data}/train_*.bin", "-j", f"{val}/val_*.bin", "-o", out2] + TINY_RUN)
    shutil.rmtree(val)
    prepare(val, text, "gpt2", "--gpt2-bpe", SHARED / "gpt2")
    p = run(["-y", 1, "-o", out2, "-x", 2, "--threads", 1])
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith(f"note: -j '{val}/val_*.bin' holds")]
    assert len(notes) == 1 and " tokens in 1 shard(s) now, " in notes[0] and "not comparable" in notes[0], p.stderr
