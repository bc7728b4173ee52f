"""
Reads and writes our model checkpoint format (docs/formats.md), written from that
document, independently of the C++ (llmc/io/checkpoint.h):

  header: 256 int32 little-endian
    [0] magic 20250521  [1] version (4; 3 without [24,25]; 1 or 2 without [22..25])
    [2] maxT  [3] V  [4] L  [5] NH  [6] C  [7] Vp  [8] G  [9] P
    [10] qk_norm  [11] tied_embeddings  [12] dtype (0 fp32, 1 bf16)  [13] attn_softcap float bits
    [14,15] number of parameters lo/hi  [16,17] 64-bit FNV-1a of the payload bytes lo/hi
    [18] step  [19] trained sequence length (-t; 0 = unknown, as this writer leaves it)
    [20] no biases (1 = none, 0 = GPT-2's biases)  [21] GELU (0 tanh, 1 erf)
    [22,23] versions 3, 4: 64-bit FNV-1a of the 1024 header bytes with these 8 bytes 0, lo/hi
    [24,25] version 4: 64-bit FNV-1a of the training data's tokenizer.bin, lo/hi (0 = unknown)  [26..255] 0
    (files written before 20 and 21 existed hold 0 there: biases, tanh GELU; versions 1 and 2 have no
    header checksum, [22..255] are 0 and the version must match [20, 21]: 1 for biases and tanh GELU)
  write_model writes version 1 or 2 (no header checksum), which the trainer reads too.
  payload: the flat parameters in llmc/core/params.h order, fp32 or bf16 (round-to-nearest-even);
  without biases the bias tensors are absent (size 0), the others keep their order.

Also reads llm.c's token shards (magic 20240520, version 1 uint16 / version 2 uint32), which the
cross-check tool needs. numpy only (no torch), so it can be imported anywhere.
"""
import ctypes
import functools
import os
import shutil
import subprocess
import tempfile

import numpy as np

from model_config import GELU_KINDS, Config, num_params

MODEL_MAGIC = 20250521
# version 1: GPT-2's biases and tanh GELU (header words 20, 21 zero); version 2: no biases or erf GELU
# (llmc/io/checkpoint.h: a reader that predates words 20 and 21 refuses it); the version must match them
MODEL_VERSION = 1
MODEL_VERSION_OPTIONS = 2
MODEL_VERSION_SUMMED = 3  # header checksum in words 22-23
MODEL_VERSION_TOKENIZER = 4  # the trainer's: version 3 with the tokenizer.bin's FNV-1a 64 in words 24-25
HEADER_SUM = 22
TOKENIZER = 24


def model_file_version(cfg):
    return MODEL_VERSION if cfg.bias and cfg.gelu == "tanh" else MODEL_VERSION_OPTIONS

SHARD_MAGIC = 20240520
STATE_MAGIC = 20250522  # a training-state file (state_NNNNNNNN_RRRRR.bin: optimizer state), never a model
LLMC_MAGIC = 20240326   # llm.c's gpt2_*.bin, which the trainer's -e reads (llmc/io/checkpoint.h), this reader not
HEADER_INTS = 256
NO_BIAS = 20  # header index: 1 = the model has no biases
GELU = 21     # header index: GELU_KINDS index (0 tanh, 1 erf)

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64_python(data: bytes) -> int:
    """64-bit FNV-1a of a byte string: h = offset; for each byte: h = (h ^ byte) * prime mod 2^64.
    Plain Python ints, ~10 MB/s."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


# The same loop in C, compiled once per process with the system's C compiler and loaded through ctypes:
# a benchmark's GPT-2-vocabulary checkpoint (~80 MB) takes ~10 s in Python, a fraction of a second here.
_FNV_C = """#include <stddef.h>
#include <stdint.h>
uint64_t fnv1a64(const unsigned char* p, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}
"""


@functools.lru_cache(maxsize=1)
def _fnv1a64_native():
    """The compiled loop as a ctypes function, or None where no C compiler builds it (then Python's)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    try:
        with tempfile.TemporaryDirectory() as d:
            src, lib = os.path.join(d, "fnv.c"), os.path.join(d, "fnv.so")
            with open(src, "w") as f:
                f.write(_FNV_C)
            if subprocess.run([cc, "-O2", "-shared", "-fPIC", src, "-o", lib], capture_output=True,
                              timeout=60).returncode != 0:
                return None
            fn = ctypes.CDLL(lib).fnv1a64  # the library stays mapped after its file is removed
    except (OSError, subprocess.SubprocessError):  # no writable temp dir, a compiler that cannot run
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    fn.restype = ctypes.c_uint64
    return fn


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a of a byte string (fnv1a64_python's loop; compiled where a C compiler is found, for
    inputs above 64 KiB)."""
    native = _fnv1a64_native() if len(data) > 1 << 16 else None
    if native is None:
        return fnv1a64_python(data)
    data = data if isinstance(data, bytes) else bytes(data)
    return int(native(data, len(data), FNV_OFFSET))


def header_checksum(h: np.ndarray, sum_at=HEADER_SUM) -> int:
    """The checksum a version-3 or 4 model header (256 int32; sum_at 22) or version-2 training-state header
    (sum_at 19) stores in words sum_at, sum_at + 1: FNV-1a 64 of its 1024 bytes with those words 0."""
    z = np.array(h, dtype="<i4").copy()
    z[sum_at:sum_at + 2] = 0
    return fnv1a64(z.tobytes())


def _stored_header_sum(h: np.ndarray, sum_at=HEADER_SUM) -> int:
    return (int(h[sum_at]) & 0xFFFFFFFF) | ((int(h[sum_at + 1]) & 0xFFFFFFFF) << 32)


def _float_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.int32)[0])


def _bits_float(i: int) -> float:
    return float(np.array([i], dtype=np.int32).view(np.float32)[0])


def fp32_to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even fp32 -> bf16 bit patterns (uint16). NaN stays NaN."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(a)
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def bf16_bits_to_fp32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def write_model(path, cfg: Config, params: np.ndarray, step=0, dtype="fp32"):
    """params: flat fp32 array of num_params(cfg) elements in table order."""
    params = np.ascontiguousarray(params, dtype=np.float32).reshape(-1)
    n = num_params(cfg)
    if params.size != n:
        raise ValueError(f"{path}: {params.size} parameters given, the config needs {n}")
    payload = params.tobytes() if dtype == "fp32" else fp32_to_bf16_bits(params).tobytes()
    checksum = fnv1a64(payload)
    h = np.zeros(HEADER_INTS, dtype=np.int32)
    h[0], h[1] = MODEL_MAGIC, model_file_version(cfg)
    h[2], h[3], h[4], h[5], h[6] = cfg.max_seq_len, cfg.vocab_size, cfg.num_layers, cfg.num_heads, cfg.channels
    h[7], h[8], h[9] = cfg.padded_vocab_size, cfg.global_heads, cfg.window
    h[10], h[11] = int(cfg.qk_norm), int(cfg.tied_embeddings)
    h[12] = {"fp32": 0, "bf16": 1}[dtype]
    h[13] = _float_bits(cfg.attn_softcap)
    h[14:16] = np.array([n & 0xFFFFFFFF, n >> 32], dtype=np.uint32).view(np.int32)
    h[16:18] = np.array([checksum & 0xFFFFFFFF, checksum >> 32], dtype=np.uint32).view(np.int32)
    h[18] = step
    h[NO_BIAS] = 0 if cfg.bias else 1
    h[GELU] = GELU_KINDS.index(cfg.gelu)
    with open(path, "wb") as f:
        f.write(h.astype("<i4").tobytes())
        f.write(payload)


class NotAModel(ValueError):
    """A file of another kind than a model (kind "state": a training-state file; "llmc": llm.c's GPT-2 checkpoint),
    named in the message as the trainer names it (llmc/io/checkpoint.h load_model_checkpoint)."""

    def __init__(self, message, kind):
        super().__init__(message)
        self.kind = kind


def read_model(path):
    """Returns (Config, flat fp32 params (np.ndarray), step). Raises ValueError on a bad file (NotAModel for a
    training-state file or an llm.c checkpoint)."""
    cfg, params, step, _ = read_model_with_tokenizer(path)
    return cfg, params, step


def read_model_with_tokenizer(path):
    """read_model's (Config, params, step) and the header's tokenizer id: the FNV-1a 64 of the training data's
    tokenizer.bin (version 4), 0 when unknown (versions 1 to 3, or data without a tokenizer.bin)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HEADER_INTS * 4:
        raise ValueError(f"{path}: {len(raw)} bytes, shorter than the 1024-byte header; not a model checkpoint")
    h = np.frombuffer(raw[:HEADER_INTS * 4], dtype="<i4")
    if h[0] == STATE_MAGIC:  # header word 2: its step
        model = os.path.join(os.path.dirname(path), f"model_{max(int(h[2]), 0):08d}.bin")
        raise NotAModel(f"{path}: a training-state file (optimizer state), not a model; pass the model file {model}",
                        "state")
    if h[0] == LLMC_MAGIC:
        raise NotAModel(f"{path}: an llm.c GPT-2 checkpoint (magic {LLMC_MAGIC}), not a train_gpt2_ls model file "
                        f"(magic {MODEL_MAGIC})", "llmc")
    if h[0] != MODEL_MAGIC:
        raise ValueError(f"{path}: bad magic {h[0]} (expected {MODEL_MAGIC}); not one of our model checkpoints")
    with_tokenizer = h[1] == MODEL_VERSION_TOKENIZER
    summed = h[1] == MODEL_VERSION_SUMMED or with_tokenizer
    if h[1] not in (MODEL_VERSION, MODEL_VERSION_OPTIONS, MODEL_VERSION_SUMMED, MODEL_VERSION_TOKENIZER):
        for version in (MODEL_VERSION_TOKENIZER, MODEL_VERSION_SUMMED):
            as_summed = h.copy()
            as_summed[1] = version
            if _stored_header_sum(h) == header_checksum(as_summed):
                raise ValueError(f"{path}: corrupt header: version word is {h[1]}, its header checksum says "
                                 f"{version}; the file is damaged")
        raise ValueError(f"{path}: unsupported version {h[1]} (expected {MODEL_VERSION} to {MODEL_VERSION_TOKENIZER})")
    first_reserved = TOKENIZER + 2 if with_tokenizer else HEADER_SUM + 2 if summed else HEADER_SUM
    nonzero = [i for i in range(first_reserved, HEADER_INTS) if h[i] != 0]
    if nonzero:
        raise ValueError(f"{path}: corrupt header: reserved header field {nonzero[0]} is {h[nonzero[0]]}, expected 0; "
                         f"the file is damaged")
    if summed and _stored_header_sum(h) != header_checksum(h):
        raise ValueError(f"{path}: corrupt header: header checksum mismatch; the file is damaged")
    if h[NO_BIAS] not in (0, 1):
        raise ValueError(f"{path}: no-bias flag (header index {NO_BIAS}) is {h[NO_BIAS]}, expected 0 or 1")
    if not 0 <= h[GELU] < len(GELU_KINDS):
        raise ValueError(f"{path}: GELU kind (header index {GELU}) is {h[GELU]}, expected 0 (tanh) or 1 (erf)")
    cfg = Config(max_seq_len=int(h[2]), vocab_size=int(h[3]), num_layers=int(h[4]), num_heads=int(h[5]),
                 channels=int(h[6]), padded_vocab_size=int(h[7]), global_heads=int(h[8]), window=int(h[9]),
                 qk_norm=bool(h[10]), tied_embeddings=bool(h[11]), attn_softcap=_bits_float(int(h[13])),
                 bias=int(h[NO_BIAS]) == 0, gelu=GELU_KINDS[int(h[GELU])])
    if not summed and h[1] != model_file_version(cfg):
        raise ValueError(f"{path}: version {h[1]} does not match its model fields (bias {cfg.bias}, {cfg.gelu} "
                         f"GELU: version {model_file_version(cfg)})")
    if not 0 <= h[19] <= h[2]:
        raise ValueError(f"{path}: trained sequence length (header index 19) is {h[19]}, outside [0, maxT {h[2]}]")
    dtype = int(h[12])
    if dtype not in (0, 1):
        raise ValueError(f"{path}: unknown payload dtype {dtype} (0 = fp32, 1 = bf16)")
    hu = h.view(np.uint32)
    n = int(hu[14]) | (int(hu[15]) << 32)
    if n != num_params(cfg):
        raise ValueError(f"{path}: header says {n} parameters but its config needs {num_params(cfg)}")
    payload = raw[HEADER_INTS * 4:]
    elem = 4 if dtype == 0 else 2
    if len(payload) != n * elem:
        raise ValueError(f"{path}: payload is {len(payload)} bytes, expected {n * elem}; the file is truncated or damaged")
    checksum = int(hu[16]) | (int(hu[17]) << 32)
    if fnv1a64(payload) != checksum:
        raise ValueError(f"{path}: payload checksum mismatch; the file is damaged")
    if dtype == 0:
        params = np.frombuffer(payload, dtype="<f4").astype(np.float32)
    else:
        params = bf16_bits_to_fp32(np.frombuffer(payload, dtype="<u2"))
    tokenizer_id = _stored_header_sum(h, TOKENIZER) if with_tokenizer else 0
    return cfg, params, int(h[18]), tokenizer_id


def read_shard(path):
    """llm.c token shard -> int64 numpy array of tokens."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HEADER_INTS * 4:
        raise ValueError(f"{path}: shorter than the 1024-byte shard header")
    h = np.frombuffer(raw[:HEADER_INTS * 4], dtype="<i4")
    if h[0] != SHARD_MAGIC:
        raise ValueError(f"{path}: bad magic {h[0]} (expected {SHARD_MAGIC}); not a token shard")
    if h[1] not in (1, 2):
        raise ValueError(f"{path}: unsupported shard version {h[1]} (1 = uint16, 2 = uint32)")
    dt = "<u2" if h[1] == 1 else "<u4"
    n = int(h[2])
    body = raw[HEADER_INTS * 4:]
    if len(body) != n * np.dtype(dt).itemsize:
        raise ValueError(f"{path}: header says {n} tokens but the file holds {len(body)} bytes of tokens")
    return np.frombuffer(body, dtype=dt).astype(np.int64)
