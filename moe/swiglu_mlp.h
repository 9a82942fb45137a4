/*
 * moe/swiglu_mlp.h - a SwiGLU feed-forward network: y = W_down (silu(W_gate x) * (W_up x)).
 *
 * Used for the dense FFN of dense layers (mlp_only_layers, dense models) and for the MoE
 * block's shared expert. gate and up are stored stacked as one [2F, C] matrix so both come
 * out of one GEMM; the checkpoint exporter splits them into gate_proj and up_proj.
 */
#ifndef SL_SWIGLU_MLP_H
#define SL_SWIGLU_MLP_H

#include "core/params.h"

typedef struct {
    sl_param *gate_up, *down; /* [2F, C], [C, F] */
    int64_t hidden, ffn;
    sl_tensor *gu, *h;   /* saved: [T, 2F], [T, F] */
    sl_tensor *dh, *dgu; /* backward temporaries (NULL in a forward-only model) */
    bool borrowed;       /* the four above belong to another MLP (sl_swiglu_mlp_share) */
} sl_swiglu_mlp;

/* Declares "<prefix>.gate_up_proj.weight" and "<prefix>.down_proj.weight". */
void sl_swiglu_mlp_declare(sl_swiglu_mlp *f, sl_params *ps, const char *prefix, int64_t hidden,
                           int64_t ffn, float init_std);
/* backward = false: no backward temporaries (a forward-only model). */
void sl_swiglu_mlp_alloc(sl_swiglu_mlp *f, sl_backend *be, int64_t tokens, bool backward);
/* Makes f use owner's buffers (an MLP of the same width, allocated, that never runs at the
 * same time as f): the layers of a recomputing or forward-only model share one set. */
void sl_swiglu_mlp_share(sl_swiglu_mlp *f, const sl_swiglu_mlp *owner);
/* y = mlp(xn), written. */
void sl_swiglu_mlp_forward(sl_swiglu_mlp *f, const sl_tensor *xn, sl_tensor *y);
/* dxn += dL/dxn; parameter gradients accumulate. */
void sl_swiglu_mlp_backward(sl_swiglu_mlp *f, const sl_tensor *xn, const sl_tensor *dy,
                            sl_tensor *dxn);
void sl_swiglu_mlp_free(sl_swiglu_mlp *f);

#endif
