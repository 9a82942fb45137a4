#!/usr/bin/env bash
# bench/scaling_bench.sh - steady-state training tokens/s of `sluice train` at np = 1 and
# np = 2 on this machine, same model and same global batch (bench/PARALLEL.md).
#
#   bench/scaling_bench.sh [--build DIR] [--config FILE] [--steps S] [--skip K] [--reps R]
#                          [--corpus DIR] [--work DIR]
#
# Runs, R times each and interleaved (so machine load drifts hit all alike):
#   np1       sluice train, one process, backend.threads = 2
#   np2-ep2   mpirun -np 2, parallel.expert_parallel = 2, backend.threads = 1 per rank
#   np2-ep1   mpirun -np 2, parallel.expert_parallel = 1, backend.threads = 1 per rank
# each for S optimizer steps (default 20) of CONFIG (default configs/tiny.json) with
# training.global_batch_tokens unchanged (np 2 runs half the micro-batches per rank),
# no evaluation and no intermediate checkpoints. A run's figure is the median of
# tokens_per_s over steps K+1..S of its metrics JSONL (default K = 5; tokens_per_s is
# global_batch_tokens / wall time of the step on rank 0, evaluation excluded); the
# table shows each run's figure and the median over the R repetitions (default 3), plus
# the 1-minute load average before each run.
#
# The corpus (byte-level text, --frame-tokens 65536 so that both ranks get frames) is built
# with `sluice data build` from the King James Bible (`bible`, package bible-kjv) when
# installed, else /usr/share/dict/words, else generated text; it is kept in
# WORK/corpus (default WORK = build-dir/scaling-bench) and reused.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-pbench"
config="$root/configs/tiny.json"
steps=20
skip=5
reps=3
work=""
corpus=""
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "scaling_bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ "$skip" -ge "$steps" ]; then
    echo "scaling_bench.sh: --skip must be below --steps" >&2
    exit 2
fi
work=${work:-$build/scaling-bench}
corpus=${corpus:-$work/corpus}
mkdir -p "$work"

if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DSLUICE_CUDA=OFF >/dev/null
fi
if ! cmake --build "$build" -j2 --target sluice >"$work/build.log" 2>&1; then
    tail -20 "$work/build.log" >&2
    exit 1
fi
sluice="$build/launch/sluice"

# Open MPI refuses to run as root unless told
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

if ! ls "$corpus"/*.shard.zst >/dev/null 2>&1; then
    mkdir -p "$corpus"
    txt="$work/corpus.txt"
    if command -v bible >/dev/null 2>&1; then
        bible -f Gen1:1-Rev22:21 >"$txt"
        src="King James Bible (bible -f Gen1:1-Rev22:21)"
    elif [ -r /usr/share/dict/words ]; then
        # a few MB of pseudo-sentences from the word list, deterministic
        awk 'BEGIN { srand(1234) } { w[NR] = $0 }
             END { for (i = 0; i < 600000; i++) {
                       printf "%s%s", w[int(rand() * NR) + 1], (i % 12 == 11) ? ".\n" : " " } }' \
            /usr/share/dict/words >"$txt"
        src="/usr/share/dict/words (random sentences, seed 1234)"
    else
        awk 'BEGIN { srand(1234); split("the of and to in a is that for it as was with be by on not he i this are or his from at which but have an they you were her she there one all we their", w, " ");
                     for (i = 0; i < 800000; i++) printf "%s%s", w[int(rand() * 50) + 1], (i % 12 == 11) ? ".\n" : " " }' >"$txt"
        src="generated text (50 common words, seed 1234)"
    fi
    "$sluice" data build -o "$corpus" --text-docs line --frame-tokens 65536 --quiet "$txt"
    echo "corpus: $src"
fi

# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
                                               if (NR % 2) print v[(NR + 1) / 2];
                                               else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# steady-state tokens/s of one metrics file: median over steps > skip
steady() {
    sed -n 's/^{"step": \([0-9]*\),.*"tokens_per_s": \([0-9.eE+-]*\),.*/\1 \2/p' "$1" |
        awk -v skip="$skip" '$1 > skip { print $2 }' | median
}

names=(np1 np2-ep2 np2-ep1)
run() { # name rep
    local name=$1 rep=$2 out="$work/$1-$2"
    local sets=(--set 'data.eval=""' --set "data.train=\"$corpus\"" --set training.warmup_steps=1
        --set training.max_steps="$steps" --set training.log_every=1 --set training.save_every=0
        --set training.eval_every=0 --set "training.out_dir=\"$out\""
        --set "training.metrics_file=\"$out/metrics.jsonl\"")
    rm -rf "$out"
    case "$name" in
    np1) "$sluice" train "$config" "${sets[@]}" --set backend.threads=2 \
        --set parallel.expert_parallel=1 >"$out.log" 2>&1 ;;
    np2-ep2) mpirun --oversubscribe --bind-to none -np 2 "$sluice" train "$config" "${sets[@]}" \
        --set backend.threads=1 --set parallel.expert_parallel=2 >"$out.log" 2>&1 ;;
    np2-ep1) mpirun --oversubscribe --bind-to none -np 2 "$sluice" train "$config" "${sets[@]}" \
        --set backend.threads=1 --set parallel.expert_parallel=1 >"$out.log" 2>&1 ;;
    esac
}

declare -A fig load
echo "config $config, $steps steps (median tokens/s of steps $((skip + 1))..$steps), $reps repetitions, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores"
for rep in $(seq 1 "$reps"); do
    for name in "${names[@]}"; do
        load[$name-$rep]=$(cut -d' ' -f1 /proc/loadavg)
        if ! run "$name" "$rep"; then
            echo "scaling_bench.sh: $name (repetition $rep) failed; log: $work/$name-$rep.log" >&2
            tail -5 "$work/$name-$rep.log" >&2
            exit 1
        fi
        fig[$name-$rep]=$(steady "$work/$name-$rep/metrics.jsonl")
        printf '  rep %d %-8s %8.1f tokens/s  (load before %s)\n' "$rep" "$name" \
            "${fig[$name-$rep]}" "${load[$name-$rep]}"
    done
done
echo
printf '%-8s %-28s %14s   %s\n' run "ranks x threads, EP" "tokens/s (med)" "per repetition"
for name in "${names[@]}"; do
    case "$name" in
    np1) what="1 x 2, EP 1" ;;
    np2-ep2) what="2 x 1, EP 2" ;;
    np2-ep1) what="2 x 1, EP 1 (pure DP)" ;;
    esac
    all=()
    for rep in $(seq 1 "$reps"); do all+=("${fig[$name-$rep]}"); done
    med=$(printf '%s\n' "${all[@]}" | median)
    printf '%-8s %-28s %14.1f   %s\n' "$name" "$what" "$med" "${all[*]}"
done
echo "load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
