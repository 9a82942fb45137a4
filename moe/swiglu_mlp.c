/* moe/swiglu_mlp.c - dense SwiGLU FFN (see swiglu_mlp.h). */
#include "moe/swiglu_mlp.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"

void sl_swiglu_mlp_declare(sl_swiglu_mlp *f, sl_params *ps, const char *prefix, int64_t hidden,
                           int64_t ffn, float init_std) {
    memset(f, 0, sizeof *f);
    f->hidden = hidden;
    f->ffn = ffn;
    char name[112];
    snprintf(name, sizeof name, "%s.gate_up_proj.weight", prefix);
    f->gate_up = sl_params_add(ps, name, SL_PGROUP_DENSE, 2, (int64_t[]){2 * ffn, hidden},
                               SL_INIT_NORMAL, init_std, -1);
    snprintf(name, sizeof name, "%s.down_proj.weight", prefix);
    f->down = sl_params_add(ps, name, SL_PGROUP_DENSE, 2, (int64_t[]){hidden, ffn}, SL_INIT_NORMAL,
                            init_std, -1);
}

void sl_swiglu_mlp_alloc(sl_swiglu_mlp *f, sl_backend *be, int64_t t, bool backward) {
    const sl_dtype a = sl_param_dtype(f->gate_up);
    f->borrowed = false;
    f->gu = sl_tensor_new2(be, a, t, 2 * f->ffn);
    f->h = sl_tensor_new2(be, a, t, f->ffn);
    f->dgu = backward ? sl_tensor_new2(be, a, t, 2 * f->ffn) : NULL;
    f->dh = backward ? sl_tensor_new2(be, a, t, f->ffn) : NULL;
}

void sl_swiglu_mlp_share(sl_swiglu_mlp *f, const sl_swiglu_mlp *owner) {
    SL_CHECK(owner->ffn == f->ffn && owner->hidden == f->hidden,
             "sharing the buffers of a different MLP shape");
    f->gu = owner->gu, f->h = owner->h, f->dgu = owner->dgu, f->dh = owner->dh;
    f->borrowed = true;
}

#define R_MLP "dense or shared-expert MLP (fwd, bwd)"

void sl_swiglu_mlp_forward(sl_swiglu_mlp *f, const sl_tensor *xn, sl_tensor *y) {
    SL_PROFILE_REGION (sl_tensor_backend(xn), R_MLP) {
        sl_op_matmul(f->gu, xn, f->gate_up->w, false, true, 1.0f, 0.0f);
        sl_op_swiglu_fwd(f->h, f->gu);
        sl_op_matmul(y, f->h, f->down->w, false, true, 1.0f, 0.0f);
    }
}

void sl_swiglu_mlp_backward(sl_swiglu_mlp *f, const sl_tensor *xn, const sl_tensor *dy,
                            sl_tensor *dxn) {
    SL_PROFILE_REGION (sl_tensor_backend(xn), R_MLP) {
        sl_op_matmul(f->down->g, dy, f->h, true, false, 1.0f, sl_param_grad_beta(f->down));
        sl_op_matmul(f->dh, dy, f->down->w, false, false, 1.0f, 0.0f);
        sl_op_swiglu_bwd(f->dgu, f->dh, f->gu);
        sl_op_matmul(f->gate_up->g, f->dgu, xn, true, false, 1.0f, sl_param_grad_beta(f->gate_up));
        sl_op_matmul(dxn, f->dgu, f->gate_up->w, false, false, 1.0f, 1.0f);
    }
}

void sl_swiglu_mlp_free(sl_swiglu_mlp *f) {
    if (f->borrowed) return;
    sl_tensor_free(f->gu);
    sl_tensor_free(f->h);
    sl_tensor_free(f->dgu);
    sl_tensor_free(f->dh);
}
