/* core/embedding_cpu.c - token embedding lookup and its gradient (fp32). */
#include <string.h>

#include "core/kernels_cpu.h"
#include "core/log.h"

void sl_cpu_embedding_fwd(void *ctx, sl_tensor *out, const sl_tensor *ids, const sl_tensor *table) {
    (void)ctx;
    const int64_t n = ids->numel, c = sl_last_dim(table), v = sl_rows(table);
    const int32_t *pid = sl_i32(ids);
    const float *pt = sl_f32(table);
    float *po = sl_f32(out);
    for (int64_t i = 0; i < n; i++) {
        SL_CHECK(pid[i] >= 0 && pid[i] < v,
                 "embedding: token id %d at position %lld outside "
                 "the vocabulary of %lld",
                 pid[i], (long long)i, (long long)v);
        memcpy(po + i * c, pt + (int64_t)pid[i] * c, (size_t)c * sizeof(float));
    }
}

void sl_cpu_embedding_bwd(void *ctx, sl_tensor *dtable, const sl_tensor *dout,
                          const sl_tensor *ids) {
    (void)ctx;
    const int64_t n = ids->numel, c = sl_last_dim(dtable);
    const int32_t *pid = sl_i32(ids);
    const float *pd = sl_f32(dout);
    float *pt = sl_f32(dtable);
    /* Parallel over channels: every thread walks all tokens, so rows that repeat a token id
     * never race, and the summation order is fixed (deterministic). */
#pragma omp parallel for if (n * c > 65536)
    for (int64_t j = 0; j < c; j++)
        for (int64_t i = 0; i < n; i++) pt[(int64_t)pid[i] * c + j] += pd[i * c + j];
}
