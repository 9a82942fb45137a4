/* core/params.c - flat parameter groups (see params.h). */
#include "core/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"

void sl_params_init(sl_params *ps, sl_backend *be) {
    memset(ps, 0, sizeof *ps);
    ps->be = be;
    ps->layer = -1;
}

sl_param *sl_params_add(sl_params *ps, const char *name, sl_pgroup group, int ndim,
                        const int64_t *shape, sl_init_kind init, float init_std, int expert_base) {
    SL_CHECK(!ps->finalized, "parameter '%s' declared after finalize", name);
    SL_CHECK(strlen(name) < sizeof(((sl_param *)0)->name), "parameter name too long: %s", name);
    SL_CHECK(sl_params_find(ps, name) == NULL, "parameter '%s' declared twice", name);
    if (ps->count == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 64;
        ps->items = sl_xrealloc(ps->items, (size_t)ps->cap * sizeof *ps->items);
    }
    sl_param *p = sl_xcalloc(1, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->group = group;
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= shape[i];
    }
    p->decay = ndim >= 2;
    p->init = init;
    p->init_std = init_std;
    p->expert_base = expert_base;
    p->layer = ps->layer;
    ps->items[ps->count++] = p;
    return p;
}

void sl_params_set_layer(sl_params *ps, int layer) {
    ps->layer = layer;
}

/* Every parameter's views into its group's flat buffers (ps->w, wc, g set). */
static void bind_views(sl_params *ps) {
    for (int i = 0; i < ps->count; i++) {
        sl_param *p = ps->items[i];
        p->master = sl_tensor_view(ps->w[p->group], p->offset, p->ndim, p->shape);
        p->w = ps->wc[p->group] ? sl_tensor_view(ps->wc[p->group], p->offset, p->ndim, p->shape)
                                : p->master;
        p->g =
            ps->g[p->group] ? sl_tensor_view(ps->g[p->group], p->offset, p->ndim, p->shape) : NULL;
    }
    ps->finalized = true;
}

void sl_params_finalize(sl_params *ps) {
    SL_CHECK(!ps->finalized, "parameters finalized twice");
    for (int i = 0; i < ps->count; i++) {
        sl_param *p = ps->items[i];
        p->offset = ps->size[p->group];
        ps->size[p->group] += p->numel;
    }
    for (int gi = 0; gi < SL_PGROUP_COUNT; gi++) {
        int64_t n = ps->size[gi] ? ps->size[gi] : 1;
        ps->w[gi] = sl_tensor_new1(ps->be, SL_F32, n);
        ps->g[gi] = ps->no_grads ? NULL : sl_tensor_new1(ps->be, SL_F32, n);
        if (ps->compute != SL_F32) ps->wc[gi] = sl_tensor_new1(ps->be, ps->compute, n);
    }
    bind_views(ps);
}

void sl_params_finalize_shared(sl_params *ps, const sl_params *src) {
    SL_CHECK(!ps->finalized && src->finalized,
             "sl_params_finalize_shared: needs a finalized source");
    SL_CHECK(ps->count == src->count && ps->compute == src->compute && ps->be == src->be,
             "sl_params_finalize_shared: %d parameters in %s, the source has %d in %s", ps->count,
             sl_dtype_name(ps->compute), src->count, sl_dtype_name(src->compute));
    for (int i = 0; i < ps->count; i++) {
        sl_param *p = ps->items[i];
        const sl_param *q = src->items[i];
        SL_CHECK(strcmp(p->name, q->name) == 0 && p->numel == q->numel && p->group == q->group,
                 "sl_params_finalize_shared: parameter %d is %s, the source's %s", i, p->name,
                 q->name);
        p->offset = ps->size[p->group];
        ps->size[p->group] += p->numel;
    }
    /* Views of the source's flat buffers: freeing them never frees the source's memory. A
     * source without gradients gives none. */
    if (src->no_grads) ps->no_grads = true;
    for (int gi = 0; gi < SL_PGROUP_COUNT; gi++) {
        const int64_t n = sl_tensor_numel(src->w[gi]);
        ps->w[gi] = sl_tensor_view1(src->w[gi], 0, n);
        ps->g[gi] = ps->no_grads ? NULL : sl_tensor_view1(src->g[gi], 0, n);
        if (src->wc[gi]) ps->wc[gi] = sl_tensor_view1(src->wc[gi], 0, n);
    }
    bind_views(ps);
}

void sl_params_without_grads(sl_params *ps) {
    SL_CHECK(!ps->finalized, "sl_params_without_grads after finalize");
    ps->no_grads = true;
}

void sl_params_set_compute_dtype(sl_params *ps, sl_dtype dt) {
    SL_CHECK(!ps->finalized, "the compute dtype is set before the parameters are finalized");
    SL_CHECK(dt == SL_F32 || dt == SL_BF16, "parameters compute in f32 or bf16, not %s",
             sl_dtype_name(dt));
    ps->compute = dt;
}

void sl_params_sync_compute(sl_params *ps) {
    for (int gi = 0; gi < SL_PGROUP_COUNT; gi++)
        if (ps->wc[gi]) sl_op_convert(ps->wc[gi], ps->w[gi]);
}

static void fill_normal(float *dst, int64_t n, uint64_t seed, const char *stream_name, float std) {
    (void)sl_rng_fill_normal(dst, n, seed, sl_hash_str(stream_name), std);
}

void sl_params_randomize(sl_params *ps, uint64_t seed) {
    for (int i = 0; i < ps->count; i++) {
        sl_param *p = ps->items[i];
        float *h = sl_xmalloc((size_t)p->numel * sizeof(float));
        if (p->init == SL_INIT_ONES || p->init == SL_INIT_ZEROS) {
            float v = p->init == SL_INIT_ONES ? 1.0f : 0.0f;
            for (int64_t j = 0; j < p->numel; j++) h[j] = v;
        } else if (p->expert_base >= 0) {
            /* One stream per global expert: the slice a rank holds is the same numbers a
             * single process would hold for those experts. */
            int64_t per = p->numel / p->shape[0];
            for (int64_t e = 0; e < p->shape[0]; e++) {
                char stream[160];
                snprintf(stream, sizeof stream, "%s#expert%lld", p->name,
                         (long long)(p->expert_base + e));
                fill_normal(h + e * per, per, seed, stream, p->init_std);
            }
        } else {
            fill_normal(h, p->numel, seed, p->name, p->init_std);
        }
        sl_tensor_from_host(p->master, h);
        free(h);
    }
    sl_params_sync_compute(ps);
}

void sl_params_zero_grad(sl_params *ps) {
    SL_CHECK(!ps->no_grads, "zeroing the gradients of parameters that have none");
    for (int gi = 0; gi < SL_PGROUP_COUNT; gi++) sl_tensor_zero(ps->g[gi]);
    for (int i = 0; i < ps->count; i++) ps->items[i]->grad_stale = false;
}

void sl_params_begin_grads(sl_params *ps) {
    for (int i = 0; i < ps->count; i++) ps->items[i]->grad_stale = true;
}

float sl_param_grad_beta(sl_param *p) {
    const bool first = p->grad_stale;
    p->grad_stale = false;
    return first ? 0.0f : 1.0f;
}

void sl_param_grad_prepare(sl_param *p) {
    if (p->grad_stale) sl_tensor_zero(p->g);
    p->grad_stale = false;
}

const sl_param *sl_params_stale_grad(const sl_params *ps) {
    for (int i = 0; i < ps->count; i++)
        if (ps->items[i]->grad_stale) return ps->items[i];
    return NULL;
}

sl_param *sl_params_find(const sl_params *ps, const char *name) {
    for (int i = 0; i < ps->count; i++)
        if (strcmp(ps->items[i]->name, name) == 0) return ps->items[i];
    return NULL;
}

int64_t sl_params_numel(const sl_params *ps) {
    int64_t n = 0;
    for (int gi = 0; gi < SL_PGROUP_COUNT; gi++) n += ps->size[gi];
    return n;
}

void sl_params_free(sl_params *ps) {
    for (int i = 0; i < ps->count; i++) {
        if (ps->items[i]->w != ps->items[i]->master) sl_tensor_free(ps->items[i]->w);
        sl_tensor_free(ps->items[i]->master);
        sl_tensor_free(ps->items[i]->g);
        free(ps->items[i]);
    }
    free(ps->items);
    for (int gi = 0; gi < SL_PGROUP_COUNT; gi++) {
        sl_tensor_free(ps->w[gi]);
        sl_tensor_free(ps->wc[gi]);
        sl_tensor_free(ps->g[gi]);
    }
    memset(ps, 0, sizeof *ps);
}
