/*
 * attention/attn_cudnn.cu - the "cudnn" attention kernel: cuDNN's fused SDPA (causal, GQA;
 * attention/cudnn_sdpa.c) with sluice's output gate applied around it by two small kernels, so
 * that it computes exactly the operation of core/ops.h (docs/attention.md, "The cudnn kernel").
 *
 * cuDNN's attention ends at O = softmax(scale Q K^T) V: no epilogue can apply the gate after the
 * second matmul inside its fused engine (gpu-facts.md). So:
 *   forward   cuDNN writes O (bf16, into `o`, sluice's layout) and its softmax statistics
 *             (fp32 [B, H, S] in scratch); then one warp per (token, head) row writes
 *             y = O * sigmoid(g) (elementwise or headwise; y = O without a gate) and lse[t, h]
 *             (sluice's [T, H] order) from the statistics;
 *   backward  one warp per row first computes s = sigmoid(g), dO = dy * s (bf16, the operand
 *             cuDNN reads), dg = dy * O * s (1 - s) (headwise: summed over D), and puts lse back
 *             into cuDNN's [B, H, S] order; then cuDNN's SDPA backward takes dO, O and the
 *             statistics and writes dq, dk, dv.
 * Both gate kernels read and write bf16 pairs (D is even), fp32 arithmetic, like the prep pass
 * of the tensor-core backward (gated_attn_tc_bwd.cu), whose numbers they reproduce: O is the bf16
 * o that the op stores anyway, so y = bf16(bf16(O) s) where the fused kernels round O s once.
 */
#include "attention/cudnn_sdpa.h"
#include "attention/gated_attn.cuh" /* sigmoid */
#include "attention/kernels_cuda.h"
#include "core/log.h"

namespace {

constexpr int kWarps = 8; /* rows per block of the gate kernels */

struct gate_args {
    const sl_bf16 *g, *o, *dy; /* g: [T, H, D] (gate 2), [T, H] (gate 1) or null */
    sl_bf16 *y, *dob, *dg;
    const float *stats_in, *lse_in; /* the statistics read: [B, H, S] or [T, H] */
    float *stats_out, *lse_out;     /* ... and written in the other order */
    int seq, h, d, gate;
    int64_t rows; /* T * H */
};

/* Row r = (b S + s) H + h of sluice's [T, H] order is row (b H + h) S + s of cuDNN's. */
__device__ __forceinline__ int64_t cudnn_row(int64_t r, int seq, int h) {
    const int64_t t = r / h, b = t / seq;
    return (b * h + r % h) * seq + t % seq;
}

/* Forward epilogue: y = O * sigmoid(g) and lse from cuDNN's statistics. */
__global__ void __launch_bounds__(32 * kWarps) cudnn_fwd_gate_kernel(gate_args a) {
    const int lane = threadIdx.x & 31;
    for (int64_t r = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); r < a.rows;
         r += (int64_t)gridDim.x * kWarps) {
        const float sh = a.gate == 1 ? sl_attn::sigmoid(__bfloat162float(a.g[r])) : 1.0f;
        for (int c = 2 * lane; c < a.d; c += 64) {
            const int64_t e = r * a.d + c;
            const float2 o = __bfloat1622float2(*(const __nv_bfloat162 *)(a.o + e));
            float s0 = sh, s1 = sh;
            if (a.gate == 2) {
                const float2 g = __bfloat1622float2(*(const __nv_bfloat162 *)(a.g + e));
                s0 = sl_attn::sigmoid(g.x), s1 = sl_attn::sigmoid(g.y);
            }
            *(__nv_bfloat162 *)(a.y + e) = __floats2bfloat162_rn(o.x * s0, o.y * s1);
        }
        if (lane == 0) a.lse_out[r] = a.stats_in[cudnn_row(r, a.seq, a.h)];
    }
}

/* Backward prologue: dO = dy * s (when gated), dg, and the statistics in cuDNN's order. */
__global__ void __launch_bounds__(32 * kWarps) cudnn_bwd_gate_kernel(gate_args a) {
    const int lane = threadIdx.x & 31;
    for (int64_t r = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); r < a.rows;
         r += (int64_t)gridDim.x * kWarps) {
        if (lane == 0) a.stats_out[cudnn_row(r, a.seq, a.h)] = a.lse_in[r];
        if (a.gate == 0) continue; /* cuDNN reads dy itself */
        const float sh = a.gate == 1 ? sl_attn::sigmoid(__bfloat162float(a.g[r])) : 1.0f;
        float dyo = 0.0f;
        for (int c = 2 * lane; c < a.d; c += 64) {
            const int64_t e = r * a.d + c;
            const float2 dy = __bfloat1622float2(*(const __nv_bfloat162 *)(a.dy + e));
            const float2 o = __bfloat1622float2(*(const __nv_bfloat162 *)(a.o + e));
            float s0 = sh, s1 = sh;
            if (a.gate == 2) {
                const float2 g = __bfloat1622float2(*(const __nv_bfloat162 *)(a.g + e));
                s0 = sl_attn::sigmoid(g.x), s1 = sl_attn::sigmoid(g.y);
                *(__nv_bfloat162 *)(a.dg + e) = __floats2bfloat162_rn(
                    dy.x * o.x * s0 * (1.0f - s0), dy.y * o.y * s1 * (1.0f - s1));
            } else {
                dyo += dy.x * o.x + dy.y * o.y;
            }
            *(__nv_bfloat162 *)(a.dob + e) = __floats2bfloat162_rn(dy.x * s0, dy.y * s1);
        }
        if (a.gate == 1) {
            dyo = sl_warp_sum(dyo);
            if (lane == 0) a.dg[r] = __float2bfloat16_rn(dyo * sh * (1.0f - sh));
        }
    }
}

void launch_gate(void (*kern)(gate_args), const gate_args &a, cudaStream_t stream, const char *op) {
    const int64_t blocks = (a.rows + kWarps - 1) / kWarps;
    SL_LAUNCH(kern, dim3((unsigned)(blocks < 65535 ? blocks : 65535)), dim3(32 * kWarps), 0, stream,
              a);
    SL_CUDA_LAUNCHED(op);
}

sl_cudnn_shape shape_of(void *ctx, const sl_tensor *q, const sl_tensor *k, int batch, int seq) {
    const cudaDeviceProp *props = sl_cuda_props(ctx);
    return sl_cudnn_shape{batch,
                          seq,
                          (int)q->shape[1],
                          (int)k->shape[1],
                          (int)q->shape[2],
                          10 * props->major + props->minor};
}

/* Runs cuDNN's SDPA (workspace in scratch slot 2); stops the run naming op on failure. */
void run_cudnn(void *ctx, sl_cudnn_sdpa_call *call, const char *op) {
    sl_cudnn *c = sl_cuda_attn_cudnn(ctx);
    SL_CHECK(c != NULL, "%s: the cudnn attention kernel runs without cuDNN loaded", op);
    char err[1024];
    size_t ws = 0;
    if (sl_cudnn_sdpa_workspace(c, call->dir, &call->shape, &ws, err, sizeof err) != 0)
        sl_fatal("%s: %s", op, err);
    call->workspace = sl_cuda_scratch(ctx, 2, ws > 0 ? ws : 1);
    call->stream = (void *)sl_cuda_stream(ctx);
    if (sl_cudnn_sdpa_run(c, call, err, sizeof err) != 0) sl_fatal("%s: %s", op, err);
}

} // namespace

void sl_cuda_gated_attn_cudnn_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                                  const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                                  const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                                  float scale) {
    (void)seg; /* refused before (attn_kernels.cu): cuDNN's SDPA has no document mask */
    const int64_t rows = (int64_t)batch * seq * q->shape[1];
    float *stats = (float *)sl_cuda_scratch(ctx, 0, sizeof(float) * (size_t)rows);
    sl_cudnn_sdpa_call call = {};
    call.dir = SL_CUDNN_SDPA_FWD;
    call.shape = shape_of(ctx, q, k, batch, seq);
    call.scale = scale;
    call.q = q->data, call.k = k->data, call.v = v->data;
    call.o = o->data, call.stats = stats;
    run_cudnn(ctx, &call, "gated_attn_fwd");

    gate_args a = {};
    a.g = g ? sl_ptr<sl_bf16>(g) : nullptr, a.o = sl_ptr<sl_bf16>(o), a.y = sl_ptr<sl_bf16>(y);
    a.stats_in = stats, a.lse_out = sl_ptr<float>(lse);
    a.seq = seq, a.h = (int)q->shape[1], a.d = (int)q->shape[2];
    a.gate = !g ? 0 : g->numel == q->numel ? 2 : 1, a.rows = rows;
    launch_gate(cudnn_fwd_gate_kernel, a, sl_cuda_stream(ctx), "gated_attn_fwd");
}

void sl_cuda_gated_attn_cudnn_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                                  sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                                  const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                                  const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
                                  int batch, int seq, float scale) {
    (void)seg;
    const int64_t rows = (int64_t)batch * seq * q->shape[1];
    gate_args a = {};
    a.g = g ? sl_ptr<sl_bf16>(g) : nullptr, a.o = sl_ptr<sl_bf16>(o), a.dy = sl_ptr<sl_bf16>(dy);
    a.dg = g ? sl_ptr<sl_bf16>(dg) : nullptr;
    a.dob = g ? (sl_bf16 *)sl_cuda_scratch(ctx, 1, sizeof(sl_bf16) * (size_t)(rows * q->shape[2]))
              : nullptr;
    a.stats_out = (float *)sl_cuda_scratch(ctx, 0, sizeof(float) * (size_t)rows);
    a.lse_in = sl_ptr<float>(lse);
    a.seq = seq, a.h = (int)q->shape[1], a.d = (int)q->shape[2];
    a.gate = !g ? 0 : g->numel == q->numel ? 2 : 1, a.rows = rows;
    launch_gate(cudnn_bwd_gate_kernel, a, sl_cuda_stream(ctx), "gated_attn_bwd");

    sl_cudnn_sdpa_call call = {};
    call.dir = SL_CUDNN_SDPA_BWD;
    call.shape = shape_of(ctx, q, k, batch, seq);
    call.scale = scale;
    call.q = q->data, call.k = k->data, call.v = v->data;
    call.o = o->data, call.stats = a.stats_out;
    call.dout = g ? (const void *)a.dob : dy->data;
    call.dq = dq->data, call.dk = dk->data, call.dv = dv->data;
    run_cudnn(ctx, &call, "gated_attn_bwd");
}
