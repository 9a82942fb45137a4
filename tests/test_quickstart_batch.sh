#!/usr/bin/env bash
# launch/quickstart.sh --np N fits configs/tiny.json's batch to N ranks, and sluice train's
# batch error says what would fit (README, "The two commands"):
#   - --dry-run prints the training command and does nothing else; for 2 ranks it is the one the
#     quickstart has always run (no batch override); for every N of 1 .. 32 the batch it sets is
#     a whole number of micro-batches on every rank;
#   - 3 and 4 ranks get past sluice train's batch check with those settings (the run then stops
#     at the missing corpus), and the unchanged config on 3 and 4 ranks is refused with the
#     micro_batch_size or global_batch_tokens that would fit.
# usage: test_quickstart_batch.sh SLUICE_BINARY WORK_DIR
set -euo pipefail
sluice=$(realpath "$1")
work=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/cli_lib.sh"
mpi_env
fresh_workdir "$work"
config=$repo/configs/tiny.json

# args N: the quickstart's `sluice train` arguments after the config, one a line
args() {
    local line cmd
    line=$("$repo/launch/quickstart.sh" --np "$1" --dry-run)
    eval "cmd=($line)"
    [ "${cmd[0]} ${cmd[1]} ${cmd[3]} ${cmd[4]}" = "launch/mpirun.sh $1 train configs/tiny.json" ] ||
        fail "--np $1 --dry-run printed an unexpected command: $line"
    printf '%s\n' "${cmd[@]:5}"
}
checks=$((checks + 1))
want2=$'--set\nparallel.expert_parallel=2\n--set\ntraining.out_dir=runs/quickstart'
[ "$(args 2)" = "$want2" ] || fail "2 ranks: the quickstart's command changed: $(args 2)"
# the tiny config's numbers
num() { grep -o "\"$1\": *[0-9]*" "$config" | grep -o '[0-9]*$'; }
seq_len=$(num seq_len)
for n in $(seq 1 32); do
    micro=$(num micro_batch_size) global=$(num global_batch_tokens)
    while read -r a; do
        case "$a" in
        training.micro_batch_size=*) micro=${a#*=} ;;
        training.global_batch_tokens=*) global=${a#*=} ;;
        esac
    done < <(args "$n")
    check "--np $n: global batch $global a whole number of micro-batches of $micro x $seq_len on $n ranks" \
        [ $((global % (seq_len * micro * n))) -eq 0 -a "$micro" -ge 1 -a "$micro" -le 8 ]
done

# train N [ARGS...]: the tiny config on N ranks in an empty directory (no corpus)
train() {
    local n=$1
    shift
    mpirun -np "$n" "$sluice" train "$config" "$@" 2>&1 || true
}
for n in 3 4; do
    mapfile -t qa < <(args "$n")
    out=$(train "$n" "${qa[@]}")
    check "--np $n: the quickstart's batch passes sluice train's check (got: $(grep error <<<"$out" | head -2))" \
        grep -Eq "data/kjv/(train|eval): cannot open" <<<"$out" # the data, checked after the batch
done
out=$(train 3)
check "3 ranks: the batch error suggests micro_batch_size 5 with 3840 tokens, or a multiple of 6144 ($out)" \
    grep -q "training.micro_batch_size = 5 with global_batch_tokens = 3840 would.*a multiple of 6144" <<<"$out"
check "3 ranks: the batch error is printed once" [ "$(grep -c "is not a multiple" <<<"$out")" -eq 1 ]
out=$(train 4)
check "4 ranks: the batch error suggests micro_batch_size 4, 2 or 1 ($out)" \
    grep -q "training.micro_batch_size = 4, 2 or 1 would divide it (e.g. --set training.micro_batch_size=4)" <<<"$out"
expect_exit 2 "--np needs a positive integer" "$repo/launch/quickstart.sh" --np 0 --dry-run

echo "test_quickstart_batch: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
