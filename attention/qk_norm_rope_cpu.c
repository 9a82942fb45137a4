/*
 * attention/qk_norm_rope_cpu.c - the attention's queries and keys from the projections: the
 * q/gate split, the per-head QK-norm and RoPE (core/ops.h, sl_op_qk_norm_rope_fwd/_bwd), on the
 * CPU as the composition of the separate kernels (attention/qgate_cpu.c, core/rmsnorm_cpu.c,
 * attention/rope_cpu.c) on temporaries: the same bits as calling them one by one, which is what
 * the CPU backend, the numerical reference, did before the CUDA backend fused them
 * (attention/qk_norm_rope.cu).
 */
#include <stdlib.h>
#include <string.h>

#include "attention/kernels_cpu.h"
#include "core/kernels_cpu.h"
#include "core/log.h"

/* An fp32 [a, b, c] tensor over host memory that the caller owns. */
static sl_tensor scratch3(sl_backend *be, int64_t a, int64_t b, int64_t c, float *data) {
    sl_tensor t = {be, SL_F32, 3, {a, b, c}, a * b * c, data, true};
    return t;
}

static float *alloc_floats(int64_t n) {
    return sl_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
}

/* Gate elements per token and head of a layout. */
static int64_t gate_cols(sl_gate_mode mode, int64_t d) {
    return mode == SL_GATE_ELEMENTWISE ? d : mode == SL_GATE_HEADWISE ? 1 : 0;
}

void sl_cpu_qk_norm_rope_fwd(void *ctx, sl_tensor *qn, sl_tensor *kn, sl_tensor *g,
                             sl_tensor *q_rstd, sl_tensor *k_rstd, const sl_tensor *qall,
                             const sl_tensor *k, const sl_qk_norm_rope *p) {
    const int64_t t = qn->shape[0], h = qn->shape[1], d = qn->shape[2];
    float *qbuf = alloc_floats(t * h * d);
    sl_tensor q = scratch3(qn->be, t, h, d, qbuf); /* the pre-norm queries */
    sl_cpu_qgate_split(ctx, &q, g, qall, p->mode);
    sl_cpu_rmsnorm_fwd(ctx, qn, q_rstd, &q, p->qw, p->eps);
    sl_cpu_rmsnorm_fwd(ctx, kn, k_rstd, k, p->kw, p->eps);
    sl_cpu_rope_fwd(ctx, qn, p->pos, p->inv_freq, p->mscale);
    sl_cpu_rope_fwd(ctx, kn, p->pos, p->inv_freq, p->mscale);
    free(qbuf);
}

void sl_cpu_qk_norm_rope_bwd(void *ctx, sl_tensor *dqall, sl_tensor *dk_pre, sl_tensor *dqw,
                             sl_tensor *dkw, const sl_tensor *dq, const sl_tensor *dk,
                             const sl_tensor *dg, const sl_tensor *qall, const sl_tensor *k,
                             const sl_tensor *q_rstd, const sl_tensor *k_rstd,
                             const sl_qk_norm_rope *p) {
    const int64_t t = dq->shape[0], h = dq->shape[1], d = dq->shape[2], kv = dk->shape[1];
    const int64_t nq = t * h * d, nk = t * kv * d, ng = t * h * gate_cols(p->mode, d);
    /* the pre-norm queries (and the gate, which the split writes too), the rotated-back dq, the
     * queries' gradient before the merge, the rotated-back dk */
    float *buf = alloc_floats(3 * nq + ng + nk);
    sl_tensor q = scratch3(qall->be, t, h, d, buf);
    sl_tensor dqr = scratch3(qall->be, t, h, d, buf + nq);
    sl_tensor dqp = scratch3(qall->be, t, h, d, buf + 2 * nq);
    sl_tensor gate = scratch3(qall->be, t, h, gate_cols(p->mode, d), buf + 3 * nq);
    sl_tensor dkr = scratch3(qall->be, t, kv, d, buf + 3 * nq + ng);
    sl_cpu_qgate_split(ctx, &q, p->mode != SL_GATE_NONE ? &gate : NULL, qall, p->mode);
    memcpy(dqr.data, dq->data, (size_t)nq * sizeof(float));
    memcpy(dkr.data, dk->data, (size_t)nk * sizeof(float));
    sl_cpu_rope_bwd(ctx, &dqr, p->pos, p->inv_freq, p->mscale);
    sl_cpu_rope_bwd(ctx, &dkr, p->pos, p->inv_freq, p->mscale);
    sl_cpu_rmsnorm_bwd(ctx, &dqp, dqw, &dqr, NULL, &q, p->qw, q_rstd, NULL);
    sl_cpu_rmsnorm_bwd(ctx, dk_pre, dkw, &dkr, NULL, k, p->kw, k_rstd, NULL);
    sl_cpu_qgate_merge(ctx, dqall, &dqp, dg, p->mode);
    free(buf);
}
