/* tests/test_attention_qgate.c - q/gate split and merge: exact layouts and round trip. */
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

/* Encodes (token, column) so every element of qall is distinct and its origin is known. */
static float code(int t, int col) {
    return (float)(t * 1000 + col);
}

static void check_mode(sl_gate_mode mode, const char *name) {
    enum { T = 5, H = 3, D = 4 };
    const int hd = H * D;
    const int w = mode == SL_GATE_ELEMENTWISE ? 2 * hd : mode == SL_GATE_HEADWISE ? hd + H : hd;
    const int dg = mode == SL_GATE_ELEMENTWISE ? D : 1;
    float *qall = malloc(sizeof(float) * T * w);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < w; c++) qall[t * w + c] = code(t, c);
    sl_tensor *tqall = sl_test_tensor(SL_F32, 2, (int64_t[]){T, w}, qall);
    sl_tensor *tq = sl_test_tensor(SL_F32, 3, (int64_t[]){T, H, D}, NULL);
    sl_tensor *tg =
        mode == SL_GATE_NONE ? NULL : sl_test_tensor(SL_F32, 3, (int64_t[]){T, H, dg}, NULL);
    sl_op_qgate_split(tq, tg, tqall, mode);
    float *q = sl_test_host_f32(tq), *g = tg ? sl_test_host_f32(tg) : NULL;
    int bad_q = 0, bad_g = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            for (int e = 0; e < D; e++) {
                /* The reference card: elementwise per head [q_h | g_h]; else queries first. */
                int qcol = mode == SL_GATE_ELEMENTWISE ? h * 2 * D + e : h * D + e;
                bad_q += q[(t * H + h) * D + e] != code(t, qcol);
                if (mode == SL_GATE_ELEMENTWISE)
                    bad_g += g[(t * H + h) * D + e] != code(t, h * 2 * D + D + e);
            }
            if (mode == SL_GATE_HEADWISE) bad_g += g[t * H + h] != code(t, hd + h);
        }
    CHECK(bad_q == 0, "%s split: %d query elements in the wrong place", name, bad_q);
    CHECK(bad_g == 0, "%s split: %d gate elements in the wrong place", name, bad_g);

    /* Merge is the exact inverse: qall comes back bit for bit. */
    sl_tensor *back = sl_test_tensor(SL_F32, 2, (int64_t[]){T, w}, NULL);
    sl_op_fill(back, -1.0f);
    sl_op_qgate_merge(back, tq, tg, mode);
    float *hb = sl_test_host_f32(back);
    CHECK(memcmp(hb, qall, sizeof(float) * T * w) == 0, "%s merge(split(x)) != x", name);
    free(qall), free(q), free(g), free(hb);
    sl_tensor_free(tqall), sl_tensor_free(tq), sl_tensor_free(back);
    if (tg) sl_tensor_free(tg);
}

int main(void) {
    check_mode(SL_GATE_ELEMENTWISE, "elementwise");
    check_mode(SL_GATE_HEADWISE, "headwise");
    check_mode(SL_GATE_NONE, "none");
    return sl_test_finish("test_attention_qgate");
}
