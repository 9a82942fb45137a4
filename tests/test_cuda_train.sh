#!/usr/bin/env bash
# The CUDA backend trains every model sluice supports like the CPU backend does: for the tiny
# model, an every-feature model (shared expert, dense layer, partial rotary, YaRN, capacity
# drops, z-loss, aux-loss-free bias, elementwise gate) and the headwise and gate-less models,
# `sluice train` runs a few steps on backend cpu, on cuda in fp32 and on cuda in bf16 from
# the same initialization and data. Per step, the fp32 losses must match the CPU's within
# 1e-5 relative, the bf16 losses within 2e-2, and the bf16 loss must fall. Then the
# every-feature model under `mpirun -np 2` with expert parallelism 2 must match the CPU's
# two-rank run within 1e-5; its banner must name each rank's device and choose the transport
# by them (two ranks on one device: MPI, and an explicit nccl is refused naming both). And a run on the cuda backend killed
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
    out=$(SLUICE_EMU_MEM_LIMIT=2000000 "$sluice" train every.json --set backend.name=cuda \
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

# Where the two ranks computed and how the transport was chosen (docs/parallelism.md, "NCCL
# transport"): the banner names each rank's device; ranks that share one (the emulator's single
# device by default, a one-GPU machine) get MPI from parallel.transport = auto, and an explicit
# nccl is refused at start-up, once, naming the ranks and the device. Ranks with devices of
# their own (the emulator with SLUICE_EMU_DEVICES=2, a machine with two GPUs) get NCCL.
emulated=0
"$sluice" --help 2>&1 | grep -q "emulated on the CPU" && emulated=1
bus() { sed -n "s/.*rank $1: CUDA device [0-9]* ([^,]*, PCI \([^)]*\)).*/\1/p" "$2" | head -1; }
b0=$(bus 0 every-ep2-f32.log) b1=$(bus 1 every-ep2-f32.log)
[ -n "$b0" ] && [ -n "$b1" ] || { cat every-ep2-f32.log; echo "FAIL: the banner does not list each rank's device"; exit 1; }
grep -q "rank 1: CUDA device .*chosen by .*LOCAL_RANK=1 mod .*CUDA_VISIBLE_DEVICES=" every-ep2-f32.log ||
    { cat every-ep2-f32.log; echo "FAIL: the banner does not say how rank 1's device was chosen"; exit 1; }
if [ $emulated = 1 ] && [ "$b0" != "$b1" ]; then
    echo "FAIL: one emulated device, yet the ranks are on $b0 and $b1"; exit 1
fi
if [ "$b0" = "$b1" ]; then
    grep -q "transport: auto -> mpi: ranks 0 and 1 share CUDA device 0 .*PCI $b0" every-ep2-f32.log &&
        grep -q "2 ranks (expert parallel 2, transport mpi)" every-ep2-f32.log ||
        { cat every-ep2-f32.log; echo "FAIL: ranks sharing a device must get mpi from auto, said in the banner"; exit 1; }
    echo "OK   two ranks on one device ($b0): transport auto -> mpi, said in the banner"
    set +e
    "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$sluice" train every.json \
        --set parallel.expert_parallel=2 --set training.out_dir=nccl-shared \
        --set backend.name=cuda --set parallel.transport=nccl > nccl-shared.log 2>&1
    rc=$?
    set -e
    n=$(grep -c "parallel.transport: nccl needs one GPU per rank, but ranks 0 and 1 share CUDA device 0 .*PCI $b0" nccl-shared.log || true)
    if [ $rc -eq 0 ] || [ "$n" != 1 ] || grep -q "^sluice: .* ranks (expert parallel" nccl-shared.log; then
        cat nccl-shared.log
        echo "FAIL: an explicit nccl on a shared device must stop at start-up with one error naming ranks 0 and 1 and the device (exit $rc, $n such lines)"
        exit 1
    fi
    echo "OK   explicit nccl on a shared device: exit $rc, one error naming the ranks and the device"
else
    grep -q "transport: auto -> nccl (every rank on a GPU of its own)" every-ep2-f32.log ||
        { cat every-ep2-f32.log; echo "FAIL: ranks on devices of their own must get nccl from auto"; exit 1; }
    echo "OK   two ranks on two devices ($b0, $b1): transport auto -> nccl"
fi
if [ $emulated = 1 ]; then
    SLUICE_EMU_DEVICES=2 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$sluice" train \
        every.json --set parallel.expert_parallel=2 --set training.out_dir=two-devices \
        --set backend.name=cuda --set training.max_steps=1 > two-devices.log 2>&1 ||
        { cat two-devices.log; exit 1; }
    grep -q "transport: auto -> nccl (every rank on a GPU of its own)" two-devices.log &&
        grep -q "rank 1: CUDA device 1 (sluice SIMT emulator, PCI 0000:11:00.0)" two-devices.log &&
        grep -q "transport nccl)" two-devices.log ||
        { cat two-devices.log; echo "FAIL: two emulated devices: expected auto -> nccl, rank 1 on device 1"; exit 1; }
    echo "OK   SLUICE_EMU_DEVICES=2: rank 1 on emulated device 1, transport auto -> nccl"
fi

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
