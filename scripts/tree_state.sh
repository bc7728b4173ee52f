# shellcheck shell=bash
# What a report's header says about the tree it ran from: the commit, and the tracked files whose
# content or mode differs from it, named (the first few, then "..."). Sourced by scripts/exp_pg19.sh.
#
# A tree copied to another machine (the GPU machine) can carry git metadata that is not its own
# (paper window 1: the files were bd9197f's, git there held c276bf2, the commit of the session's
# first call, although the window ran on a freshly started machine), so git there compares the files
# with another commit. The commit named is then the one given (EXP_COMMIT), and the header says what
# git there holds beside it.

TREE_STATE_NAMES=3  # changed files named before "..."

# changed_files REPO COMMIT: "N changed file(s) (a, b, c, ...)" for the tracked files of REPO's working
# tree that differ from COMMIT (content or mode; stat-only differences are not changes); empty if none
changed_files() {
  local names n
  names=$(git -C "$1" diff --name-only "$2" -- 2> /dev/null) || return 0
  [[ -n $names ]] || return 0
  n=$(wc -l <<< "$names")
  printf '%s changed file%s (%s%s)' "$n" "$([[ $n == 1 ]] || echo s)" \
    "$(head -n "$TREE_STATE_NAMES" <<< "$names" | paste -sd, - | sed 's/,/, /g')" \
    "$([[ $n -gt $TREE_STATE_NAMES ]] && echo ", ...")"
}

# tree_state REPO [GIVEN]: the header's commit field. GIVEN (EXP_COMMIT) is the commit named when set.
#   abc1234                           git's HEAD (or GIVEN, the same commit), tree as committed
#   abc1234 + 2 changed files (a, b)  tracked files that differ from it
#   abc1234 (git here: HEAD 9f8e7d6)  GIVEN is not git's HEAD: the changes are counted against GIVEN
#   abc1234 (git here: HEAD 9f8e7d6 + 5 changed files (...); abc1234 unknown to it: changes unchecked)
#   abc1234 (no git here: changes unchecked)
tree_state() {
  local repo=$1 given=${2:-} head base changes
  head=$(git -C "$repo" rev-parse --short HEAD 2> /dev/null) || head=""
  if [[ -z $head ]]; then
    echo "${given:-unknown} (no git here: changes unchecked)"
    return
  fi
  if [[ -z $given ]]; then
    changes=$(changed_files "$repo" HEAD)
    echo "$head${changes:+ + $changes}"
    return
  fi
  if ! base=$(git -C "$repo" rev-parse --verify -q "$given^{commit}" 2> /dev/null); then
    changes=$(changed_files "$repo" HEAD)
    echo "$given (git here: HEAD $head${changes:+ + $changes}; $given unknown to it: changes unchecked)"
    return
  fi
  changes=$(changed_files "$repo" "$base")
  if [[ $base == "$(git -C "$repo" rev-parse HEAD)" ]]; then
    echo "$given${changes:+ + $changes}"
  else
    echo "$given${changes:+ + $changes} (git here: HEAD $head)"
  fi
}
