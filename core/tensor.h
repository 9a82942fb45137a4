/*
 * core/tensor.h - tensors whose memory belongs to a backend.
 *
 * sl_tensor is an opaque handle: model code sees shape and dtype, never the data pointer.
 * Data moves between host and a tensor only through sl_tensor_to_host/sl_tensor_from_host,
 * and computation only through the operations in core/ops.h. That is what lets the same
 * model code run on the CPU and on a GPU. Backends see the struct through core/tensor_impl.h.
 *
 * Layout is always dense row-major. A view shares its base tensor's memory (a contiguous
 * sub-range); freeing a view never frees the memory.
 */
#ifndef SL_TENSOR_H
#define SL_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_backend sl_backend;
typedef struct sl_tensor sl_tensor;

typedef enum {
    SL_F32 = 0, /* activations and everything on the CPU; master weights on the GPU */
    SL_BF16,    /* GPU storage type of weights and activations */
    SL_I32,     /* token ids, expert indices, counts */
    SL_I64,
    SL_U8,
} sl_dtype;

#define SL_MAX_DIMS 4

/* Bytes per element of dt, and its name ("f32", "bf16", "i32", ...). */
size_t sl_dtype_size(sl_dtype dt);
const char *sl_dtype_name(sl_dtype dt);
/* f rounded to bf16 (nearest even) and back, as a device's convert rounds it; f finite. For
 * host references that must see the values a bf16 tensor holds. */
float sl_bf16_round(float f);

/* A new zero-filled tensor on backend `be`. */
sl_tensor *sl_tensor_new(sl_backend *be, sl_dtype dt, int ndim, const int64_t *shape);
sl_tensor *sl_tensor_new1(sl_backend *be, sl_dtype dt, int64_t d0);
sl_tensor *sl_tensor_new2(sl_backend *be, sl_dtype dt, int64_t d0, int64_t d1);
sl_tensor *sl_tensor_new3(sl_backend *be, sl_dtype dt, int64_t d0, int64_t d1, int64_t d2);

/* A view of `numel(shape)` elements of `base` starting at element `offset`. */
sl_tensor *sl_tensor_view(sl_tensor *base, int64_t offset, int ndim, const int64_t *shape);
sl_tensor *sl_tensor_view1(sl_tensor *base, int64_t offset, int64_t d0);
sl_tensor *sl_tensor_view2(sl_tensor *base, int64_t offset, int64_t d0, int64_t d1);
sl_tensor *sl_tensor_view3(sl_tensor *base, int64_t offset, int64_t d0, int64_t d1, int64_t d2);

/* Views without an allocation per use, for hot loops whose views change every step (row
 * chunks, routed-row counts): sl_tensor_view_handle makes a view handle that points nowhere
 * (once, at setup); sl_tensor_view_set re-points it at numel(shape) elements of `base` from
 * `offset`, with the checks of sl_tensor_view. Free the handle with sl_tensor_free. */
sl_tensor *sl_tensor_view_handle(void);
sl_tensor *sl_tensor_view_set(sl_tensor *view, const sl_tensor *base, int64_t offset, int ndim,
                              const int64_t *shape);
sl_tensor *sl_tensor_view_set1(sl_tensor *view, const sl_tensor *base, int64_t offset, int64_t d0);
sl_tensor *sl_tensor_view_set2(sl_tensor *view, const sl_tensor *base, int64_t offset, int64_t d0,
                               int64_t d1);

/* Changes the shape of a tensor in place (same number of elements, or fewer for a view
 * whose caller shrinks the logical size, e.g. a shorter last micro-batch). */
void sl_tensor_reshape(sl_tensor *t, int ndim, const int64_t *shape);

/* Frees the handle; frees the memory too when `t` owns it (not a view). NULL is a no-op. */
void sl_tensor_free(sl_tensor *t);

/* Exchanges the tensors *spare and *live after making *spare a matrix of at least *live's rows,
 * of its width and dtype on its backend (a new one when null or smaller; *spare's contents are
 * not kept): a buffer in use changes hands (moe/experts.h, the parked rows of the deferred
 * weight gradients) and its owner goes on in the spare, without a copy. */
void sl_tensor_trade(sl_tensor **spare, sl_tensor **live);

/* The shape: dimensions, one dimension's extent, elements. */
int sl_tensor_ndim(const sl_tensor *t);
int64_t sl_tensor_dim(const sl_tensor *t, int i); /* negative i counts from the end */
int64_t sl_tensor_numel(const sl_tensor *t);
/* Rows when the tensor is seen as a matrix [numel / last_dim, last_dim]. */
int64_t sl_tensor_rows(const sl_tensor *t);
sl_dtype sl_tensor_dtype(const sl_tensor *t);
size_t sl_tensor_nbytes(const sl_tensor *t);
sl_backend *sl_tensor_backend(const sl_tensor *t);

/* Copies between the tensor and host memory (blocking; `host` holds numel elements). */
void sl_tensor_to_host(const sl_tensor *t, void *host);
void sl_tensor_from_host(sl_tensor *t, const void *host);
/* Copies the elements [offset, offset+n) of the tensor to/from host memory. */
void sl_tensor_to_host_range(const sl_tensor *t, int64_t offset, int64_t n, void *host);
void sl_tensor_from_host_range(sl_tensor *t, int64_t offset, int64_t n, const void *host);
void sl_tensor_zero(sl_tensor *t);

/* A host read in two halves, so that the host can queue more device work between asking for
 * a value and needing it: start queues the copy after the work that writes t (on the CPU it
 * copies at once), wait blocks until `host` holds the data. Model code uses it for the few
 * named reads it needs (docs/architecture.md, "Host reads"). */
typedef struct {
    sl_backend *be;
} sl_host_read;
void sl_tensor_read_start(const sl_tensor *t, void *host, sl_host_read *r);
void sl_tensor_read_wait(sl_host_read *r);
/* dst = src (same backend, same dtype, same numel). */
void sl_tensor_copy(sl_tensor *dst, const sl_tensor *src);

/* "[2, 3, 4]" into buf; returns buf. */
const char *sl_tensor_shape_str(const sl_tensor *t, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
