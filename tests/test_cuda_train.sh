#!/usr/bin/env bash
# The CUDA backend trains every model sluice supports like the CPU backend does: for the tiny
# model, an every-feature model (shared expert, dense layer, partial rotary, YaRN, capacity
# drops, z-loss, aux-loss-free bias, elementwise gate) and the headwise and gate-less models,
# `sluice train` runs a few steps on backend cpu, on cuda in fp32 and on cuda in bf16 from
# the same initialization and data. Per step, the fp32 losses must match the CPU's within
# 1e-5 relative, the bf16 losses within 2e-2, and the bf16 loss must fall. Then the
# every-feature model under `mpirun -np 2` with expert parallelism 2 (MPI moves host-staged
# buffers) must match the CPU's two-rank run within 1e-5. And a run on the cuda backend killed
# with SIGKILL and resumed from its checkpoint ends with bitwise the uninterrupted run's weights.
#
# Where it runs: the emulated build (-DSLUICE_CUDA=EMULATED, the CPU SIMT test double of emu/)
# in CI, and a real GPU. Without a CUDA backend (no GPU in an nvcc build, or a CPU-only build)
# it reports itself skipped (77): missing hardware, so also under CI=true.
# usage: test_cuda_train.sh SLUICE_BINARY WORK_DIR [MPIRUN]
set -euo pipefail
sluice=$1
work=$2
mpirun=${3:-mpirun}
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"

/usr/bin/python3 - <<'PY'
import random
r = random.Random(7)
words = ["the", "king", "went", "up", "to", "city", "and", "his", "son", "spake", "unto", "people"]
open("train.txt", "w").write("\n".join(" ".join(r.choice(words) for _ in range(12))
                                       for _ in range(3000)) + "\n")
PY
"$sluice" data build --quiet --frame-tokens 4096 -o train train.txt

# model section fragments: vocab 257 (bytes), small widths
base='"vocab_size": 257, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
  "intermediate_size": 24, "router_aux_loss_coef": 0.01, "initializer_range": 0.05'
config() { # name, model fragment, training fragment, parallel fragment
    cat > "$1.json" <<JSON
{"model": {$base, $2},
 "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 128,
              "max_steps": 4, "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 1, "log_every": 1,
              "save_every": 0, "seed": 3${3:+, $3}},
 "data": {"train": "train"},
 "parallel": {${4:-}},
 "backend": {"threads": 2}}
JSON
}
config tiny '"num_hidden_layers": 2, "attn_output_gate": "elementwise"'
config every '"num_hidden_layers": 3, "attn_output_gate": "elementwise",
  "shared_expert_intermediate_size": 20, "mlp_only_layers": [1], "partial_rotary_factor": 0.5,
  "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
  "router_z_loss_coef": 0.001' '"router_bias_update_rate": 0.02' \
    '"capacity_factor": 0.75, "drop_policy": "probs"'
config headwise '"num_hidden_layers": 2, "attn_output_gate": "headwise"'
config nogate '"num_hidden_layers": 2, "attn_output_gate": "none", "tie_word_embeddings": true'

# Is there a CUDA backend here (emulated, or a GPU)?
if ! out=$("$sluice" train tiny.json --set backend.name=cuda --set training.max_steps=1 \
    --set training.out_dir=probe 2>&1); then
    if grep -q "no CUDA device\|unknown backend" <<<"$out"; then
        echo "SKIP: no CUDA backend here: $(tail -1 <<<"$out")"
        exit 77
    fi
    echo "$out"
    exit 1
fi

# Out of device memory is a clear error naming the tensor and the sizes, and a non-zero exit
# (the emulator's device memory can be capped; a real GPU cannot be made to run out so cheaply).
if "$sluice" --help 2>&1 | grep -q "emulated on the CPU"; then
    set +e
    out=$(SLUICE_EMU_MEM_LIMIT=3000000 "$sluice" train every.json --set backend.name=cuda \
        --set training.out_dir=oom 2>&1)
    rc=$?
    set -e
    msg=$(grep -m1 "out of memory" <<<"$out" || true)
    echo "out of memory: exit $rc: $msg"
    if [ $rc -eq 0 ] || ! grep -q "allocating a [a-z0-9]* tensor \[[0-9, ]*\]: .* MiB requested" <<<"$msg"; then
        echo "FAIL: expected a non-zero exit and a message naming the tensor and the sizes"
        exit 1
    fi
fi

run() { # config, out dir, extra --set arguments...
    local cfg=$1 out=$2
    shift 2
    local start=$SECONDS
    "$sluice" train "$cfg.json" --set "training.out_dir=$out" "$@" > "$out.log" 2>&1 ||
        { cat "$out.log"; exit 1; }
    echo "  $out: $((SECONDS - start)) s"
}

for m in tiny every headwise nogate; do
    echo "== $m"
    run $m $m-cpu
    run $m $m-f32 --set backend.name=cuda --set training.precision=fp32
    run $m $m-bf16 --set backend.name=cuda --set training.precision=bf16
done
echo "== every, mpirun -np 2, expert_parallel 2"
mpi() {
    local out=$1
    shift
    local start=$SECONDS
    "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$sluice" train every.json \
        --set parallel.expert_parallel=2 --set "training.out_dir=$out" "$@" > "$out.log" 2>&1 ||
        { cat "$out.log"; exit 1; }
    echo "  $out: $((SECONDS - start)) s"
}
mpi every-ep2-cpu
mpi every-ep2-f32 --set backend.name=cuda --set training.precision=fp32

echo "== exact resume on the cuda backend (bf16): kill -9 at step 3, --resume auto"
run every resume-full --set backend.name=cuda --set training.precision=bf16 \
    --set training.save_every=2
SLUICE_FAULT=0:3:crash "$sluice" train every.json --set training.out_dir=resume-cut \
    --set backend.name=cuda --set training.precision=bf16 --set training.save_every=2 \
    > resume-cut.log 2>&1 && { echo "FAIL: the run with an injected crash succeeded"; exit 1; }
run every resume-cut --set backend.name=cuda --set training.precision=bf16 \
    --set training.save_every=2 --resume auto
grep -q "resumed from .*step-2 at step 2" resume-cut.log || { cat resume-cut.log; exit 1; }
cmp -s resume-full/final/model.safetensors resume-cut/final/model.safetensors ||
    { echo "FAIL: final weights differ after a resume on the cuda backend"; exit 1; }
echo "OK   cuda bf16: final weights bitwise identical after kill -9 and resume"

/usr/bin/python3 - <<'PY'
import json
def losses(d):
    rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if l.startswith('{"step')]
    return [r["loss"] for r in rows]
ok = True
def compare(ref, got, rtol, what):
    global ok
    a, b = losses(ref), losses(got)
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a else float("inf")
    good = len(a) == len(b) == 4 and worst <= rtol
    print(f"{'OK  ' if good else 'FAIL'} {what}: worst relative loss difference {worst:.3g} "
          f"(bound {rtol:g}); cpu {[round(x, 5) for x in a]}, {got} {[round(x, 5) for x in b]}")
    ok &= good
for m in ["tiny", "every", "headwise", "nogate"]:
    compare(f"{m}-cpu", f"{m}-f32", 1e-5, f"{m} cuda fp32 vs cpu")
    compare(f"{m}-cpu", f"{m}-bf16", 2e-2, f"{m} cuda bf16 vs cpu")
    b = losses(f"{m}-bf16")
    falls = b[-1] < b[0]
    print(f"{'OK  ' if falls else 'FAIL'} {m} bf16 loss falls: {b[0]:.4f} -> {b[-1]:.4f}")
    ok &= falls
compare("every-ep2-cpu", "every-ep2-f32", 1e-5, "every, 2 ranks, EP 2, cuda fp32 vs cpu")
raise SystemExit(0 if ok else 1)
PY
