/*
 * backends/conformance.h - backend conformance: every operation of sl_ops_i
 * (core/backend_impl.h), on random inputs of several small shapes, on a backend under test,
 * compared with a reference.
 *
 * Used by tests/test_backend_ops.c (the ctest of every backend, f32 and bf16) and by
 * `sluice doctor` (launch/cmd_doctor.c), so both run the same cases with the same tolerances.
 *
 * Reference: the CPU backend (the same inputs run on both backends and their outputs are
 * compared), or - when the CPU itself is under test - the naive double-precision loops of
 * backends/ref_ops.h. Integer outputs (indices, counts) must match exactly; a float output
 * passes when |got - want| <= atol + rtol |want| element by element, with (atol, rtol) from the
 * op's row of the tolerance table (conformance.c) for the dtype under test, or, for the sums
 * whose order a backend may choose (reductions, GEMMs, scatter-adds: conformance_impl.h,
 * sum_bound), within the bound derived from the magnitudes and number of their terms. Inputs
 * come from a fixed seed per (operation, shape), are uploaded with sl_tensor_from_host and
 * outputs come back with sl_tensor_to_host, so nothing assumes host-addressable memory.
 * Outputs an operation writes start as junk (so an element it fails to write shows); outputs
 * it accumulates into start random (so "=" instead of "+=" shows).
 *
 * dtypes: with dt = SL_BF16 the float tensors of the backend under test are bf16 as in bf16
 * training (docs/cuda.md, "Precision"), except those pinned to fp32: the router (hence the
 * combine weights it produces and their gradient), adamw's master weights, gradients and
 * moments, RoPE's inv_freq, the 1-element results of sum/sumsq/sigmoid_mean, the saved
 * statistics (rmsnorm's rstd, attention's lse, cross-entropy's losses) and parameter gradients
 * that accumulate (rmsnorm's dw, the embedding's dtable, the grouped GEMM's dw, and a matmul C
 * in some shapes). Inputs are rounded to the dtype under test on both sides, so both compute
 * on equal values.
 */
#ifndef SL_BACKENDS_CONFORMANCE_H
#define SL_BACKENDS_CONFORMANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/backend.h"
#include "core/tensor.h"

typedef struct {
    sl_backend *test; /* the backend under test */
    sl_backend *ref;  /* the CPU backend; NULL: the naive double loops (when test is the CPU) */
    sl_dtype dt;      /* SL_F32 or SL_BF16: the dtype of test's unpinned float tensors */
    bool require_all; /* an operation test lacks (a NULL slot) is a failure, not a note */
    bool verbose;     /* one line per (shape, output) on `out` */
    FILE *out;        /* where the summary line of each operation goes; NULL: nowhere */
    /* Fault injection (tests of the harness, `sluice doctor`'s SLUICE_DOCTOR_INJECT): the
     * operation of this name gets its first output element moved by 1 + |value| on the
     * backend under test, after it ran, so its comparison fails. NULL: none. */
    const char *perturb;
} sl_conformance_cfg;

typedef enum { SL_CONF_OK, SL_CONF_FAILED, SL_CONF_MISSING } sl_conf_status;

typedef struct {
    sl_conf_status status;
    double worst;       /* largest error / bound over every shape and output (<= 1 passes) */
    int shapes;         /* shapes run */
    char worst_at[256]; /* where the worst error was: shape, output, element, both values */
    char why[256];      /* a failure other than an error above its bound (setup, output count) */
} sl_conf_result;

/* The operations, one per slot of sl_ops_i, in the table's order. */
int sl_conformance_count(void);
const char *sl_conformance_name(int i);
/* The index of the operation called `name`, or -1. */
int sl_conformance_find(const char *name);

/* Checks the table against sl_ops_i: every function-pointer slot has exactly one case and
 * every case a tolerance row. `header_names` (NULL when unknown) are the slot names in
 * declaration order as read from core/backend_impl.h (tests/test_backend_ops.c reads them),
 * so a slot without a case is reported by its name. Returns true when complete; otherwise
 * false with the problems, one per line, in err. */
bool sl_conformance_coverage(char header_names[][40], int nnames, char *err, size_t errlen);

/* Runs every shape of operation i on cfg->test against cfg->ref and, when cfg->out is set,
 * prints its summary line ("OK    matmul   err/tol 0.031 (bf16 atol 0.03 rtol 0.02)  8 shapes:
 * ...") and, for a failure, the worst element. */
sl_conf_result sl_conformance_run(int i, const sl_conformance_cfg *cfg);

#endif
