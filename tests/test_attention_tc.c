/*
 * tests/test_attention_tc.c - the tensor-core gated attention (bf16, head dims 64 and 128,
 * attention/gated_attn_tc_*.cu) against the CPU backend, forward and backward through
 * sl_op_gated_attn_fwd / sl_op_gated_attn_bwd: GQA ratios 1, 2 and 8, the three gate modes,
 * sequence lengths off the 64-row tiles (100, 130), one-token sequences, two sequences per
 * batch, 260-520 tokens (many pipelined steps per block, rings that wrap), and document masking
 * with documents of length 1 (also all of them) and documents longer than a tile. Inputs are
 * generated in fp32 and rounded to bf16; the CPU computes in fp32 on the rounded values, the GPU on
 * bf16 tensors. The backward's saved o (rounded to bf16) and lse come from the CPU forward on both
 * sides, so the backward is compared on equal inputs.
 *
 * usage: test_attention_tc [deterministic|atomic] [sm90]
 *   deterministic (default): backend.deterministic = true, the separate dQ kernel; the backward
 *     run twice must also give identical bits. With SLUICE_TEST_SECOND_RUN_ENV=NAME=VALUE the
 *     second run has NAME set to VALUE (the kernels read their variables at every backward): a
 *     variant that must not change a bit (a schedule, not a sum order) is compared bitwise with
 *     the default.
 *   atomic: allow_nondeterministic, dQ summed with fp32 atomics in the dK/dV kernel. Its
 *     summation order depends on the block schedule, so under the SIMT emulator the test is
 *     registered with SLUICE_EMU_RACECHECK=0 (the race check replays every launch in a second
 *     thread order and would, rightly, report the order-dependent sums).
 *   sm90: the Hopper kernel "sm90" (attention/gated_attn_sm90_*.cu: wgmma, TMA, warp
 *     specialization) instead of the mma.sync kernel "mma"; skipped (77) on a GPU that cannot run
 *     it. Either is chosen by name (sl_backend_set_attn_kernel), so a Hopper GPU tests "mma" too,
 *     and every case checks that it ran (sl_backend_attn_kernel_ran). Its dK/dV pass splits the
 *     GQA group over blocks (attention/gated_attn_sm90_bwd.cu, choose_hsplit): at these small
 *     shapes "auto" takes one head per block (fp32 partials, then the ordered reduce);
 *     tests/attention.cmake also runs it with SLUICE_ATTN_SM90_HSPLIT=1 (no split, bf16 written
 *     directly) and =2 (chunks of 2 or 4 heads).
 * Skipped (77) in a build without the CUDA backend or on a machine without a GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"
#ifdef SLUICE_WITH_CUDA
#include "attention/kernels_cuda.h"
#endif

/* Tolerances, relative to the largest |reference| of each output: max |got - ref| <= tol *
 * max |ref|. bf16 outputs alone round by up to 2^-9 of their value; the backward also rounds P
 * and dS to bf16 as MMA operands (FlashAttention-2 does the same), and dO to bf16 as stored. */
#define TOL_FWD 1e-2
#define TOL_BWD 2e-2
/* ... with max |ref| taken as at least REF_FLOOR: where every query sees only itself (one-token
 * sequences, one-token documents) dq and dk vanish in exact arithmetic (P = 1, dP = Di) and both
 * sides hold rounding noise (~1e-6 measured); elsewhere these outputs are O(1). A leaked or lost
 * key moves them by far more than TOL_BWD * REF_FLOOR = 2e-4. */
#define REF_FLOOR 1e-2

static sl_backend *g_gpu;
static bool g_atomic;
static const char *g_kernel = "mma"; /* the attention kernel under test, by name */

typedef struct {
    int b, s, h, kv, d;
    sl_gate_mode mode;
    const int *docs; /* document lengths of each sequence, 0-terminated; NULL: one document */
} acase;

static const int k_docs_mixed[] = {1, 5, 1, 40, 1, 1, 30, 21, 0}; /* sums to 100 */
static const int k_docs_tiles[] = {3, 60, 1, 66, 0};              /* crosses tiles; 130 */
static const int k_docs_long[] = {150, 200, 50, 0}; /* longer than tiles: whole tiles skipped */

static const acase k_cases[] = {
    {2, 100, 2, 1, 64, SL_GATE_ELEMENTWISE, NULL}, /* GQA 2, partial tile, two sequences */
    {1, 130, 2, 2, 128, SL_GATE_HEADWISE, NULL},   /* GQA 1, three tiles */
    {1, 70, 8, 1, 64, SL_GATE_NONE, NULL},         /* GQA 8 */
    {2, 1, 2, 1, 128, SL_GATE_ELEMENTWISE, NULL},  /* one-token sequences */
    {2, 1, 8, 1, 64, SL_GATE_HEADWISE, NULL},
    {2, 100, 4, 2, 64, SL_GATE_HEADWISE, k_docs_mixed}, /* documents of length 1 */
    {1, 130, 2, 1, 128, SL_GATE_ELEMENTWISE, k_docs_tiles},
    {1, 37, 2, 1, 128, SL_GATE_NONE, (const int[]){-1}}, /* every document one token */
    {1, 300, 4, 1, 64, SL_GATE_ELEMENTWISE, NULL},       /* many query steps per key tile: the */
    {1, 260, 4, 2, 128, SL_GATE_HEADWISE, NULL},         /* double buffers cycle, GQA 4 and 2 */
    /* five key tiles of 128: the Hopper forward's three-stage ring (D = 64) wraps */
    {1, 520, 2, 1, 64, SL_GATE_ELEMENTWISE, NULL},
    /* documents starting past a tile of 128: the forward and dQ skip whole key tiles, the
     * dK/dV pass stops before whole query tiles */
    {1, 400, 2, 2, 128, SL_GATE_HEADWISE, k_docs_long},
    /* GQA 8 with documents crossing a tile of 128, S off the tiles: the Hopper dK/dV pass's
     * group split (hsplit) at its largest, a chunk per head, and in chunks of 4 or 2 heads */
    {1, 200, 8, 1, 128, SL_GATE_ELEMENTWISE, k_docs_long},
};

static void compare(const char *lbl, const char *what, const float *got, const float *want,
                    int64_t n, double tol) {
    const double e = sl_test_rel_err(got, want, n, REF_FLOOR);
    printf("  %-44s %-3s err/max|ref| %.3g\n", lbl, what, e);
    CHECK(e <= tol, "%s %s: tensor-core result differs from the CPU (%.3g > %.3g of max |ref|)",
          lbl, what, e, tol);
}

static void run_case(const acase *c) {
    const int64_t t = (int64_t)c->b * c->s, nq = t * c->h * c->d, nk = t * c->kv * c->d;
    const int64_t gw = c->mode == SL_GATE_ELEMENTWISE ? c->d : 1;
    const bool gated = c->mode != SL_GATE_NONE;
    const float scale = (float)(1.0 / sqrt((double)c->d));
    char lbl[96];
    snprintf(lbl, sizeof lbl, "B%d S%d H%d KV%d D%d %s%s", c->b, c->s, c->h, c->kv, c->d,
             sl_gate_mode_name(c->mode), c->docs ? " docs" : "");

    float *q = sl_test_normal_bf16(nq, 1.5f, 31), *k = sl_test_normal_bf16(nk, 1.5f, 32),
          *v = sl_test_normal_bf16(nk, 1.0f, 33);
    float *g = gated ? sl_test_normal_bf16(t * c->h * gw, 1.5f, 34) : NULL,
          *dy = sl_test_normal_bf16(nq, 1.0f, 35);
    int32_t *seg = NULL;
    if (c->docs) {
        seg = malloc(sizeof(int32_t) * (size_t)t);
        for (int r = 0; r < c->b; r++) {
            int start = 0, len = 0, idx = 0;
            for (int i = 0; i < c->s; i++) {
                if (len == 0) { /* a new document: the next length (or 1 for {-1}) */
                    start = i;
                    len = c->docs[0] < 0 ? 1 : c->docs[idx] ? c->docs[idx++] : c->s - i;
                }
                seg[(int64_t)r * c->s + i] = start;
                len--;
            }
        }
    }

    /* CPU reference: forward, then backward from its own o (rounded to bf16) and lse. */
    sl_test_attn_ref ref;
    sl_test_attn_reference(&ref, c->b, c->s, c->h, c->kv, c->d, (int)gw, q, k, v, g, dy, seg,
                           scale);
    float *ry = ref.y, *ro = ref.o, *rl = ref.lse, *rg[4] = {ref.dq, ref.dk, ref.dv, ref.dg};

    /* GPU, bf16 */
    sl_backend *be = g_gpu;
    sl_tensor *gq = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, q),
              *gk = sl_test_tensor3(be, SL_BF16, t, c->kv, c->d, k);
    sl_tensor *gv = sl_test_tensor3(be, SL_BF16, t, c->kv, c->d, v),
              *gdy = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, dy);
    sl_tensor *gg = gated ? sl_test_tensor3(be, SL_BF16, t, c->h, gw, g) : NULL;
    sl_tensor *gs = seg ? sl_test_matrix(be, SL_I32, t, 1, seg) : NULL;
    sl_tensor *gy = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, NULL),
              *go = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, NULL);
    sl_tensor *gl = sl_test_matrix(be, SL_F32, t, c->h, NULL);
    sl_op_gated_attn_fwd(gy, go, gl, gq, gk, gv, gg, gs, c->b, c->s, scale);
    if (!g_atomic) { /* the forward does not depend on the dQ mode: compare it once */
        const sl_tensor *fwd[3] = {gy, go, gl};
        static const char *const fwd_names[3] = {"y", "o", "lse"};
        const float *fwd_ref[3] = {ry, ro, rl};
        const int64_t fwd_n[3] = {nq, nq, t * c->h};
        for (int i = 0; i < 3; i++) {
            float *got = sl_test_host_floats(fwd[i]);
            compare(lbl, fwd_names[i], got, fwd_ref[i], fwd_n[i], TOL_FWD);
            free(got);
        }
    }
    sl_tensor *go2 = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, ro),
              *gl2 = sl_test_ftensor(be, SL_F32, t, c->h, rl);
    sl_tensor *gdq = sl_test_tensor3(be, SL_BF16, t, c->h, c->d, NULL),
              *gdk = sl_test_tensor3(be, SL_BF16, t, c->kv, c->d, NULL);
    sl_tensor *gdv = sl_test_tensor3(be, SL_BF16, t, c->kv, c->d, NULL);
    sl_tensor *gdg = gated ? sl_test_tensor3(be, SL_BF16, t, c->h, gw, NULL) : NULL;
    sl_op_gated_attn_bwd(gdq, gdk, gdv, gdg, gdy, gq, gk, gv, gg, gs, go2, gl2, c->b, c->s, scale);
    const sl_tensor *outs[4] = {gdq, gdk, gdv, gdg};
    static const char *const names[4] = {"dq", "dk", "dv", "dg"};
    const int64_t ns[4] = {nq, nk, nk, t * c->h * gw};
    float *first[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++) {
        if (!outs[i]) continue;
        first[i] = sl_test_host_floats(outs[i]);
        compare(lbl, names[i], first[i], rg[i], ns[i], TOL_BWD);
    }
    if (!g_atomic) { /* deterministic mode: the same bits again (with the variant, if any) */
        const char *variant = getenv("SLUICE_TEST_SECOND_RUN_ENV");
        char name[128] = "";
        if (variant && *variant) {
            const char *eq = strchr(variant, '=');
            const bool ok = eq && eq != variant && (size_t)(eq - variant) < sizeof name;
            CHECK(ok, "SLUICE_TEST_SECOND_RUN_ENV=%s: expected NAME=VALUE", variant);
            if (ok) {
                memcpy(name, variant, (size_t)(eq - variant));
                name[eq - variant] = '\0';
                const bool set = getenv(name) != NULL;
                CHECK(!set, "SLUICE_TEST_SECOND_RUN_ENV: %s is already set", name);
                if (set)
                    name[0] = '\0'; /* leave the user's value alone */
                else
                    setenv(name, eq + 1, 1);
            }
        }
        sl_op_gated_attn_bwd(gdq, gdk, gdv, gdg, gdy, gq, gk, gv, gg, gs, go2, gl2, c->b, c->s,
                             scale);
        if (name[0]) unsetenv(name);
        for (int i = 0; i < 4; i++) {
            if (!outs[i]) continue;
            float *again = sl_test_host_floats(outs[i]);
            CHECK(memcmp(again, first[i], sizeof(float) * (size_t)ns[i]) == 0,
                  "%s %s: the deterministic backward gave different bits on a second run%s%s", lbl,
                  names[i], name[0] ? " with " : "", name[0] ? variant : "");
            free(again);
        }
    }
    /* the kernel under test ran (the last call: the backward) */
    const char *ran = sl_backend_attn_kernel_ran(be);
    CHECK(ran && strcmp(ran, g_kernel) == 0, "%s: the attention kernel \"%s\" ran, expected \"%s\"",
          lbl, ran ? ran : "(none)", g_kernel);
    for (int i = 0; i < 4; i++) free(first[i]);
    sl_test_attn_ref_free(&ref);
    free(q), free(k), free(v), free(g), free(dy), free(seg);
    sl_test_release();
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool bad = argc > 3;
    for (int i = 1; i < argc && !bad; i++) {
        if (strcmp(argv[i], "atomic") == 0 && i == 1)
            g_atomic = true;
        else if (strcmp(argv[i], "sm90") == 0 && i == argc - 1)
            g_kernel = "sm90";
        else
            bad = strcmp(argv[i], "deterministic") != 0 || i != 1;
    }
    if (bad) {
        fprintf(stderr, "usage: test_attention_tc [deterministic|atomic] [sm90]\n");
        return 2;
    }
    const sl_backend_params p = {.device = -1, .allow_nondeterministic = g_atomic};
    g_gpu = sl_test_cuda_or_skip(&p);
#ifdef SLUICE_WITH_CUDA
    if (strcmp(g_kernel, "sm90") == 0 && !sl_cuda_gated_attn_sm90_device()) {
        sl_backend_free(g_gpu);
        return sl_test_skip("this GPU cannot run the Hopper attention kernel (compute "
                            "capability 9.x with the sm_90a code)");
    }
#endif
    char err[256];
    CHECK(sl_backend_set_attn_kernel(g_gpu, g_kernel, err, sizeof err) == 0,
          "attention kernel \"%s\": %s", g_kernel, err);
    printf("dQ mode: %s; attention kernel: %s\n", g_atomic ? "atomic" : "deterministic", g_kernel);
#ifdef SLUICE_WITH_CUDA
    if (strcmp(g_kernel, "sm90") == 0 && !getenv("SLUICE_ATTN_SM90_HSPLIT")) {
        /* the dK/dV pass's group split at the paper's shapes on an H200's 132 SMs (B 1, KV 4,
         * GQA 8): 2 at S 4096 (measured 3% faster than 4 there, 2026-11-26), none at S 32768
         * (1,024 blocks fill the GPU evenly), 4 at S 2048 (the simulated schedule's best) */
        const int want[][4] = {
            {4096, 128, 2}, {4096, 64, 2}, {32768, 128, 1}, {32768, 64, 1}, {2048, 128, 4}};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const int got = sl_cuda_gated_attn_sm90_hsplit(1, want[i][0], 4, 8, want[i][1], 132);
            CHECK(got == want[i][2], "dK/dV split at S %d D %d: %d, expected %d", want[i][0],
                  want[i][1], got, want[i][2]);
        }
    }
#endif
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) run_case(&k_cases[i]);
    sl_backend_free(g_gpu);
    char name[64];
    snprintf(name, sizeof name, "test_attention_tc%s %s", g_atomic ? " atomic" : "", g_kernel);
    return sl_test_finish(name);
}
