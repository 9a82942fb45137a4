/* moe/ops_cpu_moe.c - registers moe/'s CPU kernels. */
#include "core/cpu_kernels.h"
#include "moe/kernels_cpu.h"

void sl_cpu_register_moe(sl_ops_i *ops) {
    ops->grouped_matmul = sl_cpu_grouped_matmul;
    ops->grouped_matmul_dw = sl_cpu_grouped_matmul_dw;
    ops->router_fwd = sl_cpu_router_fwd;
    ops->router_bwd = sl_cpu_router_bwd;
    ops->moe_sort = sl_cpu_moe_sort;
    ops->gather_rows = sl_cpu_gather_rows;
    ops->scatter_add_rows = sl_cpu_scatter_add_rows;
    ops->moe_combine = sl_cpu_moe_combine;
    ops->moe_combine_bwd = sl_cpu_moe_combine_bwd;
    ops->swiglu_fwd = sl_cpu_swiglu_fwd;
    ops->swiglu_bwd = sl_cpu_swiglu_bwd;
    ops->rowgate_fwd = sl_cpu_rowgate_fwd;
    ops->rowgate_bwd = sl_cpu_rowgate_bwd;
}
