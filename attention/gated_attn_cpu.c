/*
 * attention/gated_attn_cpu.c - fused causal gated attention with GQA, forward and backward,
 * in tiles with an online softmax (flash-attention style; the CPU reference for the GPU).
 *
 * Layout: tokens [B, S] (T = B*S); q, y, o [T, H, D]; k, v [T, KV, D]; lse [T, H]; the gate g
 * is [T, H, D] (elementwise), [T, H] (headwise, broadcast over D) or NULL (y = O). Query head
 * h reads kv head h / (H / KV). Logits are scale * q.k, causal within each sequence.
 *
 * Forward, per (sequence, head, query tile of BQ rows), over key tiles of BK keys up to the
 * diagonal: S = scale Q K^T; m' = max(m, rowmax S); P = exp(S - m'); l = l e^(m - m') + rowsum P;
 * O = O e^(m - m') + P V. At the end O /= l, lse = m + ln l, y = O * sigmoid(g).
 * Tasks are independent (every output row is written by one task), so the forward runs over
 * (sequence, head, query tile) with a dynamic schedule, largest (latest) tiles first.
 *
 * Backward: s = sigmoid(g), dO = dy * s, dg = dy * O * s (1 - s) (headwise: summed over D),
 * Di = rowsum(dO * O) in a first pass over rows. Then per (sequence, kv head), one OpenMP task
 * handles every query head of the group (so dk/dv have a single writer: no races, and the
 * summation order is fixed, hence deterministic for any thread count); per key tile and for
 * every query tile at or after it: P = exp(S - lse) recomputed, dV += P^T dO,
 * dP = dO V^T, dS = P (dP - Di), dQ += scale dS K, dK += scale dS^T Q.
 *
 * Documents (seg, core/ops.h): query i sees keys [seg[i], i] of its sequence. The forward starts
 * a query tile at the key tile holding seg of its first row, and the backward stops a key
 * tile's walk over query tiles at the first one whose first row's document starts after it
 * (seg is non-decreasing), so the masked-out tiles cost nothing; inside a tile, columns before a
 * row's document start are masked like those after the diagonal. A row can then meet tiles with
 * no visible key before its first visible one (m stays -inf, nothing added). With seg all zero
 * every operation is the one of plain causal attention, so the bits are the same.
 *
 * Memory: O(BQ * BK) scratch per thread, plus dO [T, H, D] and Di [T, H] in the backward
 * (when there is no gate dO is dy itself). Nothing is ever S x S.
 *
 * Tile products are register-blocked loops (mm below), compiled for AVX-512, AVX2 and baseline
 * x86-64 and picked at run time, not OpenBLAS: the OpenBLAS 0.3.21 build this links takes a
 * lock per call to get its packing buffer (and forks threads for tiles above ~2.6e5 flops),
 * so concurrent 64 x 64 tile GEMMs from the OpenMP threads contended and ran 1.5-6x slower than
 * these loops (measured at head_dim 16..128). The softmax uses a vectorizable exp (sl_exp_f32,
 * kernels_cpu.h).
 */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention/kernels_cpu.h"
#include "core/log.h"

#ifdef SL_ATTN_BLAS
#include <cblas.h>
#endif

enum { BQ = 64, BK = 64 };
_Static_assert(BK % 16 == 0, "row_sum works on 16-wide chunks");

/* ---- tile products ---- */

#define SL_INLINE static inline __attribute__((always_inline))

/*
 * C [m x n] = alpha * A B (+ C when acc) with B [k x n] in contiguous rows of stride ldb and
 * A[i][p] = a[i * lda + p * as] (so A^T is lda = 1, as = row stride). Register-blocked in
 * rb rows x 16 columns (rb = 8 with AVX-512's 32 registers, 4 otherwise; a constant after
 * inlining); each C element sums its k products in order p = 0, 1, ... (the same order in the
 * blocked and the edge paths, so neither tile shape nor rb changes the rounding).
 */
SL_INLINE void mm(int m, int n, int k, float alpha, const float *a, ptrdiff_t lda, ptrdiff_t as,
                  const float *b, ptrdiff_t ldb, int acc, float *c, ptrdiff_t ldc, int rb) {
#ifdef SL_ATTN_BLAS /* -DSL_ATTN_BLAS: the same products through OpenBLAS, to re-measure */
    (void)rb;
    cblas_sgemm(CblasRowMajor, as == 1 ? CblasNoTrans : CblasTrans, CblasNoTrans, m, n, k, alpha, a,
                (int)(as == 1 ? lda : as), b, (int)ldb, acc ? 1.0f : 0.0f, c, (int)ldc);
    return;
#endif
    enum { RBMAX = 8, CB = 16 };
    for (int i0 = 0; i0 < m; i0 += rb) {
        const int rows = m - i0 < rb ? m - i0 : rb;
        const float *ar = a + i0 * lda;
        for (int j0 = 0; j0 < n; j0 += CB) {
            float *cr = c + i0 * ldc + j0;
            if (rows == rb && n - j0 >= CB) {
                float s[RBMAX][CB] = {{0}};
                for (int p = 0; p < k; p++) {
                    const float *bp = b + p * ldb + j0;
                    for (int r = 0; r < rb; r++) {
                        const float w = ar[r * lda + p * as];
#pragma omp simd
                        for (int j = 0; j < CB; j++) s[r][j] += w * bp[j];
                    }
                }
                for (int r = 0; r < rb; r++)
#pragma omp simd
                    for (int j = 0; j < CB; j++)
                        cr[r * ldc + j] = alpha * s[r][j] + (acc ? cr[r * ldc + j] : 0.0f);
            } else {
                const int cols = n - j0 < CB ? n - j0 : CB;
                for (int r = 0; r < rows; r++) {
                    float s[CB] = {0};
                    for (int p = 0; p < k; p++) {
                        const float w = ar[r * lda + p * as];
                        const float *bp = b + p * ldb + j0;
                        for (int j = 0; j < cols; j++) s[j] += w * bp[j];
                    }
                    float *cj = cr + r * ldc;
                    for (int j = 0; j < cols; j++) cj[j] = alpha * s[j] + (acc ? cj[j] : 0.0f);
                }
            }
        }
    }
}

/* dst [d x n] (row stride BK) = transpose of the n rows of src [n x d] (row stride ld). */
SL_INLINE void pack_t(float *dst, const float *src, int n, int64_t d, int64_t ld) {
    for (int j = 0; j < n; j++)
        for (int64_t e = 0; e < d; e++) dst[e * BK + j] = src[j * ld + e];
}

/* Sum of a row of BK floats in a fixed order (16 strided partial sums, then in sequence), so
 * the result does not depend on the vector width the compiler picked. */
static inline float row_sum(const float *x) {
    float part[16] = {0};
    for (int c = 0; c < BK; c += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) part[j] += x[c + j];
    float s = 0.0f;
    for (int j = 0; j < 16; j++) s += part[j];
    return s;
}

typedef struct {
    int64_t b, s, h, kv, d, grp; /* batch, seq, heads, kv heads, head dim, H / KV */
    int gate;                    /* 0 none, 1 headwise, 2 elementwise */
    float scale;
    const float *q, *k, *v, *g, *o, *lse, *dout, *di;
    const int32_t *seg; /* [T] first key of each query's document, or NULL (plain causal) */
    float *y, *ow, *lsew, *dq, *dk, *dv;
} attn_args;

static attn_args get_args(const sl_tensor *q, const sl_tensor *k, const sl_tensor *g, int batch,
                          int seq, float scale) {
    attn_args m = {.b = batch, .s = seq, .h = q->shape[1], .kv = k->shape[1], .d = q->shape[2]};
    m.grp = m.h / m.kv;
    m.gate = !g ? 0 : g->numel == q->numel ? 2 : 1;
    m.scale = scale;
    return m;
}

static void check_f32(const sl_tensor *const *ts, int n) {
    for (int i = 0; i < n; i++)
        SL_CHECK(!ts[i] || ts[i]->dtype == SL_F32, "cpu gated attention: only f32 is supported");
}

/* Number of keys of the tile [j0, j0 + nk) visible from query position i (causal). */
static inline int visible(int64_t i, int64_t j0, int nk) {
    const int64_t lim = i + 1 - j0;
    return lim <= 0 ? 0 : lim < nk ? (int)lim : nk;
}

/* The first visible key of the tile for a query whose document starts at `start`, as a column
 * in [0, hi] (hi: visible() of the row); 0 without documents. Columns [lo, hi) are visible. */
static inline int first_visible(const int32_t *segb, int64_t i, int64_t j0, int hi) {
    if (!segb) return 0;
    const int64_t lo = segb[i] - j0;
    return lo <= 0 ? 0 : lo < hi ? (int)lo : hi;
}

/* seg must hold document starts (core/ops.h): 0 <= seg[i] <= i, non-decreasing per sequence.
 * The tile skipping below relies on it, so a violation stops the run instead of masking wrongly. */
static void check_seg(const int32_t *seg, int64_t batch, int64_t seq) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < seq; i++) {
            const int32_t v = seg[b * seq + i];
            SL_CHECK(v >= 0 && v <= i && (i == 0 || v >= seg[b * seq + i - 1]),
                     "gated attention: seg[%lld] = %d is not a document start of sequence %lld "
                     "(need 0 <= seg <= position %lld, non-decreasing)",
                     (long long)(b * seq + i), (int)v, (long long)b, (long long)i);
        }
}

/* ---- forward: one (sequence, head, query tile) ---- */

SL_INLINE void fwd_task(const attn_args *m, int64_t task, float *scratch, int rb) {
    const int64_t nqt = (m->s + BQ - 1) / BQ, d = m->d, ldq = m->h * d, ldk = m->kv * d;
    const int64_t qt = nqt - 1 - task / (m->b * m->h), bh = task % (m->b * m->h);
    const int64_t b = bh / m->h, h = bh % m->h, kvh = h / m->grp;
    const int64_t i0 = qt * BQ, i1 = i0 + BQ < m->s ? i0 + BQ : m->s;
    const int mq = (int)(i1 - i0);
    const int64_t row0 = b * m->s + i0; /* first token of the tile */
    const float *qt_p = m->q + (row0 * m->h + h) * d;
    float *ot = m->ow + (row0 * m->h + h) * d; /* O accumulates in place */
    const float *kb = m->k + (b * m->s * m->kv + kvh) * d;
    const float *vb = m->v + (b * m->s * m->kv + kvh) * d;
    float *sp = scratch, *kt = scratch + BQ * BK; /* logits/P [BQ x BK], K^T [D x BK] */
    const int32_t *segb = m->seg ? m->seg + b * m->s : NULL;
    float mx[BQ], l[BQ];
    for (int r = 0; r < mq; r++) {
        mx[r] = -INFINITY;
        l[r] = 0.0f;
        memset(ot + r * ldq, 0, (size_t)d * sizeof(float));
    }
    /* Key tiles before the tile's first document hide every key from every row: skipped. */
    for (int64_t j0 = segb ? segb[i0] / BK * BK : 0; j0 < i1; j0 += BK) {
        const int nk = (int)(j0 + BK < i1 ? BK : i1 - j0);
        pack_t(kt, kb + j0 * ldk, nk, d, ldk);
        mm(mq, nk, (int)d, m->scale, qt_p, ldq, 1, kt, BK, 0, sp, BK, rb);
        for (int r = 0; r < mq; r++) {
            float *sr = sp + r * BK;
            const int valid = visible(i0 + r, j0, nk);
            const int lo = first_visible(segb, i0 + r, j0, valid);
            float rmax = -INFINITY;
#pragma omp simd reduction(max : rmax)
            for (int c = lo; c < valid; c++) rmax = sr[c] > rmax ? sr[c] : rmax;
            const float mnew = rmax > mx[r] ? rmax : mx[r];
            if (mnew == -INFINITY) { /* no visible key yet (a later document's row) */
                for (int c = 0; c < BK; c++) sr[c] = 0.0f;
                continue;
            }
            for (int c = 0; c < lo; c++) sr[c] = 0.0f;
#pragma omp simd
            for (int c = lo; c < valid; c++) sr[c] = sl_exp_f32(sr[c] - mnew);
            for (int c = valid; c < BK; c++) sr[c] = 0.0f;
            const float alpha = sl_exp_f32(mx[r] - mnew); /* 0 on the first tile */
            l[r] = l[r] * alpha + row_sum(sr);
            mx[r] = mnew;
            if (alpha != 1.0f) {
                float *orow = ot + r * ldq;
                for (int64_t e = 0; e < d; e++) orow[e] *= alpha;
            }
        }
        mm(mq, (int)d, nk, 1.0f, sp, BK, 1, vb + j0 * ldk, ldk, 1, ot, ldq, rb);
    }
    for (int r = 0; r < mq; r++) {
        const int64_t t = row0 + r;
        float *orow = ot + r * ldq, *yrow = m->y + (t * m->h + h) * d;
        const float inv = 1.0f / l[r];
        m->lsew[t * m->h + h] = mx[r] + logf(l[r]);
        for (int64_t e = 0; e < d; e++) orow[e] *= inv;
        if (m->gate == 2) {
            const float *grow = m->g + (t * m->h + h) * d;
            for (int64_t e = 0; e < d; e++) yrow[e] = orow[e] * sl_sigmoid_f32(grow[e]);
        } else {
            const float s = m->gate == 1 ? sl_sigmoid_f32(m->g[t * m->h + h]) : 1.0f;
            for (int64_t e = 0; e < d; e++) yrow[e] = orow[e] * s;
        }
    }
}

/* ---- backward: one (sequence, kv head) with every query head of its group ---- */

SL_INLINE void bwd_task(const attn_args *m, int64_t task, float *scratch, int rb) {
    const int64_t d = m->d, ldq = m->h * d, ldk = m->kv * d, nkt = (m->s + BK - 1) / BK;
    const int64_t b = task / m->kv, kvh = task % m->kv, tok0 = b * m->s;
    const float *kb = m->k + (tok0 * m->kv + kvh) * d, *vb = m->v + (tok0 * m->kv + kvh) * d;
    float *dkb = m->dk + (tok0 * m->kv + kvh) * d, *dvb = m->dv + (tok0 * m->kv + kvh) * d;
    float *sp = scratch, *dp = sp + BQ * BK, *kt = dp + BQ * BK, *vt = kt + d * BK;
    const int32_t *segb = m->seg ? m->seg + tok0 : NULL;
    for (int64_t t = 0; t < m->s; t++) {
        memset(dkb + t * ldk, 0, (size_t)d * sizeof(float));
        memset(dvb + t * ldk, 0, (size_t)d * sizeof(float));
        memset(m->dq + ((tok0 + t) * m->h + kvh * m->grp) * d, 0,
               (size_t)(m->grp * d) * sizeof(float));
    }
    for (int64_t kt_i = 0; kt_i < nkt; kt_i++) {
        const int64_t j0 = kt_i * BK;
        const int nk = (int)(j0 + BK < m->s ? BK : m->s - j0);
        const float *kj = kb + j0 * ldk;
        float *dkj = dkb + j0 * ldk, *dvj = dvb + j0 * ldk;
        pack_t(kt, kj, nk, d, ldk);
        pack_t(vt, vb + j0 * ldk, nk, d, ldk);
        for (int64_t h = kvh * m->grp; h < (kvh + 1) * m->grp; h++) {
            /* Query tiles that see at least one key of this tile: i1 - 1 >= j0, and (documents)
             * the tile's first row's document starts before the key tile ends; seg does not
             * decrease, so no later tile sees it either. */
            for (int64_t i0 = (j0 / BQ) * BQ; i0 < m->s; i0 += BQ) {
                if (segb && segb[i0] >= j0 + nk) break;
                const int mq = (int)(i0 + BQ < m->s ? BQ : m->s - i0);
                const int64_t off = ((tok0 + i0) * m->h + h) * d;
                const float *qi = m->q + off, *doi = m->dout + off;
                const float *lsei = m->lse + (tok0 + i0) * m->h + h;
                const float *dii = m->di + (tok0 + i0) * m->h + h;
                mm(mq, nk, (int)d, m->scale, qi, ldq, 1, kt, BK, 0, sp, BK, rb);
                for (int r = 0; r < mq; r++) {
                    float *sr = sp + r * BK;
                    const int valid = visible(i0 + r, j0, nk);
                    const int lo = first_visible(segb, i0 + r, j0, valid);
                    const float lr = lsei[r * m->h];
                    for (int c = 0; c < lo; c++) sr[c] = 0.0f;
#pragma omp simd
                    for (int c = lo; c < valid; c++) sr[c] = sl_exp_f32(sr[c] - lr);
                    for (int c = valid; c < nk; c++) sr[c] = 0.0f;
                }
                mm(nk, (int)d, mq, 1.0f, sp, 1, BK, doi, ldq, 1, dvj, ldk, rb); /* dV += P^T dO */
                mm(mq, nk, (int)d, 1.0f, doi, ldq, 1, vt, BK, 0, dp, BK, rb);   /* dP = dO V^T */
                for (int r = 0; r < mq; r++) {
                    const float *pr = sp + r * BK;
                    float *dsr = dp + r * BK;
                    const float dr = dii[r * m->h];
                    for (int c = 0; c < nk; c++) dsr[c] = pr[c] * (dsr[c] - dr);
                }
                mm(mq, (int)d, nk, m->scale, dp, BK, 1, kj, ldk, 1, m->dq + off, ldq, rb);
                mm(nk, (int)d, mq, m->scale, dp, 1, BK, qi, ldq, 1, dkj, ldk, rb);
            }
        }
    }
}

/*
 * The task bodies compiled three times: AVX-512, AVX2 and the baseline x86-64 (the build has
 * no -march), chosen at run time from the CPU. The operations and their order are the same in
 * all three, only the vector width differs (and no FMA contraction: the build is ISO C), so
 * the results are the same bits on any of them.
 */
typedef void (*task_fn)(const attn_args *, int64_t, float *);
#if defined(__x86_64__) && defined(__GNUC__)
#define SL_ATTN_VARIANT(name, attr, rb)                                                            \
    attr static void fwd_##name(const attn_args *m, int64_t t, float *s) {                         \
        fwd_task(m, t, s, rb);                                                                     \
    }                                                                                              \
    attr static void bwd_##name(const attn_args *m, int64_t t, float *s) {                         \
        bwd_task(m, t, s, rb);                                                                     \
    }
SL_ATTN_VARIANT(avx512, __attribute__((target("avx512f,avx512vl,avx2"))), 8)
SL_ATTN_VARIANT(avx2, __attribute__((target("avx2"))), 4)
#endif
static void fwd_base(const attn_args *m, int64_t t, float *s) {
    fwd_task(m, t, s, 4);
}
static void bwd_base(const attn_args *m, int64_t t, float *s) {
    bwd_task(m, t, s, 4);
}

static void pick(task_fn *fwd, task_fn *bwd) {
    *fwd = fwd_base, *bwd = bwd_base;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
        *fwd = fwd_avx512, *bwd = bwd_avx512;
    else if (__builtin_cpu_supports("avx2"))
        *fwd = fwd_avx2, *bwd = bwd_avx2;
#endif
}

/* ---- entry points ---- */

void sl_cpu_gated_attn_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                           const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                           const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                           float scale) {
    (void)ctx;
    check_f32((const sl_tensor *[]){y, o, lse, q, k, v, g}, 7);
    attn_args m = get_args(q, k, g, batch, seq, scale);
    if (m.b == 0 || m.s == 0) return;
    m.q = sl_f32(q), m.k = sl_f32(k), m.v = sl_f32(v), m.g = g ? sl_f32(g) : NULL;
    m.y = sl_f32(y), m.ow = sl_f32(o), m.lsew = sl_f32(lse);
    if (seg) check_seg(m.seg = sl_i32(seg), m.b, m.s);
    task_fn fwd, bwd;
    pick(&fwd, &bwd);
    const int64_t ntask = (m.s + BQ - 1) / BQ * m.b * m.h;
#pragma omp parallel
    {
        float *scratch = sl_xmalloc(((size_t)BQ + (size_t)m.d) * BK * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) fwd(&m, task, scratch);
        free(scratch);
    }
}

void sl_cpu_gated_attn_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv, sl_tensor *dg,
                           const sl_tensor *dy, const sl_tensor *q, const sl_tensor *k,
                           const sl_tensor *v, const sl_tensor *g, const sl_tensor *seg,
                           const sl_tensor *o, const sl_tensor *lse, int batch, int seq,
                           float scale) {
    (void)ctx;
    check_f32((const sl_tensor *[]){dq, dk, dv, g ? dg : NULL, dy, q, k, v, g, o, lse}, 11);
    SL_CHECK(!g || dg, "cpu gated_attn_bwd: dg is NULL but the gate is not");
    attn_args m = get_args(q, k, g, batch, seq, scale);
    if (m.b == 0 || m.s == 0) return;
    const int64_t d = m.d, rows = m.b * m.s * m.h;
    const float *po = sl_f32(o), *pdy = sl_f32(dy), *pg = g ? sl_f32(g) : NULL;
    float *pdg = g ? sl_f32(dg) : NULL;

    /* Pass 1, per (token, head) row: dO, dg and Di = rowsum(dO * O). */
    float *dobuf = g ? sl_xmalloc((size_t)rows * (size_t)d * sizeof(float)) : NULL;
    float *di = sl_xmalloc((size_t)rows * sizeof(float));
#pragma omp parallel for schedule(static) if (rows > 64)
    for (int64_t r = 0; r < rows; r++) {
        const float *dyr = pdy + r * d, *orow = po + r * d;
        double dot = 0.0;
        if (m.gate == 2) {
            const float *gr = pg + r * d;
            float *dor = dobuf + r * d, *dgr = pdg + r * d;
            for (int64_t e = 0; e < d; e++) {
                const float s = sl_sigmoid_f32(gr[e]);
                dor[e] = dyr[e] * s;
                dgr[e] = dyr[e] * orow[e] * s * (1.0f - s);
                dot += (double)dor[e] * orow[e];
            }
        } else if (m.gate == 1) {
            const float s = sl_sigmoid_f32(pg[r]);
            float *dor = dobuf + r * d;
            double dyo = 0.0;
            for (int64_t e = 0; e < d; e++) {
                dor[e] = dyr[e] * s;
                dyo += (double)dyr[e] * orow[e];
                dot += (double)dor[e] * orow[e];
            }
            pdg[r] = (float)(dyo * s * (1.0f - s));
        } else {
            for (int64_t e = 0; e < d; e++) dot += (double)dyr[e] * orow[e];
        }
        di[r] = (float)dot;
    }

    /* Pass 2, per (sequence, kv head): one writer for dk/dv and for dq of the group's heads. */
    m.q = sl_f32(q), m.k = sl_f32(k), m.v = sl_f32(v), m.lse = sl_f32(lse);
    m.dout = g ? dobuf : pdy, m.di = di;
    if (seg) check_seg(m.seg = sl_i32(seg), m.b, m.s);
    m.dq = sl_f32(dq), m.dk = sl_f32(dk), m.dv = sl_f32(dv);
    task_fn fwd, bwd;
    pick(&fwd, &bwd);
    const int64_t ntask = m.b * m.kv;
#pragma omp parallel
    {
        float *scratch = sl_xmalloc(2 * ((size_t)BQ + (size_t)m.d) * BK * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) bwd(&m, task, scratch);
        free(scratch);
    }
    free(dobuf);
    free(di);
}

/* ---- diagnostics ---- */

void sl_cpu_sigmoid_mean(void *ctx, sl_tensor *out, const sl_tensor *g) {
    (void)ctx;
    SL_CHECK(g->dtype == SL_F32, "cpu sigmoid_mean: only f32 is supported");
    const int64_t n = g->numel;
    if (n == 0) {
        sl_f32(out)[0] = 0.0f;
        return;
    }
    const float *pg = sl_f32(g);
    const int nt = omp_get_max_threads();
    double *part = sl_xcalloc((size_t)nt, sizeof(double));
    /* Fixed static partition and an ordered final sum: deterministic for a thread count. */
#pragma omp parallel num_threads(nt) if (n > 4096)
    {
        double s = 0.0;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i++) s += 1.0 / (1.0 + exp(-(double)pg[i]));
        part[omp_get_thread_num()] = s;
    }
    double total = 0.0;
    for (int t = 0; t < nt; t++) total += part[t];
    free(part);
    sl_f32(out)[0] = (float)(total / (double)n);
}
