"""Tokenizers for data/prepare.py: GPT-2 BPE (tiktoken, from local files) and SentencePiece BPE (trained on
the training split), plus llm.c's tokenizer.bin (write and read back).

tokenizer.bin (docs/formats.md): 256 little-endian uint32 header
    [0] magic 20240328, [1] version 2, [2] vocab size, [3] EOT id, [4..255] zero
then for each token id 0..vocab-1: one uint8 length L followed by L raw bytes.
"""
import hashlib
import io
import os
import re

import numpy as np

from errors import PrepareError

TOKENIZER_MAGIC = 20240328
TOKENIZER_VERSION = 2
GPT2_EOT = 50256
GPT2_VOCAB = 50257
# GPT-2's pre-tokenizer split pattern (contractions, letters, digits, other symbols, whitespace).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# sha256 of OpenAI's GPT-2 files (the hashes tiktoken checks for its own "gpt2" encoding)
GPT2_FILE_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _import(module):
    """Import a tokenizer library; a missing one is a one-line PrepareError naming the install command."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise PrepareError(f"the Python package {module} is not installed; pip install -r requirements.txt") from None


# ----------------------------------------------------------------------------------------------------------
# GPT-2

def resolve_gpt2_dir(bpe_dir):
    """--gpt2-bpe DIR, else $GPT2_BPE_DIR, else None (= tiktoken's public download)."""
    bpe_dir = bpe_dir or os.environ.get("GPT2_BPE_DIR") or None
    if bpe_dir is None:
        return None
    for name, digest in GPT2_FILE_SHA256.items():
        path = os.path.join(bpe_dir, name)
        if not os.path.isfile(path):
            raise PrepareError(f"GPT-2 BPE file {path} not found; point --gpt2-bpe (or GPT2_BPE_DIR) at a directory with encoder.json and vocab.bpe")
        if sha256_file(path) != digest:
            raise PrepareError(f"{path} is not OpenAI's GPT-2 {name} (sha256 mismatch); use the original file")
    return os.path.abspath(bpe_dir)


def load_gpt2(bpe_dir):
    """tiktoken Encoding for GPT-2 built from bpe_dir/{vocab.bpe,encoder.json}; bpe_dir None -> public download."""
    tiktoken = _import("tiktoken")
    import tiktoken.load
    if bpe_dir is None:
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # requests' connection errors, a proxy, an interrupted or corrupt download
            raise PrepareError(f"cannot download GPT-2's BPE files with tiktoken ({type(e).__name__}, no network?); "
                               "without network pass --gpt2-bpe DIR (or set GPT2_BPE_DIR) to a directory holding "
                               "encoder.json and vocab.bpe") from None
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(bpe_dir, "vocab.bpe"),
        encoder_json_file=os.path.join(bpe_dir, "encoder.json"))
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": GPT2_EOT}, explicit_n_vocab=GPT2_VOCAB)


def gpt2_token_bytes(enc):
    """The raw bytes of every GPT-2 token; EOT is written as its text b'<|endoftext|>' (as llm.c does)."""
    return [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]


# ----------------------------------------------------------------------------------------------------------
# SentencePiece

SP_NEWLINE = "\n"  # a user-defined symbol: newline is always its own token and pieces never span lines
SP_FIXED_IDS = 259  # <unk>, </s>, the newline and the 256 byte pieces; every kept character needs one more id


def sample_training_lines(texts, max_lines, seed):
    """Deterministic sample of non-empty lines for SentencePiece training: from each of the n documents
    `texts` (an iterable of strings) at most ceil(max_lines / n) lines drawn uniformly without replacement."""
    texts = list(texts)
    per_doc = -(-max_lines // max(1, len(texts)))
    sample = []
    for i, text in enumerate(texts):
        lines = [ln for ln in text.split("\n") if ln.strip()]
        if len(lines) > per_doc:
            rng = np.random.default_rng([seed, i])
            keep = np.sort(rng.choice(len(lines), size=per_doc, replace=False))
            lines = [lines[j] for j in keep]
        sample.extend(lines)
    return sample


# SentencePiece's training threads: a constant, not the machine's cores, because the model file stores the
# count (its trainer_spec), so the same text gave another file, and another sha256_tokenizer_model, on a
# machine with other cores (prepare.py --workers); the pieces and scores do not depend on it (checked: 1, 2
# and 16 threads on PG-19 text give the same pieces, files differing in that field alone).
SP_TRAIN_THREADS = 16


def train_sentencepiece(lines, model_path, vocab_size, seed):
    """Train a byte-fallback BPE SentencePiece model on `lines` and save it to model_path.
    Ids: 0 <unk>, 1 </s> (our EOT), 2 "\\n", 3..258 the byte pieces <0x00>..<0xFF>, then merges.
    Identity normalization, no dummy prefix and no whitespace collapsing so decode(encode(s)) == s.
    The model is written through a model_writer, not a model_prefix, so it does not record the path it was
    trained at (data/prepare.py trains it in a temporary directory), and with SP_TRAIN_THREADS, not the
    machine's cores: the bytes depend on the text and settings only."""
    spm = _import("sentencepiece")
    if not lines:
        raise PrepareError("no text to train SentencePiece on: the training split is empty; give a larger --source")
    if vocab_size <= SP_FIXED_IDS:
        raise PrepareError(sp_vocab_too_small(vocab_size))
    model_path = model_path if model_path.endswith(".model") else model_path + ".model"
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type="bpe",
            byte_fallback=True, character_coverage=0.9995, normalization_rule_name="identity",
            remove_extra_whitespaces=False, add_dummy_prefix=False, allow_whitespace_only_pieces=True,
            split_digits=False, user_defined_symbols=[SP_NEWLINE], unk_id=0, eos_id=1, bos_id=-1, pad_id=-1,
            input_sentence_size=0, shuffle_input_sentence=False, num_threads=SP_TRAIN_THREADS, minloglevel=2)
    except RuntimeError as e:  # the vocabulary is larger than the corpus supports, or too small for its characters
        reason = str(e).strip().splitlines()[-1]
        m = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", reason)
        if m:  # "<vocab_size> vs <fixed ids + kept characters>"
            raise PrepareError(sp_vocab_too_small(vocab_size, int(m.group(2)))) from None
        raise PrepareError(f"SentencePiece training failed: {reason}; try a smaller --vocab-size or more text") \
            from None
    with open(model_path, "wb") as f:
        f.write(model.getvalue())
    return model_path


def sp_vocab_too_small(vocab_size, needed=None):
    """The error for a SentencePiece vocabulary too small for its fixed ids, or (needed given) for the text."""
    fixed = f"{SP_FIXED_IDS} fixed ids (<unk>, </s>, the newline, 256 bytes)"
    if needed is None:
        return (f"--vocab-size {vocab_size} is too small for SentencePiece with byte fallback: {fixed} plus one "
                "per distinct character of the training text; try a larger --vocab-size")
    return (f"--vocab-size {vocab_size} is too small for this text: SentencePiece needs at least {needed}, {fixed} "
            f"plus {needed - SP_FIXED_IDS} for the characters of the training text; try a larger --vocab-size "
            f"(at least {needed})")


def load_sentencepiece(model_path):
    spm = _import("sentencepiece")
    return spm.SentencePieceProcessor(model_file=model_path)


def sp_encode(sp, text):
    """Encode with SentencePiece line by line (much faster than one long string; identical ids because the
    newline is a user-defined symbol that no piece spans: tested)."""
    nl = sp.piece_to_id(SP_NEWLINE)
    out = []
    for i, ids in enumerate(sp.encode(text.split("\n"))):
        if i:
            out.append(nl)
        out.extend(ids)
    return out


def sp_token_bytes(sp):
    """Bytes of every SentencePiece id for tokenizer.bin: byte pieces <0xNN> -> that byte; control and
    unknown tokens -> their piece text (b'</s>', b'<unk>'); other pieces -> UTF-8 with '\u2581' as ' '."""
    out = []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if sp.is_byte(i):
            out.append(bytes([int(piece[3:5], 16)]))
        elif sp.is_control(i) or sp.is_unknown(i):
            out.append(piece.encode("utf-8"))
        else:
            out.append(piece.replace("\u2581", " ").encode("utf-8"))
    return out


# ----------------------------------------------------------------------------------------------------------
# tokenizer.bin

def write_tokenizer_bin(path, token_bytes, eot_id):
    """Write llm.c's tokenizer.bin. A token longer than 255 bytes is cut to its first 255 bytes (the length
    field is one byte); returns how many were cut (0 for GPT-2, SentencePiece and synthetic vocabularies)."""
    header = np.zeros(256, dtype="<u4")
    header[0], header[1], header[2], header[3] = TOKENIZER_MAGIC, TOKENIZER_VERSION, len(token_bytes), eot_id
    cut = 0
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for b in token_bytes:
            if len(b) > 255:
                b, cut = b[:255], cut + 1
            f.write(bytes([len(b)]) + b)
    return cut


def read_tokenizer_bin(path):
    """Parse tokenizer.bin back: returns (vocab_size, eot_id, list of token bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        raise ValueError(f"{path}: shorter than the 1024-byte header")
    header = np.frombuffer(data[:1024], dtype="<u4")
    if header[0] != TOKENIZER_MAGIC or header[1] != TOKENIZER_VERSION:
        raise ValueError(f"{path}: bad magic/version {header[0]}/{header[1]}")
    vocab, eot = int(header[2]), int(header[3])
    tokens, pos = [], 1024
    for _ in range(vocab):
        if pos >= len(data):
            raise ValueError(f"{path}: truncated at token {len(tokens)}")
        n = data[pos]
        if pos + 1 + n > len(data):
            raise ValueError(f"{path}: truncated at token {len(tokens)}")
        tokens.append(data[pos + 1: pos + 1 + n])
        pos += 1 + n
    if pos != len(data):
        raise ValueError(f"{path}: {len(data) - pos} trailing bytes after {vocab} tokens")
    return vocab, eot, tokens


# ----------------------------------------------------------------------------------------------------------
# the per-process document encoder used by data/prepare.py (in worker processes or in-process)

class DocEncoder:
    """Turns documents into token ids, EOT first. spec: ("gpt2", bpe_dir or None) or ("sp", model_path)."""

    def __init__(self, spec):
        kind, arg = spec
        if kind == "gpt2":
            enc = load_gpt2(arg)
            self.eot = GPT2_EOT
            self.encode = enc.encode_ordinary  # text is text: a literal "<|endoftext|>" in it is not special
        else:
            sp = load_sentencepiece(arg)
            self.eot = sp.eos_id()
            self.encode = lambda text: sp_encode(sp, text)

    def encode_document(self, text):
        """(1 + n,) uint32: EOT followed by the document's tokens."""
        ids = self.encode(text)
        out = np.empty(len(ids) + 1, dtype=np.uint32)
        out[0] = self.eot
        out[1:] = ids
        return out
