/* trainer/optimizer.c - gradient reduction, clipping and AdamW (see optimizer.h). */
#include "trainer/optimizer.h"

#include <math.h>

#include "core/ops.h"

double sl_optimizer_reduce_grads(sl_optimizer *o, sl_params *ps) {
    sl_comm_allreduce_sum(o->dense, ps->g[SL_PGROUP_DENSE]);
    if (ps->size[SL_PGROUP_EXPERT] > 0)
        sl_comm_allreduce_sum(o->expert ? o->expert : o->dense, ps->g[SL_PGROUP_EXPERT]);
    double dense_sq = sl_op_sumsq(ps->g[SL_PGROUP_DENSE]);
    double expert_sq = ps->size[SL_PGROUP_EXPERT] > 0 ? sl_op_sumsq(ps->g[SL_PGROUP_EXPERT]) : 0.0;
    /* Each EP rank holds different experts: their squares add up to the whole model's. */
    if (o->ep) sl_comm_allreduce_sum_f64(o->ep, &expert_sq, 1);
    return sqrt(dense_sq + expert_sq);
}

void sl_optimizer_apply(sl_optimizer *o, sl_params *ps, const sl_train_config *t, double lr,
                        double grad_scale) {
    o->step++;
    for (int gi = 0; gi < SL_PGROUP_COUNT; gi++) {
        const int64_t n = ps->size[gi], nd = ps->decay_size[gi];
        if (n == 0) continue;
        /* [0, nd) decays, [nd, n) does not: the layout params.c guarantees. */
        for (int part = 0; part < 2; part++) {
            const int64_t off = part == 0 ? 0 : nd, len = part == 0 ? nd : n - nd;
            if (len == 0) continue;
            sl_tensor *p = sl_tensor_view1(ps->w[gi], off, len);
            sl_tensor *g = sl_tensor_view1(ps->g[gi], off, len);
            sl_tensor *m = sl_tensor_view1(ps->m[gi], off, len);
            sl_tensor *v = sl_tensor_view1(ps->v[gi], off, len);
            sl_adamw_params hp = {.lr = (float)lr,
                                  .beta1 = (float)t->beta1,
                                  .beta2 = (float)t->beta2,
                                  .eps = (float)t->eps,
                                  .weight_decay = part == 0 ? (float)t->weight_decay : 0.0f,
                                  .grad_scale = (float)grad_scale,
                                  .step = o->step};
            sl_op_adamw(p, g, m, v, &hp);
            sl_tensor_free(p), sl_tensor_free(g), sl_tensor_free(m), sl_tensor_free(v);
        }
    }
}
