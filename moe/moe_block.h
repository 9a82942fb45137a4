/*
 * moe/moe_block.h - the Mixture-of-Experts FFN: router -> token dispatcher -> grouped
 * experts -> combine, plus an optional shared expert whose output is scaled by a per-token
 * sigmoid gate (Qwen2-MoE / Qwen3-Next style):
 *
 *     y = sum_j w_j Expert_{idx_j}(X) + sigmoid(X w_sg) * SharedExpert(X)
 *
 * Auxiliary losses (reference card): LBL = E * sum_i f_i P_i per layer (f_i: share of the
 * N tokens routed to expert i, summing to k over experts; P_i: mean router probability), so
 * LBL = k under perfectly uniform routing (the Hugging Face form) and LBL / k = 1 (the
 * Megatron form); z = mean_n lse_n^2. The
 * optimized objective adds lbl_coef * LBL / k + z_coef * z for each MoE layer; the trainer
 * folds the averaging over layers and micro-batches into the two coefficients.
 */
#ifndef SL_MOE_BLOCK_H
#define SL_MOE_BLOCK_H

#include "core/comm.h"
#include "moe/experts.h"
#include "moe/parked_tokens.h"
#include "moe/router.h"
#include "moe/swiglu_mlp.h"
#include "moe/token_dispatcher.h"

/* The block's shape and initialization (model/model.c fills it from the model config). */
typedef struct {
    int hidden;
    int experts, topk; /* E, k */
    int expert_ffn;    /* each routed expert's SwiGLU width */
    int shared_ffn;    /* the shared expert's width; 0: no shared expert */
    bool norm_topk;    /* renormalize the top-k weights to sum to 1 */
    float init_std;
} sl_moe_config;

typedef struct {
    double lbl_coef; /* multiplies LBL / k of this layer */
    double z_coef;   /* multiplies mean_n lse_n^2 of this layer */
} sl_moe_loss_coefs;

/* How MoE layers run (from the parallel/training config sections). */
typedef struct {
    double capacity_factor; /* 0: dropless */
    sl_drop_policy drop_policy;
    /* Global-batch LBL (Qwen): the frequencies f_i come from the expert counts summed over
     * lbl_comm's ranks and over the micro-batches of the step so far, instead of this
     * micro-batch alone. NULL: per-micro-batch LBL. */
    sl_comm *lbl_comm;
    /* Aux-loss-free balancing (DeepSeek-V3): a per-expert bias on the selection scores. */
    bool selection_bias;
    /* No backward buffers (a forward-only model, model.h sl_memory_mode). */
    bool forward_only;
    /* Backward with expert parallelism: start the exchange of the input-gradient rows
     * (sl_comm_ialltoallv_grouped) as soon as they are computed and compute the experts'
     * weight gradients while it runs (parallel.overlap_moe). The same kernels on the same
     * data either way: results are bitwise equal. */
    bool overlap_exchange;
    /* Where the blocks regather rows parked as tokens (sl_moe_block_set_park_tokens): one set
     * the model's layers share (NULL: each block its own). */
    sl_regather_rows *regather;
} sl_moe_options;

/* When a MoE layer's backward computes its experts' weight gradients (the trainer sets it per
 * micro-batch: training.defer_expert_wgrad and training.expert_wgrad_group,
 * docs/performance.md):
 *   SL_WGRAD_NOW    in this backward (the default)
 *   SL_WGRAD_PARK   not yet: the rows they read are parked for a later micro-batch's backward
 *   SL_WGRAD_GROUP  for the parked micro-batches and this one, in one pass over the gradients */
typedef enum { SL_WGRAD_NOW = 0, SL_WGRAD_PARK, SL_WGRAD_GROUP } sl_wgrad_when;

typedef struct {
    sl_router router;
    sl_token_dispatcher dispatcher; /* this layer's, unless it shares another layer's */
    sl_token_dispatcher *disp;      /* the one it routes with: &dispatcher or another layer's */
    sl_experts experts;
    bool has_shared;
    sl_swiglu_mlp shared;
    sl_param *shared_gate; /* [1, C] */
    sl_tensor *shared_out, *shared_logit, *shared_y, *dshared_out, *dshared_logit;
    bool borrowed; /* the activations belong to another layer's block (sl_moe_block_share) */
    sl_comm *lbl_comm;
    bool overlap_exchange; /* sl_moe_options.overlap_exchange */
    int64_t *lbl_counts;   /* [E] counts behind f_i for the LBL gradient (global-batch mode) */
    int64_t *counts;       /* [E] this layer's routed counts of its last (not recomputed) forward
                            * on the host, where counts_fresh (else dcounts holds them) */
    bool counts_fresh;
    sl_tensor *dcounts;       /* [E] fp32 the same on the device, where the dispatch did not read */
    sl_tensor *step_counts;   /* [E] i32 on the device: += each recorded forward's (or NULL) */
    bool want_host_counts;    /* read the counts on the host in every forward (metrics steps) */
    sl_wgrad_when wgrad;      /* this micro-batch's (sl_moe_block_set_wgrad) */
    sl_tensor *grad_sumsq;    /* and where its completed expert gradients add their squares */
    sl_experts_parked parked; /* SL_WGRAD_PARK's rows, until SL_WGRAD_GROUP */
    bool park_tokens;         /* parks tokens and routing instead of the rows (set_park_tokens) */
    sl_parked_tokens ptok[SL_DW_MAX_SEGMENTS - 1]; /* parked.mb[i]'s, with park_tokens */
    sl_regather_rows own_regather;                 /* where opts->regather was NULL */
    sl_regather_rows *regather;                    /* opts->regather or &own_regather */
} sl_moe_block;

/* Declares layer `layer`'s router, this rank's experts (ep_rank's 1/ep_size of them) and the
 * shared expert. */
void sl_moe_block_declare(sl_moe_block *b, const sl_moe_config *c, int layer, sl_params *ps,
                          int ep_rank, int ep_size);
/* Allocates b's activations, routing state, token dispatcher (over ep) and expert buffers for
 * `tokens` tokens per micro-batch, as opts asks (precision, parking, EP options). */
void sl_moe_block_alloc(sl_moe_block *b, const sl_moe_config *c, sl_backend *be, sl_comm *ep,
                        int64_t tokens, const sl_moe_options *opts);
/* Makes b compute in owner's activations, dispatcher and expert buffers (a block of the same
 * shape, allocated, that never runs at the same time as b): the layers of a recomputing or
 * forward-only model share one set. b keeps its own selection bias, LBL and expert counts. */
void sl_moe_block_share(sl_moe_block *b, sl_moe_block *owner, sl_backend *be,
                        const sl_moe_options *opts);
/* Starts a new optimizer step (clears the global-batch LBL accumulation; the weight gradients
 * are computed now until set otherwise; rows parked by a step that stopped early are dropped).
 * host_counts: the step's forwards read their expert counts on the host (metrics steps);
 * otherwise only where something on the host needs them (capacity drops, expert parallelism,
 * the global-batch LBL, grouped GEMMs that take host sizes: sl_grouped_counts_on_device). */
void sl_moe_block_begin_step(sl_moe_block *b, bool host_counts);
/* Where each recorded forward adds its per-expert counts on the device ([E] i32, e.g. a row of
 * the model's per-step sums; NULL: nowhere). The block owns the view. */
void sl_moe_block_set_step_counts(sl_moe_block *b, sl_tensor *view);
/* y = res + moe(xn), written; res (NULL: no term; not y itself) is the residual stream the
 * block's output joins, added by the combine where the block has no shared expert (one pass
 * fewer), else after the shared expert's output, in the same order as a separate add. */
void sl_moe_block_forward(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *res, sl_tensor *y);
/* The forward again, for the backward of a recomputing model: the same routing (the router
 * and the dispatch are deterministic, so the counts are read, and with expert parallelism
 * exchanged, once more), but the LBL counts and the layer's expert counts are left as the
 * first forward recorded them (no double counting, no second global-batch all-reduce). */
void sl_moe_block_recompute(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *res,
                            sl_tensor *y);
/* Whether the block can park a micro-batch's rows: it owns its activations (not
 * sl_moe_block_share's) and trains. */
bool sl_moe_block_can_defer(const sl_moe_block *b);
/* When the next backward computes the experts' weight gradients. PARK needs
 * sl_moe_block_can_defer and fewer than SL_DW_MAX_SEGMENTS - 1 micro-batches parked; GROUP at
 * least one parked; NOW none. sumsq: NULL, or (NOW, GROUP: a backward that completes the
 * gradients) where the experts' weight gradients add the squares of their values ([1] fp32,
 * sl_op_grouped_matmul_dw). */
void sl_moe_block_set_wgrad(sl_moe_block *b, sl_wgrad_when when, sl_tensor *sumsq);
/* How SL_WGRAD_PARK keeps a micro-batch (training.park_expert_rows): its routed rows (the
 * default), or with tokens its input and output gradient per token and its routing, from which
 * SL_WGRAD_GROUP regathers the rows (moe/parked_tokens.h: 1 / k of the memory, the same bits,
 * two passes more per parked micro-batch). Tokens apply only where the dispatcher has no expert
 * parallelism; the return value says whether they do. `group`: the micro-batches of a group,
 * so at most group - 1 are parked at once; the slots past that are freed (rows, token copies,
 * SwiGLU rows: a stage whose groups shrank). Not while micro-batches are parked. */
bool sl_moe_block_set_park_tokens(sl_moe_block *b, bool tokens, int group);
/* dxn written; parameter gradients accumulate (the experts' as sl_moe_block_set_wgrad says).
 * Returns NULL, or an fp32 part of dL/dxn that the caller adds to dxn (the router's, where the
 * activations are not fp32: sl_router_backward), valid until the block's next backward. */
const sl_tensor *sl_moe_block_backward(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *dy,
                                       const sl_moe_loss_coefs *coefs, sl_tensor *dxn);
/* The auxiliary-loss statistics of a forward from its router statistics (stats [E + 1], as
 * router_fwd writes them, copied to the host) and this rank's per-expert counts: lbl =
 * E * sum_i f_i P_i (k under uniform routing) and zloss = mean lse^2. Metrics only: the
 * gradients never need these values, so the model reads the statistics once per logged step
 * (model/model.c) rather than once per layer. */
void sl_moe_aux_stats(int experts, int64_t tokens, const int64_t *counts, const float *stats,
                      double *lbl, double *zloss);
/* The same for the block's last forward, reading its router statistics now (tests, tools). */
void sl_moe_block_aux_stats(sl_moe_block *b, double *lbl, double *zloss);
/* Tokens routed to each expert by this rank in the last forward ([E], host; a recompute does
 * not change them): read from the device here where the forward did not read them (a host
 * read: tests and tools; the trainer reads the step's sums once, sl_model_read_expert_counts). */
const int64_t *sl_moe_block_counts(sl_moe_block *b);
void sl_moe_block_free(sl_moe_block *b);

#endif
