/*
 * backends/conformance_impl.h - what the conformance harness (backends/conformance.c) and its
 * cases (conformance_core.c, conformance_grouped.c, conformance_attn.c, conformance_moe.c) share:
 * the case context, input generators, tensor and output helpers. Internal to those files.
 *
 * A case runs twice per shape: once on the backend under test (c->be) and once as the
 * reference - the CPU backend, or (c->be NULL, when the CPU itself is under test) the naive
 * double loops of backends/ref_ops.h. It draws all its inputs before it branches on c->be, so
 * both runs see the same values, and reports each output with want() (reference loops) or got()
 * (read back from a tensor) in the same order on both sides.
 */
#ifndef SL_BACKENDS_CONFORMANCE_IMPL_H
#define SL_BACKENDS_CONFORMANCE_IMPL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/conformance.h"
#include "backends/ref_ops.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- the case context ---------------------------------------------------------------------- */

/* splitmix64 (the test suite's generator, so the inputs are those the conformance test has
 * always drawn): the next value, and a uniform double in [0, 1). */
static inline uint64_t rand_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline double rand_unif(uint64_t *s) {
    return (double)(rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

enum { MAX_OUT = 6, MAX_TENSORS = 32 };

typedef struct {
    const char *name;
    int64_t n;
    double *v;
    bool exact; /* integer output: must match exactly */
    bool bf16;  /* read back from a bf16 tensor (rounded to 2^-9 relative) */
    /* A sum whose order may differ between backends (sum_bound): per element the sum of the
     * magnitudes of its terms and their count, and the unit roundoff u of its accumulation.
     * NULL: the op's tolerance row alone. */
    double *mag, *terms;
    double u;
} output;

typedef struct {
    sl_backend *be;    /* where the case runs; NULL = the naive double reference */
    sl_dtype act;      /* dtype of its unpinned float tensors (f32 on the CPU reference) */
    sl_dtype round_to; /* inputs are rounded to the dtype under test, on both sides */
    int shape, nshapes;
    uint64_t rng;
    char desc[96]; /* the shape, as the case describes it */
    bool setup_ok; /* preconditions the case checks on its generated inputs */
    int nout;
    output out[MAX_OUT];
    sl_tensor *tensors[MAX_TENSORS];
    int ntensors;
    void **host; /* every host buffer of the case, freed after it */
    int nhost, cap_host;
} cx;

/* The shape of this call from a case's table (and how many the table has). */
#define PICK(c, table) (&(table)[((c)->nshapes = NELEM(table), (c)->shape)])

static inline void desc(cx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->desc, sizeof c->desc, fmt, ap);
    va_end(ap);
}

static inline void *halloc(cx *c, size_t bytes) {
    if (c->nhost == c->cap_host) {
        c->cap_host = c->cap_host ? 2 * c->cap_host : 64;
        c->host = realloc(c->host, sizeof(void *) * (size_t)c->cap_host);
    }
    return c->host[c->nhost++] = calloc(bytes ? bytes : 1, 1);
}

/* bf16: the top half of an fp32, rounded to nearest even (NaN kept quiet). */
static inline uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float round_to(float f, sl_dtype dt) {
    return dt == SL_BF16 ? bf16_value(bf16_bits(f)) : f;
}

/* Inputs. Every case draws all of them before it branches on c->be, so the test and the
 * reference run see the same values. */
static inline float *gen_uniform(cx *c, int64_t n, double lo, double hi) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = round_to((float)(lo + (hi - lo) * rand_unif(&c->rng)), c->round_to);
    return x;
}

static inline float *gen_normal(cx *c, int64_t n, double std) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double u1 = rand_unif(&c->rng), u2 = rand_unif(&c->rng);
        x[i] = (float)(std * sqrt(-2.0 * log(u1 > 1e-300 ? u1 : 1e-300)) * cos(2.0 * M_PI * u2));
        x[i] = round_to(x[i], c->round_to);
    }
    return x;
}

/* Uniform integers in [lo, hi). */
static inline int32_t *gen_ints(cx *c, int64_t n, int32_t lo, int32_t hi) {
    int32_t *x = halloc(c, sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = lo + (int32_t)(rand_u64(&c->rng) % (uint64_t)(hi - lo));
    return x;
}

/* A random permutation of [0, n). */
static inline int32_t *gen_perm(cx *c, int64_t n) {
    int32_t *p = halloc(c, sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rand_u64(&c->rng) % (uint64_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j], p[j] = t;
    }
    return p;
}

/* An input computed from other inputs (saved forward values), as float; rounded to the dtype
 * under test when its tensor has that dtype (`act`). */
static inline float *derived(cx *c, const double *v, int64_t n, bool act) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = act ? round_to((float)v[i], c->round_to) : (float)v[i];
    return x;
}

/* Initial contents of written outputs: finite values no correct kernel leaves behind. */
/* Junk is exactly representable in bf16 (multiples of 8 in [1000, 1096]): rows an operation
 * must leave alone (gather_rows' spare rows) then compare exactly in both dtypes. */
static inline float *junk(cx *c, int64_t n) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = 1000.0f + 8.0f * (float)(i % 13);
    return x;
}

static inline int32_t *junk_i32(cx *c, int64_t n) {
    int32_t *x = halloc(c, sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = 99 + (int32_t)(i % 7);
    return x;
}

/* A tensor on the case's backend holding `host` (float for float dtypes, int32 for i32;
 * NULL = zeros), uploaded through the tensor API. */
static inline sl_tensor *mk(cx *c, sl_dtype dt, const void *host, int ndim, const int64_t *shape) {
    SL_CHECK(c->ntensors < MAX_TENSORS, "conformance: raise MAX_TENSORS");
    sl_tensor *t = sl_tensor_new(c->be, dt, ndim, shape);
    c->tensors[c->ntensors++] = t;
    if (host && dt == SL_BF16) {
        const int64_t n = sl_tensor_numel(t);
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) h[i] = bf16_bits(((const float *)host)[i]);
        sl_tensor_from_host(t, h);
        free(h);
    } else if (host) {
        sl_tensor_from_host(t, host);
    }
    return t;
}

#define SHAPE(...)                                                                                 \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) {                       \
        __VA_ARGS__                                                                                \
    }
#define ACT(c, host, ...) mk(c, (c)->act, host, SHAPE(__VA_ARGS__)) /* the dtype under test */
#define F32(c, host, ...) mk(c, SL_F32, host, SHAPE(__VA_ARGS__))   /* pinned to fp32 */
#define I32(c, host, ...) mk(c, SL_I32, host, SHAPE(__VA_ARGS__))
/* A parameter gradient that accumulates: fp32 in bf16 training as in fp32 training. */
#define GRAD(c, host, ...) F32(c, host, __VA_ARGS__)

static inline output *add_output(cx *c, const char *name, int64_t n, bool exact) {
    SL_CHECK(c->nout < MAX_OUT, "conformance: raise MAX_OUT");
    output *o = &c->out[c->nout++];
    o->name = name, o->n = n, o->exact = exact;
    o->v = calloc((size_t)(n ? n : 1), sizeof(double));
    return o;
}

/* Reference mode: a zeroed output buffer for the case to fill. */
static inline double *want(cx *c, const char *name, int64_t n) {
    return add_output(c, name, n, false)->v;
}

static inline void want_i32(cx *c, const char *name, const int32_t *v, int64_t n) {
    double *o = add_output(c, name, n, true)->v;
    for (int64_t i = 0; i < n; i++) o[i] = v[i];
}

/* Backend mode: the output read back from its tensor. */
static inline void got(cx *c, const char *name, const sl_tensor *t) {
    const int64_t n = sl_tensor_numel(t);
    const sl_dtype dt = sl_tensor_dtype(t);
    output *out = add_output(c, name, n, dt == SL_I32);
    out->bf16 = dt == SL_BF16;
    double *o = out->v;
    void *h = malloc(sl_tensor_nbytes(t) ? sl_tensor_nbytes(t) : 1);
    sl_tensor_to_host(t, h);
    for (int64_t i = 0; i < n; i++)
        o[i] = dt == SL_I32    ? ((int32_t *)h)[i]
               : dt == SL_BF16 ? bf16_value(((uint16_t *)h)[i])
                               : ((float *)h)[i];
    free(h);
}

static inline void setup_check(cx *c, bool ok, const char *what) {
    if (!ok) fprintf(stderr, "  test setup (%s): %s\n", c->desc, what);
    c->setup_ok &= ok;
}

/* Declares the output added last a sum of terms accumulated with unit roundoff u (2^-24 for
 * fp32, 2^-53 for double) in an order the backends may choose differently: the case fills
 * *mag (per element, the sum of |term|, products counted once) and *terms (their count, the
 * initial value of an accumulated output included). The comparison then also accepts the
 * bound derived from them (conformance.c, out_error): two sums of the same k terms in any
 * order differ by at most 2 gamma(k) sum |term|, gamma(k) = k u / (1 - k u) (Higham,
 * "Accuracy and Stability of Numerical Algorithms", 2nd ed., 4.2), plus the roundings of the
 * two outputs - instead of a fixed epsilon that a longer sum or another order can exceed. */
static inline void sum_bound(cx *c, double u, double **mag, double **terms) {
    output *o = &c->out[c->nout - 1];
    o->u = u;
    *mag = o->mag = calloc((size_t)(o->n ? o->n : 1), sizeof(double));
    *terms = o->terms = calloc((size_t)(o->n ? o->n : 1), sizeof(double));
}

/* |x| of n floats, as a case's host buffer: the magnitudes of a sum's terms (sum_bound), from
 * the reference loops run on them. */
static inline float *abs_copy(cx *c, const float *x, int64_t n) {
    float *y = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]);
    return y;
}

/* Unit roundoffs of the accumulations sum_bound names. */
#define U_F32 0x1p-24
#define U_F64 0x1p-53

/* sum_bound of a scatter-add into the output added last: dst[idx[i]] += src[i] (rows of w,
 * onto dst0 [rows, w]) in fp32. */
static inline void rows_sum_bound(cx *c, const float *dst0, const float *src, const int32_t *idx,
                                  int64_t rows, int64_t m, int64_t w) {
    double *mag, *terms;
    sum_bound(c, U_F32, &mag, &terms);
    for (int64_t i = 0; i < rows * w; i++) mag[i] = fabs(dst0[i]), terms[i] = 1;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < w; j++) {
            mag[(int64_t)idx[i] * w + j] += fabs(src[i * w + j]);
            terms[(int64_t)idx[i] * w + j] += 1;
        }
}

/* Rows and width; 130 rows is above the CPU's per-row threading threshold (64). The same
 * pairs serve rmsnorm, swiglu (gu [rows, 2 width]) and rowgate (x [rows, width], s [rows]). */
typedef struct {
    int rows, w;
} rw_shape;

static inline const rw_shape *pick_rw(cx *c) {
    static const rw_shape k_rw[] = {{1, 1},    {1, 16},    {7, 33},   {130, 64},
                                    {3, 1000}, {129, 257}, {300, 130}};
    const rw_shape *s = PICK(c, k_rw);
    desc(c, "%dx%d", s->rows, s->w);
    return s;
}

/* ---- the cases: one per slot of sl_ops_i (conformance.c, k_ops) ---- */

/* conformance_core.c, conformance_grouped.c (the grouped GEMMs) */
void sl_conf_case_fill(cx *c);
void sl_conf_case_add(cx *c);
void sl_conf_case_axpy(cx *c);
void sl_conf_case_scale(cx *c);
void sl_conf_case_convert(cx *c);
void sl_conf_case_sum(cx *c);
void sl_conf_case_sumsq(cx *c);
void sl_conf_case_absmax(cx *c);
void sl_conf_case_matmul(cx *c);
void sl_conf_case_grouped_counts_on_device(cx *c);
void sl_conf_case_grouped_matmul(cx *c);
void sl_conf_case_grouped_matmul_dw(cx *c);
void sl_conf_case_grouped_matmul_dw_segments(cx *c);
void sl_conf_case_grouped_matmul_swiglu(cx *c);
void sl_conf_case_rmsnorm_fwd(cx *c);
void sl_conf_case_rmsnorm_bwd(cx *c);
void sl_conf_case_embedding_fwd(cx *c);
void sl_conf_case_embedding_bwd(cx *c);
void sl_conf_case_cross_entropy(cx *c);
void sl_conf_case_adamw(cx *c);
/* conformance_attn.c */
void sl_conf_case_qgate_split(cx *c);
void sl_conf_case_qgate_merge(cx *c);
void sl_conf_case_rope_fwd(cx *c);
void sl_conf_case_rope_bwd(cx *c);
void sl_conf_case_qk_norm_rope_fwd(cx *c);
void sl_conf_case_qk_norm_rope_bwd(cx *c);
void sl_conf_case_gated_attn_fwd(cx *c);
void sl_conf_case_gated_attn_bwd(cx *c);
void sl_conf_case_sigmoid_mean(cx *c);
void sl_conf_case_kv_cache_write(cx *c);
void sl_conf_case_gated_attn_decode(cx *c);
void sl_conf_case_attn_sink_share(cx *c);
/* conformance_moe.c */
void sl_conf_case_router_fwd(cx *c);
void sl_conf_case_router_bwd(cx *c);
void sl_conf_case_moe_sort(cx *c);
void sl_conf_case_moe_counts(cx *c);
void sl_conf_case_gather_rows(cx *c);
void sl_conf_case_scatter_add_rows(cx *c);
void sl_conf_case_gather_add_rows(cx *c);
void sl_conf_case_moe_combine(cx *c);
void sl_conf_case_moe_combine_bwd(cx *c);
void sl_conf_case_swiglu_fwd(cx *c);
void sl_conf_case_swiglu_bwd(cx *c);
void sl_conf_case_rowgate_fwd(cx *c);
void sl_conf_case_rowgate_bwd(cx *c);

#endif
