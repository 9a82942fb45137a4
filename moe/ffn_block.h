/*
 * moe/ffn_block.h - the feed-forward half of a decoder layer:
 *
 *     out = x + FFN(post_attention_layernorm(x))
 *
 * where FFN is the MoE block, or a dense SwiGLU MLP for dense layers (mlp_only_layers, or
 * every layer of a dense model).
 */
#ifndef SL_FFN_BLOCK_H
#define SL_FFN_BLOCK_H

#include "moe/moe_block.h"
#include "moe/swiglu_mlp.h"

/* A layer's FFN (model/model.c fills it from the model config). */
typedef struct {
    int hidden;
    bool is_moe; /* false: a dense SwiGLU MLP of width dense_ffn */
    int dense_ffn;
    sl_moe_config moe; /* when is_moe */
    float eps;         /* post_attention_layernorm */
    float init_std;
} sl_ffn_config;

typedef struct {
    sl_param *norm;
    bool is_moe;
    sl_moe_block moe;
    sl_swiglu_mlp mlp;
    float eps;
    sl_tensor *xn, *rstd, *y; /* saved normed input, rstd; the dense FFN's output (NULL: MoE) */
    bool borrowed;            /* they belong to another layer's block (sl_ffn_block_share) */
} sl_ffn_block;

/* Backward temporaries shared by all layers. */
typedef struct {
    sl_tensor *dxn;
} sl_ffn_workspace;

/* Declares layer `layer`'s FFN parameters in ps (its norm, and the MoE block's router and this
 * EP rank's experts, or the dense SwiGLU's weights). */
void sl_ffn_block_declare(sl_ffn_block *b, const sl_ffn_config *c, int layer, sl_params *ps,
                          int ep_rank, int ep_size);
/* Allocates b's activations for micro-batches of `tokens` tokens per rank on be (ep: the
 * expert-parallel group the MoE block exchanges rows with). */
void sl_ffn_block_alloc(sl_ffn_block *b, const sl_ffn_config *c, sl_backend *be, sl_comm *ep,
                        int64_t tokens, const sl_moe_options *opts);
/* Makes b compute in owner's activations (an allocated block of the same kind and shape, MoE
 * or dense, that never runs at the same time as b): the layers of a recomputing or
 * forward-only model share one set (model.h, sl_memory_mode). */
void sl_ffn_block_share(sl_ffn_block *b, sl_ffn_block *owner, sl_backend *be,
                        const sl_moe_options *opts);
/* Sized for `hidden`, the residual width shared by every layer. */
void sl_ffn_workspace_alloc(sl_ffn_workspace *ws, int hidden, sl_dtype act, sl_backend *be,
                            int64_t tokens);
/* out = x + ffn(x): the layer's dense SwiGLU or MoE block after its RMSNorm. */
void sl_ffn_block_forward(sl_ffn_block *b, const sl_tensor *x, sl_tensor *out);
/* The forward again before the backward of a recomputing model: bitwise the same outputs, and
 * the MoE bookkeeping of the first forward is kept (sl_moe_block_recompute). */
void sl_ffn_block_recompute(sl_ffn_block *b, const sl_tensor *x, sl_tensor *out);
/* dx written; coefs apply to MoE layers only. */
void sl_ffn_block_backward(sl_ffn_block *b, sl_ffn_workspace *ws, const sl_tensor *x,
                           const sl_tensor *dout, const sl_moe_loss_coefs *coefs, sl_tensor *dx);
void sl_ffn_block_free(sl_ffn_block *b);
void sl_ffn_workspace_free(sl_ffn_workspace *ws);

#endif
