"""Where the documents of each split come from (tinyshakespeare, pg19, text), without reading them yet.

A document is described by a small picklable DocSpec so worker processes can read it themselves:
the file, whether to strip a Gutenberg header/footer, and an optional character range. Every text is
read as UTF-8 with newlines normalized (CRLF and CR -> LF, BOM dropped; see gutenberg.normalize_newlines).
"""
import hashlib
import os
import re
from typing import NamedTuple, Optional

import numpy as np

from errors import PrepareError
from gutenberg import normalize_newlines, strip_gutenberg
from text_tokenizers import sha256_file


class DocSpec(NamedTuple):
    path: str                 # absolute path of the file
    name: str                 # path relative to --source (shown in meta.json)
    gutenberg: bool           # strip the Project Gutenberg header and footer
    lo: Optional[int] = None  # character range [lo, hi) of the normalized text; None = whole file
    hi: Optional[int] = None


def read_text(path):
    """A file's text as UTF-8 with normalized newlines; one-line errors for missing/binary files."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise PrepareError(f"cannot read {path}: {e.strerror}; check --source") from None
    try:
        return normalize_newlines(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise PrepareError(f"{path} is not UTF-8 (byte {e.start}); convert it (e.g. iconv -t utf-8) or leave it out") from None


def load_document(spec):
    """Return (text, info) for a DocSpec; info["header"]/["footer"] say whether Gutenberg markers were found."""
    text = read_text(spec.path)
    info = {}
    if spec.gutenberg:
        text, info = strip_gutenberg(text)
    if spec.lo is not None or spec.hi is not None:
        text = text[spec.lo: spec.hi]
    return text, info


# A PG-19 book's file name: its Gutenberg id (DeepMind's release: 1001.txt; ../shared/data/pg19: pg1001.txt);
# an id has no leading zero, so one's own numbered chapters (01.txt, 02.txt) are no Gutenberg names
_GUTENBERG_NAME_RE = re.compile(r"^(pg)?[1-9]\d*\.txt$")
_MARKER_SPAN = 1 << 16  # bytes at each end of a file where a Gutenberg header or footer is looked for


def _has_gutenberg_marker(path):
    """Whether a file's first or last 64 KiB hold a Gutenberg header or footer marker (the ends only: a
    marker-less set is read no further than that)."""
    with open(path, "rb") as f:
        head = f.read(_MARKER_SPAN)
        f.seek(max(0, os.path.getsize(path) - _MARKER_SPAN))
        tail = f.read()
    _, info = strip_gutenberg(head.decode("utf-8", "ignore") + "\n" + tail.decode("utf-8", "ignore"))
    return info["header"] or info["footer"]


def check_gutenberg_books(specs, root):
    """--dataset pg19 of a directory whose files are not all Project Gutenberg books (WikiText, one's own text,
    a book of one's own among Gutenberg's) would label their shards pg19 in meta.json: refused, before anything
    is tokenized, naming the first file (by name) that is one neither by its name (its Gutenberg id, no leading
    zero: DeepMind's PG-19 release has the boilerplate removed, so its books carry no marker) nor by a Gutenberg
    header or footer marker (the local books keep them). A file's name is checked first; only a file whose name
    is no id is read, at its ends."""
    for spec in sorted(specs, key=lambda s: s.name):
        if _GUTENBERG_NAME_RE.match(os.path.basename(spec.path)) or _has_gutenberg_marker(spec.path):
            continue
        raise PrepareError(f"--dataset pg19: {spec.name} in {root} is not a Project Gutenberg book by its name (its "
                           "Gutenberg id, 1001.txt or pg1001.txt) nor by a Gutenberg header or footer, and every "
                           "file of a pg19 --source must be one, or its shards would be labelled pg19; take it out "
                           "of the book directory, or give --dataset text for other books")


def _check_file(path):
    if not os.path.exists(path):
        raise PrepareError(f"source {path} does not exist; pass an existing file or directory with --source")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise PrepareError(f"source {path} is empty; pass a file with text in it")


def _files(directory, txt=True):
    """The *.txt files under directory (txt=False: the other files), recursively, hidden entries skipped, as
    paths relative to it, sorted."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.endswith(".txt") == txt and not name.startswith("."):
                found.append(os.path.relpath(os.path.join(root, name), directory))
    return sorted(found)


def _txt_files(directory):
    """Every *.txt file under directory (recursively, hidden entries skipped), sorted by relative path."""
    return _files(directory)


def char_split(path, name, val_fraction):
    """One file, the last val_fraction of its characters are validation (nanoGPT): one document per split."""
    n = len(read_text(path))
    if n == 0:
        raise PrepareError(f"source {path} has no text; pass a file with text in it")
    cut = int(n * (1 - val_fraction))
    if cut == 0 or cut == n:
        raise PrepareError(f"source {path} ({n} characters) is too short to split with --val-fraction {val_fraction}")
    return {"train": [DocSpec(path, name, False, 0, cut)], "val": [DocSpec(path, name, False, cut, None)]}


def split_by_file(paths, names, gutenberg, val_fraction, seed):
    """Documents = files (`paths` sorted by the caller); max(1, round(val_fraction * n)) of them, picked by a
    permutation drawn from `seed`, are validation. Each split keeps the files in that order."""
    n = len(paths)
    if n < 2:
        raise PrepareError(f"a by-file train/val split needs at least 2 files, found {n}; add files to --source")
    n_val = min(n - 1, max(1, int(round(val_fraction * n))))
    perm = np.random.default_rng(seed).permutation(n)
    val = set(int(i) for i in perm[:n_val])
    specs = [DocSpec(p, nm, gutenberg) for p, nm in zip(paths, names)]
    return {"train": [s for i, s in enumerate(specs) if i not in val],
            "val": [s for i, s in enumerate(specs) if i in val]}


def drop_duplicates(paths, names):
    """(paths, names, left_out): the files whose bytes repeat an earlier file's (in the order given: the split's
    path order) left out, so one text under two names (a Gutenberg book saved twice) cannot land in training
    and in validation. left_out: [{"file", "same_as", "bytes", "sha256"}] in that order, "same_as" the name of
    the first file with those bytes, which is kept. Only files of equal size are hashed."""
    by_size = {}
    for i, p in enumerate(paths):
        by_size.setdefault(os.path.getsize(p), []).append(i)
    first, dropped = {}, {}
    for size, idx in by_size.items():
        if len(idx) < 2:
            continue
        for i in idx:  # in the given order: the first of each content is kept
            digest = sha256_file(paths[i])
            if (size, digest) in first:
                dropped[i] = {"file": names[i], "same_as": names[first[(size, digest)]], "bytes": size,
                              "sha256": digest}
            else:
                first[(size, digest)] = i
    keep = [i for i in range(len(paths)) if i not in dropped]
    return [paths[i] for i in keep], [names[i] for i in keep], [dropped[i] for i in sorted(dropped)]


def dataset_splits(dataset, sources, val_fraction, seed):
    """{"train": [DocSpec], "val": [DocSpec], "left_out": [...], "not_txt": [...]} for tinyshakespeare, pg19 or
    text. `sources`: list of paths. "left_out": the files left out because their bytes repeat an earlier one's
    (drop_duplicates; pg19 and text), [] otherwise. "not_txt": for text, the files of a --source directory not
    named *.txt, which are not read (a directory's paths, as given); pg19's directory holds its metadata
    (books.tsv, LICENSE...) beside the books, which is no text to name."""
    splits = _dataset_splits(dataset, sources, val_fraction, seed)
    splits.setdefault("left_out", [])
    splits["not_txt"] = [os.path.join(s, nm) for s in sources if dataset == "text" and os.path.isdir(s)
                         for nm in _files(s, txt=False)]
    return splits


# char-rnn's tiny Shakespeare (llm.c's starter corpus; ../shared/data/README.md): the one text --dataset
# tinyshakespeare names (the file's sha256; its text has LF newlines and no byte-order mark)
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def _dataset_splits(dataset, sources, val_fraction, seed):
    for s in sources:
        _check_file(s)
    if dataset == "tinyshakespeare":
        if len(sources) != 1 or not os.path.isfile(sources[0]):
            raise PrepareError("tinyshakespeare needs --source pointing at its one input.txt file")
        path = os.path.abspath(sources[0])
        # the text as tokenized (newlines normalized, no byte-order mark): a CRLF copy makes the same shards
        digest = hashlib.sha256(read_text(path).encode("utf-8")).hexdigest()
        if digest != TINYSHAKESPEARE_SHA256:
            raise PrepareError(f"--dataset tinyshakespeare: {sources[0]} is not tiny Shakespeare's input.txt "
                               f"({os.path.getsize(path):,} bytes, its text's sha256 {digest[:12]}...; that file's is "
                               f"{TINYSHAKESPEARE_SHA256[:12]}..., 1,115,394 bytes), so its shards would be labelled "
                               "tinyshakespeare; give that file, or --dataset text --val-fraction 0.1 for another (one "
                               "file is split by characters alike)")
        return char_split(path, os.path.basename(path), val_fraction)
    if dataset == "pg19":
        if len(sources) != 1 or not os.path.isdir(sources[0]):
            raise PrepareError("pg19 needs --source pointing at a directory of Project Gutenberg .txt books")
        root = os.path.abspath(sources[0])
        names = _txt_files(root)
        if not names:
            raise PrepareError(f"no .txt books in {root}; point --source at the PG-19 book directory")
        paths = [os.path.join(root, nm) for nm in names]
        for p in paths:
            if os.path.getsize(p) == 0:
                raise PrepareError(f"book {p} is empty; remove it from --source")
        paths, names, left_out = drop_duplicates(paths, names)
        if len(paths) < 2 and left_out:
            raise PrepareError(f"the {len(left_out) + 1} books in {root} all hold the same bytes (e.g. "
                               f"{left_out[0]['file']} = {left_out[0]['same_as']}), so there is one book, and a "
                               "by-book split needs at least 2; add other books to --source")
        return {**split_by_file(paths, names, True, val_fraction, seed), "left_out": left_out}
    if dataset == "text":
        paths, names = [], []
        for s in sources:
            if os.path.isdir(s):
                found = _txt_files(s)
                paths += [os.path.abspath(os.path.join(s, nm)) for nm in found]
                names += [os.path.join(os.path.basename(os.path.normpath(s)), nm) for nm in found]
            else:
                paths.append(os.path.abspath(s))
                names.append(os.path.basename(s))
        if not paths:
            raise PrepareError(f"no .txt files in {', '.join(sources)}; pass text files or a directory holding *.txt")
        # one file given twice (alone and in its directory, twice, or through a link) would be tokenized
        # twice, possibly into both splits: the same text in training and validation
        seen = {}
        for p, nm in zip(paths, names):
            real = os.path.realpath(p)
            if real in seen:
                raise PrepareError(f"--source: {real} is given twice (as {seen[real]} and as {nm}), so its text "
                                   "would be tokenized twice, possibly into training and validation; give each "
                                   "file once")
            seen[real] = nm
        paths_nonempty = [(p, nm) for p, nm in zip(paths, names) if os.path.getsize(p) > 0]
        if not paths_nonempty:
            raise PrepareError(f"every file in {', '.join(sources)} is empty; pass files with text in them")
        # sorted by path, as pg19's books: the split (a permutation of the files' indices) must not depend on
        # the order the files were given in (a new-user trial: valid.txt test.txt and test.txt valid.txt
        # split the other way round)
        paths_nonempty.sort()
        paths, names = [p for p, _ in paths_nonempty], [nm for _, nm in paths_nonempty]
        # one text under two names (copies): the later ones in that order are left out, before the split
        paths, names, left_out = drop_duplicates(paths, names)
        if len(paths) == 1:
            return {**char_split(paths[0], names[0], val_fraction), "left_out": left_out}
        return {**split_by_file(paths, names, False, val_fraction, seed), "left_out": left_out}
    raise PrepareError(f"unknown dataset {dataset}")
