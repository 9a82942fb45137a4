/*
 * bench/grouped_gemm_bench.c - threading strategies of the CPU grouped GEMM.
 *
 * For expert-like shapes, times sl_op_grouped_matmul (the gate_up projection, trans_b) and
 * sl_op_grouped_matmul_dw under each strategy of moe/grouped_matmul_cpu.c and prints the median
 * and the minimum time (the minimum resists interference from other processes) and GFLOP/s
 * at the minimum. Usage: bench_grouped_gemm [THREADS [REPS]] (bench/README.md, "CPU grouped
 * GEMM strategies").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "bench/bench_util.h"
#include "core/ops.h"
#include "moe/kernels_cpu.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *name;
    int groups;
    int64_t mean_rows, in, out;
    int skew; /* 0: counts uniform in [mean/4, 7 mean/4); 1: group 0 takes 3/4 of the rows */
} shape;

static void run(sl_backend *be, const shape *sh, int reps) {
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)sh->groups), n = 0;
    uint64_t s = 12345;
    for (int g = 0; g < sh->groups; g++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        counts[g] = sh->mean_rows / 4 + (int64_t)((s >> 33) % (uint64_t)(3 * sh->mean_rows / 2));
        if (sh->skew)
            counts[g] = g == 0 ? sh->mean_rows * sh->groups * 3 / 4
                               : sh->mean_rows * sh->groups / 4 / (sh->groups - 1);
        n += counts[g];
    }
    sl_tensor *a = sl_tensor_new2(be, SL_F32, n, sh->in);
    sl_tensor *b = sl_tensor_new3(be, SL_F32, sh->groups, sh->out, sh->in);
    sl_tensor *c = sl_tensor_new2(be, SL_F32, n, sh->out);
    sl_op_fill(a, 0.01f), sl_op_fill(b, 0.02f);
    const double flops = 2.0 * (double)n * (double)sh->in * (double)sh->out;
    const char *names[3] = {"auto", "serial-groups", "parallel-groups"};
    const sl_ggemm_mode modes[3] = {SL_GGEMM_AUTO, SL_GGEMM_SERIAL_GROUPS,
                                    SL_GGEMM_PARALLEL_GROUPS};
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int pass = 0; pass < 2; pass++) {
        for (int m = 0; m < 3; m++) {
            sl_cpu_grouped_matmul_set_mode(modes[m]);
            for (int r = -2; r < reps; r++) { /* two warm-up calls */
                double t0 = now();
                if (pass == 0)
                    sl_op_grouped_matmul(c, a, b, sl_counts_host(counts, sh->groups), sh->groups,
                                         true, 0.0f);
                else
                    sl_op_grouped_matmul_dw(b, c, a, sl_counts_host(counts, sh->groups), sh->groups,
                                            1.0f, NULL);
                if (r >= 0) t[r] = now() - t0;
            }
            qsort(t, (size_t)reps, sizeof(double), sl_bench_cmp_double);
            printf("%-34s %-3s %-16s median %9.3f ms  min %9.3f ms %7.1f GFLOP/s\n", sh->name,
                   pass ? "dw" : "fwd", names[m], 1e3 * t[reps / 2], 1e3 * t[0],
                   flops / t[0] * 1e-9);
        }
    }
    sl_cpu_grouped_matmul_set_mode(SL_GGEMM_AUTO);
    free(t), free(counts);
    sl_tensor_free(a), sl_tensor_free(b), sl_tensor_free(c);
}

/* argv[i] as a whole number in [lo, hi], or dflt where absent; -1 after a message where bad */
static int count_arg(int argc, char **argv, int i, const char *what, int lo, int hi, int dflt) {
    if (i >= argc) return dflt;
    char *end;
    const long v = strtol(argv[i], &end, 10);
    if (end == argv[i] || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_grouped_gemm: %s: expected a whole number in [%d, %d], got '%s'\n",
                what, lo, hi, argv[i]);
        return -1;
    }
    return (int)v;
}

int main(int argc, char **argv) {
    char err[256];
    if (argc > 3 || (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))) {
        fprintf(argc > 3 ? stderr : stdout,
                "usage: bench_grouped_gemm [THREADS [REPS]]\n"
                "  THREADS  CPU threads (default 0: all cores)\n"
                "  REPS     repetitions per strategy and shape (default 21)\n"
                "Times the CPU grouped GEMM (gate_up projection and weight gradient) under each\n"
                "threading strategy at four expert-like shapes: median, minimum, GFLOP/s.\n");
        return argc > 3 ? 2 : 0;
    }
    const int threads = count_arg(argc, argv, 1, "THREADS", 0, 4096, 0),
              reps = count_arg(argc, argv, 2, "REPS", 1, 100000, 21);
    if (threads < 0 || reps < 0) return 2;
    sl_backend_params p = {.threads = threads, .device = -1};
    sl_backend *be = sl_backend_create("cpu", &p, err, sizeof err);
    if (!be) {
        fprintf(stderr, "bench_grouped_gemm: %s\n", err);
        return 1;
    }
    printf("threads %d, median of %d\n", sl_backend_threads(be), reps);
    const shape shapes[] = {
        {"128 groups x ~64 rows, 128 -> 64", 128, 64, 128, 64, 0},
        {"8 groups x ~512 rows, 512 -> 512", 8, 512, 512, 512, 0},
        {"8 groups (one has 3/4), 512 -> 512", 8, 512, 512, 512, 1},
        {"32 groups x ~16 rows, 256 -> 128", 32, 16, 256, 128, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run(be, &shapes[i], reps);
    sl_backend_free(be);
    return 0;
}
