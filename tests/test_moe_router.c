/*
 * tests/test_moe_router.c - router forward against a double-precision reference and router
 * backward by central finite differences on the logits.
 *
 * Forward (every combination of norm_topk and bias, k = 1, 3 and E): probs and weights
 * within 1e-6 absolute / 1e-5 relative, stats within 1e-5 relative, top-k indices exact
 * (descending score, ties to the lower index, checked on rows with exactly equal logits),
 * and the bias changes the selection but not the weights (w = probs at the chosen experts).
 *
 * Backward: loss = sum r*topk_w + sum_e c_e stats[e] + z stats[E] (the load-balancing term
 * with lbl_grad = c, and the z-loss with z_scale = z). The logits are well separated (gaps of
 * at least 0.1 between ranks, h = 1e-2), so the selection cannot flip; a precondition checks
 * the score margin (> 5e-3 >= 2 * h/4). Tolerance |analytic - numeric| <= 3e-4 + 3e-3 |numeric|.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/ref_ops.h"
#include "tests/test_util.h"

typedef struct {
    int n, e, k;
    bool norm;
    float *logits, *bias, *r, *c; /* bias, c may be NULL */
    float z;
} rcase;

static void run_fwd(const rcase *rc, const float *logits, float *probs, int32_t *idx, float *w,
                    float *stats) {
    const int n = rc->n, e = rc->e, k = rc->k;
    sl_tensor *tl = sl_test_tensor(SL_F32, 2, (int64_t[]){n, e}, logits);
    sl_tensor *tp = sl_test_tensor(SL_F32, 2, (int64_t[]){n, e}, NULL);
    sl_tensor *ti = sl_test_tensor(SL_I32, 2, (int64_t[]){n, k}, NULL);
    sl_tensor *tw = sl_test_tensor(SL_F32, 2, (int64_t[]){n, k}, NULL);
    sl_tensor *ts = sl_test_tensor(SL_F32, 1, (int64_t[]){e + 1}, NULL);
    sl_tensor *tb = rc->bias ? sl_test_tensor(SL_F32, 1, (int64_t[]){e}, rc->bias) : NULL;
    sl_op_router_fwd(tp, ti, tw, ts, tl, tb, rc->norm);
    if (probs) sl_tensor_to_host(tp, probs);
    sl_tensor_to_host(ti, idx);
    sl_tensor_to_host(tw, w);
    sl_tensor_to_host(ts, stats);
    sl_tensor_free(tl), sl_tensor_free(tp), sl_tensor_free(ti), sl_tensor_free(tw);
    sl_tensor_free(ts), sl_tensor_free(tb);
}

static void test_forward(int n, int e, int k, bool norm, bool with_bias, uint64_t seed) {
    float *l = malloc(sizeof(float) * n * e), bias[64];
    sl_test_fill_normal(l, (int64_t)n * e, 1.5f, seed);
    /* Exact ties: row 0 all equal, row 1 three equal maxima at 1, 2, 4 and equal rest. */
    for (int i = 0; i < e; i++) l[i] = 0.25f, l[e + i] = -1.0f;
    l[e + 1] = l[e + 2] = l[e + 4] = 2.0f;
    /* Bias: +0.5 on the last two experts, which forces them into the selection; -0.5 on
     * expert 0. Equal bias on tied experts keeps the ties exact. */
    for (int i = 0; i < e; i++) bias[i] = i >= e - 2 ? 0.5f : (i == 0 ? -0.5f : 0.0f);
    rcase rc = {.n = n, .e = e, .k = k, .norm = norm, .bias = with_bias ? bias : NULL};
    float *p = malloc(sizeof(float) * n * e), *w = malloc(sizeof(float) * n * k);
    float *wref = malloc(sizeof(float) * n * k), *pref = malloc(sizeof(float) * n * e);
    int32_t *idx = malloc(sizeof(int32_t) * n * k);
    float stats[65], sref[65];
    run_fwd(&rc, l, p, idx, w, stats);
    double *pd = malloc(sizeof(double) * e), wd[64], sd[65] = {0};
    int id[64], bad_idx = 0, changed = 0;
    for (int r = 0; r < n; r++) {
        double lse;
        sl_ref_router_row(l + r * e, rc.bias, e, k, norm, pd, id, wd, &lse);
        for (int i = 0; i < e; i++) pref[r * e + i] = (float)pd[i], sd[i] += pd[i];
        sd[e] += lse * lse;
        for (int j = 0; j < k; j++) {
            wref[r * k + j] = (float)wd[j];
            if (idx[r * k + j] != id[j]) {
                if (bad_idx++ < 3)
                    fprintf(stderr, "  row %d slot %d: expert %d, expected %d\n", r, j,
                            idx[r * k + j], id[j]);
            }
        }
        if (with_bias) { /* does the bias change this row's selection? */
            int id0[64];
            double w0[64];
            sl_ref_router_row(l + r * e, NULL, e, k, norm, pd, id0, w0, &lse);
            for (int j = 0; j < k; j++) changed += id0[j] != id[j];
        }
    }
    for (int i = 0; i <= e; i++) sref[i] = (float)sd[i];
    CHECK(bad_idx == 0, "router_fwd top-k indices (n=%d e=%d k=%d norm=%d bias=%d): %d wrong", n, e,
          k, norm, with_bias, bad_idx);
    CHECK(sl_test_compare("router probs", p, pref, (int64_t)n * e, 1e-6, 1e-5) <= 1.0,
          "router_fwd probs (k=%d norm=%d bias=%d)", k, norm, with_bias);
    CHECK(sl_test_compare("router weights", w, wref, (int64_t)n * k, 1e-6, 1e-5) <= 1.0,
          "router_fwd weights (k=%d norm=%d bias=%d)", k, norm, with_bias);
    CHECK(sl_test_compare("router stats", stats, sref, e + 1, 1e-6, 1e-5) <= 1.0,
          "router_fwd stats (k=%d norm=%d bias=%d)", k, norm, with_bias);
    /* Tie rows, spelled out. */
    for (int j = 0; j < k; j++) {
        int want0 = with_bias ? (j < 2 ? e - 2 + j : j - 1) : j; /* all equal: lowest first */
        if (with_bias && k == e && j == k - 1) want0 = 0;        /* expert 0 is biased last */
        CHECK(idx[j] == want0, "tie row 0 slot %d: expert %d, expected %d (k=%d bias=%d)", j,
              idx[j], want0, k, with_bias);
    }
    if (!with_bias && k <= 3) {
        const int want1[3] = {1, 2, 4};
        for (int j = 0; j < k; j++)
            CHECK(idx[k + j] == want1[j], "tie row 1 slot %d: expert %d, expected %d", j,
                  idx[k + j], want1[j]);
    }
    /* Descending order of score, weights = probs at the chosen experts (never the bias). */
    for (int r = 0; r < n; r++) {
        double sum = 0.0;
        for (int j = 0; j < k; j++) sum += p[r * e + idx[r * k + j]];
        for (int j = 0; j < k; j++) {
            const int ex = idx[r * k + j];
            if (j > 0) {
                const int pe = idx[r * k + j - 1];
                const float sp = p[r * e + pe] + (with_bias ? bias[pe] : 0.0f);
                const float sc = p[r * e + ex] + (with_bias ? bias[ex] : 0.0f);
                CHECK(sp > sc || (sp == sc && pe < ex), "row %d: slots %d, %d out of order", r,
                      j - 1, j);
            }
            const double want = norm ? p[r * e + ex] / sum : p[r * e + ex];
            CHECK(fabs(w[r * k + j] - want) <= 1e-6 + 1e-5 * want,
                  "row %d slot %d: weight %g is not probs[%d] (%g)", r, j, w[r * k + j], ex, want);
        }
    }
    if (with_bias && k < e)
        CHECK(changed > 0, "the bias must change some selections in this test (k=%d)", k);
    free(l), free(p), free(w), free(wref), free(pref), free(idx), free(pd);
}

/* ---- backward ---- */

static double router_loss(void *u) {
    const rcase *rc = u;
    const int n = rc->n, e = rc->e, k = rc->k;
    float *w = malloc(sizeof(float) * n * k), stats[65];
    int32_t *idx = malloc(sizeof(int32_t) * n * k);
    run_fwd(rc, rc->logits, NULL, idx, w, stats);
    double l = 0.0;
    for (int i = 0; i < n * k; i++) l += (double)rc->r[i] * w[i];
    if (rc->c)
        for (int i = 0; i < e; i++) l += (double)rc->c[i] * stats[i];
    l += (double)rc->z * stats[e];
    free(w), free(idx);
    return l;
}

/* Logits whose ranks are separated by >= 0.1 (steps of 0.6 with noise in [-0.25, 0.25]). */
static void separated_logits(float *l, int n, int e, uint64_t seed) {
    float noise[64];
    int perm[64];
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < e; i++) perm[i] = i;
        sl_test_fill_uniform(noise, e, 0, 1, seed + 7 * (uint64_t)r);
        for (int i = e - 1; i > 0; i--) { /* shuffle driven by the noise */
            int j = (int)(noise[i] * (float)(i + 1)) % (i + 1), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        sl_test_fill_uniform(noise, e, -0.25f, 0.25f, seed + 7 * (uint64_t)r + 3);
        for (int i = 0; i < e; i++) l[r * e + perm[i]] = 0.6f * (float)i - 2.0f + noise[i];
    }
}

static void test_backward(bool norm, bool lbl, float z, bool with_bias) {
    enum { N = 8, E = 8, K = 3 };
    float logits[N * E], r[N * K], c[E], bias[E];
    separated_logits(logits, N, E, 1000 + norm * 10 + lbl * 20 + with_bias * 40);
    sl_test_fill_normal(r, N * K, 1.0f, 51);
    sl_test_fill_normal(c, E, 1.0f, 52);
    for (int i = 0; i < E; i++) bias[i] = (i % 3 == 1) ? 0.3f : 0.0f;
    rcase rc = {.n = N,
                .e = E,
                .k = K,
                .norm = norm,
                .logits = logits,
                .r = r,
                .c = lbl ? c : NULL,
                .z = z,
                .bias = with_bias ? bias : NULL};
    /* Precondition: a logit step of h = 1e-2 moves any prob by at most h/4, so a gap of
     * 5e-3 between the k-th and (k+1)-th scores keeps the selection fixed. */
    double min_gap = 1e9;
    for (int n = 0; n < N; n++) {
        double p[E], w[K], lse, sc[E];
        int id[K];
        sl_ref_router_row(logits + n * E, rc.bias, E, K, norm, p, id, w, &lse);
        for (int i = 0; i < E; i++) sc[i] = p[i] + (rc.bias ? bias[i] : 0.0);
        double kth = sc[id[K - 1]], next = -1e9;
        for (int i = 0; i < E; i++) {
            bool chosen = false;
            for (int j = 0; j < K; j++) chosen |= id[j] == i;
            if (!chosen) next = fmax(next, sc[i]);
        }
        min_gap = fmin(min_gap, kth - next);
    }
    CHECK(min_gap > 5e-3, "test setup: selection margin %g too small for h = 1e-2", min_gap);

    sl_tensor *tl = sl_test_tensor(SL_F32, 2, (int64_t[]){N, E}, logits);
    sl_tensor *tp = sl_test_tensor(SL_F32, 2, (int64_t[]){N, E}, NULL);
    sl_tensor *ti = sl_test_tensor(SL_I32, 2, (int64_t[]){N, K}, NULL);
    sl_tensor *tw = sl_test_tensor(SL_F32, 2, (int64_t[]){N, K}, NULL);
    sl_tensor *ts = sl_test_tensor(SL_F32, 1, (int64_t[]){E + 1}, NULL);
    sl_tensor *tb = with_bias ? sl_test_tensor(SL_F32, 1, (int64_t[]){E}, bias) : NULL;
    sl_tensor *tdw = sl_test_tensor(SL_F32, 2, (int64_t[]){N, K}, r);
    sl_tensor *tc = lbl ? sl_test_tensor(SL_F32, 1, (int64_t[]){E}, c) : NULL;
    sl_tensor *td = sl_test_tensor(SL_F32, 2, (int64_t[]){N, E}, NULL);
    sl_op_fill(td, 12345.0f); /* dlogits is written, not accumulated */
    sl_op_router_fwd(tp, ti, tw, ts, tl, tb, norm);
    sl_op_router_bwd(td, tdw, tp, ti, tw, tl, tc, z, norm);
    float *g = sl_test_host_f32(td);
    int bad = sl_test_fd_check("router dlogits", logits, g, N * E, router_loss, &rc, 1e-2, 3e-4,
                               3e-3, N * E);
    CHECK(bad == 0, "router_bwd finite differences (norm=%d lbl=%d z=%g bias=%d)", norm, lbl, z,
          with_bias);
    free(g);
    sl_tensor_free(tl), sl_tensor_free(tp), sl_tensor_free(ti), sl_tensor_free(tw);
    sl_tensor_free(ts), sl_tensor_free(tb), sl_tensor_free(tdw), sl_tensor_free(tc);
    sl_tensor_free(td);
}

int main(void) {
    const int ks[3] = {1, 3, 16};
    for (int ki = 0; ki < 3; ki++)
        for (int norm = 0; norm <= 1; norm++)
            for (int b = 0; b <= 1; b++) /* 300 rows: two blocks of the stats reduction */
                test_forward(300, 16, ks[ki], norm, b, 77 + (uint64_t)ki);
    for (int norm = 0; norm <= 1; norm++) {
        test_backward(norm, false, 0.0f, false); /* combine path alone */
        test_backward(norm, true, 0.0f, false);  /* + load-balancing gradient */
        test_backward(norm, true, 0.1f, false);  /* + z-loss */
        test_backward(norm, false, 0.1f, true);  /* bias-driven selection */
    }
    return sl_test_finish("test_moe_router");
}
