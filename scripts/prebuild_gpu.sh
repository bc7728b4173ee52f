#!/usr/bin/env bash
# Build the GPU programs here, on the CPU machine (nvcc compiles for sm_90 without a GPU), so that a
# GPU lease starts from them instead of spending its first ~90-130 s of device time on the build
# (docs/results: 93 s at c276bf2, 127 s in paper window 1). scripts/use_prebuilt.sh installs them
# there after checking that they were built from the same sources and load on that machine; else the
# lease builds as before.
#
#   scripts/prebuild_gpu.sh [--set lease|paper|both] [--out DIR]
#
# --set lease (default): `make gpu-targets` (the trainer, the generator, every kernel lab and GPU test),
#   the speed lease's build (scripts/gpu_check.sh, stage build); --set paper: the three programs of
#   scripts/exp_pg19.sh (train_gpt2_ls, test_cuda_model, the attention lab), small enough to travel
#   beside the PG-19 shards (the tool's carry holds 64 MiB in all); --set both: the two tarballs from one
#   build of `make gpu-targets` (the paper set's programs are among them, built by the same rules).
# --out: default prebuilt. Writes DIR/bf16-sm90-SET.tar.gz, which holds the programs at their paths and
#   PREBUILT (the commit, scripts/build_digest.sh's digest of the sources, the architecture, the
#   precision, nvcc's version, the cuBLASLt the trainer loads at run time and the folder the build gave
#   it). Name DIR/bf16-sm90-SET.tar.gz in the device call's carry and pass it as
#   GPU_CHECK_PREBUILT (gpu_check.sh) or --prebuilt (exp_pg19.sh).
#
# The build is of HEAD, in a fresh clone (never of uncommitted changes: a tracked file that differs
# from HEAD is refused), with the Makefile's defaults: MPI and NCCL as detected here (the GPU machine's
# own builds found both; PREBUILT records them, and use_prebuilt.sh's ldd check finds their libraries
# there or refuses), none of its settings from this shell's environment. CUDA_ARCH: default 90.
set -euo pipefail
cd "$(dirname "$0")/.."
set_name=lease
out=prebuilt
while [[ $# -gt 0 ]]; do
  case $1 in
    --set) set_name=${2:?--set needs lease, paper or both}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (scripts/prebuild_gpu.sh --help)" >&2; exit 2 ;;
  esac
done
case $set_name in
  lease) targets=(gpu-targets) sets=(lease) ;;
  paper) targets=(train_gpt2_ls build/test_gpu/test_cuda_model build/dev/attention_ls) sets=(paper) ;;
  both) targets=(gpu-targets) sets=(lease paper) ;;
  *) echo "error: --set $set_name: the sets are lease, paper and both" >&2; exit 2 ;;
esac
command -v nvcc >/dev/null || { echo "error: nvcc not found: the prebuilt programs need the CUDA toolkit" >&2; exit 2; }
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "error: tracked files differ from HEAD: commit them first (the prebuilt programs are HEAD's)" >&2
  exit 2
fi
arch=${CUDA_ARCH:-90}
commit=$(git rev-parse HEAD)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q . "$tmp/tree"
git -C "$tmp/tree" checkout -q "$commit"
echo "prebuild_gpu: make ${targets[*]} at ${commit:0:12} (sm_$arch, BF16) in $tmp/tree" >&2
# none of the Makefile's settings from this shell's environment (use_prebuilt.sh refuses a run that sets one)
env -u CUBLASLT_LAZY -u USE_NCCL -u USE_MPI -u HOST_BUILD -u NVCCFLAGS -u HOST_OPT -u CXXFLAGS -u NVCC -u CXX \
  make -C "$tmp/tree" -j"$(nproc)" HOST_BUILD=0 CUDA_ARCH="$arch" PRECISION=BF16 "${targets[@]}" >"$tmp/build.log" 2>&1 ||
  { tail -n 20 "$tmp/build.log" >&2; echo "error: the build failed (above)" >&2; exit 1; }
digest=$(scripts/build_digest.sh "$tmp/tree")
# the cuBLASLt the trainer and the generator load at their first matmul (llmc/cuda/cublaslt_loader.cpp):
# its name (the headers' major version) and the folder the build gave it (after the dynamic linker's
# search); ldd does not see it, so use_prebuilt.sh loads it by both. Either one not found (a build log
# without the -DLLMC_CUBLASLT_DIR line, no cublas_api.h beside nvcc): PREBUILT has no cublaslt line and
# use_prebuilt.sh skips that check, said here in one line (not an exit under set -e and pipefail)
lt_dir=$(grep -o "LLMC_CUBLASLT_DIR='\"[^\"]*\"'" "$tmp/build.log" | head -n 1 | sed "s/^LLMC_CUBLASLT_DIR='\"//; s/\"'\$//") || lt_dir=""
lt_major=$(sed -n 's/^#define CUBLAS_VER_MAJOR \([0-9]*\).*/\1/p' \
  "$(dirname "$(dirname "$(command -v nvcc)")")/include/cublas_api.h" 2>/dev/null) || lt_major=""
[[ -n $lt_dir && -n $lt_major ]] ||
  echo "warning: no cuBLASLt recorded ($([[ -z $lt_dir ]] && echo "the build log has no LLMC_CUBLASLT_DIR" || echo "no CUBLAS_VER_MAJOR in nvcc's include/cublas_api.h")): use_prebuilt.sh will not check that the trainer's cuBLASLt loads there" >&2
for set_name in "${sets[@]}"; do
  programs=(train_gpt2_ls)
  if [[ $set_name == lease ]]; then
    programs+=(generate_gpt2_ls)
    mapfile -t built < <(cd "$tmp/tree" && find build/dev build/test_gpu -maxdepth 1 -type f -perm -u+x | LC_ALL=C sort)
    programs+=("${built[@]}")
  else
    programs+=(build/test_gpu/test_cuda_model build/dev/attention_ls)
  fi
  {
    echo "commit $commit"
    echo "digest $digest"
    echo "arch $arch"
    echo "precision BF16"
    echo "set $set_name"
    echo "mpi $(grep -q -- '-DUSE_MPI' "$tmp/build.log" && echo yes || echo no) nccl $(grep -q -- '-DUSE_NCCL' "$tmp/build.log" && echo yes || echo no)"
    echo "cxx $(g++ --version | head -n 1)"
    echo "nvcc $(nvcc --version | tail -n 1)"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "programs ${programs[*]}"
    [[ -z $lt_dir || -z $lt_major ]] || echo "cublaslt libcublasLt.so.$lt_major $lt_dir"
  } >"$tmp/tree/PREBUILT"
  mkdir -p "$out"
  tarball=$out/bf16-sm$arch-$set_name.tar.gz
  tar czf "$tarball" -C "$tmp/tree" PREBUILT "${programs[@]}"
  echo "prebuild_gpu: $tarball ($(du -m "$tarball" | cut -f1) MiB, ${#programs[@]} programs, commit ${commit:0:12})"
  if [[ $set_name == lease ]]; then use="GPU_CHECK_PREBUILT=$tarball in front of scripts/gpu_lease.sh"
  else use="--prebuilt $tarball to scripts/exp_pg19.sh"; fi
  echo "prebuild_gpu: carry \"$tarball\" and give $use"
done
[[ $(scripts/build_digest.sh .) == "$digest" ]] ||
  echo "warning: this tree's sources differ from HEAD's (untracked sources travel too): use_prebuilt.sh will not take these programs for it" >&2
