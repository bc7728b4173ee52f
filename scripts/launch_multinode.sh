#!/usr/bin/env bash
# Multi-node data-parallel training with Open MPI and a hostfile (docs/multigpu.md).
#   scripts/launch_multinode.sh HOSTFILE NPROCS [train_gpt2_ls flags...]
# HOSTFILE lines look like "node1 slots=8" (one slot per GPU). Every node needs the same
# train_gpt2_ls at the same path, and -i data and -o output on a shared file system.
# MPI bootstraps NCCL; each process uses GPU = its local rank (OMPI_COMM_WORLD_LOCAL_RANK).
# Extra mpirun options: MPIRUN_ARGS="--mca btl_tcp_if_include eth0" scripts/launch_multinode.sh ...
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 HOSTFILE NPROCS [train_gpt2_ls flags...]" >&2
    exit 2
fi
HOSTFILE=$1; NPROCS=$2; shift 2
[ -f "$HOSTFILE" ] || { echo "error: hostfile $HOSTFILE not found" >&2; exit 2; }
BIN=${TRAIN_GPT2_LS:-$(cd "$(dirname "$0")/.." && pwd)/train_gpt2_ls}
# -x: forward the environment NCCL and OpenMP read, those variables that are set (Open MPI warns about
# each unset one); --bind-to none lets OpenMP use the cores.
forward=()
for v in PATH LD_LIBRARY_PATH NCCL_DEBUG NCCL_SOCKET_IFNAME OMP_NUM_THREADS; do
    [ -n "${!v+set}" ] && forward+=(-x "$v")
done
exec mpirun -np "$NPROCS" --hostfile "$HOSTFILE" --bind-to none "${forward[@]}" \
    ${MPIRUN_ARGS:-} "$BIN" --device cuda "$@"
