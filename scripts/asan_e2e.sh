#!/usr/bin/env bash
# End-to-end runs of the AddressSanitizer + UBSan builds (make test-asan):
#
#   scripts/asan_e2e.sh [BUILD_DIR]      (default build/asan: train_gpt2_ls, generate_gpt2_ls)
#
# On byte-level shards of tiny Shakespeare (SHARED_DATA/tinyshakespeare/input.txt; a synthetic
# text when it is missing) and a tiny LS model, with gradient accumulation, z-loss, --near,
# validation, samples and logit statistics:
#   1. a 24-step run with checkpoints (the reference);
#   2. 8 steps, then -y 1 -x 24 (an extension resume): model and state of step 24 == the reference;
#   3. a run killed with kill -9 after its checkpoint of step 8, then -y 1: == the reference;
#   4. a run whose checkpoint write fails at the file-size limit (prlimit --fsize; SIGXFSZ is
#      ignored, so the error path runs): exit status 1 with one error line, then -y 1: == the reference;
#   5. --eval-only with --dump-attention and --dump-logits;
#   6. generate_gpt2_ls from the final checkpoint, with and without the KV cache (same greedy ids);
#   7. short runs through the other model and stabilizer paths (qk-norm, soft-cap, untied embeddings,
#      cosine schedule, logit alarm, spike skipping, QK-Clip).
# Any sanitizer report fails the script (exit code 86 from the runtime, and stderr is scanned).
set -euo pipefail

BUILD_DIR=${1:-build/asan}
TRAIN=$BUILD_DIR/train_gpt2_ls
GEN=$BUILD_DIR/generate_gpt2_ls
SHARED_DATA=${SHARED_DATA:-../shared/data}
for b in "$TRAIN" "$GEN"; do
    [ -x "$b" ] || { echo "error: $b is missing; build it with make $b" >&2; exit 1; }
done
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:exitcode=86}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:exitcode=86}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/asan_e2e.XXXXXX")
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
D=$WORK/data
mkdir -p "$D"
python3 - "$D" "$SHARED_DATA/tinyshakespeare/input.txt" <<'EOF'
import json, os, random, struct, sys
d, src = sys.argv[1], sys.argv[2]
if os.path.exists(src):
    text = open(src, "rb").read()[:40000]
else:  # deterministic stand-in
    rng = random.Random(0)
    words = [b"the", b"king", b"shall", b"not", b"be", b"so", b"and", b"my", b"lord", b"good"]
    text = b" ".join(rng.choice(words) for _ in range(9000))[:40000]
def shard(path, toks):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
        f.write(struct.pack(f"<{len(toks)}H", *toks))
shard(f"{d}/train_000000.bin", list(text[:36000]))
shard(f"{d}/val_000000.bin", list(text[36000:]))
json.dump({"vocab_size": 256, "eot": 10}, open(f"{d}/meta.json", "w"))
with open(f"{d}/tokenizer.bin", "wb") as f:
    f.write(struct.pack("<256I", 20240328, 2, 256, 10, *([0] * 252)))
    for b in range(256):
        f.write(bytes([1, b]))
EOF

ARGS=(-i "$D/train_*.bin" -j "$D/val_*.bin" --layers 2 --channels 32 --heads 4 --global-heads 1 --window 8
      --max-seq-len 64 -b 2 -t 32 -d 128 --threads 1 -k constant -u 0 -l 2e-3 -v 8 -m 2 -s 12 -g 8
      --z-loss 1e-4 --near 4 --logit-stats-every 2 --device cpu)
STEPS=24

fail() { echo "asan_e2e: FAILED: $*" >&2; exit 1; }
# Runs a command, its stderr into $WORK/err; fails on a non-zero exit or a sanitizer report.
check() {
    local rc=0
    "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
    scan
    [ $rc -eq 0 ] || { cat "$WORK/err" >&2; fail "exit status $rc: $*"; }
}
scan() {
    if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer" "$WORK/err"; then
        cat "$WORK/err" >&2
        fail "sanitizer report"
    fi
}
same() {  # the model and state files of the last step equal the reference's
    for f in "model_$(printf %08d $STEPS).bin" "state_$(printf %08d $STEPS)_00000.bin"; do
        cmp -s "$WORK/full/$f" "$1/$f" || fail "$1/$f differs from the uninterrupted run's"
    done
}
step() { echo "-- $*"; }

step "1. $STEPS steps with checkpoints every 8"
check "$TRAIN" "${ARGS[@]}" -o "$WORK/full" -x $STEPS -n 8
grep -q "step $STEPS/$STEPS" "$WORK/out" || fail "the reference run did not reach step $STEPS"

step "2. 8 steps, then -y 1 -x $STEPS"
check "$TRAIN" "${ARGS[@]}" -o "$WORK/ext" -x 8
check "$TRAIN" "${ARGS[@]}" -o "$WORK/ext" -x $STEPS -n 8 -y 1
grep -q "resumed from" "$WORK/out" || fail "-y 1 did not resume"
same "$WORK/ext"

step "3. kill -9 after the checkpoint of step 8, then -y 1"
"$TRAIN" "${ARGS[@]}" -o "$WORK/kill" -x 100000 -n 4 --keep-checkpoints 0 >/dev/null 2>"$WORK/err" &
pid=$!
for _ in $(seq 1 6000); do
    [ -e "$WORK/kill/DONE_00000008" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
done
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
scan
[ -e "$WORK/kill/DONE_00000008" ] || fail "the run to be killed never wrote its checkpoint of step 8"
# keep checkpoint 8 only (the run may have gone further), as if it had been killed right after it
find "$WORK/kill" -name 'DONE_*' ! -name DONE_00000008 -delete
check "$TRAIN" "${ARGS[@]}" -o "$WORK/kill" -x $STEPS -n 8 -y 1
grep -q "at step 8" "$WORK/out" || fail "did not resume from step 8"
same "$WORK/kill"

step "4. a checkpoint write past the file-size limit, then -y 1"
if command -v prlimit >/dev/null; then
    check "$TRAIN" "${ARGS[@]}" -o "$WORK/fsize" -x 8
    limit=$(( $(stat -c %s "$WORK/fsize/model_00000008.bin") / 2 ))
    rc=0
    prlimit --fsize=$limit "$TRAIN" "${ARGS[@]}" -o "$WORK/fsize" -x $STEPS -n 8 -y 1 >"$WORK/out" 2>"$WORK/err" || rc=$?
    scan
    [ $rc -eq 1 ] || { cat "$WORK/err" >&2; fail "expected exit status 1 at the file-size limit, got $rc"; }
    # the resume's "note: resuming at step 8 with ..." lines (the changed -x and -n) come first
    [ "$(grep -vc "^note: resuming at step" "$WORK/err")" -eq 1 ] && tail -n 1 "$WORK/err" | grep -q "^error: .*File too large" ||
        { cat "$WORK/err" >&2; fail "expected one error line naming the failed write"; }
    check "$TRAIN" "${ARGS[@]}" -o "$WORK/fsize" -x $STEPS -n 8 -y 1
    grep -q "at step 8" "$WORK/out" || fail "did not resume from step 8"
    same "$WORK/fsize"
else
    echo "   SKIPPED: prlimit (util-linux) not found"
fi

step "5. --eval-only --dump-attention --dump-logits"
M=$WORK/full/model_$(printf %08d $STEPS).bin
check "$TRAIN" --eval-only -e "$M" -j "$D/val_*.bin" -b 2 -t 32 -m 2 --threads 1 --device cpu \
    --dump-attention 0:0,1:3 --dump-logits "$WORK/logits.bin" -o "$WORK/eval"
[ -s "$WORK/eval/attn_L1_H3.npy" ] && [ -s "$WORK/logits.bin" ] || fail "--eval-only wrote no dumps"

step "6. generate_gpt2_ls, with and without the KV cache"
check "$GEN" -e "$M" --tokenizer "$D/tokenizer.bin" --prompt-ids 10 -n 24 --seed 3 --threads 1 --device cpu
check "$GEN" -e "$M" --prompt-ids 10,84,104 -n 24 --greedy --print-ids --threads 1 --device cpu
cp "$WORK/out" "$WORK/cached"
check "$GEN" -e "$M" --prompt-ids 10,84,104 -n 24 --greedy --print-ids --threads 1 --device cpu --no-cache
cmp -s "$WORK/cached" "$WORK/out" || fail "generation with and without the KV cache differ"

step "7. the other model and stabilizer paths: qk-norm, soft-cap, untied, cosine, logit alarm, spikes; QK-Clip"
check "$TRAIN" "${ARGS[@]}" -o "$WORK/variants" -x 12 --qk-norm --attn-softcap 20 --untie-embeddings -k cosine -u 2 \
    --logit-alarm 0.5 --logit-alarm-cooldown 4 --spike-window 4 --skip-spikes 1 --shuffle 0
check "$TRAIN" "${ARGS[@]}" -o "$WORK/qkclip" -x 6 --qk-clip 0.05 --global-heads 4
grep -q "qk-clip" "$WORK/out" || fail "--qk-clip 0.05 clipped no head"

echo "asan_e2e: passed (training, extension and kill -9 resumes bit-identical, file-size-limit failure, eval, generation, variants)"
