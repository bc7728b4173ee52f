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
#
# The trainer that trained a run is kept beside it as RUN.build (trainer_build): the repository's own
# train_gpt2_ls by the digest of the sources it builds from (scripts/build_digest.sh: a rebuild of the
# same sources is the same trainer, though nvcc's output differs byte for byte between two builds, and
# so is a copy of the tree at another path, as on the device machine), another TRAINER by the sha256 of
# its binary; then, for the record, the commit the script names, the binary's sha256 and its path.
# A run that exists is reused only by the same trainer: one trained by another (a change of the sources,
# another TRAINER) is refused, or deleted by --force, as a run of other settings is, so that no run mixes
# two builds' steps and no summary takes an earlier build's finished run for this one's. A run without
# RUN.build (made by an earlier version of the scripts) is reused with a note that its build is unknown.

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
  run_exists "$dir" || return 0
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
    rm -rf "$dir" "$dir.log" "$dir.args" "$dir.build"
    return 0
  fi
  echo "error: $dir $why; choose another --out, or give --force to replace it" >&2
  return 1
}

# run_exists RUN: status 0 when RUN holds a run record (config.json) or a checkpoint
run_exists() {
  [[ -e $1/config.json ]] || compgen -G "$1/DONE_*" > /dev/null || compgen -G "$1/model_*" > /dev/null
}

# trainer_build TRAINER REPO COMMIT: RUN.build's text for the binary TRAINER, REPO the repository (its
# sources), built at COMMIT (the header's commit field). Its first line names the trainer and is what
# build_check compares: "sources <digest>" when TRAINER is REPO's train_gpt2_ls, else "sha256 <first 16
# hex digits of TRAINER>". The lines after it are for the record, not compared: "commit <COMMIT>",
# "binary sha256 <16 hex digits>", and "repository REPO" or "trainer TRAINER" (where it was built).
trainer_build() {
  local digest binary
  binary=$(sha256sum < "$1" | cut -c1-16) || return 1
  if [[ $(realpath "$1") == "$(realpath "$2/train_gpt2_ls")" ]]; then
    digest=$("$2/scripts/build_digest.sh" "$2") || return 1
    printf 'sources %s\ncommit %s\nbinary sha256 %s\nrepository %s\n' "$digest" "$3" "$binary" "$2"
  else
    printf 'sha256 %s\ncommit %s\nbinary sha256 %s\ntrainer %s\n' "$binary" "$3" "$binary" "$1"
  fi
}

# build_key BUILD: the trainer a RUN.build text names, as compared: its first line up to " of ". A RUN.build
# written before the path moved to a line of its own starts "sources <digest> of REPO" or "sha256 <hex> of
# TRAINER"; its key is the same digest, so a run of the same sources (or binary) is still this trainer's.
build_key() {
  local first
  first=$(head -n 1 <<< "$1")
  printf '%s' "${first%% of *}"
}

# build_check RUN FORCE BUILD: 0 when RUN is new, holds no RUN.build (a note on stderr: the build that
# trained it is unknown), or was trained by BUILD's trainer (the same build_key: the same sources in any
# checkout, or the same binary); with FORCE 1 a run of another build is deleted (a note says so) and RUN
# is new; otherwise status 1, RUN untouched, and on stdout the error (one line, without "error: ") naming
# both builds and the fixes.
build_check() {
  local dir=$1 force=$2 build=$3 was
  run_exists "$dir" || return 0
  if [[ ! -f $dir.build ]]; then
    echo "note: $dir has no record of the trainer that trained it ($dir.build, written since the scripts record builds); it is continued with this one" >&2
    return 0
  fi
  was=$(cat "$dir.build")
  [[ $(build_key "$was") == "$(build_key "$build")" ]] && return 0
  local why
  why="was trained by another trainer build ($(build_text "$was"); this one: $(build_text "$build"))"
  if [[ $force == 1 ]]; then
    echo "note: --force: deleting $dir, which $why" >&2
    rm -rf "$dir" "$dir.log" "$dir.args" "$dir.build"
    return 0
  fi
  echo "$dir $why; choose another --out, or give --force to train it again with this build"
  return 1
}
# build_text BUILD: the trainer and its commit as one line, "sources D of REPO, commit C" ("sha256 S of
# TRAINER, ..." for another trainer; without " of ..." when the record names no path)
build_text() {
  local commit where first
  commit=$(sed -n 's/^commit //p' <<< "$1")
  where=$(sed -n 's/^\(repository\|trainer\) //p' <<< "$1" | head -n 1)
  first=$(head -n 1 <<< "$1")
  [[ -z $where && $first == *" of "* ]] && where=${first#* of }
  printf '%s%s, commit %s' "$(build_key "$1")" "${where:+ of $where}" "${commit:-unknown}"
}

# build_write RUN BUILD: record BUILD as the trainer of RUN (RUN.build)
build_write() {
  printf '%s\n' "$2" > "$1.build.tmp" && mv "$1.build.tmp" "$1.build"
}

# settings_write RUN ARGS...: record ARGS as RUN's settings (RUN.args)
settings_write() {
  local dir=$1
  shift
  settings_lines "$@" > "$dir.args.tmp" && mv "$dir.args.tmp" "$dir.args"
}
