/*
 * tests/test_moe_gemm.c - grouped GEMM (forward, both B layouts, beta 0/1) and its weight
 * gradient against naive double-precision loops, under every threading strategy.
 *
 * Uneven counts include zero-count groups (first, middle and last); rows beyond sum(counts)
 * hold sentinel values that must stay untouched (C) or be ignored (A, dY, X). Strategies
 * must agree bit for bit (each output element comes from exactly one GEMM).
 */
#include <stdlib.h>
#include <string.h>

#include "moe/kernels_cpu.h"
#include "backends/ref_ops.h"
#include "tests/test_util.h"

static const sl_ggemm_mode modes[3] = {SL_GGEMM_AUTO, SL_GGEMM_SERIAL_GROUPS,
                                       SL_GGEMM_PARALLEL_GROUPS};

typedef struct {
    const char *name;
    int groups;
    const int64_t *counts;
    int64_t rows; /* rows of A and C (>= sum of counts) */
    int64_t r, s; /* B is [groups, r, s] */
} gcase;

static int64_t total(const gcase *c) {
    int64_t n = 0;
    for (int g = 0; g < c->groups; g++) n += c->counts[g];
    return n;
}

static void test_forward(const gcase *gc) {
    const int64_t n = total(gc), rows = gc->rows, r = gc->r, s = gc->s, G = gc->groups;
    for (int tb = 0; tb < 2; tb++) {
        const int64_t in = tb ? s : r, out = tb ? r : s;
        float *a = malloc(sizeof(float) * rows * in), *b = malloc(sizeof(float) * G * r * s);
        float *c0 = malloc(sizeof(float) * rows * out), *ref = malloc(sizeof(float) * rows * out);
        double *refd = malloc(sizeof(double) * rows * out);
        sl_test_fill_uniform(a, rows * in, -1, 1, 100 + tb);
        sl_test_fill_uniform(b, G * r * s, -1, 1, 200 + tb);
        sl_test_fill_uniform(c0, rows * out, -1, 1, 300 + tb);
        /* Rows of A past the groups are poison: reading them would show in C. */
        for (int64_t i = n * in; i < rows * in; i++) a[i] = 1e30f;
        for (int beta = 0; beta <= 1; beta++) {
            sl_ref_grouped_matmul(refd, a, b, c0, gc->counts, gc->groups, rows, r, s, tb, beta);
            sl_ref_f32(ref, refd, rows * out);
            float *first = NULL;
            for (int mi = 0; mi < 3; mi++) {
                sl_cpu_grouped_matmul_set_mode(modes[mi]);
                sl_tensor *ta = sl_test_tensor(SL_F32, 2, (int64_t[]){rows, in}, a);
                sl_tensor *tbt = sl_test_tensor(SL_F32, 3, (int64_t[]){G, r, s}, b);
                sl_tensor *tc = sl_test_tensor(SL_F32, 2, (int64_t[]){rows, out}, c0);
                sl_op_grouped_matmul(tc, ta, tbt, sl_counts_host(gc->counts, gc->groups),
                                     gc->groups, tb, (float)beta);
                float *got = sl_test_host_f32(tc);
                CHECK(sl_test_compare("grouped_matmul", got, ref, n * out, 1e-5, 1e-5) <= 1.0,
                      "%s: grouped_matmul trans_b=%d beta=%d mode=%d", gc->name, tb, beta,
                      modes[mi]);
                CHECK(memcmp(got + n * out, c0 + n * out, sizeof(float) * (rows - n) * out) == 0,
                      "%s: rows beyond sum(counts) untouched (trans_b=%d beta=%d mode=%d)",
                      gc->name, tb, beta, modes[mi]);
                if (!first)
                    first = got;
                else {
                    CHECK(memcmp(first, got, sizeof(float) * rows * out) == 0,
                          "%s: mode %d differs bitwise from AUTO (trans_b=%d beta=%d)", gc->name,
                          modes[mi], tb, beta);
                    free(got);
                }
                sl_tensor_free(ta), sl_tensor_free(tbt), sl_tensor_free(tc);
            }
            free(first);
        }
        free(a), free(b), free(c0), free(ref), free(refd);
    }
    sl_cpu_grouped_matmul_set_mode(SL_GGEMM_AUTO);
}

static void test_dw(const gcase *gc) {
    const int64_t n = total(gc), rows = gc->rows, r = gc->r, s = gc->s, G = gc->groups;
    float *dy = malloc(sizeof(float) * rows * r), *x = malloc(sizeof(float) * rows * s);
    float *w0 = malloc(sizeof(float) * G * r * s), *ref = malloc(sizeof(float) * G * r * s);
    sl_test_fill_uniform(dy, rows * r, -1, 1, 401);
    sl_test_fill_uniform(x, rows * s, -1, 1, 402);
    sl_test_fill_uniform(w0, G * r * s, -1, 1, 403);
    for (int64_t i = n * r; i < rows * r; i++) dy[i] = 1e30f;
    for (int64_t i = n * s; i < rows * s; i++) x[i] = 1e30f;
    double *refd = malloc(sizeof(double) * G * r * s);
    for (int64_t i = 0; i < G * r * s; i++) refd[i] = w0[i];
    sl_ref_grouped_matmul_dw(refd, dy, x, gc->counts, gc->groups, r, s);
    sl_ref_f32(ref, refd, G * r * s);
    free(refd);
    float *first = NULL;
    for (int mi = 0; mi < 3; mi++) {
        sl_cpu_grouped_matmul_set_mode(modes[mi]);
        sl_tensor *tdy = sl_test_tensor(SL_F32, 2, (int64_t[]){rows, r}, dy);
        sl_tensor *tx = sl_test_tensor(SL_F32, 2, (int64_t[]){rows, s}, x);
        sl_tensor *tw = sl_test_tensor(SL_F32, 3, (int64_t[]){G, r, s}, w0);
        sl_op_grouped_matmul_dw(tw, tdy, tx, sl_counts_host(gc->counts, gc->groups), gc->groups,
                                1.0f, NULL);
        float *got = sl_test_host_f32(tw);
        CHECK(sl_test_compare("grouped_matmul_dw", got, ref, G * r * s, 1e-5, 1e-5) <= 1.0,
              "%s: grouped_matmul_dw mode=%d", gc->name, modes[mi]);
        for (int g = 0; g < G; g++)
            if (gc->counts[g] == 0)
                CHECK(memcmp(got + g * r * s, w0 + g * r * s, sizeof(float) * r * s) == 0,
                      "%s: zero-count group %d keeps its gradient (mode=%d)", gc->name, g,
                      modes[mi]);
        if (!first)
            first = got;
        else {
            CHECK(memcmp(first, got, sizeof(float) * G * r * s) == 0,
                  "%s: dw mode %d differs bitwise from AUTO", gc->name, modes[mi]);
            free(got);
        }
        sl_tensor_free(tdy), sl_tensor_free(tx), sl_tensor_free(tw);
    }
    free(first);
    sl_cpu_grouped_matmul_set_mode(SL_GGEMM_AUTO);
    free(dy), free(x), free(w0), free(ref);
}

int main(void) {
    /* Small: zero-count groups first, in the middle and last; 3 spare rows. */
    static const int64_t c1[6] = {
        0, 3, 7, 1, 0, 4,
    };
    /* One group larger than total/threads (AUTO runs it with a threaded GEMM, the rest in
     * parallel over groups), plus empty groups. */
    static const int64_t c2[8] = {50, 0, 5, 3, 9, 0, 1, 22};
    /* Many small uneven groups (the expert-parallel shape, scaled down). */
    int64_t c3[32];
    for (int g = 0; g < 32; g++) c3[g] = (g * 7) % 11;
    const gcase cases[] = {
        {"small", 6, c1, 18, 6, 5},
        {"one large group", 8, c2, 95, 24, 16},
        {"many groups", 32, c3, 180, 33, 12},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_forward(&cases[i]);
        test_dw(&cases[i]);
    }
    return sl_test_finish("test_moe_gemm");
}
