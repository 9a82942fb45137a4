"""bench/torchtitan_style_model.py - the model of bench/torchtitan_style_bench.py (which says
what makes it "torchtitan style" and how it is checked against sluice): stacked expert weights
through grouped GEMMs over padded, expert-sorted rows, SDPA with the paper's gate, the fp32
router, the decoder layers and the LM head, as PyTorch modules. Imported after the benchmark
has parsed its arguments (torch is not needed for --help).
"""
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ALIGN = 16  # rows per expert group are padded to a multiple of this (grouped GEMM alignment)

GROUPED_MM = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
SDPA = getattr(F, "scaled_dot_product_attention", None)
RMS_NORM = getattr(F, "rms_norm", None)

# sluice's defaults (docs/config.md) for the model keys the math uses.
MODEL_DEFAULTS = {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "partial_rotary_factor": 1.0,
                  "rope_scaling": None, "num_experts": 0, "shared_expert_intermediate_size": 0,
                  "norm_topk_prob": True, "router_aux_loss_coef": 1e-3, "router_z_loss_coef": 0.0,
                  "mlp_only_layers": [], "tie_word_embeddings": False,
                  "attn_output_gate": "elementwise", "initializer_range": 0.02}


def model_config(mc):
    c = dict(MODEL_DEFAULTS)
    c.update(mc)
    c.setdefault("num_key_value_heads", c["num_attention_heads"])
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    if c.get("rope_scaling"):
        raise SystemExit("torchtitan_style_bench: rope_scaling (YaRN) is not implemented in this baseline")
    return c


# ---- the pieces -------------------------------------------------------------------------------


def grouped_mm(a, w_t, offs):
    """out[rows of group g] = a[rows of group g] @ w_t[g]; a [M, K], w_t [G, K, N], offs [G] int32
    cumulative group ends (rows past offs[-1] are not computed). The fused kernel needs bf16 on
    CUDA; elsewhere a loop over the groups (which reads the offsets on the host)."""
    if GROUPED_MM is not None and a.is_cuda and a.dtype == torch.bfloat16:
        return GROUPED_MM(a, w_t, offs=offs)
    ends = offs.tolist()
    sizes = [e - s for s, e in zip([0] + ends[:-1], ends)] + [a.shape[0] - ends[-1]]
    # split and unbind: one backward each for all groups (slicing a[s:e] or indexing w_t[g]
    # per group would zero-fill a full-size gradient per group)
    rows, ws = a.split(sizes, 0), w_t.unbind(0)
    pieces = [rows[g] @ ws[g] for g in range(len(ends)) if sizes[g] > 0]
    pieces.append(a.new_zeros(sizes[-1], w_t.shape[2]))
    return torch.cat(pieces, 0)


def max_rows(tokens, k, experts):
    """Rows of the padded, expert-sorted buffer: every slot plus up to ALIGN - 1 padding rows per
    expert, and ALIGN more so that the last group ends strictly inside the buffer."""
    m = tokens * k + experts * (ALIGN - 1) + ALIGN
    return (m + ALIGN - 1) // ALIGN * ALIGN


def permute_plan(idx, experts):
    """For top-k indices idx [N, k]: dest [N*k] (the padded row of each slot), src [M] (the token of
    each padded row; N = the all-zero row), group ends offs [E] (int32) and counts [E]. Device ops
    only: no host synchronization."""
    n, k = idx.shape
    dev = idx.device
    flat = idx.reshape(-1)
    counts = torch.zeros(experts, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = torch.div(counts + ALIGN - 1, ALIGN, rounding_mode="floor") * ALIGN
    ends = torch.cumsum(padded, 0)
    first = ends - padded  # each group's first padded row
    start = torch.cumsum(counts, 0) - counts  # each group's first sorted slot
    sorted_e, order = torch.sort(flat, stable=True)
    slots = torch.arange(n * k, device=dev)
    pos = first.index_select(0, sorted_e) + (slots - start.index_select(0, sorted_e))
    dest = torch.empty_like(flat).scatter_(0, order, pos)
    src = torch.full((max_rows(n, k, experts),), n, dtype=torch.int64, device=dev)
    src = src.scatter(0, dest, torch.div(slots, k, rounding_mode="floor"))
    return dest, src, ends.to(torch.int32), counts


class RMSNorm(nn.Module):
    """Statistics in fp32 (F.rms_norm where this PyTorch has it); the output in the input's dtype."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf, w = x.float(), self.weight.float()
        if RMS_NORM is not None:
            y = RMS_NORM(xf, (xf.shape[-1],), w, self.eps)
        else:
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * w
        return y.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def sdpa_causal(q, k, v):
    """Causal attention on [B, heads, S, D]; GQA when k and v have fewer heads."""
    h, kv = q.shape[1], k.shape[1]
    if SDPA is not None:
        if h != kv:
            try:
                return SDPA(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:  # torch < 2.5: no enable_gqa
                pass
        else:
            return SDPA(q, k, v, is_causal=True)
    if h != kv:
        k = k.repeat_interleave(h // kv, dim=1)
        v = v.repeat_interleave(h // kv, dim=1)
    if SDPA is not None:
        return SDPA(q, k, v, is_causal=True)
    s = q.shape[2]
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.full((s, s), float("-inf"), device=q.device).triu(1)
    return (torch.softmax(scores + mask, -1) @ v.float()).to(q.dtype)


class GatedAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, H, KV, D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.H, self.KV, self.D, self.mode = H, KV, D, c["attn_output_gate"]
        qw = {"elementwise": 2 * H * D, "headwise": H * D + H}.get(self.mode, H * D)
        self.q_proj = nn.Linear(h, qw, bias=False)
        self.k_proj = nn.Linear(h, KV * D, bias=False)
        self.v_proj = nn.Linear(h, KV * D, bias=False)
        self.o_proj = nn.Linear(H * D, h, bias=False)
        self.q_norm = RMSNorm(D, c["rms_norm_eps"])
        self.k_norm = RMSNorm(D, c["rms_norm_eps"])

    def forward(self, x, cos, sin, rot):
        B, S, _ = x.shape
        H, KV, D = self.H, self.KV, self.D
        qa = self.q_proj(x)
        g = None
        if self.mode == "elementwise":  # per head [q_h | g_h]
            qa = qa.view(B, S, H, 2 * D)
            q, g = qa[..., :D], qa[..., D:]
        elif self.mode == "headwise":  # the queries, then one gate value per head
            q, g = qa[..., : H * D].reshape(B, S, H, D), qa[..., H * D:].reshape(B, S, H, 1)
        else:
            q = qa.view(B, S, H, D)
        q = self.q_norm(q)
        k = self.k_norm(self.k_proj(x).view(B, S, KV, D))
        v = self.v_proj(x).view(B, S, KV, D)

        def rope(t):  # rotate-half over the first `rot` dims, in fp32
            tf = t.float()
            r = tf[..., :rot] * cos + rotate_half(tf[..., :rot]) * sin
            return torch.cat((r, tf[..., rot:]), -1).to(t.dtype) if rot < D else r.to(t.dtype)

        q, k = rope(q), rope(k)
        o = sdpa_causal(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        if g is not None:
            o = o * torch.sigmoid(g)
        return self.o_proj(o.reshape(B, S, H * D))


class SwiGLU(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GroupedExperts(nn.Module):
    """The layer's experts stacked: gate_up [E, 2I, C] (gate rows, then up rows) and down [E, C, I],
    as nn.Linear weights (out x in); the grouped GEMMs take them transposed."""

    def __init__(self, E, C, I):
        super().__init__()
        self.I = I
        self.gate_up = nn.Parameter(torch.empty(E, 2 * I, C))
        self.down = nn.Parameter(torch.empty(E, C, I))

    def forward(self, x, offs):
        wgu, wd = self.gate_up.to(x.dtype), self.down.to(x.dtype)
        h = grouped_mm(x, wgu.transpose(-2, -1), offs)
        a = F.silu(h[:, : self.I]) * h[:, self.I:]
        return grouped_mm(a, wd.transpose(-2, -1), offs)


def no_autocast(device_type):
    try:
        return torch.autocast(device_type=device_type, enabled=False)
    except (AttributeError, RuntimeError):
        return contextlib.nullcontext()


class MoE(nn.Module):
    def __init__(self, c, compute):
        super().__init__()
        h = c["hidden_size"]
        self.E, self.k, self.norm_topk = c["num_experts"], c["num_experts_per_tok"], c["norm_topk_prob"]
        self.z = c["router_z_loss_coef"] > 0
        self.compute = compute
        self.gate = nn.Parameter(torch.empty(self.E, h))  # the router, fp32
        self.experts = GroupedExperts(self.E, h, c["moe_intermediate_size"])
        si = c["shared_expert_intermediate_size"]
        self.shared = SwiGLU(h, si) if si else None
        self.shared_gate = nn.Linear(h, 1, bias=False) if si else None

    def forward(self, x):
        B, S, C = x.shape
        n = B * S
        X = x.reshape(n, C)
        with no_autocast(X.device.type):
            logits = F.linear(X.float(), self.gate.float())
        probs = torch.softmax(logits, -1)
        w, idx = torch.topk(probs, self.k, -1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        dest, src, offs, counts = permute_plan(idx, self.E)
        Xc = X.to(self.compute)
        xs = torch.cat((Xc, Xc.new_zeros(1, C)), 0).index_select(0, src)  # permute (padded)
        ys = self.experts(xs, offs)
        y = (ys.index_select(0, dest).view(n, self.k, C).float() * w.unsqueeze(-1)).sum(1)  # unpermute
        if self.shared is not None:
            y = y + torch.sigmoid(self.shared_gate(X)).float() * self.shared(X).float()
        lbl = self.E * ((counts.to(probs.dtype) / n) * probs.mean(0)).sum()
        z = (torch.logsumexp(logits, -1) ** 2).mean() if self.z else None
        return y.to(x.dtype).view(B, S, C), lbl, z


class Layer(nn.Module):
    def __init__(self, c, moe, compute):
        super().__init__()
        h, eps = c["hidden_size"], c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = GatedAttention(c)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.moe = moe
        self.mlp = MoE(c, compute) if moe else SwiGLU(h, c["intermediate_size"])

    def forward(self, x, cos, sin, rot):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, rot)
        y = self.mlp(self.post_attention_layernorm(x))
        if not self.moe:
            return x + y, None, None
        y, lbl, z = y
        return x + y, lbl, z


class Model(nn.Module):
    def __init__(self, c, seq, compute):
        super().__init__()
        self.c = c
        V, h = c["vocab_size"], c["hidden_size"]
        dense = set(c["mlp_only_layers"])
        self.embed_tokens = nn.Embedding(V, h)
        self.layers = nn.ModuleList([Layer(c, c["num_experts"] > 0 and l not in dense, compute)
                                     for l in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(h, c["rms_norm_eps"])
        self.lm_head = None if c["tie_word_embeddings"] else nn.Linear(h, V, bias=False)
        D = c["head_dim"]
        self.rot = int(D * c["partial_rotary_factor"])
        inv = torch.pow(float(c["rope_theta"]), -torch.arange(0, self.rot, 2, dtype=torch.float64) / self.rot)
        ang = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
        emb = torch.cat((ang, ang), -1)
        self.register_buffer("cos", emb.cos().float()[:, None, :], persistent=False)  # [S, 1, rot]
        self.register_buffer("sin", emb.sin().float()[:, None, :], persistent=False)
        std = c["initializer_range"]
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, std)

    def forward(self, ids, targets):
        """Per micro-batch: (objective, cross-entropy sum, mean LBL, mean z-loss or None)."""
        c = self.c
        x = self.embed_tokens(ids)
        lbls, zs = [], []
        for layer in self.layers:
            x, lbl, z = layer(x, self.cos, self.sin, self.rot)
            if lbl is not None:
                lbls.append(lbl)
            if z is not None:
                zs.append(z)
        x = self.norm(x)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, head)
        ce_sum = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")
        obj = ce_sum / targets.numel()
        lbl = torch.stack(lbls).mean() if lbls else None
        z = torch.stack(zs).mean() if zs else None
        if lbl is not None:
            obj = obj + c["router_aux_loss_coef"] * lbl / c["num_experts_per_tok"]
        if z is not None:
            obj = obj + c["router_z_loss_coef"] * z
        return obj, ce_sum, lbl, z
