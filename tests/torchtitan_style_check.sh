#!/usr/bin/env bash
# The torchtitan-style PyTorch baseline (bench/torchtitan_style_bench.py) computes sluice's model:
# on the same weights and tokens as sluice's CPU backend (tests/dump_grads), every micro-batch's
# cross-entropy, LBL and z-loss, the objective and every parameter gradient agree (its --check,
# float32 on the CPU through the grouped GEMMs' loop fallback, with the expert padding and the
# permutation of the GPU path). Variants: elementwise gate with a gated shared expert, a dense
# layer, z-loss and two micro-batches; headwise gate, tied embeddings, unnormalized top-k. Then
# the benchmark itself runs 2 steps (one timed) on the CPU at tiny widths (its timing loop and JSON).
# usage: torchtitan_style_check.sh DUMP_GRADS SOURCE_DIR WORK_DIR
# Exits 77 (skipped) without Debian's python3-torch, a failure under CI=true.
set -euo pipefail
dump=$1
src=$2
work=$3
. "$(dirname "$0")/skip_or_fail.sh"
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null ||
    skip_or_fail "python3-torch is not installed for $py (apt-get install python3-torch)"
rm -rf "$work"
mkdir -p "$work"
bench=$src/bench/torchtitan_style_bench.py

base='"vocab_size": 37, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000, "max_position_embeddings": 4096,
  "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "intermediate_size": 24,
  "router_aux_loss_coef": 0.01, "initializer_range": 0.1, "rope_scaling": null'
variant() { # NAME MODEL_KEYS TRAINING_KEYS
    mkdir -p "$work/$1"
    printf '{"model": {%s, %s},\n "training": {"seed": 11, "micro_batch_size": 2, "seq_len": 24, %s}}\n' \
        "$base" "$2" "$3" >"$work/$1/input.json"
}
variant elementwise_shared_dense '"num_hidden_layers": 3, "attn_output_gate": "elementwise",
  "shared_expert_intermediate_size": 20, "mlp_only_layers": [1], "tie_word_embeddings": false,
  "partial_rotary_factor": 1.0, "norm_topk_prob": true, "router_z_loss_coef": 0.001' \
    '"global_batch_tokens": 96'
variant headwise_tied_partial '"num_hidden_layers": 2, "attn_output_gate": "headwise",
  "shared_expert_intermediate_size": 0, "mlp_only_layers": [], "tie_word_embeddings": true,
  "partial_rotary_factor": 0.5, "norm_topk_prob": false, "router_z_loss_coef": 0' \
    '"global_batch_tokens": 48'

status=0
for dir in "$work"/*/; do
    name=$(basename "$dir")
    echo "== $name"
    "$dump" "$dir/input.json" "$dir"
    if ! OMP_NUM_THREADS=2 "$py" "$bench" --check "$dir"; then
        echo "MISMATCH in $name"
        status=1
    fi
done

# The benchmark loop on the CPU: 2 layers of the tiny config, 2 timed steps.
echo "== benchmark smoke (cpu, fp32)"
out=$work/bench.out
if ! OMP_NUM_THREADS=2 "$py" "$bench" "$src/configs/tiny.json" --device cpu --precision fp32 \
    --compile off --layers 2 --seq 32 --batch 2 --accum 2 --steps 1 --warmup 1 >"$out" 2>&1; then
    cat "$out"
    echo "FAIL: the benchmark failed on the CPU"
    exit 1
fi
cat "$out"
"$py" - "$out" <<'PY' || status=1
import json, math, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
bad = [k for k in ("tokens_per_s", "ms_per_step", "flops_per_token", "loss_first", "loss_last")
       if not (isinstance(j.get(k), (int, float)) and math.isfinite(j[k]) and j[k] > 0)]
if j.get("layers") != 2 or j.get("tokens_per_step") != 2 * 32 * 2:
    bad.append(f"shape: layers {j.get('layers')}, tokens/step {j.get('tokens_per_step')}")
print("FAIL: " + ", ".join(bad) if bad else "benchmark JSON: ok")
sys.exit(1 if bad else 0)
PY
exit $status
