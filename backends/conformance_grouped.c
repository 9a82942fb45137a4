/*
 * backends/conformance_grouped.c - the conformance cases of the grouped GEMMs (the experts'
 * projections: forward, weight gradient, over two micro-batches, from device counts, with the
 * activation fused): shapes, inputs and the double references (backends/conformance_impl.h).
 */
#include "backends/conformance_impl.h"

/* Groups of rows, including empty ones (first, middle, last, all) and a single row; `spare`
 * rows past sum(counts) are poison in the inputs (reading them shows) and must stay untouched
 * in the output. */
typedef struct {
    int groups;
    int64_t counts[8];
    int spare, r, s, tb;
    float beta;
} gm_shape;

static const gm_shape k_gm[] = {
    {1, {1}, 0, 5, 3, 0, 0.0f},
    {6, {0, 3, 7, 1, 0, 4}, 3, 6, 5, 0, 1.0f},
    {6, {0, 3, 7, 1, 0, 4}, 3, 6, 5, 1, 0.0f},
    {3, {2, 5, 0}, 1, 7, 9, 1, 1.0f},
    {4, {0, 0, 0, 0}, 2, 4, 3, 1, 1.0f},
    {8, {50, 0, 5, 3, 9, 0, 1, 22}, 5, 24, 16, 1, 0.0f},
    {8, {50, 0, 5, 3, 9, 0, 1, 22}, 0, 17, 33, 0, 1.0f},
};

static int64_t rows_of(const int64_t *counts, int groups) {
    int64_t n = 0;
    for (int g = 0; g < groups; g++) n += counts[g];
    return n;
}

static int64_t gm_rows(const gm_shape *s) {
    return rows_of(s->counts, s->groups);
}

static float *poison_tail(float *x, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++) x[i] = 1e30f;
    return x;
}

/* Counts for a grouped GEMM on the case's backend: on the host, or uploaded as I32 (device
 * counts, core/ops.h). Made before the op so that the reads counted around it are its own. */
static sl_group_counts case_counts(cx *c, const int64_t *counts, int groups, bool device) {
    if (!device) return sl_counts_host(counts, groups);
    int32_t *h = halloc(c, sizeof(int32_t) * (size_t)groups);
    for (int g = 0; g < groups; g++) h[g] = (int32_t)counts[g];
    return sl_counts_device(I32(c, h, groups), rows_of(counts, groups));
}

/* Device counts' host reads beyond what the backend's grouped_counts_on_device allows (none
 * where it says yes; where it says no, core/ops.c reads them once per set of counts with rows:
 * `sets` of them, sl_group_counts_host), an exact output that must be 0. reads: those counted
 * around the ops (the reference loops: none). Last among the case's outputs, after the sums'
 * bounds (sum_bound annotates the output added last). */
static void reads_output(cx *c, long long reads, int sets, int64_t r, int64_t s, int groups) {
    const bool dev = !c->be || sl_grouped_counts_on_device(c->be, c->act, r, s, groups);
    const int32_t excess = c->be ? (int32_t)(reads - (dev ? 0 : sets)) : 0;
    if (!c->be)
        want_i32(c, "host reads beyond grouped_counts_on_device", &excess, 1);
    else
        got(c, "host reads beyond grouped_counts_on_device", I32(c, &excess, 1));
}

static void mm_case(cx *c, const gm_shape *s, bool device) {
    const int64_t n = gm_rows(s), rows = n + s->spare, g = s->groups;
    const int64_t in = s->tb ? s->s : s->r, out = s->tb ? s->r : s->s;
    desc(c, "%lld+%d rows/%d groups/%dx%d%s%s", (long long)n, s->spare, s->groups, s->r, s->s,
         s->tb ? "t" : "", device ? "/dev" : "");
    float *a = poison_tail(gen_uniform(c, rows * in, -1, 1), n * in, rows * in);
    const float *b = gen_uniform(c, g * s->r * s->s, -1, 1),
                *c0 = gen_uniform(c, rows * out, -1, 1);
    long long reads = 0;
    if (!c->be) {
        sl_ref_grouped_matmul(want(c, "c", rows * out), a, b, c0, s->counts, s->groups, rows, s->r,
                              s->s, s->tb, s->beta);
    } else {
        sl_tensor *tc = ACT(c, c0, rows, out), *ta = ACT(c, a, rows, in);
        sl_tensor *tb = ACT(c, b, g, s->r, s->s);
        const sl_group_counts k = case_counts(c, s->counts, s->groups, device);
        reads = sl_backend_host_reads(c->be);
        sl_op_grouped_matmul(tc, ta, tb, k, s->groups, s->tb, s->beta);
        reads = sl_backend_host_reads(c->be) - reads;
        got(c, "c", tc);
    }
    double *mag, *terms;
    sum_bound(c, U_F32, &mag, &terms);
    sl_ref_grouped_matmul(mag, abs_copy(c, a, n * in), abs_copy(c, b, g * s->r * s->s),
                          abs_copy(c, c0, rows * out), s->counts, s->groups, rows, s->r, s->s,
                          s->tb, fabs(s->beta));
    for (int64_t i = 0; i < rows * out; i++) terms[i] = (double)in + 2;
    if (device) reads_output(c, reads, n > 0, s->r, s->s, s->groups);
}

void sl_conf_case_grouped_matmul(cx *c) {
    mm_case(c, PICK(c, k_gm), false);
}

/* A weight gradient's starting values: uniform, or NaN where beta 0 (a gradient's first write)
 * must not read them. */
static float *dw_start(cx *c, int64_t n, float beta) {
    float *dw0 = gen_uniform(c, n, -1, 1);
    if (beta == 0.0f)
        for (int64_t i = 0; i < n; i++) dw0[i] = NAN;
    return dw0;
}

/* beta dw0 as a reference starts (beta is 0 or 1), or its magnitude for the bound. */
static void dw_begin(double *out, const float *dw0, int64_t n, float beta, bool magnitude) {
    for (int64_t i = 0; i < n; i++)
        out[i] = beta == 0.0f ? 0.0 : magnitude ? fabs(dw0[i]) : (double)dw0[i];
}

/* dW = sum_i dY_i^T X_i + beta dW0 over groups of rows for nseg segments (one:
 * sl_op_grouped_matmul_dw; more: sl_op_grouped_matmul_dw_segments), `spare` poisoned rows after
 * each segment's. */
static void dw_case(cx *c, int groups, const int64_t (*counts)[8], int nseg, int spare, int r,
                    int sc, float beta, bool multi, bool device) {
    const int64_t g = groups;
    int64_t n[SL_DW_MAX_SEGMENTS], rows[SL_DW_MAX_SEGMENTS];
    float *dy[SL_DW_MAX_SEGMENTS], *x[SL_DW_MAX_SEGMENTS];
    for (int i = 0; i < nseg; i++) {
        n[i] = rows_of(counts[i], groups), rows[i] = n[i] + spare;
        dy[i] = poison_tail(gen_uniform(c, rows[i] * r, -1, 1), n[i] * r, rows[i] * r);
        x[i] = poison_tail(gen_uniform(c, rows[i] * sc, -1, 1), n[i] * sc, rows[i] * sc);
    }
    const float *dw0 = dw_start(c, g * r * sc, beta); /* beta 1 accumulates into it */
    const int64_t nw = g * r * sc;
    /* the reference dW in double: the output in reference mode, the squares' bound in both */
    double *ref = halloc(c, sizeof(double) * (size_t)nw);
    dw_begin(ref, dw0, nw, beta, false);
    for (int i = 0; i < nseg; i++)
        sl_ref_grouped_matmul_dw(ref, dy[i], x[i], counts[i], groups, r, sc);
    const float sq0 = 0.75f; /* sumsq accumulates into it */
    sl_tensor *tsq = NULL;
    long long reads = 0; /* the ops' host reads (device counts) */
    if (!c->be) {
        memcpy(want(c, "dw", nw), ref, sizeof(double) * (size_t)nw);
    } else {
        sl_tensor *tdw = GRAD(c, dw0, g, r, sc);
        tsq = F32(c, &sq0, 1);
        sl_dw_segment segs[SL_DW_MAX_SEGMENTS];
        for (int i = 0; i < nseg; i++)
            segs[i] = (sl_dw_segment){ACT(c, dy[i], rows[i], r), ACT(c, x[i], rows[i], sc),
                                      case_counts(c, counts[i], groups, device)};
        reads = sl_backend_host_reads(c->be);
        if (multi)
            sl_op_grouped_matmul_dw_segments(tdw, segs, nseg, groups, beta, tsq);
        else
            sl_op_grouped_matmul_dw(tdw, segs[0].dy, segs[0].x, segs[0].counts, groups, beta, tsq);
        reads = sl_backend_host_reads(c->be) - reads;
        got(c, "dw", tdw);
    }
    /* dw0 (beta 1) and a group's count products */
    double *mag, *terms;
    sum_bound(c, U_F32, &mag, &terms);
    dw_begin(mag, dw0, nw, beta, true);
    for (int i = 0; i < nseg; i++)
        sl_ref_grouped_matmul_dw(mag, abs_copy(c, dy[i], n[i] * r), abs_copy(c, x[i], n[i] * sc),
                                 counts[i], groups, r, sc);
    double kmax = 0;
    for (int gi = 0; gi < g; gi++) {
        double k = 2;
        for (int i = 0; i < nseg; i++) k += (double)counts[i][gi];
        for (int64_t i = 0; i < r * sc; i++) terms[gi * r * sc + i] = k;
        kmax = k > kmax ? k : kmax;
    }
    /* sumsq = sq0 + the squares of dW: each computed dW_i = ref_i + d_i with |d_i| within
     * dW's bound, 2 gamma(k_i) mag_i, so the squares' sum moves by at most sum (2 |ref_i| +
     * |d_i|) |d_i|, and its own accumulation (nw terms, fp32 partials) adds gamma(nw) of it:
     * both within 2 gamma(kmax + nw + 1) (sq0 + sum (2 |ref_i| + mag_i) mag_i). */
    if (!c->be) {
        double *sq = want(c, "sumsq", 1);
        *sq = sq0;
        for (int64_t i = 0; i < nw; i++) *sq += ref[i] * ref[i];
    } else {
        got(c, "sumsq", tsq);
    }
    double *smag, *sterms;
    sum_bound(c, U_F32, &smag, &sterms);
    smag[0] = sq0;
    for (int64_t i = 0; i < nw; i++) smag[0] += (2 * fabs(ref[i]) + mag[i]) * mag[i];
    sterms[0] = kmax + (double)nw + 1;
    int sets = 0;
    for (int i = 0; i < nseg; i++) sets += n[i] > 0;
    if (device) reads_output(c, reads, sets, r, sc, groups);
}

void sl_conf_case_grouped_matmul_dw(cx *c) {
    const gm_shape *s = PICK(c, k_gm);
    desc(c, "%lld+%d rows/%d groups/%dx%d/beta%g", (long long)gm_rows(s), s->spare, s->groups, s->r,
         s->s, (double)s->beta);
    dw_case(c, s->groups, &s->counts, 1, s->spare, s->r, s->s, s->beta, false, false);
}

/* Two to four segments of grouped rows (micro-batches, the deferred weight gradient): an empty
 * first, middle or last segment, all empty, and widths that are multiples of 8 with groups
 * past 64 rows in a segment (the Hopper kernel's shapes, its zero-padded last chunks), one
 * group empty in all with beta 1. Every case also checks sumsq. */
typedef struct {
    int groups, nseg;
    int64_t counts[SL_DW_MAX_SEGMENTS][8];
    int spare, r, s;
    float beta;
} gp_shape;

static const gp_shape k_gp[] = {
    {1, 2, {{1}, {2}}, 0, 5, 3, 0.0f},
    {6, 2, {{0, 3, 7, 1, 0, 4}, {2, 0, 0, 5, 0, 1}}, 3, 6, 5, 1.0f},
    {4, 2, {{0, 0, 0, 0}, {3, 0, 1, 0}}, 2, 8, 16, 0.0f},
    {3, 2, {{0, 0, 0}, {0, 0, 0}}, 1, 8, 8, 1.0f},
    {3, 2, {{70, 0, 5}, {3, 64, 0}}, 2, 16, 24, 1.0f},
    {8, 2, {{50, 0, 5, 3, 9, 0, 1, 22}, {0, 7, 0, 3, 1, 0, 66, 2}}, 0, 24, 16, 0.0f},
    /* beta 1 with a group empty in both segments at the Hopper kernel's widths: a tile it
     * keeps as it is, whose squares it reads from dW for sumsq */
    {4, 2, {{40, 0, 0, 9}, {0, 0, 30, 2}}, 1, 16, 8, 1.0f},
    /* three and four segments: an empty middle one, a group with rows only in the last, a group
     * past 64 rows summed over segments of 1 to 70 rows, at the Hopper kernel's widths */
    {3, 3, {{2, 0, 1}, {0, 0, 0}, {1, 4, 0}}, 2, 5, 6, 1.0f},
    {4, 3, {{70, 0, 3, 0}, {0, 0, 0, 0}, {1, 65, 0, 9}}, 1, 16, 24, 0.0f},
    {4, 4, {{9, 0, 1, 0}, {64, 0, 0, 2}, {0, 0, 0, 0}, {3, 7, 0, 66}}, 2, 8, 16, 1.0f},
    {5, 4, {{0, 3, 0, 0, 1}, {2, 0, 0, 1, 0}, {0, 0, 5, 0, 0}, {1, 1, 0, 0, 4}}, 0, 6, 7, 0.0f},
};

void sl_conf_case_grouped_matmul_dw_segments(cx *c) {
    const gp_shape *s = PICK(c, k_gp);
    char seg[64] = "";
    for (int i = 0, o = 0; i < s->nseg; i++)
        o += snprintf(seg + o, sizeof seg - (size_t)o, "%s%lld", i ? "+" : "",
                      (long long)rows_of(s->counts[i], s->groups));
    desc(c, "%s(+%d) rows/%d groups/%dx%d/beta%g", seg, s->spare, s->groups, s->r, s->s,
         (double)s->beta);
    dw_case(c, s->groups, s->counts, s->nseg, s->spare, s->r, s->s, s->beta, true, false);
}

/* The grouped GEMMs from device counts (sl_counts_device, as the MoE layers pass the sort's
 * counts): the forward over k_gm's shapes, then the weight gradient over k_gp's segments, each
 * with their results and the host reads the counts cost (reads_output). */
void sl_conf_case_grouped_counts_on_device(cx *c) {
    c->nshapes = NELEM(k_gm) + NELEM(k_gp);
    if (c->shape < NELEM(k_gm)) {
        mm_case(c, &k_gm[c->shape], true);
        return;
    }
    const gp_shape *s = &k_gp[c->shape - NELEM(k_gm)];
    desc(c, "%d segments of %lld+...(+%d) rows/%d groups/%dx%d/beta%g/dev", s->nseg,
         (long long)rows_of(s->counts[0], s->groups), s->spare, s->groups, s->r, s->s,
         (double)s->beta);
    dw_case(c, s->groups, s->counts, s->nseg, s->spare, s->r, s->s, s->beta, true, true);
}

/* The first projection with the activation (sl_op_grouped_matmul_swiglu): gu and h, the rows
 * past the groups' untouched in both. The inputs are dyadic (multiples of 1/2 up to 1 in A, of
 * 1/4 up to 1/2 in B: at most 32 products of at most 1/2 each), so every element of gu is a
 * multiple of 1/8 of at most 16 in magnitude (at most 128 eighths, 8 bits): exact in fp32 and bf16
 * whatever the order of the sum, and h's only roundings are the activation's own (swiglu_fwd's). A
 * pairing of the wrong gate and up columns, a tail column lost or a row past the group written
 * shows in full. Widths that are multiples of 8 with groups past 128 rows and activations past one
 * tile (I 40: one tile of 64, I 200: two of 128) are the Hopper kernel's; the others take the
 * backends' two-op path. `dev`: device counts (sl_counts_device, as the MoE layers pass them). */
typedef struct {
    int groups;
    int64_t counts[8];
    int spare, in, width, dev;
} gs_shape;

static const gs_shape k_gs[] = {
    {1, {1}, 0, 3, 2, 0},
    {3, {2, 5, 0}, 1, 7, 5, 1},
    {4, {0, 0, 0, 0}, 2, 8, 8, 0},
    {4, {150, 0, 7, 64}, 3, 24, 40, 1},
    {3, {9, 130, 1}, 0, 16, 200, 0},
    {8, {50, 0, 5, 3, 9, 0, 1, 22}, 2, 32, 24, 1},
};

/* n multiples of unit from -range unit to range unit. */
static float *dyadic(cx *c, int64_t n, int range, float unit) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    const int32_t *v = gen_ints(c, n, -range, range + 1);
    for (int64_t i = 0; i < n; i++) x[i] = (float)v[i] * unit;
    return x;
}

void sl_conf_case_grouped_matmul_swiglu(cx *c) {
    const gs_shape *s = PICK(c, k_gs);
    const int64_t n = rows_of(s->counts, s->groups), rows = n + s->spare, g = s->groups;
    const int64_t in = s->in, w = s->width;
    desc(c, "%lld+%d rows/%d groups/in %lld/I %lld%s", (long long)n, s->spare, s->groups,
         (long long)in, (long long)w, s->dev ? "/dev" : "");
    float *a = poison_tail(dyadic(c, rows * in, 2, 0.5f), n * in, rows * in);
    const float *b = dyadic(c, g * 2 * w * in, 2, 0.25f);
    const float *gu0 = gen_uniform(c, rows * 2 * w, -1, 1), *h0 = gen_uniform(c, rows * w, -1, 1);
    long long reads = 0;
    if (!c->be) {
        double *gu = want(c, "gu", rows * 2 * w);
        sl_ref_grouped_matmul(gu, a, b, gu0, s->counts, s->groups, rows, 2 * w, in, true, 0.0);
        float *guf = halloc(c, sizeof(float) * (size_t)(rows * 2 * w));
        sl_ref_f32(guf, gu, rows * 2 * w);
        double *h = want(c, "h", rows * w);
        sl_ref_swiglu_fwd(h, guf, n, w);
        for (int64_t i = n * w; i < rows * w; i++) h[i] = h0[i];
    } else {
        sl_tensor *tgu = ACT(c, gu0, rows, 2 * w), *th = ACT(c, h0, rows, w);
        sl_tensor *ta = ACT(c, a, rows, in), *tb = ACT(c, b, g, 2 * w, in);
        const sl_group_counts k = case_counts(c, s->counts, s->groups, s->dev);
        reads = sl_backend_host_reads(c->be);
        sl_op_grouped_matmul_swiglu(th, tgu, ta, tb, k, s->groups);
        reads = sl_backend_host_reads(c->be) - reads;
        got(c, "gu", tgu);
        got(c, "h", th);
    }
    if (s->dev) reads_output(c, reads, n > 0, 2 * w, in, s->groups);
}
