/* model/sampler.c - greedy, temperature, top-k and top-p sampling (see sampler.h). */
#include "model/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

int sl_sampler_check(const sl_sampler_params *p, char *err, size_t errlen) {
    if (!(p->temperature >= 0.0) || !isfinite(p->temperature))
        return sl_fail(err, errlen, "temperature must be a finite number >= 0, got %g",
                       p->temperature);
    if (p->top_k < 0) return sl_fail(err, errlen, "top-k must be >= 0 (0: off), got %d", p->top_k);
    if (!(p->top_p > 0.0 && p->top_p <= 1.0))
        return sl_fail(err, errlen, "top-p must be in (0, 1] (1: off), got %g", p->top_p);
    return 0;
}

void sl_sampler_init(sl_sampler *s, const sl_sampler_params *p, int vocab, uint64_t stream) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->vocab = vocab;
    sl_rng_init(&s->rng, p->seed, stream);
    s->prob = sl_xmalloc((size_t)vocab * sizeof(double));
    s->idx = sl_xmalloc((size_t)vocab * sizeof(int32_t));
}

void sl_sampler_free(sl_sampler *s) {
    free(s->prob);
    free(s->idx);
    memset(s, 0, sizeof *s);
}

/* Most probable first, then the lower id: a total order, so the result never depends on the
 * sort algorithm. */
static int by_prob(const void *a, const void *b, void *user) {
    const double *prob = user;
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (prob[i] != prob[j]) return prob[i] > prob[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static int32_t argmax(const float *logits, int vocab) {
    int32_t best = 0;
    float bv = -INFINITY;
    for (int32_t i = 0; i < vocab; i++)
        if (logits[i] > bv) bv = logits[i], best = i; /* NaN never wins */
    return best;
}

/* Candidates into s->idx [0, n) and their unnormalized probabilities s->prob[id]; sorted
 * (most probable first) only when top-k or top-p needed it. *total: their sum. */
static int candidates(sl_sampler *s, const float *logits, double *total, int *sorted) {
    const int v = s->vocab;
    double mx = -INFINITY;
    for (int i = 0; i < v; i++)
        if (logits[i] > mx) mx = logits[i];
    int n = 0;
    for (int i = 0; i < v; i++) {
        const double z = isnan(logits[i]) ? -INFINITY : ((double)logits[i] - mx) / s->p.temperature;
        s->prob[i] = exp(z);
        if (s->prob[i] > 0.0) s->idx[n++] = i;
    }
    *sorted = 0;
    if (n == 0) { /* every logit -inf or NaN: the first token, as greedy would pick */
        s->idx[0] = 0, s->prob[0] = 1.0, *total = 1.0;
        return 1;
    }
    if ((s->p.top_k > 0 && s->p.top_k < n) || s->p.top_p < 1.0) {
        qsort_r(s->idx, (size_t)n, sizeof *s->idx, by_prob, s->prob);
        *sorted = 1;
        if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += s->prob[s->idx[i]];
    if (s->p.top_p < 1.0) {
        /* the smallest prefix reaching top_p of the mass (a relative 1e-12 of slack, so that
         * a boundary hit exactly in decimal, 0.4 + 0.3 for 0.7, is reached despite rounding) */
        const double want = s->p.top_p * sum * (1.0 - 1e-12);
        double cum = 0.0;
        int keep = 0;
        while (keep < n && cum < want) cum += s->prob[s->idx[keep++]];
        n = keep > 0 ? keep : 1;
        sum = 0.0;
        for (int i = 0; i < n; i++) sum += s->prob[s->idx[i]];
    }
    *total = sum;
    return n;
}

int32_t sl_sampler_next(sl_sampler *s, const float *logits) {
    if (s->p.temperature == 0.0) return argmax(logits, s->vocab);
    double total;
    int sorted;
    const int n = candidates(s, logits, &total, &sorted);
    const double u = sl_rng_uniform(&s->rng) * total;
    double cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += s->prob[s->idx[i]];
        if (u < cum) return s->idx[i];
    }
    return s->idx[n - 1]; /* u within rounding of the total */
}

int sl_sampler_support(sl_sampler *s, const float *logits, int32_t *ids, double *probs) {
    if (s->p.temperature == 0.0) {
        ids[0] = argmax(logits, s->vocab), probs[0] = 1.0;
        return 1;
    }
    double total;
    int sorted;
    const int n = candidates(s, logits, &total, &sorted);
    if (!sorted) qsort_r(s->idx, (size_t)n, sizeof *s->idx, by_prob, s->prob);
    for (int i = 0; i < n; i++) ids[i] = s->idx[i], probs[i] = s->prob[s->idx[i]] / total;
    return n;
}
