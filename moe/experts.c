/* moe/experts.c - grouped SwiGLU experts (see experts.h). */
#include "moe/experts.h"

#include <stdio.h>
#include <string.h>

#include "core/ops.h"

void sl_experts_declare(sl_experts *x, sl_params *ps, int layer, int first, int local,
                        int64_t hidden, int64_t ffn, float init_std) {
    memset(x, 0, sizeof *x);
    x->local = local;
    x->first = first;
    x->hidden = hidden;
    x->ffn = ffn;
    char name[112];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", layer);
    x->gate_up = sl_params_add(ps, name, SL_PGROUP_EXPERT, 3, (int64_t[]){local, 2 * ffn, hidden},
                               SL_INIT_NORMAL, init_std, first);
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj", layer);
    x->down = sl_params_add(ps, name, SL_PGROUP_EXPERT, 3, (int64_t[]){local, hidden, ffn},
                            SL_INIT_NORMAL, init_std, first);
}

void sl_experts_reserve(sl_experts *x, sl_backend *be, int64_t rows) {
    if (rows <= x->capacity) return;
    sl_experts_free(x);
    x->capacity = rows;
    const sl_dtype a = sl_param_dtype(x->gate_up);
    for (int i = 0; i < 3; i++) x->hv[i] = sl_tensor_view_handle();
    x->gu = sl_tensor_new2(be, a, rows, 2 * x->ffn);
    x->h = sl_tensor_new2(be, a, rows, x->ffn);
    x->dgu = sl_tensor_new2(be, a, rows, 2 * x->ffn);
    x->dh = sl_tensor_new2(be, a, rows, x->ffn);
}

static int64_t total_rows(const sl_experts *x, const int64_t *counts) {
    int64_t m = 0;
    for (int e = 0; e < x->local; e++) m += counts[e];
    return m;
}

/* The elementwise SwiGLU runs on exactly the routed rows, not the whole capacity. */
static void swiglu_rows(sl_experts *x, int64_t m, bool backward) {
    if (m == 0) return;
    sl_tensor *gu = sl_tensor_view_set2(x->hv[0], x->gu, 0, m, 2 * x->ffn);
    sl_tensor *h = sl_tensor_view_set2(x->hv[1], backward ? x->dh : x->h, 0, m, x->ffn);
    if (backward)
        sl_op_swiglu_bwd(sl_tensor_view_set2(x->hv[2], x->dgu, 0, m, 2 * x->ffn), h, gu);
    else
        sl_op_swiglu_fwd(h, gu);
}

void sl_experts_forward(sl_experts *x, const sl_tensor *in, const int64_t *counts, sl_tensor *out) {
    sl_op_grouped_matmul(x->gu, in, x->gate_up->w, counts, x->local, true, 0.0f);
    swiglu_rows(x, total_rows(x, counts), false);
    sl_op_grouped_matmul(out, x->h, x->down->w, counts, x->local, true, 0.0f);
}

void sl_experts_backward(sl_experts *x, const sl_tensor *in, const int64_t *counts,
                         const sl_tensor *dout, sl_tensor *din) {
    sl_op_grouped_matmul_dw(x->down->g, dout, x->h, counts, x->local);
    sl_op_grouped_matmul(x->dh, dout, x->down->w, counts, x->local, false, 0.0f);
    swiglu_rows(x, total_rows(x, counts), true);
    sl_op_grouped_matmul_dw(x->gate_up->g, x->dgu, in, counts, x->local);
    sl_op_grouped_matmul(din, x->dgu, x->gate_up->w, counts, x->local, false, 0.0f);
}

void sl_experts_free(sl_experts *x) {
    sl_tensor_free(x->gu);
    sl_tensor_free(x->h);
    sl_tensor_free(x->dgu);
    sl_tensor_free(x->dh);
    for (int i = 0; i < 3; i++) sl_tensor_free(x->hv[i]), x->hv[i] = NULL;
    x->gu = x->h = x->dgu = x->dh = NULL;
    x->capacity = 0;
}
