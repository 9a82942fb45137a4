#!/usr/bin/env bash
# A staged schedule end to end (docs/stages.md): three stages (short sequences at RoPE base 1e4;
# longer ones at base 1e6 with the AdamW moments reset; an evaluation-only YaRN stage), then
#  - the metrics name the stages, count tokens over the schedule and mark each boundary;
#  - the boundary checkpoints survive retention (keep_last = 1);
#  - the exported config.json carries the last stage's RoPE settings;
#  - a run killed right after a boundary, and one killed mid-stage, resume (--resume auto) to
#    bitwise the same losses and final weights as the uninterrupted run;
#  - bad schedules fail with a message naming the stage and the key;
#  - a resume onto other training data (or another data.seed) is refused naming the key; the
#    same shards at another path resume bitwise;
#  - training.defer_expert_wgrad = on with expert_wgrad_group = 4 (the CPU's groups are one
#    pass per micro-batch; the parked micro-batches kept as tokens, park_expert_rows auto)
#    gives bitwise the run.
# usage: test_stages.sh SLUICE_BINARY WORK_DIR
set -euo pipefail
sluice=$1
work=$2
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"

grammar_data "$sluice" 7 4000 400

cat > staged.json <<'JSON'
{
  "model": {"vocab_size": 257, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 32,
            "router_aux_loss_coef": 0.01, "attn_output_gate": "elementwise",
            "rope_theta": 10000, "max_position_embeddings": 32},
  "training": {"micro_batch_size": 4, "global_batch_tokens": 512, "lr": 3e-3, "min_lr": 3e-4,
               "warmup_steps": 0,
               "eval_tokens": 2048, "log_every": 1, "out_dir": "run", "keep_last": 1,
               "save_every": 2,
               "stages": [
                 {"name": "short", "tokens": 3072, "seq_len": 32, "warmup_steps": 2},
                 {"name": "long", "tokens": 2048, "seq_len": 64, "rope_theta": 1000000,
                  "max_position_embeddings": 64, "micro_batch_size": 2, "lr": 1e-3,
                  "warmup_steps": 1, "reset_optimizer": true},
                 {"name": "yarn", "tokens": 0, "seq_len": 128, "micro_batch_size": 1,
                  "rope_scaling": {"rope_type": "yarn", "factor": 2,
                                   "original_max_position_embeddings": 64}}
               ]},
  "data": {"train": "train", "eval": "eval"},
  "backend": {"threads": 2}
}
JSON

# ---- the uninterrupted run ----
"$sluice" train staged.json > full.log 2>&1 || {
    cat full.log
    echo "FAIL: the staged run failed"
    exit 1
}
check "the banner lists the schedule" grep -q 'schedule: 3 stages, 10 steps, 5120 training tokens' full.log
check "the evaluation-only stage evaluates with YaRN" \
    grep -q 'stage 3/3 "yarn" at step 10: evaluation only, 128 tokens per sequence, RoPE base 1e+06 + YaRN x2 (original 64)' full.log
check "the second stage resets the AdamW moments" grep -q 'stage "long": AdamW moments reset' full.log
/usr/bin/python3 - run/metrics.jsonl <<'PY' || fail "metrics: stages, tokens, boundaries"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if "event" not in r]
stages = [r for r in recs if r.get("event") == "stage"]
evals = [r for r in recs if r.get("event") == "eval"]
assert [s["step"] for s in steps] == list(range(1, 11)), [s["step"] for s in steps]
assert [s["stage"] for s in steps] == ["short"] * 6 + ["long"] * 4
assert [s["tokens"] for s in steps] == [512 * i for i in range(1, 11)], [s["tokens"] for s in steps]
assert [(e["stage"], e["index"], e["step"], e["tokens"], e["seq_len"]) for e in stages] == [
    ("short", 0, 0, 0, 32), ("long", 1, 6, 3072, 64), ("yarn", 2, 10, 5120, 128)], stages
assert stages[1]["rope_theta"] == 1e6 and stages[2]["yarn_factor"] == 2, stages
assert [e["stage"] for e in evals] == ["short", "long", "yarn"], evals
# each stage has its own schedule: warmup restarts (lr of the first step of a stage is
# lr / warmup_steps)
assert abs(steps[0]["lr"] - 3e-3 / 2) < 1e-9 and abs(steps[6]["lr"] - 1e-3) < 1e-9, steps
assert all("eval_loss" in s for s in (steps[5], steps[9]))
PY
checks=$((checks + 1))
check "retention keeps the stage ends (6, 10), drops the rest" \
    [ "$(ls run/checkpoints | grep '^step-' | sort -V | tr '\n' ' ')" = "step-6 step-10 " ]
/usr/bin/python3 - run/final/config.json <<'PY' || fail "config.json carries the last stage's RoPE"
import json, sys
c = json.load(open(sys.argv[1]))
rs = c["rope_scaling"]
assert c["rope_theta"] == 1e6, c["rope_theta"]
assert rs["rope_type"] == "yarn" and rs["factor"] == 2, rs
assert rs["original_max_position_embeddings"] == 64, rs
assert c["max_position_embeddings"] == 128, c["max_position_embeddings"]
PY
checks=$((checks + 1))
/usr/bin/python3 - run/checkpoints/step-6/train_state.json <<'PY' || fail "train state names the stage"
import json, sys
s = json.load(open(sys.argv[1]))["trainer"]
assert s["stage"]["name"] == "short" and s["stage"]["index"] == 0, s["stage"]
assert s["tokens"] == 3072 and s["step"] == 6, s
PY
checks=$((checks + 1))

# the losses of steps 7.. of a metrics file, as text: resumed runs must match them exactly
losses_after() {
    /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "event" not in r and r["step"] > int(sys.argv[2]):
        print(r["step"], r["loss"], r.get("eval_loss"))' "$1" "$2"
}
losses_after run/metrics.jsonl 6 > full.losses

# ---- the expert weight gradients over groups of 4 micro-batches: on the CPU bitwise the same
# run (4 micro-batches a step in both stages: three park, as tokens under park_expert_rows auto,
# their rows regathered; the stage boundary re-sizes the parked buffers) ----
"$sluice" train staged.json --set training.out_dir=deferred --set training.defer_expert_wgrad=on \
    --set training.expert_wgrad_group=4 > deferred.log 2>&1 ||
    { cat deferred.log; fail "the deferred run failed"; }
check "deferred: the banner says so" \
    grep -q 'expert weight gradients: over groups of 4 micro-batches, the parked ones kept as tokens' \
    deferred.log
check "deferred: final weights equal the run's" \
    cmp -s deferred/final/model.safetensors run/final/model.safetensors
check "deferred: losses equal the run's" \
    cmp -s <(losses_after deferred/metrics.jsonl 0) <(losses_after run/metrics.jsonl 0)

# ---- killed right after the boundary (step 7 never finishes), resumed ----
resume_case() { # name kill_step resumed_from
    local name=$1 kill=$2 from=$3
    rc=0
    SLUICE_FAULT="0:$kill:crash" "$sluice" train staged.json --set training.out_dir="$name" \
        > "$name.log" 2>&1 || rc=$?
    check "$name: the injected crash stops the run" [ "$rc" -ne 0 ]
    check "$name: the newest checkpoint is step $from" \
        [ "$(ls "$name/checkpoints" | grep '^step-' | sort -V | tail -1)" = "step-$from" ]
    rm -f "$name/metrics.jsonl"
    rc=0
    "$sluice" train staged.json --set training.out_dir="$name" --resume auto \
        > "$name.resume.log" 2>&1 || rc=$?
    check "$name: the resumed run finishes" [ "$rc" -eq 0 ]
    losses_after "$name/metrics.jsonl" "$from" > "$name.losses"
    check "$name: losses after the resume equal the uninterrupted run's" \
        cmp -s "$name.losses" <(awk -v f="$from" '$1 > f' full.losses)
    check "$name: final weights equal the uninterrupted run's" \
        cmp -s "$name/final/model.safetensors" run/final/model.safetensors
}
resume_case boundary 7 6
check "boundary: the resumed run enters the second stage" \
    grep -q 'stage 2/3 "long" at step 6' boundary.resume.log
resume_case midstage 9 8
check "midstage: the resumed run continues the second stage" \
    grep -q 'stage 2/3 "long" at step 8' midstage.resume.log
# its evaluation on resuming is at step 8's tokens, as the uninterrupted run's step 8 counts
# them (it was logged at the stage's first token, which put the point at 0 in `sluice plot`)
check "midstage: the eval event on resuming is at step 8's tokens" /usr/bin/python3 -c '
import json, sys
ev = [r for r in map(json.loads, open("midstage/metrics.jsonl")) if r.get("event") == "eval"][0]
st = [r for r in map(json.loads, open("run/metrics.jsonl")) if "event" not in r and r["step"] == 8][0]
sys.exit(not (ev["step"] == 8 and ev["tokens"] == st["tokens"] and ev["tokens"] > 0))' 
# reset_optimizer restarts AdamW's step count (bias correction) at the stage's first step
ostep() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trainer"]["optimizer_step"])' "$1/train_state.json"; }
check "AdamW steps: 6 at the end of the first stage" [ "$(ostep run/checkpoints/step-6)" = 6 ]
check "AdamW steps: 4 after the four steps of the stage that resets them" \
    [ "$(ostep run/checkpoints/step-10)" = 4 ]
check "AdamW steps: the same in the run resumed mid-stage" [ "$(ostep midstage/checkpoints/step-10)" = 4 ]

# ---- a stage with its own data reads that data from its beginning ----
/usr/bin/python3 -c '
import random
r = random.Random(11)
words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
open("train2.txt", "w").write("\n".join(" ".join(r.choice(words) for _ in range(6)) for _ in range(3000)) + "\n")'
"$sluice" data build --quiet --frame-tokens 16384 -o train2 train2.txt
own_b='{"name":"b","tokens":1024,"seq_len":64,"max_position_embeddings":64,"micro_batch_size":2,"data":{"train":"train2"}}'
"$sluice" train staged.json --set training.out_dir=own \
    --set "training.stages=[{\"name\":\"a\",\"tokens\":1024,\"seq_len\":32},$own_b]" > own.log 2>&1 ||
    fail "a schedule with a stage's own data failed: $(tail -3 own.log)"
"$sluice" train staged.json --set training.out_dir=ref --set "training.stages=[$own_b]" \
    > ref.log 2>&1 || fail "the reference run on the second corpus failed: $(tail -3 ref.log)"
hash_of() { # metrics step
    /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "event" not in r and r["step"] == int(sys.argv[2]):
        print(r["batch_hash"])' "$1" "$2"
}
own_hash=$(hash_of own/metrics.jsonl 3)
check "the stage with its own data starts at that data's first batch" \
    [ -n "$own_hash" -a "$own_hash" = "$(hash_of ref/metrics.jsonl 1)" ]
check "... and not where the first stage's data was" [ "$own_hash" != "$(hash_of run/metrics.jsonl 7)" ]

# ---- bad schedules name the stage and the key ----
bad() { # what expected-substring stages-json
    local what=$1 want=$2 stages=$3 out rc=0
    out=$("$sluice" train staged.json --set training.out_dir=bad --set "training.stages=$stages" 2>&1) ||
        rc=$?
    checks=$((checks + 1))
    if [ "$rc" -eq 0 ] || ! grep -qF -- "$want" <<<"$out"; then
        fail "$what: want an error containing '$want', got (exit $rc): $out"
    fi
}
bad "sequence beyond the RoPE settings" \
    'training.stages[1].seq_len: 64 exceeds what the stage'"'"'s RoPE settings support: max_position_embeddings = 32' \
    '[{"name":"a","tokens":512,"seq_len":32},{"name":"b","tokens":512,"seq_len":64}]'
# the advice names what raises the reach: the stage's max_position_embeddings, not rope_theta
bad "sequence beyond the RoPE settings: the advice" \
    "(set the stage's max_position_embeddings to at least 64, usually with a larger rope_theta" \
    '[{"name":"a","tokens":512,"seq_len":32},{"name":"b","tokens":512,"seq_len":64}]'
bad "the stage is named" '(stage "b")' \
    '[{"name":"a","tokens":512,"seq_len":32},{"name":"b","tokens":512,"seq_len":64}]'
bad "YaRN too short" 'training.stages[0].seq_len: 256 exceeds' \
    '[{"name":"a","tokens":512,"seq_len":256,"rope_scaling":{"rope_type":"yarn","factor":2,"original_max_position_embeddings":64}}]'
bad "YaRN too short: the advice" 'raise the one that limits it: a larger factor, or the stage'"'"'s max_position_embeddings' \
    '[{"name":"a","tokens":512,"seq_len":256,"rope_scaling":{"rope_type":"yarn","factor":2,"original_max_position_embeddings":64}}]'
bad "budget below one batch" 'training.stages[0].tokens: 100 is less than one global batch' \
    '[{"name":"a","tokens":100,"seq_len":32}]'
bad "warmup longer than the stage" 'training.stages[0].warmup_steps: 5 exceeds the stage'"'"'s 2 steps' \
    '[{"name":"a","tokens":1024,"seq_len":32,"warmup_steps":5}]'
bad "unknown stage key" 'training.stages[0].sequence_length: unknown stage key' \
    '[{"name":"a","tokens":1024,"sequence_length":32}]'
bad "duplicate names" 'training.stages[1].name: "a" is also the name of stages[0]' \
    '[{"name":"a","tokens":512,"seq_len":32},{"name":"a","tokens":512,"seq_len":32}]'
bad "missing budget" 'training.stages[0]: a stage needs "tokens"' '[{"name":"a","seq_len":32}]'
bad "no stage trains" 'training.stages: no stage trains' '[{"name":"a","tokens":0,"seq_len":32}]'
bad "batch not divisible" 'training.stages[0].global_batch_tokens: 500 is not a multiple' \
    '[{"name":"a","tokens":1000,"seq_len":32,"global_batch_tokens":500}]'
# a later stage's data is opened at the start: the run fails before its first step
bad "a later stage's missing data" 'training.stages[1] ("b"): data.train: /nope/x' \
    '[{"name":"a","tokens":512,"seq_len":32},{"name":"b","tokens":512,"seq_len":32,"data":{"train":"/nope/x"}}]'
check "a later stage's missing data: nothing trained, no checkpoint written" [ ! -e bad/checkpoints ]

# refused_resume OUT WHAT MESSAGE --set KEY=VALUE...: resuming run/checkpoints/step-6 into OUT
# with the settings given fails printing MESSAGE (WHAT says what was changed) and writes no
# checkpoint; the output in $out
refused_resume() {
    local dir=$1 what=$2 msg=$3 rc=0
    shift 3
    out=$("$sluice" train staged.json --set "training.out_dir=$dir" \
        --resume run/checkpoints/step-6 "$@" 2>&1) || rc=$?
    checks=$((checks + 1))
    if [ "$rc" -eq 0 ] || ! grep -qF "$msg" <<<"$out"; then
        fail "a resume with $what: want '$msg', got (exit $rc): $out"
    fi
    check "the refused resume ($what) wrote no checkpoint" [ ! -e "$dir/checkpoints" ]
}

# ---- a resume keeps the model: another architecture is refused, naming the key ----
refused_resume arch "another top-k" 'model.num_experts_per_tok (checkpoint 4, config 3)' \
    --set model.num_experts_per_tok=3

# ---- a resume continues the data of the stage it re-enters: other shards there (or another
# data.seed) are refused naming the key, not listed as an allowed change; the same shards at
# another path continue bitwise ----
refused_resume newdata "other training data" 'staged.json (--set): data.train: the training data of stage "long" changed since run/checkpoints/step-6 (it read train; this config names train2): a resumed stage continues the data it was reading. To train on other data, add a stage with its own data.train' \
    --set data.train=train2
check "... not listed among the allowed changes first" \
    bash -c '! grep -q "settings changed since the checkpoint" <<<"$1"' _ "$out"
refused_resume newseed "another data.seed" 'staged.json: data.seed: 5, but run/checkpoints/step-6 continues a data order of seed 1234' \
    --set data.seed=5
cp -r train train_moved
"$sluice" train staged.json --set training.out_dir=moved --resume run/checkpoints/step-6 \
    --set data.train=train_moved > moved.log 2>&1 || fail "a resume onto the same shards moved failed: $(tail -3 moved.log)"
check "the same shards moved: listed as a changed setting" \
    grep -q 'settings changed since the checkpoint: .*data.train' moved.log
check "the same shards moved: losses after the resume equal the uninterrupted run's" \
    cmp -s <(losses_after moved/metrics.jsonl 6) full.losses

echo "test_stages: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
