/*
 * core/comm_nccl_exchange.c - the NCCL transport's expert exchange (core/comm_nccl.c has the
 * transport's design): the all-to-all of rows between the ranks of a group, flat on both
 * sides or regrouped by expert on one, as grouped ncclSend / ncclRecv pairs on the
 * communication stream.
 */
#include <stdlib.h>

#include "core/comm_impl.h"
#include "core/comm_nccl_impl.h"
#include "core/comm_rows.h"
#include "core/log.h"
#include "core/tensor_impl.h"

/* ---- the expert exchange ------------------------------------------------------------------- */

static void copy_d2d(const nccl_ctx *x, void *dst, const void *src, size_t bytes, const char *op) {
    if (bytes > 0)
        CK(x, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, x->sh->stream), op);
}

/* Queues a send of `bytes` to peer p and a receive of `rbytes` from it (skipping empty ones;
 * both sides skip alike, the counts being each other's). Inside a group. */
static void sendrecv(const nccl_ctx *x, const void *s, size_t bytes, void *r, size_t rbytes, int p,
                     const char *op) {
    if (bytes > 0) NK(x, ncclSend(s, bytes, ncclUint8, p, x->nccl, x->sh->stream), op);
    if (rbytes > 0) NK(x, ncclRecv(r, rbytes, ncclUint8, p, x->nccl, x->sh->stream), op);
}

void nccl_alltoallv_rows(void *ctx, const sl_tensor *send, const int64_t *send_rows,
                         sl_tensor *recv, const int64_t *recv_rows) {
    nccl_ctx *x = ncx(ctx);
    if (nc_on_host(send) && nc_on_host(recv)) {
        sl_comm_alltoallv_rows(x->mpi, send, send_rows, recv, recv_rows);
        return;
    }
    /* one row layout, rows within the tensors: sl_comm_alltoallv_rows checked */
    SL_CHECK(!nc_on_host(send) && !nc_on_host(recv),
             "alltoallv on group %s: both tensors must be device tensors", x->self->name);
    const size_t w = (size_t)sl_last_dim(send) * sl_dtype_size(send->dtype);
    const char *s = send->data;
    char *r = recv->data;
    nc_enter(x, "alltoallv");
    NK(x, ncclGroupStart(), "alltoallv");
    int64_t so = 0, ro = 0;
    for (int p = 0; p < x->self->size; p++) {
        const size_t sb = (size_t)send_rows[p] * w, rb = (size_t)recv_rows[p] * w;
        if (p == x->self->rank) {
            SL_CHECK(sb == rb, "alltoallv on group %s: %lld rows to self but %lld expected",
                     x->self->name, (long long)send_rows[p], (long long)recv_rows[p]);
            copy_d2d(x, r + (size_t)ro * w, s + (size_t)so * w, sb, "alltoallv");
        } else {
            sendrecv(x, s + (size_t)so * w, sb, r + (size_t)ro * w, rb, p, "alltoallv");
        }
        so += send_rows[p];
        ro += recv_rows[p];
    }
    NK(x, ncclGroupEnd(), "alltoallv");
    nc_leave(x, "alltoallv");
}

/* Device staging of at least `bytes` on the communication stream. Grows rarely (cudaFree
 * synchronizes the device, so no queued copy still uses the old buffer). */
static char *stage(nccl_ctx *x, size_t bytes, const char *op) {
    nccl_shared *sh = x->sh;
    if (bytes > sh->stage_cap) {
        if (sh->stage) CK(x, cudaFree(sh->stage), op);
        sh->stage = NULL;
        sh->stage_cap = bytes + bytes / 4;
        CK(x, cudaMalloc(&sh->stage, sh->stage_cap), op);
    }
    return sh->stage;
}

/*
 * NCCL matches a send with a receive of the same size, and the flat side does not know how
 * its peer splits the rows into groups. So each peer's rows travel as one message between the
 * flat side and a contiguous staging area, and a copy kernel on the communication stream
 * moves them between staging and the group blocks (the peer's own rows move straight from one
 * tensor to the other): size * groups blocks of rows, one launch per 64 of them
 * (core/comm_rows.h), where a cudaMemcpyAsync per block would cost a launch each.
 */
static const char *grouped_op(bool scatter) {
    return scatter ? "alltoallv_grouped (scatter)" : "alltoallv_grouped (gather)";
}

/* Queues the exchange on the communication stream after the compute stream's work so far
 * (host tensors: runs it over MPI at once and returns false, nothing queued). */
static bool queue_grouped(nccl_ctx *x, const sl_tensor *src, sl_tensor *dst,
                          const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                          bool scatter) {
    if (nc_on_host(src) && nc_on_host(dst)) {
        sl_comm_alltoallv_grouped(x->mpi, src, dst, flat_rows, grouped_rows, groups, scatter);
        return false;
    }
    const char *op = grouped_op(scatter);
    const int size = x->self->size, me = x->self->rank;
    /* one row layout, rows within the tensors: sl_comm_alltoallv_grouped checked */
    SL_CHECK(!nc_on_host(src) && !nc_on_host(dst),
             "%s on group %s: both tensors must be device tensors", op, x->self->name);
    const size_t w = (size_t)sl_last_dim(src) * sl_dtype_size(src->dtype);
    const sl_tensor *flat = scatter ? src : dst, *grouped = scatter ? dst : src;
    int64_t *start = sl_xmalloc(sizeof(int64_t) * (size_t)size * (size_t)groups);
    sl_comm_group_starts(grouped_rows, size, groups, start);
    int64_t *peer_rows = sl_xcalloc((size_t)size, sizeof(int64_t));
    int64_t staged = 0;
    for (int p = 0; p < size; p++) {
        for (int g = 0; g < groups; g++) peer_rows[p] += grouped_rows[p * groups + g];
        if (p != me) staged += peer_rows[p];
    }
    SL_CHECK(peer_rows[me] == flat_rows[me],
             "%s on group %s: %lld grouped rows of this rank but %lld flat", op, x->self->name,
             (long long)peer_rows[me], (long long)flat_rows[me]);
    char *st = staged > 0 ? stage(x, (size_t)staged * w, op) : NULL;
    char *fl = flat->data, *gr = grouped->data;
    /* The blocks between each peer's contiguous rows (staging, or the flat side for this
     * rank) and the group blocks: sources for the gather, destinations for the scatter. */
    sl_row_block *blk = sl_xmalloc(sizeof *blk * (size_t)size * (size_t)groups);
    int64_t fo = 0, so = 0;
    for (int p = 0; p < size; p++) {
        char *peer = p == me ? fl + (size_t)fo * w : st + (size_t)so * w;
        int64_t r = 0;
        for (int g = 0; g < groups; r += grouped_rows[p * groups + g], g++) {
            char *contiguous = peer + (size_t)r * w,
                 *block = gr + (size_t)start[p * groups + g] * w;
            blk[p * groups + g] = (sl_row_block){.src = scatter ? contiguous : block,
                                                 .dst = scatter ? block : contiguous,
                                                 .rows = grouped_rows[p * groups + g]};
        }
        fo += flat_rows[p];
        if (p != me) so += peer_rows[p];
    }
    nc_enter(x, op);
    /* gather: pack each peer's blocks into staging first */
    if (!scatter) CK(x, sl_cuda_copy_row_blocks(blk, size * groups, w, x->sh->stream), op);
    NK(x, ncclGroupStart(), op);
    fo = so = 0;
    for (int p = 0; p < size; p++) {
        if (p != me) {
            char *f = fl + (size_t)fo * w, *s = st + (size_t)so * w;
            const size_t fb = (size_t)flat_rows[p] * w, sb = (size_t)peer_rows[p] * w;
            if (scatter)
                sendrecv(x, f, fb, s, sb, p, op);
            else
                sendrecv(x, s, sb, f, fb, p, op);
            so += peer_rows[p];
        }
        fo += flat_rows[p];
    }
    NK(x, ncclGroupEnd(), op);
    /* scatter: unpack staging (and this rank's own rows) into the group blocks */
    if (scatter) CK(x, sl_cuda_copy_row_blocks(blk, size * groups, w, x->sh->stream), op);
    free(blk);
    free(start);
    free(peer_rows);
    return true;
}

void nccl_alltoallv_grouped(void *ctx, const sl_tensor *src, sl_tensor *dst,
                            const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                            bool scatter) {
    nccl_ctx *x = ncx(ctx);
    if (queue_grouped(x, src, dst, flat_rows, grouped_rows, groups, scatter))
        nc_leave(x, grouped_op(scatter));
}

/* The compute stream does not wait here: the request's event, recorded after the exchange on
 * the communication stream, is what sl_comm_wait makes it wait for. */
sl_comm_request *nccl_ialltoallv_grouped(void *ctx, const sl_tensor *src, sl_tensor *dst,
                                         const int64_t *flat_rows, const int64_t *grouped_rows,
                                         int groups, bool scatter) {
    nccl_ctx *x = ncx(ctx);
    if (!queue_grouped(x, src, dst, flat_rows, grouped_rows, groups, scatter))
        return sl_comm_request_new(NULL); /* completed over MPI */
    return nc_stream_request(x, "ialltoallv_grouped");
}
