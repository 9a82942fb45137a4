/* tests/test_attention_fwd.c - the tiled gated attention forward against a naive
 * double-precision reference (full softmax with a causal mask, GQA, the three gate modes). */
#include <stdlib.h>
#include <string.h>

#include "attention/kernels_cpu.h" /* sl_exp_f32 */
#include "backends/ref_ops.h"
#include "tests/test_util.h"

/* Tolerances: fp32 online softmax in tiles vs double with logits of std ~4 (observed worst:
 * ~5e-6 absolute on y and o, ~1e-6 on lse, so each bound has a margin of about 4x). */
#define ATOL     2e-5
#define RTOL     1e-4
#define LSE_ATOL 5e-6
#define LSE_RTOL 5e-6

static const char *mode_name(sl_gate_mode m) {
    return m == SL_GATE_ELEMENTWISE ? "elementwise" : m == SL_GATE_HEADWISE ? "headwise" : "none";
}

static void check_case(int b_, int s_, int h_, int kv, int d, sl_gate_mode mode) {
    const int64_t t = (int64_t)b_ * s_, nq = t * h_ * d, nk = t * kv * d;
    const int64_t ng = mode == SL_GATE_ELEMENTWISE ? nq : mode == SL_GATE_HEADWISE ? t * h_ : 0;
    const double scale = 1.0 / sqrt((double)d);
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk);
    float *v = malloc(sizeof(float) * nk), *g = ng ? malloc(sizeof(float) * ng) : NULL;
    uint64_t seed = (uint64_t)(s_ * 131 + d * 7 + mode);
    sl_test_fill_normal(q, nq, 2.0f, seed + 1); /* logits of std ~4: exercises the rescaling */
    sl_test_fill_normal(k, nk, 2.0f, seed + 2);
    sl_test_fill_normal(v, nk, 1.0f, seed + 3);
    if (g) sl_test_fill_normal(g, ng, 2.0f, seed + 4);

    sl_tensor *tq = sl_test_tensor(SL_F32, 3, (int64_t[]){t, h_, d}, q);
    sl_tensor *tk = sl_test_tensor(SL_F32, 3, (int64_t[]){t, kv, d}, k);
    sl_tensor *tv = sl_test_tensor(SL_F32, 3, (int64_t[]){t, kv, d}, v);
    sl_tensor *tg = g ? sl_test_tensor(SL_F32, 3, (int64_t[]){t, h_, ng / (t * h_)}, g) : NULL;
    sl_tensor *ty = sl_test_tensor(SL_F32, 3, (int64_t[]){t, h_, d}, NULL);
    sl_tensor *to = sl_test_tensor(SL_F32, 3, (int64_t[]){t, h_, d}, NULL);
    sl_tensor *tl = sl_test_tensor(SL_F32, 2, (int64_t[]){t, h_}, NULL);
    sl_op_fill(ty, NAN), sl_op_fill(to, NAN), sl_op_fill(tl, NAN); /* every element written */
    sl_op_gated_attn_fwd(ty, to, tl, tq, tk, tv, tg, NULL, b_, s_, (float)scale);

    double *ry = malloc(sizeof(double) * nq), *ro = malloc(sizeof(double) * nq);
    double *rl = malloc(sizeof(double) * t * h_);
    sl_ref_attn_fwd(ry, ro, rl, q, k, v, g, NULL, mode, b_, s_, h_, kv, d, scale);
    float *fy = malloc(sizeof(float) * nq), *fo = malloc(sizeof(float) * nq);
    float *fl = malloc(sizeof(float) * t * h_);
    sl_ref_f32(fy, ry, nq), sl_ref_f32(fo, ro, nq), sl_ref_f32(fl, rl, t * h_);
    float *gy = sl_test_host_f32(ty), *go = sl_test_host_f32(to), *gl = sl_test_host_f32(tl);
    CHECK(sl_test_compare("y", gy, fy, nq, ATOL, RTOL) <= 1.0, "y: B %d S %d H %d KV %d D %d %s",
          b_, s_, h_, kv, d, mode_name(mode));
    CHECK(sl_test_compare("o", go, fo, nq, ATOL, RTOL) <= 1.0, "o: B %d S %d H %d KV %d D %d %s",
          b_, s_, h_, kv, d, mode_name(mode));
    CHECK(sl_test_compare("lse", gl, fl, t * h_, LSE_ATOL, LSE_RTOL) <= 1.0,
          "lse: B %d S %d H %d KV %d D %d %s", b_, s_, h_, kv, d, mode_name(mode));
    if (mode == SL_GATE_NONE)
        CHECK(memcmp(gy, go, sizeof(float) * nq) == 0, "no gate: y must equal o exactly");

    /* Same inputs, same bits. */
    sl_op_gated_attn_fwd(ty, to, tl, tq, tk, tv, tg, NULL, b_, s_, (float)scale);
    float *gy2 = sl_test_host_f32(ty);
    CHECK(memcmp(gy, gy2, sizeof(float) * nq) == 0, "forward is not deterministic");

    free(q), free(k), free(v), free(g), free(ry), free(ro), free(rl), free(fy), free(fo), free(fl);
    free(gy), free(go), free(gl), free(gy2);
    sl_tensor_free(tq), sl_tensor_free(tk), sl_tensor_free(tv), sl_tensor_free(ty);
    sl_tensor_free(to), sl_tensor_free(tl);
    if (tg) sl_tensor_free(tg);
}

static void test_sigmoid_mean(void) {
    enum { N = 10007 };
    float *g = malloc(sizeof(float) * N);
    sl_test_fill_normal(g, N, 3.0f, 77);
    double ref = 0;
    for (int i = 0; i < N; i++) ref += 1.0 / (1.0 + exp(-(double)g[i]));
    ref /= N;
    sl_tensor *tg = sl_test_tensor(SL_F32, 2, (int64_t[]){N, 1}, g);
    double got = sl_test_op_scalar(sl_op_sigmoid_mean, tg);
    /* accumulated in double, delivered as an fp32 device scalar: one fp32 rounding */
    CHECK(fabs(got - ref) <= 6e-8 * fabs(ref), "sigmoid_mean %.15g vs %.15g", got, ref);
    free(g);
    sl_tensor_free(tg);
}

/* The softmax's exp against exp in double over its whole normal range (observed worst 1.0e-7
 * relative, 1.7 ulp; bound 2e-7); 0 below -87, +inf above 88, NaN propagates, exact at 0. */
static void test_exp(void) {
    double worst = 0, wx = 0;
    for (int i = 0; i <= 4000000; i++) {
        float x = -87.0f + 88.0f * (float)i / 4000000.0f;
        double e = exp((double)x), rel = fabs(sl_exp_f32(x) - e) / e;
        if (!(rel <= worst)) worst = rel, wx = x;
    }
    CHECK(worst < 2e-7, "sl_exp_f32: relative error %.3g at x = %.9g", worst, wx);
    CHECK(sl_exp_f32(0.0f) == 1.0f && sl_exp_f32(-88.0f) == 0.0f && sl_exp_f32(-INFINITY) == 0.0f &&
              sl_exp_f32(-1e30f) == 0.0f && isinf(sl_exp_f32(89.0f)) && isnan(sl_exp_f32(NAN)) &&
              isnan(sl_exp_f32(-NAN)),
          "sl_exp_f32 special values");
}

int main(void) {
    test_exp();
    const int seqs[] = {1, 7, 64, 70, 130};
    const sl_gate_mode modes[] = {SL_GATE_ELEMENTWISE, SL_GATE_HEADWISE, SL_GATE_NONE};
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < 5; i++) check_case(2, seqs[i], 4, 2, 16, modes[m]);
    /* Head dims and GQA ratios: MQA (KV 1), MHA (KV = H), a larger head dim. */
    check_case(2, 130, 4, 1, 32, SL_GATE_ELEMENTWISE);
    check_case(1, 200, 3, 3, 8, SL_GATE_HEADWISE);
    check_case(1, 129, 2, 1, 128, SL_GATE_ELEMENTWISE);
    test_sigmoid_mean();
    return sl_test_finish("test_attention_fwd");
}
