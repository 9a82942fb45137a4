/*
 * bench/bench_profile.h - the `--profile` table and JSON of the training benchmarks
 * (gpu_train_bench, bench_train): where a step's time goes, per profiling region
 * (core/profile.h). Header-only (static), as bench_util.h.
 *
 * The rows are the regions' exclusive device times per step, the device's idle time between
 * regions, and the host reads' waits (a region of their own); with one stream they tile the
 * step's device time from its first to its last mark. The profile also measures each step's
 * wall time on the host's clock (from entering sl_profile_step_begin to the end of the closing
 * wait in sl_profile_step_end): the rows must add up to it within 5% (SL_PROFILE_TOLERANCE), or
 * time went somewhere no mark saw (work before the first mark or after the last, a device
 * clock that disagrees with the host's).
 */
#ifndef SL_BENCH_PROFILE_H
#define SL_BENCH_PROFILE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/profile.h"

#define SL_PROFILE_TOLERANCE 0.05
#define SL_PROFILE_IDLE      "device idle between regions (host work, launch gaps)"

typedef struct {
    const char *name;
    double ms, host_ms, calls, reads; /* per step */
} sl_bench_prow;

static inline int sl_bench_prow_cmp(const void *a, const void *b) {
    const double x = ((const sl_bench_prow *)a)->ms, y = ((const sl_bench_prow *)b)->ms;
    return (x < y) - (x > y);
}

/* The rows per step, largest first, the idle row included; returns their count. */
static inline int sl_bench_profile_rows(const sl_profile_report *r, sl_bench_prow *out) {
    const double n = r->steps > 0 ? r->steps : 1;
    int k = 0;
    for (int i = 0; i < r->nrows; i++)
        out[k++] =
            (sl_bench_prow){r->rows[i].name, r->rows[i].device_ms / n, r->rows[i].host_ms / n,
                            r->rows[i].calls / n, r->rows[i].host_reads / n};
    out[k++] = (sl_bench_prow){SL_PROFILE_IDLE, r->idle_ms / n, r->idle_host_ms / n, 0.0,
                               r->idle_host_reads / n};
    qsort(out, (size_t)k, sizeof *out, sl_bench_prow_cmp);
    return k;
}

/* The profiled steps' mean wall time (ms). */
static inline double sl_bench_profile_wall(const sl_profile_report *r) {
    return r->steps > 0 ? r->wall_ms / r->steps : 0.0;
}

/*
 * Prints the table and returns whether the rows add up to the profiled steps' mean wall time
 * within SL_PROFILE_TOLERANCE. `plain_ms`: the unprofiled steps' mean (the benchmark's
 * headline figure), for the profile's own cost; NAN when not measured.
 */
static inline bool sl_bench_profile_print(const sl_profile_report *r, double plain_ms,
                                          const char *what) {
    const double wall_ms = sl_bench_profile_wall(r);
    sl_bench_prow rows[SL_PROFILE_MAX_ROWS + 1];
    const int k = sl_bench_profile_rows(r, rows);
    double sum = 0.0, reads = 0.0;
    for (int i = 0; i < k; i++) sum += rows[i].ms, reads += rows[i].reads;
    printf("\n== profile: %d step(s) %s; %s, exclusive (an inner region's time is not its "
           "outer one's)\n",
           r->steps, what,
           r->device_timers ? "device time between CUDA events on the stream"
                            : "host clock (the backend runs each operation when called)");
    printf("%-62s %10s %6s %10s %8s %7s\n", "region", "ms/step", "share", "host ms", "calls",
           "reads");
    for (int i = 0; i < k; i++)
        printf("%-62.62s %10.3f %5.1f%% %10.3f %8.1f %7.1f\n", rows[i].name, rows[i].ms,
               sum > 0 ? 100.0 * rows[i].ms / sum : 0.0, rows[i].host_ms, rows[i].calls,
               rows[i].reads);
    const double cover = wall_ms > 0 ? sum / wall_ms : NAN;
    const bool ok = fabs(cover - 1.0) <= SL_PROFILE_TOLERANCE;
    printf("%-62s %10.3f (%.1f host reads per step; %.0f marks per step)\n", "sum of the rows", sum,
           reads, r->steps ? (double)r->marks / r->steps : 0.0);
    printf("profiled step wall time (host clock) %.3f ms: the rows add up to %.1f%% of it: %s "
           "(within %.0f%%)\n",
           wall_ms, 100.0 * cover, ok ? "OK" : "NOT OK", 100.0 * SL_PROFILE_TOLERANCE);
    if (isfinite(plain_ms) && plain_ms > 0)
        printf("unprofiled step %.3f ms: the profile's marks cost %+.1f%%\n", plain_ms,
               100.0 * (wall_ms / plain_ms - 1.0));
    return ok;
}

/* The profile as a JSON object (no newline), for the benchmark's last line. */
static inline void sl_bench_profile_json(FILE *f, const sl_profile_report *r, double plain_ms) {
    const double wall_ms = sl_bench_profile_wall(r);
    sl_bench_prow rows[SL_PROFILE_MAX_ROWS + 1];
    const int k = sl_bench_profile_rows(r, rows);
    double sum = 0.0;
    for (int i = 0; i < k; i++) sum += rows[i].ms;
    fprintf(f,
            "{\"steps\": %d, \"device_timers\": %s, \"step_wall_ms\": %.6g, "
            "\"rows_sum_ms\": %.6g, \"device_span_ms\": %.6g, \"idle_ms\": %.6g, "
            "\"marks_per_step\": %.6g, \"tolerance\": %.6g, \"rows_add_up\": %s, ",
            r->steps, r->device_timers ? "true" : "false", wall_ms, sum,
            r->steps ? r->device_ms / r->steps : 0.0, r->steps ? r->idle_ms / r->steps : 0.0,
            r->steps ? (double)r->marks / r->steps : 0.0, SL_PROFILE_TOLERANCE,
            wall_ms > 0 && fabs(sum / wall_ms - 1.0) <= SL_PROFILE_TOLERANCE ? "true" : "false");
    if (isfinite(plain_ms))
        fprintf(f, "\"unprofiled_ms\": %.6g, ", plain_ms);
    else
        fprintf(f, "\"unprofiled_ms\": null, ");
    fprintf(f, "\"rows\": [");
    for (int i = 0; i < k; i++) {
        /* region names are sluice's own literals: no character needs escaping */
        fprintf(f,
                "%s{\"region\": \"%s\", \"ms\": %.6g, \"host_ms\": %.6g, \"calls\": %.6g, "
                "\"host_reads\": %.6g}",
                i ? ", " : "", rows[i].name, rows[i].ms, rows[i].host_ms, rows[i].calls,
                rows[i].reads);
    }
    fprintf(f, "]}");
}

#endif
