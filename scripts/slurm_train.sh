#!/usr/bin/env bash
# Data-parallel training under Slurm, one task per GPU (docs/multigpu.md).
#   sbatch --nodes 2 scripts/slurm_train.sh [train_gpt2_ls flags...]
# Two ways to start the processes (LAUNCH=mpi|file):
#   mpi   srun --mpi=pmix: MPI bootstraps NCCL (needs a train_gpt2_ls built with MPI)
#   file  no MPI: every task reads its rank/world/GPU from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID
#         and NCCL's id is exchanged through --rendezvous on a shared file system (RDV_DIR)
# --kill-on-bad-exit=1: a failing task ends every task (no rank waits forever in a collective).
#SBATCH --job-name=train_gpt2_ls
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --output=slurm-%j.out
set -euo pipefail
BIN=${TRAIN_GPT2_LS:-$SLURM_SUBMIT_DIR/train_gpt2_ls}
LAUNCH=${LAUNCH:-file}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-8}
if [ "$LAUNCH" = mpi ]; then
    srun --kill-on-bad-exit=1 --mpi=pmix "$BIN" --device cuda "$@"
else
    RDV_DIR=${RDV_DIR:-$SLURM_SUBMIT_DIR/.rendezvous}
    mkdir -p "$RDV_DIR"
    srun --kill-on-bad-exit=1 "$BIN" --device cuda --rendezvous "$RDV_DIR" "$@"
fi
