"""Independent PyTorch implementation of sluice's model, for the cross-check.

Written from ../shared/reference/model-math.md (and, for what the card leaves to sluice, the
documented rules of docs/config.md and docs/parallelism.md), not from sluice's C code. It
reads the INPUT run configuration RUN_DIR/input.json (sections model, training, parallel;
absent keys take the defaults of docs/config.md), never the config.json that sluice wrote:
a key that sluice's config parser, its Hugging Face writer or reader loses therefore shows up
as a mismatch. It loads the weights sluice initialized (RUN_DIR/model.safetensors, Hugging
Face Qwen3-MoE names) and the tokens (RUN_DIR/run.json), runs one optimizer step's forward
and backward (every micro-batch) in float64, and compares with what sluice computed in
float32: the loss terms of each micro-batch, the expert counts of each MoE layer (routed,
and kept after capacity drops), the selection bias, the objective, and every parameter
gradient (RUN_DIR/grads.safetensors).

What it covers: gate modes elementwise / headwise / none, GQA, QK-norm, RoPE with partial
rotary and YaRN, tied / untied embeddings, dense layers, the gated shared expert, top-k with
and without renormalization, the selection bias (aux-loss-free balancing, from the bias
updates listed in run.json), capacity drops with both policies, per-micro-batch and
global-batch load-balancing loss over several micro-batches, and the z-loss.

Usage: /usr/bin/python3 torch_reference.py RUN_DIR   (exit 0: match, 1: mismatch)
Tolerances: loss terms within 1e-5 relative (the gate score 1e-4); each gradient tensor within
max|g_sluice - g_torch| <= 1e-4 * max|g_torch| + 1e-6; expert counts and kept counts exact;
the selection bias within 1e-6 (sluice accumulates it in float32).
"""
import json
import math
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "BF16": None}

# docs/config.md defaults of the keys the math uses (a key absent from input.json).
MODEL_DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "partial_rotary_factor": 1.0,
    "rope_scaling": None,
    "num_experts": 0,
    "shared_expert_intermediate_size": 0,
    "norm_topk_prob": True,
    "router_aux_loss_coef": 1e-3,
    "router_z_loss_coef": 0.0,
    "mlp_only_layers": [],
    "tie_word_embeddings": False,
    "attn_output_gate": "elementwise",
}
TRAIN_DEFAULTS = {
    "seq_len": 4096,
    "micro_batch_size": 1,
    "global_batch_lbl": False,
    "router_bias_update_rate": 0.0,
}
PARALLEL_DEFAULTS = {"capacity_factor": 0.0, "drop_policy": "probs"}


def load_input(path):
    run_cfg = json.load(open(path))
    cfg = dict(MODEL_DEFAULTS)
    cfg.update(run_cfg["model"])
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    train = dict(TRAIN_DEFAULTS)
    train.update(run_cfg.get("training", {}))
    train.setdefault("global_batch_tokens", train["seq_len"] * train["micro_batch_size"])
    par = dict(PARALLEL_DEFAULTS)
    par.update(run_cfg.get("parallel", {}))
    return cfg, train, par


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
        if meta["dtype"] == "BF16":  # the upper halves of float32 values
            arr = (np.frombuffer(data[b:e], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(data[b:e], dtype=DTYPES[meta["dtype"]])
        out[name] = torch.tensor(arr.reshape(meta["shape"]).astype(np.float64))
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
    mode = cfg["attn_output_gate"]
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


class Routing:
    """What the MoE layers report back over one step: statistics and self-checks."""

    def __init__(self, cfg, train, par, bias):
        self.cfg, self.train, self.par, self.bias = cfg, train, par, bias
        self.cum_counts = {}  # layer -> expert counts of the step so far (global-batch LBL)
        self.counts, self.kept = {}, {}  # layer -> counts of the current micro-batch
        self.dropped = 0
        self.bias_changed = 0  # slots whose expert the selection bias changed
        self.topk_margin = math.inf  # smallest score gap at the top-k boundary
        self.cap_margin = math.inf  # smallest weight gap at a "probs" capacity boundary


def capacity_keep(idx, w, cf, policy, E, R):
    """docs/parallelism.md: expert e keeps min(count, ceil(cf * N * k / E)) of its slots;
    "probs" keeps the largest routing weights (ties: the earlier slot), "position" the
    earliest tokens. Returns the [N, k] mask of kept slots."""
    N, k = idx.shape
    cap = math.ceil(cf * (N * k) / E)
    keep = torch.ones(N, k, dtype=torch.bool)
    for e in range(E):
        rows, slot = (idx == e).nonzero(as_tuple=True)  # in token order
        if rows.numel() <= cap:
            continue
        if policy == "position":
            order = list(range(rows.numel()))
        else:
            ws = w[rows, slot].tolist()
            order = sorted(range(len(ws)), key=lambda i: (-ws[i], i))
            R.cap_margin = min(R.cap_margin, ws[order[cap - 1]] - ws[order[cap]])
        for i in order[cap:]:
            keep[rows[i], slot[i]] = False
    return keep


def ffn(cfg, p, i, h, R):
    B, S, C = h.shape
    pre = f"model.layers.{i}."
    X = rms_norm(h, p[pre + "post_attention_layernorm.weight"], cfg["rms_norm_eps"]).reshape(B * S, C)
    if cfg["num_experts"] == 0 or i in cfg["mlp_only_layers"]:
        return h + swiglu(X, p, pre + "mlp.").view(B, S, C), None
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    N = X.shape[0]
    logits = X @ p[pre + "mlp.gate.weight"].T
    probs = logits.softmax(-1)
    # Aux-loss-free balancing: the bias moves the selection only, never the weights.
    scores = probs.detach() if R.bias is None else probs.detach() + R.bias[i]
    top = scores.topk(k + 1 if k < E else k, dim=-1)
    idx = top.indices[:, :k]
    if k < E:
        R.topk_margin = min(R.topk_margin, (top.values[:, k - 1] - top.values[:, k]).min().item())
    if R.bias is not None:
        plain = probs.detach().topk(k, dim=-1).indices
        R.bias_changed += sum(set(a) != set(b) for a, b in zip(idx.tolist(), plain.tolist()))
    w = probs.gather(1, idx)
    if cfg["norm_topk_prob"]:
        w = w / w.sum(-1, keepdim=True)
    keep = torch.ones(N, k, dtype=torch.bool)
    if R.par["capacity_factor"] > 0:
        keep = capacity_keep(idx, w.detach(), R.par["capacity_factor"], R.par["drop_policy"], E, R)
        R.dropped += int((~keep).sum())
    y = torch.zeros_like(X)
    for e in range(E):
        rows, slot = ((idx == e) & keep).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        out = swiglu(X[rows], p, pre + f"mlp.experts.{e}.")
        y = y.index_add(0, rows, out * w[rows, slot][:, None])
    if cfg["shared_expert_intermediate_size"] > 0:
        sg = torch.sigmoid(X @ p[pre + "mlp.shared_expert_gate.weight"].T)
        y = y + sg * swiglu(X, p, pre + "mlp.shared_expert.")
    counts = torch.bincount(idx.flatten(), minlength=E)  # routed slots, before drops
    R.counts[i] = counts.tolist()
    R.kept[i] = torch.bincount(idx[keep], minlength=E).tolist()
    P = probs.mean(0)
    # LBL = E * sum_i f_i P_i, f_i = share of the N*k routed slots times k (sums to k): the
    # reported value uses this micro-batch's counts ...
    lbl = E * ((counts.double() / N) * P).sum()
    # ... and so does the optimized term, unless training.global_batch_lbl: then f_i comes
    # from the counts of the step so far (docs/parallelism.md: micro-batch m uses the counts
    # of micro-batches 1..m of every rank); f is a constant, P_i stays differentiable.
    if R.train["global_batch_lbl"]:
        cum = R.cum_counts.get(i, torch.zeros(E, dtype=torch.int64)) + counts
        R.cum_counts[i] = cum
        f = k * cum.double() / cum.sum()
    else:
        f = counts.double() / N
    lbl_opt = E * (f * P).sum()
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    return h + y.view(B, S, C), (lbl, z, lbl_opt)


def selection_bias(cfg, train, run):
    """model-math.md: bias_i += rate * sign(mean_count - count_i), once per step, from the
    counts that run.json lists per update (layer-major, E per layer). None when off."""
    rate = train["router_bias_update_rate"]
    if rate <= 0 or cfg["num_experts"] == 0:
        return None
    E, L = cfg["num_experts"], cfg["num_hidden_layers"]
    bias = torch.zeros(L, E, dtype=torch.float64)
    for counts in run["bias_rounds"]:
        c = torch.tensor(counts, dtype=torch.float64).view(L, E)
        bias += rate * torch.sign(c.mean(-1, keepdim=True) - c)
    return bias


def forward(cfg, p, ids, R):
    S = ids.shape[1]
    cos, sin, rot = rope_tables(cfg, S)
    x = p["model.embed_tokens.weight"][ids]
    aux, gates = [], []
    for i in range(cfg["num_hidden_layers"]):
        x, gm = attention(cfg, p, i, x, cos, sin, rot)
        if gm is not None:
            gates.append(gm)
        x, a = ffn(cfg, p, i, x, R)
        if a is not None:
            aux.append(a)
    x = rms_norm(x, p["model.norm.weight"], cfg["rms_norm_eps"])
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.T, aux, gates


def main(run_dir):
    cfg, train, par = load_input(f"{run_dir}/input.json")
    run = json.load(open(f"{run_dir}/run.json"))
    p = load_safetensors(f"{run_dir}/model.safetensors")
    gs = load_safetensors(f"{run_dir}/grads.safetensors")
    for t in p.values():
        t.requires_grad_(True)
    ok = True

    def fail(msg):
        nonlocal ok
        print("  " + msg)
        ok = False

    def close(name, a, b, rtol=1e-5, atol=1e-7):
        good = abs(a - b) <= atol + rtol * abs(b)
        print(f"  {name:16s} sluice {a:.9g} torch {b:.9g} {'ok' if good else 'MISMATCH'}")
        if not good:
            fail(f"{name} differs")

    B, S = train["micro_batch_size"], train["seq_len"]
    M = train["global_batch_tokens"] // (B * S)
    if (run["batch"], run["seq"], run["micro_batches"]) != (B, S, M):
        fail(f"run.json has batch {run['batch']} seq {run['seq']} x {run['micro_batches']}, input {B} {S} x {M}")
        return 1
    bias = selection_bias(cfg, train, run)
    if bias is not None:
        for i, b in enumerate(run["router_bias"]):
            if b is not None and (torch.tensor(b) - bias[i]).abs().max() > 1e-6:
                fail(f"selection bias of layer {i}: sluice {b}, torch {bias[i].tolist()}")
    R = Routing(cfg, train, par, bias)
    tok = torch.tensor(run["tokens"]).view(M, B, S + 1)
    E, k = cfg["num_experts"], cfg.get("num_experts_per_tok", 0)
    lbl_coef, z_coef = cfg["router_aux_loss_coef"], cfg["router_z_loss_coef"]
    obj = 0.0  # what sluice differentiates: the step's sum over micro-batches
    reported = 0.0  # the same with the reported (per-micro-batch) LBL
    lbl_term, per_mb_lbl_term = 0.0, 0.0  # the optimized LBL term; the same with per-micro-batch f
    for m in range(M):
        ids, tgt = tok[m, :, :-1], tok[m, :, 1:]
        logits, aux, gates = forward(cfg, p, ids, R)
        ce_sum = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="sum"
        )
        ce = ce_sum / (B * S)
        mb = run["micro"][m]
        tag = f"[{m}] " if M > 1 else ""
        close(tag + "ce", mb["ce"], ce.item())
        obj = obj + ce_sum / train["global_batch_tokens"]
        reported += ce_sum.item() / train["global_batch_tokens"]
        if aux:
            n = len(aux)
            lbl = sum(a[0] for a in aux) / n
            z = sum(a[1] for a in aux) / n
            lbl_opt = sum(a[2] for a in aux) / n
            close(tag + "lbl", mb["lbl"], lbl.item())
            close(tag + "zloss", mb["zloss"], z.item())
            obj = obj + (lbl_coef * lbl_opt / k + z_coef * z) / M
            reported += (lbl_coef * lbl.item() / k + z_coef * z.item()) / M
            lbl_term = lbl_term + lbl_coef * lbl_opt / k / M
            per_mb_lbl_term = per_mb_lbl_term + lbl_coef * lbl / k / M
            for i in R.counts:
                if mb["counts"][i] != R.counts[i]:
                    fail(f"{tag}layer {i} expert counts: sluice {mb['counts'][i]}, torch {R.counts[i]}")
                if mb["kept"][i] != R.kept[i]:
                    fail(f"{tag}layer {i} kept after capacity: sluice {mb['kept'][i]}, torch {R.kept[i]}")
        if gates:
            close(tag + "gate_score", mb["gate_score"], sum(gates) / len(gates), rtol=1e-4)
    close("objective", run["objective"], reported)

    params = list(p.items())

    def tolerance(ref):
        return 1e-4 * ref.abs().max().item() + 1e-6

    # Each feature a variant turns on must change the result, or the variant tests nothing.
    if E:
        print(
            f"  routing: top-k margin {R.topk_margin:.3g}, capacity margin {R.cap_margin:.3g}, "
            f"{R.dropped} slots dropped, {R.bias_changed} selections moved by the bias"
        )
        if min(R.topk_margin, R.cap_margin) < 1e-6:
            print("  warning: a routing decision within 1e-6: float32 may decide it differently")
    if par["capacity_factor"] > 0 and E and R.dropped == 0:
        fail("capacity_factor is set but no slot was dropped: the variant does not test drops")
    if bias is not None and R.bias_changed == 0:
        fail("the selection bias changed no selection: the variant does not test it")
    obj.backward(retain_graph=True)
    if train["global_batch_lbl"] and E:
        # Per-micro-batch LBL would change the gradient by the gradient of the difference of
        # the two LBL terms: it must exceed the tolerance somewhere, or the variant cannot
        # tell the two apart (with one micro-batch they coincide).
        d = torch.autograd.grad(per_mb_lbl_term - lbl_term, [t for _, t in params], allow_unused=True)
        sep, where = 0.0, ""
        for (name, t), g in zip(params, d):
            if g is not None and t.grad is not None:
                r = g.abs().max().item() / tolerance(t.grad)
                if r > sep:
                    sep, where = r, name
        print(f"  per-micro-batch LBL would move the gradient by {sep:.3g} x the tolerance ({where})")
        if sep <= 1.0:
            fail("global-batch and per-micro-batch LBL give gradients within tolerance: the variant does not test it")
    worst = 0.0
    for name, t in params:
        if name not in gs:
            fail(f"gradient of {name} missing from sluice's file")
            continue
        ref = t.grad if t.grad is not None else torch.zeros_like(t)
        err = (gs[name] - ref).abs().max().item()
        scale = ref.abs().max().item()
        tol = tolerance(ref)
        worst = max(worst, err / (scale + 1e-12))
        if err > tol:
            fail(f"gradient {name}: max abs error {err:.3g} > {tol:.3g} (max |g| {scale:.3g})")
    print(f"  {len(p)} gradient tensors compared, worst relative error {worst:.3g}")
    return 0 if ok else 1


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    sys.exit(main(sys.argv[1]))
