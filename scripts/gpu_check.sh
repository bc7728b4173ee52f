#!/usr/bin/env bash
# The one GPU verification script (GUIDE section 5). On a machine with an NVIDIA GPU:
#   scripts/gpu_check.sh [REPORT_DIR]        (default: $OUT if set, else out/gpu_check)
# builds for sm_90 (CUDA_ARCH overrides), runs `make test-gpu` and every kernel-lab binary in
# build/dev/, and writes REPORT_DIR/report.txt (short table last) and REPORT_DIR/report.json.
# Header-only deps: run ../shared/tools/device-deps.sh first on a machine with a registry; the
# build then picks up .deps/include automatically.
set -uo pipefail
cd "$(dirname "$0")/.."
report_dir=${1:-${OUT:-out/gpu_check}}
mkdir -p "$report_dir"
arch=${CUDA_ARCH:-90}
extra=""
[ -d .deps/include ] && extra=".deps/include"
log="$report_dir/report.txt"
json="$report_dir/report.json"
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
: > "$log"
say() { echo "$@" | tee -a "$log"; }
say "gpu_check: commit $commit, device ${device:-none found}, CUDA_ARCH=$arch"

results=()   # "name|status|seconds"
run_step() {  # run_step NAME COMMAND...
    local name=$1; shift
    local t0=$(date +%s%N)
    say "== $name: $* =="
    "$@" >>"$log" 2>&1
    local rc=$?
    local dt=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
    results+=("$name|$([ $rc -eq 0 ] && echo PASS || echo "FAIL(rc=$rc)")|$dt")
    return $rc
}

run_step build make -j"$(nproc)" CUDA_ARCH="$arch" EXTRA_INCLUDE="$extra" gpu-targets
run_step test-gpu make CUDA_ARCH="$arch" EXTRA_INCLUDE="$extra" test-gpu
for bin in build/dev/*; do
    [ -x "$bin" ] && run_step "lab:$(basename "$bin")" "$bin"
done
for bench in dev/bench/*.py; do
    [ -f "$bench" ] && run_step "bench:$(basename "$bench" .py)" python3 "$bench" --out "$report_dir"
done

{
    echo "{"
    echo "  \"commit\": \"$commit\", \"device\": \"${device:-none}\", \"cuda_arch\": \"$arch\","
    echo "  \"steps\": ["
    n=${#results[@]}
    for i in "${!results[@]}"; do
        IFS='|' read -r name status secs <<<"${results[$i]}"
        sep=","; [ $((i + 1)) -eq $n ] && sep=""
        echo "    {\"name\": \"$name\", \"status\": \"$status\", \"seconds\": $secs}$sep"
    done
    echo "  ]"
    echo "}"
} > "$json"

say ""
say "== summary (commit ${commit:0:10}, ${device:-no GPU}) =="
fail=0
for r in "${results[@]}"; do
    IFS='|' read -r name status secs <<<"$r"
    printf '%-40s %-12s %8.1f s\n' "$name" "$status" "$secs" | tee -a "$log"
    [ "$status" = PASS ] || fail=1
done
exit $fail
