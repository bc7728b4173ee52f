"""Were a data set's shards made from these books? Compares the .txt books of a PG-19 source directory
(the files data/prepare.py --dataset pg19 --source DIR reads) with the sources the data set's meta.json
records, by relative name and size (not by content: a book edited to the same size is not seen).

    python3 data/source_check.py META_JSON SOURCE_DIR

Exit 0: the same books. Exit 1: other books, one line on stdout saying how many and naming one. Exit 2:
it cannot tell (no readable meta.json with sources, no directory), one line on stdout.
Used by scripts/pack_pg19.sh and scripts/exp_pg19.sh when --source is given for data that exists.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sources import _txt_files  # noqa: E402  (the listing prepare.py uses)


def books_in(directory):
    """{relative name: bytes} of the non-empty .txt books under directory (empty ones prepare.py refuses)."""
    out = {}
    for name in _txt_files(directory):
        size = os.path.getsize(os.path.join(directory, name))
        if size > 0:
            out[name] = size
    return out


def recorded_books(meta):
    """{relative name: bytes} the meta.json's sources record, or None when it records none. The books left out
    as byte-for-byte copies of others ("duplicate_sources") were in the source directory too: counted."""
    src = meta.get("sources") if isinstance(meta, dict) else None
    if not isinstance(src, list) or not src:
        return None
    dup = meta.get("duplicate_sources") or []
    try:
        return {str(s["file"]): int(s["bytes"]) for s in src + (dup if isinstance(dup, list) else [])}
    except (KeyError, TypeError, ValueError):
        return None


def compare(recorded, given):
    """None when equal, else one phrase saying how the books differ."""
    if recorded == given:
        return None
    only_rec = sorted(set(recorded) - set(given))
    only_given = sorted(set(given) - set(recorded))
    resized = sorted(n for n in set(recorded) & set(given) if recorded[n] != given[n])
    parts = []
    if only_given:
        parts.append(f"{len(only_given)} there not in the data (e.g. {only_given[0]})")
    if only_rec:
        parts.append(f"{len(only_rec)} of the data's missing there (e.g. {only_rec[0]})")
    if resized:
        parts.append(f"{len(resized)} of another size (e.g. {resized[0]})")
    return "; ".join(parts)


def main(argv):
    if len(argv) != 3:
        print("usage: python3 data/source_check.py META_JSON SOURCE_DIR")
        return 2
    meta_path, source = argv[1], argv[2]
    if not os.path.isdir(source):
        print(f"{source} is not a directory")
        return 2
    try:
        with open(meta_path) as f:
            recorded = recorded_books(json.load(f))
    except (OSError, ValueError):
        recorded = None
    if recorded is None:
        print(f"{meta_path} records no source books")
        return 2
    given = books_in(source)
    why = compare(recorded, given)
    if why is None:
        return 0
    print(f"made from {len(recorded)} book(s), not the {len(given)} in {source} ({why})")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
