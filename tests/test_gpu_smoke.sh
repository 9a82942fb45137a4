#!/usr/bin/env bash
# A 15A2B-shaped smoke test on a real GPU: configs/qwen-gated-15a2b.json (hidden 2048, 32 query
# / 4 kv heads x 128, 128 experts top-8 of width 768, vocabulary 151,936, elementwise gate, seq
# 4096) with its layers cut to 2, trained for 3 steps in bf16 on one GPU. Passes when every
# step's loss is finite, starts near ln(151936) = 11.93 and falls, and the run reports no
# error. Label gpu: skipped (77) without a real GPU, including under the CPU emulator, where
# one step at these widths would take hours.
# usage: test_gpu_smoke.sh SLUICE_BINARY SOURCE_DIR WORK_DIR [emulated|gpu]
set -euo pipefail
sluice=$1
src=$2
work=$3
. "$(dirname "$0")/skip_or_fail.sh"
if [ "${4:-gpu}" = emulated ]; then
    echo "SKIP: this build runs CUDA on the CPU emulator; the smoke test needs a real GPU"
    exit 77
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    echo "SKIP: no NVIDIA GPU on this machine"
    exit 77
fi
[ -x /usr/bin/python3 ] || command -v python3 >/dev/null || skip_or_fail "python3 not installed"
py=$(command -v python3)
rm -rf "$work"
mkdir -p "$work"
cd "$work"
"$py" - <<'PY'
import random
r = random.Random(11)
words = ["the", "king", "went", "up", "to", "city", "and", "his", "son", "spake", "unto", "people"]
open("train.txt", "w").write("\n".join(" ".join(r.choice(words) for _ in range(12))
                                       for _ in range(20000)) + "\n")
PY
"$sluice" data build --quiet -o train train.txt
start=$SECONDS
"$sluice" train "$src/configs/qwen-gated-15a2b.json" --set model.num_hidden_layers=2 \
    --set parallel.expert_parallel=1 --set parallel.zero1=false --set data.train=train \
    --set data.eval= --set training.max_steps=3 --set training.warmup_steps=1 \
    --set training.global_batch_tokens=4096 --set training.log_every=1 \
    --set training.save_every=0 --set training.out_dir=run --set backend.name=cuda 2>&1 |
    tee train.log
echo "3 steps (with start-up) in $((SECONDS - start)) s"
"$py" - <<'PY'
import json, math
rows = [json.loads(l) for l in open("run/metrics.jsonl") if l.startswith('{"step')]
loss = [r["loss"] for r in rows]
print("losses", loss)
assert len(loss) == 3 and all(math.isfinite(x) for x in loss), loss
assert abs(loss[0] - math.log(151936)) < 1.0, f"first loss {loss[0]} is not near ln(V)"
assert loss[-1] < loss[0], "loss did not fall"
PY
