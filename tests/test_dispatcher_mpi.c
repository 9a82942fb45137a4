/*
 * tests/test_dispatcher_mpi.c - the expert-parallel token dispatcher against a naive
 * per-token reference.
 *
 *   mpirun -np N test_dispatcher_mpi --ep EP
 *
 * Every rank routes its own hand-crafted tokens (a deterministic function of its world rank
 * and the scenario, different on every rank) through sl_token_dispatcher over the EP group
 * that sl_topology_init builds. The experts are f_e(x) = (1 + e) x + e / 4 per element, e
 * the GLOBAL expert id, applied on the host to expert_in (so a row that reaches the wrong
 * expert, or the wrong rank, changes the result). Because every rank can regenerate the
 * routing of every other rank, the test also knows exactly what must arrive where:
 *
 *   forward:  counts_host, kept_host, send_rows, recv_counts, recv_rows, received,
 *             local_counts, and expert_in row by row (expert-major, source rank, then the
 *             stable slot order) are exact; y[n] = sum_j keep[n,j] w[n,j] f_e(x[n]) within
 *             1e-6 + 1e-5 |ref|;
 *   backward: dexpert_out row by row (w dy), dtopk_w[n,j] = keep ? <dy[n], f_e(x[n])> : 0 and
 *             dx[n] = dx0[n] + sum_j keep w (1 + e) dy[n] (dispatch_backward accumulates
 *             into a non-zero dx0), same tolerance.
 *
 * Scenarios (the dispatcher is reused across them, so its receive buffers grow and shrink):
 *   0 "starved": the experts of the last EP rank get zero rows from everyone, expert 1 is
 *     picked by no token, most slots go to expert 0 (heavily uneven);
 *   1 "uneven":  skewed per-rank expert preferences, the last expert is never picked, and
 *     EP rank 0 (and every even EP rank) sends nothing to the next EP rank;
 *   2 "local":   EP rank 0 keeps all its tokens on its own experts (sends nothing to any
 *     peer) and token counts differ widely between ranks;
 *   3 "empty":   odd world ranks have no tokens at all (N = 0: they send nothing and only
 *     receive), the even ones prefer the experts of the next EP rank.
 * Each scenario runs dropless and with capacity factors (probs policy 2.0, position policy
 * 1.5), where the reference applies the documented drop rule on every source rank.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/token_dispatcher.h"
#include "tests/test_util.h"
#include "trainer/topology.h"

enum { K = 2, C = 5, L = 4, SCENARIOS = 4 }; /* top-k, hidden, experts per EP rank */

static int g_rank; /* world rank, for messages */

typedef struct {
    int n;
    int32_t *idx; /* [n, K] */
    float *w;     /* [n, K] */
    float *x;     /* [n, C] */
    float *dy;    /* [n, C] */
    float *dx0;   /* [n, C] initial contents of dx */
} routing;

static int tokens_of(int wrank, int q, int scenario) {
    switch (scenario) {
    case 0:
        return 6 + 5 * wrank;
    case 1:
        return 9 + 3 * ((wrank * 7) % 5);
    case 2:
        return q == 0 ? 23 : 3 + wrank;
    default:
        return wrank % 2 ? 0 : 17 + wrank;
    }
}

/* The tokens of world rank `wrank` (EP rank q of an EP group of size p, e experts). */
static void make_routing(routing *r, int wrank, int q, int p, int e, int scenario) {
    const int n = tokens_of(wrank, q, scenario);
    uint64_t s = 0x5eed0000ULL + (uint64_t)wrank * 1000003ULL + (uint64_t)scenario * 7919ULL;
    r->n = n;
    r->idx = malloc(sizeof(int32_t) * (size_t)(n ? n : 1) * K);
    r->w = malloc(sizeof(float) * (size_t)(n ? n : 1) * K);
    r->x = malloc(sizeof(float) * (size_t)(n ? n : 1) * C);
    r->dy = malloc(sizeof(float) * (size_t)(n ? n : 1) * C);
    r->dx0 = malloc(sizeof(float) * (size_t)(n ? n : 1) * C);
    double *pref = calloc((size_t)e, sizeof(double));
    for (int x = 0; x < e; x++) {
        const int owner = x / L;
        switch (scenario) {
        case 0: /* nothing for the last EP rank, nobody picks expert 1, expert 0 dominates */
            pref[x] = (owner == p - 1 || x == 1) ? 0.0 : (x == 0 ? 40.0 : 1.0 / (1 + x));
            break;
        case 1: /* rank-dependent skew; the last expert unused; even q skips rank q + 1 */
            pref[x] = x == e - 1 ? 0.0 : pow(0.55, (double)((x * 5 + wrank * 3) % e));
            if (q % 2 == 0 && owner == (q + 1) % p) pref[x] = 0.0;
            break;
        case 2: /* EP rank 0 stays local; the others spread unevenly */
            pref[x] = q == 0 ? (owner == 0 ? 1.0 + x : 0.0) : 1.0 / (1 + (x + wrank) % e);
            break;
        default: /* (odd ranks have no tokens) skewed towards the experts of rank q + 1 */
            pref[x] = owner == (q + 1) % p ? 4.0 : 1.0 / (1 + x);
            break;
        }
    }
    for (int t = 0; t < n; t++) {
        for (int j = 0; j < K; j++) {
            double tot = 0.0;
            for (int x = 0; x < e; x++) {
                bool used = false;
                for (int i = 0; i < j; i++) used |= r->idx[t * K + i] == x;
                if (!used) tot += pref[x];
            }
            double u = sl_test_rand_unif(&s) * tot;
            int pick = -1;
            for (int x = 0; x < e; x++) {
                bool used = false;
                for (int i = 0; i < j; i++) used |= r->idx[t * K + i] == x;
                if (used || pref[x] == 0.0) continue;
                pick = x;
                if (u < pref[x]) break;
                u -= pref[x];
            }
            r->idx[t * K + j] = pick;
            r->w[t * K + j] = (float)(0.05 + 0.95 * sl_test_rand_unif(&s));
        }
        for (int c = 0; c < C; c++) {
            r->x[t * C + c] = (float)(2.0 * sl_test_rand_unif(&s) - 1.0);
            r->dy[t * C + c] = (float)(2.0 * sl_test_rand_unif(&s) - 1.0);
            r->dx0[t * C + c] = (float)(sl_test_rand_unif(&s) - 0.5);
        }
    }
    free(pref);
}

static void free_routing(routing *r) {
    free(r->idx), free(r->w), free(r->x), free(r->dy), free(r->dx0);
}

/* The documented drop rule on one rank's slots: keep[s] for slot s = n*K + j; counts[e]
 * before and kept[e] after drops. cf == 0 keeps everything. */
static void reference_keep(const routing *r, int e, double cf, sl_drop_policy pol, char *keep,
                           int64_t *counts, int64_t *kept) {
    const int64_t slots = (int64_t)r->n * K;
    memset(counts, 0, sizeof(int64_t) * (size_t)e);
    memset(kept, 0, sizeof(int64_t) * (size_t)e);
    for (int64_t s = 0; s < slots; s++) counts[r->idx[s]]++;
    const int64_t cap = cf > 0 ? (int64_t)ceil(cf * (double)slots / e) : slots;
    for (int64_t s = 0; s < slots; s++) {
        const int x = r->idx[s];
        int64_t before = 0; /* slots of expert x ranked ahead of s */
        for (int64_t t = 0; t < slots; t++) {
            if (t == s || r->idx[t] != x) continue;
            if (pol == SL_DROP_POSITION || cf <= 0)
                before += t < s;
            else
                before += r->w[t] > r->w[s] || (r->w[t] == r->w[s] && t < s);
        }
        keep[s] = before < cap;
        kept[x] += keep[s];
    }
}

static float fexp(int e, float x) {
    return (1.0f + (float)e) * x + 0.25f * (float)e;
}

static int64_t sum64(const int64_t *a, int n) {
    int64_t s = 0;
    for (int i = 0; i < n; i++) s += a[i];
    return s;
}

typedef struct {
    double cf;
    sl_drop_policy pol;
    const char *name;
} variant;

static void run_scenario(sl_token_dispatcher *d, const sl_topology *topo, int e, int scenario,
                         const variant *v) {
    const int p = topo->ep_size, q = topo->ep_rank, base = topo->rank - q;
    char tag[96];
    snprintf(tag, sizeof tag, "rank %d, ep %d, scenario %d, %s", g_rank, p, scenario, v->name);
    /* everybody's routing in this EP group, and the reference drop decisions */
    routing *rt = calloc((size_t)p, sizeof(routing));
    char **keep = calloc((size_t)p, sizeof(char *));
    int64_t *counts = calloc((size_t)p * e, sizeof(int64_t));
    int64_t *kept = calloc((size_t)p * e, sizeof(int64_t));
    for (int i = 0; i < p; i++) {
        make_routing(&rt[i], base + i, i, p, e, scenario);
        keep[i] = malloc((size_t)rt[i].n * K + 1);
        reference_keep(&rt[i], e, v->cf, v->pol, keep[i], counts + (size_t)i * e,
                       kept + (size_t)i * e);
    }
    const routing *me = &rt[q];
    const int n = me->n;
    const int64_t *mycounts = counts + (size_t)q * e, *mykept = kept + (size_t)q * e;

    sl_tensor *xn = sl_test_tensor(SL_F32, 2, (int64_t[]){n, C}, n ? me->x : NULL);
    sl_tensor *ti = sl_test_tensor(SL_I32, 2, (int64_t[]){n, K}, n ? me->idx : NULL);
    sl_tensor *tw = sl_test_tensor(SL_F32, 2, (int64_t[]){n, K}, n ? me->w : NULL);
    sl_tensor *y = sl_test_tensor(SL_F32, 2, (int64_t[]){n, C}, NULL);
    sl_tensor *dy = sl_test_tensor(SL_F32, 2, (int64_t[]){n, C}, n ? me->dy : NULL);
    sl_tensor *dx = sl_test_tensor(SL_F32, 2, (int64_t[]){n, C}, n ? me->dx0 : NULL);
    sl_tensor *dw = sl_test_tensor(SL_F32, 2, (int64_t[]){n, K}, NULL);
    if (n) sl_op_fill(y, 1234.0f), sl_op_fill(dw, 1234.0f); /* outputs are written */

    sl_token_dispatcher_dispatch(d, xn, ti, tw);

    /* ---- routing bookkeeping: exact ---- */
    for (int x = 0; x < e; x++) {
        CHECK(d->counts_host[x] == mycounts[x], "%s: counts_host[%d] = %lld, expected %lld", tag, x,
              (long long)d->counts_host[x], (long long)mycounts[x]);
        CHECK(d->kept_host[x] == mykept[x], "%s: kept_host[%d] = %lld, expected %lld", tag, x,
              (long long)d->kept_host[x], (long long)mykept[x]);
    }
    CHECK(d->kept == sum64(mykept, e) && d->kept + d->dropped == (int64_t)n * K,
          "%s: kept %lld dropped %lld, expected kept %lld of %d slots", tag, (long long)d->kept,
          (long long)d->dropped, (long long)sum64(mykept, e), n * K);
    int64_t received = 0;
    for (int src = 0; src < p; src++) {
        CHECK(d->send_rows[src] == sum64(mykept + src * L, L),
              "%s: send_rows[%d] = %lld, expected %lld", tag, src, (long long)d->send_rows[src],
              (long long)sum64(mykept + src * L, L));
        const int64_t *from = kept + (size_t)src * e + (size_t)q * L;
        CHECK(d->recv_rows[src] == sum64(from, L), "%s: recv_rows[%d] = %lld, expected %lld", tag,
              src, (long long)d->recv_rows[src], (long long)sum64(from, L));
        for (int le = 0; le < L; le++)
            CHECK(d->recv_counts[src * L + le] == from[le],
                  "%s: recv_counts[%d][%d] = %lld, expected %lld", tag, src, le,
                  (long long)d->recv_counts[src * L + le], (long long)from[le]);
        received += sum64(from, L);
    }
    CHECK(d->received == received, "%s: received %lld rows, expected %lld", tag,
          (long long)d->received, (long long)received);
    CHECK(d->local_experts == L && d->first_expert == q * L, "%s: local experts %d from %d", tag,
          d->local_experts, d->first_expert);
    for (int le = 0; le < L; le++) {
        int64_t want = 0;
        for (int src = 0; src < p; src++) want += kept[(size_t)src * e + q * L + le];
        CHECK(d->local_counts[le] == want, "%s: local_counts[%d] = %lld, expected %lld", tag, le,
              (long long)d->local_counts[le], (long long)want);
    }
    /* the scenario really has the shape it claims (guards the test itself) */
    if (scenario == 0) {
        if (q == p - 1)
            CHECK(received == 0, "%s: the starved rank received %lld", tag, (long long)received);
        if (q == 0) CHECK(d->local_counts[1] == 0, "%s: expert 1 got rows", tag);
        CHECK(mycounts[0] >= n / 2, "%s: expert 0 should dominate", tag);
    }
    if (scenario == 1 && q % 2 == 0)
        CHECK(d->send_rows[(q + 1) % p] == 0, "%s: EP rank %d sent to %d", tag, q, (q + 1) % p);
    if (scenario == 2 && q == 0)
        for (int dst = 1; dst < p; dst++) CHECK(d->send_rows[dst] == 0, "%s: sent to %d", tag, dst);
    if (scenario == 3 && n == 0)
        CHECK(sum64(d->send_rows, p) == 0 && d->kept == 0, "%s: an empty rank sent rows", tag);

    /* ---- expert_in row by row: expert-major, then source rank, then stable slot order ---- */
    const int64_t rows = d->received;
    float *ein = calloc((size_t)(rows ? rows : 1) * C, sizeof(float));
    float *want_in = calloc((size_t)(rows ? rows : 1) * C, sizeof(float));
    float *want_dout = calloc((size_t)(rows ? rows : 1) * C, sizeof(float));
    int *row_expert = calloc((size_t)(rows ? rows : 1), sizeof(int));
    if (rows == received) {
        int64_t r = 0;
        for (int le = 0; le < L; le++) {
            const int x = q * L + le;
            for (int src = 0; src < p; src++)
                for (int64_t s = 0; s < (int64_t)rt[src].n * K; s++) {
                    if (rt[src].idx[s] != x || !keep[src][s]) continue;
                    const int64_t t = s / K;
                    for (int c = 0; c < C; c++) {
                        want_in[r * C + c] = rt[src].x[t * C + c];
                        want_dout[r * C + c] = rt[src].w[s] * rt[src].dy[t * C + c];
                    }
                    row_expert[r++] = x;
                }
        }
        if (rows) sl_tensor_to_host_range(d->expert_in, 0, rows * C, ein);
        CHECK(memcmp(ein, want_in, sizeof(float) * (size_t)rows * C) == 0,
              "%s: expert_in rows differ from the expected order", tag);
        /* the experts */
        float *eout = malloc(sizeof(float) * (size_t)(rows ? rows : 1) * C);
        for (int64_t i = 0; i < rows * C; i++) eout[i] = fexp(row_expert[i / C], ein[i]);
        if (rows) sl_tensor_from_host_range(d->expert_out, 0, rows * C, eout);
        free(eout);
    }

    sl_token_dispatcher_combine(d, tw, NULL, y);

    /* ---- forward reference ---- */
    float *yref = calloc((size_t)(n ? n : 1) * C, sizeof(float));
    float *dwref = calloc((size_t)(n ? n : 1) * K, sizeof(float));
    float *dxref = calloc((size_t)(n ? n : 1) * C, sizeof(float));
    for (int t = 0; t < n; t++) {
        double acc[C] = {0}, dacc[C] = {0};
        for (int j = 0; j < K; j++) {
            const int s = t * K + j, x = me->idx[s];
            if (!keep[q][s]) continue;
            double dot = 0.0;
            for (int c = 0; c < C; c++) {
                const double f = fexp(x, me->x[t * C + c]);
                acc[c] += me->w[s] * f;
                dot += (double)me->dy[t * C + c] * f;
                dacc[c] += (double)me->w[s] * (1.0 + x) * me->dy[t * C + c];
            }
            dwref[s] = (float)dot;
        }
        for (int c = 0; c < C; c++) {
            yref[t * C + c] = (float)acc[c];
            dxref[t * C + c] = (float)(me->dx0[t * C + c] + dacc[c]);
        }
    }
    if (n) {
        float *yh = sl_test_host_f32(y);
        double err = sl_test_compare(tag, yh, yref, (int64_t)n * C, 1e-6, 1e-5);
        CHECK(err <= 1.0, "%s: y differs from the naive reference (%.3g)", tag, err);
        free(yh);
    }

    /* ---- backward ---- */
    sl_token_dispatcher_combine_backward(d, dy, tw, dw);
    if (rows == received) {
        float *dout = calloc((size_t)(rows ? rows : 1) * C, sizeof(float));
        if (rows) sl_tensor_to_host_range(d->dexpert_out, 0, rows * C, dout);
        double err = sl_test_compare(tag, dout, want_dout, rows * C, 1e-6, 1e-5);
        CHECK(err <= 1.0, "%s: dexpert_out differs from w * dy of the routed tokens (%.3g)", tag,
              err);
        float *din = malloc(sizeof(float) * (size_t)(rows ? rows : 1) * C);
        for (int64_t i = 0; i < rows * C; i++) din[i] = (1.0f + (float)row_expert[i / C]) * dout[i];
        if (rows) sl_tensor_from_host_range(d->dexpert_in, 0, rows * C, din);
        free(din), free(dout);
    }
    sl_token_dispatcher_dispatch_backward(d, dx, 1.0f);
    if (n) {
        float *dwh = sl_test_host_f32(dw), *dxh = sl_test_host_f32(dx);
        double e1 = sl_test_compare(tag, dwh, dwref, (int64_t)n * K, 1e-6, 1e-5);
        double e2 = sl_test_compare(tag, dxh, dxref, (int64_t)n * C, 1e-6, 1e-5);
        CHECK(e1 <= 1.0, "%s: dtopk_w differs from the naive reference (%.3g)", tag, e1);
        CHECK(e2 <= 1.0, "%s: dx differs from the naive reference (%.3g)", tag, e2);
        for (int s = 0; s < n * K; s++)
            if (!keep[q][s])
                CHECK(dwh[s] == 0.0f, "%s: dropped slot %d has dtopk_w %g", tag, s, dwh[s]);
        free(dwh), free(dxh);
    }

    free(ein), free(want_in), free(want_dout), free(row_expert);
    free(yref), free(dwref), free(dxref);
    sl_tensor *ts[] = {xn, ti, tw, y, dy, dx, dw};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    for (int i = 0; i < p; i++) free_routing(&rt[i]), free(keep[i]);
    free(rt), free(keep), free(counts), free(kept);
}

int main(int argc, char **argv) {
    int ep = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--ep") == 0 && i + 1 < argc) ep = atoi(argv[++i]);
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    g_rank = sl_comm_rank(world);
    const int size = sl_comm_size(world);
    if (ep <= 0) ep = size;
    const int e = L * ep;
    char err[512];
    sl_topology topo;
    if (sl_topology_init(&topo, world, ep, e, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        sl_comm_finalize(world);
        return 2;
    }
    int max_tokens = 0;
    for (int s = 0; s < SCENARIOS; s++) {
        const int n = tokens_of(topo.rank, topo.ep_rank, s);
        if (n > max_tokens) max_tokens = n;
    }
    const variant variants[] = {{0.0, SL_DROP_PROBS, "dropless"},
                                {2.0, SL_DROP_PROBS, "capacity 2.0 probs"},
                                {1.5, SL_DROP_POSITION, "capacity 1.5 position"}};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        sl_token_dispatcher d;
        sl_dispatcher_params dp = {.experts = e,
                                   .topk = K,
                                   .hidden = C,
                                   .max_tokens = max_tokens,
                                   .ep = topo.ep,
                                   .capacity_factor = variants[v].cf,
                                   .drop_policy = variants[v].pol};
        sl_token_dispatcher_init(&d, sl_test_cpu(), &dp);
        CHECK(d.ep_size == ep && d.ep_rank == topo.ep_rank, "rank %d: dispatcher EP %d/%d", g_rank,
              d.ep_rank, d.ep_size);
        /* twice through the scenarios: buffers sized by an earlier, larger exchange */
        for (int round = 0; round < 2; round++)
            for (int s = 0; s < SCENARIOS; s++) run_scenario(&d, &topo, e, s, &variants[v]);
        sl_token_dispatcher_free(&d);
    }
    double fails = sl_test_failures;
    sl_comm_allreduce_sum_f64(world, &fails, 1);
    char name[64];
    snprintf(name, sizeof name, "test_dispatcher_mpi[rank %d, np %d, ep %d]", g_rank, size, ep);
    int rc = sl_test_finish(name);
    sl_topology_free(&topo);
    sl_comm_finalize(world);
    return fails > 0 ? 1 : rc;
}
