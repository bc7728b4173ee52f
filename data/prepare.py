"""Text -> llm.c token shards (train_000000.bin, val_000000.bin, ...), tokenizer.bin and meta.json.

    python3 data/prepare.py --dataset tinyshakespeare --source ../shared/data/tinyshakespeare/input.txt \
        --out data/shards/tinyshakespeare_gpt2 --tokenizer gpt2 --gpt2-bpe ../shared/data/gpt2
    python3 data/prepare.py --dataset pg19 --source ../shared/data/pg19 --out data/shards/pg19_sp --tokenizer sp
    python3 data/prepare.py --dataset synthetic --out data/shards/synthetic

Data sets, tokenizers and the synthetic language: docs/data.md. File formats: docs/formats.md.
"""
import argparse
import collections
import concurrent.futures
import contextlib
import copy
import itertools
import json
import multiprocessing
import os
import re
import secrets
import shutil
import signal
import sys
import time

import numpy as np
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synthetic  # noqa: E402
import text_tokenizers as tk  # noqa: E402
from errors import PrepareError  # noqa: E402
from shards import ShardWriter, shard_version_for_vocab, MAX_SHARD_TOKENS  # noqa: E402
from sources import check_gutenberg_books, dataset_splits, load_document  # noqa: E402

DEFAULT_VAL_FRACTION = {"tinyshakespeare": 0.1, "pg19": 0.05, "text": 0.05, "synthetic": 0.05}
DEFAULT_SP_VOCAB = 10000
CHUNK_BYTES = 4 << 20  # documents are sent to the workers in chunks of about this many bytes
OUTPUT_RE = re.compile(r"^((train|val)_\d{6}\.bin|tokenizer\.bin|tokenizer\.model|meta\.json)$")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + message
        self.exit(2, f"error: {message}; see python3 data/prepare.py --help\n")

    def parse_args(self, args=None, namespace=None):
        """Unknown arguments are reported first: argparse checks the required ones before it reports unknown
        ones, so a misspelled required flag (--datset) would otherwise only say that --dataset is missing."""
        required = [a for a in self._actions if a.required]
        for a in required:
            a.required = False
        try:
            _, unknown = self.parse_known_args(args, namespace)
        finally:
            for a in required:
                a.required = True
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}{self._dash_hint(unknown)}")
        return super().parse_args(args, namespace)

    def _dash_hint(self, unknown):
        """The hint ' (did you mean --vocab-size?)' for the unknown flags spelt with underscores (nanoGPT's
        and Hugging Face's style) whose dashed spelling is a flag here; '' when none is."""
        dashed = [w.split("=", 1)[0].replace("_", "-") for w in unknown if w.startswith("--") and "_" in w]
        known = [f for f in dashed if f in self._option_string_actions]
        return f" (did you mean {', '.join(known)}?)" if known else ""


def given_options(parser, argv):
    """The dests of the options argv gives (abbreviated or --opt=value too): argv parsed again with every
    default suppressed, so only the given ones reach the namespace."""
    quiet = copy.deepcopy(parser)
    for action in quiet._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    return set(vars(quiet.parse_args(argv)))


def parse_args(argv):
    p = _Parser(description="Prepare llm.c token shards from text or a synthetic language.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", required=True, choices=["tinyshakespeare", "pg19", "text", "synthetic"])
    p.add_argument("--source", nargs="+", help="input: tinyshakespeare's input.txt, the PG-19 book directory, "
                   "or for text one or more UTF-8 files / directories of *.txt (not used by synthetic)")
    p.add_argument("--out", required=True, help="output directory (shards, tokenizer.bin, meta.json)")
    p.add_argument("--force", action="store_true", help="replace a data set in --out of another tokenizer or "
                   "vocabulary, made from other text (another --dataset or other source files), or into other shards "
                   "(another --val-fraction, --seed, --shard-tokens, ...) (refused without it: the runs trained on it "
                   "would refuse the new one, or read other text or shards)")
    p.add_argument("--tokenizer", choices=["gpt2", "sp"], help="gpt2 = GPT-2 BPE, sp = SentencePiece BPE trained "
                   "on the training split (required except for synthetic)")
    p.add_argument("--vocab-size", type=int, help="SentencePiece vocabulary size (only with --tokenizer sp; "
                   f"default {DEFAULT_SP_VOCAB})")
    p.add_argument("--gpt2-bpe", help="directory with GPT-2's encoder.json and vocab.bpe (default: $GPT2_BPE_DIR, "
                   "else tiktoken's public download)")
    p.add_argument("--val-fraction", type=float, help="validation share: of the characters (one file) or of the "
                   "documents (books, files, synthetic documents); default 0.1 for tinyshakespeare, else 0.05")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard")
    p.add_argument("--seed", type=int, default=1337, help="seed of the by-book split, SentencePiece sampling, synthetic")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenizer processes")
    p.add_argument("--sp-train-lines", type=int, default=500_000,
                   help="at most this many lines of the training split are sampled to train SentencePiece")
    g = p.add_argument_group("synthetic language (docs/data.md)")
    g.add_argument("--syn-vocab", type=int, default=256, help="language tokens V (EOT is id V)")
    g.add_argument("--syn-order", type=int, default=3, help="order k: previous tokens shaping the local distribution")
    g.add_argument("--syn-strength", type=float, default=3.0, help="std of the local logits (peakedness)")
    g.add_argument("--syn-copy-rate", type=float, default=0.1, help="probability of a long-range copy")
    g.add_argument("--syn-copy-min-dist", type=int, default=64, help="a copied token lies at least this far back")
    g.add_argument("--syn-copy-max-dist", type=int, default=1024, help="... and at most this far back")
    g.add_argument("--syn-doc-len", type=int, default=8192, help="tokens per document")
    g.add_argument("--syn-length", type=int, default=5_000_000, help="language tokens in total (train + val)")
    args = p.parse_args(argv)
    given = given_options(p, argv)

    if args.val_fraction is None:
        args.val_fraction = DEFAULT_VAL_FRACTION[args.dataset]
    if not 0 < args.val_fraction < 1:
        raise PrepareError(f"--val-fraction {args.val_fraction} must be between 0 and 1 (exclusive)")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        raise PrepareError(f"--shard-tokens {args.shard_tokens} must be in [1, {MAX_SHARD_TOKENS}]")
    if args.workers < 1:
        raise PrepareError(f"--workers {args.workers} must be at least 1")
    if args.dataset == "synthetic":
        if args.source or args.tokenizer:
            raise PrepareError("synthetic generates its own tokens; drop --source and --tokenizer")
    else:
        if not args.source:
            raise PrepareError(f"--source is required for --dataset {args.dataset}; give the input file or directory")
        if not args.tokenizer:
            raise PrepareError("--tokenizer is required: gpt2 or sp")
    if args.vocab_size is not None and args.tokenizer != "sp":
        raise PrepareError(f"--vocab-size is the SentencePiece vocabulary and is not used by "
                           f"{'--tokenizer ' + args.tokenizer if args.tokenizer else '--dataset synthetic'}; "
                           "drop it (GPT-2's vocabulary is 50257, the synthetic one is --syn-vocab + 1)")
    # options of another tokenizer or data set would be ignored: refused, as --vocab-size is above
    tokenizer = f"--tokenizer {args.tokenizer}" if args.tokenizer else "--dataset synthetic"
    not_used = [(d, what, tokenizer) for d, what, needs in (
        ("gpt2_bpe", "GPT-2's BPE files, used by --tokenizer gpt2 only", "gpt2"),
        ("sp_train_lines", "SentencePiece's training sample, used by --tokenizer sp only", "sp"))
        if d in given and args.tokenizer != needs]
    if args.dataset != "synthetic":
        not_used += [(d, "a setting of the synthetic language, used by --dataset synthetic only",
                      f"--dataset {args.dataset}") for d in sorted(given) if d.startswith("syn_")]
    if not_used:
        dest, what, this_run = not_used[0]
        flag = "--" + dest.replace("_", "-")
        raise PrepareError(f"{flag} is {what}, and this run has {this_run}: drop {flag}")
    if args.tokenizer == "sp" and args.vocab_size is None:
        args.vocab_size = DEFAULT_SP_VOCAB
    if args.tokenizer != "sp":  # SentencePiece's settings: none for another tokenizer (meta.json's args: null)
        args.sp_train_lines = None
    args.seed_given = "seed" in given  # checked once the split is known (prepare_text)
    if args.tokenizer == "sp" and args.vocab_size <= tk.SP_FIXED_IDS:
        raise PrepareError(tk.sp_vocab_too_small(args.vocab_size))
    if args.tokenizer == "sp" and args.sp_train_lines < 1:
        raise PrepareError(f"--sp-train-lines {args.sp_train_lines} must be at least 1")
    return args


# ---------------------------------------------------------------------------------------------------------
# --out: the data set is built in a work directory and moved into --out only when it is complete

WORK_PREFIX = ".prepare-"  # work directories: .<out name>.prepare-<pid>-<random>, beside --out


def make_work_dir(out):
    """A new empty directory to build the data set in, on --out's file system: beside --out (in its parent,
    created if missing), or inside an existing --out when it is a mount point or its parent is not writable.
    Nothing in --out is touched."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise PrepareError(f"--out {out} exists and is not a directory; choose another path")
    real = os.path.realpath(out)  # a symlinked --out: work beside its target, the directory the files go to
    name = f".{os.path.basename(real)}{WORK_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    places = [os.path.dirname(real), real] if os.path.isdir(real) else [os.path.dirname(real)]
    if os.path.ismount(real):
        places = [real]
    first_error = None
    for parent in places:
        work = os.path.join(parent, name)
        try:
            try:
                os.mkdir(work)
            except FileNotFoundError:  # --out's parent does not exist yet
                os.makedirs(parent)
                os.mkdir(work)
            return work
        except OSError as e:
            first_error = first_error or e
    raise PrepareError(f"cannot use --out {out}: {first_error.strerror}; choose a directory you can write to")


def _meta_first(names):
    return sorted(names, key=lambda n: (n != "meta.json", n))


def commit_out(work, out):
    """Move the complete data set from `work` into --out. A new --out: one rename. An existing one: its earlier
    outputs of this script (OUTPUT_RE; other files stay) are moved aside, meta.json first, then the new files
    are moved in, meta.json last, so --out never holds a meta.json beside a mix of old and new files; the old
    files are deleted afterwards. If a rename fails, the old files are moved back and the error is raised."""
    if not os.path.exists(out):
        os.rename(work, out)
        return
    aside = os.path.join(work, ".earlier")
    os.mkdir(aside)
    new = [n for n in os.listdir(work) if OUTPUT_RE.match(n)]
    old_moved, new_moved = [], []
    try:
        for name in _meta_first(n for n in os.listdir(out) if OUTPUT_RE.match(n)):
            os.rename(os.path.join(out, name), os.path.join(aside, name))
            old_moved.append(name)
        for name in reversed(_meta_first(new)):
            os.rename(os.path.join(work, name), os.path.join(out, name))
            new_moved.append(name)
    except BaseException:
        try:
            for name in reversed(new_moved):
                os.remove(os.path.join(out, name))
            for name in reversed(old_moved):
                os.rename(os.path.join(aside, name), os.path.join(out, name))
        except OSError as e:
            raise _RollbackFailed(f"cannot move the new data set into --out {out} ({e.strerror}) nor the earlier "
                                  f"one back; the earlier files are in {aside}") from None
        raise


class _RollbackFailed(PrepareError):
    """commit_out could not restore --out: the work directory holds the earlier files and is kept."""


def _tokenizer_of(meta_path):
    """(tokenizer, vocab_size) of a meta.json, or None when it is missing or unreadable."""
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        return meta.get("tokenizer"), meta.get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None


def changed_tokenizer_file(out, work):
    """The name of the tokenizer file (tokenizer.model, tokenizer.bin) that --out's data set holds and the new
    one in `work` holds with other bytes, "" when none: the runs trained on --out compare both (their data
    identity) and refuse another."""
    for name in ("tokenizer.model", "tokenizer.bin"):
        a, b = os.path.join(out, name), os.path.join(work, name)
        if os.path.isfile(a) and os.path.isfile(b) and tk.sha256_file(a) != tk.sha256_file(b):
            return name
    return ""


def planned_tokenizer(args):
    """(tokenizer, vocab_size) the data set these arguments make will record in meta.json."""
    if args.dataset == "synthetic":
        return "synthetic", args.syn_vocab + 1
    return args.tokenizer, tk.GPT2_VOCAB if args.tokenizer == "gpt2" else args.vocab_size


def _other_tokenizer(out, new):
    """(tokenizer, vocab_size) of the data set in --out when it is tokenized otherwise than `new`, else None (no
    data set, the same one, or an earlier meta.json without these keys: no claim)."""
    old = _tokenizer_of(os.path.join(out, "meta.json"))
    if old is None or new is None or None in old or old == tuple(new):
        return None
    return old


def other_tokenizer_refusal(out, new):
    """The error for a data set in --out tokenized otherwise (another tokenizer or vocabulary) than the one about
    to replace it: the runs trained on it would refuse the new one (their data identity). "" when none."""
    old = _other_tokenizer(out, new)
    if old is None:
        return ""
    return (f"--out {out} holds a data set of tokenizer {old[0]} (vocabulary {old[1]}, its meta.json says), and this "
            f"one is {new[0]} (vocabulary {new[1]}): every run trained on that data would refuse it; prepare into "
            f"another --out, or give --force to replace it")


def replaced_tokenizer_note(out, old, new):
    """The note when --force replaced a data set of another tokenizer or vocabulary."""
    return (f"note: --force: --out {out} held a data set of tokenizer {old[0]} (vocabulary {old[1]}), now replaced "
            f"by {new[0]} (vocabulary {new[1]}): runs trained on the earlier one refuse this one (their data identity)")


def _meta_of(out):
    """The dict of --out's meta.json, or None when it is missing, unreadable or no object."""
    try:
        with open(os.path.join(out, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def recorded_files(meta):
    """{file: (bytes, sha256 or None)} of the source files a meta.json records (sources[], and the copies left out,
    duplicate_sources[], which were in the source too), or None when it records none readably."""
    src = meta.get("sources")
    dup = meta.get("duplicate_sources") or []
    if not isinstance(src, list) or not src or not isinstance(dup, list):
        return None
    try:
        return {str(r["file"]): (int(r["bytes"]), r.get("sha256") if isinstance(r.get("sha256"), str) else None)
                for r in src + dup}
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def sha256_source(path, digests):
    """The sha256 of source file `path`, from `digests` ({(path, size, mtime_ns): sha256}, one per run of
    prepare_text) when it holds it, else hashed and kept there: a source file is hashed once (the corpus check,
    then meta.json), and again when its size or mtime changed."""
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in digests:
        digests[key] = tk.sha256_file(path)
    return digests[key]


def planned_files(splits, digests):
    """{file: (bytes, sha256)} of the source files of a text data set about to be made, as meta.json will record
    them; sha256 a callable (hashed only when compared, into `digests`: sha256_source)."""
    files = {}
    for spec in splits["train"] + splits["val"]:
        files[spec.name] = (os.path.getsize(spec.path), lambda p=spec.path: sha256_source(p, digests))
    for r in splits.get("left_out", []):
        files[r["file"]] = (r["bytes"], r["sha256"])
    return files


def _made_from(dataset, names, said=""):
    """'text from 2 source files (a.txt, b.txt)' (at most 3 named), 'synthetic' when names is empty; said, e.g.
    ', its meta.json says': added inside the parentheses ('synthetic (its meta.json says)' without files)."""
    if not names:
        return f"{dataset} ({said.lstrip(',; ')})" if said else dataset
    names = sorted(names)
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"{dataset} from {len(names)} source file{'s' if len(names) != 1 else ''} ({shown}{said})"


def other_corpus(old, dataset, files):
    """(what --out's data set was made from, what the new one is made from, how their files differ: '' or e.g.
    '; 1 with other bytes, e.g. a.txt') when they differ, else None; each of the first two a (dataset, [file])
    pair. old: the meta.json of --out's data set
    (None: no data set); dataset, files: the new one's --dataset and {file: (bytes, sha256 or a callable giving
    it)} ({} for synthetic). They differ in --dataset, or for pg19 and text in the source files: the files are
    matched by content first (size and the sha256 meta.json records; a new file is hashed only where an earlier
    one has its size), so the same files under other names or in another directory are the same text; of the
    rest, a name on one side only, another size, or another sha256 where meta.json records one. tinyshakespeare
    is one text (its sha256 is checked) and synthetic no text: the same --dataset is the same corpus. A
    meta.json without "dataset" (or, for the same pg19 or text, without "sources"): no claim. Whether the same
    text makes the same shards (names order and split the files) is checked once they are made (other_shards)."""
    if old is None or not isinstance(old.get("dataset"), str):
        return None
    was = recorded_files(old)
    if old["dataset"] != dataset:
        return (old["dataset"], sorted(was or [])), (dataset, sorted(files)), ""
    if dataset not in ("pg19", "text") or was is None:
        return None

    def digest_of(name):
        d = files[name][1]
        return d() if callable(d) else d
    hashed = {}  # (bytes, sha256) -> the earlier files of that content, a file of its own name first
    for name, (size, digest) in sorted(was.items()):
        if digest is not None:
            hashed.setdefault((size, digest), []).append(name)
    sizes = {size for size, _ in hashed}
    old_left, new_left = set(was), set()
    for name in sorted(files, key=lambda n: n not in was):  # files of an earlier name take their own first
        same = hashed.get((files[name][0], digest_of(name))) if files[name][0] in sizes else None
        if same:
            old_left.discard(same.pop(same.index(name) if name in same else 0))
        else:
            new_left.add(name)
    only_new = sorted(new_left - old_left)
    only_old = sorted(old_left - new_left)
    changed = []
    for name in sorted(old_left & new_left):
        (size, digest), new_size = was[name], files[name][0]
        if size != new_size or digest is not None and digest != digest_of(name):
            changed.append(name)
    if not (only_new or only_old or changed):
        return None
    how = [f"; {len(x)} {what}, e.g. {x[0]}" for x, what in [(only_new, "not in that data set"),
                                                            (only_old, "of its missing"), (changed, "with other bytes")]
           if x]
    return (dataset, sorted(was)), (dataset, sorted(files)), "".join(how)


def other_corpus_refusal(out, differ):
    """The error for a data set in --out made from other text (other_corpus's triple) than the one about to
    replace it: the runs trained on it would read other text from then on. "" when differ is None."""
    if differ is None:
        return ""
    (old_ds, old_files), (new_ds, new_files), how = differ
    return (f"--out {out} holds a data set of {_made_from(old_ds, old_files, ', its meta.json says')}, and this one "
            f"is {_made_from(new_ds, new_files, how)}: every run trained on that data would read other text; prepare "
            "into another --out, or give --force to replace it")


def replaced_corpus_note(out, differ):
    """The note when --force replaced a data set made from other text."""
    (old_ds, old_files), (new_ds, new_files), how = differ
    return (f"note: --force: --out {out} held a data set of {_made_from(old_ds, old_files)}, now replaced by "
            f"{_made_from(new_ds, new_files, how)}: runs trained on the earlier one read other text now")


# the settings (meta.json's args) that decide the tokens of the shards of one text and tokenizer: the split,
# SentencePiece's sample, the shards' size, the synthetic language
SHARD_SETTINGS = ("val_fraction", "seed", "sp_train_lines", "shard_tokens")


def other_settings(old, args, keys=None):
    """[(flag, old value, new value)] of the settings (SHARD_SETTINGS and the --syn-* ones) in which --out's data
    set (old: its meta.json) was prepared otherwise than `args` (a dict: the new meta.json's args) would prepare
    it, [] when none. keys: the settings to compare (default all). Compared only where both record a value and
    the data set is of the same --dataset and tokenizer (else other_tokenizer and other_corpus speak)."""
    was = (old or {}).get("args")
    if not isinstance(was, dict) or was.get("dataset") != args.get("dataset") or \
            (old.get("tokenizer") or "synthetic") != (args.get("tokenizer") or "synthetic"):
        return []
    keys = keys or SHARD_SETTINGS + tuple(k for k in args if k.startswith("syn_"))
    return [("--" + k.replace("_", "-"), was[k], args[k]) for k in keys
            if was.get(k) is not None and args.get(k) is not None and was[k] != args[k]]


def _settings_text(changes, side):
    return " and ".join(f"{flag} {c[side]}" for flag, *c in changes)


def other_settings_refusal(out, changes):
    """The error for a data set in --out of the same text and tokenizer prepared with other settings
    (other_settings' list) than the one about to replace it: its shards differ (another split, another SentencePiece
    sample, other shard files) from those the runs trained on it read. "" when none."""
    if not changes:
        return ""
    return (f"--out {out} holds a data set prepared with {_settings_text(changes, 0)} (its meta.json says), and this "
            f"one has {_settings_text(changes, 1)}: its shards would differ from those every run trained on that data "
            "read; prepare into another --out, or give --force to replace it")


def other_shards(old, made):
    """The first shard (by name) whose sha256 differs between --out's data set (old: its meta.json) and the one
    made (made: its meta.json), or a shard on one side only; None when they agree, or old records none."""
    a, b = (old or {}).get("sha256_shards"), made.get("sha256_shards")
    if not isinstance(a, dict) or not a or not isinstance(b, dict):
        return None
    return next((n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)), None)


def other_shards_refusal(out, shard):
    """The error for a data set made of the same text, tokenizer and settings whose shards differ from --out's
    (the files under other names or paths, which order and split them)."""
    return (f"--out {out} holds a data set of the same text, tokenizer and settings, but this one's {shard} differs "
            "(the source files under other names or paths order and split them otherwise): every run trained on that "
            "data would read other shards; prepare into another --out, or give --force to replace it")


def replaced_shards_note(out, changes):
    """The note when --force replaced a data set of the same text and tokenizer whose shards differ."""
    how = (f"prepared with {_settings_text(changes, 0)}, now replaced by one with {_settings_text(changes, 1)}"
           if changes else "now replaced by one whose shards differ")
    return f"note: --force: --out {out} held a data set {how}: runs trained on the earlier one read other shards now"


RUN_MARKER_RE = re.compile(r"^(DONE_\d{8}|model_\d{8}\.bin|state_\d{8}_\d{5}\.bin)$")


def run_directory_refusal(out):
    """The error for an --out that is a training run's directory (the trainer's -o: a config.json with a "train"
    object, DONE_ markers, model or state files), "" otherwise: the data set's files would go among the run's."""
    if not os.path.isdir(out):
        return ""
    signs = sorted(n for n in os.listdir(out) if RUN_MARKER_RE.match(n))
    try:
        with open(os.path.join(out, "config.json")) as f:
            if isinstance(json.load(f).get("train"), dict):
                signs.insert(0, "config.json")
    except (OSError, ValueError, AttributeError):
        pass
    if not signs:
        return ""
    return (f"--out {out} is a training run's directory (it holds {', '.join(signs[:2])}"
            f"{', ...' if len(signs) > 2 else ''}), not a data set's; prepare into a directory of its own "
            f"(e.g. data/shards/NAME)")


def check_out(args):
    """Refuses, before anything is read or written, an --out that is a run's directory, or that holds a data set
    of another tokenizer or vocabulary (without --force). One made from other text is refused once the sources
    are listed (prepare_text)."""
    why = run_directory_refusal(args.out)
    if not why and not args.force:
        why = other_tokenizer_refusal(args.out, planned_tokenizer(args))
    if why:
        raise PrepareError(why)


@contextlib.contextmanager
def building(out, force=False):
    """with building(out) as work: write the data set into work. On success it replaces --out's earlier data
    set (commit_out; one of another tokenizer or vocabulary, of other tokenizer files, or made from other text
    (other_corpus) only with force, the first and the last then said in a note); on any
    failure, an exception or Ctrl-C, the work directory is deleted and --out is left as it was, byte for byte."""
    work = make_work_dir(out)
    keep = False
    try:
        yield work
        new = _tokenizer_of(os.path.join(work, "meta.json"))
        old = _other_tokenizer(out, new)
        if old and not force:  # check_out refused it before; this is the data set as made, checked again
            raise PrepareError(other_tokenizer_refusal(out, new))
        changed = "" if old or force else changed_tokenizer_file(out, work)
        if changed:
            raise PrepareError(f"--out {out} holds a data set of the same tokenizer kind and vocabulary, but this one's "
                               f"{changed} differs (a SentencePiece model trained on other text): every run trained "
                               "on that data would refuse it; prepare into another --out, or give --force to replace "
                               "it")
        made, earlier = _meta_of(work) or {}, _meta_of(out)
        differ = other_corpus(earlier, made.get("dataset"), recorded_files(made) or {})
        if differ and not force:  # prepare_text refused it before; this is the data set as made, checked again
            raise PrepareError(other_corpus_refusal(out, differ))
        # the same text and tokenizer: the same shards, else the runs trained on them read other tokens
        shard = None if old or differ or changed else other_shards(earlier, made)
        changes = other_settings(earlier, made.get("args") or {}) if shard else []
        if shard and not force:
            raise PrepareError(other_settings_refusal(out, changes) or other_shards_refusal(out, shard))
        commit_out(work, out)
        if old:
            print(replaced_tokenizer_note(out, old, new), file=sys.stderr)
        elif differ:
            print(replaced_corpus_note(out, differ), file=sys.stderr)
        elif shard:
            print(replaced_shards_note(out, changes), file=sys.stderr)
    except _RollbackFailed:
        keep = True
        raise
    finally:
        if not keep and os.path.isdir(work):
            shutil.rmtree(work, ignore_errors=True)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def run_pool(fn, tasks, workers, initializer=None, initargs=()):
    """Yield fn(task) for every task, in order: in this process for 1 worker, else in worker processes
    with at most two tasks per worker submitted ahead (the results wait in memory only that far).
    An exception in fn is raised here; on any exit the tasks not started are cancelled and the
    running ones finish (a multiprocessing.Pool's terminate() can hang for good with its task thread
    waiting on the queue's lock: seen in data/tests on a bad input, which must fail with its message)."""
    if workers == 1 or len(tasks) <= 1:
        if initializer:
            initializer(*initargs)
        for t in tasks:
            yield fn(t)
        return
    n = min(workers, len(tasks))
    with concurrent.futures.ProcessPoolExecutor(n, multiprocessing.get_context("fork"), initializer, initargs) as ex:
        ahead = collections.deque()
        rest = iter(tasks)
        try:
            for t in itertools.islice(rest, 2 * n):
                ahead.append(ex.submit(fn, t))
            while ahead:
                result = ahead.popleft().result()
                for t in itertools.islice(rest, 1):
                    ahead.append(ex.submit(fn, t))
                yield result
        finally:
            for f in ahead:
                f.cancel()


# ---------------------------------------------------------------------------------------------------------
# text data sets

_worker = {}  # per-process DocEncoder, set once by _init_worker in each worker process


def _init_worker(spec):
    _worker["encoder"] = tk.DocEncoder(spec)


def _encode_chunk(task):
    """task: (split, [DocSpec]) -> (split, tokens (n,) uint32 with EOT before each document, bytes read,
    [(name, gutenberg info, tokens)] per document)."""
    split, docs = task
    enc = _worker["encoder"]
    pieces, infos, nbytes = [], [], 0
    for spec in docs:
        text, info = load_document(spec)
        nbytes += _spec_size(spec)
        if not text:  # nothing left (e.g. a book that is all boilerplate): no document
            infos.append((spec.name, info, 0))
            continue
        ids = enc.encode_document(text)
        pieces.append(ids)
        infos.append((spec.name, info, len(ids)))
    tokens = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint32)
    return split, tokens, nbytes, infos


def _spec_size(spec):
    """Bytes of the file, or characters of its range (an estimate for chunking and the progress bar)."""
    size = os.path.getsize(spec.path)
    return size if spec.lo is None else (spec.hi if spec.hi is not None else size) - spec.lo


def make_chunks(splits):
    """[(split, [DocSpec])]: consecutive documents of a split grouped up to CHUNK_BYTES (a bigger one alone)."""
    tasks = []
    for split in ("train", "val"):
        cur, cur_bytes = [], 0
        for spec in splits[split]:
            size = _spec_size(spec)
            if cur and cur_bytes + size > CHUNK_BYTES:
                tasks.append((split, cur))
                cur, cur_bytes = [], 0
            cur.append(spec)
            cur_bytes += size
        if cur:
            tasks.append((split, cur))
    return tasks


def source_records(splits, file_tokens, digests):
    """[{file, bytes, sha256, splits, tokens}] for every source file, in sorted order; file_tokens: {name: {split:
    tokens}} (each document's EOT included, so they add up to num_tokens); digests: sha256_source's cache."""
    used = {}
    for split in ("train", "val"):
        for spec in splits[split]:
            used.setdefault((spec.name, spec.path), []).append(split)
    records = []
    for (name, path), s in sorted(used.items()):
        order = sorted(set(s), key=["train", "val"].index)
        records.append({"file": name, "bytes": os.path.getsize(path), "sha256": sha256_source(path, digests),
                        "splits": order, "tokens": {sp: file_tokens.get(name, {}).get(sp, 0) for sp in order}})
    return records


def report_split(args, splits, records, num_tokens):
    """One stderr line per source file: its split(s) and tokens; a warning when validation is larger than
    training, naming the split rule (docs/data.md) that made it so and what to change."""
    by_chars = any(spec.lo is not None for spec in splits["val"])
    for r in records:
        parts = ", ".join(f"{sp}, {r['tokens'][sp]:,} tokens" for sp in r["splits"])
        print(f"source {r['file']}: {parts}{' (split by characters)' if by_chars else ''}", file=sys.stderr)
    if num_tokens["val"] <= num_tokens["train"]:
        return
    if by_chars:
        rule = f"--val-fraction {args.val_fraction:g} of the characters is validation; lower --val-fraction"
    else:
        kind = "books" if args.dataset == "pg19" else "files"
        n_val, n = len(splits["val"]), len(splits["train"]) + len(splits["val"])
        rule = (f"the split is by {kind[:-1]} ({n_val} of {n} {kind} {'is' if n_val == 1 else 'are'} validation, "
                f"picked by --seed {args.seed}); give more {kind}" +
                (", or one file to split by characters" if args.dataset == "text" else ", or lower --val-fraction"))
    print(f"warning: validation ({num_tokens['val']:,} tokens) is larger than training ({num_tokens['train']:,} "
          f"tokens): {rule}", file=sys.stderr)


def prepare_text(args):
    t0 = time.time()
    splits = dataset_splits(args.dataset, args.source, args.val_fraction, args.seed)
    if args.dataset == "pg19":
        check_gutenberg_books(splits["train"] + splits["val"], args.source[0])
    digests = {}  # sha256_source's: each source file is hashed once in this run
    if not args.force:  # a data set made from other text in --out: refused before anything is tokenized
        why = other_corpus_refusal(args.out, other_corpus(_meta_of(args.out), args.dataset,
                                                          planned_files(splits, digests)))
        if why:
            raise PrepareError(why)
    extra = {}
    left_out = splits["left_out"]
    if left_out:
        n, first = len(left_out), left_out[0]
        print(f"note: left out {n} source file{'s' if n > 1 else ''} whose bytes repeat an earlier one "
              f"({'e.g. ' if n > 1 else ''}{first['file']} = {first['same_as']}; the first by path is kept), so one "
              f"text is never in both training and validation; meta.json \"duplicate_sources\" lists "
              f"{'them' if n > 1 else 'it'}", file=sys.stderr)
    if args.dataset != "tinyshakespeare":
        extra["duplicate_sources"] = left_out
    not_txt = splits["not_txt"]
    if not_txt:
        n = len(not_txt)
        print(f"note: --source: {n} file{'s' if n > 1 else ''} in the directory not named *.txt "
              f"{'are' if n > 1 else 'is'} not read ({'e.g. ' if n > 1 else ''}{not_txt[0]}); give such a file by "
              "name (or rename it *.txt) to include it", file=sys.stderr)
    by_chars = any(spec.lo is not None for spec in splits["val"])
    if by_chars and args.seed_given and args.tokenizer != "sp":
        raise PrepareError("--seed picks the by-file split and SentencePiece's training sample, and this run splits one file by characters with "
                           f"--tokenizer {args.tokenizer}, so it has no effect: drop --seed")
    if not args.force:  # the same text split or sampled otherwise: refused before anything is tokenized
        acting = ("val_fraction",) + (() if by_chars and args.tokenizer != "sp" else ("seed",)) + \
            (("sp_train_lines",) if args.tokenizer == "sp" else ())
        why = other_settings_refusal(args.out, other_settings(_meta_of(args.out), vars(args), acting))
        if why:
            raise PrepareError(why)
    if args.tokenizer == "gpt2":  # loaded (or downloaded) before anything is written: a failure costs nothing
        bpe_dir = tk.resolve_gpt2_dir(args.gpt2_bpe)
        token_bytes = tk.gpt2_token_bytes(tk.load_gpt2(bpe_dir))
        if bpe_dir is None:  # said once it worked: a failed download is one error line
            print("note: no --gpt2-bpe or GPT2_BPE_DIR given: used tiktoken's public GPT-2 download", file=sys.stderr)
        # meta.json's args record the directory used (absolute), given by --gpt2-bpe or GPT2_BPE_DIR alike:
        # scripts/export_hf.py copies the tokenizer files from it
        args.gpt2_bpe = bpe_dir
        eot, enc_spec = tk.GPT2_EOT, ("gpt2", bpe_dir)
        extra["gpt2_bpe"] = "local files" if bpe_dir else "tiktoken download"
    else:
        token_bytes = eot = enc_spec = None  # trained below
    with building(args.out, args.force) as work:
        meta = _build_text(args, work, splits, token_bytes, eot, enc_spec, extra, digests)
    done(meta, t0)


def _build_text(args, work, splits, token_bytes, eot, enc_spec, extra, digests):
    print(f"{args.dataset}: {len(splits['train'])} train / {len(splits['val'])} val documents -> {args.out}")
    if args.tokenizer == "sp":
        t = time.time()
        texts = (load_document(s)[0] for s in splits["train"])
        lines = tk.sample_training_lines(texts, args.sp_train_lines, args.seed)
        model = tk.train_sentencepiece(lines, os.path.join(work, "tokenizer.model"), args.vocab_size, args.seed)
        sp = tk.load_sentencepiece(model)
        token_bytes, eot, enc_spec = tk.sp_token_bytes(sp), sp.eos_id(), ("sp", os.path.abspath(model))
        extra["sp_model"] = "tokenizer.model"
        extra["sp_train_lines"] = len(lines)
        extra["sha256_tokenizer_model"] = tk.sha256_file(model)
        print(f"SentencePiece BPE trained on {len(lines)} lines, vocab {len(token_bytes)}: {time.time() - t:.1f}s")
    vocab = len(token_bytes)
    extra["tokenizer_bin_truncated"] = tk.write_tokenizer_bin(os.path.join(work, "tokenizer.bin"), token_bytes, eot)

    version = shard_version_for_vocab(vocab)
    writers = {s: ShardWriter(work, s, args.shard_tokens, version) for s in ("train", "val")}
    docs = {"train": 0, "val": 0}
    file_tokens = collections.defaultdict(dict)  # {name: {split: tokens}}
    empty, no_header, no_footer = [], [], []
    tasks = make_chunks(splits)
    total_bytes = sum(_spec_size(s) for _, chunk in tasks for s in chunk)
    t = time.time()
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc=f"tokenizing ({args.tokenizer})",
              disable=None) as bar:
        for split, tokens, nbytes, infos in run_pool(_encode_chunk, tasks, args.workers, _init_worker, (enc_spec,)):
            writers[split].add(tokens)
            for name, info, n in infos:
                docs[split] += n > 0
                file_tokens[name][split] = file_tokens[name].get(split, 0) + n
                if n == 0:
                    empty.append(name)
                if info and not info["header"]:
                    no_header.append(name)
                if info and not info["footer"]:
                    no_footer.append(name)
            bar.update(nbytes)
    paths = {s: writers[s].close() for s in ("train", "val")}
    for s in ("train", "val"):
        if not paths[s]:
            raise PrepareError(f"the {s} split has no text; give more input or change --val-fraction")
    for name in empty:
        print(f"warning: {name} has no text after stripping; skipped", file=sys.stderr)
    if args.dataset == "pg19":
        for name in no_header:
            print(f"note: {name}: no Gutenberg header marker found, kept from its first line", file=sys.stderr)
        for name in no_footer:
            print(f"note: {name}: no Gutenberg footer marker found, kept to its last line", file=sys.stderr)
        extra["val_books"] = [s.name for s in splits["val"]]
        extra["gutenberg_no_header"], extra["gutenberg_no_footer"] = no_header, no_footer
    extra["empty_documents"] = empty
    print(f"tokenized in {time.time() - t:.1f}s")

    meta = meta_dict(args, work, vocab, eot, version, writers, docs, paths)
    meta["sources"] = source_records(splits, file_tokens, digests)
    report_split(args, splits, meta["sources"], meta["num_tokens"])
    meta.update(extra)
    write_meta(work, meta)
    return meta


# ---------------------------------------------------------------------------------------------------------
# synthetic

def _synthetic_group(task):
    spec, split, doc_ids, lens = task
    tokens, stats = synthetic.generate_group(spec, doc_ids, lens)
    return split, tokens, stats


def prepare_synthetic(args):
    t0 = time.time()
    spec = synthetic.SyntheticSpec(args.syn_vocab, args.syn_order, args.syn_strength, args.syn_copy_rate,
                                   args.syn_copy_min_dist, args.syn_copy_max_dist, args.syn_doc_len,
                                   args.syn_length, args.seed)
    problem = synthetic.check_spec(spec)
    if problem:
        raise PrepareError(problem)
    lens = synthetic.doc_lengths(spec)
    if len(lens) < 2:
        raise PrepareError(f"--syn-length {spec.length} with --syn-doc-len {spec.doc_len} makes one document; "
                           "train and val need one each: raise --syn-length or lower --syn-doc-len")
    n_val = min(len(lens) - 1, max(1, int(round(args.val_fraction * len(lens)))))
    if not args.force:  # another language or split of it: refused before anything is generated
        acting = ("val_fraction", "seed") + tuple(k for k in vars(args) if k.startswith("syn_"))
        why = other_settings_refusal(args.out, other_settings(_meta_of(args.out), vars(args), acting))
        if why:
            raise PrepareError(why)
    split_of = ["train"] * (len(lens) - n_val) + ["val"] * n_val  # the last documents are validation
    with building(args.out, args.force) as work:
        meta = _build_synthetic(args, work, spec, lens, n_val, split_of)
    done(meta, t0)


def _build_synthetic(args, work, spec, lens, n_val, split_of):
    vocab, eot = spec.vocab + 1, spec.vocab
    tk.write_tokenizer_bin(os.path.join(work, "tokenizer.bin"), synthetic.token_bytes(spec), eot)

    group = 64  # documents generated together (vectorized); the output does not depend on it
    tasks = []
    for split in ("train", "val"):
        ids = [d for d in range(len(lens)) if split_of[d] == split]
        for i in range(0, len(ids), group):
            tasks.append((spec, split, ids[i:i + group], [lens[d] for d in ids[i:i + group]]))
    version = shard_version_for_vocab(vocab)
    writers = {s: ShardWriter(work, s, args.shard_tokens, version) for s in ("train", "val")}
    sums = {s: {"tokens": 0, "entropy_sum": 0.0, "nll_sum": 0.0, "has_source": 0, "copied": 0} for s in writers}
    print(f"synthetic: {len(lens)} documents ({len(lens) - n_val} train, {n_val} val), "
          f"{spec.length} tokens, V={spec.vocab}, k={spec.order} -> {args.out}")
    with tqdm(total=spec.length, unit="tok", unit_scale=True, desc="generating", disable=None) as bar:
        for split, tokens, stats in run_pool(_synthetic_group, tasks, args.workers):
            writers[split].add(tokens)
            for key in stats:
                sums[split][key] += stats[key]
            bar.update(stats["tokens"])
    paths = {s: writers[s].close() for s in ("train", "val")}
    docs = {s: split_of.count(s) for s in ("train", "val")}

    meta = meta_dict(args, work, vocab, eot, version, writers, docs, paths)
    meta["synthetic"] = {
        "vocab": spec.vocab, "order": spec.order, "strength": spec.strength, "copy_rate": spec.copy_rate,
        "copy_min_dist": spec.copy_min_dist, "copy_max_dist": spec.copy_max_dist, "doc_len": spec.doc_len,
        "length": spec.length, "seed": spec.seed,
        # mean over the split's language tokens (EOT targets excluded) of the exact conditional entropy H(p_t)
        "entropy_floor_nats": {s: sums[s]["entropy_sum"] / sums[s]["tokens"] for s in sums},
        # the ideal model's actual mean loss on these tokens (-log p_t(x_t)); its expectation is the floor
        "ideal_model_loss_nats": {s: sums[s]["nll_sum"] / sums[s]["tokens"] for s in sums},
        "copy_source_fraction": {s: sums[s]["has_source"] / sums[s]["tokens"] for s in sums},
        "copy_fraction": {s: sums[s]["copied"] / sums[s]["tokens"] for s in sums},
    }
    floor = meta["synthetic"]["entropy_floor_nats"]
    print(f"entropy floor (nats/token): train {floor['train']:.4f}  val {floor['val']:.4f}")
    write_meta(work, meta)
    return meta


# ---------------------------------------------------------------------------------------------------------

def meta_dict(args, work, vocab, eot, version, writers, docs, paths):
    return {
        "dataset": args.dataset,
        "tokenizer": "synthetic" if args.dataset == "synthetic" else args.tokenizer,
        "vocab_size": vocab,
        "eot_token": eot,
        "shard_version": version,
        "shard_tokens": args.shard_tokens,
        "num_tokens": {s: writers[s].num_tokens for s in ("train", "val")},
        "num_documents": docs,
        "num_shards": {s: len(paths[s]) for s in ("train", "val")},
        "shards": {s: [os.path.basename(p) for p in paths[s]] for s in ("train", "val")},
        "sha256_tokenizer_bin": tk.sha256_file(os.path.join(work, "tokenizer.bin")),
        # each shard's content: a reader of a run tells data prepared again from other text by it
        "sha256_shards": {os.path.basename(p): tk.sha256_file(os.path.join(work, os.path.basename(p)))
                          for s in ("train", "val") for p in paths[s]},
        "args": {k: v for k, v in vars(args).items() if k not in ("force", "seed_given") and (k.startswith("syn_") == (args.dataset ==
                 "synthetic") or k in ("dataset", "out", "val_fraction", "shard_tokens", "seed", "workers"))},
    }


def write_meta(work, meta):
    write_json(os.path.join(work, "meta.json"), meta)  # written last: its presence marks a complete run


def done(meta, t0):
    n = meta["num_tokens"]
    print(f"done in {time.time() - t0:.1f}s: train {n['train']:,} tokens in {meta['num_shards']['train']} shard(s), "
          f"val {n['val']:,} tokens in {meta['num_shards']['val']} shard(s), vocab {meta['vocab_size']}, "
          f"EOT {meta['eot_token']}")


class _Stopped(BaseException):
    """SIGTERM or SIGINT arrived: raised where the program is, so that building() removes its work directory
    (a BaseException: no `except Exception` on the way out takes it for a failure of its own)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):
    raise _Stopped(signum)


def main(argv=None):
    """Exit code 0 on success; 1 with one `error:` line on stderr for every expected failure (bad argument,
    missing or unreadable input, unwritable output, no network for the GPT-2 download); 2 for a usage error;
    128 + the signal's number when SIGTERM or SIGINT stops it (one `error:` line; --out left as it was and
    the work directory removed)."""
    out_existed = None
    previous = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        args = parse_args(argv)
        check_out(args)
        out_existed = os.path.exists(args.out)
        if args.dataset == "synthetic":
            prepare_synthetic(args)
        else:
            prepare_text(args)
    except _Stopped as e:
        where = "" if out_existed is None else \
            f"; {args.out} was left as it was{'' if out_existed else ' (not created)'}"
        print(f"error: stopped by {signal.Signals(e.signum).name} before the data set was complete{where}",
              file=sys.stderr)
        return 128 + e.signum
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a file that vanished, a full disk, ...: the file and the reason, not a traceback
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}; check the paths given to --source and --out and the free space",
              file=sys.stderr)
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
