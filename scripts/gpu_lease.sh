#!/usr/bin/env bash
# One call of a lent GPU machine, inside a fixed time budget: runs scripts/gpu_check.sh part after
# part, each limited to the time still left, and always leaves the report and every step's log in
# the output folder (a part cut off by the budget loses nothing already recorded).
#
#   scripts/gpu_lease.sh BUDGET_S PARTS [PARTS...]
#
# BUDGET_S: seconds for the whole script (keep it under the call's limit; 20 s are kept back for the
# report and the log archive). Each PARTS is one --part argument of gpu_check.sh (e.g.
# "build,test" "train" "labs"), run in the order given while time is left.
# Output ($OUT, else out/gpu_check), all of it within what the device tool brings back (at most 8
# files of at most 16 MiB, 64 MiB together): report.txt, report.json (every step recorded on this
# machine), logs.tar.gz (scripts/pack_lease_logs.py: the logs, JSON and other text records of
# build/gpu_check: every step's full log and the benchmarks' JSON; never checkpoints, token shards,
# attention maps or binaries). An archive over 15 MiB comes as logs.tar.gz.part0, .part1, ...; the
# end of report.txt says how to join them and what was left out.
# GPU_CHECK_EMULATE=1: gpu_check.sh's emulated mode (the smoke of this script on a CPU machine; its
# logs from build/gpu_check_emu).
# After a lease that ran the profile part, its report.json is compared on the CPU machine with the
# calibrated model's prediction for the commit measured (docs/results/predictions/HEAD-<sha>-modeled.json,
# today HEAD-3609e84; docs/results/README.md, "Measured beside predicted").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
budget=${1:?usage: scripts/gpu_lease.sh BUDGET_S PARTS [PARTS...]}
shift
[ $# -gt 0 ] || { echo "error: name at least one part (e.g. build,test)" >&2; exit 2; }
out=${OUT:-out/gpu_check}
mkdir -p "$out"
reserve=20
status=0
for parts in "$@"; do
    left=$(( budget - reserve - SECONDS ))
    if [ $left -lt 30 ]; then echo "gpu_lease: no time left for part '$parts' (${left}s)" >&2; status=1; break; fi
    echo "gpu_lease: part '$parts' with ${left}s left" >&2
    timeout --kill-after=5 "$left" scripts/gpu_check.sh --part "$parts" --out "$out" || status=1
done
# the report again, of every step recorded: a part the budget cut off never wrote its own (its
# finished steps are in it, the step it was in is "cut off")
scripts/gpu_check.sh --report-only --out "$out" >/dev/null || status=1
work=build/gpu_check
[ "${GPU_CHECK_EMULATE:-0}" = 1 ] && work=build/gpu_check_emu  # gpu_check.sh's work folder when emulated
"${PYTHON:-python3}" scripts/pack_lease_logs.py "$work" "$out" || status=1
exit $status
