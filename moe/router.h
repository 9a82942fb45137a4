/*
 * moe/router.h - the MoE router (always fp32): logits = X W_r^T, softmax over the E
 * experts, top-k selection, optional renormalization of the k weights; plus the
 * load-balancing and z-loss terms computed from its statistics. With bf16 activations the
 * router converts its input to fp32 and computes with the fp32 master weight, so routing
 * decisions never see bf16 rounding of the logits.
 */
#ifndef SL_ROUTER_H
#define SL_ROUTER_H

#include <stdbool.h>

#include "core/params.h"

typedef struct {
    sl_param *weight; /* [E, C] "model.layers.{l}.mlp.gate.weight" */
    int experts, topk;
    bool norm_topk;
    int64_t tokens; /* of the last forward */
    sl_tensor *logits, *probs, *topk_idx, *topk_w, *stats;
    sl_tensor *dlogits, *dtopk_w, *lbl_grad;
    sl_tensor *bias; /* [E] selection bias (aux-loss-free balancing) or NULL */
    sl_tensor *x32;  /* [T, C] fp32 copy of a bf16 input, or NULL */
    sl_tensor *dx32; /* [T, C] fp32 input gradient before it joins a bf16 dxn, or NULL */
    float *bias_host;
    bool borrowed; /* the activation tensors belong to another layer's router (sl_router_share) */
} sl_router;

/* Declares layer `layer`'s router weight [experts, hidden] in ps (fp32 always): top-`topk` of
 * `experts`, renormalized when norm_topk. */
void sl_router_declare(sl_router *r, sl_params *ps, int layer, int hidden, int experts, int topk,
                       bool norm_topk, float init_std);
/* `act`: the dtype of the inputs it will route; backward = false: no backward temporaries
 * (a forward-only model). */
void sl_router_alloc(sl_router *r, sl_backend *be, int64_t tokens, bool selection_bias,
                     sl_dtype act, bool backward);
/* Makes r use owner's activation tensors (a router of the same shape, allocated, that never
 * runs at the same time as r); the selection bias stays r's own. */
void sl_router_share(sl_router *r, const sl_router *owner, sl_backend *be, bool selection_bias);
/* Aux-loss-free balancing: bias[e] += rate * sign(mean_count - count[e]) from the global
 * batch's expert counts (DeepSeek-V3). The bias moves selection only, never the weights. */
void sl_router_update_bias(sl_router *r, const int64_t *counts, double rate);
/* Reads / writes the selection bias (host, E floats) for checkpoints. */
void sl_router_set_bias(sl_router *r, const float *bias);
/* Routes xn [T, C]; fills topk_idx/topk_w and copies the statistics to the host. */
void sl_router_forward(sl_router *r, const sl_tensor *xn);
/* Backward from r->dtopk_w (filled by the dispatcher) plus the auxiliary losses:
 * lbl: r->lbl_grad[e] = dL/dprobs[n, e] (the caller filled it: uploaded, or from the expert
 * counts on the device, sl_op_moe_counts), else no load-balancing loss; z_scale = coefficient
 * of sum_n lse_n^2. Accumulates the weight gradient. dL/dxn: added into dxn where xn is fp32
 * (returns NULL); where it is not, the fp32 GEMM's dL/dxn is returned instead ([T, C] fp32,
 * valid until the next backward), for the caller to add to dxn: the norm's backward folds it in
 * (sl_op_rmsnorm_bwd's dy_add) without a pass of its own. */
const sl_tensor *sl_router_backward(sl_router *r, const sl_tensor *xn, bool lbl, float z_scale,
                                    sl_tensor *dxn);
void sl_router_free(sl_router *r);

#endif
