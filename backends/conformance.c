/*
 * backends/conformance.c - the conformance harness (conformance.h): the tolerance table, the
 * operation table and the comparison. The cases are in conformance_core.c, conformance_attn.c
 * and conformance_moe.c.
 */
#include <stddef.h>

#include "backends/conformance_impl.h"
#include "core/backend_impl.h"

/* ---- tolerances: the one table ------------------------------------------------------------
 * Outputs that are sums in an order a backend may choose (marked by their case with
 * sum_bound: sum, sumsq, the GEMMs, the scatter-adds, RMSNorm's dw) also pass within the bound
 * derived from their terms (out_error), whichever is larger.
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
    {"grouped_counts_on_device", {1e-5, 1e-5}, {3e-2, 2e-2}}, /* grouped GEMMs, device counts */
    {"grouped_matmul", {1e-5, 1e-5}, {3e-2, 2e-2}},
    {"grouped_matmul_dw", {1e-5, 1e-5}, {3e-2, 2e-2}},
    {"grouped_matmul_dw_segments", {1e-5, 1e-5}, {3e-2, 2e-2}},
    /* gu exact (dyadic inputs, conformance_grouped.c), h the activation's roundings alone */
    {"grouped_matmul_swiglu", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"rmsnorm_fwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"rmsnorm_bwd", {5e-5, 1e-5}, {2e-2, 2e-2}}, /* dw sums over rows */
    {"embedding_fwd", {0, 0}, {0, 0}},
    {"embedding_bwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"cross_entropy", {1e-5, 1e-5}, {1e-2, 1e-2}},
    {"qgate_split", {0, 0}, {0, 0}},
    {"qgate_merge", {0, 0}, {0, 0}},
    {"rope_fwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    {"rope_bwd", {1e-6, 1e-5}, {1e-2, 1e-2}},
    /* the norm, then the rotation: two of the rows above in sequence */
    {"qk_norm_rope_fwd", {2e-6, 2e-5}, {2e-2, 2e-2}},
    {"qk_norm_rope_bwd", {5e-5, 2e-5}, {2e-2, 2e-2}}, /* dw sums over rows */
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
    {"moe_counts", {0, 1e-7}, {0, 1e-7}}, /* acc exact (i32); freq one fp32 product */
    {"gather_rows", {0, 0}, {0, 0}},
    {"scatter_add_rows", {2e-6, 1e-5}, {1e-2, 1e-2}},
    {"gather_add_rows", {2e-6, 1e-5}, {1e-2, 1e-2}},
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

/* ---- the operation table ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    size_t off; /* offsetof(sl_ops_i, name) */
    void (*run)(cx *c);
} op_row;

/* One row per sl_ops_i slot: the name, the slot and the case all come from the same token. */
#define OP(field)                                                                                  \
    { #field, offsetof(sl_ops_i, field), sl_conf_case_##field }

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
    OP(grouped_counts_on_device),
    OP(grouped_matmul),
    OP(grouped_matmul_dw),
    OP(grouped_matmul_dw_segments),
    OP(grouped_matmul_swiglu),
    OP(rmsnorm_fwd),
    OP(rmsnorm_bwd),
    OP(embedding_fwd),
    OP(embedding_bwd),
    OP(cross_entropy),
    OP(qgate_split),
    OP(qgate_merge),
    OP(rope_fwd),
    OP(rope_bwd),
    OP(qk_norm_rope_fwd),
    OP(qk_norm_rope_bwd),
    OP(gated_attn_fwd),
    OP(gated_attn_bwd),
    OP(sigmoid_mean),
    OP(kv_cache_write),
    OP(gated_attn_decode),
    OP(attn_sink_share),
    OP(router_fwd),
    OP(router_bwd),
    OP(moe_sort),
    OP(moe_counts),
    OP(gather_rows),
    OP(scatter_add_rows),
    OP(gather_add_rows),
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

static const tol *tolerance(const char *op, sl_dtype dt) {
    for (int i = 0; i < NELEM(k_tol); i++)
        if (strcmp(k_tol[i].op, op) == 0) return dt == SL_BF16 ? &k_tol[i].bf16 : &k_tol[i].f32;
    return NULL;
}

int sl_conformance_count(void) {
    return NELEM(k_ops);
}

const char *sl_conformance_name(int i) {
    return i >= 0 && i < NELEM(k_ops) ? k_ops[i].name : NULL;
}

int sl_conformance_find(const char *name) {
    for (int i = 0; i < NELEM(k_ops); i++)
        if (strcmp(k_ops[i].name, name) == 0) return i;
    return -1;
}

/* Appends one problem line to err. */
static void problem(char *err, size_t errlen, bool *ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void problem(char *err, size_t errlen, bool *ok, const char *fmt, ...) {
    *ok = false;
    const size_t at = strlen(err);
    if (at + 1 >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + at, errlen - at, fmt, ap);
    va_end(ap);
    const size_t end = strlen(err);
    if (end + 1 < errlen) err[end] = '\n', err[end + 1] = '\0';
}

bool sl_conformance_coverage(char header_names[][40], int nnames, char *err, size_t errlen) {
    bool ok = true;
    int hits[NSLOTS] = {0};
    err[0] = '\0';
    if (header_names && nnames != NSLOTS)
        problem(err, errlen, &ok,
                "read %d fields of sl_ops_i from core/backend_impl.h, sizeof says %d", nnames,
                (int)NSLOTS);
    for (int r = 0; r < NELEM(k_ops); r++) {
        const size_t slot = k_ops[r].off / sizeof(any_fn);
        hits[slot]++;
        if (header_names && nnames > (int)slot && strcmp(header_names[slot], k_ops[r].name) != 0)
            problem(err, errlen, &ok, "slot %zu: header says %s, table says %s", slot,
                    header_names[slot], k_ops[r].name);
        if (!tolerance(k_ops[r].name, SL_F32))
            problem(err, errlen, &ok, "no tolerance row for %s", k_ops[r].name);
    }
    for (int s = 0; s < NSLOTS; s++)
        if (hits[s] != 1)
            problem(err, errlen, &ok,
                    "sl_ops_i slot %d (%s) has %d conformance cases, expected exactly 1", s,
                    header_names && nnames > s ? header_names[s] : "name unknown", hits[s]);
    for (int i = 0; i < NELEM(k_tol); i++) {
        bool used = false;
        for (int r = 0; r < NELEM(k_ops); r++) used |= strcmp(k_ops[r].name, k_tol[i].op) == 0;
        if (!used) problem(err, errlen, &ok, "tolerance row %s names no operation", k_tol[i].op);
    }
    return ok;
}

/* ---- running and comparing ------------------------------------------------------------------ */

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
    for (int i = 0; i < c->nout; i++) free(c->out[i].v), free(c->out[i].mag), free(c->out[i].terms);
}

static double gamma_k(double k, double u) {
    return k * u < 0.5 ? k * u / (1.0 - k * u) : INFINITY;
}

/* Worst |got - want| / bound over an output (exact outputs: 0 or infinity). The bound is the
 * tolerance row's atol + rtol |want|, or for a sum (sum_bound, either side's annotation) the
 * larger of that and 2 gamma(k) sum |term| plus both outputs' roundings: the reference's fp32
 * (2^-24 |want|) and the tested output's, 2^-24 |want| in fp32 or 2^-8 |want| in bf16 (2^-9
 * rounding of a value itself within 2^-9 of want). */
static double out_error(const output *g, const output *w, const tol *t, int64_t *at, double *abs) {
    double worst = 0.0;
    *at = -1, *abs = 0.0;
    const output *s = w->mag ? w : g->mag ? g : NULL;
    const double u_out = g->bf16 ? ldexp(1.0, -8) : ldexp(1.0, -24);
    for (int64_t i = 0; i < g->n; i++) {
        const double d = fabs(g->v[i] - w->v[i]);
        double lim = t->atol + t->rtol * fabs(w->v[i]);
        if (s && !g->exact) {
            const double derived = 2.0 * gamma_k(s->terms[i], s->u) * s->mag[i] +
                                   (u_out + ldexp(1.0, -24)) * fabs(w->v[i]);
            if (derived > lim) lim = derived;
        }
        const double e = d == 0.0 ? 0.0 : g->exact || lim == 0.0 ? INFINITY : d / lim;
        if (!(d <= *abs)) *abs = isnan(d) ? INFINITY : d;
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, *at = i;
    }
    return worst;
}

sl_conf_result sl_conformance_run(int i, const sl_conformance_cfg *cfg) {
    sl_conf_result res = {.status = SL_CONF_OK};
    SL_CHECK(i >= 0 && i < NELEM(k_ops), "conformance: no operation %d", i);
    const op_row *op = &k_ops[i];
    const tol *t = tolerance(op->name, cfg->dt);
    FILE *out = cfg->out;
    if (!slot_of(cfg->test->ops, op->off)) {
        if (out)
            fprintf(out, "%-5s not implemented: %s\n", cfg->require_all ? "FAIL" : "--", op->name);
        snprintf(res.why, sizeof res.why, "not implemented by backend '%s'",
                 sl_backend_name(cfg->test));
        res.status = SL_CONF_MISSING;
        return res;
    }
    if (cfg->ref && !slot_of(cfg->ref->ops, op->off)) {
        if (out) fprintf(out, "FAIL  %s: the CPU reference does not implement it\n", op->name);
        snprintf(res.why, sizeof res.why, "missing from the CPU reference");
        res.status = SL_CONF_FAILED;
        return res;
    }
    const bool perturb = cfg->perturb && strcmp(cfg->perturb, op->name) == 0;
    char shapes[512] = "";
    bool ok = true;
    int nshapes = 1;
    for (int s = 0; s < nshapes; s++) {
        cx got_c, ref_c;
        run_case(&got_c, op, cfg->test, cfg->dt, cfg->dt, s);
        run_case(&ref_c, op, cfg->ref, SL_F32, cfg->dt, s);
        nshapes = got_c.nshapes;
        res.shapes = nshapes;
        snprintf(shapes + strlen(shapes), sizeof shapes - strlen(shapes), "%s%s", s ? " " : "",
                 got_c.desc);
        if (perturb && got_c.nout > 0 && got_c.out[0].n > 0)
            got_c.out[0].v[0] += 1.0 + fabs(got_c.out[0].v[0]);
        if (!got_c.setup_ok || !ref_c.setup_ok) {
            ok = false;
            snprintf(res.why, sizeof res.why, "%s: test setup precondition failed", got_c.desc);
        }
        if (got_c.nout != ref_c.nout) {
            ok = false;
            snprintf(res.why, sizeof res.why, "%s: %d outputs, reference %d", got_c.desc,
                     got_c.nout, ref_c.nout);
        }
        for (int o = 0; o < got_c.nout && o < ref_c.nout; o++) {
            const output *g = &got_c.out[o], *w = &ref_c.out[o];
            if (strcmp(g->name, w->name) != 0 || g->n != w->n) {
                snprintf(res.why, sizeof res.why, "%s: output %s [%lld] vs reference %s [%lld]",
                         got_c.desc, g->name, (long long)g->n, w->name, (long long)w->n);
                ok = false;
                continue;
            }
            int64_t at;
            double abs_err;
            const double e = out_error(g, w, t, &at, &abs_err);
            if (cfg->verbose && out)
                fprintf(out, "      %-17s %-28s %-12s max |err| %.3g  err/tol %.3g%s\n", op->name,
                        got_c.desc, g->name, abs_err, e, g->mag || w->mag ? " (sum bound)" : "");
            if (!(e <= res.worst)) { /* e > 0, so `at` is set */
                res.worst = isnan(e) ? INFINITY : e;
                snprintf(res.worst_at, sizeof res.worst_at, "%s %s[%lld]: got %.9g, want %.9g",
                         got_c.desc, g->name, (long long)at, g->v[at], w->v[at]);
            }
        }
        release(&got_c);
        release(&ref_c);
    }
    ok &= res.worst <= 1.0;
    res.status = ok ? SL_CONF_OK : SL_CONF_FAILED;
    if (out) {
        fprintf(out, "%-5s %-17s err/tol %-9.3g (%s atol %g rtol %g)  %d shapes: %s\n",
                ok ? "OK" : "FAIL", op->name, res.worst, sl_dtype_name(cfg->dt), t->atol, t->rtol,
                nshapes, shapes);
        if (res.worst > 1.0) fprintf(out, "      worst: %s\n", res.worst_at);
        if (res.why[0]) fprintf(out, "      %s\n", res.why);
    }
    return res;
}
