/* core/ops_cpu_core.c - registers core/'s CPU kernels in the CPU backend's table. */
#include "core/cpu_kernels.h"
#include "core/kernels_cpu.h"

void sl_cpu_register_core(sl_ops_i *ops) {
    ops->fill = sl_cpu_fill;
    ops->add = sl_cpu_add;
    ops->axpy = sl_cpu_axpy;
    ops->scale = sl_cpu_scale;
    ops->sum = sl_cpu_sum;
    ops->sumsq = sl_cpu_sumsq;
    ops->matmul = sl_cpu_matmul;
    ops->rmsnorm_fwd = sl_cpu_rmsnorm_fwd;
    ops->rmsnorm_bwd = sl_cpu_rmsnorm_bwd;
    ops->embedding_fwd = sl_cpu_embedding_fwd;
    ops->embedding_bwd = sl_cpu_embedding_bwd;
    ops->cross_entropy = sl_cpu_cross_entropy;
}
