/* tests/test_attention_grad.c - finite-difference checks of the gated attention backward for
 * q, k, v and g in the three gate modes with GQA, via loss = sum(r * y) for a fixed random r. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

/* Central differences in fp32: h = 1e-2; |analytic - numeric| <= 2e-3 + 2e-2 |numeric|. */
#define FD_H    1e-2
#define FD_ATOL 2e-3
#define FD_RTOL 2e-2
#define FD_N    48 /* coordinates checked per tensor, spread over the whole array */

typedef struct {
    int b, s, h, kv, d;
    sl_gate_mode mode;
    float scale;
    float *q, *k, *v, *g, *r;
    int64_t nq, nk, ng;
} acase;

static sl_tensor *tens3(int64_t a, int64_t b, int64_t c, const float *host) {
    return sl_test_tensor(SL_F32, 3, (int64_t[]){a, b, c}, host);
}

static double attn_loss(void *u) {
    acase *c = u;
    int64_t t = (int64_t)c->b * c->s;
    sl_tensor *q = tens3(t, c->h, c->d, c->q), *k = tens3(t, c->kv, c->d, c->k);
    sl_tensor *v = tens3(t, c->kv, c->d, c->v);
    sl_tensor *g = c->ng ? tens3(t, c->h, c->ng / (t * c->h), c->g) : NULL;
    sl_tensor *y = tens3(t, c->h, c->d, NULL), *o = tens3(t, c->h, c->d, NULL);
    sl_tensor *l = sl_test_tensor(SL_F32, 2, (int64_t[]){t, c->h}, NULL);
    sl_op_gated_attn_fwd(y, o, l, q, k, v, g, NULL, c->b, c->s, c->scale);
    float *hy = sl_test_host_f32(y);
    double loss = 0;
    for (int64_t i = 0; i < c->nq; i++) loss += (double)c->r[i] * hy[i];
    free(hy);
    sl_tensor_free(q), sl_tensor_free(k), sl_tensor_free(v), sl_tensor_free(y);
    sl_tensor_free(o), sl_tensor_free(l);
    if (g) sl_tensor_free(g);
    return loss;
}

static const char *mode_name(sl_gate_mode m) {
    return m == SL_GATE_ELEMENTWISE ? "elementwise" : m == SL_GATE_HEADWISE ? "headwise" : "none";
}

static void check_grad(int b, int s, int h, int kv, int d, sl_gate_mode mode) {
    acase c = {.b = b, .s = s, .h = h, .kv = kv, .d = d, .mode = mode};
    const int64_t t = (int64_t)b * s;
    c.scale = (float)(1.0 / sqrt((double)d));
    c.nq = t * h * d, c.nk = t * kv * d;
    c.ng = mode == SL_GATE_ELEMENTWISE ? c.nq : mode == SL_GATE_HEADWISE ? t * h : 0;
    c.q = malloc(sizeof(float) * c.nq), c.k = malloc(sizeof(float) * c.nk);
    c.v = malloc(sizeof(float) * c.nk), c.r = malloc(sizeof(float) * c.nq);
    c.g = c.ng ? malloc(sizeof(float) * c.ng) : NULL;
    uint64_t seed = 1000 + (uint64_t)s * 10 + mode;
    sl_test_fill_normal(c.q, c.nq, 1.5f, seed + 1);
    sl_test_fill_normal(c.k, c.nk, 1.5f, seed + 2);
    sl_test_fill_normal(c.v, c.nk, 1.0f, seed + 3);
    sl_test_fill_normal(c.r, c.nq, 1.0f, seed + 4);
    if (c.g) sl_test_fill_normal(c.g, c.ng, 1.5f, seed + 5);

    sl_tensor *q = tens3(t, h, d, c.q), *k = tens3(t, kv, d, c.k), *v = tens3(t, kv, d, c.v);
    sl_tensor *g = c.ng ? tens3(t, h, c.ng / (t * h), c.g) : NULL;
    sl_tensor *y = tens3(t, h, d, NULL), *o = tens3(t, h, d, NULL);
    sl_tensor *l = sl_test_tensor(SL_F32, 2, (int64_t[]){t, h}, NULL);
    sl_tensor *dy = tens3(t, h, d, c.r);
    sl_tensor *dq = tens3(t, h, d, NULL), *dk = tens3(t, kv, d, NULL), *dv = tens3(t, kv, d, NULL);
    sl_tensor *dg = c.ng ? tens3(t, h, c.ng / (t * h), NULL) : NULL;
    sl_op_gated_attn_fwd(y, o, l, q, k, v, g, NULL, b, s, c.scale);
    /* Gradients of activations are written, not accumulated: start from garbage. */
    sl_op_fill(dq, 1e3f), sl_op_fill(dk, NAN), sl_op_fill(dv, -7.0f);
    if (dg) sl_op_fill(dg, NAN);
    sl_op_gated_attn_bwd(dq, dk, dv, dg, dy, q, k, v, g, NULL, o, l, b, s, c.scale);
    float *gq = sl_test_host_f32(dq), *gk = sl_test_host_f32(dk), *gv = sl_test_host_f32(dv);
    float *gg = dg ? sl_test_host_f32(dg) : NULL;

    char lbl[96];
    snprintf(lbl, sizeof lbl, "dq %s S=%d", mode_name(mode), s);
    CHECK(sl_test_fd_check(lbl, c.q, gq, c.nq, attn_loss, &c, FD_H, FD_ATOL, FD_RTOL, FD_N) == 0,
          "%s finite differences", lbl);
    snprintf(lbl, sizeof lbl, "dk %s S=%d", mode_name(mode), s);
    CHECK(sl_test_fd_check(lbl, c.k, gk, c.nk, attn_loss, &c, FD_H, FD_ATOL, FD_RTOL, FD_N) == 0,
          "%s finite differences", lbl);
    snprintf(lbl, sizeof lbl, "dv %s S=%d", mode_name(mode), s);
    CHECK(sl_test_fd_check(lbl, c.v, gv, c.nk, attn_loss, &c, FD_H, FD_ATOL, FD_RTOL, FD_N) == 0,
          "%s finite differences", lbl);
    if (gg) {
        snprintf(lbl, sizeof lbl, "dg %s S=%d", mode_name(mode), s);
        CHECK(sl_test_fd_check(lbl, c.g, gg, c.ng, attn_loss, &c, FD_H, FD_ATOL, FD_RTOL, FD_N) ==
                  0,
              "%s finite differences", lbl);
    }

    /* A second backward over the same (garbage-free) buffers gives the same bits. */
    sl_op_gated_attn_bwd(dq, dk, dv, dg, dy, q, k, v, g, NULL, o, l, b, s, c.scale);
    float *gq2 = sl_test_host_f32(dq), *gk2 = sl_test_host_f32(dk), *gv2 = sl_test_host_f32(dv);
    CHECK(memcmp(gq, gq2, sizeof(float) * c.nq) == 0 &&
              memcmp(gk, gk2, sizeof(float) * c.nk) == 0 &&
              memcmp(gv, gv2, sizeof(float) * c.nk) == 0,
          "backward is not deterministic or accumulates (%s S=%d)", mode_name(mode), s);

    /* And with one thread instead of two: the work split must not change a bit. */
    float *y2 = sl_test_host_f32(y);
    omp_set_num_threads(1);
    sl_op_gated_attn_fwd(y, o, l, q, k, v, g, NULL, b, s, c.scale);
    sl_op_gated_attn_bwd(dq, dk, dv, dg, dy, q, k, v, g, NULL, o, l, b, s, c.scale);
    omp_set_num_threads(2);
    float *y1 = sl_test_host_f32(y), *gq1 = sl_test_host_f32(dq), *gk1 = sl_test_host_f32(dk);
    float *gv1 = sl_test_host_f32(dv), *gg1 = dg ? sl_test_host_f32(dg) : NULL;
    CHECK(memcmp(y1, y2, sizeof(float) * c.nq) == 0 && memcmp(gq, gq1, sizeof(float) * c.nq) == 0 &&
              memcmp(gk, gk1, sizeof(float) * c.nk) == 0 &&
              memcmp(gv, gv1, sizeof(float) * c.nk) == 0 &&
              (!gg || memcmp(gg, gg1, sizeof(float) * c.ng) == 0),
          "results depend on the thread count (%s S=%d)", mode_name(mode), s);
    free(y1), free(y2), free(gq1), free(gk1), free(gv1), free(gg1);

    free(c.q), free(c.k), free(c.v), free(c.g), free(c.r);
    free(gq), free(gk), free(gv), free(gg), free(gq2), free(gk2), free(gv2);
    sl_tensor_free(q), sl_tensor_free(k), sl_tensor_free(v), sl_tensor_free(y), sl_tensor_free(o);
    sl_tensor_free(l), sl_tensor_free(dy), sl_tensor_free(dq), sl_tensor_free(dk);
    sl_tensor_free(dv);
    if (g) sl_tensor_free(g), sl_tensor_free(dg);
}

int main(void) {
    const sl_gate_mode modes[] = {SL_GATE_ELEMENTWISE, SL_GATE_HEADWISE, SL_GATE_NONE};
    for (int m = 0; m < 3; m++) {
        check_grad(2, 5, 4, 2, 8, modes[m]);  /* one partial tile */
        check_grad(2, 70, 4, 2, 8, modes[m]); /* crosses the 64-token tile boundary */
    }
    check_grad(1, 131, 4, 1, 16, SL_GATE_ELEMENTWISE); /* MQA, three query/key tiles */
    return sl_test_finish("test_attention_grad");
}
