/*
 * tests/test_eta.c - trainer/eta.h: the ETA's rate is the last SL_ETA_WINDOW steps', so that
 * it follows a machine that slows down:
 *   - before the window fills, the rate is the average from the start (t0 included: the
 *     first evaluation's time counts);
 *   - 100 steps of 1 s each then 64 of 10 s: the rate is the slow steps' alone (the whole
 *     run's average would still be 4.5 s a step); 32 fast steps later it is their mix;
 *   - an evaluation between steps counts in the window that holds it, and leaves it after
 *     SL_ETA_WINDOW more steps;
 *   - no FLOPs yet: 0, not a division by zero.
 */
#include <math.h>

#include "test_util.h"
#include "trainer/eta.h"

static bool near(double a, double b) {
    return fabs(a - b) <= 1e-9 * fabs(b);
}

int main(void) {
    sl_eta e;
    const double F = 1e12; /* model FLOPs a step */
    sl_eta_start(&e, 100.0);
    /* the first step ends 3 s after t0, of which 2 s were the start's evaluation */
    double r = sl_eta_step(&e, 103.0, F);
    CHECK(near(r, 3.0 / F), "first step: %g s per FLOP, expected 3 / F", r * F);
    double now = 103.0;
    for (int i = 1; i < 10; i++) r = sl_eta_step(&e, now += 1.0, F);
    CHECK(near(r, 12.0 / (10 * F)), "10 steps: %g s per FLOP-step, expected the average 1.2",
          r * F);

    /* 100 fast steps in all, then 64 slow ones */
    for (int i = 10; i < 100; i++) r = sl_eta_step(&e, now += 1.0, F);
    for (int i = 0; i < SL_ETA_WINDOW; i++) r = sl_eta_step(&e, now += 10.0, F);
    CHECK(near(r, 10.0 / F), "after 64 slow steps: %g s a step, expected 10 (the window's)", r * F);
    const double whole = (now - 100.0) / (e.flops_done);
    CHECK(whole * F < 5.0, "the whole run's average (%g s a step) would lag behind", whole * F);
    /* 32 fast steps: half the window slow, half fast */
    for (int i = 0; i < SL_ETA_WINDOW / 2; i++) r = sl_eta_step(&e, now += 1.0, F);
    CHECK(near(r, 5.5 / F), "32 fast after the slow ones: %g s a step, expected 5.5", r * F);

    /* an evaluation of 32 s before the next step: in the window while it holds that step */
    for (int i = 0; i < SL_ETA_WINDOW; i++) r = sl_eta_step(&e, now += 1.0, F);
    CHECK(near(r, 1.0 / F), "64 fast steps: %g s a step, expected 1", r * F);
    r = sl_eta_step(&e, now += 1.0 + 32.0, F);
    CHECK(near(r, (64.0 + 32.0) / (64 * F)), "with the evaluation: %g, expected 1.5", r * F);
    for (int i = 1; i < SL_ETA_WINDOW; i++) r = sl_eta_step(&e, now += 1.0, F);
    CHECK(near(r, (64.0 + 32.0) / (64 * F)), "its window's last step: %g, expected 1.5", r * F);
    r = sl_eta_step(&e, now += 1.0, F);
    CHECK(near(r, 1.0 / F), "the evaluation out of the window: %g, expected 1", r * F);

    sl_eta z;
    sl_eta_start(&z, 5.0);
    r = sl_eta_step(&z, 6.0, 0.0);
    CHECK(r == 0, "no FLOPs: %g, expected 0", r);
    return sl_test_finish("test_eta");
}
