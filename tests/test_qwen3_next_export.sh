#!/usr/bin/env bash
# The Qwen3-Next export (sluice ckpt export --format qwen3_next, training.export_format) against
# an independent PyTorch implementation of the Qwen3-Next forward (tests/torch_qwen3_next.py, which
# reads only the export): per-token logits equal those of `sluice eval --dump-logits` on the same
# weights, for three small models that between them use every transform of the layout:
#   A  elementwise gate, a shared expert, a dense layer (mlp_only_layers), partial rotary, YaRN;
#   B  headwise gate (written as D copies of each head's gate row), no shared expert (a width-1
#      shared expert of zeros), norm_topk_prob false, tied embeddings, exported in bf16 too;
#   C  no gate (zero gate rows, o_proj doubled), no shared expert, written by the final save with
#      training.export_format = "qwen3_next" and by ckpt export (the two files must be equal).
# Also: sluice refuses to read a Qwen3-Next export back (its norms are weight - 1), naming the key.
#
# usage: test_qwen3_next_export.sh SLUICE_BINARY WORK_DIR [torch|hf]
#   torch (default): the reference above, in /usr/bin/python3 with Debian's PyTorch and NumPy;
#     missing, the test skips (77), or fails under CI=true (tests/skip_or_fail.sh).
#   hf: the same models loaded by Hugging Face transformers' own Qwen3NextForCausalLM
#     (tests/hf_qwen3_next.py), in $SLUICE_HF_PYTHON or else python3, which needs transformers
#     >= 4.57 (Qwen3-Next's first release) and PyTorch. Without such a Python this mode skips (77)
#     everywhere, CI included, saying so: transformers is not packaged in Debian bookworm and CI
#     reaches only Debian's archive and npm, so CI can never install it (a GPU node's Python has
#     it: run `SLUICE_HF_PYTHON=python3 ctest -R test_qwen3_next_hf` there). The torch mode covers
#     the layout in CI with a reference written from the same model code.
set -euo pipefail
sluice=$1
work=$2
mode=${3:-torch}
. "$(dirname "$0")/cli_lib.sh"
here=$sl_tests_dir
if [ "$mode" = hf ]; then
    hf_python=${SLUICE_HF_PYTHON:-python3}
    if ! "$hf_python" -c '
import sys, torch, transformers
from packaging.version import Version
sys.exit(0 if Version(transformers.__version__) >= Version("4.57") else 1)' 2>/dev/null; then
        echo "SKIP: no Python with transformers >= 4.57 and PyTorch ($hf_python; set SLUICE_HF_PYTHON):" \
            "transformers is not packaged in Debian bookworm, so CI cannot install it; the torch mode" \
            "(test_qwen3_next_export) checks the layout instead"
        exit 77
    fi
    reference=("$hf_python" "$here/hf_qwen3_next.py")
    python_test_start "$work"
else
    python_test_start "$work"
    /usr/bin/python3 -c "import torch, numpy" 2>/dev/null ||
        skip_or_fail "PyTorch or NumPy missing in /usr/bin/python3 (apt-get install python3-torch)"
    reference=(/usr/bin/python3 "$here/torch_qwen3_next.py")
fi

grammar_data "$sluice" 5 600 100
head -c 47 eval.txt >doc.txt # one sequence of 47 bytes (+ the end-of-document token)

train() { # NAME MODEL_JSON [--set ...]
    local name=$1 model=$2
    shift 2
    cat >"$name.json" <<JSON
{
  "model": $model,
  "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 64,
               "max_steps": 3, "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 1,
               "eval_every": 0, "eval_tokens": 256, "log_every": 1, "out_dir": "$name"},
  "data": {"train": "train"},
  "backend": {"threads": 2}
}
JSON
    "$sluice" train "$name.json" "$@" >"$name.log"
}
compare() { # NAME EXPORT_DIR
    "$sluice" eval --weights "$1/checkpoints/step-3" --data doc.txt --seq-len 47 --batch 1 \
        --dump-logits "$1.logits" >/dev/null
    check "$1: Qwen3-Next export ($2) matches sluice eval ($mode)" "${reference[@]}" "$2" "$1.logits"
}

train A '{"vocab_size": 257, "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "partial_rotary_factor": 0.5,
          "max_position_embeddings": 64,
          "rope_scaling": {"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 32},
          "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
          "shared_expert_intermediate_size": 20, "intermediate_size": 40, "mlp_only_layers": [1],
          "attn_output_gate": "elementwise"}'
"$sluice" ckpt export A/checkpoints/step-3 -o A_q3n --format qwen3_next >/dev/null
compare A A_q3n
/usr/bin/python3 - <<'PY'
import json
c = json.load(open("A_q3n/config.json"))
assert c["model_type"] == "qwen3_next" and c["architectures"] == ["Qwen3NextForCausalLM"], c
assert c["layer_types"] == ["full_attention"] * 3 and c["mlp_only_layers"] == [1], c
assert c["partial_rotary_factor"] == 0.5 and c["rope_parameters"]["partial_rotary_factor"] == 0.5
assert c["rope_scaling"]["rope_type"] == "yarn" and c["rope_parameters"]["rope_type"] == "yarn"
assert c["rope_parameters"]["factor"] == 2 and c["max_position_embeddings"] == 64, c
assert c["shared_expert_intermediate_size"] == 20, c
PY

train B '{"vocab_size": 257, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 4, "head_dim": 8, "num_experts": 6, "num_experts_per_tok": 3,
          "moe_intermediate_size": 16, "norm_topk_prob": false, "tie_word_embeddings": true,
          "attn_output_gate": "headwise"}'
"$sluice" ckpt export B -o B_q3n --format qwen3_next >/dev/null
compare B B_q3n
"$sluice" ckpt export B -o B_bf16 --format qwen3_next --dtype bf16 >/dev/null
# bf16 weights: the reference runs them in float64 against sluice's fp32 logits, so only a loose
# bound holds; the check is that the bf16 path writes the same layout (a wrong row would be far off)
/usr/bin/python3 - <<'PY'
import json, struct
h = lambda f: json.loads(open(f, "rb").read()[8:8 + struct.unpack("<Q", open(f, "rb").read(8))[0]])
a, b = h("B_q3n/model.safetensors"), h("B_bf16/model.safetensors")
assert a.keys() == b.keys(), set(a) ^ set(b)
for k in a:
    if k != "__metadata__":
        assert a[k]["shape"] == b[k]["shape"] and b[k]["dtype"] == "BF16", (k, a[k], b[k])
assert a["model.layers.0.self_attn.q_proj.weight"]["shape"] == [64, 32]
assert a["model.layers.0.mlp.shared_expert.down_proj.weight"]["shape"] == [32, 1]
assert "lm_head.weight" not in a
PY

train C '{"vocab_size": 257, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 1, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
          "moe_intermediate_size": 16, "attn_output_gate": "none"}' \
    --set training.export_format=qwen3_next
check "C: the final save says Qwen3-Next" grep -q "Qwen3-Next layout" C.log
compare C C/final
"$sluice" ckpt export C -o C_q3n --format qwen3_next >/dev/null
/usr/bin/python3 - <<'PY' || fail "C: the final save and ckpt export wrote different tensors"
import json, struct
def tensors(f):
    raw = open(f, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, b = tensors("C/final/model.safetensors"), tensors("C_q3n/model.safetensors")
assert a.keys() == b.keys(), set(a) ^ set(b)
bad = [k for k in a if a[k] != b[k]]
assert not bad, bad
PY
checks=$((checks + 1))
check "C: the same config.json" cmp -s C/final/config.json C_q3n/config.json

# sluice does not read a Qwen3-Next export back
out=$("$sluice" eval --weights C/final --data doc.txt --seq-len 8 2>&1) && st=0 || st=$?
checks=$((checks + 1))
[ "$st" -ne 0 ] && grep -q 'model_type: "qwen3_next"' <<<"$out" || fail "eval read a Qwen3-Next export: $out"
out=$("$sluice" ckpt export C -o x --format qwen3_mixed 2>&1) && st=0 || st=$?
checks=$((checks + 1))
[ "$st" -eq 2 ] && grep -q -- "--format" <<<"$out" || fail "a bad --format was accepted: $out"
out=$("$sluice" train C.json --set training.export_format=qwen2 2>&1) && st=0 || st=$?
checks=$((checks + 1))
[ "$st" -ne 0 ] && grep -q "training.export_format" <<<"$out" || fail "a bad export_format was accepted: $out"

echo "test_qwen3_next_export: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
