"""llm.c token shards: write them while tokenizing, read them back (tests and tools).

File layout (docs/formats.md): a header of 256 little-endian int32
    [0] magic 20240520, [1] version (1 => uint16 tokens, 2 => uint32 tokens), [2] token count N,
    [3..255] zero
followed by N tokens. File size = 1024 + N * (2 if version 1 else 4).
"""
import os

import numpy as np

SHARD_MAGIC = 20240520
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_SHARD_TOKENS = 2**31 - 1  # header[2] is an int32


def shard_version_for_vocab(vocab_size):
    """Version 1 (uint16) when every id fits in 16 bits, else version 2 (uint32)."""
    return 1 if vocab_size <= 65536 else 2


def _token_dtype(version):
    return np.dtype("<u2") if version == 1 else np.dtype("<u4")


def write_shard(path, tokens, version):
    """Write one shard. tokens: 1-D integer array (N,), every id must fit the version's width."""
    tokens = np.asarray(tokens)
    if version not in (1, 2):
        raise ValueError(f"shard version must be 1 or 2, got {version}")
    if tokens.ndim != 1 or len(tokens) == 0 or len(tokens) > MAX_SHARD_TOKENS:
        raise ValueError(f"{path}: a shard needs 1..{MAX_SHARD_TOKENS} tokens in a 1-D array")
    dtype = _token_dtype(version)
    if tokens.min() < 0 or tokens.max() > np.iinfo(dtype).max:
        raise ValueError(f"{path}: token ids must be in [0, {np.iinfo(dtype).max}] for version {version}")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(dtype).tobytes())


def read_shard_header(path):
    """Return (version, num_tokens) after checking magic, version and the file size."""
    size = os.path.getsize(path)
    if size < HEADER_BYTES:
        raise ValueError(f"{path}: {size} bytes is shorter than the 1024-byte shard header; regenerate it with data/prepare.py")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header[0] != SHARD_MAGIC:
        raise ValueError(f"{path}: bad magic {header[0]} (expected {SHARD_MAGIC}); not a token shard")
    version, n = int(header[1]), int(header[2])
    if version not in (1, 2):
        raise ValueError(f"{path}: unknown shard version {version} (expected 1 or 2)")
    expected = HEADER_BYTES + n * _token_dtype(version).itemsize
    if size != expected:
        raise ValueError(f"{path}: file has {size} bytes but the header's {n} tokens need {expected}; the file is truncated or corrupt")
    return version, n


def read_shard(path):
    """Return the tokens of one shard as a 1-D uint16 (version 1) or uint32 (version 2) array."""
    version, n = read_shard_header(path)
    return np.fromfile(path, dtype=_token_dtype(version), count=n, offset=HEADER_BYTES)


def read_split(out_dir, split):
    """All tokens of one split (train or val): its shards concatenated in order, as uint32."""
    paths = shard_paths(out_dir, split)
    if not paths:
        raise ValueError(f"{out_dir}: no {split}_*.bin shards; run data/prepare.py first")
    return np.concatenate([read_shard(p).astype(np.uint32) for p in paths])


def shard_paths(out_dir, split):
    names = sorted(n for n in os.listdir(out_dir) if n.startswith(split + "_") and n.endswith(".bin"))
    return [os.path.join(out_dir, n) for n in names]


def shard_name(split, index):
    return f"{split}_{index:06d}.bin"


class ShardWriter:
    """Accumulates tokens of one split and writes <split>_000000.bin, <split>_000001.bin, ... each holding
    exactly shard_tokens tokens except the last."""

    def __init__(self, out_dir, split, shard_tokens, version):
        self.out_dir, self.split, self.shard_tokens, self.version = out_dir, split, shard_tokens, version
        self.pending = []       # list of 1-D arrays not yet written
        self.pending_count = 0
        self.paths = []         # shards written so far
        self.num_tokens = 0     # tokens written or pending

    def add(self, tokens):
        tokens = np.asarray(tokens, dtype=np.uint32)
        self.pending.append(tokens)
        self.pending_count += len(tokens)
        self.num_tokens += len(tokens)
        while self.pending_count >= self.shard_tokens:
            buf = np.concatenate(self.pending)
            self._write(buf[: self.shard_tokens])
            rest = buf[self.shard_tokens:]
            self.pending, self.pending_count = ([rest] if len(rest) else []), len(rest)

    def close(self):
        """Write the last partial shard; returns the list of shard paths."""
        if self.pending_count:
            self._write(np.concatenate(self.pending))
            self.pending, self.pending_count = [], 0
        return self.paths

    def _write(self, tokens):
        path = os.path.join(self.out_dir, shard_name(self.split, len(self.paths)))
        write_shard(path, tokens, self.version)
        self.paths.append(path)
