"""bench/model_counts.py - model/counts.c in Python: parameters, FLOPs per token, and the
memory a training run takes (state, each layer's activations, the shared workspaces), for
bench/perf_model.py and the PyTorch benchmarks (through perf_model, which re-exports these).
tests/test_perf_model_counts.sh compares the activation count with `sluice plan --json` for
every shipped config, so a change to one without the other fails.
"""

GIB = float(1 << 30)

# model/counts.h: bytes of one logits chunk on a device backend (SL_LOGITS_CHUNK_BYTES_DEVICE)
MODEL_LOGITS_CHUNK_BYTES = 1 << 31


def logits_chunk_rows(tokens, vocab, elem_bytes, chunk_bytes=MODEL_LOGITS_CHUNK_BYTES):
    """model/counts.c sl_logits_chunk_rows: the fewest chunks within the bound, of equal rows."""
    most = max(1, (chunk_bytes // max(elem_bytes, 1)) // max(vocab, 1))
    chunks = -(-tokens // most)
    return max(1, -(-tokens // chunks))


# ---- counts (mirror model/counts.c) -----------------------------------------------------


def q_width(mc):
    hd = mc["num_attention_heads"] * mc["head_dim"]
    gate = mc.get("attn_output_gate", "elementwise")
    return {"elementwise": 2 * hd, "headwise": hd + mc["num_attention_heads"]}.get(gate, hd)


def gate_width(mc):
    hd = mc["num_attention_heads"] * mc["head_dim"]
    gate = mc.get("attn_output_gate", "elementwise")
    return {"elementwise": hd, "headwise": mc["num_attention_heads"]}.get(gate, 0)


def is_moe(mc, layer):
    return mc.get("num_experts", 0) > 0 and layer not in mc.get("mlp_only_layers", [])


def layer_params(mc, layer):
    """(total, active per token) parameters of decoder layer `layer`."""
    h, D = mc["hidden_size"], mc["head_dim"]
    H, KV = mc["num_attention_heads"], mc["num_key_value_heads"]
    attn = h * q_width(mc) + 2 * h * KV * D + H * D * h
    norms = 2 * h + 2 * D
    if is_moe(mc, layer):
        expert = 3 * h * mc["moe_intermediate_size"]
        shared = 0
        if mc.get("shared_expert_intermediate_size", 0) > 0:
            shared = 3 * h * mc["shared_expert_intermediate_size"] + h
        router = h * mc["num_experts"]
        return (attn + norms + router + mc["num_experts"] * expert + shared,
                attn + norms + router + mc["num_experts_per_tok"] * expert + shared)
    dense = 3 * h * mc["intermediate_size"]
    return attn + norms + dense, attn + norms + dense


def model_params(mc, layers):
    V, h = mc["vocab_size"], mc["hidden_size"]
    head = 0 if mc.get("tie_word_embeddings", False) else V * h
    total = V * h + head + h
    for l in range(layers):
        total += layer_params(mc, l)[0]
    return total


def flops_per_token(mc, layers, seq):
    """model/counts.h: 6 * N_mm + 6 * L * H * D * S (N_mm: active matmul parameters incl. the
    LM head, without the embedding lookup and the norms)."""
    h, D, H = mc["hidden_size"], mc["head_dim"], mc["num_attention_heads"]
    mm = mc["vocab_size"] * h
    for l in range(layers):
        mm += layer_params(mc, l)[1] - (2 * h + 2 * D)
    return 6.0 * mm + 6.0 * layers * H * D * seq


# ---- memory estimate (gpu_train_bench.c: state + model/counts.c's activation count) -----


def state_bytes_per_param(precision):
    # fp32 master + fp32 gradient + AdamW m, v (+ the bf16 compute copy in bf16 mode)
    return 18 if precision == "bf16" else 16


def activation_pieces(mc, a):
    """Per-token bytes of one layer's activation sets, memory mode none, one GPU (mirrors
    `pieces` in model/counts.c: tests/test_perf_model_counts.sh compares the totals with
    `sluice plan --json`)."""
    h, D = mc["hidden_size"], mc["head_dim"]
    H, KV = mc["num_attention_heads"], mc["num_key_value_heads"]
    hd, kvd, wq = H * D, KV * D, q_width(mc)
    k, E = mc.get("num_experts_per_tok", 0), mc.get("num_experts", 0)
    residual = 2 * h * a  # x[l], h[l]
    # xn, qall, qn, k, kn, v, g; fp32 rstd, q_rstd, k_rstd
    attn_set = (h + wq + hd + 3 * kvd + (wq - hd)) * a + (1 + H + KV) * 4
    kernel_out = 2 * hd * a + H * 4  # y, o; fp32 lse
    ffn = 2 * h * a + 4  # xn, y, rstd
    # the MoE block has no y: its combine writes the layer's output (moe/ffn_block.c)
    moe = ffn - h * a + (3 * E + 2 * k) * 4 + 3 * k * 4  # router fp32; int32 indices
    if a != 4:
        moe += 2 * h * 4  # the router's fp32 copies of its input and input gradient
    moe += 4 * k * h * a + k * 6 * mc.get("moe_intermediate_size", 0) * a  # xs..dys; experts
    si = mc.get("shared_expert_intermediate_size", 0)
    if si > 0:  # its MLP, output, gated output and gate logit, with their gradients
        moe += (6 * si + 3 * h + 2) * a
    dense = ffn + 6 * mc.get("intermediate_size", 0) * a
    return residual + attn_set + kernel_out, moe, dense


def layer_activation_bytes(mc, layer, tokens, precision):
    """What layer `layer` keeps until its backward for a micro-batch of `tokens`."""
    a = 2 if precision == "bf16" else 4
    attn, moe, dense = activation_pieces(mc, a)
    return tokens * (attn + (moe if is_moe(mc, layer) else dense))


def workspace_bytes(mc, tokens, precision):
    """Shared across layers: the last layer's output, the backward's gradient buffers, the
    final norm, ids/targets/positions, one logits chunk (model/counts.c)."""
    a = 2 if precision == "bf16" else 4
    h, D = mc["hidden_size"], mc["head_dim"]
    hd, kvd = mc["num_attention_heads"] * D, mc["num_key_value_heads"] * D
    ws = (2 * hd + 3 * kvd + 2 * q_width(mc) - hd + h) * a  # attention gradients
    ws += h * a + 4 * h * a + 4 + 3 * 4 + 4  # FFN dxn; dx, dh, xf, dxf; xf_rstd; ids...; losses
    rows = logits_chunk_rows(tokens, mc["vocab_size"], a)
    return tokens * (ws + h * a) + rows * mc["vocab_size"] * a  # + x[L]


def mem_estimate(mc, layers, tokens, precision):
    sub = dict(mc, num_hidden_layers=layers)
    state = model_params(sub, layers) * state_bytes_per_param(precision)
    acts = sum(layer_activation_bytes(mc, l, tokens, precision) for l in range(layers))
    return state + acts + workspace_bytes(mc, tokens, precision)


def usable_bytes(total):
    # CUDA context, cuBLAS workspaces and allocator slack (no caching allocator yet)
    return 0.92 * total - 2 * GIB


def default_layers(mc, tokens, precision, total_bytes):
    best = 1
    for n in range(1, mc["num_hidden_layers"] + 1):
        if mem_estimate(mc, n, tokens, precision) <= usable_bytes(total_bytes):
            best = n
    return best
