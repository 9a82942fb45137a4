#!/bin/sh
# tests/fuzz/run_fuzz.sh SRC_DIR WORK_DIR SLUICE_BINARY [SECONDS]
#
# Builds the shard-parser fuzzer with clang -fsanitize=fuzzer,address,undefined, seeds it with
# shards made by `sluice data build`, and runs it for SECONDS (default 30, or $SLUICE_FUZZ_SECONDS).
# Exit status: 0 no finding, 1 a crash/sanitizer report or a build failure of the harness,
# 77 (skipped) only when clang or its libFuzzer runtime is not installed, and under CI=true
# not even then: a missing runtime is a failure there (tests/skip_or_fail.sh).
set -u
. "$(dirname "$0")/../skip_or_fail.sh"
. "$(dirname "$0")/fuzz_common.sh"
SLUICE=$3
fuzz_start "$1" "$2" "${4:-}" 30

ZSTD_FLAGS=$(pkg-config --cflags --libs libzstd 2>/dev/null || echo -lzstd)
fuzz_build fuzz_shard "$SRC/tests/fuzz/fuzz_shard.c" "$SRC/io/shard.c" "$SRC/io/crc32c.c" \
    "$SRC/core/log.c" $ZSTD_FLAGS -lpthread

# seeds: small shards of several shapes, each in both modes (leading byte 0 = as is, 1 = repair)
rm -rf seeds corpus && mkdir -p seeds corpus data
printf 'first document\n\nsecond document, a little longer\n\nthird\n' > data/a.txt
head -c 3000 "$SRC/docs/shard-format.md" > data/b.txt 2>/dev/null || printf 'x%.0s' $(seq 1 3000) > data/b.txt
"$SLUICE" data build --quiet --force --text-docs paragraph --frame-tokens 16 -o data/s1 data/a.txt || exit 1
"$SLUICE" data build --quiet --force --frame-tokens 1000 --level 1 -o data/s2 data/b.txt || exit 1
awk 'BEGIN { for (i = 0; i < 300; i++) printf "%c%c%c%c", i % 256, 1, 0, 0 }' > data/t.u32
"$SLUICE" data build --quiet --force --format raw --dtype uint32 --vocab 70000 --eod 5 \
    --frame-tokens 64 -o data/s3 data/t.u32 || exit 1
i=0
for f in data/s1/*.shard.zst data/s2/*.shard.zst data/s3/*.shard.zst; do
    i=$((i + 1))
    { printf '\000'; cat "$f"; } > "seeds/s$i-raw"
    { printf '\001'; cat "$f"; } > "seeds/s$i-repair"
done

fuzz_run fuzz_shard "$SECS"
