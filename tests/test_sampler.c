/*
 * tests/test_sampler.c - model/sampler.c: greedy, temperature, top-k and top-p on tiny
 * vocabularies with exact expectations.
 *
 *   - greedy: the largest logit, the lowest id among equal ones, NaN never chosen;
 *   - the support (sl_sampler_support) is exactly the expected set, with the renormalized
 *     softmax(logits / T) probabilities, for top-k, top-p (either side of a boundary),
 *     both together, and temperatures 1, 0.5 and 3;
 *   - 40000 draws land only in the support, each candidate's count within 5 standard deviations
 *     of its expectation (a binomial bound, so a correct sampler fails about once in 1.7 million
 *     runs; the seeds are fixed, so the test is deterministic);
 *   - a seed and stream give the same tokens twice; another seed or stream other tokens;
 *   - bad parameters are refused, naming the parameter.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/sampler.h"
#include "tests/test_util.h"

enum { V = 6 };

/* logits whose softmax at T = 1 is 0.4, 0.3, 0.15, 0.1, 0.05, 0 (the last: -inf) */
static const float k_logits[V] = {-0.91629073f, -1.2039728f, -1.89712f,
                                  -2.3025851f,  -2.9957323f, -INFINITY};

static void expect_support(const char *what, const sl_sampler_params *p, const float *logits,
                           const int32_t *want, int nwant) {
    sl_sampler s;
    sl_sampler_init(&s, p, V, 0);
    int32_t ids[V];
    double probs[V];
    const int n = sl_sampler_support(&s, logits, ids, probs);
    bool same = n == nwant;
    for (int i = 0; same && i < n; i++) same = ids[i] == want[i];
    CHECK(same, "%s: support of %d tokens (first %d), want %d (first %d)", what, n, (int)ids[0],
          nwant, (int)want[0]);
    /* probabilities: softmax(logits / T) over the support, renormalized */
    double z = 0.0, sum = 0.0;
    for (int i = 0; i < n; i++) z += exp((double)logits[ids[i]] / p->temperature);
    for (int i = 0; same && i < n; i++) {
        const double w = exp((double)logits[ids[i]] / p->temperature) / z;
        CHECK(fabs(probs[i] - w) < 1e-12, "%s: p[%d] = %.15g, want %.15g", what, (int)ids[i],
              probs[i], w);
        sum += probs[i];
    }
    CHECK(fabs(sum - 1.0) < 1e-12, "%s: probabilities sum to %.15g", what, sum);
    /* draws: only the support, in proportion */
    enum { N = 40000 };
    int count[V] = {0};
    for (int k = 0; k < N; k++) count[sl_sampler_next(&s, logits)]++;
    for (int id = 0; id < V; id++) {
        double pw = 0.0;
        for (int i = 0; i < n; i++) pw = ids[i] == id ? probs[i] : pw;
        const double mean = N * pw, sd = sqrt(N * pw * (1.0 - pw));
        if (pw == 0.0)
            CHECK(count[id] == 0, "%s: token %d outside the support drawn %d times", what, id,
                  count[id]);
        else
            CHECK(fabs(count[id] - mean) <= 5.0 * sd, "%s: token %d drawn %d times, expected %.0f",
                  what, id, count[id], mean);
    }
    sl_sampler_free(&s);
}

static void greedy(void) {
    const sl_sampler_params p = {.temperature = 0.0, .top_p = 1.0};
    sl_sampler s;
    sl_sampler_init(&s, &p, V, 0);
    CHECK(sl_sampler_next(&s, k_logits) == 0, "greedy: not the largest logit");
    const float ties[V] = {0.5f, 2.0f, NAN, 2.0f, -1.0f, 1.0f};
    CHECK(sl_sampler_next(&s, ties) == 1, "greedy: ties go to the lower id, NaN never wins");
    const float first_nan[V] = {NAN, -3.0f, -2.0f, -9.0f, -2.5f, -2.0f};
    CHECK(sl_sampler_next(&s, first_nan) == 2, "greedy with a NaN first");
    sl_sampler_free(&s);
}

static void supports(void) {
    const int32_t all5[] = {0, 1, 2, 3, 4};
    sl_sampler_params p = {.temperature = 1.0, .top_p = 1.0, .seed = 3};
    expect_support("plain (the -inf token excluded)", &p, k_logits, all5, 5);
    p.top_k = 3;
    expect_support("top-k 3", &p, k_logits, all5, 3);
    p.top_k = 1;
    expect_support("top-k 1", &p, k_logits, all5, 1);
    p.top_k = 10;
    expect_support("top-k above the vocabulary", &p, k_logits, all5, 5);
    p.top_k = 0, p.top_p = 0.65;
    expect_support("top-p 0.65 (0.4 + 0.3 reach it)", &p, k_logits, all5, 2);
    p.top_p = 0.71;
    expect_support("top-p 0.71", &p, k_logits, all5, 3);
    p.top_p = 0.05;
    expect_support("top-p below the largest", &p, k_logits, all5, 1);
    p.top_k = 3, p.top_p = 0.8; /* of the 0.85 top-k keeps: 0.68, which 0.4 + 0.3 reach */
    expect_support("top-k 3 then top-p 0.8", &p, k_logits, all5, 2);
    p.top_k = 4, p.top_p = 0.75; /* of 0.95: 0.7125, which 0.4 + 0.3 miss */
    expect_support("top-k 4 then top-p 0.75", &p, k_logits, all5, 3);
    p.top_k = 0, p.top_p = 1.0, p.temperature = 0.5;
    expect_support("temperature 0.5", &p, k_logits, all5, 5);
    p.temperature = 3.0;
    expect_support("temperature 3", &p, k_logits, all5, 5);
    const float tie[V] = {1.0f, 2.0f, 2.0f, 0.0f, 2.0f, -1.0f};
    const int32_t tie_order[] = {1, 2, 4, 0, 3, 5};
    p.temperature = 1.0, p.top_k = 2;
    expect_support("top-k among equal logits (lower ids first)", &p, tie, tie_order, 2);
}

static void reproducible(void) {
    const sl_sampler_params p = {.temperature = 1.0, .top_k = 4, .top_p = 0.95, .seed = 42};
    sl_sampler a, b, c, d;
    sl_sampler_init(&a, &p, V, 7);
    sl_sampler_init(&b, &p, V, 7);
    sl_sampler_init(&c, &p, V, 8); /* another stream */
    sl_sampler_params p2 = p;
    p2.seed = 43;
    sl_sampler_init(&d, &p2, V, 7);
    int same_ab = 0, same_ac = 0, same_ad = 0;
    for (int i = 0; i < 200; i++) {
        const int32_t x = sl_sampler_next(&a, k_logits), y = sl_sampler_next(&b, k_logits);
        same_ab += x == y;
        same_ac += x == sl_sampler_next(&c, k_logits);
        same_ad += x == sl_sampler_next(&d, k_logits);
    }
    CHECK(same_ab == 200, "the same seed and stream agreed on %d of 200 tokens", same_ab);
    CHECK(same_ac < 150, "another stream agreed on %d of 200 tokens", same_ac);
    CHECK(same_ad < 150, "another seed agreed on %d of 200 tokens", same_ad);
    sl_sampler_free(&a), sl_sampler_free(&b), sl_sampler_free(&c), sl_sampler_free(&d);
}

static void bad_params(void) {
    char err[256];
    const struct {
        sl_sampler_params p;
        const char *word;
    } bad[] = {{{.temperature = -1, .top_p = 1}, "temperature"},
               {{.temperature = INFINITY, .top_p = 1}, "temperature"},
               {{.temperature = NAN, .top_p = 1}, "temperature"},
               {{.temperature = 1, .top_k = -2, .top_p = 1}, "top-k"},
               {{.temperature = 1, .top_p = 0}, "top-p"},
               {{.temperature = 1, .top_p = 1.5}, "top-p"},
               {{.temperature = 1, .top_p = NAN}, "top-p"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(sl_sampler_check(&bad[i].p, err, sizeof err) != 0 && strstr(err, bad[i].word),
              "bad parameters %zu accepted or not named (%s)", i, err);
    }
    const sl_sampler_params ok = {.temperature = 0, .top_k = 0, .top_p = 1};
    CHECK(sl_sampler_check(&ok, err, sizeof err) == 0, "greedy parameters refused: %s", err);
}

int main(void) {
    greedy();
    supports();
    reproducible();
    bad_params();
    return sl_test_finish("test_sampler");
}
