/*
 * backends/conformance_core.c - the conformance cases of core/'s and trainer/'s operations
 * (elementwise, reductions, dense GEMM, RMSNorm, embedding, cross-entropy, AdamW; the grouped
 * GEMMs in backends/conformance_grouped.c):
 * shapes, inputs and the double references (backends/conformance_impl.h says how a case runs).
 */
#include "backends/conformance_impl.h"

/* ---- memory-level helpers ---------------------------------------------------------------- */

/* 70001 is above the CPU's threading threshold (32768 elements). */
static const int k_len[] = {1, 7, 4099, 70001};

static int64_t pick_len(cx *c) {
    const int64_t n = *PICK(c, k_len);
    desc(c, "[%lld]", (long long)n);
    return n;
}

void sl_conf_case_fill(cx *c) {
    const int64_t n = pick_len(c);
    if (!c->be) {
        double *x = want(c, "x", n);
        for (int64_t i = 0; i < n; i++) x[i] = -3.25;
        return;
    }
    sl_tensor *x = ACT(c, junk(c, n), n);
    sl_op_fill(x, -3.25f);
    got(c, "x", x);
}

void sl_conf_case_add(cx *c) {
    static const struct {
        int n, alias; /* 1: y is a, 2: y is b */
    } k_shapes[] = {{1, 0}, {7, 0}, {4099, 0}, {70001, 0}, {1001, 1}, {33, 2}};
    const int n = PICK(c, k_shapes)->n, alias = k_shapes[c->shape].alias;
    desc(c, "[%d]%s", n, alias == 1 ? "y=a" : alias == 2 ? "y=b" : "");
    const float *a = gen_normal(c, n, 1.0), *b = gen_normal(c, n, 1.0);
    if (!c->be) {
        double *y = want(c, "y", n);
        for (int i = 0; i < n; i++) y[i] = (double)a[i] + b[i];
        return;
    }
    sl_tensor *ta = ACT(c, a, n), *tb = ACT(c, b, n);
    sl_tensor *ty = alias == 1 ? ta : alias == 2 ? tb : ACT(c, junk(c, n), n);
    sl_op_add(ty, ta, tb);
    got(c, "y", ty);
}

void sl_conf_case_axpy(cx *c) {
    const int64_t n = pick_len(c);
    const float alpha = -0.7f, *y0 = gen_normal(c, n, 1.0), *x = gen_normal(c, n, 1.0);
    if (!c->be) {
        double *y = want(c, "y", n);
        for (int64_t i = 0; i < n; i++) y[i] = y0[i] + (double)alpha * x[i];
        return;
    }
    sl_tensor *ty = ACT(c, y0, n);
    sl_op_axpy(ty, ACT(c, x, n), alpha);
    got(c, "y", ty);
}

void sl_conf_case_scale(cx *c) {
    const int64_t n = pick_len(c);
    const float s = 1.37f, *x0 = gen_normal(c, n, 1.0);
    if (!c->be) {
        double *x = want(c, "x", n);
        for (int64_t i = 0; i < n; i++) x[i] = (double)x0[i] * s;
        return;
    }
    sl_tensor *tx = ACT(c, x0, n);
    sl_op_scale(tx, s);
    got(c, "x", tx);
}

/* Both directions: an fp32 tensor into the dtype under test and back. */
void sl_conf_case_convert(cx *c) {
    const int64_t n = pick_len(c);
    const float *x = gen_normal(c, n, 1.0); /* representable in the dtype under test */
    if (!c->be) {
        double *y = want(c, "dst", n), *z = want(c, "back", n);
        for (int64_t i = 0; i < n; i++) y[i] = z[i] = x[i];
        return;
    }
    sl_tensor *tx = F32(c, x, n), *ty = ACT(c, junk(c, n), n), *tz = F32(c, junk(c, n), n);
    sl_op_convert(ty, tx);
    sl_op_convert(tz, ty);
    got(c, "dst", ty);
    got(c, "back", tz);
}

/* sum and sumsq: positive terms, so the relative tolerance is well conditioned. */
void sl_conf_case_sum(cx *c) {
    const int64_t n = pick_len(c);
    const float *x = gen_uniform(c, n, 0.0, 1.0);
    if (!c->be) {
        double *s = want(c, "sum", 1);
        for (int64_t i = 0; i < n; i++) *s += x[i];
    } else {
        sl_tensor *out = F32(c, junk(c, 1), 1);
        sl_op_sum(out, ACT(c, x, n));
        got(c, "sum", out);
    }
    /* accumulated in double, rounded once (core/ops.h) */
    double *mag, *terms;
    sum_bound(c, U_F64, &mag, &terms);
    for (int64_t i = 0; i < n; i++) mag[0] += x[i];
    terms[0] = (double)n;
}

void sl_conf_case_sumsq(cx *c) {
    const int64_t n = pick_len(c);
    const float *x = gen_normal(c, n, 1.0);
    if (!c->be) {
        double *s = want(c, "sumsq", 1);
        for (int64_t i = 0; i < n; i++) *s += (double)x[i] * x[i];
    } else {
        sl_tensor *out = F32(c, junk(c, 1), 1);
        sl_op_sumsq(out, ACT(c, x, n));
        got(c, "sumsq", out);
    }
    double *mag, *terms;
    sum_bound(c, U_F64, &mag, &terms);
    for (int64_t i = 0; i < n; i++) mag[0] += (double)x[i] * x[i];
    terms[0] = (double)n + 1; /* a square's rounding counts as one more */
}

/* The largest |x| placed at a random index, negative in odd shapes (the sign must not matter),
 * plus an empty tensor (0). */
void sl_conf_case_absmax(cx *c) {
    static const int k_n[] = {0, 1, 7, 4099, 70001};
    const int64_t n = *PICK(c, k_n);
    desc(c, "[%lld]", (long long)n);
    float *x = gen_normal(c, n, 2.0);
    if (n > 1) {
        const int64_t at = (int64_t)(rand_u64(&c->rng) % (uint64_t)n);
        x[at] = round_to(c->shape % 2 ? -40.5f : 40.5f, c->round_to);
    }
    if (!c->be) {
        double *m = want(c, "max", 1);
        for (int64_t i = 0; i < n; i++) *m = fabs(x[i]) > *m ? fabs(x[i]) : *m;
        return;
    }
    sl_tensor *out = F32(c, junk(c, 1), 1);
    sl_op_absmax(out, n ? ACT(c, x, n) : ACT(c, NULL, 0));
    got(c, "max", out);
}

/* ---- dense GEMM -------------------------------------------------------------------- */

typedef struct {
    int m, n, k, ta, tb;
    float alpha, beta;
    int c32; /* C pinned to fp32 (a parameter gradient: dW += dY^T X) */
} mm_shape;

void sl_conf_case_matmul(cx *c) {
    static const mm_shape k_shapes[] = {
        {1, 1, 1, 0, 0, 1.0f, 0.0f, 0},     {1, 13, 7, 0, 1, 1.0f, 0.0f, 0},    /* a single row */
        {7, 5, 9, 1, 0, 0.5f, 2.0f, 0},     {7, 5, 9, 1, 1, 1.0f, 1.0f, 0},     /* every layout */
        {64, 48, 80, 0, 0, 1.0f, 0.0f, 0},  {65, 33, 129, 0, 1, 1.0f, 0.5f, 0}, /* odd sizes */
        {33, 65, 17, 1, 1, -1.0f, 0.0f, 0}, {40, 24, 70, 1, 0, 1.0f, 1.0f, 1},  /* dW += dY^T X */
    };
    const mm_shape *s = PICK(c, k_shapes);
    const int64_t m = s->m, n = s->n, k = s->k;
    desc(c, "%lldx%lldx%lld%s%s%s", (long long)m, (long long)n, (long long)k, s->ta ? "/At" : "",
         s->tb ? "/Bt" : "", s->c32 ? "/Cf32" : "");
    const float *a = gen_uniform(c, m * k, -1, 1), *b = gen_uniform(c, k * n, -1, 1);
    const float *c0 = gen_uniform(c, m * n, -1, 1);
    if (!c->be) {
        sl_ref_matmul(want(c, "c", m * n), a, b, c0, m, n, k, s->ta, s->tb, s->alpha, s->beta);
    } else {
        sl_tensor *ta = s->ta ? ACT(c, a, k, m) : ACT(c, a, m, k);
        sl_tensor *tb = s->tb ? ACT(c, b, n, k) : ACT(c, b, k, n);
        sl_tensor *tc = s->c32 ? GRAD(c, c0, m, n) : ACT(c, c0, m, n);
        sl_op_matmul(tc, ta, tb, s->ta, s->tb, s->alpha, s->beta);
        got(c, "c", tc);
    }
    /* k products (each rounded once) and beta c0, summed in fp32 in the GEMM's order */
    double *mag, *terms;
    sum_bound(c, U_F32, &mag, &terms);
    sl_ref_matmul(mag, abs_copy(c, a, m * k), abs_copy(c, b, k * n), abs_copy(c, c0, m * n), m, n,
                  k, s->ta, s->tb, fabs(s->alpha), fabs(s->beta));
    for (int64_t i = 0; i < m * n; i++) terms[i] = (double)k + 2;
}

/* ---- normalization, embedding, loss ------------------------------------------------------ */

/* pick_rw's shapes and three of the CUDA kernels' row path (core/rmsnorm.cu): the hidden width
 * 2,048 (bf16: 8 packs per lane, one row per warp; fp32: two column windows), the last in place,
 * and 4,100 rows of 3 packs (more than 512 partials' worth: 9 rows per block, some warps take
 * two). */
static const rw_shape *pick_norm(cx *c) {
    static const rw_shape k_norm[] = {{1, 1},     {1, 16},    {7, 33},    {130, 64},  {3, 1000},
                                      {129, 257}, {300, 130}, {40, 2048}, {4100, 24}, {9, 2048}};
    const rw_shape *s = PICK(c, k_norm);
    desc(c, "%dx%d", s->rows, s->w);
    return s;
}

void sl_conf_case_rmsnorm_fwd(cx *c) {
    const rw_shape *sh = pick_norm(c);
    const int64_t rows = sh->rows, d = sh->w;
    const float *x = gen_normal(c, rows * d, 1.0), *w = gen_uniform(c, d, 0.5, 1.5);
    if (!c->be) {
        double *y = want(c, "y", rows * d), *rstd = want(c, "rstd", rows);
        sl_ref_rmsnorm_fwd(y, rstd, x, w, rows, d, 1e-6);
        return;
    }
    sl_tensor *ty = ACT(c, junk(c, rows * d), rows, d), *tr = F32(c, junk(c, rows), rows);
    sl_op_rmsnorm_fwd(ty, tr, ACT(c, x, rows, d), ACT(c, w, d), 1e-6f);
    got(c, "y", ty);
    got(c, "rstd", tr);
}

/* The odd shapes add a residual gradient dres; the fifth (129 x 257) and the last (9 x 2048) in
 * place, dres being dx. Shapes 2, 7, 8 and 9 add an fp32 dy_add to dy (elements; the CUDA row
 * path with dres, alone, and in place). */
void sl_conf_case_rmsnorm_bwd(cx *c) {
    const rw_shape *sh = pick_norm(c);
    const int64_t rows = sh->rows, d = sh->w;
    const bool res = c->shape % 2 == 1, in_place = c->shape == 5 || c->shape == 9;
    const bool add = c->shape == 2 || c->shape >= 7;
    if (res || add)
        desc(c, "%dx%d%s%s%s", sh->rows, sh->w, res ? "+dres" : "", in_place ? " in place" : "",
             add ? "+dy_add" : "");
    const float *x = gen_normal(c, rows * d, 1.0), *w = gen_uniform(c, d, 0.5, 1.5);
    const float *dy0 = gen_normal(c, rows * d, 1.0), *dw0 = gen_normal(c, d, 1.0);
    const float *dres = res ? gen_normal(c, rows * d, 1.0) : NULL;
    /* dy_add = t - dy for a t of the dtype under test: dy + dy_add is t exactly in fp32, so the
     * op's rounding of the sum to dy's dtype (which an fp32 reference cannot mirror) is exact;
     * that rounding is checked bitwise against sl_op_add by test_cuda_kernels */
    float *dy_add = add ? gen_normal(c, rows * d, 1.0) : NULL;
    for (int64_t i = 0; add && i < rows * d; i++) dy_add[i] -= dy0[i];
    double *ry = halloc(c, sizeof(double) * (size_t)(rows * d));
    double *rr = halloc(c, sizeof(double) * (size_t)rows);
    sl_ref_rmsnorm_fwd(ry, rr, x, w, rows, d, 1e-6);
    const float *rstd = derived(c, rr, rows, false);
    float *dy = halloc(c, sizeof(float) * (size_t)(rows * d)); /* dy + dy_add */
    for (int64_t i = 0; i < rows * d; i++) dy[i] = dy0[i] + (add ? dy_add[i] : 0.0f);
    if (!c->be) {
        double *dx = want(c, "dx", rows * d), *dw = want(c, "dw", d);
        for (int64_t i = 0; i < d; i++) dw[i] = dw0[i];
        sl_ref_rmsnorm_bwd(dx, dw, dy, x, w, rstd, rows, d);
        for (int64_t i = 0; res && i < rows * d; i++) dx[i] += dres[i];
    } else {
        sl_tensor *tdx = ACT(c, in_place ? dres : junk(c, rows * d), rows, d),
                  *tdw = GRAD(c, dw0, d);
        const sl_tensor *tres = !res ? NULL : in_place ? tdx : ACT(c, dres, rows, d);
        sl_op_rmsnorm_bwd(tdx, tdw, ACT(c, dy0, rows, d), add ? F32(c, dy_add, rows, d) : NULL,
                          ACT(c, x, rows, d), ACT(c, w, d), F32(c, rstd, rows), tres);
        got(c, "dx", tdx);
        got(c, "dw", tdw);
    }
    /* dw[j] = dw0[j] + sum over rows of dy x rstd: rows products of three factors (two
     * roundings each) */
    double *mag, *terms;
    sum_bound(c, U_F32, &mag, &terms);
    for (int64_t j = 0; j < d; j++) {
        mag[j] = fabs(dw0[j]);
        terms[j] = (double)rows + 3;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++)
            mag[j] += fabs((double)dy[r * d + j] * x[r * d + j] * rstd[r]);
}

/* Vocabulary v, width c, n tokens (repeated ids). */
typedef struct {
    int v, c, n;
} emb_shape;

static const emb_shape k_emb[] = {{1, 1, 1}, {6, 4, 5}, {50, 33, 200}, {1000, 8, 3}};

static const emb_shape *pick_emb(cx *c) {
    const emb_shape *s = PICK(c, k_emb);
    desc(c, "V%d/C%d/N%d", s->v, s->c, s->n);
    return s;
}

void sl_conf_case_embedding_fwd(cx *c) {
    const emb_shape *sh = pick_emb(c);
    const int64_t v = sh->v, w = sh->c, n = sh->n;
    const float *table = gen_normal(c, v * w, 1.0);
    const int32_t *ids = gen_ints(c, n, 0, (int32_t)v);
    if (!c->be) {
        sl_ref_embedding_fwd(want(c, "out", n * w), ids, table, n, w);
        return;
    }
    sl_tensor *out = ACT(c, junk(c, n * w), n, w);
    sl_op_embedding_fwd(out, I32(c, ids, n), ACT(c, table, v, w));
    got(c, "out", out);
}

void sl_conf_case_embedding_bwd(cx *c) {
    const emb_shape *sh = pick_emb(c);
    const int64_t v = sh->v, w = sh->c, n = sh->n;
    const float *dt0 = gen_normal(c, v * w, 1.0), *dout = gen_normal(c, n * w, 1.0);
    const int32_t *ids = gen_ints(c, n, 0, (int32_t)v);
    if (!c->be) {
        double *dt = want(c, "dtable", v * w);
        for (int64_t i = 0; i < v * w; i++) dt[i] = dt0[i];
        sl_ref_embedding_bwd(dt, dout, ids, n, w);
    } else {
        sl_tensor *tdt = GRAD(c, dt0, v, w);
        sl_op_embedding_bwd(tdt, ACT(c, dout, n, w), I32(c, ids, n));
        got(c, "dtable", tdt);
    }
    rows_sum_bound(c, dt0, dout, ids, v, n, w);
}

void sl_conf_case_cross_entropy(cx *c) {
    static const struct {
        int n, v, mode; /* 0: dlogits separate, 1: no dlogits, 2: dlogits aliases logits */
        float scale;
    } k_shapes[] = {{1, 1, 0, 1.0f},
                    {1, 5, 0, 1.0f},
                    {5, 11, 1, 1.0f},
                    {5, 11, 2, 0.25f},
                    {37, 1000, 0, 0.5f},
                    {64, 50, 2, 1.0f},
                    /* long rows: 40,000 in place, and the LM head's 151,936 (a scale that
                     * lifts its gradients of about 1e-6 above the tolerance's floor); they
                     * came with a row cache in shared memory that an H200 measured slower
                     * (2026-11-28, reverted) and stay as the LM head's shape */
                    {2, 40000, 2, 1.0f},
                    {3, 151936, 0, 4096.0f}};
    const int64_t n = PICK(c, k_shapes)->n, v = k_shapes[c->shape].v;
    const int mode = k_shapes[c->shape].mode;
    const float scale = k_shapes[c->shape].scale;
    desc(c, "%lldx%lld%s", (long long)n, (long long)v,
         mode == 1   ? "/no-grad"
         : mode == 2 ? "/in-place"
                     : "");
    const float *logits = gen_normal(c, n * v, 2.0);
    int32_t *tg = gen_ints(c, n, 0, (int32_t)v);
    if (n > 2) tg[2] = -1; /* an ignored row */
    if (!c->be) {
        double *losses = want(c, "losses", n); /* outputs in the order of the backend's */
        sl_ref_cross_entropy(losses, mode == 1 ? NULL : want(c, "dlogits", n * v), logits, tg, n, v,
                             scale);
        return;
    }
    sl_tensor *tl = ACT(c, logits, n, v), *tloss = F32(c, junk(c, n), n);
    sl_tensor *td = mode == 0 ? ACT(c, junk(c, n * v), n, v) : mode == 2 ? tl : NULL;
    sl_op_cross_entropy(tloss, td, tl, I32(c, tg, n), scale);
    got(c, "losses", tloss);
    if (td) got(c, "dlogits", td);
}

/* ---- optimizer --------------------------------------------------------------------------- */

void sl_conf_case_adamw(cx *c) {
    /* 20000 elements: two of the CPU's 16384-element chunks. */
    static const struct {
        int n, step;
        float grad_scale;
    } k_shapes[] = {{1, 1, 1.0f}, {7, 1, 0.5f}, {20000, 7, 0.5f}, {4099, 100, 1.0f}};
    const int64_t n = PICK(c, k_shapes)->n;
    const sl_adamw_params hp = {.lr = 1e-2f,
                                .beta1 = 0.9f,
                                .beta2 = 0.95f,
                                .eps = 1e-8f,
                                .weight_decay = 0.1f,
                                .grad_scale = k_shapes[c->shape].grad_scale,
                                .step = k_shapes[c->shape].step};
    desc(c, "[%lld]/step%d", (long long)n, hp.step);
    const float *p0 = gen_normal(c, n, 1.0), *g = gen_normal(c, n, 1.0);
    const float *m0 = gen_normal(c, n, 0.01), *v0 = gen_uniform(c, n, 0.0, 1e-3);
    if (!c->be) {
        double *p = want(c, "p", n), *m = want(c, "m", n), *v = want(c, "v", n);
        for (int64_t i = 0; i < n; i++) p[i] = p0[i], m[i] = m0[i], v[i] = v0[i];
        sl_ref_adamw(p, m, v, g, n, &hp);
        double *copy = want(c, "p_copy", n);
        for (int64_t i = 0; i < n; i++) copy[i] = p[i];
        return;
    }
    sl_tensor *tp = F32(c, p0, n), *tm = F32(c, m0, n), *tv = F32(c, v0, n);
    sl_tensor *tcopy = ACT(c, junk(c, n), n);
    sl_op_adamw(tp, F32(c, g, n), tm, tv, tcopy, &hp);
    got(c, "p", tp);
    got(c, "m", tm);
    got(c, "v", tv);
    got(c, "p_copy", tcopy);
}
