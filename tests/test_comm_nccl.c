/*
 * tests/test_comm_nccl.c - every call of the NCCL transport against the MPI transport on the
 * same data.
 *
 *   mpirun -np N test_comm_nccl
 *
 * Each rank makes the same pseudo-random inputs (seeded by rank and case) twice: as CPU-backend
 * tensors that go through the MPI world communicator (the reference), and as CUDA-backend
 * tensors that go through the NCCL world built on it. Data movement (all-gather of uneven and
 * even segments, both all-to-alls with zero counts and the self exchange, broadcast) must be
 * bitwise equal; fp32 sums (reduce-scatter also against sums computed here) within 1e-6 (NCCL may
 * add in another order), bf16 sums within the bound of one bf16 rounding per partial sum (NCCL
 * rounds to bf16 after every step). Sub-groups (split by parity) and a host tensor handed to the
 * NCCL communicator are covered too; the grouped exchange with rows of several widths and dtypes
 * and more than 64 (peer, group) blocks, blocking and through sl_comm_ialltoallv_grouped. Skips
 * (77) where there is no CUDA backend, and on a real machine with fewer GPUs than ranks (NCCL
 * refuses two ranks on one device, "Duplicate GPU detected"); in the emulated build every rank
 * has a device of its own (tests/parallel.cmake: SLUICE_EMU_DEVICES), so a shared one fails.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm_nccl.h"
#include "core/ops.h"
#include "core/placement.h"
#include "core/tensor.h"
#include "tests/test_util.h"

static sl_backend *g_cpu, *g_gpu;

/* Rank-and-case dependent values in [-1, 1). */
static float *make(int rank, int seed, int64_t n) {
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    uint64_t s = (uint64_t)seed * 7919u + (uint64_t)rank * 104729u + 1;
    for (int64_t i = 0; i < n; i++) h[i] = (float)(2.0 * sl_test_rand_unif(&s) - 1.0);
    return h;
}

/* Compares host floats: |a - b| <= tol (|b| + 1), the 1 standing for the summands' magnitude
 * (inputs lie in [-1, 1), so a sum that cancels is still judged by its rounding); tol < 0:
 * bitwise. */
static void compare(const char *what, const float *a, const float *b, int64_t n, double tol) {
    double worst = 0.0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        const double lim = tol < 0 ? 0.0 : tol * (fabs((double)b[i]) + 1.0);
        /* !(d <= x): a NaN on either side is a difference, never a match */
        if (!(d <= lim) && bad < 0) bad = i;
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    CHECK(bad < 0, "%s: element %lld is %.9g, the reference gives %.9g (largest difference %.3g)",
          what, (long long)bad, bad >= 0 ? a[bad] : 0.0, bad >= 0 ? b[bad] : 0.0, worst);
}

/* The NCCL result (host floats of a device tensor) against the MPI one (a CPU tensor). */
static void compare_tensors(const char *what, const sl_tensor *dev, const sl_tensor *ref,
                            double tol) {
    float *a = sl_test_host_floats(dev), *b = sl_test_host_floats(ref);
    compare(what, a, b, sl_tensor_numel(ref), tol);
    free(a), free(b);
}

static void case_allreduce(sl_comm *mpi, sl_comm *nc, const char *tag) {
    const int rank = sl_comm_rank(mpi), size = sl_comm_size(mpi);
    const int64_t n = 1000 + 17;
    float *h = make(rank, 1, n);
    char what[96];
    /* fp32, blocking */
    sl_tensor *r = sl_test_ftensor(g_cpu, SL_F32, n, 1, h);
    sl_tensor *d = sl_test_ftensor(g_gpu, SL_F32, n, 1, h);
    sl_comm_allreduce_sum(mpi, r);
    sl_comm_allreduce_sum(nc, d);
    snprintf(what, sizeof what, "%s allreduce f32", tag);
    compare_tensors(what, d, r, 1e-6);
    /* fp32, started, tested, waited; then a kernel on the compute stream reads the result */
    sl_tensor *d2 = sl_test_ftensor(g_gpu, SL_F32, n, 1, h);
    sl_comm_request *q = sl_comm_iallreduce_sum(nc, d2);
    for (int spins = 0; !sl_comm_test(q) && spins < 1000000; spins++) {
    }
    sl_comm_wait(q);
    sl_op_scale(d2, 2.0f);
    sl_op_scale(r, 2.0f);
    snprintf(what, sizeof what, "%s iallreduce f32 then scale", tag);
    compare_tensors(what, d2, r, 1e-6);
    /* bf16: the reference sums the same bf16 values in fp32 */
    float *hb = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) hb[i] = sl_test_bf16_round(h[i]);
    sl_tensor *rb = sl_test_ftensor(g_cpu, SL_F32, n, 1, hb);
    sl_tensor *db = sl_test_ftensor(g_gpu, SL_BF16, n, 1, hb);
    sl_comm_allreduce_sum(mpi, rb);
    sl_comm_allreduce_sum(nc, db);
    snprintf(what, sizeof what, "%s allreduce bf16", tag);
    /* partial sum k (magnitude <= k) is rounded to bf16, at most 2^-9 k each */
    compare_tensors(what, db, rb, (size * (size + 1) / 2.0 - 1.0) / 512.0);
    /* a host tensor handed to the NCCL communicator goes over its MPI side */
    sl_tensor *rh = sl_test_ftensor(g_cpu, SL_F32, n, 1, h);
    sl_tensor *rh2 = sl_test_ftensor(g_cpu, SL_F32, n, 1, h);
    sl_comm_allreduce_sum(nc, rh);
    sl_comm_wait(sl_comm_iallreduce_sum(nc, rh2));
    rb = sl_test_ftensor(g_cpu, SL_F32, n, 1, h);
    sl_comm_allreduce_sum(mpi, rb);
    snprintf(what, sizeof what, "%s allreduce of a host tensor", tag);
    compare_tensors(what, rh, rb, -1);
    compare_tensors(what, rh2, rb, -1);
    free(h), free(hb);
    sl_test_release();
}

static void case_allgather(sl_comm *mpi, sl_comm *nc, const char *tag, bool even) {
    const int rank = sl_comm_rank(mpi), size = sl_comm_size(mpi);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)size * 2), *cnt = off + size, total = 5;
    for (int p = 0; p < size; p++) {
        cnt[p] = even ? 33 : (p == 1 ? 0 : 10 + 7 * p); /* rank 1's segment is empty */
        off[p] = total;
        total += cnt[p];
    }
    total += 3; /* elements outside every segment stay as they are */
    float *h = make(rank, 2, total);
    sl_tensor *r = sl_test_ftensor(g_cpu, SL_F32, total, 1, h);
    sl_tensor *d = sl_test_ftensor(g_gpu, SL_F32, total, 1, h);
    sl_comm_allgather_segments(mpi, r, off, cnt);
    sl_comm_allgather_segments(nc, d, off, cnt);
    char what[96];
    snprintf(what, sizeof what, "%s allgather_segments (%s)", tag, even ? "even" : "uneven");
    compare_tensors(what, d, r, -1);
    free(h), free(off);
    sl_test_release();
}

/* Reduce-scatter of consecutive segments (even: one ncclReduceScatter; uneven with an empty
 * segment: grouped ncclReduce) through both transports, non-blocking, against the sum of every
 * rank's inputs computed here (make() is a function of rank and seed). Only the rank's own
 * segment is defined afterwards. bf16 on the NCCL side against the fp32 sum of the same bf16
 * values. */
static void case_reduce_scatter(sl_comm *mpi, sl_comm *nc, const char *tag, bool even) {
    const int rank = sl_comm_rank(mpi), size = sl_comm_size(mpi);
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)size), total = 0, mine = 0;
    for (int p = 0; p < size; p++) {
        cnt[p] = even ? 29 : (p == size - 1 && size > 1 ? 0 : 9 + 5 * p);
        if (p < rank) mine += cnt[p];
        total += cnt[p];
    }
    float *want = calloc((size_t)total, sizeof(float)),
          *wantb = calloc((size_t)total, sizeof(float));
    for (int p = 0; p < size; p++) {
        float *hp = make(p, 3, total);
        for (int64_t i = 0; i < total; i++) {
            want[i] += hp[i];
            wantb[i] += sl_test_bf16_round(hp[i]);
        }
        free(hp);
    }
    float *h = make(rank, 3, total), *hb = malloc(sizeof(float) * (size_t)total);
    for (int64_t i = 0; i < total; i++) hb[i] = sl_test_bf16_round(h[i]);
    sl_tensor *r = sl_test_ftensor(g_cpu, SL_F32, total, 1, h);
    sl_tensor *d = sl_test_ftensor(g_gpu, SL_F32, total, 1, h);
    sl_tensor *db = sl_test_ftensor(g_gpu, SL_BF16, total, 1, hb);
    sl_comm_request *q[3] = {sl_comm_ireduce_scatter_sum(mpi, r, cnt),
                             sl_comm_ireduce_scatter_sum(nc, d, cnt),
                             sl_comm_ireduce_scatter_sum(nc, db, cnt)};
    for (int spins = 0; !sl_comm_test(q[1]) && spins < 1000000; spins++) {
    }
    for (int k = 0; k < 3; k++) sl_comm_wait(q[k]);
    const char *names[3] = {"mpi", "nccl", "nccl bf16"};
    const sl_tensor *got[3] = {r, d, db};
    for (int k = 0; k < 3; k++) {
        float *a = sl_test_host_floats(got[k]);
        char what[128];
        snprintf(what, sizeof what, "%s reduce_scatter %s (%s), segment of rank %d", tag, names[k],
                 even ? "even" : "uneven", rank);
        compare(what, a + mine, (k == 2 ? wantb : want) + mine, cnt[rank],
                k == 2 ? (size * (size + 1) / 2.0 - 1.0) / 512.0 : 1e-6);
        free(a);
    }
    free(h), free(hb), free(want), free(wantb), free(cnt);
    sl_test_release();
}

/* Rows rank `from` sends to rank `to` for group g: zero for some pairs (and groups). */
static int64_t rows_of(int from, int to, int g, int seed) {
    const int v = (from * 7 + to * 3 + g * 5 + seed) % 6;
    return v == 0 ? 0 : v + from;
}

static void case_alltoallv(sl_comm *mpi, sl_comm *nc, const char *tag, sl_dtype dt) {
    const int rank = sl_comm_rank(mpi), size = sl_comm_size(mpi);
    const int64_t W = 5;
    int64_t *sr = malloc(sizeof(int64_t) * (size_t)size * 2), *rr = sr + size, st = 0, rt = 0;
    for (int p = 0; p < size; p++) {
        sr[p] = rows_of(rank, p, 0, 1);
        rr[p] = rows_of(p, rank, 0, 1);
        st += sr[p];
        rt += rr[p];
    }
    float *h = make(rank, 3, (st + 1) * W), *z = make(rank + 100, 4, (rt + 2) * W);
    if (dt == SL_BF16)
        for (int64_t i = 0; i < (st + 1) * W; i++) h[i] = sl_test_bf16_round(h[i]);
    if (dt == SL_BF16)
        for (int64_t i = 0; i < (rt + 2) * W; i++) z[i] = sl_test_bf16_round(z[i]);
    sl_tensor *rs = sl_test_ftensor(g_cpu, SL_F32, st + 1, W, h);
    sl_tensor *rr_t = sl_test_ftensor(g_cpu, SL_F32, rt + 2, W, z);
    sl_tensor *ds = sl_test_ftensor(g_gpu, dt, st + 1, W, h);
    sl_tensor *dr = sl_test_ftensor(g_gpu, dt, rt + 2, W, z);
    sl_comm_alltoallv_rows(mpi, rs, sr, rr_t, rr);
    sl_comm_alltoallv_rows(nc, ds, sr, dr, rr);
    char what[96];
    snprintf(what, sizeof what, "%s alltoallv_rows %s", tag, dt == SL_BF16 ? "bf16" : "f32");
    compare_tensors(what, dr, rr_t, -1);
    free(h), free(z), free(sr);
    sl_test_release();
}

/* G groups of rows W wide in dtype dt: the regrouping kernel (core/comm_rows.cu) moves rows in
 * 16-, 4- or 2-byte words by the width, and takes 64 blocks (peer, group) per launch. async:
 * through sl_comm_ialltoallv_grouped (MPI: done when it returns; NCCL: joined by the wait). */
static void case_grouped(sl_comm *mpi, sl_comm *nc, const char *tag, bool scatter, sl_dtype dt,
                         int64_t W, int G, bool async) {
    const int rank = sl_comm_rank(mpi), size = sl_comm_size(mpi);
    /* scatter: this rank sends peer p rows_of(me, p, g) rows for p's group g (flat, groups
     * one after another) and receives rows_of(p, me, g) into its block g; the gather is the
     * reverse exchange (the combine after the experts) */
    int64_t *flat = malloc(sizeof(int64_t) * (size_t)size * (size_t)(G + 1)),
            *grouped = flat + size, ft = 0, gt = 0;
    for (int p = 0; p < size; p++) {
        flat[p] = 0;
        for (int g = 0; g < G; g++) {
            flat[p] += scatter ? rows_of(rank, p, g, 2) : rows_of(p, rank, g, 2);
            grouped[p * G + g] = scatter ? rows_of(p, rank, g, 2) : rows_of(rank, p, g, 2);
            gt += grouped[p * G + g];
        }
        ft += flat[p];
    }
    const int64_t srows = (scatter ? ft : gt) + 1, drows = (scatter ? gt : ft) + 2;
    float *h = make(rank, 5, srows * W), *z = make(rank + 50, 6, drows * W);
    if (dt == SL_BF16)
        for (int64_t i = 0; i < srows * W; i++) h[i] = sl_test_bf16_round(h[i]);
    if (dt == SL_BF16)
        for (int64_t i = 0; i < drows * W; i++) z[i] = sl_test_bf16_round(z[i]);
    sl_tensor *rs = sl_test_ftensor(g_cpu, SL_F32, srows, W, h);
    sl_tensor *rd = sl_test_ftensor(g_cpu, SL_F32, drows, W, z);
    sl_tensor *ds = sl_test_ftensor(g_gpu, dt, srows, W, h);
    sl_tensor *dd = sl_test_ftensor(g_gpu, dt, drows, W, z);
    if (async) {
        sl_comm_request *rq = sl_comm_ialltoallv_grouped(mpi, rs, rd, flat, grouped, G, scatter);
        CHECK(sl_comm_test(rq) == 1, "%s ialltoallv_grouped: the MPI request is not done", tag);
        sl_comm_request *dq = sl_comm_ialltoallv_grouped(nc, ds, dd, flat, grouped, G, scatter);
        sl_comm_test(dq); /* may or may not be done yet; must not disturb the wait */
        sl_comm_wait(dq);
        sl_comm_wait(rq);
    } else {
        sl_comm_alltoallv_grouped(mpi, rs, rd, flat, grouped, G, scatter);
        sl_comm_alltoallv_grouped(nc, ds, dd, flat, grouped, G, scatter);
    }
    char what[128];
    snprintf(what, sizeof what, "%s %salltoallv_grouped (%s, %s, width %lld, %d groups)", tag,
             async ? "i" : "", scatter ? "scatter" : "gather", dt == SL_BF16 ? "bf16" : "f32",
             (long long)W, G);
    compare_tensors(what, dd, rd, -1);
    free(h), free(z), free(flat);
    sl_test_release();
}

static void case_broadcast(sl_comm *mpi, sl_comm *nc, const char *tag) {
    const int rank = sl_comm_rank(mpi), size = sl_comm_size(mpi);
    float *h = make(rank, 7, 77);
    sl_tensor *r = sl_test_ftensor(g_cpu, SL_F32, 77, 1, h);
    sl_tensor *d = sl_test_ftensor(g_gpu, SL_F32, 77, 1, h);
    sl_comm_broadcast(mpi, r, size - 1);
    sl_comm_broadcast(nc, d, size - 1);
    char what[96];
    snprintf(what, sizeof what, "%s broadcast", tag);
    compare_tensors(what, d, r, -1);
    /* host operations */
    int64_t *s = malloc(sizeof(int64_t) * (size_t)size * 2), *ra = s + size;
    for (int p = 0; p < size; p++) s[p] = rank * 100 + p;
    sl_comm_alltoall_i64(nc, s, ra, 1);
    for (int p = 0; p < size; p++)
        CHECK(ra[p] == p * 100 + rank, "%s alltoall_i64: %lld from %d", tag, (long long)ra[p], p);
    double v = rank + 1.0;
    sl_comm_allreduce_sum_f64(nc, &v, 1);
    CHECK(v == size * (size + 1) / 2.0, "%s allreduce_sum_f64: %g", tag, v);
    sl_comm_barrier(nc);
    free(s), free(h);
    sl_test_release();
}

static void run_all(sl_comm *mpi, sl_comm *nc, const char *tag) {
    case_allreduce(mpi, nc, tag);
    case_allgather(mpi, nc, tag, false);
    case_allgather(mpi, nc, tag, true);
    case_reduce_scatter(mpi, nc, tag, false);
    case_reduce_scatter(mpi, nc, tag, true);
    case_alltoallv(mpi, nc, tag, SL_F32);
    case_alltoallv(mpi, nc, tag, SL_BF16);
    for (int scatter = 1; scatter >= 0; scatter--) {
        case_grouped(mpi, nc, tag, scatter, SL_F32, 4, 3, false);   /* one 16-byte word per row */
        case_grouped(mpi, nc, tag, scatter, SL_F32, 37, 40, false); /* 4-byte words; > 64 blocks */
        case_grouped(mpi, nc, tag, scatter, SL_BF16, 5, 3, false);  /* 2-byte words */
        case_grouped(mpi, nc, tag, scatter, SL_F32, 37, 40, true);  /* the non-blocking call */
    }
    case_broadcast(mpi, nc, tag);
}

int main(int argc, char **argv) {
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    g_gpu = sl_test_cuda_or_skip(NULL);
    g_cpu = sl_test_cpu();
    char err[256];
    /* One device per rank, decided alike on every rank from the gathered placements (as
     * tests/parallel_run.c does through sl_transport_resolve). */
    sl_rank_place *places = sl_placement_gather(world, g_gpu);
    int ra = 0, rb = 0;
    const bool shared = sl_placement_shared(places, sl_comm_size(world), &ra, &rb);
    if (shared) {
        char dev[256];
        sl_placement_device_name(places, ra, dev, sizeof dev);
#ifdef SLUICE_CUDA_EMULATED
        const int rc = 1;
#else
        const int rc = 77;
#endif
        if (sl_comm_rank(world) == 0)
            printf("%s: test_comm_nccl: ranks %d and %d share %s (fewer GPUs than ranks on the "
                   "node; NCCL needs one device per rank)\n",
                   rc == 77 ? "SKIP" : "FAIL", ra, rb, dev);
        free(places);
        sl_backend_free(g_gpu);
        sl_comm_finalize(world);
        return rc;
    }
    free(places);
    sl_comm *nw = sl_comm_nccl_create(world, g_gpu, err, sizeof err);
    CHECK(nw != NULL, "sl_comm_nccl_create: %s", err);
    if (nw) {
        run_all(world, nw, "world");
        const int rank = sl_comm_rank(world);
        sl_comm *mpi_half = sl_comm_split(world, rank % 2, rank);
        sl_comm *nccl_half = sl_comm_split(nw, rank % 2, rank);
        CHECK(sl_comm_size(nccl_half) == sl_comm_size(mpi_half) &&
                  sl_comm_rank(nccl_half) == sl_comm_rank(mpi_half),
              "split: rank %d of %d, MPI gives %d of %d", sl_comm_rank(nccl_half),
              sl_comm_size(nccl_half), sl_comm_rank(mpi_half), sl_comm_size(mpi_half));
        run_all(mpi_half, nccl_half, "split");
        sl_comm_free(nccl_half);
        sl_comm_free(mpi_half);
        sl_comm_free(nw);
    }
    /* a CPU backend cannot carry the nccl transport */
    CHECK(sl_comm_nccl_create(world, g_cpu, err, sizeof err) == NULL && strstr(err, "cuda"),
          "nccl transport on the cpu backend: not refused (%s)", err);
    double fails = sl_test_failures;
    sl_comm_allreduce_sum_f64(world, &fails, 1);
    int rc = sl_test_finish("test_comm_nccl");
    sl_backend_free(g_gpu);
    sl_comm_finalize(world);
    return fails > 0 ? 1 : rc;
}
