/*
 * bench/dispatch_bench.c - expert-parallel token dispatch + combine against a bare
 * MPI_Alltoallv moving the same bytes (bench/PARALLEL.md).
 *
 *   mpirun -np P bench_dispatch [--tokens N] [--hidden C[,C...]] [--experts E] [--topk K]
 *                               [--iters I] [--warmup W] [--threads T] [--seed S]
 *                               [--zipf A] [--routing uniform|skewed|both] [--capacity F]
 *                               [--profile 1]
 *
 * Every rank routes N tokens of width C to E experts (top-K, K distinct experts per token,
 * weights normalized) with expert parallelism EP = P (rank r holds experts
 * [r E/P, (r+1) E/P)). Routing is random with a fixed seed (per rank stream): "uniform"
 * draws experts uniformly, "skewed" from a Zipf law p(e) ~ (e + 1)^-A (A = 1.0 by default),
 * so the low experts, and the ranks holding them, receive most rows.
 *
 * Each timed iteration runs, with a barrier before each piece and the time of the slowest
 * rank taken (MPI_Allreduce MAX):
 *   dispatch   sl_token_dispatcher_dispatch (sort, counts all-to-all, gather, exchange into
 *              the local experts' groups)
 *   combine    sl_token_dispatcher_combine  (exchange back, weighted combine)
 *   backward   sl_token_dispatcher_combine_backward + sl_token_dispatcher_dispatch_backward
 *   bare       MPI_Alltoallv there (send_rows -> recv_rows) and back (recv_rows -> send_rows)
 *              on plain malloc'ed buffers, with exactly the byte counts the dispatcher used
 * and then the dispatcher's phases one by one, replayed through the same public ops on the
 * dispatcher's own plan (sort, counts download, counts all-to-all, gather, grouped exchange,
 * grouped exchange back, combine); "plan" = dispatch minus the replayed phases, i.e. the
 * host-side bookkeeping of plan_exchange.
 * With --profile 1 only the dispatcher runs (for perf record) and nothing is reported.
 * Reports medians (and minima) over the iterations. Bytes = payload of both directions
 * summed over ranks (self blocks included, as MPI copies them too); GB/s = bytes / time.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "bench/bench_util.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "moe/token_dispatcher.h"

enum { MAX_HIDDEN = 8 };

typedef struct {
    int tokens, experts, topk, iters, warmup, threads, n_hidden;
    int hidden[MAX_HIDDEN];
    double zipf, capacity;
    uint64_t seed;
    int uniform, skewed;
    int profile; /* only the dispatcher (forward + backward), for perf */
} opts;

/* the per-iteration timings (seconds, max over ranks) */
enum {
    T_DISPATCH,
    T_COMBINE,
    T_CBWD,
    T_DBWD,
    T_BARE_THERE,
    T_BARE_BACK,
    T_BARE_COUNTS,
    /* replayed phases */
    P_SORT,
    P_COUNTS_DL,
    P_COUNTS_A2A,
    P_GATHER,
    P_EXCHANGE,
    P_EXCHANGE_BACK,
    P_COMBINE,
    NT
};

static double minimum(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* Top-k distinct experts per token: uniform, or Zipf(a) by inverse CDF with rejection of
 * repeats. Weights uniform in [0.1, 1), normalized to sum 1 per token. */
static void make_routing(int32_t *idx, float *w, int n, int k, int e, const double *cdf,
                         uint64_t seed, uint64_t stream) {
    sl_rng r;
    sl_rng_init(&r, seed, stream);
    for (int t = 0; t < n; t++) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) {
            int x;
            for (;;) {
                if (cdf) {
                    const double u = sl_rng_uniform(&r);
                    int lo = 0, hi = e - 1;
                    while (lo < hi) {
                        const int mid = (lo + hi) / 2;
                        if (cdf[mid] > u)
                            hi = mid;
                        else
                            lo = mid + 1;
                    }
                    x = lo;
                } else {
                    x = (int)sl_rng_below(&r, (uint64_t)e);
                }
                int dup = 0;
                for (int i = 0; i < j; i++) dup |= idx[t * k + i] == x;
                if (!dup) break;
            }
            idx[t * k + j] = x;
            w[t * k + j] = (float)(0.1 + 0.9 * sl_rng_uniform(&r));
            sum += w[t * k + j];
        }
        for (int j = 0; j < k; j++) w[t * k + j] /= sum;
    }
}

static void fill_normal(float *x, int64_t n, uint64_t seed, uint64_t stream) {
    sl_rng r;
    sl_rng_init(&r, seed, stream);
    for (int64_t i = 0; i < n; i++) x[i] = (float)sl_rng_normal(&r);
}

static double now(void) {
    return MPI_Wtime();
}

/* barrier, run, and return the slowest rank's time */
#define TIMED(slot, ...)                                                                           \
    do {                                                                                           \
        MPI_Barrier(MPI_COMM_WORLD);                                                               \
        const double t0_ = now();                                                                  \
        __VA_ARGS__;                                                                               \
        t[slot] = now() - t0_;                                                                     \
    } while (0)

static void permute(sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx, int64_t n) {
    if (n == 0) return;
    sl_tensor *v = sl_tensor_view1((sl_tensor *)idx, 0, n);
    sl_op_gather_rows(dst, src, v);
    sl_tensor_free(v);
}

static void run_case(sl_backend *be, sl_comm *ep, const opts *o, int hidden, const char *name,
                     const double *cdf) {
    const int rank = ep ? sl_comm_rank(ep) : 0, size = ep ? sl_comm_size(ep) : 1;
    const int n = o->tokens, k = o->topk, c = hidden;
    const int64_t slots = (int64_t)n * k;
    int32_t *idx_h = sl_xmalloc(sizeof(int32_t) * (size_t)slots);
    float *w_h = sl_xmalloc(sizeof(float) * (size_t)slots);
    float *x_h = sl_xmalloc(sizeof(float) * (size_t)n * (size_t)c);
    make_routing(idx_h, w_h, n, k, o->experts, cdf, o->seed, 1000 + (uint64_t)rank);
    fill_normal(x_h, (int64_t)n * c, o->seed, 2000 + (uint64_t)rank);
    sl_tensor *idx = sl_tensor_new2(be, SL_I32, n, k), *w = sl_tensor_new2(be, SL_F32, n, k);
    sl_tensor *xn = sl_tensor_new2(be, SL_F32, n, c), *y = sl_tensor_new2(be, SL_F32, n, c);
    sl_tensor *dy = sl_tensor_new2(be, SL_F32, n, c), *dxn = sl_tensor_new2(be, SL_F32, n, c);
    sl_tensor *dw = sl_tensor_new2(be, SL_F32, n, k);
    sl_tensor_from_host(idx, idx_h);
    sl_tensor_from_host(w, w_h);
    sl_tensor_from_host(xn, x_h);
    sl_tensor_from_host(dy, x_h);
    sl_tensor_zero(dxn);

    sl_token_dispatcher d;
    sl_dispatcher_params dp = {.experts = o->experts,
                               .topk = k,
                               .hidden = c,
                               .max_tokens = n,
                               .ep = ep,
                               .capacity_factor = o->capacity,
                               .drop_policy = SL_DROP_PROBS};
    sl_token_dispatcher_init(&d, be, &dp);

    /* correctness check with an identity expert: y = sum_j w[n, j] x[n] = x[n] (dropless) */
    sl_token_dispatcher_dispatch(&d, xn, idx, w);
    const int64_t rows_in = size > 1 ? d.received : d.kept;
    if (rows_in) {
        sl_tensor *a = sl_tensor_view2(d.expert_in, 0, rows_in, c);
        sl_tensor *b = sl_tensor_view2(d.expert_out, 0, rows_in, c);
        sl_tensor_copy(b, a);
        sl_tensor_free(a), sl_tensor_free(b);
    }
    sl_token_dispatcher_combine(&d, w, y);
    float *y_h = sl_xmalloc(sizeof(float) * (size_t)n * (size_t)c);
    sl_tensor_to_host(y, y_h);
    double worst = 0.0;
    if (o->capacity <= 0)
        for (int64_t i = 0; i < (int64_t)n * c; i++) worst = fmax(worst, fabs(y_h[i] - x_h[i]));
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (worst > 1e-5) {
        if (rank == 0) fprintf(stderr, "bench_dispatch: identity round trip off by %g\n", worst);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    /* the plan of this routing (identical every iteration: same inputs) */
    int64_t *send_rows = sl_xcalloc((size_t)size, sizeof(int64_t));
    int64_t *recv_rows = sl_xcalloc((size_t)size, sizeof(int64_t));
    if (size > 1) {
        memcpy(send_rows, d.send_rows, sizeof(int64_t) * (size_t)size);
        memcpy(recv_rows, d.recv_rows, sizeof(int64_t) * (size_t)size);
    } else {
        send_rows[0] = recv_rows[0] = d.kept;
    }
    const int64_t rowb = (int64_t)c * (int64_t)sizeof(float);
    int *sc = sl_xmalloc(sizeof(int) * (size_t)size * 4), *sd = sc + size, *rc = sd + size,
        *rd = rc + size;
    int64_t s_tot = 0, r_tot = 0, off_rank = 0;
    for (int p = 0; p < size; p++) {
        sc[p] = (int)(send_rows[p] * rowb);
        sd[p] = (int)(s_tot * rowb);
        rc[p] = (int)(recv_rows[p] * rowb);
        rd[p] = (int)(r_tot * rowb);
        s_tot += send_rows[p];
        r_tot += recv_rows[p];
        if (p != rank) off_rank += send_rows[p] + recv_rows[p];
    }
    char *sbuf = sl_xmalloc((size_t)((s_tot ? s_tot : 1) * rowb));
    char *rbuf = sl_xmalloc((size_t)((r_tot ? r_tot : 1) * rowb));
    memset(sbuf, 1, (size_t)(s_tot * rowb));
    memset(rbuf, 2, (size_t)(r_tot * rowb));
    int64_t *cnt_s = sl_xcalloc((size_t)size * (size_t)(o->experts / size), sizeof(int64_t));
    int64_t *cnt_r = sl_xcalloc((size_t)size * (size_t)(o->experts / size), sizeof(int64_t));
    /* totals over ranks: payload of both directions and its off-rank part */
    int64_t tot[2] = {(s_tot + r_tot) * rowb, off_rank * rowb};
    MPI_Allreduce(MPI_IN_PLACE, tot, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    int64_t *recv_all = sl_xcalloc((size_t)size, sizeof(int64_t));
    MPI_Gather(&r_tot, 1, MPI_INT64_T, recv_all, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);

    /* replay tensors */
    sl_tensor *counts = sl_tensor_new1(be, SL_I32, o->experts);
    sl_tensor *sorted = sl_tensor_new1(be, SL_I32, slots), *pos = sl_tensor_new1(be, SL_I32, slots);
    int32_t *c32 = sl_xmalloc(sizeof(int32_t) * (size_t)o->experts);
    const bool drops = o->capacity > 0;

    double *times = sl_xcalloc((size_t)NT * (size_t)o->iters, sizeof(double));
    for (int it = -o->warmup; it < o->iters; it++) {
        double t[NT] = {0};
        TIMED(T_DISPATCH, sl_token_dispatcher_dispatch(&d, xn, idx, w));
        TIMED(T_COMBINE, sl_token_dispatcher_combine(&d, w, y));
        TIMED(T_CBWD, sl_token_dispatcher_combine_backward(&d, dy, w, dw));
        TIMED(T_DBWD, sl_token_dispatcher_dispatch_backward(&d, dxn, 1.0f));
        if (o->profile) continue;
        TIMED(T_BARE_THERE,
              MPI_Alltoallv(sbuf, sc, sd, MPI_BYTE, rbuf, rc, rd, MPI_BYTE, MPI_COMM_WORLD));
        TIMED(T_BARE_BACK,
              MPI_Alltoallv(rbuf, rc, rd, MPI_BYTE, sbuf, sc, sd, MPI_BYTE, MPI_COMM_WORLD));
        TIMED(T_BARE_COUNTS, MPI_Alltoall(cnt_s, o->experts / size, MPI_INT64_T, cnt_r,
                                          o->experts / size, MPI_INT64_T, MPI_COMM_WORLD));
        /* the dispatcher's phases, replayed on its own plan */
        TIMED(P_SORT, sl_op_moe_sort(counts, sorted, pos, idx));
        TIMED(P_COUNTS_DL, sl_tensor_to_host(counts, c32));
        if (size > 1)
            TIMED(P_COUNTS_A2A, sl_comm_alltoall_i64(ep, cnt_s, cnt_r, o->experts / size));
        TIMED(P_GATHER, permute(d.xs, xn, drops ? d.gather_idx : d.sorted_token, d.kept));
        if (size > 1) {
            TIMED(P_EXCHANGE, sl_comm_alltoallv_grouped(ep, d.xs, d.expert_in, d.send_rows,
                                                        d.recv_counts, d.local_experts, true));
            TIMED(P_EXCHANGE_BACK,
                  sl_comm_alltoallv_grouped(ep, d.expert_out, d.ys, d.send_rows, d.recv_counts,
                                            d.local_experts, false));
        }
        TIMED(P_COMBINE, {
            sl_tensor *v = sl_tensor_view1(drops ? d.combine_pos : d.slot_pos, 0, slots);
            sl_op_moe_combine(y, d.ys, v, w, NULL);
            sl_tensor_free(v);
        });
        MPI_Allreduce(MPI_IN_PLACE, t, NT, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (it >= 0)
            for (int i = 0; i < NT; i++) times[(size_t)i * o->iters + it] = t[i];
    }
    /* per-iteration sums, then medians (which sort the arrays) and minima */
    double *fwd_s = sl_xmalloc(sizeof(double) * 3 * (size_t)o->iters), *bwd_s = fwd_s + o->iters,
           *bare_s = bwd_s + o->iters;
    for (int it = 0; it < o->iters; it++) {
#define AT(i) times[(size_t)(i)*o->iters + it]
        fwd_s[it] = AT(T_DISPATCH) + AT(T_COMBINE);
        bwd_s[it] = AT(T_CBWD) + AT(T_DBWD);
        bare_s[it] = AT(T_BARE_THERE) + AT(T_BARE_BACK);
#undef AT
    }
    double m[NT], mn[NT];
    for (int i = 0; i < NT; i++) {
        m[i] = sl_bench_median(times + (size_t)i * o->iters, o->iters);
        mn[i] = minimum(times + (size_t)i * o->iters, o->iters);
    }
    const double fwd = sl_bench_median(fwd_s, o->iters), bwd = sl_bench_median(bwd_s, o->iters),
                 bare = sl_bench_median(bare_s, o->iters);
    const double fwd_min = minimum(fwd_s, o->iters), bwd_min = minimum(bwd_s, o->iters),
                 bare_min = minimum(bare_s, o->iters);
    free(fwd_s);

    if (rank == 0 && !o->profile) {
        const double gb = (double)tot[0] / 1e9;
        printf("\n== %s routing, N %d, C %d, E %d top-%d, EP %d, threads %d: rows received per "
               "rank",
               name, n, c, o->experts, k, size, o->threads);
        for (int p = 0; p < size; p++) printf(" %lld", (long long)recv_all[p]);
        printf("\n   payload both directions %.2f MB (off-rank %.2f MB); %d iterations, time of "
               "the slowest rank, median [min]:\n",
               (double)tot[0] / 1e6, (double)tot[1] / 1e6, o->iters);
        printf("   %-32s %8.3f ms [%8.3f]  %6.2f GB/s [%6.2f]  dispatch %.3f [%.3f], combine "
               "%.3f [%.3f]\n",
               "dispatch + combine (forward)", 1e3 * fwd, 1e3 * fwd_min, gb / fwd, gb / fwd_min,
               1e3 * m[T_DISPATCH], 1e3 * mn[T_DISPATCH], 1e3 * m[T_COMBINE], 1e3 * mn[T_COMBINE]);
        printf("   %-32s %8.3f ms [%8.3f]  %6.2f GB/s [%6.2f]  combine_bwd %.3f [%.3f], "
               "dispatch_bwd %.3f [%.3f]\n",
               "backward", 1e3 * bwd, 1e3 * bwd_min, gb / bwd, gb / bwd_min, 1e3 * m[T_CBWD],
               1e3 * mn[T_CBWD], 1e3 * m[T_DBWD], 1e3 * mn[T_DBWD]);
        printf("   %-32s %8.3f ms [%8.3f]  %6.2f GB/s [%6.2f]  there %.3f [%.3f], back %.3f "
               "[%.3f]\n",
               "bare MPI_Alltoallv there + back", 1e3 * bare, 1e3 * bare_min, gb / bare,
               gb / bare_min, 1e3 * m[T_BARE_THERE], 1e3 * mn[T_BARE_THERE], 1e3 * m[T_BARE_BACK],
               1e3 * mn[T_BARE_BACK]);
        printf("   %-32s %8.2fx   [%7.2fx]  forward; backward %.2fx [%.2fx]\n", "dispatcher / bare",
               fwd / bare, fwd_min / bare_min, bwd / bare, bwd_min / bare_min);
        printf("   %-32s %8.3f ms [%8.3f]\n", "bare MPI_Alltoall of counts", 1e3 * m[T_BARE_COUNTS],
               1e3 * mn[T_BARE_COUNTS]);
        const double replay =
            mn[P_SORT] + mn[P_COUNTS_DL] + mn[P_COUNTS_A2A] + mn[P_GATHER] + mn[P_EXCHANGE];
        printf("   phases replayed, median [min] ms:\n");
        const struct {
            const char *what;
            int i;
        } ph[] = {{"sort (moe_sort)", P_SORT},
                  {"counts download", P_COUNTS_DL},
                  {"counts all-to-all", P_COUNTS_A2A},
                  {"gather by expert", P_GATHER},
                  {"exchange (alltoallv_grouped)", P_EXCHANGE},
                  {"exchange back", P_EXCHANGE_BACK},
                  {"weighted combine", P_COMBINE}};
        for (size_t i = 0; i < sizeof ph / sizeof ph[0]; i++)
            if (size > 1 ||
                (ph[i].i != P_COUNTS_A2A && ph[i].i != P_EXCHANGE && ph[i].i != P_EXCHANGE_BACK))
                printf("     %-30s %8.3f [%8.3f]\n", ph[i].what, 1e3 * m[ph[i].i],
                       1e3 * mn[ph[i].i]);
        printf("     %-30s          [%8.3f]\n", "dispatch - phases (host plan)",
               1e3 * (mn[T_DISPATCH] - replay));
        printf("RESULT routing=%s N=%d C=%d E=%d k=%d ep=%d threads=%d bytes=%lld fwd_ms=%.4f "
               "bwd_ms=%.4f bare_ms=%.4f ratio_fwd=%.3f ratio_bwd=%.3f fwd_GBs=%.3f "
               "bare_GBs=%.3f fwd_min_ms=%.4f bwd_min_ms=%.4f bare_min_ms=%.4f\n",
               name, n, c, o->experts, k, size, o->threads, (long long)tot[0], 1e3 * fwd, 1e3 * bwd,
               1e3 * bare, fwd / bare, bwd / bare, gb / fwd, gb / bare, 1e3 * fwd_min,
               1e3 * bwd_min, 1e3 * bare_min);
        fflush(stdout);
    }

    free(times), free(c32), free(recv_all), free(cnt_s), free(cnt_r), free(sbuf), free(rbuf);
    free(sc), free(send_rows), free(recv_rows), free(y_h), free(idx_h), free(w_h), free(x_h);
    sl_tensor *ts[] = {counts, sorted, pos, idx, w, xn, y, dy, dxn, dw};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    sl_token_dispatcher_free(&d);
}

static void usage(void) {
    fprintf(stderr, "usage: bench_dispatch [--tokens N] [--hidden C[,C...]] [--experts E] "
                    "[--topk K] [--iters I] [--warmup W] [--threads T] [--seed S] [--zipf A] "
                    "[--routing uniform|skewed|both] [--capacity F] [--profile 0|1]\n");
}

int main(int argc, char **argv) {
    opts o = {.tokens = 2048,
              .experts = 128,
              .topk = 8,
              .iters = 30,
              .warmup = 3,
              .threads = 1,
              .n_hidden = 2,
              .hidden = {128, 512},
              .zipf = 1.0,
              .seed = 1234,
              .uniform = 1,
              .skewed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--tokens") == 0)
            o.tokens = atoi(v);
        else if (strcmp(a, "--experts") == 0)
            o.experts = atoi(v);
        else if (strcmp(a, "--topk") == 0)
            o.topk = atoi(v);
        else if (strcmp(a, "--iters") == 0)
            o.iters = atoi(v);
        else if (strcmp(a, "--warmup") == 0)
            o.warmup = atoi(v);
        else if (strcmp(a, "--threads") == 0)
            o.threads = atoi(v);
        else if (strcmp(a, "--seed") == 0)
            o.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--zipf") == 0)
            o.zipf = atof(v);
        else if (strcmp(a, "--capacity") == 0)
            o.capacity = atof(v);
        else if (strcmp(a, "--profile") == 0)
            o.profile = atoi(v);
        else if (strcmp(a, "--routing") == 0) {
            o.uniform = strcmp(v, "skewed") != 0;
            o.skewed = strcmp(v, "uniform") != 0;
        } else if (strcmp(a, "--hidden") == 0) {
            o.n_hidden = 0;
            for (char *s = (char *)v; *s && o.n_hidden < MAX_HIDDEN;) {
                o.hidden[o.n_hidden++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    s++;
                else
                    break;
            }
        } else {
            usage();
            return 2;
        }
    }
    if (o.tokens < 1 || o.topk < 1 || o.topk > o.experts || o.iters < 1 || o.warmup < 0 ||
        o.n_hidden < 1) {
        usage();
        return 2;
    }
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    const int size = sl_comm_size(world);
    char err[256];
    sl_backend_params bp = {.threads = o.threads, .device = -1};
    sl_backend *be = sl_backend_create("cpu", &bp, err, sizeof err);
    if (!be) {
        fprintf(stderr, "bench_dispatch: %s\n", err);
        sl_comm_finalize(world);
        return 1;
    }
    if (o.experts % size != 0) {
        if (sl_comm_rank(world) == 0)
            fprintf(stderr, "bench_dispatch: %d experts over %d ranks\n", o.experts, size);
        sl_backend_free(be);
        sl_comm_finalize(world);
        return 2;
    }
    double *cdf = sl_xmalloc(sizeof(double) * (size_t)o.experts);
    double acc = 0.0;
    for (int e = 0; e < o.experts; e++) acc += cdf[e] = pow(e + 1.0, -o.zipf);
    double run = 0.0;
    for (int e = 0; e < o.experts; e++) cdf[e] = (run += cdf[e]) / acc;
    cdf[o.experts - 1] = 1.0;
    if (sl_comm_rank(world) == 0)
        printf("bench_dispatch: %d ranks, N %d tokens per rank, E %d top-%d, %d iterations "
               "after %d warm-up, backend cpu x %d threads, seed %llu, skew zipf %.2f%s\n",
               size, o.tokens, o.experts, o.topk, o.iters, o.warmup, sl_backend_threads(be),
               (unsigned long long)o.seed, o.zipf, o.capacity > 0 ? " (with capacity drops)" : "");
    for (int h = 0; h < o.n_hidden; h++) {
        if (o.uniform) run_case(be, size > 1 ? world : NULL, &o, o.hidden[h], "uniform", NULL);
        if (o.skewed) run_case(be, size > 1 ? world : NULL, &o, o.hidden[h], "skewed", cdf);
    }
    free(cdf);
    sl_backend_free(be);
    sl_comm_finalize(world);
    return 0;
}
