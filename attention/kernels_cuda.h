/* attention/kernels_cuda.h - the CUDA kernels of attention/ (listed in backends/cuda.cu; semantics:
 * core/ops.h, conventions: docs/cuda.md). C linkage: the launchers fill the C table sl_ops_i. */
#ifndef SL_ATTENTION_KERNELS_CUDA_H
#define SL_ATTENTION_KERNELS_CUDA_H

#include "core/backend_impl.h" /* C linkage of its own */

#ifdef __cplusplus
extern "C" {
#endif

/* qgate.cu */
void sl_cuda_qgate_split(void *ctx, sl_tensor *q, sl_tensor *g, const sl_tensor *qall,
                         sl_gate_mode mode);
void sl_cuda_qgate_merge(void *ctx, sl_tensor *dqall, const sl_tensor *dq, const sl_tensor *dg,
                         sl_gate_mode mode);

/* rope.cu */
void sl_cuda_rope_fwd(void *ctx, sl_tensor *x, const sl_tensor *pos, const sl_tensor *inv_freq,
                      float mscale);
void sl_cuda_rope_bwd(void *ctx, sl_tensor *dx, const sl_tensor *pos, const sl_tensor *inv_freq,
                      float mscale);

/* gated_attn_fwd.cu (forward, sigmoid_mean), gated_attn_bwd.cu */
void sl_cuda_gated_attn_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                            const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                            const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                            float scale);
void sl_cuda_gated_attn_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv, sl_tensor *dg,
                            const sl_tensor *dy, const sl_tensor *q, const sl_tensor *k,
                            const sl_tensor *v, const sl_tensor *g, const sl_tensor *seg,
                            const sl_tensor *o, const sl_tensor *lse, int batch, int seq,
                            float scale);
void sl_cuda_sigmoid_mean(void *ctx, sl_tensor *out, const sl_tensor *g);

/* gated_attn_tc_fwd.cu, gated_attn_tc_bwd.cu: the tensor-core kernels, which
 * sl_cuda_gated_attn_fwd/bwd call for the problems sl_cuda_gated_attn_tc_supported takes
 * (bf16, head dim 64 or 128), with the same arguments, already checked (dg given with a gate)
 * and not empty. */
void sl_cuda_gated_attn_tc_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                               const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                               const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                               float scale);
void sl_cuda_gated_attn_tc_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                               sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                               const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                               const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
                               int batch, int seq, float scale);
bool sl_cuda_gated_attn_tc_supported(const sl_tensor *q);

/* gated_attn_sm90_fwd.cu, gated_attn_sm90_bwd.cu (and gated_attn_sm90_dq.cu): the Hopper kernels
 * (wgmma, TMA, warp specialization; sm_90a), which sl_cuda_gated_attn_fwd/bwd call before the
 * tensor-core ones for the problems sl_cuda_gated_attn_sm90_supported takes: bf16, head dim 64
 * or 128, a compute capability 9.x device, as SLUICE_ATTN_SM90 allows (docs/attention.md, "The
 * Hopper kernel"). Same arguments as the tensor-core entry points. sl_cuda_gated_attn_sm90_calls
 * counts the calls of both (forward and backward) in this process, for tests that must know the
 * kernel ran. */
bool sl_cuda_gated_attn_sm90_supported(void *ctx, const sl_tensor *q);
void sl_cuda_gated_attn_sm90_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                                 const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                                 const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                                 float scale);
void sl_cuda_gated_attn_sm90_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                                 sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                                 const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                                 const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
                                 int batch, int seq, float scale);
long long sl_cuda_gated_attn_sm90_calls(void);
/* Whether the current device can run the Hopper kernel (9.x, the sm_90a code, the driver's
 * cuTensorMapEncodeTiled), whatever SLUICE_ATTN_SM90 says: for tests to skip elsewhere. */
bool sl_cuda_gated_attn_sm90_device(void);

/* attn_sink.cu */
void sl_cuda_attn_sink_share(void *ctx, sl_tensor *out, const sl_tensor *q, const sl_tensor *k,
                             const sl_tensor *lse, int batch, int seq, float scale);

#ifdef __cplusplus
}
#endif

#endif
