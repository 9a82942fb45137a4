/*
 * core/gemm_split.h - when an fp32 GEMM on the GPU splits its K dimension (core/matmul.cu).
 *
 * cuBLAS's fp32 GEMM (SIMT: fp32 is never run as TF32 here) spreads its work over output tiles.
 * A GEMM with a small output and a long K has few of them: the router's logits [4,096 tokens,
 * 128 experts] (K = hidden 2,048) are 32 tiles of 128 x 128, its weight gradient [128, 2,048]
 * (K = 4,096 tokens) 16, on a GPU of 132 SMs. Splitting K into S slices (one GEMM each, in one
 * strided-batched call, into fp32 partial products that a kernel then sums in slice order) puts
 * S times the tiles in flight. Pure functions, no CUDA: the rule is tested everywhere.
 */
#ifndef SL_GEMM_SPLIT_H
#define SL_GEMM_SPLIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Output tiles the rule assumes (128 x 128), the shortest K slice, the most slices, and the most
 * bytes of fp32 partial products. */
#define SL_GEMM_SPLIT_TILE      128
#define SL_GEMM_SPLIT_MIN_K     256
#define SL_GEMM_SPLIT_MAX       16
#define SL_GEMM_SPLIT_MAX_BYTES ((int64_t)64 << 20)

/* Slices for a column-major C [m, n] = op(A) op(B) with inner dimension k on `sms` SMs: 1 (no
 * split) when the output tiles already fill the GPU, else the largest S in 2, 4, .., 16 with
 * tiles x S <= 2 x sms (two waves at most), k a multiple of S, k / S >= SL_GEMM_SPLIT_MIN_K and
 * S m n fp32 partials within SL_GEMM_SPLIT_MAX_BYTES; 1 when none qualifies. */
int sl_gemm_split_k(int64_t m, int64_t n, int64_t k, int sms);

/* The environment variable SLUICE_GEMM_SPLIT_K (value v; NULL when unset): "auto" or empty or
 * unset -> 0 (the rule); "off" -> 1 (never split); an integer N in 1..64 -> N (every fp32 GEMM
 * whose k is a multiple of N splits into N slices: tests and comparisons). Returns 0 and sets
 * *out, or -1 for any other value. */
int sl_gemm_split_k_parse(const char *v, int *out);

#ifdef __cplusplus
}
#endif

#endif
