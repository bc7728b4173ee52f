"""PG-19: Gutenberg header/footer stripping on the real variants, the by-book split, the pipeline."""
import csv
import glob
import json
import os
import shutil

import pytest

import sources
from datatest_util import run_prepare, split_documents
from gutenberg import normalize_newlines, strip_gutenberg
from shards import read_split

# Phrases of Gutenberg boilerplate markers that must never survive stripping (checked lower-cased).
BOILERPLATE = ["start of this project gutenberg", "start of the project gutenberg", "end of this project gutenberg",
               "end of the project gutenberg", "end of project gutenberg", "small print!", "full license"]


def boilerplate_left(body):
    low = body.lower()
    return [p for p in BOILERPLATE if p in low]


# First-folio plays that end with the play itself (no footer in the file).
NO_FOOTER = {"pg2237.txt", "pg2247.txt", "pg2248.txt", "pg2250.txt"}


def book(shared_data, name):
    with open(os.path.join(shared_data, "pg19", name), encoding="utf-8") as f:
        return f.read()


def nonblank(text):
    return [ln for ln in text.split("\n") if ln.strip()]


# (book, variant, first body line, last body line), looked up by hand in the files
REAL_VARIANTS = [
    ("pg1001.txt", "*** START OF THIS ... ***, 'End of the Project Gutenberg EBook', *** END OF THIS",
     "Produced by Dennis McCarthy", "Thence we came forth to rebehold the stars."),
    ("pg1002.txt", "***START**THE SMALL PRINT ... *END*THE SMALL PRINT, 'End of The Project Gutenberg Etext'",
     "This etext was prepared by Dennis McCarthy, Atlanta, GA.", "Pure and disposed to mount unto the stars."),
    ("pg3023.txt", "*END THE SMALL PRINT (no second '*'), 'End of the Project Gutenberg Etext'",
     "Prepared by David Reed haradda@aol.com or davidr@inconnect.com", "Henry! Henry!"),
    ("pg148.txt", "START marker wrapped over two lines and given twice",
     "THE AUTOBIOGRAPHY OF BENJAMIN FRANKLIN", 'would demolish it."'),
    ("pg623.txt", "***START OF THE ...*** / ***END OF THE ...*** without spaces",
     "Transcribed from the 1886 Cassell & Company edition by David Price, email", "{5}  The priest his confessor."),
    ("pg778.txt", "footer is a one-line '*Project Gutenberg Etext of ...*' banner",
     "FIVE CHILDREN AND IT", "place.  It was in a -- But I must say no more."),
    ("pg2237.txt", "small print header, no footer at all",
     "Project Gutenberg's Etext of Shakespeare's The first Part of", "FINIS. THE Merry Wiues of Windsor."),
]


@pytest.mark.parametrize("name,variant,first,last", REAL_VARIANTS, ids=[v[0] for v in REAL_VARIANTS])
def test_strip_real_variants(shared_data, name, variant, first, last):
    body, info = strip_gutenberg(book(shared_data, name))
    lines = nonblank(body)
    assert lines[0] == first and lines[-1] == last, variant
    assert info == {"header": True, "footer": name not in NO_FOOTER}
    assert not boilerplate_left(body)
    assert "\r" not in body


def test_strip_every_book(shared_data):
    """All 201 books: a header is found, a footer in all but the 4 first-folio plays, and no marker line is left
    in the body. The body keeps most of the text unless the book is short (the licence is ~18 KB)."""
    paths = sorted(glob.glob(os.path.join(shared_data, "pg19", "*.txt")))
    assert len(paths) == 201
    for path in paths:
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            text = normalize_newlines(f.read())
        body, info = strip_gutenberg(text)
        assert info == {"header": True, "footer": name not in NO_FOOTER}, name
        assert not boilerplate_left(body), name
        assert len(text) - len(body) < 40_000, name  # only header + footer + licence removed


def test_strip_synthetic_layouts():
    text = "Title line\r\n\r\n*** START OF THIS PROJECT GUTENBERG EBOOK A LONG\r\nTITLE ***\r\n\r\nBody one.\r\n" \
           "Body two.\r\n\r\nEnd of the Project Gutenberg EBook of X\r\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\nlicence"
    assert strip_gutenberg(text) == ("Body one.\nBody two.", {"header": True, "footer": True})
    # no markers at all: the text is kept whole (and the caller is told)
    assert strip_gutenberg("just a text\n") == ("just a text", {"header": False, "footer": False})
    # a footer phrase before any header does not count as the footer
    text = "End of Project Gutenberg's intro\n*END*THE SMALL PRINT! x*END*\nBody\n*** END OF THE PROJECT GUTENBERG EBOOK"
    assert strip_gutenberg(text) == ("Body", {"header": True, "footer": True})


def test_by_book_split_is_deterministic(tmp_path):
    books = []
    for i in range(20):
        p = tmp_path / f"b{i:02d}.txt"
        p.write_text(f"book {i}\n")
        books.append(str(p))
    names = [os.path.basename(b) for b in books]
    a = sources.split_by_file(books, names, True, 0.1, seed=5)
    b = sources.split_by_file(books, names, True, 0.1, seed=5)
    assert a == b and len(a["val"]) == 2 and len(a["train"]) == 18
    assert {s.name for s in a["train"]}.isdisjoint({s.name for s in a["val"]})
    assert {s.name for s in a["train"] + a["val"]} == set(names)
    vals = {tuple(s.name for s in sources.split_by_file(books, names, True, 0.1, seed)["val"]) for seed in range(10)}
    assert len(vals) > 1  # the seed decides which books
    tiny = sources.split_by_file(books[:3], names[:3], True, 0.01, seed=0)
    assert len(tiny["val"]) == 1 and len(tiny["train"]) == 2  # at least one book in val


@pytest.fixture(scope="module")
def small_pg19(tmp_path_factory, shared_data):
    """Six short real books (every header/footer variant above that is short enough) in a temp directory."""
    src = tmp_path_factory.mktemp("pg19src")
    for name in ("pg1063.txt", "pg1064.txt", "pg14304.txt", "pg15.txt", "pg45265.txt", "pg1080.txt"):
        os.symlink(os.path.join(shared_data, "pg19", name), src / name)
    return src


def test_pg19_pipeline(small_pg19, gpt2_dir, gpt2_enc, shared_data, tmp_path):
    out = tmp_path / "out"
    run_prepare("--dataset", "pg19", "--source", small_pg19, "--out", out, "--tokenizer", "gpt2",
                "--gpt2-bpe", gpt2_dir, "--val-fraction", 0.3, "--seed", 3, "--workers", 2)
    meta = json.loads((out / "meta.json").read_text())
    val_books = meta["val_books"]
    assert len(val_books) == 2  # round(0.3 * 6)
    expected = sources.split_by_file([str(small_pg19 / n) for n in sorted(os.listdir(small_pg19))],
                                     sorted(os.listdir(small_pg19)), True, 0.3, 3)
    assert val_books == [s.name for s in expected["val"]]
    for split in ("train", "val"):
        names = [s.name for s in expected[split]]
        docs = split_documents(read_split(str(out), split).tolist(), 50256)
        assert len(docs) == len(names) == meta["num_documents"][split]
        for name, doc in zip(names, docs):  # each document is exactly the stripped book, in name order
            assert gpt2_enc.decode(doc) == strip_gutenberg(book(shared_data, name))[0], name
    with open(os.path.join(shared_data, "pg19", "books.tsv"), encoding="utf-8") as f:
        digests = {row["file"]: row["sha256"] for row in csv.DictReader(f, delimiter="\t")}
    assert {s["file"]: s["sha256"] for s in meta["sources"]} == {n: digests[n] for n in os.listdir(small_pg19)}
    for s in meta["sources"]:
        assert s["splits"] == (["val"] if s["file"] in val_books else ["train"])


def test_books_without_markers_are_noted_on_stderr(gpt2_dir, tmp_path):
    """A book without Gutenberg markers is kept whole; the notes saying so are diagnostics (stderr), stdout
    keeps only the progress lines."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):  # marker-less books named by their Gutenberg id (DeepMind's layout); b3.txt: by its markers
        (src / f"10{i}.txt").write_text(f"Book {i}.\n" + "A line of plain text without any marker.\n" * 20)
    (src / "b3.txt").write_text("*** START OF THIS PROJECT GUTENBERG EBOOK B3 ***\nThe body.\n"
                                "*** END OF THIS PROJECT GUTENBERG EBOOK B3 ***\n")
    proc = run_prepare("--dataset", "pg19", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                       "--gpt2-bpe", gpt2_dir, "--val-fraction", 0.25, "--workers", 1)
    notes = [ln for ln in proc.stderr.splitlines() if ln.startswith("note: ") and "Gutenberg" in ln]
    assert len(notes) == 6 and "note: 100.txt: no Gutenberg header marker found, kept from its first line" in notes
    assert not any("b3.txt" in n for n in notes), notes
    assert "Gutenberg" not in proc.stdout, proc.stdout


def not_gutenberg(name, src):
    """stderr of --dataset pg19 refusing the file name of src as no Gutenberg book."""
    return (f"error: --dataset pg19: {name} in {src} is not a Project Gutenberg book by its name (its Gutenberg id, "
            "1001.txt or pg1001.txt) nor by a Gutenberg header or footer, and every file of a pg19 --source must be "
            "one, or its shards would be labelled pg19; take it out of the book directory, or give --dataset text for "
            "other books\n")


def test_files_that_are_no_gutenberg_books_are_refused(gpt2_dir, tmp_path):
    """review: --dataset pg19 of WikiText (or one's own text) labelled its shards pg19 with a note per file.
    A file that is no Gutenberg book (by its name or a header or footer) is refused, naming the first, before
    anything is tokenized, nothing written; --dataset text takes the same files."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"b{i}.txt").write_text(f"Book {i}.\n" + "A line of plain text without any marker.\n" * 20)
    proc = run_prepare("--dataset", "pg19", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                       "--gpt2-bpe", gpt2_dir, "--workers", 1, check=False)
    assert proc.returncode == 1 and proc.stderr == not_gutenberg("b0.txt", src), proc.stderr
    assert not (tmp_path / "out").exists()
    run_prepare("--dataset", "text", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                "--gpt2-bpe", gpt2_dir, "--workers", 1)
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["dataset"] == "text"


def test_deepminds_marker_less_books_named_by_id_are_pg19(gpt2_dir, tmp_path):
    """review: DeepMind's PG-19 release has the Gutenberg boilerplate removed: its books (NNNN.txt, the
    Gutenberg id) carry no marker, and the marker check refused the full PG-19. A book named by its id is
    PG-19's; each marker-less one is still noted."""
    src = tmp_path / "train"
    src.mkdir()
    for i in (1001, 1002, 1003):
        (src / f"{i}.txt").write_text(f"Produced by a volunteer. Book {i}.\n" + "A line of the book.\n" * 20)
    proc = run_prepare("--dataset", "pg19", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                       "--gpt2-bpe", gpt2_dir, "--workers", 1)
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["dataset"] == "pg19"
    assert "note: 1001.txt: no Gutenberg header marker found, kept from its first line" in proc.stderr, proc.stderr


def test_numbered_files_with_leading_zeros_are_no_gutenberg_ids(gpt2_dir, tmp_path):
    """review: one's own chapters 01.txt 02.txt 03.txt (no marker) passed as PG-19 books named by their Gutenberg
    id (`\\d+`): an id has no leading zero. Refused, naming the first, nothing written."""
    src = tmp_path / "chapters"
    src.mkdir()
    for i in (1, 2, 3):
        (src / f"0{i}.txt").write_text(f"Chapter {i}.\n" + "A line of my own novel.\n" * 20)
    proc = run_prepare("--dataset", "pg19", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                       "--gpt2-bpe", gpt2_dir, "--workers", 1, check=False)
    assert proc.returncode == 1 and proc.stderr == not_gutenberg("01.txt", src), proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["chapters"]


def test_every_file_of_a_pg19_source_must_be_a_gutenberg_book(gpt2_dir, tmp_path):
    """review: one file named by a Gutenberg id accepted the whole directory (`any`): one's own books beside it
    were labelled pg19. Every file must be a Gutenberg book, by its name or a marker; the first that is not is
    named (in a subdirectory: its path below --source)."""
    src = tmp_path / "books"
    (src / "mine").mkdir(parents=True)
    for i in (1001, 1002):
        (src / f"{i}.txt").write_text(f"Book {i}.\n" + "A line of the book.\n" * 20)
    (src / "b3.txt").write_text("*** START OF THIS PROJECT GUTENBERG EBOOK B3 ***\nThe body.\n"
                                "*** END OF THIS PROJECT GUTENBERG EBOOK B3 ***\n")
    (src / "mine" / "novel.txt").write_text("My novel.\n" + "A line of my own.\n" * 20)
    (src / "zz.txt").write_text("More of my own.\n" * 20)
    proc = run_prepare("--dataset", "pg19", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                       "--gpt2-bpe", gpt2_dir, "--workers", 1, check=False)
    assert proc.returncode == 1 and proc.stderr == not_gutenberg(os.path.join("mine", "novel.txt"), src), proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["books"]
    shutil.rmtree(src / "mine")
    proc = run_prepare("--dataset", "pg19", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                       "--gpt2-bpe", gpt2_dir, "--workers", 1, check=False)
    assert proc.returncode == 1 and proc.stderr == not_gutenberg("zz.txt", src), proc.stderr
    (src / "zz.txt").unlink()  # the books named by id and the one with markers: PG-19
    run_prepare("--dataset", "pg19", "--source", src, "--out", tmp_path / "out", "--tokenizer", "gpt2",
                "--gpt2-bpe", gpt2_dir, "--workers", 1)
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["dataset"] == "pg19"


def test_the_local_pg19_books_are_all_gutenberg_books(shared_data, monkeypatch):
    """../shared/data/pg19 (pg1001.txt ..., books.tsv and a LICENSE beside them) passes the every-file check as
    it is, by the books' names alone (no file is read for a marker)."""
    monkeypatch.setattr(sources, "_has_gutenberg_marker", lambda path: pytest.fail(f"{path} was read"))
    root = os.path.join(shared_data, "pg19")
    splits = sources.dataset_splits("pg19", [root], 0.05, 1337)
    specs = splits["train"] + splits["val"]
    assert len(specs) == len(glob.glob(os.path.join(root, "*.txt"))) > 100
    sources.check_gutenberg_books(specs, root)


def test_a_marker_in_a_long_files_last_bytes_is_found(tmp_path):
    """The marker check reads a file's ends only: a footer in the last 64 KiB of a long file is seen."""
    book = tmp_path / "long.txt"
    book.write_text("A line of the book.\n" * 20000 + "*** END OF THIS PROJECT GUTENBERG EBOOK X ***\n")
    assert book.stat().st_size > 4 * sources._MARKER_SPAN
    spec = sources.DocSpec(str(book), "long.txt", True)
    sources.check_gutenberg_books([spec], str(tmp_path))
    book.write_text("A line of the book.\n" * 20000)
    with pytest.raises(sources.PrepareError):
        sources.check_gutenberg_books([spec], str(tmp_path))
