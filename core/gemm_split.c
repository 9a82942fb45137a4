/* core/gemm_split.c - when an fp32 GEMM splits its K dimension (see gemm_split.h). */
#include "core/gemm_split.h"

#include <stdlib.h>
#include <string.h>

int sl_gemm_split_k(int64_t m, int64_t n, int64_t k, int sms) {
    if (m <= 0 || n <= 0 || k <= 0 || sms <= 0) return 1;
    const int64_t t = SL_GEMM_SPLIT_TILE;
    const int64_t tiles = ((m + t - 1) / t) * ((n + t - 1) / t);
    if (tiles >= sms) return 1;
    int best = 1;
    for (int s = 2; s <= SL_GEMM_SPLIT_MAX; s *= 2) {
        if (tiles * s > 2 * (int64_t)sms) break;
        if (k % s == 0 && k / s >= SL_GEMM_SPLIT_MIN_K &&
            (int64_t)s * m * n * 4 <= SL_GEMM_SPLIT_MAX_BYTES)
            best = s;
    }
    return best;
}

int sl_gemm_split_k_parse(const char *v, int *out) {
    if (!v || !*v || strcmp(v, "auto") == 0) {
        *out = 0;
        return 0;
    }
    if (strcmp(v, "off") == 0) {
        *out = 1;
        return 0;
    }
    char *end = NULL;
    const long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 64) return -1;
    *out = (int)n;
    return 0;
}
