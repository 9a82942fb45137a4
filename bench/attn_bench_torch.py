"""The PyTorch side of attn_bench (bench/attn_bench.c): the same gated attention shapes through
torch.nn.functional.scaled_dot_product_attention followed by the sigmoid gate, y = o * sigmoid(g),
for the comparison of the issue "Fused gated flash attention on tensor cores" (sluice's fused
kernel >= 0.8x PyTorch's fastest SDPA backend on forward + backward, >= 1.0x on the forward).

Usage: python3 bench/attn_bench_torch.py [--batch B] [--seq S] [--heads H] [--kv-heads KV]
           [--head-dim D] [--gate elementwise|headwise|none] [--iters N] [--warmup N]
           [--sdpa flash,efficient,cudnn]

Shapes: as attn_bench: one shape when any shape option is given (defaults B 1, S 4096, H 32,
KV 4, D 128), else S 4096 and 32768 x D 128 and 64 with H 32, KV 4, B 1. Tensors are bf16 in
SDPA's layout [B, heads, S, D] (so no transpose is timed); causal (is_causal=True); GQA through
enable_gqa=True where this PyTorch has it (2.5+), else k and v are repeat_interleave'd to H heads
inside the timed region (that copy is part of what PyTorch then costs). The gate g is
[B, H, S, D] (elementwise) or [B, H, S, 1] (headwise) and multiplies SDPA's output as a separate
operation, as a PyTorch model does it.

Each SDPA backend of --sdpa runs alone (torch.nn.attention.sdpa_kernel); one that cannot run the
shape is reported as unavailable. Forward: the forward with autograd recording (as in training);
forward + backward: the same plus y.backward(dy) with gradients for q, k, v and g. Timed with
CUDA events, median of --iters after --warmup; backward = forward+backward - forward. FLOPs as
attn_bench's: forward 4 B H D S^2/2, backward 2.5x the forward. Per shape it prints every
backend and the fastest (by forward + backward); the last line per shape is JSON with the
fastest (bench/run_gpu_bench.sh reads it).

Needs PyTorch 2.x and a CUDA device; without either it prints why and exits 77 (skipped).
"""
import argparse
import json
import statistics
import sys


def parse_args():
    ap = argparse.ArgumentParser(description="SDPA + sigmoid gate throughput (attn_bench's PyTorch side).")
    for name in ("--batch", "--seq", "--heads", "--kv-heads", "--head-dim"):
        ap.add_argument(name, type=int, default=0)
    ap.add_argument("--gate", choices=("elementwise", "headwise", "none"), default="elementwise")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--sdpa", default="flash,efficient,cudnn",
                    help="SDPA backends to try, comma-separated (flash, efficient, cudnn, math)")
    a = ap.parse_args()
    if a.iters < 1 or a.warmup < 0:
        ap.error("need --iters >= 1 and --warmup >= 0")
    for name in ("batch", "seq", "heads", "kv_heads", "head_dim"):
        if getattr(a, name) < 0:
            ap.error("--%s must be >= 1" % name.replace("_", "-"))
    return a


ARGS = parse_args()

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("attn_bench_torch: skipped: PyTorch is not installed")
    sys.exit(77)
if not hasattr(F, "scaled_dot_product_attention"):
    print("attn_bench_torch: skipped: PyTorch %s has no scaled_dot_product_attention (needs 2.x)"
          % torch.__version__)
    sys.exit(77)
if not torch.cuda.is_available():
    print("attn_bench_torch: skipped: no CUDA device (PyTorch %s)" % torch.__version__)
    sys.exit(77)
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    print("attn_bench_torch: skipped: PyTorch %s has no torch.nn.attention.sdpa_kernel (needs 2.3+)"
          % torch.__version__)
    sys.exit(77)

BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def shapes():
    given = [ARGS.batch, ARGS.seq, ARGS.heads, ARGS.kv_heads, ARGS.head_dim]
    if any(given):
        b, s, h, kv, d = [x or dflt for x, dflt in zip(given, (1, 4096, 32, 4, 128))]
        if h % kv:
            sys.exit("attn_bench_torch: --heads %d is not a multiple of --kv-heads %d" % (h, kv))
        return [(b, s, h, kv, d)]
    return [(1, s, 32, 4, d) for d in (128, 64) for s in (4096, 32768)]


def gqa_supported():
    try:
        import inspect
        return "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):
        return False


GQA = gqa_supported()


def gated_attention(q, k, v, g):
    h, kv = q.shape[1], k.shape[1]
    if h != kv and GQA:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        if h != kv:
            k = k.repeat_interleave(h // kv, dim=1)
            v = v.repeat_interleave(h // kv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o * torch.sigmoid(g) if g is not None else o


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run_shape(b, s, h, kv, d):
    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(1234)

    def normal(*shape):
        return torch.randn(*shape, device=dev, dtype=dt, generator=gen).requires_grad_(True)

    q, k, v = normal(b, h, s, d), normal(b, kv, s, d), normal(b, kv, s, d)
    gcols = {"elementwise": d, "headwise": 1, "none": 0}[ARGS.gate]
    g = normal(b, h, s, gcols) if gcols else None
    dy = torch.randn(b, h, s, d, device=dev, dtype=dt, generator=gen)
    params = [x for x in (q, k, v, g) if x is not None]

    def fwd():
        return gated_attention(q, k, v, g)

    def fwd_bwd():
        for x in params:
            x.grad = None
        fwd().backward(dy)

    fwd_flops = 4.0 * b * h * d * s * s / 2
    bwd_flops = 2.5 * fwd_flops
    results = {}
    for name in ARGS.sdpa.split(","):
        if name not in BACKENDS or not hasattr(SDPBackend, BACKENDS[name]):
            results[name] = {"error": "not a backend of this PyTorch"}
            continue
        try:
            with sdpa_kernel(getattr(SDPBackend, BACKENDS[name])):
                f_ms = timed(fwd, ARGS.iters, ARGS.warmup)
                fb_ms = timed(fwd_bwd, ARGS.iters, ARGS.warmup)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            results[name] = {"error": "out of memory"}
            continue
        except RuntimeError as e:  # the backend does not support this shape or device
            results[name] = {"error": str(e).splitlines()[0][:160]}
            continue
        b_ms = fb_ms - f_ms
        results[name] = {"fwd_ms": f_ms, "bwd_ms": b_ms, "fwd_bwd_ms": fb_ms,
                         "fwd_tflops": fwd_flops / f_ms * 1e-9, "bwd_tflops": bwd_flops / b_ms * 1e-9,
                         "fwd_bwd_tflops": (fwd_flops + bwd_flops) / fb_ms * 1e-9}
    for name, r in results.items():
        if "error" in r:
            print("  %-9s unavailable: %s" % (name, r["error"]))
        else:
            print("  %-9s fwd %9.3f ms %8.2f TFLOP/s | bwd %9.3f ms %8.2f TFLOP/s | f+b %8.2f TFLOP/s"
                  % (name, r["fwd_ms"], r["fwd_tflops"], r["bwd_ms"], r["bwd_tflops"], r["fwd_bwd_tflops"]))
    ok = {n: r for n, r in results.items() if "error" not in r}
    best = min(ok, key=lambda n: ok[n]["fwd_bwd_ms"]) if ok else None
    best_fwd = min(ok, key=lambda n: ok[n]["fwd_ms"]) if ok else None
    out = {"impl": "torch", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "dtype": "bf16", "gate": ARGS.gate, "batch": b, "seq": s, "heads": h, "kv_heads": kv,
           "head_dim": d, "gqa": "enable_gqa" if GQA else "repeat_interleave", "iters": ARGS.iters,
           "fwd_flops": fwd_flops, "bwd_flops": bwd_flops, "sdpa_backend": best,
           "fastest_fwd_backend": best_fwd, "backends": results}
    if best:
        out.update(ok[best])
        out["best_fwd_ms"] = ok[best_fwd]["fwd_ms"]
        out["best_fwd_tflops"] = ok[best_fwd]["fwd_tflops"]
        print("  fastest (forward + backward): %s; fastest forward: %s" % (best, best_fwd))
    print(json.dumps(out))
    sys.stdout.flush()


def main():
    print("attn_bench_torch: PyTorch %s on %s, bf16, gate %s, causal, GQA via %s; FLOPs: forward "
          "4*B*H*D*S^2/2 (causal counted as half), backward 2.5x forward; median of %d after %d warm-up"
          % (torch.__version__, torch.cuda.get_device_name(), ARGS.gate,
             "enable_gqa" if GQA else "repeat_interleave", ARGS.iters, ARGS.warmup))
    for b, s, h, kv, d in shapes():
        print("B %d S %d H %d KV %d D %d" % (b, s, h, kv, d))
        run_shape(b, s, h, kv, d)
        torch.cuda.empty_cache()  # the shape's tensors died with run_shape


if __name__ == "__main__":
    main()
