/*
 * tests/emu/test_cublas_emu.cc - the emulator's cuBLAS (emu/src/cublas_emu.cc) against a naive
 * double-precision loop.
 *
 * Column-major semantics in every transpose combination (N, T, C), odd sizes, leading
 * dimensions larger than the rows (the padding holds NaN in the inputs, which must not leak
 * in, and a sentinel in C, which must stay), alpha and beta, beta = 0 with NaN in C (C must not
 * be read), k = 0 (C = beta C), bf16 inputs and outputs (rounded once, to nearest even),
 * TF32 rounding where the compute type or math mode allows it, the strided, pointer-array and
 * grouped batches (with empty groups), argument validation (INVALID_VALUE, NOT_INITIALIZED)
 * and the type combinations real cuBLAS rejects (NOT_SUPPORTED). Matrices live in the emulated
 * device's memory (cudaMalloc, cudaMemcpy), as on a GPU; child processes check that a host
 * matrix, a region past an allocation's end and a host pointer array are faults, and that
 * cublasCreate fails on a machine without a GPU.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <memory>
#include <vector>

#include <sys/resource.h>

#include "tests/emu/emu_test.h"

/* A device copy of host bytes (cudaMalloc + cudaMemcpy: the emulated GPU's memory). */
struct dev {
    void *p = nullptr;
    size_t bytes;
    dev(const void *host, size_t n) : bytes(n) {
        CUDA_CHECK(cudaMalloc(&p, n ? n : 1));
        if (n) CUDA_CHECK(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice));
    }
    ~dev() { cudaFree(p); }
    dev(const dev &) = delete;
    dev &operator=(const dev &) = delete;
    void get(void *host) const { CUDA_CHECK(cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost)); }
};
typedef std::unique_ptr<dev> dev_ptr;

/* In C's padding rows; exact in bf16 too. */
static const float k_sentinel = 12288.0f;

/* ---- data ---------------------------------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float uniform(float lo, float hi) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((g_rng >> 40) / 16777216.0);
}

/* A column-major matrix of one cuBLAS type, its values kept as fp32 too (exactly the stored
 * values). */
struct mat {
    cudaDataType t;
    int64_t rows, cols, ld;
    std::vector<float> f;         /* values, ld x cols */
    std::vector<__nv_bfloat16> h; /* the bf16 storage when t is CUDA_R_16BF */
    void *data() { return t == CUDA_R_16BF ? (void *)h.data() : (void *)f.data(); }
    size_t bytes() const { return f.size() * (t == CUDA_R_16BF ? 2 : 4); }
    float at(int64_t i, int64_t j) const { return f[(size_t)(i + j * ld)]; }
    /* A device copy of the storage. */
    dev_ptr to_dev() { return dev_ptr(new dev(data(), bytes())); }
    /* Reads the device copy back after the fake wrote it. */
    void from_dev(const dev &d) {
        d.get(data());
        if (t == CUDA_R_16BF)
            for (size_t i = 0; i < f.size(); i++) f[i] = __bfloat162float(h[i]);
    }
    /* NaN in the rows x cols block (not the padding), where beta = 0 must not read. */
    void fill_nan() {
        for (int64_t j = 0; j < cols; j++)
            for (int64_t i = 0; i < rows; i++) f[(size_t)(i + j * ld)] = NAN;
        if (t == CUDA_R_16BF)
            for (size_t i = 0; i < f.size(); i++) h[i] = __float2bfloat16_rn(f[i]);
    }
};

/* rows x cols with leading dimension ld; entries uniform in [-1, 1) rounded to the type, and
 * `pad` in the rows beyond `rows`. */
static mat make(cudaDataType t, int64_t rows, int64_t cols, int64_t ld, float pad) {
    mat m{t, rows, cols, ld, std::vector<float>((size_t)(ld * cols)), {}};
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < ld; i++) {
            float v = i < rows ? uniform(-1, 1) : pad;
            if (t == CUDA_R_16BF) v = __bfloat162float(__float2bfloat16_rn(v));
            m.f[(size_t)(i + j * ld)] = v;
        }
    if (t == CUDA_R_16BF) {
        m.h.resize(m.f.size());
        for (size_t i = 0; i < m.f.size(); i++) m.h[i] = __float2bfloat16_rn(m.f[i]);
    }
    return m;
}

static float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- the reference ------------------------------------------------------------------------- */

/* op(X)(i, l) for a stored X. */
static double op_at(const mat &x, cublasOperation_t op, int64_t i, int64_t l, bool round_tf32) {
    const float v = op == CUBLAS_OP_N ? x.at(i, l) : x.at(l, i);
    return round_tf32 ? tf32(v) : v;
}

/* Checks C (after the call) against alpha op(A) op(B) + beta C0 in double: within a bound
 * that covers fp32 accumulation (k ulps of the sum of |terms|) plus one rounding to C's type;
 * the padding rows of C must still hold the sentinel. */
static void expect_gemm(const char *what, const mat &a, const mat &b, const mat &c0, const mat &c,
                        cublasOperation_t ta, cublasOperation_t tb, int64_t k, float alpha,
                        float beta, bool round_tf32 = false) {
    const double out_eps = c.t == CUDA_R_16BF ? 1.0 / 256 : 1.2e-7;
    int bad = 0;
    for (int64_t j = 0; j < c.cols; j++)
        for (int64_t i = 0; i < c.ld; i++) {
            const float got = c.at(i, j);
            if (i >= c.rows) {
                if (got != k_sentinel && bad++ < 5)
                    CHECK(false, "%s: C padding (%lld, %lld) changed to %g", what, (long long)i,
                          (long long)j, got);
                continue;
            }
            double acc = 0, mag = 0;
            for (int64_t l = 0; l < k; l++) {
                const double p = op_at(a, ta, i, l, round_tf32) * op_at(b, tb, l, j, round_tf32);
                acc += p, mag += fabs(p);
            }
            double want = alpha * acc, bound = fabs(alpha) * mag;
            if (beta != 0) { /* beta = 0: C0 (maybe NaN) plays no part */
                want += beta * (double)c0.at(i, j);
                bound += fabs(beta * (double)c0.at(i, j));
            }
            const double tol = (k + 2) * 1.2e-7 * bound + out_eps * fabs(want) + 1e-30;
            if (!(fabs(got - want) <= tol) && bad++ < 5)
                CHECK(false, "%s: C(%lld, %lld) = %.9g, want %.9g (tol %.3g)", what, (long long)i,
                      (long long)j, got, want, tol);
        }
    CHECK(bad == 0, "%s: %d elements wrong", what, bad);
}

static const char *op_name(cublasOperation_t op) {
    return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C";
}

/* One cublasGemmEx call on fresh data, checked. */
static void case_gemm_ex(cublasHandle_t h, cudaDataType ab, cudaDataType ct, cublasOperation_t ta,
                         cublasOperation_t tb, int64_t m, int64_t n, int64_t k, int64_t pad,
                         float alpha, float beta, bool nan_c = false) {
    const int64_t ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
    const int64_t rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
    mat a = make(ab, ra, ca, (ra > 0 ? ra : 1) + pad, NAN);
    mat b = make(ab, rb, cb, (rb > 0 ? rb : 1) + pad, NAN);
    mat c = make(ct, m, n, (m > 0 ? m : 1) + pad, k_sentinel);
    if (nan_c) c.fill_nan();
    const mat c0 = c;
    dev_ptr da = a.to_dev(), db = b.to_dev(), dc = c.to_dev();
    char what[160];
    snprintf(what, sizeof what, "GemmEx %s%s %lldx%lldx%lld pad %lld types %d/%d a %g b %g%s",
             op_name(ta), op_name(tb), (long long)m, (long long)n, (long long)k, (long long)pad,
             (int)ab, (int)ct, alpha, beta, nan_c ? " NaN C" : "");
    const cublasStatus_t st = cublasGemmEx(h, ta, tb, (int)m, (int)n, (int)k, &alpha, da->p, ab,
                                           (int)a.ld, db->p, ab, (int)b.ld, &beta, dc->p, ct,
                                           (int)c.ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "%s: status %s", what, cublasGetStatusName(st));
    c.from_dev(*dc);
    expect_gemm(what, a, b, c0, c, ta, tb, k, alpha, beta);
}

/* ---- the cases ----------------------------------------------------------------------------- */

static void test_gemm_ex(cublasHandle_t h) {
    const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
    const cudaDataType types[][2] = {
        {CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}};
    for (auto &t : types)
        for (cublasOperation_t ta : ops)
            for (cublasOperation_t tb : ops) {
                case_gemm_ex(h, t[0], t[1], ta, tb, 7, 5, 9, 0, 1.0f, 0.0f);
                case_gemm_ex(h, t[0], t[1], ta, tb, 13, 3, 17, 3, 0.5f, -1.5f);
                case_gemm_ex(h, t[0], t[1], ta, tb, 1, 1, 1, 0, -1.0f, 1.0f);
                case_gemm_ex(h, t[0], t[1], ta, tb, 6, 11, 4, 2, 1.0f, 0.0f, true);
            }
    /* a size where OpenBLAS takes its blocked path */
    case_gemm_ex(h, CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, 65, 129, 33, 1, 1.0f, 0.5f);
    case_gemm_ex(h, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_T, 64, 48, 80, 0, 1.0f, 1.0f);
    /* k = 0: C = beta C, and C = 0 (not NaN) when beta = 0 */
    case_gemm_ex(h, CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 0, 1, 1.0f, 2.0f);
    case_gemm_ex(h, CUDA_R_16BF, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, 4, 3, 0, 0, 1.0f, 0.0f,
                 true);
    /* alpha = 0 */
    case_gemm_ex(h, CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 0, 0.0f, -0.5f);
    /* m = 0 and n = 0: nothing happens (the padding checks that nothing was written) */
    case_gemm_ex(h, CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 3, 2, 1.0f, 0.0f);
    case_gemm_ex(h, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_T, 3, 0, 3, 0, 1.0f, 0.0f);
}

/* bf16 output rounding is to nearest even: C = 1 * 1 + x * 1 with bf16 inputs 1 and x. For
 * x = 2^-8 the fp32 sum lies halfway between the bf16 neighbours 1 and 1 + 2^-7 and must round
 * to 1 (even mantissa); for x = 3 * 2^-8, halfway between 1 + 2^-7 and 1 + 2^-6, to 1 + 2^-6. */
static void test_bf16_rounding(cublasHandle_t h) {
    const float xs[] = {1.0f / 256, 3.0f / 256};
    const float want[] = {1.0f, 1.0f + 1.0f / 64};
    for (int t = 0; t < 2; t++) {
        const float alpha = 1.0f, beta = 0.0f;
        const __nv_bfloat16 a[2] = {__float2bfloat16_rn(1.0f), __float2bfloat16_rn(xs[t])};
        const __nv_bfloat16 b[2] = {__float2bfloat16_rn(1.0f), __float2bfloat16_rn(1.0f)};
        __nv_bfloat16 c = __float2bfloat16_rn(0.0f);
        dev da(a, sizeof a), db(b, sizeof b), dc(&c, sizeof c);
        const cublasStatus_t st = cublasGemmEx(
            h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &alpha, da.p, CUDA_R_16BF, 1, db.p, CUDA_R_16BF,
            2, &beta, dc.p, CUDA_R_16BF, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        CHECK(st == CUBLAS_STATUS_SUCCESS, "bf16 rounding: status %s", cublasGetStatusName(st));
        dc.get(&c);
        CHECK(__bfloat162float(c) == want[t], "bf16 rounding of 1 + %.9g: got %.9g, want %.9g",
              xs[t], __bfloat162float(c), want[t]);
    }
}

/* Reduced-precision modes round fp32 inputs to TF32; the pedantic and default ones do not. */
static void test_tf32(cublasHandle_t h) {
    const int m = 5, n = 4, k = 6;
    mat a = make(CUDA_R_32F, m, k, m, 0), b = make(CUDA_R_32F, k, n, k, 0);
    for (float &v : a.f) v = 1.0f + v * 1e-3f; /* low mantissa bits that TF32 drops */
    for (float &v : b.f) v = 1.0f + v * 1e-3f;
    dev_ptr da = a.to_dev(), db = b.to_dev();
    const float alpha = 1.0f, beta = 0.0f;
    struct {
        cublasMath_t math;
        cublasComputeType_t compute;
        bool tf32;
    } cases[] = {{CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F, false},
                 {CUBLAS_DEFAULT_MATH, CUBLAS_COMPUTE_32F_FAST_TF32, true},
                 {CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F, true},
                 {CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F_PEDANTIC, false}};
    for (auto &cs : cases) {
        CHECK(cublasSetMathMode(h, cs.math) == CUBLAS_STATUS_SUCCESS, "set math mode");
        mat c = make(CUDA_R_32F, m, n, m, 0);
        const mat c0 = c;
        dev_ptr dc = c.to_dev();
        const cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da->p,
                                               CUDA_R_32F, m, db->p, CUDA_R_32F, k, &beta, dc->p,
                                               CUDA_R_32F, m, cs.compute, CUBLAS_GEMM_DEFAULT);
        CHECK(st == CUBLAS_STATUS_SUCCESS, "tf32 case: status %s", cublasGetStatusName(st));
        c.from_dev(*dc);
        char what[96];
        snprintf(what, sizeof what, "math %d compute %d", (int)cs.math, (int)cs.compute);
        expect_gemm(what, a, b, c0, c, CUBLAS_OP_N, CUBLAS_OP_N, k, alpha, beta, cs.tf32);
        /* and the other rounding must not match: the error of TF32 is visible at this size */
        double diff = 0;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double exact = 0;
                for (int l = 0; l < k; l++) exact += (double)a.at(i, l) * b.at(l, j);
                diff = fmax(diff, fabs(c.at(i, j) - exact));
            }
        CHECK(cs.tf32 ? diff > 1e-4 : diff < 1e-5, "%s: max error vs exact fp32 inputs %.3g", what,
              diff);
    }
    CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_SUCCESS, "reset math mode");
}

/* A device array of the device addresses of `ds` (what the batched and grouped calls read). */
static dev_ptr pointer_array(const std::vector<dev_ptr> &ds) {
    std::vector<void *> ptrs;
    for (const dev_ptr &d : ds) ptrs.push_back(d->p);
    return dev_ptr(new dev(ptrs.data(), ptrs.size() * sizeof(void *)));
}

static void test_strided_and_batched(cublasHandle_t h) {
    const int m = 6, n = 5, k = 7, batch = 3, lda = k + 1, ldb = k, ldc = m + 2;
    const float alpha = 0.75f, beta = 0.5f;
    /* op(A) = A^T: A stored k x m; three matrices lda*m apart plus slack */
    const long long sa = (long long)lda * m + 3, sb = (long long)ldb * n, sc = (long long)ldc * n;
    std::vector<mat> as, bs, cs;
    for (int i = 0; i < batch; i++) {
        as.push_back(make(CUDA_R_16BF, k, m, lda, NAN));
        bs.push_back(make(CUDA_R_16BF, k, n, ldb, NAN));
        cs.push_back(make(CUDA_R_32F, m, n, ldc, k_sentinel));
    }
    const std::vector<mat> c0s = cs;
    /* the strided layout: copies of the matrices one stride apart */
    std::vector<__nv_bfloat16> ab((size_t)(sa * batch)), bb((size_t)(sb * batch));
    std::vector<float> cb((size_t)(sc * batch));
    for (int i = 0; i < batch; i++) {
        memcpy(&ab[(size_t)(i * sa)], as[i].h.data(), as[i].h.size() * 2);
        memcpy(&bb[(size_t)(i * sb)], bs[i].h.data(), bs[i].h.size() * 2);
        memcpy(&cb[(size_t)(i * sc)], cs[i].f.data(), cs[i].f.size() * 4);
    }
    {
        dev da(ab.data(), ab.size() * 2), db(bb.data(), bb.size() * 2),
            dc(cb.data(), cb.size() * 4);
        const cublasStatus_t st = cublasGemmStridedBatchedEx(
            h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da.p, CUDA_R_16BF, lda, sa, db.p,
            CUDA_R_16BF, ldb, sb, &beta, dc.p, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT);
        CHECK(st == CUBLAS_STATUS_SUCCESS, "strided: status %s", cublasGetStatusName(st));
        dc.get(cb.data());
    }
    for (int i = 0; i < batch; i++) {
        mat got = cs[i];
        memcpy(got.f.data(), &cb[(size_t)(i * sc)], got.f.size() * 4);
        expect_gemm("strided batch", as[i], bs[i], c0s[i], got, CUBLAS_OP_T, CUBLAS_OP_N, k, alpha,
                    beta);
    }
    /* the same through pointer arrays */
    std::vector<dev_ptr> das, dbs, dcs;
    for (int i = 0; i < batch; i++)
        das.push_back(as[i].to_dev()), dbs.push_back(bs[i].to_dev()), dcs.push_back(cs[i].to_dev());
    dev_ptr ap = pointer_array(das), bp = pointer_array(dbs), cp = pointer_array(dcs);
    cublasStatus_t st = cublasGemmBatchedEx(
        h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, (const void *const *)ap->p, CUDA_R_16BF, lda,
        (const void *const *)bp->p, CUDA_R_16BF, ldb, &beta, (void *const *)cp->p, CUDA_R_32F, ldc,
        batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "batched: status %s", cublasGetStatusName(st));
    for (int i = 0; i < batch; i++) {
        cs[i].from_dev(*dcs[i]);
        expect_gemm("pointer batch", as[i], bs[i], c0s[i], cs[i], CUBLAS_OP_T, CUBLAS_OP_N, k,
                    alpha, beta);
    }
    /* the legacy fp32 routine */
    mat a = make(CUDA_R_32F, m, k, m, NAN), b = make(CUDA_R_32F, n, k, n + 1, NAN);
    mat c = make(CUDA_R_32F, m, n, m, 0);
    const mat c0 = c;
    dev_ptr da = a.to_dev(), db = b.to_dev(), dc = c.to_dev();
    st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, (const float *)da->p, m,
                     (const float *)db->p, n + 1, &beta, (float *)dc->p, m);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "sgemm: status %s", cublasGetStatusName(st));
    c.from_dev(*dc);
    expect_gemm("sgemm", a, b, c0, c, CUBLAS_OP_N, CUBLAS_OP_T, k, alpha, beta);
}

/* Four groups (sizes 2, 0, 1 and 2) of different shapes and transposes, one with an empty
 * product (k = 0 scales C), NaN in a C with beta = 0, in fp32 and bf16. */
static void test_grouped(cublasHandle_t h, cudaDataType t) {
    const int gc = 4;
    const cublasOperation_t ta[gc] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_T, CUBLAS_OP_N};
    const cublasOperation_t tb[gc] = {CUBLAS_OP_T, CUBLAS_OP_N, CUBLAS_OP_N, CUBLAS_OP_N};
    const int m[gc] = {5, 3, 4, 6}, n[gc] = {7, 2, 3, 2}, k[gc] = {9, 4, 0, 5};
    const int size[gc] = {2, 0, 1, 2};
    const float alpha[gc] = {1.0f, 2.0f, 1.0f, -0.5f}, beta[gc] = {0.0f, 1.0f, 3.0f, 1.0f};
    int lda[gc], ldb[gc], ldc[gc];
    std::vector<mat> as, bs, cs;
    for (int g = 0; g < gc; g++) {
        const int ra = ta[g] == CUBLAS_OP_N ? m[g] : k[g], ca = ta[g] == CUBLAS_OP_N ? k[g] : m[g];
        const int rb = tb[g] == CUBLAS_OP_N ? k[g] : n[g], cb = tb[g] == CUBLAS_OP_N ? n[g] : k[g];
        lda[g] = (ra > 0 ? ra : 1) + g % 2, ldb[g] = (rb > 0 ? rb : 1) + 1, ldc[g] = m[g] + g % 2;
        for (int p = 0; p < size[g]; p++) {
            as.push_back(make(t, ra, ca, lda[g], NAN));
            bs.push_back(make(t, rb, cb, ldb[g], NAN));
            cs.push_back(make(t, m[g], n[g], ldc[g], k_sentinel));
            if (beta[g] == 0.0f) cs.back().fill_nan();
        }
    }
    const std::vector<mat> c0s = cs;
    std::vector<dev_ptr> das, dbs, dcs;
    for (size_t p = 0; p < as.size(); p++)
        das.push_back(as[p].to_dev()), dbs.push_back(bs[p].to_dev()), dcs.push_back(cs[p].to_dev());
    dev_ptr ap = pointer_array(das), bp = pointer_array(dbs), cp = pointer_array(dcs);
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(
        h, ta, tb, m, n, k, alpha, (const void *const *)ap->p, t, lda, (const void *const *)bp->p,
        t, ldb, beta, (void *const *)cp->p, t, ldc, gc, size, CUBLAS_COMPUTE_32F);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "grouped type %d: status %s", (int)t,
          cublasGetStatusName(st));
    size_t p = 0;
    for (int g = 0; g < gc; g++)
        for (int q = 0; q < size[g]; q++, p++) {
            cs[p].from_dev(*dcs[p]);
            char what[64];
            snprintf(what, sizeof what, "grouped type %d group %d problem %d", (int)t, g, q);
            expect_gemm(what, as[p], bs[p], c0s[p], cs[p], ta[g], tb[g], k[g], alpha[g], beta[g]);
        }
}

/* Refused calls: checked before any memory is touched, so host addresses do here. */
static void test_grouped_refusals(cublasHandle_t h) {
    const cublasOperation_t op = CUBLAS_OP_N;
    const int one = 1, size = 1, neg = -1, zero = 0;
    const float alpha = 1, beta = 0;
    float a = 1, b = 1, c = 0;
    const void *ap[1] = {&a}, *bp[1] = {&b};
    void *cp[1] = {&c};
    /* bf16 inputs with an fp32 output: not a grouped-GEMM combination */
    CHECK(cublasGemmGroupedBatchedEx(h, &op, &op, &one, &one, &one, &alpha, ap, CUDA_R_16BF, &one,
                                     bp, CUDA_R_16BF, &one, &beta, cp, CUDA_R_32F, &one, 1, &size,
                                     CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED,
          "grouped bf16 -> fp32 must be NOT_SUPPORTED");
    CHECK(cublasGemmGroupedBatchedEx(h, &op, &op, &one, &one, &one, &alpha, ap, CUDA_R_32F, &one,
                                     bp, CUDA_R_32F, &one, &beta, cp, CUDA_R_32F, &one, 1, &size,
                                     CUBLAS_COMPUTE_16F) == CUBLAS_STATUS_NOT_SUPPORTED,
          "grouped fp32 with a half compute type must be NOT_SUPPORTED");
    CHECK(cublasGemmGroupedBatchedEx(h, &op, &op, &one, &one, &one, &alpha, ap, CUDA_R_32F, &one,
                                     bp, CUDA_R_32F, &one, &beta, cp, CUDA_R_32F, &one, 1, &neg,
                                     CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE,
          "negative group size");
    CHECK(cublasGemmGroupedBatchedEx(h, &op, &op, &one, &one, &one, &alpha, ap, CUDA_R_32F, &one,
                                     bp, CUDA_R_32F, &one, &beta, cp, CUDA_R_32F, &one, -1, &size,
                                     CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE,
          "negative group count");
    CHECK(cublasGemmGroupedBatchedEx(h, &op, &op, &one, &one, &one, &alpha, ap, CUDA_R_32F, &zero,
                                     bp, CUDA_R_32F, &one, &beta, cp, CUDA_R_32F, &one, 1, &size,
                                     CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_INVALID_VALUE,
          "grouped lda 0");
    c = 7;
    CHECK(cublasGemmGroupedBatchedEx(h, &op, &op, &one, &one, &one, &alpha, ap, CUDA_R_32F, &one,
                                     bp, CUDA_R_32F, &one, &beta, cp, CUDA_R_32F, &one, 0, &size,
                                     CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS &&
              c == 7,
          "zero groups: success, nothing written");
}

static void test_validation(cublasHandle_t h) {
    const float zeros[64] = {0};
    dev da(zeros, sizeof zeros), db(zeros, sizeof zeros), dc(zeros, sizeof zeros);
    const float alpha = 1, beta = 0;
    auto gemm = [&](cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda,
                    int ldb, int ldc, cudaDataType at, cudaDataType bt, cudaDataType ct,
                    cublasComputeType_t compute) {
        return cublasGemmEx(h, ta, tb, m, n, k, &alpha, da.p, at, lda, db.p, bt, ldb, &beta, dc.p,
                            ct, ldc, compute, CUBLAS_GEMM_DEFAULT);
    };
    const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    const cudaDataType F = CUDA_R_32F, H = CUDA_R_16BF;
    const cublasComputeType_t C32 = CUBLAS_COMPUTE_32F;
    const cublasStatus_t ok = CUBLAS_STATUS_SUCCESS, inval = CUBLAS_STATUS_INVALID_VALUE,
                         unsup = CUBLAS_STATUS_NOT_SUPPORTED;
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 4, F, F, F, C32) == ok, "valid call");
    CHECK(gemm(N, N, -1, 3, 2, 4, 2, 4, F, F, F, C32) == inval, "m < 0");
    CHECK(gemm(N, N, 4, -3, 2, 4, 2, 4, F, F, F, C32) == inval, "n < 0");
    CHECK(gemm(N, N, 4, 3, -2, 4, 2, 4, F, F, F, C32) == inval, "k < 0");
    CHECK(gemm(N, N, 4, 3, 2, 3, 2, 4, F, F, F, C32) == inval, "lda < m (N)");
    CHECK(gemm(T, N, 4, 3, 2, 1, 2, 4, F, F, F, C32) == inval, "lda < k (T)");
    CHECK(gemm(T, N, 4, 3, 2, 2, 2, 4, F, F, F, C32) == ok, "lda = k (T)");
    CHECK(gemm(N, N, 4, 3, 2, 4, 1, 4, F, F, F, C32) == inval, "ldb < k (N)");
    CHECK(gemm(N, T, 4, 3, 2, 4, 2, 4, F, F, F, C32) == inval, "ldb < n (T)");
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 3, F, F, F, C32) == inval, "ldc < m");
    CHECK(gemm(N, N, 0, 3, 2, 0, 2, 0, F, F, F, C32) == inval, "ld 0 with m = 0");
    CHECK(gemm(CUBLAS_OP_CONJG, N, 4, 3, 2, 4, 2, 4, F, F, F, C32) == inval, "CONJG");
    /* type combinations real cuBLAS rejects */
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 4, F, F, H, C32) == unsup, "fp32 in, bf16 out");
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 4, F, H, F, C32) == unsup, "A fp32, B bf16");
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 4, H, H, H, CUBLAS_COMPUTE_32F_FAST_TF32) == unsup,
          "bf16 with FAST_TF32");
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 4, F, F, F, CUBLAS_COMPUTE_16F) == unsup, "fp32 with 16F");
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 4, H, H, H, CUBLAS_COMPUTE_64F) == unsup, "bf16 with 64F");
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 4, H, H, F, C32) == ok, "bf16 in, fp32 out");
    CHECK(gemm(N, N, 4, 3, 2, 4, 2, 4, H, H, H, C32) == ok, "bf16 in, bf16 out");
    CHECK(cublasGemmEx(nullptr, N, N, 1, 1, 1, &alpha, da.p, F, 1, db.p, F, 1, &beta, dc.p, F, 1,
                       C32, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_INITIALIZED,
          "NULL handle");
    CHECK(cublasGemmEx(h, N, N, 1, 1, 1, &alpha, nullptr, F, 1, db.p, F, 1, &beta, dc.p, F, 1, C32,
                       CUBLAS_GEMM_DEFAULT) == inval,
          "NULL A");
    CHECK(cublasGemmStridedBatchedEx(h, N, N, 1, 1, 1, &alpha, da.p, F, 1, 1, db.p, F, 1, 1, &beta,
                                     dc.p, F, 1, 1, -1, C32, CUBLAS_GEMM_DEFAULT) == inval,
          "negative batch");
}

static void test_handle(void) {
    cublasHandle_t h = nullptr;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS && h, "create");
    cudaStream_t s = nullptr, got = (cudaStream_t)0x1;
    CUDA_CHECK(cudaStreamCreate(&s));
    CHECK(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS, "set stream");
    CHECK(cublasGetStream(h, &got) == CUBLAS_STATUS_SUCCESS && got == s, "get stream");
    cublasMath_t mode = CUBLAS_TF32_TENSOR_OP_MATH;
    CHECK(cublasGetMathMode(h, &mode) == CUBLAS_STATUS_SUCCESS && mode == CUBLAS_DEFAULT_MATH,
          "default math mode");
    CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS &&
              cublasGetMathMode(h, &mode) == CUBLAS_STATUS_SUCCESS && mode == CUBLAS_PEDANTIC_MATH,
          "pedantic math mode");
    CHECK(cublasSetMathMode(h, (cublasMath_t)5) == CUBLAS_STATUS_INVALID_VALUE, "bad math mode");
    alignas(256) static unsigned char ws[1024];
    CHECK(cublasSetWorkspace(h, ws, sizeof ws) == CUBLAS_STATUS_SUCCESS, "aligned workspace");
    CHECK(cublasSetWorkspace(h, ws + 8, 512) == CUBLAS_STATUS_INVALID_VALUE,
          "misaligned workspace");
    cublasPointerMode_t pm = CUBLAS_POINTER_MODE_DEVICE;
    CHECK(cublasGetPointerMode(h, &pm) == CUBLAS_STATUS_SUCCESS && pm == CUBLAS_POINTER_MODE_HOST,
          "host pointer mode by default");
    CHECK(strlen(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)) > 0, "status string");
    CHECK(strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") ==
              0,
          "status name");
    CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS, "destroy");
    int ma = -1, mi = -1, pa = -1;
    CHECK(cublasGetProperty(MAJOR_VERSION, &ma) == CUBLAS_STATUS_SUCCESS &&
              cublasGetProperty(MINOR_VERSION, &mi) == CUBLAS_STATUS_SUCCESS &&
              cublasGetProperty(PATCH_LEVEL, &pa) == CUBLAS_STATUS_SUCCESS &&
              ma * 10000 + mi * 100 + pa == CUBLAS_VERSION,
          "cublasGetProperty gives the header's version, without a handle");
    CUDA_CHECK(cudaStreamDestroy(s));
    CHECK(cublasDestroy(nullptr) == CUBLAS_STATUS_NOT_INITIALIZED, "destroy NULL");
    CHECK(cublasCreate(nullptr) == CUBLAS_STATUS_INVALID_VALUE, "create into NULL");
}

/* ---- faults, each in a child process --------------------------------------------------------
 * A call that hands the GPU memory it cannot address aborts with the emulator's fault message;
 * each case's twin with device memory must run clean, so that the checks cannot pass for the
 * wrong reason. */

static int run_case(const char *name) {
    cublasHandle_t h;
    const cublasStatus_t created = cublasCreate(&h);
    if (strcmp(name, "no_device") == 0) /* run with SLUICE_EMU_DEVICES=0 */
        return created == CUBLAS_STATUS_NOT_INITIALIZED ? 0 : 1;
    if (created != CUBLAS_STATUS_SUCCESS) return 2;
    const float alpha = 1, beta = 0;
    float host[16] = {0};
    dev d(host, sizeof host);
    float *dp = (float *)d.p;
    const bool fault = strncmp(name, "fixed_", 6) != 0;
    const char *what = fault ? name : name + 6;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (strcmp(what, "host_matrix") == 0) { /* A in host memory */
        st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, fault ? host : dp,
                          CUDA_R_32F, 2, dp, CUDA_R_32F, 2, &beta, dp + 8, CUDA_R_32F, 2,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else if (strcmp(what, "past_end") == 0) { /* C [2 x 4] with ldc 4 from element 4: 18 > 16 */
        st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 4, 1, &alpha, dp, CUDA_R_32F, 2, dp,
                          CUDA_R_32F, 1, &beta, dp + (fault ? 4 : 2), CUDA_R_32F, 4,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else if (strcmp(what, "host_pointer_array") == 0) { /* Aarray in host memory */
        const void *hp[1] = {dp};
        dev dhp(hp, sizeof hp);
        const cublasOperation_t op = CUBLAS_OP_N;
        const int one = 1;
        const void *const *aa = fault ? hp : (const void *const *)dhp.p;
        st = cublasGemmGroupedBatchedEx(h, &op, &op, &one, &one, &one, &alpha, aa, CUDA_R_32F, &one,
                                        (const void *const *)dhp.p, CUDA_R_32F, &one, &beta,
                                        (void *const *)dhp.p, CUDA_R_32F, &one, 1, &one,
                                        CUBLAS_COMPUTE_32F);
    } else if (strcmp(what, "host_alpha_device_mode") == 0) { /* device mode, host alpha */
        const float one[2] = {1, 0};
        dev dab(one, sizeof one);
        cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE);
        st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, fault ? &alpha : (float *)dab.p, dp,
                          CUDA_R_32F, 2, dp, CUDA_R_32F, 2, (float *)dab.p + 1, dp + 8, CUDA_R_32F,
                          2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else {
        return 3;
    }
    cublasDestroy(h);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : 4;
}

static void expect_fault(const char *self, const char *name, const char *needle) {
    const emu_child r = emu_run_child(self, name);
    CHECK(r.signal == SIGABRT && emu_has(r, needle) && emu_has(r, "not inside one allocation"),
          "case %s: want an abort naming %s, got exit %d signal %d: %s", name, needle, r.code,
          r.signal, r.err.c_str());
    const std::string fixed = std::string("fixed_") + name;
    const emu_child f = emu_run_child(self, fixed.c_str());
    CHECK(f.exited && f.code == 0, "case %s: exit %d signal %d: %s", fixed.c_str(), f.code,
          f.signal, f.err.c_str());
}

int main(int argc, char **argv) {
    if (argc > 1) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        return run_case(argv[1]);
    }
    test_handle();
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "FAIL: cublasCreate\n");
        return 1;
    }
    test_gemm_ex(h);
    test_bf16_rounding(h);
    test_tf32(h);
    test_strided_and_batched(h);
    test_grouped(h, CUDA_R_32F);
    test_grouped(h, CUDA_R_16BF);
    test_grouped_refusals(h);
    test_validation(h);
    cublasDestroy(h);
    expect_fault(argv[0], "host_matrix", "matrix A");
    expect_fault(argv[0], "past_end", "matrix C");
    expect_fault(argv[0], "host_pointer_array", "the A pointer array");
    expect_fault(argv[0], "host_alpha_device_mode", "alpha");
    const char *no_gpu[] = {"SLUICE_EMU_DEVICES=0", nullptr};
    const emu_child r = emu_run_child(argv[0], "no_device", no_gpu);
    CHECK(r.exited && r.code == 0, "cublasCreate without a GPU: exit %d: %s", r.code,
          r.err.c_str());
    return emu_finish("test_cublas_emu");
}
