/*
 * core/profile_table.h - a step profile (core/profile.h) as a table and as JSON: the form
 * `sluice train --profile`, gpu_train_bench --profile and bench_train --profile print.
 *
 * The rows are the regions' exclusive device times per profiled step, the device's idle time
 * between regions, and the host reads' waits (a region of their own); with one stream they tile
 * the step's device time from its first to its last mark. The profile also measures each step's
 * wall time on the host's clock (from entering sl_profile_step_begin to the end of the closing
 * wait in sl_profile_step_end): the rows must add up to it within SL_PROFILE_TOLERANCE, or time
 * went somewhere no mark saw (work before the first mark or after the last, a device clock that
 * disagrees with the host's).
 */
#ifndef SL_PROFILE_TABLE_H
#define SL_PROFILE_TABLE_H

#include <stdbool.h>
#include <stdio.h>

#include "core/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How far the rows' sum may be from the steps' wall time (a fraction of it). */
#define SL_PROFILE_TOLERANCE 0.05
/* The row of device time outside every region. */
#define SL_PROFILE_IDLE "device idle between regions (host work, launch gaps)"

typedef struct {
    const char *name;
    double ms, host_ms, calls, reads; /* per profiled step */
} sl_profile_line;

/* The rows per step, largest first, the idle row included, into out[SL_PROFILE_MAX_ROWS + 1];
 * returns their count. */
int sl_profile_lines(const sl_profile_report *r, sl_profile_line *out);
/* The profiled steps' mean wall time (ms; 0 when no step was profiled). */
double sl_profile_step_wall(const sl_profile_report *r);
/* The rows' sum per step (ms). */
double sl_profile_rows_sum(const sl_profile_report *r);
/* Whether the rows add up to the steps' wall time within SL_PROFILE_TOLERANCE. */
bool sl_profile_adds_up(const sl_profile_report *r);
/* Prints the table to f and returns sl_profile_adds_up. `what` follows "N step(s)" in the
 * title (e.g. "after the timed ones"); `plain_ms`: the unprofiled steps' mean, for the marks'
 * own cost, NAN when not measured. */
bool sl_profile_print(FILE *f, const sl_profile_report *r, double plain_ms, const char *what);
/* The profile as one JSON object (no newline; keys in docs/metrics.md, "profile"). */
void sl_profile_write_json(FILE *f, const sl_profile_report *r, double plain_ms);

#ifdef __cplusplus
}
#endif

#endif
