/*
 * bench/attn_bench.c - throughput and correctness of the gated attention operation
 * (sl_op_gated_attn_fwd/bwd, core/ops.h) on one backend, at any shape.
 *
 *   attn_bench [--backend cpu|cuda] [--kernel NAME[,NAME...]] [--dtype f32|bf16] [--batch B]
 *              [--seq S] [--heads H] [--kv-heads KV] [--head-dim D]
 *              [--gate elementwise|headwise|none] [--doc-lengths a,b,...] [--iters N]
 *              [--warmup N] [--separate] [--nondeterministic] [--check] [--check-rows N]
 *              [--corrupt OUTPUT]
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
 * each timed forward followed by its backward ("interleaved", as training runs them) or, with
 * `--separate`, the timed forwards back to back and then the timed backwards (each pass under
 * its own sustained load, as FlashAttention's benchmarks time them: a GPU's clocks under load
 * depend on what it runs), and the median of each is reported, with TFLOP/s under this convention
 * (printed too): forward FLOPs  = 4 * B * H * D * P: two matmuls (Q K^T and P V) of 2 FLOPs per
 *                    multiply-add over P (query, key) pairs, where P = S^2 / 2 for causal
 *                    attention (causal FLOPs counted as half, the FlashAttention convention),
 *                    or the sum of L^2 / 2 over the documents of a sequence with --doc-lengths;
 *   backward FLOPs = 2.5 x the forward (FlashAttention-2: five matmuls for the forward's two).
 * The gate, the softmax and the masking are not counted. Without a shape option the paper's
 * shapes run: H 32, KV 4, D 128 and 64, S 4096 and 32768, batch 1; a shape whose tensors do not
 * fit the backend's free memory is skipped with a message. Each shape prints a table row, on a GPU
 * a `clocks:` line (the SM clock read through NVML after each timed pass, outside the timing: the
 * medians after the forwards and after the backwards, and the clock event reasons seen), a
 * JSON line (for bench/run_gpu_bench.sh), then the device memory the run took beyond the shape's
 * tensors (free memory before the tensors minus after the passes, minus the tensors: the
 * kernels' workspaces and the allocator's cache; the "memory linear in the sequence length"
 * claim of docs/attention.md, measured).
 *
 * --check (instead of timing): one forward and one backward on the chosen backend, compared
 * with a reference, every output (y, o, lse, dq, dk, dv, dg) element by element; exit status 1
 * on any FAIL (bench/attn_bench_check.c). --check-rows N compares N sampled query rows and N key
 * rows with double-precision sums instead, at a cost linear in the sequence length (the way to
 * check S = 131,072). --corrupt OUTPUT adds 4 x tolerance x max |reference| to element 0 of
 * that output (in every sample) before the comparison, so the test suite can prove the check
 * fails when it should.
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
#include "bench/attn_bench.h"
#include "bench/bench_util.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"
#ifdef SLUICE_WITH_CUDA
#include "attention/attn_kernels.h"
#include "core/cuda_clock.h"
#include "core/cuda_peak.h"
#endif

#define GIB ((double)(1ULL << 30))

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attn_bench [--backend cpu|cuda] [--kernel NAME[,NAME...]] [--dtype f32|bf16]\n"
        "                  [--batch B] [--seq S] [--heads H] [--kv-heads KV] [--head-dim D]\n"
        "                  [--gate elementwise|headwise|none] [--doc-lengths a,b,...]\n"
        "                  [--iters N] [--warmup N] [--separate] [--nondeterministic]\n"
        "                  [--check]\n"
        "                  [--check-rows N] [--corrupt OUTPUT]\n"
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
        "  --separate        time the forwards back to back, then the backwards (default: each\n"
        "                    forward followed by its backward)\n"
        "  --nondeterministic  let the backend use its faster atomic variants (e.g. dQ)\n"
        "  --check           compare with the CPU backend (or, on cpu, the bench's double\n"
        "                    loops); print errors, exit 1 beyond the tolerance; no timing\n"
        "  --check-rows N    --check at N sampled query rows and N key rows against double-\n"
        "                    precision sums: linear in S, for the longest sequences\n"
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

static int parse_docs(const char *v, ab_options *o) {
    o->ndocs = 0;
    for (const char *p = v; p && *p;) {
        char *end = NULL;
        const long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > 100000000L || (*end && *end != ',') || o->ndocs == AB_MAX_DOCS)
            return bad("--doc-lengths", "needs up to 64 comma-separated lengths >= 1, got", v);
        o->docs[o->ndocs++] = (int)x;
        p = *end ? end + 1 : end;
    }
    return o->ndocs ? 0 : bad("--doc-lengths", "needs at least one length, got", v);
}
/* --kernel LIST: comma-separated names appended to o->kernels. */
static int parse_kernels(const char *v, ab_options *o) {
    for (const char *p = v; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len >= sizeof o->kernels[0] || o->nkernels == AB_MAX_KERNELS)
            return bad("--kernel", "needs up to 8 comma-separated kernel names, got", v);
        memcpy(o->kernels[o->nkernels], p, len);
        o->kernels[o->nkernels++][len] = '\0';
        p = end ? end + 1 : p + len;
    }
    return o->nkernels ? 0 : bad("--kernel", "needs a kernel name, got", v);
}

static int parse_options(int argc, char **argv, ab_options *o) {
    *o = (ab_options){.iters = 10, .warmup = 2, .gate = SL_GATE_ELEMENTWISE, .dt = SL_F32};
    o->s = (ab_shape){.batch = 1, .seq = 4096, .heads = 32, .kv = 4, .d = 128};
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
        } else if (strcmp(a, "--check-rows") == 0) {
            o->check = true;
            count = &o->check_rows;
        } else if (strcmp(a, "--nondeterministic") == 0) {
            o->nondeterministic = true;
            continue;
        } else if (strcmp(a, "--separate") == 0) {
            o->separate = true;
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
            for (int k = 0; v && k < AB_N_OUT; k++) known |= strcmp(v, ab_outputs[k]) == 0;
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
            if (count != &o->iters && count != &o->warmup && count != &o->check_rows)
                o->shape_given = true;
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

/* ---- timing ------------------------------------------------------------------------------ */

/* (Query, key) pairs of one sequence and head in the FLOP convention: S^2 / 2 causal, or the sum
 * of L^2 / 2 over its documents. */
static double pairs_per_sequence(const ab_options *o, int seq) {
    if (!o->ndocs) return 0.5 * (double)seq * seq;
    double p = 0.0;
    for (int i = 0, doc = 0; i < seq; doc = (doc + 1) % o->ndocs) {
        const int len = o->docs[doc] < seq - i ? o->docs[doc] : seq - i;
        p += 0.5 * (double)len * len;
        i += len;
    }
    return p;
}

/* Free memory of the backend (device memory on cuda, available host memory on cpu), or -1. */
static double free_bytes(const ab_options *o, char *device, size_t len) {
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

/* Free device memory on the cuda backend, -1 elsewhere (host memory says nothing of a run). */
static double device_free(const ab_options *o) {
    char device[256];
    return strcmp(o->backend, "cuda") == 0 ? free_bytes(o, device, sizeof device) : -1;
}

/* Device memory the run of shape `a` took beyond its tensors: device_free `before` the tensors
 * minus device_free now, minus the tensors' bytes (the kernels' workspaces and the backend's
 * allocator cache; a later shape of the same backend may reuse what an earlier one cached). -1
 * where it cannot be measured (the cpu backend). */
static double extra_bytes(const ab_options *o, const ab_set *a, double before) {
    if (before < 0) return -1;
    sl_backend_synchronize(sl_tensor_backend(a->q));
    const double now = device_free(o);
    return now < 0 ? -1 : before - now - ab_set_bytes(&a->s, o->gate, o->dt);
}

static void print_memory(const ab_options *o, const ab_set *a, double extra, int shape_index) {
    if (extra < 0) return;
    printf("memory: tensors %.3f GiB; the passes took %.3f GiB more (workspaces, allocator "
           "cache%s)\n",
           ab_set_bytes(&a->s, o->gate, o->dt) / GIB, extra / GIB,
           shape_index > 0 ? "; after another shape, whose cache it may reuse" : "");
}

/* One timed (kernel, shape): TFLOP/s forward, backward, both (0: not run). */
typedef struct {
    double fwd, bwd, both, extra; /* extra: extra_bytes, or -1 */
} speed;

/* The SM clock read right after each timed pass (core/cuda_clock.h, NVML): the median per pass
 * and every clock event reason seen; ok false where it cannot be read (the cpu backend, the
 * emulated device, no NVML), with the reason in why. */
typedef struct {
    double *fwd, *bwd; /* one per timed pass */
    unsigned long long reasons;
    bool ok;
    char why[160];
} pass_clocks;

/* Samples the clock into *to (a pass just ended, synchronized), or marks the run unreadable. */
static void read_clock(const ab_options *o, pass_clocks *pc, double *to) {
    if (!pc->ok) return;
    if (strcmp(o->backend, "cuda") != 0) {
        snprintf(pc->why, sizeof pc->why, "not a GPU backend");
        pc->ok = false;
        return;
    }
#ifdef SLUICE_WITH_CUDA
    unsigned mhz = 0;
    unsigned long long why = 0;
    if (sl_cuda_sm_clock(&mhz, &why, pc->why, sizeof pc->why) == 0) {
        *to = mhz;
        pc->reasons |= why;
        return;
    }
#else
    (void)to;
    snprintf(pc->why, sizeof pc->why, "no CUDA backend in this build");
#endif
    pc->ok = false;
}

static speed time_shape(const ab_options *o, ab_set *a, const char *device, const char *choice,
                        double mem_before) {
    sl_backend *be = sl_tensor_backend(a->q);
    double *tf = sl_xmalloc(sizeof(double) * (size_t)o->iters);
    double *tb = sl_xmalloc(sizeof(double) * (size_t)o->iters);
    pass_clocks pc = {.fwd = sl_xmalloc(sizeof(double) * (size_t)o->iters),
                      .bwd = sl_xmalloc(sizeof(double) * (size_t)o->iters),
                      .ok = true};
    for (int i = 0; i < o->warmup; i++) ab_forward(a), ab_backward(a);
    sl_backend_synchronize(be);
    for (int i = 0; i < o->iters; i++) {
        const double t0 = sl_bench_now();
        ab_forward(a);
        sl_backend_synchronize(be);
        const double t1 = sl_bench_now();
        tf[i] = t1 - t0;
        read_clock(o, &pc, &pc.fwd[i]); /* outside the timing (about 0.1 ms) */
        if (o->separate) continue;      /* the backwards below, after every forward */
        const double t2 = sl_bench_now();
        ab_backward(a);
        sl_backend_synchronize(be);
        tb[i] = sl_bench_now() - t2;
        read_clock(o, &pc, &pc.bwd[i]);
    }
    for (int i = 0; o->separate && i < o->iters; i++) { /* on the last forward's outputs */
        const double t0 = sl_bench_now();
        ab_backward(a);
        sl_backend_synchronize(be);
        tb[i] = sl_bench_now() - t0;
        read_clock(o, &pc, &pc.bwd[i]);
    }
    const double mf = sl_bench_median(tf, o->iters), mb = sl_bench_median(tb, o->iters);
    const double cf = pc.ok ? sl_bench_median(pc.fwd, o->iters) : 0.0,
                 cb = pc.ok ? sl_bench_median(pc.bwd, o->iters) : 0.0;
    char reasons[160] = "";
#ifdef SLUICE_WITH_CUDA
    if (pc.ok) sl_cuda_clock_reason_names(pc.reasons, reasons, sizeof reasons);
#endif
    const double extra = extra_bytes(o, a, mem_before);
    const ab_shape *s = &a->s;
    const double fwd = 4.0 * s->batch * s->heads * (double)s->d * pairs_per_sequence(o, s->seq);
    const double bwd = 2.5 * fwd;
    const char *ran = sl_backend_attn_kernel_ran(be);
    ran = ran ? ran : "?";
    const speed sp = {1e-12 * fwd / mf, 1e-12 * bwd / mb, 1e-12 * (fwd + bwd) / (mf + mb), extra};
    printf("%-6s %5d %6d %4d %3d %4d %10.3f %9.2f %10.3f %9.2f %11.2f\n", ran, s->batch, s->seq,
           s->heads, s->kv, s->d, 1e3 * mf, sp.fwd, 1e3 * mb, sp.bwd, sp.both);
    /* the clocks as JSON values: numbers and a string, or null where they could not be read */
    char jf[32] = "null", jb[32] = "null", jr[200] = "null";
    if (pc.ok) {
        snprintf(jf, sizeof jf, "%.0f", cf);
        snprintf(jb, sizeof jb, "%.0f", cb);
        snprintf(jr, sizeof jr, "\"%s\"", reasons);
        printf("clocks: SM %.0f MHz after the forwards, %.0f after the backwards (medians); "
               "event reasons seen: %s\n",
               cf, cb, reasons);
    } else if (strcmp(o->backend, "cuda") == 0) {
        printf("clocks: not read (%s)\n", pc.why);
    }
    printf("{\"impl\": \"%s\", \"kernel\": \"%s\", \"choice\": \"%s\", \"backend\": \"%s\", "
           "\"device\": \"%s\", \"dtype\": \"%s\", "
           "\"gate\": \"%s\", \"batch\": %d, \"seq\": %d, \"heads\": %d, \"kv_heads\": %d, "
           "\"head_dim\": %d, \"docs\": %s, \"nondeterministic\": %s, \"iters\": %d, "
           "\"timing\": \"%s\", "
           "\"fwd_flops\": %.6g, \"bwd_flops\": %.6g, \"fwd_ms\": %.6g, \"bwd_ms\": %.6g, "
           "\"fwd_tflops\": %.6g, \"bwd_tflops\": %.6g, \"fwd_bwd_tflops\": %.6g, "
           "\"tensor_gib\": %.6g, \"extra_gib\": %.6g, \"fwd_sm_mhz\": %s, \"bwd_sm_mhz\": %s, "
           "\"clock_reasons\": %s}\n",
           strcmp(ran, "cudnn") == 0 ? "cudnn" : "sluice", ran, choice, o->backend, device,
           sl_dtype_name(o->dt), sl_gate_mode_name(o->gate), s->batch, s->seq, s->heads, s->kv,
           s->d, o->ndocs ? "true" : "false",
           o->nondeterministic || strcmp(ran, "cudnn") == 0 ? "true" : "false", o->iters,
           o->separate ? "separate" : "interleaved", fwd, bwd, 1e3 * mf, 1e3 * mb, sp.fwd, sp.bwd,
           sp.both, ab_set_bytes(s, o->gate, o->dt) / GIB, extra < 0 ? -1.0 : extra / GIB, jf, jb,
           jr);
    fflush(stdout);
    free(tf);
    free(tb);
    free(pc.fwd);
    free(pc.bwd);
    return sp;
}

/* ---- main -------------------------------------------------------------------------------- */

/* The outcome of one kernel's run over the shapes. */
enum { RUN_DONE = 0, RUN_FAILED = 1, RUN_SKIPPED = 77 };

/* Runs every shape on a backend made for kernel choice `choice` (NULL: the backend's default);
 * timing rows go to speeds[shape]. `implicit`: not asked for by --kernel (a load failure is a
 * note, not a skip). */
static int run_kernel(const ab_options *o, const char *choice, bool implicit,
                      const ab_shape *shapes, int nshapes, speed *speeds) {
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
               "forward (FlashAttention-2 convention); median of %d timed after %d warm-up, %s\n"
               "%-6s %5s %6s %4s %3s %4s %10s %9s %10s %9s %11s\n",
               o->ndocs ? "; with documents the sum of L^2/2" : "", o->iters, o->warmup,
               o->separate ? "the forwards back to back, then the backwards (--separate)"
                           : "each forward followed by its backward",
               "kernel", "B", "S", "H", "KV", "D", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s",
               "f+b TFLOP/s");
    int rc = RUN_DONE;
    for (int i = 0; i < nshapes; i++) {
        const ab_shape *s = &shapes[i];
        double need = ab_set_bytes(s, o->gate, o->dt);
        if (o->check) /* the reference set and the host copies (on the cpu backend: host memory) */
            need = strcmp(o->backend, "cpu") == 0 ? 6 * need : need;
        if (avail > 0 && need > 0.9 * avail) {
            printf("skipped: B %d S %d H %d KV %d D %d needs %.2f GiB, %.2f GiB free\n", s->batch,
                   s->seq, s->heads, s->kv, s->d, need / GIB, avail / GIB);
            continue;
        }
        int32_t *seg = ab_build_seg(o, s);
        const double before = device_free(o);
        ab_set a;
        ab_set_create(&a, be, o->dt, s, o->gate, seg);
        float *host = sl_xmalloc(sizeof(float) * AB_CHUNK);
        ab_fill_normal(&a, a.q, 1, host), ab_fill_normal(&a, a.k, 2, host);
        ab_fill_normal(&a, a.v, 3, host), ab_fill_normal(&a, a.dy, 5, host);
        if (a.g) ab_fill_normal(&a, a.g, 4, host);
        free(host);
        if (o->check) {
            printf("check: B %d S %d H %d KV %d D %d\n", s->batch, s->seq, s->heads, s->kv, s->d);
            if (ab_check_shape(o, &a, seg) != 0) rc = RUN_FAILED;
            const char *ran = sl_backend_attn_kernel_ran(be);
            printf("kernel: %s\n", ran ? ran : "?");
            print_memory(o, &a, extra_bytes(o, &a, before), i);
        } else {
            speeds[i] = time_shape(o, &a, device, choice ? choice : "auto", before);
            print_memory(o, &a, speeds[i].extra, i);
        }
        ab_set_free(&a);
        free(seg);
    }
    sl_backend_free(be);
    return rc;
}

int main(int argc, char **argv) {
    ab_options o;
    if (parse_options(argc, argv, &o) != 0) return 2;
    bool built = false;
    for (int i = 0; i < sl_backend_count(); i++)
        built |= strcmp(sl_backend_name_at(i), o.backend) == 0;
    if (!built) {
        printf("attn_bench: skipped: backend %s is not built into this binary\n", o.backend);
        return 77;
    }
    const ab_shape defaults[AB_MAX_SHAPES] = {
        {1, 4096, 32, 4, 128}, {1, 32768, 32, 4, 128}, {1, 4096, 32, 4, 64}, {1, 32768, 32, 4, 64}};
    const ab_shape *shapes = o.shape_given ? &o.s : defaults;
    const int nshapes = o.shape_given ? 1 : AB_MAX_SHAPES;

    /* the kernels to run: --kernel, or auto (plus cudnn when timing on cuda) */
    const char *choices[AB_MAX_KERNELS];
    bool implicit[AB_MAX_KERNELS] = {false};
    int nk = 0;
    for (int i = 0; i < o.nkernels; i++) choices[nk++] = o.kernels[i];
    if (nk == 0) {
        choices[nk++] = NULL;
        if (!o.check && strcmp(o.backend, "cuda") == 0)
            implicit[nk] = true, choices[nk++] = "cudnn";
    }
    speed speeds[AB_MAX_KERNELS][AB_MAX_SHAPES];
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
                const ab_shape *s = &shapes[i];
                printf("%-8s %5d %6d %4d %3d %4d %8.2f %8.2f %8.2f\n",
                       choices[k] ? choices[k] : "auto", s->batch, s->seq, s->heads, s->kv, s->d,
                       a->fwd / c->fwd, a->bwd / c->bwd, a->both / c->both);
            }
        }
    }
    return rc;
}
