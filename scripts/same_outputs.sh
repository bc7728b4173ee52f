#!/usr/bin/env bash
# Whether two builds of train_gpt2_ls produce the same outputs: for a change that must not change
# behaviour (a restructuring), build the trainer before and after (e.g. g++ -std=c++17 -O2 -fopenmp
# -I. -x c++ train_gpt2_ls.cu llmc/app/launch_collective.cpp -o /tmp/after, and the same in a worktree
# of the older commit, without the second file before 308db45) and run
#   scripts/same_outputs.sh /tmp/before /tmp/after [WORKDIR]
# Both binaries run the same 8 CPU commands on tiny Shakespeare (make data-tinyshakespeare): LS, MHSA
# with QK-norm and z-loss, soft-cap with --near and spike skipping, QK-Clip with the logit alarm and
# gradient accumulation, untied embeddings with wsd, a run stopped at step 8 and resumed to 12, and
# --eval-only with --dump-attention and --dump-logits. Every file written (metrics, logit stats,
# config files, checkpoints, states, dumps, console.log, samples.txt, stdout and stderr) must be
# byte-identical, with timings (ms, tok/s, elapsed, ETA, wall time), the metrics' wall-clock "time" and
# the work directory masked. Every command must succeed on both sides and each run write its
# config.json (else there is nothing to compare). Exit 0 when all are identical, 1 naming each file
# that differs and each command that failed.
set -u
[ $# -ge 2 ] || { echo "usage: $0 BIN_BEFORE BIN_AFTER [WORKDIR]" >&2; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2"); W=${3:-$(mktemp -d /tmp/same_outputs.XXXXXX)}
D=$(realpath "$(dirname "$0")/..")/data/shards/tinyshakespeare_gpt2
[ -f "$D/meta.json" ] || { echo "error: $D is missing; run make data-tinyshakespeare" >&2; exit 2; }

run_set() {  # BIN OUT
    local bin=$1 out=$2; rm -rf "$out"; mkdir -p "$out"
    local common="--device cpu --threads 2 --layers 2 --channels 64 --heads 4
                  --window 16 -b 2 -t 64 -x 12 -v 4 -m 2 -s 6 -g 8 -n 4"
    run() { local name=$1; shift; $bin -i "$D/train_*.bin" -j "$D/val_*.bin" $common -o "$out/$name" "$@" >"$out/$name.stdout" 2>"$out/$name.stderr"
            echo "$name rc=$?" >>"$out/rc.txt"; }
    run ls --global-heads 1
    run mhsa --global-heads 4 --qk-norm --z-loss 1e-4
    run softcap --global-heads 1 --attn-softcap 5 --near 4 --skip-spikes 1.5 --spike-z 1 --spike-window 4
    run clip --global-heads 2 --qk-clip 0.08 --logit-alarm 1 --logit-alarm-above 0.12 --logit-alarm-cooldown 3 \
        --spike-window 4 -d 256
    run untie --global-heads 0 --untie-embeddings -k wsd -z 0
    run resume --global-heads 1 -x 8
    $bin -i "$D/train_*.bin" -j "$D/val_*.bin" $common -o "$out/resume" --global-heads 1 -y 1 >"$out/resume2.stdout" 2>"$out/resume2.stderr"
    echo "resume2 rc=$?" >>"$out/rc.txt"
    $bin -e "$out/ls/model_00000012.bin" --eval-only -j "$D/val_*.bin" --device cpu -b 2 -t 64 -m 2 -o "$out/evaldump" \
        --dump-attention 0:0,1:3 --dump-logits "$out/logits.bin" >"$out/eval.stdout" 2>"$out/eval.stderr"
    echo "eval rc=$?" >>"$out/rc.txt"
}
masked() {  # FILE DIR: timings, wall-clock times and the work directory masked
    sed -E 's/"(ms|tokens_per_s|time)": *[0-9.eE+-]+/"\1":X/g; s/[0-9.]+ ms/X ms/g; s/[0-9.]+ tok\/s/X tok\/s/g
            s/(elapsed|ETA|wall time) [0-9hms.?]+/\1 X/g' "$1" |
        sed "s|$2|DIR|g"
}
run_set "$A" "$W/before"; run_set "$B" "$W/after"
bad=0
for f in $(cd "$W/before" && find . -type f ! -name .lock | sort); do
    if [ ! -f "$W/after/$f" ]; then echo "missing after: $f"; bad=1; continue; fi
    case $f in
        *.jsonl|*.stdout|*.stderr|*.json|*.toml|*.txt|*.log)
            cmp -s <(masked "$W/before/$f" "$W/before") <(masked "$W/after/$f" "$W/after") || { echo "differs: $f"; bad=1; } ;;
        *) cmp -s "$W/before/$f" "$W/after/$f" || { echo "differs (bytes): $f"; bad=1; } ;;
    esac
done
for f in $(cd "$W/after" && find . -type f ! -name .lock | sort); do
    [ -f "$W/before/$f" ] || { echo "missing before: $f"; bad=1; }
done
for side in before after; do  # a command that failed on both sides would leave identical error outputs
    while read -r name rc; do
        [ "$rc" = rc=0 ] || { echo "failed ($side): $name $rc (its stderr: $W/$side/$name.stderr)"; bad=1; }
    done <"$W/$side/rc.txt"
    for f in ls/config.json mhsa/config.json softcap/config.json clip/config.json untie/config.json \
             resume/config.json evaldump/eval.json; do
        [ -f "$W/$side/$f" ] || { echo "no output ($side): $f was not written"; bad=1; }
    done
done
n=$(cd "$W/before" && find . -type f ! -name .lock | wc -l)
if [ $bad -eq 0 ]; then echo "same outputs: $n files identical ($W)"; else echo "outputs differ ($W)"; fi
exit $bad
