/*
 * tests/test_attention_cudnn.c - the "cudnn" attention kernel (cuDNN's fused SDPA with sluice's
 * gate around it: attention/attn_cudnn.cu, attention/cudnn_sdpa.c) against the CPU backend,
 * forward and backward through sl_op_gated_attn_fwd / sl_op_gated_attn_bwd on a CUDA backend whose
 * attention.kernel is "cudnn": causal attention, GQA ratios 1, 2 and 8, head dims 64 and 128, the
 * three gate modes, two sequences per batch, and sequence lengths off cuDNN's 128-row tiles where
 * the loaded cuDNN takes them (9.16 and later). Inputs are generated in fp32 and rounded to bf16;
 * the CPU computes in fp32 on the rounded values. The backward's saved o (rounded to bf16) and lse
 * come from the CPU forward on both sides, so the backward is compared on equal inputs; a second
 * backward starts from the cudnn forward's own o and lse (the pair training runs).
 *
 * usage: test_attention_cudnn [CUDNN_LIBRARY]
 * Label gpu: needs a GPU and libcudnn 9 (found as sl_cudnn_open finds it: SLUICE_CUDNN_LIBRARY, or
 * libcudnn.so.9 on the loader's path). Skipped (77, missing hardware) without a CUDA backend or
 * without a loadable cuDNN, CI included; the reason is printed. The emulated build also runs it
 * (test_attention_cudnn_emu, label cuda) with CUDNN_LIBRARY = emu's cuDNN test double
 * (emu/cudnn/cudnn_emu.c), which interprets the graph on the CPU: that checks everything of the
 * path but what only a real cuDNN can say (that its fused engine takes the graph).
 */
#include <stdlib.h>
#include <string.h>

#include "attention/cudnn_sdpa.h"
#include "tests/test_util.h"

/* Tolerances relative to max |reference| (taken as at least REF_FLOOR), as test_attention_tc.c:
 * bf16 outputs round by 2^-9; cuDNN, like FlashAttention-2, rounds P and dS to bf16 as matmul
 * operands, and the gate kernels read the bf16 O. */
#define TOL_FWD   1e-2
#define TOL_BWD   2e-2
#define REF_FLOOR 1e-2

static sl_backend *g_gpu;

typedef struct {
    int b, s, h, kv, d;
    sl_gate_mode mode;
    bool any_len; /* S is not a multiple of 128: needs cuDNN 9.16 or later */
} ccase;

static const ccase k_cases[] = {
    {2, 128, 2, 1, 64, SL_GATE_ELEMENTWISE, false}, /* GQA 2, two sequences */
    {1, 256, 2, 2, 128, SL_GATE_HEADWISE, false},   /* GQA 1 */
    {1, 128, 8, 1, 64, SL_GATE_NONE, false},        /* GQA 8 */
    {1, 384, 8, 1, 128, SL_GATE_ELEMENTWISE, false},
    {2, 256, 4, 2, 64, SL_GATE_HEADWISE, false},
    {1, 128, 4, 4, 128, SL_GATE_NONE, false},
    {2, 100, 2, 1, 64, SL_GATE_ELEMENTWISE, true}, /* partial tiles */
    {1, 130, 8, 1, 128, SL_GATE_HEADWISE, true},
    {1, 37, 4, 2, 64, SL_GATE_NONE, true},
};

static void compare(const char *lbl, const char *what, const float *got, const float *want,
                    int64_t n, double tol) {
    const double e = sl_test_rel_err(got, want, n, REF_FLOOR);
    printf("  %-40s %-7s err/max|ref| %.3g\n", lbl, what, e);
    CHECK(e <= tol, "%s %s: the cudnn kernel differs from the CPU (%.3g > %.3g of max |ref|)", lbl,
          what, e, tol);
}

static void run_case(const ccase *c) {
    const int64_t t = (int64_t)c->b * c->s, nq = t * c->h * c->d, nk = t * c->kv * c->d;
    const int64_t gw = c->mode == SL_GATE_ELEMENTWISE ? c->d : 1;
    const bool gated = c->mode != SL_GATE_NONE;
    const float scale = (float)(1.0 / sqrt((double)c->d));
    char lbl[96];
    snprintf(lbl, sizeof lbl, "B%d S%d H%d KV%d D%d %s", c->b, c->s, c->h, c->kv, c->d,
             sl_gate_mode_name(c->mode));

    float *q = sl_test_normal_bf16(nq, 1.5f, 41), *k = sl_test_normal_bf16(nk, 1.5f, 42),
          *v = sl_test_normal_bf16(nk, 1.0f, 43);
    float *g = gated ? sl_test_normal_bf16(t * c->h * gw, 1.5f, 44) : NULL,
          *dy = sl_test_normal_bf16(nq, 1.0f, 45);

    sl_test_attn_ref ref;
    sl_test_attn_reference(&ref, c->b, c->s, c->h, c->kv, c->d, (int)gw, q, k, v, g, dy, NULL,
                           scale);
    float *ry = ref.y, *ro = ref.o, *rl = ref.lse, *rg[4] = {ref.dq, ref.dk, ref.dv, ref.dg};

    /* cudnn, bf16 */
    sl_backend *be = g_gpu;
    sl_tensor *gq = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, q),
              *gk = sl_test_tensor3(be, SL_BF16, t, c->kv, c->d, k);
    sl_tensor *gv = sl_test_tensor3(be, SL_BF16, t, c->kv, c->d, v),
              *gdy = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, dy);
    sl_tensor *gg = gated ? sl_test_tensor3(be, SL_BF16, t, c->h, gw, g) : NULL;
    sl_tensor *gy = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, NULL),
              *go = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, NULL);
    sl_tensor *gl = sl_test_matrix(be, SL_F32, t, c->h, NULL);
    sl_op_gated_attn_fwd(gy, go, gl, gq, gk, gv, gg, NULL, c->b, c->s, scale);
    const char *ran = sl_backend_attn_kernel_ran(be);
    CHECK(ran && strcmp(ran, "cudnn") == 0, "%s: kernel %s ran, expected cudnn", lbl,
          ran ? ran : "(none)");
    const sl_tensor *fwd[3] = {gy, go, gl};
    static const char *const fwd_names[3] = {"y", "o", "lse"};
    const float *fwd_ref[3] = {ry, ro, rl};
    const int64_t fwd_n[3] = {nq, nq, t * c->h};
    for (int i = 0; i < 3; i++) {
        float *got = sl_test_host_floats(fwd[i]);
        compare(lbl, fwd_names[i], got, fwd_ref[i], fwd_n[i], TOL_FWD);
        free(got);
    }
    /* the backward from the CPU's o and lse, then from cudnn's own */
    sl_tensor *go2 = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, ro),
              *gl2 = sl_test_ftensor(be, SL_F32, t, c->h, rl);
    sl_tensor *gdq = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, NULL),
              *gdk = sl_test_tensor3(be, SL_BF16, t, c->kv, c->d, NULL);
    sl_tensor *gdv = sl_test_tensor3(be, SL_BF16, t, c->kv, c->d, NULL);
    sl_tensor *gdg = gated ? sl_test_tensor3(be, SL_BF16, t, c->h, gw, NULL) : NULL;
    const sl_tensor *outs[4] = {gdq, gdk, gdv, gdg};
    static const char *const names[4] = {"dq", "dk", "dv", "dg"};
    const int64_t ns[4] = {nq, nk, nk, t * c->h * gw};
    for (int pass = 0; pass < 2; pass++) {
        sl_op_gated_attn_bwd(gdq, gdk, gdv, gdg, gdy, gq, gk, gv, gg, NULL, pass ? go : go2,
                             pass ? gl : gl2, c->b, c->s, scale);
        for (int i = 0; i < 4; i++) {
            if (!outs[i]) continue;
            char what[16];
            snprintf(what, sizeof what, "%s%s", names[i], pass ? " (own)" : "");
            float *got = sl_test_host_floats(outs[i]);
            compare(lbl, what, got, rg[i], ns[i], pass ? 2 * TOL_BWD : TOL_BWD);
            free(got);
        }
    }
    sl_test_attn_ref_free(&ref);
    free(q), free(k), free(v), free(g), free(dy);
    sl_test_release();
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2) {
        fprintf(stderr, "usage: test_attention_cudnn [CUDNN_LIBRARY]\n");
        return 2;
    }
    if (argc == 2)
        setenv("SLUICE_CUDNN_LIBRARY", argv[1], 1); /* e.g. the emulated build's double */
    /* cuDNN's backward is nondeterministic, which the cudnn choice requires to be allowed */
    const sl_backend_params p = {.device = -1, .allow_nondeterministic = true};
    g_gpu = sl_test_cuda_or_skip(&p);
#ifdef SLUICE_CUDA_EMULATED
    if (!getenv("SLUICE_CUDNN_LIBRARY")) {
        printf("SKIP: the emulated build has no cuDNN (a GPU with libcudnn 9 runs this test)\n");
        sl_backend_free(g_gpu);
        return 77;
    }
#endif
    char err[1024];
    if (sl_backend_set_attn_kernel(g_gpu, "cudnn", err, sizeof err) != 0) {
        printf("SKIP: attention.kernel = cudnn: %s\n", err);
        sl_backend_free(g_gpu);
        return 77;
    }
    /* which shapes this cuDNN takes (older ones want S % 128 == 0); a build without the CUDA
     * backend has no cuDNN loader (and stopped above: no cuda backend there) */
#ifdef SLUICE_WITH_CUDA
    sl_cudnn *probe = sl_cudnn_open(err, sizeof err);
    CHECK(probe != NULL, "cuDNN loaded for the backend but not a second time: %s", err);
    const long version = probe ? sl_cudnn_version(probe) : 0;
    if (probe) sl_cudnn_close(probe);
#else
    const long version = 0;
#endif
    printf("cuDNN %ld\n", version);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        if (k_cases[i].any_len && version < 91600) {
            printf("  B%d S%d: needs cuDNN 9.16 or later (S not a multiple of 128), not run\n",
                   k_cases[i].b, k_cases[i].s);
            continue;
        }
        run_case(&k_cases[i]);
    }
    sl_backend_free(g_gpu);
    return sl_test_finish("test_attention_cudnn");
}
