/*
 * backends/backends.h - creating a compute backend by name.
 *
 * Each backend is a memory half in core/ (core/backend_cpu.c, core/backend_cuda.cu) plus an
 * operation table assembled here from the kernels of every concern (backends/cpu.c and, with
 * CUDA kernels, backends/cuda.cu). This directory sits above core/, attention/, moe/ and the
 * trainer's kernels; launchers, tests and benchmarks create backends through it, and model
 * code only ever sees the opaque sl_backend.
 */
#ifndef SL_BACKENDS_H
#define SL_BACKENDS_H

#include <stddef.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_ops_i sl_ops_i;

/* Names of the backends compiled into this build, e.g. {"cpu", "cuda"}. */
int sl_backend_count(void);
const char *sl_backend_name_at(int i);

/* Creates backend `name` (params NULL: defaults). On failure returns NULL and writes a reason
 * into err. */
sl_backend *sl_backend_create(const char *name, const sl_backend_params *params, char *err,
                              size_t errlen);

/* Which attention kernel runs sl_op_gated_attn_fwd/bwd on `be` (attention.kernel; attn_bench
 * --kernel): NULL or "auto", "sluice", "cudnn", or a kernel name of attention/attn_kernels.h. The
 * CPU backend has one kernel and takes only "auto" and "sluice". 0, or -1 with the reason in err
 * (e.g. no libcudnn 9 on this node; the backend keeps its previous choice). */
int sl_backend_set_attn_kernel(sl_backend *be, const char *choice, char *err, size_t errlen);
/* The kernel that ran the last gated attention call on `be` ("cpu" on the CPU backend; NULL on
 * a CUDA backend before any call): "mma", "simt", "cudnn", ... */
const char *sl_backend_attn_kernel_ran(const sl_backend *be);

/* The operation tables (for the conformance test, which reports missing entries by name). */
const sl_ops_i *sl_backends_cpu_ops(void);
#ifdef SLUICE_WITH_CUDA
const sl_ops_i *sl_backends_cuda_ops(void);
#endif

#ifdef __cplusplus
}
#endif

#endif
