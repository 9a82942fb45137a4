/*
 * tests/test_attention_cuda.c - the CUDA gated-attention kernels against the CPU backend on
 * shapes the conformance test (tests/test_backend_ops.c: sequences <= 130, D = 128 only at
 * S = 33) does not reach: sequences of 200-512 tokens, so that the GPU's 32- and 16-row tiles
 * and the CPU's 64-row tiles cross many key tiles and the online softmax rescales many times,
 * at the head dims the kernels specialize (64, 128), and at one above 128, which runs in
 * head-dim chunks. Forward and backward, fp32 at the conformance test's fp32 tolerances and
 * bf16 (inputs and outputs in bf16, fp32 math) at its bf16 column; and the backward run twice
 * must give the same bits (the deterministic dQ and GQA reductions). The SIMT kernels take fp32
 * and the bf16 shape at D = 160; the bf16 shape at D = 128 goes to the tensor-core kernels
 * (tests/test_attention_tc.c covers those in depth). The backward's saved o
 * and lse come from the CPU forward, as in the conformance test, so both sides get equal inputs.
 * Skipped (77) in a build without the CUDA backend or on a machine without a GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

/* Tolerances: the gated_attn_fwd / gated_attn_bwd rows of k_tol in tests/test_backend_ops.c. */
static const struct {
    double atol, rtol;
} k_fwd[2] = {{2e-5, 1e-4}, {2e-2, 2e-2}}, k_bwd[2] = {{1e-4, 1e-4}, {5e-2, 5e-2}};

typedef struct {
    int b, s, h, kv, d;
    sl_gate_mode mode;
    sl_dtype dt;
} shape;

static const shape k_shapes[] = {
    {1, 512, 2, 1, 128, SL_GATE_ELEMENTWISE, SL_F32},  /* the paper's head dim, GQA 2 */
    {2, 300, 4, 2, 64, SL_GATE_HEADWISE, SL_F32},      /* partial last tiles, two sequences */
    {1, 200, 2, 2, 160, SL_GATE_NONE, SL_F32},         /* two head-dim chunks (128 + 32) */
    {1, 512, 2, 1, 128, SL_GATE_ELEMENTWISE, SL_BF16}, /* tensor cores */
    {1, 200, 2, 2, 160, SL_GATE_HEADWISE, SL_BF16},    /* bf16 on the SIMT kernels */
};

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; inputs are finite */
    return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Normal(0, std) values, rounded to bf16 when the case runs in bf16 (both sides see them). */
static float *gen(int64_t n, float std, uint64_t seed, sl_dtype dt) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    sl_test_fill_normal(x, n, std, seed);
    if (dt == SL_BF16)
        for (int64_t i = 0; i < n; i++) x[i] = bf16_value(bf16_bits(x[i]));
    return x;
}

static sl_tensor *upload(sl_backend *be, sl_dtype dt, const float *host, int64_t d0, int64_t d1,
                         int64_t d2) {
    sl_tensor *t = sl_tensor_new3(be, dt, d0, d1, d2);
    const int64_t n = d0 * d1 * d2;
    if (dt == SL_BF16) {
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) h[i] = bf16_bits(host[i]);
        sl_tensor_from_host(t, h);
        free(h);
    } else {
        sl_tensor_from_host(t, host);
    }
    return t;
}

static float *download(const sl_tensor *t) {
    const int64_t n = sl_tensor_numel(t);
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (sl_tensor_dtype(t) == SL_BF16) {
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
        sl_tensor_to_host(t, h);
        for (int64_t i = 0; i < n; i++) x[i] = bf16_value(h[i]);
        free(h);
    } else {
        sl_tensor_to_host(t, x);
    }
    return x;
}

/* Compares a CUDA output with the CPU's; frees the CUDA copy. */
static void compare(const char *what, const shape *s, float *got, const float *want, int64_t n,
                    double atol, double rtol) {
    char label[128];
    snprintf(label, sizeof label, "B%d/S%d/H%d/KV%d/D%d/%s/%s %s", s->b, s->s, s->h, s->kv, s->d,
             sl_gate_mode_name(s->mode), sl_dtype_name(s->dt), what);
    const double e = sl_test_compare(label, got, want, n, atol, rtol);
    printf("  %-48s err/tol %.3g\n", label, e);
    CHECK(e <= 1.0, "%s: CUDA differs from the CPU (err/tol %.3g)", label, e);
    free(got);
}

static void run_shape(sl_backend *cpu, sl_backend *gpu, const shape *s) {
    const int64_t t = (int64_t)s->b * s->s, nq = t * s->h * s->d, nk = t * s->kv * s->d;
    const int64_t dg = s->mode == SL_GATE_ELEMENTWISE ? s->d : 1;
    const bool gated = s->mode != SL_GATE_NONE;
    const float scale = (float)(1.0 / sqrt((double)s->d));
    const int bf = s->dt == SL_BF16;
    float *q = gen(nq, 1.5f, 11, s->dt), *k = gen(nk, 1.5f, 12, s->dt),
          *v = gen(nk, 1.0f, 13, s->dt);
    float *g = gated ? gen(t * s->h * dg, 1.5f, 14, s->dt) : NULL, *dy = gen(nq, 1.0f, 15, s->dt);

    /* CPU forward (fp32 on the rounded inputs): the reference, and the backward's saved values */
    sl_tensor *cq = upload(cpu, SL_F32, q, t, s->h, s->d),
              *ck = upload(cpu, SL_F32, k, t, s->kv, s->d);
    sl_tensor *cv = upload(cpu, SL_F32, v, t, s->kv, s->d);
    sl_tensor *cg = gated ? upload(cpu, SL_F32, g, t, s->h, dg) : NULL;
    sl_tensor *cy = sl_tensor_new3(cpu, SL_F32, t, s->h, s->d);
    sl_tensor *co = sl_tensor_new3(cpu, SL_F32, t, s->h, s->d);
    sl_tensor *cl = sl_tensor_new2(cpu, SL_F32, t, s->h);
    sl_op_gated_attn_fwd(cy, co, cl, cq, ck, cv, cg, NULL, s->b, s->s, scale);
    float *ry = sl_test_host_f32(cy), *ro = sl_test_host_f32(co), *rl = sl_test_host_f32(cl);

    /* CUDA forward */
    sl_tensor *gq = upload(gpu, s->dt, q, t, s->h, s->d),
              *gk = upload(gpu, s->dt, k, t, s->kv, s->d);
    sl_tensor *gv = upload(gpu, s->dt, v, t, s->kv, s->d);
    sl_tensor *gg = gated ? upload(gpu, s->dt, g, t, s->h, dg) : NULL;
    sl_tensor *gy = sl_tensor_new3(gpu, s->dt, t, s->h, s->d);
    sl_tensor *go = sl_tensor_new3(gpu, s->dt, t, s->h, s->d);
    sl_tensor *gl = sl_tensor_new2(gpu, SL_F32, t, s->h);
    sl_op_gated_attn_fwd(gy, go, gl, gq, gk, gv, gg, NULL, s->b, s->s, scale);
    compare("y", s, download(gy), ry, nq, k_fwd[bf].atol, k_fwd[bf].rtol);
    compare("o", s, download(go), ro, nq, k_fwd[bf].atol, k_fwd[bf].rtol);
    compare("lse", s, download(gl), rl, t * s->h, k_fwd[bf].atol, k_fwd[bf].rtol);

    /* Backward from the CPU's o (rounded to the dtype) and lse on both sides. */
    if (bf)
        for (int64_t i = 0; i < nq; i++) ro[i] = bf16_value(bf16_bits(ro[i]));
    sl_tensor_from_host(co, ro);
    sl_tensor *cdy = upload(cpu, SL_F32, dy, t, s->h, s->d);
    sl_tensor *cdq = sl_tensor_new3(cpu, SL_F32, t, s->h, s->d);
    sl_tensor *cdk = sl_tensor_new3(cpu, SL_F32, t, s->kv, s->d);
    sl_tensor *cdv = sl_tensor_new3(cpu, SL_F32, t, s->kv, s->d);
    sl_tensor *cdg = gated ? sl_tensor_new3(cpu, SL_F32, t, s->h, dg) : NULL;
    sl_op_gated_attn_bwd(cdq, cdk, cdv, cdg, cdy, cq, ck, cv, cg, NULL, co, cl, s->b, s->s, scale);

    sl_tensor *go2 = upload(gpu, s->dt, ro, t, s->h, s->d),
              *gdy = upload(gpu, s->dt, dy, t, s->h, s->d);
    sl_tensor_from_host(gl, rl);
    sl_tensor *gdq = sl_tensor_new3(gpu, s->dt, t, s->h, s->d);
    sl_tensor *gdk = sl_tensor_new3(gpu, s->dt, t, s->kv, s->d);
    sl_tensor *gdv = sl_tensor_new3(gpu, s->dt, t, s->kv, s->d);
    sl_tensor *gdg = gated ? sl_tensor_new3(gpu, s->dt, t, s->h, dg) : NULL;
    sl_op_gated_attn_bwd(gdq, gdk, gdv, gdg, gdy, gq, gk, gv, gg, NULL, go2, gl, s->b, s->s, scale);
    float *dq1 = download(gdq), *dk1 = download(gdk), *dv1 = download(gdv);
    float *rdq = sl_test_host_f32(cdq), *rdk = sl_test_host_f32(cdk), *rdv = sl_test_host_f32(cdv);
    compare("dq", s, download(gdq), rdq, nq, k_bwd[bf].atol, k_bwd[bf].rtol);
    compare("dk", s, download(gdk), rdk, nk, k_bwd[bf].atol, k_bwd[bf].rtol);
    compare("dv", s, download(gdv), rdv, nk, k_bwd[bf].atol, k_bwd[bf].rtol);
    if (gated) {
        float *rdg = sl_test_host_f32(cdg);
        compare("dg", s, download(gdg), rdg, t * s->h * dg, k_bwd[bf].atol, k_bwd[bf].rtol);
        free(rdg);
    }

    /* Determinism: the same call again, bit for bit. */
    if (s == &k_shapes[0]) {
        sl_op_gated_attn_bwd(gdq, gdk, gdv, gdg, gdy, gq, gk, gv, gg, NULL, go2, gl, s->b, s->s,
                             scale);
        float *dq2 = download(gdq), *dk2 = download(gdk), *dv2 = download(gdv);
        CHECK(memcmp(dq1, dq2, sizeof(float) * (size_t)nq) == 0 &&
                  memcmp(dk1, dk2, sizeof(float) * (size_t)nk) == 0 &&
                  memcmp(dv1, dv2, sizeof(float) * (size_t)nk) == 0,
              "the CUDA backward is not deterministic");
        free(dq2), free(dk2), free(dv2);
    }

    free(dq1), free(dk1), free(dv1), free(rdq), free(rdk), free(rdv);
    free(ry), free(ro), free(rl), free(q), free(k), free(v), free(g), free(dy);
    sl_tensor *all[] = {cq, ck,  cv,  cg,  cy,  co,  cl,  gq,  gk,  gv,  gg,  gy, go,
                        gl, cdy, cdq, cdk, cdv, cdg, go2, gdy, gdq, gdk, gdv, gdg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sl_tensor_free(all[i]);
}

/* Sizes the shapes above do not reach: empty tensors (nothing launched, or a scalar of 0) and
 * sizes past the kernels' grid caps, which then stride (sigmoid_mean's 512 blocks of 1024,
 * qgate's 65535 blocks of 8 rows when a row is one word). */
static void run_edges(sl_backend *cpu, sl_backend *gpu) {
    /* sigmoid_mean: empty, and 2^20 + 7 elements (1025 blocks' worth on a 512-block grid) */
    for (int e = 0; e < 2; e++) {
        const int64_t n = e ? (1 << 20) + 7 : 0;
        float *g = gen(n, 3.0f, 21, SL_F32);
        sl_tensor *cg = upload(cpu, SL_F32, g, 1, 1, n), *gg = upload(gpu, SL_F32, g, 1, 1, n);
        const double want = sl_test_op_scalar(sl_op_sigmoid_mean, cg);
        const double got = sl_test_op_scalar(sl_op_sigmoid_mean, gg);
        CHECK(fabs(got - want) <= 1e-6 + 1e-6 * fabs(want), "sigmoid_mean [%lld]: %.9g vs %.9g",
              (long long)n, got, want);
        sl_tensor_free(cg), sl_tensor_free(gg), free(g);
    }
    /* qgate split/merge, headwise with H = D = 1 (rows of two 4-byte words), 600000 rows */
    {
        const int64_t t = 600000;
        float *all = gen(2 * t, 1.0f, 22, SL_F32);
        sl_tensor *ga = upload(gpu, SL_F32, all, t, 1, 2);
        sl_tensor *gq = sl_tensor_new3(gpu, SL_F32, t, 1, 1),
                  *gg = sl_tensor_new3(gpu, SL_F32, t, 1, 1);
        sl_tensor_reshape(ga, 2, (int64_t[]){t, 2});
        sl_op_qgate_split(gq, gg, ga, SL_GATE_HEADWISE);
        float *q = download(gq), *g = download(gg);
        bool ok = true;
        for (int64_t i = 0; i < t; i++) ok &= q[i] == all[2 * i] && g[i] == all[2 * i + 1];
        CHECK(ok, "qgate_split over %lld rows", (long long)t);
        sl_tensor *gb = sl_tensor_new2(gpu, SL_F32, t, 2);
        sl_op_qgate_merge(gb, gq, gg, SL_GATE_HEADWISE);
        float *back = download(gb);
        CHECK(memcmp(back, all, sizeof(float) * (size_t)(2 * t)) == 0, "qgate_merge over %lld rows",
              (long long)t);
        sl_tensor_free(ga), sl_tensor_free(gq), sl_tensor_free(gg), sl_tensor_free(gb);
        free(all), free(q), free(g), free(back);
    }
    /* no tokens: qgate, rope and attention launch nothing and must not fail */
    {
        sl_tensor *q = sl_tensor_new3(gpu, SL_F32, 0, 2, 8),
                  *all = sl_tensor_new2(gpu, SL_F32, 0, 32);
        sl_tensor *g = sl_tensor_new3(gpu, SL_F32, 0, 2, 8), *l = sl_tensor_new2(gpu, SL_F32, 0, 2);
        sl_tensor *pos = sl_tensor_new1(gpu, SL_I32, 0), *f = sl_tensor_new1(gpu, SL_F32, 4);
        sl_op_qgate_split(q, g, all, SL_GATE_ELEMENTWISE);
        sl_op_qgate_merge(all, q, g, SL_GATE_ELEMENTWISE);
        sl_op_rope_fwd(q, pos, f, 1.0f);
        sl_op_gated_attn_fwd(g, g, l, q, q, q, NULL, NULL, 0, 7, 0.5f);
        sl_op_gated_attn_bwd(q, q, q, NULL, q, q, q, q, NULL, NULL, q, l, 0, 7, 0.5f);
        sl_backend_synchronize(gpu);
        sl_tensor_free(q), sl_tensor_free(all), sl_tensor_free(g), sl_tensor_free(l);
        sl_tensor_free(pos), sl_tensor_free(f);
    }
    printf("  edge cases (empty tensors, grid-stride sizes) done\n");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const sl_backend_params p = {.device = -1}; /* deterministic (the default) */
    sl_backend *gpu = sl_test_cuda_or_skip(&p);
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        run_shape(sl_test_cpu(), gpu, &k_shapes[i]);
    run_edges(sl_test_cpu(), gpu);
    sl_backend_free(gpu);
    return sl_test_finish("test_attention_cuda");
}
