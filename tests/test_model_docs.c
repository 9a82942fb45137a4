/* tests/test_model_docs.c - sl_model_set_documents (per-document masking, positions restarting
 * at each document) at the model level, forward only on the CPU:
 *   1. A document in the middle of a packed row gives each of its tokens the loss it has at the
 *      start of a row of its own (same tokens, same targets): the earlier document is invisible
 *      and the positions count from the document's start. Without documents it differs.
 *   2. Starts at token 0 only (a document longer than the row) give the same bits as no call.
 *   3. The documents apply to the next forward only.
 */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tests/test_util.h"

enum { SEQ = 16, A = 6 }; /* row 0: document of A tokens, then one of SEQ - A */
#define TOL 1e-5          /* fp32, the same tokens in different tile positions */

static float *losses(sl_model *m, const int32_t *tokens, const int32_t *starts, const int *n) {
    if (starts) sl_model_set_documents(m, starts, n);
    sl_fwd_stats st;
    sl_model_forward(m, tokens, &st);
    return sl_test_host_f32(m->losses);
}

int main(void) {
    sl_model_config cfg = sl_test_model_config();
    char err[256];
    sl_model *m = sl_model_create(&cfg, sl_test_cpu(), NULL, 2, SEQ, NULL, err, sizeof err);
    CHECK(m != NULL, "model create: %s", err);
    if (!m) return sl_test_finish("test_model_docs");
    sl_params_randomize(&m->params, 99);
    /* row 0 = [doc a (A tokens) | doc b (SEQ - A tokens)], target after b: x.
     * row 1 = [doc b | x ...]: b at the start of its own row with the same targets. */
    int32_t tok[2 * (SEQ + 1)];
    uint64_t rng = 5;
    for (int i = 0; i <= SEQ; i++) tok[i] = (int32_t)(sl_test_rand_u64(&rng) % 40);
    for (int i = 0; i <= SEQ; i++)
        tok[SEQ + 1 + i] = i < SEQ - A ? tok[A + i] : (int32_t)(sl_test_rand_u64(&rng) % 40);
    tok[SEQ + 1 + SEQ - A] = tok[SEQ]; /* b's last target */
    int32_t starts[2 * (SEQ + 1)] = {0, A};
    starts[SEQ + 1] = 0, starts[SEQ + 2] = SEQ - A;
    const int n[2] = {2, 2};

    float *with = losses(m, tok, starts, n);
    int bad = 0;
    for (int i = 0; i < SEQ - A; i++)
        bad += fabsf(with[A + i] - with[SEQ + i]) > TOL * (1.0f + fabsf(with[SEQ + i]));
    CHECK(bad == 0, "%d of %d tokens of a packed document differ from the document alone", bad,
          SEQ - A);
    float *plain = losses(m, tok, NULL, NULL); /* 3: the documents were used up */
    bad = 0;
    for (int i = 0; i < SEQ - A; i++)
        bad += fabsf(plain[A + i] - plain[SEQ + i]) > TOL * (1.0f + fabsf(plain[SEQ + i]));
    CHECK(bad > 0, "without documents the packed document's losses should differ");

    /* 2: starts at 0 only == no call, to the bit */
    const int32_t zero_starts[2 * (SEQ + 1)] = {0};
    const int one[2] = {1, 0};
    float *z = losses(m, tok, zero_starts, one);
    CHECK(memcmp(z, plain, sizeof(float) * 2 * SEQ) == 0,
          "document starts at token 0 only must give the bits of plain causal attention");

    free(with), free(plain), free(z);
    sl_model_free(m);
    return sl_test_finish("test_model_docs");
}
