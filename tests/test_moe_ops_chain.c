/*
 * tests/test_moe_ops_chain.c - the MoE ops chained by hand, as moe/moe_block.c composes them
 * (the block itself, through sl_moe_block_*, is tests/test_moe_block.c):
 *
 *   logits = X Wr^T                       Wr [E, C]
 *   route (norm_topk, aux-free bias)   -> probs, topk_idx, topk_w
 *   sort -> gather X rows in expert order -> grouped GEMM with the gate_up stack [E, 2I, C]
 *   -> SwiGLU -> grouped GEMM with the down stack [E, C, I] -> combine with topk_w
 *
 * Forward: equals a naive per-token double loop over its top-k experts (1e-5 absolute,
 * 1e-4 relative), and the routing matches exactly. The bias keeps one expert unused (a
 * zero-count group).
 * Backward (the ops' backward chain: combine_bwd, grouped GEMM and grouped_matmul_dw,
 * swiglu_bwd, scatter_add_rows, router_bwd, matmul): central finite differences of
 * loss = sum r * y on X, Wr, the gate_up and the down stacks, h = 1e-3, tolerance
 * 5e-4 + 5e-3 |numeric|; the router weights are chosen so the top-k margin exceeds what the
 * perturbation can move.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

enum { N = 12, C = 10, E = 6, K = 2, I = 8, M = N * K };

typedef struct {
    float x[N * C], wr[E * C], wgu[E * 2 * I * C], wd[E * C * I], bias[E], r[N * C];
} block;

/* Activations kept for the backward. */
typedef struct {
    sl_tensor *x, *wr, *wgu, *wd, *bias, *logits, *probs, *idx, *w, *stats, *counts, *stok, *spos,
        *xs, *gu, *h, *out, *y;
    int64_t counts_h[E];
} acts;

static void forward(const block *b, acts *a) {
    a->x = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, b->x);
    a->wr = sl_test_tensor(SL_F32, 2, (int64_t[]){E, C}, b->wr);
    a->wgu = sl_test_tensor(SL_F32, 3, (int64_t[]){E, 2 * I, C}, b->wgu);
    a->wd = sl_test_tensor(SL_F32, 3, (int64_t[]){E, C, I}, b->wd);
    a->bias = sl_test_tensor(SL_F32, 1, (int64_t[]){E}, b->bias);
    a->logits = sl_test_tensor(SL_F32, 2, (int64_t[]){N, E}, NULL);
    a->probs = sl_test_tensor(SL_F32, 2, (int64_t[]){N, E}, NULL);
    a->idx = sl_test_tensor(SL_I32, 2, (int64_t[]){N, K}, NULL);
    a->w = sl_test_tensor(SL_F32, 2, (int64_t[]){N, K}, NULL);
    a->stats = sl_test_tensor(SL_F32, 1, (int64_t[]){E + 1}, NULL);
    a->counts = sl_test_tensor(SL_I32, 1, (int64_t[]){E}, NULL);
    a->stok = sl_test_tensor(SL_I32, 1, (int64_t[]){M}, NULL);
    a->spos = sl_test_tensor(SL_I32, 1, (int64_t[]){M}, NULL);
    a->xs = sl_test_tensor(SL_F32, 2, (int64_t[]){M, C}, NULL);
    a->gu = sl_test_tensor(SL_F32, 2, (int64_t[]){M, 2 * I}, NULL);
    a->h = sl_test_tensor(SL_F32, 2, (int64_t[]){M, I}, NULL);
    a->out = sl_test_tensor(SL_F32, 2, (int64_t[]){M, C}, NULL);
    a->y = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, NULL);

    sl_op_matmul(a->logits, a->x, a->wr, false, true, 1.0f, 0.0f);
    sl_op_router_fwd(a->probs, a->idx, a->w, a->stats, a->logits, a->bias, true);
    sl_op_moe_sort(a->counts, a->stok, a->spos, a->idx);
    int32_t c32[E];
    sl_tensor_to_host(a->counts, c32);
    for (int e = 0; e < E; e++) a->counts_h[e] = c32[e];
    sl_op_gather_rows(a->xs, a->x, a->stok);
    sl_op_grouped_matmul(a->gu, a->xs, a->wgu, sl_counts_host(a->counts_h, E), E, true, 0.0f);
    sl_op_swiglu_fwd(a->h, a->gu);
    sl_op_grouped_matmul(a->out, a->h, a->wd, sl_counts_host(a->counts_h, E), E, true, 0.0f);
    sl_op_moe_combine(a->y, a->out, a->spos, a->w, NULL);
}

static void free_acts(acts *a) {
    sl_tensor *all[] = {a->x,     a->wr,  a->wgu, a->wd,    a->bias,   a->logits,
                        a->probs, a->idx, a->w,   a->stats, a->counts, a->stok,
                        a->spos,  a->xs,  a->gu,  a->h,     a->out,    a->y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sl_tensor_free(all[i]);
}

/* Naive per-token reference in double; also returns the routing and the selection margin. */
static double naive(const block *b, double *y, int *idx_out) {
    double margin = 1e9;
    for (int n = 0; n < N; n++) {
        double l[E], p[E], m = -1e300, s = 0.0;
        for (int e = 0; e < E; e++) {
            l[e] = 0.0;
            for (int c = 0; c < C; c++) l[e] += (double)b->x[n * C + c] * b->wr[e * C + c];
            m = fmax(m, l[e]);
        }
        for (int e = 0; e < E; e++) s += exp(l[e] - m);
        for (int e = 0; e < E; e++) p[e] = exp(l[e] - m) / s;
        int idx[K];
        bool used[E] = {false};
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!used[e] && (best < 0 || p[e] + b->bias[e] > p[best] + b->bias[best])) best = e;
            used[best] = true;
            idx[j] = best;
            idx_out[n * K + j] = best;
        }
        for (int e = 0; e < E; e++)
            if (!used[e])
                margin = fmin(margin, p[idx[K - 1]] + b->bias[idx[K - 1]] - p[e] - b->bias[e]);
        double wsum = 0.0;
        for (int j = 0; j < K; j++) wsum += p[idx[j]];
        for (int c = 0; c < C; c++) y[n * C + c] = 0.0;
        for (int j = 0; j < K; j++) {
            const int e = idx[j];
            const double w = p[e] / wsum;
            double hh[I];
            for (int i = 0; i < I; i++) {
                double g = 0.0, u = 0.0;
                for (int c = 0; c < C; c++) {
                    g += (double)b->wgu[(e * 2 * I + i) * C + c] * b->x[n * C + c];
                    u += (double)b->wgu[(e * 2 * I + I + i) * C + c] * b->x[n * C + c];
                }
                hh[i] = g / (1.0 + exp(-g)) * u;
            }
            for (int c = 0; c < C; c++) {
                double o = 0.0;
                for (int i = 0; i < I; i++) o += (double)b->wd[(e * C + c) * I + i] * hh[i];
                y[n * C + c] += w * o;
            }
        }
    }
    return margin;
}

static double block_loss(void *u) {
    const block *b = u;
    acts a;
    forward(b, &a);
    float y[N * C];
    sl_tensor_to_host(a.y, y);
    free_acts(&a);
    double l = 0.0;
    for (int i = 0; i < N * C; i++) l += (double)b->r[i] * y[i];
    return l;
}

int main(void) {
    static block b;
    sl_test_fill_normal(b.x, N * C, 1.0f, 1);
    sl_test_fill_normal(b.wgu, E * 2 * I * C, 0.3f, 3);
    sl_test_fill_normal(b.wd, E * C * I, 0.3f, 4);
    sl_test_fill_normal(b.r, N * C, 1.0f, 5);
    for (int e = 0; e < E; e++) b.bias[e] = e == E - 1 ? -2.0f : 0.0f; /* expert E-1 unused */
    double yref[N * C];
    int iref[N * K];
    /* The finite differences perturb X and Wr by h = 1e-3, which moves a logit by at most
     * h * max(|x|, |Wr|) and a probability by at most half of that: pick the first router
     * seed whose top-k margin is 4x that bound, so the selection cannot flip. */
    float xmax = 0.0f;
    for (int i = 0; i < N * C; i++) xmax = fmaxf(xmax, fabsf(b.x[i]));
    double margin = 0.0, need = 0.0;
    for (uint64_t seed = 2; seed < 200 && !(margin > need); seed++) {
        sl_test_fill_normal(b.wr, E * C, 0.5f, seed);
        float wmax = xmax;
        for (int i = 0; i < E * C; i++) wmax = fmaxf(wmax, fabsf(b.wr[i]));
        need = 4.0 * 0.5 * 1e-3 * wmax;
        margin = naive(&b, yref, iref);
    }
    CHECK(margin > need, "test setup: no router seed with selection margin > %g", need);

    /* ---- forward ---- */
    acts a;
    forward(&b, &a);
    float y[N * C], yr[N * C];
    int32_t idx[N * K];
    sl_tensor_to_host(a.y, y);
    sl_tensor_to_host(a.idx, idx);
    for (int i = 0; i < N * C; i++) yr[i] = (float)yref[i];
    CHECK(memcmp(idx, iref, sizeof idx) == 0, "routing matches the naive top-k");
    CHECK(a.counts_h[E - 1] == 0, "the biased-out expert has no tokens");
    CHECK(sl_test_compare("moe block y", y, yr, N * C, 1e-5, 1e-4) <= 1.0,
          "MoE block forward equals the naive per-token loop");

    /* ---- backward through the ops ---- */
    sl_tensor *dy = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, b.r);
    sl_tensor *dout = sl_test_tensor(SL_F32, 2, (int64_t[]){M, C}, NULL);
    sl_tensor *dw = sl_test_tensor(SL_F32, 2, (int64_t[]){N, K}, NULL);
    sl_tensor *dh = sl_test_tensor(SL_F32, 2, (int64_t[]){M, I}, NULL);
    sl_tensor *dgu = sl_test_tensor(SL_F32, 2, (int64_t[]){M, 2 * I}, NULL);
    sl_tensor *dxs = sl_test_tensor(SL_F32, 2, (int64_t[]){M, C}, NULL);
    sl_tensor *dx = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, NULL);
    sl_tensor *dlog = sl_test_tensor(SL_F32, 2, (int64_t[]){N, E}, NULL);
    sl_tensor *dwr = sl_test_tensor(SL_F32, 2, (int64_t[]){E, C}, NULL);
    sl_tensor *dwgu = sl_test_tensor(SL_F32, 3, (int64_t[]){E, 2 * I, C}, NULL);
    sl_tensor *dwd = sl_test_tensor(SL_F32, 3, (int64_t[]){E, C, I}, NULL);
    sl_op_moe_combine_bwd(dout, dw, dy, a.out, a.spos, a.w);
    sl_op_grouped_matmul(dh, dout, a.wd, sl_counts_host(a.counts_h, E), E, false, 0.0f);
    sl_op_grouped_matmul_dw(dwd, dout, a.h, sl_counts_host(a.counts_h, E), E, 1.0f, NULL);
    sl_op_swiglu_bwd(dgu, dh, a.gu);
    sl_op_grouped_matmul(dxs, dgu, a.wgu, sl_counts_host(a.counts_h, E), E, false, 0.0f);
    sl_op_grouped_matmul_dw(dwgu, dgu, a.xs, sl_counts_host(a.counts_h, E), E, 1.0f, NULL);
    sl_op_scatter_add_rows(dx, dxs, a.stok);
    sl_op_router_bwd(dlog, dw, a.probs, a.idx, a.w, a.logits, NULL, 0.0f, true);
    sl_op_matmul(dx, dlog, a.wr, false, false, 1.0f, 1.0f);
    sl_op_matmul(dwr, dlog, a.x, true, false, 1.0f, 1.0f);
    float *gx = sl_test_host_f32(dx), *gwr = sl_test_host_f32(dwr);
    float *gwgu = sl_test_host_f32(dwgu), *gwd = sl_test_host_f32(dwd);
    const double h = 1e-3, at = 5e-4, rt = 5e-3;
    CHECK(sl_test_fd_check("block dX", b.x, gx, N * C, block_loss, &b, h, at, rt, 60) == 0,
          "MoE block dX finite differences");
    CHECK(sl_test_fd_check("block dWr", b.wr, gwr, E * C, block_loss, &b, h, at, rt, 60) == 0,
          "MoE block dW_router finite differences");
    CHECK(sl_test_fd_check("block dWgu", b.wgu, gwgu, E * 2 * I * C, block_loss, &b, h, at, rt,
                           120) == 0,
          "MoE block d gate_up finite differences");
    CHECK(sl_test_fd_check("block dWd", b.wd, gwd, E * C * I, block_loss, &b, h, at, rt, 120) == 0,
          "MoE block d down finite differences");
    /* The unused expert's weight gradients stay zero. */
    double unused = 0.0;
    for (int i = 0; i < 2 * I * C; i++) unused += fabs(gwgu[(E - 1) * 2 * I * C + i]);
    for (int i = 0; i < C * I; i++) unused += fabs(gwd[(E - 1) * C * I + i]);
    CHECK(unused == 0.0, "unused expert has zero weight gradient");
    free(gx), free(gwr), free(gwgu), free(gwd);
    sl_tensor *all[] = {dy, dout, dw, dh, dgu, dxs, dx, dlog, dwr, dwgu, dwd};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sl_tensor_free(all[i]);
    free_acts(&a);
    return sl_test_finish("test_moe_ops_chain");
}
