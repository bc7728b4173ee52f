#!/usr/bin/env bash
# Runs the libFuzzer harnesses one after the other (docs/reliability.md; `make fuzz`, `make fuzz-smoke`).
#   test/fuzz/run_fuzz.sh [--seconds S] [--bin-dir DIR] [--work DIR] NAME...
# For each harness NAME (binary DIR/fuzz_NAME, default build/fuzz):
#   1. replays every committed crash input test/fuzz/regressions/NAME/* once (each must now pass);
#   2. fuzzes for S seconds (default 600) from the seeds test/fuzz/corpus/NAME plus the inputs earlier
#      runs found (WORK/corpus/NAME, default WORK = build/fuzz; new inputs go there, never into
#      test/fuzz/corpus), under nice -n 19, with ASan + UBSan, -rss_limit_mb=2048,
#      -malloc_limit_mb=2048 (an allocation over 2 GB is a finding) and -timeout=20 (an input running
#      longer is a hang);
#   3. prints one line: "fuzz NAME: ok, <execs> execs in <s> s, cov <c> ft <f>, corpus <n>, <r> regressions
#      replayed" or "fuzz NAME: FAILED ..." naming the saved input (WORK/artifacts/NAME/) and the log.
# Exits 1 when any harness failed. FUZZ_ARGS adds libFuzzer flags to every run (e.g. -runs=1000000).
set -u
seconds=600
bin_dir=build/fuzz
work=build/fuzz
names=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) names+=("$1"); shift ;;
    esac
done
if [ ${#names[@]} -eq 0 ]; then echo "run_fuzz.sh: no harness named" >&2; exit 2; fi
here="$(cd "$(dirname "$0")" && pwd)"
failed=0
for name in "${names[@]}"; do
    bin="$bin_dir/fuzz_$name"
    log="$work/logs/$name.log"
    mkdir -p "$work/corpus/$name" "$work/artifacts/$name" "$work/logs"
    if [ ! -x "$bin" ]; then echo "fuzz $name: FAILED (no binary $bin; build it with make)"; failed=1; continue; fi
    extra=()
    case "$name" in
        config) extra+=(-close_fd_mask=2) ;;  # CLI11 prints every parse error; reports still come through
    esac
    : >"$log"
    # 1. the committed regressions
    regressions=()
    if [ -d "$here/regressions/$name" ]; then
        while IFS= read -r -d '' f; do regressions+=("$f"); done \
            < <(find "$here/regressions/$name" -type f ! -name '*.md' -print0 | sort -z)
    fi
    if [ ${#regressions[@]} -gt 0 ]; then
        if ! nice -n 19 "$bin" "${extra[@]}" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=20 \
                "${regressions[@]}" >>"$log" 2>&1; then
            echo "fuzz $name: FAILED replaying test/fuzz/regressions/$name (log $log)"
            tail -n 30 "$log" | grep -E "ERROR|FUZZ_CHECK|Running:|SUMMARY|terminate|what\(\)" | head -n 8 | sed 's/^/    /'
            failed=1
            continue
        fi
    fi
    # 2. fuzzing
    start=$(date +%s)
    nice -n 19 "$bin" "${extra[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=20 \
        -print_final_stats=1 -artifact_prefix="$work/artifacts/$name/" ${FUZZ_ARGS:-} \
        "$work/corpus/$name" "$here/corpus/$name" >>"$log" 2>&1
    rc=$?
    elapsed=$(( $(date +%s) - start ))
    # 3. the summary line
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if grep -qE '^#[0-9]+: cov: ' "$log"; then  # -fork=N: stat:: lines are one worker's; the parent's total
        execs=$(sed -n 's/^INFO: fuzzed for \([0-9]*\) iterations.*/\1/p' "$log" | tail -n 1)
        [ -n "$execs" ] || execs="about $(sed -n 's/^#\([0-9]*\): cov: .*/\1/p' "$log" | tail -n 1)"
    fi
    last=$(grep -E '^#[0-9]+.* cov: ' "$log" | tail -n 1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    if [ $rc -eq 0 ]; then
        echo "fuzz $name: ok, ${execs:-?} execs in ${elapsed} s, cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?}, ${#regressions[@]} regressions replayed"
    else
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        echo "fuzz $name: FAILED (exit $rc) after ${execs:-?} execs, input ${artifact:-?}, log $log"
        grep -E "ERROR: |FUZZ_CHECK|SUMMARY|what\(\)|terminate called" "$log" | head -n 6 | sed 's/^/    /'
        failed=1
    fi
done
exit $failed
