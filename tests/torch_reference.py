"""Independent PyTorch implementation of sluice's model, for the cross-check.

Written from ../shared/reference/model-math.md, not from sluice's C code: it loads the
safetensors and config.json that sluice saved (Hugging Face Qwen3-MoE names plus
attn_output_gate), runs forward and backward on the same tokens in float64, and compares the
loss terms and every parameter gradient with what sluice computed in float32.

Usage: /usr/bin/python3 torch_reference.py RUN_DIR   (exit 0: match, 1: mismatch)
Tolerances: loss terms within 1e-5 relative; each gradient tensor within
max|g_sluice - g_torch| <= 1e-4 * max|g_torch| + 1e-6.
"""
import json
import math
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "BF16": None}


def load_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=DTYPES[meta["dtype"]]).reshape(meta["shape"])
        out[name] = torch.tensor(arr.astype(np.float64))
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope_tables(cfg, seq):
    d = cfg["head_dim"]
    rot = int(d * cfg.get("partial_rotary_factor", 1.0))
    base = cfg["rope_theta"]
    inv = 1.0 / base ** (torch.arange(0, rot // 2, dtype=torch.float64) * 2.0 / rot)
    mscale = 1.0
    rs = cfg.get("rope_scaling")
    if rs and (rs.get("rope_type") or rs.get("type")) == "yarn":
        s, L = rs["factor"], rs["original_max_position_embeddings"]
        bf, bs = rs.get("beta_fast", 32.0), rs.get("beta_slow", 1.0)

        def corr(n):
            return rot * math.log(L / (n * 2 * math.pi)) / (2 * math.log(base))

        low, high = max(math.floor(corr(bf)), 0), min(math.ceil(corr(bs)), rot - 1)
        if high == low:
            high += 0.001
        i = torch.arange(rot // 2, dtype=torch.float64)
        ramp = ((i - low) / (high - low)).clamp(0, 1)
        inv = inv / s * ramp + inv * (1 - ramp)
        mscale = rs.get("attention_factor") or 0.1 * math.log(s) + 1.0
    pos = torch.arange(seq, dtype=torch.float64)
    ang = pos[:, None] * inv[None, :]
    return torch.cos(ang) * mscale, torch.sin(ang) * mscale, rot


def apply_rope(x, cos, sin, rot):
    # x: [B, S, heads, D]; rotate-half over the first rot dims
    half = rot // 2
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)


def attention(cfg, p, i, x, cos, sin, rot):
    B, S, C = x.shape
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    pre = f"model.layers.{i}."
    X = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
    qa = X @ p[pre + "self_attn.q_proj.weight"].T
    mode = cfg.get("attn_output_gate", "elementwise")
    if mode == "elementwise":
        qa = qa.view(B, S, H, 2 * D)
        q, g = qa[..., :D], qa[..., D:]
    elif mode == "headwise":
        q = qa[..., : H * D].reshape(B, S, H, D)
        g = qa[..., H * D :].reshape(B, S, H, 1)
    else:
        q, g = qa.view(B, S, H, D), None
    k = (X @ p[pre + "self_attn.k_proj.weight"].T).view(B, S, KV, D)
    v = (X @ p[pre + "self_attn.v_proj.weight"].T).view(B, S, KV, D)
    q = rms_norm(q, p[pre + "self_attn.q_norm.weight"], eps)
    k = rms_norm(k, p[pre + "self_attn.k_norm.weight"], eps)
    q, k = apply_rope(q, cos, sin, rot), apply_rope(k, cos, sin, rot)
    rep = H // KV
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    att = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(D)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    att = att.masked_fill(mask, float("-inf")).softmax(-1)
    o = torch.einsum("bhst,bthd->bshd", att, v)
    gate_mean = None
    if g is not None:
        sg = torch.sigmoid(g)
        o = o * sg
        gate_mean = sg.mean().item()
    return x + o.reshape(B, S, H * D) @ p[pre + "self_attn.o_proj.weight"].T, gate_mean


def swiglu(x, p, pre):
    return (torch.nn.functional.silu(x @ p[pre + "gate_proj.weight"].T) * (x @ p[pre + "up_proj.weight"].T)) @ p[
        pre + "down_proj.weight"
    ].T


def ffn(cfg, p, i, h):
    B, S, C = h.shape
    pre = f"model.layers.{i}."
    X = rms_norm(h, p[pre + "post_attention_layernorm.weight"], cfg["rms_norm_eps"]).reshape(B * S, C)
    if cfg["num_experts"] == 0 or i in cfg.get("mlp_only_layers", []):
        return h + swiglu(X, p, pre + "mlp.").view(B, S, C), None
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    logits = X @ p[pre + "mlp.gate.weight"].T
    probs = logits.softmax(-1)
    w, idx = probs.topk(k, dim=-1)
    if cfg.get("norm_topk_prob", True):
        w = w / w.sum(-1, keepdim=True)
    y = torch.zeros_like(X)
    for e in range(E):
        rows, slot = (idx == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        out = swiglu(X[rows], p, pre + f"mlp.experts.{e}.")
        y = y.index_add(0, rows, out * w[rows, slot][:, None])
    if cfg.get("shared_expert_intermediate_size", 0) > 0:
        sg = torch.sigmoid(X @ p[pre + "mlp.shared_expert_gate.weight"].T)
        y = y + sg * swiglu(X, p, pre + "mlp.shared_expert.")
    N = X.shape[0]
    f = torch.bincount(idx.flatten(), minlength=E).double() / N  # share of tokens; sums to k
    lbl = E * (f * probs.mean(0)).sum()
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    return h + y.view(B, S, C), (lbl, z)


def main(run_dir):
    cfg = json.load(open(f"{run_dir}/config.json"))
    run = json.load(open(f"{run_dir}/run.json"))
    p = load_safetensors(f"{run_dir}/model.safetensors")
    gs = load_safetensors(f"{run_dir}/grads.safetensors")
    for t in p.values():
        t.requires_grad_(True)
    B, S = run["batch"], run["seq"]
    tok = torch.tensor(run["tokens"]).view(B, S + 1)
    ids, tgt = tok[:, :-1], tok[:, 1:]
    cos, sin, rot = rope_tables(cfg, S)
    x = p["model.embed_tokens.weight"][ids]
    aux, gates = [], []
    for i in range(cfg["num_hidden_layers"]):
        x, gm = attention(cfg, p, i, x, cos, sin, rot)
        if gm is not None:
            gates.append(gm)
        x, a = ffn(cfg, p, i, x)
        if a is not None:
            aux.append(a)
    x = rms_norm(x, p["model.norm.weight"], cfg["rms_norm_eps"])
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    logits = x @ head.T
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
    obj = ce
    lbl = z = torch.tensor(0.0, dtype=torch.float64)
    if aux:
        lbl = sum(a[0] for a in aux) / len(aux)
        z = sum(a[1] for a in aux) / len(aux)
        obj = ce + cfg["router_aux_loss_coef"] * lbl / cfg["num_experts_per_tok"] + cfg.get("router_z_loss_coef", 0.0) * z
    obj.backward()
    ok = True

    def close(name, a, b, rtol=1e-5, atol=1e-7):
        nonlocal ok
        good = abs(a - b) <= atol + rtol * abs(b)
        print(f"  {name:12s} sluice {a:.9g} torch {b:.9g} {'ok' if good else 'MISMATCH'}")
        ok &= good

    close("ce", run["ce"], ce.item())
    close("lbl", run["lbl"], lbl.item())
    close("zloss", run["zloss"], z.item())
    close("objective", run["objective"], obj.item())
    if gates:
        close("gate_score", run["gate_score"], sum(gates) / len(gates), rtol=1e-4)
    worst = 0.0
    for name, t in p.items():
        if name not in gs:
            print(f"  gradient of {name} missing from sluice's file")
            ok = False
            continue
        ref = t.grad if t.grad is not None else torch.zeros_like(t)
        err = (gs[name] - ref).abs().max().item()
        scale = ref.abs().max().item()
        tol = 1e-4 * scale + 1e-6
        worst = max(worst, err / (scale + 1e-12))
        if err > tol:
            print(f"  gradient {name}: max abs error {err:.3g} > {tol:.3g} (max |g| {scale:.3g})")
            ok = False
    print(f"  {len(p)} gradient tensors compared, worst relative error {worst:.3g}")
    return 0 if ok else 1


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    sys.exit(main(sys.argv[1]))
