/* trainer/eta.c - the ETA's windowed rate (trainer/eta.h). */
#include "trainer/eta.h"

#include <string.h>

void sl_eta_start(sl_eta *e, double t0) {
    memset(e, 0, sizeof *e);
    e->t0 = t0;
}

double sl_eta_step(sl_eta *e, double now, double step_flops) {
    const int64_t n = e->steps;
    const int slot = (int)(n % SL_ETA_WINDOW);
    /* the slot this step takes holds the step SL_ETA_WINDOW before it, once the ring is full */
    const double t_from = n >= SL_ETA_WINDOW ? e->time[slot] : e->t0;
    const double f_from = n >= SL_ETA_WINDOW ? e->flops[slot] : 0;
    e->flops_done += step_flops;
    e->time[slot] = now;
    e->flops[slot] = e->flops_done;
    e->steps = n + 1;
    return e->flops_done > f_from ? (now - t_from) / (e->flops_done - f_from) : 0;
}
