/*
 * bench/adamw_bench.c - AdamW's memory rate against what the memory system gives the same
 * streams (issue 23). On an H200 on 2026-11-26 the optimizer row took 54.0 ms per step: 3.50
 * TB/s of its 30 bytes per parameter, 83% of the 4.2 TB/s device copy rate (docs/performance.md,
 * "AdamW"). Either AdamW's eight streams (p, g, m, v read; p, m, v and the bf16 copy written)
 * get no more from the memory than that, and only fewer bytes would help, or the kernel leaves
 * bandwidth unused. This tells which, in one process on the CUDA backend:
 *   - each form of trainer/adamw.cu (coalesced, the default; plain; stream; wide) over one
 *     parameter tensor of N elements with a bf16 compute copy, 30 bytes per parameter;
 *   - "streams": coalesced's loads and stores without the arithmetic (each store takes another
 *     operand's loaded value; not AdamW's results), the rate of AdamW's memory traffic alone;
 *   - "copy": an fp32 tensor copied (sl_op_convert of one dtype: cudaMemcpyAsync device to
 *     device, as sluice doctor's copy rate), 8 bytes per element: the two-stream rate.
 * Each is timed between two sl_backend_synchronize calls over --reps calls after two warm-up
 * calls; the median is printed, in ms and TB/s of the row's bytes, and as one JSON line.
 *
 * usage: adamw_bench [--params N] [--reps R] [--rows LIST] [--device-fill] [--check]
 *   --params N  parameters (default 268435456: 7.5 GiB of operands)
 *   --reps R    timed calls per row (default 10)
 *   --rows LIST the rows to time, comma-separated, in the order above (default all six)
 *   --device-fill  constant operands written on the device (p 0.5, g 0.01, m 0, v 1e-4)
 *               instead of pseudo-random ones made on the host: at the 9-layer step's 6.3B
 *               parameters (113 GiB of operands; gpu_check part adamw_full) the host's values
 *               would take minutes. The rates do not depend on the values.
 *   --check     no timing: from the same state, one call of every form; the four AdamW forms
 *               must give the same bits (p, m, v and the copy), "streams" must not (so the
 *               switch reaches the kernel) and must leave v holding m's old values (in the
 *               whole 16-byte units; the few elements past them take AdamW's arithmetic).
 * Exit 77 without a CUDA device (the forms are the CUDA backend's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "backends/backends.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "trainer/kernels_cuda.h"

enum { FORMS = 5, WARMUP = 2 };
static const char *const k_forms[FORMS] = {"coalesced", "plain", "stream", "wide", "streams"};

typedef struct {
    int64_t params;
    int reps;
    bool check, device_fill;
    bool row[FORMS + 1]; /* the forms, then "copy" */
} opts;

/* The row's index (k_forms, then FORMS for "copy"), or -1. */
static int row_index(const char *name, size_t len) {
    for (int f = 0; f <= FORMS; f++) {
        const char *n = f < FORMS ? k_forms[f] : "copy";
        if (strlen(n) == len && !strncmp(n, name, len)) return f;
    }
    return -1;
}

/* --rows LIST into o->row; false (with a message) for an unknown or empty name. */
static bool parse_rows(const char *list, opts *o) {
    memset(o->row, 0, sizeof o->row);
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const int f = row_index(p, len);
        if (f < 0) {
            fprintf(stderr,
                    "adamw_bench: --rows: unknown row '%.*s' (coalesced, plain, stream, wide, "
                    "streams, copy)\n",
                    (int)len, p);
            return false;
        }
        o->row[f] = true;
        if (!end) return true;
        p = end + 1;
    }
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: adamw_bench [--params N] [--reps R] [--rows LIST] [--device-fill] [--check]\n"
            "  --params N     parameters (default 268435456)\n"
            "  --reps R       timed calls per row (default 10)\n"
            "  --rows LIST    rows to time, comma-separated: coalesced, plain, stream, wide,\n"
            "                 streams, copy (default all)\n"
            "  --device-fill  constant operands written on the device, not random ones from\n"
            "                 the host (for billions of parameters)\n"
            "  --check        the forms' results compared instead of timed\n");
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.params = 268435456, .reps = 10, .check = false, .device_fill = false};
    for (int f = 0; f <= FORMS; f++) o->row[f] = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--check"))
            o->check = true;
        else if (!strcmp(a, "--device-fill"))
            o->device_fill = true;
        else if (!strcmp(a, "--rows") && i + 1 < argc) {
            if (!parse_rows(argv[++i], o)) return 1;
        } else if (!strcmp(a, "--params") && i + 1 < argc)
            o->params = strtoll(argv[++i], NULL, 10);
        else if (!strcmp(a, "--reps") && i + 1 < argc)
            o->reps = atoi(argv[++i]);
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "adamw_bench: unknown or incomplete option '%s'\n", a);
            return 1;
        }
    }
    if (o->params < 1 || o->reps < 1) {
        fprintf(stderr, "adamw_bench: --params and --reps must be positive\n");
        return 1;
    }
    return 0;
}

/* The optimizer's operands for one tensor of n parameters. */
typedef struct {
    sl_tensor *p, *g, *m, *v, *copy;
} state;

/* Deterministic values of every operand (v >= 0, as AdamW's second moment is); with
 * device_fill, constants written on the device. */
static void fill(const state *s, int64_t n, bool device_fill) {
    if (device_fill) {
        sl_op_fill(s->p, 0.5f), sl_op_fill(s->g, 0.01f), sl_op_fill(s->m, 0.0f);
        sl_op_fill(s->v, 1e-4f);
        sl_op_convert(s->copy, s->p);
        return;
    }
    float *h = malloc(sizeof(float) * (size_t)n);
    sl_tensor *const ts[4] = {s->p, s->g, s->m, s->v};
    for (int t = 0; t < 4; t++) {
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
        for (int64_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            const float u = (float)(x >> 40) / (float)(1 << 24) - 0.5f;
            h[i] = t == 3 ? u * u * 1e-4f : u * (t == 1 ? 1e-2f : 1.0f);
        }
        sl_tensor_from_host(ts[t], h);
    }
    free(h);
    sl_op_convert(s->copy, s->p);
}

static const sl_adamw_params k_hp = {.lr = 1e-4f,
                                     .beta1 = 0.9f,
                                     .beta2 = 0.95f,
                                     .eps = 1e-8f,
                                     .weight_decay = 0.1f,
                                     .grad_scale = 1.0f,
                                     .step = 3};

static void adamw(const state *s) {
    sl_op_adamw(s->p, s->g, s->m, s->v, s->copy, &k_hp);
}

/* The median seconds of `reps` calls of form f (a name of trainer/adamw.cu, or "copy"). */
static double time_row(sl_backend *be, const state *s, sl_tensor *dst, const char *f, int reps) {
    const bool copy = !strcmp(f, "copy");
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int r = -WARMUP; r < reps; r++) {
        sl_backend_synchronize(be);
        const double t0 = sl_bench_now();
        if (copy)
            sl_op_convert(dst, s->p);
        else
            adamw(s);
        sl_backend_synchronize(be);
        if (r >= 0) t[r] = sl_bench_now() - t0;
    }
    const double med = sl_bench_median(t, reps);
    free(t);
    return med;
}

/* The host copy of tensor x (n elements of 4 bytes, or 2 for the bf16 copy). */
static void *host_of(const sl_tensor *x, size_t bytes) {
    void *h = malloc(bytes);
    sl_tensor_to_host(x, h);
    return h;
}

/* --check: every form once from the same state; the AdamW forms' four results bitwise equal. */
static int check(const state *s, int64_t n) {
    const size_t fb = sizeof(float) * (size_t)n, cb = 2 * (size_t)n;
    /* the bytes of the whole 16-byte units: the elements past them go through AdamW's
     * arithmetic in every form (the kernel's tail) */
    const size_t units = sizeof(float) * (size_t)(n / 4 * 4);
    void *first[4] = {NULL, NULL, NULL, NULL};
    void *m_before = NULL;
    int fails = 0;
    for (int f = 0; f < FORMS; f++) {
        fill(s, n, false);
        if (f == FORMS - 1) m_before = host_of(s->m, fb);
        if (!sl_cuda_adamw_set_form(k_forms[f])) {
            printf("FAIL: form %s unknown to trainer/adamw.cu\n", k_forms[f]);
            return 1;
        }
        adamw(s);
        void *got[4] = {host_of(s->p, fb), host_of(s->m, fb), host_of(s->v, fb),
                        host_of(s->copy, cb)};
        if (f == 0) {
            memcpy(first, got, sizeof first);
            continue;
        }
        int same = 0;
        for (int i = 0; i < 4; i++) same += !memcmp(first[i], got[i], i == 3 ? cb : fb);
        if (f < FORMS - 1 && same != 4) {
            printf("FAIL: form %s differs from coalesced in %d of p, m, v, copy\n", k_forms[f],
                   4 - same);
            fails++;
        } else if (f == FORMS - 1 && (same == 4 || memcmp(got[2], m_before, units) != 0)) {
            printf("FAIL: form streams did not reach the kernel (same results as AdamW: %d of 4; v "
                   "holds m's old values: %s)\n",
                   same, memcmp(got[2], m_before, units) ? "no" : "yes");
            fails++;
        } else
            printf("OK   form %-9s %s\n", k_forms[f],
                   f < FORMS - 1 ? "the same bits as coalesced" : "its own results, as meant");
        for (int i = 0; i < 4; i++) free(got[i]);
    }
    for (int i = 0; i < 4; i++) free(first[i]);
    free(m_before);
    sl_cuda_adamw_set_form("coalesced");
    return fails ? 1 : 0;
}

int main(int argc, char **argv) {
    opts o;
    if (parse(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    char err[512];
    sl_backend_params bp = {.threads = 0, .device = -1, .allow_nondeterministic = false};
    sl_backend *be = sl_backend_create("cuda", &bp, err, sizeof err);
    if (!be) {
        fprintf(stderr, "adamw_bench: backend cuda: %s\n", err);
        return 77;
    }
    const int64_t n = o.params;
    state s = {sl_tensor_new1(be, SL_F32, n), sl_tensor_new1(be, SL_F32, n),
               sl_tensor_new1(be, SL_F32, n), sl_tensor_new1(be, SL_F32, n),
               sl_tensor_new1(be, SL_BF16, n)};
    int rc = 0;
    if (o.check) {
        rc = check(&s, n);
    } else {
        /* the copy row's destination only where it runs (at the step's size it would not fit) */
        sl_tensor *dst = o.row[FORMS] ? sl_tensor_new1(be, SL_F32, n) : NULL;
        fill(&s, n, o.device_fill);
        printf("adamw_bench: %lld parameters (fp32 p, g, m, v and a bf16 copy: 30 bytes each); "
               "median of %d calls after %d\n",
               (long long)n, o.reps, WARMUP);
        printf("%-10s %10s %9s  %s\n", "row", "median ms", "TB/s", "what");
        for (int f = 0; f <= FORMS; f++) {
            if (!o.row[f]) continue;
            const char *name = f < FORMS ? k_forms[f] : "copy";
            if (f < FORMS) sl_cuda_adamw_set_form(name);
            const double bytes = (f < FORMS ? 30.0 : 8.0) * (double)n;
            const double sec = time_row(be, &s, dst, name, o.reps);
            const char *what = f < FORMS - 1 ? "AdamW"
                               : f == FORMS - 1
                                   ? "AdamW's loads and stores, no arithmetic (not AdamW's results)"
                                   : "fp32 copy, device to device (8 bytes per element)";
            printf("%-10s %10.3f %9.3f  %s\n", name, sec * 1e3, bytes / sec / 1e12, what);
            printf("{\"row\": \"%s\", \"params\": %lld, \"bytes\": %.0f, \"ms\": %.6g, "
                   "\"tbps\": %.6g}\n",
                   name, (long long)n, bytes, sec * 1e3, bytes / sec / 1e12);
        }
        sl_cuda_adamw_set_form("coalesced");
        sl_tensor_free(dst);
    }
    sl_tensor *const ts[5] = {s.p, s.g, s.m, s.v, s.copy};
    for (int i = 0; i < 5; i++) sl_tensor_free(ts[i]);
    sl_backend_free(be);
    return rc;
}
