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
# - does not pin ranks (--bind-to none), so each rank's threads can use their share;
# - on a terminal, makes Ctrl-C stop `sluice train` after its step with a checkpoint, as it does
#   without mpirun (mpirun itself would kill the ranks at once): the first Ctrl-C reaches the
#   ranks as SIGUSR1 (exit status 75, continue with --resume auto), a second ends them at once
#   (sluice's second signal), a third kills mpirun and its ranks. Closing the terminal (SIGHUP)
#   stops the run like a first Ctrl-C; SIGTERM to this script reaches the ranks too. Off a
#   terminal (scripts, CI), or without setsid, the script is mpirun itself, as before.
# On a cluster use Slurm (launch/slurm.sbatch) or your site's mpirun options instead.
set -euo pipefail
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
    sed -n '2,/^# On a cluster/p' "$0" >&2
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
train=0
if [ $# -ge 2 ] && [ "$(basename "$1")" = sluice ] && [ "$2" = train ]; then
    extra=(--set "backend.threads=$threads")
    train=1
fi
export OMP_NUM_THREADS=$threads
if [ "$train" = 0 ] || ! [ -t 0 ] || ! command -v setsid >/dev/null; then
    exec mpirun "${opts[@]}" -x OMP_NUM_THREADS "$@" "${extra[@]}"
fi

# A terminal's Ctrl-C sends SIGINT to its whole foreground process group, and Open MPI's mpirun
# answers SIGINT by killing its ranks at once (no checkpoint). So mpirun runs in a session of
# its own, where no terminal signal reaches it (setsid; stdin from /dev/null, as it forwards
# stdin to rank 0 and sluice reads none), and each Ctrl-C here becomes a SIGUSR1 to mpirun,
# which forwards it to every rank: sluice train's stop signal.
# The traps come first: a Ctrl-C while mpirun starts is held for it, not lost with the script.
pid=
pending=0
interrupts=0
on_interrupt() {
    interrupts=$((interrupts + 1))
    [ -n "$pid" ] || { pending=1; return; }
    if [ "$interrupts" -eq 1 ]; then
        echo "mpirun.sh: Ctrl-C: stopping after the current step with a checkpoint (Ctrl-C again to end at once)" >&2
        kill -USR1 "$pid" 2>/dev/null || true
    elif [ "$interrupts" -eq 2 ]; then
        kill -USR1 "$pid" 2>/dev/null || true
    else # mpirun leads its own process group (setsid): the group goes
        kill -KILL -- -"$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
}
# a closed terminal: stop with a checkpoint, as a first Ctrl-C does (no one reads a message)
on_hangup() {
    [ "$interrupts" -eq 0 ] || return 0
    interrupts=1
    if [ -n "$pid" ]; then kill -USR1 "$pid" 2>/dev/null || true; else pending=1; fi
}
trap on_interrupt INT
trap on_hangup HUP
trap '[ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true' TERM
setsid mpirun "${opts[@]}" -x OMP_NUM_THREADS "$@" "${extra[@]}" </dev/null &
pid=$!
if [ "$pending" = 1 ]; then
    interrupts=0
    on_interrupt
fi
# wait returns early (above 128) when a trapped signal arrives: wait again while mpirun runs;
# then once more for its status, which bash keeps (the last wait may have been the cut one)
while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
rc=0
wait "$pid" || rc=$?
exit "$rc"
