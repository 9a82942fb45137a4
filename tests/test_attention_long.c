/* tests/test_attention_long.c - a 16k-token forward + backward whose peak memory growth stays
 * linear in the sequence length (an S x S fp32 matrix alone would be 1 GiB), with spot checks
 * of a few rows against a direct double-precision evaluation. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backends/ref_ops.h"
#include "tests/test_util.h"

enum { S = 16384, D = 16 };
#define RSS_BOUND_MIB 64.0

static double max_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* 1 when |a - b| > tol or either is NaN (`fabs(a - b) > tol` is false for a NaN) */
static int off(double a, double b, double tol) {
    return !(fabs(a - b) <= tol);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Small run first so that one-time allocations (OpenMP, OpenBLAS buffers) are in the baseline. */
static void warm_up(void) {
    const int s = 300;
    sl_tensor *x = sl_test_tensor(SL_F32, 3, (int64_t[]){s, 1, D}, NULL);
    sl_tensor *y = sl_test_tensor(SL_F32, 3, (int64_t[]){s, 1, D}, NULL);
    sl_tensor *o = sl_test_tensor(SL_F32, 3, (int64_t[]){s, 1, D}, NULL);
    sl_tensor *l = sl_test_tensor(SL_F32, 2, (int64_t[]){s, 1}, NULL);
    sl_tensor *d1 = sl_test_tensor(SL_F32, 3, (int64_t[]){s, 1, D}, NULL);
    sl_tensor *d2 = sl_test_tensor(SL_F32, 3, (int64_t[]){s, 1, D}, NULL);
    sl_tensor *d3 = sl_test_tensor(SL_F32, 3, (int64_t[]){s, 1, D}, NULL);
    sl_tensor *d4 = sl_test_tensor(SL_F32, 3, (int64_t[]){s, 1, D}, NULL);
    sl_op_fill(x, 0.5f);
    sl_op_gated_attn_fwd(y, o, l, x, x, x, x, NULL, 1, s, 0.25f);
    sl_op_gated_attn_bwd(d1, d2, d3, d4, y, x, x, x, x, NULL, o, l, 1, s, 0.25f);
    sl_tensor_free(x), sl_tensor_free(y), sl_tensor_free(o), sl_tensor_free(l);
    sl_tensor_free(d1), sl_tensor_free(d2), sl_tensor_free(d3), sl_tensor_free(d4);
}

int main(void) {
    warm_up();
    const double rss0 = max_rss_mib();
    const int64_t n = (int64_t)S * D;
    const double scale = 1.0 / sqrt((double)D);
    float *q = malloc(sizeof(float) * n), *k = malloc(sizeof(float) * n);
    float *v = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    float *r = malloc(sizeof(float) * n);
    sl_test_fill_normal(q, n, 1.0f, 1), sl_test_fill_normal(k, n, 1.0f, 2);
    sl_test_fill_normal(v, n, 1.0f, 3), sl_test_fill_normal(g, n, 1.0f, 4);
    sl_test_fill_normal(r, n, 1.0f, 5);
    int64_t sh[3] = {S, 1, D};
    sl_tensor *tq = sl_test_tensor(SL_F32, 3, sh, q), *tk = sl_test_tensor(SL_F32, 3, sh, k);
    sl_tensor *tv = sl_test_tensor(SL_F32, 3, sh, v), *tg = sl_test_tensor(SL_F32, 3, sh, g);
    sl_tensor *tdy = sl_test_tensor(SL_F32, 3, sh, r);
    sl_tensor *ty = sl_test_tensor(SL_F32, 3, sh, NULL), *to = sl_test_tensor(SL_F32, 3, sh, NULL);
    sl_tensor *tl = sl_test_tensor(SL_F32, 2, (int64_t[]){S, 1}, NULL);
    sl_tensor *tdq = sl_test_tensor(SL_F32, 3, sh, NULL),
              *tdk = sl_test_tensor(SL_F32, 3, sh, NULL);
    sl_tensor *tdv = sl_test_tensor(SL_F32, 3, sh, NULL),
              *tdg = sl_test_tensor(SL_F32, 3, sh, NULL);

    double t0 = now();
    sl_op_gated_attn_fwd(ty, to, tl, tq, tk, tv, tg, NULL, 1, S, (float)scale);
    double t1 = now();
    sl_op_gated_attn_bwd(tdq, tdk, tdv, tdg, tdy, tq, tk, tv, tg, NULL, to, tl, 1, S, (float)scale);
    double t2 = now();
    const double grow = max_rss_mib() - rss0;
    printf(
        "S=%d H=1 D=%d elementwise gate: forward %.3f s, backward %.3f s, peak RSS growth "
        "%.1f MiB (of which tensors and host copies %.1f MiB; one S x S fp32 matrix: %.0f MiB)\n",
        S, D, t1 - t0, t2 - t1, grow, (16.0 * n + S) * 4 / 1048576.0,
        (double)S * S * 4 / 1048576.0);
    CHECK(grow < RSS_BOUND_MIB, "peak RSS grew by %.1f MiB (bound %.0f MiB)", grow, RSS_BOUND_MIB);

    /* Spot checks in double: o, lse, y and dq at three query rows; dk, dv at the last keys. */
    float *o = sl_test_host_f32(to), *l = sl_test_host_f32(tl), *y = sl_test_host_f32(ty);
    float *dq = sl_test_host_f32(tdq), *dk = sl_test_host_f32(tdk), *dv = sl_test_host_f32(tdv);
    double *p = malloc(sizeof(double) * S);
    const int rows[] = {0, 1000, S - 3, S - 2, S - 1};
    double *dov = calloc((size_t)5 * D, sizeof(double)), *pl = calloc(5 * 3, sizeof(double));
    double *dsl = calloc(5 * 3, sizeof(double));
    int bad = 0;
    for (int ri = 0; ri < 5; ri++) {
        const int i = rows[ri];
        const double lse = sl_ref_attn_probs(p, q, k, 0, i, 0, S, 1, 1, D, scale);
        bad += off(lse, l[i], 1e-4 * (1 + fabs(lse)));
        double oi[D], doi[D], di = 0, dq_ref[D] = {0};
        for (int e = 0; e < D; e++) {
            oi[e] = 0;
            for (int j = 0; j <= i; j++) oi[e] += p[j] * v[(size_t)j * D + e];
            double s = sl_ref_sigmoid(g[(size_t)i * D + e]);
            bad += off(oi[e], o[(size_t)i * D + e], 1e-4);
            bad += off(oi[e] * s, y[(size_t)i * D + e], 1e-4);
            doi[e] = r[(size_t)i * D + e] * s;
            di += doi[e] * oi[e];
            dov[ri * D + e] = doi[e];
        }
        for (int j = 0; j <= i; j++) {
            double dp = 0;
            for (int e = 0; e < D; e++) dp += doi[e] * v[(size_t)j * D + e];
            double ds = p[j] * (dp - di);
            for (int e = 0; e < D; e++) dq_ref[e] += scale * ds * k[(size_t)j * D + e];
            if (j >= S - 3) pl[ri * 3 + (j - (S - 3))] = p[j], dsl[ri * 3 + (j - (S - 3))] = ds;
        }
        for (int e = 0; e < D; e++) bad += off(dq_ref[e], dq[(size_t)i * D + e], 1e-4);
    }
    /* Keys S-3 .. S-1 are seen only by query rows S-3 .. S-1 (ri = 2, 3, 4). */
    for (int jj = 0; jj < 3; jj++) {
        const int j = S - 3 + jj;
        for (int e = 0; e < D; e++) {
            double dvr = 0, dkr = 0;
            for (int ri = 2; ri < 5; ri++) {
                dvr += pl[ri * 3 + jj] * dov[ri * D + e];
                dkr += scale * dsl[ri * 3 + jj] * q[(size_t)rows[ri] * D + e];
            }
            bad += off(dvr, dv[(size_t)j * D + e], 1e-4);
            bad += off(dkr, dk[(size_t)j * D + e], 1e-4);
        }
    }
    CHECK(bad == 0,
          "%d spot-checked values differ from the double reference by > 1e-4 (or are NaN)", bad);

    free(q), free(k), free(v), free(g), free(r), free(o), free(l), free(y), free(dq), free(dk);
    free(dv), free(p), free(dov), free(pl), free(dsl);
    sl_tensor_free(tq), sl_tensor_free(tk), sl_tensor_free(tv), sl_tensor_free(tg);
    sl_tensor_free(tdy), sl_tensor_free(ty), sl_tensor_free(to), sl_tensor_free(tl);
    sl_tensor_free(tdq), sl_tensor_free(tdk), sl_tensor_free(tdv), sl_tensor_free(tdg);
    return sl_test_finish("test_attention_long");
}
