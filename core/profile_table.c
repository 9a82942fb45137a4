/* core/profile_table.c - the step profile's table and JSON (see profile_table.h). */
#include "core/profile_table.h"

#include <math.h>
#include <stdlib.h>

static int line_cmp(const void *a, const void *b) {
    const double x = ((const sl_profile_line *)a)->ms, y = ((const sl_profile_line *)b)->ms;
    return (x < y) - (x > y);
}

int sl_profile_lines(const sl_profile_report *r, sl_profile_line *out) {
    const double n = r->steps > 0 ? r->steps : 1;
    int k = 0;
    for (int i = 0; i < r->nrows; i++)
        out[k++] =
            (sl_profile_line){r->rows[i].name, r->rows[i].device_ms / n, r->rows[i].host_ms / n,
                              (double)r->rows[i].calls / n, (double)r->rows[i].host_reads / n};
    out[k++] = (sl_profile_line){SL_PROFILE_IDLE, r->idle_ms / n, r->idle_host_ms / n, 0.0,
                                 (double)r->idle_host_reads / n};
    qsort(out, (size_t)k, sizeof *out, line_cmp);
    return k;
}

double sl_profile_step_wall(const sl_profile_report *r) {
    return r->steps > 0 ? r->wall_ms / r->steps : 0.0;
}

double sl_profile_rows_sum(const sl_profile_report *r) {
    if (r->steps <= 0) return 0.0;
    double sum = r->idle_ms;
    for (int i = 0; i < r->nrows; i++) sum += r->rows[i].device_ms;
    return sum / r->steps;
}

bool sl_profile_adds_up(const sl_profile_report *r) {
    const double wall = sl_profile_step_wall(r);
    return wall > 0 && fabs(sl_profile_rows_sum(r) / wall - 1.0) <= SL_PROFILE_TOLERANCE;
}

bool sl_profile_print(FILE *f, const sl_profile_report *r, double plain_ms, const char *what) {
    const double wall_ms = sl_profile_step_wall(r);
    sl_profile_line rows[SL_PROFILE_MAX_ROWS + 1];
    const int k = sl_profile_lines(r, rows);
    double sum = 0.0, reads = 0.0;
    for (int i = 0; i < k; i++) sum += rows[i].ms, reads += rows[i].reads;
    fprintf(f,
            "\n== profile: %d step(s) %s; %s, exclusive (an inner region's time is not its "
            "outer one's)\n",
            r->steps, what,
            r->device_timers ? "device time between CUDA events on the stream"
                             : "host clock (the backend runs each operation when called)");
    fprintf(f, "%-62s %10s %6s %10s %8s %7s\n", "region", "ms/step", "share", "host ms", "calls",
            "reads");
    for (int i = 0; i < k; i++)
        fprintf(f, "%-62.62s %10.3f %5.1f%% %10.3f %8.1f %7.1f\n", rows[i].name, rows[i].ms,
                sum > 0 ? 100.0 * rows[i].ms / sum : 0.0, rows[i].host_ms, rows[i].calls,
                rows[i].reads);
    const double cover = wall_ms > 0 ? sum / wall_ms : NAN;
    const bool ok = sl_profile_adds_up(r);
    fprintf(f, "%-62s %10.3f (%.1f host reads per step; %.0f marks per step)\n", "sum of the rows",
            sum, reads, r->steps ? (double)r->marks / r->steps : 0.0);
    fprintf(f,
            "profiled step wall time (host clock) %.3f ms: the rows add up to %.1f%% of it: %s "
            "(within %.0f%%)\n",
            wall_ms, 100.0 * cover, ok ? "OK" : "NOT OK", 100.0 * SL_PROFILE_TOLERANCE);
    if (isfinite(plain_ms) && plain_ms > 0)
        fprintf(f, "unprofiled step %.3f ms: the profile's marks cost %+.1f%%\n", plain_ms,
                100.0 * (wall_ms / plain_ms - 1.0));
    return ok;
}

void sl_profile_write_json(FILE *f, const sl_profile_report *r, double plain_ms) {
    sl_profile_line rows[SL_PROFILE_MAX_ROWS + 1];
    const int k = sl_profile_lines(r, rows);
    fprintf(f,
            "{\"steps\": %d, \"device_timers\": %s, \"step_wall_ms\": %.6g, "
            "\"rows_sum_ms\": %.6g, \"device_span_ms\": %.6g, \"idle_ms\": %.6g, "
            "\"marks_per_step\": %.6g, \"tolerance\": %.6g, \"rows_add_up\": %s, ",
            r->steps, r->device_timers ? "true" : "false", sl_profile_step_wall(r),
            sl_profile_rows_sum(r), r->steps ? r->device_ms / r->steps : 0.0,
            r->steps ? r->idle_ms / r->steps : 0.0, r->steps ? (double)r->marks / r->steps : 0.0,
            SL_PROFILE_TOLERANCE, sl_profile_adds_up(r) ? "true" : "false");
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
