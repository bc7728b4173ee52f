#!/usr/bin/env python3
"""Packs a GPU lease's logs into the output folder so that every file in it comes back.

    python3 scripts/pack_lease_logs.py WORK OUT [--max-files 8] [--file-mib 16] [--total-mib 64]
                                       [--part-mib 15]

The device tool brings back at most --max-files files of at most --file-mib MiB each, --total-mib
MiB together (/work/.library/device/README.md). OUT already holds the report (report.txt,
report.json); this adds logs.tar.gz: every record under WORK (the work folder of
scripts/gpu_check.sh) whose name ends in .log, .json, .jsonl, .tsv, .txt, .md, .toml or .csv, under
names starting with WORK as given (e.g. build/gpu_check/logs/..., as results.tsv names the logs;
an absolute WORK: its folder name). Everything else (checkpoints model_*.bin and state_*.bin, token shards,
attention maps .npy, compiled binaries, markers) is left out. An archive over --part-mib is split
into logs.tar.gz.part0, .part1, ... of --part-mib each (join: cat logs.tar.gz.part* > logs.tar.gz),
as many as the free file slots allow. If the archive would still not fit (the slots, or the bytes
left beside the report), the largest records are left out of it until it fits. report.txt (created
if missing) ends with a "== logs:" section that names the archive, how to join its parts, what was
left out and why; the same lines go to stderr.
An earlier call's logs.tar.gz or parts in OUT are replaced; every other file under OUT, at any depth,
counts against the limits. Exit status: 0 packed; 1 when nothing
could be packed (no free file slot, no room) or OUT breaks a limit afterwards (a file of the report
itself too large): one error line naming it.
"""
import argparse
import io
import os
import sys
import tarfile

KEPT_SUFFIXES = (".log", ".json", ".jsonl", ".tsv", ".txt", ".md", ".toml", ".csv")
ARCHIVE = "logs.tar.gz"
MIB = 1 << 20
NOTE_ROOM = 64 * 1024  # bytes kept free for the lines appended to report.txt


class PackError(Exception):
    pass


def is_own_output(name):
    return name == ARCHIVE or name.startswith(ARCHIVE + ".part")


def files_under(folder):
    """{path: size} of every file under FOLDER, at any depth (the device tool counts them all)."""
    return {os.path.join(r, f): os.path.getsize(os.path.join(r, f))
            for r, _, fs in os.walk(folder) for f in fs if os.path.isfile(os.path.join(r, f))}


def collect(work, out):
    """(kept, left_out): kept = [(path, size)] of the records under WORK, left_out = {suffix: [count, bytes]}."""
    out_real = os.path.realpath(out)
    kept, left_out = [], {}
    for root, dirs, files in os.walk(work):
        if os.path.realpath(root) == out_real:  # OUT inside WORK: never the archive into itself
            dirs[:] = []
            continue
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            size = os.path.getsize(p)
            if f.endswith(KEPT_SUFFIXES):
                kept.append((p, size))
            else:
                suffix = os.path.splitext(f)[1] or "(no suffix)"
                entry = left_out.setdefault(suffix, [0, 0])
                entry[0] += 1
                entry[1] += size
    return kept, left_out


def make_archive(work, files):
    """The tar.gz of FILES (paths under WORK) as bytes; names start with WORK as given when it is relative
    (build/gpu_check/logs/..., as results.tsv names the logs), else with WORK's own folder name."""
    base = os.path.dirname(os.path.abspath(work)) if os.path.isabs(work) else "."
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for p, _ in files:
            tar.add(p, arcname=os.path.normpath(os.path.relpath(p, base)), recursive=False)
    return buf.getvalue()


def fit(work, kept, cap):
    """(archive bytes, dropped [(path, size)]): the largest records left out until the archive is <= CAP."""
    files = list(kept)
    dropped = []
    while True:
        data = make_archive(work, files)
        if len(data) <= cap:
            return data, dropped
        if not files:
            raise PackError(f"even an empty archive ({len(data)} bytes) exceeds the {cap} bytes left")
        raw = sum(s for _, s in files) or 1
        ratio = len(data) / raw  # compressed bytes per raw byte, to size the cut in one go
        excess = len(data) - cap
        files.sort(key=lambda f: f[1])
        cut = 0
        while files and (cut * ratio < excess or cut == 0):
            p, s = files.pop()
            dropped.append((p, s))
            cut += s


def mib(n):
    return f"{n / MIB:.1f} MiB"


def main(argv=None):
    ap = argparse.ArgumentParser(description="Pack a GPU lease's logs into OUT within the device tool's limits.")
    ap.add_argument("work", help="the work folder of scripts/gpu_check.sh (build/gpu_check, build/gpu_check_emu)")
    ap.add_argument("out", help="the folder that comes back ($OUT), holding the report")
    ap.add_argument("--max-files", type=int, default=8)
    ap.add_argument("--file-mib", type=float, default=16.0)
    ap.add_argument("--total-mib", type=float, default=64.0)
    ap.add_argument("--part-mib", type=float, default=15.0)
    a = ap.parse_args(argv)
    file_limit, total_limit, part = int(a.file_mib * MIB), int(a.total_mib * MIB), int(a.part_mib * MIB)
    try:
        if not 0 < part <= file_limit:
            raise PackError(f"--part-mib {a.part_mib} must be above 0 and at most --file-mib {a.file_mib}")
        if not os.path.isdir(a.work):
            raise PackError(f"work folder {a.work} not found; nothing to pack (did scripts/gpu_check.sh run?)")
        os.makedirs(a.out, exist_ok=True)
        for f in os.listdir(a.out):
            if is_own_output(f):
                os.remove(os.path.join(a.out, f))
        report = os.path.join(a.out, "report.txt")
        others = files_under(a.out)
        used, held = sum(others.values()), len(others)
        if report not in others:
            others[report] = 0  # created below for the note
        slots = a.max_files - len(others)
        room = total_limit - used - NOTE_ROOM
        if slots < 1 or room < 1:
            raise PackError(f"{a.out} already holds {held} files, {mib(used)}: no room for {ARCHIVE} within "
                            f"{a.max_files} files and {a.total_mib:g} MiB; remove what is not the report")
        cap = min(room, slots * part)
        kept, left_out = collect(a.work, a.out)
        data, dropped = fit(a.work, kept, cap)
        if len(data) <= part:
            names = [ARCHIVE]
        else:
            names = [f"{ARCHIVE}.part{i}" for i in range((len(data) + part - 1) // part)]
        for i, n in enumerate(names):
            with open(os.path.join(a.out, n), "wb") as f:
                f.write(data[i * part:(i + 1) * part])

        packed = len(kept) - len(dropped)
        note = [f"== logs: {packed} records of {a.work} (names ending {', '.join(KEPT_SUFFIXES)}), "
                f"{mib(sum(s for _, s in kept) - sum(s for _, s in dropped))}, in {mib(len(data))} compressed =="]
        if len(names) == 1:
            note.append(f"{ARCHIVE}: tar xzf {ARCHIVE}")
        else:
            note.append(f"{ARCHIVE} in {len(names)} parts of at most {a.part_mib:g} MiB ({', '.join(names)}; the device "
                        f"tool returns files of at most {a.file_mib:g} MiB): join them with "
                        f"`cat {ARCHIVE}.part* > {ARCHIVE} && tar xzf {ARCHIVE}`")
        if left_out:
            kinds = ", ".join(f"{n} {k}" for k, (n, _) in sorted(left_out.items()))
            note.append(f"left out (checkpoints, data, maps, binaries, markers): {kinds}; "
                        f"{mib(sum(b for _, b in left_out.values()))}")
        if dropped:
            note.append(f"left out to fit the room beside the report ({slots} files, {mib(cap)}), largest first: "
                        + ", ".join(f"{os.path.relpath(p, a.work)} ({mib(s)})" for p, s in dropped))
        with open(report, "a", encoding="utf-8") as f:
            f.write("\n".join(note) + "\n")
        print("\n".join(note), file=sys.stderr)

        sizes = files_under(a.out)
        big = [f"{os.path.relpath(f, a.out)} ({mib(s)})" for f, s in sizes.items() if s > file_limit]
        if len(sizes) > a.max_files or big or sum(sizes.values()) > total_limit:
            raise PackError(f"{a.out} breaks the device tool's limits ({len(sizes)} files of at most {a.max_files}, "
                            f"{mib(sum(sizes.values()))} of {a.total_mib:g} MiB, over {a.file_mib:g} MiB: "
                            f"{', '.join(big) or 'none'}): the files beside {ARCHIVE} are too many or too large")
    except (PackError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
