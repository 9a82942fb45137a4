/*
 * bench/attn_bench_check.c - attn_bench --check and --check-rows (bench/attn_bench.h): one
 * forward and backward on the backend under test against a reference, output by output.
 *
 * --check: every element, against the CPU backend's kernel in f32 (inputs rounded to --dtype,
 * so both compute on the same values), or, for the CPU backend itself, against the bench's own
 * double loops (bench/attn_bench_ref.c). Their cost grows with S^2: at S = 131,072 the CPU
 * would take hours.
 * --check-rows N: N query rows and N key rows (sample_rows), each against double-precision sums
 * over its own keys or queries (attn_ref_query_row, attn_ref_key_row): O(N S D) work, so the
 * kernels can be checked at the longest sequences they train on.
 * Per output it prints the largest absolute error, the largest |reference|, err/norm with norm =
 * max(max |reference|, 1) (an output whose reference is all near zero, like dq and dk at seq 1,
 * is compared absolutely: the inputs are standard normal, so the outputs are O(1)), the
 * tolerance on err/norm (k_tol), then PASS or FAIL.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "bench/attn_bench.h"
#include "bench/attn_bench_ref.h"
#include "core/log.h"

/* Tolerance on max |err| / max(max |ref|, 1) per output, by dtype (bench/README.md has the
 * measurements). f32: the worst measured is 1.1e-6 (CPU against its double loops, the emulated
 * CUDA kernel against the CPU), so 1e-4 leaves room for any fp32 accumulation order. bf16: both
 * sides start from the same bf16-rounded inputs; the device stores y, o, dq, dk, dv, dg in bf16
 * (2^-9 relative each) and its backward reads the bf16 o; the worst measured is 4.2e-3 (SIMT
 * kernel), and 2e-2 also covers a tensor-core kernel's bf16 P operand. */
static const struct { double f32, bf16; } k_tol = {1e-4, 2e-2};

const char *const ab_outputs[AB_N_OUT] = {"y", "o", "lse", "dq", "dk", "dv", "dg"};

/* Host copies of every input as the backend holds them (rounded to its dtype). */
typedef struct {
    float *q, *k, *v, *g, *dy;
} host_inputs;

static void host_inputs_free(host_inputs *h) {
    free(h->q), free(h->k), free(h->v), free(h->g), free(h->dy);
}

/* Uploads host inputs into a set of the same shape (the reference's). */
static void upload_inputs(ab_set *a, const host_inputs *h) {
    sl_tensor_from_host(a->q, h->q);
    sl_tensor_from_host(a->k, h->k);
    sl_tensor_from_host(a->v, h->v);
    if (a->g) sl_tensor_from_host(a->g, h->g);
    sl_tensor_from_host(a->dy, h->dy);
}

static double *to_double(const float *x, int64_t n) {
    double *d = sl_xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* The output tensors in ab_outputs order (dg NULL without a gate). */
static void outputs_of(const ab_set *a, const sl_tensor *out[AB_N_OUT]) {
    const sl_tensor *o[AB_N_OUT] = {a->y, a->o, a->lse, a->dq, a->dk, a->dv, a->dg};
    memcpy(out, o, sizeof o);
}

/* The shape as the double-precision reference (bench/attn_bench_ref.h) takes it. */
static attn_ref_dims ref_dims(const ab_options *o, const ab_set *a, const int32_t *seg) {
    const ab_shape *s = &a->s;
    return (attn_ref_dims){
        s->batch, s->seq, s->heads, s->kv, s->d, o->gate, 1.0 / sqrt((double)s->d), seg};
}

/* The CPU backend's outputs for inputs h (rounded to the dtype under test, so both sides
 * compute on the same values) as doubles into ref (n[i] each; none for an absent output). */
static int cpu_reference(const ab_options *o, const ab_set *a, const host_inputs *h,
                         const int32_t *seg, const int64_t n[AB_N_OUT], double *ref[AB_N_OUT]) {
    char err[512];
    sl_backend_params bp = {.threads = 0, .device = -1};
    sl_backend *cpu = sl_backend_create("cpu", &bp, err, sizeof err);
    if (!cpu) {
        fprintf(stderr, "attn_bench: the reference backend cpu: %s\n", err);
        return -1;
    }
    ab_set r;
    ab_set_create(&r, cpu, SL_F32, &a->s, o->gate, seg);
    upload_inputs(&r, h);
    ab_forward(&r);
    ab_backward(&r);
    const sl_tensor *out[AB_N_OUT];
    outputs_of(&r, out);
    for (int i = 0; i < AB_N_OUT; i++) {
        if (!out[i]) continue;
        float *f = sl_xmalloc(sizeof(float) * (size_t)n[i]);
        ab_download(&r, out[i], f);
        ref[i] = to_double(f, n[i]);
        free(f);
    }
    ab_set_free(&r);
    sl_backend_free(cpu);
    return 0;
}

/* The reference values an output is compared at: elements at[0 .. n) (at NULL: 0 .. n). */
typedef struct {
    int64_t n, *at;
    double *val;
} ref_values;

static void ref_values_free(ref_values *r) {
    free(r->at), free(r->val);
    memset(r, 0, sizeof *r);
}

/* Fills out[AB_N_OUT] with the whole reference for inputs h, every element of every output
 * (none where absent). */
static int reference(const ab_options *o, const ab_set *a, const host_inputs *h, const int32_t *seg,
                     ref_values out[AB_N_OUT]) {
    const ab_shape *s = &a->s;
    const int64_t n[AB_N_OUT] = {a->nq, a->nq, a->t * s->heads, a->nq, a->nk, a->nk, a->ng};
    double *ref[AB_N_OUT] = {0};
    if (strcmp(o->backend, "cpu") == 0) {
        for (int i = 0; i < AB_N_OUT; i++)
            if (n[i]) ref[i] = sl_xmalloc(sizeof(double) * (size_t)n[i]);
        const attn_ref_dims d = ref_dims(o, a, seg);
        attn_ref_fwd(&d, h->q, h->k, h->v, h->g, ref[0], ref[1], ref[2]);
        attn_ref_bwd(&d, h->dy, h->q, h->k, h->v, h->g, ref[1], ref[2], ref[3], ref[4], ref[5],
                     ref[6]);
    } else if (cpu_reference(o, a, h, seg, n, ref) != 0) {
        return -1;
    }
    for (int i = 0; i < AB_N_OUT; i++)
        out[i] = (ref_values){.n = ref[i] ? n[i] : 0, .at = NULL, .val = ref[i]};
    return 0;
}

/* --check-rows N: N query rows and N key rows, (sequence, position, head) spread over the
 * problem: the first (0, 0, 0), which holds element 0 of every output (where --corrupt
 * perturbs), the last the final position of the last sequence, the rest evenly spaced with an
 * odd jitter (so that they fall at different offsets within the kernels' tiles), heads in a
 * stride coprime to the usual head counts. */
static void sample_rows(int n, const ab_shape *s, int heads, attn_ref_row *rows) {
    for (int r = 0; r < n; r++) {
        const int64_t even = n > 1 ? (int64_t)r * (s->seq - 1) / (n - 1) : 0;
        int64_t i = even + (r > 0 && r < n - 1 ? (r * 37) % 61 - 30 : 0);
        i = i < 0 ? 0 : i >= s->seq ? s->seq - 1 : i;
        const int b = r > 0 && r == n - 1 ? s->batch - 1 : r % s->batch;
        rows[r] = (attn_ref_row){.b = b, .i = (int)i, .h = (r * 7) % heads};
    }
}

/* The reference at the sampled rows, in double (bench/attn_bench_ref.h): query rows from the
 * inputs alone; key rows with the lse and o of the backend under test (lse_dev, o_dev). */
static void sampled_reference(const ab_options *o, const ab_set *a, const host_inputs *h,
                              const int32_t *seg, const float *lse_dev, const float *o_dev,
                              ref_values out[AB_N_OUT]) {
    const ab_shape *s = &a->s;
    const int n = o->check_rows, D = s->d, H = s->heads, KV = s->kv;
    const attn_ref_dims d = ref_dims(o, a, seg);
    attn_ref_row *qr = sl_xmalloc(sizeof *qr * (size_t)n), *kr = sl_xmalloc(sizeof *kr * (size_t)n);
    sample_rows(n, s, H, qr);
    sample_rows(n, s, KV, kr);
    const int dgw = o->gate == SL_GATE_ELEMENTWISE ? D : 1; /* gate columns per row */
    const int64_t per_row[AB_N_OUT] = {D, D, 1, D, D, D, a->g ? dgw : 0};
    for (int i = 0; i < AB_N_OUT; i++) {
        const int64_t m = per_row[i] * n;
        out[i] = (ref_values){.n = m,
                              .at = m ? sl_xmalloc(sizeof(int64_t) * (size_t)m) : NULL,
                              .val = m ? sl_xmalloc(sizeof(double) * (size_t)m) : NULL};
    }
    float *dout = sl_xmalloc(sizeof(float) * (size_t)a->nq);
    double *di = sl_xmalloc(sizeof(double) * (size_t)(a->t * H));
    attn_ref_dout(&d, h->g, h->dy, o_dev, dout, di);
#pragma omp parallel for schedule(dynamic)
    for (int r = 0; r < 2 * n; r++) {
        if (r < n) { /* query row r: y, o, lse, dq, dg */
            const attn_ref_row w = qr[r];
            const int64_t th = ((int64_t)w.b * s->seq + w.i) * H + w.h;
            attn_ref_query_row(&d, w, h->q, h->k, h->v, h->g, h->dy, out[0].val + r * D,
                               out[1].val + r * D, out[2].val + r, out[3].val + r * D,
                               a->g ? out[6].val + r * dgw : NULL);
            for (int e = 0; e < D; e++)
                out[0].at[r * D + e] = out[1].at[r * D + e] = out[3].at[r * D + e] = th * D + e;
            out[2].at[r] = th;
            for (int e = 0; a->g && e < dgw; e++) out[6].at[r * dgw + e] = th * dgw + e;
        } else { /* key row r - n: dk, dv */
            const int k = r - n;
            const attn_ref_row w = kr[k];
            const int64_t tk = ((int64_t)w.b * s->seq + w.i) * KV + w.h;
            attn_ref_key_row(&d, w, h->q, h->k, h->v, dout, di, lse_dev, out[4].val + k * D,
                             out[5].val + k * D);
            for (int e = 0; e < D; e++) out[4].at[k * D + e] = out[5].at[k * D + e] = tk * D + e;
        }
    }
    free(qr), free(kr);
    free(dout), free(di);
}

int ab_check_shape(const ab_options *o, ab_set *a, const int32_t *seg) {
    host_inputs h = {0};
    h.q = sl_xmalloc(sizeof(float) * (size_t)a->nq), h.dy = sl_xmalloc(sizeof(float) * a->nq);
    h.k = sl_xmalloc(sizeof(float) * (size_t)a->nk), h.v = sl_xmalloc(sizeof(float) * a->nk);
    if (a->g) h.g = sl_xmalloc(sizeof(float) * (size_t)a->ng);
    ab_download(a, a->q, h.q), ab_download(a, a->k, h.k), ab_download(a, a->v, h.v);
    ab_download(a, a->dy, h.dy);
    if (a->g) ab_download(a, a->g, h.g);
    ab_forward(a);
    ab_backward(a);
    sl_backend_synchronize(sl_tensor_backend(a->q));
    ref_values ref[AB_N_OUT];
    if (o->check_rows) {
        float *lse = sl_xmalloc(sizeof(float) * (size_t)(a->t * a->s.heads));
        float *out_o = sl_xmalloc(sizeof(float) * (size_t)a->nq);
        ab_download(a, a->lse, lse), ab_download(a, a->o, out_o);
        sampled_reference(o, a, &h, seg, lse, out_o, ref);
        free(lse), free(out_o);
    } else if (reference(o, a, &h, seg, ref) != 0) {
        host_inputs_free(&h);
        return -1;
    }
    const sl_tensor *out[AB_N_OUT];
    outputs_of(a, out);
    const double tol = o->dt == SL_BF16 ? k_tol.bf16 : k_tol.f32;
    int failed = 0;
    printf("%-4s %12s %12s %12s %10s  %s\n", "out", "max|err|", "max|ref|", "err/norm", "tol",
           "result");
    for (int i = 0; i < AB_N_OUT; i++) {
        if (!out[i]) continue;
        const int64_t n = sl_tensor_numel(out[i]);
        float *got = sl_xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
        ab_download(a, out[i], got);
        const ref_values *r = &ref[i];
        double max_ref = 0.0, max_err = 0.0;
        for (int64_t m = 0; m < r->n; m++)
            if (fabs(r->val[m]) > max_ref) max_ref = fabs(r->val[m]);
        if (o->corrupt && strcmp(o->corrupt, ab_outputs[i]) == 0 && n > 0)
            got[0] += (float)(4.0 * tol * (max_ref > 0 ? max_ref : 1.0));
        for (int64_t m = 0; m < r->n; m++) {
            const double e = fabs((double)got[r->at ? r->at[m] : m] - r->val[m]);
            if (!(e <= max_err)) max_err = isnan(e) ? INFINITY : e; /* NaN counts as a failure */
        }
        /* an output whose reference is all near zero (dq and dk when every query sees one key)
         * is compared absolutely: the inputs are O(1), so its errors are too */
        const double ratio = max_err / (max_ref > 1.0 ? max_ref : 1.0);
        const bool ok = ratio <= tol;
        failed += !ok;
        printf("%-4s %12.4g %12.4g %12.4g %10.3g  %s\n", ab_outputs[i], max_err, max_ref, ratio,
               tol, ok ? "PASS" : "FAIL");
        free(got);
    }
    for (int i = 0; i < AB_N_OUT; i++) ref_values_free(&ref[i]);
    host_inputs_free(&h);
    const char *against = o->check_rows ? "double-precision sums at the sampled rows"
                          : strcmp(o->backend, "cpu") == 0 ? "the bench's double-precision loops"
                                                           : "the cpu backend in f32";
    printf("check: %s (%s against %s; norm = max(max|ref|, 1))\n", failed ? "FAIL" : "PASS",
           o->backend, against);
    if (o->check_rows)
        printf("sampled: %d query rows (y, o, lse, dq, dg), %d key rows (dk, dv; with this "
               "backend's lse and o)\n",
               o->check_rows, o->check_rows);
    return failed ? 1 : 0;
}
