/*
 * core/comm_impl.h - the communication interface, for transport implementations.
 * A communicator is a type-erased context plus a table of collectives (see comm.h for
 * their semantics).
 */
#ifndef SL_COMM_IMPL_H
#define SL_COMM_IMPL_H

#include "core/comm.h"

typedef struct sl_comm_i {
    const char *name;
    void (*barrier)(void *ctx);
    void (*allreduce_sum)(void *ctx, sl_tensor *t);
    sl_comm_request *(*iallreduce_sum)(void *ctx, sl_tensor *t);
    void (*wait)(void *ctx, sl_comm_request *req);
    int (*test)(void *ctx, sl_comm_request *req);
    sl_comm_request *(*ireduce_scatter_sum)(void *ctx, sl_tensor *t, const int64_t *counts);
    void (*allgather_segments)(void *ctx, sl_tensor *t, const int64_t *offsets,
                               const int64_t *counts);
    void (*allreduce_host)(void *ctx, void *buf, int n, int is_int64, int is_max);
    void (*alltoall_i64)(void *ctx, const int64_t *send, int64_t *recv, int n);
    void (*alltoallv_rows)(void *ctx, const sl_tensor *send, const int64_t *send_rows,
                           sl_tensor *recv, const int64_t *recv_rows);
    void (*alltoallv_grouped)(void *ctx, const sl_tensor *src, sl_tensor *dst,
                              const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                              bool scatter);
    /* NULL: sl_comm_ialltoallv_grouped runs alltoallv_grouped and returns a done request. */
    sl_comm_request *(*ialltoallv_grouped)(void *ctx, const sl_tensor *src, sl_tensor *dst,
                                           const int64_t *flat_rows, const int64_t *grouped_rows,
                                           int groups, bool scatter);
    void (*broadcast_bytes)(void *ctx, void *buf, int64_t nbytes, int root);
    void (*broadcast)(void *ctx, sl_tensor *t, int root);
    sl_comm *(*split)(void *ctx, int color, int key);
    /* Optional: tells the transport the communicator's new name (already in sl_comm.name). */
    void (*set_name)(void *ctx, const char *name);
    void (*free_ctx)(void *ctx);
} sl_comm_i;

struct sl_comm {
    const sl_comm_i *iface;
    void *ctx;
    int rank, size, world_rank;
    char name[64]; /* the group's name in error messages (sl_comm_set_name) */
};

/* The grouped side of an alltoallv_grouped exchange (comm.h): start[p * groups + g] = the row
 * where peer p's block of group g begins (blocks in group order, peers in rank order inside a
 * group); returns the grouped rows in all. start has size * groups entries. */
int64_t sl_comm_group_starts(const int64_t *grouped_rows, int size, int groups, int64_t *start);

struct sl_comm_request {
    sl_comm *comm;
    int done;
    void *impl; /* the transport's request state (NULL: completed when started, nothing to
                 * wait for) */
};

/* A request carrying the transport's state `impl`, or (impl NULL) one already completed. The
 * dispatcher (comm.c) sets its communicator. */
sl_comm_request *sl_comm_request_new(void *impl);

#endif
