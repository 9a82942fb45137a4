/* trainer/optimizer.c - gradient reduction, clipping, AdamW and ZeRO-1 (see optimizer.h). */
#include "trainer/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"

/* Profiling region (core/profile.h): bucket launches, their completion and the norm. */
#define R_REDUCE "gradient reduction + norm"

void sl_optimizer_init(sl_optimizer *o, sl_params *ps, const sl_optimizer_params *p) {
    SL_CHECK(!ps->no_grads, "an optimizer for parameters without gradients (a forward-only model)");
    memset(o, 0, sizeof *o);
    o->ps = ps;
    o->group_comm[SL_PGROUP_DENSE] = p->dense;
    o->group_comm[SL_PGROUP_EXPERT] = p->expert ? p->expert : p->dense;
    o->ep = p->ep;
    o->zero1 = p->zero1;
    o->layers = p->layers;
    o->sumsq = sl_tensor_new1(ps->be, SL_F32, SL_PGROUP_COUNT);
    for (int g = 0; g < SL_PGROUP_COUNT; g++) o->group_sumsq[g] = sl_tensor_view1(o->sumsq, g, 1);
    const int64_t bucket = p->bucket_bytes > 0 ? p->bucket_bytes / 4 : 0;
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        const int64_t n = ps->size[g];
        sl_comm *c = o->group_comm[g];
        const int size = sl_comm_size(c), rank = sl_comm_rank(c);
        o->seg_off[g] = sl_xcalloc((size_t)size, sizeof(int64_t));
        o->seg_len[g] = sl_xcalloc((size_t)size, sizeof(int64_t));
        const int parts = o->zero1 ? size : 1;
        const int64_t per = (n + parts - 1) / parts;
        for (int r = 0; r < size; r++) {
            const int64_t s = o->zero1 ? (int64_t)r * per : 0;
            o->seg_off[g][r] = s < n ? s : n;
            o->seg_len[g][r] = (s + per < n ? s + per : n) - o->seg_off[g][r];
        }
        o->shard_off[g] = o->seg_off[g][rank];
        o->shard_len[g] = o->seg_len[g][rank];
        /* ZeRO-1: this rank needs only its shard's gradient summed (a reduce-scatter) */
        sl_grad_reducer_init(&o->reducer[g], c, ps->g[g], n, bucket,
                             o->zero1 ? o->seg_len[g] : NULL);
        o->shard_g[g] = o->shard_len[g] > 0
                            ? sl_tensor_view1(ps->g[g], o->shard_off[g], o->shard_len[g])
                            : NULL;
        const int64_t len = o->shard_len[g] > 0 ? o->shard_len[g] : 1;
        o->m[g] = sl_tensor_new1(ps->be, SL_F32, len);
        o->v[g] = sl_tensor_new1(ps->be, SL_F32, len);
        /* first offset of each layer's parameters; layer L means "after every layer" */
        o->layer_offset[g] = sl_xcalloc((size_t)p->layers + 1, sizeof(int64_t));
        for (int l = 0; l <= p->layers; l++) o->layer_offset[g][l] = n;
        for (int i = ps->count - 1; i >= 0; i--) {
            const sl_param *q = ps->items[i];
            if ((int)q->group != g || q->layer < 0) continue;
            if (q->offset < o->layer_offset[g][q->layer]) o->layer_offset[g][q->layer] = q->offset;
        }
        for (int l = p->layers - 1; l >= 0; l--)
            if (o->layer_offset[g][l + 1] < o->layer_offset[g][l])
                o->layer_offset[g][l] = o->layer_offset[g][l + 1];
    }
    /* Each parameter's part inside the shard, merged into the open run of its group when it
     * starts where that run ends and has its weight decay (elements are independent, so the
     * runs compute what one launch per parameter computes, bit for bit). */
    struct run {
        int group;
        bool decay;
        int64_t lo, hi;
    } *runs = sl_xcalloc((size_t)(ps->count ? ps->count : 1), sizeof *runs);
    int nruns = 0, open_run[SL_PGROUP_COUNT];
    for (int g = 0; g < SL_PGROUP_COUNT; g++) open_run[g] = -1;
    for (int i = 0; i < ps->count; i++) {
        const sl_param *q = ps->items[i];
        const int g = q->group;
        const int64_t lo = q->offset > o->shard_off[g] ? q->offset : o->shard_off[g];
        const int64_t hi_p = q->offset + q->numel, hi_s = o->shard_off[g] + o->shard_len[g];
        const int64_t hi = hi_p < hi_s ? hi_p : hi_s;
        if (hi <= lo) continue;
        struct run *r = open_run[g] >= 0 ? &runs[open_run[g]] : NULL;
        if (r && r->decay == q->decay && r->hi == lo) {
            r->hi = hi;
            continue;
        }
        open_run[g] = nruns;
        runs[nruns++] = (struct run){.group = g, .decay = q->decay, .lo = lo, .hi = hi};
    }
    o->slices = sl_xcalloc((size_t)(nruns ? nruns : 1), sizeof *o->slices);
    for (int i = 0; i < nruns; i++) {
        const int g = runs[i].group;
        const int64_t lo = runs[i].lo, n = runs[i].hi - runs[i].lo;
        struct sl_opt_slice *s = &o->slices[o->nslices++];
        s->decay = runs[i].decay;
        s->w = sl_tensor_view1(ps->w[g], lo, n);
        s->g = sl_tensor_view1(ps->g[g], lo, n);
        s->m = sl_tensor_view1(o->m[g], lo - o->shard_off[g], n);
        s->v = sl_tensor_view1(o->v[g], lo - o->shard_off[g], n);
        /* AdamW writes the compute copy of what it updates in the same pass (2 bytes a
         * parameter where a conversion afterwards reads 4 and writes 2); with ZeRO-1 the other
         * ranks' shards are converted after the all-gather (sl_optimizer_apply). */
        if (ps->wc[g]) s->copy = sl_tensor_view1(ps->wc[g], lo, n);
    }
    free(runs);
    for (int i = 0; i < 2; i++) o->hv[i] = sl_tensor_view_handle();
}

void sl_optimizer_begin_reduce(sl_optimizer *o) {
    for (int g = 0; g < SL_PGROUP_COUNT; g++) sl_grad_reducer_begin(&o->reducer[g]);
}

void sl_optimizer_grads_ready(sl_optimizer *o, int layer) {
    SL_PROFILE_REGION (o->ps->be, R_REDUCE)
        for (int g = 0; g < SL_PGROUP_COUNT; g++)
            sl_grad_reducer_ready_from(&o->reducer[g], layer < 0 ? 0 : o->layer_offset[g][layer]);
}

sl_tensor *sl_optimizer_expert_sumsq(sl_optimizer *o) {
    const int g = SL_PGROUP_EXPERT;
    /* one rank holds each expert's gradient whole: its shard is the group, nothing sums it */
    if (!o->shard_g[g] || sl_comm_size(o->group_comm[g]) != 1) return NULL;
    sl_op_fill(o->group_sumsq[g], 0.0f);
    o->expert_sq_fused = true;
    return o->group_sumsq[g];
}

static double finish_reduce(sl_optimizer *o) {
    for (int g = 0; g < SL_PGROUP_COUNT; g++) sl_grad_reducer_finish(&o->reducer[g]);
    /* Both groups' sums of squares into device scalars (the expert group's may be there
     * already, from the backward), then the step's one host read of them: the clip factor is
     * needed on the host for the next AdamW launch. Without ZeRO-1 the shard is the whole
     * buffer. */
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        if (g == SL_PGROUP_EXPERT && o->expert_sq_fused)
            o->expert_sq_fused = false;
        else if (o->shard_g[g])
            sl_op_sumsq(o->group_sumsq[g], o->shard_g[g]);
        else
            sl_op_fill(o->group_sumsq[g], 0.0f);
    }
    float sq[SL_PGROUP_COUNT];
    sl_tensor_to_host(o->sumsq, sq);
    const double dense_sq = sq[SL_PGROUP_DENSE];
    double expert_sq = sq[SL_PGROUP_EXPERT];
    if (o->zero1) {
        /* Each rank summed only its shards. The shards tile each group, and the expert
         * groups (EDP) of the EP ranks tile the dense group: one sum over the dense group
         * adds up the whole model. */
        double all = dense_sq + expert_sq;
        sl_comm_allreduce_sum_f64(o->group_comm[SL_PGROUP_DENSE], &all, 1);
        return sqrt(all);
    }
    /* Each EP rank holds different experts: their squares add up to the whole model's. */
    if (o->ep) sl_comm_allreduce_sum_f64(o->ep, &expert_sq, 1);
    return sqrt(dense_sq + expert_sq);
}

double sl_optimizer_finish_reduce(sl_optimizer *o) {
    double norm = 0.0;
    SL_PROFILE_REGION (o->ps->be, R_REDUCE) norm = finish_reduce(o);
    return norm;
}

void sl_optimizer_apply(sl_optimizer *o, const sl_train_config *t, double lr, double grad_scale) {
    o->step++;
    sl_params *ps = o->ps;
    for (int i = 0; i < o->nslices; i++) {
        const struct sl_opt_slice *s = &o->slices[i];
        sl_adamw_params hp = {.lr = (float)lr,
                              .beta1 = (float)t->beta1,
                              .beta2 = (float)t->beta2,
                              .eps = (float)t->eps,
                              .weight_decay = s->decay ? (float)t->weight_decay : 0.0f,
                              .grad_scale = (float)grad_scale,
                              .step = o->step};
        sl_op_adamw(s->w, s->g, s->m, s->v, s->copy, &hp);
    }
    /* ZeRO-1: the other ranks' shards of the master weights, and of the compute copy from
     * them (this rank's AdamW wrote its own); a group of one rank has nothing to gather. The
     * copy's bits are AdamW's either way (both round the same fp32 value to nearest). */
    for (int g = 0; o->zero1 && g < SL_PGROUP_COUNT; g++) {
        sl_comm *c = o->group_comm[g];
        const int size = sl_comm_size(c), rank = sl_comm_rank(c);
        if (ps->size[g] == 0 || size == 1) continue;
        sl_comm_allgather_segments(c, ps->w[g], o->seg_off[g], o->seg_len[g]);
        for (int r = 0; ps->wc[g] && r < size; r++)
            if (r != rank && o->seg_len[g][r] > 0)
                sl_op_convert(
                    sl_tensor_view_set1(o->hv[0], ps->wc[g], o->seg_off[g][r], o->seg_len[g][r]),
                    sl_tensor_view_set1(o->hv[1], ps->w[g], o->seg_off[g][r], o->seg_len[g][r]));
    }
}

void sl_optimizer_reset(sl_optimizer *o) {
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        if (o->m[g]) sl_op_fill(o->m[g], 0.0f);
        if (o->v[g]) sl_op_fill(o->v[g], 0.0f);
    }
    o->step = 0;
}

void sl_optimizer_free(sl_optimizer *o) {
    for (int i = 0; i < o->nslices; i++) {
        struct sl_opt_slice *s = &o->slices[i];
        sl_tensor_free(s->w), sl_tensor_free(s->g), sl_tensor_free(s->m), sl_tensor_free(s->v);
        sl_tensor_free(s->copy);
    }
    free(o->slices);
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        sl_tensor_free(o->group_sumsq[g]);
        sl_tensor_free(o->shard_g[g]);
    }
    sl_tensor_free(o->sumsq);
    sl_tensor_free(o->hv[0]);
    sl_tensor_free(o->hv[1]);
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        sl_grad_reducer_free(&o->reducer[g]);
        sl_tensor_free(o->m[g]);
        sl_tensor_free(o->v[g]);
        free(o->seg_off[g]);
        free(o->seg_len[g]);
        free(o->layer_offset[g]);
    }
    memset(o, 0, sizeof *o);
}
