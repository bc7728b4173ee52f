#!/usr/bin/env bash
# Install programs that scripts/prebuild_gpu.sh built on the CPU machine, on the machine this runs on
# (the GPU machine), in place of building them: only when they were built from this tree's sources and
# every one of them finds its libraries here.
#
#   scripts/use_prebuilt.sh TARBALL [ARCH [SET]]
#
# Exit 0: installed at their paths (train_gpt2_ls, build/dev/..., build/test_gpu/...), one line saying
# what. Exit 77: not usable here, one line saying why (the caller builds instead): a missing tarball,
# another architecture (ARCH, default 90), make settings from the environment (CUBLASLT_LAZY,
# USE_NCCL, USE_MPI, HOST_BUILD, NVCCFLAGS, HOST_OPT, CXXFLAGS, NVCC, CXX: the prebuild sets none), another set of programs (SET: lease or paper, as
# prebuild_gpu.sh's --set; paper is also met by lease; default either), other sources (scripts/build_digest.sh differs), or a
# program whose library this machine lacks (ldd; the cuBLASLt the trainer loads at run time, by loading
# it). Nothing is installed unless every check passes.
# Exit 2: bad usage.
set -uo pipefail
tarball=${1:-}
[[ -z $tarball || $tarball == /* ]] || tarball=$PWD/$tarball  # the tarball as named from the caller's folder
cd "$(dirname "$0")/.." || exit 2
arch=${2:-90}
want_set=${3:-}
[[ -n $tarball ]] || { echo "usage: scripts/use_prebuilt.sh TARBALL [ARCH [SET]]" >&2; exit 2; }
unusable() { echo "prebuilt programs not used: $1"; exit 77; }
[[ -r $tarball ]] || unusable "$tarball is not there (carry it: scripts/prebuild_gpu.sh says how)"
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
tar xzf "$tarball" -C "$tmp" 2>"$tmp/tar.err" || unusable "$tarball does not unpack ($(head -n 1 "$tmp/tar.err"))"
[[ -r $tmp/PREBUILT ]] || unusable "$tarball holds no PREBUILT record"
field() { sed -n "s/^$1 //p" "$tmp/PREBUILT" | head -n 1; }
[[ $(field arch) == "$arch" ]] || unusable "built for sm_$(field arch), this run is for sm_$arch"
# the lease set holds the paper set's three programs too
[[ -z $want_set || $(field set) == "$want_set" || ($want_set == paper && $(field set) == lease) ]] || unusable "it is the $(field set) set, this run needs the $want_set set (scripts/prebuild_gpu.sh --set $want_set)"
# the Makefile's variables a caller can set from outside: the prebuild ran with none of them set
for v in CUBLASLT_LAZY USE_NCCL USE_MPI HOST_BUILD NVCCFLAGS HOST_OPT CXXFLAGS NVCC CXX; do
  [[ -z ${!v:-} ]] || unusable "this run's environment sets $v=${!v}, the prebuilt programs were built without it"
done
[[ $(field precision) == BF16 ]] || unusable "built in precision $(field precision), not BF16"
here=$(scripts/build_digest.sh .) || unusable "scripts/build_digest.sh failed here"
[[ $(field digest) == "$here" ]] ||
  unusable "built from other sources (commit $(field commit | cut -c1-12), digest $(field digest); this tree's digest $here)"
read -r -a programs <<<"$(field programs)"
[[ ${#programs[@]} -gt 0 ]] || unusable "PREBUILT lists no programs"
for p in "${programs[@]}"; do
  [[ -x $tmp/$p ]] || unusable "$p is listed but not in $tarball"
  # ldd -r: every library and every symbol version the program needs, found here; without ldd, the
  # dynamic loader's own listing (what ldd runs)
  if command -v ldd >/dev/null; then libs=$(ldd -r "$tmp/$p" 2>&1)
  else libs=$(LD_TRACE_LOADED_OBJECTS=1 "$tmp/$p" 2>&1) || unusable "$p does not load here (no ldd; the loader said: $(head -n 1 <<<"$libs"))"
  fi
  missing=$(grep -E "not found|undefined symbol" <<<"$libs" | head -n 1 | sed 's/^[[:space:]]*//')
  [[ -z $missing ]] || unusable "$p needs a library this machine lacks ($missing)"
done
# the cuBLASLt the trainer and the generator load at their first matmul (no link-time library, so ldd
# does not see it): loaded here as they would load it, by name (the dynamic linker's search), else
# from the folder the build gave them; a build here gives them this machine's toolkit folder instead
read -r lt_name lt_dir <<<"$(field cublaslt)"
if [[ -n ${lt_name:-} ]] && command -v python3 >/dev/null; then
  loads() { python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$1" 2>/dev/null; }
  loads "$lt_name" || loads "$lt_dir/$lt_name" ||
    unusable "the trainer loads $lt_name at its first matmul, and neither the dynamic linker nor $lt_dir (the build machine's toolkit folder) has it here"
fi
for p in "${programs[@]}"; do
  mkdir -p "$(dirname "$p")" && cp -f "$tmp/$p" "$p" || { echo "error: could not install $p" >&2; exit 1; }
done
# the Makefile's link stamps (which compiler, how cuBLASLt is linked) describe the programs they sat
# beside: removed, so that a later make relinks the trainer and the generator rather than keep these
mkdir -p build && rm -f build/cublaslt-link build/compiler-train_gpt2_ls build/compiler-generate_gpt2_ls &&
  cp "$tmp/PREBUILT" build/prebuilt.installed
echo "prebuilt programs installed: ${#programs[@]}, built at commit $(field commit | cut -c1-12) ($(field built); $(field nvcc)); sources' digest $here, this tree's"
