/*
 * tests/test_backend_ops.c - backend conformance: every operation of sl_ops_i
 * (core/backend_impl.h), on random inputs of several shapes, on the backend under test,
 * compared with a reference.
 *
 * usage: test_backend_ops [backend] [--require-all]
 *   backend: argv, else $SLUICE_TEST_BACKEND, else "cpu".
 *   $SLUICE_TEST_DTYPE: f32 (default) or bf16, the dtype of the float tensors on the backend
 *     under test (see "dtypes" below). $SLUICE_TEST_VERBOSE=1 prints every (shape, output).
 *
 * Reference: always the CPU backend. When the backend under test IS the CPU, every operation
 * is compared with the naive double-precision loops of tests/ref_ops.c; otherwise the same
 * inputs run on the CPU and on the backend under test and their outputs are compared.
 * Integer outputs (indices, counts) must match exactly; a float output passes when
 * |got - want| <= atol + rtol |want| element by element, with (atol, rtol) from k_tol below for
 * the dtype under test. Inputs come from a fixed seed per (operation, shape), are uploaded
 * with sl_tensor_from_host onto the backend the case runs on, and outputs come back with
 * sl_tensor_to_host, so nothing assumes host-addressable memory. Outputs an operation writes
 * start as junk (so an element it fails to write shows); outputs it accumulates into start
 * random (so "=" instead of "+=" shows).
 *
 * Not implemented: an operation whose slot is NULL in the backend under test is reported
 * "not implemented: <op>". It counts as a failure only with --require-all or
 * SLUICE_TEST_REQUIRE_ALL=1, and always for the CPU, the reference, which must be complete.
 * Why: a device backend gains its kernels one at a time and core/ops.c already stops any run
 * that reaches a missing one with the operation's name, so a partial backend is a normal
 * state to report, not a regression; a backend that claims completeness runs with the flag.
 *
 * Coverage: k_ops (at the bottom) has one row per operation, name and offsetof(sl_ops_i, op)
 * from the same token. At startup the rows must cover every function-pointer slot of
 * sl_ops_i exactly once, and every row must have a k_tol row: an operation added to sl_ops_i
 * without a conformance case fails the test with the slot's name (read from
 * core/backend_impl.h) before anything runs.
 *
 * dtypes: with SLUICE_TEST_DTYPE=bf16 the float tensors of the backend under test are bf16
 * as in bf16 training (docs/cuda.md, "Precision"), except those pinned to fp32: the router
 * (hence the combine weights it produces and their gradient), adamw's master weights,
 * gradients and moments, RoPE's inv_freq, the 1-element results of sum/sumsq/sigmoid_mean,
 * the saved statistics (rmsnorm's rstd, attention's lse, cross-entropy's losses) and
 * parameter gradients that accumulate (rmsnorm's dw, the embedding's dtable, the grouped
 * GEMM's dw, and a matmul C in some shapes). Inputs are rounded to the dtype under test on
 * both sides, so both compute on equal values.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/log.h"
#include "tests/ref_ops.h"
#include "tests/test_util.h"

/* ---- tolerances: the one table ------------------------------------------------------------
 * f32: set from the CPU's errors against the double references, each bound at least 4x the
 * worst error measured on its shapes (largest err/tol 0.21, rowgate_bwd; the summary lines
 * print them), and meant to hold for any fp32 backend (accumulation order, FMA, another exp).
 * A backend that computes in reduced precision internally (TF32 GEMMs) must either not do so
 * here or earn its own looser column. bf16: derived, not measured (no backend stores bf16
 * yet): one bf16 rounding of the output is 2^-9 = 2e-3 relative; calibrate when a bf16
 * backend lands.
 * Copies (fill, embedding_fwd, qgate_*, gather_rows) are exact in any dtype. */
typedef struct {
    double atol, rtol;
} tol;

static const struct {
    const char *op;
    tol f32, bf16;
} k_tol[] = {
    /* op                  f32 {atol, rtol}   bf16 {atol, rtol} */
    {"fill", {0, 0}, {0, 0}},
    {"add", {1e-6, 1e-6}, {1e-2, 1e-2}},
    {"axpy", {1e-6, 1e-6}, {1e-2, 1e-2}},
    {"scale", {1e-6, 1e-6}, {1e-2, 1e-2}},
    {"convert", {0, 0}, {0, 0}},         /* inputs are representable in both dtypes */
    {"sum", {1e-6, 1e-6}, {1e-6, 1e-6}}, /* fp32 result of a sum of bf16 inputs */
    {"sumsq", {1e-6, 1e-6}, {1e-6, 1e-6}},
    {"absmax", {0, 0}, {0, 0}}, /* a max: exact in any order and dtype */
    {"matmul", {1e-5, 1e-5}, {3e-2, 2e-2}},
    {"grouped_matmul", {1e-5, 1e-5}, {3e-2, 2e-2}},
    {"grouped_matmul_dw", {1e-5, 1e-5}, {3e-2, 2e-2}},
    {"rmsnorm_fwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"rmsnorm_bwd", {5e-5, 1e-5}, {2e-2, 2e-2}}, /* dw sums over rows */
    {"embedding_fwd", {0, 0}, {0, 0}},
    {"embedding_bwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"cross_entropy", {1e-5, 1e-5}, {1e-2, 1e-2}},
    {"qgate_split", {0, 0}, {0, 0}},
    {"qgate_merge", {0, 0}, {0, 0}},
    {"rope_fwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"rope_bwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"gated_attn_fwd", {2e-5, 1e-4}, {2e-2, 2e-2}},
    {"gated_attn_bwd", {1e-4, 1e-4}, {5e-2, 5e-2}},
    {"sigmoid_mean", {1e-6, 1e-6}, {1e-6, 1e-6}},
    {"kv_cache_write", {0, 0}, {0, 0}}, /* a copy */
    {"gated_attn_decode", {2e-5, 1e-4}, {2e-2, 2e-2}},
    /* bf16: q and k rounded on both sides, the dot product and exp in fp32 on a device */
    {"attn_sink_share", {1e-6, 1e-5}, {1e-5, 1e-3}},
    {"router_fwd", {1e-6, 1e-5}, {1e-6, 1e-5}}, /* fp32 on every backend */
    {"router_bwd", {1e-6, 1e-5}, {1e-6, 1e-5}},
    {"moe_sort", {0, 0}, {0, 0}},
    {"gather_rows", {0, 0}, {0, 0}},
    {"scatter_add_rows", {2e-6, 1e-5}, {1e-2, 1e-2}},
    {"moe_combine", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"moe_combine_bwd", {1e-5, 1e-5}, {2e-2, 2e-2}},
    {"swiglu_fwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"swiglu_bwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"rowgate_fwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"rowgate_bwd", {5e-6, 1e-5}, {2e-2, 2e-2}}, /* ds sums over the row */
    /* bf16: p, m, v are fp32 as in f32 mode; p_copy is p rounded once to bf16 (2^-8 relative at
     * worst, 2^-7 if p lands next to a rounding boundary) */
    {"adamw", {1e-6, 1e-5}, {1e-6, 8e-3}},
};

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- the case context ---------------------------------------------------------------------- */

enum { MAX_OUT = 6, MAX_TENSORS = 32 };

typedef struct {
    const char *name;
    int64_t n;
    double *v;
    bool exact; /* integer output: must match exactly */
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

static void desc(cx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->desc, sizeof c->desc, fmt, ap);
    va_end(ap);
}

static void *halloc(cx *c, size_t bytes) {
    if (c->nhost == c->cap_host) {
        c->cap_host = c->cap_host ? 2 * c->cap_host : 64;
        c->host = realloc(c->host, sizeof(void *) * (size_t)c->cap_host);
    }
    return c->host[c->nhost++] = calloc(bytes ? bytes : 1, 1);
}

/* bf16: the top half of an fp32, rounded to nearest even (NaN kept quiet). */
static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float round_to(float f, sl_dtype dt) {
    return dt == SL_BF16 ? bf16_value(bf16_bits(f)) : f;
}

/* Inputs. Every case draws all of them before it branches on c->be, so the test and the
 * reference run see the same values. */
static float *gen_uniform(cx *c, int64_t n, double lo, double hi) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = round_to((float)(lo + (hi - lo) * sl_test_rand_unif(&c->rng)), c->round_to);
    return x;
}

static float *gen_normal(cx *c, int64_t n, double std) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double u1 = sl_test_rand_unif(&c->rng), u2 = sl_test_rand_unif(&c->rng);
        x[i] = (float)(std * sqrt(-2.0 * log(u1 > 1e-300 ? u1 : 1e-300)) * cos(2.0 * M_PI * u2));
        x[i] = round_to(x[i], c->round_to);
    }
    return x;
}

/* Uniform integers in [lo, hi). */
static int32_t *gen_ints(cx *c, int64_t n, int32_t lo, int32_t hi) {
    int32_t *x = halloc(c, sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (int32_t)(sl_test_rand_u64(&c->rng) % (uint64_t)(hi - lo));
    return x;
}

/* A random permutation of [0, n). */
static int32_t *gen_perm(cx *c, int64_t n) {
    int32_t *p = halloc(c, sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(sl_test_rand_u64(&c->rng) % (uint64_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j], p[j] = t;
    }
    return p;
}

/* An input computed from other inputs (saved forward values), as float; rounded to the dtype
 * under test when its tensor has that dtype (`act`). */
static float *derived(cx *c, const double *v, int64_t n, bool act) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = act ? round_to((float)v[i], c->round_to) : (float)v[i];
    return x;
}

/* Initial contents of written outputs: finite values no correct kernel leaves behind. */
/* Junk is exactly representable in bf16 (multiples of 8 in [1000, 1096]): rows an operation
 * must leave alone (gather_rows' spare rows) then compare exactly in both dtypes. */
static float *junk(cx *c, int64_t n) {
    float *x = halloc(c, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = 1000.0f + 8.0f * (float)(i % 13);
    return x;
}

static int32_t *junk_i32(cx *c, int64_t n) {
    int32_t *x = halloc(c, sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = 99 + (int32_t)(i % 7);
    return x;
}

/* A tensor on the case's backend holding `host` (float for float dtypes, int32 for i32;
 * NULL = zeros), uploaded through the tensor API. */
static sl_tensor *mk(cx *c, sl_dtype dt, const void *host, int ndim, const int64_t *shape) {
    SL_CHECK(c->ntensors < MAX_TENSORS, "test_backend_ops: raise MAX_TENSORS");
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

static output *add_output(cx *c, const char *name, int64_t n, bool exact) {
    SL_CHECK(c->nout < MAX_OUT, "test_backend_ops: raise MAX_OUT");
    output *o = &c->out[c->nout++];
    o->name = name, o->n = n, o->exact = exact;
    o->v = calloc((size_t)(n ? n : 1), sizeof(double));
    return o;
}

/* Reference mode: a zeroed output buffer for the case to fill. */
static double *want(cx *c, const char *name, int64_t n) {
    return add_output(c, name, n, false)->v;
}

static void want_i32(cx *c, const char *name, const int32_t *v, int64_t n) {
    double *o = add_output(c, name, n, true)->v;
    for (int64_t i = 0; i < n; i++) o[i] = v[i];
}

/* Backend mode: the output read back from its tensor. */
static void got(cx *c, const char *name, const sl_tensor *t) {
    const int64_t n = sl_tensor_numel(t);
    const sl_dtype dt = sl_tensor_dtype(t);
    double *o = add_output(c, name, n, dt == SL_I32)->v;
    void *h = malloc(sl_tensor_nbytes(t) ? sl_tensor_nbytes(t) : 1);
    sl_tensor_to_host(t, h);
    for (int64_t i = 0; i < n; i++)
        o[i] = dt == SL_I32    ? ((int32_t *)h)[i]
               : dt == SL_BF16 ? bf16_value(((uint16_t *)h)[i])
                               : ((float *)h)[i];
    free(h);
}

static void setup_check(cx *c, bool ok, const char *what) {
    if (!ok) fprintf(stderr, "  test setup (%s): %s\n", c->desc, what);
    c->setup_ok &= ok;
}

/* ---- sum, sumsq, sigmoid_mean write device scalars (a 1-element fp32 `out`) ------------- */
static void run_sum(sl_tensor *out, const sl_tensor *x) {
    sl_op_sum(out, x);
}
static void run_sumsq(sl_tensor *out, const sl_tensor *x) {
    sl_op_sumsq(out, x);
}
static void run_sigmoid_mean(sl_tensor *out, const sl_tensor *g) {
    sl_op_sigmoid_mean(out, g);
}
static void run_absmax(sl_tensor *out, const sl_tensor *x) {
    sl_op_absmax(out, x);
}

/* ---- memory-level helpers ---------------------------------------------------------------- */

/* 70001 is above the CPU's threading threshold (32768 elements). */
static const int k_len[] = {1, 7, 4099, 70001};

static int64_t pick_len(cx *c) {
    const int64_t n = *PICK(c, k_len);
    desc(c, "[%lld]", (long long)n);
    return n;
}

static void case_fill(cx *c) {
    const int64_t n = pick_len(c);
    if (!c->be) {
        double *x = want(c, "x", n);
        for (int64_t i = 0; i < n; i++) x[i] = -3.25;
        return;
    }
    sl_tensor *x = ACT(c, junk(c, n), n);
    sl_op_fill(x, -3.25f);
    got(c, "x", x);
}

static void case_add(cx *c) {
    static const struct {
        int n, alias; /* 1: y is a, 2: y is b */
    } k_shapes[] = {{1, 0}, {7, 0}, {4099, 0}, {70001, 0}, {1001, 1}, {33, 2}};
    const int n = PICK(c, k_shapes)->n, alias = k_shapes[c->shape].alias;
    desc(c, "[%d]%s", n, alias == 1 ? "y=a" : alias == 2 ? "y=b" : "");
    const float *a = gen_normal(c, n, 1.0), *b = gen_normal(c, n, 1.0);
    if (!c->be) {
        double *y = want(c, "y", n);
        for (int i = 0; i < n; i++) y[i] = (double)a[i] + b[i];
        return;
    }
    sl_tensor *ta = ACT(c, a, n), *tb = ACT(c, b, n);
    sl_tensor *ty = alias == 1 ? ta : alias == 2 ? tb : ACT(c, junk(c, n), n);
    sl_op_add(ty, ta, tb);
    got(c, "y", ty);
}

static void case_axpy(cx *c) {
    const int64_t n = pick_len(c);
    const float alpha = -0.7f, *y0 = gen_normal(c, n, 1.0), *x = gen_normal(c, n, 1.0);
    if (!c->be) {
        double *y = want(c, "y", n);
        for (int64_t i = 0; i < n; i++) y[i] = y0[i] + (double)alpha * x[i];
        return;
    }
    sl_tensor *ty = ACT(c, y0, n);
    sl_op_axpy(ty, ACT(c, x, n), alpha);
    got(c, "y", ty);
}

static void case_scale(cx *c) {
    const int64_t n = pick_len(c);
    const float s = 1.37f, *x0 = gen_normal(c, n, 1.0);
    if (!c->be) {
        double *x = want(c, "x", n);
        for (int64_t i = 0; i < n; i++) x[i] = (double)x0[i] * s;
        return;
    }
    sl_tensor *tx = ACT(c, x0, n);
    sl_op_scale(tx, s);
    got(c, "x", tx);
}

/* Both directions: an fp32 tensor into the dtype under test and back. */
static void case_convert(cx *c) {
    const int64_t n = pick_len(c);
    const float *x = gen_normal(c, n, 1.0); /* representable in the dtype under test */
    if (!c->be) {
        double *y = want(c, "dst", n), *z = want(c, "back", n);
        for (int64_t i = 0; i < n; i++) y[i] = z[i] = x[i];
        return;
    }
    sl_tensor *tx = F32(c, x, n), *ty = ACT(c, junk(c, n), n), *tz = F32(c, junk(c, n), n);
    sl_op_convert(ty, tx);
    sl_op_convert(tz, ty);
    got(c, "dst", ty);
    got(c, "back", tz);
}

/* sum and sumsq: positive terms, so the relative tolerance is well conditioned. */
static void case_sum(cx *c) {
    const int64_t n = pick_len(c);
    const float *x = gen_uniform(c, n, 0.0, 1.0);
    if (!c->be) {
        double *s = want(c, "sum", 1);
        for (int64_t i = 0; i < n; i++) *s += x[i];
        return;
    }
    sl_tensor *out = F32(c, junk(c, 1), 1);
    run_sum(out, ACT(c, x, n));
    got(c, "sum", out);
}

static void case_sumsq(cx *c) {
    const int64_t n = pick_len(c);
    const float *x = gen_normal(c, n, 1.0);
    if (!c->be) {
        double *s = want(c, "sumsq", 1);
        for (int64_t i = 0; i < n; i++) *s += (double)x[i] * x[i];
        return;
    }
    sl_tensor *out = F32(c, junk(c, 1), 1);
    run_sumsq(out, ACT(c, x, n));
    got(c, "sumsq", out);
}

/* The largest |x| placed at a random index, negative in odd shapes (the sign must not matter),
 * plus an empty tensor (0). */
static void case_absmax(cx *c) {
    static const int k_n[] = {0, 1, 7, 4099, 70001};
    const int64_t n = *PICK(c, k_n);
    desc(c, "[%lld]", (long long)n);
    float *x = gen_normal(c, n, 2.0);
    if (n > 1) {
        const int64_t at = (int64_t)(sl_test_rand_u64(&c->rng) % (uint64_t)n);
        x[at] = round_to(c->shape % 2 ? -40.5f : 40.5f, c->round_to);
    }
    if (!c->be) {
        double *m = want(c, "max", 1);
        for (int64_t i = 0; i < n; i++) *m = fabs(x[i]) > *m ? fabs(x[i]) : *m;
        return;
    }
    sl_tensor *out = F32(c, junk(c, 1), 1);
    run_absmax(out, n ? ACT(c, x, n) : ACT(c, NULL, 0));
    got(c, "max", out);
}

/* ---- dense and grouped GEMM -------------------------------------------------------------- */

typedef struct {
    int m, n, k, ta, tb;
    float alpha, beta;
    int c32; /* C pinned to fp32 (a parameter gradient: dW += dY^T X) */
} mm_shape;

static void case_matmul(cx *c) {
    static const mm_shape k_shapes[] = {
        {1, 1, 1, 0, 0, 1.0f, 0.0f, 0},     {1, 13, 7, 0, 1, 1.0f, 0.0f, 0},    /* a single row */
        {7, 5, 9, 1, 0, 0.5f, 2.0f, 0},     {7, 5, 9, 1, 1, 1.0f, 1.0f, 0},     /* every layout */
        {64, 48, 80, 0, 0, 1.0f, 0.0f, 0},  {65, 33, 129, 0, 1, 1.0f, 0.5f, 0}, /* odd sizes */
        {33, 65, 17, 1, 1, -1.0f, 0.0f, 0}, {40, 24, 70, 1, 0, 1.0f, 1.0f, 1},  /* dW += dY^T X */
    };
    const mm_shape *s = PICK(c, k_shapes);
    const int64_t m = s->m, n = s->n, k = s->k;
    desc(c, "%lldx%lldx%lld%s%s%s", (long long)m, (long long)n, (long long)k, s->ta ? "/At" : "",
         s->tb ? "/Bt" : "", s->c32 ? "/Cf32" : "");
    const float *a = gen_uniform(c, m * k, -1, 1), *b = gen_uniform(c, k * n, -1, 1);
    const float *c0 = gen_uniform(c, m * n, -1, 1);
    if (!c->be) {
        sl_ref_matmul(want(c, "c", m * n), a, b, c0, m, n, k, s->ta, s->tb, s->alpha, s->beta);
        return;
    }
    sl_tensor *ta = s->ta ? ACT(c, a, k, m) : ACT(c, a, m, k);
    sl_tensor *tb = s->tb ? ACT(c, b, n, k) : ACT(c, b, k, n);
    sl_tensor *tc = s->c32 ? GRAD(c, c0, m, n) : ACT(c, c0, m, n);
    sl_op_matmul(tc, ta, tb, s->ta, s->tb, s->alpha, s->beta);
    got(c, "c", tc);
}

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

static int64_t gm_rows(const gm_shape *s) {
    int64_t n = 0;
    for (int g = 0; g < s->groups; g++) n += s->counts[g];
    return n;
}

static float *poison_tail(float *x, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++) x[i] = 1e30f;
    return x;
}

static void case_grouped_matmul(cx *c) {
    const gm_shape *s = PICK(c, k_gm);
    const int64_t n = gm_rows(s), rows = n + s->spare, g = s->groups;
    const int64_t in = s->tb ? s->s : s->r, out = s->tb ? s->r : s->s;
    desc(c, "%lld+%d rows/%d groups/%dx%d%s", (long long)n, s->spare, s->groups, s->r, s->s,
         s->tb ? "t" : "");
    float *a = poison_tail(gen_uniform(c, rows * in, -1, 1), n * in, rows * in);
    const float *b = gen_uniform(c, g * s->r * s->s, -1, 1),
                *c0 = gen_uniform(c, rows * out, -1, 1);
    if (!c->be) {
        sl_ref_grouped_matmul(want(c, "c", rows * out), a, b, c0, s->counts, s->groups, rows, s->r,
                              s->s, s->tb, s->beta);
        return;
    }
    sl_tensor *tc = ACT(c, c0, rows, out);
    sl_op_grouped_matmul(tc, ACT(c, a, rows, in), ACT(c, b, g, s->r, s->s), s->counts, s->groups,
                         s->tb, s->beta);
    got(c, "c", tc);
}

static void case_grouped_matmul_dw(cx *c) {
    const gm_shape *s = PICK(c, k_gm);
    const int64_t n = gm_rows(s), rows = n + s->spare, g = s->groups, r = s->r, sc = s->s;
    desc(c, "%lld+%d rows/%d groups/%dx%d", (long long)n, s->spare, s->groups, s->r, s->s);
    float *dy = poison_tail(gen_uniform(c, rows * r, -1, 1), n * r, rows * r);
    float *x = poison_tail(gen_uniform(c, rows * sc, -1, 1), n * sc, rows * sc);
    const float *dw0 = gen_uniform(c, g * r * sc, -1, 1);
    if (!c->be) {
        double *dw = want(c, "dw", g * r * sc);
        for (int64_t i = 0; i < g * r * sc; i++) dw[i] = dw0[i];
        sl_ref_grouped_matmul_dw(dw, dy, x, s->counts, s->groups, r, sc);
        return;
    }
    sl_tensor *tdw = GRAD(c, dw0, g, r, sc);
    sl_op_grouped_matmul_dw(tdw, ACT(c, dy, rows, r), ACT(c, x, rows, sc), s->counts, s->groups);
    got(c, "dw", tdw);
}

/* ---- normalization, embedding, loss ------------------------------------------------------ */

/* Rows and width; 130 rows is above the CPU's per-row threading threshold (64). The same
 * pairs serve swiglu (gu [rows, 2 width]) and rowgate (x [rows, width], s [rows]). */
typedef struct {
    int rows, w;
} rw_shape;

static const rw_shape k_rw[] = {{1, 1},    {1, 16},    {7, 33},   {130, 64},
                                {3, 1000}, {129, 257}, {300, 130}};

static const rw_shape *pick_rw(cx *c) {
    const rw_shape *s = PICK(c, k_rw);
    desc(c, "%dx%d", s->rows, s->w);
    return s;
}

static void case_rmsnorm_fwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t rows = sh->rows, d = sh->w;
    const float *x = gen_normal(c, rows * d, 1.0), *w = gen_uniform(c, d, 0.5, 1.5);
    if (!c->be) {
        double *y = want(c, "y", rows * d), *rstd = want(c, "rstd", rows);
        sl_ref_rmsnorm_fwd(y, rstd, x, w, rows, d, 1e-6);
        return;
    }
    sl_tensor *ty = ACT(c, junk(c, rows * d), rows, d), *tr = F32(c, junk(c, rows), rows);
    sl_op_rmsnorm_fwd(ty, tr, ACT(c, x, rows, d), ACT(c, w, d), 1e-6f);
    got(c, "y", ty);
    got(c, "rstd", tr);
}

static void case_rmsnorm_bwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t rows = sh->rows, d = sh->w;
    const float *x = gen_normal(c, rows * d, 1.0), *w = gen_uniform(c, d, 0.5, 1.5);
    const float *dy = gen_normal(c, rows * d, 1.0), *dw0 = gen_normal(c, d, 1.0);
    double *ry = halloc(c, sizeof(double) * (size_t)(rows * d));
    double *rr = halloc(c, sizeof(double) * (size_t)rows);
    sl_ref_rmsnorm_fwd(ry, rr, x, w, rows, d, 1e-6);
    const float *rstd = derived(c, rr, rows, false);
    if (!c->be) {
        double *dx = want(c, "dx", rows * d), *dw = want(c, "dw", d);
        for (int64_t i = 0; i < d; i++) dw[i] = dw0[i];
        sl_ref_rmsnorm_bwd(dx, dw, dy, x, w, rstd, rows, d);
        return;
    }
    sl_tensor *tdx = ACT(c, junk(c, rows * d), rows, d), *tdw = GRAD(c, dw0, d);
    sl_op_rmsnorm_bwd(tdx, tdw, ACT(c, dy, rows, d), ACT(c, x, rows, d), ACT(c, w, d),
                      F32(c, rstd, rows));
    got(c, "dx", tdx);
    got(c, "dw", tdw);
}

/* Vocabulary v, width c, n tokens (repeated ids). */
typedef struct {
    int v, c, n;
} emb_shape;

static const emb_shape k_emb[] = {{1, 1, 1}, {6, 4, 5}, {50, 33, 200}, {1000, 8, 3}};

static const emb_shape *pick_emb(cx *c) {
    const emb_shape *s = PICK(c, k_emb);
    desc(c, "V%d/C%d/N%d", s->v, s->c, s->n);
    return s;
}

static void case_embedding_fwd(cx *c) {
    const emb_shape *sh = pick_emb(c);
    const int64_t v = sh->v, w = sh->c, n = sh->n;
    const float *table = gen_normal(c, v * w, 1.0);
    const int32_t *ids = gen_ints(c, n, 0, (int32_t)v);
    if (!c->be) {
        sl_ref_embedding_fwd(want(c, "out", n * w), ids, table, n, w);
        return;
    }
    sl_tensor *out = ACT(c, junk(c, n * w), n, w);
    sl_op_embedding_fwd(out, I32(c, ids, n), ACT(c, table, v, w));
    got(c, "out", out);
}

static void case_embedding_bwd(cx *c) {
    const emb_shape *sh = pick_emb(c);
    const int64_t v = sh->v, w = sh->c, n = sh->n;
    const float *dt0 = gen_normal(c, v * w, 1.0), *dout = gen_normal(c, n * w, 1.0);
    const int32_t *ids = gen_ints(c, n, 0, (int32_t)v);
    if (!c->be) {
        double *dt = want(c, "dtable", v * w);
        for (int64_t i = 0; i < v * w; i++) dt[i] = dt0[i];
        sl_ref_embedding_bwd(dt, dout, ids, n, w);
        return;
    }
    sl_tensor *tdt = GRAD(c, dt0, v, w);
    sl_op_embedding_bwd(tdt, ACT(c, dout, n, w), I32(c, ids, n));
    got(c, "dtable", tdt);
}

static void case_cross_entropy(cx *c) {
    static const struct {
        int n, v, mode; /* 0: dlogits separate, 1: no dlogits, 2: dlogits aliases logits */
        float scale;
    } k_shapes[] = {{1, 1, 0, 1.0f},   {1, 5, 0, 1.0f},     {5, 11, 1, 1.0f},
                    {5, 11, 2, 0.25f}, {37, 1000, 0, 0.5f}, {64, 50, 2, 1.0f}};
    const int64_t n = PICK(c, k_shapes)->n, v = k_shapes[c->shape].v;
    const int mode = k_shapes[c->shape].mode;
    const float scale = k_shapes[c->shape].scale;
    desc(c, "%lldx%lld%s", (long long)n, (long long)v,
         mode == 1   ? "/no-grad"
         : mode == 2 ? "/in-place"
                     : "");
    const float *logits = gen_normal(c, n * v, 2.0);
    int32_t *tg = gen_ints(c, n, 0, (int32_t)v);
    if (n > 2) tg[2] = -1; /* an ignored row */
    if (!c->be) {
        double *losses = want(c, "losses", n); /* outputs in the order of the backend's */
        sl_ref_cross_entropy(losses, mode == 1 ? NULL : want(c, "dlogits", n * v), logits, tg, n, v,
                             scale);
        return;
    }
    sl_tensor *tl = ACT(c, logits, n, v), *tloss = F32(c, junk(c, n), n);
    sl_tensor *td = mode == 0 ? ACT(c, junk(c, n * v), n, v) : mode == 2 ? tl : NULL;
    sl_op_cross_entropy(tloss, td, tl, I32(c, tg, n), scale);
    got(c, "losses", tloss);
    if (td) got(c, "dlogits", td);
}

/* ---- gated attention --------------------------------------------------------------------- */

static const char *mode_tag(sl_gate_mode m) {
    return m == SL_GATE_ELEMENTWISE ? "elem" : m == SL_GATE_HEADWISE ? "head" : "none";
}

static int64_t gate_width(sl_gate_mode m, int64_t d) {
    return m == SL_GATE_ELEMENTWISE ? d : m == SL_GATE_HEADWISE ? 1 : 0;
}

typedef struct {
    int t, h, d;
    sl_gate_mode mode;
} qg_shape;

static const qg_shape k_qgate[] = {
    {1, 1, 1, SL_GATE_ELEMENTWISE}, {5, 3, 4, SL_GATE_ELEMENTWISE}, {5, 3, 4, SL_GATE_HEADWISE},
    {5, 3, 4, SL_GATE_NONE},        {7, 4, 16, SL_GATE_HEADWISE},   {9, 2, 64, SL_GATE_ELEMENTWISE},
};

static const qg_shape *pick_qgate(cx *c) {
    const qg_shape *s = PICK(c, k_qgate);
    desc(c, "T%d/H%d/D%d/%s", s->t, s->h, s->d, mode_tag(s->mode));
    return s;
}

static void case_qgate_split(cx *c) {
    const qg_shape *sh = pick_qgate(c);
    const int64_t t = sh->t, h = sh->h, d = sh->d, dg = gate_width(sh->mode, d), w = h * (d + dg);
    const sl_gate_mode mode = sh->mode;
    const float *qall = gen_normal(c, t * w, 1.0);
    if (!c->be) {
        double *q = want(c, "q", t * h * d);
        sl_ref_qgate_split(q, dg ? want(c, "g", t * h * dg) : NULL, qall, t, h, d, mode);
        return;
    }
    sl_tensor *tq = ACT(c, junk(c, t * h * d), t, h, d);
    sl_tensor *tg = dg ? ACT(c, junk(c, t * h * dg), t, h, dg) : NULL;
    sl_op_qgate_split(tq, tg, ACT(c, qall, t, w), mode);
    got(c, "q", tq);
    if (tg) got(c, "g", tg);
}

static void case_qgate_merge(cx *c) {
    const qg_shape *sh = pick_qgate(c);
    const int64_t t = sh->t, h = sh->h, d = sh->d, dg = gate_width(sh->mode, d), w = h * (d + dg);
    const sl_gate_mode mode = sh->mode;
    const float *dq = gen_normal(c, t * h * d, 1.0), *g = dg ? gen_normal(c, t * h * dg, 1.0) : 0;
    if (!c->be) {
        sl_ref_qgate_merge(want(c, "dqall", t * w), dq, g, t, h, d, mode);
        return;
    }
    sl_tensor *tall = ACT(c, junk(c, t * w), t, w);
    sl_op_qgate_merge(tall, ACT(c, dq, t, h, d), dg ? ACT(c, g, t, h, dg) : NULL, mode);
    got(c, "dqall", tall);
}

/* RoPE: full, partial and YaRN-scaled rotations; positions up to 131071. */
static const struct {
    int t, nh, d, half;
    float mscale;
} k_rope[] = {{1, 1, 2, 1, 1.0f},
              {9, 3, 16, 8, 1.0f},
              {9, 3, 16, 4, 1.138629f},
              {33, 5, 64, 32, 1.0f},
              {17, 2, 128, 24, 1.138629f}};

static void case_rope(cx *c, int sign) {
    const int64_t t = PICK(c, k_rope)->t, nh = k_rope[c->shape].nh;
    const int d = k_rope[c->shape].d, half = k_rope[c->shape].half;
    const float mscale = k_rope[c->shape].mscale;
    desc(c, "T%lld/NH%lld/D%d/rot%d%s", (long long)t, (long long)nh, d, 2 * half,
         mscale != 1.0f ? "/yarn" : "");
    static const int32_t k_pos[] = {0, 1, 2, 17, 100, 4095, 4096, 40000, 131071};
    int32_t *pos = halloc(c, sizeof(int32_t) * (size_t)t);
    float *inv_freq = halloc(c, sizeof(float) * (size_t)half);
    for (int64_t i = 0; i < t; i++) pos[i] = k_pos[i % NELEM(k_pos)] + (int32_t)(i / NELEM(k_pos));
    for (int i = 0; i < half; i++) inv_freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / (2 * half)));
    const float *x = gen_normal(c, t * nh * d, 1.0);
    if (!c->be) {
        sl_ref_rope_all(want(c, "x", t * nh * d), x, pos, t, nh, d, half, inv_freq, mscale, sign);
        return;
    }
    sl_tensor *tx = ACT(c, x, t, nh, d), *tp = I32(c, pos, t), *tf = F32(c, inv_freq, half);
    if (sign > 0)
        sl_op_rope_fwd(tx, tp, tf, mscale);
    else
        sl_op_rope_bwd(tx, tp, tf, mscale);
    got(c, "x", tx);
}

static void case_rope_fwd(cx *c) {
    case_rope(c, 1);
}
static void case_rope_bwd(cx *c) {
    case_rope(c, -1);
}

/* Batches, sequence lengths across the CPU's 64-row tiles and the CUDA's 16/32-row ones, GQA
 * ratios, the three gates, head dims in one chunk and in two (160), and document masks: doc 0
 * is plain causal (seg NULL); doc -1 one document per sequence (seg all zero); doc N > 0 packed
 * documents starting at each position with probability 1/N (N = 1: every token its own
 * document), plus forced length-1 documents (attn_docs). */
static const struct {
    int b, s, h, kv, d;
    sl_gate_mode mode;
    int doc;
} k_attn[] = {
    {1, 1, 1, 1, 1, SL_GATE_ELEMENTWISE, 0},     {2, 7, 4, 2, 16, SL_GATE_ELEMENTWISE, 0},
    {1, 70, 4, 1, 32, SL_GATE_HEADWISE, 0},      {2, 65, 2, 2, 8, SL_GATE_NONE, 0},
    {1, 130, 3, 3, 8, SL_GATE_HEADWISE, 0},      {1, 33, 2, 1, 128, SL_GATE_ELEMENTWISE, 0},
    {2, 70, 4, 2, 16, SL_GATE_ELEMENTWISE, 5},   {1, 130, 3, 1, 8, SL_GATE_HEADWISE, 40},
    {2, 65, 2, 2, 8, SL_GATE_NONE, 1},           {1, 33, 2, 1, 128, SL_GATE_ELEMENTWISE, -1},
    {1, 97, 2, 1, 128, SL_GATE_ELEMENTWISE, 20}, {1, 50, 2, 2, 160, SL_GATE_NONE, 9},
    {3, 1, 2, 1, 8, SL_GATE_HEADWISE, 1},
};

typedef struct {
    int b, s, h, kv, d, doc;
    int64_t t, nq, nk, ng;
    sl_gate_mode mode;
    double scale;
    const float *q, *k, *v, *g;
    const int32_t *seg; /* NULL: plain causal */
} attn_in;

/* Document starts for doc > 0 (k_attn): position i of a sequence begins a document with
 * probability 1 / doc, and positions 1 and s - 1 always do (documents of length 1 at both ends
 * when s > 2). seg[i] = start of i's document. */
static int32_t *attn_docs(cx *c, int b, int s, int doc) {
    int32_t *seg = halloc(c, sizeof(int32_t) * (size_t)b * (size_t)s);
    for (int r = 0; r < b; r++)
        for (int i = 0, start = 0; i < s; i++) {
            if (doc > 0 && i > 0 &&
                (i == 1 || i == s - 1 || sl_test_rand_u64(&c->rng) % (uint64_t)doc == 0))
                start = i;
            seg[(int64_t)r * s + i] = start;
        }
    return seg;
}

static attn_in attn_inputs(cx *c) {
    attn_in a = {.b = PICK(c, k_attn)->b};
    a.s = k_attn[c->shape].s, a.h = k_attn[c->shape].h, a.kv = k_attn[c->shape].kv;
    a.d = k_attn[c->shape].d, a.mode = k_attn[c->shape].mode, a.doc = k_attn[c->shape].doc;
    a.t = (int64_t)a.b * a.s, a.nq = a.t * a.h * a.d, a.nk = a.t * a.kv * a.d;
    a.ng = a.t * a.h * gate_width(a.mode, a.d), a.scale = 1.0 / sqrt((double)a.d);
    desc(c, "B%d/S%d/H%d/KV%d/D%d/%s", a.b, a.s, a.h, a.kv, a.d, mode_tag(a.mode));
    if (a.doc)
        snprintf(c->desc + strlen(c->desc), sizeof c->desc - strlen(c->desc), "/doc%d", a.doc);
    a.q = gen_normal(c, a.nq, 1.5), a.k = gen_normal(c, a.nk, 1.5), a.v = gen_normal(c, a.nk, 1.0);
    a.g = a.ng ? gen_normal(c, a.ng, 1.5) : NULL;
    a.seg = a.doc ? attn_docs(c, a.b, a.s, a.doc) : NULL;
    return a;
}

/* seg as a tensor on the case's backend, or NULL. */
static sl_tensor *attn_seg(cx *c, const attn_in *a) {
    return a->seg ? I32(c, a->seg, a->t) : NULL;
}

/* q, k, v, g as tensors: q [T, H, D], k/v [T, KV, D], g [T, H, D or 1] or NULL. */
static void attn_tensors(cx *c, const attn_in *a, sl_tensor **t) {
    t[0] = ACT(c, a->q, a->t, a->h, a->d);
    t[1] = ACT(c, a->k, a->t, a->kv, a->d);
    t[2] = ACT(c, a->v, a->t, a->kv, a->d);
    t[3] = a->ng ? ACT(c, a->g, a->t, a->h, a->ng / (a->t * a->h)) : NULL;
}

static void case_gated_attn_fwd(cx *c) {
    const attn_in a = attn_inputs(c);
    if (!c->be) {
        double *y = want(c, "y", a.nq), *o = want(c, "o", a.nq), *lse = want(c, "lse", a.t * a.h);
        sl_ref_attn_fwd(y, o, lse, a.q, a.k, a.v, a.g, a.seg, a.mode, a.b, a.s, a.h, a.kv, a.d,
                        a.scale);
        return;
    }
    sl_tensor *in[4], *y = ACT(c, junk(c, a.nq), a.t, a.h, a.d);
    sl_tensor *o = ACT(c, junk(c, a.nq), a.t, a.h, a.d),
              *lse = F32(c, junk(c, a.t * a.h), a.t, a.h);
    attn_tensors(c, &a, in);
    sl_op_gated_attn_fwd(y, o, lse, in[0], in[1], in[2], in[3], attn_seg(c, &a), a.b, a.s,
                         (float)a.scale);
    got(c, "y", y);
    got(c, "o", o);
    got(c, "lse", lse);
}

static void case_gated_attn_bwd(cx *c) {
    const attn_in a = attn_inputs(c);
    const float *dy = gen_normal(c, a.nq, 1.0);
    /* The saved forward values the kernel receives, from the double forward. */
    double *ry = halloc(c, sizeof(double) * (size_t)a.nq), *ro = halloc(c, sizeof(double) * a.nq);
    double *rl = halloc(c, sizeof(double) * (size_t)(a.t * a.h));
    sl_ref_attn_fwd(ry, ro, rl, a.q, a.k, a.v, a.g, a.seg, a.mode, a.b, a.s, a.h, a.kv, a.d,
                    a.scale);
    const float *o = derived(c, ro, a.nq, true), *lse = derived(c, rl, a.t * a.h, false);
    if (!c->be) {
        double *dq = want(c, "dq", a.nq), *dk = want(c, "dk", a.nk), *dv = want(c, "dv", a.nk);
        sl_ref_attn_bwd(dq, dk, dv, a.ng ? want(c, "dg", a.ng) : NULL, dy, a.q, a.k, a.v, a.g,
                        a.seg, a.mode, a.b, a.s, a.h, a.kv, a.d, a.scale);
        return;
    }
    sl_tensor *in[4];
    attn_tensors(c, &a, in);
    sl_tensor *dq = ACT(c, junk(c, a.nq), a.t, a.h, a.d);
    sl_tensor *dk = ACT(c, junk(c, a.nk), a.t, a.kv, a.d),
              *dv = ACT(c, junk(c, a.nk), a.t, a.kv, a.d);
    sl_tensor *dg = a.ng ? ACT(c, junk(c, a.ng), a.t, a.h, a.ng / (a.t * a.h)) : NULL;
    sl_op_gated_attn_bwd(dq, dk, dv, dg, ACT(c, dy, a.t, a.h, a.d), in[0], in[1], in[2], in[3],
                         attn_seg(c, &a), ACT(c, o, a.t, a.h, a.d), F32(c, lse, a.t, a.h), a.b, a.s,
                         (float)a.scale);
    got(c, "dq", dq);
    got(c, "dk", dk);
    got(c, "dv", dv);
    if (dg) got(c, "dg", dg);
}

/* Decoding with a KV cache: B sequences of a cache of L positions, n new tokens each, at
 * starts drawn in [0, L - n] (so every new row lands in the cache), or with over > 0 in
 * [L - n + 1, L - n + over] (rows past the cache: skipped by the write, clamped by the
 * attention). Head dims in one CUDA column group and in several (160), caches of several CPU
 * (64) and CUDA (128) key chunks, n > 1 (a chunked prefill) and n = 1 (decoding). */
static const struct {
    int b, n, len, h, kv, d;
    sl_gate_mode mode;
    int over;
} k_dec[] = {
    {1, 1, 1, 1, 1, 1, SL_GATE_ELEMENTWISE, 0},     {2, 1, 9, 4, 2, 16, SL_GATE_ELEMENTWISE, 0},
    {3, 1, 130, 4, 1, 32, SL_GATE_HEADWISE, 0},     {2, 5, 70, 2, 2, 8, SL_GATE_NONE, 0},
    {1, 3, 300, 3, 3, 128, SL_GATE_ELEMENTWISE, 0}, {2, 2, 33, 2, 1, 160, SL_GATE_HEADWISE, 0},
    {3, 4, 20, 2, 1, 8, SL_GATE_ELEMENTWISE, 3},
};

typedef struct {
    int b, n, len, h, kv, d;
    sl_gate_mode mode;
    int64_t nq, nc, ng;
    const int32_t *start;
} dec_in;

static dec_in dec_inputs(cx *c) {
    dec_in a = {.b = PICK(c, k_dec)->b};
    a.n = k_dec[c->shape].n, a.len = k_dec[c->shape].len, a.h = k_dec[c->shape].h;
    a.kv = k_dec[c->shape].kv, a.d = k_dec[c->shape].d, a.mode = k_dec[c->shape].mode;
    const int over = k_dec[c->shape].over;
    a.nq = (int64_t)a.b * a.n * a.h * a.d, a.nc = (int64_t)a.b * a.len * a.kv * a.d;
    a.ng = (int64_t)a.b * a.n * a.h * gate_width(a.mode, a.d);
    desc(c, "B%d/n%d/L%d/H%d/KV%d/D%d/%s%s", a.b, a.n, a.len, a.h, a.kv, a.d, mode_tag(a.mode),
         over ? "/over" : "");
    const int lo = over ? a.len - a.n + 1 : 0, hi = over ? a.len - a.n + over : a.len - a.n;
    a.start = gen_ints(c, a.b, lo, hi + 1);
    return a;
}

static void case_kv_cache_write(cx *c) {
    const dec_in a = dec_inputs(c);
    const int64_t row = (int64_t)a.kv * a.d, nx = (int64_t)a.b * a.n * row;
    const float *x = gen_normal(c, nx, 1.0), *cache0 = junk(c, a.nc);
    if (!c->be) {
        double *o = want(c, "cache", a.nc);
        for (int64_t i = 0; i < a.nc; i++) o[i] = cache0[i];
        for (int b = 0; b < a.b; b++)
            for (int i = 0; i < a.n && a.start[b] + i < a.len; i++)
                for (int64_t e = 0; e < row; e++)
                    o[((int64_t)b * a.len + a.start[b] + i) * row + e] =
                        x[((int64_t)b * a.n + i) * row + e];
        return;
    }
    sl_tensor *cache = ACT(c, cache0, a.b, a.len, a.kv, a.d);
    sl_op_kv_cache_write(cache, ACT(c, x, (int64_t)a.b * a.n, a.kv, a.d), I32(c, a.start, a.b), a.b,
                         a.n);
    got(c, "cache", cache);
}

static void case_gated_attn_decode(cx *c) {
    const dec_in a = dec_inputs(c);
    const float *q = gen_normal(c, a.nq, 1.5), *kc = gen_normal(c, a.nc, 1.5);
    const float *vc = gen_normal(c, a.nc, 1.0), *g = a.ng ? gen_normal(c, a.ng, 1.5) : NULL;
    const double scale = 1.0 / sqrt((double)a.d);
    const int64_t t = (int64_t)a.b * a.n;
    if (!c->be) {
        sl_ref_attn_decode(want(c, "y", a.nq), q, kc, vc, g, a.start, a.mode, a.b, a.n, a.len, a.h,
                           a.kv, a.d, scale);
        return;
    }
    sl_tensor *y = ACT(c, junk(c, a.nq), t, a.h, a.d);
    sl_op_gated_attn_decode(y, ACT(c, q, t, a.h, a.d), ACT(c, kc, a.b, a.len, a.kv, a.d),
                            ACT(c, vc, a.b, a.len, a.kv, a.d),
                            g ? ACT(c, g, t, a.h, a.ng / (t * a.h)) : NULL, I32(c, a.start, a.b),
                            a.b, a.n, (float)scale);
    got(c, "y", y);
}

static void case_sigmoid_mean(cx *c) {
    static const int k_n[] = {1, 7, 10007};
    const int64_t n = *PICK(c, k_n);
    desc(c, "[%lld]", (long long)n);
    const float *g = gen_normal(c, n, 3.0);
    if (!c->be) {
        double *m = want(c, "mean", 1);
        for (int64_t i = 0; i < n; i++) *m += sl_ref_sigmoid(g[i]) / (double)n;
        return;
    }
    sl_tensor *out = F32(c, junk(c, 1), 1);
    run_sigmoid_mean(out, ACT(c, g, n));
    got(c, "mean", out);
}

/* The attention shapes with the saved lse of the double forward, as the kernel receives it
 * (plain causal: the share is defined without document masks). */
static void case_attn_sink_share(cx *c) {
    const attn_in a = attn_inputs(c);
    double *ry = halloc(c, sizeof(double) * (size_t)a.nq), *ro = halloc(c, sizeof(double) * a.nq);
    double *rl = halloc(c, sizeof(double) * (size_t)(a.t * a.h));
    sl_ref_attn_fwd(ry, ro, rl, a.q, a.k, a.v, a.g, NULL, a.mode, a.b, a.s, a.h, a.kv, a.d,
                    a.scale);
    const float *lse = derived(c, rl, a.t * a.h, false);
    if (!c->be) {
        *want(c, "share", 1) =
            sl_ref_attn_sink_share(a.q, a.k, lse, a.b, a.s, a.h, a.kv, a.d, a.scale);
        return;
    }
    sl_tensor *in[4], *out = F32(c, junk(c, 1), 1);
    attn_tensors(c, &a, in);
    sl_op_attn_sink_share(out, in[0], in[1], F32(c, lse, a.t, a.h), a.b, a.s, (float)a.scale);
    got(c, "share", out);
}

/* ---- mixture of experts ------------------------------------------------------------------ */

/* Router logits whose ranks are >= 0.1 apart (steps of 0.6, noise +-0.25) in a random order,
 * except row 0 (when n > 1): all equal, so the tie rule (lower index first) is exercised
 * exactly. Bias, when used, is a few hundredths per expert. */
static float *router_logits(cx *c, int64_t n, int e) {
    float *l = halloc(c, sizeof(float) * (size_t)(n * e));
    for (int64_t r = 0; r < n; r++) {
        const int32_t *perm = gen_perm(c, e);
        const float *noise = gen_uniform(c, e, -0.25, 0.25);
        for (int i = 0; i < e; i++)
            l[r * e + perm[i]] = n > 1 && r == 0 ? 0.5f : 0.6f * (float)i - 2.0f + noise[i];
    }
    return l;
}

static float *router_bias(cx *c, int e) {
    float *b = halloc(c, sizeof(float) * (size_t)e);
    for (int i = 0; i < e; i++) b[i] = 0.02f * (float)((i * 5) % 7 - 3);
    return b;
}

/* Precondition: within the k selected experts and the best unselected one, consecutive scores
 * are exactly tied or at least 1e-6 apart (fp32 rounding of p + bias is ~6e-8), so the
 * selection and its order do not depend on rounding. */
static void router_margin(cx *c, const double *p, const int *idx, const float *bias, int e, int k) {
    double sc[257];
    bool used[256] = {false};
    int m = 0;
    for (int j = 0; j < k; j++)
        used[idx[j]] = true, sc[m++] = p[idx[j]] + (bias ? bias[idx[j]] : 0);
    if (k < e) {
        double best = -INFINITY;
        for (int i = 0; i < e; i++)
            if (!used[i]) best = fmax(best, p[i] + (bias ? bias[i] : 0));
        sc[m++] = best;
    }
    for (int j = 1; j < m; j++) {
        const double gap = sc[j - 1] - sc[j];
        setup_check(c, gap == 0.0 || gap > 1e-6, "router scores closer than 1e-6");
    }
}

static void case_router_fwd(cx *c) {
    static const struct {
        int n, e, k, norm, bias;
    } k_shapes[] = {{1, 1, 1, 0, 0},     {1, 8, 2, 1, 1},    {37, 16, 3, 1, 1},
                    {300, 16, 16, 0, 0}, {257, 33, 5, 1, 0}, {64, 8, 2, 0, 1},
                    {40, 128, 8, 1, 0},  {9, 200, 8, 0, 0}}; /* the paper's E and k; E > 128 */
    const int64_t n = PICK(c, k_shapes)->n;
    const int e = k_shapes[c->shape].e, k = k_shapes[c->shape].k;
    const bool norm = k_shapes[c->shape].norm, with_bias = k_shapes[c->shape].bias;
    desc(c, "N%lld/E%d/k%d%s%s", (long long)n, e, k, norm ? "/norm" : "", with_bias ? "/bias" : "");
    const float *l = router_logits(c, n, e), *bias = with_bias ? router_bias(c, e) : NULL;
    double *p = halloc(c, sizeof(double) * (size_t)e), *w = halloc(c, sizeof(double) * (size_t)k);
    int *idx = halloc(c, sizeof(int) * (size_t)k);
    double lse;
    for (int64_t r = 0; r < n; r++) {
        sl_ref_router_row(l + r * e, bias, e, k, norm, p, idx, w, &lse);
        router_margin(c, p, idx, bias, e, k);
    }
    if (!c->be) {
        double *probs = want(c, "probs", n * e);
        int32_t *ti = halloc(c, sizeof(int32_t) * (size_t)(n * k));
        double *tw = halloc(c, sizeof(double) * (size_t)(n * k));
        for (int64_t r = 0; r < n; r++) {
            sl_ref_router_row(l + r * e, bias, e, k, norm, probs + r * e, idx, tw + r * k, &lse);
            for (int j = 0; j < k; j++) ti[r * k + j] = idx[j];
        }
        want_i32(c, "topk_idx", ti, n * k);
        double *ow = want(c, "topk_w", n * k), *stats = want(c, "stats", e + 1);
        memcpy(ow, tw, sizeof(double) * (size_t)(n * k));
        for (int64_t r = 0; r < n; r++) {
            double m = -INFINITY, s = 0.0;
            for (int i = 0; i < e; i++) stats[i] += probs[r * e + i], m = fmax(m, l[r * e + i]);
            for (int i = 0; i < e; i++) s += exp(l[r * e + i] - m);
            stats[e] += (m + log(s)) * (m + log(s));
        }
        return;
    }
    sl_tensor *tp = F32(c, junk(c, n * e), n, e), *ti = I32(c, junk_i32(c, n * k), n, k);
    sl_tensor *tw = F32(c, junk(c, n * k), n, k), *ts = F32(c, junk(c, e + 1), e + 1);
    sl_op_router_fwd(tp, ti, tw, ts, F32(c, l, n, e), bias ? F32(c, bias, e) : NULL, norm);
    got(c, "probs", tp);
    got(c, "topk_idx", ti);
    got(c, "topk_w", tw);
    got(c, "stats", ts);
}

static void case_router_bwd(cx *c) {
    static const struct {
        int n, e, k, norm, lbl;
        float z;
    } k_shapes[] = {{1, 1, 1, 0, 0, 0.0f},      {1, 8, 2, 1, 1, 0.1f},   {37, 16, 3, 1, 1, 0.1f},
                    {300, 16, 16, 0, 1, 0.01f}, {65, 33, 5, 1, 0, 0.0f}, {64, 8, 2, 0, 0, 0.1f},
                    {40, 128, 8, 1, 1, 0.01f},  {9, 200, 8, 0, 1, 0.1f}};
    const int64_t n = PICK(c, k_shapes)->n;
    const int e = k_shapes[c->shape].e, k = k_shapes[c->shape].k;
    const bool norm = k_shapes[c->shape].norm;
    const float z = k_shapes[c->shape].z;
    desc(c, "N%lld/E%d/k%d%s%s%s", (long long)n, e, k, norm ? "/norm" : "",
         k_shapes[c->shape].lbl ? "/lbl" : "", z != 0.0f ? "/z" : "");
    /* The forward's outputs, as the backward receives them, from the double router. */
    const float *l = gen_normal(c, n * e, 1.5), *dw = gen_normal(c, n * k, 1.0);
    const float *lbl = k_shapes[c->shape].lbl ? gen_normal(c, e, 0.1) : NULL;
    double *rp = halloc(c, sizeof(double) * (size_t)(n * e));
    double *rw = halloc(c, sizeof(double) * (size_t)(n * k)), lse;
    int32_t *idx = halloc(c, sizeof(int32_t) * (size_t)(n * k));
    int *row_idx = halloc(c, sizeof(int) * (size_t)k);
    for (int64_t r = 0; r < n; r++) {
        sl_ref_router_row(l + r * e, NULL, e, k, norm, rp + r * e, row_idx, rw + r * k, &lse);
        for (int j = 0; j < k; j++) idx[r * k + j] = row_idx[j];
    }
    const float *p = derived(c, rp, n * e, false), *w = derived(c, rw, n * k, false);
    if (!c->be) {
        double *dl = want(c, "dlogits", n * e);
        for (int64_t r = 0; r < n; r++)
            sl_ref_router_bwd_row(dl + r * e, dw + r * k, p + r * e, idx + r * k, w + r * k,
                                  l + r * e, lbl, e, k, z, norm);
        return;
    }
    sl_tensor *td = F32(c, junk(c, n * e), n, e);
    sl_op_router_bwd(td, F32(c, dw, n, k), F32(c, p, n, e), I32(c, idx, n, k), F32(c, w, n, k),
                     F32(c, l, n, e), lbl ? F32(c, lbl, e) : NULL, z, norm);
    got(c, "dlogits", td);
}

static void case_moe_sort(cx *c) {
    static const struct {
        int n, k, e;
    } k_shapes[] = {{1, 1, 1}, {1, 4, 8}, {37, 3, 9}, {1000, 8, 33}, {5, 2, 64}, {600, 8, 300}};
    const int64_t n = PICK(c, k_shapes)->n, k = k_shapes[c->shape].k, e = k_shapes[c->shape].e;
    desc(c, "N%lld/k%lld/E%lld", (long long)n, (long long)k, (long long)e);
    /* Experts in [0, e - 1): the last one stays empty (when there is more than one). */
    const int32_t *topk = gen_ints(c, n * k, 0, e > 1 ? (int32_t)(e - 1) : 1);
    if (!c->be) {
        int32_t *cnt = halloc(c, sizeof(int32_t) * (size_t)e);
        int32_t *st = halloc(c, sizeof(int32_t) * (size_t)(n * k));
        int32_t *sp = halloc(c, sizeof(int32_t) * (size_t)(n * k));
        sl_ref_moe_sort(cnt, st, sp, topk, n, k, e);
        want_i32(c, "counts", cnt, e);
        want_i32(c, "sorted_token", st, n * k);
        want_i32(c, "slot_pos", sp, n * k);
        return;
    }
    sl_tensor *tc = I32(c, junk_i32(c, e), e), *tst = I32(c, junk_i32(c, n * k), n * k);
    sl_tensor *tsp = I32(c, junk_i32(c, n * k), n * k);
    sl_op_moe_sort(tc, tst, tsp, I32(c, topk, n, k));
    got(c, "counts", tc);
    got(c, "sorted_token", tst);
    got(c, "slot_pos", tsp);
}

/* Source rows, m indices (repeated), width, spare destination rows; 2000 x 24 is above the
 * CPU's threading threshold, 0 indices is a rank that received no rows, and 3000 rows need
 * more than one 10-bit radix pass in the CUDA scatter-add's inversion of idx. */
static const struct {
    int rows, m, c, spare;
} k_rows[] = {{1, 1, 1, 0}, {11, 40, 5, 2}, {300, 2000, 24, 0}, {7, 0, 3, 1}, {3000, 2500, 8, 0}};

static void case_gather_rows(cx *c) {
    const int64_t rows = PICK(c, k_rows)->rows, m = k_rows[c->shape].m;
    const int64_t w = k_rows[c->shape].c, dst_rows = m + k_rows[c->shape].spare;
    desc(c, "%lld<-%lldx%lld", (long long)m, (long long)rows, (long long)w);
    const float *src = gen_normal(c, rows * w, 1.0);
    const int32_t *idx = gen_ints(c, m, 0, (int32_t)rows);
    const float *dst0 = junk(c, dst_rows * w);
    if (!c->be) {
        double *dst = want(c, "dst", dst_rows * w);
        for (int64_t i = 0; i < dst_rows * w; i++)
            dst[i] = i < m * w ? src[(int64_t)idx[i / w] * w + i % w] : dst0[i];
        return;
    }
    sl_tensor *td = ACT(c, dst0, dst_rows, w);
    sl_op_gather_rows(td, ACT(c, src, rows, w), I32(c, idx, m));
    got(c, "dst", td);
}

static void case_scatter_add_rows(cx *c) {
    const int64_t rows = PICK(c, k_rows)->rows, m = k_rows[c->shape].m, w = k_rows[c->shape].c;
    desc(c, "%lld->%lldx%lld", (long long)m, (long long)rows, (long long)w);
    const float *src = gen_normal(c, m * w, 1.0), *dst0 = gen_normal(c, rows * w, 1.0);
    const int32_t *idx = gen_ints(c, m, 0, (int32_t)rows);
    if (!c->be) {
        double *dst = want(c, "dst", rows * w);
        for (int64_t i = 0; i < rows * w; i++) dst[i] = dst0[i];
        for (int64_t i = 0; i < m * w; i++) dst[(int64_t)idx[i / w] * w + i % w] += src[i];
        return;
    }
    sl_tensor *td = ACT(c, dst0, rows, w);
    sl_op_scatter_add_rows(td, ACT(c, src, m, w), I32(c, idx, m));
    got(c, "dst", td);
}

/* Tokens n, top-k, width c; extra rows in x (combine only: slot_pos then any row of x, as
 * after capacity dropping, instead of a permutation of the n*k slots). */
static const struct {
    int n, k, c, extra;
} k_comb[] = {{1, 1, 1, 0}, {9, 3, 7, 0}, {500, 4, 40, 0}, {1, 8, 33, 0}, {9, 3, 7, 5}};

static void case_moe_combine(cx *c) {
    const int64_t n = PICK(c, k_comb)->n, k = k_comb[c->shape].k, w = k_comb[c->shape].c;
    const int64_t xr = n * k + k_comb[c->shape].extra;
    desc(c, "N%lld/k%lld/C%lld%s", (long long)n, (long long)k, (long long)w,
         xr > n * k ? "/extra-rows" : "");
    const float *x = gen_normal(c, xr * w, 1.0), *wt = gen_uniform(c, n * k, 0.0, 1.0);
    const int32_t *sp = xr > n * k ? gen_ints(c, n * k, 0, (int32_t)xr) : gen_perm(c, n * k);
    if (!c->be) {
        sl_ref_moe_combine(want(c, "y", n * w), x, sp, wt, n, k, w);
        return;
    }
    sl_tensor *ty = ACT(c, junk(c, n * w), n, w);
    sl_op_moe_combine(ty, ACT(c, x, xr, w), I32(c, sp, n * k), F32(c, wt, n, k));
    got(c, "y", ty);
}

static void case_moe_combine_bwd(cx *c) {
    /* slot_pos must be a permutation here: dx rows no slot points at are left undefined. */
    static const struct {
        int n, k, c;
    } k_shapes[] = {{1, 1, 1}, {9, 3, 7}, {500, 4, 40}, {1, 8, 33}};
    const int64_t n = PICK(c, k_shapes)->n, k = k_shapes[c->shape].k, w = k_shapes[c->shape].c;
    desc(c, "N%lld/k%lld/C%lld", (long long)n, (long long)k, (long long)w);
    const float *x = gen_normal(c, n * k * w, 1.0), *wt = gen_uniform(c, n * k, 0.0, 1.0);
    const float *dy = gen_normal(c, n * w, 1.0);
    const int32_t *sp = gen_perm(c, n * k);
    if (!c->be) {
        double *dx = want(c, "dx", n * k * w), *dw = want(c, "dw", n * k);
        sl_ref_moe_combine_bwd(dx, dw, dy, x, sp, wt, n, k, w);
        return;
    }
    sl_tensor *tdx = ACT(c, junk(c, n * k * w), n * k, w), *tdw = F32(c, junk(c, n * k), n, k);
    sl_op_moe_combine_bwd(tdx, tdw, ACT(c, dy, n, w), ACT(c, x, n * k, w), I32(c, sp, n * k),
                          F32(c, wt, n, k));
    got(c, "dx", tdx);
    got(c, "dw", tdw);
}

static void case_swiglu_fwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t m = sh->rows, w = sh->w;
    const float *gu = gen_normal(c, m * 2 * w, 2.0);
    if (!c->be) {
        sl_ref_swiglu_fwd(want(c, "h", m * w), gu, m, w);
        return;
    }
    sl_tensor *th = ACT(c, junk(c, m * w), m, w);
    sl_op_swiglu_fwd(th, ACT(c, gu, m, 2 * w));
    got(c, "h", th);
}

static void case_swiglu_bwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t m = sh->rows, w = sh->w;
    const float *gu = gen_normal(c, m * 2 * w, 2.0), *dh = gen_normal(c, m * w, 1.0);
    if (!c->be) {
        sl_ref_swiglu_bwd(want(c, "dgu", m * 2 * w), dh, gu, m, w);
        return;
    }
    sl_tensor *tdg = ACT(c, junk(c, m * 2 * w), m, 2 * w);
    sl_op_swiglu_bwd(tdg, ACT(c, dh, m, w), ACT(c, gu, m, 2 * w));
    got(c, "dgu", tdg);
}

static void case_rowgate_fwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t m = sh->rows, w = sh->w;
    const float *x = gen_normal(c, m * w, 1.0), *s = gen_normal(c, m, 2.0);
    if (!c->be) {
        sl_ref_rowgate_fwd(want(c, "y", m * w), x, s, m, w);
        return;
    }
    sl_tensor *ty = ACT(c, junk(c, m * w), m, w);
    sl_op_rowgate_fwd(ty, ACT(c, x, m, w), ACT(c, s, m));
    got(c, "y", ty);
}

static void case_rowgate_bwd(cx *c) {
    const rw_shape *sh = pick_rw(c);
    const int64_t m = sh->rows, w = sh->w;
    const float *x = gen_normal(c, m * w, 1.0), *s = gen_normal(c, m, 2.0);
    const float *dy = gen_normal(c, m * w, 1.0);
    if (!c->be) {
        double *dx = want(c, "dx", m * w), *ds = want(c, "ds", m);
        sl_ref_rowgate_bwd(dx, ds, dy, x, s, m, w);
        return;
    }
    sl_tensor *tdx = ACT(c, junk(c, m * w), m, w), *tds = ACT(c, junk(c, m), m);
    sl_op_rowgate_bwd(tdx, tds, ACT(c, dy, m, w), ACT(c, x, m, w), ACT(c, s, m));
    got(c, "dx", tdx);
    got(c, "ds", tds);
}

/* ---- optimizer --------------------------------------------------------------------------- */

static void case_adamw(cx *c) {
    /* 20000 elements: two of the CPU's 16384-element chunks. */
    static const struct {
        int n, step;
        float grad_scale;
    } k_shapes[] = {{1, 1, 1.0f}, {7, 1, 0.5f}, {20000, 7, 0.5f}, {4099, 100, 1.0f}};
    const int64_t n = PICK(c, k_shapes)->n;
    const sl_adamw_params hp = {.lr = 1e-2f,
                                .beta1 = 0.9f,
                                .beta2 = 0.95f,
                                .eps = 1e-8f,
                                .weight_decay = 0.1f,
                                .grad_scale = k_shapes[c->shape].grad_scale,
                                .step = k_shapes[c->shape].step};
    desc(c, "[%lld]/step%d", (long long)n, hp.step);
    const float *p0 = gen_normal(c, n, 1.0), *g = gen_normal(c, n, 1.0);
    const float *m0 = gen_normal(c, n, 0.01), *v0 = gen_uniform(c, n, 0.0, 1e-3);
    if (!c->be) {
        double *p = want(c, "p", n), *m = want(c, "m", n), *v = want(c, "v", n);
        for (int64_t i = 0; i < n; i++) p[i] = p0[i], m[i] = m0[i], v[i] = v0[i];
        sl_ref_adamw(p, m, v, g, n, &hp);
        double *copy = want(c, "p_copy", n);
        for (int64_t i = 0; i < n; i++) copy[i] = p[i];
        return;
    }
    sl_tensor *tp = F32(c, p0, n), *tm = F32(c, m0, n), *tv = F32(c, v0, n);
    sl_tensor *tcopy = ACT(c, junk(c, n), n);
    sl_op_adamw(tp, F32(c, g, n), tm, tv, tcopy, &hp);
    got(c, "p", tp);
    got(c, "m", tm);
    got(c, "v", tv);
    got(c, "p_copy", tcopy);
}

/* ---- the operation table and the harness ------------------------------------------------- */

typedef struct {
    const char *name;
    size_t off; /* offsetof(sl_ops_i, name) */
    void (*run)(cx *c);
} op_row;

/* One row per sl_ops_i slot: the name, the slot and the case all come from the same token. */
#define OP(field)                                                                                  \
    { #field, offsetof(sl_ops_i, field), case_##field }

static const op_row k_ops[] = {
    OP(fill),
    OP(add),
    OP(axpy),
    OP(scale),
    OP(convert),
    OP(sum),
    OP(sumsq),
    OP(absmax),
    OP(matmul),
    OP(grouped_matmul),
    OP(grouped_matmul_dw),
    OP(rmsnorm_fwd),
    OP(rmsnorm_bwd),
    OP(embedding_fwd),
    OP(embedding_bwd),
    OP(cross_entropy),
    OP(qgate_split),
    OP(qgate_merge),
    OP(rope_fwd),
    OP(rope_bwd),
    OP(gated_attn_fwd),
    OP(gated_attn_bwd),
    OP(sigmoid_mean),
    OP(kv_cache_write),
    OP(gated_attn_decode),
    OP(attn_sink_share),
    OP(router_fwd),
    OP(router_bwd),
    OP(moe_sort),
    OP(gather_rows),
    OP(scatter_add_rows),
    OP(moe_combine),
    OP(moe_combine_bwd),
    OP(swiglu_fwd),
    OP(swiglu_bwd),
    OP(rowgate_fwd),
    OP(rowgate_bwd),
    OP(adamw),
};

typedef void (*any_fn)(void);
enum { NSLOTS = sizeof(sl_ops_i) / sizeof(any_fn) };
_Static_assert(sizeof(sl_ops_i) % sizeof(any_fn) == 0, "sl_ops_i holds only function pointers");

static any_fn slot_of(const sl_ops_i *ops, size_t off) {
    any_fn f;
    memcpy(&f, (const char *)ops + off, sizeof f);
    return f;
}

/* Field names of sl_ops_i in declaration order, read from core/backend_impl.h (every field is
 * `ret (*name)(...)`), so that a slot without a case is reported by its name. Returns how many
 * were read, or -1 when the header is not at hand. */
static int ops_field_names(char names[][40], int max) {
#ifdef SLUICE_SOURCE_DIR
    FILE *f = fopen(SLUICE_SOURCE_DIR "/core/backend_impl.h", "rb");
    if (!f) return -1;
    static char text[1 << 16];
    const size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    const char *p = strstr(text, "typedef struct sl_ops_i {"), *end = strstr(text, "} sl_ops_i;");
    if (!p || !end) return -1;
    int n = 0;
    while ((p = strstr(p, "(*")) && p < end && n < max) {
        p += 2;
        int i = 0;
        while ((p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9')) &&
               i < 39)
            names[n][i] = p[i], i++;
        names[n++][i] = '\0';
    }
    return n;
#else
    (void)names, (void)max;
    return -1;
#endif
}

static const tol *tolerance(const char *op, sl_dtype dt) {
    for (int i = 0; i < NELEM(k_tol); i++)
        if (strcmp(k_tol[i].op, op) == 0) return dt == SL_BF16 ? &k_tol[i].bf16 : &k_tol[i].f32;
    return NULL;
}

/* The rows must cover every slot of sl_ops_i exactly once, each with a tolerance row. */
static bool check_coverage(void) {
    int hits[NSLOTS] = {0};
    char names[NSLOTS + 16][40];
    const int nnames = ops_field_names(names, NSLOTS + 16);
    const int before = sl_test_failures;
    if (nnames >= 0)
        CHECK(nnames == NSLOTS,
              "read %d fields of sl_ops_i from core/backend_impl.h, sizeof says %d", nnames,
              (int)NSLOTS);
    for (int r = 0; r < NELEM(k_ops); r++) {
        const size_t slot = k_ops[r].off / sizeof(any_fn);
        hits[slot]++;
        if (nnames > (int)slot)
            CHECK(strcmp(names[slot], k_ops[r].name) == 0,
                  "slot %zu: header says %s, table says %s", slot, names[slot], k_ops[r].name);
        CHECK(tolerance(k_ops[r].name, SL_F32) != NULL, "no tolerance row for %s", k_ops[r].name);
    }
    for (int s = 0; s < NSLOTS; s++)
        CHECK(hits[s] == 1, "sl_ops_i slot %d (%s) has %d conformance cases, expected exactly 1", s,
              nnames > s ? names[s] : "name unknown", hits[s]);
    for (int i = 0; i < NELEM(k_tol); i++) {
        bool used = false;
        for (int r = 0; r < NELEM(k_ops); r++) used |= strcmp(k_ops[r].name, k_tol[i].op) == 0;
        CHECK(used, "tolerance row %s names no operation", k_tol[i].op);
    }
    return sl_test_failures == before;
}

static void run_case(cx *c, const op_row *op, sl_backend *be, sl_dtype act, sl_dtype rnd,
                     int shape) {
    memset(c, 0, sizeof *c);
    c->be = be, c->act = act, c->round_to = rnd, c->shape = shape, c->setup_ok = true;
    c->rng = 0x5eed0000ULL + 1000ULL * (uint64_t)(op - k_ops) + (uint64_t)shape;
    op->run(c);
    if (be) sl_backend_synchronize(be);
}

static void release(cx *c) {
    for (int i = 0; i < c->ntensors; i++) sl_tensor_free(c->tensors[i]);
    for (int i = 0; i < c->nhost; i++) free(c->host[i]);
    free(c->host);
    for (int i = 0; i < c->nout; i++) free(c->out[i].v);
}

/* Worst |got - want| / (atol + rtol |want|) over an output (exact outputs: 0 or infinity). */
static double out_error(const output *g, const output *w, const tol *t, int64_t *at, double *abs) {
    double worst = 0.0;
    *at = -1, *abs = 0.0;
    for (int64_t i = 0; i < g->n; i++) {
        const double d = fabs(g->v[i] - w->v[i]), lim = t->atol + t->rtol * fabs(w->v[i]);
        const double e = d == 0.0 ? 0.0 : g->exact || lim == 0.0 ? INFINITY : d / lim;
        if (!(d <= *abs)) *abs = isnan(d) ? INFINITY : d;
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, *at = i;
    }
    return worst;
}

typedef struct {
    sl_backend *test, *ref; /* ref NULL: the naive references */
    sl_dtype dt;
    bool require_all, verbose;
} run_cfg;

typedef enum { OP_OK, OP_FAILED, OP_MISSING } op_result;

/* Runs every shape of one operation and prints its summary line. */
static op_result run_op(const op_row *op, const run_cfg *cfg) {
    const tol *t = tolerance(op->name, cfg->dt);
    if (!slot_of(cfg->test->ops, op->off)) {
        printf("%-5s not implemented: %s\n", cfg->require_all ? "FAIL" : "--", op->name);
        CHECK(!cfg->require_all, "%s: not implemented by backend '%s' (all operations required)",
              op->name, sl_backend_name(cfg->test));
        return OP_MISSING;
    }
    if (cfg->ref && !slot_of(cfg->ref->ops, op->off)) {
        printf("FAIL  %s: the CPU reference does not implement it\n", op->name);
        CHECK(false, "%s: missing from the CPU reference", op->name);
        return OP_FAILED;
    }
    char shapes[512] = "", worst_at[256] = "";
    double worst = 0.0;
    bool ok = true;
    int nshapes = 1;
    for (int s = 0; s < nshapes; s++) {
        cx got_c, ref_c;
        run_case(&got_c, op, cfg->test, cfg->dt, cfg->dt, s);
        run_case(&ref_c, op, cfg->ref, SL_F32, cfg->dt, s);
        nshapes = got_c.nshapes;
        snprintf(shapes + strlen(shapes), sizeof shapes - strlen(shapes), "%s%s", s ? " " : "",
                 got_c.desc);
        ok &= got_c.setup_ok && ref_c.setup_ok;
        CHECK(got_c.setup_ok && ref_c.setup_ok, "%s %s: test setup precondition failed", op->name,
              got_c.desc);
        CHECK(got_c.nout == ref_c.nout, "%s %s: %d outputs, reference %d", op->name, got_c.desc,
              got_c.nout, ref_c.nout);
        for (int o = 0; o < got_c.nout && o < ref_c.nout; o++) {
            const output *g = &got_c.out[o], *w = &ref_c.out[o];
            if (strcmp(g->name, w->name) != 0 || g->n != w->n) {
                CHECK(false, "%s %s: output %s [%lld] vs reference %s [%lld]", op->name, got_c.desc,
                      g->name, (long long)g->n, w->name, (long long)w->n);
                ok = false;
                continue;
            }
            int64_t at;
            double abs_err;
            const double e = out_error(g, w, t, &at, &abs_err);
            if (cfg->verbose)
                printf("      %-17s %-28s %-12s max |err| %.3g  err/tol %.3g\n", op->name,
                       got_c.desc, g->name, abs_err, e);
            if (!(e <= worst)) { /* e > 0, so `at` is set */
                worst = isnan(e) ? INFINITY : e;
                snprintf(worst_at, sizeof worst_at, "%s %s[%lld]: got %.9g, want %.9g", got_c.desc,
                         g->name, (long long)at, g->v[at], w->v[at]);
            }
        }
        release(&got_c);
        release(&ref_c);
    }
    ok &= worst <= 1.0;
    printf("%-5s %-17s err/tol %-9.3g (%s atol %g rtol %g)  %d shapes: %s\n", ok ? "OK" : "FAIL",
           op->name, worst, sl_dtype_name(cfg->dt), t->atol, t->rtol, nshapes, shapes);
    if (worst > 1.0) printf("      worst: %s\n", worst_at);
    CHECK(ok, "%s on backend '%s' (%s) does not match the reference", op->name,
          sl_backend_name(cfg->test), sl_dtype_name(cfg->dt));
    return ok ? OP_OK : OP_FAILED;
}

/* The one place that obtains backends (the registry call may be renamed). */
static sl_backend *make_backend(const char *name, char *err, size_t errlen) {
    const sl_backend_params p = {.threads = 2, .device = -1};
    return sl_backend_create(name, &p, err, errlen);
}

static bool env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* summary lines and CHECK messages in order in logs */
    run_cfg cfg = {.dt = SL_F32};
    const char *name = getenv("SLUICE_TEST_BACKEND"), *dt = getenv("SLUICE_TEST_DTYPE");
    if (!name || !*name) name = "cpu";
    cfg.require_all = env_flag("SLUICE_TEST_REQUIRE_ALL");
    cfg.verbose = env_flag("SLUICE_TEST_VERBOSE");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--require-all") == 0)
            cfg.require_all = true;
        else
            name = argv[i];
    }
    if (dt && *dt && strcmp(dt, "f32") != 0) {
        if (strcmp(dt, "bf16") != 0) {
            fprintf(stderr, "SLUICE_TEST_DTYPE must be f32 or bf16, not '%s'\n", dt);
            return 2;
        }
        cfg.dt = SL_BF16;
    }
    if (!check_coverage()) return sl_test_finish("test_backend_ops");

    char err[256] = "";
    cfg.test = make_backend(name, err, sizeof err);
    if (!cfg.test) {
        /* A backend this build or machine lacks (cuda without a GPU) is skipped; the CPU
         * always exists. */
        printf("%s: %s\n", strcmp(name, "cpu") == 0 ? "FAIL" : "SKIP", err);
        return strcmp(name, "cpu") == 0 ? 1 : 77;
    }
    const bool on_cpu = strcmp(sl_backend_name(cfg.test), "cpu") == 0;
    if (on_cpu && cfg.dt != SL_F32) {
        fprintf(stderr, "the CPU backend computes in f32 only (SLUICE_TEST_DTYPE=%s)\n", dt);
        return 2;
    }
    cfg.require_all |= on_cpu; /* the reference must be complete */
    if (!on_cpu && !(cfg.ref = make_backend("cpu", err, sizeof err))) {
        fprintf(stderr, "cannot create the CPU reference: %s\n", err);
        return 1;
    }
    printf("backend under test: %s (%s); reference: %s; all operations required: %s\n", name,
           sl_dtype_name(cfg.dt), on_cpu ? "naive double loops (tests/ref_ops.c)" : "cpu",
           cfg.require_all ? "yes" : "no");
    int count[3] = {0};
    for (int r = 0; r < NELEM(k_ops); r++) count[run_op(&k_ops[r], &cfg)]++;
    printf("%d operations: %d OK, %d failed, %d not implemented\n", NELEM(k_ops), count[OP_OK],
           count[OP_FAILED], count[OP_MISSING]);
    sl_backend_free(cfg.ref);
    sl_backend_free(cfg.test);
    return sl_test_finish("test_backend_ops");
}
