#!/usr/bin/env bash
# The one GPU verification script (docs/results/README.md). On a machine with an NVIDIA GPU, from anywhere:
#
#   scripts/gpu_check.sh [--part PARTS] [--out DIR] [--emulate]
#
# --emulate (or GPU_CHECK_EMULATE=1): the same stages against the emulated build (build/emu,
# build/emu-fp32: docs/emulation.md) on a machine without a GPU, so the script itself is tested
# (`make test` runs it). What cannot mean anything there is SKIPPED with its reason: the kernel
# timing tables (they would time the emulator; minutes per lab at production shapes), the PyTorch
# peer benchmarks and the end-to-end comparison (they need torch with CUDA and a GPU). The
# sanitize stage runs the same attention shapes under the emulation's AddressSanitizer + UBSan and
# its two-schedule race check instead of compute-sanitizer; the train stage a small model (L 2,
# C 64, hd 32, T 64, 12 steps) on a small synthetic language instead of the paper model at T 2048.
# Its results are "emulated", never "GPU": the report says so in its device line.
#
# PARTS: comma-separated stage names or group numbers (default: all). Groups are sized to fit one
# 10-minute call of the lent GPU machine each; the build stays in build/ between calls on the same
# machine, and every later group rebuilds what it needs when it runs on a fresh one (at most once
# per call: a failed build is not retried by the next stage).
#   1 = first,build,test   first: the FP32 build of test_gpu/test_cuda_model alone, run with
#                      CUDA_LAUNCH_BLOCKING=1 (an asynchronous fault then names its kernel); build:
#                      sm_90 BF16 build of every GPU target; test: every test/gpu binary and every
#                      kernel lab with --check (the binaries `make test-gpu` runs, one step each, so one
#                      failure does not hide the rest), and the attention lab's --sweep (BF16 build)
#   2 = fp32,sanitize  PRECISION=FP32 build into build/fp32 (make BUILD=build/fp32) and the same tests;
#                      compute-sanitizer memcheck and racecheck of the LS-attention lab (--kernel
#                      production: the FA2-class forward + the FA2-class backward) on small shapes
#   3 = labs,bench,train   every kernel lab with no arguments (timing tables), and the attention
#                      lab's production kernels at the paper shape for B = 1 .. 64 (--json, LS and
#                      all-global: how its time scales with the batch, docs/results/attention_journal.md
#                      "What the two H200 runs said"); every peer benchmark
#                      dev/bench/*.py with --out (except the end-to-end one and the CPU-only
#                      cpu_vs_torch.py, which times the CPU backend); a short real training
#                      run of the paper model on the GPU (synthetic data, T=2048) with the near/far
#                      statistics (--near P/2): loss must fall, every step's near/far fields present
#                      and consistent; then --eval-only --dump-attention of its final model on the
#                      GPU: two heads' maps finite, zero outside the window, rows summing to 1; and a
#                      short QK-Clip run (a threshold that clips): heads clipped, losses finite
#   4 = e2e-small      dev/bench/train_vs_torch.py --models paper, then ls-small (ours vs PyTorch, the
#                      paper model with the paper code's options, then with GPT-2's as timed since fa663e0)
#   5 = e2e-d12        dev/bench/train_vs_torch.py --models d12        (ours vs PyTorch, GPT-2 124M shape)
#   6 = profile        the trainer's per-kernel profile (--profile-steps 8) of the paper's shape at B 8,
#                      the paper code's model at B 16 and d12, the generator's profiled bench on the
#                      B 16 model, and LS against MHSA at 2K-16K, ours only (stage_profile)
#   all = 1,2,3,6,4,5
# DIR (default $OUT if set, else out/gpu_check) receives report.txt (every step's output, the short
# table last) and report.json (steps, statuses, times, and the benchmarks' JSON), covering every step
# run on this machine so far (build/gpu_check/results.tsv), not only this call's.
# Environment: CUDA_ARCH (default 90), GPU_CHECK_TIMEOUT_SCALE (multiplies every step's time limit; 6 with --emulate, else 1), EMU_FP32_MODEL_CASES (--emulate: the first stage's test_cuda_model filter; default all), EMU_BF16_MODEL_CASES (--emulate: the test stage's test_cuda_model filter; default all), GPU_CHECK_PREBUILT (a tarball of scripts/prebuild_gpu.sh: the build stage installs its programs with scripts/use_prebuilt.sh when they were built from this tree's sources and load here, else builds; not with --emulate), GPU_CHECK_COMMIT (the commit measured; default git rev-parse,
# needed where the tree was copied without .git; report.json records scripts/build_digest.sh of the tree
# that ran beside it, and scripts/lease_digest.py checks the one against the other). Header-only deps: run ../shared/tools/device-deps.sh
# on a machine with a registry and bring .deps along; the build then uses .deps/include.
# Before any stage: the header-only deps (CLI11, nlohmann/json) must be found (else one line, exit 2)
# and so must the Python packages the requested stages import (one line naming the missing ones).
# A step that fails is FAIL in the table; a test that exits 77 (built without what it tests, e.g.
# NCCL) is SKIPPED (not run, not passed); the exit status is 1 if any step of this call failed.
set -uo pipefail
cd "$(dirname "$0")/.."
# a closed stdin (a launcher may start the command so) as /dev/null: each step passes stdin on (0<&0)
{ : <&0; } 2> /dev/null || exec < /dev/null

parts=all
report_dir=""
report_only=0  # --report-only: no stage; the report of every step recorded so far (gpu_lease.sh's last act)
while [ $# -gt 0 ]; do
    case $1 in
        --part|--parts) parts=${2:?--part needs a value}; shift 2 ;;
        --out) report_dir=${2:?--out needs a directory}; shift 2 ;;
        --emulate) GPU_CHECK_EMULATE=1; shift ;;
        --report-only) report_only=1; shift ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1'; use --part PARTS and --out DIR (see --help)" >&2; exit 2 ;;
    esac
done

emulate=${GPU_CHECK_EMULATE:-0}
stages=()
wanted=()
[ "$report_only" = 1 ] || IFS=',' read -ra wanted <<<"$parts"
for p in "${wanted[@]}"; do
    case $p in
        all) stages+=(first build test fp32 sanitize labs bench train profile e2e-small e2e-d12) ;;
        1) stages+=(first build test) ;;
        2) stages+=(fp32 sanitize) ;;
        3) stages+=(labs bench train) ;;
        4) stages+=(e2e-small) ;;
        5) stages+=(e2e-d12) ;;
        6) stages+=(profile) ;;
        first|build|test|sanitize|fp32|labs|bench|train|profile|e2e-small|e2e-d12) stages+=("$p") ;;
        *) echo "error: unknown part '$p'; parts are 1-6, all, or first, build, test, fp32, sanitize, labs, bench, train, profile, e2e-small, e2e-d12" >&2
           exit 2 ;;
    esac
done

if [ "$emulate" = 1 ]; then
    work=build/gpu_check_emu   # never mixed with a real GPU's results
    bf16_dir=build/emu fp32_dir=build/emu-fp32 trainer=build/emu/train_gpt2_ls generator=build/emu/generate_gpt2_ls
    report_dir=${report_dir:-out/gpu_check_emu}
else
    work=build/gpu_check
    bf16_dir=build fp32_dir=build/fp32 trainer=./train_gpt2_ls generator=./generate_gpt2_ls
    report_dir=${report_dir:-${OUT:-out/gpu_check}}
fi
mkdir -p "$report_dir" "$work/logs"
report_dir=$(cd "$report_dir" && pwd)
results=$work/results.tsv   # name<TAB>status<TAB>seconds<TAB>log, one line per step, latest run wins
touch "$results"
arch=${CUDA_ARCH:-90}
extra=""
[ -d .deps/include ] && extra=.deps/include
PY=${PYTHON:-python3}

export GPU_CHECK_COMMIT=${GPU_CHECK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
if [ "$emulate" = 1 ]; then
    device="EMULATED (dev/emu on $(nproc) CPU cores; not a GPU)"
else
    device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
fi
call_failed=0
if [ "$report_only" = 0 ]; then  # ---- the checks (--report-only goes straight to the report) ----
# Up front, so that a missing dependency costs one line, not a failed build per stage.
missing_headers=""
for h in CLI/CLI.hpp nlohmann/json.hpp; do
    found=""
    for d in $extra /usr/include /usr/local/include; do [ -f "$d/$h" ] && found=1; done
    [ -n "$found" ] || missing_headers="$missing_headers $h"
done
if [ -n "$missing_headers" ]; then
    echo "error: header-only deps not found:$missing_headers (looked in ${extra:-.deps/include (absent)}, /usr/include, /usr/local/include); run ../shared/tools/device-deps.sh where a registry is reachable and carry .deps" >&2
    exit 2
fi
py_needed=""
for s in "${stages[@]}"; do
    case $s in
        bench|e2e-small|e2e-d12) [ "$emulate" = 1 ] || py_needed="$py_needed numpy torch tqdm tiktoken" ;;
        train|profile) py_needed="$py_needed numpy tqdm" ;;
    esac
done
if [ -n "$py_needed" ]; then
    # shellcheck disable=SC2086  # a list of module names
    py_missing=$("$PY" -c 'import importlib.util, sys; print(" ".join(sorted({m for m in sys.argv[1:] if importlib.util.find_spec(m) is None})))' $py_needed)
    if [ -n "$py_missing" ]; then
        echo "error: $PY lacks Python packages the requested stages import: $py_missing; install them or set PYTHON" >&2
        exit 2
    fi
fi
bf16_build_tried=0  # this call already ran the BF16 build (pass or fail): later stages do not rebuild

echo "gpu_check: commit $GPU_CHECK_COMMIT, device ${device:-NONE FOUND}, CUDA_ARCH=$arch, stages: ${stages[*]}"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $GPU_CHECK_COMMIT"
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
    # torch's torch/version.py read alone (what torch.__version__ and torch.version.cuda give), without
    # importing torch (~3.5 CPU-s a call); where that file cannot be read alone, the import
    echo "torch: $($PY -c 'import importlib.util as u, os
try:
    s = u.find_spec("torch")
    v = u.spec_from_file_location("torch_version", os.path.join(s.submodule_search_locations[0], "version.py"))
    m = u.module_from_spec(v)
    v.loader.exec_module(m)
except Exception:
    import torch as t
    m = t.version
print(m.__version__, m.cuda)' 2>/dev/null || echo none)"
    nvidia-smi 2>&1 || echo "nvidia-smi failed: no GPU"
} >"$work/logs/environment.log"

# record NAME STATUS SECONDS LOG: replaces an earlier line of NAME in place, else appends.
record() {
    local tmp=$results.tmp
    awk -F'\t' -v n="$1" -v line="$1	$2	$3	$4" 'BEGIN { done = 0 }
        $1 == n { print line; done = 1; next } { print } END { if (!done) print line }' "$results" >"$tmp"
    mv "$tmp" "$results"
}

# step NAME TIMEOUT_S COMMAND...: runs it with its output in a log; PASS, FAIL(rc=N) or TIMEOUT.
# The limits are sized for a GPU; emulated, every limit is multiplied by timeout_scale (the emulated
# test_cuda_model takes ~4 min alone on 2 cores, over 10 when make test runs pytest beside it).
timeout_scale=${GPU_CHECK_TIMEOUT_SCALE:-$([ "$emulate" = 1 ] && echo 6 || echo 1)}
case $timeout_scale in ''|*[!0-9]*|0) echo "error: GPU_CHECK_TIMEOUT_SCALE must be a positive integer (got '$timeout_scale')" >&2; exit 2 ;; esac
# A call ended from outside (gpu_lease.sh's budget: timeout's SIGTERM to this call's process group)
# ends the step it is in: the step's own timeout runs in a process group of its own, which that signal
# does not reach. The step stays recorded as cut off.
step_pid=""
# shellcheck disable=SC2317  # run by the traps below
end_step() {  # end_step EXIT_STATUS
    if [ -n "$step_pid" ]; then kill -TERM "$step_pid" 2>/dev/null; wait "$step_pid"; fi
    exit "$1"
}
trap 'end_step 143' TERM
trap 'end_step 130' INT
trap 'end_step 129' HUP
step() {
    local name=$1 limit=$(( $2 * timeout_scale )); shift 2
    local log=$work/logs/$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '_').log
    local t0 rc status secs
    t0=$(date +%s.%N)
    echo "\$ $*" >"$log"
    # replaced when the step ends; a call killed first (gpu_lease.sh's budget) leaves this in the report
    record "$name" "FAIL(cut off: the call ended first)" 0.0 "$log"
    # in the background with the caller's stdin (a here-document), waited for, so that end_step can end it
    if declare -F "$1" >/dev/null; then  # one of this script's functions (exported below): through bash
        timeout --kill-after=10 "$limit" bash -c '"$@"' "$1" "$@" 0<&0 >>"$log" 2>&1 &
    else
        timeout --kill-after=10 "$limit" "$@" 0<&0 >>"$log" 2>&1 &
    fi
    step_pid=$!
    wait "$step_pid"
    rc=$?
    step_pid=""
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ $rc -eq 0 ]; then status=PASS
    elif [ $rc -eq 77 ]; then status=SKIPPED
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status="FAIL(timeout ${limit}s)"
    else status="FAIL(rc=$rc)"; fi
    [ "$status" = PASS ] || [ "$status" = SKIPPED ] || call_failed=1
    if [ "$status" != PASS ] && [ "$status" != SKIPPED ]; then tail -n 5 "$log" | sed 's/^/    | /'; fi
    record "$name" "$status" "$secs" "$log"
    printf '%-44s %-20s %7s s\n' "$name" "$status" "$secs"
    return $rc
}

# fail_step NAME WHY: a step that could not even start.
fail_step() {
    local log=$work/logs/$(printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_').log
    echo "$2" >"$log"
    call_failed=1
    record "$1" "FAIL($2)" 0.0 "$log"
    printf '%-44s %-20s\n' "$1" "FAIL($2)"
}

# skip_step NAME WHY: a step that cannot mean anything in this mode (SKIPPED: not run, not passed).
skip_step() {
    local log=$work/logs/$(printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_').log
    echo "SKIPPED: $2" >"$log"
    record "$1" SKIPPED 0.0 "$log"
    printf '%-44s %-20s (%s)\n' "$1" SKIPPED "$2"
}

# Emulated runs: the thread schedules each launch runs under (two, compared bit for bit = the race
# check) and the lab's --check arguments; the whole-backend tests run hundreds of launches of kernels
# the labs already race-check, so one schedule (Makefile: EMU_SCHEDULES, EMU_BACKEND_SCHEDULES); the
# one kernel of their own, attention_probs, has no shared memory and no barrier. The attention lab's
# --sweep (attention_ls_sweep) too: it checks the tile and window edges, which no schedule changes,
# on kernels whose races --check --small and the sanitize stage look for under two schedules.
emu_schedules() {
    case $1 in test_cuda_model|test_cuda_generate|test_cuda_attention_probs|attention_ls_sweep|latency_targets)
            echo "${EMU_BACKEND_SCHEDULES:-greedy-forward}" ;;
        *) echo "${EMU_SCHEDULES:-greedy-forward,greedy-reverse}" ;; esac
}
run_bin() {  # run_bin NAME BINARY ARGS...: the binary, under the emulation's settings when emulating
    local name=$1; shift
    if [ "$emulate" = 1 ]; then env LLMC_EMU_SCHEDULES="$(emu_schedules "$name")" UBSAN_OPTIONS=print_stacktrace=1 "$@"
    else "$@"; fi
}
check_args() {  # the lab's --check arguments (the emulated attention lab: its --small matrix)
    if [ "$emulate" = 1 ] && [ "$1" = attention_ls ]; then echo "--check --small"; else echo "--check"; fi
}

test_args() {  # test_args NAME TAG: the test's arguments (emulated: the BF16 test_cuda_model's
    # EMU_BF16_MODEL_CASES; test_attention_decode's --edges, the long shapes' edge positions only)
    [ "$emulate" = 1 ] || return 0
    if [ "$1" = test_cuda_model ] && [ -z "$2" ] && [ -n "${EMU_BF16_MODEL_CASES:-}" ]; then echo "$EMU_BF16_MODEL_CASES"; fi
    if [ "$1" = test_attention_decode ]; then echo "--edges"; fi
}

lab_names() { for f in dev/cuda/*.cu; do [ -e "$f" ] && basename "$f" .cu; done; }
test_names() { for f in test/gpu/*.cu; do [ -e "$f" ] && basename "$f" .cu; done; }

# $bf16_dir/sources.digest: scripts/build_digest.sh of the tree the BF16 programs were built from (or
# installed for), and the architecture, written when that build passed; $bf16_dir/sources.list: that
# tree's files and their hashes. A later call on the same machine (ensure_bf16) uses the programs only
# while the digest still matches; a build first touches every source whose content differs from the
# list, so that make sees the change whatever time the copy gave the file. (A machine whose last build
# was not this script's, e.g. exp_pg19.sh's, has no list: make then judges by the files' times alone.)
bf16_digest=""
tree_digest() {  # sets bf16_digest, once, and writes $work/sources.now: the tree as this call found it
    [ -n "$bf16_digest" ] && return 0
    if scripts/build_digest.sh --list . >"$work/sources.now"; then
        bf16_digest="$(sha256sum <"$work/sources.now" | cut -c1-16) sm$arch"
    else bf16_digest=""; rm -f "$work/sources.now"; fi
}
touch_changed_sources() {  # the sources whose content differs from the last passed build's (make decides by times)
    [ -f "$bf16_dir/sources.list" ] && [ -f "$work/sources.now" ] || return 0
    local f n=0
    while IFS= read -r f; do
        [ -f "$f" ] && touch "$f" && n=$((n + 1))
    done < <(LC_ALL=C comm -13 <(LC_ALL=C sort "$bf16_dir/sources.list") <(LC_ALL=C sort "$work/sources.now") | cut -c67-)
    [ $n -eq 0 ] || echo "gpu_check: $n source file(s) changed since the last build here: touched, so that make rebuilds what uses them" >&2
}
build_bf16() {  # the BF16 build (all GPU targets and the trainer); -k: one broken target spoils no other
    bf16_build_tried=1
    tree_digest
    rm -f "$bf16_dir/sources.digest"
    local ok=1
    if [ "$emulate" = 1 ]; then touch_changed_sources
        step "build:bf16-emulated" 540 make -j"$(nproc)" -k PRECISION=BF16 EXTRA_INCLUDE="$extra" emu || ok=0
    elif [ -n "${GPU_CHECK_PREBUILT:-}" ] && step "build:bf16-sm$arch-prebuilt" 60 scripts/use_prebuilt.sh "$GPU_CHECK_PREBUILT" "$arch" lease \
        && [ -x "$trainer" ] && [ -d "$bf16_dir/dev" ]; then :  # installed: SKIPPED (77) falls through to the build
    else rm -f build/prebuilt.installed  # the programs are this build's from here on
        touch_changed_sources
        step "build:bf16-sm$arch" 540 make -j"$(nproc)" -k HOST_BUILD=0 CUDA_ARCH="$arch" PRECISION=BF16 EXTRA_INCLUDE="$extra" \
            gpu-targets || ok=0; fi
    if [ $ok = 1 ] && [ -n "$bf16_digest" ]; then
        mkdir -p "$bf16_dir" && cp "$work/sources.now" "$bf16_dir/sources.list" && echo "$bf16_digest" >"$bf16_dir/sources.digest"
    fi
    [ $ok = 1 ] || drop_stale_programs
}
# After a failed build (make -k builds what it can): a program whose target is still out of date is an
# earlier build's (a warm machine's), not this tree's; removed, so that its tests say "not built"
# instead of passing on old code.
drop_stale_programs() {
    local p vars
    if [ "$emulate" = 1 ]; then vars=(PRECISION=BF16 EXTRA_INCLUDE="$extra")
    else vars=(HOST_BUILD=0 CUDA_ARCH="$arch" PRECISION=BF16 EXTRA_INCLUDE="$extra"); fi
    for p in "$trainer" "$generator" "$bf16_dir"/dev/* "$bf16_dir"/test_gpu/*; do
        [ -f "$p" ] && [ -x "$p" ] || continue
        if ! make -q "${vars[@]}" "${p#./}" >/dev/null 2>&1; then
            echo "gpu_check: $p is not this tree's build (its target failed): removed" >&2
            rm -f "$p"
        fi
    done
}
ensure_bf16() {  # later stages: build first, once per call, unless this call or an earlier one built this tree's sources
    [ $bf16_build_tried -eq 0 ] || return 0
    tree_digest
    if [ -n "$bf16_digest" ] && [ -x "$trainer" ] && [ -d "$bf16_dir/dev" ] &&
        [ "$(cat "$bf16_dir/sources.digest" 2>/dev/null)" = "$bf16_digest" ]; then return 0; fi
    build_bf16
}

run_tests() {  # run_tests BUILD_DIR TAG: every GPU test and every lab --check of one build
    local dir=$1 tag=$2 n
    for n in $(test_names); do
        # shellcheck disable=SC2046  # the arguments are a list (a case filter has no spaces)
        if [ -x "$dir/test_gpu/$n" ]; then step "test$tag:$n" 600 run_bin "$n" "$dir/test_gpu/$n" $(test_args "$n" "$tag")
        else fail_step "test$tag:$n" "not built"; fi
    done
    for n in $(lab_names); do
        # shellcheck disable=SC2046  # the arguments are a list
        if [ -x "$dir/dev/$n" ]; then step "check$tag:$n" 600 run_bin "$n" "$dir/dev/$n" $(check_args "$n")
        else fail_step "check$tag:$n" "not built"; fi
    done
    # the algorithm lab's self-test: its check must catch a sampled output four bounds off in every
    # built-in problem, and nothing else may fail (the lab's own verdict, exit 0)
    if [ -x "$dir/dev/matmul_algos" ]; then
        step "check$tag:matmul_algos:corrupt" 120 run_bin matmul_algos "$dir/dev/matmul_algos" --check --corrupt
    fi
    # the emulator's cuBLASLt cases against the real library, judged by the same checks (BF16 build's stage)
    if [ -z "$tag" ]; then
        if [ "$emulate" = 1 ]; then skip_step "test:cublaslt-real" "the emulated cuBLASLt is tested by make test"
        else step "test:cublaslt-real" 300 cublaslt_real; fi
    fi
    # the attention lab's window / length sweep around the tile edges (the FA2-class forward and backward, BF16 build)
    if [ -z "$tag" ]; then
        if [ -x "$dir/dev/attention_ls" ]; then step "sweep:attention_ls" 600 run_bin attention_ls_sweep "$dir/dev/attention_ls" --sweep
        else fail_step "sweep:attention_ls" "not built"; fi
    fi
}

# The emulator's cuBLASLt test cases (dev/emu/tests/cublaslt_cases.cu) built against the real
# library and judged by test/test_emulation_cublaslt.py's documentation-derived checks: the first GPU
# run measures the emulation's reading of the documentation against cuBLASLt itself.
cublaslt_real() {  # SKIPPED (77) where numpy or pytest is missing: the GPU tests do not wait on it
    if ! "$PY" -c 'import numpy, pytest' 2>/dev/null; then echo "SKIPPED: $PY lacks numpy or pytest"; return 77; fi
    nvcc -O2 -std=c++17 -x cu dev/emu/tests/cublaslt_cases.cu -o "$work/cublaslt_cases_real" -lcublasLt &&
        LLMC_CUBLASLT_CASES="$work/cublaslt_cases_real" "$PY" -m pytest -q -p no:cacheprovider test/test_emulation_cublaslt.py
}

fp32_make() {  # fp32_make TARGETS...: the FP32 build of these targets (build/fp32, or build/emu-fp32 emulated)
    if [ "$emulate" = 1 ]; then make -j"$(nproc)" -k PRECISION=FP32 EXTRA_INCLUDE="$extra" "$@"
    else make -j"$(nproc)" -k BUILD=build/fp32 CUDA_ARCH="$arch" PRECISION=FP32 EXTRA_INCLUDE="$extra" "$@"; fi
}

# Emulated, EMU_FP32_MODEL_CASES (test_cuda_model's filter: comma-separated parts of case names) picks
# the FP32 cases; unset or empty: all (make test-emu sets a subset: Makefile, EMU_FP32_MODEL_CASES).
stage_first() {  # the FP32 model test alone, launch-blocking: the first thing a GPU ever runs
    local cases=()
    [[ $emulate == 1 && -n ${EMU_FP32_MODEL_CASES:-} ]] && cases=("$EMU_FP32_MODEL_CASES")
    step "build:fp32-test_cuda_model" 300 fp32_make "$fp32_dir/test_gpu/test_cuda_model" || return
    step "first:fp32-test_cuda_model-blocking" 300 run_bin test_cuda_model env CUDA_LAUNCH_BLOCKING=1 \
        "$fp32_dir/test_gpu/test_cuda_model" "${cases[@]}"
}
stage_build() { build_bf16; }
stage_test() { ensure_bf16; run_tests "$bf16_dir" ""; }

stage_sanitize() {  # memcheck + racecheck of the attention kernels on small ragged shapes (one rep, no timing)
    ensure_bf16
    local tool shape i
    # the second with the near/far statistics (N 90: all-near and cut tiles, soft-cap); the fourth
    # forces the split tile loops (--split 1: every global head's chunks merged by the last to
    # arrive), which the shapes above never take, at hd 64 (the dQ kernel's 48 KiB of dynamic memory);
    # the fifth forces the backward's runs of outer tiles (--run 2; chosen only at batch sizes that fill
    # a GPU), with P = 1: a key tile's refill of sK, sV follows its fragment loads in the same step
    local shapes=("-B 1 -T 100 --nh 2 --hd 32 -G 1 -P 8" "-B 1 -T 130 --nh 2 --hd 64 -G 1 -P 70 --softcap 5 --near 90"
                  "-B 1 -T 67 --nh 1 --hd 128 -G 1 -P 67" "-B 1 -T 300 --nh 2 --hd 64 -G 2 -P 8 --split 1"
                  "-B 1 -T 300 --nh 2 --hd 32 -G 0 -P 1 --run 2")
    if [ "$emulate" = 1 ]; then  # the emulation's own memcheck (ASan + UBSan) and racecheck (two schedules)
        for i in "${!shapes[@]}"; do
            # shellcheck disable=SC2086  # the shape is a list of flags
            step "sanitize:emu-asan-race:attention_ls:$i" 300 run_bin attention_ls "$bf16_dir/dev/attention_ls" \
                --kernel production --check-one ${shapes[$i]}
        done
        return
    fi
    if ! command -v compute-sanitizer >/dev/null; then fail_step "sanitize" "compute-sanitizer not found"; return; fi
    for tool in memcheck racecheck; do
        for i in "${!shapes[@]}"; do
            # shellcheck disable=SC2086  # the shape is a list of flags
            step "sanitize:$tool:attention_ls:$i" 300 compute-sanitizer --tool "$tool" --error-exitcode 3 \
                build/dev/attention_ls --kernel production --reps 1 ${shapes[$i]}
        done
    done
}

stage_fp32() {
    local targets=() n
    for n in $(lab_names); do targets+=("$fp32_dir/dev/$n"); done
    for n in $(test_names); do targets+=("$fp32_dir/test_gpu/$n"); done
    step "build:fp32-$([ "$emulate" = 1 ] && echo emulated || echo "sm$arch")" 540 fp32_make "${targets[@]}"
    run_tests "$fp32_dir" "-fp32"
}

stage_labs() {
    local n
    if [ "$emulate" = 1 ]; then
        for n in $(lab_names) attention_ls:batch; do skip_step "lab:$n" "emulated: a timing table would time the emulator, not a GPU"; done
        return
    fi
    ensure_bf16
    for n in $(lab_names); do
        if [ "$n" = matmul_algos ]; then  # it times a profile's problems: the profile stage's step
            skip_step "lab:$n" "times a training step's GEMM problems: profile:matmul_algos"
        elif [ -x "build/dev/$n" ]; then step "lab:$n" 300 "build/dev/$n"
        else fail_step "lab:$n" "not built"; fi
    done
    if [ -x build/dev/attention_ls ]; then step "lab:attention_ls:batch" 300 attention_batch_scaling
    else fail_step "lab:attention_ls:batch" "not built"; fi
}

attention_batch_scaling() {  # one JSON line per batch size: LS (G 1) and all-global, forward and f+b
    local b
    for b in 1 2 4 8 16 32 64; do build/dev/attention_ls --json -B "$b" -T 2048 --nh 6 --hd 32 -G 1 -P 50 || return 1; done
    # the same without the split tile loops (chunks of 1000 tiles: one per loop), where the split matters
    # (since 5fcb3f4 both walk the backward's runs at B 8 and 16; the --run 1 rows below: the split, no runs)
    for b in 1 4 8 16; do
        build/dev/attention_ls --json -B "$b" -T 2048 --nh 6 --hd 32 -G 1 -P 50 --split 1000 || return 1
    done
    # the backward without its runs of outer tiles (--run 1; docs/attention_kernel.md, "Runs of outer
    # tiles"), where they are taken: the paper shape at B 8 (runs of 2) and 16 (runs of 4), and d12's LS
    # shape (12 heads of 64, G 1, P 64) at B 16 with and without them
    for b in 8 16; do
        build/dev/attention_ls --json -B "$b" -T 2048 --nh 6 --hd 32 -G 1 -P 50 --run 1 || return 1
    done
    build/dev/attention_ls --json -B 16 -T 1024 --nh 12 --hd 64 -G 1 -P 64 || return 1
    build/dev/attention_ls --json -B 16 -T 1024 --nh 12 --hd 64 -G 1 -P 64 --run 1 || return 1
    # the backward's two designs (docs/attention_kernel.md, "Why dQ has a pass of its own"): production
    # (two-pass) and the onepass candidate at the paper shape and at GPT-2 124M's (12 heads of 64)
    local k
    for k in production onepass; do
        build/dev/attention_ls --json --kernel "$k" -B 16 -T 2048 --nh 6 --hd 32 -G 1 -P 50 || return 1
        build/dev/attention_ls --json --kernel "$k" -B 16 -T 1024 --nh 12 --hd 64 -G 12 -P 1024 || return 1
    done
}

stage_bench() {  # peer benchmarks; the end-to-end one is its own stage, torch_fast_model.py is a module
    local f n
    [ "$emulate" = 1 ] || ensure_bf16
    for f in dev/bench/*.py; do
        [ -e "$f" ] || continue
        n=$(basename "$f" .py)
        case $n in train_vs_torch|torch_fast_model|cpu_vs_torch|test_*|_*) continue ;; esac  # cpu_vs_torch: CPU only
        if [ "$emulate" = 1 ]; then skip_step "bench:$n" "emulated: peer benchmarks need torch with CUDA and a GPU"; continue; fi
        mkdir -p "$work/bench/$n"
        step "bench:$n" 480 "$PY" "$f" --out "$work/bench/$n"
    done
}

# ensure_train_data SYN_ARGS...: the synthetic language of the train and profile stages in $work/train/data
# (made once per set of arguments).
ensure_train_data() {
    local d=$work/train
    if [ ! -f "$d/data/meta.json" ] || [ "$(cat "$d/data/.args" 2>/dev/null)" != "$*" ]; then
        rm -rf "$d/data"
        step "train:data" 300 "$PY" data/prepare.py --dataset synthetic --out "$d/data" "$@" \
            --workers "$(nproc)" || return
        echo "$*" >"$d/data/.args"
    fi
}

# The per-kernel profile of the training step (--profile-steps, docs/training.md "Profiling the step"):
# the paper's shape at B 8 (T 2048, V 10000, as timed at fa663e0), the paper code's model at B 16 and the
# GPT-2-124M-shaped d12 (LS G 1 P 64, B 16, T 1024, V 50257), 8 profiled steps after 2 warm-up steps each, on the train stage's synthetic data;
# each table in the step's log with a line per distinct matmul naming the algorithm cuBLASLt picked
# (LLMC_CUBLASLT_ALGOS=1), its profile.json in bench/profile/ (report.json). Emulated: one small
# model, one profiled step (launch counts, no times). The shapes' steps issued kernel by kernel
# (--cuda-graph 0): the calibrated model's launch gaps are those of such steps (the c276bf2 profile's);
# then paper-b16 again as the trainer's default issues it, the step graph (--cuda-graph 1: its two
# parts, the host grouping the tokens between their launches), whose idle time no prediction models
# (emulated: the small model both ways); last, paper-b16 with its heads all local (--global-heads 0) and
# all global (6: plain MHSA), whose attention kernels weigh the model's block set-up and whole tiles
# differently (dev/bench/roofline.py attn_attribution; scripts/lease_digest.py reads the three together).
# Then generation with the paper-b16 case's model (its last checkpoint; emulated: the small one's):
# generate_gpt2_ls --bench --bench-profile, the decode steps as graphs, B 4, prompt 2048, 32 decode
# steps at context 2048: its timings and the per-kernel profiles of a prefill and of decode steps in
# bench/generate/<case>.json, the tables in the step's log (docs/generation.md). Last, issue 52's
# inference targets (LS's prefill and decode against MHSA's at 2K-16K), ours only.
stage_profile() {
    ensure_bf16
    # first (a few seconds; it needs no data or checkpoint): the whole-K GEMM candidate with the GELU in
    # its epilogue (dev/cuda/matmul_candidates/, not wired into the trainer) against cuBLASLt + the
    # production GELU kernels at the paper model's MLP, so that the call this part runs in decides
    # whether it moves into llmc/cuda/ (its --check runs in the test stage; the labs stage times it
    # again with every lab, without --json): bench/lab/matmul_small_k.json
    mkdir -p "$work/bench/lab"
    rm -f "$work/bench/lab/matmul_small_k.json" "$work/bench/lab/matmul_algos.json"  # never an earlier call's
    if [ "$emulate" = 1 ]; then skip_step "profile:matmul_small_k" "emulated: a timing table would time the emulator, not a GPU"
    elif [ -x build/dev/matmul_small_k ]; then
        step "profile:matmul_small_k" 120 build/dev/matmul_small_k --json "$work/bench/lab/matmul_small_k.json"
    else fail_step "profile:matmul_small_k" "not built"; fi
    local syn=(--syn-length 3000000)
    # ls-small-b8: the shape timed at fa663e0 (biases, tanh GELU, tied); paper-b16: the paper code's model
    # (configs/paper_pg19.toml: no biases, erf GELU (its own launch), untied) at B 16
    local cases=("ls-small-b8|-e ls-small --vocab 10000 -b 8 -t 2048 --cuda-graph 0"
                 "paper-b16|-e ls-small --vocab 10000 --bias 0 --gelu erf --untie-embeddings -b 16 -t 2048 --cuda-graph 0"
                 "d12-b16|-e d12 --window 64 --vocab 50257 -b 16 -t 1024 --cuda-graph 0"
                 "paper-b16-graph|-e ls-small --vocab 10000 --bias 0 --gelu erf --untie-embeddings -b 16 -t 2048 --cuda-graph 1"
                 "paper-b16-local|-e ls-small --vocab 10000 --bias 0 --gelu erf --untie-embeddings --global-heads 0 -b 16 -t 2048 --cuda-graph 0"
                 "paper-b16-mhsa|-e ls-small --vocab 10000 --bias 0 --gelu erf --untie-embeddings --global-heads 6 -b 16 -t 2048 --cuda-graph 0")
    local steps=8
    if [ "$emulate" = 1 ]; then
        syn=(--syn-length 100000 --syn-doc-len 1024 --syn-vocab 64 --syn-order 1 --syn-strength 5
             --syn-copy-min-dist 8 --syn-copy-max-dist 48)
        cases=("small-emulated|-e ls-small --layers 2 --channels 64 --heads 2 --global-heads 1 --window 16 --max-seq-len 64 -b 4 -t 64 --cuda-graph 0"
               "small-emulated-graph|-e ls-small --layers 2 --channels 64 --heads 2 --global-heads 1 --window 16 --max-seq-len 64 -b 4 -t 64 --cuda-graph 1")
        steps=1
    fi
    if ! ensure_train_data "${syn[@]}"; then fail_step "profile:matmul_algos" "no training data"; return; fi
    mkdir -p "$work/bench/profile"
    local c name args
    for c in "${cases[@]}"; do
        name=${c%%|*}
        read -ra args <<<"${c#*|}"
        rm -rf "$work/profile/$name"
        rm -f "$work/bench/profile/$name.json"  # never an earlier call's profile in this call's report
        step "profile:$name" 240 env LLMC_CUBLASLT_ALGOS=1 "$trainer" --device cuda "${args[@]}" -x $((steps + 2)) \
            --profile-steps "$steps" -v 0 -s 0 -i "$work/train/data/train_*.bin" -o "$work/profile/$name" || continue
        cp "$work/profile/$name/profile.json" "$work/bench/profile/$name.json" ||
            fail_step "profile:$name:json" "the run passed but wrote no profile.json"
    done
    local gen=paper-b16 gen_args=(--bench-batch 4 --bench-prompt 2048 --bench-contexts 2048 --bench-steps 32
                                  --bench-repeats 3 --cuda-graph 1)
    if [ "$emulate" = 1 ]; then
        gen=small-emulated gen_args=(--bench-batch 2 --bench-prompt 32 --bench-contexts 64 --bench-steps 4
                                     --bench-repeats 1 --cuda-graph 1)
    fi
    mkdir -p "$work/bench/generate"
    rm -f "$work/bench/generate/$gen.json"
    local ckpts=("$work/profile/$gen"/model_*.bin)
    if [ ! -f "${ckpts[-1]}" ]; then
        fail_step "profile:$gen:generate" "no checkpoint of the profile:$gen run"
        fail_step "profile:matmul_algos" "not run: the stage ended at profile:$gen:generate"
        return
    fi
    step "profile:$gen:generate" 120 bench_generate "${ckpts[-1]}" "$work/bench/generate/$gen.json" "${gen_args[@]}" \
        --pdl 0
    # the same with programmatic dependent launch (--pdl 1; on a GPU at cb93781 0.266 against 0.315 ms a
    # decoded token): its prefill and decode timings against the line above (its --pdl 0 named, not left
    # to --pdl auto), without a profile (a kernel's span would include its wait for the one ahead; the
    # generator refuses --bench-profile with --pdl 1): bench/generate/<case>-pdl.json
    rm -f "$work/bench/generate/$gen-pdl.json"
    step "profile:$gen:generate-pdl" 120 bench_generate_timing "${ckpts[-1]}" "$work/bench/generate/$gen-pdl.json" \
        "${gen_args[@]}" --pdl 1
    # the fused decode kernels (--fused-decode 1, docs/generation.md "Fused decode kernels"): the profile of
    # a decode step with them (its kernels against the model's prediction), and their timing with
    # programmatic launch against the -pdl line: bench/generate/<case>-fused.json, <case>-fused-pdl.json
    rm -f "$work/bench/generate/$gen-fused.json" "$work/bench/generate/$gen-fused-pdl.json"
    step "profile:$gen:generate-fused" 120 bench_generate "${ckpts[-1]}" "$work/bench/generate/$gen-fused.json" \
        "${gen_args[@]}" --pdl 0 --fused-decode 1
    step "profile:$gen:generate-fused-pdl" 120 bench_generate_timing "${ckpts[-1]}" \
        "$work/bench/generate/$gen-fused-pdl.json" "${gen_args[@]}" --pdl 1 --fused-decode 1
    # Issue 52's inference targets, ours only (dev/bench/generate_latency.py without torch: the bench
    # stage's full run adds torch and ls-p100), each decode step kernel by kernel without programmatic
    # launch (side ours: --cuda-graph 0 --pdl 0, as at cb93781) and with the generator's defaults (side
    # graph: --cuda-graph 1 --pdl auto): the latency benchmark's MHSA and LS P 50 models, prefill
    # at B 4 x 2048..16384 and decode at context 16384; its table in the step's log, its JSON in
    # bench/latency_targets/ (report.json). Emulated: B 1, a prompt of 16, decode at 20, the models'
    # position embedding 64 rows and their vocabulary 512 (the full model's 16M parameters were most of
    # this step's emulated time; P 50 stays below max_seq_len)
    local lat_args=(--contexts 16384 --steps 16 --repeats 3)
    [ "$emulate" = 1 ] && lat_args=(--batch 1 --prompts 16 --contexts 20 --steps 2 --repeats 1 --max-seq-len 64 --vocab 512)
    rm -f "$work/bench/latency_targets/generate_latency.json"
    step "profile:latency-targets" 180 run_bin latency_targets "$PY" dev/bench/generate_latency.py \
        --out "$work/bench/latency_targets" --binary "$generator" --skip-torch --ours-sides ours,graph,fused --variants mhsa,ls-p50 \
        "${lat_args[@]}"
    # last (tens of seconds: its inputs at the LM head's shapes): each GEMM problem of paper-b16's step
    # (emulated: the first case's) with each of cuBLASLt's first 8 heuristic answers,
    # each answer checked against a double product, then timed (dev/cuda/matmul_algos.cu): what the
    # heuristic's first answer, which the trainer takes, leaves; bench/lab/matmul_algos.json. Emulated:
    # the small case's problems checked (the emulated cuBLASLt offers one answer), no timing.
    local algo_case=paper-b16
    [ "$emulate" = 1 ] && algo_case=${cases[0]%%|*}
    if [ ! -f "$work/bench/profile/$algo_case.json" ]; then fail_step "profile:matmul_algos" "no profile of $algo_case"
    elif [ ! -x "$bf16_dir/dev/matmul_algos" ]; then fail_step "profile:matmul_algos" "not built"
    elif [ "$emulate" = 1 ]; then
        step "profile:matmul_algos" 300 run_bin matmul_algos "$bf16_dir/dev/matmul_algos" --check \
            --problems "$work/bench/profile/$algo_case.json"
    else
        step "profile:matmul_algos" 180 "$bf16_dir/dev/matmul_algos" --problems "$work/bench/profile/$algo_case.json" \
            --reps 20 --json "$work/bench/lab/matmul_algos.json"
    fi
}

# bench_generate CKPT JSON ARGS...: generate_gpt2_ls --bench --bench-profile on CKPT (each matmul's
# algorithm logged, LLMC_CUBLASLT_ALGOS=1), its JSON object into JSON (the profiles' tables and the
# algorithms go to stderr: the step's log). Fails unless both profiles list our kernels and cuBLASLt's
# calls, timed on a GPU (a capture that missed a graph's kernels would otherwise pass); with
# --fused-decode 1, the decode profile its decode_linear kernels and the one-launch attention, and no
# cuBLASLt call or combine kernel, instead.
bench_generate() {
    local ckpt=$1 json=$2
    shift 2
    LLMC_CUBLASLT_ALGOS=1 "$generator" --device cuda -e "$ckpt" --bench --bench-profile "$@" >"$json.part" || return
    "$PY" - "$json.part" "$emulate" <<'EOF' || return
import json, sys
j, emulated = json.load(open(sys.argv[1])), sys.argv[2] == "1"
if j.get("pdl") != 0:  # the -pdl line's baseline: its timings without programmatic launch
    sys.exit(f"the profiled bench records pdl = {j.get('pdl')}, not 0")
prof, fused = j["profile"], j.get("fused_decode") == 1
for what in ("prefill", "decode"):
    t = prof[what]
    ours = [k for k in t["kernels"] if k["kernel"].startswith("llmc::")]
    if what == "decode" and fused:
        names = [k["kernel"] for k in ours]
        if not (any("decode_linear" in n for n in names) and any("attention_decode_one_launch" in n for n in names)
                and not any("attention_decode_combine" in n for n in names) and t["gemms"]["calls_per_step"] == 0):
            sys.exit("the fused decode profile lacks decode_linear or the one-launch attention, or has the combine "
                     f"kernel or cuBLASLt calls: {json.dumps(t)[:400]}")
        continue
    if not (ours and t["gemms"]["calls_per_step"] > 0 and (emulated or t["gemms"].get("us_per_step", 0) > 0)):
        sys.exit(f"the {what} profile lacks our kernels or cuBLASLt's: {json.dumps(t)[:400]}")
print("prefill and decode profiles: our kernels and cuBLASLt's present" +
      ("; the fused decode's decode_linear and no cuBLASLt call" if fused else ""))
EOF
    mv "$json.part" "$json"
}

# compare_runs A B STEPS A_WORDS B_WORDS BOUND [KEY=VALUE]: two trainer runs' metrics.jsonl (A, B) must
# hold STEPS steps each with the same loss, gradient norm and max attention logit, bit for bit (and,
# given KEY=VALUE, B's config.json must record the setting: a flag B did not apply would otherwise
# compare a run with itself); prints both medians after the warm-up steps (a step graph is captured at
# the second step and replayed from the third) and what B saves per step against BOUND (emulated: the
# emulator's times, not a GPU's).
compare_runs() {
    "$PY" - "$@" <<'EOF'
import json, os, sys
a_file, b_file, want, a_words, b_words, bound = sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:7]
if len(sys.argv) > 7:
    key, value = sys.argv[7].split("=", 1)
    got = json.load(open(os.path.join(os.path.dirname(b_file), "config.json")))["train"].get(key)
    if str(got) != value:
        sys.exit(f"{b_file}: config.json records {key} = {got}, not {value}: FAIL")
runs = [[r for r in map(json.loads, filter(str.strip, open(f))) if "loss" in r] for f in (a_file, b_file)]
same = len(runs[0]) == len(runs[1]) == want and all(
    (a["step"], a["loss"], a["grad_norm"], a["max_attn_logit"]) ==
    (b["step"], b["loss"], b["grad_norm"], b["max_attn_logit"]) for a, b in zip(*runs))
warm = min(5, want // 2)
med = [sorted(r["ms"] for r in run[warm:])[len(run[warm:]) // 2] if len(run) > warm else float("nan") for run in runs]
where = "emulated: the emulator's times, not a GPU's" if os.environ.get("emulate") == "1" else bound
print(f"{len(runs[0])} and {len(runs[1])} steps: median {med[0]:.2f} ms/step {a_words}, {med[1]:.2f} {b_words}: "
      f"saves {med[0] - med[1]:.2f} ms/step ({where}); losses, norms, max logits "
      f"{'bit-identical' if same else 'DIFFER'}: {'PASS' if same else 'FAIL'}")
sys.exit(0 if same else 1)
EOF
}

# bench_generate_timing CKPT JSON ARGS...: generate_gpt2_ls --bench without a profile, its JSON object
# into JSON; fails unless the JSON records the prefill and decode timings and every flag's value it is
# given as "--cuda-graph N" / "--pdl N" / "--fused-decode N" (a flag the bench did not apply would
# otherwise time the default).
bench_generate_timing() {
    local ckpt=$1 json=$2
    shift 2
    "$generator" --device cuda -e "$ckpt" --bench "$@" >"$json.part" || return
    "$PY" - "$json.part" "$@" <<'EOF' || return
import json, sys
j, args = json.load(open(sys.argv[1])), sys.argv[2:]
for flag, key in (("--cuda-graph", "cuda_graph"), ("--pdl", "pdl"), ("--fused-decode", "fused_decode")):
    if flag in args and j.get(key) != int(args[args.index(flag) + 1]):
        sys.exit(f"the bench records {key} = {j.get(key)}, not the {flag} it was given")
if not (j.get("prefill") and j.get("decode")):
    sys.exit("the bench JSON lacks its prefill or decode timings")
print("prefill and decode timed; the bench records " +
      ", ".join(f"{k} = {j.get(k)}" for k in ("cuda_graph", "pdl", "fused_decode")))
EOF
    mv "$json.part" "$json"
}

stage_train() {  # the paper model on the synthetic language (dense local + sparse long-range), T=2048
    ensure_bf16
    local d=$work/train
    rm -rf "$d/out"
    # emulated: a small model on a small synthetic language (64 tokens, order 1, copies 8-48 back) that
    # it learns within 12 steps; on a GPU the paper model at T 2048 (docs/results/README.md)
    local syn=(--syn-length 3000000) run=(-e ls-small -b 8 -t 2048 -x 300 -u 30 -l 1e-3 -v 100 -m 4 --near 25)
    local name=ls-small-gpu
    if [ "$emulate" = 1 ]; then
        syn=(--syn-length 100000 --syn-doc-len 1024 --syn-vocab 64 --syn-order 1 --syn-strength 5
             --syn-copy-min-dist 8 --syn-copy-max-dist 48)
        run=(-e ls-small --layers 2 --channels 64 --heads 2 --global-heads 1 --window 16 --max-seq-len 64
             -b 4 -t 64 -x 12 -u 2 -l 1e-2 -v 6 -m 4 --near 8)
        name=small-emulated
    fi
    ensure_train_data "${syn[@]}" || return
    step "train:$name" 420 "$trainer" --device cuda "${run[@]}" \
        -s 0 -i "$d/data/train_*.bin" -j "$d/data/val_*.bin" -o "$d/out" || return
    # the run must have learned: finite losses, validation loss down by >= 0.5 nats from the untrained model
    local steps
    steps=$(printf '%s\n' "${run[@]}" | awk 'p { print; exit } $0 == "-x" { p = 1 }')
    step "train:loss-falls" 60 "$PY" - "$d/out/metrics.jsonl" "$d/data/meta.json" "$steps" <<'EOF'
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
floor = json.load(open(sys.argv[2]))["synthetic"]["entropy_floor_nats"]["val"]
steps = [r for r in recs if "loss" in r]
val = [(r["step"], r["val_loss"]) for r in recs if "val_loss" in r]
ms = sorted(r["ms"] for r in steps[10:])
print(f"steps {len(steps)}, train loss {steps[0]['loss']} -> {steps[-1]['loss']}, val {val}, "
      f"entropy floor {floor:.3f}, median {ms[len(ms) // 2]:.1f} ms/step, "
      f"{steps[-1]['tokens_per_s']:.0f} tok/s at the last step")
ok = len(steps) == int(sys.argv[3]) and all(r["loss"] is not None and math.isfinite(r["loss"]) for r in steps) \
    and len(val) >= 2 and val[-1][1] is not None and val[-1][1] < val[0][1] - 0.5
print("PASS" if ok else f"FAIL: expected {sys.argv[3]} finite steps and a validation loss >= 0.5 nats below step 0's")
sys.exit(0 if ok else 1)
EOF
    # the near/far statistics the device computed (--near): every step, every head, consistent
    step "train:near-far" 60 "$PY" - "$d/out/logit_stats.jsonl" "$steps" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = []
for r in recs:
    for a in r["attn"]:
        if not all(k in a for k in ("near_mass", "near_max", "far_max")):
            bad.append((r["step"], a["layer"], a["head"], "missing"))
            continue
        mass, top = a["near_mass"], max([v for v in (a["near_max"], a["far_max"]) if v is not None] or [None])
        if mass is None or top is None or not (0.0 <= mass <= 1.0 + 1e-6 and top == a["max"]):
            bad.append((r["step"], a["layer"], a["head"], a["near_mass"], a["near_max"], a["far_max"], a["max"]))
last = recs[-1]["attn"] if recs else []
print(f"{len(recs)} records, near {recs[-1].get('near') if recs else None}; last step's near mass per head: "
      + " ".join(f"{a['layer']}:{a['head']}={a.get('near_mass', float('nan')):.3f}" for a in last))
ok = len(recs) == int(sys.argv[2]) and not bad
print("PASS" if ok else f"FAIL: {len(recs)} records (want {sys.argv[2]}), bad entries {bad[:5]}")
sys.exit(0 if ok else 1)
EOF
    # the trained model's attention maps from the device (--dump-attention on CUDA), the first (local)
    # and the last (global) head of layer 0: finite, zero outside the window, rows summing to 1
    local t nh maps=$d/maps
    t=$(printf '%s\n' "${run[@]}" | awk 'p { print; exit } $0 == "-t" { p = 1 }')
    nh=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["model"]["num_heads"])' "$d/out/config.json") || return
    rm -rf "$maps"
    step "train:dump-attention" 120 "$trainer" --device cuda --eval-only -e "$(printf '%s/out/model_%08d.bin' "$d" "$steps")" \
        -j "$d/data/val_*.bin" -b 1 -t "$t" -m 1 --dump-attention "0:0,0:$((nh - 1))" -o "$maps" || return
    step "train:maps-valid" 60 "$PY" - "$maps" "$d/out/config.json" <<'EOF'
import json, sys
import numpy as np
m = json.load(open(sys.argv[2]))["model"]
NH, G, P = m["num_heads"], m["global_heads"], m["window"]
ok = True
for h in (0, NH - 1):
    p = np.load(f"{sys.argv[1]}/attn_L0_H{h}.npy")
    T = p.shape[0]
    i, j = np.indices((T, T))
    visible = (j <= i) & ((j > i - P) if h < NH - G else True)
    sums = np.abs(p.sum(axis=1) - 1).max()
    good = bool(np.isfinite(p).all() and (p[~visible] == 0).all() and sums <= 1e-4)
    print(f"head 0:{h} ({'local' if h < NH - G else 'global'}), T {T}: worst |row sum - 1| {sums:.2e}, "
          f"{int((p[~visible] != 0).sum())} nonzero outside the window: {'PASS' if good else 'FAIL'}")
    ok = ok and good
sys.exit(0 if ok else 1)
EOF
    # QK-Clip on the device (the clipped heads' q/k rows scaled in place): a threshold below the
    # model's max logits, so heads are clipped; the run must stay finite
    rm -rf "$d/qkclip"
    step "train:qk-clip" 300 "$trainer" --device cuda "${run[@]}" -x 6 -v 0 -n 0 --qk-clip 0.1 \
        -s 0 -i "$d/data/train_*.bin" -j "$d/data/val_*.bin" -o "$d/qkclip" || return
    step "train:qk-clip-valid" 60 "$PY" - "$d/qkclip/metrics.jsonl" <<'EOF'
import json, math, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in steps if "loss" in r]
clipped = sum(r.get("qk_clip_heads", 0) for r in steps)
ok = len(steps) == 6 and all(r["loss"] is not None and math.isfinite(r["loss"]) for r in steps) and clipped > 0
print(f"{len(steps)} steps, {clipped} head clips, loss {steps[0]['loss'] if steps else None} -> "
      f"{steps[-1]['loss'] if steps else None}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
EOF
    # the step captured once and replayed as a CUDA graph (--cuda-graph 1) against the same run without,
    # both with --pdl 0 (named, not left to the default auto: they are the baselines of --pdl 1 below):
    # every step's loss, gradient norm and max attention logit bit for bit; both medians (after the
    # warm-up steps) and what the graph saves per step printed, beside the calibrated model's bound
    # for ls-small-b8 (the launch gaps of its prediction: docs/results/predictions/, group "gaps").
    # Emulated: 4 steps, which prove the stage's commands (the times are the emulator's, not a GPU's;
    # test/test_emu_step_report.py compares the two bit for bit on more steps)
    local g gsteps=40
    [ "$emulate" = 1 ] && gsteps=4
    for g in 0 1; do
        rm -rf "$d/graph$g"
        step "train:cuda-graph-$g" 300 "$trainer" --device cuda "${run[@]}" -x "$gsteps" -v 0 -n 0 --cuda-graph "$g" \
            --pdl 0 -s 0 -i "$d/data/train_*.bin" -o "$d/graph$g" || return
    done
    step "train:cuda-graph" 60 compare_runs "$d/graph0/metrics.jsonl" "$d/graph1/metrics.jsonl" "$gsteps" \
        "without the graph" "replayed" "ls-small-b8's launch gaps modeled at 0.41 ms/step, an upper bound"
    # programmatic dependent launch (--pdl 1, docs/cuda_backend.md) against the same runs without, kernel
    # by kernel and as the step graph: bit for bit, and the medians with what it saves per step
    for g in 0 1; do
        rm -rf "$d/pdl$g"
        step "train:pdl-graph$g" 300 "$trainer" --device cuda "${run[@]}" -x "$gsteps" -v 0 -n 0 --cuda-graph "$g" \
            --pdl 1 -s 0 -i "$d/data/train_*.bin" -o "$d/pdl$g" || return
        local hidden=""
        [ "$g" = 1 ] && hidden=", of which the graph hides part"
        step "train:pdl-vs-graph$g" 60 compare_runs "$d/graph$g/metrics.jsonl" "$d/pdl$g/metrics.jsonl" "$gsteps" \
            "with --cuda-graph $g --pdl 0" "with --pdl 1" \
            "at most ls-small-b8's launch gaps, modeled at 0.41 ms/step$hidden" pdl=1
    done
}

stage_e2e() {  # stage_e2e MODEL...: one step a model, in order
    local m
    for m in "$@"; do
        if [ "$emulate" = 1 ]; then skip_step "e2e:$m" "emulated: the comparison with PyTorch needs torch with CUDA and a GPU"; continue; fi
        ensure_bf16
        mkdir -p "$work/e2e/$m"
        step "e2e:$m" 560 "$PY" dev/bench/train_vs_torch.py --models "$m" --out "$work/e2e/$m" --work "$work/e2e_work"
    done
}

export -f emu_schedules run_bin fp32_make cublaslt_real attention_batch_scaling bench_generate bench_generate_timing compare_runs  # step() runs them in a child bash, under timeout
export emulate extra arch work PY generator

if [ -z "$device" ]; then
    fail_step "gpu-present" "no NVIDIA GPU (nvidia-smi; --emulate runs the emulated build)"
else
    for s in "${stages[@]}"; do
        case $s in
            first) stage_first ;; build) stage_build ;; test) stage_test ;; sanitize) stage_sanitize ;; fp32) stage_fp32 ;; labs) stage_labs ;;
            bench) stage_bench ;; train) stage_train ;; profile) stage_profile ;; e2e-small) stage_e2e paper ls-small ;; e2e-d12) stage_e2e d12 ;;
        esac
    done
fi
fi  # report_only

# ---- the report: every step recorded on this machine, logs in full, the short table last ----------
# sources_digest: scripts/build_digest.sh of the tree that ran, so that scripts/lease_digest.py can check
# that GPU_CHECK_COMMIT names it (the device's git metadata can be another commit's)
"$PY" - "$results" "$work" "$report_dir" "$GPU_CHECK_COMMIT" "${device:-none}" "$arch" \
    "$(scripts/build_digest.sh . 2>/dev/null)" <<'EOF'
import glob, json, os, sys, datetime
results, work, out, commit, device, arch, sources_digest = sys.argv[1:8]
steps = []
for line in open(results):
    if line.strip():
        name, status, secs, log = line.rstrip("\n").split("\t")
        steps.append({"name": name, "status": status, "seconds": float(secs), "log": log})

def read(path, max_lines=400):
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return "(no log)"
    if len(lines) > max_lines:
        lines = [f"... ({len(lines) - max_lines} earlier lines cut; full log in {path})"] + lines[-max_lines:]
    return "\n".join(lines)

benches = {}
for p in sorted(glob.glob(os.path.join(work, "bench", "*", "*.json")) + glob.glob(os.path.join(work, "e2e", "*", "*.json"))):
    try:
        benches[os.path.relpath(p, work)] = json.load(open(p))
    except (OSError, ValueError) as e:
        benches[os.path.relpath(p, work)] = {"error": f"unreadable: {e}"}

passed = sum(s["status"] == "PASS" for s in steps)
skipped = sum(s["status"] == "SKIPPED" for s in steps)
failed = len(steps) - passed - skipped
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump({"commit": commit, "sources_digest": sources_digest or None, "device": device, "cuda_arch": arch,
               "date": date,
               "passed": passed, "skipped": skipped, "failed": failed,
               "steps": [{k: s[k] for k in ("name", "status", "seconds")} for s in steps],
               "benchmarks": benches}, f, indent=1)

table = [f"== summary: commit {commit[:12]}, {device}, sm_{arch}, {date} ==",
         f"{'step':44s} {'status':20s} {'seconds':>8s}"]
table += [f"{s['name']:44s} {s['status']:20s} {s['seconds']:8.1f}" for s in steps]
for rel, b in benches.items():  # the end-to-end numbers in one line per model
    for r in b.get("results", []) if isinstance(b, dict) and b.get("benchmark") == "train_vs_torch" else []:
        o, t = r.get("ours") or {}, r.get("torch") or {}
        fmt = lambda x, s: "-" if x is None else format(x, s)
        table.append(f"e2e {r['model']:9s} ours {fmt(o.get('tokens_per_s'), ',.0f')} tok/s "
                     f"(MFU {fmt(None if o.get('mfu') is None else 100 * o['mfu'], '.1f')}%), torch "
                     f"{fmt(t.get('tokens_per_s'), ',.0f')} tok/s, ratio {fmt(r.get('speedup'), '.2f')}x "
                     f"(target {r.get('target_speedup')}x)")
table.append(f"{passed} of {len(steps)} steps PASS" + (f", {skipped} SKIPPED (not run)" if skipped else "")
             + (f", {failed} FAIL" if failed else ""))

with open(os.path.join(out, "report.txt"), "w") as f:
    f.write(f"gpu_check report\n{read(os.path.join(work, 'logs', 'environment.log'))}\n\n")
    for s in steps:
        f.write(f"== {s['name']}: {s['status']} ({s['seconds']:.1f} s) ==\n{read(s['log'])}\n\n")
    f.write("\n".join(table) + "\n")
print()
print("\n".join(table))
print(f"report: {out}/report.txt, {out}/report.json")
EOF
exit $call_failed
