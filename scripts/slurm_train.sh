#!/usr/bin/env bash
# Data-parallel training under Slurm, one task per GPU (docs/multigpu.md).
#   sbatch --nodes 2 scripts/slurm_train.sh [train_gpt2_ls flags...]
# Two ways to start the processes (LAUNCH=mpi|file):
#   mpi   srun --mpi=pmix: MPI bootstraps NCCL (needs a train_gpt2_ls built with MPI)
#   file  no MPI: every task reads its rank/world/GPU from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID
#         and NCCL's id is exchanged through --rendezvous on a shared file system (RDV_DIR)
# --kill-on-bad-exit=1: a failing task ends every task (no rank waits forever in a collective).
# Time limit (docs/training.md, "Interrupts and preemption"): --signal=USR1@60 makes Slurm send SIGUSR1 to
# every task of the job's steps (every rank; "B:USR1" would signal only this batch shell, which does not
# pass it on) 60 to 120 s before the limit; the ranks finish their step, write a checkpoint and exit
# 128+10 = 138 (143 after a SIGTERM: preemption, scancel). With REQUEUE=1 the script then requeues the
# job (submit it with --requeue where the cluster's default is not to requeue); put -y 1 among the flags
# so the requeued job resumes from that checkpoint (-y 1 on an empty -o starts at step 0).
# A fork (`--fork-from SRC -o FORK ...`, which cannot take -y 1) is submitted as it is: on a requeued
# start (SLURM_RESTART_COUNT > 0) whose FORK/config.json records the fork of SRC, the script passes
# `-o FORK ... -y 1` instead of `--fork-from SRC` (one line on stderr says so), and the trainer resumes
# the fork from its newest checkpoint, or forks again from SRC when it had none (docs/training.md).
# Reading config.json takes python3 on the node; without it the fork's flags go unchanged and the
# trainer refuses the second --fork-from (FORK holds checkpoints) with one error line.
#SBATCH --job-name=train_gpt2_ls
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@60
#SBATCH --output=slurm-%j.out
set -euo pipefail
BIN=${TRAIN_GPT2_LS:-$SLURM_SUBMIT_DIR/train_gpt2_ls}
LAUNCH=${LAUNCH:-file}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-8}
args=("$@")
if [ "${SLURM_RESTART_COUNT:-0}" != 0 ]; then  # requeued: a fork's rerun is its resume
    fork_src=""; out_dir=""; rest=(); i=0
    while [ "$i" -lt "${#args[@]}" ]; do
        a=${args[$i]}
        case $a in
            --fork-from) fork_src=${args[$((i + 1))]:-}; i=$((i + 2)); continue ;;
            --fork-from=*) fork_src=${a#--fork-from=}; i=$((i + 1)); continue ;;
            -o|--output-dir) out_dir=${args[$((i + 1))]:-} ;;
            --output-dir=*) out_dir=${a#--output-dir=} ;;
        esac
        rest+=("$a"); i=$((i + 1))
    done
    recorded=""
    if [ -n "$fork_src" ] && [ -n "$out_dir" ] && [ -f "$out_dir/config.json" ]; then
        recorded=$(python3 -c 'import json, sys; print((json.load(open(sys.argv[1])).get("forked_from") or {}).get("checkpoint", ""))' \
            "$out_dir/config.json" 2> /dev/null) || recorded=""
    fi
    if [ -n "$recorded" ] && [ "$(realpath -m "$recorded")" = "$(realpath -m "$fork_src")" ]; then
        echo "slurm_train.sh: requeued fork: resuming $out_dir with -y 1 instead of --fork-from $fork_src (its newest checkpoint, or that checkpoint again when it has none)" >&2
        args=(${rest[@]+"${rest[@]}"} -y 1)
    fi
fi
status=0
if [ "$LAUNCH" = mpi ]; then
    srun --kill-on-bad-exit=1 --mpi=pmix "$BIN" --device cuda ${args[@]+"${args[@]}"} || status=$?
else
    RDV_DIR=${RDV_DIR:-$SLURM_SUBMIT_DIR/.rendezvous}
    mkdir -p "$RDV_DIR"
    srun --kill-on-bad-exit=1 "$BIN" --device cuda --rendezvous "$RDV_DIR" ${args[@]+"${args[@]}"} || status=$?
fi
if [ "${REQUEUE:-0}" = 1 ] && { [ "$status" = 138 ] || [ "$status" = 143 ]; }; then
    echo "slurm_train.sh: the run stopped for a signal (exit $status) after a checkpoint; requeueing job $SLURM_JOB_ID" >&2
    scontrol requeue "$SLURM_JOB_ID" || echo "slurm_train.sh: scontrol requeue $SLURM_JOB_ID failed; resubmit with -y 1" >&2
fi
exit "$status"
