# shellcheck shell=bash
# The settings an experiment script asked of each of its runs, kept beside the run as RUN.args (one
# flag with its values a line), so that starting the script again reuses a run only for the same
# experiment. Sourced by scripts/exp_pg19.sh, scripts/exp_synthetic.sh and scripts/exp_text_ratio.sh.
#
# Rules: a run directory that does not exist, or holds neither a run record (config.json) nor a
# checkpoint (the trainer refused its flags before it started), is new. One that holds a run is reused (skipped when finished,
# continued with -y 1 otherwise) only when RUN.args equals the settings asked now; a run of other
# settings, or one without RUN.args (nothing says what it is), is refused with one error line naming
# the flags that differ, unless --force, which deletes that run (RUN, RUN.log, RUN.args) with a note.
# The machine (--threads, --device), -o and -y are not settings of the experiment and are not recorded;
# a preset (--config FILE) is recorded by its path and its contents' sha256.

# settings_lines ARGS...: the trainer flags ARGS, one flag with its values a line; after `--config FILE`
# a line with FILE's sha256 (a preset edited between two starts is other settings, not the same path)
settings_lines() {
  local line="" a
  for a in "$@"; do
    if [[ $a =~ ^--?[A-Za-z] ]]; then
      [[ -n $line ]] && settings_line_out "$line"
      line=$a
    else
      line+=" $a"
    fi
  done
  [[ -n $line ]] && settings_line_out "$line"
  return 0
}
settings_line_out() {
  printf '%s\n' "$1"
  if [[ $1 == "--config "* && -f ${1#--config } ]]; then
    printf 'contents of %s: sha256 %s\n' "${1#--config }" "$(sha256sum < "${1#--config }" | cut -d' ' -f1)"
  fi
}

# settings_check RUN FORCE ARGS...: 0 when RUN is new or holds a run of exactly these settings; with
# FORCE 1 a run of other or unknown settings is deleted (a note says so) and RUN is new; otherwise one
# `error:` line on stderr and status 1, RUN untouched.
settings_check() {
  local dir=$1 force=$2 why
  shift 2
  [[ -e $dir/config.json ]] || compgen -G "$dir/DONE_*" > /dev/null || compgen -G "$dir/model_*" > /dev/null || return 0
  if [[ ! -f $dir.args ]]; then
    why="holds a run with no record of its settings ($dir.args is missing)"
  else
    local asked recorded
    asked=$(settings_lines "$@")
    recorded=$(cat "$dir.args")
    [[ $asked == "$recorded" ]] && return 0
    local was now
    was=$(comm -23 <(sort <<< "$recorded") <(sort <<< "$asked") | paste -sd, - | sed 's/,/, /g')
    now=$(comm -13 <(sort <<< "$recorded") <(sort <<< "$asked") | paste -sd, - | sed 's/,/, /g')
    why="holds a run of other settings (it has ${was:-nothing more}; asked: ${now:-nothing more})"
  fi
  if [[ $force == 1 ]]; then
    echo "note: --force: deleting $dir, which $why" >&2
    rm -rf "$dir" "$dir.log" "$dir.args"
    return 0
  fi
  echo "error: $dir $why; choose another --out, or give --force to replace it" >&2
  return 1
}

# settings_write RUN ARGS...: record ARGS as RUN's settings (RUN.args)
settings_write() {
  local dir=$1
  shift
  settings_lines "$@" > "$dir.args.tmp" && mv "$dir.args.tmp" "$dir.args"
}
