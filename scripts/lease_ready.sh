#!/usr/bin/env bash
# Whether this tree is ready for a GPU session's two calls, and the two calls to make (docs/results/README.md,
# "A session's 15 device minutes"; docs/results/experiments/paper_campaign.md, "Before a window"): run here,
# after the last commit, before the first call. Checks, each failure one line naming the fix:
#   - the tree is committed: no tracked file differs from HEAD, and no untracked file that git does not
#     ignore (it would travel with the tree and take room of the carry; the lease would measure it too);
#   - the prebuilt tarballs (scripts/prebuild_gpu.sh --set both) are there and were built from this tree's
#     sources (PREBUILT's digest is scripts/build_digest.sh of this tree);
#   - .deps/include holds CLI11 and nlohmann/json (../shared/tools/device-deps.sh);
#   - the PG-19 shards are packed (scripts/pack_pg19.sh: data/shards/pg19_sp/meta.json);
#   - each call's tree and carried paths fit the device tool's 64 MiB.
# Then prints, on stdout, the speed lease's call and the paper window's (its command the campaign file's
# "The command of one window", with this commit), S and timeout_s to fill from call 1's reply.
#
#   scripts/lease_ready.sh
#
# Exit 0: ready (the calls printed); 1: not ready (what is missing said on stderr, the calls printed all
# the same, marked NOT READY); 2: bad usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
[[ $# -eq 0 ]] || { [[ $1 == -h || $1 == --help ]] && { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
  echo "error: scripts/lease_ready.sh takes no arguments (--help)" >&2; exit 2; }
limit=$((64 * 1024 * 1024))
lease_tar=prebuilt/bf16-sm90-lease.tar.gz
paper_tar=prebuilt/bf16-sm90-paper.tar.gz
shards=data/shards/pg19_sp
campaign=docs/results/experiments/paper_campaign.md
missing=0
problem() { echo "not ready: $1" >&2; missing=1; }

sha=$(git rev-parse --short=7 HEAD 2>/dev/null) || { echo "error: not a git tree" >&2; exit 2; }
[[ -z $(git status --porcelain --untracked-files=no) ]] ||
  problem "tracked files differ from HEAD $sha: commit them (the calls name HEAD's commit)"
untracked=$(git ls-files --others --exclude-standard | head -n 3)
[[ -z $untracked ]] || problem "untracked files travel with the tree ($(tr '\n' ' ' <<<"$untracked" | sed 's/ $//')): commit, remove or ignore them"
digest=$(scripts/build_digest.sh .) || { echo "error: scripts/build_digest.sh failed" >&2; exit 2; }
lease_tar_ok=1
for t in "$lease_tar" "$paper_tar"; do
  if [[ ! -f $t ]]; then
    problem "$t is missing: scripts/prebuild_gpu.sh --set both (after the last commit)"
    [[ $t != "$lease_tar" ]] || lease_tar_ok=0
  else
    built=$(tar xzf "$t" -O PREBUILT 2>/dev/null | sed -n 's/^digest //p')
    [[ $built == "$digest" ]] || {
      problem "$t was built from other sources (digest ${built:-none}, this tree's $digest): scripts/prebuild_gpu.sh --set both"
      [[ $t != "$lease_tar" ]] || lease_tar_ok=0; }
  fi
done
[[ -f .deps/include/CLI/CLI.hpp && -f .deps/include/nlohmann/json.hpp ]] ||
  problem ".deps/include lacks CLI11 or nlohmann/json: ../shared/tools/device-deps.sh (or scripts/pack_pg19.sh)"
[[ -f $shards/meta.json ]] || problem "$shards holds no packed PG-19 shards: scripts/pack_pg19.sh"

# what travels: the tree (tracked files and untracked ones git does not ignore) and the carried paths
bytes() { du -sb "$@" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null || true) |
  awk '{ s += $1 } END { print s + 0 }')
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
call1=(.deps "$lease_tar")
call2=("$shards" .deps "$paper_tar")
for n in 1 2; do
  declare -n paths="call$n"
  total=$((tree + $(bytes "${paths[@]}")))
  echo "call $n: the tree $(mib "$tree") MiB + carry $(mib $((total - tree))) MiB = $(mib "$total") MiB of 64" >&2
  ((total <= limit)) || problem "call $n's tree and carry are $(mib "$total") MiB, over the device tool's 64 MiB"
done

window=$(sed -n 's/^EXP_COMMIT=<sha> \(scripts\/exp_pg19.sh .*\)$/\1/p' "$campaign" | head -n 1)
[[ -n $window ]] || problem "$campaign has no 'EXP_COMMIT=<sha> scripts/exp_pg19.sh ...' line (The command of one window)"
carry() { local list; list=$(printf '"%s", ' "$@"); echo "[${list%, }]"; }
mark=""
[[ $missing == 0 ]] || mark="NOT READY (above): "
if [[ $lease_tar_ok == 1 ]]; then
  echo "${mark}call 1 (the speed lease): run(command=\"GPU_CHECK_COMMIT=$sha GPU_CHECK_PREBUILT=$lease_tar scripts/gpu_lease.sh 340 build,test train profile e2e-d12\", carry=$(carry "${call1[@]}"), timeout_s=360)"
else
  # no usable lease tarball: the BF16 build runs on the device (62-93 s at c2b0f82 and c276bf2), so the
  # call gets that much more, or e2e-d12, its last part, is likely cut off
  echo "${mark}call 1 (the speed lease, without the prebuilt programs: the build on the device): run(command=\"GPU_CHECK_COMMIT=$sha scripts/gpu_lease.sh 420 build,test train profile e2e-d12\", carry=$(carry .deps), timeout_s=440)"
fi
echo "${mark}call 2 (at once, while warm, if call 1's lease.budget_left_s >= ~480; S = budget_left_s - 60): run(command=\"EXP_COMMIT=$sha ${window//\"/\\\"}\", carry=$(carry "${call2[@]}"), timeout_s=S + 40)"
# the prediction to compare with: the newest committed one (roofline.py --predict, docs/results/predictions)
prediction=$(for f in docs/results/predictions/HEAD-*-modeled.json; do
  [[ -f $f ]] && git log -1 --format="%ct $f" -- "$f"; done | sort -n | tail -n 1 | cut -d' ' -f2)
echo "after: python3 scripts/lease_digest.py FILES_AT/report.json --prediction ${prediction:-(none committed)}"
exit $missing
