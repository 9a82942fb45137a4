/* tests/test_util.c - see test_util.h. */
#include "tests/test_util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int sl_test_failures = 0;
int sl_test_checks = 0;

int sl_test_finish(const char *name) {
    printf("%s: %d checks, %d failed\n", name, sl_test_checks, sl_test_failures);
    return sl_test_failures ? 1 : 0;
}

bool sl_test_under_ci(void) {
    const char *ci = getenv("CI");
    return ci && (strcmp(ci, "true") == 0 || strcmp(ci, "TRUE") == 0 || strcmp(ci, "True") == 0 ||
                  strcmp(ci, "1") == 0);
}

int sl_test_skip(const char *fmt, ...) {
    const bool ci = sl_test_under_ci();
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, ci ? "FAIL: " : "SKIP: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, ci ? " (a missing dependency is a failure under CI)\n" : "\n");
    va_end(ap);
    if (!ci) return 77;
    sl_test_checks++;
    sl_test_failures++;
    return 1;
}

sl_backend *sl_test_cpu(void) {
    static sl_backend *be;
    if (!be) {
        char err[256];
        sl_backend_params p = {.threads = 2, .device = -1};
        be = sl_backend_create("cpu", &p, err, sizeof err);
        if (!be) {
            fprintf(stderr, "cannot create CPU backend: %s\n", err);
            exit(1);
        }
    }
    return be;
}

/* splitmix64: tiny, deterministic, good enough for test data. */
uint64_t sl_test_rand_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double sl_test_rand_unif(uint64_t *s) {
    return (double)(sl_test_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

void sl_test_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)sl_test_rand_unif(&s);
}

void sl_test_fill_normal(float *x, int64_t n, float std, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double u1 = sl_test_rand_unif(&s), u2 = sl_test_rand_unif(&s);
        if (u1 < 1e-300) u1 = 1e-300;
        x[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
}

sl_tensor *sl_test_tensor(sl_dtype dt, int ndim, const int64_t *shape, const void *host) {
    sl_tensor *t = sl_tensor_new(sl_test_cpu(), dt, ndim, shape);
    if (host) sl_tensor_from_host(t, host);
    return t;
}

float *sl_test_host_f32(const sl_tensor *t) {
    float *h = malloc((size_t)sl_tensor_numel(t) * sizeof(float));
    sl_tensor_to_host(t, h);
    return h;
}

double sl_test_compare(const char *label, const float *a, const float *b, int64_t n, double atol,
                       double rtol) {
    double worst = 0.0;
    int64_t wi = -1;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(e <= worst)) { /* also catches NaN */
            worst = isnan(e) ? INFINITY : e;
            wi = i;
        }
    }
    if (label && worst > 1.0 && wi >= 0)
        fprintf(stderr, "  %s: worst element %lld: got %.8g expected %.8g (ratio %.3g)\n", label,
                (long long)wi, a[wi], b[wi], worst);
    return worst;
}

double sl_test_check_scatter_sum(const char *label, const float *got, const float *dst0,
                                 const float *src, const int32_t *idx, int64_t rows, int64_t m,
                                 int64_t c) {
    const size_t n = (size_t)(rows * c);
    double *exact = malloc(sizeof(double) * (n ? n : 1));
    double *mag = malloc(sizeof(double) * (n ? n : 1));
    int64_t *count = malloc(sizeof(int64_t) * (size_t)(rows ? rows : 1));
    for (size_t i = 0; i < n; i++) exact[i] = dst0[i], mag[i] = fabs((double)dst0[i]);
    for (int64_t r = 0; r < rows; r++) count[r] = 1;
    for (int64_t i = 0; i < m; i++) {
        if (idx[i] < 0 || idx[i] >= rows) continue;
        count[idx[i]]++;
        for (int64_t j = 0; j < c; j++) {
            exact[idx[i] * c + j] += src[i * c + j];
            mag[idx[i] * c + j] += fabs((double)src[i * c + j]);
        }
    }
    const double u = ldexp(1.0, -24);
    double worst = 0.0;
    int64_t wi = -1;
    for (int64_t r = 0; r < rows; r++) {
        const double k1 = (double)(count[r] - 1), gamma = k1 * u / (1.0 - k1 * u);
        for (int64_t j = 0; j < c; j++) {
            const int64_t i = r * c + j;
            /* + the double accumulation's own rounding, (k - 1) 2^-53 sum |x| at most */
            const double bound = (gamma + k1 * ldexp(1.0, -53)) * mag[i];
            const double d = fabs((double)got[i] - exact[i]);
            const double e = d == 0.0 ? 0.0 : bound > 0.0 ? d / bound : INFINITY;
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, wi = i;
        }
    }
    if (label && worst > 1.0 && wi >= 0)
        fprintf(stderr,
                "  %s: worst element %lld (row %lld, %lld summands, sum |x| %.6g): got %.9g, "
                "exact sum %.9g, %.3g x the bound\n",
                label, (long long)wi, (long long)(wi / c), (long long)count[wi / c], mag[wi],
                got[wi], exact[wi], worst);
    free(exact), free(mag), free(count);
    return worst;
}

int sl_test_fd_check(const char *label, float *x, const float *grad, int64_t n,
                     double (*loss)(void *user), void *user, double h, double atol, double rtol,
                     int max_checks) {
    int bad = 0;
    int64_t stride = n > max_checks ? n / max_checks : 1;
    for (int64_t i = 0, c = 0; i < n && c < max_checks; i += stride, c++) {
        float saved = x[i];
        x[i] = (float)(saved + h);
        double fp = loss(user);
        x[i] = (float)(saved - h);
        double fm = loss(user);
        x[i] = saved;
        double num = (fp - fm) / (2.0 * h);
        double err = fabs(num - grad[i]);
        if (!(err <= atol + rtol * fabs(num))) {
            if (bad < 5)
                fprintf(stderr, "  %s[%lld]: analytic %.7g numeric %.7g\n", label, (long long)i,
                        grad[i], num);
            bad++;
        }
    }
    return bad;
}

sl_model_config sl_test_model_config(void) {
    sl_model_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 40;
    c.hidden_size = 32;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.partial_rotary_factor = 1.0;
    c.max_position_embeddings = 64;
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 16;
    c.intermediate_size = 24;
    c.norm_topk_prob = true;
    c.router_aux_loss_coef = 0.01;
    c.router_z_loss_coef = 0.001;
    c.initializer_range = 0.1;
    c.attn_output_gate = SL_GATE_ELEMENTWISE;
    return c;
}

double sl_test_op_scalar(void (*op)(sl_tensor *out, const sl_tensor *x), const sl_tensor *x) {
    sl_tensor *out = sl_tensor_new1(sl_tensor_backend(x), SL_F32, 1);
    op(out, x);
    float v = 0.0f;
    sl_tensor_to_host(out, &v);
    sl_tensor_free(out);
    return v;
}

sl_backend *sl_test_cuda_or_skip(const sl_backend_params *params) {
    bool built = false;
    for (int i = 0; i < sl_backend_count(); i++)
        built |= strcmp(sl_backend_name_at(i), "cuda") == 0;
    if (!built) {
        printf("SKIP: this build has no CUDA backend\n");
        exit(77);
    }
    char err[256] = "";
    sl_backend *be = sl_backend_create("cuda", params, err, sizeof err);
    if (!be) {
        printf("SKIP: %s\n", err);
        exit(77);
    }
    return be;
}

enum { SL_TEST_MAX_TRACKED = 1024 };
static sl_tensor *g_tracked[SL_TEST_MAX_TRACKED];
static int g_ntracked;

sl_tensor *sl_test_track(sl_tensor *t) {
    SL_CHECK(g_ntracked < SL_TEST_MAX_TRACKED, "sl_test_track: more than %d live tensors",
             SL_TEST_MAX_TRACKED);
    return g_tracked[g_ntracked++] = t;
}

void sl_test_release(void) {
    while (g_ntracked > 0) sl_tensor_free(g_tracked[--g_ntracked]);
}

float sl_test_bf16_round(float f) {
    return sl_bf16_round(f);
}

sl_tensor *sl_test_tensor3(sl_backend *be, sl_dtype dt, int64_t a, int64_t b, int64_t c,
                           const float *host) {
    float *zeros = host ? NULL : calloc((size_t)(a * b * c > 0 ? a * b * c : 1), sizeof(float));
    sl_tensor *t = sl_test_ftensor(be, dt, a * b, c, host ? host : zeros);
    sl_tensor_reshape(t, 3, (int64_t[]){a, b, c});
    free(zeros);
    return t;
}

float *sl_test_normal_bf16(int64_t n, float std, uint64_t seed) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    sl_test_fill_normal(x, n, std, seed);
    for (int64_t i = 0; i < n; i++) x[i] = sl_test_bf16_round(x[i]);
    return x;
}

void sl_test_attn_reference(sl_test_attn_ref *r, int batch, int seq, int h, int kv, int d, int gw,
                            const float *q, const float *k, const float *v, const float *g,
                            const float *dy, const int32_t *seg, float scale) {
    sl_backend *cpu = sl_test_cpu();
    const int64_t t = (int64_t)batch * seq, nq = t * h * d;
    sl_tensor *cq = sl_test_tensor3(cpu, SL_F32, t, h, d, q);
    sl_tensor *ck = sl_test_tensor3(cpu, SL_F32, t, kv, d, k);
    sl_tensor *cv = sl_test_tensor3(cpu, SL_F32, t, kv, d, v);
    sl_tensor *cdy = sl_test_tensor3(cpu, SL_F32, t, h, d, dy);
    sl_tensor *cg = g ? sl_test_tensor3(cpu, SL_F32, t, h, gw, g) : NULL;
    sl_tensor *cs = seg ? sl_test_matrix(cpu, SL_I32, t, 1, seg) : NULL;
    sl_tensor *cy = sl_test_tensor3(cpu, SL_F32, t, h, d, NULL);
    sl_tensor *co = sl_test_tensor3(cpu, SL_F32, t, h, d, NULL);
    sl_tensor *cl = sl_test_matrix(cpu, SL_F32, t, h, NULL);
    sl_op_gated_attn_fwd(cy, co, cl, cq, ck, cv, cg, cs, batch, seq, scale);
    r->y = sl_test_host_floats(cy), r->o = sl_test_host_floats(co);
    r->lse = sl_test_host_floats(cl);
    for (int64_t i = 0; i < nq; i++) r->o[i] = sl_test_bf16_round(r->o[i]);
    sl_tensor_from_host(co, r->o);
    sl_tensor *cdq = sl_test_tensor3(cpu, SL_F32, t, h, d, NULL);
    sl_tensor *cdk = sl_test_tensor3(cpu, SL_F32, t, kv, d, NULL);
    sl_tensor *cdv = sl_test_tensor3(cpu, SL_F32, t, kv, d, NULL);
    sl_tensor *cdg = g ? sl_test_tensor3(cpu, SL_F32, t, h, gw, NULL) : NULL;
    sl_op_gated_attn_bwd(cdq, cdk, cdv, cdg, cdy, cq, ck, cv, cg, cs, co, cl, batch, seq, scale);
    r->dq = sl_test_host_floats(cdq), r->dk = sl_test_host_floats(cdk);
    r->dv = sl_test_host_floats(cdv), r->dg = cdg ? sl_test_host_floats(cdg) : NULL;
}

void sl_test_attn_ref_free(sl_test_attn_ref *r) {
    free(r->y), free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv), free(r->dg);
    memset(r, 0, sizeof *r);
}

double sl_test_rel_err(const float *got, const float *want, int64_t n, double floor) {
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        err = d > err || d != d ? d : err; /* NaN wins */
        ref = fabs(want[i]) > ref ? fabs(want[i]) : ref;
    }
    return err / (ref > floor ? ref : floor);
}

sl_tensor *sl_test_matrix(sl_backend *be, sl_dtype dt, int64_t rows, int64_t cols,
                          const void *host) {
    sl_tensor *t = sl_test_track(rows > 1 || cols > 1 ? sl_tensor_new2(be, dt, rows, cols)
                                                      : sl_tensor_new1(be, dt, rows * cols));
    if (host) sl_tensor_from_host(t, host);
    return t;
}

sl_tensor *sl_test_ftensor(sl_backend *be, sl_dtype dt, int64_t rows, int64_t cols,
                           const float *host) {
    if (dt == SL_F32) return sl_test_matrix(be, SL_F32, rows, cols, host);
    sl_tensor *f = sl_test_matrix(be, SL_F32, rows, cols, host);
    sl_tensor *b = sl_test_matrix(be, dt, rows, cols, NULL);
    sl_op_convert(b, f);
    return b;
}

float *sl_test_host_floats(const sl_tensor *t) {
    if (sl_tensor_dtype(t) == SL_F32) return sl_test_host_f32(t);
    sl_tensor *f = sl_tensor_new1(sl_tensor_backend(t), SL_F32, sl_tensor_numel(t));
    sl_op_convert(f, t);
    float *h = sl_test_host_f32(f);
    sl_tensor_free(f);
    return h;
}
