"""A PyTorch baseline as users would write it today, in the manner of torchtitan: the model that
gpu_train_bench trains (bench/gpu_train_bench.c), the same step, for the speed comparison of
issue 21 beside the Hugging Face model (bench/gpu_train_bench_torch.py).

Usage: python3 bench/torchtitan_style_bench.py [CONFIG] [--layers N] [--seq S] [--batch B]
           [--accum N] [--steps N] [--warmup N] [--precision amp|fp32] [--device cuda|cpu]
           [--compile auto|on|off] [--sdpa cudnn|flash|auto] [--peak-n N] [--seed N]
       python3 bench/torchtitan_style_bench.py --check RUN_DIR

What makes it "torchtitan style" (torchtitan/models/moe: GroupedExperts, TokenChoiceTopKRouter,
TokenReorderer; what a PyTorch user picks for an MoE today):
  - the experts of a layer as two stacked parameters, gate_up [E, 2I, C] and down [E, C, I],
    computed with grouped GEMMs (torch.nn.functional.grouped_mm where it exists, else
    torch._grouped_mm: bf16, CUTLASS on sm_90) over the routed rows sorted by expert, each
    expert's group padded to a multiple of 16 rows (the kernels' alignment), with fixed-size
    buffers so that nothing waits for the host (no .item(), no .tolist());
  - attention through torch.nn.functional.scaled_dot_product_attention with the cuDNN backend
    first (torch.nn.attention.sdpa_kernel, priority cuDNN > flash > efficient; GQA through
    enable_gqa), the paper's gate as sigmoid(g) times SDPA's output before o_proj;
  - AdamW with fused=True, gradient clipping with foreach, bf16 autocast over fp32 master
    weights (torchtitan's single-device mixed precision);
  - torch.compile per decoder layer (--compile auto: where it works: on CUDA, falling back to
    eager with a note when compilation fails).

The model: CONFIG's model section (default configs/qwen-gated-15a2b.json) with --layers decoder
layers (default: gpu_train_bench's count for this device's memory, via bench/perf_model.py).
Math as sluice's (docs/architecture.md, ../shared/reference/model-math.md): q_proj per head
[q_h | g_h] (elementwise gate; headwise: one gate row per head after the queries), QK-norm,
rotate-half RoPE (partial rotary), causal GQA attention, the router in fp32 (softmax, top-k,
renormalized when norm_topk_prob), SwiGLU experts, optional gated shared expert and dense
layers, the LM head (tied or not), cross-entropy + router_aux_loss_coef * LBL / k (LBL = E sum
f_i P_i, f_i = count_i / N, per micro-batch, averaged over MoE layers) + router_z_loss_coef *
mean lse^2. Not supported (exits with a message): YaRN, capacity drops, the selection bias,
global-batch LBL.

One step, as sluice's: zero the gradients, --accum micro-batches of forward + backward on
random tokens (fixed seed), clip to training.grad_clip, one AdamW step. --warmup untimed steps
(they include compilation), then --steps timed ones, synchronized at step boundaries. FLOPs per
token as model/counts.h (bench/perf_model.py). The last output line is JSON; out of memory:
JSON with "error" and exit 3.

--check RUN_DIR: the model's math against sluice's CPU backend. RUN_DIR is what
tests/dump_grads writes (input.json, model.safetensors, run.json, grads.safetensors): this
script loads the same weights and tokens, runs the same step in float32 on the CPU (with the
grouped GEMMs' loop fallback, the padding and permutation logic unchanged), and compares every
micro-batch's cross-entropy, LBL and z-loss, the objective, and every parameter gradient.
Exit 0 when all match, 1 otherwise. torch 1.13 (Debian) suffices; tests/torchtitan_style_check.sh
runs it in CI. On a CPU, `--device cpu --precision fp32 --compile off` with a small config is a
smoke test of the benchmark itself.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    ap = argparse.ArgumentParser(
        description="torchtitan-style PyTorch training throughput of the model gpu_train_bench trains.",
        epilog="The module docstring has the details.")
    ap.add_argument("config", nargs="?", default=os.path.join(ROOT, "configs", "qwen-gated-15a2b.json"))
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default: gpu_train_bench's choice)")
    ap.add_argument("--seq", type=int, default=0, help="default: training.seq_len")
    ap.add_argument("--batch", type=int, default=0, help="default: training.micro_batch_size")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", choices=("amp", "fp32"), default="amp")
    ap.add_argument("--device", default="", help="cuda (default when available) or cpu")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--sdpa", choices=("cudnn", "flash", "auto"), default="cudnn",
                    help="SDPA backend priority: cudnn (cuDNN, then flash, then efficient), flash, "
                    "or PyTorch's own choice")
    ap.add_argument("--peak-n", type=int, default=0, help="torch.matmul bf16 peak size (0: skip)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--check", metavar="RUN_DIR", default="",
                    help="compare the math with sluice's CPU backend (tests/dump_grads output)")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.accum < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --accum >= 1")
    return a


ARGS = parse_args()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torchtitan_style_model import GROUPED_MM, Model, model_config  # noqa: E402

# ---- --check: against sluice's CPU backend -------------------------------------------------------


def hf_names(model):
    """(parameter, list of (HF tensor name, slice of the parameter)) for every parameter."""
    out = [(model.embed_tokens.weight, [("model.embed_tokens.weight", None)]),
           (model.norm.weight, [("model.norm.weight", None)])]
    if model.lm_head is not None:
        out.append((model.lm_head.weight, [("lm_head.weight", None)]))
    for i, layer in enumerate(model.layers):
        pre = f"model.layers.{i}."
        a = layer.self_attn
        for mod, name in ((layer.input_layernorm, "input_layernorm"), (layer.post_attention_layernorm,
                          "post_attention_layernorm"), (a.q_norm, "self_attn.q_norm"), (a.k_norm, "self_attn.k_norm")):
            out.append((mod.weight, [(pre + name + ".weight", None)]))
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out.append((getattr(a, p).weight, [(pre + f"self_attn.{p}.weight", None)]))
        mlp = layer.mlp
        if not layer.moe:
            for p in ("gate_proj", "up_proj", "down_proj"):
                out.append((getattr(mlp, p).weight, [(pre + f"mlp.{p}.weight", None)]))
            continue
        I = mlp.experts.I
        out.append((mlp.gate, [(pre + "mlp.gate.weight", None)]))
        out.append((mlp.experts.gate_up, [x for e in range(mlp.E) for x in (
            (pre + f"mlp.experts.{e}.gate_proj.weight", (e, slice(0, I))),
            (pre + f"mlp.experts.{e}.up_proj.weight", (e, slice(I, 2 * I))))]))
        out.append((mlp.experts.down, [(pre + f"mlp.experts.{e}.down_proj.weight", (e,)) for e in range(mlp.E)]))
        if mlp.shared is not None:
            for p in ("gate_proj", "up_proj", "down_proj"):
                out.append((getattr(mlp.shared, p).weight, [(pre + f"mlp.shared_expert.{p}.weight", None)]))
            out.append((mlp.shared_gate.weight, [(pre + "mlp.shared_expert_gate.weight", None)]))
    return out


def part(t, where):
    return t if where is None else t[where]


def check(run_dir):
    cfg_in = json.load(open(os.path.join(run_dir, "input.json")))
    c = model_config(cfg_in["model"])
    train, par = cfg_in.get("training", {}), cfg_in.get("parallel", {})
    for key, bad in (("capacity_factor", par.get("capacity_factor", 0) > 0),
                     ("router_bias_update_rate", train.get("router_bias_update_rate", 0) > 0),
                     ("global_batch_lbl", bool(train.get("global_batch_lbl", False)))):
        if bad:
            raise SystemExit(f"torchtitan_style_bench --check: {key} is not supported by this baseline")
    run = json.load(open(os.path.join(run_dir, "run.json")))
    B, S, M = run["batch"], run["seq"], run["micro_batches"]
    torch.manual_seed(0)
    model = Model(c, S, torch.float32)
    sys.path.insert(0, os.path.join(ROOT, "tests"))  # --check runs in the source tree
    from torch_reference import load_safetensors  # float64 tensors by Hugging Face name

    weights = load_safetensors(os.path.join(run_dir, "model.safetensors"))
    grads = load_safetensors(os.path.join(run_dir, "grads.safetensors"))
    names = hf_names(model)
    with torch.no_grad():
        for p, parts in names:
            for name, where in parts:
                part(p, where).copy_(weights[name].float().view_as(part(p, where)))
    tok = torch.tensor(run["tokens"], dtype=torch.int64).view(M, B, S + 1)
    gbt = train.get("global_batch_tokens", B * S * M)
    k = c.get("num_experts_per_tok", 1)
    bad, objective = [], 0.0
    total = None

    def close(what, got, want, rtol=1e-5, atol=1e-7):
        ok = abs(got - want) <= atol + rtol * abs(want)
        print(f"  {what:14s} sluice {want:.9g} torchtitan-style {got:.9g} {'ok' if ok else 'MISMATCH'}")
        if not ok:
            bad.append(what)

    for m in range(M):
        _, ce_sum, lbl, z = model(tok[m, :, :-1], tok[m, :, 1:])
        mb = run["micro"][m]
        close(f"[{m}] ce", ce_sum.item() / (B * S), mb["ce"])
        term = ce_sum / gbt
        if lbl is not None:
            close(f"[{m}] lbl", lbl.item(), mb["lbl"])
            term = term + c["router_aux_loss_coef"] * lbl / k / M
        if z is not None:
            close(f"[{m}] zloss", z.item(), mb["zloss"])
            term = term + c["router_z_loss_coef"] * z / M
        objective += term.item()
        total = term if total is None else total + term
    close("objective", objective, run["objective"])
    total.backward()
    worst, compared = 0.0, 0
    for p, parts in names:
        for name, where in parts:
            ref = grads[name].float().view_as(part(p, where))
            got = part(p.grad, where) if p.grad is not None else torch.zeros_like(ref)
            err = (got - ref).abs().max().item()
            scale = ref.abs().max().item()
            compared += 1
            worst = max(worst, err / (scale + 1e-12))
            if err > 2e-4 * scale + 1e-6:
                bad.append(f"gradient {name}: max abs error {err:.3g} (max |g| {scale:.3g})")
    print(f"  {compared} gradient tensors compared, worst relative error {worst:.3g}")
    for b in bad:
        print("  MISMATCH: " + b)
    print(json.dumps({"check": run_dir, "torch": torch.__version__, "ok": not bad, "worst_grad_rel": worst,
                      "mismatches": bad}))
    return 0 if not bad else 1


# ---- the benchmark ----------------------------------------------------------------------------


def sdpa_context(cuda):
    if not cuda or ARGS.sdpa == "auto":
        return contextlib.nullcontext(), "PyTorch's choice"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return contextlib.nullcontext(), "PyTorch's choice (no torch.nn.attention)"
    order = {"cudnn": ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"],
             "flash": ["FLASH_ATTENTION", "EFFICIENT_ATTENTION"]}[ARGS.sdpa]
    backends = [getattr(SDPBackend, n) for n in order if hasattr(SDPBackend, n)]
    try:
        return sdpa_kernel(backends, set_priority=True), " > ".join(order)
    except TypeError:  # torch < 2.6: no priority, only the set
        return sdpa_kernel(backends[:1]), order[0]


def matmul_peak(n, device, reps=21):
    if n <= 0 or device.type != "cuda":
        return None
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    ev[0].record()
    for i in range(reps):
        a @ b
        ev[i + 1].record()
    torch.cuda.synchronize()
    ms = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(reps))
    return 2.0 * n ** 3 / (ms[reps // 2] * 1e-3) / 1e12


def compile_layers(model, mode, cuda):
    """torch.compile each decoder layer (as torchtitan does); returns what was done."""
    if mode == "off" or (mode == "auto" and not cuda) or not hasattr(torch, "compile"):
        return "off"
    for i, layer in enumerate(model.layers):
        model.layers[i] = torch.compile(layer)
    return "per layer"


def uncompile_layers(model):
    for i, layer in enumerate(model.layers):
        model.layers[i] = getattr(layer, "_orig_mod", layer)


def bench():
    sys.path.insert(0, HERE)
    import perf_model  # FLOPs per token and the layer count, as gpu_train_bench

    cfg = json.load(open(ARGS.config))
    tc = cfg.get("training", {})
    device = torch.device(ARGS.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    c = model_config(cfg["model"])
    seq = ARGS.seq or tc.get("seq_len", 4096)
    batch = ARGS.batch or tc.get("micro_batch_size", 1)
    if ARGS.layers:
        layers = ARGS.layers
    else:
        total = torch.cuda.mem_get_info()[1] if cuda else 139 * (1 << 30)
        layers = perf_model.default_layers(c, batch * seq, "fp32" if ARGS.precision == "fp32" else "bf16", total)
    c["num_hidden_layers"] = layers
    amp = ARGS.precision == "amp"
    compute = torch.bfloat16 if amp else torch.float32
    torch.manual_seed(ARGS.seed)
    peak = matmul_peak(ARGS.peak_n, device)
    try:
        ctx = torch.device(device)
        with ctx:
            model = Model(c, seq, compute)
    except (AttributeError, TypeError):  # torch < 2.0: build on the host, then move
        model = Model(c, seq, compute)
    model = model.to(device)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    kw = dict(lr=tc.get("lr", 1e-3), betas=(tc.get("beta1", 0.9), tc.get("beta2", 0.95)), eps=tc.get("eps", 1e-8))
    groups = [{"params": decay, "weight_decay": tc.get("weight_decay", 0.1)}, {"params": no_decay, "weight_decay": 0.0}]
    adamw = "fused"
    try:
        opt = torch.optim.AdamW(groups, fused=True, **kw) if cuda else None
    except (TypeError, RuntimeError):
        opt = None
    if opt is None:
        opt, adamw = torch.optim.AdamW(groups, **kw), "default"
    params = list(model.parameters())
    nparams = sum(p.numel() for p in params)
    gen = torch.Generator(device="cpu").manual_seed(20240601)
    batches = []
    for _ in range(ARGS.accum):
        t = torch.randint(0, c["vocab_size"], (batch, seq + 1), generator=gen)
        batches.append((t[:, :seq].to(device), t[:, 1:].to(device)))
    clip = tc.get("grad_clip", 1.0)
    compiled = compile_layers(model, ARGS.compile, cuda)
    sdpa_ctx, sdpa_order = sdpa_context(cuda)
    compile_note = ""

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def step():
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for ids, tg in batches:
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
                obj = model(ids, tg)[0] / ARGS.accum
            obj.backward()
            total = total + obj.detach()
        if clip > 0:
            try:
                torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
            except TypeError:  # torch < 2.0
                torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        return total

    times, losses, t_first = [], [], None
    with sdpa_ctx:
        for s in range(ARGS.warmup + ARGS.steps):
            sync()
            t0 = time.perf_counter()
            try:
                loss = step()
            except Exception as e:  # compilation can fail: fall back to eager once (--compile auto)
                if s > 0 or compiled == "off" or ARGS.compile == "on" or isinstance(e, out_of_memory_types()):
                    raise
                compile_note = "torch.compile failed (%s: %s); eager instead" % (type(e).__name__, str(e).splitlines()[0][:200])
                print("torchtitan_style_bench: " + compile_note, file=sys.stderr)
                uncompile_layers(model)
                compiled = "off (failed)"
                loss = step()
            sync()
            t1 = time.perf_counter()
            if s == 0:
                t_first = t1 - t0
            losses.append(float(loss))
            if s >= ARGS.warmup:
                times.append(t1 - t0)
    mean = sum(times) / len(times)
    step_tokens = batch * seq * ARGS.accum
    tps = step_tokens / mean
    fpt = perf_model.flops_per_token(c, layers, seq)
    mem = torch.cuda.max_memory_allocated() / (1 << 30) if cuda else None
    name = torch.cuda.get_device_name() if cuda else "cpu"
    gm = ("grouped_mm" if GROUPED_MM is getattr(F, "grouped_mm", None) else "_grouped_mm") if GROUPED_MM and cuda and amp \
        else "loop of matmuls (no fused grouped GEMM for this device/dtype)"
    print("torchtitan_style_bench: %s | %s | torch %s | experts %s | SDPA %s | AdamW %s | compile %s | precision %s" % (
        os.path.relpath(ARGS.config, ROOT), name, torch.__version__, gm, sdpa_order, adamw, compiled, ARGS.precision))
    print("model: %d layers, %.1fM parameters | %d micro-batch(es) of %d x %d = %d tokens/step | loss %.4f -> %.4f" % (
        layers, nparams / 1e6, ARGS.accum, batch, seq, step_tokens, losses[0], losses[-1]))
    print("time/step: mean %.2f ms, median %.2f ms, min %.2f ms | first step (incl. compilation) %.1f s | %.1f tokens/s" % (
        1e3 * mean, 1e3 * statistics.median(times), 1e3 * min(times), t_first, tps))
    print("model FLOPs/token %.4g (model/counts.h convention) | %.2f TFLOP/s%s" % (
        fpt, fpt * tps / 1e12, "" if peak is None else " | torch.matmul bf16 %d^3 peak %.1f TFLOP/s" % (ARGS.peak_n, peak)))
    if mem is not None:
        print("peak memory allocated by torch: %.2f GiB" % mem)
    print(json.dumps({
        "impl": "torch-torchtitan-style", "config": os.path.relpath(ARGS.config, ROOT), "device": name,
        "torch": torch.__version__, "experts": gm, "sdpa": sdpa_order, "adamw": adamw, "compile": compiled,
        "compile_note": compile_note or None, "precision": ARGS.precision, "layers": layers, "batch": batch,
        "seq": seq, "accum": ARGS.accum, "warmup": ARGS.warmup, "steps": ARGS.steps, "params": nparams,
        "tokens_per_step": step_tokens, "tokens_per_s": tps, "ms_per_step": 1e3 * mean,
        "ms_per_step_median": 1e3 * statistics.median(times), "ms_per_step_min": 1e3 * min(times),
        "first_step_s": t_first, "flops_per_token": fpt, "model_tflops": fpt * tps / 1e12,
        "matmul_peak_tflops": peak, "max_memory_gib": mem, "loss_first": losses[0], "loss_last": losses[-1]}))
    return 0


def out_of_memory_types():
    types = [getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)]
    return tuple(t for t in types if t is not None) or (RuntimeError,)


if __name__ == "__main__":
    if ARGS.check:
        sys.exit(check(ARGS.check))
    try:
        sys.exit(bench())
    except out_of_memory_types() as e:
        if not isinstance(e, getattr(torch, "OutOfMemoryError", ())) and "out of memory" not in str(e):
            raise
        print("torchtitan_style_bench: out of memory: %s" % str(e).splitlines()[0], file=sys.stderr)
        print(json.dumps({"impl": "torch-torchtitan-style", "layers": ARGS.layers, "error": "out of memory"}))
        sys.exit(3)
