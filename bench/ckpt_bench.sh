#!/bin/sh
# bench/ckpt_bench.sh [--build DIR] [--dir WORK] [--mb N] [--np N] [--reps N]
#
# Checkpoint save and load throughput (io/checkpoint.h, bench/ckpt_bench.c) against `cp` and
# `cat` of the same bytes on the same disk, in the same run. Per round:
#   save        ckpt_bench save: N MiB (default 1024) of float32 tensors written by 4 ranks
#               (--np P: P MPI processes writing in parallel; default 1 process playing 4 ranks),
#               timed to the commit: every file and directory fsynced, renamed, `latest` replaced
#   load        ckpt_bench load: the page cache of the checkpoint dropped (posix_fadvise), then
#               every byte read back with every piece's CRC-32C checked; also from a warm cache
#   cp          the checkpoint's data files copied to another directory of the same file system,
#               source pages dropped first (a disk-to-disk copy, as a user would do it)
#   cp+sync     the same copy followed by `sync` of the copies (durable, as the save is)
#   cat         the data files read to /dev/null, pages dropped first (what a load must at least do)
# and prints each round's figures, then the medians and the ratios save / cp+sync, save / cp,
# load / cat and load / cp. WORK defaults to BUILD/ckpt_bench_work (the disk being measured).
set -eu
BUILD=build
WORK=
MB=1024
NP=1
REPS=3
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --dir) WORK=$2; shift 2 ;;
    --mb) MB=$2; shift 2 ;;
    --np) NP=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
    esac
done
[ -n "$WORK" ] || WORK=$BUILD/ckpt_bench_work
cmake --build "$BUILD" --target ckpt_bench > /dev/null
B=$BUILD/bench/ckpt_bench
run() {
    if [ "$NP" -gt 1 ]; then
        mpirun -np "$NP" --oversubscribe --allow-run-as-root "$B" "$@"
    else
        "$B" "$@"
    fi
}
now() { date +%s.%N; }
gbps() { awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN { printf "%.3f", b / (t1 - t0) / 1e9 }'; }
field() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"; }

echo "checkpoint bench: $MB MiB, $NP process(es), $REPS rounds, on $(df -h "$(dirname "$WORK")" | awk 'NR == 2 { print $1 " mounted at " $6 }')"
results=$(mktemp)
i=1
while [ "$i" -le "$REPS" ]; do
    rm -rf "$WORK"
    mkdir -p "$WORK/cp"
    save=$(run save "$WORK/run" --mb "$MB" --ranks 4 | field GBps)
    step=$WORK/run/checkpoints/step-1
    bytes=$(cat "$step"/rank-*.safetensors | wc -c)
    load=$(run load "$WORK/run" | field GBps)
    warm=$(run load "$WORK/run" --warm | field GBps)
    "$B" evict "$step"
    t0=$(now)
    cp "$step"/rank-*.safetensors "$WORK/cp/"
    t1=$(now)
    sync "$WORK"/cp/*
    t2=$(now)
    cp_gbps=$(gbps "$bytes" "$t0" "$t1")
    cps_gbps=$(gbps "$bytes" "$t0" "$t2")
    "$B" evict "$step"
    t0=$(now)
    cat "$step"/rank-*.safetensors > /dev/null
    t1=$(now)
    cat_gbps=$(gbps "$bytes" "$t0" "$t1")
    echo "round $i: $bytes bytes: save $save GB/s, load $load GB/s (warm cache $warm), cp $cp_gbps, cp+sync $cps_gbps, cat $cat_gbps GB/s"
    echo "$save $load $warm $cp_gbps $cps_gbps $cat_gbps" >> "$results"
    i=$((i + 1))
done
rm -rf "$WORK"
# medians per column, then the ratios
awk -v reps="$REPS" '
{ for (c = 1; c <= 6; c++) v[c, NR] = $c }
END {
    for (c = 1; c <= 6; c++) {
        n = 0
        for (r = 1; r <= NR; r++) a[++n] = v[c, r]
        for (x = 1; x <= n; x++) for (y = x + 1; y <= n; y++) if (a[y] < a[x]) { t = a[x]; a[x] = a[y]; a[y] = t }
        m[c] = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    printf "median of %d rounds (GB/s): save %.3f | load %.3f (warm %.3f) | cp %.3f | cp+sync %.3f | cat %.3f\n", NR, m[1], m[2], m[3], m[4], m[5], m[6]
    printf "ratios: save / cp+sync %.2f, save / cp %.2f, load / cat %.2f, load / cp %.2f\n", m[1] / m[5], m[1] / m[4], m[2] / m[6], m[2] / m[4]
}' "$results"
rm -f "$results"
