#!/usr/bin/env bash
# The paper's mechanism on real text at CPU scale (issue 29; docs/experiments.md, "Real text"):
# small models at fixed width C, the sequence length T varied so that T/C = 8, 16, 32, on PG-19 (or
# WikiText-2) with a small SentencePiece vocabulary. Per ratio the variants below, same seed, data
# order and budget; extra seeds for MHSA and LS at the key ratio.
#
#   scripts/exp_text_ratio.sh [--out DIR] [--corpus pg19|wikitext2] [--data DIR] [--source DIR]
#                             [--ratios "16 32 8"] [--variants "mhsa ls ..."] [--seeds "1"]
#                             [--key-ratio R] [--key-seeds "2"] [--steps N] [--jobs J] [--smoke]
#                             [--plots-only] [--plots 0|1] [--force]
# (each option also as --option=value, as the trainer takes them)
#
# Variants: mhsa (G = NH), ls (G = 1, window P), local (G = 0), mhsa_qknorm, mhsa_zloss (1e-4),
# mhsa_softcap (--attn-softcap SOFTCAP), mhsa_qkclip (--qk-clip QKCLIP); mhsa_softcapN and
# mhsa_qkclipN (N an integer >= 1 without a leading 0: mhsa_qkclip15) use the threshold N instead. Every run records the
# near/far statistics with N = P (`--near`), so the global heads' short-range mass is measured at
# every ratio, and checkpoints on a logit alarm (z-score > 8 against the last 100 steps).
# Defaults: L 2, C 32, NH 4 (hd 8), so T = 256, 512, 1024; P 32 at every T (the short range of text
# does not grow with T); 8192 tokens per step (B = 8192 / T), 4000 steps, lr 3e-3 cosine to 10%,
# warmup 200; SentencePiece vocabulary 1024; one thread per run (--jobs runs at a time), each under
# `nice -n $NICE` (default 10; the script never changes its caller's priority). Soft-cap and QK-Clip at 30: this size's MHSA logits stay far below the paper-scale values
# (50, 100), which would never act. Priority order of the runs: MHSA and LS at every ratio (as
# given), all-local at every ratio, the extra seeds, the stabilizers at the key ratio, then at the
# other ratios.
# Every run checkpoints every 250 steps and resumes from its newest checkpoint (-y 1) when the
# script is started again; a finished run (its DONE marker at --steps) is skipped. Both only for a
# run of the same settings: each run's are kept in runs/<name>.args (scripts/exp_run_settings.sh),
# and a run of other settings (another --steps, --data, ...) or that another trainer trained
# (runs/<name>.build; not checked by --plots-only) is refused with one line before anything runs
# (choose another --out; --force deletes such runs and trains them again).
# Data that exists (OUT/data, or --data DIR) is used only when its meta.json records what is asked: the
# corpus (pg19, or wikitext2's plain text), SentencePiece, the vocabulary (1024; 400 with --smoke), in
# OUT/data --smoke's two books or not, and, when --source is given, the books of --source (--smoke: its
# first two; data/source_check.py). Other data is refused with one line before any run is touched or
# started, the data left as it is (choose another --out or --data, or delete OUT/data to prepare it again):
# --smoke and the full experiment share the default --out. Every new run is also given --expect-tokenizer
# sp --expect-vocab V, so the trainer refuses other data itself (a resumed run takes them from its record).
# --smoke: two books, vocabulary 400, C 16, NH 2, P 4, 256 tokens per step, ratios "2 4" (key ratio 2),
# 6 steps (STEPS_SMOKE=N: N); a --steps, --ratios or --key-ratio given beside it is used instead.
# --plots-only draws what has finished so far. --plots 0: the summary table alone, no plots (default 1).
# Writes under --out (default out/exp_text_<corpus>): data/ (shards, tokenizer) unless --data,
# runs/r<T/C>_<variant>_s<seed>/ (+ .log), plots/, summary.md.
# Output: the report (every "==" line, the summary table) on stdout, error: and note: lines on stderr,
# as exp_pg19.sh and exp_synthetic.sh do (docs/experiments.md); the trainer's note: lines of a run are
# part of the report, relayed when it ends as "== NAME: note: ...".
# Environment: TRAINER (default the repository's train_gpt2_ls, wherever the script is started), PYTHON (default python3), NICE (default 10).
set -euo pipefail

NICE=${NICE:-10}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
TRAINER=${TRAINER:-$REPO/train_gpt2_ls}  # the repository's, from any directory

CORPUS=pg19
OUT=""
DATA=""
SOURCE=""
SOURCE_GIVEN=0
RATIOS="16 32 8"
VARIANTS="mhsa ls local mhsa_qknorm mhsa_zloss mhsa_softcap mhsa_qkclip"
SEEDS="1"
KEY_RATIO=16
KEY_SEEDS="2"
STEPS=4000
JOBS=2
SMOKE=0
PLOTS_ONLY=0
FORCE=0
PLOTS=1
LAYERS=2
C=32
HEADS=4
WINDOW=32
TOKENS=8192
LR=3e-3
WARMUP=200
VOCAB=1024
SOFTCAP=30
QKCLIP=30
CKPT_EVERY=250
STEPS_GIVEN=""
RATIOS_GIVEN=""
KEY_RATIO_GIVEN=""

die() { echo "error: $*" >&2; exit 1; }
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value; see $0 --help"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) need "$@"; OUT=$2; shift 2 ;;
    --corpus) need "$@"; CORPUS=$2; shift 2 ;;
    --data) need "$@"; DATA=$2; shift 2 ;;
    --source) need "$@"; SOURCE=$2; SOURCE_GIVEN=1; shift 2 ;;
    --ratios) need "$@"; RATIOS=$2; RATIOS_GIVEN=1; shift 2 ;;
    --variants) need "$@"; VARIANTS=$2; shift 2 ;;
    --seeds) need "$@"; SEEDS=$2; shift 2 ;;
    --key-ratio) need "$@"; KEY_RATIO=$2; KEY_RATIO_GIVEN=1; shift 2 ;;
    --key-seeds) KEY_SEEDS=${2-}; shift 2 ;;
    --steps) need "$@"; STEPS=$2; STEPS_GIVEN=1; shift 2 ;;
    --jobs) need "$@"; JOBS=$2; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --plots-only) PLOTS_ONLY=1; shift ;;
    --force) FORCE=1; shift ;;
    --plots) need "$@"; PLOTS=$2; shift 2 ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;  # --flag=value (the trainer's form too): --flag value
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; see $0 --help" ;;
  esac
done

case $CORPUS in
  pg19) SOURCE=${SOURCE:-$REPO/../shared/data/pg19}; PREP=(--dataset pg19); DATASET=pg19; UNIT=books ;;
  wikitext2) SOURCE=${SOURCE:-$REPO/../shared/data/wikitext2}; PREP=(--dataset text); DATASET=text; UNIT=files ;;
  *) die "--corpus $CORPUS: use pg19 or wikitext2" ;;
esac
OUT=${OUT:-out/exp_text_$CORPUS}
SP_LINES=500000
if [[ $SMOKE == 1 ]]; then  # checks the pipeline only: 2 books, a tiny model, a few steps (a --steps, --ratios or --key-ratio given wins)
  C=16; HEADS=2; LAYERS=1; WINDOW=4; TOKENS=256; WARMUP=2; CKPT_EVERY=3; VOCAB=400; SP_LINES=2000
  [[ -n $STEPS_GIVEN ]] || STEPS=${STEPS_SMOKE:-6}
  [[ -n $RATIOS_GIVEN ]] || RATIOS="2 4"
  [[ -n $KEY_RATIO_GIVEN ]] || KEY_RATIO=2
fi
for n in STEPS JOBS KEY_RATIO; do [[ ${!n} =~ ^[0-9]+$ && ${!n} -ge 1 ]] || die "--${n,,} ${!n} must be a positive integer"; done
for r in $RATIOS; do
  [[ $r =~ ^[0-9]+$ && $r -ge 1 ]] || die "--ratios: '$r' is not a positive integer"
  (( TOKENS % (r * C) == 0 )) || die "--ratios: T = $r x $C does not divide the $TOKENS tokens of a step"
done
for v in $VARIANTS; do
  [[ $v =~ ^(mhsa|ls|local|mhsa_qknorm|mhsa_zloss|mhsa_softcap([1-9][0-9]*)?|mhsa_qkclip([1-9][0-9]*)?)$ ]] \
    || die "unknown variant '$v'; pick from: mhsa ls local mhsa_qknorm mhsa_zloss mhsa_softcap mhsa_qkclip (mhsa_softcapN, mhsa_qkclipN: threshold N >= 1, no leading 0: 0 turns it off)"
done
[[ -x $TRAINER ]] || die "trainer $TRAINER not found; build it with 'make cpu' or set TRAINER=path"
[[ $FORCE == 1 && $PLOTS_ONLY == 1 ]] && die "--force deletes runs of other settings and --plots-only trains none; drop one of them"
[[ $PLOTS == 0 || $PLOTS == 1 ]] || die "--plots $PLOTS must be 0 (the summary table alone) or 1"
[[ $PLOTS == 0 && $PLOTS_ONLY == 1 ]] && die "--plots-only draws the plots and --plots 0 draws none; drop one of them"

variant_flags() {  # the attention variant's flags
  case $1 in
    mhsa) echo "--global-heads $HEADS" ;;
    ls) echo "--global-heads 1" ;;
    local) echo "--global-heads 0" ;;
    mhsa_qknorm) echo "--global-heads $HEADS --qk-norm" ;;
    mhsa_zloss) echo "--global-heads $HEADS --z-loss 1e-4" ;;
    mhsa_softcap*) local cap=${1#mhsa_softcap}; echo "--global-heads $HEADS --attn-softcap ${cap:-$SOFTCAP}" ;;
    mhsa_qkclip*) local tau=${1#mhsa_qkclip}; echo "--global-heads $HEADS --qk-clip ${tau:-$QKCLIP}" ;;
  esac
}

# -- the runs, in priority order ---------------------------------------------------------------------
plan=()  # "ratio variant seed", in priority order, each once (--seeds and --key-seeds may name one run twice)
has() { [[ " $VARIANTS " == *" $1 "* ]]; }
plan_add() {  # plan_add "ratio variant seed": appended unless planned already
  local p
  for p in "${plan[@]}"; do [[ $p == "$1" ]] && return 0; done
  plan+=("$1")
}
stabilizers=()
for v in $VARIANTS; do case $v in mhsa|ls|local) ;; *) stabilizers+=("$v") ;; esac; done
for s in $SEEDS; do
  for r in $RATIOS; do for v in mhsa ls; do has $v && plan_add "$r $v $s"; done; done
  for r in $RATIOS; do has local && plan_add "$r local $s"; done
done
for s in $KEY_SEEDS; do
  for v in mhsa ls; do [[ " $RATIOS " == *" $KEY_RATIO "* ]] && has $v && plan_add "$KEY_RATIO $v $s"; done
done
for s in $SEEDS; do
  for v in "${stabilizers[@]}"; do [[ " $RATIOS " == *" $KEY_RATIO "* ]] && plan_add "$KEY_RATIO $v $s"; done
  for r in $RATIOS; do
    [[ $r == "$KEY_RATIO" ]] && continue
    for v in "${stabilizers[@]}"; do plan_add "$r $v $s"; done
  done
done
done_marker() { echo "$1/DONE_$(printf %08d "$STEPS")"; }

DATA=$(realpath -m "${DATA:-$OUT/data}")  # recorded in each run's settings: one spelling of the directory
OWN_DATA=0; [[ $DATA == "$(realpath -m "$OUT/data")" ]] && OWN_DATA=1  # prepared by this script (else --data's)

# -- the data that exists is the data asked for, checked before any run is looked at, replaced or started ----
# (corpus, tokenizer, vocabulary; in OUT/data --smoke's or the full experiment's; a --source given: its books)
corpus_name() { case $1 in pg19) echo PG-19 ;; text) echo "plain text (--corpus wikitext2)" ;; *) echo "$1" ;; esac; }
if [[ -f $DATA/meta.json ]]; then
  read -r d_set d_tok d_vocab d_docs d_smoke < <("$PYTHON" -c '
import json, os, sys
try:
    m = json.load(open(sys.argv[1]))
    a = m.get("args") if isinstance(m.get("args"), dict) else {}
    src = a.get("source") if isinstance(a.get("source"), list) else []  # --smoke prepares OUT/smoke_src
    smoke = len(src) == 1 and os.path.basename(os.path.normpath(str(src[0]))) == "smoke_src"
    print(m.get("dataset") or "unnamed", m.get("tokenizer") or "unnamed", m.get("vocab_size") or "unknown",
          len(m.get("sources") or []) or "unknown", int(smoke))
except Exception:
    sys.exit(1)' "$DATA/meta.json") \
    || die "$DATA/meta.json is not readable JSON, so $DATA is not data this script can check; $([[ $OWN_DATA == 1 ]] && echo "choose another --out, or delete $DATA to prepare it again" || echo "give --data the directory data/prepare.py made")"
  d_unit=books; [[ $d_set == pg19 ]] || d_unit=files
  held="$(corpus_name "$d_set") from $d_docs $d_unit, tokenizer $d_tok, vocabulary $d_vocab"
  [[ $d_smoke == 0 ]] || held+=" (--smoke's data)"
  asked="$(corpus_name "$DATASET"), tokenizer sp, vocabulary $VOCAB (the full experiment)"
  [[ $SMOKE == 0 ]] || asked="$(corpus_name "$DATASET"), tokenizer sp, vocabulary $VOCAB (--smoke's 2 $UNIT)"
  if [[ $OWN_DATA == 1 ]]; then
    fix="choose another --out for this experiment, or delete $DATA to prepare it there again"
    [[ $d_smoke == "$SMOKE" ]] || fix="choose another --out for this experiment (--smoke and the full experiment share the default out/exp_text_$CORPUS), or delete $DATA to prepare it there again"
  else
    fix="give --data a directory of that data (data/prepare.py ${PREP[*]} --tokenizer sp --vocab-size $VOCAB --source DIR --out NEW_DIR), or drop --data to prepare it under --out"
  fi
  if [[ $d_set != "$DATASET" || $d_tok != sp || $d_vocab != "$VOCAB" ]] || [[ $OWN_DATA == 1 && $d_smoke != "$SMOKE" ]]; then
    die "$DATA holds $held, where this start asks for $asked: $fix"
  fi
  if [[ $SOURCE_GIVEN == 1 ]]; then  # the books the data was made from (names and sizes; data/source_check.py)
    [[ -d $SOURCE ]] || die "no $CORPUS text at --source $SOURCE; check the path, or drop --source to run on $DATA"
    tmp=$(mktemp -d); meta=$DATA/meta.json; books=$SOURCE
    if [[ $d_set == text ]]; then  # prepare.py names a text file of a directory DIR/NAME: compare the NAMEs
      meta=$tmp/meta.json
      "$PYTHON" -c 'import json, sys
m = json.load(open(sys.argv[1]))
for s in (m.get("sources") or []) + (m.get("duplicate_sources") or []):
    s["file"] = str(s["file"]).split("/", 1)[-1]
json.dump(m, open(sys.argv[2], "w"))' "$DATA/meta.json" "$meta" 2> /dev/null || true
    fi
    if [[ $SMOKE == 1 ]]; then  # --smoke's data is made of the first two: compare with those
      books=$tmp/books; mkdir "$books"
      for f in $(ls "$SOURCE"/*.txt 2> /dev/null | head -2); do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$books/"; done
    fi
    rc=0; why=$("$PYTHON" "$REPO/data/source_check.py" "$meta" "$books") || rc=$?
    rm -rf "$tmp"
    why=${why//"in $tmp/books"/"first .txt $UNIT of $SOURCE"}; why=${why//"$tmp/meta.json"/"$DATA/meta.json"}
    [[ $rc == 0 ]] || [[ $rc == 1 ]] || die "cannot tell whether $DATA was made from --source $SOURCE ($why): drop --source to run on it, or $fix"
    [[ $rc == 0 ]] || die "$DATA holds $(corpus_name "$d_set") $why: drop --source to run on it, or $fix"
  fi
fi
# shellcheck source=scripts/exp_run_settings.sh
source "$HERE/exp_run_settings.sh"
# shellcheck source=scripts/exp_notes.sh
source "$HERE/exp_notes.sh"
# shellcheck source=scripts/tree_state.sh
source "$HERE/tree_state.sh"
run_args() {  # ratio variant seed: the trainer flags of one run (its recorded settings) into the array ARGS
  local T=$(($1 * C))
  # shellcheck disable=SC2207  # the variant's flags are a list of words
  ARGS=(-i "$DATA/train_*.bin" -j "$DATA/val_*.bin"
    --layers "$LAYERS" --channels "$C" --heads "$HEADS" --window "$WINDOW" --near "$WINDOW"
    --max-seq-len "$T" $(variant_flags "$2") -b $((TOKENS / T)) -t "$T" -x "$STEPS" -l "$LR" -u "$WARMUP"
    --seed "$3" -v $((STEPS / 20 > 0 ? STEPS / 20 : 1)) -m 8 -s 0 -n "$CKPT_EVERY" --keep-checkpoints 2
    --logit-alarm 8)
}
# every run that exists holds this experiment (or --force replaces it), before anything is made
for p in "${plan[@]}"; do
  # shellcheck disable=SC2086  # "ratio variant seed"
  run_args $p
  read -r r v s <<< "$p"
  settings_check "$OUT/runs/r${r}_${v}_s$s" "$FORCE" "${ARGS[@]}" || exit 1
done
# and was trained by this trainer (--plots-only trains none: it reads what the runs hold)
BUILD_ID=$(trainer_build "$TRAINER" "$REPO" "$(tree_state "$REPO")") || die "cannot read the trainer $TRAINER"
if [[ $PLOTS_ONLY == 0 ]]; then
  for p in "${plan[@]}"; do
    read -r r v s <<< "$p"
    why=$(build_check "$OUT/runs/r${r}_${v}_s$s" "$FORCE" "$BUILD_ID") || die "$why"
  done
fi

# -- data ------------------------------------------------------------------------------------------
if [[ $OWN_DATA == 1 ]]; then
  if [[ ! -f $DATA/meta.json ]]; then
    [[ -d $SOURCE ]] || die "no $CORPUS text at $SOURCE; pass --source DIR"
    src=$SOURCE
    if [[ $SMOKE == 1 ]]; then  # two small books (or WikiText-2's two files)
      mkdir -p "$OUT/smoke_src"
      for f in $(ls "$SOURCE"/*.txt | head -2); do ln -sf "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$OUT/smoke_src/"; done
      src=$OUT/smoke_src
    fi
    echo "== tokenizing $CORPUS ($src) into $DATA: SentencePiece BPE, vocabulary $VOCAB"
    "$PYTHON" "$REPO/data/prepare.py" "${PREP[@]}" --source "$src" --out "$DATA" --tokenizer sp \
      --vocab-size "$VOCAB" --sp-train-lines "$SP_LINES" --val-fraction 0.05 --workers 2
  fi
fi
[[ -f $DATA/meta.json ]] || die "no shards at $DATA (meta.json missing)"

run_one() {  # ratio variant seed (settings_check passed: the run is new or of these settings)
  local r=$1 v=$2 s=$3 T=$(($1 * C)) dir=$OUT/runs/r$1_$2_s$3 ARGS
  if [[ -f $(done_marker "$dir") ]]; then return 0; fi
  local resume=0
  [[ -f $dir/config.json ]] && resume=1  # its run, checkpointed or not: continue it (a new run there is refused)
  echo "== $(date +%H:%M:%S) r$r $v seed $s: T $T, B $((TOKENS / T)), $STEPS steps, resume $resume"
  mkdir -p "$dir"
  run_args "$r" "$v" "$s"
  settings_write "$dir" "${ARGS[@]}"
  build_write "$dir" "$BUILD_ID"
  local from rc=0
  from=$(log_start "$dir.log")
  # --expect-*: the trainer refuses data other than that checked above. They are settings of the run
  # (config.json): given to a new run, taken from its record by -y 1 (a run of an older script, which has
  # none, resumes as it was made, with no note and no history entry)
  local expect=()
  [[ $resume == 1 ]] || expect=(--expect-tokenizer sp --expect-vocab "$VOCAB")
  nice -n "$NICE" "$TRAINER" "${ARGS[@]}" -o "$dir" -y "$resume" --device cpu --threads 1 "${expect[@]}" \
    >> "$dir.log" 2>&1 || rc=$?
  relay_notes_of "$(basename "$dir")" "$dir.log" "$from"
  [[ $rc == 0 ]] || { echo "error: run $dir failed; see $dir.log" >&2; tail -3 "$dir.log" >&2; return 1; }
  echo "== $(date +%H:%M:%S) r$r $v seed $s: $(grep -a '^done:' "$dir.log" | tail -n 1)"
}

mkdir -p "$OUT/runs" "$OUT/plots"
failed=0
if [[ $PLOTS_ONLY == 0 ]]; then
  for p in "${plan[@]}"; do
    while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || failed=1; done
    # shellcheck disable=SC2086  # "ratio variant seed"
    run_one $p &
  done
  while [[ $(jobs -rp | wc -l) -gt 0 ]]; do wait -n || failed=1; done
fi

# -- plots and the summary of what has finished -------------------------------------------------------
finished=()
for p in "${plan[@]}"; do
  read -r r v s <<< "$p"
  d=$OUT/runs/r${r}_${v}_s$s
  [[ -f $(done_marker "$d") ]] && finished+=("$d")
done
if [[ ${#finished[@]} -gt 0 ]]; then
  if [[ $PLOTS == 1 ]]; then
    "$PYTHON" "$HERE/plot_run.py" "${finished[@]}" --out "$OUT/plots/all" --heads max --threshold 20 --by-ratio \
      --formats png > /dev/null
    for r in $RATIOS; do
      sel=()
      for d in "${finished[@]}"; do [[ $(basename "$d") == r${r}_* ]] && sel+=("$d"); done
      [[ ${#sel[@]} -gt 0 ]] && "$PYTHON" "$HERE/plot_run.py" "${sel[@]}" --out "$OUT/plots/r$r" --heads max \
        --threshold 20 --formats png > /dev/null
    done
  fi
  "$PYTHON" "$HERE/exp_summary.py" "${finished[@]}" > "$OUT/summary.md"
  echo "== summary of ${#finished[@]} of ${#plan[@]} runs ($OUT/summary.md$([[ $PLOTS == 1 ]] && echo ", plots in $OUT/plots"))"
  cat "$OUT/summary.md"
  # runs of an earlier start's other --ratios/--variants/--seeds are in runs/ but not in this plan
  planned=()
  for p in "${plan[@]}"; do
    read -r r v s <<< "$p"
    planned+=("$OUT/runs/r${r}_${v}_s$s")
  done
  others=0
  for d in "$OUT"/runs/r*_s*/; do
    [[ -d $d ]] || continue
    d=${d%/}
    [[ " ${planned[*]} " == *" $d "* ]] || others=$((others + 1))
  done
  [[ $others == 0 ]] || echo "note: $OUT/runs holds $others more run(s) than this start's plan (an earlier start's other --ratios, --variants or --seeds): summary.md and the plots are of this plan's runs; scripts/exp_summary.py $OUT/runs/r*_s* summarizes them all" >&2
fi
[[ $failed == 0 ]] || die "a run failed (its .log in $OUT/runs says why); start the script again to resume"
(( ${#finished[@]} == ${#plan[@]} )) || { echo "note: ${#finished[@]} of ${#plan[@]} runs finished" >&2; exit 3; }
