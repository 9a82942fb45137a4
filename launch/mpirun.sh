#!/usr/bin/env bash
# Runs a sluice command on N ranks of this machine with Open MPI.
#
# usage: launch/mpirun.sh N sluice-command [args...]
#   e.g. launch/mpirun.sh 2 build/launch/sluice train configs/tiny.json \
#            --set parallel.expert_parallel=2
#
# - splits the cores evenly: each rank gets max(1, cores / N) OpenMP threads
#   (passed as --set backend.threads=T when the command is `sluice train`);
# - oversubscribes when N exceeds the cores, and allows running as root;
# - does not pin ranks (--bind-to none), so each rank's threads can use their share.
# On a cluster use Slurm (launch/slurm.sbatch) or your site's mpirun options instead.
set -euo pipefail
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
np=$1
shift
cores=$(nproc)
threads=$((cores / np))
[ "$threads" -ge 1 ] || threads=1
opts=(-np "$np" --bind-to none)
[ "$np" -le "$cores" ] || opts+=(--oversubscribe)
# Open MPI refuses root unless told; CI and containers run as root.
[ "$(id -u)" -ne 0 ] || opts+=(--allow-run-as-root)
extra=()
if [ $# -ge 2 ] && [ "$(basename "$1")" = sluice ] && [ "$2" = train ]; then
    extra=(--set "backend.threads=$threads")
fi
export OMP_NUM_THREADS=$threads
exec mpirun "${opts[@]}" -x OMP_NUM_THREADS "$@" "${extra[@]}"
