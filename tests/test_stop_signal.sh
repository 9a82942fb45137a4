#!/usr/bin/env bash
# A stop signal ends a training run after a checkpoint of its current step (trainer/
# stop_signal.h, docs/checkpoint-format.md "Stopping a run"), and --resume auto continues it:
#   1. one process, SIGTERM: exit 75, the "stopping after step N" line once, checkpoint step-N
#      committed, a "stop" event in metrics.jsonl, no final/; resumed with --resume auto it
#      finishes from step N (a shorter schedule, so that the test ends);
#   2. mpirun -np 2 with SIGUSR1 sent to mpirun (Open MPI forwards it to every rank): exit 75,
#      the line once for the job (rank 0), checkpoint committed;
#   3. mpirun -np 2 with SIGTERM sent to one rank only: the other learns of it in the step's
#      sum and both stop after the same step ("SIGTERM on 1 rank"), exit 75.
# usage: test_stop_signal.sh SLUICE WORKDIR [MPIEXEC]
set -uo pipefail
. "$(dirname "$0")/cli_lib.sh"
mpi_script_start test_stop_signal.sh "$@"
word_corpus 3 3000 12 the king went up to city and his son spake unto people >train.txt
line_data "$sluice" train 2048 train.txt
{
    echo '{'
    moe_model_json 8
    cat <<'JSON'
 "training": {"seq_len": 16, "micro_batch_size": 2, "global_batch_tokens": 64,
              "max_steps": 1000000, "lr": 1e-2, "warmup_steps": 1, "log_every": 1,
              "save_every": 0, "eval_every": 0, "seed": 5},
 "data": {"train": "train"},
 "backend": {"threads": 1}}
JSON
} >run.json

# signal_run NAME WHO SIGNAL COMMAND...: starts COMMAND (output in NAME.log, exit status in
# NAME.rc), waits for its tenth step line, sends SIGNAL to WHO ("self": the started process,
# "rank1": the second sluice process of the job), waits for the end (at most 120 s).
signal_run() {
    local name=$1 who=$2 sig=$3 pid target i
    shift 3
    "$@" >"$name.log" 2>&1 &
    pid=$!
    for ((i = 0; i < 600; i++)); do
        [ "$(grep -c '^step ' "$name.log")" -ge 10 ] && break
        sleep 0.1
    done
    target=$pid
    if [ "$who" = rank1 ]; then
        target=$(pgrep -f "sluice train run.json --set training.out_dir=$name" | sort -n | tail -1)
    fi
    kill -"$sig" "$target"
    for ((i = 0; i < 1200; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        fail "$name: still running 120 s after $sig"
        pkill -KILL -f "training.out_dir=$name"
    fi
    wait "$pid"
    echo $? >"$name.rc"
}

# stopped NAME RANKS: exit 75, one stopping line naming RANKS rank(s), its step's checkpoint
# committed and pointed to by latest, the stop event, no final/; the step in stop_step
stopped() {
    local name=$1 ranks=$2 step
    check "$name: exit 75 (got $(cat "$name.rc"))" [ "$(cat "$name.rc")" = 75 ]
    check "$name: one stopping line" [ "$(grep -c '^stopping after step' "$name.log")" = 1 ]
    step=$(sed -n "s/^stopping after step \([0-9]*\) of 1000000 (SIG[A-Z0-9]* on $ranks rank.*committed; continue with --resume auto$/\1/p" "$name.log")
    check "$name: the stopping line names the step and $ranks rank(s)" [ -n "$step" ]
    check "$name: checkpoint step-$step committed" [ -f "$name/checkpoints/step-$step/COMMIT" ]
    check "$name: latest is step-$step" grep -qx "step-$step" "$name/checkpoints/latest"
    check "$name: the stop event" grep -q "{\"event\": \"stop\", \"step\": $step, \"signal\": \"SIG" "$name/metrics.jsonl"
    check "$name: no final/" [ ! -e "$name/final" ]
    [ -n "$step" ] || { grep -v '^step ' "$name.log" >&2; }
    stop_step=${step:-0}
}

signal_run one self TERM "$sluice" train run.json --set training.out_dir=one
stopped one 1
step=$stop_step
"$sluice" train run.json --set training.out_dir=one --resume auto \
    --set training.max_steps=$((step + 2)) >resume.log 2>&1
check "resume: exit 0" [ $? = 0 ]
check "resume: from step $step" grep -q "resumed from one/checkpoints/step-$step at step $step" resume.log
check "resume: final/ written" [ -f one/final/config.json ]

signal_run usr1 self USR1 "$mpiexec" -np 2 "$sluice" train run.json --set training.out_dir=usr1
stopped usr1 2

signal_run rank1 rank1 TERM "$mpiexec" -np 2 "$sluice" train run.json --set training.out_dir=rank1
stopped rank1 1

[ "$failures" = 0 ] && echo "test_stop_signal: all $checks checks passed"
exit $((failures > 0))
