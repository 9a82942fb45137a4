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

typedef struct {
    sl_param *norm;
    bool is_moe;
    sl_moe_block moe;
    sl_swiglu_mlp mlp;
    float eps;
    sl_tensor *xn, *rstd, *y; /* saved normed input, rstd; FFN output temporary */
} sl_ffn_block;

/* Backward temporaries shared by all layers. */
typedef struct {
    sl_tensor *dxn;
} sl_ffn_workspace;

void sl_ffn_block_declare(sl_ffn_block *b, const sl_model_config *m, int layer, sl_params *ps,
                          int ep_rank, int ep_size);
void sl_ffn_block_alloc(sl_ffn_block *b, const sl_model_config *m, sl_backend *be, sl_comm *ep,
                        int64_t tokens, const sl_moe_options *opts);
void sl_ffn_workspace_alloc(sl_ffn_workspace *ws, const sl_model_config *m, sl_backend *be,
                            int64_t tokens);
void sl_ffn_block_forward(sl_ffn_block *b, const sl_tensor *x, sl_tensor *out);
/* dx written; coefs apply to MoE layers only. */
void sl_ffn_block_backward(sl_ffn_block *b, sl_ffn_workspace *ws, const sl_tensor *x,
                           const sl_tensor *dout, const sl_moe_loss_coefs *coefs, sl_tensor *dx);
void sl_ffn_block_free(sl_ffn_block *b);
void sl_ffn_workspace_free(sl_ffn_workspace *ws);

#endif
