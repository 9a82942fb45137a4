#!/usr/bin/env bash
# Quickstart: trains the tiny gated-attention MoE (128 experts, top-8) on the King James
# Bible on this machine's CPU, with 2 MPI ranks and expert parallelism 2.
#
# usage: launch/quickstart.sh [--np N] [--steps S]
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
while [ $# -gt 0 ]; do
    case "$1" in
    --np) np=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $1" >&2; exit 2 ;;
    esac
done

echo "== 1/4 dependencies"
launch/install-deps.sh --corpus

echo "== 2/4 build (Release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF >/dev/null
cmake --build build -j "$(nproc)" --target sluice >/dev/null
sluice=build/launch/sluice

echo "== 3/4 corpus"
data=data/kjv
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

echo "== 4/4 train configs/tiny.json on $np ranks"
ep=$np
[ $((128 % ep)) -eq 0 ] || ep=1
args=(--set "parallel.expert_parallel=$ep" --set training.out_dir=runs/quickstart)
[ -z "$steps" ] || args+=(--set "training.max_steps=$steps" --set "training.warmup_steps=$((steps / 10))")
# the quickstart's own run starts over each time (sluice train refuses to start a new run in
# an out_dir that holds one)
if [ -d runs/quickstart ]; then
    echo "(replacing the previous runs/quickstart)"
    rm -rf runs/quickstart
fi
launch/mpirun.sh "$np" "$sluice" train configs/tiny.json "${args[@]}"
echo "weights: runs/quickstart/final (safetensors + config.json); metrics: runs/quickstart/metrics.jsonl"
echo "evaluate again: $sluice eval --weights runs/quickstart/final --data $data/eval"
