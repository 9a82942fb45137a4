#!/usr/bin/env bash
# PyTorch reference for the optimizer path: sluice's training steps (clipping, AdamW with the
# weight-decay mask, the lr schedule) replayed by torch.optim.AdamW, clip_grad_norm_ and
# LambdaLR (tests/torch_optimizer.py) on the gradients sluice used.
# usage: torch_optimizer.sh DUMP_OPTIMIZER_BINARY WORK_DIR
# Exits 77 (skipped) when python3-torch is missing, unless CI=true: then that is a failure.
set -euo pipefail
dump=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if [ ! -x "$py" ]; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAIL: $py is missing and CI=true requires the PyTorch optimizer reference"
        exit 1
    fi
    echo "$py is missing: skipping"
    exit 77
fi
rm -rf "$work"
mkdir -p "$work"/cosine "$work"/wsd "$work"/constant

# clipping active at every step (norm ~3 against 0.05), eps large enough that AdamW's update
# depends on the gradient's scale
"$dump" "$work/cosine" --schedule cosine --steps 8 --warmup 2 --lr 1e-2 --min-lr 1e-3 \
    --clip 0.05 --wd 0.1 --eps 1e-4
"$dump" "$work/wsd" --schedule wsd --steps 8 --warmup 1 --lr 1e-2 --min-lr 2e-3 \
    --decay-fraction 0.5 --clip 0.5 --wd 0.2 --eps 1e-5 --seed 6
# no clipping, the default eps
"$dump" "$work/constant" --schedule constant --steps 6 --warmup 3 --lr 5e-3 --min-lr 0 \
    --clip 0 --wd 0.1 --eps 1e-8 --seed 7

exec "$py" "$here/torch_optimizer.py" "$work/cosine" "$work/wsd" "$work/constant"
