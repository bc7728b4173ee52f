# shellcheck shell=bash
# The trainer's "note:" lines of a run (a window not below T, a warmup longer than the run, ...), relayed
# to an experiment script's console as "== NAME: note: ...", so that they are seen without opening the
# run's log. Sourced by scripts/exp_pg19.sh, scripts/exp_synthetic.sh and scripts/exp_text_ratio.sh.

# log_start LOG: the first line number of what a run started now appends to LOG (1 when LOG is missing)
log_start() {
  local n=0
  [[ -f $1 ]] && n=$(wc -l < "$1")
  echo $((n + 1))
}

# relay_notes_of NAME LOG FROM: the "note:" lines of LOG from its line FROM on, each as "== NAME: note: ..."
relay_notes_of() {
  tail -n +"$3" "$2" 2> /dev/null | awk -v name="$1" '/^note: / { print "== " name ": " $0 }' || true
}
