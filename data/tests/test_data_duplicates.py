"""Source files with byte-identical content under different names (a Gutenberg book saved twice): the first by
path is kept, the later ones are left out before the split, so validation is never training text; one note on
stderr, meta.json "duplicate_sources" lists them; data/source_check.py counts them as the source's books."""
import json
import os
import subprocess
import sys

from datatest_util import DATA_DIR, run_prepare, split_documents
from shards import read_split

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
        "MENENIUS:\nWhat work's, my countrymen, in hand? where go you\nWith bats and clubs?\n",
        "CORIOLANUS:\nThank you, sir: farewell. What's the matter, you dissentious rogues?\n")


def corpus(d, names_texts):
    d.mkdir(parents=True, exist_ok=True)
    for name, text in names_texts:
        (d / name).write_text(text)
    return d


def prepare(src, out, gpt2_dir, *extra):
    return run_prepare("--dataset", "text", "--source", *src, "--out", out, "--tokenizer", "gpt2", "--gpt2-bpe",
                       gpt2_dir, "--workers", 1, *extra)


def notes(proc):
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("note:")]


def test_a_copy_under_another_name_is_left_out_before_the_split(tmp_path, gpt2_dir, gpt2_enc):
    """The new-user trial: a.txt and b.txt the same text, c.txt another; --val-fraction 0.34 --seed 1 put a.txt in
    validation and b.txt in training. Now b.txt is left out (a.txt is first by path), with one note."""
    src = corpus(tmp_path / "corpus", [("a.txt", TEXT[0] * 40), ("b.txt", TEXT[0] * 40), ("c.txt", TEXT[1] * 40)])
    out = tmp_path / "out"
    p = prepare([src], out, gpt2_dir, "--val-fraction", 0.34, "--seed", 1)
    assert notes(p) == ['note: left out 1 source file whose bytes repeat an earlier one (corpus/b.txt = '
                        'corpus/a.txt; the first by path is kept), so one text is never in both training and '
                        'validation; meta.json "duplicate_sources" lists it'], p.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert [s["file"] for s in meta["sources"]] == ["corpus/a.txt", "corpus/c.txt"]
    size = len((TEXT[0] * 40).encode())
    assert meta["duplicate_sources"] == [{"file": "corpus/b.txt", "same_as": "corpus/a.txt", "bytes": size,
                                          "sha256": meta["sources"][0]["sha256"]}]
    assert "corpus/b.txt" not in p.stderr.split("lists it")[1]  # no "source corpus/b.txt: ..." line
    docs = {s: [gpt2_enc.decode(d.tolist()) for d in split_documents(read_split(str(out), s), 50256)]
            for s in ("train", "val")}
    assert not set(docs["train"]) & set(docs["val"]), "validation text is training text"
    assert sorted(docs["train"] + docs["val"]) == sorted([TEXT[0] * 40, TEXT[1] * 40])
    assert meta["num_documents"] == {"train": 1, "val": 1}


def test_left_out_files_and_split_do_not_depend_on_the_order_given(tmp_path, gpt2_dir):
    """The files given one by one in another order (copies first): the same file is kept, the same split, the
    same bytes; two runs are byte-identical; files of equal size but other bytes are both kept."""
    d = corpus(tmp_path / "c", [("a.txt", TEXT[0] * 30), ("b.txt", TEXT[0] * 30), ("d.txt", TEXT[2] * 30),
                                ("e.txt", TEXT[2] * 30), ("f.txt", TEXT[1] * 30)])
    same_size = TEXT[1] * 30
    (d / "g.txt").write_text(same_size[::-1])  # the size of f.txt, other bytes: kept
    outs = []
    for i, order in enumerate([["a", "b", "d", "e", "f", "g"], ["e", "g", "b", "f", "d", "a"],
                               ["e", "g", "b", "f", "d", "a"]]):
        out = tmp_path / f"out{i}"
        p = prepare([d / f"{n}.txt" for n in order], out, gpt2_dir, "--val-fraction", 0.3)
        assert len(notes(p)) == 1 and "left out 2 source files" in notes(p)[0] and "e.g. b.txt = a.txt" in p.stderr
        outs.append(out)
    metas = [json.loads((o / "meta.json").read_text()) for o in outs]
    for m in metas:
        assert [s["file"] for s in m["sources"]] == ["a.txt", "d.txt", "f.txt", "g.txt"]
        assert [(s["file"], s["same_as"]) for s in m["duplicate_sources"]] == [("b.txt", "a.txt"), ("e.txt", "d.txt")]
        assert m["sources"] == metas[0]["sources"]
    for name in sorted(os.listdir(outs[0])):
        if name != "meta.json":  # its args name the --source and --out given
            assert all((o / name).read_bytes() == (outs[0] / name).read_bytes() for o in outs), name
    assert (outs[1] / "meta.json").read_text() == (outs[2] / "meta.json").read_text().replace("out2", "out1")


def test_copies_only_leave_one_file_split_by_characters(tmp_path, gpt2_dir):
    """Every file the same text: one file is left, split by characters as one file is."""
    src = corpus(tmp_path / "corpus", [("x.txt", TEXT[1] * 50), ("y.txt", TEXT[1] * 50)])
    p = prepare([src], tmp_path / "out", gpt2_dir)
    assert "corpus/y.txt = corpus/x.txt" in notes(p)[0] and "(split by characters)" in p.stderr
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert [s["file"] for s in meta["sources"]] == ["corpus/x.txt"] and meta["sources"][0]["splits"] == ["train", "val"]


def test_no_copies_no_note(tmp_path, gpt2_dir):
    src = corpus(tmp_path / "corpus", [("a.txt", TEXT[0] * 20), ("b.txt", TEXT[1] * 20)])
    p = prepare([src], tmp_path / "out", gpt2_dir)
    assert notes(p) == [], p.stderr
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["duplicate_sources"] == []


def test_pg19_copy_of_a_book_is_left_out_and_source_check_counts_it(tmp_path, gpt2_dir):
    """pg19 takes the same rule (the 201 local books hold no copy, so their data set is unchanged); the book left
    out is still one of the source directory's books for data/source_check.py (pack_pg19.sh, exp_pg19.sh)."""
    book = "*** START OF THIS PROJECT GUTENBERG EBOOK X ***\n{}\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\n"
    src = corpus(tmp_path / "books", [("pg1.txt", book.format(TEXT[0] * 20)), ("pg2.txt", book.format(TEXT[1] * 20)),
                                      ("pg3.txt", book.format(TEXT[2] * 20)), ("pg9.txt", book.format(TEXT[0] * 20))])
    out = tmp_path / "out"
    p = run_prepare("--dataset", "pg19", "--source", src, "--out", out, "--tokenizer", "gpt2", "--gpt2-bpe", gpt2_dir,
                    "--workers", 1, "--val-fraction", 0.3)
    assert notes(p) == ['note: left out 1 source file whose bytes repeat an earlier one (pg9.txt = pg1.txt; the first '
                        'by path is kept), so one text is never in both training and validation; meta.json '
                        '"duplicate_sources" lists it'], p.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert [s["file"] for s in meta["sources"]] == ["pg1.txt", "pg2.txt", "pg3.txt"]
    assert "pg9.txt" not in meta["val_books"] and meta["num_documents"]["train"] + meta["num_documents"]["val"] == 3
    check = [sys.executable, os.path.join(DATA_DIR, "source_check.py"), str(out / "meta.json")]
    assert subprocess.run(check + [str(src)], capture_output=True, text=True).returncode == 0
    (src / "pg9.txt").unlink()  # the source without the copy is another set of books
    r = subprocess.run(check + [str(src)], capture_output=True, text=True)
    assert r.returncode == 1 and "missing there (e.g. pg9.txt)" in r.stdout, r.stdout


def test_pg19_books_all_copies_of_one_is_refused(tmp_path, gpt2_dir):
    src = corpus(tmp_path / "books", [("pg1.txt", TEXT[0] * 20), ("pg2.txt", TEXT[0] * 20)])
    p = run_prepare("--dataset", "pg19", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                    "--gpt2-bpe", gpt2_dir, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: the 2 books in"), p.stderr
    assert "pg2.txt = pg1.txt" in lines[0] and "add other books to --source" in lines[0]
    assert not (tmp_path / "out").exists()
