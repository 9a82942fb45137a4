/*
 * tests/test_attention_kernels.c - which attention kernel runs (attention/attn_kernels.h,
 * sl_backend_set_attn_kernel): the choice "auto" and "sluice" take the Hopper kernel "sm90" for
 * bf16 at head dims 64 and 128 (with and without documents) on a GPU that can run it, the
 * tensor-core kernel "mma" there elsewhere and in the emulated build (SLUICE_ATTN_SM90 is unset
 * for the test), and the SIMT kernel "simt" for fp32 and other head dims; a kernel chosen by name
 * runs wherever it can ("sm90" also in the emulated build, whose device reports 9.0); an unknown
 * name, and "cudnn" where it cannot load (the emulated build, a node without libcudnn 9, or a
 * deterministic backend), fail with a message saying why and leave the previous choice in place;
 * the CPU backend takes "auto" and "sluice" only. Each choice is checked by running the forward and
 * asking the backend which kernel ran (sl_backend_attn_kernel_ran), and the outputs of every
 * kernel that ran are compared with the CPU backend (loosely: the numbers themselves are the
 * business of test_attention_tc, test_attention_cuda and attn_bench --check).
 *
 * usage: test_attention_kernels [CUDNN_LIBRARY]
 * Label cuda: runs in the emulated build (CI) and on a GPU; skipped (77) without a CUDA backend.
 * On a GPU node with libcudnn 9 the cudnn choice must load and run (bf16, D 64); the emulated
 * build must refuse it, naming the emulator, unless CUDNN_LIBRARY (or SLUICE_CUDNN_LIBRARY) names
 * a library: test_attention_kernels_cudnn_emu runs it with emu's cuDNN test double.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"
#ifdef SLUICE_WITH_CUDA
#include "attention/kernels_cuda.h"
#endif

typedef struct {
    sl_dtype dt;
    int d;
    bool docs;
} prob;

/* Runs one forward of a small problem (B 1, S 70, H 4, KV 2, elementwise gate) on be and returns
 * the name of the kernel that ran; checks y against the CPU within `tol` of max |y|. */
static const char *run(sl_backend *be, prob p, double tol, const char *label) {
    const int s = 70, h = 4, kv = 2, d = p.d;
    const int64_t nq = (int64_t)s * h * d, nk = (int64_t)s * kv * d;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk);
    float *v = malloc(sizeof(float) * nk), *g = malloc(sizeof(float) * nq);
    sl_test_fill_normal(q, nq, 1.0f, 1), sl_test_fill_normal(k, nk, 1.0f, 2);
    sl_test_fill_normal(v, nk, 1.0f, 3), sl_test_fill_normal(g, nq, 1.0f, 4);
    for (int64_t i = 0; i < nq; i++)
        q[i] = sl_test_bf16_round(q[i]), g[i] = sl_test_bf16_round(g[i]);
    for (int64_t i = 0; i < nk; i++)
        k[i] = sl_test_bf16_round(k[i]), v[i] = sl_test_bf16_round(v[i]);
    int32_t seg[70];
    for (int i = 0; i < s; i++) seg[i] = i < 30 ? 0 : 30; /* two documents */
    const float scale = 1.0f / sqrtf((float)d);
    float *ref = NULL;
    for (int side = 0; side < 2; side++) {
        sl_backend *b = side ? be : sl_test_cpu();
        const sl_dtype dt = side ? p.dt : SL_F32;
        sl_tensor *tq = sl_test_ftensor(b, dt, s, h * d, q); /* tracked */
        sl_tensor *tk = sl_test_ftensor(b, dt, s, kv * d, k);
        sl_tensor *tv = sl_test_ftensor(b, dt, s, kv * d, v);
        sl_tensor *tg = sl_test_ftensor(b, dt, s, h * d, g);
        sl_tensor_reshape(tq, 3, (int64_t[]){s, h, d});
        sl_tensor_reshape(tk, 3, (int64_t[]){s, kv, d});
        sl_tensor_reshape(tv, 3, (int64_t[]){s, kv, d});
        sl_tensor_reshape(tg, 3, (int64_t[]){s, h, d});
        sl_tensor *ty = sl_test_track(sl_tensor_new3(b, dt, s, h, d));
        sl_tensor *to = sl_test_track(sl_tensor_new3(b, dt, s, h, d));
        sl_tensor *tl = sl_test_track(sl_tensor_new2(b, SL_F32, s, h));
        sl_tensor *ts = p.docs ? sl_test_matrix(b, SL_I32, s, 1, seg) : NULL;
        sl_op_gated_attn_fwd(ty, to, tl, tq, tk, tv, tg, ts, 1, s, scale);
        float *y = sl_test_host_floats(ty);
        if (!side) {
            ref = y;
            continue;
        }
        double err = 0.0, mx = 0.0;
        for (int64_t i = 0; i < nq; i++) {
            const double e = fabs((double)y[i] - ref[i]);
            err = e > err || e != e ? e : err;
            mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
        }
        CHECK(err <= tol * mx, "%s: y differs from the CPU by %.3g of max |y| (tolerance %.3g)",
              label, err / mx, tol);
        free(y);
    }
    free(ref), free(q), free(k), free(v), free(g);
    sl_test_release();
    const char *ran = sl_backend_attn_kernel_ran(be);
    return ran ? ran : "(none)";
}

static void expect_kernel(sl_backend *be, const char *choice, prob p, const char *want) {
    char label[128];
    snprintf(label, sizeof label, "choice %s, %s, D %d%s", choice ? choice : "(default)",
             sl_dtype_name(p.dt), p.d, p.docs ? ", documents" : "");
    const char *ran = run(be, p, p.dt == SL_BF16 ? 2e-2 : 1e-4, label);
    printf("  %-40s ran %s\n", label, ran);
    CHECK(strcmp(ran, want) == 0, "%s: kernel %s ran, expected %s", label, ran, want);
}

static void expect_refused(sl_backend *be, const char *choice, const char *fragment) {
    char err[1024] = "";
    const int rc = sl_backend_set_attn_kernel(be, choice, err, sizeof err);
    printf("  refuse %-10s %s\n", choice, err);
    CHECK(rc != 0, "choice \"%s\" accepted, expected a refusal mentioning \"%s\"", choice,
          fragment);
    CHECK(strstr(err, fragment) != NULL, "choice \"%s\": message \"%s\" lacks \"%s\"", choice, err,
          fragment);
}

static void set_ok(sl_backend *be, const char *choice) {
    char err[1024] = "";
    CHECK(sl_backend_set_attn_kernel(be, choice, err, sizeof err) == 0, "choice \"%s\": %s",
          choice ? choice : "(null)", err);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2) {
        fprintf(stderr, "usage: test_attention_kernels [CUDNN_LIBRARY]\n");
        return 2;
    }
    if (argc == 2)
        setenv("SLUICE_CUDNN_LIBRARY", argv[1], 1); /* e.g. the emulated build's double */
    unsetenv("SLUICE_ATTN_SM90");                   /* the automatic choice as a run gets it */
    const prob bf64 = {SL_BF16, 64, false}, bf128 = {SL_BF16, 128, false};
    const prob bf64docs = {SL_BF16, 64, true}, bf96 = {SL_BF16, 96, false};
    const prob f64 = {SL_F32, 64, false};

    /* The CPU backend: its own kernel only. */
    sl_backend *cpu = sl_test_cpu();
    char err[1024] = "";
    CHECK(sl_backend_set_attn_kernel(cpu, "auto", err, sizeof err) == 0 &&
              sl_backend_set_attn_kernel(cpu, "sluice", err, sizeof err) == 0 &&
              sl_backend_set_attn_kernel(cpu, NULL, err, sizeof err) == 0,
          "cpu: auto / sluice / default: %s", err);
    expect_refused(cpu, "cudnn", "needs backend.name = \"cuda\"");
    expect_refused(cpu, "mma", "the cpu backend has one attention kernel");
    CHECK(strcmp(sl_backend_attn_kernel_ran(cpu), "cpu") == 0, "cpu runs \"cpu\"");

    const sl_backend_params det = {.device = -1};
    sl_backend *be = sl_test_cuda_or_skip(&det); /* exits 77 without a CUDA backend */
    /* bf16 at D 64 / 128: the Hopper kernel where it runs, except in the emulated build */
    bool hopper = false;
#ifdef SLUICE_WITH_CUDA
    hopper = sl_cuda_gated_attn_sm90_device();
#endif
#ifdef SLUICE_CUDA_EMULATED
    const char *tc = "mma";
#else
    const char *tc = hopper ? "sm90" : "mma";
#endif

    printf("default choice (auto):\n");
    CHECK(sl_backend_attn_kernel_ran(be) == NULL, "no kernel ran yet");
    expect_kernel(be, NULL, bf64, tc);
    expect_kernel(be, NULL, bf128, tc);
    expect_kernel(be, NULL, bf64docs, tc);
    expect_kernel(be, NULL, bf96, "simt");
    expect_kernel(be, NULL, f64, "simt");
    for (int i = 0; i < 2; i++) {
        const char *c = i ? "sluice" : "auto";
        set_ok(be, c);
        printf("choice %s:\n", c);
        expect_kernel(be, c, bf64, tc);
        expect_kernel(be, c, bf96, "simt");
        expect_kernel(be, c, f64, "simt");
    }
    printf("kernels by name:\n");
    set_ok(be, "simt");
    expect_kernel(be, "simt", bf64, "simt");
    expect_kernel(be, "simt", bf64docs, "simt");
    set_ok(be, "mma");
    expect_kernel(be, "mma", bf128, "mma");
    if (hopper) {
        set_ok(be, "sm90");
        expect_kernel(be, "sm90", bf64, "sm90");
        expect_kernel(be, "sm90", bf128, "sm90");
        expect_kernel(be, "sm90", bf64docs, "sm90");
        set_ok(be, "mma");
    }
    expect_refused(be, "frob", "unknown attention kernel \"frob\"");
    expect_refused(be, "frob", "sm90, mma, simt, cudnn");
    expect_kernel(be, "mma (kept after a refusal)", bf64, "mma");
    /* cuDNN's backward is not bitwise reproducible: a deterministic backend refuses it */
    expect_refused(be, "cudnn", "backend.deterministic = false");
    sl_backend_free(be);

    const sl_backend_params nondet = {.device = -1, .allow_nondeterministic = true};
    be = sl_test_cuda_or_skip(&nondet);
    char why[1024] = "";
    const int rc = sl_backend_set_attn_kernel(be, "cudnn", why, sizeof why);
#ifdef SLUICE_CUDA_EMULATED
    if (!getenv("SLUICE_CUDNN_LIBRARY")) {
        printf("cudnn in the emulated build: %s\n", why);
        CHECK(rc != 0 && strstr(why, "emulated build"),
              "cudnn in the emulated build: rc %d, message \"%s\" lacks \"emulated build\"", rc,
              why);
    }
#endif
    if (rc == 0) { /* a node with libcudnn 9 (or the emulated build given one) */
        printf("cudnn loaded:\n");
        expect_kernel(be, "cudnn", bf64, "cudnn");
        expect_kernel(be, "cudnn", bf128, "cudnn");
    } else {
        printf("cudnn not loaded here: %s\n", why);
        CHECK(strstr(why, "cuDNN") || strstr(why, "libcudnn"), "cudnn refusal names cuDNN: %s",
              why);
        expect_kernel(be, "auto (kept after the refusal)", bf64, tc);
    }
    sl_backend_free(be);
    return sl_test_finish("test_attention_kernels");
}
