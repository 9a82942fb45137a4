#!/usr/bin/env bash
# Torture (issue 10, section 6): a training run that saves a checkpoint every step is killed
# with SIGKILL at random moments, many times, often in the middle of a save; every restart with
# `--resume auto` continues from the newest committed checkpoint, and every run that completes
# ends with final weights bitwise identical to an uninterrupted run's.
#
# Rounds: start `sluice train --resume auto`, SIGKILL it after a delay drawn uniformly over the
# timed uninterrupted run's wall time (fixed seed). A run that completes before its kill ends
# the attempt: its final weights are compared and checkpoints verified, and the next round
# starts a new attempt in a fresh out_dir. At least KILLS rounds, then more (up to 4 KILLS)
# until these hold, which the test asserts:
#   - at least 5 kills were followed by a resume from a step strictly between 0 and the last
#     (40): the kill landed in training, after a checkpoint, and the restart continued there;
#   - at least 1 kill landed in a save (a .tmp-* directory the round did not find left behind);
#   - within an attempt the resumed steps never go back.
# On a loaded machine the runs may be slower or faster than the reference: slower makes more
# kills land in start-up, faster more runs complete; either way more rounds make up for it.
# usage: test_resume_torture.sh SLUICE_BINARY WORK_DIR [KILLS]
set -euo pipefail
sluice=$1
work=$2
kills=${3:-20}
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"
/usr/bin/python3 - <<'PY'
import random
r = random.Random(3)
words = ["the", "king", "went", "up", "to", "city", "and", "his", "son", "spake", "unto", "people"]
open("train.txt", "w").write("\n".join(" ".join(r.choice(words) for _ in range(12))
                                       for _ in range(2000)) + "\n")
PY
"$sluice" data build --quiet --frame-tokens 2048 -o train train.txt
cat > run.json <<'JSON'
{"model": {"vocab_size": 257, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 8, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 16, "router_aux_loss_coef": 0.01, "initializer_range": 0.05},
 "training": {"seq_len": 16, "micro_batch_size": 2, "global_batch_tokens": 64, "max_steps": 40,
              "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2, "log_every": 10, "save_every": 1,
              "keep_last": 2, "seed": 7, "router_bias_update_rate": 0.02},
 "data": {"train": "train"},
 "backend": {"threads": 1}}
JSON
ref_t0=$(date +%s%N)
"$sluice" train run.json --set training.out_dir=ref > ref.log 2>&1 || { cat ref.log; exit 1; }
ref_ms=$((($(date +%s%N) - ref_t0) / 1000000))
final_step=40

max_rounds=$((4 * kills))
# Kill delays: uniform over the reference run's wall time, from a fixed seed.
read -r -a delays < <(/usr/bin/python3 -c "
import random
r = random.Random(11)
print(' '.join(f'{r.uniform(0, $ref_ms) / 1000:.3f}' for _ in range($max_rounds)))")

# tmp_names DIR: the .tmp-* names under DIR/checkpoints, one a line
tmp_names() { (cd "$1/checkpoints" 2>/dev/null && compgen -G ".tmp-*" | sort) || true; }
# finish_attempt DIR LOG: the attempt in DIR completed (LOG its last run's output): its final
# weights must equal the reference's and its checkpoints verify
finish_attempt() {
    if ! cmp -s ref/final/model.safetensors "$1/final/model.safetensors"; then
        echo "FAIL: $1: final weights differ from the uninterrupted run's"
        cat "$2"
        exit 1
    fi
    "$sluice" ckpt verify "$1/checkpoints" > verify.log 2>&1 || { cat verify.log; exit 1; }
    completed=$((completed + 1))
}

rounds=0 killed=0 mid=0 in_save=0 completed=0 attempt=1 last_resume=0 prev_killed=0
out=cut1
while [ "$rounds" -lt "$max_rounds" ]; do
    if [ "$rounds" -ge "$kills" ] && [ "$mid" -ge 5 ] && [ "$in_save" -ge 1 ]; then break; fi
    d=${delays[$rounds]}
    rounds=$((rounds + 1))
    before=$(tmp_names "$out")
    "$sluice" train run.json --set "training.out_dir=$out" --resume auto > cut.log 2>&1 &
    pid=$!
    sleep "$d"
    kill -9 "$pid" 2>/dev/null || true
    st=0
    wait "$pid" 2>/dev/null || st=$?
    if [ "$st" = 137 ]; then # killed (a run that ended first is not: kill -9 of a zombie works)
        killed=$((killed + 1))
        # a save in flight leaves a temporary directory behind; the next save removes it
        after=$(tmp_names "$out")
        [ -n "$(comm -13 <(echo "$before") <(echo "$after"))" ] && in_save=$((in_save + 1))
        now_killed=1
    elif [ "$st" = 0 ]; then # finished before the kill
        now_killed=0
    else
        echo "FAIL: $out: the run exited $st"
        cat cut.log
        exit 1
    fi
    # the step this run resumed from (its log may end before it said so)
    step=$(sed -n "s/^.*resumed from .* at step \([0-9]*\)$/\1/p" cut.log | tail -1)
    if [ -n "$step" ]; then
        if [ "$step" -lt "$last_resume" ]; then
            echo "FAIL: $out: resumed from step $step after a resume from step $last_resume"
            exit 1
        fi
        last_resume=$step
        # the previous round's kill led here: a resume from the middle of the run
        if [ "$prev_killed" = 1 ] && [ "$step" -gt 0 ] && [ "$step" -lt "$final_step" ]; then
            mid=$((mid + 1))
        fi
    fi
    prev_killed=$now_killed
    if [ "$now_killed" = 0 ]; then
        finish_attempt "$out" cut.log
        rm -rf "$out"
        attempt=$((attempt + 1)) out=cut$attempt last_resume=0 prev_killed=0
    fi
done
# the last attempt, to its end (also when no attempt completed: at least one run is compared)
if [ -d "$out" ] || [ "$completed" -eq 0 ]; then
    "$sluice" train run.json --set "training.out_dir=$out" --resume auto > last.log 2>&1 ||
        { cat last.log; exit 1; }
    step=$(sed -n "s/^.*resumed from .* at step \([0-9]*\)$/\1/p" last.log | tail -1)
    if [ "$prev_killed" = 1 ] && [ -n "$step" ] && [ "$step" -gt 0 ] && [ "$step" -lt "$final_step" ]; then
        mid=$((mid + 1))
    fi
    finish_attempt "$out" last.log
fi
echo "reference run ${ref_ms} ms; $rounds rounds: $killed kills ($in_save during a save," \
    "$mid followed by a resume from a step in 1..$((final_step - 1))), $completed runs completed"
echo "OK   every completed run's final weights bitwise identical to the uninterrupted run's"
status=0
if [ "$mid" -lt 5 ]; then
    echo "FAIL: only $mid kills were followed by a resume from the middle of the run (want 5)"
    status=1
fi
if [ "$in_save" -lt 1 ]; then
    echo "FAIL: no kill landed in a save"
    status=1
fi
exit $status
