/*
 * tests/test_optimizer.c - the optimizer's semantics against values computed by hand.
 *
 * Every expectation below is written from the definitions, never by running the code under
 * test a second time:
 *   - the learning-rate schedule from the formulas in trainer/lr_schedule.h (warmup, cosine
 *     with min_lr, WSD, constant), as literal numbers;
 *   - sl_op_adamw from the AdamW definition in core/ops.h (bias correction, grad_scale,
 *     decoupled weight decay): literal values for the first steps, then a double-precision
 *     recursion of the same definition;
 *   - the weight-decay mask through sl_optimizer_apply: matrices (ndim >= 2) decay, 1-D
 *     parameters (norms) do not. The reference decides from the parameter's shape, not from
 *     its `decay` flag, so a wrong flag is caught;
 *   - gradient clipping through sl_train_step on a tiny model (the clip factor
 *     min(1, clip / norm) is only computed there): each step is replayed from the model's own
 *     gradients with a hand-computed norm, clip factor and AdamW in double.
 *
 * Tolerances (fp32 kernels against double references): schedule 1e-12 relative (it is
 * computed in double); AdamW and optimizer parameters |a - b| <= 1e-6 + 1e-6 |b|;
 * the train-step replay |a - b| <= 2e-6 + 1e-5 |b|, gradient norm 1e-5 relative.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/params.h"
#include "core/rng.h"
#include "model/model.h"
#include "tests/test_util.h"
#include "trainer/lr_schedule.h"
#include "trainer/optimizer.h"
#include "trainer/train_step.h"

static bool near(double a, double b, double rtol) {
    return fabs(a - b) <= rtol * fabs(b) + 1e-15;
}

/* ---- learning-rate schedule ------------------------------------------------------------ */

static sl_train_config sched_config(sl_lr_schedule kind, int warmup, int max_steps) {
    sl_train_config t;
    memset(&t, 0, sizeof t);
    t.schedule = kind;
    t.lr = 1e-3;
    t.min_lr = 1e-4;
    t.warmup_steps = warmup;
    t.max_steps = max_steps;
    t.decay_fraction = 0.2;
    return t;
}

#define LR_IS(cfg, step, want)                                                                     \
    do {                                                                                           \
        const double got_ = sl_lr_at(&(cfg), (step));                                              \
        CHECK(near(got_, (want), 1e-12), "%s: lr at step %d = %.12g, expected %.12g", #cfg,        \
              (step), got_, (double)(want));                                                       \
    } while (0)

static void test_schedule(void) {
    /* Cosine, lr 1e-3 -> min_lr 1e-4, 10 warmup steps, 110 steps: the cosine spans steps
     * 10..110 (p = (step - 10) / 100). */
    sl_train_config cos_ = sched_config(SL_LR_COSINE, 10, 110);
    LR_IS(cos_, 0, 1e-4); /* warmup: lr (step + 1) / 10 */
    LR_IS(cos_, 4, 5e-4);
    LR_IS(cos_, 9, 1e-3);
    LR_IS(cos_, 10, 1e-3);                                /* p = 0 */
    LR_IS(cos_, 35, 1e-4 + 9e-4 * 0.5 * (1 + M_SQRT1_2)); /* p = 1/4: 8.681980515e-4 */
    LR_IS(cos_, 60, 5.5e-4);                              /* p = 1/2: halfway to min_lr */
    LR_IS(cos_, 85, 1e-4 + 9e-4 * 0.5 * (1 - M_SQRT1_2)); /* p = 3/4: 2.318019485e-4 */
    LR_IS(cos_, 110, 1e-4);                               /* the end is min_lr, not 0 */
    LR_IS(cos_, 500, 1e-4);                               /* past the end: stays at min_lr */
    int below = 0, first_below = -1;
    for (int s = 10; s <= 110; s++)
        if (sl_lr_at(&cos_, s) < 1e-4 - 1e-15 && below++ == 0) first_below = s;
    CHECK(below == 0, "cosine goes below min_lr at %d steps, the first %d", below, first_below);
    /* No warmup: the first step already has the peak rate. */
    sl_train_config cos0 = sched_config(SL_LR_COSINE, 0, 100);
    LR_IS(cos0, 0, 1e-3);
    LR_IS(cos0, 50, 5.5e-4);
    LR_IS(cos0, 100, 1e-4);
    /* min_lr 0: decays to exactly 0. */
    sl_train_config cosz = sched_config(SL_LR_COSINE, 0, 100);
    cosz.min_lr = 0;
    LR_IS(cosz, 50, 5e-4);
    LR_IS(cosz, 100, 0.0);

    /* WSD, 10 warmup steps, 110 steps, decay_fraction 0.2: stable until p = 0.8 (step 90),
     * then linear from 1e-3 to 1e-4 over steps 90..110. */
    sl_train_config wsd = sched_config(SL_LR_WSD, 10, 110);
    LR_IS(wsd, 0, 1e-4);
    LR_IS(wsd, 9, 1e-3);
    LR_IS(wsd, 10, 1e-3);
    LR_IS(wsd, 50, 1e-3);
    LR_IS(wsd, 89, 1e-3);
    LR_IS(wsd, 90, 1e-3);
    LR_IS(wsd, 95, 7.75e-4);  /* a quarter of the decay: 1e-3 - 0.25 * 9e-4 */
    LR_IS(wsd, 100, 5.5e-4);  /* halfway */
    LR_IS(wsd, 105, 3.25e-4); /* three quarters */
    LR_IS(wsd, 110, 1e-4);    /* the end is min_lr */
    LR_IS(wsd, 300, 1e-4);
    /* decay_fraction 0: never decays. */
    sl_train_config wsd0 = sched_config(SL_LR_WSD, 0, 100);
    wsd0.decay_fraction = 0;
    LR_IS(wsd0, 99, 1e-3);
    LR_IS(wsd0, 100, 1e-3);

    /* Constant: warmup, then lr to the end and beyond; min_lr plays no part. */
    sl_train_config cst = sched_config(SL_LR_CONSTANT, 4, 50);
    LR_IS(cst, 0, 2.5e-4);
    LR_IS(cst, 1, 5e-4);
    LR_IS(cst, 3, 1e-3);
    LR_IS(cst, 4, 1e-3);
    LR_IS(cst, 25, 1e-3);
    LR_IS(cst, 50, 1e-3);
    LR_IS(cst, 80, 1e-3);
}

/* ---- AdamW (sl_op_adamw) ------------------------------------------------------------------ */

static void test_adamw_op(void) {
    enum { N = 4, STEPS = 3 };
    const float p0[N] = {1.0f, -2.0f, 0.5f, 3.0f};
    const float grads[STEPS][N] = {
        {0.5f, -0.25f, 0.0f, 1e-3f}, {-0.25f, 0.5f, 0.0f, 1e-3f}, {0.125f, 0.125f, 1.0f, -1e-3f}};
    /* AdamW (core/ops.h), lr 0.1, b1 0.9, b2 0.999, eps 1e-8, wd 0.1, grad_scale 2:
     *   step 1: mhat = g', vhat = g'^2 (bias correction), so p1 = 0.99 p0 - 0.1 sign(g'):
     *           {0.89, -1.88, 0.495 (no gradient: decay only), 2.8700005 (eps)}
     *   step 2, element 0: m = 0.9 * 0.1 + 0.1 * (-0.5) = 0.04, v = 0.999e-3 + 0.25e-3,
     *           mhat = 0.04 / 0.19, vhat = 1.249e-3 / 1.999e-3,
     *           p2 = 0.89 - 0.1 (0.2663370 + 0.089) = 0.8544663
     * Without bias correction step 1 would move element 0 by 0.1 * (0.1 / sqrt(1e-3)) = 0.32. */
    const float lit[STEPS][N] = {{0.89f, -1.88f, 0.495f, 2.8700005f},
                                 {0.854466297f, -1.89781035f, 0.49005f, 2.74130099f},
                                 {0.81187872f, -1.92039737f, 0.421268141f, 2.68768885f}};
    /* the op takes fp32 hyperparameters: the recursion uses the same rounded values
     * (1 - (float)0.999 is 1.3e-5 relative away from 1e-3) */
    const double lr = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f, gs = 2.0;
    sl_tensor *tp = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, p0);
    sl_tensor *tg = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, NULL);
    sl_tensor *tm = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, NULL);
    sl_tensor *tv = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, NULL);
    sl_tensor_zero(tm), sl_tensor_zero(tv);
    double p[N], m[N] = {0}, v[N] = {0};
    for (int i = 0; i < N; i++) p[i] = p0[i];
    for (int t = 1; t <= STEPS; t++) {
        sl_tensor_from_host(tg, grads[t - 1]);
        sl_adamw_params hp = {.lr = (float)lr,
                              .beta1 = (float)b1,
                              .beta2 = (float)b2,
                              .eps = (float)eps,
                              .weight_decay = (float)wd,
                              .grad_scale = (float)gs,
                              .step = t};
        sl_op_adamw(tp, tg, tm, tv, NULL, &hp);
        float ref[N];
        for (int i = 0; i < N; i++) {
            const double g = grads[t - 1][i] * gs;
            m[i] = b1 * m[i] + (1 - b1) * g;
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            const double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
            p[i] -= lr * (mh / (sqrt(vh) + eps) + wd * p[i]);
            ref[i] = (float)p[i];
        }
        float *got = sl_test_host_f32(tp);
        char label[64];
        snprintf(label, sizeof label, "adamw step %d vs recursion", t);
        CHECK(sl_test_compare(label, got, ref, N, 1e-6, 1e-6) <= 1.0, "%s", label);
        snprintf(label, sizeof label, "adamw step %d vs literal values", t);
        CHECK(sl_test_compare(label, got, lit[t - 1], N, 1e-6, 1e-6) <= 1.0, "%s", label);
        /* the moments: m and v of the scaled gradient, not bias-corrected */
        float *gm = sl_test_host_f32(tm), *gv = sl_test_host_f32(tv);
        for (int i = 0; i < N; i++) {
            CHECK(fabs(gm[i] - m[i]) <= 1e-7 + 1e-6 * fabs(m[i]),
                  "adamw step %d: m[%d] %.9g vs %.9g", t, i, gm[i], m[i]);
            CHECK(fabs(gv[i] - v[i]) <= 1e-10 + 1e-6 * fabs(v[i]),
                  "adamw step %d: v[%d] %.9g vs %.9g", t, i, gv[i], v[i]);
        }
        free(got), free(gm), free(gv);
    }
    sl_tensor_free(tp), sl_tensor_free(tg), sl_tensor_free(tm), sl_tensor_free(tv);
}

/* ---- weight-decay mask through sl_optimizer_apply ----------------------------------------- */

/* The dense group's parameters lie back to back in declaration order, so the optimizer's runs
 * (one AdamW launch each) are: the layer norm; both matrices; the q norm and the final norm;
 * and the expert group's stack: 4. */
enum { NP = 6, NRUNS = 4 };
static const char *const mask_names[NP] = {
    "model.layers.0.input_layernorm.weight",  /* 1-D: no decay */
    "model.layers.0.mlp.gate_up_proj.weight", /* 2-D: decay */
    "model.layers.0.mlp.down_proj.weight",    /* 2-D: decay, in the run of the one before */
    "model.layers.0.mlp.experts.down_proj",   /* 3-D expert stack: decay */
    "model.layers.0.self_attn.q_norm.weight", /* 1-D: no decay */
    "model.norm.weight",                      /* 1-D: no decay, in the run of the one before */
};

static void build_mask_params(sl_params *ps) {
    sl_params_init(ps, sl_test_cpu());
    sl_params_add(ps, mask_names[0], SL_PGROUP_DENSE, 1, (int64_t[]){6}, SL_INIT_ONES, 0, -1);
    sl_params_add(ps, mask_names[1], SL_PGROUP_DENSE, 2, (int64_t[]){3, 4}, SL_INIT_NORMAL, 0.5f,
                  -1);
    sl_params_add(ps, mask_names[2], SL_PGROUP_DENSE, 2, (int64_t[]){4, 3}, SL_INIT_NORMAL, 0.5f,
                  -1);
    sl_params_add(ps, mask_names[3], SL_PGROUP_EXPERT, 3, (int64_t[]){2, 3, 2}, SL_INIT_NORMAL,
                  0.5f, 0);
    sl_params_add(ps, mask_names[4], SL_PGROUP_DENSE, 1, (int64_t[]){7}, SL_INIT_ONES, 0, -1);
    sl_params_add(ps, mask_names[5], SL_PGROUP_DENSE, 1, (int64_t[]){5}, SL_INIT_ONES, 0, -1);
    sl_params_finalize(ps);
    for (int i = 0; i < NP; i++) {
        sl_param *p = ps->items[i];
        float *h = malloc((size_t)p->numel * sizeof(float));
        /* norms around 1, matrices around 0: every element distinct */
        sl_test_fill_uniform(h, p->numel, p->ndim == 1 ? 0.5f : -1.0f, p->ndim == 1 ? 1.5f : 1.0f,
                             100 + (uint64_t)i);
        sl_tensor_from_host(p->w, h);
        free(h);
    }
}

static void test_decay_mask(sl_comm *comm) {
    /* The flags: matrices decay, 1-D parameters do not. */
    sl_params ps;
    build_mask_params(&ps);
    for (int i = 0; i < NP; i++)
        CHECK(ps.items[i]->decay == (ps.items[i]->ndim >= 2), "%s (ndim %d): decay flag %d",
              ps.items[i]->name, ps.items[i]->ndim, ps.items[i]->decay);

    sl_train_config t;
    memset(&t, 0, sizeof t);
    t.beta1 = 0.9, t.beta2 = 0.95, t.eps = 1e-8, t.weight_decay = 0.1;
    sl_optimizer_params op = {.dense = comm, .expert = comm, .layers = 1};
    sl_optimizer o;

    /* 1. Zero gradients: AdamW's step is 0 / (0 + eps) = 0, so only the decay moves a
     *    parameter: matrices become (1 - lr wd) w, 1-D parameters stay bit-identical. */
    sl_optimizer_init(&o, &ps, &op);
    CHECK(o.nslices == NRUNS, "%d AdamW runs, expected %d (neighbours that share the decay merge)",
          o.nslices, NRUNS);
    sl_params_zero_grad(&ps);
    float *before[NP];
    for (int i = 0; i < NP; i++) before[i] = sl_test_host_f32(ps.items[i]->w);
    sl_optimizer_apply(&o, &t, 0.5, 1.0);
    for (int i = 0; i < NP; i++) {
        const sl_param *p = ps.items[i];
        float *after = sl_test_host_f32(p->w);
        for (int64_t k = 0; k < p->numel; k++) {
            if (p->ndim >= 2) {
                const double want = (1.0 - 0.5 * 0.1) * before[i][k];
                CHECK(fabs(after[k] - want) <= 1e-6 * fabs(want), "%s[%lld]: %.9g, decayed %.9g",
                      p->name, (long long)k, after[k], want);
            } else {
                CHECK(after[k] == before[i][k],
                      "%s[%lld] (1-D) changed without a gradient: %.9g -> %.9g", p->name,
                      (long long)k, before[i][k], after[k]);
            }
        }
        free(after);
        free(before[i]);
    }
    sl_optimizer_free(&o);
    sl_params_free(&ps);

    /* 2. Three steps with gradients, a different lr and grad_scale each step, against
     *    AdamW in double with decay decided by the shape. Also the gradient norm of
     *    sl_optimizer_finish_reduce over both groups. */
    build_mask_params(&ps);
    sl_optimizer_init(&o, &ps, &op);
    const double lrs[3] = {0.05, 0.02, 0.01}, scales[3] = {0.5, 1.0, 0.25};
    double *pr[NP], *mr[NP], *vr[NP];
    for (int i = 0; i < NP; i++) {
        const sl_param *p = ps.items[i];
        float *h = sl_test_host_f32(p->w);
        pr[i] = malloc((size_t)p->numel * sizeof(double));
        mr[i] = calloc((size_t)p->numel, sizeof(double));
        vr[i] = calloc((size_t)p->numel, sizeof(double));
        for (int64_t k = 0; k < p->numel; k++) pr[i][k] = h[k];
        free(h);
    }
    for (int step = 1; step <= 3; step++) {
        double sq = 0;
        float *g[NP];
        for (int i = 0; i < NP; i++) {
            const sl_param *p = ps.items[i];
            g[i] = malloc((size_t)p->numel * sizeof(float));
            sl_test_fill_normal(g[i], p->numel, 0.3f, 1000 * (uint64_t)step + (uint64_t)i);
            sl_tensor_from_host(p->g, g[i]);
            for (int64_t k = 0; k < p->numel; k++) sq += (double)g[i][k] * g[i][k];
        }
        sl_optimizer_begin_reduce(&o);
        sl_optimizer_grads_ready(&o, -1);
        const double norm = sl_optimizer_finish_reduce(&o);
        CHECK(near(norm, sqrt(sq), 1e-6), "step %d: gradient norm %.9g, expected %.9g", step, norm,
              sqrt(sq));
        sl_optimizer_apply(&o, &t, lrs[step - 1], scales[step - 1]);
        for (int i = 0; i < NP; i++) {
            const sl_param *p = ps.items[i];
            const double wd = p->ndim >= 2 ? t.weight_decay : 0.0;
            float *ref = malloc((size_t)p->numel * sizeof(float));
            for (int64_t k = 0; k < p->numel; k++) {
                const double gk = g[i][k] * scales[step - 1];
                mr[i][k] = t.beta1 * mr[i][k] + (1 - t.beta1) * gk;
                vr[i][k] = t.beta2 * vr[i][k] + (1 - t.beta2) * gk * gk;
                const double mh = mr[i][k] / (1 - pow(t.beta1, step));
                const double vh = vr[i][k] / (1 - pow(t.beta2, step));
                pr[i][k] -= lrs[step - 1] * (mh / (sqrt(vh) + t.eps) + wd * pr[i][k]);
                ref[k] = (float)pr[i][k];
            }
            float *got = sl_test_host_f32(p->w);
            char label[160];
            snprintf(label, sizeof label, "step %d %s (%s)", step, p->name,
                     p->ndim >= 2 ? "decays" : "no decay");
            CHECK(sl_test_compare(label, got, ref, p->numel, 1e-6, 1e-6) <= 1.0,
                  "%s: optimizer differs from AdamW", label);
            free(got), free(ref), free(g[i]);
        }
    }
    for (int i = 0; i < NP; i++) free(pr[i]), free(mr[i]), free(vr[i]);
    sl_optimizer_free(&o);
    sl_params_free(&ps);
}

/* ---- clipping through sl_train_step -------------------------------------------------------- */

enum { TB = 2, TS = 8, MICRO = 2 };

static int make_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const int *step = user;
    sl_rng r;
    sl_rng_init(&r, 500 + (uint64_t)*step, (uint64_t)micro);
    for (int i = 0; i < TB * (TS + 1); i++) tokens[i] = (int32_t)sl_rng_below(&r, 40);
    return 0;
}

/*
 * Three steps of sl_train_step with gradient clipping `clip` (0: off). Each step is replayed
 * from the parameters before it and the gradients the step left in the model: norm, clip
 * factor min(1, clip / norm), AdamW (decay on ndim >= 2) in double. `expect` says whether
 * clipping must be active. eps is large enough (relative to the clipped gradients) that
 * AdamW's update depends on the gradient's scale even at step 1, and the clip factor varies
 * between steps, so a missing clip factor shows in every step.
 */
static void run_clip_case(sl_comm *comm, const char *name, double clip, bool expect_active) {
    char err[512];
    const sl_model_config mc = sl_test_model_config();
    sl_model *model = sl_model_create(&mc, sl_test_cpu(), NULL, TB, TS, NULL, err, sizeof err);
    CHECK(model != NULL, "model create: %s", err);
    if (!model) return;
    sl_params *ps = &model->params;
    sl_params_randomize(ps, 31);
    sl_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.seq_len = TS;
    tc.micro_batch_size = TB;
    tc.global_batch_tokens = (int64_t)MICRO * TB * TS;
    tc.max_steps = 3;
    tc.lr = 1e-2;
    tc.schedule = SL_LR_CONSTANT;
    tc.beta1 = 0.9, tc.beta2 = 0.95, tc.eps = 1e-4, tc.weight_decay = 0.1;
    tc.grad_clip = clip;
    sl_optimizer opt;
    sl_optimizer_params op = {.dense = comm, .expert = comm, .layers = mc.num_hidden_layers};
    sl_optimizer_init(&opt, ps, &op);
    int32_t *tokens = malloc(sizeof(int32_t) * TB * (TS + 1));
    const sl_stepper st = {
        .model = model, .opt = &opt, .world = comm, .micro_batches = MICRO, .tokens = tokens};

    const int np = ps->count;
    double **m = calloc((size_t)np, sizeof *m), **v = calloc((size_t)np, sizeof *v);
    double **mu = calloc((size_t)np, sizeof *mu), **vu = calloc((size_t)np, sizeof *vu);
    for (int i = 0; i < np; i++) {
        m[i] = calloc((size_t)ps->items[i]->numel, sizeof(double));
        v[i] = calloc((size_t)ps->items[i]->numel, sizeof(double));
        mu[i] = calloc((size_t)ps->items[i]->numel, sizeof(double));
        vu[i] = calloc((size_t)ps->items[i]->numel, sizeof(double));
    }
    double worst = 0, separation = INFINITY, first_factor = 0;
    for (int step = 0; step < 3; step++) {
        float **before = malloc((size_t)np * sizeof *before);
        for (int i = 0; i < np; i++) before[i] = sl_test_host_f32(ps->items[i]->w);
        sl_step_result res = {0};
        int s = step;
        CHECK(sl_train_step(&st, &tc, step, make_batch, &s, &res, err, sizeof err) == 0,
              "train step: %s", err);
        CHECK(res.lr == tc.lr, "%s step %d: lr %g, constant schedule %g", name, step, res.lr,
              tc.lr);
        /* the gradient this step used, its norm and the clip factor, by hand */
        float **g = malloc((size_t)np * sizeof *g);
        double sq = 0;
        for (int i = 0; i < np; i++) {
            g[i] = sl_test_host_f32(ps->items[i]->g);
            for (int64_t k = 0; k < ps->items[i]->numel; k++) sq += (double)g[i][k] * g[i][k];
        }
        const double norm = sqrt(sq);
        CHECK(near(res.grad_norm, norm, 1e-5), "%s step %d: grad norm %.9g, expected %.9g", name,
              step, res.grad_norm, norm);
        const double factor = clip > 0 && norm > clip ? clip / norm : 1.0;
        CHECK((factor < 1.0) == expect_active, "%s step %d: norm %.6g vs clip %g: clipping %s",
              name, step, norm, clip, factor < 1.0 ? "active" : "inactive");
        if (step == 0) first_factor = factor;
        const double bc1 = 1 - pow(tc.beta1, step + 1), bc2 = 1 - pow(tc.beta2, step + 1);
        double step_worst = 0, step_sep = 0;
        for (int i = 0; i < np; i++) {
            const sl_param *p = ps->items[i];
            const double wd = p->ndim >= 2 ? tc.weight_decay : 0.0;
            float *after = sl_test_host_f32(p->w);
            for (int64_t k = 0; k < p->numel; k++) {
                const double w0 = before[i][k];
                const double gk = g[i][k] * factor;
                m[i][k] = tc.beta1 * m[i][k] + (1 - tc.beta1) * gk;
                v[i][k] = tc.beta2 * v[i][k] + (1 - tc.beta2) * gk * gk;
                const double want =
                    w0 - tc.lr * ((m[i][k] / bc1) / (sqrt(v[i][k] / bc2) + tc.eps) + wd * w0);
                const double tol = 2e-6 + 1e-5 * fabs(want);
                const double e = fabs(after[k] - want) / tol;
                if (!(e <= step_worst)) {
                    step_worst = e;
                    if (e > 1)
                        fprintf(stderr, "  %s step %d %s[%lld]: %.9g, expected %.9g\n", name, step,
                                p->name, (long long)k, after[k], want);
                }
                /* the same step without clipping, to show the test can tell them apart */
                const double gu = g[i][k];
                mu[i][k] = tc.beta1 * mu[i][k] + (1 - tc.beta1) * gu;
                vu[i][k] = tc.beta2 * vu[i][k] + (1 - tc.beta2) * gu * gu;
                const double unclipped =
                    w0 - tc.lr * ((mu[i][k] / bc1) / (sqrt(vu[i][k] / bc2) + tc.eps) + wd * w0);
                const double d = fabs(unclipped - want) / tol;
                if (d > step_sep) step_sep = d;
            }
            free(after);
        }
        if (step_worst > worst) worst = step_worst;
        if (step_sep < separation) separation = step_sep;
        for (int i = 0; i < np; i++) free(before[i]), free(g[i]);
        free(before), free(g);
    }
    CHECK(worst <= 1.0, "%s: parameters after train steps differ from the hand replay (%.3g x tol)",
          name, worst);
    if (expect_active)
        CHECK(separation > 100.0,
              "%s: the unclipped update is only %.3g x tol away: the test could not see clipping",
              name, separation);
    printf("%s: clip factor at step 0 %.4g, worst %.3g x tol, unclipped update %.3g x tol away\n",
           name, first_factor, worst, separation);
    for (int i = 0; i < np; i++) free(m[i]), free(v[i]), free(mu[i]), free(vu[i]);
    free(m), free(v), free(mu), free(vu);
    free(tokens);
    sl_optimizer_free(&opt);
    sl_model_free(model);
}

static void test_clipping(sl_comm *comm) {
    run_clip_case(comm, "clip 0.05 (active)", 0.05, true);
    run_clip_case(comm, "clip 1e6 (inactive)", 1e6, false);
    run_clip_case(comm, "clip 0 (off)", 0.0, false);
}

int main(int argc, char **argv) {
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    if (sl_comm_size(world) != 1) {
        fprintf(stderr, "test_optimizer runs as a single process\n");
        sl_comm_finalize(world);
        return 77;
    }
    test_schedule();
    test_adamw_op();
    test_decay_mask(world);
    test_clipping(world);
    const int rc = sl_test_finish("test_optimizer");
    sl_comm_finalize(world);
    return rc;
}
