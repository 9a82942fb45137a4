/*
 * moe/grouped_matmul_cpu.c - one GEMM per expert group (OpenBLAS cblas_sgemm, fp32).
 *
 * The rows of A/C (or dY/X for the weight gradient) are `groups` consecutive blocks of
 * counts[g] rows; group g multiplies with B_g = B[g] ([R, S]). Each group is exactly one
 * cblas_sgemm, never a loop over tokens.
 *
 * Threading. Expert groups are many (4..128) and uneven (a few to a few hundred rows), so
 * two strategies compete:
 *   - serial over groups, each GEMM threaded by OpenBLAS over all cores: good for a few large
 *     groups, but a small GEMM cannot use many threads and pays a fork/join per group;
 *   - OpenMP over groups (dynamic schedule, largest first), each GEMM single-threaded (the
 *     OpenMP build of OpenBLAS runs single-threaded inside a parallel region): no per-group
 *     synchronization, but a group larger than a thread's fair share stalls the others.
 * AUTO mixes them: a group whose work exceeds total/threads cannot be balanced at group
 * level, so those groups run first, one at a time with threaded GEMMs; all other groups then
 * run in one parallel region over groups. bench/grouped_gemm_bench.c measures the three.
 *
 * Determinism: each output element is written by exactly one GEMM of a fixed shape, so the
 * result does not depend on the strategy or the schedule.
 */
#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/kernels_cpu.h" /* sl_cpu_sumsq_f64 */
#include "moe/kernels_cpu.h"

static sl_ggemm_mode g_mode = SL_GGEMM_AUTO;

void sl_cpu_grouped_matmul_set_mode(sl_ggemm_mode mode) {
    g_mode = mode;
}

/* One row-major sgemm: C [m, n] = op(A) op(B) + beta C. */
typedef struct {
    CBLAS_TRANSPOSE ta, tb;
    int m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
    float beta;
    double work; /* m * n * k */
} gemm_task;

static void run_task(const gemm_task *t) {
    cblas_sgemm(CblasRowMajor, t->ta, t->tb, t->m, t->n, t->k, 1.0f, t->a, t->lda, t->b, t->ldb,
                t->beta, t->c, t->ldc);
}

static int by_work_desc(const void *pa, const void *pb) {
    const gemm_task *a = pa, *b = pb;
    if (a->work != b->work) return a->work > b->work ? -1 : 1;
    return a->c < b->c ? -1 : (a->c > b->c); /* stable tie order: by output address */
}

static void run_tasks(gemm_task *tasks, int nt) {
    if (nt == 0) return;
    const int threads = omp_get_max_threads();
    sl_ggemm_mode mode = g_mode;
    if (threads <= 1 || nt == 1 || omp_in_parallel()) mode = SL_GGEMM_SERIAL_GROUPS;
    if (mode == SL_GGEMM_SERIAL_GROUPS) {
        for (int i = 0; i < nt; i++) run_task(&tasks[i]);
        return;
    }
    qsort(tasks, (size_t)nt, sizeof *tasks, by_work_desc);
    int first_small = 0;
    if (mode == SL_GGEMM_AUTO) {
        double total = 0.0;
        for (int i = 0; i < nt; i++) total += tasks[i].work;
        const double share = total / threads;
        while (first_small < nt && tasks[first_small].work > share) first_small++;
        for (int i = 0; i < first_small; i++) run_task(&tasks[i]); /* threaded GEMMs */
    }
    const int rest = nt - first_small;
    if (rest == 1) run_task(&tasks[first_small]);
    if (rest <= 1) return;
#pragma omp parallel for schedule(dynamic, 1) num_threads(rest < threads ? rest : threads)
    for (int i = first_small; i < nt; i++) run_task(&tasks[i]);
}

static int to_int(int64_t v, const char *what) {
    SL_CHECK(v >= 0 && v <= INT_MAX, "cpu grouped_matmul: %s %lld does not fit a BLAS int", what,
             (long long)v);
    return (int)v;
}

bool sl_cpu_grouped_counts_on_device(void *ctx, sl_dtype dt, int64_t r, int64_t s, int groups) {
    (void)ctx, (void)dt, (void)r, (void)s, (void)groups;
    return true;
}

/* The counts as a host array: the given one, or the I32 tensor's (this backend's tensors are
 * host memory), checked against the rows the caller promised; *own is what to free. */
static const int64_t *host_counts(const sl_group_counts *k, int groups, int64_t **own) {
    *own = NULL;
    if (k->host) return k->host;
    const int32_t *d = (const int32_t *)k->dev->data;
    int64_t *h = sl_xmalloc(sizeof(int64_t) * (size_t)(groups > 0 ? groups : 1)), n = 0;
    for (int g = 0; g < groups; g++) {
        SL_CHECK(d[g] >= 0, "cpu grouped_matmul: device count %d of group %d", d[g], g);
        n += h[g] = d[g];
    }
    SL_CHECK(n == k->rows, "cpu grouped_matmul: the device counts sum to %lld rows, not %lld",
             (long long)n, (long long)k->rows);
    return *own = h;
}

void sl_cpu_grouped_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                           const sl_group_counts *k, int groups, bool trans_b, float beta) {
    (void)ctx;
    SL_CHECK(c->dtype == SL_F32 && a->dtype == SL_F32 && b->dtype == SL_F32,
             "cpu grouped_matmul: only f32 is supported");
    const int64_t r = b->shape[1], s = b->shape[2];
    const int64_t in = trans_b ? s : r, out = trans_b ? r : s;
    if (out == 0) return;
    int64_t *own;
    const int64_t *counts = host_counts(k, groups, &own);
    gemm_task *tasks = sl_xmalloc(sizeof(gemm_task) * (size_t)(groups > 0 ? groups : 1));
    int nt = 0;
    int64_t row0 = 0;
    for (int g = 0; g < groups; row0 += counts[g], g++) {
        if (counts[g] == 0) continue;
        gemm_task *t = &tasks[nt++];
        t->ta = CblasNoTrans;
        t->tb = trans_b ? CblasTrans : CblasNoTrans;
        t->m = to_int(counts[g], "group rows");
        t->n = to_int(out, "output width");
        t->k = to_int(in, "input width");
        t->a = sl_f32(a) + row0 * in;
        t->lda = t->k;
        t->b = sl_f32(b) + (int64_t)g * r * s;
        t->ldb = to_int(s, "B row width");
        t->c = sl_f32(c) + row0 * out;
        t->ldc = t->n;
        t->beta = beta;
        t->work = (double)t->m * (double)t->n * (double)t->k;
    }
    run_tasks(tasks, nt);
    free(tasks);
    free(own);
}

/* sumsq += the squares of dW (a pass over it after the GEMMs: the CPU fuses nothing here) */
static void add_sumsq(sl_tensor *sumsq, const sl_tensor *dw) {
    if (sumsq) sl_f32(sumsq)[0] += (float)sl_cpu_sumsq_f64(sl_f32(dw), dw->numel);
}

void sl_cpu_grouped_matmul_dw(void *ctx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                              const sl_group_counts *k, int groups, float beta, sl_tensor *sumsq) {
    (void)ctx;
    SL_CHECK(dw->dtype == SL_F32 && dy->dtype == SL_F32 && x->dtype == SL_F32,
             "cpu grouped_matmul_dw: only f32 is supported");
    const int64_t r = dw->shape[1], s = dw->shape[2];
    if (r == 0 || s == 0) return;
    int64_t *own;
    const int64_t *counts = host_counts(k, groups, &own);
    gemm_task *tasks = sl_xmalloc(sizeof(gemm_task) * (size_t)(groups > 0 ? groups : 1));
    int nt = 0;
    int64_t row0 = 0;
    for (int g = 0; g < groups; row0 += counts[g], g++) {
        if (counts[g] == 0) { /* dW_g = beta dW_g (beta 0: zeros, whatever dW_g held) */
            float *w = sl_f32(dw) + (int64_t)g * r * s;
            if (beta == 0.0f)
                memset(w, 0, sizeof(float) * (size_t)(r * s));
            else if (beta != 1.0f)
                for (int64_t i = 0; i < r * s; i++) w[i] *= beta;
            continue;
        }
        gemm_task *t = &tasks[nt++];
        /* dW_g [R, S] = dY_g^T [R, n_g] X_g [n_g, S] + beta dW_g */
        t->ta = CblasTrans;
        t->tb = CblasNoTrans;
        t->m = to_int(r, "R");
        t->n = to_int(s, "S");
        t->k = to_int(counts[g], "group rows");
        t->a = sl_f32(dy) + row0 * r;
        t->lda = t->m;
        t->b = sl_f32(x) + row0 * s;
        t->ldb = t->n;
        t->c = sl_f32(dw) + (int64_t)g * r * s;
        t->ldc = t->n;
        t->beta = beta;
        t->work = (double)t->m * (double)t->n * (double)t->k;
    }
    run_tasks(tasks, nt);
    free(tasks);
    free(own);
    add_sumsq(sumsq, dw);
}

/* One pass per segment, in the order the micro-batches would run them one by one: the CPU's
 * deferred weight gradient is bitwise the immediate one (moe/experts.h). */
void sl_cpu_grouped_matmul_dw_segments(void *ctx, sl_tensor *dw, const sl_dw_segment *segs,
                                       int nseg, int groups, float beta, sl_tensor *sumsq) {
    for (int i = 0; i < nseg; i++)
        sl_cpu_grouped_matmul_dw(ctx, dw, segs[i].dy, segs[i].x, &segs[i].counts, groups,
                                 i == 0 ? beta : 1.0f, i == nseg - 1 ? sumsq : NULL);
}

/* The GEMM, then the activation over the routed rows: the two ops' results, bit for bit. */
void sl_cpu_grouped_matmul_swiglu(void *ctx, sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                  const sl_tensor *b, const sl_group_counts *counts, int groups) {
    sl_cpu_grouped_matmul(ctx, gu, a, b, counts, groups, true, 0.0f);
    if (counts->rows == 0) return;
    sl_tensor hv = sl_head_rows(h, counts->rows), gv = sl_head_rows(gu, counts->rows);
    sl_cpu_swiglu_fwd(ctx, &hv, &gv);
}
