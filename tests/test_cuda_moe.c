/*
 * tests/test_cuda_moe.c - the CUDA kernels of moe/ (router, moe_sort, gather / scatter-add,
 * combine, SwiGLU, row gate) on the paths the conformance test (test_backend_ops) does not
 * reach with its small shapes, against the CPU backend:
 *   - the router with 128 to 1024 experts (4 to 32 experts per lane) and k up to E, stats
 *     over many 128-token blocks (bitwise the same run after run), its backward;
 *   - moe_sort of 131,072 slots (64 tiles, one expert taking 40% of the slots), with 2000 and
 *     6000 experts (fewer warps per block, longer tiles), and expert ids outside [0, E)
 *     (skipped: slot_pos -1, not counted);
 *   - scatter_add_rows into 131,072 and 3,000,000 rows (two and three radix passes), a hot row
 *     with thousands of sources: bitwise equal to the CPU in fp32, and in bf16 to the CPU's
 *     fp32 result rounded once (both add a row's sources in index order onto dst in fp32);
 *     indices outside [0, rows) skipped; and (`test_cuda_moe atomic`) the atomic variant of
 *     non-deterministic mode within the fp32 any-order summation bound of its summands, and
 *     bitwise on values whose sums are exact in any order;
 *   - gather_add_rows (top-k 3 to 32, with dropped slots): bitwise equal to scatter_add_rows
 *     through the inverse on the GPU and to the CPU's (in bf16: its fp32 sums rounded once);
 *   - the row kernels on views that are not 16-byte aligned (element by element) and on
 *     2048-wide bf16 rows (16-byte accesses, long row reductions).
 * Runs wherever the build has the CUDA backend (on a GPU, or emulated on the CPU); elsewhere
 * it reports itself skipped.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/test_util.h"

static sl_backend *g_cpu, *g_cuda;
static uint64_t g_seed = 777;

/* ---- helpers ------------------------------------------------------------------------------ */

static float *normal(int64_t n, float std) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    sl_test_fill_normal(x, n, std, g_seed++);
    return x;
}

static float *rounded(const float *x, int64_t n) {
    float *y = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) y[i] = sl_test_bf16_round(x[i]);
    return y;
}

/* A view of elements [1, 1 + rows * cols) of a new tensor, shaped [rows, cols]: one element past
 * a 16-byte boundary, so the kernels take their element-by-element paths. */
static sl_tensor *odd_view(sl_backend *be, int64_t rows, int64_t cols, const float *h) {
    sl_tensor *base = sl_test_track(sl_tensor_new1(be, SL_F32, rows * cols + 1));
    sl_tensor *v = sl_test_track(sl_tensor_view2(base, 1, rows, cols));
    if (h) sl_tensor_from_host(v, h);
    return v;
}

static int32_t *host_i32(const sl_tensor *t) {
    int32_t *h = malloc(sizeof(int32_t) * (size_t)(sl_tensor_numel(t) + 1));
    sl_tensor_to_host(t, h);
    return h;
}

static bool same_bits(const void *a, const void *b, int64_t n) {
    return memcmp(a, b, 4 * (size_t)n) == 0;
}

static void compare(const char *what, const sl_tensor *got, const sl_tensor *want, double atol,
                    double rtol) {
    float *g = sl_test_host_floats(got), *w = sl_test_host_floats(want);
    const double r = sl_test_compare(what, g, w, sl_tensor_numel(want), atol, rtol);
    CHECK(r <= 1.0, "%s: error %.3g of the tolerance", what, r);
    free(g);
    free(w);
}

static void compare_i32(const char *what, const sl_tensor *got, const sl_tensor *want) {
    int32_t *g = host_i32(got), *w = host_i32(want);
    CHECK(same_bits(g, w, sl_tensor_numel(want)), "%s: not equal to the CPU's", what);
    free(g);
    free(w);
}

/* ---- router ------------------------------------------------------------------------------ */

/* Logits: a random permutation of the ranks, 0.05 apart (+-0.01 noise), so consecutive
 * probabilities differ by at least 3% and the selection never rests on a rounding. Bias: 0.5
 * on every third expert (selected first, in probability order), 0 elsewhere. */
static float *router_logits(int64_t n, int e) {
    float *l = malloc(sizeof(float) * (size_t)(n * e));
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)e);
    uint64_t s = g_seed++;
    for (int64_t r = 0; r < n; r++) {
        for (int i = 0; i < e; i++) perm[i] = i;
        for (int i = e - 1; i > 0; i--) {
            const int j = (int)(sl_test_rand_u64(&s) % (uint64_t)(i + 1));
            const int32_t t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int i = 0; i < e; i++)
            l[r * e + perm[i]] =
                0.05f * (float)i - 1.0f + 0.02f * ((float)sl_test_rand_unif(&s) - 0.5f);
    }
    free(perm);
    return l;
}

static void router_case(int64_t n, int e, int k, bool norm, bool biased) {
    char what[96];
    snprintf(what, sizeof what, "router N%lld/E%d/k%d%s%s", (long long)n, e, k, norm ? "/norm" : "",
             biased ? "/bias" : "");
    float *l = router_logits(n, e), *b = malloc(sizeof(float) * (size_t)e);
    for (int i = 0; i < e; i++) b[i] = i % 3 == 0 ? 0.5f : 0.0f;
    float *dw = normal(n * k, 1.0f), *lbl = normal(e, 0.1f);
    sl_tensor *t[2][9];
    sl_backend *be[2] = {g_cpu, g_cuda};
    for (int s = 0; s < 2; s++) {
        /* logits, bias, probs, topk_idx, topk_w, stats, dtopk_w, lbl_grad, dlogits */
        t[s][0] = sl_test_matrix(be[s], SL_F32, n, e, l);
        t[s][1] = biased ? sl_test_matrix(be[s], SL_F32, e, 1, b) : NULL;
        t[s][2] = sl_test_matrix(be[s], SL_F32, n, e, 0);
        t[s][3] = sl_test_matrix(be[s], SL_I32, n, k, 0);
        t[s][4] = sl_test_matrix(be[s], SL_F32, n, k, 0);
        t[s][5] = sl_test_matrix(be[s], SL_F32, e + 1, 1, 0);
        t[s][6] = sl_test_matrix(be[s], SL_F32, n, k, dw);
        t[s][7] = sl_test_matrix(be[s], SL_F32, e, 1, lbl);
        t[s][8] = sl_test_matrix(be[s], SL_F32, n, e, 0);
        sl_op_router_fwd(t[s][2], t[s][3], t[s][4], t[s][5], t[s][0], t[s][1], norm);
        sl_op_router_bwd(t[s][8], t[s][6], t[s][2], t[s][3], t[s][4], t[s][0], t[s][7], 0.01f,
                         norm);
    }
    char item[128];
    snprintf(item, sizeof item, "%s probs", what);
    compare(item, t[1][2], t[0][2], 1e-6, 1e-5);
    snprintf(item, sizeof item, "%s topk_idx", what);
    compare_i32(item, t[1][3], t[0][3]);
    snprintf(item, sizeof item, "%s topk_w", what);
    compare(item, t[1][4], t[0][4], 1e-6, 1e-5);
    snprintf(item, sizeof item, "%s stats", what);
    compare(item, t[1][5], t[0][5], 1e-6, 1e-5);
    snprintf(item, sizeof item, "%s dlogits", what);
    compare(item, t[1][8], t[0][8], 1e-6, 1e-5);
    /* stats again: the same bits */
    float *first = sl_test_host_floats(t[1][5]);
    sl_op_router_fwd(t[1][2], t[1][3], t[1][4], t[1][5], t[1][0], t[1][1], norm);
    float *again = sl_test_host_floats(t[1][5]);
    CHECK(same_bits(first, again, e + 1), "%s: stats differ run after run", what);
    sl_test_release();
    free(first), free(again), free(l), free(b), free(dw), free(lbl);
}

static void test_router(void) {
    router_case(2000, 128, 8, true, true);   /* the paper's E and k; 16 stats blocks */
    router_case(1300, 256, 8, true, false);  /* 8 experts per lane */
    router_case(300, 512, 8, false, true);   /* 16 per lane */
    router_case(150, 1024, 16, true, true);  /* 32 per lane, the most */
    router_case(3, 1000, 1000, true, false); /* k = E: every lane writes many weights */
}

/* ---- moe_sort ------------------------------------------------------------------------------ */

/* Expert ids: `heavy` of every 10 slots go to expert e - 1, the rest uniform in [0, e). */
static int32_t *skewed(int64_t n, int64_t e, int heavy) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t s = g_seed++;
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int)(i % 10) < heavy ? (int32_t)(e - 1)
                                       : (int32_t)(sl_test_rand_u64(&s) % (uint64_t)e);
    return ids;
}

static void sort_case(int64_t n, int64_t k, int64_t e) {
    char what[96];
    int32_t *ids = skewed(n * k, e, 4);
    sl_tensor *t[2][4];
    sl_backend *be[2] = {g_cpu, g_cuda};
    for (int s = 0; s < 2; s++) {
        t[s][0] = sl_test_matrix(be[s], SL_I32, n, k, ids);
        t[s][1] = sl_test_matrix(be[s], SL_I32, e, 1, 0);
        t[s][2] = sl_test_matrix(be[s], SL_I32, n * k, 1, 0);
        t[s][3] = sl_test_matrix(be[s], SL_I32, n * k, 1, 0);
        sl_op_moe_sort(t[s][1], t[s][2], t[s][3], t[s][0]);
    }
    snprintf(what, sizeof what, "moe_sort N%lld/k%lld/E%lld counts", (long long)n, (long long)k,
             (long long)e);
    compare_i32(what, t[1][1], t[0][1]);
    snprintf(what, sizeof what, "moe_sort N%lld/k%lld/E%lld sorted_token", (long long)n,
             (long long)k, (long long)e);
    compare_i32(what, t[1][2], t[0][2]);
    snprintf(what, sizeof what, "moe_sort N%lld/k%lld/E%lld slot_pos", (long long)n, (long long)k,
             (long long)e);
    compare_i32(what, t[1][3], t[0][3]);
    sl_test_release();
    free(ids);
}

/* Ids outside [0, E) (the CPU stops the run): those slots get slot_pos -1 and are not counted;
 * the others are sorted stably as if they were absent. */
static void sort_out_of_range(void) {
    const int64_t n = 7, k = 3, e = 4;
    const int32_t ids[21] = {0, 3, -1, 2, 4, 2, 1, 1, 0, 99, 3, 3, 2, 0, -7, 1, 2, 3, 0, 0, 4};
    sl_tensor *ti = sl_test_matrix(g_cuda, SL_I32, n, k, ids),
              *tc = sl_test_matrix(g_cuda, SL_I32, e, 1, 0);
    sl_tensor *ts = sl_test_matrix(g_cuda, SL_I32, n * k, 1, 0),
              *tp = sl_test_matrix(g_cuda, SL_I32, n * k, 1, 0);
    sl_op_moe_sort(tc, ts, tp, ti);
    int32_t *cnt = host_i32(tc), *st = host_i32(ts), *sp = host_i32(tp);
    int32_t want_cnt[4] = {0}, next[4];
    for (int i = 0; i < n * k; i++)
        if (ids[i] >= 0 && ids[i] < e) want_cnt[ids[i]]++;
    bool ok = same_bits(cnt, want_cnt, e);
    next[0] = 0;
    for (int i = 1; i < e; i++) next[i] = next[i - 1] + want_cnt[i - 1];
    for (int i = 0; i < n * k; i++) {
        if (ids[i] < 0 || ids[i] >= e) {
            ok &= sp[i] == -1;
            continue;
        }
        const int32_t pos = next[ids[i]]++;
        ok &= sp[i] == pos && st[pos] == i / k;
    }
    CHECK(ok, "moe_sort skips expert ids outside [0, E) (slot_pos -1, not counted)");
    sl_test_release();
    free(cnt), free(st), free(sp);
}

static void test_sort(void) {
    sort_case(16384, 8, 128); /* 64 tiles of 2048 slots */
    sort_case(3000, 4, 2000); /* 5 warps per block (shared memory), 12 bits of ballots */
    sort_case(5000, 2, 6000); /* 1 warp per block, 64 steps per tile */
    sort_case(1000, 2, 1);    /* one expert: no ballot bits */
    sort_out_of_range();
}

/* ---- scatter-add and gather --------------------------------------------------------------- */

/* idx: `heavy` of every 10 into row rows - 1, the rest uniform; `bad` entries outside [0, rows)
 * every 97th (then the CPU run gets index 0 and a zero source row instead). */
static void scatter_case(int64_t rows, int64_t m, int64_t c, sl_dtype dt, bool bad) {
    char what[96];
    snprintf(what, sizeof what, "scatter_add_rows %lld->%lldx%lld %s%s", (long long)m,
             (long long)rows, (long long)c, dt == SL_BF16 ? "bf16" : "f32",
             bad ? " (bad indices)" : "");
    int32_t *idx = skewed(m, rows, 4), *cidx = malloc(sizeof(int32_t) * (size_t)m);
    float *src = normal(m * c, 1.0f), *dst = normal(rows * c, 1.0f);
    if (dt == SL_BF16) {
        float *a = rounded(src, m * c), *b = rounded(dst, rows * c);
        free(src), free(dst);
        src = a, dst = b;
    }
    float *csrc = malloc(sizeof(float) * (size_t)(m * c));
    memcpy(csrc, src, sizeof(float) * (size_t)(m * c));
    memcpy(cidx, idx, sizeof(int32_t) * (size_t)m);
    if (bad)
        for (int64_t i = 5; i < m; i += 97) {
            idx[i] = i % 2 ? -1 - (int32_t)i : (int32_t)(rows + i);
            cidx[i] = 0;
            for (int64_t j = 0; j < c; j++) csrc[i * c + j] = 0.0f;
        }
    sl_tensor *cd = sl_test_matrix(g_cpu, SL_F32, rows, c, dst),
              *cs = sl_test_matrix(g_cpu, SL_F32, m, c, csrc);
    sl_op_scatter_add_rows(cd, cs, sl_test_matrix(g_cpu, SL_I32, m, 1, cidx));
    sl_tensor *gd = sl_test_ftensor(g_cuda, dt, rows, c, dst),
              *gs = sl_test_ftensor(g_cuda, dt, m, c, src);
    sl_op_scatter_add_rows(gd, gs, sl_test_matrix(g_cuda, SL_I32, m, 1, idx));
    float *want = sl_test_host_floats(cd), *got = sl_test_host_floats(gd);
    if (dt == SL_BF16)
        for (int64_t i = 0; i < rows * c; i++) want[i] = sl_test_bf16_round(want[i]);
    CHECK(same_bits(got, want, rows * c), "%s: not bitwise equal to the CPU's", what);
    /* and, in fp32, within the any-order bound the atomic variant is held to (below) */
    if (dt == SL_F32)
        CHECK(sl_test_check_scatter_sum(what, got, dst, src, idx, rows, m, c) <= 1.0,
              "%s: outside the fp32 summation bound", what);
    /* gather the rows back (a bit copy; bad indices leave their rows alone) */
    if (!bad) {
        sl_tensor *back = sl_test_ftensor(g_cuda, dt, m, c, src);
        sl_op_gather_rows(back, gd, sl_test_matrix(g_cuda, SL_I32, m, 1, idx));
        float *gb = sl_test_host_floats(back);
        bool ok = true;
        for (int64_t i = 0; i < m; i++) ok &= same_bits(gb + i * c, got + idx[i] * c, c);
        CHECK(ok, "gather_rows %lld<-%lldx%lld: rows copied exactly", (long long)m, (long long)rows,
              (long long)c);
        free(gb);
    }
    sl_test_release();
    free(idx), free(cidx), free(src), free(csrc), free(dst), free(want), free(got);
}

/* The atomic variant: rows 0..999, 30,000 source rows of 24, 40% of them onto the last row
 * (12,000 summands there, ~18 elsewhere). Float atomics add in the order the blocks happen to
 * run, so the result is held to the bound of fp32 summation in any order, derived per element
 * from its summands (sl_test_check_scatter_sum), not to a fixed epsilon: on an H200 the hot
 * row's sum of 12,000 normal terms differed from the CPU's by 1.4e-4, 1.3x a fixed 1e-4 +
 * 1e-5 |x| and far inside its bound (~7: 12,000 x 2^-24 x sum |x| ~ 9,600). `grid`: every
 * value a multiple of 2^-8 in (-1, 1), so every partial sum (below 2^16 in magnitude) is
 * exact in fp32 and any order gives the exact sum: bitwise equal to the CPU, which a lost or
 * doubled summand on the hot row would break, bound or not. */
static void atomic_scatter_case(sl_backend *fast, bool grid) {
    const int64_t rows = 1000, m = 30000, c = 24;
    int32_t *idx = skewed(m, rows, 4);
    float *src = normal(m * c, 1.0f), *dst = normal(rows * c, 1.0f);
    if (grid) {
        for (int64_t i = 0; i < m * c; i++)
            src[i] = roundf(fminf(fmaxf(src[i], -0.99f), 0.99f) * 256.0f) / 256.0f;
        for (int64_t i = 0; i < rows * c; i++)
            dst[i] = roundf(fminf(fmaxf(dst[i], -0.99f), 0.99f) * 256.0f) / 256.0f;
    }
    sl_tensor *cd = sl_test_matrix(g_cpu, SL_F32, rows, c, dst),
              *fd = sl_test_matrix(fast, SL_F32, rows, c, dst);
    sl_op_scatter_add_rows(cd, sl_test_matrix(g_cpu, SL_F32, m, c, src),
                           sl_test_matrix(g_cpu, SL_I32, m, 1, idx));
    sl_op_scatter_add_rows(fd, sl_test_matrix(fast, SL_F32, m, c, src),
                           sl_test_matrix(fast, SL_I32, m, 1, idx));
    float *got = sl_test_host_floats(fd), *want = sl_test_host_floats(cd);
    const char *what = grid ? "scatter_add_rows (atomic, 2^-8 grid)" : "scatter_add_rows (atomic)";
    if (grid)
        CHECK(same_bits(got, want, rows * c), "%s: exact sums, yet not bitwise the CPU's", what);
    const double r = sl_test_check_scatter_sum(what, got, dst, src, idx, rows, m, c);
    CHECK(r <= 1.0, "%s: %.3g x the fp32 any-order summation bound", what, r);
    sl_test_release();
    free(idx), free(src), free(dst), free(got), free(want);
}

/* `test_cuda_moe atomic`: the atomic variant alone, on a non-deterministic backend. Under the
 * emulator it is registered with SLUICE_EMU_RACECHECK=0 (tests/cuda_moe.cmake): the race check
 * replays every launch in a second thread order and would, rightly, report the order-dependent
 * float sums; with one order the emulator still runs the atomic code path and its result must
 * meet the same checks. */
static void test_scatter_atomic(void) {
    sl_backend_params p = {.threads = 0, .device = -1, .allow_nondeterministic = true};
    char err[256];
    sl_backend *fast = sl_backend_create("cuda", &p, err, sizeof err);
    CHECK(fast != NULL, "a non-deterministic CUDA backend: %s", err);
    if (fast) {
        atomic_scatter_case(fast, false);
        atomic_scatter_case(fast, true);
        sl_backend_free(fast);
    }
}

/* gather_add_rows (the permutation's backward through slot_pos) against scatter_add_rows
 * through the inverse, bitwise, on the CUDA backend, and against the CPU's gather_add_rows
 * (bitwise in fp32; in bf16 the CPU's fp32 sums rounded once). n tokens of k slots, a random
 * permutation of them; `drop` of the n k positions past the m = n k - drop source rows. beta 0:
 * the gather writes (its destinations start as NaN, never read) and the scatter adds into zeros.
 */
static void gather_add_case(int64_t n, int k, int64_t c, int64_t drop, sl_dtype dt, float beta) {
    char what[96];
    snprintf(what, sizeof what, "gather_add_rows N%lld/k%d/C%lld/drop%lld %s beta %g", (long long)n,
             k, (long long)c, (long long)drop, dt == SL_BF16 ? "bf16" : "f32", beta);
    const int64_t slots = n * k, m = slots - drop;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)slots),
            *idx = malloc(sizeof(int32_t) * (size_t)m);
    for (int64_t s = 0; s < slots; s++) pos[s] = (int32_t)s;
    for (int64_t s = slots - 1; s > 0; s--) { /* Fisher-Yates with a fixed LCG */
        g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t j = (int64_t)((g_seed >> 33) % (uint64_t)(s + 1));
        const int32_t t = pos[s];
        pos[s] = pos[j], pos[j] = t;
    }
    for (int64_t s = 0; s < slots; s++)
        if (pos[s] < m) idx[pos[s]] = (int32_t)(s / k);
    float *src = normal(m * c, 1.0f), *dst = normal(n * c, 1.0f);
    if (dt == SL_BF16) {
        float *a = rounded(src, m * c), *b = rounded(dst, n * c);
        free(src), free(dst);
        src = a, dst = b;
    }
    sl_tensor *cd = sl_test_matrix(g_cpu, SL_F32, n, c, dst);
    sl_tensor *gs = sl_test_ftensor(g_cuda, dt, m, c, src);
    sl_tensor *gd = sl_test_ftensor(g_cuda, dt, n, c, dst),
              *sd = sl_test_ftensor(g_cuda, dt, n, c, dst);
    if (beta == 0.0f) {
        sl_op_fill(cd, NAN), sl_op_fill(gd, NAN), sl_op_fill(sd, 0.0f);
    }
    sl_op_gather_add_rows(cd, sl_test_matrix(g_cpu, SL_F32, m, c, src),
                          sl_test_matrix(g_cpu, SL_I32, slots, 1, pos), k, beta);
    sl_op_gather_add_rows(gd, gs, sl_test_matrix(g_cuda, SL_I32, slots, 1, pos), k, beta);
    sl_op_scatter_add_rows(sd, gs, sl_test_matrix(g_cuda, SL_I32, m, 1, idx));
    float *want = sl_test_host_floats(cd), *got = sl_test_host_floats(gd);
    float *scat = sl_test_host_floats(sd);
    CHECK(same_bits(got, scat, n * c), "%s: not bitwise the scatter's", what);
    if (dt == SL_BF16)
        for (int64_t i = 0; i < n * c; i++) want[i] = sl_test_bf16_round(want[i]);
    CHECK(same_bits(got, want, n * c), "%s: not bitwise equal to the CPU's", what);
    sl_test_release();
    free(pos), free(idx), free(src), free(dst), free(want), free(got), free(scat);
}

static void test_scatter(void) {
    gather_add_case(4096, 8, 64, 0, SL_F32, 1.0f); /* top-8 */
    /* the 15A2B row width, 16-byte packs; 1,024 tokens (8,192 slots): at 4,096 these two took
     * 13.6 of the emulated test's 45 s, and the width, not the count, is what they test */
    gather_add_case(1024, 8, 2048, 0, SL_BF16, 1.0f);
    gather_add_case(1024, 8, 2048, 0, SL_BF16, 0.0f); /* written: the MoE backward's dxn */
    gather_add_case(300, 32, 24, 1000, SL_F32, 1.0f); /* a full warp of slots; drops */
    gather_add_case(300, 32, 24, 1000, SL_F32, 0.0f); /* rows all dropped become 0 */
    gather_add_case(77, 3, 5, 20, SL_BF16, 1.0f);     /* rows not a multiple of 8 */
    scatter_case(131072, 20000, 24, SL_F32, false);   /* 18 bits: two radix passes; packs */
    scatter_case(131072, 20000, 24, SL_BF16, false);  /* bf16 packs of 8 */
    scatter_case(3000000, 5000, 1, SL_F32, false);    /* 22 bits: three passes */
    scatter_case(50, 4000, 5, SL_F32, true);          /* ~1600 sources on one row; bad indices */
    scatter_case(50, 4000, 5, SL_BF16, true);
}

/* ---- combine, SwiGLU, row gate ----------------------------------------------------------- */

/* The row kernels on [rows, c] operands: all as views one element off a 16-byte boundary
 * (odd), or all fresh tensors of dtype dt. bf16: the CPU computes on the same rounded inputs;
 * tolerances as test_backend_ops' (one rounding of each output, 2^-9 relative). */
static void rows_case(int64_t n, int64_t k, int64_t c, sl_dtype dt, bool odd) {
    char what[96];
    const char *tag = odd ? "f32 views" : dt == SL_BF16 ? "bf16" : "f32";
    const double atol = dt == SL_BF16 ? 1e-2 : 1e-6, rtol = dt == SL_BF16 ? 1e-2 : 1e-5;
    float *x = normal(n * k * c, 1.0f), *dy = normal(n * c, 1.0f), *gu = normal(n * 2 * c, 2.0f);
    float *s = normal(n, 2.0f), *w = normal(n * k, 0.5f);
    if (dt == SL_BF16) {
        float *v[4] = {rounded(x, n * k * c), rounded(dy, n * c), rounded(gu, n * 2 * c),
                       rounded(s, n)};
        free(x), free(dy), free(gu), free(s);
        x = v[0], dy = v[1], gu = v[2], s = v[3];
    }
    /* slot_pos: a permutation of the n k slots */
    int32_t *sp = malloc(sizeof(int32_t) * (size_t)(n * k));
    uint64_t st = g_seed++;
    for (int64_t i = 0; i < n * k; i++) sp[i] = (int32_t)i;
    for (int64_t i = n * k - 1; i > 0; i--) {
        const int64_t j = (int64_t)(sl_test_rand_u64(&st) % (uint64_t)(i + 1));
        const int32_t t = sp[i];
        sp[i] = sp[j], sp[j] = t;
    }
    sl_tensor *o[2][9];
    sl_backend *be[2] = {g_cpu, g_cuda};
    for (int b = 0; b < 2; b++) {
        const sl_dtype d = b == 0 ? SL_F32 : dt;
#define MK(r, cc, h)                                                                               \
    (b == 1 && odd ? odd_view(be[b], r, cc, h) : sl_test_ftensor(be[b], d, r, cc, h))
        sl_tensor *tx = MK(n * k, c, x), *tdy = MK(n, c, dy), *tgu = MK(n, 2 * c, gu);
        sl_tensor *ts = MK(n, 1, s), *tw = sl_test_matrix(be[b], SL_F32, n, k, w);
        sl_tensor *tsp = sl_test_matrix(be[b], SL_I32, n * k, 1, sp);
        o[b][0] = MK(n, c, NULL);                         /* y = combine */
        o[b][1] = MK(n * k, c, NULL);                     /* dx */
        o[b][2] = sl_test_matrix(be[b], SL_F32, n, k, 0); /* dw */
        o[b][3] = MK(n, c, NULL);                         /* h = swiglu */
        o[b][4] = MK(n, 2 * c, NULL);                     /* dgu */
        o[b][5] = MK(n, c, NULL);                         /* rowgate y */
        o[b][6] = MK(n, c, NULL);                         /* rowgate dx */
        o[b][7] = MK(n, 1, NULL);                         /* ds */
        o[b][8] = MK(n, c, NULL);                         /* gather of x's rows */
#undef MK
        sl_op_moe_combine(o[b][0], tx, tsp, tw, NULL);
        sl_op_moe_combine_bwd(o[b][1], o[b][2], tdy, tx, tsp, tw);
        sl_op_swiglu_fwd(o[b][3], tgu);
        sl_op_swiglu_bwd(o[b][4], tdy, tgu);
        sl_op_rowgate_fwd(o[b][5], tdy, ts);
        sl_op_rowgate_bwd(o[b][6], o[b][7], tdy, tdy, ts);
        sl_tensor *first = sl_test_track(sl_tensor_view1(tsp, 0, n));
        sl_op_gather_rows(o[b][8], tx, first);
    }
    static const char *names[9] = {"moe_combine",    "moe_combine_bwd dx", "moe_combine_bwd dw",
                                   "swiglu_fwd",     "swiglu_bwd",         "rowgate_fwd",
                                   "rowgate_bwd dx", "rowgate_bwd ds",     "gather_rows"};
    /* dw and ds sum over a row of c products: as test_backend_ops' moe_combine_bwd and
     * rowgate_bwd bounds */
    for (int i = 0; i < 9; i++) {
        snprintf(what, sizeof what, "%s N%lld/k%lld/C%lld %s", names[i], (long long)n, (long long)k,
                 (long long)c, tag);
        const bool sums = i == 2 || i == 7;
        if (i == 8) { /* a bit copy */
            float *g = sl_test_host_floats(o[1][i]), *h = sl_test_host_floats(o[0][i]);
            CHECK(same_bits(g, h, n * c), "%s: rows not copied exactly", what);
            free(g), free(h);
        } else {
            compare(what, o[1][i], o[0][i], sums ? 10 * atol : atol, sums ? 2 * rtol : rtol);
        }
    }
    sl_test_release();
    free(x), free(dy), free(gu), free(s), free(w), free(sp);
}

static void test_rows(void) {
    rows_case(37, 3, 33, SL_F32, true);     /* odd widths and offsets: element by element */
    rows_case(40, 2, 64, SL_F32, true);     /* widths fit 16 bytes, bases do not */
    rows_case(33, 4, 2048, SL_F32, false);  /* the paper's hidden size: packs of 4 */
    rows_case(33, 4, 2048, SL_BF16, false); /* packs of 8, 2048-long row sums */
}

int main(int argc, char **argv) {
    const bool atomic = argc == 2 && strcmp(argv[1], "atomic") == 0;
    if (argc > 2 || (argc == 2 && !atomic)) {
        fprintf(stderr, "usage: test_cuda_moe [atomic]\n");
        return 2;
    }
    g_cuda = sl_test_cuda_or_skip(NULL);
    g_cpu = sl_test_cpu();
    if (atomic) {
        test_scatter_atomic();
        sl_backend_free(g_cuda);
        return sl_test_finish("test_cuda_moe atomic");
    }
    /* each part's seconds: under the emulator (and ASan) this test is one of CI's longest */
    const struct {
        const char *name;
        void (*run)(void);
    } parts[] = {{"router", test_router},
                 {"sort", test_sort},
                 {"scatter", test_scatter},
                 {"rows", test_rows}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        parts[i].run();
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("test_cuda_moe: %s %.1f s\n", parts[i].name,
               (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
    }
    sl_backend_free(g_cuda);
    return sl_test_finish("test_cuda_moe");
}
