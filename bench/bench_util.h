/*
 * bench/bench_util.h - what the benchmark programs share: a monotonic clock and the median.
 * Header-only (static inline), so each benchmark stays one file.
 */
#ifndef SL_BENCH_UTIL_H
#define SL_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double sl_bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* qsort comparison of doubles, ascending (for medians). */
static inline int sl_bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of x[0 .. n) (n >= 1; the mean of the middle two for even n). Sorts x. */
static inline double sl_bench_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof(double), sl_bench_cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

#endif
