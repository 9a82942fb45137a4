/*
 * backends/conformance_moe.c - the conformance cases of moe/'s operations (router, sort,
 * gather / scatter-add, combine, SwiGLU, row gate): shapes, inputs and the double references
 * (backends/conformance_impl.h).
 */
#include "backends/conformance_impl.h"

/* ---- mixture of experts ------------------------------------------------------------------ */

/* Router logits whose ranks are >= 0.1 apart (steps of 0.6, noise +-0.25) in a random order,
 * except row 0 (when n > 1): all equal, so the tie rule (lower index first) is exercised
 * exactly. Bias, when used, is a few hundredths per expert. */
static float *router_logits(cx *c, int64_t n, int e) {
    float *l = halloc(c, sizeof(float) * (size_t)(n * e));
    for (int64_t r = 0; r < n; r++) {
        const int32_t *perm = gen_perm(c, e);
        const float *noise = gen_uniform(c, e, -0.25, 0.25);
        for (int i = 0; i < e; i++)
            l[r * e + perm[i]] = n > 1 && r == 0 ? 0.5f : 0.6f * (float)i - 2.0f + noise[i];
    }
    return l;
}

static float *router_bias(cx *c, int e) {
    float *b = halloc(c, sizeof(float) * (size_t)e);
    for (int i = 0; i < e; i++) b[i] = 0.02f * (float)((i * 5) % 7 - 3);
    return b;
}

/* Precondition: within the k selected experts and the best unselected one, consecutive scores
 * are exactly tied or at least 1e-6 apart (fp32 rounding of p + bias is ~6e-8), so the
 * selection and its order do not depend on rounding. */
static void router_margin(cx *c, const double *p, const int *idx, const float *bias, int e, int k) {
    double sc[257];
    bool used[256] = {false};
    int m = 0;
    for (int j = 0; j < k; j++)
        used[idx[j]] = true, sc[m++] = p[idx[j]] + (bias ? bias[idx[j]] : 0);
    if (k < e) {
        double best = -INFINITY;
        for (int i = 0; i < e; i++)
            if (!used[i]) best = fmax(best, p[i] + (bias ? bias[i] : 0));
        sc[m++] = best;
    }
    for (int j = 1; j < m; j++) {
        const double gap = sc[j - 1] - sc[j];
        setup_check(c, gap == 0.0 || gap > 1e-6, "router scores closer than 1e-6");
    }
}

void sl_conf_case_router_fwd(cx *c) {
    static const struct {
        int n, e, k, norm, bias;
    } k_shapes[] = {{1, 1, 1, 0, 0},
                    {1, 8, 2, 1, 1},
                    {37, 16, 3, 1, 1},
                    {300, 16, 16, 0, 0},
                    {257, 33, 5, 1, 0},
                    {64, 8, 2, 0, 1},
                    {40, 128, 8, 1, 0},
                    {9, 200, 8, 0, 0}, /* the paper's E and k; E > 128 */
                    /* past CUDA's 2,112 tokens of one per warp: 3 per warp, the last block's
                     * warps with 2 tokens or none */
                    {4500, 128, 8, 1, 0}};
    const int64_t n = PICK(c, k_shapes)->n;
    const int e = k_shapes[c->shape].e, k = k_shapes[c->shape].k;
    const bool norm = k_shapes[c->shape].norm, with_bias = k_shapes[c->shape].bias;
    desc(c, "N%lld/E%d/k%d%s%s", (long long)n, e, k, norm ? "/norm" : "", with_bias ? "/bias" : "");
    const float *l = router_logits(c, n, e), *bias = with_bias ? router_bias(c, e) : NULL;
    double *p = halloc(c, sizeof(double) * (size_t)e), *w = halloc(c, sizeof(double) * (size_t)k);
    int *idx = halloc(c, sizeof(int) * (size_t)k);
    double lse;
    for (int64_t r = 0; r < n; r++) {
        sl_ref_router_row(l + r * e, bias, e, k, norm, p, idx, w, &lse);
        router_margin(c, p, idx, bias, e, k);
    }
    if (!c->be) {
        double *probs = want(c, "probs", n * e);
        int32_t *ti = halloc(c, sizeof(int32_t) * (size_t)(n * k));
        double *tw = halloc(c, sizeof(double) * (size_t)(n * k));
        for (int64_t r = 0; r < n; r++) {
            sl_ref_router_row(l + r * e, bias, e, k, norm, probs + r * e, idx, tw + r * k, &lse);
            for (int j = 0; j < k; j++) ti[r * k + j] = idx[j];
        }
        want_i32(c, "topk_idx", ti, n * k);
        double *ow = want(c, "topk_w", n * k), *stats = want(c, "stats", e + 1);
        memcpy(ow, tw, sizeof(double) * (size_t)(n * k));
        for (int64_t r = 0; r < n; r++) {
            double m = -INFINITY, s = 0.0;
            for (int i = 0; i < e; i++) stats[i] += probs[r * e + i], m = fmax(m, l[r * e + i]);
            for (int i = 0; i < e; i++) s += exp(l[r * e + i] - m);
            stats[e] += (m + log(s)) * (m + log(s));
        }
        return;
    }
    sl_tensor *tp = F32(c, junk(c, n * e), n, e), *ti = I32(c, junk_i32(c, n * k), n, k);
    sl_tensor *tw = F32(c, junk(c, n * k), n, k), *ts = F32(c, junk(c, e + 1), e + 1);
    sl_op_router_fwd(tp, ti, tw, ts, F32(c, l, n, e), bias ? F32(c, bias, e) : NULL, norm);
    got(c, "probs", tp);
    got(c, "topk_idx", ti);
    got(c, "topk_w", tw);
    got(c, "stats", ts);
}

void sl_conf_case_router_bwd(cx *c) {
    static const struct {
        int n, e, k, norm, lbl;
        float z;
    } k_shapes[] = {{1, 1, 1, 0, 0, 0.0f},      {1, 8, 2, 1, 1, 0.1f},   {37, 16, 3, 1, 1, 0.1f},
                    {300, 16, 16, 0, 1, 0.01f}, {65, 33, 5, 1, 0, 0.0f}, {64, 8, 2, 0, 0, 0.1f},
                    {40, 128, 8, 1, 1, 0.01f},  {9, 200, 8, 0, 1, 0.1f}};
    const int64_t n = PICK(c, k_shapes)->n;
    const int e = k_shapes[c->shape].e, k = k_shapes[c->shape].k;
    const bool norm = k_shapes[c->shape].norm;
    const float z = k_shapes[c->shape].z;
    desc(c, "N%lld/E%d/k%d%s%s%s", (long long)n, e, k, norm ? "/norm" : "",
         k_shapes[c->shape].lbl ? "/lbl" : "", z != 0.0f ? "/z" : "");
    /* The forward's outputs, as the backward receives them, from the double router. */
    const float *l = gen_normal(c, n * e, 1.5), *dw = gen_normal(c, n * k, 1.0);
    const float *lbl = k_shapes[c->shape].lbl ? gen_normal(c, e, 0.1) : NULL;
    double *rp = halloc(c, sizeof(double) * (size_t)(n * e));
    double *rw = halloc(c, sizeof(double) * (size_t)(n * k)), lse;
    int32_t *idx = halloc(c, sizeof(int32_t) * (size_t)(n * k));
    int *row_idx = halloc(c, sizeof(int) * (size_t)k);
    for (int64_t r = 0; r < n; r++) {
        sl_ref_router_row(l + r * e, NULL, e, k, norm, rp + r * e, row_idx, rw + r * k, &lse);
        for (int j = 0; j < k; j++) idx[r * k + j] = row_idx[j];
    }
    const float *p = derived(c, rp, n * e, false), *w = derived(c, rw, n * k, false);
    if (!c->be) {
        double *dl = want(c, "dlogits", n * e);
        for (int64_t r = 0; r < n; r++)
            sl_ref_router_bwd_row(dl + r * e, dw + r * k, p + r * e, idx + r * k, w + r * k,
                                  l + r * e, lbl, e, k, z, norm);
        return;
    }
    sl_tensor *td = F32(c, junk(c, n * e), n, e);
    sl_op_router_bwd(td, F32(c, dw, n, k), F32(c, p, n, e), I32(c, idx, n, k), F32(c, w, n, k),
                     F32(c, l, n, e), lbl ? F32(c, lbl, e) : NULL, z, norm);
    got(c, "dlogits", td);
}

void sl_conf_case_moe_sort(cx *c) {
    static const struct {
        int n, k, e;
    } k_shapes[] = {
        {1, 1, 1},  {1, 4, 8},     {37, 3, 9},    {1000, 8, 33},
        {5, 2, 64}, {600, 8, 300}, {4096, 8, 128}}; /* a micro-batch of 15A2B: 64 blocks on CUDA */
    const int64_t n = PICK(c, k_shapes)->n, k = k_shapes[c->shape].k, e = k_shapes[c->shape].e;
    desc(c, "N%lld/k%lld/E%lld", (long long)n, (long long)k, (long long)e);
    /* Experts in [0, e - 1): the last one stays empty (when there is more than one). */
    const int32_t *topk = gen_ints(c, n * k, 0, e > 1 ? (int32_t)(e - 1) : 1);
    if (!c->be) {
        int32_t *cnt = halloc(c, sizeof(int32_t) * (size_t)e);
        int32_t *st = halloc(c, sizeof(int32_t) * (size_t)(n * k));
        int32_t *sp = halloc(c, sizeof(int32_t) * (size_t)(n * k));
        sl_ref_moe_sort(cnt, st, sp, topk, n, k, e);
        want_i32(c, "counts", cnt, e);
        want_i32(c, "sorted_token", st, n * k);
        want_i32(c, "slot_pos", sp, n * k);
        return;
    }
    sl_tensor *tc = I32(c, junk_i32(c, e), e), *tst = I32(c, junk_i32(c, n * k), n * k);
    sl_tensor *tsp = I32(c, junk_i32(c, n * k), n * k);
    sl_op_moe_sort(tc, tst, tsp, I32(c, topk, n, k));
    got(c, "counts", tc);
    got(c, "sorted_token", tst);
    got(c, "slot_pos", tsp);
}

/* Counts of E experts (an empty one among them, 300 experts past one block's 256 threads),
 * added into an accumulator that holds earlier counts, and scaled into fp32. */
void sl_conf_case_moe_counts(cx *c) {
    static const struct {
        int e;
        float scale;
    } k_shapes[] = {{1, 0.5f}, {8, 0.01f}, {300, 3.0e-7f}};
    const int64_t e = PICK(c, k_shapes)->e;
    const float scale = k_shapes[c->shape].scale;
    desc(c, "E%lld/scale%g", (long long)e, (double)scale);
    int32_t *counts = gen_ints(c, e, 0, 5000), *acc0 = gen_ints(c, e, 0, 100000);
    counts[e / 2] = 0;
    if (!c->be) {
        int32_t *acc = halloc(c, sizeof(int32_t) * (size_t)e);
        for (int64_t i = 0; i < e; i++) acc[i] = acc0[i] + counts[i];
        want_i32(c, "acc", acc, e);
        double *f = want(c, "freq", e);
        for (int64_t i = 0; i < e; i++) f[i] = (double)scale * counts[i];
        return;
    }
    sl_tensor *ta = I32(c, acc0, e), *tf = F32(c, junk(c, e), e);
    sl_op_moe_counts(ta, tf, I32(c, counts, e), scale);
    got(c, "acc", ta);
    got(c, "freq", tf);
}

/* Source rows, m indices (repeated), width, spare destination rows; 2000 x 24 is above the
 * CPU's threading threshold, 0 indices is a rank that received no rows, and 3000 rows need
 * more than one 10-bit radix pass in the CUDA scatter-add's inversion of idx. */
static const struct {
    int rows, m, c, spare;
} k_rows[] = {{1, 1, 1, 0}, {11, 40, 5, 2}, {300, 2000, 24, 0}, {7, 0, 3, 1}, {3000, 2500, 8, 0}};

void sl_conf_case_gather_rows(cx *c) {
    const int64_t rows = PICK(c, k_rows)->rows, m = k_rows[c->shape].m;
    const int64_t w = k_rows[c->shape].c, dst_rows = m + k_rows[c->shape].spare;
    desc(c, "%lld<-%lldx%lld", (long long)m, (long long)rows, (long long)w);
    const float *src = gen_normal(c, rows * w, 1.0);
    const int32_t *idx = gen_ints(c, m, 0, (int32_t)rows);
    const float *dst0 = junk(c, dst_rows * w);
    if (!c->be) {
        double *dst = want(c, "dst", dst_rows * w);
        for (int64_t i = 0; i < dst_rows * w; i++)
            dst[i] = i < m * w ? src[(int64_t)idx[i / w] * w + i % w] : dst0[i];
        return;
    }
    sl_tensor *td = ACT(c, dst0, dst_rows, w);
    sl_op_gather_rows(td, ACT(c, src, rows, w), I32(c, idx, m));
    got(c, "dst", td);
}

void sl_conf_case_scatter_add_rows(cx *c) {
    const int64_t rows = PICK(c, k_rows)->rows, m = k_rows[c->shape].m, w = k_rows[c->shape].c;
    desc(c, "%lld->%lldx%lld", (long long)m, (long long)rows, (long long)w);
    const float *src = gen_normal(c, m * w, 1.0), *dst0 = gen_normal(c, rows * w, 1.0);
    const int32_t *idx = gen_ints(c, m, 0, (int32_t)rows);
    if (!c->be) {
        double *dst = want(c, "dst", rows * w);
        for (int64_t i = 0; i < rows * w; i++) dst[i] = dst0[i];
        for (int64_t i = 0; i < m * w; i++) dst[(int64_t)idx[i / w] * w + i % w] += src[i];
    } else {
        sl_tensor *td = ACT(c, dst0, rows, w);
        sl_op_scatter_add_rows(td, ACT(c, src, m, w), I32(c, idx, m));
        got(c, "dst", td);
    }
    rows_sum_bound(c, dst0, src, idx, rows, m, w);
}

/* gather_add_rows: n destination rows of width c, k positions each, a permutation of the n k
 * slots of which the last `drop` are past src's rows (half of those given as -1): dropped. Odd
 * shapes write (beta 0: the destination starts as junk, never read), even ones add. The last two
 * load 16 bytes a lane: k 12 (the CUDA kernel's batches of 8 sources, a full one and a partial
 * one, some rows with dropped positions) and k 8 written. */
static const struct {
    int n, k, c, drop;
} k_gadd[] = {{1, 1, 1, 0},     {9, 3, 7, 0},  {9, 3, 7, 8},      {500, 8, 40, 0},
              {40, 32, 5, 100}, {3, 5, 33, 4}, {300, 12, 64, 50}, {64, 8, 128, 0}};

void sl_conf_case_gather_add_rows(cx *c) {
    const int64_t n = PICK(c, k_gadd)->n, k = k_gadd[c->shape].k, w = k_gadd[c->shape].c;
    const int64_t m = n * k - k_gadd[c->shape].drop;
    const float beta = c->shape % 2 ? 0.0f : 1.0f;
    desc(c, "N%lld/k%lld/C%lld/M%lld%s", (long long)n, (long long)k, (long long)w, (long long)m,
         beta == 0.0f ? "/written" : "");
    const float *src = gen_normal(c, m * w, 1.0);
    float *dst0 = gen_normal(c, n * w, 1.0);
    if (beta == 0.0f) /* the reference's start, and the sum bound's magnitudes */
        for (int64_t i = 0; i < n * w; i++) dst0[i] = 0.0f;
    int32_t *pos = gen_perm(c, n * k);
    int32_t *idx = halloc(c, sizeof(int32_t) * (size_t)m); /* the inverse */
    for (int64_t s = 0; s < n * k; s++) {
        if (pos[s] < m)
            idx[pos[s]] = (int32_t)(s / k);
        else if (pos[s] % 2)
            pos[s] = -1;
    }
    if (!c->be) {
        double *dst = want(c, "dst", n * w);
        for (int64_t i = 0; i < n * w; i++) dst[i] = dst0[i];
        for (int64_t i = 0; i < m * w; i++) dst[(int64_t)idx[i / w] * w + i % w] += src[i];
    } else {
        sl_tensor *td = ACT(c, beta == 0.0f ? junk(c, n * w) : dst0, n, w);
        sl_op_gather_add_rows(td, ACT(c, src, m, w), I32(c, pos, n * k), (int)k, beta);
        got(c, "dst", td);
    }
    rows_sum_bound(c, dst0, src, idx, n, m, w);
}

/* Tokens n, top-k, width c; extra rows in x (combine only: slot_pos then any row of x, as
 * after capacity dropping, instead of a permutation of the n*k slots). The combine adds a
 * residual res on its second to fourth shapes (rows of 7, 40 and 33: packed and elementwise) and
 * its last; the last two load 16 bytes a lane at k 8 (one batch of the CUDA kernel's rows in
 * flight) and k 12 (a full batch and a partial one). */
static const struct {
    int n, k, c, extra;
} k_comb[] = {{1, 1, 1, 0}, {9, 3, 7, 0},    {500, 4, 40, 0}, {1, 8, 33, 0},
              {9, 3, 7, 5}, {200, 8, 64, 0}, {70, 12, 48, 3}};

void sl_conf_case_moe_combine(cx *c) {
    const int64_t n = PICK(c, k_comb)->n, k = k_comb[c->shape].k, w = k_comb[c->shape].c;
    const int64_t xr = n * k + k_comb[c->shape].extra;
    const bool res = (c->shape >= 1 && c->shape <= 3) || c->shape == 6;
    desc(c, "N%lld/k%lld/C%lld%s%s", (long long)n, (long long)k, (long long)w,
         xr > n * k ? "/extra-rows" : "", res ? "+res" : "");
    const float *x = gen_normal(c, xr * w, 1.0), *wt = gen_uniform(c, n * k, 0.0, 1.0);
    const int32_t *sp = xr > n * k ? gen_ints(c, n * k, 0, (int32_t)xr) : gen_perm(c, n * k);
    const float *r = res ? gen_normal(c, n * w, 1.0) : NULL;
    if (!c->be) {
        double *y = want(c, "y", n * w);
        sl_ref_moe_combine(y, x, sp, wt, n, k, w);
        for (int64_t i = 0; res && i < n * w; i++) y[i] += r[i];
        return;
    }
    sl_tensor *ty = ACT(c, junk(c, n * w), n, w);
    sl_op_moe_combine(ty, ACT(c, x, xr, w), I32(c, sp, n * k), F32(c, wt, n, k),
                      res ? ACT(c, r, n, w) : NULL);
    got(c, "y", ty);
}

void sl_conf_case_moe_combine_bwd(cx *c) {
    /* slot_pos must be a permutation here: dx rows no slot points at are left undefined. The
     * last two shapes ask for dx alone (dw and x NULL: the rows the deferred expert weight
     * gradients regather), packed and elementwise. */
    static const struct {
        int n, k, c;
        bool dx_only;
    } k_shapes[] = {{1, 1, 1, false},  {9, 3, 7, false},   {500, 4, 40, false},
                    {1, 8, 33, false}, {200, 8, 64, true}, {9, 3, 7, true}};
    const int64_t n = PICK(c, k_shapes)->n, k = k_shapes[c->shape].k, w = k_shapes[c->shape].c;
    const bool dx_only = k_shapes[c->shape].dx_only;
    desc(c, "N%lld/k%lld/C%lld%s", (long long)n, (long long)k, (long long)w,
         dx_only ? "/dx-alone" : "");
    const float *x = gen_normal(c, n * k * w, 1.0), *wt = gen_uniform(c, n * k, 0.0, 1.0);
    const float *dy = gen_normal(c, n * w, 1.0);
    const int32_t *sp = gen_perm(c, n * k);
    if (!c->be) {
        double *dx = want(c, "dx", n * k * w), *dw = dx_only ? NULL : want(c, "dw", n * k);
        double *scratch = dx_only ? sl_xmalloc((size_t)(n * k) * sizeof(double)) : NULL;
        sl_ref_moe_combine_bwd(dx, dw ? dw : scratch, dy, x, sp, wt, n, k, w);
        free(scratch);
        return;
    }
    sl_tensor *tdx = ACT(c, junk(c, n * k * w), n * k, w);
    sl_tensor *tdw = dx_only ? NULL : F32(c, junk(c, n * k), n, k);
    sl_op_moe_combine_bwd(tdx, tdw, ACT(c, dy, n, w), dx_only ? NULL : ACT(c, x, n * k, w),
                          I32(c, sp, n * k), F32(c, wt, n, k));
    got(c, "dx", tdx);
    if (tdw) got(c, "dw", tdw);
}

void sl_conf_case_swiglu_fwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t m = sh->rows, w = sh->w;
    const float *gu = gen_normal(c, m * 2 * w, 2.0);
    if (!c->be) {
        sl_ref_swiglu_fwd(want(c, "h", m * w), gu, m, w);
        return;
    }
    sl_tensor *th = ACT(c, junk(c, m * w), m, w);
    sl_op_swiglu_fwd(th, ACT(c, gu, m, 2 * w));
    got(c, "h", th);
}

void sl_conf_case_swiglu_bwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t m = sh->rows, w = sh->w;
    const float *gu = gen_normal(c, m * 2 * w, 2.0), *dh = gen_normal(c, m * w, 1.0);
    if (!c->be) {
        sl_ref_swiglu_bwd(want(c, "dgu", m * 2 * w), dh, gu, m, w);
        return;
    }
    sl_tensor *tdg = ACT(c, junk(c, m * 2 * w), m, 2 * w);
    sl_op_swiglu_bwd(tdg, ACT(c, dh, m, w), ACT(c, gu, m, 2 * w));
    got(c, "dgu", tdg);
}

void sl_conf_case_rowgate_fwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t m = sh->rows, w = sh->w;
    const float *x = gen_normal(c, m * w, 1.0), *s = gen_normal(c, m, 2.0);
    if (!c->be) {
        sl_ref_rowgate_fwd(want(c, "y", m * w), x, s, m, w);
        return;
    }
    sl_tensor *ty = ACT(c, junk(c, m * w), m, w);
    sl_op_rowgate_fwd(ty, ACT(c, x, m, w), ACT(c, s, m));
    got(c, "y", ty);
}

void sl_conf_case_rowgate_bwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t m = sh->rows, w = sh->w;
    const float *x = gen_normal(c, m * w, 1.0), *s = gen_normal(c, m, 2.0);
    const float *dy = gen_normal(c, m * w, 1.0);
    if (!c->be) {
        double *dx = want(c, "dx", m * w), *ds = want(c, "ds", m);
        sl_ref_rowgate_bwd(dx, ds, dy, x, s, m, w);
        return;
    }
    sl_tensor *tdx = ACT(c, junk(c, m * w), m, w), *tds = ACT(c, junk(c, m), m);
    sl_op_rowgate_bwd(tdx, tds, ACT(c, dy, m, w), ACT(c, x, m, w), ACT(c, s, m));
    got(c, "dx", tdx);
    got(c, "ds", tds);
}
