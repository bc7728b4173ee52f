#!/usr/bin/env bash
# The paper's setting on PG-19 (arXiv 2505.15548): SentencePiece 10K vocabulary; 6 layers, C = 192,
# 6 heads of 32, T = 2048; AdamW lr 6e-4, betas 0.9/0.95, weight decay 0.1, clip 1.0, warmup 2000.
# Six variants, one run each, then plots and a summary table (scripts/plot_run.py):
#   mhsa          plain MHSA (G = 6)
#   ls            LS-attention: 5 local heads (P = 50) + 1 global
#   mhsa_qknorm   MHSA + QK-norm
#   mhsa_zloss    MHSA + z-loss 1e-4
#   mhsa_softcap  MHSA + attention soft-cap c = 50 (Gemma 2's value)
#   mhsa_qkclip   MHSA + QK-Clip tau = 100 (Kimi K2's threshold)
#
#   scripts/exp_pg19.sh [--out DIR] [--data DIR] [--source DIR] [--steps N | --tokens N]
#                       [--batch B] [--total-batch D] [--device auto|cpu|cuda] [--np N]
#                       [--variants "mhsa ls ..."] [--threads N] [--smoke]
#
# --data: the shards (default data/shards/pg19_sp; made with data/prepare.py from --source, default
# ../shared/data/pg19, when meta.json is missing). --steps (default 8000) or --tokens (steps =
# tokens / D). Per process B = --batch (default 8) sequences of 2048; D = --total-batch tokens per
# step (default 32768; gradient accumulation D / (B*2048*np)). --np N > 1 launches each run with
# `$MPIRUN -np N` (MPIRUN default "mpirun"; add e.g. MPIRUN="mpirun --allow-run-as-root").
# --smoke: a tiny model and data made from 3 small books, a few CPU steps (checks the pipeline only).
# Writes runs/<variant>/ (trainer output), plots/pg19_* and summary.md under --out
# (default out/exp_pg19). A run whose final checkpoint marker exists is not run again; an
# interrupted one resumes from its newest checkpoint (-y 1).
# Environment: TRAINER (default ./train_gpt2_ls), PYTHON (default python3). Docs: docs/experiments.md.
set -euo pipefail

TRAINER=${TRAINER:-./train_gpt2_ls}
PYTHON=${PYTHON:-python3}
MPIRUN=${MPIRUN:-mpirun}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

OUT=out/exp_pg19
DATA=data/shards/pg19_sp
SOURCE=$REPO/../shared/data/pg19
STEPS=8000
TOKENS=""
BATCH=8
TOTAL=32768
DEVICE=auto
NP=1
THREADS=0
VARIANTS="mhsa ls mhsa_qknorm mhsa_zloss mhsa_softcap mhsa_qkclip"
SMOKE=0
SOFTCAP=50
QKCLIP=100
WINDOW=50
# the paper's model and optimizer (ls-small preset = 6 layers, C 192, 6 heads, maxT 2048)
MODEL=(-e ls-small --layers 6 --channels 192 --heads 6 --max-seq-len 2048)
T=2048
OPT=(-l 6e-4 --beta1 0.9 --beta2 0.95 -c 0.1 --grad-clip 1.0 -u 2000 -k cosine -q 0.1)
EVAL=(-v 250 -m 20 -s 0 -n 1000)
PREP=(--vocab-size 10000)

die() { echo "error: $*" >&2; exit 1; }
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value; see $0 --help"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) need "$@"; OUT=$2; shift 2 ;;
    --data) need "$@"; DATA=$2; shift 2 ;;
    --source) need "$@"; SOURCE=$2; shift 2 ;;
    --steps) need "$@"; STEPS=$2; TOKENS=""; shift 2 ;;
    --tokens) need "$@"; TOKENS=$2; shift 2 ;;
    --batch) need "$@"; BATCH=$2; shift 2 ;;
    --total-batch) need "$@"; TOTAL=$2; shift 2 ;;
    --device) need "$@"; DEVICE=$2; shift 2 ;;
    --np) need "$@"; NP=$2; shift 2 ;;
    --variants) need "$@"; VARIANTS=$2; shift 2 ;;
    --threads) need "$@"; THREADS=$2; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; see $0 --help" ;;
  esac
done

if [[ $SMOKE == 1 ]]; then  # 6 heads kept (the variants are defined by them), everything else tiny
  MODEL=(-e ls-small --layers 1 --channels 48 --heads 6 --max-seq-len 64)
  WINDOW=8
  T=64; BATCH=2; TOTAL=smoke; STEPS=4; TOKENS=""
  OPT=(-l 6e-4 --beta1 0.9 --beta2 0.95 -c 0.1 --grad-clip 1.0 -u 2 -k cosine -q 0.1)
  EVAL=(-v 2 -m 2 -s 0)
  [[ $DEVICE == auto ]] && DEVICE=cpu
  [[ $THREADS == 0 ]] && THREADS=1
  if [[ $DATA == data/shards/pg19_sp ]]; then  # 3 small books, vocabulary 400
    DATA=$OUT/data
    mkdir -p "$OUT/books"
    for b in pg45265 pg45264 pg14304; do
      [[ -f $SOURCE/$b.txt ]] || die "smoke mode needs $SOURCE/$b.txt; pass --source DIR (the PG-19 books)"
      ln -sf "$(cd "$SOURCE" && pwd)/$b.txt" "$OUT/books/$b.txt"
    done
    SOURCE=$OUT/books
    PREP=(--vocab-size 400 --sp-train-lines 3000 --val-fraction 0.34)
  fi
fi

[[ -x $TRAINER ]] || die "trainer $TRAINER not found; build it with 'make train_gpt2_ls' or set TRAINER=path"
[[ $TOTAL == smoke ]] && TOTAL=$((BATCH * T * ${NP//[^0-9]/}))  # smoke: one micro-batch per process
for n in STEPS BATCH TOTAL NP; do  # (TOTAL is --total-batch)
  [[ ${!n} =~ ^[0-9]+$ && ${!n} -ge 1 ]] || die "${n,,} = ${!n} must be a positive integer (--steps, --batch, --total-batch, --np)"
done
(( TOTAL % (BATCH * T * NP) == 0 )) || \
  die "--total-batch $TOTAL is not a multiple of B*T*np = $BATCH*$T*$NP; change --total-batch or --batch"
if [[ -n $TOKENS ]]; then
  [[ $TOKENS =~ ^[0-9]+$ ]] || die "--tokens $TOKENS must be a positive integer"
  STEPS=$(( TOKENS / TOTAL )); (( STEPS >= 1 )) || die "--tokens $TOKENS is less than one step of $TOTAL tokens"
fi
for v in $VARIANTS; do
  case $v in mhsa|ls|mhsa_qknorm|mhsa_zloss|mhsa_softcap|mhsa_qkclip) ;;
    *) die "unknown variant '$v'; pick from: mhsa ls mhsa_qknorm mhsa_zloss mhsa_softcap mhsa_qkclip" ;; esac
done

# -- data: PG-19 with a SentencePiece BPE vocabulary ------------------------------------------------
if [[ ! -f $DATA/meta.json ]]; then
  [[ -d $SOURCE ]] || die "no PG-19 books at $SOURCE; pass --source DIR (a directory of Gutenberg .txt books)"
  echo "== tokenizing PG-19 ($SOURCE) into $DATA"
  "$PYTHON" "$REPO/data/prepare.py" --dataset pg19 --source "$SOURCE" --out "$DATA" --tokenizer sp "${PREP[@]}"
fi

variant_flags() {
  case $1 in
    mhsa) echo "--global-heads 6" ;;
    ls) echo "--global-heads 1 --window $WINDOW" ;;
    mhsa_qknorm) echo "--global-heads 6 --qk-norm" ;;
    mhsa_zloss) echo "--global-heads 6 --z-loss 1e-4" ;;
    mhsa_softcap) echo "--global-heads 6 --attn-softcap $SOFTCAP" ;;
    mhsa_qkclip) echo "--global-heads 6 --qk-clip $QKCLIP" ;;
  esac
}

launch=("$TRAINER")
if [[ $NP -gt 1 ]]; then read -r -a mpi <<< "$MPIRUN"; launch=("${mpi[@]}" -np "$NP" "$TRAINER"); fi

mkdir -p "$OUT/runs" "$OUT/plots"
dirs=()
for v in $VARIANTS; do
  dir=$OUT/runs/$v
  dirs+=("$dir")
  if [[ -f $dir/DONE_$(printf %08d "$STEPS") ]]; then echo "== $dir done already"; continue; fi
  resume=0; ls "$dir"/DONE_* > /dev/null 2>&1 && resume=1
  echo "== $v: $(variant_flags "$v") | $STEPS steps of $TOTAL tokens | device $DEVICE | np $NP | resume $resume"
  mkdir -p "$dir"
  # shellcheck disable=SC2046
  "${launch[@]}" -i "$DATA/train_*.bin" -j "$DATA/val_*.bin" -o "$dir" -y "$resume" \
    "${MODEL[@]}" $(variant_flags "$v") -b "$BATCH" -t "$T" -d "$TOTAL" -x "$STEPS" "${OPT[@]}" "${EVAL[@]}" \
    --device "$DEVICE" --threads "$THREADS" >> "$dir.log" 2>&1 \
    || { tail -3 "$dir.log" >&2; die "run $v failed; see $dir.log"; }
done

"$PYTHON" "$HERE/plot_run.py" "${dirs[@]}" --out "$OUT/plots/pg19" --heads max --threshold 20 > /dev/null
cp "$OUT/plots/pg19_summary.md" "$OUT/summary.md"
echo "== summary ($OUT/summary.md, plots in $OUT/plots)"
cat "$OUT/summary.md"
