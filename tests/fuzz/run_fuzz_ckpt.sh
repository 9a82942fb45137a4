#!/bin/sh
# tests/fuzz/run_fuzz_ckpt.sh SRC_DIR WORK_DIR TEST_CHECKPOINT [SECONDS]
#
# Builds the checkpoint-parser fuzzer (tests/fuzz/fuzz_ckpt.c: rank manifests, COMMIT,
# train_state.json, the coverage index) with clang -fsanitize=fuzzer,address,undefined, seeds
# it with the JSON files of a checkpoint written by `test_checkpoint --example`, and runs it for
# SECONDS (default 20, or $SLUICE_FUZZ_SECONDS). The same scheme as run_fuzz.sh: exit 0 no
# finding, 1 a crash/sanitizer report or a build failure of the harness, 77 (skipped) only when
# clang or its libFuzzer runtime is not installed, and under CI=true not even then.
set -u
. "$(dirname "$0")/../skip_or_fail.sh"
. "$(dirname "$0")/fuzz_common.sh"
TESTCK=$3
fuzz_start "$1" "$2" "${4:-}" 20

CJSON_FLAGS=$(pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
fuzz_build fuzz_ckpt "$SRC/tests/fuzz/fuzz_ckpt.c" "$SRC/io/checkpoint_manifest.c" \
    "$SRC/io/checkpoint_print.c" "$SRC/io/checkpoint_index.c" \
    "$SRC/io/safetensors_common.c" "$SRC/core/log.c" $CJSON_FLAGS

# seeds: the JSON files of a real 3-rank checkpoint, each with its mode byte
rm -rf seeds corpus ex && mkdir -p seeds corpus
"$TESTCK" --example ex 3 > /dev/null || exit 1
STEP=ex/run/checkpoints/step-7
i=0
for f in "$STEP"/rank-*.manifest.json; do
    i=$((i + 1))
    { printf '\000'; cat "$f"; } > "seeds/manifest-$i"
done
{ printf '\001'; cat "$STEP/COMMIT"; } > seeds/commit
{ printf '\002'; cat "$STEP/train_state.json"; } > seeds/state
{
    printf '\003'
    cat "$STEP/rank-00000.manifest.json"
    printf '\000'
    cat "$STEP/rank-00001.manifest.json"
    printf '\000'
    cat "$STEP/rank-00002.manifest.json"
} > seeds/all
# the schema's keys, so that mutations reach past the key lookups
cat > ckpt.dict << 'EOF'
"format"
"format_version"
"step"
"rank"
"world_size"
"files"
"file"
"bytes"
"pieces"
"tensor"
"dtype"
"shape"
"begin"
"end"
"offset"
"crc32c"
"train_state"
"manifests"
"sluice_version"
"trainer"
"sluice-checkpoint"
"sluice-checkpoint-manifest"
"F32"
"BF16"
"9007199254740992"
"4294967295"
"1e300"
"-0"
EOF

fuzz_run fuzz_ckpt "$SECS" -dict=ckpt.dict
