/*
 * core/backend_impl.h - the backend interface, for backend implementations.
 *
 * A backend is a type-erased context plus two small tables of function pointers:
 * sl_backend_i (memory) and sl_ops_i (operations). A new backend fills both; nothing in the
 * model changes. An operation a backend has not implemented stays NULL, and calling it
 * stops the run with a message naming the operation and the backend.
 *
 * Every operation receives the backend context first (the CUDA context carries the stream
 * and the cuBLAS handle), then the same arguments as the public sl_op_x() in core/ops.h,
 * whose comments define the semantics. Shapes are checked by core/ops.c before dispatch.
 */
#ifndef SL_BACKEND_IMPL_H
#define SL_BACKEND_IMPL_H

#include "core/backend.h"
#include "core/ops.h"
#include "core/tensor_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_ops_i {
    void (*fill)(void *ctx, sl_tensor *x, float value);
    void (*add)(void *ctx, sl_tensor *y, const sl_tensor *a, const sl_tensor *b);
    void (*axpy)(void *ctx, sl_tensor *y, const sl_tensor *x, float alpha);
    void (*scale)(void *ctx, sl_tensor *x, float s);
    void (*convert)(void *ctx, sl_tensor *dst, const sl_tensor *src);
    void (*sum)(void *ctx, sl_tensor *out, const sl_tensor *x);
    void (*sumsq)(void *ctx, sl_tensor *out, const sl_tensor *x);
    void (*absmax)(void *ctx, sl_tensor *out, const sl_tensor *x);

    void (*matmul)(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b, bool trans_a,
                   bool trans_b, float alpha, float beta);
    /* The grouped GEMMs' counts: host counts, or device counts (host NULL) only where
     * grouped_counts_on_device said yes for these operands (core/ops.c reads them otherwise). */
    bool (*grouped_counts_on_device)(void *ctx, sl_dtype dt, int64_t r, int64_t s, int groups);
    void (*grouped_matmul)(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                           const sl_group_counts *counts, int groups, bool trans_b, float beta);
    void (*grouped_matmul_dw)(void *ctx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                              const sl_group_counts *counts, int groups, float beta,
                              sl_tensor *sumsq);
    /* the segments' counts resolved as grouped_matmul_dw's */
    void (*grouped_matmul_dw_segments)(void *ctx, sl_tensor *dw, const sl_dw_segment *segs,
                                       int nseg, int groups, float beta, sl_tensor *sumsq);
    /* gu = the grouped GEMM with trans_b and beta 0, h = swiglu_fwd of gu's routed rows (one
     * kernel where the backend fuses them) */
    void (*grouped_matmul_swiglu)(void *ctx, sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                  const sl_tensor *b, const sl_group_counts *counts, int groups);

    void (*rmsnorm_fwd)(void *ctx, sl_tensor *y, sl_tensor *rstd, const sl_tensor *x,
                        const sl_tensor *w, float eps);
    void (*rmsnorm_bwd)(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                        const sl_tensor *dy_add, const sl_tensor *x, const sl_tensor *w,
                        const sl_tensor *rstd, const sl_tensor *dres);

    void (*embedding_fwd)(void *ctx, sl_tensor *out, const sl_tensor *ids, const sl_tensor *table);
    void (*embedding_bwd)(void *ctx, sl_tensor *dtable, const sl_tensor *dout,
                          const sl_tensor *ids);
    void (*cross_entropy)(void *ctx, sl_tensor *losses, sl_tensor *dlogits, const sl_tensor *logits,
                          const sl_tensor *targets, float grad_scale);

    void (*qgate_split)(void *ctx, sl_tensor *q, sl_tensor *g, const sl_tensor *qall,
                        sl_gate_mode mode);
    void (*qgate_merge)(void *ctx, sl_tensor *dqall, const sl_tensor *dq, const sl_tensor *dg,
                        sl_gate_mode mode);
    void (*rope_fwd)(void *ctx, sl_tensor *x, const sl_tensor *pos, const sl_tensor *inv_freq,
                     float mscale);
    void (*rope_bwd)(void *ctx, sl_tensor *dx, const sl_tensor *pos, const sl_tensor *inv_freq,
                     float mscale);
    void (*qk_norm_rope_fwd)(void *ctx, sl_tensor *qn, sl_tensor *kn, sl_tensor *g,
                             sl_tensor *q_rstd, sl_tensor *k_rstd, const sl_tensor *qall,
                             const sl_tensor *k, const sl_qk_norm_rope *p);
    void (*qk_norm_rope_bwd)(void *ctx, sl_tensor *dqall, sl_tensor *dk_pre, sl_tensor *dqw,
                             sl_tensor *dkw, const sl_tensor *dq, const sl_tensor *dk,
                             const sl_tensor *dg, const sl_tensor *qall, const sl_tensor *k,
                             const sl_tensor *q_rstd, const sl_tensor *k_rstd,
                             const sl_qk_norm_rope *p);
    void (*gated_attn_fwd)(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                           const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                           const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                           float scale);
    void (*gated_attn_bwd)(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv, sl_tensor *dg,
                           const sl_tensor *dy, const sl_tensor *q, const sl_tensor *k,
                           const sl_tensor *v, const sl_tensor *g, const sl_tensor *seg,
                           const sl_tensor *o, const sl_tensor *lse, int batch, int seq,
                           float scale);
    void (*sigmoid_mean)(void *ctx, sl_tensor *out, const sl_tensor *g);
    void (*kv_cache_write)(void *ctx, sl_tensor *cache, const sl_tensor *x, const sl_tensor *start,
                           int batch, int n);
    void (*gated_attn_decode)(void *ctx, sl_tensor *y, const sl_tensor *q, const sl_tensor *kc,
                              const sl_tensor *vc, const sl_tensor *g, const sl_tensor *start,
                              int batch, int n, float scale);
    void (*attn_sink_share)(void *ctx, sl_tensor *out, const sl_tensor *q, const sl_tensor *k,
                            const sl_tensor *lse, int batch, int seq, float scale);

    void (*router_fwd)(void *ctx, sl_tensor *probs, sl_tensor *topk_idx, sl_tensor *topk_w,
                       sl_tensor *stats, const sl_tensor *logits, const sl_tensor *bias,
                       bool norm_topk);
    void (*router_bwd)(void *ctx, sl_tensor *dlogits, const sl_tensor *dtopk_w,
                       const sl_tensor *probs, const sl_tensor *topk_idx, const sl_tensor *topk_w,
                       const sl_tensor *logits, const sl_tensor *lbl_grad, float z_scale,
                       bool norm_topk);
    void (*moe_sort)(void *ctx, sl_tensor *counts, sl_tensor *sorted_token, sl_tensor *slot_pos,
                     const sl_tensor *topk_idx);
    void (*moe_counts)(void *ctx, sl_tensor *acc, sl_tensor *freq, const sl_tensor *counts,
                       float scale);
    void (*gather_rows)(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx);
    void (*scatter_add_rows)(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx);
    void (*gather_add_rows)(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *pos,
                            int k, float beta);
    void (*moe_combine)(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *slot_pos,
                        const sl_tensor *w, const sl_tensor *res);
    void (*moe_combine_bwd)(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                            const sl_tensor *x, const sl_tensor *slot_pos, const sl_tensor *w);
    void (*swiglu_fwd)(void *ctx, sl_tensor *h, const sl_tensor *gu);
    void (*swiglu_bwd)(void *ctx, sl_tensor *dgu, const sl_tensor *dh, const sl_tensor *gu);
    void (*rowgate_fwd)(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *s);
    void (*rowgate_bwd)(void *ctx, sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy,
                        const sl_tensor *x, const sl_tensor *s);

    void (*adamw)(void *ctx, sl_tensor *p, const sl_tensor *g, sl_tensor *m, sl_tensor *v,
                  sl_tensor *p_copy, const sl_adamw_params *hp);
} sl_ops_i;

typedef struct sl_backend_i {
    const char *name;
    bool host_memory;                        /* tensor data is host-addressable */
    bool bf16;                               /* its kernels accept bf16 tensors */
    void *(*alloc)(void *ctx, size_t bytes); /* zero-filled */
    void (*free)(void *ctx, void *ptr);
    void (*memset0)(void *ctx, void *ptr, size_t bytes);
    void (*to_host)(void *ctx, void *host, const void *src, size_t bytes);
    /* Optional: queue a copy to the host, complete after synchronize (NULL: to_host). */
    void (*to_host_async)(void *ctx, void *host, const void *src, size_t bytes);
    void (*from_host)(void *ctx, void *dst, const void *host, size_t bytes);
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    void (*synchronize)(void *ctx);
    int (*threads)(void *ctx);
    /* Optional: what the next alloc is for ("bf16 [4096, 2048]"), for an out-of-memory
     * message that names the tensor; NULL clears it. */
    void (*set_alloc_context)(void *ctx, const char *what);
    /* Optional (device backends): the device it computes on (sl_backend_device). */
    void (*device)(void *ctx, sl_device_info *out);
    /* Optional (core/profile.c): marks taken in the order the backend executes its work, for a
     * backend that runs asynchronously to the host (NULL: the host's clock is the backend's,
     * as on the CPU). mark_ms is the time from mark a to mark b, after a synchronize. */
    void *(*mark_new)(void *ctx);
    void (*mark_record)(void *ctx, void *mark);
    double (*mark_ms)(void *ctx, void *a, void *b);
    void (*mark_free)(void *ctx, void *mark);
    /* Optional: named ranges for an external profiler (NVTX on CUDA); used when `ranges`. */
    void (*range_push)(void *ctx, const char *name);
    void (*range_pop)(void *ctx);
    void (*free_ctx)(void *ctx);
} sl_backend_i;

typedef struct sl_profile sl_profile; /* core/profile.c */

struct sl_backend {
    sl_backend_i iface;
    const sl_ops_i *ops;
    void *ctx;
    int64_t host_reads; /* device-to-host copies so far (sl_backend_host_reads) */
    int64_t syncs;      /* explicit sl_backend_synchronize calls (sl_backend_syncs) */
    /* bytes held by tensors that own their memory, now and at most so far (sl_backend_tensor_
     * bytes); updated atomically, so that a thread of the caller's may create tensors too */
    int64_t tensor_bytes, tensor_bytes_peak;
    sl_profile *prof; /* profiling state while profiling is on (core/profile.h) */
    bool ranges;      /* forward profiling regions to iface.range_push/pop */
};

/* Constructors of the built-in backends' memory halves (NULL + err on failure). The
 * operation table `ops` is assembled above the concerns (backends/cpu.c, backends/cuda.cu)
 * and must outlive the backend. */
sl_backend *sl_backend_cpu_create(const sl_backend_params *params, const sl_ops_i *ops, char *err,
                                  size_t errlen);
#ifdef SLUICE_WITH_CUDA
sl_backend *sl_backend_cuda_create(const sl_backend_params *params, const sl_ops_i *ops, char *err,
                                   size_t errlen);
/* The CUDA backend's compute stream (a cudaStream_t) and device ordinal, for the NCCL
 * transport (core/comm_nccl.c), which orders its communication stream with it. NULL / -1 when
 * `be` is not a CUDA backend. */
void *sl_backend_cuda_stream(const sl_backend *be);
int sl_backend_cuda_device(const sl_backend *be);
/* The compute capability of the kernel image the runtime picks for the current device from
 * this build's code (90 for sm_90a code on an sm_90 device), through cudaFuncGetAttributes on a
 * kernel of the backend. Returns 0, or -1 with the runtime's reason when the build has no image
 * the device can run (cudaErrorNoKernelImageForDevice). */
int sl_cuda_kernel_image(int *version, char *err, size_t errlen);
#endif

#ifdef __cplusplus
}
#endif

#endif
