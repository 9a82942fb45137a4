/* attention/ops_cpu_attention.c - registers attention/'s CPU kernels. */
#include "attention/kernels_cpu.h"
#include "core/cpu_kernels.h"

void sl_cpu_register_attention(sl_ops_i *ops) {
    ops->qgate_split = sl_cpu_qgate_split;
    ops->qgate_merge = sl_cpu_qgate_merge;
    ops->rope_fwd = sl_cpu_rope_fwd;
    ops->rope_bwd = sl_cpu_rope_bwd;
    ops->gated_attn_fwd = sl_cpu_gated_attn_fwd;
    ops->gated_attn_bwd = sl_cpu_gated_attn_bwd;
    ops->sigmoid_mean = sl_cpu_sigmoid_mean;
}
