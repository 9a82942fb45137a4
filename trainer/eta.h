/*
 * trainer/eta.h - the progress line's ETA: seconds per model FLOP over the last SL_ETA_WINDOW
 * steps (the evaluations and saves between them included), times the model FLOPs left. The
 * average over the whole run, which it replaced, kept the rate of a run's fast start long after
 * the machine had slowed down (a quickstart sharing its cores said 1m34s for about 4 minutes of
 * work, 2026-11-29).
 */
#ifndef SL_TRAINER_ETA_H
#define SL_TRAINER_ETA_H

#include <stdint.h>

#define SL_ETA_WINDOW 64

typedef struct {
    double t0;         /* when the process began its schedule */
    double flops_done; /* model FLOPs of the steps this process took */
    int64_t steps;     /* steps this process took */
    /* the clock and flops_done at the end of each of the last SL_ETA_WINDOW steps (a ring) */
    double time[SL_ETA_WINDOW], flops[SL_ETA_WINDOW];
} sl_eta;

/* Starts the count at clock reading t0 (seconds). */
void sl_eta_start(sl_eta *e, double t0);
/* Records a step of `step_flops` model FLOPs that ended at `now`, and returns the seconds per
 * model FLOP of the window ending there: from the oldest step end it holds, or from t0 while
 * fewer than SL_ETA_WINDOW steps have been taken (0 before any FLOP). */
double sl_eta_step(sl_eta *e, double now, double step_flops);

#endif
