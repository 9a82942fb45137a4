/*
 * bench/attn_bench.c - throughput and correctness of the gated attention operation
 * (sl_op_gated_attn_fwd/bwd, core/ops.h) on one backend, at any shape.
 *
 *   attn_bench [--backend cpu|cuda] [--kernel NAME[,NAME...]] [--dtype f32|bf16] [--batch B]
 *              [--seq S] [--heads H] [--kv-heads KV] [--head-dim D]
 *              [--gate elementwise|headwise|none] [--doc-lengths a,b,...] [--iters N]
 *              [--warmup N] [--nondeterministic] [--check] [--corrupt OUTPUT]
 *
 * Kernels (CUDA backend; attention/attn_kernels.h): --kernel runs the named attention kernels one
 * after the other in this process, each on a backend of its own (sl_backend_set_attn_kernel):
 * "auto" (what training runs), "sluice", "cudnn", or a kernel of this build by name (--help lists
 * them; "mma", "simt", ...). Without --kernel the timing runs "auto" and, when this node has
 * libcudnn 9, "cudnn" (cuDNN's SDPA plus sluice's gate) at the same shapes, and prints each sluice
 * run's speed against cuDNN's; --check runs "auto" only. A kernel that cannot load (no libcudnn,
 * the emulated build) is reported and skipped; a kernel that cannot run a shape stops the run
 * with the reason. The cudnn kernel always runs with nondeterministic kernels allowed (its
 * backward needs it).
 *
 * Timing (without --check): `--warmup` untimed forward + backward passes, then `--iters` timed
 * ones; the forward and the backward are each timed between two sl_backend_synchronize calls,
 * and the median of each is reported, with TFLOP/s under this convention (printed too):
 *   forward FLOPs  = 4 * B * H * D * P: two matmuls (Q K^T and P V) of 2 FLOPs per
 *                    multiply-add over P (query, key) pairs, where P = S^2 / 2 for causal
 *                    attention (causal FLOPs counted as half, the FlashAttention convention),
 *                    or the sum of L^2 / 2 over the documents of a sequence with --doc-lengths;
 *   backward FLOPs = 2.5 x the forward (FlashAttention-2: five matmuls for the forward's two).
 * The gate, the softmax and the masking are not counted. Without a shape option the paper's
 * shapes run: H 32, KV 4, D 128 and 64, S 4096 and 32768, batch 1; a shape whose tensors do not
 * fit the backend's free memory is skipped with a message. Each shape prints a table row and a
 * JSON line (for bench/run_gpu_bench.sh).
 *
 * --check (instead of timing): one forward and one backward on the chosen backend, compared
 * with a reference: the CPU backend's kernel for any other backend (inputs rounded to --dtype,
 * so both compute on the same values), and for the CPU backend itself the bench's own double
 * loops (bench/attn_bench_ref.c). Per output (y, o, lse, dq, dk, dv, dg) it prints the largest
 * absolute error, the largest |reference|, err/norm with norm = max(max |reference|, 1) (an
 * output whose reference is all near zero, like dq and dk at seq 1, is compared absolutely:
 * the inputs are standard normal, so the outputs are O(1)), the tolerance on err/norm (k_tol
 * below), then PASS or FAIL; exit status 1 on any FAIL. --corrupt OUTPUT adds
 * 4 x tolerance x max |reference| to element 0 of that output before the comparison, so the
 * test suite can prove the check fails when it should.
 *
 * Exit status: 0 done (and passed), 1 a check failed or a run failed, 2 bad options, 77 the
 * backend is not built in or has no device, or none of the kernels asked for could be loaded
 * (ctest's skip code).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backends.h"
#include "bench/attn_bench_ref.h"
#include "bench/bench_util.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"
#ifdef SLUICE_WITH_CUDA
#include "attention/attn_kernels.h"
#include "core/cuda_peak.h"
#endif

#define GIB ((double)(1ULL << 30))
enum { MAX_DOCS = 64, CHUNK = 1 << 22, MAX_KERNELS = 8, MAX_SHAPES = 4 };

/* Tolerance on max |err| / max(max |ref|, 1) per output, by dtype (bench/README.md has the
 * measurements). f32: the worst measured is 1.1e-6 (CPU against its double loops, the emulated
 * CUDA kernel against the CPU), so 1e-4 leaves room for any fp32 accumulation order. bf16: both
 * sides start from the same bf16-rounded inputs; the device stores y, o, dq, dk, dv, dg in bf16
 * (2^-9 relative each) and its backward reads the bf16 o; the worst measured is 4.2e-3 (SIMT
 * kernel), and 2e-2 also covers a tensor-core kernel's bf16 P operand. */
static const struct { double f32, bf16; } k_tol = {1e-4, 2e-2};

static const char *const k_outputs[] = {"y", "o", "lse", "dq", "dk", "dv", "dg"};
enum { N_OUT = 7 };

typedef struct {
    int batch, seq, heads, kv, d;
} shape;

typedef struct {
    const char *backend, *corrupt;
    sl_dtype dt;
    sl_gate_mode gate;
    int iters, warmup, ndocs, nkernels;
    int docs[MAX_DOCS];
    char kernels[MAX_KERNELS][32]; /* --kernel, in order */
    bool check, nondeterministic, shape_given;
    shape s; /* the given shape (defaults for the options not given) */
} options;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attn_bench [--backend cpu|cuda] [--kernel NAME[,NAME...]] [--dtype f32|bf16]\n"
        "                  [--batch B] [--seq S] [--heads H] [--kv-heads KV] [--head-dim D]\n"
        "                  [--gate elementwise|headwise|none] [--doc-lengths a,b,...]\n"
        "                  [--iters N] [--warmup N] [--nondeterministic] [--check]\n"
        "                  [--corrupt OUTPUT]\n"
        "  --backend B       default cuda when built in, else cpu\n"
        "  --kernel K,...    attention kernels to run, one after the other, each on its own\n"
        "                    backend: auto (what training runs), sluice, cudnn, or a kernel by\n"
        "                    name (below); repeatable. Default: auto, plus cudnn when libcudnn 9\n"
        "                    loads (timing only), with sluice's speed relative to cuDNN's\n"
        "  --dtype T         operand dtype: f32, or bf16 (not on cpu); default bf16 on cuda\n"
        "  --batch ... --head-dim  one shape (defaults B 1, S 4096, H 32, KV 4, D 128); without\n"
        "                    any of them: S 4096 and 32768 x D 128 and 64 (H 32, KV 4, B 1)\n"
        "  --gate G          output gate (default elementwise)\n"
        "  --doc-lengths L   per-document masking: each sequence is cut into documents of these\n"
        "                    lengths, repeated from its first token (the last one truncated)\n"
        "  --iters N         timed passes (default 10); --warmup N untimed ones (default 2)\n"
        "  --nondeterministic  let the backend use its faster atomic variants (e.g. dQ)\n"
        "  --check           compare with the CPU backend (or, on cpu, the bench's double\n"
        "                    loops); print errors, exit 1 beyond the tolerance; no timing\n"
        "  --corrupt OUTPUT  with --check: perturb OUTPUT (y o lse dq dk dv dg) to prove the\n"
        "                    check fails\n"
        "FLOPs: forward 4*B*H*D*S^2/2 (causal counted as half; with documents sum L^2/2 per\n"
        "sequence in place of S^2/2), backward 2.5x forward (FlashAttention-2 convention).\n");
#ifdef SLUICE_WITH_CUDA
    fprintf(f, "Attention kernels of this build's cuda backend (--kernel NAME):\n");
    for (int i = 0; i < sl_attn_kernel_count(); i++) {
        const sl_attn_kernel_info *k = sl_attn_kernel_at(i);
        fprintf(f, "  %-8s %-7s %s\n", k->name, k->family, k->summary);
    }
#ifdef SLUICE_CUDA_EMULATED
    fprintf(f, "(emulated build: every sluice kernel runs on the CPU SIMT test double; cudnn does "
               "not load)\n");
#endif
#else
    fprintf(f, "This build has no cuda backend: the cpu backend has one attention kernel.\n");
#endif
}

static int bad(const char *flag, const char *why, const char *v) {
    fprintf(stderr, "attn_bench: %s: %s '%s' (--help lists the options)\n", flag, why, v ? v : "");
    return -1;
}

static int parse_count(const char *flag, const char *v, int min, int *out) {
    char *end = NULL;
    const long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !end || *end || end == v || x < min || x > 100000000L)
        return min > 0 ? bad(flag, "needs an integer >= 1, got", v)
                       : bad(flag, "needs an integer >= 0, got", v);
    *out = (int)x;
    return 0;
}

static int parse_docs(const char *v, options *o) {
    o->ndocs = 0;
    for (const char *p = v; p && *p;) {
        char *end = NULL;
        const long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > 100000000L || (*end && *end != ',') || o->ndocs == MAX_DOCS)
            return bad("--doc-lengths", "needs up to 64 comma-separated lengths >= 1, got", v);
        o->docs[o->ndocs++] = (int)x;
        p = *end ? end + 1 : end;
    }
    return o->ndocs ? 0 : bad("--doc-lengths", "needs at least one length, got", v);
}
/* --kernel LIST: comma-separated names appended to o->kernels. */
static int parse_kernels(const char *v, options *o) {
    for (const char *p = v; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len >= sizeof o->kernels[0] || o->nkernels == MAX_KERNELS)
            return bad("--kernel", "needs up to 8 comma-separated kernel names, got", v);
        memcpy(o->kernels[o->nkernels], p, len);
        o->kernels[o->nkernels++][len] = '\0';
        p = end ? end + 1 : p + len;
    }
    return o->nkernels ? 0 : bad("--kernel", "needs a kernel name, got", v);
}

static int parse_options(int argc, char **argv, options *o) {
    *o = (options){.iters = 10, .warmup = 2, .gate = SL_GATE_ELEMENTWISE, .dt = SL_F32};
    o->s = (shape){.batch = 1, .seq = 4096, .heads = 32, .kv = 4, .d = 128};
#ifdef SLUICE_WITH_CUDA
    o->backend = "cuda";
#else
    o->backend = "cpu";
#endif
    const char *dtype = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *count = NULL, min = 1;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--check") == 0) {
            o->check = true;
            continue;
        } else if (strcmp(a, "--nondeterministic") == 0) {
            o->nondeterministic = true;
            continue;
        } else if (strcmp(a, "--backend") == 0) {
            o->backend = v;
        } else if (strcmp(a, "--dtype") == 0) {
            dtype = v;
            if (v && strcmp(v, "f32") != 0 && strcmp(v, "bf16") != 0)
                return bad(a, "expected f32 or bf16, got", v);
        } else if (strcmp(a, "--gate") == 0) {
            if (!v || sl_gate_mode_from_name(v, &o->gate) != 0)
                return bad(a, "expected elementwise, headwise or none, got", v);
        } else if (strcmp(a, "--doc-lengths") == 0) {
            if (parse_docs(v, o) != 0) return -1;
        } else if (strcmp(a, "--kernel") == 0) {
            if (parse_kernels(v, o) != 0) return -1;
        } else if (strcmp(a, "--corrupt") == 0) {
            o->corrupt = v;
            bool known = false;
            for (int k = 0; v && k < N_OUT; k++) known |= strcmp(v, k_outputs[k]) == 0;
            if (!known) return bad(a, "expected one of y o lse dq dk dv dg, got", v);
        } else if (strcmp(a, "--batch") == 0) {
            count = &o->s.batch;
        } else if (strcmp(a, "--seq") == 0) {
            count = &o->s.seq;
        } else if (strcmp(a, "--heads") == 0) {
            count = &o->s.heads;
        } else if (strcmp(a, "--kv-heads") == 0) {
            count = &o->s.kv;
        } else if (strcmp(a, "--head-dim") == 0) {
            count = &o->s.d;
        } else if (strcmp(a, "--iters") == 0) {
            count = &o->iters;
        } else if (strcmp(a, "--warmup") == 0) {
            count = &o->warmup, min = 0;
        } else {
            fprintf(stderr, "attn_bench: unknown option '%s' (--help lists the options)\n", a);
            return -1;
        }
        if (!v) return bad(a, "needs a value", "");
        if (count) {
            if (parse_count(a, v, min, count) != 0) return -1;
            if (count != &o->iters && count != &o->warmup) o->shape_given = true;
        }
        i++;
    }
    if (strcmp(o->backend, "cpu") != 0 && strcmp(o->backend, "cuda") != 0)
        return bad("--backend", "expected cpu or cuda, got", o->backend);
    const bool cpu = strcmp(o->backend, "cpu") == 0;
    o->dt = dtype ? (strcmp(dtype, "bf16") == 0 ? SL_BF16 : SL_F32) : cpu ? SL_F32 : SL_BF16;
    if (cpu && o->dt == SL_BF16)
        return bad("--dtype", "the cpu backend computes in f32 only:", "bf16");
    if (o->s.heads % o->s.kv != 0) {
        fprintf(stderr, "attn_bench: --heads %d is not a multiple of --kv-heads %d\n", o->s.heads,
                o->s.kv);
        return -1;
    }
    if (o->corrupt && !o->check)
        return bad("--corrupt", "only makes sense with --check:", o->corrupt);
    for (int i = 0; i < o->nkernels; i++) {
        const char *k = o->kernels[i];
        bool known = strcmp(k, "auto") == 0 || strcmp(k, "sluice") == 0;
        if (cpu && !known)
            return bad("--kernel", "the cpu backend has one attention kernel (auto, sluice), not",
                       k);
        known |= strcmp(k, "cudnn") == 0;
#ifdef SLUICE_WITH_CUDA
        for (int j = 0; j < sl_attn_kernel_count(); j++)
            known |= strcmp(k, sl_attn_kernel_at(j)->name) == 0;
#endif
        if (!known)
            return bad("--kernel", "unknown kernel (--help lists this build's kernels):", k);
    }
    return 0;
}

/* ---- the tensors of one shape ------------------------------------------------------------ */

typedef struct {
    shape s;
    int64_t t, nq, nk, ng; /* tokens, q elements, k elements, gate elements */
    sl_tensor *q, *k, *v, *g, *seg, *y, *o, *lse, *dy, *dq, *dk, *dv, *dg;
    sl_tensor *stage; /* f32 [CHUNK] for bf16 uploads and downloads */
} attn_set;

static int64_t gate_cols(sl_gate_mode m, int d) {
    return m == SL_GATE_ELEMENTWISE ? d : m == SL_GATE_HEADWISE ? 1 : 0;
}

/* Device bytes of an attn_set. */
static double set_bytes(const shape *s, sl_gate_mode gate, sl_dtype dt) {
    const double t = (double)s->batch * s->seq, es = (double)sl_dtype_size(dt);
    const double nq = t * s->heads * s->d, nk = t * s->kv * s->d;
    const double ng = t * s->heads * (double)gate_cols(gate, s->d);
    return es * (5 * nq + 4 * nk + 2 * ng) + 4.0 * (t * s->heads + t + CHUNK);
}

/* seg [B * S] from repeating document lengths, or NULL without them. */
static int32_t *build_seg(const options *o, const shape *s) {
    if (!o->ndocs) return NULL;
    int32_t *seg = sl_xmalloc(sizeof(int32_t) * (size_t)s->batch * (size_t)s->seq);
    for (int b = 0; b < s->batch; b++)
        for (int i = 0, start = 0, doc = 0; i < s->seq; i++) {
            if (i - start == o->docs[doc]) start = i, doc = (doc + 1) % o->ndocs;
            seg[(int64_t)b * s->seq + i] = start;
        }
    return seg;
}

/* (Query, key) pairs of one sequence and head in the FLOP convention: S^2 / 2 causal, or the sum
 * of L^2 / 2 over its documents. */
static double pairs_per_sequence(const options *o, int seq) {
    if (!o->ndocs) return 0.5 * (double)seq * seq;
    double p = 0.0;
    for (int i = 0, doc = 0; i < seq; doc = (doc + 1) % o->ndocs) {
        const int len = o->docs[doc] < seq - i ? o->docs[doc] : seq - i;
        p += 0.5 * (double)len * len;
        i += len;
    }
    return p;
}

/* Standard normal values, stream `stream` of a fixed seed, into t (any float dtype). */
static void fill_normal(attn_set *a, sl_tensor *t, uint64_t stream, float *host) {
    sl_rng rng;
    sl_rng_init(&rng, 20250117, stream);
    const int64_t n = sl_tensor_numel(t);
    for (int64_t off = 0; off < n; off += CHUNK) {
        const int64_t m = n - off < CHUNK ? n - off : CHUNK;
        for (int64_t i = 0; i < m; i++) host[i] = (float)sl_rng_normal(&rng);
        if (sl_tensor_dtype(t) == SL_F32) {
            sl_tensor_from_host_range(t, off, m, host);
            continue;
        }
        sl_tensor *src = sl_tensor_view1(a->stage, 0, m), *dst = sl_tensor_view1(t, off, m);
        sl_tensor_from_host(src, host);
        sl_op_convert(dst, src);
        sl_tensor_free(src);
        sl_tensor_free(dst);
    }
}

/* t (any float dtype) as fp32 values into host [numel]. */
static void download(attn_set *a, const sl_tensor *t, float *host) {
    if (sl_tensor_dtype(t) == SL_F32) {
        sl_tensor_to_host(t, host);
        return;
    }
    const int64_t n = sl_tensor_numel(t);
    for (int64_t off = 0; off < n; off += CHUNK) {
        const int64_t m = n - off < CHUNK ? n - off : CHUNK;
        sl_tensor *dst = sl_tensor_view1(a->stage, 0, m);
        sl_tensor *src = sl_tensor_view1((sl_tensor *)t, off, m);
        sl_op_convert(dst, src);
        sl_tensor_to_host(dst, host + off);
        sl_tensor_free(src);
        sl_tensor_free(dst);
    }
}

static void set_create(attn_set *a, sl_backend *be, sl_dtype dt, const shape *s, sl_gate_mode gate,
                       const int32_t *seg) {
    memset(a, 0, sizeof *a);
    a->s = *s;
    a->t = (int64_t)s->batch * s->seq, a->nq = a->t * s->heads * s->d, a->nk = a->t * s->kv * s->d;
    const int64_t gc = gate_cols(gate, s->d);
    a->ng = a->t * s->heads * gc;
    a->q = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->k = sl_tensor_new3(be, dt, a->t, s->kv, s->d);
    a->v = sl_tensor_new3(be, dt, a->t, s->kv, s->d);
    a->g = gc ? sl_tensor_new3(be, dt, a->t, s->heads, gc) : NULL;
    a->y = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->o = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->lse = sl_tensor_new2(be, SL_F32, a->t, s->heads);
    a->dy = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->dq = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->dk = sl_tensor_new3(be, dt, a->t, s->kv, s->d);
    a->dv = sl_tensor_new3(be, dt, a->t, s->kv, s->d);
    a->dg = gc ? sl_tensor_new3(be, dt, a->t, s->heads, gc) : NULL;
    a->stage = sl_tensor_new1(be, SL_F32, CHUNK);
    if (seg) {
        a->seg = sl_tensor_new1(be, SL_I32, a->t);
        sl_tensor_from_host(a->seg, seg);
    }
}

static void set_free(attn_set *a) {
    sl_tensor *all[] = {a->q,   a->k,  a->v,  a->g,  a->seg, a->y,  a->o,
                        a->lse, a->dy, a->dq, a->dk, a->dv,  a->dg, a->stage};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sl_tensor_free(all[i]);
}

static float scale_of(const shape *s) {
    return (float)(1.0 / sqrt((double)s->d));
}

static void forward(attn_set *a) {
    sl_op_gated_attn_fwd(a->y, a->o, a->lse, a->q, a->k, a->v, a->g, a->seg, a->s.batch, a->s.seq,
                         scale_of(&a->s));
}

static void backward(attn_set *a) {
    sl_op_gated_attn_bwd(a->dq, a->dk, a->dv, a->dg, a->dy, a->q, a->k, a->v, a->g, a->seg, a->o,
                         a->lse, a->s.batch, a->s.seq, scale_of(&a->s));
}

/* The output tensors in k_outputs order (dg NULL without a gate). */
static void outputs_of(const attn_set *a, const sl_tensor *out[N_OUT]) {
    const sl_tensor *o[N_OUT] = {a->y, a->o, a->lse, a->dq, a->dk, a->dv, a->dg};
    memcpy(out, o, sizeof o);
}

/* ---- --check ----------------------------------------------------------------------------- */

/* Host copies of every input as the backend holds them (rounded to its dtype). */
typedef struct {
    float *q, *k, *v, *g, *dy;
} host_inputs;

static void host_inputs_free(host_inputs *h) {
    free(h->q), free(h->k), free(h->v), free(h->g), free(h->dy);
}

/* Uploads host inputs into a set of the same shape (the reference's). */
static void upload_inputs(attn_set *a, const host_inputs *h) {
    sl_tensor_from_host(a->q, h->q);
    sl_tensor_from_host(a->k, h->k);
    sl_tensor_from_host(a->v, h->v);
    if (a->g) sl_tensor_from_host(a->g, h->g);
    sl_tensor_from_host(a->dy, h->dy);
}

static double *to_double(const float *x, int64_t n) {
    double *d = sl_xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* Fills ref[N_OUT] (NULL where absent) with the reference outputs for inputs h. */
static int reference(const options *o, const attn_set *a, const host_inputs *h, const int32_t *seg,
                     double *ref[N_OUT]) {
    const shape *s = &a->s;
    const int64_t n[N_OUT] = {a->nq, a->nq, a->t * s->heads, a->nq, a->nk, a->nk, a->ng};
    memset(ref, 0, sizeof(double *) * N_OUT);
    if (strcmp(o->backend, "cpu") == 0) {
        for (int i = 0; i < N_OUT; i++)
            if (n[i]) ref[i] = sl_xmalloc(sizeof(double) * (size_t)n[i]);
        const attn_ref_dims d = {
            s->batch, s->seq, s->heads, s->kv, s->d, o->gate, 1.0 / sqrt((double)s->d), seg};
        attn_ref_fwd(&d, h->q, h->k, h->v, h->g, ref[0], ref[1], ref[2]);
        attn_ref_bwd(&d, h->dy, h->q, h->k, h->v, h->g, ref[1], ref[2], ref[3], ref[4], ref[5],
                     ref[6]);
        return 0;
    }
    char err[512];
    sl_backend_params bp = {.threads = 0, .device = -1};
    sl_backend *cpu = sl_backend_create("cpu", &bp, err, sizeof err);
    if (!cpu) {
        fprintf(stderr, "attn_bench: the reference backend cpu: %s\n", err);
        return -1;
    }
    attn_set r;
    set_create(&r, cpu, SL_F32, s, o->gate, seg);
    upload_inputs(&r, h);
    forward(&r);
    backward(&r);
    const sl_tensor *out[N_OUT];
    outputs_of(&r, out);
    for (int i = 0; i < N_OUT; i++) {
        if (!out[i]) continue;
        float *f = sl_xmalloc(sizeof(float) * (size_t)n[i]);
        download(&r, out[i], f);
        ref[i] = to_double(f, n[i]);
        free(f);
    }
    set_free(&r);
    sl_backend_free(cpu);
    return 0;
}

/* One forward and backward on a's backend against the reference; 0 when every output passes. */
static int check_shape(const options *o, attn_set *a, const int32_t *seg) {
    host_inputs h = {0};
    h.q = sl_xmalloc(sizeof(float) * (size_t)a->nq), h.dy = sl_xmalloc(sizeof(float) * a->nq);
    h.k = sl_xmalloc(sizeof(float) * (size_t)a->nk), h.v = sl_xmalloc(sizeof(float) * a->nk);
    if (a->g) h.g = sl_xmalloc(sizeof(float) * (size_t)a->ng);
    download(a, a->q, h.q), download(a, a->k, h.k), download(a, a->v, h.v);
    download(a, a->dy, h.dy);
    if (a->g) download(a, a->g, h.g);
    forward(a);
    backward(a);
    sl_backend_synchronize(sl_tensor_backend(a->q));
    double *ref[N_OUT];
    if (reference(o, a, &h, seg, ref) != 0) {
        host_inputs_free(&h);
        return -1;
    }
    const sl_tensor *out[N_OUT];
    outputs_of(a, out);
    const double tol = o->dt == SL_BF16 ? k_tol.bf16 : k_tol.f32;
    int failed = 0;
    printf("%-4s %12s %12s %12s %10s  %s\n", "out", "max|err|", "max|ref|", "err/norm", "tol",
           "result");
    for (int i = 0; i < N_OUT; i++) {
        if (!out[i]) continue;
        const int64_t n = sl_tensor_numel(out[i]);
        float *got = sl_xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
        download(a, out[i], got);
        double max_ref = 0.0, max_err = 0.0;
        for (int64_t j = 0; j < n; j++)
            if (fabs(ref[i][j]) > max_ref) max_ref = fabs(ref[i][j]);
        if (o->corrupt && strcmp(o->corrupt, k_outputs[i]) == 0 && n > 0)
            got[0] += (float)(4.0 * tol * (max_ref > 0 ? max_ref : 1.0));
        for (int64_t j = 0; j < n; j++) {
            const double e = fabs((double)got[j] - ref[i][j]);
            if (!(e <= max_err)) max_err = isnan(e) ? INFINITY : e; /* NaN counts as a failure */
        }
        /* an output whose reference is all near zero (dq and dk when every query sees one key)
         * is compared absolutely: the inputs are O(1), so its errors are too */
        const double ratio = max_err / (max_ref > 1.0 ? max_ref : 1.0);
        const bool ok = ratio <= tol;
        failed += !ok;
        printf("%-4s %12.4g %12.4g %12.4g %10.3g  %s\n", k_outputs[i], max_err, max_ref, ratio, tol,
               ok ? "PASS" : "FAIL");
        free(got);
        free(ref[i]);
    }
    host_inputs_free(&h);
    printf("check: %s (%s against %s; norm = max(max|ref|, 1))\n", failed ? "FAIL" : "PASS",
           o->backend,
           strcmp(o->backend, "cpu") == 0 ? "the bench's double-precision loops"
                                          : "the cpu backend in f32");
    return failed ? 1 : 0;
}

/* ---- timing ------------------------------------------------------------------------------ */

/* One timed (kernel, shape): TFLOP/s forward, backward, both (0: not run). */
typedef struct {
    double fwd, bwd, both;
} speed;

static speed time_shape(const options *o, attn_set *a, const char *device, const char *choice) {
    sl_backend *be = sl_tensor_backend(a->q);
    double *tf = sl_xmalloc(sizeof(double) * (size_t)o->iters);
    double *tb = sl_xmalloc(sizeof(double) * (size_t)o->iters);
    for (int i = 0; i < o->warmup; i++) forward(a), backward(a);
    sl_backend_synchronize(be);
    for (int i = 0; i < o->iters; i++) {
        const double t0 = sl_bench_now();
        forward(a);
        sl_backend_synchronize(be);
        const double t1 = sl_bench_now();
        backward(a);
        sl_backend_synchronize(be);
        tf[i] = t1 - t0, tb[i] = sl_bench_now() - t1;
    }
    const double mf = sl_bench_median(tf, o->iters), mb = sl_bench_median(tb, o->iters);
    const shape *s = &a->s;
    const double fwd = 4.0 * s->batch * s->heads * (double)s->d * pairs_per_sequence(o, s->seq);
    const double bwd = 2.5 * fwd;
    const char *ran = sl_backend_attn_kernel_ran(be);
    ran = ran ? ran : "?";
    const speed sp = {1e-12 * fwd / mf, 1e-12 * bwd / mb, 1e-12 * (fwd + bwd) / (mf + mb)};
    printf("%-6s %5d %6d %4d %3d %4d %10.3f %9.2f %10.3f %9.2f %11.2f\n", ran, s->batch, s->seq,
           s->heads, s->kv, s->d, 1e3 * mf, sp.fwd, 1e3 * mb, sp.bwd, sp.both);
    printf("{\"impl\": \"%s\", \"kernel\": \"%s\", \"choice\": \"%s\", \"backend\": \"%s\", "
           "\"device\": \"%s\", \"dtype\": \"%s\", "
           "\"gate\": \"%s\", \"batch\": %d, \"seq\": %d, \"heads\": %d, \"kv_heads\": %d, "
           "\"head_dim\": %d, \"docs\": %s, \"nondeterministic\": %s, \"iters\": %d, "
           "\"fwd_flops\": %.6g, \"bwd_flops\": %.6g, \"fwd_ms\": %.6g, \"bwd_ms\": %.6g, "
           "\"fwd_tflops\": %.6g, \"bwd_tflops\": %.6g, \"fwd_bwd_tflops\": %.6g}\n",
           strcmp(ran, "cudnn") == 0 ? "cudnn" : "sluice", ran, choice, o->backend, device,
           sl_dtype_name(o->dt), sl_gate_mode_name(o->gate), s->batch, s->seq, s->heads, s->kv,
           s->d, o->ndocs ? "true" : "false",
           o->nondeterministic || strcmp(ran, "cudnn") == 0 ? "true" : "false", o->iters, fwd, bwd,
           1e3 * mf, 1e3 * mb, sp.fwd, sp.bwd, sp.both);
    fflush(stdout);
    free(tf);
    free(tb);
    return sp;
}

/* ---- main -------------------------------------------------------------------------------- */

/* Free memory of the backend (device memory on cuda, available host memory on cpu), or -1. */
static double free_bytes(const options *o, char *device, size_t len) {
    snprintf(device, len, "host");
#ifdef SLUICE_WITH_CUDA
    if (strcmp(o->backend, "cuda") == 0) {
        sl_bench_device dev;
        char err[256];
        if (sl_bench_device_info(&dev, err, sizeof err) != 0) return -1;
        snprintf(device, len, "%s", dev.name);
        return (double)dev.free_bytes;
    }
#else
    (void)o;
#endif
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : -1;
}

/* The outcome of one kernel's run over the shapes. */
enum { RUN_DONE = 0, RUN_FAILED = 1, RUN_SKIPPED = 77 };

/* Runs every shape on a backend made for kernel choice `choice` (NULL: the backend's default);
 * timing rows go to speeds[shape]. `implicit`: not asked for by --kernel (a load failure is a
 * note, not a skip). */
static int run_kernel(const options *o, const char *choice, bool implicit, const shape *shapes,
                      int nshapes, speed *speeds) {
    char err[1024], device[256];
    const bool cudnn = choice && strcmp(choice, "cudnn") == 0;
    const sl_backend_params bp = {
        .threads = 0, .device = -1, .allow_nondeterministic = o->nondeterministic || cudnn};
    sl_backend *be = sl_backend_create(o->backend, &bp, err, sizeof err);
    if (!be) {
        printf("attn_bench: skipped: backend %s: %s\n", o->backend, err);
        return RUN_SKIPPED;
    }
    if (sl_backend_set_attn_kernel(be, choice, err, sizeof err) != 0) {
        if (implicit)
            printf("attn_bench: kernel %s not measured: %s\n", choice, err);
        else
            printf("attn_bench: skipped: kernel %s: %s\n", choice, err);
        sl_backend_free(be);
        return RUN_SKIPPED;
    }
    const double avail = free_bytes(o, device, sizeof device);
    printf("attn_bench: backend %s (%s), kernel %s, dtype %s, gate %s, %s, %s\n", o->backend,
           device, choice ? choice : "auto", sl_dtype_name(o->dt), sl_gate_mode_name(o->gate),
           o->ndocs ? "per-document masking (--doc-lengths)" : "causal",
           bp.allow_nondeterministic ? "nondeterministic kernels allowed"
                                     : "deterministic kernels");
    if (!o->check)
        printf("FLOPs: forward 4*B*H*D*P with P = S^2/2 (causal counted as half%s), backward 2.5x "
               "forward (FlashAttention-2 convention); median of %d timed after %d warm-up\n"
               "%-6s %5s %6s %4s %3s %4s %10s %9s %10s %9s %11s\n",
               o->ndocs ? "; with documents the sum of L^2/2" : "", o->iters, o->warmup, "kernel",
               "B", "S", "H", "KV", "D", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s", "f+b TFLOP/s");
    int rc = RUN_DONE;
    for (int i = 0; i < nshapes; i++) {
        const shape *s = &shapes[i];
        double need = set_bytes(s, o->gate, o->dt);
        if (o->check) /* the reference set and the host copies (on the cpu backend: host memory) */
            need = strcmp(o->backend, "cpu") == 0 ? 6 * need : need;
        if (avail > 0 && need > 0.9 * avail) {
            printf("skipped: B %d S %d H %d KV %d D %d needs %.2f GiB, %.2f GiB free\n", s->batch,
                   s->seq, s->heads, s->kv, s->d, need / GIB, avail / GIB);
            continue;
        }
        int32_t *seg = build_seg(o, s);
        attn_set a;
        set_create(&a, be, o->dt, s, o->gate, seg);
        float *host = sl_xmalloc(sizeof(float) * CHUNK);
        fill_normal(&a, a.q, 1, host), fill_normal(&a, a.k, 2, host);
        fill_normal(&a, a.v, 3, host), fill_normal(&a, a.dy, 5, host);
        if (a.g) fill_normal(&a, a.g, 4, host);
        free(host);
        if (o->check) {
            printf("check: B %d S %d H %d KV %d D %d\n", s->batch, s->seq, s->heads, s->kv, s->d);
            if (check_shape(o, &a, seg) != 0) rc = RUN_FAILED;
            const char *ran = sl_backend_attn_kernel_ran(be);
            printf("kernel: %s\n", ran ? ran : "?");
        } else {
            speeds[i] = time_shape(o, &a, device, choice ? choice : "auto");
        }
        set_free(&a);
        free(seg);
    }
    sl_backend_free(be);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    if (parse_options(argc, argv, &o) != 0) return 2;
    bool built = false;
    for (int i = 0; i < sl_backend_count(); i++)
        built |= strcmp(sl_backend_name_at(i), o.backend) == 0;
    if (!built) {
        printf("attn_bench: skipped: backend %s is not built into this binary\n", o.backend);
        return 77;
    }
    const shape defaults[MAX_SHAPES] = {
        {1, 4096, 32, 4, 128}, {1, 32768, 32, 4, 128}, {1, 4096, 32, 4, 64}, {1, 32768, 32, 4, 64}};
    const shape *shapes = o.shape_given ? &o.s : defaults;
    const int nshapes = o.shape_given ? 1 : MAX_SHAPES;

    /* the kernels to run: --kernel, or auto (plus cudnn when timing on cuda) */
    const char *choices[MAX_KERNELS];
    bool implicit[MAX_KERNELS] = {false};
    int nk = 0;
    for (int i = 0; i < o.nkernels; i++) choices[nk++] = o.kernels[i];
    if (nk == 0) {
        choices[nk++] = NULL;
        if (!o.check && strcmp(o.backend, "cuda") == 0)
            implicit[nk] = true, choices[nk++] = "cudnn";
    }
    speed speeds[MAX_KERNELS][MAX_SHAPES];
    memset(speeds, 0, sizeof speeds);
    int rc = 0, ran = 0, cudnn_run = -1;
    for (int k = 0; k < nk; k++) {
        const int r = run_kernel(&o, choices[k], implicit[k], shapes, nshapes, speeds[k]);
        if (r == RUN_SKIPPED) continue;
        ran++;
        if (r != RUN_DONE) rc = 1;
        if (choices[k] && strcmp(choices[k], "cudnn") == 0) cudnn_run = k;
    }
    if (ran == 0) return 77; /* nothing could run here: said why above */
    /* sluice against cuDNN, at the same shapes in this process */
    if (!o.check && cudnn_run >= 0 && ran > 1) {
        printf("relative to cudnn (x = kernel's TFLOP/s / cudnn's; > 1: faster than cuDNN):\n"
               "%-8s %5s %6s %4s %3s %4s %8s %8s %8s\n",
               "kernel", "B", "S", "H", "KV", "D", "fwd x", "bwd x", "f+b x");
        for (int k = 0; k < nk; k++) {
            if (k == cudnn_run) continue;
            for (int i = 0; i < nshapes; i++) {
                const speed *a = &speeds[k][i], *c = &speeds[cudnn_run][i];
                if (a->fwd <= 0 || c->fwd <= 0) continue;
                const shape *s = &shapes[i];
                printf("%-8s %5d %6d %4d %3d %4d %8.2f %8.2f %8.2f\n",
                       choices[k] ? choices[k] : "auto", s->batch, s->seq, s->heads, s->kv, s->d,
                       a->fwd / c->fwd, a->bwd / c->bwd, a->both / c->both);
            }
        }
    }
    return rc;
}
