/*
 * core/profile.h - where the time of a training step goes: named regions of the step, timed in
 * the order the backend executes its work.
 *
 * The layer that knows what a piece of work is names it: the attention block its projections
 * and kernels, the MoE blocks the router, the permutation and the expert GEMMs, the model its
 * embedding and LM head, the trainer its optimizer and gradient reduction. Each wraps the work
 * in sl_profile_begin(be, "name") ... sl_profile_end(be); regions nest, and time is exclusive:
 * while an inner region is open, the outer one does not count. Host reads (sl_tensor_to_host,
 * sl_tensor_read_wait) open the region SL_PROFILE_HOST_READS by themselves.
 *
 * Off by default, and then a region costs a function call and two tests. On (a benchmark calls
 * sl_profile_enable, then sl_profile_step_begin / _end around each step), every begin and end
 * is a mark: a CUDA event on the backend's stream (on the CPU, which runs each operation when
 * it is called, the host's clock). Between two consecutive marks the device's time belongs to
 * the innermost region open there, or, outside every region, to the device's idle time: the
 * device waited for the host (launch gaps, host work between regions). With one stream the
 * regions, the idle time and the host reads tile the step: their sum is the step's device time
 * between its first and last mark. The host's time between the same marks is kept too (how
 * long the host took to issue a region's work: a region whose host time reaches its device
 * time is limited by launches, not by the device).
 *
 * Independently of profiling, a backend may forward regions to an external profiler: the CUDA
 * backend opens NVTX ranges of the same names (Nsight Systems shows them; SLUICE_NVTX=0 turns
 * them off).
 */
#ifndef SL_PROFILE_H
#define SL_PROFILE_H

#include <stdbool.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The region the host reads open; nested in whatever region issued the read. */
#define SL_PROFILE_HOST_READS "host reads (device idle while the host waits)"
/* Names that several layers use for the same kind of work (one row each). */
#define SL_PROFILE_NORMS    "RMSNorms (fwd, bwd)"
#define SL_PROFILE_RESIDUAL "residual adds and copies"

/* Opens a region named `name` (a string that lives as long as the backend; a literal). */
void sl_profile_begin(sl_backend *be, const char *name);
/* Closes the innermost open region. */
void sl_profile_end(sl_backend *be);
/* Runs the statement or block that follows inside a region:
 *     SL_PROFILE_REGION(be, "router fwd") { ... }
 * (no return, break or goto out of it: the region would stay open, which sl_profile_step_end
 * reports). */
#define SL_PROFILE_REGION(be, name)                                                                \
    for (int SL_PROFILE_ONCE_ = (sl_profile_begin((be), (name)), 1); SL_PROFILE_ONCE_;             \
         SL_PROFILE_ONCE_ = (sl_profile_end(be), 0))
/* A name of its own per line, so that nested regions do not shadow each other's. */
#define SL_PROFILE_ONCE_       SL_PROFILE_CAT_(sl_region_once_, __LINE__)
#define SL_PROFILE_CAT_(a, b)  SL_PROFILE_CAT2_(a, b)
#define SL_PROFILE_CAT2_(a, b) a##b

/* A host read made by the tensor layer: counted for the innermost open region. */
void sl_profile_count_read(sl_backend *be);

/* Turns profiling on (allocating its state) or off (freeing it and what it measured). */
void sl_profile_enable(sl_backend *be, bool on);
/* The first mark of a step; regions outside step_begin .. step_end are not timed. */
void sl_profile_step_begin(sl_backend *be);
/* The last mark: waits for the backend (a synchronization of its own, not the step's) and
 * adds the step's times to the totals. Stops the run (sl_fatal) when a region is still open. */
void sl_profile_step_end(sl_backend *be);

typedef struct {
    const char *name;
    double device_ms;     /* summed over the profiled steps */
    double host_ms;       /* the host's time between the same marks */
    long long calls;      /* times the region was opened */
    long long host_reads; /* host reads issued while it was the innermost region */
} sl_profile_row;

#define SL_PROFILE_MAX_ROWS 64

typedef struct {
    int steps;          /* profiled steps */
    bool device_timers; /* marks are device events (false: the host's clock) */
    double device_ms;   /* first to last mark of each step, summed */
    double host_ms;     /* the same on the host's clock */
    double wall_ms;     /* each step's wall time on the host's clock, from entering
                         * sl_profile_step_begin to the end of step_end's wait, summed:
                         * what the rows must add up to */
    double idle_ms;     /* device time outside every region */
    double idle_host_ms;
    long long idle_host_reads; /* host reads outside every region (a region is missing) */
    long long marks;           /* marks recorded, summed over the steps */
    int nrows;
    sl_profile_row rows[SL_PROFILE_MAX_ROWS]; /* in the order the regions were first opened */
} sl_profile_report;

/* The totals so far (zeros when profiling is off). */
void sl_profile_get(const sl_backend *be, sl_profile_report *out);

#ifdef __cplusplus
}
#endif

#endif
