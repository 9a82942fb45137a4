/*
 * trainer/trainer_profile.c - `sluice train --profile N`: where a training run's step time goes.
 *
 * The benchmarks profile synthetic steps (gpu_train_bench --profile); this profiles the run
 * itself: the reader's host work between micro-batches, the loop's own bookkeeping between
 * steps (the batch hash all-reduce, the load statistics), a checkpoint commit that lands in the
 * step, the real routing's expert loads. A profiled step runs from the top of the loop to the
 * end of its bookkeeping; evaluation, samples and checkpoint saves, which come every so many
 * steps, are outside it. Every rank profiles its own steps (core/profile.h); rank 0 prints its
 * table (core/profile_table.h), a line comparing the ranks (their busy and idle device time per
 * step: a rank that waits for the others shows idle), and records both as a "profile" event in
 * the metrics file (docs/metrics.md). Profiling is switched on for the window only: outside it a
 * region costs a function call.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/profile_table.h"
#include "trainer/trainer_impl.h"

int sl_trainer_profile_set(trainer *t, int steps, int from) {
    t->prof_steps = steps;
    t->prof_first = t->prof_last = 0;
    if (steps <= 0) return 0;
    const int total = t->first_step[t->n_stages];
    if (from > total) {
        sl_error_once("--profile-from %d: the schedule (%s) has %d steps", from, t->cfg->path,
                      total);
        return -1;
    }
    /* by default skip the process's first step: it allocates, builds plans and tunes kernels */
    t->prof_from = from > 0 ? from : t->start_step + (total - t->start_step >= 2 ? 2 : 1);
    return 0;
}

static bool in_window(const trainer *t, int step) {
    return t->prof_steps > 0 && step >= t->prof_from && step < t->prof_from + t->prof_steps;
}

void sl_trainer_profile_begin(trainer *t, int step) {
    if (!in_window(t, step)) return;
    if (!t->prof_on) {
        sl_profile_enable(t->be, true);
        t->prof_on = true;
    }
    sl_profile_step_begin(t->be);
}

/* The time of region `name` per step in r (0 when it was not opened). */
static double row_ms(const sl_profile_report *r, const char *name) {
    for (int i = 0; i < r->nrows; i++)
        if (strcmp(r->rows[i].name, name) == 0) return r->rows[i].device_ms / r->steps;
    return 0.0;
}

/* Prints and records the profile (collective), then switches profiling off. */
static void report(trainer *t) {
    sl_profile_report r;
    sl_profile_get(t->be, &r);
    const int n = sl_comm_size(t->topo.world);
    /* busy: the regions' device time; idle: between regions and in the host reads' waits */
    const double idle = r.steps > 0 ? r.idle_ms / r.steps + row_ms(&r, SL_PROFILE_HOST_READS) : 0;
    const double busy = sl_profile_rows_sum(&r) - idle;
    double mx[2] = {busy, idle}, mn[2] = {-busy, -idle}, sum[2] = {busy, idle};
    sl_comm_allreduce_max_f64(t->topo.world, mx, 2);
    sl_comm_allreduce_max_f64(t->topo.world, mn, 2);
    sl_comm_allreduce_sum_f64(t->topo.world, sum, 2);
    if (t->topo.rank == 0) {
        char what[160];
        snprintf(what, sizeof what, "of this run (steps %d-%d%s)", t->prof_first, t->prof_last,
                 n > 1 ? ", rank 0" : "");
        fflush(stdout);
        sl_profile_print(stdout, &r, NAN, what);
        if (n > 1)
            printf("across %d ranks, ms per step: busy (the rows but idle and host reads) min "
                   "%.3f, mean %.3f, max %.3f; idle (between regions, host reads) min %.3f, "
                   "mean %.3f, max %.3f\n",
                   n, -mn[0], sum[0] / n, mx[0], -mn[1], sum[1] / n, mx[1]);
        fflush(stdout);
        char *json = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&json, &len);
        if (f) {
            fprintf(f,
                    "\"first_step\": %d, \"last_step\": %d, \"rank\": 0, \"ranks\": %d, "
                    "\"busy_ms\": {\"min\": %.6g, \"mean\": %.6g, \"max\": %.6g}, "
                    "\"idle_ms\": {\"min\": %.6g, \"mean\": %.6g, \"max\": %.6g}, \"profile\": ",
                    t->prof_first, t->prof_last, n, -mn[0], sum[0] / n, mx[0], -mn[1], sum[1] / n,
                    mx[1]);
            sl_profile_write_json(f, &r, NAN);
            fclose(f);
            sl_metrics_event(&t->metrics, "profile", json);
        }
        free(json);
    }
    sl_profile_enable(t->be, false);
    t->prof_on = false;
    t->prof_steps = 0; /* reported: nothing more to profile */
}

void sl_trainer_profile_end(trainer *t, int step) {
    if (!in_window(t, step)) return;
    sl_profile_step_end(t->be);
    if (!t->prof_first) t->prof_first = step;
    t->prof_last = step;
}

void sl_trainer_profile_after(trainer *t, int step) {
    if (in_window(t, step) && step == t->prof_from + t->prof_steps - 1) report(t);
}

void sl_trainer_profile_finish(trainer *t) {
    if (t->prof_steps <= 0) return;
    if (t->prof_first) {
        if (t->topo.rank == 0)
            sl_warn("--profile %d: the run ended after %d profiled step(s)", t->prof_steps,
                    t->prof_last - t->prof_first + 1);
        report(t);
    } else {
        if (t->topo.rank == 0)
            sl_warn("--profile: no step was profiled (steps %d-%d; this run took steps %d-%d)",
                    t->prof_from, t->prof_from + t->prof_steps - 1, t->start_step + 1,
                    t->first_step[t->n_stages]);
        t->prof_steps = 0;
    }
}
