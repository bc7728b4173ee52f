"""
The debug-state file (test/fixtures/<name>_debug.bin): what the reference computed for one
fixture model, for the C++ tests to compare against. Format (little-endian) in README.md.
numpy only.
"""
from dataclasses import dataclass, field

import numpy as np

DEBUG_MAGIC = 20250522
DEBUG_VERSION = 1
HEADER_INTS = 256


def _f2i(x):
    return int(np.array([x], dtype=np.float32).view(np.int32)[0])


def _i2f(i):
    return float(np.array([i], dtype=np.int32).view(np.float32)[0])


@dataclass
class DebugState:
    B: int
    T: int
    V: int
    Vp: int
    L: int
    NH: int
    z_weight: float
    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    grad_clip: float
    inputs: np.ndarray        # (B, T) int32
    targets: np.ndarray       # (B, T) int32
    logits: np.ndarray        # (B, T, V) fp32, real vocabulary only
    loss: float               # mean cross-entropy
    z_loss: float             # z_weight * mean(lse^2)
    grads: np.ndarray         # (num_params) fp32, d(loss + z_loss)/d(params), table order
    attn_max: np.ndarray      # (L, NH) max pre-softmax logit over unmasked pairs (before soft-cap)
    attn_min: np.ndarray      # (L, NH) min
    attn_entropy: np.ndarray  # (L, NH) mean over the B*T query rows of the attention entropy (nats)
    out_max_logit: float      # max output logit over the batch, real vocabulary
    out_mean_lse: float       # mean over positions of logsumexp(real-vocabulary logits)
    step_loss: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))       # (N) CE before update k
    step_z_loss: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))     # (N)
    step_grad_norm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # (N) before clipping


def write_debug(path, d: DebugState):
    n = d.grads.size
    N = d.step_loss.size
    assert d.step_z_loss.size == N and d.step_grad_norm.size == N
    h = np.zeros(HEADER_INTS, dtype=np.int32)
    h[0], h[1] = DEBUG_MAGIC, DEBUG_VERSION
    h[2], h[3], h[4], h[5] = d.B, d.T, d.V, d.Vp
    h[6:8] = np.array([n & 0xFFFFFFFF, n >> 32], dtype=np.uint32).view(np.int32)
    h[8] = N
    h[9:16] = [_f2i(x) for x in (d.z_weight, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, d.grad_clip)]
    h[16], h[17] = d.L, d.NH
    f32 = lambda a: np.ascontiguousarray(a, dtype="<f4").tobytes()  # noqa: E731
    i32 = lambda a: np.ascontiguousarray(a, dtype="<i4").tobytes()  # noqa: E731
    assert d.inputs.shape == (d.B, d.T) and d.targets.shape == (d.B, d.T)
    assert d.logits.shape == (d.B, d.T, d.V)
    assert d.attn_max.shape == (d.L, d.NH) == d.attn_min.shape == d.attn_entropy.shape
    with open(path, "wb") as f:
        f.write(h.astype("<i4").tobytes())
        f.write(i32(d.inputs))
        f.write(i32(d.targets))
        f.write(f32(d.logits))
        f.write(f32([d.loss, d.z_loss]))
        f.write(f32(d.grads))
        f.write(f32(d.attn_max))
        f.write(f32(d.attn_min))
        f.write(f32(d.attn_entropy))
        f.write(f32([d.out_max_logit, d.out_mean_lse]))
        f.write(f32(d.step_loss))
        f.write(f32(d.step_z_loss))
        f.write(f32(d.step_grad_norm))


def read_debug(path) -> DebugState:
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:HEADER_INTS * 4], dtype="<i4")
    if h[0] != DEBUG_MAGIC or h[1] != DEBUG_VERSION:
        raise ValueError(f"{path}: not a version-{DEBUG_VERSION} debug-state file (magic {h[0]}, version {h[1]})")
    B, T, V, Vp = (int(x) for x in h[2:6])
    hu = h.view(np.uint32)
    n = int(hu[6]) | (int(hu[7]) << 32)
    N = int(h[8])
    z, lr, b1, b2, eps, wd, clip = (_i2f(int(x)) for x in h[9:16])
    L, NH = int(h[16]), int(h[17])
    pos = HEADER_INTS * 4

    def take(count, dt):
        nonlocal pos
        a = np.frombuffer(raw, dtype=dt, count=count, offset=pos)
        pos += count * 4
        return a.copy()
    inputs = take(B * T, "<i4").reshape(B, T)
    targets = take(B * T, "<i4").reshape(B, T)
    logits = take(B * T * V, "<f4").reshape(B, T, V)
    loss, z_loss = (float(x) for x in take(2, "<f4"))
    grads = take(n, "<f4")
    amax = take(L * NH, "<f4").reshape(L, NH)
    amin = take(L * NH, "<f4").reshape(L, NH)
    aent = take(L * NH, "<f4").reshape(L, NH)
    omax, olse = (float(x) for x in take(2, "<f4"))
    sl, sz, sn = take(N, "<f4"), take(N, "<f4"), take(N, "<f4")
    if pos != len(raw):
        raise ValueError(f"{path}: {len(raw)} bytes, expected {pos} from its header")
    return DebugState(B, T, V, Vp, L, NH, z, lr, b1, b2, eps, wd, clip, inputs, targets, logits, loss, z_loss,
                      grads, amax, amin, aent, omax, olse, sl, sz, sn)
