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

/* qk_norm_rope.cu */
void sl_cuda_qk_norm_rope_fwd(void *ctx, sl_tensor *qn, sl_tensor *kn, sl_tensor *g,
                              sl_tensor *q_rstd, sl_tensor *k_rstd, const sl_tensor *qall,
                              const sl_tensor *k, const sl_qk_norm_rope *p);
void sl_cuda_qk_norm_rope_bwd(void *ctx, sl_tensor *dqall, sl_tensor *dk_pre, sl_tensor *dqw,
                              sl_tensor *dkw, const sl_tensor *dq, const sl_tensor *dk,
                              const sl_tensor *dg, const sl_tensor *qall, const sl_tensor *k,
                              const sl_tensor *q_rstd, const sl_tensor *k_rstd,
                              const sl_qk_norm_rope *p);

/* attn_kernels.cu: the gated attention ops of the table. They choose one of the kernels below
 * per call (attention/attn_kernels.h: attention.kernel, attn_bench --kernel) and call it with the
 * same arguments, after the shared checks (dg given with a gate) and never for an empty problem. */
void sl_cuda_gated_attn_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                            const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                            const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                            float scale);
void sl_cuda_gated_attn_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv, sl_tensor *dg,
                            const sl_tensor *dy, const sl_tensor *q, const sl_tensor *k,
                            const sl_tensor *v, const sl_tensor *g, const sl_tensor *seg,
                            const sl_tensor *o, const sl_tensor *lse, int batch, int seq,
                            float scale);

/* gated_attn_fwd.cu (with sigmoid_mean), gated_attn_bwd.cu: the SIMT kernel "simt" (fp32
 * arithmetic on CUDA cores; any head dim, fp32 or bf16 storage). */
void sl_cuda_gated_attn_simt_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                                 const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                                 const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                                 float scale);
void sl_cuda_gated_attn_simt_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                                 sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                                 const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                                 const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
                                 int batch, int seq, float scale);
void sl_cuda_sigmoid_mean(void *ctx, sl_tensor *out, const sl_tensor *g);

/* gated_attn_tc_fwd.cu, gated_attn_tc_bwd.cu: the tensor-core kernel "mma" (mma.sync, sm_80+)
 * for the problems sl_cuda_gated_attn_tc_supported takes (bf16, head dim 64 or 128). */
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
/* The same rule without a tensor: whether q of dtype dt and head dim d takes the tensor-core
 * kernels (`sluice doctor` reports it per device). */
bool sl_cuda_gated_attn_tc_takes(sl_dtype dt, int64_t head_dim);

/* attn_cudnn.cu: the kernel "cudnn", cuDNN's fused SDPA (attention/cudnn_sdpa.h) with sluice's
 * gate applied around it by two small kernels; bf16, no document mask (attn_kernels.cu checks). */
void sl_cuda_gated_attn_cudnn_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                                  const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                                  const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                                  float scale);
void sl_cuda_gated_attn_cudnn_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                                  sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                                  const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                                  const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
                                  int batch, int seq, float scale);
/* The cuDNN instance sl_cuda_attn_configure loaded for ctx (NULL when the choice has none). */
struct sl_cudnn *sl_cuda_attn_cudnn(void *ctx);

/* decode.cu */
void sl_cuda_kv_cache_write(void *ctx, sl_tensor *cache, const sl_tensor *x, const sl_tensor *start,
                            int batch, int n);
void sl_cuda_gated_attn_decode(void *ctx, sl_tensor *y, const sl_tensor *q, const sl_tensor *kc,
                               const sl_tensor *vc, const sl_tensor *g, const sl_tensor *start,
                               int batch, int n, float scale);

/* gated_attn_sm90_fwd.cu, gated_attn_sm90_bwd.cu, gated_attn_sm90_dq.cu: the Hopper kernel
 * "sm90" (wgmma, TMA, warp specialization; sm_90a) for the problems of the tensor-core kernel
 * (bf16, head dim 64 or 128) on a device sl_cuda_gated_attn_sm90_runs_on says can run it
 * (compute capability 9.x, the sm_90a code in this binary, the driver's cuTensorMapEncodeTiled;
 * sl_cuda_gated_attn_sm90_device asks the same of the current device, for tests that must skip).
 * sl_cuda_gated_attn_sm90_automatic: whether the choices "auto" and "sluice" may take it
 * (attn_kernels.cu): the environment variable SLUICE_ATTN_SM90 = 1 (always; a device that cannot
 * run it stops the run), 0 (never), unset or "auto" (yes, except in the emulated build, whose
 * device reports 9.0 but where the mma.sync kernel stays the automatic choice); by name
 * ("sm90") it runs wherever it can. docs/attention.md, "The Hopper kernel". */
void sl_cuda_gated_attn_sm90_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                                 const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                                 const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                                 float scale);
void sl_cuda_gated_attn_sm90_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                                 sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                                 const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                                 const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
                                 int batch, int seq, float scale);
bool sl_cuda_gated_attn_sm90_runs_on(void *ctx);
bool sl_cuda_gated_attn_sm90_device(void);
bool sl_cuda_gated_attn_sm90_automatic(void *ctx);
/* How many chunks of its GQA group (grp query heads per K/V head) the Hopper backward's dK/dV
 * pass splits the work of a [batch, seq] problem with kv K/V heads of head dim d into on a GPU
 * of `sms` SMs (SLUICE_ATTN_SM90_HSPLIT unset); for tests and benchmarks. */
int sl_cuda_gated_attn_sm90_hsplit(int batch, int seq, int kv, int grp, int d, int sms);

/* attn_sink.cu */
void sl_cuda_attn_sink_share(void *ctx, sl_tensor *out, const sl_tensor *q, const sl_tensor *k,
                             const sl_tensor *lse, int batch, int seq, float scale);

#ifdef __cplusplus
}
#endif

#endif
