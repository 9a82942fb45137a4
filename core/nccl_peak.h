/*
 * core/nccl_peak.h - NCCL bus bandwidth between the devices of one node, driven by one process
 * (ncclCommInitAll), for `sluice doctor` (docs/doctor.md). Built with the CUDA backend; in the
 * emulated build it reports that it cannot measure (the fake NCCL runs between processes over
 * MPI, emu/README.md).
 */
#ifndef SL_CORE_NCCL_PEAK_H
#define SL_CORE_NCCL_PEAK_H

#include <stddef.h>

typedef struct {
    int devices;            /* devices 0 .. devices - 1 */
    size_t bytes;           /* per device: the all-reduce's buffer, the all-to-all's send */
    int reps;               /* timed repetitions (after 2 untimed) */
    double allreduce_ms;    /* mean time of one all-reduce (fp32 sum) */
    double allreduce_busbw; /* bytes/s, nccl-tests' convention: bytes/t x 2 (n - 1) / n */
    double alltoall_ms;     /* mean time of one all-to-all (grouped send/receive) */
    double alltoall_busbw;  /* bytes/s: bytes/t x (n - 1) / n */
} sl_nccl_peak;

/* Measures both on devices 0 .. devices - 1 (devices >= 2). Returns 0, or -1 with a reason
 * (also in the emulated build). */
int sl_nccl_peak_measure(int devices, size_t bytes, int reps, sl_nccl_peak *out, char *err,
                         size_t errlen);

#endif
