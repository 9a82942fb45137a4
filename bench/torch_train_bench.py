"""Training throughput of the same model in PyTorch (float32, CPU), for comparison with
bench_train (bench/train_bench.c).

Usage: /usr/bin/python3 torch_train_bench.py CONFIG [--variant hf|stacked] [--experts grouped|bmm]
           [--steps N] [--warmup N] [--threads N] [--batch B] [--seq S] [--[no-]foreach]
           [--adamw-block N] [--malloc default|heap]

Reads the model and training sections of a sluice config and trains the model on random
tokens (fixed seed) with micro-batches of B x S tokens: each step zeroes the gradients, runs
forward and backward (cross-entropy + load-balancing and z-loss terms), clips the gradient
to training.grad_clip and takes one torch.optim.AdamW step (betas, eps, weight decay on the
matrices only, the config's learning-rate schedule). Attention is the same in both variants:
matmul + causal mask + softmax (torch 1.13 has no scaled_dot_product_attention), GQA through
repeat_kv. The variants differ in the MoE layers and in how the step is run:

  --variant hf       the way Hugging Face writes Qwen3-MoE: one nn.Linear per projection and
                     expert, a Python loop over the experts that received tokens with
                     index_select / index_add_; torch.optim.AdamW over the parameters as they
                     are; the default allocator.
  --variant stacked  the fastest formulation measured for torch 1.13 on the CPU: the experts
                     as two stacked parameters [E, C, 2I] and [E, I, C], computed by one
                     autograd Function that runs each expert's rows through both GEMMs while
                     they are in cache and writes the backward out (GroupedExperts; --experts
                     bmm: padded torch.bmm instead); torch.optim.AdamW stepping 256K-element
                     blocks of the parameters (--adamw-block); glibc malloc kept from mmap
                     (--malloc heap). bench/README.md has the measurements behind each choice,
                     including why foreach=True is off (--foreach turns it on).

Model FLOPs per token follow sluice's convention (model/counts.h). The last output line
is JSON.
"""
import argparse
import json
import math
import os
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=-1)
    ap.add_argument("--batch", type=int, default=-1)
    ap.add_argument("--seq", type=int, default=-1)
    ap.add_argument("--variant", choices=("hf", "stacked"), default="hf",
                    help="hf: per-expert nn.Linear modules and a Python loop (Hugging Face style); "
                    "stacked: stacked expert weights, grouped computation, blocked AdamW, heap malloc")
    ap.add_argument("--experts", choices=("grouped", "bmm"), default="grouped",
                    help="stacked variant: per-expert GEMMs in one autograd Function (grouped) or "
                    "padded torch.bmm over all experts (bmm)")
    ap.add_argument("--foreach", action=argparse.BooleanOptionalAction, default=False,
                    help="AdamW(foreach=True) (slower than the loop in every case measured on torch 1.13 CPU)")
    ap.add_argument("--adamw-block", type=int, default=-1,
                    help="AdamW steps parameters in blocks (views) of at most this many elements "
                    "(0: whole parameters); default: 0 for hf, 262144 for stacked")
    ap.add_argument("--malloc", choices=("default", "heap"), default=None,
                    help="heap: glibc malloc never uses mmap and never trims, so large tensors "
                    "reuse memory instead of page-faulting fresh mappings every step; "
                    "default: default for hf, heap for stacked")
    args = ap.parse_args()
    stacked = args.variant == "stacked"
    if args.adamw_block < 0:
        args.adamw_block = 262144 if stacked else 0
    if args.malloc is None:
        args.malloc = "heap" if stacked else "default"
    return args


ARGS = parse_args()
if ARGS.malloc == "heap":
    # What jemalloc/tcmalloc do for PyTorch on CPUs (neither is installed here): keep freed
    # large blocks for reuse. glibc otherwise serves every allocation above 32 MB (a stacked
    # expert tensor, its gradient, many activations) with a fresh mmap that is zero-filled
    # page by page on first touch, and unmaps it on free. Must run before torch allocates.
    import ctypes

    _libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    _libc.mallopt(M_MMAP_MAX, 0)
    _libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
CFG = json.load(open(ARGS.config))
MC, TC = CFG["model"], CFG.get("training", {})
THREADS = ARGS.threads if ARGS.threads >= 0 else CFG.get("backend", {}).get("threads", 0)
if THREADS <= 0:
    THREADS = os.cpu_count()
# Debian's torch calls the pthread build of OpenBLAS for its GEMMs: give it the same thread
# count before it loads (torch.set_num_threads only sets the OpenMP intra-op pool).
os.environ["OPENBLAS_NUM_THREADS"] = str(THREADS)
os.environ["OMP_NUM_THREADS"] = str(THREADS)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch_reference  # noqa: E402

torch.set_num_threads(THREADS)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq):
    # The RoPE/YaRN tables come from the cross-check's reference implementation (one copy of
    # the formulas); here in float32 and laid out [S, rot] for rotate-half.
    cos, sin, rot = torch_reference.rope_tables(MC, seq)
    cos, sin = cos.float(), sin.float()
    return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1), rot


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin, rot):
    # x: [B, heads, S, D]; cos/sin: [S, rot]
    if rot == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat([xr * cos + rotate_half(xr) * sin, xp], dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        h, H, KV, D = MC["hidden_size"], MC["num_attention_heads"], MC["num_key_value_heads"], MC["head_dim"]
        self.H, self.KV, self.D = H, KV, D
        self.gate = MC.get("attn_output_gate", "elementwise")
        qw = {"elementwise": 2 * H * D, "headwise": H * D + H}.get(self.gate, H * D)
        self.q_proj = nn.Linear(h, qw, bias=False)
        self.k_proj = nn.Linear(h, KV * D, bias=False)
        self.v_proj = nn.Linear(h, KV * D, bias=False)
        self.o_proj = nn.Linear(H * D, h, bias=False)
        self.q_norm = RMSNorm(D, MC.get("rms_norm_eps", 1e-6))
        self.k_norm = RMSNorm(D, MC.get("rms_norm_eps", 1e-6))

    def forward(self, x, cos, sin, rot, mask):
        B, S, _ = x.shape
        H, KV, D = self.H, self.KV, self.D
        qa = self.q_proj(x)
        g = None
        if self.gate == "elementwise":  # per head [q_h | g_h] (Qwen3-Next layout)
            qa = qa.view(B, S, H, 2 * D)
            q, g = qa[..., :D], qa[..., D:]
        elif self.gate == "headwise":
            q, g = qa[..., : H * D].reshape(B, S, H, D), qa[..., H * D :].reshape(B, S, H, 1)
        else:
            q = qa.view(B, S, H, D)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, S, KV, D)).transpose(1, 2)
        v = self.v_proj(x).view(B, S, KV, D).transpose(1, 2)
        q, k = apply_rope(q, cos, sin, rot), apply_rope(k, cos, sin, rot)
        if H != KV:  # repeat_kv
            rep = H // KV
            k = k[:, :, None].expand(B, KV, rep, S, D).reshape(B, H, S, D)
            v = v[:, :, None].expand(B, KV, rep, S, D).reshape(B, H, S, D)
        att = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(D)) + mask
        att = torch.softmax(att, dim=-1)
        o = torch.matmul(att, v).transpose(1, 2)  # [B, S, H, D]
        if g is not None:
            sg = torch.sigmoid(g)
            o = o * sg
        return self.o_proj(o.reshape(B, S, H * D))


class MLP(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoEBase(nn.Module):
    """Router and auxiliary losses, shared by both variants (reference card, moe_block.h):
    p = softmax(X W_r^T), top-k of p, weights renormalized when norm_topk_prob;
    LBL = E sum_i f_i P_i with f_i = count_i / N (sums to k, so LBL = k under uniform
    routing, as sluice reports it), z = mean lse^2 (only when its coefficient is non-zero)."""

    def __init__(self):
        super().__init__()
        h = MC["hidden_size"]
        self.E, self.k = MC["num_experts"], MC["num_experts_per_tok"]
        self.norm_topk = MC.get("norm_topk_prob", True)
        self.gate = nn.Linear(h, self.E, bias=False)
        si = MC.get("shared_expert_intermediate_size", 0)
        self.shared = MLP(h, si) if si > 0 else None
        self.shared_gate = nn.Linear(h, 1, bias=False) if si > 0 else None

    def route(self, X):
        """Returns (w [N, k], flat expert index [N*k], order = slots sorted by expert,
        counts [E], probs, logits)."""
        logits = self.gate(X)
        probs = torch.softmax(logits, dim=-1)
        w, idx = torch.topk(probs, self.k, dim=-1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        flat = idx.reshape(-1)
        order = torch.argsort(flat)
        counts = torch.bincount(flat, minlength=self.E)
        return w, flat, order, counts, probs, logits

    def finish(self, X, y, counts, probs, logits):
        if self.shared is not None:
            y = y + torch.sigmoid(self.shared_gate(X)) * self.shared(X)
        f = counts.to(X.dtype) / X.shape[0]  # not differentiable
        lbl = self.E * (f * probs.mean(0)).sum()
        z = (torch.logsumexp(logits, -1) ** 2).mean() if MC.get("router_z_loss_coef", 0.0) > 0 else None
        return y, lbl, z


class SparseMoE(MoEBase):
    """--variant hf: one MLP module (three nn.Linear) per expert and a Python loop over the
    experts that received tokens, as Hugging Face's Qwen3-MoE."""

    def __init__(self):
        super().__init__()
        h = MC["hidden_size"]
        self.experts = nn.ModuleList([MLP(h, MC["moe_intermediate_size"]) for _ in range(self.E)])

    def forward(self, x):
        B, S, h = x.shape
        X = x.reshape(-1, h)
        w, flat, order, counts, probs, logits = self.route(X)
        y = torch.zeros_like(X)
        # Token lists per expert from one sort instead of E nonzero() calls.
        rows_all, wflat = order // self.k, w.reshape(-1)
        start = 0
        for e, c in enumerate(counts.tolist()):
            if c == 0:
                continue
            sel = order[start : start + c]
            rows = rows_all[start : start + c]
            start += c
            out = self.experts[e](X.index_select(0, rows)) * wflat.index_select(0, sel)[:, None]
            y.index_add_(0, rows, out)
        y, lbl, z = self.finish(X, y, counts, probs, logits)
        return y.view(B, S, h), lbl, z


class GroupedExperts(torch.autograd.Function):
    """y[n] = sum over the slots s of token n of ws[s] * Expert_e(s)(X[n]) for stacked expert
    weights gate_up [E, C, 2I] ([gate | up] columns) and down [E, I, C], slots grouped by
    expert (tok[s] = token of slot s, counts[e] slots per expert).

    Per expert, the whole chain (gather rows, GEMM, SwiGLU, GEMM, weight, scatter-add) runs on
    that expert's rows while they are in cache, and the backward is written out: no autograd
    node per expert, no [N, C] zero-filled gradient per expert (what index_select's backward
    costs in the hf variant), and every GEMM is a plain torch.mm on contiguous or transposed
    2-D operands (BLAS sgemm). torch 1.13's CPU bmm is slower for the transposed operands
    that bmm's own backward needs, which is why the padded-bmm formulation (--experts bmm)
    is not the default."""

    @staticmethod
    def forward(ctx, X, ws, gate_up, down, tok, counts):
        I = down.shape[1]
        gu = X.new_empty(tok.shape[0], 2 * I)  # saved for the backward
        out = X.new_empty(tok.shape[0], X.shape[1])  # saved: dL/dws needs it
        y = torch.zeros_like(X)
        bounds = [0]
        for c in counts:
            bounds.append(bounds[-1] + c)
        for e in range(len(counts)):
            a, b = bounds[e], bounds[e + 1]
            if a == b:
                continue
            te = tok[a:b]
            g = torch.mm(X.index_select(0, te), gate_up[e], out=gu[a:b])
            o = torch.mm(F.silu(g[:, :I]) * g[:, I:], down[e], out=out[a:b])
            y.index_add_(0, te, o * ws[a:b, None])
        ctx.save_for_backward(X, ws, gate_up, down, tok, gu, out)
        ctx.bounds = bounds
        return y

    @staticmethod
    def backward(ctx, dy):
        X, ws, gate_up, down, tok, gu, out = ctx.saved_tensors
        bounds, I = ctx.bounds, down.shape[1]
        dy = dy.contiguous()
        dX, dws = torch.zeros_like(X), torch.empty_like(ws)
        dgate_up, ddown = torch.zeros_like(gate_up), torch.zeros_like(down)
        for e in range(len(bounds) - 1):
            a, b = bounds[e], bounds[e + 1]
            if a == b:
                continue
            te = tok[a:b]
            dye = dy.index_select(0, te)
            torch.sum(dye * out[a:b], 1, out=dws[a:b])
            do = dye * ws[a:b, None]
            g, u = gu[a:b, :I], gu[a:b, I:]
            sg = torch.sigmoid(g)
            silu = g * sg
            torch.mm((silu * u).t(), do, out=ddown[e])
            dh = torch.mm(do, down[e].t())
            dgu = torch.cat([dh * u * (sg * (1.0 + g * (1.0 - sg))), dh * silu], 1)
            torch.mm(X.index_select(0, te).t(), dgu, out=dgate_up[e])
            dX.index_add_(0, te, torch.mm(dgu, gate_up[e].t()))
        return dX, dws, dgate_up, ddown, None, None


class StackedMoE(MoEBase):
    """--variant stacked: the experts as two stacked parameters, gate_up [E, C, 2I] and
    down [E, I, C]; --experts picks how they are computed: 'grouped' (GroupedExperts, the
    default, the fastest measured) or 'bmm' (rows padded to the largest group, torch.bmm over
    all experts at once, autograd for the backward)."""

    def __init__(self):
        super().__init__()
        h, I = MC["hidden_size"], MC["moe_intermediate_size"]
        self.I = I
        self.gate_up = nn.Parameter(torch.empty(self.E, h, 2 * I))
        self.down = nn.Parameter(torch.empty(self.E, I, h))

    def forward(self, x):
        B, S, h = x.shape
        X = x.reshape(-1, h)
        N = X.shape[0]
        w, flat, order, counts, probs, logits = self.route(X)
        tok, ws = order // self.k, w.reshape(-1).index_select(0, order)
        if ARGS.experts == "grouped":
            y = GroupedExperts.apply(X, ws, self.gate_up, self.down, tok, counts.tolist())
        else:
            cap = int(counts.max())
            start = torch.cumsum(counts, 0) - counts
            se = flat.index_select(0, order)
            dest = se * cap + (torch.arange(N * self.k) - start.index_select(0, se))
            src = torch.full((self.E * cap,), N, dtype=torch.long)  # row N: zeros (padding)
            src[dest] = tok
            Xp = torch.cat([X, X.new_zeros(1, h)]).index_select(0, src).view(self.E, cap, h)
            g, u = torch.bmm(Xp, self.gate_up).split(self.I, -1)
            out = torch.bmm(F.silu(g) * u, self.down).view(self.E * cap, h)
            y = X.new_zeros(N, h).index_add(0, tok, out.index_select(0, dest) * ws[:, None])
        y, lbl, z = self.finish(X, y, counts, probs, logits)
        return y.view(B, S, h), lbl, z


class Layer(nn.Module):
    def __init__(self, moe):
        super().__init__()
        h, eps = MC["hidden_size"], MC.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention()
        self.post_attention_layernorm = RMSNorm(h, eps)
        moe_cls = StackedMoE if ARGS.variant == "stacked" else SparseMoE
        self.mlp = moe_cls() if moe else MLP(h, MC["intermediate_size"])
        self.moe = moe

    def forward(self, x, cos, sin, rot, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, rot, mask)
        if self.moe:
            y, lbl, z = self.mlp(self.post_attention_layernorm(x))
            return x + y, lbl, z
        return x + self.mlp(self.post_attention_layernorm(x)), None, None


class Model(nn.Module):
    def __init__(self, seq):
        super().__init__()
        V, h, L = MC["vocab_size"], MC["hidden_size"], MC["num_hidden_layers"]
        dense = set(MC.get("mlp_only_layers", []))
        self.embed_tokens = nn.Embedding(V, h)
        self.layers = nn.ModuleList(
            [Layer(MC.get("num_experts", 0) > 0 and l not in dense) for l in range(L)]
        )
        self.norm = RMSNorm(h, MC.get("rms_norm_eps", 1e-6))
        self.lm_head = None if MC.get("tie_word_embeddings") else nn.Linear(h, V, bias=False)
        cos, sin, self.rot = rope_tables(seq)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))
        std = MC.get("initializer_range", 0.02)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, std)

    def forward(self, ids, targets):
        x = self.embed_tokens(ids)
        lbls, zs = [], []
        for layer in self.layers:
            x, lbl, z = layer(x, self.cos, self.sin, self.rot, self.mask)
            if lbl is not None:
                lbls.append(lbl)
            if z is not None:
                zs.append(z)
        x = self.norm(x)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, head)
        ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        obj = ce
        if lbls:
            obj = obj + MC.get("router_aux_loss_coef", 1e-3) * (sum(lbls) / len(lbls)) / MC["num_experts_per_tok"]
        if zs:
            obj = obj + MC["router_z_loss_coef"] * sum(zs) / len(zs)
        return obj, ce


def lr_at(step):  # trainer/lr_schedule.c
    lr, min_lr = TC.get("lr", 3e-4), TC.get("min_lr", 3e-5)
    warm, total = TC.get("warmup_steps", 100), TC.get("max_steps", 1000)
    if warm > 0 and step < warm:
        return lr * (step + 1) / warm
    span = total - warm
    p = min(1.0, (step - warm) / span) if span > 0 else 1.0
    sched = TC.get("schedule", "cosine")
    if sched == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))
    if sched == "wsd":
        df = TC.get("decay_fraction", 0.2)
        ds = 1.0 - df
        if p <= ds or df <= 0:
            return lr
        return lr + (min_lr - lr) * (p - ds) / df
    return lr


def flops_per_token(seq):  # model/counts.h
    V, h, L = MC["vocab_size"], MC["hidden_size"], MC["num_hidden_layers"]
    H, KV, D = MC["num_attention_heads"], MC["num_key_value_heads"], MC["head_dim"]
    qw = {"elementwise": 2 * H * D, "headwise": H * D + H}.get(MC.get("attn_output_gate", "elementwise"), H * D)
    dense = set(MC.get("mlp_only_layers", []))
    mm = V * h
    for l in range(L):
        mm += h * qw + 2 * h * KV * D + H * D * h
        if MC.get("num_experts", 0) > 0 and l not in dense:
            si = MC.get("shared_expert_intermediate_size", 0)
            mm += h * MC["num_experts"] + MC["num_experts_per_tok"] * 3 * h * MC["moe_intermediate_size"]
            mm += 3 * h * si + h if si > 0 else 0
        else:
            mm += 3 * h * MC["intermediate_size"]
    return 6.0 * mm + 6.0 * L * H * D * seq


FOREACH = ARGS.foreach


class BlockedParams:
    """The optimizer's view of the parameters: each parameter larger than `block` elements
    as consecutive blocks (views of its storage), each with the matching view of the gradient
    as .grad. torch 1.13's AdamW runs nine elementwise kernels (two with temporaries) over
    each tensor it steps: over cache-sized blocks they stay in cache, over a 64 MB stacked
    expert tensor each pass goes to memory. Updates through the views land in the parameters;
    the moments live per block."""

    def __init__(self, params, block):
        self.block = block
        self.params = list(params)
        self.views = []
        for p in self.params:
            if block > 0 and p.numel() > block:
                self.views.append(list(p.detach().view(-1).split(block)))
            else:
                self.views.append([p])

    def flat(self):
        return [v for vs in self.views for v in vs]

    def attach_grads(self):
        for p, vs in zip(self.params, self.views):
            if vs[0] is p:
                continue
            gs = p.grad.view(-1).split(self.block) if p.grad is not None else [None] * len(vs)
            for v, g in zip(vs, gs):
                v.grad = g

    def detach_grads(self):  # so that the next step's set_to_none frees the gradients
        for p, vs in zip(self.params, self.views):
            if vs[0] is not p:
                for v in vs:
                    v.grad = None


def main():
    batch = ARGS.batch if ARGS.batch > 0 else TC.get("micro_batch_size", 1)
    seq = ARGS.seq if ARGS.seq > 0 else TC.get("seq_len", 4096)
    torch.manual_seed(TC.get("seed", 1234))
    model = Model(seq)
    decay = BlockedParams([p for p in model.parameters() if p.dim() >= 2], ARGS.adamw_block)
    no_decay = BlockedParams([p for p in model.parameters() if p.dim() < 2], ARGS.adamw_block)
    opt = torch.optim.AdamW(
        [{"params": decay.flat(), "weight_decay": TC.get("weight_decay", 0.1)},
         {"params": no_decay.flat(), "weight_decay": 0.0}],
        lr=lr_at(0),
        betas=(TC.get("beta1", 0.9), TC.get("beta2", 0.95)),
        eps=TC.get("eps", 1e-8),
        foreach=FOREACH,
    )
    gen = torch.Generator().manual_seed(20240601)
    tokens = torch.randint(0, MC["vocab_size"], (batch, seq + 1), generator=gen)
    ids, tgt = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    clip = TC.get("grad_clip", 1.0)
    times, loss_first, loss_last = [], None, None
    phase = [0.0] * 5  # zero grads, forward, backward, clip (norm), AdamW
    for s in range(ARGS.warmup + ARGS.steps):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        model.zero_grad(set_to_none=True)
        ta = time.perf_counter()
        obj, ce = model(ids, tgt)
        tb = time.perf_counter()
        obj.backward()
        tc = time.perf_counter()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        td = time.perf_counter()
        for b in (decay, no_decay):
            b.attach_grads()
        opt.step()
        for b in (decay, no_decay):
            b.detach_grads()
        t1 = time.perf_counter()
        loss = ce.item()
        loss_first = loss if loss_first is None else loss_first
        loss_last = loss
        if s >= ARGS.warmup:
            times.append(t1 - t0)
            for i, d in enumerate((ta - t0, tb - ta, tc - tb, td - tc, t1 - td)):
                phase[i] += d
    mean_s = sum(times) / len(times)
    med = sorted(times)[len(times) // 2]
    tok = batch * seq
    tok_s = tok / mean_s
    fpt = flops_per_token(seq)
    nparams = sum(p.numel() for p in model.parameters())
    variant = ARGS.variant + (f" ({ARGS.experts})" if ARGS.variant == "stacked" else "")
    print(f"torch_train_bench: {ARGS.config} | variant {variant}, AdamW foreach={FOREACH} "
          f"block={ARGS.adamw_block or 'whole'}, malloc {ARGS.malloc} | "
          f"torch {torch.__version__} x {torch.get_num_threads()} threads | batch {batch} x seq {seq} = {tok} tokens/step | {nparams / 1e6:.2f}M params")
    print(f"steps: {ARGS.warmup} warmup + {ARGS.steps} timed | loss {loss_first:.4f} (step 1) -> "
          f"{loss_last:.4f} (step {ARGS.warmup + ARGS.steps})")
    print(f"time/step: mean {1e3 * mean_s:.2f} ms, median {1e3 * med:.2f} ms, min {1e3 * min(times):.2f} ms")
    n = len(times)
    print(f"phases (mean ms): zero grads {1e3 * phase[0] / n:.2f} | forward {1e3 * phase[1] / n:.2f} | "
          f"backward {1e3 * phase[2] / n:.2f} | clip {1e3 * phase[3] / n:.2f} | AdamW {1e3 * phase[4] / n:.2f}")
    print(f"throughput: {tok_s:.1f} tokens/s (at the median step {tok / med:.1f}, at the best step "
          f"{tok / min(times):.1f})")
    print(f"model FLOPs/token: {fpt:.4g} | achieved {fpt * tok_s * 1e-9:.2f} GFLOP/s")
    print(json.dumps({
        "impl": "torch", "variant": ARGS.variant,
        "experts": ARGS.experts if ARGS.variant == "stacked" else "loop", "foreach": FOREACH,
        "adamw_block": ARGS.adamw_block, "malloc": ARGS.malloc,
        "config": ARGS.config, "threads": torch.get_num_threads(), "batch": batch,
        "seq": seq, "warmup": ARGS.warmup, "steps": ARGS.steps, "tokens_per_s": tok_s,
        "ms_per_step": 1e3 * mean_s, "ms_per_step_median": 1e3 * med,
        "ms_per_step_min": 1e3 * min(times),
        "phase_ms": dict(zip(("zero_grad", "forward", "backward", "clip", "adamw"), (1e3 * p / n for p in phase))),
        "flops_per_token": fpt,
        "model_flops_per_s": fpt * tok_s, "loss_first": loss_first, "loss_last": loss_last,
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
