#!/usr/bin/env bash
# What `sluice eval` and `sluice generate` read (--weights, --data, --tokenizer, --prompts) on
# two tiny models trained here: a byte-level one and one with a small BPE tokenizer
# (data.tokenizer; docs/evaluation.md, docs/generate.md).
#   - eval of a text file tokenizes it with the model's tokenizer (the tokenizer.json beside
#     config.json, or --tokenizer): the loss equals that of a shard built from the same text with
#     `sluice data build --tokenizer`; a model that is not byte-level without a tokenizer is
#     refused, naming the text file and the missing tokenizer.json;
#   - eval --max-tokens N counts N tokens (the last batch cut), in the loss, the position buckets
#     and the --dump-logits file;
#   - --weights DIR/model.safetensors reads config.json (and tokenizer.json) beside it, for eval
#     and generate; another file is refused saying what --weights takes;
#   - a `ckpt export --dtype bf16` reads back in eval and generate, exactly as the fp32 export
#     rounded to bf16;
#   - eval and generate on a checkpoint use the tokenizer its run trained with (recorded with
#     its SHA-256), refusing one that cannot be read or has changed, suggesting --tokenizer;
#   - under mpirun both refuse to run, the error printed once (not once per rank);
#   - generate --prompts skips blank lines; a missing, directory or empty prompts file exits 1;
#   - sluice train --resume auto on a run whose newest checkpoint is damaged (data or structure)
#     names the previous checkpoint to resume from, and resuming from it works.
# usage: test_weights_cli.sh SLUICE_BINARY WORK_DIR
# Needs /usr/bin/python3 with NumPy (corpus, tokenizer, safetensors): skipped (77) without them,
# a failure under CI=true.
set -euo pipefail
sluice=$(realpath "$1")
work=$2
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"
/usr/bin/python3 -c "import numpy" 2>/dev/null || skip_or_fail "NumPy missing (apt-get install python3-numpy)"

# tok/: a byte-level BPE tokenizer (byte b has id b), merges t+h, th+e, " "+the, and an added
# <|endoftext|> = 300 (as tests/test_tokenizer_cli.sh's)
/usr/bin/python3 - "$sl_tests_dir" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import tiny_bpe
tiny_bpe.write("tok", [("t", "h"), ("th", "e"), (" ", "the")])
PY
/usr/bin/python3 "$sl_tests_dir/grammar_corpus.py" 5 1500 200
"$sluice" data build --quiet --frame-tokens 8192 -o bytes train.txt
"$sluice" data build --quiet --tokenizer tok --text-docs line --frame-tokens 8192 -o bpe train.txt
# model VOCAB: a tiny MoE's model section
model() {
    echo "{\"vocab_size\": $1, \"hidden_size\": 32, \"num_hidden_layers\": 2,
     \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 16,
     \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16}"
}
# train NAME VOCAB DATA [KEY=VALUE...]: 4 steps of 128 tokens, a checkpoint every 2
train() {
    local name=$1 vocab=$2 data=$3
    shift 3
    cat >"$name.json" <<JSON
{"model": $(model "$vocab"),
 "training": {"seq_len": 32, "micro_batch_size": 4, "global_batch_tokens": 128, "max_steps": 4,
              "warmup_steps": 1, "log_every": 1, "save_every": 2, "out_dir": "$name"},
 "data": {"train": "$data"}, "backend": {"threads": 2}}
JSON
    local sets=()
    for kv in "$@"; do sets+=(--set "$kv"); done
    "$sluice" train "$name.json" "${sets[@]}" >"$name.log" 2>&1 || { cat "$name.log"; exit 1; }
}
train byte 257 bytes
train bpe 320 bpe data.tokenizer=tok
head -c 4000 eval.txt >e.txt

# ---- eval of a text file with the model's tokenizer ----
loss() { "$@" | grep -o "loss [0-9.]*"; }
ev() { "$sluice" eval --seq-len 16 --batch 2 "$@"; }
"$sluice" data build --quiet --tokenizer tok -o e_bpe e.txt # the whole file, one document
want=$(loss ev --weights bpe/final --data e_bpe)
got=$(loss ev --weights bpe/final --data e.txt || true)
check "eval of text with the tokenizer beside config.json ($got) = of its shard ($want)" \
    [ -n "$want" -a "$got" = "$want" ]
mkdir -p notok && cp bpe/final/config.json bpe/final/model.safetensors notok/
got=$(loss ev --weights notok --data e.txt --tokenizer tok/tokenizer.json || true)
check "eval of text with --tokenizer ($got) = of its shard ($want)" [ "$got" = "$want" ]
expect_exit 1 "e.txt: a text file is read with the model's tokenizer.*(320 tokens).*notok/tokenizer.json does not exist" \
    ev --weights notok --data e.txt
check "the byte-level model still reads text as bytes" ev --weights byte/final --data e.txt --max-tokens 64 >/dev/null

# ---- --max-tokens N evaluates N tokens, the last batch cut ----
e8() { "$sluice" eval --weights byte/final --data e.txt --seq-len 8 "$@"; }
one=$(e8 --batch 1 --max-tokens 40 | head -1)
two=$(e8 --batch 2 --max-tokens 40 | head -1 || true)
check "--max-tokens 40 in batches of 16 ($two) = in batches of 8 ($one)" \
    [ "${one%% |*}" = "tokens 40" -a "$two" = "$one" ]
e8 --batch 4 --max-tokens 1 --diagnostics --json --dump-logits one.st >one.json || true
checks=$((checks + 1))
/usr/bin/python3 - <<'PY' || fail "--max-tokens 1: the report, its buckets and the logits file hold 1 token"
import json, struct
r = json.load(open("one.json"))
assert r["tokens"] == 1 and sum(b["tokens"] for b in r["buckets"]) == 1, r
raw = open("one.st", "rb").read()
h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
assert h["logits"]["shape"] == [1, 257] and h["tokens"]["shape"] == [1], h
PY

# ---- --weights FILE.safetensors: config.json (and tokenizer.json) beside it ----
want=$(loss ev --weights bpe/final --data e.txt)
got=$(loss ev --weights bpe/final/model.safetensors --data e.txt || true)
check "eval --weights final/model.safetensors ($got) = --weights final ($want)" [ "$got" = "$want" ]
g() { "$sluice" generate --max-new 8 --temperature 0 --prompt "the" "$@" 2>/dev/null; }
g --weights bpe/final >gen_dir.txt
g --weights bpe/final/model.safetensors >gen_file.txt || true
check "generate --weights final/model.safetensors = --weights final" cmp -s gen_dir.txt gen_file.txt
expect_exit 1 "bpe/final/config.json: not a directory or a .safetensors file: --weights needs a directory holding config.json" \
    ev --weights bpe/final/config.json --data e.txt
expect_exit 1 "--weights needs a directory holding config.json" \
    "$sluice" generate --weights bpe/final/config.json --prompt x

# ---- a bf16 export reads back: exactly the fp32 export rounded to bf16 ----
"$sluice" ckpt export byte/checkpoints/step-4 --dtype bf16 -o exp_bf16 >/dev/null
"$sluice" ckpt export byte/checkpoints/step-4 -o exp_f32 >/dev/null
mkdir -p rounded && cp exp_f32/config.json rounded/
checks=$((checks + 1))
/usr/bin/python3 - <<'PY' || fail "rounding the fp32 export to bf16 by hand"
# every F32 tensor rounded to nearest even bf16 and stored as F32 again
import json, struct
import numpy as np
raw = open("exp_f32/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
out, blobs, off = {}, [], 0
for k, v in hdr.items():
    if k == "__metadata__":
        continue
    b, e = v["data_offsets"]
    u = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).tobytes()
    out[k] = {"dtype": "F32", "shape": v["shape"], "data_offsets": [off, off + len(r)]}
    blobs.append(r)
    off += len(r)
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open("rounded/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
want=$(loss ev --weights rounded --data e.txt)
got=$(loss ev --weights exp_bf16 --data e.txt || true)
check "eval of the bf16 export ($got) = of the fp32 export rounded to bf16 ($want)" \
    [ -n "$want" -a "$got" = "$want" ]
check "generate reads the bf16 export" g --weights exp_bf16 >/dev/null

# ---- a checkpoint's text goes through the tokenizer its run recorded (data.tokenizer) ----
g --weights bpe/checkpoints/step-4 >gen_ckpt.txt || true
check "generate on the checkpoint uses the run's tokenizer, as final/ (its tokenizer.json)" \
    cmp -s gen_dir.txt gen_ckpt.txt
want=$(loss ev --weights bpe/final --data e.txt)
got=$(loss ev --weights bpe --data e.txt || true)
check "eval of text on the run's newest checkpoint ($got) = on final/ ($want)" [ "$got" = "$want" ]
mkdir -p elsewhere
expect_exit 1 'data.tokenizer = "tok", recorded in .*step-4/train_state.json) cannot be read.*--tokenizer PATH' \
    bash -c 'cd elsewhere && "$0" generate --weights ../bpe --prompt the' "$sluice"
check "--tokenizer overrides the recorded one" \
    bash -c 'cd elsewhere && "$0" generate --weights ../bpe --prompt the --max-new 2 --tokenizer ../tok >/dev/null 2>&1' "$sluice"
cp tok/tokenizer.json tok.saved && echo " " >>tok/tokenizer.json
expect_exit 1 "tok/tokenizer.json: the tokenizer the run trained with .* has changed since" \
    "$sluice" generate --weights bpe/checkpoints/step-2 --prompt the
mv tok.saved tok/tokenizer.json

# ---- generate and eval run in one process: under mpirun the refusal is printed once ----
(
    mpi_env
    mpirun -np 2 "$sluice" generate --weights byte/final --prompt x >mpi_generate.out 2>&1 && exit 1
    mpirun -np 2 "$sluice" eval --weights byte/final --data e.txt >mpi_eval.out 2>&1 && exit 1
    exit 0
) || fail "generate or eval under mpirun -np 2 exited 0"
for c in generate eval; do
    check "mpirun -np 2 sluice $c: the refusal once, without a rank tag ($(grep sluice "mpi_$c.out"))" \
        [ "$(grep -c "^sluice: error: sluice $c runs in one process (2 were started)" "mpi_$c.out")" -eq 1 -a \
        "$(grep -c "rank 1" "mpi_$c.out")" -eq 0 ]
done

# ---- --prompts skips blank lines ----
printf 'my\n\n \t\r\nthe\n\n' >blank.txt
g --weights byte/final --prompts blank.txt >blank.out || true
g --weights byte/final --prompt my --prompt the >two.out
check "--prompts: blank lines skipped (2 prompts, as --prompt twice)" cmp -s blank.out two.out
printf '\n \n' >blanks.txt
expect_exit 1 "blanks.txt: no prompt (the file is empty or all its lines are blank)" \
    "$sluice" generate --weights byte/final --prompts blanks.txt

# ---- a bad --prompts file is bad input: exit 1, as a bad --weights ----
expect_exit 1 "--prompts: missing.txt: cannot open" "$sluice" generate --weights byte/final --prompts missing.txt
expect_exit 1 "--prompts: byte: is a directory" "$sluice" generate --weights byte/final --prompts byte
: >empty.txt
expect_exit 1 "--prompts: empty.txt: no prompt" "$sluice" generate --weights byte/final --prompts empty.txt

# ---- --resume auto with a damaged newest checkpoint names the previous one ----
for damage in data state; do
    rm -rf "r_$damage" && cp -r byte "r_$damage"
    if [ "$damage" = data ]; then # flip a byte of the tensor data: a checksum fails on load
        f=r_data/checkpoints/step-4/rank-00000.safetensors
        printf '\xff' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") - 100)) conv=notrunc status=none
    else # the structure: sl_ckpt_open fails
        rm r_state/checkpoints/step-4/train_state.json
    fi
    expect_exit 1 "--resume: r_$damage/checkpoints/step-4.*; the previous checkpoint r_$damage/checkpoints/step-2 is committed and its structure checks: resume from it with --resume r_$damage/checkpoints/step-2" \
        "$sluice" train byte.json --set "training.out_dir=r_$damage" --set training.max_steps=6 --resume auto
    check "--resume r_$damage/checkpoints/step-2 resumes" "$sluice" train byte.json \
        --set "training.out_dir=r_$damage" --set training.max_steps=6 --resume "r_$damage/checkpoints/step-2" >/dev/null
done

echo "test_weights_cli: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
