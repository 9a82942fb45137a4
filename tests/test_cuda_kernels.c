/*
 * tests/test_cuda_kernels.c - the CUDA kernels of core/ and trainer/ (elementwise, reductions,
 * RMSNorm, embedding, cross-entropy, AdamW) on the paths the conformance test
 * (test_backend_ops) does not reach with its small shapes, against the CPU backend:
 *   - sum/sumsq over millions of elements (a gradient norm's size; both backends accumulate
 *     in double and round once, so the bound is two fp32 roundings plus the double sums' own
 *     error, derived from n and the terms), bitwise equal run after run;
 *   - element-by-element fallbacks: views at an odd offset (not 16-byte aligned);
 *   - RMSNorm rows wider than one column window (the backward's dw registers), and the row
 *     path against the window path (core/rmsnorm.cu, SLUICE_RMSNORM): the same bits;
 *   - embedding backward over a 151,936-id vocabulary (three radix passes) with many 1024-token
 *     tiles and one id taking 40% of the tokens: bitwise equal to the CPU in fp32 (both add
 *     each id's rows in token order, starting from dtable), and (`test_cuda_kernels atomic`)
 *     the atomic variant of non-deterministic mode within the fp32 any-order summation bound
 *     of each element's summands; out-of-range ids (NaN rows forward, dropped
 *     backward);
 *   - cross-entropy over a 151,936-wide row, in place, fp32 and bf16, and a target outside
 *     the vocabulary (NaN loss);
 *   - AdamW's memory-walk forms (trainer/adamw.cu, SLUICE_ADAMW): bitwise the same p, m, v and
 *     bf16 copy over 3,000,003 elements.
 * Runs wherever the build has the CUDA backend (on a GPU, or emulated on the CPU); elsewhere
 * it reports itself skipped. $SLUICE_TEST_REDUCE_N overrides the reductions' length.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

static sl_backend *g_cpu, *g_cuda;
static uint64_t g_seed = 12345;

/* ---- helpers ------------------------------------------------------------------------------ */

/* One AdamW step's hyperparameters for the AdamW checks (a later step: bias corrections not 1). */
static const sl_adamw_params k_adamw_hp = {.lr = 1e-2f,
                                           .beta1 = 0.9f,
                                           .beta2 = 0.95f,
                                           .eps = 1e-8f,
                                           .weight_decay = 0.1f,
                                           .grad_scale = 0.5f,
                                           .step = 3};

static float *normal(int64_t n, float std) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    sl_test_fill_normal(x, n, std, g_seed++);
    return x;
}

static float *uniform(int64_t n, float lo, float hi) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    sl_test_fill_uniform(x, n, lo, hi, g_seed++);
    return x;
}

static bool same_bits(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

static void compare(const char *what, const sl_tensor *got, const sl_tensor *want, double atol,
                    double rtol) {
    float *g = sl_test_host_floats(got), *w = sl_test_host_floats(want);
    const double r = sl_test_compare(what, g, w, sl_tensor_numel(want), atol, rtol);
    CHECK(r <= 1.0, "%s: error %.3g of the tolerance", what, r);
    free(g);
    free(w);
}

static double scalar(void (*op)(sl_tensor *, const sl_tensor *), const sl_tensor *x) {
    sl_tensor *out = sl_tensor_new1(sl_tensor_backend(x), SL_F32, 1);
    op(out, x);
    float v;
    sl_tensor_to_host(out, &v);
    sl_tensor_free(out);
    return v;
}

/* ---- reductions -------------------------------------------------------------------------- */

/* Both backends accumulate a sum or sumsq in double and round it once to fp32, so the two
 * results are each within half an fp32 ulp (2^-24 relative) of their double sums, which differ
 * from the exact sum by at most (n - 1) 2^-53 sum |x| each (any order). The bound is derived
 * from the terms, not a fixed epsilon: |got - want| <= (2^-23 + 2 (n - 1) 2^-53) sum |x| (all
 * terms here are non-negative, so sum |x| is the CPU's result to within that much). */
static double reduce_bound(int64_t n, double sum_abs) {
    return (ldexp(1.0, -23) + 2.0 * (double)(n - 1) * ldexp(1.0, -53)) * sum_abs * (1.0 + 1e-6);
}

static void test_reductions(void) {
    int64_t n = 8388613; /* 2^23 + 5: 1024 partial blocks of many packs, and a tail */
    const char *env = getenv("SLUICE_TEST_REDUCE_N");
    if (env && atoll(env) > 0) n = atoll(env);
    float *g = normal(n, 1e-2f), *u = uniform(n, 0.0f, 1.0f);
    sl_tensor *cg = sl_test_matrix(g_cpu, SL_F32, n, 1, g),
              *dg = sl_test_matrix(g_cuda, SL_F32, n, 1, g);
    sl_tensor *cu = sl_test_matrix(g_cpu, SL_F32, n, 1, u),
              *du = sl_test_matrix(g_cuda, SL_F32, n, 1, u);
    const double want_sq = scalar(sl_op_sumsq, cg), want_s = scalar(sl_op_sum, cu);
    const double got_sq = scalar(sl_op_sumsq, dg), got_s = scalar(sl_op_sum, du);
    printf("  sumsq of %lld: relative error %.2e; sum: %.2e\n", (long long)n,
           fabs(got_sq - want_sq) / want_sq, fabs(got_s - want_s) / want_s);
    CHECK(fabs(got_sq - want_sq) <= reduce_bound(n, want_sq), "sumsq: %.9g, CPU %.9g", got_sq,
          want_sq);
    CHECK(fabs(got_s - want_s) <= reduce_bound(n, want_s), "sum: %.9g, CPU %.9g", got_s, want_s);
    CHECK(scalar(sl_op_sumsq, dg) == got_sq, "sumsq is the same run after run");
    /* bf16 input: the same values rounded on both sides. */
    for (int64_t i = 0; i < n; i++) g[i] = sl_test_bf16_round(g[i]);
    sl_tensor_from_host(cg, g);
    sl_tensor *db = sl_test_ftensor(g_cuda, SL_BF16, n, 1, g);
    const double want_b = scalar(sl_op_sumsq, cg), got_b = scalar(sl_op_sumsq, db);
    CHECK(fabs(got_b - want_b) <= reduce_bound(n, want_b), "bf16 sumsq: %.9g, CPU %.9g", got_b,
          want_b);
    /* Not 16-byte aligned: element by element. */
    sl_tensor *cv = sl_test_track(sl_tensor_view1(cu, 1, n - 1)),
              *dv = sl_test_track(sl_tensor_view1(du, 1, n - 1));
    const double want_v = scalar(sl_op_sum, cv), got_v = scalar(sl_op_sum, dv);
    CHECK(fabs(got_v - want_v) <= reduce_bound(n - 1, want_v), "sum of a view: %.9g, CPU %.9g",
          got_v, want_v);
    sl_tensor *none = sl_test_track(sl_tensor_view1(du, 3, 0));
    CHECK(scalar(sl_op_sum, none) == 0.0, "the sum of nothing is 0");
    sl_test_release();
    free(g);
    free(u);
}

/* ---- maps and AdamW on misaligned views ---------------------------------------------------- */

/* A view of elements [1, n + 1) of a new tensor: 4 bytes past a 16-byte boundary. */
static sl_tensor *odd_view(sl_backend *be, sl_dtype dt, int64_t n, const float *h) {
    sl_tensor *base = sl_test_track(sl_tensor_new1(be, dt, n + 1)),
              *v = sl_test_track(sl_tensor_view1(base, 1, n));
    if (h && dt == SL_F32) sl_tensor_from_host(v, h);
    if (h && dt == SL_BF16) sl_op_convert(v, sl_test_matrix(be, SL_F32, n, 1, h));
    return v;
}

/* fill of an index tensor (the value truncated to an integer, as the CPU does): aligned
 * (4 per store and a tail) and a view one element in. */
static void test_fill_i32(void) {
    const int64_t n = 1003;
    sl_tensor *t = sl_test_matrix(g_cuda, SL_I32, n, 1, NULL),
              *v = sl_test_track(sl_tensor_view1(t, 1, n - 2));
    int32_t *h = malloc(sizeof(int32_t) * n);
    sl_op_fill(t, 7.9f);
    sl_op_fill(v, -3.0f);
    sl_tensor_to_host(t, h);
    bool ok = h[0] == 7 && h[n - 1] == 7;
    for (int64_t i = 1; i < n - 1; i++) ok &= h[i] == -3;
    CHECK(ok, "fill of i32 tensors and views");
    sl_test_release();
    free(h);
}

static void test_unaligned(void) {
    const int64_t n = 1001;
    float *a = normal(n, 1.0f), *b = normal(n, 1.0f), *y = normal(n, 1.0f);
    sl_tensor *ca = odd_view(g_cpu, SL_F32, n, a), *cb = odd_view(g_cpu, SL_F32, n, b);
    sl_tensor *da = odd_view(g_cuda, SL_F32, n, a), *db = odd_view(g_cuda, SL_F32, n, b);
    sl_op_add(ca, ca, cb);
    sl_op_add(da, da, db);
    compare("add (views, y = a)", da, ca, 1e-6, 1e-6);
    sl_op_axpy(cb, ca, -0.7f);
    sl_op_axpy(db, da, -0.7f);
    compare("axpy (views)", db, cb, 1e-6, 1e-6);
    sl_op_scale(cb, 1.37f);
    sl_op_scale(db, 1.37f);
    compare("scale (views)", db, cb, 1e-6, 1e-6);
    /* fp32 view -> bf16 view (2 bytes past a boundary) -> fp32 view: bf16 rounding, exactly */
    sl_tensor *h16 = odd_view(g_cuda, SL_BF16, n, NULL), *back = odd_view(g_cuda, SL_F32, n, NULL);
    sl_tensor *src = odd_view(g_cuda, SL_F32, n, y);
    sl_op_convert(h16, src);
    sl_op_convert(back, h16);
    float *got = sl_test_host_floats(back);
    bool ok = true;
    for (int64_t i = 0; i < n; i++) ok &= got[i] == sl_test_bf16_round(y[i]);
    CHECK(ok, "convert of views rounds to nearest even and back exactly");
    free(got);
    /* add with a bf16 operand on views: y = a + bf16(b) */
    sl_tensor *cb16 = odd_view(g_cpu, SL_F32, n, NULL);
    float *br = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) br[i] = sl_test_bf16_round(b[i]);
    sl_tensor_from_host(cb16, br);
    sl_tensor *db16 = odd_view(g_cuda, SL_BF16, n, b);
    sl_tensor *ya = odd_view(g_cpu, SL_F32, n, NULL), *yd = odd_view(g_cuda, SL_F32, n, NULL);
    sl_op_add(ya, ca, cb16);
    sl_op_add(yd, da, db16);
    compare("add fp32 + bf16 (views)", yd, ya, 1e-6, 1e-6);
    /* AdamW on views, with a bf16 compute copy */
    float *p = normal(n, 1.0f), *gr = normal(n, 1.0f), *m = normal(n, 0.01f);
    float *v = uniform(n, 0.0f, 1e-3f);
    sl_tensor *cp = odd_view(g_cpu, SL_F32, n, p), *cg = odd_view(g_cpu, SL_F32, n, gr);
    sl_tensor *cm = odd_view(g_cpu, SL_F32, n, m), *cv = odd_view(g_cpu, SL_F32, n, v);
    sl_tensor *dp = odd_view(g_cuda, SL_F32, n, p), *dgr = odd_view(g_cuda, SL_F32, n, gr);
    sl_tensor *dm = odd_view(g_cuda, SL_F32, n, m), *dv = odd_view(g_cuda, SL_F32, n, v);
    sl_tensor *copy = odd_view(g_cuda, SL_BF16, n, NULL);
    sl_op_adamw(cp, cg, cm, cv, NULL, &k_adamw_hp);
    sl_op_adamw(dp, dgr, dm, dv, copy, &k_adamw_hp);
    compare("adamw p (views)", dp, cp, 1e-6, 1e-5);
    compare("adamw m (views)", dm, cm, 1e-6, 1e-5);
    compare("adamw v (views)", dv, cv, 1e-6, 1e-5);
    compare("adamw bf16 copy (views)", copy, cp, 1e-6, 8e-3);
    sl_test_release();
    free(a), free(b), free(y), free(br), free(p), free(gr), free(m), free(v);
}

/* ---- AdamW: every form of trainer/adamw.cu writes the same bits ----------------------------- */

#ifdef SLUICE_WITH_CUDA
#include "core/kernels_cuda.h"
#include "trainer/kernels_cuda.h"

/* n elements of p, m, v (and a bf16 copy) after one step under `form`, back on the host. */
static void adamw_form_run(const char *form, int64_t n, const float *p0, const float *g,
                           const float *m0, const float *v0, float *out) {
    CHECK(sl_cuda_adamw_set_form(form), "adamw form %s is unknown", form);
    sl_tensor *p = sl_test_matrix(g_cuda, SL_F32, n, 1, p0);
    sl_tensor *gr = sl_test_matrix(g_cuda, SL_F32, n, 1, g);
    sl_tensor *m = sl_test_matrix(g_cuda, SL_F32, n, 1, m0);
    sl_tensor *v = sl_test_matrix(g_cuda, SL_F32, n, 1, v0);
    sl_tensor *copy = sl_test_matrix(g_cuda, SL_BF16, n, 1, NULL);
    sl_op_adamw(p, gr, m, v, copy, &k_adamw_hp);
    sl_tensor *copy32 = sl_test_matrix(g_cuda, SL_F32, n, 1, NULL);
    sl_op_convert(copy32, copy);
    sl_tensor *res[4] = {p, m, v, copy32};
    for (int k = 0; k < 4; k++) sl_tensor_to_host(res[k], out + k * n);
    sl_test_release();
}

/* Lengths past several grid strides of every form (the persistent grid's blocks x 256 threads x
 * 8 or 16 elements per iteration) with a tail of 3 elements that no 16-byte unit covers. */
static void test_adamw_forms(void) {
    static const char *const forms[] = {"plain", "coalesced", "stream", "wide"};
    const int64_t n = (int64_t)3 * 1000 * 1000 + 3;
    float *p0 = normal(n, 1.0f), *g = normal(n, 1.0f), *m0 = normal(n, 0.01f);
    float *v0 = uniform(n, 0.0f, 1e-3f);
    float *want = malloc(sizeof(float) * 4 * (size_t)n),
          *got = malloc(sizeof(float) * 4 * (size_t)n);
    adamw_form_run(forms[0], n, p0, g, m0, v0, want);
    for (int f = 1; f < 4; f++) {
        adamw_form_run(forms[f], n, p0, g, m0, v0, got);
        CHECK(same_bits(got, want, 4 * n),
              "adamw form %s: p, m, v and the bf16 copy differ from plain's", forms[f]);
    }
    CHECK(!sl_cuda_adamw_set_form("fast"), "an unknown adamw form is refused");
    sl_cuda_adamw_set_form("coalesced");
    free(p0), free(g), free(m0), free(v0), free(want), free(got);
}
#else
static void test_adamw_forms(void) {}
#endif

/* ---- RMSNorm: wide rows and odd offsets ------------------------------------------------------ */

/* A [rows, d] fp32 operand on be from h (NULL: unset), as an odd view (one element off a
 * 16-byte boundary) or an aligned matrix. */
static sl_tensor *norm_rows(sl_backend *be, bool odd, int64_t rows, int64_t d, const float *h) {
    return odd ? odd_view(be, SL_F32, rows * d, h) : sl_test_matrix(be, SL_F32, rows, d, h);
}

/* res: 0 no residual gradient, 1 dres a tensor of its own, 2 dres = dx (in place) */
static void rmsnorm_case(int64_t rows, int64_t d, bool odd, int res) {
    char what[64];
    float *x = normal(rows * d, 1.0f), *w = uniform(d, 0.5f, 1.5f), *dy = normal(rows * d, 1.0f);
    float *dw0 = normal(d, 1.0f), *dres = normal(rows * d, 1.0f);
    sl_tensor *t[2][8];
    sl_backend *be[2] = {g_cpu, g_cuda};
    for (int k = 0; k < 2; k++) {
        /* x, w, dy, dw as [rows, d] / [d]; y, dx, rstd written; dres */
        t[k][0] = norm_rows(be[k], odd, rows, d, x);
        t[k][1] = sl_test_matrix(be[k], SL_F32, d, 1, w);
        t[k][2] = norm_rows(be[k], odd, rows, d, dy);
        t[k][3] = sl_test_matrix(be[k], SL_F32, d, 1, dw0);
        t[k][4] = norm_rows(be[k], odd, rows, d, NULL);
        t[k][5] = norm_rows(be[k], odd, rows, d, res == 2 ? dres : NULL);
        t[k][6] = sl_test_matrix(be[k], SL_F32, rows, 1, 0);
        t[k][7] = res == 2 ? t[k][5] : res == 1 ? norm_rows(be[k], odd, rows, d, dres) : NULL;
        sl_op_rmsnorm_fwd(t[k][4], t[k][6], t[k][0], t[k][1], 1e-6f);
        sl_op_rmsnorm_bwd(t[k][5], t[k][3], t[k][2], NULL, t[k][0], t[k][1], t[k][6], t[k][7]);
    }
    const char *how = res == 2 ? " +dres in place" : res ? " +dres" : "";
    snprintf(what, sizeof what, "rmsnorm %lldx%lld%s y", (long long)rows, (long long)d,
             odd ? " (views)" : "");
    compare(what, t[1][4], t[0][4], 1e-6, 1e-5);
    snprintf(what, sizeof what, "rmsnorm %lldx%lld rstd", (long long)rows, (long long)d);
    compare(what, t[1][6], t[0][6], 1e-6, 1e-5);
    snprintf(what, sizeof what, "rmsnorm %lldx%lld dx%s", (long long)rows, (long long)d, how);
    compare(what, t[1][5], t[0][5], 5e-5, 1e-5);
    snprintf(what, sizeof what, "rmsnorm %lldx%lld dw", (long long)rows, (long long)d);
    compare(what, t[1][3], t[0][3], 5e-5, 1e-5);
    sl_test_release();
    free(x), free(w), free(dy), free(dw0), free(dres);
}

#ifdef SLUICE_WITH_CUDA
/* y, rstd, dx, dw of one forward and backward on the CUDA backend under `path`, on the host. */
static void rmsnorm_path_run(const char *path, sl_dtype dt, int64_t rows, int64_t d, int res,
                             const float *x, const float *w, const float *dy, const float *dy_add,
                             const float *dw0, const float *dres, float *out) {
    CHECK(sl_cuda_rmsnorm_set_path(path), "rmsnorm path %s is unknown", path);
    sl_tensor *tx = sl_test_ftensor(g_cuda, dt, rows, d, x);
    sl_tensor *tw = sl_test_ftensor(g_cuda, dt, d, 1, w);
    sl_tensor *tdy = sl_test_ftensor(g_cuda, dt, rows, d, dy);
    sl_tensor *tdw = sl_test_ftensor(g_cuda, SL_F32, d, 1, dw0);
    sl_tensor *ty = sl_test_ftensor(g_cuda, dt, rows, d, NULL);
    sl_tensor *tr = sl_test_ftensor(g_cuda, SL_F32, rows, 1, NULL);
    sl_tensor *tdx = sl_test_ftensor(g_cuda, dt, rows, d, res == 2 ? dres : NULL);
    sl_tensor *tres = res == 2 ? tdx : res ? sl_test_ftensor(g_cuda, dt, rows, d, dres) : NULL;
    sl_op_rmsnorm_fwd(ty, tr, tx, tw, 1e-6f);
    sl_tensor *tadd = dy_add ? sl_test_ftensor(g_cuda, SL_F32, rows, d, dy_add) : NULL;
    sl_op_rmsnorm_bwd(tdx, tdw, tdy, tadd, tx, tw, tr, tres);
    const sl_tensor *got[4] = {ty, tr, tdx, tdw};
    const int64_t len[4] = {rows * d, rows, rows * d, d};
    for (int k = 0; k < 4; k++) {
        float *h = sl_test_host_floats(got[k]);
        memcpy(out, h, sizeof(float) * (size_t)len[k]);
        out += len[k];
        free(h);
    }
    sl_test_release();
}

/* The row path (core/rmsnorm.cu) against the window path: the same bits, forward and backward;
 * with `add`, an fp32 dy_add folded into dy (the row path through shared memory) and, in bf16,
 * also against the add it replaces: sl_op_add(dy, dy, dy_add), then the norm without it. */
static void rmsnorm_paths_case(sl_dtype dt, int64_t rows, int64_t d, int res, bool add) {
    float *x = normal(rows * d, 1.0f), *w = uniform(d, 0.5f, 1.5f), *dy = normal(rows * d, 1.0f);
    float *dw0 = normal(d, 1.0f), *dres = normal(rows * d, 1.0f);
    float *dy_add = add ? normal(rows * d, 1.0f) : NULL;
    const int64_t n = 2 * rows * d + rows + d;
    float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    rmsnorm_path_run("windows", dt, rows, d, res, x, w, dy, dy_add, dw0, dres, want);
    rmsnorm_path_run("rows", dt, rows, d, res, x, w, dy, dy_add, dw0, dres, got);
    if (add) { /* the fold is the add it replaces: dy's sum as the add stores it, bitwise */
        sl_tensor *tdy = sl_test_ftensor(g_cuda, dt, rows, d, dy);
        sl_op_add(tdy, tdy, sl_test_ftensor(g_cuda, SL_F32, rows, d, dy_add));
        float *summed = sl_test_host_floats(tdy);
        sl_test_release();
        float *plain = malloc(sizeof(float) * (size_t)n);
        rmsnorm_path_run("rows", dt, rows, d, res, x, w, summed, NULL, dw0, dres, plain);
        CHECK(same_bits(got, plain, n),
              "rmsnorm %s %lldx%lld: dy_add folded differs from sl_op_add and the norm",
              dt == SL_BF16 ? "bf16" : "fp32", (long long)rows, (long long)d);
        free(summed), free(plain);
    }
    CHECK(same_bits(got, want, n),
          "rmsnorm %s %lldx%lld (dres %d): the row path's y, rstd, dx or dw differ from the window "
          "path's",
          dt == SL_BF16 ? "bf16" : "fp32", (long long)rows, (long long)d, res);
    free(x), free(w), free(dy), free(dy_add), free(dw0), free(dres), free(want), free(got);
}

static void test_rmsnorm_paths(void) {
    /* the hidden width: 8 packs per lane, in place, with and without dy_add */
    rmsnorm_paths_case(SL_BF16, 600, 2048, 2, true);
    rmsnorm_paths_case(SL_BF16, 600, 2048, 2, false);
    rmsnorm_paths_case(SL_BF16, 40, 1000, 1, false); /* 125 packs: lanes with 3 and 4 */
    rmsnorm_paths_case(SL_BF16, 40, 2048, 1, true);  /* dres apart, dy_add: both copied */
    rmsnorm_paths_case(SL_F32, 4100, 128, 1, true);  /* 9 rows per block: warps with two */
    rmsnorm_paths_case(SL_F32, 300, 1024, 0, true);  /* fp32's widest row: 4 packs per lane */
    CHECK(!sl_cuda_rmsnorm_set_path("fast"), "an unknown rmsnorm path is refused");
    sl_cuda_rmsnorm_set_path("rows");
}
#else
static void test_rmsnorm_paths(void) {}
#endif

static void test_rmsnorm(void) {
    rmsnorm_case(21, 4104, false, 1); /* fp32 packs: windows of 1024 (4x) and 8 columns */
    rmsnorm_case(5, 2049, false, 2);  /* elements: windows of 1024, 1024 and 1 */
    rmsnorm_case(40, 64, true, 1);    /* width a multiple of 8 but not aligned: elements */
    rmsnorm_case(40, 64, true, 0);
    rmsnorm_case(1100, 16, false, 2); /* more rows than 8 per block at the most partials */
    rmsnorm_case(1100, 16, false, 0);
}

/* ---- embedding --------------------------------------------------------------------------- */

/* ids: `heavy` of every 10 tokens are id v - 1 (the top digits of the key), the rest uniform. */
static int32_t *skewed_ids(int64_t n, int64_t v, int heavy) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t s = g_seed++;
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int)(i % 10) < heavy ? (int32_t)(v - 1)
                                       : (int32_t)(sl_test_rand_u64(&s) % (uint64_t)v);
    return ids;
}

static void embedding_case(int64_t v, int64_t c, int64_t n, sl_backend *cuda, bool exact) {
    char what[80];
    float *dt0 = normal(v * c, 1.0f), *dout = normal(n * c, 1.0f);
    int32_t *ids = skewed_ids(n, v, 4);
    sl_tensor *cid = sl_test_matrix(g_cpu, SL_I32, n, 1, ids),
              *did = sl_test_matrix(cuda, SL_I32, n, 1, ids);
    sl_tensor *ct = sl_test_matrix(g_cpu, SL_F32, v, c, dt0),
              *dt = sl_test_matrix(cuda, SL_F32, v, c, dt0);
    sl_tensor *cd = sl_test_matrix(g_cpu, SL_F32, n, c, dout),
              *dd = sl_test_matrix(cuda, SL_F32, n, c, dout);
    sl_op_embedding_bwd(ct, cd, cid);
    sl_op_embedding_bwd(dt, dd, did);
    float *want = sl_test_host_floats(ct), *got = sl_test_host_floats(dt);
    snprintf(what, sizeof what, "embedding_bwd V%lld/C%lld/N%lld%s", (long long)v, (long long)c,
             (long long)n, exact ? "" : " (atomic)");
    if (exact) CHECK(same_bits(got, want, v * c), "%s: not bitwise equal to the CPU", what);
    /* an fp32 scatter-add in any order: within the bound derived from each element's summands
     * (sl_test_check_scatter_sum; test_cuda_moe's atomic scatter-add explains it) */
    const double r = sl_test_check_scatter_sum(what, got, dt0, dout, ids, v, n, c);
    CHECK(r <= 1.0, "%s: %.3g x the fp32 any-order summation bound", what, r);
    /* The forward of the same ids: rows of the table, exactly. */
    sl_tensor *co = sl_test_matrix(g_cpu, SL_F32, n, c, 0),
              *dout_t = sl_test_matrix(cuda, SL_F32, n, c, 0);
    sl_op_embedding_fwd(co, cid, ct);
    sl_tensor_from_host(dt, want); /* both tables equal */
    sl_op_embedding_fwd(dout_t, did, dt);
    float *fw = sl_test_host_floats(co), *fg = sl_test_host_floats(dout_t);
    CHECK(same_bits(fg, fw, n * c), "embedding_fwd V%lld/C%lld: rows copied exactly", (long long)v,
          (long long)c);
    sl_test_release();
    free(fw), free(fg), free(want), free(got), free(dt0), free(dout), free(ids);
}

/* Ids outside [0, V): the forward writes NaN rows, the backward drops those tokens. */
static void embedding_out_of_range(void) {
    const int64_t v = 50, c = 16, n = 6;
    const int32_t ids[6] = {3, -1, 49, 50, 3, 7}, ids_cpu[6] = {3, 0, 49, 0, 3, 7};
    float *table = normal(v * c, 1.0f), *dout = normal(n * c, 1.0f);
    sl_tensor *did = sl_test_matrix(g_cuda, SL_I32, n, 1, ids),
              *cid = sl_test_matrix(g_cpu, SL_I32, n, 1, ids_cpu);
    sl_tensor *dt = sl_test_matrix(g_cuda, SL_F32, v, c, table),
              *out = sl_test_matrix(g_cuda, SL_F32, n, c, 0);
    sl_op_embedding_fwd(out, did, dt);
    float *o = sl_test_host_floats(out);
    bool ok = true;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < c; j++) {
            const bool bad = ids[i] < 0 || ids[i] >= v;
            ok &= bad ? isnan(o[i * c + j]) : o[i * c + j] == table[ids[i] * c + j];
        }
    CHECK(ok, "embedding_fwd: NaN rows for ids outside the vocabulary, table rows otherwise");
    /* backward: the CPU run gets those tokens' rows zeroed (and a valid id) */
    sl_tensor *dd = sl_test_matrix(g_cuda, SL_F32, n, c, dout);
    for (int64_t j = 0; j < c; j++) dout[1 * c + j] = dout[3 * c + j] = 0.0f;
    sl_tensor *ct = sl_test_matrix(g_cpu, SL_F32, v, c, table),
              *cd = sl_test_matrix(g_cpu, SL_F32, n, c, dout);
    sl_op_embedding_bwd(dt, dd, did);
    sl_op_embedding_bwd(ct, cd, cid);
    float *got = sl_test_host_floats(dt), *want = sl_test_host_floats(ct);
    CHECK(same_bits(got, want, v * c), "embedding_bwd drops the tokens outside the vocabulary");
    sl_test_release();
    free(o), free(got), free(want), free(table), free(dout);
}

/* `test_cuda_kernels atomic`: the embedding backward's atomic variant (non-deterministic mode)
 * alone. Under the emulator it is registered with SLUICE_EMU_RACECHECK=0 (tests/
 * cuda_kernels.cmake): the race check replays each launch in a second thread order, which
 * float atomics fail by design; one order still runs the atomic code path. */
static void test_embedding_atomic(void) {
    sl_backend_params p = {.threads = 0, .device = -1, .allow_nondeterministic = true};
    char err[256];
    sl_backend *fast = sl_backend_create("cuda", &p, err, sizeof err);
    CHECK(fast != NULL, "a non-deterministic CUDA backend: %s", err);
    if (fast) {
        embedding_case(151936, 24, 2500, fast, false);
        sl_backend_free(fast);
    }
}

static void test_embedding(void) {
    embedding_case(151936, 24, 2500, g_cuda, true); /* 3 radix passes, 3 tiles, packs */
    embedding_case(70000, 5, 1100, g_cuda, true);   /* width 5: elements */
    embedding_case(64, 8, 3000, g_cuda, true);      /* few ids, long runs */
    embedding_out_of_range();
}

/* ---- cross-entropy ------------------------------------------------------------------------ */

static void test_cross_entropy(void) {
    const int64_t n = 4, v = 151936;
    const int32_t tg[4] = {5, -1, 151935, 77777};
    float *l = normal(n * v, 2.0f);
    sl_tensor *ctg = sl_test_matrix(g_cpu, SL_I32, n, 1, tg),
              *dtg = sl_test_matrix(g_cuda, SL_I32, n, 1, tg);
    sl_tensor *cl = sl_test_matrix(g_cpu, SL_F32, n, v, l),
              *closs = sl_test_matrix(g_cpu, SL_F32, n, 1, 0);
    sl_op_cross_entropy(closs, cl, cl, ctg, 0.5f);
    /* fp32, in place */
    sl_tensor *dl = sl_test_matrix(g_cuda, SL_F32, n, v, l),
              *dloss = sl_test_matrix(g_cuda, SL_F32, n, 1, 0);
    sl_op_cross_entropy(dloss, dl, dl, dtg, 0.5f);
    compare("cross_entropy V151936 losses", dloss, closs, 1e-5, 1e-5);
    compare("cross_entropy V151936 dlogits (in place)", dl, cl, 1e-5, 1e-5);
    /* bf16 logits, separate dlogits: the CPU gets the same rounded logits */
    for (int64_t i = 0; i < n * v; i++) l[i] = sl_test_bf16_round(l[i]);
    sl_tensor_from_host(cl, l);
    sl_op_cross_entropy(closs, cl, cl, ctg, 0.5f);
    sl_tensor *bl = sl_test_ftensor(g_cuda, SL_BF16, n, v, l),
              *bd = sl_test_matrix(g_cuda, SL_BF16, n, v, 0);
    sl_op_cross_entropy(dloss, bd, bl, dtg, 0.5f);
    compare("cross_entropy bf16 losses", dloss, closs, 1e-5, 1e-5);
    /* one bf16 rounding of each gradient (2^-9 relative) */
    compare("cross_entropy bf16 dlogits", bd, cl, 1e-9, 4e-3);
    /* a target outside the vocabulary: NaN loss (the CPU stops the run instead) */
    const int32_t bad[4] = {5, -1, 151936, 0};
    sl_tensor_from_host(dtg, bad);
    sl_op_cross_entropy(dloss, NULL, bl, dtg, 1.0f);
    float *loss = sl_test_host_floats(dloss);
    CHECK(isnan(loss[2]) && !isnan(loss[0]) && loss[1] == 0.0f,
          "cross_entropy: NaN loss for a target outside the vocabulary (got %g %g %g)", loss[0],
          loss[1], loss[2]);
    sl_test_release();
    free(loss), free(l);
}

int main(int argc, char **argv) {
    const bool atomic = argc == 2 && strcmp(argv[1], "atomic") == 0;
    if (argc > 2 || (argc == 2 && !atomic)) {
        fprintf(stderr, "usage: test_cuda_kernels [atomic]\n");
        return 2;
    }
    g_cuda = sl_test_cuda_or_skip(NULL);
    g_cpu = sl_test_cpu();
    if (atomic) {
        test_embedding_atomic();
        sl_backend_free(g_cuda);
        return sl_test_finish("test_cuda_kernels atomic");
    }
    test_reductions();
    test_fill_i32();
    test_unaligned();
    test_adamw_forms();
    test_rmsnorm();
    test_rmsnorm_paths();
    test_embedding();
    test_cross_entropy();
    sl_backend_free(g_cuda);
    return sl_test_finish("test_cuda_kernels");
}
