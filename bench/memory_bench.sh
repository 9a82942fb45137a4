#!/usr/bin/env bash
# Peak resident memory per token of sequence for each activation memory mode (docs/memory.md).
#
#   bench/memory_bench.sh [SLUICE] [OUT_DIR]
#
# For configs/tiny.json (CPU backend) it runs `sluice train` for one optimizer step of one
# sequence (micro_batch_size 1, global batch = one sequence) at each training length and each
# training.recompute mode, and `sluice eval` of the trained weights on one sequence of each
# evaluation length (forward-only), each under /usr/bin/time -v, and prints one line per run:
# command, tokens, mode, peak RSS (KiB), KiB per token and seconds. The training run's own
# evaluations (start and end) score one sequence too, so its peak is the training step's.
#
# Environment: TRAIN_LENS (default "2048 8192 32768"), MODES (default "none attention layer"),
# EVAL_LENS (default "8192 32768 131072"), THREADS (default 2). Needs data/kjv (made by
# launch/quickstart.sh; the eval text must hold the longest EVAL_LENS + 1 bytes).
set -euo pipefail
sluice=${1:-build/launch/sluice}
out=${2:-runs/memory_bench}
train_lens=${TRAIN_LENS:-2048 8192 32768}
modes=${MODES:-none attention layer}
eval_lens=${EVAL_LENS:-8192 32768 131072}
threads=${THREADS:-2}
[ -x "$sluice" ] || { echo "memory_bench: $sluice is not an executable (build first)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "memory_bench: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
[ -d data/kjv/train ] || { echo "memory_bench: data/kjv missing (run launch/quickstart.sh)" >&2; exit 1; }
mkdir -p "$out"

# run LOG CMD...: runs CMD under /usr/bin/time -v; prints "peak_kib seconds"
run() {
    local log=$1
    shift
    if ! /usr/bin/time -v "$@" > "$log" 2>&1; then
        echo "memory_bench: failed: $* (log: $log)" >&2
        tail -5 "$log" >&2
        exit 1
    fi
    local kib secs
    kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
    secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$log" |
        awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }')
    echo "$kib $secs"
}

report() { # what tokens mode kib secs
    awk -v w="$1" -v t="$2" -v m="$3" -v k="$4" -v s="$5" \
        'BEGIN { printf "%-5s %7d tokens  %-12s peak %9d KiB  %7.1f KiB/token  %7.1f s\n", w, t, m, k, k / t, s }'
}

last_run=
for len in $train_lens; do
    for mode in $modes; do
        dir="$out/train-$len-$mode"
        rm -rf "$dir"
        read -r kib secs < <(run "$out/train-$len-$mode.log" "$sluice" train configs/tiny.json \
            --set training.seq_len="$len" --set model.max_position_embeddings="$len" \
            --set training.micro_batch_size=1 --set training.global_batch_tokens="$len" \
            --set training.max_steps=1 --set training.warmup_steps=0 \
            --set training.eval_tokens="$len" --set training.recompute="$mode" \
            --set training.out_dir="$dir" --set backend.threads="$threads")
        report train "$len" "$mode" "$kib" "$secs"
        last_run=$dir
    done
done

[ -n "$last_run" ] || exit 0
for len in $eval_lens; do
    read -r kib secs < <(run "$out/eval-$len.log" "$sluice" eval --weights "$last_run/final" \
        --data data/kjv/eval.txt --seq-len "$len" --batch 1 --max-tokens "$len" \
        --threads "$threads")
    report eval "$len" forward-only "$kib" "$secs"
done
