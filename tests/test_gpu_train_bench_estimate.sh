#!/usr/bin/env bash
# gpu_train_bench --estimate (no GPU needed): the layer count and memory estimate for a budget,
# with the expert rows the deferred weight gradients park (bench/README.md): one micro-batch's
# per MoE layer in pairs (--wgrad-group 2, as rows), three with --wgrad-group 4 (and the
# automatic group), as tokens under
# training.park_expert_rows auto (the pairs' 9 layers still fit in an H200's 139.8 GiB) and as
# rows with --park rows (one layer fewer), at most accum - 1 (--accum 2: one, as rows), none
# with --defer-wgrad off; a group of 5 and --park maybe are refused, naming the flag.
# usage: test_gpu_train_bench_estimate.sh GPU_TRAIN_BENCH SOURCE_DIR
set -uo pipefail
bench=$1
cfg=$2/configs/qwen-gated-15a2b.json
fail=0
est() { "$bench" "$cfg" --estimate --mem-gib 139.8 "$@" | tail -1; }
pairs=$(est --accum 4 --wgrad-group 2) || { echo "FAIL: --wgrad-group 2 exited $?"; exit 1; }
auto=$(est --accum 4) || { echo "FAIL: --estimate --accum 4 exited $?"; exit 1; }
autorows=$(est --accum 4 --park rows) || { echo "FAIL: --accum 4 --park rows exited $?"; exit 1; }
group4=$(est --accum 4 --wgrad-group 4) || { echo "FAIL: --wgrad-group 4 exited $?"; exit 1; }
rows4=$(est --accum 4 --wgrad-group 4 --park rows) || { echo "FAIL: --park rows exited $?"; exit 1; }
small=$(est --accum 2 --wgrad-group 4) || { echo "FAIL: --accum 2 --wgrad-group 4 exited $?"; exit 1; }
off=$(est --accum 4 --defer-wgrad off) || { echo "FAIL: --defer-wgrad off exited $?"; exit 1; }
python3 - "$pairs" "$group4" "$rows4" "$small" "$off" "$auto" "$autorows" <<'PY' || fail=1
import json, sys
pairs, group4, rows4, small, off, auto, autorows = (json.loads(a) for a in sys.argv[1:])
bad = []
# 15A2B: 24 MoE layers of which `layers` kept; as rows k (2 h + 3 Im) bf16 values per token per
# layer; as tokens 2 h + 3 k Im values and 12 bytes per slot per layer, plus the shared regather
# buffers, 2 k h values per token, once
per_layer = 4096 * 8 * (2 * 2048 + 3 * 768) * 2 / 2**30
def parked(j):  # deferred_gib is printed to 6 digits
    return j["deferred_gib"] / (j["layers"] * per_layer)
def parked_tokens(j):
    each = (j["layers"] * 4096 * ((2 * 2048 + 3 * 8 * 768) * 2 + 12 * 8) + 4096 * 2 * 8 * 2048 * 2)
    return j["deferred_gib"] / (each / 2**30)
if pairs["layers"] != 9 or abs(parked(pairs) - 1) > 1e-4 or pairs["park_tokens"]:
    bad.append("pairs: %d layers, %.3f micro-batches parked (want 9, 1, as rows)" % (pairs["layers"], parked(pairs)))
if group4["layers"] != 9 or abs(parked_tokens(group4) - 3) > 1e-4 or not group4["park_tokens"]:
    bad.append("groups of 4: %d layers, %.3f parked as tokens (want 9, 3)" % (group4["layers"], parked_tokens(group4)))
if rows4["layers"] != 8 or abs(parked(rows4) - 3) > 1e-4 or rows4["park_tokens"]:
    bad.append("groups of 4 as rows: %d layers, %.3f parked (want 8, 3)" % (rows4["layers"], parked(rows4)))
if abs(parked(small) - 1) > 1e-4 or small["park_tokens"]:
    bad.append("groups of 4 over 2 micro-batches: %.3f parked (want 1, as rows)" % parked(small))
# training.expert_wgrad_group auto: groups of 4 as tokens; a pair where park_expert_rows is rows
if auto != group4:
    bad.append("the automatic group should be 4 as tokens: %s, not %s" % (auto, group4))
if autorows != pairs:
    bad.append("the automatic group with --park rows should be a pair: %s, not %s" % (autorows, pairs))
if off["deferred_gib"] != 0 or off["layers"] != 9:
    bad.append("--defer-wgrad off: %g GiB parked, %d layers" % (off["deferred_gib"], off["layers"]))
for b in bad:
    print("FAIL: " + b)
sys.exit(1 if bad else 0)
PY
err=$("$bench" "$cfg" --estimate --wgrad-group 5 2>&1 >/dev/null)
rc=$?
if [ "$rc" != 2 ] || ! grep -q -- "--wgrad-group" <<<"$err"; then
    echo "FAIL: --wgrad-group 5: exit $rc, '$err'"
    fail=1
fi
err=$("$bench" "$cfg" --estimate --park maybe 2>&1 >/dev/null)
rc=$?
if [ "$rc" != 2 ] || ! grep -q -- "--park" <<<"$err"; then
    echo "FAIL: --park maybe: exit $rc, '$err'"
    fail=1
fi
[ "$fail" = 0 ] && echo "test_gpu_train_bench_estimate: all passed"
exit "$fail"
