#!/usr/bin/env bash
# The digest of a tree's build inputs: every C, C++ and CUDA source and header and the Makefile, by
# path and content, outside the build's outputs, the carried folders and the data. Two trees with the
# same digest build the same programs, so a build made from one (scripts/prebuild_gpu.sh) stands for
# the other (scripts/use_prebuilt.sh). It does not depend on git: on the GPU machine the tree's git
# metadata can be another commit's (docs/results/experiments/paper_campaign.md).
#
#   scripts/build_digest.sh [TREE]          prints 16 hex digits (TREE: default .)
#   scripts/build_digest.sh --list [TREE]   prints what the digest is of: one "SHA256  ./PATH" line a file
#                                           (the digest is the first 16 hex digits of this list's SHA-256)
set -euo pipefail
list=0
[[ ${1:-} == --list ]] && { list=1; shift; }
cd "${1:-.}"
sources() {
  find . \( -path ./build -o -path ./.deps -o -path ./prebuilt -o -path ./out -o -path ./data -o -path ./.git \
          -o -path ./hf \) -prune -o -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.hpp' \
          -o -name '*.cpp' -o -name '*.cc' -o -name '*.c' -o -name '*.inc' -o -name Makefile \) -print0 |
  LC_ALL=C sort -z | xargs -0 sha256sum
}
if [[ $list == 1 ]]; then sources; else sources | sha256sum | cut -c1-16; fi
