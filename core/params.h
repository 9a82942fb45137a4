/*
 * core/params.h - the model's parameters, laid out in flat groups.
 *
 * Every parameter is a view into one flat buffer per group, with matching flat buffers for
 * its gradient and the two AdamW moments. Groups follow how parameters are replicated:
 *   SL_PGROUP_DENSE   replicated on every rank; gradients averaged over all ranks
 *   SL_PGROUP_EXPERT  this rank's slice of the experts; gradients averaged over the ranks
 *                     that hold the same experts (the expert-data-parallel group)
 * Precision: the flat buffers w[] hold the fp32 master weights the optimizer updates. With a
 * bf16 compute dtype (training.precision = "bf16") each group also has a bf16 copy wc[], and
 * every parameter's `w` is a view of that copy - what the model computes with - while
 * `master` views the fp32 values (checkpoints, export, the router). In fp32, master == w.
 * Inside a group, parameters are laid out in declaration order (embedding, layer 0, ...,
 * layer L-1, final norm, head). The backward finishes them in reverse order, so the tail of
 * a group's gradient buffer is final first: gradient buckets are reduced from the end while
 * the backward still runs on earlier layers.
 */
#ifndef SL_PARAMS_H
#define SL_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/tensor.h"

typedef enum { SL_PGROUP_DENSE = 0, SL_PGROUP_EXPERT = 1, SL_PGROUP_COUNT = 2 } sl_pgroup;
typedef enum { SL_INIT_NORMAL = 0, SL_INIT_ONES = 1, SL_INIT_ZEROS = 2 } sl_init_kind;

typedef struct sl_param {
    char name[112]; /* e.g. "model.layers.3.self_attn.q_proj.weight" */
    sl_pgroup group;
    int ndim;
    int64_t shape[SL_MAX_DIMS];
    int64_t numel;
    int64_t offset; /* element offset in the group's flat buffers */
    bool decay;     /* weight decay applies (matrices) */
    sl_init_kind init;
    float init_std;
    /* Expert stacks [local experts, ...]: the global index of the first local expert, so
     * that each expert's initial values depend on its global index only. -1 otherwise. */
    int expert_base;
    int layer;         /* the layer it was declared in (sl_params_set_layer), -1 outside layers */
    sl_tensor *w;      /* the value the model computes with (compute dtype) */
    sl_tensor *master; /* the fp32 value (== w in fp32 training) */
    sl_tensor *g;      /* its fp32 gradient (accumulated over micro-batches) */
    /* The gradient holds the previous step's values: its next writer overwrites it instead of
     * adding to it (sl_params_begin_grads, sl_param_grad_beta, sl_param_grad_prepare). */
    bool grad_stale;
} sl_param;

typedef struct {
    sl_param **items;
    int count, cap;
    sl_backend *be;
    int64_t size[SL_PGROUP_COUNT];                      /* elements per group */
    sl_tensor *w[SL_PGROUP_COUNT], *g[SL_PGROUP_COUNT]; /* fp32 master weights, gradients */
    sl_tensor *wc[SL_PGROUP_COUNT]; /* bf16 compute copies (NULL in fp32 training) */
    sl_dtype compute;               /* SL_F32 (default) or SL_BF16 */
    bool no_grads; /* no gradients: g and every p->g NULL (sl_params_without_grads) */
    bool finalized;
    int layer; /* layer of the parameters being declared (-1: none) */
} sl_params;

/* The dtype a parameter computes in, which is also the dtype of the activations computed with
 * it (blocks allocate their activations in their weights' dtype). */
static inline sl_dtype sl_param_dtype(const sl_param *p) {
    return sl_tensor_dtype(p->w);
}

/* An empty parameter set on be: parameters are declared with sl_params_add, then allocated
 * in one flat buffer per group by the finalize. */
void sl_params_init(sl_params *ps, sl_backend *be);
/* Declares a parameter (before finalize). Matrices (ndim >= 2) get weight decay. */
sl_param *sl_params_add(sl_params *ps, const char *name, sl_pgroup group, int ndim,
                        const int64_t *shape, sl_init_kind init, float init_std, int expert_base);
/* Parameters declared from now on belong to layer `layer` (-1: outside the layers, the
 * default). The optimizer uses it to know which gradients are final as the backward walks
 * the layers in reverse. */
void sl_params_set_layer(sl_params *ps, int layer);
/* The dtype the model computes with (before finalize; SL_F32 unless set). */
void sl_params_set_compute_dtype(sl_params *ps, sl_dtype dt);
/* Allocates no gradients (before finalize): for a model that only runs forwards (evaluation,
 * generation), whose parameters then take 4 bytes each in fp32 instead of 8. g and every
 * parameter's g stay NULL; sl_params_zero_grad refuses such a store. */
void sl_params_without_grads(sl_params *ps);
/* Lays out and allocates the flat buffers and binds every parameter's views. */
void sl_params_finalize(sl_params *ps);
/* Instead of sl_params_finalize: binds every parameter to the memory of src, a finalized store
 * that declared the same parameters (names, shapes, groups) in the same order with the same
 * compute dtype, so that a second model computes with the first one's weights (model/decode.c:
 * sampling from the model being trained) without a copy. Freeing ps leaves src's memory alone. */
void sl_params_finalize_shared(sl_params *ps, const sl_params *src);
/* Refreshes the compute copies from the master weights (after they were written other than
 * by the optimizer: initialization, loading, a test); a no-op in fp32. */
void sl_params_sync_compute(sl_params *ps);
/* Fills every parameter from its own RNG stream (seed, name, global expert index), the large
 * ones on the OpenMP threads with the bits of one thread (sl_rng_fill_normal). */
void sl_params_randomize(sl_params *ps, uint64_t seed);
/* Sets every gradient to zero now (one fill per group), for callers that accumulate by hand. */
void sl_params_zero_grad(sl_params *ps);
/* Starts a step's gradients without touching memory: every gradient is marked stale, and its
 * first writer of the step overwrites it. Writers that can overwrite (GEMMs: beta 0) ask
 * sl_param_grad_beta for their beta: 0 for the first write (the mark is cleared), 1 after.
 * Writers that only add (scatter-adds, norms' weight gradients) call sl_param_grad_prepare
 * first, which zeroes a stale gradient. So the whole gradient buffer is not zeroed each step:
 * the step saves one write of every gradient and the first accumulation's read of it
 * (docs/performance.md, "Gradient buffers"). sl_params_stale_grad names a parameter still
 * stale after a backward (none: NULL), for the trainer to refuse an unwritten gradient. */
void sl_params_begin_grads(sl_params *ps);
float sl_param_grad_beta(sl_param *p);
void sl_param_grad_prepare(sl_param *p);
const sl_param *sl_params_stale_grad(const sl_params *ps);
/* The parameter declared as `name` (its Hugging Face name), or NULL where there is none. */
sl_param *sl_params_find(const sl_params *ps, const char *name);
/* Number of elements held by this rank, per group and in total. */
int64_t sl_params_numel(const sl_params *ps);
void sl_params_free(sl_params *ps);

#endif
