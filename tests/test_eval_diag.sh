#!/usr/bin/env bash
# End-to-end: sluice eval with YaRN flags and --diagnostics (table, --json, --plot) and
# sluice plot, on a tiny model trained for a few steps; bad flags fail naming the flag.
# usage: test_eval_diag.sh SLUICE_BINARY WORK_DIR
# Needs /usr/bin/python3 (corpus, JSON checks); the PNG parts need gnuplot (Debian gnuplot-nox).
# A missing one skips (77), or fails under CI=true (tests/skip_or_fail.sh).
set -euo pipefail
sluice=$1
work=$2
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"

grammar_data "$sluice" 7 3000 400
cat > tiny.json <<'JSON'
{
  "model": {"vocab_size": 257, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "attn_output_gate": "elementwise"},
  "training": {"seq_len": 64, "micro_batch_size": 4, "global_batch_tokens": 512,
               "max_steps": 8, "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2,
               "eval_every": 4, "eval_tokens": 2048, "log_every": 4, "out_dir": "run"},
  "data": {"train": "train", "eval": "eval"},
  "backend": {"threads": 2}
}
JSON
"$sluice" train tiny.json >train.log

ev() { "$sluice" eval --weights run/final --data eval --seq-len 64 --batch 4 "$@"; }

# --diagnostics --json: schema and sane values
ev --diagnostics --json >diag.json
ev --diagnostics --json --bucket 8 >diag8.json
ev --json --rope-scaling yarn --factor 4 --original-max 32 >yarn.json
ev --json --rope-scaling yarn --factor 2 --original-max 32 --beta-fast 8 --beta-slow 2 \
    --attention-factor 1.5 --rope-theta 50000 >yarn2.json
ev --json >plain.json
/usr/bin/python3 - <<'PY'
import json, math
d = json.load(open("diag.json"))
for k in ("weights", "data", "backend", "seq_len", "batch", "tokens", "loss", "perplexity",
          "bits_per_token", "rope", "buckets", "layers"):
    assert k in d, f"missing {k}"
assert d["seq_len"] == 64 and d["tokens"] > 0
assert abs(d["perplexity"] - math.exp(d["loss"])) < 1e-9 * d["perplexity"]
b = d["buckets"]
# default width for 64 tokens: 16 -> [0,16) [16,32) [32,64)
assert [(x["start"], x["end"]) for x in b] == [(0, 16), (16, 32), (32, 64)], b
assert sum(x["tokens"] for x in b) == d["tokens"], "bucket tokens do not sum to the tokens"
mean = sum(x["tokens"] * x["loss"] for x in b) / d["tokens"]
assert abs(mean - d["loss"]) < 1e-5 * d["loss"], f"bucket-weighted loss {mean} vs {d['loss']}"
L = d["layers"]
assert [x["layer"] for x in L] == [0, 1], L
for x in L:
    assert 0.0 < x["gate_score"] < 1.0, x
    assert 0.0 <= x["first_token_share"] <= 1.0, x
    assert x["max_activation"] > 0.0 and math.isfinite(x["max_activation"]), x
d8 = json.load(open("diag8.json"))
assert [(x["start"], x["end"]) for x in d8["buckets"]] == [(0, 8), (8, 16), (16, 32), (32, 64)]
assert d8["loss"] == d["loss"] and d8["layers"] == d["layers"], "--bucket changed other numbers"
plain = json.load(open("plain.json"))
assert "buckets" not in plain and "layers" not in plain and plain["loss"] == d["loss"]
assert plain["rope"] == {"theta": 10000, "scaling": "none", "mscale": 1}, plain["rope"]
y = json.load(open("yarn.json"))["rope"]
assert y["scaling"] == "yarn" and y["factor"] == 4 and y["original_max_position_embeddings"] == 32
assert y["beta_fast"] == 32 and y["beta_slow"] == 1
assert abs(y["mscale"] - (0.1 * math.log(4) + 1)) < 1e-6, y
y2 = json.load(open("yarn2.json"))
r = y2["rope"]
assert r["theta"] == 50000 and r["beta_fast"] == 8 and r["beta_slow"] == 2, r
assert r["attention_factor"] == 1.5 and abs(r["mscale"] - 1.5) < 1e-6, r
# the RoPE flags change the model's positions, hence the loss
assert y2["loss"] != plain["loss"], "RoPE flags had no effect on the loss"
print(f"loss {d['loss']:.4f}; buckets {[round(x['loss'], 4) for x in b]}; layers {L}")
PY
ev --diagnostics | tee table.txt
grep -q "first_token_share" table.txt
grep -q "^  \[32, 64)" table.txt

# metrics with the stage contract (tokens, stage events) and without (older runs)
mkdir -p staged
cat > staged/metrics.jsonl <<'JSONL'
{"event": "stage", "stage": "short", "index": 0, "step": 0, "tokens": 0, "seq_len": 64, "rope_theta": 10000}
{"step": 1, "loss": 5.5, "lr": 0.001, "tokens": 512, "stage": "short"}
{"step": 2, "loss": 5.0, "lr": 0.002, "tokens": 1024, "stage": "short", "eval_loss": 5.1}
{"event": "stage", "stage": "long", "index": 1, "step": 2, "tokens": 1024, "seq_len": 128, "rope_theta": 1000000}
{"step": 3, "loss": 4.8, "lr": 0.002, "tokens": 2048, "stage": "long"}
{"step": 4, "loss": 4.6, "lr": 0.001, "tokens": 3072, "stage": "long", "eval_loss": 4.7}
JSONL

# a run started over in an out_dir without a checkpoint (its predecessor died before saving
# one) appends to the metrics file after a "start" line; sluice plot draws the newest run only
mkdir -p dead
grep '^{"step"' run/metrics.jsonl | head -5 >dead/metrics.jsonl
"$sluice" train tiny.json --set training.out_dir=dead --set training.max_steps=2 \
    --set training.warmup_steps=1 --set training.eval_every=0 >dead.log
/usr/bin/python3 - <<'PY'
import json
recs = [json.loads(l) for l in open("dead/metrics.jsonl")]
starts = [i for i, r in enumerate(recs) if r.get("event") == "start"]
assert starts == [5], starts
s = recs[5]
assert s["step"] == 0 and s["config"] == "tiny.json" and s["ranks"] == 1 and s["time"], s
assert [r["step"] for r in recs[6:] if "event" not in r] == [1, 2], recs[6:]
first = json.loads(open("run/metrics.jsonl").readline())
assert first.get("event") == "start", first
PY
# a resumed run writes the steps after its checkpoint again: drawn once, from the resumed run
mkdir -p resumed
/usr/bin/python3 - <<'PY'
import json
with open("resumed/metrics.jsonl", "w") as f:
    w = lambda r: f.write(json.dumps(r) + "\n")
    w({"step": 1, "loss": 9.0, "tokens": 512})  # an earlier run's
    w({"event": "start", "step": 0, "config": "x.json", "ranks": 1, "time": "2026-01-01T00:00:00Z"})
    w({"event": "stage", "stage": "a", "index": 0, "step": 0, "tokens": 0})
    for s in range(1, 7):
        w({"step": s, "loss": 5.0 - 0.1 * s, "tokens": 512 * s})
    w({"event": "resume", "step": 4, "checkpoint": "resumed/checkpoints/step-4"})
    w({"event": "stage", "stage": "a", "index": 0, "step": 4, "tokens": 0})
    for s in range(5, 9):
        w({"step": s, "loss": 4.0 - 0.1 * s, "tokens": 512 * s})
PY

is_png() { /usr/bin/python3 -c "import sys; sys.exit(open('$1','rb').read(8) != b'\x89PNG\r\n\x1a\n')"; }
if command -v gnuplot >/dev/null; then
    ev --diagnostics --plot diag.png >/dev/null
    is_png diag.png
    "$sluice" plot run -o run.png --title "tiny run" >run.plot
    is_png run.png
    # the held-out losses: the start-of-run evaluation's (an "eval" event at step 0) with the
    # step records'
    grep -q '^run/metrics.jsonl: 3 held-out losses drawn (steps 0 to 8)$' run.plot ||
        { cat run.plot; echo "FAIL: sluice plot left out the step-0 held-out loss"; exit 1; }
    "$sluice" plot staged -o staged.png
    is_png staged.png
    "$sluice" plot dead -o dead.png >dead.plot
    grep -q '^dead/metrics.jsonl: 2 step records drawn (steps 1 to 2), the newest run.s (from its "start" at line 6; 5 step records of earlier runs left out)$' dead.plot ||
        { cat dead.plot; echo "FAIL: sluice plot drew other runs' records"; exit 1; }
    "$sluice" plot resumed -o resumed.png >resumed.plot
    grep -q '^resumed/metrics.jsonl: 8 step records drawn (steps 1 to 8), the newest run.s (from its "start" at line 2; 1 step record of earlier runs left out), 2 step records a resume superseded left out$' resumed.plot ||
        { cat resumed.plot; echo "FAIL: sluice plot drew the steps a resume superseded"; exit 1; }
    is_png dead.png
    is_png resumed.png
    echo "PNG files written: diag.png run.png staged.png"
else
    skip_part_or_fail "gnuplot not installed (apt-get install gnuplot-nox): PNG output not checked"
fi

# Bad input: a message naming the flag, exit status 2 (usage) or 1.
expect_fail() { # pattern command...
    local pat=$1
    shift
    set +e
    out=$("$@" 2>&1)
    st=$?
    set -e
    if [ $st -eq 0 ] || ! grep -q -- "$pat" <<<"$out"; then
        echo "expected a failure mentioning '$pat' from: $*"
        echo "got status $st: $out"
        exit 1
    fi
}
expect_fail "--factor" ev --rope-scaling yarn --factor abc
expect_fail "--factor" ev --rope-scaling yarn --factor 0.5
expect_fail "--factor" ev --rope-scaling yarn
expect_fail "--rope-scaling" ev --rope-scaling linear --factor 2
expect_fail "--rope-scaling yarn" ev --factor 4
expect_fail "--original-max" ev --rope-scaling yarn --factor 4 --original-max 0
expect_fail "--original-max" ev --rope-scaling yarn --factor 4 --original-max -5
expect_fail "--beta-fast" ev --rope-scaling yarn --factor 4 --beta-slow 40
expect_fail "--attention-factor" ev --rope-scaling yarn --factor 4 --attention-factor -1
expect_fail "--rope-theta" ev --rope-theta 1
expect_fail "--rope-scaling none" ev --rope-scaling none --factor 2
expect_fail "sluice eval: error: --plot needs --diagnostics" ev --plot x.png
expect_fail "--bucket" ev --diagnostics --bucket x
expect_fail "-o FILE.png" "$sluice" plot run
expect_fail "metrics.jsonl" "$sluice" plot nowhere -o x.png
# numbers: junk, a sign, values that wrap a 32-bit int (2^32 + 64 once ran as 64) and values
# beyond the bounds are refused naming the flag (2), before anything is allocated
for bad in 4294967360 99999999999 16777217 0 -5 64x 0x40 ""; do
    expect_exit 2 "--seq-len: expected an integer in \[1, 16777216\], got '$bad'" ev --seq-len "$bad"
done
expect_exit 2 "--batch: expected an integer in \[1, 1048576\]" ev --batch 100000000
expect_exit 2 "--batch: expected an integer" ev --batch 4294967297
expect_exit 2 "--threads: expected an integer" ev --threads -1
expect_exit 2 "--max-tokens: expected an integer" ev --max-tokens 1e6
expect_exit 2 "--bucket: expected an integer" ev --bucket 99999999999
# a batch larger than the data (12,000-odd tokens): refused before the model's activations are
# allocated for it (this one died out of memory in the allocation, under MPI_ABORT)
expect_exit 1 "eval: [0-9]* tokens, fewer than the 64000001 of one batch (--batch 1000000 x --seq-len 64 + 1)" \
    ev --batch 1000000
printf 'abcdefghij' >ten.txt # 11 tokens with the end of the document
expect_exit 0 "tokens 10 " ev --data ten.txt --seq-len 10 --batch 1
expect_exit 1 "ten.txt: 11 tokens, fewer than the 12 of one batch" ev --data ten.txt --seq-len 11 --batch 1
# an unknown option or a stray argument is named as such, last or not (was: "needs a value")
expect_exit 2 "unknown option '--bogus'" ev --diagnostics --bogus
expect_exit 2 "unknown option '--bogus'" ev --bogus --diagnostics
expect_exit 2 "unexpected argument 'extra'" ev extra
expect_exit 2 "unexpected argument 'extra'" "$sluice" eval --data d extra
expect_exit 2 "--seq-len needs a value" ev --seq-len
[ "$failures" -eq 0 ] || exit 1
echo "test_eval_diag: OK ($checks checks of the exit status)"
