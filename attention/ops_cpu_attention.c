/* attention/ops_cpu_attention.c - registers attention/'s CPU kernels. */
#include "core/cpu_kernels.h"

void sl_cpu_register_attention(sl_ops_i *ops) { (void)ops; }
