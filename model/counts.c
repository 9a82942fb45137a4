/* model/counts.c - parameter and FLOP counts (formulas in model/counts.h). */
#include "model/counts.h"

#include <stdbool.h>

#include "core/ops.h" /* sl_qgate_width */

/* Matmul parameters of one decoder layer, shared by the parameter, FLOP and recomputation
 * counts. */
typedef struct {
    int64_t attn_mm;    /* q (with the gate), k, v, o */
    int64_t qkv_mm;     /* q (with the gate), k, v: what `attention` recomputation reruns */
    int64_t ffn_mm_all; /* router + all experts + shared expert, or the dense FFN */
    int64_t ffn_mm_act; /* the same with k experts */
    int64_t experts;    /* the routed experts alone (what expert parallelism splits) */
} layer_counts;

static layer_counts layer_count(const sl_model_config *m, int l) {
    const int64_t h = m->hidden_size, D = m->head_dim;
    const int64_t H = m->num_attention_heads, KV = m->num_key_value_heads;
    layer_counts c = {0, 0, 0, 0, 0};
    c.qkv_mm = h * sl_qgate_width(m->attn_output_gate, (int)H, (int)D) + 2 * h * KV * D;
    c.attn_mm = c.qkv_mm + H * D * h;
    if (sl_layer_is_moe(m, l)) {
        const int64_t expert = 3 * h * m->moe_intermediate_size;
        int64_t shared = 0;
        if (m->shared_expert_intermediate_size > 0)
            shared = 3 * h * m->shared_expert_intermediate_size + h;
        const int64_t router = h * m->num_experts;
        c.experts = m->num_experts * expert;
        c.ffn_mm_all = router + c.experts + shared;
        c.ffn_mm_act = router + m->num_experts_per_tok * expert + shared;
    } else {
        c.ffn_mm_all = c.ffn_mm_act = 3 * h * m->intermediate_size;
    }
    return c;
}

/* The layers the model builds (at most SL_MAX_LAYERS). */
static int layer_total(const sl_model_config *m) {
    return m->num_hidden_layers < SL_MAX_LAYERS ? m->num_hidden_layers : SL_MAX_LAYERS;
}

/* Per-model pieces shared by the parameter and FLOP counts. */
typedef struct {
    int64_t embed;      /* V*h */
    int64_t lm_head;    /* V*h: the output matmul, whether or not tied */
    int64_t norms;      /* every norm weight */
    int64_t attn_mm;    /* q/k/v/o per layer, summed over layers */
    int64_t ffn_mm_all; /* router + all experts + shared expert + dense FFNs */
    int64_t ffn_mm_act; /* the same with k experts per MoE layer */
    int64_t experts;    /* routed experts */
} counts;

static int64_t q_width(const sl_model_config *m) {
    return sl_qgate_width(m->attn_output_gate, m->num_attention_heads, m->head_dim);
}

static counts count(const sl_model_config *m) {
    counts c = {0, 0, 0, 0, 0, 0, 0};
    const int64_t h = m->hidden_size, D = m->head_dim;
    c.embed = (int64_t)m->vocab_size * h;
    c.lm_head = (int64_t)m->vocab_size * h;
    c.norms = h; /* final norm */
    for (int l = 0; l < layer_total(m); l++) {
        const layer_counts lc = layer_count(m, l);
        c.norms += 2 * h + 2 * D;
        c.attn_mm += lc.attn_mm;
        c.ffn_mm_all += lc.ffn_mm_all;
        c.ffn_mm_act += lc.ffn_mm_act;
        c.experts += lc.experts;
    }
    return c;
}

void sl_model_param_count(const sl_model_config *m, int64_t *total, int64_t *active_per_token) {
    counts c = count(m);
    int64_t head = m->tie_word_embeddings ? 0 : c.lm_head;
    if (total) *total = c.embed + head + c.norms + c.attn_mm + c.ffn_mm_all;
    if (active_per_token) *active_per_token = c.embed + head + c.norms + c.attn_mm + c.ffn_mm_act;
}

double sl_model_flops_per_token(const sl_model_config *m, int seq_len) {
    counts c = count(m);
    double mm = (double)(c.attn_mm + c.ffn_mm_act + c.lm_head);
    double attn =
        6.0 * m->num_hidden_layers * (double)m->num_attention_heads * m->head_dim * (double)seq_len;
    return 6.0 * mm + attn;
}

int64_t sl_model_expert_param_count(const sl_model_config *m) {
    return count(m).experts;
}

/* Per-token sizes of the pieces of one layer's activations (model/counts.h), in bytes; with
 * train false, a forward-only model's (no backward buffers). */
typedef struct {
    double residual, attn_set, kernel_out, moe, dense;
} layer_pieces;

static layer_pieces pieces(const sl_model_config *m, int a, int ep, bool train) {
    const double h = m->hidden_size, H = m->num_attention_heads, KV = m->num_key_value_heads;
    const double hd = H * m->head_dim, kvd = KV * m->head_dim, wq = (double)q_width(m);
    const double k = m->num_experts_per_tok, E = m->num_experts;
    layer_pieces p;
    p.residual = 2 * h * a;
    p.attn_set = (h + wq + hd + 3 * kvd + (wq - hd)) * a + (1 + H + KV) * 4.0;
    p.kernel_out = 2 * hd * a + H * 4.0;
    const double ffn = 2 * h * a + 4.0; /* xn, y, rstd */
    /* a SwiGLU's gu and h (3 I), and their gradients (3 I more) to train */
    const double mlp = train ? 6.0 : 3.0;
    /* the MoE block has no y: its combine writes the layer's output (moe/ffn_block.c); the
     * router's fp32 logits, probs and topk_w (with dlogits and dtopk_w to train), the int32
     * topk_idx, sorted_token and slot_pos */
    double moe = ffn - h * a + (train ? 3 * E + 2 * k : 2 * E + k) * 4.0 + 3 * k * 4.0;
    if (a != 4) moe += (train ? 2 : 1) * h * 4.0; /* the router's fp32 input (and gradient) */
    /* xs, ys (dxs, dys to train), with ep > 1 as many received */
    const double rows = (ep > 1 ? 2 : 1) * (train ? 4 : 2) * k;
    moe += rows * h * a + k * mlp * m->moe_intermediate_size * a;
    /* the shared expert's MLP, its output, gated output and gate logit (the output's and the
     * logit's gradients to train) */
    if (m->shared_expert_intermediate_size > 0)
        moe += (mlp * m->shared_expert_intermediate_size + (train ? 3 * h + 2 : 2 * h + 1)) * a;
    p.moe = moe;
    p.dense = ffn + mlp * m->intermediate_size * a;
    return p;
}

/* Per token: the set of each block kind the layers share (layer, forward-only): the attention
 * set, its kernel outputs, and the FFN set of each kind the model has. */
static double shared_blocks(const sl_model_config *m, const layer_pieces *p) {
    bool any_moe = false, any_dense = false;
    for (int l = 0; l < layer_total(m); l++) {
        if (sl_layer_is_moe(m, l))
            any_moe = true;
        else
            any_dense = true;
    }
    return p->attn_set + p->kernel_out + (any_moe ? p->moe : 0) + (any_dense ? p->dense : 0);
}

/* Per token, every mode: the final norm's fp32 rstd; int32 ids, targets, positions; fp32
 * losses. */
#define TOKEN_BOOKKEEPING (4.0 + 3 * 4.0 + 4.0)

/* SL_MEMORY_FORWARD_ONLY (model/model_build.c): two residual buffers that alternate, one h,
 * one set of each block kind that every layer shares; the final norm's xf and rstd, ids,
 * targets, positions, losses and one logits chunk; no backward buffers. */
static void forward_only_bytes(const sl_model_config *m, int64_t tokens, int a, int ep, bool device,
                               sl_activation_bytes *out) {
    const layer_pieces p = pieces(m, a, ep, false);
    const double t = (double)tokens, h = m->hidden_size;
    const int64_t rows = sl_logits_chunk_rows(tokens, m->vocab_size, a, device);
    out->per_layer_max = 0;
    out->layers = 0;
    out->shared = (3 * h * a + shared_blocks(m, &p)) * t;
    out->workspace = (h * a + TOKEN_BOOKKEEPING) * t + (double)rows * m->vocab_size * a;
    out->total = out->shared + out->workspace;
}

void sl_model_activation_bytes(const sl_model_config *m, sl_memory_mode mode, int64_t tokens,
                               int act_bytes, int ep, bool device, sl_activation_bytes *out) {
    if (mode == SL_MEMORY_FORWARD_ONLY) {
        forward_only_bytes(m, tokens, act_bytes, ep, device, out);
        return;
    }
    const layer_pieces p = pieces(m, act_bytes, ep, true);
    const double t = (double)tokens, a = act_bytes, h = m->hidden_size;
    double layers = 0, max = 0;
    for (int l = 0; l < layer_total(m); l++) {
        const double ffn = sl_layer_is_moe(m, l) ? p.moe : p.dense;
        double own = 0;
        if (mode == SL_MEMORY_LAYER)
            own = h * a;
        else if (mode == SL_MEMORY_ATTENTION)
            own = p.residual + p.kernel_out + ffn;
        else
            own = p.residual + p.attn_set + p.kernel_out + ffn;
        layers += own * t;
        if (own * t > max) max = own * t;
    }
    double shared = h * a * t; /* x[L], the last layer's output */
    if (mode == SL_MEMORY_ATTENTION) shared += p.attn_set * t;
    if (mode == SL_MEMORY_LAYER) shared += (h * a + shared_blocks(m, &p)) * t;
    const double hd = (double)m->num_attention_heads * m->head_dim;
    const double kvd = (double)m->num_key_value_heads * m->head_dim;
    const double ws = (2 * hd + 3 * kvd + 2.0 * q_width(m) - hd + h) * a /* attention grads */
                      + h * a                                            /* FFN dxn */
                      + 4 * h * a                                        /* dx, dh, xf, dxf */
                      + TOKEN_BOOKKEEPING;
    const int64_t rows = sl_logits_chunk_rows(tokens, m->vocab_size, act_bytes, device);
    out->per_layer_max = max;
    out->layers = layers;
    out->shared = shared;
    out->workspace = ws * t + (double)rows * m->vocab_size * a;
    out->total = out->layers + out->shared + out->workspace;
}

int64_t sl_logits_chunk_rows(int64_t tokens, int64_t vocab, int elem_bytes, bool device) {
    const int64_t bytes = device ? SL_LOGITS_CHUNK_BYTES_DEVICE : SL_LOGITS_CHUNK_BYTES_HOST;
    const int64_t bound = bytes / (elem_bytes > 0 ? elem_bytes : 1);
    int64_t most = bound / (vocab > 0 ? vocab : 1);
    if (most < 1) most = 1;
    if (tokens < 1) return 1;
    const int64_t chunks = (tokens + most - 1) / most;
    return (tokens + chunks - 1) / chunks;
}

double sl_model_deferred_wgrad_bytes(const sl_model_config *m, int64_t tokens, int act_bytes,
                                     bool by_tokens) {
    const double k = m->num_experts_per_tok, h = m->hidden_size;
    const double swiglu = k * 3.0 * m->moe_intermediate_size * act_bytes; /* h, dgu */
    const double per_token =
        by_tokens ? 2.0 * h * act_bytes + k * 12.0 + swiglu : k * 2.0 * h * act_bytes + swiglu;
    double bytes = 0;
    int moe = 0;
    for (int l = 0; l < layer_total(m); l++)
        if (sl_layer_is_moe(m, l)) bytes += per_token * (double)tokens, moe++;
    if (by_tokens && moe > 0) bytes += k * 2.0 * h * act_bytes * (double)tokens; /* regathered */
    return bytes;
}

double sl_model_recompute_flops_per_token(const sl_model_config *m, sl_memory_mode mode,
                                          int seq_len) {
    const double HD = (double)m->num_attention_heads * m->head_dim;
    double f = 0;
    for (int l = 0; l + 1 < layer_total(m); l++) {
        const layer_counts lc = layer_count(m, l);
        if (mode == SL_MEMORY_ATTENTION) f += 2.0 * (double)lc.qkv_mm;
        if (mode == SL_MEMORY_LAYER)
            f += 2.0 * (double)(lc.attn_mm + lc.ffn_mm_act) + 2 * HD * (double)seq_len;
    }
    return f;
}
