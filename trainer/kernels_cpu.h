/* trainer/kernels_cpu.h - the CPU kernels of trainer/ (listed in backends/cpu.c).
 * Semantics: core/ops.h. */
#ifndef SL_TRAINER_KERNELS_CPU_H
#define SL_TRAINER_KERNELS_CPU_H

#include "core/backend_impl.h"

void sl_cpu_adamw(void *ctx, sl_tensor *p, const sl_tensor *g, sl_tensor *m, sl_tensor *v,
                  sl_tensor *p_copy, const sl_adamw_params *hp);

#endif
