#!/usr/bin/env bash
# bench/overlap_count against hand counts for configs/qwen-gated-15a2b.json (T = 4096 tokens per
# micro-batch, k = 8, h = 2048, Im = 768, bf16) with sluice plan's default hardware figures
# (989 TFLOP/s at 75%, NVLink 450 GB/s, IB 50 GB/s, 8 GPUs per node): the bytes and time of one
# exchange, the experts' dW FLOPs and how much of the dispatch backward they hide, on 8 GPUs
# with EP 8 (one node) and 16 GPUs with EP 16 (two nodes: 7 of rank 0's 15 peers on NVLink);
# and bad input (exit 2 naming the flag, exit 1 naming the problem).
# usage: test_overlap_count.sh OVERLAP_COUNT_BINARY SOURCE_DIR
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"
bin=$1
cfg=$2/configs/qwen-gated-15a2b.json
# hand counts, formatted as the tool prints them
fmt() { awk "BEGIN { printf \"$1\", $2 }"; }
T=4096 k=8 h=2048 Im=768 flop_s=989e12*0.75
dw=$(fmt %.3g "2*$T*$k*3*$h*$Im")
t_dw=$(fmt %.1f "2*$T*$k*3*$h*$Im/($flop_s)*1e6")

check_split() { # gpus ep nvlink_peer_share
    local gpus=$1 ep=$2 nv=$3 out
    out=$("$bin" "$cfg" --gpus "$gpus" --ep "$ep") || fail "--gpus $gpus --ep $ep exited $?"
    local bytes t_x hidden
    bytes=$(fmt %.4g "$T*$k*($ep-1)/$ep*$h*2")
    t_x=$(fmt %.1f "($T*$k*($ep-1)/$ep*$h*2)*($nv/450e9 + (1-$nv)/50e9)*1e6")
    hidden=$(awk "BEGIN { a = $t_dw; b = $t_x; printf \"%.1f\", a < b ? a : b }")
    for want in "$bytes bytes sent per GPU" "$t_x us;" \
        "| experts' weight gradients dW (implemented) | dispatch backward | $dw | $t_dw | $hidden of $t_x"; do
        grep -qF -- "$want" <<<"$out" || fail "--gpus $gpus --ep $ep: output lacks '$want'"
    done
    echo "--gpus $gpus --ep $ep: one exchange $bytes bytes, $t_x us; dW $t_dw us hides $hidden us"
}
check_split 8 8 1
check_split 16 16 7/15

"$bin" "$cfg" --gpus 8 --ep 3 2>/dev/null
[ $? -eq 1 ] || fail "--ep 3 on 8 GPUs should exit 1"
err=$("$bin" "$cfg" --gpus x 2>&1 >/dev/null)
[ $? -eq 2 ] && grep -qF -- "--gpus" <<<"$err" || fail "--gpus x: exit 2 naming --gpus, got '$err'"
err=$("$bin" "$cfg" --gpus 8 --ep 1 2>&1 >/dev/null)
[ $? -eq 1 ] && grep -qF "no expert exchange" <<<"$err" || fail "--ep 1: '$err'"

[ $failures -eq 0 ] && echo "test_overlap_count: ok" || echo "test_overlap_count: $failures failures"
exit $((failures > 0))
