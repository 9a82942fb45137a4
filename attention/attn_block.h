/*
 * attention/attn_block.h - the gated-attention half of a decoder layer:
 *
 *     out = x + o_proj( gated_attn( RoPE(q_norm(q)), RoPE(k_norm(k)), v, gate ) )
 *     with q, gate = split(q_proj(X)), k = k_proj(X), v = v_proj(X), X = input_layernorm(x)
 *
 * The block owns its parameters (declared in sl_params) and the activations its backward
 * needs, or borrows them from another layer's block in the memory modes that share one set
 * (sl_attn_block_share, model.h); temporaries of the backward live in a workspace shared by
 * all layers.
 */
#ifndef SL_ATTN_BLOCK_H
#define SL_ATTN_BLOCK_H

#include "core/ops.h"
#include "core/params.h"

/* The block's shape and initialization (model/model.c fills it from the model config). */
typedef struct {
    int hidden, heads, kv_heads, head_dim;
    sl_gate_mode gate;
    float eps;      /* RMSNorm epsilon of input_layernorm, q_norm and k_norm */
    float init_std; /* std of the projections' initial values */
    sl_dtype act;   /* activations' dtype: the compute dtype (docs/cuda.md, "Precision") */
} sl_attn_config;

/* Per-batch inputs shared by every layer: shape, positions and the RoPE table. */
typedef struct {
    int batch, seq;            /* tokens are [batch, seq], T = batch * seq */
    const sl_tensor *pos;      /* [T] i32 position of each token */
    const sl_tensor *seg;      /* [T] i32 document starts (sl_op_gated_attn_fwd), NULL: causal */
    const sl_tensor *inv_freq; /* [rot / 2] f32 */
    float mscale;              /* YaRN attention scaling of cos/sin (1 without YaRN) */
} sl_attn_inputs;

typedef struct {
    sl_param *norm, *q_proj, *k_proj, *v_proj, *o_proj, *q_norm, *k_norm;
    sl_attn_config cfg;
    /* saved activations */
    sl_tensor *xn, *rstd;           /* [T, C], [T] */
    sl_tensor *qall;                /* [T, Wq] q_proj output (holds the pre-norm q) */
    sl_tensor *q_rstd, *qn;         /* q's QK-norm rstd, normed + rotated q */
    sl_tensor *k, *k_rstd, *kn, *v; /* pre-norm k, its rstd, normed + rotated k; v */
    sl_tensor *g;                   /* gate logits [T, H, D or 1] (NULL without a gate) */
    sl_tensor *y, *o, *lse;         /* gated output, pre-gate output, log-sum-exp */
    /* [T, heads * D] views of k, v, y for the projections' GEMMs */
    sl_tensor *k2, *v2, *y2;
    /* Sharing (sl_attn_block_share): the activations belong to another layer's block, but
     * for y, o and lse (and y2) when own_out. */
    bool borrowed, own_out;
} sl_attn_block;

/* Backward temporaries, sized for the largest layer; shared by all layers. */
typedef struct {
    sl_tensor *dy, *dq, *dk, *dv, *dg, *dk_pre, *dqall, *dxn;
    sl_tensor *dy2, *dk_pre2, *dv2; /* [T, heads * D] views */
} sl_attn_workspace;

/* Declares the parameters of decoder layer `layer` (Hugging Face names model.layers.N.*). */
void sl_attn_block_declare(sl_attn_block *b, const sl_attn_config *c, int layer, sl_params *ps);
/* Allocates b's activations (normed input, q/k/v/gate, kernel outputs, the log-sum-exp) for
 * `tokens` tokens per micro-batch on be. */
void sl_attn_block_alloc(sl_attn_block *b, sl_backend *be, int64_t tokens);
/* Makes b compute in owner's activations (an allocated block of the same shape that never
 * runs at the same time as b): the layers of a recomputing or forward-only model share one
 * set (model.h, sl_memory_mode). keep_kernel_out: b keeps its own y, o and lse, the outputs
 * of the attention kernel, so that its backward needs only sl_attn_block_recompute_inputs
 * (O(T)) and never reruns the O(T^2) kernel. */
void sl_attn_block_share(sl_attn_block *b, const sl_attn_block *owner, sl_backend *be,
                         int64_t tokens, bool keep_kernel_out);
/* Allocates the backward's gradients, which the layers share (one backward runs at a time),
 * for `tokens` tokens of attention shape c. */
void sl_attn_workspace_alloc(sl_attn_workspace *ws, const sl_attn_config *c, sl_backend *be,
                             int64_t tokens);

/* out = x + attention(x). */
void sl_attn_block_forward(sl_attn_block *b, const sl_attn_inputs *in, const sl_tensor *x,
                           sl_tensor *out);
/* Decoding (model/decode.c): out = x + attention(x) for in->batch sequences of in->seq new
 * tokens each, at positions in->pos = start[b] + i; their keys and values go into the caches
 * kc, vc [batch, L, KV, D] (sl_op_kv_cache_write) and the queries attend to everything cached
 * before them (sl_op_gated_attn_decode). in->seg is ignored: a cache holds one document. */
void sl_attn_block_decode(sl_attn_block *b, const sl_attn_inputs *in, sl_tensor *kc, sl_tensor *vc,
                          const sl_tensor *start, const sl_tensor *x, sl_tensor *out);
/* Recomputes from x what the backward reads besides the kernel's outputs y, o and lse: the
 * input norm, the projections, the gate split, QK-norm and RoPE, bitwise as the forward
 * wrote them (the same ops on the same inputs). */
void sl_attn_block_recompute_inputs(sl_attn_block *b, const sl_attn_inputs *in, const sl_tensor *x);
/* Given dout = dL/dout, writes dx = dL/dx and accumulates parameter gradients. */
void sl_attn_block_backward(sl_attn_block *b, const sl_attn_inputs *in, sl_attn_workspace *ws,
                            const sl_tensor *x, const sl_tensor *dout, sl_tensor *dx);
/* Mean sigmoid(gate) of the last forward into the device scalar out (0 without a gate). */
void sl_attn_block_gate_score(const sl_attn_block *b, sl_tensor *out);
/* Mean softmax weight on the first key over heads and query positions >= 1 of the last forward
 * (sl_op_attn_sink_share) into the device scalar out; NaN with document masks (in->seg). */
void sl_attn_block_first_token_share(const sl_attn_block *b, const sl_attn_inputs *in,
                                     sl_tensor *out);

/* Frees the block's activations (not its parameters: the sl_params own them), and a workspace. */
void sl_attn_block_free(sl_attn_block *b);
void sl_attn_workspace_free(sl_attn_workspace *ws);

#endif
