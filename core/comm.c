/* core/comm.c - dispatch of the communication interface (see comm.h). */
#include "core/comm_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/tensor_impl.h"

const char *sl_comm_transport(const sl_comm *c) {
    return c->iface->name;
}
int sl_comm_rank(const sl_comm *c) {
    return c->rank;
}
int sl_comm_size(const sl_comm *c) {
    return c->size;
}
int sl_comm_world_rank(const sl_comm *c) {
    return c->world_rank;
}

sl_comm *sl_comm_split(sl_comm *c, int color, int key) {
    sl_comm *s = c->iface->split(c->ctx, color, key);
    char name[96];
    snprintf(name, sizeof name, "%s/split%d", c->name, color);
    sl_comm_set_name(s, name);
    return s;
}

void sl_comm_set_name(sl_comm *c, const char *name) {
    size_t n = strlen(name);
    if (n >= sizeof c->name) n = sizeof c->name - 1; /* kept short, as documented */
    memmove(c->name, name, n);
    c->name[n] = '\0';
    if (c->iface->set_name) c->iface->set_name(c->ctx, c->name);
}

const char *sl_comm_name(const sl_comm *c) {
    return c->name;
}

void sl_comm_free(sl_comm *c) {
    if (!c) return;
    c->iface->free_ctx(c->ctx);
    free(c);
}

void sl_comm_barrier(sl_comm *c) {
    c->iface->barrier(c->ctx);
}

void sl_comm_allreduce_sum(sl_comm *c, sl_tensor *t) {
    if (c->size > 1) c->iface->allreduce_sum(c->ctx, t);
}

sl_comm_request *sl_comm_iallreduce_sum(sl_comm *c, sl_tensor *t) {
    sl_comm_request *r = c->iface->iallreduce_sum(c->ctx, t);
    r->comm = c;
    return r;
}

sl_comm_request *sl_comm_request_new(void *impl) {
    sl_comm_request *r = sl_xcalloc(1, sizeof *r);
    r->impl = impl;
    r->done = impl == NULL;
    return r;
}

int sl_comm_test(sl_comm_request *req) {
    if (!req) return 1;
    if (!req->done) req->done = req->comm->iface->test(req->comm->ctx, req);
    return req->done;
}

sl_comm_request *sl_comm_ireduce_scatter_sum(sl_comm *c, sl_tensor *t, const int64_t *counts) {
    int64_t total = 0;
    for (int p = 0; p < c->size; p++) {
        SL_CHECK(counts[p] >= 0, "reduce_scatter on group %s: segment %d has %lld elements",
                 c->name, p, (long long)counts[p]);
        total += counts[p];
    }
    SL_CHECK(total == sl_tensor_numel(t),
             "reduce_scatter on group %s: segments cover %lld of %lld elements", c->name,
             (long long)total, (long long)sl_tensor_numel(t));
    sl_comm_request *r;
    if (c->size > 1) {
        r = c->iface->ireduce_scatter_sum(c->ctx, t, counts);
    } else { /* the one segment is the whole tensor, already its own sum */
        r = sl_comm_request_new(NULL);
    }
    r->comm = c;
    return r;
}

void sl_comm_allgather_segments(sl_comm *c, sl_tensor *t, const int64_t *offsets,
                                const int64_t *counts) {
    for (int p = 0; p < c->size; p++)
        SL_CHECK(offsets[p] >= 0 && counts[p] >= 0 && offsets[p] + counts[p] <= t->numel,
                 "allgather on group %s: segment %d out of range", c->name, p);
    if (c->size > 1) c->iface->allgather_segments(c->ctx, t, offsets, counts);
}

void sl_comm_wait(sl_comm_request *req) {
    if (!req) return;
    if (!req->impl) { /* completed when started */
        free(req);
        return;
    }
    req->comm->iface->wait(req->comm->ctx, req);
}

void sl_comm_allreduce_sum_f64(sl_comm *c, double *buf, int n) {
    if (c->size > 1) c->iface->allreduce_host(c->ctx, buf, n, 0, 0);
}

void sl_comm_allreduce_sum_i64(sl_comm *c, int64_t *buf, int n) {
    if (c->size > 1) c->iface->allreduce_host(c->ctx, buf, n, 1, 0);
}

void sl_comm_allreduce_max_f64(sl_comm *c, double *buf, int n) {
    if (c->size > 1) c->iface->allreduce_host(c->ctx, buf, n, 0, 1);
}

bool sl_comm_agree(sl_comm *c, bool failed) {
    const int n = sl_comm_size(c), me = sl_comm_rank(c);
    /* one max over: minus the lowest failing rank, some rank failed, some rank did not */
    double v[3] = {failed ? -(double)me : -(double)n, failed ? 1.0 : 0.0, failed ? 0.0 : 1.0};
    sl_comm_allreduce_max_f64(c, v, 3);
    sl_error_release(failed && me == (int)-v[0], v[2] == 0.0);
    return v[1] > 0.0;
}

void sl_comm_alltoall_i64(sl_comm *c, const int64_t *send, int64_t *recv, int n) {
    c->iface->alltoall_i64(c->ctx, send, recv, n);
}

/* What every transport's row exchange relies on: one dtype and row width on both sides, and
 * the rows counted on each side within its tensor. */
static void check_rows(const sl_comm *c, const char *op, const sl_tensor *a, int64_t a_rows,
                       const sl_tensor *b, int64_t b_rows) {
    SL_CHECK(a->dtype == b->dtype && sl_last_dim(a) == sl_last_dim(b),
             "%s on group %s: row layouts differ", op, c->name);
    SL_CHECK(a_rows <= sl_rows(a) && b_rows <= sl_rows(b),
             "%s on group %s: %lld rows from %lld, %lld rows into %lld", op, c->name,
             (long long)a_rows, (long long)sl_rows(a), (long long)b_rows, (long long)sl_rows(b));
}

static int64_t total(const int64_t *v, int n) {
    int64_t s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s;
}

int64_t sl_comm_group_starts(const int64_t *grouped_rows, int size, int groups, int64_t *start) {
    int64_t row = 0;
    for (int g = 0; g < groups; g++)
        for (int p = 0; p < size; p++) {
            start[p * groups + g] = row;
            row += grouped_rows[p * groups + g];
        }
    return row;
}

void sl_comm_alltoallv_rows(sl_comm *c, const sl_tensor *send, const int64_t *send_rows,
                            sl_tensor *recv, const int64_t *recv_rows) {
    check_rows(c, "alltoallv", send, total(send_rows, c->size), recv, total(recv_rows, c->size));
    c->iface->alltoallv_rows(c->ctx, send, send_rows, recv, recv_rows);
}

static void check_grouped(const sl_comm *c, const sl_tensor *src, const sl_tensor *dst,
                          const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                          bool scatter) {
    const int64_t flat = total(flat_rows, c->size), grouped = total(grouped_rows, c->size * groups);
    check_rows(c, scatter ? "alltoallv_grouped (scatter)" : "alltoallv_grouped (gather)", src,
               scatter ? flat : grouped, dst, scatter ? grouped : flat);
}

void sl_comm_alltoallv_grouped(sl_comm *c, const sl_tensor *src, sl_tensor *dst,
                               const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                               bool scatter) {
    check_grouped(c, src, dst, flat_rows, grouped_rows, groups, scatter);
    c->iface->alltoallv_grouped(c->ctx, src, dst, flat_rows, grouped_rows, groups, scatter);
}

sl_comm_request *sl_comm_ialltoallv_grouped(sl_comm *c, const sl_tensor *src, sl_tensor *dst,
                                            const int64_t *flat_rows, const int64_t *grouped_rows,
                                            int groups, bool scatter) {
    check_grouped(c, src, dst, flat_rows, grouped_rows, groups, scatter);
    sl_comm_request *r;
    if (c->iface->ialltoallv_grouped) {
        r = c->iface->ialltoallv_grouped(c->ctx, src, dst, flat_rows, grouped_rows, groups,
                                         scatter);
    } else {
        c->iface->alltoallv_grouped(c->ctx, src, dst, flat_rows, grouped_rows, groups, scatter);
        r = sl_comm_request_new(NULL);
    }
    r->comm = c;
    return r;
}

void sl_comm_broadcast(sl_comm *c, sl_tensor *t, int root) {
    if (c->size > 1) c->iface->broadcast(c->ctx, t, root);
}

void sl_comm_broadcast_bytes(sl_comm *c, void *buf, int64_t nbytes, int root) {
    if (c->size > 1) c->iface->broadcast_bytes(c->ctx, buf, nbytes, root);
}
