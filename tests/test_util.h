/*
 * tests/test_util.h - a small test harness for sluice's C tests.
 *
 * CHECK(cond, fmt, ...) records a failure and continues; TEST_MAIN's return value is the
 * process exit status, so ctest sees every failed check. Helpers build tensors from host
 * arrays, compare arrays with a stated tolerance, and run central finite-difference checks.
 */
#ifndef SL_TEST_UTIL_H
#define SL_TEST_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/backends.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "trainer/config.h"

extern int sl_test_failures;
extern int sl_test_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        sl_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            sl_test_failures++;                                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* Prints a summary line and returns the exit status (0 when every check passed). */
int sl_test_finish(const char *name);

/* Whether the tests run under CI (environment CI=true or CI=1). */
bool sl_test_under_ci(void);

/*
 * A missing software dependency (a tool or package; never missing hardware such as a GPU,
 * which skips everywhere). Outside CI: prints "SKIP: <reason>" and returns 77, the exit status
 * ctest reports as skipped. Under CI, where the dependency step installed everything: records
 * a failed check, prints "FAIL: <reason>" and returns 1. `return sl_test_skip(...)` skips a
 * whole test; a plain call skips one part and the test goes on (sl_test_finish then fails
 * under CI). The same rule as tests/skip_or_fail.sh for the scripts.
 */
int sl_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The CPU backend shared by a test (created on first use with 2 threads). */
sl_backend *sl_test_cpu(void);
/* The CUDA backend with `params` (NULL: defaults), or - in a build without it or on a machine
 * without a GPU - prints "SKIP: <why>" and exits 77. Missing hardware skips everywhere, CI
 * included (unlike a missing software dependency, sl_test_skip). */
sl_backend *sl_test_cuda_or_skip(const sl_backend_params *params);

/* Tensors a case makes, freed together: sl_test_track(t) returns t; sl_test_release() frees
 * every tracked tensor, newest first (views before their bases). */
sl_tensor *sl_test_track(sl_tensor *t);
void sl_test_release(void);

/* bf16 rounding (nearest even) of a finite float, as a GPU's __float2bfloat16_rn. */
float sl_test_bf16_round(float f);
/* A tracked tensor [rows, cols] (1-D when both are 1) of dtype dt on `be`, holding `host` (of
 * dt's element type; NULL: zeros). */
sl_tensor *sl_test_matrix(sl_backend *be, sl_dtype dt, int64_t rows, int64_t cols,
                          const void *host);
/* The same for a float dtype from host floats: bf16 through the backend's convert (rounding to
 * nearest even on the backend itself). */
sl_tensor *sl_test_ftensor(sl_backend *be, sl_dtype dt, int64_t rows, int64_t cols,
                           const float *host);
/* Host floats of any float tensor (bf16 through a convert on its own backend); free() them. */
float *sl_test_host_floats(const sl_tensor *t);
/* A tracked [a, b, c] tensor of float dtype dt on be holding host floats (NULL: zeros). */
sl_tensor *sl_test_tensor3(sl_backend *be, sl_dtype dt, int64_t a, int64_t b, int64_t c,
                           const float *host);
/* n normal(0, std) values (sl_test_fill_normal) rounded to bf16, so that fp32 and bf16 tensors
 * made from them hold the same values; free() them. */
float *sl_test_normal_bf16(int64_t n, float std, uint64_t seed);
/* The CPU backend's gated attention (fp32) as the reference of a device kernel test: the
 * forward on host inputs q [T, H, D], k and v [T, KV, D], g [T, H, gw] (NULL: no gate), seg [T]
 * (NULL: plain causal), then the backward from dy and that forward's lse and o rounded to bf16
 * (what a bf16 backend saves), so that a device backward fed the same o and lse is compared on
 * equal inputs. Every array is malloc'ed (dg NULL without a gate); sl_test_attn_ref_free. */
typedef struct {
    float *y, *o, *lse, *dq, *dk, *dv, *dg;
} sl_test_attn_ref;
void sl_test_attn_reference(sl_test_attn_ref *r, int batch, int seq, int h, int kv, int d, int gw,
                            const float *q, const float *k, const float *v, const float *g,
                            const float *dy, const int32_t *seg, float scale);
void sl_test_attn_ref_free(sl_test_attn_ref *r);
/* max |got - want| / max(max |want|, floor); NaN in got counts as infinitely wrong. */
double sl_test_rel_err(const float *got, const float *want, int64_t n, double floor);

/* splitmix64 stream for test data: the next 64-bit value, and a uniform double in [0, 1). */
uint64_t sl_test_rand_u64(uint64_t *state);
double sl_test_rand_unif(uint64_t *state);

/* Deterministic uniform [lo, hi) and normal(0, std) fills. */
void sl_test_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed);
void sl_test_fill_normal(float *x, int64_t n, float std, uint64_t seed);

/* A CPU tensor initialised from host data (copied). */
sl_tensor *sl_test_tensor(sl_dtype dt, int ndim, const int64_t *shape, const void *host);
/* Runs a reduction op that writes a device scalar (sl_op_sum, sl_op_sumsq,
 * sl_op_sigmoid_mean) on x and returns the scalar's value. */
double sl_test_op_scalar(void (*op)(sl_tensor *out, const sl_tensor *x), const sl_tensor *x);
/* A host copy of a tensor's contents (malloc'ed; caller frees). */
float *sl_test_host_f32(const sl_tensor *t);

/* Max of |a-b| / (atol + rtol*|b|) over n elements; <= 1 means "within tolerance".
 * Prints the worst element when `label` is not NULL and the result exceeds 1. */
double sl_test_compare(const char *label, const float *a, const float *b, int64_t n, double atol,
                       double rtol);

/*
 * An fp32 scatter-add summed in an order the test does not know (float atomics, a reduction
 * tree): out[r] = dst0[r] + sum of src[i] over the i with idx[i] == r (rows of c floats;
 * indices outside [0, rows) dropped). Each element of `got` is compared with the exact sum
 * (accumulated in double) within the bound of fp32 summation in any order and any tree
 * (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2):
 *     |got - exact| <= gamma(k - 1) * sum |x_j|,  gamma(m) = m u / (1 - m u),  u = 2^-24,
 * k the element's summand count (dst0 included) and x_j its summands. The bound is derived
 * from the summands alone, so it holds for 2 terms as for 3000 and cannot be met by luck.
 * Returns the largest |got - exact| / bound over the elements (<= 1 passes; an element with
 * bound 0 - all summands zero - must be exactly 0), printing the worst with `label`.
 */
double sl_test_check_scatter_sum(const char *label, const float *got, const float *dst0,
                                 const float *src, const int32_t *idx, int64_t rows, int64_t m,
                                 int64_t c);

/*
 * Central finite differences: for up to `max_checks` coordinates i of x (spread over the
 * whole array), computes (f(x + h e_i) - f(x - h e_i)) / 2h with f = loss(user) evaluated in
 * double after x changed, and compares with grad[i]. Returns the number of coordinates whose
 * error exceeded atol + rtol * |numeric|, printing each with `label`.
 */
int sl_test_fd_check(const char *label, float *x, const float *grad, int64_t n,
                     double (*loss)(void *user), void *user, double h, double atol, double rtol,
                     int max_checks);

/* A small gated-attention MoE for model-level tests: vocab 40, hidden 32, 2 layers,
 * 4/2 heads x 8, 8 experts top-2 (width 16), dense FFN width 24 for layers marked dense,
 * elementwise gate, init std 0.1. Tests adjust fields from there. */
sl_model_config sl_test_model_config(void);

#endif
