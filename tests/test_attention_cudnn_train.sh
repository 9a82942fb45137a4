#!/usr/bin/env bash
# The model trains the same with attention.kernel = "cudnn" (cuDNN's fused SDPA plus sluice's gate)
# as with sluice's kernels: `sluice train` on backend cuda in bf16, 4 steps from the same
# initialization and data, once with "auto" and once with "cudnn" (both with
# backend.deterministic = false, which cudnn needs), for the elementwise, headwise and gate-less
# models (head dim 64, GQA 2, 128-token sequences). Per step the two runs' losses must agree
# within 2e-2 relative (the bound test_cuda_train.sh holds bf16 to against the CPU), and the
# cudnn run's loss must fall. Then the start-up errors: attention.kernel = "cudnn" with document
# masking, and on the cpu backend, are config errors naming the key.
#
# Label gpu: needs a GPU and libcudnn 9; skipped (77, missing hardware) without a CUDA backend or
# where cudnn does not load (the emulated build, a node without libcudnn), with the reason.
# usage: test_attention_cudnn_train.sh SLUICE_BINARY WORK_DIR [CUDNN_LIBRARY [MODELS]]
#   CUDNN_LIBRARY: exported as SLUICE_CUDNN_LIBRARY (the emulated build passes emu's cuDNN test
#   double, emu/cudnn/cudnn_emu.c: test_attention_cudnn_train_emu, label cuda; "" = the default).
#   MODELS: which of "elementwise headwise nogate" to train (the emulated build trains one, with
#   one layer and one sequence per micro-batch: the emulator is slow).
set -euo pipefail
sluice=$1
work=$2
[ -n "${3:-}" ] && export SLUICE_CUDNN_LIBRARY=$3
models=${4:-elementwise headwise nogate}
quick=()
[ -n "${4:-}" ] && quick=(--set training.micro_batch_size=1 --set training.global_batch_tokens=256
    --set model.num_hidden_layers=1)
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"

/usr/bin/python3 - <<'PY'
import random
r = random.Random(11)
words = ["the", "king", "went", "up", "to", "city", "and", "his", "son", "spake", "unto", "people"]
open("train.txt", "w").write("\n".join(" ".join(r.choice(words) for _ in range(12))
                                       for _ in range(3000)) + "\n")
PY
"$sluice" data build --quiet --frame-tokens 4096 -o train train.txt

config() { # name, gate
    cat > "$1.json" <<JSON
{"model": {"vocab_size": 257, "hidden_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32, "num_hidden_layers": 2, "router_aux_loss_coef": 0.01,
           "initializer_range": 0.05, "attn_output_gate": "$2"},
 "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_tokens": 512,
              "max_steps": 4, "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 1, "log_every": 1,
              "save_every": 0, "seed": 5, "precision": "bf16"},
 "data": {"train": "train"},
 "backend": {"name": "cuda", "deterministic": false}}
JSON
}
config elementwise elementwise
config headwise headwise
config nogate none

# Does cudnn load here? (no CUDA backend, the emulated build, no libcudnn: skip, saying why)
if ! out=$("$sluice" train elementwise.json --set attention.kernel=cudnn \
    --set training.max_steps=1 --set training.out_dir=probe 2>&1); then
    if grep -q "no CUDA device\|unknown backend\|attention.kernel: .*\(not available in the emulated build\|cannot load\|is cuDNN [0-9]\|cudnnCreate\|compute capability\)" <<<"$out"; then
        echo "SKIP: the cudnn attention kernel does not run here: $(grep -m1 "error" <<<"$out")"
        exit 77
    fi
    echo "$out"
    exit 1
fi

run() { # config, out dir, extra --set arguments...
    local cfg=$1 out=$2
    shift 2
    "$sluice" train "$cfg.json" --set "training.out_dir=$out" "$@" > "$out.log" 2>&1 ||
        { cat "$out.log"; exit 1; }
}
for m in $models; do
    echo "== $m"
    run $m $m-auto --set attention.kernel=auto "${quick[@]}"
    run $m $m-cudnn --set attention.kernel=cudnn "${quick[@]}"
    grep -q "attention: cuDNN" $m-cudnn.log || { echo "FAIL: $m: no cuDNN line"; cat $m-cudnn.log; exit 1; }
done

/usr/bin/python3 - $models <<'PY'
import json, sys
def losses(d):
    return [json.loads(l)["loss"] for l in open(f"{d}/metrics.jsonl") if l.startswith('{"step')]
ok = True
for m in sys.argv[1:]:
    a, b = losses(f"{m}-auto"), losses(f"{m}-cudnn")
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a else float("inf")
    good = len(a) == len(b) == 4 and worst <= 2e-2 and b[-1] < b[0]
    print(f"{'OK  ' if good else 'FAIL'} {m}: worst relative loss difference {worst:.3g} (bound "
          f"0.02); auto {[round(x, 5) for x in a]}, cudnn {[round(x, 5) for x in b]}")
    ok &= good
raise SystemExit(0 if ok else 1)
PY

# Start-up errors name the key.
expect_error() { # what, fragment, arguments...
    local what=$1 frag=$2
    shift 2
    if out=$("$sluice" train elementwise.json --set training.out_dir=bad "$@" 2>&1); then
        echo "FAIL: $what: accepted"
        exit 1
    fi
    grep -q -- "$frag" <<<"$out" || { echo "FAIL: $what: no \"$frag\" in: $out"; exit 1; }
    echo "OK   $what: $(grep -m1 error <<<"$out")"
}
expect_error "cudnn with document masks" "attention.kernel: \"cudnn\": cuDNN's fused attention has no per-document mask" \
    --set attention.kernel=cudnn --set training.document_mask=true
expect_error "cudnn on the cpu backend" "attention.kernel: \"cudnn\" needs backend.name = \"cuda\"" \
    --set attention.kernel=cudnn --set backend.name=cpu --set training.precision=auto
echo "test_attention_cudnn_train: all passed"
