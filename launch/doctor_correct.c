/* launch/doctor_correct.c - `sluice doctor`'s correctness section (docs/doctor.md): every op
 * of the CUDA backend against the CPU backend (backends/conformance.h), f32 and bf16, and one
 * gated-attention shape per head dim through the kernel a run takes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/doctor.h"

#ifdef SLUICE_WITH_CUDA
#include "attention/kernels_cuda.h"
#include "backends/backends.h"
#include "backends/conformance.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"

static sl_backend *make(const char *name, int device, char *err, size_t errlen) {
    const sl_backend_params p = {.threads = 0, .device = device};
    return sl_backend_create(name, &p, err, errlen);
}

/* Every conformance case on `gpu` against `cpu` in dtype dt: one row. */
static void ops_row(sl_doctor *d, int dev, sl_backend *gpu, sl_backend *cpu, sl_dtype dt) {
    sl_conformance_cfg cfg = {
        .test = gpu, .ref = cpu, .dt = dt, .require_all = true, .perturb = d->inject};
    const int n = sl_conformance_count();
    int ok = 0, first_bad = -1;
    double worst = 0.0;
    int worst_op = -1;
    sl_conf_result bad = {0};
    for (int i = 0; i < n; i++) {
        const sl_conf_result r = sl_conformance_run(i, &cfg);
        if (r.status == SL_CONF_OK) ok++;
        if (r.status != SL_CONF_OK && first_bad < 0) first_bad = i, bad = r;
        if (r.worst > worst || worst_op < 0) worst = r.worst, worst_op = i;
    }
    char key[48], label[64];
    snprintf(key, sizeof key, "gpu%d.ops_%s", dev, sl_dtype_name(dt));
    snprintf(label, sizeof label, "GPU %d ops %s vs CPU", dev, sl_dtype_name(dt));
    if (first_bad < 0)
        sl_dr_add(d, "correctness", key, label, SL_DR_OK, worst, "err/tol",
                  "%d of %d operations within tolerance (worst %.3g of it: %s)", ok, n, worst,
                  sl_conformance_name(worst_op));
    else
        sl_dr_add(d, "correctness", key, label, SL_DR_FAIL, worst, "err/tol",
                  "%d of %d operations within tolerance; first failure %s: %s%s%s", ok, n,
                  sl_conformance_name(first_bad),
                  bad.status == SL_CONF_MISSING ? "not implemented" : bad.worst_at,
                  bad.why[0] ? "; " : "", bad.why);
}

static float *normal(int64_t n, float std, uint64_t stream, bool round_bf16) {
    float *x = sl_xmalloc(sizeof(float) * (size_t)n);
    sl_rng r;
    sl_rng_init(&r, 4242, stream);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(std * sl_rng_normal(&r));
        if (round_bf16) x[i] = sl_bf16_round(x[i]);
    }
    return x;
}

static sl_tensor *t3(sl_backend *be, sl_dtype dt, int64_t a, int64_t b, int64_t c, const float *h) {
    const int64_t shape[3] = {a, b, c};
    sl_tensor *t = sl_tensor_new(be, dt, 3, shape);
    if (!h) return t;
    if (dt == SL_F32) {
        sl_tensor_from_host(t, h);
    } else { /* upload fp32, convert on the backend (exact: the values are bf16 already) */
        sl_tensor *f = sl_tensor_new(be, SL_F32, 3, shape);
        sl_tensor_from_host(f, h);
        sl_op_convert(t, f);
        sl_tensor_free(f);
    }
    return t;
}

/* max |got - ref| / max(|ref|, 1e-2) over the n values of `got` (any float dtype); the floor
 * keeps outputs that vanish in exact arithmetic (rounding noise on both sides) from dividing
 * by nearly nothing. */
static double rel_err(const sl_tensor *got, const float *ref, int64_t n) {
    float *h = sl_xmalloc(sizeof(float) * (size_t)n);
    if (sl_tensor_dtype(got) == SL_F32) {
        sl_tensor_to_host(got, h);
    } else {
        sl_tensor *f = sl_tensor_new1(sl_tensor_backend(got), SL_F32, n);
        sl_tensor *flat = sl_tensor_view1((sl_tensor *)got, 0, n);
        sl_op_convert(f, flat);
        sl_tensor_to_host(f, h);
        sl_tensor_free(flat);
        sl_tensor_free(f);
    }
    double diff = 0.0, scale = 1e-2;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)h[i] - ref[i]);
        diff = e > diff || isnan(e) ? e : diff;
        scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
    }
    free(h);
    return diff / scale;
}

/* lse [T, H]: fp32 on every backend. */
static sl_tensor *lse_tensor(sl_backend *be, int64_t t, int64_t h, const float *host) {
    const int64_t shape[2] = {t, h};
    sl_tensor *x = sl_tensor_new(be, SL_F32, 2, shape);
    if (host) sl_tensor_from_host(x, host);
    return x;
}

/* One gated-attention shape (elementwise gate, causal, GQA 2, 130 tokens: three 64-row tiles)
 * at head dim `hd` in dtype dt through whatever kernel the backend takes, forward and backward,
 * against the CPU backend on the same (rounded) inputs. Tolerances relative to the largest
 * |reference| (tests/test_attention_tc.c's): bf16 1e-2 forward, 2e-2 backward (bf16 outputs
 * round by 2^-9; the backward rounds P and dS to bf16 as MMA operands); fp32 1e-4. */
static void attention_row(sl_doctor *d, int dev, sl_backend *gpu, sl_backend *cpu, sl_dtype dt,
                          int hd) {
    const int b = 1, s = 130, h = 4, kv = 2;
    const int64_t t = (int64_t)b * s, nq = t * h * hd, nk = t * kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const bool r16 = dt == SL_BF16;
    float *q = normal(nq, 1.5f, 1, r16), *k = normal(nk, 1.5f, 2, r16),
          *v = normal(nk, 1.0f, 3, r16);
    float *g = normal(nq, 1.5f, 4, r16), *dy = normal(nq, 1.0f, 5, r16);
    /* CPU: forward, then backward from its own o (rounded as the device stores it) and lse */
    sl_tensor *c[12], *x[12];
    c[0] = t3(cpu, SL_F32, t, h, hd, q), c[1] = t3(cpu, SL_F32, t, kv, hd, k);
    c[2] = t3(cpu, SL_F32, t, kv, hd, v), c[3] = t3(cpu, SL_F32, t, h, hd, g);
    c[4] = t3(cpu, SL_F32, t, h, hd, NULL), c[5] = t3(cpu, SL_F32, t, h, hd, NULL);
    c[6] = lse_tensor(cpu, t, h, NULL);
    sl_op_gated_attn_fwd(c[4], c[5], c[6], c[0], c[1], c[2], c[3], NULL, b, s, scale);
    float *ry = sl_xmalloc(sizeof(float) * (size_t)nq),
          *ro = sl_xmalloc(sizeof(float) * (size_t)nq);
    float *rl = sl_xmalloc(sizeof(float) * (size_t)(t * h));
    sl_tensor_to_host(c[4], ry), sl_tensor_to_host(c[5], ro), sl_tensor_to_host(c[6], rl);
    if (r16)
        for (int64_t i = 0; i < nq; i++) ro[i] = sl_bf16_round(ro[i]);
    sl_tensor_from_host(c[5], ro);
    c[7] = t3(cpu, SL_F32, t, h, hd, dy);
    c[8] = t3(cpu, SL_F32, t, h, hd, NULL), c[9] = t3(cpu, SL_F32, t, kv, hd, NULL);
    c[10] = t3(cpu, SL_F32, t, kv, hd, NULL), c[11] = t3(cpu, SL_F32, t, h, hd, NULL);
    sl_op_gated_attn_bwd(c[8], c[9], c[10], c[11], c[7], c[0], c[1], c[2], c[3], NULL, c[5], c[6],
                         b, s, scale);
    float *ref[4];
    const int64_t nn[4] = {nq, nk, nk, nq};
    for (int i = 0; i < 4; i++) {
        ref[i] = sl_xmalloc(sizeof(float) * (size_t)nn[i]);
        sl_tensor_to_host(c[8 + i], ref[i]);
    }
    /* the device */
    x[0] = t3(gpu, dt, t, h, hd, q), x[1] = t3(gpu, dt, t, kv, hd, k);
    x[2] = t3(gpu, dt, t, kv, hd, v), x[3] = t3(gpu, dt, t, h, hd, g);
    x[4] = t3(gpu, dt, t, h, hd, NULL), x[5] = t3(gpu, dt, t, h, hd, NULL);
    x[6] = lse_tensor(gpu, t, h, NULL);
    sl_op_gated_attn_fwd(x[4], x[5], x[6], x[0], x[1], x[2], x[3], NULL, b, s, scale);
    const double efwd = rel_err(x[4], ry, nq);
    sl_tensor_free(x[5]), sl_tensor_free(x[6]); /* the backward gets the CPU's o and lse */
    x[5] = t3(gpu, dt, t, h, hd, ro), x[6] = lse_tensor(gpu, t, h, rl);
    x[7] = t3(gpu, dt, t, h, hd, dy);
    x[8] = t3(gpu, dt, t, h, hd, NULL), x[9] = t3(gpu, dt, t, kv, hd, NULL);
    x[10] = t3(gpu, dt, t, kv, hd, NULL), x[11] = t3(gpu, dt, t, h, hd, NULL);
    sl_op_gated_attn_bwd(x[8], x[9], x[10], x[11], x[7], x[0], x[1], x[2], x[3], NULL, x[5], x[6],
                         b, s, scale);
    double ebwd = 0.0;
    for (int i = 0; i < 4; i++) {
        const double e = rel_err(x[8 + i], ref[i], nn[i]);
        ebwd = e > ebwd || isnan(e) ? e : ebwd;
    }
    const double tf = r16 ? 1e-2 : 1e-4, tb = r16 ? 2e-2 : 1e-4;
    const double worst = fmax(efwd / tf, ebwd / tb);
    char key[48], label[64];
    const char *ran = sl_backend_attn_kernel_ran(gpu); /* the kernel a run takes: sm90, mma, simt */
    snprintf(key, sizeof key, "gpu%d.attention_%s_d%d", dev, sl_dtype_name(dt), hd);
    snprintf(label, sizeof label, "GPU %d attention %s D%d (%s)", dev, sl_dtype_name(dt), hd,
             ran ? ran : "?");
    sl_dr_add(d, "correctness", key, label, worst <= 1.0 ? SL_DR_OK : SL_DR_FAIL, worst, "err/tol",
              "B%d S%d H%d KV%d, elementwise gate: forward %.2g, backward %.2g of max |ref| "
              "(bounds %.0e, %.0e)",
              b, s, h, kv, efwd, ebwd, tf, tb);
    for (int i = 0; i < 12; i++) sl_tensor_free(c[i]), sl_tensor_free(x[i]);
    for (int i = 0; i < 4; i++) free(ref[i]);
    free(q), free(k), free(v), free(g), free(dy), free(ry), free(ro), free(rl);
}

void sl_doctor_correctness(sl_doctor *d, int dev) {
    char err[512], key[48], label[64];
    sl_backend *cpu = make("cpu", -1, err, sizeof err);
    sl_backend *gpu = cpu ? make("cuda", dev, err, sizeof err) : NULL;
    snprintf(key, sizeof key, "gpu%d.backend", dev);
    snprintf(label, sizeof label, "GPU %d backend", dev);
    if (!gpu) {
        sl_dr_add(d, "correctness", key, label, SL_DR_FAIL, NAN, "", "cannot start: %s", err);
        sl_backend_free(cpu);
        return;
    }
    ops_row(d, dev, gpu, cpu, SL_F32);
    ops_row(d, dev, gpu, cpu, SL_BF16);
    /* the head dims with tensor-core kernels, one without (SIMT), and fp32 (SIMT) */
    for (int hd = 1; hd <= 1024; hd++)
        if (sl_cuda_gated_attn_tc_takes(SL_BF16, hd)) attention_row(d, dev, gpu, cpu, SL_BF16, hd);
    attention_row(d, dev, gpu, cpu, SL_BF16, 96);
    attention_row(d, dev, gpu, cpu, SL_F32, 128);
    sl_backend_free(gpu);
    sl_backend_free(cpu);
}

#endif
