/*
 * moe/moe_block.h - the Mixture-of-Experts FFN: router -> token dispatcher -> grouped
 * experts -> combine, plus an optional shared expert whose output is scaled by a per-token
 * sigmoid gate (Qwen2-MoE / Qwen3-Next style):
 *
 *     y = sum_j w_j Expert_{idx_j}(X) + sigmoid(X w_sg) * SharedExpert(X)
 *
 * Auxiliary losses (reference card): LBL = E * sum_i f_i P_i per layer (f_i: fraction of the
 * N*k slots routed to expert i, P_i: mean router probability), z = mean_n lse_n^2. The
 * optimized objective adds lbl_coef * LBL / k + z_coef * z for each MoE layer; the trainer
 * folds the averaging over layers and micro-batches into the two coefficients.
 */
#ifndef SL_MOE_BLOCK_H
#define SL_MOE_BLOCK_H

#include "core/comm.h"
#include "core/config.h"
#include "moe/experts.h"
#include "moe/router.h"
#include "moe/swiglu_mlp.h"
#include "moe/token_dispatcher.h"

typedef struct {
    double lbl_coef; /* multiplies LBL / k of this layer */
    double z_coef;   /* multiplies mean_n lse_n^2 of this layer */
} sl_moe_loss_coefs;

typedef struct {
    sl_router router;
    sl_token_dispatcher dispatcher;
    sl_experts experts;
    bool has_shared;
    sl_swiglu_mlp shared;
    sl_param *shared_gate; /* [1, C] */
    sl_tensor *shared_out, *shared_logit, *shared_y, *dshared_out, *dshared_logit;
    /* statistics of the last forward */
    double lbl;   /* E * sum f_i P_i (k under uniform routing) */
    double zloss; /* mean lse^2 */
} sl_moe_block;

void sl_moe_block_declare(sl_moe_block *b, const sl_model_config *m, int layer, sl_params *ps,
                          int ep_rank, int ep_size);
void sl_moe_block_alloc(sl_moe_block *b, const sl_model_config *m, sl_backend *be, sl_comm *ep,
                        int64_t tokens);
/* y = moe(xn), written. */
void sl_moe_block_forward(sl_moe_block *b, const sl_tensor *xn, sl_tensor *y);
/* dxn written; parameter gradients accumulate. */
void sl_moe_block_backward(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *dy,
                           const sl_moe_loss_coefs *coefs, sl_tensor *dxn);
/* Tokens routed to each expert by this rank in the last forward ([E], host). */
const int64_t *sl_moe_block_counts(const sl_moe_block *b);
void sl_moe_block_free(sl_moe_block *b);

#endif
