"""Token shard writer/reader: header fields, file sizes, versions, splitting into shards, malformed files."""
import os

import numpy as np
import pytest

from shards import (HEADER_BYTES, SHARD_MAGIC, ShardWriter, read_shard, read_shard_header, read_split,
                    shard_version_for_vocab, write_shard)


@pytest.mark.parametrize("version,vocab", [(1, 65536), (2, 100_000)])
def test_write_read_round_trip(tmp_path, version, vocab):
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, vocab, size=12345)
    path = tmp_path / "s.bin"
    write_shard(path, tokens, version)
    # header read independently of the module: 256 little-endian int32
    header = np.frombuffer(path.read_bytes()[:HEADER_BYTES], dtype="<i4")
    assert header[0] == 20240520 == SHARD_MAGIC
    assert header[1] == version and header[2] == len(tokens)
    assert not header[3:].any()
    assert os.path.getsize(path) == 1024 + len(tokens) * (2 if version == 1 else 4)
    assert read_shard_header(path) == (version, len(tokens))
    back = read_shard(path)
    assert back.dtype == (np.uint16 if version == 1 else np.uint32)
    np.testing.assert_array_equal(back, tokens)


def test_version_for_vocab():
    assert shard_version_for_vocab(50257) == 1
    assert shard_version_for_vocab(65536) == 1   # ids up to 65535 fit uint16
    assert shard_version_for_vocab(65537) == 2


def test_v1_refuses_ids_over_uint16(tmp_path):
    with pytest.raises(ValueError, match="token ids"):
        write_shard(tmp_path / "s.bin", [1, 65536], 1)


def test_writer_splits_into_shards(tmp_path):
    rng = np.random.default_rng(2)
    parts = [rng.integers(0, 1000, size=n) for n in (7, 30, 1, 55, 19)]  # 112 tokens
    w = ShardWriter(str(tmp_path), "train", 25, 1)
    for p in parts:
        w.add(p)
    paths = w.close()
    assert [os.path.basename(p) for p in paths] == [f"train_{i:06d}.bin" for i in range(5)]
    assert [read_shard_header(p)[1] for p in paths] == [25, 25, 25, 25, 12]
    np.testing.assert_array_equal(read_split(str(tmp_path), "train"), np.concatenate(parts))
    assert w.num_tokens == 112


def test_reader_rejects_malformed(tmp_path):
    good = tmp_path / "good.bin"
    write_shard(good, np.arange(100), 1)
    data = good.read_bytes()
    (tmp_path / "magic.bin").write_bytes(b"\x00\x00\x00\x00" + data[4:])
    (tmp_path / "trunc.bin").write_bytes(data[:-2])
    (tmp_path / "ver.bin").write_bytes(data[:4] + np.int32(3).tobytes() + data[8:])
    (tmp_path / "short.bin").write_bytes(data[:100])
    with pytest.raises(ValueError, match="bad magic"):
        read_shard(tmp_path / "magic.bin")
    with pytest.raises(ValueError, match="truncated"):
        read_shard(tmp_path / "trunc.bin")
    with pytest.raises(ValueError, match="unknown shard version 3"):
        read_shard(tmp_path / "ver.bin")
    with pytest.raises(ValueError, match="shorter than"):
        read_shard(tmp_path / "short.bin")
