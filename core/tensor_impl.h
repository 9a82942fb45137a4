/*
 * core/tensor_impl.h - the tensor struct, for backend implementations only.
 *
 * Model, MoE and trainer code must not include this file: it is the line between code that
 * may dereference device or host memory (backends, operation kernels) and code that may not.
 */
#ifndef SL_TENSOR_IMPL_H
#define SL_TENSOR_IMPL_H

#include "core/tensor.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sl_tensor {
    sl_backend *be;
    sl_dtype dtype;
    int ndim;
    int64_t shape[SL_MAX_DIMS];
    int64_t numel;
    void *data;   /* host pointer (CPU) or device pointer (CUDA); includes a view's offset */
    bool is_view; /* views do not own `data` */
};

/* A host-memory tensor's data as fp32 or int32 (the CPU backend's kernels), and its last
 * dimension. */
static inline float *sl_f32(const sl_tensor *t) {
    return (float *)t->data;
}
static inline int32_t *sl_i32(const sl_tensor *t) {
    return (int32_t *)t->data;
}
static inline int64_t sl_last_dim(const sl_tensor *t) {
    return t->shape[t->ndim - 1];
}
/* The product of the leading dimensions (not numel / last: that divides by zero for a
 * [M, 0] tensor, which has M rows). */
static inline int64_t sl_rows(const sl_tensor *t) {
    int64_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++) r *= t->shape[i];
    return r;
}
/* The first `rows` rows of t as a 2D view [rows, last dim] held by value: for a kernel that
 * runs another kernel on part of its operand (the routed rows of a buffer sized for more)
 * without allocating a view. rows <= sl_rows(t), not checked. */
static inline sl_tensor sl_head_rows(const sl_tensor *t, int64_t rows) {
    sl_tensor v = *t;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = sl_last_dim(t);
    v.numel = rows * v.shape[1];
    v.is_view = true;
    return v;
}

#ifdef __cplusplus
}
#endif

#endif
