#!/usr/bin/env bash
# sluice plan from the command line: the text and --json outputs for configs/qwen-gated-15a2b.json
# on 8 GPUs with EP 8, a plan that does not fit naming the knob that would make it fit, and bad
# flags (exit 2, the message names the flag). The numbers themselves are checked against hand
# counts in tests/test_plan.c.
# usage: test_plan_cli.sh SLUICE_BINARY SOURCE_DIR
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"
sluice=$1
cfg=$2/configs/qwen-gated-15a2b.json

out=$("$sluice" plan "$cfg" --gpus 8 --ep 8) || fail "plan exited $?"
for want in "EP 8" "parameters per GPU: 3094978560" "AdamW moments, with ZeRO-1" \
    "recompute layer" "expert all-to-all" "gradient reduce-scatter" "MFU" "DOES NOT FIT" \
    "hidden behind the experts' weight gradients" \
    "would fit with: --recompute layer" "H100 SXM"; do
    grep -qF -- "$want" <<<"$out" || fail "text output lacks '$want'"
done

json=$("$sluice" plan "$cfg" --gpus 8 --ep 8 --recompute layer --json) || fail "--json exited $?"
grep -q '"fits":[[:space:]]*true' <<<"$json" || fail "--recompute layer should fit: $json"
grep -q '"gpu_params_expert":[[:space:]]*1811939328' <<<"$json" || fail "JSON expert params"
grep -q '"grad_reduce_op":[[:space:]]*"reduce-scatter"' <<<"$json" || fail "JSON: ZeRO-1 reduce-scatter"
grep -q '"alltoall_hidden_s":[[:space:]]*0\.[0-9]*[1-9]' <<<"$json" || fail "JSON: hidden all-to-all"

out=$("$sluice" plan "$cfg" --gpus 8 --gpu-memory 60 --recompute layer --no-zero1) ||
    fail "plan exited $?"
grep -qF "would fit with: --zero1" <<<"$out" || fail "60 GiB without ZeRO-1 should name --zero1"
grep -qF "gradient all-reduce" <<<"$out" || fail "without ZeRO-1 the gradients are all-reduced"

# --gpu h200 on one GPU: the measured rates, named with their provenance, and the step's
# components (their values are checked against measured steps in test_plan_measured).
# h200_9: the measured shape, 9 layers of 4 micro-batches of 4,096 tokens, plus the options given
h200_9() { "$sluice" plan "$cfg" --gpus 1 --ep 1 --gpu h200 --layers 9 --global-batch 16384 "$@"; }
h200_out=$(h200_9) || fail "--gpu h200 exited $?"
for want in "H200 SXM" "1 GPU (1 node of 8)" "measured on an H200, 2026-11-28" "by component (256 rows per expert" \
    "expert GEMMs weight grad" "attention kernel bwd" "optimizer: AdamW" "139.8 GiB"; do
    grep -qF -- "$want" <<<"$h200_out" || fail "--gpu h200 output lacks '$want'"
done
json=$("$sluice" plan "$cfg" --gpus 1 --ep 1 --gpu h200 --layers 5 --micro-batch 8 \
    --global-batch 32768 --json) || fail "--gpu h200 --json exited $?"
grep -q '"name":[[:space:]]*"LM head + cross-entropy"' <<<"$json" || fail "JSON: compute_parts"
grep -q '"layers":[[:space:]]*5' <<<"$json" || fail "JSON: --layers 5"
# --expert-gemm auto as the trainer runs it: on a Hopper GPU (the H200 here) in bf16 the Hopper
# grouped GEMM (wgmma) for the forward, data gradient and weight gradient, at 2,048 rows per
# expert (this shape) and at 256 (the next). Both GPU kinds the plan knows are Hopper; the old
# mapping where the kernel does not apply (fp32) is checked in tests/test_plan.c.
grep -q '"expert_gemm":[[:space:]]*"auto"' <<<"$json" || fail "JSON: expert_gemm auto"
grep -q '"expert_gemm_path":[[:space:]]*"wgmma"' <<<"$json" ||
    fail "JSON: auto on the H200 times the forward and data gradient on wgmma (2048 rows)"
grep -q '"expert_gemm_dw_path":[[:space:]]*"wgmma"' <<<"$json" ||
    fail "JSON: auto on the H200 times the weight gradient on wgmma (2048 rows)"
json=$(h200_9 --json) ||
    fail "--gpu h200 --json (256 rows per expert) exited $?"
grep -q '"expert_gemm_path":[[:space:]]*"wgmma"' <<<"$json" ||
    fail "JSON: auto on the H200 times the forward and data gradient on wgmma (256 rows)"
grep -q '"expert_gemm_dw_path":[[:space:]]*"wgmma"' <<<"$json" ||
    fail "JSON: auto on the H200 times the weight gradient on wgmma (256 rows)"
json=$(h200_9 --expert-gemm lanes --json) || fail "--expert-gemm lanes exited $?"
grep -q '"expert_gemm_path":[[:space:]]*"lanes"' <<<"$json" ||
    fail "JSON: --expert-gemm lanes should time the forward on the lanes"
grep -q '"expert_gemm_dw_path":[[:space:]]*"lanes"' <<<"$json" ||
    fail "JSON: --expert-gemm lanes should time the weight gradient on the lanes"
out=$(h200_9 --expert-gemm wgmma) || fail "--expert-gemm wgmma exited $?"
grep -qF "expert GEMMs wgmma: wgmma, weight grad wgmma" <<<"$out" ||
    fail "--expert-gemm wgmma should time every pass on wgmma"
# --defer-wgrad: the groups in the weight gradient's timing (header line, JSON), or not;
# training.expert_wgrad_group auto: groups of 4 kept as tokens, pairs where they would be rows
# groups_of_4 OUTPUT WHAT: the weight gradient timed over groups of 4, 3 parked as tokens
groups_of_4() {
    grep -qF "weight grad wgmma over groups of 4 micro-batches" <<<"$1" ||
        fail "$2 should time the weight gradient in groups of 4"
    grep -qF "(3 micro-batches of each group of 4, kept as tokens)" <<<"$1" ||
        fail "$2 should park 3 micro-batches, as tokens (park_expert_rows auto)"
}
groups_of_4 "$h200_out" "auto on an H200 in bf16 with 4 micro-batches"
grep -qF "weight grad wgmma over pairs of micro-batches" <<<"$(h200_9 --park rows)" ||
    fail "with --park rows the automatic group should be a pair"
json=$(h200_9 --defer-wgrad off --json) || fail "--defer-wgrad off exited $?"
grep -q '"expert_wgrad_group":[[:space:]]*1[,}]' <<<"$json" ||
    fail "JSON: --defer-wgrad off should time no groups"
# --wgrad-group: groups of 4 in the header, the JSON and the parked rows
out=$(h200_9 --wgrad-group 4) || fail "--wgrad-group 4 exited $?"
groups_of_4 "$out" "--wgrad-group 4"
grep -qF "expert rows parked as tokens" <<<"$out" ||
    fail "--wgrad-group 4 should time the parked tokens' copies and regathers"
# park_expert_rows: tokens take less memory than rows for the same group; pairs keep rows
mem_of() { sed -n 's/.*"deferred_bytes":[[:space:]]*\([0-9.e+]*\).*/\1/p' <<<"$1"; }
jt=$(h200_9 --wgrad-group 4 --json) || fail "--wgrad-group 4 --json exited $?"
jr=$(h200_9 --wgrad-group 4 --park rows --json) || fail "--park rows exited $?"
grep -q '"park_tokens":[[:space:]]*true' <<<"$jt" || fail "JSON: group 4 should park tokens"
grep -q '"park_tokens":[[:space:]]*false' <<<"$jr" || fail "JSON: --park rows should park rows"
# rows at groups of 4 break the 9 layers' budget; the advice names tokens first
out=$(h200_9 --wgrad-group 4 --park rows)
grep -qF "would fit with: --recompute attention; training.park_expert_rows=tokens; training.expert_wgrad_group=3" <<<"$out" ||
    fail "groups of 4 as rows: the advice should name park_expert_rows=tokens: $(grep -F "would fit" <<<"$out")"
# (15A2B: the routed rows are 64% of a parked micro-batch's bytes, h and dgu the rest)
awk -v t="$(mem_of "$jt")" -v r="$(mem_of "$jr")" 'BEGIN { exit !(t > 0 && t < 0.6 * r) }' ||
    fail "group 4: tokens ($(mem_of "$jt") bytes) should take under 0.6 of the rows' ($(mem_of "$jr"))"
out=$(h200_9 --wgrad-group 2) || fail "h200 9 layers, pairs exited $?"
grep -qF "(1 micro-batch of each group of 2, kept as rows)" <<<"$out" ||
    fail "pairs should keep rows under park_expert_rows auto"
grep -qF "expert rows parked as tokens" <<<"$out" && fail "pairs time no parked tokens"
check_bad_park=$("$sluice" plan "$cfg" --gpus 8 --park maybe 2>&1 >/dev/null)
[[ $check_bad_park == *--park* ]] || fail "--park maybe should name the flag: $check_bad_park"
json=$(h200_9 --wgrad-group 4 --json) || fail "--wgrad-group 4 --json exited $?"
grep -q '"expert_wgrad_group":[[:space:]]*4[,}]' <<<"$json" ||
    fail "JSON: --wgrad-group 4 should say groups of 4"
"$sluice" plan --help | grep -qF "auto | grouped | per-expert | lanes | wgmma" ||
    fail "plan --help should list wgmma among the expert GEMM strategies"
out=$("$sluice" plan "$cfg" --gpus 8 --efficiency 0.75) || fail "--efficiency exited $?"
grep -qF "(flat model)" <<<"$out" || fail "--efficiency should select the flat model"
grep -qF "by component" <<<"$out" && fail "the flat model prints no components"
grep -qF "8 GPUs (1 node of 8)" <<<"$out" || fail "8 GPUs on one node: $(head -n 1 <<<"$out")"
out=$(h200_9 --global-batch 4096) || fail "one micro-batch exited $?"
grep -qF "global batch 4096 tokens = 1 micro-batch per GPU per step" <<<"$out" ||
    fail "one micro-batch per step is singular: $(grep -F "global batch" <<<"$out")"

# Bad flags: exit 2 and the flag in the message.
check_bad() {
    local flag=$1
    shift
    err=$("$sluice" plan "$@" 2>&1 >/dev/null)
    rc=$?
    [ "$rc" = 2 ] || fail "$* exited $rc, expected 2"
    grep -qF -- "$flag" <<<"$err" || fail "$* error does not name $flag: $err"
}
check_bad --gpus "$cfg" --gpus 0
check_bad --gpus "$cfg" --gpus x
check_bad --gpus "$cfg"
check_bad --ep "$cfg" --gpus 8 --ep 3
# without --ep the config's expert parallelism is named as such, with its file, and the flag
# that would fit (was "--ep: 8 does not divide --gpus 12", naming a flag not given); a config
# value, so exit 1 as the config's global batch
for gpus in 12 1; do
    err=$("$sluice" plan "$cfg" --gpus $gpus 2>&1 >/dev/null)
    rc=$?
    fit=$([ $gpus = 12 ] && echo 4 || echo 1)
    want="sluice plan: error: parallel.expert_parallel = 8 ($cfg) does not divide --gpus $gpus; pass --ep E that divides both the GPUs and the 128 experts, e.g. --ep $fit"
    [ "$rc" = 1 ] && [ "$err" = "$want" ] ||
        fail "--gpus $gpus without --ep: rc $rc (want 1), '$err' (want '$want')"
done
check_bad --ep "$cfg" --gpus 12 --ep 12
check_bad --recompute "$cfg" --gpus 8 --recompute full
check_bad --gpu-memory "$cfg" --gpus 8 --gpu-memory -5
check_bad --efficiency "$cfg" --gpus 8 --efficiency 1.5
check_bad --ib-gbs "$cfg" --gpus 8 --ib-gbs
check_bad --bogus "$cfg" --gpus 8 --bogus
check_bad --gpu "$cfg" --gpus 8 --gpu a100
check_bad --layers "$cfg" --gpus 8 --layers 25
check_bad --expert-gemm "$cfg" --gpus 8 --expert-gemm fast
check_bad --defer-wgrad "$cfg" --gpus 8 --defer-wgrad sometimes
check_bad --wgrad-group "$cfg" --gpus 8 --wgrad-group 5
check_bad --global-batch "$cfg" --gpus 8 --global-batch 1000
err=$("$sluice" plan /nonexistent.json --gpus 8 2>&1)
rc=$?
[ "$rc" = 1 ] && grep -qF /nonexistent.json <<<"$err" || fail "missing config: rc $rc, '$err'"

[ "$failures" = 0 ] && echo "test_plan_cli: all checks passed"
exit $((failures > 0))
