/*
 * moe/grouped_matmul.cu - one GEMM per expert group on the GPU (the CPU twin:
 * moe/grouped_matmul_cpu.c), through cuBLAS's grouped GEMM.
 *
 * All experts of one projection go into a single cublasGemmGroupedBatchedEx call: each
 * non-empty expert is one cuBLAS "group" of one problem (experts differ in their row count, so
 * they cannot share a group's sizes). Empty experts are left out, rows past sum(counts) are
 * never addressed, and no expert means no call. cuBLAS takes the sizes, leading dimensions,
 * alpha and beta as host arrays and the matrix pointers as device arrays, uploaded here with
 * sl_cuda_upload (one upload per call).
 *
 * Row-major to column-major (core/gemm_cuda.cuh): group g's C_g = A_g op(B_g) is computed as
 * C_g^T = op(B_g)^T A_g^T, so B_g comes first.
 *
 * Data types: compute type CUBLAS_COMPUTE_32F (fp32 accumulation, no TF32). The forward pass
 * has one type for A, B and C (core/ops.c), which the grouped API takes (fp32 or bf16). The
 * weight gradient of bf16 training accumulates bf16 dY, X into an fp32 dW; cuBLAS documents the
 * grouped GEMM for one type throughout, and the emulator's fake (emu/src/cublas_emu.cc) refuses
 * anything else so that CI cannot hide a call a GPU refuses. That call is therefore tried once
 * per process: if cuBLAS accepts it, it is used from then on; if not, as in CI, dW runs as one
 * cublasGemmEx per non-empty expert, which keeps the fp32 accumulation of the gradient at the
 * cost of one launch per expert (rounding each expert's product to bf16 first would not). An
 * fp32 dY, X into a bf16 dW (no cuBLAS GEMM writes that) goes per expert through
 * sl_cuda_gemm's fp32 scratch.
 *
 * Strategies (moe/kernels_cuda.h, SLUICE_EXPERT_GEMM): "grouped" is the above; "per-expert"
 * runs every projection as one cublasGemmEx per non-empty expert on the stream; "lanes" runs
 * those per-expert GEMMs spread over the backend's side lanes (4 streams with a cuBLAS handle
 * each), so that several small GEMMs share the GPU; "grouped-tf32" is "grouped" except for the
 * bf16-into-fp32 weight gradient, which it runs as one grouped fp32 call with TF32 math on fp32
 * copies of the bf16 inputs (exact in TF32); "padded" runs each call as one strided batched
 * GEMM over copies of its row operands with every expert zero-padded to the largest count
 * (run_padded_mm, run_padded_dw: one launch and cuBLAS's batched kernels, for kmax / mean rows
 * of the useful FLOPs and a copy of the operands). "wgmma" runs sluice's own grouped GEMM for
 * Hopper (moe/grouped_matmul_sm90.cu: one persistent launch per call, the counts read on the
 * device) and, where that kernel does not apply (other dtypes or devices), what auto runs there.
 * "auto" (the default) follows what an H200 measured on 2026-11-26 in training steps
 * (gpu_train_bench --profile at 256 and 2,048 rows per expert; docs/performance.md). Where the
 * Hopper kernel applies, it: forward 42.2 -> 25.1 ms per step at 256 rows, data gradient 41.1 ->
 * 24.0, weight gradient 61.4 (lanes) -> 59.9; at 2,048 rows 41.6 -> 22.6, 44.7 -> 23.7, 25.2
 * (per expert) -> 22.4. Elsewhere: the grouped call for the forward and data gradient (the lanes
 * were slower there: every per-expert GEMM has a new shape each micro-batch, and their host
 * calls outran the device; the padded form's guard refused the step's counts, so no step has
 * measured it), and for the bf16-into-fp32 weight gradient, which the grouped call refuses,
 * below SL_EXPERT_GEMM_PAD_ROWS mean rows the padded call where its guard lets it (routing at
 * initialization usually does not: a largest count 6x the mean at 256 tokens under the
 * emulator) and else the lanes (62 ms per step at 256 rows against 82 one after another on the
 * stream), from there on one GEMM per expert on the stream (25 ms per step at 2,048 rows,
 * against 46 on the lanes).
 * bench/expert_gemm_bench times each call in isolation with the same counts every call, which
 * favours the per-expert forms: its figures and the step's disagree for the lanes (faster in
 * the bench, slower in the step), so the step decided. Every strategy gives each expert's
 * product from one cuBLAS GEMM or the wgmma kernel's fixed sequence, with fp32 accumulation.
 */
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cuda_common.cuh"
#include "core/env.h"
#include "core/gemm_cuda.cuh"
#include "core/kernels_cuda.h"
#include "core/log.h"
#include "moe/grouped_matmul_sm90.h"
#include "moe/kernels_cuda.h"

namespace {

/* One column-major problem C = op(A) op(B) + beta C; pointers are device addresses. */
struct problem {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    const void *a, *b;
    void *c;
};

const char *byte_ptr(const void *p, int64_t elems, size_t elem_size) {
    return (const char *)p + elems * (int64_t)elem_size;
}

/* Runs every problem (A and B of dtype `ab`, C of `cd`, alpha 1, the same beta) in one
 * grouped call with the given compute type; returns cuBLAS's status. */
cublasStatus_t run_grouped(void *ctx, const std::vector<problem> &ps, sl_dtype ab, sl_dtype cd,
                           float beta, cublasComputeType_t compute = CUBLAS_COMPUTE_32F) {
    const size_t g = ps.size();
    if (g == 0) return CUBLAS_STATUS_SUCCESS;
    std::vector<cublasOperation_t> ta(g), tb(g);
    std::vector<int> m(g), n(g), k(g), lda(g), ldb(g), ldc(g), size(g, 1);
    std::vector<float> alpha(g, 1.0f), betas(g, beta);
    std::vector<const void *> ptrs(3 * g); /* A pointers, then B, then C */
    for (size_t i = 0; i < g; i++) {
        const problem &p = ps[i];
        ta[i] = p.ta, tb[i] = p.tb, m[i] = p.m, n[i] = p.n, k[i] = p.k;
        lda[i] = p.lda, ldb[i] = p.ldb, ldc[i] = p.ldc;
        ptrs[i] = p.a, ptrs[g + i] = p.b, ptrs[2 * g + i] = p.c;
    }
    void **dev = (void **)sl_cuda_upload(ctx, ptrs.data(), ptrs.size() * sizeof(void *));
    const cudaDataType t = sl_cuda_data_type(ab);
    return cublasGemmGroupedBatchedEx(sl_cuda_cublas(ctx), ta.data(), tb.data(), m.data(), n.data(),
                                      k.data(), alpha.data(), dev, t, lda.data(), dev + g, t,
                                      ldb.data(), betas.data(), dev + 2 * g, sl_cuda_data_type(cd),
                                      ldc.data(), (int)g, size.data(), compute);
}

/* Whether cuBLAS took bf16 A, B with an fp32 C in one grouped call: -1 not tried yet, 0 no,
 * 1 yes (see the top). */
int g_grouped_bf16_f32 = -1;

/* The strategy (sl_cuda_expert_gemm_set_strategy); -1 until read from SLUICE_EXPERT_GEMM. */
int g_strategy = -1;
/* How the last weight gradient and the last forward/data-gradient call ran, for benchmarks. */
const char *g_dw_path = "not run yet";
const char *g_path = "not run yet";

/* An fp32 copy of the first n elements of the bf16 array x in scratch slot `slot`, through the
 * backend's convert (core/elementwise.cu) on flat views of both. */
const float *widen(void *ctx, int slot, const sl_tensor *x, int64_t n) {
    float *y = (float *)sl_cuda_scratch(ctx, slot, sizeof(float) * (size_t)(n > 0 ? n : 1));
    sl_tensor src = {x->be, SL_BF16, 1, {n}, n, x->data, true};
    sl_tensor dst = {x->be, SL_F32, 1, {n}, n, y, true};
    if (n > 0) sl_cuda_convert(ctx, &dst, &src);
    return y;
}

int strategy(void) {
    if (g_strategy < 0) {
        const char *e = getenv("SLUICE_EXPERT_GEMM");
        g_strategy = SL_EXPERT_GEMM_AUTO;
        if (e && *e && !sl_cuda_expert_gemm_parse(e, &g_strategy))
            sl_fatal("SLUICE_EXPERT_GEMM=%s: expected auto, grouped, per-expert, grouped-tf32, "
                     "lanes, padded or wgmma",
                     e);
    }
    return g_strategy;
}

/* One cublasGemmEx per problem (sl_cuda_gemm: its fp32 scratch covers the type pairs cuBLAS
 * lacks), alpha 1 and the same beta. */
void run_per_expert(void *ctx, const char *op, const std::vector<problem> &ps, sl_dtype ab,
                    sl_dtype cd, float beta) {
    for (const problem &p : ps)
        sl_cuda_gemm(ctx, op, p.ta == CUBLAS_OP_T, p.tb == CUBLAS_OP_T, p.m, p.n, p.k, 1.0f, p.a,
                     p.lda, p.b, p.ldb, ab, beta, p.c, p.ldc, cd);
}

/* One cublasGemmEx per problem spread over the side lanes (core/backend_cuda.cuh), each
 * problem to the lane with the fewest FLOPs so far (a fixed assignment: the results do not
 * depend on it, every problem writes its own C). The fp32-into-bf16 pair needs
 * sl_cuda_gemm's scratch, which only the stream may use: it stays on the stream. */
void run_lanes(void *ctx, const char *op, const std::vector<problem> &ps, sl_dtype ab, sl_dtype cd,
               float beta) {
    if (ps.empty()) return;
    if (ab == SL_F32 && cd == SL_BF16) {
        run_per_expert(ctx, op, ps, ab, cd, beta);
        return;
    }
    const int lanes = SL_CUDA_LANES;
    const int n = sl_cuda_lanes_fork(ctx, ps.size() < (size_t)lanes ? (int)ps.size() : lanes);
    double load[SL_CUDA_LANES] = {0};
    const float alpha = 1.0f;
    const cudaDataType t_ab = sl_cuda_data_type(ab), t_cd = sl_cuda_data_type(cd);
    for (const problem &p : ps) {
        int lane = 0;
        for (int i = 1; i < n; i++)
            if (load[i] < load[lane]) lane = i;
        load[lane] += (double)p.m * p.n * p.k;
        sl_cublas_check(cublasGemmEx(sl_cuda_lane_cublas(ctx, lane), p.ta, p.tb, p.m, p.n, p.k,
                                     &alpha, p.a, t_ab, p.lda, p.b, t_ab, p.ldb, &beta, p.c, t_cd,
                                     p.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        op, "cublasGemmEx (side lane)");
    }
    sl_cuda_lanes_join(ctx, n);
}

/* dst [groups][kmax][w8 x 16 bytes] = each group's rows of src [rows][w8 x 16 bytes] (rows
 * row0[g] .. row0[g] + count[g] - 1), zero from count[g] on: the padded operands of the padded
 * strategy (16 bytes per thread step). */
__global__ void k_pad_rows(uint4 *dst, const uint4 *src, const int64_t *row0, const int64_t *count,
                           int kmax, int w8) {
    SL_CHECK_ALIGNED(dst, 16);
    SL_CHECK_ALIGNED(src, 16);
    const int g = (int)blockIdx.y;
    const int64_t n = (int64_t)kmax * w8, c = count[g], r0 = row0[g];
    uint4 *d = dst + (int64_t)g * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / w8;
        d[i] = r < c ? src[(r0 + r) * w8 + i % w8] : make_uint4(0u, 0u, 0u, 0u);
    }
}

/* The inverse: dst's rows row0[g] .. row0[g] + count[g] - 1 = the first count[g] rows of
 * src [groups][kmax][w8 x 16 bytes]. */
__global__ void k_unpad_rows(uint4 *dst, const uint4 *src, const int64_t *row0,
                             const int64_t *count, int kmax, int w8) {
    SL_CHECK_ALIGNED(dst, 16);
    SL_CHECK_ALIGNED(src, 16);
    const int g = (int)blockIdx.y;
    const int64_t n = count[g] * w8;
    const uint4 *sg = src + (int64_t)g * kmax * w8;
    uint4 *d = dst + row0[g] * w8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        d[i] = sg[i];
}

/* The padded layout of one call: the largest count rounded up to 8, and the groups' first rows
 * and counts uploaded for the kernels. Empty (kmax 0) when padding would more than double the
 * work or its buffers (bytes_per_row x kmax x groups) would pass SL_EXPERT_GEMM_PAD_BYTES. */
struct padding {
    int64_t kmax = 0;
    const int64_t *row0 = nullptr, *count = nullptr; /* device */
};

padding plan_padding(void *ctx, const int64_t *counts, int groups, int64_t bytes_per_row) {
    padding p;
    int64_t kmax = 0, rows = 0, nonempty = 0;
    for (int g = 0; g < groups; g++) {
        kmax = counts[g] > kmax ? counts[g] : kmax;
        rows += counts[g];
        nonempty += counts[g] > 0;
    }
    kmax = (kmax + 7) / 8 * 8;
    if (groups < 1 || kmax == 0 || kmax * nonempty > 2 * rows ||
        (int64_t)groups * kmax * bytes_per_row > SL_EXPERT_GEMM_PAD_BYTES)
        return p;
    std::vector<int64_t> meta(2 * (size_t)groups); /* row0, then count */
    int64_t row0 = 0;
    for (int g = 0; g < groups; row0 += counts[g], g++)
        meta[(size_t)g] = row0, meta[(size_t)groups + (size_t)g] = counts[g];
    const int64_t *d =
        (const int64_t *)sl_cuda_upload(ctx, meta.data(), meta.size() * sizeof(int64_t));
    p.kmax = kmax, p.row0 = d, p.count = d + groups;
    return p;
}

/* Copies between rows [rows][width_bytes] and the padded [groups][kmax][width_bytes] (pad: into
 * the padded layout with zero rows; else back, the counted rows only). */
void pad_copy(void *ctx, const char *op, bool pad, void *padded, const void *rows,
              int64_t width_bytes, const padding &p, int groups) {
    const int threads = 256;
    const int64_t w16 = width_bytes / 16, per_group = p.kmax * w16;
    int64_t bx = (per_group + threads - 1) / threads;
    bx = bx > 64 ? 64 : bx < 1 ? 1 : bx;
    const dim3 grid((unsigned)bx, (unsigned)groups);
    if (pad)
        SL_LAUNCH(k_pad_rows, grid, threads, 0, sl_cuda_stream(ctx), (uint4 *)padded,
                  (const uint4 *)rows, p.row0, p.count, (int)p.kmax, (int)w16);
    else
        SL_LAUNCH(k_unpad_rows, grid, threads, 0, sl_cuda_stream(ctx), (uint4 *)rows,
                  (const uint4 *)padded, p.row0, p.count, (int)p.kmax, (int)w16);
    SL_CUDA_LAUNCHED(op);
}

/* The forward or data-gradient GEMM as one strided batched call (SL_EXPERT_GEMM_PADDED): A's
 * rows padded per group (scratch slot 1), PC_g = PA_g op(B_g) for all groups at once into
 * scratch slot 2, the counted rows copied back into C. Only with beta 0 (a copy back cannot
 * add beta C without a second rounding), one dtype throughout, 16-byte rows and operands.
 * Returns false (nothing done) where it does not apply. */
bool run_padded_mm(void *ctx, const char *op, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                   const int64_t *counts, int groups, bool trans_b, float beta) {
    const int64_t r = b->shape[1], s = b->shape[2];
    const int64_t in = trans_b ? s : r, out = trans_b ? r : s;
    const int64_t es = (int64_t)sl_dtype_size(a->dtype);
    if (beta != 0.0f || a->dtype != c->dtype || a->dtype != b->dtype || (in * es) % 16 ||
        (out * es) % 16 || ((uintptr_t)a->data | (uintptr_t)c->data) % 16)
        return false;
    const padding p = plan_padding(ctx, counts, groups, (in + out) * es);
    if (p.kmax == 0) return false;
    void *pa = sl_cuda_scratch(ctx, 1, (size_t)(groups * p.kmax * in * es));
    void *pc = sl_cuda_scratch(ctx, 2, (size_t)(groups * p.kmax * out * es));
    pad_copy(ctx, op, true, pa, a->data, in * es, p, groups);
    const float alpha = 1.0f, zero = 0.0f;
    const cudaDataType t = sl_cuda_data_type(a->dtype);
    const int m = sl_cuda_blas_int(out, op, "output width");
    const int n = sl_cuda_blas_int(p.kmax, op, "padded group rows");
    const int k = sl_cuda_blas_int(in, op, "input width");
    const int lda = sl_cuda_blas_int(s, op, "B row width");
    sl_cublas_check(cublasGemmStridedBatchedEx(
                        sl_cuda_cublas(ctx), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n,
                        k, &alpha, b->data, t, lda, r * s, pa, t, k, p.kmax * in, &zero, pc, t, m,
                        p.kmax * out, groups, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    op, "cublasGemmStridedBatchedEx (padded)");
    pad_copy(ctx, op, false, pc, c->data, out * es, p, groups);
    return true;
}

/* The bf16-into-fp32 weight gradient as one strided batched GEMM (SL_EXPERT_GEMM_PADDED):
 * every group's rows of X [rows, S] and dY [rows, R] copied into [groups][kmax][.] with zeros
 * past its count (scratch slots 1 and 2), then dW_g^T [S, R] = PX_g^T [S, kmax] PdY_g [kmax, R]
 * + beta dW_g^T for all groups in one call; the zero rows add nothing, and an empty group gets
 * beta dW_g. One launch instead of one per expert, for (kmax / mean rows) of the useful FLOPs.
 * Returns false (nothing done) where it does not apply: widths not multiples of 8, unaligned
 * operands, padding that would more than double the work or exceed SL_EXPERT_GEMM_PAD_BYTES. */
bool run_padded_dw(void *ctx, const char *op, sl_tensor *dw, const sl_tensor *dy,
                   const sl_tensor *x, const int64_t *counts, int groups, float beta) {
    const int64_t r = dw->shape[1], s = dw->shape[2];
    if (dy->dtype != SL_BF16 || dw->dtype != SL_F32 || r % 8 || s % 8) return false;
    if (((uintptr_t)dy->data | (uintptr_t)x->data) % 16) return false;
    const padding p = plan_padding(ctx, counts, groups, (r + s) * 2);
    if (p.kmax == 0) return false;
    void *px = sl_cuda_scratch(ctx, 1, (size_t)(groups * p.kmax * s * 2));
    void *pdy = sl_cuda_scratch(ctx, 2, (size_t)(groups * p.kmax * r * 2));
    pad_copy(ctx, op, true, px, x->data, s * 2, p, groups);
    pad_copy(ctx, op, true, pdy, dy->data, r * 2, p, groups);
    const float alpha = 1.0f;
    const int m = sl_cuda_blas_int(s, op, "S"), n = sl_cuda_blas_int(r, op, "R");
    const int k = sl_cuda_blas_int(p.kmax, op, "padded group rows");
    sl_cublas_check(cublasGemmStridedBatchedEx(sl_cuda_cublas(ctx), CUBLAS_OP_N, CUBLAS_OP_T, m, n,
                                               k, &alpha, px, CUDA_R_16BF, m, p.kmax * s, pdy,
                                               CUDA_R_16BF, n, p.kmax * r, &beta, dw->data,
                                               CUDA_R_32F, m, r * s, groups, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT),
                    op, "cublasGemmStridedBatchedEx (padded weight gradient)");
    return true;
}

} // namespace

/* The strategies' names, indexed by their SL_EXPERT_GEMM_* values. */
static const char *const k_strategy_names[] = {"auto",  "grouped", "per-expert", "grouped-tf32",
                                               "lanes", "padded",  "wgmma"};
enum { k_strategies = (int)(sizeof k_strategy_names / sizeof k_strategy_names[0]) };

const char *sl_cuda_expert_gemm_name(int strategy) {
    return strategy >= 0 && strategy < k_strategies ? k_strategy_names[strategy] : "?";
}

bool sl_cuda_expert_gemm_parse(const char *name, int *strategy) {
    for (int i = 0; i < k_strategies; i++)
        if (strcmp(name, k_strategy_names[i]) == 0) {
            *strategy = i;
            return true;
        }
    return false;
}

void sl_cuda_expert_gemm_set_strategy(int s) {
    g_strategy = s;
}

const char *sl_cuda_expert_gemm_dw_path(void) {
    return g_dw_path;
}

const char *sl_cuda_expert_gemm_last_path(void) {
    return g_path;
}

bool sl_cuda_grouped_counts_on_device(void *ctx, sl_dtype dt, int64_t r, int64_t s, int groups) {
    const int how = strategy();
    return (how == SL_EXPERT_GEMM_WGMMA || how == SL_EXPERT_GEMM_AUTO) &&
           sl_cuda_grouped_sm90_applies(ctx, dt, r, s, groups);
}

/* The counts on the host for the cuBLAS paths: the given array, or device counts read with
 * sl_group_counts_host (freed with the struct). core/ops.c hands device counts only where
 * sl_cuda_grouped_counts_on_device said the Hopper kernel takes them, so this read runs only
 * where the kernel then declined the call (a misaligned view, a dW of another type): correct,
 * one host read (counted), and said once. */
namespace {
struct host_counts {
    const int64_t *v;
    int64_t *own = nullptr; /* sl_group_counts_host's copy, or null */
    host_counts(const sl_group_counts *k, int groups, const char *op);
    host_counts(const host_counts &) = delete;
    host_counts &operator=(const host_counts &) = delete;
    ~host_counts() { std::free(own); }
};

host_counts::host_counts(const sl_group_counts *k, int groups, const char *op) {
    static bool said = false;
    if (!k->host && k->rows > 0 && !said) {
        said = true;
        sl_info("expert GEMMs: %s read its device counts on the host (a path without the Hopper "
                "kernel)",
                op);
    }
    v = sl_group_counts_host(*k, groups, &own);
}
} // namespace

/* C [n, out] = A_g op(B_g) + beta C per group; B [groups, R, S] row-major. Column-major per
 * group: C_g^T [out, n_g] = op(B_g)^T [out, in] A_g^T [in, n_g], where B_g's row-major [R, S]
 * is the column-major [S, R] with ld S: used as is without trans_b (out = S), transposed with
 * it (out = R). */
void sl_cuda_grouped_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                            const sl_group_counts *k, int groups, bool trans_b, float beta) {
    static const char *op = "grouped_matmul";
    const int64_t r = b->shape[1], s = b->shape[2];
    const int64_t in = trans_b ? s : r, out = trans_b ? r : s;
    if (out == 0) return;
    const size_t es = sl_dtype_size(a->dtype), es_c = sl_dtype_size(c->dtype);
    if (in == 0) { /* every product is empty: C_g = beta C_g on the groups' rows only */
        sl_cuda_gemm_scale_c(ctx, op, c->data, out, c->dtype, out, k->rows, beta);
        return;
    }
    int how = strategy();
    if (how == SL_EXPERT_GEMM_WGMMA || how == SL_EXPERT_GEMM_AUTO) { /* else: auto's others */
        if (sl_cuda_grouped_mm_sm90(ctx, c, a, b, k, groups, trans_b, beta,
                                    how == SL_EXPERT_GEMM_WGMMA)) {
            g_path = "wgmma";
            return;
        }
        how = SL_EXPERT_GEMM_AUTO;
    }
    const host_counts hc(k, groups, op);
    const int64_t *counts = hc.v;
    std::vector<problem> ps;
    ps.reserve((size_t)(groups > 0 ? groups : 0));
    int64_t row0 = 0;
    for (int g = 0; g < groups; row0 += counts[g], g++) {
        if (counts[g] == 0) continue;
        problem p;
        p.ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
        p.tb = CUBLAS_OP_N;
        p.m = sl_cuda_blas_int(out, op, "output width");
        p.n = sl_cuda_blas_int(counts[g], op, "group rows");
        p.k = sl_cuda_blas_int(in, op, "input width");
        p.a = byte_ptr(b->data, (int64_t)g * r * s, es);
        p.lda = sl_cuda_blas_int(s, op, "B row width");
        p.b = byte_ptr(a->data, row0 * in, es);
        p.ldb = p.k;
        p.c = (void *)byte_ptr(c->data, row0 * out, es_c);
        p.ldc = p.m;
        ps.push_back(p);
    }
    /* auto where the Hopper kernel did not apply: the grouped call (see the top: in training
     * steps on the H200 the padded and the per-expert forms measured no faster, the lanes
     * slower) */
    if (how == SL_EXPERT_GEMM_PADDED &&
        run_padded_mm(ctx, op, c, a, b, counts, groups, trans_b, beta)) {
        g_path = "padded";
    } else if (how == SL_EXPERT_GEMM_PER_EXPERT) {
        run_per_expert(ctx, op, ps, a->dtype, c->dtype, beta);
        g_path = "per-expert";
    } else if (how == SL_EXPERT_GEMM_LANES) {
        run_lanes(ctx, op, ps, a->dtype, c->dtype, beta);
        g_path = "lanes";
    } else {
        sl_cublas_check(run_grouped(ctx, ps, a->dtype, c->dtype, beta), op,
                        "cublasGemmGroupedBatchedEx");
        g_path = "grouped";
    }
}

/* dW_g [R, S] = dY_g^T X_g + beta dW_g. Column-major: dW_g^T [S, R] = X_g^T [S, n_g] dY_g [n_g, R]
 * + beta dW_g^T, where X_g's row-major [n_g, S] is the column-major [S, n_g] (ld S, used as is)
 * and dY_g's row-major [n_g, R] the column-major [R, n_g] (ld R, transposed). Empty groups get
 * beta dW_g: with beta 0 (a gradient's first write of the step) they are set to zero, one
 * launch per run of consecutive empty groups (their slices are contiguous). These are the
 * cuBLAS paths of sl_cuda_grouped_matmul_dw (every strategy but wgmma). */
static void dw_cublas(void *ctx, int how, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                      const int64_t *counts, int groups, float beta) {
    static const char *op = "grouped_matmul_dw";
    const int64_t r = dw->shape[1], s = dw->shape[2];
    const size_t es_in = sl_dtype_size(dy->dtype), es_w = sl_dtype_size(dw->dtype);
    /* auto's question: fewer than SL_EXPERT_GEMM_PAD_ROWS rows per non-empty expert on average */
    int64_t rows = 0, nonempty = 0;
    for (int g = 0; g < groups; g++) rows += counts[g], nonempty += counts[g] > 0;
    const bool small = rows < (int64_t)SL_EXPERT_GEMM_PAD_ROWS * nonempty;
    if (how == SL_EXPERT_GEMM_PADDED || (how == SL_EXPERT_GEMM_AUTO && small)) {
        /* first, so that empty groups get beta once (the batched call applies it to them) */
        if (run_padded_dw(ctx, op, dw, dy, x, counts, groups, beta)) {
            g_dw_path = "padded";
            return;
        }
    }
    std::vector<problem> ps;
    int64_t row0 = 0;
    for (int g = 0; g < groups; row0 += counts[g], g++) {
        if (counts[g] == 0) {
            int run = 1; /* empty groups g .. g + run - 1 */
            while (g + run < groups && counts[g + run] == 0) run++;
            sl_cuda_gemm_scale_c(ctx, op, (void *)byte_ptr(dw->data, (int64_t)g * r * s, es_w), s,
                                 dw->dtype, s, r * run, beta);
            g += run - 1;
            continue;
        }
        problem p;
        p.ta = CUBLAS_OP_N;
        p.tb = CUBLAS_OP_T;
        p.m = sl_cuda_blas_int(s, op, "S");
        p.n = sl_cuda_blas_int(r, op, "R");
        p.k = sl_cuda_blas_int(counts[g], op, "group rows");
        p.a = byte_ptr(x->data, row0 * s, es_in);
        p.lda = p.m;
        p.b = byte_ptr(dy->data, row0 * r, es_in);
        p.ldb = p.n;
        p.c = (void *)byte_ptr(dw->data, (int64_t)g * r * s, es_w);
        p.ldc = p.m;
        ps.push_back(p);
    }
    if (ps.empty()) return;
    /* auto, where the padded call did not apply: bf16 into fp32 (refused by the grouped call)
     * on the lanes below SL_EXPERT_GEMM_PAD_ROWS mean rows, else as grouped (below) */
    if (how == SL_EXPERT_GEMM_LANES ||
        (how == SL_EXPERT_GEMM_AUTO && small && dw->dtype != dy->dtype)) {
        run_lanes(ctx, op, ps, dy->dtype, dw->dtype, beta);
        g_dw_path = "lanes";
        return;
    }
    if (how != SL_EXPERT_GEMM_PER_EXPERT && dw->dtype == dy->dtype) {
        sl_cublas_check(run_grouped(ctx, ps, dy->dtype, dw->dtype, beta), op,
                        "cublasGemmGroupedBatchedEx");
        g_dw_path = "grouped";
        return;
    }
    if (how == SL_EXPERT_GEMM_GROUPED_TF32 && dy->dtype == SL_BF16 && dw->dtype == SL_F32) {
        /* bf16 values are exact in TF32 (10 mantissa bits), so one grouped fp32 call with TF32
         * tensor-core math computes the bf16 products exactly, accumulating in fp32: the inputs
         * widened to fp32 in scratch (rows x (R + S) x 6 bytes of traffic), one launch. */
        const float *xf = widen(ctx, 1, x, row0 * s);
        const float *dyf = widen(ctx, 2, dy, row0 * r);
        for (problem &p : ps) {
            p.a = (const float *)xf + ((const char *)p.a - (const char *)x->data) / es_in;
            p.b = (const float *)dyf + ((const char *)p.b - (const char *)dy->data) / es_in;
        }
        sl_cublas_check(run_grouped(ctx, ps, SL_F32, SL_F32, beta, CUBLAS_COMPUTE_32F_FAST_TF32),
                        op, "cublasGemmGroupedBatchedEx (TF32)");
        g_dw_path = "grouped-tf32 (bf16 widened to fp32)";
        return;
    }
    if (how != SL_EXPERT_GEMM_PER_EXPERT && dy->dtype == SL_BF16 && g_grouped_bf16_f32 != 0) {
        /* A refused call has done nothing: cuBLAS checks its arguments before it launches. */
        const bool took = run_grouped(ctx, ps, dy->dtype, dw->dtype, beta) == CUBLAS_STATUS_SUCCESS;
        g_grouped_bf16_f32 = took;
        if (took) {
            g_dw_path = "grouped (bf16 into fp32)";
            return;
        }
    }
    if (how == SL_EXPERT_GEMM_PER_EXPERT)
        g_dw_path = "per-expert";
    else if (dy->dtype == SL_BF16)
        g_dw_path = "per-expert (cuBLAS refused the grouped bf16 into fp32 call)";
    else
        g_dw_path = "per-expert (no grouped call for these types)";
    run_per_expert(ctx, op, ps, dy->dtype, dw->dtype, beta);
}

/* sumsq: the Hopper kernel adds the squares in its epilogue; after the other paths one
 * reduction pass over dW adds them. */
void sl_cuda_grouped_matmul_dw(void *ctx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                               const sl_group_counts *k, int groups, float beta, sl_tensor *sumsq) {
    if (dw->shape[1] == 0 || dw->shape[2] == 0) return;
    int how = strategy();
    if (how == SL_EXPERT_GEMM_WGMMA || how == SL_EXPERT_GEMM_AUTO) { /* else: auto's others */
        const sl_dw_segment one = {dy, x, *k};
        if (sl_cuda_grouped_dw_sm90(ctx, dw, &one, 1, groups, beta, sumsq,
                                    how == SL_EXPERT_GEMM_WGMMA)) {
            g_dw_path = "wgmma";
            return;
        }
        how = SL_EXPERT_GEMM_AUTO;
    }
    const host_counts hc(k, groups, "grouped_matmul_dw");
    dw_cublas(ctx, how, dw, dy, x, hc.v, groups, beta);
    if (sumsq) sl_cuda_reduce_add(ctx, sl_ptr<float>(sumsq), sl_ptr<float>(dw), dw->numel, true);
}

/* The Hopper kernel over every segment in one pass over dW where it applies; else the
 * micro-batches' weight gradients one after another, on whichever path each takes. */
void sl_cuda_grouped_matmul_dw_segments(void *ctx, sl_tensor *dw, const sl_dw_segment *segs,
                                        int nseg, int groups, float beta, sl_tensor *sumsq) {
    const int how = strategy();
    if (dw->shape[1] > 0 && dw->shape[2] > 0 &&
        (how == SL_EXPERT_GEMM_WGMMA || how == SL_EXPERT_GEMM_AUTO) &&
        sl_cuda_grouped_dw_sm90(ctx, dw, segs, nseg, groups, beta, sumsq,
                                how == SL_EXPERT_GEMM_WGMMA)) {
        g_dw_path = "wgmma";
        return;
    }
    for (int i = 0; i < nseg; i++)
        sl_cuda_grouped_matmul_dw(ctx, dw, segs[i].dy, segs[i].x, &segs[i].counts, groups,
                                  i == 0 ? beta : 1.0f, i == nseg - 1 ? sumsq : nullptr);
}

bool sl_cuda_expert_gemm_swiglu_fused(void) {
    static const char *const values[] = {"0", "1"};
    static const int v = sl_env_choice("SLUICE_EXPERT_GEMM_SWIGLU", values, 2);
    return v == 1; /* unset: two kernels, measured faster (moe/kernels_cuda.h) */
}

void sl_cuda_grouped_matmul_swiglu(void *ctx, sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                   const sl_tensor *b, const sl_group_counts *k, int groups) {
    const int how = strategy();
    if ((how == SL_EXPERT_GEMM_WGMMA || how == SL_EXPERT_GEMM_AUTO) &&
        sl_cuda_expert_gemm_swiglu_fused() &&
        sl_cuda_grouped_mm_swiglu_sm90(ctx, h, gu, a, b, k, groups, how == SL_EXPERT_GEMM_WGMMA)) {
        g_path = "wgmma + SwiGLU";
        return;
    }
    sl_cuda_grouped_matmul(ctx, gu, a, b, k, groups, true, 0.0f);
    if (k->rows == 0) return;
    sl_tensor hv = sl_head_rows(h, k->rows), gv = sl_head_rows(gu, k->rows);
    sl_cuda_swiglu_fwd(ctx, &hv, &gv);
}
