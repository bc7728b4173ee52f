#!/usr/bin/env bash
# The paper's setting on PG-19 (arXiv 2505.15548) with its author's settings (configs/paper_pg19.toml:
# SentencePiece 10K; 6 layers, C 192, 6 heads of 32, T 2048; untied LM head, no biases, exact GELU;
# AdamW lr 6e-4, betas 0.9/0.95, weight decay 0.1, clip 1.0, warmup 2000 then constant), one run per
# variant, then plots, a summary and a folder of packed logs. Variants:
#   mhsa          plain MHSA (G = 6)
#   ls            LS-attention: 5 local heads (P = 50) + 1 global (the preset)
#   local         all-local (G = 0, P = 50)
#   mhsa_qknorm   MHSA + QK-norm
#   mhsa_zloss    MHSA + z-loss 1e-4
#   mhsa_softcap  MHSA + attention soft-cap c = 50 (Gemma 2's value)
#   mhsa_qkclip   MHSA + QK-Clip tau = 100 (Kimi K2's threshold)
# (--variants names some of them, each once: an unknown or repeated name is refused before anything is written)
#
#   scripts/exp_pg19.sh [--budget SECONDS] [--parallel 0|1] [--stagger S] [--variants "mhsa ls"]
#                       [--steps N | --tokens N] [--batch 8] [--total-batch 16384] [--seed S]
#                       [--device auto|cpu|cuda] [--np N] [--threads N] [--out DIR] [--results DIR]
#                       [--data DIR] [--vocab N] [--source DIR] [--config FILE] [--build auto|0|1]
#                       [--prebuilt TARBALL] [--check-cmd CMD ...] [--reserve S] [--extra "FLAGS"] [--smoke] [--force] [--prepare]
#
# One GPU window = one complete experiment (docs/experiments.md, "PG-19, the paper's setting"):
#   1. build (--build auto: on CUDA) the trainer, build/test_gpu/test_cuda_model and build/dev/attention_ls
#      with make (a no-op when the same machine built them already); with --prebuilt TARBALL (of
#      scripts/prebuild_gpu.sh, built on the CPU machine), scripts/use_prebuilt.sh installs them
#      instead when they were built from this tree's sources and load here, else the build runs;
#   2. checks: test_cuda_model and `attention_ls --check` (each --check-cmd replaces the list); a
#      failed check ends the script (exit 4) before any training. On the CPU the GPU checks are
#      skipped with a line saying so (their emulated builds run in `make test-emu`);
#   3. trains every variant until --steps or, with --budget, until the time left (SIGTERM: the
#      trainer finishes its step, checkpoints it and exits 143; a later start resumes it with -y 1).
#      --parallel 0: one after another, each an equal share of the time left; 1: all at once on the
#      one GPU, started --stagger S seconds apart and stopped S seconds apart in the same order, so
#      that the first runs alone for its first S seconds and the last alone for its last S: the
#      window table compares each run's median ms/step alone and shared and says whether running
#      them at once gave more steps per minute (scripts/pack_results.py);
#   4. plots and summary (scripts/plot_run.py), and --results (default OUT/results; on the GPU
#      machine $OUT/NAME) receives at most 8 files of at most 16 MiB: report.txt (what this start
#      printed from its header on: the notes of the argument checks before it, such as --force's
#      deletions, are on the console only; OUT/logs/report.txt too, replaced at each start),
#      summary.md, window.md, logs.tar.gz (build and check logs, plots, events) and one NAME.tar.gz
#      per run (metrics, logit statistics, configs, console, NAME.args and NAME.build; no checkpoints). While the runs train,
#      --results holds a snapshot of them, refreshed every SNAPSHOT_EVERY s (60) and when a run but the
#      last ends:
#      each run's NAME.tar.gz and window.md as the packing makes them, report.txt so far (its last
#      line says it is a snapshot) and logs.tar.gz (no plots, no summary.md), each file renamed into
#      place whole; a device command killed at its limit (SIGKILL: no trap runs) brings that back.
# Each run's settings (the trainer flags it is given, the machine's and its variant's off stabilizers aside) are kept in OUT/runs/NAME.args
# (scripts/exp_run_settings.sh). Started again on the same --out, the script reuses a run only for the
# same settings: a finished one (its DONE marker at --steps) is skipped, an unfinished one continued
# (-y 1). A run of other settings (another --steps, --extra, --data, ...) or without NAME.args is refused
# with one line naming the flags that differ, before anything runs (choose another --out); --force
# deletes such runs (a note each) and trains them again. Runs are never deleted otherwise. A run that
# another trainer trained (OUT/runs/NAME.build: its sources' digest, or another TRAINER's sha256) is refused (or
# --force deleted) the same way, right after the build stage, which the header's "== trainer:" names.
# --budget SECONDS: the whole script's wall time, build and checks included; --reserve (default 45,
# smoke 5) of it is kept for the last checkpoints and the packing. Without --budget, runs end at
# --steps (default 50000, the paper's max_iters) or --tokens / D.
# Batch: --batch B sequences of 2048 per process and micro-batch (default 8), --total-batch D tokens
# per step (default 16384 = 8 x 2048, no accumulation; the paper's is 524288: a GPU window holds
# ~1B tokens, and 16K per step gives 20-30k steps per run in it). lr and warmup stay the paper's.
# --seed S: the trainer's seed, and the runs are named VARIANT_sS. --extra FLAGS: more trainer flags
# for every run (e.g. "--cuda-graph 1", "-m 1": the record keeping -v -m -s -n --logit-stats-every is
# free to change); a flag the script sets itself is refused, naming the flag and its owner: a variant's
# (of any variant: --global-heads, --qk-norm, --z-loss, --attn-softcap, --qk-clip), the model's the
# variants are defined on (the preset's or --smoke's: --layers --channels --heads --max-seq-len --window
# --near; --smoke's -u too), the options' (-x, -b, -d, -t, -i, -j, --expect-vocab, -o, -y, --seed, --device,
# --threads, --config), and --vocab, -e and --fork-from (another model than the variants name). The header names --extra, each run's line adds it, and a line after each run states what
# it trained with, from its config.json. The trainer then checks them with each run's flags (parsed and validated, on shards
# that cannot exist, writing nothing): a flag or value it refuses is one error line before the data is
# prepared or a run starts (with --build 1 right after the build); what needs the data or the processes
# to check is found when the run starts. Options take --flag=value as well. --steps and --tokens exclude each other; --tokens is rounded down to whole steps
# (a note says so). --np N > 1: each run under `$MPIRUN -np N` (stopped by SIGUSR1).
# --data: the shards (default the repository's data/shards/pg19_sp from any directory; scripts/pack_pg19.sh makes them, or this script
# with data/prepare.py from --source, default ../shared/data/pg19, into a missing or empty directory;
# a directory with files but no meta.json is refused). A --data given that is missing or empty is
# refused as a likely typo unless --prepare asks to tokenize PG-19 into it. A --source given for data that
# exists must name the books it was made from (data/source_check.py: names and sizes), else refused.
# --vocab N: the vocabulary the data must have (default 10000, the paper's SentencePiece 10K). Data whose
# meta.json says another vocabulary, or another tokenizer than SentencePiece, is refused before the build
# with the command that makes the paper's data; --vocab N runs on vocabulary N deliberately (not the
# paper's setting: the header says so, and the runs get --expect-vocab N over the preset's 10000). The header and summary.md's first line name the vocabulary; the trainer's notes (e.g. a
# warmup longer than the run) are relayed to the console as "== RUN: note: ...".
# --smoke: a tiny model and data made from 3 small books (vocabulary 400: --smoke sets --vocab 400, and
# refuses another --vocab unless --data names data of that vocabulary; a --data given is used), a few
# CPU steps of B 2 x T 64 (--batch and --total-batch refused), runs at once 1 s apart (a --stagger given
# wins), the same stages (checks skipped on the CPU, or the --check-cmd given): checks the script,
# nothing more (`make test`).
# Exit status: 0 all runs ended (at --steps or at the budget), 1 a usage or run error, 4 nothing
# trained: the build or a check failed, or the build and the checks left no budget for training (the
# logs packed), 130 the script itself was interrupted (Ctrl-C, SIGTERM: it
# stops its runs the same way, each checkpointing its step, and packs nothing). The logs are packed
# when the runs have ended, and after a failed build or check.
# Environment: TRAINER (default the repository's train_gpt2_ls, wherever the script is started), PYTHON (default python3), MPIRUN, CUDA_ARCH (90),
# EXP_COMMIT (the commit the header names: set it on the GPU machine, where git may not describe the
# tree that travelled; the header names the tracked files that differ from it, and what git there holds
# when that is another commit: scripts/tree_state.sh),
# KILL_AFTER (60: seconds a stopped run may take before SIGKILL), STAGGER_SMOKE (--smoke's stagger, 1),
# PROGRESS_EVERY (60: seconds between the lines giving each running run's newest step; 0: none),
# SNAPSHOT_EVERY (60: seconds between the snapshots of --results while the runs train; 0: none).
set -euo pipefail

TRAINER=${TRAINER:-}
PYTHON=${PYTHON:-python3}
MPIRUN=${MPIRUN:-mpirun}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

OUT=out/exp_pg19
RESULTS=""
DATA=$REPO/data/shards/pg19_sp  # scripts/pack_pg19.sh's, from any directory
DATA_GIVEN=""
SOURCE=$REPO/../shared/data/pg19
SOURCE_GIVEN=0
CONFIG=$REPO/configs/paper_pg19.toml
STEPS=50000
TOKENS=""
STEPS_GIVEN=""
BATCH=8
TOTAL=16384
BATCH_GIVEN=""  # --batch or --total-batch, when given (--smoke fixes both)
DEVICE=auto
NP=1
THREADS=0
VARIANTS="mhsa ls"
SEED=""
SMOKE=0
FORCE=0
PREPARE=0
BUDGET=""
PARALLEL=0
STAGGER=""  # 15, or --smoke's STAGGER_SMOKE; a --stagger given wins
RESERVE=""
KILL_AFTER=${KILL_AFTER:-60}
PROGRESS_EVERY=${PROGRESS_EVERY:-60}  # seconds between the progress lines of the running runs (0: none)
SNAPSHOT_EVERY=${SNAPSHOT_EVERY:-60}  # seconds between the snapshots of --results while the runs train (0: none)
BUILD=auto
PREBUILT=""
CHECK_CMDS=()
EXTRA=""
SOFTCAP=50
QKCLIP=100
T=2048
# what the script sets beside the preset: validation every 500 steps on 32 batches (524K tokens, about
# half the validation split: ~2% of a run's time at B 8), statistics every 10 steps (the per-step
# maximum is in metrics.jsonl), no samples, checkpoints only at the end (and when stopped)
RUN=(-v 500 -m 32 -s 0 --logit-stats-every 10 -n 0)
SMALL=()  # --smoke's model and warmup (SMOKE_MODEL, -u 2); the preset's otherwise
# --smoke's model: 6 heads kept (the variants are defined by them), everything else tiny
SMOKE_MODEL=(--layers 1 --channels 48 --heads 6 --max-seq-len 64 --window 8 --near 8)
VARIANTS_ALL="mhsa ls local mhsa_qknorm mhsa_zloss mhsa_softcap mhsa_qkclip"  # variant_flags defines each
VOCAB=10000  # the paper's SentencePiece vocabulary; --vocab N (or --smoke's data) runs on another
VOCAB_WHY=""
SMOKE_BOOKS=()  # --smoke's books, to be linked into OUT/books, its --source (link_smoke_books)

die() { echo "error: $*" >&2; exit 1; }
link_smoke_books() {  # --smoke's books as links in OUT/books (SOURCE), made where they are first read
  [[ ${#SMOKE_BOOKS[@]} -gt 0 ]] || return 0
  mkdir -p "$OUT/books"
  local b
  for b in "${SMOKE_BOOKS[@]}"; do ln -sf "$b" "$OUT/books/$(basename "$b")"; done
  SMOKE_BOOKS=()
}
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value; see $0 --help"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) need "$@"; OUT=$2; shift 2 ;;
    --results) need "$@"; RESULTS=$2; shift 2 ;;
    --data) need "$@"; DATA=$2; DATA_GIVEN=1; shift 2 ;;
    --vocab) need "$@"; VOCAB=$2; VOCAB_WHY=--vocab; shift 2 ;;
    --source) need "$@"; SOURCE=$2; SOURCE_GIVEN=1; shift 2 ;;
    --config) need "$@"; CONFIG=$2; shift 2 ;;
    --steps) need "$@"; STEPS=$2; STEPS_GIVEN=1; shift 2 ;;
    --tokens) need "$@"; TOKENS=$2; shift 2 ;;
    --batch) need "$@"; BATCH=$2; BATCH_GIVEN+=${BATCH_GIVEN:+ and }--batch; shift 2 ;;
    --total-batch) need "$@"; TOTAL=$2; BATCH_GIVEN+=${BATCH_GIVEN:+ and }--total-batch; shift 2 ;;
    --device) need "$@"; DEVICE=$2; shift 2 ;;
    --np) need "$@"; NP=$2; shift 2 ;;
    --variants) need "$@"; VARIANTS=$2; shift 2 ;;
    --seed) need "$@"; SEED=$2; shift 2 ;;
    --threads) need "$@"; THREADS=$2; shift 2 ;;
    --budget) need "$@"; BUDGET=$2; shift 2 ;;
    --parallel) need "$@"; PARALLEL=$2; shift 2 ;;
    --stagger) need "$@"; STAGGER=$2; shift 2 ;;
    --reserve) need "$@"; RESERVE=$2; shift 2 ;;
    --build) need "$@"; BUILD=$2; shift 2 ;;
    --prebuilt) need "$@"; PREBUILT=$2; shift 2 ;;
    --check-cmd) need "$@"; CHECK_CMDS+=("$2"); shift 2 ;;
    --extra) need "$@"; EXTRA=$2; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --force) FORCE=1; shift ;;
    --prepare) PREPARE=1; shift ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;  # --flag=value (the trainer's form too): --flag value
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; see $0 --help" ;;
  esac
done

# the variants first of all: nothing (not --smoke's books either) is written for a start that is refused
[[ -n ${VARIANTS// /} ]] || die "--variants is empty; name at least one of: $VARIANTS_ALL"
read -r -a variants <<< "$VARIANTS"
for i in "${!variants[@]}"; do
  v=${variants[$i]}
  [[ " $VARIANTS_ALL " == *" $v "* ]] || die "unknown variant '$v'; pick from: $VARIANTS_ALL"
  for w in "${variants[@]:0:i}"; do  # a run per variant: one named twice would be trained once, reported twice
    [[ $w != "$v" ]] || die "--variants names $v twice; name each variant once"
  done
done

if [[ $SMOKE == 1 ]]; then
  [[ -z $BATCH_GIVEN ]] || die "--smoke trains B 2 x T 64, one micro-batch per process: drop $BATCH_GIVEN, or drop --smoke"
  SMALL=("${SMOKE_MODEL[@]}" -u 2)
  T=64; BATCH=2; TOTAL=smoke
  [[ -z $BUDGET && -z $STEPS_GIVEN && -z $TOKENS ]] && STEPS=4
  RUN=(-v 2 -m 2 -s 0 --logit-stats-every 1 -n 0)
  [[ -z $STAGGER ]] && STAGGER=${STAGGER_SMOKE:-1}
  [[ -z $RESERVE ]] && RESERVE=5
  [[ $DEVICE == auto ]] && DEVICE=cpu
  [[ $THREADS == 0 ]] && THREADS=1
  if [[ -z $DATA_GIVEN ]]; then  # 3 small books, vocabulary 400
    [[ -z $VOCAB_WHY ]] || die "--smoke makes its own data, with vocabulary 400: drop --vocab $VOCAB, or give --data DIR (data of that vocabulary, with its meta.json) as well"
    DATA=$OUT/data
    for b in pg45265 pg45264 pg14304; do  # linked into OUT/books once every argument is checked (link_smoke_books)
      [[ -f $SOURCE/$b.txt ]] || die "smoke mode needs $SOURCE/$b.txt; pass --source DIR (the PG-19 books)"
      SMOKE_BOOKS+=("$(cd "$SOURCE" && pwd)/$b.txt")
    done
    SOURCE=$OUT/books
    VOCAB=400; VOCAB_WHY=--smoke  # deliberately not the paper's 10000: a tokenizer that trains in seconds
    PREP=(--sp-train-lines 3000 --val-fraction 0.34)
  fi
fi
[[ -z $RESERVE ]] && RESERVE=45
[[ -z $STAGGER ]] && STAGGER=15
[[ $VOCAB =~ ^[0-9]+$ && $VOCAB -ge 1 ]] || die "--vocab $VOCAB must be a positive integer"
PREP=(--vocab-size "$VOCAB" "${PREP[@]}")

# -- arguments --------------------------------------------------------------------------------------
[[ -f $CONFIG ]] || die "no preset $CONFIG; pass --config FILE (configs/paper_pg19.toml is the paper's)"
# A preset that turns on a stabilizer some variants set and others do not would give it to every run,
# the baselines too (mhsa with a z-loss, under its own name): refused, as --extra's are (and each variant
# gives the ones it does not set as off, stabilizers_off, so a spelling read here or not never reaches it). An on/off key
# without a value is on (the trainer's rule); 0 and the off words are off.
preset_refusal() {
  local key variant line val
  for key in qk-norm:mhsa_qknorm z-loss:mhsa_zloss attn-softcap:mhsa_softcap qk-clip:mhsa_qkclip; do
    variant=${key#*:}; key=${key%%:*}
    line=$(grep -E "^[[:space:]]*${key}[[:space:]]*=" "$CONFIG" | tail -n 1) || continue
    val=$(sed -E 's/^[^=]*=[[:space:]]*//; s/[[:space:]]*(#.*)?$//; s/^"(.*)"$/\1/; s/^'"'"'(.*)'"'"'$/\1/' <<< "$line")
    [[ -n $val || $key != qk-norm ]] || val=true
    [[ ${val,,} =~ ^(|0|0?\.0*|0\.?0*e[-+]?[0-9]+|false|off|no|n|f|disable|-)$ ]] && continue
    echo -n "--config $CONFIG sets $key=$val, which variant $variant sets for itself: every run would have it, the baselines too; remove it from the file and choose the variants with --variants"
    return 1
  done
}
why=$(preset_refusal) || die "$why"
[[ $TOTAL == smoke ]] && TOTAL=$((BATCH * T * ${NP//[^0-9]/}))  # smoke: one micro-batch per process
for n in STEPS BATCH TOTAL NP; do  # (TOTAL is --total-batch)
  [[ ${!n} =~ ^[0-9]+$ && ${!n} -ge 1 ]] || die "${n,,} = ${!n} must be a positive integer (--steps, --batch, --total-batch, --np)"
done
for n in STAGGER RESERVE; do
  [[ ${!n} =~ ^[0-9]+$ ]] || die "--${n,,} ${!n} must be a whole number of seconds"
done
[[ $SNAPSHOT_EVERY =~ ^[0-9]+$ ]] || die "SNAPSHOT_EVERY=$SNAPSHOT_EVERY must be a whole number of seconds (0: no snapshots)"
[[ -z $BUDGET || $BUDGET =~ ^[0-9]+$ ]] || die "--budget $BUDGET must be a whole number of seconds"
[[ -z $SEED || $SEED =~ ^[0-9]+$ ]] || die "--seed $SEED must be a non-negative integer"
[[ $PARALLEL == 0 || $PARALLEL == 1 ]] || die "--parallel $PARALLEL: use 0 (one after another) or 1 (all at once)"
[[ $BUILD == auto || $BUILD == 0 || $BUILD == 1 ]] || die "--build $BUILD: use auto, 0 or 1"
case $DEVICE in auto|cpu|cuda) ;; *) die "--device $DEVICE: use auto, cpu or cuda" ;; esac
(( TOTAL % (BATCH * T * NP) == 0 )) || \
  die "--total-batch $TOTAL is not a multiple of B*T*np = $BATCH*$T*$NP; change --total-batch or --batch"
if [[ -n $TOKENS ]]; then
  [[ -z $STEPS_GIVEN ]] || die "--steps and --tokens both given: give one (--tokens N trains N / --total-batch steps)"
  [[ $TOKENS =~ ^[0-9]+$ ]] || die "--tokens $TOKENS must be a positive integer"
  STEPS=$(( TOKENS / TOTAL )); (( STEPS >= 1 )) || die "--tokens $TOKENS is less than one step of $TOTAL tokens"
  (( TOKENS % TOTAL == 0 )) || \
    echo "note: --tokens $TOKENS is $STEPS steps of $TOTAL tokens ($(( STEPS * TOTAL )) tokens): rounded down to whole steps" >&2
fi
[[ -z $BUDGET ]] || (( ${#variants[@]} <= 4 )) || \
  die "--budget with ${#variants[@]} variants: at most 4 per GPU window (8 files come back: 4 + one per run)"

if [[ $DEVICE == auto ]]; then  # resolved here, so the build, the checks and the runs agree
  if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then DEVICE=cuda; else DEVICE=cpu; fi
fi
[[ $BUILD == auto ]] && { [[ $DEVICE == cuda ]] && BUILD=1 || BUILD=0; }
[[ -z $PREBUILT || $BUILD == 1 ]] || die "--prebuilt stands in for the build, which this run skips (--build 0, or the CPU): drop --prebuilt, or run on the GPU with --build auto"
[[ -z $TRAINER ]] && TRAINER=$REPO/train_gpt2_ls
if [[ ${#CHECK_CMDS[@]} -eq 0 && $DEVICE == cuda ]]; then
  CHECK_CMDS=("build/test_gpu/test_cuda_model" "build/dev/attention_ls --check")
fi
[[ -z $RESULTS ]] && RESULTS=$OUT/results

# -- the data's vocabulary: the paper's (or --vocab's), checked before anything is built or trained ------
if [[ -f $DATA/meta.json ]]; then
  read -r data_tok data_vocab < <("$PYTHON" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m.get("tokenizer") or "unnamed", m.get("vocab_size") or "unknown")' "$DATA/meta.json") \
    || die "$DATA/meta.json is not readable JSON; make the paper's data in a directory of its own (scripts/pack_pg19.sh --out NEW_DIR, then --data NEW_DIR)"
  [[ $data_tok == sp ]] || die "$DATA holds data of tokenizer $data_tok, not SentencePiece (the paper's); make the paper's data in a directory of its own (scripts/pack_pg19.sh --out NEW_DIR, then --data NEW_DIR), not over $DATA"
  [[ $data_vocab == "$VOCAB" || $data_vocab != 10000 ]] || die "$DATA holds vocabulary 10000, the paper's, not $VOCAB ($VOCAB_WHY): drop $VOCAB_WHY to run the paper's setting on it, or give --data a directory of vocabulary-$VOCAB data (data/prepare.py --dataset pg19 --tokenizer sp --vocab-size $VOCAB)"
  [[ $data_vocab == "$VOCAB" ]] || die "$DATA holds vocabulary $data_vocab, not $([[ -z $VOCAB_WHY ]] && echo "the paper's $VOCAB" || echo "$VOCAB ($VOCAB_WHY)"): make the paper's data in a directory of its own (scripts/pack_pg19.sh --out NEW_DIR, then --data NEW_DIR), or pass --vocab $data_vocab to run on this vocabulary (not the paper's setting)"
  # a --source given for data that exists must be the books the data was made from (names and sizes)
  if [[ $SOURCE_GIVEN == 1 ]]; then
    link_smoke_books  # (--smoke's data exists here, so OUT does: an earlier start made both)
    [[ -d $SOURCE ]] || die "no PG-19 books at --source $SOURCE; check the path"
    why=$("$PYTHON" "$REPO/data/source_check.py" "$DATA/meta.json" "$SOURCE") || \
      die "$DATA holds PG-19 $why: drop --source to run on it, or make the data of $SOURCE with scripts/pack_pg19.sh --source $SOURCE --out DIR and pass --data DIR"
  fi
fi
# a directory without meta.json is prepared from --source below: never one that holds files already
if [[ ! -f $DATA/meta.json ]] && [[ -d $DATA ]] && [[ -n $(ls -A "$DATA") ]]; then
  die "$DATA holds files but no meta.json, so it is not data this script can check or may write over; give --data the directory data/prepare.py or scripts/pack_pg19.sh made (with its meta.json), or a new directory to prepare PG-19 into"
fi
# a --data typed that does not exist is a typo more often than a request for a new data set
if [[ -n $DATA_GIVEN && $PREPARE == 0 && ! -f $DATA/meta.json ]] && [[ ! -d $DATA || -z $(ls -A "$DATA") ]]; then
  die "--data $DATA does not exist$([[ -d $DATA ]] && echo " (an empty directory)"): check the path (data/shards/pg19_sp is scripts/pack_pg19.sh's), or add --prepare to tokenize PG-19 (--source) into it"
fi
vocab_label="vocabulary $VOCAB"
if [[ $VOCAB != 10000 ]]; then vocab_label+=" (not the paper's 10000${VOCAB_WHY:+: $VOCAB_WHY})"; fi

# -- each run's settings: a run directory is reused only for the same ones (scripts/exp_run_settings.sh) -----
DATA=$(realpath -m "$DATA"); CONFIG=$(realpath "$CONFIG")  # recorded in each run's settings: one spelling
# shellcheck source=scripts/exp_run_settings.sh
source "$HERE/exp_run_settings.sh"
# shellcheck source=scripts/exp_notes.sh
source "$HERE/exp_notes.sh"
# shellcheck source=scripts/tree_state.sh
source "$HERE/tree_state.sh"
variant_flags() {
  case $1 in
    mhsa) echo "--global-heads 6" ;;
    ls) echo "--global-heads 1" ;;
    local) echo "--global-heads 0" ;;
    mhsa_qknorm) echo "--global-heads 6 --qk-norm" ;;
    mhsa_zloss) echo "--global-heads 6 --z-loss 1e-4" ;;
    mhsa_softcap) echo "--global-heads 6 --attn-softcap $SOFTCAP" ;;
    mhsa_qkclip) echo "--global-heads 6 --qk-clip $QKCLIP" ;;
  esac
}
# The stabilizers a variant does not set, given as off on its command line (which wins over the preset's
# file): a variant is what its name says whatever spelling of a stabilizer a --config file holds
# (preset_refusal, above, catches the usual ones first, with a message)
stabilizers_off() {
  local w flags=("--qk-norm=false" "--z-loss 0" "--attn-softcap 0" "--qk-clip 0") on
  on=$(variant_flags "$1")
  for w in "${flags[@]}"; do
    [[ " $on " == *" ${w%%[= ]*}"[\ =]* ]] || echo -n "$w "
  done
}
seed_flags=(); [[ -n $SEED ]] && seed_flags=(--seed "$SEED")
# the preset's expect-vocab=10000 makes the trainer refuse other data; a run on another vocabulary
# (--vocab N, --smoke), checked above, tells the trainer so
vocab_flags=(); [[ $VOCAB != 10000 ]] && vocab_flags=(--expect-vocab "$VOCAB")
read -r -a extra_flags <<< "$EXTRA"

names=(); dirs=()
for v in "${variants[@]}"; do
  n=$v; [[ -n $SEED ]] && n=${v}_s$SEED
  names+=("$n"); dirs+=("$OUT/runs/$n")
done
# The one place a run's command line is composed: run_args (the settings, recorded in NAME.args) and
# place_args (where and on what it runs). Each word is added by args_of with its owner: the script's
# option (or the variant) that sets it, which --extra may not set; "" for the bookkeeping flags (RUN)
# and --extra's own, which --extra may change.
args_of() {  # args_of OWNER WORDS...: WORDS appended to ARGS, OWNER to ARG_OWNER for each
  local owner=$1 w
  shift
  for w in "$@"; do ARGS+=("$w"); ARG_OWNER+=("$owner"); done
}
run_args() {  # run_args VARIANT: the trainer flags of a run of VARIANT (its recorded settings) into the array ARGS
  ARGS=(); ARG_OWNER=()
  args_of --config --config "$CONFIG"
  args_of --data -i "$DATA/train_*.bin" -j "$DATA/val_*.bin"
  if [[ $SMOKE == 1 ]]; then args_of --smoke "${SMALL[@]}"; fi
  # shellcheck disable=SC2046  # the variant's flags are a list of words
  args_of "variant $1" $(variant_flags "$1")
  # shellcheck disable=SC2046  # a list of words
  args_of "variant $1 (off)" $(stabilizers_off "$1")
  args_of --batch -b "$BATCH"
  args_of "--config (T is the preset's $T)" -t "$T"
  args_of --total-batch -d "$TOTAL"
  args_of "--steps (or --tokens)" -x "$STEPS"
  args_of "" "${RUN[@]}"
  args_of --vocab "${vocab_flags[@]}"
  args_of --seed "${seed_flags[@]}"
  args_of "" "${extra_flags[@]}"
  # the run's settings as NAME.args records them: without the stabilizers its variant gives as off (the
  # variant's name implies them; runs of the versions before they were given resume as the same settings)
  RECORDED=()
  local i
  for i in "${!ARGS[@]}"; do [[ ${ARG_OWNER[$i]} == "variant $1 (off)" ]] || RECORDED+=("${ARGS[$i]}"); done
}
place_args() {  # place_args DIR RESUME: appends the flags of where and how a run trains (not its settings)
  args_of --out -o "$1"
  args_of "nothing: the script resumes a run of the same settings itself" -y "$2"
  args_of --device --device "$DEVICE"
  args_of --threads --threads "$THREADS"
}
# --extra takes trainer flags the script does not set: one it sets would be overridden in one place and
# reported by the script in another. Refused: every flag of a run's command line (above) for every
# variant, whichever run, and the model's flags (SMOKE_MODEL), which the preset sets without --smoke
# (the variants are defined on its model); and the flags that would train another model than the one the
# variants name: the model's vocabulary (--vocab: the data's) and a start from other weights (-e,
# --fork-from: each variant starts from the preset's initialization). A flag's short and long names are
# one flag (llmc/app/flags.h).
extra_refusal() {  # prints the error for the first refused flag in --extra; status 1 when there is one
  [[ -n $EXTRA ]] || return 0
  local -A owner=() alias=()
  local v i w flag pair
  local seed_flags=(--seed 0) vocab_flags=(--expect-vocab 0)  # the options' flags, given or not
  [[ -r $REPO/llmc/app/flags.h ]] || { echo -n "cannot read $REPO/llmc/app/flags.h (the trainer's flag names, to check --extra): run the script of a whole checkout"; return 1; }
  while read -r pair; do alias[${pair%%,*}]=${pair#*,}; alias[${pair#*,}]=${pair%%,*}; done \
    < <(grep -o '"-[A-Za-z],--[a-z0-9-]*"' "$REPO/llmc/app/flags.h" | tr -d '"')
  for v in $VARIANTS_ALL; do
    run_args "$v"; place_args "" 0
    [[ $SMOKE == 1 ]] || args_of "--config (the preset sets it: the variants are defined on its model)" "${SMOKE_MODEL[@]}"
    for i in "${!ARGS[@]}"; do
      w=${ARGS[$i]}
      [[ $w =~ ^--?[A-Za-z] && -n ${ARG_OWNER[$i]} ]] || continue
      [[ ${ARG_OWNER[$i]} == "variant $v (off)" ]] && continue  # (owned by the variant that sets it)
      if [[ ${ARG_OWNER[$i]} == "variant $v" ]]; then  # the variants that set it, each with its value
        owner[$w]+="${owner[$w]:+, }$v: $w ${ARGS[i + 1]:-}"
        [[ ${ARGS[i + 1]:-} =~ ^--?[A-Za-z] || -z ${ARGS[i + 1]:-} ]] && owner[$w]=${owner[$w]% *}
      elif [[ -z ${owner[$w]:-} ]]; then
        owner[$w]="=${ARG_OWNER[$i]}"
      fi
    done
  done
  owner[--vocab]="!the model's vocabulary is the data's (the script's --vocab V chooses the data and checks it): drop it"
  owner[--model]="!every variant starts from the preset's initialization (the model or weights of -e would be another experiment under the variant's name): drop it"
  owner[--fork-from]="!every variant starts from the preset's initialization (a fork would carry another run's training under the variant's name); the script resumes its own runs: drop it"
  for w in "${extra_words[@]}"; do
    flag=${w%%=*}
    [[ $flag == -[A-Za-z]?* ]] && flag=${flag:0:2}  # a short flag with its value attached (-x5): the trainer reads it so
    for pair in "$flag" "${alias[$flag]:-}"; do
      [[ -n $pair && -n ${owner[$pair]:-} ]] || continue
      case ${owner[$pair]} in
        !*) echo "--extra sets $flag: ${owner[$pair]#!}" ;;
        =*) echo "--extra sets $flag, which the script sets itself: use ${owner[$pair]#=}" ;;
        *,*) echo "--extra sets $flag, which the script sets itself: use --variants (variants ${owner[$pair]})" ;;
        *) echo "--extra sets $flag, which the script sets itself: use --variants (variant ${owner[$pair]})" ;;
      esac
      return 1
    done
  done
}
read -r -a extra_words <<< "$EXTRA"
why=$(extra_refusal) || die "$why"
# --extra's flags, checked by the trainer itself: it is given each run's flags with shards and an output
# directory that cannot exist (under a file, not a directory; flags such as -n need an -o), so it parses
# and validates them and stops at the data, writing nothing. Its first error line is the answer: the missing shards mean the flags
# are good; anything else (a misspelt flag with its "did you mean", a value or a combination with one
# variant's flags it refuses) is printed, with --extra and the run named (one line, no newline).
extra_check() {
  [[ -n $EXTRA ]] || return 0
  local k i ARGS ARG_OWNER RECORDED probe=$REPO/scripts/exp_pg19.sh/no-shards why
  for k in "${!names[@]}"; do
    run_args "${variants[$k]}"
    for i in "${!ARGS[@]}"; do
      case ${ARGS[$i]} in -i) ARGS[i + 1]="$probe/train_*.bin" ;; -j) ARGS[i + 1]="$probe/val_*.bin" ;; esac
    done
    why=$("$TRAINER" "${ARGS[@]}" -o "$probe/out" --device cpu --threads 1 2>&1 > /dev/null | grep -a -m 1 '^error: ') || true
    [[ $why == "error: no files match the shard pattern '$probe/"* ]] && continue
    echo -n "--extra '$EXTRA': the trainer refuses run ${names[$k]}'s flags: ${why:-"(no error line: run $TRAINER with them)"}" | sed 's/: error: /: /'
    return 1
  done
}
# with --build 1 the trainer is built first and its flags checked after the build (below)
if [[ $BUILD != 1 && -x $TRAINER ]]; then why=$(extra_check) || die "$why"; fi
for k in "${!names[@]}"; do  # every run that exists holds this experiment (or --force replaces it), before anything is made
  run_args "${variants[$k]}"
  settings_check "${dirs[$k]}" "$FORCE" "${RECORDED[@]}" || exit 1
done

START=$(date +%s)
deadline=""
[[ -n $BUDGET ]] && deadline=$(( START + BUDGET - RESERVE ))
now() { date +%s; }
left() { echo $(( deadline - $(now) )); }

mkdir -p "$OUT/runs" "$OUT/logs" "$OUT/plots" "$RESULTS"
REPORT=$OUT/logs/report.txt
EVENTS=$OUT/logs/events.tsv
: > "$EVENTS"
: > "$REPORT"  # one start's console, like the rest of --results (each run's output accumulates in runs/NAME.log)
exec 3>&1 4>&2  # the console, given back before report.txt is copied (report_flush)
exec > >(tee -a "$REPORT"); tee_out=$!
exec 2> >(tee -a "$REPORT" >&2); tee_err=$!
report_flush() {  # the console back, and the report's tee processes finished (5 s at most), so the copy is whole
  exec 1>&3 2>&4
  local _
  for _ in {1..50}; do kill -0 "$tee_out" 2> /dev/null || kill -0 "$tee_err" 2> /dev/null || return 0; sleep 0.1; done
}
event() { printf '%s\t%s\n' "$(date +%s.%N)" "$*" >> "$EVENTS"; }
echo "== exp_pg19 $(date -u +%FT%TZ) | commit $(tree_state "$REPO" "${EXP_COMMIT:-}") | device $DEVICE$([[ $DEVICE == cuda ]] && nvidia-smi -L 2>/dev/null | head -1 | sed 's/^/ (/;s/$/)/') | budget ${BUDGET:-none} s | parallel $PARALLEL | variants ${variants[*]} | $TOTAL tokens/step (B $BATCH x T $T) | SentencePiece $vocab_label ($DATA) | preset $CONFIG | --extra $([[ -n $EXTRA ]] && echo "'$EXTRA'" || echo none)"
# --results holds one start's files: this script's own files of an earlier start there (report, summary,
# window table, packed logs, a run's NAME.tar.gz, and .NAME.part: a snapshot's copy cut off by a kill)
# are removed, so none is taken for this start's
old_results=()
own='(report\.txt|summary\.md|window\.md|logs\.tar\.gz|(mhsa|ls|local|mhsa_qknorm|mhsa_zloss|mhsa_softcap|mhsa_qkclip)(_s[0-9]+)?\.tar\.gz)'
for f in "$RESULTS"/* "$RESULTS"/.*.part; do
  if [[ -f $f && $(basename "$f") =~ ^($own|\.$own\.part)$ ]]; then
    old_results+=("$(basename "$f")")
  fi
done
if [[ ${#old_results[@]} -gt 0 ]]; then
  echo "== $RESULTS: removed the files of an earlier start: ${old_results[*]}"
  for f in "${old_results[@]}"; do rm -f "$RESULTS/$f"; done
fi

# -- 1. build -----------------------------------------------------------------------------------------
step_timed() {  # step_timed NAME LOG TIMEOUT CMD...: runs CMD, one PASS/FAIL line with the seconds
  local name=$1 log=$2 limit=$3 t0 rc=0; shift 3
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" > "$log" 2>&1 || rc=$?
  local dt; dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [[ $rc == 0 ]]; then echo "   $name: PASS (${dt} s)"; else
    echo "   $name: FAIL (exit $rc, ${dt} s; log $log), last lines:"; tail -n 15 "$log" | sed 's/^/     /'; fi
  return $rc
}
# A file of --results is written whole or not at all: as .NAME.part beside its place, then renamed over it,
# so a SIGKILL mid-write (a device command at its limit) leaves the earlier file (a snapshot's) whole.
put_file() {  # put_file SRC NAME: SRC into --results as NAME; status 1 (and no .part left) on a failure
  { cp "$1" "$RESULTS/.$2.part" && mv -f "$RESULTS/.$2.part" "$RESULTS/$2"; } || { rm -f "$RESULTS/.$2.part"; return 1; }
}
put_logs() {  # put_logs DIR...: OUT's DIRs into --results/logs.tar.gz (tar's status 1, a log that grew, is whole)
  local rc=0 err
  err=$(tar czf "$RESULTS/.logs.tar.gz.part" -C "$OUT" "$@" 2>&1) || rc=$?
  if (( rc > 1 )); then
    echo "error: packing $RESULTS/logs.tar.gz failed (tar exit $rc: ${err%%$'\n'*})" >&2
    rm -f "$RESULTS/.logs.tar.gz.part"; return 1
  fi
  mv -f "$RESULTS/.logs.tar.gz.part" "$RESULTS/logs.tar.gz"
}
abort_pack() {  # abort_pack MESSAGE [STATUS]: nothing trained; pack the logs that exist and exit STATUS (4)
  echo "error: $1" >&2
  report_flush
  put_file "$REPORT" report.txt || true
  put_logs logs || true
  exit "${2:-4}"
}
if [[ $BUILD == 1 ]]; then
  extra_inc=""; [[ -d $REPO/.deps/include ]] && extra_inc=.deps/include
  budget_build=540; [[ -n $BUDGET ]] && budget_build=$(( $(left) > 60 ? $(left) - 60 : 1 ))
  prebuilt_used=0
  if [[ -n $PREBUILT ]]; then
    if why=$("$REPO/scripts/use_prebuilt.sh" "$PREBUILT" "${CUDA_ARCH:-90}" paper 2>&1); then prebuilt_used=1; fi
    echo "== build: $why"
  fi
  if [[ $prebuilt_used == 0 ]]; then
    echo "== build (make, ${budget_build} s at most): train_gpt2_ls build/test_gpu/test_cuda_model build/dev/attention_ls"
    step_timed build "$OUT/logs/build.log" "$budget_build" make -C "$REPO" -j"$(nproc)" CUDA_ARCH="${CUDA_ARCH:-90}" \
      PRECISION=BF16 EXTRA_INCLUDE="$extra_inc" train_gpt2_ls build/test_gpu/test_cuda_model build/dev/attention_ls \
      || abort_pack "the build failed (see $OUT/logs/build.log); nothing was trained"
  fi
else
  echo "== build: skipped (--build 0$([[ $DEVICE == cpu ]] && echo ", --device cpu: the CPU trainer is $TRAINER; make cpu builds it")) "
fi
[[ -x $TRAINER ]] || die "trainer $TRAINER not found; build it with 'make train_gpt2_ls' (CPU: 'make cpu') or set TRAINER=path"
# every run that exists was trained by this trainer (or --force replaces it): checked after the build,
# which makes the binary
BUILD_ID=$(trainer_build "$TRAINER" "$REPO" "$(tree_state "$REPO" "${EXP_COMMIT:-}")") || die "cannot read the trainer $TRAINER"
echo "== trainer: $(build_text "$BUILD_ID")"
for k in "${!names[@]}"; do why=$(build_check "${dirs[$k]}" "$FORCE" "$BUILD_ID") || abort_pack "$why" 1; done
if [[ $BUILD == 1 ]]; then why=$(extra_check) || abort_pack "$why" 1; fi

# -- 2. checks ----------------------------------------------------------------------------------------
if [[ ${#CHECK_CMDS[@]} -eq 0 ]]; then
  echo "== checks: SKIPPED on the CPU: test_cuda_model and the attention lab's --check need a GPU (their emulated builds run in make test-emu)"
else
  echo "== checks (${#CHECK_CMDS[@]}): a failure stops the script before any training"
  i=0
  for c in "${CHECK_CMDS[@]}"; do
    i=$((i + 1))
    limit=300; [[ -n $BUDGET ]] && limit=$(( $(left) > 30 ? $(left) - 30 : 1 ))
    step_timed "check $i: $c" "$OUT/logs/check_$i.log" "$limit" bash -c "cd '$REPO' && $c" \
      || abort_pack "check '$c' failed (see $OUT/logs/check_$i.log); nothing was trained: a wrong kernel makes every later number meaningless"
  done
fi

# -- data: PG-19 with a SentencePiece BPE vocabulary ---------------------------------------------------
if [[ ! -f $DATA/meta.json ]]; then
  link_smoke_books
  [[ -d $SOURCE ]] || die "no shards at $DATA and no PG-19 books at $SOURCE; run scripts/pack_pg19.sh, or pass --data DIR or --source DIR"
  echo "== tokenizing PG-19 ($SOURCE) into $DATA"
  # -u: its stdout and stderr line by line, so that each line stays whole in report.txt (two tees)
  "$PYTHON" -u "$REPO/data/prepare.py" --dataset pg19 --source "$SOURCE" --out "$DATA" --tokenizer sp "${PREP[@]}"
fi

# -- 3. runs ------------------------------------------------------------------------------------------
launch=("$TRAINER")
stop_sig=TERM
if [[ $NP -gt 1 ]]; then read -r -a mpi <<< "$MPIRUN"; launch=("${mpi[@]}" -np "$NP" "$TRAINER"); stop_sig=USR1; fi
declare -A PID=() RC=()
start_run() {  # start_run INDEX: the trainer of run INDEX in the background
  local k=$1 n=${names[$1]} v=${variants[$1]} dir=${dirs[$1]} resume=0 ARGS ARG_OWNER RECORDED
  # (settings_check passed: the run is new or of these settings)
  if [[ -f $dir/DONE_$(printf %08d "$STEPS") ]]; then echo "== $n: done already ($dir)"; RC[$n]=0; return; fi
  [[ -f $dir/config.json ]] && resume=1  # its run, checkpointed or not: continue it (a new run there is refused)
  mkdir -p "$dir"
  run_args "$v"
  settings_write "$dir" "${RECORDED[@]}"
  build_write "$dir" "$BUILD_ID"
  LOG_FROM[$k]=$(log_start "$dir.log")  # this start's lines of the log
  place_args "$dir" "$resume"
  echo "== $n: $(variant_flags "$v")${EXTRA:+ + --extra $EXTRA} | up to $STEPS steps of $TOTAL tokens |$([[ -n $deadline ]] && echo " until $(( ${STOP_AT[$k]} - START )) s |") device $DEVICE | np $NP | resume $resume"
  "${launch[@]}" "${ARGS[@]}" >> "$dir.log" 2>&1 &
  PID[$n]=$!
  event "start $n"
}
stop_run() {  # stop_run INDEX [REASON]: ask run INDEX to checkpoint and stop
  local n=${names[$1]}
  [[ -n ${PID[$n]:-} ]] && kill -0 "${PID[$n]}" 2> /dev/null || return 0
  echo "== $n: ${2:-budget reached} at $(( $(now) - START )) s: SIG$stop_sig (it finishes the step, checkpoints, exits)"
  event "stop $n"
  kill -"$stop_sig" "${PID[$n]}" 2> /dev/null || true
}
trained_with() {  # trained_with DIR: the settings the run in DIR trained with, from its config.json (one line)
  "$PYTHON" - "$1/config.json" << 'PY'
import json, sys
c = json.load(open(sys.argv[1]))
m, t = c["model"], c["train"]
f = lambda x: str(x).lower() if isinstance(x, bool) else f"{x:.6g}" if isinstance(x, float) else str(x)
print(f"G {m['global_heads']} of {m['num_heads']} heads, window {m['window']}, near {t.get('near')}, "
      f"qk-norm {f(m['qk_norm'])}, z-loss {f(t['z_loss'])}, attn-softcap {f(m['attn_softcap'])}, "
      f"qk-clip {f(t['qk_clip'])}, grad-clip {f(t['grad_clip'])}, L {m['num_layers']}, C {m['channels']}, "
      f"T {t['seq_len']}, B {t['batch_size']}, D {t['total_batch_size']}, lr {f(t['learning_rate'])}, "
      f"warmup {t['warmup_steps']}, max-steps {t['max_steps']}, seed {t['seed']}, V {m['vocab_size']}, "
      f"bias {f(m.get('bias', True))}, gelu {m.get('gelu', 'tanh')}, tied {f(m.get('tied_embeddings', True))}")
PY
}
reap() {  # reap INDEX: wait for run INDEX, record its exit status
  local n=${names[$1]} rc=0
  [[ -n ${PID[$n]:-} ]] || return 0
  wait "${PID[$n]}" || rc=$?
  relay_notes
  RC[$n]=$rc; unset "PID[$n]"
  event "end $n $rc"
  if [[ -f ${dirs[$1]}/config.json ]]; then  # the run's own record, not the script's intent
    echo "== $n: trained with (config.json): $(trained_with "${dirs[$1]}" 2>&1 | tail -n 1)"
  fi
  case $rc in
    0) echo "== $n: finished ($(tail -n 1 "${dirs[$1]}/console.log" 2>/dev/null))" ;;
    130|138|143) echo "== $n: stopped (exit $rc) with a checkpoint of its last step; -y 1 continues it" ;;
    *) echo "error: run $n failed (exit $rc); last lines of ${dirs[$1]}.log:" >&2; tail -n 5 "${dirs[$1]}.log" >&2 ;;
  esac
}
alive() { [[ -n ${PID[${names[$1]}]:-} ]] && kill -0 "${PID[${names[$1]}]}" 2> /dev/null; }
declare -A LOG_FROM=() RELAYED=()
relay_notes() {  # relay_notes: the "note:" lines (its header's) of each run this script started to the
  local k new    # console, once, when the run has printed its first step or ended
  for k in "${!LOG_FROM[@]}"; do
    [[ -z ${RELAYED[$k]:-} ]] || continue
    new=$(tail -n +"${LOG_FROM[$k]}" "${dirs[$k]}.log" 2>/dev/null) || new=""
    alive "$k" && ! grep -aq '^step ' <<< "$new" && continue
    RELAYED[$k]=1
    relay_notes_of "${names[$k]}" "${dirs[$k]}.log" "${LOG_FROM[$k]}"
  done
}
# shellcheck disable=SC2317  # (called by the trap)
cleanup() {  # on the script's own interruption: stop the trainers it started (by pid), wait for them,
  set +m  # (a signal between snapshot_start's set -m and set +m runs this with job control on)
  trap - INT TERM  # and leave in --results what there is: a device command cut off at its time limit
  echo "== interrupted: stopping the runs" >&2  # brings back what is under its $OUT
  snapshot_stop  # a snapshot being written: stopped, not waited for (the time limit is near)
  put_file "$REPORT" report.txt || true  # first, should a SIGKILL follow soon
  put_logs logs || true
  for k in "${!names[@]}"; do stop_run "$k" "the script was interrupted"; done
  for k in "${!names[@]}"; do reap "$k" || true; done
  local pairs=()
  for k in "${!names[@]}"; do [[ -s ${dirs[$k]}/metrics.jsonl ]] && pairs+=("${names[$k]}=${dirs[$k]}"); done
  if [[ ${#pairs[@]} -gt 0 ]]; then
    pack_runs "${pairs[@]}" || echo "error: packing the run logs failed (scripts/pack_results.py)" >&2
    put_file "$OUT/window.md" window.md || true
  fi
  echo "== interrupted after $(( $(now) - START )) s: the runs' logs packed in $RESULTS"
  report_flush
  put_file "$REPORT" report.txt || true
  put_logs logs || true
  exit 130
}
pack_runs() {  # pack_runs NAME=DIR...: each run's logs into --results and the window table (pack_results.py)
  # (--results holds the snapshot's files then, of the same names: 8 is the limit on what comes back)
  "$PYTHON" "$HERE/pack_results.py" --results "$RESULTS" --runs "$@" --events "$EVENTS" \
    --table "$OUT/window.md" --max-files "$([[ -n $BUDGET ]] && echo 8 || echo 99)" > /dev/null
}
# -- while the runs train, a snapshot of --results -------------------------------------------------------
# A device command cut off at its limit can be SIGKILLed (no trap runs) and brings back what --results holds
# then. So while the runs train, every SNAPSHOT_EVERY s and when a run but the last ends, --results receives
# what the packing leaves there but the plots and summary.md: each run's NAME.tar.gz and window.md
# (pack_results.py, into OUT/snapshot; no checkpoints), report.txt (this start's console so far, then a line
# saying it is a snapshot) and logs.tar.gz (OUT/logs). Each file is copied in as .NAME.part beside its place
# and renamed over it, so a kill mid-copy leaves the previous one whole (and at most one .part file). A
# snapshot is written in the background, in a process group of its own, one at a time, so that the runs'
# stops keep their times. None is started once the last run has ended: the packing at the end and an
# interruption stop the one being written (snapshot_stop kills its group, without waiting for it to end)
# and replace its files. (A SIGKILL of the script's own process group leaves a snapshot being written to
# end by itself, within seconds: its files are renamed into place whole.)
SNAP_AT=0 SNAP_PID=""
snapshot() {  # one snapshot (run by snapshot_start); a failure is one line, never the script's end
  local k f why pairs=() dir=$OUT/snapshot
  rm -rf "$dir" && mkdir -p "$dir" || return 0
  for k in "${!names[@]}"; do [[ -s ${dirs[$k]}/metrics.jsonl ]] && pairs+=("${names[$k]}=${dirs[$k]}"); done
  if [[ ${#pairs[@]} -gt 0 ]]; then
    why=$("$PYTHON" "$HERE/pack_results.py" --results "$dir" --runs "${pairs[@]}" --events "$EVENTS" \
      --max-files 99 2>&1 > /dev/null) ||
      echo "== snapshot at $(( $(now) - START )) s: pack_results.py failed (${why##*$'\n'}); $RESULTS keeps what it packed" >&2
  fi
  tar czf "$dir/logs.tar.gz" -C "$OUT" logs 2> /dev/null || [[ $? == 1 ]] || rm -f "$dir/logs.tar.gz"  # 1: a log grew
  { awk 1 "$REPORT"; echo "== snapshot at $(( $(now) - START )) s: the report so far (while the runs train, --results is refreshed every $SNAPSHOT_EVERY s and when a run but the last ends; a report that ends here is of a start cut off before its next snapshot)"; } > "$dir/report.txt"
  for f in "${names[@]/%/.tar.gz}" window.md logs.tar.gz report.txt; do
    [[ -f $dir/$f ]] || continue
    put_file "$dir/$f" "$f" || true
  done
}
snapshot_start() {  # a snapshot in the background, unless the last one is still being written (then later)
  (( SNAPSHOT_EVERY > 0 )) || return 0
  snapshot_running && return 0
  SNAP_AT=$(( $(now) + SNAPSHOT_EVERY ))
  set -m  # its own process group (job control for this one job): snapshot_stop ends all of it at once
  ( set +e; snapshot ) < /dev/null &
  SNAP_PID=$!
  set +m
}
snapshot_running() { [[ -n $SNAP_PID ]] && jobs -rp | grep -qx "$SNAP_PID"; }  # (a job of this script: no reused pid)
snapshot_stop() {  # the snapshot being written (if any) ends now: its process group (pack_results.py, tar,
  # cp, and any started while it is signalled) is killed, and a .part file it leaves goes (the file it
  # replaces stays whole); bash's "Killed" line for the job is not printed
  if snapshot_running; then
    { kill -KILL -- -"$SNAP_PID" || true; wait "$SNAP_PID" || true; } 2> /dev/null
  fi
  SNAP_PID=""
  rm -f "$RESULTS"/.*.part 2> /dev/null || true
}
trap cleanup INT TERM
progress() {  # one line per running run: its newest step line (console.log)
  local k line
  for k in "${!names[@]}"; do
    alive "$k" || continue
    # no console.log or no step line yet is normal at a run's start: never an error (set -e, pipefail)
    line=$(grep -a '^step ' "${dirs[$k]}/console.log" 2>/dev/null | tail -n 1 | cut -c1-140) || line=""
    echo "== ${names[$k]} at $(( $(now) - START )) s: ${line:-starting}"
  done
}
wait_for() {  # wait_for INDEX STOP_AT [last]: until run INDEX ends, or stop it at STOP_AT (epoch s; "" = never);
  # "last": no run trains after it, so its end needs no snapshot (the packing follows at once)
  local stopped="" said
  said=$(now)
  while alive "$1"; do
    relay_notes
    if (( PROGRESS_EVERY > 0 && $(now) >= said + PROGRESS_EVERY )); then progress; said=$(now); fi
    if (( SNAPSHOT_EVERY > 0 && $(now) >= SNAP_AT )); then snapshot_start; fi
    if [[ -n $2 && -z $stopped ]] && (( $(now) >= $2 )); then stop_run "$1"; stopped=$(now); fi
    if [[ -n $stopped ]] && (( $(now) >= stopped + KILL_AFTER )); then  # a run that does not stop
      echo "error: ${names[$1]} did not stop within $KILL_AFTER s of the signal: SIGKILL (its last checkpoint stays)" >&2
      kill -KILL "${PID[${names[$1]}]}" 2> /dev/null || true
      break
    fi
    sleep 1
  done
  reap "$1"
  [[ ${3:-} == last ]] && return 0
  SNAP_AT=0; snapshot_start  # the run's end in --results (now, or as soon as the last snapshot is written)
}

declare -A STOP_AT=()
nrun=${#names[@]}
if [[ -n $deadline ]] && (( $(left) < 10 )); then
  abort_pack "only $(left) s of the budget are left for training after the build and the checks; raise --budget"
fi
echo "== training: $nrun run(s) $([[ $PARALLEL == 1 ]] && echo "at once, started $STAGGER s apart" || echo "one after another")$([[ -n $deadline ]] && echo ", $(left) s left")"
snapshot_start  # the build and check logs in --results at once; then every SNAPSHOT_EVERY s
if [[ $PARALLEL == 1 ]]; then
  for k in "${!names[@]}"; do  # run k stops at deadline - (nrun-1-k)*STAGGER: all equally long
    [[ -n $deadline ]] && STOP_AT[$k]=$(( deadline - (nrun - 1 - k) * STAGGER ))
    [[ $k -gt 0 ]] && sleep "$STAGGER"
    start_run "$k"
  done
  for k in "${!names[@]}"; do wait_for "$k" "${STOP_AT[$k]:-}" "$( (( k == nrun - 1 )) && echo last)"; done
else
  for k in "${!names[@]}"; do
    [[ -n $deadline ]] && STOP_AT[$k]=$(( $(now) + $(left) / (nrun - k) ))
    start_run "$k"
    wait_for "$k" "${STOP_AT[$k]:-}" "$( (( k == nrun - 1 )) && echo last)"
  done
fi
snapshot_stop; rm -rf "$OUT/snapshot"  # its files are replaced by the packing below, never written over it
trap - INT TERM
failed=()
for n in "${names[@]}"; do case ${RC[$n]:-1} in 0|130|138|143) ;; *) failed+=("$n") ;; esac; done

# -- 4. plots, summary, packed logs -------------------------------------------------------------------
# The runs' logs are packed (scripts/pack_results.py, in the background) while the plots are drawn.
# With --budget (and --smoke) only the plots over the layers' maxima (plot_run.py --heads max, which
# also writes the summary) are drawn here: the per-head plots take a minute at 50k steps and are drawn
# after the window from the packed logs, which hold everything they need.
echo "== plots and summary ($(( $(now) - START )) s)"
plotted=(); pairs=()
for k in "${!names[@]}"; do
  [[ -s ${dirs[$k]}/metrics.jsonl ]] && { plotted+=("${dirs[$k]}"); pairs+=("${names[$k]}=${dirs[$k]}"); }
done
status=0
pack_pid=""
if [[ ${#pairs[@]} -gt 0 ]]; then
  pack_runs "${pairs[@]}" &
  pack_pid=$!
  "$PYTHON" "$HERE/plot_run.py" "${plotted[@]}" --out "$OUT/plots/pg19" --heads max --threshold 50 --formats png \
    > /dev/null || status=1
  if [[ -z $BUDGET && $SMOKE == 0 ]]; then
    for d in "${plotted[@]}"; do
      "$PYTHON" "$HERE/plot_run.py" "$d" --out "$OUT/plots/$(basename "$d")" --heads all --threshold 50 \
        --formats png > /dev/null || status=1
    done
  fi
  [[ -f $OUT/plots/pg19_summary.md ]] && cp "$OUT/plots/pg19_summary.md" "$OUT/summary.md"
  wait "$pack_pid" || { status=1; echo "error: packing the run logs failed (scripts/pack_results.py)" >&2; }
  for f in summary.md window.md; do [[ ! -f $OUT/$f ]] || put_file "$OUT/$f" "$f" || true; done
fi
echo "== summary ($OUT/summary.md; plots in $OUT/plots; packed logs in $RESULTS)"
[[ -f $OUT/summary.md ]] && cat "$OUT/summary.md"
[[ -f $OUT/window.md ]] && { echo; cat "$OUT/window.md"; }
echo "== done in $(( $(now) - START )) s"
[[ ${#failed[@]} -eq 0 ]] || { echo "error: run(s) failed: ${failed[*]} (logs in $OUT/runs/*.log)" >&2; status=1; }
report_flush
put_file "$REPORT" report.txt || { echo "error: copying the report into $RESULTS failed" >&2; status=1; }
put_logs logs plots || status=1  # (its error line is on the console only: the report is copied)
nfiles=$(find "$RESULTS" -maxdepth 1 -type f | wc -l)
[[ -z $BUDGET ]] || (( nfiles <= 8 )) || { echo "error: $RESULTS holds $nfiles files; at most 8 come back from the GPU machine" >&2; status=1; }
big=$(find "$RESULTS" -maxdepth 1 -type f -size +16M)
[[ -z $big ]] || { echo "error: over 16 MiB, will not come back from the GPU machine: $big" >&2; status=1; }
exit $status
