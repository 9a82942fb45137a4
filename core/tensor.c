/* core/tensor.c - tensor handles over backend memory (see tensor.h). */
#include "core/tensor_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/log.h"
#include "core/profile.h"

size_t sl_dtype_size(sl_dtype dt) {
    switch (dt) {
    case SL_F32:
        return 4;
    case SL_BF16:
        return 2;
    case SL_I32:
        return 4;
    case SL_I64:
        return 8;
    case SL_U8:
        return 1;
    }
    sl_fatal("unknown dtype %d", (int)dt);
}

const char *sl_dtype_name(sl_dtype dt) {
    switch (dt) {
    case SL_F32:
        return "f32";
    case SL_BF16:
        return "bf16";
    case SL_I32:
        return "i32";
    case SL_I64:
        return "i64";
    case SL_U8:
        return "u8";
    }
    return "?";
}

float sl_bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int64_t shape_numel(int ndim, const int64_t *shape) {
    SL_CHECK(ndim >= 1 && ndim <= SL_MAX_DIMS, "tensor rank %d out of range 1..%d", ndim,
             SL_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        SL_CHECK(shape[i] >= 0, "negative dimension %lld", (long long)shape[i]);
        n *= shape[i];
    }
    return n;
}

/* sl_backend_tensor_bytes: the bytes now, and the peak raised to them where they pass it */
static void count_bytes(sl_backend *be, int64_t delta) {
    const int64_t now = __atomic_add_fetch(&be->tensor_bytes, delta, __ATOMIC_RELAXED);
    int64_t peak = __atomic_load_n(&be->tensor_bytes_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&be->tensor_bytes_peak, &peak, now, true,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

sl_tensor *sl_tensor_new(sl_backend *be, sl_dtype dt, int ndim, const int64_t *shape) {
    sl_tensor *t = sl_xcalloc(1, sizeof *t);
    t->be = be;
    t->dtype = dt;
    t->ndim = ndim;
    t->numel = shape_numel(ndim, shape);
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    if (be->iface.set_alloc_context) { /* names the tensor if the device runs out of memory */
        char what[96];
        snprintf(what, sizeof what, "a %s tensor ", sl_dtype_name(dt));
        sl_tensor_shape_str(t, what + strlen(what), sizeof what - strlen(what));
        be->iface.set_alloc_context(be->ctx, what);
        t->data = be->iface.alloc(be->ctx, (size_t)t->numel * sl_dtype_size(dt));
        be->iface.set_alloc_context(be->ctx, NULL);
    } else {
        t->data = be->iface.alloc(be->ctx, (size_t)t->numel * sl_dtype_size(dt));
    }
    count_bytes(be, t->numel * (int64_t)sl_dtype_size(dt));
    return t;
}

sl_tensor *sl_tensor_new1(sl_backend *be, sl_dtype dt, int64_t d0) {
    return sl_tensor_new(be, dt, 1, (int64_t[]){d0});
}
sl_tensor *sl_tensor_new2(sl_backend *be, sl_dtype dt, int64_t d0, int64_t d1) {
    return sl_tensor_new(be, dt, 2, (int64_t[]){d0, d1});
}
sl_tensor *sl_tensor_new3(sl_backend *be, sl_dtype dt, int64_t d0, int64_t d1, int64_t d2) {
    return sl_tensor_new(be, dt, 3, (int64_t[]){d0, d1, d2});
}

sl_tensor *sl_tensor_view_handle(void) {
    sl_tensor *t = sl_xcalloc(1, sizeof *t);
    t->is_view = true;
    return t;
}

sl_tensor *sl_tensor_view_set(sl_tensor *t, const sl_tensor *base, int64_t offset, int ndim,
                              const int64_t *shape) {
    SL_CHECK(t->is_view, "sl_tensor_view_set on a tensor that owns its memory");
    int64_t n = shape_numel(ndim, shape);
    SL_CHECK(offset >= 0 && offset + n <= base->numel,
             "view [%lld, %lld) outside a tensor of %lld elements", (long long)offset,
             (long long)(offset + n), (long long)base->numel);
    t->be = base->be;
    t->dtype = base->dtype;
    t->ndim = ndim;
    t->numel = n;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->data = (char *)base->data + (size_t)offset * sl_dtype_size(base->dtype);
    return t;
}

sl_tensor *sl_tensor_view_set1(sl_tensor *view, const sl_tensor *base, int64_t offset, int64_t d0) {
    return sl_tensor_view_set(view, base, offset, 1, (int64_t[]){d0});
}
sl_tensor *sl_tensor_view_set2(sl_tensor *view, const sl_tensor *base, int64_t offset, int64_t d0,
                               int64_t d1) {
    return sl_tensor_view_set(view, base, offset, 2, (int64_t[]){d0, d1});
}

sl_tensor *sl_tensor_view(sl_tensor *base, int64_t offset, int ndim, const int64_t *shape) {
    return sl_tensor_view_set(sl_tensor_view_handle(), base, offset, ndim, shape);
}

sl_tensor *sl_tensor_view1(sl_tensor *base, int64_t offset, int64_t d0) {
    return sl_tensor_view(base, offset, 1, (int64_t[]){d0});
}
sl_tensor *sl_tensor_view2(sl_tensor *base, int64_t offset, int64_t d0, int64_t d1) {
    return sl_tensor_view(base, offset, 2, (int64_t[]){d0, d1});
}
sl_tensor *sl_tensor_view3(sl_tensor *base, int64_t offset, int64_t d0, int64_t d1, int64_t d2) {
    return sl_tensor_view(base, offset, 3, (int64_t[]){d0, d1, d2});
}

void sl_tensor_reshape(sl_tensor *t, int ndim, const int64_t *shape) {
    int64_t n = shape_numel(ndim, shape);
    SL_CHECK(n == t->numel || (t->is_view && n <= t->numel),
             "reshape to %lld elements of a tensor with %lld", (long long)n, (long long)t->numel);
    t->ndim = ndim;
    t->numel = n;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
}

void sl_tensor_free(sl_tensor *t) {
    if (!t) return;
    if (!t->is_view) {
        t->be->iface.free(t->be->ctx, t->data);
        count_bytes(t->be, -t->numel * (int64_t)sl_dtype_size(t->dtype));
    }
    free(t);
}

void sl_tensor_trade(sl_tensor **spare, sl_tensor **live) {
    const int64_t rows = sl_tensor_rows(*live);
    if (!*spare || sl_tensor_rows(*spare) < rows) {
        sl_tensor_free(*spare);
        *spare = sl_tensor_new2((*live)->be, (*live)->dtype, rows, sl_tensor_dim(*live, -1));
    }
    sl_tensor *t = *spare;
    *spare = *live, *live = t;
}

int sl_tensor_ndim(const sl_tensor *t) {
    return t->ndim;
}
int64_t sl_tensor_dim(const sl_tensor *t, int i) {
    if (i < 0) i += t->ndim;
    SL_CHECK(i >= 0 && i < t->ndim, "dimension %d of a rank-%d tensor", i, t->ndim);
    return t->shape[i];
}
int64_t sl_tensor_numel(const sl_tensor *t) {
    return t->numel;
}
int64_t sl_tensor_rows(const sl_tensor *t) {
    return sl_rows(t);
}
sl_dtype sl_tensor_dtype(const sl_tensor *t) {
    return t->dtype;
}
size_t sl_tensor_nbytes(const sl_tensor *t) {
    return (size_t)t->numel * sl_dtype_size(t->dtype);
}
sl_backend *sl_tensor_backend(const sl_tensor *t) {
    return t->be;
}

/* A host read waits for the device: counted (sl_backend_host_reads) and, when profiling, a
 * region of its own inside the one that issued it (core/profile.h). */
static void read_begin(sl_backend *be) {
    be->host_reads++;
    sl_profile_count_read(be);
    sl_profile_begin(be, SL_PROFILE_HOST_READS);
}

void sl_tensor_to_host(const sl_tensor *t, void *host) {
    read_begin(t->be);
    t->be->iface.to_host(t->be->ctx, host, t->data, sl_tensor_nbytes(t));
    sl_profile_end(t->be);
}

void sl_tensor_from_host(sl_tensor *t, const void *host) {
    t->be->iface.from_host(t->be->ctx, t->data, host, sl_tensor_nbytes(t));
}

static void check_range(const sl_tensor *t, int64_t offset, int64_t n) {
    SL_CHECK(offset >= 0 && n >= 0 && offset + n <= t->numel,
             "range [%lld, %lld) outside a tensor of %lld elements", (long long)offset,
             (long long)(offset + n), (long long)t->numel);
}

void sl_tensor_to_host_range(const sl_tensor *t, int64_t offset, int64_t n, void *host) {
    check_range(t, offset, n);
    read_begin(t->be);
    size_t es = sl_dtype_size(t->dtype);
    t->be->iface.to_host(t->be->ctx, host, (const char *)t->data + (size_t)offset * es,
                         (size_t)n * es);
    sl_profile_end(t->be);
}

void sl_tensor_from_host_range(sl_tensor *t, int64_t offset, int64_t n, const void *host) {
    check_range(t, offset, n);
    size_t es = sl_dtype_size(t->dtype);
    t->be->iface.from_host(t->be->ctx, (char *)t->data + (size_t)offset * es, host, (size_t)n * es);
}

void sl_tensor_zero(sl_tensor *t) {
    t->be->iface.memset0(t->be->ctx, t->data, sl_tensor_nbytes(t));
}

void sl_tensor_copy(sl_tensor *dst, const sl_tensor *src) {
    SL_CHECK(dst->be == src->be && dst->dtype == src->dtype && dst->numel == src->numel,
             "tensor copy between mismatched tensors (%lld vs %lld elements)",
             (long long)dst->numel, (long long)src->numel);
    dst->be->iface.copy(dst->be->ctx, dst->data, src->data, sl_tensor_nbytes(dst));
}

const char *sl_tensor_shape_str(const sl_tensor *t, char *buf, size_t len) {
    size_t off = 0;
    off += (size_t)snprintf(buf + off, len - off, "[");
    for (int i = 0; i < t->ndim && off < len; i++)
        off +=
            (size_t)snprintf(buf + off, len - off, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (off < len) snprintf(buf + off, len - off, "]");
    return buf;
}

void sl_tensor_read_start(const sl_tensor *t, void *host, sl_host_read *r) {
    r->be = t->be;
    if (t->be->iface.to_host_async) { /* queued now (counted here), waited for later */
        t->be->host_reads++;
        sl_profile_count_read(t->be);
        t->be->iface.to_host_async(t->be->ctx, host, t->data, sl_tensor_nbytes(t));
    } else {
        read_begin(t->be);
        t->be->iface.to_host(t->be->ctx, host, t->data, sl_tensor_nbytes(t));
        sl_profile_end(t->be);
    }
}

void sl_tensor_read_wait(sl_host_read *r) {
    if (r->be && r->be->iface.to_host_async && r->be->iface.synchronize) {
        sl_profile_begin(r->be, SL_PROFILE_HOST_READS);
        r->be->iface.synchronize(r->be->ctx);
        sl_profile_end(r->be);
    }
    r->be = NULL;
}
