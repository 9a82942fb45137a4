/*
 * tests/test_cuda_gemm.c - the CUDA GEMM launchers (core/matmul.cu, moe/grouped_matmul.cu) on
 * the paths the conformance test (test_backend_ops) does not reach, against a double loop:
 *   - matmul with k = 0 (A^T of zero rows, as dW = dY^T X over no tokens): C = beta C, and
 *     C = 0 without reading C (NaN there) when beta = 0;
 *   - matmul with fp32 inputs into a bf16 C (cuBLAS cannot write it: an fp32 scratch round trip);
 *   - grouped_matmul_dw with fp32 dY, X into a bf16 dW (one GEMM per expert through that path)
 *     and with bf16 dY, X, dW (the grouped call with a bf16 output), empty groups included;
 *   - grouped_matmul with zero groups (no call at all; C untouched);
 *   - fp32 matmul with K split into slices (core/gemm_split.h: the rule at the router's shapes on
 *     an H200, checked everywhere; the split product forced by SLUICE_GEMM_SPLIT_K=4 for every
 *     transpose pair, alpha and beta, and a k the slices do not divide).
 * Runs wherever the build has the CUDA backend and it starts (a GPU, or the emulated build);
 * skipped otherwise, like test_cuda_backend.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm_split.h"
#include "core/tensor.h"
#include "tests/test_util.h"

static sl_backend *g_be;

/* ---- bf16 on the host (the storage a bf16 tensor's from_host/to_host exchange) ------------ */

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A tensor of dtype dt on the CUDA backend holding x (rounded to dt in place, so that the
 * reference computes on the stored values). */
static sl_tensor *upload(sl_dtype dt, int ndim, const int64_t *shape, float *x) {
    sl_tensor *t = sl_tensor_new(g_be, dt, ndim, shape);
    const int64_t n = sl_tensor_numel(t);
    if (dt == SL_BF16) {
        uint16_t *h = malloc((size_t)(n > 0 ? n : 1) * 2);
        for (int64_t i = 0; i < n; i++) h[i] = bf16_bits(x[i]), x[i] = bf16_value(h[i]);
        sl_tensor_from_host(t, h);
        free(h);
    } else {
        sl_tensor_from_host(t, x);
    }
    return t;
}

static float *download(const sl_tensor *t) {
    const int64_t n = sl_tensor_numel(t);
    float *x = malloc((size_t)(n > 0 ? n : 1) * 4);
    if (sl_tensor_dtype(t) == SL_BF16) {
        uint16_t *h = malloc((size_t)(n > 0 ? n : 1) * 2);
        sl_tensor_to_host(t, h);
        for (int64_t i = 0; i < n; i++) x[i] = bf16_value(h[i]);
        free(h);
    } else {
        sl_tensor_to_host(t, x);
    }
    return x;
}

static float *random_data(int64_t n, uint64_t seed) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * 4);
    sl_test_fill_uniform(x, n, -1.0f, 1.0f, seed);
    return x;
}

/* got vs want element by element: |got - want| <= bound * 2e-6 + |want| * out_eps (out_eps one
 * rounding to the output type: 2^-8 for bf16), bound[i] = sum of |terms| of element i. */
static void expect(const char *what, const float *got, const double *want, const double *bound,
                   int64_t n, sl_dtype out) {
    const double out_eps = out == SL_BF16 ? 1.0 / 256 : 1.2e-7;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double tol = bound[i] * 2e-6 + fabs(want[i]) * out_eps + 1e-30;
        if (!(fabs(got[i] - want[i]) <= tol) && bad++ < 5)
            CHECK(false, "%s: element %lld = %.9g, want %.9g", what, (long long)i, got[i], want[i]);
    }
    CHECK(bad == 0, "%s: %d elements wrong", what, bad);
}

/* ---- matmul ----------------------------------------------------------------------------- */

/* C [m, n] = alpha op(A) op(B) + beta C in double; row-major as core/ops.h. */
static void ref_matmul(double *want, double *bound, const float *a, const float *b, const float *c0,
                       int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha, float beta) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0, mag = 0;
            for (int64_t l = 0; l < k; l++) {
                const double p =
                    (double)(ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
                acc += p, mag += fabs(p);
            }
            want[i * n + j] = alpha * acc, bound[i * n + j] = fabs(alpha) * mag;
            if (beta != 0.0f) {
                want[i * n + j] += beta * (double)c0[i * n + j];
                bound[i * n + j] += fabs(beta * (double)c0[i * n + j]);
            }
        }
}

static void case_matmul(const char *what, sl_dtype ab, sl_dtype cd, int64_t m, int64_t n, int64_t k,
                        bool ta, bool tb, float alpha, float beta, bool nan_c, uint64_t seed) {
    float *a = random_data(m * k, seed), *b = random_data(k * n, seed + 1);
    float *c0 = random_data(m * n, seed + 2);
    if (nan_c)
        for (int64_t i = 0; i < m * n; i++) c0[i] = NAN;
    const int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
    const int64_t sc[2] = {m, n};
    sl_tensor *ta_ = upload(ab, 2, sa, a), *tb_ = upload(ab, 2, sb, b), *tc = upload(cd, 2, sc, c0);
    sl_op_matmul(tc, ta_, tb_, ta, tb, alpha, beta);
    float *got = download(tc);
    double *want = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(double));
    double *bound = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(double));
    ref_matmul(want, bound, a, b, c0, m, n, k, ta, tb, alpha, beta);
    char label[128];
    snprintf(label, sizeof label, "matmul %s: %s -> %s %lldx%lldx%lld%s%s beta %g", what,
             sl_dtype_name(ab), sl_dtype_name(cd), (long long)m, (long long)n, (long long)k,
             ta ? "/At" : "", tb ? "/Bt" : "", beta);
    expect(label, got, want, bound, m * n, cd);
    free(a), free(b), free(c0), free(got), free(want), free(bound);
    sl_tensor_free(ta_), sl_tensor_free(tb_), sl_tensor_free(tc);
}

/* ---- grouped GEMMs ------------------------------------------------------------------------ */

/* dW_g [R, S] += dY_g^T X_g over the groups' row blocks. */
static void case_grouped_dw(const char *what, sl_dtype in, sl_dtype wd, const int64_t *counts,
                            int groups, int64_t spare, int64_t r, int64_t s, uint64_t seed) {
    int64_t rows = spare;
    for (int g = 0; g < groups; g++) rows += counts[g];
    float *dy = random_data(rows * r, seed), *x = random_data(rows * s, seed + 1);
    float *w0 = random_data(groups * r * s, seed + 2);
    for (int64_t i = (rows - spare) * r; i < rows * r; i++) dy[i] = NAN; /* must not be read */
    for (int64_t i = (rows - spare) * s; i < rows * s; i++) x[i] = NAN;
    const int64_t sdy[2] = {rows, r}, sx[2] = {rows, s}, sw[3] = {groups, r, s};
    sl_tensor *tdy = upload(in, 2, sdy, dy), *tx = upload(in, 2, sx, x);
    sl_tensor *tw = upload(wd, 3, sw, w0);
    sl_op_grouped_matmul_dw(tw, tdy, tx, sl_counts_host(counts, groups), groups, 1.0f, NULL);
    float *got = download(tw);
    const int64_t nw = groups * r * s;
    double *want = malloc((size_t)(nw > 0 ? nw : 1) * sizeof(double));
    double *bound = malloc((size_t)(nw > 0 ? nw : 1) * sizeof(double));
    int64_t row0 = 0;
    for (int g = 0; g < groups; row0 += counts[g], g++)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < s; j++) {
                const int64_t e = (g * r + i) * s + j;
                double acc = w0[e], mag = fabs(w0[e]);
                for (int64_t t = row0; t < row0 + counts[g]; t++) {
                    const double p = (double)dy[t * r + i] * x[t * s + j];
                    acc += p, mag += fabs(p);
                }
                want[e] = acc, bound[e] = mag;
            }
    expect(what, got, want, bound, nw, wd);
    free(dy), free(x), free(w0), free(got), free(want), free(bound);
    sl_tensor_free(tdy), sl_tensor_free(tx), sl_tensor_free(tw);
}

static void case_zero_groups(void) {
    const int64_t sa[2] = {3, 4}, sb[3] = {0, 4, 5}, sc[2] = {3, 5};
    float *a = random_data(12, 90), *c0 = random_data(15, 91), b[1] = {0};
    sl_tensor *ta = upload(SL_F32, 2, sa, a), *tb = upload(SL_F32, 3, sb, b);
    sl_tensor *tc = upload(SL_F32, 2, sc, c0);
    sl_op_grouped_matmul(tc, ta, tb, sl_counts_host(NULL, 0), 0, false, 0.0f);
    float *got = download(tc);
    CHECK(memcmp(got, c0, 15 * sizeof(float)) == 0, "grouped_matmul with no groups changed C");
    free(a), free(c0), free(got);
    sl_tensor_free(ta), sl_tensor_free(tb), sl_tensor_free(tc);
}

/* The split rule (no device needed): column-major m x n = op(A) op(B), inner k, 132 SMs. */
static void split_rule(void) {
    struct {
        int64_t m, n, k;
        int want;
        const char *what;
    } cases[] = {
        {128, 4096, 2048, 8, "router logits at 4,096 tokens (32 tiles)"},
        {2048, 128, 4096, 16, "router weight gradient over 4,096 tokens (16 tiles)"},
        {2048, 4096, 128, 1, "router data gradient (512 tiles)"},
        {128, 32768, 2048, 1, "router logits at 32,768 tokens (256 tiles)"},
        {2048, 128, 32768, 16, "router weight gradient over 32,768 tokens"},
        {128, 4096, 2050, 2, "k = 2050: only 2 divides it"},
        {128, 4096, 300, 1, "k = 300: slices under 256"},
        {4096, 4096, 1 << 20, 1, "the output fills the GPU"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int got = sl_gemm_split_k(cases[i].m, cases[i].n, cases[i].k, 132);
        CHECK(got == cases[i].want, "split rule, %s: %d slices, want %d", cases[i].what, got,
              cases[i].want);
    }
    int v = -1;
    CHECK(sl_gemm_split_k_parse(NULL, &v) == 0 && v == 0, "SLUICE_GEMM_SPLIT_K unset");
    CHECK(sl_gemm_split_k_parse("auto", &v) == 0 && v == 0, "SLUICE_GEMM_SPLIT_K=auto");
    CHECK(sl_gemm_split_k_parse("off", &v) == 0 && v == 1, "SLUICE_GEMM_SPLIT_K=off");
    CHECK(sl_gemm_split_k_parse("4", &v) == 0 && v == 4, "SLUICE_GEMM_SPLIT_K=4");
    CHECK(sl_gemm_split_k_parse("0", &v) != 0 && sl_gemm_split_k_parse("65", &v) != 0 &&
              sl_gemm_split_k_parse("4x", &v) != 0,
          "SLUICE_GEMM_SPLIT_K: 0, 65 and 4x must be refused");
}

/* The split product against the double loop: 4 slices forced. */
static void split_products(void) {
    setenv("SLUICE_GEMM_SPLIT_K", "4", 1);
    for (int t = 0; t < 4; t++) {
        const bool ta = t & 1, tb = t & 2;
        case_matmul("split 4", SL_F32, SL_F32, 9, 13, 64, ta, tb, 1.0f, 0.0f, true, 30 + t);
        case_matmul("split 4", SL_F32, SL_F32, 16, 5, 32, ta, tb, -0.5f, 1.5f, false, 40 + t);
    }
    case_matmul("split 4, k = 30 (not split)", SL_F32, SL_F32, 7, 6, 30, false, true, 1.0f, 1.0f,
                false, 50);
    unsetenv("SLUICE_GEMM_SPLIT_K");
}

int main(void) {
    split_rule(); /* the rule needs no device: a failure there fails every build */
    if (sl_test_failures) return sl_test_finish("test_cuda_gemm");
    g_be = sl_test_cuda_or_skip(NULL);
    split_products();
    /* k = 0: only with A transposed (A [0, M]); beta scales, beta = 0 zeroes NaN */
    case_matmul("k0", SL_F32, SL_F32, 5, 3, 0, true, false, 1.0f, 2.0f, false, 1);
    case_matmul("k0", SL_F32, SL_F32, 5, 3, 0, true, false, 1.0f, 0.0f, true, 2);
    case_matmul("k0", SL_BF16, SL_F32, 4, 6, 0, true, false, 1.0f, -0.5f, false, 3);
    case_matmul("k0", SL_BF16, SL_BF16, 4, 6, 0, true, false, 1.0f, 0.0f, true, 4);
    /* fp32 inputs, bf16 output */
    case_matmul("f32->bf16", SL_F32, SL_BF16, 7, 5, 9, false, false, 1.0f, 0.0f, true, 10);
    case_matmul("f32->bf16", SL_F32, SL_BF16, 13, 17, 6, true, true, 0.5f, 1.5f, false, 11);
    case_matmul("f32->bf16", SL_F32, SL_BF16, 33, 65, 17, false, true, -1.0f, 1.0f, false, 12);
    /* grouped dW: mixed types (per-expert GEMMs) and bf16 throughout (grouped, bf16 C) */
    const int64_t counts[6] = {0, 3, 7, 1, 0, 4};
    case_grouped_dw("dw f32 -> bf16", SL_F32, SL_BF16, counts, 6, 2, 6, 5, 20);
    case_grouped_dw("dw bf16 -> bf16", SL_BF16, SL_BF16, counts, 6, 2, 6, 5, 21);
    case_grouped_dw("dw bf16 -> f32", SL_BF16, SL_F32, counts, 6, 0, 9, 7, 22);
    const int64_t none[3] = {0, 0, 0};
    case_grouped_dw("dw no rows", SL_BF16, SL_F32, none, 3, 2, 4, 3, 23);
    case_zero_groups();
    sl_backend_free(g_be);
    return sl_test_finish("test_cuda_gemm");
}
