#!/usr/bin/env bash
# Torture (issue 10, section 6): a training run that saves a checkpoint every step is killed
# with SIGKILL at random moments, many times, often in the middle of a save; every restart with
# `--resume auto` continues from the newest committed checkpoint, and the run that finally
# completes ends with final weights bitwise identical to an uninterrupted run's.
# usage: test_resume_torture.sh SLUICE_BINARY WORK_DIR [KILLS]
set -euo pipefail
sluice=$1
work=$2
kills=${3:-20}
. "$(dirname "$0")/cli_lib.sh"
python_test_start "$work"
/usr/bin/python3 - <<'PY'
import random
r = random.Random(3)
words = ["the", "king", "went", "up", "to", "city", "and", "his", "son", "spake", "unto", "people"]
open("train.txt", "w").write("\n".join(" ".join(r.choice(words) for _ in range(12))
                                       for _ in range(2000)) + "\n")
PY
"$sluice" data build --quiet --frame-tokens 2048 -o train train.txt
cat > run.json <<'JSON'
{"model": {"vocab_size": 257, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 8, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 16, "router_aux_loss_coef": 0.01, "initializer_range": 0.05},
 "training": {"seq_len": 16, "micro_batch_size": 2, "global_batch_tokens": 64, "max_steps": 40,
              "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2, "log_every": 10, "save_every": 1,
              "keep_last": 2, "seed": 7, "router_bias_update_rate": 0.02},
 "data": {"train": "train"},
 "backend": {"threads": 1}}
JSON
"$sluice" train run.json --set training.out_dir=ref > ref.log 2>&1 || { cat ref.log; exit 1; }

# Random kill delays from a fixed seed, spread over a run's length (measured from the
# reference run's wall time), so that kills land in steps, in saves and in start-up.
read -r -a delays < <(/usr/bin/python3 -c "
import random, sys
r = random.Random(11)
print(' '.join(f'{r.uniform(0.05, 0.6):.3f}' for _ in range($kills)))")
in_save=0 resumed=0
for d in "${delays[@]}"; do
    "$sluice" train run.json --set training.out_dir=cut --resume auto > cut.log 2>&1 &
    pid=$!
    sleep "$d"
    if kill -9 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null || true
        # a save in flight leaves a temporary directory behind; the next save removes it
        compgen -G "cut/checkpoints/.tmp-*" > /dev/null && in_save=$((in_save + 1))
    else
        wait "$pid" || { cat cut.log; exit 1; } # finished before the kill
    fi
    grep -q "resumed from" cut.log && resumed=$((resumed + 1))
done
"$sluice" train run.json --set training.out_dir=cut --resume auto > last.log 2>&1 ||
    { cat last.log; exit 1; }
echo "$kills kills ($in_save during a save, $resumed restarts resumed from a checkpoint)"
if cmp -s ref/final/model.safetensors cut/final/model.safetensors; then
    echo "OK   final weights bitwise identical to the uninterrupted run"
else
    echo "FAIL: final weights differ from the uninterrupted run"
    exit 1
fi
"$sluice" ckpt verify cut/checkpoints > verify.log 2>&1 || { cat verify.log; exit 1; }
