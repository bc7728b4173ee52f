#!/usr/bin/env python3
"""Peer benchmark: our LS-attention kernel (llmc/cuda/attention_ls.cuh) against PyTorch on the GPU.

Ours is timed by the kernel lab binary (build/dev/attention_ls, `--json`: CUDA events, median, inputs
rotated beyond L2); PyTorch by this script on tensors of the same shape:
  LS   (G < NH): flex_attention (torch.compile'd) with a per-head block mask
                 (head < NH-G: causal window of P keys, else causal)
  MHSA (G = NH): scaled_dot_product_attention, flash backend, is_causal=True
Forward and forward+backward, bf16 in/out. Before timing, the script checks that both sides compute
the same function: the lab's --dump (our output on random qkv) against a dense masked softmax in
fp32 computed here, and flex / SDPA against the same dense reference.

    python3 dev/bench/attention_vs_torch.py [--lab build/dev/attention_ls] [--out DIR] [--reps 50]
    python3 dev/bench/attention_vs_torch.py --self-test     # pure helpers, no torch, no GPU

Writes a table (with ratios torch/ours) to stdout and DIR/attention_vs_torch.json (commit, device).
Needs torch with CUDA (imported lazily); without CUDA it says so and exits 1.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

# (name, B, T, NH, hd, G, P): the paper's shape, GPT-2-124M-like shapes, and MHSA (G = NH) of each.
SHAPES = [
    ("paper LS", 64, 2048, 6, 32, 1, 50),
    ("paper MHSA", 64, 2048, 6, 32, 6, 50),
    ("124M LS T1024", 16, 1024, 12, 64, 1, 64),
    ("124M MHSA T1024", 16, 1024, 12, 64, 12, 64),
    ("124M LS T2048", 8, 2048, 12, 64, 1, 64),
    ("124M MHSA T2048", 8, 2048, 12, 64, 12, 64),
]


# ---------------------------------------------------------------------------------------------
# pure helpers (tested by --self-test without torch)
# ---------------------------------------------------------------------------------------------
def visible_pairs(B, T, NH, G, P):
    """Number of (query, key) pairs the attention really computes (local heads: window P)."""
    local_row = sum(min(i + 1, P) for i in range(T))
    global_row = T * (T + 1) // 2
    return B * ((NH - G) * local_row + G * global_row)


def attention_flops(B, T, NH, hd, G, P, backward):
    """FLOPs on the visible pairs: forward 4*hd per pair (QK^T, PV); backward 10*hd more."""
    per_pair = 4 * hd + (10 * hd if backward else 0)
    return per_pair * visible_pairs(B, T, NH, G, P)


def read_dump(path):
    """The lab's --dump file: int32 B,T,NH,hd,G,P; float32 softcap; fp32 qkv (B,T,3C), out (B,T,C), lse (B,NH,T).
    Returns a dict with the header fields and flat lists (or numpy arrays when numpy is present)."""
    with open(path, "rb") as f:
        data = f.read()
    B, T, NH, hd, G, P = struct.unpack_from("<6i", data, 0)
    (softcap,) = struct.unpack_from("<f", data, 24)
    C = NH * hd
    sizes = [B * T * 3 * C, B * T * C, B * NH * T]
    expect = 28 + 4 * sum(sizes)
    if len(data) != expect:
        raise ValueError(f"{path}: {len(data)} bytes, expected {expect} for B={B} T={T} NH={NH} hd={hd}; "
                         "re-run the lab with --dump")
    try:
        import numpy as np
        arr = np.frombuffer(data, dtype="<f4", offset=28)
        parts, off = [], 0
        for n in sizes:
            parts.append(arr[off:off + n])
            off += n
    except ImportError:
        flat = struct.unpack_from(f"<{sum(sizes)}f", data, 28)
        parts, off = [], 0
        for n in sizes:
            parts.append(list(flat[off:off + n]))
            off += n
    return dict(B=B, T=T, NH=NH, hd=hd, G=G, P=P, softcap=softcap, qkv=parts[0], out=parts[1], lse=parts[2])


def parse_lab_json(stdout):
    """The last line of `attention_ls --json` output that parses as a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("attention_ls --json printed no JSON line:\n" + stdout)


def format_table(rows):
    """rows: dicts with name, ours_fwd, torch_fwd, ours_fb, torch_fb (ms) and torch_impl."""
    head = f"{'shape':<18} {'torch impl':<14} {'ours fwd':>9} {'torch fwd':>9} {'x':>6} {'ours f+b':>9} {'torch f+b':>9} {'x':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['name']:<18} {r['torch_impl']:<14} {r['ours_fwd']:9.3f} {r['torch_fwd']:9.3f} "
                     f"{r['torch_fwd'] / r['ours_fwd']:6.2f} {r['ours_fb']:9.3f} {r['torch_fb']:9.3f} "
                     f"{r['torch_fb'] / r['ours_fb']:6.2f}")
    lines.append("times in ms (median); x = torch time / our time (> 1: ours faster)")
    return "\n".join(lines)


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def self_test():
    assert visible_pairs(1, 4, 1, 1, 1) == 10          # global: 1+2+3+4
    assert visible_pairs(1, 4, 1, 0, 2) == 1 + 2 + 2 + 2  # window 2
    assert visible_pairs(2, 4, 2, 1, 1) == 2 * (4 + 10)
    assert visible_pairs(1, 5, 1, 0, 100) == 15         # P >= T equals global
    assert attention_flops(1, 4, 1, 32, 1, 1, False) == 4 * 32 * 10
    assert attention_flops(1, 4, 1, 32, 1, 1, True) == 14 * 32 * 10
    # dump round trip
    B, T, NH, hd, G, P = 1, 2, 1, 2, 1, 5
    C = NH * hd
    vals = [float(i) for i in range(B * T * 3 * C + B * T * C + B * NH * T)]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "dump.bin")
        with open(path, "wb") as f:
            f.write(struct.pack("<6i", B, T, NH, hd, G, P) + struct.pack("<f", 1.5))
            f.write(struct.pack(f"<{len(vals)}f", *vals))
        dd = read_dump(path)
        assert (dd["B"], dd["T"], dd["NH"], dd["hd"], dd["G"], dd["P"]) == (B, T, NH, hd, G, P)
        assert dd["softcap"] == 1.5
        assert list(dd["qkv"]) == vals[:12] and list(dd["out"]) == vals[12:16] and list(dd["lse"]) == vals[16:]
        with open(path, "ab") as f:
            f.write(b"\0")
        try:
            read_dump(path)
            raise AssertionError("a truncated/extended dump must be refused")
        except ValueError:
            pass
    assert parse_lab_json("noise\n{\"fwd_ms\": 1.5}\n")["fwd_ms"] == 1.5
    t = format_table([dict(name="x", torch_impl="flex", ours_fwd=1.0, torch_fwd=3.0, ours_fb=2.0, torch_fb=4.0)])
    assert "3.00" in t and "2.00" in t
    print("attention_vs_torch self-test: OK")


# ---------------------------------------------------------------------------------------------
# torch side (GPU)
# ---------------------------------------------------------------------------------------------
def split_qkv(torch, qkv, B, T, NH, hd):
    """(B, T, 3C) -> q, k, v each (B, NH, T, hd), contiguous."""
    x = qkv.view(B, T, 3, NH, hd).permute(2, 0, 3, 1, 4)
    return x[0].contiguous(), x[1].contiguous(), x[2].contiguous()


def dense_reference(torch, q, k, v, G, P, softcap=0.0):
    """Masked softmax attention in fp32 with the full T x T matrix (small shapes only). Returns (B, NH, T, hd)."""
    B, NH, T, hd = q.shape
    s = torch.einsum("bhid,bhjd->bhij", q.float(), k.float()) / hd ** 0.5
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(T, device=q.device)[:, None]
    j = torch.arange(T, device=q.device)[None, :]
    causal = j <= i
    window = (i - j) < P
    heads = torch.arange(NH, device=q.device)[:, None, None]
    mask = causal[None] & (window[None] | (heads >= NH - G))  # (NH, T, T)
    s = s.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("bhij,bhjd->bhid", torch.softmax(s, dim=-1), v.float())


def rel_err(torch, x, ref):
    x, ref = x.float(), ref.float()
    if not torch.isfinite(x).all():
        return float("inf")
    return (torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref)).item()


def make_flex(torch, NH, G, P, T):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (((q_idx - kv_idx) < P) | (h >= NH - G))

    block_mask = create_block_mask(mask_mod, B=None, H=NH, Q_LEN=T, KV_LEN=T, device="cuda")
    compiled = torch.compile(flex_attention)
    return lambda q, k, v: compiled(q, k, v, block_mask=block_mask)


def make_sdpa(torch):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def f(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return f


def time_torch(torch, fn, q, k, v, reps, backward):
    q = q.detach().requires_grad_(backward)
    k = k.detach().requires_grad_(backward)
    v = v.detach().requires_grad_(backward)
    grad = torch.randn_like(q)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for r in range(reps + 3):
        e0.record()
        out = fn(q, k, v)
        if backward:
            out.backward(grad)
        e1.record()
        torch.cuda.synchronize()
        if r >= 3:
            ms.append(e0.elapsed_time(e1))
        q.grad = k.grad = v.grad = None
    ms.sort()
    return ms[len(ms) // 2]


def check_same_function(torch, lab, tol):
    """Ours (lab --dump), flex and SDPA against the dense fp32 reference on random inputs."""
    results = {}
    B, T, NH, hd, G, P = 2, 300, 6, 32, 1, 50
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "dump.bin")
        subprocess.run([lab, "--dump", path, "-B", str(B), "-T", str(T), "--nh", str(NH), "--hd", str(hd),
                        "-G", str(G), "-P", str(P)], check=True, capture_output=True, text=True)
        dump = read_dump(path)
    qkv = torch.tensor(dump["qkv"], device="cuda").view(B, T, 3 * NH * hd)
    q, k, v = split_qkv(torch, qkv, B, T, NH, hd)
    ref = dense_reference(torch, q, k, v, G, P)                                   # (B, NH, T, hd)
    ours = torch.tensor(dump["out"], device="cuda").view(B, T, NH, hd).permute(0, 2, 1, 3)
    results["ours_vs_dense"] = rel_err(torch, ours, ref)
    flex = make_flex(torch, NH, G, P, T)
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    results["flex_vs_dense"] = rel_err(torch, flex(qb, kb, vb), ref)
    ref_mhsa = dense_reference(torch, q, k, v, NH, P)
    results["sdpa_vs_dense_mhsa"] = rel_err(torch, make_sdpa(torch)(qb, kb, vb), ref_mhsa)
    ok = all(e <= tol for e in results.values())
    for name, e in results.items():
        print(f"  {name:<20} rel err {e:.3e} {'ok' if e <= tol else 'FAIL'}")
    return ok, results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", default="build/dev/attention_ls", help="the kernel lab binary (make build/dev/attention_ls)")
    ap.add_argument("--out", default="out/bench", help="directory for attention_vs_torch.json")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--self-test", action="store_true", help="test the pure helpers (no torch, no GPU) and exit")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0

    import torch  # lazily: the self-test and CI have no CUDA torch
    if not torch.cuda.is_available():
        print("attention_vs_torch: no CUDA device visible to torch; run on the GPU machine")
        return 1
    if not os.path.exists(args.lab):
        print(f"attention_vs_torch: lab binary {args.lab} not found; build it with `make {args.lab}`")
        return 1
    device = torch.cuda.get_device_name(0)
    print(f"attention_vs_torch on {device}, torch {torch.__version__}")
    print("checking that ours, flex_attention and SDPA compute the same function (vs dense fp32):")
    ok, check = check_same_function(torch, args.lab, 2e-2)
    if not ok:
        print("attention_vs_torch: outputs disagree; not timing")
        return 1

    rows, records = [], []
    for name, B, T, NH, hd, G, P in SHAPES:
        # no --kernel: the lab times its production path (the trainer's kernels), whichever that is
        lab = subprocess.run([args.lab, "--json", "-B", str(B), "-T", str(T), "--nh", str(NH),
                              "--hd", str(hd), "-G", str(G), "-P", str(P), "--reps", str(args.reps)],
                             check=True, capture_output=True, text=True)
        ours = parse_lab_json(lab.stdout)
        qkv = torch.randn(B, T, 3 * NH * hd, device="cuda", dtype=torch.bfloat16)
        q, k, v = split_qkv(torch, qkv, B, T, NH, hd)
        if G == NH:
            impl, fn = "sdpa flash", make_sdpa(torch)
        else:
            impl, fn = "flex compiled", make_flex(torch, NH, G, P, T)
        t_fwd = time_torch(torch, fn, q, k, v, args.reps, False)
        t_fb = time_torch(torch, fn, q, k, v, args.reps, True)
        del q, k, v, qkv
        torch.cuda.empty_cache()
        row = dict(name=name, torch_impl=impl, ours_fwd=ours["fwd_ms"], torch_fwd=t_fwd,
                   ours_fb=ours["fwdbwd_ms"], torch_fb=t_fb)
        rows.append(row)
        records.append(dict(row, B=B, T=T, NH=NH, hd=hd, G=G, P=P, ours_kernel=ours["kernel"],
                            ours_fwd_tflops=ours["fwd_tflops"], ours_fwdbwd_tflops=ours["fwdbwd_tflops"],
                            torch_fwd_tflops=attention_flops(B, T, NH, hd, G, P, False) / t_fwd * 1e-9,
                            torch_fwdbwd_tflops=attention_flops(B, T, NH, hd, G, P, True) / t_fb * 1e-9,
                            speedup_fwd=t_fwd / ours["fwd_ms"], speedup_fwdbwd=t_fb / ours["fwdbwd_ms"]))
        print(f"  {name}: ours (lab --kernel {ours['kernel']}) {ours['fwd_ms']:.3f}/{ours['fwdbwd_ms']:.3f} ms, {impl} {t_fwd:.3f}/{t_fb:.3f} ms")

    print()
    print(format_table(rows))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "attention_vs_torch.json")
    with open(path, "w") as f:
        json.dump(dict(commit=git_commit(), device=device, torch=torch.__version__, reps=args.reps,
                       same_function_check=check, results=records), f, indent=2)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
