/*
 * moe/permute_cpu.c - routing slots to expert order and back (CPU).
 *
 * A token n routed to k experts owns the slots n*k + j (j = 0..k-1, in top-k order).
 * moe_sort is a stable counting sort of the slots by expert: expert e's slots occupy the
 * positions [offset_e, offset_e + counts[e]) of the sorted order, in increasing slot order
 * (so in token order). gather_rows / grouped GEMMs then work on expert-contiguous rows, and
 * moe_combine reads each slot's row back through slot_pos.
 *
 * Every kernel here is deterministic: outputs are written by one thread each, and the
 * accumulating kernels (scatter_add_rows, gather_add_rows) add into each destination row in
 * increasing source order, exactly as the serial loop would.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "moe/kernels_cpu.h"

/* Row copies and row dot products pay for threads only when there is enough work. */
#define PERM_PAR_MIN 16384

static void check_index(const int32_t *idx, int64_t m, int64_t limit, const char *op) {
    for (int64_t i = 0; i < m; i++)
        SL_CHECK(idx[i] >= 0 && idx[i] < limit, "cpu %s: index %d at %lld is outside [0, %lld)", op,
                 idx[i], (long long)i, (long long)limit);
}

void sl_cpu_moe_sort(void *ctx, sl_tensor *counts, sl_tensor *sorted_token, sl_tensor *slot_pos,
                     const sl_tensor *topk_idx) {
    (void)ctx;
    const int64_t e = counts->numel, k = sl_last_dim(topk_idx), slots = topk_idx->numel;
    const int32_t *pi = sl_i32(topk_idx);
    int32_t *pc = sl_i32(counts), *pst = sl_i32(sorted_token), *psp = sl_i32(slot_pos);
    check_index(pi, slots, e, "moe_sort");
    SL_CHECK(slots <= INT32_MAX, "cpu moe_sort: %lld slots overflow i32", (long long)slots);
    int64_t *next = sl_xcalloc((size_t)(e > 0 ? e : 1), sizeof(int64_t));
    for (int64_t s = 0; s < slots; s++) next[pi[s]]++;
    int64_t off = 0;
    for (int64_t i = 0; i < e; i++) {
        pc[i] = (int32_t)next[i];
        const int64_t c = next[i];
        next[i] = off; /* first free position of expert i */
        off += c;
    }
    for (int64_t s = 0; s < slots; s++) {
        const int64_t pos = next[pi[s]]++;
        pst[pos] = (int32_t)(s / k);
        psp[s] = (int32_t)pos;
    }
    free(next);
}

void sl_cpu_moe_counts(void *ctx, sl_tensor *acc, sl_tensor *freq, const sl_tensor *counts,
                       float scale) {
    (void)ctx;
    const int32_t *pc = sl_i32(counts);
    for (int64_t e = 0; e < counts->numel; e++) {
        if (acc) sl_i32(acc)[e] += pc[e];
        if (freq) sl_f32(freq)[e] = scale * (float)pc[e];
    }
}

void sl_cpu_gather_rows(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx) {
    (void)ctx;
    SL_CHECK(dst->dtype == SL_F32 && src->dtype == SL_F32, "cpu gather_rows: only f32");
    const int64_t m = idx->numel, c = sl_last_dim(dst);
    const int32_t *pi = sl_i32(idx);
    const float *ps = sl_f32(src);
    float *pd = sl_f32(dst);
    check_index(pi, m, sl_rows(src), "gather_rows");
#pragma omp parallel for schedule(static) if (m * c > PERM_PAR_MIN)
    for (int64_t i = 0; i < m; i++)
        memcpy(pd + i * c, ps + (int64_t)pi[i] * c, sizeof(float) * (size_t)c);
}

void sl_cpu_gather_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *pos,
                            int k, float beta) {
    (void)ctx;
    SL_CHECK(dst->dtype == SL_F32 && src->dtype == SL_F32, "cpu gather_add_rows: only f32");
    const int64_t n = sl_rows(dst), c = sl_last_dim(dst), m = sl_rows(src);
    const int32_t *pp = sl_i32(pos);
    const float *ps = sl_f32(src);
    float *pd = sl_f32(dst);
    /* each row's valid positions in increasing order (insertion sort of at most 32), then the
     * scatter's serial adds in that order */
#pragma omp parallel for schedule(static) if (n * k * c > PERM_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        int32_t q[32];
        int nq = 0;
        for (int j = 0; j < k; j++) {
            const int32_t p = pp[r * k + j];
            if (p < 0 || p >= m) continue;
            int i = nq++;
            for (; i > 0 && q[i - 1] > p; i--) q[i] = q[i - 1];
            q[i] = p;
        }
        float *d = pd + r * c;
        if (beta == 0.0f) /* written: the sums of a zeroed row, bit for bit */
            for (int64_t j = 0; j < c; j++) d[j] = 0.0f;
        for (int i = 0; i < nq; i++) {
            const float *s = ps + (int64_t)q[i] * c;
            for (int64_t j = 0; j < c; j++) d[j] += s[j];
        }
    }
}

void sl_cpu_scatter_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src,
                             const sl_tensor *idx) {
    (void)ctx;
    SL_CHECK(dst->dtype == SL_F32 && src->dtype == SL_F32, "cpu scatter_add_rows: only f32");
    const int64_t m = idx->numel, c = sl_last_dim(dst), rows = sl_rows(dst);
    const int32_t *pi = sl_i32(idx);
    const float *ps = sl_f32(src);
    float *pd = sl_f32(dst);
    check_index(pi, m, rows, "scatter_add_rows");
    if (m * c <= PERM_PAR_MIN) {
        for (int64_t i = 0; i < m; i++) {
            float *d = pd + (int64_t)pi[i] * c;
            const float *s = ps + i * c;
            for (int64_t j = 0; j < c; j++) d[j] += s[j];
        }
        return;
    }
    /* Invert idx (counting sort, stable): the sources of destination row r are
     * order[start[r] .. start[r+1]) in increasing i. Each thread then owns whole rows. */
    int64_t *start = sl_xcalloc((size_t)rows + 1, sizeof(int64_t));
    int64_t *order = sl_xmalloc(sizeof(int64_t) * (size_t)(m > 0 ? m : 1));
    for (int64_t i = 0; i < m; i++) start[pi[i] + 1]++;
    for (int64_t r = 0; r < rows; r++) start[r + 1] += start[r];
    int64_t *fill = sl_xmalloc(sizeof(int64_t) * (size_t)(rows > 0 ? rows : 1));
    memcpy(fill, start, sizeof(int64_t) * (size_t)rows);
    for (int64_t i = 0; i < m; i++) order[fill[pi[i]]++] = i;
    free(fill);
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; r++) {
        float *d = pd + r * c;
        for (int64_t q = start[r]; q < start[r + 1]; q++) {
            const float *s = ps + order[q] * c;
            for (int64_t j = 0; j < c; j++) d[j] += s[j];
        }
    }
    free(order);
    free(start);
}

void sl_cpu_moe_combine(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *slot_pos,
                        const sl_tensor *w, const sl_tensor *res) {
    (void)ctx;
    SL_CHECK(y->dtype == SL_F32 && x->dtype == SL_F32 && w->dtype == SL_F32,
             "cpu moe_combine: only f32");
    const int64_t n = sl_rows(y), c = sl_last_dim(y), k = sl_last_dim(w);
    const int32_t *psp = sl_i32(slot_pos);
    const float *px = sl_f32(x), *pw = sl_f32(w), *pres = res ? sl_f32(res) : NULL;
    float *py = sl_f32(y);
    check_index(psp, n * k, sl_rows(x), "moe_combine");
#pragma omp parallel for schedule(static) if (n * k * c > PERM_PAR_MIN)
    for (int64_t t = 0; t < n; t++) {
        float *yr = py + t * c;
        for (int64_t i = 0; i < c; i++) yr[i] = 0.0f;
        for (int64_t j = 0; j < k; j++) {
            const float wj = pw[t * k + j];
            const float *xr = px + (int64_t)psp[t * k + j] * c;
            for (int64_t i = 0; i < c; i++) yr[i] += wj * xr[i];
        }
        /* the residual after the whole sum: the bits of the separate add it replaces */
        for (int64_t i = 0; pres && i < c; i++) yr[i] = pres[t * c + i] + yr[i];
    }
}

void sl_cpu_moe_combine_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                            const sl_tensor *x, const sl_tensor *slot_pos, const sl_tensor *w) {
    (void)ctx;
    SL_CHECK(dx->dtype == SL_F32 && (!dw || dw->dtype == SL_F32) && dy->dtype == SL_F32 &&
                 (!x || x->dtype == SL_F32) && w->dtype == SL_F32,
             "cpu moe_combine_bwd: only f32");
    const int64_t n = sl_rows(w), c = sl_last_dim(dx), k = sl_last_dim(w);
    const int32_t *psp = sl_i32(slot_pos);
    const float *pdy = sl_f32(dy), *px = x ? sl_f32(x) : NULL, *pw = sl_f32(w);
    float *pdx = sl_f32(dx), *pdw = dw ? sl_f32(dw) : NULL;
    check_index(psp, n * k, x && sl_rows(x) < sl_rows(dx) ? sl_rows(x) : sl_rows(dx),
                "moe_combine_bwd");
#pragma omp parallel for schedule(static) if (n * k * c > PERM_PAR_MIN)
    for (int64_t t = 0; t < n; t++) {
        const float *dyr = pdy + t * c;
        for (int64_t j = 0; j < k; j++) {
            const int64_t row = psp[t * k + j];
            const float wj = pw[t * k + j];
            float *dxr = pdx + row * c;
            if (!pdw) { /* dx alone (no x) */
                for (int64_t i = 0; i < c; i++) dxr[i] = wj * dyr[i];
                continue;
            }
            const float *xr = px + row * c;
            double dot = 0.0;
            for (int64_t i = 0; i < c; i++) {
                dot += (double)dyr[i] * xr[i];
                dxr[i] = wj * dyr[i];
            }
            pdw[t * k + j] = (float)dot;
        }
    }
}
