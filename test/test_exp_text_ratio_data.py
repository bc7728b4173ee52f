"""scripts/exp_text_ratio.sh uses data that exists (OUT/data, or --data DIR) only when its meta.json records
what the start asks for: the corpus, SentencePiece, the vocabulary (1024; 400 with --smoke), in OUT/data
--smoke's two books or the full experiment's, and a --source given: its books. Other data is refused with one
`error:` line before any run is looked at, replaced (--force) or started, the data and the runs left as they
were; data that matches is reused (not prepared again), and every new run is given --expect-tokenizer sp
--expect-vocab V so that the trainer refuses other data itself (a resumed run checks its data against its own
record, where those are recorded; docs/experiments.md, exp_text_ratio.sh).

Before this check a full start after a --smoke one in the same --out (both default to out/exp_text_pg19)
trained silently on the smoke's two books at vocabulary 400.

The trainer is $TRAINER, else $TRAIN_GPT2_LS, else the repository's ./train_gpt2_ls (`make` builds it).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TRAINER", os.environ.get("TRAIN_GPT2_LS", REPO / "train_gpt2_ls")))
SHARED = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))
SCRIPT = REPO / "scripts" / "exp_text_ratio.sh"
ENV = dict(os.environ, TRAINER=str(BIN), PYTHON=sys.executable, OMP_NUM_THREADS="1")
# the smallest smoke: one ratio, LS alone, one seed, one step, no plots
SMALL = ["--ratios", "2", "--key-ratio", "2", "--variants", "ls", "--key-seeds", "", "--steps", "1", "--jobs", "1",
         "--plots", "0"]


def sh(args, timeout=120, env=None):
    """the script with args, ENV (or env)"""
    return subprocess.run(["bash", str(SCRIPT)] + [str(a) for a in args], cwd=REPO, env=env or ENV,
                          capture_output=True, text=True, timeout=timeout)


def tree(d):
    """{relative path: (kind, size, mtime_ns, sha256 or link target)} of everything under d (links not followed)."""
    out = {}
    for p in sorted(Path(d).rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            out[str(p.relative_to(d))] = ("link", os.readlink(p))
        elif p.is_dir():
            out[str(p.relative_to(d))] = ("dir",)
        else:
            out[str(p.relative_to(d))] = ("file", st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def assert_refused(p, before, out, *expect):
    """One `error:` line on stderr holding every string of expect, a non-zero exit, nothing tokenized or trained,
    and nothing under out changed."""
    assert p.returncode != 0, p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
    for e in expect:
        assert e in p.stderr, f"expected {e!r} in: {p.stderr}"
    assert p.stdout == "", p.stdout  # no "== tokenizing", no run started
    assert tree(out) == before, "a refused start changed files under --out"


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory):
    """An --out of one finished --smoke run (r2_ls_s1, 1 step) on the smoke's data: PG-19's first two books,
    SentencePiece vocabulary 400 (made once; each test works on a copy)."""
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls` (or set TRAINER)")
    if not (SHARED / "pg19" / "pg45265.txt").exists():
        pytest.skip(f"no PG-19 books at {SHARED / 'pg19'} (set SHARED_DATA)")
    out = tmp_path_factory.mktemp("etr") / "out"
    p = sh(["--smoke", "--out", out, "--source", SHARED / "pg19"] + SMALL, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-2000:]
    assert "== tokenizing pg19" in p.stdout and (out / "runs" / "r2_ls_s1" / "DONE_00000001").exists()
    meta = json.loads((out / "data" / "meta.json").read_text())
    assert (meta["dataset"], meta["tokenizer"], meta["vocab_size"], len(meta["sources"])) == ("pg19", "sp", 400, 2)
    return out


@pytest.fixture
def out(smoke_out, tmp_path):
    """A copy of smoke_out of this test's own (links kept, times kept)."""
    d = tmp_path / "out"
    shutil.copytree(smoke_out, d, symlinks=True)
    return d


def test_full_start_on_smoke_data_is_refused(out):
    """The new user's trial: --smoke, then the full experiment in the same --out. The full start asks for
    vocabulary 1024 on every book; OUT/data holds the smoke's two books at 400: refused, nothing prepared or run."""
    before = tree(out)
    p = sh(["--out", out, "--source", SHARED / "pg19", "--ratios", "16", "--variants", "ls", "--key-seeds", "",
            "--steps", "2", "--jobs", "1", "--plots", "0"])
    data = out / "data"
    assert_refused(p, before, out,
                   f"error: {data} holds PG-19 from 2 books, tokenizer sp, vocabulary 400 (--smoke's data), "
                   "where this start asks for PG-19, tokenizer sp, vocabulary 1024 (the full experiment): "
                   "choose another --out for this experiment (--smoke and the full experiment share the default "
                   f"out/exp_text_pg19), or delete {data} to prepare it there again")
    assert not (out / "runs" / "r16_ls_s1").exists()


def test_other_corpus_is_refused_before_force_deletes_anything(out):
    """--corpus wikitext2 on OUT/data of PG-19: refused, and before --force looks at the runs (r2_ls_s1 is of
    other settings here, --steps 3, and would be deleted)."""
    before = tree(out)
    p = sh(["--smoke", "--corpus", "wikitext2", "--out", out, "--source", SHARED / "wikitext2", "--force"]
           + SMALL[:-6] + ["--steps", "3", "--jobs", "1", "--plots", "0"])
    assert_refused(p, before, out, f"error: {out / 'data'} holds PG-19 from 2 books, tokenizer sp, vocabulary 400",
                   "where this start asks for plain text (--corpus wikitext2), tokenizer sp, vocabulary 400",
                   "choose another --out")
    assert (out / "runs" / "r2_ls_s1" / "DONE_00000001").exists()


@pytest.mark.parametrize("meta, held", [
    ({"dataset": "text", "tokenizer": "sp", "vocab_size": 1024}, "plain text (--corpus wikitext2) from unknown files, "
                                                                 "tokenizer sp, vocabulary 1024"),
    ({"dataset": "pg19", "tokenizer": "gpt2", "vocab_size": 50257}, "tokenizer gpt2, vocabulary 50257"),
    ({"dataset": "pg19", "tokenizer": "sp", "vocab_size": 10000}, "tokenizer sp, vocabulary 10000"),
], ids=["corpus", "tokenizer", "vocabulary"])
def test_data_dir_of_other_data_is_refused(tmp_path, meta, held):
    """--data DIR of another corpus, tokenizer or vocabulary (here only its meta.json): refused, pointing at
    data/prepare.py; --out stays empty."""
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls` (or set TRAINER)")
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "out"
    p = sh(["--out", out, "--data", data, "--ratios", "16", "--variants", "ls", "--key-seeds", "", "--steps", "1"])
    assert p.returncode != 0 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"error: {data} holds "), p.stderr
    assert held in p.stderr and "asks for PG-19, tokenizer sp, vocabulary 1024 (the full experiment)" in p.stderr
    assert "give --data a directory of that data (data/prepare.py --dataset pg19 --tokenizer sp --vocab-size 1024" \
        in p.stderr, p.stderr
    assert p.stdout == "" and not out.exists() and sorted(os.listdir(data)) == ["meta.json"]


def test_smoke_of_other_books_is_refused(out, tmp_path):
    """A --smoke start whose --source's first two books are not those OUT/data was made from: refused
    (data/source_check.py, names and sizes)."""
    src = tmp_path / "books"
    src.mkdir()
    for b in sorted(p.name for p in (SHARED / "pg19").glob("*.txt"))[1:3]:  # the second and third book
        (src / b).symlink_to(SHARED / "pg19" / b)
    before = tree(out)
    p = sh(["--smoke", "--out", out, "--source", src, "--seeds", "3"] + SMALL)
    assert_refused(p, before, out, f"error: {out / 'data'} holds PG-19 made from 2 book(s), not the 2 first .txt "
                   f"books of {src} (", "drop --source to run on it, or choose another --out")


def test_matching_data_is_reused(out):
    """The same corpus, vocabulary and books (a new seed, so a new run): trains on OUT/data as it is, not
    prepared again, the trainer told the data's tokenizer and vocabulary (--expect-*); the same with --data."""
    data_before = tree(out / "data")
    p = sh(["--smoke", "--out", out, "--source", SHARED / "pg19", "--seeds", "3"] + SMALL)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-2000:]
    assert "== tokenizing" not in p.stdout and tree(out / "data") == data_before
    run = out / "runs" / "r2_ls_s3"
    assert (run / "DONE_00000001").exists(), p.stdout
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["train"]["expect_vocab"] == 400 and cfg["train"]["expect_tokenizer"] == "sp", cfg["train"]
    assert "--expect" not in (out / "runs" / "r2_ls_s3.args").read_text()  # not a setting: older runs resume
    other = out.parent / "other"
    p = sh(["--smoke", "--out", other, "--data", out / "data", "--seeds", "4"] + SMALL)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-2000:]
    assert (other / "runs" / "r2_ls_s4" / "DONE_00000001").exists() and not (other / "data").exists()
    assert tree(out / "data") == data_before


def test_wikitext2_smoke_data_is_reused_and_other_files_refused(tmp_path):
    """--corpus wikitext2 (prepared as plain text, whose meta.json names a file DIR/NAME): a second start on the
    same files reuses the data; a --source of other files is refused, the data as it was."""
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls` (or set TRAINER)")
    wt = SHARED / "wikitext2"
    if not (wt / "valid.txt").exists():
        pytest.skip(f"no WikiText-2 at {wt} (set SHARED_DATA)")
    out = tmp_path / "out"
    p = sh(["--smoke", "--corpus", "wikitext2", "--out", out, "--source", wt] + SMALL, timeout=300)
    assert p.returncode == 0 and "== tokenizing wikitext2" in p.stdout, p.stderr[-3000:] + p.stdout[-2000:]
    before = tree(out / "data")
    p = sh(["--smoke", "--corpus", "wikitext2", "--out", out, "--source", wt, "--seeds", "3"] + SMALL)
    assert p.returncode == 0 and "== tokenizing" not in p.stdout, p.stderr[-3000:] + p.stdout[-2000:]
    assert (out / "runs" / "r2_ls_s3" / "DONE_00000001").exists() and tree(out / "data") == before
    src = tmp_path / "files"
    src.mkdir()
    for name in sorted(p.name for p in wt.glob("*.txt"))[:2]:
        (src / f"copy_{name}").symlink_to(wt / name)
    before = tree(out)
    p = sh(["--smoke", "--corpus", "wikitext2", "--out", out, "--source", src, "--seeds", "4"] + SMALL)
    assert_refused(p, before, out, f"error: {out / 'data'} holds plain text (--corpus wikitext2) made from 2 book(s), "
                   f"not the 2 first .txt files of {src} (2 there not in the data (e.g. copy_")


def test_a_resumed_run_takes_the_data_expectation_from_its_record(smoke_out, tmp_path):
    """--expect-tokenizer/--expect-vocab are settings of a run (config.json): a new run is given them, a resumed
    one (-y 1) is not (the trainer takes them from the record), so a run made by an older script, which gave
    none, resumes as it was made, with no note and no history entry."""
    wrapper = tmp_path / "trainer.sh"
    calls = tmp_path / "calls.txt"
    wrapper.write_text(f'#!/bin/bash\necho "$*" >> {calls}\nexec {BIN} "$@"\n')
    wrapper.chmod(0o755)
    env = dict(ENV, TRAINER=str(wrapper))
    out = tmp_path / "out"  # its own start (a copy elsewhere would record another data directory)
    args = ["--smoke", "--out", out, "--data", smoke_out / "data"] + SMALL[:-6] + ["--steps", "6"] + SMALL[-4:]
    assert SMALL[-6] == "--steps" and SMALL[-4] == "--jobs", SMALL
    p = sh(args, env=env)  # by the wrapper both times: a run is continued only by the binary that trained it
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-2000:]
    calls.unlink()
    run = out / "runs" / "r2_ls_s1"
    for f in ("model_00000006.bin", "state_00000006_00000.bin", "DONE_00000006"):  # as if stopped after step 3
        (run / f).unlink()
    log_before = (out / "runs" / "r2_ls_s1.log").read_text()
    p = sh(args, env=env)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-2000:]
    assert "resume 1" in p.stdout, p.stdout
    lines = calls.read_text().splitlines()
    assert len(lines) == 1 and "-y 1" in lines[0] and "--expect" not in lines[0], lines
    log = (out / "runs" / "r2_ls_s1.log").read_text()[len(log_before):]
    assert not [x for x in log.splitlines() if x.startswith("note:") and "expect" in x], log
    after = json.loads((run / "config.json").read_text())
    assert not after.get("history"), after.get("history")
    assert after["train"]["expect_tokenizer"] == "sp" and after["train"]["expect_vocab"] == 400, after["train"]
    # a new run (another seed) is given them
    p = subprocess.run(["bash", str(SCRIPT)] + [str(a) for a in args + ["--seeds", "7"]], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-2000:]
    new = calls.read_text().splitlines()[1:]
    assert len(new) == 1 and "--expect-tokenizer sp --expect-vocab 400" in new[0] and "-y 0" in new[0], new
