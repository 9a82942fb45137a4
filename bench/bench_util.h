/*
 * bench/bench_util.h - what the benchmark programs share: a monotonic clock and the median's
 * comparison function. Header-only (static inline), so each benchmark stays one file.
 */
#ifndef SL_BENCH_UTIL_H
#define SL_BENCH_UTIL_H

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

#endif
