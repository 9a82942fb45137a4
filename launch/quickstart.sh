#!/usr/bin/env bash
# Quickstart: trains the tiny gated-attention MoE (128 experts, top-8) on the King James
# Bible on this machine's CPU, with 2 MPI ranks and expert parallelism 2.
#
# usage: launch/quickstart.sh [--np N] [--steps S] [--dry-run]
#   --np N     ranks (default 2). configs/tiny.json's batch (micro-batches of 8 x 256 tokens,
#              4096 tokens a step) fits 1 and 2 ranks; for other N the quickstart sets the
#              largest training.micro_batch_size that divides it, or when none does (N not a
#              power of two, or above 16) training.global_batch_tokens = micro_batch_size x
#              256 x N with the largest micro_batch_size up to 8 that stays within 4096 tokens
#              (at least 1: N = 3 gets 5 and 3840 tokens, N = 17 gets 1 and 4352)
#   --dry-run  print the training command for these options, and do nothing else
#   1. installs missing Debian packages (as root; otherwise prints the apt-get line, exits 1)
#   2. builds sluice in Release (build/)
#   3. prepares data/kjv: the text from Debian's bible-kjv, every 20th verse held out for
#      evaluation, both tokenized into zstd token shards (never committed)
#   4. trains configs/tiny.json; prints the held-out loss at the start and at the end
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
np=2
steps=
dry_run=0
while [ $# -gt 0 ]; do
    case "$1" in
    --np | --steps)
        if ! [[ "${2:-}" =~ ^[0-9]+$ ]] || [ "$2" -lt 1 ] || [ "$2" -gt 1000000 ]; then
            echo "quickstart: $1 needs a positive integer, got '${2:-}'" >&2
            exit 2
        fi
        if [ "$1" = --np ]; then np=$2; else steps=$2; fi
        shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $1" >&2; exit 2 ;;
    esac
done
sluice=build/launch/sluice
data=data/kjv

# The training command. configs/tiny.json's numbers, read from it:
config=configs/tiny.json
tiny() { grep -o "\"$1\": *[0-9]*" "$config" | grep -o '[0-9]*$'; }
seq_len=$(tiny seq_len)
micro=$(tiny micro_batch_size)
global=$(tiny global_batch_tokens)
experts=$(tiny num_experts)
ep=$np
[ $((experts % ep)) -eq 0 ] || ep=1
args=(--set "parallel.expert_parallel=$ep" --set training.out_dir=runs/quickstart)
# the global batch must be a whole number of micro-batches on every rank
if [ $((global % (seq_len * micro * np))) -ne 0 ]; then
    m=$micro
    while [ "$m" -gt 1 ] && [ $((global % (seq_len * m * np))) -ne 0 ]; do m=$((m - 1)); done
    if [ $((global % (seq_len * m * np))) -ne 0 ]; then # no micro-batch size divides it
        m=$((global / (seq_len * np)))
        [ "$m" -ge 1 ] || m=1
        [ "$m" -le "$micro" ] || m=$micro
        global=$((seq_len * m * np))
        args+=(--set "training.global_batch_tokens=$global")
    fi
    args+=(--set "training.micro_batch_size=$m")
fi
[ -z "$steps" ] || args+=(--set "training.max_steps=$steps" --set "training.warmup_steps=$((steps / 10))")
train=(launch/mpirun.sh "$np" "$sluice" train "$config" "${args[@]}")
if [ "$dry_run" -eq 1 ]; then
    printf '%q ' "${train[@]}"
    printf '\n'
    exit 0
fi

echo "== 1/4 dependencies"
launch/install-deps.sh --corpus

# where nvcc exists the build compiles the CUDA kernels too (SLUICE_CUDA=AUTO): minutes more
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "== 2/4 build (Release, the CUDA kernels included: several minutes the first time)"
else
    echo "== 2/4 build (Release: a few minutes the first time)"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF >/dev/null
cmake --build build -j "$(nproc)" --target sluice >/dev/null

echo "== 3/4 corpus"
if [ ! -f "$data/.ready" ]; then
    mkdir -p "$data"
    bible -f Gen1:1-Rev22:21 > "$data/kjv.txt"
    awk 'NR % 20 != 0' "$data/kjv.txt" > "$data/train.txt"
    awk 'NR % 20 == 0' "$data/kjv.txt" > "$data/eval.txt"
    # Frames of 64k tokens: every rank gets a share of both sets.
    "$sluice" data build --quiet --force --frame-tokens 65536 -o "$data/train" "$data/train.txt"
    "$sluice" data build --quiet --force --frame-tokens 16384 -o "$data/eval" "$data/eval.txt"
    touch "$data/.ready"
fi
"$sluice" data info "$data/train" | sed -n '2,3p'

ranks=ranks
[ "$np" != 1 ] || ranks=rank
echo "== 4/4 train configs/tiny.json on $np $ranks ($global tokens a step)"
# the quickstart's own run starts over each time (sluice train refuses to start a new run in
# an out_dir that holds one)
if [ -d runs/quickstart ]; then
    echo "(replacing the previous runs/quickstart)"
    rm -rf runs/quickstart
fi
rc=0
"${train[@]}" || rc=$?
if [ "$rc" -eq 75 ]; then # Ctrl-C (launch/mpirun.sh) or a stop signal: a checkpoint, no final/
    echo "stopped with a checkpoint in runs/quickstart/checkpoints (running the quickstart again"
    echo "starts over and removes it); to continue it:"
    printf '  %q' "${train[@]}" --resume auto
    printf '\n'
    exit 75
fi
[ "$rc" -eq 0 ] || exit "$rc"
echo "weights: runs/quickstart/final (safetensors + config.json); metrics: runs/quickstart/metrics.jsonl"
# the run's held-out loss is over the first training.eval_tokens tokens of the set
echo "evaluate again (the run's $(tiny eval_tokens) held-out tokens; leave out --max-tokens for all of them):"
echo "  $sluice eval --weights runs/quickstart/final --data $data/eval --max-tokens $(tiny eval_tokens)"
