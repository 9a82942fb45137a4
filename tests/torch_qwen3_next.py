"""Per-token logits of a Qwen3-Next export, computed by a small PyTorch implementation of the
Qwen3-Next forward, compared with the logits `sluice eval --dump-logits` wrote.

Written from Hugging Face transformers' Qwen3-Next model (models/qwen3_next: its configuration
keys, its zero-centred RMSNorm x * rsqrt(mean x^2 + eps) * (1 + w), its attention with q_proj
viewed per head as [q | gate] and the output times sigmoid(gate), its MoE block with a shared
expert scaled by sigmoid(shared_expert_gate x)), and only what sluice's export uses: every layer
"full_attention" (no linear attention), no attention bias. It reads nothing but the export's
config.json and safetensors (Qwen3-Next names and conventions), never sluice's configuration or
code, so a key or a tensor the export gets wrong shows up as a mismatch.

Usage: /usr/bin/python3 torch_qwen3_next.py EXPORT_DIR LOGITS.safetensors
  EXPORT_DIR  `sluice ckpt export --format qwen3_next` (or training.export_format = "qwen3_next")
  LOGITS      `sluice eval --dump-logits` over one sequence of the same model: "tokens" [S] (the
              inputs) and "logits" [S, V]
Exit 0 when max |sluice - torch| <= 1e-4 * max |torch| + 1e-5 over every token and vocabulary
entry (sluice computes in float32, this in float64), 1 otherwise.
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import load_safetensors  # noqa: E402  (float64 tensors; BF16 widened)

def load_weights(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    p = {}
    for f in files:
        p.update(load_safetensors(os.path.join(d, f)))
    return p


def rms_norm(x, w, eps):
    # Qwen3-Next's RMSNorm is zero-centred: the stored weight w scales by (1 + w)
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


def rope_tables(cfg, seq):
    rp = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta"))
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
    rtype = rp.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    yarn = dict(scaling, **{k: v for k, v in rp.items() if k not in ("rope_type", "rope_theta", "partial_rotary_factor")})
    d = cfg["head_dim"]
    rot = int(d * prf)
    inv = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    mscale = 1.0
    if rtype == "yarn":
        s, L = yarn["factor"], yarn["original_max_position_embeddings"]
        bf, bs = yarn.get("beta_fast") or 32, yarn.get("beta_slow") or 1

        def corr(n):
            return rot * math.log(L / (n * 2 * math.pi)) / (2 * math.log(theta))

        low, high = max(math.floor(corr(bf)), 0), min(math.ceil(corr(bs)), rot - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(rot // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        inv = inv / s * ramp + inv * (1 - ramp)
        mscale = yarn.get("attention_factor") or 0.1 * math.log(s) + 1.0
    elif rtype != "default":
        raise SystemExit(f"rope_type {rtype} is not one the export writes")
    ang = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang) * mscale, torch.sin(ang) * mscale, rot


def rope(x, cos, sin, rot):
    # x [S, heads, D]: rotate-half over the first rot dims, the rest passes through
    half = rot // 2
    a, b, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([a * c - b * s, b * c + a * s, rest], dim=-1)


def attention(cfg, p, pre, x, cos, sin, rot):
    S = x.shape[0]
    H, KV, D, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    qg = (x @ p[pre + "q_proj.weight"].T).view(S, H, 2 * D)
    q, gate = qg[..., :D], qg[..., D:].reshape(S, H * D)
    k = (x @ p[pre + "k_proj.weight"].T).view(S, KV, D)
    v = (x @ p[pre + "v_proj.weight"].T).view(S, KV, D)
    q = rope(rms_norm(q, p[pre + "q_norm.weight"], eps), cos, sin, rot)
    k = rope(rms_norm(k, p[pre + "k_norm.weight"], eps), cos, sin, rot)
    k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
    att = torch.einsum("shd,thd->hst", q, k) * D**-0.5
    att = att.masked_fill(torch.triu(torch.ones(S, S, dtype=torch.bool), 1), float("-inf")).softmax(-1)
    o = torch.einsum("hst,thd->shd", att, v).reshape(S, H * D)
    return (o * torch.sigmoid(gate)) @ p[pre + "o_proj.weight"].T


def mlp(x, p, pre):
    h = torch.nn.functional.silu(x @ p[pre + "gate_proj.weight"].T) * (x @ p[pre + "up_proj.weight"].T)
    return h @ p[pre + "down_proj.weight"].T


def sparse_moe(cfg, p, pre, x):
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    probs = (x @ p[pre + "gate.weight"].T).softmax(-1)
    w, idx = probs.topk(k, dim=-1)
    if cfg.get("norm_topk_prob", True):
        w = w / w.sum(-1, keepdim=True)
    y = torch.zeros_like(x)
    for e in range(E):
        rows, slot = (idx == e).nonzero(as_tuple=True)
        if rows.numel():
            y = y.index_add(0, rows, mlp(x[rows], p, pre + f"experts.{e}.") * w[rows, slot][:, None])
    shared = torch.sigmoid(x @ p[pre + "shared_expert_gate.weight"].T) * mlp(x, p, pre + "shared_expert.")
    margin = math.inf
    if k < E:  # how close the k-th and (k+1)-th choices came: rounding could swap a near tie
        top = probs.topk(k + 1, dim=-1).values
        margin = (top[:, k - 1] - top[:, k]).min().item()
    return y + shared, margin


def forward(cfg, p, ids):
    S = ids.shape[0]
    assert all(t == "full_attention" for t in cfg["layer_types"]), cfg["layer_types"]
    cos, sin, rot = rope_tables(cfg, S)
    eps = cfg["rms_norm_eps"]
    x = p["model.embed_tokens.weight"][ids]
    margin = math.inf
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        x = x + attention(cfg, p, pre + "self_attn.", rms_norm(x, p[pre + "input_layernorm.weight"], eps), cos, sin, rot)
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        sparse = i not in cfg.get("mlp_only_layers", []) and cfg["num_experts"] > 0 and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0
        if sparse:
            y, m = sparse_moe(cfg, p, pre + "mlp.", h)
            margin = min(margin, m)
        else:
            y = mlp(h, p, pre + "mlp.")
        x = x + y
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return x @ head.T, margin


def main(export_dir, logits_path):
    cfg = json.load(open(os.path.join(export_dir, "config.json")))
    assert cfg["model_type"] == "qwen3_next", cfg["model_type"]
    p = load_weights(export_dir)
    dump = load_safetensors(logits_path)
    ids, want = dump["tokens"].long(), dump["logits"]
    with torch.no_grad():
        got, margin = forward(cfg, p, ids)
    err = (got - want).abs().max().item()
    scale = got.abs().max().item()
    tol = 1e-4 * scale + 1e-5
    print(f"  {export_dir}: {ids.shape[0]} tokens, max |sluice - torch| {err:.3g} "
          f"(largest logit {scale:.3g}, tolerance {tol:.3g}; smallest top-k margin {margin:.3g})")
    if margin < 1e-6:
        print("  warning: a routing decision within 1e-6: float32 may decide it differently")
    return 0 if err <= tol else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
