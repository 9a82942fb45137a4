#!/usr/bin/env bash
# PyTorch cross-check: sluice's loss terms, expert routing and every parameter gradient of one
# optimizer step against an independent PyTorch implementation (tests/torch_reference.py) on
# the same weights and tokens. Each variant is a run configuration (input.json); sluice
# (tests/dump_grads.c) and the reference both read that file, so sluice's config parsing and
# its Hugging Face config.json round trip are checked as well as its math.
# usage: torch_crosscheck.sh DUMP_GRADS_BINARY WORK_DIR
# Exits 77 (skipped) when Debian's python3-torch is not installed, except under CI=true where
# that is a failure (tests/skip_or_fail.sh).
set -euo pipefail
dump=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/skip_or_fail.sh"
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
    skip_or_fail "python3-torch / python3-numpy are not installed for $py (apt-get install python3-torch python3-numpy)"
fi
rm -rf "$work"
mkdir -p "$work"

base='"vocab_size": 37, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000, "max_position_embeddings": 4096,
  "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "intermediate_size": 24,
  "router_aux_loss_coef": 0.01, "router_z_loss_coef": 0.001, "initializer_range": 0.1'

# variant NAME MODEL_KEYS [TRAINING_KEYS [PARALLEL_KEYS]]
# training defaults here: seed 11, 2 sequences of 24 tokens (unless seq_len is given), one
# micro-batch (unless global_batch_tokens is given).
variant() {
    local train='"seed": 11, "micro_batch_size": 2'
    [[ ${3:-} == *seq_len* ]] || train+=', "seq_len": 24'
    mkdir -p "$work/$1"
    printf '{"model": {%s, %s},\n "training": {%s%s},\n "parallel": {%s}}\n' \
        "$base" "$2" "$train" "${3:+, $3}" "${4:-}" > "$work/$1/input.json"
}
variant elementwise_shared_dense '"num_hidden_layers": 3, "attn_output_gate": "elementwise",
  "shared_expert_intermediate_size": 20, "mlp_only_layers": [1], "tie_word_embeddings": false,
  "partial_rotary_factor": 1.0, "rope_scaling": null, "norm_topk_prob": true'
# 150 tokens: more than two 64-row tiles of the fused attention (BQ = BK = 64 in
# attention/gated_attn_cpu.c), not a multiple of them, and past YaRN's original context.
variant headwise_yarn_long '"num_hidden_layers": 2, "attn_output_gate": "headwise",
  "shared_expert_intermediate_size": 0, "mlp_only_layers": [], "tie_word_embeddings": false,
  "partial_rotary_factor": 1.0, "norm_topk_prob": true,
  "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}' \
    '"seq_len": 150'
variant nogate_tied_partial '"num_hidden_layers": 2, "attn_output_gate": "none",
  "shared_expert_intermediate_size": 0, "mlp_only_layers": [], "tie_word_embeddings": true,
  "partial_rotary_factor": 0.5, "rope_scaling": null, "norm_topk_prob": true'
# Capacity ceil(0.75 * 48 * 2 / 8) = 9 slots per expert: drops the lightest slots.
variant capacity_probs '"num_hidden_layers": 2, "attn_output_gate": "elementwise",
  "shared_expert_intermediate_size": 12, "mlp_only_layers": [], "tie_word_embeddings": false,
  "norm_topk_prob": true' '' '"capacity_factor": 0.75, "drop_policy": "probs"'
# Drops the latest tokens; unnormalized top-k weights; two micro-batches (per-batch LBL).
variant capacity_position_unnormalized '"num_hidden_layers": 2, "attn_output_gate": "elementwise",
  "shared_expert_intermediate_size": 0, "mlp_only_layers": [], "tie_word_embeddings": false,
  "norm_topk_prob": false' '"global_batch_tokens": 96' '"capacity_factor": 1.0, "drop_policy": "position"'
# A non-zero selection bias (4 updates at rate 0.02, see dump_grads.c) and global-batch LBL
# over three micro-batches (one rank: the counts of micro-batches 1..m enter micro-batch m).
variant bias_global_lbl '"num_hidden_layers": 2, "attn_output_gate": "elementwise",
  "shared_expert_intermediate_size": 0, "mlp_only_layers": [], "tie_word_embeddings": false,
  "norm_topk_prob": true' '"global_batch_tokens": 144, "global_batch_lbl": true,
  "router_bias_update_rate": 0.02'

status=0
for dir in "$work"/*/; do
    name=$(basename "$dir")
    echo "== $name"
    "$dump" "$dir/input.json" "$dir"
    if ! "$py" "$here/torch_reference.py" "$dir"; then
        echo "MISMATCH in $name"
        status=1
    fi
done
exit $status
