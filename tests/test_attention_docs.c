/* tests/test_attention_docs.c - per-document causal masking of the gated attention (seg,
 * core/ops.h) beyond the conformance cases of test_backend_ops (which compare it with the
 * naive reference):
 *   1. seg all zero (one document per sequence) gives bitwise the outputs and gradients of
 *      seg = NULL (plain causal), at sequence lengths off the tile sizes, GQA 1/2/4, the three
 *      gates.
 *   2. Packed documents give what each document gives run alone as a sequence of its own
 *      (forward and backward; fp32 tolerance: the tiles split differently), documents of
 *      length 1 included.
 *   3. CPU only: finite differences of the backward with documents, and the same bits with one
 *      thread as with two.
 * usage: test_attention_docs [cpu|cuda] (cuda: skipped, 77, without a CUDA backend)
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

/* Packed vs alone: fp32 online softmax with different tile boundaries (observed differences
 * are rounding-level; the bound leaves a wide margin and still catches a leaked key, which
 * moves outputs by O(0.1)). */
#define ATOL 2e-5
#define RTOL 1e-4
/* Finite differences as tests/test_attention_grad.c. */
#define FD_H    1e-2
#define FD_ATOL 2e-3
#define FD_RTOL 2e-2
#define FD_N    48

static sl_backend *g_be;

static sl_tensor *t3(int64_t a, int64_t b, int64_t c, const float *host) {
    sl_tensor *t = sl_test_track(sl_tensor_new(g_be, SL_F32, 3, (int64_t[]){a, b, c}));
    if (host) sl_tensor_from_host(t, host);
    return t;
}

static const char *mode_name(sl_gate_mode m) {
    return m == SL_GATE_ELEMENTWISE ? "elementwise" : m == SL_GATE_HEADWISE ? "headwise" : "none";
}

typedef struct {
    int b, s, h, kv, d;
    sl_gate_mode mode;
    int64_t t, nq, nk, ng;
    float scale;
    float *q, *k, *v, *g, *dy;
} acase;

static acase make_case(int b, int s, int h, int kv, int d, sl_gate_mode mode, uint64_t seed) {
    acase c = {.b = b, .s = s, .h = h, .kv = kv, .d = d, .mode = mode};
    c.t = (int64_t)b * s, c.nq = c.t * h * d, c.nk = c.t * kv * d;
    c.ng = mode == SL_GATE_ELEMENTWISE ? c.nq : mode == SL_GATE_HEADWISE ? c.t * h : 0;
    c.scale = (float)(1.0 / sqrt((double)d));
    c.q = malloc(sizeof(float) * c.nq), c.k = malloc(sizeof(float) * c.nk);
    c.v = malloc(sizeof(float) * c.nk), c.dy = malloc(sizeof(float) * c.nq);
    c.g = c.ng ? malloc(sizeof(float) * c.ng) : NULL;
    sl_test_fill_normal(c.q, c.nq, 1.5f, seed + 1);
    sl_test_fill_normal(c.k, c.nk, 1.5f, seed + 2);
    sl_test_fill_normal(c.v, c.nk, 1.0f, seed + 3);
    sl_test_fill_normal(c.dy, c.nq, 1.0f, seed + 4);
    if (c.g) sl_test_fill_normal(c.g, c.ng, 1.5f, seed + 5);
    return c;
}

static void free_case(acase *c) {
    free(c->q), free(c->k), free(c->v), free(c->g), free(c->dy);
}

/* Host results of one forward + backward: y, o, lse, dq, dk, dv, dg (NULL without a gate). */
typedef struct {
    float *r[7];
    int64_t n[7];
} results;

static const char *const k_names[7] = {"y", "o", "lse", "dq", "dk", "dv", "dg"};

static results run(const acase *c, const int32_t *seg) {
    const int64_t t = c->t, gw = c->ng ? c->ng / (t * c->h) : 0;
    sl_tensor *q = t3(t, c->h, c->d, c->q), *k = t3(t, c->kv, c->d, c->k);
    sl_tensor *v = t3(t, c->kv, c->d, c->v), *dy = t3(t, c->h, c->d, c->dy);
    sl_tensor *g = c->ng ? t3(t, c->h, gw, c->g) : NULL;
    sl_tensor *sg = seg ? sl_test_matrix(g_be, SL_I32, t, 1, seg) : NULL;
    sl_tensor *y = t3(t, c->h, c->d, NULL), *o = t3(t, c->h, c->d, NULL);
    sl_tensor *l = sl_test_matrix(g_be, SL_F32, t, c->h, NULL);
    sl_tensor *dq = t3(t, c->h, c->d, NULL), *dk = t3(t, c->kv, c->d, NULL);
    sl_tensor *dv = t3(t, c->kv, c->d, NULL), *dg = c->ng ? t3(t, c->h, gw, NULL) : NULL;
    sl_op_gated_attn_fwd(y, o, l, q, k, v, g, sg, c->b, c->s, c->scale);
    sl_op_gated_attn_bwd(dq, dk, dv, dg, dy, q, k, v, g, sg, o, l, c->b, c->s, c->scale);
    const sl_tensor *outs[7] = {y, o, l, dq, dk, dv, dg};
    results r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < 7; i++)
        if (outs[i]) r.r[i] = sl_test_host_f32(outs[i]), r.n[i] = sl_tensor_numel(outs[i]);
    sl_test_release();
    return r;
}

static void free_results(results *r) {
    for (int i = 0; i < 7; i++) free(r->r[i]);
}

/* 1. seg all zero == seg NULL, to the bit. */
static void check_zero_seg(int b, int s, int h, int kv, int d, sl_gate_mode mode) {
    acase c = make_case(b, s, h, kv, d, mode, 100 + (uint64_t)s);
    int32_t *zero = calloc((size_t)c.t, sizeof(int32_t));
    results a = run(&c, NULL), z = run(&c, zero);
    for (int i = 0; i < 7; i++)
        if (a.r[i])
            CHECK(memcmp(a.r[i], z.r[i], sizeof(float) * (size_t)a.n[i]) == 0,
                  "%s: seg all zero differs from plain causal (B %d S %d H %d KV %d D %d %s)",
                  k_names[i], b, s, h, kv, d, mode_name(mode));
    free_results(&a), free_results(&z), free(zero), free_case(&c);
}

/* Copies rows [t0, t0 + n) of x [T, w] to dst [n, w], or back with `back`. */
static void rows(float *dst, float *x, int64_t t0, int64_t n, int64_t w, bool back) {
    if (back)
        memcpy(x + t0 * w, dst, sizeof(float) * (size_t)(n * w));
    else
        memcpy(dst, x + t0 * w, sizeof(float) * (size_t)(n * w));
}

/* 2. Packed documents (lengths lens[], summing to s per sequence, every sequence alike) vs
 * each document alone. */
static void check_packed(int b, int s, int h, int kv, int d, sl_gate_mode mode, const int *lens,
                         int ndocs) {
    acase c = make_case(b, s, h, kv, d, mode, 500 + (uint64_t)s * 3 + (uint64_t)mode);
    int32_t *seg = malloc(sizeof(int32_t) * (size_t)c.t);
    for (int r = 0; r < b; r++)
        for (int k = 0, start = 0; k < ndocs; start += lens[k++])
            for (int i = start; i < start + lens[k]; i++) seg[(int64_t)r * s + i] = start;
    results p = run(&c, seg);
    /* widths per token of each result: y, o [H*D], lse [H], dq [H*D], dk, dv [KV*D], dg */
    const int64_t gw = c.ng ? c.ng / c.t : 0;
    const int64_t w[7] = {h * d, h * d, h, h * d, kv * d, kv * d, gw};
    results want;
    memset(&want, 0, sizeof want);
    for (int i = 0; i < 7; i++)
        if (p.r[i]) want.r[i] = malloc(sizeof(float) * (size_t)p.n[i]), want.n[i] = p.n[i];
    for (int r = 0; r < b; r++)
        for (int k = 0, start = 0; k < ndocs; start += lens[k++]) {
            const int n = lens[k];
            const int64_t t0 = (int64_t)r * s + start;
            acase one = c;
            one.b = 1, one.s = n, one.t = n, one.nq = (int64_t)n * h * d;
            one.nk = (int64_t)n * kv * d, one.ng = gw * n;
            one.q = malloc(sizeof(float) * one.nq), one.k = malloc(sizeof(float) * one.nk);
            one.v = malloc(sizeof(float) * one.nk), one.dy = malloc(sizeof(float) * one.nq);
            one.g = gw ? malloc(sizeof(float) * one.ng) : NULL;
            rows(one.q, c.q, t0, n, h * d, false), rows(one.k, c.k, t0, n, kv * d, false);
            rows(one.v, c.v, t0, n, kv * d, false), rows(one.dy, c.dy, t0, n, h * d, false);
            if (gw) rows(one.g, c.g, t0, n, gw, false);
            results a = run(&one, NULL);
            for (int i = 0; i < 7; i++)
                if (a.r[i]) rows(a.r[i], want.r[i], t0, n, w[i], true);
            free_results(&a), free_case(&one);
        }
    for (int i = 0; i < 7; i++)
        if (p.r[i]) {
            char lbl[96];
            snprintf(lbl, sizeof lbl, "%s B%d S%d H%d KV%d D%d %s", k_names[i], b, s, h, kv, d,
                     mode_name(mode));
            CHECK(sl_test_compare(lbl, p.r[i], want.r[i], p.n[i], ATOL, RTOL) <= 1.0,
                  "%s: packed documents differ from the documents alone", lbl);
        }
    free_results(&p), free_results(&want), free(seg), free_case(&c);
}

/* 3. Finite differences with documents (CPU), loss = sum(dy * y). */
typedef struct {
    acase c;
    const int32_t *seg;
} fd_case;

static double fd_loss(void *u) {
    fd_case *f = u;
    const acase *c = &f->c;
    const int64_t gw = c->ng ? c->ng / (c->t * c->h) : 0;
    sl_tensor *q = t3(c->t, c->h, c->d, c->q), *k = t3(c->t, c->kv, c->d, c->k);
    sl_tensor *v = t3(c->t, c->kv, c->d, c->v), *g = gw ? t3(c->t, c->h, gw, c->g) : NULL;
    sl_tensor *sg = sl_test_matrix(g_be, SL_I32, c->t, 1, f->seg);
    sl_tensor *y = t3(c->t, c->h, c->d, NULL), *o = t3(c->t, c->h, c->d, NULL);
    sl_tensor *l = sl_test_matrix(g_be, SL_F32, c->t, c->h, NULL);
    sl_op_gated_attn_fwd(y, o, l, q, k, v, g, sg, c->b, c->s, c->scale);
    float *hy = sl_test_host_f32(y);
    double loss = 0.0;
    for (int64_t i = 0; i < c->nq; i++) loss += (double)c->dy[i] * hy[i];
    free(hy);
    sl_test_release();
    return loss;
}

static void check_fd(int b, int s, int h, int kv, int d, sl_gate_mode mode) {
    fd_case f = {.c = make_case(b, s, h, kv, d, mode, 900 + (uint64_t)mode)};
    int32_t *seg = malloc(sizeof(int32_t) * (size_t)f.c.t);
    uint64_t rng = 77;
    for (int r = 0; r < b; r++) /* documents of mean length 6, a length-1 one at position 1 */
        for (int i = 0, start = 0; i < s; i++) {
            if (i == 1 || i == 2 || (i > 0 && sl_test_rand_u64(&rng) % 6 == 0)) start = i;
            seg[(int64_t)r * s + i] = start;
        }
    f.seg = seg;
    results r = run(&f.c, seg);
    float *x[4] = {f.c.q, f.c.k, f.c.v, f.c.g};
    const int idx[4] = {3, 4, 5, 6};
    const int64_t n[4] = {f.c.nq, f.c.nk, f.c.nk, f.c.ng};
    for (int i = 0; i < 4; i++) {
        if (!x[i]) continue;
        char lbl[96];
        snprintf(lbl, sizeof lbl, "%s %s S=%d documents", k_names[idx[i]], mode_name(mode), s);
        CHECK(sl_test_fd_check(lbl, x[i], r.r[idx[i]], n[i], fd_loss, &f, FD_H, FD_ATOL, FD_RTOL,
                               FD_N) == 0,
              "%s finite differences", lbl);
    }
    /* one thread: the same bits */
    omp_set_num_threads(1);
    results one = run(&f.c, seg);
    omp_set_num_threads(2);
    for (int i = 0; i < 7; i++)
        if (r.r[i])
            CHECK(memcmp(r.r[i], one.r[i], sizeof(float) * (size_t)r.n[i]) == 0,
                  "%s with documents depends on the thread count (%s S=%d)", k_names[i],
                  mode_name(mode), s);
    free_results(&r), free_results(&one), free(seg), free_case(&f.c);
}

int main(int argc, char **argv) {
    const bool cuda = argc > 1 && strcmp(argv[1], "cuda") == 0;
    g_be = cuda ? sl_test_cuda_or_skip(NULL) : sl_test_cpu();
    const sl_gate_mode modes[] = {SL_GATE_ELEMENTWISE, SL_GATE_HEADWISE, SL_GATE_NONE};
    for (int m = 0; m < 3; m++) {
        check_zero_seg(2, 70, 4, 2, 16, modes[m]); /* off the 64 / 32 / 16 tiles */
        check_zero_seg(1, 131, 4, 1, 8, modes[m]); /* MQA, three CPU tiles */
        check_zero_seg(1, 45, 4, 4, 128, modes[m]);
    }
    /* documents of length 1 at both ends and in the middle; one crossing the tiles */
    static const int lens_a[] = {1, 5, 1, 1, 60, 2, 1};   /* s = 71 */
    static const int lens_b[] = {1, 1, 1, 1, 1, 1, 1, 1}; /* s = 8: every token alone */
    static const int lens_c[] = {33, 97};                 /* s = 130 */
    for (int m = 0; m < 3; m++) {
        check_packed(2, 71, 4, 2, 16, modes[m], lens_a, 7);
        check_packed(1, 8, 2, 1, 8, modes[m], lens_b, 8);
        check_packed(1, 130, 4, 4, 32, modes[m], lens_c, 2);
    }
    check_packed(1, 71, 2, 1, 128, SL_GATE_ELEMENTWISE, lens_a, 7); /* CUDA: 16-row tiles */
    if (!cuda)
        for (int m = 0; m < 3; m++) check_fd(2, 70, 4, 2, 8, modes[m]);
    return sl_test_finish(cuda ? "test_attention_docs cuda" : "test_attention_docs");
}
