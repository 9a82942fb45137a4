/*
 * tests/test_moe_permute.c - moe_sort, gather/scatter, combine and the elementwise expert
 * activations.
 *
 * moe_sort: counts, sorted_token and slot_pos exactly equal to a naive stable sort (expert by
 * expert, slots in increasing order), slot_pos the inverse permutation, an unused expert.
 * gather_rows and scatter_add_rows: bitwise equal to the serial loops (scatter with repeated
 * destinations, on the small serial path and the large parallel path). moe_combine: within
 * 1e-6 absolute / 1e-5 relative of a double loop. Backward of moe_combine, swiglu and
 * rowgate: central finite differences of loss = sum r * output, h = 1e-2, tolerance
 * 1e-4 + 1e-3 |numeric| (the combine is bilinear, so only rounding enters).
 */
#include <stdlib.h>
#include <string.h>

#include "backends/ref_ops.h"
#include "tests/test_util.h"

/* Expert ids: k distinct experts per token from [0, e - 1): expert e - 1 is never used. */
static void random_topk(int32_t *idx, int n, int k, int e, uint64_t seed) {
    float u[64];
    for (int t = 0; t < n; t++) {
        sl_test_fill_uniform(u, k, 0, 1, seed + (uint64_t)t);
        for (int j = 0; j < k; j++) {
            int v;
            for (int tries = 0;; tries++) {
                v = ((int)(u[j] * (float)(e - 1)) + tries) % (e - 1);
                bool dup = false;
                for (int q = 0; q < j; q++) dup |= idx[t * k + q] == v;
                if (!dup) break;
            }
            idx[t * k + j] = v;
        }
    }
}

static void test_sort(int n, int k, int e) {
    int32_t *idx = malloc(sizeof(int32_t) * n * k), *st = malloc(sizeof(int32_t) * n * k);
    int32_t *sp = malloc(sizeof(int32_t) * n * k), *cnt = malloc(sizeof(int32_t) * e);
    int32_t *rst = malloc(sizeof(int32_t) * n * k), *rsp = malloc(sizeof(int32_t) * n * k);
    int32_t *rcnt = calloc((size_t)e, sizeof(int32_t));
    random_topk(idx, n, k, e, 5);
    sl_tensor *ti = sl_test_tensor(SL_I32, 2, (int64_t[]){n, k}, idx);
    sl_tensor *tc = sl_test_tensor(SL_I32, 1, (int64_t[]){e}, NULL);
    sl_tensor *tst = sl_test_tensor(SL_I32, 1, (int64_t[]){n * k}, NULL);
    sl_tensor *tsp = sl_test_tensor(SL_I32, 1, (int64_t[]){n * k}, NULL);
    sl_op_fill(tc, 99.0f); /* counts are written, not accumulated */
    sl_op_moe_sort(tc, tst, tsp, ti);
    sl_tensor_to_host(tc, cnt), sl_tensor_to_host(tst, st), sl_tensor_to_host(tsp, sp);
    sl_ref_moe_sort(rcnt, rst, rsp, idx, n, k, e);
    CHECK(memcmp(cnt, rcnt, sizeof(int32_t) * e) == 0, "moe_sort counts");
    CHECK(cnt[e - 1] == 0, "moe_sort: the unused expert has count 0");
    CHECK(memcmp(st, rst, sizeof(int32_t) * n * k) == 0, "moe_sort sorted_token (stable order)");
    CHECK(memcmp(sp, rsp, sizeof(int32_t) * n * k) == 0, "moe_sort slot_pos");
    /* Properties, independent of the reference: inverse permutation, expert blocks, order. */
    int *seen = calloc((size_t)n * k, sizeof(int)), bad = 0;
    for (int s = 0; s < n * k; s++) {
        if (sp[s] < 0 || sp[s] >= n * k || seen[sp[s]]++ || st[sp[s]] != s / k) bad++;
    }
    CHECK(bad == 0, "slot_pos is a permutation and sorted_token[slot_pos[s]] = s / k");
    int off = 0;
    for (int x = 0; x < e; x++) {
        for (int q = off; q < off + cnt[x]; q++)
            if (q > off && st[q] <= st[q - 1]) bad++; /* tokens increase within an expert */
        off += cnt[x];
    }
    for (int s = 0; s < n * k; s++) {
        int o = 0;
        for (int x = 0; x < idx[s]; x++) o += cnt[x];
        if (sp[s] < o || sp[s] >= o + cnt[idx[s]]) bad++;
    }
    CHECK(bad == 0, "moe_sort: each slot lands in its expert's block, tokens in order");
    free(seen), free(idx), free(st), free(sp), free(cnt), free(rst), free(rsp), free(rcnt);
    sl_tensor_free(ti), sl_tensor_free(tc), sl_tensor_free(tst), sl_tensor_free(tsp);
}

static void test_gather_scatter(int rows, int m, int c) {
    float *src = malloc(sizeof(float) * rows * c), *g0 = malloc(sizeof(float) * (m + 2) * c);
    float *ms = malloc(sizeof(float) * m * c), *d0 = malloc(sizeof(float) * rows * c);
    int32_t *idx = malloc(sizeof(int32_t) * m);
    sl_test_fill_normal(src, (int64_t)rows * c, 1, 61);
    sl_test_fill_normal(g0, (int64_t)(m + 2) * c, 1, 62);
    sl_test_fill_normal(ms, (int64_t)m * c, 1, 63);
    sl_test_fill_normal(d0, (int64_t)rows * c, 1, 64);
    for (int i = 0; i < m; i++) idx[i] = (int32_t)((i * 7 + i / 3) % rows); /* repeats */
    /* gather into a destination with 2 spare rows (untouched) */
    sl_tensor *ts = sl_test_tensor(SL_F32, 2, (int64_t[]){rows, c}, src);
    sl_tensor *tg = sl_test_tensor(SL_F32, 2, (int64_t[]){m + 2, c}, g0);
    sl_tensor *ti = sl_test_tensor(SL_I32, 1, (int64_t[]){m}, idx);
    sl_op_gather_rows(tg, ts, ti);
    float *got = sl_test_host_f32(tg), *ref = malloc(sizeof(float) * (m + 2) * c);
    memcpy(ref, g0, sizeof(float) * (m + 2) * c);
    for (int i = 0; i < m; i++) memcpy(ref + i * c, src + idx[i] * c, sizeof(float) * c);
    CHECK(memcmp(got, ref, sizeof(float) * (m + 2) * c) == 0, "gather_rows (m=%d c=%d)", m, c);
    free(got), free(ref);
    /* scatter-add with repeated destinations: the serial loop's order, bit for bit */
    sl_tensor *tm = sl_test_tensor(SL_F32, 2, (int64_t[]){m, c}, ms);
    sl_tensor *td = sl_test_tensor(SL_F32, 2, (int64_t[]){rows, c}, d0);
    sl_op_scatter_add_rows(td, tm, ti);
    got = sl_test_host_f32(td);
    ref = malloc(sizeof(float) * rows * c);
    memcpy(ref, d0, sizeof(float) * rows * c);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < c; j++) ref[idx[i] * c + j] += ms[i * c + j];
    CHECK(memcmp(got, ref, sizeof(float) * rows * c) == 0, "scatter_add_rows (m=%d c=%d)", m, c);
    free(got), free(ref);
    free(src), free(g0), free(ms), free(d0), free(idx);
    sl_tensor_free(ts), sl_tensor_free(tg), sl_tensor_free(ti), sl_tensor_free(tm);
    sl_tensor_free(td);
}

/* ---- combine ---- */

typedef struct {
    int n, k, c;
    float *x, *w, *r;
    int32_t *sp;
} comb_case;

static void combine(const comb_case *cc, float *y) {
    sl_tensor *tx = sl_test_tensor(SL_F32, 2, (int64_t[]){cc->n * cc->k, cc->c}, cc->x);
    sl_tensor *tw = sl_test_tensor(SL_F32, 2, (int64_t[]){cc->n, cc->k}, cc->w);
    sl_tensor *ts = sl_test_tensor(SL_I32, 1, (int64_t[]){cc->n * cc->k}, cc->sp);
    sl_tensor *ty = sl_test_tensor(SL_F32, 2, (int64_t[]){cc->n, cc->c}, NULL);
    sl_op_fill(ty, 7.0f); /* y is written */
    sl_op_moe_combine(ty, tx, ts, tw, NULL);
    sl_tensor_to_host(ty, y);
    sl_tensor_free(tx), sl_tensor_free(tw), sl_tensor_free(ts), sl_tensor_free(ty);
}

static double combine_loss(void *u) {
    const comb_case *cc = u;
    float *y = malloc(sizeof(float) * cc->n * cc->c);
    combine(cc, y);
    double l = 0.0;
    for (int i = 0; i < cc->n * cc->c; i++) l += (double)cc->r[i] * y[i];
    free(y);
    return l;
}

static void test_combine(int n, int k, int c, bool fd) {
    const int m = n * k;
    comb_case cc = {.n = n, .k = k, .c = c};
    cc.x = malloc(sizeof(float) * m * c), cc.w = malloc(sizeof(float) * m);
    cc.r = malloc(sizeof(float) * n * c), cc.sp = malloc(sizeof(int32_t) * m);
    sl_test_fill_normal(cc.x, (int64_t)m * c, 1, 71);
    sl_test_fill_uniform(cc.w, m, 0, 1, 72);
    sl_test_fill_normal(cc.r, (int64_t)n * c, 1, 73);
    for (int s = 0; s < m; s++) cc.sp[s] = (int32_t)(((int64_t)s * 37 + 11) % m); /* a bijection */
    float *y = malloc(sizeof(float) * n * c), *ref = malloc(sizeof(float) * n * c);
    combine(&cc, y);
    double *refd = malloc(sizeof(double) * (size_t)m * c);
    sl_ref_moe_combine(refd, cc.x, cc.sp, cc.w, n, k, c);
    sl_ref_f32(ref, refd, (int64_t)n * c);
    CHECK(sl_test_compare("moe_combine", y, ref, (int64_t)n * c, 1e-6, 1e-5) <= 1.0,
          "moe_combine (n=%d k=%d c=%d)", n, k, c);
    /* backward */
    sl_tensor *tx = sl_test_tensor(SL_F32, 2, (int64_t[]){m, c}, cc.x);
    sl_tensor *tw = sl_test_tensor(SL_F32, 2, (int64_t[]){n, k}, cc.w);
    sl_tensor *ts = sl_test_tensor(SL_I32, 1, (int64_t[]){m}, cc.sp);
    sl_tensor *tdy = sl_test_tensor(SL_F32, 2, (int64_t[]){n, c}, cc.r);
    sl_tensor *tdx = sl_test_tensor(SL_F32, 2, (int64_t[]){m, c}, NULL);
    sl_tensor *tdw = sl_test_tensor(SL_F32, 2, (int64_t[]){n, k}, NULL);
    sl_op_fill(tdx, 5.0f), sl_op_fill(tdw, 5.0f); /* both are written */
    sl_op_moe_combine_bwd(tdx, tdw, tdy, tx, ts, tw);
    float *gx = sl_test_host_f32(tdx), *gw = sl_test_host_f32(tdw);
    if (fd) {
        CHECK(sl_test_fd_check("combine dx", cc.x, gx, (int64_t)m * c, combine_loss, &cc, 1e-2,
                               1e-4, 1e-3, 200) == 0,
              "moe_combine_bwd dx finite differences");
        CHECK(sl_test_fd_check("combine dw", cc.w, gw, m, combine_loss, &cc, 1e-2, 1e-4, 1e-3, m) ==
                  0,
              "moe_combine_bwd dw finite differences");
    } else { /* large case (parallel path): the same formulas against double loops */
        float *rx = malloc(sizeof(float) * m * c), *rw = malloc(sizeof(float) * m);
        double *rwd = malloc(sizeof(double) * m);
        sl_ref_moe_combine_bwd(refd, rwd, cc.r, cc.x, cc.sp, cc.w, n, k, c);
        sl_ref_f32(rx, refd, (int64_t)m * c), sl_ref_f32(rw, rwd, m);
        free(rwd);
        CHECK(sl_test_compare("combine dx", gx, rx, (int64_t)m * c, 1e-6, 1e-5) <= 1.0,
              "moe_combine_bwd dx (large)");
        CHECK(sl_test_compare("combine dw", gw, rw, m, 1e-5, 1e-5) <= 1.0,
              "moe_combine_bwd dw (large)");
        free(rx), free(rw);
    }
    free(gx), free(gw), free(y), free(ref), free(refd), free(cc.x), free(cc.w), free(cc.r),
        free(cc.sp);
    sl_tensor_free(tx), sl_tensor_free(tw), sl_tensor_free(ts), sl_tensor_free(tdy);
    sl_tensor_free(tdx), sl_tensor_free(tdw);
}

/* ---- SwiGLU and row gate ---- */

typedef struct {
    int m, width; /* swiglu: gu [m, 2*width]; rowgate: x [m, width], s [m] */
    float *a, *s, *r;
} act_case;

static double swiglu_loss(void *u) {
    const act_case *ac = u;
    sl_tensor *tg = sl_test_tensor(SL_F32, 2, (int64_t[]){ac->m, 2 * ac->width}, ac->a);
    sl_tensor *th = sl_test_tensor(SL_F32, 2, (int64_t[]){ac->m, ac->width}, NULL);
    sl_op_swiglu_fwd(th, tg);
    float *h = sl_test_host_f32(th);
    double l = 0.0;
    for (int i = 0; i < ac->m * ac->width; i++) l += (double)ac->r[i] * h[i];
    free(h), sl_tensor_free(tg), sl_tensor_free(th);
    return l;
}

static void test_swiglu(void) {
    enum { M = 6, I = 10 };
    float gu[M * 2 * I], r[M * I], ref[M * I];
    double refd[M * I];
    sl_test_fill_normal(gu, M * 2 * I, 2.0f, 81);
    sl_test_fill_normal(r, M * I, 1.0f, 82);
    act_case ac = {.m = M, .width = I, .a = gu, .r = r};
    sl_tensor *tg = sl_test_tensor(SL_F32, 2, (int64_t[]){M, 2 * I}, gu);
    sl_tensor *th = sl_test_tensor(SL_F32, 2, (int64_t[]){M, I}, NULL);
    sl_tensor *tdh = sl_test_tensor(SL_F32, 2, (int64_t[]){M, I}, r);
    sl_tensor *tdg = sl_test_tensor(SL_F32, 2, (int64_t[]){M, 2 * I}, NULL);
    sl_op_swiglu_fwd(th, tg);
    float *h = sl_test_host_f32(th);
    sl_ref_swiglu_fwd(refd, gu, M, I);
    sl_ref_f32(ref, refd, M * I);
    CHECK(sl_test_compare("swiglu", h, ref, M * I, 1e-6, 1e-5) <= 1.0, "swiglu_fwd");
    sl_op_fill(tdg, 3.0f);
    sl_op_swiglu_bwd(tdg, tdh, tg);
    float *g = sl_test_host_f32(tdg);
    CHECK(sl_test_fd_check("swiglu dgu", gu, g, M * 2 * I, swiglu_loss, &ac, 1e-2, 1e-4, 1e-3,
                           M * 2 * I) == 0,
          "swiglu_bwd finite differences");
    free(h), free(g);
    sl_tensor_free(tg), sl_tensor_free(th), sl_tensor_free(tdh), sl_tensor_free(tdg);
}

static double rowgate_loss(void *u) {
    const act_case *ac = u;
    sl_tensor *tx = sl_test_tensor(SL_F32, 2, (int64_t[]){ac->m, ac->width}, ac->a);
    sl_tensor *ts = sl_test_tensor(SL_F32, 1, (int64_t[]){ac->m}, ac->s);
    sl_tensor *ty = sl_test_tensor(SL_F32, 2, (int64_t[]){ac->m, ac->width}, NULL);
    sl_op_rowgate_fwd(ty, tx, ts);
    float *y = sl_test_host_f32(ty);
    double l = 0.0;
    for (int i = 0; i < ac->m * ac->width; i++) l += (double)ac->r[i] * y[i];
    free(y), sl_tensor_free(tx), sl_tensor_free(ts), sl_tensor_free(ty);
    return l;
}

static void test_rowgate(void) {
    enum { N = 7, C = 9 };
    float x[N * C], s[N], r[N * C], ref[N * C];
    double refd[N * C];
    sl_test_fill_normal(x, N * C, 1.0f, 91);
    sl_test_fill_normal(s, N, 2.0f, 92);
    sl_test_fill_normal(r, N * C, 1.0f, 93);
    act_case ac = {.m = N, .width = C, .a = x, .s = s, .r = r};
    sl_tensor *tx = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, x);
    sl_tensor *ts = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, s);
    sl_tensor *ty = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, NULL);
    sl_tensor *tdy = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, r);
    sl_tensor *tdx = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, NULL);
    sl_tensor *tds = sl_test_tensor(SL_F32, 1, (int64_t[]){N}, NULL);
    sl_op_rowgate_fwd(ty, tx, ts);
    float *y = sl_test_host_f32(ty);
    sl_ref_rowgate_fwd(refd, x, s, N, C);
    sl_ref_f32(ref, refd, N * C);
    CHECK(sl_test_compare("rowgate", y, ref, N * C, 1e-6, 1e-5) <= 1.0, "rowgate_fwd");
    sl_op_fill(tdx, 3.0f), sl_op_fill(tds, 3.0f);
    sl_op_rowgate_bwd(tdx, tds, tdy, tx, ts);
    float *gx = sl_test_host_f32(tdx), *gs = sl_test_host_f32(tds);
    CHECK(sl_test_fd_check("rowgate dx", x, gx, N * C, rowgate_loss, &ac, 1e-2, 1e-4, 1e-3,
                           N * C) == 0,
          "rowgate_bwd dx finite differences");
    CHECK(sl_test_fd_check("rowgate ds", s, gs, N, rowgate_loss, &ac, 1e-2, 1e-4, 1e-3, N) == 0,
          "rowgate_bwd ds finite differences");
    free(y), free(gx), free(gs);
    sl_tensor_free(tx), sl_tensor_free(ts), sl_tensor_free(ty), sl_tensor_free(tdy);
    sl_tensor_free(tdx), sl_tensor_free(tds);
}

int main(void) {
    test_sort(37, 3, 9);
    test_sort(1000, 8, 33);
    test_gather_scatter(11, 40, 5);     /* serial scatter path */
    test_gather_scatter(300, 2000, 24); /* parallel (inverted-index) scatter path */
    test_combine(9, 3, 7, true);
    test_combine(500, 4, 40, false); /* parallel path */
    test_swiglu();
    test_rowgate();
    return sl_test_finish("test_moe_permute");
}
