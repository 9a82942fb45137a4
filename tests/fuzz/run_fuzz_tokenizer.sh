#!/bin/sh
# tests/fuzz/run_fuzz_tokenizer.sh SRC_DIR WORK_DIR [SECONDS]
#
# Builds the tokenizer fuzzer (tests/fuzz/fuzz_tokenizer.c: the tokenizer.json loader, then
# encoding with what it accepts) with clang -fsanitize=fuzzer,address,undefined, seeds it with
# variations of the tests' tiny BPE (tests/fuzz/tokenizer_seeds.py) and runs it for SECONDS
# (default 15, or $SLUICE_FUZZ_SECONDS). The same scheme as run_fuzz.sh: exit 0 no finding, 1 a
# crash/sanitizer report or a build failure of the harness, 77 (skipped) only when clang, its
# libFuzzer runtime or python3 (for the seeds) is not installed, and under CI=true not even then.
set -u
. "$(dirname "$0")/../skip_or_fail.sh"
. "$(dirname "$0")/fuzz_common.sh"
fuzz_start "$1" "$2" "${3:-}" 15
command -v python3 > /dev/null 2>&1 || skip_or_fail "fuzz: python3 not found (it writes the seeds)"

LIBS=$(pkg-config --libs libcjson libpcre2-8 libutf8proc nettle 2>/dev/null ||
    echo -lcjson -lpcre2-8 -lutf8proc -lnettle)
fuzz_build fuzz_tokenizer "$SRC/tests/fuzz/fuzz_tokenizer.c" \
    "$SRC/io/tokenizer_load.c" "$SRC/io/tokenizer_pipeline.c" "$SRC/io/tokenizer_json.c" \
    "$SRC/io/tokenizer_regex.c" "$SRC/io/tokenizer_encode.c" "$SRC/io/tokenizer_bpe.c" \
    "$SRC/io/tokenizer_map.c" "$SRC/io/tokenizer_files.c" "$SRC/core/fsutil.c" \
    "$SRC/core/log.c" $LIBS -lpthread -lm

rm -rf seeds corpus && mkdir -p seeds corpus
python3 "$SRC/tests/fuzz/tokenizer_seeds.py" seeds || exit 1
# the schema's names and the regex constructs, so that mutations reach past the checks
cat > tokenizer.dict << 'EOF'
"type"
"ByteLevel"
"Split"
"Sequence"
"NFC"
"BPE"
"TemplateProcessing"
"SpecialToken"
"Regex"
"String"
"Isolated"
"pattern"
"behavior"
"invert"
"pretokenizers"
"normalizers"
"processors"
"add_prefix_space"
"trim_offsets"
"use_regex"
"ignore_merges"
"vocab"
"merges"
"added_tokens"
"content"
"lstrip"
"rstrip"
"normalized"
"special"
"single"
"special_tokens"
"ids"
"id"
"\\p{L}"
"\\p{N}"
"\\s+"
"(?!\\S)"
"(?i:"
"(?<="
"(?>"
"[^"
"{1,3}"
"{,2}"
"\\x{"
"\\u00"
"\\\\"
"\\u0120"
"2147483646"
EOF

fuzz_run fuzz_tokenizer "$SECS" -dict=tokenizer.dict
