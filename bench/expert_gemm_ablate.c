/*
 * bench/expert_gemm_ablate.c - expert_gemm_bench --ablate: where the Hopper grouped GEMM's time
 * goes, measured without hardware counters (a machine's profiler may not read them) by timing
 * the kernel with parts left out (sl_cuda_expert_gemm_set_ablation, moe/kernels_cuda.h) and
 * taking differences:
 *   whole        what a run gets
 *   no epilogue  the consumers store nothing: whole - this = the epilogue's time that the
 *                mainloop does not hide (the tensor cores wait while the consumers store)
 *   no loads     the producer loads nothing: whole - this = the time the wgmmas wait for
 *                their operands (L2 and DRAM not keeping up, or the ring too shallow)
 *   neither      the wgmmas and the pipeline's barriers alone: against the tensor cores' peak,
 *                what the kernel's issue order leaves (the tiles' padding included)
 *   4B stores    (forward and data gradient) the epilogue's former stores, a pair of columns a
 *                thread per instruction instead of 16 bytes after a shuffle within the quad:
 *                whole against this is what the 16-byte stores gained
 *   BN 128       every GEMM in 128 x 128 tiles with a ring of 6 stages (128 x 256 with 4 is
 *                the kernel's choice for outputs wider than 128): a third more bytes from L2
 *                per FLOP but two more stages in flight; faster here says the ring's depth
 *                (latency) limits the feed, slower that L2's bandwidth does
 *   B in L2      (forward and data gradient) every tile reads expert 0's weights, which stay in
 *                L2, instead of its own expert's, which come from DRAM: whole against this is
 *                what the weights' trip from DRAM costs (results wrong)
 * The parts overlap, so the two differences need not add up to whole - neither; each says what
 * making that part free could gain at most.
 *
 * The results are wrong while the epilogue or the loads are left out, so the timings come first
 * and the checks after, once, on a layer small enough to copy to the host (ablate_check): with
 * the epilogue left out a GEMM's output keeps what was there (a fill), the
 * two store forms give the same bits, the two tile widths the same products to rounding, and with
 * nothing left out again the forward GEMM gives its first result bit for bit (the switch is off
 * again). Under the emulated CUDA build the timings mean nothing and the checks run
 * (tests/expert_gemm.cmake: test_expert_gemm_bench_ablate). Where the kernel does not run at all
 * (no compute capability 9.x) the run is a skip (77), as the gpu tests'.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/expert_gemm_bench.h"
#include "core/ops.h"
#include "moe/kernels_cuda.h"

/* GEMM i's median seconds with `parts` left out. */
static double time_without(sl_backend *be, layer *L, int i, int reps, unsigned parts) {
    sl_cuda_expert_gemm_set_ablation(parts);
    const double t = time_gemm(be, L, i, reps);
    sl_cuda_expert_gemm_set_ablation(0);
    return t;
}

/* Whether GEMM i ran on the Hopper kernel (its path after one call). */
static bool on_hopper_kernel(layer *L, int i, const char **path) {
    run_gemm(L, i);
    *path = gemm_is_dw(i) ? sl_cuda_expert_gemm_dw_path() : sl_cuda_expert_gemm_last_path();
    return strncmp(*path, "wgmma", 5) == 0;
}

/* Runs GEMM i once with `parts` left out, then turns the switch off again. */
static void run_without(layer *L, int i, unsigned parts) {
    sl_cuda_expert_gemm_set_ablation(parts);
    run_gemm(L, i);
    sl_cuda_expert_gemm_set_ablation(0);
}

/* Whether every value of t is `v`. */
static bool all_equal(sl_tensor *t, float v) {
    float *h = to_host_f32(t);
    bool same = true;
    for (int64_t k = 0; k < sl_tensor_numel(t) && same; k++) same = h[k] == v;
    free(h);
    return same;
}

/* Without the epilogue a forward, a weight gradient and the fused SwiGLU must leave their
 * outputs as the fill made them. */
static int check_no_epilogue(layer *L) {
    int failures = 0;
    const int gemms[] = {1, 4, GEMM_SWIGLU};
    for (size_t k = 0; k < sizeof gemms / sizeof gemms[0]; k++) {
        const int i = gemms[k];
        sl_op_fill(gemm_output(L, i), 0.5f);
        run_without(L, i, SL_EXPERT_GEMM_ABLATE_EPILOGUE);
        const bool kept = all_equal(gemm_output(L, i), 0.5f);
        printf("%-4s %-15s without its epilogue the output %s\n", kept ? "OK" : "FAIL",
               k_gemm_names[i], kept ? "kept its fill" : "was written");
        failures += !kept;
    }
    return failures;
}

/* The forward epilogue's two store forms must give the same bits (the fused SwiGLU's h and gu
 * both). */
static int check_store_forms(layer *L) {
    int failures = 0;
    const int gemms[] = {0, 1, 2, 3, GEMM_SWIGLU};
    for (size_t k = 0; k < sizeof gemms / sizeof gemms[0]; k++) {
        const int i = gemms[k];
        sl_tensor *outs[2] = {gemm_output(L, i), i == GEMM_SWIGLU ? L->gu : NULL};
        float *wide[2] = {NULL, NULL};
        run_gemm(L, i);
        for (int o = 0; o < 2 && outs[o]; o++) wide[o] = to_host_f32(outs[o]);
        for (int o = 0; o < 2 && outs[o]; o++) sl_op_fill(outs[o], 0.5f);
        run_without(L, i, SL_EXPERT_GEMM_ABLATE_WIDE_STORES);
        bool same = true;
        for (int o = 0; o < 2 && outs[o]; o++) {
            float *pairs = to_host_f32(outs[o]);
            same &= memcmp(wide[o], pairs, sizeof(float) * (size_t)sl_tensor_numel(outs[o])) == 0;
            free(pairs), free(wide[o]);
        }
        printf("%-4s %-15s 16-byte and 4-byte epilogue stores: %s\n", same ? "OK" : "FAIL",
               k_gemm_names[i], same ? "bitwise the same" : "NOT the same");
        failures += !same;
    }
    return failures;
}

/* 128- and 256-column tiles must give the same products to rounding (a forward, the fused
 * SwiGLU's h, a weight gradient from the same start). */
static int check_tile_widths(layer *L) {
    int failures = 0;
    const int gemms[] = {1, GEMM_SWIGLU, 4};
    for (size_t k = 0; k < sizeof gemms / sizeof gemms[0]; k++) {
        const int i = gemms[k];
        sl_tensor *t = gemm_output(L, i);
        const int64_t numel = sl_tensor_numel(t);
        float *v[2];
        for (int w = 0; w < 2; w++) {
            sl_op_fill(t, 0.25f);
            run_without(L, i, w ? SL_EXPERT_GEMM_ABLATE_WIDE_TILES : 0);
            v[w] = to_host_f32(t);
        }
        double worst = 0, scale = 0;
        for (int64_t e = 0; e < numel; e++) scale = fmax(scale, fabs(v[0][e]));
        for (int64_t e = 0; e < numel; e++) worst = fmax(worst, fabs(v[1][e] - v[0][e]));
        const double bound = (gemm_is_dw(i) ? 1e-5 : 1.0 / 128) * scale;
        const bool ok = scale > 0 && worst <= bound;
        printf("%-4s %-15s 128- and 256-column tiles: max |diff| %.3g (bound %.3g)\n",
               ok ? "OK" : "FAIL", k_gemm_names[i], worst, bound);
        failures += !ok;
        free(v[0]), free(v[1]);
    }
    return failures;
}

/* With the weights' reads from DRAM left out, the forward GEMM 1 must give expert 0's rows as
 * before, bit for bit, and other rows not (they used expert 0's weights). */
static int check_b_from_dram(layer *L) {
    sl_tensor *out = gemm_output(L, 1);
    const int64_t n = sl_tensor_numel(out), per_row = n / L->n, rows0 = L->counts[0] * per_row;
    run_gemm(L, 1);
    float *own = to_host_f32(out);
    run_without(L, 1, SL_EXPERT_GEMM_ABLATE_B_FROM_DRAM);
    float *zero = to_host_f32(out);
    const bool first_same = memcmp(own, zero, sizeof(float) * (size_t)rows0) == 0;
    const bool rest_differ =
        memcmp(own + rows0, zero + rows0, sizeof(float) * (size_t)(n - rows0)) != 0;
    const bool ok = first_same && rest_differ && rows0 > 0 && rows0 < n;
    printf("%-4s %-15s with expert 0's weights for every tile: expert 0's rows %s, the others %s\n",
           ok ? "OK" : "FAIL", k_gemm_names[1], first_same ? "the same" : "CHANGED",
           rest_differ ? "changed" : "THE SAME");
    free(own), free(zero);
    return !ok;
}

/* With nothing left out again (after the loads were), the forward GEMM 1 must give its first
 * result bit for bit: the switch is off. */
static int check_reset(layer *L) {
    sl_tensor *out = gemm_output(L, 1);
    const int64_t n = sl_tensor_numel(out);
    run_gemm(L, 1);
    float *first = to_host_f32(out);
    run_without(L, 1, SL_EXPERT_GEMM_ABLATE_LOADS);
    sl_op_fill(out, 0.5f);
    run_gemm(L, 1);
    float *again = to_host_f32(out);
    const bool same = memcmp(first, again, sizeof(float) * (size_t)n) == 0;
    printf("%-4s %-15s with nothing left out again: %s the first result\n", same ? "OK" : "FAIL",
           k_gemm_names[1], same ? "bitwise" : "NOT bitwise");
    free(first), free(again);
    return !same;
}

int ablate_check(sl_backend *be, const opts *o) {
    /* the first shape when it is small (CI's), else 64 rows per expert at its widths: the
     * checks copy every output to the host */
    const int rows = (int64_t)o->rows[0] * o->experts * o->hidden <= (1 << 22) ? o->rows[0] : 64;
    layer L;
    layer_init(&L, be, o, rows);
    sl_cuda_expert_gemm_set_strategy(SL_EXPERT_GEMM_WGMMA);
    const char *path;
    int failures = 0;
    if (on_hopper_kernel(&L, 1, &path)) {
        printf("\nablation checks, rows per expert %d: %lld rows\n", rows, (long long)L.n);
        failures = check_no_epilogue(&L) + check_store_forms(&L) + check_tile_widths(&L) +
                   check_b_from_dram(&L) + check_reset(&L);
    }
    sl_cuda_expert_gemm_set_strategy(SL_EXPERT_GEMM_AUTO);
    layer_free(&L);
    return failures ? 1 : 0;
}

int ablate(sl_backend *be, const opts *o, int rows) {
    layer L;
    layer_init(&L, be, o, rows);
    sl_cuda_expert_gemm_set_strategy(SL_EXPERT_GEMM_WGMMA);
    printf("\nablation, rows per expert %d (%s): %lld rows, %d experts, hidden %d, ffn %d, %s\n",
           rows, o->uniform ? "uniform" : "spread over [R/2, 3R/2)", (long long)L.n, L.e, L.h, L.f,
           sl_dtype_name(o->dtype));
    printf("%-15s %9s %9s %9s %9s %9s %9s %9s %9s %9s  %s\n", "GEMM", "whole ms", "no epi.",
           "no loads", "neither", "epi. %", "feed %", "4B stores", "BN 128", "B in L2",
           "TFLOP/s whole / neither");
    const int order[] = {0, GEMM_SWIGLU, 1, 2, 3, 4, 5, 6, 7, 9, 10};
    int failures = 0, ran = 0;
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        const int i = order[k];
        const char *path;
        if (!on_hopper_kernel(&L, i, &path)) {
            printf("%-15s not on the Hopper kernel (ran %s)\n", k_gemm_names[i], path);
            failures++;
            continue;
        }
        ran++;
        const double whole = time_gemm(be, &L, i, o->reps);
        const double no_epi = time_without(be, &L, i, o->reps, SL_EXPERT_GEMM_ABLATE_EPILOGUE);
        const double no_load = time_without(be, &L, i, o->reps, SL_EXPERT_GEMM_ABLATE_LOADS);
        const double neither = time_without(
            be, &L, i, o->reps, SL_EXPERT_GEMM_ABLATE_EPILOGUE | SL_EXPERT_GEMM_ABLATE_LOADS);
        /* the forward and data gradient's epilogue with its former 4-byte stores */
        const double pairs =
            gemm_is_dw(i) ? NAN
                          : time_without(be, &L, i, o->reps, SL_EXPERT_GEMM_ABLATE_WIDE_STORES);
        /* 128-column tiles, a deeper ring */
        const double narrow = time_without(be, &L, i, o->reps, SL_EXPERT_GEMM_ABLATE_WIDE_TILES);
        /* every tile's weights from expert 0's, which stay in L2 (forward and data gradient) */
        const double b_l2 =
            gemm_is_dw(i) ? NAN
                          : time_without(be, &L, i, o->reps, SL_EXPERT_GEMM_ABLATE_B_FROM_DRAM);
        const double f = gemm_flops(&L, i);
        printf("%-15s %9.3f %9.3f %9.3f %9.3f %8.1f%% %8.1f%% %9.3f %9.3f %9.3f  %.1f / %.1f\n",
               k_gemm_names[i], whole * 1e3, no_epi * 1e3, no_load * 1e3, neither * 1e3,
               100 * (whole - no_epi) / whole, 100 * (whole - no_load) / whole, pairs * 1e3,
               narrow * 1e3, b_l2 * 1e3, f / whole / 1e12, f / neither / 1e12);
    }
    sl_cuda_expert_gemm_set_strategy(SL_EXPERT_GEMM_AUTO);
    layer_free(&L);
    if (!ran) printf("the Hopper kernel does not run here: nothing to ablate\n");
    return !ran ? 77 : failures ? 1 : 0;
}
