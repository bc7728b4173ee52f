"""
Cross-checks the trainer: loads one of our model checkpoints and a token shard (or glob), computes
the mean cross-entropy over B x T batches the way the trainer's --eval-only does (batch k covers
tokens [k*B*T, k*B*T + B*T + 1) of the concatenated shards; targets are inputs shifted by one),
prints the loss, and optionally compares with the trainer's --dump-logits file (raw float32
(B, T, V) logits of the first batch) or writes its own.

  /usr/bin/python3 dev/reference/eval_checkpoint.py -e out/model_00000100.bin \
      -j "data/shards/tinyshakespeare_gpt2/val_*.bin" -b 4 -t 64 -m 2 --compare-logits logits.bin

Runs in float64 on the CPU by default (--dtype float32, --device cuda on a GPU machine).
"""
import argparse
import glob
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint import read_model, read_shard  # noqa: E402
from gpt2_ls import forward, split_flat  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-e", "--model", required=True, help="our model checkpoint (.bin)")
    ap.add_argument("-j", "--tokens", required=True, help="token shard file or glob (llm.c format)")
    ap.add_argument("-b", "--batch-size", type=int, default=4)
    ap.add_argument("-t", "--seq-len", type=int, default=64)
    ap.add_argument("-m", "--max-batches", type=int, default=1, help="batches to average over (0 = all)")
    ap.add_argument("--z-loss", type=float, default=0.0, help="z-loss weight (reported separately)")
    ap.add_argument("--dump-logits", help="write the first batch's logits as raw float32 (B, T, V)")
    ap.add_argument("--compare-logits", help="the trainer's --dump-logits file to compare with")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    try:
        cfg, flat, step = read_model(args.model)
    except (OSError, ValueError) as e:
        sys.exit(f"error: {e}")
    files = sorted(glob.glob(args.tokens))
    if not files:
        sys.exit(f"error: --tokens '{args.tokens}' matches no file; give a shard path or a quoted glob")
    tokens = np.concatenate([read_shard(f) for f in files])
    B, T = args.batch_size, args.seq_len
    if T > cfg.max_seq_len:
        sys.exit(f"error: -t {T} exceeds the model's max_seq_len {cfg.max_seq_len}; use -t <= {cfg.max_seq_len}")
    if tokens.max() >= cfg.vocab_size:
        sys.exit(f"error: token id {tokens.max()} >= the model's vocabulary {cfg.vocab_size}; wrong shards?")
    n_batches = (len(tokens) - 1) // (B * T)
    if n_batches == 0:
        sys.exit(f"error: {len(tokens)} tokens are fewer than one batch of B*T+1 = {B * T + 1}; lower -b or -t")
    if args.max_batches > 0:
        n_batches = min(n_batches, args.max_batches)

    dtype = getattr(torch, args.dtype)
    p = split_flat(cfg, torch.from_numpy(flat).to(dtype=dtype, device=args.device))
    print(f"model {args.model}: step {step}, L={cfg.num_layers} C={cfg.channels} NH={cfg.num_heads} "
          f"G={cfg.global_heads} P={cfg.window} V={cfg.vocab_size} qk_norm={int(cfg.qk_norm)} "
          f"softcap={cfg.attn_softcap} tied={int(cfg.tied_embeddings)}")
    losses, zlosses = [], []
    with torch.no_grad():
        for k in range(n_batches):
            chunk = torch.from_numpy(tokens[k * B * T: k * B * T + B * T + 1]).to(args.device)
            idx, tgt = chunk[:-1].view(B, T), chunk[1:].view(B, T)
            logits, loss, z_loss = forward(cfg, p, idx, tgt, args.z_loss)
            losses.append(loss.item())
            zlosses.append(z_loss.item())
            if k == 0:
                first = logits[:, :, :cfg.vocab_size].float().cpu().numpy()
    print(f"val loss {np.mean(losses):.6f} over {n_batches} batches of {B}x{T}"
          + (f", z-loss {np.mean(zlosses):.6e}" if args.z_loss > 0 else ""))
    if args.dump_logits:
        first.astype("<f4").tofile(args.dump_logits)
        print(f"wrote {args.dump_logits}: float32 ({B}, {T}, {cfg.vocab_size})")
    if args.compare_logits:
        other = np.fromfile(args.compare_logits, dtype="<f4")
        if other.size != first.size:
            sys.exit(f"error: {args.compare_logits} holds {other.size} floats, expected B*T*V = {first.size}; "
                     f"pass the same -b/-t as the trainer")
        other = other.reshape(first.shape).astype(np.float64)
        ref = first.astype(np.float64)
        rel = np.linalg.norm(other - ref) / np.linalg.norm(ref)
        print(f"logits vs {args.compare_logits}: relative error {rel:.3e}, max abs diff {np.abs(other - ref).max():.3e}")


if __name__ == "__main__":
    main()
