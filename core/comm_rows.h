/*
 * core/comm_rows.h - one kernel that moves many blocks of rows between device buffers
 * (core/comm_rows.cu), for the NCCL transport's regrouping of the expert exchange
 * (core/comm_nccl.c, alltoallv_grouped): one launch per 64 blocks instead of one
 * cudaMemcpyAsync per (peer, local expert) block.
 */
#ifndef SL_COMM_ROWS_H
#define SL_COMM_ROWS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* `rows` rows of the row width passed alongside, from src to dst (device memory). */
typedef struct {
    const void *src;
    void *dst;
    int64_t rows;
} sl_row_block;

/* Queues on `stream` the copy of every block (rows of `width` bytes each; blocks must not
 * overlap one another's destinations, nor a destination a source). A pure copy: exact and
 * deterministic. Empty blocks are skipped. Returns the launches' CUDA error (cudaSuccess when
 * all were queued). */
cudaError_t sl_cuda_copy_row_blocks(const sl_row_block *blocks, int n, size_t width,
                                    cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
