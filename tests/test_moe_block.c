/*
 * tests/test_moe_block.c - the MoE block through its own interface (moe/moe_block.h):
 * sl_moe_block_declare / alloc / forward / backward on one rank (ep = NULL and per-micro-batch
 * LBL, as the trainer runs a single expert-parallel rank), with the shared expert and its
 * sigmoid gate, and the aux-loss-free selection bias keeping one expert unused (an empty
 * group). The reference is a naive per-token loop in double written from the reference card
 * (/work/shared/reference/model-math.md, "MoE block") and moe_block.h:
 *
 *   logits = X W_r^T,  p = softmax(logits),  top-k of p + bias (ties: lower index),
 *   w_j = p_{i_j} / sum_m p_{i_m}                                     (norm_topk_prob)
 *   y   = sum_j w_j Expert_{i_j}(X) + sigmoid(X . w_sg) SharedExpert(X)
 *   Expert(x) = W_down (silu(W_gate x) * (W_up x))                    (gate rows first)
 *   LBL = E sum_i f_i P_i  with f_i = count_i / N (sums to k), P_i = mean_n p[n, i]
 *   z   = mean_n lse_n^2
 *   J   = sum r * y + lbl_coef * LBL / k + z_coef * z
 *
 * Checks, with their tolerances:
 *   - routing (top-k indices) and the per-expert counts equal the reference exactly;
 *   - y equals the reference within 1e-5 absolute + 1e-4 relative (fp32 vs double);
 *   - the block's lbl and zloss statistics equal E sum f_i P_i and mean lse^2 within
 *     1e-5 relative (fp32 sums of O(1) terms);
 *   - the gradients of J from sl_moe_block_backward (dy = r, coefficients through
 *     sl_moe_loss_coefs) on X, the router, both expert stacks, the shared expert's two
 *     matrices and the shared gate equal central finite differences of the double reference
 *     J (h = 1e-3, every coordinate) within 2e-5 + 2e-3 |numeric|; once with r random (the
 *     whole objective) and once with r = 0, where only the auxiliary losses drive the router
 *     and X gradients, so that a wrong LBL or z coefficient cannot hide behind the larger
 *     output term.
 * The router weights are the first seed whose top-k margin exceeds what the perturbation can
 * move, so the finite differences never cross a routing change.
 */
#include <stdlib.h>
#include <string.h>

#include "moe/moe_block.h"
#include "tests/test_util.h"

enum { N = 12, C = 10, E = 6, K = 2, I = 8, F = 6 };

static const double LBL_COEF = 0.5, Z_COEF = 0.05;

/* Host values of the input and every parameter, and the output weights r of J. */
typedef struct {
    float x[N * C];
    float wr[E * C];          /* router [E, C] */
    float wgu[E * 2 * I * C]; /* experts gate_up [E, 2I, C]: gate rows, then up rows */
    float wd[E * C * I];      /* experts down [E, C, I] */
    float sgu[2 * F * C];     /* shared gate_up [2F, C] */
    float sd[C * F];          /* shared down [C, F] */
    float sg[C];              /* shared gate [1, C] */
    float bias[E];            /* selection bias (not a parameter) */
    float r[N * C];
} values;

typedef struct {
    double y[N * C], lbl, z, margin;
    int idx[N * K];
    int64_t counts[E];
} ref_out;

static double sigmoid(double v) {
    return 1.0 / (1.0 + exp(-v));
}

/* SwiGLU of one row: o[C] = down (silu(gate x) * (up x)) with gate_up [2f, C], down [C, f]. */
static void swiglu_ref(const float *gu, const float *down, int f, const float *x, double *o) {
    double h[I > F ? I : F];
    for (int i = 0; i < f; i++) {
        double g = 0.0, u = 0.0;
        for (int c = 0; c < C; c++) {
            g += (double)gu[i * C + c] * x[c];
            u += (double)gu[(f + i) * C + c] * x[c];
        }
        h[i] = g * sigmoid(g) * u;
    }
    for (int c = 0; c < C; c++) {
        o[c] = 0.0;
        for (int i = 0; i < f; i++) o[c] += (double)down[c * f + i] * h[i];
    }
}

/* The reference block in double; also the top-k selection margin (smallest gap between the
 * k-th selected score and an unselected one). */
static void reference(const values *v, ref_out *o) {
    double psum[E] = {0}, lse2 = 0.0;
    memset(o->counts, 0, sizeof o->counts);
    o->margin = 1e300;
    for (int n = 0; n < N; n++) {
        const float *x = v->x + n * C;
        double l[E], p[E], m = -1e300, s = 0.0;
        for (int e = 0; e < E; e++) {
            l[e] = 0.0;
            for (int c = 0; c < C; c++) l[e] += (double)x[c] * v->wr[e * C + c];
            m = fmax(m, l[e]);
        }
        for (int e = 0; e < E; e++) s += exp(l[e] - m);
        const double lse = m + log(s);
        lse2 += lse * lse;
        for (int e = 0; e < E; e++) {
            p[e] = exp(l[e] - lse);
            psum[e] += p[e];
        }
        int *idx = o->idx + n * K;
        bool used[E] = {false};
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!used[e] && (best < 0 || p[e] + v->bias[e] > p[best] + v->bias[best])) best = e;
            used[best] = true;
            idx[j] = best;
            o->counts[best]++;
        }
        const int last = idx[K - 1];
        for (int e = 0; e < E; e++)
            if (!used[e]) o->margin = fmin(o->margin, p[last] + v->bias[last] - p[e] - v->bias[e]);
        double wsum = 0.0;
        for (int j = 0; j < K; j++) wsum += p[idx[j]];
        double *y = o->y + n * C, eo[C];
        for (int c = 0; c < C; c++) y[c] = 0.0;
        for (int j = 0; j < K; j++) {
            const int e = idx[j];
            swiglu_ref(v->wgu + (size_t)e * 2 * I * C, v->wd + (size_t)e * C * I, I, x, eo);
            for (int c = 0; c < C; c++) y[c] += p[e] / wsum * eo[c];
        }
        double sl = 0.0;
        for (int c = 0; c < C; c++) sl += (double)v->sg[c] * x[c];
        swiglu_ref(v->sgu, v->sd, F, x, eo);
        for (int c = 0; c < C; c++) y[c] += sigmoid(sl) * eo[c];
    }
    o->lbl = 0.0;
    for (int e = 0; e < E; e++) o->lbl += ((double)o->counts[e] / N) * (psum[e] / N);
    o->lbl *= E;
    o->z = lse2 / N;
}

static double objective(const values *v, const ref_out *o) {
    double j = LBL_COEF * o->lbl / K + Z_COEF * o->z;
    for (int i = 0; i < N * C; i++) j += (double)v->r[i] * o->y[i];
    return j;
}

static double ref_objective(void *u) {
    const values *v = u;
    ref_out o;
    reference(v, &o);
    return objective(v, &o);
}

typedef struct {
    sl_params ps;
    sl_moe_block b;
    sl_tensor *x, *y, *dy, *dx;
} harness;

static void harness_init(harness *h, const values *v) {
    const sl_moe_config m = {.hidden = C,
                             .experts = E,
                             .topk = K,
                             .expert_ffn = I,
                             .shared_ffn = F,
                             .norm_topk = true,
                             .init_std = 0.1f};
    sl_backend *be = sl_test_cpu();
    sl_params_init(&h->ps, be);
    sl_moe_block_declare(&h->b, &m, 0, &h->ps, 0, 1);
    sl_params_finalize(&h->ps);
    /* One rank: no expert-parallel group and per-micro-batch LBL, as the trainer runs it. */
    const sl_moe_options opts = {.selection_bias = true};
    sl_moe_block_alloc(&h->b, &m, be, NULL, N, &opts);
    sl_router_set_bias(&h->b.router, v->bias);
    sl_tensor_from_host(h->b.router.weight->w, v->wr);
    sl_tensor_from_host(h->b.experts.gate_up->w, v->wgu);
    sl_tensor_from_host(h->b.experts.down->w, v->wd);
    sl_tensor_from_host(h->b.shared.gate_up->w, v->sgu);
    sl_tensor_from_host(h->b.shared.down->w, v->sd);
    sl_tensor_from_host(h->b.shared_gate->w, v->sg);
    h->x = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, v->x);
    h->y = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, NULL);
    h->dy = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, NULL);
    h->dx = sl_test_tensor(SL_F32, 2, (int64_t[]){N, C}, NULL);
}

static void harness_free(harness *h) {
    sl_moe_block_free(&h->b);
    sl_params_free(&h->ps);
    sl_tensor_free(h->x), sl_tensor_free(h->y), sl_tensor_free(h->dy), sl_tensor_free(h->dx);
}

/* Backward with dy = r and the test's coefficients; checks every gradient of J against
 * finite differences of the reference objective. */
static void check_gradients(harness *h, values *v, const char *what) {
    sl_tensor_from_host(h->dy, v->r);
    sl_params_zero_grad(&h->ps);
    const sl_moe_loss_coefs coefs = {.lbl_coef = LBL_COEF, .z_coef = Z_COEF};
    const sl_tensor *rest = sl_moe_block_backward(&h->b, h->x, h->dy, &coefs, h->dx);
    if (rest) sl_op_add(h->dx, h->dx, rest);
    struct {
        const char *name;
        float *host;
        const sl_tensor *grad;
        int64_t n;
    } groups[] = {
        {"dX", v->x, h->dx, N * C},
        {"d router", v->wr, h->b.router.weight->g, E * C},
        {"d experts gate_up", v->wgu, h->b.experts.gate_up->g, E * 2 * I * C},
        {"d experts down", v->wd, h->b.experts.down->g, E * C * I},
        {"d shared gate_up", v->sgu, h->b.shared.gate_up->g, 2 * F * C},
        {"d shared down", v->sd, h->b.shared.down->g, C * F},
        {"d shared gate", v->sg, h->b.shared_gate->g, C},
    };
    const double fd_h = 1e-3, atol = 2e-5, rtol = 2e-3;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        float *an = sl_test_host_f32(groups[g].grad);
        char label[96];
        snprintf(label, sizeof label, "%s, %s", groups[g].name, what);
        const int bad = sl_test_fd_check(label, groups[g].host, an, groups[g].n, ref_objective, v,
                                         fd_h, atol, rtol, (int)groups[g].n);
        CHECK(bad == 0, "%s: %d of %lld coordinates differ from finite differences", label, bad,
              (long long)groups[g].n);
        free(an);
    }
}

int main(void) {
    static values v;
    sl_test_fill_normal(v.x, N * C, 1.0f, 11);
    sl_test_fill_normal(v.wgu, E * 2 * I * C, 0.3f, 13);
    sl_test_fill_normal(v.wd, E * C * I, 0.3f, 14);
    sl_test_fill_normal(v.sgu, 2 * F * C, 0.3f, 15);
    sl_test_fill_normal(v.sd, C * F, 0.3f, 16);
    sl_test_fill_normal(v.sg, C, 0.5f, 17);
    sl_test_fill_normal(v.r, N * C, 1.0f, 18);
    for (int e = 0; e < E; e++) v.bias[e] = e == E - 1 ? -2.0f : 0.0f; /* expert E-1 unused */
    /* A perturbation h of one X or W_r entry moves a logit by at most h max(|x|, |W_r|) and a
     * probability by at most half of that: take the first router seed whose top-k margin is 4x
     * that bound, so that neither the finite differences nor fp32 rounding flip a selection. */
    ref_out ref;
    float xmax = 0.0f;
    for (int i = 0; i < N * C; i++) xmax = fmaxf(xmax, fabsf(v.x[i]));
    double need = 0.0;
    ref.margin = 0.0;
    for (uint64_t seed = 20; seed < 300 && !(ref.margin > need); seed++) {
        sl_test_fill_normal(v.wr, E * C, 0.5f, seed);
        float wmax = xmax;
        for (int i = 0; i < E * C; i++) wmax = fmaxf(wmax, fabsf(v.wr[i]));
        need = 4.0 * 0.5 * 1e-3 * wmax;
        reference(&v, &ref);
    }
    CHECK(ref.margin > need, "test setup: no router seed with selection margin > %g", need);

    harness h;
    harness_init(&h, &v);

    /* ---- forward ---- */
    sl_moe_block_forward(&h.b, h.x, NULL, h.y);
    int32_t idx[N * K];
    sl_tensor_to_host(h.b.router.topk_idx, idx);
    bool same_idx = true;
    for (int i = 0; i < N * K; i++) same_idx = same_idx && idx[i] == ref.idx[i];
    CHECK(same_idx, "routing equals the reference top-k");
    const int64_t *counts = sl_moe_block_counts(&h.b);
    CHECK(memcmp(counts, ref.counts, sizeof ref.counts) == 0, "per-expert counts");
    CHECK(counts[E - 1] == 0, "the biased-out expert got %lld tokens", (long long)counts[E - 1]);
    float y[N * C], yr[N * C];
    sl_tensor_to_host(h.y, y);
    for (int i = 0; i < N * C; i++) yr[i] = (float)ref.y[i];
    CHECK(sl_test_compare("moe block y", y, yr, N * C, 1e-5, 1e-4) <= 1.0,
          "block output equals the reference (routed experts + gated shared expert)");
    double lbl = 0.0, zloss = 0.0;
    sl_moe_block_aux_stats(&h.b, &lbl, &zloss);
    CHECK(fabs(lbl - ref.lbl) <= 1e-5 * fabs(ref.lbl), "lbl %.9g, reference E sum f P = %.9g", lbl,
          ref.lbl);
    CHECK(fabs(zloss - ref.z) <= 1e-5 * fabs(ref.z), "zloss %.9g, reference mean lse^2 = %.9g",
          zloss, ref.z);
    /* Sanity of the statistics' scale: uniform routing would give LBL = k, any routing >= 0. */
    CHECK(ref.lbl > 0.0 && ref.lbl < E, "reference LBL %g in (0, E)", ref.lbl);

    /* ---- backward: the whole objective, then the auxiliary losses alone ---- */
    check_gradients(&h, &v, "J = r.y + aux");
    static float r_saved[N * C];
    memcpy(r_saved, v.r, sizeof r_saved);
    memset(v.r, 0, sizeof v.r);
    check_gradients(&h, &v, "J = aux only");
    memcpy(v.r, r_saved, sizeof r_saved);

    /* ---- the counts on the device (the default on the CPU) or read on the host (a metrics
     * step): the same load-balancing factor, so the same gradients, bitwise ---- */
    const sl_moe_loss_coefs coefs = {.lbl_coef = LBL_COEF, .z_coef = Z_COEF};
    float *grads[2][2];
    for (int host = 0; host < 2; host++) {
        sl_moe_block_begin_step(&h.b, host == 1);
        sl_moe_block_forward(&h.b, h.x, NULL, h.y);
        CHECK(h.b.disp->counts_read == (host == 1), "the dispatch read its counts: %d, asked %d",
              (int)h.b.disp->counts_read, host);
        sl_tensor_from_host(h.dy, v.r);
        sl_params_zero_grad(&h.ps);
        const sl_tensor *rest = sl_moe_block_backward(&h.b, h.x, h.dy, &coefs, h.dx);
        if (rest) sl_op_add(h.dx, h.dx, rest);
        grads[host][0] = sl_test_host_f32(h.b.router.weight->g);
        grads[host][1] = sl_test_host_f32(h.dx);
    }
    CHECK(memcmp(grads[0][0], grads[1][0], sizeof(float) * E * C) == 0,
          "router gradient with the counts on the device and on the host");
    CHECK(memcmp(grads[0][1], grads[1][1], sizeof(float) * N * C) == 0,
          "dX with the counts on the device and on the host");
    for (int i = 0; i < 4; i++) free(grads[i / 2][i % 2]);

    harness_free(&h);
    return sl_test_finish("test_moe_block");
}
