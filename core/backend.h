/*
 * core/backend.h - compute backends (public API).
 *
 * A backend owns tensor memory and executes operations on it. sluice ships "cpu" (fp32,
 * OpenBLAS + OpenMP; the numerical reference) and, when built with CUDA, "cuda". Callers hold
 * an opaque sl_backend; the function table behind it lives in core/backend_impl.h.
 */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sl_backend sl_backend;

typedef struct {
    int threads; /* CPU: OpenMP/OpenBLAS threads (0 = all cores); ignored by CUDA */
    int device;  /* CUDA: device ordinal (-1 = from the launcher's local rank) */
} sl_backend_params;

/* Names of the backends compiled into this build, e.g. {"cpu", "cuda"}. */
int sl_backend_count(void);
const char *sl_backend_name_at(int i);

/* Creates backend `name`. On failure returns NULL and writes a reason into err. */
sl_backend *sl_backend_create(const char *name, const sl_backend_params *params, char *err,
                              size_t errlen);
void sl_backend_free(sl_backend *be);
const char *sl_backend_name(const sl_backend *be);
/* True when tensor memory of this backend is directly addressable by the host (MPI can
 * send it without staging). */
bool sl_backend_host_memory(const sl_backend *be);
/* Waits for all queued work (a no-op on the CPU). */
void sl_backend_synchronize(sl_backend *be);
/* Threads the CPU backend uses (1 for device backends). */
int sl_backend_threads(const sl_backend *be);

#endif
