/*
 * core/cpu_kernels.h - the CPU backend's operation table is filled by one registration
 * function per concern, each in the directory that owns those operations:
 *
 *   core/ops_cpu_core.c          elementwise, matmul, rmsnorm, embedding, cross-entropy
 *   attention/ops_cpu_attention.c  q/gate split, RoPE, gated flash attention
 *   moe/ops_cpu_moe.c            router, sort/permute, combine, SwiGLU, grouped GEMM
 *   trainer/ops_cpu_trainer.c    AdamW
 *
 * Kernels are plain C with OpenMP over rows/heads/experts and OpenBLAS for matrix work.
 * Include only from CPU kernel files.
 */
#ifndef SL_CPU_KERNELS_H
#define SL_CPU_KERNELS_H

#include "core/backend_impl.h"

void sl_cpu_register_core(sl_ops_i *ops);
void sl_cpu_register_attention(sl_ops_i *ops);
void sl_cpu_register_moe(sl_ops_i *ops);
void sl_cpu_register_trainer(sl_ops_i *ops);

#endif
