/*
 * model/model.h - the gated-attention MoE decoder:
 *
 *     x_0 = embed(tokens);  for each layer: h = x + Attn(norm(x)), x' = h + FFN(norm(h))
 *     logits = lm_head(final_norm(x_L));  loss = mean cross-entropy
 *
 * The model is built from blocks (attention/attn_block.h, moe/ffn_block.h) and reaches
 * tensor data only through core/ops.h. The LM head and the loss run in row chunks, so the
 * [tokens, vocab] logits never exist at once (151,936-entry vocabularies stay affordable).
 */
#ifndef SL_MODEL_H
#define SL_MODEL_H

#include "attention/attn_block.h"
#include "core/comm.h"
#include "core/params.h"
#include "model/config.h"
#include "moe/ffn_block.h"

/* Statistics of the micro-batches read together (sl_model_read_stats). */
enum { SL_MODEL_VIEWS = 6 };

typedef struct {
    double loss_sum;   /* sum of token cross-entropies (nats) */
    int64_t tokens;    /* tokens evaluated */
    double lbl;        /* mean over micro-batches and MoE layers of E * sum f_i P_i (k when
                        * balanced); NaN unless the step records metrics */
    double zloss;      /* the same for mean lse^2 */
    double gate_score; /* mean over micro-batches and layers of mean sigmoid(gate) */
} sl_fwd_stats;

/*
 * What the model keeps of a forward for its backward (docs/memory.md):
 *   NONE         every layer keeps all its activations (training.recompute = "none").
 *   ATTENTION    the attention blocks keep only the attention kernel's outputs (y, o, lse);
 *                the backward recomputes norm, projections, gate split, QK-norm and RoPE from
 *                the layer input, never the O(T^2) kernel. The FFNs keep theirs. ("attention")
 *   LAYER        each layer keeps only its input x[l]; the layers compute in one shared set
 *                of activations and the backward reruns layer l's forward (attention and FFN)
 *                right before its backward. ("layer")
 *   FORWARD_ONLY evaluation: one shared set of activations, no backward buffers, the
 *                residual stream alternating between two buffers; no backward possible. A
 *                model created in it has no gradients either (sl_params_without_grads) and
 *                cannot be switched to a training mode.
 * Every mode computes bitwise the same losses and gradients (tests/test_recompute.c).
 */
typedef enum {
    SL_MEMORY_NONE = 0,
    SL_MEMORY_ATTENTION = 1,
    SL_MEMORY_LAYER = 2,
    SL_MEMORY_FORWARD_ONLY = 3,
} sl_memory_mode;

/* "none", "attention", "layer" or "forward-only". */
const char *sl_memory_mode_name(sl_memory_mode mode);

typedef struct sl_model {
    sl_model_config cfg;
    sl_backend *be;
    sl_memory_mode memory; /* what the activations keep (sl_model_set_memory) */
    sl_params params;
    sl_comm *ep;             /* expert-parallel group (NULL: all experts here) */
    sl_moe_options moe_opts; /* how the MoE layers run */
    int batch, seq;
    int64_t tokens; /* batch * seq */
    int n_moe_layers;
    sl_param *embed, *final_norm, *lm_head; /* lm_head == embed when tied */
    sl_attn_block *attn;                    /* [layers] */
    sl_ffn_block *ffn;                      /* [layers] */
    sl_attn_workspace attn_ws;
    sl_ffn_workspace ffn_ws;
    sl_regather_rows regather; /* the MoE layers' rows parked as tokens, regathered */
    sl_tensor **x, **h;        /* residual stream: x[0..L], h[0..L-1] after attention */
    sl_tensor *dx, *dh;        /* residual-stream gradients */
    sl_tensor *ids, *targets, *pos, *inv_freq;
    float mscale;
    sl_tensor *xf, *xf_rstd, *dxf; /* final norm output and its gradient */
    sl_tensor *logits, *losses;    /* logits of one row chunk; per-token losses */
    int64_t chunk_rows;
    int32_t *host_ids; /* staging for one micro-batch of ids/targets/positions */
    /* Document masking (sl_model_set_documents): seg [T] on the backend and its host copy, made
     * on first use; docs_next: the next micro-batch has documents; docs_on: the current one. */
    sl_tensor *seg;
    int32_t *host_seg;
    bool docs_next, docs_on;
    int docs_batch, docs_seq;      /* the shape host_seg was built for */
    sl_tensor *hv[SL_MODEL_VIEWS]; /* view handles of the head's row chunks (no per-step alloc) */
    /* Optional backward progress callback: called with layer l once every parameter of
     * layers >= l has its gradient for this micro-batch, and with -1 at the very end
     * (the trainer starts gradient all-reduce buckets from it). */
    void (*grad_ready)(void *user, int layer);
    void *grad_ready_user;
    /* Step statistics on the device, one slot per micro-batch (model.c explains). */
    int stat_cap, stat_mb;
    bool stat_metrics_on;
    int64_t stat_width;                  /* layers + MoE layers * (experts + 1) */
    sl_tensor *stat_loss, *stat_metrics; /* [cap], [cap, stat_width] */
    int64_t *stat_counts;                /* host [cap, MoE layers, experts] */
    sl_tensor *step_counts; /* [MoE layers, experts] i32: the step's counts, summed on the device */
    /* Optional per-layer diagnostics every forward fills (model/diagnostics.h; NULL: off). The
     * caller creates and frees it. */
    struct sl_model_diagnostics *diag;
} sl_model;

/* Declares, allocates and lays out the model for micro-batches of [batch, seq] tokens.
 * `ep` is the expert-parallel group (NULL: this rank holds every expert); opts (NULL:
 * dropless, per-micro-batch LBL, no selection bias) configures the MoE layers. */
sl_model *sl_model_create(const sl_model_config *cfg, sl_backend *be, sl_comm *ep, int batch,
                          int seq, const sl_moe_options *opts, char *err, size_t errlen);
/* The same with the dtype the model computes in: SL_F32, or SL_BF16 for bf16 weights' copies
 * and activations with fp32 master weights, gradients, router and statistics
 * (training.precision; docs/cuda.md, "Precision"). sl_model_create computes in fp32. */
sl_model *sl_model_create_ex(const sl_model_config *cfg, sl_backend *be, sl_comm *ep, int batch,
                             int seq, const sl_moe_options *opts, sl_dtype compute, char *err,
                             size_t errlen);
/* The same, allocating the activations for memory mode `memory` directly (a model created in
 * SL_MEMORY_NONE and then switched would touch the larger allocation first, and the CPU
 * backend's allocations count in the peak RSS from the moment they are made). Created
 * SL_MEMORY_FORWARD_ONLY, the model allocates no gradients. */
sl_model *sl_model_create_mem(const sl_model_config *cfg, sl_backend *be, sl_comm *ep, int batch,
                              int seq, const sl_moe_options *opts, sl_dtype compute,
                              sl_memory_mode memory, char *err, size_t errlen);
/* A forward-only model of shape [batch, seq] that computes with src's parameters (their memory,
 * not a copy: what the optimizer writes into src is what it sees), its RoPE table and its
 * routers' selection biases as they are now; its own activations. For sampling from the model
 * being trained (training.sample_every). With expert parallelism every rank of src's group runs
 * it together. Free it before src. */
sl_model *sl_model_create_shared(const sl_model *src, int batch, int seq, char *err, size_t errlen);
/* Call before the first micro-batch of every optimizer step. With metrics, the step also
 * records the gate score and router statistics (for sl_model_read_stats); without, it
 * records only the loss (the trainer asks for metrics on logged steps). */
void sl_model_begin_step(sl_model *m, bool metrics);
/* Whether the MoE layers can defer their experts' weight gradients by a micro-batch
 * (training.defer_expert_wgrad): the model has MoE layers, trains, and each layer owns its
 * activations (memory mode none or attention, not layer). */
bool sl_model_can_defer_wgrad(const sl_model *m);
/* When the next sl_model_forward_backward computes the experts' weight gradients
 * (moe/moe_block.h, sl_wgrad_when), for every MoE layer: the trainer runs its micro-batches in
 * groups, PARK for all but the last, GROUP for the last (NOW for a last one alone).
 * sl_model_begin_step sets NOW. sumsq: NULL, or, for the backward that completes the experts'
 * gradients (the step's last micro-batch), where their weight-gradient GEMMs add the squares of
 * those gradients ([1] fp32 on the model's backend): their share of the gradient norm without
 * another pass over them. */
void sl_model_set_wgrad(sl_model *m, sl_wgrad_when when, sl_tensor *sumsq);
/* How the MoE layers park a micro-batch for their deferred weight gradients
 * (training.park_expert_rows; moe/moe_block.h, sl_moe_block_set_park_tokens): tokens where a
 * layer has no expert parallelism, else its rows. `group`: micro-batches per group of the
 * deferred weight gradients (1: none deferred). Memory that the setting no longer uses is freed:
 * the layers' parking slots past group - 1 (rows, token copies, SwiGLU rows) and the shared
 * regathered rows past them (all of them without tokens), so a staged run that goes from
 * groups of 4 to pairs, rows or no deferral gets it back. Returns whether any layer parks
 * tokens. Set before a step, not inside one. */
bool sl_model_set_park_tokens(sl_model *m, bool tokens, int group);
/* The step's one host read: the statistics of the micro-batches run since begin_step (loss
 * sum and tokens always; lbl, zloss and gate score on metrics steps, NaN otherwise). */
void sl_model_read_stats(sl_model *m, sl_fwd_stats *st);
/* This rank's expert counts of the step so far (every recorded forward since begin_step),
 * counts[layer * num_experts + e] (0 for dense layers): summed on the device, read here in one
 * host read (the router bias update and the load metrics; the MoE layers themselves read none
 * where their GEMMs take the counts on the device, moe/token_dispatcher.h). */
void sl_model_read_expert_counts(sl_model *m, int64_t *counts);
/* Aux-loss-free balancing: moves every MoE layer's selection bias from the step's global
 * expert counts counts[layer * num_experts + e]. */
void sl_model_update_router_bias(sl_model *m, const int64_t *counts, double rate);
void sl_model_free(sl_model *m);
/* Re-sizes the activations for micro-batches of [batch, seq] tokens (a new stage's sequence
 * length), in the model's memory mode; parameters, gradients, the RoPE table and the routers'
 * selection biases are kept. */
int sl_model_set_shape(sl_model *m, int batch, int seq, char *err, size_t errlen);
/* Re-allocates the activations for memory mode `mode` (a new model starts in
 * SL_MEMORY_NONE); parameters, gradients, the RoPE table and the routers' selection biases
 * are kept. -1 with a message for a training mode on a model created forward-only (it has no
 * gradients). */
int sl_model_set_memory(sl_model *m, sl_memory_mode mode, char *err, size_t errlen);
/* The memory mode named `name` ("none", "attention" or "layer", as sl_memory_mode_name
 * spells them) into *out; -1 for any other name. */
int sl_memory_mode_parse(const char *name, sl_memory_mode *out);
/* The memory mode of training.recompute (the config validation rejects anything else; an
 * unknown name aborts naming it). */
sl_memory_mode sl_memory_mode_of_recompute(const char *recompute);
/* Recomputes the RoPE table from cfg (rope_theta, rope_scaling), e.g. between stages. */
int sl_model_set_rope(sl_model *m, char *err, size_t errlen);

/* Per-document causal masking (training.document_mask) for the NEXT sl_model_forward or
 * sl_model_forward_backward only: row b's document starts are doc_start[b * (seq + 1) + k] for
 * k < n_docs[b] (offsets into that row's seq + 1 tokens, increasing: what sl_reader_next
 * reports). Each token then attends only to the earlier tokens of its own document, and its
 * position (RoPE) is its offset in that document; tokens before a row's first start belong to a
 * document begun in an earlier sequence and count from the row's first token. A micro-batch
 * without this call is plain causal with positions 0 .. seq - 1, as before; one whose rows
 * start no document after token 0 gives the same bits. */
void sl_model_set_documents(sl_model *m, const int32_t *doc_start, const int *n_docs);

/* One micro-batch: tokens [batch, seq + 1] (host, int32). Runs forward and backward (a
 * forward-only model aborts naming its mode) and
 * accumulates parameter gradients of  ce_scale * sum(token losses) + aux terms, where the
 * aux coefficients (config) are multiplied by aux_scale (1 / (micro-batches * ranks)).
 * Statistics stay on the device for sl_model_read_stats; st != NULL reads this micro-batch's
 * at once (a host read: tests and tools; the trainer passes NULL). */
void sl_model_forward_backward(sl_model *m, const int32_t *tokens, float ce_scale, double aux_scale,
                               sl_fwd_stats *st);
/* Forward only (evaluation): this batch's statistics, read at once (lbl, zloss and gate
 * score only when the last sl_model_begin_step asked for metrics; a new model does). */
void sl_model_forward(sl_model *m, const int32_t *tokens, sl_fwd_stats *st);

/* Per-layer expert load of the last forward: tokens routed to each expert by this rank
 * ([num_experts], host), or NULL for a dense layer (a host read where the forward kept them on
 * the device: tests and tools; the trainer uses sl_model_read_expert_counts). */
const int64_t *sl_model_expert_counts(sl_model *m, int layer);

#endif
