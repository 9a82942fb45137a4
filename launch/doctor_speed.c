/* launch/doctor_speed.c - `sluice doctor`'s speed section (docs/doctor.md): the bf16 GEMM peak
 * (cuBLAS), the device copy bandwidth, gated attention forward and backward at a paper shape,
 * one training step of the 15A2B shape with its layers cut, and NCCL between the GPUs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launch/doctor.h"

#ifdef SLUICE_WITH_CUDA
#include "backends/backends.h"
#include "core/cuda_peak.h"
#include "core/nccl_peak.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "model/counts.h"
#include "trainer/fit_device.h"
#include "trainer/train_step.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- GEMM peak and copy bandwidth --------------------------------------------------------- */

/* Returns the measured peak (FLOP/s; 0 when it failed) for the training step's fraction. */
static double gemm_row(sl_doctor *d, int dev, const sl_bench_device *g) {
    char key[48], label[64], err[512];
    snprintf(key, sizeof key, "gpu%d.gemm_bf16", dev);
    snprintf(label, sizeof label, "GPU %d bf16 GEMM peak (cuBLAS)", dev);
    const int n = d->tiny ? 256 : 8192, reps = d->tiny ? 3 : 21;
    sl_bench_peak p;
    if (sl_bench_gemm_peak(n, d->tiny ? 1 : 3, reps, &p, err, sizeof err) != 0) {
        sl_dr_add(d, "speed", key, label, SL_DR_FAIL, NAN, "TFLOP/s", "%s", err);
        return 0.0;
    }
    const double nominal = sl_bench_nominal_bf16_flops(g);
    char of[64] = "";
    if (nominal > 0)
        snprintf(of, sizeof of, ", %.0f%% of nominal %.0f TFLOP/s",
                 100.0 * p.median_flops / nominal, nominal * 1e-12);
    sl_dr_measure(d, key, label, p.median_flops * 1e-12, "TFLOP/s",
                  nominal > 0 ? 0.5 * nominal * 1e-12 : NAN, "%.1f TFLOP/s, %d^3, median of %d%s",
                  p.median_flops * 1e-12, n, reps, of);
    return p.median_flops;
}

static void copy_row(sl_doctor *d, int dev, const sl_bench_device *g) {
    char key[48], label[64], err[512];
    snprintf(key, sizeof key, "gpu%d.copy", dev);
    snprintf(label, sizeof label, "GPU %d device copy bandwidth", dev);
    const size_t bytes = d->tiny ? (size_t)1 << 20 : (size_t)1 << 30;
    sl_bench_copy c;
    if (sl_bench_copy_bandwidth(bytes, d->tiny ? 3 : 20, &c, err, sizeof err) != 0) {
        sl_dr_add(d, "speed", key, label, SL_DR_FAIL, NAN, "GB/s", "%s", err);
        return;
    }
    const double nominal = sl_bench_nominal_bandwidth(g);
    char of[64] = "";
    if (nominal > 0)
        snprintf(of, sizeof of, ", %.0f%% of nominal %.0f GB/s", 100.0 * c.median_bps / nominal,
                 nominal * 1e-9);
    sl_dr_measure(d, key, label, c.median_bps * 1e-9, "GB/s",
                  nominal > 0 ? 0.5 * nominal * 1e-9 : NAN,
                  "%.0f GB/s (read + write) copying %.0f MiB, median of %d%s", c.median_bps * 1e-9,
                  (double)bytes / (1 << 20), c.reps, of);
}

/* ---- gated attention ---------------------------------------------------------------------- */

static sl_tensor *random_tensor(sl_backend *be, sl_dtype dt, int64_t a, int64_t b, int64_t c,
                                float std, uint64_t stream) {
    const int64_t shape[3] = {a, b, c}, n = a * b * c;
    float *h = sl_xmalloc(sizeof(float) * (size_t)n);
    sl_rng r;
    sl_rng_init(&r, 99, stream);
    for (int64_t i = 0; i < n; i++) h[i] = (float)(std * sl_rng_normal(&r));
    sl_tensor *f = sl_tensor_new(be, SL_F32, 3, shape), *t = sl_tensor_new(be, dt, 3, shape);
    sl_tensor_from_host(f, h);
    sl_op_convert(t, f);
    sl_tensor_free(f);
    free(h);
    return t;
}

/* Forward and backward of the paper's attention shape (B 1, S 4096, 32 query and 4 KV heads of
 * 128, elementwise gate, causal; tiny: S 128, 2/1 heads of 64), bf16, through the kernels a run
 * takes; medians of timed repetitions after one untimed. FLOPs as bench/attn_bench.c counts
 * them: forward 4 B H D S^2 / 2, backward 2.5 x that. */
static void attention_rows(sl_doctor *d, int dev, sl_backend *be) {
    const int b = 1, s = d->tiny ? 128 : 4096, h = d->tiny ? 2 : 32, kv = d->tiny ? 1 : 4,
              hd = d->tiny ? 64 : 128, reps = d->tiny ? 2 : 10;
    const int64_t t = (int64_t)b * s;
    const float scale = 1.0f / sqrtf((float)hd);
    sl_tensor *q = random_tensor(be, SL_BF16, t, h, hd, 1.0f, 1),
              *k = random_tensor(be, SL_BF16, t, kv, hd, 1.0f, 2),
              *v = random_tensor(be, SL_BF16, t, kv, hd, 1.0f, 3),
              *g = random_tensor(be, SL_BF16, t, h, hd, 1.0f, 4),
              *dy = random_tensor(be, SL_BF16, t, h, hd, 1.0f, 5);
    const int64_t s3[3] = {t, h, hd}, sk[3] = {t, kv, hd}, s2[2] = {t, h};
    sl_tensor *y = sl_tensor_new(be, SL_BF16, 3, s3), *o = sl_tensor_new(be, SL_BF16, 3, s3);
    sl_tensor *lse = sl_tensor_new(be, SL_F32, 2, s2);
    sl_tensor *dq = sl_tensor_new(be, SL_BF16, 3, s3), *dk = sl_tensor_new(be, SL_BF16, 3, sk);
    sl_tensor *dv = sl_tensor_new(be, SL_BF16, 3, sk), *dg = sl_tensor_new(be, SL_BF16, 3, s3);
    double tf[16], tb[16];
    for (int i = -1; i < reps; i++) {
        sl_backend_synchronize(be);
        const double t0 = now_s();
        sl_op_gated_attn_fwd(y, o, lse, q, k, v, g, NULL, b, s, scale);
        sl_backend_synchronize(be);
        const double t1 = now_s();
        sl_op_gated_attn_bwd(dq, dk, dv, dg, dy, q, k, v, g, NULL, o, lse, b, s, scale);
        sl_backend_synchronize(be);
        if (i >= 0) tf[i] = t1 - t0, tb[i] = now_s() - t1;
    }
    qsort(tf, (size_t)reps, sizeof(double), cmp_double);
    qsort(tb, (size_t)reps, sizeof(double), cmp_double);
    const double fwd = 4.0 * b * h * hd * (double)s * s / 2.0, bwd = 2.5 * fwd;
    const double mf = tf[reps / 2], mb = tb[reps / 2];
    char key[48], label[64];
    snprintf(key, sizeof key, "gpu%d.attention_fwd", dev);
    snprintf(label, sizeof label, "GPU %d attention forward", dev);
    sl_dr_measure(d, key, label, fwd / mf * 1e-12, "TFLOP/s", NAN,
                  "%.1f TFLOP/s, %.3f ms: B%d S%d H%d KV%d D%d bf16, causal, elementwise gate",
                  fwd / mf * 1e-12, 1e3 * mf, b, s, h, kv, hd);
    snprintf(key, sizeof key, "gpu%d.attention_bwd", dev);
    snprintf(label, sizeof label, "GPU %d attention backward", dev);
    sl_dr_measure(d, key, label, bwd / mb * 1e-12, "TFLOP/s", NAN,
                  "%.1f TFLOP/s, %.3f ms (the same shape; 2.5 x the forward's FLOPs)",
                  bwd / mb * 1e-12, 1e3 * mb);
    sl_tensor *all[] = {q, k, v, g, dy, y, o, lse, dq, dk, dv, dg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sl_tensor_free(all[i]);
}

/* ---- a training step ---------------------------------------------------------------------- */

/* The 15A2B config: --config, else configs/qwen-gated-15a2b.json beside the binary's
 * directory (the bundle's bin/../configs), else in the source tree this was built from. */
static const char *find_config(const sl_doctor *d, char *buf, size_t len) {
    if (d->config) return d->config;
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(buf, len, "%s/../configs/qwen-gated-15a2b.json", exe);
        if (access(buf, R_OK) == 0) return buf;
    }
#ifdef SLUICE_SOURCE_DIR
    snprintf(buf, len, "%s/configs/qwen-gated-15a2b.json", SLUICE_SOURCE_DIR);
    if (access(buf, R_OK) == 0) return buf;
#endif
    return NULL;
}

/* One step of the 15A2B shape as `sluice train` runs it (sl_train_step: one micro-batch of one
 * 4096-token sequence, bf16, AdamW), layers cut to --layers (default 2) or fewer to fit; its
 * weights from the fast fill (trainer/fit_device.h: timing only). Tiny: hidden 64, 4/2 heads
 * of 16, 8 experts top-2, vocabulary 512, seq 64 (tests/test_gpu_smoke.sh's tiny widths). */
static void train_row(sl_doctor *d, int dev, sl_backend *be, double peak) {
    char key[48], label[64], path[4200], err[2048];
    snprintf(key, sizeof key, "gpu%d.train_step", dev);
    snprintf(label, sizeof label, "GPU %d training step (15A2B shape)", dev);
    const char *cfg_path = find_config(d, path, sizeof path);
    if (!cfg_path) {
        sl_dr_add(d, "speed", key, label, SL_DR_SKIP, NAN, "TFLOP/s",
                  "configs/qwen-gated-15a2b.json not found beside the binary (give --config)");
        return;
    }
    static sl_config cfg; /* large: off the stack */
    memset(&cfg, 0, sizeof cfg);
    if (sl_config_load(cfg_path, &cfg, err, sizeof err) != 0) {
        sl_dr_add(d, "speed", key, label, SL_DR_FAIL, NAN, "TFLOP/s", "%s", err);
        return;
    }
    if (d->tiny) {
        const char *const tiny[] = {"model.hidden_size=64",
                                    "model.num_attention_heads=4",
                                    "model.num_key_value_heads=2",
                                    "model.head_dim=16",
                                    "model.num_experts=8",
                                    "model.num_experts_per_tok=2",
                                    "model.moe_intermediate_size=32",
                                    "model.vocab_size=512",
                                    "training.seq_len=64"};
        if (sl_config_apply_sets(&cfg, tiny, 9, err, sizeof err) != 0) {
            sl_dr_add(d, "speed", key, label, SL_DR_FAIL, NAN, "TFLOP/s", "%s", err);
            return;
        }
    }
    const int seq = cfg.train.seq_len, full = cfg.model.num_hidden_layers;
    sl_bench_device g;
    if (sl_bench_device_info(&g, err, sizeof err) != 0) {
        sl_dr_add(d, "speed", key, label, SL_DR_FAIL, NAN, "TFLOP/s", "%s", err);
        return;
    }
    const int fit = sl_fit_layers(&cfg.model, seq, true, 0, false, (double)g.free_bytes);
    const int layers = d->layers < fit ? d->layers : fit;
    const sl_fit_settings fs = {
        .layers = layers, .seq = seq, .batch = 1, .accum = 1, .precision = "bf16"};
    sl_fit_model fm;
    if (sl_fit_configure(&cfg, &fs, err, sizeof err) != 0 ||
        sl_fit_create(&fm, &cfg, be, d->world, SL_FIT_INIT_FAST, err, sizeof err) != 0) {
        sl_dr_add(d, "speed", key, label, SL_DR_FAIL, NAN, "TFLOP/s", "%s", err);
        return;
    }
    const int ne = cfg.model.num_experts, warmup = d->tiny ? 1 : 2, steps = d->tiny ? 2 : 5;
    int64_t *counts = sl_xcalloc((size_t)layers * (size_t)(ne > 0 ? ne : 1), sizeof(int64_t));
    int32_t *tokens = sl_xmalloc(sizeof(int32_t) * (size_t)(seq + 1));
    sl_fit_tokens src = {.batch = 1, .seq = seq, .vocab = cfg.model.vocab_size};
    const sl_stepper st = {
        .model = fm.model, .opt = &fm.opt, .world = d->world, .micro_batches = 1, .tokens = tokens};
    double dt[8], loss = NAN;
    int rc = 0;
    for (int s = 0; s < warmup + steps && rc == 0; s++) {
        sl_backend_synchronize(be);
        const double t0 = now_s();
        sl_step_result res = {.counts = ne > 0 ? counts : NULL};
        rc = sl_train_step(&st, &cfg.train, s, sl_fit_random_batch, &src, &res, err, sizeof err);
        sl_backend_synchronize(be);
        if (s >= warmup) dt[s - warmup] = now_s() - t0;
        loss = res.loss;
    }
    sl_fit_free(&fm);
    free(counts), free(tokens);
    if (rc != 0 || !isfinite(loss)) {
        sl_dr_add(d, "speed", key, label, SL_DR_FAIL, NAN, "TFLOP/s", "%s",
                  rc != 0 ? err : "the loss is not finite");
        return;
    }
    qsort(dt, (size_t)steps, sizeof(double), cmp_double);
    const double ms = dt[steps / 2], tok_s = seq / ms;
    const double tflops = sl_model_flops_per_token(&cfg.model, seq) * tok_s * 1e-12;
    char frac[64] = "";
    if (peak > 0)
        snprintf(frac, sizeof frac, " = %.1f%% of the measured GEMM peak",
                 100.0 * tflops * 1e12 / peak);
    /* a floor against a broken node, not a target: 5% of this device's measured peak (an H200
     * ran the 15A2B at 25.8% with 9 layers and 4 micro-batches, docs/performance.md) */
    sl_dr_measure(d, key, label, tflops, "TFLOP/s", peak > 0 ? 0.05 * peak * 1e-12 : NAN,
                  "%.1f model TFLOP/s%s: %d of %d layers, 1 x %d tokens, bf16, %.1f ms/step "
                  "(median of %d), %.0f tokens/s, loss %.3f",
                  tflops, frac, layers, full, seq, 1e3 * ms, steps, tok_s, loss);
}

void sl_doctor_speed(sl_doctor *d, int dev) {
    char key[48], label[64], err[512];
    const sl_backend_params p = {.threads = 0, .device = dev};
    sl_backend *be = sl_backend_create("cuda", &p, err, sizeof err);
    if (!be) {
        snprintf(key, sizeof key, "gpu%d.speed", dev);
        snprintf(label, sizeof label, "GPU %d backend", dev);
        sl_dr_add(d, "speed", key, label, SL_DR_FAIL, NAN, "", "cannot start: %s", err);
        return;
    }
    sl_bench_device g;
    if (sl_bench_device_info(&g, err, sizeof err) != 0) memset(&g, 0, sizeof g);
    const double peak = gemm_row(d, dev, &g);
    copy_row(d, dev, &g);
    attention_rows(d, dev, be);
    train_row(d, dev, be, peak);
    sl_backend_free(be);
}

void sl_doctor_nccl(sl_doctor *d, int ndev) {
    char err[512];
    if (ndev < 2) {
        sl_dr_add(d, "speed", "nccl_bandwidth", "NCCL between GPUs", SL_DR_SKIP, NAN, "GB/s",
                  "one GPU: nothing to measure between GPUs");
        return;
    }
    const size_t bytes = d->tiny ? (size_t)1 << 20 : (size_t)256 << 20;
    sl_nccl_peak p;
    if (sl_nccl_peak_measure(ndev, bytes, d->tiny ? 2 : 20, &p, err, sizeof err) != 0) {
        sl_dr_add(d, "speed", "nccl_bandwidth", "NCCL between GPUs",
                  d->emulated ? SL_DR_SKIP : SL_DR_FAIL, NAN, "GB/s", "%s", err);
        return;
    }
    sl_dr_measure(d, "nccl_allreduce", "NCCL all-reduce bus bandwidth", p.allreduce_busbw * 1e-9,
                  "GB/s", NAN, "%.1f GB/s: %d GPUs, %.0f MiB fp32 each, %.3f ms",
                  p.allreduce_busbw * 1e-9, ndev, (double)p.bytes / (1 << 20), p.allreduce_ms);
    sl_dr_measure(d, "nccl_alltoall", "NCCL all-to-all bus bandwidth", p.alltoall_busbw * 1e-9,
                  "GB/s", NAN, "%.1f GB/s: %d GPUs, %.0f MiB sent by each, %.3f ms",
                  p.alltoall_busbw * 1e-9, ndev, (double)p.bytes / (1 << 20), p.alltoall_ms);
}

#endif
