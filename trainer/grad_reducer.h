/*
 * trainer/grad_reducer.h - sums one parameter group's gradient over ranks in buckets,
 * overlapping the communication with the rest of the backward.
 *
 * The group's flat gradient buffer is cut into buckets of bucket_elems elements counted
 * from the END of the buffer (the backward completes the last layers' gradients first).
 * During the last micro-batch's backward the model reports, layer by layer, from which
 * offset on the gradients are final; every bucket entirely inside the final tail starts its
 * non-blocking all-reduce at once, and later calls let the started ones progress. finish()
 * starts whatever is left and waits for all of them.
 *
 * With ZeRO-1 each rank updates only its shard of the buffer (consecutive shards in rank
 * order), so it needs only its shard summed: the buckets are reduce-scattered instead (each
 * bucket cut where it crosses shard boundaries), half the bytes of an all-reduce, and after
 * finish() only the rank's own shard of the buffer is defined.
 */
#ifndef SL_GRAD_REDUCER_H
#define SL_GRAD_REDUCER_H

#include <stdint.h>

#include "core/comm.h"
#include "core/tensor.h"

typedef struct {
    sl_comm *comm;
    sl_tensor *grad; /* the group's flat gradient */
    int64_t n;       /* elements */
    int64_t bucket;  /* elements per bucket */
    int nbuckets;
    int launched;      /* buckets started, counted from the end */
    sl_tensor **views; /* [nbuckets] bucket views, kept alive while in flight */
    sl_comm_request **reqs;
    int64_t *counts; /* [nbuckets * ranks] with shards: rank r's part of bucket b; else NULL */
} sl_grad_reducer;

/* shard_len: NULL to all-reduce, or [ranks] the length of each rank's ZeRO-1 shard (they
 * tile [0, n) in rank order) to reduce-scatter. */
void sl_grad_reducer_init(sl_grad_reducer *r, sl_comm *comm, sl_tensor *grad, int64_t n,
                          int64_t bucket_elems, const int64_t *shard_len);
/* Starts a step's reduction (no bucket in flight). */
void sl_grad_reducer_begin(sl_grad_reducer *r);
/* Gradients at offsets >= `offset` are final: start the buckets they cover. */
void sl_grad_reducer_ready_from(sl_grad_reducer *r, int64_t offset);
/* Starts the rest and waits for every bucket. */
void sl_grad_reducer_finish(sl_grad_reducer *r);
void sl_grad_reducer_free(sl_grad_reducer *r);

#endif
