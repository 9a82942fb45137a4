/*
 * backends/cuda.cu - the CUDA backend's operation table: one line per entry of sl_ops_i, in the
 * order of backends/cpu.c, each naming the launcher beside its CPU twin (docs/cuda.md). An
 * entry that is commented out has no kernel yet: its slot stays NULL, calling it stops the run
 * naming the op and the backend (core/ops.c), and the conformance test
 * (tests/test_backend_ops.c) reports it as not implemented.
 */
#include "attention/kernels_cuda.h"
#include "core/kernels_cuda.h"
#include "moe/kernels_cuda.h"
#include "trainer/kernels_cuda.h"
#include "backends/backends.h"

/* Entries without a kernel are left out on purpose (NULL), which C++'s -Wextra reports as
 * missing initializers. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const sl_ops_i k_cuda_ops = {
    .fill = sl_cuda_fill,       /* core/elementwise.cu */
    .add = sl_cuda_add,         /* core/elementwise.cu */
    .axpy = sl_cuda_axpy,       /* core/elementwise.cu */
    .scale = sl_cuda_scale,     /* core/elementwise.cu */
    .convert = sl_cuda_convert, /* core/elementwise.cu */
    .sum = sl_cuda_sum,         /* core/elementwise.cu */
    .sumsq = sl_cuda_sumsq,     /* core/elementwise.cu */
    .absmax = sl_cuda_absmax,   /* core/elementwise.cu */
    .matmul = sl_cuda_matmul,   /* core/matmul.cu */
    .grouped_counts_on_device = sl_cuda_grouped_counts_on_device,
    .grouped_matmul = sl_cuda_grouped_matmul,       /* moe/grouped_matmul.cu */
    .grouped_matmul_dw = sl_cuda_grouped_matmul_dw, /* moe/grouped_matmul.cu */
    .grouped_matmul_dw_segments = sl_cuda_grouped_matmul_dw_segments,
    .grouped_matmul_swiglu = sl_cuda_grouped_matmul_swiglu, /* moe/grouped_matmul.cu */
    .rmsnorm_fwd = sl_cuda_rmsnorm_fwd,                     /* core/rmsnorm.cu */
    .rmsnorm_bwd = sl_cuda_rmsnorm_bwd,                     /* core/rmsnorm.cu */
    .embedding_fwd = sl_cuda_embedding_fwd,                 /* core/embedding.cu */
    .embedding_bwd = sl_cuda_embedding_bwd,                 /* core/embedding.cu */
    .cross_entropy = sl_cuda_cross_entropy,                 /* core/cross_entropy.cu */
    .qgate_split = sl_cuda_qgate_split,                     /* attention/qgate.cu */
    .qgate_merge = sl_cuda_qgate_merge,                     /* attention/qgate.cu */
    .rope_fwd = sl_cuda_rope_fwd,                           /* attention/rope.cu */
    .rope_bwd = sl_cuda_rope_bwd,                           /* attention/rope.cu */
    .qk_norm_rope_fwd = sl_cuda_qk_norm_rope_fwd,           /* attention/qk_norm_rope.cu */
    .qk_norm_rope_bwd = sl_cuda_qk_norm_rope_bwd,           /* attention/qk_norm_rope.cu */
    .gated_attn_fwd = sl_cuda_gated_attn_fwd,               /* attention/attn_kernels.cu */
    .gated_attn_bwd = sl_cuda_gated_attn_bwd,               /* attention/attn_kernels.cu */
    .sigmoid_mean = sl_cuda_sigmoid_mean,                   /* attention/gated_attn_fwd.cu */
    .kv_cache_write = sl_cuda_kv_cache_write,               /* attention/decode.cu */
    .gated_attn_decode = sl_cuda_gated_attn_decode,         /* attention/decode.cu */
    .attn_sink_share = sl_cuda_attn_sink_share,             /* attention/attn_sink.cu */
    .router_fwd = sl_cuda_router_fwd,                       /* moe/router.cu */
    .router_bwd = sl_cuda_router_bwd,                       /* moe/router.cu */
    .moe_sort = sl_cuda_moe_sort,                           /* moe/permute.cu */
    .moe_counts = sl_cuda_moe_counts,                       /* moe/permute.cu */
    .gather_rows = sl_cuda_gather_rows,                     /* moe/permute.cu */
    .scatter_add_rows = sl_cuda_scatter_add_rows,           /* moe/permute.cu */
    .gather_add_rows = sl_cuda_gather_add_rows,             /* moe/permute.cu */
    .moe_combine = sl_cuda_moe_combine,                     /* moe/permute.cu */
    .moe_combine_bwd = sl_cuda_moe_combine_bwd,             /* moe/permute.cu */
    .swiglu_fwd = sl_cuda_swiglu_fwd,                       /* moe/swiglu.cu */
    .swiglu_bwd = sl_cuda_swiglu_bwd,                       /* moe/swiglu.cu */
    .rowgate_fwd = sl_cuda_rowgate_fwd,                     /* moe/swiglu.cu */
    .rowgate_bwd = sl_cuda_rowgate_bwd,                     /* moe/swiglu.cu */
    .adamw = sl_cuda_adamw,                                 /* trainer/adamw.cu */
};
#pragma GCC diagnostic pop

extern "C" const sl_ops_i *sl_backends_cuda_ops(void) {
    return &k_cuda_ops;
}
