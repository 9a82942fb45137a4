#!/usr/bin/env bash
# PyTorch cross-check: sluice's loss and every parameter gradient against an independent
# PyTorch implementation (tests/torch_reference.py) on the same weights and tokens.
# usage: torch_crosscheck.sh DUMP_GRADS_BINARY WORK_DIR
# Exits 77 (skipped) only when Debian's python3-torch is not installed.
set -euo pipefail
dump=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
    echo "python3-torch is not installed for $py: skipping (apt-get install python3-torch)"
    exit 77
fi
rm -rf "$work"
mkdir -p "$work"

base='"vocab_size": 37, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000, "max_position_embeddings": 4096,
  "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "intermediate_size": 24,
  "norm_topk_prob": true, "router_aux_loss_coef": 0.01, "router_z_loss_coef": 0.001,
  "initializer_range": 0.1'

variant() { # name, json body
    mkdir -p "$work/$1"
    printf '{%s, %s}\n' "$base" "$2" > "$work/$1/input.json"
}
variant elementwise_shared_dense '"num_hidden_layers": 3, "attn_output_gate": "elementwise",
  "shared_expert_intermediate_size": 20, "mlp_only_layers": [1], "tie_word_embeddings": false,
  "partial_rotary_factor": 1.0, "rope_scaling": null'
variant headwise_yarn '"num_hidden_layers": 2, "attn_output_gate": "headwise",
  "shared_expert_intermediate_size": 0, "mlp_only_layers": [], "tie_word_embeddings": false,
  "partial_rotary_factor": 1.0,
  "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}'
variant nogate_tied_partial '"num_hidden_layers": 2, "attn_output_gate": "none",
  "shared_expert_intermediate_size": 0, "mlp_only_layers": [], "tie_word_embeddings": true,
  "partial_rotary_factor": 0.5, "rope_scaling": null'

status=0
for dir in "$work"/*/; do
    name=$(basename "$dir")
    echo "== $name"
    "$dump" "$dir/input.json" "$dir" --batch 2 --seq 24 --seed 11
    if ! "$py" "$here/torch_reference.py" "$dir"; then
        echo "MISMATCH in $name"
        status=1
    fi
done
exit $status
