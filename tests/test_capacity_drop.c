/*
 * tests/test_capacity_drop.c - capacity drops of the token dispatcher (one process, no
 * expert parallelism).
 *
 * With capacity factor cf > 0 expert e keeps min(count_e, cap) of its slots,
 * cap = ceil(cf * N * k / E); "probs" keeps the cap slots with the largest routing weights
 * (ties: the earlier slot), "position" the earliest tokens. Checked:
 *   - a hand-made routing (N 10, k 2, E 4; expert 0 over capacity with tied weights at the
 *     cut, expert 1 exactly at capacity, expert 3 unused) against literal keep tables for
 *     cf 1.0 under both policies, and cf 0.01 (cap 1) where several tokens lose every slot;
 *   - a skewed random routing (N 64, k 3, E 8, weights on a grid of eighths so ties are
 *     common) for cf 0.5 / 1.0 / 1.25 / 2.0 under both policies against a naive rule;
 *   - in every case: counts_host, kept_host = min(count, cap), kept/dropped totals,
 *     local_counts, expert_in row by row (kept slots in expert order, stable within an
 *     expert); y = sum over kept slots of w f_e(x) within 1e-6 + 1e-5 |ref| while the rows
 *     of expert_out past the kept ones hold 1e6 garbage (dropped slots must read exact
 *     zeros); a token whose slots were all dropped gets y exactly 0, dx exactly its initial
 *     value; dtopk_w of a dropped slot is exactly 0; dx = dx0 + sum over kept slots of
 *     w (1 + e) dy while dexpert_in past the kept rows holds garbage;
 *   - cf 4.0 on the random routing drops nothing, and y, dx and dtopk_w are bitwise equal
 *     to the dropless dispatcher's.
 * The experts are f_e(x) = (1 + e) x + e / 4 per element, applied on the host.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/token_dispatcher.h"
#include "tests/test_util.h"

typedef struct {
    int n, k, e, c;
    const int32_t *idx;
    const float *w;
    const float *x, *dy, *dx0;
} routing;

typedef struct {
    float *y, *dx, *dw;
} result;

static float fexp(int e, float x) {
    return (1.0f + (float)e) * x + 0.25f * (float)e;
}

/* The naive rule: keep[s] for slot s = n*k + j. */
static void naive_keep(const routing *r, double cf, sl_drop_policy pol, char *keep,
                       int64_t *cap_out) {
    const int64_t slots = (int64_t)r->n * r->k;
    const int64_t cap = (int64_t)ceil(cf * (double)slots / r->e);
    for (int64_t s = 0; s < slots; s++) {
        int64_t ahead = 0;
        for (int64_t t = 0; t < slots; t++) {
            if (t == s || r->idx[t] != r->idx[s]) continue;
            if (pol == SL_DROP_POSITION)
                ahead += t < s;
            else
                ahead += r->w[t] > r->w[s] || (r->w[t] == r->w[s] && t < s);
        }
        keep[s] = ahead < cap;
    }
    *cap_out = cap;
}

/* Runs dispatch -> experts -> combine -> backward. keep == NULL: nothing may be dropped
 * (dropless dispatcher or a large capacity). Returns y, dx, dtopk_w (caller frees). */
static result run(const routing *r, double cf, sl_drop_policy pol, const char *keep, int64_t cap,
                  const char *tag) {
    const int n = r->n, k = r->k, e = r->e, c = r->c;
    const int64_t slots = (int64_t)n * k;
    sl_token_dispatcher d;
    sl_dispatcher_params p = {.experts = e,
                              .topk = k,
                              .hidden = c,
                              .max_tokens = n,
                              .ep = NULL,
                              .capacity_factor = cf,
                              .drop_policy = pol};
    sl_token_dispatcher_init(&d, sl_test_cpu(), &p);
    sl_tensor *xn = sl_test_tensor(SL_F32, 2, (int64_t[]){n, c}, r->x);
    sl_tensor *ti = sl_test_tensor(SL_I32, 2, (int64_t[]){n, k}, r->idx);
    sl_tensor *tw = sl_test_tensor(SL_F32, 2, (int64_t[]){n, k}, r->w);
    sl_tensor *y = sl_test_tensor(SL_F32, 2, (int64_t[]){n, c}, NULL);
    sl_tensor *dy = sl_test_tensor(SL_F32, 2, (int64_t[]){n, c}, r->dy);
    sl_tensor *dx = sl_test_tensor(SL_F32, 2, (int64_t[]){n, c}, r->dx0);
    sl_tensor *dw = sl_test_tensor(SL_F32, 2, (int64_t[]){n, k}, NULL);
    sl_op_fill(y, 777.0f), sl_op_fill(dw, 777.0f);

    sl_token_dispatcher_dispatch(&d, xn, ti, tw);

    /* counts and kept counts */
    int64_t *count = calloc((size_t)e, sizeof(int64_t)), *kept = calloc((size_t)e, sizeof(int64_t));
    int64_t total_kept = 0;
    for (int64_t s = 0; s < slots; s++) {
        count[r->idx[s]]++;
        if (!keep || keep[s]) kept[r->idx[s]]++, total_kept++;
    }
    for (int x = 0; x < e; x++) {
        CHECK(d.counts_host[x] == count[x], "%s: counts_host[%d] = %lld, expected %lld", tag, x,
              (long long)d.counts_host[x], (long long)count[x]);
        const int64_t want = keep ? (count[x] < cap ? count[x] : cap) : count[x];
        CHECK(kept[x] == want, "%s: the reference keeps %lld of expert %d, min(count, cap) = %lld",
              tag, (long long)kept[x], x, (long long)want);
        CHECK(d.kept_host[x] == want, "%s: kept_host[%d] = %lld, expected min(%lld, %lld) = %lld",
              tag, x, (long long)d.kept_host[x], (long long)count[x], (long long)cap,
              (long long)want);
        CHECK(d.local_counts[x] == want, "%s: local_counts[%d] = %lld, expected %lld", tag, x,
              (long long)d.local_counts[x], (long long)want);
    }
    CHECK(d.kept == total_kept && d.dropped == slots - total_kept,
          "%s: kept %lld dropped %lld, expected %lld and %lld", tag, (long long)d.kept,
          (long long)d.dropped, (long long)total_kept, (long long)(slots - total_kept));

    /* expert_in: the kept slots' tokens, expert by expert, in slot order */
    float *want_in = calloc((size_t)slots * c + 1, sizeof(float));
    int *row_expert = calloc((size_t)slots + 1, sizeof(int));
    int64_t rows = 0;
    for (int x = 0; x < e; x++)
        for (int64_t s = 0; s < slots; s++)
            if (r->idx[s] == x && (!keep || keep[s])) {
                memcpy(want_in + rows * c, r->x + (s / k) * c, sizeof(float) * (size_t)c);
                row_expert[rows++] = x;
            }
    float *ein = calloc((size_t)slots * c + 1, sizeof(float));
    if (rows) sl_tensor_to_host_range(d.expert_in, 0, rows * c, ein);
    CHECK(memcmp(ein, want_in, sizeof(float) * (size_t)rows * c) == 0,
          "%s: expert_in does not hold exactly the kept slots' tokens in expert order", tag);

    /* experts; every row of expert_out past the kept ones holds garbage */
    sl_op_fill(d.expert_out, 1e6f);
    float *eout = calloc((size_t)slots * c + 1, sizeof(float));
    for (int64_t i = 0; i < rows * c; i++) eout[i] = fexp(row_expert[i / c], ein[i]);
    if (rows) sl_tensor_from_host_range(d.expert_out, 0, rows * c, eout);
    sl_token_dispatcher_combine(&d, tw, NULL, y);

    sl_token_dispatcher_combine_backward(&d, dy, tw, dw);
    float *dout = calloc((size_t)slots * c + 1, sizeof(float));
    if (rows) sl_tensor_to_host_range(d.dexpert_out, 0, rows * c, dout);
    sl_op_fill(d.dexpert_in, 1e6f);
    for (int64_t i = 0; i < rows * c; i++) dout[i] *= 1.0f + (float)row_expert[i / c];
    if (rows) sl_tensor_from_host_range(d.dexpert_in, 0, rows * c, dout);
    sl_token_dispatcher_dispatch_backward(&d, dx, 1.0f);

    result res = {sl_test_host_f32(y), sl_test_host_f32(dx), sl_test_host_f32(dw)};

    /* naive reference */
    float *yref = calloc((size_t)n * c, sizeof(float)),
          *dxref = calloc((size_t)n * c, sizeof(float));
    float *dwref = calloc((size_t)n * k, sizeof(float));
    for (int t = 0; t < n; t++) {
        bool any = false;
        for (int ch = 0; ch < c; ch++) {
            double acc = 0.0, dacc = r->dx0[t * c + ch];
            for (int j = 0; j < k; j++) {
                const int64_t s = (int64_t)t * k + j;
                if (keep && !keep[s]) continue;
                const int x = r->idx[s];
                acc += (double)r->w[s] * fexp(x, r->x[t * c + ch]);
                dacc += (double)r->w[s] * (1.0 + x) * r->dy[t * c + ch];
            }
            yref[t * c + ch] = (float)acc;
            dxref[t * c + ch] = (float)dacc;
        }
        for (int j = 0; j < k; j++) {
            const int64_t s = (int64_t)t * k + j;
            if (keep && !keep[s]) {
                CHECK(res.dw[s] == 0.0f, "%s: dropped slot %lld (token %d) has dtopk_w %g", tag,
                      (long long)s, t, res.dw[s]);
                continue;
            }
            any = true;
            double dot = 0.0;
            for (int ch = 0; ch < c; ch++)
                dot += (double)r->dy[t * c + ch] * fexp(r->idx[s], r->x[t * c + ch]);
            dwref[s] = (float)dot;
        }
        if (!any)
            for (int ch = 0; ch < c; ch++) {
                CHECK(res.y[t * c + ch] == 0.0f, "%s: token %d lost every slot but y = %g", tag, t,
                      res.y[t * c + ch]);
                CHECK(res.dx[t * c + ch] == r->dx0[t * c + ch],
                      "%s: token %d lost every slot but dx changed (%g -> %g)", tag, t,
                      r->dx0[t * c + ch], res.dx[t * c + ch]);
            }
    }
    double ey = sl_test_compare(tag, res.y, yref, (int64_t)n * c, 1e-6, 1e-5);
    double edx = sl_test_compare(tag, res.dx, dxref, (int64_t)n * c, 1e-6, 1e-5);
    double edw = sl_test_compare(tag, res.dw, dwref, (int64_t)n * k, 1e-6, 1e-5);
    CHECK(ey <= 1.0, "%s: y differs from the kept-slots reference (%.3g)", tag, ey);
    CHECK(edx <= 1.0, "%s: dx differs from the kept-slots reference (%.3g)", tag, edx);
    CHECK(edw <= 1.0, "%s: dtopk_w differs from the kept-slots reference (%.3g)", tag, edw);

    free(yref), free(dxref), free(dwref), free(eout), free(dout), free(ein), free(want_in);
    free(row_expert), free(count), free(kept);
    sl_tensor *ts[] = {xn, ti, tw, y, dy, dx, dw};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    sl_token_dispatcher_free(&d);
    return res;
}

static void free_result(result *r) {
    free(r->y), free(r->dx), free(r->dw);
}

static int64_t dropped_of(const char *keep, int64_t slots) {
    int64_t n = 0;
    for (int64_t s = 0; s < slots; s++) n += !keep[s];
    return n;
}

/* ---- the hand-made routing ---- */
enum { HN = 10, HK = 2, HE = 4, HC = 3 };
static const int32_t h_idx[HN * HK] = {0, 1, 0, 2, 2, 0, 0, 1, 1, 0, 0, 2, 2, 0, 0, 1, 2, 1, 0, 2};
static const float h_w[HN * HK] = {0.5f, 0.5f, 0.3f, 0.7f, 0.6f, 0.4f, 0.5f,  0.5f,  0.9f,  0.1f,
                                   0.8f, 0.2f, 0.5f, 0.5f, 0.5f, 0.5f, 0.55f, 0.45f, 0.65f, 0.35f};
/* Expert 0 has 9 slots (tokens 0 1 2 3 4 5 6 7 9, weights .5 .3 .4 .5 .1 .8 .5 .5 .65),
 * expert 1 five (tokens 0 3 4 7 8), expert 2 six (tokens 1 2 5 6 8 9), expert 3 none.
 * cf 1.0: cap = ceil(20 / 4) = 5.
 *   probs:    expert 0 keeps .8 .65 and three of the four .5s (tokens 0 3 6; token 7's .5
 *             loses the tie), drops tokens 1 2 4 7; expert 2 drops token 5 (.2).
 *   position: expert 0 keeps tokens 0-4 (drops 5 6 7 9); expert 2 drops token 9. */
static const char h_keep_probs[HN * HK] = {1, 1, 0, 1, 1, 0, 1, 1, 1, 0,
                                           1, 0, 1, 1, 0, 1, 1, 1, 1, 1};
static const char h_keep_pos[HN * HK] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                         0, 1, 1, 0, 0, 1, 1, 1, 0, 0};
/* cf 0.01: cap 1. probs keeps token 5 (.8) for expert 0, token 4 (.9) for expert 1 and
 * token 1 (.7) for expert 2: tokens 0 2 3 6 7 8 9 lose every slot. position keeps the first
 * slot of each expert: token 0 for experts 0 and 1, token 1 for expert 2. */
static const char h_keep_probs_tiny[HN * HK] = {0, 0, 0, 1, 0, 0, 0, 0, 1, 0,
                                                1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
static const char h_keep_pos_tiny[HN * HK] = {1, 1, 0, 1, 0, 0, 0, 0, 0, 0,
                                              0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static void test_hand_made(void) {
    float x[HN * HC], dy[HN * HC], dx0[HN * HC];
    sl_test_fill_uniform(x, HN * HC, -1, 1, 11);
    sl_test_fill_uniform(dy, HN * HC, -1, 1, 12);
    sl_test_fill_uniform(dx0, HN * HC, -0.5f, 0.5f, 13);
    const routing r = {HN, HK, HE, HC, h_idx, h_w, x, dy, dx0};
    struct {
        double cf;
        sl_drop_policy pol;
        const char *keep;
        int64_t cap;
        const char *tag;
    } cases[] = {{1.0, SL_DROP_PROBS, h_keep_probs, 5, "hand-made cf 1.0 probs"},
                 {1.0, SL_DROP_POSITION, h_keep_pos, 5, "hand-made cf 1.0 position"},
                 {0.01, SL_DROP_PROBS, h_keep_probs_tiny, 1, "hand-made cf 0.01 probs"},
                 {0.01, SL_DROP_POSITION, h_keep_pos_tiny, 1, "hand-made cf 0.01 position"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* the naive rule agrees with the literal table (guards the reference) */
        char keep[HN * HK];
        int64_t cap;
        naive_keep(&r, cases[i].cf, cases[i].pol, keep, &cap);
        CHECK(cap == cases[i].cap && memcmp(keep, cases[i].keep, sizeof keep) == 0,
              "%s: the naive rule disagrees with the table", cases[i].tag);
        result res = run(&r, cases[i].cf, cases[i].pol, cases[i].keep, cases[i].cap, cases[i].tag);
        free_result(&res);
    }
}

/* ---- a skewed random routing with many tied weights ---- */
enum { RN = 64, RK = 3, RE = 8, RC = 4 };

static void test_random(void) {
    int32_t idx[RN * RK];
    float w[RN * RK], x[RN * RC], dy[RN * RC], dx0[RN * RC], u[RN * RK * 2];
    sl_test_fill_uniform(u, RN * RK * 2, 0, 1, 21);
    for (int t = 0; t < RN; t++)
        for (int j = 0; j < RK; j++) {
            /* skewed: low experts are popular; k distinct experts per token */
            int v = (int)(RE * u[(t * RK + j) * 2] * u[(t * RK + j) * 2]);
            for (;; v = (v + 1) % RE) {
                bool dup = false;
                for (int q = 0; q < j; q++) dup |= idx[t * RK + q] == v;
                if (!dup) break;
            }
            idx[t * RK + j] = v;
            w[t * RK + j] = (float)(1 + (int)(8 * u[(t * RK + j) * 2 + 1])) / 8.0f;
        }
    sl_test_fill_uniform(x, RN * RC, -1, 1, 22);
    sl_test_fill_uniform(dy, RN * RC, -1, 1, 23);
    sl_test_fill_uniform(dx0, RN * RC, -0.5f, 0.5f, 24);
    const routing r = {RN, RK, RE, RC, idx, w, x, dy, dx0};
    const double cfs[] = {0.5, 1.0, 1.25, 2.0};
    const sl_drop_policy pols[] = {SL_DROP_PROBS, SL_DROP_POSITION};
    for (size_t a = 0; a < sizeof cfs / sizeof cfs[0]; a++)
        for (int b = 0; b < 2; b++) {
            char keep[RN * RK], tag[64];
            int64_t cap;
            naive_keep(&r, cfs[a], pols[b], keep, &cap);
            snprintf(tag, sizeof tag, "random cf %.2f %s", cfs[a], b ? "position" : "probs");
            CHECK(dropped_of(keep, RN * RK) > 0, "%s: the case should drop slots", tag);
            result res = run(&r, cfs[a], pols[b], keep, cap, tag);
            free_result(&res);
        }
    /* a capacity nothing exceeds: identical to the dropless dispatcher */
    result ref = run(&r, 0.0, SL_DROP_PROBS, NULL, 0, "random dropless");
    for (int b = 0; b < 2; b++) {
        const char *tag = b ? "random cf 4.0 position" : "random cf 4.0 probs";
        char keep[RN * RK];
        int64_t cap;
        naive_keep(&r, 4.0, pols[b], keep, &cap);
        CHECK(dropped_of(keep, RN * RK) == 0 && cap == RN * RK / 2, "%s: cap %lld", tag,
              (long long)cap);
        result res = run(&r, 4.0, pols[b], keep, cap, tag);
        CHECK(memcmp(res.y, ref.y, sizeof(float) * RN * RC) == 0,
              "%s: y differs from the dropless dispatcher", tag);
        CHECK(memcmp(res.dx, ref.dx, sizeof(float) * RN * RC) == 0,
              "%s: dx differs from the dropless dispatcher", tag);
        CHECK(memcmp(res.dw, ref.dw, sizeof(float) * RN * RK) == 0,
              "%s: dtopk_w differs from the dropless dispatcher", tag);
        free_result(&res);
    }
    free_result(&ref);
}

int main(void) {
    test_hand_made();
    test_random();
    return sl_test_finish("test_capacity_drop");
}
