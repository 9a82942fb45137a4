/* trainer/train_step.c - one optimizer step (see train_step.h). */
#include "trainer/train_step.h"

#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/profile.h"
#include "trainer/lr_schedule.h"

/* Profiling regions (core/profile.h); the gradient reduction's is in optimizer.c. */
#define R_ADAMW "optimizer: AdamW (+ router bias)"
#define R_SUMS  "step statistics all-reduce"
/* The batch callback is host work (the reader: decoding, the sequence shuffle); while it runs
 * the device drains what was queued and then waits, which this row shows. */
#define R_DATA "next micro-batch's tokens (host: reader, shuffle)"

/* The model's backward progress starts gradient buckets (last micro-batch only). */
static void on_grads_ready(void *user, int layer) {
    sl_optimizer_grads_ready(user, layer);
}

bool sl_defer_wgrad_decide(const char *setting, const sl_defer_facts *f) {
    if (!f->can_park || !strcmp(setting, "off")) return false;
    return !strcmp(setting, "on") || (f->one_pass && !f->ep_overlap);
}

/* Whether m's MoE layers exchange tokens with other ranks (expert parallelism). */
static bool expert_parallel(const sl_model *m) {
    return m->ep && sl_comm_size(m->ep) > 1;
}

bool sl_train_defer_wgrad(const sl_train_config *tc, const sl_backend *be, const sl_model *m) {
    sl_device_info dev;
    const sl_defer_facts f = {.can_park = sl_model_can_defer_wgrad(m),
                              .one_pass = sl_backend_device(be, &dev) && dev.cc_major == 9 &&
                                          sl_tensor_dtype(m->x[0]) == SL_BF16,
                              .ep_overlap = expert_parallel(m) && m->moe_opts.overlap_exchange};
    return sl_defer_wgrad_decide(tc->defer_expert_wgrad, &f);
}

int sl_wgrad_group_decide(int setting, const char *park_setting, bool expert_parallel) {
    if (setting > 0) return setting;
    return !expert_parallel && strcmp(park_setting, "rows") ? 4 : 2;
}

int sl_train_wgrad_group(const sl_train_config *tc, const sl_backend *be, const sl_model *m) {
    if (!sl_train_defer_wgrad(tc, be, m)) return 1;
    return sl_wgrad_group_decide(tc->expert_wgrad_group, tc->park_expert_rows, expert_parallel(m));
}

bool sl_park_tokens_decide(const char *setting, int group) {
    return group >= 2 && (!strcmp(setting, "tokens") || (!strcmp(setting, "auto") && group >= 3));
}

int sl_train_wgrad_group_in_step(const sl_train_config *tc, const sl_backend *be, const sl_model *m,
                                 int micro_batches) {
    const int group = sl_train_wgrad_group(tc, be, m);
    return group < micro_batches ? group : micro_batches;
}

bool sl_train_park_tokens(const sl_train_config *tc, const sl_backend *be, const sl_model *m,
                          int micro_batches) {
    return sl_park_tokens_decide(tc->park_expert_rows,
                                 sl_train_wgrad_group_in_step(tc, be, m, micro_batches)) &&
           !expert_parallel(m);
}

int sl_train_prepare_wgrad(const sl_train_config *tc, const sl_backend *be, sl_model *m,
                           int micro_batches) {
    if (sl_model_can_defer_wgrad(m))
        sl_model_set_park_tokens(m, sl_train_park_tokens(tc, be, m, micro_batches),
                                 sl_train_wgrad_group_in_step(tc, be, m, micro_batches));
    return sl_train_wgrad_group(tc, be, m);
}

/* Micro-batch mb's weight-gradient timing for the MoE experts (sl_stepper.wgrad_group): the
 * micro-batches of a group park their rows, its last computes the group's. */
static sl_wgrad_when wgrad_when(const sl_stepper *s, int mb) {
    if (s->wgrad_group < 2) return SL_WGRAD_NOW;
    const int first = mb - mb % s->wgrad_group;
    const int end =
        first + s->wgrad_group < s->micro_batches ? first + s->wgrad_group : s->micro_batches;
    if (end - first == 1) return SL_WGRAD_NOW;
    return mb == end - 1 ? SL_WGRAD_GROUP : SL_WGRAD_PARK;
}

int sl_train_step(const sl_stepper *s, const sl_train_config *tc, int step, sl_batch_fn next,
                  void *user, sl_step_result *res, char *err, size_t errlen) {
    sl_model *m = s->model;
    const sl_model_config *mc = &m->cfg;
    const int nl = mc->num_hidden_layers, ne = mc->num_experts;
    const int ranks = sl_comm_size(s->world);
    const float ce_scale = (float)(1.0 / (double)tc->global_batch_tokens);
    const double aux_scale = 1.0 / ((double)s->micro_batches * ranks);
    sl_params_begin_grads(&m->params); /* the first micro-batch overwrites the gradients */
    sl_model_begin_step(m, res->metrics);
    for (int mb = 0; mb < s->micro_batches; mb++) {
        int got = 0;
        SL_PROFILE_REGION (m->be, R_DATA) got = next(user, mb, s->tokens, err, errlen);
        if (got != 0) return -1; /* outside the region: it must be closed before returning */
        if (mb == s->micro_batches - 1) {
            /* the last backward completes the gradients: reduce while it runs */
            sl_optimizer_begin_reduce(s->opt);
            m->grad_ready = on_grads_ready;
            m->grad_ready_user = s->opt;
        }
        /* the last backward completes the expert gradients: their squares come with it */
        sl_model_set_wgrad(m, wgrad_when(s, mb),
                           mb == s->micro_batches - 1 ? sl_optimizer_expert_sumsq(s->opt) : NULL);
        sl_model_forward_backward(m, s->tokens, ce_scale, aux_scale, NULL);
        m->grad_ready = NULL;
    }
    if (res->counts) sl_model_read_expert_counts(m, res->counts); /* one host read */
    /* Every parameter's gradient has a writer in the step's backwards (the experts' may come
     * only with a later micro-batch, sl_stepper.wgrad_group); one without would keep the
     * previous step's values (sl_params_begin_grads). */
    const sl_param *stale = sl_params_stale_grad(&m->params);
    SL_CHECK(!stale, "internal error: parameter %s got no gradient in the backward", stale->name);
    sl_fwd_stats st; /* the step's statistics, read once (metrics only on metrics steps) */
    sl_model_read_stats(m, &st);
    double sums[5] = {st.loss_sum, (double)st.tokens, st.lbl, st.zloss, st.gate_score};
    res->grad_norm = sl_optimizer_finish_reduce(s->opt);
    const double clip =
        tc->grad_clip > 0 && res->grad_norm > tc->grad_clip ? tc->grad_clip / res->grad_norm : 1.0;
    res->lr = sl_lr_at(tc, step);
    /* A non-finite norm is the same on every rank (it comes from reduced gradients): skip
     * the update everywhere and let the caller stop. */
    if (isfinite(res->grad_norm))
        SL_PROFILE_REGION (m->be, R_ADAMW) sl_optimizer_apply(s->opt, tc, res->lr, clip);
    sl_profile_begin(m->be, R_SUMS);
    sl_comm_allreduce_sum_f64(s->world, sums, res->metrics ? 5 : 2);
    if (res->counts && ne > 0) sl_comm_allreduce_sum_i64(s->world, res->counts, nl * ne);
    sl_profile_end(m->be);
    if (res->counts && ne > 0 && tc->router_bias_update_rate > 0)
        SL_PROFILE_REGION (m->be, R_ADAMW)
            sl_model_update_router_bias(m, res->counts, tc->router_bias_update_rate);
    res->loss = sums[0] / sums[1];
    res->lbl = res->metrics ? sums[2] / ranks : NAN;
    res->zloss = res->metrics ? sums[3] / ranks : NAN;
    res->gate_score = res->metrics ? sums[4] / ranks : NAN;
    return 0;
}
