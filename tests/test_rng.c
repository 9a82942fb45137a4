/* tests/test_rng.c - core/rng.c's skip and its parallel normal fill: the fill gives the bits of
 * the one-thread loop (sl_rng_normal in sequence) at every length and thread count, across the
 * size from which it splits the work and chunk boundaries; the initial weights of a run depend
 * on that (core/params.c). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "tests/test_util.h"

static void test_skip(void) {
    sl_rng a, b;
    sl_rng_init(&a, 7, 99);
    sl_rng_init(&b, 7, 99);
    for (int i = 0; i < 1000; i++) (void)sl_rng_u64(&a);
    sl_rng_skip(&b, 1000);
    CHECK(sl_rng_u64(&a) == sl_rng_u64(&b), "skip 1000 draws: not where 1000 draws end");
    (void)sl_rng_normal(&a); /* leaves a spare; skip drops it */
    sl_rng_skip(&a, 0);
    CHECK(!a.has_spare, "skip keeps a spare normal");
}

/* The loop the fill must equal. */
static void fill_loop(float *dst, int64_t n, uint64_t seed, uint64_t stream, float std) {
    sl_rng r;
    sl_rng_init(&r, seed, stream);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(std * sl_rng_normal(&r));
}

static void test_fill(void) {
    /* around the split's threshold (2^20) and its chunks (2^17), odd lengths included */
    static const int64_t sizes[] = {
        0, 1, 7, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 17) + 5 + (1 << 20), 5 << 20};
    const int64_t most = 5 << 20;
    /* got has one more value than the longest fill, to see a write past n */
    float *want = malloc((size_t)most * sizeof *want);
    float *got = malloc((size_t)(most + 1) * sizeof *got);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const int64_t n = sizes[s];
        fill_loop(want, n, 1234, 0xabcdef + (uint64_t)s, 0.02f);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            memset(got, 0xff, (size_t)(most + 1) * sizeof *got);
            const bool split = sl_rng_fill_normal(got, n, 1234, 0xabcdef + (uint64_t)s, 0.02f);
            CHECK(memcmp(got, want, (size_t)n * sizeof *got) == 0,
                  "n %lld, %d threads: not the loop's bits", (long long)n, threads);
            /* the chunks' values kept, not refilled in one sequence (the fallback would hide a
             * wrong split) */
            CHECK(split == (n >= (1 << 20) && threads > 1), "n %lld, %d threads: split %d",
                  (long long)n, threads, split);
            uint32_t past;
            memcpy(&past, got + n, sizeof past);
            CHECK(past == 0xffffffffu, "n %lld, %d threads: wrote past n", (long long)n, threads);
        }
    }
    /* the values are normal(0, std): a guard against a fill that equals a wrong loop */
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < most; i++) sum += want[i], sq += (double)want[i] * want[i];
    const double mean = sum / most, sd = sqrt(sq / most - mean * mean);
    CHECK(fabs(mean) < 1e-4 && fabs(sd - 0.02) < 1e-4, "mean %g, std %g", mean, sd);
    free(want), free(got);
}

int main(void) {
    test_skip();
    test_fill();
    return sl_test_finish("test_rng");
}
