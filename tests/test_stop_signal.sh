#!/usr/bin/env bash
# A stop signal ends a training run after a checkpoint of its current step (trainer/
# stop_signal.h, docs/checkpoint-format.md "Stopping a run"), and --resume auto continues it:
#   1. one process, SIGTERM: exit 75, the "stopping after step N" line once, checkpoint step-N
#      committed, a "stop" event in metrics.jsonl, no final/; resumed with --resume auto it
#      finishes from step N (a shorter schedule, so that the test ends);
#   2. mpirun -np 2 with SIGUSR1 sent to mpirun (Open MPI forwards it to every rank): exit 75,
#      the line once for the job (rank 0; "on 2 ranks", or "on 1 rank" when the forwarded
#      signal reaches the second rank after the step's sum), checkpoint committed;
#   3. mpirun -np 2 with SIGTERM sent to one rank only: the other learns of it in the step's
#      sum and both stop after the same step ("SIGTERM on 1 rank"), exit 75;
#   4. launch/mpirun.sh 2 on a terminal (script(1) gives it one) and Ctrl-C typed there: mpirun
#      alone would kill the ranks at once; the wrapper's mpirun runs in a session of its own and
#      the Ctrl-C reaches the ranks as SIGUSR1: exit 75, the wrapper's line once, the stopping
#      line once (SIGUSR1), checkpoint committed.
# usage: test_stop_signal.sh SLUICE WORKDIR [MPIEXEC]
set -uo pipefail
. "$(dirname "$0")/cli_lib.sh"
wrapper=$(cd "$(dirname "$0")/.." && pwd)/launch/mpirun.sh # before the work folder's cd
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
        # the ranks' command lines start with sluice's path (mpirun's with mpirun); the later
        # of the two by start time, not by pid (pids wrap)
        target=$(pgrep -n -f "^$(sed 's/[][\\.*^$+?(){}|]/\\&/g' <<<"$sluice") train run.json --set training.out_dir=$name\$")
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
# mpirun forwards the signal to each rank in turn: on a loaded machine one rank can see it
# before the step's sum and the other after it (both stop after the same step either way)
stopped usr1 '[12]'


signal_run rank1 rank1 TERM "$mpiexec" -np 2 "$sluice" train run.json --set training.out_dir=rank1
stopped rank1 1

# 4. Ctrl-C on a terminal: script(1) runs the wrapper on a pseudo-terminal whose input is the
# pipe below; the byte 0x03 written there after the tenth step is the terminal's Ctrl-C
# (SIGINT to the wrapper's process group). The pipe stays open until the ranks are gone.
if command -v script >/dev/null && command -v setsid >/dev/null && command -v mpirun >/dev/null; then
    # the out_dir by its absolute path: what pgrep looks for is this test's run alone
    ctrlc=$PWD/ctrlc
    # script(1) runs the command with "$SHELL -c": SHELL=/bin/sh here, whatever the caller's
    # (unset in CI, a nologin shell under sudo), and exec, as a dash that stayed would wait for
    # the wrapper in the terminal's foreground group and die of the Ctrl-C itself (130), where
    # a user's interactive shell gives the wrapper the terminal. env --default-signal=INT: a
    # SIGINT ignored by whoever started the test (a background job of a script) would stay
    # ignored in the wrapper, whose trap then never runs.
    cmd="exec env --default-signal=INT $(printf '%q ' "$wrapper" 2 "$sluice" train run.json --set "training.out_dir=$ctrlc")"
    {
        for ((i = 0; i < 600; i++)); do
            [ "$(tr '\r' '\n' <ctrlc.raw 2>/dev/null | grep -c '^step ')" -ge 10 ] && break
            sleep 0.1
        done
        printf '\003'
        sleep 1
        for ((i = 0; i < 1200; i++)); do
            pgrep -f "training.out_dir=$ctrlc" >/dev/null || break
            sleep 0.1
        done
    } | SHELL=/bin/sh timeout -k 5 150 script -qfec "$cmd" /dev/null >ctrlc.raw 2>&1
    echo $? >ctrlc.rc
    tr -d '\r' <ctrlc.raw >ctrlc.log
    pkill -KILL -f "training.out_dir=$ctrlc" 2>/dev/null
    stopped ctrlc '[12]'
    # (after the terminal's echo of the Ctrl-C, ^C)
    check "ctrlc: the wrapper's line once" \
        [ "$(grep -c 'mpirun.sh: Ctrl-C: stopping after the current step' ctrlc.log)" = 1 ]
    check "ctrlc: the Ctrl-C reached the ranks as SIGUSR1" grep -q '^stopping after step .*(SIGUSR1 on' ctrlc.log
else
    echo "test_stop_signal: case 4 skipped: script, setsid or mpirun not found"
fi

[ "$failures" = 0 ] && echo "test_stop_signal: all $checks checks passed"
exit $((failures > 0))
