#!/usr/bin/env python3
"""PyTorch reference for sluice's optimizer path (tests/dump_optimizer.c writes the input).

    torch_optimizer.py DIR [DIR...]

For each DIR, replays sluice's training steps in float64 with PyTorch's own pieces:

  * torch.nn.utils.clip_grad_norm_ over all parameters (when grad_clip > 0);
  * torch.optim.AdamW with two parameter groups split by shape: matrices (ndim >= 2) get
    weight_decay, 1-D parameters (norms) get none;
  * torch.optim.lr_scheduler.LambdaLR with the schedule written here from its definition
    (linear warmup, then cosine to min_lr, WSD, or constant).

The gradients are the ones sluice used at each step (dumped before clipping), so the
reference follows the same trajectory without running the model. After every step the
float32 parameters sluice produced must match the float64 reference within

    |sluice - torch| <= ATOL + RTOL * |torch|,   ATOL = 5e-7, RTOL = 2e-6

and sluice's lr and gradient norm must match the reference's (1e-9 and 1e-6 relative).

Exit status: 0 when everything matches, 1 on a mismatch, 77 (skipped) when torch or numpy
is not installed -- except under CI=true, where a missing torch is a failure (1).
"""
import json
import math
import os
import sys

ATOL, RTOL = 5e-7, 2e-6

try:
    import numpy as np
    import torch
except ImportError as e:
    if os.environ.get("CI") == "true":
        print(f"torch_optimizer.py: FAIL: PyTorch/numpy is required under CI=true but cannot be "
              f"imported ({e}); install python3-torch and python3-numpy")
        sys.exit(1)
    print(f"torch_optimizer.py: PyTorch/numpy not available ({e}): skipping")
    sys.exit(77)


def schedule_factor(meta):
    """lr(step) / lr, from the definitions: warmup (step + 1) / W, then over the remaining
    steps cosine from lr to min_lr, WSD (constant, then linear to min_lr over the last
    decay_fraction of them) or constant."""
    lr, min_lr = meta["lr"], meta["min_lr"]
    warmup, total = meta["warmup_steps"], meta["max_steps"]
    kind, frac = meta["schedule"], meta["decay_fraction"]

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        span = total - warmup
        done = min(1.0, (step - warmup) / span) if span > 0 else 1.0
        if kind == "cosine":
            value = min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * done))
        elif kind == "wsd":
            decay_steps = frac * span
            into_decay = (step - warmup) - (span - decay_steps)
            if frac <= 0 or into_decay <= 0:
                value = lr
            else:
                value = lr - (lr - min_lr) * min(1.0, into_decay / decay_steps)
        elif kind == "constant":
            value = lr
        else:
            raise ValueError(f"unknown schedule {kind}")
        return value / lr

    return factor


def check(directory):
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    steps = meta["steps"]
    specs = meta["params"]
    sizes = [math.prod(p["shape"]) for p in specs]
    total = sum(sizes)
    params = np.fromfile(os.path.join(directory, "params.f32"), dtype=np.float32)
    grads = np.fromfile(os.path.join(directory, "grads.f32"), dtype=np.float32)
    assert params.size == (steps + 1) * total, "params.f32 has the wrong size"
    assert grads.size == steps * total, "grads.f32 has the wrong size"
    params = params.reshape(steps + 1, total)
    grads = grads.reshape(steps, total)
    offsets = np.cumsum([0] + sizes)

    def split(flat):
        return [flat[offsets[i]:offsets[i + 1]].reshape(specs[i]["shape"]) for i in range(len(specs))]

    tensors = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in split(params[0])]
    decay = [t for t in tensors if t.ndim >= 2]
    no_decay = [t for t in tensors if t.ndim < 2]
    names_no_decay = [s["name"] for s, t in zip(specs, tensors) if t.ndim < 2]
    assert no_decay and decay, "the model should have both matrices and 1-D parameters"
    assert all("norm" in n for n in names_no_decay), f"unexpected 1-D parameters: {names_no_decay}"
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": meta["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=meta["lr"], betas=(meta["beta1"], meta["beta2"]), eps=meta["eps"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_factor(meta))

    ok = True
    worst_overall = 0.0
    clipped_steps = 0
    for step in range(steps):
        lr_ref = sched.get_last_lr()[0]
        lr_sl = meta["step_lr"][step]
        if abs(lr_sl - lr_ref) > 1e-9 * abs(lr_ref):
            print(f"  step {step}: lr {lr_sl!r}, reference {lr_ref!r}")
            ok = False
        for t, g in zip(tensors, split(grads[step])):
            t.grad = torch.tensor(g, dtype=torch.float64)
        if meta["grad_clip"] > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(tensors, meta["grad_clip"]))
            clipped_steps += norm > meta["grad_clip"]
        else:
            norm = float(torch.sqrt(sum((t.grad ** 2).sum() for t in tensors)))
        norm_sl = meta["step_grad_norm"][step]
        if abs(norm_sl - norm) > 1e-6 * norm:
            print(f"  step {step}: gradient norm {norm_sl!r}, reference {norm!r}")
            ok = False
        opt.step()
        sched.step()
        got = split(params[step + 1])
        worst, where = 0.0, None
        for spec, t, a in zip(specs, tensors, got):
            ref = t.detach().numpy()
            err = np.abs(a.astype(np.float64) - ref) / (ATOL + RTOL * np.abs(ref))
            i = int(np.argmax(err))
            if err.flat[i] > worst:
                worst, where = float(err.flat[i]), (spec["name"], i, float(a.flat[i]), float(ref.flat[i]))
        worst_overall = max(worst_overall, worst)
        if worst > 1.0:
            name, i, a, r = where
            print(f"  step {step}: {name}[{i}] = {a:.9g}, reference {r:.9g} ({worst:.3g} x tol)")
            ok = False
    print(f"{os.path.basename(os.path.normpath(directory))}: {meta['schedule']}, {steps} steps, "
          f"clip {meta['grad_clip']} (active in {clipped_steps}), worst parameter error "
          f"{worst_overall:.3g} x tol: {'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    torch.set_default_dtype(torch.float64)
    results = [check(d) for d in sys.argv[1:]]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
