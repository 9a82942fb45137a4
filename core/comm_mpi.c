/*
 * core/comm_mpi.c - the MPI transport of the communication interface.
 *
 * Works on host memory. Tensors of a backend whose memory is not host-addressable are
 * staged through a host buffer (correct everywhere; the NCCL transport is the fast path for
 * device tensors). Element counts above INT_MAX are sent in chunks, because the MPI-3 API
 * Open MPI provides takes int counts.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/comm_impl.h"
#include "core/log.h"
#include "core/tensor_impl.h"

typedef struct {
    MPI_Comm comm;
    int owns;            /* MPI_Comm_free on release (not for MPI_COMM_WORLD) */
    const sl_comm *self; /* for its name in error messages */
} mpi_ctx;

#define MPI_OK(call)                                                                               \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char msg_[MPI_MAX_ERROR_STRING];                                                       \
            int len_ = 0;                                                                          \
            MPI_Error_string(rc_, msg_, &len_);                                                    \
            sl_fatal("MPI: %s failed: %s", #call, msg_);                                           \
        }                                                                                          \
    } while (0)

static const sl_comm_i k_mpi_iface;

static sl_comm *wrap(MPI_Comm comm, int owns) {
    sl_comm *c = sl_xcalloc(1, sizeof *c);
    mpi_ctx *m = sl_xcalloc(1, sizeof *m);
    m->comm = comm;
    m->owns = owns;
    m->self = c;
    c->iface = &k_mpi_iface;
    c->ctx = m;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    return c;
}

static void abort_hook(int code) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
}

sl_comm *sl_comm_init_world(int *argc, char ***argv) {
    int provided = 0;
    /* FUNNELED: only the main thread calls MPI (the data reader's thread never does). */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "sluice: error: MPI_Init failed\n");
        exit(1);
    }
    sl_set_abort_hook(abort_hook);
    sl_comm *w = wrap(MPI_COMM_WORLD, 0);
    sl_comm_set_name(w, "world");
    sl_log_set_rank(w->rank, w->size);
    return w;
}

void sl_comm_finalize(sl_comm *world) {
    sl_comm_free(world);
    MPI_Finalize();
}

void sl_comm_abort(int code) {
    abort_hook(code);
    exit(code);
}

static MPI_Comm C(void *ctx) {
    return ((mpi_ctx *)ctx)->comm;
}

/* The group's name (sl_comm_set_name), for error messages. */
static const char *G(void *ctx) {
    return ((mpi_ctx *)ctx)->self->name;
}

static void mpi_barrier(void *ctx) {
    MPI_OK(MPI_Barrier(C(ctx)));
}

/* A host view of a tensor's bytes: the tensor itself, or a staging copy. */
static void *host_bytes(const sl_tensor *t, int copy_in) {
    if (sl_backend_host_memory(t->be)) return t->data;
    void *h = sl_xmalloc(sl_tensor_nbytes(t));
    if (copy_in) sl_tensor_to_host(t, h);
    return h;
}

static void host_done(sl_tensor *t, void *h, int copy_out) {
    if (h == t->data) return;
    if (copy_out) sl_tensor_from_host(t, h);
    free(h);
}

static void allreduce_floats(MPI_Comm comm, float *p, int64_t n) {
    for (int64_t off = 0; off < n; off += INT_MAX / 2) {
        int cnt = (int)(n - off < INT_MAX / 2 ? n - off : INT_MAX / 2);
        MPI_OK(MPI_Allreduce(MPI_IN_PLACE, p + off, cnt, MPI_FLOAT, MPI_SUM, comm));
    }
}

static void mpi_allreduce_sum(void *ctx, sl_tensor *t) {
    SL_CHECK(t->dtype == SL_F32, "allreduce on group %s: only f32 tensors are supported", G(ctx));
    float *h = host_bytes(t, 1);
    allreduce_floats(C(ctx), h, t->numel);
    host_done(t, h, 1);
}

typedef struct {
    MPI_Request req;
    sl_tensor *t;
    void *host;
    /* reduce-scatter: MPI leaves the rank's result at the start of the buffer; the wait
     * moves move_n floats to element move_to. The counts must live until completion. */
    int64_t move_to, move_n;
    int *counts;
} mpi_req;

static sl_comm_request *mpi_iallreduce_sum(void *ctx, sl_tensor *t) {
    SL_CHECK(t->dtype == SL_F32, "iallreduce on group %s: only f32 tensors are supported", G(ctx));
    SL_CHECK(t->numel <= INT_MAX, "iallreduce on group %s: %lld elements exceed one request",
             G(ctx), (long long)t->numel);
    mpi_req *r = sl_xcalloc(1, sizeof *r);
    r->t = t;
    r->host = host_bytes(t, 1);
    MPI_OK(
        MPI_Iallreduce(MPI_IN_PLACE, r->host, (int)t->numel, MPI_FLOAT, MPI_SUM, C(ctx), &r->req));
    return sl_comm_request_new(r);
}

/* The in-place form: each rank's input is the whole buffer, its result lands at its start
 * (MPI-3.1 section 5.10.1), moved to the rank's own segment by mpi_wait. */
static sl_comm_request *mpi_ireduce_scatter_sum(void *ctx, sl_tensor *t, const int64_t *counts) {
    MPI_Comm comm = C(ctx);
    int size = 0, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    SL_CHECK(t->dtype == SL_F32, "reduce_scatter on group %s: only f32 tensors are supported",
             G(ctx));
    mpi_req *r = sl_xcalloc(1, sizeof *r);
    r->counts = sl_xmalloc(sizeof(int) * (size_t)size);
    for (int p = 0; p < size; p++) {
        SL_CHECK(counts[p] <= INT_MAX,
                 "reduce_scatter on group %s: segment %d has %lld elements, more than one "
                 "request takes",
                 G(ctx), p, (long long)counts[p]);
        r->counts[p] = (int)counts[p];
        if (p < rank) r->move_to += counts[p];
    }
    r->move_n = counts[rank];
    r->t = t;
    r->host = host_bytes(t, 1);
    MPI_OK(
        MPI_Ireduce_scatter(MPI_IN_PLACE, r->host, r->counts, MPI_FLOAT, MPI_SUM, comm, &r->req));
    return sl_comm_request_new(r);
}

static void mpi_wait(void *ctx, sl_comm_request *req) {
    (void)ctx;
    mpi_req *r = req->impl;
    if (!req->done) MPI_OK(MPI_Wait(&r->req, MPI_STATUS_IGNORE));
    if (r->move_n > 0 && r->move_to > 0) {
        float *h = r->host;
        memmove(h + r->move_to, h, sizeof(float) * (size_t)r->move_n);
    }
    host_done(r->t, r->host, 1);
    free(r->counts);
    free(r);
    free(req);
}

static int mpi_test(void *ctx, sl_comm_request *req) {
    (void)ctx;
    mpi_req *r = req->impl;
    int flag = 0;
    MPI_OK(MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE));
    return flag;
}

static void mpi_allgather_segments(void *ctx, sl_tensor *t, const int64_t *offsets,
                                   const int64_t *counts) {
    MPI_Comm comm = C(ctx);
    int size = 0;
    MPI_Comm_size(comm, &size);
    SL_CHECK(t->dtype == SL_F32, "allgather on group %s: only f32 tensors are supported", G(ctx));
    int *rc = sl_xmalloc(sizeof(int) * (size_t)size * 2), *rd = rc + size;
    for (int p = 0; p < size; p++) { /* in range: sl_comm_allgather_segments checked */
        SL_CHECK(offsets[p] <= INT_MAX && counts[p] <= INT_MAX,
                 "allgather on group %s: segment %d beyond 2^31 elements", G(ctx), p);
        rc[p] = (int)counts[p];
        rd[p] = (int)offsets[p];
    }
    float *h = host_bytes(t, 1);
    MPI_OK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, rc, rd, MPI_FLOAT, comm));
    host_done(t, h, 1);
    free(rc);
}

static void mpi_allreduce_host(void *ctx, void *buf, int n, int is_int64, int is_max) {
    MPI_OK(MPI_Allreduce(MPI_IN_PLACE, buf, n, is_int64 ? MPI_INT64_T : MPI_DOUBLE,
                         is_max ? MPI_MAX : MPI_SUM, C(ctx)));
}

static void mpi_alltoall_i64(void *ctx, const int64_t *send, int64_t *recv, int n) {
    MPI_OK(MPI_Alltoall(send, n, MPI_INT64_T, recv, n, MPI_INT64_T, C(ctx)));
}

static void mpi_alltoallv_rows(void *ctx, const sl_tensor *send, const int64_t *send_rows,
                               sl_tensor *recv, const int64_t *recv_rows) {
    MPI_Comm comm = C(ctx);
    int size = 0;
    MPI_Comm_size(comm, &size);
    /* one row layout, rows within the tensors: sl_comm_alltoallv_rows checked */
    const int64_t w = sl_last_dim(send) * (int64_t)sl_dtype_size(send->dtype);
    int *sc = sl_xmalloc(sizeof(int) * (size_t)size * 4);
    int *sd = sc + size, *rc = sd + size, *rd = rc + size;
    int64_t so = 0, ro = 0;
    for (int p = 0; p < size; p++) {
        SL_CHECK(send_rows[p] * w <= INT_MAX && so * w <= INT_MAX && ro * w <= INT_MAX,
                 "alltoallv on group %s: exchange larger than 2 GiB per call", G(ctx));
        sc[p] = (int)(send_rows[p] * w);
        sd[p] = (int)(so * w);
        rc[p] = (int)(recv_rows[p] * w);
        rd[p] = (int)(ro * w);
        so += send_rows[p];
        ro += recv_rows[p];
    }
    void *hs = host_bytes(send, 1);
    void *hr = host_bytes(recv, 0);
    MPI_OK(MPI_Alltoallv(hs, sc, sd, MPI_BYTE, hr, rc, rd, MPI_BYTE, comm));
    host_done((sl_tensor *)send, hs, 0);
    host_done(recv, hr, 1);
    free(sc);
}

/*
 * MPI_Alltoallw with one derived datatype per peer on the grouped side: peer p's rows form
 * `groups` blocks at byte displacements inside the grouped buffer (an hindexed type over
 * bytes), so MPI copies them straight to (or from) their places. The flat side is plain
 * bytes at per-peer displacements.
 */
static void mpi_alltoallv_grouped(void *ctx, const sl_tensor *src, sl_tensor *dst,
                                  const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                                  bool scatter) {
    MPI_Comm comm = C(ctx);
    int size = 0;
    MPI_Comm_size(comm, &size);
    /* one row layout, rows within the tensors: sl_comm_alltoallv_grouped checked */
    const int64_t w = sl_last_dim(src) * (int64_t)sl_dtype_size(src->dtype);
    int64_t *start = sl_xmalloc(sizeof(int64_t) * (size_t)size * (size_t)groups);
    const int64_t row = sl_comm_group_starts(grouped_rows, size, groups, start);
    int64_t flat_total = 0;
    for (int p = 0; p < size; p++) flat_total += flat_rows[p];
    SL_CHECK(row * w <= INT_MAX && flat_total * w <= INT_MAX,
             "alltoallv_grouped on group %s: exchange larger than 2 GiB per call", G(ctx));
    int *fc = sl_xmalloc(sizeof(int) * (size_t)size * 4), *fd = fc + size, *gc = fd + size,
        *gd = gc + size;
    MPI_Datatype *ft = sl_xmalloc(sizeof(MPI_Datatype) * (size_t)size * 2), *gt = ft + size;
    int *lens = sl_xmalloc(sizeof(int) * (size_t)groups);
    MPI_Aint *disp = sl_xmalloc(sizeof(MPI_Aint) * (size_t)groups);
    int64_t off = 0;
    for (int p = 0; p < size; p++) {
        fc[p] = (int)(flat_rows[p] * w);
        fd[p] = (int)(off * w);
        ft[p] = MPI_BYTE;
        off += flat_rows[p];
        for (int g = 0; g < groups; g++) {
            lens[g] = (int)(grouped_rows[p * groups + g] * w);
            disp[g] = (MPI_Aint)(start[p * groups + g] * w);
        }
        MPI_OK(MPI_Type_create_hindexed(groups, lens, disp, MPI_BYTE, &gt[p]));
        MPI_OK(MPI_Type_commit(&gt[p]));
        gc[p] = 1;
        gd[p] = 0;
    }
    void *hs = host_bytes(src, 1);
    void *hd = host_bytes(dst, 1); /* staged: keep the rows this call does not write */
    if (scatter)
        MPI_OK(MPI_Alltoallw(hs, fc, fd, ft, hd, gc, gd, gt, comm));
    else
        MPI_OK(MPI_Alltoallw(hs, gc, gd, gt, hd, fc, fd, ft, comm));
    host_done((sl_tensor *)src, hs, 0);
    host_done(dst, hd, 1);
    for (int p = 0; p < size; p++) MPI_Type_free(&gt[p]);
    free(start), free(fc), free(ft), free(lens), free(disp);
}

static void mpi_broadcast_bytes(void *ctx, void *buf, int64_t nbytes, int root) {
    for (int64_t off = 0; off < nbytes; off += INT_MAX) {
        int cnt = (int)(nbytes - off < INT_MAX ? nbytes - off : INT_MAX);
        MPI_OK(MPI_Bcast((char *)buf + off, cnt, MPI_BYTE, root, C(ctx)));
    }
}

static void mpi_broadcast(void *ctx, sl_tensor *t, int root) {
    void *h = host_bytes(t, 1);
    mpi_broadcast_bytes(ctx, h, (int64_t)sl_tensor_nbytes(t), root);
    host_done(t, h, 1);
}

static sl_comm *mpi_split(void *ctx, int color, int key) {
    MPI_Comm sub;
    MPI_OK(MPI_Comm_split(C(ctx), color, key, &sub));
    return wrap(sub, 1);
}

static void mpi_free_ctx(void *ctx) {
    mpi_ctx *m = ctx;
    if (m->owns) MPI_Comm_free(&m->comm);
    free(m);
}

static const sl_comm_i k_mpi_iface = {
    .name = "mpi",
    .barrier = mpi_barrier,
    .allreduce_sum = mpi_allreduce_sum,
    .iallreduce_sum = mpi_iallreduce_sum,
    .wait = mpi_wait,
    .test = mpi_test,
    .ireduce_scatter_sum = mpi_ireduce_scatter_sum,
    .allgather_segments = mpi_allgather_segments,
    .allreduce_host = mpi_allreduce_host,
    .alltoall_i64 = mpi_alltoall_i64,
    .alltoallv_rows = mpi_alltoallv_rows,
    .alltoallv_grouped = mpi_alltoallv_grouped,
    .broadcast_bytes = mpi_broadcast_bytes,
    .broadcast = mpi_broadcast,
    .split = mpi_split,
    .free_ctx = mpi_free_ctx,
};
