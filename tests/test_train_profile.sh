#!/usr/bin/env bash
# `sluice train --profile N [--profile-from STEP]` (trainer/trainer_profile.c): the step profile of
# a training run. On a small MoE trained from shards:
#   1. one rank, the default window (the process's steps 2 and 3 of 5): the banner names it, rank 0
#      prints one table after step 3 whose rows include the reader's host work, the loop's
#      bookkeeping, the model's and the optimizer's regions, and that add up to the steps' wall
#      time (OK); the metrics file gets one "profile" event (steps 2-3, its rows, rows_add_up)
#      beside the usual 5 step records;
#   2. a window the run cuts short (--profile 3 --profile-from 4 of 5 steps): a warning, and the
#      table and event of the two steps profiled;
#   3. a resumed run that starts after the window: a warning that no step was profiled, no event;
#   4. bad flags: a clear error and a non-zero exit each (a count that is not a positive number,
#      a missing value, --profile-from without --profile, a window after the schedule's end,
#      that one printed once under mpirun -np 2);
#   5. two ranks with expert parallelism 2: one table, one line comparing the ranks, one event
#      (ranks 2).
# Mode cuda (the emulated build in CI; a GPU build without a device skips): case 1 on the cuda
# backend in bf16, whose marks are CUDA events.
# usage: test_train_profile.sh cpu|cuda SLUICE_BINARY WORK_DIR [MPIRUN]
set -euo pipefail
mode=$1
sluice=$2
work=$3
mpiexec=${4:-mpirun}
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"
grammar_data "$sluice" 3 1500 100

backend='"threads": 2'
[ "$mode" = cuda ] && backend='"name": "cuda"'
cat > tiny.json <<JSON
{
  "model": {"vocab_size": 257, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
            "router_aux_loss_coef": 0.01, "attn_output_gate": "elementwise"},
  "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 256,
               "max_steps": 5, "lr": 3e-3, "warmup_steps": 1, "log_every": 1,
               "save_every": 3, "out_dir": "run"},
  "data": {"train": "train"},
  "backend": {$backend}
}
JSON

# check_profile LOG METRICS FIRST LAST RANKS: the table in LOG and the one event in METRICS
check_profile() {
    /usr/bin/python3 - "$@" <<'PY'
import json, sys
log, metrics, first, last, ranks = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
text = open(log).read()
steps = last - first + 1
title = f"== profile: {steps} step(s) of this run (steps {first}-{last}"
assert text.count("== profile:") == 1, f"{text.count('== profile:')} tables in {log}"
assert title in text, f"no {title!r} in {log}"
assert "the rows add up to" in text and ": OK (within 5%)" in text, "the rows do not add up"
assert ("across %d ranks" % ranks in text) == (ranks > 1), "the ranks' line"
events = [json.loads(l) for l in open(metrics) if '"event": "profile"' in l]
assert len(events) == 1, f"{len(events)} profile events"
e = events[0]
assert (e["first_step"], e["last_step"], e["ranks"]) == (first, last, ranks), e
p = e["profile"]
assert p["steps"] == steps and p["rows_add_up"] is True, p
rows = {r["region"]: r for r in p["rows"]}
for name in ["next micro-batch's tokens (host: reader, shuffle)",
             "step bookkeeping (batch hash all-reduce, load statistics)",
             "checkpoint commit (the previous save's background write)",
             "attention kernel fwd", "expert GEMMs weight grad", "LM head + cross-entropy",
             "optimizer: AdamW (+ router bias)",
             "device idle between regions (host work, launch gaps)"]:
    assert name in rows, f"row missing: {name!r}"
for name in ["next micro-batch's tokens (host: reader, shuffle)",
             "step bookkeeping (batch hash all-reduce, load statistics)"]:
    # 4 micro-batches a step at one rank (2 at two), one bookkeeping region
    want = 1 if "bookkeeping" in name else 4 // ranks
    assert rows[name]["calls"] == want, (name, rows[name]["calls"], want)
assert e["busy_ms"]["min"] <= e["busy_ms"]["mean"] <= e["busy_ms"]["max"], e["busy_ms"]
print(f"profile of steps {first}-{last}: {len(rows)} rows, step {p['step_wall_ms']:.3f} ms, "
      f"device timers {p['device_timers']}")
PY
}

# 1. the default window
check "train --profile 2" "$sluice" train tiny.json --profile 2 >p1.log 2>&1 || show p1.log
if [ "$mode" = cuda ] && grep -q "no CUDA device\|unknown backend" p1.log; then
    echo "SKIP: no CUDA device (a GPU build on a machine without a GPU)"
    exit 77
fi
check "banner names the window" grep -q "profile: steps 2-3 (--profile" p1.log
check "profile of steps 2-3" check_profile p1.log run/metrics.jsonl 2 3 1
check "5 step records" test "$(grep -c '^{"step"' run/metrics.jsonl)" = 5
if [ "$mode" = cuda ]; then
    check "CUDA events" grep -q "device time between CUDA events on the stream" p1.log
else
    check "host clock" grep -q "host clock (the backend runs each operation when called)" p1.log
fi

if [ "$mode" = cpu ]; then
    # 2. cut short
    check "train --profile 3 --profile-from 4" "$sluice" train tiny.json --profile 3 \
        --profile-from=4 --set training.out_dir=run2 >p2.log 2>&1 || show p2.log
    check "cut short: warning" grep -q "the run ended after 2 profiled step(s)" p2.log
    check "cut short: steps 4-5" check_profile p2.log run2/metrics.jsonl 4 5 1

    # 3. resumed after the window: run 1 saved step 3; 5 -> 8 steps, the window at step 2
    check "resume --profile-from 2" "$sluice" train tiny.json --resume auto --profile 1 \
        --profile-from 2 --set training.max_steps=8 >p3.log 2>&1 || show p3.log
    check "nothing profiled: warning" grep -q "no step was profiled (steps 2-2; this run took steps 6-8)" p3.log
    check "nothing profiled: one event (run 1's)" test "$(grep -c '"event": "profile"' run/metrics.jsonl)" = 1

    # 4. bad flags
    bad() { # bad MESSAGE ARGS...: exit non-zero, MESSAGE printed once
        local msg=$1
        shift
        local rc=0
        "$@" >bad.log 2>&1 || rc=$?
        checks=$((checks + 1))
        if [ "$rc" = 0 ] || [ "$(grep -cF -- "$msg" bad.log)" != 1 ]; then
            fail "$* -> exit $rc, expected one line with '$msg':"
            show bad.log
        fi
    }
    bad "--profile needs a positive number of steps, got '0'" "$sluice" train tiny.json --profile 0
    bad "--profile needs a positive number of steps, got '2x'" "$sluice" train tiny.json --profile=2x
    bad "--profile-from needs a positive number of steps, got ''" "$sluice" train tiny.json --profile 1 --profile-from
    bad "--profile-from needs --profile N" "$sluice" train tiny.json --profile-from 2
    bad "--profile-from 9: the schedule (tiny.json) has 5 steps" "$sluice" train tiny.json \
        --profile 1 --profile-from 9 --set training.out_dir=run_bad
    mpi_env
    bad "--profile-from 9: the schedule (tiny.json) has 5 steps" "$mpiexec" -np 2 "$sluice" \
        train tiny.json --profile 1 --profile-from 9 --set training.out_dir=run_bad2

    # 5. two ranks, expert parallelism 2
    check "mpirun -np 2 --profile 2" "$mpiexec" -np 2 "$sluice" train tiny.json --profile 2 \
        --set training.out_dir=run_ep --set parallel.expert_parallel=2 >p5.log 2>&1 || show p5.log
    check "two ranks: one table" check_profile p5.log run_ep/metrics.jsonl 2 3 2
fi

echo "$checks checks, $failures failed"
[ "$failures" = 0 ]
