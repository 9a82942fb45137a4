"""The PyTorch side of gpu_train_bench (bench/gpu_train_bench.c): the same model, step and
FLOP convention, for the tokens/s ratio of issue 9 (sluice >= 3x PyTorch).

Usage: python3 bench/gpu_train_bench_torch.py [CONFIG] [--layers N] [--seq S] [--batch B]
           [--accum N] [--steps N] [--warmup N] [--impl auto|hf|native]
           [--precision amp|bf16|fp32] [--device cuda|cpu] [--peak-n N]

Model: CONFIG's model section (default configs/qwen-gated-15a2b.json) with `--layers` decoder
layers (default: the count gpu_train_bench picks for this device's memory, through
bench/perf_model.py's copy of its estimate; bench/run_gpu_bench.sh passes sluice's count).

  --impl hf      transformers' Qwen3MoeForCausalLM (the Hugging Face Qwen3-MoE code: its
                 embedding, RMSNorm, router, experts and their per-expert loop, LM head,
                 load-balancing loss), with every layer's self_attn replaced by the gated
                 attention: q_proj twice as wide (per head [q_h | g_h], the Qwen3-Next layout
                 sluice uses), QK-norm, RoPE, SDPA (causal, GQA; flash attention on the GPU
                 in bf16), the attention output times sigmoid(g) before o_proj (elementwise,
                 or one gate per head for "headwise").
  --impl native  the same model written here in the same Hugging Face style (per-expert
                 nn.Linear modules, a loop over the experts that received tokens), for hosts
                 without transformers.
  --impl auto    hf when transformers imports, else native (the default).

Precision: amp (default) = fp32 master weights, bf16 autocast for compute, fp32 softmax and
loss, the usual PyTorch mixed precision and the counterpart of sluice's training.precision
= "bf16"; bf16 = weights and AdamW state in bf16; fp32 = no autocast (CPU smoke tests).

One step, as sluice's: zero the gradients, `--accum` micro-batches of forward + backward
(cross-entropy over all B x S next tokens + router_aux_loss_coef x load-balancing loss),
clip to training.grad_clip, one AdamW step (betas, eps, weight decay on matrices only; fused
on CUDA). `--warmup` untimed steps, then `--steps` timed ones, synchronized at step
boundaries. FLOPs per token follow model/counts.h (bench/perf_model.py computes the same:
6 x active matmul parameters incl. the LM head + 6 x layers x heads x head_dim x seq). Also
times torch.matmul bf16 `--peak-n`^3 (median of 21) as a cross-check of the cuBLAS peak. The
last output line is JSON; a run that runs out of memory prints JSON with "error" and exits 3.

On a host without a GPU, `--device cpu --precision fp32` with a small config is a smoke test
of the script (torch 1.13 works: it falls back to matmul + mask attention).
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    ap = argparse.ArgumentParser(
        description="PyTorch (Hugging Face Qwen3-MoE style) training throughput of the model "
        "gpu_train_bench trains.",
        epilog="The module docstring (python3 -c 'help(...)' or the file's header) has the details.")
    ap.add_argument("config", nargs="?", default=os.path.join(ROOT, "configs", "qwen-gated-15a2b.json"))
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default: gpu_train_bench's choice)")
    ap.add_argument("--seq", type=int, default=0, help="default: training.seq_len")
    ap.add_argument("--batch", type=int, default=0, help="default: training.micro_batch_size")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--impl", choices=("auto", "hf", "native"), default="auto")
    ap.add_argument("--precision", choices=("amp", "bf16", "fp32"), default="amp")
    ap.add_argument("--device", default="", help="cuda (default when available) or cpu")
    ap.add_argument("--peak-n", type=int, default=8192, help="torch.matmul bf16 peak size (0: skip)")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.accum < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --accum >= 1")
    return a


ARGS = parse_args()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, HERE)
import perf_model  # noqa: E402  (FLOPs per token and the layer count, as gpu_train_bench)

CFG = json.load(open(ARGS.config))
MC, TC = dict(CFG["model"]), CFG.get("training", {})
DEVICE = torch.device(ARGS.device or ("cuda" if torch.cuda.is_available() else "cpu"))
CUDA = DEVICE.type == "cuda"
SEQ = ARGS.seq or TC.get("seq_len", 4096)
BATCH = ARGS.batch or TC.get("micro_batch_size", 1)
GATE = MC.get("attn_output_gate", "elementwise")
EPS = MC.get("rms_norm_eps", 1e-6)


def out_of_memory_types():
    types = [getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)]
    return tuple(t for t in types if t is not None) or (RuntimeError,)


def default_layers():
    if ARGS.layers:
        return ARGS.layers
    total = torch.cuda.mem_get_info()[1] if CUDA else 139 * (1 << 30)
    prec = "fp32" if ARGS.precision == "fp32" else "bf16"
    return perf_model.default_layers(MC, BATCH * SEQ, prec, total)


LAYERS = default_layers()
MC["num_hidden_layers"] = LAYERS


# ---- the gated attention (both implementations) ----------------------------------------


class RMSNorm(nn.Module):
    """Hugging Face's Qwen3MoeRMSNorm: statistics in fp32, weight applied in the input dtype."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_inv_freq(mc):
    D = mc["head_dim"]
    rot = int(D * mc.get("partial_rotary_factor", 1.0))
    base = mc.get("rope_theta", 10000.0)
    return torch.pow(float(base), -torch.arange(0, rot, 2, dtype=torch.float64) / rot).float(), rot


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class GatedAttention(nn.Module):
    """Qwen3-MoE attention with the output gate of the Gated Attention paper (position G1):
    Y = SDPA(q, k, v) * sigmoid(g), then o_proj. Computes its own RoPE table, so it works
    whatever the surrounding transformers version passes (position embeddings or ids)."""

    def __init__(self, mc, norm_cls=RMSNorm):
        super().__init__()
        h, H, KV, D = mc["hidden_size"], mc["num_attention_heads"], mc["num_key_value_heads"], mc["head_dim"]
        self.H, self.KV, self.D = H, KV, D
        qw = {"elementwise": 2 * H * D, "headwise": H * D + H}.get(GATE, H * D)
        self.q_proj = nn.Linear(h, qw, bias=False)
        self.k_proj = nn.Linear(h, KV * D, bias=False)
        self.v_proj = nn.Linear(h, KV * D, bias=False)
        self.o_proj = nn.Linear(H * D, h, bias=False)
        self.q_norm = norm_cls(D, eps=mc.get("rms_norm_eps", 1e-6))
        self.k_norm = norm_cls(D, eps=mc.get("rms_norm_eps", 1e-6))
        inv_freq, self.rot = rope_inv_freq(mc)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._table = None

    def rope_table(self, S, device, dtype):
        if self._table is None or self._table[0].shape[0] != S or self._table[0].dtype != dtype:
            pos = torch.arange(S, device=device, dtype=torch.float32)
            ang = torch.outer(pos, self.inv_freq.to(device))
            emb = torch.cat((ang, ang), dim=-1)
            self._table = (emb.cos().to(dtype), emb.sin().to(dtype))
        return self._table

    def forward(self, hidden_states, *args, **kwargs):
        B, S, _ = hidden_states.shape
        H, KV, D = self.H, self.KV, self.D
        qa = self.q_proj(hidden_states)
        g = None
        if GATE == "elementwise":  # per head [q_h | g_h]
            qa = qa.view(B, S, H, 2 * D)
            q, g = qa[..., :D], qa[..., D:]
        elif GATE == "headwise":  # all q rows, then one gate row per head
            q, g = qa[..., : H * D].reshape(B, S, H, D), qa[..., H * D:].reshape(B, S, H, 1)
        else:
            q = qa.view(B, S, H, D)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(hidden_states).view(B, S, KV, D)).transpose(1, 2)
        v = self.v_proj(hidden_states).view(B, S, KV, D).transpose(1, 2)
        cos, sin = self.rope_table(S, q.device, q.dtype)
        r = self.rot
        if r == D:
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        else:
            q = torch.cat((q[..., :r] * cos + rotate_half(q[..., :r]) * sin, q[..., r:]), -1)
            k = torch.cat((k[..., :r] * cos + rotate_half(k[..., :r]) * sin, k[..., r:]), -1)
        o = attention(q, k, v)  # [B, H, S, D]
        o = o.transpose(1, 2)
        if g is not None:
            o = o * torch.sigmoid(g)
        return self.o_proj(o.reshape(B, S, H * D)), None


def attention(q, k, v):
    H, KV = q.shape[1], k.shape[1]
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        try:
            return sdpa(q, k, v, is_causal=True, enable_gqa=H != KV)
        except TypeError:  # torch < 2.5: no enable_gqa
            pass
    if H != KV:  # repeat_kv
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
    if sdpa is not None:
        return sdpa(q, k, v, is_causal=True)
    S = q.shape[2]
    mask = torch.full((S, S), float("-inf"), device=q.device).triu(1)
    att = torch.softmax((q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1]) + mask, -1)
    return (att.to(v.dtype) @ v)


# ---- the model ---------------------------------------------------------------------------


def build_hf():
    import transformers
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    from transformers.models.qwen3_moe import modeling_qwen3_moe as mq

    kw = dict(vocab_size=MC["vocab_size"], hidden_size=MC["hidden_size"],
              intermediate_size=max(MC.get("intermediate_size", 0), 1),
              moe_intermediate_size=MC["moe_intermediate_size"], num_hidden_layers=LAYERS,
              num_attention_heads=MC["num_attention_heads"], num_key_value_heads=MC["num_key_value_heads"],
              head_dim=MC["head_dim"], hidden_act="silu", max_position_embeddings=MC["max_position_embeddings"],
              rms_norm_eps=EPS, rope_theta=MC.get("rope_theta", 10000.0),
              tie_word_embeddings=MC.get("tie_word_embeddings", False), num_experts=MC["num_experts"],
              num_experts_per_tok=MC["num_experts_per_tok"], norm_topk_prob=MC.get("norm_topk_prob", True),
              router_aux_loss_coef=MC.get("router_aux_loss_coef", 0.0), output_router_logits=True,
              decoder_sparse_step=1, mlp_only_layers=list(MC.get("mlp_only_layers", [])),
              attention_bias=False, use_cache=False, initializer_range=MC.get("initializer_range", 0.02))
    if MC.get("shared_expert_intermediate_size", 0):
        raise SystemExit("--impl hf: Qwen3-MoE has no shared expert; use --impl native")
    # The attention is replaced below; the implementation only decides how HF builds its
    # (unused) causal mask.
    try:
        cfg = Qwen3MoeConfig(attn_implementation="sdpa", **kw)
    except TypeError:
        cfg = Qwen3MoeConfig(**kw)
    model = Qwen3MoeForCausalLM(cfg)
    norm_cls = getattr(mq, "Qwen3MoeRMSNorm", RMSNorm)
    for layer in model.model.layers:
        layer.self_attn = GatedAttention(MC, norm_cls)
    std = MC.get("initializer_range", 0.02)
    for mod in model.modules():
        if isinstance(mod, GatedAttention):
            for lin in (mod.q_proj, mod.k_proj, mod.v_proj, mod.o_proj):
                nn.init.normal_(lin.weight, std=std)
    mlp = model.model.layers[0].mlp
    experts = getattr(mlp, "experts", None)
    info = {"transformers": transformers.__version__, "moe_block": type(mlp).__name__,
            "experts": type(experts).__name__ if experts is not None else None}

    def step_loss(ids, targets):
        out = model(input_ids=ids, output_router_logits=True, use_cache=False)
        ce = F.cross_entropy(out.logits.float().view(-1, out.logits.shape[-1]), targets.reshape(-1))
        aux = getattr(out, "aux_loss", None)
        if aux is not None and kw["router_aux_loss_coef"]:
            ce = ce + kw["router_aux_loss_coef"] * aux.to(ce.dtype)
        return ce

    return model, step_loss, info


class Expert(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoe(nn.Module):
    """Hugging Face's Qwen3MoeSparseMoeBlock written out: softmax router in fp32, top-k,
    renormalized weights, a loop over the experts that received tokens (index_add_)."""

    def __init__(self, mc):
        super().__init__()
        h = mc["hidden_size"]
        self.E, self.k = mc["num_experts"], mc["num_experts_per_tok"]
        self.norm_topk = mc.get("norm_topk_prob", True)
        self.gate = nn.Linear(h, self.E, bias=False)
        self.experts = nn.ModuleList([Expert(h, mc["moe_intermediate_size"]) for _ in range(self.E)])
        si = mc.get("shared_expert_intermediate_size", 0)
        self.shared = Expert(h, si) if si else None
        self.shared_gate = nn.Linear(h, 1, bias=False) if si else None

    def forward(self, x):
        B, S, h = x.shape
        x = x.reshape(-1, h)
        logits = self.gate(x)
        p = F.softmax(logits, dim=1, dtype=torch.float)
        w, sel = torch.topk(p, self.k, dim=-1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        w = w.to(x.dtype)
        y = torch.zeros_like(x)
        mask = F.one_hot(sel, self.E).permute(2, 1, 0)
        for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero().flatten().tolist():
            slot, tok = torch.where(mask[e])
            y.index_add_(0, tok, (self.experts[e](x[tok]) * w[tok, slot, None]).to(x.dtype))
        if self.shared is not None:
            y = y + torch.sigmoid(self.shared_gate(x)) * self.shared(x)
        # load-balancing loss as HF computes it: E * sum_i f_i P_i with f_i = count_i / N
        # (k when balanced); the caller applies the coefficient to it / k, as sluice does
        f = F.one_hot(sel, self.E).float().mean(0)
        lbl = self.E * (f * p.mean(0)).sum()
        return y.view(B, S, h), lbl


class Layer(nn.Module):
    def __init__(self, mc, l):
        super().__init__()
        h = mc["hidden_size"]
        self.input_layernorm = RMSNorm(h, EPS)
        self.post_attention_layernorm = RMSNorm(h, EPS)
        self.self_attn = GatedAttention(mc)
        moe = mc.get("num_experts", 0) > 0 and l not in mc.get("mlp_only_layers", [])
        self.mlp = SparseMoe(mc) if moe else Expert(h, mc["intermediate_size"])
        self.moe = moe

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))[0]
        y = self.mlp(self.post_attention_layernorm(x))
        if self.moe:
            y, lbl = y
        else:
            lbl = None
        return x + y, lbl


class NativeModel(nn.Module):
    def __init__(self, mc):
        super().__init__()
        V, h = mc["vocab_size"], mc["hidden_size"]
        self.embed_tokens = nn.Embedding(V, h)
        self.layers = nn.ModuleList([Layer(mc, l) for l in range(mc["num_hidden_layers"])])
        self.norm = RMSNorm(h, EPS)
        self.lm_head = nn.Linear(h, V, bias=False)
        if mc.get("tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight
        std = mc.get("initializer_range", 0.02)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=std)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        lbls = []
        for layer in self.layers:
            x, lbl = layer(x)
            if lbl is not None:
                lbls.append(lbl)
        return self.lm_head(self.norm(x)), lbls


def build_native():
    model = NativeModel(MC)
    coef = MC.get("router_aux_loss_coef", 0.0)

    def step_loss(ids, targets):
        logits, lbls = model(ids)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
        if lbls and coef:
            loss = loss + coef * torch.stack(lbls).mean() / MC["num_experts_per_tok"]
        return loss

    return model, step_loss, {"transformers": None, "moe_block": "SparseMoe (native)", "experts": "ModuleList"}


def on_device():
    """Build the parameters on the device (torch >= 2.0), not on the host first."""
    try:
        with torch.device(DEVICE):
            pass
        return torch.device(DEVICE)
    except (AttributeError, TypeError):
        return contextlib.nullcontext()


def build():
    impl = ARGS.impl
    if impl in ("auto", "hf"):
        try:
            m, f, info = build_hf()
            return "hf", m, f, info
        except ImportError as e:
            if impl == "hf":
                raise SystemExit("--impl hf: transformers' Qwen3-MoE does not import: %s" % e)
    m, f, info = build_native()
    return "native", m, f, info


# ---- the benchmark -----------------------------------------------------------------------


def sync():
    if CUDA:
        torch.cuda.synchronize()


def matmul_peak(n, reps=21):
    """Median TFLOP/s of torch.matmul on n x n bf16 (cuBLAS, fp32 accumulation)."""
    if n <= 0 or not CUDA:
        return None
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    ev[0].record()
    for i in range(reps):
        a @ b
        ev[i + 1].record()
    sync()
    ms = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(reps))
    del a, b
    return 2.0 * n ** 3 / (ms[reps // 2] * 1e-3) / 1e12


def optimizer(model):
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": TC.get("weight_decay", 0.1)},
              {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=TC.get("lr", 1e-3), betas=(TC.get("beta1", 0.9), TC.get("beta2", 0.95)), eps=TC.get("eps", 1e-8))
    if CUDA:
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, **kw), "default"


def main():
    torch.manual_seed(ARGS.seed)
    peak = matmul_peak(ARGS.peak_n)
    with on_device():
        impl, model, step_loss, info = build()
    dtype = torch.bfloat16 if ARGS.precision == "bf16" else torch.float32
    model = model.to(DEVICE, dtype=dtype)
    model.train()
    opt, opt_kind = optimizer(model)
    amp = ARGS.precision == "amp"
    params = sum(p.numel() for p in model.parameters())
    fpt = perf_model.flops_per_token(MC, LAYERS, SEQ)
    gen = torch.Generator(device="cpu").manual_seed(20240601)
    batches = []
    for _ in range(ARGS.accum):
        t = torch.randint(0, MC["vocab_size"], (BATCH, SEQ + 1), generator=gen)
        batches.append((t[:, :SEQ].to(DEVICE), t[:, 1:].to(DEVICE)))
    clip = TC.get("grad_clip", 1.0)
    times, losses = [], []
    for s in range(ARGS.warmup + ARGS.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for ids, tg in batches:
            with torch.autocast(device_type=DEVICE.type, dtype=torch.bfloat16, enabled=amp):
                loss = step_loss(ids, tg) / ARGS.accum
            loss.backward()
            total = total + loss.detach()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sync()
        t1 = time.perf_counter()
        losses.append(float(total))
        if s >= ARGS.warmup:
            times.append(t1 - t0)
    mean = sum(times) / len(times)
    step_tokens = BATCH * SEQ * ARGS.accum
    tps = step_tokens / mean
    mem = torch.cuda.max_memory_allocated() / (1 << 30) if CUDA else None
    name = torch.cuda.get_device_name() if CUDA else "cpu"
    print("gpu_train_bench_torch: %s | %s | torch %s | impl %s (transformers %s, MoE %s, experts %s) | "
          "precision %s | AdamW %s" % (os.path.relpath(ARGS.config, ROOT), name, torch.__version__, impl,
                                       info["transformers"], info["moe_block"], info["experts"],
                                       ARGS.precision, opt_kind))
    print("model: %d layers, %.1fM parameters | %d micro-batch(es) of %d x %d = %d tokens/step | "
          "loss %.4f -> %.4f" % (LAYERS, params / 1e6, ARGS.accum, BATCH, SEQ, step_tokens, losses[0], losses[-1]))
    print("time/step: mean %.2f ms, median %.2f ms, min %.2f ms | %.1f tokens/s" % (
        1e3 * mean, 1e3 * statistics.median(times), 1e3 * min(times), tps))
    print("model FLOPs/token %.4g (model/counts.h convention) | %.2f TFLOP/s%s" % (
        fpt, fpt * tps / 1e12, "" if peak is None else " | torch.matmul bf16 %d^3 peak %.1f TFLOP/s" % (ARGS.peak_n, peak)))
    if mem is not None:
        print("peak memory allocated by torch: %.2f GiB" % mem)
    print(json.dumps({
        "impl": "torch-" + impl, "config": os.path.relpath(ARGS.config, ROOT), "device": name,
        "torch": torch.__version__, "transformers": info["transformers"], "moe_block": info["moe_block"],
        "experts": info["experts"], "precision": ARGS.precision, "adamw": opt_kind, "layers": LAYERS,
        "batch": BATCH, "seq": SEQ, "accum": ARGS.accum, "warmup": ARGS.warmup, "steps": ARGS.steps,
        "params": params, "tokens_per_step": step_tokens, "tokens_per_s": tps, "ms_per_step": 1e3 * mean,
        "ms_per_step_median": 1e3 * statistics.median(times), "ms_per_step_min": 1e3 * min(times),
        "flops_per_token": fpt, "model_tflops": fpt * tps / 1e12, "matmul_peak_tflops": peak,
        "max_memory_gib": mem, "loss_first": losses[0], "loss_last": losses[-1]}))


if __name__ == "__main__":
    try:
        main()
    except out_of_memory_types() as e:
        if not isinstance(e, getattr(torch, "OutOfMemoryError", ())) and "out of memory" not in str(e):
            raise
        print("gpu_train_bench_torch: out of memory with %d layers: %s" % (LAYERS, str(e).splitlines()[0]),
              file=sys.stderr)
        print(json.dumps({"impl": "torch", "layers": LAYERS, "seq": SEQ, "batch": BATCH,
                          "error": "out of memory"}))
        sys.exit(3)
