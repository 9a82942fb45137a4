/* attention/kernels_cpu.h - the CPU kernels of attention/ (listed in the CPU operation table,
 * backends/cpu.c). Semantics: core/ops.h. */
#ifndef SL_ATTENTION_KERNELS_CPU_H
#define SL_ATTENTION_KERNELS_CPU_H

#include <stdint.h>

#include "core/backend_impl.h"
#include "core/vmath.h"

void sl_cpu_qgate_split(void *ctx, sl_tensor *q, sl_tensor *g, const sl_tensor *qall,
                        sl_gate_mode mode);
void sl_cpu_qgate_merge(void *ctx, sl_tensor *dqall, const sl_tensor *dq, const sl_tensor *dg,
                        sl_gate_mode mode);

void sl_cpu_rope_fwd(void *ctx, sl_tensor *x, const sl_tensor *pos, const sl_tensor *inv_freq,
                     float mscale);
void sl_cpu_rope_bwd(void *ctx, sl_tensor *dx, const sl_tensor *pos, const sl_tensor *inv_freq,
                     float mscale);

void sl_cpu_qk_norm_rope_fwd(void *ctx, sl_tensor *qn, sl_tensor *kn, sl_tensor *g,
                             sl_tensor *q_rstd, sl_tensor *k_rstd, const sl_tensor *qall,
                             const sl_tensor *k, const sl_qk_norm_rope *p);
void sl_cpu_qk_norm_rope_bwd(void *ctx, sl_tensor *dqall, sl_tensor *dk_pre, sl_tensor *dqw,
                             sl_tensor *dkw, const sl_tensor *dq, const sl_tensor *dk,
                             const sl_tensor *dg, const sl_tensor *qall, const sl_tensor *k,
                             const sl_tensor *q_rstd, const sl_tensor *k_rstd,
                             const sl_qk_norm_rope *p);

void sl_cpu_gated_attn_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                           const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                           const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                           float scale);
void sl_cpu_gated_attn_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv, sl_tensor *dg,
                           const sl_tensor *dy, const sl_tensor *q, const sl_tensor *k,
                           const sl_tensor *v, const sl_tensor *g, const sl_tensor *seg,
                           const sl_tensor *o, const sl_tensor *lse, int batch, int seq,
                           float scale);
void sl_cpu_sigmoid_mean(void *ctx, sl_tensor *out, const sl_tensor *g);
/* decode_cpu.c */
void sl_cpu_kv_cache_write(void *ctx, sl_tensor *cache, const sl_tensor *x, const sl_tensor *start,
                           int batch, int n);
void sl_cpu_gated_attn_decode(void *ctx, sl_tensor *y, const sl_tensor *q, const sl_tensor *kc,
                              const sl_tensor *vc, const sl_tensor *g, const sl_tensor *start,
                              int batch, int n, float scale);
/* attn_sink_cpu.c */
void sl_cpu_attn_sink_share(void *ctx, sl_tensor *out, const sl_tensor *q, const sl_tensor *k,
                            const sl_tensor *lse, int batch, int seq, float scale);

#endif
