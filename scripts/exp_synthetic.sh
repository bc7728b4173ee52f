#!/usr/bin/env bash
# Synthetic experiment: does the max attention logit of plain MHSA grow with T/C while LS-attention
# (G = 1 global head + local heads) stays bounded? Small models on the synthetic dense-local language
# (docs/data.md), CPU-feasible in minutes. For each (C, T) of the grid three runs: MHSA (G = NH),
# LS (G = 1) and all-local (G = 0); then plots and a summary table (scripts/plot_run.py).
#
#   scripts/exp_synthetic.sh [--out DIR] [--data DIR] [--grid "C:T C:T ..."] [--steps N] [--lr LR]
#                            [--jobs J] [--threads N] [--smoke] [--force] [--plots 0|1]
# (each option also as --option=value, as the trainer takes them)
# --smoke: a tiny model on a vocabulary-16 language, grid "16:32 16:64", 6 steps (a --grid or --steps
# given is used instead): checks that the pipeline runs.
# --plots 0: the summary table alone (plot_run.py --no-figures), no plots (default 1).
# --data DIR: the synthetic language's shards (default the repository's data/shards/synthetic_v64, from any
# directory; made there when missing); a folder of other data (text shards) is refused.
#
# Writes under --out (default out/exp_synthetic):
#   runs/C<C>_T<T>_<mhsa|ls|local>/   trainer output dirs (metrics.jsonl, logit_stats.jsonl, ...)
#   plots/C<C>_T<T>_*                 the three variants of one (C, T) compared (every head)
#   plots/{mhsa,ls,local}_*           one variant across the grid (max over heads)
#   plots/all_*, plots/all_ratio.*    every run; peak max-logit and val loss vs T/C
#   summary.md                        the table of every run
# Each run's settings are kept in runs/<name>.args (scripts/exp_run_settings.sh). Started again, the
# script reuses a run only when its recorded settings equal the ones asked now: a finished one (its
# final checkpoint marker exists) is not run again, an unfinished one is continued (-y 1). A run of
# other settings (another --lr, --steps, --data, ...) is refused with one line before anything runs
# (choose another --out); --force deletes such runs and trains them again. So is a run another trainer
# trained (runs/<name>.build: other sources, rebuilt, or another TRAINER).
# The trainer's note: lines (e.g. a window not below T: the local heads compute as global ones) are
# relayed to the console as "== NAME: note: ...", as exp_pg19.sh does.
# Environment: TRAINER (default the repository's train_gpt2_ls, wherever the script is started), PYTHON (default python3). Docs: docs/experiments.md.
set -euo pipefail

PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
TRAINER=${TRAINER:-$REPO/train_gpt2_ls}  # the repository's, from any directory

OUT=out/exp_synthetic
DATA=$REPO/data/shards/synthetic_v64  # the repository's, from any directory
DATA_GIVEN=""
GRID="64:128 32:128 64:512 32:512"   # C:T pairs, T/C = 2, 4, 8, 16
STEPS=500
LR=1e-2
WARMUP=30
TOKENS=2048          # tokens per step (B = TOKENS / T)
LAYERS=2
HEADS=4
WINDOW=32            # local heads see 32 keys; the language's copies are >= 64 tokens back
JOBS=1
THREADS=1
SMOKE=0
FORCE=0
PLOTS=1
STEPS_GIVEN=""
GRID_GIVEN=""
SYN_ARGS=(--syn-vocab 64 --syn-length 3000000)

die() { echo "error: $*" >&2; exit 1; }
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value; see $0 --help"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) need "$@"; OUT=$2; shift 2 ;;
    --data) need "$@"; DATA=$2; DATA_GIVEN=1; shift 2 ;;
    --grid) need "$@"; GRID=$2; GRID_GIVEN=1; shift 2 ;;
    --steps) need "$@"; STEPS=$2; STEPS_GIVEN=1; shift 2 ;;
    --lr) need "$@"; LR=$2; shift 2 ;;
    --jobs) need "$@"; JOBS=$2; shift 2 ;;
    --threads) need "$@"; THREADS=$2; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --force) FORCE=1; shift ;;
    --plots) need "$@"; PLOTS=$2; shift 2 ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;  # --flag=value (the trainer's form too): --flag value
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; see $0 --help" ;;
  esac
done

if [[ $SMOKE == 1 ]]; then  # tiny budget: checks that the pipeline runs, shows nothing (a --grid or --steps given wins)
  [[ -n $GRID_GIVEN ]] || GRID="16:32 16:64"
  [[ -n $STEPS_GIVEN ]] || STEPS=6
  WARMUP=2; TOKENS=128; LAYERS=1; WINDOW=8
  [[ -n $DATA_GIVEN ]] || DATA=$OUT/data
  SYN_ARGS=(--syn-vocab 16 --syn-length 20000 --syn-doc-len 1024 --syn-copy-min-dist 8 --syn-copy-max-dist 64)
fi
[[ -x $TRAINER ]] || die "trainer $TRAINER not found; build it with 'make train_gpt2_ls' or set TRAINER=path"
[[ $STEPS =~ ^[0-9]+$ && $STEPS -ge 1 ]] || die "--steps $STEPS must be a positive integer"
[[ $JOBS =~ ^[0-9]+$ && $JOBS -ge 1 ]] || die "--jobs $JOBS must be a positive integer"
[[ $PLOTS == 0 || $PLOTS == 1 ]] || die "--plots $PLOTS must be 0 (the summary table alone) or 1"
DATA=$(realpath -m "$DATA")  # recorded in each run's settings: one spelling of the directory
# shellcheck source=scripts/exp_run_settings.sh
source "$HERE/exp_run_settings.sh"
# shellcheck source=scripts/tree_state.sh
source "$HERE/tree_state.sh"
# shellcheck source=scripts/exp_notes.sh
source "$HERE/exp_notes.sh"

# run_args C T G: the trainer flags of one run (its recorded settings) into the array ARGS
run_args() {
  local C=$1 T=$2 G=$3 B=$((TOKENS / $2)); [[ $B -ge 1 ]] || B=1
  ARGS=(-i "$DATA/train_*.bin" -j "$DATA/val_*.bin"
    --layers "$LAYERS" --channels "$C" --heads "$HEADS" --global-heads "$G" --window "$WINDOW"
    --max-seq-len "$T" -b "$B" -t "$T" -x "$STEPS" -l "$LR" -u "$WARMUP"
    -v $((STEPS / 6 > 0 ? STEPS / 6 : 1)) -m 8 -s 0)
}
VARIANTS=("mhsa $HEADS" "ls 1" "local 0")
# every run that exists holds this experiment (or --force replaces it), before anything is made
for ct in $GRID; do
  for v in "${VARIANTS[@]}"; do
    read -r name G <<< "$v"
    run_args "${ct%%:*}" "${ct##*:}" "$G"
    settings_check "$OUT/runs/C${ct%%:*}_T${ct##*:}_$name" "$FORCE" "${ARGS[@]}" || exit 1
  done
done
# and was trained by this trainer
BUILD_ID=$(trainer_build "$TRAINER" "$REPO" "$(tree_state "$REPO")") || die "cannot read the trainer $TRAINER"
for ct in $GRID; do
  for v in "${VARIANTS[@]}"; do
    read -r name G <<< "$v"
    why=$(build_check "$OUT/runs/C${ct%%:*}_T${ct##*:}_$name" "$FORCE" "$BUILD_ID") || die "$why"
  done
done

# -- data: the synthetic language (vocabulary 64 so a tiny model learns it in minutes) ------------
if [[ ! -f $DATA/meta.json ]]; then
  echo "== generating synthetic data into $DATA"
  "$PYTHON" "$REPO/data/prepare.py" --dataset synthetic --out "$DATA" --workers "$THREADS" "${SYN_ARGS[@]}"
fi
# the experiment is of the synthetic language: data of another kind (a --data of text shards) is refused,
# and the header names the language's parameters (a --data of another synthetic language is the user's choice)
language=$("$PYTHON" - "$DATA/meta.json" << 'PY'
import json, sys
try:
    m = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"error: cannot read {sys.argv[1]} ({e})")
    sys.exit(0)
s = m.get("synthetic") if isinstance(m, dict) else None
if m.get("dataset") != "synthetic" or not isinstance(s, dict):
    print(f"error: --data {sys.argv[1].rsplit('/meta.json', 1)[0]} holds {m.get('dataset')!r} data "
          f"(tokenizer {m.get('tokenizer')!r}, vocabulary {m.get('vocab_size')}), not the synthetic language this "
          f"experiment is about; give --data a folder of data/prepare.py --dataset synthetic, or drop --data")
else:
    print(f"synthetic language: vocabulary {s.get('vocab')}, copies {s.get('copy_min_dist')}-"
          f"{s.get('copy_max_dist')} tokens back (rate {s.get('copy_rate')}), order {s.get('order')}")
PY
)
[[ $language != error:* ]] || die "${language#error: }"
echo "== data: $DATA ($language)"

# -- runs ---------------------------------------------------------------------------------------
mkdir -p "$OUT/runs" "$OUT/plots"
run_one() {  # C T G name (settings_check passed: the run is new or of these settings)
  local C=$1 T=$2 G=$3 dir=$OUT/runs/C$1_T$2_$4 resume=0 ARGS
  if [[ -f $dir/DONE_$(printf %08d "$STEPS") ]]; then echo "== $dir done already"; return 0; fi
  [[ -f $dir/config.json ]] && resume=1  # an unfinished run of the same settings: continue it
  run_args "$C" "$T" "$G"
  settings_write "$dir" "${ARGS[@]}"
  build_write "$dir" "$BUILD_ID"
  local B=$((TOKENS / T)); [[ $B -ge 1 ]] || B=1
  echo "== $dir: C=$C T=$T G=$G/$HEADS B=$B steps=$STEPS$([[ $resume == 0 ]] || echo ", continued (-y 1)")"
  local from rc=0
  from=$(log_start "$dir.log")
  "$TRAINER" "${ARGS[@]}" -o "$dir" -y "$resume" --threads "$THREADS" --device cpu >> "$dir.log" 2>&1 || rc=$?
  relay_notes_of "$(basename "$dir")" "$dir.log" "$from"  # the trainer's notes (e.g. T <= P: the local heads are global)
  [[ $rc == 0 ]] || { echo "error: run $dir failed; see $dir.log" >&2; tail -3 "$dir.log" >&2; return 1; }
}

names=()
for ct in $GRID; do
  C=${ct%%:*}; T=${ct##*:}
  for v in "${VARIANTS[@]}"; do
    read -r name G <<< "$v"
    while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
    run_one "$C" "$T" "$G" "$name" &
    names+=("$OUT/runs/C${C}_T${T}_$name")
  done
done
wait || true
for d in "${names[@]}"; do  # a run is complete when its final checkpoint marker exists
  [[ -f $d/DONE_$(printf %08d "$STEPS") ]] || die "run $d did not finish; $d.log says why"
done

# -- plots and table ----------------------------------------------------------------------------
all=(); runs_mhsa=(); runs_ls=(); runs_local=()
for ct in $GRID; do
  C=${ct%%:*}; T=${ct##*:}; d=$OUT/runs/C${C}_T${T}
  if [[ $PLOTS == 1 ]]; then
    "$PYTHON" "$HERE/plot_run.py" "${d}_mhsa" "${d}_ls" "${d}_local" --out "$OUT/plots/C${C}_T${T}" --heads all \
      --formats png > /dev/null
  fi
  all+=("${d}_mhsa" "${d}_ls" "${d}_local"); runs_mhsa+=("${d}_mhsa"); runs_ls+=("${d}_ls"); runs_local+=("${d}_local")
done
for v in mhsa ls local; do  # one variant across the grid
  declare -n dirs=runs_$v
  if [[ $PLOTS == 1 ]]; then "$PYTHON" "$HERE/plot_run.py" "${dirs[@]}" --out "$OUT/plots/$v" --formats png > /dev/null; fi
done
figures=(--by-ratio --formats "png,svg"); [[ $PLOTS == 1 ]] || figures=(--no-figures)
"$PYTHON" "$HERE/plot_run.py" "${all[@]}" --out "$OUT/plots/all" "${figures[@]}" > /dev/null
cp "$OUT/plots/all_summary.md" "$OUT/summary.md"
echo "== summary ($OUT/summary.md, plots in $OUT/plots)"
cat "$OUT/summary.md"
