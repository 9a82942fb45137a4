/*
 * core/ops_check.h - what the files of sl_op_* share (core/ops.c, ops_attn.c, ops_moe.c): the
 * argument checks each operation runs before it dispatches, and the dispatch itself. Internal to
 * core/: nothing outside includes it.
 */
#ifndef SL_CORE_OPS_CHECK_H
#define SL_CORE_OPS_CHECK_H

#include "core/backend_impl.h"
#include "core/log.h"
#include "core/ops.h"

#define BE(t) ((t)->be)

#define DISPATCH(be, op, ...)                                                                      \
    do {                                                                                           \
        sl_backend *be_ = (be);                                                                    \
        if (!be_->ops->op)                                                                         \
            sl_fatal("operation '%s' is not implemented by backend '%s'", #op, be_->iface.name);   \
        be_->ops->op(be_->ctx, __VA_ARGS__);                                                       \
    } while (0)

#define DISPATCH_RET(be, op, ...)                                                                  \
    do {                                                                                           \
        sl_backend *be_ = (be);                                                                    \
        if (!be_->ops->op)                                                                         \
            sl_fatal("operation '%s' is not implemented by backend '%s'", #op, be_->iface.name);   \
        return be_->ops->op(be_->ctx, __VA_ARGS__);                                                \
    } while (0)

/* The ops' argument checks: each stops the run with a message naming the op and the argument
 * (a program error, not bad input). */
static inline void need_dtype(const char *op, const char *arg, const sl_tensor *t, sl_dtype dt) {
    SL_CHECK(t != NULL, "%s: %s is NULL", op, arg);
    SL_CHECK(t->dtype == dt, "%s: %s has dtype %s, expected %s", op, arg, sl_dtype_name(t->dtype),
             sl_dtype_name(dt));
}

static inline void need_same_backend(const char *op, const sl_tensor *a, const sl_tensor *b) {
    if (a && b) SL_CHECK(a->be == b->be, "%s: tensors live on different backends", op);
}

static inline void need_numel(const char *op, const char *arg, const sl_tensor *t, int64_t n) {
    SL_CHECK(t->numel == n, "%s: %s has %lld elements, expected %lld", op, arg, (long long)t->numel,
             (long long)n);
}

/* A float operand ("any" in docs/cuda.md): fp32, or bf16 on a backend whose kernels take it. */
static inline void need_float(const char *op, const char *arg, const sl_tensor *t) {
    SL_CHECK(t != NULL, "%s: %s is NULL", op, arg);
    SL_CHECK(t->dtype == SL_F32 || t->dtype == SL_BF16, "%s: %s has dtype %s, expected a float", op,
             arg, sl_dtype_name(t->dtype));
    SL_CHECK(t->dtype == SL_F32 || t->be->iface.bf16,
             "%s: %s is bf16, but backend '%s' computes in fp32 only", op, arg, t->be->iface.name);
}

/* A float operand that must have the dtype of `ref` ("T" in docs/cuda.md). */
static inline void need_like(const char *op, const char *arg, const sl_tensor *t,
                             const sl_tensor *ref) {
    need_float(op, arg, t);
    SL_CHECK(t->dtype == ref->dtype,
             "%s: %s has dtype %s, expected %s (as the op's other operands)", op, arg,
             sl_dtype_name(t->dtype), sl_dtype_name(ref->dtype));
}

/* A device scalar: one fp32 element on the same backend as the input. */
static inline void need_scalar(const char *op, const sl_tensor *out, const sl_tensor *x) {
    need_float(op, "x", x);
    need_numel(op, "out", out, 1);
    need_dtype(op, "out", out, SL_F32);
    need_same_backend(op, out, x);
}

#endif
