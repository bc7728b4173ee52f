#!/usr/bin/env bash
# CPU speed of the trainer and the generator by OpenMP wait policy and thread count, alone (beside
# whatever else runs on the machine) and with BUSY busy-looping processes beside them (cores shared
# with other work): the table of docs/training.md, "Threads". One command regenerates it:
#
#   dev/bench/cpu_threads.sh [--trainer ./train_gpt2_ls] [--generator ./generate_gpt2_ls]
#       [--data 'data/shards/tinyshakespeare_gpt2'] [--busy 2] [--repeats 3] [--steps 6] [--tokens 48]
#
# Policies: "spin" = libgomp's default spin-then-sleep (GOMP_SPINCOUNT=300000, the value libgomp uses
# when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set; the programs' default before they chose
# one), "default" = the programs' default now (neither variable set: OMP_WAIT_POLICY=PASSIVE,
# llmc/app/threads.h). Threads: 1, and the number of CPUs this process may use (nproc).
# Trainer: the default model (ls-small: L 6, C 192, V 50257), B 2 x T 64, --steps optimizer steps;
# ms/step = the median of the step lines after the first. Generator: --tokens tokens, KV-cached, from
# a checkpoint the script trains first (1 step); tok/s from its summary line. Each cell: the median
# of --repeats runs, the runs of one cell spread over the whole loop (not back to back). The busy
# processes are `sh` loops started by this script (killed by their pids at the end); everything,
# the busy loops too, runs at the niceness this script was started with. The machine's load average
# before and after each load condition is printed: other users' work is part of the conditions.
# Output: the markdown table on stdout (last), progress on stderr.
set -euo pipefail
cd "$(dirname "$0")/../.."
trainer=./train_gpt2_ls generator=./generate_gpt2_ls data=data/shards/tinyshakespeare_gpt2
busy=2 repeats=3 steps=6 tokens=48
while [ $# -gt 0 ]; do
    case $1 in
        --trainer) trainer=$2; shift 2 ;;
        --generator) generator=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        --busy) busy=$2; shift 2 ;;
        --repeats) repeats=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --tokens) tokens=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument '$1' (dev/bench/cpu_threads.sh --help lists them)" >&2; exit 2 ;;
    esac
done
for b in "$trainer" "$generator"; do
    [ -x "$b" ] || { echo "error: $b is not an executable; build it (make, or make cpu) or pass --trainer/--generator" >&2; exit 2; }
done
ls "$data"/train_*.bin >/dev/null 2>&1 ||
    { echo "error: no $data/train_*.bin; make data/shards/tinyshakespeare_gpt2/meta.json makes them (or pass --data)" >&2; exit 2; }

work=$(mktemp -d)
busy_pids=()
stop_busy() {
    local p
    for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${busy_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    busy_pids=()
}
trap 'stop_busy; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM  # so that the EXIT trap stops the busy loops

cpus=$(nproc)
# the checkpoint the generator starts from
"$trainer" -i "$data/train_*.bin" -b 2 -t 64 -x 1 -v 0 -s 0 -o "$work/ck" --device cpu --threads 1 >/dev/null
model=$(ls "$work"/ck/model_*.bin | tail -1)

median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# env for a policy: spin = GOMP_SPINCOUNT=300000; default = neither variable
policy_env() { if [ "$1" = spin ]; then echo "GOMP_SPINCOUNT=300000"; else echo "LLMC_BENCH_POLICY=default"; fi; }

train_ms() {  # policy threads -> median ms/step of steps 2..N
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS $(policy_env "$1") \
        "$trainer" -i "$data/train_*.bin" -b 2 -t 64 -x "$steps" -v 0 -s 0 --device cpu --threads "$2" |
        sed -n 's/^step \([0-9]*\)\/[0-9]* .*| \([0-9.]*\) ms |.*/\1 \2/p' | awk '$1 > 1 {print $2}' | median
}
gen_toks() {  # policy threads -> tok/s
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS $(policy_env "$1") \
        "$generator" -e "$model" --prompt-ids 50256 -n "$tokens" --greedy --device cpu --threads "$2" 2>&1 >/dev/null |
        sed -n 's/.*(\([0-9.]*\) tok\/s).*/\1/p'
}

declare -A result
cells=("spin 1" "spin $cpus" "default 1" "default $cpus")
loads=(0 "$busy")
for load in "${loads[@]}"; do
    stop_busy
    for ((i = 0; i < load; i++)); do sh -c 'while :; do :; done' & busy_pids+=($!); done
    sleep 1
    echo "load $load busy: load average before $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    for ((r = 0; r < repeats; r++)); do
        for cell in "${cells[@]}"; do
            set -- $cell
            result["$load $1 $2 train"]+="$(train_ms "$1" "$2") "
            result["$load $1 $2 gen"]+="$(gen_toks "$1" "$2") "
            echo "  repeat $((r + 1))/$repeats $cell: ms/step ${result["$load $1 $2 train"]}| tok/s ${result["$load $1 $2 gen"]}" >&2
        done
    done
    echo "load $load busy: load average after $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
stop_busy

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo
echo "CPU, $cpus cores ($(uname -m)), commit $commit; median of $repeats runs; trainer ms/step (ls-small, B 2 x T 64),"
echo "generator tok/s ($tokens tokens, KV cache); busy = $busy busy-looping processes beside it."
echo
echo "| wait policy | threads | ms/step, 0 busy | ms/step, $busy busy | tok/s, 0 busy | tok/s, $busy busy |"
echo "|---|---|---|---|---|---|"
for cell in "${cells[@]}"; do
    set -- $cell
    name=$([ "$1" = spin ] && echo "spin (libgomp default, GOMP_SPINCOUNT=300000)" || echo "passive (the programs' default)")
    row="| $name | $2"
    for kind in train gen; do
        for load in "${loads[@]}"; do
            row+=" | $(printf '%s\n' ${result["$load $1 $2 $kind"]} | median)"
        done
    done
    echo "$row |"
done
