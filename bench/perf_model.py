#!/usr/bin/python3
"""bench/perf_model.py - ESTIMATED GPU time per operation of one training step (no measurement).

Usage:
  /usr/bin/python3 bench/perf_model.py [--config configs/qwen-gated-15a2b.json] [--seq S]
        [--batch B] [--precision bf16|fp32] [--layers N] [--accum N ...] [--logits-chunk-bytes B]
        [--update docs/performance.md] [--json]

For one decoder layer of the config's model at micro-batch B x S tokens it lists every
operation the CUDA backend runs (in the order attention/attn_block.c, moe/ffn_block.c,
moe/moe_block.c, moe/token_dispatcher.c, moe/experts.c and model/model.c call them), with
its FLOPs and the bytes it must move to and from HBM at least (compulsory traffic: every
operand read once and every result written once; re-reads that a tile schedule serves from
L2 are not counted), and the time those imply on an H100 SXM and an H200:

  lower bound = max(FLOPs / peak, bytes / HBM bandwidth)      datasheet peaks
  practical   = max(FLOPs / (eff * peak), bytes / (0.8 * HBM bandwidth), launches * 2 us)

GEMMs (cuBLAS, bf16 in, fp32 accumulate) use the dense bf16 tensor-core peak, eff 0.75.
The gated attention of issue 9 is a SIMT kernel (the tensor-core version is a later issue):
its bound is the fp32 CUDA-core peak, and its practical column assumes half of that
(exponentials, shuffles and shared-memory traffic compete with the FMAs). Elementwise and
reduction kernels are bandwidth-bound. The practical column adds nothing for overlap
between kernels (one stream) and charges at least 2 us per kernel launch.

Everything here is a model with stated assumptions, not a measurement: --update rewrites
the generated part of docs/performance.md (between its perf_model markers), so that the
numbers there are computed, not typed. gpu_train_bench (bench/gpu_train_bench.c) measures.
The memory estimate and the FLOP convention mirror model/counts.c (which gpu_train_bench.c
and `sluice plan` call; their Python port is bench/model_counts.py, re-exported here);
tests/test_perf_model_counts.sh checks the activation count against `sluice plan --json` for
every shipped config, so a change to one without the other fails.
"""
import argparse
import json
import math
import os
import sys

from model_counts import (  # noqa: F401  (the counts, re-exported: callers import perf_model)
    GIB, MODEL_LOGITS_CHUNK_BYTES, activation_pieces, default_layers, flops_per_token,
    gate_width, is_moe, layer_activation_bytes, layer_params, logits_chunk_rows, mem_estimate,
    model_params, q_width, state_bytes_per_param, usable_bytes, workspace_bytes)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Datasheet figures (dense, without sparsity). H200 has the H100 SXM's compute (same GH100
# die and clocks) and faster, larger HBM3e.
DEVICES = {
    "H100 SXM": {"bf16": 989e12, "fp32": 67e12, "hbm": 3.35e12, "mem_bytes": 80e9},
    "H200": {"bf16": 989e12, "fp32": 67e12, "hbm": 4.8e12, "mem_bytes": 139 * GIB},
}
GEMM_EFF = 0.75  # practical share of the bf16 peak for cuBLAS GEMMs
HBM_EFF = 0.80  # practical share of HBM bandwidth for streaming kernels
SIMT_EFF = 0.50  # practical share of the fp32 peak for the SIMT attention kernel
LAUNCH_S = 2e-6  # practical floor per kernel launch (launch + tail of a small grid)
SYNC_S = 10e-6  # practical cost of one host read in a step: drain the queue, relaunch
# The tensor-core attention of a later issue, for comparison: FlashAttention-2 reaches about
# 35% of an H100's bf16 peak (public figure, ../shared/reference/gpu-facts.md).
TC_ATTN_EFF = 0.35
# An 8192^3 bf16 GEMM on an H200 in practice (public figure, gpu-facts.md), for the target.
PUBLIC_GEMM_PEAK = (770e12, 800e12)

# ---- the operations ---------------------------------------------------------------------


class Op:
    def __init__(self, name, phase, kind, flops, nbytes, launches=1, syncs=0):
        self.name, self.phase, self.kind = name, phase, kind
        self.flops, self.bytes, self.launches, self.syncs = float(flops), float(nbytes), launches, syncs

    def time(self, dev, practical, attn="simt"):
        """attn: "simt" (this issue's kernel) or "tc" (a tensor-core attention kernel)."""
        d = DEVICES[dev]
        if self.kind == "gemm":
            tc = self.flops / (d["bf16"] * (GEMM_EFF if practical else 1.0))
        elif self.kind == "gemm32":  # fp32 cuBLAS GEMM without TF32: CUDA cores
            tc = self.flops / (d["fp32"] * (GEMM_EFF if practical else 1.0))
        elif self.kind == "simt" and attn == "tc":
            tc = self.flops / (d["bf16"] * (TC_ATTN_EFF if practical else 1.0))
        elif self.kind == "simt":
            tc = self.flops / (d["fp32"] * (SIMT_EFF if practical else 1.0))
        else:
            tc = 0.0
        tm = self.bytes / (d["hbm"] * (HBM_EFF if practical else 1.0))
        t = max(tc, tm)
        if practical:
            t = max(t, self.launches * LAUNCH_S) + self.syncs * SYNC_S
        return t

    def bound(self, dev):
        d = DEVICES[dev]
        if self.kind == "sync":
            return "host"
        peak = d["bf16"] if self.kind == "gemm" else d["fp32"] if self.kind in ("simt", "gemm32") else 0
        if peak and self.flops / peak >= self.bytes / d["hbm"]:
            return "tensor cores" if self.kind == "gemm" else "fp32 cores"
        return "HBM"


def layer_ops(mc, batch, seq, precision, layer=0):
    """One decoder layer, forward then backward, in the order the model runs them."""
    a = 2 if precision == "bf16" else 4
    f = 4
    T = batch * seq
    h, D = mc["hidden_size"], mc["head_dim"]
    H, KV = mc["num_attention_heads"], mc["num_key_value_heads"]
    hd, kvd, qw, gw = H * D, KV * D, q_width(mc), gate_width(mc)
    ops = []

    def add(*args, **kw):
        ops.append(Op(*args, **kw))

    def gemm(name, phase, m, n, k, a_bytes, b_bytes, c_bytes, c_rw=False):
        # C[m, n] = A[m, k] B[k, n]; element sizes per operand; c_rw: beta = 1 (read C too)
        nb = m * k * a_bytes + k * n * b_bytes + m * n * c_bytes * (2 if c_rw else 1)
        add(name, phase, "gemm", 2.0 * m * n * k, nb)

    def norm_fwd(name, rows, width):
        add(name, "fwd", "mem", 4.0 * rows * width, 2 * rows * width * a + rows * f + width * a)

    def norm_bwd(name, rows, width, residual=False):
        # reads dy, x, w, rstd (and with `residual` the residual path's gradient, added in the
        # same pass: the decoder's norms since 2026-11-27, no axpy after them); writes dx; dw
        # accumulated from per-block partials
        add(name, "bwd", "mem", (7.0 if residual else 6.0) * rows * width,
            (4 if residual else 3) * rows * width * a + rows * f + width * (a + 2 * f), launches=2)

    # ---- attention forward (attention/attn_block.c)
    norm_fwd("input rmsnorm", T, h)
    gemm("q_proj (q and gate)", "fwd", T, qw, h, a, a, a)
    gemm("k_proj", "fwd", T, kvd, h, a, a, a)
    gemm("v_proj", "fwd", T, kvd, h, a, a, a)
    # q/gate split, QK-norm and RoPE in one pass (attention/qk_norm_rope.cu): reads qall and k,
    # writes qn, kn, the gate and the fp32 rstd
    add("qk_norm_rope (split, QK-norm, RoPE)", "fwd", "mem", 10.0 * T * (hd + kvd),
        T * (qw + kvd) * a + T * (hd + kvd + gw) * a + T * (H + KV) * f + T * f + 2 * D * a)
    # causal: QK^T and PV each S*S/2*D multiply-adds per head and sequence
    attn_f = 2.0 * batch * seq * seq * H * D
    add("gated attention fwd (SIMT)", "fwd", "simt", attn_f,
        T * (hd + 2 * kvd + gw) * a + 2 * T * hd * a + T * H * f)
    add("residual copy", "fwd", "mem", 0, 2 * T * h * a)
    gemm("o_proj (+= residual)", "fwd", T, h, hd, a, a, a, c_rw=True)
    # ---- FFN forward (moe/ffn_block.c, moe/moe_block.c, moe/token_dispatcher.c, moe/experts.c)
    norm_fwd("post-attention rmsnorm", T, h)
    if is_moe(mc, layer):
        E, k, Im = mc["num_experts"], mc["num_experts_per_tok"], mc["moe_intermediate_size"]
        S_ = T * k  # routed slots
        # moe/router.c: the router is fp32 throughout; in bf16 training it converts its input
        # and uses the fp32 master weight, so its GEMMs are fp32 (no TF32): CUDA cores
        if a != f:
            add("router input to fp32 (convert)", "fwd", "mem", 0, T * h * (a + f))
        gemm("router GEMM (fp32)", "fwd", T, E, h, f, f, f)
        ops[-1].kind = "gemm32"
        add("router_fwd (softmax, top-k, stats)", "fwd", "mem", 10.0 * T * E,
            2 * T * E * f + T * k * (4 + f) + (E + 1) * f)
        add("moe_sort (histogram, scan, scatter)", "fwd", "mem", 0, T * k * 4 + 2 * S_ * 4 + E * 4,
            launches=3)
        add("expert counts host read", "fwd", "sync", 0, E * 4, launches=0, syncs=1)
        add("gather_rows", "fwd", "mem", 0, 2 * S_ * h * a + S_ * 4)
        # in bf16 the Hopper grouped GEMM writes h = SwiGLU(gu) from its epilogue as well
        # (sl_op_grouped_matmul_swiglu): no pass of its own over gu; in fp32 the activation runs
        # after the GEMM
        fused = a != f
        gemm("grouped GEMM gate_up fwd" + (" (+ SwiGLU)" if fused else ""), "fwd", S_, 2 * Im, h,
             a, a, a)
        ops[-1].bytes = S_ * h * a + E * 2 * Im * h * a + S_ * 2 * Im * a  # every expert's weight
        if fused:
            ops[-1].flops += 4.0 * S_ * Im
            ops[-1].bytes += S_ * Im * a
        else:
            add("swiglu_fwd", "fwd", "mem", 4.0 * S_ * Im, S_ * 3 * Im * a)
        gemm("grouped GEMM down fwd", "fwd", S_, h, Im, a, a, a)
        ops[-1].bytes = S_ * Im * a + E * h * Im * a + S_ * h * a
        # the combine adds the residual stream itself (reads it, writes the layer's output)
        add("moe_combine (+ residual)", "fwd", "mem", 2.0 * S_ * h + T * h,
            S_ * h * a + S_ * (4 + f) + 2 * T * h * a)
        # ---- FFN backward
        add("moe_combine_bwd", "bwd", "mem", 4.0 * S_ * h,
            T * h * a + S_ * h * a + S_ * (4 + f) + S_ * h * a + S_ * f)
        gemm("grouped GEMM down dW", "bwd", h, Im, S_, a, a, f)
        ops[-1].bytes = S_ * h * a + S_ * Im * a + 2 * E * h * Im * f  # fp32 dW read + written
        gemm("grouped GEMM down dX", "bwd", S_, Im, h, a, a, a)
        ops[-1].bytes = S_ * h * a + E * h * Im * a + S_ * Im * a
        add("swiglu_bwd", "bwd", "mem", 10.0 * S_ * Im, S_ * Im * a + S_ * 2 * Im * a + S_ * 2 * Im * a)
        gemm("grouped GEMM gate_up dW", "bwd", 2 * Im, h, S_, a, a, f)
        ops[-1].bytes = S_ * 2 * Im * a + S_ * h * a + 2 * E * 2 * Im * h * f
        gemm("grouped GEMM gate_up dX", "bwd", S_, h, 2 * Im, a, a, a)
        ops[-1].bytes = S_ * 2 * Im * a + E * 2 * Im * h * a + S_ * h * a
        # the permutation's backward writes dxn (its first writer: no zeroing pass before it)
        add("gather_add_rows (permute bwd, writes dxn)", "bwd", "mem", S_ * h,
            S_ * h * a + T * h * a + S_ * 4)
        add("router_bwd", "bwd", "mem", 10.0 * T * E, 3 * T * E * f + T * k * (4 + 2 * f))
        gemm("router GEMM dW (fp32)", "bwd", E, h, T, f, f, f, c_rw=True)
        ops[-1].kind = "gemm32"
        gemm("router GEMM dX (fp32)", "bwd", T, h, E, f, f, f, c_rw=a == f)
        ops[-1].kind = "gemm32"
        if a != f:
            add("router dX into dxn (add)", "bwd", "mem", T * h, T * h * (2 * a + f))
    else:
        I = mc["intermediate_size"]
        gemm("gate_up fwd", "fwd", T, 2 * I, h, a, a, a)
        add("swiglu_fwd", "fwd", "mem", 4.0 * T * I, T * 3 * I * a)
        gemm("down fwd", "fwd", T, h, I, a, a, a)
        add("residual add", "fwd", "mem", T * h, 3 * T * h * a)
        gemm("down dW", "bwd", h, I, T, a, a, f, c_rw=True)
        gemm("down dX", "bwd", T, I, h, a, a, a)
        add("swiglu_bwd", "bwd", "mem", 10.0 * T * I, 5 * T * I * a)
        gemm("gate_up dW", "bwd", 2 * I, h, T, a, a, f, c_rw=True)
        gemm("gate_up dX", "bwd", T, h, 2 * I, a, a, a)
    norm_bwd("post-attention rmsnorm bwd (+ residual)", T, h, residual=True)
    # ---- attention backward
    gemm("o_proj dW", "bwd", h, hd, T, a, a, f, c_rw=True)
    gemm("o_proj dX", "bwd", T, hd, h, a, a, a)
    # recompute QK^T, then dV, dP, dQ, dK: five S*S/2*D products per head (2.5x forward)
    add("gated attention bwd (SIMT)", "bwd", "simt", 2.5 * attn_f,
        T * (hd + 2 * kvd + gw) * a + 2 * T * hd * a + T * H * f + T * (hd + 2 * kvd + gw) * a,
        launches=2)
    # its backward: reads dq, dk, dg and the pre-norm q (in qall) and k, writes dqall and dk_pre;
    # the norm weights' gradients from per-block partials
    add("qk_norm_rope bwd", "bwd", "mem", 12.0 * T * (hd + kvd),
        T * (hd + kvd + gw) * a + T * (hd + kvd) * a + T * (H + KV) * f + T * f
        + T * (qw + kvd) * a + 2 * D * (a + 2 * f), launches=2)
    gemm("q_proj dW", "bwd", qw, h, T, a, a, f, c_rw=True)
    gemm("k_proj dW", "bwd", kvd, h, T, a, a, f, c_rw=True)
    gemm("v_proj dW", "bwd", kvd, h, T, a, a, f, c_rw=True)
    gemm("q_proj dX", "bwd", T, h, qw, a, a, a)
    gemm("k_proj dX (+=)", "bwd", T, h, kvd, a, a, a, c_rw=True)
    gemm("v_proj dX (+=)", "bwd", T, h, kvd, a, a, a, c_rw=True)
    norm_bwd("input rmsnorm bwd (+ residual)", T, h, residual=True)
    return ops


def optimizer_ops(params, label):
    """Once per optimizer step over `params` parameters (trainer/optimizer.c)."""
    # No zeroing pass: each gradient's first writer of the step overwrites it (core/params.h,
    # sl_params_begin_grads).
    return [
        Op("gradient sum of squares (" + label + ")", "opt", "mem", 2.0 * params, 4.0 * params),
        # reads p, g, m, v (fp32); writes p, m, v (fp32) and the bf16 compute copy
        Op("AdamW + bf16 copy (" + label + ")", "opt", "mem", 12.0 * params, 30.0 * params),
    ]


def head_ops(mc, batch, seq, precision, chunk_bytes):
    """Embedding, final norm, LM head and loss (model/model.c), once per micro-batch."""
    a = 2 if precision == "bf16" else 4
    f = 4
    T = batch * seq
    h, V = mc["hidden_size"], mc["vocab_size"]
    rows = logits_chunk_rows(T, V, a, chunk_bytes)
    chunks = math.ceil(T / rows)
    ops = [Op("embedding_fwd", "fwd", "mem", 0, 2 * T * h * a + T * 4),
           Op("final rmsnorm", "fwd", "mem", 4.0 * T * h, 2 * T * h * a + T * f)]
    # per chunk: logits = xf W^T; cross-entropy (gradient in place); dW += dlogits^T xf;
    # dxf = dlogits W. The weight is read by two GEMMs and the fp32 dW read and written, per chunk.
    ops.append(Op("LM head GEMM fwd", "fwd", "gemm", 2.0 * T * h * V,
                  chunks * V * h * a + T * h * a + T * V * a, launches=chunks))
    ops.append(Op("cross-entropy (fused, in place)", "fwd", "mem", 6.0 * T * V,
                  2 * T * V * a + T * (4 + f), launches=chunks))
    ops.append(Op("LM head GEMM dW", "bwd", "gemm", 2.0 * T * h * V,
                  chunks * 2 * V * h * f + T * V * a + T * h * a, launches=chunks))
    ops.append(Op("LM head GEMM dX", "bwd", "gemm", 2.0 * T * h * V,
                  chunks * V * h * a + T * V * a + T * h * a, launches=chunks))
    ops.append(Op("final rmsnorm bwd", "bwd", "mem", 6.0 * T * h, 3 * T * h * a + T * f + h * 3 * f,
                  launches=2))
    ops.append(Op("embedding_bwd", "bwd", "mem", T * h, T * h * a + 2 * T * h * f + T * 4))
    return ops, rows, chunks


# ---- report -----------------------------------------------------------------------------


def fmt_flops(x):
    return "-" if x == 0 else "%.1f G" % (x / 1e9) if x >= 1e8 else "%.2f G" % (x / 1e9)


def fmt_bytes(x):
    return "%.1f MB" % (x / 1e6) if x < 1e9 else "%.2f GB" % (x / 1e9)


def ms(x):
    return "%.3f" % (x * 1e3)


def table(ops, title_total=None):
    devs = list(DEVICES)
    head = ("| op | phase | FLOPs | bytes | bound (H100) | " +
            " | ".join("%s LB ms" % d for d in devs) + " | " +
            " | ".join("%s practical ms" % d for d in devs) + " |")
    lines = [head, "|" + "---|" * (5 + 2 * len(devs))]
    for o in ops:
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            o.name, o.phase, fmt_flops(o.flops), fmt_bytes(o.bytes), o.bound("H100 SXM"),
            " | ".join(ms(o.time(d, False)) for d in devs),
            " | ".join(ms(o.time(d, True)) for d in devs)))
    if title_total:
        lines.append("| **%s** | | %s | %s | | %s | %s |" % (
            title_total, fmt_flops(sum(o.flops for o in ops)), fmt_bytes(sum(o.bytes for o in ops)),
            " | ".join("**%s**" % ms(sum(o.time(d, False) for o in ops)) for d in devs),
            " | ".join("**%s**" % ms(sum(o.time(d, True) for o in ops)) for d in devs)))
    return lines


def analyse(args):
    cfg = json.load(open(args.config))
    mc, tc = cfg["model"], cfg.get("training", {})
    seq = args.seq or tc.get("seq_len", 4096)
    batch = args.batch or tc.get("micro_batch_size", 1)
    prec = args.precision
    T = batch * seq
    lops = layer_ops(mc, batch, seq, prec)
    lp_total, lp_active = layer_params(mc, 0)
    hops, chunk_rows, chunks = head_ops(mc, batch, seq, prec, args.logits_chunk_bytes)
    hops_one, _, _ = head_ops(mc, batch, seq, prec, T * mc["vocab_size"])
    if prec == "fp32":  # fp32 training: every GEMM is an fp32 cuBLAS GEMM without TF32
        for o in lops + hops + hops_one:
            if o.kind == "gemm":
                o.kind = "gemm32"
    V, h = mc["vocab_size"], mc["hidden_size"]
    emb_params = V * h * (1 if mc.get("tie_word_embeddings", False) else 2) + h
    res = {"config": os.path.relpath(args.config, ROOT), "seq": seq, "batch": batch, "tokens": T,
           "precision": prec, "layer_params": lp_total, "layer_active_params": lp_active,
           "logits_chunk_rows": chunk_rows, "logits_chunks": chunks, "devices": {}}
    layers_by_dev = {}
    for d, spec in DEVICES.items():
        n = args.layers or default_layers(mc, T, prec, spec["mem_bytes"])
        layers_by_dev[d] = n
    res["layers_default"] = layers_by_dev
    opt_emb = optimizer_ops(emb_params, "embedding, head")
    for d in DEVICES:
        n = layers_by_dev[d]
        fpt = flops_per_token(mc, n, seq)
        rows = []
        for attn in ("simt", "tc"):
            for head_label, hl in (("model.c chunks", hops), ("one chunk", hops_one)):
                row = {"attention": attn, "head": head_label}
                for practical in (False, True):
                    key = "practical" if practical else "lower_bound"
                    lay = sum(o.time(d, practical, attn) for o in lops)
                    head = sum(o.time(d, practical) for o in hl)
                    opt_all = sum(o.time(d, practical) for o in
                                  optimizer_ops(lp_total * n, "layers") + opt_emb)
                    for acc in args.accum:
                        step = acc * (n * lay + head) + opt_all
                        tps = acc * T / step
                        row["%s_accum%d" % (key, acc)] = {
                            "step_ms": step * 1e3, "tokens_per_s": tps,
                            "model_tflops": fpt * tps / 1e12, "mfu": fpt * tps / DEVICES[d]["bf16"]}
                rows.append(row)
        per = {}
        for practical in (False, True):
            per["practical" if practical else "lower_bound"] = {
                "layer_ms": 1e3 * sum(o.time(d, practical) for o in lops),
                "layer_tc_attention_ms": 1e3 * sum(o.time(d, practical, "tc") for o in lops),
                "head_ms": 1e3 * sum(o.time(d, practical) for o in hops),
                "head_one_chunk_ms": 1e3 * sum(o.time(d, practical) for o in hops_one),
                "optimizer_layer_ms": 1e3 * sum(o.time(d, practical) for o in optimizer_ops(lp_total, "l"))}
        res["devices"][d] = {"layers": n, "flops_per_token": fpt,
                             "mem_estimate_gib": mem_estimate(mc, n, T, prec) / GIB,
                             "usable_gib": usable_bytes(DEVICES[d]["mem_bytes"]) / GIB,
                             "steps": rows, **per}
    return cfg, mc, lops, hops, hops_one, optimizer_ops(lp_total, "one layer"), res


def markdown(args):
    cfg, mc, lops, hops, hops_one, oops, res = analyse(args)
    T, seq, batch = res["tokens"], res["seq"], res["batch"]
    out = []
    p = out.append
    p("<!-- generated by bench/perf_model.py (%s); do not edit by hand -->" % " ".join(
        ["--config", res["config"]] + (["--layers", str(args.layers)] if args.layers else [])))
    p("")
    p("**ESTIMATES, not measurements** (2026-11-23; no GPU was available). Config `%s`, micro-batch "
      "%d x %d = %d tokens, precision %s; one layer: %.1fM parameters (%.1fM active per token)." % (
          res["config"], batch, seq, T, res["precision"], res["layer_params"] / 1e6,
          res["layer_active_params"] / 1e6))
    p("")
    p("Assumptions: H100 SXM and H200 datasheet peaks: dense bf16 989 TFLOP/s, fp32 (CUDA cores) "
      "67 TFLOP/s, HBM 3.35 TB/s (H100) and 4.8 TB/s (H200). LB = max(FLOPs / peak, bytes / HBM). "
      "Practical = max(FLOPs / (%.0f%% of the bf16 peak) for GEMMs or / (%.0f%% of the fp32 peak) "
      "for the SIMT attention, bytes / (%.0f%% of HBM), %.0f us per kernel launch) + %.0f us per "
      "host read. Bytes are compulsory traffic (each operand read once, each result written once); "
      "GEMM weight gradients are fp32 and accumulate (read + write)." % (
          GEMM_EFF * 100, SIMT_EFF * 100, HBM_EFF * 100, LAUNCH_S * 1e6, SYNC_S * 1e6))
    p("")
    p("### One decoder layer, forward and backward")
    p("")
    out.extend(table(lops, "one layer"))
    p("")
    fwd = [o for o in lops if o.phase == "fwd"]
    bwd = [o for o in lops if o.phase == "bwd"]
    for label, group in (("forward", fwd), ("backward", bwd)):
        p("- %s: %s, %s; H100 LB %s ms, practical %s ms; H200 LB %s ms, practical %s ms" % (
            label, fmt_flops(sum(o.flops for o in group)) + "FLOP", fmt_bytes(sum(o.bytes for o in group)),
            ms(sum(o.time("H100 SXM", False) for o in group)), ms(sum(o.time("H100 SXM", True) for o in group)),
            ms(sum(o.time("H200", False) for o in group)), ms(sum(o.time("H200", True) for o in group))))
    kinds = {}
    for o in lops:
        kinds.setdefault(o.kind, []).append(o)
    names = {"gemm": "cuBLAS bf16 GEMMs (dense and grouped)", "gemm32": "cuBLAS fp32 router GEMMs",
             "simt": "SIMT gated attention",
             "mem": "bandwidth-bound kernels", "sync": "host reads"}
    p("")
    p("Share of the layer's practical H100 time by kind:")
    tot = sum(o.time("H100 SXM", True) for o in lops)
    for k, group in sorted(kinds.items(), key=lambda kv: -sum(o.time("H100 SXM", True) for o in kv[1])):
        t = sum(o.time("H100 SXM", True) for o in group)
        p("- %s: %s ms (%.0f%%), %d launches" % (names[k], ms(t), 100 * t / tot, sum(o.launches for o in group)))
    top = sorted(lops, key=lambda o: -o.time("H100 SXM", True))[:6]
    p("")
    p("Largest ops (practical H100): " + "; ".join(
        "%s %s ms (%.0f%%)" % (o.name, ms(o.time("H100 SXM", True)), 100 * o.time("H100 SXM", True) / tot)
        for o in top) + ".")
    p("")
    p("### Once per micro-batch: embedding, LM head and loss (vocabulary %d)" % mc["vocab_size"])
    p("")
    p("model/model.c runs the LM head in chunks of at most %d bytes of logits (SL_LOGITS_CHUNK_BYTES_DEVICE): %d rows, so "
      "%d chunks at %d tokens, and each chunk's two head GEMMs read the whole bf16 head weight and "
      "its dW GEMM reads and writes the whole fp32 head gradient:" % (
          args.logits_chunk_bytes, res["logits_chunk_rows"], res["logits_chunks"], T))
    p("")
    out.extend(table(hops, "head, %d chunks" % res["logits_chunks"]))
    p("")
    p("The same with one chunk of all %d rows (%s of bf16 logits):" % (T, fmt_bytes(T * mc["vocab_size"] * 2)))
    p("")
    out.extend(table(hops_one, "head, one chunk"))
    p("")
    p("### Once per optimizer step, per layer")
    p("")
    out.extend(table(oops, "optimizer, one layer"))
    p("")
    p("### Memory estimate (gpu_train_bench's default layer count)")
    p("")
    prec = res["precision"]
    V, hh = mc["vocab_size"], mc["hidden_size"]
    emb = V * hh * (1 if mc.get("tie_word_embeddings", False) else 2) + hh
    bpp = state_bytes_per_param(prec)
    p("Per parameter %d bytes (%s). Usable = 92%% of the device memory - 2 GiB (CUDA context, "
      "cuBLAS workspaces, allocator slack); the default layer count is the largest that fits, "
      "and gpu_train_bench prints the device memory actually in use after its steps." % (
          bpp, "fp32 master, fp32 gradient, AdamW m and v, bf16 compute copy" if prec == "bf16"
          else "fp32 weight, gradient, AdamW m and v"))
    p("")
    p("| part | size |")
    p("|---|---|")
    p("| parameters + gradients + AdamW state, one layer (%.1fM parameters) | %.2f GiB |" % (
        res["layer_params"] / 1e6, res["layer_params"] * bpp / GIB))
    p("| activations and saved tensors, one layer (%d tokens) | %.2f GiB |" % (
        T, layer_activation_bytes(mc, 0, T, prec) / GIB))
    p("| embedding + LM head + final norm state (%.1fM parameters) | %.2f GiB |" % (emb / 1e6, emb * bpp / GIB))
    p("| shared workspaces (attention/FFN gradients, one logits chunk, ids) | %.2f GiB |" % (
        workspace_bytes(mc, T, prec) / GIB))
    for d, r in res["devices"].items():
        p("| **%s**: %d layers | **%.1f GiB** of %.1f usable |" % (d, r["layers"], r["mem_estimate_gib"], r["usable_gib"]))
    p("")
    p("### Implied step time, tokens/s and MFU")
    p("")
    p("For the model gpu_train_bench trains by default on each GPU: the layer count from its "
      "memory estimate (below), the embedding and LM head, the optimizer over every parameter "
      "once per optimizer step. `accum` = micro-batches per optimizer step (`--accum`). "
      "MFU = model FLOPs per second (model/counts.h convention: 6 x active matmul parameters + "
      "6 x layers x heads x head_dim x seq per token) / 989 TFLOP/s. Attention `SIMT` is this "
      "issue's kernel (columns as in the layer table); `tensor cores` is a tensor-core "
      "attention at %.0f%% of the bf16 peak in the practical column (FlashAttention-2 class), "
      "for comparison only." % (TC_ATTN_EFF * 100))
    p("")
    accs = args.accum
    hdr = "| GPU | layers | memory estimate | attention | LM head | LB accum %d: tok/s, MFU |" % accs[0]
    hdr += "".join(" practical accum %d: ms/step, tok/s, MFU |" % a_ for a_ in accs)
    p(hdr)
    p("|" + "---|" * (6 + len(accs)))
    for d, r in res["devices"].items():
        for row in r["steps"]:
            lb = row["lower_bound_accum%d" % accs[0]]
            line = "| %s | %d | %.1f of %.1f GiB usable | %s | %s | %.0f, %.1f%% |" % (
                d, r["layers"], r["mem_estimate_gib"], r["usable_gib"],
                "SIMT" if row["attention"] == "simt" else "tensor cores", row["head"],
                lb["tokens_per_s"], 100 * lb["mfu"])
            for a_ in accs:
                pr = row["practical_accum%d" % a_]
                line += " %.1f, %.0f, %.1f%% |" % (pr["step_ms"], pr["tokens_per_s"], 100 * pr["mfu"])
            p(line)
    p("")
    lo, hi = PUBLIC_GEMM_PEAK
    p("The issue's target is 35%% of a *measured* cuBLAS 8192^3 bf16 peak. With the public figure "
      "of %.0f-%.0f TFLOP/s for that GEMM on an H200 (not measured here), 35%% of it is "
      "%.0f-%.0f model TFLOP/s, i.e. %.1f-%.1f%% MFU against the 989 TFLOP/s datasheet peak." % (
          lo / 1e12, hi / 1e12, 0.35 * lo / 1e12, 0.35 * hi / 1e12, 35 * lo / 989e12, 35 * hi / 989e12))
    p("")
    for d, r in res["devices"].items():
        pr = r["practical"]
        p("- %s (practical): one layer forward+backward %s ms with the SIMT attention, %s ms with "
          "tensor-core attention; optimizer %s ms per layer (%.1fM parameters, once per step); "
          "head and loss %s ms per micro-batch with model.c's %d-row chunks, %s ms with one chunk; "
          "FLOPs per token %.3g." % (
              d, ms(pr["layer_ms"] / 1e3), ms(pr["layer_tc_attention_ms"] / 1e3),
              ms(pr["optimizer_layer_ms"] / 1e3), res["layer_params"] / 1e6, ms(pr["head_ms"] / 1e3),
              res["logits_chunk_rows"], ms(pr["head_one_chunk_ms"] / 1e3), r["flops_per_token"]))
    return "\n".join(out) + "\n", res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "qwen-gated-15a2b.json"))
    ap.add_argument("--seq", type=int, default=0, help="default: training.seq_len")
    ap.add_argument("--batch", type=int, default=0, help="default: training.micro_batch_size")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--layers", type=int, default=0,
                    help="layers of the benchmark model (default: gpu_train_bench's choice per GPU)")
    ap.add_argument("--accum", type=int, nargs="+", default=[1, 16],
                    help="micro-batches per optimizer step to tabulate")
    ap.add_argument("--logits-chunk-bytes", type=int, default=MODEL_LOGITS_CHUNK_BYTES,
                    help="bytes of one logits chunk at most (model/counts.h: 2^31 on a device)")
    ap.add_argument("--update", metavar="MD",
                    help="replace the text between the perf_model markers of this file")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args()
    text, res = markdown(args)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    if not args.update:
        sys.stdout.write(text)
        return
    begin, end = "<!-- perf_model:begin -->", "<!-- perf_model:end -->"
    doc = open(args.update).read()
    i, j = doc.find(begin), doc.find(end)
    if i < 0 or j < i:
        sys.exit("%s: no %s ... %s markers" % (args.update, begin, end))
    doc = doc[: i + len(begin)] + "\n" + text + doc[j:]
    open(args.update, "w").write(doc)
    print("updated", args.update)


if __name__ == "__main__":
    main()
