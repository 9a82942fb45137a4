#!/usr/bin/env bash
# End-to-end with a tokenizer: sluice data build --tokenizer -> data info / data show ->
# sluice train with data.tokenizer (its files land in final/ beside config.json; its samples,
# training.sample_every, decode with it) -> sluice generate (the tokenizer.json beside config.json)
# -> ckpt export (copies them, checking the recorded SHA-256); and the refusals: shards whose vocabulary does
# not fit model.vocab_size (naming the shard and the key), shards of another tokenizer, a
# changed tokenizer file at export, text shown without the right tokenizer, `sluice eval` on
# shards whose vocabulary the model does not cover.
# The tokenizer is a small byte-level one written here (no network needed; the exactness
# against Hugging Face is test_tokenizer_hf.sh).
# usage: test_tokenizer_cli.sh SLUICE_BINARY WORK_DIR
# Needs /usr/bin/python3: skipped (77) without it, a failure under CI=true.
set -euo pipefail
sluice=$1
work=$2
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"

# tok/: byte-level vocabulary (byte b has id b), merges t+h, th+e, " "+the, an added
# <|endoftext|> = 300, and a tokenizer_config.json; tok2/: the same with one merge fewer.
/usr/bin/python3 - "$sl_tests_dir" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import tiny_bpe
tiny_bpe.write("tok", [("t", "h"), ("th", "e"), (" ", "the")], config=True)
tiny_bpe.write("tok2", [("t", "h")], config=True)
# big_tok: tok with <|endoftext|> = 400, past a 320-token model
tiny_bpe.write("big_tok", [("t", "h"), ("th", "e"), (" ", "the")], eot_id=400)
PY
/usr/bin/python3 "$sl_tests_dir/grammar_corpus.py" 7 3000 300
check "data build --tokenizer (train)" "$sluice" data build --quiet --tokenizer tok \
    --text-docs line --frame-tokens 8192 -o train train.txt
check "data build --tokenizer (eval)" "$sluice" data build --quiet --tokenizer tok/tokenizer.json \
    --text-docs line --frame-tokens 2048 -o eval eval.txt

# info records the tokenizer: the first 32 hex digits of sha256sum tokenizer.json
want=$(sha256sum tok/tokenizer.json | cut -c1-32)
"$sluice" data info --json train >info.json
check "data info --json: tokenizer_sha256, vocab 301, eod 300" grep -q \
    "\"vocab_size\":301,\"eod_token\":300,\"tokenizer_sha256\":\"$want\"" info.json
"$sluice" data info train >info.txt
check "data info: tokenizer line" grep -q "tokenizer sha256 $want" info.txt

# show: the first two documents as text are the first two lines, each with <|endoftext|>
"$sluice" data show --docs 2 --tokenizer tok train >show.txt
{
    echo "--- document 1: train/shard-00000.shard.zst, token 0 ---"
    head -n 1 train.txt | tr -d '\n'
    echo "<|endoftext|>"
} >want1.txt
check "data show --text: document 1" cmp -s <(head -n 2 show.txt) want1.txt
check "data show --text: 2 documents" test "$(grep -c '^--- document' show.txt)" -eq 2
"$sluice" data show --ids --docs 3 train >ids.txt
check "data show --ids: 3 lines ending in 300" test "$(grep -c ' 300$' ids.txt)" -eq 3
check "data show --ids: 'the' merges to 257" grep -q -w 257 ids.txt
# byte-level shards decode without a tokenizer; their end-of-document 256 prints as <|256|>
check "data build (bytes)" "$sluice" data build --quiet --text-docs line -o bytes eval.txt
"$sluice" data show --docs 1 bytes >show_bytes.txt
{
    echo "--- document 1: bytes/shard-00000.shard.zst, token 0 ---"
    head -n 1 eval.txt | tr -d '\n'
    echo "<|256|>"
} >want_bytes.txt
check "data show --text of byte-level shards" cmp -s show_bytes.txt want_bytes.txt
if "$sluice" data show --text train >/dev/null 2>err.txt; then
    fail "data show --text of tokenizer shards without --tokenizer succeeded"
else
    check "... refused: not a byte-level shard" grep -q "not a byte-level shard" err.txt
fi
if "$sluice" data show --tokenizer tok2 train >/dev/null 2>err.txt; then
    fail "data show with another tokenizer succeeded"
else
    check "... refused: built with tokenizer sha256 $want" grep -q "built with tokenizer sha256 $want" err.txt
fi

# train with data.tokenizer: final/ holds the tokenizer's files beside config.json
cat >cfg.json <<'JSON'
{
  "model": {"vocab_size": 320, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
  "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 64,
               "max_steps": 3, "warmup_steps": 1, "eval_every": 0, "eval_tokens": 256,
               "log_every": 1, "out_dir": "run",
               "sample_every": 3, "sample_prompt": "the", "sample_tokens": 5},
  "data": {"train": "train", "eval": "eval", "tokenizer": "tok"},
  "backend": {"threads": 1}
}
JSON
if "$sluice" train cfg.json >train.log 2>&1; then
    check "final/tokenizer.json is the file trained with" cmp -s tok/tokenizer.json run/final/tokenizer.json
    check "final/tokenizer_config.json copied" cmp -s tok/tokenizer_config.json run/final/tokenizer_config.json
    check "final/config.json written" test -f run/final/config.json
    # samples decoded by data.tokenizer, and generation with the tokenizer beside config.json
    check "a training sample at step 3" grep -q "sample at step 3: the" train.log
    check "... in the metrics" grep -q '"event": *"sample".*"prompt": *"the"' run/metrics.jsonl
    if "$sluice" generate --weights run/final --prompt "the the" --max-new 6 --temperature 0 \
        >gen.txt 2>gen.err; then
        check "generate with the BPE tokenizer echoes the prompt" grep -q "^the the" gen.txt
        check "... and continues it (tokens decoded to text)" test "$(wc -c <gen.txt)" -gt 8
    else
        show gen.err
        fail "sluice generate --weights run/final (tokenizer.json beside config.json)"
    fi
    if "$sluice" generate --weights run/final --prompt "x" --tokenizer big_tok \
        >/dev/null 2>gen.err; then
        fail "generate with a tokenizer larger than the model's vocabulary succeeded"
    else
        check "... a tokenizer larger than the model's vocabulary is refused" \
            grep -q "does not fit the model's vocab_size = 320" gen.err
    fi
    for ck in run/checkpoints/step-*; do :; done # the last (this run saves one, at the end)
    check "train_state.json records the tokenizer's sha256" \
        grep -q "$(sha256sum tok/tokenizer.json | cut -c1-64)" "$ck/train_state.json"
    check "ckpt export" "$sluice" ckpt export "$ck" -o exp
    check "ckpt export copied tokenizer.json" cmp -s tok/tokenizer.json exp/tokenizer.json
    check "ckpt export copied tokenizer_config.json" test -f exp/tokenizer_config.json
    check "ckpt export --no-tokenizer" "$sluice" ckpt export "$ck" -o exp2 --no-tokenizer
    check "... copies none" test ! -e exp2/tokenizer.json
    cp -r tok tok_changed
    echo " " >>tok/tokenizer.json
    if "$sluice" ckpt export "$ck" -o exp3 >/dev/null 2>err.txt; then
        fail "ckpt export with a changed tokenizer.json succeeded"
    else
        check "... refused: changed since it was checked" grep -q "changed since it was checked" err.txt
    fi
    check "ckpt export --tokenizer tok2" "$sluice" ckpt export "$ck" -o exp4 --tokenizer tok2
    check "... copied tok2" cmp -s tok2/tokenizer.json exp4/tokenizer.json
    cp tok_changed/tokenizer.json tok/tokenizer.json
else
    show train.log
    fail "sluice train with data.tokenizer"
fi
check "with data.tokenizer: no warning about it" [ "$(grep -c 'data.tokenizer is not set' train.log)" = 0 ]

# the same shards without data.tokenizer: the run trains, with one warning (once for its two
# data sets) that its weights will leave without their tokenizer
if "$sluice" train cfg.json --set data.tokenizer= --set training.sample_every=0 \
    --set training.out_dir=run_notok >notok.log 2>&1; then
    check "without data.tokenizer: one warning naming the shard and the key" \
        [ "$(grep -c "warning: cfg.json: data.train: train/shard-00000.shard.zst was built with a tokenizer (sha256 $want...) but data.tokenizer is not set" notok.log)" = 1 ]
    check "without data.tokenizer: no warning but that one" [ "$(grep -c 'warning' notok.log)" = 1 ]
    check "without data.tokenizer: final/ has no tokenizer.json" [ ! -e run_notok/final/tokenizer.json ]
else
    show notok.log
    fail "sluice train without data.tokenizer"
fi

# refusals at the start of training, each naming the file and the key
expect_fail() { # expect_fail DESCRIPTION PATTERN sluice-args...
    local what=$1 pattern=$2
    shift 2
    if "$sluice" "$@" >out.log 2>&1; then
        fail "$what: succeeded"
    elif ! grep -q -- "$pattern" out.log; then
        show out.log
        fail "$what: no '$pattern' in the message"
    else
        checks=$((checks + 1))
    fi
}
expect_fail "shards larger than model.vocab_size" \
    "cfg.json: data.train: train/shard-00000.shard.zst: vocabulary size 301 does not fit model.vocab_size = 257" \
    train cfg.json --set model.vocab_size=257 --set data.tokenizer= --set training.out_dir=run_bad
expect_fail "a tokenizer larger than model.vocab_size" \
    "cfg.json: data.tokenizer: tok has 301 tokens, more than model.vocab_size = 300" \
    train cfg.json --set model.vocab_size=300 --set training.out_dir=run_bad
expect_fail "shards of another tokenizer" \
    "cfg.json: data.train: train/shard-00000.shard.zst: built with tokenizer sha256 $want..., but data.tokenizer = tok2" \
    train cfg.json --set data.tokenizer=tok2 --set training.out_dir=run_bad
expect_fail "a missing tokenizer" "cfg.json: data.tokenizer: nope: cannot open" \
    train cfg.json --set data.tokenizer=nope --set training.out_dir=run_bad
check "data build --vocab 400 (larger than the tokenizer's)" "$sluice" data build --quiet \
    --tokenizer tok --vocab 400 --text-docs line -o big eval.txt
if [ -f run/final/config.json ]; then
    expect_fail "eval on shards larger than the model's vocabulary" \
        "big/shard-00000.shard.zst: vocabulary size 400 does not fit the model's vocab_size = 320 (--weights run/final)" \
        eval --weights run/final --data big
fi
expect_fail "--tokenizer with llm.c-style raw input" "applies to text and jsonl input, not raw" \
    data build --tokenizer tok --format raw --dtype uint16 --vocab 400 -o r train.txt

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
