#!/usr/bin/env bash
# Packs what the GPU machine needs for scripts/exp_pg19.sh and says what to carry (docs/experiments.md,
# "PG-19, the paper's setting"): PG-19 tokenized with the 10K SentencePiece vocabulary, validation by
# whole books, in a git-ignored folder of the repository, and the header-only C++ deps (.deps).
#
#   scripts/pack_pg19.sh [--source ../shared/data/pg19] [--out data/shards/pg19_sp] [--force] [--no-deps]
# (each option also as --option=value, as the trainer takes them)
#
# --source: the directory of PG-19 books (the 201 local ones, or the full set); --out: the shards
# (default data/shards/pg19_sp, what configs/paper_pg19.toml and exp_pg19.sh read; /data/shards/ is in
# .gitignore, so it travels only when named in the device tool's `carry`). An --out whose meta.json
# records the same settings (pg19, sp, vocabulary 10000) is kept (--force: tokenize again), unless a
# --source given names other books than it was made from (data/source_check.py: names and sizes), which
# is refused; an --out that holds anything else (another data set, shards without meta.json) is refused
# unless --force. --no-deps:
# leave .deps alone (otherwise ../shared/tools/device-deps.sh fills .deps/include when it is missing).
# Then it measures what would travel: the working tree (tracked files and untracked files git does not
# ignore) plus the carried folders, which must stay within the tool's 64 MiB; it prints the `carry`
# list and exits 1 when over. Needs python3 with sentencepiece (requirements.txt).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
cd "$REPO"
SOURCE=$REPO/../shared/data/pg19
OUT=data/shards/pg19_sp
SOURCE_GIVEN=0
FORCE=0
DEPS=1
PYTHON=${PYTHON:-python3}
LIMIT=$((64 * 1024 * 1024))

die() { echo "error: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --source) [[ -n ${2:-} ]] || die "--source needs a directory"; SOURCE=$2; SOURCE_GIVEN=1; shift 2 ;;
    --out) [[ -n ${2:-} ]] || die "--out needs a directory"; OUT=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    --no-deps) DEPS=0; shift ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;  # --flag=value (the trainer's form too): --flag value
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; see $0 --help" ;;
  esac
done
case $OUT in /*) die "--out $OUT: give a path inside the repository (it must travel with the tree)" ;; esac
git check-ignore -q "$OUT" || die "--out $OUT is not ignored by git: it would travel as an untracked file and could be committed; use a folder under data/shards/"

# What --out holds now: "none" (missing or empty), "same" (this pack: pg19, sp, vocabulary 10000), else a
# description of the other contents, which are replaced only with --force.
held=none
if [[ -e $OUT && ! -d $OUT ]]; then
  die "--out $OUT exists and is not a directory; choose another --out"
elif [[ -d $OUT && -n $(ls -A "$OUT") ]]; then
  held=$("$PYTHON" - "$OUT/meta.json" <<'META'
import json, os, sys
if not os.path.isfile(sys.argv[1]):
    print("files but no meta.json")
else:
    try:
        m = json.load(open(sys.argv[1]))
    except (OSError, ValueError):
        m = None
    if not isinstance(m, dict):
        print("a meta.json that is not a data set's")
    elif m.get("dataset") == "pg19" and m.get("tokenizer") == "sp" and m.get("vocab_size") == 10000:
        print("same")
    else:
        print(f"another data set (meta.json: dataset {m.get('dataset')}, tokenizer {m.get('tokenizer')}, "
              f"vocabulary {m.get('vocab_size')})")
META
)
fi
if [[ $held != none && $held != same && $FORCE == 0 ]]; then
  die "--out $OUT holds $held, not PG-19 with the 10K SentencePiece vocabulary; choose another --out, or give --force to replace its data set"
fi
same=0
[[ $held == same && $FORCE == 0 ]] && same=1
# a --source given for data that exists must be the books the data was made from (by name and size)
if [[ $same == 1 && $SOURCE_GIVEN == 1 ]]; then
  [[ -d $SOURCE ]] || die "no PG-19 books at --source $SOURCE; check the path"
  why=$("$PYTHON" data/source_check.py "$OUT/meta.json" "$SOURCE") || \
    die "--out $OUT holds PG-19 $why; give --force to tokenize $SOURCE into it, or another --out"
fi
if [[ $held != none && $held != same ]]; then echo "note: --force: replacing $OUT, which holds $held" >&2; fi
if [[ $same == 1 ]]; then
  echo "== $OUT holds PG-19 with the 10K SentencePiece vocabulary already (--force tokenizes again)"
else
  [[ -d $SOURCE ]] || die "no PG-19 books at $SOURCE; pass --source DIR (a directory of Gutenberg .txt books)"
  echo "== tokenizing $SOURCE into $OUT (SentencePiece BPE, vocabulary 10000, 5% of the books for validation)"
  t0=$(date +%s)
  # --force (the --out checked above held another data set, or this one): passed on to prepare.py, which
  # without it refuses to replace a data set of another tokenizer or vocabulary
  force=(); [[ $FORCE == 1 ]] && force=(--force)
  "$PYTHON" data/prepare.py --dataset pg19 --source "$SOURCE" --out "$OUT" --tokenizer sp --vocab-size 10000 \
    "${force[@]}"
  echo "== tokenized in $(( $(date +%s) - t0 )) s"
fi
"$PYTHON" - "$OUT/meta.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
val = m.get("val_books", [])
print(f"   validation: {len(val)} whole books ({', '.join(str(b).split('/')[-1] for b in val[:10])}{' ...' if len(val) > 10 else ''})")
EOF

carry=("$OUT")
if [[ $DEPS == 1 ]]; then
  if [[ ! -f .deps/include/CLI/CLI.hpp || ! -f .deps/include/nlohmann/json.hpp ]]; then
    [[ -x ../shared/tools/device-deps.sh ]] || die ".deps/include lacks CLI11 or nlohmann/json and ../shared/tools/device-deps.sh is missing; pass --no-deps if the GPU machine has them"
    echo "== header-only deps into .deps (../shared/tools/device-deps.sh)"
    ../shared/tools/device-deps.sh > /dev/null
  fi
  carry+=(.deps)
fi
# the window's programs built here (scripts/prebuild_gpu.sh --set paper), when made: exp_pg19.sh --prebuilt
# (only if built from this tree's sources: a stale one would be refused there and cost its MiB of the carry)
paper_tar=prebuilt/bf16-sm90-paper.tar.gz
if [[ -f $paper_tar ]]; then
  if [[ $(tar xzf "$paper_tar" -O PREBUILT 2> /dev/null | sed -n 's/^digest //p') == "$(scripts/build_digest.sh .)" ]]; then
    carry+=("$paper_tar")
  else
    echo "warning: $paper_tar was built from other sources than this tree's: not carried (scripts/prebuild_gpu.sh --set paper remakes it)" >&2
  fi
fi

# (a tracked file deleted from the work tree does not travel: stat skips it, and its failure is not the script's)
tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2> /dev/null || true) |
  awk '{ s += $1 } END { print s + 0 }')
total=$tree
echo "== what travels to the GPU machine"
printf '   %-28s %6.1f MiB\n' "working tree (git)" "$(awk -v b="$tree" 'BEGIN { print b / 1048576 }')"
for c in "${carry[@]}"; do
  b=$(du -sb "$c" | cut -f1); total=$((total + b))
  printf '   %-28s %6.1f MiB (carry)\n' "$c" "$(awk -v b="$b" 'BEGIN { print b / 1048576 }')"
done
printf '   %-28s %6.1f MiB of 64\n' "total" "$(awk -v b="$total" 'BEGIN { print b / 1048576 }')"
(( total <= LIMIT )) || die "the working tree and the carried folders are $total bytes, over the device tool's 64 MiB; carry less"
list=$(printf '"%s", ' "${carry[@]}")
echo "carry: [${list%, }]"
