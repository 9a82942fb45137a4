#!/usr/bin/env bash
# bench/profile_diff.py: two profiles side by side. On the H200 profiles kept in bench/results
# (the fifth session's call 3 against the fourth's call 3, both 4 x 1 x 4096): the headline of
# each run, every region of both, each change equal to after - before (checked against the JSON
# for every row), largest change first; --top; a sluice train metrics file's "profile" event as
# one side; exit 2 naming the file when a file holds no profile.
# usage: test_profile_diff.sh SOURCE_DIR SLUICE_BINARY WORK_DIR
set -euo pipefail
src=$1
sluice=$2
work=$3
. "$src/tests/cli_lib.sh"
python_test_start "$work"
diff_py="$src/bench/profile_diff.py"
before="$src/bench/results/h200-2026-11-26c/profile.json"
after="$src/bench/results/h200-2026-11-26d/call3/c/profile.json"

check "diff of two H200 profiles" /usr/bin/python3 "$diff_py" "$before" "$after" >diff.out
cat diff.out
check "headlines" grep -q "^before step 342.934 ms; 300.9 model TFLOP/s; 37.9% of its measured peak; 38 host reads" diff.out
check "headline after" grep -q "^after  step 338.361 ms" diff.out
/usr/bin/python3 - "$before" "$after" diff.out <<'PY' || fail "rows"
import json, re, sys
b = {r["region"]: r["ms"] for r in json.load(open(sys.argv[1]))["profile"]["rows"]}
a = {r["region"]: r["ms"] for r in json.load(open(sys.argv[2]))["profile"]["rows"]}
rows = []
for line in open(sys.argv[3]):
    m = re.match(r"^(.{62}) +(\S+) +(\S+) +([-+]\d+\.\d+)$", line.rstrip("\n"))
    if m and m.group(1).strip() not in ("region (device ms per step)", "sum of the rows"):
        rows.append((m.group(1).strip(), float(m.group(4))))
names = set(b) | set(a)
assert {n[:62] for n in names} == {r[0] for r in rows}, "not every region of both runs is listed"
for name, change in rows:
    full = next(n for n in names if n[:62] == name)
    want = a.get(full, 0.0) - b.get(full, 0.0)
    assert abs(change - want) < 1e-3, (name, change, want)
changes = [abs(c) for _, c in rows]
assert changes == sorted(changes, reverse=True), "not largest change first"
print(f"{len(rows)} rows, each change after - before")
PY
check "--top 3" test "$(/usr/bin/python3 "$diff_py" "$before" "$after" --top 3 | grep -c '^[a-zA-Z].* [-+][0-9]*\.[0-9]*$')" = 4

# a training run's metrics file as the after side
grammar_data "$sluice" 3 600 50
cat > tiny.json <<'JSON'
{"model": {"vocab_size": 257, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 1, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 16},
 "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 64, "max_steps": 3,
              "warmup_steps": 1,
              "out_dir": "run"},
 "data": {"train": "train"}, "backend": {"threads": 1}}
JSON
check "sluice train --profile" "$sluice" train tiny.json --profile 1 >train.log 2>&1
check "a metrics file's profile" /usr/bin/python3 "$diff_py" "$before" run/metrics.jsonl >m.out
check "its headline" grep -q "^after  profiled step [0-9.]* ms (1 steps, rows add up: True)" m.out

# no profile: exit 2, the file named
set +e
/usr/bin/python3 "$diff_py" "$before" tiny.json >bad.out 2>&1
rc=$?
set -e
checks=$((checks + 1))
if [ "$rc" != 2 ] || ! grep -q "profile_diff: tiny.json: no profile" bad.out; then
    fail "a file without a profile: exit $rc"
    cat bad.out
fi
echo "$checks checks, $failures failed"
[ "$failures" = 0 ]
