/* tests/test_attention_rope.c - RoPE (rotate-half, partial rotary, YaRN) against the formulas
 * of the reference card evaluated directly in double precision. */
#include <stdlib.h>
#include <string.h>

#include "attention/rope.h"
#include "backends/ref_ops.h"
#include "tests/test_util.h"

/* Runs rope fwd or bwd on [T, NH, D] and compares with sl_ref_rope. Returns the host result. */
static float *run_rope(const float *x, const int32_t *pos, int t, int nh, int d,
                       const float *inv_freq, int half, float mscale, int bwd) {
    sl_tensor *tx = sl_test_tensor(SL_F32, 3, (int64_t[]){t, nh, d}, x);
    sl_tensor *tp = sl_test_tensor(SL_I32, 1, (int64_t[]){t}, pos);
    sl_tensor *tf = sl_test_tensor(SL_F32, 1, (int64_t[]){half}, inv_freq);
    if (bwd)
        sl_op_rope_bwd(tx, tp, tf, mscale);
    else
        sl_op_rope_fwd(tx, tp, tf, mscale);
    float *out = sl_test_host_f32(tx);
    sl_tensor_free(tx), sl_tensor_free(tp), sl_tensor_free(tf);
    return out;
}

static void test_inv_freq_plain(void) {
    sl_rope_params p = {.head_dim = 16, .partial_rotary_factor = 1.0, .base = 10000.0};
    float f[8], ms = 0;
    int lo = 0, hi = 0;
    int half = sl_rope_inv_freq(&p, f, &ms, &lo, &hi);
    CHECK(half == 8, "rot/2 = %d, expected 8", half);
    CHECK(ms == 1.0f && lo == -1 && hi == -1, "no YaRN: mscale %g low %d high %d", ms, lo, hi);
    for (int i = 0; i < 8; i++) {
        double ref = 1.0 / pow(10000.0, 2.0 * i / 16.0);
        CHECK(fabs(f[i] - ref) <= 1e-7 * ref, "inv_freq[%d] = %.9g, expected %.9g", i, f[i], ref);
    }
    p.partial_rotary_factor = 0.5;
    half = sl_rope_inv_freq(&p, f, &ms, NULL, NULL);
    CHECK(half == 4, "partial 0.5: rot/2 = %d, expected 4", half);
    for (int i = 0; i < 4; i++) {
        double ref = 1.0 / pow(10000.0, 2.0 * i / 8.0); /* exponent over rot, not head_dim */
        CHECK(fabs(f[i] - ref) <= 1e-7 * ref, "partial inv_freq[%d] = %.9g vs %.9g", i, f[i], ref);
    }
    p.partial_rotary_factor = 0.3; /* 16 * 0.3 = 4.8 -> 4: fine; 0.1 -> 1: odd, rejected */
    CHECK(sl_rope_inv_freq(&p, f, &ms, NULL, NULL) == 2, "partial 0.3 gives rot 4");
    p.partial_rotary_factor = 0.1;
    CHECK(sl_rope_inv_freq(&p, f, &ms, NULL, NULL) == -1, "odd rot must be rejected");
}

/* The reference card's worked check. */
static void test_yarn(void) {
    sl_rope_params p = {.head_dim = 128,
                        .partial_rotary_factor = 1.0,
                        .base = 1e6,
                        .yarn = 1,
                        .factor = 4.0,
                        .original_max_position_embeddings = 32768,
                        .beta_fast = 32.0,
                        .beta_slow = 1.0};
    float f[64], ms = 0;
    int lo = -5, hi = -5;
    int half = sl_rope_inv_freq(&p, f, &ms, &lo, &hi);
    CHECK(half == 64, "YaRN rot/2 = %d", half);
    CHECK(lo == 23 && hi == 40, "YaRN ramp bounds low %d high %d, expected 23 and 40", lo, hi);
    CHECK(fabs(ms - 1.138629) < 1e-5, "YaRN mscale %.7f, expected 1.138629", ms);
    CHECK(fabs((double)ms * ms - 1.296477) < 1e-5, "YaRN logit scale %.7f, expected 1.296477",
          (double)ms * ms);
    for (int i = 0; i < 64; i++) {
        double base = 1.0 / pow(1e6, 2.0 * i / 128.0);
        double ramp = fmin(fmax((i - 23.0) / (40.0 - 23.0), 0.0), 1.0);
        double ref = base / 4.0 * ramp + base * (1.0 - ramp);
        CHECK(fabs(f[i] - ref) <= 1e-6 * ref, "YaRN inv_freq[%d] = %.9g, expected %.9g", i, f[i],
              ref);
    }
    /* High-frequency dims (i <= low) are kept, low-frequency dims (i >= high) divided by s. */
    CHECK(f[10] == (float)(1.0 / pow(1e6, 20.0 / 128.0)), "dim 10 extrapolated unchanged");
    CHECK(fabs(f[50] * 4.0 * pow(1e6, 100.0 / 128.0) - 1.0) < 1e-6, "dim 50 interpolated by s");
    p.attention_factor = 0.5;
    sl_rope_inv_freq(&p, f, &ms, NULL, NULL);
    CHECK(ms == 0.5f, "attention_factor overrides mscale (got %g)", ms);
}

static void test_rope_apply(double partial, float mscale) {
    enum { T = 9, NH = 3, D = 16 };
    sl_rope_params p = {.head_dim = D, .partial_rotary_factor = partial, .base = 10000.0};
    float f[D / 2], ms;
    const int half = sl_rope_inv_freq(&p, f, &ms, NULL, NULL);
    int32_t pos[T] = {0, 1, 2, 17, 100, 4095, 4096, 40000, 131071};
    float x[T * NH * D], y[T * NH * D];
    sl_test_fill_normal(x, T * NH * D, 1.0f, 101);
    sl_test_fill_normal(y, T * NH * D, 1.0f, 102);

    float *rx = run_rope(x, pos, T, NH, D, f, half, mscale, 0);
    float *rty = run_rope(y, pos, T, NH, D, f, half, mscale, 1);
    float ref[T * NH * D], reft[T * NH * D];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            double o[D], ot[D];
            int off = (t * NH + h) * D;
            sl_ref_rope(o, x + off, D, half, f, pos[t], mscale, 1);
            sl_ref_rope(ot, y + off, D, half, f, pos[t], mscale, -1);
            for (int e = 0; e < D; e++) ref[off + e] = (float)o[e], reft[off + e] = (float)ot[e];
        }
    /* fp32 arithmetic on N(0,1) data with cos/sin rounded to float: ~1e-7 relative. */
    CHECK(sl_test_compare("rope fwd", rx, ref, T * NH * D, 1e-6, 1e-5) <= 1.0,
          "rope fwd vs double reference (partial %g, mscale %g)", partial, mscale);
    CHECK(sl_test_compare("rope bwd", rty, reft, T * NH * D, 1e-6, 1e-5) <= 1.0,
          "rope bwd vs double reference (partial %g, mscale %g)", partial, mscale);

    /* Dims >= rot pass through bit for bit. */
    int moved = 0;
    for (int r = 0; r < T * NH; r++)
        for (int e = 2 * half; e < D; e++) moved += rx[r * D + e] != x[r * D + e];
    CHECK(moved == 0, "%d pass-through elements changed (partial %g)", moved, partial);
    if (partial < 1.0) CHECK(2 * half < D, "partial rotary must leave dims untouched");

    /* bwd is the transpose: <R x, y> = <x, R^T y>. */
    double lhs = 0, rhs = 0, scale = 0;
    for (int i = 0; i < T * NH * D; i++) {
        lhs += (double)rx[i] * y[i];
        rhs += (double)x[i] * rty[i];
        scale += fabs((double)rx[i] * y[i]);
    }
    CHECK(fabs(lhs - rhs) <= 1e-6 * scale, "<Rx, y> = %.9g but <x, R^T y> = %.9g", lhs, rhs);

    /* Relative position: <R_p a, R_p' b> depends only on p - p' (times mscale^2). */
    {
        float a[D], b[D];
        sl_test_fill_normal(a, D, 1.0f, 103);
        sl_test_fill_normal(b, D, 1.0f, 104);
        float ab[4 * D];
        memcpy(ab, a, sizeof a), memcpy(ab + D, b, sizeof b);
        memcpy(ab + 2 * D, a, sizeof a), memcpy(ab + 3 * D, b, sizeof b);
        int32_t pp[4] = {37, 12, 37 + 500, 12 + 500};
        float *r = run_rope(ab, pp, 4, 1, D, f, half, mscale, 0);
        double d1 = 0, d2 = 0;
        for (int e = 0; e < D; e++) {
            d1 += (double)r[e] * r[D + e];
            d2 += (double)r[2 * D + e] * r[3 * D + e];
        }
        CHECK(fabs(d1 - d2) < 1e-4, "shifted dot products %.7g vs %.7g", d1, d2);
        free(r);
    }
    free(rx), free(rty);
}

int main(void) {
    test_inv_freq_plain();
    test_yarn();
    test_rope_apply(1.0, 1.0f);
    test_rope_apply(1.0, 1.138629f);
    test_rope_apply(0.5, 1.0f);
    test_rope_apply(0.5, 1.138629f);
    return sl_test_finish("test_attention_rope");
}
