/*
 * launch/doctor.h - `sluice doctor`, a node self-test (docs/doctor.md): what its sections share.
 *
 * The command (launch/cmd_doctor.c) collects rows - one per check - in three sections:
 * environment (launch/doctor_env.c), correctness (doctor_correct.c) and speed
 * (doctor_speed.c). Each row has a stable key (the JSON's), a label, a status, a result text
 * and, for measurements, a value with its unit and the threshold it was held to. The report
 * (doctor_report.c) prints each row as it is added (the table) or, with --json, one object at
 * the end.
 */
#ifndef SL_LAUNCH_DOCTOR_H
#define SL_LAUNCH_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "core/backend.h"
#include "core/comm.h"

typedef enum { SL_DR_OK = 0, SL_DR_FAIL, SL_DR_SKIP, SL_DR_INFO } sl_dr_status;

typedef struct {
    const char *section; /* "environment", "correctness", "speed" */
    char key[64];        /* stable identifier, e.g. "gpu0.ops_bf16" (docs/doctor.md) */
    char label[72];      /* the table's check column */
    sl_dr_status status; /* OK, FAIL (exit 1), SKIP (not run, why in result), INFO */
    char result[320];    /* what was found */
    double value;        /* the measured number (NaN: none) */
    char unit[16];       /* its unit: "TFLOP/s", "GB/s", "err/tol", "ms", ... */
    double threshold;    /* what value had to reach (NaN: none) */
    bool below_fails;    /* the threshold is a minimum (true) or a maximum (false) */
} sl_dr_row;

/* What the checks need to know and the rows so far. */
typedef struct {
    bool json;          /* --json: one object at the end, no table */
    bool tiny;          /* tiny shapes (--tiny, or the emulator) */
    bool emulated;      /* the CUDA backend runs on the CPU SIMT test double */
    int layers;         /* --layers: the training step's decoder layers (cut further to fit) */
    const char *config; /* --config: the 15A2B config for the training step (NULL: looked up) */
    const char *inject; /* SLUICE_DOCTOR_INJECT: an op whose result the conformance perturbs */
    sl_comm *world;     /* MPI singleton (the optimizer reduces over it) */
    sl_dr_row *rows;
    int nrows, cap;
    char host[64];
    double started;  /* seconds, monotonic */
    bool usable[64]; /* device i has a kernel image of this build (environment section) */
    /* the JSON's environment and devices objects, filled by the environment section */
    char *env_json;
    char *devices_json;
} sl_doctor;

/* Adds a row (printed at once unless --json) and returns it. `value`: NaN for none. */
sl_dr_row *sl_dr_add(sl_doctor *d, const char *section, const char *key, const char *label,
                     sl_dr_status status, double value, const char *unit, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
/* A measurement judged against a minimum: OK when value >= min, FAIL otherwise; min NaN or
 * the emulator: INFO (not judged). */
sl_dr_row *sl_dr_measure(sl_doctor *d, const char *key, const char *label, double value,
                         const char *unit, double min, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
const char *sl_dr_status_name(sl_dr_status s);
/* Prints the table's header (not with --json). */
void sl_dr_begin(sl_doctor *d);
/* Prints the summary line, or the JSON object with `exit_code`; returns exit_code. */
int sl_dr_finish(sl_doctor *d, int exit_code);
void sl_dr_free(sl_doctor *d);
/* Appends formatted text to a growing buffer (the JSON objects of the environment section). */
void sl_dr_json_append(char **buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* `s` as a JSON string literal (quoted, escaped) appended to *buf. */
void sl_dr_json_str(char **buf, const char *s);

/* The sections. Each adds its rows; the environment returns the number of visible devices
 * (0: none, the doctor then exits 3) and marks in d->usable those it can run on. */
int sl_doctor_environment(sl_doctor *d);
#ifdef SLUICE_WITH_CUDA
/* Correctness on device `dev`: every op against the CPU backend (f32, bf16), and one gated
 * attention shape per head dim through the kernel the run uses. */
void sl_doctor_correctness(sl_doctor *d, int dev);
/* Speed on device `dev`: bf16 GEMM peak, copy bandwidth, attention forward and backward, a
 * training step of the 15A2B shape. */
void sl_doctor_speed(sl_doctor *d, int dev);
/* NCCL all-reduce and all-to-all bus bandwidth between `ndev` devices (one process). */
void sl_doctor_nccl(sl_doctor *d, int ndev);
#endif

#endif
