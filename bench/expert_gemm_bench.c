/*
 * bench/expert_gemm_bench.c - the expert GEMMs of one MoE layer on the CUDA backend, under each
 * strategy of moe/grouped_matmul.cu (SL_EXPERT_GEMM_*: one cuBLAS grouped call, one
 * cublasGemmEx per expert on the stream or spread over the side lanes, a grouped TF32 call on
 * widened inputs for the weight gradient, and auto, the per-call choice a run gets), at
 * the row counts per expert that matter (issue 23): 256 (one GPU, 4096 tokens per micro-batch,
 * top-8 of 128 experts) and 2048 (the per-GPU expert load of an EP-8 deployment).
 *
 * For each rows-per-expert value R it times the six GEMMs the MoE block runs per micro-batch
 * (forward gate_up and down, their data gradients, their weight gradients into fp32 in bf16
 * training) through sl_op_grouped_matmul / sl_op_grouped_matmul_dw, each strategy in turn,
 * timed between two sl_backend_synchronize calls over --reps calls after two warm-up calls, and
 * prints the median time and TFLOP/s per GEMM and strategy, and how each call ran (auto's
 * choice; cuBLAS may refuse the grouped bf16-into-fp32 call, and then the per-expert path runs).
 * Counts: R per expert on average, spread deterministically over [R/2, 3R/2) (routing is never
 * exactly balanced), or exactly R with --uniform.
 *
 * Then the two weight gradients over a pair of micro-batches (sl_op_grouped_matmul_dw_segments,
 * one pass over dW for twice the rows: the wgmma strategy's one kernel, two calls elsewhere),
 * the first projection with its activation (sl_op_grouped_matmul_swiglu, "gate_up+SwiGLU": what
 * a training step runs with SLUICE_EXPERT_GEMM_SWIGLU=1; the Hopper kernel's fused epilogue, two
 * ops elsewhere), and the weight gradients over four micro-batches ("dW x4": one pass over dW
 * for four times the rows, training.expert_wgrad_group 4).
 *
 * --ablate (bench/expert_gemm_ablate.c): the Hopper kernel's GEMMs whole and with parts left
 * out, to place the time inside the kernel without hardware counters.
 *
 * --check (small shapes, for CI under the emulated CUDA build): every strategy's outputs must
 * agree with the CPU backend's within bf16 rounding (fp32: 1e-4 relative), and the first
 * projection with its activation (sl_op_grouped_matmul_swiglu) bitwise with the same
 * strategy's two ops; a failure exits 1. The widths default to the 15A2B config's (hidden 2048,
 * expert FFN 768, 128 experts).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "bench/bench_util.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "moe/kernels_cuda.h"
#include "bench/expert_gemm_bench.h"

/* --strategy all: the named ones, then auto (what a run gets), whose path column says what it
 * chose */
static const int k_all_strategies[NSTRATEGIES] = {
    SL_EXPERT_GEMM_GROUPED, SL_EXPERT_GEMM_PER_EXPERT, SL_EXPERT_GEMM_GROUPED_TF32,
    SL_EXPERT_GEMM_LANES,   SL_EXPERT_GEMM_PADDED,     SL_EXPERT_GEMM_WGMMA,
    SL_EXPERT_GEMM_AUTO};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: expert_gemm_bench [--rows R[,R...]] [--experts E] [--hidden H] [--ffn F]\n"
        "                         [--dtype bf16|f32] [--reps N] [--uniform]\n"
        "                         [--strategy NAME|all] [--check] [--ablate]\n"
        "  --rows      rows per expert on average (default 256,2048: one GPU at 4096 tokens,\n"
        "              and an EP-8 deployment's per-GPU expert load)\n"
        "  --experts   experts on this GPU (default 128); --hidden (2048), --ffn (768)\n"
        "  --dtype     activations and weights (default bf16; weight gradients are fp32)\n"
        "  --reps      timed calls per GEMM and strategy (default 10)\n"
        "  --uniform   exactly R rows per expert (default: spread over [R/2, 3R/2))\n"
        "  --strategy  one strategy (auto, grouped, per-expert, grouped-tf32, lanes, padded,\n"
        "              wgmma: moe/kernels_cuda.h, SLUICE_EXPERT_GEMM) or all (default: each named\n"
        "              one, then auto, whose path column says what it chose)\n"
        "  --check     small shapes; the strategies' outputs must agree (exit 1 if not)\n"
        "  --ablate    the Hopper kernel's GEMMs (strategy wgmma) timed whole, without their\n"
        "              epilogue, without their loads and with neither: what each part costs\n"
        "              where it does not overlap the rest (exit 1 if the kernel did not run);\n"
        "              the first projection with its activation fused (as\n"
        "              SLUICE_EXPERT_GEMM_SWIGLU=1) beside it unfused\n");
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.experts = 128,
                .hidden = 2048,
                .ffn = 768,
                .reps = 10,
                .rows = {256, 2048},
                .nrows = 2,
                .dtype = SL_BF16,
                .nstrategies = NSTRATEGIES};
    memcpy(o->strategies, k_all_strategies, sizeof k_all_strategies);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--uniform") == 0) {
            o->uniform = true;
        } else if (strcmp(a, "--check") == 0) {
            o->check = true;
        } else if (strcmp(a, "--ablate") == 0) {
            o->ablate = true;
        } else if (!v) {
            fprintf(stderr, "expert_gemm_bench: %s needs a value (or is unknown)\n", a);
            return -1;
        } else if (strcmp(a, "--rows") == 0) {
            o->nrows = 0;
            for (char *p = argv[++i]; *p && o->nrows < 8;) {
                char *end;
                const long r = strtol(p, &end, 10);
                if (end == p || r < 1 || r > (1 << 20)) {
                    fprintf(stderr, "expert_gemm_bench: --rows %s: expected positive integers\n",
                            v);
                    return -1;
                }
                o->rows[o->nrows++] = (int)r;
                p = *end == ',' ? end + 1 : end;
            }
        } else if (strcmp(a, "--experts") == 0 || strcmp(a, "--hidden") == 0 ||
                   strcmp(a, "--ffn") == 0 || strcmp(a, "--reps") == 0) {
            char *end;
            const long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > (1 << 20)) {
                fprintf(stderr, "expert_gemm_bench: %s %s: expected a positive integer\n", a, v);
                return -1;
            }
            *(a[2] == 'e'   ? &o->experts
              : a[2] == 'h' ? &o->hidden
              : a[2] == 'f' ? &o->ffn
                            : &o->reps) = (int)n;
        } else if (strcmp(a, "--dtype") == 0) {
            i++;
            if (strcmp(v, "bf16") == 0)
                o->dtype = SL_BF16;
            else if (strcmp(v, "f32") == 0)
                o->dtype = SL_F32;
            else {
                fprintf(stderr, "expert_gemm_bench: --dtype %s: expected bf16 or f32\n", v);
                return -1;
            }
        } else if (strcmp(a, "--strategy") == 0) {
            i++;
            int s;
            if (strcmp(v, "all") == 0) {
                o->nstrategies = NSTRATEGIES;
                memcpy(o->strategies, k_all_strategies, sizeof k_all_strategies);
            } else if (sl_cuda_expert_gemm_parse(v, &s)) {
                o->strategies[0] = s, o->nstrategies = 1;
            } else {
                fprintf(stderr,
                        "expert_gemm_bench: --strategy %s: expected auto, grouped, "
                        "per-expert, grouped-tf32, lanes, padded or all\n",
                        v);
                return -1;
            }
        } else {
            fprintf(stderr, "expert_gemm_bench: unknown option %s\n", a);
            return -1;
        }
    }
    if (o->check && o->ablate) {
        fprintf(stderr, "expert_gemm_bench: --check and --ablate are two runs: give one\n");
        return -1;
    }
    if (o->check) {
        o->experts = 6, o->hidden = 24, o->ffn = 16, o->reps = 1, o->nrows = 1, o->rows[0] = 5;
        o->nstrategies = NSTRATEGIES;
        memcpy(o->strategies, k_all_strategies, sizeof k_all_strategies);
    }
    return 0;
}

/* A tensor of `dt` with values uniform in [-scale, scale) from a fixed generator. */
static sl_tensor *random_tensor(sl_backend *be, sl_dtype dt, int ndim, const int64_t *shape,
                                float scale, uint64_t *state) {
    sl_tensor *t = sl_tensor_new(be, dt, ndim, shape), *f = sl_tensor_new(be, SL_F32, ndim, shape);
    const int64_t n = sl_tensor_numel(t);
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = scale * (2.0f * (float)(*state >> 40) / (float)(1 << 24) - 1.0f);
    }
    sl_tensor_from_host(f, h);
    sl_op_convert(t, f);
    free(h);
    sl_tensor_free(f);
    return t;
}

void layer_init(layer *L, sl_backend *be, const opts *o, int rows) {
    memset(L, 0, sizeof *L);
    L->e = o->experts, L->h = o->hidden, L->f = o->ffn;
    L->counts = malloc(sizeof(int64_t) * (size_t)L->e);
    L->counts2 = malloc(sizeof(int64_t) * (size_t)L->e);
    uint64_t s = 0x5eed;
    for (int g = 0; g < L->e; g++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        L->counts[g] = o->uniform || rows < 2 ? rows : rows / 2 + (int64_t)((s >> 33) % rows);
        if (o->check && g % 33 == 1) L->counts[g] = 0; /* experts no token chose */
        L->n += L->counts[g];
    }
    for (int g = 0; g < L->e; g++) L->counts2[g] = L->counts[L->e - 1 - g];
    const sl_dtype dt = o->dtype;
    const int64_t h = L->h, f = L->f, n = L->n, e = L->e;
    uint64_t st = 42;
    L->x = random_tensor(be, dt, 2, (int64_t[]){n, h}, 1.0f, &st);
    L->wgu = random_tensor(be, dt, 3, (int64_t[]){e, 2 * f, h}, 0.02f, &st);
    L->wd = random_tensor(be, dt, 3, (int64_t[]){e, h, f}, 0.02f, &st);
    L->mid = random_tensor(be, dt, 2, (int64_t[]){n, f}, 1.0f, &st);
    L->dy = random_tensor(be, dt, 2, (int64_t[]){n, h}, 1.0f, &st);
    L->dgu = random_tensor(be, dt, 2, (int64_t[]){n, 2 * f}, 1.0f, &st);
    L->gu = sl_tensor_new2(be, dt, n, 2 * f);
    L->y = sl_tensor_new2(be, dt, n, h);
    L->dmid = sl_tensor_new2(be, dt, n, f);
    L->dx = sl_tensor_new2(be, dt, n, h);
    L->gwgu = sl_tensor_new3(be, SL_F32, e, 2 * f, h);
    L->gwd = sl_tensor_new3(be, SL_F32, e, h, f);
    sl_op_fill(L->gwgu, 0.0f), sl_op_fill(L->gwd, 0.0f);
}

enum { TENSORS = 12 };
/* The addresses of the layer's tensors, for whatever is done to all of them. */
static void layer_tensors(layer *L, sl_tensor **out[TENSORS]) {
    sl_tensor **ts[TENSORS] = {&L->x,  &L->wgu,  &L->wd,  &L->gu, &L->mid,  &L->y,
                               &L->dy, &L->dmid, &L->dgu, &L->dx, &L->gwgu, &L->gwd};
    memcpy(out, ts, sizeof ts);
}

void layer_free(layer *L) {
    sl_tensor **ts[TENSORS];
    layer_tensors(L, ts);
    for (int i = 0; i < TENSORS; i++) sl_tensor_free(*ts[i]);
    free(L->counts);
    free(L->counts2);
}

/* The six GEMMs, then the two weight gradients over a pair of micro-batches
 * (sl_op_grouped_matmul_dw_segments, training.defer_expert_wgrad): the same rows twice, grouped
 * by the counts and then by the counts reversed, so twice the FLOPs of one dW into one pass
 * over the fp32 gradients; the fused first projection; the weight gradients over four
 * micro-batches (counts, reversed, counts, reversed: four times the FLOPs, one pass). */
const char *const k_gemm_names[GEMMS] = {"gate_up fwd",   "down fwd",        "down dgrad",
                                         "gate_up dgrad", "down dW",         "gate_up dW",
                                         "down dW pair",  "gate_up dW pair", "gate_up+SwiGLU",
                                         "down dW x4",    "gate_up dW x4"};

/* The weight gradient dW += sum dY_i^T X_i over `n` micro-batches of the same rows, grouped by
 * the counts and the counts reversed in turn. */
static void dw_group(layer *L, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x, int n) {
    sl_dw_segment segs[SL_DW_MAX_SEGMENTS];
    for (int i = 0; i < n; i++)
        segs[i] = (sl_dw_segment){dy, x, sl_counts_host(i % 2 ? L->counts2 : L->counts, L->e)};
    sl_op_grouped_matmul_dw_segments(dw, segs, n, L->e, 1.0f, NULL);
}

/* Runs GEMM i of the layer once. */
void run_gemm(layer *L, int i) {
    switch (i) {
    case 0:
        sl_op_grouped_matmul(L->gu, L->x, L->wgu, sl_counts_host(L->counts, L->e), L->e, true,
                             0.0f);
        break;
    case 1:
        sl_op_grouped_matmul(L->y, L->mid, L->wd, sl_counts_host(L->counts, L->e), L->e, true,
                             0.0f);
        break;
    case 2:
        sl_op_grouped_matmul(L->dmid, L->dy, L->wd, sl_counts_host(L->counts, L->e), L->e, false,
                             0.0f);
        break;
    case 3:
        sl_op_grouped_matmul(L->dx, L->dgu, L->wgu, sl_counts_host(L->counts, L->e), L->e, false,
                             0.0f);
        break;
    case 4:
        sl_op_grouped_matmul_dw(L->gwd, L->dy, L->mid, sl_counts_host(L->counts, L->e), L->e, 1.0f,
                                NULL);
        break;
    case 5:
        sl_op_grouped_matmul_dw(L->gwgu, L->dgu, L->x, sl_counts_host(L->counts, L->e), L->e, 1.0f,
                                NULL);
        break;
    case 6:
        dw_group(L, L->gwd, L->dy, L->mid, 2);
        break;
    case 7:
        dw_group(L, L->gwgu, L->dgu, L->x, 2);
        break;
    case 9:
        dw_group(L, L->gwd, L->dy, L->mid, 4);
        break;
    case 10:
        dw_group(L, L->gwgu, L->dgu, L->x, 4);
        break;
    default:
        sl_op_grouped_matmul_swiglu(L->mid, L->gu, L->x, L->wgu, sl_counts_host(L->counts, L->e),
                                    L->e);
        break;
    }
}

sl_tensor *gemm_output(layer *L, int i) {
    sl_tensor *out[GEMMS] = {L->gu,  L->y,    L->dmid, L->dx,  L->gwd, L->gwgu,
                             L->gwd, L->gwgu, L->mid,  L->gwd, L->gwgu};
    return out[i];
}

double gemm_flops(const layer *L, int i) {
    const double n = (double)L->n, h = L->h, f = L->f;
    const double per[GEMMS] = {2 * n * h * 2 * f, 2 * n * f * h,     2 * n * h * f,
                               2 * n * 2 * f * h, 2 * n * h * f,     2 * n * 2 * f * h,
                               4 * n * h * f,     4 * n * 2 * f * h, 2 * n * h * 2 * f,
                               8 * n * h * f,     8 * n * 2 * f * h};
    return per[i];
}

/* A new fp32 tensor on `be` shaped like t. */
static sl_tensor *new_f32_like(sl_backend *be, const sl_tensor *t) {
    int64_t shape[4];
    for (int d = 0; d < sl_tensor_ndim(t); d++) shape[d] = sl_tensor_dim(t, d);
    return sl_tensor_new(be, SL_F32, sl_tensor_ndim(t), shape);
}

/* Host copy of a tensor as fp32 (converted on the device first). */
float *to_host_f32(sl_tensor *t) {
    sl_tensor *f = new_f32_like(sl_tensor_backend(t), t);
    sl_op_convert(f, t);
    float *h = malloc(sizeof(float) * (size_t)sl_tensor_numel(t));
    sl_tensor_to_host(f, h);
    sl_tensor_free(f);
    return h;
}

/* An fp32 copy of `t` on backend `to`. */
static sl_tensor *copy_f32(sl_backend *to, sl_tensor *t) {
    sl_tensor *c = new_f32_like(to, t);
    float *h = to_host_f32(t);
    sl_tensor_from_host(c, h);
    free(h);
    return c;
}

/* The CPU backend the checks compare with, or NULL (said on stderr). */
static sl_backend *cpu_backend(void) {
    char err[256];
    sl_backend *cpu = sl_backend_create("cpu", NULL, err, sizeof err);
    if (!cpu) fprintf(stderr, "expert_gemm_bench: backend cpu: %s\n", err);
    return cpu;
}

/* max |got - want| / max |want| over n values (*scale: max |want|). */
static double rel_error(const float *got, const float *want, int64_t n, double *scale) {
    double worst = 0;
    *scale = 0;
    for (int64_t k = 0; k < n; k++) *scale = fmax(*scale, fabs(want[k]));
    for (int64_t k = 0; k < n; k++)
        worst = fmax(worst, fabs((double)got[k] - want[k]) / fmax(*scale, 1e-30));
    return worst;
}

/* --check: every GEMM under each strategy against the CPU backend in fp32 on the same (rounded)
 * inputs. The weight gradients start from the same non-zero value (they accumulate into it). */
static int check(sl_backend *be, const opts *o) {
    sl_backend *cpu = cpu_backend();
    if (!cpu) return 1;
    layer L, R;
    layer_init(&L, be, o, o->rows[0]);
    R = L; /* the same counts and sizes; every tensor replaced by its CPU fp32 copy */
    sl_tensor **lt[TENSORS], **rt[TENSORS];
    layer_tensors(&L, lt), layer_tensors(&R, rt);
    for (int k = 0; k < TENSORS; k++) *rt[k] = copy_f32(cpu, *lt[k]);
    int failures = 0;
    for (int i = 0; i < GEMMS; i++) {
        if (i == GEMM_SWIGLU) continue; /* the fused SwiGLU: check_swiglu */
        if (gemm_is_dw(i)) sl_op_fill(gemm_output(&R, i), 0.25f); /* dW accumulates: += */
        run_gemm(&R, i);
        const int64_t numel = sl_tensor_numel(gemm_output(&L, i));
        float *ref = malloc(sizeof(float) * (size_t)numel);
        sl_tensor_to_host(gemm_output(&R, i), ref);
        for (int s = 0; s < o->nstrategies; s++) {
            sl_cuda_expert_gemm_set_strategy(o->strategies[s]);
            if (gemm_is_dw(i)) sl_op_fill(gemm_output(&L, i), 0.25f);
            run_gemm(&L, i);
            float *got = to_host_f32(gemm_output(&L, i));
            /* bf16 outputs round by 2^-9 relative; fp32 ones differ by summation order */
            const double rtol = !gemm_is_dw(i) && o->dtype == SL_BF16 ? 1.0 / 128 : 1e-4;
            double scale;
            const double worst = rel_error(got, ref, numel, &scale);
            const bool ok = worst <= rtol && scale > 0;
            printf("%-4s %-14s %-12s vs cpu: max |diff| / max |ref| = %.3g (bound %.3g)%s%s\n",
                   ok ? "OK" : "FAIL", k_gemm_names[i], sl_cuda_expert_gemm_name(o->strategies[s]),
                   worst, rtol, "; ran ",
                   gemm_is_dw(i) ? sl_cuda_expert_gemm_dw_path() : sl_cuda_expert_gemm_last_path());
            failures += !ok;
            free(got);
        }
        free(ref);
    }
    for (int k = 0; k < TENSORS; k++) sl_tensor_free(*rt[k]);
    layer_free(&L);
    sl_backend_free(cpu);
    return failures ? 1 : 0;
}

/* --check, then: the first projection with the activation (sl_op_grouped_matmul_swiglu) under
 * each strategy against the CPU backend (gu and h), and bitwise against the same strategy's
 * two ops (grouped_matmul, then swiglu_fwd over the routed rows): the fused epilogue of the
 * Hopper kernel must give what its plain GEMM and the activation kernel give. Where the plain
 * GEMM ran on the Hopper kernel, the fused call must have run there too (its path says so)
 * with SLUICE_EXPERT_GEMM_SWIGLU=1, and must not have by default or with 0. */
static int check_swiglu(sl_backend *be, const opts *o) {
    sl_backend *cpu = cpu_backend();
    if (!cpu) return 1;
    layer L;
    layer_init(&L, be, o, o->rows[0]);
    const sl_group_counts k = sl_counts_host(L.counts, L.e);
    sl_tensor *rx = copy_f32(cpu, L.x), *rw = copy_f32(cpu, L.wgu);
    sl_tensor *rgu = new_f32_like(cpu, L.gu), *rh = new_f32_like(cpu, L.mid);
    sl_op_grouped_matmul_swiglu(rh, rgu, rx, rw, k, L.e);
    sl_tensor *ref[2] = {rgu, rh}, *fused[2] = {L.gu, L.mid};
    sl_tensor *apart[2] = {sl_tensor_new2(be, o->dtype, L.n, 2 * L.f),
                           sl_tensor_new2(be, o->dtype, L.n, L.f)};
    static const char *const names[2] = {"gate_up+swiglu", "  (its h)"};
    const bool fusion_on = sl_cuda_expert_gemm_swiglu_fused();
    int failures = 0;
    for (int s = 0; s < o->nstrategies; s++) {
        sl_cuda_expert_gemm_set_strategy(o->strategies[s]);
        sl_op_grouped_matmul(apart[0], L.x, L.wgu, k, L.e, true, 0.0f);
        /* where the plain GEMM ran on the Hopper kernel, the fused one must too if
         * SLUICE_EXPERT_GEMM_SWIGLU=1 turned the fusion on (else it must not) */
        const bool fuse = strcmp(sl_cuda_expert_gemm_last_path(), "wgmma") == 0 && fusion_on;
        sl_op_swiglu_fwd(apart[1], apart[0]);
        sl_op_grouped_matmul_swiglu(L.mid, L.gu, L.x, L.wgu, k, L.e);
        const char *path = sl_cuda_expert_gemm_last_path();
        const bool path_ok = fuse == (strcmp(path, "wgmma + SwiGLU") == 0);
        for (int t = 0; t < 2; t++) {
            const int64_t numel = sl_tensor_numel(ref[t]);
            float *want = malloc(sizeof(float) * (size_t)numel);
            sl_tensor_to_host(ref[t], want);
            float *got = to_host_f32(fused[t]), *two = to_host_f32(apart[t]);
            /* bf16: gu rounds by 2^-9 relative, h by its own rounding after gu's */
            const double rtol = o->dtype == SL_BF16 ? 1.0 / 64 : 1e-4;
            double scale;
            const double worst = rel_error(got, want, numel, &scale);
            const bool same = memcmp(got, two, sizeof(float) * (size_t)numel) == 0;
            const bool ok = worst <= rtol && scale > 0 && same && path_ok;
            printf("%-4s %-14s %-12s vs cpu: max |diff| / max |ref| = %.3g (bound %.3g); "
                   "%s the two ops; ran %s\n",
                   ok ? "OK" : "FAIL", names[t], sl_cuda_expert_gemm_name(o->strategies[s]), worst,
                   rtol, same ? "bitwise" : "NOT bitwise", path);
            failures += !ok;
            free(want), free(got), free(two);
        }
    }
    sl_tensor *ts[] = {rx, rw, rgu, rh, apart[0], apart[1]};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    layer_free(&L);
    sl_backend_free(cpu);
    return failures ? 1 : 0;
}

double time_gemm(sl_backend *be, layer *L, int i, int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int r = -2; r < reps; r++) {
        sl_backend_synchronize(be);
        const double t0 = sl_bench_now();
        run_gemm(L, i);
        sl_backend_synchronize(be);
        if (r >= 0) t[r] = sl_bench_now() - t0;
    }
    const double med = sl_bench_median(t, reps);
    free(t);
    return med;
}

static void bench(sl_backend *be, const opts *o, int rows) {
    layer L;
    layer_init(&L, be, o, rows);
    printf("\nrows per expert %d (%s): %lld rows, %d experts, hidden %d, ffn %d, %s\n", rows,
           o->uniform ? "uniform" : "spread over [R/2, 3R/2)", (long long)L.n, L.e, L.h, L.f,
           sl_dtype_name(o->dtype));
    printf("%-14s %-12s %10s %9s  %s\n", "GEMM", "strategy", "median ms", "TFLOP/s", "path");
    double total[NSTRATEGIES] = {0}; /* per strategy, the six GEMMs */
    for (int i = 0; i < GEMMS; i++)
        for (int s = 0; s < o->nstrategies; s++) {
            sl_cuda_expert_gemm_set_strategy(o->strategies[s]);
            const double med = time_gemm(be, &L, i, o->reps);
            if (i < SIX) total[s] += med;
            printf("%-14s %-12s %10.3f %9.1f  %s\n", k_gemm_names[i],
                   sl_cuda_expert_gemm_name(o->strategies[s]), med * 1e3,
                   gemm_flops(&L, i) / med / 1e12,
                   gemm_is_dw(i) ? sl_cuda_expert_gemm_dw_path() : sl_cuda_expert_gemm_last_path());
        }
    double flops = 0;
    for (int i = 0; i < SIX; i++) flops += gemm_flops(&L, i);
    for (int s = 0; s < o->nstrategies; s++)
        printf("%-14s %-12s %10.3f %9.1f\n", "all six", sl_cuda_expert_gemm_name(o->strategies[s]),
               total[s] * 1e3, flops / total[s] / 1e12);
    layer_free(&L);
}

int main(int argc, char **argv) {
    opts o;
    if (parse(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    /* --ablate's "gate_up+SwiGLU" rows are the fused kernel's, whatever the default */
    if (o.ablate) setenv("SLUICE_EXPERT_GEMM_SWIGLU", "1", 1);
    char err[512];
    sl_backend_params bp = {.threads = 0, .device = -1, .allow_nondeterministic = false};
    sl_backend *be = sl_backend_create("cuda", &bp, err, sizeof err);
    if (!be) {
        fprintf(stderr, "expert_gemm_bench: backend cuda: %s\n", err);
        /* --check, --ablate: no device is a skip, as for the gpu tests */
        return o.check || o.ablate ? 77 : 1;
    }
    int rc = 0;
    if (o.check) {
        rc = check(be, &o) | check_swiglu(be, &o);
        /* and shapes past one tile of the wgmma kernel (128 rows, 256 or 128 columns, 64 of
         * the reduction) with a tail in every dimension (the fused SwiGLU: 144 columns, one
         * 256-wide tile of two 128-column halves, the second half's tail past the up rows) */
        o.experts = 3, o.hidden = 136, o.ffn = 72, o.rows[0] = 150;
        rc |= check(be, &o) | check_swiglu(be, &o);
        /* and more experts than a warp (the wgmma kernel's prefix sums of the counts run over
         * chunks of 32), rows not a multiple of 8 */
        o.experts = 70, o.hidden = 16, o.ffn = 8, o.rows[0] = 3;
        rc |= check(be, &o) | check_swiglu(be, &o);
        /* the fused SwiGLU with two column tiles, the second a partial one (I 200: 128 + 72) */
        o.experts = 2, o.hidden = 64, o.ffn = 200, o.rows[0] = 40;
        rc |= check_swiglu(be, &o);
    } else if (o.ablate) {
        for (int r = 0; r < o.nrows && rc != 77; r++) {
            const int a = ablate(be, &o, o.rows[r]);
            rc = a == 77 ? 77 : rc | a;
        }
        if (rc != 77) rc |= ablate_check(be, &o);
    } else
        for (int r = 0; r < o.nrows; r++) bench(be, &o, o.rows[r]);
    sl_backend_free(be);
    return rc;
}
