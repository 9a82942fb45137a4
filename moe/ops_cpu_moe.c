/* moe/ops_cpu_moe.c - registers moe/'s CPU kernels. */
#include "core/cpu_kernels.h"

void sl_cpu_register_moe(sl_ops_i *ops) { (void)ops; }
