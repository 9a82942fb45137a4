/* moe/experts.c - grouped SwiGLU experts (see experts.h). */
#include "moe/experts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"

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

static void free_buffers(sl_experts_buffers *b) {
    sl_tensor_free(b->gu);
    sl_tensor_free(b->h);
    sl_tensor_free(b->dgu);
    sl_tensor_free(b->dh);
    for (int i = 0; i < 3; i++) sl_tensor_free(b->hv[i]), b->hv[i] = NULL;
    b->gu = b->h = b->dgu = b->dh = NULL;
    b->capacity = 0;
}

void sl_experts_reserve(sl_experts *x, sl_backend *be, int64_t rows) {
    if (!x->buf) x->buf = &x->own;
    sl_experts_buffers *b = x->buf;
    if (rows <= b->capacity) return;
    free_buffers(b);
    b->capacity = rows;
    const sl_dtype a = sl_param_dtype(x->gate_up);
    for (int i = 0; i < 3; i++) b->hv[i] = sl_tensor_view_handle();
    b->gu = sl_tensor_new2(be, a, rows, 2 * x->ffn);
    b->h = sl_tensor_new2(be, a, rows, x->ffn);
    if (!b->forward_only) {
        b->dgu = sl_tensor_new2(be, a, rows, 2 * x->ffn);
        b->dh = sl_tensor_new2(be, a, rows, x->ffn);
    }
}

void sl_experts_share(sl_experts *x, sl_experts *owner) {
    SL_CHECK(owner->ffn == x->ffn && owner->hidden == x->hidden && owner->local == x->local,
             "sharing the buffers of experts of a different shape");
    free_buffers(&x->own);
    x->buf = owner->buf ? owner->buf : &owner->own;
}

/* The activation's backward runs on exactly the routed rows, not the whole capacity. */
static void swiglu_bwd_rows(sl_experts *x, int64_t m) {
    if (m == 0) return;
    sl_experts_buffers *b = x->buf;
    sl_tensor *gu = sl_tensor_view_set2(b->hv[0], b->gu, 0, m, 2 * x->ffn);
    sl_tensor *dh = sl_tensor_view_set2(b->hv[1], b->dh, 0, m, x->ffn);
    SL_PROFILE_REGION (sl_tensor_backend(gu), "SwiGLU bwd") {
        sl_op_swiglu_bwd(sl_tensor_view_set2(b->hv[2], b->dgu, 0, m, 2 * x->ffn), dh, gu);
    }
}

/* The activation's forward goes with the first projection (one kernel where the backend fuses
 * them), so its time counts in this region. */
void sl_experts_forward(sl_experts *x, const sl_tensor *in, sl_group_counts counts,
                        sl_tensor *out) {
    sl_experts_buffers *b = x->buf;
    SL_PROFILE_REGION (sl_tensor_backend(in), "expert GEMMs fwd") {
        sl_op_grouped_matmul_swiglu(b->h, b->gu, in, x->gate_up->w, counts, x->local);
        sl_op_grouped_matmul(out, b->h, x->down->w, counts, x->local, true, 0.0f);
    }
}

/* swiglu's backward writes dh and dgu only, so h is still the forward's for down's dW */
void sl_experts_backward_data(sl_experts *x, sl_group_counts counts, const sl_tensor *dout,
                              sl_tensor *din) {
    sl_experts_buffers *b = x->buf;
    SL_CHECK(!b->forward_only, "backward through forward-only experts");
    SL_PROFILE_REGION (sl_tensor_backend(dout), "expert GEMMs data grad") {
        sl_op_grouped_matmul(b->dh, dout, x->down->w, counts, x->local, false, 0.0f);
        swiglu_bwd_rows(x, counts.rows);
        sl_op_grouped_matmul(din, b->dgu, x->gate_up->w, counts, x->local, false, 0.0f);
    }
}

void sl_experts_backward_weights(sl_experts *x, const sl_tensor *in, sl_group_counts counts,
                                 const sl_tensor *dout, sl_tensor *sumsq) {
    sl_experts_buffers *b = x->buf;
    SL_PROFILE_REGION (sl_tensor_backend(in), "expert GEMMs weight grad") {
        sl_op_grouped_matmul_dw(x->down->g, dout, b->h, counts, x->local,
                                sl_param_grad_beta(x->down), sumsq);
        sl_op_grouped_matmul_dw(x->gate_up->g, b->dgu, in, counts, x->local,
                                sl_param_grad_beta(x->gate_up), sumsq);
    }
}

void sl_experts_park(sl_experts *x, sl_experts_parked *p, sl_group_counts counts) {
    sl_experts_buffers *b = x->buf;
    SL_CHECK(b == &x->own && !b->forward_only && p->held < SL_DW_MAX_SEGMENTS - 1,
             "internal error: parking the rows of experts that share their buffers, are "
             "forward-only, or already hold %d micro-batches'",
             p->held);
    sl_experts_parked_rows *r = &p->mb[p->held];
    sl_tensor_trade(&r->h, &b->h); /* of the buffers' capacity: sl_experts_reserve's rows */
    sl_tensor_trade(&r->dgu, &b->dgu);
    if (counts.host) {
        if (!r->counts) r->counts = sl_xcalloc((size_t)x->local, sizeof(int64_t));
        memcpy(r->counts, counts.host, (size_t)x->local * sizeof(int64_t));
        r->k = sl_counts_host(r->counts, x->local);
    } else { /* the next micro-batch's sort overwrites the dispatcher's: a copy on the device */
        if (!r->dcounts)
            r->dcounts = sl_tensor_new1(sl_tensor_backend(counts.dev), SL_I32, x->local);
        sl_tensor_copy(r->dcounts, counts.dev);
        r->k = sl_counts_device(r->dcounts, counts.rows);
    }
    p->held++;
}

void sl_experts_backward_weights_group(sl_experts *x, sl_experts_parked *p, const sl_tensor *in,
                                       sl_group_counts counts, const sl_tensor *dout,
                                       sl_tensor *sumsq) {
    sl_experts_buffers *b = x->buf;
    SL_CHECK(p->held > 0, "internal error: a grouped weight gradient without a parked micro-batch");
    sl_dw_segment down[SL_DW_MAX_SEGMENTS], gate_up[SL_DW_MAX_SEGMENTS];
    const int n = p->held + 1; /* the parked micro-batches in the order they ran, then this one */
    for (int i = 0; i < p->held; i++) {
        const sl_experts_parked_rows *r = &p->mb[i];
        down[i] = (sl_dw_segment){r->dout, r->h, r->k};
        gate_up[i] = (sl_dw_segment){r->dgu, r->in, r->k};
    }
    down[n - 1] = (sl_dw_segment){dout, b->h, counts};
    gate_up[n - 1] = (sl_dw_segment){b->dgu, in, counts};
    SL_PROFILE_REGION (sl_tensor_backend(in), "expert GEMMs weight grad") {
        sl_op_grouped_matmul_dw_segments(x->down->g, down, n, x->local, sl_param_grad_beta(x->down),
                                         sumsq);
        sl_op_grouped_matmul_dw_segments(x->gate_up->g, gate_up, n, x->local,
                                         sl_param_grad_beta(x->gate_up), sumsq);
    }
    p->held = 0;
}

void sl_experts_parked_trim(sl_experts_parked *p, int keep) {
    SL_CHECK(p->held == 0, "internal error: freeing parking slots with %d micro-batches parked",
             p->held);
    for (int i = keep < 0 ? 0 : keep; i < SL_DW_MAX_SEGMENTS - 1; i++) {
        sl_experts_parked_rows *r = &p->mb[i];
        sl_tensor *ts[] = {r->in, r->dout, r->h, r->dgu, r->dcounts};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) sl_tensor_free(ts[j]);
        free(r->counts);
        memset(r, 0, sizeof *r);
    }
}

void sl_experts_parked_free(sl_experts_parked *p) {
    p->held = 0;
    sl_experts_parked_trim(p, 0);
}

void sl_experts_free(sl_experts *x) {
    /* shared buffers are freed with their owner */
    free_buffers(&x->own);
    x->buf = &x->own;
}
