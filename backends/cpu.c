/*
 * backends/cpu.c - the CPU backend's operation table: one line per entry of sl_ops_i, each
 * naming the kernel beside its concern (core/, attention/, moe/, trainer/). Adding an op to
 * the CPU backend is one line here; the CUDA table (backends/cuda.cu) mirrors this file.
 */
#include "attention/kernels_cpu.h"
#include "backends/backends.h"
#include "core/backend_impl.h"
#include "core/kernels_cpu.h"
#include "moe/kernels_cpu.h"
#include "trainer/kernels_cpu.h"

static const sl_ops_i k_cpu_ops = {
    /* core/elementwise_cpu.c */
    .fill = sl_cpu_fill,
    .add = sl_cpu_add,
    .axpy = sl_cpu_axpy,
    .scale = sl_cpu_scale,
    .convert = sl_cpu_convert,
    .sum = sl_cpu_sum,
    .sumsq = sl_cpu_sumsq,
    .absmax = sl_cpu_absmax,
    /* core/matmul_cpu.c, moe/grouped_matmul_cpu.c */
    .matmul = sl_cpu_matmul,
    .grouped_counts_on_device = sl_cpu_grouped_counts_on_device,
    .grouped_matmul = sl_cpu_grouped_matmul,
    .grouped_matmul_dw = sl_cpu_grouped_matmul_dw,
    .grouped_matmul_dw_segments = sl_cpu_grouped_matmul_dw_segments,
    .grouped_matmul_swiglu = sl_cpu_grouped_matmul_swiglu,
    /* core/rmsnorm_cpu.c, core/embedding_cpu.c, core/cross_entropy_cpu.c */
    .rmsnorm_fwd = sl_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = sl_cpu_rmsnorm_bwd,
    .embedding_fwd = sl_cpu_embedding_fwd,
    .embedding_bwd = sl_cpu_embedding_bwd,
    .cross_entropy = sl_cpu_cross_entropy,
    /* attention/qgate_cpu.c, attention/rope_cpu.c, attention/gated_attn_cpu.c */
    .qgate_split = sl_cpu_qgate_split,
    .qgate_merge = sl_cpu_qgate_merge,
    .rope_fwd = sl_cpu_rope_fwd,
    .rope_bwd = sl_cpu_rope_bwd,
    .qk_norm_rope_fwd = sl_cpu_qk_norm_rope_fwd, /* attention/qk_norm_rope_cpu.c */
    .qk_norm_rope_bwd = sl_cpu_qk_norm_rope_bwd,
    .gated_attn_fwd = sl_cpu_gated_attn_fwd,
    .gated_attn_bwd = sl_cpu_gated_attn_bwd,
    .sigmoid_mean = sl_cpu_sigmoid_mean,
    /* attention/decode_cpu.c */
    .kv_cache_write = sl_cpu_kv_cache_write,
    .gated_attn_decode = sl_cpu_gated_attn_decode,
    /* attention/attn_sink_cpu.c */
    .attn_sink_share = sl_cpu_attn_sink_share,
    /* moe/router_cpu.c, moe/permute_cpu.c, moe/swiglu_cpu.c */
    .router_fwd = sl_cpu_router_fwd,
    .router_bwd = sl_cpu_router_bwd,
    .moe_sort = sl_cpu_moe_sort,
    .moe_counts = sl_cpu_moe_counts,
    .gather_rows = sl_cpu_gather_rows,
    .scatter_add_rows = sl_cpu_scatter_add_rows,
    .gather_add_rows = sl_cpu_gather_add_rows,
    .moe_combine = sl_cpu_moe_combine,
    .moe_combine_bwd = sl_cpu_moe_combine_bwd,
    .swiglu_fwd = sl_cpu_swiglu_fwd,
    .swiglu_bwd = sl_cpu_swiglu_bwd,
    .rowgate_fwd = sl_cpu_rowgate_fwd,
    .rowgate_bwd = sl_cpu_rowgate_bwd,
    /* trainer/adamw_cpu.c */
    .adamw = sl_cpu_adamw,
};

const sl_ops_i *sl_backends_cpu_ops(void) {
    return &k_cpu_ops;
}
