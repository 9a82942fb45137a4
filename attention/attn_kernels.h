/*
 * attention/attn_kernels.h - the CUDA backend's attention kernels by name, and the choice between
 * them (docs/attention.md, "Kernel choice").
 *
 * sl_op_gated_attn_fwd/bwd (core/ops.h) on the CUDA backend run one of several kernels, each a
 * complete implementation of the operation (the same y, o, lse and gradients; lse and o keep the
 * op's meaning, so any forward pairs with any backward):
 *   sm90   sluice's Hopper kernel (wgmma, TMA, warp specialization; sm_90a): bf16, head dim 64
 *          or 128, compute capability 9.x (automatic there, except in the emulated build;
 *          SLUICE_ATTN_SM90, attention/kernels_cuda.h)
 *   mma    sluice's tensor-core kernel (mma.sync, sm_80+): bf16, head dim 64 or 128
 *   simt   sluice's CUDA-core kernel: any head dim, fp32 or bf16 (the fallback)
 *   cudnn  cuDNN's fused SDPA (loaded at run time) with sluice's gate around it: bf16, head dim
 *          64 or 128, causal without document masks, backend.deterministic = false
 * A new kernel is one row in the table of attn_kernels.cu: its name, the check of which problems
 * it takes (compute capability, dtype, head dim, masks), its forward and backward launchers and,
 * optionally, whether the automatic choice may take it.
 *
 * The choice is per backend (attention.kernel, trainer/config.h; attn_bench --kernel):
 *   auto    (the default) today the same as sluice
 *   sluice  per call, the first of sluice's kernels that takes the problem (sm90, mma, simt)
 *   cudnn   the cudnn kernel; a problem it does not take stops the run with the reason
 *   NAME    that kernel only (attn_bench --kernel, tests), likewise
 * Set it with sl_backend_set_attn_kernel (backends/backends.h), which calls
 * sl_cuda_attn_configure for a CUDA backend.
 */
#ifndef SL_ATTENTION_ATTN_KERNELS_H
#define SL_ATTENTION_ATTN_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;    /* "sm90", "mma", "simt", "cudnn": attn_bench --kernel NAME */
    const char *family;  /* "sluice" (attention.kernel = sluice chooses among these) or "cudnn" */
    const char *summary; /* what it is and which problems it takes, one line */
} sl_attn_kernel_info;

/* The kernels of this build, in the order sluice's choice tries them. */
int sl_attn_kernel_count(void);
const sl_attn_kernel_info *sl_attn_kernel_at(int i);

/* Sets what CUDA backend context `ctx` runs: choice NULL or "auto", "sluice", "cudnn" or a kernel
 * name. The cudnn kernel is loaded here (attention/cudnn_sdpa.h), so a node without libcudnn 9,
 * the emulated build, a device older than sm_80 or backend.deterministic = true fail now, not at
 * the first step. 0, or -1 with the reason in err (the backend keeps its previous choice). */
int sl_cuda_attn_configure(void *ctx, const char *choice, char *err, size_t errlen);
/* The kernel that ran the last gated attention forward or backward on ctx (NULL before any). */
const char *sl_cuda_attn_last_kernel(void *ctx);

#ifdef __cplusplus
}
#endif

#endif
