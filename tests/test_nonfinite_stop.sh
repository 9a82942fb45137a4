#!/usr/bin/env bash
# A loss or gradient that is not finite stops training (trainer/trainer.c): with a learning rate
# of 1e12 the weights blow up after the first update, and at 1 rank and at 2 (expert parallelism
# 2) the run must exit 1 printing exactly one line
#   sluice: error: step N: the loss or gradient is not finite (loss L, grad norm G); stopping. Try a lower training.lr.
# (the loss and norm are the global batch's, the same on every rank: one message, no rank tag),
# and leave nothing of step N: no checkpoint (saves every step: the newest is step N - 1), no
# metrics record, no final/ weights.
# usage: test_nonfinite_stop.sh SLUICE WORKDIR [MPIEXEC]
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

mpi_script_start test_nonfinite_stop.sh "$@"

word_corpus 3 400 12 "the king went up to the city and his son spake unto the people" >corpus.txt
line_data "$sluice" data/train 1024 corpus.txt
cat >nf.json <<EOF
{
$(moe_model_json 8)
  "training": {
    "seq_len": 16, "micro_batch_size": 2, "global_batch_tokens": 64, "max_steps": 10,
    "lr": 1e12, "min_lr": 1, "warmup_steps": 1, "seed": 7, "log_every": 1, "save_every": 1,
    "keep_last": 10
  },
  "data": {"train": "data/train"},
  "backend": {"threads": 1}
}
EOF

# nonfinite NAME NP [ARGS...]: trains on NP ranks and checks how the run stopped
nonfinite() {
    local name=$1 np=$2
    shift 2
    local f0=$failures rc=0
    local launcher=()
    [ "$np" = 1 ] || launcher=("$mpiexec" --allow-run-as-root --oversubscribe -np "$np")
    "${launcher[@]}" "$sluice" train nf.json --set "training.out_dir=runs/$name" "$@" \
        >"$name.out" 2>&1 || rc=$?
    check "$name: the run must exit 1 (exit $rc)" [ "$rc" -eq 1 ]
    local re='^sluice: error: step [0-9]+: the loss or gradient is not finite \(loss [^,]+, grad norm [^)]+\); stopping\. Try a lower training\.lr\.$'
    check "$name: the stop is printed exactly once, as the job's error" \
        [ "$(grep -cE "$re" "$name.out")" -eq 1 ]
    check "$name: no other line says 'not finite'" [ "$(grep -c "not finite" "$name.out")" -eq 1 ]
    local n
    n=$(sed -nE 's/^sluice: error: step ([0-9]+): the loss or gradient is not finite.*/\1/p' \
        "$name.out" | head -1)
    if [ -z "$n" ]; then
        fail "$name: no step in the message"
    else
        check "$name: the bad step ($n) is after the first" [ "$n" -ge 2 ]
        check "$name: no checkpoint of step $n" [ ! -e "runs/$name/checkpoints/step-$n" ]
        check "$name: the newest checkpoint is step $((n - 1))" \
            [ "$(cat "runs/$name/checkpoints/latest" 2>/dev/null)" = "step-$((n - 1))" ]
        check "$name: no metrics record of step $n" \
            [ "$(grep -c "^{\"step\": $n," "runs/$name/metrics.jsonl")" -eq 0 ]
        check "$name: the metrics end at step $((n - 1))" \
            grep -q "^{\"step\": $((n - 1))," "runs/$name/metrics.jsonl"
    fi
    check "$name: no final/ weights" [ ! -e "runs/$name/final" ]
    [ "$failures" -eq "$f0" ] || show "$name.out"
}

nonfinite np1 1
nonfinite np2_ep2 2 --set parallel.expert_parallel=2

echo "test_nonfinite_stop: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
