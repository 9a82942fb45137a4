/* tests/test_core_ops.c - core CPU kernels against naive references and finite differences, and
 * the datasheet peaks MFU divides by (core/device_peak.h). */
#include <stdlib.h>
#include <string.h>

#include "backends/ref_ops.h"
#include "core/device_peak.h"
#include "tests/test_util.h"

static void test_matmul(void) {
    /* All four transpose combinations against a naive triple loop, with beta accumulate. */
    const int m = 7, n = 5, k = 9;
    float a[63], b[45], c0[35], ref[35];
    double refd[35];
    sl_test_fill_uniform(a, 63, -1, 1, 1);
    sl_test_fill_uniform(b, 45, -1, 1, 2);
    sl_test_fill_uniform(c0, 35, -1, 1, 3);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
            sl_tensor *A = sl_test_tensor(SL_F32, 2, sa, a), *B = sl_test_tensor(SL_F32, 2, sb, b);
            sl_tensor *C = sl_test_tensor(SL_F32, 2, (int64_t[]){m, n}, c0);
            sl_op_matmul(C, A, B, ta, tb, 0.5f, 2.0f);
            sl_ref_matmul(refd, a, b, c0, m, n, k, ta, tb, 0.5, 2.0);
            sl_ref_f32(ref, refd, m * n);
            float *got = sl_test_host_f32(C);
            CHECK(sl_test_compare("matmul", got, ref, m * n, 1e-5, 1e-5) <= 1.0,
                  "matmul trans_a=%d trans_b=%d", ta, tb);
            free(got);
            sl_tensor_free(A), sl_tensor_free(B), sl_tensor_free(C);
        }
}

/* RMSNorm: loss = sum(r * y) for a fixed random r, checked by finite differences. */
typedef struct {
    float *x, *w, *r;
    int rows, d;
} norm_case;

static double norm_loss(void *u) {
    norm_case *c = u;
    int64_t sx[2] = {c->rows, c->d};
    sl_tensor *x = sl_test_tensor(SL_F32, 2, sx, c->x),
              *w = sl_test_tensor(SL_F32, 1, sx + 1, c->w);
    sl_tensor *y = sl_test_tensor(SL_F32, 2, sx, NULL), *rs = sl_test_tensor(SL_F32, 1, sx, NULL);
    sl_op_rmsnorm_fwd(y, rs, x, w, 1e-6f);
    float *hy = sl_test_host_f32(y);
    double l = 0;
    for (int i = 0; i < c->rows * c->d; i++) l += (double)c->r[i] * hy[i];
    free(hy);
    sl_tensor_free(x), sl_tensor_free(w), sl_tensor_free(y), sl_tensor_free(rs);
    return l;
}

static void test_rmsnorm(void) {
    enum { R = 6, D = 16 };
    norm_case c = {.rows = R, .d = D};
    c.x = malloc(sizeof(float) * R * D), c.w = malloc(sizeof(float) * D);
    c.r = malloc(sizeof(float) * R * D);
    sl_test_fill_normal(c.x, R * D, 1.0f, 11);
    sl_test_fill_uniform(c.w, D, 0.5f, 1.5f, 12);
    sl_test_fill_normal(c.r, R * D, 1.0f, 13);
    int64_t sx[2] = {R, D};
    sl_tensor *x = sl_test_tensor(SL_F32, 2, sx, c.x), *w = sl_test_tensor(SL_F32, 1, sx + 1, c.w);
    sl_tensor *y = sl_test_tensor(SL_F32, 2, sx, NULL), *rs = sl_test_tensor(SL_F32, 1, sx, NULL);
    sl_tensor *dy = sl_test_tensor(SL_F32, 2, sx, c.r), *dx = sl_test_tensor(SL_F32, 2, sx, NULL);
    sl_tensor *dw = sl_test_tensor(SL_F32, 1, sx + 1, NULL);
    sl_op_rmsnorm_fwd(y, rs, x, w, 1e-6f);
    sl_op_rmsnorm_bwd(dx, dw, dy, NULL, x, w, rs, NULL);
    float *gx = sl_test_host_f32(dx), *gw = sl_test_host_f32(dw);
    CHECK(sl_test_fd_check("rmsnorm dx", c.x, gx, R * D, norm_loss, &c, 1e-2, 2e-3, 2e-2, 96) == 0,
          "rmsnorm dx finite differences");
    CHECK(sl_test_fd_check("rmsnorm dw", c.w, gw, D, norm_loss, &c, 1e-2, 2e-3, 2e-2, 16) == 0,
          "rmsnorm dw finite differences");
    /* Parameter gradients accumulate: a second backward doubles dw. */
    sl_op_rmsnorm_bwd(dx, dw, dy, NULL, x, w, rs, NULL);
    float *gw2 = sl_test_host_f32(dw);
    for (int i = 0; i < D; i++) gw[i] *= 2;
    CHECK(sl_test_compare("rmsnorm dw accumulate", gw2, gw, D, 1e-6, 1e-5) <= 1.0,
          "rmsnorm dw accumulates");
    free(gx), free(gw), free(gw2), free(c.x), free(c.w), free(c.r);
    sl_tensor_free(x), sl_tensor_free(w), sl_tensor_free(y), sl_tensor_free(rs);
    sl_tensor_free(dy), sl_tensor_free(dx), sl_tensor_free(dw);
}

/* Cross-entropy: mean loss over non-ignored rows; gradient by finite differences. */
typedef struct {
    float *logits;
    int32_t *tg;
    int n, v;
} ce_case;

static double ce_loss(void *u) {
    ce_case *c = u;
    sl_tensor *l = sl_test_tensor(SL_F32, 2, (int64_t[]){c->n, c->v}, c->logits);
    sl_tensor *t = sl_test_tensor(SL_I32, 1, (int64_t[]){c->n}, c->tg);
    sl_tensor *ls = sl_test_tensor(SL_F32, 1, (int64_t[]){c->n}, NULL);
    sl_op_cross_entropy(ls, NULL, l, t, 1.0f);
    double s = sl_test_op_scalar(sl_op_sum, ls);
    sl_tensor_free(l), sl_tensor_free(t), sl_tensor_free(ls);
    return s;
}

static void test_cross_entropy(void) {
    enum { N = 5, V = 11 };
    ce_case c = {.n = N, .v = V};
    float logits[N * V];
    int32_t tg[N] = {3, 0, -1, 10, 7};
    sl_test_fill_normal(logits, N * V, 2.0f, 21);
    c.logits = logits, c.tg = tg;
    sl_tensor *l = sl_test_tensor(SL_F32, 2, (int64_t[]){N, V}, logits);
    sl_tensor *t = sl_test_tensor(SL_I32, 1, (int64_t[]){N}, tg);
    sl_tensor *ls = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, NULL);
    sl_tensor *dl = sl_test_tensor(SL_F32, 2, (int64_t[]){N, V}, NULL);
    sl_op_cross_entropy(ls, dl, l, t, 1.0f);
    float *hl = sl_test_host_f32(ls), *g = sl_test_host_f32(dl);
    double ref[N];
    sl_ref_cross_entropy(ref, NULL, logits, tg, N, V, 1.0);
    for (int r = 0; r < N; r++)
        CHECK(fabs(hl[r] - ref[r]) < 1e-5, "cross-entropy row %d: %g vs %g", r, hl[r], ref[r]);
    CHECK(sl_test_fd_check("ce dlogits", logits, g, N * V, ce_loss, &c, 1e-2, 1e-3, 1e-2, 55) == 0,
          "cross-entropy gradient");
    free(hl), free(g);
    sl_tensor_free(l), sl_tensor_free(t), sl_tensor_free(ls), sl_tensor_free(dl);
}

static void test_embedding(void) {
    enum { V = 6, C = 4, N = 5 };
    float table[V * C], dout[N * C];
    int32_t ids[N] = {2, 5, 2, 0, 3};
    sl_test_fill_normal(table, V * C, 1, 31);
    sl_test_fill_normal(dout, N * C, 1, 32);
    sl_tensor *tt = sl_test_tensor(SL_F32, 2, (int64_t[]){V, C}, table);
    sl_tensor *ti = sl_test_tensor(SL_I32, 1, (int64_t[]){N}, ids);
    sl_tensor *to = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, NULL);
    sl_tensor *td = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, dout);
    sl_tensor *dt = sl_test_tensor(SL_F32, 2, (int64_t[]){V, C}, NULL);
    sl_op_embedding_fwd(to, ti, tt);
    sl_op_embedding_bwd(dt, td, ti);
    float *o = sl_test_host_f32(to), *d = sl_test_host_f32(dt);
    float ref[V * C] = {0};
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++) {
            CHECK(o[i * C + j] == table[ids[i] * C + j], "embedding row %d", i);
            ref[ids[i] * C + j] += dout[i * C + j];
        }
    CHECK(sl_test_compare("embedding grad", d, ref, V * C, 1e-6, 1e-6) <= 1.0,
          "embedding gradient (repeated ids accumulate)");
    free(o), free(d);
    sl_tensor_free(tt), sl_tensor_free(ti), sl_tensor_free(to), sl_tensor_free(td),
        sl_tensor_free(dt);
}

static void test_adamw(void) {
    enum { N = 8 };
    float p[N], g[N], pref[N];
    double pd[N], m[N] = {0}, v[N] = {0};
    sl_test_fill_normal(p, N, 1, 41);
    sl_test_fill_normal(g, N, 1, 42);
    for (int i = 0; i < N; i++) pd[i] = p[i];
    sl_tensor *tp = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, p);
    sl_tensor *tg = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, g);
    sl_tensor *tm = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, NULL);
    sl_tensor *tv = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, NULL);
    sl_adamw_params hp = {.lr = 0.01f,
                          .beta1 = 0.9f,
                          .beta2 = 0.95f,
                          .eps = 1e-8f,
                          .weight_decay = 0.1f,
                          .grad_scale = 0.5f};
    for (int step = 1; step <= 3; step++) {
        hp.step = step;
        sl_op_adamw(tp, tg, tm, tv, NULL, &hp);
        sl_ref_adamw(pd, m, v, g, N, &hp);
    }
    sl_ref_f32(pref, pd, N);
    float *got = sl_test_host_f32(tp);
    CHECK(sl_test_compare("adamw", got, pref, N, 1e-6, 1e-5) <= 1.0, "adamw matches reference");
    free(got);
    sl_tensor_free(tp), sl_tensor_free(tg), sl_tensor_free(tm), sl_tensor_free(tv);
}

static void test_views(void) {
    float data[12];
    for (int i = 0; i < 12; i++) data[i] = (float)i;
    sl_tensor *t = sl_test_tensor(SL_F32, 2, (int64_t[]){3, 4}, data);
    sl_tensor *v = sl_tensor_view2(t, 4, 2, 4);
    CHECK(sl_tensor_rows(v) == 2 && sl_tensor_dim(v, -1) == 4, "view shape");
    sl_op_scale(v, 2.0f);
    float *h = sl_test_host_f32(t);
    CHECK(h[0] == 0 && h[3] == 3 && h[4] == 8 && h[11] == 22, "view aliases its base");
    CHECK(fabs(sl_test_op_scalar(sl_op_sum, v) - 2 * (4 + 5 + 6 + 7 + 8 + 9 + 10 + 11)) < 1e-6,
          "sum over a view");
    free(h);
    sl_tensor_free(v), sl_tensor_free(t);
}

/* Device names as cudaDeviceProp reports them map to their datasheet entry, variants first. */
static void test_device_peak(void) {
    static const struct {
        const char *name, *model;
        double tflops;
    } k[] = {
        {"NVIDIA H100 80GB HBM3", "H100 SXM", 989}, {"NVIDIA H100 PCIe", "H100 PCIe", 756},
        {"NVIDIA H100 NVL", "H100 NVL", 835},       {"NVIDIA H200", "H200 SXM", 989},
        {"NVIDIA H200 NVL", "H200 NVL", 835},       {"NVIDIA GH200 480GB", "GH200", 989},
        {"NVIDIA A100-SXM4-80GB", "A100", 312},     {"NVIDIA B200", "B200", 2250},
        {"sluice SIMT emulator", NULL, 0},          {"NVIDIA GeForce RTX 3090", NULL, 0},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const char *model = "unset";
        const double t = sl_device_datasheet_bf16_tflops(k[i].name, &model);
        CHECK(t == k[i].tflops && (k[i].model ? model && strcmp(model, k[i].model) == 0 : !model),
              "%s: %g TFLOP/s (%s), want %g (%s)", k[i].name, t, model ? model : "none",
              k[i].tflops, k[i].model ? k[i].model : "none");
    }
}

int main(void) {
    test_device_peak();
    test_matmul();
    test_rmsnorm();
    test_cross_entropy();
    test_embedding();
    test_adamw();
    test_views();
    return sl_test_finish("test_core_ops");
}
