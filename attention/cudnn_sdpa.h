/*
 * attention/cudnn_sdpa.h - cuDNN's fused scaled-dot-product attention (causal, GQA, bf16 in and
 * out, fp32 softmax statistics), forward and backward, for the "cudnn" attention kernel
 * (attention/attn_cudnn.cu, docs/attention.md "Kernel choice"). cuDNN is not a build or run
 * dependency: libcudnn.so.9 is opened with dlopen when a backend asks for this kernel, and its
 * backend graph API is called through function pointers (attention/cudnn_api.h).
 *
 * The graph is the one NVIDIA's cudnn-frontend builds for its SDPA node (the "composite" SDPA
 * of cudnn-frontend 1.x: matmul, scale, causal mask from generated row/column indices, softmax
 * with the log-sum-exp written out, matmul), which cuDNN 9 runs as one fused flash-attention
 * engine; see cudnn_sdpa.c for the exact operations. Plain C: no CUDA header is needed, device
 * memory and the stream are opaque pointers here.
 */
#ifndef SL_ATTENTION_CUDNN_SDPA_H
#define SL_ATTENTION_CUDNN_SDPA_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded cuDNN with one handle (on the device current at sl_cudnn_open) and its cached
 * execution plans. */
typedef struct sl_cudnn sl_cudnn;

/* Opens $SLUICE_CUDNN_LIBRARY, or libcudnn.so.9 from the loader's search path (a PyTorch
 * installation's nvidia/cudnn/lib works through LD_LIBRARY_PATH; launch/bundle.sh's env.sh adds
 * it), checks its version (9.6.0 or later, not 9.10.0/9.10.1) and creates a handle. NULL with
 * the reason in err when any of it fails; the emulated build (no GPU, so no cuDNN) fails unless
 * SLUICE_CUDNN_LIBRARY names a library. */
sl_cudnn *sl_cudnn_open(char *err, size_t errlen);
void sl_cudnn_close(sl_cudnn *c);
/* cudnnGetVersion(): 91900 for 9.19.0. */
long sl_cudnn_version(const sl_cudnn *c);
/* The library as opened (a path or a file name). */
const char *sl_cudnn_library(const sl_cudnn *c);

typedef struct {
    int batch, seq;         /* B sequences of S tokens */
    int heads, kv_heads;    /* H query heads, KV key/value heads (H % KV == 0) */
    int head_dim;           /* D */
    int compute_capability; /* of the device: 90 for sm_90 */
} sl_cudnn_shape;

/* NULL when cuDNN's SDPA (this version, this device) takes the shape, else the reason (a
 * sentence, written into buf). */
const char *sl_cudnn_sdpa_unsupported(const sl_cudnn *c, const sl_cudnn_shape *s, char *buf,
                                      size_t len);

typedef enum { SL_CUDNN_SDPA_FWD = 0, SL_CUDNN_SDPA_BWD = 1 } sl_cudnn_dir;

/* Device memory one call needs beside its tensors: cuDNN's workspace and, for the backward, the
 * fp32 row sums of dO * O and the fp32 dQ accumulator of cuDNN's graph. Builds the execution plan
 * on first use of a (direction, shape) and keeps it (8 most recent). 0, or -1 with err. */
int sl_cudnn_sdpa_workspace(sl_cudnn *c, sl_cudnn_dir dir, const sl_cudnn_shape *s, size_t *bytes,
                            char *err, size_t errlen);

/* One forward or backward. Layouts are sluice's (core/ops.h), bf16: q, o, dout, dq [B, S, H, D];
 * k, v, dk, dv [B, S, KV, D]. stats is fp32 [B, H, S] (cuDNN's order; the caller transposes
 * sluice's lse [B, S, H]): the natural-log sum of exp of the scaled, masked logits of each row,
 * written by the forward, read by the backward. workspace: sl_cudnn_sdpa_workspace bytes,
 * 256-byte aligned. Attention is causal (query i sees keys 0..i of its sequence); query head h
 * reads kv head h / (H / KV). */
typedef struct {
    sl_cudnn_dir dir;
    sl_cudnn_shape shape;
    float scale;  /* multiplies q . k */
    void *stream; /* a cudaStream_t: the call is queued on it, nothing synchronizes */
    const void *q, *k, *v;
    void *o;      /* forward: written; backward: read */
    float *stats; /* forward: written; backward: read */
    const void *dout;
    void *dq, *dk, *dv; /* backward only */
    void *workspace;
} sl_cudnn_sdpa_call;

/* The entry point: runs cuDNN's SDPA forward or backward. 0, or -1 with err (cuDNN's status and
 * its last error message). */
int sl_cudnn_sdpa_run(sl_cudnn *c, const sl_cudnn_sdpa_call *call, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
