/* trainer/grad_reducer.c - bucketed, overlapped gradient all-reduce or reduce-scatter (see
 * grad_reducer.h). */
#include "trainer/grad_reducer.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* Bucket b (counted from the end) is [bucket_start(b), bucket_end(b)). */
static int64_t bucket_start(const sl_grad_reducer *r, int b) {
    const int64_t s = r->n - (int64_t)(b + 1) * r->bucket;
    return s > 0 ? s : 0;
}

static int64_t bucket_end(const sl_grad_reducer *r, int b) {
    return r->n - (int64_t)b * r->bucket;
}

void sl_grad_reducer_init(sl_grad_reducer *r, sl_comm *comm, sl_tensor *grad, int64_t n,
                          int64_t bucket_elems, const int64_t *shard_len) {
    memset(r, 0, sizeof *r);
    r->comm = comm;
    r->grad = grad;
    r->n = n;
    r->bucket = bucket_elems > 0 ? bucket_elems : n;
    r->nbuckets = n > 0 ? (int)((n + r->bucket - 1) / r->bucket) : 0;
    r->views = sl_xcalloc((size_t)r->nbuckets + 1, sizeof *r->views);
    r->reqs = sl_xcalloc((size_t)r->nbuckets + 1, sizeof *r->reqs);
    for (int b = 0; b < r->nbuckets; b++)
        r->views[b] =
            sl_tensor_view1(grad, bucket_start(r, b), bucket_end(r, b) - bucket_start(r, b));
    if (!shard_len) return;
    const int ranks = sl_comm_size(comm);
    r->counts =
        sl_xcalloc((size_t)(r->nbuckets > 0 ? r->nbuckets : 1) * (size_t)ranks, sizeof(int64_t));
    for (int b = 0; b < r->nbuckets; b++) {
        const int64_t start = bucket_start(r, b), end = bucket_end(r, b);
        int64_t lo = 0; /* rank p's shard is [lo, lo + shard_len[p]) */
        for (int p = 0; p < ranks; lo += shard_len[p], p++) {
            const int64_t a = lo > start ? lo : start;
            const int64_t e = lo + shard_len[p] < end ? lo + shard_len[p] : end;
            r->counts[(int64_t)b * ranks + p] = e > a ? e - a : 0;
        }
        SL_CHECK(lo == n, "gradient shards cover %lld of %lld elements", (long long)lo,
                 (long long)n);
    }
}

void sl_grad_reducer_begin(sl_grad_reducer *r) {
    r->launched = 0;
}

void sl_grad_reducer_ready_from(sl_grad_reducer *r, int64_t offset) {
    if (sl_comm_size(r->comm) == 1) return;
    while (r->launched < r->nbuckets && bucket_start(r, r->launched) >= offset) {
        sl_tensor *v = r->views[r->launched];
        r->reqs[r->launched] =
            r->counts ? sl_comm_ireduce_scatter_sum(
                            r->comm, v, r->counts + (int64_t)r->launched * sl_comm_size(r->comm))
                      : sl_comm_iallreduce_sum(r->comm, v);
        r->launched++;
    }
    /* MPI progresses non-blocking collectives inside MPI calls: poke the ones in flight. */
    for (int b = 0; b < r->launched; b++)
        if (r->reqs[b]) sl_comm_test(r->reqs[b]);
}

void sl_grad_reducer_finish(sl_grad_reducer *r) {
    if (sl_comm_size(r->comm) == 1) return;
    sl_grad_reducer_ready_from(r, 0);
    for (int b = 0; b < r->nbuckets; b++) {
        sl_comm_wait(r->reqs[b]);
        r->reqs[b] = NULL;
    }
}

void sl_grad_reducer_free(sl_grad_reducer *r) {
    for (int b = 0; b < r->nbuckets; b++) sl_tensor_free(r->views[b]);
    free(r->views);
    free(r->reqs);
    free(r->counts);
    memset(r, 0, sizeof *r);
}
