"""A preset (--config FILE, e.g. configs/paper_pg19.toml) used directly with the trainer (docs/training.md
"Presets and the data they expect"):
- --expect-tokenizer / --expect-vocab (a preset key or a flag) are checked against the meta.json of every data
  set the run reads: -i and -j of a new run, of -y 1 and --fork-from (the expectation is recorded and taken
  from the run's record), and -j of --eval-only; data whose meta.json does not say is refused (the expectation
  cannot be checked); the error names the preset the expectation came from, what the data holds and the fix;
- the run header names the --config file its settings came from;
- a shard pattern that came from the --config file and matches nothing says so, and that a relative one is
  read from the current directory;
- -y 1 with a preset whose -b/-t differ from the run's record names the preset as their source.

Each run is a model of a few thousand parameters for one or two steps on byte-level data (seconds in all).
"""
import json
import shutil
import subprocess

import pytest

from run_helpers import BIN, REPO, TINY, data_args, run, shakespeare_bytes, write_byte_data

PAPER = REPO / "configs" / "paper_pg19.toml"
# The paper preset's model, shrunk on the command line as scripts/exp_pg19.sh --smoke does
PAPER_SMALL = ["--layers", 1, "--channels", 48, "--max-seq-len", 64, "-t", 64, "-b", 2, "-d", 128, "-x", 1, "-m", 1, "-u", 1,
               "--threads", 1]
TINY_RUN = TINY + ["-u", 1, "-v", 0, "-s", 0]


def refused(args, *expect, cwd=REPO):
    """Runs the trainer (from cwd) and returns its one stderr line, which must be an error holding every
    string of expect."""
    p = subprocess.run([str(BIN), "--device", "cpu"] + [str(a) for a in args], cwd=cwd, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1, (p.returncode, p.stderr, p.stdout[-500:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    for e in expect:
        assert e in lines[0], (e, lines[0])
    return lines[0]


def byte_set(d, meta):
    """Byte-level shards (ids < 256) in d with this meta.json (meta None: no meta.json at all)."""
    d.mkdir(parents=True)
    write_byte_data(d, shakespeare_bytes(40_000), [30_000], meta=meta or {"vocab_size": 256})
    if meta is None:
        (d / "meta.json").unlink()
    return d


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """{"paper": tokenizer sp, vocabulary 10000 (the paper's), "sp1024": sp 1024 (PG-19, the trial's mistake),
    "bare": no meta.json}, all byte-level shards underneath."""
    d = tmp_path_factory.mktemp("sets")
    return {"paper": byte_set(d / "paper", {"dataset": "pg19", "tokenizer": "sp", "vocab_size": 10000}),
            "sp1024": byte_set(d / "sp1024", {"dataset": "pg19", "tokenizer": "sp", "vocab_size": 1024}),
            "bare": byte_set(d / "bare", None)}


def test_paper_preset_refuses_data_of_another_vocabulary(sets, tmp_path):
    """The trial's case: SentencePiece 1024 data where the paper's 10K belongs trained without a word."""
    out = tmp_path / "run"
    line = refused(["--config", PAPER] + data_args(sets["sp1024"]) + ["-o", out] + PAPER_SMALL,
                   f"-i '{sets['sp1024']}/train_*.bin'", "vocabulary 1024", f"{sets['sp1024']}/meta.json",
                   f"--expect-vocab 10000 (from --config {PAPER})", "vocabulary 10000",
                   "make the paper's PG-19 data in a directory of its own (scripts/pack_pg19.sh --out NEW_DIR)",
                   "--expect-vocab 1024")
    assert not out.exists(), line  # refused before anything is written
    # the paper's data trains
    run(["--config", PAPER] + data_args(sets["paper"]) + ["-o", out] + PAPER_SMALL)
    rec = json.loads((out / "config.json").read_text())["train"]
    assert rec["expect_tokenizer"] == "sp" and rec["expect_vocab"] == 10000


def test_validation_data_is_checked_too_and_data_without_meta_is_refused(sets, tmp_path):
    """-j is read by the run too; shards without meta.json cannot show the expected tokenizer: refused, not a note."""
    line = refused(["--config", PAPER, "-i", f"{sets['paper']}/train_*.bin", "-j", f"{sets['bare']}/val_*.bin",
                    "-o", tmp_path / "run"] + PAPER_SMALL,
                   f"-j '{sets['bare']}/val_*.bin'", "cannot be checked", "no meta.json",
                   f"--expect-tokenizer sp (from --config {PAPER})")
    assert "data/prepare.py" in line
    assert not (tmp_path / "run").exists()


def test_data_without_meta_whose_tokenizer_states_no_vocabulary_is_named_so(tmp_path):
    """No meta.json and a tokenizer.bin that states no vocabulary: the error says that, not that a meta.json
    (which does not exist) lacks the key."""
    d = byte_set(tmp_path / "zeroed", None)
    (d / "tokenizer.bin").write_bytes(bytes(1024))
    refused(["-i", f"{d}/train_*.bin", "--expect-vocab", 10000, "-o", tmp_path / "run"] + TINY_RUN,
            "cannot be checked", "--expect-vocab 10000", f"{d} has no meta.json and its tokenizer.bin states no "
            "vocabulary", "--expect-vocab 0")


def test_expectations_as_flags(byte_data, tmp_path):
    """Every key of a config file is a flag: --expect-vocab / --expect-tokenizer on the command line, named
    without a preset; a value that is no tokenizer is refused as a flag value."""
    refused(data_args(byte_data) + TINY_RUN + ["-x", 1, "--expect-vocab", 300],
            f"-i '{byte_data}/train_*.bin' holds", "vocabulary 256", "--expect-vocab 300 asks for vocabulary 300")
    refused(data_args(byte_data) + TINY_RUN + ["-x", 1, "--expect-tokenizer", "gpt2"],
            "cannot be checked", f"{byte_data}/meta.json names no tokenizer", "--expect-tokenizer gpt2")
    refused(data_args(byte_data) + TINY_RUN + ["-x", 1, "--expect-tokenizer", "sentencepiece"],
            "--expect-tokenizer", "gpt2, sp or synthetic")
    run(data_args(byte_data) + TINY_RUN + ["-x", 1, "--expect-vocab", 256])


def test_a_continued_run_keeps_its_expectation(byte_data, tmp_path):
    """The expectation is a setting of the run: recorded, taken by -y 1 and --fork-from from the record (named as
    the source), and checked on their data; --eval-only checks -j."""
    out = tmp_path / "run"
    run(data_args(byte_data) + TINY_RUN + ["-o", out, "-x", 1, "--expect-vocab", 256])
    rec = out / "config.json"
    assert json.loads(rec.read_text())["train"]["expect_vocab"] == 256
    # the record says 300 (a preset run of other data, say): -y 1 and --fork-from check the data against it
    # (before the checkpoint's settings fingerprint finds the record edited)
    original = rec.read_text()
    rec.write_text(original.replace('"expect_vocab": 256', '"expect_vocab": 300'))
    refused(["-o", out, "-y", 1, "-x", 2, "--threads", 1], "--expect-vocab 300 (from the record " + str(rec) + ")")
    refused(["--fork-from", out / "model_00000001.bin", "-o", tmp_path / "fork", "--threads", 1],
            "--expect-vocab 300 (from the record " + str(rec) + ")")
    rec.write_text(original)
    refused(["--eval-only", "-e", out / "model_00000001.bin", "--expect-vocab", 300, "--threads", 1],
            f"-j '{byte_data}/val_*.bin' holds", "--expect-vocab 300")
    run(["-o", out, "-y", 1, "-x", 2, "--threads", 1, "--expect-vocab", 256])  # the flag given wins


def small_preset(path, b=2):
    """A preset of the tiny model, relative data paths as configs/paper_pg19.toml has them."""
    path.write_text(f'layers=2\nchannels=32\nheads=4\nglobal-heads=1\nwindow=8\nmax-seq-len=64\n'
                    f'batch-size={b}\nseq-len=32\nwarmup-steps=1\nval-every=0\nsample-every=0\n')
    return path


def test_header_names_the_config_file(byte_data, tmp_path):
    preset = small_preset(tmp_path / "small.toml")
    p = run(["--config", preset] + data_args(byte_data) + ["-x", 1, "--threads", 1])
    first = p.stdout.splitlines()[0]
    assert first.startswith("train_gpt2_ls | device cpu") and f"| config {preset} (model base ls-small)" in first, first
    p = run(data_args(byte_data) + ["-x", 1, "--threads", 1, "-e", "d2", "-t", 32, "-v", 0, "-s", 0])
    assert p.stdout.splitlines()[0].endswith("| model preset d2"), p.stdout.splitlines()[0]


def test_a_typed_window_with_the_presets_near_is_refused(byte_data, tmp_path):
    """The paper preset sets near=50, its window's distance: a typed --window 16 on top of it once split the
    near/far statistics at 50 without a word (a new-user trial). Refused naming both fixes; --near typed, or the
    same window, run."""
    preset = tmp_path / "near.toml"
    preset.write_text(small_preset(tmp_path / "base.toml").read_text() + "near=8\n")
    args = ["--config", preset] + data_args(byte_data) + ["-x", 1, "--threads", 1]
    refused(args + ["--window", 4, "-o", tmp_path / "a"], f"--near 8 (from --config {preset})", "--window 4",
            "give --near 4 to split at the new window, or --near 8 to keep the file's distance")
    assert not (tmp_path / "a").exists()
    p = run(args + ["--window", 4, "--near", 4, "-o", tmp_path / "b"])
    assert '"near":4' in (tmp_path / "b" / "logit_stats.jsonl").read_text().replace(" ", ""), p.stderr
    run(args + ["--window", 8, "-o", tmp_path / "c"])


def test_a_typed_batch_with_the_presets_tokens_per_step_is_noted(byte_data, tmp_path):
    """trial 9: configs/paper_pg19.toml sets -d 524288; with -b/-t typed on top the run kept it without a word,
    each step summing thousands of micro-batches. A note names the file's -d, the typed sizes and the
    micro-batches a step sums; -d typed (or a preset without -d) gets none."""
    preset = tmp_path / "d.toml"
    preset.write_text(small_preset(tmp_path / "base.toml").read_text() + "total-batch-size=256\n")
    args = ["--config", preset] + data_args(byte_data) + ["-x", 1, "--threads", 1]
    p = run(args + ["-b", 1, "-t", 16])
    assert (f"note: -d 256 (from --config {preset}) stays with -b 1 -t 16 given here: each step sums 16 "
            "micro-batches of 1 x 16 tokens; give -d to change the tokens per step (-d -1: one micro-batch per "
            "step)") in p.stderr.splitlines(), p.stderr
    p = run(args + ["-t", 64])
    assert f"note: -d 256 (from --config {preset}) stays with -t 64 given here: each step sums 2 micro-batches of " \
        "2 x 64 tokens" in p.stderr, p.stderr
    for extra in (["-b", 1, "-d", 64], []):
        assert "stays with" not in run(args + extra).stderr
    assert "stays with" not in run(["--config", small_preset(tmp_path / "nod.toml")] + data_args(byte_data) +
                                   ["-x", 1, "--threads", 1, "-b", 1]).stderr
    # -d -1 (every run's config.toml writes it) follows the typed -b; one micro-batch per step sums nothing (review)
    for d, b in ((-1, 1), (64, 2)):
        other = tmp_path / f"d{d}.toml"
        other.write_text(small_preset(tmp_path / "base.toml").read_text() + f"total-batch-size={d}\n")
        assert "stays with" not in run(["--config", other] + data_args(byte_data) + ["-x", 1, "--threads", 1,
                                                                                     "-b", b]).stderr


def test_a_resume_with_a_preset_of_another_model_names_the_preset(byte_data, tmp_path):
    """trial 10: -y 1 --config FILE whose window differs from the checkpoint's said "resume with the same model
    flags", though no model flag was typed: the line names the file the flag came from."""
    out = tmp_path / "r"
    run(["--config", small_preset(tmp_path / "base.toml")] + data_args(byte_data) + ["-x", 1, "--threads", 1,
                                                                                     "-o", out])
    other = tmp_path / "w4.toml"
    other.write_text(small_preset(tmp_path / "base.toml").read_text().replace("window=8", "window=4"))
    line = refused(["--config", other, "-o", out, "-y", 1, "-x", 2, "--threads", 1], "window 8 vs 4",
            f"; --window 4 is from --config {other}: give the checkpoint's value on the command line (--window 8), or "
            "drop --config")
    # review of e86a15f: the advice it gives works (and "resume with the same model flags", for a flag not
    # typed, is gone)
    assert "resume with the same model flags" not in line, line
    run(["--config", other, "-o", out, "-y", 1, "-x", 2, "--threads", 1, "--window", 8])
    # (a review) an on/off flag's advice is one the command line takes ("(qk-norm 1)" was refused: an on/off
    # flag takes its value after '='), and the untied head is named by its flag
    qk = tmp_path / "qk"
    run(["--config", small_preset(tmp_path / "base.toml")] + data_args(byte_data) + ["-x", 1, "--threads", 1,
                                                                                     "-o", qk, "--qk-norm"])
    qoff = tmp_path / "qoff.toml"
    qoff.write_text(small_preset(tmp_path / "base.toml").read_text() + "qk-norm=false\n")
    refused(["--config", qoff, "-o", qk, "-y", 1, "-x", 2, "--threads", 1],
            f"; --qk-norm=false is from --config {qoff}: give the checkpoint's value on the command line "
            "(--qk-norm=true), or drop --config")
    run(["--config", qoff, "-o", qk, "-y", 1, "-x", 2, "--threads", 1, "--qk-norm=true"])
    untie = tmp_path / "untie.toml"
    untie.write_text(small_preset(tmp_path / "base.toml").read_text() + "untie-embeddings=true\n")
    refused(["--config", untie, "-o", qk, "-y", 1, "-x", 3, "--threads", 1],
            f"; --untie-embeddings=true is from --config {untie}: give the checkpoint's value on the command line "
            "(--untie-embeddings=false), or drop --config")
    # another -e from the file's model= key (review): named with the file, the fix the file's
    d2 = tmp_path / "d2.toml"
    d2.write_text('model="d2"\n')
    refused(["--config", d2, "-o", out, "-y", 1, "-x", 3, "--threads", 1],
            f"-e d2 (from --config {d2}) differs from the run's -e ", "drop model= from the file, or drop --config")


def test_a_relative_pattern_of_a_preset_run_elsewhere_names_the_preset(tmp_path):
    """The paper preset started from another directory: its relative shard pattern is read from there."""
    elsewhere = tmp_path / "out"
    elsewhere.mkdir()
    refused(["--config", PAPER, "-o", tmp_path / "t", "-t", 128, "-b", 2, "-x", 1], "data/shards/pg19_sp/train_*.bin",
            f"from --config {PAPER}", "relative to the current directory", str(elsewhere),
            "start the trainer from the directory the file's paths are relative to", "-i/-j", "scripts/pack_pg19.sh",
            cwd=elsewhere)


def test_a_preset_run_from_its_own_directory_without_data_says_to_make_the_data(tmp_path):
    """Started from the directory that holds the preset (the repository root for configs/*.toml) before the
    shards exist: the error says how to make them and does not send the user to where they already are."""
    shutil.copy(PAPER, tmp_path / "paper.toml")
    line = refused(["--config", "paper.toml", "-o", tmp_path / "t", "-t", 128, "-b", 2, "-x", 1],
                   "data/shards/pg19_sp/train_*.bin", "from --config paper.toml", "scripts/pack_pg19.sh", "-i/-j",
                   cwd=tmp_path)
    assert "start the trainer from" not in line, line


def test_resume_with_a_preset_of_another_batch_names_the_preset(byte_data, tmp_path):
    """-y 1 takes the run's settings from its record; a --config given again overrides them, and a -b it sets
    that the checkpoint's data loader cannot continue is named as the preset's."""
    out = tmp_path / "run"
    run(["--config", small_preset(tmp_path / "b2.toml", b=2)] + data_args(byte_data) + ["-o", out, "-x", 1,
                                                                                        "--threads", 1])
    preset = small_preset(tmp_path / "b4.toml", b=4)
    refused(["--config", preset, "-o", out, "-y", 1, "-x", 2, "--threads", 1],
            f"--config {preset} sets -b 4", "the run in", "-b 2", "drop --config", "-b 2 after it")
    run(["--config", preset, "-o", out, "-y", 1, "-x", 2, "--threads", 1, "-b", 2])  # the flag given wins


def test_a_typed_preset_the_config_file_would_override_is_refused(sets, tmp_path):
    """The trial's case: `--config paper_pg19.toml -e d12` trained the file's L 6, C 192 model under the d12
    name (the file's --layers, --channels, --heads, --max-seq-len override the typed preset's). Refused, naming
    each value; the shape given on the command line too, or a preset the file agrees with, trains."""
    out = tmp_path / "run"
    base = ["--config", PAPER] + data_args(sets["paper"]) + ["-o", out, "-t", 64, "-b", 2, "-d", 128, "-x", 1, "-m", 1,
                                                              "-u", 1, "--threads", 1]
    refused(base + ["-e", "d12"], f"-e d12 on the command line, but --config {PAPER} sets --layers 6, --channels 192, "
            "--heads 6, --max-seq-len 2048, which would override that preset's (12, 768, 12, 1024) and train another "
            "model: give those flags on the command line too, or drop -e")
    assert not out.exists()
    # only the values that differ: d6 has the file's 6 layers and 6 heads
    line = refused(base + ["-e", "d6"], "sets --channels 192, --max-seq-len 2048, which would override that preset's "
                   "(384, 1024)")
    assert "--layers" not in line and "--heads" not in line
    # the shape typed too: the model asked for trains (d1 shrunk to the test's size)
    run(base + ["-e", "d1", "--layers", 1, "--channels", 64, "--heads", 1, "--max-seq-len", 64])
    conf = json.loads((out / "config.json").read_text())["model"]
    assert (conf["num_layers"], conf["channels"], conf["num_heads"], conf["max_seq_len"]) == (1, 64, 1, 64)


def test_a_typed_preset_that_is_the_files_own_model_or_a_continued_run_is_not_refused(byte_data, tmp_path):
    """A review of the check above: a typed -e equal to the file's own model= (a run's config.toml used again)
    trains the file's model, as asked; a resumed run's model is its checkpoint's (checked there). A run's
    config.json with another preset typed is refused as a TOML file is."""
    r1 = tmp_path / "r1"
    run(["-e", "ls-small"] + data_args(byte_data) + TINY_RUN + ["-x", 1, "-o", r1])
    run(["--config", r1 / "config.toml", "-e", "ls-small", "-o", tmp_path / "r2"])
    assert json.loads((tmp_path / "r2" / "config.json").read_text())["model"]["num_layers"] == 2
    run(["--config", r1 / "config.toml", "-e", "ls-small", "-y", 1, "-o", r1, "-x", 2])
    p = subprocess.run([str(BIN), "--device", "cpu", "--config", str(r1 / "config.json"), "-e", "d2", "-x", "2",
                        "-o", str(tmp_path / "r3")], cwd=REPO, capture_output=True, text=True, timeout=120)
    # the record's note, then the one error line (d2 has the record's 2 layers)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == (
        f"error: -e d2 on the command line, but --config {r1 / 'config.json'} sets --channels 32, --heads 4, "
        "--max-seq-len 64, which would override that preset's (128, 2, 1024) and train another model: give those "
        "flags on the command line too, or drop -e"), p.stderr
    assert not (tmp_path / "r3").exists()
